/*
 * thin_ops.c - the store operations of a thin client (cr_store in thin
 * mode): each public cr_store_* call turns into one or a few requests to
 * crescent-client, which runs the same call on its embedded store.
 *
 * Memory. Every buffer a call names is translated into extents of memory
 * the daemon maps (thin_mem.c): pool and shared regions are named in
 * place; bytes of copying calls and of slow-path regions are copied once
 * into a pool extent taken for the call (the embedded client copies them
 * once into its staging buffer). Copying gets are answered with where the
 * daemon placed each value in our local buffer; we copy it out (under the
 * copy lock, so a new session cannot overwrite it meanwhile) and release the
 * space with a one-way RELEASE on the same connection. A value larger than
 * what the pool or the local buffer can hold goes through a transient memfd
 * passed with the request.
 *
 * Batches. A batch is cut into requests of at most CRC_THIN_BATCH_KEYS keys,
 * CRC_THIN_KEY_BYTES of keys and CRC_THIN_BATCH_EXT extents (each request
 * stays inside one frame body), run in order, so the result per key is what
 * the embedded call gives; a request is also sent early when the pool has no
 * room for the next key's copy, which frees its staging for what follows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "store/internal.h"
#include "store/thin.h"

int crc_thin_check(cr_store *s)
{
    if (s == NULL)
        return crb_error(CR_INVALID_PARAMS, "store handle is NULL");
    if (atomic_load(&s->thin->closed))
        return crb_error(CR_UNAVAILABLE_IN_CURRENT_STATUS, "store is closed");
    return 0;
}

/* A reply that must carry one result per key. */
static int check_results(const crp_thin_resp *r, size_t n)
{
    if ((r->fields & CRP_THIN_R_RESULTS) && r->n_results == n)
        return 0;
    if (r->status < 0) /* refused as a whole (e.g. a request it could not decode) */
        return crb_error(r->status, "crescent-client: %s",
                         r->message ? r->message : cr_strerror(r->status));
    return crb_error(CR_ERR_MALFORMED_FRAME,
                     "crescent-client answered %s with %zu results for %zu "
                     "keys",
                     crp_thin_op_name(r->op), r->n_results, n);
}

/* Status of a one-key reply: the call's failure, else the key's result. */
static int64_t single_result(int rc, crp_thin_resp *resp)
{
    if (rc < 0)
        return rc;
    int64_t out = check_results(resp, 1);
    if (out == 0)
        out = resp->results[0];
    if (out < 0 && resp->message != NULL)
        crb_error((int)out, "%s", resp->message);
    else if (out < 0)
        crb_error((int)out, "%s", cr_strerror((int)out));
    crp_thin_resp_clear(resp);
    return out;
}

/* ====================================================================== */
/* Puts                                                                   */
/* ====================================================================== */

typedef struct put_batch {
    crc_thin *t;
    uint64_t gen; /* the session the extents were translated for */
    bool upsert, single, copying;
    const cr_replicate_config *cfg;
    int *results;      /* the caller's, by index */
    int first_failure; /* a request that failed as a whole */
    size_t n_keys, n_ext, key_bytes;
    size_t cap_keys, cap_ext; /* sized for the call: a single put allocates little */
    const char **keys;
    size_t *index;
    uint32_t *counts;
    crb_oa_allocation *stage;
    bool *staged;
    crp_thin_ext *ext;
} put_batch;

static void stage_free_all(crc_thin *t, crb_oa_allocation *stage, bool *staged, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (staged[i]) {
            crc_thin_pool_give(t, &stage[i]);
            staged[i] = false;
        }
}

static void put_flush(put_batch *b)
{
    if (b->n_keys == 0)
        return;
    crc_thin *t = b->t;
    crp_thin_req req = {.op = CRP_THIN_PUT,
                        .fields = CRP_THIN_F_KEYS | CRP_THIN_F_EXT | CRP_THIN_F_FLAGS,
                        .flags = (b->upsert ? CRP_THIN_FLAG_UPSERT : 0) |
                                 (b->single ? CRP_THIN_FLAG_SINGLE : 0),
                        .n_keys = b->n_keys,
                        .keys = (char **)b->keys,
                        .counts = b->counts,
                        .n_ext = b->n_ext,
                        .ext = b->ext};
    if (b->cfg != NULL) {
        req.fields |= CRP_THIN_F_CFG;
        crc_config_to_wire(b->cfg, &req.cfg);
    }
    crp_thin_resp resp;
    int rc = crc_thin_call(t, &req, NULL, 0, &resp, b->gen, NULL);
    if (rc == 0) {
        rc = check_results(&resp, b->n_keys);
        if (rc == 0) {
            for (size_t i = 0; i < b->n_keys; i++)
                b->results[b->index[i]] = (int)resp.results[i];
            if (resp.status < 0 && b->first_failure == 0)
                b->first_failure = crb_error(
                    resp.status, "%s", resp.message ? resp.message : cr_strerror(resp.status));
            if (b->single && resp.results[0] < 0)
                crb_error((int)resp.results[0], "%s",
                          resp.message ? resp.message : cr_strerror((int)resp.results[0]));
        }
        crp_thin_resp_clear(&resp);
    }
    if (rc < 0) {
        for (size_t i = 0; i < b->n_keys; i++)
            b->results[b->index[i]] = rc;
        if (b->first_failure == 0)
            b->first_failure = rc;
    }
    stage_free_all(t, b->stage, b->staged, b->n_keys);
    b->n_keys = b->n_ext = b->key_bytes = 0;
}

/* One key whose value cannot be staged in the pool: copied whole into a
 * transient memfd that the daemon maps for the call. */
static int put_transient(crc_thin *t, const char *key, const void *const *parts,
                         const size_t *sizes, size_t n, uint64_t total, bool upsert, bool single,
                         const cr_replicate_config *cfg)
{
    crc_transient tr;
    int rc = crc_transient_create(total, &tr);
    if (rc < 0)
        return rc;
    for (size_t i = 0, off = 0; i < n; off += sizes[i], i++)
        if (sizes[i] > 0)
            memcpy(tr.p + off, parts[i], sizes[i]);
    crp_thin_req req = {
        .op = CRP_THIN_PUT_TRANSIENT,
        .fields = CRP_THIN_F_KEYS | CRP_THIN_F_REGION | CRP_THIN_F_FLAGS | CRP_THIN_F_NFD,
        .flags = (upsert ? CRP_THIN_FLAG_UPSERT : 0) | (single ? CRP_THIN_FLAG_SINGLE : 0),
        .n_keys = 1,
        .keys = (char **)&key,
        .addr = (uint64_t)(uintptr_t)tr.p,
        .len = total,
        .n_fds = 1};
    if (cfg != NULL) {
        req.fields |= CRP_THIN_F_CFG;
        crc_config_to_wire(cfg, &req.cfg);
    }
    crp_thin_resp resp;
    rc = crc_thin_call(t, &req, &tr.fd, 1, &resp, 0, NULL);
    crc_transient_destroy(&tr);
    atomic_fetch_add(&t->transient_calls, 1);
    return (int)single_result(rc, &resp);
}

