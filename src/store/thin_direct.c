/*
 * thin_direct.c - a thin client's gets read straight from the daemon's
 * segment, with no hop through the daemon.
 *
 * Why: a get run by the daemon sleeps three times (the daemon waits for the
 * request, then for the master, the client for the reply) where an embedded
 * get sleeps once, and on a loaded host each sleep costs tens of µs
 * (docs/PERFORMANCE.md). Here the thin client does what an embedded get
 * does, with the daemon's memory:
 *
 *   1. Once per session, SEGMENT asks the daemon for its segment (name,
 *      base address, size), the master address and a
 *      read-only descriptor of the segment's memfd (src/client/direct.c),
 *      mapped here PROT_READ, and we open a master connection of our own
 *      (same tenant as the daemon; CRESCENT_MASTER_SECRET as any client).
 *   2. A get asks the master for the replica list on that connection (one
 *      sleep, as embedded): a read lease, measured from before the request.
 *   3. A replica in the daemon's segment (its name, inside it, complete,
 *      not a disk tier's staged copy: epoch 0) is copied out of our mapping into the caller's
 * buffer (or a malloc'd value); other keys go through the daemon as before.
 *   4. If the lease ran out before the copy ended, the key fails with
 *      CR_LEASE_EXPIRED (the master may have reused the memory), as an
 *      embedded get; then the reads are given back (RELEASE_LEASES).
 *   5. Last, the daemon must still be alive (an idle session connection
 *      shows no EOF): only then did the master's replica of that segment
 *      name lie in the memory we map. A daemon that died and was replaced
 *      by one with the same segment name cannot have had objects placed in
 *      its new segment before our old session's sockets closed (its engine
 *      port frees with them, and the master fences a remounted name for a
 *      lease). If it died, the results are dropped and the keys go through
 *      the daemon path, which fails fast (CR_ERR_DAEMON_LOST/_UNREACHABLE).
 *
 * So nothing is read that the master did not lease to us, a removed or
 * overwritten object is never read (the master no longer lists it, or the
 * lease keeps the old bytes until it is released), and the daemon still
 * owns the segment, its mount and its heartbeats. The same mapping is
 * writable when the daemon hands a writable descriptor too (direct puts,
 * thin_direct_put.c; off with CRESCENT_THIN_DIRECT_PUT=0).
 *
 * A single get of a key read before (64 KiB and more, CRESCENT_GET_SPECULATE as
 * for an embedded client: get.c) copies the cached range out of the mapping while
 * the master answers, and keeps it when the reply names the same object version
 * and replica (docs/WIRE.md, "Object versions"); otherwise it copies again.
 *
 * Every batch size reads directly, zero-copy batches of 8 MiB and more too
 * (they went through the daemon until measured on a quiet host: 0.83-0.88x
 * the embedded client that way, 0.98-1.08x direct; docs/PERFORMANCE.md).
 * Off with CRESCENT_THIN_DIRECT=0; refused by a daemon serving another uid
 * (the segment holds every tenant's bytes) or without a shareable segment.
 * Threading: any thread; direct_mu serialises the setup, direct_lock is
 * held for reading across a get (the mapping and the master connection) and
 * for writing while they are replaced.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "store/internal.h"
#include "store/thin.h"

void crc_thin_direct_init(crc_thin *t)
{
    pthread_mutex_init(&t->direct_mu, NULL);
    /* Writers first: a new session's setup must not wait behind a stream of gets. */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&t->direct_lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    const char *e = getenv("CRESCENT_THIN_DIRECT");
    t->direct_off = e != NULL && (strcmp(e, "0") == 0 || strcmp(e, "false") == 0 ||
                                  strcmp(e, "off") == 0 || strcmp(e, "no") == 0);
    e = getenv("CRESCENT_THIN_DIRECT_PUT");
    t->direct_put_off =
        t->direct_off || (e != NULL && (strcmp(e, "0") == 0 || strcmp(e, "false") == 0 ||
                                        strcmp(e, "off") == 0 || strcmp(e, "no") == 0));
    t->rpc_timeout_ms = 5000;
    /* Direct puts' bound D (thin_direct_put.c): the master may reuse a dead
     * writer's space at start + D; no copy chunk starts after D / 3. */
    e = getenv("CRESCENT_THIN_DIRECT_PUT_MS");
    long ms = e != NULL ? strtol(e, NULL, 10) : 0;
    t->put_owned_ms = ms >= 30 && ms <= 600000 ? (uint32_t)ms : 30000;
    t->put_bound_ms = t->put_owned_ms / 3;
    /* CRESCENT_GET_SPECULATE as for an embedded client (client.c); a value it does not
     * know leaves it off here (the thin setup has no failure for it) */
    uint64_t min = 0;
    if (crc_speculate_min(getenv("CRESCENT_GET_SPECULATE"), &min) < 0)
        crb_log(CRB_LOG_WARN, "thin client: %s: off", cr_last_error_message());
    t->spec_min = min;
    if (min > 0 && crc_loc_create(&t->loc) < 0)
        t->loc = NULL; /* (an optimisation: off) */
}

