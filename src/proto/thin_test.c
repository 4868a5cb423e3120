/*
 * thin_test.c - the thin-client RPC codecs (proto/thin.h).
 *
 * Every op's request is built with every field the op may carry (required
 * and optional) and with only the required ones, and every reply with every
 * field it may carry; each is encoded, decoded, compared field by field and
 * re-encoded to the same bytes. Rejections: every proper prefix of a
 * message, the cross-field counts (extents per key, their sum, offsets per
 * extent), overflowing ranges, unknown flag bits, descriptor counts, and
 * unknown opcodes; the encoder refuses missing and foreign fields. Every
 * rejection checks the status, that the output was not touched and that
 * an error message was recorded.
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
#include "proto/thin.h"

static const int ALL_OPS[] = {
#define OP_LIST_(name, value, str, rq, opt, rs) value,
    CRP_THIN_OP_TABLE(OP_LIST_)
#undef OP_LIST_
};
#define N_OPS (sizeof(ALL_OPS) / sizeof(ALL_OPS[0]))

static char *keys3[] = {"a", "", "layer/0/block/17"};
static uint32_t counts3[] = {2, 0, 1};
static crp_thin_ext ext3[] = {{0, 0, 4096}, {7, 1ull << 40, 1}, {0, UINT64_MAX - 5, 5}};
static uint64_t offs3[] = {0, 4096, 12};
static uint64_t vals4[] = {1, 0, 4096, UINT64_MAX};
static char *pref2[] = {"seg-a", "host:1234"};
static int64_t results3[] = {0, CR_OBJECT_NOT_FOUND, INT64_MAX};
static char *names2[] = {"node-a:17000", ""};
static crp_thin_replica reps2[] = {{"node-a:17000", 0x1000, 4096, true}, {"node-b:1", 0, 0, false}};

static void fill_req(crp_thin_req *m, int op, uint32_t fields)
{
    memset(m, 0, sizeof(*m));
    m->op = (uint16_t)op;
    m->fields = fields;
    m->flags = CRP_THIN_FLAG_UPSERT | CRP_THIN_FLAG_SINGLE;
    m->n_keys = 3;
    m->keys = keys3;
    m->counts = counts3;
    m->n_ext = 3;
    m->ext = ext3;
    m->offsets = offs3;
    m->n_vals = 4;
    m->vals = vals4;
    m->cfg = (crp_rpc_replica_config){2, true, 1, true, 777, 2, pref2, true};
    m->text = "^layer/[0-9]+$";
    m->id = 42;
    m->addr = 0x7f0000000000ull;
    m->len = 2ull << 20;
    m->file_offset = 4096;
    m->n_fds = 1;
    m->version = CRP_THIN_VERSION;
    m->pid = 12345;
    m->pool_size = 64ull << 20;
    m->buffer_size = 16ull << 20;
    m->session = 9;
    memset(m->token, 0xAB, sizeof(m->token));
    memset(m->mac, 0xCD, sizeof(m->mac));
    m->tenant = "team-a";
}

static void assert_req_equal(const crp_thin_req *a, const crp_thin_req *b)
{
    assert_int_equal(a->op, b->op);
    assert_int_equal(a->fields, b->fields);
    uint32_t f = a->fields;
    if (f & CRP_THIN_F_KEYS) {
        assert_int_equal(a->n_keys, b->n_keys);
        for (size_t i = 0; i < a->n_keys; i++)
            assert_string_equal(a->keys[i], b->keys[i]);
    }
    if (f & CRP_THIN_F_EXT) {
        assert_int_equal(a->n_ext, b->n_ext);
        for (size_t i = 0; i < a->n_keys; i++)
            assert_int_equal(a->counts[i], b->counts[i]);
        for (size_t i = 0; i < a->n_ext; i++) {
            assert_int_equal(a->ext[i].region, b->ext[i].region);
            assert_true(a->ext[i].offset == b->ext[i].offset);
            assert_true(a->ext[i].len == b->ext[i].len);
        }
    }
    if (f & CRP_THIN_F_OFFS)
        for (size_t i = 0; i < a->n_ext; i++)
            assert_true(a->offsets[i] == b->offsets[i]);
    if (f & CRP_THIN_F_VALS) {
        assert_int_equal(a->n_vals, b->n_vals);
        for (size_t i = 0; i < a->n_vals; i++)
            assert_true(a->vals[i] == b->vals[i]);
    }
    if (f & CRP_THIN_F_CFG) {
        assert_int_equal(a->cfg.replica_num, b->cfg.replica_num);
        assert_int_equal(a->cfg.hard_pin, b->cfg.hard_pin);
        assert_int_equal(a->cfg.soft_pin_action, b->cfg.soft_pin_action);
        assert_int_equal(a->cfg.has_soft_pin_ttl, b->cfg.has_soft_pin_ttl);
        assert_true(a->cfg.soft_pin_ttl_ms == b->cfg.soft_pin_ttl_ms);
        assert_int_equal(a->cfg.n_preferred, b->cfg.n_preferred);
        for (size_t i = 0; i < a->cfg.n_preferred; i++)
            assert_string_equal(a->cfg.preferred_segments[i], b->cfg.preferred_segments[i]);
        assert_int_equal(a->cfg.prefer_same_node, b->cfg.prefer_same_node);
    }
    if (f & CRP_THIN_F_FLAGS)
        assert_int_equal(a->flags, b->flags);
    if (f & CRP_THIN_F_TEXT)
        assert_string_equal(a->text, b->text);
    if (f & CRP_THIN_F_ID)
        assert_true(a->id == b->id);
    if (f & CRP_THIN_F_REGION) {
        assert_true(a->addr == b->addr && a->len == b->len);
        assert_true(a->file_offset == b->file_offset);
    }
    if (f & CRP_THIN_F_NFD)
        assert_int_equal(a->n_fds, b->n_fds);
    if (f & CRP_THIN_F_HELLO) {
        assert_int_equal(a->version, b->version);
        assert_true(a->pid == b->pid && a->pool_size == b->pool_size);
        assert_true(a->buffer_size == b->buffer_size);
    }
    if (f & CRP_THIN_F_ATTACH) {
        assert_true(a->session == b->session);
        assert_memory_equal(a->token, b->token, sizeof(a->token));
    }
    if (f & CRP_THIN_F_MAC)
        assert_memory_equal(a->mac, b->mac, sizeof(a->mac));
    if (f & CRP_THIN_F_TENANT)
        assert_string_equal(a->tenant, b->tenant);
}

/* Encode m, decode, compare, re-encode to the same bytes. */
static void round_trip_req(const crp_thin_req *m)
{
    crp_buf b1 = {0}, b2 = {0};
    crp_thin_req back;
    assert_int_equal(crp_thin_req_encode(m, &b1), 0);
    assert_int_equal(crp_thin_req_decode(b1.data, b1.len, &back), 0);
    assert_req_equal(m, &back);
    assert_int_equal(crp_thin_req_encode(&back, &b2), 0);
    assert_int_equal(b1.len, b2.len);
    assert_memory_equal(b1.data, b2.data, b1.len);
    crp_thin_req_clear(&back);
    crp_buf_free(&b1);
    crp_buf_free(&b2);
}

