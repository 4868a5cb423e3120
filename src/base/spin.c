/*
 * spin.c - see spin.h. The adaptive mode's back-off: the first
 * CRB_SPIN_MISSES_TOLERATED - 1 windows in a row that run out change nothing
 * (a preempted peer, a slow reply now and then); from the k-th on, the next
 * min(2^(k - CRB_SPIN_MISSES_TOLERATED + 1), CRB_SPIN_MAX_SKIP) waits sleep
 * at once. A caught window resets k. The cap is small on purpose: a
 * request/reply pair of threads catches windows only while both poll, so two
 * ends backed off far would rarely try a window at the same time again and
 * could stay asleep for good; with the cap they meet within a few requests.
 */
#include "base/spin.h"

#include <stdlib.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"

#define CRB_SPIN_MISSES_TOLERATED 3

int crb_spin_mode_from_env(int status_on_error, int64_t *mode_ns)
{
    const char *bp = getenv("CRESCENT_BUSY_POLL_US");
    if (bp == NULL || bp[0] == '\0') {
        *mode_ns = CRB_SPIN_ADAPTIVE;
        return 0;
    }
    char *end = NULL;
    unsigned long us = strtoul(bp, &end, 10);
    if (bp[0] < '0' || bp[0] > '9' || *end != '\0' || us > CRB_SPIN_MAX_US)
        return crb_error(status_on_error,
                         "CRESCENT_BUSY_POLL_US '%s' is not a number of microseconds from 0 to %d "
                         "(unset: adaptive)",
                         bp, CRB_SPIN_MAX_US);
    *mode_ns = (int64_t)us * 1000;
    return 0;
}

void crb_spin_init(crb_spin *s, int64_t mode_ns)
{
    s->mode_ns = mode_ns < 0 ? CRB_SPIN_ADAPTIVE : mode_ns;
    atomic_init(&s->misses, 0);
    atomic_init(&s->skip, 0);
    atomic_init(&s->windows, 0);
    atomic_init(&s->caught, 0);
}

/* Adaptive windows open at once in this process, and how many may be:
 * half the CPUs online, at least one. More threads polling than that would
 * take the CPUs the work needs (measured: eight store threads doing 4 KiB
 * calls on two vCPUs lost 10-25 % with every waiting thread polling). */
static _Atomic int active_windows;
static _Atomic int window_limit; /* 0: not computed yet */
/* Until then (ns) no adaptive window opens: a wait found every place taken,
 * so more threads than that wait at the same time here, and polling would
 * take CPU from the others' work (see spin.h). */
static _Atomic uint64_t contended_until;

int crb_spin_window_limit(void)
{
    int limit = atomic_load_explicit(&window_limit, memory_order_relaxed);
    if (limit == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        limit = cpus >= 4 ? (int)(cpus / 2) : 1;
        atomic_store_explicit(&window_limit, limit, memory_order_relaxed);
    }
    return limit;
}

uint64_t crb_spin_window(crb_spin *s)
{
    if (s->mode_ns >= 0) {
        if (s->mode_ns > 0)
            atomic_fetch_add_explicit(&s->windows, 1, memory_order_relaxed);
        return (uint64_t)s->mode_ns;
    }
    uint32_t skip = atomic_load_explicit(&s->skip, memory_order_relaxed);
    if (skip > 0) {
        atomic_store_explicit(&s->skip, skip - 1, memory_order_relaxed);
        return 0;
    }
    uint64_t now = crb_now_ns();
    if (now < atomic_load_explicit(&contended_until, memory_order_relaxed))
        return 0; /* many waiters lately: sleep (not a miss) */
    if (atomic_fetch_add_explicit(&active_windows, 1, memory_order_relaxed) >=
        crb_spin_window_limit()) {
        atomic_fetch_sub_explicit(&active_windows, 1, memory_order_relaxed);
        atomic_store_explicit(&contended_until, now + CRB_SPIN_CONTENDED_NS, memory_order_relaxed);
        return 0; /* enough threads poll already: sleep (not a miss) */
    }
    atomic_fetch_add_explicit(&s->windows, 1, memory_order_relaxed);
    return CRB_SPIN_ADAPTIVE_NS;
}

void crb_spin_done(crb_spin *s, bool caught)
{
    if (caught)
        atomic_fetch_add_explicit(&s->caught, 1, memory_order_relaxed);
    if (s->mode_ns >= 0)
        return;
    atomic_fetch_sub_explicit(&active_windows, 1, memory_order_relaxed);
    if (caught) {
        atomic_store_explicit(&s->misses, 0, memory_order_relaxed);
        return;
    }
    uint32_t k = atomic_load_explicit(&s->misses, memory_order_relaxed) + 1;
    atomic_store_explicit(&s->misses, k, memory_order_relaxed);
    if (k < CRB_SPIN_MISSES_TOLERATED)
        return;
    uint32_t shift = k - CRB_SPIN_MISSES_TOLERATED + 1;
    uint32_t skip = shift >= 11 ? CRB_SPIN_MAX_SKIP : 1u << shift;
    atomic_store_explicit(&s->skip, skip > CRB_SPIN_MAX_SKIP ? CRB_SPIN_MAX_SKIP : skip,
                          memory_order_relaxed);
}
