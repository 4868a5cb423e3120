/*
 * ucx_am.c - READ/WRITE as checked active messages, for UCX's software
 * paths (tcp, shared memory) where one-sided RMA would let a peer holding a
 * stale rkey write into memory we no longer have registered.
 *
 * The initiator sends AM_REQ {op, id, address, length} (with the payload
 * for a WRITE) and asks UCX for a reply endpoint. The target validates the
 * range against its live registry exactly as the tcp serving side does
 * (inside one registered, remote-accessible host buffer) and holds a
 * reference on that buffer while bytes move: a READ is answered by AM_REPLY
 * carrying the payload straight from registered memory; a WRITE's payload
 * is received straight into it (rendezvous) or copied from UCX's eager
 * buffer, then acknowledged with AM_REPLY. A refused request gets AM_REPLY
 * with the error and no payload. So a WRITE completes when the target has
 * the bytes, and an unregistered buffer is unreachable the moment
 * cr_engine_unregister begins.
 *
 * Ids: the initiator keeps its ops in flight in a slot table (index and
 * generation), so a reply with an unknown, stale or forged id is dropped.
 * Served requests have deadlines and are canceled when they pass them or
 * when their buffer is being unregistered, so a peer that stops reading
 * cannot hold an unregistration forever -- where UCX can cancel them: UCX
 * 1.13's ucp_request_cancel cancels tag receives only, so there a served
 * request (a READ reply's send, a WRITE payload's receive) ends only when
 * UCX completes it: the initiator answers, its endpoint fails (peer-failure
 * handling: tcp) or the worker is destroyed.
 *
 * Rendezvous payloads (UCP_AM_RECV_ATTR_FLAG_RNDV) that a callback does not
 * take are dropped by returning UCS_OK without calling ucp_am_recv_data_nbx:
 * UCX then sends the sender its ATS and frees the descriptor. Never
 * ucp_am_data_release one inside the callback: in UCX 1.13
 * (ucp_am_rndv_process_rts) that sends an ATS and frees the descriptor, and
 * UCX, seeing neither a receive nor UCS_INPROGRESS, sends a second ATS and
 * frees the descriptor again. The sender then completes one request twice:
 * over shared memory (no peer-failure handling, so request ids are raw
 * pointers) that is the assertion "req->id == id" in ucp_rndv_ats_handler,
 * or the wrong request once the memory is reused. ucp_am_data_release is
 * only for a descriptor a callback kept by returning UCS_INPROGRESS, which
 * this file never does. (Regression test: engine_transfer_test's
 * bad_ranges_get_their_own_errors, a 1 MiB WRITE the target refuses.)
 *
 * Everything here runs on the owning engine worker's thread (UCP progress).
 */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/tsan.h"
#include "engine/transports/ucx/ucx.h"

#define AM_REQ   11
#define AM_REPLY 12

/* A request we serve: a READ reply being sent or a WRITE being received. */
typedef struct ucx_serving {
    struct ucx_serving *next, *prev;
    ucx_wstate *ws;
    int rail;
    cre_buffer *buf; /* reference held until the bytes have moved */
    ucp_ep_h reply_ep;
    uint64_t id;
    uint64_t deadline_ns;
    void *req;
    bool is_recv;
} ucx_serving;

/* --- ids of our ops ------------------------------------------------------- */

static int id_assign(ucx_wstate *ws, ucx_op *op)
{
    if (ws->n_am_free == 0) {
        size_t ncap = ws->am_cap ? ws->am_cap * 2 : 256;
        ucx_op **no = realloc(ws->am_ops, ncap * sizeof(*no));
        if (no == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "ucx: op table");
        ws->am_ops = no;
        uint32_t *ng = realloc(ws->am_gens, ncap * sizeof(*ng));
        if (ng == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "ucx: op table");
        ws->am_gens = ng;
        uint32_t *nf = realloc(ws->am_free, ncap * sizeof(*nf));
        if (nf == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "ucx: op table");
        ws->am_free = nf;
        for (size_t i = ws->am_cap; i < ncap; i++) {
            ws->am_ops[i] = NULL;
            ws->am_gens[i] = 1;
        }
        for (size_t i = ncap; i-- > ws->am_cap;)
            ws->am_free[ws->n_am_free++] = (uint32_t)i;
        ws->am_cap = ncap;
    }
    uint32_t slot = ws->am_free[--ws->n_am_free];
    ws->am_ops[slot] = op;
    op->am_id = ((uint64_t)ws->am_gens[slot] << 32) | slot;
    return 0;
}

