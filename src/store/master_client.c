/*
 * master_client.c - see master_client.h.
 *
 * Callers register a pending slot (request id, condition variable) and
 * write their frame (header and body in one buffer, one send) under the
 * write lock. Then one waiting caller at a time is the reader (leader/
 * follower): it polls the socket itself, reads whatever has arrived into
 * the connection's read buffer, hands every complete frame to the slot with
 * the same request id (waking its caller) and keeps a partial frame for the
 * next read, so a burst of replies costs one read, not two per reply. When
 * its own reply has come it hands the read side to another waiting caller
 * and returns. So a lone caller's reply wakes only that caller (no reader
 * thread in between: one wake-up per call on this side instead of two).
 * Deadlines are per call; a caller that gives up removes its slot, and a
 * late reply for it is dropped.
 *
 * Connection loss: whoever sees it (a failed read or write) fails the calls
 * in flight with CR_RPC_FAIL, shuts the socket down and unpublishes it; the
 * next call reconnects. The descriptor is closed only under the write lock
 * while nobody reads it, so no read or write ever lands on a reused
 * descriptor. An idle connection is checked (one non-blocking peek) before
 * the next call is sent on it, so a master that closed it while nothing was
 * in flight (a restart) costs a reconnect, not a failed call.
 */
#include "store/master_client.h"
#include "store/internal.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "base/spin.h"
#include "proto/mac.h"
#include "proto/frame.h"
#include "proto/frame_reader.h"
#include "store/leader.h"

typedef struct pending {
    struct pending *next;
    uint64_t id;
    bool done;
    int status;     /* transport status; 0 when a frame arrived */
    crp_header hdr; /* of the reply */
    uint8_t *body;  /* malloc'd reply body */
    /* What its caller waits on: one condition variable per call (call_n's slots share their
     * first slot's), so a signal meant for the caller (its reply, or the read side handed
     * over) reaches it whichever of its slots it names. */
    pthread_cond_t *wake;
    pthread_cond_t cond; /* the call's, in its first slot */
} pending;

struct crc_master {
    char host[CRB_HOST_MAX];
    uint16_t port;
    crp_rpc_uuid client_id;
    pthread_mutex_t lock; /* everything below */
    pthread_mutex_t write_lock;
    int fd;                   /* -1 when not connected */
    int dead_fd;              /* shut down and unpublished, not closed yet (-1: none) */
    bool reading;             /* a caller is the reader (read_fd, rd) */
    int read_fd;              /* the descriptor it reads */
    pthread_cond_t read_done; /* the reader gave the read side back */
    crp_reader rd;            /* reassembles replies (the reader's) */
    uint64_t heard_ns;        /* when the reader last received bytes on fd */
    pending *pending;
    uint64_t next_id;
    uint64_t view;
    uint64_t caps;
    char tenant[CRP_RPC_MAX_TENANT + 1]; /* "" = default (not sent) */
    char *secret;                        /* CRESCENT_MASTER_SECRET at connect; NULL: none */
    crc_leader *leader; /* "etcd://" address: the HA leader's locator (store/leader.h) */
    crb_spin spin; /* CRESCENT_BUSY_POLL_US: how a reader polls before sleeping (base/spin.h) */
    bool local_ok; /* CRESCENT_MASTER_LOCAL_SOCKET (default 1): take the master's local socket */
    bool local;    /* the connection (fd) is the local socket */
    uint64_t conn_gen; /* counts connections made: names the one fd is (crc_master_send_on) */
    /* Notices for the next call (crc_master_send_later): whole frames, ids
     * set, written ahead of the next call's frame or by crc_master_flush_later. */
    crp_buf later;                /* write_lock */
    _Atomic uint64_t later_since; /* when the oldest was queued (ns); 0: none */
};

#define LATER_MAX_BYTES  (64u << 10) /* queued notices past this go out at once */
#define LATER_KEEP_BYTES (1u << 20)  /* a queue grown past this is freed once written */

/* The queued notices are gone (written or dropped): empty the queue. Caller
 * holds write_lock. */
static void later_clear(crc_master *m)
{
    if (m->later.cap > LATER_KEEP_BYTES)
        crp_buf_free(&m->later); /* do not pin a huge batch's release for ever */
    else
        crp_buf_reset(&m->later);
    atomic_store(&m->later_since, 0);
}

int crc_master_set_tenant(crc_master *m, const char *tenant)
{
    if (tenant == NULL || strcmp(tenant, "default") == 0)
        tenant = "";
    if (strlen(tenant) > CRP_RPC_MAX_TENANT)
        return crb_error(CR_INVALID_PARAMS, "tenant_id of more than %d bytes", CRP_RPC_MAX_TENANT);
    snprintf(m->tenant, sizeof(m->tenant), "%s", tenant);
    return 0;
}

const char *crc_master_tenant(const crc_master *m)
{
    return m->tenant;
}

/* Fail every pending call (connection lost). Caller holds lock. */
static void fail_pending_locked(crc_master *m, int status)
{
    for (pending *p = m->pending; p != NULL; p = p->next) {
        if (!p->done) {
            p->done = true;
            p->status = status;
            pthread_cond_signal(p->wake);
        }
    }
}

