/*
 * liveness_test.c - clients, segments and the fence: ping / NEED_REMOUNT,
 * mount and remount idempotence, explicit unmount, client expiry (segments
 * unmounted, objects whose replicas all lived there erased, other replicas
 * kept), the restart fence on remounted segments, the fence of a re-mounted
 * name while old leases or slow writers may still touch its memory, and a
 * randomized simulation that models segment memory byte by byte and checks
 * that no reader can ever see bytes of another object across restarts,
 * expiries, evictions, force removes, upserts and slow writers.
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

static void test_ping(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    int st = -1;
    assert_int_equal(crk_ping(s, tu_client(1), 1, &st), 0);
    assert_int_equal(st, CRK_CLIENT_NEED_REMOUNT);
    crk_client_id zero = {0, 0};
    assert_int_equal(crk_ping(s, zero, 1, &st), CR_ILLEGAL_CLIENT);
    tu_mount(s, tu_client(1), "a", 0, MIB, 2);
    assert_int_equal(crk_ping(s, tu_client(1), 3, &st), 0);
    assert_int_equal(st, CRK_CLIENT_OK);
    /* A client may register without segments (remount of nothing). */
    assert_int_equal(crk_remount_segments(s, tu_client(2), NULL, 0, 4, NULL), 0);
    assert_int_equal(crk_ping(s, tu_client(2), 5, &st), 0);
    assert_int_equal(st, CRK_CLIENT_OK);
    assert_int_equal(tu_stats(s).clients, 2);
    assert_int_equal(tu_stats(s).requests[CRK_OP_PING], 4);
    crk_service_destroy(s);
}

static void test_mount_idempotent(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1), b = tu_client(2);
    uint64_t e1 = tu_mount(s, a, "seg", 0x1000, MIB, 0);
    uint64_t e2 = tu_mount(s, a, "seg", 0x1000, MIB, 1);
    assert_int_equal(e1, e2);
    crk_segment_spec other = {.name = "seg", .base = 0x2000, .size = MIB};
    uint64_t epoch = 77;
    assert_int_equal(crk_mount_segment(s, a, &other, 2, &epoch), CR_SEGMENT_ALREADY_EXISTS);
    other.base = 0x1000;
    assert_int_equal(crk_mount_segment(s, b, &other, 2, &epoch), CR_SEGMENT_ALREADY_EXISTS);
    assert_int_equal(epoch, 77);
    crk_segment_spec bad = {.name = "", .base = 0, .size = MIB};
    assert_int_equal(crk_mount_segment(s, a, &bad, 2, NULL), CR_INVALID_PARAMS);
    bad.name = "tiny";
    bad.size = 63;
    assert_int_equal(crk_mount_segment(s, a, &bad, 2, NULL), CR_INVALID_PARAMS);
    bad.size = 64;
    bad.base = UINT64_MAX - 10;
    assert_int_equal(crk_mount_segment(s, a, &bad, 2, NULL), CR_INVALID_PARAMS);
    char longname[CRK_MAX_SEGMENT_NAME + 2];
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    bad.name = longname;
    bad.base = 0;
    assert_int_equal(crk_mount_segment(s, a, &bad, 2, NULL), CR_INVALID_PARAMS);
    longname[CRK_MAX_SEGMENT_NAME] = '\0';
    assert_int_equal(crk_mount_segment(s, a, &bad, 2, NULL), 0);
    crk_client_id zero = {0, 0};
    assert_int_equal(crk_mount_segment(s, zero, &other, 2, NULL), CR_ILLEGAL_CLIENT);
    crk_stats st = tu_stats(s);
    assert_int_equal(st.segments, 2);
    assert_int_equal(st.requests[CRK_OP_MOUNT], 10);
    assert_int_equal(st.failures[CRK_OP_MOUNT], 7);
    crk_service_destroy(s);
}

