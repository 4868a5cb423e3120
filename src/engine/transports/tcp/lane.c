/*
 * lane.c - the tcp transport's initiator side.
 *
 * A peer has lanes_per_peer lanes; each lane is one persistent TCP
 * connection owned by one worker thread. Submitting threads cut a task into
 * slices of at most slice_size bytes and stripe them over the peer's lanes
 * (a lone task of 1 MiB up to two slices is cut in halves, so that two lanes
 * carry it: cre_tcp_slice_of);
 * once a cr_batch_submit has queued its whole run of tasks to the peer
 * (cre_tcp_submit_flush), per lane: if the lane is READY and its io_lock is
 * free, the submitting thread writes the slices itself (a small request
 * costs no wake-up of the initiator's worker: the caller sends, the target
 * answers, the worker that receives the answer completes the task and wakes
 * the caller); otherwise it wakes the lane's worker. Whatever a submitter could
 * not finish (EAGAIN, a lane not yet connected) the worker takes over. A
 * submitter never closes a socket: a failed write marks the lane and wakes
 * the worker, which fails it as it fails any broken connection. Frames are
 * read with the shared frame reader (proto/frame_reader.h).
 *
 * The peer's address is resolved by the submitting thread (once, and again
 * after a failed connect), never by a worker: a slow resolver must not
 * stall a worker that serves every other peer.
 *
 * Lane lifecycle (worker thread, under the lane's io_lock):
 *   IDLE --(slices queued, back-off elapsed)--> CONNECTING (non-blocking)
 *   --> WAIT_CHALLENGE --(send HELLO)--> WAIT_ACK --> READY
 * Any failure closes the socket and returns to IDLE: slices already on the
 * wire fail with the cause (nothing can reach their memory afterwards,
 * because the socket is gone); a failed connect fails every queued slice at
 * once and arms an exponential back-off (50 ms .. 2 s) during which new
 * slices fail fast.
 *
 * READY lanes pipeline: slices are written back to back (several per
 * sendmsg), and responses come back in order, so the response at hand always
 * belongs to the oldest slice in flight. READ payloads are received straight
 * into the slice's local memory; WRITE payloads are sent straight from it.
 *
 * Deadlines: a slice past its deadline that has not started is failed with
 * CR_ERR_TIMEOUT; if one has started, the connection is closed and every
 * started slice fails with CR_ERR_TIMEOUT.
 *
 * Peer restarts: HELLO_ACK carries the peer's instance id. Slices validated
 * against another instance's descriptor fail instead of touching the new
 * process's memory, and the peer's descriptor is marked stale.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/transports/tcp/tcp.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000
#define MAX_IOV        64
#define LANE_FILL      (256u * 1024) /* bytes of small slices kept on one lane */

static tcp_lane *lane_of(crb_io *io)
{
    return (tcp_lane *)((char *)io - offsetof(tcp_lane, io));
}

static tcp_engine *engine_of(tcp_lane *l)
{
    return cre_engine_tp(l->peer->engine, "tcp")->priv;
}

/* Complete a slice now (no lane lock held: completing wakes the caller). */
static void slice_complete(tcp_slice *s)
{
    /* A canceled task's slices that were already on the wire complete
     * normally: their bytes arrived. Only unstarted slices end CANCELED. */
    cre_task_slice_done(s->task, s->status, s->status == 0 ? s->length : 0);
    free(s);
}

/* A slice is done: it is completed once the lane's io_lock is released
 * (lane_unlock), so the caller it wakes does not find the lane locked and
 * have to wake the worker to send its next request. */
static void slice_finish(tcp_lane *l, tcp_slice *s, int status)
{
    s->status = status;
    s->next = NULL;
    if (l->done_tail)
        l->done_tail->next = s;
    else
        l->done_head = s;
    l->done_tail = s;
}

/* Release the lane's io_lock, then complete the slices finished under it. */
static void lane_unlock(tcp_lane *l)
{
    tcp_slice *s = l->done_head;
    l->done_head = l->done_tail = NULL;
    pthread_mutex_unlock(&l->io_lock);
    while (s != NULL) {
        tcp_slice *next = s->next;
        slice_complete(s);
        s = next;
    }
}