/* Hand one reply to its waiting caller (or drop it). Takes lock. */
static int deliver(crc_master *m, const crp_header *h, const uint8_t *body)
{
    uint8_t *copy = malloc(h->body_len ? h->body_len : 1);
    if (copy == NULL)
        return CR_ERR_NO_MEMORY;
    memcpy(copy, body, h->body_len);
    pthread_mutex_lock(&m->lock);
    pending *p = m->pending;
    while (p != NULL && p->id != h->request_id)
        p = p->next;
    if (p != NULL && !p->done) {
        p->done = true;
        p->status = 0;
        p->hdr = *h;
        p->body = copy;
        copy = NULL;
        pthread_cond_signal(p->wake);
    }
    pthread_mutex_unlock(&m->lock);
    free(copy); /* a reply nobody waits for any more */
    return 0;
}

/* crp_reader: master replies never carry data bytes. */
static int reply_head(void *ctx, const crp_header *h, const uint8_t *body, uint8_t **data_dst)
{
    return h->data_len != 0 ? crb_error(CR_ERR_MALFORMED_FRAME, "master reply carries data bytes")
                            : 0;
}

static int reply_frame(void *ctx, const crp_header *h, const uint8_t *body)
{
    return deliver(ctx, h, body);
}

static const crp_reader_ops reply_reader_ops = {.on_head = reply_head, .on_frame = reply_frame};

/* The connection on fd is dead: fail the calls in flight, shut it down and
 * unpublish it (closed later: close_dead_locked). Caller holds lock. */
static void conn_lost_locked(crc_master *m, int fd)
{
    if (m->fd != fd)
        return; /* somebody saw it first */
    crb_log(CRB_LOG_WARN, "master %s:%u: connection lost: %s", m->host, (unsigned)m->port,
            cr_last_error_message());
    fail_pending_locked(m, CR_RPC_FAIL);
    shutdown(fd, SHUT_RDWR);
    m->fd = -1;
    if (m->dead_fd >= 0 && m->dead_fd != fd && !(m->reading && m->read_fd == m->dead_fd))
        close(m->dead_fd); /* an older one nobody reads (connect normally closed it) */
    m->dead_fd = fd;       /* its partial frame in rd is dropped at the next connect */
}

/* Close an unpublished descriptor once nobody reads it. Caller holds lock
 * and write_lock (so no writer holds it either). */
static void close_dead_locked(crc_master *m)
{
    while (m->dead_fd >= 0 && m->reading && m->read_fd == m->dead_fd)
        pthread_cond_wait(&m->read_done, &m->lock); /* its reader sees EOF at once */
    if (m->dead_fd >= 0) {
        close(m->dead_fd);
        m->dead_fd = -1;
    }
}

/* A reader's recv waits at most this long (SO_RCVTIMEO of the connection)
 * before it looks at the deadline again; under it, it polls. */
#define RECV_WAIT_MS 200

/*
 * Be the reader until p's reply has arrived, the deadline passes or the
 * connection fails: poll fd, read, deliver every complete frame. Called
 * without lock, with m->reading set by the caller. Returns 0 (p done or the
 * deadline passed) or a negative connection error.
 */
static int read_until(crc_master *m, int fd, pending *p, uint64_t deadline)
{
    uint64_t window = crb_spin_window(&m->spin);
    uint64_t spin_until = window > 0 ? crb_now_ns() + window : 0;
    for (;;) {
        pthread_mutex_lock(&m->lock);
        bool done = p->done;
        pthread_mutex_unlock(&m->lock);
        uint64_t now = crb_now_ns();
        if (spin_until != 0 && (done || now >= spin_until)) {
            crb_spin_done(&m->spin, done); /* caught, or ran out: wait in recv */
            spin_until = 0;
        }
        if (done || now >= deadline)
            return 0;
        uint64_t left_ms = (deadline - now + 999999) / 1000000;
        int n = 1;
        if (now >= spin_until && left_ms >= RECV_WAIT_MS) {
            crp_reader_wait_next(&m->rd); /* one recv that waits: no poll first */
        } else {
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            n = poll(&pf, 1, now < spin_until ? 0 : (int)left_ms);
            if (n == 0 && now < spin_until)
                crb_spin_pause();
            if (n == 0 || (n < 0 && errno == EINTR))
                continue;
        }
        uint64_t before = m->rd.received;
        int rc = n < 0 ? crb_error(CR_ERR_CONNECTION, "poll: %s", strerror(errno))
                       : crp_reader_read(&m->rd, fd, &reply_reader_ops, m);
        if (rc < 0)
            return rc;
        if (m->rd.received != before) {
            uint64_t heard = crb_now_ns(); /* (now is from before a wait of up to 200 ms) */
            pthread_mutex_lock(&m->lock);
            m->heard_ns = heard;
            pthread_mutex_unlock(&m->lock);
        }
    }
}

/* Before sending on an idle connection (nothing in flight, nobody
 * reading): has the master closed it meanwhile? Not asked (a system call,
 * ~1 us on a virtual machine) when it answered within the last
 * IDLE_CHECK_NS: a master that closed since then is going down (its
 * replacement is not listening yet), and the call fails as it would on a
 * new connection. Caller holds lock. */