/* Add key `index` (its value: n parts) to the batch; may send the batch so
 * far first. Sets results[index] for keys it refuses or puts on their own. */
static void put_add(put_batch *b, size_t index, const char *key, const void *const *parts,
                    const size_t *sizes, size_t n)
{
    crc_thin *t = b->t;
    int rc = crc_check_key(key);
    if (rc == 0 && n > 0 && (parts == NULL || sizes == NULL))
        rc = crb_error(CR_INVALID_PARAMS, "put '%s': NULL part arrays", key);
    if (rc == 0 && n > CRC_THIN_BATCH_EXT)
        rc = crb_error(CR_INVALID_PARAMS, "put '%s': %zu parts (at most %d)", key, n,
                       CRC_THIN_BATCH_EXT);
    crp_thin_ext *ext = NULL;
    crc_reach *how = NULL;
    if (rc == 0 && n > 0) {
        ext = calloc(n, sizeof(*ext));
        how = calloc(n, sizeof(*how));
        if (ext == NULL || how == NULL)
            rc = crb_error(CR_ERR_NO_MEMORY, "put '%s': %zu parts", key, n);
    }
    uint64_t total = 0, copy = 0;
    for (size_t k = 0; rc == 0 && k < n; k++) {
        if (parts[k] == NULL && sizes[k] > 0)
            rc = crb_error(CR_INVALID_PARAMS, "put '%s': part %zu is NULL", key, k);
        else if (b->copying || sizes[k] == 0)
            how[k] = b->copying ? CRC_REACH_SLOW : CRC_REACH_DIRECT;
        else
            rc = crc_thin_translate(t, parts[k], sizes[k], &ext[k], &how[k]);
        total += sizes[k];
        if (how[k] == CRC_REACH_SLOW)
            copy += sizes[k];
    }
    if (rc < 0) {
        b->results[index] = rc;
        goto out_free;
    }
    size_t kl = strlen(key);
    if (b->n_keys == b->cap_keys || b->n_ext + n > b->cap_ext ||
        (b->n_keys > 0 && b->key_bytes + kl > CRC_THIN_KEY_BYTES))
        put_flush(b);
    crb_oa_allocation st = {0};
    bool staged = false;
    if (copy > 0) {
        rc = crc_thin_pool_take(t, copy, false, &st);
        if (rc < 0 && b->n_keys > 0) {
            put_flush(b); /* its staging comes back */
            rc = crc_thin_pool_take(t, copy, true, &st);
        } else if (rc < 0) {
            rc = crc_thin_pool_take(t, copy, true, &st);
        }
        if (rc < 0) {
            put_flush(b);
            b->results[index] =
                put_transient(t, key, parts, sizes, n, total, b->upsert, b->single, b->cfg);
            goto out_free;
        }
        staged = true;
    }
    size_t j = b->n_keys;
    uint64_t at = 0;
    for (size_t k = 0; k < n; k++) {
        if (how[k] == CRC_REACH_SLOW) {
            if (sizes[k] > 0)
                memcpy(t->pool + st.offset + at, parts[k], sizes[k]);
            ext[k] = (crp_thin_ext){CRP_THIN_REGION_POOL, st.offset + at, sizes[k]};
            at += sizes[k];
        }
        b->ext[b->n_ext++] = ext[k];
    }
    if (b->copying) {
        atomic_fetch_add(&t->copied_bytes, total);
    } else {
        atomic_fetch_add(&t->zero_copy_bytes, total - copy);
        if (copy > 0) {
            atomic_fetch_add(&t->slow_calls, 1);
            atomic_fetch_add(&t->slow_bytes, copy);
        }
    }
    b->keys[j] = key;
    b->index[j] = index;
    b->counts[j] = (uint32_t)n;
    b->stage[j] = st;
    b->staged[j] = staged;
    b->key_bytes += kl;
    b->n_keys++;
out_free:
    free(ext);
    free(how);
}

/* A put batch for n keys with parts parts in all (one allocation). */
static int put_batch_new(crc_thin *t, bool zero_copy, bool upsert, bool single,
                         const cr_replicate_config *cfg, int *results, size_t n, size_t parts,
                         put_batch **out)
{
    size_t ck = n < CRC_THIN_BATCH_KEYS ? (n ? n : 1) : CRC_THIN_BATCH_KEYS;
    size_t ce = parts < CRC_THIN_BATCH_EXT ? (parts ? parts : 1) : CRC_THIN_BATCH_EXT;
    size_t bytes =
        sizeof(put_batch) + ce * sizeof(crp_thin_ext) +
        ck * (sizeof(crb_oa_allocation) + 2 * sizeof(void *) + sizeof(uint32_t) + sizeof(bool));
    put_batch *b = malloc(bytes);
    if (b == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "thin put batch");
    uint64_t gen = 0;
    int rc = crc_thin_ensure(t, &gen);
    if (rc < 0) {
        free(b);
        return rc;
    }
    *b = (put_batch){.t = t,
                     .gen = gen,
                     .upsert = upsert,
                     .single = single,
                     .copying = !zero_copy,
                     .cfg = cfg,
                     .results = results,
                     .cap_keys = ck,
                     .cap_ext = ce};
    uint8_t *p = (uint8_t *)(b + 1);
    b->ext = (crp_thin_ext *)p;
    p += ce * sizeof(crp_thin_ext);
    b->stage = (crb_oa_allocation *)p;
    p += ck * sizeof(crb_oa_allocation);
    b->keys = (const char **)p;
    p += ck * sizeof(void *);
    b->index = (size_t *)p;
    p += ck * sizeof(size_t);
    b->counts = (uint32_t *)p;
    p += ck * sizeof(uint32_t);
    b->staged = (bool *)p;
    memset(b->staged, 0, ck * sizeof(bool));
    *out = b;
    return 0;
}

int crc_thin_put(cr_store *s, const char *key, const void *const *parts, const size_t *sizes,
                 size_t n, bool zero_copy, bool upsert, const cr_replicate_config *cfg)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    int result = 0;
    if (crc_check_key(key) == 0 && (n == 0 || (parts != NULL && sizes != NULL))) {
        bool done = false; /* straight into the daemon's segment (thin_direct_put.c) */
        const void *const *pl[1] = {parts};
        const size_t *sl[1] = {sizes};
        crc_thin_direct_put(s->thin, &key, 1, pl, sl, &n, zero_copy, upsert, cfg, &result, &done);
        if (done)
            return result;
    }
    put_batch *b;
    rc = put_batch_new(s->thin, zero_copy, upsert, true, cfg, &result, 1, n, &b);
    if (rc < 0)
        return rc;
    put_add(b, 0, key, parts, sizes, n);
    put_flush(b);
    free(b);
    return result;
}

