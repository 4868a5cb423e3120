/*
 * memory_test.c - bytes of master metadata per object.
 *
 * Creates 100 000 complete single-replica objects with 40-byte keys and
 * measures the heap the master core holds for them through the counting
 * allocator of mem.h (malloc_usable_size + one word of chunk header per
 * block, i.e. what glibc really spends; ASan builds count requested sizes).
 * The figure includes everything the objects cost: the object block (header,
 * key, replica), the hash-bucket array share, and the segment allocator's
 * node array share. Target: <= 256 bytes of overhead (excluding the key
 * bytes) per single-replica object.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "master/mem.h"
#include "master/test_util.h"

#define N       100000
#define KEY_LEN 40

static void test_bytes_per_object(void **state)
{
    crk_service *s = tu_service(NULL, 0);
    tu_mount(s, tu_client(1), "seg", 0, 1ull << 40, 0);
    uint64_t before = crk_mem_live_bytes();
    char key[KEY_LEN + 1];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "vllm@llama-3-8b@tp0@blk%017d", i);
        assert_int_equal(strlen(key), KEY_LEN);
        assert_int_equal(tu_put(s, tu_client(1), key, 16 * 1024, NULL, 1), 0);
    }
    uint64_t after = crk_mem_live_bytes();
    double per = (double)(after - before) / N;
    double overhead = per - KEY_LEN;
    crk_stats st = tu_stats(s);
    assert_int_equal(st.keys, N);
    fprintf(stderr,
            "master metadata: %.1f bytes per single-replica object with a %d-byte key "
            "(%.1f bytes of overhead besides the key); %llu bytes for %d objects\n",
            per, KEY_LEN, overhead, (unsigned long long)(after - before), N);
    assert_true(overhead <= 256.0);
    assert_true(st.metadata_bytes >= after - before);

    /* Three replicas: reported for reference. */
    crk_service *s3 = tu_service(NULL, 0);
    for (int g = 0; g < 3; g++) {
        char name[16];
        snprintf(name, sizeof(name), "seg%d", g);
        tu_mount(s3, tu_client(1), name, (uint64_t)g << 41, 1ull << 40, 0);
    }
    crk_replicate_config three = tu_cfg(3);
    uint64_t b3 = crk_mem_live_bytes();
    for (int i = 0; i < N / 10; i++) {
        snprintf(key, sizeof(key), "vllm@llama-3-8b@tp0@blk%017d", i);
        assert_int_equal(tu_put(s3, tu_client(1), key, 16 * 1024, &three, 1), 0);
    }
    fprintf(stderr, "master metadata: %.1f bytes per 3-replica object with a %d-byte key\n",
            (double)(crk_mem_live_bytes() - b3) / (N / 10), KEY_LEN);
    crk_service_destroy(s3);

    /* Everything is given back when the objects go. */
    uint64_t removed = 0;
    assert_int_equal(crk_remove_all(s, true, 2, &removed), 0);
    assert_int_equal(removed, N);
    assert_true(crk_mem_live_bytes() < after);
    crk_service_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_per_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
