/*
 * session.c - get and put sessions (Mooncake's layer-wise ranged API; see
 * include/crescent/store.h, "sessions").
 *
 * A session table keeps two maps from object key to a refcounted entry:
 *
 *   get entry   the object's replicas (this client's own first), its size,
 *               the read lease's deadline on the local monotonic clock
 *               (request time + the master's TTL: never later than the
 *               master's own), the TTL and the master view it came from
 *   put entry   the replicas BATCH_PUT_START allocated, the object size,
 *               `writable` (cleared by end/revoke: the seal), the ranged
 *               writes in flight, and `pending` while its start is still
 *               at the master (so a second start of the key, in the same
 *               call or another thread, sees a session and is refused)
 *
 * The table mutex guards the maps and every entry's mutable fields; an
 * entry's key and replica list are written once, before it is published. A
 * call takes a reference on each entry it uses, drops the mutex for master
 * calls and transfers, and gives the reference back at the end, so a
 * concurrent session end never frees what a ranged call is reading. End and
 * revoke wait on the table's condition variable until the ranged writes of
 * their keys have drained.
 *
 * Lease renewal: a ranged get that finds less than half of a session's
 * lease left asks the master again (one BATCH_GET_REPLICA_LIST for every
 * such key of the call). The master extends the object's lease; the session
 * adopts the new deadline only when the master still names the replica the
 * session reads (segment, address, size, segment epoch) and the master view
 * is the one the session started under. While the old lease held, that
 * memory could not be reused (removal is refused, and forced removal or
 * replacement defer the release past the lease), so the same replica is the
 * same bytes. Otherwise the old deadline stands and the session expires.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "store/internal.h"
#include "store/thin.h"
#include "store/keymap.h"

typedef struct sess_entry {
    int refs;  /* the table's (while mapped) + one per call using it */
    char *key; /* for the revoke at destroy */
    size_t n_reps;
    crp_rpc_replica *reps; /* segment strings owned by the entry */
    uint64_t size;
    /* get sessions */
    uint64_t deadline_ms, ttl_ms, view;
    /* put sessions */
    bool pending, writable;
    int inflight;
} sess_entry;

struct cr_store_sessions {
    cr_store *s;
    uint64_t thin_table; /* thin mode: the daemon's table (store/thin.h) */
    pthread_mutex_t mu;
    pthread_cond_t drained;
    crc_keymap gets, puts;
};

/* --- entries ------------------------------------------------------------- */

static sess_entry *new_entry(const char *key)
{
    sess_entry *e = calloc(1, sizeof(*e));
    if (e == NULL || (e->key = strdup(key)) == NULL) {
        free(e);
        return NULL;
    }
    e->refs = 1;
    return e;
}

static void free_entry(sess_entry *e)
{
    for (size_t i = 0; i < e->n_reps; i++)
        free(e->reps[i].segment);
    free(e->reps);
    free(e->key);
    free(e);
}

/* Drop one reference (table mutex held, or the entry not yet shared). */
static void unref(sess_entry *e)
{
    if (e != NULL && --e->refs == 0)
        free_entry(e);
}

/* Remove key's entry from map if it is still e (table mutex held). */
static void unmap_if(crc_keymap *map, const char *key, sess_entry *e)
{
    if (crc_keymap_get(map, key) == e) {
        crc_keymap_remove(map, key);
        unref(e);
    }
}

/* Copy n replicas (this client's own first) into e. */
static int copy_replicas(cr_store *s, sess_entry *e, const crp_rpc_replica *r, size_t n)
{
    e->reps = calloc(n ? n : 1, sizeof(*e->reps));
    if (e->reps == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "session replicas");
    for (size_t i = 0; i < n; i++) {
        e->reps[i] = r[i];
        e->reps[i].segment = strdup(r[i].segment);
        if (e->reps[i].segment == NULL) {
            e->n_reps = i;
            return crb_error(CR_ERR_NO_MEMORY, "session replicas");
        }
    }
    e->n_reps = n;
    for (size_t i = 1; i < n; i++) {
        if (strcmp(e->reps[i].segment, s->segment_name) == 0) {
            crp_rpc_replica t = e->reps[0];
            e->reps[0] = e->reps[i];
            e->reps[i] = t;
            break;
        }
    }
    return 0;
}

static bool same_replica(const crp_rpc_replica *a, const crp_rpc_replica *b)
{
    return a->addr == b->addr && a->size == b->size && a->epoch == b->epoch &&
           strcmp(a->segment, b->segment) == 0;
}

/* --- master rounds ------------------------------------------------------------ */

/* End of the round that starts at idx[from]: at most CRC_BATCH_KEYS keys and
 * CRC_BATCH_KEY_BYTES bytes of keys (at least one key). */