static void list_push(tcp_slice **head, tcp_slice **tail, tcp_slice *s)
{
    s->next = NULL;
    if (*tail)
        (*tail)->next = s;
    else
        *head = s;
    *tail = s;
}

static void fail_list(tcp_lane *l, tcp_slice **head, tcp_slice **tail, int status)
{
    tcp_slice *s = *head;
    *head = *tail = NULL;
    while (s != NULL) {
        tcp_slice *next = s->next;
        slice_finish(l, s, status);
        s = next;
    }
}

/* A lone task is split in two from this size on: below it, the second lane's wake-ups cost
 * more than the copy it takes over (measured: 256 and 512 KiB gets lost 10-35 %, 1 MiB gets
 * gained 20-50 %; docs/PERFORMANCE.md, "A lone 1 MiB request over two lanes"). */
#define TCP_SPLIT_MIN (1ull << 20)

uint64_t cre_tcp_slice_of(const cr_engine *e, const tcp_peer *p, const cre_task *t)
{
    if (!t->alone || p->n_lanes < 2 || t->length < TCP_SPLIT_MIN || t->length >= 2 * e->slice_size)
        return e->slice_size;
    uint64_t half = (t->length / 2 + 4095) & ~4095ull; /* two slices, the second no longer */
    return half <= e->slice_size ? half : e->slice_size;
}

/* Bytes of slice i of t (every slice is `slice` bytes but the last). */
static uint64_t slice_length(uint64_t slice, const cre_task *t, uint64_t i)
{
    uint64_t off = i * slice;
    return t->length - off < slice ? t->length - off : slice;
}

/* What a slice counts against its lane's fill budget. */
static uint64_t lane_charge(uint64_t length)
{
    return length < LANE_FILL ? length : LANE_FILL;
}

/* Resolve the peer's address unless it is known and fresh (submitting
 * thread, no lock held across the resolver). A failure with an address
 * still known keeps that one. */
static int peer_resolve(tcp_peer *p, const cre_peer *peer)
{
    pthread_mutex_lock(&p->addr_lock);
    bool known = p->addr_len > 0;
    pthread_mutex_unlock(&p->addr_lock);
    if (known && !atomic_load(&p->addr_stale))
        return 0;
    atomic_store(&p->addr_stale, false);
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    int rc = crb_resolve(peer->host, peer->port, &ss, &sl);
    if (rc < 0)
        return known ? 0 : rc;
    pthread_mutex_lock(&p->addr_lock);
    p->addr = ss;
    p->addr_len = sl;
    pthread_mutex_unlock(&p->addr_lock);
    return 0;
}

static void lane_take_queue(tcp_lane *l, uint64_t now);
static int lane_flush(tcp_lane *l);

/* The submitting thread writes a READY, idle lane's socket itself. Returns
 * true when it did (the worker need not be woken): the slices are on the
 * wire or, after EAGAIN, in the send list with EPOLLOUT armed. */
static bool lane_send_direct(tcp_lane *l)
{
    if (pthread_mutex_trylock(&l->io_lock) != 0)
        return false; /* the worker (or another submitter) is at it */
    bool done = false;
    if (l->state == LANE_READY && !l->send_failed && l->send_head == NULL) {
        lane_take_queue(l, crb_now_ns());
        if (l->send_head != NULL && lane_flush(l) < 0)
            l->send_failed = true; /* the worker closes it */
        done = !l->send_failed;
    }
    lane_unlock(l);
    return done;
}

void cre_tcp_submit_flush(cre_tp *tp, cre_peer *peer)
{
    cr_engine *e = tp->engine;
    tcp_peer *p = cre_peer_tp(peer, tp);
    tcp_lane *queued[64];
    size_t n = 0;
    pthread_mutex_lock(&p->queue_lock);
    for (size_t i = 0; i < p->n_lanes && n < 64; i++)
        if (p->lanes[i].queue_head != NULL)
            queued[n++] = &p->lanes[i];
    pthread_mutex_unlock(&p->queue_lock);
    bool kick[64] = {false};
    for (size_t i = 0; i < n; i++)
        if (!lane_send_direct(queued[i]))
            kick[queued[i]->worker->index % 64] = true;
    for (uint32_t w = 0; w < e->n_workers && w < 64; w++)
        if (kick[w])
            cre_worker_kick(&e->workers[w]);
}

