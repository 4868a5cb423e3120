/*
 * server.c - the serving side of the engine's one port.
 *
 * Every accepted connection starts with a CHALLENGE from us, then expects a
 * HELLO (version check, optional shared-secret proof) before any other frame.
 * After that it serves, in order: DESC_GET, NOTIFY, PROBE, READ_REQ and
 * WRITE_REQ. Every data request's range is validated against the registry
 * (inside one registered, remote-accessible buffer, overflow-safe, len > 0)
 * before a byte is touched; a refused WRITE's payload is drained and acked
 * with the error so the connection keeps serving. READ payloads are sent
 * straight from registered memory with writev; WRITE payloads are received
 * straight into it. The buffer reference taken at validation is held until
 * the bytes have left or arrived, which is what makes unregistration a
 * barrier on the serving side too.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "base/tsan.h"
#include "engine/internal.h"

static void out_free(cre_out *o)
{
    if (o->payload_buf != NULL)
        cre_buffer_release(o->payload_buf);
    free(o->head);
    free(o);
}

static void server_close(cre_conn *c)
{
    cre_worker *w = c->worker;
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    while (c->out_head != NULL) {
        cre_out *o = c->out_head;
        c->out_head = o->next;
        out_free(o);
    }
    if (c->rx_buf != NULL)
        cre_buffer_release(c->rx_buf);
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < w->n_conns; i++) {
        if (w->conns[i] == c) {
            w->conns[i] = w->conns[--w->n_conns];
            break;
        }
    }
    pthread_mutex_unlock(&w->lock);
    free(c->body);
    free(c->rbuf);
    free(c);
}

void cre_server_close_all(cre_worker *w)
{
    while (w->n_conns > 0)
        server_close(w->conns[w->n_conns - 1]);
    free(w->conns);
    w->conns = NULL;
}

/* Write queued output until EAGAIN, gathering up to 64 iovecs (several
 * responses) per sendmsg. Returns negative if the conn is dead. */
static int server_flush(cre_conn *c)
{
    while (c->out_head != NULL) {
        struct iovec iov[64];
        int iovcnt = 0;
        for (cre_out *o = c->out_head; o != NULL && iovcnt + 2 <= 64; o = o->next) {
            if (o->sent < o->head_len) {
                iov[iovcnt++] = (struct iovec){o->head + o->sent, o->head_len - o->sent};
                if (o->payload_len)
                    iov[iovcnt++] = (struct iovec){(void *)o->payload, o->payload_len};
            } else {
                size_t off = o->sent - o->head_len;
                iov[iovcnt++] = (struct iovec){(void *)(o->payload + off), o->payload_len - off};
            }
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        CRB_PAYLOAD_READS_BEGIN();
        ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        CRB_PAYLOAD_READS_END();
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                cre_worker_mod_conn(c, true);
                return 0;
            }
            return CR_ERR_CONNECTION;
        }
        size_t left = (size_t)n;
        while (left > 0 && c->out_head != NULL) {
            cre_out *o = c->out_head;
            size_t total = o->head_len + o->payload_len;
            size_t take = total - o->sent < left ? total - o->sent : left;
            o->sent += take;
            left -= take;
            if (o->sent < total)
                break;
            c->out_head = o->next;
            if (c->out_head == NULL)
                c->out_tail = NULL;
            if (o->payload_len)
                atomic_fetch_add(&c->engine->stats.bytes_served, o->payload_len);
            out_free(o);
        }
    }
    cre_worker_mod_conn(c, false);
    return 0;
}

static int queue_frame(cre_conn *c, int type, int32_t status, uint64_t request_id,
                       const crp_buf *body, const uint8_t *payload, size_t payload_len,
                       cre_buffer *payload_buf)
{
    cre_out *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return CR_ERR_NO_MEMORY;
    int rc = cre_frame_build(type, status, request_id, payload_len, body, &o->head, &o->head_len);
    if (rc < 0) {
        free(o);
        return rc;
    }
    o->payload = payload;
    o->payload_len = payload_len;
    o->payload_buf = payload_buf;
    if (c->out_tail)
        c->out_tail->next = o;
    else
        c->out_head = o;
    c->out_tail = o;
    return 0;
}

