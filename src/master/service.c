/*
 * service.c - the master core's lifecycle, configuration, clients (ping,
 * expiry), housekeeping tick and metrics.
 *
 * Clients live in a small chained hash table under clients_lock. A client is
 * created by mount/remount and kept alive by pings; tick() expires the ones
 * silent for client_ttl_ms: under clients_lock it removes them and, under
 * seg_lock, marks their segments unmounting (so a racing remount sees
 * "unmounting" instead of a segment about to vanish); then, holding no
 * global lock, it finishes each unmount (segments.c), which scans the shards
 * one at a time.
 *
 * The lock order for the whole core is documented in internal.h.
 */
#include "master/service.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "master/internal.h"
#include "master/mem.h"

static const char *const op_names[CRK_OP_COUNT] = {
    [CRK_OP_MOUNT] = "mount_segment",
    [CRK_OP_REMOUNT] = "remount_segment",
    [CRK_OP_UNMOUNT] = "unmount_segment",
    [CRK_OP_PING] = "ping",
    [CRK_OP_EXIST] = "exist_key",
    [CRK_OP_GET_REPLICA_LIST] = "get_replica_list",
    [CRK_OP_PUT_START] = "put_start",
    [CRK_OP_UPSERT_START] = "upsert_start",
    [CRK_OP_PUT_END] = "put_end",
    [CRK_OP_PUT_REVOKE] = "put_revoke",
    [CRK_OP_REMOVE] = "remove",
    [CRK_OP_REMOVE_BY_REGEX] = "remove_by_regex",
    [CRK_OP_REMOVE_ALL] = "remove_all",
    [CRK_OP_BATCH_EXIST] = "batch_exist_key",
    [CRK_OP_BATCH_GET_REPLICA_LIST] = "batch_get_replica_list",
    [CRK_OP_BATCH_PUT_START] = "batch_put_start",
    [CRK_OP_BATCH_UPSERT_START] = "batch_upsert_start",
    [CRK_OP_BATCH_PUT_END] = "batch_put_end",
    [CRK_OP_BATCH_PUT_REVOKE] = "batch_put_revoke",
    [CRK_OP_BATCH_REMOVE] = "batch_remove",
    [CRK_OP_BATCH_REPLICA_CLEAR] = "batch_replica_clear",
};

const char *crk_op_name(int op)
{
    if (op < 0 || op >= CRK_OP_COUNT)
        return "unknown";
    return op_names[op];
}

uint64_t crk_hash_bytes(const void *p, size_t n)
{
    /* 8 bytes at a time, multiply-xorshift mixing; then a splitmix finaliser. */
    const unsigned char *b = p;
    uint64_t h = 0x243F6A8885A308D3ull ^ ((uint64_t)n * 0x9E3779B97F4A7C15ull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, b, 8);
        h = (h ^ (v * 0xBF58476D1CE4E5B9ull)) * 0x94D049BB133111EBull;
        h ^= h >> 29;
        b += 8;
        n -= 8;
    }
    uint64_t tail = 0;
    for (size_t i = 0; i < n; i++)
        tail |= (uint64_t)b[i] << (8 * i);
    h = (h ^ (tail * 0xBF58476D1CE4E5B9ull)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    h *= 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    return h;
}

