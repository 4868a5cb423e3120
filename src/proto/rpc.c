/*
 * rpc.c - msgpack bodies of the master RPC (see rpc.h for the wire format).
 *
 * Design.
 *
 * The op table in rpc.h names, per opcode, a request shape and a reply
 * shape. Each shape has one encoder and one decoder here, plus its list of
 * map keys; the public entry points read "op", look the shapes up and
 * dispatch, so ops sharing a shape (PUT_START and UPSERT_START) share code
 * and cannot drift apart.
 *
 * Encoders drive a msgpack_packer whose writer appends to a crp_buf. As in
 * messages.c the encoder context is sticky: the first failure (allocation,
 * a value the decoder would refuse, or the body growing past CRP_MAX_BODY)
 * is recorded, every later write is refused, and the buffer is rolled back
 * to its length on entry. The size check happens while writing, so an
 * oversized batch fails after at most CRP_MAX_BODY bytes, not after encoding
 * all of it.
 *
 * Decoders run in the same three steps as messages.c: a structural pre-scan
 * of the raw bytes without allocating (exactly one complete object, nesting
 * at most CRP_MP_MAX_DEPTH deep (proto/mp_scan.h), every container count backed by input bytes,
 * so msgpack-c's zone stays proportional to the input), msgpack_unpack_next
 * into an object tree, and a strict walk of the tree. The helpers are this
 * file's own (messages.c keeps its helpers static); the rules are the same.
 *
 * Unlike messages.c, which mallocs each string, a decoded RPC message keeps
 * all its strings and arrays in one arena: a short list of chunks, the
 * first sized from the body length. A batch of 128 keys costs one or two
 * allocations instead of 129, and *_clear frees the chain. The arena is
 * attached to the output only on success; on failure it is freed and the
 * caller's struct is not touched.
 */
#include "proto/rpc.h"

#include "proto/mp_codec.h"
#include "proto/mp_scan.h"

#include <msgpack.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "crescent/status.h"
#include "proto/frame.h"

#define MAX_FIELDS   12 /* top-level keys of the widest shape */
#define MALFORMED    CR_ERR_MALFORMED_FRAME
#define N_KEYS(keys) (sizeof(keys) / sizeof((keys)[0]))

/* ------------------------------------------------------------------------ */
/* Op table                                                                 */
/* ------------------------------------------------------------------------ */

/* Request and reply shapes; the names are the union members in rpc.h. */
typedef enum req_shape_id {
    RQ_hello,
    RQ_client,
    RQ_mount,
    RQ_remount,
    RQ_unmount,
    RQ_key,
    RQ_keys,
    RQ_leases,
    RQ_put_start,
    RQ_owner_key,
    RQ_batch_put_start,
    RQ_owner_keys,
    RQ_remove,
    RQ_regex,
    RQ_force,
    RQ_batch_remove,
    RQ_replica_clear,
    RQ_name,
    RQ_blob,
    RQ_none,
    RQ_COUNT
} req_shape_id;

typedef enum resp_shape_id {
    RS_hello,
    RS_ping,
    RS_exist,
    RS_statuses,
    RS_get,
    RS_alloc,
    RS_batch_get,
    RS_batch_alloc,
    RS_count,
    RS_names,
    RS_segment_info,
    RS_key_info,
    RS_blob,
    RS_end,
    RS_none,
    RS_COUNT
} resp_shape_id;

/* Dense op indices, in table order. */
enum {
#define OP_INDEX_(name, value, str, rq, rs) IDX_##name,
    CRP_RPC_OP_TABLE(OP_INDEX_)
#undef OP_INDEX_
        IDX_COUNT
};
_Static_assert(IDX_COUNT == CRP_RPC_OP_COUNT, "CRP_RPC_OP_COUNT is out of date");

typedef struct op_info {
    uint16_t op;
    const char *name;
    req_shape_id req;
    resp_shape_id resp;
} op_info;

static const op_info OPS[IDX_COUNT] = {
#define OP_INFO_(name, value, str, rq, rs) {value, str, RQ_##rq, RS_##rs},
    CRP_RPC_OP_TABLE(OP_INFO_)
#undef OP_INFO_
};

int crp_rpc_op_index(int op)
{
    switch (op) {
#define OP_CASE_(name, value, str, rq, rs)                                                         \
    case value:                                                                                    \
        return IDX_##name;
        CRP_RPC_OP_TABLE(OP_CASE_)
#undef OP_CASE_
    default:
        return -1;
    }
}

bool crp_rpc_op_valid(int op)
{
    return crp_rpc_op_index(op) >= 0;
}

const char *crp_rpc_op_name(int op)
{
    int i = crp_rpc_op_index(op);
    return i >= 0 ? OPS[i].name : "?";
}

int crp_rpc_check_version(const char *peer, uint32_t peer_version)
{
    if (peer_version == CRP_RPC_VERSION)
        return 0;
    const char *who = peer != NULL ? peer : "peer";
    if (peer_version < CRP_RPC_VERSION)
        return crb_error(CR_INVALID_VERSION,
                         "%s speaks RPC protocol version %u, this side %u: upgrade the %s", who,
                         (unsigned)peer_version, (unsigned)CRP_RPC_VERSION, who);
    return crb_error(CR_INVALID_VERSION,
                     "%s speaks RPC protocol version %u, this side %u: upgrade this side", who,
                     (unsigned)peer_version, (unsigned)CRP_RPC_VERSION);
}

/* ------------------------------------------------------------------------ */
/* Error context                                                            */
/* ------------------------------------------------------------------------ */

/* "<op> <what>" (e.g. "put_start request"), or "rpc <what>" for op 0. */
static void rpc_ctx_init(crp_mp_ctx *c, const char *what, int op)
{
    char msg[sizeof(c->msg)];
    if (op > 0)
        snprintf(msg, sizeof(msg), "%s %s", crp_rpc_op_name(op), what);
    else
        snprintf(msg, sizeof(msg), "rpc %s", what);
    crp_mp_ctx_init(c, msg);
}

/* ------------------------------------------------------------------------ */
/* Arena                                                                    */
/* ------------------------------------------------------------------------ */

struct crp_rpc_arena {
    struct crp_rpc_arena *next; /* older chunk */
    size_t cap;
    size_t used;
    max_align_t data[]; /* cap bytes */
};

#define ARENA_MIN_CHUNK 1024

static void arena_free(struct crp_rpc_arena *a)
{
    while (a != NULL) {
        struct crp_rpc_arena *next = a->next;
        free(a);
        a = next;
    }
}

/* n bytes aligned to align (1 or 8) from *head, growing it; NULL when out of memory. */
static void *arena_alloc(struct crp_rpc_arena **head, size_t first_hint, size_t n, size_t align)
{
    struct crp_rpc_arena *a = *head;
    if (a != NULL) {
        size_t off = (a->used + align - 1) & ~(align - 1);
        if (off <= a->cap && n <= a->cap - off) {
            a->used = off + n;
            return (char *)a->data + off;
        }
    }
    size_t cap = a != NULL ? a->cap * 2 : first_hint;
    if (cap < ARENA_MIN_CHUNK)
        cap = ARENA_MIN_CHUNK;
    if (cap < n)
        cap = n;
    if (cap > SIZE_MAX - sizeof(struct crp_rpc_arena))
        return NULL;
    struct crp_rpc_arena *c = malloc(sizeof(*c) + cap);
    if (c == NULL)
        return NULL;
    c->next = a;
    c->cap = cap;
    c->used = n;
    *head = c;
    return c->data;
}

/* ------------------------------------------------------------------------ */
/* Encoder                                                                  */
/* ------------------------------------------------------------------------ */

static void rpc_enc_init(crp_mp_enc *e, crp_buf *out, const char *what, int op)
{
    crp_mp_enc_init(e, out, "", CRP_MAX_BODY);
    rpc_ctx_init(&e->c, what, op);
}

static void enc_uuid(crp_mp_enc *e, const char *key, const crp_rpc_uuid *id)
{
    uint8_t b[16];
    for (int i = 0; i < 8; i++) {
        b[i] = (uint8_t)(id->hi >> (56 - 8 * i));
        b[8 + i] = (uint8_t)(id->lo >> (56 - 8 * i));
    }
    crp_mp_enc_key(e, key);
    msgpack_pack_bin_with_body(&e->pk, b, sizeof(b));
}

/* Check an array's count and pointer, then write key and array header. 0 or -1. */
static int enc_array(crp_mp_enc *e, const char *key, size_t n, const void *p, size_t max)
{
    if (n > max) {
        crp_mp_enc_invalid(e, key, "has too many entries (%zu > %zu)", n, max);
        return -1;
    }
    if (n > 0 && p == NULL) {
        crp_mp_enc_invalid(e, key, "is NULL with %zu entries", n);
        return -1;
    }
    crp_mp_enc_key(e, key);
    msgpack_pack_array(&e->pk, n);
    return e->status == 0 ? 0 : -1;
}

