/*
 * thin_threads_test.c - one thin cr_store used by many threads at once, in
 * this process, against a real crescent-master and crescent-client: eight
 * threads put and get their own keys (zero-copy from the pool, copying,
 * batches, and from shared regions each thread registers and unregisters
 * itself), every byte checked, then each reads the others' keys. The thin
 * client opens one connection per concurrently calling thread, up to its
 * limit (max_connections 4 here, so threads also wait for one); the test
 * checks the count and that no call failed. Then one thread keeps 64 calls
 * in flight through a completion queue (cr_store_cq) on the same thin store.
 * Run under ThreadSanitizer too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/store.h"
#include "thin_harness.h"

#define THREADS 8
#define ROUNDS  40
#define VAL     20000

static cr_store *store;
static _Atomic int failures;

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed * 131 + i * 7);
}

static int same(const uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)(seed * 131 + i * 7))
            return 0;
    return 1;
}

static void fail_once(const char *what, int64_t rc)
{
    if (atomic_fetch_add(&failures, 1) < 5)
        fprintf(stderr, "thread call %s failed: %lld %s\n", what, (long long)rc,
                cr_last_error_message());
}

static void *worker(void *arg)
{
    int me = (int)(intptr_t)arg;
    char key[64];
    uint8_t *pool = NULL, *shared = NULL, *copy = malloc(VAL);
    if (cr_store_pool_alloc(store, 2 * VAL, (void **)&pool) < 0 ||
        cr_alloc_shared(2 * VAL, (void **)&shared) < 0) {
        fail_once("alloc", -1);
        return NULL;
    }
    for (int r = 0; r < ROUNDS; r++) {
        unsigned seed = (unsigned)(me * 1000 + r);
        snprintf(key, sizeof(key), "th-%d-%d", me, r);
        int64_t rc;
        switch (r % 4) {
        case 0: /* zero-copy from the pool */
            fill(pool, VAL, seed);
            if ((rc = cr_store_put_from(store, key, pool, VAL, NULL)) != 0)
                fail_once("put_from", rc);
            if ((rc = cr_store_get_into(store, key, pool + VAL, VAL)) != VAL ||
                !same(pool + VAL, VAL, seed))
                fail_once("get_into", rc);
            break;
        case 1: { /* copying */
            fill(copy, VAL, seed);
            if ((rc = cr_store_put(store, key, copy, VAL, NULL)) != 0)
                fail_once("put", rc);
            void *v = NULL;
            if ((rc = cr_store_get(store, key, &v)) != VAL || !same(v, VAL, seed))
                fail_once("get", rc);
            free(v);
            break;
        }
        case 2: /* a shared region registered for the round */
            fill(shared, VAL, seed);
            if ((rc = cr_store_register_buffer(store, shared, 2 * VAL)) != 0)
                fail_once("register", rc);
            if ((rc = cr_store_put_from(store, key, shared, VAL, NULL)) != 0)
                fail_once("put_from shared", rc);
            if ((rc = cr_store_get_into(store, key, shared + VAL, VAL)) != VAL ||
                !same(shared + VAL, VAL, seed))
                fail_once("get_into shared", rc);
            if ((rc = cr_store_unregister_buffer(store, shared)) != 0)
                fail_once("unregister", rc);
            break;
        default: { /* a batch of 8 from the pool, read back copying */
            const char *keys[8];
            char kb[8][64];
            void *bufs[8];
            size_t sizes[8];
            int res[8];
            for (int k = 0; k < 8; k++) {
                snprintf(kb[k], sizeof(kb[k]), "th-%d-%d-%d", me, r, k);
                keys[k] = kb[k];
                bufs[k] = pool + k * 1000;
                sizes[k] = 1000;
                fill(bufs[k], 1000, seed + (unsigned)k);
            }
            if ((rc = cr_store_batch_put_from(store, keys, bufs, sizes, 8, NULL, res)) != 0)
                fail_once("batch_put_from", rc);
            void *vals[8];
            int64_t got[8];
            if ((rc = cr_store_batch_get(store, keys, 8, vals, got)) != 0)
                fail_once("batch_get", rc);
            for (int k = 0; k < 8; k++) {
                if (got[k] != 1000 || !same(vals[k], 1000, seed + (unsigned)k))
                    fail_once("batch_get value", got[k]);
                free(vals[k]);
            }
            break;
        }
        }
    }
    cr_store_pool_free(store, pool);
    cr_free_shared(shared);
    free(copy);
    return NULL;
}

