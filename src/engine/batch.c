/*
 * batch.c - batches and tasks: submit-time validation, completion
 * accounting, waiting, cancellation and deferred freeing.
 *
 * A task is one request; a transport completes it slice by slice through
 * cre_task_slice_done(). The last slice decides the task's final state,
 * releases the local buffer reference taken at submit (which is what
 * unregistration waits for) and wakes waiters of the batch. A batch freed
 * while tasks are in flight loses its id at once and is destroyed by
 * whichever thread finishes the last task or drops the last user.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/internal.h"

#define MAX_BATCH_CAPACITY (1u << 20)

static void batch_destroy(cre_batch *b)
{
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
    free(b->tasks);
    free(b);
}

/* Drop one user; destroy if freed and quiescent. Called with b->lock held;
 * releases it. */
static void batch_unlock_and_maybe_destroy(cre_batch *b)
{
    bool destroy = b->freed && b->unfinished == 0 && b->users == 0;
    pthread_mutex_unlock(&b->lock);
    if (destroy)
        batch_destroy(b);
}

static int batch_get(cr_engine *e, cr_batch_id id, cre_batch **out)
{
    pthread_mutex_lock(&e->batches.lock);
    cre_batch *b = cre_handles_get_locked(&e->batches, id);
    if (b == NULL) {
        pthread_mutex_unlock(&e->batches.lock);
        return crb_error(CR_ERR_INVALID_HANDLE, "batch id 0x%llx is stale or invalid",
                         (unsigned long long)id);
    }
    pthread_mutex_lock(&b->lock);
    b->users++;
    pthread_mutex_unlock(&b->lock);
    pthread_mutex_unlock(&e->batches.lock);
    *out = b;
    return 0;
}

static void batch_put(cre_batch *b)
{
    pthread_mutex_lock(&b->lock);
    b->users--;
    batch_unlock_and_maybe_destroy(b);
}

void cre_task_slice_done(cre_task *t, int status, uint64_t bytes)
{
    if (status != 0) {
        int expected = 0;
        atomic_compare_exchange_strong(&t->error, &expected, status);
    }
    atomic_fetch_add(&t->done_bytes, bytes);
    if (atomic_fetch_sub(&t->slices_left, 1) != 1)
        return;
    int err = atomic_load(&t->error);
    cr_engine *e = t->batch->engine;
    int state = err == 0                 ? CR_TASK_COMPLETED
                : err == CR_ERR_TIMEOUT  ? CR_TASK_TIMEOUT
                : err == CR_ERR_CANCELED ? CR_TASK_CANCELED
                                         : CR_TASK_FAILED;
    cre_buffer *local_buf = t->local_buf;
    t->local_buf = NULL;
    atomic_fetch_add(err == 0 ? &e->stats.tasks_completed : &e->stats.tasks_failed, 1);
    if (t->tp != NULL) {
        atomic_fetch_add(err == 0 ? &t->tp->requests : &t->tp->failures, 1);
        if (err == 0)
            atomic_fetch_add(&t->tp->bytes, t->length);
    }
    cre_batch *b = t->batch;
    pthread_mutex_lock(&b->lock);
    atomic_store(&t->state, state);
    atomic_store_explicit(&b->pending_hint, b->unfinished - 1, memory_order_release);
    if (--b->unfinished == 0)
        pthread_cond_broadcast(&b->cond);
    batch_unlock_and_maybe_destroy(b); /* t may be gone from here on */
    /* Released last, so an unregister that waited on this buffer returns
     * only after the task's final state is visible. */
    if (local_buf != NULL)
        cre_buffer_release(local_buf);
}

int cr_batch_create(cr_engine *e, size_t capacity, cr_batch_id *out)
{
    return cr_batch_create_ex(e, capacity, 0, out);
}

/* caller_deadline_ns: when a caller that waits gives up (UINT64_MAX: the
 * request timeout bounds it). */
