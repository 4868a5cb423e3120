/*
 * put.c - the write paths.
 *
 * put: PUT_START (the master allocates replicas on distinct segments) →
 * write every replica through the engine → PUT_END, or PUT_REVOKE on any
 * failure so the object never becomes visible half-written. Copying puts
 * gather the value into the local buffer chunk by chunk (a value larger
 * than the free staging space is moved in several rounds instead of
 * failing); zero-copy puts write straight from the caller's registered
 * memory. A key that already exists complete is left alone and the put
 * succeeds (Mooncake's behaviour); upsert replaces it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "store/internal.h"

/* A value as a list of parts; `registered` parts are written directly. */
typedef struct value_parts {
    const void *const *parts;
    const size_t *sizes;
    size_t n;
    bool registered;
    uint64_t total;
} value_parts;

static int end_or_revoke_within(cr_store *s, const char *key, bool upsert, bool ok, int timeout_ms)
{
    crp_rpc_req req = {.op = ok ? (upsert ? CRP_RPC_UPSERT_END : CRP_RPC_PUT_END)
                                : (upsert ? CRP_RPC_UPSERT_REVOKE : CRP_RPC_PUT_REVOKE)};
    req.u.owner_key = (crp_rpc_owner_key_req){s->client_id, (char *)key};
    crp_rpc_resp resp;
    int rc = crc_master_call(s->master, &req, &resp, timeout_ms);
    if (rc < 0)
        return rc;
    rc = resp.status;
    if (rc < 0)
        crb_error(rc, "%s of '%s': %s", crp_rpc_op_name(req.op), key,
                  resp.message ? resp.message : cr_strerror(rc));
    crp_rpc_resp_clear(&resp);
    return rc;
}

static int end_or_revoke(cr_store *s, const char *key, bool upsert, bool ok)
{
    return end_or_revoke_within(s, key, upsert, ok, (int)s->rpc_timeout_ms);
}

/* Write the value into every replica. */
static int write_replicas(cr_store *s, const crp_rpc_replica *reps, size_t n_reps,
                          const value_parts *v)
{
    if (v->registered) {
        uint64_t off = 0;
        for (size_t i = 0; i < v->n; i++) {
            int rc =
                crc_transfer(s, CR_OP_WRITE, reps, n_reps, off, (void *)v->parts[i], v->sizes[i]);
            if (rc < 0)
                return rc;
            off += v->sizes[i];
        }
        return 0;
    }
    /* Copying: gather chunks into staging and write each chunk. */
    uint64_t done = 0;
    size_t part = 0, part_off = 0;
    while (done < v->total) {
        crk_oa_allocation a;
        uint8_t *stage;
        uint64_t want = v->total - done;
        int rc = crc_staging_alloc(s, want, want < (64u << 10) ? want : (64u << 10), &a, &stage);
        if (rc < 0)
            return rc;
        uint64_t chunk = a.size < want ? a.size : want;
        for (uint64_t filled = 0; filled < chunk;) {
            size_t take = v->sizes[part] - part_off;
            if (take > chunk - filled)
                take = (size_t)(chunk - filled);
            memcpy(stage + filled, (const uint8_t *)v->parts[part] + part_off, take);
            filled += take;
            part_off += take;
            if (part_off == v->sizes[part]) {
                part++;
                part_off = 0;
            }
        }
        rc = crc_transfer(s, CR_OP_WRITE, reps, n_reps, done, stage, chunk);
        crc_staging_free(s, &a);
        if (rc < 0)
            return rc;
        done += chunk;
    }
    return 0;
}

