/*
 * server.c - crescent-client's service: the embedded store, the Unix socket,
 * the service loops and the connections of thin clients.
 *
 * Socket. By default the abstract name "@crescent-client-<port>" (the port
 * of Mooncake's --port flag; an abstract name needs no file and vanishes
 * with the process, and a second daemon with the same port cannot bind it),
 * or --socket (an abstract "@name" or a path). Each accepted connection is
 * checked with SO_PEERCRED (a client of another uid than ours or root is
 * refused unless --allow_any_user), gets a CHALLENGE (version, nonce, whether
 * the shared secret is required) and is handed to one service loop, round
 * robin.
 *
 * Connections. A service loop reads with recvmsg into the connection's
 * buffer, keeping descriptors that arrive as SCM_RIGHTS in a small queue
 * (a request says how many it brought, "nfd", and takes them from the
 * queue's head; a queue that overflows closes the connection), cuts frames
 * with the project's header decoder (proto/frame.h) and runs each request
 * inline (handlers.c), appending the reply to the connection's output. Thin
 * clients send one request at a time per connection and open one connection
 * per calling thread, so requests of a client's threads run on several
 * loops at once; one loop runs one call at a time. A reply that does not
 * fit the socket waits for EPOLLOUT, and the connection is not read
 * meanwhile. A malformed header closes the connection; an undecodable body
 * is answered with its status and the connection keeps serving.
 *
 * A connection ends on EOF or error (a thin client killed with SIGKILL
 * ends here too: the kernel closes its sockets); the last connection of a
 * session tears the session down (session.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "client/daemon.h"
#include "proto/mac.h"
#include "proto/frame.h"
#include "store/internal.h"

static void conn_close(crs_conn *c);

/* --- output ---------------------------------------------------------------- */

static void flush_out(crs_conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            crb_loop_mod(&c->io, EPOLLOUT);
            return;
        }
        c->closing = true; /* the client is gone */
        return;
    }
    crp_buf_reset(&c->out);
    c->out_off = 0;
    crb_loop_mod(&c->io, EPOLLIN);
}

/* Append a reply frame for request id. */
static void queue_reply(crs_conn *c, uint64_t id, crp_thin_resp *resp)
{
    size_t start = c->out.len;
    uint8_t hb[CRP_HEADER_SIZE] = {0};
    int rc = crp_buf_append(&c->out, hb, sizeof(hb));
    if (rc == 0)
        rc = crp_thin_resp_encode(resp, &c->out);
    int32_t status = resp->status;
    if (rc < 0) {
        /* Too large or no memory: say so instead. */
        c->out.len = start;
        crp_thin_resp err = {
            .op = resp->op, .status = rc, .message = (char *)cr_last_error_message()};
        if (crp_buf_append(&c->out, hb, sizeof(hb)) < 0 ||
            crp_thin_resp_encode(&err, &c->out) < 0) {
            c->out.len = start;
            c->closing = true;
            return;
        }
        status = rc;
    }
    crp_header h = {.version = CRP_VERSION,
                    .type = CRP_THIN_RESP,
                    .body_len = (uint32_t)(c->out.len - start - CRP_HEADER_SIZE),
                    .status = status,
                    .request_id = id};
    crp_header_encode(&h, c->out.data + start);
}

void crs_conn_reply(crs_conn *c, uint64_t id, crp_thin_resp *resp)
{
    queue_reply(c, id, resp); /* process_input flushes it */
}

/* --- handshake --------------------------------------------------------------- */

static bool mac_ok(const crs_daemon *d, const crs_conn *c, const uint8_t *mac)
{
    uint8_t want[CRP_PROOF_SIZE];
    crp_proof(d->cfg.secret, strlen(d->cfg.secret), CRP_THIN_MAC_LABEL, c->nonce,
              CRP_THIN_NONCE_SIZE, NULL, 0, want);
    return crp_proof_equal(want, mac);
}

