/*
 * frame_test.c - the 32-byte frame header: exact byte layout, round trips
 * and every rejection crp_header_decode promises, each with its status code
 * and with the output left untouched.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "crescent/status.h"
#include "proto/frame.h"

static crp_header sample(uint8_t type)
{
    crp_header h = {.version = CRP_VERSION,
                    .type = type,
                    .flags = 0,
                    .body_len = 0,
                    .status = 0,
                    .request_id = 0,
                    .data_len = 0};
    return h;
}

static void assert_header_eq(const crp_header *a, const crp_header *b)
{
    assert_int_equal(a->version, b->version);
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->body_len, b->body_len);
    assert_int_equal(a->status, b->status);
    assert_true(a->request_id == b->request_id);
    assert_true(a->data_len == b->data_len);
}

/* Decoding must fail with want and leave out exactly as it was. */
static void expect_reject(const uint8_t wire[CRP_HEADER_SIZE], int want)
{
    crp_header out, before;
    memset(&out, 0xA5, sizeof(out));
    memcpy(&before, &out, sizeof(out));
    assert_int_equal(crp_header_decode(wire, &out), want);
    assert_memory_equal(&out, &before, sizeof(out));
    assert_true(cr_last_error_message()[0] != '\0');
}

static void test_exact_layout(void **state)
{
    (void)state;
    crp_header h = sample(CRP_WRITE_REQ);
    h.body_len = 0x000B0C0Du;
    h.status = -3017; /* 0xFFFFF437 */
    h.request_id = 0x1122334455667788ull;
    h.data_len = 0x0000000001020304ull;
    uint8_t wire[CRP_HEADER_SIZE];
    crp_header_encode(&h, wire);
    static const uint8_t want[CRP_HEADER_SIZE] = {
        'C',  'R',  'S',  'C',  0x01, 0x0C, 0x00, 0x00, 0x0D, 0x0C, 0x0B,
        0x00, 0x37, 0xF4, 0xFF, 0xFF, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33,
        0x22, 0x11, 0x04, 0x03, 0x02, 0x01, 0x00, 0x00, 0x00, 0x00,
    };
    assert_memory_equal(wire, want, CRP_HEADER_SIZE);
    crp_header out;
    assert_int_equal(crp_header_decode(wire, &out), 0);
    assert_header_eq(&out, &h);
}

static void test_round_trip_every_type(void **state)
{
    (void)state;
    for (int t = CRP_CHALLENGE; t < CRP_TYPE_END; t++) {
        crp_header h = sample((uint8_t)t);
        h.body_len = CRP_MAX_BODY;
        h.status = INT32_MIN;
        h.request_id = UINT64_MAX;
        if (t == CRP_READ_RESP || t == CRP_WRITE_REQ)
            h.data_len = CRP_MAX_DATA;
        uint8_t wire[CRP_HEADER_SIZE];
        crp_header_encode(&h, wire);
        crp_header out;
        assert_int_equal(crp_header_decode(wire, &out), 0);
        assert_header_eq(&out, &h);

        h.body_len = 0;
        h.status = INT32_MAX;
        h.request_id = 0;
        h.data_len = 0;
        crp_header_encode(&h, wire);
        assert_int_equal(crp_header_decode(wire, &out), 0);
        assert_header_eq(&out, &h);
    }
}

static void test_bad_magic(void **state)
{
    (void)state;
    crp_header h = sample(CRP_HELLO);
    uint8_t wire[CRP_HEADER_SIZE];
    for (int i = 0; i < 4; i++) {
        crp_header_encode(&h, wire);
        wire[i] ^= 0x20;
        expect_reject(wire, CR_ERR_MALFORMED_FRAME);
    }
    /* Byte-swapped magic ("CSRC" read big-endian) is not accepted either. */
    crp_header_encode(&h, wire);
    wire[0] = 'C';
    wire[1] = 'S';
    wire[2] = 'R';
    wire[3] = 'C';
    expect_reject(wire, CR_ERR_MALFORMED_FRAME);
    memset(wire, 0, sizeof(wire));
    expect_reject(wire, CR_ERR_MALFORMED_FRAME);
}

static void test_version_mismatch(void **state)
{
    (void)state;
    uint8_t wire[CRP_HEADER_SIZE];
    crp_header h = sample(CRP_HELLO);
    h.version = 2;
    crp_header_encode(&h, wire);
    expect_reject(wire, CR_ERR_VERSION_MISMATCH);
    h.version = 0;
    crp_header_encode(&h, wire);
    expect_reject(wire, CR_ERR_VERSION_MISMATCH);
    h.version = 255;
    crp_header_encode(&h, wire);
    expect_reject(wire, CR_ERR_VERSION_MISMATCH);
    /* A newer version wins over fields that version 1 would reject. */
    h.version = 2;
    h.type = 200;
    h.flags = 0xFFFF;
    h.body_len = UINT32_MAX;
    h.data_len = UINT64_MAX;
    crp_header_encode(&h, wire);
    expect_reject(wire, CR_ERR_VERSION_MISMATCH);
}

