/*
 * conn.c - connections accepted on the engine's port: reading frames
 * (proto/frame_reader.h) into the handler that serves them, an output
 * queue, and the bounds that keep one peer from exhausting us.
 *
 * Output: frames are queued (header+body copied, payloads borrowed from
 * registered memory with a buffer reference) and written with sendmsg,
 * several per call. A peer that keeps sending requests but never reads the
 * replies would grow the queue without end; past OUT_HIGH_ITEMS queued
 * frames or OUT_HIGH_BYTES queued bytes the connection is not read until
 * the queue drains below half of that, so the peer stalls on its own
 * socket buffer instead of our memory.
 *
 * Deadlines (worker tick): a connection that has not authenticated within
 * the connect timeout is closed; a queued payload not fully sent within the
 * request timeout closes the connection (its buffer reference is released,
 * so unregistration is never held hostage by a peer that stopped reading);
 * and when an unregistration begins, connections holding a reference to
 * the dying buffer (queued READ payload, WRITE being received) are closed
 * at the next tick.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/tsan.h"
#include "engine/internal.h"

#define OUT_HIGH_ITEMS 4096
#define OUT_HIGH_BYTES (64u << 20)
#define MAX_IOV        64
#define PREAUTH_BODY   1024 /* what a HELLO needs, with room to spare */

int cre_frame_build(int type, int32_t status, uint64_t request_id, uint64_t data_len,
                    const crp_buf *body, uint8_t **out, size_t *out_len)
{
    crp_buf f = {0};
    int rc = crp_frame_append(&f, type, status, request_id, data_len, body ? body->data : NULL,
                              body ? body->len : 0);
    if (rc < 0)
        return rc;
    *out = f.data;
    *out_len = f.len;
    return 0;
}

static cre_conn *conn_of(crb_io *io)
{
    return (cre_conn *)((char *)io - offsetof(cre_conn, io));
}

static void out_free(cre_out *o)
{
    if (o->source.release != NULL)
        o->source.release(o->source.ctx);
    if (o->payload_buf != NULL)
        cre_buffer_release(o->payload_buf);
    free(o->head);
    free(o);
}

static void update_events(cre_conn *c)
{
    uint32_t ev = EPOLLRDHUP;
    if (!c->reading_paused && !c->closing)
        ev |= EPOLLIN;
    if (c->out_head != NULL)
        ev |= EPOLLOUT;
    crb_loop_mod(&c->io, ev);
}

void cre_conn_close(cre_conn *c)
{
    cre_worker *w = c->worker;
    if (c->handler != NULL && c->handler->on_close != NULL)
        c->handler->on_close(c);
    crb_loop_del(&c->io);
    close(c->io.fd);
    c->io.fd = -1;
    while (c->out_head != NULL) {
        cre_out *o = c->out_head;
        c->out_head = o->next;
        out_free(o);
    }
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    w->n_conns--;
    crp_reader_fini(&c->reader);
    crb_acceptor_closed(&c->engine->acceptor);
    free(c);
}

void cre_conns_close_all(cre_worker *w)
{
    while (w->conns != NULL)
        cre_conn_close(w->conns);
}

