/*
 * mp_codec.c - see mp_codec.h.
 */
#include "proto/mp_codec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/mp_scan.h"

#define MALFORMED   CR_ERR_MALFORMED_FRAME
#define BUF_MIN_CAP 256

/* --- error context ---------------------------------------------------------- */

void crp_mp_ctx_init(crp_mp_ctx *c, const char *msg)
{
    snprintf(c->msg, sizeof(c->msg), "%s", msg);
    c->depth = 0;
}

/* "result 3 replica 1 " (empty at top level). */
static void path_format(const crp_mp_ctx *c, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < c->depth && i < CRP_MP_PATH_DEPTH && n < len; i++) {
        const crp_mp_path_entry *p = &c->path[i];
        int w = p->index == CRP_MP_NO_INDEX
                    ? snprintf(buf + n, len - n, "%s ", p->item)
                    : snprintf(buf + n, len - n, "%s %zu ", p->item, p->index);
        if (w < 0)
            break;
        n += (size_t)w;
    }
}

int crp_mp_fail(int status, const crp_mp_ctx *c, const char *field, const char *fmt, ...)
{
    char detail[256];
    char path[96];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    path_format(c, path, sizeof(path));
    if (field != NULL)
        return crb_error(status, "%s: %sfield '%s' %s", c->msg, path, field, detail);
    return crb_error(status, "%s: %s%s", c->msg, path, detail);
}

/* --- encoder --------------------------------------------------------------- */

/* Make room for extra more bytes; 0 or -1 on allocation failure/overflow. */
static int reserve(crp_buf *b, size_t extra)
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

