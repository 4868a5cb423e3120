/*
 * messages.c - msgpack bodies of crescent frames.
 *
 * Design.
 *
 * The building blocks (error context, encoder, field getters) are shared
 * with rpc.c in mp_codec.c. Encoders drive a msgpack_packer whose writer
 * appends to a crp_buf that grows geometrically. The encoder is "sticky": the first failure
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

#include "proto/mp_codec.h"
#include "proto/mp_scan.h"

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* ------------------------------------------------------------------------ */
/* Error context                                                            */
/* ------------------------------------------------------------------------ */

#define MALFORMED CR_ERR_MALFORMED_FRAME

/* ------------------------------------------------------------------------ */
/* Output buffer and encoder context                                        */
/* ------------------------------------------------------------------------ */

/* A string of at most max bytes and no NUL, copied to a new C string. */
static int get_str(const crp_mp_ctx *w, const char *f, const msgpack_object *v, size_t max,
                   char **out)
{
    const char *p;
    size_t n;
    int rc = crp_mp_get_str_view(w, f, v, max, &p, &n);
    if (rc != 0)
        return rc;
    char *s = malloc(n + 1);
    if (s == NULL)
        return crp_mp_fail(CR_ERR_NO_MEMORY, w, f, "cannot copy %zu bytes", n);
    if (n > 0)
        memcpy(s, p, n);
    s[n] = '\0';
    *out = s;
    return 0;
}

/* A binary of exactly size bytes, copied into out. */
static int get_bin_exact(const crp_mp_ctx *w, const char *f, const msgpack_object *v, uint8_t *out,
                         size_t size)
{
    const uint8_t *p;
    int rc = crp_mp_get_bin_view(w, f, v, size, &p);
    if (rc == 0)
        memcpy(out, p, size);
    return rc;
}

#define N_KEYS(keys) (sizeof(keys) / sizeof((keys)[0]))

/* ------------------------------------------------------------------------ */
/* CHALLENGE                                                                */
/* ------------------------------------------------------------------------ */

int crp_challenge_encode(const crp_challenge *m, crp_buf *out)
{
    crp_mp_enc e;
    crp_mp_enc_init(&e, out, "challenge", SIZE_MAX);
    msgpack_pack_map(&e.pk, 1);
    crp_mp_enc_bin(&e, "n", m->nonce, CRP_NONCE_SIZE);
    return crp_mp_enc_finish(&e);
}

int crp_challenge_decode(const void *data, size_t len, crp_challenge *out)
{
    static const char *const keys[] = {"n"};
    const crp_mp_ctx w = {.msg = "challenge"};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_challenge m;

    int rc = crp_mp_unpack_map(&w, data, len, SIZE_MAX, keys, N_KEYS(keys), v, &u);
    if (rc != 0)
        return rc;
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
    crp_mp_enc e;
    crp_mp_enc_init(&e, out, "hello", SIZE_MAX);
    msgpack_pack_map(&e.pk, m->has_mac ? 7 : 6);
    crp_mp_enc_u64(&e, "v", m->version);
    crp_mp_enc_u64(&e, "caps", m->caps);
    crp_mp_enc_u64(&e, "role", m->role);
    crp_mp_enc_str(&e, "name", m->name, CRP_MAX_NAME);
    crp_mp_enc_u64(&e, "inst", m->instance);
    crp_mp_enc_bin(&e, "cn", m->client_nonce, CRP_NONCE_SIZE);
    if (m->has_mac)
        crp_mp_enc_bin(&e, "mac", m->mac, CRP_MAC_SIZE);
    return crp_mp_enc_finish(&e);
}

