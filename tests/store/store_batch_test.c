/*
 * store_batch_test.c - the batch forms against a crescent-master child: two
 * cr_stores in this process (each with its own engine and segment; the
 * reader reads the writer's segment through shared memory).
 *
 *   multi_gather_scatter  cr_store_batch_put_from_multi gathers each key from
 *       0..4 registered buffers (zero-length parts included) and
 *       cr_store_batch_get_into_multi scatters into a different layout of
 *       1..4 buffers; a missing key among present ones is OBJECT_NOT_FOUND,
 *       a too-small destination BUFFER_OVERFLOW (its buffers untouched), an
 *       empty value 0; a bad part list fails only its key; a repeated key in
 *       one batch behaves as two puts in order; upsert replaces, put keeps.
 *       The master counts one batch start and no single-key start.
 *   copying_batches  cr_store_batch_put / _upsert / cr_store_batch_get with a
 *       1 MiB local buffer, staged (CRESCENT_STORE_COPY=staged: what the
 *       copying calls do where the engine needs registered memory; the
 *       direct path is store_copy_test's): values larger than the free staging space fall
 *       back to one key at a time and still round-trip; a miss among hits
 *       and an empty value stay distinguishable; small values go in one
 *       batch (the master counts batch starts, not single-key starts).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crescent/store.h"
#include "store_harness.h"
#include "store_pattern.h"

static sh_master master;

static cr_store *open_store(uint64_t local_buffer)
{
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = master.addr;
    cfg.global_segment_size = 32 << 20;
    cfg.local_buffer_size = local_buffer;
    cr_store *s = NULL;
    assert_int_equal(cr_store_setup(&cfg, &s), 0);
    return s;
}

static double requests(const char *op)
{
    char name[128];
    snprintf(name, sizeof(name), "master_requests_total{op=\"%s\"}", op);
    double v = sh_metric(&master, name);
    return v < 0 ? 0 : v;
}

static int setup(void **state)
{
    (void)state;
    return sh_master_start(&master, NULL);
}

static int teardown(void **state)
{
    (void)state;
    int rc = sh_master_stop(&master);
    sh_kill_all();
    return rc;
}

#define NKEYS 8

static void multi_gather_scatter(void **state)
{
    (void)state;
    cr_store *w = open_store(1 << 20), *r = open_store(1 << 20);
    size_t region_size = 4 << 20;
    uint8_t *wreg = aligned_alloc(4096, region_size), *rreg = aligned_alloc(4096, region_size);
    assert_non_null(wreg);
    assert_non_null(rreg);
    assert_int_equal(cr_store_register_buffer(w, wreg, region_size), 0);
    assert_int_equal(cr_store_register_buffer(r, rreg, region_size), 0);

    /* Key i: parts (count, sizes) with zero-length parts; key 3 is empty (no parts). */
    static const size_t counts[NKEYS] = {1, 2, 3, 0, 4, 4, 2, 1};
    static const size_t part_sizes[NKEYS][4] = {
        {32768},         {32768, 32768},   {1000, 0, 70000}, {0},
        {0, 5, 0, 4096}, {1, 2, 3, 65536}, {0, 0},           {100000},
    };
    char keys_buf[NKEYS][16];
    const char *keys[NKEYS];
    void *bufs_flat[NKEYS][4];
    void *const *bufs[NKEYS];
    const size_t *sizes[NKEYS];
    uint64_t totals[NKEYS];
    uint8_t *expect[NKEYS];
    uint64_t off = 0;
    for (int i = 0; i < NKEYS; i++) {
        snprintf(keys_buf[i], sizeof(keys_buf[i]), "m%d", i);
        keys[i] = keys_buf[i];
        totals[i] = 0;
        for (size_t k = 0; k < counts[i]; k++)
            totals[i] += part_sizes[i][k];
        expect[i] = malloc(totals[i] + 1);
        sp_fill(expect[i], totals[i], 1000 + (uint64_t)i);
        uint64_t at = 0;
        for (size_t k = 0; k < counts[i]; k++) {
            bufs_flat[i][k] = wreg + off;
            memcpy(wreg + off, expect[i] + at, part_sizes[i][k]);
            at += part_sizes[i][k];
            off += part_sizes[i][k] + 64; /* gaps between parts */
        }
        bufs[i] = bufs_flat[i];
        sizes[i] = part_sizes[i];
    }
    assert_true(off < region_size);

    double single0 = requests("put_start"), batch0 = requests("batch_put_start");
    int res[NKEYS];
    assert_int_equal(cr_store_batch_put_from_multi(w, keys, bufs, sizes, counts, NKEYS, NULL, res),
                     0);
    for (int i = 0; i < NKEYS; i++)
        assert_int_equal(res[i], 0);
    assert_true(requests("batch_put_start") == batch0 + 1);
    assert_true(requests("put_start") == single0);

    /* Each value as one piece, through the copying path. */
    for (int i = 0; i < NKEYS; i++) {
        void *v = NULL;
        assert_int_equal(cr_store_get(r, keys[i], &v), (int64_t)totals[i]);
        assert_memory_equal(v, expect[i], totals[i]);
        free(v);
    }

    /* Scatter into a different layout: key i over 1 + i % 4 buffers, plus a
     * missing key and a destination one byte too small for m7. */
    const char *gkeys[NKEYS + 1];
    void *gflat[NKEYS + 1][4];
    void *const *gbufs[NKEYS + 1];
    size_t gsizes_flat[NKEYS + 1][4];
    const size_t *gsizes[NKEYS + 1];
    size_t gcounts[NKEYS + 1];
    int64_t gres[NKEYS + 1];
    memset(rreg, 0xa5, region_size);
    off = 0;
    for (int j = 0; j < NKEYS + 1; j++) {
        int i = j < 5 ? j : j - 1; /* slot 5 is the missing key */
        gkeys[j] = j == 5 ? "m-missing" : keys[i];
        uint64_t want = j == 5 ? 4096 : totals[i] + (i == 7 ? 0 : 10);
        if (i == 7 && j != 5)
            want = totals[i] - 1;
        gcounts[j] = 1 + (size_t)j % 4;
        uint64_t left = want;
        for (size_t k = 0; k < gcounts[j]; k++) {
            /* k == 1 is a zero-length buffer when there are 3 or more */
            uint64_t sz = k + 1 == gcounts[j] ? left : (k == 1 ? 0 : want / gcounts[j]);
            gsizes_flat[j][k] = sz;
            gflat[j][k] = rreg + off;
            off += sz + 64;
            left -= sz;
        }
        gbufs[j] = gflat[j];
        gsizes[j] = gsizes_flat[j];
    }
    double bget0 = requests("batch_get_replica_list"), get0 = requests("get_replica_list");
    assert_int_equal(
        cr_store_batch_get_into_multi(r, gkeys, gbufs, gsizes, gcounts, NKEYS + 1, gres), 0);
    assert_true(requests("batch_get_replica_list") == bget0 + 1);
    assert_true(requests("get_replica_list") == get0);
    for (int j = 0; j < NKEYS + 1; j++) {
        int i = j < 5 ? j : j - 1;
        if (j == 5) {
            assert_int_equal(gres[j], CR_OBJECT_NOT_FOUND);
            continue;
        }
        if (i == 7) {
            assert_int_equal(gres[j], CR_BUFFER_OVERFLOW);
            for (size_t k = 0; k < gcounts[j]; k++)
                for (size_t b = 0; b < gsizes_flat[j][k]; b++)
                    assert_int_equal(((uint8_t *)gflat[j][k])[b], 0xa5);
            continue;
        }
        assert_int_equal(gres[j], (int64_t)totals[i]);
        uint8_t *flat = malloc(totals[i] + 1);
        uint64_t at = 0;
        for (size_t k = 0; k < gcounts[j] && at < totals[i]; k++) {
            uint64_t take = gsizes_flat[j][k] < totals[i] - at ? gsizes_flat[j][k] : totals[i] - at;
            memcpy(flat + at, gflat[j][k], take);
            at += take;
        }
        assert_memory_equal(flat, expect[i], totals[i]);
        free(flat);
    }

    /* put keeps an existing key; upsert replaces; a repeated key in one batch
     * is two puts in order; a bad part list fails only its key. */
    uint8_t *nv = wreg + (3 << 20);
    sp_fill(nv, 50000, 77);
    void *p1[2] = {nv, nv + 20000};
    size_t s1[2] = {20000, 30000};
    void *pbad[1] = {NULL};
    size_t sbad[1] = {10};
    const char *ukeys[4] = {"m1", "m-new", "m-new", "m-bad"};
    void *const *ubufs[4] = {p1, p1, p1, pbad};
    const size_t *usizes[4] = {s1, s1, s1, sbad};
    size_t ucounts[4] = {2, 2, 2, 1};
    int ures[4];
    assert_int_equal(cr_store_batch_put_from_multi(w, ukeys, ubufs, usizes, ucounts, 4, NULL, ures),
                     0);
    assert_int_equal(ures[0], 0);
    assert_int_equal(ures[1], 0);
    assert_int_equal(ures[2], 0);
    assert_int_equal(ures[3], CR_INVALID_PARAMS);
    void *v = NULL;
    assert_int_equal(cr_store_get(r, "m1", &v), (int64_t)totals[1]); /* kept */
    assert_memory_equal(v, expect[1], totals[1]);
    free(v);
    assert_int_equal(cr_store_get(r, "m-new", &v), 50000);
    assert_int_equal(sp_check(v, 50000, 77), -1);
    free(v);
    assert_int_equal(cr_store_exist(r, "m-bad"), 0);
    assert_int_equal(
        cr_store_batch_upsert_from_multi(w, ukeys, ubufs, usizes, ucounts, 1, NULL, ures), 0);
    assert_int_equal(ures[0], 0);
    assert_int_equal(cr_store_get(r, "m1", &v), 50000); /* replaced */
    assert_int_equal(sp_check(v, 50000, 77), -1);
    free(v);

    /* NULL arrays: refused as a whole. */
    assert_int_equal(cr_store_batch_put_from_multi(w, keys, NULL, sizes, counts, 1, NULL, res),
                     CR_INVALID_PARAMS);
    assert_int_equal(cr_store_batch_get_into_multi(r, keys, gbufs, NULL, gcounts, 1, gres),
                     CR_INVALID_PARAMS);
    assert_int_equal(cr_store_batch_get_into_multi(r, keys, gbufs, gsizes, gcounts, 0, NULL), 0);

    for (int i = 0; i < NKEYS; i++)
        free(expect[i]);
    assert_int_equal(cr_store_unregister_buffer(w, wreg), 0);
    assert_int_equal(cr_store_unregister_buffer(r, rreg), 0);
    cr_store_destroy(r);
    cr_store_destroy(w);
    free(wreg);
    free(rreg);
}

