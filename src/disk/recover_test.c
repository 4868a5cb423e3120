/*
 * recover_test.c - what crf_open makes of damaged directories: a bucket
 * left unsealed by a process that died (exit without crf_close), a torn
 * tail (file cut inside the last record), a hole before complete records
 * (records that landed out of order), a bucket preallocated past its last
 * record (zeros to the end), with and without a torn last record, flipped bytes in a value or a
 * header of an unsealed bucket, a flipped byte in a sealed bucket (caught at get time), and a file
 * without a valid bucket header.
 */
#include <fcntl.h>
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
    tu_store_init(f, "recover");
    f->cfg.bucket_size_limit = 64u << 20;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    tu_store_fini(*state);
    free(*state);
    return 0;
}

/* A child writes ids [0, n) (version 1, len bytes) and dies without crf_close. */
static void child_writes(fixture *f, uint64_t n, uint64_t len)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        crf_store *s = NULL;
        if (crf_open(&f->cfg, &s) != 0)
            _exit(2);
        for (uint64_t i = 0; i < n; i++)
            if (tu_put(s, i, 1, len, NULL, 0) != 0)
                _exit(3);
        _exit(0); /* no crf_close: the active bucket stays unsealed */
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static char *last_bucket(fixture *f)
{
    char names[64][64];
    int n = tu_buckets(f->dir, names, 64);
    assert_true(n >= 1 && n <= 64);
    char *path = malloc(4200);
    snprintf(path, 4200, "%s/%s", f->dir, names[n - 1]);
    return path;
}

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *len = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc(*len + 1);
    assert_int_equal(fread(buf, 1, *len, fp), *len);
    fclose(fp);
    return buf;
}

static void write_at(const char *path, uint64_t off, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, data, len, (off_t)off), (ssize_t)len);
    close(fd);
}

/* Offset of the first occurrence of needle in the file, or -1. */
static int64_t find_in_file(const char *path, const void *needle, size_t nlen)
{
    size_t len;
    uint8_t *buf = read_file(path, &len);
    int64_t at = -1;
    for (size_t i = 0; i + nlen <= len; i++) {
        if (memcmp(buf + i, needle, nlen) == 0) {
            at = (int64_t)i;
            break;
        }
    }
    free(buf);
    return at;
}

static void test_unsealed_bucket(void **state)
{
    fixture *f = *state;
    child_writes(f, 20, 10000);
    tu_store_open(f);
    crf_stats st;
    crf_get_stats(f->s, &st);
    assert_int_equal(st.recovered_scanned_buckets, 1);
    assert_int_equal(st.keys, 20);
    for (uint64_t i = 0; i < 20; i++)
        assert_int_equal(tu_probe(f->s, i, 1, 10000), 1);
    /* Resealed at open: the next open reads the footer. */
    tu_store_reopen(f);
    crf_get_stats(f->s, &st);
    assert_int_equal(st.recovered_scanned_buckets, 0);
    assert_int_equal(st.keys, 20);
}

/* Where the written bytes end: past the last non-zero byte, rounded up to a block (an
 * unsealed bucket's file may be longer: preallocated zeros). */
static uint64_t data_end(const char *path)
{
    size_t len;
    uint8_t *buf = read_file(path, &len);
    size_t end = len;
    while (end > 0 && buf[end - 1] == 0)
        end--;
    free(buf);
    return (end + 4095) / 4096 * 4096;
}

static void test_torn_tail(void **state)
{
    fixture *f = *state;
    child_writes(f, 10, 100000);
    char *path = last_bucket(f);
    uint64_t end = data_end(path);
    assert_int_equal(truncate(path, (off_t)(end - 50000)), 0); /* inside record 9's value */
    tu_store_open(f);
    for (uint64_t i = 0; i < 9; i++)
        assert_int_equal(tu_probe(f->s, i, 1, 100000), 1);
    assert_int_equal(tu_probe(f->s, 9, 1, 100000), 0);
    /* The torn tail is gone; the store keeps working and stays consistent. */
    assert_int_equal(tu_put(f->s, 9, 2, 100000, NULL, 0), 0);
    assert_int_equal(tu_put(f->s, 10, 2, 5, NULL, 0), 0);
    tu_store_reopen(f);
    crf_stats st;
    crf_get_stats(f->s, &st);
    assert_int_equal(st.recovered_scanned_buckets, 0);
    for (uint64_t i = 0; i < 9; i++)
        assert_int_equal(tu_probe(f->s, i, 1, 100000), 1);
    assert_int_equal(tu_probe(f->s, 9, 2, 100000), 1);
    assert_int_equal(tu_probe(f->s, 10, 2, 5), 1);
    free(path);
}

