/*
 * replicas.c - where an object's replicas live, and dropping replicas.
 *
 * cr_store_get_replicas asks the master with QUERY_KEY (the operator query:
 * it grants no lease and is not an access for LRU) and copies the replica
 * list out. cr_store_batch_replica_clear sends BATCH_REPLICA_CLEAR; a large
 * batch goes in parts small enough for one request body (CRP_MAX_BODY), so
 * callers need not know the wire limits.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "proto/frame.h"
#include "store/internal.h"
#include "store/thin.h"

/* Keys per BATCH_REPLICA_CLEAR request, and the key bytes one may carry:
 * well inside CRP_MAX_BODY with the client id, the segment name and the
 * msgpack framing of each key (at most 5 bytes) added. */
#define CLEAR_PART_KEYS  8192
#define CLEAR_PART_BYTES (CRP_MAX_BODY - 64 * 1024)

int cr_store_get_replicas(cr_store *s, const char *key, cr_replica_info *out, size_t cap)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_get_replicas(s, key, out, cap);
    int rc = crc_check_open(s);
    if (rc == 0)
        rc = crc_check_key(key);
    if (rc < 0)
        return rc;
    if (out == NULL && cap > 0)
        return crb_error(CR_INVALID_PARAMS, "get_replicas '%s': NULL output with cap %zu", key,
                         cap);
    crp_rpc_req req = {.op = CRP_RPC_QUERY_KEY};
    req.u.key.key = (char *)key;
    crp_rpc_resp resp;
    rc = crc_call(s, &req, &resp);
    if (rc < 0)
        return rc;
    if (resp.status < 0) {
        rc = crb_error(resp.status, "get_replicas '%s': %s", key,
                       resp.message ? resp.message : cr_strerror(resp.status));
        goto clear_resp;
    }
    const crp_rpc_key_info_resp *ki = &resp.u.key_info;
    for (size_t i = 0; i < ki->n_replicas; i++) {
        if (strlen(ki->replicas[i].segment) > CR_STORE_MAX_SEGMENT) {
            rc =
                crb_error(CR_RPC_FAIL, "get_replicas '%s': the master named a segment of %zu bytes",
                          key, strlen(ki->replicas[i].segment));
            goto clear_resp;
        }
    }
    for (size_t i = 0; i < ki->n_replicas && i < cap; i++) {
        const crp_rpc_replica *r = &ki->replicas[i];
        cr_replica_info *o = &out[i];
        memset(o, 0, sizeof(*o));
        strcpy(o->segment, r->segment);
        o->address = r->addr;
        o->size = r->size;
        o->complete = r->status == CRP_RPC_REPLICA_COMPLETE;
        o->on_disk = r->epoch == 0 && r->addr == 0; /* no mount has epoch 0 */
    }
    rc = ki->n_replicas > (size_t)INT32_MAX ? INT32_MAX : (int)ki->n_replicas;
clear_resp:
    crp_rpc_resp_clear(&resp);
    return rc;
}

/* Send one part: keys ks[0..m) (results at map[]); 0 or the part's failure. */
static int clear_part(cr_store *s, char **ks, const size_t *map, size_t m, const char *segment,
                      int *results)
{
    crp_rpc_req req = {.op = CRP_RPC_BATCH_REPLICA_CLEAR};
    req.u.replica_clear = (crp_rpc_replica_clear_req){s->client_id, m, ks, (char *)segment};
    crp_rpc_resp resp;
    int rc = crc_call(s, &req, &resp);
    if (rc < 0)
        goto fail_keys;
    if (resp.status < 0) {
        rc = crb_error(resp.status, "batch_replica_clear: %s",
                       resp.message ? resp.message : cr_strerror(resp.status));
    } else if (resp.u.statuses.n != m) {
        rc = crb_error(CR_RPC_FAIL, "batch_replica_clear: %zu results for %zu keys",
                       resp.u.statuses.n, m);
    } else {
        for (size_t j = 0; j < m; j++)
            results[map[j]] = resp.u.statuses.results[j];
    }
    crp_rpc_resp_clear(&resp);
    if (rc == 0)
        return 0;
fail_keys:
    for (size_t j = 0; j < m; j++)
        results[map[j]] = rc;
    return rc;
}

int cr_store_batch_replica_clear(cr_store *s, const char *const *keys, size_t n,
                                 const char *segment, int *results)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_replica_clear(s, keys, n, segment, results);
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch_replica_clear: NULL array for %zu keys", n);
    if (segment == NULL)
        segment = "";
    if (strnlen(segment, CR_STORE_MAX_SEGMENT + 1) > CR_STORE_MAX_SEGMENT)
        return crb_error(CR_INVALID_PARAMS,
                         "batch_replica_clear: segment name longer than %d bytes",
                         CR_STORE_MAX_SEGMENT);
    size_t part_cap = n < CLEAR_PART_KEYS ? n : CLEAR_PART_KEYS;
    char **ks = malloc(part_cap * sizeof(*ks));
    size_t *map = malloc(part_cap * sizeof(*map));
    if (ks == NULL || map == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch_replica_clear: batch of %zu", n);
        goto free_arrays;
    }
    size_t m = 0, bytes = 0;
    for (size_t i = 0; i <= n; i++) {
        size_t len = 0;
        if (i < n) {
            results[i] = crc_check_key(keys[i]);
            if (results[i] < 0)
                continue;
            len = strlen(keys[i]);
        }
        /* Flush the part when this key would not fit, and at the end. */
        if (m > 0 && (i == n || m == CLEAR_PART_KEYS || bytes + len > CLEAR_PART_BYTES)) {
            int prc = clear_part(s, ks, map, m, segment, results);
            if (prc < 0 && rc == 0)
                rc = prc;
            m = 0;
            bytes = 0;
        }
        if (i < n) {
            ks[m] = (char *)keys[i];
            map[m++] = i;
            bytes += len;
        }
    }
free_arrays:
    free(ks);
    free(map);
    return rc;
}
