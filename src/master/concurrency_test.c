/*
 * concurrency_test.c - several threads on one service at once: four workers
 * doing put/upsert/end/revoke/get/exist/remove and batch calls on a shared
 * key space under memory pressure (so eviction and allocation retries run
 * concurrently), while a housekeeping thread ticks, mounts and unmounts a
 * churning segment, removes by regex and reads stats. Checks every replica
 * list it gets (distinct segments, addresses inside the mounted range) and,
 * after joining, that the accounting returns exactly to zero. Meant to run
 * under TSan as well as ASan.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "master/test_util.h"

#define KIB     1024ull
#define MIB     (1024ull * 1024ull)
#define WORKERS 4
#define ITERS   12000
#define KEYS    256

static crk_service *svc;
static _Atomic uint64_t clock_ticks;
static atomic_bool stop;
static _Atomic unsigned bad_lists;

static uint64_t now_ms(void)
{
    return 1000 + atomic_fetch_add(&clock_ticks, 1) / 8;
}

static uint64_t rnd(uint64_t *st)
{
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void check_list(const crk_replica_list *l)
{
    for (uint32_t i = 0; i < l->n; i++) {
        const crk_replica_desc *d = &l->r[i];
        uint64_t base;
        if (strcmp(d->segment, "s0") == 0)
            base = 0x10000000;
        else if (strcmp(d->segment, "s1") == 0)
            base = 0x20000000;
        else if (strcmp(d->segment, "s2") == 0)
            base = 0x30000000;
        else if (strcmp(d->segment, "churn") == 0)
            base = 0x40000000;
        else
            base = 0;
        if (base == 0 || d->address < base || d->address + d->size > base + 4 * MIB)
            atomic_fetch_add(&bad_lists, 1);
        for (uint32_t j = i + 1; j < l->n; j++)
            if (strcmp(d->segment, l->r[j].segment) == 0)
                atomic_fetch_add(&bad_lists, 1);
    }
}

static void *worker(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    uint64_t st = id * 7919;
    crk_client_id me = tu_client(100 + id);
    char key[32];
    for (int it = 0; it < ITERS; it++) {
        snprintf(key, sizeof(key), "key-%llu", (unsigned long long)(rnd(&st) % KEYS));
        uint64_t r = rnd(&st) % 100;
        uint64_t t = now_ms();
        crk_replica_list l;
        crk_replicate_config cfg = tu_cfg(1 + (uint32_t)(rnd(&st) % 3));
        if (r < 30) {
            uint64_t size = rnd(&st) % (64 * KIB);
            bool up = rnd(&st) % 4 == 0;
            int rc = up ? crk_upsert_start(svc, me, key, size, &cfg, t, &l)
                        : crk_put_start(svc, me, key, size, &cfg, t, &l);
            if (rc == 0) {
                check_list(&l);
                if (rnd(&st) % 10 == 0)
                    crk_put_revoke(svc, me, key, now_ms());
                else
                    crk_put_end(svc, me, key, now_ms());
            }
        } else if (r < 65) {
            if (crk_get_replica_list(svc, key, t, &l) == 0)
                check_list(&l);
        } else if (r < 75) {
            crk_exist(svc, key, t);
        } else if (r < 85) {
            crk_remove(svc, key, rnd(&st) % 2 == 0, t);
        } else {
            const char *keys[8];
            char store[8][32];
            uint64_t sizes[8];
            int res[8];
            crk_replica_list lists[8];
            for (int i = 0; i < 8; i++) {
                snprintf(store[i], sizeof(store[i]), "key-%llu",
                         (unsigned long long)(rnd(&st) % KEYS));
                keys[i] = store[i];
                sizes[i] = rnd(&st) % (16 * KIB);
            }
            switch (r % 4) {
            case 0:
                crk_batch_put_start(svc, me, keys, sizes, 8, &cfg, t, res, lists, false);
                crk_batch_put_end(svc, me, keys, 8, now_ms(), res);
                break;
            case 1:
                crk_batch_get_replica_list(svc, keys, 8, t, res, lists, false);
                for (int i = 0; i < 8; i++)
                    if (res[i] == 0)
                        check_list(&lists[i]);
                break;
            case 2:
                crk_batch_exist(svc, keys, 8, t, res);
                break;
            default:
                crk_batch_remove(svc, keys, 8, false, t, res);
                break;
            }
        }
    }
    return NULL;
}

static void *housekeeper(void *arg)
{
    crk_client_id churner = tu_client(50);
    crk_segment_spec spec = {.name = "churn", .base = 0x40000000, .size = 4 * MIB};
    int round = 0;
    while (!atomic_load(&stop)) {
        uint64_t t = now_ms();
        crk_tick(svc, t);
        if (round % 3 == 0)
            crk_mount_segment(svc, churner, &spec, t, NULL);
        else if (round % 3 == 2)
            crk_unmount_segment(svc, churner, "churn", t);
        if (round % 7 == 0) {
            uint64_t n;
            crk_remove_by_regex(svc, "^key-1[0-9]$", false, t, &n);
        }
        crk_stats st;
        crk_get_stats(svc, &st);
        crk_segment_info info[8];
        size_t total;
        crk_list_segments(svc, info, 8, &total);
        int status;
        crk_ping(svc, tu_client(1), t, &status);
        round++;
    }
    return NULL;
}

static void test_threads(void **state)
{
    crk_config c = tu_config();
    c.default_kv_lease_ttl_ms = 100; /* the fake clock runs ~6 s in all */
    c.put_start_discard_timeout_ms = 300;
    c.put_start_release_timeout_ms = 800;
    svc = tu_service(&c, 0);
    tu_mount(svc, tu_client(1), "s0", 0x10000000, 4 * MIB, 0);
    tu_mount(svc, tu_client(1), "s1", 0x20000000, 4 * MIB, 0);
    tu_mount(svc, tu_client(1), "s2", 0x30000000, 4 * MIB, 0);
    pthread_t th[WORKERS], hk;
    assert_int_equal(pthread_create(&hk, NULL, housekeeper, NULL), 0);
    for (uintptr_t i = 0; i < WORKERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, worker, (void *)(i + 1)), 0);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(th[i], NULL);
    atomic_store(&stop, true);
    pthread_join(hk, NULL);
    assert_int_equal(atomic_load(&bad_lists), 0);

    crk_stats st;
    crk_get_stats(svc, &st);
    fprintf(stderr,
            "concurrency: %llu keys left, %llu eviction rounds (%llu keys), %llu alloc "
            "failures, %llu leases, %llu preemptions, %llu deferred releases\n",
            (unsigned long long)st.keys, (unsigned long long)st.evictions_attempted,
            (unsigned long long)st.evicted_keys, (unsigned long long)st.alloc_failures,
            (unsigned long long)st.leases_granted, (unsigned long long)st.put_start_discards,
            (unsigned long long)st.put_start_releases);
    assert_true(st.evictions_attempted > 0);

    /* Drain: sweep writes, drop everything, release deferred space. */
    uint64_t t = now_ms() + 700000;
    assert_int_equal(crk_tick(svc, t), 0);
    uint64_t removed;
    assert_int_equal(crk_remove_all(svc, true, t, &removed), 0);
    assert_int_equal(crk_tick(svc, t + 20000), 0);
    crk_get_stats(svc, &st);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.writes_in_flight, 0);
    assert_int_equal(st.discarded_bytes, 0);
    assert_int_equal(st.allocated_bytes, 0);
    assert_int_equal(st.soft_pinned_keys, 0);
    crk_segment_info info[4];
    size_t total = 0;
    assert_int_equal(crk_list_segments(svc, info, 4, &total), 0);
    for (size_t i = 0; i < total && i < 4; i++)
        assert_int_equal(info[i].used, 0);
    crk_service_destroy(svc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
