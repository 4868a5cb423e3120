/*
 * thin_conn.c - a thin client's session with crescent-client: connecting,
 * the handshake, the connection pool and one call.
 *
 * Handshake, per connection: the daemon sends CHALLENGE (version, nonce,
 * whether it wants the shared secret); we check that the socket belongs to
 * our uid or root (SO_PEERCRED: an abstract socket name can be taken by
 * anyone first, and we are about to hand over our memory), then send HELLO:
 * the first connection of a session passes the pool memfd (SCM_RIGHTS) and
 * gets a session id and token back, every further connection attaches with
 * them. The daemon ends a session when its last connection closes, which
 * the kernel does for us when this process dies.
 *
 * Connections carry one request at a time and are shared through an idle
 * list: a calling thread takes one (or opens one, up to max_connections),
 * writes its frame, reads the reply itself (no reader thread: two wake-ups
 * per call, the daemon's and ours) and gives it back. A broken connection
 * ends the session: the call that saw it fails with CR_ERR_DAEMON_LOST if
 * its request had gone out, and the next call opens a new session
 * (CR_ERR_DAEMON_UNREACHABLE at once while nobody listens; attempts are
 * spaced by 20 ms). A connection idle for a while is probed before use, so a
 * daemon that died while we were idle costs the next call nothing: its
 * request has not been sent, and it is sent again on the new session.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "proto/mac.h"
#include "store/thin.h"

#define HANDSHAKE_MS   10000
#define RETRY_SPACE_NS (20ull * 1000 * 1000)
#define IDLE_PROBE_NS  (2ull * 1000 * 1000)

int crc_thin_parse_address(const char *text, struct sockaddr_un *addr, socklen_t *len,
                           char *display, size_t display_len)
{
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    const char *name = NULL;
    bool abstract = false;
    char buf[sizeof(addr->sun_path)];
    if (text == NULL || text[0] == '\0')
        text = "127.0.0.1:50052";
    if (strncmp(text, "unix:", 5) == 0) {
        name = text + 5;
    } else if (text[0] == '/') {
        name = text;
    } else if (text[0] == '@') {
        name = text + 1;
        abstract = true;
    } else {
        const char *colon = strrchr(text, ':');
        const char *port = colon ? colon + 1 : text;
        char *end = NULL;
        errno = 0;
        unsigned long p = strtoul(port, &end, 10);
        if (port[0] == '\0' || *end != '\0' || errno != 0 || p == 0 || p > 65535)
            return crb_error(CR_INVALID_PARAMS,
                             "server_address '%s': not host:port, @name, unix:/path or /path",
                             text);
        snprintf(buf, sizeof(buf), "%s%lu", CRP_THIN_SOCKET_PREFIX, p);
        name = buf;
        abstract = true;
    }
    size_t n = strlen(name);
    if (n == 0 || n + 1 > sizeof(addr->sun_path))
        return crb_error(CR_INVALID_PARAMS, "server_address '%s': socket name of %zu bytes", text,
                         n);
    if (abstract) {
        memcpy(addr->sun_path + 1, name, n);
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    } else {
        memcpy(addr->sun_path, name, n + 1);
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    }
    snprintf(display, display_len, "%s%s", abstract ? "@" : "", name);
    return 0;
}

/* --- one connection ---------------------------------------------------------- */

static void conn_free(crc_thin_conn *c)
{
    if (c == NULL)
        return;
    if (c->fd >= 0)
        close(c->fd);
    if (c->rx_fd >= 0)
        close(c->rx_fd);
    if (c->rx_fd2 >= 0)
        close(c->rx_fd2);
    free(c->in);
    crp_buf_free(&c->out);
    free(c);
}

/* Write all of buf, the fds riding on the first byte. *sent: whether any
 * byte left. */
