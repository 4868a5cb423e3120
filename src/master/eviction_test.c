/*
 * eviction_test.c - eviction: above the watermark in approximate LRU order
 * (recently read objects survive), never leased / hard-pinned / in-flight
 * objects, soft-pinned ones only as a last resort and only when allowed,
 * expired soft pins are plain cache, existence probes do not protect objects
 * (Mooncake #2187), a failing put_start evicts and retries a bounded number of
 * times, and the counters.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "master/test_util.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)

static crk_client_id A;

static void key_of(char *buf, size_t n, const char *prefix, int i)
{
    snprintf(buf, n, "%s%d", prefix, i);
}

static void test_watermark_lru(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    A = tu_client(1);
    const int slots = 6400, filled = 6080; /* 95 % */
    tu_mount(s, A, "seg", 0, (uint64_t)slots * KIB, 0);
    char key[32];
    for (int i = 0; i < filled; i++) {
        key_of(key, sizeof(key), "k", i);
        assert_int_equal(tu_put(s, A, key, KIB, NULL, (uint64_t)i / 100), 0);
    }
    /* Read the first half later: it becomes the most recently used. */
    crk_replica_list g;
    for (int i = 0; i < filled / 2; i++) {
        key_of(key, sizeof(key), "k", i);
        assert_int_equal(crk_get_replica_list(s, key, 1000, &g), 0);
    }
    /* Leases end at 11000; the tick at 20000 is above the watermark. */
    assert_int_equal(crk_tick(s, 20000), 0);
    crk_stats st = tu_stats(s);
    assert_int_equal(st.evictions_attempted, 1);
    assert_int_equal(st.evictions_successful, 1);
    assert_true(st.evicted_keys >= 600); /* 5 % of used + the excess over 90 % */
    assert_true(st.allocated_bytes <= (uint64_t)(0.90 * slots * KIB));
    assert_int_equal(st.evicted_bytes, st.evicted_keys * KIB);
    assert_int_equal(st.keys, (uint64_t)filled - st.evicted_keys);
    for (int i = 0; i < filled / 2; i++) {
        key_of(key, sizeof(key), "k", i);
        assert_int_equal(crk_exist(s, key, 20001), 1); /* recently read: kept */
    }
    /* Below the watermark now: the next tick evicts nothing. */
    assert_int_equal(crk_tick(s, 20002), 0);
    assert_int_equal(tu_stats(s).evictions_attempted, 1);
    crk_service_destroy(s);
}

/* 16 slots of 4 KiB; objects of every kind. */
static crk_service *mixed(bool allow_soft)
{
    crk_config c = tu_config();
    c.allow_evict_soft_pinned_objects = allow_soft;
    crk_service *s = tu_service(&c, 0);
    A = tu_client(1);
    tu_mount(s, A, "seg", 0, 16 * 4 * KIB, 0);
    crk_replicate_config hard = tu_cfg(1), soft = tu_cfg(1), plain = tu_cfg(1);
    hard.hard_pin = true;
    soft.soft_pin_action = CRK_SOFT_PIN_ENABLE;
    soft.soft_pin_ttl_ms = 1000000;
    char key[32];
    for (int i = 0; i < 4; i++) {
        key_of(key, sizeof(key), "hard", i);
        assert_int_equal(tu_put(s, A, key, 4 * KIB, &hard, 1), 0);
    }
    for (int i = 0; i < 2; i++) {
        key_of(key, sizeof(key), "soft", i);
        assert_int_equal(tu_put(s, A, key, 4 * KIB, &soft, 2), 0);
    }
    crk_replica_list l;
    for (int i = 0; i < 3; i++) {
        key_of(key, sizeof(key), "leased", i);
        assert_int_equal(tu_put(s, A, key, 4 * KIB, &plain, 3), 0);
        assert_int_equal(crk_get_replica_list(s, key, 100, &l), 0); /* until 10100 */
    }
    for (int i = 0; i < 2; i++) {
        key_of(key, sizeof(key), "inflight", i);
        assert_int_equal(crk_put_start(s, A, key, 4 * KIB, &plain, 4, &l), 0);
    }
    assert_int_equal(tu_put(s, A, "upserting", 2 * KIB, &plain, 5), 0);
    assert_int_equal(crk_upsert_start(s, A, "upserting", 2 * KIB, &plain, 6, &l), 0);
    assert_int_equal(tu_put(s, A, "plain", 4 * KIB, &plain, 7), 0);
    return s;
}

