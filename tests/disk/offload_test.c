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
 *                  disk hit promotes the value back into memory (every one of
 *                  them: a promotion through a put grant once did nothing); bytes
 *                  right.
 *   promotion_tenants  the same with the holder in tenant team-h: disk hits of
 *                  team-h's keys are promoted (back to the same keys), those of
 *                  the default tenant's keys are not (a promotion is a put in the
 *                  holder's namespace: it once made a second, team-h copy of the
 *                  default tenant's key) and stay right on disk.
 *   remove_upsert  remove of a disk-only key: gone (get, exist); upsert of a
 *                  disk-only key: the new bytes, never the old disk copy; size,
 *                  replicas and the admin /query_key see a disk-only key;
 *                  remove_by_regex removes one (and only the matching one).
 *   kill_restart   kill -9 of the holder while it is offloading, restart on
 *                  the same directory: no value is ever served wrong; values
 *                  completed on disk before the kill are readable again.
 *   write_behind   --enable_offload alone: puts are written behind; evicted values
 *                  whose copy landed read back from disk.
 *   compaction_gets  4 MiB buckets, two of every three disk-only values removed:
 *                  the holder compacts its mostly-dead buckets while two reader
 *                  processes keep getting the survivors (right bytes, always)
 *                  and the removed keys (not found, always); afterwards every
 *                  survivor is still readable and the disk holds only them.
 *   batch_staging  a holder with a 16 MiB staging area, a batch get of 32
 *                  disk-only 1 MiB values: every value right, within bounds (the
 *                  reader reads what is staged and asks again for the rest, so
 *                  the holder's staging space comes back while the batch runs).
 *   oversized_stage  a 1 MiB staging area, 4 MiB values: the disk-only ones read
 *                  back right, singly (twice) and in a batch (each staged in a
 *                  buffer of its own, one at a time).
 *   disk_full      a 24 MiB disk tier (MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE)
 *                  under 160 MiB of values: the disk LRU drops old ones; every
 *                  get answers right bytes or not-found, promptly.
 *
 * A put that finds the segment full while offloads are in flight gets
 * CR_NO_AVAILABLE_HANDLE (the memory is released once the holder has written
 * the evicted values); the writer retries it, as a cache client would.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
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
    unsetenv("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES");
    unsetenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES");
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
    double asks0 = sh_metric(&m, "master_rpc_latency_seconds_count{op=\"get_replica_list\"}");
    double expired0 = sh_metric(&m, "master_rpc_stage_waits_expired_total");
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
    /* The master held each disk hit's ask until its stage landed (stage waits): about one
     * ask per get (RPC requests served, not the service's own asks again of a held one),
     * where readers polling every 250 us asked several times per disk hit. */
    double asks =
        sh_metric(&m, "master_rpc_latency_seconds_count{op=\"get_replica_list\"}") - asks0;
    double held = sh_metric(&m, "master_rpc_stage_waits_total");
    double expired = sh_metric(&m, "master_rpc_stage_waits_expired_total") - expired0;
    fprintf(stderr,
            "roundtrip: %d gets, %lld from disk: %.0f get_replica_list asks, %.0f held, %.0f "
            "held to the end of their wait\n",
            N, disk_reads, asks, held, expired);
    if (held < disk_reads / 2)
        fail_msg("only %.0f of %lld disk hits were held for their stage", held, disk_reads);
    /* and the holder kept a heartbeat waiting there for its tasks (its task thread) */
    if (sh_metric(&m, "master_rpc_task_waits_total") < 1)
        fail_msg("the holder never had a heartbeat held for tasks");
    /* (a hold that ended before its stage landed, on a loaded machine, is asked again) */
    if (asks > N + N / 4 + expired)
        fail_msg("%.0f get_replica_list asks for %d gets (%lld from disk, %.0f holds ended)", asks,
                 N, disk_reads, expired);
    for (int i = 0; i < N; i += 7) { /* the holder reads its own disk copies too */
        snprintf(key, sizeof(key), "rt-%d", i);
        const char *r = sh_cmd(&h, "get %s %u", key, 1000u + (unsigned)i);
        if (!read_ok(r, MIB))
            fail_msg("get %s on the holder: %s", key, r);
    }
    assert_true(sh_metric(&m, "master_disk_objects") >= N / 2);
    assert_true(sh_metric(&m, "master_disk_writes_total") >= N / 2);
    /* past half the segment the puts were copied ahead of their eviction (and every value,
     * those copies' included, read back right above) */
    assert_true(sh_metric(&m, "master_offload_early_writes_total") > 0);
    stop_all(&m, &h, &c);
}

