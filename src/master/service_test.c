/*
 * service_test.c - the master core's object table and key operations:
 * configuration checks, two-phase put with owner, visibility, empty values,
 * bad input, leases (remove blocked, probes do not extend), force remove
 * deferring reuse, remove / regex / all, batches, preemption of stale puts and
 * the deferred release, the stale-write sweep, upsert, soft/hard pin settings,
 * operator queries and counters.
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

static void test_config_validation(void **state)
{
    crk_service *s = (crk_service *)0x1;
    crk_config c;
    crk_config_default(&c);
    c.eviction_ratio = 1.5;
    assert_int_equal(crk_service_create(&c, 0, &s), CR_INVALID_PARAMS);
    crk_config_default(&c);
    c.eviction_high_watermark_ratio = -0.1;
    assert_int_equal(crk_service_create(&c, 0, &s), CR_INVALID_PARAMS);
    crk_config_default(&c);
    c.put_start_release_timeout_ms = 1000; /* < discard 30000 */
    assert_int_equal(crk_service_create(&c, 0, &s), CR_INVALID_PARAMS);
    crk_config_default(&c);
    c.default_kv_soft_pin_ttl_ms = c.max_kv_soft_pin_ttl_ms + 1;
    assert_int_equal(crk_service_create(&c, 0, &s), CR_INVALID_PARAMS);
    crk_config_default(&c);
    c.alloc_alignment = 48;
    assert_int_equal(crk_service_create(&c, 0, &s), CR_INVALID_PARAMS);
    crk_config_default(&c);
    c.default_kv_lease_ttl_ms = 0;
    assert_int_equal(crk_service_create(&c, 0, &s), CR_INVALID_PARAMS);
    assert_ptr_equal(s, (crk_service *)0x1);

    s = tu_service(NULL, 0);
    const crk_config *eff = crk_service_config(s);
    assert_int_equal(eff->default_kv_lease_ttl_ms, 10000);
    assert_int_equal(eff->restart_fence_ms, 11000);
    assert_int_equal(eff->put_start_discard_timeout_ms, 30000);
    assert_int_equal(eff->put_start_release_timeout_ms, 600000);
    assert_true(eff->eviction_high_watermark_ratio == 0.90);
    crk_service_destroy(s);
    crk_service_destroy(NULL);
    assert_string_equal(crk_op_name(CRK_OP_PUT_START), "put_start");
    assert_string_equal(crk_op_name(999), "unknown");
}

static void test_put_get_basic(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    uint64_t epoch = tu_mount(s, a, "seg-a", 0x100000, 1 * MIB, 0);
    assert_int_equal(epoch, 1);
    crk_replicate_config cfg = tu_cfg(1);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, a, "k1", 1000, &cfg, 10, &l), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.value_size, 1000);
    assert_string_equal(l.r[0].segment, "seg-a");
    assert_true(l.r[0].address >= 0x100000 && l.r[0].address + 1000 <= 0x100000 + MIB);
    assert_int_equal(l.r[0].address % 64, 0);
    assert_int_equal(l.r[0].size, 1000);
    assert_int_equal(l.r[0].mount_epoch, 1);
    uint64_t addr = l.r[0].address;

    /* Invisible until put_end. */
    crk_replica_list g;
    assert_int_equal(crk_get_replica_list(s, "k1", 11, &g), CR_REPLICA_IS_NOT_READY);
    assert_int_equal(crk_exist(s, "k1", 11), 0);
    assert_int_equal(crk_put_end(s, a, "k1", 12), 0);
    assert_int_equal(crk_exist(s, "k1", 13), 1);
    assert_int_equal(crk_get_replica_list(s, "k1", 14, &g), 0);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.r[0].address, addr);
    assert_int_equal(g.value_size, 1000);
    assert_int_equal(g.lease_ttl_ms, 10000);
    /* A repeated put_end is a no-op; a second put reports the key exists. */
    assert_int_equal(crk_put_end(s, a, "k1", 15), 0);
    assert_int_equal(crk_put_start(s, a, "k1", 5, &cfg, 16, &l), CR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(crk_get_replica_list(s, "missing", 17, &g), CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_exist(s, "missing", 17), 0);

    crk_stats st = tu_stats(s);
    assert_int_equal(st.keys, 1);
    assert_int_equal(st.capacity_bytes, MIB);
    assert_int_equal(st.allocated_bytes, 1024); /* 1000 rounded to 64 */
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.clients, 1);
    assert_int_equal(st.requests[CRK_OP_PUT_START], 2);
    assert_int_equal(st.failures[CRK_OP_PUT_START], 1);
    assert_int_equal(st.requests[CRK_OP_GET_REPLICA_LIST], 3);
    assert_int_equal(st.leases_granted, 1);
    crk_service_destroy(s);
}

