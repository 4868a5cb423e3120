/*
 * get.c - the read paths, existence, size and removal.
 *
 * get: GET_REPLICA_LIST grants a read lease (the time of the request plus
 * lease_ttl_ms); the value is read from the best replica — this client's
 * own segment first, then the others in the master's order — failing over
 * to the next replica on a transfer error. If the lease ran out before the
 * transfer finished, the master may already have reused the memory, so the
 * call reports CR_LEASE_EXPIRED instead of returning the bytes.
 *
 * A copying get reads straight into the value it returns (the malloc'd
 * copy, or the room a crc_value_dest gave): one copy, off the wire or out
 * of the holder's shared memory; only where the engine needs registered
 * memory does it read through the staging buffer and copy out (staging.c).
 *
 * Once the transfers of a get (or of a batch round) are over, successful or
 * not, the client gives its reads back (RELEASE_LEASES with the tokens the
 * master handed out, one frame, no reply awaited), queued to go out ahead of
 * its next master request or from the heartbeat's tick within ~30 ms
 * (crc_master_send_later; CRESCENT_LEASE_RELEASE=now: written at once): the
 * master then frees a version that an upsert or a forced remove replaced
 * instead of a lease TTL later. Masters without the capability get nothing. A thread
 * may defer its releases (crc_release_defer; crescent-client does, to answer
 * its thin client first and give the reads back right after).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "store/internal.h"
#include "store/thin.h"

typedef struct dest_parts {
    void *const *bufs;
    const size_t *sizes;
    size_t n;
    bool registered; /* false: one malloc'd buffer, read through staging */
    size_t own_size; /* the size sizes points to for a value placed by a crc_value_dest */
} dest_parts;

/*
 * Deferred releases (crc_release_defer): the reads this thread's gets gave
 * back while deferring, kept for crc_release_flush. Keys are copies.
 */
typedef struct deferred_releases {
    cr_store *s;
    bool on;
    char **keys;
    uint64_t *tokens;
    size_t n, cap;
} deferred_releases;
static _Thread_local deferred_releases deferred;

static void send_releases(cr_store *s, char **keys, uint64_t *tokens, size_t m);

void crc_release_defer(bool on)
{
    deferred.on = on;
}

void crc_release_flush(void)
{
    deferred_releases *d = &deferred;
    if (d->n > 0 && d->s != NULL) {
        crc_guard g = {NULL};
        if (crc_enter(d->s, &g) == 0 && crc_check_open(d->s) == 0)
            send_releases(d->s, d->keys, d->tokens, d->n);
        crc_guard_release(&g);
    }
    for (size_t i = 0; i < d->n; i++)
        free(d->keys[i]);
    d->n = 0;
    if (d->cap > 64) { /* do not keep a large batch's arrays for ever */
        free(d->keys);
        free(d->tokens);
        d->keys = NULL;
        d->tokens = NULL;
        d->cap = 0;
    }
    if (!d->on && d->cap > 0) {
        free(d->keys);
        free(d->tokens);
        d->keys = NULL;
        d->tokens = NULL;
        d->cap = 0;
    }
}

/* Keep m releases for crc_release_flush; false (nothing kept) if out of memory. */
static bool defer_releases(cr_store *s, char **keys, uint64_t *tokens, size_t m)
{
    deferred_releases *d = &deferred;
    if (d->s != s && d->n > 0)
        crc_release_flush(); /* another store's: send them now */
    d->s = s;
    if (d->n + m > d->cap) {
        size_t cap = d->cap ? d->cap : 16;
        while (cap < d->n + m)
            cap *= 2;
        char **nk = realloc(d->keys, cap * sizeof(*nk));
        if (nk == NULL)
            return false;
        d->keys = nk;
        uint64_t *nt = realloc(d->tokens, cap * sizeof(*nt));
        if (nt == NULL)
            return false;
        d->tokens = nt;
        d->cap = cap;
    }
    size_t at = d->n;
    for (size_t i = 0; i < m; i++) {
        char *k = strdup(keys[i]);
        if (k == NULL) {
            for (size_t j = at; j < d->n; j++)
                free(d->keys[j]);
            d->n = at;
            return false;
        }
        d->keys[d->n] = k;
        d->tokens[d->n++] = tokens[i];
    }
    return true;
}

/* Give back the reads of keys[i] granted with tokens[i] (0 = none). */
static void release_reads(cr_store *s, char **keys, uint64_t *tokens, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] == 0)
            continue;
        keys[m] = keys[i];
        tokens[m++] = tokens[i];
    }
    if (m == 0 || !(crc_master_caps(s->master) & CRP_RPC_CAP_LEASE_RELEASE))
        return;
    if (deferred.on && defer_releases(s, keys, tokens, m))
        return;
    send_releases(s, keys, tokens, m);
}

