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
 *
 * Copy once: on the engine paths that move any local memory (tcp, shm,
 * cma, local) the copying calls skip the staging buffer and name the
 * caller's bytes in their transfers (CR_OP_LOCAL_UNREGISTERED): a put sends
 * straight from the caller's value, a get receives straight into the value
 * it returns. Where the engine refuses that (CR_ERR_NEEDS_REGISTERED: ucx
 * needs registered memory) the call stages as before, and so do the calls
 * of the next second (crc_direct_ok), so such a deployment pays one refused
 * submit per second, not one per call. A transfer of the caller's memory is
 * waited for until no task touches that memory, also after a timeout
 * (cancel, then wait: the tasks' own deadlines bound it), because the
 * caller may free it as soon as the call returns.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "store/internal.h"

/* How long copying calls stage after the engine refused unregistered memory. */
#define DIRECT_RETRY_MS 1000

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

int crc_copy_mode(bool *staged)
{
    const char *v = getenv("CRESCENT_STORE_COPY");
    if (v == NULL || v[0] == '\0' || strcmp(v, "direct") == 0) {
        *staged = false;
        return 0;
    }
    if (strcmp(v, "staged") == 0) {
        *staged = true;
        return 0;
    }
    return crb_error(CR_INVALID_PARAMS, "CRESCENT_STORE_COPY '%s' is neither direct nor staged", v);
}

bool crc_direct_ok(cr_store *s)
{
    if (s->copy_staged)
        return false;
    uint64_t until = atomic_load_explicit(&s->direct_retry_ms, memory_order_relaxed);
    return until == 0 || crb_now_ms() >= until;
}

void crc_direct_refused(cr_store *s)
{
    atomic_store(&s->direct_retry_ms, crb_now_ms() + DIRECT_RETRY_MS);
    if (!atomic_exchange(&s->direct_logged, true))
        crb_log(CRB_LOG_INFO,
                "store %s: copying calls stage through the local buffer (%s); asked again "
                "every %d ms",
                s->segment_name, cr_last_error_message(), DIRECT_RETRY_MS);
}

/*
 * Wait for batch b. After a timeout it is canceled, and when its tasks name
 * memory the caller may reuse at once (its own unregistered bytes, or a
 * staging chunk freed on return) waited for again until every task has
 * ended: the tasks' own deadlines bound that wait. The timeout is returned.
 */
static int wait_tasks(cr_store *s, cr_batch_id b, bool until_final)
{
    int rc = cr_batch_wait(s->engine, b, (int)s->transfer_timeout_ms + 1000);
    if (rc == CR_ERR_TIMEOUT) {
        char detail[400];
        snprintf(detail, sizeof(detail), "%s", cr_last_error_message());
        cr_batch_cancel(s->engine, b);
        if (until_final)
            cr_batch_wait(s->engine, b, -1);
        crb_error(rc, "%s", detail);
    }
    return rc;
}

/* One request as a batch of one, waited for until it has ended. */
static int run_one(cr_store *s, const cr_transfer_request *rq)
{
    cr_batch_id b;
    int rc = cr_batch_create_ex(s->engine, 1, CR_BATCH_CALLER_WAITS, &b);
    if (rc < 0)
        return rc;
    rc = cr_batch_submit(s->engine, b, rq, 1);
    if (rc == 0)
        rc = wait_tasks(s, b, true);
    cr_batch_free(s->engine, b);
    return rc;
}

/* A request on unregistered memory, moved through the staging buffer instead. */
static int run_staged(cr_store *s, const cr_transfer_request *rq)
{
    int op = rq->opcode & ~CR_OP_LOCAL_UNREGISTERED;
    uint8_t *local = rq->local_addr;
    for (uint64_t done = 0; done < rq->length;) {
        crb_oa_allocation a;
        uint8_t *stage;
        uint64_t want = rq->length - done;
        int rc = crc_staging_alloc(s, want, want < (64u << 10) ? want : (64u << 10), &a, &stage);
        if (rc < 0)
            return rc;
        uint64_t chunk = a.size < want ? a.size : want;
        if (op == CR_OP_WRITE)
            memcpy(stage, local + done, chunk);
        cr_transfer_request one = {op, stage, rq->segment, rq->remote_addr + done, chunk};
        rc = run_one(s, &one);
        if (rc == 0 && op == CR_OP_READ)
            memcpy(local + done, stage, chunk);
        crc_staging_free(s, &a);
        if (rc < 0)
            return rc;
        done += chunk;
    }
    return 0;
}

void crc_run_batch_direct(cr_store *s, cr_transfer_request *reqs, size_t t, bool *failed)
{
    if (t == 0)
        return;
    cr_batch_id b;
    int rc = cr_batch_create(s->engine, t, &b);
    if (rc == 0) {
        rc = cr_batch_submit(s->engine, b, reqs, t);
        if (rc == 0) {
            wait_tasks(s, b, true);
            for (size_t k = 0; k < t; k++) {
                cr_task_status st;
                failed[k] =
                    cr_batch_task_status(s->engine, b, k, &st) < 0 || st.state != CR_TASK_COMPLETED;
            }
        }
        cr_batch_free(s->engine, b);
        if (rc == 0)
            return;
    }
    /* Refused as a whole (unregistered memory the engine cannot move, or a
     * request validation refused): one at a time, staging what it needs. */
    bool refused = false;
    for (size_t k = 0; k < t; k++) {
        int one = run_one(s, &reqs[k]);
        if (one == CR_ERR_NEEDS_REGISTERED) {
            if (!refused)
                crc_direct_refused(s);
            refused = true;
            one = run_staged(s, &reqs[k]);
        }
        failed[k] = one < 0;
    }
}

int crc_transfer_direct(cr_store *s, int opcode, const crp_rpc_replica *reps, size_t n_reps,
                        uint64_t offset, void *local, uint64_t len)
{
    return crc_transfer(s, opcode | CR_OP_LOCAL_UNREGISTERED, reps, n_reps, offset, local, len);
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
    /* This thread waits at once: a single request may be carried by it. */
    cr_batch_id b;
    int rc = cr_batch_create_ex(s->engine, n_reps, CR_BATCH_CALLER_WAITS, &b);
    if (rc < 0)
        return rc;
    rc = cr_batch_submit(s->engine, b, reqs, n_reps);
    if (rc == 0)
        rc = wait_tasks(s, b, (opcode & CR_OP_LOCAL_UNREGISTERED) != 0);
    cr_batch_free(s->engine, b);
    return rc;
}

int crc_read_start(cr_store *s, const char *segment, uint64_t addr, void *local, uint64_t len,
                   bool unregistered, cr_batch_id *batch_out)
{
    cr_segment_handle h;
    int rc = crc_segment_handle(s, segment, &h);
    if (rc < 0)
        return rc;
    int op = CR_OP_READ | (unregistered ? CR_OP_LOCAL_UNREGISTERED : 0);
    cr_transfer_request req = {op, local, h, addr, len};
    cr_batch_id b;
    /* CALLER_WAITS: over tcp this thread may carry the read now, while the
     * master works on the request already sent (measured faster than the
     * lanes' two hand-offs: docs/PERFORMANCE.md, "The caller reads its own
     * reply"). */
    rc = cr_batch_create_ex(s->engine, 1, CR_BATCH_CALLER_WAITS, &b);
    if (rc < 0)
        return rc;
    rc = cr_batch_submit(s->engine, b, &req, 1);
    if (rc < 0) {
        cr_batch_free(s->engine, b);
        return rc;
    }
    *batch_out = b;
    return 0;
}

int crc_read_finish(cr_store *s, cr_batch_id batch, bool cancel)
{
    if (cancel)
        cr_batch_cancel(s->engine, batch); /* (what already started still ends first) */
    int rc = wait_tasks(s, batch, true);
    cr_batch_free(s->engine, batch);
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