static void enc_str_array(crp_mp_enc *e, const char *key, size_t n, char *const *v, size_t max_n,
                          size_t max_len, const char *item)
{
    if (enc_array(e, key, n, v, max_n) != 0)
        return;
    for (size_t i = 0; i < n && e->status == 0; i++) {
        size_t mark = crp_mp_path_push(&e->c, item, i);
        crp_mp_enc_str_value(e, key, v[i], max_len);
        crp_mp_path_pop(&e->c, mark);
    }
}

static void enc_segment(crp_mp_enc *e, const char *key, const crp_rpc_segment *s)
{
    if (s->size == 0) {
        crp_mp_enc_invalid(e, key, "has size 0");
        return;
    }
    if (s->base > UINT64_MAX - s->size) {
        crp_mp_enc_invalid(e, key, "range 0x%llx + 0x%llx overflows", (unsigned long long)s->base,
                           (unsigned long long)s->size);
        return;
    }
    if (key != NULL)
        crp_mp_enc_key(e, key);
    msgpack_pack_map(&e->pk, 4);
    crp_mp_enc_str(e, "n", s->name, CRP_MAX_NAME);
    crp_mp_enc_u64(e, "b", s->base);
    crp_mp_enc_u64(e, "l", s->size);
    crp_mp_enc_u64(e, "e", s->epoch);
}

static void enc_replica(crp_mp_enc *e, const crp_rpc_replica *r)
{
    if (r->addr > UINT64_MAX - r->size) {
        crp_mp_enc_invalid(e, NULL, "range 0x%llx + 0x%llx overflows", (unsigned long long)r->addr,
                           (unsigned long long)r->size);
        return;
    }
    if (r->status > CRP_RPC_REPLICA_FAILED) {
        crp_mp_enc_invalid(e, "t", "is not a replica status (%u)", (unsigned)r->status);
        return;
    }
    msgpack_pack_map(&e->pk, 5);
    crp_mp_enc_str(e, "s", r->segment, CRP_MAX_NAME);
    crp_mp_enc_u64(e, "a", r->addr);
    crp_mp_enc_u64(e, "l", r->size);
    crp_mp_enc_u64(e, "e", r->epoch);
    crp_mp_enc_u64(e, "t", r->status);
}

static void enc_replicas(crp_mp_enc *e, size_t n, const crp_rpc_replica *r)
{
    if (enc_array(e, "reps", n, r, CRP_RPC_MAX_REPLICAS) != 0)
        return;
    for (size_t i = 0; i < n && e->status == 0; i++) {
        size_t mark = crp_mp_path_push(&e->c, "replica", i);
        enc_replica(e, &r[i]);
        crp_mp_path_pop(&e->c, mark);
    }
}

static void enc_config(crp_mp_enc *e, const crp_rpc_replica_config *cfg)
{
    if (cfg->soft_pin_action > CRP_RPC_SOFT_PIN_DISABLE) {
        crp_mp_enc_invalid(e, "spa", "is not a soft pin action (%u)",
                           (unsigned)cfg->soft_pin_action);
        return;
    }
    crp_mp_enc_key(e, "cfg");
    msgpack_pack_map(&e->pk, cfg->has_soft_pin_ttl ? 6 : 5);
    crp_mp_enc_u64(e, "n", cfg->replica_num);
    crp_mp_enc_bool(e, "hp", cfg->hard_pin);
    crp_mp_enc_u64(e, "spa", cfg->soft_pin_action);
    if (cfg->has_soft_pin_ttl)
        crp_mp_enc_u64(e, "spt", cfg->soft_pin_ttl_ms);
    enc_str_array(e, "pref", cfg->n_preferred, cfg->preferred_segments, CRP_RPC_MAX_PREFERRED,
                  CRP_MAX_NAME, "preferred segment");
    crp_mp_enc_bool(e, "same", cfg->prefer_same_node);
}

static void enc_results(crp_mp_enc *e, size_t n, const crp_rpc_key_result *r)
{
    if (enc_array(e, "r", n, r, CRP_RPC_MAX_BATCH) != 0)
        return;
    for (size_t i = 0; i < n && e->status == 0; i++) {
        size_t mark = crp_mp_path_push(&e->c, "result", i);
        if (r[i].status > 0) {
            crp_mp_enc_invalid(e, "st", "is positive (%d)", (int)r[i].status);
        } else if (r[i].status == 0) {
            msgpack_pack_map(&e->pk, r[i].lease_token != 0 ? 3 : 2);
            crp_mp_enc_i32(e, "st", 0);
            enc_replicas(e, r[i].n_replicas, r[i].replicas);
            if (r[i].lease_token != 0)
                crp_mp_enc_u64(e, "lt", r[i].lease_token);
        } else {
            msgpack_pack_map(&e->pk, 1);
            crp_mp_enc_i32(e, "st", r[i].status);
        }
        crp_mp_path_pop(&e->c, mark);
    }
}

/* ------------------------------------------------------------------------ */
/* Decoder: structural pre-scan                                             */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* Decoder: object tree helpers                                             */
/* ------------------------------------------------------------------------ */

typedef struct dec {
    crp_mp_ctx c;
    struct crp_rpc_arena *arena; /* everything the message will own */
    size_t first_chunk;          /* arena's first chunk size, from the body length */
} dec;

static void dec_init(dec *d, const char *what, size_t len)
{
    rpc_ctx_init(&d->c, what, 0);
    d->arena = NULL;
    d->first_chunk = len < (SIZE_MAX - 256) / 2 ? 2 * len + 256 : len;
}

static void *dec_alloc(dec *d, const char *field, size_t n, size_t align)
{
    void *p = arena_alloc(&d->arena, d->first_chunk, n, align);
    if (p == NULL)
        crp_mp_fail(CR_ERR_NO_MEMORY, &d->c, field, "cannot allocate %zu bytes", n);
    return p;
}

/* An array of n elements of size each from the arena; NULL for n == 0 too (check n). */
static int dec_alloc_array(dec *d, const char *field, size_t n, size_t size, void **out)
{
    *out = NULL;
    if (n == 0)
        return 0;
    if (n > SIZE_MAX / size)
        return crp_mp_fail(CR_ERR_NO_MEMORY, &d->c, field, "%zu entries overflow", n);
    *out = dec_alloc(d, field, n * size, sizeof(uint64_t));
    return *out != NULL ? 0 : CR_ERR_NO_MEMORY;
}

/* A status: an i32 that is 0 or negative. */
static int get_status(const crp_mp_ctx *c, const char *f, const msgpack_object *v, int32_t *out)
{
    int32_t s;
    int rc = crp_mp_get_i32(c, f, v, &s);
    if (rc != 0)
        return rc;
    if (s > 0)
        return crp_mp_fail(MALFORMED, c, f, "is a positive status (%d)", (int)s);
    *out = s;
    return 0;
}

/* A string of at most max bytes and no NUL, copied into the arena. */
static int get_str(dec *d, const char *f, const msgpack_object *v, size_t max, char **out)
{
    const char *p;
    size_t n;
    int rc = crp_mp_get_str_view(&d->c, f, v, max, &p, &n);
    if (rc != 0)
        return rc;
    char *s = dec_alloc(d, f, n + 1, 1);
    if (s == NULL)
        return CR_ERR_NO_MEMORY;
    if (n > 0)
        memcpy(s, p, n);
    s[n] = '\0';
    *out = s;
    return 0;
}

static int get_uuid(const crp_mp_ctx *c, const char *f, const msgpack_object *v, crp_rpc_uuid *out)
{
    const uint8_t *b;
    int rc = crp_mp_get_bin_view(c, f, v, 16, &b);
    if (rc != 0)
        return rc;
    out->hi = crp_mp_load_be(b, 8);
    out->lo = crp_mp_load_be(b + 8, 8);
    return 0;
}

static int dec_str_array(dec *d, const char *f, const msgpack_object *v, size_t max_n,
                         size_t max_len, const char *item, size_t *n_out, char ***out)
{
    const msgpack_object_array *a;
    void *p;
    int rc = crp_mp_get_array(&d->c, f, v, max_n, &a);
    if (rc == 0)
        rc = dec_alloc_array(d, f, a->size, sizeof(char *), &p);
    if (rc != 0)
        return rc;
    char **strs = p;
    for (uint32_t i = 0; i < a->size; i++) {
        size_t mark = crp_mp_path_push(&d->c, item, i);
        rc = get_str(d, f, &a->ptr[i], max_len, &strs[i]);
        crp_mp_path_pop(&d->c, mark);
        if (rc != 0)
            return rc;
    }
    *n_out = a->size;
    *out = strs;
    return 0;
}