/* Put n values of len bytes pfx0..pfx<n-1> with seeds seed+i (retrying while offloads run). */
static void put_many_of(sh_client *c, const char *pfx, int n, long long len, unsigned seed)
{
    char key[64];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s%d", pfx, i);
        long long rc = put_retry(c, "put", key, len, seed + (unsigned)i);
        if (rc != 0)
            fail_msg("put %s: %lld (%s)", key, rc, c->line);
    }
}

static void put_many(sh_client *c, const char *pfx, int n, unsigned seed)
{
    put_many_of(c, pfx, n, MIB, seed);
}

/* Is key on the holder's disk only (exists, and its one replica is the disk copy)? */
static bool disk_only(sh_client *c, const char *key)
{
    if (sh_rc(c, "exist %s", key) != 1)
        return false;
    const char *r = sh_cmd(c, "replicas %s", key);
    return strtoll(r, NULL, 10) == 1 && strstr(r, "/disk") != NULL;
}

/* Is key disk-only within ms? An offload the eviction queued lands asynchronously (the
 * object stays in memory until the holder reports it written): on a loaded machine the
 * last puts' evictions may still be in flight when the puts return. */
static bool disk_only_within(sh_client *c, const char *key, unsigned ms)
{
    uint64_t until = sh_now_ms() + ms;
    while (!disk_only(c, key)) {
        if (sh_now_ms() > until)
            return false;
        sh_sleep_ms(20);
    }
    return true;
}

/* Does key have a replica in memory? */
static bool in_memory(sh_client *c, const char *key)
{
    const char *r = sh_cmd(c, "replicas %s", key);
    return strtoll(r, NULL, 10) >= 1 && strstr(r, "/disk") == NULL;
}

static int first_disk_only(sh_client *c, const char *pfx, int n, int from)
{
    char key[64];
    for (int i = from; i < n; i++) {
        snprintf(key, sizeof(key), "%s%d", pfx, i);
        if (disk_only(c, key))
            return i;
    }
    fail_msg("no disk-only key among %s%d..%d", pfx, from, n - 1);
    return -1;
}

/* Read (once, checking the bytes) up to `want` of the disk-only values pfx0..pfx<n-1> put
 * with seeds seed+i; their indexes into hit[]. Returns how many. */
static int hit_disk_only(sh_client *c, const char *pfx, int n, unsigned seed, int *hit, int want)
{
    char key[64];
    int got = 0;
    for (int i = 0; i < n && got < want; i++) {
        snprintf(key, sizeof(key), "%s%d", pfx, i);
        if (!disk_only(c, key))
            continue;
        const char *r = sh_cmd(c, "get %s %u", key, seed + (unsigned)i);
        if (!read_ok(r, MIB))
            fail_msg("first get of disk-only %s: %s", key, r);
        hit[got++] = i;
    }
    return got;
}

/* Within 10 s the holder h has promoted at least n values (its offstats). */
static void wait_promoted(sh_client *h, int n)
{
    uint64_t until = sh_now_ms() + 10000;
    long long promos = 0;
    while ((promos = sh_field(sh_cmd(h, "offstats"), "promoted")) < n && sh_now_ms() < until)
        sh_sleep_ms(20);
    if (promos < n)
        fail_msg("%lld of %d hit values promoted: %s", promos, n, h->line);
}

