/*
 * store_test.c - the disk store's basic contract: put / get / remove /
 * overwrite across value sizes and destination alignments, batches with
 * per-item results, reopen (sealed and unsealed buckets), no resurrection
 * of removed or overwritten keys, the directory lock, buffered mode, the
 * sync policies, the environment variables, and preallocated buckets written
 * with one vectored write per record.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "disk/disk.h"
#include "disk/disk_test_fixture.h"

typedef tu_store fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    tu_store_init(f, "store");
    f->cfg.bucket_size_limit = 4u << 20;
    f->cfg.bucket_keys_limit = 64;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    tu_store_fini(*state);
    free(*state);
    return 0;
}

static void put_v(crf_store *s, uint64_t id, uint64_t version, uint64_t len)
{
    int rc = tu_put(s, id, version, len, &version, sizeof(version));
    if (rc != 0)
        fail_msg("put id %llu: %s: %s", (unsigned long long)id, cr_status_name(rc),
                 cr_last_error_message());
}

/* Get id and check it is version (len bytes); misalign shifts the destination. */
static void expect_v(crf_store *s, uint64_t id, uint64_t version, uint64_t len, size_t misalign)
{
    char key[32];
    tu_key(key, sizeof(key), id);
    uint8_t *raw = NULL;
    assert_int_equal(posix_memalign((void **)&raw, 4096, len + 8192), 0);
    uint8_t *dst = raw + misalign;
    int64_t got = crf_get(s, key, strlen(key), dst, len + 4096);
    if (got < 0)
        fail_msg("get %s: %s: %s", key, cr_status_name((int)got), cr_last_error_message());
    assert_int_equal(got, (int64_t)len);
    if (!tu_check(dst, len, id, version))
        fail_msg("get %s: wrong bytes (len %llu, misalign %zu)", key, (unsigned long long)len,
                 misalign);
    crf_key_info info;
    assert_int_equal(crf_stat(s, key, strlen(key), &info), 0);
    assert_int_equal(info.value_len, len);
    assert_int_equal(info.meta_len, 8);
    uint64_t mv;
    memcpy(&mv, info.meta, 8);
    assert_int_equal(mv, version);
    free(raw);
}

static void expect_missing(crf_store *s, uint64_t id)
{
    char key[32];
    uint8_t buf[64];
    tu_key(key, sizeof(key), id);
    int64_t got = crf_get(s, key, strlen(key), buf, sizeof(buf));
    if (got != CR_OBJECT_NOT_FOUND)
        fail_msg("get %s: expected a miss, got %lld", key, (long long)got);
}

static const uint64_t sizes[] = {0,     1,     7,     16,      4095,          4096,   4097,
                                 65535, 65536, 65537, 1 << 20, (1 << 20) + 3, 3 << 20};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

static void test_roundtrip_sizes(void **state)
{
    fixture *f = *state;
    tu_store_open(f);
    for (size_t i = 0; i < N_SIZES; i++)
        put_v(f->s, i, 1, sizes[i]);
    for (size_t i = 0; i < N_SIZES; i++) {
        expect_v(f->s, i, 1, sizes[i], 0);
        expect_v(f->s, i, 1, sizes[i], 3);
    }
    crf_stats st;
    crf_get_stats(f->s, &st);
    assert_int_equal(st.keys, N_SIZES);
    assert_true(st.buckets >= 1);
    /* Sealed and reopened: the same from the footers. */
    tu_store_reopen(f);
    for (size_t i = 0; i < N_SIZES; i++)
        expect_v(f->s, i, 1, sizes[i], 0);
    crf_get_stats(f->s, &st);
    assert_int_equal(st.recovered_scanned_buckets, 0);
}

static void test_overwrite_remove(void **state)
{
    fixture *f = *state;
    tu_store_open(f);
    put_v(f->s, 1, 1, 5000);
    put_v(f->s, 2, 1, 100);
    put_v(f->s, 1, 2, 70000);
    expect_v(f->s, 1, 2, 70000, 0);
    char key[32];
    tu_key(key, sizeof(key), 2);
    assert_int_equal(crf_remove(f->s, key, strlen(key)), 0);
    expect_missing(f->s, 2);
    assert_int_equal(crf_remove(f->s, key, strlen(key)), CR_OBJECT_NOT_FOUND);
    tu_store_reopen(f);
    expect_v(f->s, 1, 2, 70000, 0);
    expect_missing(f->s, 2);
    put_v(f->s, 2, 3, 10);
    expect_v(f->s, 2, 3, 10, 0);
    tu_store_reopen(f);
    expect_v(f->s, 2, 3, 10, 0);
}