static void send_releases(cr_store *s, char **keys, uint64_t *tokens, size_t m)
{
    crp_rpc_req req = {.op = CRP_RPC_RELEASE_LEASES};
    req.u.leases = (crp_rpc_leases_req){m, keys, tokens};
    int rc = s->release_at_once ? crc_master_send(s->master, &req, (int)s->rpc_timeout_ms)
                                : crc_master_send_later(s->master, &req, (int)s->rpc_timeout_ms);
    if (rc < 0)
        crb_log(CRB_LOG_DEBUG, "store %s: %s (the reads stay leased until their TTL)",
                s->segment_name, cr_last_error_message());
}

/* Room for a copying get's value: malloc, or the caller's crc_value_dest. */
static int value_alloc(const crc_value_dest *vd, size_t index, uint64_t size, void **out,
                       bool *registered)
{
    *registered = false;
    if (vd != NULL)
        return vd->alloc(vd->ctx, index, size, out, registered);
    *out = malloc(size ? size : 1);
    return *out != NULL
               ? 0
               : crb_error(CR_ERR_NO_MEMORY, "a value of %llu bytes", (unsigned long long)size);
}

static void value_release(const crc_value_dest *vd, void *p)
{
    if (vd != NULL && p != NULL)
        vd->release(vd->ctx, p);
    else
        free(p);
}

void crc_order_replicas(cr_store *s, crp_rpc_replica *r, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        if (strcmp(r[i].segment, s->segment_name) == 0) {
            crp_rpc_replica t = r[0];
            r[0] = r[i];
            r[i] = t;
            break;
        }
    }
}

static int read_from(cr_store *s, const crp_rpc_replica *rep, const dest_parts *d, uint64_t size)
{
    if (d->registered) {
        uint64_t off = 0;
        for (size_t i = 0; i < d->n && off < size; i++) {
            uint64_t len = d->sizes[i] < size - off ? d->sizes[i] : size - off;
            int rc = crc_transfer(s, CR_OP_READ, rep, 1, off, d->bufs[i], len);
            if (rc < 0)
                return rc;
            off += len;
        }
        return 0;
    }
    uint8_t *out = d->bufs[0];
    if (crc_direct_ok(s)) { /* straight into the value: one copy */
        int rc = crc_transfer_direct(s, CR_OP_READ, rep, 1, 0, out, size);
        if (rc != CR_ERR_NEEDS_REGISTERED)
            return rc;
        crc_direct_refused(s);
    }
    for (uint64_t done = 0; done < size;) {
        crb_oa_allocation a;
        uint8_t *stage;
        uint64_t want = size - done;
        int rc = crc_staging_alloc(s, want, want < (64u << 10) ? want : (64u << 10), &a, &stage);
        if (rc < 0)
            return rc;
        uint64_t chunk = a.size < want ? a.size : want;
        rc = crc_transfer(s, CR_OP_READ, rep, 1, done, stage, chunk);
        if (rc == 0)
            memcpy(out + done, stage, chunk);
        crc_staging_free(s, &a);
        if (rc < 0)
            return rc;
        done += chunk;
    }
    return 0;
}

/* A speculative read (get_value), started once the get is on its way to the master. */
typedef struct spec_read {
    cr_store *s;
    void *local;       /* where to: the caller's registered buffer, or a value allocated */
    bool unregistered; /* ... for a copying get (CR_OP_LOCAL_UNREGISTERED) */
    crc_loc at;
    cr_batch_id batch;
    bool started;
} spec_read;

static void spec_start(void *arg)
{
    spec_read *sr = arg;
    sr->started = crc_read_start(sr->s, sr->at.segment, sr->at.addr, sr->local, sr->at.size,
                                 sr->unregistered, &sr->batch) == 0;
    if (sr->started)
        atomic_fetch_add(&sr->s->spec_reads, 1);
}

