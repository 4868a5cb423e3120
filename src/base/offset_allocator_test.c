/*
 * offset_allocator_test.c - the per-segment offset allocator: alignment,
 * exhaustion, fragmentation, coalescing in random order, uniform-size KV
 * blocks at ~100 % utilization (also after churn), random alloc/free checked
 * against a bitmap reference model, huge 64-bit sizes, lazy node growth and
 * invalid handles, and warm space first: freed ranges below the touched
 * frontier are handed out before never-allocated space.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "base/offset_allocator.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void shuffle(uint32_t *v, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = rnd() % i;
        uint32_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

static void test_basic_alignment(void **state)
{
    crb_oa *oa = NULL;
    assert_int_equal(crb_oa_create(1 << 20, 64, NULL, &oa), 0);
    assert_int_equal(crb_oa_capacity(oa), 1 << 20);
    crb_oa_allocation a, b, c;
    assert_int_equal(crb_oa_alloc(oa, 1, &a), 0);
    assert_int_equal(a.size, 64);
    assert_int_equal(a.offset % 64, 0);
    assert_int_equal(crb_oa_alloc(oa, 100, &b), 0);
    assert_int_equal(b.size, 128);
    assert_int_equal(b.offset % 64, 0);
    assert_int_equal(crb_oa_alloc(oa, 4096, &c), 0);
    assert_int_equal(c.size, 4096);
    assert_int_equal(crb_oa_used(oa), 64 + 128 + 4096);
    /* Non-overlapping. */
    assert_true(a.offset + a.size <= b.offset || b.offset + b.size <= a.offset);
    assert_true(b.offset + b.size <= c.offset || c.offset + c.size <= b.offset);

    crb_oa_stats st;
    crb_oa_get_stats(oa, &st);
    assert_int_equal(st.allocations, 3);
    assert_int_equal(st.free_blocks, 1);
    assert_int_equal(st.used + st.free, st.capacity);
    assert_int_equal(st.largest_free, st.free);

    assert_int_equal(crb_oa_free(oa, b.node), 0);
    assert_int_equal(crb_oa_free(oa, a.node), 0);
    assert_int_equal(crb_oa_free(oa, c.node), 0);
    crb_oa_get_stats(oa, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.free_blocks, 1);
    assert_int_equal(st.nodes, 1);
    assert_int_equal(st.largest_free, 1 << 20);

    /* Capacity rounds down to the alignment. */
    crb_oa *odd = NULL;
    assert_int_equal(crb_oa_create(1000, 64, NULL, &odd), 0);
    assert_int_equal(crb_oa_capacity(odd), 960);
    crb_oa_destroy(odd);
    crb_oa_destroy(oa);
}

