/*
 * thin_sessions.c - Mooncake's ranged session API (cr_store_sessions_*) in
 * thin mode. Each client table is a table of the daemon's embedded store
 * (TABLE_CREATE / TABLE_DESTROY); the session calls forward keys, sizes and
 * fragment extents to it. The daemon keeps a thin client's tables with its
 * session: when the client dies they are destroyed, which revokes the put
 * sessions still open. Ranged calls need their fragments in memory the
 * daemon maps (pool or shared regions): slow-path memory is refused with
 * CR_ERR_ADDRESS_NOT_REGISTERED, since copying every layer would defeat the
 * purpose of the ranged API. A table belongs to the daemon session it was
 * created in; after a reconnect its calls fail with CR_ERR_DAEMON_LOST.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "store/internal.h"
#include "store/thin.h"

int crc_thin_table_create(cr_store *s, uint64_t *id)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    crp_thin_req req = {.op = CRP_THIN_TABLE_CREATE};
    crp_thin_resp resp;
    uint64_t gen = 0;
    rc = crc_thin_call(s->thin, &req, NULL, 0, &resp, 0, &gen);
    if (rc < 0)
        return rc;
    rc = resp.status;
    if (rc < 0)
        crb_error(rc, "%s", resp.message ? resp.message : cr_strerror(rc));
    else if (!(resp.fields & CRP_THIN_R_VALUE) || resp.value <= 0 || resp.value > UINT32_MAX)
        rc = crb_error(CR_ERR_MALFORMED_FRAME, "TABLE_CREATE answered without a table id");
    else
        *id = (gen << 32) | (uint64_t)resp.value; /* the generation rides along */
    crp_thin_resp_clear(&resp);
    return rc;
}

/* The daemon's id of a client table id, or 0 if its session is gone. */
static uint64_t daemon_table(crc_thin *t, uint64_t id)
{
    return (id >> 32) == atomic_load(&t->gen) ? (id & 0xffffffffu) : 0;
}

void crc_thin_table_destroy(cr_store *s, uint64_t id)
{
    if (crc_thin_check(s) < 0)
        return;
    uint64_t did = daemon_table(s->thin, id);
    if (did == 0)
        return; /* the daemon destroyed it with the old session */
    crp_thin_req req = {.op = CRP_THIN_TABLE_DESTROY, .fields = CRP_THIN_F_ID, .id = did};
    crp_thin_resp resp;
    if (crc_thin_call(s->thin, &req, NULL, 0, &resp, 0, NULL) == 0)
        crp_thin_resp_clear(&resp);
}

int crc_thin_sessions_keys(cr_store *s, int op, uint64_t id, const char *const *keys, size_t n,
                           const uint64_t *sizes, const cr_replicate_config *cfg, int *results)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || (results == NULL && op != CRP_THIN_GET_SESSION_END) ||
        (op == CRP_THIN_PUT_SESSION_START && sizes == NULL))
        return crb_error(CR_INVALID_PARAMS, "%s: NULL array", crp_thin_op_name(op));
    if (n > CRC_THIN_BATCH_KEYS)
        return crb_error(CR_INVALID_PARAMS, "%s: %zu keys (at most %d per call in thin mode)",
                         crp_thin_op_name(op), n, CRC_THIN_BATCH_KEYS);
    uint64_t did = daemon_table(s->thin, id);
    if (did == 0)
        return crb_error(CR_ERR_DAEMON_LOST, "%s: the session table was lost with crescent-client",
                         crp_thin_op_name(op));
    crp_thin_req req = {.op = (uint16_t)op,
                        .fields = CRP_THIN_F_ID | CRP_THIN_F_KEYS,
                        .id = did,
                        .n_keys = n,
                        .keys = (char **)keys};
    if (op == CRP_THIN_PUT_SESSION_START) {
        req.fields |= CRP_THIN_F_VALS;
        req.n_vals = n;
        req.vals = (uint64_t *)sizes;
        if (cfg != NULL) {
            req.fields |= CRP_THIN_F_CFG;
            crc_config_to_wire(cfg, &req.cfg);
        }
    }
    crp_thin_resp resp;
    rc = crc_thin_call(s->thin, &req, NULL, 0, &resp, 0, NULL);
    if (rc < 0)
        return rc;
    rc = resp.status;
    if (rc < 0) {
        crb_error(rc, "%s", resp.message ? resp.message : cr_strerror(rc));
    } else if (results != NULL) {
        if (!(resp.fields & CRP_THIN_R_RESULTS) || resp.n_results != n)
            rc = crb_error(CR_ERR_MALFORMED_FRAME, "%s: %zu results for %zu keys",
                           crp_thin_op_name(op), resp.n_results, n);
        for (size_t i = 0; rc == 0 && i < n; i++)
            results[i] = (int)resp.results[i];
    }
    crp_thin_resp_clear(&resp);
    return rc;
}