void crc_thin_direct_fini(crc_thin *t)
{
    crc_loc_destroy(t->loc);
    t->loc = NULL;
    if (t->seg_map != NULL)
        munmap(t->seg_map, t->seg_size);
    t->seg_map = NULL;
    crc_master_close(t->master);
    t->master = NULL;
    pthread_rwlock_destroy(&t->direct_lock);
    pthread_mutex_destroy(&t->direct_mu);
}

/* Direct reads are not possible in generation gen (t->direct_mu held). */
static void direct_refused(crc_thin *t, uint64_t gen, const char *why)
{
    pthread_rwlock_wrlock(&t->direct_lock);
    t->direct_gen = gen;
    t->direct_on = false;
    t->direct_put_on = false;
    pthread_rwlock_unlock(&t->direct_lock);
    crb_log(CRB_LOG_INFO, "thin client of %s: gets go through the daemon: %s", t->address, why);
}

/*
 * Set up direct reads for c's session generation: SEGMENT on c, map the
 * segment, connect to the master. A failure of c itself is returned (the
 * caller gives c back broken if crc_thin_breaks_conn); anything else only
 * turns direct reads off for this generation.
 */
static int direct_setup(crc_thin *t, crc_thin_conn *c)
{
    pthread_mutex_lock(&t->direct_mu);
    pthread_rwlock_rdlock(&t->direct_lock);
    bool ready = t->direct_gen == c->gen;
    pthread_rwlock_unlock(&t->direct_lock);
    if (ready) {
        pthread_mutex_unlock(&t->direct_mu);
        return 0;
    }
    crp_thin_req req = {.op = CRP_THIN_SEGMENT};
    crp_thin_resp resp;
    bool sent = false;
    int rc = crc_thin_conn_call(t, c, &req, NULL, 0, &resp, &sent);
    if (rc < 0) {
        pthread_mutex_unlock(&t->direct_mu);
        return rc;
    }
    int fd = c->rx_fd, wfd = c->rx_fd2;
    c->rx_fd = c->rx_fd2 = -1;
    char why[400] = "";
    bool writable = false;
    uint8_t *map = NULL;
    crc_master *m = NULL;
    if (resp.status < 0) {
        snprintf(why, sizeof(why), "%s", resp.message ? resp.message : cr_strerror(resp.status));
        goto out_refused;
    }
    if (!(resp.fields & CRP_THIN_R_VALS) || resp.n_vals < 2 || !(resp.fields & CRP_THIN_R_NAMES) ||
        resp.n_names < 2 || fd < 0 || resp.vals[1] == 0 ||
        resp.vals[0] + resp.vals[1] < resp.vals[0] ||
        strlen(resp.names[0]) > CR_STORE_MAX_SEGMENT ||
        strlen(resp.names[1]) >= sizeof(t->master_addr)) {
        snprintf(why, sizeof(why), "the daemon's SEGMENT reply is incomplete");
        goto out_refused;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < resp.vals[1]) {
        snprintf(why, sizeof(why), "the segment's descriptor is smaller than the segment");
        goto out_refused;
    }
    /* Direct puts (thin_direct_put.c): one writable mapping serves both. */
    if (!t->direct_put_off && wfd >= 0 && resp.n_vals >= 3 && resp.vals[2] == 1 &&
        fstat(wfd, &st) == 0 && (uint64_t)st.st_size >= resp.vals[1]) {
        map = mmap(NULL, resp.vals[1], PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, wfd, 0);
        writable = map != MAP_FAILED;
    }
    if (!writable)
        map = mmap(NULL, resp.vals[1], PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (map == MAP_FAILED) {
        map = NULL;
        snprintf(why, sizeof(why), "mapping the segment failed");
        goto out_refused;
    }
    /* Our own master connection (kept across sessions while the address stays). */
    crp_rpc_uuid id = {0, 0};
    bool new_master = t->master == NULL || strcmp(t->master_addr, resp.names[1]) != 0;
    if (new_master) {
        char tenant[sizeof(t->daemon_tenant)];
        pthread_mutex_lock(&t->lock); /* a reconnect writes it */
        snprintf(tenant, sizeof(tenant), "%s", t->daemon_tenant);
        pthread_mutex_unlock(&t->lock);
        crb_random_bytes(&id, sizeof(id));
        rc = crc_master_connect(resp.names[1], id, (int)t->rpc_timeout_ms, &m);
        if (rc == 0 && strcmp(tenant, "default") != 0)
            rc = crc_master_set_tenant(m, tenant);
        if (rc < 0) {
            snprintf(why, sizeof(why), "master %s: %s", resp.names[1], cr_last_error_message());
            goto out_refused;
        }
    }
    pthread_rwlock_wrlock(&t->direct_lock);
    if (t->seg_map != NULL)
        munmap(t->seg_map, t->seg_size);
    crc_master *old = NULL;
    if (new_master) {
        old = t->master;
        t->master = m;
        t->master_id = id;
        snprintf(t->master_addr, sizeof(t->master_addr), "%s", resp.names[1]);
    }
    t->seg_map = map;
    t->seg_base = resp.vals[0];
    t->seg_size = resp.vals[1];
    snprintf(t->seg_name, sizeof(t->seg_name), "%s", resp.names[0]);
    t->direct_gen = c->gen;
    t->direct_on = true;
    t->direct_put_on = writable && (crc_master_caps(t->master) & CRP_RPC_CAP_OWNED_WRITES) != 0;
    bool put_on = t->direct_put_on;
    pthread_rwlock_unlock(&t->direct_lock);
    crc_master_close(old);
    close(fd);
    if (wfd >= 0)
        close(wfd);
    if (!put_on && !t->direct_put_off)
        crb_log(CRB_LOG_INFO, "thin client of %s: puts go through the daemon: %s", t->address,
                !writable ? "no writable descriptor of its segment"
                          : "the master does not revoke a closed connection's writes");
    crp_thin_resp_clear(&resp);
    pthread_mutex_unlock(&t->direct_mu);
    crb_log(CRB_LOG_DEBUG, "thin client of %s: gets read segment %s directly", t->address,
            t->seg_name);
    return 0;

out_refused:
    if (map != NULL)
        munmap(map, resp.vals[1]);
    crc_master_close(m);
    if (fd >= 0)
        close(fd);
    if (wfd >= 0)
        close(wfd);
    crp_thin_resp_clear(&resp);
    direct_refused(t, c->gen, why);
    pthread_mutex_unlock(&t->direct_mu);
    return 0;
}

int crc_thin_direct_enter(crc_thin *t, crc_thin_conn **out)
{
    crc_thin_conn *c;
    int rc = crc_thin_conn_take(t, &c);
    if (rc < 0)
        return rc;
    pthread_rwlock_rdlock(&t->direct_lock);
    if (t->direct_gen != c->gen) {
        pthread_rwlock_unlock(&t->direct_lock);
        rc = direct_setup(t, c);
        if (rc < 0) {
            crc_thin_conn_give(t, c, crc_thin_breaks_conn(rc));
            return rc;
        }
        pthread_rwlock_rdlock(&t->direct_lock);
    }
    *out = c;
    return 0;
}

void crc_thin_direct_leave(crc_thin *t, crc_thin_conn *c, bool lost)
{
    pthread_rwlock_unlock(&t->direct_lock);
    crc_thin_conn_give(t, c, lost);
}

/* The replica of reps in the daemon's segment, readable through seg_map, or NULL. */
static const crp_rpc_replica *local_replica(const crc_thin *t, const crp_rpc_replica *reps,
                                            size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const crp_rpc_replica *r = &reps[i];
        if (r->status == CRP_RPC_REPLICA_COMPLETE && r->epoch != 0 && r->addr >= t->seg_base &&
            r->size <= t->seg_size && r->addr - t->seg_base <= t->seg_size - r->size &&
            strcmp(r->segment, t->seg_name) == 0)
            return r;
    }
    return NULL;
}