void cre_ucx_am_forget(ucx_wstate *ws, ucx_op *op)
{
    if (op->am_id == 0)
        return;
    uint32_t slot = (uint32_t)op->am_id;
    if (slot < ws->am_cap && ws->am_ops[slot] == op) {
        ws->am_ops[slot] = NULL;
        ws->am_gens[slot]++;
        if (ws->am_gens[slot] == 0)
            ws->am_gens[slot] = 1;
        ws->am_free[ws->n_am_free++] = slot;
    }
    op->am_id = 0;
}

static ucx_op *id_find(ucx_wstate *ws, uint64_t id)
{
    uint32_t slot = (uint32_t)id;
    if (slot >= ws->am_cap || ws->am_ops[slot] == NULL || ws->am_gens[slot] != (uint32_t)(id >> 32))
        return NULL;
    return ws->am_ops[slot];
}

/* --- the initiator --------------------------------------------------------- */

static void req_sent(void *request, ucs_status_t status, void *user_data)
{
    ucx_op *op = user_data;
    op->request = NULL;
    op->rma_done = true;
    if (status != UCS_OK && op->status == UCS_OK)
        op->status = status;
    ucp_request_free(request);
    cre_ucx_op_maybe_done(op);
}

int cre_ucx_am_post(ucx_wstate *ws, ucx_ep *ep, ucx_op *op)
{
    int rc = id_assign(ws, op);
    if (rc < 0)
        return rc;
    _Static_assert(sizeof(op->am_hdr) >= CRP_AM_REQ_SIZE, "AM header room");
    uint8_t *hdr = op->am_hdr;
    crp_am_req req = {.op = op->opcode == CR_OP_WRITE ? 1 : 0,
                      .id = op->am_id,
                      .addr = op->remote_addr,
                      .length = op->length};
    crp_am_req_encode(&req, hdr);
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                               UCP_OP_ATTR_FIELD_USER_DATA |
                                               UCP_OP_ATTR_FIELD_FLAGS,
                               .cb.send = req_sent,
                               .user_data = op,
                               .flags = UCP_AM_SEND_FLAG_REPLY};
    if (op->local_memh != NULL && op->opcode == CR_OP_WRITE) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        prm.memh = op->local_memh;
    }
    bool write = op->opcode == CR_OP_WRITE;
    op->in_ucx_call = true;
    void *r = ucp_am_send_nbx(ep->ep, AM_REQ, hdr, CRP_AM_REQ_SIZE, write ? op->local : NULL,
                              write ? op->length : 0, &prm);
    if (UCS_PTR_IS_ERR(r)) {
        op->in_ucx_call = false; /* the caller finishes it with the error */
        cre_ucx_am_forget(ws, op);
        return crb_error(CR_ERR_CONNECTION, "ucx: sending a request to %s: %s", op->peer->name,
                         ucs_status_string(UCS_PTR_STATUS(r)));
    }
    if (r == NULL)
        op->rma_done = true;
    else if (!op->rma_done) /* else req_sent already ran inside the call */
        op->request = r;
    cre_ucx_op_settle(op); /* the endpoint may have failed inside the call */
    return 0;
}

static void reply_payload_done(void *request, ucs_status_t status, size_t length, void *user_data)
{
    ucx_op *op = user_data;
    op->recv_req = NULL;
    if (status != UCS_OK && op->status == UCS_OK)
        op->status = status;
    ucp_request_free(request);
    op->flushed = true;
    cre_ucx_op_maybe_done(op);
}

