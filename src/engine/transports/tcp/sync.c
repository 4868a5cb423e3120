/*
 * sync.c - the tcp transport's path for a caller that waits.
 *
 * cr_engine_transfer_sync submits one task and waits for it at once.
 * Through the lanes its reply costs two hand-offs on this side: the reply
 * wakes the lane's worker, which completes the task and wakes the caller.
 * Here the calling thread writes the request on a connection it holds for
 * the call and blocks in recv for the reply itself, so a small read costs
 * the wake-ups of a plain socket ping-pong: the target's and the caller's.
 *
 * Connections: per peer at most SYNC_MAX_CONNS, opened on demand by the
 * caller (connect and the CHALLENGE/HELLO handshake of a data connection,
 * bounded by the engine's connect timeout) and kept in an idle list between
 * calls. When every one is busy the task goes through the lanes instead, and
 * so does a task the lanes cut in two (1 MiB and more: cre_tcp_slice_of), which
 * two lanes at once carry faster than one connection.
 * A connection on which anything went wrong is closed, so that a late reply
 * is never read as the answer to a later request. A pooled connection found
 * closed by the peer before any byte of the reply arrived (the peer
 * restarted, or dropped an idle connection) is replaced once: reading or
 * writing one range again is harmless while its caller still waits.
 *
 * Time: the sockets' SO_RCVTIMEO and SO_SNDTIMEO are SYNC_TICK_MS, so a
 * blocked caller looks at its deadline and at the engine's shutdown at that
 * pace. A READ's payload is received straight into the caller's memory; on
 * a failed READ that memory's content is unspecified, as through the lanes.
 *
 * Polling (base/spin.h, the engine's spin mode from CRESCENT_BUSY_POLL_US): before a caller
 * blocks for its reply it tries recv without waiting for the connection's spin window (by
 * default adaptive: ~20 µs while replies come within it), as cr_batch_wait polls before it
 * sleeps, so a reply that comes within it costs the caller no wake-up.
 *
 * Peer restarts: a connection answers for one instance. A task validated
 * against another instance's descriptor fails with CR_ERR_CONNECTION (the
 * descriptor is marked stale, and the next submit fetches it again), as
 * the lanes do.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/net.h"
#include "engine/transports/tcp/tcp.h"

#define SYNC_MAX_CONNS 16  /* per peer; more concurrent callers use the lanes */
#define SYNC_TICK_MS   100 /* how often a blocked caller checks deadline and shutdown */

static void conn_close(tcp_sync_conn *c)
{
    close(c->fd);
    crp_buf_free(&c->body);
    free(c);
}

/* Connect and handshake within the connect timeout, and within the
 * caller's own deadline when that comes first. */
static int conn_open(cr_engine *e, cre_peer *peer, uint64_t caller_deadline, tcp_sync_conn **out)
{
    uint64_t now = crb_now_ns();
    uint64_t deadline = now + (uint64_t)e->connect_timeout_ms * 1000000ull;
    if (caller_deadline < deadline)
        deadline = caller_deadline;
    if (deadline <= now)
        return crb_error(CR_ERR_TIMEOUT, "no time left to connect to %s", peer->name);
    int timeout_ms = (int)((deadline - now + 999999) / 1000000);
    int fd = crb_connect(peer->host, peer->port, timeout_ms);
    if (fd < 0)
        return crb_error(fd, "connecting to %s for a synchronous request: %s", peer->name,
                         cr_last_error_message());
    struct timeval tick = {.tv_sec = 0, .tv_usec = SYNC_TICK_MS * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof(tick));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tick, sizeof(tick));
    crp_buf scratch = {0};
    uint64_t instance = 0;
    int rc = cre_handshake(e, fd, CRP_ROLE_DATA, deadline, peer->name, &scratch, &instance);
    crp_buf_free(&scratch);
    if (rc < 0) {
        rc = crb_error(rc, "handshake of a synchronous connection to %s: %s", peer->name,
                       cr_last_error_message());
        goto err_close_fd;
    }
    tcp_sync_conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "a synchronous connection to %s", peer->name);
        goto err_close_fd;
    }
    c->fd = fd;
    c->instance = instance;
    crb_spin_init(&c->spin, e->spin_mode_ns);
    pthread_mutex_lock(&peer->lock);
    bool restarted = peer->desc != NULL && peer->desc->d.instance != instance;
    pthread_mutex_unlock(&peer->lock);
    if (restarted)
        cre_peer_mark_stale(peer);
    *out = c;
    return 0;

err_close_fd:
    close(fd);
    return rc;
}

/* Why a blocked send or receive should stop waiting, or 0 to go on. */
static int stop_waiting(cr_engine *e, const cre_peer *peer, uint64_t deadline, const char *what)
{
    if (atomic_load(&e->shutting_down))
        return crb_error(CR_ERR_SHUTDOWN, "%s %s: the engine is being destroyed", what, peer->name);
    if (crb_now_ns() >= deadline)
        return crb_error(CR_ERR_TIMEOUT, "%s %s: no progress within the request timeout (%u ms)",
                         what, peer->name, e->request_timeout_ms);
    return 0;
}