/* HELLO: 0 with the reply filled, or a status (the connection then closes). */
static int handle_hello(crs_conn *c, const crp_thin_req *req, crp_thin_resp *resp)
{
    crs_daemon *d = c->d;
    if (req->op != CRP_THIN_HELLO)
        return crb_error(CR_ILLEGAL_CLIENT, "%s before HELLO", crp_thin_op_name(req->op));
    if (req->version != CRP_THIN_VERSION)
        return crb_error(CR_ERR_VERSION_MISMATCH, "thin protocol %u; crescent-client speaks %u",
                         req->version, CRP_THIN_VERSION);
    if (d->cfg.secret[0] != '\0' && (!(req->fields & CRP_THIN_F_MAC) || !mac_ok(d, c, req->mac))) {
        atomic_fetch_add(&d->ctr.auth_failures, 1);
        return crb_error(CR_ERR_AUTH_FAILED, "wrong or missing shared secret");
    }
    if ((req->fields & CRP_THIN_F_TENANT) && strcmp(req->tenant, "default") != 0 &&
        strcmp(req->tenant, d->cfg.tenant) != 0)
        return crb_error(CR_ERR_TENANT_MISMATCH, "tenant '%s' asked for; this daemon serves '%s'",
                         req->tenant, d->cfg.tenant);
    int rc;
    crs_session *s = NULL;
    if (req->fields & CRP_THIN_F_ATTACH) {
        rc = crs_session_attach(d, c, req, &s);
    } else {
        int fd = -1;
        if (!(req->fields & CRP_THIN_F_NFD) || req->n_fds != 1)
            return crb_error(CR_ERR_REGION_INVALID, "HELLO of a new session brings no pool");
        rc = crs_conn_take_fds(c, 1, &fd);
        if (rc == 0) {
            rc = crs_session_open(d, c, req, fd, &s);
            close(fd);
        }
    }
    if (rc < 0)
        return rc;
    c->sess = s;
    resp->fields = CRP_THIN_R_SESSION | CRP_THIN_R_TENANT;
    resp->session = s->id;
    memcpy(resp->token, s->token, CRP_THIN_TOKEN_SIZE);
    resp->segment = d->segment;
    resp->tenant = d->cfg.tenant;
    return 0;
}

/* --- input ------------------------------------------------------------------- */

int crs_conn_take_fds(crs_conn *c, size_t n, int *out)
{
    if (n > c->n_fds)
        return crb_error(CR_ERR_REGION_INVALID, "the request names %zu descriptors, %zu arrived", n,
                         c->n_fds);
    memcpy(out, c->fds, n * sizeof(int));
    memmove(c->fds, c->fds + n, (c->n_fds - n) * sizeof(int));
    c->n_fds -= n;
    return 0;
}

static void run_frame(crs_conn *c, const crp_header *h, const uint8_t *body)
{
    crs_daemon *d = c->d;
    crp_thin_req req;
    crp_thin_resp resp = {0};
    crs_scratch sc = {0};
    int rc = crp_thin_req_decode(body, h->body_len, &req);
    if (rc < 0) {
        atomic_fetch_add(&d->ctr.protocol_errors, 1);
        resp.op = CRP_THIN_HEALTH;
        resp.status = rc;
        resp.message = (char *)cr_last_error_message();
        queue_reply(c, h->request_id, &resp);
        if (c->sess == NULL)
            c->closing = true;
        return;
    }
    resp.op = req.op;
    atomic_fetch_add(&d->ctr.calls[req.op % 64], 1);
    uint64_t t0 = crb_now_ns();
    if (c->sess == NULL) {
        rc = handle_hello(c, &req, &resp);
        if (rc < 0) {
            resp.status = rc;
            resp.message = (char *)cr_last_error_message();
            resp.fields = 0;
            c->closing = true;
            crb_log(CRB_LOG_WARN, "crescent-client: refused pid %d: %s", (int)c->pid,
                    cr_last_error_message());
        }
    } else if (req.op == CRP_THIN_HELLO) {
        resp.status = crb_error(CR_INVALID_PARAMS, "HELLO twice on one connection");
        resp.message = (char *)cr_last_error_message();
    } else if (req.op == CRP_THIN_SEGMENT) {
        if (!crs_direct_answer(c, h->request_id))
            c->closing = true;
        crp_thin_req_clear(&req);
        return; /* answered (with the descriptor) */
    } else if (req.op == CRP_THIN_RELEASE) {
        for (size_t i = 0; i < req.n_vals; i++)
            crs_lb_free(d, c->sess, req.vals[i]);
        crp_thin_req_clear(&req);
        return; /* one-way */
    } else {
        crc_release_defer(true); /* gets' lease releases go out after the reply */
        crs_handle(d, c, &req, &resp, &sc);
        crc_release_defer(false);
    }
    if (resp.status < 0)
        atomic_fetch_add(&d->ctr.failures[req.op % 64], 1);
    queue_reply(c, h->request_id, &resp);
    atomic_fetch_add(&d->ctr.busy_ns[req.op % 64], crb_now_ns() - t0);
    crs_scratch_free(&sc);
    crp_thin_req_clear(&req);
}