static void check_survivors(crk_service *s, bool soft_expected)
{
    char key[32];
    crk_key_info info;
    for (int i = 0; i < 4; i++) {
        key_of(key, sizeof(key), "hard", i);
        assert_int_equal(crk_exist(s, key, 200), 1);
    }
    for (int i = 0; i < 3; i++) {
        key_of(key, sizeof(key), "leased", i);
        assert_int_equal(crk_exist(s, key, 200), 1);
    }
    for (int i = 0; i < 2; i++) {
        key_of(key, sizeof(key), "inflight", i);
        assert_int_equal(crk_query_key(s, key, 200, &info), 0);
        assert_true(info.write_in_flight);
        key_of(key, sizeof(key), "soft", i);
        assert_int_equal(crk_exist(s, key, 200), soft_expected ? 1 : 0);
    }
    assert_int_equal(crk_exist(s, "upserting", 200), 1);
    assert_int_equal(crk_exist(s, "plain", 200), 0);
}

static void test_respects_pins_leases_inflight(void **state)
{
    crk_service *s = mixed(true);
    /* Ask for everything: only the plain object, then (last resort) the soft ones. */
    assert_int_equal(crk_evict(s, UINT64_MAX / 2, 200), 3);
    check_survivors(s, false);
    assert_int_equal(crk_evict(s, UINT64_MAX / 2, 201), 0);
    crk_stats st = tu_stats(s);
    assert_int_equal(st.evictions_attempted, 2);
    assert_int_equal(st.evictions_successful, 1);
    crk_service_destroy(s);

    s = mixed(false);
    assert_int_equal(crk_evict(s, UINT64_MAX / 2, 200), 1);
    check_survivors(s, true);
    crk_service_destroy(s);
}

static void test_soft_pin_last_resort(void **state)
{
    crk_config c = tu_config();
    crk_service *s = tu_service(&c, 0);
    A = tu_client(1);
    tu_mount(s, A, "seg", 0, 10 * 4 * KIB, 0);
    crk_replicate_config soft = tu_cfg(1), plain = tu_cfg(1);
    soft.soft_pin_action = CRK_SOFT_PIN_ENABLE;
    char key[32];
    for (int i = 0; i < 5; i++) { /* soft ones are the oldest */
        key_of(key, sizeof(key), "soft", i);
        assert_int_equal(tu_put(s, A, key, 4 * KIB, &soft, 1), 0);
    }
    for (int i = 0; i < 5; i++) {
        key_of(key, sizeof(key), "plain", i);
        assert_int_equal(tu_put(s, A, key, 4 * KIB, &plain, 2), 0);
    }
    assert_int_equal(crk_evict(s, 3 * 4 * KIB, 100), 3);
    crk_stats st = tu_stats(s);
    assert_int_equal(st.keys, 7);
    for (int i = 0; i < 5; i++) {
        key_of(key, sizeof(key), "soft", i);
        assert_int_equal(crk_exist(s, key, 101), 1);
    }
    /* 5 more: the 2 plain ones are not enough, soft-pinned ones make up the rest. */
    assert_int_equal(crk_evict(s, 5 * 4 * KIB, 102), 5);
    assert_int_equal(tu_stats(s).keys, 2);
    for (int i = 0; i < 5; i++) {
        key_of(key, sizeof(key), "plain", i);
        assert_int_equal(crk_exist(s, key, 103), 0);
    }
    crk_service_destroy(s);
}

static void test_expired_soft_pin_is_plain(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    A = tu_client(1);
    tu_mount(s, A, "seg", 0, 64 * KIB, 0);
    crk_replicate_config soft = tu_cfg(1);
    soft.soft_pin_action = CRK_SOFT_PIN_ENABLE;
    soft.soft_pin_ttl_ms = 1000;
    assert_int_equal(tu_put(s, A, "soft", 4 * KIB, &soft, 0), 0);
    assert_int_equal(tu_put(s, A, "plain", 4 * KIB, NULL, 10), 0);
    /* Before the deadline the soft one is skipped in pass 1... */
    assert_int_equal(crk_evict(s, 4 * KIB, 999), 1);
    assert_int_equal(crk_exist(s, "soft", 999), 1);
    assert_int_equal(tu_put(s, A, "plain", 4 * KIB, NULL, 999), 0);
    /* ...after it, it is the least recently used plain object. */
    assert_int_equal(crk_evict(s, 4 * KIB, 1000), 1);
    assert_int_equal(crk_exist(s, "soft", 1000), 0);
    assert_int_equal(crk_exist(s, "plain", 1000), 1);
    crk_service_destroy(s);
}