#define IDLE_CHECK_NS 1000000ull
static bool idle_conn_closed_locked(crc_master *m)
{
    if (m->fd < 0 || m->reading || m->pending != NULL)
        return false;
    if (crb_now_ns() - m->heard_ns < IDLE_CHECK_NS)
        return false;
    char c;
    ssize_t n = recv(m->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Encode req as a whole frame into out, header space first so that the
 * frame leaves in one send; frame_set_id fills the header once the request
 * id is known. */
static int encode_frame(const crp_rpc_req *req, crp_buf *out)
{
    uint8_t zero[CRP_HEADER_SIZE] = {0};
    int rc = crp_buf_append(out, zero, sizeof(zero));
    if (rc == 0)
        rc = crp_rpc_req_encode(req, out);
    return rc;
}

/* A request of this connection's calls and notices, in its tenant: every request that names
 * no tenant of its own is sent in m's (a notice too: a read given back or a grant revoked in
 * another namespace than the call that made it finds nothing there). */
static int encode_in_tenant(crc_master *m, const crp_rpc_req *req, crp_buf *out)
{
    crp_rpc_req with_tenant;
    if (m->tenant[0] != '\0' && req->tenant == NULL) {
        with_tenant = *req;
        with_tenant.tenant = m->tenant;
        req = &with_tenant;
    }
    return encode_frame(req, out);
}

static void frame_set_id(crp_buf *frame, uint64_t id)
{
    crp_header h = {.version = CRP_VERSION,
                    .type = CRP_RPC_REQ,
                    .body_len = (uint32_t)(frame->len - CRP_HEADER_SIZE),
                    .request_id = id};
    crp_header_encode(&h, frame->data);
}

/* Decode a reply frame into resp. */
static int decode_reply(const crp_header *h, const uint8_t *body, int op, crp_rpc_resp *resp)
{
    if (h->type == CRP_ERROR) {
        crp_error e = {0};
        crp_error_decode(body, h->body_len, &e);
        crb_error(h->status < 0 ? h->status : CR_RPC_FAIL, "master refused the request: %s",
                  e.message ? e.message : "");
        crp_error_clear(&e);
        memset(resp, 0, sizeof(*resp));
        resp->op = (uint16_t)op;
        resp->status = h->status < 0 ? h->status : CR_RPC_FAIL;
        return 0;
    }
    if (h->type != CRP_RPC_RESP)
        return crb_error(CR_RPC_FAIL, "master answered with a %s frame", crp_type_name(h->type));
    int rc = crp_rpc_resp_decode(body, h->body_len, resp);
    if (rc < 0)
        return crb_error(CR_RPC_FAIL, "undecodable master reply: %s", cr_last_error_message());
    if (resp->op != op) {
        crp_rpc_resp_clear(resp);
        return crb_error(CR_RPC_FAIL, "master answered op %u to op %d", resp->op, op);
    }
    return 0;
}

/* The master's shared secret (docs/WIRE.md, "Master shared secret"): the
 * proofs' labels, as the master's (src/master/auth.h). */
#define AUTH_CLIENT_LABEL "crescent-master-client"
#define AUTH_SERVER_LABEL "crescent-master-server"

static void auth_mac(const char *secret, const char *label, const uint8_t a[CRP_NONCE_SIZE],
                     const uint8_t b[CRP_NONCE_SIZE], uint8_t mac[CRP_MAC_SIZE])
{
    crp_proof(secret, strlen(secret), label, a, CRP_NONCE_SIZE, b, CRP_NONCE_SIZE, mac);
}

/* One SERVICE_READY request and its reply (*resp, to clear) on fd. */
static int hello_round(int fd, const crp_rpc_req *hello, uint64_t deadline, crp_rpc_resp *resp)
{
    crp_buf frame = {0};
    int rc = encode_frame(hello, &frame);
    if (rc == 0) {
        frame_set_id(&frame, 0);
        rc = crb_write_full(fd, frame.data, frame.len, deadline);
    }
    crp_buf_free(&frame);
    crp_header h;
    crp_buf rb = {0};
    if (rc == 0)
        rc = crp_read_frame(fd, CRP_MAX_BODY, deadline, &h, &rb);
    if (rc == 0)
        rc = decode_reply(&h, rb.data, CRP_RPC_SERVICE_READY, resp);
    crp_buf_free(&rb);
    return rc;
}

/* Connect and handshake synchronously. Caller holds lock and write_lock;
 * m->fd < 0. */
/* What a handshake learned: the master's view and capabilities, and its offer
 * of the local socket (docs/WIRE.md "Local socket"; local_socket "" = none). */
typedef struct hello_info {
    uint64_t view, caps;
    char local_socket[CRP_RPC_MAX_LOCAL + 1];
    uint16_t local_port;
    uint32_t local_pid;
} hello_info;

/* SERVICE_READY on fd (and the shared-secret exchange when the master asks
 * for it): 0 with *hi filled, or the handshake's error. Never closes fd. */
static int handshake(crc_master *m, int fd, uint64_t deadline, hello_info *hi)
{
    crp_rpc_req hello = {.op = CRP_RPC_SERVICE_READY};
    hello.u.hello = (crp_rpc_hello_req){.version = CRP_RPC_VERSION,
                                        .caps = CRP_RPC_CAPS_DEFINED,
                                        .client_id = m->client_id,
                                        .software = "crescent 0.1.0"};
    crp_rpc_resp resp;
    int rc = hello_round(fd, &hello, deadline, &resp);
    if (rc == 0 && resp.status == CR_ERR_MASTER_AUTH_REQUIRED && resp.u.hello.has_server_nonce &&
        m->secret != NULL) {
        /* The master's challenge: answer it on the same connection. */
        uint8_t server_nonce[CRP_NONCE_SIZE];
        memcpy(server_nonce, resp.u.hello.server_nonce, CRP_NONCE_SIZE);
        crp_rpc_resp_clear(&resp);
        hello.u.hello.has_mac = true;
        crb_random_bytes(hello.u.hello.client_nonce, CRP_NONCE_SIZE);
        auth_mac(m->secret, AUTH_CLIENT_LABEL, server_nonce, hello.u.hello.client_nonce,
                 hello.u.hello.mac);
        rc = hello_round(fd, &hello, deadline, &resp);
        if (rc == 0 && resp.status == 0) {
            uint8_t want[CRP_MAC_SIZE];
            auth_mac(m->secret, AUTH_SERVER_LABEL, hello.u.hello.client_nonce, server_nonce, want);
            if (!resp.u.hello.has_mac || !crp_proof_equal(want, resp.u.hello.mac))
                resp.status = crb_error(CR_ERR_MASTER_AUTH_FAILED,
                                        "master %s:%u did not prove the shared secret", m->host,
                                        (unsigned)m->port);
        }
    } else if (rc == 0 && resp.status == 0 && m->secret != NULL) {
        /* A master without the secret could be anyone: the engine refuses such peers too. */
        resp.status = crb_error(CR_ERR_MASTER_AUTH_FAILED,
                                "master %s:%u has no shared secret, but CRESCENT_MASTER_SECRET "
                                "is set",
                                m->host, (unsigned)m->port);
    }
    if (rc < 0)
        return crb_error(rc == CR_ERR_TIMEOUT ? CR_RPC_TIMEOUT : CR_RPC_FAIL,
                         "handshake with master %s:%u: %s", m->host, (unsigned)m->port,
                         cr_last_error_message());
    rc = resp.status;
    if (rc == 0)
        rc = crp_rpc_check_version("master", resp.u.hello.version);
    else if (rc == CR_ERR_MASTER_AUTH_REQUIRED)
        crb_error(rc, "master %s:%u requires a shared secret: set CRESCENT_MASTER_SECRET", m->host,
                  (unsigned)m->port);
    else if (rc != CR_ERR_MASTER_AUTH_FAILED || resp.message != NULL)
        crb_error(rc, "master %s:%u refused the handshake: %s", m->host, (unsigned)m->port,
                  resp.message ? resp.message : cr_strerror(rc));
    if (rc == 0 && m->leader != NULL &&
        !crc_leader_accept_term(m->leader, resp.u.hello.view_version))
        rc = crb_error(CR_ERR_NOT_LEADER, "master %s:%u announces term %llu, below %llu: deposed",
                       m->host, (unsigned)m->port, (unsigned long long)resp.u.hello.view_version,
                       (unsigned long long)crc_leader_max_term(m->leader));
    m->view = resp.u.hello.view_version;
    m->caps = resp.u.hello.caps;
    if (rc == 0) {
        *hi = (hello_info){.view = resp.u.hello.view_version,
                           .caps = resp.u.hello.caps,
                           .local_port = resp.u.hello.local_port,
                           .local_pid = resp.u.hello.local_pid};
        if (resp.u.hello.local_socket != NULL)
            snprintf(hi->local_socket, sizeof(hi->local_socket), "%s", resp.u.hello.local_socket);
    }
    crp_rpc_resp_clear(&resp);
    return rc;
}

/* read_until's waiting recv ends after RECV_WAIT_MS (every other read and
 * write on the blocking socket passes MSG_DONTWAIT). */
static int set_recv_wait(crc_master *m, int fd)
{
    struct timeval wait = {.tv_sec = 0, .tv_usec = RECV_WAIT_MS * 1000};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait)) != 0)
        return crb_error(CR_RPC_FAIL, "master %s:%u: SO_RCVTIMEO: %s", m->host, (unsigned)m->port,
                         strerror(errno));
    return 0;
}

