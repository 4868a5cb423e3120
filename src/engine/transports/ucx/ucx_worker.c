/*
 * ucx_worker.c - the UCP side of the ucx transport, on engine workers.
 *
 * Each engine worker owns one UCP worker per rail (its event fd sits in the
 * worker's loop), a queue submitters append ops to, and the endpoints it
 * created. A pass (woken, or every tick): take the queue, drop canceled or
 * expired ops, find or build the endpoint and the unpacked rkey for each,
 * post ucp_get_nbx / ucp_put_nbx, then one ucp_ep_flush_nbx per endpoint
 * that got WRITEs, so a WRITE completes only when its flush did. Endpoints
 * whose ops outlive their deadline, whose peer died (error handler) or
 * restarted (peer generation) are closed with UCP_EP_CLOSE_FLAG_FORCE: UCX
 * completes their requests as canceled, the tasks fail with the cause, and
 * the endpoint is freed once its last op is gone. See ucx.h.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/transports/ucx/ucx.h"

/* Ops posted on one endpoint at a time. More wait in the endpoint's queue:
 * a peer that stops answering then holds at most this many requests inside
 * UCX (which cannot cancel a send stuck behind a dead shared-memory peer),
 * and the rest fail at once when the endpoint does. */
#define EP_WINDOW 64
/* A forced close completes every request of an endpoint created with peer
 * failure handling. On shared memory there is none (UCX 1.13), and a send
 * stuck behind a dead peer may never complete: when such an endpoint is
 * closed, the tasks of ops UCX still holds fail at once and the ops stay
 * (abandoned) until UCX lets go of them. A stuck send never moved its bytes
 * and its endpoint is gone, so nothing of it can reach the peer later. */

typedef struct flush_batch {
    ucx_ep *ep;
    ucx_op **ops;
    size_t n;
} flush_batch;

/* --- progress ------------------------------------------------------------- */

/* A bounded number of progress calls: UCX keeps reporting progress while it
 * retries sends stuck behind an unresponsive peer, and the worker must get
 * back to its deadlines. */
#define PROGRESS_ROUNDS 256

static unsigned progress(ucx_wstate *ws)
{
    unsigned events = 0;
    for (size_t r = 0; r < ws->ue->n_rails; r++)
        for (int i = 0; i < PROGRESS_ROUNDS; i++) {
            unsigned n = ucp_worker_progress(ws->uw[r]);
            if (n == 0)
                break;
            events += n;
        }
    return events;
}

/* Opt-in busy-poll (CRESCENT_BUSY_POLL_US set to a window; the adaptive
 * default does not spin here): for that long after the last sign of work (UCP reported events, or
 * ops or served requests are in flight) the worker does not arm and sleep; it asks its loop for
 * another pass at once (crb_loop_again), which runs the tick and progresses UCP again. Without it
 * every hop of a small request (our worker, the peer's worker, the reply, the caller) is a wake-up
 * through an fd. True: keep spinning, do not arm. */
static bool keep_spinning(ucx_wstate *ws, unsigned events)
{
    int64_t mode = ws->ue->tp->engine->spin_mode_ns; /* only a fixed window spins here */
    if (mode <= 0)
        return false;
    uint64_t busy = (uint64_t)mode;
    uint64_t now = crb_now_ns();
    bool working = events > 0 || ws->serving != NULL;
    for (size_t i = 0; i < ws->n_live && !working; i++)
        working = ws->live[i]->n_ops > 0;
    if (working)
        ws->spin_until = now + busy;
    if (now >= ws->spin_until)
        return false;
    crb_loop_again(&ws->worker->loop);
    return true;
}

/* Progress, then arm every worker's event fd (BUSY: events came in). */
static void progress_and_arm(ucx_wstate *ws)
{
    if (keep_spinning(ws, progress(ws)))
        return;
    for (size_t r = 0; r < ws->ue->n_rails; r++) {
        bool armed = false;
        for (int i = 0; i < 8 && !armed; i++) {
            for (int k = 0; k < PROGRESS_ROUNDS && ucp_worker_progress(ws->uw[r]) != 0; k++)
                ;
            armed = ucp_worker_arm(ws->uw[r]) != UCS_ERR_BUSY;
        }
        /* Not armed (UCX still busy): the next tick progresses it again. */
        if (!armed)
            cre_worker_kick(ws->worker);
    }
}

static void on_efd(crb_io *io, uint32_t events);

/* --- ops --------------------------------------------------------------- */

