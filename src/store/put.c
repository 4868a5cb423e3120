/*
 * put.c - the write paths.
 *
 * put: PUT_START (the master allocates replicas on distinct segments) →
 * write every replica through the engine → PUT_END, or PUT_REVOKE on any
 * failure so the object never becomes visible half-written. Copying puts
 * write straight from the caller's bytes where the engine moves
 * unregistered memory (one copy: staging.c), else gather the value into
 * the local buffer chunk by chunk (a value larger than the free staging
 * space is moved in several rounds instead of failing); zero-copy puts
 * write straight from the caller's registered memory. A key that already exists complete is left
 * alone and the put succeeds (Mooncake's behaviour); upsert replaces it.
 *
 * With put grants (grants.c) a single put writes into space the master placed ahead of
 * time and then asks once: PUT_END {key, "gk"}, with the next grant's PUT_START right
 * behind it in the same round trip. A put that finds no grant asks for one along with its
 * own PUT_START.
 *
 * Commit ahead (docs/WIRE.md): a put through a grant sends its end before it writes, and a
 * batch put (its writes owned by the connection) sends BATCH_PUT_END {"ca"} right after the
 * start's reply; the master holds readers of those keys until the writer's closing notice,
 * so a put costs about the longer of its copy and one round trip, not their sum.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "store/internal.h"
#include "store/thin.h"

/* A value as a list of parts; `registered` parts are written directly. */
typedef struct value_parts {
    const void *const *parts;
    const size_t *sizes;
    size_t n;
    bool registered;
    uint64_t total;
} value_parts;

/* PUT_END / UPSERT_END (ok) or the revoke. *version_out (may be NULL): the committed value's
 * version from the end's reply (0: a master that does not say), written on success. */
static int end_or_revoke_within(cr_store *s, const char *key, bool upsert, bool ok, int timeout_ms,
                                uint64_t *version_out)
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
    else if (ok && version_out != NULL)
        *version_out = resp.u.end.version;
    crp_rpc_resp_clear(&resp);
    return rc;
}