/* Fetch replicas, check the destination capacity, read with failover. */
static int64_t get_value(cr_store *s, const char *key, dest_parts *d, void **alloc_out,
                         const crc_value_dest *vd)
{
    int rc = crc_check_open(s);
    if (rc == 0)
        rc = crc_check_key(key);
    if (rc < 0)
        return rc;
    uint64_t t0 = crb_now_ms();
    crp_rpc_req req = {.op = CRP_RPC_GET_REPLICA_LIST};
    req.u.key.key = (char *)key;
    crp_rpc_resp resp;
    /* Read where this key's version was last read while the master answers (loc_cache.c):
     * kept only if the reply names that version and replica again. A copying get reads
     * straight into a value of the cached size, allocated now (kept for the reply's value
     * when the sizes agree). */
    spec_read sr = {.s = s};
    void *pre = NULL;
    bool pre_direct = false;
    int pre_rc = 0;
    char pre_err[256] = "";
    bool cached =
        s->loc != NULL && crc_loc_lookup(s->loc, key, &sr.at) && sr.at.size >= s->spec_min;
    if (cached && alloc_out == NULL) {
        cached = d->registered && d->n == 1 && sr.at.size <= d->sizes[0];
        sr.local = cached ? d->bufs[0] : NULL;
    } else if (cached) {
        /* (a refusal is the answer for that size: not asked again below) */
        pre_rc = crc_direct_ok(s) ? value_alloc(vd, 0, sr.at.size, &pre, &pre_direct) : 1;
        if (pre_rc < 0)
            snprintf(pre_err, sizeof(pre_err), "%s", cr_last_error_message());
        cached = pre_rc == 0;
        sr.local = pre;
        sr.unregistered = !pre_direct;
    }
    rc = crc_call_sent(s, &req, &resp, cached ? spec_start : NULL, &sr);
    bool spec_on = sr.started, spec_ok = false;
    crc_loc spec = sr.at;
    cr_batch_id spec_batch = sr.batch;
    if (spec_on) {
        bool confirmed =
            rc == 0 && resp.status == 0 &&
            crc_loc_confirms(&spec, resp.u.get.version, resp.u.get.replicas, resp.u.get.n_replicas);
        spec_ok = crc_read_finish(s, spec_batch, !confirmed) == 0 && confirmed;
        if (spec_ok)
            atomic_fetch_add(&s->spec_hits, 1);
        else
            crc_loc_forget(s->loc, key); /* (stored again below after a good read) */
    }
    bool answered = rc == 0 && resp.status == 0 && resp.u.get.n_replicas > 0;
    if (pre != NULL && !(answered && resp.u.get.replicas[0].size == spec.size)) {
        value_release(vd, pre); /* another size, or no value */
        pre = NULL;
    }
    if (rc < 0)
        return rc;
    if (!answered) {
        rc = resp.status < 0 ? resp.status : CR_REPLICA_IS_NOT_READY;
        crb_error(rc, "get '%s': %s", key, resp.message ? resp.message : cr_strerror(rc));
        crp_rpc_resp_clear(&resp);
        return rc;
    }
    uint64_t size = resp.u.get.replicas[0].size;
    uint64_t deadline = t0 + resp.u.get.lease_ttl_ms;
    uint64_t cap = 0;
    for (size_t i = 0; i < d->n; i++)
        cap += d->sizes[i];
    if (alloc_out != NULL) {
        void *buf = pre;
        bool direct = pre_direct;
        if (pre == NULL && pre_rc < 0 && size == spec.size)
            rc = crb_error(pre_rc, "%s", pre_err);
        else
            rc = pre != NULL ? 0 : value_alloc(vd, 0, size, &buf, &direct);
        if (rc < 0) {
            crp_rpc_resp_clear(&resp);
            return crb_error(rc, "get '%s': no room for %llu bytes: %s", key,
                             (unsigned long long)size, cr_last_error_message());
        }
        *alloc_out = buf;
        d->bufs = (void *const *)alloc_out;
        cap = size;
        if (direct) { /* registered memory: read into it, no staging */
            d->own_size = (size_t)size;
            d->sizes = &d->own_size;
            d->registered = true;
        }
    } else if (size > cap) {
        crp_rpc_resp_clear(&resp);
        return crb_error(CR_BUFFER_OVERFLOW, "get '%s': the value has %llu bytes, the buffer %llu",
                         key, (unsigned long long)size, (unsigned long long)cap);
    }
    rc = spec_ok ? 0 : CR_TRANSFER_FAIL;
    if (!spec_ok)
        crc_order_replicas(s, resp.u.get.replicas, resp.u.get.n_replicas);
    for (size_t r = 0; r < resp.u.get.n_replicas && rc < 0; r++) {
        rc = size == 0 ? 0 : read_from(s, &resp.u.get.replicas[r], d, size);
        if (rc == 0 && s->loc != NULL && size >= s->spec_min) /* (smaller: never read so) */
            crc_loc_store(s->loc, key, resp.u.get.version, &resp.u.get.replicas[r]);
    }
    uint64_t token = resp.u.get.lease_token;
    crp_rpc_resp_clear(&resp);
    char detail[400] = "";
    if (rc < 0) {
        crb_error(CR_TRANSFER_FAIL, "get '%s': every replica failed: %s", key,
                  cr_last_error_message());
        snprintf(detail, sizeof(detail), "%s", cr_last_error_message());
    }
    char *k = (char *)key;
    release_reads(s, &k, &token, 1); /* may record its own detail: restore ours */
    if (rc < 0)
        return crb_error(CR_TRANSFER_FAIL, "%s", detail);
    if (crb_now_ms() >= deadline)
        return crb_error(CR_LEASE_EXPIRED,
                         "get '%s': the read lease ran out during the transfer; the bytes may "
                         "be stale and were not returned",
                         key);
    return (int64_t)size;
}

