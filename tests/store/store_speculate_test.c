/*
 * store_speculate_test.c - speculative single gets (store/get.c,
 * store/loc_cache.c) against a crescent-master child, a holder and a reader
 * cr_store in this process:
 *
 *   kept_when_confirmed_tcp / _auto  the second get_into of an unchanged key
 *       reads its cached location while asking and keeps the bytes, and so
 *       does a copying get (the counters say so; every byte checked).
 *   writer_reads_its_own_put  a client that put a value reads it speculatively
 *       from its first get on (PUT_START's replica, PUT_END's version), and
 *       does not keep what it read once another client replaced the value.
 *   replaced_value_not_kept  after an upsert, and after a remove and a put
 *       of the same size (which may land on the same address), the reader's
 *       cached location is read but not kept: the new bytes are returned;
 *       a larger new value is CR_BUFFER_OVERFLOW, never the old bytes; a
 *       copying get of a value whose size changed returns the new value.
 *   concurrent_upserts_never_torn  a writer thread upserts (and every tenth
 *       round removes and puts) one key while a reader thread gets it in a
 *       loop: every value read is one whole version (its seed in the first
 *       8 bytes, the pattern of that seed after it).
 *   small_values  4 KiB values are read speculatively by default and with
 *       CRESCENT_GET_SPECULATE=all, and not with =large (under
 *       CRC_SPECULATE_MIN).
 *   env_off  CRESCENT_GET_SPECULATE=0 turns it off; another value fails
 *       setup with CR_INVALID_PARAMS.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crescent/store.h"
#include "store_harness.h"
#include "store_pattern.h"

static sh_master master;

static int setup(void **state)
{
    (void)state;
    return sh_master_start(&master, NULL);
}

static int teardown(void **state)
{
    (void)state;
    int rc = sh_master_stop(&master);
    sh_kill_all();
    return rc;
}

static cr_store *open_store(const char *protocol, uint64_t segment)
{
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = master.addr;
    cfg.global_segment_size = segment;
    cfg.local_buffer_size = 4 << 20;
    cfg.protocol = protocol;
    cr_store *s = NULL;
    int rc = cr_store_setup(&cfg, &s);
    if (rc != 0)
        fail_msg("store setup (%s): %d %s", protocol, rc, cr_last_error_message());
    return s;
}

static cr_store_get_stats stats(cr_store *s)
{
    cr_store_get_stats st;
    assert_int_equal(cr_store_get_stats_get(s, &st), 0);
    return st;
}

static void put_seed(cr_store *w, const char *key, size_t len, uint64_t seed, bool upsert)
{
    uint8_t *v = malloc(len);
    assert_non_null(v);
    sp_fill(v, len, seed);
    int rc = upsert ? cr_store_upsert(w, key, v, len, NULL) : cr_store_put(w, key, v, len, NULL);
    free(v);
    if (rc != 0)
        fail_msg("%s %s: %d %s", upsert ? "upsert" : "put", key, rc, cr_last_error_message());
}

static void get_check(cr_store *r, const char *key, uint8_t *buf, size_t cap, size_t len,
                      uint64_t seed)
{
    memset(buf, 0x5a, cap);
    int64_t got = cr_store_get_into(r, key, buf, cap);
    if (got != (int64_t)len)
        fail_msg("get_into %s: %lld (want %zu) %s", key, (long long)got, len,
                 cr_last_error_message());
    int64_t bad = sp_check(buf, len, seed);
    if (bad >= 0)
        fail_msg("get_into %s: byte %lld is not seed %llu's", key, (long long)bad,
                 (unsigned long long)seed);
}

/* A copying get of key: len bytes of seed's value. */
static void copy_check(cr_store *r, const char *key, size_t len, uint64_t seed)
{
    void *v = NULL;
    int64_t got = cr_store_get(r, key, &v);
    if (got != (int64_t)len)
        fail_msg("get %s: %lld (want %zu) %s", key, (long long)got, len, cr_last_error_message());
    int64_t bad = sp_check(v, len, seed);
    free(v);
    if (bad >= 0)
        fail_msg("get %s: byte %lld is not seed %llu's", key, (long long)bad,
                 (unsigned long long)seed);
}

