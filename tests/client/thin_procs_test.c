/*
 * thin_procs_test.c - thin clients of crescent-client, real processes:
 * a crescent-master, one crescent-client daemon and three thin clients
 * (crescent-test-store-client --thin), each with its zero-copy region in a
 * different kind of memory: the thin pool, cr_alloc_shared memory (a shared
 * region the daemon maps) and malloc'd memory (the slow path).
 *
 *   three_clients     each puts 200 values of 4 KiB-4 MiB (copying and
 *                     zero-copy, the three clients at once), reads back its
 *                     own and the others' with every byte verified, runs
 *                     batch and multi-buffer forms; the counters show the
 *                     pool and shared calls zero-copy and the malloc region
 *                     on the slow path
 *   outlive_client    objects stored by a thin client stay after it exits
 *   secret            a daemon with a shared secret refuses a wrong or a
 *                     missing one (CR_ERR_AUTH_FAILED) and serves the right one
 *   other_uid         (as root) a client of another uid is refused
 *                     (CR_ILLEGAL_CLIENT) unless --allow_any_user
 *   no_daemon         setup without a daemon fails at once with
 *                     CR_ERR_DAEMON_UNREACHABLE
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crescent/status.h"
#include "thin_harness.h"

#define N_VALUES 200

static uint64_t value_size(int i)
{
    return i % 25 == 0 ? (4ull << 20) : (4096ull << (i % 7)); /* 4 KiB .. 4 MiB */
}

static int teardown(void **state)
{
    (void)state;
    sh_kill_all();
    return 0;
}

static void start_master_daemon(sh_master *m, th_daemon *d, const char *const *dflags)
{
    assert_int_equal(sh_master_start(m, NULL), 0);
    assert_int_equal(th_daemon_start(d, m->addr, NULL, dflags), 0);
}

/* The reply of a get/get_into: "<rc> <fnv> ok" for a verified value. */
static void expect_read(const char *line, uint64_t size)
{
    long long rc = strtoll(line, NULL, 10);
    if (rc != (long long)size || strstr(line, " ok") == NULL)
        fail_msg("read '%s', want %llu bytes verified", line, (unsigned long long)size);
}