static void test_owner_and_revoke(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1), b = tu_client(2);
    tu_mount(s, a, "seg", 0, MIB, 0);
    crk_replicate_config cfg = tu_cfg(1);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, a, "k", 4096, &cfg, 1, &l), 0);
    assert_int_equal(crk_put_end(s, b, "k", 2), CR_ILLEGAL_CLIENT);
    assert_int_equal(crk_put_revoke(s, b, "k", 2), CR_ILLEGAL_CLIENT);
    assert_int_equal(tu_stats(s).writes_in_flight, 1);
    assert_int_equal(crk_put_revoke(s, a, "k", 3), 0);
    assert_int_equal(crk_exist(s, "k", 4), 0);
    assert_int_equal(crk_put_revoke(s, a, "k", 4), CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_put_end(s, a, "k", 4), CR_OBJECT_NOT_FOUND);
    crk_stats st = tu_stats(s);
    assert_int_equal(st.allocated_bytes, 0);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.writes_in_flight, 0);
    /* Revoke of a complete object: nothing in flight. */
    assert_int_equal(tu_put(s, a, "done", 64, &cfg, 5), 0);
    assert_int_equal(crk_put_revoke(s, a, "done", 6), CR_INVALID_WRITE);
    crk_service_destroy(s);
}

static void test_invalid_inputs(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 0, MIB, 0);
    crk_replicate_config cfg = tu_cfg(1);
    crk_replica_list l;
    memset(&l, 0xAB, sizeof(l));
    crk_replica_list before = l;
    char longkey[CRK_MAX_KEY_LEN + 2];
    memset(longkey, 'x', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';

    assert_int_equal(crk_put_start(s, a, NULL, 1, &cfg, 1, &l), CR_INVALID_KEY);
    assert_int_equal(crk_put_start(s, a, "", 1, &cfg, 1, &l), CR_INVALID_KEY);
    assert_int_equal(crk_put_start(s, a, longkey, 1, &cfg, 1, &l), CR_INVALID_KEY);
    assert_true(strstr(cr_last_error_message(), "longer") != NULL);
    longkey[CRK_MAX_KEY_LEN] = '\0'; /* exactly the limit is fine */
    assert_int_equal(tu_put(s, a, longkey, 1, &cfg, 1), 0);
    assert_int_equal(crk_exist(s, longkey, 1), 1);
    memset(&l, 0xAB, sizeof(l));

    crk_client_id zero = {0, 0};
    assert_int_equal(crk_put_start(s, zero, "k", 1, &cfg, 1, &l), CR_ILLEGAL_CLIENT);
    cfg.replica_num = 0;
    assert_int_equal(crk_put_start(s, a, "k", 1, &cfg, 1, &l), CR_INVALID_PARAMS);
    cfg.replica_num = CRK_MAX_REPLICAS + 1;
    assert_int_equal(crk_put_start(s, a, "k", 1, &cfg, 1, &l), CR_INVALID_PARAMS);
    cfg = tu_cfg(1);
    cfg.soft_pin_action = CRK_SOFT_PIN_ENABLE;
    cfg.soft_pin_ttl_ms = 86400001;
    assert_int_equal(crk_put_start(s, a, "k", 1, &cfg, 1, &l), CR_INVALID_PARAMS);
    assert_true(strstr(cr_last_error_message(), "max_kv_soft_pin_ttl") != NULL);
    cfg.soft_pin_action = CRK_SOFT_PIN_PRESERVE;
    cfg.soft_pin_ttl_ms = 5000;
    assert_int_equal(crk_put_start(s, a, "k", 1, &cfg, 1, &l), CR_INVALID_PARAMS);
    cfg.soft_pin_action = 7;
    cfg.soft_pin_ttl_ms = 0;
    assert_int_equal(crk_put_start(s, a, "k", 1, &cfg, 1, &l), CR_INVALID_PARAMS);
    cfg = tu_cfg(1);
    cfg.n_preferred = 2;
    assert_int_equal(crk_put_start(s, a, "k", 1, &cfg, 1, &l), CR_INVALID_PARAMS);
    assert_int_equal(crk_put_start(s, a, "k", UINT64_MAX, NULL, 1, &l), CR_INVALID_PARAMS);
    /* Output untouched by every failure. */
    assert_memory_equal(&l, &before, sizeof(l));
    assert_int_equal(crk_exist(s, "k", 1), 0);
    assert_int_equal(crk_exist(s, "", 1), CR_INVALID_KEY);
    assert_int_equal(crk_remove(s, NULL, false, 1), CR_INVALID_KEY);
    /* NULL config means one replica, no pins. */
    assert_int_equal(crk_put_start(s, a, "k", 1, NULL, 1, &l), 0);
    assert_int_equal(l.n, 1);
    crk_service_destroy(s);
}