static void test_invalid(void **state)
{
    crb_oa *oa = (crb_oa *)0x1;
    assert_int_equal(crb_oa_create(4096, 3, NULL, &oa), CR_INVALID_PARAMS);
    assert_int_equal(crb_oa_create(4096, 0, NULL, &oa), CR_INVALID_PARAMS);
    assert_int_equal(crb_oa_create(63, 64, NULL, &oa), CR_INVALID_PARAMS);
    assert_ptr_equal(oa, (crb_oa *)0x1); /* untouched on failure */
    assert_int_equal(crb_oa_create(4096, 64, NULL, &oa), 0);
    crb_oa_allocation a = {0};
    assert_int_equal(crb_oa_alloc(oa, 0, &a), CR_INVALID_PARAMS);
    assert_int_equal(crb_oa_alloc(oa, UINT64_MAX, &a), CR_INVALID_PARAMS);
    assert_int_equal(crb_oa_alloc(oa, 4097, &a), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(crb_oa_alloc(oa, 64, &a), 0);
    assert_int_equal(crb_oa_free(oa, a.node), 0);
    assert_int_equal(crb_oa_free(oa, a.node), CR_INVALID_PARAMS); /* double free */
    assert_int_equal(crb_oa_free(oa, 12345678), CR_INVALID_PARAMS);
    assert_int_equal(crb_oa_free(oa, 5), CR_INVALID_PARAMS); /* spare node */
    assert_int_equal(crb_oa_used(oa), 0);
    crb_oa_destroy(oa);
    crb_oa_destroy(NULL);
}

static void test_exhaustion(void **state)
{
    crb_oa *oa = NULL;
    const uint64_t cap = 64ull << 20, blk = 64 << 10;
    assert_int_equal(crb_oa_create(cap, 64, NULL, &oa), 0);
    uint32_t n = 0;
    crb_oa_allocation a;
    while (crb_oa_alloc(oa, blk, &a) == 0)
        n++;
    assert_int_equal(n, cap / blk);
    assert_int_equal(crb_oa_used(oa), cap);
    assert_int_equal(crb_oa_alloc(oa, 1, &a), CR_NO_AVAILABLE_HANDLE);
    crb_oa_stats st;
    crb_oa_get_stats(oa, &st);
    assert_int_equal(st.free, 0);
    assert_int_equal(st.largest_free, 0);
    assert_int_equal(st.free_blocks, 0);
    crb_oa_destroy(oa);
}

static void test_fragmentation(void **state)
{
    crb_oa *oa = NULL;
    const uint32_t n = 1024;
    const uint64_t blk = 4096;
    assert_int_equal(crb_oa_create(n * blk, 64, NULL, &oa), 0);
    crb_oa_allocation *al = calloc(n, sizeof(*al));
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(crb_oa_alloc(oa, blk, &al[i]), 0);
    for (uint32_t i = 0; i < n; i += 2)
        assert_int_equal(crb_oa_free(oa, al[i].node), 0);
    crb_oa_stats st;
    crb_oa_get_stats(oa, &st);
    assert_int_equal(st.free, n / 2 * blk);
    assert_int_equal(st.free_blocks, n / 2);
    assert_int_equal(st.largest_free, blk);
    /* Half the space is free but no block holds two units: refused. */
    crb_oa_allocation big;
    assert_int_equal(crb_oa_alloc(oa, 2 * blk, &big), CR_NO_AVAILABLE_HANDLE);
    /* Blocks of the hole size still fit, every one of them. */
    for (uint32_t i = 0; i < n; i += 2)
        assert_int_equal(crb_oa_alloc(oa, blk, &al[i]), 0);
    assert_int_equal(crb_oa_used(oa), n * blk);
    /* Free two address neighbours: they merge and a double block fits again. */
    int lo = -1, hi = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (al[i].offset == 10 * blk)
            lo = (int)i;
        if (al[i].offset == 11 * blk)
            hi = (int)i;
    }
    assert_true(lo >= 0 && hi >= 0);
    assert_int_equal(crb_oa_free(oa, al[lo].node), 0);
    assert_int_equal(crb_oa_free(oa, al[hi].node), 0);
    assert_int_equal(crb_oa_alloc(oa, 2 * blk, &big), 0);
    assert_int_equal(big.offset, 10 * blk);
    free(al);
    crb_oa_destroy(oa);
}

static void test_coalesce_random_order(void **state)
{
    crb_oa *oa = NULL;
    const uint64_t cap = 1ull << 30;
    assert_int_equal(crb_oa_create(cap, 64, NULL, &oa), 0);
    enum { N = 20000 };
    crb_oa_allocation *al = calloc(N, sizeof(*al));
    uint32_t *order = calloc(N, sizeof(*order));
    uint32_t got = 0;
    for (uint32_t i = 0; i < N; i++) {
        uint64_t sz = 1 + rnd() % 60000;
        if (crb_oa_alloc(oa, sz, &al[got]) == 0)
            order[got] = got, got++;
    }
    assert_true(got > N / 2);
    crb_oa_stats st;
    crb_oa_get_stats(oa, &st);
    assert_true(st.node_capacity >= got); /* grew on demand */
    shuffle(order, got);
    for (uint32_t i = 0; i < got; i++)
        assert_int_equal(crb_oa_free(oa, al[order[i]].node), 0);
    crb_oa_get_stats(oa, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.allocations, 0);
    assert_int_equal(st.free_blocks, 1);
    assert_int_equal(st.nodes, 1);
    assert_int_equal(st.largest_free, cap);
    /* The whole segment is one block again. */
    crb_oa_allocation whole;
    assert_int_equal(crb_oa_alloc(oa, cap, &whole), 0);
    assert_int_equal(whole.offset, 0);
    free(order);
    free(al);
    crb_oa_destroy(oa);
}

/*
 * Fill a segment with equal blocks, free a random half, refill, several
 * rounds: utilization must stay ~100 % (all but less than one block), also for
 * sizes that are not representable as a bin boundary.
 */