/* Overwrites and removes spread over many buckets never resurface after reopens. */
static void test_no_resurrection_across_buckets(void **state)
{
    fixture *f = *state;
    f->cfg.bucket_keys_limit = 5;
    tu_store_open(f);
    uint64_t version[40] = {0};
    for (uint64_t round = 1; round <= 4; round++) {
        for (uint64_t id = 0; id < 40; id++) {
            if ((id + round) % 3 == 0) {
                char key[32];
                tu_key(key, sizeof(key), id);
                int rc = crf_remove(f->s, key, strlen(key));
                assert_true(rc == 0 || rc == CR_OBJECT_NOT_FOUND);
                assert_int_equal(rc == 0, version[id] != 0);
                version[id] = 0;
            } else {
                put_v(f->s, id, round, 100 + id * 10);
                version[id] = round;
            }
        }
        if (round % 2 == 0)
            tu_store_reopen(f);
    }
    tu_store_reopen(f);
    for (uint64_t id = 0; id < 40; id++) {
        if (version[id] == 0)
            expect_missing(f->s, id);
        else
            expect_v(f->s, id, version[id], 100 + id * 10, 0);
    }
}

static void test_batches(void **state)
{
    fixture *f = *state;
    tu_store_open(f);
    enum { N = 50 };
    crf_put_item items[N + 2];
    uint8_t *vals[N];
    char keys[N][32];
    for (int i = 0; i < N; i++) {
        tu_key(keys[i], sizeof(keys[i]), (uint64_t)i);
        uint64_t len = (uint64_t)(i * 997) % 200000;
        vals[i] = malloc(len + 1);
        tu_fill(vals[i], len, (uint64_t)i, 7);
        items[i] = (crf_put_item){keys[i], strlen(keys[i]), vals[i], len, NULL, 0};
    }
    items[N] = (crf_put_item){"", 0, "x", 1, NULL, 0};             /* bad key */
    items[N + 1] = (crf_put_item){"m", 1, "x", 1, "meta", 100000}; /* bad meta */
    int results[N + 2];
    assert_int_equal(crf_put_batch(f->s, items, N + 2, results), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(results[i], 0);
    assert_int_equal(results[N], CR_INVALID_KEY);
    assert_int_equal(results[N + 1], CR_INVALID_PARAMS);

    crf_get_item gets[N + 2];
    uint8_t *dsts[N];
    for (int i = 0; i < N; i++) {
        dsts[i] = malloc(200000);
        gets[i] = (crf_get_item){keys[i], strlen(keys[i]), dsts[i], 200000};
    }
    uint8_t small[4];
    gets[N] = (crf_get_item){"missing", 7, small, sizeof(small)};
    gets[N + 1] = (crf_get_item){keys[N - 1], strlen(keys[N - 1]), small, sizeof(small)};
    int64_t got[N + 2];
    assert_int_equal(crf_get_batch(f->s, gets, N + 2, got), 0);
    for (int i = 0; i < N; i++) {
        uint64_t len = (uint64_t)(i * 997) % 200000;
        assert_int_equal(got[i], (int64_t)len);
        assert_true(tu_check(dsts[i], len, (uint64_t)i, 7));
    }
    assert_int_equal(got[N], CR_OBJECT_NOT_FOUND);
    assert_int_equal(got[N + 1], CR_BUFFER_OVERFLOW);
    for (int i = 0; i < N; i++) {
        free(vals[i]);
        free(dsts[i]);
    }
    crf_stats st;
    crf_get_stats(f->s, &st);
    assert_true(st.sqes > 0 && st.submits > 0);
}

/* Values written straight from aligned caller memory (io.c, "Zero copy"), mixed with small
 * and unaligned ones, one larger than the write ring, across bucket roll-overs: every byte
 * reads back, before and after a reopen. */
static void test_zero_copy_writes(void **state)
{
    fixture *f = *state;
    tu_store_open(f);
    static const uint64_t lens[] = {65536,   100,          1 << 20, 5000, (1 << 20) + 3,
                                    3 << 20, 65536 + 100,  9 << 20, 1,    1 << 20,
                                    4096,    (2 << 20) - 1};
    enum { N = sizeof(lens) / sizeof(lens[0]), ROUNDS = 3 };
    uint64_t direct_expected = 0;
    for (int round = 0; round < ROUNDS; round++) {
        crf_put_item items[N];
        uint8_t *raw[N];
        char keys[N][32];
        uint8_t meta[N][8];
        for (int i = 0; i < N; i++) {
            uint64_t id = (uint64_t)(round * N + i), len = lens[i];
            bool unaligned = (i + round) % 4 == 3;
            assert_int_equal(posix_memalign((void **)&raw[i], 4096, len + 4096 + 16), 0);
            uint8_t *v = raw[i] + (unaligned ? 16 : 0);
            tu_fill(v, len, id, 3);
            uint64_t version = 3;
            memcpy(meta[i], &version, 8);
            tu_key(keys[i], sizeof(keys[i]), id);
            items[i] = (crf_put_item){keys[i], strlen(keys[i]), v, len, meta[i], 8};
            if (!unaligned && len >= (64u << 10))
                direct_expected += len & ~4095ull;
        }
        int results[N];
        assert_int_equal(crf_put_batch(f->s, items, N, results), 0);
        for (int i = 0; i < N; i++) {
            assert_int_equal(results[i], 0);
            free(raw[i]);
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int round = 0; round < ROUNDS; round++)
            for (int i = 0; i < N; i++)
                expect_v(f->s, (uint64_t)(round * N + i), 3, lens[i], (size_t)(i % 3) * 8);
        crf_stats st;
        crf_get_stats(f->s, &st);
        if (pass == 0 && st.direct_io)
            assert_int_equal(st.direct_write_bytes, direct_expected);
        if (pass == 0 && !st.direct_io)
            assert_int_equal(st.direct_write_bytes, 0);
        tu_store_reopen(f);
    }
}

static uint64_t file_size(const char *dir, const char *name)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return (uint64_t)sb.st_size;
}