int64_t cr_store_get(cr_store *s, const char *key, void **value_out)
{
    CRC_ENTER(s);
    if (value_out == NULL)
        return crb_error(CR_INVALID_PARAMS, "get: value_out is NULL");
    if (cr_store_is_thin(s))
        return crc_thin_get(s, key, value_out);
    return crc_get_to(s, key, NULL, value_out);
}

int64_t crc_get_to(cr_store *s, const char *key, const crc_value_dest *vd, void **value_out)
{
    void *buf = NULL;
    size_t zero = 0;
    dest_parts d = {NULL, &zero, 1, false, 0};
    int64_t rc = get_value(s, key, &d, &buf, vd);
    if (rc < 0) {
        value_release(vd, buf);
        return rc;
    }
    *value_out = buf;
    return rc;
}

/* cr_value_alloc seen as a crc_value_dest (unregistered memory). */
static int user_alloc(void *ctx, size_t index, uint64_t size, void **ptr, bool *registered)
{
    (void)index;
    const cr_value_alloc *a = ctx;
    void *p = NULL;
    int rc = a->alloc(a->ctx, size, &p);
    if (rc >= 0 && p == NULL && size > 0)
        rc = crb_error(CR_INVALID_PARAMS, "the value allocator gave NULL for %llu bytes",
                       (unsigned long long)size);
    if (rc < 0)
        return rc;
    *ptr = p;
    *registered = false;
    return 0;
}

static void user_release(void *ctx, void *ptr)
{
    const cr_value_alloc *a = ctx;
    a->release(a->ctx, ptr);
}

int64_t cr_store_get_alloc(cr_store *s, const char *key, const cr_value_alloc *a, void **value_out)
{
    CRC_ENTER(s);
    if (value_out == NULL || a == NULL || a->alloc == NULL || a->release == NULL)
        return crb_error(CR_INVALID_PARAMS, "get_alloc: NULL value_out or allocator");
    if (cr_store_is_thin(s)) { /* the daemon's copy, copied into the caller's room */
        void *v = NULL;
        int64_t rc = crc_thin_get(s, key, &v);
        if (rc < 0)
            return rc;
        void *p = NULL;
        bool reg;
        int arc = user_alloc((void *)a, 0, (uint64_t)rc, &p, &reg);
        if (arc == 0 && rc > 0)
            memcpy(p, v, (size_t)rc);
        free(v);
        if (arc < 0)
            return arc;
        *value_out = p;
        return rc;
    }
    crc_value_dest vd = {user_alloc, user_release, (void *)a};
    return crc_get_to(s, key, &vd, value_out);
}

int64_t cr_store_get_into(cr_store *s, const char *key, void *buf, size_t cap)
{
    CRC_ENTER(s);
    if (buf == NULL && cap > 0)
        return crb_error(CR_INVALID_PARAMS, "get_into '%s': NULL buffer", key ? key : "");
    if (cr_store_is_thin(s))
        return crc_thin_get_into(s, key, &buf, &cap, 1);
    dest_parts d = {&buf, &cap, 1, true, 0};
    return get_value(s, key, &d, NULL, NULL);
}

int64_t cr_store_get_into_multi(cr_store *s, const char *key, void *const *bufs,
                                const size_t *sizes, size_t n)
{
    CRC_ENTER(s);
    if (n > 0 && (bufs == NULL || sizes == NULL))
        return crb_error(CR_INVALID_PARAMS, "get_into_multi: NULL arrays");
    if (cr_store_is_thin(s))
        return crc_thin_get_into(s, key, bufs, sizes, n);
    dest_parts d = {bufs, sizes, n, true, 0};
    return get_value(s, key, &d, NULL, NULL);
}

/*
 * One master round of a batch get: keys[idx[j]] for j < m, each checked.
 * One BATCH_GET_REPLICA_LIST (one lease start for all), one engine batch
 * reading each value from its best replica, then, one key at a time, every
 * replica of the keys whose read failed (failover, as get_value) and, for
 * copying gets, the values that did not fit the free staging space (read in
 * chunks). Copying gets (values_out != NULL) read straight into the values
 * they return (crc_direct_ok) or else into staging and copy out;
 * values_out[idx[j]] is set only for keys that succeed. Sets results[idx[j]]
 * to the size or a failure, CR_LEASE_EXPIRED if the lease ran out before the
 * round finished. Returns 0, or the failure of the master call as a whole
 * (results untouched then).
 */