static int dec_segment(dec *d, const char *f, const msgpack_object *o, crp_rpc_segment *s)
{
    enum { K_N, K_B, K_L, K_E };
    static const char *const keys[] = {"n", "b", "l", "e"};
    const msgpack_object *v[N_KEYS(keys)];
    int rc;

    if (o == NULL)
        return crp_mp_fail(MALFORMED, &d->c, f, "is missing");
    if ((rc = crp_mp_map_fields(&d->c, f, o, keys, N_KEYS(keys), v)) != 0 ||
        (rc = get_str(d, "n", v[K_N], CRP_MAX_NAME, &s->name)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "b", v[K_B], &s->base)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "l", v[K_L], &s->size)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "e", v[K_E], &s->epoch)) != 0)
        return rc;
    if (s->size == 0)
        return crp_mp_fail(MALFORMED, &d->c, f, "has size 0");
    if (s->base > UINT64_MAX - s->size)
        return crp_mp_fail(MALFORMED, &d->c, f, "range 0x%llx + 0x%llx overflows",
                           (unsigned long long)s->base, (unsigned long long)s->size);
    return 0;
}

static int dec_replica(dec *d, const msgpack_object *o, crp_rpc_replica *r)
{
    enum { K_S, K_A, K_L, K_E, K_T };
    static const char *const keys[] = {"s", "a", "l", "e", "t"};
    const msgpack_object *v[N_KEYS(keys)];
    int rc;

    if ((rc = crp_mp_map_fields(&d->c, NULL, o, keys, N_KEYS(keys), v)) != 0 ||
        (rc = get_str(d, "s", v[K_S], CRP_MAX_NAME, &r->segment)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "a", v[K_A], &r->addr)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "l", v[K_L], &r->size)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "e", v[K_E], &r->epoch)) != 0 ||
        (rc = crp_mp_get_u8(&d->c, "t", v[K_T], CRP_RPC_REPLICA_FAILED, &r->status)) != 0)
        return rc;
    if (r->addr > UINT64_MAX - r->size)
        return crp_mp_fail(MALFORMED, &d->c, NULL, "range 0x%llx + 0x%llx overflows",
                           (unsigned long long)r->addr, (unsigned long long)r->size);
    return 0;
}

static int dec_replicas(dec *d, const msgpack_object *v, size_t *n_out, crp_rpc_replica **out)
{
    const msgpack_object_array *a;
    void *p;
    int rc = crp_mp_get_array(&d->c, "reps", v, CRP_RPC_MAX_REPLICAS, &a);
    if (rc == 0)
        rc = dec_alloc_array(d, "reps", a->size, sizeof(crp_rpc_replica), &p);
    if (rc != 0)
        return rc;
    crp_rpc_replica *reps = p;
    for (uint32_t i = 0; i < a->size; i++) {
        size_t mark = crp_mp_path_push(&d->c, "replica", i);
        rc = dec_replica(d, &a->ptr[i], &reps[i]);
        crp_mp_path_pop(&d->c, mark);
        if (rc != 0)
            return rc;
    }
    *n_out = a->size;
    *out = reps;
    return 0;
}

static int dec_config(dec *d, const msgpack_object *o, crp_rpc_replica_config *cfg)
{
    enum { K_N, K_HP, K_SPA, K_SPT, K_PREF, K_SAME };
    static const char *const keys[] = {"n", "hp", "spa", "spt", "pref", "same"};
    const msgpack_object *v[N_KEYS(keys)];
    int rc;

    if (o == NULL)
        return crp_mp_fail(MALFORMED, &d->c, "cfg", "is missing");
    size_t mark = crp_mp_path_push_name(&d->c, "config");
    if ((rc = crp_mp_map_fields(&d->c, "cfg", o, keys, N_KEYS(keys), v)) != 0 ||
        (rc = crp_mp_get_u32(&d->c, "n", v[K_N], &cfg->replica_num)) != 0 ||
        (rc = crp_mp_get_bool(&d->c, "hp", v[K_HP], &cfg->hard_pin)) != 0 ||
        (rc = crp_mp_get_u8(&d->c, "spa", v[K_SPA], CRP_RPC_SOFT_PIN_DISABLE,
                            &cfg->soft_pin_action)) != 0)
        goto restore_path;
    if (v[K_SPT] != NULL) {
        rc = crp_mp_get_u64(&d->c, "spt", v[K_SPT], &cfg->soft_pin_ttl_ms);
        if (rc != 0)
            goto restore_path;
        cfg->has_soft_pin_ttl = true;
    }
    if ((rc = dec_str_array(d, "pref", v[K_PREF], CRP_RPC_MAX_PREFERRED, CRP_MAX_NAME,
                            "preferred segment", &cfg->n_preferred, &cfg->preferred_segments)) !=
            0 ||
        (rc = crp_mp_get_bool(&d->c, "same", v[K_SAME], &cfg->prefer_same_node)) != 0)
        goto restore_path;
restore_path:
    crp_mp_path_pop(&d->c, mark);
    return rc;
}

static int dec_results(dec *d, const msgpack_object *v, size_t *n_out, crp_rpc_key_result **out)
{
    enum { K_ST, K_REPS, K_LT };
    static const char *const keys[] = {"st", "reps", "lt"};
    const msgpack_object *f[N_KEYS(keys)];
    const msgpack_object_array *a;
    void *p;
    int rc = crp_mp_get_array(&d->c, "r", v, CRP_RPC_MAX_BATCH, &a);
    if (rc == 0)
        rc = dec_alloc_array(d, "r", a->size, sizeof(crp_rpc_key_result), &p);
    if (rc != 0)
        return rc;
    crp_rpc_key_result *res = p;
    for (uint32_t i = 0; i < a->size; i++) {
        size_t mark = crp_mp_path_push(&d->c, "result", i);
        res[i].n_replicas = 0;
        res[i].replicas = NULL;
        res[i].lease_token = 0;
        if ((rc = crp_mp_map_fields(&d->c, NULL, &a->ptr[i], keys, N_KEYS(keys), f)) == 0 &&
            (rc = get_status(&d->c, "st", f[K_ST], &res[i].status)) == 0 && res[i].status == 0)
            rc = dec_replicas(d, f[K_REPS], &res[i].n_replicas, &res[i].replicas);
        if (rc == 0 && res[i].status == 0 && f[K_LT] != NULL) /* optional */
            rc = crp_mp_get_u64(&d->c, "lt", f[K_LT], &res[i].lease_token);
        crp_mp_path_pop(&d->c, mark);
        if (rc != 0)
            return rc;
    }
    *n_out = a->size;
    *out = res;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Request shapes                                                           */
/* ------------------------------------------------------------------------ */

/* Field values of a request: v[0] is "op", v[1..] the shape's keys in order. */
typedef const msgpack_object *const *fields;

static void enc_rq_hello(crp_mp_enc *e, const crp_rpc_req *m)
{
    const crp_rpc_hello_req *r = &m->u.hello;
    crp_mp_enc_u64(e, "v", r->version);
    crp_mp_enc_u64(e, "caps", r->caps);
    enc_uuid(e, "cid", &r->client_id);
    crp_mp_enc_str(e, "sw", r->software, CRP_RPC_MAX_SOFTWARE);
    if (r->has_mac) {
        crp_mp_enc_bin(e, "cn", r->client_nonce, CRP_NONCE_SIZE);
        crp_mp_enc_bin(e, "mac", r->mac, CRP_MAC_SIZE);
    }
}

/* An optional binary of exactly size bytes: absent leaves *has false. */
static int get_opt_bin(dec *d, const char *f, const msgpack_object *v, size_t size, uint8_t *out,
                       bool *has)
{
    *has = false;
    if (v == NULL)
        return 0;
    const uint8_t *p;
    int rc = crp_mp_get_bin_view(&d->c, f, v, size, &p);
    if (rc == 0) {
        memcpy(out, p, size);
        *has = true;
    }
    return rc;
}

static int dec_rq_hello(dec *d, fields v, crp_rpc_req *m)
{
    crp_rpc_hello_req *r = &m->u.hello;
    int rc;
    bool has_cn = false;
    if ((rc = crp_mp_get_u32(&d->c, "v", v[1], &r->version)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "caps", v[2], &r->caps)) != 0 ||
        (rc = get_uuid(&d->c, "cid", v[3], &r->client_id)) != 0 ||
        (rc = get_str(d, "sw", v[4], CRP_RPC_MAX_SOFTWARE, &r->software)) != 0 ||
        (rc = get_opt_bin(d, "cn", v[5], CRP_NONCE_SIZE, r->client_nonce, &has_cn)) != 0 ||
        (rc = get_opt_bin(d, "mac", v[6], CRP_MAC_SIZE, r->mac, &r->has_mac)) != 0)
        return rc;
    if (has_cn != r->has_mac)
        return crp_mp_fail(MALFORMED, &d->c, has_cn ? "mac" : "cn",
                           "is missing (cn and mac go together)");
    return 0;
}

static void enc_rq_client(crp_mp_enc *e, const crp_rpc_req *m)
{
    enc_uuid(e, "cid", &m->u.client.client_id);
}

static int dec_rq_client(dec *d, fields v, crp_rpc_req *m)
{
    return get_uuid(&d->c, "cid", v[1], &m->u.client.client_id);
}