bool crc_thin_daemon_alive(crc_thin_conn *c)
{
    struct pollfd p = {c->fd, POLLIN, 0};
    return poll(&p, 1, 0) == 0 && c->in_len == 0;
}

/* Can the daemon path take these parts too? (Same refusals as it.) */
static bool parts_ok(crc_thin *t, void *const *bufs, const size_t *sizes, size_t n)
{
    if (n > 0 && (bufs == NULL || sizes == NULL))
        return false;
    for (size_t k = 0; k < n; k++) {
        if (sizes[k] == 0)
            continue;
        crp_thin_ext e;
        crc_reach how;
        if (bufs[k] == NULL || crc_thin_translate(t, bufs[k], sizes[k], &e, &how) < 0)
            return false;
    }
    return true;
}

typedef struct direct_key {
    int32_t status;
    const crp_rpc_replica *reps;
    size_t n_reps;
    uint64_t token;
} direct_key;

/* Copy key j's value out of the segment: its result, or false (daemon path). */
static bool read_one(crc_thin *t, const char *key, const direct_key *k, void *const *bufs,
                     const size_t *sizes, size_t n_parts, void **value_out, int64_t *result)
{
    if (k->status == CR_OBJECT_NOT_FOUND) {
        *result = crb_error(CR_OBJECT_NOT_FOUND, "get '%s': %s", key, cr_strerror(k->status));
        return true;
    }
    if (k->status < 0 || k->n_reps == 0)
        return false;
    const crp_rpc_replica *r = local_replica(t, k->reps, k->n_reps);
    if (r == NULL)
        return false;
    const uint8_t *src = t->seg_map + (r->addr - t->seg_base);
    uint64_t size = r->size;
    if (bufs == NULL) { /* copying */
        void *v = malloc(size ? size : 1);
        if (v == NULL)
            return false;
        memcpy(v, src, size);
        *value_out = v;
        *result = (int64_t)size;
        atomic_fetch_add(&t->copied_bytes, size);
        return true;
    }
    uint64_t cap = 0;
    for (size_t p = 0; p < n_parts; p++)
        cap += sizes[p];
    if (size > cap) {
        *result =
            crb_error(CR_BUFFER_OVERFLOW, "get '%s': the value has %llu bytes, the buffer %llu",
                      key, (unsigned long long)size, (unsigned long long)cap);
        return true;
    }
    uint64_t off = 0;
    for (size_t p = 0; p < n_parts && off < size; p++) {
        uint64_t len = sizes[p] < size - off ? sizes[p] : size - off;
        memcpy(bufs[p], src + off, len);
        off += len;
    }
    *result = (int64_t)size;
    atomic_fetch_add(&t->zero_copy_bytes, size);
    return true;
}

