/*
 * messages_test.c - msgpack frame bodies.
 *
 * Round trips with edge values for every message, then rejection tests.
 * Malformed bodies are built directly with msgpack-c's packer from a small
 * table of (key, kind, value) fields, so one table per map yields the
 * "missing key", "wrong type", "duplicate key", "non-string key" and
 * "unknown key" variants mechanically. Every rejection asserts the exact
 * status and that the output struct was not touched.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "proto/messages.h"

/* ------------------------------------------------------------------------ */
/* Decoder table, so generic checks can run against any message type        */
/* ------------------------------------------------------------------------ */

typedef struct codec {
    const char *name;
    int (*decode)(const void *data, size_t len, void *out);
    void (*clear)(void *out);
    size_t size;
} codec;

static int dec_challenge(const void *d, size_t n, void *o)
{
    return crp_challenge_decode(d, n, o);
}
static int dec_hello(const void *d, size_t n, void *o)
{
    return crp_hello_decode(d, n, o);
}
static int dec_hello_ack(const void *d, size_t n, void *o)
{
    return crp_hello_ack_decode(d, n, o);
}
static int dec_descriptor(const void *d, size_t n, void *o)
{
    return crp_descriptor_decode(d, n, o);
}
static int dec_notify(const void *d, size_t n, void *o)
{
    return crp_notify_decode(d, n, o);
}
static int dec_data_req(const void *d, size_t n, void *o)
{
    return crp_data_req_decode(d, n, o);
}
static int dec_error(const void *d, size_t n, void *o)
{
    return crp_error_decode(d, n, o);
}
static void clr_none(void *o)
{
    (void)o;
}
static void clr_hello(void *o)
{
    crp_hello_clear(o);
}
static void clr_hello_ack(void *o)
{
    crp_hello_ack_clear(o);
}
static void clr_descriptor(void *o)
{
    crp_descriptor_clear(o);
}
static void clr_notify(void *o)
{
    crp_notify_clear(o);
}
static void clr_error(void *o)
{
    crp_error_clear(o);
}

static const codec C_CHALLENGE = {"challenge", dec_challenge, clr_none, sizeof(crp_challenge)};
static const codec C_HELLO = {"hello", dec_hello, clr_hello, sizeof(crp_hello)};
static const codec C_HELLO_ACK = {"hello_ack", dec_hello_ack, clr_hello_ack, sizeof(crp_hello_ack)};
static const codec C_DESCRIPTOR = {"descriptor", dec_descriptor, clr_descriptor,
                                   sizeof(crp_descriptor)};
static const codec C_NOTIFY = {"notify", dec_notify, clr_notify, sizeof(crp_notify)};
static const codec C_DATA_REQ = {"data request", dec_data_req, clr_none, sizeof(crp_data_req)};
static const codec C_ERROR = {"error", dec_error, clr_error, sizeof(crp_error)};

/* Decoding must fail with want, leave the output untouched, explain why. */
static void expect_reject_at(const codec *c, const void *data, size_t len, int want,
                             const char *file, int line)
{
    unsigned char *out = malloc(c->size);
    unsigned char *before = malloc(c->size);
    assert_non_null(out);
    assert_non_null(before);
    memset(out, 0xA5, c->size);
    memcpy(before, out, c->size);
    int rc = c->decode(data, len, out);
    if (rc == 0)
        c->clear(out);
    if (rc != want)
        fprintf(stderr, "%s:%d: %s decode of %zu bytes returned %d (%s), want %d\n", file, line,
                c->name, len, rc, cr_last_error_message(), want);
    _assert_int_equal((LargestIntegralType)rc, (LargestIntegralType)want, file, line);
    _assert_true(memcmp(out, before, c->size) == 0, "output untouched", file, line);
    _assert_true(cr_last_error_message()[0] != '\0', "error message set", file, line);
    free(out);
    free(before);
}

static void expect_accept_at(const codec *c, const void *data, size_t len, const char *file,
                             int line)
{
    unsigned char *out = calloc(1, c->size);
    assert_non_null(out);
    int rc = c->decode(data, len, out);
    if (rc != 0)
        fprintf(stderr, "%s:%d: %s decode of %zu bytes failed: %s\n", file, line, c->name, len,
                cr_last_error_message());
    _assert_int_equal((LargestIntegralType)rc, 0, file, line);
    c->clear(out);
    free(out);
}

#define expect_reject(c, d, n, want) expect_reject_at((c), (d), (n), (want), __FILE__, __LINE__)
#define expect_accept(c, d, n)       expect_accept_at((c), (d), (n), __FILE__, __LINE__)

static void expect_error_mentions(const char *needle)
{
    const char *msg = cr_last_error_message();
    if (strstr(msg, needle) == NULL)
        fprintf(stderr, "error message \"%s\" lacks \"%s\"\n", msg, needle);
    assert_non_null(strstr(msg, needle));
}

/* Every proper prefix fails cleanly; so does any trailing byte. */
static void check_truncation_and_trailing(const codec *c, const uint8_t *wire, size_t len)
{
    static const uint8_t junk[] = {0x00, 0xc0, 0x90, 0x80, 0xff, 0xc1};
    for (size_t n = 0; n < len; n++)
        expect_reject(c, wire, n, CR_ERR_MALFORMED_FRAME);
    uint8_t *longer = malloc(len + 2);
    assert_non_null(longer);
    memcpy(longer, wire, len);
    for (size_t j = 0; j < sizeof(junk); j++) {
        longer[len] = junk[j];
        expect_reject(c, longer, len + 1, CR_ERR_MALFORMED_FRAME);
    }
    longer[len] = 0x00;
    longer[len + 1] = 0x00;
    expect_reject(c, longer, len + 2, CR_ERR_MALFORMED_FRAME);
    free(longer);
}

/* ------------------------------------------------------------------------ */
/* Building bodies by hand                                                  */
/* ------------------------------------------------------------------------ */

typedef struct mp {
    msgpack_sbuffer sb;
    msgpack_packer pk;
} mp;

static void mp_init(mp *m)
{
    msgpack_sbuffer_init(&m->sb);
    msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
}

static void mp_free(mp *m)
{
    msgpack_sbuffer_destroy(&m->sb);
}

static void mp_raw(mp *m, const void *p, size_t n)
{
    msgpack_sbuffer_write(&m->sb, p, n);
}

static void mp_str(mp *m, const char *s)
{
    msgpack_pack_str_with_body(&m->pk, s, strlen(s));
}

typedef enum vkind {
    V_UINT,  /* u */
    V_INT,   /* i: signed field; a non-negative value packs as a uint */
    V_STR,   /* p, n */
    V_BIN,   /* p, n */
    V_BOOL,  /* u */
    V_NIL,   /* - */
    V_FLOAT, /* - */
    V_RAW,   /* p, n: pre-encoded msgpack (arrays, maps) */
    V_KINDS
} vkind;

typedef struct fld {
    const char *key; /* NULL: use the integer key 7 */
    vkind kind;
    uint64_t u;
    int64_t i;
    const void *p;
    size_t n;
    int optional;
} fld;

static fld f_uint(const char *k, uint64_t v)
{
    return (fld){k, V_UINT, v, 0, NULL, 0, 0};
}
static fld f_int(const char *k, int64_t v)
{
    return (fld){k, V_INT, 0, v, NULL, 0, 0};
}
static fld f_str(const char *k, const char *s)
{
    return (fld){k, V_STR, 0, 0, s, strlen(s), 0};
}
static fld f_strn(const char *k, const char *s, size_t n)
{
    return (fld){k, V_STR, 0, 0, s, n, 0};
}
static fld f_bin(const char *k, const void *p, size_t n)
{
    return (fld){k, V_BIN, 0, 0, p, n, 0};
}
static fld f_bool(const char *k, int b)
{
    return (fld){k, V_BOOL, (uint64_t)b, 0, NULL, 0, 0};
}
static fld f_raw(const char *k, const void *p, size_t n)
{
    return (fld){k, V_RAW, 0, 0, p, n, 0};
}
static fld f_opt(fld f)
{
    f.optional = 1;
    return f;
}