static void enc_rq_mount(crp_mp_enc *e, const crp_rpc_req *m)
{
    enc_uuid(e, "cid", &m->u.mount.client_id);
    enc_segment(e, "seg", &m->u.mount.segment);
}

static int dec_rq_mount(dec *d, fields v, crp_rpc_req *m)
{
    int rc = get_uuid(&d->c, "cid", v[1], &m->u.mount.client_id);
    if (rc != 0)
        return rc;
    return dec_segment(d, "seg", v[2], &m->u.mount.segment);
}

static void enc_rq_remount(crp_mp_enc *e, const crp_rpc_req *m)
{
    const crp_rpc_remount_req *r = &m->u.remount;
    enc_uuid(e, "cid", &r->client_id);
    if (enc_array(e, "segs", r->n_segments, r->segments, CRP_RPC_MAX_SEGMENTS) != 0)
        return;
    for (size_t i = 0; i < r->n_segments && e->status == 0; i++) {
        size_t mark = crp_mp_path_push(&e->c, "segment", i);
        enc_segment(e, NULL, &r->segments[i]);
        crp_mp_path_pop(&e->c, mark);
    }
}

static int dec_rq_remount(dec *d, fields v, crp_rpc_req *m)
{
    crp_rpc_remount_req *r = &m->u.remount;
    const msgpack_object_array *a;
    void *p;
    int rc;
    if ((rc = get_uuid(&d->c, "cid", v[1], &r->client_id)) != 0 ||
        (rc = crp_mp_get_array(&d->c, "segs", v[2], CRP_RPC_MAX_SEGMENTS, &a)) != 0 ||
        (rc = dec_alloc_array(d, "segs", a->size, sizeof(crp_rpc_segment), &p)) != 0)
        return rc;
    r->segments = p;
    for (uint32_t i = 0; i < a->size; i++) {
        size_t mark = crp_mp_path_push(&d->c, "segment", i);
        rc = dec_segment(d, NULL, &a->ptr[i], &r->segments[i]);
        crp_mp_path_pop(&d->c, mark);
        if (rc != 0)
            return rc;
    }
    r->n_segments = a->size;
    return 0;
}

static void enc_rq_unmount(crp_mp_enc *e, const crp_rpc_req *m)
{
    enc_uuid(e, "cid", &m->u.unmount.client_id);
    crp_mp_enc_str(e, "n", m->u.unmount.name, CRP_MAX_NAME);
}

static int dec_rq_unmount(dec *d, fields v, crp_rpc_req *m)
{
    int rc = get_uuid(&d->c, "cid", v[1], &m->u.unmount.client_id);
    if (rc == 0)
        rc = get_str(d, "n", v[2], CRP_MAX_NAME, &m->u.unmount.name);
    return rc;
}

static void enc_rq_key(crp_mp_enc *e, const crp_rpc_req *m)
{
    crp_mp_enc_str(e, "k", m->u.key.key, CRP_RPC_MAX_KEY);
}

static int dec_rq_key(dec *d, fields v, crp_rpc_req *m)
{
    return get_str(d, "k", v[1], CRP_RPC_MAX_KEY, &m->u.key.key);
}

static void enc_keys(crp_mp_enc *e, size_t n, char *const *keys)
{
    enc_str_array(e, "ks", n, keys, CRP_RPC_MAX_BATCH, CRP_RPC_MAX_KEY, "key");
}

static int dec_keys(dec *d, const msgpack_object *v, size_t *n, char ***keys)
{
    return dec_str_array(d, "ks", v, CRP_RPC_MAX_BATCH, CRP_RPC_MAX_KEY, "key", n, keys);
}

static void enc_rq_keys(crp_mp_enc *e, const crp_rpc_req *m)
{
    enc_keys(e, m->u.keys.n_keys, m->u.keys.keys);
}

static int dec_rq_keys(dec *d, fields v, crp_rpc_req *m)
{
    return dec_keys(d, v[1], &m->u.keys.n_keys, &m->u.keys.keys);
}

static void enc_rq_leases(crp_mp_enc *e, const crp_rpc_req *m)
{
    const crp_rpc_leases_req *r = &m->u.leases;
    enc_keys(e, r->n_keys, r->keys);
    if (enc_array(e, "lts", r->n_keys, r->tokens, CRP_RPC_MAX_BATCH) != 0)
        return;
    for (size_t i = 0; i < r->n_keys; i++)
        msgpack_pack_uint64(&e->pk, r->tokens[i]);
}