/* Record 4 never landed (zeros), later records did: 4 is skipped, 5..9 recovered. */
static void test_hole_before_complete_records(void **state)
{
    fixture *f = *state;
    child_writes(f, 10, 20000);
    char *path = last_bucket(f);
    char key4[32], key5[32];
    tu_key(key4, sizeof(key4), 4);
    tu_key(key5, sizeof(key5), 5);
    int64_t k4 = find_in_file(path, key4, strlen(key4));
    int64_t k5 = find_in_file(path, key5, strlen(key5));
    assert_true(k4 > 48 && k5 > k4);
    uint64_t start = (uint64_t)k4 - 48, end = (uint64_t)k5 - 48;
    uint8_t *zeros = calloc(1, end - start);
    write_at(path, start, zeros, end - start);
    free(zeros);
    tu_store_open(f);
    for (uint64_t i = 0; i < 10; i++)
        assert_int_equal(tu_probe(f->s, i, 1, 20000), i == 4 ? 0 : 1);
    crf_stats st;
    crf_get_stats(f->s, &st);
    assert_true(st.recovered_torn_bytes >= end - start - 8);
    free(path);
}

/*
 * A process dies while its bucket is preallocated ahead of what it wrote: the
 * file ends in zeros. Every complete record comes back, nothing else does, the
 * zeros are not torn bytes, and the bucket is cut back to its data.
 */
static void test_preallocated_tail(void **state)
{
    fixture *f = *state;
    child_writes(f, 20, 100000);
    char *path = last_bucket(f);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    uint64_t end = data_end(path);
    tu_store_open(f);
    crf_stats st;
    crf_get_stats(f->s, &st);
    if (st.direct_io) /* preallocation is for O_DIRECT buckets */
        assert_true((uint64_t)sb.st_size >= end + (1u << 20));
    assert_int_equal(st.recovered_scanned_buckets, 1);
    assert_int_equal(st.recovered_records, 20);
    assert_int_equal(st.keys, 20);
    assert_true(st.recovered_torn_bytes < 4096); /* at most the rest of the last block */
    for (uint64_t i = 0; i < 20; i++)
        assert_int_equal(tu_probe(f->s, i, 1, 100000), 1);
    assert_int_equal(stat(path, &sb), 0);
    assert_true((uint64_t)sb.st_size <= end + 64 * 1024); /* resealed: footer, trailer */
    /* The store goes on writing into a new bucket, and both read back after a reopen. */
    assert_int_equal(tu_put(f->s, 20, 1, 100000, NULL, 0), 0);
    tu_store_reopen(f);
    crf_get_stats(f->s, &st);
    assert_int_equal(st.recovered_scanned_buckets, 0);
    assert_int_equal(st.keys, 21);
    for (uint64_t i = 0; i <= 20; i++)
        assert_int_equal(tu_probe(f->s, i, 1, 100000), 1);
    free(path);
}

/*
 * The same, with the last record torn: its header landed, its value did not
 * (zeros, as preallocated space reads). It is dropped; those before it stay.
 */
static void test_preallocated_torn_record(void **state)
{
    fixture *f = *state;
    child_writes(f, 10, 100000);
    char *path = last_bucket(f);
    uint8_t head[16];
    tu_fill(head, 16, 9, 1);
    int64_t v9 = find_in_file(path, head, 16);
    assert_true(v9 > 0);
    uint64_t end = data_end(path);
    uint8_t *zeros = calloc(1, end - (uint64_t)v9);
    write_at(path, (uint64_t)v9, zeros, end - (uint64_t)v9);
    free(zeros);
    tu_store_open(f);
    crf_stats st;
    crf_get_stats(f->s, &st);
    assert_int_equal(st.recovered_records, 9);
    assert_int_equal(st.keys, 9);
    for (uint64_t i = 0; i < 10; i++)
        assert_int_equal(tu_probe(f->s, i, 1, 100000), i == 9 ? 0 : 1);
    tu_store_reopen(f);
    crf_get_stats(f->s, &st);
    assert_int_equal(st.keys, 9);
    assert_int_equal(tu_probe(f->s, 9, 1, 100000), 0);
    free(path);
}

