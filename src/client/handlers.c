/*
 * handlers.c - crescent-client runs a thin client's request on its embedded
 * store and fills the reply.
 *
 * Every extent of a request is resolved in the session's mappings first
 * (pool or registered regions, bounds-checked, regions pinned for the call);
 * a key whose extents do not resolve fails alone with that status. Then the
 * request becomes the one cr_store call it stands for (the single-key call
 * for CRP_THIN_FLAG_SINGLE, else the batch call), so a thin client gets
 * exactly the results and semantics of an embedded one. Copying gets are
 * read straight into the session's local buffer through the store's
 * crc_value_dest hook: the engine writes the value once, where the client
 * copies it from; a value that does not fit is reported with its size
 * (CR_BUFFER_OVERFLOW) and the client fetches it through a transient memfd.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"
#include "client/daemon.h"
#include "store/internal.h"

void *crs_scratch_alloc(crs_scratch *sc, size_t size)
{
    if (sc->n == sizeof(sc->p) / sizeof(sc->p[0]))
        return NULL;
    void *p = calloc(1, size ? size : 1);
    if (p != NULL)
        sc->p[sc->n++] = p;
    return p;
}

void crs_scratch_free(crs_scratch *sc)
{
    for (size_t i = 0; i < sc->n; i++)
        free(sc->p[i]);
    sc->n = 0;
}

/* The request's replica config, or NULL for the store's defaults. */
static const cr_replicate_config *config_of(const crp_thin_req *req, cr_replicate_config *out)
{
    if (!(req->fields & CRP_THIN_F_CFG))
        return NULL;
    cr_replicate_config_init(out);
    out->replica_num = req->cfg.replica_num;
    out->hard_pin = req->cfg.hard_pin;
    out->soft_pin_action = req->cfg.soft_pin_action;
    out->has_soft_pin_ttl = req->cfg.has_soft_pin_ttl;
    out->soft_pin_ttl_ms = req->cfg.soft_pin_ttl_ms;
    out->preferred_segments = (const char *const *)req->cfg.preferred_segments;
    out->n_preferred = req->cfg.n_preferred;
    out->prefer_same_node = req->cfg.prefer_same_node;
    return out;
}

/* A failure's message, kept for the reply. */
static void fail(crp_thin_resp *resp, crs_scratch *sc, int rc)
{
    resp->status = rc;
    const char *m = cr_last_error_message();
    char *copy = crs_scratch_alloc(sc, strlen(m) + 1);
    if (copy != NULL)
        memcpy(copy, m, strlen(m) + 1);
    resp->message = copy;
}

static int64_t *results_of(crp_thin_resp *resp, crs_scratch *sc, size_t n)
{
    int64_t *r = crs_scratch_alloc(sc, n * sizeof(*r));
    if (r != NULL) {
        resp->fields |= CRP_THIN_R_RESULTS;
        resp->results = r;
        resp->n_results = n;
    }
    return r;
}

/* The extents of every key, resolved: bufs[i][k], sizes[i][k]; ok[i] false
 * (err[i] its status) for a key whose extents do not resolve. */
typedef struct resolved {
    void **flat;
    size_t *flat_sizes;
    uint64_t *flat_offs;
    void ***bufs;    /* per key: &flat[first] */
    size_t **sizes;  /* per key: &flat_sizes[first] */
    uint64_t **offs; /* per key: &flat_offs[first] */
    size_t *counts;  /* per key */
    int *err;        /* per key: 0 or the failure */
    uint64_t bytes;  /* total extent bytes */
} resolved;

