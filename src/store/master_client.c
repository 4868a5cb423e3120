/*
 * master_client.c - see master_client.h.
 *
 * Callers register a pending slot (request id, condition variable), write
 * their frame (header and body in one buffer, one send) under the write
 * lock and sleep on the slot. A reader thread owns the socket's read side:
 * it reads whatever has arrived into one buffer, hands every complete frame
 * in it to the slot with the same request id, and keeps a partial frame for
 * the next read, so a burst of replies costs one read, not two per reply.
 * Deadlines are per call; a caller that gives up removes its slot, and a
 * late reply for it is dropped.
 */
#include "store/master_client.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "proto/frame.h"
#include "store/leader.h"

typedef struct pending {
    struct pending *next;
    uint64_t id;
    bool done;
    int status;     /* transport status; 0 when a frame arrived */
    crp_header hdr; /* of the reply */
    uint8_t *body;  /* malloc'd reply body */
    pthread_cond_t cond;
} pending;

struct crc_master {
    char host[CRB_HOST_MAX];
    uint16_t port;
    crp_rpc_uuid client_id;
    pthread_mutex_t lock; /* everything below */
    pthread_mutex_t write_lock;
    int fd; /* -1 when not connected */
    bool reader_running;
    pthread_t reader;
    int reader_fd; /* the reader's connection: closed by whoever joins it */
    atomic_bool stop;
    pending *pending;
    uint64_t next_id;
    uint64_t view;
    uint64_t caps;
    char tenant[CRP_RPC_MAX_TENANT + 1]; /* "" = default (not sent) */
    crc_leader *leader; /* "etcd://" address: the HA leader's locator (store/leader.h) */
};

int crc_master_set_tenant(crc_master *m, const char *tenant)
{
    if (tenant == NULL || strcmp(tenant, "default") == 0)
        tenant = "";
    if (strlen(tenant) > CRP_RPC_MAX_TENANT)
        return crb_error(CR_INVALID_PARAMS, "tenant_id of more than %d bytes", CRP_RPC_MAX_TENANT);
    snprintf(m->tenant, sizeof(m->tenant), "%s", tenant);
    return 0;
}

static int read_frame(int fd, crp_header *h, uint8_t **body, uint64_t deadline_ns)
{
    uint8_t hb[CRP_HEADER_SIZE];
    int rc = crb_read_full(fd, hb, sizeof(hb), deadline_ns);
    if (rc < 0)
        return rc;
    rc = crp_header_decode(hb, h);
    if (rc < 0)
        return rc;
    if (h->data_len != 0)
        return crb_error(CR_ERR_MALFORMED_FRAME, "master reply carries data bytes");
    uint8_t *b = malloc(h->body_len ? h->body_len : 1);
    if (b == NULL)
        return CR_ERR_NO_MEMORY;
    rc = h->body_len ? crb_read_full(fd, b, h->body_len, deadline_ns) : 0;
    if (rc < 0) {
        free(b);
        return rc;
    }
    *body = b;
    return 0;
}

/* Fail every pending call (connection lost). Caller holds lock. */
static void fail_pending_locked(crc_master *m, int status)
{
    for (pending *p = m->pending; p != NULL; p = p->next) {
        if (!p->done) {
            p->done = true;
            p->status = status;
            pthread_cond_signal(&p->cond);
        }
    }
}

#define READER_CHUNK (64u * 1024)

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
        pthread_cond_signal(&p->cond);
    }
    pthread_mutex_unlock(&m->lock);
    free(copy); /* a reply nobody waits for any more */
    return 0;
}

/* Deliver every complete frame in buf[0..*len) and keep the rest at the
 * front. Negative when the stream is malformed. */
static int deliver_frames(crc_master *m, uint8_t *buf, size_t *len)
{
    size_t off = 0;
    int rc = 0;
    while (*len - off >= CRP_HEADER_SIZE) {
        crp_header h;
        rc = crp_header_decode(buf + off, &h);
        if (rc == 0 && h.data_len != 0)
            rc = crb_error(CR_ERR_MALFORMED_FRAME, "master reply carries data bytes");
        if (rc < 0)
            break;
        if (*len - off - CRP_HEADER_SIZE < h.body_len)
            break;
        rc = deliver(m, &h, buf + off + CRP_HEADER_SIZE);
        if (rc < 0)
            break;
        off += CRP_HEADER_SIZE + h.body_len;
    }
    memmove(buf, buf + off, *len - off);
    *len -= off;
    return rc;
}

