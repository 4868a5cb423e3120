/*
 * thin.c - msgpack bodies of the thin-client RPC (see thin.h).
 *
 * Design. Every op is a set of generic fields (thin.h); the op table gives
 * each op's required and optional request fields and its reply fields, so
 * one encoder and one decoder per direction serve every op, and a field an
 * op does not use can neither be sent nor be picked up. Encoders write the
 * fields present in the message's `fields` mask in one fixed order (the
 * canonical form), after checking every bound the decoder checks, so a
 * sender fails locally. Decoders run the steps of messages.c and rpc.c: the
 * allocation-free structural pre-scan (crp_mp_unpack), the object tree, then
 * a strict walk that checks types, bounds, the cross-field counts (one "nx"
 * entry per key, "nx" summing to the extents, one "of" entry per extent)
 * and overflow of every (offset, length) pair. Strings and arrays of a
 * decoded message go to one arena (a chain of chunks, the first sized from
 * the body), attached to the output only on success.
 */
#include "proto/thin.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "proto/frame.h"
#include "proto/mp_codec.h"
#include "proto/mp_scan.h"

#define MALFORMED    CR_ERR_MALFORMED_FRAME
#define N_KEYS(keys) (sizeof(keys) / sizeof((keys)[0]))

/* ------------------------------------------------------------------------ */
/* Op table                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct op_info {
    uint16_t op;
    const char *name;
    uint32_t required, optional, reply;
} op_info;

static const op_info OPS[] = {
#define OP_INFO_(name, value, str, rq, opt, rs) {value, str, rq, opt, rs},
    CRP_THIN_OP_TABLE(OP_INFO_)
#undef OP_INFO_
};

static const op_info *op_find(int op)
{
    for (size_t i = 0; i < N_KEYS(OPS); i++)
        if (OPS[i].op == op)
            return &OPS[i];
    return NULL;
}

const char *crp_thin_op_name(int op)
{
    const op_info *o = op_find(op);
    return o ? o->name : "?";
}

bool crp_thin_op_valid(int op)
{
    return op_find(op) != NULL;
}

uint32_t crp_thin_req_required(int op)
{
    const op_info *o = op_find(op);
    return o ? o->required : 0;
}

uint32_t crp_thin_req_optional(int op)
{
    const op_info *o = op_find(op);
    return o ? o->optional : 0;
}

uint32_t crp_thin_resp_allowed(int op)
{
    const op_info *o = op_find(op);
    return o ? o->reply : 0;
}

static void ctx_init(crp_mp_ctx *c, const char *what, int op)
{
    char msg[sizeof(c->msg)];
    if (op > 0)
        snprintf(msg, sizeof(msg), "thin %s %s", crp_thin_op_name(op), what);
    else
        snprintf(msg, sizeof(msg), "thin %s", what);
    crp_mp_ctx_init(c, msg);
}

/* ------------------------------------------------------------------------ */
/* Arena                                                                    */
/* ------------------------------------------------------------------------ */

struct crp_thin_arena {
    struct crp_thin_arena *next;
    size_t cap, used;
    max_align_t data[];
};

static void arena_free(struct crp_thin_arena *a)
{
    while (a != NULL) {
        struct crp_thin_arena *next = a->next;
        free(a);
        a = next;
    }
}

typedef struct dec {
    crp_mp_ctx c;
    struct crp_thin_arena *arena;
    size_t first_chunk;
} dec;

static void *dec_alloc(dec *d, const char *field, size_t n, size_t align)
{
    struct crp_thin_arena *a = d->arena;
    if (a != NULL) {
        size_t off = (a->used + align - 1) & ~(align - 1);
        if (off <= a->cap && n <= a->cap - off) {
            a->used = off + n;
            return (char *)a->data + off;
        }
    }
    size_t cap = a != NULL ? a->cap * 2 : d->first_chunk;
    if (cap < 1024)
        cap = 1024;
    if (cap < n)
        cap = n;
    struct crp_thin_arena *c =
        cap <= SIZE_MAX - sizeof(struct crp_thin_arena) ? malloc(sizeof(*c) + cap) : NULL;
    if (c == NULL) {
        crp_mp_fail(CR_ERR_NO_MEMORY, &d->c, field, "cannot allocate %zu bytes", n);
        return NULL;
    }
    c->next = a;
    c->cap = cap;
    c->used = n;
    d->arena = c;
    return c->data;
}

/* n elements of size bytes; *out NULL for n == 0. */
static int dec_array(dec *d, const char *field, size_t n, size_t size, void **out)
{
    *out = NULL;
    if (n == 0)
        return 0;
    if (n > SIZE_MAX / size)
        return crp_mp_fail(CR_ERR_NO_MEMORY, &d->c, field, "%zu entries overflow", n);
    *out = dec_alloc(d, field, n * size, sizeof(uint64_t));
    return *out != NULL ? 0 : CR_ERR_NO_MEMORY;
}

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

static int get_i64(const crp_mp_ctx *c, const char *f, const msgpack_object *v, int64_t *out)
{
    if (v == NULL)
        return crp_mp_fail(MALFORMED, c, f, "is missing");
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (v->via.u64 > INT64_MAX)
            return crp_mp_fail(MALFORMED, c, f, "is out of range (%llu)",
                               (unsigned long long)v->via.u64);
        *out = (int64_t)v->via.u64;
        return 0;
    }
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = v->via.i64;
        return 0;
    }
    return crp_mp_fail(MALFORMED, c, f, "is not an integer (msgpack type %d)", (int)v->type);
}