static int resolve_all(crs_session *s, const crp_thin_req *req, crs_pins *pins, resolved *out,
                       crs_scratch *sc)
{
    size_t n = req->n_keys, e = req->n_ext;
    out->flat = crs_scratch_alloc(sc, (e ? e : 1) * sizeof(void *));
    out->flat_sizes = crs_scratch_alloc(sc, (e ? e : 1) * sizeof(size_t));
    out->bufs = crs_scratch_alloc(
        sc, (n ? n : 1) * (2 * sizeof(void *) + sizeof(size_t) + sizeof(int) + sizeof(void *)));
    if (out->flat == NULL || out->flat_sizes == NULL || out->bufs == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "resolving %zu extents", e);
    out->sizes = (size_t **)(out->bufs + n);
    out->offs = (uint64_t **)(out->sizes + n);
    out->counts = (size_t *)(out->offs + n);
    out->err = (int *)(out->counts + n);
    out->flat_offs = req->offsets;
    out->bytes = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        out->bufs[i] = &out->flat[at];
        out->sizes[i] = &out->flat_sizes[at];
        out->offs[i] = req->offsets != NULL ? &req->offsets[at] : NULL;
        out->counts[i] = req->counts[i];
        out->err[i] = 0;
        for (uint32_t k = 0; k < req->counts[i]; k++, at++) {
            const crp_thin_ext *x = &req->ext[at];
            if (out->err[i] == 0) {
                out->err[i] = crs_session_resolve(s, x, pins, &out->flat[at]);
                out->flat_sizes[at] = (size_t)x->len;
                out->bytes += x->len;
            }
        }
    }
    return 0;
}

/* --- puts and gets ---------------------------------------------------------------- */

static void do_put(crs_daemon *d, crs_session *s, const crp_thin_req *req, crp_thin_resp *resp,
                   crs_scratch *sc)
{
    crs_pins pins = {0};
    resolved rv;
    cr_replicate_config cfgbuf;
    const cr_replicate_config *cfg = config_of(req, &cfgbuf);
    bool upsert = req->flags & CRP_THIN_FLAG_UPSERT;
    int64_t *r = results_of(resp, sc, req->n_keys);
    int rc = r != NULL ? resolve_all(s, req, &pins, &rv, sc) : CR_ERR_NO_MEMORY;
    if (rc < 0) {
        fail(resp, sc, rc);
        goto out_unpin;
    }
    if ((req->flags & CRP_THIN_FLAG_SINGLE) && req->n_keys == 1) {
        const char *k = req->keys[0];
        if (rv.err[0] < 0)
            rc = rv.err[0];
        else if (rv.counts[0] == 1 && !upsert)
            rc = cr_store_put_from(d->store, k, rv.bufs[0][0], rv.sizes[0][0], cfg);
        else if (rv.counts[0] == 1)
            rc = cr_store_upsert_from(d->store, k, rv.bufs[0][0], rv.sizes[0][0], cfg);
        else if (!upsert)
            rc = cr_store_put_from_multi(d->store, k, rv.bufs[0], rv.sizes[0], rv.counts[0], cfg);
        else {
            int one = 0;
            rc = cr_store_batch_upsert_from_multi(
                d->store, (const char *const *)req->keys, (void *const *const *)rv.bufs,
                (const size_t *const *)rv.sizes, rv.counts, 1, cfg, &one);
            rc = rc < 0 ? rc : one;
        }
        r[0] = rc;
        if (rc < 0)
            fail(resp, sc, 0);
        resp->status = 0;
    } else {
        /* Keys whose extents failed are left out of the store's batch. */
        size_t n = req->n_keys, m = 0;
        const char **ks =
            crs_scratch_alloc(sc, (n ? n : 1) * (sizeof(char *) + sizeof(int) + sizeof(size_t)));
        if (ks == NULL) {
            fail(resp, sc, crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n));
            goto out_unpin;
        }
        size_t *map = (size_t *)(ks + n); /* 8-byte entries first, then the ints */
        int *res = (int *)(map + n);
        for (size_t i = 0; i < n; i++) {
            r[i] = rv.err[i];
            if (rv.err[i] == 0) {
                ks[m] = req->keys[i];
                rv.bufs[m] = rv.bufs[i];
                rv.sizes[m] = rv.sizes[i];
                rv.counts[m] = rv.counts[i];
                map[m++] = i;
            }
        }
        rc = m == 0 ? 0
             : upsert
                 ? cr_store_batch_upsert_from_multi(d->store, ks, (void *const *const *)rv.bufs,
                                                    (const size_t *const *)rv.sizes, rv.counts, m,
                                                    cfg, res)
                 : cr_store_batch_put_from_multi(d->store, ks, (void *const *const *)rv.bufs,
                                                 (const size_t *const *)rv.sizes, rv.counts, m, cfg,
                                                 res);
        for (size_t j = 0; j < m; j++)
            r[map[j]] = rc < 0 && res[j] == 0 ? rc : res[j];
        if (rc < 0)
            fail(resp, sc, rc);
    }
    atomic_fetch_add(&d->ctr.zero_copy_bytes, rv.bytes);