static int status_of(const ucx_op *op)
{
    if (op->ep != NULL && op->ep->failed != 0)
        return op->ep->failed;
    if (op->am_status != 0)
        return op->am_status;
    if (op->status == UCS_OK)
        return 0;
    return crb_error(CR_ERR_CONNECTION, "ucx %s of %llu bytes from %s: %s",
                     op->opcode == CR_OP_WRITE ? "put" : "get", (unsigned long long)op->length,
                     op->peer->name, ucs_status_string(op->status));
}

static void rkeys_destroy(ucx_rkeys *k)
{
    while (k != NULL) {
        ucx_rkeys *next = k->next;
        for (size_t i = 0; i < k->n; i++)
            if (k->keys[i] != NULL)
                ucp_rkey_destroy(k->keys[i]);
        free(k->keys);
        free(k);
        k = next;
    }
}

/* The op ended: complete its slice of the task and let go of it. */
static void op_finish(ucx_op *op, int status)
{
    ucx_ep *ep = op->ep;
    if (ep != NULL) {
        if (op->prev != NULL)
            op->prev->next = op->next;
        else
            ep->ops = op->next;
        if (op->next != NULL)
            op->next->prev = op->prev;
        ep->n_ops--;
        if (ep->n_ops == 0 && ep->retired != NULL) {
            rkeys_destroy(ep->retired);
            ep->retired = NULL;
        }
    }
    if (ep != NULL)
        cre_ucx_am_forget(ep->ws, op);
    if (!op->abandoned) {
        cre_task_slice_done(op->task, status, status == 0 ? op->length : 0);
        cre_desc_unref(op->desc);
    }
    free(op);
}

/* Fail the task of an op UCX will not give back; keep the op for UCX.
 * Returns 1 if it did (the op was not abandoned before), else 0. */
static int op_abandon(ucx_op *op, int status)
{
    if (op->abandoned)
        return 0;
    op->abandoned = true;
    cre_task_slice_done(op->task, status, 0);
    cre_desc_unref(op->desc);
    op->desc = NULL;
    return 1;
}

/* op_abandon for every op still on an endpoint, with one log line. */
static void ep_abandon_ops(ucx_ep *ep, int status)
{
    size_t n = 0;
    const char *peer = NULL;
    for (ucx_op *op = ep->ops; op != NULL; op = op->next) {
        if (op_abandon(op, status) == 1 && peer == NULL)
            peer = op->peer->name;
        n += op->abandoned;
    }
    if (peer != NULL)
        crb_log(CRB_LOG_WARN,
                "ucx: UCX did not finish %zu request(s) to %s on rail %d after their endpoint "
                "was closed; their tasks fail now",
                n, peer, ep->rail);
}

/* RMA: a READ is done when its get is, a WRITE when its put and a flush
 * after it are. Active messages: when the request has been sent and the
 * reply (with a READ's payload) has arrived. On a failed endpoint: as soon
 * as UCX holds no request of it any more. */
static void op_maybe_done(ucx_op *op)
{
    if (op->in_ucx_call)
        return; /* the caller settles it when UCX returns (cre_ucx_op_settle) */
    bool am = op->ep != NULL && op->ep->ws->ue->use_am;
    /* A WRITE in a flush UCX still holds is referenced by that flush's
     * batch (flush_done touches it): not idle until the flush ends (a
     * forced close ends it too). */
    bool idle = op->request == NULL && op->recv_req == NULL && !(op->in_flush && !op->flushed);
    bool done = am ? op->rma_done && op->flushed && idle
                   : op->rma_done && (op->opcode != CR_OP_WRITE || op->flushed);
    if (done || (op->ep != NULL && op->ep->failed != 0 && idle))
        op_finish(op, status_of(op));
}

void cre_ucx_op_maybe_done(ucx_op *op)
{
    op_maybe_done(op);
}

void cre_ucx_op_settle(ucx_op *op)
{
    op->in_ucx_call = false;
    op_maybe_done(op);
}

static void rma_cb(void *request, ucs_status_t status, void *user_data)
{
    ucx_op *op = user_data;
    op->status = status;
    op->rma_done = true;
    op->request = NULL;
    ucp_request_free(request);
    op_maybe_done(op);
}

static void flush_done(flush_batch *fb, ucs_status_t status)
{
    for (size_t i = 0; i < fb->n; i++) {
        ucx_op *op = fb->ops[i];
        op->flushed = true;
        if (status != UCS_OK && op->status == UCS_OK)
            op->status = status;
        op_maybe_done(op);
    }
    free(fb->ops);
    free(fb);
}