/*
 * The master offered its local socket on TCP connection tcp_fd (hi): the
 * descriptor to use from now on. The offer is taken only when it was made to
 * this very connection (the port the master saw is ours: no forwarder in
 * between) and the listener of the socket is the master's process (its pid,
 * SO_PEERCRED); then the handshake runs again over it and the TCP connection
 * is closed. Anything short of that keeps TCP (a debug line says why).
 */
static int switch_to_local(crc_master *m, int tcp_fd, const hello_info *hi, uint64_t deadline)
{
    if (hi->local_socket[0] == '\0' || !m->local_ok)
        return tcp_fd;
    const char *why = NULL;
    int32_t pid = 0;
    int fd = -1;
    if (crb_local_port(tcp_fd) != hi->local_port) {
        why = "offered to another port (a forwarder in between)";
    } else if ((fd = crb_connect_abstract(hi->local_socket, &pid)) < 0) {
        why = cr_last_error_message();
    } else if (pid <= 0 || (uint32_t)pid != hi->local_pid) {
        why = "its listener is not the master's process";
    } else {
        hello_info again;
        if (set_recv_wait(m, fd) < 0 || handshake(m, fd, deadline, &again) < 0)
            why = cr_last_error_message();
    }
    if (why != NULL) {
        crb_log(CRB_LOG_DEBUG, "master %s:%u: staying on TCP, not @%s: %s", m->host,
                (unsigned)m->port, hi->local_socket, why);
        if (fd >= 0)
            close(fd);
        return tcp_fd;
    }
    close(tcp_fd);
    return fd;
}

