/*
 * evict_test.c - the capacity limit: CR_ERR_DISK_FULL when nothing can be
 * evicted (policy none, a value larger than the capacity, the key limit),
 * LRU and FIFO eviction order with the on_evict callback, no resurrection
 * of an older value after its newer record was evicted (also across a
 * reopen), preallocated bucket space kept inside the capacity, and the
 * filesystem's own limit (RLIMIT_FSIZE: EFBIG) reported as
 * CR_ERR_DISK_FULL without a hang.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "disk/disk.h"
#include "disk/disk_test_fixture.h"

#define VAL (256u << 10)

typedef struct fixture {
    tu_store st; /* first: the fixture is a tu_store too */
    char evicted[256][32];
    int n_evicted;
} fixture;

static void on_evict(void *arg, const crf_key_info *keys, size_t n)
{
    fixture *f = arg;
    for (size_t i = 0; i < n && f->n_evicted < 256; i++) {
        snprintf(f->evicted[f->n_evicted], 32, "%.*s", (int)keys[i].key_len,
                 (const char *)keys[i].key);
        f->n_evicted++;
    }
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    tu_store_init(&f->st, "evict");
    /* Four records of 256 KiB a bucket (~1.03 MiB file); room for four buckets. */
    f->st.cfg.bucket_keys_limit = 4;
    f->st.cfg.bucket_size_limit = 2u << 20;
    f->st.cfg.capacity_bytes = (4u << 20) + (256u << 10);
    f->st.cfg.on_evict = on_evict;
    f->st.cfg.on_evict_arg = f;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    tu_store_fini(&f->st);
    free(f);
    return 0;
}

static bool was_evicted(const fixture *f, uint64_t id)
{
    char key[32];
    tu_key(key, sizeof(key), id);
    for (int i = 0; i < f->n_evicted; i++)
        if (strcmp(f->evicted[i], key) == 0)
            return true;
    return false;
}

static void test_full_without_eviction(void **state)
{
    fixture *f = *state;
    f->st.cfg.eviction = CRF_EVICT_NONE;
    tu_store_open(&f->st);
    int rc = 0;
    uint64_t n = 0;
    while (n < 100 && (rc = tu_put(f->st.s, n, 1, VAL, NULL, 0)) == 0)
        n++;
    assert_int_equal(rc, CR_ERR_DISK_FULL);
    assert_non_null(strstr(cr_last_error_message(), "full"));
    assert_true(n >= 12 && n <= 17);
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(tu_probe(f->st.s, i, 1, VAL), 1);
    assert_int_equal(tu_put(f->st.s, 1000, 1, VAL, NULL, 0),
                     CR_ERR_DISK_FULL); /* still full, still quick */
    crf_stats st;
    crf_get_stats(f->st.s, &st);
    assert_true(st.file_bytes <= f->st.cfg.capacity_bytes);
    assert_int_equal(f->n_evicted, 0);
}

static void test_value_larger_than_capacity(void **state)
{
    fixture *f = *state;
    tu_store_open(&f->st);
    assert_int_equal(tu_put(f->st.s, 1, 1, 100, NULL, 0), 0);
    assert_int_equal(tu_put(f->st.s, 2, 1, 5u << 20, NULL, 0), CR_ERR_DISK_FULL);
    assert_int_equal(tu_probe(f->st.s, 1, 1, 100), 1); /* nothing was evicted for it */
    assert_int_equal(f->n_evicted, 0);
}