/* Cut and run the complete frames in the input buffer. */
static int process_input(crs_conn *c)
{
    size_t off = 0;
    int rc = 0;
    while (!c->closing && c->out.len == 0 && c->in_len - off >= CRP_HEADER_SIZE) {
        crp_header h;
        rc = crp_header_decode(c->in + off, &h);
        if (rc == 0 && h.type != CRP_THIN_REQ)
            rc = crb_error(CR_ERR_MALFORMED_FRAME, "a %s frame on a thin-client socket",
                           crp_type_name(h.type));
        if (rc < 0)
            break;
        size_t need = CRP_HEADER_SIZE + h.body_len;
        if (c->in_len - off < need) {
            if (need > c->in_cap) {
                uint8_t *nb = realloc(c->in, need);
                if (nb == NULL) {
                    rc = crb_error(CR_ERR_NO_MEMORY, "a %zu-byte request", need);
                    break;
                }
                c->in = nb;
                c->in_cap = need;
            }
            break;
        }
        run_frame(c, &h, c->in + off + CRP_HEADER_SIZE);
        off += need;
        if (c->out.len > 0)
            flush_out(c);
        crc_release_flush(); /* the reply is out: now the reads it made */
    }
    if (off > 0) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    return rc;
}

static int read_some(crs_conn *c)
{
    for (;;) {
        if (c->in_len == c->in_cap)
            return 0; /* a full buffer holds a complete frame: run it first */
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(sizeof(int) * CRS_QUEUED_FDS)];
        } ctl;
        struct iovec iov = {c->in + c->in_len, c->in_cap - c->in_len};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = ctl.b,
                             .msg_controllen = sizeof(ctl.b)};
        ssize_t n = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return CR_ERR_CONNECTION;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            int *fds = (int *)CMSG_DATA(cm);
            for (size_t i = 0; i < k; i++) {
                if (c->n_fds < CRS_QUEUED_FDS)
                    c->fds[c->n_fds++] = fds[i];
                else {
                    close(fds[i]);
                    n = -1;
                }
            }
        }
        if (n < 0 || (msg.msg_flags & MSG_CTRUNC))
            return crb_error(CR_ERR_MALFORMED_FRAME, "more descriptors than a client may send");
        c->in_len += (size_t)n;
        int rc = process_input(c);
        if (rc < 0)
            return rc;
        /* Everything received is handled: back to epoll (level-triggered)
         * rather than a recvmsg that would only say EAGAIN. */
        if (c->closing || c->out.len > 0 || c->in_len == 0)
            return 0;
    }
}

static void on_conn_event(crb_io *io, uint32_t events)
{
    crs_conn *c = (crs_conn *)io;
    if (events & EPOLLOUT) {
        flush_out(c);
        if (!c->closing && c->out.len == 0) {
            int rc = process_input(c); /* frames that waited for the reply to go out */
            if (rc < 0)
                c->closing = true;
        }
    }
    if (!c->closing && c->out.len == 0 && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
        int rc = read_some(c);
        if (rc < 0) {
            if (rc != CR_ERR_CONNECTION) {
                atomic_fetch_add(&c->d->ctr.protocol_errors, 1);
                crb_log(CRB_LOG_WARN, "crescent-client: closing pid %d's connection: %s",
                        (int)c->pid, cr_last_error_message());
            }
            c->closing = true;
        }
    }
    if (c->closing)
        conn_close(c);
}