static void test_round_trip_requests(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_OPS; i++) {
        int op = ALL_OPS[i];
        crp_thin_req m;
        uint32_t req = crp_thin_req_required(op), opt = crp_thin_req_optional(op);
        fill_req(&m, op, req | opt);
        round_trip_req(&m);
        fill_req(&m, op, req);
        round_trip_req(&m);
    }
}

static void fill_resp(crp_thin_resp *m, int op, uint32_t fields)
{
    memset(m, 0, sizeof(*m));
    m->op = (uint16_t)op;
    m->status = CR_OBJECT_NOT_FOUND;
    m->message = "no such object";
    m->fields = fields;
    m->n_results = 3;
    m->results = results3;
    m->n_vals = 4;
    m->vals = vals4;
    m->value = -7;
    m->n_names = 2;
    m->names = names2;
    m->n_reps = 2;
    m->reps = reps2;
    m->session = 3;
    m->caps = 1;
    memset(m->token, 0x11, sizeof(m->token));
    m->segment = "127.0.0.1:17000";
    m->version = CRP_THIN_VERSION;
    memset(m->nonce, 0x22, sizeof(m->nonce));
    m->auth = true;
    m->tenant = "default";
}

static void test_round_trip_replies(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_OPS; i++) {
        int op = ALL_OPS[i];
        crp_thin_resp m, back;
        crp_buf b1 = {0}, b2 = {0};
        fill_resp(&m, op, crp_thin_resp_allowed(op));
        assert_int_equal(crp_thin_resp_encode(&m, &b1), 0);
        assert_int_equal(crp_thin_resp_decode(b1.data, b1.len, &back), 0);
        assert_int_equal(back.op, op);
        assert_int_equal(back.status, m.status);
        assert_string_equal(back.message, m.message);
        assert_int_equal(back.fields, m.fields);
        if (m.fields & CRP_THIN_R_RESULTS) {
            assert_int_equal(back.n_results, 3);
            for (size_t k = 0; k < 3; k++)
                assert_true(back.results[k] == results3[k]);
        }
        if (m.fields & CRP_THIN_R_REPS) {
            assert_int_equal(back.n_reps, 2);
            assert_string_equal(back.reps[0].segment, reps2[0].segment);
            assert_true(back.reps[0].complete && !back.reps[1].complete);
        }
        if (m.fields & CRP_THIN_R_SESSION) {
            assert_string_equal(back.segment, m.segment);
            assert_memory_equal(back.token, m.token, sizeof(m.token));
        }
        if (m.fields & CRP_THIN_R_CHALLENGE) {
            assert_true(back.auth);
            assert_memory_equal(back.nonce, m.nonce, sizeof(m.nonce));
        }
        assert_int_equal(crp_thin_resp_encode(&back, &b2), 0);
        assert_int_equal(b1.len, b2.len);
        assert_memory_equal(b1.data, b2.data, b1.len);
        crp_thin_resp_clear(&back);
        crp_buf_free(&b1);
        crp_buf_free(&b2);
    }
}