static int dec_rq_leases(dec *d, fields v, crp_rpc_req *m)
{
    crp_rpc_leases_req *r = &m->u.leases;
    const msgpack_object_array *a;
    void *p;
    int rc;
    if ((rc = dec_keys(d, v[1], &r->n_keys, &r->keys)) != 0 ||
        (rc = crp_mp_get_array(&d->c, "lts", v[2], CRP_RPC_MAX_BATCH, &a)) != 0)
        return rc;
    if (a->size != r->n_keys)
        return crp_mp_fail(MALFORMED, &d->c, "lts", "has %u entries for %zu keys",
                           (unsigned)a->size, r->n_keys);
    if ((rc = dec_alloc_array(d, "lts", a->size, sizeof(uint64_t), &p)) != 0)
        return rc;
    r->tokens = p;
    for (uint32_t i = 0; i < a->size; i++) {
        size_t mark = crp_mp_path_push(&d->c, "token", i);
        rc = crp_mp_get_u64(&d->c, "lts", &a->ptr[i], &r->tokens[i]);
        crp_mp_path_pop(&d->c, mark);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void enc_rq_put_start(crp_mp_enc *e, const crp_rpc_req *m)
{
    const crp_rpc_put_start_req *r = &m->u.put_start;
    enc_uuid(e, "cid", &r->client_id);
    crp_mp_enc_str(e, "k", r->key, CRP_RPC_MAX_KEY);
    crp_mp_enc_u64(e, "sz", r->value_size);
    enc_config(e, &r->config);
}

static int dec_rq_put_start(dec *d, fields v, crp_rpc_req *m)
{
    crp_rpc_put_start_req *r = &m->u.put_start;
    int rc;
    if ((rc = get_uuid(&d->c, "cid", v[1], &r->client_id)) != 0 ||
        (rc = get_str(d, "k", v[2], CRP_RPC_MAX_KEY, &r->key)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "sz", v[3], &r->value_size)) != 0)
        return rc;
    return dec_config(d, v[4], &r->config);
}

static void enc_rq_owner_key(crp_mp_enc *e, const crp_rpc_req *m)
{
    enc_uuid(e, "cid", &m->u.owner_key.client_id);
    crp_mp_enc_str(e, "k", m->u.owner_key.key, CRP_RPC_MAX_KEY);
}

static int dec_rq_owner_key(dec *d, fields v, crp_rpc_req *m)
{
    int rc = get_uuid(&d->c, "cid", v[1], &m->u.owner_key.client_id);
    if (rc == 0)
        rc = get_str(d, "k", v[2], CRP_RPC_MAX_KEY, &m->u.owner_key.key);
    return rc;
}

static void enc_rq_batch_put_start(crp_mp_enc *e, const crp_rpc_req *m)
{
    const crp_rpc_batch_put_start_req *r = &m->u.batch_put_start;
    enc_uuid(e, "cid", &r->client_id);
    enc_keys(e, r->n_keys, r->keys);
    if (enc_array(e, "szs", r->n_keys, r->value_sizes, CRP_RPC_MAX_BATCH) != 0)
        return;
    for (size_t i = 0; i < r->n_keys; i++)
        msgpack_pack_uint64(&e->pk, r->value_sizes[i]);
    enc_config(e, &r->config);
}

static int dec_rq_batch_put_start(dec *d, fields v, crp_rpc_req *m)
{
    crp_rpc_batch_put_start_req *r = &m->u.batch_put_start;
    const msgpack_object_array *a;
    void *p;
    int rc;
    if ((rc = get_uuid(&d->c, "cid", v[1], &r->client_id)) != 0 ||
        (rc = dec_keys(d, v[2], &r->n_keys, &r->keys)) != 0 ||
        (rc = crp_mp_get_array(&d->c, "szs", v[3], CRP_RPC_MAX_BATCH, &a)) != 0)
        return rc;
    if (a->size != r->n_keys)
        return crp_mp_fail(MALFORMED, &d->c, "szs", "has %u entries for %zu keys",
                           (unsigned)a->size, r->n_keys);
    if ((rc = dec_alloc_array(d, "szs", a->size, sizeof(uint64_t), &p)) != 0)
        return rc;
    r->value_sizes = p;
    for (uint32_t i = 0; i < a->size; i++) {
        size_t mark = crp_mp_path_push(&d->c, "size", i);
        rc = crp_mp_get_u64(&d->c, "szs", &a->ptr[i], &r->value_sizes[i]);
        crp_mp_path_pop(&d->c, mark);
        if (rc != 0)
            return rc;
    }
    return dec_config(d, v[4], &r->config);
}

static void enc_rq_owner_keys(crp_mp_enc *e, const crp_rpc_req *m)
{
    enc_uuid(e, "cid", &m->u.owner_keys.client_id);
    enc_keys(e, m->u.owner_keys.n_keys, m->u.owner_keys.keys);
}

static int dec_rq_owner_keys(dec *d, fields v, crp_rpc_req *m)
{
    crp_rpc_owner_keys_req *r = &m->u.owner_keys;
    int rc = get_uuid(&d->c, "cid", v[1], &r->client_id);
    if (rc == 0)
        rc = dec_keys(d, v[2], &r->n_keys, &r->keys);
    return rc;
}

static void enc_rq_remove(crp_mp_enc *e, const crp_rpc_req *m)
{
    crp_mp_enc_str(e, "k", m->u.remove.key, CRP_RPC_MAX_KEY);
    crp_mp_enc_bool(e, "f", m->u.remove.force);
}

static int dec_rq_remove(dec *d, fields v, crp_rpc_req *m)
{
    int rc = get_str(d, "k", v[1], CRP_RPC_MAX_KEY, &m->u.remove.key);
    if (rc == 0)
        rc = crp_mp_get_bool(&d->c, "f", v[2], &m->u.remove.force);
    return rc;
}

static void enc_rq_regex(crp_mp_enc *e, const crp_rpc_req *m)
{
    crp_mp_enc_str(e, "re", m->u.regex.pattern, CRP_RPC_MAX_REGEX);
    crp_mp_enc_bool(e, "f", m->u.regex.force);
}

static int dec_rq_regex(dec *d, fields v, crp_rpc_req *m)
{
    int rc = get_str(d, "re", v[1], CRP_RPC_MAX_REGEX, &m->u.regex.pattern);
    if (rc == 0)
        rc = crp_mp_get_bool(&d->c, "f", v[2], &m->u.regex.force);
    return rc;
}

static void enc_rq_force(crp_mp_enc *e, const crp_rpc_req *m)
{
    crp_mp_enc_bool(e, "f", m->u.force.force);
}

static int dec_rq_force(dec *d, fields v, crp_rpc_req *m)
{
    return crp_mp_get_bool(&d->c, "f", v[1], &m->u.force.force);
}

static void enc_rq_batch_remove(crp_mp_enc *e, const crp_rpc_req *m)
{
    enc_keys(e, m->u.batch_remove.n_keys, m->u.batch_remove.keys);
    crp_mp_enc_bool(e, "f", m->u.batch_remove.force);
}

static int dec_rq_batch_remove(dec *d, fields v, crp_rpc_req *m)
{
    crp_rpc_batch_remove_req *r = &m->u.batch_remove;
    int rc = dec_keys(d, v[1], &r->n_keys, &r->keys);
    if (rc == 0)
        rc = crp_mp_get_bool(&d->c, "f", v[2], &r->force);
    return rc;
}

static void enc_rq_replica_clear(crp_mp_enc *e, const crp_rpc_req *m)
{
    const crp_rpc_replica_clear_req *r = &m->u.replica_clear;
    enc_uuid(e, "cid", &r->client_id);
    enc_keys(e, r->n_keys, r->keys);
    crp_mp_enc_str(e, "n", r->segment, CRP_MAX_NAME);
}

static int dec_rq_replica_clear(dec *d, fields v, crp_rpc_req *m)
{
    crp_rpc_replica_clear_req *r = &m->u.replica_clear;
    int rc;
    if ((rc = get_uuid(&d->c, "cid", v[1], &r->client_id)) != 0 ||
        (rc = dec_keys(d, v[2], &r->n_keys, &r->keys)) != 0)
        return rc;
    return get_str(d, "n", v[3], CRP_MAX_NAME, &r->segment);
}

static void enc_rq_name(crp_mp_enc *e, const crp_rpc_req *m)
{
    crp_mp_enc_str(e, "n", m->u.name.name, CRP_MAX_NAME);
}

static int dec_rq_name(dec *d, fields v, crp_rpc_req *m)
{
    return get_str(d, "n", v[1], CRP_MAX_NAME, &m->u.name.name);
}

/* A binary of 0..max bytes, copied into the arena (never NULL on success). */
static int get_blob(dec *d, const char *f, const msgpack_object *v, size_t max, size_t *len,
                    uint8_t **out)
{
    if (v == NULL)
        return crp_mp_fail(MALFORMED, &d->c, f, "is missing");
    if (v->type != MSGPACK_OBJECT_BIN)
        return crp_mp_fail(MALFORMED, &d->c, f, "is not binary (msgpack type %d)", (int)v->type);
    size_t n = v->via.bin.size;
    if (n > max)
        return crp_mp_fail(MALFORMED, &d->c, f, "has %zu bytes, more than %zu", n, max);
    uint8_t *p = dec_alloc(d, f, n ? n : 1, 8);
    if (p == NULL)
        return CR_ERR_NO_MEMORY;
    if (n > 0)
        memcpy(p, v->via.bin.ptr, n);
    *len = n;
    *out = p;
    return 0;
}

static void enc_blob(crp_mp_enc *e, size_t len, const uint8_t *data)
{
    if (len > CRP_RPC_MAX_BLOB || (len > 0 && data == NULL)) {
        crp_mp_enc_invalid(e, "b", "%zu bytes (at most %u, not NULL)", len,
                           (unsigned)CRP_RPC_MAX_BLOB);
        return;
    }
    crp_mp_enc_bin(e, "b", data, len);
}

static void enc_rq_blob(crp_mp_enc *e, const crp_rpc_req *m)
{
    enc_uuid(e, "cid", &m->u.blob.client_id);
    enc_blob(e, m->u.blob.len, m->u.blob.data);
}

static int dec_rq_blob(dec *d, fields v, crp_rpc_req *m)
{
    int rc = get_uuid(&d->c, "cid", v[1], &m->u.blob.client_id);
    if (rc != 0)
        return rc;
    return get_blob(d, "b", v[2], CRP_RPC_MAX_BLOB, &m->u.blob.len, &m->u.blob.data);
}

static void enc_rq_none(crp_mp_enc *e, const crp_rpc_req *m)
{
    (void)e;
    (void)m;
}

static int dec_rq_none(dec *d, fields v, crp_rpc_req *m)
{
    (void)d;
    (void)v;
    (void)m;
    return 0;
}

typedef struct req_shape {
    const char *const *keys; /* keys[0] is "op" */
    size_t n_keys;
    void (*enc)(crp_mp_enc *e, const crp_rpc_req *m);
    int (*dec)(dec *d, fields v, crp_rpc_req *m);
} req_shape;

#define RQ_KEYS(shape, ...) static const char *const rq_keys_##shape[] = {"op", __VA_ARGS__}
RQ_KEYS(hello, "v", "caps", "cid", "sw", "cn", "mac");
RQ_KEYS(client, "cid");
RQ_KEYS(mount, "cid", "seg");
RQ_KEYS(remount, "cid", "segs");
RQ_KEYS(unmount, "cid", "n");
RQ_KEYS(key, "k");
RQ_KEYS(keys, "ks");
RQ_KEYS(leases, "ks", "lts");
RQ_KEYS(put_start, "cid", "k", "sz", "cfg");
RQ_KEYS(owner_key, "cid", "k");
RQ_KEYS(batch_put_start, "cid", "ks", "szs", "cfg");
RQ_KEYS(owner_keys, "cid", "ks");
RQ_KEYS(remove, "k", "f");
RQ_KEYS(regex, "re", "f");
RQ_KEYS(force, "f");
RQ_KEYS(batch_remove, "ks", "f");
RQ_KEYS(replica_clear, "cid", "ks", "n");
RQ_KEYS(name, "n");
RQ_KEYS(blob, "cid", "b");
static const char *const rq_keys_none[] = {"op"};
#undef RQ_KEYS

#define RQ_SHAPE(s) [RQ_##s] = {rq_keys_##s, N_KEYS(rq_keys_##s), enc_rq_##s, dec_rq_##s}
static const req_shape REQ_SHAPES[RQ_COUNT] = {
    RQ_SHAPE(hello),
    RQ_SHAPE(client),
    RQ_SHAPE(mount),
    RQ_SHAPE(remount),
    RQ_SHAPE(unmount),
    RQ_SHAPE(key),
    RQ_SHAPE(keys),
    RQ_SHAPE(leases),
    RQ_SHAPE(put_start),
    RQ_SHAPE(owner_key),
    RQ_SHAPE(batch_put_start),
    RQ_SHAPE(owner_keys),
    RQ_SHAPE(remove),
    RQ_SHAPE(regex),
    RQ_SHAPE(force),
    RQ_SHAPE(batch_remove),
    RQ_SHAPE(replica_clear),
    RQ_SHAPE(name),
    RQ_SHAPE(blob),
    RQ_SHAPE(none),
};
#undef RQ_SHAPE

/* ------------------------------------------------------------------------ */
/* Reply shapes                                                             */
/* ------------------------------------------------------------------------ */

/* Field values of a reply: v[0..2] are "op", "st", "msg"; v[3..] the shape's keys. */
#define RS_FIRST 3

static void enc_rs_hello(crp_mp_enc *e, const crp_rpc_resp *m)
{
    const crp_rpc_hello_resp *r = &m->u.hello;
    crp_mp_enc_u64(e, "v", r->version);
    crp_mp_enc_u64(e, "caps", r->caps);
    crp_mp_enc_str(e, "sw", r->software, CRP_RPC_MAX_SOFTWARE);
    crp_mp_enc_u64(e, "view", r->view_version);
    if (r->has_server_nonce)
        crp_mp_enc_bin(e, "sn", r->server_nonce, CRP_NONCE_SIZE);
    if (r->has_mac)
        crp_mp_enc_bin(e, "smac", r->mac, CRP_MAC_SIZE);
    if (r->local_socket != NULL) {
        crp_mp_enc_str(e, "ls", r->local_socket, CRP_RPC_MAX_LOCAL);
        crp_mp_enc_u64(e, "lport", r->local_port);
        crp_mp_enc_u64(e, "lpid", r->local_pid);
    }
}

static int dec_rs_hello(dec *d, fields v, crp_rpc_resp *m)
{
    crp_rpc_hello_resp *r = &m->u.hello;
    int rc;
    if ((rc = crp_mp_get_u32(&d->c, "v", v[3], &r->version)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "caps", v[4], &r->caps)) != 0 ||
        (rc = get_str(d, "sw", v[5], CRP_RPC_MAX_SOFTWARE, &r->software)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "view", v[6], &r->view_version)) != 0 ||
        (rc = get_opt_bin(d, "sn", v[7], CRP_NONCE_SIZE, r->server_nonce, &r->has_server_nonce)) !=
            0 ||
        (rc = get_opt_bin(d, "smac", v[8], CRP_MAC_SIZE, r->mac, &r->has_mac)) != 0)
        return rc;
    r->local_socket = NULL;
    if (v[9] == NULL) /* no local socket offered: "lport" and "lpid" mean nothing */
        return 0;
    uint64_t port = 0;
    if ((rc = get_str(d, "ls", v[9], CRP_RPC_MAX_LOCAL, &r->local_socket)) != 0 ||
        (rc = crp_mp_get_uint(&d->c, "lport", v[10], UINT16_MAX, &port)) != 0 ||
        (rc = crp_mp_get_u32(&d->c, "lpid", v[11], &r->local_pid)) != 0)
        return rc;
    r->local_port = (uint16_t)port;
    return 0;
}