/* Read until the frame at the front of the buffer is complete or nothing
 * more is waiting; grows the buffer for a large frame. */
static int reader_fill(int fd, uint8_t **buf, size_t *cap, size_t *len)
{
    size_t want = READER_CHUNK;
    if (*len >= CRP_HEADER_SIZE) {
        crp_header h;
        if (crp_header_decode(*buf, &h) == 0 && CRP_HEADER_SIZE + (size_t)h.body_len > want)
            want = CRP_HEADER_SIZE + (size_t)h.body_len;
    }
    if (*cap < want) {
        uint8_t *nb = realloc(*buf, want);
        if (nb == NULL)
            return CR_ERR_NO_MEMORY;
        *buf = nb;
        *cap = want;
    }
    for (;;) {
        ssize_t n = recv(fd, *buf + *len, *cap - *len, MSG_DONTWAIT);
        if (n > 0) {
            *len += (size_t)n;
            return 0;
        }
        if (n == 0)
            return crb_error(CR_ERR_CONNECTION, "master closed the connection");
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return crb_error(CR_ERR_CONNECTION, "reading from the master: %s", strerror(errno));
    }
}

static void *reader_main(void *arg)
{
    crc_master *m = arg;
    int fd = m->fd;
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    while (!atomic_load(&m->stop)) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int n = poll(&pf, 1, 200);
        if (n == 0)
            continue;
        if (n < 0 && errno == EINTR)
            continue;
        int rc = n < 0 ? crb_error(CR_ERR_CONNECTION, "poll: %s", strerror(errno))
                       : reader_fill(fd, &buf, &cap, &len);
        if (rc == 0)
            rc = deliver_frames(m, buf, &len);
        if (rc < 0) {
            pthread_mutex_lock(&m->lock);
            if (!atomic_load(&m->stop))
                crb_log(CRB_LOG_WARN, "master %s:%u: connection lost: %s", m->host,
                        (unsigned)m->port, cr_last_error_message());
            fail_pending_locked(m, CR_RPC_FAIL);
            shutdown(fd, SHUT_RDWR);
            m->fd = -1; /* the next call reconnects; fd closed on join */
            pthread_mutex_unlock(&m->lock);
            break;
        }
    }
    free(buf);
    /* Unpublish the fd but do not close it: a sender that read m->fd just
     * before may still be writing to it (it fails, the socket is shut down).
     * Whoever joins this thread closes it (reader_reap), when no sender can
     * hold it any more, so no write ever lands on a reused descriptor. */
    pthread_mutex_lock(&m->lock);
    if (m->fd == fd)
        m->fd = -1;
    pthread_mutex_unlock(&m->lock);
    return NULL;
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

/* Connect and handshake synchronously, then start the reader. Caller
 * holds lock and write_lock; m->fd < 0. */
