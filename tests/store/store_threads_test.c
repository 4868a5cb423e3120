/*
 * store_threads_test.c - seed 000 at the store level: short-lived pool
 * threads on one cr_store (in this process) against a crescent-master child.
 *
 * In each of 3 rounds a fresh pool of 4 threads starts; threads 0 and 1 each
 * write a 400-key batch, threads 2 and 3 one key each (802 per round, as in
 * the seed). Each thread allocates one merged
 * region holding all its values back to back (heap memory for even threads,
 * cr_alloc_shared memory for odd ones), registers it with
 * cr_store_register_buffer, fills it, writes every key with one
 * cr_store_batch_put_from, clears the region, reads every key back with one
 * cr_store_batch_get_into and verifies every byte, removes the keys with
 * cr_store_batch_remove (force: the reads hold leases), verifies the removal
 * with cr_store_batch_exist (all 0), and unregisters the region. Every call
 * and every per-key result is 0 (or the value's size for reads). After each
 * round the engine holds exactly the store's own registrations (its segment
 * and its local buffer: 2), i.e. no user registration is left behind.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crescent/store.h"
#include "store_harness.h"
#include "store_pattern.h"

#define ROUNDS              3
#define THREADS             4
#define KEYS_PER_ROUND      802
#define STORE_REGISTRATIONS 2

static const int keys_of_thread[THREADS] = {400, 400, 1, 1};

typedef struct worker {
    cr_store *s;
    int round, index, n;
    pthread_t tid;
    atomic_int *failures;
    atomic_int *verified;
} worker;

static void failure(worker *w, const char *what, int64_t rc)
{
    fprintf(stderr, "round %d thread %d: %s: %lld %s: %s\n", w->round, w->index, what,
            (long long)rc, cr_status_name((int)rc), cr_last_error_message());
    atomic_fetch_add(w->failures, 1);
}

/* KV-cache-like sizes: 2 KiB .. 14.5 KiB, not multiples of each other. */
static size_t value_size(int k)
{
    return 2048 + (size_t)(k % 9) * 1600 + (size_t)(k % 5) * 3;
}