out_unpin:
    crs_session_unpin_all(d, s, &pins);
}

static void do_get(crs_daemon *d, crs_session *s, const crp_thin_req *req, crp_thin_resp *resp,
                   crs_scratch *sc)
{
    crs_pins pins = {0};
    resolved rv;
    int64_t *r = results_of(resp, sc, req->n_keys);
    int rc = r != NULL ? resolve_all(s, req, &pins, &rv, sc) : CR_ERR_NO_MEMORY;
    if (rc < 0) {
        fail(resp, sc, rc);
        goto out_unpin;
    }
    if ((req->flags & CRP_THIN_FLAG_SINGLE) && req->n_keys == 1) {
        int64_t got = rv.err[0];
        if (got == 0)
            got = rv.counts[0] == 1
                      ? cr_store_get_into(d->store, req->keys[0], rv.bufs[0][0], rv.sizes[0][0])
                      : cr_store_get_into_multi(d->store, req->keys[0], rv.bufs[0], rv.sizes[0],
                                                rv.counts[0]);
        r[0] = got;
        if (got < 0)
            fail(resp, sc, 0);
        resp->status = 0;
    } else {
        size_t n = req->n_keys, m = 0;
        const char **ks = crs_scratch_alloc(
            sc, (n ? n : 1) * (sizeof(char *) + sizeof(int64_t) + sizeof(size_t)));
        if (ks == NULL) {
            fail(resp, sc, crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n));
            goto out_unpin;
        }
        int64_t *res = (int64_t *)(ks + n);
        size_t *map = (size_t *)(res + n);
        for (size_t i = 0; i < n; i++) {
            r[i] = rv.err[i];
            if (rv.err[i] == 0) {
                ks[m] = req->keys[i];
                rv.bufs[m] = rv.bufs[i];
                rv.sizes[m] = rv.sizes[i];
                rv.counts[m] = rv.counts[i];
                map[m++] = i;
            }
        }
        rc = m == 0 ? 0
                    : cr_store_batch_get_into_multi(d->store, ks, (void *const *const *)rv.bufs,
                                                    (const size_t *const *)rv.sizes, rv.counts, m,
                                                    res);
        for (size_t j = 0; j < m; j++)
            r[map[j]] = res[j];
        if (rc < 0)
            fail(resp, sc, rc);
    }
    atomic_fetch_add(&d->ctr.zero_copy_bytes, rv.bytes);
out_unpin:
    crs_session_unpin_all(d, s, &pins);
}

/* Copying gets: values go to the session's local buffer. */
typedef struct lb_dest {
    crs_daemon *d;
    crs_session *s;
    uint64_t *vals; /* per key: the value's offset, or its size when it did not fit */
    size_t n;
} lb_dest;

static int lb_alloc(void *ctx, size_t index, uint64_t size, void **ptr, bool *registered)
{
    lb_dest *ld = ctx;
    *registered = true;
    if (size == 0) {
        *ptr = ld->s->map; /* nothing to place: offset 0 means "no space taken" */
        if (index < ld->n)
            ld->vals[index] = 0;
        return 0;
    }
    uint64_t off;
    int rc = crs_lb_alloc(ld->d, ld->s, size, &off);
    if (rc < 0) {
        if (index < ld->n)
            ld->vals[index] = size;
        return crb_error(CR_BUFFER_OVERFLOW,
                         "a %llu-byte value does not fit the thin client's %llu-byte local "
                         "buffer now",
                         (unsigned long long)size, (unsigned long long)ld->s->lb_size);
    }
    if (index < ld->n)
        ld->vals[index] = off;
    *ptr = ld->s->map + off;
    return 0;
}

static void lb_release(void *ctx, void *ptr)
{
    lb_dest *ld = ctx;
    if (ptr != ld->s->map)
        crs_lb_free(ld->d, ld->s, (uint64_t)((uint8_t *)ptr - ld->s->map));
}

