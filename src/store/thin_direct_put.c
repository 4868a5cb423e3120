/*
 * thin_direct_put.c - a thin client's puts written straight into the
 * daemon's segment, with no hop through the daemon.
 *
 * Why: a put run by the daemon pays the hop (the daemon's wake-up for the
 * request, the client's for the reply) on top of what an embedded put does,
 * and a copying put copies twice (caller -> pool here, pool -> segment
 * there). Here the thin client does what an embedded put does, into the
 * daemon's memory (docs/standalone-client.md, "Direct puts"):
 *
 *   1. The session's SEGMENT reply (thin_direct.c) brought a writable
 *      descriptor of the segment's memfd, which we map read-write, and we
 *      have our own master connection. The master must announce
 *      CRP_RPC_CAP_OWNED_WRITES.
 *   2. PUT_START / UPSERT_START (or the batch form) on that connection,
 *      "owned by this connection" with a bound D (put_owned_ms: 30 s,
 *      CRESCENT_THIN_DIRECT_PUT_MS),
 *      replica_num 1, the daemon's segment preferred. A key the master
 *      placed anywhere but inside our mapping, or refused, is revoked and
 *      goes through the daemon as before.
 *   3. The value is copied into the mapping from the caller's memory (one
 *      copy, zero-copy and copying puts alike), in chunks of DIRECT_CHUNK,
 *      each started only while the write is younger than B = D / 3
 *      (measured from before the PUT_START was sent); past it the key is
 *      revoked and goes through the daemon.
 *   4. The daemon must still be there (an idle session connection shows no
 *      EOF): only then is the segment of that name the memory we mapped (as
 *      for direct reads). If it died, the writes are revoked and the keys go
 *      through the daemon path, which fails fast.
 *   5. PUT_END makes the values visible; a key whose PUT_END fails goes
 *      through the daemon (its write was preempted or revoked).
 *
 * A writer that dies (kill -9) at any point: its master connection closes,
 * the master revokes every write it owned at once (the keys are free, never
 * visible) and reuses their space at start + D.
 *
 * The stalled writer (the one contract direct puts weaken): a thin client
 * stopped (SIGSTOP, swapped out) after its last bound check, inside one
 * chunk's memcpy, for longer than D - B (20 s) while its master connection closed (the master's
 * idle timeout, a master restart) could write into space the master gave to another object. A put
 * through the daemon has no such window. We accept it: a 1 MiB chunk's copy takes well under a
 * millisecond, a 20 s stop inside it is a host in trouble, and the writer is a process of the
 * daemon's uid, which could write the segment anyway (docs/standalone-client.md, "Direct puts").
 * CRESCENT_THIN_DIRECT_PUT=0 turns direct puts off.
 *
 * Threading: any thread; direct_lock is held for reading across a put.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "store/internal.h"
#include "store/thin.h"

#define DIRECT_CHUNK (1u << 20) /* bytes copied between two bound checks */

/* Can the direct path take this config? (One replica, in the daemon's segment.) */
static bool config_ok(const crc_thin *t, const cr_replicate_config *cfg)
{
    if (cfg == NULL)
        return true;
    if (cfg->replica_num != 1) /* 0: the daemon path refuses it */
        return false;
    if (cfg->n_preferred == 0)
        return true;
    return cfg->n_preferred == 1 && cfg->preferred_segments != NULL &&
           cfg->preferred_segments[0] != NULL &&
           strcmp(cfg->preferred_segments[0], t->seg_name) == 0;
}

/* Would the daemon path accept these parts as zero-copy memory? */
static bool zero_copy_ok(crc_thin *t, const void *const *parts, const size_t *sizes, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (sizes[k] == 0)
            continue;
        crp_thin_ext e;
        crc_reach how;
        if (parts[k] == NULL || crc_thin_translate(t, parts[k], sizes[k], &e, &how) < 0)
            return false;
    }
    return true;
}