static int get_bin(const crp_mp_ctx *c, const char *f, const msgpack_object *v, void *out, size_t n)
{
    const uint8_t *p;
    int rc = crp_mp_get_bin_view(c, f, v, n, &p);
    if (rc == 0)
        memcpy(out, p, n);
    return rc;
}

static int dec_str_array(dec *d, const char *f, const msgpack_object *v, size_t max_n,
                         size_t max_len, const char *item, size_t *n_out, char ***out)
{
    const msgpack_object_array *a;
    void *p;
    int rc = crp_mp_get_array(&d->c, f, v, max_n, &a);
    if (rc == 0)
        rc = dec_array(d, f, a->size, sizeof(char *), &p);
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

static int dec_u64_array(dec *d, const char *f, const msgpack_object *v, size_t max_n,
                         size_t *n_out, uint64_t **out)
{
    const msgpack_object_array *a;
    void *p;
    int rc = crp_mp_get_array(&d->c, f, v, max_n, &a);
    if (rc == 0)
        rc = dec_array(d, f, a->size, sizeof(uint64_t), &p);
    if (rc != 0)
        return rc;
    uint64_t *vals = p;
    for (uint32_t i = 0; i < a->size; i++) {
        size_t mark = crp_mp_path_push(&d->c, "entry", i);
        rc = crp_mp_get_u64(&d->c, f, &a->ptr[i], &vals[i]);
        crp_mp_path_pop(&d->c, mark);
        if (rc != 0)
            return rc;
    }
    *n_out = a->size;
    *out = vals;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Replica config (the master RPC's shape)                                  */
/* ------------------------------------------------------------------------ */

static void enc_config(crp_mp_enc *e, const crp_rpc_replica_config *cfg)
{
    if (cfg->soft_pin_action > CRP_RPC_SOFT_PIN_DISABLE) {
        crp_mp_enc_invalid(e, "spa", "is not a soft pin action (%u)",
                           (unsigned)cfg->soft_pin_action);
        return;
    }
    if (cfg->n_preferred > CRP_RPC_MAX_PREFERRED ||
        (cfg->n_preferred > 0 && cfg->preferred_segments == NULL)) {
        crp_mp_enc_invalid(e, "pref", "has %zu entries (at most %d, non-NULL)", cfg->n_preferred,
                           CRP_RPC_MAX_PREFERRED);
        return;
    }
    crp_mp_enc_key(e, "cfg");
    msgpack_pack_map(&e->pk, cfg->has_soft_pin_ttl ? 6 : 5);
    crp_mp_enc_u64(e, "n", cfg->replica_num);
    crp_mp_enc_bool(e, "hp", cfg->hard_pin);
    crp_mp_enc_u64(e, "spa", cfg->soft_pin_action);
    if (cfg->has_soft_pin_ttl)
        crp_mp_enc_u64(e, "spt", cfg->soft_pin_ttl_ms);
    crp_mp_enc_key(e, "pref");
    msgpack_pack_array(&e->pk, cfg->n_preferred);
    for (size_t i = 0; i < cfg->n_preferred && e->status == 0; i++)
        crp_mp_enc_str_value(e, "pref", cfg->preferred_segments[i], CRP_MAX_NAME);
    crp_mp_enc_bool(e, "same", cfg->prefer_same_node);
}

static int dec_config(dec *d, const msgpack_object *o, crp_rpc_replica_config *cfg)
{
    enum { K_N, K_HP, K_SPA, K_SPT, K_PREF, K_SAME };
    static const char *const keys[] = {"n", "hp", "spa", "spt", "pref", "same"};
    const msgpack_object *v[N_KEYS(keys)];
    size_t mark = crp_mp_path_push_name(&d->c, "config");
    int rc;
    if ((rc = crp_mp_map_fields(&d->c, "cfg", o, keys, N_KEYS(keys), v)) != 0 ||
        (rc = crp_mp_get_u32(&d->c, "n", v[K_N], &cfg->replica_num)) != 0 ||
        (rc = crp_mp_get_bool(&d->c, "hp", v[K_HP], &cfg->hard_pin)) != 0 ||
        (rc = crp_mp_get_u8(&d->c, "spa", v[K_SPA], CRP_RPC_SOFT_PIN_DISABLE,
                            &cfg->soft_pin_action)) != 0)
        goto out;
    if (v[K_SPT] != NULL) {
        if ((rc = crp_mp_get_u64(&d->c, "spt", v[K_SPT], &cfg->soft_pin_ttl_ms)) != 0)
            goto out;
        cfg->has_soft_pin_ttl = true;
    }
    if ((rc = dec_str_array(d, "pref", v[K_PREF], CRP_RPC_MAX_PREFERRED, CRP_MAX_NAME,
                            "preferred segment", &cfg->n_preferred, &cfg->preferred_segments)) == 0)
        rc = crp_mp_get_bool(&d->c, "same", v[K_SAME], &cfg->prefer_same_node);
out:
    crp_mp_path_pop(&d->c, mark);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */
/* ------------------------------------------------------------------------ */

enum {
    RQ_OP,
    RQ_KS,
    RQ_NX,
    RQ_EX,
    RQ_OF,
    RQ_VS,
    RQ_CFG,
    RQ_F,
    RQ_S,
    RQ_ID,
    RQ_A,
    RQ_L,
    RQ_FO,
    RQ_NFD,
    RQ_V,
    RQ_PID,
    RQ_POOL,
    RQ_LB,
    RQ_SID,
    RQ_TOK,
    RQ_MAC,
    RQ_TN,
    RQ_COUNT
};
static const char *const RQ_KEYS[RQ_COUNT] = {
    "op", "ks", "nx",  "ex", "of",  "vs",   "cfg", "f",   "s",   "id",  "a",
    "l",  "fo", "nfd", "v",  "pid", "pool", "lb",  "sid", "tok", "mac", "tn"};

/* Number of map entries the fields of mask take. */
static size_t req_entries(uint32_t mask)
{
    size_t n = 1; /* op */
    n += (mask & CRP_THIN_F_KEYS) ? 1 : 0;
    n += (mask & CRP_THIN_F_EXT) ? 2 : 0;
    n += (mask & CRP_THIN_F_OFFS) ? 1 : 0;
    n += (mask & CRP_THIN_F_VALS) ? 1 : 0;
    n += (mask & CRP_THIN_F_CFG) ? 1 : 0;
    n += (mask & CRP_THIN_F_FLAGS) ? 1 : 0;
    n += (mask & CRP_THIN_F_TEXT) ? 1 : 0;
    n += (mask & CRP_THIN_F_ID) ? 1 : 0;
    n += (mask & CRP_THIN_F_REGION) ? 3 : 0;
    n += (mask & CRP_THIN_F_NFD) ? 1 : 0;
    n += (mask & CRP_THIN_F_HELLO) ? 4 : 0;
    n += (mask & CRP_THIN_F_ATTACH) ? 2 : 0;
    n += (mask & CRP_THIN_F_MAC) ? 1 : 0;
    n += (mask & CRP_THIN_F_TENANT) ? 1 : 0;
    return n;
}

/* Cross-field checks shared by encoder and decoder; NULL or what is wrong. */
static const char *check_extents(size_t n_keys, const uint32_t *counts, size_t n_ext,
                                 const crp_thin_ext *ext)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n_keys; i++)
        sum += counts[i];
    if (sum != n_ext)
        return "extent counts do not add up to the extents";
    for (size_t i = 0; i < n_ext; i++)
        if (ext[i].offset > UINT64_MAX - ext[i].len)
            return "an extent's offset + length overflows";
    return NULL;
}

int crp_thin_req_encode(const crp_thin_req *m, crp_buf *out)
{
    crp_mp_enc e;
    const op_info *o = op_find(m->op);
    crp_mp_enc_init(&e, out, "", CRP_MAX_BODY);
    ctx_init(&e.c, "request", o ? m->op : 0);
    if (o == NULL) {
        crp_mp_enc_invalid(&e, "op", "is an unknown opcode (%u)", (unsigned)m->op);
        return crp_mp_enc_finish(&e);
    }
    uint32_t f = m->fields;
    if ((f & o->required) != o->required) {
        crp_mp_enc_invalid(&e, NULL, "lacks required fields (0x%x of 0x%x)", f & o->required,
                           o->required);
        return crp_mp_enc_finish(&e);
    }
    if (f & ~(o->required | o->optional)) {
        crp_mp_enc_invalid(&e, NULL, "has fields the op does not use (0x%x)",
                           f & ~(o->required | o->optional));
        return crp_mp_enc_finish(&e);
    }
    if ((f & CRP_THIN_F_KEYS) &&
        (m->n_keys > CRP_THIN_MAX_KEYS || (m->n_keys > 0 && m->keys == NULL)))
        crp_mp_enc_invalid(&e, "ks", "has %zu keys (at most %d, non-NULL)", m->n_keys,
                           CRP_THIN_MAX_KEYS);
    if ((f & CRP_THIN_F_EXT) && e.status == 0) { /* keys' bound first: counts has n_keys */
        const char *why = NULL;
        if (m->n_ext > CRP_THIN_MAX_EXTENTS || (m->n_ext > 0 && m->ext == NULL) ||
            (m->n_keys > 0 && m->counts == NULL))
            why = "has a bad size or a NULL array";
        else
            why = check_extents(m->n_keys, m->counts, m->n_ext, m->ext);
        if (why != NULL)
            crp_mp_enc_invalid(&e, "ex", "%s", why);
    }
    if ((f & CRP_THIN_F_OFFS) && m->n_ext > 0 && m->offsets == NULL)
        crp_mp_enc_invalid(&e, "of", "is NULL with %zu extents", m->n_ext);
    if ((f & CRP_THIN_F_VALS) &&
        (m->n_vals > CRP_THIN_MAX_EXTENTS || (m->n_vals > 0 && m->vals == NULL)))
        crp_mp_enc_invalid(&e, "vs", "has %zu values (at most %d, non-NULL)", m->n_vals,
                           CRP_THIN_MAX_EXTENTS);
    if ((f & CRP_THIN_F_FLAGS) && (m->flags & ~CRP_THIN_FLAGS_ALL))
        crp_mp_enc_invalid(&e, "f", "has unknown bits 0x%x", m->flags & ~CRP_THIN_FLAGS_ALL);
    if ((f & CRP_THIN_F_REGION) && (m->len == 0 || m->addr > UINT64_MAX - m->len))
        crp_mp_enc_invalid(&e, "l", "is 0 or address + length overflows");
    if ((f & CRP_THIN_F_NFD) && m->n_fds > CRP_THIN_MAX_FDS)
        crp_mp_enc_invalid(&e, "nfd", "is %u (at most %d)", m->n_fds, CRP_THIN_MAX_FDS);
    if (e.status != 0)
        return crp_mp_enc_finish(&e);

    msgpack_pack_map(&e.pk, req_entries(f));
    crp_mp_enc_u64(&e, "op", m->op);
    if (f & CRP_THIN_F_KEYS) {
        crp_mp_enc_key(&e, "ks");
        msgpack_pack_array(&e.pk, m->n_keys);
        for (size_t i = 0; i < m->n_keys && e.status == 0; i++) {
            size_t mark = crp_mp_path_push(&e.c, "key", i);
            crp_mp_enc_str_value(&e, "ks", m->keys[i], CRP_THIN_MAX_KEY);
            crp_mp_path_pop(&e.c, mark);
        }
    }
    if (f & CRP_THIN_F_EXT) {
        crp_mp_enc_key(&e, "nx");
        msgpack_pack_array(&e.pk, m->n_keys);
        for (size_t i = 0; i < m->n_keys; i++)
            msgpack_pack_uint32(&e.pk, m->counts[i]);
        crp_mp_enc_key(&e, "ex");
        msgpack_pack_array(&e.pk, m->n_ext);
        for (size_t i = 0; i < m->n_ext; i++) {
            msgpack_pack_array(&e.pk, 3);
            msgpack_pack_uint32(&e.pk, m->ext[i].region);
            msgpack_pack_uint64(&e.pk, m->ext[i].offset);
            msgpack_pack_uint64(&e.pk, m->ext[i].len);
        }
    }
    if (f & CRP_THIN_F_OFFS) {
        crp_mp_enc_key(&e, "of");
        msgpack_pack_array(&e.pk, m->n_ext);
        for (size_t i = 0; i < m->n_ext; i++)
            msgpack_pack_uint64(&e.pk, m->offsets[i]);
    }
    if (f & CRP_THIN_F_VALS) {
        crp_mp_enc_key(&e, "vs");
        msgpack_pack_array(&e.pk, m->n_vals);
        for (size_t i = 0; i < m->n_vals; i++)
            msgpack_pack_uint64(&e.pk, m->vals[i]);
    }
    if (f & CRP_THIN_F_CFG)
        enc_config(&e, &m->cfg);
    if (f & CRP_THIN_F_FLAGS)
        crp_mp_enc_u64(&e, "f", m->flags);
    if (f & CRP_THIN_F_TEXT)
        crp_mp_enc_str(&e, "s", m->text, CRP_THIN_MAX_TEXT);
    if (f & CRP_THIN_F_ID)
        crp_mp_enc_u64(&e, "id", m->id);
    if (f & CRP_THIN_F_REGION) {
        crp_mp_enc_u64(&e, "a", m->addr);
        crp_mp_enc_u64(&e, "l", m->len);
        crp_mp_enc_u64(&e, "fo", m->file_offset);
    }
    if (f & CRP_THIN_F_NFD)
        crp_mp_enc_u64(&e, "nfd", m->n_fds);
    if (f & CRP_THIN_F_HELLO) {
        crp_mp_enc_u64(&e, "v", m->version);
        crp_mp_enc_u64(&e, "pid", m->pid);
        crp_mp_enc_u64(&e, "pool", m->pool_size);
        crp_mp_enc_u64(&e, "lb", m->buffer_size);
    }
    if (f & CRP_THIN_F_ATTACH) {
        crp_mp_enc_u64(&e, "sid", m->session);
        crp_mp_enc_bin(&e, "tok", m->token, CRP_THIN_TOKEN_SIZE);
    }
    if (f & CRP_THIN_F_MAC)
        crp_mp_enc_bin(&e, "mac", m->mac, CRP_THIN_MAC_SIZE);
    if (f & CRP_THIN_F_TENANT)
        crp_mp_enc_str(&e, "tn", m->tenant, CRP_THIN_MAX_TENANT);
    return crp_mp_enc_finish(&e);
}

static int dec_extents(dec *d, const msgpack_object *const *v, crp_thin_req *m)
{
    const msgpack_object_array *nx, *ex;
    void *p;
    int rc = crp_mp_get_array(&d->c, "nx", v[RQ_NX], CRP_THIN_MAX_KEYS, &nx);
    if (rc == 0 && nx->size != m->n_keys)
        rc = crp_mp_fail(MALFORMED, &d->c, "nx", "has %u entries for %zu keys", (unsigned)nx->size,
                         m->n_keys);
    if (rc == 0)
        rc = crp_mp_get_array(&d->c, "ex", v[RQ_EX], CRP_THIN_MAX_EXTENTS, &ex);
    if (rc == 0)
        rc = dec_array(d, "nx", nx->size, sizeof(uint32_t), &p);
    if (rc != 0)
        return rc;
    m->counts = p;
    for (uint32_t i = 0; i < nx->size; i++)
        if ((rc = crp_mp_get_u32(&d->c, "nx", &nx->ptr[i], &m->counts[i])) != 0)
            return rc;
    if ((rc = dec_array(d, "ex", ex->size, sizeof(crp_thin_ext), &p)) != 0)
        return rc;
    m->ext = p;
    m->n_ext = ex->size;
    for (uint32_t i = 0; i < ex->size; i++) {
        const msgpack_object *t = &ex->ptr[i];
        size_t mark = crp_mp_path_push(&d->c, "extent", i);
        uint64_t region = 0;
        if (t->type != MSGPACK_OBJECT_ARRAY || t->via.array.size != 3)
            rc = crp_mp_fail(MALFORMED, &d->c, "ex", "is not a [region, offset, length] triple");
        if (rc == 0)
            rc = crp_mp_get_uint(&d->c, "ex", &t->via.array.ptr[0], UINT32_MAX, &region);
        if (rc == 0)
            rc = crp_mp_get_u64(&d->c, "ex", &t->via.array.ptr[1], &m->ext[i].offset);
        if (rc == 0)
            rc = crp_mp_get_u64(&d->c, "ex", &t->via.array.ptr[2], &m->ext[i].len);
        m->ext[i].region = (uint32_t)region;
        crp_mp_path_pop(&d->c, mark);
        if (rc != 0)
            return rc;
    }
    const char *why = check_extents(m->n_keys, m->counts, m->n_ext, m->ext);
    if (why != NULL)
        return crp_mp_fail(MALFORMED, &d->c, "ex", "%s", why);
    return 0;
}

static int dec_req_fields(dec *d, const msgpack_object *const *v, uint32_t want, crp_thin_req *m)
{
    int rc = 0;
    if (want & CRP_THIN_F_KEYS)
        rc = dec_str_array(d, "ks", v[RQ_KS], CRP_THIN_MAX_KEYS, CRP_THIN_MAX_KEY, "key",
                           &m->n_keys, &m->keys);
    if (rc == 0 && (want & CRP_THIN_F_EXT))
        rc = dec_extents(d, v, m);
    if (rc == 0 && (want & CRP_THIN_F_OFFS)) {
        size_t n = 0;
        rc = dec_u64_array(d, "of", v[RQ_OF], CRP_THIN_MAX_EXTENTS, &n, &m->offsets);
        if (rc == 0 && n != m->n_ext)
            rc =
                crp_mp_fail(MALFORMED, &d->c, "of", "has %zu entries for %zu extents", n, m->n_ext);
    }
    if (rc == 0 && (want & CRP_THIN_F_VALS))
        rc = dec_u64_array(d, "vs", v[RQ_VS], CRP_THIN_MAX_EXTENTS, &m->n_vals, &m->vals);
    if (rc == 0 && (want & CRP_THIN_F_CFG))
        rc = dec_config(d, v[RQ_CFG], &m->cfg);
    if (rc == 0 && (want & CRP_THIN_F_FLAGS)) {
        rc = crp_mp_get_u32(&d->c, "f", v[RQ_F], &m->flags);
        if (rc == 0 && (m->flags & ~CRP_THIN_FLAGS_ALL))
            rc = crp_mp_fail(MALFORMED, &d->c, "f", "has unknown bits 0x%x",
                             m->flags & ~CRP_THIN_FLAGS_ALL);
    }
    if (rc == 0 && (want & CRP_THIN_F_TEXT))
        rc = get_str(d, "s", v[RQ_S], CRP_THIN_MAX_TEXT, &m->text);
    if (rc == 0 && (want & CRP_THIN_F_ID))
        rc = crp_mp_get_u64(&d->c, "id", v[RQ_ID], &m->id);
    if (rc == 0 && (want & CRP_THIN_F_REGION)) {
        if ((rc = crp_mp_get_u64(&d->c, "a", v[RQ_A], &m->addr)) == 0 &&
            (rc = crp_mp_get_u64(&d->c, "l", v[RQ_L], &m->len)) == 0 &&
            (rc = crp_mp_get_u64(&d->c, "fo", v[RQ_FO], &m->file_offset)) == 0 &&
            (m->len == 0 || m->addr > UINT64_MAX - m->len))
            rc = crp_mp_fail(MALFORMED, &d->c, "l", "is 0 or address + length overflows");
    }
    if (rc == 0 && (want & CRP_THIN_F_NFD)) {
        uint64_t n = 0;
        rc = crp_mp_get_uint(&d->c, "nfd", v[RQ_NFD], CRP_THIN_MAX_FDS, &n);
        m->n_fds = (uint32_t)n;
    }
    if (rc == 0 && (want & CRP_THIN_F_HELLO)) {
        if ((rc = crp_mp_get_u32(&d->c, "v", v[RQ_V], &m->version)) == 0 &&
            (rc = crp_mp_get_u64(&d->c, "pid", v[RQ_PID], &m->pid)) == 0 &&
            (rc = crp_mp_get_u64(&d->c, "pool", v[RQ_POOL], &m->pool_size)) == 0)
            rc = crp_mp_get_u64(&d->c, "lb", v[RQ_LB], &m->buffer_size);
    }
    if (rc == 0 && (want & CRP_THIN_F_ATTACH)) {
        if ((rc = crp_mp_get_u64(&d->c, "sid", v[RQ_SID], &m->session)) == 0)
            rc = get_bin(&d->c, "tok", v[RQ_TOK], m->token, CRP_THIN_TOKEN_SIZE);
    }
    if (rc == 0 && (want & CRP_THIN_F_MAC))
        rc = get_bin(&d->c, "mac", v[RQ_MAC], m->mac, CRP_THIN_MAC_SIZE);
    if (rc == 0 && (want & CRP_THIN_F_TENANT))
        rc = get_str(d, "tn", v[RQ_TN], CRP_THIN_MAX_TENANT, &m->tenant);
    return rc;
}

/* Which of the optional fields are there: a group counts when its first key is. */
static uint32_t present_optional(const msgpack_object *const *v, uint32_t optional)
{
    static const struct {
        uint32_t bit;
        int key;
    } first[] = {
        {CRP_THIN_F_KEYS, RQ_KS}, {CRP_THIN_F_EXT, RQ_NX},    {CRP_THIN_F_OFFS, RQ_OF},
        {CRP_THIN_F_VALS, RQ_VS}, {CRP_THIN_F_CFG, RQ_CFG},   {CRP_THIN_F_FLAGS, RQ_F},
        {CRP_THIN_F_TEXT, RQ_S},  {CRP_THIN_F_ID, RQ_ID},     {CRP_THIN_F_REGION, RQ_A},
        {CRP_THIN_F_NFD, RQ_NFD}, {CRP_THIN_F_HELLO, RQ_V},   {CRP_THIN_F_ATTACH, RQ_SID},
        {CRP_THIN_F_MAC, RQ_MAC}, {CRP_THIN_F_TENANT, RQ_TN},
    };
    uint32_t got = 0;
    for (size_t i = 0; i < N_KEYS(first); i++)
        if ((optional & first[i].bit) && v[first[i].key] != NULL)
            got |= first[i].bit;
    return got;
}

static int read_op(const crp_mp_ctx *c, const msgpack_object *body, const op_info **out)
{
    static const char *const keys[] = {"op"};
    const msgpack_object *v[1];
    uint64_t op;
    int rc = crp_mp_map_fields(c, NULL, body, keys, 1, v);
    if (rc == 0)
        rc = crp_mp_get_uint(c, "op", v[0], UINT16_MAX, &op);
    if (rc != 0)
        return rc;
    const op_info *o = op_find((int)op);
    if (o == NULL)
        return crp_mp_fail(CR_NOT_SUPPORTED, c, "op", "is an unknown opcode (%u)", (unsigned)op);
    *out = o;
    return 0;
}

int crp_thin_req_decode(const void *data, size_t len, crp_thin_req *out)
{
    const msgpack_object *v[RQ_COUNT];
    msgpack_unpacked u;
    const op_info *o = NULL;
    crp_thin_req m;
    dec d = {.arena = NULL, .first_chunk = len < SIZE_MAX / 4 ? 2 * len + 256 : len};
    ctx_init(&d.c, "request", 0);
    int rc = crp_mp_unpack(&d.c, data, len, CRP_MAX_BODY, &u);
    if (rc != 0)
        return rc;
    rc = read_op(&d.c, &u.data, &o);
    if (rc != 0)
        goto destroy_unpacked;
    ctx_init(&d.c, "request", o->op);
    memset(&m, 0, sizeof(m));
    m.op = o->op;
    rc = crp_mp_map_fields(&d.c, NULL, &u.data, RQ_KEYS, RQ_COUNT, v);
    if (rc == 0) {
        m.fields = o->required | present_optional(v, o->optional);
        rc = dec_req_fields(&d, v, m.fields, &m);
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

void crp_thin_req_clear(crp_thin_req *m)
{
    arena_free(m->arena);
    memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------------------ */
/* Replies                                                                  */
/* ------------------------------------------------------------------------ */

enum {
    RS_OP,
    RS_ST,
    RS_MSG,
    RS_R,
    RS_VS,
    RS_N,
    RS_NAMES,
    RS_REPS,
    RS_SID,
    RS_TOK,
    RS_CAPS,
    RS_SEG,
    RS_V,
    RS_NON,
    RS_AUTH,
    RS_TN,
    RS_COUNT
};
static const char *const RS_KEYS[RS_COUNT] = {"op",    "st",   "msg",  "r",   "vs",   "n",
                                              "names", "reps", "sid",  "tok", "caps", "seg",
                                              "v",     "non",  "auth", "tn"};

static size_t resp_entries(const crp_thin_resp *m, uint32_t f)
{
    size_t n = 2 + (m->message != NULL ? 1 : 0);
    n += (f & CRP_THIN_R_RESULTS) ? 1 : 0;
    n += (f & CRP_THIN_R_VALS) ? 1 : 0;
    n += (f & CRP_THIN_R_VALUE) ? 1 : 0;
    n += (f & CRP_THIN_R_NAMES) ? 1 : 0;
    n += (f & CRP_THIN_R_REPS) ? 1 : 0;
    n += (f & CRP_THIN_R_SESSION) ? 4 : 0;
    n += (f & CRP_THIN_R_CHALLENGE) ? 3 : 0;
    n += (f & CRP_THIN_R_TENANT) ? 1 : 0;
    return n;
}

int crp_thin_resp_encode(const crp_thin_resp *m, crp_buf *out)
{
    crp_mp_enc e;
    const op_info *o = op_find(m->op);
    crp_mp_enc_init(&e, out, "", CRP_MAX_BODY);
    ctx_init(&e.c, "reply", o ? m->op : 0);
    if (o == NULL) {
        crp_mp_enc_invalid(&e, "op", "is an unknown opcode (%u)", (unsigned)m->op);
        return crp_mp_enc_finish(&e);
    }
    uint32_t f = m->fields;
    if (m->status > 0)
        crp_mp_enc_invalid(&e, "st", "is a positive status (%d)", (int)m->status);
    if (f & ~o->reply)
        crp_mp_enc_invalid(&e, NULL, "has fields the op's reply does not use (0x%x)",
                           f & ~o->reply);
    if ((f & CRP_THIN_R_RESULTS) &&
        (m->n_results > CRP_THIN_MAX_KEYS || (m->n_results > 0 && m->results == NULL)))
        crp_mp_enc_invalid(&e, "r", "has %zu results (at most %d)", m->n_results,
                           CRP_THIN_MAX_KEYS);
    if ((f & CRP_THIN_R_VALS) &&
        (m->n_vals > CRP_THIN_MAX_EXTENTS || (m->n_vals > 0 && m->vals == NULL)))
        crp_mp_enc_invalid(&e, "vs", "has %zu values (at most %d)", m->n_vals,
                           CRP_THIN_MAX_EXTENTS);
    if ((f & CRP_THIN_R_NAMES) &&
        (m->n_names > CRP_THIN_MAX_NAMES || (m->n_names > 0 && m->names == NULL)))
        crp_mp_enc_invalid(&e, "names", "has %zu names (at most %d)", m->n_names,
                           CRP_THIN_MAX_NAMES);
    if ((f & CRP_THIN_R_REPS) &&
        (m->n_reps > CRP_THIN_MAX_REPLICAS || (m->n_reps > 0 && m->reps == NULL)))
        crp_mp_enc_invalid(&e, "reps", "has %zu replicas (at most %d)", m->n_reps,
                           CRP_THIN_MAX_REPLICAS);
    if (e.status != 0)
        return crp_mp_enc_finish(&e);

    size_t msg_len = 0;
    if (m->message != NULL) {
        msg_len = strnlen(m->message, CRP_THIN_MAX_MSG + 1);
        if (msg_len > CRP_THIN_MAX_MSG) {
            msg_len = CRP_THIN_MAX_MSG;
            while (msg_len > 0 && ((uint8_t)m->message[msg_len] & 0xC0) == 0x80)
                msg_len--;
        }
    }
    msgpack_pack_map(&e.pk, resp_entries(m, f));
    crp_mp_enc_u64(&e, "op", m->op);
    crp_mp_enc_i32(&e, "st", m->status);
    if (m->message != NULL) {
        crp_mp_enc_key(&e, "msg");
        msgpack_pack_str_with_body(&e.pk, m->message, msg_len);
    }
    if (f & CRP_THIN_R_RESULTS) {
        crp_mp_enc_key(&e, "r");
        msgpack_pack_array(&e.pk, m->n_results);
        for (size_t i = 0; i < m->n_results; i++)
            msgpack_pack_int64(&e.pk, m->results[i]);
    }
    if (f & CRP_THIN_R_VALS) {
        crp_mp_enc_key(&e, "vs");
        msgpack_pack_array(&e.pk, m->n_vals);
        for (size_t i = 0; i < m->n_vals; i++)
            msgpack_pack_uint64(&e.pk, m->vals[i]);
    }
    if (f & CRP_THIN_R_VALUE) {
        crp_mp_enc_key(&e, "n");
        msgpack_pack_int64(&e.pk, m->value);
    }
    if (f & CRP_THIN_R_NAMES) {
        crp_mp_enc_key(&e, "names");
        msgpack_pack_array(&e.pk, m->n_names);
        for (size_t i = 0; i < m->n_names && e.status == 0; i++)
            crp_mp_enc_str_value(&e, "names", m->names[i], CRP_MAX_NAME);
    }
    if (f & CRP_THIN_R_REPS) {
        crp_mp_enc_key(&e, "reps");
        msgpack_pack_array(&e.pk, m->n_reps);
        for (size_t i = 0; i < m->n_reps && e.status == 0; i++) {
            const crp_thin_replica *r = &m->reps[i];
            if (r->addr > UINT64_MAX - r->size) {
                crp_mp_enc_invalid(&e, "reps", "replica %zu: range overflows", i);
                break;
            }
            msgpack_pack_map(&e.pk, 4);
            crp_mp_enc_str(&e, "s", r->segment, CRP_MAX_NAME);
            crp_mp_enc_u64(&e, "a", r->addr);
            crp_mp_enc_u64(&e, "l", r->size);
            crp_mp_enc_bool(&e, "c", r->complete);
        }
    }
    if (f & CRP_THIN_R_SESSION) {
        crp_mp_enc_u64(&e, "sid", m->session);
        crp_mp_enc_bin(&e, "tok", m->token, CRP_THIN_TOKEN_SIZE);
        crp_mp_enc_u64(&e, "caps", m->caps);
        crp_mp_enc_str(&e, "seg", m->segment, CRP_MAX_NAME);
    }
    if (f & CRP_THIN_R_CHALLENGE) {
        crp_mp_enc_u64(&e, "v", m->version);
        crp_mp_enc_bin(&e, "non", m->nonce, CRP_THIN_NONCE_SIZE);
        crp_mp_enc_bool(&e, "auth", m->auth);
    }
    if (f & CRP_THIN_R_TENANT)
        crp_mp_enc_str(&e, "tn", m->tenant, CRP_THIN_MAX_TENANT);
    return crp_mp_enc_finish(&e);
}

static int dec_results(dec *d, const msgpack_object *v, crp_thin_resp *m)
{
    const msgpack_object_array *a;
    void *p;
    int rc = crp_mp_get_array(&d->c, "r", v, CRP_THIN_MAX_KEYS, &a);
    if (rc == 0)
        rc = dec_array(d, "r", a->size, sizeof(int64_t), &p);
    if (rc != 0)
        return rc;
    m->results = p;
    m->n_results = a->size;
    for (uint32_t i = 0; i < a->size && rc == 0; i++)
        rc = get_i64(&d->c, "r", &a->ptr[i], &m->results[i]);
    return rc;
}

static int dec_reps(dec *d, const msgpack_object *v, crp_thin_resp *m)
{
    static const char *const keys[] = {"s", "a", "l", "c"};
    const msgpack_object *f[N_KEYS(keys)];
    const msgpack_object_array *a;
    void *p;
    int rc = crp_mp_get_array(&d->c, "reps", v, CRP_THIN_MAX_REPLICAS, &a);
    if (rc == 0)
        rc = dec_array(d, "reps", a->size, sizeof(crp_thin_replica), &p);
    if (rc != 0)
        return rc;
    m->reps = p;
    m->n_reps = a->size;
    for (uint32_t i = 0; i < a->size && rc == 0; i++) {
        crp_thin_replica *r = &m->reps[i];
        size_t mark = crp_mp_path_push(&d->c, "replica", i);
        if ((rc = crp_mp_map_fields(&d->c, NULL, &a->ptr[i], keys, N_KEYS(keys), f)) == 0 &&
            (rc = get_str(d, "s", f[0], CRP_MAX_NAME, &r->segment)) == 0 &&
            (rc = crp_mp_get_u64(&d->c, "a", f[1], &r->addr)) == 0 &&
            (rc = crp_mp_get_u64(&d->c, "l", f[2], &r->size)) == 0 &&
            (rc = crp_mp_get_bool(&d->c, "c", f[3], &r->complete)) == 0 &&
            r->addr > UINT64_MAX - r->size)
            rc = crp_mp_fail(MALFORMED, &d->c, NULL, "range overflows");
        crp_mp_path_pop(&d->c, mark);
    }
    return rc;
}

int crp_thin_resp_decode(const void *data, size_t len, crp_thin_resp *out)
{
    const msgpack_object *v[RS_COUNT];
    msgpack_unpacked u;
    const op_info *o = NULL;
    crp_thin_resp m;
    dec d = {.arena = NULL, .first_chunk = len < SIZE_MAX / 4 ? 2 * len + 256 : len};
    ctx_init(&d.c, "reply", 0);
    int rc = crp_mp_unpack(&d.c, data, len, CRP_MAX_BODY, &u);
    if (rc != 0)
        return rc;
    rc = read_op(&d.c, &u.data, &o);
    if (rc != 0)
        goto destroy_unpacked;
    ctx_init(&d.c, "reply", o->op);
    memset(&m, 0, sizeof(m));
    m.op = o->op;
    rc = crp_mp_map_fields(&d.c, NULL, &u.data, RS_KEYS, RS_COUNT, v);
    if (rc == 0) {
        rc = crp_mp_get_i32(&d.c, "st", v[RS_ST], &m.status);
        if (rc == 0 && m.status > 0)
            rc = crp_mp_fail(MALFORMED, &d.c, "st", "is a positive status (%d)", (int)m.status);
    }
    if (rc == 0 && v[RS_MSG] != NULL)
        rc = get_str(&d, "msg", v[RS_MSG], CRP_THIN_MAX_MSG, &m.message);
    uint32_t allowed = o->reply;
    if (rc == 0 && (allowed & CRP_THIN_R_RESULTS) && v[RS_R] != NULL) {
        m.fields |= CRP_THIN_R_RESULTS;
        rc = dec_results(&d, v[RS_R], &m);
    }
    if (rc == 0 && (allowed & CRP_THIN_R_VALS) && v[RS_VS] != NULL) {
        m.fields |= CRP_THIN_R_VALS;
        rc = dec_u64_array(&d, "vs", v[RS_VS], CRP_THIN_MAX_EXTENTS, &m.n_vals, &m.vals);
    }
    if (rc == 0 && (allowed & CRP_THIN_R_VALUE) && v[RS_N] != NULL) {
        m.fields |= CRP_THIN_R_VALUE;
        rc = get_i64(&d.c, "n", v[RS_N], &m.value);
    }
    if (rc == 0 && (allowed & CRP_THIN_R_NAMES) && v[RS_NAMES] != NULL) {
        m.fields |= CRP_THIN_R_NAMES;
        rc = dec_str_array(&d, "names", v[RS_NAMES], CRP_THIN_MAX_NAMES, CRP_MAX_NAME, "name",
                           &m.n_names, &m.names);
    }
    if (rc == 0 && (allowed & CRP_THIN_R_REPS) && v[RS_REPS] != NULL) {
        m.fields |= CRP_THIN_R_REPS;
        rc = dec_reps(&d, v[RS_REPS], &m);
    }
    if (rc == 0 && (allowed & CRP_THIN_R_SESSION) && v[RS_SID] != NULL) {
        m.fields |= CRP_THIN_R_SESSION;
        if ((rc = crp_mp_get_u64(&d.c, "sid", v[RS_SID], &m.session)) == 0 &&
            (rc = get_bin(&d.c, "tok", v[RS_TOK], m.token, CRP_THIN_TOKEN_SIZE)) == 0 &&
            (rc = crp_mp_get_u64(&d.c, "caps", v[RS_CAPS], &m.caps)) == 0)
            rc = get_str(&d, "seg", v[RS_SEG], CRP_MAX_NAME, &m.segment);
    }
    if (rc == 0 && (allowed & CRP_THIN_R_CHALLENGE) && v[RS_V] != NULL) {
        m.fields |= CRP_THIN_R_CHALLENGE;
        if ((rc = crp_mp_get_u32(&d.c, "v", v[RS_V], &m.version)) == 0 &&
            (rc = get_bin(&d.c, "non", v[RS_NON], m.nonce, CRP_THIN_NONCE_SIZE)) == 0)
            rc = crp_mp_get_bool(&d.c, "auth", v[RS_AUTH], &m.auth);
    }
    if (rc == 0 && (allowed & CRP_THIN_R_TENANT) && v[RS_TN] != NULL) {
        m.fields |= CRP_THIN_R_TENANT;
        rc = get_str(&d, "tn", v[RS_TN], CRP_THIN_MAX_TENANT, &m.tenant);
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

void crp_thin_resp_clear(crp_thin_resp *m)
{
    arena_free(m->arena);
    memset(m, 0, sizeof(*m));
}