static int put_value(cr_store *s, const char *key, const value_parts *v, bool upsert,
                     const cr_replicate_config *cfg)
{
    int rc = crc_check_open(s);
    if (rc == 0)
        rc = crc_check_key(key);
    if (rc < 0)
        return rc;
    crp_rpc_req req = {.op = upsert ? CRP_RPC_UPSERT_START : CRP_RPC_PUT_START};
    req.u.put_start.client_id = s->client_id;
    req.u.put_start.key = (char *)key;
    req.u.put_start.value_size = v->total;
    crc_config_to_wire(cfg, &req.u.put_start.config);
    crp_rpc_resp resp;
    rc = crc_call(s, &req, &resp);
    if (rc == CR_RPC_TIMEOUT) {
        /* The master may still process the start later: queue a revoke behind
         * it on the same connection (requests are served in order) so the key
         * is not left in flight until the discard timeout. Its reply is not
         * worth waiting for. */
        char detail[400];
        snprintf(detail, sizeof(detail), "%s", cr_last_error_message());
        end_or_revoke_within(s, key, upsert, false, 50);
        return crb_error(rc, "%s", detail);
    }
    if (rc < 0)
        return rc;
    rc = resp.status;
    if (rc == CR_OBJECT_ALREADY_EXISTS && !upsert) {
        crp_rpc_resp_clear(&resp);
        return 0; /* complete already: nothing to do (Mooncake's behaviour) */
    }
    if (rc < 0) {
        crb_error(rc, "put '%s' (%llu bytes): %s", key, (unsigned long long)v->total,
                  resp.message ? resp.message : cr_strerror(rc));
        crp_rpc_resp_clear(&resp);
        return rc;
    }
    rc = write_replicas(s, resp.u.alloc.replicas, resp.u.alloc.n_replicas, v);
    crp_rpc_resp_clear(&resp);
    if (rc < 0) {
        char detail[400];
        snprintf(detail, sizeof(detail), "%s", cr_last_error_message());
        end_or_revoke(s, key, upsert, false);
        return crb_error(CR_TRANSFER_FAIL, "put '%s': writing replicas failed (%s); revoked", key,
                         detail);
    }
    return end_or_revoke(s, key, upsert, true);
}

static value_parts one_part(const void **p, const size_t *len, bool registered)
{
    return (value_parts){p, len, 1, registered, *len};
}

int cr_store_put(cr_store *s, const char *key, const void *value, size_t len,
                 const cr_replicate_config *cfg)
{
    if (value == NULL && len > 0)
        return crb_error(CR_INVALID_PARAMS, "put '%s': NULL value", key ? key : "");
    value_parts v = one_part(&value, &len, false);
    return put_value(s, key, &v, false, cfg);
}

int cr_store_upsert(cr_store *s, const char *key, const void *value, size_t len,
                    const cr_replicate_config *cfg)
{
    if (value == NULL && len > 0)
        return crb_error(CR_INVALID_PARAMS, "upsert '%s': NULL value", key ? key : "");
    value_parts v = one_part(&value, &len, false);
    return put_value(s, key, &v, true, cfg);
}

int cr_store_put_from(cr_store *s, const char *key, const void *buf, size_t len,
                      const cr_replicate_config *cfg)
{
    value_parts v = one_part(&buf, &len, true);
    return put_value(s, key, &v, false, cfg);
}

int cr_store_upsert_from(cr_store *s, const char *key, const void *buf, size_t len,
                         const cr_replicate_config *cfg)
{
    value_parts v = one_part(&buf, &len, true);
    return put_value(s, key, &v, true, cfg);
}

static int parts_total(const void *const *parts, const size_t *sizes, size_t n, uint64_t *total)
{
    if (n > 0 && (parts == NULL || sizes == NULL))
        return crb_error(CR_INVALID_PARAMS, "%zu parts but NULL arrays", n);
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++) {
        if (parts[i] == NULL && sizes[i] > 0)
            return crb_error(CR_INVALID_PARAMS, "part %zu is NULL", i);
        t += sizes[i];
    }
    *total = t;
    return 0;
}

int cr_store_put_parts(cr_store *s, const char *key, const void *const *parts, const size_t *sizes,
                       size_t n, const cr_replicate_config *cfg)
{
    value_parts v = {parts, sizes, n, false, 0};
    int rc = parts_total(parts, sizes, n, &v.total);
    return rc < 0 ? rc : put_value(s, key, &v, false, cfg);
}

int cr_store_put_from_multi(cr_store *s, const char *key, void *const *bufs, const size_t *sizes,
                            size_t n, const cr_replicate_config *cfg)
{
    value_parts v = {(const void *const *)bufs, sizes, n, true, 0};
    int rc = parts_total(v.parts, sizes, n, &v.total);
    return rc < 0 ? rc : put_value(s, key, &v, false, cfg);
}