static int send_all(crc_thin *t, int fd, const uint8_t *buf, size_t len, const int *fds,
                    size_t n_fds, bool *sent)
{
    size_t off = 0;
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * CRP_THIN_MAX_FDS)];
    } ctl;
    while (off < len) {
        struct iovec iov = {(void *)(buf + off), len - off};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        if (off == 0 && n_fds > 0) {
            memset(&ctl, 0, sizeof(ctl));
            msg.msg_control = ctl.b;
            msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
            struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
            memcpy(CMSG_DATA(cm), fds, sizeof(int) * n_fds);
        }
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            *sent = true;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return crb_error(CR_ERR_TIMEOUT,
                             "crescent-client at %s did not take a request for %u ms", t->address,
                             t->call_timeout_ms);
        return crb_error(CR_ERR_DAEMON_LOST, "crescent-client at %s: sending failed: %s",
                         t->address, n < 0 ? strerror(errno) : "closed");
    }
    return 0;
}

/*
 * recv into c->in; descriptors that ride on the bytes (only SEGMENT's reply
 * carries them: the read-only one, then perhaps a writable one) are kept in
 * c->rx_fd and c->rx_fd2, any further one closed.
 */
static ssize_t recv_reply(crc_thin_conn *c, bool spin)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * CRP_THIN_MAX_FDS)];
    } ctl;
    struct iovec iov = {c->in + c->in_len, c->in_cap - c->in_len};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b)};
    ssize_t n = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC | (spin ? MSG_DONTWAIT : 0));
    if (n < 0 || msg.msg_controllen == 0)
        return n;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (c->rx_fd < 0)
                c->rx_fd = fd;
            else if (c->rx_fd2 < 0)
                c->rx_fd2 = fd;
            else
                close(fd);
        }
    }
    return n;
}

/*
 * Read the reply to request id: one blocking recv usually brings it whole
 * (the socket's SO_RCVTIMEO is the call timeout), so a call costs one
 * sendmsg and one recv here. Frames are cut with the project's header
 * decoder; nothing but the reply to our request may arrive.
 */
