/*
 * kv_table_test.c - the metadata server's hash map: put/get/del/overwrite,
 * binary and empty values, growth through many keys, and accounting.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "mdserver/kv_table.h"

static int setup_table(void **state)
{
    crd_kv_table *t = NULL;
    if (crd_kv_table_create(&t) != 0)
        return -1;
    *state = t;
    return 0;
}

static int teardown_table(void **state)
{
    crd_kv_table_destroy(*state);
    return 0;
}

static void assert_value(crd_kv_table *t, const char *key, const void *want, size_t want_len)
{
    void *v = NULL;
    size_t len = 1234;
    assert_int_equal(crd_kv_table_get(t, key, &v, &len), 0);
    assert_non_null(v);
    assert_int_equal(len, want_len);
    if (want_len > 0)
        assert_memory_equal(v, want, want_len);
    free(v);
}

static void test_put_get_del(void **state)
{
    crd_kv_table *t = *state;
    assert_int_equal(crd_kv_table_count(t), 0);
    assert_int_equal(crd_kv_table_put(t, "mooncake/ram/a", "alpha", 5), 0);
    assert_int_equal(crd_kv_table_put(t, "mooncake/rpc_meta/a", "beta!", 5), 0);
    assert_int_equal(crd_kv_table_count(t), 2);
    assert_int_equal(crd_kv_table_value_bytes(t), 10);
    assert_value(t, "mooncake/ram/a", "alpha", 5);
    assert_value(t, "mooncake/rpc_meta/a", "beta!", 5);

    assert_int_equal(crd_kv_table_del(t, "mooncake/ram/a"), 0);
    assert_int_equal(crd_kv_table_count(t), 1);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(crd_kv_table_get(t, "mooncake/ram/a", &v, &len), CR_ERR_NOT_FOUND);
    assert_null(v);
    assert_non_null(strstr(cr_last_error_message(), "mooncake/ram/a"));
    assert_int_equal(crd_kv_table_del(t, "mooncake/ram/a"), CR_ERR_NOT_FOUND);
    assert_int_equal(crd_kv_table_value_bytes(t), 5);
}

static void test_overwrite(void **state)
{
    crd_kv_table *t = *state;
    assert_int_equal(crd_kv_table_put(t, "k", "first value", 11), 0);
    assert_int_equal(crd_kv_table_put(t, "k", "2nd", 3), 0);
    assert_int_equal(crd_kv_table_count(t), 1);
    assert_int_equal(crd_kv_table_value_bytes(t), 3);
    assert_value(t, "k", "2nd", 3);
    /* overwrite with an empty value, then with a real one again */
    assert_int_equal(crd_kv_table_put(t, "k", NULL, 0), 0);
    assert_value(t, "k", NULL, 0);
    assert_int_equal(crd_kv_table_value_bytes(t), 0);
    char *owned = malloc(4);
    memcpy(owned, "own!", 4);
    assert_int_equal(crd_kv_table_put_owned(t, "k", owned, 4), 0);
    assert_value(t, "k", "own!", 4);
    assert_int_equal(crd_kv_table_count(t), 1);
}

static void test_binary_and_empty(void **state)
{
    crd_kv_table *t = *state;
    const unsigned char bin[] = {0x00, 0x01, 0x00, 0xff, 0x80, 0x00};
    assert_int_equal(crd_kv_table_put(t, "bin", bin, sizeof(bin)), 0);
    assert_value(t, "bin", bin, sizeof(bin));
    assert_int_equal(crd_kv_table_put(t, "empty", "", 0), 0);
    assert_value(t, "empty", NULL, 0);
    /* the empty key is just another key to the table */
    assert_int_equal(crd_kv_table_put(t, "", "x", 1), 0);
    assert_value(t, "", "x", 1);
    /* keys that share prefixes or differ only in the last byte stay apart */
    assert_int_equal(crd_kv_table_put(t, "bin2", "two", 3), 0);
    assert_int_equal(crd_kv_table_put(t, "bim", "m", 1), 0);
    assert_value(t, "bin", bin, sizeof(bin));
    assert_value(t, "bin2", "two", 3);
    assert_value(t, "bim", "m", 1);
    assert_int_equal(crd_kv_table_count(t), 5);
}

static void test_many_keys(void **state)
{
    crd_kv_table *t = *state;
    enum { N = 20000 };
    char key[64];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "mooncake/ram/segment-%d", i);
        assert_int_equal(crd_kv_table_put(t, key, &i, sizeof(i)), 0);
    }
    assert_int_equal(crd_kv_table_count(t), N);
    assert_int_equal(crd_kv_table_value_bytes(t), (size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "mooncake/ram/segment-%d", i);
        assert_value(t, key, &i, sizeof(i));
    }
    /* delete the even ones, check the odd ones survive */
    for (int i = 0; i < N; i += 2) {
        snprintf(key, sizeof(key), "mooncake/ram/segment-%d", i);
        assert_int_equal(crd_kv_table_del(t, key), 0);
    }
    assert_int_equal(crd_kv_table_count(t), N / 2);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "mooncake/ram/segment-%d", i);
        void *v = NULL;
        size_t len = 0;
        int rc = crd_kv_table_get(t, key, &v, &len);
        if (i % 2 == 0) {
            assert_int_equal(rc, CR_ERR_NOT_FOUND);
        } else {
            assert_int_equal(rc, 0);
            assert_memory_equal(v, &i, sizeof(i));
            free(v);
        }
    }
}

static void test_long_key(void **state)
{
    crd_kv_table *t = *state;
    size_t n = 100000;
    char *key = malloc(n + 1);
    memset(key, 'k', n);
    key[n] = '\0';
    assert_int_equal(crd_kv_table_put(t, key, "v", 1), 0);
    assert_value(t, key, "v", 1);
    key[n - 1] = 'j';
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(crd_kv_table_get(t, key, &v, &len), CR_ERR_NOT_FOUND);
    free(key);
}

static void test_destroy_null(void **state)
{
    crd_kv_table_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_get_del, setup_table, teardown_table),
        cmocka_unit_test_setup_teardown(test_overwrite, setup_table, teardown_table),
        cmocka_unit_test_setup_teardown(test_binary_and_empty, setup_table, teardown_table),
        cmocka_unit_test_setup_teardown(test_many_keys, setup_table, teardown_table),
        cmocka_unit_test_setup_teardown(test_long_key, setup_table, teardown_table),
        cmocka_unit_test(test_destroy_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
