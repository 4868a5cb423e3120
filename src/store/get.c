/*
 * get.c - the read paths, existence, size and removal.
 *
 * get: GET_REPLICA_LIST grants a read lease (the time of the request plus
 * lease_ttl_ms); the value is read from the best replica — this client's
 * own segment first, then the others in the master's order — failing over
 * to the next replica on a transfer error. If the lease ran out before the
 * transfer finished, the master may already have reused the memory, so the
 * call reports CR_LEASE_EXPIRED instead of returning the bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "store/internal.h"

typedef struct dest_parts {
    void *const *bufs;
    const size_t *sizes;
    size_t n;
    bool registered; /* false: one malloc'd buffer, read through staging */
} dest_parts;

/* Put this client's own replica first. */
static void order_replicas(cr_store *s, crp_rpc_replica *r, size_t n)
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
    for (uint64_t done = 0; done < size;) {
        crk_oa_allocation a;
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

/* Fetch replicas, check the destination capacity, read with failover. */
static int64_t get_value(cr_store *s, const char *key, dest_parts *d, void **alloc_out)
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
    rc = crc_call(s, &req, &resp);
    if (rc < 0)
        return rc;
    if (resp.status < 0 || resp.u.get.n_replicas == 0) {
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
        void *buf = malloc(size ? size : 1);
        if (buf == NULL) {
            crp_rpc_resp_clear(&resp);
            return crb_error(CR_ERR_NO_MEMORY, "get '%s': %llu bytes", key,
                             (unsigned long long)size);
        }
        *alloc_out = buf;
        d->bufs = (void *const *)alloc_out;
        cap = size;
    } else if (size > cap) {
        crp_rpc_resp_clear(&resp);
        return crb_error(CR_BUFFER_OVERFLOW, "get '%s': the value has %llu bytes, the buffer %llu",
                         key, (unsigned long long)size, (unsigned long long)cap);
    }
    order_replicas(s, resp.u.get.replicas, resp.u.get.n_replicas);
    rc = CR_TRANSFER_FAIL;
    for (size_t r = 0; r < resp.u.get.n_replicas && rc < 0; r++)
        rc = size == 0 ? 0 : read_from(s, &resp.u.get.replicas[r], d, size);
    crp_rpc_resp_clear(&resp);
    if (rc < 0)
        return crb_error(CR_TRANSFER_FAIL, "get '%s': every replica failed: %s", key,
                         cr_last_error_message());
    if (crb_now_ms() >= deadline)
        return crb_error(CR_LEASE_EXPIRED,
                         "get '%s': the read lease ran out during the transfer; the bytes may "
                         "be stale and were not returned",
                         key);
    return (int64_t)size;
}

int64_t cr_store_get(cr_store *s, const char *key, void **value_out)
{
    if (value_out == NULL)
        return crb_error(CR_INVALID_PARAMS, "get: value_out is NULL");
    void *buf = NULL;
    size_t zero = 0;
    dest_parts d = {NULL, &zero, 1, false};
    int64_t rc = get_value(s, key, &d, &buf);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *value_out = buf;
    return rc;
}

int64_t cr_store_get_into(cr_store *s, const char *key, void *buf, size_t cap)
{
    if (buf == NULL && cap > 0)
        return crb_error(CR_INVALID_PARAMS, "get_into '%s': NULL buffer", key ? key : "");
    dest_parts d = {&buf, &cap, 1, true};
    return get_value(s, key, &d, NULL);
}

int64_t cr_store_get_into_multi(cr_store *s, const char *key, void *const *bufs,
                                const size_t *sizes, size_t n)
{
    if (n > 0 && (bufs == NULL || sizes == NULL))
        return crb_error(CR_INVALID_PARAMS, "get_into_multi: NULL arrays");
    dest_parts d = {bufs, sizes, n, true};
    return get_value(s, key, &d, NULL);
}