int cre_tcp_submit(cre_tp *tp, const cre_route *r, cre_task *t)
{
    cr_engine *e = tp->engine;
    tcp_peer *p = cre_peer_tp(r->peer, tp);
    int rrc = peer_resolve(p, r->peer);
    if (rrc < 0)
        return rrc;
    uint64_t peer_instance = r->peer_instance;
    uint64_t deadline = crb_now_ns() + (uint64_t)e->request_timeout_ms * 1000000ull;
    if (t->batch->caller_waits && cre_tcp_sync_run(tp, p, r, t, deadline))
        return 0; /* carried, and completed, by this thread (sync.c) */
    uint64_t slice = cre_tcp_slice_of(e, p, t);
    uint64_t nslices = (t->length + slice - 1) / slice;
    tcp_slice **made = calloc(nslices, sizeof(*made));
    if (made == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "slicing a %llu-byte request",
                         (unsigned long long)t->length);
    for (uint64_t i = 0; i < nslices; i++) {
        made[i] = malloc(sizeof(tcp_slice));
        if (made[i] == NULL) {
            for (uint64_t j = 0; j < i; j++)
                free(made[j]);
            free(made);
            return crb_error(CR_ERR_NO_MEMORY, "slice %llu of %llu", (unsigned long long)i,
                             (unsigned long long)nslices);
        }
    }
    atomic_store(&t->slices_left, (unsigned)nslices);
    /* Lane choice: each slice is charged min(length, LANE_FILL) bytes and
     * goes to lane (bytes charged before it / LANE_FILL) mod lanes. Slices of
     * LANE_FILL or more stripe one per lane; small ones fill a lane up to
     * LANE_FILL first, so a batch of small requests wakes one worker on each
     * side instead of every lane's. */
    uint64_t charge = 0;
    for (uint64_t i = 0; i < nslices; i++)
        charge += lane_charge(slice_length(slice, t, i));
    uint64_t charged = atomic_fetch_add(&p->lane_bytes, charge);
    bool kick[64] = {false};
    bool host = cre_kind_is_host(t->local_buf->kind);
    pthread_mutex_lock(&p->queue_lock);
    for (uint64_t i = 0; i < nslices; i++) {
        tcp_slice *s = made[i];
        uint64_t off = i * slice;
        s->next = NULL;
        s->task = t;
        s->local = t->local + off;
        s->remote_addr = t->remote_addr + off;
        s->length = slice_length(slice, t, i);
        s->deadline_ns = deadline;
        s->peer_instance = peer_instance;
        s->sent = 0;
        s->head_len = 0;
        s->staged = !cre_kind_is_host(t->local_buf->kind);
        s->win = NULL;
        s->win_start = s->win_end = 0;
        tcp_lane *l = &p->lanes[(charged / LANE_FILL) % p->n_lanes];
        charged += lane_charge(s->length);
        list_push(&l->queue_head, &l->queue_tail, s);
        if (!host) /* device memory is staged by the worker */
            kick[l->worker->index % 64] = true;
    }
    pthread_mutex_unlock(&p->queue_lock);
    free(made);
    /* Host slices leave in cre_tcp_submit_flush, once the caller's whole
     * run of tasks to this peer is queued. */
    for (uint32_t w = 0; w < e->n_workers && w < 64; w++)
        if (kick[w])
            cre_worker_kick(&e->workers[w]);
    return 0;
}

static void lane_close(tcp_lane *l)
{
    if (l->io.fd >= 0) {
        crb_loop_del(&l->io);
        close(l->io.fd);
        l->io.fd = -1;
    }
    l->state = LANE_IDLE;
    crp_reader_reset(&l->reader);
}