static void do_get_copy(crs_daemon *d, crs_session *s, const crp_thin_req *req, crp_thin_resp *resp,
                        crs_scratch *sc)
{
    size_t n = req->n_keys;
    int64_t *r = results_of(resp, sc, n);
    uint64_t *vals = crs_scratch_alloc(sc, (n ? n : 1) * (sizeof(uint64_t) + sizeof(void *)));
    if (r == NULL || vals == NULL) {
        fail(resp, sc, crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n));
        return;
    }
    void **values = (void **)(vals + n);
    lb_dest ld = {d, s, vals, n};
    crc_value_dest vd = {lb_alloc, lb_release, &ld};
    resp->fields |= CRP_THIN_R_VALS;
    resp->vals = vals;
    resp->n_vals = n;
    if ((req->flags & CRP_THIN_FLAG_SINGLE) && n == 1) {
        r[0] = crc_get_to(d->store, req->keys[0], &vd, &values[0]);
        if (r[0] < 0)
            fail(resp, sc, 0);
        resp->status = 0;
    } else {
        int rc = crc_batch_get_to(d->store, (const char *const *)req->keys, n, &vd, values, r);
        if (rc < 0)
            fail(resp, sc, rc);
    }
    for (size_t i = 0; i < n; i++) {
        if (r[i] >= 0)
            atomic_fetch_add(&d->ctr.copied_out_bytes, (uint64_t)r[i]);
        else if (r[i] != CR_BUFFER_OVERFLOW)
            vals[i] = 0;
    }
}

/* Transient values: a memfd of the client mapped for this call only. */
typedef struct tr_dest {
    uint8_t *base;
    uint64_t cap;
} tr_dest;

static int tr_alloc(void *ctx, size_t index, uint64_t size, void **ptr, bool *registered)
{
    tr_dest *td = ctx;
    (void)index;
    *registered = false; /* not registered: read through the store's staging */
    if (size > td->cap)
        return crb_error(CR_BUFFER_OVERFLOW, "the value has %llu bytes, the buffer %llu",
                         (unsigned long long)size, (unsigned long long)td->cap);
    *ptr = td->base;
    return 0;
}

static void tr_release(void *ctx, void *ptr)
{
    (void)ctx;
    (void)ptr;
}

static void do_transient(crs_daemon *d, crs_conn *c, const crp_thin_req *req, crp_thin_resp *resp,
                         crs_scratch *sc)
{
    int64_t *r = results_of(resp, sc, req->n_keys);
    int fd = -1;
    int rc = r == NULL ? CR_ERR_NO_MEMORY : 0;
    if (rc == 0 && (req->n_fds != 1 || req->n_keys != 1))
        rc = crb_error(CR_INVALID_PARAMS, "%s takes one key and one descriptor",
                       crp_thin_op_name(req->op));
    if (rc == 0)
        rc = crs_conn_take_fds(c, req->n_fds, &fd);
    uint8_t *map = NULL, *base = NULL;
    uint64_t map_len = 0;
    if (rc == 0)
        rc = crs_map_client_file(d, fd, c->uid, req->file_offset, req->len, &map, &map_len, &base);
    if (fd >= 0)
        close(fd);
    if (rc < 0) {
        fail(resp, sc, rc);
        return;
    }
    int64_t got;
    if (req->op == CRP_THIN_PUT_TRANSIENT) {
        cr_replicate_config cfgbuf;
        const cr_replicate_config *cfg = config_of(req, &cfgbuf);
        got = (req->flags & CRP_THIN_FLAG_UPSERT)
                  ? cr_store_upsert(d->store, req->keys[0], base, req->len, cfg)
                  : cr_store_put(d->store, req->keys[0], base, req->len, cfg);
    } else {
        tr_dest td = {base, req->len};
        crc_value_dest vd = {tr_alloc, tr_release, &td};
        void *v = NULL;
        got = crc_get_to(d->store, req->keys[0], &vd, &v);
    }
    r[0] = got;
    if (got < 0)
        fail(resp, sc, 0);
    resp->status = 0;
    atomic_fetch_add(&d->ctr.transient_bytes, req->len);
    crs_unmap_client(d, map, map_len);
}

/* --- keys and the rest ------------------------------------------------------------------ */