static int batch_create(cr_engine *e, size_t capacity, unsigned flags, uint64_t caller_deadline_ns,
                        cr_batch_id *out)
{
    if (e == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "cr_batch_create: NULL engine or out");
    if ((flags & ~CR_BATCH_CALLER_WAITS) != 0)
        return crb_error(CR_INVALID_PARAMS, "cr_batch_create_ex: unknown flags 0x%x",
                         flags & ~CR_BATCH_CALLER_WAITS);
    if (capacity == 0 || capacity > MAX_BATCH_CAPACITY)
        return crb_error(CR_INVALID_PARAMS, "batch capacity %zu is outside [1, %u]", capacity,
                         MAX_BATCH_CAPACITY);
    cre_batch *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "batch of capacity %zu", capacity);
    b->tasks = calloc(capacity, sizeof(*b->tasks));
    if (b->tasks == NULL) {
        free(b);
        return crb_error(CR_ERR_NO_MEMORY, "batch of capacity %zu", capacity);
    }
    b->engine = e;
    b->capacity = capacity;
    b->caller_waits = capacity == 1 && (flags & CR_BATCH_CALLER_WAITS) && e->tcp_caller_reads;
    b->caller_deadline_ns = caller_deadline_ns;
    pthread_mutex_init(&b->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cond, &ca);
    pthread_condattr_destroy(&ca);
    for (size_t i = 0; i < capacity; i++)
        atomic_init(&b->tasks[i].state, CR_TASK_PENDING);
    cr_batch_id id;
    int rc = cre_handles_add(&e->batches, b, &id);
    if (rc < 0) {
        batch_destroy(b);
        return rc;
    }
    *out = id;
    return 0;
}

int cr_batch_create_ex(cr_engine *e, size_t capacity, unsigned flags, cr_batch_id *out)
{
    CRE_CALL(e, "cr_batch_create");
    return batch_create(e, capacity, flags, UINT64_MAX, out);
}

/* What the submit path resolved for one request. */
typedef struct planned {
    cre_route route;
    cre_tp *tp;
} planned;