static void flush_cb(void *request, ucs_status_t status, void *user_data)
{
    ucp_request_free(request);
    flush_done(user_data, status);
}

/* --- endpoints ------------------------------------------------------------ */

static void close_cb(void *request, ucs_status_t status, void *user_data)
{
    ucx_ep *ep = user_data;
    ep->close_req = NULL;
    ucp_request_free(request);
}

/* Close with FORCE: every request of it completes (canceled). The endpoint
 * leaves its peer slot; it is freed once idle (reap). */
static void ep_close(ucx_ep *ep)
{
    if (ep->closing)
        return;
    ep->closing = true;
    ucx_wstate *lws = ep->ws;
    for (size_t i = 0; i < lws->n_live; i++) {
        if (lws->live[i] == ep) {
            lws->live[i] = lws->live[--lws->n_live];
            break;
        }
    }
    if (ep->slot != NULL && *ep->slot == ep)
        *ep->slot = NULL;
    ep->slot = NULL;
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                               UCP_OP_ATTR_FIELD_USER_DATA |
                                               UCP_OP_ATTR_FIELD_FLAGS,
                               .cb.send = close_cb,
                               .user_data = ep,
                               .flags = UCP_EP_CLOSE_FLAG_FORCE};
    /* On an endpoint without peer-failure handling (shared memory) UCX 1.13
     * refuses FORCE (UCS_ERR_INVALID_PARAM) and the UCP endpoint stays until
     * the worker is destroyed; its ops are abandoned (ep_fail). A flush
     * close instead would still be pending at ucp_worker_destroy when the
     * peer is gone, and UCX asserts there (tried: engine_api_test_ucx_sm). */
    void *req = ucp_ep_close_nbx(ep->ep, &prm);
    if (UCS_PTR_IS_PTR(req))
        ep->close_req = req;
    ucx_wstate *ws = ep->ws;
    if (ws->n_dead == ws->cap_dead) {
        size_t ncap = ws->cap_dead ? ws->cap_dead * 2 : 8;
        ucx_ep **nd = realloc(ws->dead, ncap * sizeof(*nd));
        if (nd == NULL) {
            crb_log(CRB_LOG_WARN, "ucx: cannot track a closing endpoint; it leaks");
            return;
        }
        ws->dead = nd;
        ws->cap_dead = ncap;
    }
    ws->dead[ws->n_dead++] = ep;
}

static void ep_fail(ucx_ep *ep, int status)
{
    if (ep->failed != 0)
        return;
    ep->failed = status;
    ep->failed_ns = crb_now_ns();
    atomic_fetch_add(&ep->ws->ue->eps_failed, 1);
    /* Ops waiting only for a reply end now; payload receives are canceled
     * (their callbacks end them); sends end when the forced close cancels
     * them. */
    size_t n = 0;
    for (ucx_op *op = ep->ops; op != NULL; op = op->next)
        n++;
    ucx_op **snap = n ? calloc(n, sizeof(*snap)) : NULL;
    n = 0;
    for (ucx_op *op = ep->ops; snap != NULL && op != NULL; op = op->next)
        snap[n++] = op;
    for (size_t i = 0; i < n; i++) {
        if (snap[i]->recv_req != NULL)
            ucp_request_cancel(ep->ws->uw[ep->rail], snap[i]->recv_req);
    }
    ucx_op *w = ep->wait_head;
    ep->wait_head = ep->wait_tail = NULL;
    while (w != NULL) {
        ucx_op *next = w->next;
        w->ep = NULL; /* never posted */
        op_finish(w, status);
        w = next;
    }
    ep_close(ep);
    for (size_t i = 0; i < n; i++) {
        /* still linked? (cancel callbacks may have finished some) */
        bool linked = false;
        for (ucx_op *op = ep->ops; op != NULL && !linked; op = op->next)
            linked = op == snap[i];
        if (linked)
            op_maybe_done(snap[i]);
    }
    free(snap);
    if (ep->no_peer_errors)
        ep_abandon_ops(ep, status);
}

static void err_cb(void *arg, ucp_ep_h uep, ucs_status_t status)
{
    ucx_ep *ep = arg;
    crb_log(CRB_LOG_INFO, "ucx: endpoint on rail %d failed: %s", ep->rail,
            ucs_status_string(status));
    ep_fail(ep, crb_error(CR_ERR_CONNECTION, "ucx: the peer's endpoint failed: %s",
                          ucs_status_string(status)));
}