static void test_remount_keeps_existing(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1);
    uint64_t e1 = tu_mount(s, a, "seg", 0x1000, MIB, 0);
    assert_int_equal(tu_put(s, a, "k", 100, NULL, 1), 0);
    crk_segment_spec specs[2] = {{.name = "seg", .base = 0x1000, .size = MIB},
                                 {.name = "seg2", .base = 0x9000000, .size = MIB}};
    int res[2] = {-1, -1};
    assert_int_equal(crk_remount_segments(s, a, specs, 2, 2, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], 0);
    assert_int_equal(crk_remount_segments(s, a, specs, 2, 3, res), 0); /* again: no-op */
    crk_segment_info info[2];
    size_t n = 0;
    assert_int_equal(crk_list_segments(s, info, 2, &n), 0);
    assert_int_equal(n, 2);
    for (int i = 0; i < 2; i++) {
        if (strcmp(info[i].name, "seg") == 0) {
            assert_int_equal(info[i].mount_epoch, e1);    /* kept as it was */
            assert_int_equal(info[i].fenced_until_ms, 0); /* not fenced */
        } else {
            assert_true(info[i].fenced_until_ms > 0); /* new remount: fenced */
        }
    }
    crk_replica_list g;
    assert_int_equal(crk_get_replica_list(s, "k", 4, &g), 0);
    assert_int_equal(g.r[0].mount_epoch, e1);
    /* One bad segment among good ones: per-segment results. */
    specs[1].base = 0x1234;
    assert_int_equal(crk_remount_segments(s, a, specs, 2, 5, res), CR_SEGMENT_ALREADY_EXISTS);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], CR_SEGMENT_ALREADY_EXISTS);
    assert_int_equal(crk_remount_segments(s, a, NULL, 1, 5, res), CR_INVALID_PARAMS);
    crk_service_destroy(s);
}

static void test_unmount(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1), b = tu_client(2);
    tu_mount(s, a, "sa", 0x1000000, MIB, 0);
    tu_mount(s, b, "sb", 0x2000000, MIB, 0);
    crk_replicate_config two = tu_cfg(2), one = tu_cfg(1);
    const char *pa[] = {"sa"};
    one.preferred_segments = pa;
    one.n_preferred = 1;
    assert_int_equal(tu_put(s, a, "both", 100, &two, 1), 0);
    assert_int_equal(tu_put(s, a, "only-a", 100, &one, 1), 0);
    assert_int_equal(crk_unmount_segment(s, b, "sa", 2), CR_ILLEGAL_CLIENT);
    assert_int_equal(crk_unmount_segment(s, a, "sa", 2), 0);
    assert_int_equal(crk_unmount_segment(s, a, "sa", 3), 0); /* idempotent */
    assert_int_equal(crk_unmount_segment(s, a, "never", 3), 0);
    assert_int_equal(crk_exist(s, "only-a", 4), 0);
    crk_replica_list g;
    assert_int_equal(crk_get_replica_list(s, "both", 4, &g), 0);
    assert_int_equal(g.n, 1);
    assert_string_equal(g.r[0].segment, "sb");
    crk_stats st = tu_stats(s);
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.capacity_bytes, MIB);
    assert_int_equal(st.allocated_bytes, 128);
    assert_int_equal(st.keys, 1);
    crk_service_destroy(s);
}

