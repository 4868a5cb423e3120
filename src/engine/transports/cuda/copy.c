/*
 * copy.c - the cuda transport's copies in this process and against a
 * same-host peer's shared host memory.
 *
 * Direct copies (device memory, pinned host memory, imported peer memory)
 * are one cuMemcpyAsync on one of CUDA_SLOTS streams of the device, chosen
 * round-robin, followed by an event on that stream: the task completes
 * when the event has fired (cuEventSynchronize with blocking sync: the
 * waiting thread sleeps). Pageable host memory is bounced through a
 * stage's pinned windows (stage.c), the CPU copy of one window overlapping
 * the DMA of the next.
 *
 * These run on the submitting thread, bracketed by crv_push/crv_pop so the
 * caller's own CUDA context is left as it was; they block for the copy
 * (like the shm transport's memcpy), never on the network.
 */
#include <string.h>

#include "base/error.h"
#include "engine/transports/cuda/cuda.h"
#include "engine/transports/shm/shm.h"

/* Stream `slot` of `device` (context current). */
static int stream_for(cuda_engine *ce, int device, unsigned slot, CUstream *out)
{
    crv_driver *d = ce->drv;
    pthread_mutex_lock(&ce->lock);
    int rc = 0;
    if (ce->streams[device][slot] == NULL)
        rc = crv_check(d, d->stream_create(&ce->streams[device][slot], CU_STREAM_NON_BLOCKING),
                       "cuStreamCreate");
    CUstream s = ce->streams[device][slot];
    pthread_mutex_unlock(&ce->lock);
    if (rc == 0)
        *out = s;
    return rc;
}

static int event_get(cuda_engine *ce, int device, CUevent *out)
{
    pthread_mutex_lock(&ce->lock);
    if (ce->n_events[device] > 0) {
        *out = ce->events[device][--ce->n_events[device]];
        pthread_mutex_unlock(&ce->lock);
        return 0;
    }
    pthread_mutex_unlock(&ce->lock);
    crv_driver *d = ce->drv;
    return crv_check(d, d->event_create(out, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC),
                     "cuEventCreate");
}

static void event_put(cuda_engine *ce, int device, CUevent ev)
{
    pthread_mutex_lock(&ce->lock);
    if (ce->n_events[device] == ce->cap_events[device]) {
        size_t ncap = ce->cap_events[device] ? ce->cap_events[device] * 2 : 8;
        CUevent *n = realloc(ce->events[device], ncap * sizeof(*n));
        if (n == NULL) {
            pthread_mutex_unlock(&ce->lock);
            ce->drv->event_destroy(ev);
            return;
        }
        ce->events[device] = n;
        ce->cap_events[device] = ncap;
    }
    ce->events[device][ce->n_events[device]++] = ev;
    pthread_mutex_unlock(&ce->lock);
}

/* --- asynchronous completion ---------------------------------------------
 * A direct copy is issued on the stream of worker k (k round-robin), its
 * event recorded after it, and a host function on the same stream kicks
 * worker k, whose tick completes, in issue order, every entry whose event
 * has fired. The submitting thread does not wait. */

static void wake_worker(void *data)
{
    cuda_worker *cw = data; /* runs on a CUDA thread: only wake the loop */
    cre_worker_kick(cw->w);
}

int cuda_issue(cuda_engine *ce, int device, uint64_t dst, uint64_t src, uint64_t n, cuda_pending *p)
{
    crv_driver *d = ce->drv;
    unsigned k = atomic_fetch_add(&ce->next_slot, 1) % ce->n_workers;
    cuda_worker *cw = &ce->workers[k];
    CUstream s = NULL;
    CUevent ev;
    int rc = stream_for(ce, device, k % CUDA_SLOTS, &s);
    if (rc < 0)
        return rc;
    rc = event_get(ce, device, &ev);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&cw->lock);
    rc = crv_check(d, d->memcpy_async(dst, src, n, s), "cuMemcpyAsync");
    if (rc == 0)
        rc = crv_check(d, d->event_record(ev, s), "cuEventRecord");
    if (rc == 0 && d->launch_host_func != NULL)
        d->launch_host_func(s, wake_worker, cw); /* without it the 20 ms tick polls */
    if (rc == 0) {
        p->ev = ev;
        p->device = device;
        p->bytes = n;
        p->next = NULL;
        if (cw->tail)
            cw->tail->next = p;
        else
            cw->head = p;
        cw->tail = p;
    }
    pthread_mutex_unlock(&cw->lock);
    if (rc < 0) {
        d->event_synchronize(ev); /* a half-issued copy: let it settle */
        event_put(ce, device, ev);
    }
    return rc;
}