int crc_thin_batch_put(cr_store *s, const char *const *keys, const void *const *const *parts,
                       const size_t *const *sizes, const size_t *counts, size_t n, bool zero_copy,
                       bool upsert, const cr_replicate_config *cfg, int *results)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || parts == NULL || sizes == NULL || counts == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch put: NULL array");
    /* Straight into the daemon's segment (thin_direct_put.c) what can go. */
    bool *done = n <= CRC_BATCH_KEYS ? calloc(n, sizeof(*done)) : NULL;
    if (done != NULL)
        crc_thin_direct_put(s->thin, keys, n, parts, sizes, counts, zero_copy, upsert, cfg, results,
                            done);
    size_t total = 0, left = 0;
    for (size_t i = 0; i < n; i++) {
        bool d = done != NULL && done[i];
        total += d ? 0 : counts[i];
        left += !d;
    }
    if (left == 0) {
        free(done);
        return 0;
    }
    put_batch *b;
    rc = put_batch_new(s->thin, zero_copy, upsert, false, cfg, results, left, total, &b);
    if (rc < 0) {
        free(done);
        return rc;
    }
    for (size_t i = 0; i < n; i++)
        if (done == NULL || !done[i])
            put_add(b, i, keys[i], parts[i], sizes[i], counts[i]);
    put_flush(b);
    rc = zero_copy ? b->first_failure : 0;
    free(b);
    free(done);
    return rc;
}

/* ====================================================================== */
/* Zero-copy gets                                                         */
/* ====================================================================== */

typedef struct get_key {
    void *const *bufs;
    const size_t *sizes;
    size_t n;
    crb_oa_allocation stage;
    bool staged;
    uint64_t *stage_at; /* per part: its place in the stage, UINT64_MAX if direct */
} get_key;

typedef struct get_batch {
    crc_thin *t;
    uint64_t gen; /* the session the extents were translated for */
    bool single;
    int64_t *results;
    int first_failure;
    size_t n_keys, n_ext, key_bytes;
    size_t cap_keys, cap_ext; /* sized for the call */
    const char **keys;
    size_t *index;
    uint32_t *counts;
    get_key *gk;
    crp_thin_ext *ext;
} get_batch;

/* Copy a slow-path key's value (got bytes) from its stage to its parts. */
static void scatter_out(crc_thin *t, const get_key *g, int64_t got)
{
    uint64_t off = 0;
    for (size_t k = 0; k < g->n && got > 0; k++) {
        uint64_t len = g->sizes[k];
        if (off >= (uint64_t)got)
            break;
        if (len > (uint64_t)got - off)
            len = (uint64_t)got - off;
        if (g->stage_at[k] != UINT64_MAX && len > 0)
            memcpy(g->bufs[k], t->pool + g->stage.offset + g->stage_at[k], len);
        off += g->sizes[k];
    }
}

static void get_flush(get_batch *b)
{
    if (b->n_keys == 0)
        return;
    crc_thin *t = b->t;
    crp_thin_req req = {.op = CRP_THIN_GET,
                        .fields = CRP_THIN_F_KEYS | CRP_THIN_F_EXT | CRP_THIN_F_FLAGS,
                        .flags = b->single ? CRP_THIN_FLAG_SINGLE : 0,
                        .n_keys = b->n_keys,
                        .keys = (char **)b->keys,
                        .counts = b->counts,
                        .n_ext = b->n_ext,
                        .ext = b->ext};
    crp_thin_resp resp;
    int rc = crc_thin_call(t, &req, NULL, 0, &resp, b->gen, NULL);
    if (rc == 0) {
        rc = check_results(&resp, b->n_keys);
        if (rc == 0) {
            for (size_t i = 0; i < b->n_keys; i++) {
                int64_t r = resp.results[i];
                b->results[b->index[i]] = r;
                if (r > 0 && b->gk[i].staged)
                    scatter_out(t, &b->gk[i], r);
            }
            if (resp.status < 0 && b->first_failure == 0)
                b->first_failure = crb_error(
                    resp.status, "%s", resp.message ? resp.message : cr_strerror(resp.status));
            if (b->single && resp.results[0] < 0)
                crb_error((int)resp.results[0], "%s",
                          resp.message ? resp.message : cr_strerror((int)resp.results[0]));
        }
        crp_thin_resp_clear(&resp);
    }
    if (rc < 0) {
        for (size_t i = 0; i < b->n_keys; i++)
            b->results[b->index[i]] = rc;
        if (b->first_failure == 0)
            b->first_failure = rc;
    }
    for (size_t i = 0; i < b->n_keys; i++) {
        if (b->gk[i].staged)
            crc_thin_pool_give(t, &b->gk[i].stage);
        free(b->gk[i].stage_at);
        b->gk[i] = (get_key){0};
    }
    b->n_keys = b->n_ext = b->key_bytes = 0;
}

/* A slow-path destination larger than the pool: read into a transient memfd. */
static int64_t get_transient(crc_thin *t, const char *key, void *const *bufs, const size_t *sizes,
                             size_t n, uint64_t cap)
{
    crc_transient tr;
    int rc = crc_transient_create(cap, &tr);
    if (rc < 0)
        return rc;
    crp_thin_req req = {.op = CRP_THIN_GET_TRANSIENT,
                        .fields = CRP_THIN_F_KEYS | CRP_THIN_F_REGION | CRP_THIN_F_NFD,
                        .n_keys = 1,
                        .keys = (char **)&key,
                        .addr = (uint64_t)(uintptr_t)tr.p,
                        .len = cap,
                        .n_fds = 1};
    crp_thin_resp resp;
    rc = crc_thin_call(t, &req, &tr.fd, 1, &resp, 0, NULL);
    int64_t got = single_result(rc, &resp);
    for (size_t k = 0, off = 0; got > 0 && k < n && off < (uint64_t)got; off += sizes[k], k++) {
        size_t len = sizes[k] < (uint64_t)got - off ? sizes[k] : (size_t)((uint64_t)got - off);
        if (bufs != NULL && len > 0)
            memcpy(bufs[k], tr.p + off, len);
    }
    crc_transient_destroy(&tr);
    atomic_fetch_add(&t->transient_calls, 1);
    return got;
}