/* A decode that must fail with rc and leave out untouched. */
static void expect_req_fail(const void *data, size_t len, int rc)
{
    crp_thin_req out;
    memset(&out, 0x5A, sizeof(out));
    assert_int_equal(crp_thin_req_decode(data, len, &out), rc);
    for (size_t i = 0; i < sizeof(out); i++)
        assert_int_equal(((uint8_t *)&out)[i], 0x5A);
    assert_true(cr_last_error_message()[0] != '\0');
}

static void test_truncation(void **state)
{
    (void)state;
    crp_thin_req m;
    fill_req(&m, CRP_THIN_PUT, crp_thin_req_required(CRP_THIN_PUT) | CRP_THIN_F_CFG);
    crp_buf b = {0};
    assert_int_equal(crp_thin_req_encode(&m, &b), 0);
    for (size_t n = 0; n < b.len; n++)
        expect_req_fail(b.data, n, CR_ERR_MALFORMED_FRAME);
    uint8_t *longer = malloc(b.len + 1);
    memcpy(longer, b.data, b.len);
    longer[b.len] = 0xc0; /* a trailing nil */
    expect_req_fail(longer, b.len + 1, CR_ERR_MALFORMED_FRAME);
    free(longer);

    crp_thin_resp r, out;
    fill_resp(&r, CRP_THIN_GET_COPY, crp_thin_resp_allowed(CRP_THIN_GET_COPY));
    crp_buf rb = {0};
    assert_int_equal(crp_thin_resp_encode(&r, &rb), 0);
    for (size_t n = 0; n < rb.len; n++) {
        memset(&out, 0x5A, sizeof(out));
        assert_int_equal(crp_thin_resp_decode(rb.data, n, &out), CR_ERR_MALFORMED_FRAME);
    }
    crp_buf_free(&b);
    crp_buf_free(&rb);
}

