/*
 * put_grants_test.c - put grants (crk_put_end_granted; docs/WIRE.md, "Put
 * grants"): an end with a grant completes the key on the grant's replicas
 * and the grant key is gone (space moved, not copied or leaked); an upsert
 * replaces the old version; the grant's pins carry over; refusals about the
 * key (exists, another write in flight) consume the grant and free its space
 * at once; a "grant" that is not this client's fresh write in flight changes
 * nothing; a stale write of the key is preempted; through the dispatcher the
 * grant key is in the request's tenant namespace like the key.
 *
 * Commit ahead (crk_put_end_ahead; docs/WIRE.md, "Commit ahead"): the key becomes a versioned
 * write in flight on the grant's replicas whose reads answer CR_ERR_PUT_COMMITTING; the plain
 * end completes it with that version; refusals leave the grant as it was; the key's end
 * (completed, revoked with its connection, dropped with its segment) is reported to the
 * stage-results hook, which wakes the reads held for it. A batch's end committed ahead
 * (crk_batch_put_end_ahead) does the same for the caller's own puts owned by the connection,
 * and refuses, key by key and touching nothing, every other write.
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

/* A grant: a fresh owned write of `key` by c; its replica's address. */
static uint64_t grant(crk_service *s, crk_client_id c, const char *key, uint64_t size,
                      const crk_replicate_config *base, uint64_t now)
{
    crk_replicate_config cfg = base != NULL ? *base : tu_cfg(1);
    cfg.owner_conn = 7;
    cfg.owned_ms = 40000;
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, c, key, size, &cfg, now, &l), 0);
    assert_int_equal(l.n, 1);
    return l.r[0].address;
}

static uint64_t address_of(crk_service *s, const char *key, uint64_t now, uint64_t *version)
{
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(s, key, now, &l), 0);
    assert_int_equal(l.n, 1);
    if (version != NULL)
        *version = l.version;
    return l.r[0].address;
}

static void test_end_completes_key_on_the_grant(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    uint64_t at = grant(s, a, "g1", MIB, NULL, 100);
    assert_int_equal(crk_exist(s, "k", 100), 0);
    uint64_t version = 0;
    assert_int_equal(crk_put_end_granted(s, a, "k", "g1", false, 200, &version), 0);
    assert_true(version != 0);
    uint64_t seen = 0;
    assert_int_equal(address_of(s, "k", 200, &seen), at); /* the grant's space, not a copy */
    assert_int_equal(seen, version);
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(s, "k", 200, &l), 0);
    assert_int_equal(l.value_size, MIB);
    /* The grant key is gone, and only the value's space is in use. */
    assert_int_equal(crk_put_end(s, a, "g1", 200), CR_OBJECT_NOT_FOUND);
    crk_stats st = tu_stats(s);
    assert_int_equal(st.allocated_bytes, MIB);
    assert_int_equal(st.granted_puts, 1);
    /* The key behaves as any put's: removable, and its space comes back. */
    assert_int_equal(crk_remove(s, "k", true, 300), 0);
    assert_int_equal(crk_tick(s, 20000), 0);
    assert_int_equal(tu_stats(s).allocated_bytes, 0);
    crk_service_destroy(s);
}

static void test_refusals_consume_the_grant(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1), b = tu_client(2);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    crk_replicate_config one = tu_cfg(1);
    assert_int_equal(tu_put(s, a, "done", MIB, &one, 0), 0);
    uint64_t before = address_of(s, "done", 0, NULL);

    /* A complete key (put, not upsert): exists; the old value stays, the grant is freed. */
    grant(s, a, "g1", MIB, NULL, 100);
    assert_int_equal(tu_stats(s).allocated_bytes, 2 * MIB);
    assert_int_equal(crk_put_end_granted(s, a, "done", "g1", false, 200, NULL),
                     CR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(address_of(s, "done", 200, NULL), before);
    assert_int_equal(tu_stats(s).allocated_bytes, MIB);
    assert_int_equal(crk_put_end(s, a, "g1", 200), CR_OBJECT_NOT_FOUND);

    /* Another client's young write of the key: busy; theirs goes on, ours is freed. */
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, b, "busy", MIB, &one, 1000, &l), 0);
    grant(s, a, "g2", MIB, NULL, 1000);
    assert_int_equal(crk_put_end_granted(s, a, "busy", "g2", false, 1100, NULL),
                     CR_OBJECT_REPLICA_BUSY);
    assert_int_equal(tu_stats(s).allocated_bytes, 2 * MIB);
    assert_int_equal(crk_put_end(s, b, "busy", 1200), 0);
    assert_int_equal(tu_stats(s).granted_puts, 0);
    crk_service_destroy(s);
}