/* Free closed endpoints whose ops are all gone. */
static void reap(ucx_wstate *ws)
{
    uint64_t now = crb_now_ns();
    for (size_t i = 0; i < ws->n_dead;) {
        ucx_ep *ep = ws->dead[i];
        (void)now;
        if (ep->n_ops > 0 || ep->close_req != NULL) {
            i++;
            continue;
        }
        rkeys_destroy(ep->rkeys);
        rkeys_destroy(ep->retired);
        free(ep);
        ws->dead[i] = ws->dead[--ws->n_dead];
    }
}

/* The endpoint slot of (peer, this worker, rail). */
static ucx_ep **slot_of(ucx_wstate *ws, cre_peer *p, int rail)
{
    ucx_peer *up = cre_peer_tp(p, ws->ue->tp);
    return &up->eps[(size_t)ws->worker->index * ws->ue->n_rails + (size_t)rail];
}

static int ep_get(ucx_wstate *ws, ucx_op *op, ucx_ep **out)
{
    ucx_engine *ue = ws->ue;
    ucx_peer *up = cre_peer_tp(op->peer, ue->tp);
    uint64_t gen = atomic_load(&up->gen);
    ucx_ep **slot = slot_of(ws, op->peer, op->rail);
    if (*slot != NULL && ((*slot)->failed != 0 || (*slot)->peer_gen != gen)) {
        ucx_ep *old = *slot;
        if (old->failed == 0) /* the peer restarted: its waiting ops go to the new one */
            ep_fail(old, crb_error(CR_ERR_CONNECTION, "ucx: %s restarted", op->peer->name));
        else
            ep_close(old); /* clears the slot */
    }
    if (*slot != NULL) {
        *out = *slot;
        return 0;
    }
    const ucx_desc *ud = op->desc->tp_state[ue->tp->index];
    if (ud == NULL || (size_t)op->rail >= ud->n_rails)
        return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED, "ucx: %s offers no rail %d", op->peer->name,
                         op->rail);
    size_t rw = (size_t)ws->worker->index % ud->n_workers;
    size_t ai = (size_t)op->rail * ud->n_workers + rw;
    ucx_ep *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ucx endpoint");
    ep->ws = ws;
    ep->rail = op->rail;
    ep->peer_gen = gen;
    ucp_ep_params_t prm = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)ud->addr[ai],
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = err_cb, .arg = ep},
    };
    ucs_status_t st = UCS_ERR_UNREACHABLE;
    if (!atomic_load(&ue->rails[op->rail].no_peer_errors))
        st = ucp_ep_create(ws->uw[op->rail], &prm, &ep->ep);
    if (st == UCS_ERR_UNREACHABLE) {
        atomic_store(&ue->rails[op->rail].no_peer_errors, true); /* ask once per rail */
        /* Shared-memory transports cannot detect a dead peer; deadlines
         * bound its transfers instead. */
        prm.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        prm.field_mask &= ~(uint64_t)UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep->no_peer_errors = true;
        st = ucp_ep_create(ws->uw[op->rail], &prm, &ep->ep);
    }
    if (st != UCS_OK) {
        free(ep);
        return crb_error(st == UCS_ERR_UNREACHABLE ? CR_ERR_PEER_UNREACHABLE : CR_ERR_CONNECTION,
                         "ucx: endpoint to %s on rail %d: %s", op->peer->name, op->rail,
                         ucs_status_string(st));
    }
    if (ws->n_live == ws->cap_live) {
        size_t ncap = ws->cap_live ? ws->cap_live * 2 : 8;
        ucx_ep **nl = realloc(ws->live, ncap * sizeof(*nl));
        if (nl == NULL) {
            ucp_ep_destroy(ep->ep);
            free(ep);
            return crb_error(CR_ERR_NO_MEMORY, "ucx endpoint table");
        }
        ws->live = nl;
        ws->cap_live = ncap;
    }
    ws->live[ws->n_live++] = ep;
    atomic_fetch_add(&ue->eps_created, 1);
    ep->slot = slot;
    *slot = ep;
    *out = ep;
    return 0;
}