static int queue_error(cre_conn *c, int status, uint64_t request_id, const char *text)
{
    crp_buf body = {0};
    crp_error err = {.message = (char *)text};
    if (crp_error_encode(&err, &body) < 0)
        return CR_ERR_NO_MEMORY;
    int rc = queue_frame(c, CRP_ERROR, status, request_id, &body, NULL, 0, NULL);
    crp_buf_free(&body);
    return rc;
}

void cre_server_accept(cr_engine *e)
{
    for (;;) {
        int fd = accept4(e->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                crb_log(CRB_LOG_WARN, "accept on port %u: %s", e->rpc_port, strerror(errno));
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        cre_conn *c = calloc(1, sizeof(*c));
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->kind = CRE_CONN_SERVER;
        c->fd = fd;
        c->engine = e;
        crb_random_bytes(c->nonce, sizeof(c->nonce));
        crp_challenge ch;
        memcpy(ch.nonce, c->nonce, sizeof(ch.nonce));
        crp_buf body = {0};
        if (crp_challenge_encode(&ch, &body) < 0 ||
            queue_frame(c, CRP_CHALLENGE, 0, 0, &body, NULL, 0, NULL) < 0) {
            crp_buf_free(&body);
            close(fd);
            free(c);
            continue;
        }
        crp_buf_free(&body);
        /* Hand to a worker, round-robin. */
        if (cre_worker_adopt_conn(e, c, EPOLLIN | EPOLLOUT) < 0) {
            out_free(c->out_head);
            close(fd);
            free(c);
            continue;
        }
    }
}

static int handle_hello(cre_conn *c)
{
    cr_engine *e = c->engine;
    crp_hello hello = {0};
    if (c->hdr.type != CRP_HELLO) {
        queue_error(c, CR_ERR_MALFORMED_FRAME, c->hdr.request_id, "expected HELLO first");
        return CR_ERR_MALFORMED_FRAME;
    }
    if (crp_hello_decode(c->body, c->hdr.body_len, &hello) < 0) {
        queue_error(c, CR_ERR_MALFORMED_FRAME, c->hdr.request_id, cr_last_error_message());
        return CR_ERR_MALFORMED_FRAME;
    }
    int rc = 0;
    if (hello.version != CRP_VERSION) {
        queue_error(c, CR_ERR_VERSION_MISMATCH, c->hdr.request_id,
                    "peer speaks a different protocol version");
        rc = CR_ERR_VERSION_MISMATCH;
        goto out_clear;
    }
    if (e->secret != NULL &&
        (!hello.has_mac || !cre_auth_check(e, "client", c->nonce, hello.client_nonce, hello.mac))) {
        crb_log(CRB_LOG_WARN, "refusing peer '%s': shared secret proof %s", hello.name,
                hello.has_mac ? "is wrong" : "missing");
        queue_error(c, CR_ERR_AUTH_FAILED, c->hdr.request_id, "shared secret proof failed");
        rc = CR_ERR_AUTH_FAILED;
        goto out_clear;
    }
    crp_hello_ack ack = {.version = CRP_VERSION, .name = e->segment_name, .instance = e->instance};
    if (e->secret != NULL) {
        ack.has_mac = true;
        cre_auth_mac(e, "server", hello.client_nonce, c->nonce, ack.mac);
    }
    crp_buf body = {0};
    rc = crp_hello_ack_encode(&ack, &body);
    if (rc == 0)
        rc = queue_frame(c, CRP_HELLO_ACK, 0, c->hdr.request_id, &body, NULL, 0, NULL);
    crp_buf_free(&body);
    c->authed = rc == 0;
out_clear:
    crp_hello_clear(&hello);
    return rc;
}

/* Validate a peer's data range; on success hold a reference in *out. */
static int validate_range(cre_conn *c, const crp_data_req *req, cre_buffer **out)
{
    cre_buffer *b;
    int rc = cre_registry_acquire(&c->engine->registry, req->addr, req->length, "target", &b);
    if (rc < 0)
        return rc;
    if (!b->remote_accessible) {
        cre_buffer_release(b);
        return crb_error(CR_ERR_NOT_REMOTE_ACCESSIBLE,
                         "target range 0x%llx lies in a buffer registered as not "
                         "remote-accessible",
                         (unsigned long long)req->addr);
    }
    if (b->kind != CR_MEM_HOST && b->kind != CR_MEM_HOST_SHAREABLE) {
        int kind = b->kind;
        cre_buffer_release(b);
        return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED,
                         "target buffer at 0x%llx is %s memory, which tcp cannot serve",
                         (unsigned long long)req->addr, cr_mem_kind_name(kind));
    }
    *out = b;
    return 0;
}

