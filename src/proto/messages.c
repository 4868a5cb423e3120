/*
 * messages.c - msgpack bodies of crescent frames.
 *
 * Design.
 *
 * Encoders drive a msgpack_packer whose writer appends to a crp_buf that
 * grows geometrically. The encoder context is "sticky": the first failure
 * (allocation, or an argument the peer's decoder would reject) is recorded,
 * every later write is refused, and the encoder checks once at the end and
 * rolls the buffer back to its length on entry. Encoders therefore never put
 * on the wire what a decoder here would refuse.
 *
 * Decoders run in three steps:
 *  1. crp_mp_scan() (proto/mp_scan.c, shared with rpc.c) walks the raw bytes once, without
 * allocating, and proves they hold exactly one complete msgpack object (no truncation, no trailing
 * bytes), nested at most CRP_MP_MAX_DEPTH deep, and that every array/map count is backed by at
 * least one input byte per element. msgpack-c allocates an array's element storage from the
 * declared count before it has seen the elements, so without this check a five-byte header could
 * make it ask for 64 GiB; with it, the zone never exceeds about 32 bytes per input byte. It also
 * keeps nesting well inside msgpack-c's fixed parse stack (which reports overflow as NOMEM).
 *  2. msgpack_unpack_next() builds the object tree. Strings and binaries
 *     point into the input; containers live in the msgpack_unpacked's zone.
 *  3. The decoder walks the tree with strict type and bound checks into a
 *     local struct, copying strings to the heap. On failure the local is
 *     cleared; on success it is copied to the caller's struct, which is not
 *     otherwise touched. Known keys appearing twice and non-string keys are
 *     rejected; unknown string keys are skipped.
 *
 * The data request ([u64, u64], on the per-transfer hot path) is decoded by
 * hand from the bytes: no zone, no heap, accepting exactly what msgpack-c
 * would accept for a two-element array of non-negative integers.
 */
#include "proto/messages.h"

#include "proto/mp_scan.h"

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define BUF_MIN_CAP 256

/* ------------------------------------------------------------------------ */
/* Error context                                                            */
/* ------------------------------------------------------------------------ */

/* Where in which message a failure happened, for the error text. */
typedef struct where {
    const char *msg;  /* message name, e.g. "descriptor" */
    const char *item; /* NULL at top level, else e.g. "buffer" */
    size_t index;     /* index of item within its array */
} where;

/*
 * Record "<msg>: [<item> <index> ][field '<field>' ]<detail>" as the
 * thread's last error and return status.
 */
static int fail(int status, const where *w, const char *field, const char *fmt, ...)
    CRB_PRINTF(4, 5);

static int fail(int status, const where *w, const char *field, const char *fmt, ...)
{
    char detail[256];
    char prefix[64] = "";
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    if (w->item != NULL)
        snprintf(prefix, sizeof(prefix), "%s %zu ", w->item, w->index);
    if (field != NULL)
        return crb_error(status, "%s: %sfield '%s' %s", w->msg, prefix, field, detail);
    return crb_error(status, "%s: %s%s", w->msg, prefix, detail);
}

#define MALFORMED CR_ERR_MALFORMED_FRAME

/* ------------------------------------------------------------------------ */
/* Output buffer and encoder context                                        */
/* ------------------------------------------------------------------------ */