static void *pool_thread(void *p)
{
    worker *w = p;
    int n = w->n;
    char **keys = calloc((size_t)n, sizeof(*keys));
    void **bufs = calloc((size_t)n, sizeof(*bufs));
    size_t *sizes = calloc((size_t)n, sizeof(*sizes));
    int *res = calloc((size_t)n, sizeof(*res));
    int64_t *got = calloc((size_t)n, sizeof(*got));
    size_t total = 0;
    for (int k = 0; k < n; k++) {
        sizes[k] = value_size(k);
        total += (sizes[k] + 63) / 64 * 64;
    }
    bool shared = w->index % 2 == 1;
    uint8_t *region = NULL;
    if (shared) {
        if (cr_alloc_shared(total, (void **)&region) < 0)
            region = NULL;
    } else {
        region = aligned_alloc(4096, (total + 4095) / 4096 * 4096);
    }
    if (keys == NULL || bufs == NULL || sizes == NULL || res == NULL || got == NULL ||
        region == NULL) {
        failure(w, "allocation", CR_ERR_NO_MEMORY);
        goto out;
    }
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        keys[k] = malloc(64);
        snprintf(keys[k], 64, "seed000/r%d/t%d/block-%04d", w->round, w->index, k);
        bufs[k] = region + off;
        off += (sizes[k] + 63) / 64 * 64;
    }
    int64_t rc = cr_store_register_buffer(w->s, region, total);
    if (rc != 0) {
        failure(w, "register_buffer", rc);
        goto out;
    }
    for (int k = 0; k < n; k++)
        sp_fill(bufs[k], sizes[k], (uint64_t)(w->round * 100000 + w->index * 1000 + k));
    rc =
        cr_store_batch_put_from(w->s, (const char *const *)keys, bufs, sizes, (size_t)n, NULL, res);
    if (rc != 0)
        failure(w, "batch_put_from", rc);
    for (int k = 0; k < n && rc == 0; k++)
        if (res[k] != 0)
            failure(w, keys[k], res[k]);

    memset(region, 0, total);
    rc = cr_store_batch_get_into(w->s, (const char *const *)keys, bufs, sizes, (size_t)n, got);
    if (rc != 0)
        failure(w, "batch_get_into", rc);
    for (int k = 0; k < n && rc == 0; k++) {
        if (got[k] != (int64_t)sizes[k]) {
            failure(w, keys[k], got[k] < 0 ? got[k] : CR_INTERNAL_ERROR);
        } else if (sp_check(bufs[k], sizes[k],
                            (uint64_t)(w->round * 100000 + w->index * 1000 + k)) >= 0) {
            failure(w, "verification (wrong bytes)", CR_CHECKSUM_MISMATCH);
        } else {
            atomic_fetch_add(w->verified, 1);
        }
    }

    rc = cr_store_batch_remove(w->s, (const char *const *)keys, (size_t)n, true, res);
    if (rc != 0)
        failure(w, "batch_remove", rc);
    for (int k = 0; k < n && rc == 0; k++)
        if (res[k] != 0)
            failure(w, keys[k], res[k]);
    rc = cr_store_batch_exist(w->s, (const char *const *)keys, (size_t)n, res);
    if (rc != 0)
        failure(w, "batch_exist", rc);
    for (int k = 0; k < n && rc == 0; k++)
        if (res[k] != 0)
            failure(w, "removed key still exists", res[k] > 0 ? CR_INTERNAL_ERROR : res[k]);

    rc = cr_store_unregister_buffer(w->s, region);
    if (rc != 0)
        failure(w, "unregister_buffer", rc);
out:
    if (shared)
        cr_free_shared(region);
    else
        free(region);
    for (int k = 0; keys != NULL && k < n; k++)
        free(keys[k]);
    free(keys);
    free(bufs);
    free(sizes);
    free(res);
    free(got);
    return NULL;
}

static int teardown(void **state)
{
    (void)state;
    sh_kill_all();
    return 0;
}

static void seed000_store(void **state)
{
    (void)state;
    sh_master m;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = m.addr;
    cfg.global_segment_size = 64ull << 20;
    cfg.local_buffer_size = 4ull << 20;
    cr_store *s = NULL;
    assert_int_equal(cr_store_setup(&cfg, &s), 0);
    assert_int_equal(cr_engine_registration_count(cr_store_engine(s)), STORE_REGISTRATIONS);

    int total = 0;
    for (int t = 0; t < THREADS; t++)
        total += keys_of_thread[t];
    assert_int_equal(total, KEYS_PER_ROUND);

    for (int round = 0; round < ROUNDS; round++) {
        atomic_int failures = 0, verified = 0;
        worker w[THREADS];
        for (int t = 0; t < THREADS; t++) {
            w[t] = (worker){s, round, t, keys_of_thread[t], 0, &failures, &verified};
            assert_int_equal(pthread_create(&w[t].tid, NULL, pool_thread, &w[t]), 0);
        }
        for (int t = 0; t < THREADS; t++)
            pthread_join(w[t].tid, NULL);
        fprintf(stderr, "round %d: %d keys verified, %d failures, %zu registrations\n", round,
                atomic_load(&verified), atomic_load(&failures),
                cr_engine_registration_count(cr_store_engine(s)));
        assert_int_equal(atomic_load(&failures), 0);
        assert_int_equal(atomic_load(&verified), KEYS_PER_ROUND);
        assert_int_equal(cr_engine_registration_count(cr_store_engine(s)), STORE_REGISTRATIONS);
    }
    /* Nothing is left in the cluster: removal was real, not just per-call. */
    assert_true(sh_metric(&m, "master_key_count") == 0);
    cr_store_destroy(s);
    assert_int_equal(sh_master_stop(&m), 0);
}