/* The connection broke: fail what is on the wire, keep unstarted slices. */
static void lane_conn_failed(tcp_lane *l, int status, bool connect_failed)
{
    bool was_ready = l->state == LANE_READY;
    lane_close(l);
    fail_list(l, &l->flight_head, &l->flight_tail, status);
    /* Partially written slices cannot be resumed on a new connection. */
    tcp_slice *keep_head = NULL, *keep_tail = NULL, *s = l->send_head;
    while (s != NULL) {
        tcp_slice *next = s->next;
        if (s->sent > 0 || connect_failed)
            slice_finish(l, s, status);
        else
            list_push(&keep_head, &keep_tail, s);
        s = next;
    }
    l->send_head = keep_head;
    l->send_tail = keep_tail;
    l->send_failed = false;
    if (connect_failed)
        atomic_store(&l->tpeer->addr_stale, true); /* the next submit resolves again */
    if (connect_failed || !was_ready) {
        l->retry_at_ns = crb_now_ns() + (uint64_t)l->backoff_ms * 1000000ull;
        l->backoff_ms = l->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : l->backoff_ms * 2;
    }
}

/* The lane's stage for direction tx (or rx), opened on first use. */
static int lane_stage(tcp_lane *l, const tcp_slice *s, bool tx, cre_stage **out)
{
    cre_stage **st = tx ? &l->tx_stage : &l->rx_stage;
    if (*st == NULL) {
        if (l->stager == NULL)
            l->stager = cre_tcp_stager(l->peer->engine, s->task->local_buf->kind, &l->sops);
        if (l->stager == NULL)
            return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED, "no stager for %s memory",
                             cr_mem_kind_name(s->task->local_buf->kind));
        int rc = l->sops->open(l->stager, st);
        if (rc < 0)
            return rc;
    }
    *out = *st;
    return 0;
}

void cre_tcp_lane_fail_all(tcp_lane *l, int status)
{
    if (l->tx_stage != NULL)
        l->sops->close(l->tx_stage);
    if (l->rx_stage != NULL)
        l->sops->close(l->rx_stage);
    l->tx_stage = l->rx_stage = NULL;
    lane_close(l);
    pthread_mutex_lock(&l->tpeer->queue_lock);
    tcp_slice *qh = l->queue_head, *qt = l->queue_tail;
    l->queue_head = l->queue_tail = NULL;
    pthread_mutex_unlock(&l->tpeer->queue_lock);
    pthread_mutex_lock(&l->io_lock);
    fail_list(l, &qh, &qt, status);
    fail_list(l, &l->send_head, &l->send_tail, status);
    fail_list(l, &l->flight_head, &l->flight_tail, status);
    lane_unlock(l);
    crp_reader_fini(&l->reader);
    crp_buf_free(&l->scratch);
}

static int lane_start_connect(tcp_lane *l)
{
    cre_peer *p = l->peer;
    struct sockaddr_storage ss;
    pthread_mutex_lock(&l->tpeer->addr_lock);
    socklen_t sl = l->tpeer->addr_len;
    ss = l->tpeer->addr;
    pthread_mutex_unlock(&l->tpeer->addr_lock);
    if (sl == 0) /* submit resolves before it queues: cannot happen */
        return crb_error(CR_ERR_DNS, "lane %d to %s: the address is not resolved", l->index,
                         p->name);
    int rc;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return crb_error(CR_ERR_SYSTEM, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS) {
        rc = crb_error(CR_ERR_PEER_UNREACHABLE, "connect to %s: %s", p->name, strerror(errno));
        atomic_store(&l->tpeer->addr_stale, true);
        close(fd);
        return rc;
    }
    l->io.fd = fd;
    crp_reader_reset(&l->reader);
    l->reader.max_body = CRP_MAX_BODY;
    l->state = LANE_CONNECTING;
    l->connect_deadline_ns = crb_now_ns() + (uint64_t)p->engine->connect_timeout_ms * 1000000ull;
    rc = crb_loop_add(&l->worker->loop, &l->io, EPOLLIN | EPOLLOUT);
    if (rc < 0) {
        close(fd);
        l->io.fd = -1;
        l->state = LANE_IDLE;
    }
    return rc;
}

