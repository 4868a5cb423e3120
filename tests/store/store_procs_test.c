/*
 * store_procs_test.c - the store between real processes: a crescent-master
 * child and crescent-test-store-client children on 127.0.0.1.
 *
 *   put_get_across_processes  put in one process, get in another: copying
 *       and zero-copy, sizes 0, 1, 4 KiB, 1 MiB+1 and 8 MiB with a 1 MiB
 *       local buffer (larger values are staged in chunks), batch, multi-part
 *       and upsert forms; every byte checked against the value's pattern
 *       and FNV-1a; batch gather/scatter (cr_store_batch_put_from_multi /
 *       _get_into_multi over 1..4 buffers: a miss among hits, a too-small
 *       destination, empty values); prefer_same_node keeps the replica in the writer's
 *       segment; the bytes moved over shared memory, never tcp.
 *   replicas_survive_writer_close  replica_num 2 placed on two other
 *       clients' segments (preferred_segments) stays readable after the
 *       writer closes; the writer's own single-replica objects vanish.
 *   killed_client_expires  a client killed with SIGKILL: its objects vanish
 *       after --client_ttl=1 while the other clients' objects stay.
 *   lease_blocks_remove  a read lease makes remove fail with
 *       CR_OBJECT_HAS_LEASE (-706) until it expires; force removes anyway.
 *   replica_locations_and_clear  cr_store_get_replicas names both
 *       segments of a replica_num 2 object (writing min(n, cap) entries);
 *       cr_store_batch_replica_clear drops one replica (the object stays
 *       readable from the other in both processes), reports a segment without
 *       a replica (-710), a missing key (-704) and a leased object (-706),
 *       removes the object with its last replica, and with no segment
 *       removes whole objects; the freed space is reused.
 *   eviction_under_pressure  8 MiB of segments, 24 MiB of puts: puts keep
 *       succeeding because old objects are evicted (or fail cleanly with
 *       -200), and every read returns the right bytes or a miss.
 *   upsert_while_reading_does_not_fill  80 upserts of one 1 MiB key into a
 *       64 MiB segment, each read by another process: every replaced
 *       version is freed once its reader gave its read back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crescent/status.h"
#include "store_harness.h"
#include "store_pattern.h"

#define MIB (1024ull * 1024ull)

static int teardown(void **state)
{
    (void)state;
    sh_kill_all();
    return 0;
}

/* "get"/"get_into" reply: "<rc> <fnv> <check>". Assert a full, correct read. */
static void assert_read_ok(const char *reply, uint64_t len, uint64_t seed, const char *what)
{
    long long rc = strtoll(reply, NULL, 10);
    char fnv[32] = "", check[32] = "";
    sscanf(reply, "%*s %31s %31s", fnv, check);
    if (rc != (long long)len || strcmp(check, "ok") != 0) {
        fprintf(stderr, "%s: expected %llu correct bytes, got '%s'\n", what,
                (unsigned long long)len, reply);
        fail();
    }
    char want[32];
    snprintf(want, sizeof(want), "%016llx", (unsigned long long)sp_fnv_of(len, seed));
    if (strcmp(fnv, want) != 0) {
        fprintf(stderr, "%s: checksum %s, expected %s\n", what, fnv, want);
        fail();
    }
}

/* A read that must not return wrong bytes: a miss or a correct value. */
static int read_is_clean(const char *reply, uint64_t len)
{
    long long rc = strtoll(reply, NULL, 10);
    if (rc == CR_OBJECT_NOT_FOUND)
        return 0;
    char check[32] = "";
    sscanf(reply, "%*s %*s %31s", check);
    if (rc == (long long)len && strcmp(check, "ok") == 0)
        return 1;
    fprintf(stderr, "unclean read: '%s'\n", reply);
    fail();
    return -1;
}

/* Wait up to 3 s for a master gauge to read `want`; its last value. A writer's idle put
 * grants (docs/WIRE.md, "Put grants": a key and a value's space each) are given back by its
 * heartbeat thread about a second after its last put. */