/* Find the descriptor buffer holding [addr, addr+len) in snapshot d. */
static int desc_check(const cre_peer *p, const cre_desc *dd, size_t idx, uint64_t addr,
                      uint64_t len, cre_route *r)
{
    const crp_descriptor *d = &dd->d;
    size_t lo = 0, hi = d->n_buffers;
    while (lo < hi) { /* buffers are sorted by address */
        size_t mid = lo + (hi - lo) / 2;
        if (d->buffers[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    const crp_buffer_desc *b = lo > 0 ? &d->buffers[lo - 1] : NULL;
    if (b == NULL || addr >= b->addr + b->length)
        return crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                         "request %zu: remote range [0x%llx, +%llu) is not in any buffer of "
                         "segment %s",
                         idx, (unsigned long long)addr, (unsigned long long)len, p->name);
    if (addr + len > b->addr + b->length)
        return crb_error(CR_ERR_OUT_OF_RANGE,
                         "request %zu: remote range [0x%llx, +%llu) runs past buffer [0x%llx, "
                         "+%llu) of segment %s",
                         idx, (unsigned long long)addr, (unsigned long long)len,
                         (unsigned long long)b->addr, (unsigned long long)b->length, p->name);
    if (!b->remote_accessible)
        return crb_error(CR_ERR_NOT_REMOTE_ACCESSIBLE,
                         "request %zu: remote buffer 0x%llx of segment %s is not "
                         "remote-accessible",
                         idx, (unsigned long long)b->addr, p->name);
    r->remote_index = lo - 1;
    r->remote_kind = b->kind;
    r->remote_device = b->device;
    r->peer_instance = d->instance;
    r->remote_base = b->addr;
    return 0;
}

/* Validate the remote range against the peer's current descriptor,
 * refreshing it once if the range is not there (or the peer restarted).
 * On success r->desc holds a reference on the snapshot used. */
static int plan_remote(cre_peer *p, size_t idx, const cr_transfer_request *req, cre_route *r)
{
    bool refreshed = false;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        cre_desc *d = p->desc;
        bool need_refresh = d == NULL || p->desc_stale;
        int rc = need_refresh ? 0 : desc_check(p, d, idx, req->remote_addr, req->length, r);
        if (rc == 0 && !need_refresh) {
            cre_desc_ref(d);
            r->desc = d;
            r->same_host = p->same_host;
        }
        pthread_mutex_unlock(&p->lock);
        bool missing = rc == CR_ERR_ADDRESS_NOT_REGISTERED || rc == CR_ERR_OUT_OF_RANGE;
        if (!need_refresh && (rc == 0 || !missing || refreshed))
            return rc;
        rc = cre_peer_refresh(p);
        if (rc < 0)
            return rc;
        refreshed = true;
    }
}

/* Target in this very process: validate against the live registry. */
static int plan_self(cr_engine *e, size_t idx, const cr_transfer_request *req, cre_route *r)
{
    int rc = cre_registry_acquire(&e->registry, req->remote_addr, req->length, "target",
                                  &r->self_target);
    if (rc < 0)
        return crb_error(rc, "request %zu: %s", idx, cr_last_error_message());
    if (!r->self_target->remote_accessible) {
        rc = crb_error(CR_ERR_NOT_REMOTE_ACCESSIBLE,
                       "request %zu: target buffer 0x%llx is not remote-accessible", idx,
                       (unsigned long long)r->self_target->addr);
        cre_buffer_release(r->self_target);
        r->self_target = NULL;
        return rc;
    }
    r->remote_kind = r->self_target->kind;
    r->remote_device = r->self_target->device;
    r->remote_base = r->self_target->addr;
    r->peer_instance = e->instance;
    return 0;
}

/* Does an installed transport reach our own process without the network? */
static bool process_transport_installed(const cr_engine *e)
{
    for (size_t i = 0; i < e->n_tps; i++)
        if (!e->tps[i].kind_only && (e->tps[i].ops->reach & CRE_REACH_PROCESS) &&
            !(e->tps[i].ops->reach & CRE_REACH_REMOTE))
            return true;
    return false;
}

/* Is the route's local end unregistered memory (CR_OP_LOCAL_UNREGISTERED)? */
static bool route_transient(const cre_route *r)
{
    return r->local_buf != NULL && r->local_buf->owner == NULL;
}

/*
 * A transient local end: the first transport in rank order that serves the
 * pair takes it if it moves any local memory. A host-memory transport that
 * needs registration (ucx) met first refuses the request rather than let a
 * slower one behind it take the pair silently; transports owning device
 * memory kinds do not serve host pairs and are passed over.
 */
static int choose_transient(cr_engine *e, size_t idx, const cr_transfer_request *req, planned *pl)
{
    const cre_route *r = &pl->route;
    const char *why = NULL;
    if (!cre_kind_is_host(r->remote_kind))
        why = "the remote buffer is device memory";
    for (size_t i = 0; i < e->n_tps && why == NULL; i++) {
        cre_tp *tp = &e->tps[i];
        if (tp->kind_only || (!tp->ops->any_local && tp->ops->kinds != 0))
            continue;
        if (!tp->ops->any_local) {
            why = tp->ops->name;
            break;
        }
        if (tp->ops->can_serve(tp, r)) {
            pl->tp = tp;
            return 0;
        }
    }
    atomic_fetch_add(&e->stats.unregistered_refused, 1);
    if (why == NULL)
        return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED,
                         "request %zu: no installed transport can move unregistered local "
                         "memory at 0x%llx to segment %s",
                         idx, (unsigned long long)(uintptr_t)req->local_addr, r->peer->name);
    return crb_error(CR_ERR_NEEDS_REGISTERED,
                     "request %zu: local memory at 0x%llx is not registered, and %s%s "
                     "(segment %s)",
                     idx, (unsigned long long)(uintptr_t)req->local_addr, why,
                     cre_kind_is_host(r->remote_kind) ? ", the transport for the pair, needs it"
                                                      : "",
                     r->peer->name);
}