/* Encode a slice's header and body once, on first send. */
static void slice_prepare(tcp_lane *l, tcp_slice *s, crp_buf *scratch)
{
    crp_buf_reset(scratch);
    crp_data_req req = {.addr = s->remote_addr, .length = s->length};
    crp_data_req_encode(&req, scratch); /* fits: 19 bytes at most */
    int type = s->task->opcode == CR_OP_WRITE ? CRP_WRITE_REQ : CRP_READ_REQ;
    crp_header h = {.version = CRP_VERSION,
                    .type = (uint8_t)type,
                    .body_len = (uint32_t)scratch->len,
                    .request_id = ++l->next_request_id,
                    .data_len = type == CRP_WRITE_REQ ? s->length : 0};
    s->request_id = h.request_id;
    crp_header_encode(&h, s->head);
    memcpy(s->head + CRP_HEADER_SIZE, scratch->data, scratch->len);
    s->head_len = CRP_HEADER_SIZE + scratch->len;
}

static size_t slice_total(const tcp_slice *s)
{
    return s->head_len + (s->task->opcode == CR_OP_WRITE ? s->length : 0);
}

/* Write as many queued slices as the socket takes. */
static int lane_flush(tcp_lane *l)
{
    while (l->send_head != NULL) {
        struct iovec iov[MAX_IOV];
        int n_iov = 0;
        for (tcp_slice *s = l->send_head; s != NULL && n_iov + 2 <= MAX_IOV; s = s->next) {
            if (s->head_len == 0) /* lane_take_queue dropped stale-instance slices */
                slice_prepare(l, s, &l->scratch);
            size_t off = s->sent;
            if (off < s->head_len) {
                iov[n_iov++] = (struct iovec){s->head + off, s->head_len - off};
                off = s->head_len;
            }
            if (s->task->opcode == CR_OP_WRITE && s->staged) {
                /* device memory: one staged window at a time */
                size_t poff = off - s->head_len;
                if (poff == s->win_end) {
                    cre_stage *st;
                    int rc = lane_stage(l, s, true, &st);
                    if (rc == 0 && poff == 0)
                        rc = l->sops->out_begin(st, s->task->local_buf->device,
                                                (uint64_t)(uintptr_t)s->local, s->length);
                    size_t wlen = 0;
                    if (rc == 0)
                        rc = l->sops->out_next(st, &s->win, &wlen);
                    if (rc < 0)
                        return rc;
                    s->win_start = poff;
                    s->win_end = poff + wlen;
                }
                iov[n_iov++] =
                    (struct iovec){(void *)(s->win + (poff - s->win_start)), s->win_end - poff};
                break; /* the next window is fetched after this one has gone */
            }
            if (s->task->opcode == CR_OP_WRITE) {
                size_t poff = off - s->head_len;
                iov[n_iov++] = (struct iovec){s->local + poff, s->length - poff};
            }
        }
        if (n_iov == 0)
            break;
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
        ssize_t n = sendmsg(l->io.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                crb_loop_mod(&l->io, EPOLLIN | EPOLLOUT);
                return 0;
            }
            crb_error(CR_ERR_CONNECTION, "send to %s: %s", l->peer->name, strerror(errno));
            return CR_ERR_CONNECTION;
        }
        size_t left = (size_t)n;
        while (left > 0 && l->send_head != NULL) {
            tcp_slice *s = l->send_head;
            size_t need = slice_total(s) - s->sent;
            if (s->staged && s->task->opcode == CR_OP_WRITE &&
                s->head_len + s->win_end - s->sent < need)
                need = s->head_len + s->win_end - s->sent; /* only its window was offered */
            size_t take = left < need ? left : need;
            s->sent += take;
            left -= take;
            if (s->sent < slice_total(s) && take == need)
                break; /* its window went; the next one is fetched above */
            if (s->sent == slice_total(s)) {
                l->send_head = s->next;
                if (l->send_head == NULL)
                    l->send_tail = NULL;
                list_push(&l->flight_head, &l->flight_tail, s);
            }
        }
    }
    crb_loop_mod(&l->io, EPOLLIN);
    return 0;
}