static void enc_rs_ping(crp_mp_enc *e, const crp_rpc_resp *m)
{
    if (m->u.ping.client_status > CRP_RPC_CLIENT_NEED_REMOUNT) {
        crp_mp_enc_invalid(e, "cs", "is not a client status (%u)",
                           (unsigned)m->u.ping.client_status);
        return;
    }
    crp_mp_enc_u64(e, "cs", m->u.ping.client_status);
    crp_mp_enc_u64(e, "view", m->u.ping.view_version);
    crp_mp_enc_u64(e, "fence", m->u.ping.fenced_ms);
}

static int dec_rs_ping(dec *d, fields v, crp_rpc_resp *m)
{
    int rc =
        crp_mp_get_u8(&d->c, "cs", v[3], CRP_RPC_CLIENT_NEED_REMOUNT, &m->u.ping.client_status);
    if (rc == 0)
        rc = crp_mp_get_u64(&d->c, "view", v[4], &m->u.ping.view_version);
    if (rc == 0 && v[5] != NULL) /* optional: masters before it send none */
        rc = crp_mp_get_u64(&d->c, "fence", v[5], &m->u.ping.fenced_ms);
    return rc;
}

static void enc_rs_exist(crp_mp_enc *e, const crp_rpc_resp *m)
{
    crp_mp_enc_bool(e, "ex", m->u.exist.exists);
}

static int dec_rs_exist(dec *d, fields v, crp_rpc_resp *m)
{
    return crp_mp_get_bool(&d->c, "ex", v[3], &m->u.exist.exists);
}

static void enc_rs_statuses(crp_mp_enc *e, const crp_rpc_resp *m)
{
    const crp_rpc_statuses_resp *r = &m->u.statuses;
    if (enc_array(e, "r", r->n, r->results, CRP_RPC_MAX_BATCH) != 0)
        return;
    for (size_t i = 0; i < r->n; i++)
        msgpack_pack_int32(&e->pk, r->results[i]);
}

static int dec_rs_statuses(dec *d, fields v, crp_rpc_resp *m)
{
    crp_rpc_statuses_resp *r = &m->u.statuses;
    const msgpack_object_array *a;
    void *p;
    int rc;
    if ((rc = crp_mp_get_array(&d->c, "r", v[3], CRP_RPC_MAX_BATCH, &a)) != 0 ||
        (rc = dec_alloc_array(d, "r", a->size, sizeof(int32_t), &p)) != 0)
        return rc;
    r->results = p;
    for (uint32_t i = 0; i < a->size; i++) {
        size_t mark = crp_mp_path_push(&d->c, "result", i);
        rc = crp_mp_get_i32(&d->c, "r", &a->ptr[i], &r->results[i]);
        crp_mp_path_pop(&d->c, mark);
        if (rc != 0)
            return rc;
    }
    r->n = a->size;
    return 0;
}

static void enc_rs_get(crp_mp_enc *e, const crp_rpc_resp *m)
{
    enc_replicas(e, m->u.get.n_replicas, m->u.get.replicas);
    crp_mp_enc_u64(e, "lease", m->u.get.lease_ttl_ms);
    crp_mp_enc_u64(e, "lt", m->u.get.lease_token);
    crp_mp_enc_u64(e, "ov", m->u.get.version);
}

static int dec_rs_get(dec *d, fields v, crp_rpc_resp *m)
{
    int rc = dec_replicas(d, v[3], &m->u.get.n_replicas, &m->u.get.replicas);
    if (rc == 0)
        rc = crp_mp_get_u64(&d->c, "lease", v[4], &m->u.get.lease_ttl_ms);
    if (rc == 0 && v[5] != NULL) /* optional: masters before it send none */
        rc = crp_mp_get_u64(&d->c, "lt", v[5], &m->u.get.lease_token);
    if (rc == 0 && v[6] != NULL) /* optional: masters before it send none */
        rc = crp_mp_get_u64(&d->c, "ov", v[6], &m->u.get.version);
    return rc;
}

static void enc_rs_alloc(crp_mp_enc *e, const crp_rpc_resp *m)
{
    enc_replicas(e, m->u.alloc.n_replicas, m->u.alloc.replicas);
}

static int dec_rs_alloc(dec *d, fields v, crp_rpc_resp *m)
{
    return dec_replicas(d, v[3], &m->u.alloc.n_replicas, &m->u.alloc.replicas);
}

static void enc_rs_batch_get(crp_mp_enc *e, const crp_rpc_resp *m)
{
    enc_results(e, m->u.batch_get.n, m->u.batch_get.results);
    crp_mp_enc_u64(e, "lease", m->u.batch_get.lease_ttl_ms);
}

static int dec_rs_batch_get(dec *d, fields v, crp_rpc_resp *m)
{
    int rc = dec_results(d, v[3], &m->u.batch_get.n, &m->u.batch_get.results);
    if (rc == 0)
        rc = crp_mp_get_u64(&d->c, "lease", v[4], &m->u.batch_get.lease_ttl_ms);
    return rc;
}

static void enc_rs_batch_alloc(crp_mp_enc *e, const crp_rpc_resp *m)
{
    enc_results(e, m->u.batch_alloc.n, m->u.batch_alloc.results);
}

static int dec_rs_batch_alloc(dec *d, fields v, crp_rpc_resp *m)
{
    return dec_results(d, v[3], &m->u.batch_alloc.n, &m->u.batch_alloc.results);
}

static void enc_rs_count(crp_mp_enc *e, const crp_rpc_resp *m)
{
    crp_mp_enc_u64(e, "n", m->u.count.count);
}

static int dec_rs_count(dec *d, fields v, crp_rpc_resp *m)
{
    return crp_mp_get_u64(&d->c, "n", v[3], &m->u.count.count);
}

static void enc_rs_names(crp_mp_enc *e, const crp_rpc_resp *m)
{
    enc_str_array(e, "names", m->u.names.n_names, m->u.names.names, CRP_RPC_MAX_SEGMENTS,
                  CRP_MAX_NAME, "name");
}

static int dec_rs_names(dec *d, fields v, crp_rpc_resp *m)
{
    return dec_str_array(d, "names", v[3], CRP_RPC_MAX_SEGMENTS, CRP_MAX_NAME, "name",
                         &m->u.names.n_names, &m->u.names.names);
}