static void test_empty_value_and_no_space(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    crk_replicate_config cfg = tu_cfg(1);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, a, "k", 10, &cfg, 1, &l), CR_NO_AVAILABLE_HANDLE);
    assert_true(strstr(cr_last_error_message(), "no mounted segment") != NULL);
    tu_mount(s, a, "seg", 0, 64 * KIB, 0);
    assert_int_equal(crk_put_start(s, a, "empty", 0, &cfg, 1, &l), 0);
    assert_int_equal(l.r[0].size, 0);
    assert_int_equal(crk_put_end(s, a, "empty", 1), 0);
    crk_replica_list g;
    assert_int_equal(crk_get_replica_list(s, "empty", 2, &g), 0);
    assert_int_equal(g.value_size, 0);
    assert_int_equal(tu_stats(s).allocated_bytes, 64);
    /* Larger than any segment: refused at once, without an eviction round. */
    assert_int_equal(crk_put_start(s, a, "big", 65 * KIB, &cfg, 3, &l), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(tu_stats(s).evictions_attempted, 0);
    assert_int_equal(tu_stats(s).alloc_failures, 2);
    crk_service_destroy(s);
}

static void test_lease_blocks_remove(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 0, MIB, 0);
    crk_replicate_config cfg = tu_cfg(1);
    assert_int_equal(tu_put(s, a, "k", 100, &cfg, 0), 0);
    crk_replica_list g;
    /* Without a read, a complete object is not leased. */
    assert_int_equal(crk_remove(s, "k", false, 1), 0);
    assert_int_equal(tu_put(s, a, "k", 100, &cfg, 1000), 0);
    assert_int_equal(crk_get_replica_list(s, "k", 1000, &g), 0);
    assert_int_equal(crk_remove(s, "k", false, 5000), CR_OBJECT_HAS_LEASE);
    /* Probes neither grant nor extend the lease. */
    assert_int_equal(crk_exist(s, "k", 10999), 1);
    const char *keys[] = {"k"};
    int res[1];
    assert_int_equal(crk_batch_exist(s, keys, 1, 10999, res), 0);
    assert_int_equal(res[0], 1);
    crk_key_info info;
    assert_int_equal(crk_query_key(s, "k", 10999, &info), 0);
    assert_int_equal(info.lease_until_ms, 11000);
    assert_int_equal(crk_remove(s, "k", false, 10999), CR_OBJECT_HAS_LEASE);
    /* A second read extends it. */
    assert_int_equal(crk_get_replica_list(s, "k", 6000, &g), 0);
    assert_int_equal(crk_remove(s, "k", false, 15999), CR_OBJECT_HAS_LEASE);
    assert_int_equal(crk_remove(s, "k", false, 16000), 0);
    assert_int_equal(crk_remove(s, "k", false, 16001), CR_OBJECT_NOT_FOUND);
    crk_service_destroy(s);
}

static void test_force_remove_defers_reuse(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 0, 4 * KIB, 0); /* room for exactly one 4 KiB value */
    crk_replicate_config cfg = tu_cfg(1);
    assert_int_equal(tu_put(s, a, "k", 4 * KIB, &cfg, 0), 0);
    crk_replica_list g, l;
    assert_int_equal(crk_get_replica_list(s, "k", 100, &g), 0);
    assert_int_equal(crk_remove(s, "k", true, 200), 0);
    assert_int_equal(crk_exist(s, "k", 201), 0);
    crk_stats st = tu_stats(s);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.allocated_bytes, 4 * KIB); /* still held for the reader */
    assert_int_equal(st.discarded_bytes, 4 * KIB);
    /* The reader may read until 10100: nothing may be written there before. */
    assert_int_equal(crk_put_start(s, a, "other", 4 * KIB, &cfg, 300, &l), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(crk_tick(s, 10099), 0);
    assert_int_equal(tu_stats(s).allocated_bytes, 4 * KIB);
    assert_int_equal(crk_tick(s, 10100), 0);
    st = tu_stats(s);
    assert_int_equal(st.allocated_bytes, 0);
    assert_int_equal(st.discarded_bytes, 0);
    assert_int_equal(crk_put_start(s, a, "other", 4 * KIB, &cfg, 10101, &l), 0);
    assert_int_equal(l.r[0].address, g.r[0].address);
    crk_service_destroy(s);
}