/* Move queued slices to the send list, dropping canceled, expired and stale ones. */
static void lane_take_queue(tcp_lane *l, uint64_t now)
{
    pthread_mutex_lock(&l->tpeer->queue_lock);
    tcp_slice *s = l->queue_head;
    l->queue_head = l->queue_tail = NULL;
    pthread_mutex_unlock(&l->tpeer->queue_lock);
    while (s != NULL) {
        tcp_slice *next = s->next;
        list_push(&l->send_head, &l->send_tail, s);
        s = next;
    }
    /* Unstarted slices: cancellation, deadline, back-off, stale instance. */
    tcp_slice *keep_head = NULL, *keep_tail = NULL;
    s = l->send_head;
    while (s != NULL) {
        tcp_slice *next = s->next;
        int st = 0;
        if (s->sent == 0) {
            if (atomic_load(&s->task->canceled))
                st = CR_ERR_CANCELED;
            else if (now >= s->deadline_ns)
                st = CR_ERR_TIMEOUT;
            else if (l->state == LANE_IDLE && now < l->retry_at_ns)
                st = CR_ERR_PEER_UNREACHABLE;
            else if (l->state == LANE_READY && s->peer_instance != l->instance)
                st = CR_ERR_CONNECTION;
        }
        if (st != 0)
            slice_finish(l, s, st);
        else
            list_push(&keep_head, &keep_tail, s);
        s = next;
    }
    l->send_head = keep_head;
    l->send_tail = keep_tail;
}

static bool list_has_expired(const tcp_slice *s, uint64_t now)
{
    for (; s != NULL; s = s->next)
        if (now >= s->deadline_ns)
            return true;
    return false;
}

static void lane_progress(tcp_lane *l, uint64_t now)
{
    if (l->send_failed) {
        lane_conn_failed(l, CR_ERR_CONNECTION, false);
        return;
    }
    lane_take_queue(l, now);
    if (l->state == LANE_IDLE && l->send_head != NULL) {
        int rc = lane_start_connect(l);
        if (rc < 0) {
            lane_conn_failed(l, rc, true);
            return;
        }
    }
    if (l->state != LANE_IDLE && l->state != LANE_READY && now >= l->connect_deadline_ns) {
        crb_log(CRB_LOG_WARN, "lane %d to %s: no handshake within %u ms", l->index, l->peer->name,
                l->peer->engine->connect_timeout_ms);
        lane_conn_failed(l, CR_ERR_TIMEOUT, true);
        return;
    }
    if (list_has_expired(l->flight_head, now) ||
        (l->send_head != NULL && l->send_head->sent > 0 && now >= l->send_head->deadline_ns)) {
        crb_log(CRB_LOG_WARN, "lane %d to %s: request deadline expired; closing the connection",
                l->index, l->peer->name);
        lane_conn_failed(l, CR_ERR_TIMEOUT, false);
        return;
    }
    if (l->state == LANE_READY && l->send_head != NULL) {
        if (lane_flush(l) < 0)
            lane_conn_failed(l, CR_ERR_CONNECTION, false);
    }
}

void cre_tcp_lanes_tick(cre_tp *tp, cre_worker *w, uint64_t now)
{
    tcp_engine *te = tp->priv;
    tcp_worker *tw = &te->workers[w->index];
    pthread_mutex_lock(&tw->lock);
    for (size_t i = 0; i < tw->n_lanes; i++) {
        tcp_lane *l = tw->lanes[i];
        pthread_mutex_lock(&l->io_lock);
        if (atomic_exchange(&l->reset_backoff, false)) {
            l->retry_at_ns = 0;
            l->backoff_ms = BACKOFF_MIN_MS;
        }
        lane_progress(l, now);
        lane_unlock(l);
    }
    pthread_mutex_unlock(&tw->lock);
}

