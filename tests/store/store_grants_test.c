/*
 * store_grants_test.c - put grants with real processes (docs/WIRE.md, "Put
 * grants"): a master child, a holder client (the segment) and writer clients
 * without one. A stream of single puts of one size goes through grants (the
 * master counts them) and every value reads back correct from the other
 * process; puts of a second size and upserts mix in; a put of an existing key
 * through a grant leaves the old value; values over 4 MiB never go through one; after the
 * writer closes, the master
 * holds exactly the values' bytes (its grants were given back); a writer with
 * CRESCENT_PUT_GRANTS=0 never uses one. A master killed and
 * restarted on its port makes the writer's grants unknown: its puts fall back to two-phase ones and
 * stay correct. A writer in a tenant: its grants live in the tenant and the idle ones are given
 * back about a second after its last put, before it closes (the revoke names the tenant). A put
 * that finds no space while the writer's own idle grant holds it gives the grant back and
 * succeeds, single or batched. Puts through grants commit ahead of their copy by default (the
 * master counts them; every value reads back at once from the other process, upserts never do),
 * and so do batch puts, key by key; CRESCENT_PUT_COMMIT_AHEAD=0 keeps the grants but commits
 * nothing ahead.
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

#define MIB    (1024 * 1024)
#define SMALL  (64 * 1024)
#define N_PUTS 24

static int teardown(void **state)
{
    (void)state;
    unsetenv("CRESCENT_PUT_GRANTS");
    unsetenv("CRESCENT_PUT_COMMIT_AHEAD");
    sh_kill_all();
    return 0;
}

static void expect_bytes(sh_client *c, const char *key, long long len, int seed)
{
    const char *reply = sh_cmd(c, "get %s %d", key, seed);
    char check[32] = "";
    sscanf(reply, "%*s %*s %31s", check);
    if (strtoll(reply, NULL, 10) != len || strcmp(check, "ok") != 0)
        fail_msg("get %s (seed %d): expected %lld correct bytes, got '%s'", key, seed, len, reply);
}

static const char *const HOLDER[] = {"--segment", "128M", NULL};
static const char *const WRITER[] = {"--segment", "0", "--region", "0", NULL};

static void stream_of_puts_goes_through_grants(void **state)
{
    (void)state;
    unsetenv("CRESCENT_PUT_GRANTS"); /* the default: on */
    sh_master m;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    sh_client holder, writer;
    assert_int_equal(sh_client_start(&holder, m.addr, HOLDER), 0);
    assert_int_equal(sh_client_start(&writer, m.addr, WRITER), 0);

    for (int i = 0; i < N_PUTS; i++)
        assert_int_equal(sh_rc(&writer, "put big%d %d %d", i, MIB, 1000 + i), 0);
    double granted = sh_metric(&m, "master_put_grant_commits_total");
    fprintf(stderr, "%d puts of 1 MiB: %.0f through grants\n", N_PUTS, granted);
    assert_true(granted >= N_PUTS - 1); /* the first put asks for the first grant */

    /* Another size and upserts in between; an existing key's put changes nothing. */
    for (int i = 0; i < 8; i++) {
        assert_int_equal(sh_rc(&writer, "put small%d %d %d", i, SMALL, 2000 + i), 0);
        assert_int_equal(sh_rc(&writer, "upsert big%d %d %d", i, MIB, 3000 + i), 0);
    }
    assert_int_equal(sh_rc(&writer, "put big20 %d 4444", MIB), 0);
    assert_true(sh_metric(&m, "master_put_grant_commits_total") >= granted + 14);

    for (int i = 0; i < N_PUTS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "big%d", i);
        expect_bytes(&holder, key, MIB, i < 8 ? 3000 + i : 1000 + i);
    }
    for (int i = 0; i < 8; i++) {
        char key[32];
        snprintf(key, sizeof(key), "small%d", i);
        expect_bytes(&holder, key, SMALL, 2000 + i);
    }

    /* Values over 4 MiB are not granted: two puts of one such size, neither through a grant. */
    double before_big = sh_metric(&m, "master_put_grant_commits_total");
    assert_int_equal(sh_rc(&writer, "put huge0 %d 6000", 5 * MIB), 0);
    assert_int_equal(sh_rc(&writer, "put huge1 %d 6001", 5 * MIB), 0);
    assert_true(sh_metric(&m, "master_put_grant_commits_total") == before_big);
    expect_bytes(&holder, "huge1", 5 * MIB, 6001);

    /* The writer's grants are given back when it closes: only the values hold space. */
    assert_int_equal(sh_client_stop(&writer), 0);
    double want = (double)N_PUTS * MIB + 8.0 * SMALL + 10.0 * MIB;
    double held = -1;
    for (int tries = 0; tries < 100 && held != want; tries++) {
        sh_sleep_ms(20);
        held = sh_metric(&m, "master_allocated_bytes");
    }
    fprintf(stderr, "allocated after the writer closed: %.0f (values: %.0f)\n", held, want);
    assert_true(held == want);

    /* Grants off: none used. */
    double before = sh_metric(&m, "master_put_grant_commits_total");
    setenv("CRESCENT_PUT_GRANTS", "0", 1);
    sh_client plain;
    assert_int_equal(sh_client_start(&plain, m.addr, WRITER), 0);
    unsetenv("CRESCENT_PUT_GRANTS");
    for (int i = 0; i < 8; i++)
        assert_int_equal(sh_rc(&plain, "put plain%d %d %d", i, MIB, 5000 + i), 0);
    assert_true(sh_metric(&m, "master_put_grant_commits_total") == before);
    expect_bytes(&holder, "plain7", MIB, 5007);
    assert_int_equal(sh_client_stop(&plain), 0);

    /* A value that is not a number is refused at setup, naming the variable. */
    setenv("CRESCENT_PUT_GRANTS", "yes", 1);
    sh_client bad;
    assert_int_equal(sh_client_start(&bad, m.addr, WRITER), -1);
    assert_non_null(strstr(bad.line, "CRESCENT_PUT_GRANTS"));
    unsetenv("CRESCENT_PUT_GRANTS");

    assert_int_equal(sh_client_stop(&holder), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void puts_commit_ahead_unless_turned_off(void **state)
{
    (void)state;
    unsetenv("CRESCENT_PUT_GRANTS");
    unsetenv("CRESCENT_PUT_COMMIT_AHEAD"); /* the default: on */
    sh_master m;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    sh_client holder, writer;
    assert_int_equal(sh_client_start(&holder, m.addr, HOLDER), 0);
    assert_int_equal(sh_client_start(&writer, m.addr, WRITER), 0);
    for (int i = 0; i < N_PUTS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "a%d", i);
        assert_int_equal(sh_rc(&writer, "put %s %d %d", key, MIB, 100 + i), 0);
        expect_bytes(&holder, key, MIB, 100 + i); /* read by another process right away */
    }
    double ahead = sh_metric(&m, "master_put_commit_ahead_total");
    fprintf(stderr, "%d puts of 1 MiB: %.0f committed ahead\n", N_PUTS, ahead);
    assert_true(ahead >= N_PUTS - 1); /* the first put asks for the first grant */
    assert_true(sh_metric(&m, "master_put_grant_commits_total") >= ahead);
    /* Upserts through a grant are completed after their copy, as before. */
    for (int i = 0; i < 4; i++)
        assert_int_equal(sh_rc(&writer, "upsert a%d %d %d", i, MIB, 200 + i), 0);
    assert_true(sh_metric(&m, "master_put_commit_ahead_total") == ahead);
    expect_bytes(&holder, "a3", MIB, 203);
    /* A put of an existing key is done, and leaves the old value. */
    assert_int_equal(sh_rc(&writer, "put a10 %d 999", MIB), 0);
    expect_bytes(&holder, "a10", MIB, 110);
    /* Batch puts commit ahead too, every key (no grant needed); another process reads each
     * one right after the call returned. */
    double before_batches = sh_metric(&m, "master_put_commit_ahead_total");
    for (int r = 0; r < 3; r++) {
        assert_string_equal(sh_cmd(&writer, "batch_put c%d_ 16 %d %d", r, SMALL, 400 + 16 * r),
                            "0 ok=16 fail=0 first=0");
        for (int i = 0; i < 16; i += 5) {
            char key[32];
            snprintf(key, sizeof(key), "c%d_%d", r, i);
            expect_bytes(&holder, key, SMALL, 400 + 16 * r + i);
        }
    }
    assert_true(sh_metric(&m, "master_put_commit_ahead_total") == before_batches + 48);
    /* A batch naming existing keys leaves them (done), and commits the new ones ahead. */
    assert_string_equal(sh_cmd(&writer, "batch_put c0_ 20 %d 400", SMALL),
                        "0 ok=20 fail=0 first=0");
    assert_true(sh_metric(&m, "master_put_commit_ahead_total") == before_batches + 52);
    expect_bytes(&holder, "c0_19", SMALL, 419);
    ahead = sh_metric(&m, "master_put_commit_ahead_total");
    assert_int_equal(sh_client_stop(&writer), 0);

    /* Turned off: grants still, but each end after its copy. */
    setenv("CRESCENT_PUT_COMMIT_AHEAD", "0", 1);
    sh_client late;
    assert_int_equal(sh_client_start(&late, m.addr, WRITER), 0);
    double granted = sh_metric(&m, "master_put_grant_commits_total");
    ahead = sh_metric(&m, "master_put_commit_ahead_total");
    for (int i = 0; i < 8; i++)
        assert_int_equal(sh_rc(&late, "put b%d %d %d", i, MIB, 300 + i), 0);
    assert_true(sh_metric(&m, "master_put_grant_commits_total") >= granted + 7);
    assert_string_equal(sh_cmd(&late, "batch_put d 16 %d 500", SMALL), "0 ok=16 fail=0 first=0");
    assert_true(sh_metric(&m, "master_put_commit_ahead_total") == ahead);
    expect_bytes(&holder, "b7", MIB, 307);
    expect_bytes(&holder, "d15", SMALL, 515);
    assert_int_equal(sh_client_stop(&late), 0);

    /* A value other than 0 or 1 is refused at setup, naming the variable. */
    setenv("CRESCENT_PUT_COMMIT_AHEAD", "sometimes", 1);
    sh_client bad;
    assert_int_equal(sh_client_start(&bad, m.addr, WRITER), -1);
    assert_non_null(strstr(bad.line, "CRESCENT_PUT_COMMIT_AHEAD"));
    unsetenv("CRESCENT_PUT_COMMIT_AHEAD");

    assert_int_equal(sh_client_stop(&holder), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void tenant_grants_given_back_when_idle(void **state)
{
    (void)state;
    setenv("CRESCENT_PUT_GRANTS", "1", 1);
    sh_master m;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    const char *const writer_args[] = {"--segment", "0",      "--region", "0",
                                       "--tenant",  "team-a", NULL};
    const char *const reader_args[] = {"--segment", "0", "--tenant", "team-a", NULL};
    sh_client holder, writer, reader;
    assert_int_equal(sh_client_start(&holder, m.addr, HOLDER), 0);
    assert_int_equal(sh_client_start(&writer, m.addr, writer_args), 0);
    assert_int_equal(sh_client_start(&reader, m.addr, reader_args), 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(sh_rc(&writer, "put t%d %d %d", i, MIB, 600 + i), 0);
    assert_true(sh_metric(&m, "master_put_grant_commits_total") >= 7);
    for (int i = 0; i < 8; i++) {
        char key[32];
        snprintf(key, sizeof(key), "t%d", i);
        expect_bytes(&reader, key, MIB, 600 + i);
    }
    /* The writer stays open and idle: its heartbeat revokes the grants once they are 1 s old. */
    double want = 8.0 * MIB, held = -1;
    uint64_t t0 = sh_now_ms();
    while (held != want && sh_now_ms() - t0 < 4000) {
        sh_sleep_ms(50);
        held = sh_metric(&m, "master_allocated_bytes");
    }
    fprintf(stderr, "tenant writer idle: allocated %.0f (values %.0f) after %llu ms\n", held, want,
            (unsigned long long)(sh_now_ms() - t0));
    assert_true(held == want);
    assert_int_equal(sh_client_stop(&reader), 0);
    assert_int_equal(sh_client_stop(&writer), 0);
    assert_int_equal(sh_client_stop(&holder), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void restarted_master_forgets_grants(void **state)
{
    (void)state;
    setenv("CRESCENT_PUT_GRANTS", "1", 1);
    sh_master m;
    const char *const margs[] = {"--default_kv_lease_ttl=500", NULL};
    assert_int_equal(sh_master_start(&m, margs), 0);
    const char *const holder_args[] = {"--segment", "64M", "--heartbeat", "200", NULL};
    const char *const writer_args[] = {"--segment", "0",           "--region", "0", "--rpc-timeout",
                                       "800",       "--heartbeat", "200",      NULL};
    sh_client holder, writer;
    assert_int_equal(sh_client_start(&holder, m.addr, holder_args), 0);
    assert_int_equal(sh_client_start(&writer, m.addr, writer_args), 0);
    for (int i = 0; i < 4; i++) /* the writer now holds a grant */
        assert_int_equal(sh_rc(&writer, "put before%d %d %d", i, MIB, 100 + i), 0);

    uint16_t port = m.port;
    sh_master_kill(&m);
    char port_flag[32];
    snprintf(port_flag, sizeof(port_flag), "--rpc_port=%u", port);
    const char *const again[] = {"--default_kv_lease_ttl=500", port_flag, NULL};
    assert_int_equal(sh_master_start_retry(&m, again, 10000), 0);

    /* Until the holder has remounted and the restart fence has passed, puts may fail; then
     * every put succeeds (its grant from the old master refused, the put made two-phase). */
    int ok = 0;
    uint64_t t0 = sh_now_ms();
    for (int i = 0; ok < 6 && sh_now_ms() - t0 < 20000; i++) {
        long long rc = sh_rc(&writer, "put after%d %d %d", i, MIB, 200 + i);
        assert_true(rc != SH_DEAD);
        if (rc == 0) {
            char key[32];
            snprintf(key, sizeof(key), "after%d", i);
            expect_bytes(&holder, key, MIB, 200 + i);
            ok++;
        } else {
            assert_true(ok == 0); /* once one succeeded, every later one must */
            sh_sleep_ms(100);
        }
    }
    assert_int_equal(ok, 6);
    assert_int_equal(sh_client_stop(&writer), 0);
    assert_int_equal(sh_client_stop(&holder), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

/* A put that finds no space because the writer's own idle grant holds it gives
 * its grants back and succeeds: an 8 MiB holder, a 2 MiB value and its grant,
 * then a 7 MiB value (too big to be granted itself), singly and in a batch. */
static void idle_grants_given_back_for_space(void **state)
{
    (void)state;
    unsetenv("CRESCENT_PUT_GRANTS");
    sh_master m;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    const char *const holder_args[] = {"--segment", "8M", NULL};
    sh_client holder, writer;
    assert_int_equal(sh_client_start(&holder, m.addr, holder_args), 0);
    assert_int_equal(sh_client_start(&writer, m.addr, WRITER), 0);
    const int big = 7 * MIB;

    assert_int_equal(sh_rc(&writer, "put a %d 1", 2 * MIB), 0); /* and a 2 MiB grant */
    assert_true(sh_metric(&m, "master_allocated_bytes") == 4.0 * MIB);
    assert_int_equal(sh_rc(&writer, "put big %d 2", big), 0);
    expect_bytes(&holder, "big", big, 2);
    (void)sh_cmd(&holder, "exist a"); /* its read of big given back ahead of this call */
    assert_int_equal(sh_rc(&writer, "remove big force"), 0);

    assert_int_equal(sh_rc(&writer, "put b %d 3", 2 * MIB), 0);
    assert_true(sh_metric(&m, "master_allocated_bytes") == 4.0 * MIB);
    const char *reply = sh_cmd(&writer, "batch_put bbig 1 %d 4", big);
    if (strncmp(reply, "0 ok=1 ", 7) != 0)
        fail_msg("batch put of 7 MiB next to an idle 2 MiB grant: '%s'", reply);
    expect_bytes(&holder, "bbig0", big, 4);

    assert_int_equal(sh_client_stop(&writer), 0);
    assert_int_equal(sh_client_stop(&holder), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(stream_of_puts_goes_through_grants, teardown),
        cmocka_unit_test_teardown(puts_commit_ahead_unless_turned_off, teardown),
        cmocka_unit_test_teardown(tenant_grants_given_back_when_idle, teardown),
        cmocka_unit_test_teardown(restarted_master_forgets_grants, teardown),
        cmocka_unit_test_teardown(idle_grants_given_back_for_space, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