/* AM_REPLY at the initiator: the status and, for a READ, the payload. */
static ucs_status_t on_reply(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    ucx_wstate *ws = arg;
    bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    crp_am_reply rep;
    ucx_op *op = NULL;
    if (crp_am_reply_decode(header, header_length, &rep) == 0)
        op = id_find(ws, rep.id);
    bool want_payload = op != NULL && op->opcode == CR_OP_READ && rep.status == 0;
    if (op == NULL || op->flushed || op->recv_req != NULL || (op->ep && op->ep->failed) ||
        (want_payload && length != op->length) || (!want_payload && length != 0)) {
        /* Unknown, late, duplicate or malformed: drop it (and its payload). */
        if (op != NULL && !op->flushed && op->recv_req == NULL && !(op->ep && op->ep->failed)) {
            op->status = UCS_ERR_MESSAGE_TRUNCATED;
            op->am_status = crb_error(CR_ERR_MALFORMED_FRAME,
                                      "ucx: %s answered a %llu-byte READ with %zu bytes",
                                      op->peer->name, (unsigned long long)op->length, length);
            op->flushed = true;
            cre_ucx_op_maybe_done(op);
        }
        /* UCS_OK without a receive: UCX drops a rendezvous payload and
         * answers its sender itself (the file comment: "Rendezvous payloads"). */
        return UCS_OK;
    }
    op->am_status = rep.status;
    if (!want_payload) {
        op->flushed = true;
        cre_ucx_op_maybe_done(op);
        return UCS_OK;
    }
    if (!rndv) {
        CRB_PAYLOAD_WRITES_BEGIN();
        memcpy(op->local, data, length);
        CRB_PAYLOAD_WRITES_END();
        op->flushed = true;
        cre_ucx_op_maybe_done(op);
        return UCS_OK;
    }
    ucp_request_param_t prm = {.op_attr_mask =
                                   UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                               .cb.recv_am = reply_payload_done,
                               .user_data = op};
    if (op->local_memh != NULL) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        prm.memh = op->local_memh;
    }
    op->in_ucx_call = true;
    void *r = ucp_am_recv_data_nbx(ws->uw[op->rail], data, op->local, length, &prm);
    if (op->flushed) {
        /* reply_payload_done already ran inside the call (UCX purges the
         * receive when the endpoint fails during it): r is spent. */
    } else if (UCS_PTR_IS_ERR(r)) {
        op->status = UCS_PTR_STATUS(r);
        op->flushed = true;
    } else if (r == NULL) {
        op->flushed = true;
    } else {
        op->recv_req = r;
    }
    cre_ucx_op_settle(op);
    return UCS_OK;
}

/* --- the target ------------------------------------------------------------- */

static void serving_unlink(ucx_serving *s)
{
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        s->ws->serving = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
}

static ucx_serving *serving_new(ucx_wstate *ws, int rail, cre_buffer *buf, ucp_ep_h reply_ep,
                                uint64_t id)
{
    ucx_serving *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->ws = ws;
    s->rail = rail;
    s->buf = buf;
    s->reply_ep = reply_ep;
    s->id = id;
    s->deadline_ns = crb_now_ns() + (uint64_t)ws->ue->tp->engine->request_timeout_ms * 1000000ull;
    s->next = ws->serving;
    if (ws->serving != NULL)
        ws->serving->prev = s;
    ws->serving = s;
    return s;
}

static void serving_free(ucx_serving *s)
{
    serving_unlink(s);
    if (s->buf != NULL)
        cre_buffer_release(s->buf);
    free(s);
}

/* A reply in flight: its header must outlive the send call. */
typedef struct reply_msg {
    uint8_t hdr[CRP_AM_REPLY_SIZE];
    ucx_serving *s; /* freed once the reply is sent (a READ's buffer ref) */
    ucx_wstate *ws;
    struct reply_msg *prev, *next; /* in ws->replies while UCX holds it */
} reply_msg;

static void reply_unlink(reply_msg *m)
{
    if (m->prev != NULL)
        m->prev->next = m->next;
    else if (m->ws->replies == m)
        m->ws->replies = m->next;
    if (m->next != NULL)
        m->next->prev = m->prev;
    m->prev = m->next = NULL;
}

static void reply_free(reply_msg *m)
{
    reply_unlink(m);
    if (m->s != NULL)
        serving_free(m->s);
    free(m);
}

static void reply_sent(void *request, ucs_status_t status, void *user_data)
{
    ucp_request_free(request);
    reply_free(user_data);
}

/* AM_REPLY to the initiator; s (may be NULL) is freed once it is sent, so
 * a READ's buffer reference is held until its payload has left. */
static void send_reply(ucx_wstate *ws, ucp_ep_h ep, uint64_t id, int status, const void *payload,
                       size_t len, ucx_serving *s)
{
    reply_msg *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        crb_log(CRB_LOG_WARN, "ucx: no memory for a reply; the peer's request will time out");
        if (s != NULL)
            serving_free(s);
        return;
    }
    m->s = s;
    m->ws = ws;
    crp_am_reply rep = {.id = id, .status = status};
    crp_am_reply_encode(&rep, m->hdr);
    ucp_request_param_t prm = {.op_attr_mask =
                                   UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                               .cb.send = reply_sent,
                               .user_data = m};
    void *r = ucp_am_send_nbx(ep, AM_REPLY, m->hdr, sizeof(m->hdr), payload, len, &prm);
    if (UCS_PTR_IS_PTR(r)) {
        if (s != NULL)
            s->req = r;
        m->next = ws->replies;
        if (ws->replies != NULL)
            ws->replies->prev = m;
        ws->replies = m;
        return;
    }
    if (UCS_PTR_IS_ERR(r))
        crb_log(CRB_LOG_INFO, "ucx: a reply could not be sent: %s",
                ucs_status_string(UCS_PTR_STATUS(r)));
    if (s != NULL)
        serving_free(s);
    free(m);
}