static int connect_locked(crc_master *m, int timeout_ms)
{
    close_dead_locked(m);     /* write_lock held: no sender is using it */
    crp_reader_reset(&m->rd); /* nobody reads (m->fd < 0): a dead stream's partial frame */
    uint64_t deadline = crb_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    if (m->leader != NULL) { /* HA: whoever leads now (store/leader.h) */
        uint64_t term = 0;
        int lrc = crc_leader_resolve(m->leader, timeout_ms, m->host, &m->port, &term);
        if (lrc < 0)
            return lrc;
    }
    int fd = crb_connect(m->host, m->port, timeout_ms);
    if (fd < 0)
        return crb_error(fd == CR_ERR_TIMEOUT ? CR_RPC_TIMEOUT : CR_RPC_FAIL, "master %s:%u: %s",
                         m->host, (unsigned)m->port, cr_last_error_message());
    hello_info hi;
    int rc = set_recv_wait(m, fd);
    if (rc == 0)
        rc = handshake(m, fd, deadline, &hi);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    int use = switch_to_local(m, fd, &hi, deadline);
    m->local = use != fd;
    m->fd = use;
    m->conn_gen++;
    return 0;
}

int crc_master_connect(const char *address, crp_rpc_uuid client_id, int timeout_ms,
                       crc_master **out)
{
    const char *local = getenv("CRESCENT_MASTER_LOCAL_SOCKET");
    if (local != NULL && local[0] != '\0' && strcmp(local, "0") != 0 && strcmp(local, "1") != 0)
        return crb_error(CR_INVALID_PARAMS, "CRESCENT_MASTER_LOCAL_SOCKET='%s' is not 0 or 1",
                         local);
    crc_master *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "master connection");
    int rc = 0;
    if (crc_leader_is_etcd(address)) {
        rc = crc_leader_open(address, &m->leader);
        if (rc < 0) {
            free(m);
            return rc;
        }
        m->port = 1; /* resolved at each connection */
    } else {
        rc = crb_parse_hostport(address, m->host, &m->port);
    }
    if (rc < 0 || m->port == 0) {
        free(m);
        return crb_error(CR_INVALID_PARAMS, "master address '%s' is not host:port",
                         address ? address : "(null)");
    }
    m->client_id = client_id;
    m->local_ok = local == NULL || strcmp(local, "0") != 0;
    /* A bad value was refused already where the store's engine (or thin
     * client) was set up; here it only means no spinning. */
    int64_t spin_mode = 0;
    if (crc_spin_mode(&spin_mode) < 0)
        spin_mode = 0;
    crb_spin_init(&m->spin, spin_mode);
    const char *secret = getenv("CRESCENT_MASTER_SECRET");
    if (secret != NULL && secret[0] != '\0' && (m->secret = strdup(secret)) == NULL) {
        free(m);
        return crb_error(CR_ERR_NO_MEMORY, "master connection");
    }
    m->fd = m->dead_fd = m->read_fd = -1;
    m->next_id = 1;
    crp_reader_init(&m->rd, CRP_MAX_BODY);
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->write_lock, NULL);
    pthread_cond_init(&m->read_done, NULL);
    pthread_mutex_lock(&m->write_lock);
    pthread_mutex_lock(&m->lock);
    rc = connect_locked(m, timeout_ms);
    pthread_mutex_unlock(&m->lock);
    pthread_mutex_unlock(&m->write_lock);
    if (rc < 0) {
        crc_master_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

static int flush_later_locked(crc_master *m, uint64_t deadline);

#define CALL_MAX 2 /* requests one call_n sends in one write */

/* Is q one of mine[0..n)? */
static bool is_mine(const pending *q, pending *const *mine, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (q == mine[i])
            return true;
    return false;
}

/* The first of mine[0..n) still waiting for its reply, or NULL. Caller holds lock. */
static pending *first_waiting(pending *const *mine, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!mine[i]->done)
            return mine[i];
    return NULL;
}

/*
 * Send reqs[0..n) (n <= CALL_MAX) in one write and wait for all their replies (the master
 * serves a connection's requests in order). 0: every resps[i] holds a decoded reply.
 */