/* Where key j's replica lies in our mapping, or NULL if it is elsewhere. */
static uint8_t *placed_in_map(const crc_thin *t, const crp_rpc_replica *reps, size_t n,
                              uint64_t size)
{
    if (n != 1)
        return NULL;
    const crp_rpc_replica *r = &reps[0];
    if (r->addr < t->seg_base || r->size != size || r->size > t->seg_size ||
        r->addr - t->seg_base > t->seg_size - r->size || strcmp(r->segment, t->seg_name) != 0)
        return NULL;
    return t->seg_map + (r->addr - t->seg_base);
}

/* Copy key j's parts to dst in chunks, each begun before t0 + the bound. */
static bool copy_bounded(uint8_t *dst, const void *const *parts, const size_t *sizes, size_t n,
                         uint64_t t0, uint64_t bound_ms)
{
    uint64_t at = 0;
    for (size_t k = 0; k < n; k++) {
        const uint8_t *src = parts[k];
        for (size_t off = 0; off < sizes[k];) {
            if (crb_now_ms() - t0 >= bound_ms)
                return false;
            size_t len = sizes[k] - off < DIRECT_CHUNK ? sizes[k] - off : DIRECT_CHUNK;
            memcpy(dst + at, src + off, len);
            off += len;
            at += len;
        }
    }
    return true;
}

/* End (end true) or revoke keys[0..m) on our master connection; st[j]:
 * each key's status, or the call's transport error for all of them. */
static void end_or_revoke(crc_thin *t, const char *const *keys, size_t m, bool upsert, bool end,
                          int32_t *st)
{
    if (m == 0)
        return;
    crp_rpc_req req;
    memset(&req, 0, sizeof(req));
    if (m == 1) {
        req.op = end ? (upsert ? CRP_RPC_UPSERT_END : CRP_RPC_PUT_END)
                     : (upsert ? CRP_RPC_UPSERT_REVOKE : CRP_RPC_PUT_REVOKE);
        req.u.owner_key = (crp_rpc_owner_key_req){t->master_id, (char *)keys[0]};
    } else {
        req.op = end ? (upsert ? CRP_RPC_BATCH_UPSERT_END : CRP_RPC_BATCH_PUT_END)
                     : (upsert ? CRP_RPC_BATCH_UPSERT_REVOKE : CRP_RPC_BATCH_PUT_REVOKE);
        req.u.owner_keys = (crp_rpc_owner_keys_req){t->master_id, m, (char **)keys};
    }
    crp_rpc_resp resp;
    int rc = crc_master_call(t->master, &req, &resp, (int)t->rpc_timeout_ms);
    if (rc == 0 && m > 1 && resp.status == 0 && resp.u.statuses.n != m)
        rc = crb_error(CR_ERR_MALFORMED_FRAME, "%s: %zu results for %zu keys",
                       crp_rpc_op_name(req.op), resp.u.statuses.n, m);
    for (size_t j = 0; j < m; j++)
        st[j] = rc < 0                        ? rc
                : (m == 1 || resp.status < 0) ? resp.status
                                              : resp.u.statuses.results[j];
    if (rc == 0 || rc == CR_ERR_MALFORMED_FRAME)
        crp_rpc_resp_clear(&resp);
}

/* Per key of a direct put round. */
typedef struct put_key {
    uint64_t size;
    uint8_t *dst; /* where the master placed it in our mapping; NULL: not there */
} put_key;

/* Scratch of a round: one allocation. */
typedef struct put_round {
    put_key *pk;
    uint64_t *sizes;
    const char **endk, **revk; /* keys to end, keys to revoke */
    size_t *endi;              /* the index of each key to end */
    int32_t *st;
} put_round;