static void test_unknown_type(void **state)
{
    (void)state;
    static const uint8_t bad[] = {0, CRP_TYPE_END, CRP_TYPE_END + 1, 100, 255};
    uint8_t wire[CRP_HEADER_SIZE];
    for (size_t i = 0; i < sizeof(bad); i++) {
        crp_header h = sample(bad[i]);
        crp_header_encode(&h, wire);
        expect_reject(wire, CR_ERR_MALFORMED_FRAME);
    }
}

static void test_flags_reserved(void **state)
{
    (void)state;
    uint8_t wire[CRP_HEADER_SIZE];
    crp_header h = sample(CRP_PROBE);
    h.flags = 1;
    crp_header_encode(&h, wire);
    expect_reject(wire, CR_ERR_MALFORMED_FRAME);
    h.flags = 0x8000;
    crp_header_encode(&h, wire);
    expect_reject(wire, CR_ERR_MALFORMED_FRAME);
}

static void test_body_too_large(void **state)
{
    (void)state;
    uint8_t wire[CRP_HEADER_SIZE];
    crp_header h = sample(CRP_DESC_REPLY);
    h.body_len = CRP_MAX_BODY + 1;
    crp_header_encode(&h, wire);
    expect_reject(wire, CR_ERR_MALFORMED_FRAME);
    h.body_len = UINT32_MAX;
    crp_header_encode(&h, wire);
    expect_reject(wire, CR_ERR_MALFORMED_FRAME);
}

static void test_data_too_large(void **state)
{
    (void)state;
    uint8_t wire[CRP_HEADER_SIZE];
    crp_header h = sample(CRP_READ_RESP);
    h.data_len = CRP_MAX_DATA + 1;
    crp_header_encode(&h, wire);
    expect_reject(wire, CR_ERR_MALFORMED_FRAME);
    h.type = CRP_WRITE_REQ;
    h.data_len = UINT64_MAX;
    crp_header_encode(&h, wire);
    expect_reject(wire, CR_ERR_MALFORMED_FRAME);
}

static void test_data_len_on_type_without_data(void **state)
{
    (void)state;
    uint8_t wire[CRP_HEADER_SIZE];
    for (int t = CRP_CHALLENGE; t < CRP_TYPE_END; t++) {
        if (t == CRP_READ_RESP || t == CRP_WRITE_REQ)
            continue;
        crp_header h = sample((uint8_t)t);
        h.data_len = 1;
        crp_header_encode(&h, wire);
        expect_reject(wire, CR_ERR_MALFORMED_FRAME);
    }
}

static void test_type_names(void **state)
{
    (void)state;
    assert_string_equal(crp_type_name(CRP_CHALLENGE), "CHALLENGE");
    assert_string_equal(crp_type_name(CRP_HELLO), "HELLO");
    assert_string_equal(crp_type_name(CRP_HELLO_ACK), "HELLO_ACK");
    assert_string_equal(crp_type_name(CRP_DESC_GET), "DESC_GET");
    assert_string_equal(crp_type_name(CRP_DESC_REPLY), "DESC_REPLY");
    assert_string_equal(crp_type_name(CRP_NOTIFY), "NOTIFY");
    assert_string_equal(crp_type_name(CRP_NOTIFY_ACK), "NOTIFY_ACK");
    assert_string_equal(crp_type_name(CRP_PROBE), "PROBE");
    assert_string_equal(crp_type_name(CRP_PROBE_ACK), "PROBE_ACK");
    assert_string_equal(crp_type_name(CRP_READ_REQ), "READ_REQ");
    assert_string_equal(crp_type_name(CRP_READ_RESP), "READ_RESP");
    assert_string_equal(crp_type_name(CRP_WRITE_REQ), "WRITE_REQ");
    assert_string_equal(crp_type_name(CRP_WRITE_ACK), "WRITE_ACK");
    assert_string_equal(crp_type_name(CRP_ERROR), "ERROR");
    assert_string_equal(crp_type_name(0), "?");
    assert_string_equal(crp_type_name(CRP_TYPE_END), "?");
    assert_string_equal(crp_type_name(-1), "?");
    assert_string_equal(crp_type_name(1 << 20), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_layout),
        cmocka_unit_test(test_round_trip_every_type),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_version_mismatch),
        cmocka_unit_test(test_unknown_type),
        cmocka_unit_test(test_flags_reserved),
        cmocka_unit_test(test_body_too_large),
        cmocka_unit_test(test_data_too_large),
        cmocka_unit_test(test_data_len_on_type_without_data),
        cmocka_unit_test(test_type_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