#define NCOPY 9

static void copying_batches(void **state)
{
    (void)state;
    /* 1 MiB of staging: the 3 MiB value never fits, of the two 700 KiB
     * values at most one does at a time. */
    setenv("CRESCENT_STORE_COPY", "staged", 1);
    cr_store *w = open_store(1 << 20), *r = open_store(1 << 20);
    unsetenv("CRESCENT_STORE_COPY");
    static const size_t lens[NCOPY] = {100, 0, 3 << 20, 700 << 10, 700 << 10, 32768, 1, 4096, 100};
    const char *keys[NCOPY] = {"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c0"};
    const void *vals[NCOPY];
    uint8_t *data[NCOPY];
    for (int i = 0; i < NCOPY; i++) {
        data[i] = malloc(lens[i] + 1);
        sp_fill(data[i], lens[i], 2000 + (uint64_t)i);
        vals[i] = data[i];
    }
    int res[NCOPY];
    double single0 = requests("put_start"), batch0 = requests("batch_put_start");
    assert_int_equal(cr_store_batch_put(w, keys, vals, lens, NCOPY, NULL, res), 0);
    for (int i = 0; i < NCOPY; i++)
        assert_int_equal(res[i], 0);
    assert_true(requests("batch_put_start") == batch0 + 1);
    /* Alone: the 3 MiB value, one 700 KiB value, the repeated c0. */
    assert_true(requests("put_start") <= single0 + 3);
    assert_true(requests("put_start") >= single0 + 2);

    /* A miss among hits, an empty value, a large value. */
    const char *gkeys[NCOPY] = {"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c-missing"};
    void *out[NCOPY];
    int64_t gres[NCOPY];
    double bget0 = requests("batch_get_replica_list"), get0 = requests("get_replica_list");
    assert_int_equal(cr_store_batch_get(r, gkeys, NCOPY, out, gres), 0);
    assert_true(requests("batch_get_replica_list") == bget0 + 1);
    assert_true(requests("get_replica_list") == get0);
    for (int i = 0; i < NCOPY - 1; i++) {
        assert_int_equal(gres[i], (int64_t)lens[i]);
        assert_non_null(out[i]);
        assert_memory_equal(out[i], data[i], lens[i]); /* c0: the first put's value */
        free(out[i]);
    }
    assert_int_equal(gres[NCOPY - 1], CR_OBJECT_NOT_FOUND);
    assert_null(out[NCOPY - 1]);

    /* Upsert replaces (copying batch); put leaves an existing key alone. */
    const void *nvals[2] = {data[7], data[2]};
    size_t nlens[2] = {lens[7], lens[2]};
    const char *ukeys[2] = {"c0", "c5"};
    assert_int_equal(cr_store_batch_upsert(w, ukeys, nvals, nlens, 2, NULL, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], 0);
    assert_int_equal(cr_store_batch_put(w, keys + 3, vals, lens, 1, NULL, res), 0);
    assert_int_equal(res[0], 0);
    const char *ckeys[3] = {"c0", "c5", "c3"};
    assert_int_equal(cr_store_batch_get(r, ckeys, 3, out, gres), 0);
    assert_int_equal(gres[0], (int64_t)lens[7]);
    assert_memory_equal(out[0], data[7], lens[7]);
    assert_int_equal(gres[1], (int64_t)lens[2]);
    assert_memory_equal(out[1], data[2], lens[2]);
    assert_int_equal(gres[2], (int64_t)lens[3]);
    assert_memory_equal(out[2], data[3], lens[3]);
    for (int i = 0; i < 3; i++)
        free(out[i]);

    /* Bad input: a NULL value with a length fails that key only. */
    const void *bvals[2] = {NULL, data[0]};
    size_t blens[2] = {10, lens[0]};
    const char *bkeys[2] = {"c-null", "c-ok"};
    assert_int_equal(cr_store_batch_put(w, bkeys, bvals, blens, 2, NULL, res), 0);
    assert_int_equal(res[0], CR_INVALID_PARAMS);
    assert_int_equal(res[1], 0);
    const char *ekeys[2] = {"", "c-ok"};
    assert_int_equal(cr_store_batch_get(r, ekeys, 2, out, gres), 0);
    assert_true(gres[0] < 0);
    assert_null(out[0]);
    assert_int_equal(gres[1], (int64_t)lens[0]);
    free(out[1]);

    for (int i = 0; i < NCOPY; i++)
        free(data[i]);
    cr_store_destroy(r);
    cr_store_destroy(w);
}

int main(void)
{
    /* These tests count PUT_START requests to see which values a batch puts on their own;
     * put grants (docs/WIRE.md) would add their own PUT_STARTs and take some away. */
    setenv("CRESCENT_PUT_GRANTS", "0", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(multi_gather_scatter),
        cmocka_unit_test(copying_batches),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
