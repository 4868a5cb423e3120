/*
 * thin_direct_put_test.c - thin clients' puts written straight into the
 * daemon's segment (src/store/thin_direct_put.c), real processes: a
 * crescent-master, a crescent-client daemon and crescent-test-store-client
 * children.
 *
 *   direct_puts     a thin client puts values of 1 B-4 MiB every way (copying,
 *                   zero-copy from its pool, from malloc memory, gathered,
 *                   batches, upserts) and sends the daemon nothing for them
 *                   (its `calls` counter stays put after the first); another
 *                   thin client that reads through the daemon
 *                   (CRESCENT_THIN_DIRECT=0) and an embedded client verify
 *                   every byte: they arrived through the writable mapping
 *   daemon_path     replica_num 2 and a placement preferred elsewhere go
 *                   through the daemon (calls rise), bytes verified
 *   kills           30 thin clients killed with SIGKILL in the middle of
 *                   direct batch puts of 1 MiB values: no key is left half
 *                   written (each is absent or whole) and none is left in
 *                   flight (a new put of every absent key succeeds at once,
 *                   with put_start_discard_timeout 600 s), the daemon's
 *                   descriptors and shared mappings and the master's
 *                   descriptors are flat, and the master reuses the revoked
 *                   space after the writers' bound (CRESCENT_THIN_DIRECT_PUT_MS
 *                   = 1500)
 *   late_copy       a copy that passes the writer's bound (CRESCENT_THIN_DIRECT_PUT_MS
 *                   = 30: no chunk after 10 ms; a 128 MiB value) is revoked and
 *                   the put goes through the daemon, bytes verified
 *   off             CRESCENT_THIN_DIRECT_PUT=0: every put goes through the
 *                   daemon, gets stay direct
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crescent/status.h"
#include "thin_harness.h"

static int teardown(void **state)
{
    (void)state;
    unsetenv("CRESCENT_THIN_DIRECT");
    unsetenv("CRESCENT_THIN_DIRECT_PUT");
    unsetenv("CRESCENT_THIN_DIRECT_PUT_MS");
    sh_kill_all();
    return 0;
}

static void expect_read(const char *line, uint64_t size)
{
    long long rc = strtoll(line, NULL, 10);
    if (rc != (long long)size || strstr(line, " ok") == NULL)
        fail_msg("read '%s', want %llu bytes verified", line, (unsigned long long)size);
}

static long long calls_of(sh_client *c)
{
    return sh_field(sh_cmd(c, "thinstats"), "calls");
}

static const char *const POOL_CLIENT[] = {"--pool", "64M",           "--buffer", "16M", "--region",
                                          "24M",    "--region-kind", "pool",     NULL};
static const char *const MALLOC_CLIENT[] = {
    "--pool", "16M", "--buffer", "16M", "--region", "8M", "--region-kind", "malloc", NULL};

/* A thin client that reads through the daemon (its gets are not direct). */
static void start_daemon_reader(sh_client *c, const th_daemon *d)
{
    setenv("CRESCENT_THIN_DIRECT", "0", 1);
    assert_int_equal(th_client_start(c, d, POOL_CLIENT), 0);
    unsetenv("CRESCENT_THIN_DIRECT");
}

