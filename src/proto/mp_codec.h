/*
 * mp_codec.h - the msgpack building blocks shared by the engine's message
 * codecs (messages.c) and the master RPC codecs (rpc.c): an error context
 * that names the message, the nested entry and the field a failure is
 * about; an encoder that stops at its first failure and rolls the output
 * back; and strict field getters for decoding maps with string keys.
 *
 * Every failure is recorded as the thread's last error (crb_error) as
 * "<message>: [<item> <index> ...][field '<field>' ]<detail>" and returned
 * as a status from include/crescent/status.h.
 *
 * Threading: no shared state; a context or encoder belongs to one call.
 */
#ifndef CRESCENT_PROTO_MP_CODEC_H
#define CRESCENT_PROTO_MP_CODEC_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "proto/messages.h"

/* --- error context ---------------------------------------------------------- */

#define CRP_MP_PATH_DEPTH 4
#define CRP_MP_NO_INDEX   SIZE_MAX

typedef struct crp_mp_path_entry {
    const char *item;
    size_t index; /* CRP_MP_NO_INDEX for a named sub-map such as a config */
} crp_mp_path_entry;

/*
 * Which message and which nested entry a failure is about. The path is a
 * small stack formatted only when a failure is reported: entering an entry
 * costs two stores, so walking a batch of thousands of keys stays cheap.
 */
typedef struct crp_mp_ctx {
    char msg[48]; /* "descriptor", "put_start request" */
    size_t depth; /* may exceed CRP_MP_PATH_DEPTH; deeper entries are not kept */
    crp_mp_path_entry path[CRP_MP_PATH_DEPTH];
} crp_mp_ctx;

/** Start a context for message `msg` (copied, truncated to fit). */
void crp_mp_ctx_init(crp_mp_ctx *c, const char *msg);

/** Enter entry `index` of an array of `item`s; returns the depth to restore. */
static inline size_t crp_mp_path_push(crp_mp_ctx *c, const char *item, size_t index)
{
    size_t d = c->depth;
    if (d < CRP_MP_PATH_DEPTH)
        c->path[d] = (crp_mp_path_entry){item, index};
    c->depth = d + 1;
    return d;
}

/** Enter the sub-map `name`; returns the depth to restore. */
static inline size_t crp_mp_path_push_name(crp_mp_ctx *c, const char *name)
{
    return crp_mp_path_push(c, name, CRP_MP_NO_INDEX);
}

static inline void crp_mp_path_pop(crp_mp_ctx *c, size_t depth)
{
    c->depth = depth;
}

/** Record a failure about `field` (NULL: the entry itself); returns status. */
int crp_mp_fail(int status, const crp_mp_ctx *c, const char *field, const char *fmt, ...)
    CRB_PRINTF(4, 5);

/* --- encoder --------------------------------------------------------------- */

/*
 * Appends one message to a crp_buf. After the first failure every further
 * write is dropped; crp_mp_enc_finish then restores the buffer's length and
 * returns that failure.
 */
typedef struct crp_mp_enc {
    msgpack_packer pk;
    crp_buf *out;
    size_t start;    /* out->len on entry */
    size_t max_body; /* bytes this message may take */
    crp_mp_ctx c;
    int status; /* first failure, 0 while none */
} crp_mp_enc;

/** Begin message `msg` at the end of out, at most max_body bytes long. */
void crp_mp_enc_init(crp_mp_enc *e, crp_buf *out, const char *msg, size_t max_body);
/** 0, or the first failure (out back to its length at init). */
int crp_mp_enc_finish(crp_mp_enc *e);
/** Record an invalid value to encode (unless a failure is already held). */
void crp_mp_enc_invalid(crp_mp_enc *e, const char *field, const char *fmt, ...) CRB_PRINTF(3, 4);
/** Write raw bytes (the packer's sink). */
int crp_mp_enc_write(void *enc, const char *p, size_t n);

/** A map key (a short literal). */
void crp_mp_enc_key(crp_mp_enc *e, const char *key);
void crp_mp_enc_u64(crp_mp_enc *e, const char *key, uint64_t v);
void crp_mp_enc_i32(crp_mp_enc *e, const char *key, int32_t v);
void crp_mp_enc_bool(crp_mp_enc *e, const char *key, bool v);
void crp_mp_enc_bin(crp_mp_enc *e, const char *key, const void *p, size_t n);
/** A required string of at most max bytes, as a value (field names it in errors). */
void crp_mp_enc_str_value(crp_mp_enc *e, const char *field, const char *s, size_t max);
/** The same under key. */
void crp_mp_enc_str(crp_mp_enc *e, const char *key, const char *s, size_t max);

/* --- decoder --------------------------------------------------------------- */

/**
 * Pre-scan (crp_mp_scan) and unpack data[0..len), at most max_len bytes,
 * into u. On success the caller destroys u.
 */
int crp_mp_unpack(const crp_mp_ctx *c, const void *data, size_t len, size_t max_len,
                  msgpack_unpacked *u);

/**
 * crp_mp_unpack, then crp_mp_map_fields of the body (a map): the decoders'
 * common first step. On success the caller destroys u; on failure there is
 * nothing to destroy.
 */
int crp_mp_unpack_map(const crp_mp_ctx *c, const void *data, size_t len, size_t max_len,
                      const char *const *keys, size_t n_keys, const msgpack_object **vals,
                      msgpack_unpacked *u);

/**
 * o (the value of field f, or with f NULL the body or an array entry) must be
 * a map with string keys; vals[i] is set to the value of keys[i], or NULL when
 * absent. Known keys may appear once; others are ignored.
 */
int crp_mp_map_fields(const crp_mp_ctx *c, const char *f, const msgpack_object *o,
                      const char *const *keys, size_t n_keys, const msgpack_object **vals);

/* Getters: v is the field's value (NULL = absent, which is an error); *out
 * is written only on success. */
int crp_mp_get_uint(const crp_mp_ctx *c, const char *f, const msgpack_object *v, uint64_t max,
                    uint64_t *out);
int crp_mp_get_u64(const crp_mp_ctx *c, const char *f, const msgpack_object *v, uint64_t *out);
int crp_mp_get_u32(const crp_mp_ctx *c, const char *f, const msgpack_object *v, uint32_t *out);
/** An unsigned value in 0..max (max <= 255). */
int crp_mp_get_u8(const crp_mp_ctx *c, const char *f, const msgpack_object *v, uint8_t max,
                  uint8_t *out);
int crp_mp_get_i32(const crp_mp_ctx *c, const char *f, const msgpack_object *v, int32_t *out);
int crp_mp_get_bool(const crp_mp_ctx *c, const char *f, const msgpack_object *v, bool *out);
int crp_mp_get_array(const crp_mp_ctx *c, const char *f, const msgpack_object *v, size_t max,
                     const msgpack_object_array **out);
/** A string of at most max bytes without NUL bytes, not copied. */
int crp_mp_get_str_view(const crp_mp_ctx *c, const char *f, const msgpack_object *v, size_t max,
                        const char **ptr, size_t *len);
/** A binary of exactly size bytes, not copied. */
int crp_mp_get_bin_view(const crp_mp_ctx *c, const char *f, const msgpack_object *v, size_t size,
                        const uint8_t **ptr);

#endif
