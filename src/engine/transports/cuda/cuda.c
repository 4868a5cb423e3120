/*
 * cuda.c - the cuda transport's ops table (docs/gpu.md).
 *
 * It owns CR_MEM_CUDA: installed with every protocol (transport.h), it
 * loads the driver at engine creation (declining, and so leaving device
 * memory to be refused at submit, when libcuda.so.1 is absent), settles
 * the kind of every registration (classify), and offers the stager that tcp
 * uses on both of its sides. With "auto" and "shm" it also moves data
 * itself: device <-> host and device <-> device in this process, CUDA IPC
 * to same-host peers' device memory, and device memory against a
 * same-host peer's shared host memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "engine/transports/cuda/cuda.h"

cuda_engine *cuda_of(cre_tp *tp)
{
    return tp->priv;
}

static int cuda_init(cre_tp *tp, bool explicit_choice)
{
    cuda_engine *ce = tp->priv;
    ce->tp = tp;
    int rc = crv_driver_open(&ce->drv);
    if (rc < 0) {
        ce->drv = NULL;
        if (explicit_choice)
            return rc;
        return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED,
                         "no CUDA: %s; device memory will be refused at submit",
                         cr_last_error_message());
    }
    pthread_mutex_init(&ce->lock, NULL);
    cr_engine *e = tp->engine;
    ce->n_workers = e->n_workers;
    ce->workers = calloc(e->n_workers, sizeof(*ce->workers));
    if (ce->workers == NULL) {
        pthread_mutex_destroy(&ce->lock);
        crv_driver_close(ce->drv);
        ce->drv = NULL;
        return crb_error(CR_ERR_NO_MEMORY, "cuda: per-worker state");
    }
    for (uint32_t i = 0; i < e->n_workers; i++) {
        pthread_mutex_init(&ce->workers[i].lock, NULL);
        ce->workers[i].w = &e->workers[i];
    }
    if (!tp->kind_only) {
        rc = cre_ctl_init(&ce->ctl);
        if (rc == 0) {
            ce->ctl_ready = true;
            rc = cuda_service_start(tp);
        }
        if (rc < 0) {
            if (ce->ctl_ready)
                cre_ctl_fini(&ce->ctl);
            ce->ctl_ready = false;
            for (uint32_t i = 0; i < ce->n_workers; i++)
                pthread_mutex_destroy(&ce->workers[i].lock);
            free(ce->workers);
            ce->workers = NULL;
            pthread_mutex_destroy(&ce->lock);
            crv_driver_close(ce->drv);
            ce->drv = NULL;
            return rc;
        }
    }
    return 0;
}

static void cuda_fini(cre_tp *tp)
{
    cuda_engine *ce = tp->priv;
    if (ce->drv == NULL)
        return;
    crv_driver *d = ce->drv;
    /* destroy runs on the caller's thread: leave its context as it was */
    crv_saved saved;
    bool pushed = crv_push(d, 0, &saved) == 0;
    cuda_drain(ce); /* workers have stopped: finish what is still on the streams */
    cuda_service_stop(tp);
    cuda_stages_free(ce);
    for (int dev = 0; dev < d->n_devices; dev++) {
        bool any = ce->n_events[dev] > 0;
        for (int s = 0; s < CUDA_SLOTS; s++)
            any |= ce->streams[dev][s] != NULL;
        if (!any)
            continue;
        if (crv_bind(d, dev) < 0)
            continue;
        for (int s = 0; s < CUDA_SLOTS; s++)
            if (ce->streams[dev][s] != NULL) {
                d->stream_synchronize(ce->streams[dev][s]);
                d->stream_destroy(ce->streams[dev][s]);
            }
        for (size_t i = 0; i < ce->n_events[dev]; i++)
            d->event_destroy(ce->events[dev][i]);
        free(ce->events[dev]);
    }
    if (pushed)
        crv_pop(d, &saved);
    if (ce->ctl_ready)
        cre_ctl_fini(&ce->ctl);
    for (uint32_t i = 0; i < ce->n_workers; i++)
        pthread_mutex_destroy(&ce->workers[i].lock);
    free(ce->workers);
    ce->workers = NULL;
    pthread_mutex_destroy(&ce->lock);
    crv_driver_close(d);
    ce->drv = NULL;
}

static int cuda_endpoint(cre_tp *tp, crp_buf *out)
{
    cuda_engine *ce = tp->priv;
    return ce->svc.address[0] ? crp_buf_append(out, ce->svc.address, strlen(ce->svc.address)) : 0;
}

/* Settle b's kind. "*" (detect): device memory becomes cuda:N; anything
 * else the driver says stays host (managed memory is CPU-accessible and
 * is moved as host memory). An explicit location must match. */