static double settled_metric(const sh_master *m, const char *name, double want)
{
    double v = sh_metric(m, name);
    for (int t = 0; t < 150 && v != want; t++) {
        sh_sleep_ms(20);
        v = sh_metric(m, name);
    }
    return v;
}

static void start_master(sh_master *m, const char *const *args)
{
    assert_int_equal(sh_master_start(m, args), 0);
}

static void start_client(sh_client *c, const sh_master *m, const char *const *args)
{
    assert_int_equal(sh_client_start(c, m->addr, args), 0);
}

/* ------------------------------------------------------------------------ */

static void put_get_across_processes(void **state)
{
    (void)state;
    sh_master m;
    sh_client a, b;
    start_master(&m, NULL);
    const char *const cargs[] = {"--segment", "64M", "--buffer", "1M", "--region", "32M", NULL};
    start_client(&a, &m, cargs);
    start_client(&b, &m, cargs);

    static const uint64_t sizes[] = {0, 1, 4096, MIB + 1, 8 * MIB};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t len = sizes[i], seed = 1000 + i, zseed = 2000 + i;
        char what[64];
        /* Copying put on the writer's own segment: the reader crosses processes. */
        assert_int_equal(sh_rc(&a, "put c%zu %llu %llu pref=%s", i, (unsigned long long)len,
                               (unsigned long long)seed, a.name),
                         0);
        snprintf(what, sizeof(what), "get c%zu (%llu bytes)", i, (unsigned long long)len);
        assert_read_ok(sh_cmd(&b, "get c%zu %llu", i, (unsigned long long)seed), len, seed, what);
        snprintf(what, sizeof(what), "get_into c%zu", i);
        assert_read_ok(sh_cmd(&b, "get_into c%zu %llu %llu", i, 9 * MIB, (unsigned long long)seed),
                       len, seed, what);
        if (len > 0)
            assert_int_equal(sh_rc(&b, "get_into c%zu %llu %llu", i, (unsigned long long)len - 1,
                                   (unsigned long long)seed),
                             CR_BUFFER_OVERFLOW);
        assert_int_equal(sh_rc(&b, "size c%zu", i), (long long)len);
        /* Zero-copy put (placement left to the master), both kinds of get. */
        assert_int_equal(sh_rc(&a, "put_from z%zu %llu %llu", i, (unsigned long long)len,
                               (unsigned long long)zseed),
                         0);
        snprintf(what, sizeof(what), "get z%zu", i);
        assert_read_ok(sh_cmd(&b, "get z%zu %llu", i, (unsigned long long)zseed), len, zseed, what);
        snprintf(what, sizeof(what), "get_into z%zu", i);
        assert_read_ok(sh_cmd(&b, "get_into z%zu %llu %llu off=4096", i, (unsigned long long)len,
                              (unsigned long long)zseed),
                       len, zseed, what);
        snprintf(what, sizeof(what), "writer's own get z%zu", i);
        assert_read_ok(sh_cmd(&a, "get z%zu %llu", i, (unsigned long long)zseed), len, zseed, what);
    }
    /* The other direction, a value larger than the local buffer, copying both ways. */
    assert_int_equal(sh_rc(&b, "put back 3145733 77 pref=%s", b.name), 0);
    assert_read_ok(sh_cmd(&a, "get back 77"), 3145733, 77, "get back");

    /* A miss, an empty value and an error are distinguishable. */
    assert_int_equal(sh_rc(&b, "get no-such-key"), CR_OBJECT_NOT_FOUND);
    assert_int_equal(sh_rc(&b, "exist no-such-key"), 0);
    assert_int_equal(sh_rc(&b, "exist c0"), 1);
    assert_int_equal(sh_rc(&b, "get c0"), 0);

    /* Batches: zero-copy and copying, 32 keys of 64 KiB. */
    const char *r = sh_cmd(&a, "batch_put bz 32 65536 300 from");
    assert_int_equal(strtoll(r, NULL, 10), 0);
    assert_int_equal(sh_field(r, "ok"), 32);
    r = sh_cmd(&b, "batch_get bz 32 65536 300 into");
    assert_int_equal(strtoll(r, NULL, 10), 0);
    assert_int_equal(sh_field(r, "ok"), 32);
    r = sh_cmd(&a, "batch_put bc 16 100000 400");
    assert_int_equal(sh_field(r, "ok"), 16);
    r = sh_cmd(&b, "batch_get bc 16 100000 400");
    assert_int_equal(sh_field(r, "ok"), 16);
    assert_int_equal(sh_field(r, "bad"), 0);
    r = sh_cmd(&b, "batch_exist bc 17");
    assert_int_equal(sh_field(r, "yes"), 16);
    assert_int_equal(sh_field(r, "no"), 1);

    /* Batch gather in one process, batch scatter in the other, 1..4 buffers. */
    r = sh_cmd(&a, "batch_put_multi bm 16 65536 500 2");
    assert_int_equal(strtoll(r, NULL, 10), 0);
    assert_int_equal(sh_field(r, "ok"), 16);
    for (int parts = 1; parts <= 4; parts++) {
        r = sh_cmd(&b, "batch_get_multi bm 16 65536 500 %d", parts);
        assert_int_equal(strtoll(r, NULL, 10), 0);
        assert_int_equal(sh_field(r, "ok"), 16);
        assert_int_equal(sh_field(r, "bad"), 0);
    }
    r = sh_cmd(&b, "batch_get_multi bm 17 65535 500 3"); /* one byte short, bm16 missing */
    assert_int_equal(sh_field(r, "over"), 16);
    assert_int_equal(sh_field(r, "miss"), 1);
    assert_int_equal(sh_field(r, "ok"), 0);
    r = sh_cmd(&a, "batch_put_multi be 4 0 600 3"); /* empty values: three empty parts */
    assert_int_equal(sh_field(r, "ok"), 4);
    r = sh_cmd(&b, "batch_get_multi be 4 0 600 2");
    assert_int_equal(sh_field(r, "ok"), 4);
    r = sh_cmd(&a, "batch_put_multi bm 4 4096 700 4 upsert");
    assert_int_equal(sh_field(r, "ok"), 4);
    r = sh_cmd(&b, "batch_get_multi bm 4 4096 700 1");
    assert_int_equal(sh_field(r, "ok"), 4);

    /* One object from several parts, read back scattered over several buffers. */
    assert_int_equal(sh_rc(&a, "put_parts parts 1000003 55 5"), 0);
    assert_read_ok(sh_cmd(&b, "get_multi parts 4 55"), 1000003, 55, "get_multi parts");

    /* put of an existing key keeps the old value; upsert replaces it. */
    assert_int_equal(sh_rc(&a, "put c2 4096 9999"), 0);
    assert_read_ok(sh_cmd(&b, "get c2 1002"), 4096, 1002, "get c2 after re-put");
    assert_int_equal(sh_rc(&a, "upsert c2 5000 9999"), 0);
    assert_read_ok(sh_cmd(&b, "get c2 9999"), 5000, 9999, "get c2 after upsert");
    assert_int_equal(sh_rc(&a, "upsert_from c3 70000 8888"), 0);
    assert_read_ok(sh_cmd(&b, "get c3 8888"), 70000, 8888, "get c3 after upsert_from");

    /* prefer_same_node places the replica in the writer's own segment. */
    static char body[65536];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sh_rc(&b, "put_from own%d 8192 %d same", i, 600 + i), 0);
        char path[64];
        snprintf(path, sizeof(path), "/query_key?key=own%d", i);
        assert_int_equal(sh_http_get(m.metrics_port, path, body, sizeof(body)), 200);
        assert_non_null(strstr(body, b.name));
        assert_null(strstr(body, a.name));
        assert_read_ok(sh_cmd(&a, "get own%d %d", i, 600 + i), 8192, (uint64_t)(600 + i),
                       "get own");
    }

    /* Same host, shareable memory: bytes went over shm (or memcpy), never tcp. */
    r = sh_cmd(&b, "stats");
    fprintf(stderr, "reader engine: %s\n", r);
    assert_int_equal(sh_field(r, "tcp"), 0);
    assert_true(sh_field(r, "shm") >= (long long)(9 * MIB));

    assert_int_equal(sh_rc(&a, "health"), 0);
    assert_int_equal(sh_client_stop(&a), 0);
    assert_int_equal(sh_client_stop(&b), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

/* ------------------------------------------------------------------------ */

static void replicas_survive_writer_close(void **state)
{
    (void)state;
    sh_master m;
    sh_client w, r1, r2;
    start_master(&m, NULL);
    const char *const cargs[] = {"--segment", "32M", NULL};
    start_client(&r1, &m, cargs);
    start_client(&r2, &m, cargs);
    start_client(&w, &m, cargs);

    for (int i = 0; i < 8; i++) {
        const char *op = i % 2 ? "put_from" : "put";
        assert_int_equal(sh_rc(&w, "%s rep%d %d %d r=2 pref=%s,%s", op, i, 262144 + 1000 * i,
                               100 + i, r1.name, r2.name),
                         0);
        assert_int_equal(sh_rc(&w, "put solo%d 65536 %d pref=%s", i, 200 + i, w.name), 0);
    }
    /* The master placed the two replicas on r1 and r2, not on the writer. */
    static char body[65536];
    assert_int_equal(sh_http_get(m.metrics_port, "/query_key?key=rep0", body, sizeof(body)), 200);
    assert_non_null(strstr(body, r1.name));
    assert_non_null(strstr(body, r2.name));
    assert_null(strstr(body, w.name));

    /* The writer closes (unmounts) and exits. */
    assert_int_equal(sh_rc(&w, "close"), 0);
    assert_int_equal(sh_client_stop(&w), 0);

    for (int i = 0; i < 8; i++) {
        char what[64];
        snprintf(what, sizeof(what), "r1 get rep%d", i);
        assert_read_ok(sh_cmd(&r1, "get rep%d %d", i, 100 + i), (uint64_t)(262144 + 1000 * i),
                       (uint64_t)(100 + i), what);
        snprintf(what, sizeof(what), "r2 get_into rep%d", i);
        assert_read_ok(sh_cmd(&r2, "get_into rep%d 1048576 %d", i, 100 + i),
                       (uint64_t)(262144 + 1000 * i), (uint64_t)(100 + i), what);
        /* Objects whose only replica lived on the writer are gone. */
        assert_int_equal(sh_rc(&r1, "get solo%d %d", i, 200 + i), CR_OBJECT_NOT_FOUND);
    }
    /* r1 leaves too: the replica on r2 still serves every key. */
    assert_int_equal(sh_client_stop(&r1), 0);
    for (int i = 0; i < 8; i++) {
        char what[64];
        snprintf(what, sizeof(what), "r2 alone get rep%d", i);
        assert_read_ok(sh_cmd(&r2, "get rep%d %d", i, 100 + i), (uint64_t)(262144 + 1000 * i),
                       (uint64_t)(100 + i), what);
    }
    assert_int_equal(sh_client_stop(&r2), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

/* ------------------------------------------------------------------------ */

static void killed_client_expires(void **state)
{
    (void)state;
    sh_master m;
    sh_client a, b, c;
    /* A 2 s TTL against 300 ms heartbeats: a loaded sanitizer run may stall
     * a live client's heartbeats for a second without expiring it. */
    const char *const margs[] = {"--client_ttl=2", NULL};
    start_master(&m, margs);
    const char *const cargs[] = {"--segment", "16M", "--heartbeat", "300", NULL};
    start_client(&a, &m, cargs);
    start_client(&b, &m, cargs);
    start_client(&c, &m, cargs);
    assert_int_equal(sh_field(sh_cmd(&a, "batch_put a 8 65536 10 pref=%s", a.name), "ok"), 8);
    assert_int_equal(sh_field(sh_cmd(&b, "batch_put b 8 65536 20 pref=%s", b.name), "ok"), 8);
    assert_int_equal(sh_field(sh_cmd(&c, "batch_put c 8 65536 30 pref=%s", c.name), "ok"), 8);
    assert_int_equal(sh_field(sh_cmd(&b, "batch_get a 8 65536 10"), "ok"), 8);
    /* The segments' owners survive several heartbeats beyond the TTL. */
    sh_sleep_ms(3000);
    assert_int_equal(sh_field(sh_cmd(&b, "batch_exist a 8"), "yes"), 8);

    sh_client_kill(&a);
    uint64_t t0 = sh_now_ms();
    long long e = 1;
    while (sh_now_ms() - t0 < 15000 && (e = sh_rc(&b, "exist a0")) == 1)
        sh_sleep_ms(100);
    fprintf(stderr, "killed client's objects vanished after %llu ms\n",
            (unsigned long long)(sh_now_ms() - t0));
    assert_int_equal(e, 0);
    const char *r = sh_cmd(&b, "batch_exist a 8");
    assert_int_equal(sh_field(r, "no"), 8);
    assert_int_equal(sh_rc(&c, "get a3 13"), CR_OBJECT_NOT_FOUND);
    /* The other clients' objects stay, byte for byte. */
    r = sh_cmd(&b, "batch_get c 8 65536 30 into");
    assert_int_equal(sh_field(r, "ok"), 8);
    r = sh_cmd(&c, "batch_get b 8 65536 20");
    assert_int_equal(sh_field(r, "ok"), 8);
    assert_true(sh_metric(&m, "master_active_clients") == 2);
    assert_true(sh_metric(&m, "master_clients_expired_total") >= 1);
    /* Writes keep working. */
    assert_int_equal(sh_rc(&b, "put after 4096 40"), 0);
    assert_read_ok(sh_cmd(&c, "get after 40"), 4096, 40, "get after");
    assert_int_equal(sh_client_stop(&b), 0);
    assert_int_equal(sh_client_stop(&c), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

/* ------------------------------------------------------------------------ */

static void lease_blocks_remove(void **state)
{
    (void)state;
    sh_master m;
    sh_client a, b;
    const char *const margs[] = {"--default_kv_lease_ttl=2000", NULL};
    start_master(&m, margs);
    start_client(&a, &m, NULL);
    start_client(&b, &m, NULL);
    assert_int_equal(sh_rc(&a, "put L 4096 7"), 0);
    assert_int_equal(sh_rc(&a, "put M 4096 8"), 0);
    assert_int_equal(sh_field(sh_cmd(&a, "batch_put N 4 4096 9"), "ok"), 4);
    /* An object nobody read removes fine without force. */
    assert_int_equal(sh_rc(&a, "remove M"), 0);
    assert_int_equal(sh_rc(&a, "exist M"), 0);

    assert_read_ok(sh_cmd(&b, "get L 7"), 4096, 7, "get L");
    assert_int_equal(sh_field(sh_cmd(&b, "batch_get N 4 4096 9 into"), "ok"), 4);
    assert_int_equal(sh_rc(&b, "remove L"), CR_OBJECT_HAS_LEASE);
    assert_int_equal(sh_rc(&a, "remove L"), CR_OBJECT_HAS_LEASE);
    const char *r = sh_cmd(&a, "batch_remove N 4");
    assert_int_equal(sh_field(r, "fail"), 4);
    assert_int_equal(sh_field(r, "first"), CR_OBJECT_HAS_LEASE);
    /* exist does not take or extend a lease, and the object is still there. */
    assert_int_equal(sh_rc(&a, "exist L"), 1);
    assert_read_ok(sh_cmd(&a, "get L 7"), 4096, 7, "get L again");
    assert_int_equal(sh_rc(&a, "remove L force"), 0);
    assert_int_equal(sh_rc(&b, "exist L"), 0);
    assert_int_equal(sh_rc(&b, "get L"), CR_OBJECT_NOT_FOUND);
    /* Once the lease runs out, remove works without force. */
    sh_sleep_ms(2300);
    r = sh_cmd(&a, "batch_remove N 4");
    assert_int_equal(sh_field(r, "ok"), 4);
    assert_int_equal(sh_field(sh_cmd(&b, "batch_exist N 4"), "no"), 4);
    assert_int_equal(sh_client_stop(&a), 0);
    assert_int_equal(sh_client_stop(&b), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

/* ------------------------------------------------------------------------ */

/*
 * Issue 11 item 8: upserting one 1 MiB key over and over while another
 * process reads it used to fill a 64 MiB segment after 64 rounds
 * (NO_AVAILABLE_HANDLE with key_count 1): every replaced version was held
 * for a whole lease TTL. Readers now give their reads back, so each old
 * version is freed once its reader is done; /metrics shows the deferred
 * bytes (none left once the readers are done).
 */
static void upsert_while_reading_does_not_fill(void **state)
{
    (void)state;
    sh_master m;
    sh_client w, r;
    start_master(&m, NULL); /* the default 10 s lease: far longer than the loop */
    const char *const wargs[] = {"--segment", "64M", NULL};
    const char *const rargs[] = {"--segment", "0", NULL};
    start_client(&w, &m, wargs);
    start_client(&r, &m, rargs);
    for (int i = 0; i < 80; i++) { /* 64 used to fill the segment */
        long long rc = sh_rc(&w, "upsert hot0 %d %d", 1 << 20, 1000 + i);
        if (rc != 0)
            fail_msg("upsert %d of one key failed: %lld (%s)", i, rc, w.line);
        if (i % 2 == 0)
            assert_read_ok(sh_cmd(&r, "get hot0 %d", 1000 + i), 1 << 20, (uint64_t)(1000 + i),
                           "reader");
        else /* batches give their reads back too */
            assert_int_equal(sh_field(sh_cmd(&r, "batch_get hot 1 %d %d", 1 << 20, 1000 + i), "ok"),
                             1);
    }
    assert_true(settled_metric(&m, "master_key_count", 1) == 1);
    /* The last reads' releases are notices on the readers' connections:
     * give them a moment. */
    double deferred = -1;
    for (int t = 0; t < 100 && deferred != 0; t++) {
        deferred = sh_metric(&m, "master_deferred_free_bytes");
        if (deferred != 0)
            sh_sleep_ms(20);
    }
    assert_true(deferred == 0);
    assert_true(settled_metric(&m, "master_allocated_bytes", 1 << 20) == (double)(1 << 20));
    assert_int_equal(sh_client_stop(&w), 0);
    assert_int_equal(sh_client_stop(&r), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

/*
 * A reader's reads go back to the master with its next call, or within a
 * heartbeat tick (~20 ms) when it makes none: here the reader reads once and
 * then stays idle, and the version an upsert replaced meanwhile is freed
 * long before its 10 s lease would have ended. In a tenant too: the notice
 * that gives the read back names the reader's tenant, as its get did (sent
 * untenanted it found no such key and the read stayed leased for the TTL).
 */
static void reads_given_back_when_idle(const char *tenant)
{
    sh_master m;
    sh_client w, r;
    start_master(&m, NULL); /* the default 10 s lease */
    const char *const wargs[] = {"--segment", "16M", "--tenant", tenant, NULL};
    const char *const rargs[] = {"--segment", "0", "--tenant", tenant, NULL};
    start_client(&w, &m, wargs);
    start_client(&r, &m, rargs);
    assert_int_equal(sh_rc(&w, "upsert idle0 %d %d", 1 << 20, 1), 0);
    assert_read_ok(sh_cmd(&r, "get idle0 %d", 1), 1 << 20, 1, "reader");
    uint64_t t0 = sh_now_ms();
    assert_int_equal(sh_rc(&w, "upsert idle0 %d %d", 1 << 20, 2), 0);
    double deferred = -1;
    while (deferred != 0 && sh_now_ms() - t0 < 1000) {
        deferred = sh_metric(&m, "master_deferred_free_bytes");
        if (deferred != 0)
            sh_sleep_ms(10);
    }
    print_message("the idle reader's read was given back %llu ms after the upsert\n",
                  (unsigned long long)(sh_now_ms() - t0));
    assert_true(deferred == 0);
    assert_true(settled_metric(&m, "master_allocated_bytes", 1 << 20) == (double)(1 << 20));
    assert_read_ok(sh_cmd(&r, "get idle0 %d", 2), 1 << 20, 2, "reader, the new version");
    assert_int_equal(sh_client_stop(&w), 0);
    assert_int_equal(sh_client_stop(&r), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

static void idle_reader_gives_reads_back(void **state)
{
    (void)state;
    reads_given_back_when_idle("default");
}

static void tenant_reader_gives_reads_back(void **state)
{
    (void)state;
    reads_given_back_when_idle("team-a");
}

/* "<rc> seg/c/size ..." contains "<name>/1/<size>" as a whole token. */
static bool has_replica(const char *reply, const char *name, unsigned long long size)
{
    char tok[400];
    snprintf(tok, sizeof(tok), " %s/1/%llu", name, size);
    const char *p = strstr(reply, tok);
    return p != NULL && (p[strlen(tok)] == '\0' || p[strlen(tok)] == ' ');
}

static void replica_locations_and_clear(void **state)
{
    (void)state;
    sh_master m;
    sh_client a, b;
    const char *const margs[] = {"--default_kv_lease_ttl=300ms", NULL};
    start_master(&m, margs);
    const char *const cargs[] = {"--segment", "16M", NULL};
    start_client(&a, &m, cargs);
    start_client(&b, &m, cargs);

    /* Where the replicas are: both segments, complete, with the value size. */
    assert_int_equal(sh_rc(&a, "put two 65536 11 r=2 pref=%s,%s", a.name, b.name), 0);
    const char *r = sh_cmd(&b, "replicas two");
    assert_int_equal(strtoll(r, NULL, 10), 2);
    assert_true(has_replica(r, a.name, 65536));
    assert_true(has_replica(r, b.name, 65536));
    r = sh_cmd(&a, "replicas two 1"); /* the count, but one entry only */
    assert_int_equal(strtoll(r, NULL, 10), 2);
    assert_int_equal(has_replica(r, a.name, 65536) + has_replica(r, b.name, 65536), 1);
    assert_int_equal(sh_rc(&a, "replicas two 0"), 2);
    assert_int_equal(sh_rc(&a, "replicas missing"), CR_OBJECT_NOT_FOUND);

    /* Asking granted no lease. Drop b's replica: the object stays readable
     * (from a's segment) in both processes. */
    r = sh_cmd(&a, "replica_clear %s two,missing", b.name);
    assert_int_equal(strtoll(r, NULL, 10), 0);
    assert_non_null(strstr(r, "r=0,-704"));
    r = sh_cmd(&a, "replicas two");
    assert_int_equal(strtoll(r, NULL, 10), 1);
    assert_true(has_replica(r, a.name, 65536));
    r = sh_cmd(&b, "replica_clear %s two", b.name);
    assert_non_null(strstr(r, "r=-710"));
    r = sh_cmd(&b, "replica_clear no-such-segment:1 two");
    assert_non_null(strstr(r, "r=-710"));
    assert_read_ok(sh_cmd(&b, "get two 11"), 65536, 11, "get two after dropping b's replica");
    /* That read holds a lease: a's replica is not dropped until it ends. */
    r = sh_cmd(&b, "replica_clear %s two", a.name);
    assert_non_null(strstr(r, "r=-706"));
    assert_read_ok(sh_cmd(&a, "get two 11"), 65536, 11, "get two while leased");
    sh_sleep_ms(400);
    /* The last replica: the object is gone. */
    r = sh_cmd(&b, "replica_clear %s two", a.name);
    assert_non_null(strstr(r, "r=0"));
    assert_int_equal(sh_rc(&a, "exist two"), 0);
    assert_int_equal(sh_rc(&b, "replicas two"), CR_OBJECT_NOT_FOUND);

    /* No segment: whole objects go, wherever their replicas are. */
    assert_int_equal(sh_rc(&a, "put x0 4096 21 pref=%s", b.name), 0);
    assert_int_equal(sh_rc(&a, "put x1 4096 22 r=2"), 0);
    r = sh_cmd(&b, "replica_clear - x0,x1,x2");
    assert_int_equal(strtoll(r, NULL, 10), 0);
    assert_non_null(strstr(r, "r=0,0,-704"));
    assert_int_equal(sh_field(sh_cmd(&a, "batch_exist x 3"), "no"), 3);
    /* The space came back: a put of most of b's segment fits there. */
    assert_int_equal(sh_rc(&a, "put big 12582912 23 pref=%s", b.name), 0);
    r = sh_cmd(&a, "replicas big");
    assert_true(has_replica(r, b.name, 12582912));

    assert_true(sh_metric(&m, "master_requests_total{op=\"batch_replica_clear\"}") == 6);
    assert_int_equal(sh_client_stop(&a), 0);
    assert_int_equal(sh_client_stop(&b), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

/* ------------------------------------------------------------------------ */

#define EV_KEYS 96
#define EV_SIZE (256 * 1024)

static void eviction_under_pressure(void **state)
{
    (void)state;
    sh_master m;
    sh_client a, b;
    const char *const margs[] = {"--default_kv_lease_ttl=300", NULL};
    start_master(&m, margs);
    const char *const cargs[] = {"--segment", "4M", "--buffer", "1M", NULL};
    start_client(&a, &m, cargs);
    start_client(&b, &m, cargs);

    int ok = 0, full = 0;
    for (int i = 0; i < EV_KEYS; i++) {
        long long rc = sh_rc(&a, "%s e%d %d %d", i % 2 ? "put_from" : "put", i, EV_SIZE, 5000 + i);
        if (rc == 0)
            ok++;
        else if (rc == CR_NO_AVAILABLE_HANDLE)
            full++;
        else
            fail_msg("put e%d: unexpected %lld", i, rc);
        if (i % 8 == 7) { /* read the newest key while the pressure lasts */
            read_is_clean(sh_cmd(&b, "get e%d %d", i, 5000 + i), EV_SIZE);
        }
    }
    fprintf(stderr, "eviction: %d puts succeeded, %d refused with -200 (capacity 32 values)\n", ok,
            full);
    /* 8 MiB of segments hold 32 values: without eviction at most 32 puts succeed. */
    assert_true(ok > 40);
    assert_true(sh_metric(&m, "master_evicted_keys_total") > 0);

    int present = 0;
    for (int i = 0; i < EV_KEYS; i++) {
        present += read_is_clean(sh_cmd(&b, "get e%d %d", i, 5000 + i), EV_SIZE);
        read_is_clean(sh_cmd(&a, "get_into e%d %d %d", i, EV_SIZE, 5000 + i), EV_SIZE);
    }
    fprintf(stderr, "eviction: %d of %d keys still present\n", present, EV_KEYS);
    assert_true(present > 0 && present <= 32);
    assert_int_equal(sh_client_stop(&a), 0);
    assert_int_equal(sh_client_stop(&b), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(put_get_across_processes, teardown),
        cmocka_unit_test_teardown(replicas_survive_writer_close, teardown),
        cmocka_unit_test_teardown(killed_client_expires, teardown),
        cmocka_unit_test_teardown(lease_blocks_remove, teardown),
        cmocka_unit_test_teardown(replica_locations_and_clear, teardown),
        cmocka_unit_test_teardown(eviction_under_pressure, teardown),
        cmocka_unit_test_teardown(upsert_while_reading_does_not_fill, teardown),
        cmocka_unit_test_teardown(idle_reader_gives_reads_back, teardown),
        cmocka_unit_test_teardown(tenant_reader_gives_reads_back, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
