/*
 * serve.c - the tcp transport's serving side: an authenticated connection
 * to our port whose HELLO named the data role carries READ_REQ and
 * WRITE_REQ frames from a peer's lanes.
 *
 * Every request's range is validated against the registry (inside one
 * registered, remote-accessible host buffer, overflow-safe, length > 0)
 * before a byte is touched; a refused WRITE's payload is drained and
 * acknowledged with the error so the connection keeps serving. READ
 * payloads are sent straight from registered memory; WRITE payloads are
 * received straight into it. The buffer reference taken at validation is
 * held until the bytes have left or arrived, which is what makes
 * unregistration a barrier on the serving side too; conn.c closes a
 * connection whose peer stops reading, or that holds a buffer being
 * unregistered, so that barrier is bounded.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/transports/tcp/tcp.h"

#define FLUSH_EARLY (64u << 10) /* a READ this large starts sending at once */

typedef struct serve_state {
    cre_buffer *rx_buf; /* WRITE target being received into */
    int rx_status;      /* status to acknowledge for that WRITE */
    /* device targets: staged through pinned windows (opened on first use) */
    cre_tp *stager;
    const cre_stager_ops *sops;
    cre_stage *rx_stage, *tx_stage;
    bool rx_staged;   /* the WRITE being received goes through rx_stage */
    uint64_t rx_left; /* its payload bytes not yet given a window */
} serve_state;

static int serve_stage(cre_conn *c, serve_state *st, int kind, bool tx, cre_stage **out)
{
    cre_stage **sp = tx ? &st->tx_stage : &st->rx_stage;
    if (*sp == NULL) {
        if (st->stager == NULL)
            st->stager = cre_tcp_stager(c->engine, kind, &st->sops);
        if (st->stager == NULL)
            return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED, "no stager for %s memory",
                             cr_mem_kind_name(kind));
        int rc = st->sops->open(st->stager, sp);
        if (rc < 0)
            return rc;
    }
    *out = *sp;
    return 0;
}

/* A staged READ payload: device memory handed out window by window. */
typedef struct staged_read {
    serve_state *st;
    cre_stage *stage;
    int device;
    uint64_t addr, len;
    bool begun;
} staged_read;

static int staged_next(void *ctx, const uint8_t **ptr, size_t *len)
{
    staged_read *sr = ctx;
    int rc = 0;
    if (!sr->begun) {
        rc = sr->st->sops->out_begin(sr->stage, sr->device, sr->addr, sr->len);
        sr->begun = rc == 0;
    }
    if (rc == 0)
        rc = sr->st->sops->out_next(sr->stage, ptr, len);
    return rc;
}

static void staged_release(void *ctx)
{
    free(ctx);
}

/* Validate a peer's data range; on success hold a reference in *out. */
static int validate_range(cr_engine *e, const crp_data_req *req, cre_buffer **out)
{
    cre_buffer *b;
    int rc = cre_registry_acquire(&e->registry, req->addr, req->length, "target", &b);
    if (rc < 0)
        return rc;
    if (!b->remote_accessible) {
        cre_buffer_release(b);
        return crb_error(CR_ERR_NOT_REMOTE_ACCESSIBLE,
                         "target range 0x%llx lies in a buffer registered as not "
                         "remote-accessible",
                         (unsigned long long)req->addr);
    }
    const cre_stager_ops *ops;
    if (!cre_kind_is_host(b->kind) && cre_tcp_stager(e, b->kind, &ops) == NULL) {
        int kind = b->kind;
        cre_buffer_release(b);
        return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED,
                         "target buffer at 0x%llx is %s memory, which this process cannot stage",
                         (unsigned long long)req->addr, cr_mem_kind_name(kind));
    }
    *out = b;
    return 0;
}

static int serve_on_head(cre_conn *c, const crp_header *h, const uint8_t *body, uint8_t **dst)
{
    serve_state *st = c->handler_data;
    if (h->type != CRP_WRITE_REQ)
        return 0;
    crp_data_req req;
    st->rx_status = crp_data_req_decode(body, h->body_len, &req);
    if (st->rx_status == 0 && req.length != h->data_len)
        st->rx_status = crb_error(CR_ERR_MALFORMED_FRAME, "WRITE length %llu != payload %llu",
                                  (unsigned long long)req.length, (unsigned long long)h->data_len);
    if (st->rx_status == 0)
        st->rx_status = validate_range(c->engine, &req, &st->rx_buf);
    st->rx_staged = false;
    if (st->rx_status == 0 && !cre_kind_is_host(st->rx_buf->kind)) {
        cre_stage *sg;
        size_t wlen = 0;
        int rc = serve_stage(c, st, st->rx_buf->kind, false, &sg);
        if (rc == 0)
            rc = st->sops->in_begin(sg, st->rx_buf->device, req.addr, req.length);
        if (rc == 0)
            rc = st->sops->in_window(sg, dst, &wlen);
        if (rc < 0) {
            st->rx_status = rc;
            *dst = NULL;
            return 0;
        }
        st->rx_staged = true;
        st->rx_left = req.length - wlen;
        crp_reader_window(&c->reader, wlen);
        return 0;
    }
    *dst = st->rx_status == 0 ? (uint8_t *)(uintptr_t)req.addr : NULL;
    return 0;
}