static int round_alloc(size_t n, put_round *r)
{
    size_t each =
        sizeof(put_key) + sizeof(uint64_t) + 2 * sizeof(char *) + sizeof(size_t) + sizeof(int32_t);
    uint8_t *p = calloc(n, each);
    if (p == NULL)
        return CR_ERR_NO_MEMORY;
    r->pk = (put_key *)p;
    r->sizes = (uint64_t *)(r->pk + n);
    r->endk = (const char **)(r->sizes + n);
    r->revk = r->endk + n;
    r->endi = (size_t *)(r->revk + n);
    r->st = (int32_t *)(r->endi + n);
    return 0;
}

/* The master calls and the copies, direct_lock held for reading. */
static void direct_put_round(crc_thin *t, crc_thin_conn *c, const char *const *keys, size_t n,
                             const void *const *const *parts, const size_t *const *sizes,
                             const size_t *counts, bool upsert, const cr_replicate_config *cfg,
                             int *results, bool *done, bool *lost)
{
    put_round r;
    if (round_alloc(n, &r) < 0)
        return;
    for (size_t j = 0; j < n; j++)
        for (size_t k = 0; k < counts[j]; k++)
            r.sizes[j] += sizes[j][k];
    crp_rpc_req req;
    memset(&req, 0, sizeof(req));
    req.owned_ms = t->put_owned_ms;
    crp_rpc_replica_config wire;
    crc_config_to_wire(cfg, &wire);
    const char *pref[1] = {t->seg_name};
    wire.replica_num = 1;
    wire.n_preferred = 1;
    wire.preferred_segments = (char **)pref;
    wire.prefer_same_node = false;
    if (n == 1) {
        req.op = upsert ? CRP_RPC_UPSERT_START : CRP_RPC_PUT_START;
        req.u.put_start = (crp_rpc_put_start_req){t->master_id, (char *)keys[0], r.sizes[0], wire};
    } else {
        req.op = upsert ? CRP_RPC_BATCH_UPSERT_START : CRP_RPC_BATCH_PUT_START;
        req.u.batch_put_start =
            (crp_rpc_batch_put_start_req){t->master_id, n, (char **)keys, r.sizes, wire};
    }
    uint64_t t0 = crb_now_ms(); /* the bound counts from before the master started it */
    crp_rpc_resp resp;
    size_t nr = 0, ne = 0;
    int rc = crc_master_call(t->master, &req, &resp, (int)t->rpc_timeout_ms);
    if (rc < 0) {
        /* The master may still start them later on this connection: revoke
         * behind the start (served in order); the daemon path follows. */
        end_or_revoke(t, keys, n, upsert, false, r.st);
        goto out_free;
    }
    if (resp.status == CR_INVALID_PARAMS) { /* e.g. our bound beyond the master's release timeout */
        if (!atomic_exchange(&t->direct_put_refused, true))
            crb_log(CRB_LOG_INFO,
                    "thin client of %s: the master refused a direct put (%s): puts "
                    "go through the daemon",
                    t->address, resp.message ? resp.message : "-");
    }
    /* A complete key is a success for a put, as embedded (Mooncake's rule). */
    if (n == 1 && resp.status == CR_OBJECT_ALREADY_EXISTS && !upsert) {
        results[0] = 0;
        done[0] = true;
    }
    if (n == 1 && resp.status == 0) {
        r.pk[0].dst = placed_in_map(t, resp.u.alloc.replicas, resp.u.alloc.n_replicas, r.sizes[0]);
        if (r.pk[0].dst == NULL)
            r.revk[nr++] = keys[0];
    } else if (n > 1 && resp.status == 0 && resp.u.batch_alloc.n == n) {
        for (size_t j = 0; j < n; j++) {
            const crp_rpc_key_result *kr = &resp.u.batch_alloc.results[j];
            if (kr->status == CR_OBJECT_ALREADY_EXISTS && !upsert) {
                results[j] = 0; /* as embedded */
                done[j] = true;
            }
            if (kr->status != 0)
                continue; /* not started: the daemon path reports it */
            r.pk[j].dst = placed_in_map(t, kr->replicas, kr->n_replicas, r.sizes[j]);
            if (r.pk[j].dst == NULL)
                r.revk[nr++] = keys[j];
        }
    } else if (n > 1 && resp.status == 0) {
        end_or_revoke(t, keys, n, upsert, false, r.st); /* a reply we cannot read */
    }
    crp_rpc_resp_clear(&resp);

    /* The copies, each chunk begun within the bound. */
    bool late = false;
    for (size_t j = 0; j < n; j++) {
        if (r.pk[j].dst == NULL)
            continue;
        if (late ||
            !copy_bounded(r.pk[j].dst, parts[j], sizes[j], counts[j], t0, t->put_bound_ms)) {
            if (!late)
                crb_log(CRB_LOG_INFO,
                        "thin client: a direct put passed its %u ms bound at '%s'; it and the "
                        "keys after it are revoked and go through the daemon",
                        t->put_bound_ms, keys[j]);
            late = true;
            r.revk[nr++] = keys[j];
            continue;
        }
        r.endk[ne] = keys[j];
        r.endi[ne++] = j;
    }
    /* Our mapping is the segment of that name only while the daemon lives. */
    *lost = !crc_thin_daemon_alive(c);
    if (*lost) {
        for (size_t i = 0; i < ne; i++)
            r.revk[nr++] = r.endk[i];
        ne = 0;
    }
    end_or_revoke(t, r.endk, ne, upsert, true, r.st);
    for (size_t i = 0; i < ne; i++) {
        size_t j = r.endi[i];
        if (r.st[i] == 0) {
            results[j] = 0;
            done[j] = true;
        } else if (r.st[i] == CR_RPC_FAIL || r.st[i] == CR_RPC_TIMEOUT) {
            r.revk[nr++] = keys[j]; /* unknown: revoke (a no-op if it ended) */
        }
    }
    end_or_revoke(t, r.revk, nr, upsert, false, r.st);
out_free:
    free(r.pk);
}