static size_t round_end(const char *const *keys, const size_t *idx, size_t from, size_t n_idx)
{
    size_t end = from, bytes = 0;
    while (end < n_idx && end - from < CRC_BATCH_KEYS) {
        size_t kl = strlen(keys[idx[end]]);
        if (end > from && bytes + kl > CRC_BATCH_KEY_BYTES)
            break;
        bytes += kl;
        end++;
    }
    return end;
}

/* BATCH_GET_REPLICA_LIST of m keys; *t0 is when it was sent. */
static int get_replicas_call(cr_store *s, char **ks, size_t m, uint64_t *t0, crp_rpc_resp *resp)
{
    crp_rpc_req req = {.op = CRP_RPC_BATCH_GET_REPLICA_LIST};
    req.u.keys = (crp_rpc_keys_req){m, ks};
    *t0 = crb_now_ms();
    int rc = crc_call(s, &req, resp);
    if (rc < 0)
        return rc;
    if (resp->status < 0 || resp->u.batch_get.n != m) {
        rc = resp->status < 0 ? crb_error(resp->status, "batch get replicas: %s",
                                          resp->message ? resp->message : cr_strerror(resp->status))
                              : crb_error(CR_RPC_FAIL, "batch get replicas: %zu results for %zu",
                                          resp->u.batch_get.n, m);
        crp_rpc_resp_clear(resp);
    }
    return rc;
}

/* BATCH_PUT_END / BATCH_PUT_REVOKE of m keys: statuses[0..m) on success. */
static int owner_keys_call(cr_store *s, int op, char **ks, size_t m, int *statuses)
{
    crp_rpc_req req = {.op = (uint16_t)op};
    req.u.owner_keys = (crp_rpc_owner_keys_req){s->client_id, m, ks};
    crp_rpc_resp resp;
    int rc = crc_call(s, &req, &resp);
    if (rc < 0)
        return rc;
    if (resp.status < 0)
        rc = crb_error(resp.status, "%s: %s", crp_rpc_op_name(op),
                       resp.message ? resp.message : cr_strerror(resp.status));
    else if (resp.u.statuses.n != m)
        rc = crb_error(CR_RPC_FAIL, "%s: %zu results for %zu keys", crp_rpc_op_name(op),
                       resp.u.statuses.n, m);
    else
        for (size_t j = 0; j < m; j++)
            statuses[j] = resp.u.statuses.results[j];
    crp_rpc_resp_clear(&resp);
    return rc;
}

/* --- table ----------------------------------------------------------------- */

int cr_store_sessions_create(cr_store *s, cr_store_sessions **out)
{
    if (s == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "sessions_create: NULL argument");
    cr_store_sessions *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "session table");
    t->s = s;
    if (cr_store_is_thin(s)) {
        int rc = crc_thin_table_create(s, &t->thin_table);
        if (rc < 0) {
            free(t);
            return rc;
        }
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->drained, NULL);
    crc_keymap_init(&t->gets);
    crc_keymap_init(&t->puts);
    *out = t;
    return 0;
}

typedef struct entry_list {
    sess_entry **v;
    size_t n;
} entry_list;

static void list_add(void *value, void *arg)
{
    entry_list *l = arg;
    l->v[l->n++] = value;
}