static void uniform_fill(uint64_t cap, uint64_t blk)
{
    crb_oa *oa = NULL;
    assert_int_equal(crb_oa_create(cap, 64, NULL, &oa), 0);
    uint64_t per = (blk + 63) / 64 * 64;
    uint32_t max = (uint32_t)(cap / per);
    crb_oa_allocation *al = calloc(max + 1, sizeof(*al));
    uint32_t *idx = calloc(max + 1, sizeof(*idx));
    uint32_t n = 0;
    while (n <= max && crb_oa_alloc(oa, blk, &al[n]) == 0)
        n++;
    assert_int_equal(n, max);
    double util = (double)crb_oa_used(oa) / (double)cap;
    assert_true(cap - crb_oa_used(oa) < per);
    for (int round = 0; round < 5; round++) {
        for (uint32_t i = 0; i < n; i++)
            idx[i] = i;
        shuffle(idx, n);
        for (uint32_t i = 0; i < n / 2; i++)
            assert_int_equal(crb_oa_free(oa, al[idx[i]].node), 0);
        uint32_t refilled = 0;
        for (uint32_t i = 0; i < n / 2; i++) {
            assert_int_equal(crb_oa_alloc(oa, blk, &al[idx[i]]), 0);
            refilled++;
        }
        crb_oa_allocation extra;
        assert_int_equal(crb_oa_alloc(oa, blk, &extra), CR_NO_AVAILABLE_HANDLE);
        assert_int_equal(refilled, n / 2);
        util = (double)crb_oa_used(oa) / (double)cap;
        assert_true(cap - crb_oa_used(oa) < per);
    }
    assert_true(util > 0.99);
    free(idx);
    free(al);
    crb_oa_destroy(oa);
}

static void test_uniform_kv_blocks(void **state)
{
    uniform_fill(256ull << 20, 4096);      /* representable */
    uniform_fill(256ull << 20, 33 * 4096); /* 132 KiB: not a bin boundary */
    uniform_fill(1ull << 30, 1000000);     /* odd size, 64-byte rounding */
    uniform_fill(256ull << 20, 3 * 1024 * 1024 + 4096);
}

/*
 * Random alloc/free against a bitmap model of the segment: every allocation
 * lies inside the segment, is aligned, overlaps nothing, the used count
 * matches, and an allocation fails exactly when the model has no free run
 * long enough.
 */
static uint64_t model_longest_run(const uint8_t *bits, uint64_t units)
{
    uint64_t best = 0, run = 0;
    for (uint64_t i = 0; i < units; i++) {
        run = bits[i] ? 0 : run + 1;
        if (run > best)
            best = run;
    }
    return best;
}

static void test_reference_model(void **state)
{
    const uint64_t align = 16, units = 4096;
    crb_oa *oa = NULL;
    assert_int_equal(crb_oa_create(units * align, align, NULL, &oa), 0);
    uint8_t *bits = calloc(units, 1);
    enum { SLOTS = 600 };
    crb_oa_allocation al[SLOTS];
    uint8_t live[SLOTS] = {0};
    uint64_t used_units = 0;
    for (int step = 0; step < 100000; step++) {
        uint32_t slot = (uint32_t)(rnd() % SLOTS);
        if (live[slot]) {
            assert_int_equal(crb_oa_free(oa, al[slot].node), 0);
            uint64_t u0 = al[slot].offset / align, un = al[slot].size / align;
            for (uint64_t u = u0; u < u0 + un; u++)
                bits[u] = 0;
            used_units -= un;
            live[slot] = 0;
        } else {
            uint64_t sz = (rnd() & 3) ? 1 + rnd() % (align * 24) : 1 + rnd() % (align * 300);
            uint64_t need = (sz + align - 1) / align;
            crb_oa_allocation a;
            int rc = crb_oa_alloc(oa, sz, &a);
            uint64_t longest = model_longest_run(bits, units);
            if (rc != 0) {
                assert_int_equal(rc, CR_NO_AVAILABLE_HANDLE);
                assert_true(longest < need);
                continue;
            }
            assert_true(longest >= need);
            assert_int_equal(a.size, need * align);
            assert_int_equal(a.offset % align, 0);
            uint64_t u0 = a.offset / align;
            assert_true(u0 + need <= units);
            for (uint64_t u = u0; u < u0 + need; u++) {
                assert_int_equal(bits[u], 0);
                bits[u] = 1;
            }
            used_units += need;
            al[slot] = a;
            live[slot] = 1;
        }
        assert_int_equal(crb_oa_used(oa), used_units * align);
        if (step % 997 == 0) {
            crb_oa_stats st;
            crb_oa_get_stats(oa, &st);
            assert_int_equal(st.largest_free, model_longest_run(bits, units) * align);
        }
    }
    for (uint32_t s = 0; s < SLOTS; s++)
        if (live[s])
            assert_int_equal(crb_oa_free(oa, al[s].node), 0);
    crb_oa_stats st;
    crb_oa_get_stats(oa, &st);
    assert_int_equal(st.free_blocks, 1);
    assert_int_equal(st.largest_free, units * align);
    free(bits);
    crb_oa_destroy(oa);
}