static void get_add(get_batch *b, size_t index, const char *key, void *const *bufs,
                    const size_t *sizes, size_t n)
{
    crc_thin *t = b->t;
    int rc = crc_check_key(key);
    if (rc == 0 && n > 0 && (bufs == NULL || sizes == NULL))
        rc = crb_error(CR_INVALID_PARAMS, "get '%s': NULL buffer arrays", key);
    if (rc == 0 && n > CRC_THIN_BATCH_EXT)
        rc = crb_error(CR_INVALID_PARAMS, "get '%s': %zu buffers (at most %d)", key, n,
                       CRC_THIN_BATCH_EXT);
    get_key g = {bufs, sizes, n, {0}, false, NULL};
    crp_thin_ext *ext = NULL;
    if (rc == 0 && n > 0) {
        ext = calloc(n, sizeof(*ext));
        g.stage_at = calloc(n, sizeof(*g.stage_at));
        if (ext == NULL || g.stage_at == NULL)
            rc = crb_error(CR_ERR_NO_MEMORY, "get '%s': %zu buffers", key, n);
    }
    uint64_t slow = 0, cap = 0;
    for (size_t k = 0; rc == 0 && k < n; k++) {
        crc_reach how = CRC_REACH_DIRECT;
        g.stage_at[k] = UINT64_MAX;
        if (bufs[k] == NULL && sizes[k] > 0)
            rc = crb_error(CR_INVALID_PARAMS, "get '%s': buffer %zu is NULL", key, k);
        else if (sizes[k] > 0)
            rc = crc_thin_translate(t, bufs[k], sizes[k], &ext[k], &how);
        else
            ext[k] = (crp_thin_ext){CRP_THIN_REGION_POOL, 0, 0};
        if (rc == 0 && how == CRC_REACH_SLOW) {
            g.stage_at[k] = slow;
            slow += sizes[k];
        }
        cap += sizes[k];
    }
    if (rc < 0) {
        b->results[index] = rc;
        free(g.stage_at);
        free(ext);
        return;
    }
    size_t kl = strlen(key);
    if (b->n_keys == b->cap_keys || b->n_ext + n > b->cap_ext ||
        (b->n_keys > 0 && b->key_bytes + kl > CRC_THIN_KEY_BYTES))
        get_flush(b);
    if (slow > 0) {
        rc = crc_thin_pool_take(t, slow, false, &g.stage);
        if (rc < 0 && b->n_keys > 0)
            get_flush(b);
        if (rc < 0)
            rc = crc_thin_pool_take(t, slow, true, &g.stage);
        if (rc < 0) {
            get_flush(b);
            b->results[index] = get_transient(t, key, bufs, sizes, n, cap);
            free(g.stage_at);
            free(ext);
            return;
        }
        g.staged = true;
        for (size_t k = 0; k < n; k++)
            if (g.stage_at[k] != UINT64_MAX)
                ext[k] =
                    (crp_thin_ext){CRP_THIN_REGION_POOL, g.stage.offset + g.stage_at[k], sizes[k]};
        atomic_fetch_add(&t->slow_calls, 1);
        atomic_fetch_add(&t->slow_bytes, slow);
    }
    atomic_fetch_add(&t->zero_copy_bytes, cap - slow);
    size_t j = b->n_keys;
    for (size_t k = 0; k < n; k++)
        b->ext[b->n_ext++] = ext[k];
    free(ext);
    b->keys[j] = key;
    b->index[j] = index;
    b->counts[j] = (uint32_t)n;
    b->gk[j] = g;
    b->key_bytes += kl;
    b->n_keys++;
}

static int get_batch_new(crc_thin *t, bool single, int64_t *results, size_t n, size_t parts,
                         get_batch **out)
{
    size_t ck = n < CRC_THIN_BATCH_KEYS ? (n ? n : 1) : CRC_THIN_BATCH_KEYS;
    size_t ce = parts < CRC_THIN_BATCH_EXT ? (parts ? parts : 1) : CRC_THIN_BATCH_EXT;
    size_t bytes = sizeof(get_batch) + ce * sizeof(crp_thin_ext) +
                   ck * (sizeof(get_key) + 2 * sizeof(void *) + sizeof(uint32_t));
    get_batch *b = malloc(bytes);
    if (b == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "thin get batch");
    uint64_t gen = 0;
    int rc = crc_thin_ensure(t, &gen);
    if (rc < 0) {
        free(b);
        return rc;
    }
    *b = (get_batch){
        .t = t, .gen = gen, .single = single, .results = results, .cap_keys = ck, .cap_ext = ce};
    uint8_t *p = (uint8_t *)(b + 1);
    b->ext = (crp_thin_ext *)p;
    p += ce * sizeof(crp_thin_ext);
    b->gk = (get_key *)p;
    memset(b->gk, 0, ck * sizeof(get_key));
    p += ck * sizeof(get_key);
    b->keys = (const char **)p;
    p += ck * sizeof(void *);
    b->index = (size_t *)p;
    p += ck * sizeof(size_t);
    b->counts = (uint32_t *)p;
    *out = b;
    return 0;
}

/*
 * Direct reads of a batch (thin_direct.c) when every key is valid and the
 * batch fits one master call: which keys got their results (and values),
 * malloc'd, or NULL for none.
 */
static bool *direct_batch(crc_thin *t, const char *const *keys, size_t n, void *const *const *bufs,
                          const size_t *const *sizes, const size_t *counts, void **values_out,
                          int64_t *results)
{
    if (t->direct_off || n == 0 || n > CRC_BATCH_KEYS)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (crc_check_key(keys[i]) < 0)
            return NULL;
    bool *done = calloc(n, sizeof(*done));
    if (done == NULL)
        return NULL;
    crc_thin_direct_get(t, keys, n, bufs, sizes, counts, values_out, results, done);
    return done;
}

int64_t crc_thin_get_into(cr_store *s, const char *key, void *const *bufs, const size_t *sizes,
                          size_t n)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    int64_t result = 0;
    if (crc_check_key(key) == 0) {
        bool done = false;
        void *const *bl[1] = {bufs};
        const size_t *sl[1] = {sizes};
        crc_thin_direct_get(s->thin, &key, 1, bl, sl, &n, NULL, &result, &done);
        if (done)
            return result;
    }
    get_batch *b;
    rc = get_batch_new(s->thin, true, &result, 1, n, &b);
    if (rc < 0)
        return rc;
    get_add(b, 0, key, bufs, sizes, n);
    get_flush(b);
    free(b);
    return result;
}

int crc_thin_batch_get_into(cr_store *s, const char *const *keys, void *const *const *bufs,
                            const size_t *const *sizes, const size_t *counts, size_t n,
                            int64_t *results)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || bufs == NULL || sizes == NULL || counts == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch get: NULL array");
    bool *done = direct_batch(s->thin, keys, n, bufs, sizes, counts, NULL, results);
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += done != NULL && done[i] ? 0 : counts[i];
    get_batch *b;
    rc = get_batch_new(s->thin, false, results, n, total, &b);
    if (rc < 0) {
        free(done);
        return rc;
    }
    for (size_t i = 0; i < n; i++)
        if (done == NULL || !done[i])
            get_add(b, i, keys[i], bufs[i], sizes[i], counts[i]);
    get_flush(b);
    rc = b->first_failure;
    free(b);
    free(done);
    return rc;
}

/* ====================================================================== */
/* Copying gets                                                           */
/* ====================================================================== */

/* The daemon placed values in our local buffer: copy them out and release
 * the space. keys[0..m) with results and locations from resp. values[j] is
 * set for each success; results[j] may become an error (a lost session).
 * Returns the RELEASE's send status. */
