/*
 * server.c - the engine's one port: accepting, the handshake, and the
 * control frames; data connections are handed to the transport that serves
 * their role (tcp).
 *
 * Every accepted connection starts with a CHALLENGE from us and must answer
 * with a HELLO (version check, optional shared-secret proof) within the
 * connect timeout, in a frame no larger than a HELLO needs (conn.c bounds
 * both). A control connection then serves DESC_GET, NOTIFY and PROBE; a
 * connection whose HELLO names another role is given to the transport that
 * declared it (ops->serve_role), which installs its own handler.
 *
 * The listener runs through base/acceptor.h on worker 0: a connection cap
 * (max_connections) and no busy loop at the fd limit.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "engine/internal.h"

static int handle_hello(cre_conn *c, const crp_header *h, const uint8_t *body);

static int control_on_frame(cre_conn *c, const crp_header *h, const uint8_t *body)
{
    cr_engine *e = c->engine;
    if (!c->authed)
        return handle_hello(c, h, body);
    crp_buf reply = {0};
    int rc = 0;
    switch (h->type) {
    case CRP_DESC_GET:
        atomic_fetch_add(&e->stats.descriptor_fetches, 1);
        rc = cre_descriptor_encoded(e, &reply);
        if (rc == 0)
            rc = cre_conn_queue(c, CRP_DESC_REPLY, 0, h->request_id, &reply, NULL, 0, NULL);
        else
            rc = cre_conn_queue_error(c, rc, h->request_id, cr_last_error_message());
        break;
    case CRP_PROBE:
        rc = cre_conn_queue(c, CRP_PROBE_ACK, 0, h->request_id, NULL, NULL, 0, NULL);
        break;
    case CRP_NOTIFY: {
        crp_notify n = {0};
        int st = crp_notify_decode(body, h->body_len, &n);
        if (st == 0) {
            st = cre_notify_push(e, n.from, n.message, n.length);
            crp_notify_clear(&n);
        }
        rc = cre_conn_queue(c, CRP_NOTIFY_ACK, st, h->request_id, NULL, NULL, 0, NULL);
        break;
    }
    default:
        rc = cre_conn_queue_error(c, CR_ERR_MALFORMED_FRAME, h->request_id,
                                  "unexpected frame type on a control connection");
        c->closing = true;
        break;
    }
    crp_buf_free(&reply);
    return rc;
}

static const cre_conn_handler control_handler = {.on_frame = control_on_frame};

/* The transport that serves connections of `role`, or NULL. */
static cre_tp *role_server(cr_engine *e, uint8_t role)
{
    for (size_t i = 0; i < e->n_tps; i++)
        if (e->tps[i].ops->serve != NULL && e->tps[i].ops->serve_role == role)
            return &e->tps[i];
    return NULL;
}

static int handle_hello(cre_conn *c, const crp_header *h, const uint8_t *body)
{
    cr_engine *e = c->engine;
    crp_hello hello = {0};
    if (h->type != CRP_HELLO) {
        cre_conn_queue_error(c, CR_ERR_MALFORMED_FRAME, h->request_id, "expected HELLO first");
        c->closing = true;
        return 0;
    }
    if (crp_hello_decode(body, h->body_len, &hello) < 0) {
        cre_conn_queue_error(c, CR_ERR_MALFORMED_FRAME, h->request_id, cr_last_error_message());
        c->closing = true;
        return 0;
    }
    int rc = 0;
    cre_tp *server = NULL;
    if (hello.version != CRP_VERSION) {
        cre_conn_queue_error(c, CR_ERR_VERSION_MISMATCH, h->request_id,
                             "peer speaks a different protocol version");
        c->closing = true;
        goto out_clear;
    }
    if (e->secret != NULL &&
        (!hello.has_mac || !cre_auth_check(e, "client", c->nonce, hello.client_nonce, hello.mac))) {
        crb_log(CRB_LOG_WARN, "refusing peer '%s': shared secret proof %s", hello.name,
                hello.has_mac ? "is wrong" : "missing");
        cre_conn_queue_error(c, CR_ERR_AUTH_FAILED, h->request_id, "shared secret proof failed");
        c->closing = true;
        goto out_clear;
    }
    if (hello.role != CRP_ROLE_CONTROL && (server = role_server(e, hello.role)) == NULL) {
        cre_conn_queue_error(c, CR_ERR_TRANSPORT_UNSUPPORTED, h->request_id,
                             "no transport of this engine serves that connection role");
        c->closing = true;
        goto out_clear;
    }
    crp_hello_ack ack = {.version = CRP_VERSION, .name = e->segment_name, .instance = e->instance};
    if (e->secret != NULL) {
        ack.has_mac = true;
        cre_auth_mac(e, "server", hello.client_nonce, c->nonce, ack.mac);
    }
    crp_buf reply = {0};
    rc = crp_hello_ack_encode(&ack, &reply);
    if (rc == 0)
        rc = cre_conn_queue(c, CRP_HELLO_ACK, 0, h->request_id, &reply, NULL, 0, NULL);
    crp_buf_free(&reply);
    if (rc < 0)
        goto out_clear;
    c->authed = true;
    c->role = hello.role;
    c->reader.max_body = CRP_MAX_BODY;
    if (server != NULL)
        rc = server->ops->serve(server, c);
out_clear:
    crp_hello_clear(&hello);
    return rc;
}