static int choose_transport(cr_engine *e, size_t idx, const cr_transfer_request *req, planned *pl)
{
    if (route_transient(&pl->route))
        return choose_transient(e, idx, req, pl);
    for (size_t i = 0; i < e->n_tps; i++) {
        if (!e->tps[i].kind_only && e->tps[i].ops->can_serve(&e->tps[i], &pl->route)) {
            pl->tp = &e->tps[i];
            return 0;
        }
    }
    char names[96] = "";
    for (size_t i = 0; i < e->n_tps; i++)
        if (!e->tps[i].kind_only)
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                     names[0] ? ", " : "", e->tps[i].ops->name);
    const cre_route *r = &pl->route;
    bool remote_bad = !cre_kind_is_host(r->remote_kind);
    uint64_t addr = remote_bad ? req->remote_addr : (uint64_t)(uintptr_t)req->local_addr;
    int kind = remote_bad ? r->remote_kind : r->local_kind;
    int device = remote_bad ? r->remote_device : r->local_device;
    const cre_stager_ops *so;
    bool owned = cre_kind_is_host(kind) || cre_engine_stager(e, kind, &so) != NULL;
    return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED,
                     "request %zu: %s buffer at 0x%llx (segment %s) is %s memory (device %d); "
                     "no installed transport (%s) can move it%s",
                     idx, remote_bad ? "remote" : "local", (unsigned long long)addr,
                     remote_bad ? r->peer->name : "local", cr_mem_kind_name(kind), device, names,
                     owned ? "" : " (this process has no driver for that memory: see the log)");
}

/* Release what a plan holds: the local buffer reference (unless a task took
 * it), the self target and the descriptor snapshot. */
static void plan_release(planned *pl, bool keep_local)
{
    if (pl->route.local_buf != NULL && !keep_local)
        cre_buffer_release(pl->route.local_buf);
    if (pl->route.self_target != NULL)
        cre_buffer_release(pl->route.self_target);
    cre_desc_unref(pl->route.desc);
    pl->route.local_buf = NULL;
    pl->route.self_target = NULL;
    pl->route.desc = NULL;
}

static int plan_one(cr_engine *e, size_t idx, const cr_transfer_request *req, planned *pl)
{
    int op = req->opcode & ~CR_OP_LOCAL_UNREGISTERED;
    if (op != CR_OP_READ && op != CR_OP_WRITE)
        return crb_error(CR_INVALID_PARAMS, "request %zu: opcode %d is neither READ nor WRITE", idx,
                         req->opcode);
    if (req->length == 0)
        return crb_error(CR_ERR_ZERO_LENGTH, "request %zu has length 0", idx);
    if (req->remote_addr + req->length < req->remote_addr)
        return crb_error(CR_ERR_RANGE_OVERFLOW, "request %zu: remote 0x%llx + %llu overflows", idx,
                         (unsigned long long)req->remote_addr, (unsigned long long)req->length);
    cre_route *r = &pl->route;
    int rc = cre_segment_lookup(e, req->segment, &r->peer);
    if (rc < 0)
        return crb_error(rc, "request %zu: segment handle 0x%llx is stale or invalid", idx,
                         (unsigned long long)req->segment);
    if (op == req->opcode) {
        rc = cre_registry_acquire(&e->registry, (uint64_t)(uintptr_t)req->local_addr, req->length,
                                  "local", &r->local_buf);
    } else { /* CR_OP_LOCAL_UNREGISTERED: a range in no buffer is transient */
        rc = cre_registry_acquire_or_miss(&e->registry, (uint64_t)(uintptr_t)req->local_addr,
                                          req->length, "local", &r->local_buf);
        if (rc == CR_ERR_ADDRESS_NOT_REGISTERED)
            rc = cre_buffer_transient((uint64_t)(uintptr_t)req->local_addr, req->length,
                                      &r->local_buf);
    }
    if (rc < 0)
        return crb_error(rc, "request %zu: %s", idx, cr_last_error_message());
    r->local_kind = r->local_buf->kind;
    r->local_device = r->local_buf->device;
    if (r->peer->is_self && process_transport_installed(e))
        rc = plan_self(e, idx, req, r);
    else
        rc = plan_remote(r->peer, idx, req, r);
    if (rc == 0)
        rc = choose_transport(e, idx, req, pl);
    if (rc < 0)
        plan_release(pl, false);
    else if (route_transient(r))
        atomic_fetch_add(&e->stats.unregistered_requests, 1);
    return rc;
}

/* Start a task on its planned transport. A transport that finds at first
 * use that the peer refuses its path (credentials, kernel policy) says
 * CR_ERR_TRANSPORT_UNSUPPORTED; the next installed transport that serves the
 * pair takes over. */