static void flip_byte(const char *path, int64_t off)
{
    assert_true(off >= 0);
    uint8_t b;
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &b, 1, off), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

static void test_flipped_value_unsealed(void **state)
{
    fixture *f = *state;
    child_writes(f, 10, 20000);
    char *path = last_bucket(f);
    uint8_t head[16];
    tu_fill(head, 16, 5, 1);
    flip_byte(path, find_in_file(path, head, 16) + 1000);
    tu_store_open(f);
    for (uint64_t i = 0; i < 10; i++)
        assert_int_equal(tu_probe(f->s, i, 1, 20000), i == 5 ? 0 : 1);
    free(path);
}

static void test_flipped_header_unsealed(void **state)
{
    fixture *f = *state;
    child_writes(f, 10, 20000);
    char *path = last_bucket(f);
    char key[32];
    tu_key(key, sizeof(key), 5);
    flip_byte(path, find_in_file(path, key, strlen(key)) - 48 + 16); /* value_len */
    tu_store_open(f);
    for (uint64_t i = 0; i < 10; i++)
        assert_int_equal(tu_probe(f->s, i, 1, 20000), i == 5 ? 0 : 1);
    free(path);
}

/* A sealed bucket is trusted through its footer: a get finds the damage. */
static void test_flipped_value_sealed(void **state)
{
    fixture *f = *state;
    tu_store_open(f);
    for (uint64_t i = 0; i < 8; i++)
        assert_int_equal(tu_put(f->s, i, 1, i % 2 ? 70000 : 3000, NULL, 0), 0);
    crf_close(f->s);
    f->s = NULL;
    char *path = last_bucket(f);
    uint8_t head3[16], head4[16];
    tu_fill(head3, 16, 3, 1);
    tu_fill(head4, 16, 4, 1);
    flip_byte(path, find_in_file(path, head3, 16) + 60000); /* aligned value: direct read */
    flip_byte(path, find_in_file(path, head4, 16) + 10);    /* dense value: bounce read */
    tu_store_open(f);
    for (uint64_t id = 3; id <= 4; id++) {
        char key[32];
        tu_key(key, sizeof(key), id);
        uint8_t *buf = malloc(70000);
        assert_int_equal(crf_get(f->s, key, strlen(key), buf, 70000), CR_CHECKSUM_MISMATCH);
        assert_int_equal(crf_get(f->s, key, strlen(key), buf, 70000), CR_OBJECT_NOT_FOUND);
        free(buf);
    }
    crf_stats st;
    crf_get_stats(f->s, &st);
    assert_int_equal(st.checksum_failures, 2);
    for (uint64_t i = 0; i < 8; i++)
        if (i != 3 && i != 4)
            assert_int_equal(tu_probe(f->s, i, 1, i % 2 ? 70000 : 3000), 1);
    tu_store_reopen(f);
    assert_int_equal(tu_probe(f->s, 3, 1, 70000), 0);
    assert_int_equal(tu_probe(f->s, 4, 1, 3000), 0);
    free(path);
}

static void test_garbage_file(void **state)
{
    fixture *f = *state;
    tu_store_open(f);
    assert_int_equal(tu_put(f->s, 1, 1, 100, NULL, 0), 0);
    crf_close(f->s);
    f->s = NULL;
    char path[4200];
    snprintf(path, sizeof(path), "%s/crf-00000000000000ff.bkt", f->dir);
    uint8_t junk[8192];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 31 + 7);
    FILE *fp = fopen(path, "wb");
    fwrite(junk, 1, sizeof(junk), fp);
    fclose(fp);
    tu_store_open(f);
    crf_stats st;
    crf_get_stats(f->s, &st);
    assert_int_equal(st.recovered_dropped_buckets, 1);
    assert_int_equal(tu_probe(f->s, 1, 1, 100), 1);
    struct stat sb;
    assert_int_equal(stat(path, &sb), -1);
    /* New buckets get ids past every file seen, including the removed one. */
    assert_int_equal(tu_put(f->s, 2, 1, 100, NULL, 0), 0);
    tu_store_reopen(f);
    assert_int_equal(tu_probe(f->s, 2, 1, 100), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unsealed_bucket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hole_before_complete_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preallocated_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preallocated_torn_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_value_unsealed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_header_unsealed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_value_sealed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_file, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