static void test_direct_puts(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client w, s, r, e;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    assert_int_equal(th_client_start(&w, &d, POOL_CLIENT), 0);
    assert_int_equal(th_client_start(&s, &d, MALLOC_CLIENT), 0);
    start_daemon_reader(&r, &d);
    assert_int_equal(sh_client_start(&e, m.addr, (const char *[]){"--segment", "16M", NULL}), 0);

    /* The first put sets the mapping up (one SEGMENT call); the rest send nothing. */
    assert_int_equal(sh_rc(&w, "put first 4096 1"), 0);
    long long calls = calls_of(&w);
    static const uint64_t sizes[] = {1, 4096, 10000, 65536, 1 << 20, 3 << 20, 4 << 20};
    size_t n = sizeof(sizes) / sizeof(sizes[0]);
    for (size_t i = 0; i < n; i++) {
        unsigned long long z = sizes[i];
        assert_int_equal(sh_rc(&w, "put cp%zu %llu %zu", i, z, 100 + i), 0);
        assert_int_equal(sh_rc(&w, "put_from zc%zu %llu %zu", i, z, 200 + i), 0);
        assert_int_equal(sh_rc(&w, "put_parts pp%zu %llu %zu 3", i, z, 300 + i), 0);
        assert_int_equal(sh_rc(&s, "put_from ml%zu %llu %zu", i, z, 400 + i), 0);
    }
    assert_int_equal(sh_field(sh_cmd(&w, "batch_put bc- 32 65536 500"), "ok"), 32);
    assert_int_equal(sh_field(sh_cmd(&w, "batch_put bz- 8 1048576 600 from"), "ok"), 8);
    assert_int_equal(sh_field(sh_cmd(&w, "batch_put_multi bm- 8 300000 700 4"), "ok"), 8);
    /* Upserts replace, and a put of an existing key succeeds (as embedded). */
    assert_int_equal(sh_rc(&w, "upsert cp1 8192 900"), 0);
    assert_int_equal(sh_rc(&w, "upsert_from zc2 20000 901"), 0);
    assert_int_equal(sh_rc(&w, "put cp3 4096 999"), 0);
    assert_int_equal(calls_of(&w), calls); /* not one went through the daemon */
    /* ... and the thin client's stats count them as direct puts (21 single
     * calls, 48 batch keys, the upserts and the put of "first"). */
    assert_true(sh_field(sh_cmd(&w, "thinstats"), "dput") >= 21 + 48 + 3 + 1);
    const char *st = sh_cmd(&s, "thinstats");
    assert_true(strstr(st, "slow=0/0") != NULL); /* malloc memory: copied once, here */

    /* Every byte, read through the daemon and by an embedded client. */
    sh_client *readers[2] = {&r, &e};
    for (int k = 0; k < 2; k++) {
        sh_client *c = readers[k];
        for (size_t i = 0; i < n; i++) {
            if (i != 1 && i != 3)
                expect_read(sh_cmd(c, "get cp%zu %zu", i, 100 + i), sizes[i]);
            if (i != 2)
                expect_read(sh_cmd(c, "get zc%zu %zu", i, 200 + i), sizes[i]);
            expect_read(sh_cmd(c, "get pp%zu %zu", i, 300 + i), sizes[i]);
            expect_read(sh_cmd(c, "get ml%zu %zu", i, 400 + i), sizes[i]);
        }
        expect_read(sh_cmd(c, "get cp1 900"), 8192);
        expect_read(sh_cmd(c, "get zc2 901"), 20000);
        expect_read(sh_cmd(c, "get cp3 103"), sizes[3]); /* the first value stayed */
        const char *b = sh_cmd(c, "batch_get bc- 32 65536 500");
        assert_int_equal(sh_field(b, "ok"), 32);
        assert_int_equal(sh_field(b, "bad"), 0);
        b = sh_cmd(c, "batch_get bz- 8 1048576 600");
        assert_int_equal(sh_field(b, "ok"), 8);
        assert_int_equal(sh_field(b, "bad"), 0);
    }
    /* Where they live: one replica, the daemon's segment. */
    const char *reps = sh_cmd(&e, "replicas zc4");
    assert_non_null(strstr(reps, d.segment));
    assert_int_equal(strtoll(reps, NULL, 10), 1);
    sh_client *all[4] = {&w, &s, &r, &e};
    for (int k = 0; k < 4; k++)
        assert_int_equal(sh_client_stop(all[k]), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void test_daemon_path(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client w, e;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    assert_int_equal(sh_client_start(&e, m.addr, (const char *[]){"--segment", "32M", NULL}), 0);
    assert_int_equal(th_client_start(&w, &d, POOL_CLIENT), 0);
    assert_int_equal(sh_rc(&w, "put first 4096 1"), 0);
    long long calls = calls_of(&w);
    /* Two replicas: through the daemon, one in each segment. */
    assert_int_equal(sh_rc(&w, "put_from two 200000 7 r=2"), 0);
    assert_int_equal(calls_of(&w), calls + 1);
    const char *reps = sh_cmd(&e, "replicas two");
    assert_int_equal(strtoll(reps, NULL, 10), 2);
    /* A placement preferred in another segment: through the daemon, placed there. */
    assert_int_equal(sh_rc(&w, "put far 300000 8 pref=%s", e.name), 0);
    assert_int_equal(calls_of(&w), calls + 2);
    reps = sh_cmd(&e, "replicas far");
    assert_non_null(strstr(reps, e.name));
    /* ... and batches with two replicas too. */
    assert_int_equal(sh_field(sh_cmd(&w, "batch_put b2- 4 65536 9 from r=2"), "ok"), 4);
    assert_int_equal(calls_of(&w), calls + 3);
    expect_read(sh_cmd(&e, "get two 7"), 200000);
    expect_read(sh_cmd(&e, "get far 8"), 300000);
    const char *b = sh_cmd(&e, "batch_get b2- 4 65536 9");
    assert_int_equal(sh_field(b, "ok"), 4);
    assert_int_equal(sh_field(b, "bad"), 0);
    assert_int_equal(sh_client_stop(&w), 0);
    assert_int_equal(sh_client_stop(&e), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

#define KILLS      30
#define KILL_KEYS  12
#define KILL_VALUE (1u << 20)

/* Wait up to 10 s for fn(pid) to come back to want; the last value. */
static long long settle(long long (*fn)(pid_t), pid_t pid, long long want)
{
    long long v = fn(pid);
    for (int i = 0; i < 200 && v > want; i++) {
        sh_sleep_ms(50);
        v = fn(pid);
    }
    return v;
}

static long long fds_of(pid_t pid)
{
    return th_fd_count(pid);
}

static void test_kills(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client c, v;
    assert_int_equal(
        sh_master_start(&m, (const char *[]){"--put_start_discard_timeout_sec=600", NULL}), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    pid_t dp = d.p.proc.pid;
    setenv("CRESCENT_THIN_DIRECT_PUT_MS", "1500", 1); /* the writers' bound: space back soon */
    /* A first client, so everything lazy in the daemon exists before the baseline. */
    assert_int_equal(th_client_start(&c, &d, POOL_CLIENT), 0);
    assert_int_equal(sh_field(sh_cmd(&c, "batch_put warm- 8 65536 1 from"), "ok"), 8);
    assert_int_equal(sh_client_stop(&c), 0);
    for (int i = 0; i < 200 && th_metric(&d, "crescent_client_thin_clients") != 0; i++)
        sh_sleep_ms(50);
    pid_t mp = m.cm.p.pid;
    long long base_fds = fds_of(dp), base_master_fds = fds_of(mp);
    static char base_master_list[2048], master_list[2048];
    th_fd_list(mp, base_master_list, sizeof(base_master_list));
    long long base_map = th_shared_mapped(dp);
    assert_true(base_fds > 0 && base_map > 0 && base_master_fds > 0);

    for (int i = 0; i < KILLS; i++) {
        assert_int_equal(th_client_start(&c, &d, POOL_CLIENT), 0);
        assert_int_equal(sh_rc(&c, "put setup-%d 4096 1", i), 0); /* the mapping is set up */
        sh_send(&c, "batch_put k%d- %d %u %d%s", i, KILL_KEYS, KILL_VALUE, i, i % 2 ? " from" : "");
        sh_sleep_ms(i % 6 * 8); /* 0..40 ms into it */
        sh_client_kill(&c);
    }
    uint64_t t_killed = sh_now_ms();

    /* Nothing is half there, nothing is left in flight. */
    start_daemon_reader(&v, &d);
    int whole = 0, absent = 0;
    for (int i = 0; i < KILLS; i++) {
        for (int j = 0; j < KILL_KEYS; j++) {
            long long ex = sh_rc(&v, "exist k%d-%d", i, j);
            if (ex == 1) {
                expect_read(sh_cmd(&v, "get k%d-%d %d", i, j, i + j), KILL_VALUE);
                whole++;
                continue;
            }
            assert_int_equal(ex, 0);
            long long rc = sh_rc(&v, "put k%d-%d 4096 %d", i, j, j);
            if (rc != 0)
                fail_msg("k%d-%d: a new put answered %lld (%s): a write was left in flight", i, j,
                         rc, v.line);
            absent++;
        }
    }
    print_message("after %d kills: %d keys whole, %d never written (each put again at once)\n",
                  KILLS, whole, absent);
    assert_true(absent > 0); /* the kills did land mid-batch */
    assert_int_equal(sh_client_stop(&v), 0);

    /* The daemon holds nothing of the dead clients (nor of the reader). */
    long long fds = settle(fds_of, dp, base_fds);
    long long map = settle(th_shared_mapped, dp, base_map);
    if (fds > base_fds || map > base_map)
        fail_msg("after %d kills the daemon has %lld descriptors (%lld before) and %lld bytes of "
                 "shared mappings (%lld before)",
                 KILLS, fds, base_fds, map, base_map);
    /* ... and the master none of their connections. */
    long long master_fds = settle(fds_of, mp, base_master_fds);
    if (master_fds > base_master_fds) {
        th_fd_list(mp, master_list, sizeof(master_list));
        fail_msg(
            "after %d kills the master has %lld descriptors (%lld before)\nbefore: %s\nnow: %s",
            KILLS, master_fds, base_master_fds, base_master_list, master_list);
    }
    /* The revoked space comes back after the writers' bound. */
    double left = -1;
    for (int i = 0; i < 200; i++) {
        left = sh_metric(&m, "master_put_start_discarded_staging_size");
        if (left == 0)
            break;
        sh_sleep_ms(50);
    }
    print_message("revoked space reused %llu ms after the last kill\n",
                  (unsigned long long)(sh_now_ms() - t_killed));
    assert_true(left == 0);
    unsetenv("CRESCENT_THIN_DIRECT_PUT_MS");
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

/* A copy that outlives the writer's bound is revoked and put through the daemon. */
static void test_late_copy(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client w, r;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    /* D = 30 ms, so no chunk may start 10 ms after the PUT_START was sent:
     * 128 MiB into fresh segment pages takes longer than that. */
    setenv("CRESCENT_THIN_DIRECT_PUT_MS", "30", 1);
    assert_int_equal(th_client_start(&w, &d, POOL_CLIENT), 0);
    unsetenv("CRESCENT_THIN_DIRECT_PUT_MS");
    assert_int_equal(sh_rc(&w, "put small 4096 1"), 0); /* sets the mapping up */
    long long calls = calls_of(&w);
    assert_int_equal(sh_rc(&w, "put big 134217728 3"), 0);
    assert_int_equal(calls_of(&w), calls + 1); /* revoked, then through the daemon */
    start_daemon_reader(&r, &d);
    expect_read(sh_cmd(&r, "get big 3"), 134217728);
    expect_read(sh_cmd(&r, "get small 1"), 4096);
    assert_int_equal(sh_client_stop(&r), 0);
    assert_int_equal(sh_client_stop(&w), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void test_off(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client w;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    setenv("CRESCENT_THIN_DIRECT_PUT", "0", 1);
    assert_int_equal(th_client_start(&w, &d, POOL_CLIENT), 0);
    unsetenv("CRESCENT_THIN_DIRECT_PUT");
    assert_int_equal(sh_rc(&w, "put a 4096 1"), 0);
    expect_read(sh_cmd(&w, "get a 1"), 4096); /* sets direct reads up */
    long long calls = calls_of(&w);
    assert_int_equal(sh_rc(&w, "put b 65536 2"), 0);
    assert_int_equal(sh_rc(&w, "put_from c 65536 3"), 0);
    assert_int_equal(sh_field(sh_cmd(&w, "batch_put d- 4 4096 4 from"), "ok"), 4);
    assert_int_equal(calls_of(&w), calls + 3); /* each through the daemon */
    expect_read(sh_cmd(&w, "get b 2"), 65536);
    expect_read(sh_cmd(&w, "get c 3"), 65536);
    assert_int_equal(calls_of(&w), calls + 3); /* gets still direct */
    assert_int_equal(sh_field(sh_cmd(&w, "thinstats"), "dput"), 0);
    assert_true(sh_field(sh_cmd(&w, "thinstats"), "dget") >= 2);
    assert_int_equal(sh_client_stop(&w), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

int main(void)
{
    if (getenv("CRESCENT_CLIENT_BIN") == NULL || getenv("CRESCENT_STORE_CLIENT_BIN") == NULL)
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_direct_puts, teardown),
        cmocka_unit_test_teardown(test_daemon_path, teardown),
        cmocka_unit_test_teardown(test_kills, teardown),
        cmocka_unit_test_teardown(test_late_copy, teardown),
        cmocka_unit_test_teardown(test_off, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