static int server_on_head(cre_conn *c)
{
    if (c->hdr.type != CRP_WRITE_REQ)
        return 0;
    crp_data_req req;
    c->rx_status = crp_data_req_decode(c->body, c->hdr.body_len, &req);
    if (c->rx_status == 0 && req.length != c->hdr.data_len)
        c->rx_status =
            crb_error(CR_ERR_MALFORMED_FRAME, "WRITE length %llu != payload %llu",
                      (unsigned long long)req.length, (unsigned long long)c->hdr.data_len);
    if (c->rx_status == 0 && c->authed)
        c->rx_status = validate_range(c, &req, &c->rx_buf);
    if (!c->authed)
        return CR_ERR_AUTH_FAILED;
    c->data_dst = c->rx_status == 0 ? (uint8_t *)(uintptr_t)req.addr : NULL;
    return 0;
}

static int server_on_frame(cre_conn *c)
{
    cr_engine *e = c->engine;
    if (!c->authed)
        return handle_hello(c);
    crp_buf body = {0};
    int rc = 0;
    switch (c->hdr.type) {
    case CRP_DESC_GET:
        atomic_fetch_add(&e->stats.descriptor_fetches, 1);
        rc = cre_descriptor_encoded(e, &body);
        if (rc == 0)
            rc = queue_frame(c, CRP_DESC_REPLY, 0, c->hdr.request_id, &body, NULL, 0, NULL);
        break;
    case CRP_PROBE:
        rc = queue_frame(c, CRP_PROBE_ACK, 0, c->hdr.request_id, NULL, NULL, 0, NULL);
        break;
    case CRP_NOTIFY: {
        crp_notify n = {0};
        rc = crp_notify_decode(c->body, c->hdr.body_len, &n);
        if (rc == 0) {
            rc = cre_notify_push(e, n.from, n.message, n.length);
            crp_notify_clear(&n);
        }
        rc = queue_frame(c, CRP_NOTIFY_ACK, rc, c->hdr.request_id, NULL, NULL, 0, NULL);
        break;
    }
    case CRP_READ_REQ: {
        crp_data_req req;
        cre_buffer *b = NULL;
        int st = crp_data_req_decode(c->body, c->hdr.body_len, &req);
        if (st == 0)
            st = validate_range(c, &req, &b);
        if (st == 0)
            rc = queue_frame(c, CRP_READ_RESP, 0, c->hdr.request_id, NULL,
                             (const uint8_t *)(uintptr_t)req.addr, req.length, b);
        else
            rc = queue_frame(c, CRP_READ_RESP, st, c->hdr.request_id, NULL, NULL, 0, NULL);
        if (rc < 0 && b != NULL)
            cre_buffer_release(b);
        break;
    }
    case CRP_WRITE_REQ:
        if (c->rx_buf != NULL) {
            cre_buffer_release(c->rx_buf);
            c->rx_buf = NULL;
        }
        rc = queue_frame(c, CRP_WRITE_ACK, c->rx_status, c->hdr.request_id, NULL, NULL, 0, NULL);
        break;
    default:
        rc = queue_error(c, CR_ERR_MALFORMED_FRAME, c->hdr.request_id, "unexpected frame type");
        break;
    }
    crp_buf_free(&body);
    /* A large READ starts sending at once, so its bytes do not wait for every
     * pipelined request to be read; small responses are gathered and sent
     * together when the read loop runs dry (cre_server_on_event). */
    if (rc == 0 && c->hdr.type == CRP_READ_REQ && c->out_tail != NULL &&
        c->out_tail->payload_len >= (64u << 10))
        rc = server_flush(c);
    return rc;
}

static const cre_read_ops server_read_ops = {server_on_head, server_on_frame};

void cre_server_on_event(cre_conn *c, uint32_t events)
{
    int rc = 0;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        rc = cre_conn_read(c, &server_read_ops);
    if (rc == 0 || c->out_head != NULL) {
        /* Try to send what we have, including a final ERROR frame. */
        int frc = server_flush(c);
        if (rc == 0)
            rc = frc;
    }
    if (rc < 0)
        server_close(c);
}