static void test_remove_in_flight(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 0, MIB, 0);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, a, "k", 10, NULL, 0, &l), 0);
    assert_int_equal(crk_remove(s, "k", false, 1), CR_REPLICA_IS_NOT_READY);
    assert_int_equal(crk_remove(s, "k", true, 1), CR_REPLICA_IS_NOT_READY);
    uint64_t n = 99;
    assert_int_equal(crk_remove_all(s, true, 1, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(crk_put_end(s, a, "k", 2), 0);
    assert_int_equal(crk_remove(s, "k", false, 3), 0);
    crk_service_destroy(s);
}

static void test_remove_regex_and_all(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 0, MIB, 0);
    const char *keys[] = {"layer/0/a", "layer/0/b", "layer/1/a", "other", "layer/2/x"};
    for (int i = 0; i < 5; i++)
        assert_int_equal(tu_put(s, a, keys[i], 100, NULL, 0), 0);
    crk_replica_list g, l;
    assert_int_equal(crk_get_replica_list(s, "layer/0/b", 0, &g), 0); /* leased */
    assert_int_equal(crk_put_start(s, a, "layer/9/inflight", 1, NULL, 0, &l), 0);
    uint64_t n = 0;
    assert_int_equal(crk_remove_by_regex(s, "^layer/0/", false, 1, &n), 0);
    assert_int_equal(n, 1); /* the leased one is skipped */
    assert_int_equal(crk_exist(s, "layer/0/a", 1), 0);
    assert_int_equal(crk_exist(s, "layer/0/b", 1), 1);
    assert_int_equal(crk_remove_by_regex(s, "/a$", false, 1, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(crk_remove_by_regex(s, "^layer/0/", true, 1, &n), 0);
    assert_int_equal(n, 1);
    n = 77;
    assert_int_equal(crk_remove_by_regex(s, "([", false, 1, &n), CR_INVALID_PARAMS);
    assert_int_equal(n, 77);
    assert_int_equal(crk_remove_by_regex(s, NULL, false, 1, &n), CR_INVALID_PARAMS);
    assert_int_equal(crk_get_replica_list(s, "other", 2, &g), 0);
    assert_int_equal(crk_remove_all(s, false, 3, &n), 0);
    assert_int_equal(n, 1); /* layer/2/x; "other" leased, in-flight skipped */
    assert_int_equal(crk_remove_all(s, true, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(tu_stats(s).keys, 1); /* the in-flight put */
    assert_int_equal(tu_stats(s).requests[CRK_OP_REMOVE_BY_REGEX], 5);
    crk_service_destroy(s);
}

static void test_batches(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 0, MIB, 0);
    const char *keys[] = {"b0", "", "b2", "b3"};
    uint64_t sizes[] = {100, 100, 200, 300};
    int res[4];
    crk_replica_list lists[4];
    crk_replicate_config cfg = tu_cfg(1);
    assert_int_equal(crk_batch_put_start(s, a, keys, sizes, 4, &cfg, 0, res, lists, false), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], CR_INVALID_KEY);
    assert_int_equal(res[2], 0);
    assert_int_equal(res[3], 0);
    assert_int_equal(lists[2].value_size, 200);
    const char *revoke[] = {"b3"};
    assert_int_equal(crk_batch_put_revoke(s, a, revoke, 1, 1, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(crk_batch_put_end(s, a, keys, 4, 1, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], CR_INVALID_KEY);
    assert_int_equal(res[2], 0);
    assert_int_equal(res[3], CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_batch_exist(s, keys, 4, 2, res), 0);
    assert_int_equal(res[0], 1);
    assert_int_equal(res[1], CR_INVALID_KEY);
    assert_int_equal(res[2], 1);
    assert_int_equal(res[3], 0);
    assert_int_equal(crk_batch_get_replica_list(s, keys, 4, 3, res, lists, false), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(lists[0].value_size, 100);
    assert_int_equal(res[3], CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_batch_remove(s, keys, 4, false, 4, res), 0);
    assert_int_equal(res[0], CR_OBJECT_HAS_LEASE);
    assert_int_equal(crk_batch_remove(s, keys, 4, true, 4, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[2], 0);
    assert_int_equal(res[3], CR_OBJECT_NOT_FOUND);
    /* Upsert batch on absent keys behaves as put. */
    assert_int_equal(crk_batch_upsert_start(s, a, keys, sizes, 1, &cfg, 5, res, lists, false), 0);
    assert_int_equal(res[0], 0);
    /* Bad arrays: nothing processed. */
    assert_int_equal(crk_batch_exist(s, NULL, 2, 0, res), CR_INVALID_PARAMS);
    assert_int_equal(crk_batch_put_start(s, a, keys, sizes, 2, &cfg, 0, res, NULL, false),
                     CR_INVALID_PARAMS);
    assert_int_equal(crk_batch_remove(s, keys, 0, false, 0, NULL), 0);
    crk_stats st = tu_stats(s);
    assert_int_equal(st.requests[CRK_OP_BATCH_PUT_START], 2);
    assert_int_equal(st.failures[CRK_OP_BATCH_PUT_START], 1);
    assert_int_equal(st.batch_items[CRK_OP_BATCH_PUT_START], 4);
    assert_int_equal(st.batch_failed_items[CRK_OP_BATCH_PUT_START], 1);
    assert_int_equal(st.batch_items[CRK_OP_BATCH_EXIST], 4);
    assert_int_equal(st.batch_failed_items[CRK_OP_BATCH_EXIST], 1);
    /* One request run in two parts counts once, with every key. */
    uint64_t gets = st.requests[CRK_OP_BATCH_GET_REPLICA_LIST];
    uint64_t items = st.batch_items[CRK_OP_BATCH_GET_REPLICA_LIST];
    assert_int_equal(crk_batch_get_replica_list(s, keys, 2, 6, res, lists, false), 0);
    assert_int_equal(crk_batch_get_replica_list(s, keys + 2, 2, 6, res, lists, true), 0);
    st = tu_stats(s);
    assert_int_equal(st.requests[CRK_OP_BATCH_GET_REPLICA_LIST], gets + 1);
    assert_int_equal(st.batch_items[CRK_OP_BATCH_GET_REPLICA_LIST], items + 4);
    crk_service_destroy(s);
}

static void test_preemption(void **state)
{
    crk_config cfg = tu_config();
    cfg.eviction_high_watermark_ratio = 1.0; /* no watermark eviction here */
    crk_service *s = tu_service(&cfg, 0);
    crk_client_id a = tu_client(1), b = tu_client(2), c = tu_client(3);
    tu_mount(s, a, "seg", 0x7000000, 8 * KIB, 0); /* two 4 KiB slots */
    crk_replica_list la, lb, lc;
    assert_int_equal(crk_put_start(s, a, "k", 4 * KIB, NULL, 1000, &la), 0);
    assert_int_equal(crk_put_start(s, b, "k", 4 * KIB, NULL, 30999, &lb), CR_OBJECT_REPLICA_BUSY);
    assert_true(strstr(cr_last_error_message(), "in flight") != NULL);
    assert_int_equal(crk_put_start(s, a, "k", 4 * KIB, NULL, 30999, &lb), CR_OBJECT_REPLICA_BUSY);
    /* 30 s after the first put started: preempted. */
    assert_int_equal(crk_put_start(s, b, "k", 4 * KIB, NULL, 31000, &lb), 0);
    assert_true(lb.r[0].address != la.r[0].address); /* the slow writer's space is kept */
    assert_int_equal(crk_put_end(s, a, "k", 31001), CR_ILLEGAL_CLIENT);
    assert_int_equal(crk_put_revoke(s, a, "k", 31001), CR_ILLEGAL_CLIENT);
    crk_stats st = tu_stats(s);
    assert_int_equal(st.put_start_discards, 1);
    assert_int_equal(st.allocated_bytes, 8 * KIB);
    assert_int_equal(st.discarded_bytes, 4 * KIB);
    assert_int_equal(st.writes_in_flight, 1);
    assert_int_equal(crk_put_end(s, b, "k", 31002), 0);
    crk_replica_list g;
    assert_int_equal(crk_get_replica_list(s, "k", 31500, &g), 0); /* not evictable */
    /* The segment is full until the old write's release time (1000 + 600000). */
    assert_int_equal(crk_put_start(s, c, "x", 4 * KIB, NULL, 32000, &lc), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(crk_tick(s, 600999), 0);
    assert_int_equal(tu_stats(s).allocated_bytes, 8 * KIB);
    assert_int_equal(crk_tick(s, 601000), 0);
    st = tu_stats(s);
    assert_int_equal(st.allocated_bytes, 4 * KIB);
    assert_int_equal(st.put_start_releases, 1);
    assert_int_equal(crk_put_start(s, c, "x", 4 * KIB, NULL, 601001, &lc), 0);
    assert_int_equal(lc.r[0].address, la.r[0].address);
    /* The winner's object is intact. */
    assert_int_equal(crk_get_replica_list(s, "k", 601002, &g), 0);
    assert_int_equal(g.r[0].address, lb.r[0].address);
    crk_service_destroy(s);
}

static void test_stale_write_sweep(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 0, MIB, 0);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, a, "k", 4096, NULL, 0, &l), 0);
    assert_int_equal(crk_tick(s, 599999), 0);
    assert_int_equal(tu_stats(s).keys, 1);
    /* Keep the client alive for the next check. */
    int status = 0;
    assert_int_equal(crk_ping(s, a, 599999, &status), 0);
    assert_int_equal(crk_tick(s, 600000), 0);
    crk_stats st = tu_stats(s);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.writes_in_flight, 0);
    assert_int_equal(st.allocated_bytes, 0);
    assert_int_equal(crk_put_end(s, a, "k", 600001), CR_OBJECT_NOT_FOUND);
    crk_service_destroy(s);
}

static void test_upsert(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1), b = tu_client(2);
    tu_mount(s, a, "seg", 0, MIB, 0);
    crk_replica_list l1, l2, g;
    assert_int_equal(crk_upsert_start(s, a, "k", 100, NULL, 0, &l1), 0); /* absent: a put */
    assert_int_equal(crk_put_end(s, a, "k", 1), 0);
    assert_int_equal(crk_get_replica_list(s, "k", 1000, &g), 0); /* lease until 11000 */
    assert_int_equal(crk_upsert_start(s, b, "k", 200, NULL, 2000, &l2), 0);
    assert_int_equal(l2.value_size, 200);
    assert_true(l2.r[0].address != l1.r[0].address);
    /* During the upsert readers see the old version; puts see an existing key. */
    assert_int_equal(crk_get_replica_list(s, "k", 2001, &g), 0);
    assert_int_equal(g.value_size, 100);
    assert_int_equal(g.r[0].address, l1.r[0].address);
    assert_int_equal(crk_put_start(s, a, "k", 1, NULL, 2002, &g), CR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(crk_upsert_start(s, a, "k", 1, NULL, 2002, &g), CR_OBJECT_REPLICA_BUSY);
    assert_int_equal(crk_remove(s, "k", true, 2002), CR_REPLICA_IS_NOT_READY);
    assert_int_equal(crk_put_end(s, a, "k", 2003), CR_ILLEGAL_CLIENT);
    assert_int_equal(crk_put_end(s, b, "k", 3000), 0);
    assert_int_equal(crk_get_replica_list(s, "k", 3001, &g), 0);
    assert_int_equal(g.value_size, 200);
    assert_int_equal(g.r[0].address, l2.r[0].address);
    /* Old space held while the old lease (until 12001 now) runs. */
    crk_stats st = tu_stats(s);
    assert_int_equal(st.keys, 1);
    assert_int_equal(st.allocated_bytes, 128 + 256);
    assert_int_equal(st.discarded_bytes, 128);
    assert_int_equal(crk_tick(s, 12000), 0);
    assert_int_equal(tu_stats(s).allocated_bytes, 128 + 256);
    assert_int_equal(crk_tick(s, 12001), 0);
    assert_int_equal(tu_stats(s).allocated_bytes, 256);

    /* Revoked upsert keeps the old version and frees the new space. */
    assert_int_equal(crk_upsert_start(s, a, "k", 5000, NULL, 13000, &l1), 0);
    assert_int_equal(crk_put_revoke(s, a, "k", 13001), 0);
    assert_int_equal(crk_get_replica_list(s, "k", 13002, &g), 0);
    assert_int_equal(g.value_size, 200);
    assert_int_equal(tu_stats(s).allocated_bytes, 256);
    /* The new version is not leased by the old readers: removable. */
    assert_int_equal(crk_upsert_start(s, a, "k", 64, NULL, 30000, &l1), 0);
    assert_int_equal(crk_put_end(s, a, "k", 30000), 0);
    assert_int_equal(crk_remove(s, "k", false, 30001), 0);
    crk_service_destroy(s);
}

static void test_pin_settings(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 0, MIB, 0);
    crk_replicate_config cfg = tu_cfg(1);
    cfg.soft_pin_action = CRK_SOFT_PIN_ENABLE;
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, a, "soft", 10, &cfg, 100, &l), 0);
    crk_key_info info;
    assert_int_equal(crk_query_key(s, "soft", 150, &info), 0);
    assert_false(info.complete);
    assert_true(info.write_in_flight);
    assert_false(info.soft_pinned);
    /* The deadline runs from the moment the object becomes readable. */
    assert_int_equal(crk_put_end(s, a, "soft", 500), 0);
    assert_int_equal(crk_query_key(s, "soft", 501, &info), 0);
    assert_true(info.soft_pinned);
    assert_int_equal(info.soft_pin_until_ms, 500 + 1800000);
    /* Reads never extend it. */
    crk_replica_list g;
    assert_int_equal(crk_get_replica_list(s, "soft", 1000000, &g), 0);
    assert_int_equal(crk_query_key(s, "soft", 1000001, &info), 0);
    assert_int_equal(info.soft_pin_until_ms, 500 + 1800000);
    assert_int_equal(tu_stats(s).soft_pinned_keys, 1);
    /* Upsert with PRESERVE keeps the deadline; DISABLE clears it. */
    crk_replicate_config keep = tu_cfg(1);
    assert_int_equal(crk_upsert_start(s, a, "soft", 20, &keep, 2000000, &l), 0);
    assert_int_equal(crk_put_end(s, a, "soft", 2000001), 0);
    assert_int_equal(crk_query_key(s, "soft", 2000002, &info), 0);
    assert_int_equal(info.soft_pin_until_ms, 500 + 1800000);
    assert_false(info.soft_pinned); /* expired at 1800500 */
    keep.soft_pin_action = CRK_SOFT_PIN_DISABLE;
    assert_int_equal(crk_upsert_start(s, a, "soft", 30, &keep, 2000003, &l), 0);
    assert_int_equal(crk_put_end(s, a, "soft", 2000004), 0);
    assert_int_equal(crk_query_key(s, "soft", 2000005, &info), 0);
    assert_int_equal(info.soft_pin_until_ms, 0);
    assert_int_equal(tu_stats(s).soft_pinned_keys, 0);
    /* Explicit TTL and hard pin. */
    cfg.soft_pin_ttl_ms = 5000;
    cfg.hard_pin = true;
    assert_int_equal(tu_put(s, a, "both", 10, &cfg, 3000000), 0);
    assert_int_equal(crk_query_key(s, "both", 3000001, &info), 0);
    assert_true(info.hard_pinned);
    assert_int_equal(info.soft_pin_until_ms, 3005000);
    assert_int_equal(tu_stats(s).hard_pinned_keys, 1);
    /* Hard-pinned objects are removable (Mooncake's Remove checks only the lease). */
    assert_int_equal(crk_remove(s, "both", false, 3000002), 0);
    assert_int_equal(tu_stats(s).hard_pinned_keys, 0);
    assert_int_equal(crk_query_key(s, "both", 3000003, &info), CR_OBJECT_NOT_FOUND);
    crk_service_destroy(s);
}