static int batch_get_round(cr_store *s, const char *const *keys, const dest_parts *dests,
                           const size_t *idx, size_t m, void **values_out, int64_t *results,
                           const crc_value_dest *vd)
{
    int rc = 0;
    char **ks = calloc(m, sizeof(*ks));
    int64_t *res = calloc(m, sizeof(*res));
    void **vals = calloc(m, sizeof(*vals));               /* copying: malloc'd values */
    crb_oa_allocation *stage = calloc(m, sizeof(*stage)); /* copying: staged values */
    uint8_t **stage_ptr = calloc(m, sizeof(*stage_ptr));  /* NULL: not staged */
    uint8_t *retry = calloc(m, 1);                        /* read one key at a time */
    bool *direct = calloc(m, sizeof(*direct)); /* copying: vd placed it in registered memory */
    cr_transfer_request *reqs = NULL;
    size_t *task_pos = NULL;
    bool *failed = NULL;
    if (ks == NULL || res == NULL || vals == NULL || stage == NULL || stage_ptr == NULL ||
        retry == NULL || direct == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch get of %zu keys", m);
        goto out_free;
    }
    for (size_t j = 0; j < m; j++)
        ks[j] = (char *)keys[idx[j]];
    uint64_t t0 = crb_now_ms();
    crp_rpc_req req = {.op = CRP_RPC_BATCH_GET_REPLICA_LIST};
    req.u.keys = (crp_rpc_keys_req){m, ks};
    crp_rpc_resp resp;
    rc = crc_call(s, &req, &resp);
    if (rc < 0)
        goto out_free;
    if (resp.status < 0 || resp.u.batch_get.n != m) {
        rc = resp.status < 0 ? resp.status
                             : crb_error(CR_RPC_FAIL, "batch get: %zu results for %zu keys",
                                         resp.u.batch_get.n, m);
        goto out_resp;
    }
    uint64_t deadline = t0 + resp.u.batch_get.lease_ttl_ms;
    size_t n_tasks = 0;
    for (size_t j = 0; j < m; j++)
        n_tasks += values_out != NULL ? 1 : dests[idx[j]].n;
    reqs = calloc(n_tasks ? n_tasks : 1, sizeof(*reqs));
    task_pos = calloc(n_tasks ? n_tasks : 1, sizeof(*task_pos));
    failed = calloc(n_tasks ? n_tasks : 1, sizeof(*failed));
    if (reqs == NULL || task_pos == NULL || failed == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch get transfers");
        goto out_resp;
    }
    size_t t = 0;
    bool direct_copy = values_out != NULL && crc_direct_ok(s); /* read into the values */
    for (size_t j = 0; j < m; j++) {
        crp_rpc_key_result *kr = &resp.u.batch_get.results[j];
        const dest_parts *d = values_out != NULL ? NULL : &dests[idx[j]];
        if (kr->status < 0 || kr->n_replicas == 0) {
            res[j] = kr->status < 0 ? kr->status : CR_REPLICA_IS_NOT_READY;
            continue;
        }
        crc_order_replicas(s, kr->replicas, kr->n_replicas);
        uint64_t size = kr->replicas[0].size;
        if (values_out != NULL) {
            int ar = value_alloc(vd, idx[j], size, &vals[j], &direct[j]);
            if (ar < 0) {
                vals[j] = NULL;
                res[j] = crb_error(ar, "get '%s': no room for %llu bytes: %s", ks[j],
                                   (unsigned long long)size, cr_last_error_message());
                continue;
            }
        } else {
            uint64_t cap = 0;
            for (size_t k = 0; k < d->n; k++)
                cap += d->sizes[k];
            if (size > cap) {
                res[j] = CR_BUFFER_OVERFLOW;
                continue;
            }
        }
        res[j] = (int64_t)size;
        if (size == 0)
            continue;
        cr_segment_handle h;
        if (crc_segment_handle(s, kr->replicas[0].segment, &h) < 0) {
            retry[j] = 1; /* the other replicas may still be reachable */
            continue;
        }
        if (values_out != NULL && (direct[j] || direct_copy)) {
            int op = direct[j] ? CR_OP_READ : CR_OP_READ | CR_OP_LOCAL_UNREGISTERED;
            reqs[t] = (cr_transfer_request){op, vals[j], h, kr->replicas[0].addr, size};
            task_pos[t++] = j;
            continue;
        }
        if (values_out != NULL) {
            if (crc_staging_try_alloc(s, size, &stage[j], &stage_ptr[j]) < 0) {
                retry[j] = 1; /* larger than the free staging space: chunks, alone */
                continue;
            }
            reqs[t] =
                (cr_transfer_request){CR_OP_READ, stage_ptr[j], h, kr->replicas[0].addr, size};
            task_pos[t++] = j;
            continue;
        }
        uint64_t off = 0;
        for (size_t k = 0; k < d->n && off < size; k++) {
            uint64_t len = d->sizes[k] < size - off ? d->sizes[k] : size - off;
            if (len == 0)
                continue;
            reqs[t] =
                (cr_transfer_request){CR_OP_READ, d->bufs[k], h, kr->replicas[0].addr + off, len};
            task_pos[t++] = j;
            off += len;
        }
    }
    if (values_out != NULL)
        crc_prefault_values(vals, res, m); /* new values: often never-touched pages */
    if (direct_copy)
        crc_run_batch_direct(s, reqs, t, failed);
    else
        crc_run_batch(s, reqs, t, failed);
    for (size_t k = 0; k < t; k++)
        if (failed[k])
            retry[task_pos[k]] = 1;
    for (size_t j = 0; j < m; j++) {
        if (stage_ptr[j] == NULL)
            continue;
        if (!retry[j])
            memcpy(vals[j], stage_ptr[j], (size_t)res[j]);
        crc_staging_free(s, &stage[j]);
    }
    /* One key at a time, with the staging space free again: every replica in order. */
    for (size_t j = 0; j < m; j++) {
        if (!retry[j] || res[j] < 0)
            continue;
        crp_rpc_key_result *kr = &resp.u.batch_get.results[j];
        size_t zero = 0;
        dest_parts copy = {&vals[j], &zero, 1, false, (size_t)res[j]};
        if (direct[j]) {
            copy.sizes = &copy.own_size;
            copy.registered = true;
        }
        const dest_parts *d = values_out != NULL ? &copy : &dests[idx[j]];
        int one = CR_TRANSFER_FAIL;
        for (size_t r = 0; r < kr->n_replicas && one < 0; r++)
            one = read_from(s, &kr->replicas[r], d, (uint64_t)res[j]);
        if (one < 0)
            res[j] = crb_error(CR_TRANSFER_FAIL, "get '%s': every replica failed: %s", ks[j],
                               cr_last_error_message());
    }
    bool expired = crb_now_ms() >= deadline;
    /* Every transfer of the round is over: give the reads back. */
    char **rel_keys = malloc(m * sizeof(*rel_keys));
    uint64_t *rel_tokens = malloc(m * sizeof(*rel_tokens));
    if (rel_keys != NULL && rel_tokens != NULL) {
        for (size_t j = 0; j < m; j++) {
            rel_keys[j] = ks[j];
            rel_tokens[j] = resp.u.batch_get.results[j].status == 0
                                ? resp.u.batch_get.results[j].lease_token
                                : 0;
        }
        release_reads(s, rel_keys, rel_tokens, m);
    }
    free(rel_keys);
    free(rel_tokens);
    if (expired)
        for (size_t j = 0; j < m; j++)
            if (res[j] >= 0)
                res[j] = crb_error(CR_LEASE_EXPIRED,
                                   "get '%s': the read lease ran out during the transfer; the "
                                   "bytes may be stale and were not returned",
                                   ks[j]);
    for (size_t j = 0; j < m; j++) {
        results[idx[j]] = res[j];
        if (values_out != NULL && res[j] >= 0) {
            values_out[idx[j]] = vals[j];
            vals[j] = NULL;
        }
    }
    rc = 0;
out_resp:
    crp_rpc_resp_clear(&resp);
out_free:
    for (size_t j = 0; vals != NULL && j < m; j++)
        value_release(vd, vals[j]);
    free(direct);
    free(failed);
    free(task_pos);
    free(reqs);
    free(retry);
    free(stage_ptr);
    free(stage);
    free(vals);
    free(res);
    free(ks);
    return rc;
}