static void promotion(void **state)
{
    (void)state;
    sh_master m;
    sh_client h, c;
    const char *const margs[] = {"--enable_offload=true", "--offload_on_evict=true",
                                 "--promotion_on_hit=true", "--promotion_admission_threshold=1",
                                 NULL};
    start_all(&m, &h, &c, margs);
    enum { N = 128 };
    put_many(&c, "pr-", N, 500);
    char key[64];
    int promoted_keys[8];
    int np = hit_disk_only(&c, "pr-", N, 500, promoted_keys, 8);
    assert_int_equal(np, 8);
    wait_promoted(&h, np); /* the holder copies them back into memory (a put of its own) */
    int n_in_memory = 0;
    for (int j = 0; j < np; j++) {
        snprintf(key, sizeof(key), "pr-%d", promoted_keys[j]);
        n_in_memory += in_memory(&c, key);
        const char *r = sh_cmd(&c, "get %s %u", key, 500u + (unsigned)promoted_keys[j]);
        if (!read_ok(r, MIB))
            fail_msg("get of promoted %s: %s", key, r);
    }
    fprintf(stderr, "promoted values with a memory replica: %d of %d\n", n_in_memory, np);
    if (n_in_memory != np) /* a promotion through a grant was taken for "exists" */
        fail_msg("%d of %d promoted values have a memory replica", n_in_memory, np);
    for (int i = 0; i < N; i++) { /* and nothing else was disturbed */
        snprintf(key, sizeof(key), "pr-%d", i);
        const char *r = sh_cmd(&c, "get %s %u", key, 500u + (unsigned)i);
        if (!read_ok(r, MIB))
            fail_msg("get %s: %s", key, r);
    }
    assert_true(sh_metric(&m, "master_disk_promotions_total") >= np);
    stop_all(&m, &h, &c);
}