static int connect_locked(crc_master *m, int timeout_ms)
{
    if (m->reader_running) {
        pthread_mutex_unlock(&m->lock);
        atomic_store(&m->stop, true);
        pthread_join(m->reader, NULL);
        atomic_store(&m->stop, false);
        pthread_mutex_lock(&m->lock);
        m->reader_running = false;
        close(m->reader_fd); /* write_lock held: no sender is using it */
        m->reader_fd = -1;
    }
    uint64_t deadline = crb_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    uint64_t term = 0;
    if (m->leader != NULL) { /* HA: whoever leads now (store/leader.h) */
        int lrc = crc_leader_resolve(m->leader, timeout_ms, m->host, &m->port, &term);
        if (lrc < 0)
            return lrc;
    }
    int fd = crb_connect(m->host, m->port, timeout_ms);
    if (fd < 0)
        return crb_error(fd == CR_ERR_TIMEOUT ? CR_RPC_TIMEOUT : CR_RPC_FAIL, "master %s:%u: %s",
                         m->host, (unsigned)m->port, cr_last_error_message());
    crp_rpc_req hello = {.op = CRP_RPC_SERVICE_READY};
    hello.u.hello =
        (crp_rpc_hello_req){CRP_RPC_VERSION, CRP_RPC_CAPS_DEFINED, m->client_id, "crescent 0.1.0"};
    crp_buf frame = {0};
    int rc = encode_frame(&hello, &frame);
    if (rc == 0) {
        frame_set_id(&frame, 0);
        rc = crb_write_full(fd, frame.data, frame.len, deadline);
    }
    crp_buf_free(&frame);
    crp_header h;
    uint8_t *rb = NULL;
    if (rc == 0)
        rc = read_frame(fd, &h, &rb, deadline);
    crp_rpc_resp resp;
    if (rc == 0)
        rc = decode_reply(&h, rb, CRP_RPC_SERVICE_READY, &resp);
    free(rb);
    if (rc < 0) {
        close(fd);
        return crb_error(rc == CR_ERR_TIMEOUT ? CR_RPC_TIMEOUT : CR_RPC_FAIL,
                         "handshake with master %s:%u: %s", m->host, (unsigned)m->port,
                         cr_last_error_message());
    }
    rc = resp.status;
    if (rc == 0)
        rc = crp_rpc_check_version("master", resp.u.hello.version);
    else
        crb_error(rc, "master %s:%u refused the handshake: %s", m->host, (unsigned)m->port,
                  resp.message ? resp.message : cr_strerror(rc));
    if (rc == 0 && m->leader != NULL &&
        !crc_leader_accept_term(m->leader, resp.u.hello.view_version))
        rc = crb_error(CR_ERR_NOT_LEADER, "master %s:%u announces term %llu, below %llu: deposed",
                       m->host, (unsigned)m->port, (unsigned long long)resp.u.hello.view_version,
                       (unsigned long long)crc_leader_max_term(m->leader));
    m->view = resp.u.hello.view_version;
    m->caps = resp.u.hello.caps;
    crp_rpc_resp_clear(&resp);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    m->fd = fd;
    m->reader_fd = fd;
    if (pthread_create(&m->reader, NULL, reader_main, m) != 0) {
        close(fd);
        m->fd = m->reader_fd = -1;
        return crb_error(CR_ERR_SYSTEM, "starting the master reader thread");
    }
    m->reader_running = true;
    return 0;
}

int crc_master_connect(const char *address, crp_rpc_uuid client_id, int timeout_ms,
                       crc_master **out)
{
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
        return crb_error(CR_ERR_INVALID_ARGUMENT, "master address '%s' is not host:port",
                         address ? address : "(null)");
    }
    m->client_id = client_id;
    m->fd = m->reader_fd = -1;
    m->next_id = 1;
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->write_lock, NULL);
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

static int call_once(crc_master *m, const crp_rpc_req *req, crp_rpc_resp *resp, int timeout_ms)
{
    crp_buf frame = {0};
    crp_rpc_req with_tenant;
    if (m->tenant[0] != '\0' && req->tenant == NULL) { /* every call in this tenant */
        with_tenant = *req;
        with_tenant.tenant = m->tenant;
        req = &with_tenant;
    }
    int rc = encode_frame(req, &frame);
    if (rc < 0) {
        crp_buf_free(&frame);
        return rc;
    }
    uint64_t deadline = crb_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    pending p = {.done = false};
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p.cond, &ca);
    pthread_condattr_destroy(&ca);

    pthread_mutex_lock(&m->write_lock);
    pthread_mutex_lock(&m->lock);
    if (m->fd < 0)
        rc = connect_locked(m, timeout_ms);
    int fd = m->fd;
    if (rc == 0) {
        p.id = m->next_id++;
        p.next = m->pending;
        m->pending = &p;
    }
    pthread_mutex_unlock(&m->lock);
    if (rc == 0) {
        frame_set_id(&frame, p.id);
        rc = crb_write_full(fd, frame.data, frame.len, deadline);
        if (rc < 0)
            rc = crb_error(rc == CR_ERR_TIMEOUT ? CR_RPC_TIMEOUT : CR_RPC_FAIL,
                           "sending %s to the master: %s", crp_rpc_op_name(req->op),
                           cr_last_error_message());
    }
    pthread_mutex_unlock(&m->write_lock);
    crp_buf_free(&frame);

    pthread_mutex_lock(&m->lock);
    if (rc == 0) {
        bool moved = false;
        while (!p.done && !moved) {
            /* HA: every 500 ms without a reply, ask etcd whether another
             * master leads now (this one may be paused or partitioned). */
            uint64_t until = deadline;
            if (m->leader != NULL && crb_now_ns() + 500000000ull < deadline)
                until = crb_now_ns() + 500000000ull;
            struct timespec ts = {(time_t)(until / 1000000000ull), (long)(until % 1000000000ull)};
            int w = pthread_cond_timedwait(&p.cond, &m->lock, &ts);
            if (p.done)
                break;
            if (until == deadline && w != 0)
                break;
            if (until != deadline) {
                uint64_t view = m->view;
                pthread_mutex_unlock(&m->lock);
                moved = crc_leader_moved(m->leader, view);
                pthread_mutex_lock(&m->lock);
            }
        }
        if (moved && !p.done)
            rc = crb_error(CR_RPC_FAIL, "%s: another master leads now", crp_rpc_op_name(req->op));
        else if (!p.done)
            rc = crb_error(CR_RPC_TIMEOUT, "master did not answer %s within %d ms",
                           crp_rpc_op_name(req->op), timeout_ms);
        else if (p.status != 0)
            rc = crb_error(p.status, "master connection lost during %s", crp_rpc_op_name(req->op));
    }
    if (p.id != 0) { /* unlink our slot */
        pending **pp = &m->pending;
        while (*pp != NULL && *pp != &p)
            pp = &(*pp)->next;
        if (*pp != NULL)
            *pp = p.next;
    }
    pthread_mutex_unlock(&m->lock);
    if (rc == 0)
        rc = decode_reply(&p.hdr, p.body, req->op, resp);
    free(p.body);
    pthread_cond_destroy(&p.cond);
    return rc;
}