static int start_task(cr_engine *e, planned *pl, cre_task *t)
{
    for (size_t i = (size_t)pl->tp->index; i < e->n_tps; i++) {
        cre_tp *tp = &e->tps[i];
        if (tp != pl->tp && (tp->kind_only || !tp->ops->can_serve(tp, &pl->route) ||
                             (route_transient(&pl->route) && !tp->ops->any_local)))
            continue;
        t->tp = tp;
        int rc = tp->ops->submit(tp, &pl->route, t);
        if (rc != CR_ERR_TRANSPORT_UNSUPPORTED)
            return rc;
        atomic_fetch_add(&e->stats.transport_fallbacks, 1);
        crb_log(CRB_LOG_DEBUG, "transport %s refused a request to %s at first use; trying the next",
                tp->ops->name, pl->route.peer->name);
    }
    t->tp = NULL;
    return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED, "no transport could move the request to %s",
                     pl->route.peer->name);
}

int cr_batch_submit(cr_engine *e, cr_batch_id id, const cr_transfer_request *reqs, size_t n)
{
    CRE_CALL(e, "cr_batch_submit");
    if (n > 0 && reqs == NULL)
        return crb_error(CR_INVALID_PARAMS, "cr_batch_submit: %zu requests but NULL array", n);
    cre_batch *b;
    int rc = batch_get(e, id, &b);
    if (rc < 0)
        return rc;
    if (n == 0) {
        batch_put(b);
        return 0;
    }
    planned *plan = calloc(n, sizeof(*plan));
    if (plan == NULL) {
        batch_put(b);
        return crb_error(CR_ERR_NO_MEMORY, "planning %zu requests", n);
    }
    size_t planned_n = 0;
    for (; planned_n < n; planned_n++) {
        rc = plan_one(e, planned_n, &reqs[planned_n], &plan[planned_n]);
        if (rc < 0)
            goto err_release_plan;
    }
    /* Reserve task slots. */
    pthread_mutex_lock(&b->lock);
    if (b->count + n > b->capacity) {
        size_t cap = b->capacity, used = b->count;
        pthread_mutex_unlock(&b->lock);
        rc = crb_error(CR_ERR_TOO_MANY_REQUESTS,
                       "batch holds %zu of %zu tasks; %zu more do not fit", used, cap, n);
        goto err_release_plan;
    }
    size_t first = b->count;
    b->count += n;
    b->unfinished += n;
    atomic_store(&b->pending_hint, b->unfinished);
    for (size_t i = 0; i < n; i++) {
        cre_task *t = &b->tasks[first + i];
        t->batch = b;
        t->opcode = reqs[i].opcode & ~CR_OP_LOCAL_UNREGISTERED;
        t->local = reqs[i].local_addr;
        t->remote_addr = reqs[i].remote_addr;
        t->length = reqs[i].length;
        t->alone = first == 0 && n == 1;
        t->local_buf = plan[i].route.local_buf;
        t->tp = NULL;
        atomic_store(&t->error, 0);
        atomic_store(&t->done_bytes, 0);
        atomic_store(&t->canceled, false);
        atomic_store(&t->state, CR_TASK_WAITING);
    }
    pthread_mutex_unlock(&b->lock);

    /* Transports with submit_flush start a run of tasks to one peer once
     * the whole run is queued (tcp: one send for a batch of small requests). */
    cre_tp *run_tp = NULL;
    cre_peer *run_peer = NULL;
    for (size_t i = 0; i < n; i++) {
        cre_task *t = &b->tasks[first + i];
        cre_peer *peer = plan[i].route.peer;
        int src = start_task(e, &plan[i], t);
        cre_tp *used = src == 0 ? t->tp : NULL; /* read before t may complete */
        plan_release(&plan[i], true);           /* the task holds the local reference */
        if (src < 0) {
            atomic_store(&t->slices_left, 1);
            cre_task_slice_done(t, src, 0);
        }
        if (run_tp != NULL && (used != run_tp || peer != run_peer))
            run_tp->ops->submit_flush(run_tp, run_peer);
        if (used != run_tp || peer != run_peer) {
            run_tp = used != NULL && used->ops->submit_flush != NULL ? used : NULL;
            run_peer = peer;
        }
    }
    if (run_tp != NULL)
        run_tp->ops->submit_flush(run_tp, run_peer);
    free(plan);
    batch_put(b);
    return 0;

err_release_plan:
    for (size_t i = 0; i < planned_n; i++)
        plan_release(&plan[i], false);
    free(plan);
    batch_put(b);
    return rc;
}

