/*
 * stage.c - the stager (transport.h): device memory moved through two
 * pinned host windows per stream, so that the copy engine fills (or
 * drains) one window while the caller sends (or receives) the other.
 *
 * Windows are CUDA_WINDOW bytes of cuMemHostAlloc(PORTABLE) memory, so a
 * stage can serve any device; its stream and events belong to one device
 * and are remade when a transfer on another device begins. Stages are
 * pooled per engine (pinning memory is slow); a lane or a served
 * connection keeps one while it lives, the bounce paths borrow one per
 * transfer. Every call binds the stage's device context on the calling
 * thread first (the caller's own context is restored by the caller's
 * crv_push/crv_pop bracket where the thread is not ours).
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/transports/cuda/cuda.h"

static void stage_release_device(cre_stage *st)
{
    crv_driver *d = st->ce->drv;
    if (st->device < 0)
        return;
    if (crv_bind(d, st->device) == 0) {
        if (st->stream != NULL) {
            d->stream_synchronize(st->stream);
            d->stream_destroy(st->stream);
        }
        for (int i = 0; i < 2; i++)
            if (st->ev[i] != NULL)
                d->event_destroy(st->ev[i]);
    }
    st->stream = NULL;
    st->ev[0] = st->ev[1] = NULL;
    st->busy[0] = st->busy[1] = false;
    st->device = -1;
}

static void stage_destroy(cre_stage *st)
{
    crv_driver *d = st->ce->drv;
    stage_release_device(st);
    for (int i = 0; i < 2; i++)
        if (st->win[i] != NULL)
            d->mem_free_host(st->win[i]);
    free(st);
}

/* Bind st's device, (re)making its stream and events for `device`. */
static int stage_use(cre_stage *st, int device)
{
    crv_driver *d = st->ce->drv;
    if (st->device != device)
        stage_release_device(st);
    int rc = crv_bind(d, device);
    if (rc < 0 || st->device == device)
        return rc;
    rc = crv_check(d, d->stream_create(&st->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = crv_check(
            d, d->event_create(&st->ev[i], CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC),
            "cuEventCreate");
    for (int i = 0; i < 2 && rc == 0; i++)
        if (st->win[i] == NULL)
            rc = crv_check(
                d, d->mem_host_alloc((void **)&st->win[i], CUDA_WINDOW, CU_MEMHOSTALLOC_PORTABLE),
                "cuMemHostAlloc (staging window)");
    st->device = device;
    if (rc < 0)
        stage_release_device(st);
    return rc;
}

/* Wait for window i's copy. */
static int stage_wait(cre_stage *st, int i)
{
    if (!st->busy[i])
        return 0;
    st->busy[i] = false;
    return crv_check(st->ce->drv, st->ce->drv->event_synchronize(st->ev[i]),
                     "waiting for a staging copy");
}

static int stage_quiesce(cre_stage *st)
{
    int a = stage_wait(st, 0), b = stage_wait(st, 1);
    st->dir = 0;
    return a < 0 ? a : b;
}

static int stage_open(cre_tp *tp, cre_stage **out)
{
    return cuda_stage_get(tp->priv, out);
}

static void stage_close(cre_stage *st)
{
    if (st != NULL)
        cuda_stage_put(st->ce, st);
}

/* Start copying the next chunk of the outbound source into window i. */
static int out_issue(cre_stage *st, int i)
{
    crv_driver *d = st->ce->drv;
    uint64_t n = st->len - st->issued;
    if (n > CUDA_WINDOW)
        n = CUDA_WINDOW;
    int rc = crv_check(
        d, d->memcpy_async((CUdeviceptr)(uintptr_t)st->win[i], st->dev + st->issued, n, st->stream),
        "cuMemcpyAsync device->staging");
    if (rc == 0)
        rc = crv_check(d, d->event_record(st->ev[i], st->stream), "cuEventRecord");
    if (rc < 0)
        return rc;
    st->win_len[i] = n;
    st->busy[i] = true;
    st->issued += n;
    return 0;
}

static int stage_out_begin(cre_stage *st, int device, uint64_t src, uint64_t len)
{
    int rc = stage_use(st, device);
    if (rc == 0)
        rc = stage_quiesce(st);
    if (rc < 0)
        return rc;
    st->dir = 1;
    st->dev = src;
    st->len = len;
    st->issued = st->handed = 0;
    st->cur = 1; /* the first window handed out is 0 */
    rc = out_issue(st, 0);
    if (rc == 0 && st->issued < len)
        rc = out_issue(st, 1);
    if (rc < 0)
        st->dir = 0;
    return rc;
}

static int stage_out_next(cre_stage *st, const uint8_t **ptr, size_t *len)
{
    if (st->dir != 1 || st->handed >= st->len)
        return crb_error(CR_INTERNAL_ERROR, "staging: no outbound window left");
    int rc = crv_bind(st->ce->drv, st->device);
    int next = st->cur ^ 1;
    /* The window handed out last has been sent: refill it. */
    if (rc == 0 && st->handed > 0 && st->issued < st->len)
        rc = out_issue(st, st->cur);
    if (rc == 0)
        rc = stage_wait(st, next);
    if (rc < 0) {
        stage_quiesce(st);
        return rc;
    }
    st->cur = next;
    st->handed += st->win_len[next];
    if (!st->bounce)
        atomic_fetch_add(&st->ce->bytes_staged_out, st->win_len[next]);
    *ptr = st->win[next];
    *len = st->win_len[next];
    if (st->handed >= st->len)
        st->dir = 0;
    return 0;
}

static int stage_in_begin(cre_stage *st, int device, uint64_t dst, uint64_t len)
{
    int rc = stage_use(st, device);
    if (rc == 0)
        rc = stage_quiesce(st);
    if (rc < 0)
        return rc;
    st->dir = 2;
    st->dev = dst;
    st->len = len;
    st->issued = 0;
    st->cur = 0;
    return 0;
}

static int stage_in_window(cre_stage *st, uint8_t **ptr, size_t *len)
{
    if (st->dir != 2 || st->issued >= st->len)
        return crb_error(CR_INTERNAL_ERROR, "staging: no inbound window left");
    int rc = crv_bind(st->ce->drv, st->device);
    if (rc == 0)
        rc = stage_wait(st, st->cur); /* its last copy to the device is done */
    if (rc < 0) {
        stage_quiesce(st);
        return rc;
    }
    uint64_t n = st->len - st->issued;
    *ptr = st->win[st->cur];
    *len = n > CUDA_WINDOW ? CUDA_WINDOW : (size_t)n;
    return 0;
}

static int stage_in_commit(cre_stage *st, size_t n)
{
    crv_driver *d = st->ce->drv;
    if (st->dir != 2 || n > CUDA_WINDOW || n > st->len - st->issued)
        return crb_error(CR_INTERNAL_ERROR, "staging: commit of %zu bytes does not fit", n);
    int rc = crv_bind(d, st->device);
    if (rc == 0)
        rc = crv_check(d,
                       d->memcpy_async(st->dev + st->issued,
                                       (CUdeviceptr)(uintptr_t)st->win[st->cur], n, st->stream),
                       "cuMemcpyAsync staging->device");
    if (rc == 0)
        rc = crv_check(d, d->event_record(st->ev[st->cur], st->stream), "cuEventRecord");
    if (rc < 0) {
        stage_quiesce(st);
        return rc;
    }
    st->busy[st->cur] = true;
    st->issued += n;
    if (!st->bounce)
        atomic_fetch_add(&st->ce->bytes_staged_in, n);
    st->cur ^= 1;
    return 0;
}

static int stage_in_finish(cre_stage *st)
{
    if (st->dir != 2)
        return crb_error(CR_INTERNAL_ERROR, "staging: no inbound transfer to finish");
    uint64_t done = st->issued, want = st->len;
    int rc = crv_bind(st->ce->drv, st->device);
    int q = stage_quiesce(st);
    if (rc == 0)
        rc = q;
    if (rc == 0 && done != want)
        rc = crb_error(CR_INTERNAL_ERROR, "staging: %llu of %llu bytes committed",
                       (unsigned long long)done, (unsigned long long)want);
    return rc;
}

const cre_stager_ops cuda_stager_ops = {
    .open = stage_open,
    .close = stage_close,
    .out_begin = stage_out_begin,
    .out_next = stage_out_next,
    .in_begin = stage_in_begin,
    .in_window = stage_in_window,
    .in_commit = stage_in_commit,
    .in_finish = stage_in_finish,
};

int cuda_stage_get(cuda_engine *ce, cre_stage **out)
{
    pthread_mutex_lock(&ce->lock);
    cre_stage *st = ce->free_stages;
    if (st != NULL)
        ce->free_stages = st->next_free;
    pthread_mutex_unlock(&ce->lock);
    if (st == NULL) {
        st = calloc(1, sizeof(*st));
        if (st == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "a staging stream");
        st->ce = ce;
        st->device = -1;
    }
    *out = st;
    return 0;
}

/* Back to the pool. No context is bound here (lanes and connections give
 * their stages back on the caller's thread at engine destroy): waiting for
 * an event needs none. */
void cuda_stage_put(cuda_engine *ce, cre_stage *st)
{
    if (st->device >= 0)
        stage_quiesce(st);
    st->dir = 0;
    st->bounce = false;
    pthread_mutex_lock(&ce->lock);
    st->next_free = ce->free_stages;
    ce->free_stages = st;
    pthread_mutex_unlock(&ce->lock);
}

void cuda_stages_free(cuda_engine *ce)
{
    while (ce->free_stages != NULL) {
        cre_stage *st = ce->free_stages;
        ce->free_stages = st->next_free;
        stage_destroy(st);
    }
}