static void pack_value(mp *m, const fld *f)
{
    switch (f->kind) {
    case V_UINT:
        msgpack_pack_uint64(&m->pk, f->u);
        break;
    case V_INT:
        msgpack_pack_int64(&m->pk, f->i);
        break;
    case V_STR:
        msgpack_pack_str_with_body(&m->pk, f->p, f->n);
        break;
    case V_BIN:
        msgpack_pack_bin_with_body(&m->pk, f->p, f->n);
        break;
    case V_BOOL:
        if (f->u)
            msgpack_pack_true(&m->pk);
        else
            msgpack_pack_false(&m->pk);
        break;
    case V_NIL:
        msgpack_pack_nil(&m->pk);
        break;
    case V_FLOAT:
        msgpack_pack_double(&m->pk, 1.0);
        break;
    case V_RAW:
    default:
        mp_raw(m, f->p, f->n);
        break;
    }
}

static void pack_map(mp *m, const fld *f, size_t n)
{
    msgpack_pack_map(&m->pk, n);
    for (size_t i = 0; i < n; i++) {
        if (f[i].key != NULL)
            mp_str(m, f[i].key);
        else
            msgpack_pack_uint8(&m->pk, 7);
        pack_value(m, &f[i]);
    }
}

/* Puts a map of fields where a decoder expects one (the body, or deeper). */
typedef void (*wrap_fn)(mp *m, const fld *f, size_t n);

static void wrap_top(mp *m, const fld *f, size_t n)
{
    pack_map(m, f, n);
}

/* A value of kind k that the field of kind want does not accept, or -1. */
static int is_wrong_kind(vkind want, vkind k)
{
    if (want == V_INT)
        return k != V_UINT && k != V_INT;
    if (want == V_RAW) /* the raw fields here are arrays */
        return k != V_RAW;
    return k != want;
}

static fld as_kind(fld f, vkind k)
{
    static const uint8_t empty_map = 0x80;
    f.kind = k;
    f.u = 1;
    f.i = -1;
    f.p = "x";
    f.n = 1;
    if (k == V_RAW)
        f.p = &empty_map; /* a map where an array is wanted, or vice versa */
    return f;
}

static void encode_with(wrap_fn wrap, const fld *f, size_t n, mp *out)
{
    mp_init(out);
    wrap(out, f, n);
}

/*
 * Mechanical checks on a map described by valid[n]: accepted as is; each
 * required field missing, each field of each wrong kind, each field twice, a
 * non-string key: rejected; an unknown key and missing optional fields:
 * accepted.
 */