/* Advance iov[0..*n) past `done` bytes. */
static void iov_advance(struct iovec **iov, int *n, size_t done)
{
    while (*n > 0 && done >= (*iov)->iov_len) {
        done -= (*iov)->iov_len;
        (*iov)++;
        (*n)--;
    }
    if (*n > 0) {
        (*iov)->iov_base = (uint8_t *)(*iov)->iov_base + done;
        (*iov)->iov_len -= done;
    }
}

static int send_all(cr_engine *e, tcp_sync_conn *c, const cre_peer *peer, struct iovec *iov, int n,
                    uint64_t deadline, bool *peer_closed)
{
    size_t sent = 0;
    while (n > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t k = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int rc = stop_waiting(e, peer, deadline, "sending to");
                if (rc < 0)
                    return rc;
                continue;
            }
            *peer_closed = sent == 0 && (errno == EPIPE || errno == ECONNRESET);
            return crb_error(CR_ERR_CONNECTION, "sending a request to %s: %s", peer->name,
                             strerror(errno));
        }
        sent += (size_t)k;
        iov_advance(&iov, &n, (size_t)k);
    }
    return 0;
}

/* Receive into iov until `want` bytes arrived (want <= the iov's total). */
static int recv_until(cr_engine *e, tcp_sync_conn *c, const cre_peer *peer, struct iovec **iov,
                      int *n, size_t *got, size_t want, uint64_t deadline, bool *peer_closed)
{
    if (*got >= want)
        return 0; /* (the header's recv brought the payload too) */
    uint64_t window = crb_spin_window(&c->spin);
    uint64_t spin_until = window > 0 ? crb_now_ns() + window : 0;
    while (*got < want) {
        struct msghdr mh = {.msg_iov = *iov, .msg_iovlen = (size_t)*n};
        bool spin = spin_until != 0 && crb_now_ns() < spin_until;
        if (!spin && spin_until != 0) {
            crb_spin_done(&c->spin, false); /* the window ran out: block */
            spin_until = 0;
        }
        ssize_t k = recvmsg(c->fd, &mh, spin ? MSG_DONTWAIT : 0);
        if (k < 0 && spin && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            crb_spin_pause();
            continue; /* nothing yet: spin on until the bound, then block */
        }
        if (spin) { /* the window closes: on data (the rest follows at once or is waited for),
                     * or on the connection's end or failure */
            crb_spin_done(&c->spin, k > 0);
            spin_until = 0;
        }
        if (k == 0) {
            *peer_closed = *got == 0;
            return crb_error(CR_ERR_CONNECTION, "%s closed the connection before its reply",
                             peer->name);
        }
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int rc = stop_waiting(e, peer, deadline, "waiting for a reply from");
                if (rc < 0)
                    return rc;
                continue;
            }
            *peer_closed = *got == 0 && errno == ECONNRESET;
            return crb_error(CR_ERR_CONNECTION, "receiving a reply from %s: %s", peer->name,
                             strerror(errno));
        }
        *got += (size_t)k;
        iov_advance(iov, n, (size_t)k);
    }
    return 0;
}

/* One request and its reply. Returns 0 when the connection may be used
 * again (*status: the task's result, perhaps the peer's refusal), or the
 * connection's failure (then also the task's). */
static int exchange(cr_engine *e, tcp_sync_conn *c, const cre_peer *peer, cre_task *t,
                    uint64_t deadline, int *status, bool *peer_closed)
{
    bool write = t->opcode == CR_OP_WRITE;
    uint8_t head[CRP_HEADER_SIZE + 32];
    crp_buf *body = &c->body;
    crp_buf_reset(body);
    crp_data_req req = {.addr = t->remote_addr, .length = t->length};
    int rc = crp_data_req_encode(&req, body);
    if (rc < 0)
        return rc;
    crp_header h = {.version = CRP_VERSION,
                    .type = (uint8_t)(write ? CRP_WRITE_REQ : CRP_READ_REQ),
                    .body_len = (uint32_t)body->len,
                    .request_id = ++c->next_request_id,
                    .data_len = write ? t->length : 0};
    crp_header_encode(&h, head);
    memcpy(head + CRP_HEADER_SIZE, body->data, body->len); /* 19 bytes at most */
    size_t head_len = CRP_HEADER_SIZE + body->len;
    struct iovec out[2] = {{head, head_len}, {t->local, (size_t)t->length}};
    rc = send_all(e, c, peer, out, write ? 2 : 1, deadline, peer_closed);
    if (rc < 0)
        return rc;

    /* The reply's header, and for a READ its payload straight behind it. */
    uint8_t rhead[CRP_HEADER_SIZE];
    struct iovec in_store[2] = {{rhead, sizeof(rhead)}, {t->local, (size_t)t->length}};
    struct iovec *in = in_store;
    int n_in = write ? 1 : 2;
    size_t got = 0;
    rc = recv_until(e, c, peer, &in, &n_in, &got, CRP_HEADER_SIZE, deadline, peer_closed);
    if (rc < 0)
        return rc;
    crp_header r;
    rc = crp_header_decode(rhead, &r);
    if (rc < 0)
        return crb_error(rc, "reply from %s: %s", peer->name, cr_last_error_message());
    rc = cre_tcp_sync_reply_check(&h, &r, t->length, peer->name, status);
    if (rc < 0)
        return rc;
    uint64_t want_data = *status == 0 && !write ? t->length : 0;
    if (got > CRP_HEADER_SIZE + want_data)
        return crb_error(CR_ERR_MALFORMED_FRAME, "%s sent more than its reply", peer->name);
    return recv_until(e, c, peer, &in, &n_in, &got, CRP_HEADER_SIZE + want_data, deadline,
                      peer_closed);
}