/*
 * Every batch get: dests[i] is key i's registered destination (unused for
 * copying gets, values_out != NULL). results[i] is 0 on entry, or a failure
 * found by the caller. Keys go to the master in rounds of at most
 * CRC_BATCH_KEYS keys (batch_get_round). A round reads the keys that are
 * ready as soon as one is (crc_call); keys whose disk copy is still being
 * staged by its holder (CR_ERR_OFFLOAD_STAGING) go to the master again in
 * later rounds, until the RPC timeout from the start: so a batch reads its
 * staged values while the holder is still reading the rest, and releases
 * their staging space at once (four readers of 32 MiB batches each holding
 * half-staged batches would otherwise fill a 64 MiB staging area and wait
 * for one another). Returns 0, or the failure of the first round that
 * failed as a whole (its keys get that code as their result).
 */
static int batch_get_values(cr_store *s, const char *const *keys, const dest_parts *dests, size_t n,
                            void **values_out, int64_t *results, const crc_value_dest *vd)
{
    int first = 0;
    size_t round_cap = n < CRC_BATCH_KEYS ? (n ? n : 1) : CRC_BATCH_KEYS;
    size_t *idx = calloc(round_cap, sizeof(*idx));
    bool *todo = calloc(n, sizeof(*todo)); /* still to ask the master for */
    if (idx == NULL || todo == NULL) {
        free(idx);
        free(todo);
        return crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
    }
    for (size_t i = 0; i < n; i++) {
        if (results[i] == 0)
            results[i] = crc_check_key(keys[i]);
        todo[i] = results[i] == 0;
    }
    uint64_t deadline = crb_now_ms() + s->rpc_timeout_ms;
    crc_stage_deadline(deadline);
again:
    for (size_t i = 0; i < n;) {
        size_t m = 0, key_bytes = 0;
        for (; i < n && m < round_cap; i++) {
            if (!todo[i])
                continue;
            size_t kl = strlen(keys[i]);
            if (m > 0 && key_bytes + kl > CRC_BATCH_KEY_BYTES)
                break;
            key_bytes += kl;
            todo[i] = false;
            idx[m++] = i;
        }
        int rc = m > 0 ? batch_get_round(s, keys, dests, idx, m, values_out, results, vd) : 0;
        if (rc < 0) {
            for (size_t j = 0; j < m; j++)
                results[idx[j]] = rc;
            first = first < 0 ? first : rc;
        }
    }
    if (crb_now_ms() < deadline) { /* keys still being staged: ask for them again */
        bool staging = false;
        for (size_t i = 0; i < n; i++) {
            if (results[i] == CR_ERR_OFFLOAD_STAGING) {
                results[i] = 0;
                todo[i] = staging = true;
            }
        }
        if (staging)
            goto again;
    }
    crc_stage_deadline(0);
    free(todo);
    free(idx);
    return first;
}