static void promotion_tenants(void **state)
{
    (void)state;
    sh_master m;
    const char *const margs[] = {"--enable_offload=true", "--offload_on_evict=true",
                                 "--promotion_on_hit=true", "--promotion_admission_threshold=1",
                                 NULL};
    assert_int_equal(sh_master_start(&m, margs), 0);
    const char *const hargs[] = {"--segment", "64M",      "--ssd",  dir, "--region",
                                 "0",         "--tenant", "team-h", NULL};
    const char *const targs[] = {"--segment", "0", "--region", "0", "--tenant", "team-h", NULL};
    const char *const cargs[] = {"--segment", "0", "--region", "0", NULL};
    sh_client h, t, c;
    assert_int_equal(sh_client_start(&h, m.addr, hargs), 0);
    assert_int_equal(sh_client_start(&t, m.addr, targs), 0);
    assert_int_equal(sh_client_start(&c, m.addr, cargs), 0);
    enum { N = 64 };
    put_many(&t, "own-", N, 700); /* the oldest: evicted to disk first */
    put_many(&c, "dft-", 2 * N, 800);
    char key[64];
    int own[4], dft[4];
    int n_own = hit_disk_only(&t, "own-", N, 700, own, 4);
    int n_dft = hit_disk_only(&c, "dft-", 2 * N, 800, dft, 4);
    assert_int_equal(n_own, 4);
    assert_int_equal(n_dft, 4);
    wait_promoted(&h, n_own); /* team-h's keys: a put of the holder's own, in its tenant */
    sh_sleep_ms(300);         /* time for a (wrong) promotion of the default tenant's keys too */
    int n_in_memory = 0;
    for (int j = 0; j < n_own; j++) {
        snprintf(key, sizeof(key), "own-%d", own[j]);
        n_in_memory += in_memory(&t, key);
        if (!read_ok(sh_cmd(&t, "get %s %u", key, 700u + (unsigned)own[j]), MIB))
            fail_msg("get of promoted %s: %s", key, t.line);
    }
    if (n_in_memory != n_own)
        fail_msg("%d of %d promoted values of the holder's tenant have a memory replica",
                 n_in_memory, n_own);
    for (int j = 0; j < n_dft; j++) {
        snprintf(key, sizeof(key), "dft-%d", dft[j]);
        if (sh_rc(&t, "exist %s", key) != 0)
            fail_msg("%s exists in the holder's tenant: promoted into the wrong namespace", key);
        if (!read_ok(sh_cmd(&c, "get %s %u", key, 800u + (unsigned)dft[j]), MIB))
            fail_msg("get of %s: %s", key, c.line);
    }
    assert_int_equal(sh_client_stop(&c), 0);
    assert_int_equal(sh_client_stop(&t), 0);
    assert_int_equal(sh_client_stop(&h), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void remove_upsert(void **state)
{
    (void)state;
    sh_master m;
    sh_client h, c;
    const char *const margs[] = {"--enable_offload=true", "--offload_on_evict=true",
                                 "--default_kv_lease_ttl=300", NULL};
    start_all(&m, &h, &c, margs);
    enum { N = 112 };
    put_many(&c, "ru-", N, 700);
    char key[64];
    /* remove of a disk-only key: gone, never served from disk */
    int a = first_disk_only(&c, "ru-", N, 0);
    snprintf(key, sizeof(key), "ru-%d", a);
    assert_int_equal(sh_rc(&c, "remove %s", key), 0);
    assert_int_equal(sh_rc(&c, "exist %s", key), 0);
    assert_int_equal(sh_rc(&c, "get %s", key), CR_OBJECT_NOT_FOUND);
    assert_int_equal(sh_rc(&h, "get %s", key), CR_OBJECT_NOT_FOUND);
    assert_int_equal(sh_rc(&c, "remove %s", key), CR_OBJECT_NOT_FOUND);
    /* a plain put of a disk-only key: it exists */
    int b = first_disk_only(&c, "ru-", N, a + 1);
    const char *r0;
    snprintf(key, sizeof(key), "ru-%d", b);
    assert_int_equal(sh_rc(&c, "put %s %d 1", key, MIB), 0); /* Mooncake: exists = done */
    r0 = sh_cmd(&c, "get %s %u", key, 700u + (unsigned)b);
    if (!read_ok(r0, MIB))
        fail_msg("a put of a disk-only key changed it: %s", r0);
    /* upsert of a disk-only key: the new bytes from then on, also once evicted again */
    assert_int_equal(put_retry(&c, "upsert", key, MIB / 2, 4242), 0);
    const char *r = sh_cmd(&c, "get %s 4242", key);
    if (!read_ok(r, MIB / 2))
        fail_msg("get after upsert: %s", r);
    /* push it out to disk again (reads lease it for 300 ms only here) */
    bool on_disk = false;
    for (int i = 0; i < 40 && !on_disk; i++) {
        char pfx[32];
        snprintf(pfx, sizeof(pfx), "ru2-%d-", i);
        sh_sleep_ms(350);
        put_many(&c, pfx, 16, 1300u + (unsigned)i * 16);
        on_disk = disk_only(&c, key);
    }
    if (!on_disk)
        fail_msg("the upserted key never went to disk");
    r = sh_cmd(&c, "get %s 4242", key);
    if (!read_ok(r, MIB / 2))
        fail_msg("get of the upserted key from disk: %s", r);
    /* the removed key stays removed through all of it */
    snprintf(key, sizeof(key), "ru-%d", a);
    assert_int_equal(sh_rc(&c, "get %s", key), CR_OBJECT_NOT_FOUND);
    /* query_key of a disk-only key: the store's size and replicas, the admin /query_key */
    int d = first_disk_only(&c, "ru-", N, 0);
    if (d == b) /* (upserted to MIB / 2) */
        d = first_disk_only(&c, "ru-", N, b + 1);
    snprintf(key, sizeof(key), "ru-%d", d);
    assert_int_equal(sh_rc(&c, "size %s", key), MIB);
    const char *reps = sh_cmd(&c, "replicas %s", key);
    char want[400];
    snprintf(want, sizeof(want), " %s/1/%d/disk", h.name, MIB);
    if (strstr(reps, want) == NULL)
        fail_msg("replicas of disk-only %s: %s (want %s)", key, reps, want);
    char body[4096], path[128];
    snprintf(path, sizeof(path), "/query_key?key=%s", key);
    assert_int_equal(sh_http_get(m.metrics_port, path, body, sizeof(body)), 200);
    if (strstr(body, "\"on_disk\":true") == NULL || strstr(body, "\"object_size\"") == NULL)
        fail_msg("/query_key of disk-only %s: %s", key, body);
    /* remove_by_regex reaches disk-only keys: exactly the one named */
    snprintf(path, sizeof(path), "^ru-%d$", d);
    assert_int_equal(sh_rc(&c, "remove_regex %s", path), 1);
    assert_int_equal(sh_rc(&c, "exist %s", key), 0);
    assert_int_equal(sh_rc(&c, "size %s", key), CR_OBJECT_NOT_FOUND);
    assert_int_equal(sh_rc(&c, "get %s", key), CR_OBJECT_NOT_FOUND);
    assert_int_equal(sh_rc(&h, "get %s", key), CR_OBJECT_NOT_FOUND);
    snprintf(path, sizeof(path), "/query_key?key=%s", key);
    assert_int_equal(sh_http_get(m.metrics_port, path, body, sizeof(body)), 404);
    int e = first_disk_only(&c, "ru-", N, 0); /* the others stay */
    if (e == b)
        e = first_disk_only(&c, "ru-", N, b + 1);
    snprintf(key, sizeof(key), "ru-%d", e);
    if (!read_ok(sh_cmd(&c, "get %s %u", key, 700u + (unsigned)e), MIB))
        fail_msg("get of %s after removing ru-%d by regex: %s", key, d, c.line);
    /* remove_all reaches the disk copies too */
    assert_true(sh_rc(&c, "remove_all force") > 0);
    snprintf(key, sizeof(key), "ru-%d", b);
    assert_int_equal(sh_rc(&c, "exist %s", key), 0);
    assert_int_equal(sh_rc(&c, "get %s", key), CR_OBJECT_NOT_FOUND);
    stop_all(&m, &h, &c);
}

static void kill_restart(void **state)
{
    (void)state;
    sh_master m;
    sh_client h, c;
    const char *const margs[] = {"--enable_offload=true", "--offload_on_evict=true",
                                 "--client_ttl=2", NULL};
    start_all(&m, &h, &c, margs);
    enum { N = 160 };
    char key[64];
    /* Fill until offloads are running, then kill the holder in the middle of them. */
    put_many(&c, "kr-", 100, 3000);
    for (int i = 100; i < N; i++) { /* no wait: the kill lands while offloads are queued */
        snprintf(key, sizeof(key), "kr-%d", i);
        if (sh_rc(&c, "put %s %d %u", key, MIB, 3000u + (unsigned)i) != 0)
            break;
    }
    long long before = sh_field(sh_cmd(&h, "offstats"), "offloads");
    sh_client_kill(&h);
    assert_true(before > 0);
    /* Restart on the same directory: complete records come back (re-announced). */
    sh_client h2;
    const char *const hargs[] = {"--segment", "64M", "--ssd", dir, "--region", "0", NULL};
    assert_int_equal(sh_client_start(&h2, m.addr, hargs), 0);
    int ok = 0;
    uint64_t until = sh_now_ms() + 15000;
    while (ok < before / 2 && sh_now_ms() < until) {
        ok = 0;
        for (int i = 0; i < N; i++) {
            snprintf(key, sizeof(key), "kr-%d", i);
            const char *r = sh_cmd(&c, "get %s %u", key, 3000u + (unsigned)i);
            long long rc = strtoll(r, NULL, 10);
            if (rc >= 0 && !read_ok(r, MIB))
                fail_msg("wrong bytes for %s after the holder's restart: %s", key, r);
            ok += rc == MIB;
        }
        if (ok < before / 2)
            sh_sleep_ms(200);
    }
    if (ok < before / 2)
        fail_msg("%d values readable after the restart; %lld were on disk before the kill", ok,
                 before);
    /* The killed holder's segment stays mounted until its client TTL (2 s)
     * lapses, and the master may place new values in its free space (the
     * early copies freed some); wait until the master has dropped it. */
    char segs[4096];
    uint64_t gone_by = sh_now_ms() + 15000;
    while (sh_http_get(m.metrics_port, "/get_all_segments", segs, sizeof(segs)) == 200 &&
           strstr(segs, h.name) != NULL && sh_now_ms() < gone_by)
        sh_sleep_ms(100);
    if (strstr(segs, h.name) != NULL)
        fail_msg("the killed holder's segment %s is still mounted (restarted: %s): %s", h.name,
                 h2.name, segs);
    /* the restarted holder serves new puts and offloads as before */
    put_many(&c, "kr2-", 80, 7000);
    for (int i = 0; i < 80; i++) {
        snprintf(key, sizeof(key), "kr2-%d", i);
        const char *r = sh_cmd(&c, "get %s %u", key, 7000u + (unsigned)i);
        if (!read_ok(r, MIB))
            fail_msg("get %s after the restart: %s", key, r);
    }
    assert_int_equal(sh_client_stop(&c), 0);
    assert_int_equal(sh_client_stop(&h2), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void compaction_gets(void **state)
{
    (void)state;
    setenv("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", "4194304", 1); /* 3 values a bucket */
    sh_master m;
    sh_client h, c, c2;
    const char *const margs[] = {"--enable_offload=true", "--offload_on_evict=true",
                                 "--default_kv_lease_ttl=300", NULL};
    start_all(&m, &h, &c, margs);
    unsetenv("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES");
    const char *const cargs[] = {"--segment", "0", "--region", "0", NULL};
    assert_int_equal(sh_client_start(&c2, m.addr, cargs), 0);
    enum { N = 120 };
    put_many(&c, "cg-", N, 3000);
    int live[N], dead[N], n_live = 0, n_dead = 0, n_disk = 0;
    char key[64];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "cg-%d", i);
        if (!disk_only(&c, key))
            continue;
        if (n_disk++ % 3 == 0) {
            live[n_live++] = i;
        } else {
            assert_int_equal(sh_rc(&c, "remove %s", key), 0);
            dead[n_dead++] = i;
        }
    }
    if (n_live < 10)
        fail_msg("only %d of %d values were on disk", n_disk, N);
    /* The holder drops the removed records (its next heartbeats) and compacts the buckets
     * they leave mostly dead, while both readers keep reading. */
    uint64_t until = sh_now_ms() + 20000;
    long long compactions = 0;
    int rounds = 0;
    for (; sh_now_ms() < until && (compactions < 2 || rounds < 3); rounds++) {
        for (int j = 0; j < n_live; j++) {
            int a = live[j], b = dead[j % n_dead];
            assert_int_equal(sh_send(&c, "get cg-%d %u", a, 3000u + (unsigned)a), 0);
            assert_int_equal(sh_send(&c2, "get cg-%d %u", b, 3000u + (unsigned)b), 0);
            const char *r = sh_recv(&c, 10000);
            if (!read_ok(r, MIB))
                fail_msg("get cg-%d during compaction: %s", a, r);
            r = sh_recv(&c2, 10000);
            if (strtoll(r, NULL, 10) != CR_OBJECT_NOT_FOUND)
                fail_msg("get of removed cg-%d during compaction: %s", b, r);
        }
        compactions = sh_field(sh_cmd(&h, "offstats"), "compactions");
    }
    if (compactions < 1)
        fail_msg("no compaction after removing %d of %d disk values: %s", n_dead, n_disk, h.line);
    fprintf(stderr, "compaction_gets: %d rounds of %d gets each from 2 readers, %lld compactions\n",
            rounds, 2 * n_live, compactions);
    /* afterwards: every survivor readable by both, the removed ones gone, disk holds only
     * the survivors */
    for (int j = 0; j < n_live; j++) {
        const char *r = sh_cmd(&c2, "get cg-%d %u", live[j], 3000u + (unsigned)live[j]);
        if (!read_ok(r, MIB))
            fail_msg("get cg-%d after compaction: %s", live[j], r);
    }
    for (int j = 0; j < n_dead; j++)
        assert_int_equal(sh_rc(&c, "get cg-%d", dead[j]), CR_OBJECT_NOT_FOUND);
    long long keys = sh_field(sh_cmd(&h, "offstats"), "keys");
    if (keys < n_live || keys > n_live + (N - n_disk))
        fail_msg("the holder's disk has %lld keys, %d survivors: %s", keys, n_live, h.line);
    assert_int_equal(sh_client_stop(&c2), 0);
    stop_all(&m, &h, &c);
}

static void batch_staging(void **state)
{
    (void)state;
    setenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", "16777216", 1); /* 16 MiB */
    sh_master m;
    sh_client h, c;
    const char *const margs[] = {"--enable_offload=true", "--offload_on_evict=true", NULL};
    start_all(&m, &h, &c, margs);
    unsetenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES");
    enum { N = 112, B = 32 };
    put_many(&c, "bs-", N, 7000);
    char key[64];
    for (int i = 0; i < B; i++) {
        snprintf(key, sizeof(key), "bs-%d", i);
        if (!disk_only_within(&c, key, 10000))
            fail_msg("%s is not disk-only after %d MiB into a 64 MiB segment", key, N);
    }
    long long staged0 = sh_field(sh_cmd(&h, "offstats"), "staged");
    double asked0 = sh_metric(&m, "master_disk_reads_total");
    uint64_t t0 = sh_now_ms();
    const char *r = sh_cmd(&c, "batch_get bs- %d %d 7000", B, MIB);
    uint64_t took = sh_now_ms() - t0;
    char want[64];
    snprintf(want, sizeof(want), "0 ok=%d miss=0 err=0 bad=0", B);
    if (strncmp(r, want, strlen(want)) != 0)
        fail_msg("batch get of %d disk-only values, 16 MiB of staging: %s (%llu ms)", B, r,
                 (unsigned long long)took);
    if (took > 20000)
        fail_msg("batch get of %d disk-only values took %llu ms", B, (unsigned long long)took);
    long long staged = sh_field(sh_cmd(&h, "offstats"), "staged") - staged0;
    if (staged < B)
        fail_msg("only %lld of %d values staged", staged, B);
    /* The values that found the staging area full waited in the holder for the reader's
     * releases: each was asked of the holder once, not again after a reader's retry found
     * it refused (the master asks again on its own after 2 s: not counted against it). */
    double asked = sh_metric(&m, "master_disk_reads_total") - asked0;
    if (took < 1500 && asked > B + B / 4)
        fail_msg("%d disk-only values were asked of the holder %.0f times (%llu ms)", B, asked,
                 (unsigned long long)took);
    stop_all(&m, &h, &c);
}

/* Values larger than the holder's whole staging area (1 MiB here) come back from disk: each is
 * staged in a buffer of its own (before, such a value was never readable once offloaded). Two
 * passes over the disk-only ones (a reader's release frees the buffer for the next), then a
 * batch get of several (one such buffer at a time: the rest wait for the master's next ask). */
static void oversized_stage(void **state)
{
    (void)state;
    setenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", "1048576", 1);
    sh_master m;
    sh_client h, c;
    const char *const margs[] = {"--enable_offload=true", "--offload_on_evict=true", NULL};
    start_all(&m, &h, &c, margs);
    unsetenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES");
    enum { N = 28, LEN = 4 * MIB };
    char key[64];
    put_many_of(&c, "ov-", N, LEN, 9000);
    int n_disk = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 4; i++) {
            snprintf(key, sizeof(key), "ov-%d", i);
            if (!disk_only_within(&c, key, 10000))
                fail_msg("%s is not disk-only after %d x 4 MiB into a 64 MiB segment", key, N);
            const char *r = sh_cmd(&c, "get %s %u", key, 9000u + (unsigned)i);
            if (!read_ok(r, LEN))
                fail_msg("pass %d: get of disk-only %s (4 MiB, 1 MiB of staging): %s", pass, key,
                         r);
            n_disk++;
        }
    }
    const char *r = sh_cmd(&c, "batch_get ov- 3 %d 9000", LEN);
    if (strncmp(r, "0 ok=3 miss=0 err=0 bad=0", 25) != 0)
        fail_msg("batch get of 3 disk-only 4 MiB values, 1 MiB of staging: %s", r);
    fprintf(stderr, "%d gets of disk-only 4 MiB values through 1 MiB of staging\n", n_disk);
    stop_all(&m, &h, &c);
}