static void do_keys(crs_daemon *d, const crp_thin_req *req, crp_thin_resp *resp, crs_scratch *sc)
{
    size_t n = req->n_keys;
    int64_t *r = results_of(resp, sc, n);
    int *res = crs_scratch_alloc(sc, (n ? n : 1) * sizeof(int));
    if (r == NULL || res == NULL) {
        fail(resp, sc, crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n));
        return;
    }
    const char *const *keys = (const char *const *)req->keys;
    bool force = req->flags & CRP_THIN_FLAG_FORCE;
    bool single = (req->flags & CRP_THIN_FLAG_SINGLE) && n == 1;
    int rc;
    switch (req->op) {
    case CRP_THIN_EXIST:
        rc = single ? (res[0] = cr_store_exist(d->store, keys[0]), 0)
                    : cr_store_batch_exist(d->store, keys, n, res);
        break;
    case CRP_THIN_REMOVE:
        rc = single ? (res[0] = cr_store_remove(d->store, keys[0], force), 0)
                    : cr_store_batch_remove(d->store, keys, n, force, res);
        break;
    default: /* REPLICA_CLEAR */
        rc = cr_store_batch_replica_clear(d->store, keys, n, req->text, res);
        break;
    }
    for (size_t i = 0; i < n; i++)
        r[i] = rc < 0 ? rc : res[i];
    if (rc < 0)
        fail(resp, sc, rc);
    else if (single && res[0] < 0)
        fail(resp, sc, 0);
    resp->status = rc < 0 ? rc : 0;
}

static void value_reply(crp_thin_resp *resp, crs_scratch *sc, int64_t v)
{
    if (v < 0) {
        fail(resp, sc, (int)v);
        return;
    }
    resp->fields |= CRP_THIN_R_VALUE;
    resp->value = v;
}

static void do_replicas(crs_daemon *d, const crp_thin_req *req, crp_thin_resp *resp,
                        crs_scratch *sc)
{
    size_t cap = req->id < CRP_THIN_MAX_REPLICAS ? (size_t)req->id : CRP_THIN_MAX_REPLICAS;
    cr_replica_info *info = crs_scratch_alloc(sc, (cap ? cap : 1) * sizeof(*info));
    crp_thin_replica *reps = crs_scratch_alloc(sc, (cap ? cap : 1) * sizeof(*reps));
    if (info == NULL || reps == NULL || req->n_keys != 1) {
        fail(resp, sc,
             crb_error(req->n_keys != 1 ? CR_INVALID_PARAMS : CR_ERR_NO_MEMORY,
                       "replicas: one key"));
        return;
    }
    int rc = cr_store_get_replicas(d->store, req->keys[0], info, cap);
    value_reply(resp, sc, rc);
    if (rc < 0)
        return;
    size_t k = (size_t)rc < cap ? (size_t)rc : cap;
    for (size_t i = 0; i < k; i++)
        reps[i] =
            (crp_thin_replica){info[i].segment, info[i].address, info[i].size, info[i].complete};
    resp->fields |= CRP_THIN_R_REPS;
    resp->reps = reps;
    resp->n_reps = k;
}

static void do_segments(crs_daemon *d, crp_thin_resp *resp, crs_scratch *sc)
{
    char **names = NULL;
    size_t n = 0;
    int rc = cr_store_list_segments(d->store, &names, &n);
    if (rc < 0) {
        fail(resp, sc, rc);
        return;
    }
    /* One scratch block for the strings, so the store's list can go now. */
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += strlen(names[i]) + 1;
    char **out = crs_scratch_alloc(sc, (n ? n : 1) * sizeof(char *) + bytes);
    if (out == NULL) {
        cr_store_free_names(names, n);
        fail(resp, sc, crb_error(CR_ERR_NO_MEMORY, "%zu segment names", n));
        return;
    }
    char *p = (char *)(out + n);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(names[i]) + 1;
        memcpy(p, names[i], l);
        out[i] = p;
        p += l;
    }
    cr_store_free_names(names, n);
    resp->fields |= CRP_THIN_R_NAMES;
    resp->names = out;
    resp->n_names = n;
}