void crp_buf_free(crp_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void crp_buf_reset(crp_buf *b)
{
    b->len = 0;
}

/* Make room for extra more bytes; 0 or -1 on allocation failure/overflow. */
static int buf_reserve(crp_buf *b, size_t extra)
{
    if (extra <= b->cap - b->len)
        return 0;
    if (extra > SIZE_MAX - b->len)
        return -1;
    size_t need = b->len + extra;
    size_t cap = b->cap < BUF_MIN_CAP ? BUF_MIN_CAP : b->cap;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = realloc(b->data, cap);
    if (p == NULL)
        return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

int crp_buf_append(crp_buf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n) != 0)
        return crb_error(CR_ERR_NO_MEMORY, "cannot grow a buffer of %zu bytes by %zu", b->len, n);
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

typedef struct enc {
    msgpack_packer pk;
    crp_buf *out;
    size_t start; /* out->len on entry, restored on failure */
    where w;
    int status; /* first failure, 0 while none */
} enc;

static int enc_write(void *data, const char *p, size_t n)
{
    enc *e = data;
    if (e->status != 0)
        return -1;
    if (buf_reserve(e->out, n) != 0) {
        e->status = fail(CR_ERR_NO_MEMORY, &e->w, NULL,
                         "cannot grow the output buffer (%zu + %zu bytes)", e->out->len, n);
        return -1;
    }
    if (n > 0)
        memcpy(e->out->data + e->out->len, p, n);
    e->out->len += n;
    return 0;
}

static void enc_init(enc *e, crp_buf *out, const char *msg)
{
    e->out = out;
    e->start = out->len;
    e->w.msg = msg;
    e->w.item = NULL;
    e->w.index = 0;
    e->status = 0;
    msgpack_packer_init(&e->pk, e, enc_write);
}

static int enc_finish(enc *e)
{
    if (e->status != 0) {
        e->out->len = e->start;
        return e->status;
    }
    return 0;
}

/* Record an invalid argument (unless an earlier failure is already held). */
static void enc_invalid(enc *e, const char *field, const char *fmt, ...) CRB_PRINTF(3, 4);

static void enc_invalid(enc *e, const char *field, const char *fmt, ...)
{
    char detail[200];
    va_list ap;

    if (e->status != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    e->status = fail(CR_ERR_INVALID_ARGUMENT, &e->w, field, "%s (encoding)", detail);
}

static void enc_key(enc *e, const char *key)
{
    msgpack_pack_str_with_body(&e->pk, key, strlen(key));
}

static void enc_u64(enc *e, const char *key, uint64_t v)
{
    enc_key(e, key);
    msgpack_pack_uint64(&e->pk, v);
}

/* A required string of at most max bytes, under key. */
static void enc_str(enc *e, const char *key, const char *s, size_t max)
{
    if (s == NULL) {
        enc_invalid(e, key, "is NULL");
        return;
    }
    size_t n = strnlen(s, max + 1);
    if (n > max) {
        enc_invalid(e, key, "is longer than %zu bytes", max);
        return;
    }
    enc_key(e, key);
    msgpack_pack_str_with_body(&e->pk, s, n);
}

static void enc_bin(enc *e, const char *key, const void *p, size_t n)
{
    enc_key(e, key);
    msgpack_pack_bin_with_body(&e->pk, p, n);
}

/* ------------------------------------------------------------------------ */
/* Decoder: structural pre-scan                                             */
/* ------------------------------------------------------------------------ */

/* Scan and unpack data into u. On success the caller destroys u. */
static int unpack_body(const where *w, const void *data, size_t len, msgpack_unpacked *u)
{
    const char *why = crp_mp_scan(data, len);
    if (why != NULL)
        return fail(MALFORMED, w, NULL, "body %s (%zu bytes)", why, len);

    size_t off = 0;
    msgpack_unpacked_init(u);
    msgpack_unpack_return r = msgpack_unpack_next(u, data, len, &off);
    if (r == MSGPACK_UNPACK_SUCCESS && off == len)
        return 0;
    msgpack_unpacked_destroy(u);
    if (r == MSGPACK_UNPACK_NOMEM_ERROR)
        return fail(CR_ERR_NO_MEMORY, w, NULL, "out of memory unpacking %zu bytes", len);
    return fail(MALFORMED, w, NULL, "body is not valid msgpack (unpack result %d)", (int)r);
}

static int key_is(const msgpack_object *k, const char *name)
{
    size_t n = strlen(name);
    return k->via.str.size == n && memcmp(k->via.str.ptr, name, n) == 0;
}

/*
 * o must be a map with string keys; vals[i] is set to the value of keys[i],
 * or NULL when absent. Known keys may appear once; others are ignored.
 */
static int map_fields(const where *w, const msgpack_object *o, const char *const *keys,
                      size_t n_keys, const msgpack_object **vals)
{
    if (o->type != MSGPACK_OBJECT_MAP)
        return fail(MALFORMED, w, NULL, "%s is not a map", w->item != NULL ? "entry" : "body");
    for (size_t i = 0; i < n_keys; i++)
        vals[i] = NULL;
    for (uint32_t j = 0; j < o->via.map.size; j++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[j];
        if (kv->key.type != MSGPACK_OBJECT_STR)
            return fail(MALFORMED, w, NULL, "map key %u is not a string", (unsigned)j);
        for (size_t i = 0; i < n_keys; i++) {
            if (!key_is(&kv->key, keys[i]))
                continue;
            if (vals[i] != NULL)
                return fail(MALFORMED, w, keys[i], "appears twice");
            vals[i] = &kv->val;
            break;
        }
    }
    return 0;
}

static int get_uint(const where *w, const char *f, const msgpack_object *v, uint64_t max,
                    uint64_t *out)
{
    if (v == NULL)
        return fail(MALFORMED, w, f, "is missing");
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return fail(MALFORMED, w, f, "is negative (%lld)", (long long)v->via.i64);
    if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return fail(MALFORMED, w, f, "is not an unsigned integer (msgpack type %d)", (int)v->type);
    if (v->via.u64 > max)
        return fail(MALFORMED, w, f, "is out of range (%llu > %llu)",
                    (unsigned long long)v->via.u64, (unsigned long long)max);
    *out = v->via.u64;
    return 0;
}

static int get_u32(const where *w, const char *f, const msgpack_object *v, uint32_t *out)
{
    uint64_t x;
    int rc = get_uint(w, f, v, UINT32_MAX, &x);
    if (rc == 0)
        *out = (uint32_t)x;
    return rc;
}

static int get_u8(const where *w, const char *f, const msgpack_object *v, uint8_t *out)
{
    uint64_t x;
    int rc = get_uint(w, f, v, UINT8_MAX, &x);
    if (rc == 0)
        *out = (uint8_t)x;
    return rc;
}

static int get_i32(const where *w, const char *f, const msgpack_object *v, int32_t *out)
{
    if (v == NULL)
        return fail(MALFORMED, w, f, "is missing");
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (v->via.u64 > INT32_MAX)
            return fail(MALFORMED, w, f, "is out of range (%llu)", (unsigned long long)v->via.u64);
        *out = (int32_t)v->via.u64;
        return 0;
    }
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        if (v->via.i64 < INT32_MIN)
            return fail(MALFORMED, w, f, "is out of range (%lld)", (long long)v->via.i64);
        *out = (int32_t)v->via.i64;
        return 0;
    }
    return fail(MALFORMED, w, f, "is not an integer (msgpack type %d)", (int)v->type);
}

