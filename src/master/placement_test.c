/*
 * placement_test.c - replica placement: replicas on distinct segments,
 * preferred segments first (in order, unknown or full ones skipped), best
 * effort with partial allocation counted, load spread by sampled free ratio,
 * mount epochs in descriptors, values larger than every segment refused early,
 * freed space reused before never-written space, and the segments of a
 * client whose connections all closed placed on only as a last resort.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "master/dispatch.h"
#include "master/test_util.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)

static void mount_n(crk_service *s, crk_client_id c, int n, uint64_t size)
{
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "s%d", i);
        tu_mount(s, c, name, 0x10000000ull * (uint64_t)(i + 1), size, 0);
    }
}

static void test_distinct_segments(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    mount_n(s, tu_client(1), 5, 16 * MIB);
    crk_replicate_config cfg = tu_cfg(3);
    for (int i = 0; i < 200; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i);
        crk_replica_list l;
        assert_int_equal(crk_put_start(s, tu_client(1), key, 4096, &cfg, 1, &l), 0);
        assert_int_equal(l.n, 3);
        for (uint32_t a = 0; a < l.n; a++)
            for (uint32_t b = a + 1; b < l.n; b++)
                assert_string_not_equal(l.r[a].segment, l.r[b].segment);
        assert_int_equal(crk_put_end(s, tu_client(1), key, 2), 0);
        crk_replica_list g;
        assert_int_equal(crk_get_replica_list(s, key, 3, &g), 0);
        assert_int_equal(g.n, 3);
    }
    assert_int_equal(tu_stats(s).partial_allocations, 0);
    assert_int_equal(tu_stats(s).allocated_bytes, 200 * 3 * 4096);
    crk_service_destroy(s);
}

static void test_best_effort(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    mount_n(s, tu_client(1), 2, MIB);
    crk_replicate_config cfg = tu_cfg(4);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, tu_client(1), "k", 100, &cfg, 1, &l), 0);
    assert_int_equal(l.n, 2);
    assert_string_not_equal(l.r[0].segment, l.r[1].segment);
    assert_int_equal(tu_stats(s).partial_allocations, 1);
    assert_int_equal(crk_put_end(s, tu_client(1), "k", 2), 0);
    /* Take more of s0: then only s1 has room for a big value, one replica. */
    crk_replicate_config one = tu_cfg(1);
    const char *pref[] = {"s0"};
    one.preferred_segments = pref;
    one.n_preferred = 1;
    assert_int_equal(crk_put_start(s, tu_client(1), "small", 4096, &one, 3, &l), 0);
    assert_string_equal(l.r[0].segment, "s0");
    crk_replicate_config two = tu_cfg(2);
    assert_int_equal(crk_put_start(s, tu_client(1), "big", MIB - 128, &two, 3, &l), 0);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.r[0].segment, "s1");
    assert_int_equal(tu_stats(s).partial_allocations, 2);
    crk_service_destroy(s);
}

static void test_preferred_segments(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    mount_n(s, tu_client(1), 6, MIB);
    crk_replicate_config cfg = tu_cfg(2);
    const char *pref[] = {"s4", "nope", "s1", "s2"};
    cfg.preferred_segments = pref;
    cfg.n_preferred = 4;
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i);
        crk_replica_list l;
        assert_int_equal(crk_put_start(s, tu_client(1), key, 1024, &cfg, 1, &l), 0);
        assert_int_equal(l.n, 2);
        assert_string_equal(l.r[0].segment, "s4");
        assert_string_equal(l.r[1].segment, "s1");
        assert_int_equal(l.r[0].address & ~0xFFFFFull, 0x50000000ull);
    }
    /* Fill s4: later puts fall through to s1 and s2. */
    crk_replicate_config one = tu_cfg(1);
    const char *only4[] = {"s4"};
    one.preferred_segments = only4;
    one.n_preferred = 1;
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, tu_client(1), "fill", MIB - 20 * 1024, &one, 2, &l), 0);
    assert_string_equal(l.r[0].segment, "s4");
    assert_int_equal(crk_put_start(s, tu_client(1), "next", 1024, &cfg, 3, &l), 0);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.r[0].segment, "s1");
    assert_string_equal(l.r[1].segment, "s2");
    /* The same segment named twice still gets one replica. */
    const char *twice[] = {"s3", "s3"};
    cfg.preferred_segments = twice;
    cfg.n_preferred = 2;
    assert_int_equal(crk_put_start(s, tu_client(1), "twice", 1024, &cfg, 4, &l), 0);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.r[0].segment, "s3");
    assert_string_not_equal(l.r[1].segment, "s3");
    crk_service_destroy(s);
}

