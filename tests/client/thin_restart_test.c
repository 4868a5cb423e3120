/*
 * thin_restart_test.c - thin clients across restarts of crescent-client
 * and of the master.
 *
 *   daemon_restart   the daemon is killed: thin calls fail at once with
 *                    CR_ERR_DAEMON_LOST / CR_ERR_DAEMON_UNREACHABLE and
 *                    health says so; a daemon started again on the same
 *                    socket is reconnected to on the next call (same pool,
 *                    the shared region registered again: still zero-copy)
 *   master_restart   the master is killed and started again on its port:
 *                    the daemon remounts its segment (heartbeat) and thin
 *                    clients put and get again
 *   clean_stop       SIGTERM: the daemon exits 0 and its segment is
 *                    unmounted at the master
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
    sh_kill_all();
    return 0;
}

static void test_daemon_restart(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client c;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    assert_int_equal(th_client_start(&c, &d, (const char *[]){"--region", "8M", NULL}), 0);
    assert_int_equal(sh_rc(&c, "put_from before 1000000 3"), 0);
    char sock[96];
    snprintf(sock, sizeof(sock), "%s", d.socket);

    th_daemon_kill(&d);
    /* Fail fast, with a named error, while nobody serves. */
    uint64_t t0 = sh_now_ms();
    long long rc = sh_rc(&c, "put_from during 4096 4");
    assert_true(rc == CR_ERR_DAEMON_LOST || rc == CR_ERR_DAEMON_UNREACHABLE);
    for (int i = 0; i < 5; i++)
        assert_int_equal(sh_rc(&c, "get_into before 2000000 3"), CR_ERR_DAEMON_UNREACHABLE);
    assert_int_equal(sh_rc(&c, "health"), CR_ERR_DAEMON_UNREACHABLE);
    assert_true(sh_now_ms() - t0 < 3000);

    /* A new daemon on the same socket: the next calls reconnect. */
    assert_int_equal(th_daemon_start(&d, m.addr, sock, NULL), 0);
    rc = -1;
    for (int i = 0; i < 50 && rc != 0; i++) {
        rc = sh_rc(&c, "put_from after 1000000 5");
        if (rc != 0)
            sh_sleep_ms(50);
    }
    assert_int_equal(rc, 0);
    const char *r = sh_cmd(&c, "get_into after 2000000 5");
    assert_int_equal(strtoll(r, NULL, 10), 1000000);
    assert_non_null(strstr(r, " ok"));
    assert_int_equal(sh_rc(&c, "health"), 0);
    const char *st = sh_cmd(&c, "thinstats");
    assert_int_equal(sh_field(st, "reconnects"), 1);
    assert_int_equal(sh_field(st, "shared"), 1); /* the region, registered again */
    assert_true(strstr(st, "slow=0/0") != NULL);
    /* The old daemon's segment died with it (the master drops it once the
     * dead daemon's heartbeats have expired; until then reading fails). */
    long long before = sh_rc(&c, "get before 3");
    assert_true(before == CR_OBJECT_NOT_FOUND || before == CR_TRANSFER_FAIL);
    assert_int_equal(sh_client_stop(&c), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void test_master_restart(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client c;
    /* A short lease keeps the master's restart fence (lease + 1 s) short. */
    assert_int_equal(sh_master_start(&m, (const char *[]){"--default_kv_lease_ttl=300", NULL}), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    assert_int_equal(th_client_start(&c, &d, NULL), 0);
    assert_int_equal(sh_rc(&c, "put one 10000 1"), 0);
    uint16_t port = m.port;
    sh_master_kill(&m);
    char flag[32];
    snprintf(flag, sizeof(flag), "--rpc_port=%u", (unsigned)port);
    assert_int_equal(sh_master_start_retry(
                         &m, (const char *[]){flag, "--default_kv_lease_ttl=300", NULL}, 10000),
                     0);
    /* The daemon remounts on its next heartbeat (200 ms here). */
    long long rc = -1;
    for (int i = 0; i < 200 && rc != 0; i++) {
        rc = sh_rc(&c, "put two 20000 2");
        if (rc != 0)
            sh_sleep_ms(50);
    }
    assert_int_equal(rc, 0);
    const char *r = sh_cmd(&c, "get two 2");
    assert_int_equal(strtoll(r, NULL, 10), 20000);
    assert_non_null(strstr(r, " ok"));
    assert_int_equal(sh_rc(&c, "health"), 0);
    assert_int_equal(sh_metric(&m, "master_segments"), 1);
    assert_int_equal(sh_client_stop(&c), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void test_clean_stop(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    sh_client c;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    assert_int_equal(sh_metric(&m, "master_segments"), 1);
    assert_int_equal(th_client_start(&c, &d, NULL), 0);
    assert_int_equal(sh_rc(&c, "put k 100 1"), 0);
    assert_int_equal(th_daemon_stop(&d), 0); /* with a client still connected */
    assert_int_equal(sh_metric(&m, "master_segments"), 0);
    long long rc = sh_rc(&c, "get k 1");
    assert_true(rc == CR_ERR_DAEMON_LOST || rc == CR_ERR_DAEMON_UNREACHABLE);
    assert_int_equal(sh_client_stop(&c), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

int main(void)
{
    if (getenv("CRESCENT_CLIENT_BIN") == NULL || getenv("CRESCENT_STORE_CLIENT_BIN") == NULL)
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_daemon_restart, teardown),
        cmocka_unit_test_teardown(test_master_restart, teardown),
        cmocka_unit_test_teardown(test_clean_stop, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