static void kept_when_confirmed(const char *protocol)
{
    cr_store *holder = open_store(protocol, 32 << 20), *reader = open_store(protocol, 0);
    size_t len = (1 << 20) + 5, cap = 2 << 20;
    uint8_t *buf = aligned_alloc(4096, cap);
    assert_non_null(buf);
    assert_int_equal(cr_store_register_buffer(reader, buf, cap), 0);
    char key[64];
    snprintf(key, sizeof(key), "spec-kept-%s", protocol);
    put_seed(holder, key, len, 1, false);

    cr_store_get_stats st0 = stats(reader);
    assert_true(st0.speculating);
    get_check(reader, key, buf, cap, len, 1); /* learns the location */
    cr_store_get_stats st1 = stats(reader);
    assert_true(st1.speculative_reads == st0.speculative_reads);
    for (int i = 0; i < 3; i++)
        get_check(reader, key, buf, cap, len, 1);
    cr_store_get_stats st2 = stats(reader);
    assert_true(st2.speculative_reads == st1.speculative_reads + 3);
    assert_true(st2.speculative_hits == st1.speculative_hits + 3);
    /* the copying get reads straight into the value it allocates */
    copy_check(reader, key, len, 1);
    copy_check(reader, key, len, 1);
    cr_store_get_stats st3 = stats(reader);
    assert_true(st3.speculative_reads == st2.speculative_reads + 2);
    assert_true(st3.speculative_hits == st2.speculative_hits + 2);

    assert_int_equal(cr_store_unregister_buffer(reader, buf), 0);
    free(buf);
    cr_store_destroy(reader);
    cr_store_destroy(holder);
}

static void kept_when_confirmed_tcp(void **state)
{
    (void)state;
    kept_when_confirmed("tcp");
}

static void kept_when_confirmed_auto(void **state)
{
    (void)state;
    kept_when_confirmed("auto");
}

/* The writer learns the location from its own put (PUT_START's replica, PUT_END's
 * version): its first get already reads while it asks; another client's upsert
 * in between is noticed (read, not kept). */
static void writer_reads_its_own_put(void **state)
{
    (void)state;
    cr_store *holder = open_store("tcp", 32 << 20), *writer = open_store("tcp", 0),
             *other = open_store("tcp", 0);
    size_t len = (1 << 20) + 5, cap = 2 << 20;
    uint8_t *buf = aligned_alloc(4096, cap);
    assert_non_null(buf);
    assert_int_equal(cr_store_register_buffer(writer, buf, cap), 0);
    const char *key = "spec-own-put";
    cr_store_get_stats st0 = stats(writer);
    put_seed(writer, key, len, 7, false);
    get_check(writer, key, buf, cap, len, 7); /* the first get: speculative, kept */
    cr_store_get_stats st1 = stats(writer);
    assert_true(st1.speculative_reads == st0.speculative_reads + 1);
    assert_true(st1.speculative_hits == st0.speculative_hits + 1);

    put_seed(other, key, len, 8, true); /* replaced by someone else */
    get_check(writer, key, buf, cap, len, 8);
    cr_store_get_stats st2 = stats(writer);
    assert_true(st2.speculative_reads == st1.speculative_reads + 1);
    assert_true(st2.speculative_hits == st1.speculative_hits);

    put_seed(writer, key, len, 9, true); /* the writer's own upsert */
    copy_check(writer, key, len, 9);
    cr_store_get_stats st3 = stats(writer);
    assert_true(st3.speculative_reads == st2.speculative_reads + 1);
    assert_true(st3.speculative_hits == st2.speculative_hits + 1);

    put_seed(writer, "spec-own-small", 4096, 10, false); /* small values too (default) */
    get_check(writer, "spec-own-small", buf, cap, 4096, 10);
    cr_store_get_stats st4 = stats(writer);
    assert_true(st4.speculative_reads == st3.speculative_reads + 1);
    assert_true(st4.speculative_hits == st3.speculative_hits + 1);

    assert_int_equal(cr_store_unregister_buffer(writer, buf), 0);
    free(buf);
    cr_store_destroy(other);
    cr_store_destroy(writer);
    cr_store_destroy(holder);
}

