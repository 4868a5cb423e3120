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
} serve_state;

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
    if (!cre_kind_is_host(b->kind)) {
        int kind = b->kind;
        cre_buffer_release(b);
        return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED,
                         "target buffer at 0x%llx is %s memory, which tcp cannot serve",
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
    *dst = st->rx_status == 0 ? (uint8_t *)(uintptr_t)req.addr : NULL;
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
        if (status == 0)
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