static void test_probes_do_not_protect(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    A = tu_client(1);
    tu_mount(s, A, "seg", 0, 1024 * KIB, 0);
    char key[32];
    const char *keys[10];
    char store[10][32];
    for (int i = 0; i < 10; i++) {
        key_of(store[i], sizeof(store[i]), "p", i);
        keys[i] = store[i];
        assert_int_equal(tu_put(s, A, keys[i], 4 * KIB, NULL, 0), 0);
    }
    int res[10];
    for (uint64_t t = 1; t < 1000; t++) { /* ~1 k probes/s as in the issue */
        key_of(key, sizeof(key), "p", (int)(t % 10));
        assert_int_equal(crk_exist(s, key, t), 1);
        assert_int_equal(crk_batch_exist(s, keys, 10, t, res), 0);
    }
    assert_int_equal(crk_evict(s, 40 * KIB, 1000), 10);
    crk_service_destroy(s);
}

static void test_lease_expiry_allows_eviction(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    A = tu_client(1);
    tu_mount(s, A, "seg", 0, 64 * KIB, 0);
    assert_int_equal(tu_put(s, A, "k", 4 * KIB, NULL, 0), 0);
    crk_replica_list g;
    assert_int_equal(crk_get_replica_list(s, "k", 0, &g), 0);
    assert_int_equal(crk_evict(s, 4 * KIB, 9999), 0);
    assert_int_equal(crk_evict(s, 4 * KIB, 10000), 1);
    crk_service_destroy(s);
}

static void test_alloc_failure_evicts(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    A = tu_client(1);
    tu_mount(s, A, "seg", 0, 4 * 4 * KIB, 0);
    char key[32];
    for (int i = 0; i < 4; i++) {
        key_of(key, sizeof(key), "old", i);
        assert_int_equal(tu_put(s, A, key, 4 * KIB, NULL, (uint64_t)i), 0);
    }
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, A, "new", 4 * KIB, NULL, 10, &l), 0);
    crk_stats st = tu_stats(s);
    assert_int_equal(st.evictions_attempted, 1);
    assert_int_equal(st.evicted_keys, 1);
    assert_int_equal(st.alloc_failures, 0);
    assert_int_equal(crk_exist(s, "old0", 11), 0); /* least recently used went */
    assert_int_equal(crk_exist(s, "old1", 11), 1);
    assert_int_equal(crk_put_end(s, A, "new", 11), 0);
    crk_service_destroy(s);

    /* Everything hard-pinned: bounded retries, then -200. */
    s = tu_service(NULL, 0);
    tu_mount(s, A, "seg", 0, 4 * 4 * KIB, 0);
    crk_replicate_config hard = tu_cfg(1);
    hard.hard_pin = true;
    for (int i = 0; i < 4; i++) {
        key_of(key, sizeof(key), "pin", i);
        assert_int_equal(tu_put(s, A, key, 4 * KIB, &hard, 0), 0);
    }
    assert_int_equal(crk_put_start(s, A, "new", 4 * KIB, NULL, 10, &l), CR_NO_AVAILABLE_HANDLE);
    assert_true(strstr(cr_last_error_message(), "after 2 evictions") != NULL);
    st = tu_stats(s);
    assert_int_equal(st.evictions_attempted, 2);
    assert_int_equal(st.evictions_successful, 0);
    assert_int_equal(st.alloc_failures, 1);
    assert_int_equal(st.failures[CRK_OP_PUT_START], 1);
    crk_service_destroy(s);
}

/* --- readers release their leases (issue 11 item 8) ------------------------------------ */

static uint64_t get_token(crk_service *s, const char *key, uint64_t now)
{
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(s, key, now, &l), 0);
    assert_true(l.lease_token != 0);
    return l.lease_token;
}

static void upsert(crk_service *s, const char *key, uint64_t size, uint64_t now)
{
    crk_replica_list l;
    int rc = crk_upsert_start(s, tu_client(1), key, size, NULL, now, &l);
    if (rc != 0)
        fail_msg("upsert at %llu: %s", (unsigned long long)now, cr_last_error_message());
    assert_int_equal(crk_put_end(s, tu_client(1), key, now), 0);
}

/* Upserting one key that is read in between fills no segment: each replaced
 * version goes as soon as its reader released it, not a lease TTL later. */