static int get_bool(const where *w, const char *f, const msgpack_object *v, bool *out)
{
    if (v == NULL)
        return fail(MALFORMED, w, f, "is missing");
    if (v->type != MSGPACK_OBJECT_BOOLEAN)
        return fail(MALFORMED, w, f, "is not a boolean (msgpack type %d)", (int)v->type);
    *out = v->via.boolean;
    return 0;
}

/* A string of at most max bytes and no NUL, copied to a new C string. */
static int get_str(const where *w, const char *f, const msgpack_object *v, size_t max, char **out)
{
    if (v == NULL)
        return fail(MALFORMED, w, f, "is missing");
    if (v->type != MSGPACK_OBJECT_STR)
        return fail(MALFORMED, w, f, "is not a string (msgpack type %d)", (int)v->type);
    size_t n = v->via.str.size;
    if (n > max)
        return fail(MALFORMED, w, f, "is too long (%zu > %zu bytes)", n, max);
    if (n > 0 && memchr(v->via.str.ptr, 0, n) != NULL)
        return fail(MALFORMED, w, f, "contains a NUL byte");
    char *s = malloc(n + 1);
    if (s == NULL)
        return fail(CR_ERR_NO_MEMORY, w, f, "cannot copy %zu bytes", n);
    if (n > 0)
        memcpy(s, v->via.str.ptr, n);
    s[n] = '\0';
    *out = s;
    return 0;
}

/* A binary of exactly size bytes, copied into out. */
static int get_bin_exact(const where *w, const char *f, const msgpack_object *v, uint8_t *out,
                         size_t size)
{
    if (v == NULL)
        return fail(MALFORMED, w, f, "is missing");
    if (v->type != MSGPACK_OBJECT_BIN)
        return fail(MALFORMED, w, f, "is not binary (msgpack type %d)", (int)v->type);
    if (v->via.bin.size != size)
        return fail(MALFORMED, w, f, "has %u bytes, not %zu", (unsigned)v->via.bin.size, size);
    memcpy(out, v->via.bin.ptr, size);
    return 0;
}

static int get_array(const where *w, const char *f, const msgpack_object *v, size_t max,
                     const msgpack_object_array **out)
{
    if (v == NULL)
        return fail(MALFORMED, w, f, "is missing");
    if (v->type != MSGPACK_OBJECT_ARRAY)
        return fail(MALFORMED, w, f, "is not an array (msgpack type %d)", (int)v->type);
    if (v->via.array.size > max)
        return fail(MALFORMED, w, f, "has too many entries (%u > %zu)", (unsigned)v->via.array.size,
                    max);
    *out = &v->via.array;
    return 0;
}

#define N_KEYS(keys) (sizeof(keys) / sizeof((keys)[0]))

/* ------------------------------------------------------------------------ */
/* CHALLENGE                                                                */
/* ------------------------------------------------------------------------ */

int crp_challenge_encode(const crp_challenge *m, crp_buf *out)
{
    enc e;
    enc_init(&e, out, "challenge");
    msgpack_pack_map(&e.pk, 1);
    enc_bin(&e, "n", m->nonce, CRP_NONCE_SIZE);
    return enc_finish(&e);
}