/*
 * cr_store_close racing calls in flight on other threads (issue 11, the C
 * lifecycle): close waits for the calls that entered before it and later
 * ones fail with CR_UNAVAILABLE_IN_CURRENT_STATUS; no call sees a freed
 * master connection (it used to: crc_call read s->master unlocked, and a
 * call in flight failed with RPC_FAIL or touched freed memory; ASan/TSan
 * builds of this test see that).
 */
typedef struct racer {
    cr_store *s;
    int index;
    pthread_t tid;
    pthread_barrier_t *go;
    atomic_int *bad, *ok, *refused;
} racer;

static void *race_thread(void *p)
{
    racer *r = p;
    char key[64];
    size_t value_len = 2 << 20; /* long calls: close lands inside some */
    char *value = malloc(value_len);
    assert_non_null(value);
    memset(value, 'r', value_len);
    pthread_barrier_wait(r->go);
    for (int i = 0; i < 100000; i++) {
        snprintf(key, sizeof(key), "race-%d-%d", r->index, i % 32);
        int64_t rc;
        switch (i % 4) {
        case 0:
            rc = cr_store_put(r->s, key, value, value_len, NULL);
            break;
        case 1:
            rc = cr_store_exist(r->s, key);
            break;
        case 2: {
            void *out = NULL;
            rc = cr_store_get(r->s, key, &out);
            free(out);
            if (rc == CR_OBJECT_NOT_FOUND)
                rc = 0;
            break;
        }
        default:
            rc = cr_store_health(r->s);
            break;
        }
        if (rc == CR_UNAVAILABLE_IN_CURRENT_STATUS) {
            atomic_fetch_add(r->refused, 1);
            break; /* closed: every later call is refused too */
        }
        if (rc < 0) {
            fprintf(stderr, "racer %d call %d: %lld %s: %s\n", r->index, i, (long long)rc,
                    cr_status_name((int)rc), cr_last_error_message());
            atomic_fetch_add(r->bad, 1);
            break;
        }
        atomic_fetch_add(r->ok, 1);
    }
    free(value);
    return NULL;
}

static void close_races_calls(void **state)
{
    (void)state;
    sh_master m;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    for (int round = 0; round < 5; round++) {
        cr_store_config cfg;
        cr_store_config_init(&cfg);
        cfg.master_address = m.addr;
        cfg.global_segment_size = 256ull << 20;
        cfg.local_buffer_size = 4ull << 20;
        cr_store *s = NULL;
        assert_int_equal(cr_store_setup(&cfg, &s), 0);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, THREADS + 1);
        atomic_int bad = 0, ok = 0, refused = 0;
        racer r[THREADS];
        for (int t = 0; t < THREADS; t++) {
            r[t] = (racer){s, t, 0, &go, &bad, &ok, &refused};
            assert_int_equal(pthread_create(&r[t].tid, NULL, race_thread, &r[t]), 0);
        }
        pthread_barrier_wait(&go);
        sh_sleep_ms(30 + 20 * round);
        assert_int_equal(cr_store_close(s), 0);
        assert_int_equal(cr_store_close(s), 0); /* idempotent */
        for (int t = 0; t < THREADS; t++)
            pthread_join(r[t].tid, NULL);
        pthread_barrier_destroy(&go);
        fprintf(stderr, "round %d: %d calls ok, %d refused after close, %d bad\n", round,
                atomic_load(&ok), atomic_load(&refused), atomic_load(&bad));
        assert_int_equal(atomic_load(&bad), 0);
        assert_int_equal(cr_store_exist(s, "race-0-0"), CR_UNAVAILABLE_IN_CURRENT_STATUS);
        cr_store_destroy(s);
    }
    assert_int_equal(sh_master_stop(&m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(seed000_store, teardown),
        cmocka_unit_test_teardown(close_races_calls, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