static int copy_out(crc_thin *t, crc_thin_conn *c, const crp_thin_resp *resp, size_t m,
                    void **values, int64_t *results)
{
    uint64_t *rel = calloc(m ? m : 1, sizeof(*rel));
    size_t n_rel = 0;
    pthread_rwlock_rdlock(&t->copy_lock);
    bool same_session = c->gen == atomic_load(&t->gen);
    for (size_t j = 0; j < m; j++) {
        int64_t r = resp->results[j];
        uint64_t loc = j < resp->n_vals ? resp->vals[j] : 0;
        if (r < 0)
            continue;
        if (loc != 0 && rel != NULL)
            rel[n_rel++] = loc;
        if (r > 0 && (loc < t->pool_size || loc > t->map_size || (uint64_t)r > t->map_size - loc)) {
            results[j] = crb_error(CR_ERR_MALFORMED_FRAME,
                                   "crescent-client placed a %lld-byte value at %llu, outside "
                                   "the local buffer",
                                   (long long)r, (unsigned long long)loc);
            continue;
        }
        if (!same_session) {
            results[j] = crb_error(CR_ERR_DAEMON_LOST, "the session ended before the value was "
                                                       "copied out");
            continue;
        }
        void *v = malloc(r > 0 ? (size_t)r : 1);
        if (v == NULL) {
            results[j] = crb_error(CR_ERR_NO_MEMORY, "a value of %lld bytes", (long long)r);
            continue;
        }
        if (r > 0)
            memcpy(v, t->pool + loc, (size_t)r);
        values[j] = v;
        results[j] = r;
        atomic_fetch_add(&t->copied_bytes, (uint64_t)r);
    }
    pthread_rwlock_unlock(&t->copy_lock);
    int rc = 0;
    if (n_rel > 0 && same_session) {
        crp_thin_req rq = {
            .op = CRP_THIN_RELEASE, .fields = CRP_THIN_F_VALS, .n_vals = n_rel, .vals = rel};
        rc = crc_thin_conn_send(t, c, &rq);
    }
    free(rel);
    return rc;
}

/* One GET_COPY request for keys[0..m); results[j] / values[j]; sizes[j] set
 * for values that did not fit the local buffer (results[j] is then
 * CR_BUFFER_OVERFLOW). Returns 0 or a failure of the request as a whole. */
static int get_copy_round(crc_thin *t, const char *const *keys, size_t m, bool single,
                          void **values, int64_t *results, uint64_t *sizes)
{
    crp_thin_req req = {.op = CRP_THIN_GET_COPY,
                        .fields = CRP_THIN_F_KEYS | CRP_THIN_F_FLAGS,
                        .flags = single ? CRP_THIN_FLAG_SINGLE : 0,
                        .n_keys = m,
                        .keys = (char **)keys};
    for (int attempt = 0;; attempt++) {
        crc_thin_conn *c;
        int rc = crc_thin_conn_take(t, &c);
        if (rc < 0)
            return rc;
        crp_thin_resp resp;
        bool sent = false;
        rc = crc_thin_conn_call(t, c, &req, NULL, 0, &resp, &sent);
        if (rc < 0) {
            bool broken = crc_thin_breaks_conn(rc);
            crc_thin_conn_give(t, c, broken);
            if (broken && !sent && attempt == 0)
                continue; /* nothing reached the daemon: the new session */
            if (rc == CR_ERR_DAEMON_LOST)
                atomic_fetch_add(&t->lost, 1);
            return rc;
        }
        rc = check_results(&resp, m);
        if (rc == 0) {
            for (size_t j = 0; j < m; j++) {
                results[j] = resp.results[j];
                sizes[j] = results[j] == CR_BUFFER_OVERFLOW && j < resp.n_vals ? resp.vals[j] : 0;
            }
            if (single && resp.results[0] < 0)
                crb_error((int)resp.results[0], "%s",
                          resp.message ? resp.message : cr_strerror((int)resp.results[0]));
            rc = copy_out(t, c, &resp, m, values, results);
        }
        crp_thin_resp_clear(&resp);
        crc_thin_conn_give(t, c, rc < 0 && crc_thin_breaks_conn(rc));
        return rc < 0 && crc_thin_breaks_conn(rc) ? 0 : rc; /* values are out; results say */
    }
}

/* A value too large for the local buffer: through a transient memfd. */
static int64_t get_copy_transient(crc_thin *t, const char *key, uint64_t size, void **value_out)
{
    void *v = malloc(size ? size : 1);
    if (v == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "a value of %llu bytes", (unsigned long long)size);
    size_t sz = (size_t)size;
    int64_t got = get_transient(t, key, &v, &sz, 1, size);
    if (got < 0) {
        free(v);
        return got;
    }
    atomic_fetch_add(&t->copied_bytes, (uint64_t)got);
    *value_out = v;
    return got;
}

int64_t crc_thin_get(cr_store *s, const char *key, void **value_out)
{
    int rc = crc_thin_check(s);
    if (rc == 0)
        rc = crc_check_key(key);
    if (rc < 0)
        return rc;
    crc_thin *t = s->thin;
    int64_t direct = 0;
    bool done = false;
    void *dv = NULL;
    crc_thin_direct_get(t, &key, 1, NULL, NULL, NULL, &dv, &direct, &done);
    if (done) {
        if (direct >= 0)
            *value_out = dv;
        return direct;
    }
    for (int round = 0; round < 4; round++) {
        void *v = NULL;
        int64_t r = 0;
        uint64_t size = 0;
        rc = get_copy_round(t, &key, 1, true, &v, &r, &size);
        if (rc < 0)
            return rc;
        if (r >= 0) {
            *value_out = v;
            return r;
        }
        if (r != CR_BUFFER_OVERFLOW || size == 0)
            return r;
        /* The local buffer cannot hold it: whole (too large) or now (full). */
        if (size > t->lb_size || round == 3)
            return get_copy_transient(t, key, size, value_out);
    }
    return CR_INTERNAL_ERROR;
}

int crc_thin_batch_get(cr_store *s, const char *const *keys, size_t n, void **values_out,
                       int64_t *results)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || values_out == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch_get: NULL array");
    crc_thin *t = s->thin;
    for (size_t i = 0; i < n; i++)
        values_out[i] = NULL;
    bool *done = direct_batch(t, keys, n, NULL, NULL, NULL, values_out, results);
    size_t left = 0;
    for (size_t i = 0; i < n; i++)
        left += done == NULL || !done[i];
    if (left == 0) { /* every key read directly: no daemon round, nothing more to allocate */
        free(done);
        return 0;
    }
    /* The daemon's rounds: arrays sized by the keys left, not by the request
     * limit (a per-call calloc of the limit is zeroing work, and the heap it
     * takes above the caller's values makes glibc trim and regrow the heap
     * on every call that frees them). */
    size_t round_cap = left < CRC_THIN_BATCH_KEYS ? left : CRC_THIN_BATCH_KEYS;
    uint64_t *sizes = calloc(n, sizeof(*sizes));
    const char **ks = calloc(round_cap, sizeof(*ks));
    size_t *idx = calloc(round_cap, sizeof(*idx));
    void **vals = calloc(round_cap, sizeof(*vals));
    int64_t *res = calloc(round_cap, sizeof(*res));
    uint64_t *szs = calloc(round_cap, sizeof(*szs));
    if (sizes == NULL || ks == NULL || idx == NULL || vals == NULL || res == NULL || szs == NULL) {
        /* Failures are per key: the keys read directly keep their values. */
        int oom = crb_error(CR_ERR_NO_MEMORY, "batch get of %zu keys", n);
        for (size_t i = 0; i < n; i++)
            if (done == NULL || !done[i])
                results[i] = oom;
        rc = 0;
        goto out_free;
    }
    for (size_t i = 0; i < n; i++)
        if (done == NULL || !done[i])
            results[i] = crc_check_key(keys[i]);
    for (size_t i = 0; i < n;) {
        size_t m = 0, kb = 0;
        for (; i < n && m < round_cap; i++) {
            if (results[i] < 0 || (done != NULL && done[i]))
                continue;
            size_t kl = strlen(keys[i]);
            if (m > 0 && kb + kl > CRC_THIN_KEY_BYTES)
                break;
            kb += kl;
            idx[m] = i;
            ks[m++] = keys[i];
        }
        if (m == 0)
            continue;
        memset(vals, 0, m * sizeof(*vals));
        int one = get_copy_round(t, ks, m, false, vals, res, szs);
        for (size_t j = 0; j < m; j++) {
            results[idx[j]] = one < 0 ? one : res[j];
            values_out[idx[j]] = vals[j];
            sizes[idx[j]] = one < 0 ? 0 : szs[j];
        }
    }
    /* Values the local buffer could not take with the others: one by one. */
    for (size_t i = 0; i < n; i++) {
        if ((done != NULL && done[i]) || results[i] != CR_BUFFER_OVERFLOW || sizes[i] == 0)
            continue;
        void *v = NULL;
        int64_t r = sizes[i] > t->lb_size ? get_copy_transient(t, keys[i], sizes[i], &v)
                                          : crc_thin_get(s, keys[i], &v);
        results[i] = r;
        values_out[i] = r >= 0 ? v : NULL;
    }
    rc = 0;