static int lane_send_hello(tcp_lane *l)
{
    cr_engine *e = l->peer->engine;
    crp_buf frame = {0};
    int rc = cre_hello_build(e, CRP_ROLE_DATA, l->server_nonce, l->client_nonce, &frame);
    if (rc < 0)
        return rc;
    /* A fresh connection's send buffer always takes a frame this small. */
    ssize_t n = send(l->io.fd, frame.data, frame.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    size_t want = frame.len;
    crp_buf_free(&frame);
    if (n != (ssize_t)want)
        return crb_error(CR_ERR_CONNECTION, "sending HELLO to %s failed", l->peer->name);
    l->state = LANE_WAIT_ACK;
    return 0;
}

static int lane_check_ack(tcp_lane *l, const uint8_t *body, size_t len)
{
    cre_peer *p = l->peer;
    uint64_t instance;
    int rc = cre_hello_ack_check(p->engine, p->name, body, len, l->server_nonce, l->client_nonce,
                                 &instance);
    if (rc < 0)
        return rc;
    l->instance = instance;
    pthread_mutex_lock(&p->lock);
    bool restarted = p->desc != NULL && p->desc->d.instance != instance;
    pthread_mutex_unlock(&p->lock);
    if (restarted)
        cre_peer_mark_stale(p);
    l->state = LANE_READY;
    l->backoff_ms = BACKOFF_MIN_MS;
    atomic_fetch_add(&engine_of(l)->connects, 1);
    return 0;
}

/* A READ response's payload lands in the slice's local memory. A response
 * that does not carry exactly the requested bytes is a protocol violation,
 * never a success (a reply with status 0 and no payload would otherwise
 * complete the READ with whatever the buffer held). */
static int lane_on_head(void *ctx, const crp_header *h, const uint8_t *body, uint8_t **dst)
{
    tcp_lane *l = ctx;
    if (h->type != CRP_READ_RESP)
        return 0;
    tcp_slice *s = l->flight_head;
    if (s == NULL || s->request_id != h->request_id || s->task->opcode != CR_OP_READ)
        return crb_error(CR_ERR_MALFORMED_FRAME, "READ response %llu from %s matches no READ",
                         (unsigned long long)h->request_id, l->peer->name);
    if (h->status == 0 && h->data_len != s->length)
        return crb_error(CR_ERR_MALFORMED_FRAME,
                         "READ response from %s carries %llu bytes for a %llu-byte request",
                         l->peer->name, (unsigned long long)h->data_len,
                         (unsigned long long)s->length);
    if (h->status != 0 && h->data_len != 0)
        return crb_error(CR_ERR_MALFORMED_FRAME, "failed READ response from %s carries data",
                         l->peer->name);
    l->rx_status = 0;
    if (s->staged && h->data_len > 0) {
        /* device memory: received through the rx stage's windows */
        cre_stage *st;
        size_t wlen = 0;
        int rc = lane_stage(l, s, false, &st);
        if (rc == 0)
            rc = l->sops->in_begin(st, s->task->local_buf->device, (uint64_t)(uintptr_t)s->local,
                                   s->length);
        if (rc == 0)
            rc = l->sops->in_window(st, dst, &wlen);
        if (rc < 0) {
            l->rx_status = rc;
            *dst = NULL; /* drain it; the slice fails */
            return 0;
        }
        l->rx_left = s->length - wlen;
        crp_reader_window(&l->reader, wlen);
        return 0;
    }
    *dst = s->local;
    return 0;
}

static int lane_on_data(void *ctx, const crp_header *h, size_t filled, uint8_t **next,
                        size_t *next_len)
{
    tcp_lane *l = ctx;
    *next = NULL;
    int rc = l->sops->in_commit(l->rx_stage, filled);
    if (rc == 0 && l->rx_left > 0) {
        rc = l->sops->in_window(l->rx_stage, next, next_len);
        if (rc == 0)
            l->rx_left -= *next_len < l->rx_left ? *next_len : l->rx_left;
    }
    if (rc < 0) {
        l->rx_status = rc;
        *next = NULL;
    }
    return 0;
}

static int lane_on_frame(void *ctx, const crp_header *h, const uint8_t *body)
{
    tcp_lane *l = ctx;
    int type = h->type;
    if (l->state == LANE_WAIT_CHALLENGE) {
        crp_challenge ch;
        if (type != CRP_CHALLENGE || crp_challenge_decode(body, h->body_len, &ch) < 0)
            return crb_error(CR_ERR_MALFORMED_FRAME, "%s did not open with a CHALLENGE",
                             l->peer->name);
        memcpy(l->server_nonce, ch.nonce, sizeof(ch.nonce));
        return lane_send_hello(l);
    }
    if (type == CRP_ERROR) {
        crp_error err = {0};
        crp_error_decode(body, h->body_len, &err);
        crb_log(CRB_LOG_WARN, "peer %s refused lane %d: %s (%s)", l->peer->name, l->index,
                cr_status_name(h->status), err.message ? err.message : "");
        crp_error_clear(&err);
        return h->status < 0 ? h->status : CR_ERR_REMOTE;
    }
    if (l->state == LANE_WAIT_ACK) {
        if (type != CRP_HELLO_ACK)
            return crb_error(CR_ERR_MALFORMED_FRAME, "%s answered HELLO with %s", l->peer->name,
                             crp_type_name(type));
        return lane_check_ack(l, body, h->body_len);
    }
    if (type != CRP_READ_RESP && type != CRP_WRITE_ACK)
        return crb_error(CR_ERR_MALFORMED_FRAME, "unexpected %s from %s", crp_type_name(type),
                         l->peer->name);
    tcp_slice *s = l->flight_head;
    if (s == NULL || s->request_id != h->request_id ||
        (type == CRP_WRITE_ACK) != (s->task->opcode == CR_OP_WRITE))
        return crb_error(CR_ERR_MALFORMED_FRAME, "%s %llu from %s matches no request",
                         crp_type_name(type), (unsigned long long)h->request_id, l->peer->name);
    l->flight_head = s->next;
    if (l->flight_head == NULL)
        l->flight_tail = NULL;
    int status = h->status;
    if (status > 0)
        status = CR_ERR_REMOTE;
    if (type == CRP_READ_RESP && s->staged && h->data_len > 0) {
        /* completion means applied: every window is in device memory */
        int rc = l->rx_status;
        if (rc == 0)
            rc = l->sops->in_finish(l->rx_stage);
        else if (l->rx_stage != NULL)
            l->sops->in_finish(l->rx_stage);
        if (status == 0)
            status = rc;
    }
    slice_finish(l, s, status);
    return 0;
}

static const crp_reader_ops lane_read_ops = {lane_on_head, lane_on_frame, lane_on_data};

static void lane_on_event_locked(tcp_lane *l, crb_io *io, uint32_t events)
{
    if (l->send_failed) {
        lane_conn_failed(l, CR_ERR_CONNECTION, false);
        return;
    }
    if (l->state == LANE_CONNECTING) {
        int err = 0;
        socklen_t el = sizeof(err);
        getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err != 0 || (events & (EPOLLERR | EPOLLHUP))) {
            crb_error(CR_ERR_PEER_UNREACHABLE, "connect to %s: %s", l->peer->name,
                      strerror(err ? err : ECONNREFUSED));
            lane_conn_failed(l, CR_ERR_PEER_UNREACHABLE, true);
            return;
        }
        if (!(events & (EPOLLOUT | EPOLLIN)))
            return;
        l->state = LANE_WAIT_CHALLENGE;
        crb_loop_mod(io, EPOLLIN);
    }
    int rc = 0;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        rc = crp_reader_read(&l->reader, io->fd, &lane_read_ops, l);
    if (rc < 0) {
        bool handshake = l->state != LANE_READY;
        int status = rc == CR_ERR_MALFORMED_FRAME || rc == CR_ERR_AUTH_FAILED ||
                             rc == CR_ERR_VERSION_MISMATCH || rc == CR_ERR_REMOTE
                         ? rc
                         : CR_ERR_CONNECTION;
        lane_conn_failed(l, status, handshake);
        return;
    }
    if (l->state == LANE_READY)
        lane_take_queue(l, crb_now_ns());
    if (l->state == LANE_READY && l->send_head != NULL && lane_flush(l) < 0)
        lane_conn_failed(l, CR_ERR_CONNECTION, false);
}

static void lane_on_event(crb_io *io, uint32_t events)
{
    tcp_lane *l = lane_of(io);
    pthread_mutex_lock(&l->io_lock);
    lane_on_event_locked(l, io, events);
    lane_unlock(l);
}

void cre_tcp_lane_init(tcp_lane *l, tcp_peer *tpeer, cre_peer *p, int index, cre_worker *w)
{
    l->tpeer = tpeer;
    l->peer = p;
    l->index = index;
    l->worker = w;
    l->io.fd = -1;
    l->io.on_event = lane_on_event;
    l->state = LANE_IDLE;
    l->backoff_ms = BACKOFF_MIN_MS;
    pthread_mutex_init(&l->io_lock, NULL);
    crp_reader_init(&l->reader, CRP_MAX_BODY);
}

void cre_tcp_lane_fini(tcp_lane *l)
{
    pthread_mutex_destroy(&l->io_lock);
}