static void *reader(void *arg)
{
    int me = (int)(intptr_t)arg;
    char key[64];
    for (int o = 0; o < THREADS; o++) {
        for (int r = 0; r < ROUNDS; r += 4) {
            snprintf(key, sizeof(key), "th-%d-%d", (o + me) % THREADS, r);
            void *v = NULL;
            int64_t rc = cr_store_get(store, key, &v);
            if (rc != VAL || !same(v, VAL, (unsigned)(((o + me) % THREADS) * 1000 + r)))
                fail_once("cross get", rc);
            free(v);
        }
    }
    return NULL;
}

/* The completion queue on a thin store: 32 put_froms from the pool, then 32 get_intos and 32
 * exists in flight from this one thread, every byte checked. */
static void async_on_thin(void)
{
    enum { N = 32, SZ = 4096 };
    uint8_t *pool = NULL;
    assert_int_equal(cr_store_pool_alloc(store, 2 * N * SZ, (void **)&pool), 0);
    cr_store_cq *q = NULL;
    assert_int_equal(cr_store_cq_create(store, NULL, &q), 0);
    char keys[N][32];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "thin-async-%d", i);
        fill(pool + (size_t)i * SZ, SZ, 900u + (unsigned)i);
        assert_int_equal(
            cr_store_submit_put_from(q, keys[i], pool + (size_t)i * SZ, SZ, NULL, (uint64_t)i), 0);
    }
    cr_store_completion got[2 * N];
    size_t have = 0;
    while (have < N) {
        int k = cr_store_cq_wait(q, got + have, N - have, N - have, 30000);
        assert_true(k > 0);
        have += (size_t)k;
    }
    for (int k = 0; k < N; k++)
        assert_int_equal(got[k].result, 0);
    uint8_t *dst = pool + (size_t)N * SZ;
    memset(dst, 0, (size_t)N * SZ);
    for (int i = 0; i < N; i++) {
        assert_int_equal(
            cr_store_submit_get_into(q, keys[i], dst + (size_t)i * SZ, SZ, (uint64_t)i), 0);
        assert_int_equal(cr_store_submit_exist(q, keys[i], (uint64_t)(N + i)), 0);
    }
    for (have = 0; have < 2 * N;) {
        int k = cr_store_cq_wait(q, got + have, 2 * N - have, 2 * N - have, 30000);
        assert_true(k > 0);
        have += (size_t)k;
    }
    for (int k = 0; k < 2 * N; k++) {
        uint64_t u = got[k].user_data;
        if (u < N) {
            assert_int_equal(got[k].result, SZ);
            assert_true(same(dst + u * SZ, SZ, 900u + (unsigned)u));
        } else {
            assert_int_equal(got[k].result, 1);
        }
    }
    cr_store_cq_destroy(q);
    assert_int_equal(cr_store_pool_free(store, pool), 0);
}

static void test_threads(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    cr_store_thin_config cfg;
    cr_store_thin_config_init(&cfg);
    cfg.server_address = d.socket;
    cfg.mem_pool_size = 16ull << 20;
    cfg.local_buffer_size = 4ull << 20;
    cfg.max_connections = 4;
    assert_int_equal(cr_store_setup_thin(&cfg, &store), 0);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, reader, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&failures), 0);
    async_on_thin();
    cr_store_thin_stats st;
    assert_int_equal(cr_store_thin_stats_get(store, &st), 0);
    assert_true(st.connections >= 1 && st.connections <= 4);
    assert_int_equal(st.slow_path_calls, 0);
    assert_int_equal(st.shared_regions, 0); /* every thread unregistered its own */
    assert_int_equal(st.pool_used, 0);
    cr_store_destroy(store);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static int teardown(void **state)
{
    (void)state;
    sh_kill_all();
    return 0;
}

int main(void)
{
    if (getenv("CRESCENT_CLIENT_BIN") == NULL)
        return 77;
    const struct CMUnitTest tests[] = {cmocka_unit_test_teardown(test_threads, teardown)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