out_free:
    free(done);
    free(szs);
    free(res);
    free(vals);
    free(idx);
    free(ks);
    free(sizes);
    return rc;
}

/* ====================================================================== */
/* Keys, removal, replicas, segments, health                              */
/* ====================================================================== */

int64_t crc_thin_get_size(cr_store *s, const char *key)
{
    int rc = crc_thin_check(s);
    if (rc == 0)
        rc = crc_check_key(key);
    if (rc < 0)
        return rc;
    crp_thin_req req = {
        .op = CRP_THIN_GET_SIZE, .fields = CRP_THIN_F_KEYS, .n_keys = 1, .keys = (char **)&key};
    crp_thin_resp resp;
    rc = crc_thin_call(s->thin, &req, NULL, 0, &resp, 0, NULL);
    if (rc < 0)
        return rc;
    int64_t out = resp.status < 0 ? resp.status : resp.value;
    if (out < 0)
        crb_error((int)out, "%s", resp.message ? resp.message : cr_strerror((int)out));
    crp_thin_resp_clear(&resp);
    return out;
}

static int64_t one_key(cr_store *s, int op, const char *key, uint32_t flags)
{
    int rc = crc_thin_check(s);
    if (rc == 0)
        rc = crc_check_key(key);
    if (rc < 0)
        return rc;
    crp_thin_req req = {.op = (uint16_t)op,
                        .fields = CRP_THIN_F_KEYS | CRP_THIN_F_FLAGS,
                        .flags = flags | CRP_THIN_FLAG_SINGLE,
                        .n_keys = 1,
                        .keys = (char **)&key};
    crp_thin_resp resp;
    rc = crc_thin_call(s->thin, &req, NULL, 0, &resp, 0, NULL);
    return single_result(rc, &resp);
}

int crc_thin_exist(cr_store *s, const char *key)
{
    return (int)one_key(s, CRP_THIN_EXIST, key, 0);
}

int crc_thin_remove(cr_store *s, const char *key, bool force)
{
    return (int)one_key(s, CRP_THIN_REMOVE, key, force ? CRP_THIN_FLAG_FORCE : 0);
}

/* Keys in requests of at most CRC_THIN_BATCH_KEYS / CRC_THIN_KEY_BYTES:
 * EXIST, REMOVE (force) or REPLICA_CLEAR (segment). results[i] per key;
 * returns 0 or the first request's failure as a whole. */
static int keys_rounds(cr_store *s, int op, const char *const *keys, size_t n, bool force,
                       const char *segment, int *results)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch: NULL array");
    size_t round_cap = n < CRC_THIN_BATCH_KEYS ? n : CRC_THIN_BATCH_KEYS;
    const char **ks = calloc(round_cap, sizeof(*ks));
    size_t *idx = calloc(round_cap, sizeof(*idx));
    if (ks == NULL || idx == NULL) {
        free(ks);
        free(idx);
        return crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
    }
    for (size_t i = 0; i < n; i++)
        results[i] = crc_check_key(keys[i]);
    int first = 0;
    for (size_t i = 0; i < n;) {
        size_t m = 0, kb = 0;
        for (; i < n && m < round_cap; i++) {
            if (results[i] < 0)
                continue;
            size_t kl = strlen(keys[i]);
            if (m > 0 && kb + kl > CRC_THIN_KEY_BYTES)
                break;
            kb += kl;
            idx[m] = i;
            ks[m++] = keys[i];
        }
        if (m == 0)
            continue;
        crp_thin_req req = {
            .op = (uint16_t)op, .fields = CRP_THIN_F_KEYS, .n_keys = m, .keys = (char **)ks};
        if (op == CRP_THIN_REPLICA_CLEAR) {
            req.fields |= CRP_THIN_F_TEXT;
            req.text = (char *)(segment ? segment : "");
        } else {
            req.fields |= CRP_THIN_F_FLAGS;
            req.flags = force ? CRP_THIN_FLAG_FORCE : 0;
        }
        crp_thin_resp resp;
        int one = crc_thin_call(s->thin, &req, NULL, 0, &resp, 0, NULL);
        if (one == 0) {
            one = check_results(&resp, m);
            if (one == 0) {
                for (size_t j = 0; j < m; j++)
                    results[idx[j]] = (int)resp.results[j];
                if (resp.status < 0)
                    one = crb_error(resp.status, "%s",
                                    resp.message ? resp.message : cr_strerror(resp.status));
            }
            crp_thin_resp_clear(&resp);
        } else {
            for (size_t j = 0; j < m; j++)
                results[idx[j]] = one;
        }
        if (one < 0 && first == 0)
            first = one;
    }
    free(ks);
    free(idx);
    return first;
}

int crc_thin_keys_op(cr_store *s, int op, const char *const *keys, size_t n, bool force,
                     int *results)
{
    return keys_rounds(s, op, keys, n, force, NULL, results);
}

int crc_thin_replica_clear(cr_store *s, const char *const *keys, size_t n, const char *segment,
                           int *results)
{
    if (segment != NULL && strlen(segment) > CR_STORE_MAX_SEGMENT)
        return crb_error(CR_INVALID_PARAMS, "batch_replica_clear: segment name over %d bytes",
                         CR_STORE_MAX_SEGMENT);
    return keys_rounds(s, CRP_THIN_REPLICA_CLEAR, keys, n, false, segment, results);
}

static int64_t count_call(cr_store *s, crp_thin_req *req)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    crp_thin_resp resp;
    rc = crc_thin_call(s->thin, req, NULL, 0, &resp, 0, NULL);
    if (rc < 0)
        return rc;
    int64_t out = resp.status < 0 ? resp.status : resp.value;
    if (out < 0)
        crb_error((int)out, "%s", resp.message ? resp.message : cr_strerror((int)out));
    crp_thin_resp_clear(&resp);
    return out;
}