int cre_conn_flush(cre_conn *c)
{
    while (c->out_head != NULL) {
        struct iovec iov[MAX_IOV];
        int iovcnt = 0;
        for (cre_out *o = c->out_head; o != NULL && iovcnt + 2 <= MAX_IOV; o = o->next) {
            if (o->source.next != NULL) {
                /* A staged payload: one window at a time, fetched once the
                 * previous one has gone; nothing after it in this batch. */
                if (o->sent < o->head_len)
                    iov[iovcnt++] = (struct iovec){o->head + o->sent, o->head_len - o->sent};
                size_t off = o->sent > o->head_len ? o->sent - o->head_len : 0;
                if (off == o->win_end && off < o->payload_len) {
                    size_t wlen = 0;
                    int rc = o->source.next(o->source.ctx, &o->payload, &wlen);
                    if (rc < 0)
                        return rc;
                    o->win_start = off;
                    o->win_end = off + wlen;
                }
                if (off < o->win_end)
                    iov[iovcnt++] = (struct iovec){(void *)(o->payload + (off - o->win_start)),
                                                   o->win_end - off};
                break;
            }
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
        ssize_t n = sendmsg(c->io.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        CRB_PAYLOAD_READS_END();
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return CR_ERR_CONNECTION;
        }
        size_t left = (size_t)n;
        while (left > 0 && c->out_head != NULL) {
            cre_out *o = c->out_head;
            size_t total = o->head_len + o->payload_len;
            size_t take = total - o->sent < left ? total - o->sent : left;
            if (o->source.next != NULL && o->head_len + o->win_end - o->sent < take)
                take = o->head_len + o->win_end - o->sent; /* only the window was offered */
            o->sent += take;
            left -= take;
            if (o->sent < total)
                break;
            c->out_head = o->next;
            if (c->out_head == NULL)
                c->out_tail = NULL;
            c->out_items--;
            c->out_bytes -= total;
            if (o->payload_len)
                atomic_fetch_add(&c->engine->stats.bytes_served, o->payload_len);
            out_free(o);
        }
    }
    if (c->reading_paused && c->out_items <= OUT_HIGH_ITEMS / 2 &&
        c->out_bytes <= OUT_HIGH_BYTES / 2)
        c->reading_paused = false;
    update_events(c);
    return 0;
}

int cre_conn_queue(cre_conn *c, int type, int32_t status, uint64_t request_id, const crp_buf *body,
                   const uint8_t *payload, size_t payload_len, cre_buffer *payload_buf)
{
    cre_out *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "queueing a %s frame", crp_type_name(type));
    int rc = cre_frame_build(type, status, request_id, payload_len, body, &o->head, &o->head_len);
    if (rc < 0) {
        free(o);
        return rc;
    }
    o->payload = payload;
    o->payload_len = payload_len;
    o->payload_buf = payload_buf;
    o->deadline_ns = crb_now_ns() + (uint64_t)c->engine->request_timeout_ms * 1000000ull;
    if (c->out_tail)
        c->out_tail->next = o;
    else
        c->out_head = o;
    c->out_tail = o;
    c->out_items++;
    c->out_bytes += o->head_len + payload_len;
    if (c->out_items > OUT_HIGH_ITEMS || c->out_bytes > OUT_HIGH_BYTES)
        c->reading_paused = true;
    return 0;
}

int cre_conn_queue_staged(cre_conn *c, int type, int32_t status, uint64_t request_id,
                          size_t payload_len, const cre_out_source *src, cre_buffer *payload_buf)
{
    int rc = cre_conn_queue(c, type, status, request_id, NULL, NULL, payload_len, payload_buf);
    if (rc == 0)
        c->out_tail->source = *src;
    return rc;
}

int cre_conn_queue_error(cre_conn *c, int status, uint64_t request_id, const char *text)
{
    crp_buf body = {0};
    crp_error err = {.message = (char *)text};
    if (crp_error_encode(&err, &body) < 0)
        return CR_ERR_NO_MEMORY;
    int rc = cre_conn_queue(c, CRP_ERROR, status, request_id, &body, NULL, 0, NULL);
    crp_buf_free(&body);
    return rc;
}

static int conn_on_head(void *ctx, const crp_header *h, const uint8_t *body, uint8_t **dst)
{
    cre_conn *c = ctx;
    return c->handler->on_head != NULL ? c->handler->on_head(c, h, body, dst) : 0;
}

static int conn_on_data(void *ctx, const crp_header *h, size_t filled, uint8_t **next,
                        size_t *next_len)
{
    cre_conn *c = ctx;
    return c->handler->on_data != NULL ? c->handler->on_data(c, h, filled, next, next_len)
                                       : crb_error(CR_INTERNAL_ERROR, "no on_data handler");
}