/* The object table under churn: enough keys to grow every shard's table
 * several times, removals by key, by regex and by unmounting a segment (each
 * shifting entries back in the open-addressed table), and every key's
 * existence checked against a model after each step. */
static void test_table_churn(void **state)
{
    (void)state;
    enum { N = 6000 };
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1), b = tu_client(2);
    tu_mount(s, a, "segA", 1ull << 40, 1ull << 30, 0);
    tu_mount(s, b, "segB", 2ull << 40, 1ull << 30, 0);
    crk_replicate_config onA = tu_cfg(1), onB = tu_cfg(1);
    const char *pa[] = {"segA"}, *pb[] = {"segB"};
    onA.preferred_segments = pa;
    onA.n_preferred = 1;
    onB.preferred_segments = pb;
    onB.n_preferred = 1;
    static bool live[N];
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "%s-%d", i % 5 == 0 ? "drop" : "keep", i);
        assert_int_equal(tu_put(s, a, key, 64, i % 7 == 0 ? &onB : &onA, 1), 0);
        live[i] = true;
    }
    for (int i = 0; i < N; i += 3) {
        snprintf(key, sizeof(key), "%s-%d", i % 5 == 0 ? "drop" : "keep", i);
        assert_int_equal(crk_remove(s, key, false, 2), 0);
        live[i] = false;
    }
    uint64_t removed = 0;
    assert_int_equal(crk_remove_by_regex(s, "^drop-", false, 3, &removed), 0);
    uint64_t want = 0;
    for (int i = 0; i < N; i++)
        if (i % 5 == 0 && live[i]) {
            live[i] = false;
            want++;
        }
    assert_int_equal(removed, want);
    /* Unmounting segB erases the objects whose only replica was there. */
    assert_int_equal(crk_unmount_segment(s, b, "segB", 4), 0);
    for (int i = 0; i < N; i += 7)
        live[i] = false;
    uint64_t count = 0;
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "%s-%d", i % 5 == 0 ? "drop" : "keep", i);
        int ex = crk_exist(s, key, 5);
        if (ex != (live[i] ? 1 : 0))
            fail_msg("key %s: exist %d, expected %d", key, ex, live[i] ? 1 : 0);
        count += live[i];
    }
    assert_int_equal(tu_stats(s).keys, count);
    /* Re-insert every removed key: probes must still end at empty slots. */
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "%s-%d", i % 5 == 0 ? "drop" : "keep", i);
        assert_int_equal(tu_put(s, a, key, 64, &onA, 6), live[i] ? CR_OBJECT_ALREADY_EXISTS : 0);
    }
    assert_int_equal(tu_stats(s).keys, N);
    crk_service_destroy(s);
}