static int call_n(crc_master *m, const crp_rpc_req *const *reqs, crp_rpc_resp *const *resps,
                  size_t n, int timeout_ms, crc_sent_fn sent, void *sent_arg, uint64_t *conn_out)
{
    crp_buf frame = {0};
    size_t ends[CALL_MAX];
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = encode_in_tenant(m, reqs[i], &frame);
        ends[i] = frame.len;
    }
    if (rc < 0) {
        crp_buf_free(&frame);
        return rc;
    }
    const crp_rpc_req *req = reqs[0]; /* named in messages */
    uint64_t deadline = crb_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    pending p[CALL_MAX];
    pending *mine[CALL_MAX];
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (size_t i = 0; i < n; i++) {
        p[i] = (pending){.done = false, .wake = &p[0].cond};
        mine[i] = &p[i];
    }
    pthread_cond_init(&p[0].cond, &ca);
    pthread_condattr_destroy(&ca);

    pthread_mutex_lock(&m->write_lock);
    pthread_mutex_lock(&m->lock);
    if (idle_conn_closed_locked(m)) {
        crb_error(CR_ERR_CONNECTION, "the master closed the idle connection");
        conn_lost_locked(m, m->fd);
    }
    if (m->fd < 0)
        rc = connect_locked(m, timeout_ms);
    int fd = m->fd;
    uint64_t conn = m->conn_gen;
    for (size_t i = 0; rc == 0 && i < n; i++) /* never to a master that would ignore it */
        if (reqs[i]->commit_ahead &&
            !(m->caps & (reqs[i]->op == CRP_RPC_BATCH_PUT_END ? CRP_RPC_CAP_BATCH_COMMIT_AHEAD
                                                              : CRP_RPC_CAP_COMMIT_AHEAD)))
            rc = crb_error(CR_NOT_SUPPORTED, "%s: the master does not commit ahead (caps %#llx)",
                           crp_rpc_op_name(reqs[i]->op), (unsigned long long)m->caps);
    if (rc == 0) {
        for (size_t i = 0; i < n; i++) {
            p[i].id = m->next_id++;
            p[i].next = m->pending;
            m->pending = &p[i];
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (rc == 0) {
        for (size_t i = 0, start = 0; i < n; start = ends[i], i++) {
            crp_buf one = {.data = frame.data + start, .len = ends[i] - start};
            frame_set_id(&one, p[i].id);
        }
        /* The notices queued for this call go first, in the same write
         * (without memory to join them, in a write of their own). */
        const crp_buf *out = &frame;
        if (m->later.len > 0 && crp_buf_append(&m->later, frame.data, frame.len) == 0)
            out = &m->later;
        else if (m->later.len > 0)
            flush_later_locked(m, deadline);
        rc = crb_write_full(fd, out->data, out->len, deadline);
        if (out == &m->later)
            later_clear(m);
        if (rc < 0) {
            rc = crb_error(rc == CR_ERR_TIMEOUT ? CR_RPC_TIMEOUT : CR_RPC_FAIL,
                           "sending %s to the master: %s", crp_rpc_op_name(req->op),
                           cr_last_error_message());
            pthread_mutex_lock(&m->lock);
            conn_lost_locked(m, fd); /* a partial frame: the stream is unusable */
            pthread_mutex_unlock(&m->lock);
        }
    }
    pthread_mutex_unlock(&m->write_lock);
    crp_buf_free(&frame);
    if (rc == 0 && conn_out != NULL)
        *conn_out = conn; /* they went out on it, whatever becomes of the replies */
    if (rc == 0 && sent != NULL) {
        sent(sent_arg); /* while the master works on it */
        uint64_t after = crb_now_ns() + (uint64_t)timeout_ms * 1000000ull;
        if (deadline < after)
            deadline = after; /* the caller's own work does not use up the reply's wait */
    }

    pthread_mutex_lock(&m->lock);
    if (rc == 0) {
        bool moved = false;
        pending *w;
        while ((w = first_waiting(mine, n)) != NULL && !moved && crb_now_ns() < deadline) {
            /* HA: every 500 ms without a reply, ask etcd whether another
             * master leads now (this one may be paused or partitioned). */
            uint64_t until = deadline;
            if (m->leader != NULL && crb_now_ns() + 500000000ull < deadline)
                until = crb_now_ns() + 500000000ull;
            struct timespec ts = {(time_t)(until / 1000000000ull), (long)(until % 1000000000ull)};
            if (!m->reading && m->fd >= 0) {
                /* Nobody reads: be the reader until our reply is in. */
                int rfd = m->fd;
                m->reading = true;
                m->read_fd = rfd;
                pthread_mutex_unlock(&m->lock);
                int rrc = read_until(m, rfd, w, until);
                pthread_mutex_lock(&m->lock);
                m->reading = false;
                m->read_fd = -1;
                if (rrc < 0)
                    conn_lost_locked(m, rfd);
                pthread_cond_broadcast(&m->read_done);
                /* Hand the read side to a caller still waiting. */
                for (pending *q = m->pending; q != NULL; q = q->next) {
                    if (!is_mine(q, mine, n) && !q->done) {
                        pthread_cond_signal(q->wake);
                        break;
                    }
                }
            } else if (m->fd < 0 && !w->done) {
                break; /* lost, and fail_pending_locked missed us: cannot happen */
            } else if (pthread_cond_timedwait(w->wake, &m->lock, &ts) != 0 && !w->done &&
                       until == deadline) {
                break;
            }
            if (!w->done && until != deadline && crb_now_ns() >= until) {
                uint64_t view = m->view;
                pthread_mutex_unlock(&m->lock);
                moved = crc_leader_moved(m->leader, view);
                pthread_mutex_lock(&m->lock);
            }
        }
        w = first_waiting(mine, n);
        if (moved && w != NULL)
            rc = crb_error(CR_RPC_FAIL, "%s: another master leads now", crp_rpc_op_name(req->op));
        else if (w != NULL)
            rc = crb_error(CR_RPC_TIMEOUT, "master did not answer %s within %d ms",
                           crp_rpc_op_name(req->op), timeout_ms);
        for (size_t i = 0; rc == 0 && i < n; i++)
            if (p[i].status != 0)
                rc = crb_error(p[i].status, "master connection lost during %s",
                               crp_rpc_op_name(reqs[i]->op));
    }
    for (size_t i = 0; i < n; i++) { /* unlink our slots */
        if (p[i].id == 0)
            continue;
        pending **pp = &m->pending;
        while (*pp != NULL && *pp != &p[i])
            pp = &(*pp)->next;
        if (*pp != NULL)
            *pp = p[i].next;
    }
    pthread_mutex_unlock(&m->lock);
    size_t decoded = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if ((rc = decode_reply(&p[i].hdr, p[i].body, reqs[i]->op, resps[i])) == 0)
            decoded++;
    if (rc < 0)
        for (size_t i = 0; i < decoded; i++)
            crp_rpc_resp_clear(resps[i]);
    for (size_t i = 0; i < n; i++)
        free(p[i].body);
    pthread_cond_destroy(&p[0].cond);
    return rc;
}

/* Make the next call reconnect (and, through etcd, find the leader again). */
static void drop_connection(crc_master *m)
{
    pthread_mutex_lock(&m->lock);
    if (m->fd >= 0) {
        crb_error(CR_RPC_FAIL, "following the HA leader");
        conn_lost_locked(m, m->fd); /* a reader sees the end at once; closed at the reconnect */
    }
    pthread_mutex_unlock(&m->lock);
}

int crc_master_call(crc_master *m, const crp_rpc_req *req, crp_rpc_resp *resp, int timeout_ms)
{
    return crc_master_call_sent(m, req, resp, timeout_ms, NULL, NULL);
}

/*
 * HA: a call that found no leader (connection refused or lost, or NOT_LEADER)
 * is retried against the leader etcd names, within the call's own deadline
 * (docs/ha.md, "clients"). Of n requests sent together, the whole call is
 * retried when the first one was answered NOT_LEADER (the master serves a
 * connection's requests in order, so none was applied) or the connection was
 * lost (as for a single call, a request the lost leader applied is answered
 * by the new one as a repeat: a grant's end finds no grant and the put goes
 * two-phase, finding its key complete); a later one's NOT_LEADER alone is left
 * in its reply for the caller.
 */
static int call_following(crc_master *m, const crp_rpc_req *const *reqs, crp_rpc_resp *const *resps,
                          size_t n, int timeout_ms, crc_sent_fn sent, void *sent_arg,
                          uint64_t *conn_out)
{
    if (m->leader == NULL)
        return call_n(m, reqs, resps, n, timeout_ms, sent, sent_arg, conn_out);
    uint64_t deadline = crb_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1);
    for (;;) {
        uint64_t now = crb_now_ms();
        int left = now < deadline ? (int)(deadline - now) : 1;
        int rc = call_n(m, reqs, resps, n, left, sent, sent_arg, conn_out);
        sent = NULL; /* (once: the first request that went out) */
        /* NOT_LEADER in a reply, or from the handshake of a master that
         * has not finished its promotion yet */
        bool not_leader = rc == 0 && resps[0]->status == CR_ERR_NOT_LEADER;
        if (!not_leader && rc != CR_RPC_FAIL && rc != CR_ERR_NOT_LEADER)
            return rc;
        if (crb_now_ms() + 50 >= deadline)
            return rc;
        for (size_t i = 0; not_leader && i < n; i++)
            crp_rpc_resp_clear(resps[i]);
        drop_connection(m);
        usleep(20000);
    }
}