static int conn_on_frame(void *ctx, const crp_header *h, const uint8_t *body)
{
    cre_conn *c = ctx;
    int rc = c->handler->on_frame(c, h, body);
    if (rc < 0)
        return rc;
    /* Stop reading while the peer does not drain what we queued. */
    return c->reading_paused || c->closing ? CRP_READER_PAUSED : 0;
}

static const crp_reader_ops conn_reader_ops = {conn_on_head, conn_on_frame, conn_on_data};

static void conn_on_event(crb_io *io, uint32_t events)
{
    cre_conn *c = conn_of(io);
    int rc = 0;
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) && !c->reading_paused &&
        !c->closing)
        rc = crp_reader_read(&c->reader, c->io.fd, &conn_reader_ops, c);
    if (rc == CRP_READER_PAUSED)
        rc = 0;
    int frc = cre_conn_flush(c); /* also sends a final ERROR frame */
    if (rc == 0)
        rc = frc;
    /* Frames left in the reader's buffer when it paused are served once the
     * queue drained: the socket may stay silent until then. */
    if (rc == 0 && !c->reading_paused && !c->closing && crp_reader_buffered(&c->reader) > 0) {
        rc = crp_reader_read(&c->reader, c->io.fd, &conn_reader_ops, c);
        if (rc == CRP_READER_PAUSED)
            rc = 0;
        if (rc == 0)
            rc = cre_conn_flush(c);
    }
    if (rc < 0 || (c->closing && c->out_head == NULL))
        cre_conn_close(c);
}

int cre_conn_adopt(cre_worker *w, int fd, const cre_conn_handler *h, cre_conn **out)
{
    cre_conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        return crb_error(CR_ERR_NO_MEMORY, "connection state");
    }
    c->io.fd = fd;
    c->io.on_event = conn_on_event;
    c->engine = w->engine;
    c->worker = w;
    c->handler = h;
    c->accepted_ns = crb_now_ns();
    crp_reader_init(&c->reader, PREAUTH_BODY);
    c->next = w->conns;
    if (w->conns != NULL)
        w->conns->prev = c;
    w->conns = c;
    w->n_conns++;
    *out = c;
    return 0;
}

/* Does the connection hold a reference to a buffer being unregistered? */
static bool holds_dying_buffer(const cre_conn *c)
{
    for (const cre_out *o = c->out_head; o != NULL; o = o->next)
        if (o->payload_buf != NULL && cre_buffer_dying(o->payload_buf))
            return true;
    return false;
}

void cre_conns_tick(cre_worker *w, uint64_t now)
{
    cr_engine *e = w->engine;
    uint64_t epoch = atomic_load(&e->unregister_epoch);
    bool check_dying = epoch != w->seen_unregister_epoch;
    w->seen_unregister_epoch = epoch;
    uint64_t auth_ns = (uint64_t)e->connect_timeout_ms * 1000000ull;
    cre_conn *next;
    for (cre_conn *c = w->conns; c != NULL; c = next) {
        next = c->next;
        const char *why = NULL;
        if (!c->authed && now > c->accepted_ns + auth_ns) {
            why = "did not authenticate in time";
            atomic_fetch_add(&e->stats.conns_refused_preauth, 1);
        } else if (c->out_head != NULL && now > c->out_head->deadline_ns) {
            why = "did not read a reply within the request timeout";
            atomic_fetch_add(&e->stats.served_timeouts, 1);
        } else if (check_dying && (holds_dying_buffer(c) || (c->handler->holds_dying != NULL &&
                                                             c->handler->holds_dying(c)))) {
            why = "was using a buffer that is being unregistered";
        }
        if (why != NULL) {
            crb_log(CRB_LOG_INFO, "closing a connection to our port: the peer %s", why);
            cre_conn_close(c);
        }
    }
}