int crp_buf_append(crp_buf *b, const void *p, size_t n)
{
    if (reserve(b, n) != 0)
        return crb_error(CR_ERR_NO_MEMORY, "cannot grow a buffer of %zu bytes by %zu", b->len, n);
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int crp_mp_enc_write(void *enc, const char *p, size_t n)
{
    crp_mp_enc *e = enc;
    if (e->status != 0)
        return -1;
    size_t body = e->out->len - e->start;
    if (n > e->max_body - body) {
        e->status = crp_mp_fail(CR_INVALID_PARAMS, &e->c, NULL,
                                "body would exceed %zu bytes (split the batch)", e->max_body);
        return -1;
    }
    if (reserve(e->out, n) != 0) {
        e->status = crp_mp_fail(CR_ERR_NO_MEMORY, &e->c, NULL,
                                "cannot grow the output buffer (%zu + %zu bytes)", e->out->len, n);
        return -1;
    }
    if (n > 0)
        memcpy(e->out->data + e->out->len, p, n);
    e->out->len += n;
    return 0;
}

void crp_mp_enc_init(crp_mp_enc *e, crp_buf *out, const char *msg, size_t max_body)
{
    e->out = out;
    e->start = out->len;
    e->max_body = max_body;
    e->status = 0;
    crp_mp_ctx_init(&e->c, msg);
    msgpack_packer_init(&e->pk, e, crp_mp_enc_write);
}

int crp_mp_enc_finish(crp_mp_enc *e)
{
    if (e->status != 0) {
        e->out->len = e->start;
        return e->status;
    }
    return 0;
}

void crp_mp_enc_invalid(crp_mp_enc *e, const char *field, const char *fmt, ...)
{
    char detail[200];
    va_list ap;

    if (e->status != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    e->status = crp_mp_fail(CR_INVALID_PARAMS, &e->c, field, "%s (encoding)", detail);
}

/* Every key is a short literal, written as one fixstr in a single write. */
void crp_mp_enc_key(crp_mp_enc *e, const char *key)
{
    char buf[32];
    size_t n = strlen(key);
    if (n >= sizeof(buf)) {
        msgpack_pack_str_with_body(&e->pk, key, n);
        return;
    }
    buf[0] = (char)(0xa0 | n);
    memcpy(buf + 1, key, n);
    crp_mp_enc_write(e, buf, n + 1);
}

void crp_mp_enc_u64(crp_mp_enc *e, const char *key, uint64_t v)
{
    crp_mp_enc_key(e, key);
    msgpack_pack_uint64(&e->pk, v);
}

void crp_mp_enc_i32(crp_mp_enc *e, const char *key, int32_t v)
{
    crp_mp_enc_key(e, key);
    msgpack_pack_int32(&e->pk, v);
}

void crp_mp_enc_bool(crp_mp_enc *e, const char *key, bool v)
{
    crp_mp_enc_key(e, key);
    if (v)
        msgpack_pack_true(&e->pk);
    else
        msgpack_pack_false(&e->pk);
}

void crp_mp_enc_bin(crp_mp_enc *e, const char *key, const void *p, size_t n)
{
    crp_mp_enc_key(e, key);
    msgpack_pack_bin_with_body(&e->pk, p, n);
}

void crp_mp_enc_str_value(crp_mp_enc *e, const char *field, const char *s, size_t max)
{
    if (s == NULL) {
        crp_mp_enc_invalid(e, field, "is NULL");
        return;
    }
    size_t n = strnlen(s, max + 1);
    if (n > max) {
        crp_mp_enc_invalid(e, field, "is longer than %zu bytes", max);
        return;
    }
    msgpack_pack_str_with_body(&e->pk, s, n);
}

void crp_mp_enc_str(crp_mp_enc *e, const char *key, const char *s, size_t max)
{
    if (s == NULL) {
        crp_mp_enc_invalid(e, key, "is NULL");
        return;
    }
    crp_mp_enc_key(e, key);
    crp_mp_enc_str_value(e, key, s, max);
}

/* --- decoder --------------------------------------------------------------- */

int crp_mp_unpack(const crp_mp_ctx *c, const void *data, size_t len, size_t max_len,
                  msgpack_unpacked *u)
{
    if (len > max_len)
        return crp_mp_fail(MALFORMED, c, NULL, "body of %zu bytes exceeds %zu", len, max_len);
    const char *why = crp_mp_scan(data, len);
    if (why != NULL)
        return crp_mp_fail(MALFORMED, c, NULL, "body %s (%zu bytes)", why, len);

    size_t off = 0;
    msgpack_unpacked_init(u);
    msgpack_unpack_return r = msgpack_unpack_next(u, data, len, &off);
    if (r == MSGPACK_UNPACK_SUCCESS && off == len)
        return 0;
    msgpack_unpacked_destroy(u);
    if (r == MSGPACK_UNPACK_NOMEM_ERROR)
        return crp_mp_fail(CR_ERR_NO_MEMORY, c, NULL, "out of memory unpacking %zu bytes", len);
    return crp_mp_fail(MALFORMED, c, NULL, "body is not valid msgpack (unpack result %d)", (int)r);
}

int crp_mp_unpack_map(const crp_mp_ctx *c, const void *data, size_t len, size_t max_len,
                      const char *const *keys, size_t n_keys, const msgpack_object **vals,
                      msgpack_unpacked *u)
{
    int rc = crp_mp_unpack(c, data, len, max_len, u);
    if (rc != 0)
        return rc;
    rc = crp_mp_map_fields(c, NULL, &u->data, keys, n_keys, vals);
    if (rc != 0)
        msgpack_unpacked_destroy(u);
    return rc;
}

static bool key_is(const msgpack_object *k, const char *name)
{
    if (k->via.str.size == 0 || k->via.str.ptr[0] != name[0])
        return false; /* cheap reject: keys differ in their first byte almost always */
    size_t n = strlen(name);
    return k->via.str.size == n && memcmp(k->via.str.ptr, name, n) == 0;
}

int crp_mp_map_fields(const crp_mp_ctx *c, const char *f, const msgpack_object *o,
                      const char *const *keys, size_t n_keys, const msgpack_object **vals)
{
    if (o->type != MSGPACK_OBJECT_MAP && f != NULL)
        return crp_mp_fail(MALFORMED, c, f, "is not a map (msgpack type %d)", (int)o->type);
    if (o->type != MSGPACK_OBJECT_MAP)
        return crp_mp_fail(MALFORMED, c, NULL, "%s is not a map (msgpack type %d)",
                           c->depth > 0 ? "entry" : "body", (int)o->type);
    for (size_t i = 0; i < n_keys; i++)
        vals[i] = NULL;
    for (uint32_t j = 0; j < o->via.map.size; j++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[j];
        if (kv->key.type != MSGPACK_OBJECT_STR)
            return crp_mp_fail(MALFORMED, c, NULL, "map key %u is not a string", (unsigned)j);
        for (size_t i = 0; i < n_keys; i++) {
            if (!key_is(&kv->key, keys[i]))
                continue;
            if (vals[i] != NULL)
                return crp_mp_fail(MALFORMED, c, keys[i], "appears twice");
            vals[i] = &kv->val;
            break;
        }
    }
    return 0;
}

int crp_mp_get_uint(const crp_mp_ctx *c, const char *f, const msgpack_object *v, uint64_t max,
                    uint64_t *out)
{
    if (v == NULL)
        return crp_mp_fail(MALFORMED, c, f, "is missing");
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return crp_mp_fail(MALFORMED, c, f, "is negative (%lld)", (long long)v->via.i64);
    if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return crp_mp_fail(MALFORMED, c, f, "is not an unsigned integer (msgpack type %d)",
                           (int)v->type);
    if (v->via.u64 > max)
        return crp_mp_fail(MALFORMED, c, f, "is out of range (%llu > %llu)",
                           (unsigned long long)v->via.u64, (unsigned long long)max);
    *out = v->via.u64;
    return 0;
}

int crp_mp_get_u64(const crp_mp_ctx *c, const char *f, const msgpack_object *v, uint64_t *out)
{
    return crp_mp_get_uint(c, f, v, UINT64_MAX, out);
}

int crp_mp_get_u32(const crp_mp_ctx *c, const char *f, const msgpack_object *v, uint32_t *out)
{
    uint64_t x;
    int rc = crp_mp_get_uint(c, f, v, UINT32_MAX, &x);
    if (rc == 0)
        *out = (uint32_t)x;
    return rc;
}

int crp_mp_get_u8(const crp_mp_ctx *c, const char *f, const msgpack_object *v, uint8_t max,
                  uint8_t *out)
{
    uint64_t x;
    int rc = crp_mp_get_uint(c, f, v, max, &x);
    if (rc == 0)
        *out = (uint8_t)x;
    return rc;
}

int crp_mp_get_i32(const crp_mp_ctx *c, const char *f, const msgpack_object *v, int32_t *out)
{
    if (v == NULL)
        return crp_mp_fail(MALFORMED, c, f, "is missing");
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (v->via.u64 > INT32_MAX)
            return crp_mp_fail(MALFORMED, c, f, "is out of range (%llu)",
                               (unsigned long long)v->via.u64);
        *out = (int32_t)v->via.u64;
        return 0;
    }
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        if (v->via.i64 < INT32_MIN)
            return crp_mp_fail(MALFORMED, c, f, "is out of range (%lld)", (long long)v->via.i64);
        *out = (int32_t)v->via.i64;
        return 0;
    }
    return crp_mp_fail(MALFORMED, c, f, "is not an integer (msgpack type %d)", (int)v->type);
}

