/*
 * staging.c - the local buffer that copying puts and gets stage through,
 * and the one transfer helper every data path uses.
 *
 * The buffer is carved by the offset allocator under a mutex. A caller asks
 * for up to `want` bytes and accepts anything from `min` up, so a value
 * larger than the free space moves in chunks instead of failing; a caller
 * that cannot get even `min` waits (bounded) for another thread to free
 * space. Batch calls instead try (without waiting) to take each value whole,
 * and move the values that do not fit one key at a time.
 */
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "store/internal.h"

int crc_staging_alloc(cr_store *s, uint64_t want, uint64_t min, crb_oa_allocation *out,
                      uint8_t **ptr)
{
    if (s->staging_oa == NULL)
        return crb_error(CR_INVALID_PARAMS, "copying put/get needs a local buffer (size 0)");
    if (min > s->staging_size)
        min = s->staging_size;
    struct timespec deadline = {0};
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)(s->transfer_timeout_ms / 1000 + 1);
    pthread_mutex_lock(&s->staging_lock);
    for (;;) {
        uint64_t size = want;
        for (;;) {
            if (crb_oa_alloc(s->staging_oa, size, out) == 0) {
                pthread_mutex_unlock(&s->staging_lock);
                *ptr = s->staging + out->offset;
                return 0;
            }
            if (size <= min)
                break;
            size = size / 2 < min ? min : size / 2;
        }
        if (pthread_cond_timedwait(&s->staging_freed, &s->staging_lock, &deadline) != 0)
            break;
    }
    pthread_mutex_unlock(&s->staging_lock);
    return crb_error(CR_NO_AVAILABLE_HANDLE,
                     "no %llu free bytes in the %llu-byte local buffer within the deadline",
                     (unsigned long long)min, (unsigned long long)s->staging_size);
}

int crc_staging_try_alloc(cr_store *s, uint64_t size, crb_oa_allocation *out, uint8_t **ptr)
{
    if (s->staging_oa == NULL || size == 0 || size > s->staging_size)
        return CR_NO_AVAILABLE_HANDLE;
    pthread_mutex_lock(&s->staging_lock);
    int rc = crb_oa_alloc(s->staging_oa, size, out);
    pthread_mutex_unlock(&s->staging_lock);
    if (rc < 0)
        return CR_NO_AVAILABLE_HANDLE;
    *ptr = s->staging + out->offset;
    return 0;
}

void crc_staging_free(cr_store *s, const crb_oa_allocation *a)
{
    pthread_mutex_lock(&s->staging_lock);
    crb_oa_free(s->staging_oa, a->node);
    pthread_cond_broadcast(&s->staging_freed);
    pthread_mutex_unlock(&s->staging_lock);
}

int crc_transfer(cr_store *s, int opcode, const crp_rpc_replica *reps, size_t n_reps,
                 uint64_t offset, void *local, uint64_t len)
{
    if (len == 0 || n_reps == 0)
        return 0;
    cr_transfer_request reqs[32];
    if (n_reps > 32)
        n_reps = 32;
    for (size_t i = 0; i < n_reps; i++) {
        cr_segment_handle h;
        int rc = crc_segment_handle(s, reps[i].segment, &h);
        if (rc < 0)
            return rc;
        if (offset + len > reps[i].size)
            return crb_error(CR_INVALID_PARAMS, "range %llu+%llu exceeds the %llu-byte replica",
                             (unsigned long long)offset, (unsigned long long)len,
                             (unsigned long long)reps[i].size);
        reqs[i] = (cr_transfer_request){opcode, local, h, reps[i].addr + offset, len};
    }
    cr_batch_id b;
    int rc = cr_batch_create(s->engine, n_reps, &b);
    if (rc < 0)
        return rc;
    rc = cr_batch_submit(s->engine, b, reqs, n_reps);
    if (rc == 0)
        rc = cr_batch_wait(s->engine, b, (int)s->transfer_timeout_ms + 1000);
    if (rc == CR_ERR_TIMEOUT)
        cr_batch_cancel(s->engine, b);
    cr_batch_free(s->engine, b);
    return rc;
}

void crc_run_batch(cr_store *s, cr_transfer_request *reqs, size_t t, bool *failed)
{
    if (t == 0)
        return;
    cr_batch_id b;
    int rc = cr_batch_create(s->engine, t, &b);
    if (rc < 0) {
        for (size_t k = 0; k < t; k++)
            failed[k] = true;
        return;
    }
    rc = cr_batch_submit(s->engine, b, reqs, t);
    if (rc < 0) { /* validation refused something: one transfer at a time */
        for (size_t k = 0; k < t; k++)
            failed[k] = cr_engine_transfer_sync(s->engine, reqs[k].opcode, reqs[k].local_addr,
                                                reqs[k].segment, reqs[k].remote_addr,
                                                reqs[k].length, (int)s->transfer_timeout_ms) < 0;
    } else {
        cr_batch_wait(s->engine, b, (int)s->transfer_timeout_ms + 1000);
        for (size_t k = 0; k < t; k++) {
            cr_task_status st;
            failed[k] =
                cr_batch_task_status(s->engine, b, k, &st) < 0 || st.state != CR_TASK_COMPLETED;
        }
        cr_batch_cancel(s->engine, b);
    }
    cr_batch_free(s->engine, b);
}