/* --- connections ---------------------------------------------------------------- */

static void conn_close(crs_conn *c)
{
    crs_daemon *d = c->d;
    crb_loop_del(&c->io);
    if (c->out.len > c->out_off) /* a last reply (a refusal) */
        send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
    close(c->fd);
    for (size_t i = 0; i < c->n_fds; i++)
        close(c->fds[i]);
    pthread_mutex_lock(&d->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        d->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    d->n_conns--;
    pthread_mutex_unlock(&d->lock);
    if (c->sess != NULL)
        crs_session_drop(d, c->sess);
    crb_acceptor_closed(&d->acceptor);
    crp_buf_free(&c->out);
    free(c->in);
    free(c);
}

static void on_accept(crb_acceptor *a, int fd)
{
    crs_daemon *d = a->owner;
    struct ucred cr = {0};
    socklen_t l = sizeof(cr);
    crs_conn *c = calloc(1, sizeof(*c));
    uint8_t *in = malloc(CRS_INPUT_START);
    if (c == NULL || in == NULL || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0) {
        free(c);
        free(in);
        close(fd);
        crb_acceptor_closed(a);
        return;
    }
    c->d = d;
    c->fd = fd;
    c->io.fd = fd;
    c->io.on_event = on_conn_event;
    c->pid = cr.pid;
    c->uid = cr.uid;
    c->in = in;
    c->in_cap = CRS_INPUT_START;
    crb_random_bytes(c->nonce, sizeof(c->nonce));
    atomic_fetch_add(&d->ctr.connections_accepted, 1);

    crp_thin_resp ch = {.op = CRP_THIN_CHALLENGE,
                        .fields = CRP_THIN_R_CHALLENGE,
                        .version = CRP_THIN_VERSION,
                        .auth = d->cfg.secret[0] != '\0'};
    memcpy(ch.nonce, c->nonce, sizeof(ch.nonce));
    bool refuse = !d->cfg.allow_any_user && cr.uid != d->uid && cr.uid != 0;
    if (refuse) {
        atomic_fetch_add(&d->ctr.connections_refused, 1);
        ch.status = crb_error(CR_ILLEGAL_CLIENT,
                              "pid %d runs as uid %u; crescent-client serves uid %u (and root) "
                              "unless started with --allow_any_user",
                              (int)cr.pid, (unsigned)cr.uid, (unsigned)d->uid);
        ch.message = (char *)cr_last_error_message();
        crb_log(CRB_LOG_WARN, "crescent-client: %s", ch.message);
    }
    queue_reply(c, 0, &ch);
    send(fd, c->out.data, c->out.len, MSG_DONTWAIT | MSG_NOSIGNAL);
    crp_buf_reset(&c->out);
    if (refuse) {
        close(fd);
        crp_buf_free(&c->out);
        free(c->in);
        free(c);
        crb_acceptor_closed(a);
        return;
    }
    pthread_mutex_lock(&d->lock);
    c->next = d->conns;
    if (d->conns)
        d->conns->prev = c;
    d->conns = c;
    d->n_conns++;
    pthread_mutex_unlock(&d->lock);
    unsigned i = atomic_fetch_add(&d->next_loop, 1) % d->n_loops;
    if (crb_loop_add(&d->loops[i], &c->io, EPOLLIN) < 0) {
        c->closing = true;
        conn_close(c);
    }
}

static void on_tick(crb_loop *loop, uint64_t now_ns, bool woken)
{
    crs_daemon *d = loop->owner;
    if (loop == &d->loops[0] && d->accepting)
        crb_acceptor_tick(&d->acceptor, now_ns);
}

/* --- socket -------------------------------------------------------------------- */

static int bind_socket(crs_daemon *d, int *out)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    socklen_t len;
    const char *name = d->cfg.socket;
    char buf[sizeof(addr.sun_path)];
    if (name[0] == '\0') {
        snprintf(buf, sizeof(buf), "@%s%u", CRP_THIN_SOCKET_PREFIX, (unsigned)d->cfg.port);
        name = buf;
    }
    snprintf(d->socket_name, sizeof(d->socket_name), "%s", name);
    size_t n = strlen(name);
    if (name[0] == '@') {
        if (n - 1 > sizeof(addr.sun_path) - 1)
            return crb_error(CR_INVALID_PARAMS, "--socket '%s' is too long", name);
        memcpy(addr.sun_path + 1, name + 1, n - 1);
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        if (n + 1 > sizeof(addr.sun_path))
            return crb_error(CR_INVALID_PARAMS, "--socket '%s' is too long", name);
        memcpy(addr.sun_path, name, n + 1);
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return crb_error(CR_ERR_SYSTEM, "socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&addr, len) == 0)
        goto bound;
    if (errno == EADDRINUSE && name[0] == '/') {
        /* A path left by a daemon that died: take it over unless one answers. */
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        bool alive = probe >= 0 && connect(probe, (struct sockaddr *)&addr, len) == 0;
        if (probe >= 0)
            close(probe);
        if (!alive && unlink(name) == 0 && bind(fd, (struct sockaddr *)&addr, len) == 0)
            goto bound;
        errno = EADDRINUSE;
    }
    int e = errno;
    close(fd);
    return crb_error(CR_ERR_BIND, "binding %s: %s%s", name, strerror(e),
                     e == EADDRINUSE ? " (another crescent-client uses this --port/--socket)" : "");
bound:
    if (name[0] == '/')
        chmod(name, d->cfg.allow_any_user ? 0666 : 0600);
    if (listen(fd, 512) < 0) {
        int le = errno;
        close(fd);
        return crb_error(CR_ERR_BIND, "listen on %s: %s", name, strerror(le));
    }
    *out = fd;
    return 0;
}

/* --- lifecycle ------------------------------------------------------------------- */

int crs_daemon_start(crs_daemon *d, const crs_config *cfg)
{
    memset(d, 0, sizeof(*d));
    d->seg_fd = d->seg_rw_fd = -1;
    d->cfg = *cfg;
    d->uid = getuid();
    pthread_mutex_init(&d->lock, NULL);
    int rc;
    cr_store_config sc;
    cr_store_config_init(&sc);
    sc.local_hostname = d->cfg.host;
    sc.metadata = d->cfg.metadata;
    sc.protocol = d->cfg.protocol;
    sc.devices = d->cfg.devices;
    sc.master_address = d->cfg.master;
    sc.global_segment_size = d->cfg.global_segment_size;
    sc.local_buffer_size = d->cfg.local_buffer_size;
    sc.tenant_id = d->cfg.tenant;                  /* every thin client's keys: this tenant */
    sc.enable_ssd_offload = d->cfg.enable_offload; /* the host's SSD tier (disk-tier.md) */
    sc.ssd_offload_path = d->cfg.ssd_path;
    if (d->cfg.rpc_timeout_ms)
        sc.rpc_timeout_ms = d->cfg.rpc_timeout_ms;
    if (d->cfg.transfer_timeout_ms)
        sc.transfer_timeout_ms = d->cfg.transfer_timeout_ms;
    if (d->cfg.heartbeat_ms)
        sc.heartbeat_interval_ms = d->cfg.heartbeat_ms;
    if ((rc = cr_store_setup(&sc, &d->store)) < 0)
        goto err_stop;
    cr_store_hostname(d->store, d->segment, sizeof(d->segment));
    crs_direct_open(d);
    int lfd = -1;
    if ((rc = bind_socket(d, &lfd)) < 0)
        goto err_stop;
    d->n_loops = d->cfg.threads == 0 ? 1 : d->cfg.threads;
    if (d->n_loops > CRS_MAX_LOOPS)
        d->n_loops = CRS_MAX_LOOPS;
    for (unsigned i = 0; i < d->n_loops; i++) {
        char name[24];
        snprintf(name, sizeof(name), "thin-svc-%u", i);
        if ((rc = crb_loop_init(&d->loops[i], name, 100, on_tick, d)) < 0) {
            d->n_loops = i;
            close(lfd);
            goto err_stop;
        }
    }
    /* CRESCENT_BUSY_POLL_US=N: the loops poll N us after an event before they sleep again
     * (unset or 0: they sleep at once; store/busy_poll.c). The store's engine refused a bad
     * value at setup. */
    int64_t spin_mode = 0;
    if (crc_spin_mode(&spin_mode) == 0)
        for (unsigned i = 0; i < d->n_loops; i++)
            crb_loop_set_busy_poll(&d->loops[i], spin_mode);
    rc = crb_acceptor_start(&d->acceptor, &d->loops[0], lfd, d->cfg.max_clients * 16u, on_accept, d,
                            "crescent-client socket");
    if (rc < 0) {
        close(lfd);
        goto err_stop;
    }
    d->accepting = true;
    for (unsigned i = 0; i < d->n_loops && rc == 0; i++)
        rc = crb_loop_start(&d->loops[i]);
    d->loops_started = true;
    if (rc < 0)
        goto err_stop;
    if (d->cfg.enable_http_server && (rc = crs_http_start(d)) < 0)
        goto err_stop;
    crb_log(CRB_LOG_INFO,
            "crescent-client: segment %s (%llu bytes) at master %s, serving thin "
            "clients on %s with %u service thread(s)",
            d->segment, (unsigned long long)d->cfg.global_segment_size, d->cfg.master,
            d->socket_name, d->n_loops);
    return 0;

err_stop : {
    char detail[512];
    snprintf(detail, sizeof(detail), "%s", cr_last_error_message());
    crs_daemon_stop(d);
    return crb_error(rc, "%s", detail);
}
}

/* One INFO line: calls served by op, with the mean time each took here. */
static void log_service_times(crs_daemon *d)
{
    char line[1024];
    size_t len = 0;
    for (int op = 0; op < 64 && len < sizeof(line); op++) {
        uint64_t n = atomic_load(&d->ctr.calls[op]);
        if (n == 0)
            continue;
        double us = (double)atomic_load(&d->ctr.busy_ns[op]) / 1e3 / (double)n;
        int w = snprintf(line + len, sizeof(line) - len, " %s %llu (%.1f us)", crp_thin_op_name(op),
                         (unsigned long long)n, us);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    if (len > 0)
        crb_log(CRB_LOG_INFO, "crescent-client: calls served, mean time here:%s", line);
}

void crs_daemon_stop(crs_daemon *d)
{
    log_service_times(d);
    /* A handler stuck past the bound still reads the store, the lock and
     * the counters: those are then left to the process exit. */
    bool http_stopped = crs_http_stop(d);
    /* Stop serving: the loops end, then nothing runs on the connections. */
    for (unsigned i = 0; i < d->n_loops; i++)
        crb_loop_fini(&d->loops[i]);
    d->loops_started = false;
    if (d->accepting)
        crb_acceptor_stop(&d->acceptor);
    d->accepting = false;
    if (d->socket_name[0] == '/')
        unlink(d->socket_name);
    for (;;) {
        pthread_mutex_lock(&d->lock);
        crs_conn *c = d->conns;
        pthread_mutex_unlock(&d->lock);
        if (c == NULL)
            break;
        c->io.loop = NULL; /* its loop is gone */
        conn_close(c);
    }
    d->n_loops = 0;
    if (!http_stopped)
        return;
    if (d->store != NULL) {
        cr_store_destroy(d->store); /* unmount, then close */
        d->store = NULL;
    }
    crs_direct_close(d);
    free(d->sessions);
    d->sessions = NULL;
    d->n_sessions = d->cap_sessions = 0;
    pthread_mutex_destroy(&d->lock);
}