static void pending_finish(cuda_engine *ce, cuda_pending *p, int status)
{
    if (p->slot != NULL && !cre_ctl_leave(p->slot, p->gen) && status == 0)
        status = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                           "the peer unregistered device buffer 0x%llx during the copy",
                           (unsigned long long)p->addr);
    if (p->cp != NULL)
        cuda_peer_release(p->cp, p->im, status == CR_ERR_ADDRESS_NOT_REGISTERED);
    event_put(ce, p->device, p->ev);
    if (status == 0) {
        atomic_fetch_add(p->kind_counter, p->bytes);
        if (p->ipc)
            atomic_fetch_add(&ce->bytes_ipc, p->bytes);
    }
    cre_task_slice_done(p->t, status, status == 0 ? p->bytes : 0);
    free(p);
}

void cuda_complete_tick(cre_tp *tp, cre_worker *w, uint64_t now_ns)
{
    cuda_engine *ce = tp->priv;
    cuda_service_tick(tp, w, now_ns);
    if (ce->drv == NULL || ce->workers == NULL || (uint32_t)w->index >= ce->n_workers)
        return;
    cuda_worker *cw = &ce->workers[w->index];
    crv_driver *d = ce->drv;
    for (;;) {
        pthread_mutex_lock(&cw->lock);
        cuda_pending *p = cw->head;
        CUresult q = CUDA_ERROR_NOT_READY;
        if (p != NULL && crv_bind(d, p->device) == 0)
            q = d->event_query(p->ev);
        if (p == NULL || q == CUDA_ERROR_NOT_READY) {
            pthread_mutex_unlock(&cw->lock);
            return;
        }
        cw->head = p->next;
        if (cw->head == NULL)
            cw->tail = NULL;
        pthread_mutex_unlock(&cw->lock);
        pending_finish(ce, p, crv_check(d, q, "a device copy"));
    }
}

void cuda_drain(cuda_engine *ce)
{
    if (ce->workers == NULL)
        return;
    crv_driver *d = ce->drv;
    for (uint32_t k = 0; k < ce->n_workers; k++) {
        cuda_worker *cw = &ce->workers[k];
        for (;;) {
            pthread_mutex_lock(&cw->lock);
            cuda_pending *p = cw->head;
            if (p != NULL) {
                cw->head = p->next;
                if (cw->head == NULL)
                    cw->tail = NULL;
            }
            pthread_mutex_unlock(&cw->lock);
            if (p == NULL)
                break;
            pending_finish(ce, p, crv_check(d, d->event_synchronize(p->ev), "a device copy"));
        }
    }
}

int cuda_copy(cuda_engine *ce, int device, uint64_t dst, uint64_t src, uint64_t n)
{
    crv_driver *d = ce->drv;
    CUstream s = NULL;
    CUevent ev;
    int rc = stream_for(ce, device, atomic_fetch_add(&ce->next_slot, 1) % CUDA_SLOTS, &s);
    if (rc < 0)
        return rc;
    rc = event_get(ce, device, &ev);
    if (rc < 0)
        return rc;
    rc = crv_check(d, d->memcpy_async(dst, src, n, s), "cuMemcpyAsync");
    if (rc == 0)
        rc = crv_check(d, d->event_record(ev, s), "cuEventRecord");
    if (rc == 0)
        rc = crv_check(d, d->event_synchronize(ev), "waiting for a copy");
    event_put(ce, device, ev);
    return rc;
}