/* Put 10 values of 1 MiB from aligned memory, in batches of 4, 4 and 2. */
static void put_aligned_mib(crf_store *s, uint64_t version)
{
    for (int batch = 0; batch < 3; batch++) {
        crf_put_item items[4];
        uint8_t *raw[4];
        char keys[4][32];
        int n = batch < 2 ? 4 : 2;
        for (int i = 0; i < n; i++) {
            uint64_t id = (uint64_t)(batch * 4 + i);
            assert_int_equal(posix_memalign((void **)&raw[i], 4096, 1u << 20), 0);
            tu_fill(raw[i], 1u << 20, id, version);
            tu_key(keys[i], sizeof(keys[i]), id);
            items[i] = (crf_put_item){keys[i], strlen(keys[i]), raw[i], 1u << 20, &version, 8};
        }
        int results[4];
        assert_int_equal(crf_put_batch(s, items, (size_t)n, results), 0);
        for (int i = 0; i < n; i++) {
            assert_int_equal(results[i], 0);
            free(raw[i]);
        }
    }
}

/*
 * io.c, "Preallocation" and "Zero copy": with O_DIRECT, the active bucket is
 * fallocate'd ahead of its data (the file is longer than what was written),
 * each record's header block and its value go out in one vectored write, and
 * a sealed bucket is cut back so that its trailer ends the file (a reopen reads
 * every bucket through its footer). prealloc_bytes = 0 turns preallocation off.
 */
static void test_prealloc_and_coalesced_writes(void **state)
{
    fixture *f = *state;
    for (int pass = 0; pass < 2; pass++) {
        f->cfg.prealloc_bytes = pass == 0 ? 256u << 20 : 0;
        tu_store_open(f);
        put_aligned_mib(f->s, 1 + (uint64_t)pass);
        crf_stats st;
        crf_get_stats(f->s, &st);
        char names[16][64];
        int n = tu_buckets(f->dir, names, 16);
        assert_true(n >= 4 && n <= 16); /* three 1 MiB records fit a 4 MiB bucket */
        uint64_t active = file_size(f->dir, names[n - 1]);
        if (st.direct_io) {
            assert_int_equal(st.coalesced_writes, 10);
            if (pass == 0) {
                assert_true(st.fallocates >= 4);
                assert_true(active >= (3u << 20)); /* one record written, room for three */
                /* sealing cuts the active bucket back: its trailer ends the file */
                assert_int_equal(crf_seal(f->s), 0);
                crf_get_stats(f->s, &st);
                assert_true(st.prealloc_trims >= 1);
                assert_true(file_size(f->dir, names[n - 1]) < (2u << 20));
            } else {
                assert_int_equal(st.fallocates, 0);
                assert_true(active < (2u << 20));
            }
        } else {
            assert_int_equal(st.coalesced_writes, 0);
            assert_int_equal(st.fallocates, 0);
        }
        tu_store_reopen(f);
        crf_get_stats(f->s, &st);
        assert_int_equal(st.recovered_scanned_buckets, 0);
        n = tu_buckets(f->dir, names, 16);
        for (int i = 0; i < n && i < 16; i++)
            assert_int_equal(file_size(f->dir, names[i]) % 4096, 0);
        for (uint64_t id = 0; id < 10; id++)
            expect_v(f->s, id, 1 + (uint64_t)pass, 1u << 20, 0);
        crf_close(f->s);
        f->s = NULL;
    }
}

static void test_lock(void **state)
{
    fixture *f = *state;
    tu_store_open(f);
    crf_store *other = NULL;
    assert_int_equal(crf_open(&f->cfg, &other), CR_ERR_DISK_LOCKED);
    assert_null(other);
    assert_non_null(strstr(cr_last_error_message(), "in use"));
}