/* The rkey of the op's remote buffer, unpacked on this endpoint. */
static int rkey_get(ucx_ep *ep, ucx_op *op, ucp_rkey_h *out)
{
    const ucx_desc *ud = op->desc->tp_state[ep->ws->ue->tp->index];
    if (ep->rkeys == NULL || ep->rkeys->instance != ud->instance ||
        ep->rkeys->version != ud->version) {
        ucx_rkeys *k = calloc(1, sizeof(*k));
        if (k == NULL ||
            (k->keys = calloc(ud->n_bufs ? ud->n_bufs : 1, sizeof(*k->keys))) == NULL) {
            free(k);
            return crb_error(CR_ERR_NO_MEMORY, "ucx rkey cache");
        }
        k->instance = ud->instance;
        k->version = ud->version;
        k->n = ud->n_bufs;
        if (ep->rkeys != NULL) { /* in use by ops in flight: destroyed when idle */
            ep->rkeys->next = ep->retired;
            ep->retired = ep->rkeys;
        }
        ep->rkeys = k;
    }
    ucp_rkey_h *key = &ep->rkeys->keys[op->remote_index];
    if (*key == NULL) {
        const ucx_remote_buf *rb = &ud->bufs[op->remote_index];
        if (rb->rkey[op->rail] == NULL)
            return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED, "ucx: no rkey on rail %d", op->rail);
        ucs_status_t st = ucp_ep_rkey_unpack(ep->ep, rb->rkey[op->rail], key);
        if (st != UCS_OK) {
            *key = NULL;
            return crb_error(CR_ERR_CONNECTION, "ucx: unpacking an rkey of %s: %s", op->peer->name,
                             ucs_status_string(st));
        }
    }
    *out = *key;
    return 0;
}

/* --- posting ------------------------------------------------------------------ */

static void ep_link(ucx_ep *ep, ucx_op *op)
{
    op->ep = ep;
    op->prev = NULL;
    op->next = ep->ops;
    if (ep->ops != NULL)
        ep->ops->prev = op;
    ep->ops = op;
    ep->n_ops++;
}

static void post_now(ucx_wstate *ws, ucx_ep *ep, ucx_op *op, ucx_ep ***touched, size_t *n_touched,
                     size_t *cap_touched);

/* Route one op to its endpoint: post it, or queue it there while the
 * endpoint's window is full. */
static void post(ucx_wstate *ws, ucx_op *op, ucx_ep ***touched, size_t *n_touched,
                 size_t *cap_touched)
{
    ucx_ep *ep = NULL;
    int rc = ep_get(ws, op, &ep);
    if (rc < 0) {
        op_finish(op, rc);
        return;
    }
    if (ep->n_ops >= EP_WINDOW || ep->wait_head != NULL) {
        op->next = NULL;
        if (ep->wait_tail != NULL)
            ep->wait_tail->next = op;
        else
            ep->wait_head = op;
        ep->wait_tail = op;
        return;
    }
    post_now(ws, ep, op, touched, n_touched, cap_touched);
}

/* Post one op; WRITEs are remembered for the endpoint's flush. */
static void post_now(ucx_wstate *ws, ucx_ep *ep, ucx_op *op, ucx_ep ***touched, size_t *n_touched,
                     size_t *cap_touched)
{
    ucp_rkey_h rkey = NULL;
    int rc = ws->ue->use_am ? 0 : rkey_get(ep, op, &rkey);
    if (rc < 0) {
        op_finish(op, rc);
        return;
    }
    ep_link(ep, op);
    if (ws->ue->use_am) {
        rc = cre_ucx_am_post(ws, ep, op);
        if (rc < 0)
            op_finish(op, rc);
        return;
    }
    ucp_request_param_t prm = {.op_attr_mask =
                                   UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                               .cb.send = rma_cb,
                               .user_data = op};
    if (op->local_memh != NULL) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        prm.memh = op->local_memh;
    }
    op->in_ucx_call = true;
    void *req = op->opcode == CR_OP_WRITE
                    ? ucp_put_nbx(ep->ep, op->local, op->length, op->remote_addr, rkey, &prm)
                    : ucp_get_nbx(ep->ep, op->local, op->length, op->remote_addr, rkey, &prm);
    if (UCS_PTR_IS_ERR(req)) {
        op->status = UCS_PTR_STATUS(req);
        op->rma_done = op->flushed = op->in_flush = true;
        cre_ucx_op_settle(op);
        return;
    }
    if (req == NULL) {
        op->status = UCS_OK;
        op->rma_done = true;
    } else if (!op->rma_done) { /* else rma_cb already ran inside the call */
        op->request = req;
    }
    if (op->opcode != CR_OP_WRITE || ep->failed != 0) {
        cre_ucx_op_settle(op);
        return;
    }
    op->in_ucx_call = false;
    /* The endpoint gets a flush after this pass: remember it. */
    op->flushed = false;
    bool seen = false;
    for (size_t i = 0; i < *n_touched && !seen; i++)
        seen = (*touched)[i] == ep;
    if (!seen) {
        if (*n_touched == *cap_touched) {
            size_t ncap = *cap_touched ? *cap_touched * 2 : 8;
            ucx_ep **nt = realloc(*touched, ncap * sizeof(*nt));
            if (nt == NULL) {
                ep_fail(ep, crb_error(CR_ERR_NO_MEMORY, "ucx: no room to flush WRITEs"));
                return;
            }
            *touched = nt;
            *cap_touched = ncap;
        }
        (*touched)[(*n_touched)++] = ep;
    }
}

