/*
 * compact_test.c - compaction: a mostly-dead bucket is rewritten and its
 * file removed with every live value intact (now and after a reopen);
 * tombstones that still cover older records are carried forward; the
 * background thread compacts on its own; and gets running on other threads
 * during repeated overwrites, removes and compactions return either the
 * exact bytes of a version that was put or a clean miss (for keys that were
 * removed), never anything else.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "disk/disk.h"
#include "disk/disk_test_fixture.h"

typedef tu_store fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    tu_store_init(f, "compact");
    f->cfg.bucket_size_limit = 8u << 20;
    f->cfg.bucket_keys_limit = 10;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    tu_store_fini(*state);
    free(*state);
    return 0;
}

static uint64_t len_of(uint64_t id)
{
    return id % 3 == 0 ? 100000 : 3000 + id * 17;
}

static int put_v(crf_store *s, uint64_t id, uint64_t version)
{
    return tu_put(s, id, version, len_of(id), &version, sizeof(version));
}

static int probe(crf_store *s, uint64_t id, uint64_t version)
{
    return tu_probe(s, id, version, len_of(id));
}

static int count_buckets(fixture *f)
{
    char names[1][64];
    return tu_buckets(f->dir, names, 1);
}

static void test_compact_dead_bucket(void **state)
{
    fixture *f = *state;
    tu_store_open(f);
    for (uint64_t i = 0; i < 30; i++)
        assert_int_equal(put_v(f->s, i, 1), 0); /* buckets {0..9} {10..19} {20..29} */
    for (uint64_t i = 0; i < 8; i++)
        assert_int_equal(put_v(f->s, i, 2), 0); /* first bucket 80% dead */
    assert_int_equal(crf_seal(f->s), 0);
    int before = count_buckets(f);
    assert_int_equal(crf_compact(f->s, 10, false), 1);
    assert_int_equal(count_buckets(f), before); /* one removed, one new active... sealed below */
    crf_stats st;
    crf_get_stats(f->s, &st);
    assert_int_equal(st.compactions, 1);
    assert_int_equal(st.compacted_records, 2);
    for (uint64_t i = 0; i < 30; i++)
        assert_int_equal(probe(f->s, i, i < 8 ? 2 : 1), 1);
    assert_int_equal(crf_compact(f->s, 10, false), 0); /* nothing left over the ratio */
    tu_store_reopen(f);
    for (uint64_t i = 0; i < 30; i++)
        assert_int_equal(probe(f->s, i, i < 8 ? 2 : 1), 1);
    crf_get_stats(f->s, &st);
    assert_int_equal(st.keys, 30);
}

/* A tombstone covering a record in an older bucket survives its own bucket's compaction. */
static void test_tombstone_carried(void **state)
{
    fixture *f = *state;
    tu_store_open(f);
    for (uint64_t i = 0; i < 10; i++)
        assert_int_equal(put_v(f->s, i, 1), 0); /* bucket A holds key 0 */
    char key[32];
    tu_key(key, sizeof(key), 0);
    assert_int_equal(crf_remove(f->s, key, strlen(key)), 0); /* tombstone in bucket B */
    for (uint64_t i = 100; i < 109; i++)
        assert_int_equal(put_v(f->s, i, 1), 0);
    for (uint64_t i = 100; i < 109; i++)
        assert_int_equal(put_v(f->s, i, 2), 0); /* B: all dead but the tombstone */
    assert_int_equal(crf_seal(f->s), 0);
    assert_true(crf_compact(f->s, 10, false) >= 1);
    crf_stats st;
    crf_get_stats(f->s, &st);
    assert_true(st.tombstones >= 1);
    assert_int_equal(probe(f->s, 0, 1), 0);
    tu_store_reopen(f);
    assert_int_equal(probe(f->s, 0, 1), 0);
    for (uint64_t i = 1; i < 10; i++)
        assert_int_equal(probe(f->s, i, 1), 1);
    for (uint64_t i = 100; i < 109; i++)
        assert_int_equal(probe(f->s, i, 2), 1);
}