int64_t crc_thin_remove_regex(cr_store *s, const char *pattern, bool force)
{
    if (pattern == NULL)
        return crb_error(CR_INVALID_PARAMS, "remove_by_regex: NULL pattern");
    if (strlen(pattern) > CRP_THIN_MAX_TEXT)
        return crb_error(CR_INVALID_PARAMS, "remove_by_regex: pattern over %d bytes",
                         CRP_THIN_MAX_TEXT);
    crp_thin_req req = {.op = CRP_THIN_REMOVE_REGEX,
                        .fields = CRP_THIN_F_TEXT | CRP_THIN_F_FLAGS,
                        .text = (char *)pattern,
                        .flags = force ? CRP_THIN_FLAG_FORCE : 0};
    return count_call(s, &req);
}

int64_t crc_thin_remove_all(cr_store *s, bool force)
{
    crp_thin_req req = {.op = CRP_THIN_REMOVE_ALL,
                        .fields = CRP_THIN_F_FLAGS,
                        .flags = force ? CRP_THIN_FLAG_FORCE : 0};
    return count_call(s, &req);
}

int crc_thin_get_replicas(cr_store *s, const char *key, cr_replica_info *out, size_t cap)
{
    int rc = crc_thin_check(s);
    if (rc == 0)
        rc = crc_check_key(key);
    if (rc < 0)
        return rc;
    if (out == NULL && cap > 0)
        return crb_error(CR_INVALID_PARAMS, "get_replicas: out is NULL with cap %zu", cap);
    crp_thin_req req = {.op = CRP_THIN_REPLICAS,
                        .fields = CRP_THIN_F_KEYS | CRP_THIN_F_ID,
                        .n_keys = 1,
                        .keys = (char **)&key,
                        .id = cap};
    crp_thin_resp resp;
    rc = crc_thin_call(s->thin, &req, NULL, 0, &resp, 0, NULL);
    if (rc < 0)
        return rc;
    rc = resp.status;
    if (rc < 0) {
        crb_error(rc, "%s", resp.message ? resp.message : cr_strerror(rc));
    } else {
        for (size_t i = 0; i < resp.n_reps && i < cap; i++) {
            snprintf(out[i].segment, sizeof(out[i].segment), "%s", resp.reps[i].segment);
            out[i].address = resp.reps[i].addr;
            out[i].size = resp.reps[i].size;
            out[i].complete = resp.reps[i].complete;
        }
        rc = (int)resp.value;
    }
    crp_thin_resp_clear(&resp);
    return rc;
}

int crc_thin_list_segments(cr_store *s, char ***names_out, size_t *n_out)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    if (names_out == NULL || n_out == NULL)
        return crb_error(CR_INVALID_PARAMS, "list_segments: NULL output");
    crp_thin_req req = {.op = CRP_THIN_SEGMENTS};
    crp_thin_resp resp;
    rc = crc_thin_call(s->thin, &req, NULL, 0, &resp, 0, NULL);
    if (rc < 0)
        return rc;
    rc = resp.status;
    char **names = NULL;
    size_t n = 0;
    if (rc == 0 && resp.n_names > 0) {
        names = calloc(resp.n_names, sizeof(*names));
        if (names == NULL)
            rc = crb_error(CR_ERR_NO_MEMORY, "%zu segment names", resp.n_names);
        for (size_t i = 0; rc == 0 && i < resp.n_names; i++) {
            names[i] = strdup(resp.names[i]);
            if (names[i] == NULL)
                rc = crb_error(CR_ERR_NO_MEMORY, "segment name");
            else
                n++;
        }
    } else if (rc < 0) {
        crb_error(rc, "%s", resp.message ? resp.message : cr_strerror(rc));
    }
    crp_thin_resp_clear(&resp);
    if (rc < 0) {
        cr_store_free_names(names, n);
        return rc;
    }
    *names_out = names;
    *n_out = n;
    return 0;
}

int crc_thin_health(cr_store *s)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    crp_thin_req req = {.op = CRP_THIN_HEALTH};
    crp_thin_resp resp;
    rc = crc_thin_call(s->thin, &req, NULL, 0, &resp, 0, NULL);
    if (rc < 0)
        return rc;
    rc = resp.status;
    if (rc < 0)
        crb_error(rc, "crescent-client: %s", resp.message ? resp.message : cr_strerror(rc));
    crp_thin_resp_clear(&resp);
    return rc;
}

int crc_thin_hostname(cr_store *s, char *buf, size_t len)
{
    if (s == NULL || buf == NULL)
        return crb_error(CR_INVALID_PARAMS, "hostname: NULL argument");
    crc_thin *t = s->thin;
    pthread_mutex_lock(&t->lock);
    size_t n = strlen(t->segment);
    int rc = 0;
    if (n + 1 > len)
        rc = crb_error(CR_BUFFER_OVERFLOW, "hostname needs %zu bytes", n + 1);
    else
        memcpy(buf, t->segment, n + 1);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

/* ====================================================================== */
/* Lifecycle                                                              */
/* ====================================================================== */

void cr_store_thin_config_init(cr_store_thin_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->server_address = "127.0.0.1:50052";
    cfg->mem_pool_size = 64ull << 20;
    cfg->local_buffer_size = 16ull << 20;
    cfg->call_timeout_ms = 120000;
    cfg->max_connections = 16;
}

bool cr_store_is_thin(const cr_store *s)
{
    return s != NULL && s->thin != NULL;
}

int cr_store_setup_thin(const cr_store_thin_config *cfg, cr_store **out)
{
    if (cfg == NULL || out == NULL || cfg->struct_size < sizeof(uint32_t))
        return crb_error(CR_INVALID_PARAMS,
                         "cr_store_setup_thin: NULL config/out or "
                         "uninitialised config (call cr_store_thin_config_init)");
    cr_store_thin_config c;
    cr_store_thin_config_init(&c);
    memcpy(&c, cfg, cfg->struct_size < sizeof(c) ? cfg->struct_size : sizeof(c));
    cr_store *s = calloc(1, sizeof(*s));
    crc_thin *t = calloc(1, sizeof(*t));
    if (s == NULL || t == NULL) {
        free(s);
        free(t);
        return crb_error(CR_ERR_NO_MEMORY, "thin store");
    }
    s->thin = t;
    pthread_mutex_init(&s->calls_lock, NULL); /* cr_store_close waits for calls here too */
    pthread_cond_init(&s->calls_done, NULL);
    t->pool_fd = -1;
    pthread_mutex_init(&t->pool_lock, NULL);
    pthread_cond_init(&t->pool_freed, NULL);
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->conn_freed, NULL);
    pthread_rwlock_init(&t->copy_lock, NULL);
    pthread_rwlock_init(&t->reg_lock, NULL);
    crc_thin_direct_init(t);
    t->call_timeout_ms = c.call_timeout_ms ? c.call_timeout_ms : 120000;
    t->max_conns = c.max_connections ? c.max_connections : 16;
    int rc = crc_thin_parse_address(c.server_address, &t->addr, &t->addr_len, t->address,
                                    sizeof(t->address));
    int64_t spin_mode = 0;
    if (rc == 0)
        rc = crc_spin_mode(&spin_mode);
    crb_spin_init(&t->spin, spin_mode);
    const char *secret = c.shared_secret ? c.shared_secret : getenv("CRESCENT_CLIENT_SECRET");
    if (rc == 0 && secret != NULL && secret[0] != '\0') {
        if (strlen(secret) >= sizeof(t->secret))
            rc = crb_error(CR_INVALID_PARAMS, "shared_secret is longer than %zu bytes",
                           sizeof(t->secret) - 1);
        else {
            snprintf(t->secret, sizeof(t->secret), "%s", secret);
            t->has_secret = true;
        }
    }
    if (rc == 0 && c.tenant_id != NULL && strcmp(c.tenant_id, "default") != 0) {
        if (strlen(c.tenant_id) > CRP_THIN_MAX_TENANT)
            rc = crb_error(CR_INVALID_PARAMS, "tenant_id is longer than %d bytes",
                           CRP_THIN_MAX_TENANT);
        else
            snprintf(t->tenant, sizeof(t->tenant), "%s", c.tenant_id);
    }
    if (rc == 0)
        rc = crc_thin_pool_create(t, c.mem_pool_size, c.local_buffer_size);
    if (rc == 0)
        rc = crc_thin_connect(t);
    if (rc < 0) {
        char detail[400];
        snprintf(detail, sizeof(detail), "%s", cr_last_error_message());
        crc_thin_destroy(s);
        return crb_error(rc, "thin setup: %s", detail);
    }
    crb_log(CRB_LOG_INFO, "thin client of %s: segment %s, pool %llu + local buffer %llu bytes",
            t->address, t->segment, (unsigned long long)t->pool_size,
            (unsigned long long)t->lb_size);
    *out = s;
    return 0;
}

