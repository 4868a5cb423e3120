/*
 * clock.h - monotonic time helpers.
 */
#ifndef CRESCENT_BASE_CLOCK_H
#define CRESCENT_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

/** Monotonic nanoseconds. */
static inline uint64_t crb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/** Monotonic milliseconds. */
static inline uint64_t crb_now_ms(void)
{
    return crb_now_ns() / 1000000ull;
}

/** Absolute CLOCK_MONOTONIC timespec `ms` from now, for condvar waits. */
static inline struct timespec crb_deadline_ts(uint64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)((ms % 1000) * 1000000);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/** One step of a bounded spin-wait (a PAUSE where the CPU has one). */
static inline void crb_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