static void replaced_value_not_kept(void **state)
{
    (void)state;
    cr_store *holder = open_store("tcp", 32 << 20), *reader = open_store("tcp", 0);
    size_t len = 256 << 10, cap = 512 << 10;
    uint8_t *buf = aligned_alloc(4096, cap);
    assert_non_null(buf);
    assert_int_equal(cr_store_register_buffer(reader, buf, cap), 0);
    const char *key = "spec-replaced";
    put_seed(holder, key, len, 1, false);
    get_check(reader, key, buf, cap, len, 1);
    get_check(reader, key, buf, cap, len, 1);
    cr_store_get_stats st0 = stats(reader);
    assert_true(st0.speculative_hits >= 1);

    /* an upsert: a new version, elsewhere */
    put_seed(holder, key, len, 2, true);
    get_check(reader, key, buf, cap, len, 2);
    cr_store_get_stats st1 = stats(reader);
    assert_true(st1.speculative_reads == st0.speculative_reads + 1);
    assert_true(st1.speculative_hits == st0.speculative_hits);
    get_check(reader, key, buf, cap, len, 2); /* the new location is kept again */
    cr_store_get_stats st2 = stats(reader);
    assert_true(st2.speculative_hits == st1.speculative_hits + 1);

    /* remove, then a put of the same size: the allocator may hand out the same address,
     * but the version is new */
    assert_int_equal(cr_store_remove(holder, key, true), 0);
    put_seed(holder, key, len, 3, false);
    get_check(reader, key, buf, cap, len, 3);
    cr_store_get_stats st3 = stats(reader);
    assert_true(st3.speculative_reads == st2.speculative_reads + 1);
    assert_true(st3.speculative_hits == st2.speculative_hits);

    /* a copying get of a value that changed size: the value allocated for the cached size
     * is given back, the new one read whole */
    put_seed(holder, key, len / 2, 6, true);
    copy_check(reader, key, len / 2, 6);
    cr_store_get_stats st4 = stats(reader);
    assert_true(st4.speculative_reads == st3.speculative_reads + 1);
    assert_true(st4.speculative_hits == st3.speculative_hits);
    put_seed(holder, key, len, 3, true);

    /* a value larger than the buffer: overflow, never the old bytes reported as the value */
    get_check(reader, key, buf, cap, len, 3);
    put_seed(holder, key, cap + 4096, 4, true);
    assert_int_equal(cr_store_get_into(reader, key, buf, cap), CR_BUFFER_OVERFLOW);

    /* a removed key: not found */
    assert_int_equal(cr_store_remove(holder, key, true), 0);
    assert_int_equal(cr_store_get_into(reader, key, buf, cap), CR_OBJECT_NOT_FOUND);

    assert_int_equal(cr_store_unregister_buffer(reader, buf), 0);
    free(buf);
    cr_store_destroy(reader);
    cr_store_destroy(holder);
}

/* --- a writer and a reader on one key ----------------------------------------------------- */

#define RACE_LEN    (128u << 10)
#define RACE_ROUNDS 500

typedef struct race {
    cr_store *holder, *reader;
    atomic_bool done;
    atomic_int write_failures;
    char write_error[256];
    uint64_t reads, torn;
} race;

/* A value: its seed (8 bytes, little-endian), then the pattern of that seed. */
static void race_fill(uint8_t *v, uint64_t seed)
{
    for (int b = 0; b < 8; b++)
        v[b] = (uint8_t)(seed >> (8 * b));
    sp_fill(v + 8, RACE_LEN - 8, seed);
}

static void *race_writer(void *arg)
{
    race *r = arg;
    uint8_t *v = malloc(RACE_LEN);
    for (uint64_t i = 1; v != NULL && i <= RACE_ROUNDS; i++) {
        race_fill(v, i);
        int rc;
        if (i % 10 == 0) {
            rc = cr_store_remove(r->holder, "spec-race", true);
            if (rc == 0)
                rc = cr_store_put(r->holder, "spec-race", v, RACE_LEN, NULL);
        } else {
            rc = cr_store_upsert(r->holder, "spec-race", v, RACE_LEN, NULL);
        }
        if (rc != 0 && atomic_fetch_add(&r->write_failures, 1) == 0)
            snprintf(r->write_error, sizeof(r->write_error), "round %llu: %d %s",
                     (unsigned long long)i, rc, cr_last_error_message());
    }
    free(v);
    atomic_store(&r->done, true);
    return NULL;
}