int crp_mp_get_bool(const crp_mp_ctx *c, const char *f, const msgpack_object *v, bool *out)
{
    if (v == NULL)
        return crp_mp_fail(MALFORMED, c, f, "is missing");
    if (v->type != MSGPACK_OBJECT_BOOLEAN)
        return crp_mp_fail(MALFORMED, c, f, "is not a boolean (msgpack type %d)", (int)v->type);
    *out = v->via.boolean;
    return 0;
}

int crp_mp_get_array(const crp_mp_ctx *c, const char *f, const msgpack_object *v, size_t max,
                     const msgpack_object_array **out)
{
    if (v == NULL)
        return crp_mp_fail(MALFORMED, c, f, "is missing");
    if (v->type != MSGPACK_OBJECT_ARRAY)
        return crp_mp_fail(MALFORMED, c, f, "is not an array (msgpack type %d)", (int)v->type);
    if (v->via.array.size > max)
        return crp_mp_fail(MALFORMED, c, f, "has too many entries (%u > %zu)",
                           (unsigned)v->via.array.size, max);
    *out = &v->via.array;
    return 0;
}

int crp_mp_get_str_view(const crp_mp_ctx *c, const char *f, const msgpack_object *v, size_t max,
                        const char **ptr, size_t *len)
{
    if (v == NULL)
        return crp_mp_fail(MALFORMED, c, f, "is missing");
    if (v->type != MSGPACK_OBJECT_STR)
        return crp_mp_fail(MALFORMED, c, f, "is not a string (msgpack type %d)", (int)v->type);
    size_t n = v->via.str.size;
    if (n > max)
        return crp_mp_fail(MALFORMED, c, f, "is too long (%zu > %zu bytes)", n, max);
    if (n > 0 && memchr(v->via.str.ptr, 0, n) != NULL)
        return crp_mp_fail(MALFORMED, c, f, "contains a NUL byte");
    *ptr = v->via.str.ptr;
    *len = n;
    return 0;
}

int crp_mp_get_bin_view(const crp_mp_ctx *c, const char *f, const msgpack_object *v, size_t size,
                        const uint8_t **ptr)
{
    if (v == NULL)
        return crp_mp_fail(MALFORMED, c, f, "is missing");
    if (v->type != MSGPACK_OBJECT_BIN)
        return crp_mp_fail(MALFORMED, c, f, "is not binary (msgpack type %d)", (int)v->type);
    if (v->via.bin.size != size)
        return crp_mp_fail(MALFORMED, c, f, "has %u bytes, not %zu", (unsigned)v->via.bin.size,
                           size);
    *ptr = (const uint8_t *)v->via.bin.ptr;
    return 0;
}