void cr_store_sessions_destroy(cr_store_sessions *t)
{
    if (t == NULL)
        return;
    if (cr_store_is_thin(t->s))
        crc_thin_table_destroy(t->s, t->thin_table);
    entry_list puts = {calloc(t->puts.used + 1, sizeof(sess_entry *)), 0};
    entry_list gets = {calloc(t->gets.used + 1, sizeof(sess_entry *)), 0};
    if (puts.v != NULL)
        crc_keymap_each(&t->puts, list_add, &puts);
    if (gets.v != NULL)
        crc_keymap_each(&t->gets, list_add, &gets);
    /* Revoke open put sessions so their space is not held until the master's
     * discard timeout (best effort: the store may be closed already). */
    char **ks = calloc(puts.n + 1, sizeof(*ks));
    size_t m = 0;
    for (size_t i = 0; ks != NULL && i < puts.n; i++)
        if (!puts.v[i]->pending)
            ks[m++] = puts.v[i]->key;
    int *st = calloc(CRC_BATCH_KEYS, sizeof(*st));
    size_t *idx = calloc(m + 1, sizeof(*idx));
    if (m > 0 && st != NULL && idx != NULL && crc_check_open(t->s) == 0) {
        for (size_t j = 0; j < m; j++)
            idx[j] = j;
        for (size_t from = 0; from < m;) {
            size_t end = round_end((const char *const *)ks, idx, from, m);
            owner_keys_call(t->s, CRP_RPC_BATCH_PUT_REVOKE, ks + from, end - from, st);
            from = end;
        }
    }
    free(idx);
    free(st);
    free(ks);
    for (size_t i = 0; puts.v != NULL && i < puts.n; i++)
        unref(puts.v[i]);
    for (size_t i = 0; gets.v != NULL && i < gets.n; i++)
        unref(gets.v[i]);
    free(puts.v);
    free(gets.v);
    crc_keymap_fini(&t->gets);
    crc_keymap_fini(&t->puts);
    pthread_cond_destroy(&t->drained);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static int check_call(cr_store_sessions *t, const char *what, const void *keys, size_t n,
                      const void *results)
{
    if (t == NULL)
        return crb_error(CR_INVALID_PARAMS, "%s: NULL session table", what);
    int rc = crc_check_open(t->s);
    if (rc < 0)
        return rc;
    if (n > 0 && (keys == NULL || results == NULL))
        return crb_error(CR_INVALID_PARAMS, "%s: NULL arrays", what);
    return 0;
}

/* --- get sessions ------------------------------------------------------------- */

/* Open get sessions for the keys idx[0..m) of one round. */
static void get_start_round(cr_store_sessions *t, const char *const *keys, const size_t *idx,
                            size_t m, char **ks, int *results)
{
    cr_store *s = t->s;
    for (size_t j = 0; j < m; j++)
        ks[j] = (char *)keys[idx[j]];
    crp_rpc_resp resp;
    uint64_t t0;
    int rc = get_replicas_call(s, ks, m, &t0, &resp);
    uint64_t view = crc_master_view(s->master);
    for (size_t j = 0; j < m; j++) {
        size_t i = idx[j];
        sess_entry *e = NULL;
        int r = rc;
        if (r == 0) {
            const crp_rpc_key_result *kr = &resp.u.batch_get.results[j];
            r = kr->status < 0 ? kr->status : (kr->n_replicas == 0 ? CR_REPLICA_IS_NOT_READY : 0);
            if (r < 0) {
                crb_error(r, "get session '%s': %s", keys[i], cr_strerror(r));
            } else if ((e = new_entry(keys[i])) == NULL) {
                r = crb_error(CR_ERR_NO_MEMORY, "get session '%s'", keys[i]);
            } else if ((r = copy_replicas(s, e, kr->replicas, kr->n_replicas)) == 0) {
                e->size = e->reps[0].size;
                e->ttl_ms = resp.u.batch_get.lease_ttl_ms;
                e->deadline_ms = t0 + e->ttl_ms;
                e->view = view;
                if (crb_now_ms() >= e->deadline_ms)
                    r = crb_error(CR_LEASE_EXPIRED,
                                  "get session '%s': the lease ran out "
                                  "before the session opened",
                                  keys[i]);
            }
        }
        pthread_mutex_lock(&t->mu);
        void *old = NULL;
        if (r == 0)
            r = crc_keymap_put(&t->gets, keys[i], e, &old);
        else
            old = crc_keymap_remove(&t->gets, keys[i]);
        if (r < 0 && e != NULL)
            unref(e);
        unref(old);
        pthread_mutex_unlock(&t->mu);
        results[i] = r;
    }
    if (rc == 0)
        crp_rpc_resp_clear(&resp);
}

int cr_store_get_session_start(cr_store_sessions *t, const char *const *keys, size_t n,
                               int *results)
{
    int rc = check_call(t, "get_session_start", keys, n, results);
    if (rc < 0 || n == 0)
        return rc;
    if (cr_store_is_thin(t->s))
        return crc_thin_sessions_keys(t->s, CRP_THIN_GET_SESSION_START, t->thin_table, keys, n,
                                      NULL, NULL, results);
    size_t *idx = calloc(n, sizeof(*idx));
    char **ks = calloc(CRC_BATCH_KEYS, sizeof(*ks));
    if (idx == NULL || ks == NULL) {
        free(idx);
        free(ks);
        return crb_error(CR_ERR_NO_MEMORY, "get_session_start of %zu keys", n);
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        results[i] = crc_check_key(keys[i]);
        if (results[i] == 0)
            idx[m++] = i;
    }
    for (size_t from = 0; from < m;) {
        size_t end = round_end(keys, idx, from, m);
        get_start_round(t, keys, idx + from, end - from, ks, results);
        from = end;
    }
    free(ks);
    free(idx);
    return 0;
}

int cr_store_get_session_end(cr_store_sessions *t, const char *const *keys, size_t n)
{
    if (t == NULL)
        return crb_error(CR_INVALID_PARAMS, "get_session_end: NULL session table");
    if (n > 0 && keys == NULL)
        return crb_error(CR_INVALID_PARAMS, "get_session_end: NULL keys");
    if (cr_store_is_thin(t->s))
        return crc_thin_sessions_keys(t->s, CRP_THIN_GET_SESSION_END, t->thin_table, keys, n, NULL,
                                      NULL, NULL);
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < n; i++)
        if (keys[i] != NULL)
            unref(crc_keymap_remove(&t->gets, keys[i]));
    pthread_mutex_unlock(&t->mu);
    return 0;
}