int cr_batch_task_status(cr_engine *e, cr_batch_id id, size_t index, cr_task_status *out)
{
    CRE_CALL(e, "cr_batch_task_status");
    if (e == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "cr_batch_task_status: NULL argument");
    cre_batch *b;
    int rc = batch_get(e, id, &b);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&b->lock);
    if (index >= b->count) {
        size_t count = b->count;
        pthread_mutex_unlock(&b->lock);
        batch_put(b);
        return crb_error(CR_INVALID_PARAMS, "task index %zu but the batch holds %zu tasks", index,
                         count);
    }
    cre_task *t = &b->tasks[index];
    cr_task_status st = {.state = atomic_load(&t->state),
                         .error = atomic_load(&t->error),
                         .transferred_bytes = atomic_load(&t->done_bytes)};
    pthread_mutex_unlock(&b->lock);
    batch_put(b);
    *out = st;
    return 0;
}

int cr_batch_wait(cr_engine *e, cr_batch_id id, int timeout_ms)
{
    CRE_CALL(e, "cr_batch_wait");
    cre_batch *b;
    int rc = batch_get(e, id, &b);
    if (rc < 0)
        return rc;
    struct timespec deadline = crb_deadline_ts(timeout_ms < 0 ? 0 : (uint64_t)timeout_ms);
    uint64_t window = atomic_load_explicit(&b->pending_hint, memory_order_acquire) > 0
                          ? crb_spin_window(&e->batch_spin)
                          : 0;
    if (window > 0) {
        /* Poll a bounded time before sleeping (base/spin.h), so a quick
         * completion needs no wake-up of this thread. */
        uint64_t until = crb_now_ns() + window;
        bool pending;
        for (;;) { /* the time first: a completion seen before `until` was caught */
            uint64_t now = crb_now_ns();
            pending = atomic_load_explicit(&b->pending_hint, memory_order_acquire) > 0;
            if (!pending || now >= until)
                break;
            crb_spin_pause();
        }
        crb_spin_done(&e->batch_spin, !pending);
    }
    pthread_mutex_lock(&b->lock);
    while (b->unfinished > 0) {
        if (atomic_load(&e->shutting_down)) {
            b->users--;
            batch_unlock_and_maybe_destroy(b);
            return crb_error(CR_ERR_SHUTDOWN, "batch wait: the engine is being destroyed");
        }
        if (timeout_ms < 0) {
            pthread_cond_wait(&b->cond, &b->lock);
        } else if (pthread_cond_timedwait(&b->cond, &b->lock, &deadline) != 0 &&
                   b->unfinished > 0) {
            size_t left = b->unfinished;
            b->users--;
            batch_unlock_and_maybe_destroy(b);
            return crb_error(CR_ERR_TIMEOUT, "%zu tasks still running after %d ms", left,
                             timeout_ms);
        }
    }
    rc = 0;
    for (size_t i = 0; i < b->count && rc == 0; i++) {
        int err = atomic_load(&b->tasks[i].error);
        if (err != 0)
            rc = crb_error(err, "task %zu of the batch failed: %s", i,
                           b->caller_error[0] ? b->caller_error : cr_strerror(err));
    }
    b->users--;
    batch_unlock_and_maybe_destroy(b);
    return rc;
}

int cr_batch_cancel(cr_engine *e, cr_batch_id id)
{
    CRE_CALL(e, "cr_batch_cancel");
    cre_batch *b;
    int rc = batch_get(e, id, &b);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&b->lock);
    for (size_t i = 0; i < b->count; i++)
        atomic_store(&b->tasks[i].canceled, true);
    pthread_mutex_unlock(&b->lock);
    /* Transports drop unstarted work of canceled tasks on their next pass. */
    for (size_t i = 0; i < e->n_tps; i++)
        if (e->tps[i].ops->cancel != NULL)
            e->tps[i].ops->cancel(&e->tps[i]);
    batch_put(b);
    return 0;
}