static int serve_on_data(cre_conn *c, const crp_header *h, size_t filled, uint8_t **next,
                         size_t *next_len)
{
    serve_state *st = c->handler_data;
    *next = NULL;
    int rc = st->sops->in_commit(st->rx_stage, filled);
    if (rc == 0 && st->rx_left > 0) {
        rc = st->sops->in_window(st->rx_stage, next, next_len);
        if (rc == 0)
            st->rx_left -= *next_len < st->rx_left ? *next_len : st->rx_left;
    }
    if (rc < 0) {
        if (st->rx_status == 0)
            st->rx_status = rc;
        *next = NULL;
    }
    return 0;
}

static int serve_on_frame(cre_conn *c, const crp_header *h, const uint8_t *body)
{
    serve_state *st = c->handler_data;
    int rc;
    switch (h->type) {
    case CRP_READ_REQ: {
        crp_data_req req;
        cre_buffer *b = NULL;
        int status = crp_data_req_decode(body, h->body_len, &req);
        if (status == 0)
            status = validate_range(c->engine, &req, &b);
        staged_read *sr = NULL;
        if (status == 0 && !cre_kind_is_host(b->kind)) {
            sr = calloc(1, sizeof(*sr));
            status = sr == NULL ? crb_error(CR_ERR_NO_MEMORY, "staged READ")
                                : serve_stage(c, st, b->kind, true, &sr->stage);
            if (status < 0) {
                free(sr);
                sr = NULL;
                cre_buffer_release(b);
                b = NULL;
            }
        }
        if (sr != NULL) {
            *sr = (staged_read){st, sr->stage, b->device, req.addr, req.length, false};
            cre_out_source src = {staged_next, staged_release, sr};
            rc = cre_conn_queue_staged(c, CRP_READ_RESP, 0, h->request_id, req.length, &src, b);
            if (rc < 0)
                free(sr);
        } else if (status == 0)
            rc = cre_conn_queue(c, CRP_READ_RESP, 0, h->request_id, NULL,
                                (const uint8_t *)(uintptr_t)req.addr, req.length, b);
        else
            rc = cre_conn_queue(c, CRP_READ_RESP, status, h->request_id, NULL, NULL, 0, NULL);
        if (rc < 0 && b != NULL)
            cre_buffer_release(b);
        /* A large READ starts sending at once, so its bytes do not wait for
         * every pipelined request to be read; small responses are gathered
         * and sent together when the read loop runs dry. */
        if (rc == 0 && status == 0 && req.length >= FLUSH_EARLY)
            rc = cre_conn_flush(c);
        return rc;
    }
    case CRP_WRITE_REQ:
        if (st->rx_staged) {
            /* completion means applied: the windows are in device memory */
            int frc = st->sops->in_finish(st->rx_stage);
            if (st->rx_status == 0)
                st->rx_status = frc;
            st->rx_staged = false;
        }
        if (st->rx_buf != NULL) {
            cre_buffer_release(st->rx_buf);
            st->rx_buf = NULL;
        }
        return cre_conn_queue(c, CRP_WRITE_ACK, st->rx_status, h->request_id, NULL, NULL, 0, NULL);
    default:
        rc = cre_conn_queue_error(c, CR_ERR_MALFORMED_FRAME, h->request_id,
                                  "unexpected frame type on a data connection");
        c->closing = true;
        return rc;
    }
}

static void serve_on_close(cre_conn *c)
{
    serve_state *st = c->handler_data;
    if (st == NULL)
        return;
    if (st->rx_buf != NULL)
        cre_buffer_release(st->rx_buf);
    if (st->rx_stage != NULL)
        st->sops->close(st->rx_stage);
    if (st->tx_stage != NULL)
        st->sops->close(st->tx_stage);
    free(st);
    c->handler_data = NULL;
}

static bool serve_holds_dying(cre_conn *c)
{
    serve_state *st = c->handler_data;
    return st != NULL && st->rx_buf != NULL && cre_buffer_dying(st->rx_buf);
}

static const cre_conn_handler serve_handler = {
    .on_head = serve_on_head,
    .on_frame = serve_on_frame,
    .on_data = serve_on_data,
    .on_close = serve_on_close,
    .holds_dying = serve_holds_dying,
};

int cre_tcp_serve(cre_tp *tp, cre_conn *c)
{
    serve_state *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "data connection state");
    c->handler_data = st;
    c->handler = &serve_handler;
    return 0;
}