/* The fragments of key i are valid for an object of `size` bytes. */
static int check_fragments(const char *what, const char *key, void *const *bufs,
                           const size_t *sizes, const uint64_t *offsets, size_t count,
                           uint64_t size, uint64_t *total)
{
    if (count > 0 && (bufs == NULL || sizes == NULL || offsets == NULL))
        return crb_error(CR_INVALID_PARAMS, "%s '%s': NULL fragment arrays", what, key);
    uint64_t sum = 0;
    for (size_t k = 0; k < count; k++) {
        if (sizes[k] > size || offsets[k] > size - sizes[k])
            return crb_error(CR_INVALID_PARAMS,
                             "%s '%s': fragment %zu (%llu bytes at offset %llu) is outside the "
                             "%llu-byte object",
                             what, key, k, (unsigned long long)sizes[k],
                             (unsigned long long)offsets[k], (unsigned long long)size);
        if (bufs[k] == NULL && sizes[k] > 0)
            return crb_error(CR_INVALID_PARAMS, "%s '%s': fragment %zu has a NULL buffer", what,
                             key, k);
        if (sizes[k] > (uint64_t)INT64_MAX - sum)
            return crb_error(CR_INVALID_PARAMS, "%s '%s': fragments add up to more than 2^63", what,
                             key);
        sum += sizes[k];
    }
    *total = sum;
    return 0;
}

/* Renew the leases of the sessions ents[j], j < m (keys ks[j]). */
static void renew_leases(cr_store_sessions *t, sess_entry **ents, char **ks, size_t m)
{
    size_t *idx = calloc(m, sizeof(*idx));
    if (idx == NULL)
        return; /* the sessions keep their deadlines */
    for (size_t j = 0; j < m; j++)
        idx[j] = j;
    for (size_t from = 0; from < m;) {
        size_t end = round_end((const char *const *)ks, idx, from, m);
        crp_rpc_resp resp;
        uint64_t t0;
        if (get_replicas_call(t->s, ks + from, end - from, &t0, &resp) == 0) {
            uint64_t view = crc_master_view(t->s->master);
            pthread_mutex_lock(&t->mu);
            for (size_t j = from; j < end; j++) {
                const crp_rpc_key_result *kr = &resp.u.batch_get.results[j - from];
                sess_entry *e = ents[j];
                bool same = false;
                for (size_t r = 0; kr->status == 0 && r < kr->n_replicas && !same; r++)
                    same = same_replica(&kr->replicas[r], &e->reps[0]);
                uint64_t until = t0 + resp.u.batch_get.lease_ttl_ms;
                if (same && view == e->view && until > e->deadline_ms)
                    e->deadline_ms = until;
            }
            pthread_mutex_unlock(&t->mu);
            crp_rpc_resp_clear(&resp);
        }
        from = end;
    }
    free(idx);
}