int crp_challenge_decode(const void *data, size_t len, crp_challenge *out)
{
    static const char *const keys[] = {"n"};
    const where w = {"challenge", NULL, 0};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_challenge m;

    int rc = unpack_body(&w, data, len, &u);
    if (rc != 0)
        return rc;
    rc = map_fields(&w, &u.data, keys, N_KEYS(keys), v);
    if (rc == 0)
        rc = get_bin_exact(&w, "n", v[0], m.nonce, CRP_NONCE_SIZE);
    if (rc == 0)
        *out = m;
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* HELLO                                                                    */
/* ------------------------------------------------------------------------ */

int crp_hello_encode(const crp_hello *m, crp_buf *out)
{
    enc e;
    enc_init(&e, out, "hello");
    msgpack_pack_map(&e.pk, m->has_mac ? 7 : 6);
    enc_u64(&e, "v", m->version);
    enc_u64(&e, "caps", m->caps);
    enc_u64(&e, "role", m->role);
    enc_str(&e, "name", m->name, CRP_MAX_NAME);
    enc_u64(&e, "inst", m->instance);
    enc_bin(&e, "cn", m->client_nonce, CRP_NONCE_SIZE);
    if (m->has_mac)
        enc_bin(&e, "mac", m->mac, CRP_MAC_SIZE);
    return enc_finish(&e);
}

int crp_hello_decode(const void *data, size_t len, crp_hello *out)
{
    enum { K_V, K_CAPS, K_ROLE, K_NAME, K_INST, K_CN, K_MAC };
    static const char *const keys[] = {"v", "caps", "role", "name", "inst", "cn", "mac"};
    const where w = {"hello", NULL, 0};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_hello m = {0};

    int rc = unpack_body(&w, data, len, &u);
    if (rc != 0)
        return rc;
    rc = map_fields(&w, &u.data, keys, N_KEYS(keys), v);
    if (rc != 0)
        goto destroy_unpacked;
    if ((rc = get_u32(&w, "v", v[K_V], &m.version)) != 0 ||
        (rc = get_u32(&w, "caps", v[K_CAPS], &m.caps)) != 0 ||
        (rc = get_u8(&w, "role", v[K_ROLE], &m.role)) != 0 ||
        (rc = get_str(&w, "name", v[K_NAME], CRP_MAX_NAME, &m.name)) != 0 ||
        (rc = get_uint(&w, "inst", v[K_INST], UINT64_MAX, &m.instance)) != 0 ||
        (rc = get_bin_exact(&w, "cn", v[K_CN], m.client_nonce, CRP_NONCE_SIZE)) != 0)
        goto clear_message;
    if (v[K_MAC] != NULL) {
        rc = get_bin_exact(&w, "mac", v[K_MAC], m.mac, CRP_MAC_SIZE);
        if (rc != 0)
            goto clear_message;
        m.has_mac = true;
    }
    *out = m;
    goto destroy_unpacked;

clear_message:
    crp_hello_clear(&m);
destroy_unpacked:
    msgpack_unpacked_destroy(&u);
    return rc;
}

void crp_hello_clear(crp_hello *m)
{
    free(m->name);
    memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------------------ */
/* HELLO_ACK                                                                */
/* ------------------------------------------------------------------------ */

int crp_hello_ack_encode(const crp_hello_ack *m, crp_buf *out)
{
    enc e;
    enc_init(&e, out, "hello_ack");
    msgpack_pack_map(&e.pk, m->has_mac ? 5 : 4);
    enc_u64(&e, "v", m->version);
    enc_u64(&e, "caps", m->caps);
    enc_str(&e, "name", m->name, CRP_MAX_NAME);
    enc_u64(&e, "inst", m->instance);
    if (m->has_mac)
        enc_bin(&e, "mac", m->mac, CRP_MAC_SIZE);
    return enc_finish(&e);
}

int crp_hello_ack_decode(const void *data, size_t len, crp_hello_ack *out)
{
    enum { K_V, K_CAPS, K_NAME, K_INST, K_MAC };
    static const char *const keys[] = {"v", "caps", "name", "inst", "mac"};
    const where w = {"hello_ack", NULL, 0};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_hello_ack m = {0};

    int rc = unpack_body(&w, data, len, &u);
    if (rc != 0)
        return rc;
    rc = map_fields(&w, &u.data, keys, N_KEYS(keys), v);
    if (rc != 0)
        goto destroy_unpacked;
    if ((rc = get_u32(&w, "v", v[K_V], &m.version)) != 0 ||
        (rc = get_u32(&w, "caps", v[K_CAPS], &m.caps)) != 0 ||
        (rc = get_str(&w, "name", v[K_NAME], CRP_MAX_NAME, &m.name)) != 0 ||
        (rc = get_uint(&w, "inst", v[K_INST], UINT64_MAX, &m.instance)) != 0)
        goto clear_message;
    if (v[K_MAC] != NULL) {
        rc = get_bin_exact(&w, "mac", v[K_MAC], m.mac, CRP_MAC_SIZE);
        if (rc != 0)
            goto clear_message;
        m.has_mac = true;
    }
    *out = m;
    goto destroy_unpacked;

clear_message:
    crp_hello_ack_clear(&m);
destroy_unpacked:
    msgpack_unpacked_destroy(&u);
    return rc;
}

void crp_hello_ack_clear(crp_hello_ack *m)
{
    free(m->name);
    memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------------------ */
/* DESCRIPTOR                                                               */
/* ------------------------------------------------------------------------ */

static void enc_endpoint(enc *e, const crp_endpoint *ep)
{
    msgpack_pack_map(&e->pk, 2);
    enc_str(e, "t", ep->transport, CRP_MAX_NAME);
    enc_str(e, "a", ep->address, CRP_MAX_ADDRESS);
}

static void enc_buffer(enc *e, const crp_buffer_desc *b)
{
    if (b->length == 0) {
        enc_invalid(e, NULL, "has length 0");
        return;
    }
    if (b->addr > UINT64_MAX - b->length) {
        enc_invalid(e, NULL, "range 0x%llx + 0x%llx overflows", (unsigned long long)b->addr,
                    (unsigned long long)b->length);
        return;
    }
    msgpack_pack_map(&e->pk, b->shm_handle != NULL ? 6 : 5);
    enc_u64(e, "a", b->addr);
    enc_u64(e, "l", b->length);
    enc_u64(e, "k", b->kind);
    enc_key(e, "d");
    msgpack_pack_int32(&e->pk, b->device);
    enc_key(e, "r");
    if (b->remote_accessible)
        msgpack_pack_true(&e->pk);
    else
        msgpack_pack_false(&e->pk);
    if (b->shm_handle != NULL)
        enc_str(e, "h", b->shm_handle, CRP_MAX_HANDLE);
}

int crp_descriptor_encode(const crp_descriptor *m, crp_buf *out)
{
    enc e;
    enc_init(&e, out, "descriptor");
    msgpack_pack_map(&e.pk, 6);
    enc_str(&e, "name", m->name, CRP_MAX_NAME);
    enc_str(&e, "host", m->host_id, CRP_MAX_NAME);
    enc_u64(&e, "inst", m->instance);
    enc_u64(&e, "ver", m->version);

    if (m->n_endpoints > CRP_MAX_ENDPOINTS)
        enc_invalid(&e, "eps", "has too many entries (%zu > %d)", m->n_endpoints,
                    CRP_MAX_ENDPOINTS);
    else if (m->n_endpoints > 0 && m->endpoints == NULL)
        enc_invalid(&e, "eps", "is NULL with %zu entries", m->n_endpoints);
    if (e.status != 0)
        return enc_finish(&e);
    enc_key(&e, "eps");
    msgpack_pack_array(&e.pk, m->n_endpoints);
    e.w.item = "endpoint";
    for (size_t i = 0; i < m->n_endpoints && e.status == 0; i++) {
        e.w.index = i;
        enc_endpoint(&e, &m->endpoints[i]);
    }
    e.w.item = NULL;

    if (m->n_buffers > CRP_MAX_BUFFERS)
        enc_invalid(&e, "bufs", "has too many entries (%zu > %d)", m->n_buffers, CRP_MAX_BUFFERS);
    else if (m->n_buffers > 0 && m->buffers == NULL)
        enc_invalid(&e, "bufs", "is NULL with %zu entries", m->n_buffers);
    if (e.status != 0)
        return enc_finish(&e);
    enc_key(&e, "bufs");
    msgpack_pack_array(&e.pk, m->n_buffers);
    e.w.item = "buffer";
    for (size_t i = 0; i < m->n_buffers && e.status == 0; i++) {
        e.w.index = i;
        enc_buffer(&e, &m->buffers[i]);
    }
    return enc_finish(&e);
}

static int dec_endpoint(const where *w, const msgpack_object *o, crp_endpoint *ep)
{
    enum { K_T, K_A };
    static const char *const keys[] = {"t", "a"};
    const msgpack_object *v[N_KEYS(keys)];

    int rc = map_fields(w, o, keys, N_KEYS(keys), v);
    if (rc == 0)
        rc = get_str(w, "t", v[K_T], CRP_MAX_NAME, &ep->transport);
    if (rc == 0)
        rc = get_str(w, "a", v[K_A], CRP_MAX_ADDRESS, &ep->address);
    return rc; /* partial strings are freed by the caller's clear */
}

static int dec_buffer(const where *w, const msgpack_object *o, crp_buffer_desc *b)
{
    enum { K_A, K_L, K_K, K_D, K_R, K_H };
    static const char *const keys[] = {"a", "l", "k", "d", "r", "h"};
    const msgpack_object *v[N_KEYS(keys)];

    int rc = map_fields(w, o, keys, N_KEYS(keys), v);
    if (rc != 0)
        return rc;
    if ((rc = get_uint(w, "a", v[K_A], UINT64_MAX, &b->addr)) != 0 ||
        (rc = get_uint(w, "l", v[K_L], UINT64_MAX, &b->length)) != 0 ||
        (rc = get_u8(w, "k", v[K_K], &b->kind)) != 0 ||
        (rc = get_i32(w, "d", v[K_D], &b->device)) != 0 ||
        (rc = get_bool(w, "r", v[K_R], &b->remote_accessible)) != 0)
        return rc;
    if (b->length == 0)
        return fail(MALFORMED, w, NULL, "has length 0");
    if (b->addr > UINT64_MAX - b->length)
        return fail(MALFORMED, w, NULL, "range 0x%llx + 0x%llx overflows",
                    (unsigned long long)b->addr, (unsigned long long)b->length);
    if (v[K_H] != NULL)
        rc = get_str(w, "h", v[K_H], CRP_MAX_HANDLE, &b->shm_handle);
    return rc;
}

int crp_descriptor_decode(const void *data, size_t len, crp_descriptor *out)
{
    enum { K_NAME, K_HOST, K_INST, K_VER, K_EPS, K_BUFS };
    static const char *const keys[] = {"name", "host", "inst", "ver", "eps", "bufs"};
    where w = {"descriptor", NULL, 0};
    const msgpack_object *v[N_KEYS(keys)];
    const msgpack_object_array *eps;
    const msgpack_object_array *bufs;
    msgpack_unpacked u;
    crp_descriptor m = {0};

    int rc = unpack_body(&w, data, len, &u);
    if (rc != 0)
        return rc;
    rc = map_fields(&w, &u.data, keys, N_KEYS(keys), v);
    if (rc != 0)
        goto destroy_unpacked;
    if ((rc = get_str(&w, "name", v[K_NAME], CRP_MAX_NAME, &m.name)) != 0 ||
        (rc = get_str(&w, "host", v[K_HOST], CRP_MAX_NAME, &m.host_id)) != 0 ||
        (rc = get_uint(&w, "inst", v[K_INST], UINT64_MAX, &m.instance)) != 0 ||
        (rc = get_uint(&w, "ver", v[K_VER], UINT64_MAX, &m.version)) != 0 ||
        (rc = get_array(&w, "eps", v[K_EPS], CRP_MAX_ENDPOINTS, &eps)) != 0 ||
        (rc = get_array(&w, "bufs", v[K_BUFS], CRP_MAX_BUFFERS, &bufs)) != 0)
        goto clear_message;

    if (eps->size > 0) {
        m.endpoints = calloc(eps->size, sizeof(*m.endpoints));
        if (m.endpoints == NULL) {
            rc = fail(CR_ERR_NO_MEMORY, &w, "eps", "cannot allocate %u entries",
                      (unsigned)eps->size);
            goto clear_message;
        }
        m.n_endpoints = eps->size;
    }
    w.item = "endpoint";
    for (size_t i = 0; i < m.n_endpoints; i++) {
        w.index = i;
        rc = dec_endpoint(&w, &eps->ptr[i], &m.endpoints[i]);
        if (rc != 0)
            goto clear_message;
    }

    if (bufs->size > 0) {
        m.buffers = calloc(bufs->size, sizeof(*m.buffers));
        if (m.buffers == NULL) {
            w.item = NULL;
            rc = fail(CR_ERR_NO_MEMORY, &w, "bufs", "cannot allocate %u entries",
                      (unsigned)bufs->size);
            goto clear_message;
        }
        m.n_buffers = bufs->size;
    }
    w.item = "buffer";
    for (size_t i = 0; i < m.n_buffers; i++) {
        w.index = i;
        rc = dec_buffer(&w, &bufs->ptr[i], &m.buffers[i]);
        if (rc != 0)
            goto clear_message;
    }
    *out = m;
    goto destroy_unpacked;

clear_message:
    crp_descriptor_clear(&m);
destroy_unpacked:
    msgpack_unpacked_destroy(&u);
    return rc;
}

void crp_descriptor_clear(crp_descriptor *m)
{
    free(m->name);
    free(m->host_id);
    for (size_t i = 0; i < m->n_endpoints; i++) {
        free(m->endpoints[i].transport);
        free(m->endpoints[i].address);
    }
    free(m->endpoints);
    for (size_t i = 0; i < m->n_buffers; i++)
        free(m->buffers[i].shm_handle);
    free(m->buffers);
    memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------------------ */
/* NOTIFY                                                                   */
/* ------------------------------------------------------------------------ */

int crp_notify_encode(const crp_notify *m, crp_buf *out)
{
    enc e;
    enc_init(&e, out, "notify");
    if (m->length > CRP_MAX_NOTIFY)
        enc_invalid(&e, "msg", "is too long (%zu > %d bytes)", m->length, CRP_MAX_NOTIFY);
    else if (m->length > 0 && m->message == NULL)
        enc_invalid(&e, "msg", "is NULL with length %zu", m->length);
    msgpack_pack_map(&e.pk, 2);
    enc_str(&e, "from", m->from, CRP_MAX_NAME);
    enc_bin(&e, "msg", m->message, m->length);
    return enc_finish(&e);
}

int crp_notify_decode(const void *data, size_t len, crp_notify *out)
{
    enum { K_FROM, K_MSG };
    static const char *const keys[] = {"from", "msg"};
    const where w = {"notify", NULL, 0};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_notify m = {0};

    int rc = unpack_body(&w, data, len, &u);
    if (rc != 0)
        return rc;
    rc = map_fields(&w, &u.data, keys, N_KEYS(keys), v);
    if (rc != 0)
        goto destroy_unpacked;
    rc = get_str(&w, "from", v[K_FROM], CRP_MAX_NAME, &m.from);
    if (rc != 0)
        goto clear_message;

    const msgpack_object *msg = v[K_MSG];
    if (msg == NULL) {
        rc = fail(MALFORMED, &w, "msg", "is missing");
        goto clear_message;
    }
    if (msg->type != MSGPACK_OBJECT_BIN) {
        rc = fail(MALFORMED, &w, "msg", "is not binary (msgpack type %d)", (int)msg->type);
        goto clear_message;
    }
    if (msg->via.bin.size > CRP_MAX_NOTIFY) {
        rc = fail(MALFORMED, &w, "msg", "is too long (%u > %d bytes)", (unsigned)msg->via.bin.size,
                  CRP_MAX_NOTIFY);
        goto clear_message;
    }
    m.length = msg->via.bin.size;
    m.message = malloc(m.length + 1);
    if (m.message == NULL) {
        rc = fail(CR_ERR_NO_MEMORY, &w, "msg", "cannot copy %zu bytes", m.length);
        goto clear_message;
    }
    if (m.length > 0)
        memcpy(m.message, msg->via.bin.ptr, m.length);
    m.message[m.length] = '\0';
    *out = m;
    goto destroy_unpacked;

clear_message:
    crp_notify_clear(&m);
destroy_unpacked:
    msgpack_unpacked_destroy(&u);
    return rc;
}

void crp_notify_clear(crp_notify *m)
{
    free(m->from);
    free(m->message);
    memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------------------ */
/* DATA REQUEST                                                             */
/* ------------------------------------------------------------------------ */

int crp_data_req_encode(const crp_data_req *m, crp_buf *out)
{
    enc e;
    enc_init(&e, out, "data request");
    msgpack_pack_array(&e.pk, 2);
    msgpack_pack_uint64(&e.pk, m->addr);
    msgpack_pack_uint64(&e.pk, m->length);
    return enc_finish(&e);
}

/*
 * Read one non-negative msgpack integer (any of the fixint, uint and int
 * encodings, as msgpack-c would accept) at *pos. NULL, or why not.
 */
static const char *read_uint(const uint8_t *p, size_t len, size_t *pos, uint64_t *out)
{
    if (*pos >= len)
        return "is truncated";
    uint8_t b = p[(*pos)++];
    size_t n;
    int is_signed = 0;

    if (b <= 0x7f) {
        *out = b;
        return NULL;
    }
    switch (b) {
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf:
        n = (size_t)1 << (b - 0xcc);
        break;
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3:
        n = (size_t)1 << (b - 0xd0);
        is_signed = 1;
        break;
    default:
        return b >= 0xe0 ? "is negative" : "is not an unsigned integer";
    }
    if (n > len - *pos)
        return "is truncated";
    uint64_t x = crp_mp_load_be(p + *pos, n);
    *pos += n;
    if (is_signed && (x >> (8 * n - 1)) != 0)
        return "is negative";
    *out = x;
    return NULL;
}

int crp_data_req_decode(const void *data, size_t len, crp_data_req *out)
{
    static const where w = {"data request", NULL, 0};
    const uint8_t *p = data;
    size_t pos = 0;
    uint64_t count;
    crp_data_req m;
    const char *why;

    if (len == 0)
        return fail(MALFORMED, &w, NULL, "body is empty");
    uint8_t b = p[pos++];
    if (b >= 0x90 && b <= 0x9f) {
        count = b & 0x0fu;
    } else if (b == 0xdc || b == 0xdd) {
        size_t n = b == 0xdc ? 2 : 4;
        if (n > len - pos)
            return fail(MALFORMED, &w, NULL, "body is truncated (%zu bytes)", len);
        count = crp_mp_load_be(p + pos, n);
        pos += n;
    } else {
        return fail(MALFORMED, &w, NULL, "body is not an array (first byte 0x%02x)", b);
    }
    if (count != 2)
        return fail(MALFORMED, &w, NULL, "body has %llu elements, not 2",
                    (unsigned long long)count);
    if ((why = read_uint(p, len, &pos, &m.addr)) != NULL)
        return fail(MALFORMED, &w, "addr", "%s", why);
    if ((why = read_uint(p, len, &pos, &m.length)) != NULL)
        return fail(MALFORMED, &w, "length", "%s", why);
    if (pos != len)
        return fail(MALFORMED, &w, NULL, "body has %zu trailing bytes", len - pos);
    *out = m;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* ERROR                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * The error text is a diagnostic sent on a failure path, so it is never a
 * reason to fail: NULL is sent as "", and a longer text is cut to
 * CRP_MAX_ERROR_TEXT bytes, backing off so no UTF-8 sequence is split.
 */
int crp_error_encode(const crp_error *m, crp_buf *out)
{
    enc e;
    const char *text = m->message != NULL ? m->message : "";
    size_t n = strnlen(text, CRP_MAX_ERROR_TEXT + 1);

    if (n > CRP_MAX_ERROR_TEXT) {
        n = CRP_MAX_ERROR_TEXT;
        while (n > 0 && ((uint8_t)text[n] & 0xC0) == 0x80)
            n--;
    }
    enc_init(&e, out, "error");
    msgpack_pack_map(&e.pk, 1);
    enc_key(&e, "msg");
    msgpack_pack_str_with_body(&e.pk, text, n);
    return enc_finish(&e);
}

int crp_error_decode(const void *data, size_t len, crp_error *out)
{
    static const char *const keys[] = {"msg"};
    const where w = {"error", NULL, 0};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_error m = {0};

    int rc = unpack_body(&w, data, len, &u);
    if (rc != 0)
        return rc;
    rc = map_fields(&w, &u.data, keys, N_KEYS(keys), v);
    if (rc == 0)
        rc = get_str(&w, "msg", v[0], CRP_MAX_ERROR_TEXT, &m.message);
    if (rc == 0)
        *out = m;
    msgpack_unpacked_destroy(&u);
    return rc;
}

void crp_error_clear(crp_error *m)
{
    free(m->message);
    memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------------------ */
/* SHM REQUEST / REPLY                                                      */
/* ------------------------------------------------------------------------ */

int crp_shm_request_encode(const crp_shm_request *m, crp_buf *out)
{
    enc e;
    enc_init(&e, out, "shm request");
    if (m->op != CRP_SHM_CONTROL_PAGE && m->op != CRP_SHM_REGION)
        enc_invalid(&e, "op", "is %u, not a known operation", (unsigned)m->op);
    msgpack_pack_map(&e.pk, 2);
    enc_u64(&e, "op", m->op);
    enc_u64(&e, "id", m->id);
    return enc_finish(&e);
}

int crp_shm_request_decode(const void *data, size_t len, crp_shm_request *out)
{
    static const char *const keys[] = {"op", "id"};
    const where w = {"shm request", NULL, 0};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_shm_request m;

    int rc = unpack_body(&w, data, len, &u);
    if (rc != 0)
        return rc;
    rc = map_fields(&w, &u.data, keys, N_KEYS(keys), v);
    if (rc == 0)
        rc = get_u8(&w, "op", v[0], &m.op);
    if (rc == 0 && m.op != CRP_SHM_CONTROL_PAGE && m.op != CRP_SHM_REGION)
        rc = fail(MALFORMED, &w, "op", "is %u, not a known operation", (unsigned)m.op);
    if (rc == 0)
        rc = get_uint(&w, "id", v[1], UINT64_MAX, &m.id);
    if (rc == 0)
        *out = m;
    msgpack_unpacked_destroy(&u);
    return rc;
}

int crp_shm_reply_encode(const crp_shm_reply *m, crp_buf *out)
{
    enc e;
    enc_init(&e, out, "shm reply");
    msgpack_pack_map(&e.pk, 2);
    enc_key(&e, "st");
    msgpack_pack_int32(&e.pk, m->status);
    enc_u64(&e, "size", m->size);
    return enc_finish(&e);
}

int crp_shm_reply_decode(const void *data, size_t len, crp_shm_reply *out)
{
    static const char *const keys[] = {"st", "size"};
    const where w = {"shm reply", NULL, 0};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_shm_reply m;

    int rc = unpack_body(&w, data, len, &u);
    if (rc != 0)
        return rc;
    rc = map_fields(&w, &u.data, keys, N_KEYS(keys), v);
    if (rc == 0)
        rc = get_i32(&w, "st", v[0], &m.status);
    if (rc == 0)
        rc = get_uint(&w, "size", v[1], UINT64_MAX, &m.size);
    if (rc == 0)
        *out = m;
    msgpack_unpacked_destroy(&u);
    return rc;
}
