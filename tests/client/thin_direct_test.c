/*
 * thin_direct_test.c - thin clients' gets read straight from the daemon's
 * segment (src/store/thin_direct.c), real processes: a crescent-master, a
 * crescent-client daemon and crescent-test-store-client children.
 *
 *   direct_reads    a thin client reads values of 4 KiB-4 MiB another one
 *                   stored (get_into the pool, copying get, batch forms),
 *                   every byte verified, and sends the daemon nothing for
 *                   them (its `calls` counter stays put); a miss is
 *                   CR_OBJECT_NOT_FOUND, too small a buffer CR_BUFFER_OVERFLOW;
 *                   batches of >= 8 MiB are direct too
 *   remote_replica  a value in another client's segment is read through the
 *                   daemon (calls rise), bytes verified
 *   never_stale     the same key overwritten, upserted and removed 40 times
 *                   with values of other sizes and seeds: every read sees
 *                   the latest value whole or CR_OBJECT_NOT_FOUND after a
 *                   remove, never an older one or another key's bytes (the
 *                   reads of 64 KiB and more copy a cached location while
 *                   asking the master: speculative direct gets)
 *   daemon_death    with the daemon stopped (SIGSTOP) a direct get still
 *                   completes (no hop); killed, every get fails within a
 *                   bound with CR_ERR_DAEMON_LOST / _UNREACHABLE and health
 *                   says so; a restarted daemon serves direct reads again and
 *                   the dead daemon's objects are never read
 *   direct_off      CRESCENT_THIN_DIRECT=0: gets go through the daemon
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
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
                                          "16M",    "--region-kind", "pool",     NULL};

static void test_direct_reads(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client w, r;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    assert_int_equal(th_client_start(&w, &d, POOL_CLIENT), 0);
    assert_int_equal(th_client_start(&r, &d, POOL_CLIENT), 0);
    static const uint64_t sizes[] = {4096, 10000, 65536, 1 << 20, 3 << 20, 4 << 20, 1};
    size_t n = sizeof(sizes) / sizeof(sizes[0]);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(
            sh_rc(&w, "put_from zc%zu %llu %zu", i, (unsigned long long)sizes[i], 100 + i), 0);
        assert_int_equal(sh_rc(&w, "put cp%zu %llu %zu", i, (unsigned long long)sizes[i], 200 + i),
                         0);
    }
    assert_int_equal(sh_rc(&w, "batch_put b 32 4096 300"), 0);
    /* The first get sets direct reads up (one SEGMENT call); later ones send nothing. */
    expect_read(sh_cmd(&r, "get_into zc0 8388608 100"), sizes[0]);
    long long calls = calls_of(&r);
    for (size_t i = 0; i < n; i++) {
        expect_read(sh_cmd(&r, "get_into zc%zu 8388608 %zu", i, 100 + i), sizes[i]);
        expect_read(sh_cmd(&r, "get cp%zu %zu", i, 200 + i), sizes[i]);
        expect_read(sh_cmd(&r, "get_multi zc%zu 3 %zu", i, 100 + i), sizes[i]);
    }
    const char *b = sh_cmd(&r, "batch_get b 32 4096 300 into");
    assert_int_equal(sh_field(b, "ok"), 32);
    assert_int_equal(sh_field(b, "bad"), 0);
    b = sh_cmd(&r, "batch_get b 32 4096 300");
    assert_int_equal(sh_field(b, "ok"), 32);
    assert_int_equal(sh_field(b, "bad"), 0);
    assert_int_equal(sh_rc(&r, "get nothing-here"), CR_OBJECT_NOT_FOUND);
    assert_int_equal(sh_rc(&r, "get_into zc3 4096 103"), CR_BUFFER_OVERFLOW);
    /* Not one of them went to the daemon but get_multi's get_size before each. */
    assert_int_equal(calls_of(&r), calls + (long long)n);
    /* Values of 64 KiB and more read again (get_multi after get_into: zc2..zc5) were copied
     * while the master answered, and kept (store/thin_direct.c: speculative direct gets). */
    assert_true(sh_field(sh_cmd(&r, "thinstats"), "dkept") >= 4); /* get_multi of 4 keys */
    /* Batches of 8 MiB and more are direct too, zero-copy and copying. */
    assert_int_equal(sh_rc(&w, "batch_put big 3 3145728 400"), 0);
    calls = calls_of(&r);
    b = sh_cmd(&r, "batch_get big 3 3145728 400 into");
    assert_int_equal(sh_field(b, "ok"), 3);
    assert_int_equal(sh_field(b, "bad"), 0);
    assert_int_equal(calls_of(&r), calls);
    b = sh_cmd(&r, "batch_get big 3 3145728 400");
    assert_int_equal(sh_field(b, "ok"), 3);
    assert_int_equal(sh_field(b, "bad"), 0);
    assert_int_equal(calls_of(&r), calls);
    /* The writer's own reads are direct too. */
    expect_read(sh_cmd(&w, "get cp4 204"), sizes[4]);
    assert_int_equal(sh_client_stop(&r), 0);
    assert_int_equal(sh_client_stop(&w), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void test_remote_replica(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client e, r;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    assert_int_equal(sh_client_start(&e, m.addr, (const char *[]){"--segment", "32M", NULL}), 0);
    assert_int_equal(th_client_start(&r, &d, POOL_CLIENT), 0);
    char seg[300], opt[340];
    snprintf(seg, sizeof(seg), "%s", e.name);
    snprintf(opt, sizeof(opt), "pref=%s", seg);
    assert_int_equal(sh_rc(&e, "put far 200000 7 %s", opt), 0);
    const char *reps = sh_cmd(&e, "replicas far");
    assert_non_null(strstr(reps, seg)); /* it lives in the embedded client's segment */
    expect_read(sh_cmd(&r, "get_into far 1048576 7"), 200000); /* sets up, then the daemon */
    long long calls = calls_of(&r);
    expect_read(sh_cmd(&r, "get far 7"), 200000);
    expect_read(sh_cmd(&r, "get_into far 1048576 7"), 200000);
    assert_true(calls_of(&r) >= calls + 2); /* both through the daemon */
    assert_int_equal(sh_client_stop(&r), 0);
    assert_int_equal(sh_client_stop(&e), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void test_never_stale(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client w, r;
    /* A short lease: freed memory is reused soon, so stale reads would show. */
    assert_int_equal(sh_master_start(&m, (const char *[]){"--default_kv_lease_ttl=200", NULL}), 0);
    assert_int_equal(
        th_daemon_start(&d, m.addr, NULL, (const char *[]){"--global_segment_size=16M", NULL}), 0);
    assert_int_equal(th_client_start(&w, &d, POOL_CLIENT), 0);
    assert_int_equal(th_client_start(&r, &d, POOL_CLIENT), 0);
    long long calls = -1;
    for (int i = 0; i < 40; i++) {
        uint64_t size = 4096ull << (i % 6); /* 4 KiB .. 128 KiB */
        unsigned seed = 1000 + (unsigned)i;
        int how = i % 3;
        if (how == 0) {
            sh_rc(&w, "remove k force");
            assert_int_equal(sh_rc(&w, "put k %llu %u", (unsigned long long)size, seed), 0);
        } else if (how == 1) {
            assert_int_equal(sh_rc(&w, "upsert k %llu %u", (unsigned long long)size, seed), 0);
        } else {
            assert_int_equal(sh_rc(&w, "upsert_from k %llu %u", (unsigned long long)size, seed), 0);
        }
        /* Another key written meanwhile may take the old value's memory. */
        assert_int_equal(sh_rc(&w, "upsert other %llu %u", (unsigned long long)size, seed + 5000),
                         0);
        expect_read(sh_cmd(&r, "get_into k 1048576 %u", seed), size);
        expect_read(sh_cmd(&r, "get k %u", seed), size);
        if (calls < 0)
            calls = calls_of(&r);
        if (i % 4 == 3) {
            assert_int_equal(sh_rc(&w, "remove k force"), 0);
            assert_int_equal(sh_rc(&r, "get_into k 1048576 %u", seed), CR_OBJECT_NOT_FOUND);
            assert_int_equal(sh_rc(&r, "get k %u", seed), CR_OBJECT_NOT_FOUND);
        }
    }
    assert_int_equal(calls_of(&r), calls); /* all of them direct */
    /* the 64 and 128 KiB rounds read a cached location while asking: never kept stale */
    assert_true(sh_field(sh_cmd(&r, "thinstats"), "dspec") > 0);
    assert_int_equal(sh_client_stop(&r), 0);
    assert_int_equal(sh_client_stop(&w), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void test_daemon_death(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client c;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    assert_int_equal(th_client_start(&c, &d, POOL_CLIENT), 0);
    assert_int_equal(sh_rc(&c, "put_from a 500000 3"), 0);
    expect_read(sh_cmd(&c, "get_into a 1048576 3"), 500000);
    char sock[96];
    snprintf(sock, sizeof(sock), "%s", d.socket);

    /* Stopped: a direct get needs nothing from it. */
    assert_int_equal(kill(d.p.proc.pid, SIGSTOP), 0);
    uint64_t t0 = sh_now_ms();
    expect_read(sh_cmd(&c, "get_into a 1048576 3"), 500000);
    expect_read(sh_cmd(&c, "get a 3"), 500000);
    assert_true(sh_now_ms() - t0 < 5000);
    /* Killed (while stopped): every call fails fast with a named error. */
    th_daemon_kill(&d);
    t0 = sh_now_ms();
    long long rc = sh_rc(&c, "get_into a 1048576 3");
    assert_true(rc == CR_ERR_DAEMON_LOST || rc == CR_ERR_DAEMON_UNREACHABLE);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sh_rc(&c, "get_into a 1048576 3"), CR_ERR_DAEMON_UNREACHABLE);
        assert_int_equal(sh_rc(&c, "get a 3"), CR_ERR_DAEMON_UNREACHABLE);
        assert_int_equal(sh_rc(&c, "batch_get b 4 4096 1 into"), CR_ERR_DAEMON_UNREACHABLE);
    }
    assert_int_equal(sh_rc(&c, "health"), CR_ERR_DAEMON_UNREACHABLE);
    assert_true(sh_now_ms() - t0 < 3000);

    /* A new daemon on the same socket: direct reads again, of its objects only. */
    assert_int_equal(th_daemon_start(&d, m.addr, sock, NULL), 0);
    rc = -1;
    for (int i = 0; i < 50 && rc != 0; i++) {
        rc = sh_rc(&c, "put_from b 300000 4");
        if (rc != 0)
            sh_sleep_ms(50);
    }
    assert_int_equal(rc, 0);
    expect_read(sh_cmd(&c, "get_into b 1048576 4"), 300000);
    long long calls = calls_of(&c);
    expect_read(sh_cmd(&c, "get b 4"), 300000);
    assert_int_equal(calls_of(&c), calls);
    rc = sh_rc(&c, "get a 3"); /* the dead daemon's segment: never its old bytes */
    assert_true(rc == CR_OBJECT_NOT_FOUND || rc == CR_TRANSFER_FAIL);
    assert_int_equal(sh_client_stop(&c), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void test_direct_off(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client c;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    setenv("CRESCENT_THIN_DIRECT", "0", 1);
    assert_int_equal(th_client_start(&c, &d, POOL_CLIENT), 0);
    unsetenv("CRESCENT_THIN_DIRECT");
    assert_int_equal(sh_rc(&c, "put_from a 5000 3"), 0);
    long long calls = calls_of(&c);
    expect_read(sh_cmd(&c, "get_into a 8192 3"), 5000);
    expect_read(sh_cmd(&c, "get a 3"), 5000);
    assert_int_equal(calls_of(&c), calls + 2);
    assert_int_equal(sh_client_stop(&c), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

int main(void)
{
    if (getenv("CRESCENT_CLIENT_BIN") == NULL || getenv("CRESCENT_STORE_CLIENT_BIN") == NULL)
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_direct_reads, teardown),
        cmocka_unit_test_teardown(test_remote_replica, teardown),
        cmocka_unit_test_teardown(test_never_stale, teardown),
        cmocka_unit_test_teardown(test_daemon_death, teardown),
        cmocka_unit_test_teardown(test_direct_off, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