void crc_thin_direct_put(crc_thin *t, const char *const *keys, size_t n,
                         const void *const *const *parts, const size_t *const *sizes,
                         const size_t *counts, bool zero_copy, bool upsert,
                         const cr_replicate_config *cfg, int *results, bool *done)
{
    for (size_t j = 0; j < n; j++)
        done[j] = false;
    if (t->direct_put_off || atomic_load(&t->direct_put_refused) || n == 0 || n > CRC_BATCH_KEYS)
        return;
    size_t key_bytes = 0;
    for (size_t j = 0; j < n; j++) {
        if (crc_check_key(keys[j]) < 0)
            return;
        if (counts[j] > 0 && (parts[j] == NULL || sizes[j] == NULL))
            return;
        for (size_t k = 0; k < counts[j]; k++)
            if (parts[j][k] == NULL && sizes[j][k] > 0)
                return;
        if (zero_copy && !zero_copy_ok(t, parts[j], sizes[j], counts[j]))
            return;
        key_bytes += strlen(keys[j]);
    }
    if (key_bytes > CRC_BATCH_KEY_BYTES)
        return;
    crc_thin_conn *c;
    if (crc_thin_direct_enter(t, &c) < 0)
        return; /* the daemon path says why */
    bool lost = false;
    if (t->direct_put_on && t->direct_gen == c->gen && config_ok(t, cfg) &&
        (crc_master_caps(t->master) & CRP_RPC_CAP_OWNED_WRITES))
        direct_put_round(t, c, keys, n, parts, sizes, counts, upsert, cfg, results, done, &lost);
    crc_thin_direct_leave(t, c, lost);
    size_t got = 0;
    uint64_t bytes = 0;
    for (size_t j = 0; j < n; j++) {
        got += done[j];
        for (size_t k = 0; done[j] && k < counts[j]; k++)
            bytes += sizes[j][k];
    }
    atomic_fetch_add(&t->direct_put_keys, got);
    atomic_fetch_add(&t->direct_put_fallbacks, n - got);
    atomic_fetch_add(zero_copy ? &t->zero_copy_bytes : &t->copied_bytes, bytes);
}