static int read_reply(crc_thin *t, crc_thin_conn *c, uint64_t id, crp_thin_resp *resp,
                      uint64_t deadline_ns)
{
    /* The spin window (base/spin.h): non-blocking reads until then, before sleeping in recv. */
    uint64_t window = crb_spin_window(&t->spin);
    uint64_t spin_until = window > 0 ? crb_now_ns() + window : 0;
    for (;;) {
        if (c->in_len >= CRP_HEADER_SIZE) {
            crp_header h;
            int rc = crp_header_decode(c->in, &h);
            if (rc < 0)
                return rc;
            if (h.type != CRP_THIN_RESP || h.request_id != id)
                return crb_error(CR_ERR_MALFORMED_FRAME,
                                 "crescent-client sent a %s frame for request %llu (waiting for "
                                 "%llu)",
                                 crp_type_name(h.type), (unsigned long long)h.request_id,
                                 (unsigned long long)id);
            size_t need = CRP_HEADER_SIZE + h.body_len;
            if (c->in_len >= need) {
                rc = crp_thin_resp_decode(c->in + CRP_HEADER_SIZE, h.body_len, resp);
                memmove(c->in, c->in + need, c->in_len - need);
                c->in_len -= need;
                return rc;
            }
            if (need > c->in_cap) {
                uint8_t *nb = realloc(c->in, need);
                if (nb == NULL)
                    return crb_error(CR_ERR_NO_MEMORY, "a reply of %zu bytes", need);
                c->in = nb;
                c->in_cap = need;
            }
        }
        if (crb_now_ns() >= deadline_ns)
            return crb_error(CR_ERR_TIMEOUT, "crescent-client at %s did not answer in %u ms",
                             t->address, t->call_timeout_ms);
        bool spin = spin_until != 0 && crb_now_ns() < spin_until;
        if (!spin && spin_until != 0) {
            crb_spin_done(&t->spin, false); /* the window ran out: sleep in recv */
            spin_until = 0;
        }
        ssize_t n = recv_reply(c, spin);
        if (n > 0) {
            if (spin)
                crb_spin_done(&t->spin, true);
            spin_until = 0;
            c->in_len += (size_t)n;
            continue;
        }
        if (n < 0 && spin && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            crb_spin_pause();
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return crb_error(CR_ERR_TIMEOUT, "crescent-client at %s did not answer in %u ms",
                             t->address, t->call_timeout_ms);
        return crb_error(CR_ERR_DAEMON_LOST,
                         "crescent-client at %s closed the connection during the call%s%s",
                         t->address, n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
    }
}

/* Encode req into c->out behind a frame header. */
static int encode_frame(crc_thin_conn *c, const crp_thin_req *req, uint64_t *id)
{
    crp_buf_reset(&c->out);
    uint8_t hb[CRP_HEADER_SIZE] = {0};
    int rc = crp_buf_append(&c->out, hb, sizeof(hb));
    if (rc == 0)
        rc = crp_thin_req_encode(req, &c->out);
    if (rc < 0)
        return rc;
    *id = ++c->next_id;
    crp_header h = {.version = CRP_VERSION,
                    .type = CRP_THIN_REQ,
                    .body_len = (uint32_t)(c->out.len - CRP_HEADER_SIZE),
                    .request_id = *id};
    crp_header_encode(&h, c->out.data);
    return 0;
}

int crc_thin_conn_call(crc_thin *t, crc_thin_conn *c, const crp_thin_req *req, const int *fds,
                       size_t n_fds, crp_thin_resp *resp, bool *sent)
{
    *sent = false;
    uint64_t id;
    int rc = encode_frame(c, req, &id);
    if (rc < 0)
        return rc;
    rc = send_all(t, c->fd, c->out.data, c->out.len, fds, n_fds, sent);
    if (rc < 0)
        return rc;
    atomic_fetch_add(&t->calls, 1);
    return read_reply(t, c, id, resp, crb_now_ns() + (uint64_t)t->call_timeout_ms * 1000000ull);
}

static void hello_mac(const crc_thin *t, const uint8_t nonce[CRP_THIN_NONCE_SIZE],
                      uint8_t out[CRP_THIN_MAC_SIZE])
{
    crp_proof(t->secret, strlen(t->secret), CRP_THIN_MAC_LABEL, nonce, CRP_THIN_NONCE_SIZE, NULL, 0,
              out);
}

/* The daemon's socket must be ours or root's. */
static int check_daemon_peer(const crc_thin *t, int fd)
{
    struct ucred cr;
    socklen_t l = sizeof(cr);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0)
        return crb_error(CR_ERR_SYSTEM, "SO_PEERCRED on %s: %s", t->address, strerror(errno));
    if (cr.uid != getuid() && cr.uid != 0)
        return crb_error(CR_ERR_AUTH_FAILED,
                         "%s is served by pid %d of uid %u, neither this process's uid %u nor "
                         "root: not handing it our memory",
                         t->address, (int)cr.pid, (unsigned)cr.uid, (unsigned)getuid());
    return 0;
}

/* Connect and run the handshake; attach (session, token) or open a new
 * session (passing the pool). On success *out is ready and, for a new
 * session, the session fields of t are set (caller holds t->lock). */
static int open_conn(crc_thin *t, bool attach, uint64_t session,
                     const uint8_t token[CRP_THIN_TOKEN_SIZE], uint64_t gen, crc_thin_conn **out)
{
    crc_thin_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "thin connection");
    c->gen = gen;
    c->rx_fd = c->rx_fd2 = -1;
    c->in_cap = 16u << 10;
    c->in = malloc(c->in_cap);
    int rc;
    if (c->in == NULL) {
        free(c);
        return crb_error(CR_ERR_NO_MEMORY, "thin connection");
    }
    crp_buf body = {0};
    crp_thin_resp resp;
    memset(&resp, 0, sizeof(resp));
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        rc = crb_error(CR_ERR_SYSTEM, "socket: %s", strerror(errno));
        goto err_free_conn;
    }
    if (connect(c->fd, (const struct sockaddr *)&t->addr, t->addr_len) < 0) {
        rc = crb_error(CR_ERR_DAEMON_UNREACHABLE, "no crescent-client listens on %s: %s",
                       t->address, strerror(errno));
        goto err_free_conn;
    }
    struct timeval tv = {t->call_timeout_ms / 1000, (long)(t->call_timeout_ms % 1000) * 1000};
    struct timeval hs = {HANDSHAKE_MS / 1000, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &hs, sizeof(hs));
    if ((rc = check_daemon_peer(t, c->fd)) < 0)
        goto err_free_conn;
    uint64_t deadline = crb_now_ns() + HANDSHAKE_MS * 1000000ull;
    crp_header h;
    rc = crp_read_frame(c->fd, CRP_MAX_BODY, deadline, &h, &body);
    if (rc == CR_ERR_CONNECTION || rc == CR_ERR_TIMEOUT) {
        rc = crb_error(CR_ERR_DAEMON_UNREACHABLE, "crescent-client on %s sent no challenge: %s",
                       t->address, cr_last_error_message());
        goto err_free_conn;
    }
    if (rc < 0)
        goto err_free_conn;
    if (h.type == CRP_THIN_RESP && crp_thin_resp_decode(body.data, body.len, &resp) == 0 &&
        resp.op == CRP_THIN_CHALLENGE && resp.status < 0) {
        rc = crb_error(resp.status, "crescent-client on %s refused this process: %s", t->address,
                       resp.message ? resp.message : cr_strerror(resp.status));
        goto err_free_conn;
    }
    if (h.type != CRP_THIN_RESP || resp.op != CRP_THIN_CHALLENGE ||
        !(resp.fields & CRP_THIN_R_CHALLENGE)) {
        rc = crb_error(CR_ERR_MALFORMED_FRAME, "%s did not start with a crescent-client challenge",
                       t->address);
        goto err_free_conn;
    }
    if (resp.version != CRP_THIN_VERSION) {
        rc = crb_error(CR_ERR_VERSION_MISMATCH,
                       "crescent-client on %s speaks thin protocol %u, this client %u", t->address,
                       resp.version, CRP_THIN_VERSION);
        goto err_free_conn;
    }
    if (resp.auth && !t->has_secret) {
        rc = crb_error(CR_ERR_AUTH_FAILED,
                       "crescent-client on %s requires the shared secret (set "
                       "CRESCENT_CLIENT_SECRET or the shared_secret field)",
                       t->address);
        goto err_free_conn;
    }
    crp_thin_req req = {.op = CRP_THIN_HELLO,
                        .fields = CRP_THIN_F_HELLO,
                        .version = CRP_THIN_VERSION,
                        .pid = (uint64_t)getpid(),
                        .pool_size = t->pool_size,
                        .buffer_size = t->lb_size};
    if (resp.auth) {
        req.fields |= CRP_THIN_F_MAC;
        hello_mac(t, resp.nonce, req.mac);
    }
    crp_thin_resp_clear(&resp);
    if (t->tenant[0] != '\0') {
        req.fields |= CRP_THIN_F_TENANT;
        req.tenant = t->tenant;
    }
    if (attach) {
        req.fields |= CRP_THIN_F_ATTACH;
        req.session = session;
        memcpy(req.token, token, CRP_THIN_TOKEN_SIZE);
    } else {
        req.fields |= CRP_THIN_F_NFD;
        req.n_fds = 1;
    }
    bool sent;
    rc = encode_frame(c, &req, &(uint64_t){0});
    if (rc == 0)
        rc = send_all(t, c->fd, c->out.data, c->out.len, &t->pool_fd, attach ? 0 : 1, &sent);
    if (rc == 0)
        rc = read_reply(t, c, c->next_id, &resp, deadline);
    if (rc == CR_ERR_DAEMON_LOST)
        rc = crb_error(CR_ERR_DAEMON_UNREACHABLE, "%s", cr_last_error_message());
    if (rc < 0)
        goto err_free_conn;
    if (resp.status < 0) {
        rc = crb_error(resp.status, "crescent-client on %s refused this thin client: %s",
                       t->address, resp.message ? resp.message : cr_strerror(resp.status));
        goto err_free_conn;
    }
    if (!attach) {
        if (!(resp.fields & CRP_THIN_R_SESSION)) {
            rc = crb_error(CR_ERR_MALFORMED_FRAME, "crescent-client's HELLO reply has no session");
            goto err_free_conn;
        }
        t->session = resp.session;
        memcpy(t->token, resp.token, CRP_THIN_TOKEN_SIZE);
        snprintf(t->segment, sizeof(t->segment), "%s", resp.segment);
        snprintf(t->daemon_tenant, sizeof(t->daemon_tenant), "%s",
                 (resp.fields & CRP_THIN_R_TENANT) ? resp.tenant : "default");
    }
    crp_thin_resp_clear(&resp);
    crp_buf_free(&body);
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)); /* calls: the call timeout */
    c->last_used_ns = crb_now_ns();
    *out = c;
    return 0;

