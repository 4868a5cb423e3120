/*
 * prefault_test.c - crc_prefault_values: a batch of fresh values of 4 MiB
 * or more is committed (every page resident afterwards), a batch whose
 * probe page is resident is left alone, small batches and small values are
 * not looked at, and NULL or failed values are skipped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "store/internal.h"

#define MIB (1u << 20)

static size_t resident_pages(void *p, size_t len)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = len / pg, got = 0;
    unsigned char *v = malloc(n);
    assert_non_null(v);
    assert_int_equal(mincore(p, len, v), 0);
    for (size_t i = 0; i < n; i++)
        got += v[i] & 1;
    free(v);
    return got;
}

static void fresh_batch_committed(void **state)
{
    (void)state;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *area = mmap(NULL, 8 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(area != MAP_FAILED);
    assert_int_equal(resident_pages(area, 8 * MIB), 0);
    void *vals[9];
    int64_t sizes[9];
    for (int j = 0; j < 8; j++) {
        vals[j] = area + (size_t)j * MIB;
        sizes[j] = MIB;
    }
    vals[8] = NULL; /* a value that could not be allocated */
    sizes[8] = -1;
    assert_int_equal(crc_prefault_values(vals, sizes, 9), 8);
    assert_int_equal(resident_pages(area, 8 * MIB), 8 * MIB / pg);
    /* Resident now: the probe says so and nothing more is done. */
    assert_int_equal(crc_prefault_values(vals, sizes, 9), 0);
    munmap(area, 8 * MIB);
}

static void small_batches_and_values_left_alone(void **state)
{
    (void)state;
    uint8_t *area = mmap(NULL, 8 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(area != MAP_FAILED);
    void *vals[64];
    int64_t sizes[64];
    for (int j = 0; j < 3; j++) { /* 3 MiB: under the batch floor */
        vals[j] = area + (size_t)j * MIB;
        sizes[j] = MIB;
    }
    assert_int_equal(crc_prefault_values(vals, sizes, 3), 0);
    for (int j = 0; j < 64; j++) { /* 8 MiB of 128 KiB values: under the value floor */
        vals[j] = area + (size_t)j * (128u << 10);
        sizes[j] = 128 << 10;
    }
    assert_int_equal(crc_prefault_values(vals, sizes, 64), 0);
    assert_int_equal(resident_pages(area, 8 * MIB), 0);
    munmap(area, 8 * MIB);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fresh_batch_committed),
        cmocka_unit_test(small_batches_and_values_left_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