/* The keys the service reported to the stage-results hook (the RPC server's held reads). */
static char reported[8][64];
static size_t n_reported;

static void on_report(void *ctx, const char *const *keys, const size_t *lens, size_t n)
{
    (void)ctx;
    for (size_t i = 0; keys != NULL && i < n && n_reported < 8; i++)
        snprintf(reported[n_reported++], sizeof(reported[0]), "%.*s", (int)lens[i], keys[i]);
}

static void test_commit_ahead(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_service_on_stage_results(s, on_report, NULL);
    n_reported = 0;
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    uint64_t at = grant(s, a, "g1", MIB, NULL, 100);
    uint64_t version = 0;
    assert_int_equal(crk_put_end_ahead(s, a, "k", "g1", 200, &version), 0);
    assert_true(version != 0);
    /* Committing: every read of it says so (the RPC server holds them). */
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(s, "k", 200, &l), CR_ERR_PUT_COMMITTING);
    assert_int_equal(crk_exist(s, "k", 200), CR_ERR_PUT_COMMITTING);
    assert_int_equal(crk_remove(s, "k", true, 200), CR_ERR_PUT_COMMITTING);
    const char *keys[] = {"k"};
    int r[1];
    assert_int_equal(crk_batch_exist(s, keys, 1, 200, r), 0);
    assert_int_equal(r[0], CR_ERR_PUT_COMMITTING);
    assert_int_equal(crk_put_end(s, a, "g1", 200), CR_OBJECT_NOT_FOUND); /* the grant moved */
    assert_int_equal(n_reported, 0);
    /* The writer's end completes it, with the version the ahead end gave. */
    uint64_t ended = 0;
    assert_int_equal(crk_put_end_versioned(s, a, "k", 300, &ended), 0);
    assert_int_equal(ended, version);
    uint64_t seen = 0;
    assert_int_equal(address_of(s, "k", 300, &seen), at);
    assert_int_equal(seen, version);
    assert_int_equal(n_reported, 1);
    assert_string_equal(reported[0], "k");
    crk_stats st = tu_stats(s);
    assert_int_equal(st.ahead_puts, 1);
    assert_int_equal(st.granted_puts, 1);
    assert_int_equal(st.allocated_bytes, MIB);

    /* Refusals leave the grant as it was: it is used afterwards. */
    grant(s, a, "g2", MIB, NULL, 400);
    assert_int_equal(crk_put_end_ahead(s, a, "k", "g2", 400, NULL), CR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(crk_put_end_ahead(s, a, "k2", "nosuch", 400, NULL), CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_put_end_ahead(s, a, "g2", "g2", 400, NULL), CR_INVALID_PARAMS);
    assert_int_equal(tu_stats(s).allocated_bytes, 2 * MIB);
    assert_int_equal(crk_put_end_ahead(s, a, "k2", "g2", 400, NULL), 0);
    assert_int_equal(crk_put_end_ahead(s, a, "k3", "g2", 400, NULL), CR_OBJECT_NOT_FOUND);
    /* A key committed ahead is no grant: its replicas stay its own. */
    assert_int_equal(crk_put_end_granted(s, a, "k4", "k2", false, 450, NULL), CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_put_end_ahead(s, a, "k4", "k2", 450, NULL), CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_get_replica_list(s, "k2", 450, &l), CR_ERR_PUT_COMMITTING);

    /* Its connection closes before its end: revoked, reported, the key free. */
    n_reported = 0;
    assert_int_equal(crk_revoke_conn_writes(s, 7, 500), 1);
    assert_int_equal(n_reported, 1);
    assert_string_equal(reported[0], "k2");
    assert_int_equal(crk_exist(s, "k2", 500), 0);
    assert_int_equal(crk_get_replica_list(s, "k2", 500, &l), CR_OBJECT_NOT_FOUND);

    /* Its writer revokes it (its copy failed): reported at once, the key free. */
    grant(s, a, "g4", MIB, NULL, 550);
    assert_int_equal(crk_put_end_ahead(s, a, "k5", "g4", 550, NULL), 0);
    n_reported = 0;
    assert_int_equal(crk_put_revoke(s, a, "k5", 560), 0);
    assert_int_equal(n_reported, 1);
    assert_string_equal(reported[0], "k5");
    assert_int_equal(crk_get_replica_list(s, "k5", 560, &l), CR_OBJECT_NOT_FOUND);

    /* Its segment goes before its end: dropped, reported. */
    grant(s, a, "g3", MIB, NULL, 600);
    assert_int_equal(crk_put_end_ahead(s, a, "k3", "g3", 600, NULL), 0);
    n_reported = 0;
    assert_int_equal(crk_unmount_segment(s, a, "seg", 700), 0);
    assert_true(n_reported >= 1);
    assert_string_equal(reported[0], "k3");
    assert_int_equal(crk_exist(s, "k3", 700), 0);
    crk_service_on_stage_results(s, NULL, NULL);
    crk_service_destroy(s);
}