static int cuda_classify(cre_tp *tp, cre_buffer *b, bool detect)
{
    cuda_engine *ce = tp->priv;
    crv_ptr_info in;
    int rc = crv_classify_range(ce->drv, b->addr, b->length, &in);
    if (rc < 0)
        return rc;
    bool device = in.type == CRV_MEM_DEVICE;
    if (detect) {
        if (device) {
            b->kind = CR_MEM_CUDA;
            b->device = in.device;
        }
        return 0;
    }
    if (b->kind == CR_MEM_CUDA && !device)
        return crb_error(CR_ERR_MEMORY_KIND_MISMATCH,
                         "location cuda:%d, but [0x%llx, +%llu) is %s memory", b->device,
                         (unsigned long long)b->addr, (unsigned long long)b->length,
                         crv_mem_type_name(in.type));
    if (b->kind == CR_MEM_CUDA && in.device != b->device)
        return crb_error(CR_ERR_MEMORY_KIND_MISMATCH,
                         "location cuda:%d, but [0x%llx, +%llu) is memory of cuda:%d (device "
                         "ordinals as this process sees them)",
                         b->device, (unsigned long long)b->addr, (unsigned long long)b->length,
                         in.device);
    if (cre_kind_is_host(b->kind) && device)
        return crb_error(CR_ERR_MEMORY_KIND_MISMATCH,
                         "a cpu location, but [0x%llx, +%llu) is device memory of cuda:%d (use "
                         "\"cuda:%d\" or \"*\")",
                         (unsigned long long)b->addr, (unsigned long long)b->length, in.device,
                         in.device);
    return 0;
}

static int cuda_reg(cre_tp *tp, cre_buffer *b, crp_buf *blob)
{
    cuda_engine *ce = tp->priv;
    crv_ptr_info in;
    int rc = crv_classify_range(ce->drv, b->addr, b->length, &in);
    if (rc < 0)
        return rc;
    cuda_buffer *cb = calloc(1, sizeof(*cb));
    if (cb == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "cuda state of a buffer");
    cb->pinned = in.type == CRV_MEM_PINNED;
    cb->share = in.share;
    if (b->kind == CR_MEM_CUDA && b->remote_accessible && ce->ctl_ready) {
        rc = cre_ctl_acquire(&ce->ctl, &cb->ctl_slot, &cb->ctl_gen);
        if (rc < 0) {
            free(cb);
            return rc;
        }
        cuda_blob bl = {.share = (uint8_t)in.share,
                        .device = (uint16_t)b->device,
                        .ctl_slot = cb->ctl_slot,
                        .ctl_gen = cb->ctl_gen};
        memcpy(bl.uuid, ce->drv->uuids[b->device].bytes, 16);
        uint8_t raw[CUDA_BLOB_SIZE];
        cuda_blob_encode(&bl, raw);
        rc = crp_buf_append(blob, raw, sizeof(raw));
        if (rc < 0) {
            cre_ctl_retire(&ce->ctl, cb->ctl_slot, 0);
            free(cb);
            return rc;
        }
    }
    b->tp_state[tp->index] = cb;
    return 0;
}

/* Fence peers' IPC copies out of the buffer (bounded by the request
 * timeout), then forget it. Peers drop their imports of it when its
 * descriptor entry disappears (desc_parse prunes). */
static void cuda_dereg(cre_tp *tp, cre_buffer *b)
{
    cuda_engine *ce = tp->priv;
    cuda_buffer *cb = b->tp_state[tp->index];
    if (cb == NULL)
        return;
    if (cb->ctl_gen != 0)
        cre_ctl_retire(&ce->ctl, cb->ctl_slot, tp->engine->request_timeout_ms);
    free(cb);
    b->tp_state[tp->index] = NULL;
}

static int cuda_peer_init_op(cre_tp *tp, cre_peer *p, void *pp)
{
    cuda_peer_init(pp, tp->engine, p);
    return 0;
}

static void cuda_peer_fini_op(cre_tp *tp, cre_peer *p, void *pp)
{
    cuda_engine *ce = tp->priv;
    if (ce->drv != NULL) {
        /* engine teardown, workers stopped: copies holding this peer's
         * imports finish first (on the caller's thread: keep its context) */
        crv_saved saved;
        bool pushed = crv_push(ce->drv, 0, &saved) == 0;
        cuda_drain(ce);
        if (pushed)
            crv_pop(ce->drv, &saved);
    }
    cuda_peer_fini(pp);
}

static void cuda_peer_reset_op(cre_tp *tp, cre_peer *p, void *pp)
{
    cuda_peer_drop(pp);
}

static void cuda_desc_free(cre_tp *tp, void *state)
{
    cuda_desc *d = state;
    free(d->bufs);
    free(d->has);
    free(d);
}