static void enc_rs_segment_info(crp_mp_enc *e, const crp_rpc_resp *m)
{
    const crp_rpc_segment_info_resp *r = &m->u.segment_info;
    enc_segment(e, "seg", &r->segment);
    crp_mp_enc_u64(e, "used", r->used);
    enc_uuid(e, "cid", &r->client_id);
}

static int dec_rs_segment_info(dec *d, fields v, crp_rpc_resp *m)
{
    crp_rpc_segment_info_resp *r = &m->u.segment_info;
    int rc;
    if ((rc = dec_segment(d, "seg", v[3], &r->segment)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "used", v[4], &r->used)) != 0)
        return rc;
    return get_uuid(&d->c, "cid", v[5], &r->client_id);
}

static void enc_rs_key_info(crp_mp_enc *e, const crp_rpc_resp *m)
{
    const crp_rpc_key_info_resp *r = &m->u.key_info;
    crp_mp_enc_u64(e, "sz", r->value_size);
    enc_replicas(e, r->n_replicas, r->replicas);
    crp_mp_enc_u64(e, "lease", r->lease_ms_left);
    crp_mp_enc_bool(e, "hp", r->hard_pin);
    crp_mp_enc_u64(e, "sp", r->soft_pin_ms_left);
    enc_uuid(e, "cid", &r->client_id);
}

static int dec_rs_key_info(dec *d, fields v, crp_rpc_resp *m)
{
    crp_rpc_key_info_resp *r = &m->u.key_info;
    int rc;
    if ((rc = crp_mp_get_u64(&d->c, "sz", v[3], &r->value_size)) != 0 ||
        (rc = dec_replicas(d, v[4], &r->n_replicas, &r->replicas)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "lease", v[5], &r->lease_ms_left)) != 0 ||
        (rc = crp_mp_get_bool(&d->c, "hp", v[6], &r->hard_pin)) != 0 ||
        (rc = crp_mp_get_u64(&d->c, "sp", v[7], &r->soft_pin_ms_left)) != 0)
        return rc;
    return get_uuid(&d->c, "cid", v[8], &r->client_id);
}

static void enc_rs_blob(crp_mp_enc *e, const crp_rpc_resp *m)
{
    enc_blob(e, m->u.blob.len, m->u.blob.data);
}

static int dec_rs_blob(dec *d, fields v, crp_rpc_resp *m)
{
    return get_blob(d, "b", v[3], CRP_RPC_MAX_BLOB, &m->u.blob.len, &m->u.blob.data);
}

static void enc_rs_end(crp_mp_enc *e, const crp_rpc_resp *m)
{
    crp_mp_enc_u64(e, "ov", m->u.end.version);
}

static int dec_rs_end(dec *d, fields v, crp_rpc_resp *m)
{
    if (v[3] == NULL) /* optional: masters before it send none */
        return 0;
    return crp_mp_get_u64(&d->c, "ov", v[3], &m->u.end.version);
}

static void enc_rs_none(crp_mp_enc *e, const crp_rpc_resp *m)
{
    (void)e;
    (void)m;
}

static int dec_rs_none(dec *d, fields v, crp_rpc_resp *m)
{
    (void)d;
    (void)v;
    (void)m;
    return 0;
}

typedef struct resp_shape {
    const char *const *keys; /* "op", "st", "msg", then the payload keys */
    size_t n_keys;
    void (*enc)(crp_mp_enc *e, const crp_rpc_resp *m);
    int (*dec)(dec *d, fields v, crp_rpc_resp *m);
} resp_shape;

#define RS_KEYS(shape, ...)                                                                        \
    static const char *const rs_keys_##shape[] = {"op", "st", "msg", __VA_ARGS__}
RS_KEYS(hello, "v", "caps", "sw", "view", "sn", "smac", "ls", "lport", "lpid");
RS_KEYS(ping, "cs", "view", "fence");
RS_KEYS(exist, "ex");
RS_KEYS(statuses, "r");
RS_KEYS(get, "reps", "lease", "lt", "ov");
RS_KEYS(alloc, "reps");
RS_KEYS(batch_get, "r", "lease");
RS_KEYS(batch_alloc, "r");
RS_KEYS(count, "n");
RS_KEYS(names, "names");
RS_KEYS(segment_info, "seg", "used", "cid");
RS_KEYS(key_info, "sz", "reps", "lease", "hp", "sp", "cid");
RS_KEYS(blob, "b");
RS_KEYS(end, "ov");
static const char *const rs_keys_none[] = {"op", "st", "msg"};
#undef RS_KEYS

#define RS_SHAPE(s) [RS_##s] = {rs_keys_##s, N_KEYS(rs_keys_##s), enc_rs_##s, dec_rs_##s}
static const resp_shape RESP_SHAPES[RS_COUNT] = {
    RS_SHAPE(hello), RS_SHAPE(ping),  RS_SHAPE(exist),        RS_SHAPE(statuses),
    RS_SHAPE(get),   RS_SHAPE(alloc), RS_SHAPE(batch_get),    RS_SHAPE(batch_alloc),
    RS_SHAPE(count), RS_SHAPE(names), RS_SHAPE(segment_info), RS_SHAPE(key_info),
    RS_SHAPE(blob),  RS_SHAPE(end),   RS_SHAPE(none),
};
#undef RS_SHAPE

/* ------------------------------------------------------------------------ */
/* Entry points                                                             */
/* ------------------------------------------------------------------------ */

/* Read "op" from a body map: 0, MALFORMED, or CR_NOT_SUPPORTED for an unknown op. */
static int read_op(const crp_mp_ctx *c, const msgpack_object *body, int *index)
{
    static const char *const keys[] = {"op"};
    const msgpack_object *v[1];
    uint64_t op;
    int rc = crp_mp_map_fields(c, NULL, body, keys, 1, v);
    if (rc == 0)
        rc = crp_mp_get_uint(c, "op", v[0], UINT16_MAX, &op);
    if (rc != 0)
        return rc;
    int i = crp_rpc_op_index((int)op);
    if (i < 0)
        return crp_mp_fail(CR_NOT_SUPPORTED, c, "op", "is an unknown opcode (%u)", (unsigned)op);
    *index = i;
    return 0;
}

/* Both decoders' first step: unpack the body and find its op (*index into
 * OPS); errors name the op from then on. On failure nothing is left to
 * destroy; on success the caller destroys u. */
static int open_body(dec *d, const char *what, const void *data, size_t len, msgpack_unpacked *u,
                     int *index)
{
    dec_init(d, what, len);
    int rc = crp_mp_unpack(&d->c, data, len, CRP_MAX_BODY, u);
    if (rc != 0)
        return rc;
    rc = read_op(&d->c, &u->data, index);
    if (rc != 0) {
        msgpack_unpacked_destroy(u);
        return rc;
    }
    rpc_ctx_init(&d->c, what, OPS[*index].op);
    return 0;
}

/* Both encoders' first step: the op's index into OPS, or -1 with the
 * encoder failed (an unknown opcode; crp_mp_enc_finish reports it). */
static int enc_begin(crp_mp_enc *e, crp_buf *out, const char *what, int op)
{
    int i = crp_rpc_op_index(op);
    rpc_enc_init(e, out, what, i >= 0 ? op : 0);
    if (i < 0)
        crp_mp_enc_invalid(e, "op", "is an unknown opcode (%u)", (unsigned)op);
    return i;
}

/* Does a request of this shape carry the optional "ow" (owned writes)? */
static bool takes_owned(int shape)
{
    return shape == RQ_put_start || shape == RQ_batch_put_start;
}

/* Is an optional "ca" (commit ahead) of this op decoded? It is valid in a PUT_END with "gk" and
 * in a BATCH_PUT_END; in the upserts' ends it is refused, naming it. */
static bool takes_ahead(int op)
{
    return op == CRP_RPC_PUT_END || op == CRP_RPC_UPSERT_END || op == CRP_RPC_BATCH_PUT_END ||
           op == CRP_RPC_BATCH_UPSERT_END;
}

/* Does a request of this op carry the optional "gk" (put grant)? */
static bool takes_grant(int op)
{
    return op == CRP_RPC_PUT_END || op == CRP_RPC_UPSERT_END;
}

/* Does a request of this op carry the optional "swt" (stage wait)? */
static bool takes_stage_wait(int op)
{
    return op == CRP_RPC_GET_REPLICA_LIST || op == CRP_RPC_BATCH_GET_REPLICA_LIST ||
           op == CRP_RPC_OFFLOAD_HEARTBEAT;
}

