/*
 * owned_writes_test.c - writes owned by a connection (crk_replicate_config
 * owner_conn / owned_ms, crk_revoke_conn_writes, the dispatcher's "ow" and
 * crk_peer_closed): a closed connection's writes are revoked at once (the
 * key is free, nothing visible, an upsert keeps its old version), their
 * space is reused only at start + owned_ms (a bound beyond the release
 * timeout is refused),
 * other connections' and unowned writes are untouched, a late put_end
 * of a revoked write fails, and a segment dropped with an owned write in
 * flight is fenced until the write's bound, not the release timeout.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "master/dispatch.h"
#include "master/test_util.h"

#define MIB (1024ull * 1024ull)

static crk_replicate_config owned(uint64_t conn, uint64_t ms)
{
    crk_replicate_config cfg = {.replica_num = 1, .owner_conn = conn, .owned_ms = ms};
    return cfg;
}

static void test_close_revokes_and_defers_space(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1), b = tu_client(2);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    uint64_t conn = crk_conn_tag(s), other = crk_conn_tag(s);
    assert_true(conn != 0 && other != 0 && conn != other);

    crk_replica_list l;
    crk_replicate_config cfg = owned(conn, 30000);
    assert_int_equal(crk_put_start(s, a, "k1", MIB, &cfg, 1000, &l), 0);
    assert_int_equal(crk_put_start(s, a, "k2", MIB, &cfg, 1000, &l), 0);
    crk_replicate_config cfg2 = owned(other, 30000);
    assert_int_equal(crk_put_start(s, a, "k3", MIB, &cfg2, 1000, &l), 0);
    crk_replicate_config plain = tu_cfg(1);
    plain.owned_ms = 5; /* ignored without owner_conn */
    assert_int_equal(crk_put_start(s, a, "k4", MIB, &plain, 1000, &l), 0);
    uint64_t used_before = tu_stats(s).allocated_bytes;

    /* Before the close another put of k1 is busy, as always. */
    assert_int_equal(crk_put_start(s, b, "k1", MIB, &plain, 2000, &l), CR_OBJECT_REPLICA_BUSY);

    assert_int_equal(crk_revoke_conn_writes(s, conn, 2000), 2);
    assert_int_equal(crk_revoke_conn_writes(s, conn, 2000), 0); /* nothing left */
    assert_int_equal(crk_revoke_conn_writes(s, 0, 2000), 0);
    assert_int_equal(tu_stats(s).owned_writes_revoked, 2);
    /* Nothing visible, the key free at once, a late put_end refused. */
    assert_int_equal(crk_exist(s, "k1", 2000), 0);
    assert_int_equal(crk_get_replica_list(s, "k1", 2000, &l), CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_put_end(s, a, "k2", 2000), CR_OBJECT_NOT_FOUND);
    assert_int_equal(tu_put(s, b, "k1", MIB, &plain, 2000), 0);
    /* The other connection's write and the unowned one are untouched. */
    assert_int_equal(crk_put_end(s, a, "k3", 2000), 0);
    assert_int_equal(crk_put_end(s, a, "k4", 2000), 0);

    /* The revoked space (2 MiB) waits until start + 30 s ... */
    crk_stats st = tu_stats(s);
    assert_int_equal(st.discarded_bytes, 2 * MIB);
    assert_true(st.allocated_bytes >= used_before + MIB);
    assert_int_equal(crk_tick(s, 30999), 0);
    assert_int_equal(tu_stats(s).discarded_bytes, 2 * MIB);
    /* ... and is reused then. */
    assert_int_equal(crk_tick(s, 31000), 0);
    st = tu_stats(s);
    assert_int_equal(st.discarded_bytes, 0);
    assert_int_equal(st.allocated_bytes, 3 * MIB); /* k1 (b's), k3, k4 */
    crk_service_destroy(s);
}

static void test_bound_checked_and_past(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    uint64_t conn = crk_conn_tag(s);
    crk_replica_list l;
    /* A bound beyond put_start_release_timeout (600 s), or none, is refused
     * (the writer relies on it: never shortened behind its back). */
    crk_replicate_config cfg = owned(conn, 600001);
    assert_int_equal(crk_put_start(s, a, "big", MIB, &cfg, 0, &l), CR_INVALID_PARAMS);
    cfg = owned(conn, 0);
    assert_int_equal(crk_put_start(s, a, "big", MIB, &cfg, 0, &l), CR_INVALID_PARAMS);
    cfg = owned(conn, 600000);
    assert_int_equal(crk_put_start(s, a, "big", MIB, &cfg, 0, &l), 0);
    /* A bound already past at the close frees the space at once. */
    crk_replicate_config quick = owned(conn, 10);
    assert_int_equal(crk_put_start(s, a, "quick", MIB, &quick, 0, &l), 0);
    assert_int_equal(crk_revoke_conn_writes(s, conn, 100), 2);
    assert_int_equal(tu_stats(s).discarded_bytes, MIB);
    assert_int_equal(crk_tick(s, 599999), 0);
    assert_int_equal(tu_stats(s).discarded_bytes, MIB);
    assert_int_equal(crk_tick(s, 600000), 0);
    assert_int_equal(tu_stats(s).discarded_bytes, 0);
    assert_int_equal(tu_stats(s).allocated_bytes, 0);
    crk_service_destroy(s);
}