int crc_master_call_sent(crc_master *m, const crp_rpc_req *req, crp_rpc_resp *resp, int timeout_ms,
                         crc_sent_fn sent, void *sent_arg)
{
    return call_following(m, &req, &resp, 1, timeout_ms, sent, sent_arg, NULL);
}

int crc_master_calls_sent(crc_master *m, const crp_rpc_req *const *reqs, crp_rpc_resp *const *resps,
                          size_t n, int timeout_ms, crc_sent_fn sent, void *sent_arg,
                          uint64_t *conn_out)
{
    if (n == 0 || n > 2)
        return crb_error(CR_INVALID_PARAMS, "crc_master_calls_sent: %zu requests (1 or 2)", n);
    return call_following(m, reqs, resps, n, timeout_ms, sent, sent_arg, conn_out);
}

int crc_master_call2(crc_master *m, const crp_rpc_req *a, crp_rpc_resp *resp_a,
                     const crp_rpc_req *b, crp_rpc_resp *resp_b, int timeout_ms)
{
    const crp_rpc_req *reqs[2] = {a, b};
    crp_rpc_resp *resps[2] = {resp_a, resp_b};
    return call_following(m, reqs, resps, 2, timeout_ms, NULL, NULL, NULL);
}

/* Write the queued notices (write_lock held); they are dropped on failure. */
static int flush_later_locked(crc_master *m, uint64_t deadline)
{
    if (m->later.len == 0)
        return 0;
    pthread_mutex_lock(&m->lock);
    int fd = m->fd;
    pthread_mutex_unlock(&m->lock);
    int rc = 0;
    if (fd < 0) {
        rc = crb_error(CR_RPC_FAIL, "%zu bytes of notices not sent: no connection to the master",
                       m->later.len);
    } else if ((rc = crb_write_full(fd, m->later.data, m->later.len, deadline)) < 0) {
        rc = crb_error(rc == CR_ERR_TIMEOUT ? CR_RPC_TIMEOUT : CR_RPC_FAIL,
                       "sending notices to the master: %s", cr_last_error_message());
        pthread_mutex_lock(&m->lock);
        conn_lost_locked(m, fd); /* a partial frame: the stream is unusable */
        pthread_mutex_unlock(&m->lock);
    }
    later_clear(m);
    return rc;
}