/*
 * Batch zero-copy put: one BATCH_PUT_START, one engine batch writing every
 * replica of every key, then one BATCH_PUT_END for the keys that made it and
 * one BATCH_PUT_REVOKE for the others.
 */
static int batch_put_from(cr_store *s, const char *const *keys, void *const *bufs,
                          const size_t *sizes, size_t n, const cr_replicate_config *cfg,
                          int *results, bool upsert)
{
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || bufs == NULL || sizes == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch put: NULL array");
    uint64_t *vs = calloc(n, sizeof(*vs));
    char **ks = calloc(n, sizeof(*ks));
    size_t *map = calloc(n, sizeof(*map)); /* request position -> caller's index */
    uint8_t *allocated = calloc(n, 1);     /* the master allocated it: END or REVOKE */
    size_t *task_key = NULL;
    cr_transfer_request *reqs = NULL;
    if (vs == NULL || ks == NULL || map == NULL || allocated == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
        goto out_free;
    }
    size_t nv = 0;
    for (size_t i = 0; i < n; i++) {
        results[i] = crc_check_key(keys[i]);
        if (results[i] < 0)
            continue;
        vs[nv] = sizes[i];
        ks[nv] = (char *)keys[i];
        map[nv++] = i;
    }
    if (nv == 0)
        goto out_free;
    crp_rpc_req req = {.op = upsert ? CRP_RPC_BATCH_UPSERT_START : CRP_RPC_BATCH_PUT_START};
    req.u.batch_put_start.client_id = s->client_id;
    req.u.batch_put_start.n_keys = nv;
    req.u.batch_put_start.keys = ks;
    req.u.batch_put_start.value_sizes = vs;
    crc_config_to_wire(cfg, &req.u.batch_put_start.config);
    crp_rpc_resp resp;
    rc = crc_call(s, &req, &resp);
    if (rc < 0)
        goto out_free;
    if (resp.status < 0 || resp.u.batch_alloc.n != nv) {
        rc = resp.status < 0 ? resp.status
                             : crb_error(CR_RPC_FAIL, "batch put: %zu results for %zu keys",
                                         resp.u.batch_alloc.n, nv);
        crp_rpc_resp_clear(&resp);
        goto out_free;
    }
    size_t n_tasks = 0;
    for (size_t j = 0; j < nv; j++)
        if (resp.u.batch_alloc.results[j].status == 0 && sizes[map[j]] > 0)
            n_tasks += resp.u.batch_alloc.results[j].n_replicas;
    reqs = calloc(n_tasks ? n_tasks : 1, sizeof(*reqs));
    task_key = calloc(n_tasks ? n_tasks : 1, sizeof(*task_key));
    if (reqs == NULL || task_key == NULL) {
        crp_rpc_resp_clear(&resp);
        rc = crb_error(CR_ERR_NO_MEMORY, "batch put transfers");
        goto out_free;
    }
    size_t t = 0;
    for (size_t j = 0; j < nv; j++) {
        const crp_rpc_key_result *kr = &resp.u.batch_alloc.results[j];
        size_t i = map[j];
        results[i] = kr->status == CR_OBJECT_ALREADY_EXISTS && !upsert ? 1 : kr->status;
        allocated[i] = kr->status == 0;
        if (kr->status != 0 || sizes[i] == 0)
            continue;
        for (size_t r = 0; r < kr->n_replicas && results[i] == 0; r++) {
            cr_segment_handle h;
            int hrc = crc_segment_handle(s, kr->replicas[r].segment, &h);
            if (hrc < 0) {
                results[i] = hrc;
                break;
            }
            reqs[t] =
                (cr_transfer_request){CR_OP_WRITE, bufs[i], h, kr->replicas[r].addr, sizes[i]};
            task_key[t++] = i;
        }
    }
    crp_rpc_resp_clear(&resp);
    if (t > 0) {
        cr_batch_id b;
        rc = cr_batch_create(s->engine, t, &b);
        if (rc == 0) {
            rc = cr_batch_submit(s->engine, b, reqs, t);
            if (rc < 0) { /* validation refused something: fall back to one key at a time */
                for (size_t k = 0; k < t; k++) {
                    int one = cr_engine_transfer_sync(s->engine, CR_OP_WRITE, reqs[k].local_addr,
                                                      reqs[k].segment, reqs[k].remote_addr,
                                                      reqs[k].length, (int)s->transfer_timeout_ms);
                    if (one < 0 && results[task_key[k]] == 0)
                        results[task_key[k]] = CR_TRANSFER_FAIL;
                }
            } else {
                cr_batch_wait(s->engine, b, (int)s->transfer_timeout_ms + 1000);
                for (size_t k = 0; k < t; k++) {
                    cr_task_status st;
                    if (cr_batch_task_status(s->engine, b, k, &st) < 0 ||
                        st.state != CR_TASK_COMPLETED)
                        if (results[task_key[k]] == 0)
                            results[task_key[k]] = CR_TRANSFER_FAIL;
                }
                cr_batch_cancel(s->engine, b);
            }
            cr_batch_free(s->engine, b);
        } else {
            /* Nothing was written: none of these keys may be ended. */
            for (size_t k = 0; k < t; k++)
                if (results[task_key[k]] == 0)
                    results[task_key[k]] = rc;
        }
        rc = 0;
    }
    /* Finish: END for the written keys, REVOKE for the allocated-but-failed ones. */
    for (int pass = 0; pass < 2; pass++) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (allocated[i] && (pass == 0) == (results[i] == 0))
                ks[m++] = (char *)keys[i];
        }
        if (m == 0)
            continue;
        crp_rpc_req fin = {
            .op = pass == 0 ? (upsert ? CRP_RPC_BATCH_UPSERT_END : CRP_RPC_BATCH_PUT_END)
                            : (upsert ? CRP_RPC_BATCH_UPSERT_REVOKE : CRP_RPC_BATCH_PUT_REVOKE)};
        fin.u.owner_keys = (crp_rpc_owner_keys_req){s->client_id, m, ks};
        crp_rpc_resp fr;
        int frc = crc_call(s, &fin, &fr);
        if (frc == 0 && pass == 0 && fr.status == 0 && fr.u.statuses.n == m) {
            size_t j = 0;
            for (size_t i = 0; i < n; i++)
                if (results[i] == 0)
                    results[i] = fr.u.statuses.results[j++];
        } else if (pass == 0) {
            for (size_t i = 0; i < n; i++)
                if (results[i] == 0)
                    results[i] = frc < 0 ? frc : (fr.status < 0 ? fr.status : CR_RPC_FAIL);
        }
        if (frc == 0)
            crp_rpc_resp_clear(&fr);
    }
    for (size_t i = 0; i < n; i++)
        if (results[i] == 1)
            results[i] = 0; /* existed already: success */
out_free:
    free(reqs);
    free(task_key);
    free(vs);
    free(ks);
    free(map);
    free(allocated);
    return rc;
}

int cr_store_batch_put_from(cr_store *s, const char *const *keys, void *const *bufs,
                            const size_t *sizes, size_t n, const cr_replicate_config *cfg,
                            int *results)
{
    return batch_put_from(s, keys, bufs, sizes, n, cfg, results, false);
}

int cr_store_batch_upsert_from(cr_store *s, const char *const *keys, void *const *bufs,
                               const size_t *sizes, size_t n, const cr_replicate_config *cfg,
                               int *results)
{
    return batch_put_from(s, keys, bufs, sizes, n, cfg, results, true);
}

int cr_store_batch_put(cr_store *s, const char *const *keys, const void *const *values,
                       const size_t *sizes, size_t n, const cr_replicate_config *cfg, int *results)
{
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (n > 0 && (keys == NULL || values == NULL || sizes == NULL || results == NULL))
        return crb_error(CR_INVALID_PARAMS, "batch put: NULL array");
    for (size_t i = 0; i < n; i++)
        results[i] = cr_store_put(s, keys[i], values[i], sizes[i], cfg);
    return 0;
}