int cre_tcp_sync_reply_check(const crp_header *req, const crp_header *rep, uint64_t length,
                             const char *peer, int *status)
{
    if (rep->type == CRP_ERROR)
        return crb_error(rep->status < 0 ? rep->status : CR_ERR_REMOTE,
                         "%s refused the request (%s)", peer, cr_status_name(rep->status));
    bool write = req->type == CRP_WRITE_REQ;
    int want_type = write ? CRP_WRITE_ACK : CRP_READ_RESP;
    if (rep->type != want_type || rep->request_id != req->request_id || rep->body_len != 0)
        return crb_error(
            CR_ERR_MALFORMED_FRAME, "%s answered %s %llu with %s %llu (a %u-byte body)", peer,
            crp_type_name(req->type), (unsigned long long)req->request_id, crp_type_name(rep->type),
            (unsigned long long)rep->request_id, rep->body_len);
    uint64_t want_data = rep->status == 0 && !write ? length : 0;
    if (rep->data_len != want_data)
        return crb_error(CR_ERR_MALFORMED_FRAME,
                         "%s's %s carries %llu bytes for a %llu-byte request (status %d)", peer,
                         crp_type_name(rep->type), (unsigned long long)rep->data_len,
                         (unsigned long long)length, (int)rep->status);
    *status = rep->status > 0 ? CR_ERR_REMOTE : rep->status;
    return 0;
}

bool cre_tcp_sync_run(cre_tp *tp, tcp_peer *p, const cre_route *r, cre_task *t,
                      uint64_t deadline_ns)
{
    cr_engine *e = tp->engine;
    if (!t->batch->caller_waits || !cre_kind_is_host(t->local_buf->kind) ||
        cre_tcp_slice_of(e, p, t) < t->length)
        return false;
    if (t->batch->caller_deadline_ns < deadline_ns)
        deadline_ns = t->batch->caller_deadline_ns;
    tcp_sync_conn *c = NULL;
    pthread_mutex_lock(&p->sync_lock);
    if (p->sync_idle != NULL) {
        c = p->sync_idle;
        p->sync_idle = c->next;
    } else if (p->sync_open < SYNC_MAX_CONNS) {
        p->sync_open++; /* a slot for the connection opened below */
    } else {
        pthread_mutex_unlock(&p->sync_lock);
        return false;
    }
    pthread_mutex_unlock(&p->sync_lock);

    tcp_engine *te = tp->priv;
    bool pooled = c != NULL;
    int status = 0;
    for (;;) {
        if (c == NULL) {
            status = conn_open(e, r->peer, deadline_ns, &c);
            if (status < 0)
                break;
            atomic_fetch_add(&te->sync_connects, 1);
        }
        if (c->instance != r->peer_instance) {
            if (pooled) { /* opened before the peer restarted: try a fresh one */
                conn_close(c);
                c = NULL;
                pooled = false;
                continue;
            }
            cre_peer_mark_stale(r->peer);
            status = crb_error(CR_ERR_CONNECTION,
                               "%s is instance %llx now; the request was checked against %llx",
                               r->peer->name, (unsigned long long)c->instance,
                               (unsigned long long)r->peer_instance);
            break;
        }
        bool peer_closed = false;
        int rc = exchange(e, c, r->peer, t, deadline_ns, &status, &peer_closed);
        if (rc < 0) {
            conn_close(c);
            c = NULL;
            if (peer_closed && pooled) {
                pooled = false;
                continue;
            }
            status = rc;
        }
        break;
    }
    pthread_mutex_lock(&p->sync_lock);
    if (c != NULL) {
        c->next = p->sync_idle;
        p->sync_idle = c;
    } else {
        p->sync_open--;
    }
    pthread_mutex_unlock(&p->sync_lock);
    atomic_fetch_add(&te->sync_transfers, 1);
    if (status < 0) /* the wait reports it (this thread is its only user) */
        snprintf(t->batch->caller_error, sizeof(t->batch->caller_error), "%s",
                 cr_last_error_message());
    atomic_store(&t->slices_left, 1);
    cre_task_slice_done(t, status, status == 0 ? t->length : 0);
    return true;
}

void cre_tcp_sync_fini(tcp_peer *p)
{
    while (p->sync_idle != NULL) {
        tcp_sync_conn *c = p->sync_idle;
        p->sync_idle = c->next;
        conn_close(c);
    }
    p->sync_open = 0;
}