/* A notice (no pending slot: its reply is dropped): queued behind the
 * others, and written now with them unless `queue`; only on connection `conn` unless 0. */
static int send_notice(crc_master *m, const crp_rpc_req *req, int timeout_ms, bool queue,
                       uint64_t conn)
{
    crp_buf frame = {0};
    int rc = encode_in_tenant(m, req, &frame);
    if (rc < 0) {
        crp_buf_free(&frame);
        return rc;
    }
    uint64_t deadline = crb_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    pthread_mutex_lock(&m->write_lock);
    pthread_mutex_lock(&m->lock);
    bool connected = m->fd >= 0;
    bool same = conn == 0 || conn == m->conn_gen;
    uint64_t id = m->next_id++;
    pthread_mutex_unlock(&m->lock);
    if (!connected || !same) {
        rc = crb_error(CR_RPC_FAIL, "%s not sent: %s", crp_rpc_op_name(req->op),
                       connected ? "the connection it belongs to was lost (and replaced)"
                                 : "no connection to the master");
    } else {
        frame_set_id(&frame, id);
        rc = crp_buf_append(&m->later, frame.data, frame.len);
        if (rc == 0 && atomic_load(&m->later_since) == 0)
            atomic_store(&m->later_since, crb_now_ns());
        if (rc == 0 && (!queue || m->later.len >= LATER_MAX_BYTES))
            rc = flush_later_locked(m, deadline);
    }
    pthread_mutex_unlock(&m->write_lock);
    crp_buf_free(&frame);
    return rc;
}

int crc_master_send(crc_master *m, const crp_rpc_req *req, int timeout_ms)
{
    return send_notice(m, req, timeout_ms, false, 0);
}

int crc_master_send_on(crc_master *m, const crp_rpc_req *req, int timeout_ms, uint64_t conn)
{
    return send_notice(m, req, timeout_ms, false, conn != 0 ? conn : UINT64_MAX);
}

int crc_master_send_later(crc_master *m, const crp_rpc_req *req, int timeout_ms)
{
    return send_notice(m, req, timeout_ms, true, 0);
}

int crc_master_flush_later(crc_master *m, uint64_t min_age_ns, int timeout_ms)
{
    uint64_t since = atomic_load(&m->later_since);
    if (since == 0 || crb_now_ns() - since < min_age_ns)
        return 0;
    /* An aged flush (the heartbeat's) never waits behind a writer: whoever
     * holds the lock is sending a call, which carries the notices anyway. */
    if (min_age_ns > 0 && pthread_mutex_trylock(&m->write_lock) != 0)
        return 0;
    if (min_age_ns == 0)
        pthread_mutex_lock(&m->write_lock);
    int rc = flush_later_locked(m, crb_now_ns() + (uint64_t)timeout_ms * 1000000ull);
    pthread_mutex_unlock(&m->write_lock);
    return rc;
}

uint64_t crc_master_caps(crc_master *m)
{
    pthread_mutex_lock(&m->lock);
    uint64_t c = m->caps;
    pthread_mutex_unlock(&m->lock);
    return c;
}

bool crc_master_on_local_socket(crc_master *m)
{
    pthread_mutex_lock(&m->lock);
    bool local = m->fd >= 0 && m->local;
    pthread_mutex_unlock(&m->lock);
    return local;
}

uint64_t crc_master_view(crc_master *m)
{
    pthread_mutex_lock(&m->lock);
    uint64_t v = m->view;
    pthread_mutex_unlock(&m->lock);
    return v;
}

void crc_master_close(crc_master *m)
{
    if (m == NULL)
        return;
    /* callers have returned (the store waits for its calls): nobody reads
     * or writes either descriptor */
    if (m->fd >= 0)
        close(m->fd);
    if (m->dead_fd >= 0)
        close(m->dead_fd);
    crp_reader_fini(&m->rd);
    crp_buf_free(&m->later); /* (dropped: crc_master_flush_later first sends them) */
    pthread_cond_destroy(&m->read_done);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->write_lock);
    free(m->secret);
    crc_leader_close(m->leader);
    free(m);
}
