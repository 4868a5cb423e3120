/*
 * keymap_test.c - the session table's string map: put/get/replace/remove,
 * growth past many keys, tombstones reused, and a churn of inserts and
 * removals checked against a reference array.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/keymap.h"

static void basic(void **state)
{
    (void)state;
    crc_keymap m;
    crc_keymap_init(&m);
    int a = 1, b = 2;
    void *old = &a;
    assert_null(crc_keymap_get(&m, "x"));
    assert_null(crc_keymap_remove(&m, "x"));
    assert_int_equal(crc_keymap_put(&m, "x", &a, &old), 0);
    assert_null(old);
    assert_ptr_equal(crc_keymap_get(&m, "x"), &a);
    assert_int_equal(crc_keymap_put(&m, "x", &b, &old), 0);
    assert_ptr_equal(old, &a);
    assert_ptr_equal(crc_keymap_get(&m, "x"), &b);
    assert_int_equal(m.used, 1);
    assert_ptr_equal(crc_keymap_remove(&m, "x"), &b);
    assert_null(crc_keymap_get(&m, "x"));
    assert_int_equal(m.used, 0);
    crc_keymap_fini(&m);
}

static void count_one(void *value, void *arg)
{
    (void)value;
    (*(size_t *)arg)++;
}

static void growth_and_churn(void **state)
{
    (void)state;
    enum { N = 5000 };
    static int vals[N];
    static uint8_t present[N];
    crc_keymap m;
    crc_keymap_init(&m);
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "key-%d", i);
        assert_int_equal(crc_keymap_put(&m, key, &vals[i], NULL), 0);
        present[i] = 1;
    }
    /* Remove every third, re-insert some, many rounds: tombstones are reused. */
    unsigned seed = 7;
    for (int round = 0; round < 20000; round++) {
        seed = seed * 1103515245u + 12345u;
        int i = (int)((seed >> 8) % N);
        snprintf(key, sizeof(key), "key-%d", i);
        if (present[i]) {
            assert_ptr_equal(crc_keymap_remove(&m, key), &vals[i]);
            present[i] = 0;
        } else {
            assert_int_equal(crc_keymap_put(&m, key, &vals[i], NULL), 0);
            present[i] = 1;
        }
    }
    size_t live = 0, counted = 0;
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "key-%d", i);
        assert_ptr_equal(crc_keymap_get(&m, key), present[i] ? &vals[i] : NULL);
        live += present[i];
    }
    assert_int_equal(m.used, live);
    crc_keymap_each(&m, count_one, &counted);
    assert_int_equal(counted, live);
    assert_true(m.cap < 4 * 16384); /* tombstones did not make it grow without bound */
    crc_keymap_fini(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(basic),
        cmocka_unit_test(growth_and_churn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