/* Give the reads back: keys[j] with tokens[j] (0 = none), one notice. */
static void release_reads(crc_thin *t, const char *const *keys, const direct_key *dk, size_t n)
{
    if (!(crc_master_caps(t->master) & CRP_RPC_CAP_LEASE_RELEASE))
        return;
    char *ks[CRC_BATCH_KEYS];
    uint64_t tokens[CRC_BATCH_KEYS];
    size_t m = 0;
    for (size_t j = 0; j < n; j++) {
        if (dk[j].status != 0 || dk[j].token == 0)
            continue;
        ks[m] = (char *)keys[j];
        tokens[m++] = dk[j].token;
    }
    if (m == 0)
        return;
    crp_rpc_req req = {.op = CRP_RPC_RELEASE_LEASES};
    req.u.leases = (crp_rpc_leases_req){m, ks, tokens};
    if (crc_master_send(t->master, &req, (int)t->rpc_timeout_ms) < 0)
        crb_log(CRB_LOG_DEBUG, "thin client: %s (the reads stay leased until their TTL)",
                cr_last_error_message());
}

/* A speculative direct single get: the cached location's bytes copied out of the mapping
 * while the master answers (the sent hook of crc_master_call_sent). */
typedef struct thin_spec {
    crc_thin *t;
    crc_loc at;
    void *const *bufs; /* NULL: copying (value malloc'd) */
    const size_t *sizes;
    size_t n_parts;
    void *value;
    bool copied;
} thin_spec;

