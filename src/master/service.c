/*
 * service.c - the master core's lifecycle, configuration, housekeeping
 * tick and metrics. The client table is clients.c, the object table's data
 * structures object_table.c, the key operations objects.c, segments and
 * placement segments.c, eviction eviction.c.
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
#include "master/offload.h"
#include "base/net.h"

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
    cfg->allocation_strategy = CRK_ALLOC_RANDOM;
    cfg->promotion_admission_threshold = 2;
    cfg->offload_force_evict = false;
    cfg->offloading_queue_limit = 50000;
    cfg->offload_cap_ratio = 0.5;
    cfg->promotion_queue_limit = 50000;
    cfg->promotion_max_per_heartbeat = 1;
}

int crk_config_validate(const crk_config *c)
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
    if ((unsigned)c->allocation_strategy > CRK_ALLOC_LOCAL_FIRST)
        return crb_error(CR_INVALID_PARAMS, "allocation_strategy %d is not 0, 1 or 2",
                         (int)c->allocation_strategy);
    if ((c->offload_on_evict || c->promotion_on_hit) && !c->enable_offload)
        return crb_error(CR_INVALID_PARAMS, "%s needs enable_offload",
                         c->offload_on_evict ? "offload_on_evict" : "promotion_on_hit");
    if (c->promotion_admission_threshold == 0 || c->promotion_admission_threshold > 255)
        return crb_error(CR_INVALID_PARAMS, "promotion_admission_threshold %u is not in 1..255",
                         (unsigned)c->promotion_admission_threshold);
    if (c->offloading_queue_limit == 0 || c->offloading_queue_limit > 100000000ull)
        return crb_error(CR_INVALID_PARAMS, "offloading_queue_limit %llu is not in 1..100000000",
                         (unsigned long long)c->offloading_queue_limit);
    if (!(c->offload_cap_ratio >= 0.0 && c->offload_cap_ratio <= 1.0))
        return crb_error(CR_INVALID_PARAMS, "offload_cap_ratio %g is outside [0, 1]",
                         c->offload_cap_ratio);
    return 0;
}

int crk_service_create(const crk_config *cfg, uint64_t now_ms, crk_service **out)
{
    crk_config c;
    if (cfg)
        c = *cfg;
    else
        crk_config_default(&c);
    int rc = crk_config_validate(&c);
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
    uint64_t start = 0;
    (void)crb_random_bytes(&start, sizeof(start));
    atomic_init(&s->next_version, ((start & 0xffffffu) << 40) | 1u);
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
    if (pthread_mutex_init(&s->links_lock, NULL) != 0) {
        rc = crb_error(CR_ERR_NO_MEMORY, "master service: links_lock");
        goto undo_evict_lock;
    }
    s->seg_nbuckets = 64;
    s->seg_buckets = crk_calloc(s->seg_nbuckets, sizeof(*s->seg_buckets));
    s->cl_nbuckets = 64;
    s->cl_buckets = crk_calloc(s->cl_nbuckets, sizeof(*s->cl_buckets));
    if (!s->seg_buckets || !s->cl_buckets) {
        rc = crb_error(CR_ERR_NO_MEMORY, "master service: tables");
        goto undo_tables;
    }
    if (crb_random_bytes(&s->hash_key, sizeof(s->hash_key)) != 0) {
        rc = crb_error(CR_ERR_SYSTEM, "master service: no random key hash key");
        goto undo_tables;
    }
    size_t i;
    for (i = 0; i < CRK_NUM_SHARDS; i++) {
        rc = crk_shard_init(&s->shards[i]);
        if (rc != 0)
            goto undo_shards;
    }
    rc = crk_off_create(s);
    if (rc != 0)
        goto undo_shards;
    *out = s;
    return 0;

undo_shards:
    while (i-- > 0)
        crk_shard_destroy(&s->shards[i]);
undo_tables:
    crk_free(s->cl_buckets);
    crk_free(s->seg_buckets);
    pthread_mutex_destroy(&s->links_lock);
undo_evict_lock:
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
    crk_off_destroy(s);
    /* Objects first: their replicas point at segments. */
    for (size_t i = 0; i < CRK_NUM_SHARDS; i++)
        crk_shard_destroy(&s->shards[i]);
    crk_segments_destroy(s);
    crk_clients_destroy(s);
    crk_links_destroy(s);
    pthread_mutex_destroy(&s->links_lock);
    pthread_mutex_destroy(&s->evict_lock);
    pthread_mutex_destroy(&s->clients_lock);
    pthread_rwlock_destroy(&s->seg_lock);
    crk_free(s);
}

void crk_service_stop_scans(crk_service *s)
{
    atomic_store(&s->stopping, true);
}

void crk_service_on_expired_segment(crk_service *s, crk_expired_segment_fn fn, void *ctx)
{
    s->on_expired = fn;
    s->on_expired_ctx = ctx;
}

void crk_service_on_stage_results(crk_service *s, crk_stage_notify_fn fn, void *ctx)
{
    s->on_stage = fn;
    s->on_stage_ctx = ctx;
}

void crk_service_on_holder_tasks(crk_service *s, crk_tasks_notify_fn fn, void *ctx)
{
    s->on_tasks = fn;
    s->on_tasks_ctx = ctx;
}

const crk_config *crk_service_config(const crk_service *s)
{
    return &s->cfg;
}

int crk_tick(crk_service *s, uint64_t now_ms)
{
    int rc = crk_expire_clients(s, now_ms);
    for (size_t i = 0; i < CRK_NUM_SHARDS; i++) {
        crk_shard *sh = &s->shards[i];
        pthread_mutex_lock(&sh->mu);
        crk_shard_housekeeping_locked(s, sh, now_ms);
        pthread_mutex_unlock(&sh->mu);
    }
    crk_prune_tombs(s, now_ms);

    uint64_t cap = crk_get(s->c.capacity), used = crk_allocated(s);
    uint64_t leaving = crk_off_leaving_bytes(s); /* offloads in flight free this much */
    used = used > leaving ? used - leaving : 0;
    double wm = s->cfg.eviction_high_watermark_ratio;
    if (cap > 0 && s->cfg.eviction_ratio > 0 && (double)used > wm * (double)cap) {
        double target = s->cfg.eviction_ratio * (double)used + ((double)used - wm * (double)cap);
        uint64_t keys = 0;
        uint64_t freed = crk_evict_round(s, (uint64_t)target + 1, now_ms, &keys);
        /* A round that freed nothing (everything leased or pinned) repeats
         * every tick: not worth a line each time. */
        crb_log(keys > 0 ? CRB_LOG_INFO : CRB_LOG_DEBUG,
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
    out->owned_writes_revoked = crk_get(s->c.owned_writes_revoked);
    out->granted_puts = crk_get(s->c.granted_puts);
    out->ahead_puts = crk_get(s->c.ahead_puts);
    out->lease_releases = crk_get(s->c.lease_releases);
    out->early_releases = crk_get(s->c.early_releases);
    out->early_released_bytes = crk_get(s->c.early_released_bytes);
    out->discard_entries = crk_get(s->c.discard_entries);
    out->clients_expired = crk_get(s->c.clients_expired);
}