/* Buckets A{0..3} B{4..7} C{8..11}; A is read; D and E need room: B goes, then C. */
static void eviction_order(fixture *f, crf_eviction policy)
{
    f->st.cfg.eviction = policy;
    tu_store_open(&f->st);
    for (uint64_t i = 0; i < 12; i++)
        assert_int_equal(tu_put(f->st.s, i, 1, VAL, NULL, 0), 0);
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(tu_probe(f->st.s, i, 1, VAL), 1);
    for (uint64_t i = 12; i < 17; i++)
        assert_int_equal(tu_put(f->st.s, i, 1, VAL, NULL, 0), 0);
    crf_stats st;
    crf_get_stats(f->st.s, &st);
    assert_true(st.evicted_buckets >= 1);
    assert_true(st.file_bytes <= f->st.cfg.capacity_bytes);
    uint64_t gone = policy == CRF_EVICT_LRU ? 4 : 0; /* first bucket to go */
    uint64_t kept = policy == CRF_EVICT_LRU ? 0 : 4; /* survives the first eviction */
    for (uint64_t i = gone; i < gone + 4; i++) {
        assert_int_equal(tu_probe(f->st.s, i, 1, VAL), 0);
        assert_true(was_evicted(f, i));
    }
    for (uint64_t i = kept; i < kept + 4; i++)
        if (!was_evicted(f, i))
            assert_int_equal(tu_probe(f->st.s, i, 1, VAL), 1);
    /* The callback's first keys are the first evicted bucket's. */
    char key[32];
    tu_key(key, sizeof(key), gone);
    bool first_four = false;
    for (int i = 0; i < 4 && i < f->n_evicted; i++)
        first_four |= strcmp(f->evicted[i], key) == 0;
    assert_true(first_four);
    for (uint64_t i = 12; i < 17; i++)
        assert_int_equal(tu_probe(f->st.s, i, 1, VAL), 1);
}

static void test_lru_order(void **state)
{
    eviction_order(*state, CRF_EVICT_LRU);
}

static void test_fifo_order(void **state)
{
    eviction_order(*state, CRF_EVICT_FIFO);
}

/*
 * Key 100 is put in bucket A, overwritten in B. A stays hot, B is evicted:
 * 100 must be gone (a tombstone covers its old value in A), now and after a
 * reopen.
 */
static void test_evicted_overwrite_stays_gone(void **state)
{
    fixture *f = *state;
    tu_store_open(&f->st);
    assert_int_equal(tu_put(f->st.s, 100, 1, VAL, NULL, 0), 0);
    for (uint64_t i = 0; i < 3; i++)
        assert_int_equal(tu_put(f->st.s, i, 1, VAL, NULL, 0), 0); /* A = {100, 0, 1, 2} */
    assert_int_equal(tu_put(f->st.s, 100, 2, VAL, NULL, 0), 0);
    for (uint64_t i = 3; i < 6; i++)
        assert_int_equal(tu_put(f->st.s, i, 1, VAL, NULL, 0), 0); /* B = {100', 3, 4, 5} */
    for (uint64_t i = 6; i < 10; i++)
        assert_int_equal(tu_put(f->st.s, i, 1, VAL, NULL, 0), 0); /* C */
    for (uint64_t i = 0; i < 3; i++)
        assert_int_equal(tu_probe(f->st.s, i, 1, VAL), 1); /* A is the most recent read */
    for (uint64_t i = 10; i < 15; i++)
        assert_int_equal(tu_put(f->st.s, i, 1, VAL, NULL, 0), 0); /* D, then E needs room: B goes */
    assert_true(was_evicted(f, 100));
    assert_int_equal(tu_probe(f->st.s, 100, 1, VAL), 0);
    assert_int_equal(tu_probe(f->st.s, 0, 1, VAL), 1);
    crf_close(f->st.s);
    f->st.s = NULL;
    tu_store_open(&f->st);
    assert_int_equal(tu_probe(f->st.s, 100, 1, VAL), 0);
    assert_int_equal(tu_probe(f->st.s, 100, 2, VAL), 0);
    assert_int_equal(tu_probe(f->st.s, 0, 1, VAL), 1);
}

/* Bytes of the directory's bucket files, as the filesystem has them (st_size). */
static uint64_t bucket_file_bytes(const char *dir)
{
    char names[64][64];
    int n = tu_buckets(dir, names, 64);
    assert_true(n >= 0 && n <= 64);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        total += (uint64_t)sb.st_size;
    }
    return total;
}

/*
 * Preallocated space counts against the capacity: while puts evict bucket
 * after bucket, the files never hold more than the capacity (plus one
 * record's tombstones), though the active bucket is fallocate'd ahead.
 */