static void test_client_expiry(void **state)
{
    crk_config c = tu_config();
    c.client_ttl_ms = 10000;
    crk_service *s = tu_service(&c, 0);
    crk_client_id a = tu_client(1), b = tu_client(2);
    tu_mount(s, a, "sa", 0x1000000, MIB, 0);
    tu_mount(s, a, "sa2", 0x3000000, MIB, 0);
    tu_mount(s, b, "sb", 0x2000000, MIB, 0);
    crk_replicate_config all = tu_cfg(3), ona = tu_cfg(1), onb = tu_cfg(1);
    const char *pa[] = {"sa"}, *pb[] = {"sb"};
    ona.preferred_segments = pa;
    ona.n_preferred = 1;
    onb.preferred_segments = pb;
    onb.n_preferred = 1;
    assert_int_equal(tu_put(s, b, "x", 100, &all, 1), 0); /* sa, sa2, sb */
    assert_int_equal(tu_put(s, b, "y", 100, &ona, 1), 0); /* sa only */
    assert_int_equal(tu_put(s, a, "z", 100, &onb, 1), 0); /* sb only */
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, b, "w", 100, &ona, 1, &l), 0); /* in flight on sa */
    int st = 0;
    assert_int_equal(crk_ping(s, b, 9000, &st), 0);
    assert_int_equal(crk_tick(s, 9999), 0);
    assert_int_equal(tu_stats(s).clients, 2);
    assert_int_equal(crk_tick(s, 10000), 0); /* a: silent since 0 */
    crk_stats stats = tu_stats(s);
    assert_int_equal(stats.clients, 1);
    assert_int_equal(stats.clients_expired, 1);
    assert_int_equal(stats.segments, 1);
    assert_int_equal(crk_exist(s, "y", 10001), 0);
    assert_int_equal(crk_exist(s, "z", 10001), 1); /* owner expired, data on sb: kept */
    crk_replica_list g;
    assert_int_equal(crk_get_replica_list(s, "x", 10001, &g), 0);
    assert_int_equal(g.n, 1);
    assert_string_equal(g.r[0].segment, "sb");
    crk_key_info info;
    assert_int_equal(crk_query_key(s, "w", 10001, &info), CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_put_end(s, b, "w", 10002), CR_OBJECT_NOT_FOUND);
    assert_int_equal(stats.keys, 2);
    assert_int_equal(stats.writes_in_flight, 0);
    assert_int_equal(stats.allocated_bytes, 2 * 128);
    /* The expired client is told to remount, and can. */
    assert_int_equal(crk_ping(s, a, 10003, &st), 0);
    assert_int_equal(st, CRK_CLIENT_NEED_REMOUNT);
    crk_segment_spec spec = {.name = "sa", .base = 0x1000000, .size = MIB};
    assert_int_equal(crk_remount_segments(s, a, &spec, 1, 10004, NULL), 0);
    assert_int_equal(crk_ping(s, a, 10005, &st), 0);
    assert_int_equal(st, CRK_CLIENT_OK);
    /* b kept pinging at 9000 only: it expires at 19000. */
    assert_int_equal(crk_tick(s, 19000), 0);
    assert_int_equal(tu_stats(s).clients, 1);
    assert_int_equal(crk_exist(s, "x", 19001), 0);
    assert_int_equal(crk_exist(s, "z", 19001), 0);
    crk_service_destroy(s);
}

/* The restart fence: a remounted segment takes no allocation until
 * start + restart_fence_ms; a freshly mounted one does at once. */