static void test_buffered_mode(void **state)
{
    fixture *f = *state;
    f->cfg.io_mode = CRF_IO_BUFFERED;
    tu_store_open(f);
    crf_stats st;
    crf_get_stats(f->s, &st);
    assert_false(st.direct_io);
    assert_non_null(strstr(st.io_reason, "buffered"));
    for (size_t i = 0; i < N_SIZES; i++)
        put_v(f->s, i, 4, sizes[i]);
    for (size_t i = 0; i < N_SIZES; i++)
        expect_v(f->s, i, 4, sizes[i], 5);
    /* Files written buffered read back with O_DIRECT where the filesystem has it. */
    f->cfg.io_mode = CRF_IO_AUTO;
    tu_store_reopen(f);
    for (size_t i = 0; i < N_SIZES; i++)
        expect_v(f->s, i, 4, sizes[i], 0);
}

static void test_sync_policies(void **state)
{
    fixture *f = *state;
    f->cfg.sync = CRF_SYNC_PUT;
    tu_store_open(f);
    crf_stats st;
    crf_get_stats(f->s, &st);
    uint64_t before = st.fdatasyncs;
    for (uint64_t i = 0; i < 10; i++)
        put_v(f->s, i, 1, 1000);
    crf_get_stats(f->s, &st);
    assert_true(st.fdatasyncs >= before + 10);
    f->cfg.sync = CRF_SYNC_NONE;
    tu_store_reopen(f);
    for (uint64_t i = 0; i < 10; i++)
        expect_v(f->s, i, 1, 1000, 0);
    put_v(f->s, 99, 1, 1000);
    crf_get_stats(f->s, &st);
    before = st.fdatasyncs;
    assert_int_equal(crf_sync(f->s), 0);
    crf_get_stats(f->s, &st);
    assert_true(st.fdatasyncs > before);
    assert_int_equal(crf_seal(f->s), 0);
    put_v(f->s, 100, 1, 10);
    expect_v(f->s, 99, 1, 1000, 0);
    expect_v(f->s, 100, 1, 10, 0);
}

static void test_env(void **state)
{
    (void)state;
    crf_config c;
    crf_config_init(&c);
    setenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "/nvme/x", 1);
    setenv("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", "7", 1);
    setenv("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", "1M", 1);
    setenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", "1073741824", 1);
    setenv("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY", "fifo", 1);
    setenv("CRESCENT_OFFLOAD_SYNC", "put", 1);
    setenv("CRESCENT_OFFLOAD_PREALLOC", "64M", 1);
    assert_int_equal(crf_config_from_env(&c), 0);
    assert_int_equal(c.prealloc_bytes, 64u << 20);
    assert_string_equal(c.path, "/nvme/x");
    assert_int_equal(c.bucket_keys_limit, 7);
    assert_int_equal(c.bucket_size_limit, 1 << 20);
    assert_int_equal(c.capacity_bytes, 1ull << 30);
    assert_int_equal(c.eviction, CRF_EVICT_FIFO);
    assert_int_equal(c.sync, CRF_SYNC_PUT);
    setenv("MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE", "2G", 1);
    assert_int_equal(crf_config_from_env(&c), 0);
    assert_int_equal(c.capacity_bytes, 2ull << 30);
    setenv("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY", "random", 1);
    crf_config before = c;
    assert_int_equal(crf_config_from_env(&c), CR_ERR_INVALID_CONFIG);
    assert_non_null(strstr(cr_last_error_message(), "MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY"));
    assert_memory_equal(&before, &c, sizeof(c));
    setenv("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY", "lru", 1);
    setenv("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", "12x", 1);
    assert_int_equal(crf_config_from_env(&c), CR_ERR_INVALID_CONFIG);
    unsetenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH");
    unsetenv("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT");
    unsetenv("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES");
    unsetenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES");
    unsetenv("MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE");
    unsetenv("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY");
    unsetenv("CRESCENT_OFFLOAD_SYNC");
    unsetenv("CRESCENT_OFFLOAD_PREALLOC");
}

static void test_bad_config(void **state)
{
    fixture *f = *state;
    crf_store *s = NULL;
    crf_config c = f->cfg;
    c.path = NULL;
    assert_int_equal(crf_open(&c, &s), CR_ERR_INVALID_CONFIG);
    c = f->cfg;
    c.queue_depth = 1;
    assert_int_equal(crf_open(&c, &s), CR_ERR_INVALID_CONFIG);
    c = f->cfg;
    c.path = "/proc/definitely/not/here";
    assert_int_equal(crf_open(&c, &s), CR_ERR_INVALID_CONFIG);
    assert_null(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overwrite_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_resurrection_across_buckets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_copy_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prealloc_and_coalesced_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_buffered_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sync_policies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_config, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