/* Pack a PUT body by hand with the given nx / ex / of arrays. */
static void pack_put(crp_buf *b, const uint32_t *nx, size_t n_nx, const crp_thin_ext *ex,
                     size_t n_ex, const uint64_t *of, size_t n_of, uint32_t flags)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5 + (of ? 1 : 0));
    msgpack_pack_str_with_body(&pk, "op", 2);
    msgpack_pack_uint32(&pk, of ? CRP_THIN_PUT_RANGES : CRP_THIN_PUT);
    msgpack_pack_str_with_body(&pk, "ks", 2);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, "k1", 2);
    msgpack_pack_str_with_body(&pk, "k2", 2);
    msgpack_pack_str_with_body(&pk, "nx", 2);
    msgpack_pack_array(&pk, n_nx);
    for (size_t i = 0; i < n_nx; i++)
        msgpack_pack_uint32(&pk, nx[i]);
    msgpack_pack_str_with_body(&pk, "ex", 2);
    msgpack_pack_array(&pk, n_ex);
    for (size_t i = 0; i < n_ex; i++) {
        msgpack_pack_array(&pk, 3);
        msgpack_pack_uint32(&pk, ex[i].region);
        msgpack_pack_uint64(&pk, ex[i].offset);
        msgpack_pack_uint64(&pk, ex[i].len);
    }
    if (of != NULL) {
        msgpack_pack_str_with_body(&pk, "of", 2);
        msgpack_pack_array(&pk, n_of);
        for (size_t i = 0; i < n_of; i++)
            msgpack_pack_uint64(&pk, of[i]);
        msgpack_pack_str_with_body(&pk, "id", 2);
        msgpack_pack_uint32(&pk, 1);
    } else {
        msgpack_pack_str_with_body(&pk, "f", 1);
        msgpack_pack_uint32(&pk, flags);
    }
    crp_buf_reset(b);
    crp_buf_append(b, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static void test_cross_field_counts(void **state)
{
    (void)state;
    crp_buf b = {0};
    crp_thin_ext ex[2] = {{0, 0, 10}, {0, 10, 10}};
    uint64_t of[2] = {0, 10};
    crp_thin_req ok;

    pack_put(&b, (uint32_t[]){1, 1}, 2, ex, 2, NULL, 0, 0);
    assert_int_equal(crp_thin_req_decode(b.data, b.len, &ok), 0);
    crp_thin_req_clear(&ok);
    /* one count for two keys */
    pack_put(&b, (uint32_t[]){2}, 1, ex, 2, NULL, 0, 0);
    expect_req_fail(b.data, b.len, CR_ERR_MALFORMED_FRAME);
    /* counts that do not add up */
    pack_put(&b, (uint32_t[]){1, 2}, 2, ex, 2, NULL, 0, 0);
    expect_req_fail(b.data, b.len, CR_ERR_MALFORMED_FRAME);
    pack_put(&b, (uint32_t[]){UINT32_MAX, 3}, 2, ex, 2, NULL, 0, 0);
    expect_req_fail(b.data, b.len, CR_ERR_MALFORMED_FRAME);
    /* an extent whose end overflows */
    crp_thin_ext bad[2] = {{0, UINT64_MAX, 2}, {0, 0, 1}};
    pack_put(&b, (uint32_t[]){1, 1}, 2, bad, 2, NULL, 0, 0);
    expect_req_fail(b.data, b.len, CR_ERR_MALFORMED_FRAME);
    /* unknown flag bits */
    pack_put(&b, (uint32_t[]){1, 1}, 2, ex, 2, NULL, 0, 1u << 20);
    expect_req_fail(b.data, b.len, CR_ERR_MALFORMED_FRAME);
    /* ranged: one offset per extent */
    pack_put(&b, (uint32_t[]){1, 1}, 2, ex, 2, of, 2, 0);
    assert_int_equal(crp_thin_req_decode(b.data, b.len, &ok), 0);
    assert_true(ok.offsets[1] == 10);
    crp_thin_req_clear(&ok);
    pack_put(&b, (uint32_t[]){1, 1}, 2, ex, 2, of, 1, 0);
    expect_req_fail(b.data, b.len, CR_ERR_MALFORMED_FRAME);
    crp_buf_free(&b);
}

static void test_encoder_refusals(void **state)
{
    (void)state;
    crp_buf b = {0};
    crp_thin_req m;
    /* a required field missing */
    fill_req(&m, CRP_THIN_PUT, CRP_THIN_F_KEYS | CRP_THIN_F_FLAGS);
    assert_int_equal(crp_thin_req_encode(&m, &b), CR_INVALID_PARAMS);
    assert_int_equal(b.len, 0);
    /* a field the op does not use */
    fill_req(&m, CRP_THIN_HEALTH, CRP_THIN_F_KEYS);
    assert_int_equal(crp_thin_req_encode(&m, &b), CR_INVALID_PARAMS);
    /* counts that do not add up */
    fill_req(&m, CRP_THIN_PUT, crp_thin_req_required(CRP_THIN_PUT));
    m.n_ext = 2;
    assert_int_equal(crp_thin_req_encode(&m, &b), CR_INVALID_PARAMS);
    /* region of length 0, too many fds, unknown op, unknown flags */
    fill_req(&m, CRP_THIN_REGISTER, crp_thin_req_required(CRP_THIN_REGISTER));
    m.len = 0;
    assert_int_equal(crp_thin_req_encode(&m, &b), CR_INVALID_PARAMS);
    fill_req(&m, CRP_THIN_REGISTER, crp_thin_req_required(CRP_THIN_REGISTER));
    m.n_fds = CRP_THIN_MAX_FDS + 1;
    assert_int_equal(crp_thin_req_encode(&m, &b), CR_INVALID_PARAMS);
    fill_req(&m, 999, 0);
    assert_int_equal(crp_thin_req_encode(&m, &b), CR_INVALID_PARAMS);
    fill_req(&m, CRP_THIN_REMOVE, crp_thin_req_required(CRP_THIN_REMOVE));
    m.flags = 1u << 9;
    assert_int_equal(crp_thin_req_encode(&m, &b), CR_INVALID_PARAMS);
    /* a reply field the op does not answer with, a positive status */
    crp_thin_resp r;
    fill_resp(&r, CRP_THIN_HEALTH, CRP_THIN_R_RESULTS);
    assert_int_equal(crp_thin_resp_encode(&r, &b), CR_INVALID_PARAMS);
    fill_resp(&r, CRP_THIN_HEALTH, 0);
    r.status = 1;
    assert_int_equal(crp_thin_resp_encode(&r, &b), CR_INVALID_PARAMS);
    assert_int_equal(b.len, 0);
    crp_buf_free(&b);
}

static void test_unknown_op_and_foreign_fields(void **state)
{
    (void)state;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "op", 2);
    msgpack_pack_uint32(&pk, 999);
    expect_req_fail(sb.data, sb.size, CR_NOT_SUPPORTED);
    msgpack_sbuffer_clear(&sb);

    /* HEALTH with a "ks" it does not use: decoded without it, re-encoded shorter */
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "op", 2);
    msgpack_pack_uint32(&pk, CRP_THIN_HEALTH);
    msgpack_pack_str_with_body(&pk, "ks", 2);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_str_with_body(&pk, "x", 1);
    msgpack_pack_str_with_body(&pk, "zz", 2);
    msgpack_pack_nil(&pk);
    crp_thin_req m;
    assert_int_equal(crp_thin_req_decode(sb.data, sb.size, &m), 0);
    assert_int_equal(m.fields, 0);
    assert_int_equal(m.n_keys, 0);
    crp_buf b = {0};
    assert_int_equal(crp_thin_req_encode(&m, &b), 0);
    assert_true(b.len < sb.size);
    crp_thin_req_clear(&m);
    crp_buf_free(&b);
    msgpack_sbuffer_destroy(&sb);
}