int cr_store_batch_get_into(cr_store *s, const char *const *keys, void *const *bufs,
                            const size_t *caps, size_t n, int64_t *results)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_batch_get_into1(s, keys, bufs, caps, n, results);
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || bufs == NULL || caps == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch_get_into: NULL array");
    dest_parts *dests = calloc(n, sizeof(*dests));
    if (dests == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
    for (size_t i = 0; i < n; i++) {
        dests[i] = (dest_parts){&bufs[i], &caps[i], 1, true, 0};
        results[i] = bufs[i] == NULL && caps[i] > 0
                         ? crb_error(CR_INVALID_PARAMS, "batch_get_into '%s': NULL buffer",
                                     keys[i] ? keys[i] : "")
                         : 0;
    }
    rc = batch_get_values(s, keys, dests, n, NULL, results, NULL);
    free(dests);
    return rc;
}

int cr_store_batch_get_into_multi(cr_store *s, const char *const *keys, void *const *const *bufs,
                                  const size_t *const *sizes, const size_t *counts, size_t n,
                                  int64_t *results)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_batch_get_into(s, keys, bufs, sizes, counts, n, results);
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || bufs == NULL || sizes == NULL || counts == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch_get_into_multi: NULL array");
    dest_parts *dests = calloc(n, sizeof(*dests));
    if (dests == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
    for (size_t i = 0; i < n; i++) {
        dests[i] = (dest_parts){bufs[i], sizes[i], counts[i], true, 0};
        results[i] = 0;
        if (counts[i] > 0 && (bufs[i] == NULL || sizes[i] == NULL)) {
            results[i] =
                crb_error(CR_INVALID_PARAMS, "batch_get_into_multi: key %zu: NULL arrays", i);
            continue;
        }
        for (size_t k = 0; k < counts[i] && results[i] == 0; k++)
            if (bufs[i][k] == NULL && sizes[i][k] > 0)
                results[i] = crb_error(CR_INVALID_PARAMS,
                                       "batch_get_into_multi: key %zu: buffer %zu is NULL", i, k);
    }
    rc = batch_get_values(s, keys, dests, n, NULL, results, NULL);
    free(dests);
    return rc;
}

int cr_store_batch_get(cr_store *s, const char *const *keys, size_t n, void **values_out,
                       int64_t *results)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_batch_get(s, keys, n, values_out, results);
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || values_out == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch_get: NULL array");
    for (size_t i = 0; i < n; i++) {
        values_out[i] = NULL;
        results[i] = 0;
    }
    batch_get_values(s, keys, NULL, n, values_out, results, NULL);
    return 0; /* everything is reported per key, as one get per key did */
}

int crc_batch_get_to(cr_store *s, const char *const *keys, size_t n, const crc_value_dest *vd,
                     void **values_out, int64_t *results)
{
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        values_out[i] = NULL;
        results[i] = 0;
    }
    batch_get_values(s, keys, NULL, n, values_out, results, vd);
    return 0;
}

int64_t cr_store_get_size(cr_store *s, const char *key)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_get_size(s, key);
    int rc = crc_check_open(s);
    if (rc == 0)
        rc = crc_check_key(key);
    if (rc < 0)
        return rc;
    crp_rpc_req req = {.op = CRP_RPC_QUERY_KEY};
    req.u.key.key = (char *)key;
    crp_rpc_resp resp;
    rc = crc_call(s, &req, &resp);
    if (rc < 0)
        return rc;
    int64_t out = resp.status;
    if (resp.status == 0) {
        bool complete = resp.u.key_info.n_replicas > 0;
        for (size_t i = 0; i < resp.u.key_info.n_replicas; i++)
            complete = complete && resp.u.key_info.replicas[i].status == CRP_RPC_REPLICA_COMPLETE;
        out = complete ? (int64_t)resp.u.key_info.value_size : CR_OBJECT_NOT_FOUND;
    }
    crp_rpc_resp_clear(&resp);
    return out;
}

