/*
 * store_pattern.h - the values the store tests write and check.
 *
 * Design: a value is identified by (length, seed). Byte i of the value with
 * seed s is byte (i % 8), little-endian, of splitmix64(s + i / 8), so a value
 * never repeats within itself and two seeds never agree for long: a block
 * that lands at the wrong offset, in the wrong key or half-written is caught
 * by sp_check. The writer and the checker only exchange (length, seed), never
 * bytes. sp_fnv is FNV-1a 64 over what was read, reported by the client
 * helper so a test can compare it with sp_fnv of the expected value.
 *
 * Header-only (static inline); pure and thread-safe.
 */
#ifndef CRESCENT_TESTS_STORE_PATTERN_H
#define CRESCENT_TESTS_STORE_PATTERN_H

#include <stdint.h>
#include <string.h>

static inline uint64_t sp_splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline uint8_t sp_byte(uint64_t i, uint64_t seed)
{
    return (uint8_t)(sp_splitmix(seed + i / 8) >> (8 * (i % 8)));
}

/* Write bytes [0, len) of the value with this seed to dst. */
static inline void sp_fill(uint8_t *dst, uint64_t len, uint64_t seed)
{
    uint64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = sp_splitmix(seed + i / 8);
        for (int b = 0; b < 8; b++)
            dst[i + (uint64_t)b] = (uint8_t)(w >> (8 * b));
    }
    for (; i < len; i++)
        dst[i] = sp_byte(i, seed);
}

/* Index of the first byte that differs from the value, or -1 if all match. */
static inline int64_t sp_check(const uint8_t *got, uint64_t len, uint64_t seed)
{
    uint64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = sp_splitmix(seed + i / 8);
        uint8_t want[8];
        for (int b = 0; b < 8; b++)
            want[b] = (uint8_t)(w >> (8 * b));
        if (memcmp(got + i, want, 8) != 0)
            break;
    }
    for (; i < len; i++)
        if (got[i] != sp_byte(i, seed))
            return (int64_t)i;
    return -1;
}

/* FNV-1a 64 of len bytes. */
static inline uint64_t sp_fnv(const uint8_t *p, uint64_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* FNV-1a 64 of the value (len, seed) without materialising it. */
static inline uint64_t sp_fnv_of(uint64_t len, uint64_t seed)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < len; i++)
        h = (h ^ sp_byte(i, seed)) * 0x100000001b3ull;
    return h;
}

#endif