int crp_rpc_req_encode(const crp_rpc_req *m, crp_buf *out)
{
    crp_mp_enc e;
    int i = enc_begin(&e, out, "request", m->op);
    if (i < 0)
        return crp_mp_enc_finish(&e);
    const req_shape *s = &REQ_SHAPES[OPS[i].req];
    bool tenant = m->tenant != NULL && m->tenant[0] != '\0';
    bool owned = m->owned_ms != 0 && takes_owned(OPS[i].req);
    bool stage_wait = m->stage_wait_ms != 0 && takes_stage_wait(m->op);
    bool grant = m->grant_key != NULL && takes_grant(m->op);
    bool ahead =
        m->commit_ahead && ((grant && m->op == CRP_RPC_PUT_END) || m->op == CRP_RPC_BATCH_PUT_END);
    size_t omitted = 0;
    if (OPS[i].req == RQ_hello && !m->u.hello.has_mac) /* "cn" and "mac" are optional */
        omitted = 2;
    msgpack_pack_map(&e.pk, s->n_keys - omitted + (tenant ? 1 : 0) + (owned ? 1 : 0) +
                                (stage_wait ? 1 : 0) + (grant ? 1 : 0) + (ahead ? 1 : 0));
    crp_mp_enc_u64(&e, "op", m->op);
    s->enc(&e, m);
    if (tenant)
        crp_mp_enc_str(&e, "tn", m->tenant, CRP_RPC_MAX_TENANT);
    if (owned)
        crp_mp_enc_u64(&e, "ow", m->owned_ms);
    if (stage_wait)
        crp_mp_enc_u64(&e, "swt", m->stage_wait_ms);
    if (grant)
        crp_mp_enc_str(&e, "gk", m->grant_key, CRP_RPC_MAX_KEY);
    if (ahead)
        crp_mp_enc_bool(&e, "ca", true);
    return crp_mp_enc_finish(&e);
}

int crp_rpc_req_decode(const void *data, size_t len, crp_rpc_req *out)
{
    const msgpack_object *v[MAX_FIELDS];
    msgpack_unpacked u;
    crp_rpc_req m;
    dec d;
    int i = -1;

    int rc = open_body(&d, "request", data, len, &u, &i);
    if (rc != 0)
        return rc;
    const req_shape *s = &REQ_SHAPES[OPS[i].req];
    memset(&m, 0, sizeof(m));
    m.op = OPS[i].op;
    rc = crp_mp_map_fields(&d.c, NULL, &u.data, s->keys, s->n_keys, v);
    if (rc == 0)
        rc = s->dec(&d, v, &m);
    if (rc == 0) { /* the optional tenant of any request */
        static const char *const tn_key[] = {"tn"};
        const msgpack_object *tn[1];
        rc = crp_mp_map_fields(&d.c, NULL, &u.data, tn_key, 1, tn);
        if (rc == 0 && tn[0] != NULL)
            rc = get_str(&d, "tn", tn[0], CRP_RPC_MAX_TENANT, &m.tenant);
    }
    if (rc == 0 && takes_owned(OPS[i].req)) { /* the put starts' optional "ow" */
        static const char *const ow_key[] = {"ow"};
        const msgpack_object *ow[1];
        rc = crp_mp_map_fields(&d.c, NULL, &u.data, ow_key, 1, ow);
        if (rc == 0 && ow[0] != NULL)
            rc = crp_mp_get_u64(&d.c, "ow", ow[0], &m.owned_ms);
    }
    if (rc == 0 && takes_stage_wait(m.op)) { /* the gets' optional "swt" */
        static const char *const swt_key[] = {"swt"};
        const msgpack_object *swt[1];
        uint64_t ms = 0;
        rc = crp_mp_map_fields(&d.c, NULL, &u.data, swt_key, 1, swt);
        if (rc == 0 && swt[0] != NULL)
            rc = crp_mp_get_u64(&d.c, "swt", swt[0], &ms);
        if (rc == 0 && ms > UINT32_MAX)
            rc = crb_error(CR_ERR_MALFORMED_FRAME, "request: \"swt\" %llu ms is out of range",
                           (unsigned long long)ms);
        m.stage_wait_ms = (uint32_t)ms;
    }
    if (rc == 0 && takes_ahead(m.op)) { /* the ends' optional "gk" and "ca" */
        static const char *const gk_keys[] = {"gk", "ca"};
        const msgpack_object *gk[2];
        rc = crp_mp_map_fields(&d.c, NULL, &u.data, gk_keys, 2, gk);
        if (rc == 0 && gk[0] != NULL && takes_grant(m.op))
            rc = get_str(&d, "gk", gk[0], CRP_RPC_MAX_KEY, &m.grant_key);
        if (rc == 0 && gk[1] != NULL)
            rc = crp_mp_get_bool(&d.c, "ca", gk[1], &m.commit_ahead);
        if (rc == 0 && m.commit_ahead &&
            !((m.grant_key != NULL && m.op == CRP_RPC_PUT_END) || m.op == CRP_RPC_BATCH_PUT_END))
            rc = crb_error(CR_ERR_MALFORMED_FRAME,
                           "request: \"ca\" (commit ahead) is only for a PUT_END with \"gk\" "
                           "or a BATCH_PUT_END");
    }
    if (rc != 0) {
        arena_free(d.arena);
        goto destroy_unpacked;
    }
    m.arena = d.arena;
    *out = m;
destroy_unpacked:
    msgpack_unpacked_destroy(&u);
    return rc;
}

bool crp_rpc_resp_is_staging(const crp_rpc_resp *r)
{
    if (r->op == CRP_RPC_GET_REPLICA_LIST)
        return r->status == CR_ERR_OFFLOAD_STAGING;
    if (r->op != CRP_RPC_BATCH_GET_REPLICA_LIST || r->status != 0)
        return false;
    bool any = false;
    for (size_t i = 0; i < r->u.batch_get.n; i++) {
        if (r->u.batch_get.results[i].status == 0)
            return false;
        any = any || r->u.batch_get.results[i].status == CR_ERR_OFFLOAD_STAGING;
    }
    return any;
}

void crp_rpc_req_clear(crp_rpc_req *m)
{
    arena_free(m->arena);
    memset(m, 0, sizeof(*m));
}

int crp_rpc_resp_encode(const crp_rpc_resp *m, crp_buf *out)
{
    crp_mp_enc e;
    int i = enc_begin(&e, out, "reply", m->op);
    if (i < 0)
        return crp_mp_enc_finish(&e);
    if (m->status > 0) {
        crp_mp_enc_invalid(&e, "st", "is a positive status (%d)", (int)m->status);
        return crp_mp_enc_finish(&e);
    }
    const resp_shape *s = &RESP_SHAPES[OPS[i].resp];
    bool payload = m->status == 0 || OPS[i].resp == RS_hello;

    /* The text is a diagnostic: cut to CRP_RPC_MAX_MSG bytes, never split UTF-8. */
    size_t msg_len = 0;
    if (m->message != NULL) {
        msg_len = strnlen(m->message, CRP_RPC_MAX_MSG + 1);
        if (msg_len > CRP_RPC_MAX_MSG) {
            msg_len = CRP_RPC_MAX_MSG;
            while (msg_len > 0 && ((uint8_t)m->message[msg_len] & 0xC0) == 0x80)
                msg_len--;
        }
    }
    size_t n = 2 + (m->message != NULL ? 1 : 0) + (payload ? s->n_keys - RS_FIRST : 0);
    if (payload && OPS[i].resp == RS_hello) /* its optional keys: written only when set */
        n -= (m->u.hello.has_server_nonce ? 0 : 1) + (m->u.hello.has_mac ? 0 : 1) +
             (m->u.hello.local_socket != NULL ? 0 : 3);
    msgpack_pack_map(&e.pk, n);
    crp_mp_enc_u64(&e, "op", m->op);
    crp_mp_enc_i32(&e, "st", m->status);
    if (m->message != NULL) {
        crp_mp_enc_key(&e, "msg");
        msgpack_pack_str_with_body(&e.pk, m->message, msg_len);
    }
    if (payload)
        s->enc(&e, m);
    return crp_mp_enc_finish(&e);
}

int crp_rpc_resp_decode(const void *data, size_t len, crp_rpc_resp *out)
{
    const msgpack_object *v[MAX_FIELDS];
    msgpack_unpacked u;
    crp_rpc_resp m;
    dec d;
    int i = -1;

    int rc = open_body(&d, "reply", data, len, &u, &i);
    if (rc != 0)
        return rc;
    const resp_shape *s = &RESP_SHAPES[OPS[i].resp];
    memset(&m, 0, sizeof(m));
    m.op = OPS[i].op;
    rc = crp_mp_map_fields(&d.c, NULL, &u.data, s->keys, s->n_keys, v);
    if (rc == 0)
        rc = get_status(&d.c, "st", v[1], &m.status);
    if (rc == 0 && v[2] != NULL)
        rc = get_str(&d, "msg", v[2], CRP_RPC_MAX_MSG, &m.message);
    if (rc == 0 && (m.status == 0 || OPS[i].resp == RS_hello))
        rc = s->dec(&d, v, &m);
    if (rc != 0) {
        arena_free(d.arena);
        goto destroy_unpacked;
    }
    m.arena = d.arena;
    *out = m;
destroy_unpacked:
    msgpack_unpacked_destroy(&u);
    return rc;
}

void crp_rpc_resp_clear(crp_rpc_resp *m)
{
    arena_free(m->arena);
    memset(m, 0, sizeof(*m));
}