int cr_store_exist(cr_store *s, const char *key)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_exist(s, key);
    int rc = crc_check_open(s);
    if (rc == 0)
        rc = crc_check_key(key);
    if (rc < 0)
        return rc;
    crp_rpc_req req = {.op = CRP_RPC_EXIST};
    req.u.key.key = (char *)key;
    crp_rpc_resp resp;
    rc = crc_call(s, &req, &resp);
    if (rc < 0)
        return rc;
    rc = resp.status < 0 ? resp.status : (resp.u.exist.exists ? 1 : 0);
    crp_rpc_resp_clear(&resp);
    return rc;
}

/* Run an op whose reply is one status per key. */
static int keys_op(cr_store *s, int op, const char *const *keys, size_t n, bool force, int *results)
{
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch: NULL array");
    char **ks = calloc(n, sizeof(*ks));
    size_t *map = calloc(n, sizeof(*map));
    size_t nv = 0;
    if (ks == NULL || map == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
        goto out_free;
    }
    for (size_t i = 0; i < n; i++) {
        results[i] = crc_check_key(keys[i]);
        if (results[i] == 0) {
            ks[nv] = (char *)keys[i];
            map[nv++] = i;
        }
    }
    if (nv == 0)
        goto out_free;
    crp_rpc_req req = {.op = (uint16_t)op};
    if (op == CRP_RPC_BATCH_REMOVE)
        req.u.batch_remove = (crp_rpc_batch_remove_req){nv, ks, force};
    else
        req.u.keys = (crp_rpc_keys_req){nv, ks};
    crp_rpc_resp resp;
    rc = crc_call(s, &req, &resp);
    if (rc < 0)
        goto out_free;
    if (resp.status < 0 || resp.u.statuses.n != nv) {
        rc = resp.status < 0 ? resp.status : CR_RPC_FAIL;
    } else {
        for (size_t j = 0; j < nv; j++)
            results[map[j]] = resp.u.statuses.results[j];
    }
    crp_rpc_resp_clear(&resp);
out_free:
    free(ks);
    free(map);
    return rc;
}

int cr_store_batch_exist(cr_store *s, const char *const *keys, size_t n, int *results)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_keys_op(s, CRP_THIN_EXIST, keys, n, false, results);
    return keys_op(s, CRP_RPC_BATCH_EXIST, keys, n, false, results);
}

int cr_store_batch_remove(cr_store *s, const char *const *keys, size_t n, bool force, int *results)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_keys_op(s, CRP_THIN_REMOVE, keys, n, force, results);
    return keys_op(s, CRP_RPC_BATCH_REMOVE, keys, n, force, results);
}

int cr_store_remove(cr_store *s, const char *key, bool force)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_remove(s, key, force);
    int rc = crc_check_open(s);
    if (rc == 0)
        rc = crc_check_key(key);
    if (rc < 0)
        return rc;
    crp_rpc_req req = {.op = CRP_RPC_REMOVE};
    req.u.remove = (crp_rpc_remove_req){(char *)key, force};
    crp_rpc_resp resp;
    rc = crc_call(s, &req, &resp);
    if (rc < 0)
        return rc;
    rc = resp.status;
    if (rc < 0)
        crb_error(rc, "remove '%s': %s", key, resp.message ? resp.message : cr_strerror(rc));
    crp_rpc_resp_clear(&resp);
    return rc;
}

static int64_t count_op(cr_store *s, crp_rpc_req *req)
{
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    crp_rpc_resp resp;
    rc = crc_call(s, req, &resp);
    if (rc < 0)
        return rc;
    int64_t out = resp.status < 0 ? resp.status : (int64_t)resp.u.count.count;
    crp_rpc_resp_clear(&resp);
    return out;
}

int64_t cr_store_remove_by_regex(cr_store *s, const char *pattern, bool force)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_remove_regex(s, pattern, force);
    if (pattern == NULL)
        return crb_error(CR_INVALID_PARAMS, "remove_by_regex: NULL pattern");
    crp_rpc_req req = {.op = CRP_RPC_REMOVE_BY_REGEX};
    req.u.regex = (crp_rpc_regex_req){(char *)pattern, force};
    return count_op(s, &req);
}

int64_t cr_store_remove_all(cr_store *s, bool force)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_remove_all(s, force);
    crp_rpc_req req = {.op = CRP_RPC_REMOVE_ALL};
    req.u.force.force = force;
    return count_op(s, &req);
}
