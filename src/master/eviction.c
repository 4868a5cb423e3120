/*
 * eviction.c - eviction rounds, deferred releases and stale-write sweeps.
 *
 * Eviction follows LRU order without a global list or a scan of all keys.
 * Each shard keeps its evictable objects (complete, not hard-pinned) in an
 * LRU list ordered by last_access (put_end or the last get), least recent
 * first. A round is a k-way merge over the 64 shard heads: it repeatedly
 * picks the shard whose head is oldest, evicts from that head while the head
 * is not newer than the next-oldest shard head, and stops when `target` bytes
 * are freed. Only one shard lock is held at a time.
 *
 * An object at a head that may not be evicted now (leased, a write in
 * flight, soft-pinned in the first pass) is moved to the tail instead of
 * being looked at again and again (a CLOCK-like second chance; it keeps its
 * old last_access, so when it comes round again it is still seen as old).
 * Every visit makes progress, and a pass visits each object at most once.
 * Pass 1 spares soft-pinned objects whose fixed deadline has not passed;
 * pass 2 runs only if pass 1 freed less than max(target / 2, min_bytes) and
 * allow_evict_soft_pinned_objects is set, and also takes soft-pinned
 * objects. Hard-pinned objects are never in the list; leased objects are
 * never evicted.
 *
 * Rounds are serialised by evict_lock (taken before any shard lock). A
 * put_start whose allocation failed calls crk_evict_for_alloc with its shard
 * unlocked; if another round finished since it observed the failure, it
 * simply retries its allocation instead of evicting again.
 */
#include <string.h>

#include "base/log.h"
#include "master/internal.h"
#include "master/mem.h"
#include "master/offload.h"

#define ALLOC_EVICT_LOG_MS 10000

/* Per-shard state of one pass of a round. */
typedef struct head_state {
    size_t visits; /* objects this pass may still look at */
    uint64_t at;   /* last_access of the evictable head */
    bool live;     /* there is an evictable head */
} head_state;

/* First evictable object of sh's LRU (shard locked), moving the others to the tail. */
static crk_object *peek_locked(crk_shard *sh, head_state *hs, uint64_t now, bool take_soft)
{
    while (hs->visits > 0 && sh->lru_head) {
        crk_object *o = sh->lru_head;
        bool soft = (o->flags & CRK_OBJ_SOFT_PIN) && o->soft_pin_until > now;
        if (!o->write && o->lease_until <= now && (!soft || take_soft))
            return o;
        hs->visits--;
        crk_lru_move_to_tail(sh, o);
        if (sh->lru_count == 1)
            break;
    }
    return NULL;
}

static void refresh_locked(crk_shard *sh, head_state *hs, uint64_t now, bool take_soft)
{
    crk_object *o = peek_locked(sh, hs, now, take_soft);
    hs->live = o != NULL;
    hs->at = o ? o->last_access : 0;
}

static uint64_t evict_pass(crk_service *s, uint64_t target, uint64_t freed, uint64_t now,
                           bool take_soft, uint64_t *keys)
{
    head_state hs[CRK_NUM_SHARDS];
    for (size_t i = 0; i < CRK_NUM_SHARDS; i++) {
        crk_shard *sh = &s->shards[i];
        pthread_mutex_lock(&sh->mu);
        hs[i].visits = sh->lru_count;
        refresh_locked(sh, &hs[i], now, take_soft);
        pthread_mutex_unlock(&sh->mu);
    }
    while (freed < target) {
        size_t best = CRK_NUM_SHARDS;
        uint64_t next_at = UINT64_MAX;
        for (size_t i = 0; i < CRK_NUM_SHARDS; i++) {
            if (!hs[i].live)
                continue;
            if (best == CRK_NUM_SHARDS || hs[i].at < hs[best].at) {
                if (best != CRK_NUM_SHARDS && hs[best].at < next_at)
                    next_at = hs[best].at;
                best = i;
            } else if (hs[i].at < next_at) {
                next_at = hs[i].at;
            }
        }
        if (best == CRK_NUM_SHARDS)
            break; /* nothing evictable left */
        crk_shard *sh = &s->shards[best];
        pthread_mutex_lock(&sh->mu);
        /* Evict this shard's head run: at least one object, then while not
         * newer than the next-oldest shard head. */
        for (bool first = true; freed < target; first = false) {
            crk_object *o = peek_locked(sh, &hs[best], now, take_soft);
            if (!o || (!first && o->last_access > next_at))
                break;
            hs[best].visits--;
            /* With a disk tier the holder writes it out first (offload.h): its memory is
             * freed when the record has landed. */
            crk_off_evict_action act =
                s->off != NULL ? crk_off_evict_locked(s, sh, o, now) : CRK_OFF_EVICT_ERASE;
            if (act == CRK_OFF_EVICT_KEEP)
                continue; /* the tier's queue is full: it stays (moved to the tail) */
            freed += crk_rep_bytes(s, o->size) * o->nrep;
            (*keys)++;
            if (act == CRK_OFF_EVICT_ERASE)
                crk_erase_object_locked(s, sh, o, now); /* unleased: space freed now */
        }
        refresh_locked(sh, &hs[best], now, take_soft);
        pthread_mutex_unlock(&sh->mu);
    }
    return freed;
}

static uint64_t evict_locked(crk_service *s, uint64_t target, uint64_t min_bytes, uint64_t now,
                             uint64_t *keys_out)
{
    uint64_t keys = 0;
    crk_add(s->c.evictions_attempted, 1);
    uint64_t freed = evict_pass(s, target, 0, now, false, &keys);
    uint64_t floor = target / 2 > min_bytes ? target / 2 : min_bytes;
    if (freed < floor && s->cfg.allow_evict_soft_pinned_objects)
        freed = evict_pass(s, target, freed, now, true, &keys);
    if (keys > 0) {
        crk_add(s->c.evictions_successful, 1);
        crk_add(s->c.evicted_keys, keys);
        crk_add(s->c.evicted_bytes, freed);
    }
    *keys_out = keys;
    return freed;
}

