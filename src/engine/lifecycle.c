/*
 * lifecycle.c - calls in flight versus cr_engine_destroy.
 *
 * Every public call that touches engine state brackets itself with
 * cre_call_enter / cre_call_leave. Destroy first marks the engine as
 * shutting down, so calls that start afterwards fail with CR_ERR_SHUTDOWN
 * instead of racing the teardown, wakes the calls that sleep (batch waits
 * return CR_ERR_SHUTDOWN), and then waits until the calls in flight have
 * left. The counter and the flag are sequentially consistent atomics: an
 * entering call either sees the flag, or destroy sees its count.
 *
 * What this cannot make safe: a call that starts after cr_engine_destroy
 * returned (the engine is freed memory); engine.h says so.
 */
#include "base/clock.h"
#include "base/error.h"
#include "engine/internal.h"

int cre_call_enter(cr_engine *e, const char *what)
{
    if (e == NULL)
        return crb_error(CR_INVALID_PARAMS, "%s: NULL engine", what);
    atomic_fetch_add(&e->calls_in_flight_atomic, 1);
    if (!atomic_load(&e->shutting_down))
        return 0;
    cre_call_leave(e);
    return crb_error(CR_ERR_SHUTDOWN, "%s: the engine is being destroyed", what);
}

void cre_call_leave(cr_engine *e)
{
    if (!atomic_load(&e->shutting_down)) {
        /* (if destroy starts right now it sees the count within its 50 ms
         * re-check; this call touches nothing of e afterwards) */
        atomic_fetch_sub(&e->calls_in_flight_atomic, 1);
        return;
    }
    /* Destroy is draining: leave under its lock, so that it can see the
     * count reach 0 only after this call has let go of the lock and the
     * condition variable it is about to destroy. */
    pthread_mutex_lock(&e->calls_lock);
    if (atomic_fetch_sub(&e->calls_in_flight_atomic, 1) == 1)
        pthread_cond_broadcast(&e->calls_done);
    pthread_mutex_unlock(&e->calls_lock);
}

void cre_call_guard_leave(cre_call_guard *g)
{
    if (g->e != NULL)
        cre_call_leave(g->e);
}

/* Wake every sleeping batch wait, so it sees shutting_down. */
static void wake_batch_waiters(cr_engine *e)
{
    pthread_mutex_lock(&e->batches.lock);
    for (size_t i = 0; i < e->batches.cap; i++) {
        cre_batch *b = e->batches.items[i];
        if (b == NULL)
            continue;
        pthread_mutex_lock(&b->lock);
        pthread_cond_broadcast(&b->cond);
        pthread_mutex_unlock(&b->lock);
    }
    pthread_mutex_unlock(&e->batches.lock);
}

void cre_calls_drain(cr_engine *e)
{
    atomic_store(&e->shutting_down, true);
    wake_batch_waiters(e);
    pthread_mutex_lock(&e->calls_lock);
    while (atomic_load(&e->calls_in_flight_atomic) > 0) {
        struct timespec ts = crb_deadline_ts(50);
        pthread_cond_timedwait(&e->calls_done, &e->calls_lock, &ts);
        if (atomic_load(&e->calls_in_flight_atomic) > 0) {
            pthread_mutex_unlock(&e->calls_lock);
            wake_batch_waiters(e);
            pthread_mutex_lock(&e->calls_lock);
        }
    }
    pthread_mutex_unlock(&e->calls_lock);
}