/* One flush for every WRITE posted on ep and not yet covered by a flush. */
static void flush_ep(ucx_wstate *ws, ucx_ep *ep)
{
    size_t n = 0;
    for (ucx_op *op = ep->ops; op != NULL; op = op->next)
        if (op->opcode == CR_OP_WRITE && !op->in_flush)
            n++;
    if (n == 0)
        return;
    flush_batch *fb = calloc(1, sizeof(*fb));
    ucx_op **ops = calloc(n, sizeof(*ops));
    if (fb == NULL || ops == NULL) {
        free(fb);
        free(ops);
        ep_fail(ep, crb_error(CR_ERR_NO_MEMORY, "ucx: flushing WRITEs"));
        return;
    }
    for (ucx_op *op = ep->ops; op != NULL; op = op->next)
        if (op->opcode == CR_OP_WRITE && !op->in_flush) {
            op->in_flush = true;
            ops[fb->n++] = op;
        }
    fb->ep = ep;
    fb->ops = ops;
    atomic_fetch_add(&ws->ue->flushes, 1);
    ucp_request_param_t prm = {.op_attr_mask =
                                   UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                               .cb.send = flush_cb,
                               .user_data = fb};
    void *req = ucp_ep_flush_nbx(ep->ep, &prm);
    if (req == NULL)
        flush_done(fb, UCS_OK);
    else if (UCS_PTR_IS_ERR(req))
        flush_done(fb, UCS_PTR_STATUS(req));
}

/* --- the worker's pass ------------------------------------------------------ */

static ucx_wstate *ws_of(ucx_engine *ue, cre_worker *w)
{
    return &ue->ws[w->index];
}

void cre_ucx_queue(ucx_engine *ue, ucx_wstate *ws, ucx_op *first, ucx_op *last)
{
    pthread_mutex_lock(&ws->qlock);
    if (ws->queue_tail != NULL)
        ws->queue_tail->next = first;
    else
        ws->queue_head = first;
    ws->queue_tail = last;
    pthread_mutex_unlock(&ws->qlock);
    cre_worker_kick(ws->worker);
}

/*
 * Fail ops of an endpoint past their deadline: close it (the requests
 * complete canceled, the tasks end with ERR_TIMEOUT).
 *
 * A peer reached without peer-failure handling (UCX 1.13's shared-memory
 * transports) that passes a deadline may have died. If it died while
 * writing a message into this UCP worker's receive queue (UCX's mm FIFO: a
 * sender claims a slot, fills it, then marks it written; the reader takes
 * slots in order), the slot is never marked and nothing behind it is ever
 * read: every later reply to this worker, from any peer, is lost, and each
 * transfer fails at its deadline until the engine is recreated. UCX offers
 * no way to detect or skip the slot, so the worker is flagged, the first
 * such deadline logs what happened once, and later timeouts name it.
 * crescent's own shm transport (protocol "shm", or "auto") has no such
 * queue; ucx over shared memory is for testing the UCX paths.
 */
