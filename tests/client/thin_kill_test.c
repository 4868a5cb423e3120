/*
 * thin_kill_test.c - thin clients killed with SIGKILL leak nothing in
 * crescent-client.
 *
 * A master, a daemon, and 100 thin-client processes one after the other;
 * each starts a large batch (zero-copy batch puts from its pool, copying
 * batch gets through its local buffer, a put session held open) and is
 * killed at a varying moment in the middle of it. Afterwards the daemon has
 * exactly the descriptors and the shared mappings it had before the first
 * client (fd count and mapped bytes flat), serves no session, has no
 * local-buffer space handed out, and still serves a new client with every
 * byte verified. A put session left open by a killed client was revoked:
 * another client can put that key at once (the master would otherwise
 * refuse it until its put_start_discard_timeout).
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

#define KILLS 100

static int teardown(void **state)
{
    (void)state;
    sh_kill_all();
    return 0;
}

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

static void test_hundred_kills(void **state)
{
    (void)state;
    sh_master m;
    th_daemon d;
    assert_int_equal(
        sh_master_start(&m, (const char *[]){"--put_start_discard_timeout_sec=600", NULL}), 0);
    assert_int_equal(th_daemon_start(&d, m.addr, NULL, NULL), 0);
    pid_t dp = d.p.proc.pid;

    /* One client first, so everything lazy in the daemon exists (engine
     * lanes, descriptor caches, the HTTP worker): the baseline is after it. */
    sh_client c;
    static const char *flags[] = {"--pool",        "8M",   "--buffer", "4M", "--region", "4M",
                                  "--region-kind", "pool", NULL};
    assert_int_equal(th_client_start(&c, &d, flags), 0);
    assert_int_equal(sh_field(sh_cmd(&c, "batch_put warm- 32 65536 1 from"), "ok"), 32);
    assert_int_equal(sh_field(sh_cmd(&c, "batch_get warm- 32 65536 1"), "ok"), 32);
    assert_int_equal(sh_client_stop(&c), 0);
    for (int i = 0; i < 200 && th_metric(&d, "crescent_client_thin_clients") != 0; i++)
        sh_sleep_ms(50);
    long long base_fds = fds_of(dp);
    long long base_map = th_shared_mapped(dp);
    assert_true(base_fds > 0 && base_map > 0);

    for (int i = 0; i < KILLS; i++) {
        assert_int_equal(th_client_start(&c, &d, flags), 0);
        switch (i % 3) {
        case 0: /* zero-copy batch put from the pool */
            sh_send(&c, "batch_put k%d- 48 65536 %d from", i, i);
            break;
        case 1: /* copying batch get: values placed in the local buffer */
            sh_send(&c, "batch_get warm- 32 65536 1");
            break;
        default: /* a put session held open, then a batch */
            assert_int_equal(sh_rc(&c, "psess_start held-%d 1048576", i), 0);
            sh_send(&c, "batch_put j%d- 48 65536 %d", i, i);
            break;
        }
        sh_sleep_ms(i % 7 * 3); /* 0..18 ms into it */
        sh_client_kill(&c);
    }

    /* Everything the 100 sessions held is gone. */
    long long fds = settle(fds_of, dp, base_fds);
    long long map = settle(th_shared_mapped, dp, base_map);
    /* (fewer than before is fine: a connection of the baseline may have
     * closed meanwhile; more would be a leak) */
    if (fds > base_fds || map > base_map)
        fail_msg("after %d kills the daemon has %lld descriptors (%lld before) and %lld bytes of "
                 "shared mappings (%lld before)",
                 KILLS, fds, base_fds, map, base_map);
    assert_int_equal((int)th_metric(&d, "crescent_client_thin_clients"), 0);
    assert_int_equal((int)th_metric(&d, "crescent_client_local_buffer_bytes"), 0);
    assert_int_equal((int)th_metric(&d, "crescent_client_regions"), 0);
    assert_true(th_metric(&d, "crescent_client_sessions_closed_total") >= KILLS + 1);

    /* The daemon serves on, and the open put sessions were revoked. */
    assert_int_equal(th_client_start(&c, &d, flags), 0);
    for (int i = 2; i < KILLS; i += 3)
        if (sh_rc(&c, "put held-%d 4096 %d", i, i) != 0)
            fail_msg("held-%d is still in flight: its put session was not revoked (%s)", i, c.line);
    assert_int_equal(sh_field(sh_cmd(&c, "batch_put after- 16 200000 5 from"), "ok"), 16);
    const char *r = sh_cmd(&c, "batch_get after- 16 200000 5 into");
    assert_int_equal(sh_field(r, "ok"), 16);
    assert_int_equal(sh_field(r, "bad"), 0);
    assert_int_equal(sh_client_stop(&c), 0);
    assert_int_equal(th_daemon_stop(&d), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

int main(void)
{
    if (getenv("CRESCENT_CLIENT_BIN") == NULL || getenv("CRESCENT_STORE_CLIENT_BIN") == NULL)
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_hundred_kills, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