static void do_register(crs_daemon *d, crs_conn *c, const crp_thin_req *req, crp_thin_resp *resp,
                        crs_scratch *sc)
{
    int fd = -1;
    uint32_t id = 0;
    int rc = req->n_fds == 1 ? crs_conn_take_fds(c, 1, &fd)
                             : crb_error(CR_INVALID_PARAMS, "REGISTER takes one descriptor");
    if (rc == 0) {
        rc = crs_session_register(d, c->sess, req, fd, &id);
        close(fd);
    }
    value_reply(resp, sc, rc < 0 ? rc : (int64_t)id);
}

/* --- session tables ------------------------------------------------------------------------ */

static void do_table_op(crs_daemon *d, crs_session *s, const crp_thin_req *req, crp_thin_resp *resp,
                        crs_scratch *sc)
{
    crs_table *t = crs_table_get(s, (uint32_t)req->id);
    if (t == NULL || req->id > UINT32_MAX) {
        fail(resp, sc, CR_INVALID_PARAMS);
        if (t != NULL)
            crs_table_put(d, s, t);
        return;
    }
    size_t n = req->n_keys;
    const char *const *keys = (const char *const *)req->keys;
    int64_t *r = req->op == CRP_THIN_GET_SESSION_END ? NULL : results_of(resp, sc, n);
    int *res = crs_scratch_alloc(sc, (n ? n : 1) * sizeof(int));
    crs_pins pins = {0};
    int rc = res != NULL && (r != NULL || req->op == CRP_THIN_GET_SESSION_END)
                 ? 0
                 : crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
    cr_replicate_config cfgbuf;
    if (rc == 0) {
        switch (req->op) {
        case CRP_THIN_GET_SESSION_START:
            rc = cr_store_get_session_start(t->t, keys, n, res);
            break;
        case CRP_THIN_GET_SESSION_END:
            rc = cr_store_get_session_end(t->t, keys, n);
            break;
        case CRP_THIN_PUT_SESSION_START:
            rc = req->n_vals != n
                     ? crb_error(CR_INVALID_PARAMS, "%zu sizes for %zu keys", req->n_vals, n)
                     : cr_store_put_session_start(t->t, keys, req->vals, n, config_of(req, &cfgbuf),
                                                  res);
            break;
        case CRP_THIN_PUT_SESSION_END:
            rc = cr_store_put_session_end(t->t, keys, n, res);
            break;
        case CRP_THIN_PUT_SESSION_REVOKE:
            rc = cr_store_put_session_revoke(t->t, keys, n, res);
            break;
        default: { /* ranges */
            resolved rv;
            rc = resolve_all(s, req, &pins, &rv, sc);
            int64_t *got = crs_scratch_alloc(sc, (n ? n : 1) * sizeof(int64_t));
            if (rc == 0 && got == NULL)
                rc = crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
            if (rc == 0) {
                for (size_t i = 0; i < n; i++)
                    if (rv.err[i] < 0)
                        rv.counts[i] = 0;
                rc = req->op == CRP_THIN_GET_RANGES
                         ? cr_store_batch_get_ranges(t->t, keys, (void *const *const *)rv.bufs,
                                                     (const size_t *const *)rv.sizes,
                                                     (const uint64_t *const *)rv.offs, rv.counts, n,
                                                     got)
                         : cr_store_batch_put_ranges(t->t, keys, (void *const *const *)rv.bufs,
                                                     (const size_t *const *)rv.sizes,
                                                     (const uint64_t *const *)rv.offs, rv.counts, n,
                                                     got);
                for (size_t i = 0; rc == 0 && i < n; i++)
                    r[i] = rv.err[i] < 0 ? rv.err[i] : got[i];
                atomic_fetch_add(&d->ctr.zero_copy_bytes, rv.bytes);
            }
            r = NULL; /* filled already */
            break;
        }
        }
    }
    if (rc < 0)
        fail(resp, sc, rc);
    else if (r != NULL)
        for (size_t i = 0; i < n; i++)
            r[i] = res[i];
    crs_session_unpin_all(d, s, &pins);
    crs_table_put(d, s, t);
}

/* --- dispatch --------------------------------------------------------------------------------- */