static void check_deadlines(ucx_wstate *ws, uint64_t now)
{
    for (size_t i = 0; i < ws->n_live;) {
        ucx_ep *ep = ws->live[i];
        bool expired = false;
        for (ucx_op *op = ep->ops; op != NULL && !expired; op = op->next)
            expired = now >= op->deadline_ns;
        for (ucx_op *op = ep->wait_head; op != NULL && !expired; op = op->next)
            expired = now >= op->deadline_ns;
        if (!expired) {
            i++;
            continue;
        }
        const char *peer = ep->ops != NULL         ? ep->ops->peer->name
                           : ep->wait_head != NULL ? ep->wait_head->peer->name
                                                   : "a peer";
        int status;
        if (ws->rx_maybe_blocked) {
            status = crb_error(CR_ERR_TIMEOUT,
                               "ucx: a request to %s timed out; an earlier shared-memory peer "
                               "stopped answering on this worker, and if it died while sending "
                               "to us UCX's shared-memory receive queue stays blocked (UCX 1.13 "
                               "cannot recover it): recreate the engine, or use the shm transport",
                               peer);
            crb_log(CRB_LOG_WARN, "%s", cr_last_error_message());
        } else if (ep->no_peer_errors) {
            ws->rx_maybe_blocked = true;
            crb_log(CRB_LOG_WARN,
                    "ucx: %s stopped answering over shared memory (no peer-failure handling in "
                    "UCX 1.13); if it died while sending to us, this engine worker's UCX receive "
                    "queue is blocked and its later ucx transfers will time out",
                    peer);
            status = crb_error(CR_ERR_TIMEOUT, "ucx: a request to %s timed out", peer);
        } else {
            crb_log(CRB_LOG_WARN, "ucx: a request to %s passed its deadline; closing its endpoint",
                    peer);
            status = crb_error(CR_ERR_TIMEOUT, "ucx: a request to %s timed out", peer);
        }
        ep_fail(ep, status);
        /* ep_close took it out of live: look at index i again */
    }
}

/* Post what waits behind full windows, then flush endpoints that got
 * WRITEs (RMA). */
static void pump(ucx_wstate *ws, ucx_ep ***touched, size_t *n_touched, size_t *cap_touched)
{
    for (size_t i = 0; i < ws->n_live; i++) {
        ucx_ep *ep = ws->live[i];
        while (ep->wait_head != NULL && ep->n_ops < EP_WINDOW && ep->failed == 0) {
            ucx_op *op = ep->wait_head;
            ep->wait_head = op->next;
            if (ep->wait_head == NULL)
                ep->wait_tail = NULL;
            op->next = NULL;
            post_now(ws, ep, op, touched, n_touched, cap_touched);
        }
    }
    for (size_t i = 0; i < *n_touched; i++)
        if (!(*touched)[i]->closing)
            flush_ep(ws, (*touched)[i]);
    *n_touched = 0;
}

void cre_ucx_tick(cre_tp *tp, cre_worker *w, uint64_t now)
{
    ucx_engine *ue = tp->priv;
    ucx_wstate *ws = ws_of(ue, w);
    pthread_mutex_lock(&ws->qlock);
    ucx_op *op = ws->queue_head;
    ws->queue_head = ws->queue_tail = NULL;
    pthread_mutex_unlock(&ws->qlock);
    ucx_ep **touched = NULL;
    size_t n_touched = 0, cap_touched = 0;
    while (op != NULL) {
        ucx_op *next = op->next;
        op->next = op->prev = NULL;
        if (atomic_load(&op->task->canceled))
            op_finish(op, CR_ERR_CANCELED);
        else if (now >= op->deadline_ns)
            op_finish(op, crb_error(CR_ERR_TIMEOUT, "ucx: request to %s expired in the queue",
                                    op->peer->name));
        else
            post(ws, op, &touched, &n_touched, &cap_touched);
        op = next;
    }
    pump(ws, &touched, &n_touched, &cap_touched);
    progress(ws);
    check_deadlines(ws, now);
    if (ue->use_am)
        cre_ucx_am_tick(ws, now);
    pump(ws, &touched, &n_touched, &cap_touched);
    free(touched);
    reap(ws);
    progress_and_arm(ws);
}

static void on_efd(crb_io *io, uint32_t events)
{
    ucx_wstate *ws = ((ucx_efd *)((char *)io - offsetof(ucx_efd, io)))->ws;
    progress(ws);
    ucx_ep **touched = NULL;
    size_t n_touched = 0, cap_touched = 0;
    pump(ws, &touched, &n_touched, &cap_touched);
    free(touched);
    progress_and_arm(ws);
    reap(ws);
}

/* --- setup and teardown ---------------------------------------------------- */