/* Resumes a stopped holder after a delay (batch_deadline). */
typedef struct resume_job {
    pid_t pid;
    unsigned after_ms;
} resume_job;

static void *resume_main(void *arg)
{
    resume_job *j = arg;
    sh_sleep_ms(j->after_ms);
    kill(j->pid, SIGCONT);
    return NULL;
}

/* A batch get waiting for stages ends within one RPC timeout of its start. Key 0 is staged
 * late (the holder is stopped until 0.7 of the timeout), key 1 never (2 MiB, larger than
 * the holder's 1 MiB staging area): the first round returns with key 0 ready at ~0.7 T and
 * a second asks again for key 1. That round used to wait a whole RPC timeout of its own
 * (the batch took ~1.7 T); it now waits for what is left of the batch's. */
static void batch_deadline(void **state)
{
    (void)state;
    enum { T = 2000 };
    setenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", "1048576", 1);
    sh_master m;
    sh_client h, c;
    const char *const margs[] = {"--enable_offload=true", "--offload_on_evict=true", NULL};
    assert_int_equal(sh_master_start(&m, margs), 0);
    const char *const hargs[] = {"--segment", "64M", "--ssd", dir, "--region", "0", NULL};
    assert_int_equal(sh_client_start(&h, m.addr, hargs), 0);
    unsetenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES");
    const char *const cargs[] = {"--segment", "0", "--region", "0", "--rpc-timeout", "2000", NULL};
    assert_int_equal(sh_client_start(&c, m.addr, cargs), 0);
    assert_int_equal(put_retry(&c, "put", "bd-0", MIB / 2, 8100), 0);
    assert_int_equal(put_retry(&c, "put", "bd-1", 2 * MIB, 8101), 0);
    put_many(&c, "bdf-", 80, 8200);
    if (!disk_only_within(&c, "bd-0", 10000) || !disk_only_within(&c, "bd-1", 10000))
        fail_msg("bd-0 / bd-1 not disk-only after 80 MiB into a 64 MiB segment");
    assert_int_equal(ct_stop_process(h.child.proc.pid), 0);
    resume_job job = {h.child.proc.pid, T * 7 / 10};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, resume_main, &job), 0);
    uint64_t t0 = sh_now_ms();
    const char *r = sh_cmd(&c, "batch_get bd- 2 %d 8100", MIB / 2);
    uint64_t took = sh_now_ms() - t0;
    pthread_join(th, NULL);
    if (strncmp(r, "0 ok=1 ", 7) != 0)
        fail_msg("batch get of a late-staged and a never-staged key: %s (%llu ms)", r,
                 (unsigned long long)took);
    if (took > T + 500)
        fail_msg("batch get with an RPC timeout of %d ms took %llu ms", T,
                 (unsigned long long)took);
    stop_all(&m, &h, &c);
}