static void concurrent_upserts_never_torn(void **state)
{
    (void)state;
    race r = {.holder = open_store("tcp", 32 << 20), .reader = open_store("tcp", 0)};
    uint8_t *buf = aligned_alloc(4096, RACE_LEN);
    assert_non_null(buf);
    assert_int_equal(cr_store_register_buffer(r.reader, buf, RACE_LEN), 0);
    uint8_t *first = malloc(RACE_LEN);
    assert_non_null(first);
    race_fill(first, 0);
    assert_int_equal(cr_store_put(r.holder, "spec-race", first, RACE_LEN, NULL), 0);
    free(first);
    cr_store_get_stats st0 = stats(r.reader);

    pthread_t w;
    assert_int_equal(pthread_create(&w, NULL, race_writer, &r), 0);
    while (!atomic_load(&r.done)) {
        int64_t got = cr_store_get_into(r.reader, "spec-race", buf, RACE_LEN);
        if (got != (int64_t)RACE_LEN)
            continue; /* (a remove and put in between: not found, or not ready yet) */
        uint64_t seed = 0;
        for (int b = 0; b < 8; b++)
            seed |= (uint64_t)buf[b] << (8 * b);
        r.reads++;
        if (seed > RACE_ROUNDS || sp_check(buf + 8, RACE_LEN - 8, seed) >= 0)
            r.torn++;
    }
    pthread_join(w, NULL);
    cr_store_get_stats st1 = stats(r.reader);
    if (atomic_load(&r.write_failures) > 0)
        fail_msg("%d writes failed, first %s", atomic_load(&r.write_failures), r.write_error);
    if (r.torn > 0)
        fail_msg("%llu of %llu reads returned bytes of no single version",
                 (unsigned long long)r.torn, (unsigned long long)r.reads);
    assert_true(r.reads > 0);
    /* (a reader starved by a loaded machine may read only once: then nothing was cached) */
    assert_true(r.reads < 3 || st1.speculative_reads > st0.speculative_reads);
    print_message("concurrent: %llu reads, %llu speculative, %llu kept\n",
                  (unsigned long long)r.reads,
                  (unsigned long long)(st1.speculative_reads - st0.speculative_reads),
                  (unsigned long long)(st1.speculative_hits - st0.speculative_hits));

    assert_int_equal(cr_store_unregister_buffer(r.reader, buf), 0);
    free(buf);
    cr_store_destroy(r.reader);
    cr_store_destroy(r.holder);
}

static void small_values(void **state)
{
    (void)state;
    cr_store *holder = open_store("tcp", 32 << 20);
    size_t len = 4096;
    uint8_t *buf = aligned_alloc(4096, len);
    assert_non_null(buf);
    put_seed(holder, "spec-small", len, 5, false);
    const char *modes[] = {NULL, "all", "large"};
    for (int m = 0; m < 3; m++) {
        if (modes[m] != NULL)
            setenv("CRESCENT_GET_SPECULATE", modes[m], 1);
        cr_store *reader = open_store("tcp", 0);
        unsetenv("CRESCENT_GET_SPECULATE");
        assert_int_equal(cr_store_register_buffer(reader, buf, len), 0);
        for (int i = 0; i < 3; i++)
            get_check(reader, "spec-small", buf, len, len, 5);
        cr_store_get_stats st = stats(reader);
        bool small = modes[m] == NULL || strcmp(modes[m], "all") == 0;
        assert_true(st.speculating);
        assert_true(st.speculative_reads == (small ? 2u : 0u));
        assert_true(st.speculative_hits == (small ? 2u : 0u));
        assert_int_equal(cr_store_unregister_buffer(reader, buf), 0);
        cr_store_destroy(reader);
    }
    free(buf);
    cr_store_destroy(holder);
}

static void env_off(void **state)
{
    (void)state;
    cr_store *holder = open_store("tcp", 32 << 20);
    setenv("CRESCENT_GET_SPECULATE", "0", 1);
    cr_store *reader = open_store("tcp", 0);
    size_t len = 64 << 10;
    uint8_t *buf = aligned_alloc(4096, len);
    assert_non_null(buf);
    assert_int_equal(cr_store_register_buffer(reader, buf, len), 0);
    put_seed(holder, "spec-off", len, 9, false);
    for (int i = 0; i < 3; i++)
        get_check(reader, "spec-off", buf, len, len, 9);
    cr_store_get_stats st = stats(reader);
    assert_false(st.speculating);
    assert_true(st.speculative_reads == 0 && st.speculative_hits == 0);
    assert_int_equal(cr_store_unregister_buffer(reader, buf), 0);
    free(buf);
    cr_store_destroy(reader);

    setenv("CRESCENT_GET_SPECULATE", "sometimes", 1);
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = master.addr;
    cfg.protocol = "tcp";
    cr_store *bad = NULL;
    assert_int_equal(cr_store_setup(&cfg, &bad), CR_INVALID_PARAMS);
    assert_null(bad);
    assert_non_null(strstr(cr_last_error_message(), "CRESCENT_GET_SPECULATE"));
    unsetenv("CRESCENT_GET_SPECULATE");
    cr_store_destroy(holder);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kept_when_confirmed_tcp),
        cmocka_unit_test(kept_when_confirmed_auto),
        cmocka_unit_test(writer_reads_its_own_put),
        cmocka_unit_test(replaced_value_not_kept),
        cmocka_unit_test(concurrent_upserts_never_torn),
        cmocka_unit_test(small_values),
        cmocka_unit_test(env_off),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