static void thin_spec_copy(void *arg)
{
    thin_spec *ts = arg;
    crc_thin *t = ts->t;
    const crc_loc *l = &ts->at;
    if (strcmp(l->segment, t->seg_name) != 0 || l->addr < t->seg_base || l->size > t->seg_size ||
        l->addr - t->seg_base > t->seg_size - l->size)
        return; /* another session's segment */
    const uint8_t *src = t->seg_map + (l->addr - t->seg_base);
    if (ts->bufs == NULL) {
        if ((ts->value = malloc(l->size)) == NULL)
            return;
        memcpy(ts->value, src, l->size);
    } else {
        uint64_t cap = 0;
        for (size_t p = 0; p < ts->n_parts; p++)
            cap += ts->sizes[p];
        if (l->size > cap)
            return;
        uint64_t off = 0;
        for (size_t p = 0; p < ts->n_parts && off < l->size; p++) {
            uint64_t len = ts->sizes[p] < l->size - off ? ts->sizes[p] : l->size - off;
            memcpy(ts->bufs[p], src + off, len);
            off += len;
        }
    }
    ts->copied = true;
    atomic_fetch_add(&t->spec_reads, 1);
}

/* The master call and the copies, direct_lock held for reading. */
static void direct_round(crc_thin *t, crc_thin_conn *c, const char *const *keys, size_t n,
                         void *const *const *bufs, const size_t *const *sizes, const size_t *counts,
                         void **values_out, int64_t *results, bool *done, bool *lost)
{
    direct_key one, *dk = &one;
    crp_rpc_resp resp;
    uint64_t t0 = crb_now_ms(), ttl;
    int rc;
    thin_spec ts = {.t = t};
    bool kept = false;
    if (n == 1) {
        crp_rpc_req req = {.op = CRP_RPC_GET_REPLICA_LIST};
        req.u.key.key = (char *)keys[0];
        bool cached =
            t->loc != NULL && crc_loc_lookup(t->loc, keys[0], &ts.at) && ts.at.size >= t->spec_min;
        ts.bufs = bufs ? bufs[0] : NULL;
        ts.sizes = bufs ? sizes[0] : NULL;
        ts.n_parts = bufs ? counts[0] : 0;
        rc = crc_master_call_sent(t->master, &req, &resp, (int)t->rpc_timeout_ms,
                                  cached ? thin_spec_copy : NULL, &ts);
        if (rc < 0) {
            free(ts.value);
            return;
        }
        one = (direct_key){resp.status, resp.u.get.replicas, resp.u.get.n_replicas,
                           resp.u.get.lease_token};
        ttl = resp.u.get.lease_ttl_ms;
        if (resp.status < 0)
            one.n_reps = 0;
        kept = ts.copied && resp.status == 0 &&
               crc_loc_confirms(&ts.at, resp.u.get.version, resp.u.get.replicas,
                                resp.u.get.n_replicas);
        if (!kept) {
            free(ts.value);
            ts.value = NULL;
            if (ts.copied)
                crc_loc_forget(t->loc, keys[0]);
        }
    } else {
        crp_rpc_req req = {.op = CRP_RPC_BATCH_GET_REPLICA_LIST};
        req.u.keys = (crp_rpc_keys_req){n, (char **)keys};
        rc = crc_master_call(t->master, &req, &resp, (int)t->rpc_timeout_ms);
        if (rc < 0)
            return;
        if (resp.status < 0 || resp.u.batch_get.n != n || (dk = calloc(n, sizeof(*dk))) == NULL) {
            crp_rpc_resp_clear(&resp);
            return;
        }
        for (size_t j = 0; j < n; j++) {
            const crp_rpc_key_result *kr = &resp.u.batch_get.results[j];
            dk[j] = (direct_key){kr->status, kr->replicas, kr->status < 0 ? 0 : kr->n_replicas,
                                 kr->lease_token};
        }
        ttl = resp.u.batch_get.lease_ttl_ms;
    }
    if (kept) { /* the bytes copied while asking are this version's */
        done[0] = true;
        results[0] = (int64_t)ts.at.size;
        if (values_out != NULL)
            values_out[0] = ts.value;
        atomic_fetch_add(bufs ? &t->zero_copy_bytes : &t->copied_bytes, ts.at.size);
        atomic_fetch_add(&t->spec_hits, 1);
    }
    for (size_t j = kept ? 1 : 0; j < n; j++) {
        done[j] = read_one(t, keys[j], &dk[j], bufs ? bufs[j] : NULL, bufs ? sizes[j] : NULL,
                           bufs ? counts[j] : 0, values_out ? &values_out[j] : NULL, &results[j]);
        const crp_rpc_replica *r = NULL;
        if (n == 1 && t->loc != NULL && done[j] && results[j] >= (int64_t)t->spec_min &&
            (r = local_replica(t, dk[j].reps, dk[j].n_reps)) != NULL)
            crc_loc_store(t->loc, keys[j], resp.u.get.version, r);
    }
    bool expired = crb_now_ms() >= t0 + ttl;
    release_reads(t, keys, dk, n);
    *lost = !crc_thin_daemon_alive(c);
    for (size_t j = 0; j < n; j++) {
        if (!done[j] || results[j] < 0)
            continue;
        if (*lost) { /* not known to be the daemon's memory: the daemon path decides */
            if (values_out != NULL) {
                free(values_out[j]);
                values_out[j] = NULL;
            }
            done[j] = false;
        } else if (expired) {
            if (values_out != NULL) {
                free(values_out[j]);
                values_out[j] = NULL;
            }
            results[j] = crb_error(CR_LEASE_EXPIRED,
                                   "get '%s': the read lease ran out during the transfer; the "
                                   "bytes may be stale and were not returned",
                                   keys[j]);
        }
    }
    if (dk != &one)
        free(dk);
    crp_rpc_resp_clear(&resp);
}