/* Serve fd on worker w (its own thread): CHALLENGE first. */
static void start_conn(cre_worker *w, int fd)
{
    cre_conn *c;
    if (cre_conn_adopt(w, fd, &control_handler, &c) < 0) {
        crb_acceptor_closed(&w->engine->acceptor);
        return;
    }
    crb_random_bytes(c->nonce, sizeof(c->nonce));
    crp_challenge ch;
    memcpy(ch.nonce, c->nonce, sizeof(ch.nonce));
    crp_buf body = {0};
    int rc = crp_challenge_encode(&ch, &body);
    if (rc == 0)
        rc = cre_conn_queue(c, CRP_CHALLENGE, 0, 0, &body, NULL, 0, NULL);
    crp_buf_free(&body);
    if (rc == 0)
        rc = crb_loop_add(&w->loop, &c->io, EPOLLIN | EPOLLOUT | EPOLLRDHUP);
    if (rc == 0)
        rc = cre_conn_flush(c);
    if (rc < 0)
        cre_conn_close(c);
}

/* Worker 0 accepts; connections are spread round-robin over the workers,
 * each of which adopts its own on its thread (its inbox). */
static void on_accept(crb_acceptor *a, int fd)
{
    cr_engine *e = a->owner;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    cre_worker *w = cre_worker_next(e);
    if (w->index == 0) {
        start_conn(w, fd);
        return;
    }
    pthread_mutex_lock(&w->inbox_lock);
    if (w->n_inbox == w->cap_inbox) {
        size_t ncap = w->cap_inbox ? w->cap_inbox * 2 : 16;
        int *ni = realloc(w->inbox, ncap * sizeof(*ni));
        if (ni == NULL) {
            pthread_mutex_unlock(&w->inbox_lock);
            close(fd);
            crb_acceptor_closed(a);
            return;
        }
        w->inbox = ni;
        w->cap_inbox = ncap;
    }
    w->inbox[w->n_inbox++] = fd;
    pthread_mutex_unlock(&w->inbox_lock);
    cre_worker_kick(w);
}

void cre_server_take_inbox(cre_worker *w)
{
    pthread_mutex_lock(&w->inbox_lock);
    size_t n = w->n_inbox;
    if (n == 0) {
        pthread_mutex_unlock(&w->inbox_lock);
        return;
    }
    int fds[64];
    if (n > 64)
        n = 64;
    memcpy(fds, w->inbox, n * sizeof(int));
    memmove(w->inbox, w->inbox + n, (w->n_inbox - n) * sizeof(int));
    w->n_inbox -= n;
    bool more = w->n_inbox > 0;
    pthread_mutex_unlock(&w->inbox_lock);
    for (size_t i = 0; i < n; i++)
        start_conn(w, fds[i]);
    if (more)
        cre_worker_kick(w);
}

void cre_server_drop_inbox(cre_worker *w)
{
    for (size_t i = 0; i < w->n_inbox; i++) {
        close(w->inbox[i]);
        crb_acceptor_closed(&w->engine->acceptor);
    }
    free(w->inbox);
    w->inbox = NULL;
    w->n_inbox = w->cap_inbox = 0;
    pthread_mutex_destroy(&w->inbox_lock);
}

int cre_server_start(cr_engine *e)
{
    char what[64];
    snprintf(what, sizeof(what), "engine port %u", (unsigned)e->rpc_port);
    int rc = crb_acceptor_start(&e->acceptor, &e->workers[0].loop, e->listen_fd, e->max_connections,
                                on_accept, e, what);
    if (rc == 0) {
        e->acceptor_started = true;
        e->listen_fd = -1; /* the acceptor owns it */
    }
    return rc;
}

void cre_server_stop(cr_engine *e)
{
    if (e->acceptor_started)
        crb_acceptor_stop(&e->acceptor);
    e->acceptor_started = false;
}
