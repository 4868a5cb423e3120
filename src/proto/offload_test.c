/*
 * offload_test.c - the disk tier's OFFLOAD_HEARTBEAT body (proto/offload.h):
 * round trips with every kind, re-encoding to the same bytes, every proper
 * prefix refused, and the encoder's and decoder's bounds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "proto/offload.h"

static crp_off_msg sample(crp_off_item *items)
{
    static char k1[] = "key-1", k2[] = "\x1ftenant\x1fkey-2", k3[] = "k3";
    items[0] = (crp_off_item){CRP_OFF_OFFLOAD, 0, k1, 7, 0x7f0000001000ull, 1 << 20, 0};
    items[1] = (crp_off_item){CRP_OFF_STAGE, CR_ERR_DISK_IO, k2, UINT64_MAX, 1, 2, 5000};
    items[2] = (crp_off_item){CRP_OFF_EVICTED, 0, k3, 0, 0, 0, 0};
    crp_off_msg m = {.segment = "127.0.0.1:17000", .n_stats = CRP_OFF_NSTATS, .more = true};
    for (size_t i = 0; i < CRP_OFF_NSTATS; i++)
        m.stats[i] = i * 1000 + 1;
    m.n_items = 3;
    m.items = items;
    return m;
}

static void test_round_trip(void **state)
{
    (void)state;
    crp_off_item items[3];
    crp_off_msg m = sample(items);
    crp_buf b = {0}, again = {0};
    assert_int_equal(crp_off_encode(&m, &b), 0);
    crp_off_msg d;
    assert_int_equal(crp_off_decode(b.data, b.len, &d), 0);
    assert_string_equal(d.segment, m.segment);
    assert_int_equal(d.n_stats, m.n_stats);
    assert_memory_equal(d.stats, m.stats, m.n_stats * sizeof(uint64_t));
    assert_true(d.more);
    assert_int_equal(d.n_items, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(d.items[i].kind, items[i].kind);
        assert_int_equal(d.items[i].status, items[i].status);
        assert_string_equal(d.items[i].key, items[i].key);
        assert_true(d.items[i].version == items[i].version);
        assert_true(d.items[i].addr == items[i].addr);
        assert_true(d.items[i].size == items[i].size);
        assert_true(d.items[i].ttl_ms == items[i].ttl_ms);
    }
    assert_int_equal(crp_off_encode(&d, &again), 0);
    assert_int_equal(again.len, b.len);
    assert_memory_equal(again.data, b.data, b.len);
    crp_off_clear(&d);
    /* Every proper prefix is refused, the output untouched. */
    for (size_t n = 0; n < b.len; n++) {
        crp_off_msg x;
        memset(&x, 0x5a, sizeof(x));
        assert_int_equal(crp_off_decode(b.data, n, &x), CR_ERR_MALFORMED_FRAME);
        assert_int_equal(((unsigned char *)&x)[0], 0x5a);
    }
    crp_buf_free(&b);
    crp_buf_free(&again);
}

static void test_empty(void **state)
{
    (void)state;
    crp_off_msg m = {0};
    crp_buf b = {0};
    assert_int_equal(crp_off_encode(&m, &b), 0);
    crp_off_msg d;
    assert_int_equal(crp_off_decode(b.data, b.len, &d), 0);
    assert_string_equal(d.segment, "");
    assert_int_equal(d.n_items, 0);
    assert_null(d.items);
    crp_off_clear(&d);
    crp_buf_free(&b);
}

static void test_encoder_refuses(void **state)
{
    (void)state;
    crp_off_item items[3];
    crp_off_msg m = sample(items);
    crp_buf b = {0};
    items[1].kind = 9;
    assert_int_equal(crp_off_encode(&m, &b), CR_INVALID_PARAMS);
    assert_int_equal(b.len, 0);
    items[1].kind = CRP_OFF_STAGE;
    items[2].key = NULL;
    assert_int_equal(crp_off_encode(&m, &b), CR_INVALID_PARAMS);
    items[2].key = "k";
    items[2].status = 3;
    assert_int_equal(crp_off_encode(&m, &b), CR_INVALID_PARAMS);
    items[2].status = 0;
    m.n_stats = CRP_OFF_MAX_STATS + 1;
    assert_int_equal(crp_off_encode(&m, &b), CR_INVALID_PARAMS);
    assert_int_equal(b.len, 0);
    crp_buf_free(&b);
}

/* Hand-built bodies with one bad field each. */
static void test_decoder_refuses(void **state)
{
    (void)state;
    for (int bad = 0; bad < 5; bad++) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 4);
        msgpack_pack_str_with_body(&pk, "seg", 3);
        msgpack_pack_str_with_body(&pk, "s", 1);
        msgpack_pack_str_with_body(&pk, "st", 2);
        msgpack_pack_array(&pk, 0);
        msgpack_pack_str_with_body(&pk, "more", 4);
        msgpack_pack_false(&pk);
        msgpack_pack_str_with_body(&pk, "it", 2);
        msgpack_pack_array(&pk, 1);
        msgpack_pack_map(&pk, 7);
        const char *keys[] = {"t", "k", "v", "a", "l", "ttl", "st"};
        for (int f = 0; f < 7; f++) {
            msgpack_pack_str_with_body(&pk, keys[f], strlen(keys[f]));
            if (f == 0)
                msgpack_pack_uint8(&pk, bad == 0 ? 0 : bad == 1 ? 8 : 1);
            else if (f == 1)
                msgpack_pack_str_with_body(&pk, "k", bad == 2 ? 0 : 1);
            else if (f == 6)
                msgpack_pack_int32(&pk, bad == 3 ? 5 : 0);
            else if (f == 2 && bad == 4)
                msgpack_pack_str_with_body(&pk, "x", 1);
            else
                msgpack_pack_uint64(&pk, 1);
        }
        crp_off_msg d;
        assert_int_equal(crp_off_decode(sb.data, sb.size, &d), CR_ERR_MALFORMED_FRAME);
        assert_true(cr_last_error_message()[0] != '\0');
        msgpack_sbuffer_destroy(&sb);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_encoder_refuses),
        cmocka_unit_test(test_decoder_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