/* Read key i's fragments from replica rep, one fragment at a time. */
static int read_fragments(cr_store *s, const crp_rpc_replica *rep, void *const *bufs,
                          const size_t *sizes, const uint64_t *offsets, size_t count)
{
    for (size_t k = 0; k < count; k++) {
        int rc = crc_transfer(s, CR_OP_READ, rep, 1, offsets[k], bufs[k], sizes[k]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int cr_store_batch_get_ranges(cr_store_sessions *t, const char *const *keys,
                              void *const *const *bufs, const size_t *const *sizes,
                              const uint64_t *const *offsets, const size_t *counts, size_t n,
                              int64_t *results)
{
    int rc = check_call(t, "batch_get_ranges", keys, n, results);
    if (rc < 0 || n == 0)
        return rc;
    if (cr_store_is_thin(t->s))
        return crc_thin_ranges(t->s, CRP_THIN_GET_RANGES, t->thin_table, keys, bufs, sizes, offsets,
                               counts, n, results);
    if (bufs == NULL || sizes == NULL || offsets == NULL || counts == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch_get_ranges: NULL arrays");
    cr_store *s = t->s;
    sess_entry **ents = calloc(n, sizeof(*ents));
    sess_entry **renew = calloc(n, sizeof(*renew));
    char **renew_keys = calloc(n, sizeof(*renew_keys));
    uint64_t *totals = calloc(n, sizeof(*totals));
    uint8_t *retry = calloc(n, 1);
    cr_transfer_request *reqs = NULL;
    size_t *task_pos = NULL;
    bool *failed = NULL;
    if (ents == NULL || renew == NULL || renew_keys == NULL || totals == NULL || retry == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch_get_ranges of %zu keys", n);
        goto out_free;
    }
    /* Look the sessions up and check every range; note the leases to renew. */
    size_t n_renew = 0, n_tasks = 0;
    pthread_mutex_lock(&t->mu);
    uint64_t now = crb_now_ms();
    for (size_t i = 0; i < n; i++) {
        results[i] = crc_check_key(keys[i]);
        if (results[i] < 0)
            continue;
        sess_entry *e = crc_keymap_get(&t->gets, keys[i]);
        if (e == NULL) {
            results[i] =
                crb_error(CR_INVALID_PARAMS, "batch_get_ranges: no get session for '%s'", keys[i]);
            continue;
        }
        if (now >= e->deadline_ms) {
            unmap_if(&t->gets, keys[i], e);
            results[i] =
                crb_error(CR_LEASE_EXPIRED, "get session '%s': its lease ran out", keys[i]);
            continue;
        }
        results[i] = check_fragments("batch_get_ranges", keys[i], bufs[i], sizes[i], offsets[i],
                                     counts[i], e->size, &totals[i]);
        if (results[i] < 0)
            continue;
        e->refs++;
        ents[i] = e;
        n_tasks += counts[i];
        if (e->deadline_ms - now < e->ttl_ms / 2) {
            e->refs++;
            renew[n_renew] = e;
            renew_keys[n_renew++] = e->key;
        }
    }
    pthread_mutex_unlock(&t->mu);
    if (n_renew > 0)
        renew_leases(t, renew, renew_keys, n_renew);

    /* One engine batch for every fragment of every key, from its first replica. */
    reqs = calloc(n_tasks ? n_tasks : 1, sizeof(*reqs));
    task_pos = calloc(n_tasks ? n_tasks : 1, sizeof(*task_pos));
    failed = calloc(n_tasks ? n_tasks : 1, sizeof(*failed));
    if (reqs == NULL || task_pos == NULL || failed == NULL) {
        for (size_t i = 0; i < n; i++)
            if (ents[i] != NULL)
                results[i] = crb_error(CR_ERR_NO_MEMORY, "batch_get_ranges transfers");
        goto out_release;
    }
    size_t nt = 0;
    for (size_t i = 0; i < n; i++) {
        sess_entry *e = ents[i];
        if (e == NULL || totals[i] == 0)
            continue;
        cr_segment_handle h;
        if (crc_segment_handle(s, e->reps[0].segment, &h) < 0) {
            retry[i] = 1; /* another replica may be reachable */
            continue;
        }
        for (size_t k = 0; k < counts[i]; k++) {
            if (sizes[i][k] == 0)
                continue;
            reqs[nt] = (cr_transfer_request){CR_OP_READ, bufs[i][k], h,
                                             e->reps[0].addr + offsets[i][k], sizes[i][k]};
            task_pos[nt++] = i;
        }
    }
    crc_run_batch(s, reqs, nt, failed);
    for (size_t k = 0; k < nt; k++)
        if (failed[k])
            retry[task_pos[k]] = 1;
    /* Failover, one key at a time: every replica in order. */
    for (size_t i = 0; i < n; i++) {
        if (!retry[i])
            continue;
        int one = CR_TRANSFER_FAIL;
        for (size_t r = 0; r < ents[i]->n_reps && one < 0; r++)
            one = read_fragments(s, &ents[i]->reps[r], bufs[i], sizes[i], offsets[i], counts[i]);
        if (one < 0)
            results[i] = crb_error(CR_TRANSFER_FAIL,
                                   "batch_get_ranges '%s': every replica "
                                   "failed: %s",
                                   keys[i], cr_last_error_message());
    }

out_release:
    pthread_mutex_lock(&t->mu);
    now = crb_now_ms();
    for (size_t i = 0; i < n; i++) {
        sess_entry *e = ents[i];
        if (e == NULL)
            continue;
        if (results[i] == 0 && now >= e->deadline_ms) {
            unmap_if(&t->gets, keys[i], e);
            results[i] = crb_error(CR_LEASE_EXPIRED,
                                   "get session '%s': the lease ran out during the transfer; "
                                   "the bytes may be stale",
                                   keys[i]);
        } else if (results[i] == 0) {
            results[i] = (int64_t)totals[i];
        }
        unref(e);
    }
    for (size_t j = 0; j < n_renew; j++)
        unref(renew[j]);
    pthread_mutex_unlock(&t->mu);
    rc = 0;
out_free:
    free(failed);
    free(task_pos);
    free(reqs);
    free(retry);
    free(totals);
    free(renew_keys);
    free(renew);
    free(ents);
    return rc;
}

/* --- put sessions ------------------------------------------------------------- */

/* Start the put sessions of one round: pending entries ents[j] for keys[idx[j]]. */
static void put_start_round(cr_store_sessions *t, const char *const *keys, const uint64_t *sizes,
                            const size_t *idx, sess_entry **ents, size_t m,
                            const cr_replicate_config *cfg, char **ks, uint64_t *vs, int *results)
{
    cr_store *s = t->s;
    for (size_t j = 0; j < m; j++) {
        ks[j] = (char *)keys[idx[j]];
        vs[j] = sizes[idx[j]];
    }
    crp_rpc_req req = {.op = CRP_RPC_BATCH_PUT_START};
    req.u.batch_put_start.client_id = s->client_id;
    req.u.batch_put_start.n_keys = m;
    req.u.batch_put_start.keys = ks;
    req.u.batch_put_start.value_sizes = vs;
    crc_config_to_wire(cfg, &req.u.batch_put_start.config);
    crp_rpc_resp resp;
    int rc = crc_call(s, &req, &resp);
    if (rc == CR_RPC_TIMEOUT) {
        /* The master may still process the start: queue a revoke behind it
         * (requests on one connection are served in order). */
        char detail[400];
        snprintf(detail, sizeof(detail), "%s", cr_last_error_message());
        crp_rpc_req rv = {.op = CRP_RPC_BATCH_PUT_REVOKE};
        rv.u.owner_keys = (crp_rpc_owner_keys_req){s->client_id, m, ks};
        crp_rpc_resp rr;
        if (crc_master_call(s->master, &rv, &rr, 50) == 0)
            crp_rpc_resp_clear(&rr);
        rc = crb_error(rc, "%s", detail);
    } else if (rc == 0 && (resp.status < 0 || resp.u.batch_alloc.n != m)) {
        rc = resp.status < 0 ? crb_error(resp.status, "put session start: %s",
                                         resp.message ? resp.message : cr_strerror(resp.status))
                             : crb_error(CR_RPC_FAIL, "put session start: %zu results for %zu",
                                         resp.u.batch_alloc.n, m);
        crp_rpc_resp_clear(&resp);
    }
    size_t n_revoke = 0;
    for (size_t j = 0; j < m; j++) {
        size_t i = idx[j];
        sess_entry *e = ents[j];
        int r = rc;
        if (r == 0) {
            const crp_rpc_key_result *kr = &resp.u.batch_alloc.results[j];
            r = kr->status;
            if (r < 0) {
                crb_error(r, "put session '%s': %s", keys[i], cr_strerror(r));
            } else if (kr->n_replicas == 0) {
                r = crb_error(CR_INVALID_REPLICA, "put session '%s': no replica allocated",
                              keys[i]);
                ks[n_revoke++] = (char *)keys[i];
            } else if ((r = copy_replicas(s, e, kr->replicas, kr->n_replicas)) < 0) {
                ks[n_revoke++] = (char *)keys[i];
            }
        }
        pthread_mutex_lock(&t->mu);
        if (r == 0) {
            e->size = sizes[i];
            e->pending = false;
            e->writable = true;
        } else {
            unmap_if(&t->puts, keys[i], e);
        }
        pthread_mutex_unlock(&t->mu);
        results[i] = r;
    }
    if (rc == 0)
        crp_rpc_resp_clear(&resp);
    if (n_revoke > 0) {
        int *st = calloc(n_revoke, sizeof(*st));
        if (st != NULL)
            owner_keys_call(s, CRP_RPC_BATCH_PUT_REVOKE, ks, n_revoke, st);
        free(st);
    }
}

int cr_store_put_session_start(cr_store_sessions *t, const char *const *keys, const uint64_t *sizes,
                               size_t n, const cr_replicate_config *cfg, int *results)
{
    int rc = check_call(t, "put_session_start", keys, n, results);
    if (rc < 0 || n == 0)
        return rc;
    if (cr_store_is_thin(t->s))
        return crc_thin_sessions_keys(t->s, CRP_THIN_PUT_SESSION_START, t->thin_table, keys, n,
                                      sizes, cfg, results);
    if (sizes == NULL)
        return crb_error(CR_INVALID_PARAMS, "put_session_start: NULL sizes");
    size_t *idx = calloc(n, sizeof(*idx));
    sess_entry **ents = calloc(n, sizeof(*ents));
    char **ks = calloc(CRC_BATCH_KEYS, sizeof(*ks));
    uint64_t *vs = calloc(CRC_BATCH_KEYS, sizeof(*vs));
    if (idx == NULL || ents == NULL || ks == NULL || vs == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "put_session_start of %zu keys", n);
        goto out_free;
    }
    /* Claim each key with a pending entry: a second start of it fails. */
    size_t m = 0;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < n; i++) {
        results[i] = crc_check_key(keys[i]);
        if (results[i] < 0)
            continue;
        if (crc_keymap_get(&t->puts, keys[i]) != NULL) {
            results[i] =
                crb_error(CR_INVALID_PARAMS, "a put session for '%s' is already open", keys[i]);
            continue;
        }
        sess_entry *e = new_entry(keys[i]);
        if (e == NULL || crc_keymap_put(&t->puts, keys[i], e, NULL) < 0) {
            if (e != NULL)
                unref(e);
            results[i] = crb_error(CR_ERR_NO_MEMORY, "put session '%s'", keys[i]);
            continue;
        }
        e->pending = true;
        e->refs++; /* this call's */
        ents[m] = e;
        idx[m++] = i;
    }
    pthread_mutex_unlock(&t->mu);
    for (size_t from = 0; from < m;) {
        size_t end = round_end(keys, idx, from, m);
        put_start_round(t, keys, sizes, idx + from, ents + from, end - from, cfg, ks, vs, results);
        from = end;
    }
    pthread_mutex_lock(&t->mu);
    for (size_t j = 0; j < m; j++)
        unref(ents[j]);
    pthread_mutex_unlock(&t->mu);
out_free:
    free(vs);
    free(ks);
    free(ents);
    free(idx);
    return rc;
}

int cr_store_batch_put_ranges(cr_store_sessions *t, const char *const *keys,
                              void *const *const *bufs, const size_t *const *sizes,
                              const uint64_t *const *offsets, const size_t *counts, size_t n,
                              int64_t *results)
{
    int rc = check_call(t, "batch_put_ranges", keys, n, results);
    if (rc < 0 || n == 0)
        return rc;
    if (cr_store_is_thin(t->s))
        return crc_thin_ranges(t->s, CRP_THIN_PUT_RANGES, t->thin_table, keys, bufs, sizes, offsets,
                               counts, n, results);
    if (bufs == NULL || sizes == NULL || offsets == NULL || counts == NULL)
        return crb_error(CR_INVALID_PARAMS, "batch_put_ranges: NULL arrays");
    cr_store *s = t->s;
    sess_entry **ents = calloc(n, sizeof(*ents));
    uint64_t *totals = calloc(n, sizeof(*totals));
    cr_transfer_request *reqs = NULL;
    size_t *task_pos = NULL;
    bool *failed = NULL;
    if (ents == NULL || totals == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "batch_put_ranges of %zu keys", n);
        goto out_free;
    }
    size_t n_tasks = 0;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < n; i++) {
        results[i] = crc_check_key(keys[i]);
        if (results[i] < 0)
            continue;
        sess_entry *e = crc_keymap_get(&t->puts, keys[i]);
        if (e == NULL || e->pending || !e->writable) {
            results[i] = crb_error(CR_INVALID_PARAMS,
                                   "batch_put_ranges: no open put session for "
                                   "'%s'",
                                   keys[i]);
            continue;
        }
        results[i] = check_fragments("batch_put_ranges", keys[i], bufs[i], sizes[i], offsets[i],
                                     counts[i], e->size, &totals[i]);
        if (results[i] < 0)
            continue;
        e->refs++;
        e->inflight++;
        ents[i] = e;
        n_tasks += counts[i] * e->n_reps;
    }
    pthread_mutex_unlock(&t->mu);

    reqs = calloc(n_tasks ? n_tasks : 1, sizeof(*reqs));
    task_pos = calloc(n_tasks ? n_tasks : 1, sizeof(*task_pos));
    failed = calloc(n_tasks ? n_tasks : 1, sizeof(*failed));
    if (reqs == NULL || task_pos == NULL || failed == NULL) {
        for (size_t i = 0; i < n; i++)
            if (ents[i] != NULL)
                results[i] = crb_error(CR_ERR_NO_MEMORY, "batch_put_ranges transfers");
        goto out_release;
    }
    /* One engine batch: every fragment of every key into every replica. */
    size_t nt = 0;
    for (size_t i = 0; i < n; i++) {
        sess_entry *e = ents[i];
        for (size_t r = 0; e != NULL && r < e->n_reps && results[i] == 0; r++) {
            cr_segment_handle h;
            int hrc = crc_segment_handle(s, e->reps[r].segment, &h);
            if (hrc < 0) {
                results[i] = hrc;
                break;
            }
            for (size_t k = 0; k < counts[i]; k++) {
                if (sizes[i][k] == 0)
                    continue;
                reqs[nt] = (cr_transfer_request){CR_OP_WRITE, bufs[i][k], h,
                                                 e->reps[r].addr + offsets[i][k], sizes[i][k]};
                task_pos[nt++] = i;
            }
        }
    }
    crc_run_batch(s, reqs, nt, failed);
    for (size_t k = 0; k < nt; k++)
        if (failed[k] && results[task_pos[k]] == 0)
            results[task_pos[k]] = crb_error(CR_TRANSFER_FAIL,
                                             "batch_put_ranges '%s': a write "
                                             "failed",
                                             keys[task_pos[k]]);

out_release:
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < n; i++) {
        if (ents[i] == NULL)
            continue;
        if (results[i] == 0)
            results[i] = (int64_t)totals[i];
        ents[i]->inflight--;
        unref(ents[i]);
    }
    pthread_cond_broadcast(&t->drained);
    pthread_mutex_unlock(&t->mu);
    rc = 0;