/* BATCH_REPLICA_CLEAR: all replicas, one segment's, skips and counters. */
static void test_batch_replica_clear(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1), b = tu_client(2);
    tu_mount(s, a, "seg-a", 0x100000, MIB, 0);
    tu_mount(s, b, "seg-b", 0x900000, MIB, 0);
    crk_replicate_config one = tu_cfg(1), two = tu_cfg(2), on_b = tu_cfg(1);
    const char *pref_b[] = {"seg-b"};
    on_b.preferred_segments = pref_b;
    on_b.n_preferred = 1;
    crk_replica_list l;
    assert_int_equal(tu_put(s, a, "all", 4096, &one, 1), 0);
    assert_int_equal(tu_put(s, a, "two", 4096, &two, 1), 0);
    assert_int_equal(tu_put(s, a, "only-b", 4096, &on_b, 1), 0);
    assert_int_equal(tu_put(s, a, "leased", 4096, &one, 1), 0);
    assert_int_equal(crk_put_start(s, a, "inflight", 4096, &one, 1, &l), 0);
    assert_int_equal(tu_put(s, a, "upserting", 4096, &one, 1), 0);
    assert_int_equal(crk_upsert_start(s, a, "upserting", 4096, &one, 2, &l), 0);
    assert_int_equal(crk_get_replica_list(s, "leased", 3, &l), 0); /* lease until 10003 */
    crk_stats st = tu_stats(s);
    assert_int_equal(st.allocated_bytes, 8 * 4096);
    assert_int_equal(st.keys, 6);

    /* Every replica (segment NULL or ""): remove, unless leased or being written. */
    int res[8];
    const char *keys[] = {"all", "missing", "", "leased", "inflight", "upserting"};
    assert_int_equal(crk_batch_replica_clear(s, a, keys, 6, NULL, 10, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], CR_OBJECT_NOT_FOUND);
    assert_int_equal(res[2], CR_INVALID_KEY);
    assert_int_equal(res[3], CR_OBJECT_HAS_LEASE);
    assert_int_equal(res[4], CR_REPLICA_IS_NOT_READY);
    assert_int_equal(res[5], CR_REPLICA_IS_NOT_READY);
    assert_int_equal(crk_exist(s, "all", 11), 0);
    assert_int_equal(crk_exist(s, "leased", 11), 1);
    st = tu_stats(s);
    assert_int_equal(st.allocated_bytes, 7 * 4096); /* freed at once: no lease on it */
    assert_int_equal(st.discarded_bytes, 0);
    assert_int_equal(st.keys, 5);
    /* The same segment filter from another client, once the lease ran out. */
    const char *leased[] = {"leased"};
    assert_int_equal(crk_batch_replica_clear(s, b, leased, 1, "", 10004, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(crk_exist(s, "leased", 10005), 0);

    /* One segment of a two-replica object: the other replica stays readable. */
    const char *two_k[] = {"two"};
    assert_int_equal(crk_batch_replica_clear(s, a, two_k, 1, "seg-b", 10010, res), 0);
    assert_int_equal(res[0], 0);
    crk_key_info ki;
    assert_int_equal(crk_query_key(s, "two", 10011, &ki), 0);
    assert_int_equal(ki.replicas.n, 1);
    assert_string_equal(ki.replicas.r[0].segment, "seg-a");
    assert_true(ki.complete);
    st = tu_stats(s);
    assert_int_equal(st.allocated_bytes, 5 * 4096);
    assert_int_equal(st.keys, 4);
    /* No replica left on seg-b; an unknown segment likewise. */
    assert_int_equal(crk_batch_replica_clear(s, a, two_k, 1, "seg-b", 10012, res), 0);
    assert_int_equal(res[0], CR_REPLICA_NOT_FOUND);
    const char *only_b[] = {"only-b"};
    assert_int_equal(crk_batch_replica_clear(s, a, only_b, 1, "no-such-segment", 10012, res), 0);
    assert_int_equal(res[0], CR_REPLICA_NOT_FOUND);
    assert_int_equal(crk_exist(s, "only-b", 10012), 1);
    /* Readable from seg-a; the read leases it, so clearing waits for the lease. */
    assert_int_equal(crk_get_replica_list(s, "two", 10013, &l), 0);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.r[0].segment, "seg-a");
    assert_int_equal(crk_batch_replica_clear(s, a, two_k, 1, "seg-a", 10014, res), 0);
    assert_int_equal(res[0], CR_OBJECT_HAS_LEASE);
    /* The last replica: the object is gone. */
    assert_int_equal(crk_batch_replica_clear(s, a, two_k, 1, "seg-a", 20014, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(crk_query_key(s, "two", 20015, &ki), CR_OBJECT_NOT_FOUND);
    /* A single-replica object cleared through its segment. */
    assert_int_equal(crk_batch_replica_clear(s, a, only_b, 1, "seg-b", 20016, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(crk_exist(s, "only-b", 20016), 0);
    st = tu_stats(s);
    assert_int_equal(st.allocated_bytes, 3 * 4096); /* inflight + upserting (old, new) */
    assert_int_equal(st.keys, 2);
    /* The freed space is reusable: a 2-replica put fits on both segments again. */
    assert_int_equal(tu_put(s, a, "again", 4096, &two, 20017), 0);
    assert_int_equal(crk_query_key(s, "again", 20018, &ki), 0);
    assert_int_equal(ki.replicas.n, 2);

    /* Refused calls: nothing processed. */
    crk_client_id zero = {0, 0};
    assert_int_equal(crk_batch_replica_clear(s, zero, two_k, 1, NULL, 20020, res),
                     CR_ILLEGAL_CLIENT);
    assert_int_equal(crk_batch_replica_clear(s, a, NULL, 2, NULL, 20020, res), CR_INVALID_PARAMS);
    assert_int_equal(crk_batch_replica_clear(s, a, two_k, 0, "seg-a", 20020, NULL), 0);

    st = tu_stats(s);
    assert_string_equal(crk_op_name(CRK_OP_BATCH_REPLICA_CLEAR), "batch_replica_clear");
    assert_int_equal(st.requests[CRK_OP_BATCH_REPLICA_CLEAR], 11);
    assert_int_equal(st.failures[CRK_OP_BATCH_REPLICA_CLEAR], 2);
    assert_int_equal(st.batch_items[CRK_OP_BATCH_REPLICA_CLEAR], 13);
    assert_int_equal(st.batch_failed_items[CRK_OP_BATCH_REPLICA_CLEAR], 8);
    assert_int_equal(st.requests[CRK_OP_BATCH_REMOVE], 0);
    crk_service_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_put_get_basic),
        cmocka_unit_test(test_owner_and_revoke),
        cmocka_unit_test(test_invalid_inputs),
        cmocka_unit_test(test_empty_value_and_no_space),
        cmocka_unit_test(test_lease_blocks_remove),
        cmocka_unit_test(test_force_remove_defers_reuse),
        cmocka_unit_test(test_remove_in_flight),
        cmocka_unit_test(test_remove_regex_and_all),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_batch_replica_clear),
        cmocka_unit_test(test_table_churn),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_stale_write_sweep),
        cmocka_unit_test(test_upsert),
        cmocka_unit_test(test_pin_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