static void test_huge_sizes(void **state)
{
    crb_oa *oa = NULL;
    /* A 2^62-byte segment, byte granularity: offsets far beyond 32 bits. */
    assert_int_equal(crb_oa_create(1ull << 62, 1, NULL, &oa), 0);
    crb_oa_allocation a, b, c;
    assert_int_equal(crb_oa_alloc(oa, 1ull << 61, &a), 0);
    assert_int_equal(crb_oa_alloc(oa, (1ull << 60) + 12345, &b), 0);
    assert_int_equal(b.size, (1ull << 60) + 12345);
    assert_int_equal(crb_oa_alloc(oa, 7, &c), 0);
    assert_true(b.offset >= (1ull << 32) || a.offset >= (1ull << 32));
    assert_int_equal(crb_oa_used(oa), (1ull << 61) + (1ull << 60) + 12345 + 7);
    crb_oa_allocation d;
    assert_int_equal(crb_oa_alloc(oa, 1ull << 61, &d), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(crb_oa_free(oa, a.node), 0);
    assert_int_equal(crb_oa_alloc(oa, 1ull << 61, &d), 0);
    assert_int_equal(d.offset, a.offset);
    assert_int_equal(crb_oa_free(oa, b.node), 0);
    assert_int_equal(crb_oa_free(oa, c.node), 0);
    assert_int_equal(crb_oa_free(oa, d.node), 0);
    crb_oa_stats st;
    crb_oa_get_stats(oa, &st);
    assert_int_equal(st.largest_free, 1ull << 62);
    crb_oa_destroy(oa);

    /* The largest segment: every byte of the 64-bit space but the last. */
    assert_int_equal(crb_oa_create(UINT64_MAX, 1, NULL, &oa), 0);
    assert_int_equal(crb_oa_capacity(oa), UINT64_MAX);
    assert_int_equal(crb_oa_alloc(oa, UINT64_MAX - 4096, &a), 0);
    assert_int_equal(crb_oa_alloc(oa, 4096, &b), 0);
    assert_int_equal(b.offset, UINT64_MAX - 4096);
    assert_int_equal(crb_oa_alloc(oa, 1, &c), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(crb_oa_free(oa, a.node), 0);
    assert_int_equal(crb_oa_free(oa, b.node), 0);
    crb_oa_destroy(oa);

    /* 1 TiB with 4 KiB alignment. */
    assert_int_equal(crb_oa_create(1ull << 40, 4096, NULL, &oa), 0);
    assert_int_equal(crb_oa_alloc(oa, (1ull << 40) - 4095, &a), 0);
    assert_int_equal(a.size, 1ull << 40);
    crb_oa_destroy(oa);
}

static void test_node_growth(void **state)
{
    crb_oa *oa = NULL;
    assert_int_equal(crb_oa_create(1ull << 30, 64, NULL, &oa), 0);
    crb_oa_stats st;
    crb_oa_get_stats(oa, &st);
    assert_true(st.node_capacity <= 64); /* nothing sized for the worst case */
    uint64_t fp0 = crb_oa_footprint(oa);
    enum { N = 100000 };
    crb_oa_allocation *al = calloc(N, sizeof(*al));
    for (uint32_t i = 0; i < N; i++)
        assert_int_equal(crb_oa_alloc(oa, 64, &al[i]), 0);
    crb_oa_get_stats(oa, &st);
    assert_int_equal(st.allocations, N);
    assert_int_equal(st.nodes, N + 1);
    assert_true(st.node_capacity >= N + 1 && st.node_capacity <= 2 * (N + 1));
    assert_true(crb_oa_footprint(oa) > fp0);
    for (uint32_t i = 0; i < N; i++)
        assert_int_equal(crb_oa_free(oa, al[i].node), 0);
    crb_oa_get_stats(oa, &st);
    assert_int_equal(st.nodes, 1);
    free(al);
    crb_oa_destroy(oa);
}

#define MIB (1ull << 20)

/* Free space that was handed out before is reused before the never-touched
 * tail, even when the tail is the better (smaller) fit. */
static void test_warm_before_untouched(void **state)
{
    (void)state;
    crb_oa *oa = NULL;
    assert_int_equal(crb_oa_create(16 * MIB, 64, NULL, &oa), 0);
    assert_int_equal(crb_oa_touched(oa), 0);
    crb_oa_allocation a[16];
    for (int i = 0; i < 12; i++) {
        assert_int_equal(crb_oa_alloc(oa, MIB, &a[i]), 0);
        assert_int_equal(a[i].offset, (uint64_t)i * MIB); /* a fresh allocator fills in order */
    }
    assert_int_equal(crb_oa_touched(oa), 12 * MIB);
    /* A 6 MiB warm hole at the front; the untouched tail is 4 MiB (a
     * smaller bin, which a plain good-fit search would take). */
    for (int i = 0; i < 6; i++)
        assert_int_equal(crb_oa_free(oa, a[i].node), 0);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(crb_oa_alloc(oa, MIB, &a[i]), 0);
        assert_true(a[i].offset + a[i].size <= 6 * MIB);
    }
    assert_int_equal(crb_oa_touched(oa), 12 * MIB);
    /* No warm space left: now the tail, front first. */
    assert_int_equal(crb_oa_alloc(oa, MIB, &a[12]), 0);
    assert_int_equal(a[12].offset, 12 * MIB);
    assert_int_equal(crb_oa_touched(oa), 13 * MIB);
    crb_oa_destroy(oa);
}

/* The most recently freed block of a size is reused first; a freed block that
 * merged into the tail's front is reused before the untouched rest of it. */
static void test_warm_reuse_order(void **state)
{
    (void)state;
    crb_oa *oa = NULL;
    assert_int_equal(crb_oa_create(64 * MIB, 4096, NULL, &oa), 0);
    crb_oa_allocation a[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(crb_oa_alloc(oa, 3 * MIB, &a[i]), 0);
    assert_int_equal(crb_oa_free(oa, a[1].node), 0);
    assert_int_equal(crb_oa_free(oa, a[5].node), 0);
    crb_oa_allocation b;
    assert_int_equal(crb_oa_alloc(oa, 3 * MIB, &b), 0);
    assert_int_equal(b.offset, a[5].offset);
    assert_int_equal(crb_oa_alloc(oa, 3 * MIB, &b), 0);
    assert_int_equal(b.offset, a[1].offset);
    /* The last block merges into the free tail: its space comes back first. */
    assert_int_equal(crb_oa_free(oa, a[7].node), 0);
    assert_int_equal(crb_oa_alloc(oa, MIB, &b), 0);
    assert_int_equal(b.offset, a[7].offset);
    assert_int_equal(crb_oa_touched(oa), 24 * MIB);
    /* A smaller warm hole that cannot hold the request does not stop the
     * allocation: the tail serves it. */
    assert_int_equal(crb_oa_free(oa, a[3].node), 0);
    crb_oa_allocation big;
    assert_int_equal(crb_oa_alloc(oa, 8 * MIB, &big), 0);
    assert_true(big.offset >= 22 * MIB);
    crb_oa_destroy(oa);
}

/* Steady put/remove churn of mixed sizes over a small working set never
 * pushes the frontier much beyond the live peak. */
static void test_churn_stays_warm(void **state)
{
    (void)state;
    crb_oa *oa = NULL;
    assert_int_equal(crb_oa_create(1024 * MIB, 64, NULL, &oa), 0);
    enum { LIVE = 64 };
    crb_oa_allocation live[LIVE];
    uint64_t peak = 0, used = 0;
    for (int i = 0; i < LIVE; i++) {
        assert_int_equal(crb_oa_alloc(oa, MIB + (rnd() % 4) * 64 * 1024, &live[i]), 0);
        used += live[i].size;
    }
    peak = used;
    for (int round = 0; round < 20000; round++) {
        size_t k = (size_t)(rnd() % LIVE);
        used -= live[k].size;
        assert_int_equal(crb_oa_free(oa, live[k].node), 0);
        assert_int_equal(crb_oa_alloc(oa, MIB + (rnd() % 4) * 64 * 1024, &live[k]), 0);
        used += live[k].size;
        if (used > peak)
            peak = used;
    }
    /* Fragmentation allows some slack over the peak, not the whole segment. */
    assert_true(crb_oa_touched(oa) < 2 * peak);
    crb_oa_destroy(oa);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_alignment),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_exhaustion),
        cmocka_unit_test(test_fragmentation),
        cmocka_unit_test(test_coalesce_random_order),
        cmocka_unit_test(test_uniform_kv_blocks),
        cmocka_unit_test(test_reference_model),
        cmocka_unit_test(test_huge_sizes),
        cmocka_unit_test(test_node_growth),
        cmocka_unit_test(test_warm_before_untouched),
        cmocka_unit_test(test_warm_reuse_order),
        cmocka_unit_test(test_churn_stays_warm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