static void disk_full(void **state)
{
    (void)state;
    setenv("MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE", "25165824", 1); /* 24 MiB */
    sh_master m;
    sh_client h, c;
    const char *const margs[] = {"--enable_offload=true", "--offload_on_evict=true", NULL};
    start_all(&m, &h, &c, margs);
    unsetenv("MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE");
    enum { N = 160 };
    put_many(&c, "df-", N, 9000);
    const char *st = sh_cmd(&h, "offstats");
    if (sh_field(st, "bytes") > 25165824 + (1 << 20))
        fail_msg("the disk tier went past its capacity: %s", st);
    if (sh_field(st, "evicted") <= 0)
        fail_msg("no disk eviction under %d MiB: %s", N, st);
    char key[64];
    int ok = 0, gone = 0;
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "df-%d", i);
        uint64_t t0 = sh_now_ms();
        const char *r = sh_cmd(&c, "get %s %u", key, 9000u + (unsigned)i);
        long long rc = strtoll(r, NULL, 10);
        if (sh_now_ms() - t0 > 8000)
            fail_msg("get %s took %llu ms", key, (unsigned long long)(sh_now_ms() - t0));
        if (rc >= 0 && !read_ok(r, MIB))
            fail_msg("wrong bytes for %s: %s", key, r);
        ok += rc == MIB;
        gone += rc == CR_OBJECT_NOT_FOUND;
        if (rc < 0 && rc != CR_OBJECT_NOT_FOUND)
            fail_msg("get %s: %s", key, r);
    }
    if (ok < 48 || gone == 0)
        fail_msg("%d readable, %d gone of %d (64 MiB memory + 24 MiB disk): %s", ok, gone, N,
                 sh_cmd(&h, "offstats"));
    stop_all(&m, &h, &c);
}