static void test_spread_by_free_ratio(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    mount_n(s, tu_client(1), 8, 64 * MIB);
    crk_replicate_config cfg = tu_cfg(1);
    for (int i = 0; i < 1600; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(tu_put(s, tu_client(1), key, 16 * KIB, &cfg, 1), 0);
    }
    crk_segment_info info[8];
    size_t total = 0;
    assert_int_equal(crk_list_segments(s, info, 8, &total), 0);
    assert_int_equal(total, 8);
    for (int i = 0; i < 8; i++) {
        uint64_t objs = info[i].used / (16 * KIB);
        assert_true(objs >= 150 && objs <= 250); /* 200 each on average */
    }
    /* A new, empty segment gets more than its share but not everything. */
    tu_mount(s, tu_client(1), "fresh", 0x90000000ull, 64 * MIB, 2);
    for (int i = 0; i < 90; i++) {
        char key[32];
        snprintf(key, sizeof(key), "n%d", i);
        assert_int_equal(tu_put(s, tu_client(1), key, 16 * KIB, &cfg, 3), 0);
    }
    assert_int_equal(crk_list_segments(s, info, 8, &total), 0);
    assert_int_equal(total, 9);
    crk_segment_info all[9];
    assert_int_equal(crk_list_segments(s, all, 9, &total), 0);
    for (int i = 0; i < 9; i++) {
        if (strcmp(all[i].name, "fresh") == 0) {
            uint64_t objs = all[i].used / (16 * KIB);
            assert_true(objs >= 20 && objs < 90);
        }
    }
    crk_service_destroy(s);
}

static void test_epochs_and_addresses(void **state)
{
    crk_config c = tu_config();
    c.epoch_base = 1000;
    crk_service *s = tu_service(&c, 0);
    assert_int_equal(tu_mount(s, tu_client(1), "a", 0x1000, MIB, 0), 1001);
    assert_int_equal(tu_mount(s, tu_client(2), "b", 0x2000000, MIB, 0), 1002);
    crk_replicate_config cfg = tu_cfg(2);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, tu_client(1), "k", 100, &cfg, 1, &l), 0);
    for (uint32_t i = 0; i < l.n; i++) {
        if (strcmp(l.r[i].segment, "a") == 0) {
            assert_int_equal(l.r[i].mount_epoch, 1001);
            assert_true(l.r[i].address >= 0x1000 && l.r[i].address < 0x1000 + MIB);
        } else {
            assert_int_equal(l.r[i].mount_epoch, 1002);
            assert_true(l.r[i].address >= 0x2000000 && l.r[i].address < 0x2000000 + MIB);
        }
    }
    crk_service_destroy(s);
}

static void test_larger_than_any_segment(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    mount_n(s, tu_client(1), 3, MIB);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, tu_client(1), "huge", MIB + 1, NULL, 1, &l),
                     CR_NO_AVAILABLE_HANDLE);
    assert_true(strstr(cr_last_error_message(), "no mounted segment can hold") != NULL);
    assert_int_equal(tu_stats(s).evictions_attempted, 0);
    assert_int_equal(crk_put_start(s, tu_client(1), "exact", MIB, NULL, 1, &l), 0);
    crk_service_destroy(s);
}

/* --allocation_strategy=free_ratio_first: with 60 segments (more than a
 * sample holds) every replica goes to the emptiest segment there is. */
static void test_free_ratio_first(void **state)
{
    crk_config cfg = tu_config();
    cfg.allocation_strategy = CRK_ALLOC_FREE_RATIO_FIRST;
    crk_service *s = tu_service(&cfg, 0);
    mount_n(s, tu_client(1), 60, 16 * MIB);
    /* Fill every segment but s37 a little. */
    crk_replicate_config one = tu_cfg(1);
    for (int i = 0; i < 60; i++) {
        if (i == 37)
            continue;
        char seg[16], key[32];
        snprintf(seg, sizeof(seg), "s%d", i);
        snprintf(key, sizeof(key), "fill%d", i);
        const char *pref[] = {seg};
        one.preferred_segments = pref;
        one.n_preferred = 1;
        assert_int_equal(tu_put(s, tu_client(1), key, 64 * KIB, &one, 1), 0);
    }
    crk_replicate_config plain = tu_cfg(1);
    crk_replica_list l;
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(crk_put_start(s, tu_client(1), key, KIB, &plain, 2, &l), 0);
        assert_string_equal(l.r[0].segment, "s37");
    }
    crk_service_destroy(s);
}

/* --allocation_strategy=local_first: the writer's own segment first, then others. */
static void test_local_first(void **state)
{
    crk_config cfg = tu_config();
    cfg.allocation_strategy = CRK_ALLOC_LOCAL_FIRST;
    crk_service *s = tu_service(&cfg, 0);
    mount_n(s, tu_client(1), 6, 16 * MIB);
    tu_mount(s, tu_client(2), "mine", 0x900000000ull, 16 * MIB, 0);
    crk_replicate_config two = tu_cfg(2);
    crk_replica_list l;
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(crk_put_start(s, tu_client(2), key, 4 * KIB, &two, 1, &l), 0);
        assert_int_equal(l.n, 2);
        assert_string_equal(l.r[0].segment, "mine");
        assert_string_not_equal(l.r[1].segment, "mine");
    }
    crk_service_destroy(s);
}