/* Make the next call reconnect (and, through etcd, find the leader again). */
static void drop_connection(crc_master *m)
{
    pthread_mutex_lock(&m->lock);
    if (m->fd >= 0)
        shutdown(m->fd, SHUT_RDWR); /* the reader sees the end and clears m->fd */
    pthread_mutex_unlock(&m->lock);
}

int crc_master_call(crc_master *m, const crp_rpc_req *req, crp_rpc_resp *resp, int timeout_ms)
{
    if (m->leader == NULL)
        return call_once(m, req, resp, timeout_ms);
    /* HA: a call that found no leader (connection refused or lost, or
     * NOT_LEADER) is retried against the leader etcd names, within the
     * call's own deadline (docs/ha.md, "clients"). */
    uint64_t deadline = crb_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1);
    for (;;) {
        uint64_t now = crb_now_ms();
        int left = now < deadline ? (int)(deadline - now) : 1;
        int rc = call_once(m, req, resp, left);
        bool not_leader = rc == 0 && resp->status == CR_ERR_NOT_LEADER;
        if (!not_leader && rc != CR_RPC_FAIL)
            return rc;
        if (crb_now_ms() + 50 >= deadline)
            return rc;
        if (not_leader)
            crp_rpc_resp_clear(resp);
        drop_connection(m);
        usleep(20000);
    }
}

int crc_master_send(crc_master *m, const crp_rpc_req *req, int timeout_ms)
{
    crp_buf frame = {0};
    int rc = encode_frame(req, &frame);
    if (rc < 0) {
        crp_buf_free(&frame);
        return rc;
    }
    uint64_t deadline = crb_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    pthread_mutex_lock(&m->write_lock);
    pthread_mutex_lock(&m->lock);
    int fd = m->fd;
    uint64_t id = m->next_id++; /* no pending slot: the reply is dropped */
    pthread_mutex_unlock(&m->lock);
    if (fd < 0) {
        rc = crb_error(CR_RPC_FAIL, "%s not sent: no connection to the master",
                       crp_rpc_op_name(req->op));
    } else {
        frame_set_id(&frame, id);
        rc = crb_write_full(fd, frame.data, frame.len, deadline);
        if (rc < 0)
            rc = crb_error(rc == CR_ERR_TIMEOUT ? CR_RPC_TIMEOUT : CR_RPC_FAIL,
                           "sending %s to the master: %s", crp_rpc_op_name(req->op),
                           cr_last_error_message());
    }
    pthread_mutex_unlock(&m->write_lock);
    crp_buf_free(&frame);
    return rc;
}

uint64_t crc_master_caps(crc_master *m)
{
    pthread_mutex_lock(&m->lock);
    uint64_t c = m->caps;
    pthread_mutex_unlock(&m->lock);
    return c;
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
    if (m->reader_running) {
        atomic_store(&m->stop, true);
        pthread_mutex_lock(&m->lock); /* the reader clears m->fd under it */
        if (m->fd >= 0)
            shutdown(m->fd, SHUT_RDWR);
        pthread_mutex_unlock(&m->lock);
        pthread_join(m->reader, NULL);
        /* callers have returned (the store waits for its calls): no sender */
        close(m->reader_fd);
    }
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->write_lock);
    crc_leader_close(m->leader);
    free(m);
}