static void test_background_compaction(void **state)
{
    fixture *f = *state;
    f->cfg.background_compaction = true;
    tu_store_open(f);
    for (uint64_t i = 0; i < 20; i++)
        assert_int_equal(put_v(f->s, i, 1), 0);
    for (uint64_t i = 0; i < 10; i++)
        assert_int_equal(put_v(f->s, i, 2), 0); /* the first bucket is all dead */
    crf_stats st;
    for (int tries = 0; tries < 300; tries++) {
        crf_get_stats(f->s, &st);
        if (st.compactions > 0)
            break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_true(st.compactions > 0);
    for (uint64_t i = 0; i < 20; i++)
        assert_int_equal(probe(f->s, i, i < 10 ? 2 : 1), 1);
}

/* ---- gets during compaction ------------------------------------------------ */

#define KEYS 60

typedef struct shared {
    crf_store *s;
    atomic_bool stop;
    atomic_uint_fast64_t max_version[KEYS]; /* highest version put so far */
    atomic_bool removable[KEYS];            /* a miss is allowed */
    atomic_uint_fast64_t reads, misses;
    atomic_int bad;
    char bad_msg[256];
} shared;

static void *reader(void *arg)
{
    shared *sh = arg;
    uint8_t *buf = NULL;
    if (posix_memalign((void **)&buf, 4096, 200000) != 0)
        return NULL;
    uint64_t x = (uint64_t)(uintptr_t)&buf;
    while (!atomic_load(&sh->stop) && atomic_load(&sh->bad) == 0) {
        x = tu_mix(x);
        uint64_t id = x % KEYS;
        char key[32];
        tu_key(key, sizeof(key), id);
        size_t shift = (x >> 20) % 2 ? 0 : 3;
        int64_t got = crf_get(sh->s, key, strlen(key), buf + shift, 200000 - shift);
        atomic_fetch_add(&sh->reads, 1);
        if (got == CR_OBJECT_NOT_FOUND && atomic_load(&sh->removable[id])) {
            atomic_fetch_add(&sh->misses, 1);
            continue;
        }
        uint64_t max = atomic_load(&sh->max_version[id]);
        uint64_t v = got == (int64_t)len_of(id) ? tu_version_of(buf + shift) : 0;
        if (got != (int64_t)len_of(id) || v == 0 || v > max ||
            !tu_check(buf + shift, len_of(id), id, v)) {
            if (atomic_exchange(&sh->bad, 1) == 0)
                snprintf(sh->bad_msg, sizeof(sh->bad_msg),
                         "key %llu: got %lld (%s), version %llu of at most %llu",
                         (unsigned long long)id, (long long)got,
                         got < 0 ? cr_status_name((int)got) : "bytes", (unsigned long long)v,
                         (unsigned long long)max);
        }
    }
    free(buf);
    return NULL;
}

static void test_gets_during_compaction(void **state)
{
    fixture *f = *state;
    f->cfg.bucket_keys_limit = 8;
    tu_store_open(f);
    shared *sh = calloc(1, sizeof(*sh));
    sh->s = f->s;
    for (uint64_t i = 0; i < KEYS; i++) {
        assert_int_equal(put_v(f->s, i, 1), 0);
        atomic_store(&sh->max_version[i], 1);
    }
    enum { READERS = 3 };
    pthread_t th[READERS];
    for (int i = 0; i < READERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, reader, sh), 0);
    int compacted = 0;
    uint64_t x = 12345;
    for (uint64_t round = 2; round < 30 && atomic_load(&sh->bad) == 0; round++) {
        for (int k = 0; k < 25; k++) {
            x = tu_mix(x);
            uint64_t id = x % KEYS;
            if (id % 5 == 4 && (x >> 32) % 2 == 0) {
                /* remove (allowed to miss from now on; stays allowed) */
                atomic_store(&sh->removable[id], true);
                char key[32];
                tu_key(key, sizeof(key), id);
                int rc = crf_remove(f->s, key, strlen(key));
                assert_true(rc == 0 || rc == CR_OBJECT_NOT_FOUND);
            } else {
                atomic_store(&sh->max_version[id], round); /* before: a reader may see it */
                assert_int_equal(put_v(f->s, id, round), 0);
            }
        }
        int n = crf_compact(f->s, 4, round % 3 == 0);
        assert_true(n >= 0);
        compacted += n;
    }
    atomic_store(&sh->stop, true);
    for (int i = 0; i < READERS; i++)
        pthread_join(th[i], NULL);
    if (atomic_load(&sh->bad))
        fail_msg("reader saw: %s", sh->bad_msg);
    assert_true(compacted >= 3);
    assert_true(atomic_load(&sh->reads) > 100);
    /* Final state, also after a reopen: every key at its last version or removed. */
    for (int pass = 0; pass < 2; pass++) {
        for (uint64_t i = 0; i < KEYS; i++) {
            int p = probe(f->s, i, atomic_load(&sh->max_version[i]));
            assert_true(p == 1 || (p == 0 && atomic_load(&sh->removable[i])));
        }
        tu_store_reopen(f);
    }
    free(sh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_compact_dead_bucket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tombstone_carried, setup, teardown),
        cmocka_unit_test_setup_teardown(test_background_compaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gets_during_compaction, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