int cre_ucx_workers_init(ucx_engine *ue)
{
    cr_engine *e = ue->tp->engine;
    ue->ws = calloc(e->n_workers, sizeof(*ue->ws));
    if (ue->ws == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ucx worker state");
    for (uint32_t w = 0; w < e->n_workers; w++) {
        ucx_wstate *ws = &ue->ws[w];
        ws->ue = ue;
        ws->worker = &e->workers[w];
        pthread_mutex_init(&ws->qlock, NULL);
        ws->efd = calloc(ue->n_rails, sizeof(*ws->efd));
        if (ws->efd == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "ucx event fds");
        for (size_t r = 0; r < ue->n_rails; r++) {
            ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                      .thread_mode = UCS_THREAD_MODE_SINGLE};
            ucs_status_t st = ucp_worker_create(ue->rails[r].context, &wp, &ws->uw[r]);
            if (st != UCS_OK)
                return crb_error(CR_ERR_SYSTEM, "ucx: ucp_worker_create: %s",
                                 ucs_status_string(st));
            int fd;
            st = ucp_worker_get_efd(ws->uw[r], &fd);
            if (st != UCS_OK)
                return crb_error(CR_ERR_SYSTEM, "ucx: ucp_worker_get_efd: %s",
                                 ucs_status_string(st));
            ws->efd[r].ws = ws;
            ws->efd[r].io.fd = fd;
            ws->efd[r].io.on_event = on_efd;
            int rc = crb_loop_add(&ws->worker->loop, &ws->efd[r].io, EPOLLIN);
            if (rc == 0)
                rc = cre_ucx_am_init(ws, r);
            if (rc < 0)
                return rc;
        }
        progress_and_arm(ws);
    }
    return 0;
}

void cre_ucx_peer_close(ucx_engine *ue, ucx_peer *up)
{
    cr_engine *e = ue->tp->engine;
    if (up->eps == NULL || ue->ws == NULL)
        return;
    for (uint32_t w = 0; w < e->n_workers; w++) {
        ucx_wstate *ws = &ue->ws[w];
        for (size_t r = 0; r < ue->n_rails; r++) {
            ucx_ep **slot = &up->eps[(size_t)w * ue->n_rails + r];
            if (*slot != NULL) /* ep_close clears the slot */
                ep_fail(*slot, crb_error(CR_ERR_SHUTDOWN, "ucx: the engine is shutting down"));
        }
        /* The workers have stopped: drive the closes to the end here. */
        for (int i = 0; i < 10000 && ws->n_dead > 0; i++) {
            progress(ws);
            reap(ws);
        }
    }
}

void cre_ucx_fail_queued(ucx_wstate *ws)
{
    pthread_mutex_lock(&ws->qlock);
    ucx_op *op = ws->queue_head;
    ws->queue_head = ws->queue_tail = NULL;
    pthread_mutex_unlock(&ws->qlock);
    while (op != NULL) {
        ucx_op *next = op->next;
        op_finish(op, CR_ERR_SHUTDOWN);
        op = next;
    }
}

void cre_ucx_workers_fini(ucx_engine *ue)
{
    cr_engine *e = ue->tp->engine;
    if (ue->ws == NULL)
        return;
    for (uint32_t w = 0; w < e->n_workers; w++) {
        ucx_wstate *ws = &ue->ws[w];
        cre_ucx_fail_queued(ws); /* nothing left after quiesce; kept for a failed init */
        for (int i = 0; i < 10000 && ws->n_dead > 0; i++) {
            progress(ws);
            reap(ws);
        }
        /* What UCX never gave back: fail the tasks now (teardown), free
         * the ops once the UCP workers are gone. */
        for (size_t d = 0; d < ws->n_dead; d++)
            ep_abandon_ops(ws->dead[d], CR_ERR_SHUTDOWN);
        for (size_t r = 0; r < ue->n_rails; r++) {
            if (ws->uw[r] == NULL)
                continue;
            if (ws->efd != NULL)
                crb_loop_del(&ws->efd[r].io);
            ucp_worker_destroy(ws->uw[r]);
        }
        cre_ucx_am_fini(ws); /* no UCX callback can run any more */
        for (size_t d = 0; d < ws->n_dead; d++) {
            ucx_ep *ep = ws->dead[d];
            while (ep->ops != NULL) {
                ucx_op *o = ep->ops;
                ep->ops = o->next;
                free(o);
            }
            rkeys_destroy(ep->rkeys);
            rkeys_destroy(ep->retired);
            free(ep);
        }
        free(ws->dead);
        free(ws->live);
        free(ws->efd);
        pthread_mutex_destroy(&ws->qlock);
    }
    free(ue->ws);
    ue->ws = NULL;
}
