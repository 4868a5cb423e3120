/*
 * store_engine_test.c - a store on a borrowed engine (cr_store_config.engine):
 * the store registers its memory with the caller's engine, puts and gets
 * work through it, and closing the store unregisters exactly what the store
 * registered while the engine lives on and stays usable.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crescent/store.h"
#include "store_harness.h"

static void store_on_a_borrowed_engine(void **state)
{
    (void)state;
    sh_master m;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    cr_engine_config ec;
    cr_engine_config_init(&ec);
    cr_engine *e;
    assert_int_equal(cr_engine_create(&ec, &e), 0);
    static uint8_t mine[4096];
    assert_int_equal(cr_engine_register(e, mine, sizeof(mine), "cpu:0", true), 0);

    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = m.addr;
    cfg.global_segment_size = 8 << 20;
    cfg.local_buffer_size = 1 << 20;
    cfg.engine = e;
    cr_store *s;
    assert_int_equal(cr_store_setup(&cfg, &s), 0);
    assert_ptr_equal(cr_store_engine(s), e);
    assert_int_equal(cr_engine_registration_count(e), 3); /* ours + segment + staging */
    char name[300], engine_name[300];
    assert_int_equal(cr_store_hostname(s, name, sizeof(name)), 0);
    assert_int_equal(cr_engine_segment_name(e, engine_name, sizeof(engine_name)), 0);
    assert_string_equal(name, engine_name);

    uint8_t value[10000];
    for (size_t i = 0; i < sizeof(value); i++)
        value[i] = (uint8_t)(i * 7);
    assert_int_equal(cr_store_put(s, "borrowed", value, sizeof(value), NULL), 0);
    void *out = NULL;
    assert_int_equal(cr_store_get(s, "borrowed", &out), (int64_t)sizeof(value));
    assert_memory_equal(out, value, sizeof(value));
    free(out);

    cr_store_destroy(s);
    /* The store's registrations are gone; the caller's stays; the engine works. */
    assert_int_equal(cr_engine_registration_count(e), 1);
    assert_int_equal(cr_engine_unregister(e, mine), 0);
    static uint8_t again[4096];
    assert_int_equal(cr_engine_register(e, again, sizeof(again), "cpu:0", true), 0);
    assert_int_equal(cr_engine_unregister(e, again), 0);
    cr_engine_destroy(e);
    assert_int_equal(sh_master_stop(&m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(store_on_a_borrowed_engine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