void crc_thin_close(cr_store *s)
{
    crc_thin *t = s->thin;
    if (atomic_exchange(&t->closed, true))
        return;
    crc_thin_disconnect(t);
}

void crc_thin_destroy(cr_store *s)
{
    crc_thin *t = s->thin;
    atomic_store(&t->closed, true);
    crc_thin_disconnect(t);
    crc_thin_regions_free(t);
    crc_thin_direct_fini(t);
    crc_thin_pool_destroy(t);
    pthread_mutex_destroy(&t->pool_lock);
    pthread_cond_destroy(&t->pool_freed);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->conn_freed);
    pthread_rwlock_destroy(&t->copy_lock);
    pthread_rwlock_destroy(&t->reg_lock);
    pthread_mutex_destroy(&s->calls_lock);
    pthread_cond_destroy(&s->calls_done);
    free(t);
    free(s);
}

int cr_store_thin_stats_get(cr_store *s, cr_store_thin_stats *out)
{
    if (s == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "thin_stats: NULL argument");
    if (s->thin == NULL)
        return crb_error(CR_UNAVAILABLE_IN_CURRENT_MODE, "thin_stats: not a thin client");
    crc_thin *t = s->thin;
    cr_store_thin_stats st = {
        .calls = atomic_load(&t->calls),
        .zero_copy_bytes = atomic_load(&t->zero_copy_bytes),
        .copied_bytes = atomic_load(&t->copied_bytes),
        .slow_path_calls = atomic_load(&t->slow_calls),
        .slow_path_bytes = atomic_load(&t->slow_bytes),
        .transient_calls = atomic_load(&t->transient_calls),
        .reconnects = atomic_load(&t->reconnects),
        .daemon_lost = atomic_load(&t->lost),
        .direct_get_keys = atomic_load(&t->direct_keys),
        .direct_get_fallbacks = atomic_load(&t->direct_fallbacks),
        .direct_get_speculative = atomic_load(&t->spec_reads),
        .direct_get_kept = atomic_load(&t->spec_hits),
        .direct_put_keys = atomic_load(&t->direct_put_keys),
        .direct_put_fallbacks = atomic_load(&t->direct_put_fallbacks),
    };
    pthread_rwlock_rdlock(&t->reg_lock);
    for (size_t i = 0; i < t->n_regs; i++) {
        if (t->regs[i].kind == CRC_REGION_SHARED && t->regs[i].id_gen != 0)
            st.shared_regions++;
        else if (t->regs[i].kind != CRC_REGION_POOL)
            st.slow_path_regions++;
    }
    pthread_rwlock_unlock(&t->reg_lock);
    pthread_mutex_lock(&t->lock);
    st.connections = t->n_conns;
    pthread_mutex_unlock(&t->lock);
    pthread_mutex_lock(&t->pool_lock);
    st.pool_used = crb_oa_used(t->pool_oa);
    pthread_mutex_unlock(&t->pool_lock);
    *out = st;
    return 0;
}

/* ====================================================================== */
/* Batch forms with one buffer per key                                    */
/* ====================================================================== */

int crc_thin_batch_put1(cr_store *s, const char *const *keys, const void *const *bufs,
                        const size_t *sizes, size_t n, bool zero_copy, bool upsert,
                        const cr_replicate_config *cfg, int *results)
{
    if (n > 0 && (keys == NULL || bufs == NULL || sizes == NULL || results == NULL))
        return crb_error(CR_INVALID_PARAMS, "batch put: NULL array");
    const void *const **parts = calloc(n ? n : 1, sizeof(*parts));
    const size_t **szs = calloc(n ? n : 1, sizeof(*szs));
    size_t *counts = calloc(n ? n : 1, sizeof(*counts));
    int rc;
    if (parts == NULL || szs == NULL || counts == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
    } else {
        for (size_t i = 0; i < n; i++) {
            parts[i] = &bufs[i];
            szs[i] = &sizes[i];
            counts[i] = 1;
        }
        rc = crc_thin_batch_put(s, keys, (const void *const *const *)parts, szs, counts, n,
                                zero_copy, upsert, cfg, results);
    }
    free(parts);
    free(szs);
    free(counts);
    return rc;
}

int crc_thin_batch_get_into1(cr_store *s, const char *const *keys, void *const *bufs,
                             const size_t *caps, size_t n, int64_t *results)
{
    if (n > 0 && (keys == NULL || bufs == NULL || caps == NULL || results == NULL))
        return crb_error(CR_INVALID_PARAMS, "batch_get_into: NULL array");
    void *const **bl = calloc(n ? n : 1, sizeof(*bl));
    const size_t **szs = calloc(n ? n : 1, sizeof(*szs));
    size_t *counts = calloc(n ? n : 1, sizeof(*counts));
    int rc;
    if (bl == NULL || szs == NULL || counts == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
    } else {
        for (size_t i = 0; i < n; i++) {
            bl[i] = &bufs[i];
            szs[i] = &caps[i];
            counts[i] = 1;
        }
        rc = crc_thin_batch_get_into(s, keys, (void *const *const *)bl, szs, counts, n, results);
    }
    free(bl);
    free(szs);
    free(counts);
    return rc;
}