uint64_t crk_random(crk_service *s, uint64_t seed)
{
    static _Thread_local uint64_t state;
    if (state == 0) /* first use on this thread: a distinct stream per thread */
        state = atomic_fetch_add_explicit(&s->rng, 0x9E3779B97F4A7C15ull, CRK_RELAXED) | 1;
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void crk_config_default(crk_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->default_kv_lease_ttl_ms = 10000;
    cfg->default_kv_soft_pin_ttl_ms = 1800000;
    cfg->max_kv_soft_pin_ttl_ms = 86400000;
    cfg->allow_evict_soft_pinned_objects = true;
    cfg->eviction_ratio = 0.05;
    cfg->eviction_high_watermark_ratio = 0.90;
    cfg->client_ttl_ms = 10000;
    cfg->put_start_discard_timeout_ms = 30000;
    cfg->put_start_release_timeout_ms = 600000;
    cfg->alloc_alignment = 64;
    cfg->restart_fence_ms = 0;
    cfg->max_evict_retries = 2;
    cfg->epoch_base = 0;
}

static int validate_config(const crk_config *c)
{
    if (!(c->eviction_ratio >= 0.0 && c->eviction_ratio <= 1.0))
        return crb_error(CR_INVALID_PARAMS, "eviction_ratio %g is outside [0, 1]",
                         c->eviction_ratio);
    if (!(c->eviction_high_watermark_ratio >= 0.0 && c->eviction_high_watermark_ratio <= 1.0))
        return crb_error(CR_INVALID_PARAMS, "eviction_high_watermark_ratio %g is outside [0, 1]",
                         c->eviction_high_watermark_ratio);
    if (c->default_kv_lease_ttl_ms == 0)
        return crb_error(CR_INVALID_PARAMS, "default_kv_lease_ttl must be > 0");
    if (c->default_kv_soft_pin_ttl_ms > c->max_kv_soft_pin_ttl_ms)
        return crb_error(CR_INVALID_PARAMS,
                         "default_kv_soft_pin_ttl %llu ms exceeds max_kv_soft_pin_ttl %llu ms",
                         (unsigned long long)c->default_kv_soft_pin_ttl_ms,
                         (unsigned long long)c->max_kv_soft_pin_ttl_ms);
    if (c->put_start_release_timeout_ms < c->put_start_discard_timeout_ms)
        return crb_error(CR_INVALID_PARAMS,
                         "put_start_release_timeout %llu ms is shorter than "
                         "put_start_discard_timeout %llu ms",
                         (unsigned long long)c->put_start_release_timeout_ms,
                         (unsigned long long)c->put_start_discard_timeout_ms);
    uint64_t a = c->alloc_alignment;
    if (a == 0 || (a & (a - 1)) != 0 || a > (1ull << 30))
        return crb_error(CR_INVALID_PARAMS,
                         "alloc_alignment %llu is not a power of two up to 1 GiB",
                         (unsigned long long)a);
    if (c->client_ttl_ms == 0)
        return crb_error(CR_INVALID_PARAMS, "client_ttl must be > 0");
    return 0;
}

int crk_service_create(const crk_config *cfg, uint64_t now_ms, crk_service **out)
{
    crk_config c;
    if (cfg)
        c = *cfg;
    else
        crk_config_default(&c);
    int rc = validate_config(&c);
    if (rc != 0)
        return rc;
    if (c.restart_fence_ms == 0)
        c.restart_fence_ms = crk_sat_add(c.default_kv_lease_ttl_ms, 1000);

    crk_service *s = crk_calloc(1, sizeof(*s));
    if (!s)
        return crb_error(CR_ERR_NO_MEMORY, "master service: header");
    s->cfg = c;
    s->start_ms = now_ms;
    atomic_init(&s->epoch_counter, 0);
    atomic_init(&s->rng, now_ms * 0x9E3779B97F4A7C15ull + 1);
    if (pthread_rwlock_init(&s->seg_lock, NULL) != 0) {
        rc = crb_error(CR_ERR_NO_MEMORY, "master service: seg_lock");
        goto undo_header;
    }
    if (pthread_mutex_init(&s->clients_lock, NULL) != 0) {
        rc = crb_error(CR_ERR_NO_MEMORY, "master service: clients_lock");
        goto undo_seg_lock;
    }
    if (pthread_mutex_init(&s->evict_lock, NULL) != 0) {
        rc = crb_error(CR_ERR_NO_MEMORY, "master service: evict_lock");
        goto undo_clients_lock;
    }
    s->seg_nbuckets = 64;
    s->seg_buckets = crk_calloc(s->seg_nbuckets, sizeof(*s->seg_buckets));
    s->cl_nbuckets = 64;
    s->cl_buckets = crk_calloc(s->cl_nbuckets, sizeof(*s->cl_buckets));
    if (!s->seg_buckets || !s->cl_buckets) {
        rc = crb_error(CR_ERR_NO_MEMORY, "master service: tables");
        goto undo_tables;
    }
    rc = crk_shards_init(s);
    if (rc != 0)
        goto undo_tables;
    *out = s;
    return 0;

undo_tables:
    crk_free(s->cl_buckets);
    crk_free(s->seg_buckets);
    pthread_mutex_destroy(&s->evict_lock);
undo_clients_lock:
    pthread_mutex_destroy(&s->clients_lock);
undo_seg_lock:
    pthread_rwlock_destroy(&s->seg_lock);
undo_header:
    crk_free(s);
    return rc;
}

void crk_service_destroy(crk_service *s)
{
    if (!s)
        return;
    /* Objects first: their replicas point at segments. */
    crk_shards_destroy(s);
    crk_segments_destroy(s);
    for (size_t b = 0; b < s->cl_nbuckets; b++) {
        crk_client *c = s->cl_buckets[b];
        while (c) {
            crk_client *next = c->next;
            crk_free(c);
            c = next;
        }
    }
    crk_free(s->cl_buckets);
    pthread_mutex_destroy(&s->evict_lock);
    pthread_mutex_destroy(&s->clients_lock);
    pthread_rwlock_destroy(&s->seg_lock);
    crk_free(s);
}

const crk_config *crk_service_config(const crk_service *s)
{
    return &s->cfg;
}

/* --- clients ------------------------------------------------------------------ */

static size_t client_bucket(const crk_service *s, crk_client_id id)
{
    uint64_t h = (id.hi * 0x9E3779B97F4A7C15ull) ^ (id.lo * 0xBF58476D1CE4E5B9ull);
    h ^= h >> 31;
    return (size_t)h & (s->cl_nbuckets - 1);
}

static crk_client *client_find_locked(crk_service *s, crk_client_id id)
{
    for (crk_client *c = s->cl_buckets[client_bucket(s, id)]; c; c = c->next)
        if (crk_id_eq(c->id, id))
            return c;
    return NULL;
}

static void client_grow_locked(crk_service *s)
{
    size_t nb = s->cl_nbuckets * 2;
    crk_client **b = crk_calloc(nb, sizeof(*b));
    if (!b)
        return; /* keep the longer chains */
    crk_client **old = s->cl_buckets;
    size_t old_n = s->cl_nbuckets;
    s->cl_buckets = b;
    s->cl_nbuckets = nb;
    for (size_t i = 0; i < old_n; i++) {
        crk_client *c = old[i];
        while (c) {
            crk_client *next = c->next;
            size_t j = client_bucket(s, c->id);
            c->next = b[j];
            b[j] = c;
            c = next;
        }
    }
    crk_free(old);
}

int crk_client_touch_locked(crk_service *s, crk_client_id id, uint64_t now)
{
    crk_client *c = client_find_locked(s, id);
    if (!c) {
        c = crk_calloc(1, sizeof(*c));
        if (!c)
            return crb_error(CR_ERR_NO_MEMORY, "master: new client record");
        c->id = id;
        size_t b = client_bucket(s, id);
        c->next = s->cl_buckets[b];
        s->cl_buckets[b] = c;
        s->nclients++;
        crb_log(CRB_LOG_INFO, "master: client %016llx%016llx joined", (unsigned long long)id.hi,
                (unsigned long long)id.lo);
        if (s->nclients > s->cl_nbuckets)
            client_grow_locked(s);
    }
    if (now > c->last_seen)
        c->last_seen = now;
    return 0;
}

int crk_ping(crk_service *s, crk_client_id client, uint64_t now_ms, int *status_out)
{
    crk_add(s->c.requests[CRK_OP_PING], 1);
    if (!crk_id_valid(client)) {
        crk_add(s->c.failures[CRK_OP_PING], 1);
        return crb_error(CR_ILLEGAL_CLIENT, "ping: the zero client id is not valid");
    }
    pthread_mutex_lock(&s->clients_lock);
    crk_client *c = client_find_locked(s, client);
    if (c && now_ms > c->last_seen)
        c->last_seen = now_ms;
    pthread_mutex_unlock(&s->clients_lock);
    if (status_out)
        *status_out = c ? CRK_CLIENT_OK : CRK_CLIENT_NEED_REMOUNT;
    return 0;
}

/*
 * Expire silent clients. Phase 1 (clients_lock, then seg_lock): unlink them
 * and mark their segments unmounting. Phase 2 (no global lock): finish the
 * unmounts.
 */
static int expire_clients(crk_service *s, uint64_t now)
{
    int rc = 0;
    crk_segment **dying = NULL;
    size_t ndying = 0;

    pthread_mutex_lock(&s->clients_lock);
    size_t nexp = 0;
    for (size_t b = 0; b < s->cl_nbuckets; b++)
        for (crk_client *c = s->cl_buckets[b]; c; c = c->next)
            if (crk_elapsed(now, c->last_seen) >= s->cfg.client_ttl_ms)
                nexp++;
    if (nexp == 0) {
        pthread_mutex_unlock(&s->clients_lock);
        return 0;
    }
    crk_client_id *ids = crk_malloc(nexp * sizeof(*ids));
    if (!ids) {
        pthread_mutex_unlock(&s->clients_lock);
        return crb_error(CR_ERR_NO_MEMORY, "client expiry: %zu ids", nexp);
    }
    size_t n = 0;
    for (size_t b = 0; b < s->cl_nbuckets; b++) {
        crk_client **pp = &s->cl_buckets[b];
        while (*pp) {
            crk_client *c = *pp;
            if (crk_elapsed(now, c->last_seen) >= s->cfg.client_ttl_ms) {
                *pp = c->next;
                ids[n++] = c->id;
                s->nclients--;
                crb_log(CRB_LOG_WARN, "master: client %016llx%016llx expired (silent %llu ms)",
                        (unsigned long long)c->id.hi, (unsigned long long)c->id.lo,
                        (unsigned long long)crk_elapsed(now, c->last_seen));
                crk_free(c);
            } else {
                pp = &c->next;
            }
        }
    }
    crk_add(s->c.clients_expired, n);

    pthread_rwlock_wrlock(&s->seg_lock);
    if (s->nsegs > 0) {
        dying = crk_malloc(s->nsegs * sizeof(*dying));
        if (!dying)
            rc = crb_error(CR_ERR_NO_MEMORY, "client expiry: segment list");
    }
    for (size_t i = 0; dying && i < s->nsegs; i++) {
        crk_segment *seg = s->segs[i];
        for (size_t k = 0; k < n; k++) {
            if (crk_id_eq(seg->owner, ids[k])) {
                if (crk_unmount_begin_locked(s, seg) == 0)
                    dying[ndying++] = seg;
                break;
            }
        }
    }
    pthread_rwlock_unlock(&s->seg_lock);
    pthread_mutex_unlock(&s->clients_lock);

    for (size_t i = 0; i < ndying; i++) {
        crb_log(CRB_LOG_INFO, "master: unmounting segment '%s' of an expired client",
                dying[i]->name);
        crk_unmount_finish(s, dying[i], now);
    }
    crk_free(dying);
    crk_free(ids);
    return rc;
}

int crk_tick(crk_service *s, uint64_t now_ms)
{
    int rc = expire_clients(s, now_ms);
    for (size_t i = 0; i < CRK_NUM_SHARDS; i++) {
        crk_shard *sh = &s->shards[i];
        pthread_mutex_lock(&sh->mu);
        crk_shard_housekeeping_locked(s, sh, now_ms);
        pthread_mutex_unlock(&sh->mu);
    }
    crk_prune_tombs(s, now_ms);

    uint64_t cap = crk_get(s->c.capacity), used = crk_allocated(s);
    double wm = s->cfg.eviction_high_watermark_ratio;
    if (cap > 0 && s->cfg.eviction_ratio > 0 && (double)used > wm * (double)cap) {
        double target = s->cfg.eviction_ratio * (double)used + ((double)used - wm * (double)cap);
        uint64_t keys = 0;
        uint64_t freed = crk_evict_round(s, (uint64_t)target + 1, now_ms, &keys);
        crb_log(CRB_LOG_INFO,
                "master: eviction round above watermark: used %llu of %llu, freed %llu bytes "
                "in %llu keys",
                (unsigned long long)used, (unsigned long long)cap, (unsigned long long)freed,
                (unsigned long long)keys);
    }
    return rc;
}

int crk_evict(crk_service *s, uint64_t target_bytes, uint64_t now_ms)
{
    uint64_t keys = 0;
    crk_evict_round(s, target_bytes, now_ms, &keys);
    return keys > (uint64_t)INT32_MAX ? INT32_MAX : (int)keys;
}

void crk_get_stats(crk_service *s, crk_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->capacity_bytes = crk_get(s->c.capacity);
    out->allocated_bytes = crk_allocated(s);
    pthread_rwlock_rdlock(&s->seg_lock);
    out->segments = s->nsegs;
    pthread_rwlock_unlock(&s->seg_lock);
    pthread_mutex_lock(&s->clients_lock);
    out->clients = s->nclients;
    pthread_mutex_unlock(&s->clients_lock);
    for (size_t i = 0; i < CRK_NUM_SHARDS; i++) {
        out->keys += crk_get(s->shards[i].keys);
        out->writes_in_flight += crk_get(s->shards[i].writes);
        out->leases_granted += crk_get(s->shards[i].leases_granted);
    }
    out->soft_pinned_keys = crk_get(s->c.soft_pinned);
    out->hard_pinned_keys = crk_get(s->c.hard_pinned);
    out->discarded_bytes = crk_get(s->c.discarded);
    out->metadata_bytes = crk_mem_live_bytes();
    for (int i = 0; i < CRK_OP_COUNT; i++) {
        out->requests[i] = crk_get(s->c.requests[i]);
        out->failures[i] = crk_get(s->c.failures[i]);
        out->batch_items[i] = crk_get(s->c.batch_items[i]);
        out->batch_failed_items[i] = crk_get(s->c.batch_failed_items[i]);
    }
    out->evictions_attempted = crk_get(s->c.evictions_attempted);
    out->evictions_successful = crk_get(s->c.evictions_successful);
    out->evicted_keys = crk_get(s->c.evicted_keys);
    out->evicted_bytes = crk_get(s->c.evicted_bytes);
    out->alloc_failures = crk_get(s->c.alloc_failures);
    out->partial_allocations = crk_get(s->c.partial_allocations);
    out->put_start_discards = crk_get(s->c.put_start_discards);
    out->put_start_releases = crk_get(s->c.put_start_releases);
    out->clients_expired = crk_get(s->c.clients_expired);
}