int cr_store_batch_get_into(cr_store *s, const char *const *keys, void *const *bufs,
                            const size_t *caps, size_t n, int64_t *results)
{
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (n > 0 && (keys == NULL || bufs == NULL || caps == NULL || results == NULL))
        return crb_error(CR_INVALID_PARAMS, "batch_get_into: NULL array");
    if (n == 0)
        return 0;
    char **ks = calloc(n, sizeof(*ks));
    size_t *map = calloc(n, sizeof(*map));
    cr_transfer_request *reqs = calloc(n, sizeof(*reqs));
    size_t *task_key = calloc(n, sizeof(*task_key));
    if (ks == NULL || map == NULL || reqs == NULL || task_key == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
        goto out_free;
    }
    size_t nv = 0;
    for (size_t i = 0; i < n; i++) {
        results[i] = crc_check_key(keys[i]);
        if (results[i] == 0) {
            ks[nv] = (char *)keys[i];
            map[nv++] = i;
        }
    }
    if (nv == 0)
        goto out_free;
    uint64_t t0 = crb_now_ms();
    crp_rpc_req req = {.op = CRP_RPC_BATCH_GET_REPLICA_LIST};
    req.u.keys = (crp_rpc_keys_req){nv, ks};
    crp_rpc_resp resp;
    rc = crc_call(s, &req, &resp);
    if (rc < 0)
        goto out_free;
    if (resp.status < 0 || resp.u.batch_get.n != nv) {
        rc = resp.status < 0 ? resp.status : CR_RPC_FAIL;
        crp_rpc_resp_clear(&resp);
        goto out_free;
    }
    uint64_t deadline = t0 + resp.u.batch_get.lease_ttl_ms;
    size_t t = 0;
    for (size_t j = 0; j < nv; j++) {
        crp_rpc_key_result *kr = &resp.u.batch_get.results[j];
        size_t i = map[j];
        if (kr->status < 0 || kr->n_replicas == 0) {
            results[i] = kr->status < 0 ? kr->status : CR_REPLICA_IS_NOT_READY;
            continue;
        }
        order_replicas(s, kr->replicas, kr->n_replicas);
        uint64_t size = kr->replicas[0].size;
        if (size > caps[i]) {
            results[i] = CR_BUFFER_OVERFLOW;
            continue;
        }
        results[i] = (int64_t)size;
        if (size == 0)
            continue;
        cr_segment_handle h;
        int hrc = crc_segment_handle(s, kr->replicas[0].segment, &h);
        if (hrc < 0) {
            results[i] = hrc;
            continue;
        }
        reqs[t] = (cr_transfer_request){CR_OP_READ, bufs[i], h, kr->replicas[0].addr, size};
        task_key[t++] = j;
    }
    bool *failed = calloc(t ? t : 1, sizeof(bool));
    if (failed == NULL) /* read nothing, report nothing as read */
        for (size_t k = 0; k < t; k++)
            results[map[task_key[k]]] = CR_ERR_NO_MEMORY;
    if (t > 0 && failed != NULL) {
        cr_batch_id b = 0;
        int brc = cr_batch_create(s->engine, t, &b);
        if (brc == 0)
            brc = cr_batch_submit(s->engine, b, reqs, t);
        if (brc == 0) {
            cr_batch_wait(s->engine, b, (int)s->transfer_timeout_ms + 1000);
            for (size_t k = 0; k < t; k++) {
                cr_task_status st;
                failed[k] =
                    cr_batch_task_status(s->engine, b, k, &st) < 0 || st.state != CR_TASK_COMPLETED;
            }
            cr_batch_cancel(s->engine, b);
        } else {
            for (size_t k = 0; k < t; k++)
                failed[k] = true;
        }
        cr_batch_free(s->engine, b); /* harmless if create failed: stale id */
        /* Failed reads: every replica of the key, one at a time. */
        for (size_t k = 0; k < t; k++) {
            if (!failed[k])
                continue;
            crp_rpc_key_result *kr = &resp.u.batch_get.results[task_key[k]];
            size_t i = map[task_key[k]];
            int one = CR_TRANSFER_FAIL;
            for (size_t r = 0; r < kr->n_replicas && one < 0; r++)
                one = crc_transfer(s, CR_OP_READ, &kr->replicas[r], 1, 0, bufs[i],
                                   kr->replicas[r].size);
            if (one < 0)
                results[i] = CR_TRANSFER_FAIL;
        }
    }
    free(failed);
    crp_rpc_resp_clear(&resp);
    if (crb_now_ms() >= deadline)
        for (size_t i = 0; i < n; i++)
            if (results[i] > 0)
                results[i] = CR_LEASE_EXPIRED;
out_free:
    free(ks);
    free(map);
    free(reqs);
    free(task_key);
    return rc;
}

int cr_store_batch_get(cr_store *s, const char *const *keys, size_t n, void **values_out,
                       int64_t *results)
{
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (n > 0 && (keys == NULL || values_out == NULL || results == NULL))
        return crb_error(CR_INVALID_PARAMS, "batch_get: NULL array");
    for (size_t i = 0; i < n; i++) {
        values_out[i] = NULL;
        results[i] = cr_store_get(s, keys[i], &values_out[i]);
    }
    return 0;
}

int64_t cr_store_get_size(cr_store *s, const char *key)
{
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
    return keys_op(s, CRP_RPC_BATCH_EXIST, keys, n, false, results);
}

int cr_store_batch_remove(cr_store *s, const char *const *keys, size_t n, bool force, int *results)
{
    return keys_op(s, CRP_RPC_BATCH_REMOVE, keys, n, force, results);
}

int cr_store_remove(cr_store *s, const char *key, bool force)
{
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
    if (pattern == NULL)
        return crb_error(CR_INVALID_PARAMS, "remove_by_regex: NULL pattern");
    crp_rpc_req req = {.op = CRP_RPC_REMOVE_BY_REGEX};
    req.u.regex = (crp_rpc_regex_req){(char *)pattern, force};
    return count_op(s, &req);
}

int64_t cr_store_remove_all(cr_store *s, bool force)
{
    crp_rpc_req req = {.op = CRP_RPC_REMOVE_ALL};
    req.u.force.force = force;
    return count_op(s, &req);
}
