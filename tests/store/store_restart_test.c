/*
 * store_restart_test.c - the master dies (SIGKILL) and comes back on the
 * same port; clients notice through their heartbeats, remount their
 * segments, and the store works again without ever returning wrong bytes.
 *
 * Timeline: a master with --default_kv_lease_ttl=1000 (so the restart fence
 * of the new instance is lease + 1 s = 2 s) and two clients heartbeating
 * every 300 ms. Objects are written and verified; the master is killed;
 * while it is down, calls fail within the rpc deadline; it restarts on the
 * same port. From then on the test alternates puts of new keys and gets of
 * old keys: within the fence puts may fail (-200, or an RPC error while the
 * connection is re-opened); once one succeeds, every later one must; a get
 * of an old key is CR_OBJECT_NOT_FOUND (or an RPC error while reconnecting),
 * never bytes; every new key reads back correct from the other client.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crescent/status.h"
#include "store_harness.h"
#include "store_pattern.h"

#define OLD_KEYS 16
#define VALUE    (128 * 1024)

static int teardown(void **state)
{
    (void)state;
    sh_kill_all();
    return 0;
}

static void check_read(const char *reply, long long len, const char *what)
{
    char check[32] = "";
    long long rc = strtoll(reply, NULL, 10);
    sscanf(reply, "%*s %*s %31s", check);
    if (rc != len || strcmp(check, "ok") != 0)
        fail_msg("%s: expected %lld correct bytes, got '%s'", what, len, reply);
}

static void master_restart(void **state)
{
    (void)state;
    sh_master m;
    sh_client a, b;
    const char *const margs[] = {"--default_kv_lease_ttl=1000", NULL};
    assert_int_equal(sh_master_start(&m, margs), 0);
    const char *const cargs[] = {"--segment", "32M", "--rpc-timeout", "1000", "--heartbeat",
                                 "300",       NULL};
    assert_int_equal(sh_client_start(&a, m.addr, cargs), 0);
    assert_int_equal(sh_client_start(&b, m.addr, cargs), 0);
    for (int i = 0; i < OLD_KEYS; i++) {
        assert_int_equal(sh_rc(&a, "put old%d %d %d", i, VALUE, 100 + i), 0);
        check_read(sh_cmd(&b, "get old%d %d", i, 100 + i), VALUE, "old key before the crash");
    }
    uint16_t port = m.port;

    /* Crash. Calls fail within the rpc deadline instead of hanging. */
    sh_master_kill(&m);
    uint64_t t0 = sh_now_ms();
    long long rc = sh_rc(&a, "put down0 %d 1", VALUE);
    uint64_t took = sh_now_ms() - t0;
    fprintf(stderr, "put with the master down: %lld after %llu ms\n", rc, (unsigned long long)took);
    assert_true(rc < 0 && rc != SH_DEAD);
    assert_true(took < 3500);
    t0 = sh_now_ms();
    rc = sh_rc(&b, "get old0 100");
    assert_true(rc < 0 && rc != SH_DEAD);
    assert_true(sh_now_ms() - t0 < 3500);

    /* Restart on the same port. */
    char port_flag[32];
    snprintf(port_flag, sizeof(port_flag), "--rpc_port=%u", (unsigned)port);
    const char *const rargs[] = {"--default_kv_lease_ttl=1000", port_flag, NULL};
    assert_int_equal(sh_master_start_retry(&m, rargs, 10000), 0);
    uint64_t restarted = sh_now_ms();

    int first_ok = -1, refused = 0, n = 0;
    for (int i = 0; sh_now_ms() - restarted < 20000; i++) {
        rc = sh_rc(&a, "put new%d %d %d", i, VALUE, 5000 + i);
        assert_true(rc != SH_DEAD);
        if (rc == 0) {
            if (first_ok < 0) {
                first_ok = i;
                fprintf(stderr,
                        "first put after the restart succeeded %llu ms after it "
                        "(%d refused before)\n",
                        (unsigned long long)(sh_now_ms() - restarted), refused);
            }
            check_read(sh_cmd(&b, "get new%d %d", i, 5000 + i), VALUE, "new key");
            n++;
        } else {
            if (first_ok >= 0)
                fail_msg("put new%d failed with %lld after put new%d had succeeded", i, rc,
                         first_ok);
            refused++;
        }
        /* Old keys are gone with the old master: a miss (or an error), never bytes. */
        rc = sh_rc(&b, "get old%d %d", i % OLD_KEYS, 100 + i % OLD_KEYS);
        if (rc >= 0)
            fail_msg("get old%d after the restart returned %lld: '%s'", i % OLD_KEYS, rc, b.line);
        if (first_ok >= 0 && n >= 20)
            break;
        sh_sleep_ms(50);
    }
    assert_true(first_ok >= 0);
    assert_true(n >= 20);
    /* Both segments are mounted again and both clients are healthy. */
    assert_int_equal(sh_rc(&a, "health"), 0);
    assert_int_equal(sh_rc(&b, "health"), 0);
    assert_true(sh_metric(&m, "master_segments") == 2);
    assert_true(sh_metric(&m, "master_active_clients") == 2);
    for (int i = 0; i < OLD_KEYS; i++)
        assert_int_equal(sh_rc(&a, "get old%d", i), CR_OBJECT_NOT_FOUND);
    /* Batches and zero-copy work again in both directions. */
    const char *r = sh_cmd(&b, "batch_put nb 32 65536 900 from");
    assert_int_equal(sh_field(r, "ok"), 32);
    r = sh_cmd(&a, "batch_get nb 32 65536 900 into");
    assert_int_equal(sh_field(r, "ok"), 32);

    assert_int_equal(sh_client_stop(&a), 0);
    assert_int_equal(sh_client_stop(&b), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

/*
 * Issue 11 item 14: a client process restarted on the same host:port (so
 * the same segment name) right after the old one closed, with leases on the
 * old segment still running. Its new segment is other memory (a new
 * mapping), so it is a first mount and must not be fenced; health() must
 * say exactly what the master says, and a put into the new segment must
 * work at once. (The old master fenced every mount of the name for the
 * lease TTL, said "fenced after a remount", and health() said OK.)
 */
static void client_restart_same_name(void **state)
{
    (void)state;
    sh_master m;
    sh_client a, b;
    const char *const margs[] = {"--default_kv_lease_ttl=20000", NULL};
    assert_int_equal(sh_master_start(&m, margs), 0);
    char host[64];
    snprintf(host, sizeof(host), "127.0.0.1:%u", (unsigned)sh_closed_port());
    const char *const cargs[] = {"--segment",   "16M", "--hostname", host,
                                 "--heartbeat", "200", NULL};
    assert_int_equal(sh_client_start(&a, m.addr, cargs), 0);
    assert_int_equal(sh_rc(&a, "put k 4096 7"), 0);
    check_read(sh_cmd(&a, "get k 7"), 4096, "before the restart"); /* a 20 s lease */
    assert_int_equal(sh_rc(&a, "close"), 0);
    assert_int_equal(sh_client_stop(&a), 0);

    assert_int_equal(sh_client_start(&b, m.addr, cargs), 0);
    assert_string_equal(a.name, b.name);
    long long health = sh_rc(&b, "health");
    fprintf(stderr, "health of the restarted client: %lld (%s)\n", health, b.line);
    char put[400];
    snprintf(put, sizeof(put), "put fresh 4096 9 pref=%s", b.name);
    long long rc = sh_rc(&b, "%s", put);
    if (health == 0 && rc != 0)
        fail_msg("health() said OK but a put into the client's own segment failed: %lld", rc);
    /* Its memory is a new mapping, so no fence: both work at once. */
    assert_int_equal(health, 0);
    assert_int_equal(rc, 0);
    check_read(sh_cmd(&b, "get fresh 9"), 4096, "after the restart");
    assert_int_equal(sh_client_stop(&b), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(master_restart, teardown),
        cmocka_unit_test_teardown(client_restart_same_name, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