int cuda_bounce(cuda_engine *ce, int device, bool to_device, uint64_t dev, uint8_t *host,
                uint64_t n)
{
    cre_stage *st;
    int rc = cuda_stage_get(ce, &st);
    if (rc < 0)
        return rc;
    const cre_stager_ops *o = &cuda_stager_ops;
    st->bounce = true;
    if (to_device) {
        rc = o->in_begin(st, device, dev, n);
        uint64_t off = 0;
        while (rc == 0 && off < n) {
            uint8_t *w;
            size_t len;
            rc = o->in_window(st, &w, &len);
            if (rc == 0) {
                memcpy(w, host + off, len);
                rc = o->in_commit(st, len);
                off += len;
            }
        }
        if (rc == 0)
            rc = o->in_finish(st);
    } else {
        rc = o->out_begin(st, device, dev, n);
        uint64_t off = 0;
        while (rc == 0 && off < n) {
            const uint8_t *w;
            size_t len;
            rc = o->out_next(st, &w, &len);
            if (rc == 0) {
                memcpy(host + off, w, len);
                off += len;
            }
        }
    }
    if (rc == 0)
        atomic_fetch_add(&ce->bytes_bounce, n);
    cuda_stage_put(ce, st);
    return rc;
}

static void count(cuda_engine *ce, bool dst_dev, bool src_dev, uint64_t n)
{
    atomic_fetch_add(dst_dev && src_dev ? &ce->bytes_d2d
                     : dst_dev          ? &ce->bytes_h2d
                                        : &ce->bytes_d2h,
                     n);
}

/* Move n bytes from src to dst, either of which may be device memory; a
 * host side that is not pinned is bounced. The device's context is
 * current. */
static int move(cuda_engine *ce, int device, uint64_t dst, bool dst_dev, bool dst_pinned,
                uint64_t src, bool src_dev, bool src_pinned, uint64_t n)
{
    int rc;
    if (dst_dev && !src_dev && !src_pinned)
        rc = cuda_bounce(ce, device, true, dst, (uint8_t *)(uintptr_t)src, n);
    else if (src_dev && !dst_dev && !dst_pinned)
        rc = cuda_bounce(ce, device, false, src, (uint8_t *)(uintptr_t)dst, n);
    else
        rc = cuda_copy(ce, device, dst, src, n);
    if (rc == 0)
        count(ce, dst_dev, src_dev, n);
    return rc;
}

static bool pinned_of(const cre_tp *tp, const cre_buffer *b)
{
    const cuda_buffer *cb = b->tp_state[tp->index];
    return cb != NULL && cb->pinned;
}

int cuda_submit_local(cre_tp *tp, const cre_route *r, cre_task *t)
{
    cuda_engine *ce = tp->priv;
    bool local_dev = r->local_kind == CR_MEM_CUDA, remote_dev = r->remote_kind == CR_MEM_CUDA;
    bool local_pin = pinned_of(tp, r->local_buf), remote_pin = pinned_of(tp, r->self_target);
    int device = local_dev ? r->local_device : r->remote_device;
    uint64_t local = (uint64_t)(uintptr_t)t->local;
    crv_saved saved;
    int rc = crv_push(ce->drv, device, &saved);
    bool dst_dev = t->opcode == CR_OP_WRITE ? remote_dev : local_dev;
    bool src_dev = t->opcode == CR_OP_WRITE ? local_dev : remote_dev;
    bool direct = (local_dev || local_pin) && (remote_dev || remote_pin);
    if (rc == 0 && direct) {
        /* both ends reachable by the copy engine: asynchronous */
        atomic_store(&t->slices_left, 1);
        cuda_pending *p = calloc(1, sizeof(*p));
        if (p == NULL)
            rc = crb_error(CR_ERR_NO_MEMORY, "a pending copy");
        if (p != NULL) {
            p->t = t;
            p->kind_counter = dst_dev && src_dev ? &ce->bytes_d2d
                              : dst_dev          ? &ce->bytes_h2d
                                                 : &ce->bytes_d2h;
            rc = t->opcode == CR_OP_WRITE
                     ? cuda_issue(ce, device, t->remote_addr, local, t->length, p)
                     : cuda_issue(ce, device, local, t->remote_addr, t->length, p);
            if (rc < 0)
                free(p);
        }
        crv_pop(ce->drv, &saved);
        if (rc < 0)
            cre_task_slice_done(t, rc, 0);
        return 0;
    }
    if (rc == 0) {
        if (t->opcode == CR_OP_WRITE)
            rc = move(ce, device, t->remote_addr, remote_dev, remote_pin, local, local_dev,
                      local_pin, t->length);
        else
            rc = move(ce, device, local, local_dev, local_pin, t->remote_addr, remote_dev,
                      remote_pin, t->length);
    }
    crv_pop(ce->drv, &saved);
    atomic_store(&t->slices_left, 1);
    cre_task_slice_done(t, rc, rc == 0 ? t->length : 0);
    return 0;
}

