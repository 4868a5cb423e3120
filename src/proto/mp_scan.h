/*
 * mp_scan.h - the allocation-free pre-scan every msgpack decoder runs
 * before msgpack-c sees the bytes.
 *
 * msgpack-c allocates an array's element storage from the declared count
 * before it has seen the elements, so a five-byte header could make it ask
 * for 64 GiB. crp_mp_scan walks the raw bytes once and proves they hold
 * exactly one complete object (no truncation, no trailing bytes), nested at
 * most CRP_MP_MAX_DEPTH deep, with every container count backed by at least
 * one input byte per element, and without the reserved byte 0xc1.
 */
#ifndef CRESCENT_PROTO_MP_SCAN_H
#define CRESCENT_PROTO_MP_SCAN_H

#include <stddef.h>
#include <stdint.h>

#define CRP_MP_MAX_DEPTH 16

/** Big-endian unsigned integer of n (<= 8) bytes. */
static inline uint64_t crp_mp_load_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/** NULL if data[0..len) is one acceptable msgpack object, else why not. */
const char *crp_mp_scan(const uint8_t *data, size_t len);

#endif