/* The same checks as the tcp serving side (transports/tcp/serve.c). */
static int validate(cr_engine *e, const crp_am_req *req, cre_buffer **out)
{
    cre_buffer *b;
    int rc = cre_registry_acquire(&e->registry, req->addr, req->length, "target", &b);
    if (rc < 0)
        return rc;
    if (!b->remote_accessible || !cre_kind_is_host(b->kind)) {
        bool ra = b->remote_accessible;
        cre_buffer_release(b);
        return crb_error(ra ? CR_ERR_TRANSPORT_UNSUPPORTED : CR_ERR_NOT_REMOTE_ACCESSIBLE,
                         "target range 0x%llx: %s", (unsigned long long)req->addr,
                         ra ? "not host memory" : "buffer is not remote-accessible");
    }
    *out = b;
    return 0;
}

static void write_landed(void *request, ucs_status_t status, size_t length, void *user_data)
{
    ucx_serving *s = user_data;
    s->req = NULL;
    ucp_request_free(request);
    int st = status == UCS_OK ? 0 : CR_ERR_CONNECTION;
    cre_buffer_release(s->buf);
    s->buf = NULL;
    ucp_ep_h ep = s->reply_ep;
    uint64_t id = s->id;
    ucx_wstate *ws = s->ws;
    serving_free(s);
    if (status != UCS_ERR_CANCELED)
        send_reply(ws, ep, id, st, NULL, 0, NULL);
}

struct rail_arg {
    ucx_wstate *ws;
    int rail;
};