void crs_handle(crs_daemon *d, crs_conn *c, const crp_thin_req *req, crp_thin_resp *resp,
                crs_scratch *sc)
{
    crs_session *s = c->sess;
    int rc;
    uint32_t id;
    switch (req->op) {
    case CRP_THIN_HEALTH:
        rc = cr_store_health(d->store);
        if (rc < 0)
            fail(resp, sc, rc);
        break;
    case CRP_THIN_PUT:
        do_put(d, s, req, resp, sc);
        break;
    case CRP_THIN_GET:
        do_get(d, s, req, resp, sc);
        break;
    case CRP_THIN_GET_COPY:
        do_get_copy(d, s, req, resp, sc);
        break;
    case CRP_THIN_PUT_TRANSIENT:
    case CRP_THIN_GET_TRANSIENT:
        do_transient(d, c, req, resp, sc);
        break;
    case CRP_THIN_EXIST:
    case CRP_THIN_REMOVE:
    case CRP_THIN_REPLICA_CLEAR:
        do_keys(d, req, resp, sc);
        break;
    case CRP_THIN_GET_SIZE:
        value_reply(resp, sc,
                    req->n_keys == 1 ? cr_store_get_size(d->store, req->keys[0])
                                     : crb_error(CR_INVALID_PARAMS, "get_size takes one key"));
        break;
    case CRP_THIN_REMOVE_REGEX:
        value_reply(
            resp, sc,
            cr_store_remove_by_regex(d->store, req->text, req->flags & CRP_THIN_FLAG_FORCE));
        break;
    case CRP_THIN_REMOVE_ALL:
        value_reply(resp, sc, cr_store_remove_all(d->store, req->flags & CRP_THIN_FLAG_FORCE));
        break;
    case CRP_THIN_REPLICAS:
        do_replicas(d, req, resp, sc);
        break;
    case CRP_THIN_SEGMENTS:
        do_segments(d, resp, sc);
        break;
    case CRP_THIN_REGISTER:
        do_register(d, c, req, resp, sc);
        break;
    case CRP_THIN_UNREGISTER:
        rc = req->id > UINT32_MAX ? crb_error(CR_ERR_ADDRESS_NOT_REGISTERED, "no such region")
                                  : crs_session_unregister(d, s, (uint32_t)req->id);
        if (rc < 0)
            fail(resp, sc, rc);
        break;
    case CRP_THIN_TABLE_CREATE:
        rc = crs_table_create(d, s, &id);
        value_reply(resp, sc, rc < 0 ? rc : (int64_t)id);
        break;
    case CRP_THIN_TABLE_DESTROY:
        rc = req->id > UINT32_MAX ? crb_error(CR_INVALID_PARAMS, "no such table")
                                  : crs_table_destroy(d, s, (uint32_t)req->id);
        if (rc < 0)
            fail(resp, sc, rc);
        break;
    case CRP_THIN_GET_SESSION_START:
    case CRP_THIN_GET_SESSION_END:
    case CRP_THIN_GET_RANGES:
    case CRP_THIN_PUT_SESSION_START:
    case CRP_THIN_PUT_RANGES:
    case CRP_THIN_PUT_SESSION_END:
    case CRP_THIN_PUT_SESSION_REVOKE:
        do_table_op(d, s, req, resp, sc);
        break;
    case CRP_THIN_STATS: {
        uint64_t *v = crs_scratch_alloc(sc, 8 * sizeof(uint64_t));
        if (v == NULL) {
            fail(resp, sc, CR_ERR_NO_MEMORY);
            break;
        }
        pthread_mutex_lock(&d->lock);
        v[0] = d->n_sessions;
        v[1] = d->n_conns;
        pthread_mutex_unlock(&d->lock);
        v[2] = atomic_load(&d->mapped_bytes);
        v[3] = atomic_load(&d->lb_used);
        v[4] = atomic_load(&d->regions);
        v[5] = atomic_load(&d->ctr.zero_copy_bytes);
        v[6] = atomic_load(&d->ctr.transient_bytes);
        v[7] = atomic_load(&d->ctr.sessions_closed);
        resp->fields |= CRP_THIN_R_VALS;
        resp->vals = v;
        resp->n_vals = 8;
        break;
    }
    default:
        fail(resp, sc, crb_error(CR_NOT_SUPPORTED, "%s is not served", crp_thin_op_name(req->op)));
        break;
    }
}