/* --enable_offload without --offload_on_evict: every put is written behind at put end; an
 * eviction drops only the memory of a value whose disk copy has landed. */
static void write_behind(void **state)
{
    (void)state;
    sh_master m;
    sh_client h, c;
    const char *const margs[] = {"--enable_offload=true", NULL};
    start_all(&m, &h, &c, margs);
    enum { N = 128 };
    char key[64];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "wb-%d", i);
        long long rc = put_retry(&c, "put", key, MIB, 5000u + (unsigned)i);
        if (rc != 0)
            fail_msg("put %s: %lld (%s)", key, rc, c.line);
        if (i % 16 == 15) /* let the holder keep up (a writer faster than the disk loses the
                             values that were evicted before their copy landed) */
            sh_sleep_ms(100);
    }
    int ok = 0;
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "wb-%d", i);
        const char *r = sh_cmd(&c, "get %s %u", key, 5000u + (unsigned)i);
        long long rc = strtoll(r, NULL, 10);
        if (rc >= 0 && !read_ok(r, MIB))
            fail_msg("wrong bytes for %s: %s", key, r);
        if (rc < 0 && rc != CR_OBJECT_NOT_FOUND)
            fail_msg("get %s: %s", key, r);
        ok += rc == MIB;
    }
    long long offloads = sh_field(sh_cmd(&h, "offstats"), "offloads");
    if (offloads < N / 2 || ok < N * 3 / 4)
        fail_msg("%d of %d readable, %lld written behind", ok, N, offloads);
    stop_all(&m, &h, &c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(promotion, setup, teardown),
        cmocka_unit_test_setup_teardown(promotion_tenants, setup, teardown),
        cmocka_unit_test_setup_teardown(remove_upsert, setup, teardown),
        cmocka_unit_test_setup_teardown(kill_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(compaction_gets, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_staging, setup, teardown),
        cmocka_unit_test_setup_teardown(oversized_stage, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(disk_full, setup, teardown),
        cmocka_unit_test_setup_teardown(write_behind, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