/* AM_REQ at the target. */
static ucs_status_t on_request(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param)
{
    struct rail_arg *ra = arg;
    ucx_wstate *ws = ra->ws;
    cr_engine *e = ws->ue->tp->engine;
    bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    ucp_ep_h reply_ep =
        (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
    crp_am_req req;
    int st = crp_am_req_decode(header, header_length, &req);
    if (st == 0 && reply_ep == NULL)
        st = crb_error(CR_ERR_MALFORMED_FRAME, "ucx: a request without a reply endpoint");
    if (st == 0 && (req.op == 1 ? length != req.length : length != 0))
        st = crb_error(CR_ERR_MALFORMED_FRAME, "ucx: request payload %zu for length %llu", length,
                       (unsigned long long)req.length);
    cre_buffer *b = NULL;
    if (st == 0)
        st = validate(e, &req, &b);
    if (st < 0) { /* a rendezvous payload is dropped by returning UCS_OK (file comment) */
        if (reply_ep != NULL)
            send_reply(ws, reply_ep, req.id, st, NULL, 0, NULL);
        return UCS_OK;
    }
    uint8_t *dst = (uint8_t *)(uintptr_t)req.addr;
    if (req.op == 0) { /* READ: reply with the bytes, straight from memory */
        ucx_serving *s = serving_new(ws, ra->rail, b, reply_ep, req.id);
        if (s == NULL) {
            cre_buffer_release(b);
            send_reply(ws, reply_ep, req.id, CR_ERR_NO_MEMORY, NULL, 0, NULL);
            return UCS_OK;
        }
        send_reply(ws, reply_ep, req.id, 0, dst, req.length, s);
        atomic_fetch_add(&e->stats.bytes_served, req.length);
        return UCS_OK;
    }
    if (!rndv) { /* a small WRITE: its bytes are here already */
        CRB_PAYLOAD_WRITES_BEGIN();
        memcpy(dst, data, length);
        CRB_PAYLOAD_WRITES_END();
        cre_buffer_release(b);
        atomic_fetch_add(&e->stats.bytes_served, length);
        send_reply(ws, reply_ep, req.id, 0, NULL, 0, NULL);
        return UCS_OK;
    }
    ucx_serving *s = serving_new(ws, ra->rail, b, reply_ep, req.id);
    if (s == NULL) { /* the payload is dropped by returning UCS_OK */
        cre_buffer_release(b);
        send_reply(ws, reply_ep, req.id, CR_ERR_NO_MEMORY, NULL, 0, NULL);
        return UCS_OK;
    }
    s->is_recv = true;
    ucp_request_param_t prm = {.op_attr_mask =
                                   UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                               .cb.recv_am = write_landed,
                               .user_data = s};
    void *r = ucp_am_recv_data_nbx(ws->uw[ra->rail], data, dst, length, &prm);
    if (UCS_PTR_IS_ERR(r)) {
        serving_free(s);
        send_reply(ws, reply_ep, req.id, CR_ERR_CONNECTION, NULL, 0, NULL);
    } else if (r == NULL) {
        serving_free(s);
        send_reply(ws, reply_ep, req.id, 0, NULL, 0, NULL);
    } else {
        s->req = r;
    }
    atomic_fetch_add(&e->stats.bytes_served, length);
    return UCS_OK;
}

void cre_ucx_am_tick(ucx_wstate *ws, uint64_t now)
{
    cr_engine *e = ws->ue->tp->engine;
    uint64_t epoch = atomic_load(&e->unregister_epoch);
    bool check_dying = epoch != ws->seen_unregister_epoch;
    ws->seen_unregister_epoch = epoch;
    for (ucx_serving *s = ws->serving, *next; s != NULL; s = next) {
        next = s->next; /* a cancel may complete s at once, and its callback frees it */
        bool expired = now >= s->deadline_ns;
        bool dying = check_dying && s->buf != NULL && cre_buffer_dying(s->buf);
        if ((expired || dying) && s->req != NULL) {
            crb_log(CRB_LOG_INFO, "ucx: canceling a served request (%s)",
                    expired ? "its deadline passed" : "its buffer is being unregistered");
            ucp_request_cancel(ws->uw[s->rail], s->req); /* its callback frees it */
        }
    }
}

int cre_ucx_am_init(ucx_wstate *ws, size_t rail)
{
    struct rail_arg *ra = calloc(1, sizeof(*ra));
    if (ra == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ucx handler argument");
    ra->ws = ws;
    ra->rail = (int)rail;
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                               UCP_AM_HANDLER_PARAM_FIELD_CB |
                                               UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                 .id = AM_REQ,
                                 .cb = on_request,
                                 .arg = ra};
    ucs_status_t st = ucp_worker_set_am_recv_handler(ws->uw[rail], &hp);
    if (st == UCS_OK) {
        hp.id = AM_REPLY;
        hp.cb = on_reply;
        hp.arg = ws;
        st = ucp_worker_set_am_recv_handler(ws->uw[rail], &hp);
    }
    ws->am_args[rail] = ra;
    if (st != UCS_OK)
        return crb_error(CR_ERR_SYSTEM, "ucx: active-message handlers: %s", ucs_status_string(st));
    return 0;
}

void cre_ucx_am_quiesce(ucx_wstate *ws)
{
    /* The workers have stopped: cancel what is being served, let UCX run
     * the callbacks (they free the entries), and drop the buffer
     * references of whatever UCX still holds (freed in cre_ucx_am_fini). */
    for (ucx_serving *s = ws->serving, *next; s != NULL; s = next) {
        next = s->next;
        if (s->req != NULL)
            ucp_request_cancel(ws->uw[s->rail], s->req);
    }
    for (int i = 0; i < 1000 && ws->serving != NULL; i++)
        for (size_t r = 0; r < ws->ue->n_rails; r++)
            if (ws->uw[r] != NULL)
                ucp_worker_progress(ws->uw[r]);
    for (ucx_serving *s = ws->serving; s != NULL; s = s->next) {
        if (s->buf != NULL)
            cre_buffer_release(s->buf);
        s->buf = NULL;
    }
}

void cre_ucx_am_fini(ucx_wstate *ws)
{
    for (size_t r = 0; r < UCX_MAX_RAILS; r++) {
        free(ws->am_args[r]);
        ws->am_args[r] = NULL;
    }
    while (ws->replies != NULL) /* their servings go with them */
        reply_free(ws->replies);
    while (ws->serving != NULL)
        serving_free(ws->serving);
    free(ws->am_ops);
    free(ws->am_gens);
    free(ws->am_free);
    ws->am_ops = NULL;
    ws->am_gens = NULL;
    ws->am_free = NULL;
    ws->am_cap = ws->n_am_free = 0;
}