static void test_batch_commit_ahead(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_service_on_stage_results(s, on_report, NULL);
    crk_client_id a = tu_client(1), b = tu_client(2);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    crk_replicate_config owned = tu_cfg(1), plain = tu_cfg(1);
    owned.owner_conn = 7;
    owned.owned_ms = 40000;
    const char *keys[] = {"b1", "b2"};
    const uint64_t sizes[] = {MIB, MIB};
    int r[6];
    crk_replica_list lists[2];
    assert_int_equal(crk_batch_put_start(s, a, keys, sizes, 2, &owned, 100, r, lists, false), 0);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], 0);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, a, "unowned", MIB, &plain, 100, &l), 0);
    assert_int_equal(tu_put(s, a, "ups", MIB, &plain, 100), 0);
    assert_int_equal(crk_upsert_start(s, a, "ups", MIB, &owned, 100, &l), 0); /* a new version */
    assert_int_equal(crk_put_start(s, b, "theirs", MIB, &plain, 100, &l), 0);
    assert_int_equal(tu_put(s, a, "done", MIB, &plain, 100), 0);

    /* The owned puts commit ahead on their connection; everything else is refused. */
    const char *ahead[] = {"b1", "b2", "unowned", "ups", "theirs", "done"};
    assert_int_equal(crk_batch_put_end_ahead(s, a, 8, ahead, 2, 200, r), 0); /* another conn */
    assert_int_equal(r[0], CR_INVALID_PARAMS);
    assert_int_equal(r[1], CR_INVALID_PARAMS);
    assert_int_equal(crk_exist(s, "b1", 200), 0); /* untouched: an ordinary put in flight */
    assert_int_equal(crk_batch_put_end_ahead(s, a, 7, ahead, 6, 200, r), 0);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], 0);
    assert_int_equal(r[2], CR_INVALID_PARAMS); /* no "ow": not revoked with a connection */
    assert_int_equal(r[3], CR_INVALID_PARAMS); /* upserts do not commit ahead */
    assert_int_equal(r[4], CR_ILLEGAL_CLIENT);
    assert_int_equal(r[5], CR_INVALID_WRITE); /* complete: no write in flight */
    const char *none[] = {"nosuch"};
    assert_int_equal(crk_batch_put_end_ahead(s, a, 7, none, 1, 200, r), 0);
    assert_int_equal(r[0], CR_OBJECT_NOT_FOUND);
    assert_int_equal(tu_stats(s).ahead_puts, 2);
    assert_int_equal(crk_get_replica_list(s, "b1", 200, &l), CR_ERR_PUT_COMMITTING);
    assert_int_equal(crk_exist(s, "b2", 200), CR_ERR_PUT_COMMITTING);
    assert_int_equal(crk_exist(s, "unowned", 200), 0); /* a refused key is left as it was */
    /* Asked twice: left as it is (same version). */
    assert_int_equal(crk_batch_put_end_ahead(s, a, 7, ahead, 1, 210, r), 0);
    assert_int_equal(r[0], 0);
    assert_int_equal(tu_stats(s).ahead_puts, 2);

    /* The writer's plain batch end completes b1 (reported), its revoke drops b2 (reported). */
    n_reported = 0;
    assert_int_equal(crk_batch_put_end(s, a, ahead, 1, 300, r), 0);
    assert_int_equal(r[0], 0);
    assert_int_equal(crk_batch_put_revoke(s, a, ahead + 1, 1, 300, r), 0);
    assert_int_equal(r[0], 0);
    assert_int_equal(n_reported, 2);
    assert_string_equal(reported[0], "b1");
    assert_string_equal(reported[1], "b2");
    assert_int_equal(crk_get_replica_list(s, "b1", 300, &l), 0);
    assert_int_equal(crk_get_replica_list(s, "b2", 300, &l), CR_OBJECT_NOT_FOUND);

    /* One left committing when its connection closes: revoked, reported. */
    const char *k3[] = {"b3"};
    assert_int_equal(crk_batch_put_start(s, a, k3, sizes, 1, &owned, 400, r, lists, false), 0);
    assert_int_equal(crk_batch_put_end_ahead(s, a, 7, k3, 1, 400, r), 0);
    assert_int_equal(r[0], 0);
    n_reported = 0;
    assert_int_equal(crk_revoke_conn_writes(s, 7, 500), 2); /* b3, and "ups" still in flight */
    assert_int_equal(n_reported, 1);
    assert_string_equal(reported[0], "b3");
    assert_int_equal(crk_exist(s, "b3", 500), 0);
    crk_service_on_stage_results(s, NULL, NULL);
    crk_service_destroy(s);
}