static void test_upsert_with_readers_does_not_fill(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    tu_mount(s, tu_client(1), "seg", 0, 64 * MIB, 0);
    upsert(s, "k", MIB, 5);
    for (uint64_t i = 0; i < 300; i++) {
        /* The reader reads version i while version i + 1 replaces it. */
        uint64_t token = get_token(s, "k", 10 + i);
        upsert(s, "k", MIB, 10 + i);
        assert_true(tu_stats(s).discarded_bytes == MIB); /* i waits for its reader ... */
        const char *keys[] = {"k"};
        crk_release_leases(s, keys, &token, 1, 10 + i);
        assert_true(tu_stats(s).discarded_bytes == 0); /* ... and goes when it is done */
    }
    crk_stats st = tu_stats(s);
    assert_int_equal(st.keys, 1);
    assert_true(st.allocated_bytes == MIB);
    assert_true(st.lease_releases == 300);
    assert_true(st.early_releases == 300);
    /* Without releases the same loop holds every version for the lease TTL
     * (10 s here, longer than the loop): 64 versions fill the segment. */
    crk_replica_list l;
    int rc = 0;
    uint64_t i = 0;
    for (; i < 300 && rc == 0; i++) {
        rc = crk_upsert_start(s, tu_client(1), "k", MIB, NULL, 1000 + i, &l);
        if (rc == 0) {
            assert_int_equal(crk_put_end(s, tu_client(1), "k", 1000 + i), 0);
            get_token(s, "k", 1000 + i);
        }
    }
    assert_int_equal(rc, CR_NO_AVAILABLE_HANDLE);
    assert_true(i < 80);
    assert_true(tu_stats(s).discarded_bytes > 32 * MIB);
    /* They all go once the leases have run out. */
    assert_int_equal(crk_tick(s, 1000 + i + 10000), 0);
    assert_true(tu_stats(s).discarded_bytes == 0);
    crk_service_destroy(s);
}

/* Every reader of an era must release; a stale token changes nothing; the
 * lease itself still blocks a plain remove for its TTL. */
static void test_release_counts_readers(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    tu_mount(s, tu_client(1), "seg", 0, 64 * MIB, 0);
    const char *keys[] = {"k"};
    upsert(s, "k", MIB, 1);
    uint64_t t1 = get_token(s, "k", 10), t2 = get_token(s, "k", 20);
    assert_true(t1 == t2); /* one era */
    crk_release_leases(s, keys, &t1, 1, 30);
    assert_int_equal(crk_remove(s, "k", false, 31), CR_OBJECT_HAS_LEASE); /* the TTL holds */
    upsert(s, "k", MIB, 32);
    assert_true(tu_stats(s).discarded_bytes == MIB); /* t2 still reads the old version */
    crk_release_leases(s, keys, &t2, 1, 33);
    assert_true(tu_stats(s).discarded_bytes == 0);

    /* All reads released before the upsert: the old version goes at once. */
    uint64_t t3 = get_token(s, "k", 40);
    crk_release_leases(s, keys, &t3, 1, 41);
    upsert(s, "k", MIB, 42);
    assert_true(tu_stats(s).discarded_bytes == 0);
    assert_true(tu_stats(s).allocated_bytes == MIB);

    /* A token of a lapsed lease does not count in the next era. */
    uint64_t old = get_token(s, "k", 50);      /* lease until 10050, never released */
    uint64_t fresh = get_token(s, "k", 20000); /* lapsed: a new era */
    assert_true(fresh != old);
    crk_release_leases(s, keys, &old, 1, 20001);
    uint64_t junk[] = {0, 999999, UINT64_MAX};
    const char *jk[] = {"k", "k", "nokey"};
    crk_release_leases(s, jk, junk, 3, 20002);
    upsert(s, "k", MIB, 20003);
    assert_true(tu_stats(s).discarded_bytes == MIB); /* "fresh" still reads */
    crk_release_leases(s, keys, &old, 1, 20004);     /* stale: nothing */
    assert_true(tu_stats(s).discarded_bytes == MIB);
    crk_release_leases(s, keys, &fresh, 1, 20005);
    assert_true(tu_stats(s).discarded_bytes == 0);

    /* A forced remove of a read object: its space waits for the reader. */
    assert_int_equal(tu_put(s, tu_client(1), "f", MIB, NULL, 30000), 0);
    uint64_t tf = get_token(s, "f", 30001);
    assert_int_equal(crk_remove(s, "f", true, 30002), 0);
    assert_true(tu_stats(s).discarded_bytes == MIB);
    assert_true(tu_stats(s).discard_entries == 1);
    const char *fk[] = {"f"};
    crk_release_leases(s, fk, &tf, 1, 30003);
    crk_stats st = tu_stats(s);
    assert_true(st.discarded_bytes == 0);
    assert_true(st.discard_entries == 0);
    assert_true(st.early_released_bytes >= MIB);
    assert_true(st.allocated_bytes == MIB); /* "k" */
    crk_service_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_watermark_lru),
        cmocka_unit_test(test_respects_pins_leases_inflight),
        cmocka_unit_test(test_soft_pin_last_resort),
        cmocka_unit_test(test_expired_soft_pin_is_plain),
        cmocka_unit_test(test_probes_do_not_protect),
        cmocka_unit_test(test_lease_expiry_allows_eviction),
        cmocka_unit_test(test_alloc_failure_evicts),
        cmocka_unit_test(test_upsert_with_readers_does_not_fill),
        cmocka_unit_test(test_release_counts_readers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