uint64_t crk_evict_round(crk_service *s, uint64_t target_bytes, uint64_t now, uint64_t *keys_out)
{
    uint64_t cap = crk_get(s->c.capacity), used = crk_allocated(s);
    uint64_t leaving = crk_off_leaving_bytes(s); /* offloads in flight free this much */
    used = used > leaving ? used - leaving : 0;
    double wm = s->cfg.eviction_high_watermark_ratio;
    uint64_t over = (double)used > wm * (double)cap ? used - (uint64_t)(wm * (double)cap) : 0;
    pthread_mutex_lock(&s->evict_lock);
    uint64_t freed = evict_locked(s, target_bytes, over, now, keys_out);
    atomic_fetch_add(&s->evict_rounds, 1);
    pthread_mutex_unlock(&s->evict_lock);
    return freed;
}

void crk_evict_for_alloc(crk_service *s, uint64_t need_bytes, uint64_t seen_rounds, uint64_t now)
{
    pthread_mutex_lock(&s->evict_lock);
    if (atomic_load(&s->evict_rounds) != seen_rounds) {
        pthread_mutex_unlock(&s->evict_lock); /* a round just ran: retry first */
        return;
    }
    /* Offloads in flight will free this much: enough, unless the holders could already take
     * the next batch (two batches of an eighth of the capacity keep a disk busy while the
     * other's results travel). */
    uint64_t leaving = crk_off_leaving_bytes(s);
    if (leaving >= need_bytes && leaving >= crk_get(s->c.capacity) / 4) {
        pthread_mutex_unlock(&s->evict_lock);
        return;
    }
    uint64_t used = crk_allocated(s);
    uint64_t target = (uint64_t)(s->cfg.eviction_ratio * (double)used);
    if (target < need_bytes)
        target = need_bytes;
    /* Offloads are asynchronous: hand the holders work in batches of an eighth of the
     * capacity, so writes keep flowing while the previous batch lands. */
    if (s->off != NULL && s->cfg.offload_on_evict && target < crk_get(s->c.capacity) / 8)
        target = crk_get(s->c.capacity) / 8;
    uint64_t keys = 0;
    uint64_t freed = evict_locked(s, target, need_bytes, now, &keys);
    atomic_fetch_add(&s->evict_rounds, 1);
    pthread_mutex_unlock(&s->evict_lock);
    /* One summary line at most every ALLOC_EVICT_LOG_MS: a full store with a
     * put rate of 100k/s used to log "freed 0 bytes" 200k times a minute. */
    crk_add(s->c.alloc_evictions, 1);
    crk_add(s->c.alloc_evicted_bytes, freed);
    crk_add(s->c.alloc_evicted_keys, keys);
    uint64_t last = crk_get(s->c.alloc_evict_logged_ms);
    if (crk_elapsed(now, last) >= ALLOC_EVICT_LOG_MS &&
        atomic_compare_exchange_strong(&s->c.alloc_evict_logged_ms, &last, now)) {
        uint64_t rounds = atomic_exchange(&s->c.alloc_evictions, 0);
        uint64_t bytes = atomic_exchange(&s->c.alloc_evicted_bytes, 0);
        uint64_t nkeys = atomic_exchange(&s->c.alloc_evicted_keys, 0);
        crb_log(CRB_LOG_INFO,
                "master: %llu eviction round(s) for failed allocations (the last for %llu "
                "bytes) freed %llu bytes in %llu keys; %llu bytes wait for readers or slow "
                "writers (deferred)",
                (unsigned long long)rounds, (unsigned long long)need_bytes,
                (unsigned long long)bytes, (unsigned long long)nkeys,
                (unsigned long long)crk_get(s->c.discarded));
    }
}

void crk_shard_housekeeping_locked(crk_service *s, crk_shard *sh, uint64_t now)
{
    /* Deferred releases whose lease or writer deadline has passed. */
    crk_discard **dp = &sh->discards;
    while (*dp) {
        crk_discard *d = *dp;
        if (d->release_at > now) {
            dp = &d->next;
            continue;
        }
        *dp = d->next;
        crk_add(s->c.put_start_releases, 1);
        crk_discard_free(s, d);
    }

    /* Writes nobody finished within put_start_release_timeout: the writer is
     * presumed gone and may no longer write, so the space is freed at once. */
    crk_write *w = sh->w_head;
    while (w && crk_elapsed(now, w->start_ms) >= s->cfg.put_start_release_timeout_ms) {
        crk_write *next = w->next;
        crk_object *o = w->obj;
        crb_log(CRB_LOG_INFO, "master: dropping the put of '%s' left unfinished for %llu ms",
                o->key, (unsigned long long)crk_elapsed(now, w->start_ms));
        crk_write_unlink(sh, w);
        crk_sub(sh->writes, 1);
        o->write = NULL;
        crk_add(s->c.put_start_releases, 1);
        if (w->upsert) {
            for (uint32_t i = 0; i < w->nrep; i++)
                crk_free_replica(&w->rep[i]);
            if (o->nrep == 0)
                crk_erase_object_locked(s, sh, o, now);
        } else {
            for (uint32_t i = 0; i < o->nrep; i++)
                crk_free_replica(&crk_obj_reps(o)[i]);
            o->nrep = 0;
            crk_erase_object_locked(s, sh, o, now);
        }
        crk_free(w);
        w = next;
    }
}