out_free:
    free(failed);
    free(task_pos);
    free(reqs);
    free(totals);
    free(ents);
    return rc;
}

/*
 * End or revoke put sessions: seal them, wait until their ranged writes
 * drained, then one BATCH_PUT_END / BATCH_PUT_REVOKE per round. A key the
 * master answered with 0 (or, for revoke, OBJECT_NOT_FOUND: nothing left
 * to release) loses its session; any other answer keeps it (sealed).
 */
static int put_finish(cr_store_sessions *t, int op, const char *what, const char *const *keys,
                      size_t n, int *results)
{
    int rc = check_call(t, what, keys, n, results);
    if (rc < 0 || n == 0)
        return rc;
    if (cr_store_is_thin(t->s))
        return crc_thin_sessions_keys(t->s,
                                      op == CRP_RPC_BATCH_PUT_END ? CRP_THIN_PUT_SESSION_END
                                                                  : CRP_THIN_PUT_SESSION_REVOKE,
                                      t->thin_table, keys, n, NULL, NULL, results);
    size_t *idx = calloc(n, sizeof(*idx));
    sess_entry **ents = calloc(n, sizeof(*ents));
    char **ks = calloc(CRC_BATCH_KEYS, sizeof(*ks));
    int *st = calloc(CRC_BATCH_KEYS, sizeof(*st));
    if (idx == NULL || ents == NULL || ks == NULL || st == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "%s of %zu keys", what, n);
        goto out_free;
    }
    size_t m = 0;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < n; i++) {
        results[i] = crc_check_key(keys[i]);
        if (results[i] < 0)
            continue;
        sess_entry *e = crc_keymap_get(&t->puts, keys[i]);
        if (e == NULL || e->pending) {
            results[i] = crb_error(CR_INVALID_PARAMS, "%s: no put session for '%s'", what, keys[i]);
            continue;
        }
        e->writable = false; /* the seal: no ranged write starts from now on */
        e->refs++;
        ents[m] = e;
        idx[m++] = i;
    }
    for (size_t j = 0; j < m; j++)
        while (ents[j]->inflight > 0)
            pthread_cond_wait(&t->drained, &t->mu);
    pthread_mutex_unlock(&t->mu);
    for (size_t from = 0; from < m;) {
        size_t end = round_end(keys, idx, from, m);
        for (size_t j = from; j < end; j++)
            ks[j - from] = (char *)keys[idx[j]];
        int crc = owner_keys_call(t->s, op, ks, end - from, st);
        pthread_mutex_lock(&t->mu);
        for (size_t j = from; j < end; j++) {
            size_t i = idx[j];
            int r = crc < 0 ? crc : st[j - from];
            if (r == CR_OBJECT_NOT_FOUND && op == CRP_RPC_BATCH_PUT_REVOKE)
                r = 0;
            if (r == 0)
                unmap_if(&t->puts, keys[i], ents[j]);
            else if (crc == 0)
                crb_error(r, "%s '%s': %s", what, keys[i], cr_strerror(r));
            results[i] = r;
        }
        pthread_mutex_unlock(&t->mu);
        from = end;
    }
    pthread_mutex_lock(&t->mu);
    for (size_t j = 0; j < m; j++)
        unref(ents[j]);
    pthread_mutex_unlock(&t->mu);
out_free:
    free(st);
    free(ks);
    free(ents);
    free(idx);
    return rc;
}

int cr_store_put_session_end(cr_store_sessions *t, const char *const *keys, size_t n, int *results)
{
    return put_finish(t, CRP_RPC_BATCH_PUT_END, "put_session_end", keys, n, results);
}

int cr_store_put_session_revoke(cr_store_sessions *t, const char *const *keys, size_t n,
                                int *results)
{
    return put_finish(t, CRP_RPC_BATCH_PUT_REVOKE, "put_session_revoke", keys, n, results);
}