static void test_three_clients(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client c[3];
    start_master_daemon(&m, &d, NULL);
    static const char *kinds[3] = {"pool", "shared", "malloc"};
    for (int k = 0; k < 3; k++) {
        /* Client 1 puts through the daemon (direct puts off), the others
         * straight into its segment (thin_direct_put.c). */
        if (k == 1)
            setenv("CRESCENT_THIN_DIRECT_PUT", "0", 1);
        assert_int_equal(
            th_client_start(&c[k], &d,
                            (const char *[]){"--pool", "64M", "--buffer", "16M", "--region", "8M",
                                             "--region-kind", kinds[k], NULL}),
            0);
        unsetenv("CRESCENT_THIN_DIRECT_PUT");
    }
    /* Every thin client names the daemon's segment. */
    for (int k = 0; k < 3; k++)
        assert_string_equal(c[k].name, d.segment);

    /* Puts, the three clients at once: even values copied, odd zero-copy. */
    for (int i = 0; i < N_VALUES; i++) {
        for (int k = 0; k < 3; k++)
            assert_int_equal(sh_send(&c[k], "%s c%d-%d %llu %d", i % 2 ? "put_from" : "put", k, i,
                                     (unsigned long long)value_size(i), 1000 * k + i),
                             0);
        for (int k = 0; k < 3; k++) {
            const char *r = sh_recv(&c[k], 60000);
            if (strcmp(r, "0") != 0)
                fail_msg("client %d put %d: '%s'", k, i, r);
        }
    }
    /* Every client reads every value, its own and the others'. */
    for (int i = 0; i < N_VALUES; i++) {
        for (int k = 0; k < 3; k++) {
            int owner = (k + i) % 3;
            if (i % 2)
                sh_send(&c[k], "get_into c%d-%d %llu %d", owner, i,
                        (unsigned long long)value_size(i), 1000 * owner + i);
            else
                sh_send(&c[k], "get c%d-%d %d", owner, i, 1000 * owner + i);
        }
        for (int k = 0; k < 3; k++)
            expect_read(sh_recv(&c[k], 60000), value_size(i));
    }
    /* Batch and multi-buffer forms, written by one client, read by the next. */
    for (int k = 0; k < 3; k++) {
        const char *r = sh_cmd(&c[k], "batch_put bz%d- 64 65536 %d from", k, 50 * k);
        assert_int_equal(sh_field(r, "ok"), 64);
        r = sh_cmd(&c[k], "batch_put bc%d- 32 100000 %d", k, 70 * k);
        assert_int_equal(sh_field(r, "ok"), 32);
        r = sh_cmd(&c[k], "batch_put_multi bm%d- 16 300000 %d 4", k, 90 * k);
        assert_int_equal(sh_field(r, "ok"), 16);
    }
    for (int k = 0; k < 3; k++) {
        int o = (k + 1) % 3;
        const char *r = sh_cmd(&c[k], "batch_get bz%d- 64 65536 %d into", o, 50 * o);
        assert_int_equal(sh_field(r, "ok"), 64);
        assert_int_equal(sh_field(r, "bad"), 0);
        r = sh_cmd(&c[k], "batch_get bc%d- 32 100000 %d", o, 70 * o);
        assert_int_equal(sh_field(r, "ok"), 32);
        assert_int_equal(sh_field(r, "bad"), 0);
        r = sh_cmd(&c[k], "batch_get_multi bm%d- 16 300000 %d 4", o, 90 * o);
        assert_int_equal(sh_field(r, "ok"), 16);
        assert_int_equal(sh_field(r, "bad"), 0);
        r = sh_cmd(&c[k], "batch_exist bz%d- 64", o);
        assert_int_equal(sh_field(r, "yes"), 64);
    }
    assert_int_equal(sh_rc(&c[0], "exist c1-3"), 1);
    assert_int_equal(sh_rc(&c[0], "size c2-25"), 4 << 20);
    assert_int_equal(sh_rc(&c[1], "exist nosuchkey"), 0);
    assert_int_equal(sh_rc(&c[1], "get nosuchkey"), CR_OBJECT_NOT_FOUND);
    assert_int_equal(sh_rc(&c[2], "health"), 0);

    /* Where the bytes went: pool and shared regions in place, malloc copied. */
    const char *st = sh_cmd(&c[0], "thinstats");
    assert_true(sh_field(st, "zc") > 0);
    assert_int_equal(sh_field(st, "slowregs"), 0);
    assert_true(strstr(st, "slow=0/0") != NULL);
    st = sh_cmd(&c[1], "thinstats");
    assert_int_equal(sh_field(st, "shared"), 1);
    assert_true(strstr(st, "slow=0/0") != NULL);
    st = sh_cmd(&c[2], "thinstats");
    assert_int_equal(sh_field(st, "slowregs"), 1);
    /* Its zero-copy puts and gets of malloc memory are direct (copied once,
     * here, to or from the daemon's segment), so none took the slow path. */
    assert_true(sh_field(st, "copied") > 0);
    assert_int_equal((int)th_metric(&d, "crescent_client_thin_clients"), 3);
    assert_true(th_metric(&d, "crescent_client_zero_copy_bytes_total") > 0);
    /* the time puts took inside the daemon (the rest of a thin call is the hop) */
    assert_true(th_metric(&d, "crescent_client_call_seconds_total{op=\"put\"}") > 0);

    for (int k = 0; k < 3; k++)
        assert_int_equal(sh_client_stop(&c[k]), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void test_outlive_client(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client a, b;
    start_master_daemon(&m, &d, NULL);
    assert_int_equal(th_client_start(&a, &d, NULL), 0);
    assert_int_equal(sh_rc(&a, "put stays-1 5000 11"), 0);
    assert_int_equal(sh_rc(&a, "put_from stays-2 3000000 12"), 0);
    assert_int_equal(sh_client_stop(&a), 0);
    assert_int_equal(th_client_start(&b, &d, NULL), 0);
    expect_read(sh_cmd(&b, "get stays-1 11"), 5000);
    expect_read(sh_cmd(&b, "get_into stays-2 4000000 12"), 3000000);
    assert_int_equal(sh_client_stop(&b), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void test_secret(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client c;
    start_master_daemon(&m, &d, (const char *[]){"--shared_secret=right-one", NULL});
    unsetenv("CRESCENT_CLIENT_SECRET");
    assert_int_equal(th_client_start(&c, &d, (const char *[]){"--secret", "wrong", NULL}), -1);
    assert_non_null(strstr(c.line, "-3019"));
    assert_int_equal(th_client_start(&c, &d, NULL), -1);
    assert_non_null(strstr(c.line, "-3019"));
    assert_int_equal(th_client_start(&c, &d, (const char *[]){"--secret", "right-one", NULL}), 0);
    assert_int_equal(sh_rc(&c, "put s1 100 1"), 0);
    assert_int_equal(sh_client_stop(&c), 0);
    assert_true(th_metric(&d, "crescent_client_auth_failures_total") >= 1);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

/* Run a thin client as uid 65534; its first line. */
static void run_as_nobody(const th_daemon *d, char *line, size_t cap)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(3);
        const char *bin = getenv("CRESCENT_STORE_CLIENT_BIN");
        execl(bin, bin, "--thin", d->socket, (char *)NULL);
        _exit(4);
    }
    close(p[1]);
    ssize_t n = read(p[0], line, cap - 1);
    line[n > 0 ? n : 0] = '\0';
    close(p[0]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void test_other_uid(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    sh_master m;
    th_daemon d;
    start_master_daemon(&m, &d, NULL);
    char line[512];
    run_as_nobody(&d, line, sizeof(line));
    if (strstr(line, "FAIL") == NULL || strstr(line, "-601") == NULL)
        fail_msg("a client of uid 65534 was not refused: '%s'", line);
    assert_true(th_metric(&d, "crescent_client_connections_refused_total") >= 1);
    assert_int_equal(th_daemon_stop(&d), 0);
    /* With --allow_any_user it is served (its pool memfd is sealed). */
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, (const char *[]){"--allow_any_user", NULL}),
                     0);
    run_as_nobody(&d, line, sizeof(line));
    if (strncmp(line, "READY ", 6) != 0)
        fail_msg("a client of uid 65534 was refused with --allow_any_user: '%s'", line);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void test_no_daemon(void **state)
{
    (void)state;
    sh_client c;
    char sock[64];
    snprintf(sock, sizeof(sock), "@crescent-test-none-%d", (int)getpid());
    uint64_t t0 = sh_now_ms();
    assert_int_equal(sh_client_start(&c, "unused:1", (const char *[]){"--thin", sock, NULL}), -1);
    assert_non_null(strstr(c.line, "-3060"));
    assert_true(sh_now_ms() - t0 < 5000);
}

int main(void)
{
    if (getenv("CRESCENT_CLIENT_BIN") == NULL || getenv("CRESCENT_STORE_CLIENT_BIN") == NULL) {
        fprintf(stderr, "thin_procs_test: CRESCENT_CLIENT_BIN / CRESCENT_STORE_CLIENT_BIN unset\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_three_clients, teardown),
        cmocka_unit_test_teardown(test_outlive_client, teardown),
        cmocka_unit_test_teardown(test_secret, teardown),
        cmocka_unit_test_teardown(test_other_uid, teardown),
        cmocka_unit_test_teardown(test_no_daemon, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
