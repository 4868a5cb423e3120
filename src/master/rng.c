/*
 * rng.c - see rng.h.
 */
#include "master/rng.h"

uint64_t crk_rng_next(_Atomic uint64_t *seeder, uint64_t mix)
{
    static _Thread_local uint64_t state;
    if (state == 0) /* first use on this thread: a distinct stream per thread */
        state = atomic_fetch_add_explicit(seeder, 0x9E3779B97F4A7C15ull, memory_order_relaxed) | 1;
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state ^ mix;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