/* A removed object's space (written before: committed pages in the holder)
 * takes the next put before the never-written rest of the segment, even when
 * the freed hole is larger than that rest. */
static void test_freed_space_first(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    const uint64_t base = 0x10000000ull;
    tu_mount(s, tu_client(1), "s0", base, 16 * MIB, 0);
    crk_replicate_config cfg = tu_cfg(1);
    char key[32];
    for (int i = 0; i < 12; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(tu_put(s, tu_client(1), key, MIB, &cfg, 1), 0);
    }
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(crk_remove(s, key, false, 2), 0);
    }
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "n%d", i);
        crk_replica_list l;
        assert_int_equal(crk_put_start(s, tu_client(1), key, MIB, &cfg, 3, &l), 0);
        assert_int_equal(l.n, 1);
        assert_true(l.r[0].address >= base && l.r[0].address + MIB <= base + 6 * MIB);
        assert_int_equal(crk_put_end(s, tu_client(1), key, 3), 0);
    }
    crk_service_destroy(s);
}

/* A connection of client c, bound the way the RPC server binds one (its first request names
 * the client). */
static void connect_as(crk_service *s, crk_peer *peer, crk_client_id c)
{
    crk_server_info info = {.view_version = 1, .software = "test"};
    crk_scratch sc = {0};
    crp_rpc_req req = {.op = CRP_RPC_PING};
    req.u.client.client_id = (crp_rpc_uuid){c.hi, c.lo};
    crp_rpc_resp resp;
    *peer = (crk_peer){0};
    crk_dispatch(s, &info, peer, &req, 1, &resp, &sc);
    assert_int_equal(resp.status, 0);
    assert_true(peer->bound);
    crk_scratch_free(&sc);
}

static const char *segment_of(crk_service *s, crk_client_id c, const char *key)
{
    static char seg[300];
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, c, key, 4096, NULL, 2, &l), 0);
    assert_int_equal(l.n, 1);
    snprintf(seg, sizeof(seg), "%s", l.r[0].segment);
    return seg;
}

static void test_disconnected_owner_placed_last(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_client_id holder = tu_client(1), writer = tu_client(2);
    crk_peer hp, hp2, wp;
    connect_as(s, &hp, holder);
    connect_as(s, &hp2, holder); /* a holder has two: data and heartbeat */
    connect_as(s, &wp, writer);
    tu_mount(s, holder, "big", 0x10000000ull, 512 * MIB, 1); /* the emptiest: chosen first */
    tu_mount(s, writer, "small", 0x40000000ull, 16 * MIB, 1);
    const char *pref[] = {"small"}; /* half of "small" used: "big" stays the emptiest */
    crk_replicate_config there = {.replica_num = 1, .preferred_segments = pref, .n_preferred = 1};
    assert_int_equal(tu_put(s, writer, "half", 8 * MIB, &there, 1), 0);
    assert_string_equal(segment_of(s, writer, "a"), "big");

    /* One of the holder's connections closes: still connected. */
    crk_peer_closed(s, &hp, 2);
    assert_string_equal(segment_of(s, writer, "b"), "big");
    /* The last one closes (the holder was killed): every put goes elsewhere while there is
     * room there, though "big" stays the emptiest and mounted until the client TTL. */
    crk_peer_closed(s, &hp2, 2);
    crk_peer_closed(s, &hp2, 2); /* a second close of the same peer changes nothing */
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "c%d", i);
        assert_string_equal(segment_of(s, writer, key), "small");
    }
    /* Nothing else fits a value larger than what "small" has left: the last resort. */
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, writer, "huge", 12 * MIB, NULL, 3, &l), 0);
    assert_string_equal(l.r[0].segment, "big");
    /* The holder connects again: its segment is a candidate like any other. */
    connect_as(s, &hp, holder);
    assert_string_equal(segment_of(s, writer, "d"), "big");
    crk_peer_closed(s, &hp, 4);
    crk_peer_closed(s, &wp, 4);
    crk_service_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_ratio_first),
        cmocka_unit_test(test_local_first),
        cmocka_unit_test(test_distinct_segments),
        cmocka_unit_test(test_best_effort),
        cmocka_unit_test(test_preferred_segments),
        cmocka_unit_test(test_spread_by_free_ratio),
        cmocka_unit_test(test_epochs_and_addresses),
        cmocka_unit_test(test_larger_than_any_segment),
        cmocka_unit_test(test_freed_space_first),
        cmocka_unit_test(test_disconnected_owner_placed_last),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