int cr_batch_free(cr_engine *e, cr_batch_id id)
{
    CRE_CALL(e, "cr_batch_free");
    pthread_mutex_lock(&e->batches.lock);
    cre_batch *b = cre_handles_remove_locked(&e->batches, id);
    if (b == NULL) {
        pthread_mutex_unlock(&e->batches.lock);
        return crb_error(CR_ERR_INVALID_HANDLE, "batch id 0x%llx is stale or invalid",
                         (unsigned long long)id);
    }
    pthread_mutex_lock(&b->lock);
    pthread_mutex_unlock(&e->batches.lock);
    b->freed = true;
    batch_unlock_and_maybe_destroy(b);
    return 0;
}

static int sync_timeout(cr_engine *e, int timeout_ms)
{
    if (timeout_ms > 0)
        return timeout_ms;
    return (int)(e->request_timeout_ms + e->connect_timeout_ms + 1000);
}

/* Has a refusal marked our descriptor of segment's peer stale (a same-host copy found the
 * buffer it names unregistered)? Peers live as long as the engine. */
static bool desc_marked_stale(cr_engine *e, cr_segment_handle segment)
{
    cre_peer *p;
    if (cre_segment_lookup(e, segment, &p) < 0)
        return false;
    pthread_mutex_lock(&p->lock);
    bool stale = p->desc_stale;
    pthread_mutex_unlock(&p->lock);
    return stale;
}

int cr_engine_transfer_sync_batch(cr_engine *e, int opcode, cr_segment_handle segment,
                                  void *const *local_addrs, const uint64_t *remote_addrs,
                                  const uint64_t *lengths, size_t n, int timeout_ms)
{
    CRE_CALL(e, "cr_engine_transfer_sync_batch");
    if (n == 0)
        return 0;
    if (local_addrs == NULL || remote_addrs == NULL || lengths == NULL)
        return crb_error(CR_INVALID_PARAMS, "transfer_sync_batch: NULL array");
    cr_transfer_request *reqs = calloc(n, sizeof(*reqs));
    if (reqs == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "transfer_sync_batch of %zu", n);
    for (size_t i = 0; i < n; i++)
        reqs[i] =
            (cr_transfer_request){opcode, local_addrs[i], segment, remote_addrs[i], lengths[i]};
    /* This thread waits for its tasks right away: a transport may carry a
     * lone task on this thread, within the caller's timeout. A batch that met
     * an unregistered remote buffer runs once more when the refusal marked our
     * descriptor of the peer stale (a same-host copy found the buffer it names
     * gone; the peer may have registered a new buffer at that address): the
     * second run fetches the descriptor again, and moving the same bytes twice
     * is harmless. A refusal by the peer itself (tcp) is final. */
    uint64_t deadline = crb_now_ns() + (uint64_t)sync_timeout(e, timeout_ms) * 1000000ull;
    int rc = CR_ERR_ADDRESS_NOT_REGISTERED;
    for (int run = 0; run < 2 && rc == CR_ERR_ADDRESS_NOT_REGISTERED &&
                      (run == 0 || desc_marked_stale(e, segment));
         run++) {
        cr_batch_id id;
        rc = batch_create(e, n, CR_BATCH_CALLER_WAITS, deadline, &id);
        if (rc < 0)
            break;
        rc = cr_batch_submit(e, id, reqs, n);
        if (rc == 0) {
            rc = cr_batch_wait(e, id, sync_timeout(e, timeout_ms));
            if (rc == CR_ERR_TIMEOUT)
                cr_batch_cancel(e, id);
        }
        cr_batch_free(e, id);
    }
    free(reqs);
    return rc;
}

int cr_engine_transfer_sync(cr_engine *e, int opcode, void *local_addr, cr_segment_handle segment,
                            uint64_t remote_addr, uint64_t length, int timeout_ms)
{
    return cr_engine_transfer_sync_batch(e, opcode, segment, &local_addr, &remote_addr, &length, 1,
                                         timeout_ms);
}
