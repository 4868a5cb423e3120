/*
 * siphash.h - SipHash-1-3, the one hash crescent uses for keys that arrive
 * from the network (the master's object and segment tables, the metadata
 * server's table).
 *
 * Why SipHash and not XXH3: the tables are hash tables probed with keys a
 * remote client chooses. An unkeyed (or weakly seeded) fast hash lets a
 * client compute keys that all land in one probe run and turn every lookup
 * into a scan (hash flooding). SipHash is a keyed PRF designed for exactly
 * this; with a random 128-bit key per table or service an attacker cannot
 * predict collisions. The 1-3 variant (one compression, three finalisation
 * rounds) is what Python, Rust and Ruby use for their dictionaries. It costs
 * ~1 ns/byte plus ~10 ns per key, which the master's batch paths measure as
 * noise (docs/PERFORMANCE.md). It needs no new dependency.
 *
 * Pure functions; any thread.
 */
#ifndef CRESCENT_BASE_SIPHASH_H
#define CRESCENT_BASE_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/** A SipHash key: two 64-bit words (fill from crb_random_bytes). */
typedef struct crb_sipkey {
    uint64_t k0, k1;
} crb_sipkey;

/** SipHash-1-3 of data[0..len) under key. */
uint64_t crb_siphash13(const crb_sipkey *key, const void *data, size_t len);

#endif