static void test_upsert_keeps_old_version(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    crk_replicate_config plain = tu_cfg(1);
    assert_int_equal(tu_put(s, a, "k", MIB, &plain, 0), 0);
    uint64_t conn = crk_conn_tag(s);
    crk_replicate_config cfg = owned(conn, 1000);
    crk_replica_list l;
    assert_int_equal(crk_upsert_start(s, a, "k", 2 * MIB, &cfg, 10, &l), 0);
    assert_int_equal(crk_revoke_conn_writes(s, conn, 20), 1);
    assert_int_equal(crk_get_replica_list(s, "k", 20, &l), 0);
    assert_int_equal(l.value_size, MIB); /* the old version */
    /* The key is free for another upsert at once. */
    assert_int_equal(crk_upsert_start(s, a, "k", 3 * MIB, &plain, 30, &l), 0);
    assert_int_equal(crk_put_end(s, a, "k", 30), 0);
    crk_service_destroy(s);
}

static void test_batch_owned(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    uint64_t conn = crk_conn_tag(s);
    crk_replicate_config cfg = owned(conn, 1000);
    const char *keys[3] = {"b0", "b1", "b2"};
    uint64_t sizes[3] = {MIB, MIB, MIB};
    int results[3];
    crk_replica_list lists[3];
    assert_int_equal(crk_batch_put_start(s, a, keys, sizes, 3, &cfg, 0, results, lists, false), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(results[i], 0);
    assert_int_equal(crk_put_end(s, a, "b1", 5), 0); /* ended: no longer in flight */
    assert_int_equal(crk_revoke_conn_writes(s, conn, 10), 2);
    assert_int_equal(crk_exist(s, "b0", 10), 0);
    assert_int_equal(crk_exist(s, "b1", 10), 1);
    assert_int_equal(crk_exist(s, "b2", 10), 0);
    crk_service_destroy(s);
}

/* The dispatcher: "ow" tags the peer's connection; crk_peer_closed revokes. */
static void test_dispatch_peer(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(7);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    crk_server_info info = {.view_version = 1, .software = "test"};
    crk_peer peer = {0}, plain_peer = {0};
    crk_scratch sc = {0};
    crp_rpc_req req = {.op = CRP_RPC_PUT_START};
    req.u.put_start.client_id = (crp_rpc_uuid){a.hi, a.lo};
    req.u.put_start.key = "d1";
    req.u.put_start.value_size = MIB;
    req.u.put_start.config.replica_num = 1;
    req.owned_ms = 500;
    crp_rpc_resp resp;
    crk_dispatch(s, &info, &peer, &req, 100, &resp, &sc);
    assert_int_equal(resp.status, 0);
    assert_true(peer.conn_tag != 0);
    crk_scratch_reset(&sc);
    req.u.put_start.key = "d2";
    req.owned_ms = 0; /* not owned: stays in flight */
    crk_dispatch(s, &info, &plain_peer, &req, 100, &resp, &sc);
    assert_int_equal(resp.status, 0);
    assert_int_equal(plain_peer.conn_tag, 0);
    crk_scratch_reset(&sc);
    crk_peer_closed(s, &plain_peer, 200);
    crk_peer_closed(s, NULL, 200);
    crk_peer_closed(s, &peer, 200);
    assert_int_equal(crk_exist(s, "d1", 200), 0);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, a, "d1", MIB, NULL, 200, &l), 0);
    assert_int_equal(crk_put_start(s, a, "d2", MIB, NULL, 200, &l), CR_OBJECT_REPLICA_BUSY);
    crk_scratch_free(&sc);
    crk_service_destroy(s);
}

/* A segment dropped while writes are in flight on it is fenced until the writers may have
 * ended: an owned write's start + owned_ms (its writer's promise), an unowned one's start +
 * put_start_release_timeout. */
static void test_dropped_segment_fenced_until_owned_bound(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    crk_segment_spec spec = {.name = "seg", .base = 1ull << 32, .size = 64 * MIB};
    assert_int_equal(crk_mount_segment(s, a, &spec, 0, NULL), 0);
    crk_replica_list l;
    crk_replicate_config cfg = owned(crk_conn_tag(s), 5000);
    assert_int_equal(crk_put_start(s, a, "w", MIB, &cfg, 20000, &l), 0); /* until 25000 */
    assert_int_equal(crk_unmount_segment(s, a, "seg", 21000), 0);
    assert_int_equal(crk_mount_segment(s, a, &spec, 21100, NULL), 0);
    assert_int_equal(crk_put_start(s, a, "n", MIB, NULL, 24999, &l), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(crk_put_start(s, a, "n", MIB, NULL, 25000, &l), 0);
    assert_int_equal(crk_put_end(s, a, "n", 25000), 0);

    /* The same with an unowned write: the release timeout (600 s) holds the name. */
    crk_replicate_config plain = tu_cfg(1);
    assert_int_equal(crk_put_start(s, a, "u", MIB, &plain, 30000, &l), 0);
    assert_int_equal(crk_unmount_segment(s, a, "seg", 31000), 0);
    assert_int_equal(crk_mount_segment(s, a, &spec, 31100, NULL), 0);
    assert_int_equal(crk_put_start(s, a, "m", MIB, NULL, 629999, &l), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(crk_put_start(s, a, "m", MIB, NULL, 630000, &l), 0);
    crk_service_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_close_revokes_and_defers_space),
        cmocka_unit_test(test_bound_checked_and_past),
        cmocka_unit_test(test_upsert_keeps_old_version),
        cmocka_unit_test(test_batch_owned),
        cmocka_unit_test(test_dispatch_peer),
        cmocka_unit_test(test_dropped_segment_fenced_until_owned_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