err_free_conn:
    crp_thin_resp_clear(&resp);
    crp_buf_free(&body);
    conn_free(c);
    return rc;
}

/* --- session ----------------------------------------------------------------- */

static void close_idle_locked(crc_thin *t)
{
    while (t->idle != NULL) {
        crc_thin_conn *c = t->idle;
        t->idle = c->next;
        conn_free(c);
        t->n_conns--;
    }
}

/* Open a new session (t->lock held). */
static int reconnect_locked(crc_thin *t)
{
    uint64_t now = crb_now_ns();
    if (t->last_error < 0 && now - t->last_attempt_ns < RETRY_SPACE_NS)
        return crb_error(t->last_error, "%s", t->last_error_msg);
    t->last_attempt_ns = now;
    close_idle_locked(t);
    bool first = atomic_load(&t->gen) == 0;
    /* From here on values of the old session in the local buffer are gone:
     * wait for copies out of it to finish, then move to a new generation. */
    pthread_rwlock_wrlock(&t->copy_lock);
    uint64_t gen = atomic_fetch_add(&t->gen, 1) + 1;
    pthread_rwlock_unlock(&t->copy_lock);
    crc_thin_conn *c = NULL;
    int rc = open_conn(t, false, 0, NULL, gen, &c);
    if (rc == 0 && t->tenant[0] != '\0' && strcmp(t->tenant, "default") != 0 &&
        strcmp(t->tenant, t->daemon_tenant) != 0)
        rc = crb_error(CR_ERR_TENANT_MISMATCH,
                       "tenant '%s' asked for, but crescent-client on %s serves tenant '%s'",
                       t->tenant, t->address, t->daemon_tenant);
    if (rc == 0)
        rc = crc_thin_replay_regions(t, c, gen);
    if (rc < 0) {
        conn_free(c);
        t->last_error = rc;
        snprintf(t->last_error_msg, sizeof(t->last_error_msg), "%s", cr_last_error_message());
        return rc;
    }
    t->last_error = 0;
    t->connected = true;
    c->next = t->idle;
    t->idle = c;
    t->n_conns++;
    if (!first) {
        atomic_fetch_add(&t->reconnects, 1);
        crb_log(CRB_LOG_WARN, "thin client: new session %llu with crescent-client on %s",
                (unsigned long long)t->session, t->address);
    }
    return 0;
}