int crp_hello_decode(const void *data, size_t len, crp_hello *out)
{
    enum { K_V, K_CAPS, K_ROLE, K_NAME, K_INST, K_CN, K_MAC };
    static const char *const keys[] = {"v", "caps", "role", "name", "inst", "cn", "mac"};
    const crp_mp_ctx w = {.msg = "hello"};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_hello m = {0};

    int rc = crp_mp_unpack_map(&w, data, len, SIZE_MAX, keys, N_KEYS(keys), v, &u);
    if (rc != 0)
        return rc;
    if ((rc = crp_mp_get_u32(&w, "v", v[K_V], &m.version)) != 0 ||
        (rc = crp_mp_get_u32(&w, "caps", v[K_CAPS], &m.caps)) != 0 ||
        (rc = crp_mp_get_u8(&w, "role", v[K_ROLE], UINT8_MAX, &m.role)) != 0 ||
        (rc = get_str(&w, "name", v[K_NAME], CRP_MAX_NAME, &m.name)) != 0 ||
        (rc = crp_mp_get_uint(&w, "inst", v[K_INST], UINT64_MAX, &m.instance)) != 0 ||
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
    crp_mp_enc e;
    crp_mp_enc_init(&e, out, "hello_ack", SIZE_MAX);
    msgpack_pack_map(&e.pk, m->has_mac ? 5 : 4);
    crp_mp_enc_u64(&e, "v", m->version);
    crp_mp_enc_u64(&e, "caps", m->caps);
    crp_mp_enc_str(&e, "name", m->name, CRP_MAX_NAME);
    crp_mp_enc_u64(&e, "inst", m->instance);
    if (m->has_mac)
        crp_mp_enc_bin(&e, "mac", m->mac, CRP_MAC_SIZE);
    return crp_mp_enc_finish(&e);
}

int crp_hello_ack_decode(const void *data, size_t len, crp_hello_ack *out)
{
    enum { K_V, K_CAPS, K_NAME, K_INST, K_MAC };
    static const char *const keys[] = {"v", "caps", "name", "inst", "mac"};
    const crp_mp_ctx w = {.msg = "hello_ack"};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_hello_ack m = {0};

    int rc = crp_mp_unpack_map(&w, data, len, SIZE_MAX, keys, N_KEYS(keys), v, &u);
    if (rc != 0)
        return rc;
    if ((rc = crp_mp_get_u32(&w, "v", v[K_V], &m.version)) != 0 ||
        (rc = crp_mp_get_u32(&w, "caps", v[K_CAPS], &m.caps)) != 0 ||
        (rc = get_str(&w, "name", v[K_NAME], CRP_MAX_NAME, &m.name)) != 0 ||
        (rc = crp_mp_get_uint(&w, "inst", v[K_INST], UINT64_MAX, &m.instance)) != 0)
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

static void enc_endpoint(crp_mp_enc *e, const crp_endpoint *ep)
{
    size_t n = ep->address_len ? ep->address_len : (ep->address ? strlen(ep->address) : 0);
    if (ep->address == NULL || n == 0 || n > CRP_MAX_ENDPOINT) {
        crp_mp_enc_invalid(e, "a", "is empty or longer than %d bytes", CRP_MAX_ENDPOINT);
        return;
    }
    msgpack_pack_map(&e->pk, 2);
    crp_mp_enc_str(e, "t", ep->transport, CRP_MAX_TRANSPORT_NAME);
    crp_mp_enc_bin(e, "a", ep->address, n);
}

static void enc_blobs(crp_mp_enc *e, const crp_buffer_desc *b)
{
    if (b->n_blobs > CRP_MAX_BLOBS) {
        crp_mp_enc_invalid(e, "x", "has too many entries (%zu > %d)", b->n_blobs, CRP_MAX_BLOBS);
        return;
    }
    crp_mp_enc_key(e, "x");
    msgpack_pack_map(&e->pk, b->n_blobs);
    for (size_t i = 0; i < b->n_blobs && e->status == 0; i++) {
        const crp_blob *x = &b->blobs[i];
        if (x->len == 0 || x->len > CRP_MAX_BLOB) {
            crp_mp_enc_invalid(e, "x", "blob of %s has %zu bytes (1..%d)", x->transport, x->len,
                               CRP_MAX_BLOB);
            return;
        }
        crp_mp_enc_str_value(e, "x", x->transport, CRP_MAX_TRANSPORT_NAME);
        msgpack_pack_bin(&e->pk, x->len);
        msgpack_pack_bin_body(&e->pk, x->data, x->len);
    }
}

static void enc_buffer(crp_mp_enc *e, const crp_buffer_desc *b)
{
    if (b->length == 0) {
        crp_mp_enc_invalid(e, NULL, "has length 0");
        return;
    }
    if (b->addr > UINT64_MAX - b->length) {
        crp_mp_enc_invalid(e, NULL, "range 0x%llx + 0x%llx overflows", (unsigned long long)b->addr,
                           (unsigned long long)b->length);
        return;
    }
    msgpack_pack_map(&e->pk, b->n_blobs > 0 ? 6 : 5);
    crp_mp_enc_u64(e, "a", b->addr);
    crp_mp_enc_u64(e, "l", b->length);
    crp_mp_enc_u64(e, "k", b->kind);
    crp_mp_enc_key(e, "d");
    msgpack_pack_int32(&e->pk, b->device);
    crp_mp_enc_key(e, "r");
    if (b->remote_accessible)
        msgpack_pack_true(&e->pk);
    else
        msgpack_pack_false(&e->pk);
    if (b->n_blobs > 0)
        enc_blobs(e, b);
}

int crp_descriptor_encode(const crp_descriptor *m, crp_buf *out)
{
    crp_mp_enc e;
    crp_mp_enc_init(&e, out, "descriptor", SIZE_MAX);
    msgpack_pack_map(&e.pk, 6);
    crp_mp_enc_str(&e, "name", m->name, CRP_MAX_NAME);
    crp_mp_enc_str(&e, "host", m->host_id, CRP_MAX_NAME);
    crp_mp_enc_u64(&e, "inst", m->instance);
    crp_mp_enc_u64(&e, "ver", m->version);

    if (m->n_endpoints > CRP_MAX_ENDPOINTS)
        crp_mp_enc_invalid(&e, "eps", "has too many entries (%zu > %d)", m->n_endpoints,
                           CRP_MAX_ENDPOINTS);
    else if (m->n_endpoints > 0 && m->endpoints == NULL)
        crp_mp_enc_invalid(&e, "eps", "is NULL with %zu entries", m->n_endpoints);
    if (e.status != 0)
        return crp_mp_enc_finish(&e);
    crp_mp_enc_key(&e, "eps");
    msgpack_pack_array(&e.pk, m->n_endpoints);
    for (size_t i = 0; i < m->n_endpoints && e.status == 0; i++) {
        size_t mark = crp_mp_path_push(&e.c, "endpoint", i);
        enc_endpoint(&e, &m->endpoints[i]);
        crp_mp_path_pop(&e.c, mark);
    }

    if (m->n_buffers > CRP_MAX_BUFFERS)
        crp_mp_enc_invalid(&e, "bufs", "has too many entries (%zu > %d)", m->n_buffers,
                           CRP_MAX_BUFFERS);
    else if (m->n_buffers > 0 && m->buffers == NULL)
        crp_mp_enc_invalid(&e, "bufs", "is NULL with %zu entries", m->n_buffers);
    if (e.status != 0)
        return crp_mp_enc_finish(&e);
    crp_mp_enc_key(&e, "bufs");
    msgpack_pack_array(&e.pk, m->n_buffers);
    for (size_t i = 0; i < m->n_buffers && e.status == 0; i++) {
        size_t mark = crp_mp_path_push(&e.c, "buffer", i);
        enc_buffer(&e, &m->buffers[i]);
        crp_mp_path_pop(&e.c, mark);
    }
    return crp_mp_enc_finish(&e);
}

/* A binary of 1..max bytes, copied with a trailing NUL. */
static int get_bin_copy(const crp_mp_ctx *w, const char *f, const msgpack_object *v, size_t max,
                        uint8_t **out, size_t *out_len)
{
    if (v == NULL)
        return crp_mp_fail(MALFORMED, w, f, "is missing");
    if (v->type != MSGPACK_OBJECT_BIN)
        return crp_mp_fail(MALFORMED, w, f, "is not binary (msgpack type %d)", (int)v->type);
    size_t n = v->via.bin.size;
    if (n == 0 || n > max)
        return crp_mp_fail(MALFORMED, w, f, "has %zu bytes (1..%zu)", n, max);
    uint8_t *p = malloc(n + 1);
    if (p == NULL)
        return crp_mp_fail(CR_ERR_NO_MEMORY, w, f, "cannot copy %zu bytes", n);
    memcpy(p, v->via.bin.ptr, n);
    p[n] = '\0';
    *out = p;
    *out_len = n;
    return 0;
}

static int dec_endpoint(const crp_mp_ctx *w, const msgpack_object *o, crp_endpoint *ep)
{
    enum { K_T, K_A };
    static const char *const keys[] = {"t", "a"};
    const msgpack_object *v[N_KEYS(keys)];

    int rc = crp_mp_map_fields(w, NULL, o, keys, N_KEYS(keys), v);
    if (rc == 0)
        rc = get_str(w, "t", v[K_T], CRP_MAX_TRANSPORT_NAME, &ep->transport);
    if (rc == 0)
        rc = get_bin_copy(w, "a", v[K_A], CRP_MAX_ENDPOINT, (uint8_t **)&ep->address,
                          &ep->address_len);
    return rc; /* partial strings are freed by the caller's clear */
}

static int dec_blobs(const crp_mp_ctx *w, const msgpack_object *v, crp_buffer_desc *b)
{
    if (v->type != MSGPACK_OBJECT_MAP)
        return crp_mp_fail(MALFORMED, w, "x", "is not a map (msgpack type %d)", (int)v->type);
    const msgpack_object_map *m = &v->via.map;
    if (m->size > CRP_MAX_BLOBS)
        return crp_mp_fail(MALFORMED, w, "x", "has %u entries (at most %d)", (unsigned)m->size,
                           CRP_MAX_BLOBS);
    if (m->size == 0)
        return 0;
    b->blobs = calloc(m->size, sizeof(*b->blobs));
    if (b->blobs == NULL)
        return crp_mp_fail(CR_ERR_NO_MEMORY, w, "x", "cannot allocate %u entries",
                           (unsigned)m->size);
    b->n_blobs = m->size;
    for (size_t i = 0; i < m->size; i++) {
        crp_blob *x = &b->blobs[i];
        int rc = get_str(w, "x", &m->ptr[i].key, CRP_MAX_TRANSPORT_NAME, &x->transport);
        if (rc == 0)
            rc = get_bin_copy(w, "x", &m->ptr[i].val, CRP_MAX_BLOB, &x->data, &x->len);
        if (rc != 0)
            return rc;
        for (size_t j = 0; j < i; j++)
            if (strcmp(b->blobs[j].transport, x->transport) == 0)
                return crp_mp_fail(MALFORMED, w, "x", "names transport '%s' twice", x->transport);
    }
    return 0;
}

static int dec_buffer(const crp_mp_ctx *w, const msgpack_object *o, crp_buffer_desc *b)
{
    enum { K_A, K_L, K_K, K_D, K_R, K_X };
    static const char *const keys[] = {"a", "l", "k", "d", "r", "x"};
    const msgpack_object *v[N_KEYS(keys)];

    int rc = crp_mp_map_fields(w, NULL, o, keys, N_KEYS(keys), v);
    if (rc != 0)
        return rc;
    if ((rc = crp_mp_get_uint(w, "a", v[K_A], UINT64_MAX, &b->addr)) != 0 ||
        (rc = crp_mp_get_uint(w, "l", v[K_L], UINT64_MAX, &b->length)) != 0 ||
        (rc = crp_mp_get_u8(w, "k", v[K_K], UINT8_MAX, &b->kind)) != 0 ||
        (rc = crp_mp_get_i32(w, "d", v[K_D], &b->device)) != 0 ||
        (rc = crp_mp_get_bool(w, "r", v[K_R], &b->remote_accessible)) != 0)
        return rc;
    if (b->length == 0)
        return crp_mp_fail(MALFORMED, w, NULL, "has length 0");
    if (b->addr > UINT64_MAX - b->length)
        return crp_mp_fail(MALFORMED, w, NULL, "range 0x%llx + 0x%llx overflows",
                           (unsigned long long)b->addr, (unsigned long long)b->length);
    if (v[K_X] != NULL)
        rc = dec_blobs(w, v[K_X], b);
    return rc;
}

int crp_descriptor_decode(const void *data, size_t len, crp_descriptor *out)
{
    enum { K_NAME, K_HOST, K_INST, K_VER, K_EPS, K_BUFS };
    static const char *const keys[] = {"name", "host", "inst", "ver", "eps", "bufs"};
    crp_mp_ctx w = {.msg = "descriptor"};
    const msgpack_object *v[N_KEYS(keys)];
    const msgpack_object_array *eps;
    const msgpack_object_array *bufs;
    msgpack_unpacked u;
    crp_descriptor m = {0};

    int rc = crp_mp_unpack_map(&w, data, len, SIZE_MAX, keys, N_KEYS(keys), v, &u);
    if (rc != 0)
        return rc;
    if ((rc = get_str(&w, "name", v[K_NAME], CRP_MAX_NAME, &m.name)) != 0 ||
        (rc = get_str(&w, "host", v[K_HOST], CRP_MAX_NAME, &m.host_id)) != 0 ||
        (rc = crp_mp_get_uint(&w, "inst", v[K_INST], UINT64_MAX, &m.instance)) != 0 ||
        (rc = crp_mp_get_uint(&w, "ver", v[K_VER], UINT64_MAX, &m.version)) != 0 ||
        (rc = crp_mp_get_array(&w, "eps", v[K_EPS], CRP_MAX_ENDPOINTS, &eps)) != 0 ||
        (rc = crp_mp_get_array(&w, "bufs", v[K_BUFS], CRP_MAX_BUFFERS, &bufs)) != 0)
        goto clear_message;

    if (eps->size > 0) {
        m.endpoints = calloc(eps->size, sizeof(*m.endpoints));
        if (m.endpoints == NULL) {
            rc = crp_mp_fail(CR_ERR_NO_MEMORY, &w, "eps", "cannot allocate %u entries",
                             (unsigned)eps->size);
            goto clear_message;
        }
        m.n_endpoints = eps->size;
    }
    for (size_t i = 0; i < m.n_endpoints; i++) {
        size_t mark = crp_mp_path_push(&w, "endpoint", i);
        rc = dec_endpoint(&w, &eps->ptr[i], &m.endpoints[i]);
        crp_mp_path_pop(&w, mark);
        if (rc != 0)
            goto clear_message;
    }

    if (bufs->size > 0) {
        m.buffers = calloc(bufs->size, sizeof(*m.buffers));
        if (m.buffers == NULL) {
            rc = crp_mp_fail(CR_ERR_NO_MEMORY, &w, "bufs", "cannot allocate %u entries",
                             (unsigned)bufs->size);
            goto clear_message;
        }
        m.n_buffers = bufs->size;
    }
    for (size_t i = 0; i < m.n_buffers; i++) {
        size_t mark = crp_mp_path_push(&w, "buffer", i);
        rc = dec_buffer(&w, &bufs->ptr[i], &m.buffers[i]);
        crp_mp_path_pop(&w, mark);
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
    for (size_t i = 0; i < m->n_buffers; i++) {
        for (size_t j = 0; j < m->buffers[i].n_blobs; j++) {
            free(m->buffers[i].blobs[j].transport);
            free(m->buffers[i].blobs[j].data);
        }
        free(m->buffers[i].blobs);
    }
    free(m->buffers);
    memset(m, 0, sizeof(*m));
}

const uint8_t *crp_buffer_blob(const crp_buffer_desc *b, const char *transport, size_t *len)
{
    for (size_t i = 0; i < b->n_blobs; i++) {
        if (strcmp(b->blobs[i].transport, transport) == 0) {
            *len = b->blobs[i].len;
            return b->blobs[i].data;
        }
    }
    return NULL;
}

const crp_endpoint *crp_descriptor_endpoint(const crp_descriptor *d, const char *transport)
{
    for (size_t i = 0; i < d->n_endpoints; i++)
        if (strcmp(d->endpoints[i].transport, transport) == 0)
            return &d->endpoints[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* NOTIFY                                                                   */
/* ------------------------------------------------------------------------ */

int crp_notify_encode(const crp_notify *m, crp_buf *out)
{
    crp_mp_enc e;
    crp_mp_enc_init(&e, out, "notify", SIZE_MAX);
    if (m->length > CRP_MAX_NOTIFY)
        crp_mp_enc_invalid(&e, "msg", "is too long (%zu > %d bytes)", m->length, CRP_MAX_NOTIFY);
    else if (m->length > 0 && m->message == NULL)
        crp_mp_enc_invalid(&e, "msg", "is NULL with length %zu", m->length);
    msgpack_pack_map(&e.pk, 2);
    crp_mp_enc_str(&e, "from", m->from, CRP_MAX_NAME);
    crp_mp_enc_bin(&e, "msg", m->message, m->length);
    return crp_mp_enc_finish(&e);
}

int crp_notify_decode(const void *data, size_t len, crp_notify *out)
{
    enum { K_FROM, K_MSG };
    static const char *const keys[] = {"from", "msg"};
    const crp_mp_ctx w = {.msg = "notify"};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_notify m = {0};

    int rc = crp_mp_unpack_map(&w, data, len, SIZE_MAX, keys, N_KEYS(keys), v, &u);
    if (rc != 0)
        return rc;
    rc = get_str(&w, "from", v[K_FROM], CRP_MAX_NAME, &m.from);
    if (rc != 0)
        goto clear_message;

    const msgpack_object *msg = v[K_MSG];
    if (msg == NULL) {
        rc = crp_mp_fail(MALFORMED, &w, "msg", "is missing");
        goto clear_message;
    }
    if (msg->type != MSGPACK_OBJECT_BIN) {
        rc = crp_mp_fail(MALFORMED, &w, "msg", "is not binary (msgpack type %d)", (int)msg->type);
        goto clear_message;
    }
    if (msg->via.bin.size > CRP_MAX_NOTIFY) {
        rc = crp_mp_fail(MALFORMED, &w, "msg", "is too long (%u > %d bytes)",
                         (unsigned)msg->via.bin.size, CRP_MAX_NOTIFY);
        goto clear_message;
    }
    m.length = msg->via.bin.size;
    m.message = malloc(m.length + 1);
    if (m.message == NULL) {
        rc = crp_mp_fail(CR_ERR_NO_MEMORY, &w, "msg", "cannot copy %zu bytes", m.length);
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
    crp_mp_enc e;
    crp_mp_enc_init(&e, out, "data request", SIZE_MAX);
    msgpack_pack_array(&e.pk, 2);
    msgpack_pack_uint64(&e.pk, m->addr);
    msgpack_pack_uint64(&e.pk, m->length);
    return crp_mp_enc_finish(&e);
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
    static const crp_mp_ctx w = {.msg = "data request"};
    const uint8_t *p = data;
    size_t pos = 0;
    uint64_t count;
    crp_data_req m;
    const char *why;

    if (len == 0)
        return crp_mp_fail(MALFORMED, &w, NULL, "body is empty");
    uint8_t b = p[pos++];
    if (b >= 0x90 && b <= 0x9f) {
        count = b & 0x0fu;
    } else if (b == 0xdc || b == 0xdd) {
        size_t n = b == 0xdc ? 2 : 4;
        if (n > len - pos)
            return crp_mp_fail(MALFORMED, &w, NULL, "body is truncated (%zu bytes)", len);
        count = crp_mp_load_be(p + pos, n);
        pos += n;
    } else {
        return crp_mp_fail(MALFORMED, &w, NULL, "body is not an array (first byte 0x%02x)", b);
    }
    if (count != 2)
        return crp_mp_fail(MALFORMED, &w, NULL, "body has %llu elements, not 2",
                           (unsigned long long)count);
    if ((why = read_uint(p, len, &pos, &m.addr)) != NULL)
        return crp_mp_fail(MALFORMED, &w, "addr", "%s", why);
    if ((why = read_uint(p, len, &pos, &m.length)) != NULL)
        return crp_mp_fail(MALFORMED, &w, "length", "%s", why);
    if (pos != len)
        return crp_mp_fail(MALFORMED, &w, NULL, "body has %zu trailing bytes", len - pos);
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
    crp_mp_enc e;
    const char *text = m->message != NULL ? m->message : "";
    size_t n = strnlen(text, CRP_MAX_ERROR_TEXT + 1);

    if (n > CRP_MAX_ERROR_TEXT) {
        n = CRP_MAX_ERROR_TEXT;
        while (n > 0 && ((uint8_t)text[n] & 0xC0) == 0x80)
            n--;
    }
    crp_mp_enc_init(&e, out, "error", SIZE_MAX);
    msgpack_pack_map(&e.pk, 1);
    crp_mp_enc_key(&e, "msg");
    msgpack_pack_str_with_body(&e.pk, text, n);
    return crp_mp_enc_finish(&e);
}

int crp_error_decode(const void *data, size_t len, crp_error *out)
{
    static const char *const keys[] = {"msg"};
    const crp_mp_ctx w = {.msg = "error"};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_error m = {0};

    int rc = crp_mp_unpack_map(&w, data, len, SIZE_MAX, keys, N_KEYS(keys), v, &u);
    if (rc != 0)
        return rc;
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

static bool shm_op_known(uint8_t op)
{
    return op == CRP_SHM_CONTROL_PAGE || op == CRP_SHM_REGION || op == CRP_SHM_AUTH;
}

int crp_shm_request_encode(const crp_shm_request *m, crp_buf *out)
{
    crp_mp_enc e;
    crp_mp_enc_init(&e, out, "shm request", SIZE_MAX);
    if (!shm_op_known(m->op))
        crp_mp_enc_invalid(&e, "op", "is %u, not a known operation", (unsigned)m->op);
    bool auth = m->op == CRP_SHM_AUTH;
    msgpack_pack_map(&e.pk, auth ? 4 : 2);
    crp_mp_enc_u64(&e, "op", m->op);
    crp_mp_enc_u64(&e, "id", m->id);
    if (auth) {
        crp_mp_enc_bin(&e, "cn", m->client_nonce, CRP_NONCE_SIZE);
        crp_mp_enc_bin(&e, "mac", m->mac, CRP_MAC_SIZE);
    }
    return crp_mp_enc_finish(&e);
}

int crp_shm_request_decode(const void *data, size_t len, crp_shm_request *out)
{
    static const char *const keys[] = {"op", "id", "cn", "mac"};
    const crp_mp_ctx w = {.msg = "shm request"};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_shm_request m;
    memset(&m, 0, sizeof(m));

    int rc = crp_mp_unpack_map(&w, data, len, SIZE_MAX, keys, N_KEYS(keys), v, &u);
    if (rc != 0)
        return rc;
    rc = crp_mp_get_u8(&w, "op", v[0], UINT8_MAX, &m.op);
    if (rc == 0 && !shm_op_known(m.op))
        rc = crp_mp_fail(MALFORMED, &w, "op", "is %u, not a known operation", (unsigned)m.op);
    if (rc == 0)
        rc = crp_mp_get_uint(&w, "id", v[1], UINT64_MAX, &m.id);
    if (rc == 0 && m.op == CRP_SHM_AUTH) {
        rc = get_bin_exact(&w, "cn", v[2], m.client_nonce, CRP_NONCE_SIZE);
        if (rc == 0)
            rc = get_bin_exact(&w, "mac", v[3], m.mac, CRP_MAC_SIZE);
    }
    if (rc == 0)
        *out = m;
    msgpack_unpacked_destroy(&u);
    return rc;
}

int crp_shm_reply_encode(const crp_shm_reply *m, crp_buf *out)
{
    crp_mp_enc e;
    crp_mp_enc_init(&e, out, "shm reply", SIZE_MAX);
    msgpack_pack_map(&e.pk, m->has_nonce ? 4 : 2);
    crp_mp_enc_key(&e, "st");
    msgpack_pack_int32(&e.pk, m->status);
    crp_mp_enc_u64(&e, "size", m->size);
    if (m->has_nonce) {
        crp_mp_enc_bin(&e, "non", m->nonce, CRP_NONCE_SIZE);
        crp_mp_enc_bool(&e, "auth", m->auth);
    }
    return crp_mp_enc_finish(&e);
}

int crp_shm_reply_decode(const void *data, size_t len, crp_shm_reply *out)
{
    static const char *const keys[] = {"st", "size", "non", "auth"};
    const crp_mp_ctx w = {.msg = "shm reply"};
    const msgpack_object *v[N_KEYS(keys)];
    msgpack_unpacked u;
    crp_shm_reply m;
    memset(&m, 0, sizeof(m));

    int rc = crp_mp_unpack_map(&w, data, len, SIZE_MAX, keys, N_KEYS(keys), v, &u);
    if (rc != 0)
        return rc;
    rc = crp_mp_get_i32(&w, "st", v[0], &m.status);
    if (rc == 0)
        rc = crp_mp_get_uint(&w, "size", v[1], UINT64_MAX, &m.size);
    if (rc == 0 && (v[2] != NULL || v[3] != NULL)) {
        rc = get_bin_exact(&w, "non", v[2], m.nonce, CRP_NONCE_SIZE);
        if (rc == 0)
            rc = crp_mp_get_bool(&w, "auth", v[3], &m.auth);
        m.has_nonce = true;
    }
    if (rc == 0)
        *out = m;
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* UCX active-message headers (fixed layouts)                               */
/* ------------------------------------------------------------------------ */

static void le64_put(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t le64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return false;
    return true;
}

void crp_am_req_encode(const crp_am_req *m, uint8_t out[CRP_AM_REQ_SIZE])
{
    memset(out, 0, CRP_AM_REQ_SIZE);
    out[0] = m->op;
    le64_put(out + 8, m->id);
    le64_put(out + 16, m->addr);
    le64_put(out + 24, m->length);
}

int crp_am_req_decode(const void *data, size_t len, crp_am_req *out)
{
    const uint8_t *p = data;
    if (len != CRP_AM_REQ_SIZE)
        return crb_error(MALFORMED, "AM request of %zu bytes (want %d)", len, CRP_AM_REQ_SIZE);
    if (p[0] > 1 || !all_zero(p + 1, 7))
        return crb_error(MALFORMED, "AM request with op %u or non-zero padding", p[0]);
    crp_am_req m = {
        .op = p[0], .id = le64_get(p + 8), .addr = le64_get(p + 16), .length = le64_get(p + 24)};
    if (m.length == 0 || m.addr > UINT64_MAX - m.length)
        return crb_error(MALFORMED, "AM request range 0x%llx + %llu is empty or overflows",
                         (unsigned long long)m.addr, (unsigned long long)m.length);
    *out = m;
    return 0;
}

void crp_am_reply_encode(const crp_am_reply *m, uint8_t out[CRP_AM_REPLY_SIZE])
{
    memset(out, 0, CRP_AM_REPLY_SIZE);
    le64_put(out, m->id);
    le64_put(out + 8, (uint64_t)(uint32_t)m->status);
    memset(out + 12, 0, 4);
}

int crp_am_reply_decode(const void *data, size_t len, crp_am_reply *out)
{
    const uint8_t *p = data;
    if (len != CRP_AM_REPLY_SIZE)
        return crb_error(MALFORMED, "AM reply of %zu bytes (want %d)", len, CRP_AM_REPLY_SIZE);
    if (!all_zero(p + 12, 4))
        return crb_error(MALFORMED, "AM reply with non-zero padding");
    int32_t st = (int32_t)(uint32_t)(le64_get(p + 8) & 0xffffffffu);
    if (st > 0)
        return crb_error(MALFORMED, "AM reply with positive status %d", (int)st);
    *out = (crp_am_reply){.id = le64_get(p), .status = st};
    return 0;
}