static void test_prealloc_within_capacity(void **state)
{
    fixture *f = *state;
    /* 4.6 buckets of three records (the bucket limit becomes a quarter of this): a new
     * bucket's preallocation would reach past the capacity if it were not counted */
    f->st.cfg.capacity_bytes = (3u << 20) + (600u << 10);
    tu_store_open(&f->st);
    uint64_t cap = f->st.cfg.capacity_bytes, most = 0;
    for (uint64_t i = 0; i < 40; i++) {
        assert_int_equal(tu_put(f->st.s, i, 1, VAL, NULL, 0), 0);
        uint64_t bytes = bucket_file_bytes(f->st.dir);
        if (bytes > most)
            most = bytes;
        assert_true(bytes <= cap + (64u << 10));
    }
    crf_stats st;
    crf_get_stats(f->st.s, &st);
    assert_true(st.evicted_buckets >= 6);
    if (st.direct_io)
        assert_true(st.fallocates >= 6);
    assert_true(most >= cap - (1u << 20)); /* it did fill up */
    for (uint64_t i = 36; i < 40; i++)
        assert_int_equal(tu_probe(f->st.s, i, 1, VAL), 1);
}

static void test_key_limit(void **state)
{
    fixture *f = *state;
    f->st.cfg.max_keys = 6;
    f->st.cfg.eviction = CRF_EVICT_NONE;
    tu_store_open(&f->st);
    for (uint64_t i = 0; i < 6; i++)
        assert_int_equal(tu_put(f->st.s, i, 1, 100, NULL, 0), 0);
    assert_int_equal(tu_put(f->st.s, 6, 1, 100, NULL, 0), CR_ERR_DISK_FULL);
    assert_int_equal(tu_put(f->st.s, 5, 2, 100, NULL, 0), 0); /* an existing key is not a new one */
    crf_close(f->st.s);
    f->st.s = NULL;
    f->st.cfg.eviction = CRF_EVICT_LRU;
    tu_store_open(&f->st);
    assert_int_equal(tu_put(f->st.s, 6, 1, 100, NULL, 0), 0); /* evicts the oldest bucket instead */
    assert_int_equal(tu_probe(f->st.s, 6, 1, 100), 1);
}

/*
 * A child limited to files of 3 MiB (RLIMIT_FSIZE, SIGXFSZ ignored) writes
 * 256 KiB values into a store with a far larger capacity: the writes past
 * the limit fail with EFBIG, which must come back as CR_ERR_DISK_FULL (not a
 * hang, not a crash), with the values written before it still readable and
 * the store writing on into a fresh bucket file.
 */
static int fsize_child(fixture *f)
{
    struct rlimit rl = {3u << 20, 3u << 20};
    signal(SIGXFSZ, SIG_IGN);
    alarm(60);
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 10;
    f->st.cfg.capacity_bytes = 1ull << 30;
    f->st.cfg.bucket_keys_limit = 500;
    f->st.cfg.bucket_size_limit = 64u << 20;
    crf_store *s = NULL;
    if (crf_open(&f->st.cfg, &s) != 0)
        return 11;
    uint64_t n = 0;
    int rc = 0;
    while (n < 64 && (rc = tu_put(s, n, 1, VAL, NULL, 0)) == 0)
        n++;
    if (rc != CR_ERR_DISK_FULL)
        return 12;
    if (n < 8 || n > 12)
        return 13;
    for (uint64_t i = 0; i < n; i++)
        if (tu_probe(s, i, 1, VAL) != 1)
            return 14;
    /* The failed bucket is abandoned; a new file is below the limit again. */
    if (tu_put(s, 1000, 1, VAL, NULL, 0) != 0 || tu_probe(s, 1000, 1, VAL) != 1)
        return 15;
    crf_close(s);
    return 0;
}

static void test_file_size_limit(void **state)
{
    fixture *f = *state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(fsize_child(f));
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st))
        fail_msg("fsize child died with signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_without_eviction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_value_larger_than_capacity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lru_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fifo_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_evicted_overwrite_stays_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prealloc_within_capacity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_size_limit, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