int crc_thin_connect(crc_thin *t)
{
    pthread_mutex_lock(&t->lock);
    int rc = reconnect_locked(t);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

void crc_thin_disconnect(crc_thin *t)
{
    pthread_mutex_lock(&t->lock);
    t->connected = false;
    close_idle_locked(t);
    pthread_cond_broadcast(&t->conn_freed);
    while (t->n_conns > 0)
        pthread_cond_wait(&t->conn_freed, &t->lock);
    pthread_mutex_unlock(&t->lock);
}

/* Is an idle connection still open? (EOF or stray bytes: no.) */
static bool conn_alive(crc_thin_conn *c)
{
    struct pollfd p = {c->fd, POLLIN, 0};
    return poll(&p, 1, 0) == 0 && c->in_len == 0;
}

int crc_thin_conn_take(crc_thin *t, crc_thin_conn **out)
{
    pthread_mutex_lock(&t->lock);
    for (;;) {
        if (atomic_load(&t->closed)) {
            pthread_mutex_unlock(&t->lock);
            return crb_error(CR_UNAVAILABLE_IN_CURRENT_STATUS, "store is closed");
        }
        if (!t->connected) {
            int rc = reconnect_locked(t);
            if (rc < 0) {
                pthread_mutex_unlock(&t->lock);
                return rc;
            }
        }
        if (t->idle != NULL) {
            crc_thin_conn *c = t->idle;
            t->idle = c->next;
            if (crb_now_ns() - c->last_used_ns > IDLE_PROBE_NS && !conn_alive(c)) {
                /* The daemon went away while we were idle: nothing was sent. */
                conn_free(c);
                t->n_conns--;
                t->connected = false;
                close_idle_locked(t);
                continue;
            }
            pthread_mutex_unlock(&t->lock);
            *out = c;
            return 0;
        }
        if (t->n_conns < t->max_conns)
            break;
        pthread_cond_wait(&t->conn_freed, &t->lock);
    }
    t->n_conns++;
    uint64_t gen = atomic_load(&t->gen), session = t->session;
    uint8_t token[CRP_THIN_TOKEN_SIZE];
    memcpy(token, t->token, sizeof(token));
    pthread_mutex_unlock(&t->lock);
    crc_thin_conn *c = NULL;
    int rc = open_conn(t, true, session, token, gen, &c);
    if (rc < 0) {
        pthread_mutex_lock(&t->lock);
        t->n_conns--;
        if (rc == CR_ERR_DAEMON_UNREACHABLE && gen == atomic_load(&t->gen))
            t->connected = false;
        pthread_cond_signal(&t->conn_freed);
        pthread_mutex_unlock(&t->lock);
        return rc;
    }
    *out = c;
    return 0;
}

void crc_thin_conn_give(crc_thin *t, crc_thin_conn *c, bool broken)
{
    pthread_mutex_lock(&t->lock);
    if (broken || c->gen != atomic_load(&t->gen) || atomic_load(&t->closed) || !t->connected) {
        if (broken && c->gen == atomic_load(&t->gen) && t->connected) {
            t->connected = false; /* the session is gone: its other connections too */
            close_idle_locked(t);
        }
        conn_free(c);
        t->n_conns--;
    } else {
        c->last_used_ns = crb_now_ns();
        c->next = t->idle;
        t->idle = c;
    }
    pthread_cond_signal(&t->conn_freed);
    pthread_mutex_unlock(&t->lock);
}

bool crc_thin_breaks_conn(int rc)
{
    return rc == CR_ERR_DAEMON_LOST || rc == CR_ERR_TIMEOUT || rc == CR_ERR_MALFORMED_FRAME ||
           rc == CR_ERR_VERSION_MISMATCH || rc == CR_ERR_CONNECTION || rc == CR_ERR_SYSTEM;
}

int crc_thin_ensure(crc_thin *t, uint64_t *gen)
{
    pthread_mutex_lock(&t->lock);
    int rc = 0;
    if (atomic_load(&t->closed))
        rc = crb_error(CR_UNAVAILABLE_IN_CURRENT_STATUS, "store is closed");
    else if (!t->connected)
        rc = reconnect_locked(t);
    *gen = atomic_load(&t->gen);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

int crc_thin_call(crc_thin *t, const crp_thin_req *req, const int *fds, size_t n_fds,
                  crp_thin_resp *resp, uint64_t need_gen, uint64_t *gen_out)
{
    for (int attempt = 0;; attempt++) {
        crc_thin_conn *c;
        int rc = crc_thin_conn_take(t, &c);
        if (rc < 0)
            return rc;
        if (need_gen != 0 && c->gen != need_gen) {
            crc_thin_conn_give(t, c, false);
            atomic_fetch_add(&t->lost, 1);
            return crb_error(CR_ERR_DAEMON_LOST,
                             "crescent-client's session ended before the call was sent (the "
                             "daemon restarted)");
        }
        bool sent = false;
        rc = crc_thin_conn_call(t, c, req, fds, n_fds, resp, &sent);
        uint64_t gen = c->gen;
        bool broken = rc < 0 && crc_thin_breaks_conn(rc);
        crc_thin_conn_give(t, c, broken);
        if (rc == 0) {
            if (gen_out != NULL)
                *gen_out = gen;
            return 0;
        }
        if (broken && !sent && attempt == 0)
            continue; /* nothing reached the daemon: try the new session */
        if (rc == CR_ERR_DAEMON_LOST)
            atomic_fetch_add(&t->lost, 1);
        return rc;
    }
}

int crc_thin_conn_send(crc_thin *t, crc_thin_conn *c, const crp_thin_req *req)
{
    uint64_t id;
    bool sent = false;
    int rc = encode_frame(c, req, &id);
    if (rc == 0)
        rc = send_all(t, c->fd, c->out.data, c->out.len, NULL, 0, &sent);
    return rc;
}