static void test_not_a_grant_changes_nothing(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1), b = tu_client(2);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    crk_replicate_config one = tu_cfg(1);
    /* Absent. */
    assert_int_equal(crk_put_end_granted(s, a, "k", "nope", false, 10, NULL), CR_OBJECT_NOT_FOUND);
    /* Another client's write in flight: untouched, its owner can still finish it. */
    grant(s, b, "theirs", MIB, NULL, 10);
    assert_int_equal(crk_put_end_granted(s, a, "k", "theirs", false, 20, NULL),
                     CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_put_end(s, b, "theirs", 30), 0);
    /* A complete object is no grant. */
    assert_int_equal(crk_put_end_granted(s, a, "k", "theirs", false, 40, NULL),
                     CR_OBJECT_NOT_FOUND);
    /* Nor is an upsert in flight of a complete key. */
    crk_replica_list l;
    assert_int_equal(crk_upsert_start(s, a, "theirs", MIB, &one, 50, &l), 0);
    assert_int_equal(crk_put_end_granted(s, a, "k", "theirs", false, 60, NULL),
                     CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_put_end(s, a, "theirs", 70), 0);
    /* A key cannot be its own grant; bad keys are refused. */
    grant(s, a, "self", MIB, NULL, 80);
    assert_int_equal(crk_put_end_granted(s, a, "self", "self", false, 90, NULL), CR_INVALID_PARAMS);
    assert_int_equal(crk_put_end_granted(s, a, "", "self", false, 90, NULL), CR_INVALID_KEY);
    assert_int_equal(crk_put_end_granted(s, a, "k", "", false, 90, NULL), CR_INVALID_KEY);
    assert_int_equal(crk_exist(s, "k", 100), 0);
    assert_int_equal(crk_put_end_granted(s, a, "k", "self", false, 100, NULL), 0); /* still good */
    assert_int_equal(tu_stats(s).allocated_bytes, 2 * MIB);
    crk_service_destroy(s);
}

static void test_upsert_replaces_and_pins_carry_over(void **state)
{
    (void)state;
    crk_config c = tu_config();
    crk_service *s = tu_service(&c, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    crk_replicate_config one = tu_cfg(1);
    assert_int_equal(tu_put(s, a, "k", MIB, &one, 0), 0);
    uint64_t v1 = 0, old = address_of(s, "k", 0, &v1);
    assert_int_equal(crk_tick(s, 20000), 0); /* the get's lease is over */

    crk_replicate_config pinned = tu_cfg(1);
    pinned.hard_pin = true;
    uint64_t at = grant(s, a, "g", 2 * MIB, &pinned, 20000);
    uint64_t v2 = 0;
    assert_int_equal(crk_put_end_granted(s, a, "k", "g", true, 20100, &v2), 0);
    assert_true(v2 != v1);
    uint64_t seen = 0;
    assert_int_equal(address_of(s, "k", 20100, &seen), at);
    assert_true(at != old);
    assert_int_equal(seen, v2);
    crk_stats st = tu_stats(s);
    assert_int_equal(st.hard_pinned_keys, 1);
    assert_int_equal(st.allocated_bytes, 2 * MIB); /* the old version's space is free */
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(s, "k", 20100, &l), 0);
    assert_int_equal(l.value_size, 2 * MIB);
    /* An upsert through a grant of an absent key puts it. */
    grant(s, a, "g2", MIB, NULL, 20200);
    assert_int_equal(crk_put_end_granted(s, a, "new", "g2", true, 20300, NULL), 0);
    assert_int_equal(crk_exist(s, "new", 20300), 1);
    crk_service_destroy(s);
}