void crc_thin_direct_get(crc_thin *t, const char *const *keys, size_t n, void *const *const *bufs,
                         const size_t *const *sizes, const size_t *counts, void **values_out,
                         int64_t *results, bool *done)
{
    for (size_t j = 0; j < n; j++)
        done[j] = false;
    if (t->direct_off || n == 0 || n > CRC_BATCH_KEYS)
        return;
    size_t key_bytes = 0;
    for (size_t j = 0; j < n; j++) {
        key_bytes += strlen(keys[j]);
        if (bufs != NULL && !parts_ok(t, bufs[j], sizes[j], counts[j]))
            return;
    }
    if (key_bytes > CRC_BATCH_KEY_BYTES)
        return;
    crc_thin_conn *c;
    if (crc_thin_direct_enter(t, &c) < 0)
        return; /* the daemon path says why */
    bool lost = false;
    if (t->direct_on && t->direct_gen == c->gen)
        direct_round(t, c, keys, n, bufs, sizes, counts, values_out, results, done, &lost);
    crc_thin_direct_leave(t, c, lost);
    size_t got = 0;
    for (size_t j = 0; j < n; j++)
        got += done[j];
    atomic_fetch_add(&t->direct_keys, got);
    atomic_fetch_add(&t->direct_fallbacks, n - got);
}