static int end_or_revoke(cr_store *s, const char *key, bool upsert, bool ok)
{
    return end_or_revoke_within(s, key, upsert, ok, (int)s->rpc_timeout_ms, NULL);
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
    if (crc_direct_ok(s)) { /* straight from the caller's parts: one copy */
        int rc = 0;
        uint64_t off = 0;
        for (size_t i = 0; i < v->n && rc == 0; off += v->sizes[i], i++)
            rc = crc_transfer_direct(s, CR_OP_WRITE, reps, n_reps, off, (void *)v->parts[i],
                                     v->sizes[i]);
        if (rc != CR_ERR_NEEDS_REGISTERED)
            return rc;
        crc_direct_refused(s);
    }
    /* Copying: gather chunks into staging and write each chunk. */
    uint64_t done = 0;
    size_t part = 0, part_off = 0;
    while (done < v->total) {
        crb_oa_allocation a;
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

/* The writer knows where its value is: a later get of it may read the replica it would
 * choose while asking the master (the reply must name this version and replica again
 * before the bytes are kept: get.c). */
static void remember_placement(cr_store *s, const char *key, uint64_t version, uint64_t size,
                               crp_rpc_replica *reps, size_t n)
{
    if (s->loc == NULL || version == 0 || size < s->spec_min || n == 0)
        return;
    crc_order_replicas(s, reps, n);
    crp_rpc_replica mine = reps[0];
    mine.status = CRP_RPC_REPLICA_COMPLETE; /* as of the end just acknowledged */
    crc_loc_store(s->loc, key, version, &mine);
}

/* Ask for a grant like this put's in the round trip of `req`'s call (when grants are on
 * and the store holds fewer than its limit). */
static int call_asking_grant(cr_store *s, const crp_rpc_req *req, crp_rpc_resp *resp, bool grants,
                             uint64_t size, const crp_rpc_replica_config *wcfg)
{
    crp_rpc_req ask;
    crc_grant *g = grants ? crc_grant_ask_begin(s, size, wcfg, &ask) : NULL;
    if (g == NULL)
        return crc_call(s, req, resp);
    int rc =
        crc_master_call2(s->master, req, resp, &ask, crc_grant_reply(g), (int)s->rpc_timeout_ms);
    crc_grant_ask_end(s, g, rc);
    return rc;
}

/* call_asking_grant (grants on), with sent(sent_arg) run once the requests are on the wire
 * and *conn_out naming their connection on success. */
static int call_asking_grant_sent(cr_store *s, const crp_rpc_req *req, crp_rpc_resp *resp,
                                  uint64_t size, const crp_rpc_replica_config *wcfg,
                                  crc_sent_fn sent, void *sent_arg, uint64_t *conn_out)
{
    crp_rpc_req ask;
    crc_grant *g = crc_grant_ask_begin(s, size, wcfg, &ask);
    const crp_rpc_req *reqs[2] = {req, &ask};
    crp_rpc_resp *resps[2] = {resp, g != NULL ? crc_grant_reply(g) : NULL};
    int rc = crc_master_calls_sent(s->master, reqs, resps, g != NULL ? 2 : 1,
                                   (int)s->rpc_timeout_ms, sent, sent_arg, conn_out);
    if (g != NULL)
        crc_grant_ask_end(s, g, rc);
    return rc;
}

#define PUT_TWO_PHASE 1 /* put_granted: the grant was unusable; put the two-phase way */

/* The copy of a put committed ahead, run once its end is on the wire (crc_sent_fn). */
typedef struct ahead_copy {
    cr_store *s;
    const crp_rpc_alloc_resp *placement;
    const value_parts *v;
    int rc;
    bool ran;
} ahead_copy;

static void copy_while_master_commits(void *arg)
{
    ahead_copy *c = arg;
    c->rc = write_replicas(c->s, c->placement->replicas, c->placement->n_replicas, c->v);
    if (c->rc < 0)
        crb_log(CRB_LOG_DEBUG, "put: writing into a grant failed (%s)", cr_last_error_message());
    c->ran = true;
}

/* Revoke key's committed-ahead write on connection conn (a notice; if that connection is
 * gone, so is the write). */
static void revoke_ahead(cr_store *s, const char *key, uint64_t conn)
{
    crp_rpc_req req = {.op = CRP_RPC_PUT_REVOKE};
    req.u.owner_key = (crp_rpc_owner_key_req){s->client_id, (char *)key};
    (void)crc_master_send_on(s->master, &req, (int)s->rpc_timeout_ms, conn);
}

/*
 * A put into grant g committed ahead (docs/WIRE.md, "Commit ahead"): PUT_END {key, gk, ca}
 * goes out first (with the next grant's ask), the value is written while the master moves
 * the grant to key, and once both are done a plain PUT_END of key (a notice, on the same
 * connection) completes it before the put returns. Readers that ask in between are held by
 * the master until that end arrives; if the connection closes first, the write is revoked.
 * So the put costs max(copy, round trip), not their sum.
 */
static int put_granted_ahead(cr_store *s, const char *key, const value_parts *v, crc_grant *g,
                             const crp_rpc_replica_config *wcfg)
{
    const crp_rpc_alloc_resp *a = crc_grant_placement(g);
    crp_rpc_req req = {.op = CRP_RPC_PUT_END, .commit_ahead = true};
    req.u.owner_key = (crp_rpc_owner_key_req){s->client_id, (char *)key};
    req.grant_key = (char *)crc_grant_key(g);
    crp_rpc_resp resp;
    ahead_copy copy = {s, a, v, 0, false};
    uint64_t conn = 0;
    int rc = call_asking_grant_sent(s, &req, &resp, v->total, wcfg, copy_while_master_commits,
                                    &copy, &conn);
    if (!copy.ran) { /* nothing went out (no master, or it does not commit ahead) */
        crc_grant_done(s, g, true);
        return rc == CR_NOT_SUPPORTED ? PUT_TWO_PHASE : rc;
    }
    if (rc < 0) { /* outcome unknown: if the master took it and the connection lives, revoke */
        if (rc == CR_RPC_TIMEOUT)
            revoke_ahead(s, key, conn);
        crc_grant_done(s, g, true);
        return rc;
    }
    rc = resp.status;
    uint64_t version = resp.u.end.version;
    if (rc < 0 && rc != CR_OBJECT_NOT_FOUND && rc != CR_OBJECT_ALREADY_EXISTS &&
        rc != CR_NOT_SUPPORTED)
        crb_error(rc, "put '%s' (%llu bytes): %s", key, (unsigned long long)v->total,
                  resp.message ? resp.message : cr_strerror(rc));
    crp_rpc_resp_clear(&resp);
    if (rc == 0 && copy.rc < 0) { /* committed ahead, but the copy failed: take it back */
        revoke_ahead(s, key, conn);
        crc_grant_done(s, g, false); /* the grant became key's write: revoked with it */
        return PUT_TWO_PHASE;
    }
    if (rc < 0) { /* a refused end leaves the grant as it was: give it back */
        crc_grant_done(s, g, rc != CR_OBJECT_NOT_FOUND);
        if (rc == CR_OBJECT_NOT_FOUND || rc == CR_NOT_SUPPORTED || copy.rc < 0)
            return PUT_TWO_PHASE;
        return rc == CR_OBJECT_ALREADY_EXISTS ? 0 : rc; /* exists: Mooncake's behaviour */
    }
    crp_rpc_req done = {.op = CRP_RPC_PUT_END};
    done.u.owner_key = (crp_rpc_owner_key_req){s->client_id, (char *)key};
    rc = crc_master_send_on(s->master, &done, (int)s->rpc_timeout_ms, conn);
    if (rc == 0) /* (a is the grant's: before it goes) */
        remember_placement(s, key, version, v->total, a->replicas, a->n_replicas);
    crc_grant_done(s, g, false);
    if (rc < 0)
        return crb_error(CR_RPC_FAIL,
                         "put '%s': its end could not be sent (%s); the master drops a put "
                         "committed ahead with its connection",
                         key, cr_last_error_message());
    return 0;
}

/* A put into grant g (taken for this size and config): write, then one round trip. */
static int put_granted(cr_store *s, const char *key, const value_parts *v, bool upsert,
                       crc_grant *g, const crp_rpc_replica_config *wcfg)
{
    const crp_rpc_alloc_resp *a = crc_grant_placement(g);
    int rc = write_replicas(s, a->replicas, a->n_replicas, v);
    if (rc < 0) { /* its holder may be gone: give it back, and place the value anew */
        crb_log(CRB_LOG_DEBUG, "put '%s': writing into a grant failed (%s); two-phase put", key,
                cr_last_error_message());
        crc_grant_done(s, g, true);
        return PUT_TWO_PHASE;
    }
    crp_rpc_req req = {.op = upsert ? CRP_RPC_UPSERT_END : CRP_RPC_PUT_END};
    req.u.owner_key = (crp_rpc_owner_key_req){s->client_id, (char *)key};
    req.grant_key = (char *)crc_grant_key(g);
    crp_rpc_resp resp;
    rc = call_asking_grant(s, &req, &resp, true, v->total, wcfg);
    if (rc < 0) { /* outcome unknown: the grant is given back if the end did not take it */
        crc_grant_done(s, g, true);
        return rc;
    }
    rc = resp.status;
    uint64_t version = resp.u.end.version;
    if (rc == CR_OBJECT_NOT_FOUND) { /* the master no longer knows the grant */
        crp_rpc_resp_clear(&resp);
        crc_grant_done(s, g, false);
        return PUT_TWO_PHASE;
    }
    if (rc < 0 && !(rc == CR_OBJECT_ALREADY_EXISTS && !upsert))
        crb_error(rc, "put '%s' (%llu bytes): %s", key, (unsigned long long)v->total,
                  resp.message ? resp.message : cr_strerror(rc));
    crp_rpc_resp_clear(&resp);
    if (rc == CR_OBJECT_ALREADY_EXISTS && !upsert)
        rc = 0; /* complete already: nothing to do (Mooncake's behaviour) */
    else if (rc == 0)
        remember_placement(s, key, version, v->total, a->replicas, a->n_replicas);
    crc_grant_done(s, g, false); /* consumed by the end, whatever it answered */
    return rc;
}

/* may_grant: false for a disk-tier holder's promotion, which the master lets only a
 * two-phase put make (through a grant, the key's disk copy makes it "exists"). */
static int put_value_how(cr_store *s, const char *key, const value_parts *v, bool upsert,
                         const cr_replicate_config *cfg, bool may_grant)
{
    if (cr_store_is_thin(s))
        return crc_thin_put(s, key, v->parts, v->sizes, v->n, v->registered, upsert, cfg);
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
    bool grants = may_grant && v->total > 0 && crc_grants_usable(s, &req.u.put_start.config);
    crc_grant *g = grants ? crc_grant_take(s, v->total, &req.u.put_start.config) : NULL;
    if (g != NULL) {
        if (!upsert && crc_grants_ahead(s))
            rc = put_granted_ahead(s, key, v, g, &req.u.put_start.config);
        else
            rc = put_granted(s, key, v, upsert, g, &req.u.put_start.config);
        if (rc != PUT_TWO_PHASE)
            return rc;
    }
    crp_rpc_resp resp;
    rc = call_asking_grant(s, &req, &resp, grants, v->total, &req.u.put_start.config);
    if (rc == 0 && resp.status == CR_NO_AVAILABLE_HANDLE && crc_grants_release(s) > 0) {
        /* Our idle grants may hold the space it needs: given back (their
         * notices go out ahead of this call), the start is tried once more. */
        crp_rpc_resp_clear(&resp);
        rc = crc_call(s, &req, &resp);
    }
    if (rc == CR_RPC_TIMEOUT) {
        /* The master may still process the start later: queue a revoke behind
         * it on the same connection (requests are served in order) so the key
         * is not left in flight until the discard timeout. Its reply is not
         * worth waiting for. */
        char detail[400];
        snprintf(detail, sizeof(detail), "%s", cr_last_error_message());
        end_or_revoke_within(s, key, upsert, false, 50, NULL);
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
    if (rc < 0) {
        crp_rpc_resp_clear(&resp);
        char detail[400];
        snprintf(detail, sizeof(detail), "%s", cr_last_error_message());
        end_or_revoke(s, key, upsert, false);
        return crb_error(CR_TRANSFER_FAIL, "put '%s': writing replicas failed (%s); revoked", key,
                         detail);
    }
    uint64_t version = 0;
    rc = end_or_revoke_within(s, key, upsert, true, (int)s->rpc_timeout_ms, &version);
    if (rc == 0)
        remember_placement(s, key, version, v->total, resp.u.alloc.replicas,
                           resp.u.alloc.n_replicas);
    crp_rpc_resp_clear(&resp);
    return rc;
}

static value_parts one_part(const void **p, const size_t *len, bool registered)
{
    return (value_parts){p, len, 1, registered, *len};
}

static int put_value(cr_store *s, const char *key, const value_parts *v, bool upsert,
                     const cr_replicate_config *cfg)
{
    return put_value_how(s, key, v, upsert, cfg, true);
}

int crc_put_promotion(cr_store *s, const char *key, const void *value, size_t len)
{
    CRC_ENTER(s);
    value_parts v = one_part(&value, &len, false);
    return put_value_how(s, key, &v, false, NULL, false);
}

int cr_store_put(cr_store *s, const char *key, const void *value, size_t len,
                 const cr_replicate_config *cfg)
{
    CRC_ENTER(s);
    if (value == NULL && len > 0)
        return crb_error(CR_INVALID_PARAMS, "put '%s': NULL value", key ? key : "");
    value_parts v = one_part(&value, &len, false);
    return put_value(s, key, &v, false, cfg);
}

int cr_store_upsert(cr_store *s, const char *key, const void *value, size_t len,
                    const cr_replicate_config *cfg)
{
    CRC_ENTER(s);
    if (value == NULL && len > 0)
        return crb_error(CR_INVALID_PARAMS, "upsert '%s': NULL value", key ? key : "");
    value_parts v = one_part(&value, &len, false);
    return put_value(s, key, &v, true, cfg);
}

int cr_store_put_from(cr_store *s, const char *key, const void *buf, size_t len,
                      const cr_replicate_config *cfg)
{
    CRC_ENTER(s);
    value_parts v = one_part(&buf, &len, true);
    return put_value(s, key, &v, false, cfg);
}

int cr_store_upsert_from(cr_store *s, const char *key, const void *buf, size_t len,
                         const cr_replicate_config *cfg)
{
    CRC_ENTER(s);
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
    CRC_ENTER(s);
    value_parts v = {parts, sizes, n, false, 0};
    int rc = parts_total(parts, sizes, n, &v.total);
    return rc < 0 ? rc : put_value(s, key, &v, false, cfg);
}

int cr_store_put_from_multi(cr_store *s, const char *key, void *const *bufs, const size_t *sizes,
                            size_t n, const cr_replicate_config *cfg)
{
    CRC_ENTER(s);
    value_parts v = {(const void *const *)bufs, sizes, n, true, 0};
    int rc = parts_total(v.parts, sizes, n, &v.total);
    return rc < 0 ? rc : put_value(s, key, &v, false, cfg);
}

/* --- batches --------------------------------------------------------------- */

/* BATCH_{PUT,UPSERT}_{END,REVOKE} of m keys; statuses (may be NULL) get one
 * result per key when the call as a whole succeeded. Returns the call's
 * failure, or 0. */
static int batch_finish(cr_store *s, bool upsert, bool ok, char **ks, size_t m, int timeout_ms,
                        int *statuses)
{
    crp_rpc_req fin = {.op =
                           ok ? (upsert ? CRP_RPC_BATCH_UPSERT_END : CRP_RPC_BATCH_PUT_END)
                              : (upsert ? CRP_RPC_BATCH_UPSERT_REVOKE : CRP_RPC_BATCH_PUT_REVOKE)};
    fin.u.owner_keys = (crp_rpc_owner_keys_req){s->client_id, m, ks};
    crp_rpc_resp fr;
    int rc = crc_master_call(s->master, &fin, &fr, timeout_ms);
    if (rc < 0)
        return rc;
    rc = fr.status < 0 ? fr.status : (fr.u.statuses.n == m ? 0 : CR_RPC_FAIL);
    if (rc == 0 && statuses != NULL)
        memcpy(statuses, fr.u.statuses.results, m * sizeof(*statuses));
    crp_rpc_resp_clear(&fr);
    return rc;
}

/* The copy of a batch put committed ahead, run once its end is on the wire (crc_sent_fn). */
typedef struct batch_copy {
    cr_store *s;
    cr_transfer_request *reqs;
    size_t n;
    bool *failed;
    bool ran;
} batch_copy;

static void batch_copy_run(void *arg)
{
    batch_copy *c = arg;
    crc_run_batch_direct(c->s, c->reqs, c->n, c->failed);
    c->ran = true;
}

/* The bound a batch put's owned writes promise (docs/WIRE.md, "Owned writes"): the copy
 * starts right after the start's reply and ends within the transfer timeout. 0: too long for
 * the master's default put_start_release_timeout (600 s); the batch does not commit ahead. */
static uint64_t batch_owned_ms(const cr_store *s)
{
    uint64_t ms = (uint64_t)s->transfer_timeout_ms + 3000;
    return ms <= 600000 ? ms : 0;
}

/* Does a batch put commit ahead (docs/WIRE.md, "Commit ahead")? */
static bool batch_ahead_ok(cr_store *s, bool upsert)
{
    const uint64_t need = CRP_RPC_CAP_BATCH_COMMIT_AHEAD | CRP_RPC_CAP_OWNED_WRITES;
    return !upsert && s->put_ahead && batch_owned_ms(s) != 0 &&
           (crc_master_caps(s->master) & need) == need;
}

/* Notices on connection conn only (the one that owns the writes they end): BATCH_PUT_END
 * (ok) or BATCH_PUT_REVOKE of ks[0..n). */
static int batch_notice_on(cr_store *s, bool ok, char **ks, size_t n, uint64_t conn)
{
    if (n == 0)
        return 0;
    crp_rpc_req fin = {.op = ok ? CRP_RPC_BATCH_PUT_END : CRP_RPC_BATCH_PUT_REVOKE};
    fin.u.owner_keys = (crp_rpc_owner_keys_req){s->client_id, n, ks};
    return crc_master_send_on(s->master, &fin, (int)s->rpc_timeout_ms, conn);
}

#define BATCH_OWNED_REFUSED 1 /* every key's owned start was refused: try again unowned */

/*
 * The end of a batch put committed ahead: BATCH_PUT_END {ks[0..ne), "ca"} goes out, the copy
 * (c) runs while the master commits, then one notice completes the keys written and one
 * revokes the others, both on the connection that carried the "ca" end. res[pos[e]] is set
 * for every e < ne. Returns false when nothing was committed ahead (the call never went
 * out, or the master refused it as a whole): the caller ends the keys the usual way then,
 * after running the copy if c->ran is still false.
 */
static bool batch_end_ahead(cr_store *s, char **ks, size_t ne, const size_t *pos, batch_copy *c,
                            const size_t *task_pos, int *res)
{
    crp_rpc_req fin = {.op = CRP_RPC_BATCH_PUT_END, .commit_ahead = true};
    fin.u.owner_keys = (crp_rpc_owner_keys_req){s->client_id, ne, ks};
    crp_rpc_resp fr;
    const crp_rpc_req *rq[1] = {&fin};
    crp_rpc_resp *rs[1] = {&fr};
    uint64_t conn = 0;
    int rc = crc_master_calls_sent(s->master, rq, rs, 1, (int)s->rpc_timeout_ms, batch_copy_run, c,
                                   &conn);
    if (!c->ran)
        return false; /* nothing went out */
    if (rc == 0 && (fr.status < 0 || fr.u.statuses.n != ne)) {
        crp_rpc_resp_clear(&fr); /* refused as a whole (an HA master): nothing committed */
        return false;
    }
    if (rc < 0) { /* outcome unknown: if the master took it and the connection lives, revoke */
        if (rc == CR_RPC_TIMEOUT)
            (void)batch_notice_on(s, false, ks, ne, conn);
        for (size_t e = 0; e < ne; e++)
            res[pos[e]] = rc;
        return true;
    }
    /* Each key: committed ahead and written, or to be revoked. */
    for (size_t e = 0; e < ne; e++)
        res[pos[e]] = fr.u.statuses.results[e];
    crp_rpc_resp_clear(&fr);
    for (size_t k = 0; k < c->n; k++)
        if (c->failed[k] && res[task_pos[k]] == 0)
            res[task_pos[k]] = CR_TRANSFER_FAIL;
    char **done = malloc(ne * sizeof(*done));
    char **undo = malloc(ne * sizeof(*undo));
    size_t nd = 0, nu = 0;
    if (done == NULL || undo == NULL) { /* cannot name them: the connection takes them back */
        free(done);
        free(undo);
        for (size_t e = 0; e < ne; e++)
            res[pos[e]] = crb_error(CR_ERR_NO_MEMORY, "batch put end of %zu keys", ne);
        return true;
    }
    for (size_t e = 0; e < ne; e++) {
        if (res[pos[e]] == 0)
            done[nd++] = ks[e];
        else
            undo[nu++] = ks[e];
    }
    int drc = batch_notice_on(s, true, done, nd, conn);
    (void)batch_notice_on(s, false, undo, nu, conn);
    if (drc < 0) {
        crb_error(CR_RPC_FAIL,
                  "batch put: the end of %zu keys could not be sent (%s); the master drops puts "
                  "committed ahead with their connection",
                  nd, cr_last_error_message());
        for (size_t e = 0; e < ne; e++)
            if (res[pos[e]] == 0)
                res[pos[e]] = CR_RPC_FAIL;
    }
    free(done);
    free(undo);
    return true;
}

/*
 * One master round of a batch put: keys[idx[j]] for j < m, each checked, no
 * key twice, every value in registered memory (the caller's or staging) or
 * in the caller's unregistered memory, written straight from there
 * (crc_run_batch_direct stages it if the engine refuses).
 * One BATCH_PUT_START, one engine batch writing every part of every value
 * to every replica, then one BATCH_PUT_END for the keys that were written
 * and one BATCH_PUT_REVOKE for the allocated keys that were not. With ahead
 * the start's writes are owned by the connection and the end goes before the
 * copy (batch_end_ahead). Sets results[idx[j]]; returns 0, the failure of the
 * start call as a whole (results untouched then), or BATCH_OWNED_REFUSED.
 */
static int batch_put_round_how(cr_store *s, const char *const *keys, const value_parts *vals,
                               const size_t *idx, size_t m, const cr_replicate_config *cfg,
                               bool upsert, bool ahead, int *results)
{
    int rc = 0;
    char **ks = calloc(m, sizeof(*ks));
    uint64_t *vs = calloc(m, sizeof(*vs));
    int *res = calloc(m, sizeof(*res));
    size_t *pos = calloc(m, sizeof(*pos)); /* END list position -> round position */
    uint8_t *allocated = calloc(m, 1);     /* the master allocated it: END or REVOKE */
    cr_transfer_request *reqs = NULL;
    size_t *task_pos = NULL;
    bool *failed = NULL;
    if (ks == NULL || vs == NULL || res == NULL || pos == NULL || allocated == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch put of %zu keys", m);
        goto out_free;
    }
    for (size_t j = 0; j < m; j++) {
        ks[j] = (char *)keys[idx[j]];
        vs[j] = vals[idx[j]].total;
    }
    crp_rpc_req req = {.op = upsert ? CRP_RPC_BATCH_UPSERT_START : CRP_RPC_BATCH_PUT_START};
    req.u.batch_put_start.client_id = s->client_id;
    req.u.batch_put_start.n_keys = m;
    req.u.batch_put_start.keys = ks;
    req.u.batch_put_start.value_sizes = vs;
    crc_config_to_wire(cfg, &req.u.batch_put_start.config);
    req.owned_ms = ahead ? batch_owned_ms(s) : 0;
    crp_rpc_resp resp;
    rc = crc_call(s, &req, &resp);
    if (rc == CR_RPC_TIMEOUT) {
        /* As for one key: queue a revoke behind a start the master may still
         * process, without waiting for its reply. */
        char detail[400];
        snprintf(detail, sizeof(detail), "%s", cr_last_error_message());
        batch_finish(s, upsert, false, ks, m, 50, NULL);
        rc = crb_error(rc, "%s", detail);
        goto out_free;
    }
    if (rc < 0)
        goto out_free;
    if (resp.status < 0 || resp.u.batch_alloc.n != m) {
        rc = resp.status < 0 ? resp.status
                             : crb_error(CR_RPC_FAIL, "batch put: %zu results for %zu keys",
                                         resp.u.batch_alloc.n, m);
        goto out_resp;
    }
    if (ahead) { /* a master whose put_start_release_timeout is below the bound refuses it */
        size_t refused = 0;
        for (size_t j = 0; j < m; j++)
            refused += resp.u.batch_alloc.results[j].status == CR_INVALID_PARAMS;
        if (refused == m) {
            rc = BATCH_OWNED_REFUSED;
            goto out_resp;
        }
    }
    size_t n_tasks = 0;
    for (size_t j = 0; j < m; j++) {
        const value_parts *v = &vals[idx[j]];
        if (resp.u.batch_alloc.results[j].status != 0 || v->total == 0)
            continue;
        for (size_t k = 0; k < v->n; k++)
            n_tasks += v->sizes[k] > 0 ? resp.u.batch_alloc.results[j].n_replicas : 0;
    }
    reqs = calloc(n_tasks ? n_tasks : 1, sizeof(*reqs));
    task_pos = calloc(n_tasks ? n_tasks : 1, sizeof(*task_pos));
    failed = calloc(n_tasks ? n_tasks : 1, sizeof(*failed));
    if (reqs == NULL || task_pos == NULL || failed == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch put transfers");
        goto out_resp;
    }
    size_t t = 0;
    for (size_t j = 0; j < m; j++) {
        const crp_rpc_key_result *kr = &resp.u.batch_alloc.results[j];
        const value_parts *v = &vals[idx[j]];
        /* An existing complete key is a success for put (not ended: not ours). */
        res[j] = kr->status == CR_OBJECT_ALREADY_EXISTS && !upsert ? 0 : kr->status;
        allocated[j] = kr->status == 0;
        if (kr->status != 0 || v->total == 0)
            continue;
        for (size_t r = 0; r < kr->n_replicas && res[j] == 0; r++) {
            cr_segment_handle h;
            int hrc = crc_segment_handle(s, kr->replicas[r].segment, &h);
            if (hrc < 0) {
                res[j] = hrc;
                break;
            }
            uint64_t off = 0;
            for (size_t k = 0; k < v->n; off += v->sizes[k], k++) {
                if (v->sizes[k] == 0)
                    continue;
                int op = v->registered ? CR_OP_WRITE : CR_OP_WRITE | CR_OP_LOCAL_UNREGISTERED;
                reqs[t] = (cr_transfer_request){op, (void *)v->parts[k], h,
                                                kr->replicas[r].addr + off, v->sizes[k]};
                task_pos[t++] = j;
            }
        }
    }
    batch_copy copy = {s, reqs, t, failed, false};
    size_t ne = 0, nr = 0;
    if (ahead) { /* the keys placed: their end goes first, the copy while the master works */
        for (size_t j = 0; j < m; j++)
            if (allocated[j] && res[j] == 0)
                pos[ne++] = j;
        for (size_t e = 0; e < ne; e++) {
            ks[e] = (char *)keys[idx[pos[e]]];
            allocated[pos[e]] = 2; /* ended by batch_end_ahead */
        }
        if (ne > 0 && batch_end_ahead(s, ks, ne, pos, &copy, task_pos, res)) {
            for (size_t j = 0; j < m; j++) /* placed keys whose holder we could not name */
                if (allocated[j] == 1)
                    ks[nr++] = (char *)keys[idx[j]];
            if (nr > 0)
                (void)batch_finish(s, upsert, false, ks, nr, (int)s->rpc_timeout_ms, NULL);
            goto results;
        }
        ne = 0;
    }
    if (!copy.ran)
        crc_run_batch_direct(s, reqs, t, failed);
    for (size_t k = 0; k < t; k++)
        if (failed[k] && res[task_pos[k]] == 0)
            res[task_pos[k]] = CR_TRANSFER_FAIL;
    /* Finish: END for the written keys, REVOKE for the allocated-but-failed ones. */
    for (size_t j = 0; j < m; j++)
        if (allocated[j] && res[j] == 0)
            pos[ne++] = j;
    for (size_t e = 0; e < ne; e++)
        ks[e] = (char *)keys[idx[pos[e]]];
    if (ne > 0) {
        int *st = calloc(ne, sizeof(*st));
        int frc = st == NULL ? crb_error(CR_ERR_NO_MEMORY, "batch put end")
                             : batch_finish(s, upsert, true, ks, ne, (int)s->rpc_timeout_ms, st);
        for (size_t e = 0; e < ne; e++)
            res[pos[e]] = frc < 0 ? frc : st[e];
        free(st);
    }
    for (size_t j = 0; j < m; j++)
        if (allocated[j] && res[j] < 0)
            ks[nr++] = (char *)keys[idx[j]];
    if (nr > 0)
        batch_finish(s, upsert, false, ks, nr, (int)s->rpc_timeout_ms, NULL);
results:
    for (size_t j = 0; j < m; j++)
        results[idx[j]] = res[j];
    rc = 0;
out_resp:
    crp_rpc_resp_clear(&resp);
out_free:
    free(failed);
    free(task_pos);
    free(reqs);
    free(allocated);
    free(pos);
    free(res);
    free(vs);
    free(ks);
    return rc;
}

/* One master round of a batch put (batch_put_round_how), committed ahead when the master and
 * the store allow it; a master that refuses the owned writes that needs gets them unowned. */
static int batch_put_round(cr_store *s, const char *const *keys, const value_parts *vals,
                           const size_t *idx, size_t m, const cr_replicate_config *cfg, bool upsert,
                           int *results)
{
    bool ahead = batch_ahead_ok(s, upsert);
    int rc = batch_put_round_how(s, keys, vals, idx, m, cfg, upsert, ahead, results);
    if (rc == BATCH_OWNED_REFUSED)
        rc = batch_put_round_how(s, keys, vals, idx, m, cfg, upsert, false, results);
    return rc;
}

typedef struct key_at {
    const char *key;
    size_t i;
} key_at;

static int cmp_key_at(const void *a, const void *b)
{
    const key_at *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c != 0 ? c : (x->i > y->i) - (x->i < y->i);
}

/* later[i] = 1 for every key that occurs earlier in the batch too. */
static int mark_repeats(const char *const *keys, const int *results, size_t n, uint8_t *later)
{
    key_at *order = malloc((n ? n : 1) * sizeof(*order));
    if (order == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (results[i] == 0)
            order[m++] = (key_at){keys[i], i};
    qsort(order, m, sizeof(*order), cmp_key_at);
    for (size_t j = 1; j < m; j++)
        if (strcmp(order[j].key, order[j - 1].key) == 0)
            later[order[j].i] = 1;
    free(order);
    return 0;
}

/*
 * Every batch put: vals[i] is key i's value as parts, registered (written
 * directly) or not (copying: written straight from the caller's bytes
 * while crc_direct_ok, else staged whole in the local buffer when it fits
 * there now). results[i] is 0 on entry, or a failure found by the caller.
 * Keys go to the master in rounds of at most CRC_BATCH_KEYS keys
 * (batch_put_round); a copying value that does not fit the free staging
 * space, and a key that occurs earlier in the batch, is put on its own
 * (put_value) after its round, so the per-key outcome is what one put per
 * key in order would give. Returns 0, or the failure of the first round that
 * failed as a whole (its keys get that code as their result).
 */
static int batch_put_values(cr_store *s, const char *const *keys, const value_parts *vals, size_t n,
                            const cr_replicate_config *cfg, bool upsert, int *results)
{
    int rc = 0, first = 0;
    /* Per-round arrays sized by the batch, not the round limit: a small
     * batch does not zero 40 KiB per call (thin_ops.c: that much heap above
     * a caller's values made glibc trim and regrow the heap per call). */
    size_t round_cap = n < CRC_BATCH_KEYS ? (n ? n : 1) : CRC_BATCH_KEYS;
    uint8_t *later = calloc(n, 1);
    uint8_t *alone = calloc(round_cap, 1);
    uint8_t *held = calloc(round_cap, 1); /* stage[j] holds staging space */
    size_t *idx = calloc(round_cap, sizeof(*idx));
    value_parts *staged = calloc(n, sizeof(*staged));
    const void **stage_ptr = calloc(round_cap, sizeof(*stage_ptr));
    size_t *stage_size = calloc(round_cap, sizeof(*stage_size));
    crb_oa_allocation *stage = calloc(round_cap, sizeof(*stage));
    if (later == NULL || alone == NULL || held == NULL || idx == NULL || staged == NULL ||
        stage_ptr == NULL || stage_size == NULL || stage == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
        goto out_free;
    }
    for (size_t i = 0; i < n; i++)
        if (results[i] == 0)
            results[i] = crc_check_key(keys[i]);
    rc = mark_repeats(keys, results, n, later);
    if (rc < 0)
        goto out_free;
    for (size_t i = 0; i < n;) {
        /* One round: the next keys, up to the key-count and key-bytes bounds. */
        size_t m = 0, key_bytes = 0;
        bool direct = crc_direct_ok(s); /* copying values go as they are */
        for (; i < n && m < round_cap; i++) {
            if (results[i] < 0 || later[i])
                continue;
            size_t kl = strlen(keys[i]);
            if (m > 0 && key_bytes + kl > CRC_BATCH_KEY_BYTES)
                break;
            key_bytes += kl;
            alone[m] = 0;
            held[m] = 0;
            staged[i] = vals[i];
            if (!vals[i].registered && vals[i].total > 0 && !direct) {
                uint8_t *p;
                if (crc_staging_try_alloc(s, vals[i].total, &stage[m], &p) == 0) {
                    for (size_t k = 0, off = 0; k < vals[i].n; off += vals[i].sizes[k], k++)
                        if (vals[i].sizes[k] > 0)
                            memcpy(p + off, vals[i].parts[k], vals[i].sizes[k]);
                    stage_ptr[m] = p;
                    stage_size[m] = (size_t)vals[i].total;
                    staged[i] =
                        (value_parts){&stage_ptr[m], &stage_size[m], 1, true, vals[i].total};
                    held[m] = 1;
                } else {
                    alone[m] = 1;
                }
            }
            idx[m++] = i;
        }
        /* Batch the keys that are in registered memory now, keeping order. */
        size_t nb = 0;
        size_t *bidx = malloc((m ? m : 1) * sizeof(*bidx));
        if (bidx == NULL) {
            rc = crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
            for (size_t j = 0; j < m; j++)
                if (held[j])
                    crc_staging_free(s, &stage[j]);
            goto out_free;
        }
        for (size_t j = 0; j < m; j++)
            if (!alone[j])
                bidx[nb++] = idx[j];
        int brc = nb > 0 ? batch_put_round(s, keys, staged, bidx, nb, cfg, upsert, results) : 0;
        if (brc < 0) {
            for (size_t j = 0; j < nb; j++)
                results[bidx[j]] = brc;
            first = first < 0 ? first : brc;
        }
        free(bidx);
        for (size_t j = 0; j < m; j++)
            if (held[j])
                crc_staging_free(s, &stage[j]);
        /* What did not fit the staging buffer now: one key at a time, in chunks. */
        for (size_t j = 0; j < m; j++)
            if (alone[j])
                results[idx[j]] = put_value(s, keys[idx[j]], &vals[idx[j]], upsert, cfg);
    }
    for (size_t i = 0; i < n; i++)
        if (later[i])
            results[i] = put_value(s, keys[i], &vals[i], upsert, cfg);
    /* Keys that found no space: our idle grants may hold it. Given back, those
     * keys are tried once more, one by one. */
    bool no_space = false;
    for (size_t i = 0; i < n && !no_space; i++)
        no_space = results[i] == CR_NO_AVAILABLE_HANDLE;
    if (no_space && crc_grants_release(s) > 0)
        for (size_t i = 0; i < n; i++)
            if (results[i] == CR_NO_AVAILABLE_HANDLE)
                results[i] = put_value(s, keys[i], &vals[i], upsert, cfg);
    rc = first;
out_free:
    free(stage);
    free(stage_size);
    free(stage_ptr);
    free(staged);
    free(idx);
    free(held);
    free(alone);
    free(later);
    return rc;
}

typedef enum batch_kind { BATCH_COPY, BATCH_FROM } batch_kind;

/* The single-buffer batch forms: one part per key. */
static int batch_put_single(cr_store *s, const char *const *keys, const void *const *bufs,
                            const size_t *sizes, size_t n, const cr_replicate_config *cfg,
                            int *results, bool upsert, batch_kind kind)
{
    if (cr_store_is_thin(s))
        return crc_thin_batch_put1(s, keys, bufs, sizes, n, kind == BATCH_FROM, upsert, cfg,
                                   results);
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || bufs == NULL || sizes == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch put: NULL array");
    value_parts *vals = calloc(n, sizeof(*vals));
    if (vals == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
    for (size_t i = 0; i < n; i++) {
        vals[i] = (value_parts){&bufs[i], &sizes[i], 1, kind == BATCH_FROM, sizes[i]};
        results[i] =
            bufs[i] == NULL && sizes[i] > 0
                ? crb_error(CR_INVALID_PARAMS, "batch put '%s': NULL value", keys[i] ? keys[i] : "")
                : 0;
    }
    rc = batch_put_values(s, keys, vals, n, cfg, upsert, results);
    free(vals);
    /* The copying forms report everything per key, as one put per key did. */
    return kind == BATCH_COPY ? 0 : rc;
}

static int batch_put_multi(cr_store *s, const char *const *keys, void *const *const *bufs,
                           const size_t *const *sizes, const size_t *counts, size_t n,
                           const cr_replicate_config *cfg, int *results, bool upsert)
{
    if (cr_store_is_thin(s))
        return crc_thin_batch_put(s, keys, (const void *const *const *)bufs, sizes, counts, n, true,
                                  upsert, cfg, results);
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (n == 0)
        return 0;
    if (keys == NULL || bufs == NULL || sizes == NULL || counts == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch put (multi): NULL array");
    value_parts *vals = calloc(n, sizeof(*vals));
    if (vals == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "batch of %zu", n);
    for (size_t i = 0; i < n; i++) {
        vals[i] = (value_parts){(const void *const *)bufs[i], sizes[i], counts[i], true, 0};
        results[i] = parts_total(vals[i].parts, sizes[i], counts[i], &vals[i].total);
    }
    rc = batch_put_values(s, keys, vals, n, cfg, upsert, results);
    free(vals);
    return rc;
}

int cr_store_batch_put_from(cr_store *s, const char *const *keys, void *const *bufs,
                            const size_t *sizes, size_t n, const cr_replicate_config *cfg,
                            int *results)
{
    CRC_ENTER(s);
    return batch_put_single(s, keys, (const void *const *)bufs, sizes, n, cfg, results, false,
                            BATCH_FROM);
}

int cr_store_batch_upsert_from(cr_store *s, const char *const *keys, void *const *bufs,
                               const size_t *sizes, size_t n, const cr_replicate_config *cfg,
                               int *results)
{
    CRC_ENTER(s);
    return batch_put_single(s, keys, (const void *const *)bufs, sizes, n, cfg, results, true,
                            BATCH_FROM);
}

int cr_store_batch_put(cr_store *s, const char *const *keys, const void *const *values,
                       const size_t *sizes, size_t n, const cr_replicate_config *cfg, int *results)
{
    CRC_ENTER(s);
    return batch_put_single(s, keys, values, sizes, n, cfg, results, false, BATCH_COPY);
}

int cr_store_batch_upsert(cr_store *s, const char *const *keys, const void *const *values,
                          const size_t *sizes, size_t n, const cr_replicate_config *cfg,
                          int *results)
{
    CRC_ENTER(s);
    return batch_put_single(s, keys, values, sizes, n, cfg, results, true, BATCH_COPY);
}

int cr_store_batch_put_from_multi(cr_store *s, const char *const *keys, void *const *const *bufs,
                                  const size_t *const *sizes, const size_t *counts, size_t n,
                                  const cr_replicate_config *cfg, int *results)
{
    CRC_ENTER(s);
    return batch_put_multi(s, keys, bufs, sizes, counts, n, cfg, results, false);
}

int cr_store_batch_upsert_from_multi(cr_store *s, const char *const *keys, void *const *const *bufs,
                                     const size_t *const *sizes, const size_t *counts, size_t n,
                                     const cr_replicate_config *cfg, int *results)
{
    CRC_ENTER(s);
    return batch_put_multi(s, keys, bufs, sizes, counts, n, cfg, results, true);
}