static void test_stale_write_of_the_key_is_preempted(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1), b = tu_client(2);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    crk_replicate_config one = tu_cfg(1);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, b, "k", MIB, &one, 0, &l), 0); /* b went quiet */
    uint64_t at = grant(s, a, "g", MIB, NULL, 40000); /* past the 30 s discard timeout */
    assert_int_equal(crk_put_end_granted(s, a, "k", "g", false, 40100, NULL), 0);
    assert_int_equal(address_of(s, "k", 40100, NULL), at);
    assert_int_equal(crk_put_end(s, b, "k", 40200), 0); /* b's late end: k is complete */
    assert_int_equal(address_of(s, "k", 40200, NULL), at);
    assert_int_equal(tu_stats(s).put_start_discards, 1);
    crk_service_destroy(s);
}

/* One request through the dispatcher; returns its status (the reply's version to *version). */
static int dispatch(crk_service *s, crk_peer *peer, const crp_rpc_req *req, uint64_t now,
                    uint64_t *version)
{
    crk_server_info info = {.view_version = 1, .software = "test"};
    crk_scratch sc = {0};
    crp_rpc_resp resp;
    crk_dispatch(s, &info, peer, req, now, &resp, &sc);
    int rc = resp.status;
    if (version != NULL)
        *version = resp.u.end.version;
    crk_scratch_free(&sc);
    return rc;
}

static void test_dispatch_in_a_tenant(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    tu_mount(s, a, "seg", 1ull << 32, 64 * MIB, 0);
    crp_rpc_uuid id = {a.hi, a.lo};
    crk_peer peer = {0};
    crp_rpc_req start = {.op = CRP_RPC_PUT_START, .tenant = "t1", .owned_ms = 40000};
    start.u.put_start = (crp_rpc_put_start_req){id, "\x02grant", MIB, {.replica_num = 1}};
    assert_int_equal(dispatch(s, &peer, &start, 100, NULL), 0);
    /* The default tenant has no such grant. */
    crp_rpc_req end = {.op = CRP_RPC_PUT_END, .grant_key = "\x02grant"};
    end.u.owner_key = (crp_rpc_owner_key_req){id, "k"};
    assert_int_equal(dispatch(s, &peer, &end, 200, NULL), CR_OBJECT_NOT_FOUND);
    end.tenant = "t1";
    uint64_t version = 0;
    assert_int_equal(dispatch(s, &peer, &end, 200, &version), 0);
    assert_true(version != 0);
    crp_rpc_req get = {.op = CRP_RPC_EXIST, .tenant = "t1"};
    get.u.key.key = "k";
    crk_server_info info = {.view_version = 1, .software = "test"};
    crk_scratch sc = {0};
    crp_rpc_resp resp;
    crk_dispatch(s, &info, &peer, &get, 300, &resp, &sc);
    assert_int_equal(resp.status, 0);
    assert_true(resp.u.exist.exists);
    crk_scratch_free(&sc);
    assert_int_equal(crk_exist(s, "k", 300), 0); /* not in the default namespace */
    /* Without "gk" the end is a plain one (k complete already: a no-op). */
    end.grant_key = NULL;
    assert_int_equal(dispatch(s, &peer, &end, 400, NULL), 0);
    crk_peer_closed(s, &peer, 500);
    crk_service_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_end_completes_key_on_the_grant),
        cmocka_unit_test(test_refusals_consume_the_grant),
        cmocka_unit_test(test_commit_ahead),
        cmocka_unit_test(test_batch_commit_ahead),
        cmocka_unit_test(test_not_a_grant_changes_nothing),
        cmocka_unit_test(test_upsert_replaces_and_pins_carry_over),
        cmocka_unit_test(test_stale_write_of_the_key_is_preempted),
        cmocka_unit_test(test_dispatch_in_a_tenant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