static void *cuda_desc_parse(cre_tp *tp, cre_peer *p, const crp_descriptor *d)
{
    cuda_desc *cd = calloc(1, sizeof(*cd));
    if (cd == NULL)
        return NULL;
    size_t n = d->n_buffers ? d->n_buffers : 1;
    cd->bufs = calloc(n, sizeof(*cd->bufs));
    cd->has = calloc(n, sizeof(*cd->has));
    if (cd->bufs == NULL || cd->has == NULL) {
        cuda_desc_free(tp, cd);
        return NULL;
    }
    cd->n = d->n_buffers;
    for (size_t i = 0; i < d->n_buffers; i++) {
        size_t len = 0;
        const uint8_t *x = crp_buffer_blob(&d->buffers[i], "cuda", &len);
        if (x != NULL && d->buffers[i].kind == CR_MEM_CUDA &&
            cuda_blob_decode(x, len, &cd->bufs[i]) == 0)
            cd->has[i] = true;
    }
    const crp_endpoint *ep = crp_descriptor_endpoint(d, "cuda");
    if (ep != NULL && ep->address_len < sizeof(cd->address) && ep->address_len > 1 &&
        ep->address[0] == '@') {
        memcpy(cd->address, ep->address, ep->address_len);
        cd->address[ep->address_len] = '\0';
        int pid = 0;
        cd->same_process = sscanf(cd->address, "@crescent-cuda-%d-", &pid) == 1 && pid == getpid();
    }
    if (!p->is_self)
        cuda_peer_prune(cre_peer_tp(p, tp), d);
    return cd;
}

static bool involves_device(const cre_route *r)
{
    return r->local_kind == CR_MEM_CUDA || r->remote_kind == CR_MEM_CUDA;
}

static bool servable_kind(int kind)
{
    return kind == CR_MEM_CUDA || cre_kind_is_host(kind);
}

static bool cuda_can_serve(cre_tp *tp, const cre_route *r)
{
    cuda_engine *ce = tp->priv;
    if (ce->drv == NULL || !involves_device(r) || !servable_kind(r->local_kind) ||
        !servable_kind(r->remote_kind))
        return false;
    if (r->self_target != NULL)
        return true;
    if (!r->same_host)
        return false;
    if (r->remote_kind == CR_MEM_CUDA)
        return cuda_can_ipc(tp, r);
    return cuda_can_shm_host(tp, r);
}

static int cuda_submit(cre_tp *tp, const cre_route *r, cre_task *t)
{
    if (r->self_target != NULL)
        return cuda_submit_local(tp, r, t);
    if (r->remote_kind == CR_MEM_CUDA)
        return cuda_submit_ipc(tp, r, t);
    return cuda_submit_shm_host(tp, r, t);
}

static size_t cuda_counters(cre_tp *tp, cr_engine_counter *out, size_t cap)
{
    cuda_engine *ce = tp->priv;
    cr_engine_counter c[] = {
        {"cuda", "bytes_d2d", atomic_load(&ce->bytes_d2d)},
        {"cuda", "bytes_d2h", atomic_load(&ce->bytes_d2h)},
        {"cuda", "bytes_h2d", atomic_load(&ce->bytes_h2d)},
        {"cuda", "bytes_ipc", atomic_load(&ce->bytes_ipc)},
        {"cuda", "bytes_bounced", atomic_load(&ce->bytes_bounce)},
        {"cuda", "bytes_staged_out", atomic_load(&ce->bytes_staged_out)},
        {"cuda", "bytes_staged_in", atomic_load(&ce->bytes_staged_in)},
        {"cuda", "ipc_imports", atomic_load(&ce->imports)},
        {"cuda", "ipc_exports", atomic_load(&ce->exports)},
        {"cuda", "driver_loaded", ce->drv != NULL},
    };
    size_t n = sizeof(c) / sizeof(c[0]);
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = c[i];
    return n;
}

const cre_transport_ops cre_transport_cuda = {
    .name = "cuda",
    .rank = 20,
    .reach = CRE_REACH_PROCESS | CRE_REACH_HOST,
    .engine_size = sizeof(cuda_engine),
    .peer_size = sizeof(cuda_peer),
    .init = cuda_init,
    .fini = cuda_fini,
    .endpoint = cuda_endpoint,
    .reg = cuda_reg,
    .dereg = cuda_dereg,
    .peer_init = cuda_peer_init_op,
    .peer_fini = cuda_peer_fini_op,
    .desc_parse = cuda_desc_parse,
    .desc_free = cuda_desc_free,
    .peer_reset = cuda_peer_reset_op,
    .can_serve = cuda_can_serve,
    .submit = cuda_submit,
    .tick = cuda_complete_tick,
    .counters = cuda_counters,
    .kinds = 1u << CR_MEM_CUDA,
    .classify = cuda_classify,
    .stager = &cuda_stager_ops,
};