int crc_thin_ranges(cr_store *s, int op, uint64_t id, const char *const *keys,
                    void *const *const *bufs, const size_t *const *sizes,
                    const uint64_t *const *offsets, const size_t *counts, size_t n,
                    int64_t *results)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || bufs == NULL || sizes == NULL || offsets == NULL || counts == NULL ||
        results == NULL)
        return crb_error(CR_INVALID_PARAMS, "%s: NULL array", crp_thin_op_name(op));
    if (n > CRC_THIN_BATCH_KEYS)
        return crb_error(CR_INVALID_PARAMS, "%s: %zu keys (at most %d per call in thin mode)",
                         crp_thin_op_name(op), n, CRC_THIN_BATCH_KEYS);
    crc_thin *t = s->thin;
    uint64_t did = daemon_table(t, id);
    if (did == 0)
        return crb_error(CR_ERR_DAEMON_LOST, "%s: the session table was lost with crescent-client",
                         crp_thin_op_name(op));
    size_t n_ext = 0;
    for (size_t i = 0; i < n; i++) {
        if (counts[i] > CRC_THIN_BATCH_EXT || n_ext + counts[i] > CRC_THIN_BATCH_EXT)
            return crb_error(CR_INVALID_PARAMS, "%s: more than %d fragments in one call",
                             crp_thin_op_name(op), CRC_THIN_BATCH_EXT);
        n_ext += counts[i];
    }
    uint32_t *cnt = calloc(n, sizeof(*cnt));
    crp_thin_ext *ext = calloc(n_ext ? n_ext : 1, sizeof(*ext));
    uint64_t *offs = calloc(n_ext ? n_ext : 1, sizeof(*offs));
    if (cnt == NULL || ext == NULL || offs == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "%s of %zu keys", crp_thin_op_name(op), n);
        goto out_free;
    }
    /* Keys with bad fragment lists fail alone: sent with no fragments, their
     * result replaced afterwards. */
    int *local = calloc(n, sizeof(*local));
    if (local == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "%s of %zu keys", crp_thin_op_name(op), n);
        goto out_free;
    }
    size_t e = 0;
    for (size_t i = 0; i < n; i++) {
        if (counts[i] > 0 && (bufs[i] == NULL || sizes[i] == NULL || offsets[i] == NULL)) {
            local[i] = crb_error(CR_INVALID_PARAMS, "%s: key %zu: NULL fragment arrays",
                                 crp_thin_op_name(op), i);
            continue;
        }
        size_t first = e;
        for (size_t k = 0; k < counts[i] && local[i] == 0; k++) {
            crc_reach how = CRC_REACH_DIRECT;
            int one = 0;
            if (sizes[i][k] > 0 && bufs[i][k] == NULL)
                one = crb_error(CR_INVALID_PARAMS, "%s: key %zu fragment %zu is NULL",
                                crp_thin_op_name(op), i, k);
            else
                one = crc_thin_translate(t, bufs[i][k], sizes[i][k], &ext[e], &how);
            if (one == 0 && how == CRC_REACH_SLOW)
                one = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                                "%s: key %zu fragment %zu is not in memory crescent-client maps "
                                "(pool or shared memory)",
                                crp_thin_op_name(op), i, k);
            if (one < 0) {
                local[i] = one;
                break;
            }
            offs[e++] = offsets[i][k];
        }
        if (local[i] < 0)
            e = first;
        else
            cnt[i] = (uint32_t)counts[i];
    }
    crp_thin_req req = {.op = (uint16_t)op,
                        .fields =
                            CRP_THIN_F_ID | CRP_THIN_F_KEYS | CRP_THIN_F_EXT | CRP_THIN_F_OFFS,
                        .id = did,
                        .n_keys = n,
                        .keys = (char **)keys,
                        .counts = cnt,
                        .n_ext = e,
                        .ext = ext,
                        .offsets = offs};
    crp_thin_resp resp;
    rc = crc_thin_call(t, &req, NULL, 0, &resp, id >> 32, NULL);
    if (rc == 0) {
        rc = resp.status;
        if (rc < 0) {
            crb_error(rc, "%s", resp.message ? resp.message : cr_strerror(rc));
        } else if (!(resp.fields & CRP_THIN_R_RESULTS) || resp.n_results != n) {
            rc = crb_error(CR_ERR_MALFORMED_FRAME, "%s: %zu results for %zu keys",
                           crp_thin_op_name(op), resp.n_results, n);
        } else {
            for (size_t i = 0; i < n; i++) {
                results[i] = local[i] < 0 ? local[i] : resp.results[i];
                if (local[i] == 0 && resp.results[i] > 0)
                    atomic_fetch_add(&t->zero_copy_bytes, (uint64_t)resp.results[i]);
            }
        }
        crp_thin_resp_clear(&resp);
    }
    free(local);
out_free:
    free(cnt);
    free(ext);
    free(offs);
    return rc;
}