/* --- device memory against a same-host peer's shared host memory ---------
 * The shm transport has mapped the peer's memfd (its region and control
 * page); we copy between that mapping (pageable: bounced) and our device
 * buffer under the same fence shm uses (ctl_page.h). */

static const shm_remote *shm_remote_of(cre_tp *shm_tp, const cre_route *r, const shm_desc **sd)
{
    const shm_desc *d = cre_route_state(r, shm_tp);
    if (d == NULL || r->remote_index >= d->n)
        return NULL;
    *sd = d;
    return &d->bufs[r->remote_index];
}

bool cuda_can_shm_host(cre_tp *tp, const cre_route *r)
{
    cre_tp *shm_tp = cre_shm_tp(tp->engine);
    if (shm_tp == NULL || shm_tp->kind_only || r->local_kind != CR_MEM_CUDA ||
        r->remote_kind != CR_MEM_HOST_SHAREABLE)
        return false;
    const shm_desc *sd = NULL;
    const shm_remote *rb = shm_remote_of(shm_tp, r, &sd);
    cre_peer_local *l = cre_peer_tp(r->peer, shm_tp);
    return rb != NULL && sd->address[0] != '\0' && !atomic_load(&l->refused) &&
           rb->shared_id != 0 && rb->ctl_gen != 0;
}

int cuda_submit_shm_host(cre_tp *tp, const cre_route *r, cre_task *t)
{
    cuda_engine *ce = tp->priv;
    cre_tp *shm_tp = cre_shm_tp(tp->engine);
    const shm_desc *sd = NULL;
    const shm_remote *rb = shm_remote_of(shm_tp, r, &sd);
    cre_peer_local *l = cre_peer_tp(r->peer, shm_tp);
    int rc = rb != NULL ? cre_peer_local_map(l, sd->address, rb->shared_id) : CR_ERR_CONNECTION;
    if (rc == CR_ERR_AUTH_FAILED || rc == CR_ERR_PEER_UNREACHABLE)
        return CR_ERR_TRANSPORT_UNSUPPORTED; /* the next path (tcp staging) takes it */
    if (rc < 0)
        return rc;
    uint64_t offset = rb->shared_offset + (t->remote_addr - r->remote_base);
    crv_saved saved;
    int status = crv_push(ce->drv, r->local_device, &saved);
    pthread_rwlock_rdlock(&l->map_lock);
    uint64_t size = 0;
    uint8_t *base = cre_peer_local_find_locked(l, rb->shared_id, &size);
    cre_ctl_slot *slot = l->ctl != NULL ? &l->ctl[rb->ctl_slot] : NULL;
    if (status == 0 && (base == NULL || slot == NULL || offset > size || t->length > size - offset))
        status = crb_error(CR_ERR_CONNECTION,
                           "shared region %llu of %s is gone or smaller than the descriptor says",
                           (unsigned long long)rb->shared_id, r->peer->name);
    if (status == 0 && !cre_ctl_enter(slot, rb->ctl_gen)) {
        cre_peer_mark_stale(r->peer); /* a new buffer may sit there now: fetch it again */
        status = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                           "%s unregistered buffer 0x%llx before the copy started", r->peer->name,
                           (unsigned long long)r->remote_base);
    } else if (status == 0) {
        uint64_t dev = (uint64_t)(uintptr_t)t->local;
        bool to_device = t->opcode == CR_OP_READ;
        status = cuda_bounce(ce, r->local_device, to_device, dev, base + offset, t->length);
        if (status == 0)
            count(ce, to_device, !to_device, t->length);
        if (!cre_ctl_leave(slot, rb->ctl_gen) && status == 0)
            status = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                               "%s unregistered buffer 0x%llx during the copy", r->peer->name,
                               (unsigned long long)r->remote_base);
    }
    pthread_rwlock_unlock(&l->map_lock);
    crv_pop(ce->drv, &saved);
    if (status == CR_ERR_ADDRESS_NOT_REGISTERED)
        cre_peer_local_unmap(l, rb->shared_id);
    atomic_store(&t->slices_left, 1);
    cre_task_slice_done(t, status, status == 0 ? t->length : 0);
    return 0;
}