static void test_restart_fence(void **state)
{
    crk_service *s = tu_service(NULL, 1000); /* fence ends at 1000 + 11000 */
    crk_client_id a = tu_client(1), b = tu_client(2);
    int st = 0;
    assert_int_equal(crk_ping(s, a, 1100, &st), 0);
    assert_int_equal(st, CRK_CLIENT_NEED_REMOUNT);
    crk_segment_spec old = {.name = "old", .base = 0x1000000, .size = MIB};
    assert_int_equal(crk_remount_segments(s, a, &old, 1, 1500, NULL), 0);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, a, "k", 100, NULL, 2000, &l), CR_NO_AVAILABLE_HANDLE);
    assert_true(strstr(cr_last_error_message(), "fenced") != NULL);
    assert_int_equal(tu_stats(s).evictions_attempted, 0);
    assert_int_equal(crk_put_start(s, a, "k", 100, NULL, 11999, &l), CR_NO_AVAILABLE_HANDLE);
    /* A fresh segment is usable at once, preferred or not. */
    tu_mount(s, b, "fresh", 0x2000000, MIB, 3000);
    crk_replicate_config pref = tu_cfg(2);
    const char *names[] = {"old", "fresh"};
    pref.preferred_segments = names;
    pref.n_preferred = 2;
    assert_int_equal(crk_put_start(s, a, "k", 100, &pref, 3001, &l), 0);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.r[0].segment, "fresh");
    assert_int_equal(crk_put_end(s, a, "k", 3002), 0);
    /* After the fence the remounted segment serves again. */
    assert_int_equal(crk_put_start(s, a, "k2", 100, &pref, 12000, &l), 0);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.r[0].segment, "old");
    crk_segment_info info[2];
    size_t n = 0;
    assert_int_equal(crk_list_segments(s, info, 2, &n), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(info[i].fenced_until_ms, strcmp(info[i].name, "old") == 0 ? 12000 : 0);
    crk_service_destroy(s);

    /* A shorter lease TTL shortens the fence; an explicit value wins. */
    crk_config c = tu_config();
    c.default_kv_lease_ttl_ms = 500;
    s = tu_service(&c, 0);
    assert_int_equal(crk_service_config(s)->restart_fence_ms, 1500);
    crk_service_destroy(s);
    c.restart_fence_ms = 60000;
    s = tu_service(&c, 0);
    assert_int_equal(crk_remount_segments(s, a, &old, 1, 10, NULL), 0);
    assert_int_equal(crk_put_start(s, a, "k", 100, NULL, 59999, &l), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(crk_put_start(s, a, "k", 100, NULL, 60000, &l), 0);
    crk_service_destroy(s);
}

/* Unmounting a segment while readers hold leases on it fences the name. */
static void test_unmount_fence(void **state)
{
    crk_config c = tu_config();
    c.client_ttl_ms = 1000;
    crk_service *s = tu_service(&c, 0); /* restart fence over at 11000 */
    crk_client_id a = tu_client(1), r = tu_client(2);
    crk_segment_spec spec = {.name = "sa", .base = 0x1000000, .size = 4 * KIB};
    assert_int_equal(crk_mount_segment(s, a, &spec, 20000, NULL), 0);
    assert_int_equal(tu_put(s, a, "k", 4 * KIB, NULL, 20010), 0);
    crk_replica_list g, l;
    assert_int_equal(crk_get_replica_list(s, "k", 20500, &g), 0); /* reader until 30500 */
    int st;
    assert_int_equal(crk_ping(s, r, 20600, &st), 0);
    /* a goes silent: expired at 21000, its segment unmounted, "k" erased. */
    assert_int_equal(crk_tick(s, 21000), 0);
    assert_int_equal(crk_exist(s, "k", 21001), 0);
    /* a comes back and remounts the same memory: fenced until 30500. */
    assert_int_equal(crk_remount_segments(s, a, &spec, 1, 21100, NULL), 0);
    assert_int_equal(crk_put_start(s, r, "new", 4 * KIB, NULL, 30499, &l), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(crk_put_start(s, r, "new", 4 * KIB, NULL, 30500, &l), 0);
    assert_int_equal(l.r[0].address, g.r[0].address);
    crk_service_destroy(s);

    /* Same with an explicit unmount and a plain mount; and no lease, no fence. */
    s = tu_service(NULL, 0);
    assert_int_equal(crk_mount_segment(s, a, &spec, 0, NULL), 0);
    assert_int_equal(tu_put(s, a, "k", 4 * KIB, NULL, 10), 0);
    assert_int_equal(crk_get_replica_list(s, "k", 500, &g), 0);
    assert_int_equal(crk_unmount_segment(s, a, "sa", 600), 0);
    assert_int_equal(crk_mount_segment(s, a, &spec, 700, NULL), 0);
    assert_int_equal(crk_put_start(s, a, "n", 4 * KIB, NULL, 10499, &l), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(crk_put_start(s, a, "n", 4 * KIB, NULL, 10500, &l), 0);
    assert_int_equal(crk_put_end(s, a, "n", 10500), 0);
    assert_int_equal(crk_unmount_segment(s, a, "sa", 20000), 0);
    assert_int_equal(crk_mount_segment(s, a, &spec, 20001, NULL), 0);
    assert_int_equal(crk_put_start(s, a, "m", 4 * KIB, NULL, 20002, &l), 0);
    crk_service_destroy(s);
}

/*
 * Issue 11 item 14: a fresh client reusing a segment name. The tombstone's
 * fence covers the memory old readers may still address: a first mount over
 * the same range is fenced (with a message that says why, not "after a
 * remount"), one over other memory is not, and the heartbeat reports the
 * fence so health() can tell the truth.
 */
static void test_first_mount_fence_is_reported(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id old = tu_client(1), fresh = tu_client(2), other = tu_client(3);
    crk_segment_spec spec = {.name = "host:17000", .base = 0x1000000, .size = 4 * KIB};
    assert_int_equal(crk_mount_segment(s, old, &spec, 0, NULL), 0);
    assert_int_equal(tu_put(s, old, "k", 4 * KIB, NULL, 10), 0);
    crk_replica_list g, l;
    assert_int_equal(crk_get_replica_list(s, "k", 500, &g), 0); /* reader until 10500 */
    assert_int_equal(crk_unmount_segment(s, old, "host:17000", 600), 0);
    /* A new process on the same host:port maps its segment elsewhere: no fence. */
    crk_segment_spec elsewhere = {.name = "host:17000", .base = 0x9000000, .size = 4 * KIB};
    assert_int_equal(crk_mount_segment(s, fresh, &elsewhere, 700, NULL), 0);
    crk_heartbeat_info hi;
    assert_int_equal(crk_heartbeat(s, fresh, 701, &hi), 0);
    assert_int_equal(hi.status, CRK_CLIENT_OK);
    assert_true(hi.fenced_ms == 0);
    assert_int_equal(crk_put_start(s, fresh, "n", 4 * KIB, NULL, 702, &l), 0);
    assert_int_equal(crk_put_revoke(s, fresh, "n", 703), 0);
    assert_int_equal(crk_unmount_segment(s, fresh, "host:17000", 704), 0);
    /* Over the old memory: fenced until the old lease ends, and said so. */
    assert_int_equal(crk_mount_segment(s, other, &spec, 800, NULL), 0);
    assert_int_equal(crk_heartbeat(s, other, 1000, &hi), 0);
    assert_int_equal(hi.status, CRK_CLIENT_OK);
    assert_true(hi.fenced_ms == 9500);
    assert_int_equal(crk_put_start(s, other, "n", 4 * KIB, NULL, 1000, &l), CR_NO_AVAILABLE_HANDLE);
    const char *msg = cr_last_error_message();
    if (strstr(msg, "after a remount") != NULL || strstr(msg, "'host:17000'") == NULL ||
        strstr(msg, "was unmounted while reads or writes") == NULL)
        fail_msg("fence message: %s", msg);
    assert_int_equal(crk_put_start(s, other, "n", 4 * KIB, NULL, 10500, &l), 0);
    assert_int_equal(crk_heartbeat(s, other, 10500, &hi), 0);
    assert_true(hi.fenced_ms == 0);
    crk_service_destroy(s);

    /* A remount after a master restart says so. */
    s = tu_service(NULL, 1000);
    assert_int_equal(crk_remount_segments(s, old, &spec, 1, 1500, NULL), 0);
    assert_int_equal(crk_heartbeat(s, old, 1500, &hi), 0);
    assert_true(hi.fenced_ms == 10500);
    assert_int_equal(crk_put_start(s, old, "n", 4 * KIB, NULL, 1600, &l), CR_NO_AVAILABLE_HANDLE);
    assert_non_null(strstr(cr_last_error_message(), "remounted after a master restart"));
    crk_service_destroy(s);
}

/*
 * Issue 11 item 7: a client whose (re)mount failed is not OK: its heartbeat
 * says NEED_REMOUNT until a remount of all its segments succeeds, so it
 * keeps trying and health() reports the truth meanwhile.
 */
static void test_failed_remount_is_retried(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1), b = tu_client(2);
    crk_segment_spec spec = {.name = "seg", .base = 0x1000000, .size = MIB};
    /* b holds the name; a's remount of it fails. */
    assert_int_equal(crk_mount_segment(s, b, &spec, 0, NULL), 0);
    assert_int_equal(crk_remount_segments(s, a, &spec, 1, 10, NULL), CR_SEGMENT_ALREADY_EXISTS);
    int st = 0;
    assert_int_equal(crk_ping(s, a, 20, &st), 0);
    assert_int_equal(st, CRK_CLIENT_NEED_REMOUNT); /* it was OK before: registered, no segment */
    assert_int_equal(crk_ping(s, a, 30, &st), 0);
    assert_int_equal(st, CRK_CLIENT_NEED_REMOUNT);
    /* b goes; a's next remount works and a is OK again. */
    assert_int_equal(crk_unmount_segment(s, b, "seg", 40), 0);
    assert_int_equal(crk_remount_segments(s, a, &spec, 1, 50, NULL), 0);
    assert_int_equal(crk_ping(s, a, 60, &st), 0);
    assert_int_equal(st, CRK_CLIENT_OK);
    /* A failed plain mount marks it too. */
    assert_int_equal(crk_mount_segment(s, b, &spec, 70, NULL), CR_SEGMENT_ALREADY_EXISTS);
    assert_int_equal(crk_ping(s, b, 80, &st), 0);
    assert_int_equal(st, CRK_CLIENT_NEED_REMOUNT);
    crk_service_destroy(s);
}

/* A slow writer of an in-flight put may write until start + release timeout. */
static void test_inflight_writer_fence(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    crk_client_id a = tu_client(1), w = tu_client(2);
    crk_segment_spec spec = {.name = "sa", .base = 0x1000000, .size = 4 * KIB};
    assert_int_equal(crk_mount_segment(s, a, &spec, 0, NULL), 0);
    crk_replica_list l;
    assert_int_equal(crk_put_start(s, w, "slow", 4 * KIB, NULL, 100, &l), 0);
    assert_int_equal(crk_unmount_segment(s, a, "sa", 200), 0);
    assert_int_equal(crk_mount_segment(s, a, &spec, 300, NULL), 0);
    assert_int_equal(crk_put_start(s, a, "x", 4 * KIB, NULL, 600099, &l), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(crk_put_start(s, a, "x", 4 * KIB, NULL, 600100, &l), 0);
    crk_service_destroy(s);
}

/* --- randomized simulation of the fence ------------------------------------ */

#define SIM_SEGS    2
#define SIM_UNIT    1024u
#define SIM_UNITS   48u
#define SIM_KEYS    24
#define SIM_LEASE   10000u
#define SIM_RELEASE 5000u

typedef struct sim_reader {
    int seg;
    uint32_t lo, hi; /* units [lo, hi) */
    uint32_t tag;
    uint64_t deadline;
} sim_reader;

typedef struct sim_write {
    int seg;
    uint32_t lo, hi, tag;
    uint64_t at;
} sim_write;

typedef struct sim {
    crk_service *s;
    uint64_t now;
    uint32_t mem[SIM_SEGS][SIM_UNITS];
    sim_reader readers[4096];
    size_t nreaders;
    sim_write pending[512];
    size_t npending;
    uint32_t next_version;
    unsigned violations, reads, writes, restarts, expiries, fenced, late_writes;
    uint64_t rng;
    uint64_t silent_until[SIM_SEGS];
} sim;

static const uint64_t sim_base[SIM_SEGS] = {0x10000000, 0x20000000};
static const char *const sim_name[SIM_SEGS] = {"seg0", "seg1"};

static uint64_t sim_rand(sim *m)
{
    uint64_t z = (m->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void sim_locate(const crk_replica_desc *d, int *seg, uint32_t *lo, uint32_t *hi)
{
    int g = strcmp(d->segment, "seg0") == 0 ? 0 : 1;
    uint64_t off = d->address - sim_base[g];
    uint64_t len = d->size ? d->size : 1;
    *seg = g;
    *lo = (uint32_t)(off / SIM_UNIT);
    *hi = (uint32_t)((off + len + SIM_UNIT - 1) / SIM_UNIT);
}

/* Bytes land in memory: no reader still allowed to read them may be affected. */
static void sim_write_bytes(sim *m, int seg, uint32_t lo, uint32_t hi, uint32_t tag)
{
    for (size_t i = 0; i < m->nreaders; i++) {
        sim_reader *r = &m->readers[i];
        if (r->seg == seg && r->deadline > m->now && r->lo < hi && lo < r->hi && r->tag != tag) {
            m->violations++;
            fprintf(stderr, "violation: t=%llu write tag %x over reader tag %x (until %llu)\n",
                    (unsigned long long)m->now, tag, r->tag, (unsigned long long)r->deadline);
        }
    }
    for (uint32_t u = lo; u < hi; u++)
        m->mem[seg][u] = tag;
    m->writes++;
}

static void sim_put(sim *m, int key, bool upsert)
{
    char name[16];
    snprintf(name, sizeof(name), "key%d", key);
    crk_client_id c = tu_client(1 + sim_rand(m) % 2);
    crk_replicate_config cfg = tu_cfg(1 + (uint32_t)(sim_rand(m) % 2));
    uint64_t size = sim_rand(m) % 5 == 0 ? 0 : 1 + sim_rand(m) % (4 * SIM_UNIT);
    crk_replica_list l;
    int rc = upsert ? crk_upsert_start(m->s, c, name, size, &cfg, m->now, &l)
                    : crk_put_start(m->s, c, name, size, &cfg, m->now, &l);
    if (rc == CR_NO_AVAILABLE_HANDLE && strstr(cr_last_error_message(), "fenced"))
        m->fenced++;
    if (rc != 0)
        return;
    uint32_t tag = ((uint32_t)key << 20) | (++m->next_version & 0xFFFFF);
    bool slow = sim_rand(m) % 8 == 0;
    for (uint32_t i = 0; i < l.n; i++) {
        int seg;
        uint32_t lo, hi;
        sim_locate(&l.r[i], &seg, &lo, &hi);
        if (slow && m->npending < 512) {
            sim_write *w = &m->pending[m->npending++];
            w->seg = seg;
            w->lo = lo;
            w->hi = hi;
            w->tag = tag;
            w->at = m->now + sim_rand(m) % SIM_RELEASE; /* before start + release */
        } else {
            sim_write_bytes(m, seg, lo, hi, tag);
        }
    }
    if (!slow && sim_rand(m) % 10 != 0)
        crk_put_end(m->s, c, name, m->now);
    /* else: left in flight, to be preempted or swept */
}

static void sim_get(sim *m, int key)
{
    char name[16];
    snprintf(name, sizeof(name), "key%d", key);
    crk_replica_list l;
    if (crk_get_replica_list(m->s, name, m->now, &l) != 0)
        return;
    for (uint32_t i = 0; i < l.n; i++) {
        int seg;
        uint32_t lo, hi;
        sim_locate(&l.r[i], &seg, &lo, &hi);
        uint32_t tag = m->mem[seg][lo];
        for (uint32_t u = lo; u < hi; u++)
            if (m->mem[seg][u] != tag || (tag >> 20) != (uint32_t)key) {
                m->violations++;
                fprintf(stderr, "violation: t=%llu key%d reads tag %x at unit %u\n",
                        (unsigned long long)m->now, key, m->mem[seg][u], u);
                break;
            }
        if (m->nreaders == 4096) { /* drop finished readers */
            size_t k = 0;
            for (size_t j = 0; j < m->nreaders; j++)
                if (m->readers[j].deadline > m->now)
                    m->readers[k++] = m->readers[j];
            m->nreaders = k;
        }
        if (m->nreaders < 4096)
            m->readers[m->nreaders++] = (sim_reader){
                .seg = seg, .lo = lo, .hi = hi, .tag = tag, .deadline = m->now + l.lease_ttl_ms};
        m->reads++;
    }
}

static void sim_clients(sim *m)
{
    for (int c = 0; c < SIM_SEGS; c++) {
        if (m->now < m->silent_until[c])
            continue;
        int st = 0;
        assert_int_equal(crk_ping(m->s, tu_client(1 + (uint64_t)c), m->now, &st), 0);
        if (st == CRK_CLIENT_NEED_REMOUNT) {
            crk_segment_spec spec = {
                .name = sim_name[c], .base = sim_base[c], .size = SIM_UNITS * SIM_UNIT};
            int rc = crk_remount_segments(m->s, tu_client(1 + (uint64_t)c), &spec, 1, m->now, NULL);
            assert_true(rc == 0 || rc == CR_UNAVAILABLE_IN_CURRENT_STATUS);
        }
    }
}

static void sim_new_service(sim *m)
{
    crk_config c = tu_config();
    c.client_ttl_ms = 3000;
    c.default_kv_lease_ttl_ms = SIM_LEASE;
    c.put_start_discard_timeout_ms = 2000;
    c.put_start_release_timeout_ms = SIM_RELEASE;
    c.alloc_alignment = SIM_UNIT;
    m->s = tu_service(&c, m->now);
}

static void test_fence_simulation(void **state)
{
    sim *m = calloc(1, sizeof(*m));
    m->rng = 42;
    m->now = 1000;
    sim_new_service(m);
    for (int c = 0; c < SIM_SEGS; c++)
        tu_mount(m->s, tu_client(1 + (uint64_t)c), sim_name[c], sim_base[c], SIM_UNITS * SIM_UNIT,
                 m->now);
    for (int step = 0; step < 60000; step++) {
        m->now += sim_rand(m) % 300;
        /* Slow writers whose time has come. */
        for (size_t i = 0; i < m->npending;) {
            if (m->pending[i].at <= m->now) {
                sim_write *w = &m->pending[i];
                sim_write_bytes(m, w->seg, w->lo, w->hi, w->tag);
                m->late_writes++;
                m->pending[i] = m->pending[--m->npending];
            } else {
                i++;
            }
        }
        sim_clients(m);
        assert_int_equal(crk_tick(m->s, m->now), 0);
        uint64_t r = sim_rand(m) % 1000;
        int key = (int)(sim_rand(m) % SIM_KEYS);
        if (r < 350) {
            sim_put(m, key, false);
        } else if (r < 450) {
            sim_put(m, key, true);
        } else if (r < 850) {
            sim_get(m, key);
        } else if (r < 930) {
            char name[16];
            snprintf(name, sizeof(name), "key%d", key);
            crk_remove(m->s, name, sim_rand(m) % 2 == 0, m->now);
        } else if (r < 935) {
            crk_remove_all(m->s, true, m->now, NULL);
        } else if (r < 938) {
            /* Master restart: all metadata lost, memory and readers stay. */
            crk_service_destroy(m->s);
            sim_new_service(m);
            m->restarts++;
        } else if (r < 941) {
            /* A client goes silent long enough to expire. */
            int c = (int)(sim_rand(m) % SIM_SEGS);
            if (m->now >= m->silent_until[c]) {
                m->silent_until[c] = m->now + 3000 + sim_rand(m) % 4000;
                m->expiries++;
            }
        }
    }
    fprintf(stderr,
            "fence simulation: %u reads, %u writes (%u late), %u restarts, %u expiries, "
            "%u fenced put_starts, %u violations\n",
            m->reads, m->writes, m->late_writes, m->restarts, m->expiries, m->fenced,
            m->violations);
    assert_int_equal(m->violations, 0);
    assert_true(m->reads > 1000 && m->restarts > 20 && m->expiries > 20 && m->fenced > 100 &&
                m->late_writes > 100);
    crk_stats st = tu_stats(m->s);
    (void)st;
    crk_service_destroy(m->s);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ping),
        cmocka_unit_test(test_mount_idempotent),
        cmocka_unit_test(test_remount_keeps_existing),
        cmocka_unit_test(test_unmount),
        cmocka_unit_test(test_client_expiry),
        cmocka_unit_test(test_restart_fence),
        cmocka_unit_test(test_unmount_fence),
        cmocka_unit_test(test_first_mount_fence_is_reported),
        cmocka_unit_test(test_failed_remount_is_retried),
        cmocka_unit_test(test_inflight_writer_fence),
        cmocka_unit_test(test_fence_simulation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
