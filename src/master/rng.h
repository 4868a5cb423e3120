/*
 * rng.h - the master's random stream for placement sampling: splitmix64
 * over a per-thread state, each thread's stream seeded once from a shared
 * atomic seeder, so threads never share a written cache line for it.
 *
 * Threading: any thread; the seeder is only touched on a thread's first use.
 */
#ifndef CRESCENT_MASTER_RNG_H
#define CRESCENT_MASTER_RNG_H

#include <stdatomic.h>
#include <stdint.h>

/** A random 64-bit value from this thread's stream, mixed with `mix`. */
uint64_t crk_rng_next(_Atomic uint64_t *seeder, uint64_t mix);

#endif