static void check_map_fields(const codec *c, wrap_fn wrap, const fld *valid, size_t n)
{
    fld f[16];
    mp m;
    assert_true(n + 1 <= 16);

    encode_with(wrap, valid, n, &m);
    expect_accept(c, m.sb.data, m.sb.size);
    mp_free(&m);

    for (size_t i = 0; i < n; i++) {
        /* omit field i */
        size_t k = 0;
        for (size_t j = 0; j < n; j++)
            if (j != i)
                f[k++] = valid[j];
        encode_with(wrap, f, k, &m);
        if (valid[i].optional) {
            expect_accept(c, m.sb.data, m.sb.size);
        } else {
            expect_reject(c, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
            expect_error_mentions(valid[i].key);
            expect_error_mentions("missing");
        }
        mp_free(&m);

        /* field i with every wrong kind */
        for (int kind = 0; kind < V_KINDS; kind++) {
            if (!is_wrong_kind(valid[i].kind, (vkind)kind))
                continue;
            memcpy(f, valid, n * sizeof(fld));
            f[i] = as_kind(valid[i], (vkind)kind);
            encode_with(wrap, f, n, &m);
            expect_reject(c, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
            expect_error_mentions(valid[i].key);
            mp_free(&m);
        }

        /* field i twice */
        memcpy(f, valid, n * sizeof(fld));
        f[n] = valid[i];
        encode_with(wrap, f, n + 1, &m);
        expect_reject(c, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
        mp_free(&m);
    }

    /* unknown keys, with awkward values, are skipped */
    static const uint8_t nested[] = {0x93, 0xcb, 0,    0,    0,    0,    0,   0,   0,
                                     0,    0xd4, 0x01, 0x02, 0x81, 0xa1, 'n', 0xc0};
    memcpy(f, valid, n * sizeof(fld));
    f[n] = f_raw("zz-unknown", nested, sizeof(nested));
    encode_with(wrap, f, n + 1, &m);
    expect_accept(c, m.sb.data, m.sb.size);
    mp_free(&m);
    /* ... also as the first entry */
    f[0] = f_raw("n2", nested, sizeof(nested));
    memcpy(f + 1, valid, n * sizeof(fld));
    encode_with(wrap, f, n + 1, &m);
    expect_accept(c, m.sb.data, m.sb.size);
    mp_free(&m);

    /* a non-string key */
    memcpy(f, valid, n * sizeof(fld));
    f[n] = f_uint(NULL, 1);
    encode_with(wrap, f, n + 1, &m);
    expect_reject(c, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
    mp_free(&m);
}

/* Bodies that are not maps at all. */
static void check_not_a_map(const codec *c)
{
    static const uint8_t bodies[][3] = {
        {0x90}, {0xc0}, {0x01}, {0xa1, 'x'}, {0xc4, 0x01, 0x00}, {0x91, 0x80}, {0xc3},
    };
    static const size_t lens[] = {1, 1, 1, 2, 3, 2, 1};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        expect_reject(c, bodies[i], lens[i], CR_ERR_MALFORMED_FRAME);
    expect_reject(c, NULL, 0, CR_ERR_MALFORMED_FRAME);
}

static char *repeat(char ch, size_t n)
{
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, ch, n);
    s[n] = '\0';
    return s;
}

/* ------------------------------------------------------------------------ */
/* crp_buf and encoders                                                     */
/* ------------------------------------------------------------------------ */

static void test_buf_append_and_reset(void **state)
{
    (void)state;
    crp_buf b = {0};
    crp_data_req r = {1, 2};
    assert_int_equal(crp_data_req_encode(&r, &b), 0);
    size_t one = b.len;
    assert_true(one == 3);
    assert_int_equal(crp_data_req_encode(&r, &b), 0);
    assert_true(b.len == 2 * one);
    assert_memory_equal(b.data, b.data + one, one);
    assert_true(b.cap >= b.len);
    uint8_t *keep = b.data;
    crp_buf_reset(&b);
    assert_true(b.len == 0);
    assert_ptr_equal(b.data, keep);
    /* large appends grow the buffer */
    crp_notify n = {
        .from = "x", .message = (uint8_t *)repeat('m', CRP_MAX_NOTIFY), .length = CRP_MAX_NOTIFY};
    for (int i = 0; i < 50; i++)
        assert_int_equal(crp_notify_encode(&n, &b), 0);
    assert_true(b.len > 50 * CRP_MAX_NOTIFY);
    free(n.message);
    crp_buf_free(&b);
    assert_null(b.data);
    assert_true(b.len == 0 && b.cap == 0);
    crp_buf_free(&b); /* twice is fine */
}

static void test_encoders_reject_what_decoders_would(void **state)
{
    (void)state;
    crp_buf b = {0};
    crp_data_req r = {7, 8};
    assert_int_equal(crp_data_req_encode(&r, &b), 0);
    size_t before = b.len;
    uint8_t first[16];
    memcpy(first, b.data, before);

    char *long_name = repeat('n', CRP_MAX_NAME + 1);
    crp_hello h = {.name = long_name};
    assert_int_equal(crp_hello_encode(&h, &b), CR_INVALID_PARAMS);
    assert_true(b.len == before);
    h.name = NULL;
    assert_int_equal(crp_hello_encode(&h, &b), CR_INVALID_PARAMS);
    crp_hello_ack ha = {.name = long_name};
    assert_int_equal(crp_hello_ack_encode(&ha, &b), CR_INVALID_PARAMS);

    crp_buffer_desc bufs[4] = {
        {.addr = 0x1000, .length = 4096, .kind = 0, .device = -1},
        {.addr = 0x9000, .length = 0, .kind = 0, .device = -1},
    };
    crp_descriptor d = {.name = "seg", .host_id = "host", .n_buffers = 2, .buffers = bufs};
    assert_int_equal(crp_descriptor_encode(&d, &b), CR_INVALID_PARAMS);
    expect_error_mentions("buffer 1 has length 0");
    bufs[1].addr = UINT64_MAX;
    bufs[1].length = 1;
    assert_int_equal(crp_descriptor_encode(&d, &b), CR_INVALID_PARAMS);
    bufs[1].addr = 0;
    uint8_t *over_blob = calloc(1, CRP_MAX_BLOB + 1);
    crp_blob blob = {.transport = "shm", .data = over_blob, .len = CRP_MAX_BLOB + 1};
    bufs[1].blobs = &blob;
    bufs[1].n_blobs = 1;
    assert_int_equal(crp_descriptor_encode(&d, &b), CR_INVALID_PARAMS);
    blob.len = 0;
    assert_int_equal(crp_descriptor_encode(&d, &b), CR_INVALID_PARAMS);
    blob.len = 1;
    bufs[1].n_blobs = CRP_MAX_BLOBS + 1;
    assert_int_equal(crp_descriptor_encode(&d, &b), CR_INVALID_PARAMS);
    free(over_blob);
    bufs[1].blobs = NULL;
    bufs[1].n_blobs = 0;
    d.n_buffers = CRP_MAX_BUFFERS + 1;
    assert_int_equal(crp_descriptor_encode(&d, &b), CR_INVALID_PARAMS);
    d.n_buffers = 2;
    d.buffers = NULL;
    assert_int_equal(crp_descriptor_encode(&d, &b), CR_INVALID_PARAMS);
    d.buffers = bufs;
    crp_endpoint eps[CRP_MAX_ENDPOINTS + 1];
    for (size_t i = 0; i <= CRP_MAX_ENDPOINTS; i++)
        eps[i] = (crp_endpoint){"tcp", "10.0.0.1:1", 0};
    d.endpoints = eps;
    d.n_endpoints = CRP_MAX_ENDPOINTS + 1;
    assert_int_equal(crp_descriptor_encode(&d, &b), CR_INVALID_PARAMS);
    d.n_endpoints = 1;
    eps[0].address = NULL;
    assert_int_equal(crp_descriptor_encode(&d, &b), CR_INVALID_PARAMS);
    eps[0].address = "10.0.0.1:1";
    d.host_id = NULL;
    assert_int_equal(crp_descriptor_encode(&d, &b), CR_INVALID_PARAMS);
    d.host_id = "host";
    assert_int_equal(crp_descriptor_encode(&d, &b), 0); /* now valid */
    b.len = before;

    uint8_t *big = calloc(1, CRP_MAX_NOTIFY + 1);
    crp_notify n = {.from = "a", .message = big, .length = CRP_MAX_NOTIFY + 1};
    assert_int_equal(crp_notify_encode(&n, &b), CR_INVALID_PARAMS);
    n.message = NULL;
    n.length = 3;
    assert_int_equal(crp_notify_encode(&n, &b), CR_INVALID_PARAMS);
    free(big);

    /* nothing was left behind by any failed encoder */
    assert_true(b.len == before);
    assert_memory_equal(b.data, first, before);
    free(long_name);
    crp_buf_free(&b);
}

/* ------------------------------------------------------------------------ */
/* CHALLENGE                                                                */
/* ------------------------------------------------------------------------ */

static void challenge_round_trip(const uint8_t nonce[CRP_NONCE_SIZE])
{
    crp_challenge in, out;
    crp_buf b = {0};
    memcpy(in.nonce, nonce, CRP_NONCE_SIZE);
    assert_int_equal(crp_challenge_encode(&in, &b), 0);
    assert_int_equal(crp_challenge_decode(b.data, b.len, &out), 0);
    assert_memory_equal(out.nonce, nonce, CRP_NONCE_SIZE);
    check_truncation_and_trailing(&C_CHALLENGE, b.data, b.len);
    crp_buf_free(&b);
}

static void test_challenge(void **state)
{
    (void)state;
    uint8_t nonce[CRP_NONCE_SIZE];
    for (int i = 0; i < CRP_NONCE_SIZE; i++)
        nonce[i] = (uint8_t)(i * 17);
    challenge_round_trip(nonce);
    memset(nonce, 0, sizeof(nonce));
    challenge_round_trip(nonce);
    memset(nonce, 0xFF, sizeof(nonce));
    challenge_round_trip(nonce);

    fld f[] = {f_bin("n", nonce, CRP_NONCE_SIZE)};
    check_map_fields(&C_CHALLENGE, wrap_top, f, 1);
    check_not_a_map(&C_CHALLENGE);

    /* nonce of the wrong size */
    static const size_t sizes[] = {0, 1, CRP_NONCE_SIZE - 1, CRP_NONCE_SIZE + 1, 32};
    uint8_t big[32] = {0};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        mp m;
        fld g[] = {f_bin("n", big, sizes[i])};
        encode_with(wrap_top, g, 1, &m);
        expect_reject(&C_CHALLENGE, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
        expect_error_mentions("'n'");
        mp_free(&m);
    }
}

/* ------------------------------------------------------------------------ */
/* HELLO / HELLO_ACK                                                        */
/* ------------------------------------------------------------------------ */

static void hello_round_trip(const crp_hello *in, int check_prefixes)
{
    crp_buf b = {0};
    crp_hello out;
    assert_int_equal(crp_hello_encode(in, &b), 0);
    assert_int_equal(crp_hello_decode(b.data, b.len, &out), 0);
    assert_true(out.version == in->version);
    assert_true(out.caps == in->caps);
    assert_int_equal(out.role, in->role);
    assert_string_equal(out.name, in->name);
    assert_true(out.name != in->name);
    assert_true(out.instance == in->instance);
    assert_memory_equal(out.client_nonce, in->client_nonce, CRP_NONCE_SIZE);
    assert_int_equal(out.has_mac, in->has_mac);
    if (in->has_mac)
        assert_memory_equal(out.mac, in->mac, CRP_MAC_SIZE);
    crp_hello_clear(&out);
    assert_null(out.name);
    if (check_prefixes)
        check_truncation_and_trailing(&C_HELLO, b.data, b.len);
    crp_buf_free(&b);
}

static void test_hello_round_trip(void **state)
{
    (void)state;
    char *max_name = repeat('a', CRP_MAX_NAME);
    crp_hello h = {.version = 1,
                   .caps = 0x5,
                   .role = CRP_ROLE_DATA,
                   .name = "node-a",
                   .instance = 0x0123456789abcdefull};
    for (int i = 0; i < CRP_NONCE_SIZE; i++)
        h.client_nonce[i] = (uint8_t)(0xF0 + i);
    hello_round_trip(&h, 1);
    h.has_mac = true;
    for (int i = 0; i < CRP_MAC_SIZE; i++)
        h.mac[i] = (uint8_t)(255 - i);
    hello_round_trip(&h, 1);

    h.version = UINT32_MAX;
    h.caps = UINT32_MAX;
    h.role = 255;
    h.instance = UINT64_MAX;
    h.name = max_name;
    hello_round_trip(&h, 0);
    h.version = 0;
    h.caps = 0;
    h.role = CRP_ROLE_CONTROL;
    h.instance = 0;
    h.name = "";
    h.has_mac = false;
    hello_round_trip(&h, 0);
    free(max_name);
}

static void test_hello_reject(void **state)
{
    (void)state;
    uint8_t nonce[CRP_NONCE_SIZE] = {1, 2, 3};
    uint8_t mac[64] = {9};
    fld f[] = {
        f_uint("v", 1),
        f_uint("caps", 3),
        f_uint("role", 1),
        f_str("name", "seg"),
        f_uint("inst", 42),
        f_bin("cn", nonce, CRP_NONCE_SIZE),
        f_opt(f_bin("mac", mac, CRP_MAC_SIZE)),
    };
    const size_t n = sizeof(f) / sizeof(f[0]);
    check_map_fields(&C_HELLO, wrap_top, f, n);
    check_not_a_map(&C_HELLO);

    char *over = repeat('a', CRP_MAX_NAME + 1);
    struct {
        size_t idx;
        fld bad;
        const char *why;
    } cases[] = {
        {0, f_uint("v", (uint64_t)UINT32_MAX + 1), "'v'"},
        {1, f_uint("caps", UINT64_MAX), "'caps'"},
        {2, f_uint("role", 256), "'role'"},
        {2, f_int("role", -1), "'role'"},
        {4, f_int("inst", -1), "negative"},
        {4, f_int("inst", INT64_MIN), "negative"},
        {3, f_str("name", over), "too long"},
        {3, f_strn("name", "a\0b", 3), "NUL"},
        {5, f_bin("cn", nonce, CRP_NONCE_SIZE - 1), "'cn'"},
        {5, f_bin("cn", mac, CRP_NONCE_SIZE + 1), "'cn'"},
        {6, f_bin("mac", mac, CRP_MAC_SIZE - 1), "'mac'"},
        {6, f_bin("mac", mac, CRP_MAC_SIZE + 1), "'mac'"},
        {6, f_bin("mac", mac, 0), "'mac'"},
        {6, as_kind(f[6], V_NIL), "'mac'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fld g[16];
        mp m;
        memcpy(g, f, sizeof(f));
        g[cases[i].idx] = cases[i].bad;
        encode_with(wrap_top, g, n, &m);
        expect_reject(&C_HELLO, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
        expect_error_mentions(cases[i].why);
        mp_free(&m);
    }

    /* values encoded wider than needed are still accepted */
    fld g[16];
    mp m;
    memcpy(g, f, sizeof(f));
    static const uint8_t wide_one[] = {0xcf, 0, 0, 0, 0, 0, 0, 0, 1};
    g[0] = f_raw("v", wide_one, sizeof(wide_one));
    encode_with(wrap_top, g, n, &m);
    expect_accept(&C_HELLO, m.sb.data, m.sb.size);
    mp_free(&m);
    free(over);
}

static void hello_ack_round_trip(const crp_hello_ack *in, int check_prefixes)
{
    crp_buf b = {0};
    crp_hello_ack out;
    assert_int_equal(crp_hello_ack_encode(in, &b), 0);
    assert_int_equal(crp_hello_ack_decode(b.data, b.len, &out), 0);
    assert_true(out.version == in->version);
    assert_true(out.caps == in->caps);
    assert_string_equal(out.name, in->name);
    assert_true(out.instance == in->instance);
    assert_int_equal(out.has_mac, in->has_mac);
    if (in->has_mac)
        assert_memory_equal(out.mac, in->mac, CRP_MAC_SIZE);
    crp_hello_ack_clear(&out);
    if (check_prefixes)
        check_truncation_and_trailing(&C_HELLO_ACK, b.data, b.len);
    crp_buf_free(&b);
}

static void test_hello_ack(void **state)
{
    (void)state;
    char *max_name = repeat('z', CRP_MAX_NAME);
    crp_hello_ack a = {.version = 1, .caps = 2, .name = "server", .instance = 99};
    hello_ack_round_trip(&a, 1);
    a.has_mac = true;
    memset(a.mac, 0x3c, CRP_MAC_SIZE);
    hello_ack_round_trip(&a, 1);
    a.version = UINT32_MAX;
    a.caps = UINT32_MAX;
    a.instance = UINT64_MAX;
    a.name = max_name;
    hello_ack_round_trip(&a, 0);

    uint8_t mac[CRP_MAC_SIZE + 1] = {0};
    fld f[] = {
        f_uint("v", 1),
        f_uint("caps", 0),
        f_str("name", "srv"),
        f_uint("inst", 5),
        f_opt(f_bin("mac", mac, CRP_MAC_SIZE)),
    };
    const size_t n = sizeof(f) / sizeof(f[0]);
    check_map_fields(&C_HELLO_ACK, wrap_top, f, n);
    check_not_a_map(&C_HELLO_ACK);

    char *over = repeat('a', CRP_MAX_NAME + 1);
    fld bad[] = {f_uint("v", (uint64_t)UINT32_MAX + 1), f_uint("caps", (uint64_t)1 << 32),
                 f_str("name", over), f_int("inst", -5), f_bin("mac", mac, CRP_MAC_SIZE + 1)};
    for (size_t i = 0; i < n; i++) {
        fld g[8];
        mp m;
        memcpy(g, f, sizeof(f));
        g[i] = bad[i];
        encode_with(wrap_top, g, n, &m);
        expect_reject(&C_HELLO_ACK, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
        expect_error_mentions(f[i].key);
        mp_free(&m);
    }
    free(over);
    free(max_name);
}

/* ------------------------------------------------------------------------ */
/* DESCRIPTOR                                                               */
/* ------------------------------------------------------------------------ */

static void assert_descriptor_eq(const crp_descriptor *a, const crp_descriptor *b)
{
    assert_string_equal(a->name, b->name);
    assert_string_equal(a->host_id, b->host_id);
    assert_true(a->instance == b->instance);
    assert_true(a->version == b->version);
    assert_true(a->n_endpoints == b->n_endpoints);
    for (size_t i = 0; i < a->n_endpoints; i++) {
        const crp_endpoint *x = &a->endpoints[i], *y = &b->endpoints[i];
        size_t xl = x->address_len ? x->address_len : strlen(x->address);
        size_t yl = y->address_len ? y->address_len : strlen(y->address);
        assert_string_equal(x->transport, y->transport);
        assert_int_equal(xl, yl);
        assert_memory_equal(x->address, y->address, xl);
    }
    assert_true(a->n_buffers == b->n_buffers);
    for (size_t i = 0; i < a->n_buffers; i++) {
        const crp_buffer_desc *x = &a->buffers[i], *y = &b->buffers[i];
        assert_true(x->addr == y->addr);
        assert_true(x->length == y->length);
        assert_int_equal(x->kind, y->kind);
        assert_int_equal(x->device, y->device);
        assert_int_equal(x->remote_accessible, y->remote_accessible);
        assert_int_equal(x->n_blobs, y->n_blobs);
        for (size_t j = 0; j < x->n_blobs; j++) {
            assert_string_equal(x->blobs[j].transport, y->blobs[j].transport);
            assert_int_equal(x->blobs[j].len, y->blobs[j].len);
            assert_memory_equal(x->blobs[j].data, y->blobs[j].data, x->blobs[j].len);
        }
    }
}

static void descriptor_round_trip(const crp_descriptor *in, int check_prefixes)
{
    crp_buf b = {0};
    crp_descriptor out;
    assert_int_equal(crp_descriptor_encode(in, &b), 0);
    assert_int_equal(crp_descriptor_decode(b.data, b.len, &out), 0);
    assert_descriptor_eq(&out, in);
    crp_descriptor_clear(&out);
    assert_null(out.buffers);
    assert_true(out.n_buffers == 0);
    if (check_prefixes)
        check_truncation_and_trailing(&C_DESCRIPTOR, b.data, b.len);
    crp_buf_free(&b);
}

static void test_descriptor_small(void **state)
{
    (void)state;
    crp_descriptor d = {.name = "seg", .host_id = "h1", .instance = 1, .version = 2};
    descriptor_round_trip(&d, 1); /* no endpoints, no buffers */

    uint8_t ucx_addr[300];
    for (size_t i = 0; i < sizeof(ucx_addr); i++)
        ucx_addr[i] = (uint8_t)i; /* binary, with NUL bytes */
    crp_endpoint eps[3] = {{"tcp", "10.1.2.3:7000", 0},
                           {"shm", "@crescent-1-2", 0},
                           {"ucx", (char *)ucx_addr, sizeof(ucx_addr)}};
    crp_blob blobs[2] = {{"shm", (uint8_t *)"\x01\x00\x02", 3}, {"ucx", ucx_addr, 200}};
    crp_buffer_desc bufs[3] = {
        {.addr = 0x7f0000001000ull,
         .length = 1 << 20,
         .kind = 0,
         .device = -1,
         .remote_accessible = true},
        {.addr = 0x100,
         .length = 64,
         .kind = 1,
         .device = 0,
         .remote_accessible = false,
         .n_blobs = 2,
         .blobs = blobs},
        {.addr = 0,
         .length = 1,
         .kind = 2,
         .device = 7,
         .remote_accessible = true,
         .n_blobs = 1,
         .blobs = &blobs[1]},
    };
    d.endpoints = eps;
    d.n_endpoints = 3;
    d.buffers = bufs;
    d.n_buffers = 3;
    descriptor_round_trip(&d, 1);
}

static void test_descriptor_edges(void **state)
{
    (void)state;
    char *max_name = repeat('n', CRP_MAX_NAME);
    char *max_tname = repeat('t', CRP_MAX_TRANSPORT_NAME);
    char *max_addr = repeat('a', CRP_MAX_ENDPOINT);
    uint8_t *max_blob = (uint8_t *)repeat('h', CRP_MAX_BLOB);
    crp_blob blobs[CRP_MAX_BLOBS];
    for (size_t i = 0; i < CRP_MAX_BLOBS; i++) {
        blobs[i].transport = calloc(1, 8);
        snprintf(blobs[i].transport, 8, "t%zu", i);
        blobs[i].data = max_blob;
        blobs[i].len = i == 0 ? CRP_MAX_BLOB : i + 1;
    }
    crp_endpoint eps[CRP_MAX_ENDPOINTS];
    for (size_t i = 0; i < CRP_MAX_ENDPOINTS; i++)
        eps[i] = (crp_endpoint){max_tname, max_addr, 0};
    static const int32_t devices[] = {-1, 7, 0, INT32_MIN, INT32_MAX, 1, -128, 65536};
    crp_buffer_desc bufs[256];
    for (int k = 0; k < 256; k++) {
        bufs[k] = (crp_buffer_desc){
            .addr = (uint64_t)k << 40,
            .length = (uint64_t)k + 1,
            .kind = (uint8_t)k, /* every kind, usable here or not (CUDA = 2) */
            .device = devices[k % 8],
            .remote_accessible = (k & 1) != 0,
            .n_blobs = (size_t)(k % 3 == 0 ? 0 : (k % 3 == 1 ? CRP_MAX_BLOBS : 1)),
            .blobs = k % 3 == 0 ? NULL : blobs,
        };
    }
    bufs[0].addr = 0;
    bufs[0].length = UINT64_MAX; /* exactly fills the address space */
    bufs[1].addr = UINT64_MAX - 1;
    bufs[1].length = 1; /* ends at UINT64_MAX: no overflow */
    crp_descriptor d = {.name = max_name,
                        .host_id = max_name,
                        .instance = UINT64_MAX,
                        .version = UINT64_MAX,
                        .n_endpoints = CRP_MAX_ENDPOINTS,
                        .endpoints = eps,
                        .n_buffers = 256,
                        .buffers = bufs};
    descriptor_round_trip(&d, 0);
    d.name = "";
    d.host_id = "";
    d.instance = 0;
    d.version = 0;
    descriptor_round_trip(&d, 0);
    free(max_name);
    free(max_tname);
    free(max_addr);
    free(max_blob);
    for (size_t i = 0; i < CRP_MAX_BLOBS; i++)
        free(blobs[i].transport);
}

static void test_descriptor_max_buffers(void **state)
{
    (void)state;
    crp_buffer_desc *bufs = calloc(CRP_MAX_BUFFERS, sizeof(*bufs));
    assert_non_null(bufs);
    for (size_t i = 0; i < CRP_MAX_BUFFERS; i++)
        bufs[i] = (crp_buffer_desc){.addr = 0x10000000000ull + i * 4096,
                                    .length = 4096,
                                    .kind = (uint8_t)i,
                                    .device = (int32_t)(i % 9) - 1,
                                    .remote_accessible = i % 2 == 0};
    crp_descriptor d = {
        .name = "big", .host_id = "h", .n_buffers = CRP_MAX_BUFFERS, .buffers = bufs};
    descriptor_round_trip(&d, 0);

    /* one more than allowed, packed by hand: rejected */
    mp m;
    mp_init(&m);
    msgpack_pack_map(&m.pk, 6);
    mp_str(&m, "name");
    mp_str(&m, "big");
    mp_str(&m, "host");
    mp_str(&m, "h");
    mp_str(&m, "inst");
    msgpack_pack_uint8(&m.pk, 0);
    mp_str(&m, "ver");
    msgpack_pack_uint8(&m.pk, 0);
    mp_str(&m, "eps");
    msgpack_pack_array(&m.pk, 0);
    mp_str(&m, "bufs");
    msgpack_pack_array(&m.pk, CRP_MAX_BUFFERS + 1);
    static const uint8_t one_buf[] = {0x85, 0xa1, 'a',  0x00, 0xa1, 'l',  0x01, 0xa1,
                                      'k',  0x00, 0xa1, 'd',  0x00, 0xa1, 'r',  0xc2};
    for (size_t i = 0; i < CRP_MAX_BUFFERS + 1; i++)
        mp_raw(&m, one_buf, sizeof(one_buf));
    expect_reject(&C_DESCRIPTOR, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("'bufs'");
    mp_free(&m);
    free(bufs);
}

/* Descriptor fields; eps/bufs are pre-encoded. */
static const uint8_t one_ep[] = {0x91, 0x82, 0xa1, 't',  0xa3, 't', 'c', 'p',
                                 0xa1, 'a',  0xc4, 0x03, '1',  ':', '2'};
static const uint8_t one_blob_map[] = {0x81, 0xa3, 's', 'h', 'm', 0xc4, 0x02, 'h', 'i'};
static const uint8_t one_buf_arr[] = {0x91, 0x85, 0xa1, 'a', 0x00, 0xa1, 'l', 0x01, 0xa1,
                                      'k',  0x00, 0xa1, 'd', 0xff, 0xa1, 'r', 0xc3};

static void descriptor_fields(fld f[6])
{
    f[0] = f_str("name", "seg");
    f[1] = f_str("host", "h");
    f[2] = f_uint("inst", 1);
    f[3] = f_uint("ver", 1);
    f[4] = f_raw("eps", one_ep, sizeof(one_ep));
    f[5] = f_raw("bufs", one_buf_arr, sizeof(one_buf_arr));
}

static void buffer_fields(fld f[6])
{
    f[0] = f_uint("a", 0x1000);
    f[1] = f_uint("l", 0x2000);
    f[2] = f_uint("k", 2);
    f[3] = f_int("d", -1);
    f[4] = f_bool("r", 1);
    f[5] = f_opt(f_raw("x", one_blob_map, sizeof(one_blob_map)));
}

/* A descriptor whose bufs are [good, good, good, <f>]: errors name buffer 3. */
static void wrap_buffer(mp *m, const fld *f, size_t n)
{
    fld top[6];
    descriptor_fields(top);
    msgpack_pack_map(&m->pk, 6);
    for (int i = 0; i < 5; i++) {
        mp_str(m, top[i].key);
        pack_value(m, &top[i]);
    }
    mp_str(m, "bufs");
    msgpack_pack_array(&m->pk, 4);
    for (int i = 0; i < 3; i++)
        mp_raw(m, one_buf_arr + 1, sizeof(one_buf_arr) - 1);
    pack_map(m, f, n);
}

/* A descriptor whose eps are [good, <f>]. */
static void wrap_endpoint(mp *m, const fld *f, size_t n)
{
    fld top[6];
    descriptor_fields(top);
    msgpack_pack_map(&m->pk, 6);
    for (int i = 0; i < 6; i++) {
        mp_str(m, top[i].key);
        if (i == 4) {
            msgpack_pack_array(&m->pk, 2);
            mp_raw(m, one_ep + 1, sizeof(one_ep) - 1);
            pack_map(m, f, n);
        } else {
            pack_value(m, &top[i]);
        }
    }
}

static void expect_buffer_rejected(const fld *bf, size_t n, const char *why)
{
    mp m;
    encode_with(wrap_buffer, bf, n, &m);
    expect_reject(&C_DESCRIPTOR, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions(why);
    mp_free(&m);
}

static void test_descriptor_reject(void **state)
{
    (void)state;
    fld f[6];
    descriptor_fields(f);
    check_map_fields(&C_DESCRIPTOR, wrap_top, f, 6);
    check_not_a_map(&C_DESCRIPTOR);

    fld bf[6];
    buffer_fields(bf);
    check_map_fields(&C_DESCRIPTOR, wrap_buffer, bf, 6);
    fld ef[2] = {f_str("t", "tcp"), f_bin("a", "1.2.3.4:5", 9)};
    check_map_fields(&C_DESCRIPTOR, wrap_endpoint, ef, 2);

    /* zero-length buffer, named by index */
    buffer_fields(bf);
    bf[1] = f_uint("l", 0);
    expect_buffer_rejected(bf, 6, "descriptor: buffer 3 has length 0");
    /* addr + length overflowing */
    buffer_fields(bf);
    bf[0] = f_uint("a", UINT64_MAX);
    bf[1] = f_uint("l", 1);
    expect_buffer_rejected(bf, 6, "buffer 3 range");
    bf[0] = f_uint("a", UINT64_MAX - 1);
    bf[1] = f_uint("l", 2);
    expect_buffer_rejected(bf, 6, "overflows");
    bf[0] = f_uint("a", 1);
    bf[1] = f_uint("l", UINT64_MAX);
    expect_buffer_rejected(bf, 6, "overflows");
    /* numeric ranges */
    buffer_fields(bf);
    bf[2] = f_uint("k", 256);
    expect_buffer_rejected(bf, 6, "'k'");
    bf[2] = f_int("k", -1);
    expect_buffer_rejected(bf, 6, "'k' is negative");
    buffer_fields(bf);
    bf[3] = f_int("d", (int64_t)INT32_MAX + 1);
    expect_buffer_rejected(bf, 6, "'d'");
    bf[3] = f_int("d", (int64_t)INT32_MIN - 1);
    expect_buffer_rejected(bf, 6, "'d'");
    bf[3] = f_uint("d", UINT64_MAX);
    expect_buffer_rejected(bf, 6, "'d'");
    buffer_fields(bf);
    bf[0] = f_int("a", -4096);
    expect_buffer_rejected(bf, 6, "'a' is negative");
    buffer_fields(bf);
    bf[1] = f_int("l", -1);
    expect_buffer_rejected(bf, 6, "'l' is negative");
    buffer_fields(bf);
    bf[4] = f_uint("r", 1);
    expect_buffer_rejected(bf, 6, "'r'");
    /* transport blob bounds and types */
    {
        static const uint8_t empty_blob[] = {0x81, 0xa3, 's', 'h', 'm', 0xc4, 0x00};
        static const uint8_t str_blob[] = {0x81, 0xa3, 's', 'h', 'm', 0xa2, 'h', 'i'};
        static const uint8_t dup_blob[] = {0x82, 0xa3, 's', 'h', 'm',  0xc4, 0x01, 'a',
                                           0xa3, 's',  'h', 'm', 0xc4, 0x01, 'b'};
        static const uint8_t nul_name[] = {0x81, 0xa3, 's', 0x00, 'm', 0xc4, 0x01, 'a'};
        static const uint8_t arr_blob[] = {0x91, 0xc4, 0x01, 'a'};
        mp over;
        mp_init(&over);
        msgpack_pack_map(&over.pk, 1);
        mp_str(&over, "ucx");
        msgpack_pack_bin(&over.pk, CRP_MAX_BLOB + 1);
        char *big = repeat('z', CRP_MAX_BLOB + 1);
        msgpack_pack_bin_body(&over.pk, big, CRP_MAX_BLOB + 1);
        free(big);
        buffer_fields(bf);
        bf[5] = f_raw("x", over.sb.data, over.sb.size);
        expect_buffer_rejected(bf, 6, "'x' has 1025 bytes");
        bf[5] = f_raw("x", empty_blob, sizeof(empty_blob));
        expect_buffer_rejected(bf, 6, "'x' has 0 bytes");
        bf[5] = f_raw("x", str_blob, sizeof(str_blob));
        expect_buffer_rejected(bf, 6, "not binary");
        bf[5] = f_raw("x", dup_blob, sizeof(dup_blob));
        expect_buffer_rejected(bf, 6, "twice");
        bf[5] = f_raw("x", nul_name, sizeof(nul_name));
        expect_buffer_rejected(bf, 6, "NUL");
        bf[5] = f_raw("x", arr_blob, sizeof(arr_blob));
        expect_buffer_rejected(bf, 6, "not a map");
        bf[5] = as_kind(bf[5], V_NIL);
        expect_buffer_rejected(bf, 6, "'x'");
        mp_free(&over);
    }
    /* edge values accepted */
    buffer_fields(bf);
    bf[0] = f_uint("a", UINT64_MAX - 1);
    bf[1] = f_uint("l", 1);
    bf[2] = f_uint("k", 255);
    bf[3] = f_int("d", INT32_MIN);
    {
        mp m;
        encode_with(wrap_buffer, bf, 6, &m);
        expect_accept(&C_DESCRIPTOR, m.sb.data, m.sb.size);
        mp_free(&m);
    }

    /* over-long strings at the top level and in endpoints */
    char *over_name = repeat('n', CRP_MAX_NAME + 1);
    char *over_addr = repeat('a', CRP_MAX_ENDPOINT + 1);
    for (int i = 0; i < 2; i++) {
        mp m;
        descriptor_fields(f);
        f[i] = f_str(f[i].key, over_name);
        encode_with(wrap_top, f, 6, &m);
        expect_reject(&C_DESCRIPTOR, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
        expect_error_mentions("too long");
        mp_free(&m);
    }
    {
        mp m;
        fld e2[2] = {f_str("t", over_name), f_bin("a", "x", 1)};
        encode_with(wrap_endpoint, e2, 2, &m);
        expect_reject(&C_DESCRIPTOR, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
        expect_error_mentions("endpoint 1 field 't' is too long");
        mp_free(&m);
        fld e3[2] = {f_str("t", "tcp"), f_bin("a", over_addr, CRP_MAX_ENDPOINT + 1)};
        encode_with(wrap_endpoint, e3, 2, &m);
        expect_reject(&C_DESCRIPTOR, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
        mp_free(&m);
        fld e4[2] = {f_str("t", "tcp"), f_str("a", "1.2.3.4:5")};
        encode_with(wrap_endpoint, e4, 2, &m);
        expect_reject(&C_DESCRIPTOR, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
        expect_error_mentions("not binary");
        mp_free(&m);
        fld e5[2] = {f_str("t", "tcp"), f_bin("a", "", 0)};
        encode_with(wrap_endpoint, e5, 2, &m);
        expect_reject(&C_DESCRIPTOR, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
        mp_free(&m);
    }
    free(over_name);
    free(over_addr);

    /* too many endpoints */
    {
        mp m, eps;
        mp_init(&eps);
        msgpack_pack_array(&eps.pk, CRP_MAX_ENDPOINTS + 1);
        for (int i = 0; i <= CRP_MAX_ENDPOINTS; i++)
            mp_raw(&eps, one_ep + 1, sizeof(one_ep) - 1);
        descriptor_fields(f);
        f[4] = f_raw("eps", eps.sb.data, eps.sb.size);
        encode_with(wrap_top, f, 6, &m);
        expect_reject(&C_DESCRIPTOR, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
        expect_error_mentions("'eps' has too many");
        mp_free(&m);
        mp_free(&eps);
    }
    /* array entries that are not maps */
    {
        static const uint8_t bad_eps[] = {0x92, 0x82, 0xa1, 't', 0xa0, 0xa1,
                                          'a',  0xc4, 0x01, 'x', 0x90};
        static const uint8_t bad_bufs[] = {0x91, 0x01};
        mp m;
        descriptor_fields(f);
        f[4] = f_raw("eps", bad_eps, sizeof(bad_eps));
        encode_with(wrap_top, f, 6, &m);
        expect_reject(&C_DESCRIPTOR, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
        expect_error_mentions("endpoint 1 entry is not a map");
        mp_free(&m);
        descriptor_fields(f);
        f[5] = f_raw("bufs", bad_bufs, sizeof(bad_bufs));
        encode_with(wrap_top, f, 6, &m);
        expect_reject(&C_DESCRIPTOR, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
        expect_error_mentions("buffer 0 entry is not a map");
        mp_free(&m);
    }
}

/* ------------------------------------------------------------------------ */
/* NOTIFY                                                                   */
/* ------------------------------------------------------------------------ */

static void notify_round_trip(const char *from, const uint8_t *msg, size_t len, int prefixes)
{
    crp_notify in = {.from = (char *)from, .message = (uint8_t *)msg, .length = len};
    crp_notify out;
    crp_buf b = {0};
    assert_int_equal(crp_notify_encode(&in, &b), 0);
    assert_int_equal(crp_notify_decode(b.data, b.len, &out), 0);
    assert_string_equal(out.from, from);
    assert_true(out.length == len);
    assert_non_null(out.message);
    if (len > 0)
        assert_memory_equal(out.message, msg, len);
    assert_int_equal(out.message[len], 0);
    crp_notify_clear(&out);
    if (prefixes)
        check_truncation_and_trailing(&C_NOTIFY, b.data, b.len);
    crp_buf_free(&b);
}

static void test_notify(void **state)
{
    (void)state;
    static const uint8_t with_nul[] = {'h', 0, 'i', 0xff, 0};
    notify_round_trip("peer", with_nul, sizeof(with_nul), 1);
    notify_round_trip("peer", NULL, 0, 1);
    uint8_t *big = malloc(CRP_MAX_NOTIFY);
    for (size_t i = 0; i < CRP_MAX_NOTIFY; i++)
        big[i] = (uint8_t)i;
    char *max_name = repeat('f', CRP_MAX_NAME);
    notify_round_trip(max_name, big, CRP_MAX_NOTIFY, 0);

    fld f[] = {f_str("from", "a"), f_bin("msg", "hello", 5)};
    check_map_fields(&C_NOTIFY, wrap_top, f, 2);
    check_not_a_map(&C_NOTIFY);

    mp m;
    uint8_t *over = calloc(1, CRP_MAX_NOTIFY + 1);
    fld g[] = {f_str("from", "a"), f_bin("msg", over, CRP_MAX_NOTIFY + 1)};
    encode_with(wrap_top, g, 2, &m);
    expect_reject(&C_NOTIFY, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("'msg' is too long");
    mp_free(&m);
    char *over_name = repeat('f', CRP_MAX_NAME + 1);
    fld h[] = {f_str("from", over_name), f_bin("msg", "x", 1)};
    encode_with(wrap_top, h, 2, &m);
    expect_reject(&C_NOTIFY, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
    mp_free(&m);
    free(over_name);
    free(over);
    free(max_name);
    free(big);
}

/* ------------------------------------------------------------------------ */
/* DATA REQUEST                                                             */
/* ------------------------------------------------------------------------ */

static void test_data_req_round_trip(void **state)
{
    (void)state;
    static const uint64_t vals[] = {0,          1,          127,        128,
                                    255,        256,        65535,      65536,
                                    UINT32_MAX, 1ull << 32, 1ull << 63, UINT64_MAX - 1,
                                    UINT64_MAX};
    const size_t n = sizeof(vals) / sizeof(vals[0]);
    crp_buf b = {0};
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            crp_data_req in = {vals[i], vals[j]}, out;
            crp_buf_reset(&b);
            assert_int_equal(crp_data_req_encode(&in, &b), 0);
            assert_int_equal(crp_data_req_decode(b.data, b.len, &out), 0);
            assert_true(out.addr == in.addr && out.length == in.length);
            if (i % 4 == 0 && j % 4 == 1)
                check_truncation_and_trailing(&C_DATA_REQ, b.data, b.len);
        }
    }
    crp_buf_free(&b);
}

static void test_data_req_encodings(void **state)
{
    (void)state;
    /* whatever msgpack-c would accept as [uint, uint] */
    static const struct {
        uint8_t bytes[24];
        size_t len;
        uint64_t addr, length;
    } ok[] = {
        {{0x92, 0x05, 0x06}, 3, 5, 6},
        {{0xdc, 0x00, 0x02, 0x05, 0x06}, 5, 5, 6},
        {{0xdd, 0x00, 0x00, 0x00, 0x02, 0x05, 0x06}, 7, 5, 6},
        {{0x92, 0xcc, 0x05, 0xcd, 0x00, 0x06}, 6, 5, 6},
        {{0x92, 0xd0, 0x7f, 0xd1, 0x7f, 0xff}, 6, 127, 32767},
        {{0x92, 0xd2, 0x00, 0x00, 0x00, 0x00, 0xd3, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
         15,
         0,
         INT64_MAX},
        {{0x92, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xce, 0xff, 0xff, 0xff, 0xff},
         15,
         UINT64_MAX,
         UINT32_MAX},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        crp_data_req out;
        assert_int_equal(crp_data_req_decode(ok[i].bytes, ok[i].len, &out), 0);
        assert_true(out.addr == ok[i].addr);
        assert_true(out.length == ok[i].length);
        check_truncation_and_trailing(&C_DATA_REQ, ok[i].bytes, ok[i].len);
    }

    static const struct {
        uint8_t bytes[16];
        size_t len;
        const char *why;
    } bad[] = {
        {{0x91, 0x05}, 2, "1 elements"},
        {{0x93, 0x05, 0x06, 0x07}, 4, "3 elements"},
        {{0x90}, 1, "0 elements"},
        {{0xdc, 0x00, 0x03, 0x01, 0x02, 0x03}, 6, "3 elements"},
        {{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02}, 7, "elements"},
        {{0x82, 0x05, 0x06, 0x07, 0x08}, 5, "not an array"},
        {{0xc0}, 1, "not an array"},
        {{0x92, 0xff, 0x06}, 3, "'addr' is negative"},
        {{0x92, 0x05, 0xe0}, 3, "'length' is negative"},
        {{0x92, 0xd0, 0x80, 0x06}, 4, "'addr' is negative"},
        {{0x92, 0x05, 0xd3, 0xff, 0, 0, 0, 0, 0, 0, 0}, 11, "'length' is negative"},
        {{0x92, 0xc0, 0x06}, 3, "'addr' is not an unsigned integer"},
        {{0x92, 0x05, 0xca, 0, 0, 0, 0}, 7, "'length' is not an unsigned integer"},
        {{0x92, 0xa1, '5', 0x06}, 4, "'addr'"},
        {{0x92, 0xc3, 0x06}, 3, "'addr'"},
        {{0x92, 0x91, 0x05, 0x06}, 4, "'addr'"},
        {{0x92, 0x05, 0x06, 0x07}, 4, "trailing"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        expect_reject(&C_DATA_REQ, bad[i].bytes, bad[i].len, CR_ERR_MALFORMED_FRAME);
        expect_error_mentions(bad[i].why);
    }
    expect_reject(&C_DATA_REQ, NULL, 0, CR_ERR_MALFORMED_FRAME);
}

/* ------------------------------------------------------------------------ */
/* ERROR                                                                    */
/* ------------------------------------------------------------------------ */

static void error_round_trip(const char *text, int prefixes)
{
    crp_error in = {.message = (char *)text}, out;
    crp_buf b = {0};
    assert_int_equal(crp_error_encode(&in, &b), 0);
    assert_int_equal(crp_error_decode(b.data, b.len, &out), 0);
    assert_string_equal(out.message, text);
    crp_error_clear(&out);
    assert_null(out.message);
    if (prefixes)
        check_truncation_and_trailing(&C_ERROR, b.data, b.len);
    crp_buf_free(&b);
}

static void test_error(void **state)
{
    (void)state;
    error_round_trip("segment 'x' not found", 1);
    error_round_trip("", 1);
    char *max_text = repeat('e', CRP_MAX_ERROR_TEXT);
    error_round_trip(max_text, 0);
    free(max_text);

    fld f[] = {f_str("msg", "boom")};
    check_map_fields(&C_ERROR, wrap_top, f, 1);
    check_not_a_map(&C_ERROR);

    /* the encoder never fails on the text: it cuts it, whole characters only */
    char *over = repeat('e', CRP_MAX_ERROR_TEXT + 1);
    crp_error in = {.message = over}, out;
    crp_buf b = {0};
    assert_int_equal(crp_error_encode(&in, &b), 0);
    assert_int_equal(crp_error_decode(b.data, b.len, &out), 0);
    assert_true(strlen(out.message) == CRP_MAX_ERROR_TEXT);
    assert_memory_equal(out.message, over, CRP_MAX_ERROR_TEXT);
    crp_error_clear(&out);
    over[CRP_MAX_ERROR_TEXT - 1] = (char)0xC3; /* "é" straddling the limit */
    over[CRP_MAX_ERROR_TEXT] = (char)0xA9;
    crp_buf_reset(&b);
    assert_int_equal(crp_error_encode(&in, &b), 0);
    assert_int_equal(crp_error_decode(b.data, b.len, &out), 0);
    assert_true(strlen(out.message) == CRP_MAX_ERROR_TEXT - 1);
    crp_error_clear(&out);
    in.message = NULL;
    crp_buf_reset(&b);
    assert_int_equal(crp_error_encode(&in, &b), 0);
    assert_int_equal(crp_error_decode(b.data, b.len, &out), 0);
    assert_string_equal(out.message, "");
    crp_error_clear(&out);
    crp_buf_free(&b);

    /* ... but the decoder refuses an over-long text */
    memset(over, 'e', CRP_MAX_ERROR_TEXT + 1);
    fld g[] = {f_str("msg", over)};
    mp m;
    encode_with(wrap_top, g, 1, &m);
    expect_reject(&C_ERROR, m.sb.data, m.sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("error: field 'msg' is too long");
    mp_free(&m);
    free(over);
}

/* ------------------------------------------------------------------------ */
/* Hostile structure, for every map decoder                                 */
/* ------------------------------------------------------------------------ */

static void test_hostile_structure(void **state)
{
    (void)state;
    const codec *all[] = {&C_CHALLENGE, &C_HELLO, &C_HELLO_ACK, &C_DESCRIPTOR,
                          &C_NOTIFY,    &C_ERROR, &C_DATA_REQ};
    /* Headers announcing 4 billion elements, with nothing behind them: must
     * fail as truncated without trying to allocate for them. */
    static const uint8_t huge_arr[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    static const uint8_t huge_map[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'n'};
    static const uint8_t huge_in_map[] = {0x82, 0xa1, 'x',  0xdd, 0xff, 0xff,
                                          0xff, 0xff, 0xa1, 'y',  0xc0};
    static const uint8_t huge_str[] = {0x81, 0xa3, 'm',  's',  'g', 0xdb,
                                       0xff, 0xff, 0xff, 0xff, 'a'};
    static const uint8_t never_used[] = {0x81, 0xa1, 'x', 0xc1};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        expect_reject(all[i], huge_arr, sizeof(huge_arr), CR_ERR_MALFORMED_FRAME);
        expect_reject(all[i], huge_map, sizeof(huge_map), CR_ERR_MALFORMED_FRAME);
        expect_reject(all[i], huge_in_map, sizeof(huge_in_map), CR_ERR_MALFORMED_FRAME);
        expect_reject(all[i], huge_str, sizeof(huge_str), CR_ERR_MALFORMED_FRAME);
        expect_reject(all[i], never_used, sizeof(never_used), CR_ERR_MALFORMED_FRAME);
    }

    /* Deep nesting under an unknown key: a little is skipped, a lot refused. */
    uint8_t deep[128];
    for (int depth = 1; depth < 100; depth++) {
        size_t n = 0;
        deep[n++] = 0x82;
        deep[n++] = 0xa3;
        memcpy(deep + n, "msg", 3);
        n += 3;
        deep[n++] = 0xa2;
        deep[n++] = 'o';
        deep[n++] = 'k';
        deep[n++] = 0xa1;
        deep[n++] = 'z';
        for (int i = 0; i < depth; i++)
            deep[n++] = 0x91;
        deep[n++] = 0xc0;
        if (depth <= 10)
            expect_accept(&C_ERROR, deep, n);
        else if (depth >= 40)
            expect_reject(&C_ERROR, deep, n, CR_ERR_MALFORMED_FRAME);
    }
}

/* UCX active-message headers: round trips and every malformed form. */
static void test_am_headers(void **state)
{
    (void)state;
    uint8_t x[CRP_AM_REQ_SIZE];
    crp_am_req r = {.op = 1, .id = 0xabcdef0123456789ull, .addr = 0x7f0000001000ull, .length = 1};
    crp_am_req_encode(&r, x);
    crp_am_req out;
    assert_int_equal(crp_am_req_decode(x, sizeof(x), &out), 0);
    assert_int_equal(out.op, 1);
    assert_true(out.id == r.id && out.addr == r.addr && out.length == 1);
    crp_am_req keep = {.op = 9, .id = 9, .addr = 9, .length = 9}, got = keep;
    assert_int_equal(crp_am_req_decode(x, sizeof(x) - 1, &got), CR_ERR_MALFORMED_FRAME);
    x[0] = 2;
    assert_int_equal(crp_am_req_decode(x, sizeof(x), &got), CR_ERR_MALFORMED_FRAME);
    x[0] = 0;
    x[3] = 1; /* padding */
    assert_int_equal(crp_am_req_decode(x, sizeof(x), &got), CR_ERR_MALFORMED_FRAME);
    r.length = 0;
    crp_am_req_encode(&r, x);
    assert_int_equal(crp_am_req_decode(x, sizeof(x), &got), CR_ERR_MALFORMED_FRAME);
    r.length = 2;
    r.addr = UINT64_MAX;
    crp_am_req_encode(&r, x);
    assert_int_equal(crp_am_req_decode(x, sizeof(x), &got), CR_ERR_MALFORMED_FRAME);
    assert_memory_equal(&got, &keep, sizeof(got)); /* untouched on failure */

    uint8_t y[CRP_AM_REPLY_SIZE];
    crp_am_reply p = {.id = 77, .status = CR_ERR_ADDRESS_NOT_REGISTERED};
    crp_am_reply_encode(&p, y);
    crp_am_reply po;
    assert_int_equal(crp_am_reply_decode(y, sizeof(y), &po), 0);
    assert_true(po.id == 77 && po.status == CR_ERR_ADDRESS_NOT_REGISTERED);
    p.status = 0;
    crp_am_reply_encode(&p, y);
    assert_int_equal(crp_am_reply_decode(y, sizeof(y), &po), 0);
    assert_int_equal(po.status, 0);
    y[8] = 5; /* status 5: positive */
    assert_int_equal(crp_am_reply_decode(y, sizeof(y), &po), CR_ERR_MALFORMED_FRAME);
    y[8] = 0;
    y[15] = 1;
    assert_int_equal(crp_am_reply_decode(y, sizeof(y), &po), CR_ERR_MALFORMED_FRAME);
    assert_int_equal(crp_am_reply_decode(y, 15, &po), CR_ERR_MALFORMED_FRAME);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_append_and_reset),
        cmocka_unit_test(test_encoders_reject_what_decoders_would),
        cmocka_unit_test(test_challenge),
        cmocka_unit_test(test_hello_round_trip),
        cmocka_unit_test(test_hello_reject),
        cmocka_unit_test(test_hello_ack),
        cmocka_unit_test(test_descriptor_small),
        cmocka_unit_test(test_descriptor_edges),
        cmocka_unit_test(test_descriptor_max_buffers),
        cmocka_unit_test(test_descriptor_reject),
        cmocka_unit_test(test_am_headers),
        cmocka_unit_test(test_notify),
        cmocka_unit_test(test_data_req_round_trip),
        cmocka_unit_test(test_data_req_encodings),
        cmocka_unit_test(test_error),
        cmocka_unit_test(test_hostile_structure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