static void test_bounds(void **state)
{
    (void)state;
    /* a batch of CRP_THIN_MAX_KEYS keys with one extent each fits one body */
    size_t n = CRP_THIN_MAX_KEYS;
    char **keys = calloc(n, sizeof(*keys));
    char(*kb)[16] = calloc(n, sizeof(*kb));
    uint32_t *counts = calloc(n, sizeof(*counts));
    crp_thin_ext *ext = calloc(n, sizeof(*ext));
    for (size_t i = 0; i < n; i++) {
        snprintf(kb[i], sizeof(kb[i]), "key-%zu", i);
        keys[i] = kb[i];
        counts[i] = 1;
        ext[i] = (crp_thin_ext){0, i * 4096, 4096};
    }
    crp_thin_req m = {.op = CRP_THIN_GET,
                      .fields = crp_thin_req_required(CRP_THIN_GET),
                      .n_keys = n,
                      .keys = keys,
                      .counts = counts,
                      .n_ext = n,
                      .ext = ext};
    round_trip_req(&m);
    m.n_keys = n + 1; /* one key too many (the arrays are not read) */
    crp_buf b = {0};
    assert_int_equal(crp_thin_req_encode(&m, &b), CR_INVALID_PARAMS);
    /* a key one byte too long */
    char *long_key = malloc(CRP_THIN_MAX_KEY + 2);
    memset(long_key, 'k', CRP_THIN_MAX_KEY + 1);
    long_key[CRP_THIN_MAX_KEY + 1] = '\0';
    crp_thin_req one = {
        .op = CRP_THIN_GET_SIZE, .fields = CRP_THIN_F_KEYS, .n_keys = 1, .keys = &long_key};
    assert_int_equal(crp_thin_req_encode(&one, &b), CR_INVALID_PARAMS);
    long_key[CRP_THIN_MAX_KEY] = '\0';
    round_trip_req(&one);
    free(long_key);
    free(keys);
    free(kb);
    free(counts);
    free(ext);
    crp_buf_free(&b);
}

static void test_op_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_OPS; i++) {
        assert_true(crp_thin_op_valid(ALL_OPS[i]));
        assert_string_not_equal(crp_thin_op_name(ALL_OPS[i]), "?");
        assert_int_equal(crp_thin_req_required(ALL_OPS[i]) & crp_thin_req_optional(ALL_OPS[i]), 0);
        for (size_t j = 0; j < i; j++)
            assert_int_not_equal(ALL_OPS[i], ALL_OPS[j]);
    }
    assert_false(crp_thin_op_valid(0));
    assert_string_equal(crp_thin_op_name(0), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_table),
        cmocka_unit_test(test_round_trip_requests),
        cmocka_unit_test(test_round_trip_replies),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_cross_field_counts),
        cmocka_unit_test(test_encoder_refusals),
        cmocka_unit_test(test_unknown_op_and_foreign_fields),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
