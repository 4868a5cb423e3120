/*
 * objects.c - the key operations: two-phase put (and upsert) with an owner
 * and preemption, reads with leases, removal, batches, operator queries.
 *
 * The table has CRK_NUM_SHARDS shards chosen by the key hash's high bits;
 * each shard (object_table.h) is an open-addressed hash table under its own
 * mutex, plus:
 *   - an LRU list of its complete, not hard-pinned objects (head = least
 *     recently read; put_end appends, get_replica_list moves to the tail),
 *     which eviction consumes from the head;
 *   - the list of its writes in flight, oldest first (preemption, sweeps);
 *   - its discard entries: replicas whose space is released later because a
 *     reader lease or a slow writer may still touch it.
 *
 * An object is one heap block (header, key, replicas). An in-flight first
 * put keeps its replicas inline and is not COMPLETE; an upsert of a complete
 * object keeps the new replicas in its crk_write until put_end swaps in a new
 * object block. Every function that touches an object holds its shard lock.
 *
 * Deferred release (crk_release_or_defer) is what keeps readers safe: an
 * object removed with force, replaced by an upsert, or a write preempted
 * while it may still be written, gives its space back only once the lease or
 * the writer's deadline has passed.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "master/internal.h"
#include "master/tenants.h"
#include "master/mem.h"
#include "master/offload.h"
#include "master/regex.h"

static crk_shard *shard_of(crk_service *s, uint64_t h)
{
    return crk_shard_for(s, h);
}

static int key_check(const char *key, size_t *len_out)
{
    if (!key)
        return crb_error(CR_INVALID_KEY, "key is NULL");
    size_t len = strnlen(key, CRK_MAX_KEY_LEN + 1);
    if (len == 0)
        return crb_error(CR_INVALID_KEY, "key is empty");
    if (len > CRK_MAX_KEY_LEN)
        return crb_error(CR_INVALID_KEY, "key is longer than %d bytes", CRK_MAX_KEY_LEN);
    *len_out = len;
    return 0;
}

/* A checked key and the shard it lives in. */
typedef struct key_ref {
    const char *key;
    size_t len;
    uint64_t hash; /* its low 32 bits are the slot hash */
    crk_shard *sh;
} key_ref;

/* Check key (CR_INVALID_KEY) and find its shard, without locking it. */
static int key_ref_of(crk_service *s, const char *key, key_ref *k)
{
    size_t len = 0;
    int rc = key_check(key, &len);
    if (rc != 0)
        return rc;
    uint64_t h = crk_key_hash(s, key, len);
    *k = (key_ref){key, len, h, shard_of(s, h)};
    return 0;
}

/* key_ref_of, or the batch's ready-made reference `pre` (already checked and
 * hashed, see key_ring) when there is one. */
static int key_ref_from(crk_service *s, const char *key, const key_ref *pre, key_ref *k)
{
    if (pre != NULL) {
        *k = *pre;
        return 0;
    }
    return key_ref_of(s, key, k);
}

/* Lock k's shard; returns the key's slot (its object is NULL when absent). */
static size_t lock_and_probe(const key_ref *k)
{
    pthread_mutex_lock(&k->sh->mu);
    return crk_shard_probe(k->sh, k->key, k->len, (uint32_t)k->hash);
}

/*
 * Check key, lock its shard and find its object. 0: the shard is locked and
 * *o / *slot are set. Otherwise nothing is locked: CR_INVALID_KEY, or
 * CR_OBJECT_NOT_FOUND with a message naming op.
 */
static int lock_object(crk_service *s, const char *op, const char *key, const key_ref *pre,
                       key_ref *k, crk_object **o, size_t *slot)
{
    int rc = key_ref_from(s, key, pre, k);
    if (rc != 0)
        return rc;
    size_t i = lock_and_probe(k);
    if (!k->sh->slots[i].obj) {
        pthread_mutex_unlock(&k->sh->mu);
        return crb_error(CR_OBJECT_NOT_FOUND, "%s '%s': no such object", op, key);
    }
    *o = k->sh->slots[i].obj;
    if (slot)
        *slot = i;
    return 0;
}

/* --- objects ------------------------------------------------------------------------ */

static void pin_gauges(crk_service *s, const crk_object *o, int sign)
{
    if (!(o->flags & CRK_OBJ_COMPLETE))
        return;
    if (o->flags & CRK_OBJ_HARD_PIN) {
        if (sign > 0)
            crk_add(s->c.hard_pinned, 1);
        else
            crk_sub(s->c.hard_pinned, 1);
    }
    if (o->flags & CRK_OBJ_SOFT_PIN) {
        if (sign > 0)
            crk_add(s->c.soft_pinned, 1);
        else
            crk_sub(s->c.soft_pinned, 1);
    }
}

static void fill_desc(crk_replica_desc *d, const crk_replica *r, uint64_t size)
{
    memcpy(d->segment, r->seg->name, r->seg->name_len + 1);
    d->address = r->seg->base + r->offset;
    d->size = size;
    d->mount_epoch = r->seg->epoch;
}

void crk_release_or_defer(crk_service *s, crk_shard *sh, const crk_replica *reps, uint32_t n,
                          uint64_t value_size, uint64_t release_at, uint64_t now,
                          const crk_object *readers)
{
    if (n == 0)
        return;
    /* Leased, but every read of the lease was released: nobody reads it. */
    if (readers && readers->readers == 0 && readers->lease_until == release_at)
        release_at = now;
    if (release_at > now) {
        crk_discard *d = crk_malloc(sizeof(*d) + n * sizeof(crk_replica));
        if (d) {
            d->release_at = release_at;
            d->bytes = crk_rep_bytes(s, value_size);
            d->key_hash = readers ? readers->hash : 0;
            d->lease_era = readers && readers->lease_until == release_at ? readers->lease_era : 0;
            d->readers = readers ? readers->readers : 0;
            d->nrep = n;
            memcpy(d->rep, reps, n * sizeof(crk_replica));
            for (uint32_t i = 0; i < n; i++)
                crk_note_horizon(reps[i].seg, release_at);
            d->next = sh->discards;
            sh->discards = d;
            crk_add(s->c.discarded, d->bytes * n);
            crk_add(s->c.discard_entries, 1);
            return;
        }
        crb_log(CRB_LOG_ERROR, "master: out of memory deferring a release; freeing now");
    }
    for (uint32_t i = 0; i < n; i++)
        crk_free_replica(&reps[i]);
}

void crk_discard_free(crk_service *s, crk_discard *d)
{
    for (uint32_t i = 0; i < d->nrep; i++)
        crk_free_replica(&d->rep[i]);
    crk_sub(s->c.discarded, d->bytes * d->nrep);
    crk_sub(s->c.discard_entries, 1);
    crk_free(d);
}

void crk_erase_object_locked(crk_service *s, crk_shard *sh, crk_object *o, uint64_t now)
{
    if (s->ha_erased != NULL) /* HA: standbys forget it (master/ha_repl.c) */
        s->ha_erased(s->ha_ctx, o->key, o->key_len);
    if ((o->flags & CRK_OBJ_OFFLOADING) && s->off != NULL)
        crk_off_object_gone_locked(s, o); /* its offload no longer frees anything */
    crk_shard_remove(sh, o);
    pin_gauges(s, o, -1);
    crk_release_or_defer(s, sh, crk_obj_reps(o), o->nrep, o->size, o->lease_until, now, o);
    crk_free(o);
}

/* Remove the replicas on `seg` from reps[0..*n); returns how many. */
static uint32_t drop_reps_on(crk_replica *reps, uint8_t *n, const crk_segment *seg)
{
    uint32_t removed = 0;
    for (uint32_t i = 0; i < *n;) {
        if (reps[i].seg == seg) {
            reps[i] = reps[*n - 1];
            (*n)--;
            removed++;
        } else {
            i++;
        }
    }
    return removed;
}

static void ahead_ended_locked(crk_service *s, const crk_object *o);

uint64_t crk_purge_segment_locked(crk_service *s, crk_shard *sh, crk_segment *seg)
{
    uint64_t writers = 0;
    uint64_t writer_end;
    /* Erasing shifts later entries back into slot i, so i is examined again;
     * an entry that wraps from the front to the back may be seen twice,
     * which changes nothing the second time. */
    for (size_t i = 0; i < sh->nslots;) {
        crk_object *o = sh->slots[i].obj;
        if (!o) {
            i++;
            continue;
        }
        {
            crk_write *w = o->write;
            writer_end = w ? crk_sat_add(w->start_ms, s->cfg.put_start_release_timeout_ms) : 0;
            if (w != NULL && w->conn != 0 && w->own_until < writer_end)
                writer_end = w->own_until; /* an owned write's writer promised to end by then */
            uint32_t gone = drop_reps_on(crk_obj_reps(o), &o->nrep, seg);
            if (w && !(o->flags & CRK_OBJ_COMPLETE) && gone && writer_end > writers)
                writers = writer_end;
            if (w && w->upsert && drop_reps_on(w->rep, &w->nrep, seg) && writer_end > writers)
                writers = writer_end;
            if (o->nrep > 0 || (w && (o->flags & CRK_OBJ_COMPLETE))) {
                i++;
                continue;
            }
            /* Nothing left to read or to complete: erase (no space to free). */
            if (w && w->ahead)
                ahead_ended_locked(s, o); /* its held readers: no such object now */
            if (w)
                crk_write_drop(sh, w);
            crk_erase_object_locked(s, sh, o, 0); /* slot i now holds a later entry */
        }
    }
    crk_discard **dp = &sh->discards;
    while (*dp) {
        crk_discard *d = *dp;
        uint8_t n = (uint8_t)d->nrep;
        uint32_t gone = drop_reps_on(d->rep, &n, seg);
        if (gone) {
            d->nrep = n;
            crk_sub(s->c.discarded, d->bytes * gone);
            if (d->release_at > writers)
                writers = d->release_at;
        }
        if (d->nrep == 0) {
            *dp = d->next;
            crk_sub(s->c.discard_entries, 1);
            crk_free(d);
        } else {
            dp = &d->next;
        }
    }
    return writers;
}

/* --- config checks -------------------------------------------------------------------- */

static int check_replicate_config(const crk_service *s, const crk_replicate_config *cfg,
                                  uint64_t *soft_ttl)
{
    if (cfg->replica_num == 0 || cfg->replica_num > CRK_MAX_REPLICAS)
        return crb_error(CR_INVALID_PARAMS, "replica_num %u is not in 1..%d", cfg->replica_num,
                         CRK_MAX_REPLICAS);
    if (cfg->n_preferred > 0 && !cfg->preferred_segments)
        return crb_error(CR_INVALID_PARAMS, "%zu preferred segments but no array",
                         cfg->n_preferred);
    switch (cfg->soft_pin_action) {
    case CRK_SOFT_PIN_PRESERVE:
    case CRK_SOFT_PIN_DISABLE:
        if (cfg->soft_pin_ttl_ms != 0)
            return crb_error(CR_INVALID_PARAMS,
                             "soft_pin_ttl_ms %llu given without soft pin action ENABLE",
                             (unsigned long long)cfg->soft_pin_ttl_ms);
        *soft_ttl = 0;
        return 0;
    case CRK_SOFT_PIN_ENABLE: {
        uint64_t ttl =
            cfg->soft_pin_ttl_ms ? cfg->soft_pin_ttl_ms : s->cfg.default_kv_soft_pin_ttl_ms;
        if (ttl > s->cfg.max_kv_soft_pin_ttl_ms)
            return crb_error(
                CR_INVALID_PARAMS, "soft_pin_ttl_ms %llu exceeds max_kv_soft_pin_ttl %llu",
                (unsigned long long)ttl, (unsigned long long)s->cfg.max_kv_soft_pin_ttl_ms);
        *soft_ttl = ttl;
        return 0;
    }
    default:
        return crb_error(CR_INVALID_PARAMS, "soft_pin_action %d is not 0, 1 or 2",
                         cfg->soft_pin_action);
    }
}

static const crk_replicate_config default_replicate = {.replica_num = 1};

/* --- put ---------------------------------------------------------------------------------- */

/* A committed-ahead write of o ended (completed or dropped; shard locked): the reads of
 * its key held for it (the RPC server's stage waits) are asked again. */
static void ahead_ended_locked(crk_service *s, const crk_object *o)
{
    if (s->on_stage == NULL)
        return;
    const char *key = o->key;
    size_t len = o->key_len;
    s->on_stage(s->on_stage_ctx, &key, &len, 1);
}

/*
 * Drop the write in flight of `o` (shard locked); its space is released at
 * release_at (now if that has passed). Returns the object if it is still
 * there (an upserted object keeps its old version), NULL if it was erased.
 */
static crk_object *drop_write_locked(crk_service *s, crk_shard *sh, crk_object *o,
                                     uint64_t release_at, uint64_t now)
{
    crk_write *w = o->write;
    if (w->ahead)
        ahead_ended_locked(s, o);
    if (w->upsert) {
        crk_release_or_defer(s, sh, w->rep, w->nrep, w->size, release_at, now, NULL);
        crk_write_drop(sh, w);
        if (o->nrep > 0)
            return o;
        crk_erase_object_locked(s, sh, o, now);
        return NULL;
    }
    crk_release_or_defer(s, sh, crk_obj_reps(o), o->nrep, o->size, release_at, now, NULL);
    o->nrep = 0;
    crk_write_drop(sh, w);
    crk_erase_object_locked(s, sh, o, now);
    return NULL;
}

/* Preempt the stale write of `o` (shard locked): its space is released at
 * write start + put_start_release_timeout (the slow writer may still write). */
static crk_object *preempt_locked(crk_service *s, crk_shard *sh, crk_object *o, uint64_t now)
{
    crk_write *w = o->write;
    uint64_t release_at = crk_sat_add(w->start_ms, s->cfg.put_start_release_timeout_ms);
    crb_log(CRB_LOG_INFO, "master: preempting the put of '%s' started %llu ms ago", o->key,
            (unsigned long long)crk_elapsed(now, w->start_ms));
    crk_add(s->c.put_start_discards, 1);
    return drop_write_locked(s, sh, o, release_at, now);
}

uint64_t crk_conn_tag(crk_service *s)
{
    return atomic_fetch_add_explicit(&s->conn_tags, 1, CRK_RELAXED) + 1;
}

size_t crk_revoke_conn_writes(crk_service *s, uint64_t conn, uint64_t now_ms)
{
    if (conn == 0)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < CRK_NUM_SHARDS; i++) {
        crk_shard *sh = &s->shards[i];
        pthread_mutex_lock(&sh->mu);
        for (crk_write *w = sh->w_head, *next; w != NULL; w = next) {
            next = w->next; /* dropping w frees it (and nothing else on the list) */
            if (w->conn != conn)
                continue;
            crb_log(CRB_LOG_DEBUG,
                    "master: the connection owning the put of '%s' closed; revoked, space "
                    "reused in %llu ms",
                    w->obj->key, (unsigned long long)crk_elapsed(w->own_until, now_ms));
            (void)drop_write_locked(s, sh, w->obj, w->own_until, now_ms);
            n++;
        }
        pthread_mutex_unlock(&sh->mu);
    }
    if (n > 0) {
        crk_add(s->c.owned_writes_revoked, n);
        crb_log(CRB_LOG_INFO, "master: a connection closed with %zu writes in flight: revoked", n);
    }
    return n;
}

static int alloc_failure(crk_service *s, const char *key, uint64_t size, uint32_t want,
                         const crk_place_info *info, uint32_t evictions)
{
    crk_add(s->c.alloc_failures, 1);
    if (!info->any_fits && info->any_fenced)
        return crb_error(CR_NO_AVAILABLE_HANDLE,
                         "put_start '%s': every segment that could hold %llu bytes is fenced; "
                         "the first, '%s', accepts allocations at t=%llu ms: %s",
                         key, (unsigned long long)size, info->fenced,
                         (unsigned long long)info->min_fence,
                         info->fence_reason == CRK_FENCE_RESTART
                             ? "it was remounted after a master restart, and the previous "
                               "instance's leases on it may still run"
                             : "a segment of that name was unmounted while reads or writes of "
                               "its memory could still be running");
    if (!info->any_fits)
        return crb_error(CR_NO_AVAILABLE_HANDLE,
                         "put_start '%s': no mounted segment can hold %llu bytes", key,
                         (unsigned long long)size);
    return crb_error(CR_NO_AVAILABLE_HANDLE,
                     "put_start '%s': no space for %llu bytes x %u replicas after %u evictions",
                     key, (unsigned long long)size, want, evictions);
}

static int put_start_impl(crk_service *s, crk_client_id client, const char *key, const key_ref *pre,
                          uint64_t value_size, const crk_replicate_config *cfg, uint64_t now,
                          bool upsert, crk_replica_list *out)
{
    key_ref kr;
    uint64_t soft_ttl = 0;
    int rc = key_ref_from(s, key, pre, &kr);
    if (rc != 0)
        return rc;
    if (!crk_id_valid(client))
        return crb_error(CR_ILLEGAL_CLIENT, "put_start '%s': the zero client id is not valid", key);
    if (!cfg)
        cfg = &default_replicate;
    rc = check_replicate_config(s, cfg, &soft_ttl);
    if (rc != 0)
        return rc;
    if (!out)
        return crb_error(CR_INVALID_PARAMS, "put_start '%s': no output list", key);
    /* An owned write's bound must lie within the release timeout: the writer
     * relies on it, so it is refused rather than shortened. */
    if (cfg->owner_conn != 0 &&
        (cfg->owned_ms == 0 || cfg->owned_ms > s->cfg.put_start_release_timeout_ms))
        return crb_error(CR_INVALID_PARAMS,
                         "put_start '%s': an owned write's bound of %llu ms is not in 1..%llu "
                         "(put_start_release_timeout)",
                         key, (unsigned long long)cfg->owned_ms,
                         (unsigned long long)s->cfg.put_start_release_timeout_ms);

    /* A disk-only key exists: only its holder may put it (a promotion, offload.h). */
    bool promotion = false;
    if (s->off != NULL && !upsert) {
        if (!crk_off_put_allowed(s, key, kr.len, client))
            return crb_error(CR_OBJECT_ALREADY_EXISTS, "put_start '%s': key exists (on disk)", key);
        promotion = crk_off_exist(s, key, kr.len) == 1;
    }
    uint64_t h = kr.hash;
    crk_shard *sh = kr.sh;
    uint64_t alloc_size = crk_rep_bytes(s, value_size);
    if (alloc_size == UINT64_MAX)
        return crb_error(CR_INVALID_PARAMS, "put_start '%s': value size %llu too large", key,
                         (unsigned long long)value_size);
    crk_replica reps[CRK_MAX_REPLICAS];

    for (uint32_t attempt = 0;; attempt++) {
        size_t slot = lock_and_probe(&kr); /* sh->slots may change until locked */
        crk_object *o = sh->slots[slot].obj;
        if (o && !upsert && (o->flags & CRK_OBJ_COMPLETE)) {
            pthread_mutex_unlock(&sh->mu);
            return crb_error(CR_OBJECT_ALREADY_EXISTS, "put_start '%s': key exists", key);
        }
        if (o && o->write) {
            uint64_t age = crk_elapsed(now, o->write->start_ms);
            if (age < s->cfg.put_start_discard_timeout_ms) {
                pthread_mutex_unlock(&sh->mu);
                return crb_error(CR_OBJECT_REPLICA_BUSY,
                                 "put_start '%s': another put started %llu ms ago is in "
                                 "flight (preemptible after %llu ms)",
                                 key, (unsigned long long)age,
                                 (unsigned long long)s->cfg.put_start_discard_timeout_ms);
            }
            o = preempt_locked(s, sh, o, now);
        }
        if (o && !upsert) { /* not reached: a fresh put's preempted object is erased */
            pthread_mutex_unlock(&sh->mu);
            return crb_error(CR_OBJECT_ALREADY_EXISTS, "put_start '%s': key exists", key);
        }

        if (!o && (rc = crk_shard_reserve(sh)) != 0) {
            pthread_mutex_unlock(&sh->mu);
            return rc;
        }
        crk_place_info info;
        uint32_t k = crk_place(s, alloc_size, cfg->replica_num, cfg->preferred_segments,
                               cfg->n_preferred, client, h, now, reps, &info);
        if (k == 0) {
            uint64_t rounds = atomic_load(&s->evict_rounds);
            pthread_mutex_unlock(&sh->mu);
            if (info.any_fits && attempt < s->cfg.max_evict_retries && s->cfg.eviction_ratio > 0) {
                crk_evict_for_alloc(s, alloc_size, rounds, now);
                continue;
            }
            return alloc_failure(s, key, value_size, cfg->replica_num, &info, attempt);
        }

        crk_write *w = crk_calloc(1, sizeof(*w) + (o ? k : 0) * sizeof(crk_replica));
        crk_object *fresh = o ? NULL : crk_obj_new(key, kr.len, (uint32_t)kr.hash, k);
        if (!w || (!o && !fresh)) {
            crk_free(w);
            crk_free(fresh);
            for (uint32_t i = 0; i < k; i++)
                crk_free_replica(&reps[i]);
            pthread_mutex_unlock(&sh->mu);
            return crb_error(CR_ERR_NO_MEMORY, "put_start '%s': object record", key);
        }
        w->owner = client;
        w->start_ms = now;
        w->size = value_size;
        w->soft_pin_ttl = soft_ttl;
        w->soft_action = (uint8_t)cfg->soft_pin_action;
        w->hard_pin = cfg->hard_pin;
        w->promotion = promotion;
        if (cfg->owner_conn != 0) {
            w->conn = cfg->owner_conn;
            w->own_until = crk_sat_add(now, cfg->owned_ms);
        }
        if (o) {
            w->upsert = 1;
            w->nrep = (uint8_t)k;
            memcpy(w->rep, reps, k * sizeof(crk_replica));
            w->obj = o;
            o->write = w;
        } else {
            fresh->size = value_size;
            memcpy(crk_obj_reps(fresh), reps, k * sizeof(crk_replica));
            fresh->write = w;
            w->obj = fresh;
            crk_shard_insert(sh, fresh);
        }
        crk_write_push(sh, w);

        out->value_size = value_size;
        out->lease_ttl_ms = 0;
        out->lease_token = 0;
        out->n = k;
        for (uint32_t i = 0; i < k; i++)
            fill_desc(&out->r[i], &reps[i], value_size);
        pthread_mutex_unlock(&sh->mu);
        if (k < cfg->replica_num)
            crk_add(s->c.partial_allocations, 1);
        return 0;
    }
}

/* Pins of the version a write completes. */
static void apply_pins(crk_object *dst, const crk_write *w, uint8_t old_flags,
                       uint64_t old_soft_until, uint64_t now)
{
    dst->flags &= (uint8_t) ~(CRK_OBJ_HARD_PIN | CRK_OBJ_SOFT_PIN);
    if (w->hard_pin)
        dst->flags |= CRK_OBJ_HARD_PIN;
    switch (w->soft_action) {
    case CRK_SOFT_PIN_ENABLE:
        dst->flags |= CRK_OBJ_SOFT_PIN;
        dst->soft_pin_until = crk_sat_add(now, w->soft_pin_ttl);
        break;
    case CRK_SOFT_PIN_PRESERVE:
        if (w->upsert && (old_flags & CRK_OBJ_SOFT_PIN)) {
            dst->flags |= CRK_OBJ_SOFT_PIN;
            dst->soft_pin_until = old_soft_until;
        }
        break;
    default:
        break;
    }
}

/*
 * A new complete version of key on reps[0..n_reps), with w's size and pins (over the
 * replaced version's flags and soft pin, 0 for a new key), its version number given out
 * (*version_out, if asked); NULL without memory. Not yet in any table or list.
 */
static crk_object *new_version(crk_service *s, const char *key, size_t len, uint32_t hash,
                               const crk_replica *reps, uint32_t n_reps, const crk_write *w,
                               uint8_t old_flags, uint64_t old_soft_pin, uint64_t now,
                               uint64_t *version_out)
{
    crk_object *n = crk_obj_new(key, len, hash, n_reps);
    if (!n)
        return NULL;
    n->size = w->size;
    memcpy(crk_obj_reps(n), reps, n_reps * sizeof(crk_replica));
    apply_pins(n, w, old_flags, old_soft_pin, now);
    n->flags |= CRK_OBJ_COMPLETE;
    n->version = crk_next_version(s);
    if (version_out != NULL)
        *version_out = n->version;
    n->last_access = now;
    return n;
}

/*
 * Upsert's switch (shard locked): a new block holding reps[0..n_reps) with w's size and
 * pins replaces the complete object o at `slot`; o's replicas are released once no lease
 * can still cover them. CR_ERR_NO_MEMORY leaves everything as it was.
 */
static int replace_version_locked(crk_service *s, crk_shard *sh, size_t slot, crk_object *o,
                                  const crk_replica *reps, uint32_t n_reps, const crk_write *w,
                                  uint64_t now, uint64_t *version_out)
{
    crk_object *n = new_version(s, o->key, o->key_len, o->hash, reps, n_reps, w, o->flags,
                                o->soft_pin_until, now, version_out);
    if (!n)
        return crb_error(CR_ERR_NO_MEMORY, "put_end '%s': new version record", o->key);
    sh->slots[slot].obj = n;
    crk_lru_unlink(sh, o);
    if (!(n->flags & CRK_OBJ_HARD_PIN))
        crk_lru_push_tail(sh, n);
    pin_gauges(s, o, -1);
    pin_gauges(s, n, +1);
    if (s->off != NULL)
        crk_off_put_end_locked(s, n, false, now);
    /* Old replicas: readers may hold them until the old lease ends, or until
     * the last of them releases its read. The new version's eras continue
     * past the old one's, so a token of the old version never matches it. */
    n->lease_era = o->lease_era + 1 ? o->lease_era + 1 : 1;
    crk_release_or_defer(s, sh, crk_obj_reps(o), o->nrep, o->size, o->lease_until, now, o);
    crk_free(o);
    return 0;
}

static int put_end_impl(crk_service *s, crk_client_id client, const char *key, const key_ref *pre,
                        uint64_t now, uint64_t *version_out)
{
    key_ref k;
    crk_object *o;
    size_t slot;
    int rc = lock_object(s, "put_end", key, pre, &k, &o, &slot);
    if (rc != 0)
        return rc;
    crk_shard *sh = k.sh;
    crk_write *w = o->write;
    if (!w) {
        if (version_out != NULL) /* already complete: a repeated put_end is a no-op */
            *version_out = o->version;
        goto unlock;
    }
    if (!crk_id_eq(w->owner, client)) {
        rc = crb_error(CR_ILLEGAL_CLIENT,
                       "put_end '%s': the write in flight is another "
                       "client's (this one may have been preempted)",
                       key);
        goto unlock;
    }
    if (!w->upsert) {
        apply_pins(o, w, 0, 0, now);
        o->flags |= CRK_OBJ_COMPLETE;
        if (w->ahead) /* its version was given when it was committed ahead */
            ahead_ended_locked(s, o);
        else
            o->version = crk_next_version(s);
        if (version_out != NULL)
            *version_out = o->version;
        o->last_access = now;
        pin_gauges(s, o, +1);
        if (s->off != NULL)
            crk_off_put_end_locked(s, o, w->promotion, now);
        crk_write_drop(sh, w);
        if (!(o->flags & CRK_OBJ_HARD_PIN))
            crk_lru_push_tail(sh, o);
        goto unlock;
    }
    if (w->nrep == 0) {
        crk_write_drop(sh, w);
        if (o->nrep == 0)
            crk_erase_object_locked(s, sh, o, now);
        rc = crb_error(CR_REPLICA_IS_GONE,
                       "put_end '%s': every new replica was on an unmounted segment", key);
        goto unlock;
    }
    /* Upsert: a new block with the new replicas replaces the object. */
    rc = replace_version_locked(s, sh, slot, o, w->rep, w->nrep, w, now, version_out);
    if (rc == 0) {
        w->obj = NULL;
        crk_write_drop(sh, w);
    }
unlock:
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

/* Lock two shards (one when they are the same), in address order. */
static void lock_pair(crk_shard *a, crk_shard *b)
{
    if (a == b) {
        pthread_mutex_lock(&a->mu);
        return;
    }
    pthread_mutex_lock(&(a < b ? a : b)->mu);
    pthread_mutex_lock(&(a < b ? b : a)->mu);
}

static void unlock_pair(crk_shard *a, crk_shard *b)
{
    pthread_mutex_unlock(&a->mu);
    if (a != b)
        pthread_mutex_unlock(&b->mu);
}

/*
 * Both shards locked, key absent: a new complete object on the grant's
 * replicas, with the grant write's size and pins.
 */
static int install_granted_locked(crk_service *s, const key_ref *k, crk_object *go,
                                  const crk_write *gw, uint64_t now, uint64_t *version_out)
{
    int rc = crk_shard_reserve(k->sh);
    if (rc != 0)
        return rc;
    crk_object *n = new_version(s, k->key, k->len, (uint32_t)k->hash, crk_obj_reps(go), go->nrep,
                                gw, 0, 0, now, version_out);
    if (!n)
        return crb_error(CR_ERR_NO_MEMORY, "put_end '%s': object record", k->key);
    crk_shard_insert(k->sh, n);
    pin_gauges(s, n, +1);
    if (s->off != NULL)
        crk_off_put_end_locked(s, n, false, now);
    if (!(n->flags & CRK_OBJ_HARD_PIN))
        crk_lru_push_tail(k->sh, n);
    return 0;
}

/* The refs of key and of its grant; a key cannot be its own grant. */
static int grant_refs(crk_service *s, const char *key, const char *grant, key_ref *k, key_ref *g)
{
    int rc = key_ref_of(s, key, k);
    if (rc == 0)
        rc = key_ref_of(s, grant, g);
    if (rc == 0 && k->len == g->len && memcmp(key, grant, k->len) == 0)
        rc = crb_error(CR_INVALID_PARAMS, "put_end '%s': a key cannot be its own grant", key);
    return rc;
}

/* Is go (its write gw) a grant of client: a fresh put's write in flight, of this client,
 * with replicas, not committed ahead? (Shards locked; go and gw may be NULL.) */
static bool is_grant_of(const crk_object *go, const crk_write *gw, crk_client_id client)
{
    return gw != NULL && !gw->upsert && !gw->promotion && !gw->ahead && go->nrep > 0 &&
           crk_id_eq(gw->owner, client);
}

/* Both shards locked: may a grant's end put `key` (its object o, or NULL)? A put's checks:
 * on a holder's disk or complete (a put, not an upsert): exists; another write in flight
 * younger than put_start_discard_timeout: busy (an older one is the caller's to preempt). */
static int grant_end_key_check(const crk_service *s, const char *key, const crk_object *o,
                               bool on_disk, bool upsert, uint64_t now)
{
    if (on_disk)
        return crb_error(CR_OBJECT_ALREADY_EXISTS, "put_end '%s': key exists (on disk)", key);
    if (o != NULL && !upsert && (o->flags & CRK_OBJ_COMPLETE))
        return crb_error(CR_OBJECT_ALREADY_EXISTS, "put_end '%s': key exists", key);
    if (o != NULL && o->write != NULL &&
        crk_elapsed(now, o->write->start_ms) < s->cfg.put_start_discard_timeout_ms)
        return crb_error(CR_OBJECT_REPLICA_BUSY,
                         "put_end '%s': another put started %llu ms ago is in flight", key,
                         (unsigned long long)crk_elapsed(now, o->write->start_ms));
    return 0;
}

/*
 * put_end / upsert_end with a grant (docs/WIRE.md, "Put grants"): `grant` names
 * a fresh write in flight of this client (a hidden key it put_started earlier)
 * whose replicas already hold the value; `key` becomes a complete object on
 * those replicas, in one step under both shards' locks, and the grant is gone.
 * The key's checks are put_start's (exists, another write in flight, a disk
 * copy). A grant that is not this client's fresh write in flight is
 * CR_OBJECT_NOT_FOUND and nothing changes (the client falls back to a
 * two-phase put); any other failure consumes the grant (its space is freed at
 * once: the writer finished before it asked).
 */
static int put_end_granted_impl(crk_service *s, crk_client_id client, const char *key,
                                const char *grant, bool upsert, uint64_t now, uint64_t *version_out)
{
    key_ref k, g;
    int rc = grant_refs(s, key, grant, &k, &g);
    if (rc != 0)
        return rc;
    bool on_disk = false; /* only its holder's promotion may put it: never through a grant */
    if (s->off != NULL && !upsert)
        on_disk = crk_off_exist(s, key, k.len) == 1;
    lock_pair(k.sh, g.sh);
    crk_object *go = g.sh->slots[crk_shard_probe(g.sh, grant, g.len, (uint32_t)g.hash)].obj;
    crk_write *gw = go != NULL ? go->write : NULL;
    if (!is_grant_of(go, gw, client)) {
        unlock_pair(k.sh, g.sh);
        return crb_error(CR_OBJECT_NOT_FOUND,
                         "put_end '%s': grant '%s' is not a write in flight of this client "
                         "(revoked with its connection, preempted, or its segment unmounted)",
                         key, grant);
    }
    size_t slot = crk_shard_probe(k.sh, key, k.len, (uint32_t)k.hash);
    crk_object *o = k.sh->slots[slot].obj;
    rc = grant_end_key_check(s, key, o, on_disk, upsert, now);
    if (rc == 0) {
        if (o != NULL && o->write != NULL) {
            o = preempt_locked(s, k.sh, o, now); /* may erase it: the slots move */
            slot = crk_shard_probe(k.sh, key, k.len, (uint32_t)k.hash);
        }
        if (o == NULL) {
            rc = install_granted_locked(s, &k, go, gw, now, version_out);
        } else {
            crk_write as_upsert = *gw; /* an upsert's pins (soft pin PRESERVE keeps the old) */
            as_upsert.upsert = 1;
            rc = replace_version_locked(s, k.sh, slot, o, crk_obj_reps(go), go->nrep, &as_upsert,
                                        now, version_out);
        }
        if (rc == 0) { /* the replicas moved to key: the grant goes without them */
            go->nrep = 0;
            crk_write_drop(g.sh, gw);
            crk_erase_object_locked(s, g.sh, go, now);
            crk_add(s->c.granted_puts, 1);
        }
    }
    if (rc != 0)
        (void)drop_write_locked(s, g.sh, go, now, now);
    unlock_pair(k.sh, g.sh);
    return rc;
}

/*
 * Both shards locked, key absent: the grant's write (of go, in g's shard) moves to a new
 * object of key on the same replicas, committed ahead: it gets its version now, and the
 * writer's plain put_end completes it. The grant object goes without its replicas.
 */
static int move_grant_ahead_locked(crk_service *s, const key_ref *k, const key_ref *g,
                                   crk_object *go, crk_write *gw, uint64_t now,
                                   uint64_t *version_out)
{
    int rc = crk_shard_reserve(k->sh);
    if (rc != 0)
        return rc;
    crk_object *n = crk_obj_new(k->key, k->len, (uint32_t)k->hash, go->nrep);
    if (n == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "put_end '%s': object record", k->key);
    n->size = gw->size;
    memcpy(crk_obj_reps(n), crk_obj_reps(go), go->nrep * sizeof(crk_replica));
    n->version = crk_next_version(s);
    n->last_access = now;
    crk_write_unlink(g->sh, gw);
    atomic_fetch_sub_explicit(&g->sh->writes, 1, memory_order_relaxed);
    gw->obj = n;
    gw->ahead = 1;
    n->write = gw;
    crk_write_push(k->sh, gw);
    crk_shard_insert(k->sh, n);
    go->write = NULL;
    go->nrep = 0;
    crk_erase_object_locked(s, g->sh, go, now);
    if (version_out != NULL)
        *version_out = n->version;
    return 0;
}

/*
 * put_end with a grant, committed ahead of the copy (docs/WIRE.md, "Commit ahead"): the
 * checks of put_end_granted_impl, but `key` becomes a write in flight on the grant's
 * replicas (reads of it wait: CR_ERR_PUT_COMMITTING) instead of a complete object, and no
 * failure touches the grant: its writer may still be writing into it (it revokes it once
 * done). Puts only, and only while key has no complete value.
 */
static int put_end_ahead_impl(crk_service *s, crk_client_id client, const char *key,
                              const char *grant, uint64_t now, uint64_t *version_out)
{
    key_ref k, g;
    int rc = grant_refs(s, key, grant, &k, &g);
    if (rc != 0)
        return rc;
    bool on_disk = s->off != NULL && crk_off_exist(s, key, k.len) == 1;
    lock_pair(k.sh, g.sh);
    crk_object *go = g.sh->slots[crk_shard_probe(g.sh, grant, g.len, (uint32_t)g.hash)].obj;
    crk_write *gw = go != NULL ? go->write : NULL;
    size_t slot = crk_shard_probe(k.sh, key, k.len, (uint32_t)k.hash);
    crk_object *o = k.sh->slots[slot].obj;
    if (!is_grant_of(go, gw, client)) {
        rc = crb_error(CR_OBJECT_NOT_FOUND,
                       "put_end '%s': grant '%s' is not a write in flight of this client "
                       "(revoked with its connection, preempted, or its segment unmounted)",
                       key, grant);
    } else if ((rc = grant_end_key_check(s, key, o, on_disk, false, now)) == 0) {
        if (o != NULL) /* a stale write in flight: preempted (erases it) */
            (void)preempt_locked(s, k.sh, o, now);
        rc = move_grant_ahead_locked(s, &k, &g, go, gw, now, version_out);
        if (rc == 0) { /* a grant's put, committed ahead */
            crk_add(s->c.granted_puts, 1);
            crk_add(s->c.ahead_puts, 1);
        }
    }
    unlock_pair(k.sh, g.sh);
    return rc;
}

/* A batch put's end committed ahead (crk_batch_put_end_ahead): key's write, this client's
 * fresh put owned by connection conn, gets its version and is committing. */
static int put_end_ahead_owned_impl(crk_service *s, crk_client_id client, uint64_t conn,
                                    const char *key, const key_ref *pre)
{
    key_ref k;
    crk_object *o;
    int rc = lock_object(s, "batch_put_end (commit ahead)", key, pre, &k, &o, NULL);
    if (rc != 0)
        return rc;
    crk_write *w = o->write;
    if (w == NULL)
        rc = crb_error(CR_INVALID_WRITE, "batch_put_end '%s' (commit ahead): no write in flight",
                       key);
    else if (!crk_id_eq(w->owner, client))
        rc = crb_error(CR_ILLEGAL_CLIENT,
                       "batch_put_end '%s' (commit ahead): the write in flight is another "
                       "client's (this one may have been preempted)",
                       key);
    else if (w->upsert || w->promotion)
        rc = crb_error(CR_INVALID_PARAMS,
                       "batch_put_end '%s' (commit ahead): only a fresh put commits ahead, not "
                       "an upsert or a disk promotion",
                       key);
    else if (conn == 0 || w->conn != conn)
        rc = crb_error(CR_INVALID_PARAMS,
                       "batch_put_end '%s' (commit ahead): the write is not owned by this "
                       "connection (its start had no \"ow\", or came on another)",
                       key);
    else if (!w->ahead) {
        o->version = crk_next_version(s);
        w->ahead = 1;
        crk_add(s->c.ahead_puts, 1);
    }
    pthread_mutex_unlock(&k.sh->mu);
    return rc;
}

static int put_revoke_impl(crk_service *s, crk_client_id client, const char *key, uint64_t now)
{
    key_ref k;
    crk_object *o;
    int rc = lock_object(s, "put_revoke", key, NULL, &k, &o, NULL);
    if (rc != 0)
        return rc;
    crk_shard *sh = k.sh;
    crk_write *w = o->write;
    if (!w) {
        rc = crb_error(CR_INVALID_WRITE, "put_revoke '%s': no write in flight", key);
        goto unlock;
    }
    if (!crk_id_eq(w->owner, client)) {
        rc = crb_error(CR_ILLEGAL_CLIENT,
                       "put_revoke '%s': the write in flight is another "
                       "client's",
                       key);
        goto unlock;
    }
    /* The owner has stopped writing: its space is free at once. */
    if (w->ahead)
        ahead_ended_locked(s, o); /* its held readers: no such object now */
    if (w->upsert) {
        crk_release_or_defer(s, sh, w->rep, w->nrep, w->size, 0, now, NULL);
        crk_write_drop(sh, w);
        if (o->nrep == 0)
            crk_erase_object_locked(s, sh, o, now);
    } else {
        crk_write_drop(sh, w);
        crk_erase_object_locked(s, sh, o, now); /* not leased: freed now */
    }
unlock:
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

/* --- reads -------------------------------------------------------------------------------- */

static int exist_impl(crk_service *s, const char *key, const key_ref *pre)
{
    key_ref k;
    int rc = key_ref_from(s, key, pre, &k);
    if (rc != 0)
        return rc;
    size_t slot = lock_and_probe(&k); /* read slots only once locked */
    crk_object *o = k.sh->slots[slot].obj;
    int found = o && (o->flags & CRK_OBJ_COMPLETE) && o->nrep > 0;
    bool committing = o && !found && o->write != NULL && o->write->ahead;
    pthread_mutex_unlock(&k.sh->mu);
    if (committing)
        return crb_error(CR_ERR_PUT_COMMITTING, "exist '%s': put committing", key);
    if (!found && s->off != NULL) /* on disk only, or being promoted back */
        found = crk_off_exist(s, key, k.len);
    return found;
}

static int get_impl(crk_service *s, const char *key, const key_ref *pre, uint64_t now,
                    crk_replica_list *out)
{
    if (!out)
        return crb_error(CR_INVALID_PARAMS, "get_replica_list: no output list");
    key_ref k;
    crk_object *o;
    int rc = lock_object(s, "get_replica_list", key, pre, &k, &o, NULL);
    if (rc == CR_OBJECT_NOT_FOUND && s->off != NULL)
        return crk_off_get(s, key, k.len, now, out); /* a disk-only key? */
    if (rc != 0)
        return rc;
    crk_shard *sh = k.sh;
    if (!(o->flags & CRK_OBJ_COMPLETE)) {
        if (s->off != NULL && o->write != NULL && o->write->promotion) {
            pthread_mutex_unlock(&sh->mu); /* being promoted: the disk copy still serves */
            return crk_off_get(s, key, k.len, now, out);
        }
        if (o->write != NULL && o->write->ahead)
            rc = crb_error(CR_ERR_PUT_COMMITTING, "get_replica_list '%s': put committing", key);
        else
            rc = crb_error(CR_REPLICA_IS_NOT_READY, "get_replica_list '%s': put in flight", key);
        goto unlock;
    }
    crk_replica *reps = crk_obj_reps(o);
    bool usable[CRK_MAX_REPLICAS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < o->nrep; i++) {
        usable[i] =
            atomic_load_explicit(&reps[i].seg->state, memory_order_acquire) == CRK_SEG_MOUNTED;
        n += usable[i];
    }
    if (n == 0) {
        rc = crb_error(CR_OBJECT_NOT_FOUND,
                       "get_replica_list '%s': every replica is on an unmounting segment", key);
        goto unlock;
    }
    uint64_t until = crk_sat_add(now, s->cfg.default_kv_lease_ttl_ms);
    if (o->lease_until <= now) { /* the lease lapsed (or never was): a new era */
        o->lease_era = o->lease_era + 1 ? o->lease_era + 1 : 1;
        o->readers = 0;
    }
    if (o->readers < CRK_READERS_MAX)
        o->readers++;
    if (until > o->lease_until)
        o->lease_until = until;
    for (uint32_t i = 0; i < o->nrep; i++)
        crk_note_horizon(reps[i].seg, until);
    if (now > o->last_access)
        o->last_access = now;
    crk_lru_move_to_tail(sh, o);
    n = 0;
    for (uint32_t i = 0; i < o->nrep; i++)
        if (usable[i])
            fill_desc(&out->r[n++], &reps[i], o->size);
    out->n = n;
    out->value_size = o->size;
    out->lease_ttl_ms = s->cfg.default_kv_lease_ttl_ms;
    out->lease_token = o->lease_era;
    out->version = o->version;
    crk_add(sh->leases_granted, 1);
unlock:
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

/* --- lease release --------------------------------------------------------------------- */

/* Give back one read of key (token = its lease era); shard unlocked. */
static void release_one(crk_service *s, const char *key, uint64_t token, uint64_t now)
{
    key_ref k;
    if (token == 0 || token > UINT32_MAX || key_ref_of(s, key, &k) != 0)
        return;
    crk_shard *sh = k.sh;
    size_t slot = lock_and_probe(&k);
    crk_object *o = sh->slots[slot].obj;
    if (o && o->lease_era == token) {
        /* Only a read of the running lease counts; a lapsed one was never
         * counted in the era that may have begun since. The lease itself
         * runs on (it still blocks remove and eviction, as Mooncake's
         * does); with no reader left, replacing or force-removing this
         * version frees its memory at once. */
        if (o->lease_until > now && o->readers > 0 && o->readers != CRK_READERS_MAX)
            o->readers--;
        crk_add(s->c.lease_releases, 1);
        goto unlock;
    }
    /* A replaced or removed version waiting in a discard entry. */
    for (crk_discard **dp = &sh->discards; *dp; dp = &(*dp)->next) {
        crk_discard *d = *dp;
        if (d->lease_era != token || d->key_hash != (uint32_t)k.hash)
            continue;
        crk_add(s->c.lease_releases, 1);
        if (d->release_at > now && d->readers > 0 && d->readers != CRK_READERS_MAX &&
            --d->readers == 0) {
            *dp = d->next;
            crk_add(s->c.early_releases, 1);
            crk_add(s->c.early_released_bytes, d->bytes * d->nrep);
            crk_discard_free(s, d);
        }
        break;
    }
unlock:
    pthread_mutex_unlock(&sh->mu);
}

void crk_release_leases(crk_service *s, const char *const *keys, const uint64_t *tokens, size_t n,
                        uint64_t now_ms)
{
    crk_add(s->c.requests[CRK_OP_RELEASE_LEASES], 1);
    crk_add(s->c.batch_items[CRK_OP_RELEASE_LEASES], n);
    for (size_t i = 0; keys && tokens && i < n; i++) {
        if (s->off != NULL && (tokens[i] >> 63)) /* a staged disk copy (offload.h) */
            crk_off_release(s, keys[i], tokens[i]);
        else
            release_one(s, keys[i], tokens[i], now_ms);
    }
}

/* --- removal ------------------------------------------------------------------------------ */

static int remove_impl(crk_service *s, const char *key, const key_ref *pre, bool force,
                       uint64_t now)
{
    key_ref k;
    crk_object *o;
    int rc = lock_object(s, "remove", key, pre, &k, &o, NULL);
    if (rc == CR_OBJECT_NOT_FOUND && s->off != NULL)
        return crk_off_remove(s, key, k.len); /* a disk-only key? */
    if (rc != 0)
        return rc;
    crk_shard *sh = k.sh;
    if (o->write && o->write->ahead && !(o->flags & CRK_OBJ_COMPLETE))
        rc = crb_error(CR_ERR_PUT_COMMITTING, "remove '%s': a put is committing", key);
    else if (o->write)
        rc = crb_error(CR_REPLICA_IS_NOT_READY, "remove '%s': a put is in flight", key);
    else if (o->lease_until > now && !force)
        rc = crb_error(CR_OBJECT_HAS_LEASE, "remove '%s': leased for %llu more ms", key,
                       (unsigned long long)(o->lease_until - now));
    else
        crk_erase_object_locked(s, sh, o, now); /* a forced, leased one is deferred */
    if (rc == 0 && s->off != NULL)
        (void)crk_off_remove(s, key, k.len); /* and its disk copy, if any */
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

/*
 * Drop key's replicas on the segment named seg (seg_len bytes; 0 = every
 * replica). Objects with a lease or a write in flight are skipped; dropped
 * space is released as crk_erase_object_locked releases it.
 */
static int replica_clear_impl(crk_service *s, const char *key, const key_ref *pre, const char *seg,
                              size_t seg_len, uint64_t now)
{
    key_ref k;
    crk_object *o;
    int rc = lock_object(s, "replica_clear", key, pre, &k, &o, NULL);
    if (rc != 0)
        return rc;
    crk_shard *sh = k.sh;
    if (o->write || !(o->flags & CRK_OBJ_COMPLETE)) {
        rc = crb_error(CR_REPLICA_IS_NOT_READY, "replica_clear '%s': a put is in flight", key);
        goto unlock;
    }
    if (o->lease_until > now) {
        rc = crb_error(CR_OBJECT_HAS_LEASE, "replica_clear '%s': leased for %llu more ms", key,
                       (unsigned long long)(o->lease_until - now));
        goto unlock;
    }
    if (seg_len == 0) {
        crk_erase_object_locked(s, sh, o, now);
        goto unlock;
    }
    /* Keep the other replicas in their order; collect the dropped ones. */
    crk_replica *reps = crk_obj_reps(o);
    crk_replica dropped[CRK_MAX_REPLICAS];
    uint32_t nd = 0, kept = 0;
    for (uint32_t i = 0; i < o->nrep; i++) {
        const crk_segment *g = reps[i].seg;
        if (g->name_len == seg_len && memcmp(g->name, seg, seg_len) == 0)
            dropped[nd++] = reps[i];
        else
            reps[kept++] = reps[i];
    }
    if (nd == 0) {
        rc = crb_error(CR_REPLICA_NOT_FOUND, "replica_clear '%s': no replica on segment '%s'", key,
                       seg);
        goto unlock;
    }
    o->nrep = (uint8_t)kept;
    crk_release_or_defer(s, sh, dropped, nd, o->size, o->lease_until, now, o);
    if (kept == 0)
        crk_erase_object_locked(s, sh, o, now); /* nothing left to release */
unlock:
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

/* May a removal scan take o (shard locked)? Never with a write in flight;
 * a leased object only with force. */
static bool removable(const crk_object *o, bool force, uint64_t now)
{
    return !o->write && (force || o->lease_until <= now);
}

/* Is o in the tenant namespace ns (length nl; master/tenants.h)? ns NULL:
 * every namespace; "" (nl 0): the default tenant's keys only. */
static bool in_namespace(const crk_object *o, const char *ns, size_t nl)
{
    if (ns == NULL)
        return true;
    if (nl == 0)
        return o->key_len == 0 || o->key[0] != CRK_TENANT_MARK;
    return o->key_len >= nl && memcmp(o->key, ns, nl) == 0;
}

/* remove_all: every removable object of the namespace, one shard at a time. */
static int remove_every(crk_service *s, const char *ns, size_t nl, bool force, uint64_t now,
                        uint64_t *count)
{
    for (size_t i = 0; i < CRK_NUM_SHARDS; i++) {
        if (atomic_load_explicit(&s->stopping, memory_order_relaxed))
            return crb_error(CR_ERR_SHUTDOWN,
                             "remove_all: the master is shutting down after "
                             "removing %llu keys",
                             (unsigned long long)*count);
        crk_shard *sh = &s->shards[i];
        pthread_mutex_lock(&sh->mu);
        /* As in crk_purge_segment_locked: after an erase slot j is examined
         * again; an entry seen twice is judged the same way twice. */
        for (size_t j = 0; j < sh->nslots;) {
            crk_object *o = sh->slots[j].obj;
            if (!o || !removable(o, force, now) || !in_namespace(o, ns, nl)) {
                j++;
                continue;
            }
            crk_erase_object_locked(s, sh, o, now); /* slot j now holds a later entry */
            (*count)++;
        }
        pthread_mutex_unlock(&sh->mu);
    }
    if (s->off != NULL) /* disk copies: of the objects just erased and of disk-only keys */
        *count += crk_off_remove_all(s, ns, nl);
    return 0;
}

/* A copied key of a regex scan: slot hash, length, bytes at `off` in the buffer. */
typedef struct scan_key {
    uint32_t hash;
    uint16_t len;
    bool matched;
    size_t off;
} scan_key;

typedef struct scan_buf {
    scan_key *keys;
    size_t n, cap;
    char *bytes;
    size_t len, bytes_cap;
} scan_buf;

static int scan_add(scan_buf *b, const crk_object *o)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        scan_key *k = crk_realloc(b->keys, cap * sizeof(*k));
        if (!k)
            return CR_ERR_NO_MEMORY;
        b->keys = k;
        b->cap = cap;
    }
    if (b->len + o->key_len > b->bytes_cap) {
        size_t cap = b->bytes_cap ? b->bytes_cap * 2 : 16384;
        while (cap < b->len + o->key_len)
            cap *= 2;
        char *p = crk_realloc(b->bytes, cap);
        if (!p)
            return CR_ERR_NO_MEMORY;
        b->bytes = p;
        b->bytes_cap = cap;
    }
    memcpy(b->bytes + b->len, o->key, o->key_len);
    b->keys[b->n++] = (scan_key){o->hash, o->key_len, false, b->len};
    b->len += o->key_len;
    return 0;
}

/*
 * remove_by_regex over one shard: copy the keys of the removable objects
 * under the lock, match them with the lock released (a pattern's cost never
 * delays another request on the shard), then remove the matched keys that
 * are still removable under the lock again. A key present throughout is
 * seen: the copy is of the whole shard at one moment.
 */
static int remove_matching_in(crk_service *s, crk_shard *sh, const char *ns, size_t nl,
                              crk_regex *re, bool force, uint64_t now, scan_buf *b, uint64_t *count)
{
    b->n = b->len = 0;
    int rc = 0;
    pthread_mutex_lock(&sh->mu);
    for (size_t j = 0; j < sh->nslots && rc == 0; j++) {
        crk_object *o = sh->slots[j].obj;
        if (o && removable(o, force, now) && in_namespace(o, ns, nl))
            rc = scan_add(b, o);
    }
    pthread_mutex_unlock(&sh->mu);
    if (rc != 0)
        return crb_error(rc, "remove_by_regex: copying the keys of a shard");
    size_t matched = 0;
    for (size_t i = 0; i < b->n; i++) {
        if ((i & 255) == 0 && atomic_load_explicit(&s->stopping, memory_order_relaxed))
            return crb_error(CR_ERR_SHUTDOWN,
                             "remove_by_regex: the master is shutting down after removing %llu "
                             "keys",
                             (unsigned long long)*count);
        /* the key as its tenant knows it: without the namespace prefix */
        rc = crk_regex_match(re, b->bytes + b->keys[i].off + nl, b->keys[i].len - nl);
        if (rc < 0)
            return crb_error(rc, "remove_by_regex stopped after removing %llu keys: %s",
                             (unsigned long long)*count, cr_last_error_message());
        b->keys[i].matched = rc == 1;
        matched += rc == 1;
    }
    if (matched == 0)
        return 0;
    pthread_mutex_lock(&sh->mu);
    for (size_t i = 0; i < b->n; i++) {
        if (!b->keys[i].matched)
            continue;
        const char *key = b->bytes + b->keys[i].off;
        size_t slot = crk_shard_probe(sh, key, b->keys[i].len, b->keys[i].hash);
        crk_object *o = sh->slots[slot].obj;
        if (o && removable(o, force, now)) {
            crk_erase_object_locked(s, sh, o, now);
            if (s->off != NULL)
                (void)crk_off_remove(s, key, b->keys[i].len); /* its disk copy too */
            (*count)++;
        }
    }
    pthread_mutex_unlock(&sh->mu);
    return 0;
}

/* --- public single-key calls ------------------------------------------------------------- */

static int counted(crk_service *s, int op, int rc)
{
    crk_add(s->c.requests[op], 1);
    if (rc < 0)
        crk_add(s->c.failures[op], 1);
    return rc;
}

int crk_put_start(crk_service *s, crk_client_id client, const char *key, uint64_t value_size,
                  const crk_replicate_config *cfg, uint64_t now_ms, crk_replica_list *out)
{
    return counted(s, CRK_OP_PUT_START,
                   put_start_impl(s, client, key, NULL, value_size, cfg, now_ms, false, out));
}

int crk_upsert_start(crk_service *s, crk_client_id client, const char *key, uint64_t value_size,
                     const crk_replicate_config *cfg, uint64_t now_ms, crk_replica_list *out)
{
    return counted(s, CRK_OP_UPSERT_START,
                   put_start_impl(s, client, key, NULL, value_size, cfg, now_ms, true, out));
}

int crk_put_end(crk_service *s, crk_client_id client, const char *key, uint64_t now_ms)
{
    return crk_put_end_versioned(s, client, key, now_ms, NULL);
}

int crk_put_end_versioned(crk_service *s, crk_client_id client, const char *key, uint64_t now_ms,
                          uint64_t *version_out)
{
    return counted(s, CRK_OP_PUT_END, put_end_impl(s, client, key, NULL, now_ms, version_out));
}

int crk_put_end_granted(crk_service *s, crk_client_id client, const char *key, const char *grant,
                        bool upsert, uint64_t now_ms, uint64_t *version_out)
{
    return counted(s, CRK_OP_PUT_END,
                   put_end_granted_impl(s, client, key, grant, upsert, now_ms, version_out));
}

int crk_put_end_ahead(crk_service *s, crk_client_id client, const char *key, const char *grant,
                      uint64_t now_ms, uint64_t *version_out)
{
    return counted(s, CRK_OP_PUT_END,
                   put_end_ahead_impl(s, client, key, grant, now_ms, version_out));
}

int crk_put_revoke(crk_service *s, crk_client_id client, const char *key, uint64_t now_ms)
{
    return counted(s, CRK_OP_PUT_REVOKE, put_revoke_impl(s, client, key, now_ms));
}

int crk_exist(crk_service *s, const char *key, uint64_t now_ms)
{
    return counted(s, CRK_OP_EXIST, exist_impl(s, key, NULL));
}

int crk_get_replica_list(crk_service *s, const char *key, uint64_t now_ms, crk_replica_list *out)
{
    return counted(s, CRK_OP_GET_REPLICA_LIST, get_impl(s, key, NULL, now_ms, out));
}

int crk_remove(crk_service *s, const char *key, bool force, uint64_t now_ms)
{
    return counted(s, CRK_OP_REMOVE, remove_impl(s, key, NULL, force, now_ms));
}

/* remove_by_regex (pattern) or remove_all (NULL) within namespace ns (NULL: all). */
static int remove_scan(crk_service *s, const char *ns, const char *pattern, bool force,
                       uint64_t now_ms, uint64_t *removed_out)
{
    size_t nl = ns != NULL ? strlen(ns) : 0;
    uint64_t n = 0;
    int rc = 0;
    if (pattern == NULL) {
        rc = remove_every(s, ns, nl, force, now_ms, &n);
        if (rc == 0 && removed_out)
            *removed_out = n;
        return counted(s, CRK_OP_REMOVE_ALL, rc);
    }
    crk_regex *re = NULL;
    rc = crk_regex_compile(pattern, &re);
    if (rc != 0)
        return counted(s, CRK_OP_REMOVE_BY_REGEX,
                       crb_error(rc, "remove_by_regex: %s", cr_last_error_message()));
    scan_buf b = {0};
    for (size_t i = 0; i < CRK_NUM_SHARDS && rc == 0; i++)
        rc = remove_matching_in(s, &s->shards[i], ns, nl, re, force, now_ms, &b, &n);
    if (rc == 0 && s->off != NULL) /* and the keys only on a holder's disk */
        rc = crk_off_remove_matching(s, ns, nl, re, &n);
    crk_free(b.keys);
    crk_free(b.bytes);
    crk_regex_free(re);
    if (rc == 0 && removed_out)
        *removed_out = n;
    return counted(s, CRK_OP_REMOVE_BY_REGEX, rc);
}

int crk_remove_by_regex(crk_service *s, const char *pattern, bool force, uint64_t now_ms,
                        uint64_t *removed_out)
{
    if (pattern == NULL)
        return counted(s, CRK_OP_REMOVE_BY_REGEX,
                       crb_error(CR_INVALID_PARAMS, "remove_by_regex: pattern is NULL"));
    return remove_scan(s, NULL, pattern, force, now_ms, removed_out);
}

int crk_remove_all(crk_service *s, bool force, uint64_t now_ms, uint64_t *removed_out)
{
    return remove_scan(s, NULL, NULL, force, now_ms, removed_out);
}

int crk_remove_in_namespace(crk_service *s, const char *prefix, const char *pattern, bool force,
                            uint64_t now_ms, uint64_t *removed_out)
{
    return remove_scan(s, prefix != NULL ? prefix : "", pattern, force, now_ms, removed_out);
}

/* --- batches ----------------------------------------------------------------------------- */

static int batch_begin_part(crk_service *s, int op, bool continued, size_t n, const void *a,
                            const void *b, const void *c, const void *d)
{
    if (!continued)
        crk_add(s->c.requests[op], 1);
    if (n > 0 && (!a || !b || !c || !d)) {
        crk_add(s->c.failures[op], 1);
        return crb_error(CR_INVALID_PARAMS, "%s: NULL array for %zu keys", crk_op_name(op), n);
    }
    crk_add(s->c.batch_items[op], n);
    return 0;
}

static int batch_begin(crk_service *s, int op, size_t n, const void *a, const void *b,
                       const void *c, const void *d)
{
    return batch_begin_part(s, op, false, n, a, b, c, d);
}

/*
 * Batches walk their keys with a prefetch PREFETCH_AHEAD keys ahead: the
 * slot a later key will probe is pulled into the cache while this key is
 * served, so the table's cache misses (the main cost of a batch on a table
 * of millions of keys) overlap instead of queueing one after another.
 */
#define PREFETCH_AHEAD 8

/* The references of a batch's next keys: each key is checked and hashed
 * once, PREFETCH_AHEAD keys before it is served (when its slot is
 * prefetched), and the operation reuses that. A key that fails the check
 * gets no reference; the operation then checks it again and reports it. */
typedef struct key_ring {
    key_ref r[PREFETCH_AHEAD + 1];
    bool ok[PREFETCH_AHEAD + 1];
} key_ring;

static void ring_fill(crk_service *s, key_ring *ring, const char *key, size_t j)
{
    size_t at = j % (PREFETCH_AHEAD + 1);
    ring->ok[at] = false;
    if (!key)
        return;
    size_t len = strnlen(key, CRK_MAX_KEY_LEN + 1);
    if (len == 0 || len > CRK_MAX_KEY_LEN)
        return;
    uint64_t h = crk_key_hash(s, key, len);
    crk_shard *sh = shard_of(s, h);
    ring->r[at] = (key_ref){key, len, h, sh};
    ring->ok[at] = true;
    crk_slot *slots = atomic_load_explicit(&sh->hint_slots, CRK_RELAXED);
    size_t mask = atomic_load_explicit(&sh->hint_mask, CRK_RELAXED);
    __builtin_prefetch(&slots[(uint32_t)h & mask]);
}

/* Prepare key i + PREFETCH_AHEAD of n (the first call the first ones too)
 * and return key i's reference, or NULL to have it checked again. */
static const key_ref *prefetch_ahead(crk_service *s, key_ring *ring, const char *const *keys,
                                     size_t i, size_t n)
{
    if (i == 0)
        for (size_t j = 0; j < PREFETCH_AHEAD && j < n; j++)
            ring_fill(s, ring, keys[j], j);
    if (i + PREFETCH_AHEAD < n)
        ring_fill(s, ring, keys[i + PREFETCH_AHEAD], i + PREFETCH_AHEAD);
    size_t at = i % (PREFETCH_AHEAD + 1);
    return ring->ok[at] ? &ring->r[at] : NULL;
}

static void batch_item(crk_service *s, int op, int rc)
{
    if (rc < 0)
        crk_add(s->c.batch_failed_items[op], 1);
}

int crk_batch_exist(crk_service *s, const char *const *keys, size_t n, uint64_t now_ms,
                    int *results)
{
    int rc = batch_begin(s, CRK_OP_BATCH_EXIST, n, keys, results, results, results);
    key_ring ring;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const key_ref *pre = prefetch_ahead(s, &ring, keys, i, n);
        batch_item(s, CRK_OP_BATCH_EXIST, results[i] = exist_impl(s, keys[i], pre));
    }
    return rc;
}

int crk_batch_get_replica_list(crk_service *s, const char *const *keys, size_t n, uint64_t now_ms,
                               int *results, crk_replica_list *lists, bool continued)
{
    int rc = batch_begin_part(s, CRK_OP_BATCH_GET_REPLICA_LIST, continued, n, keys, results, lists,
                              lists);
    key_ring ring;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const key_ref *pre = prefetch_ahead(s, &ring, keys, i, n);
        batch_item(s, CRK_OP_BATCH_GET_REPLICA_LIST,
                   results[i] = get_impl(s, keys[i], pre, now_ms, &lists[i]));
    }
    return rc;
}

static int batch_start(crk_service *s, int op, bool upsert, crk_client_id client,
                       const char *const *keys, const uint64_t *sizes, size_t n,
                       const crk_replicate_config *cfg, uint64_t now, int *results,
                       crk_replica_list *lists, bool continued)
{
    int rc = batch_begin_part(s, op, continued, n, keys, sizes, results, lists);
    key_ring ring;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const key_ref *pre = prefetch_ahead(s, &ring, keys, i, n);
        batch_item(s, op,
                   results[i] = put_start_impl(s, client, keys[i], pre, sizes[i], cfg, now, upsert,
                                               &lists[i]));
    }
    return rc;
}

int crk_batch_put_start(crk_service *s, crk_client_id client, const char *const *keys,
                        const uint64_t *value_sizes, size_t n, const crk_replicate_config *cfg,
                        uint64_t now_ms, int *results, crk_replica_list *lists, bool continued)
{
    return batch_start(s, CRK_OP_BATCH_PUT_START, false, client, keys, value_sizes, n, cfg, now_ms,
                       results, lists, continued);
}

int crk_batch_upsert_start(crk_service *s, crk_client_id client, const char *const *keys,
                           const uint64_t *value_sizes, size_t n, const crk_replicate_config *cfg,
                           uint64_t now_ms, int *results, crk_replica_list *lists, bool continued)
{
    return batch_start(s, CRK_OP_BATCH_UPSERT_START, true, client, keys, value_sizes, n, cfg,
                       now_ms, results, lists, continued);
}

int crk_batch_put_end(crk_service *s, crk_client_id client, const char *const *keys, size_t n,
                      uint64_t now_ms, int *results)
{
    int rc = batch_begin(s, CRK_OP_BATCH_PUT_END, n, keys, results, results, results);
    key_ring ring;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const key_ref *pre = prefetch_ahead(s, &ring, keys, i, n);
        batch_item(s, CRK_OP_BATCH_PUT_END,
                   results[i] = put_end_impl(s, client, keys[i], pre, now_ms, NULL));
    }
    return rc;
}

int crk_batch_put_end_ahead(crk_service *s, crk_client_id client, uint64_t conn,
                            const char *const *keys, size_t n, uint64_t now_ms, int *results)
{
    (void)now_ms;
    int rc = batch_begin(s, CRK_OP_BATCH_PUT_END, n, keys, results, results, results);
    key_ring ring;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const key_ref *pre = prefetch_ahead(s, &ring, keys, i, n);
        batch_item(s, CRK_OP_BATCH_PUT_END,
                   results[i] = put_end_ahead_owned_impl(s, client, conn, keys[i], pre));
    }
    return rc;
}

int crk_batch_put_revoke(crk_service *s, crk_client_id client, const char *const *keys, size_t n,
                         uint64_t now_ms, int *results)
{
    int rc = batch_begin(s, CRK_OP_BATCH_PUT_REVOKE, n, keys, results, results, results);
    for (size_t i = 0; rc == 0 && i < n; i++)
        batch_item(s, CRK_OP_BATCH_PUT_REVOKE,
                   results[i] = put_revoke_impl(s, client, keys[i], now_ms));
    return rc;
}

int crk_batch_remove(crk_service *s, const char *const *keys, size_t n, bool force, uint64_t now_ms,
                     int *results)
{
    int rc = batch_begin(s, CRK_OP_BATCH_REMOVE, n, keys, results, results, results);
    key_ring ring;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const key_ref *pre = prefetch_ahead(s, &ring, keys, i, n);
        batch_item(s, CRK_OP_BATCH_REMOVE,
                   results[i] = remove_impl(s, keys[i], pre, force, now_ms));
    }
    return rc;
}

int crk_batch_replica_clear(crk_service *s, crk_client_id client, const char *const *keys, size_t n,
                            const char *segment, uint64_t now_ms, int *results)
{
    if (!crk_id_valid(client)) {
        crk_add(s->c.requests[CRK_OP_BATCH_REPLICA_CLEAR], 1);
        crk_add(s->c.failures[CRK_OP_BATCH_REPLICA_CLEAR], 1);
        return crb_error(CR_ILLEGAL_CLIENT, "batch_replica_clear: the zero client id is not valid");
    }
    int rc = batch_begin(s, CRK_OP_BATCH_REPLICA_CLEAR, n, keys, results, results, results);
    size_t seg_len = segment ? strlen(segment) : 0;
    key_ring ring;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const key_ref *pre = prefetch_ahead(s, &ring, keys, i, n);
        batch_item(s, CRK_OP_BATCH_REPLICA_CLEAR,
                   results[i] = replica_clear_impl(s, keys[i], pre, segment, seg_len, now_ms));
    }
    return rc;
}

/* --- operator query ---------------------------------------------------------------------- */

int crk_query_key(crk_service *s, const char *key, uint64_t now_ms, crk_key_info *out)
{
    if (!out)
        return crb_error(CR_INVALID_PARAMS, "query_key: no output");
    key_ref k;
    crk_object *o;
    int rc = lock_object(s, "query_key", key, NULL, &k, &o, NULL);
    if (rc == CR_OBJECT_NOT_FOUND && s->off != NULL)
        return crk_off_query(s, key, k.len, now_ms, out); /* a disk-only key? */
    if (rc != 0)
        return rc;
    crk_shard *sh = k.sh;
    out->on_disk = out->disk_holder_live = false;
    out->value_size = o->size;
    out->complete = (o->flags & CRK_OBJ_COMPLETE) != 0;
    out->write_in_flight = o->write != NULL;
    out->committing = !out->complete && o->write != NULL && o->write->ahead;
    out->hard_pinned = (o->flags & CRK_OBJ_HARD_PIN) != 0;
    out->soft_pinned = (o->flags & CRK_OBJ_SOFT_PIN) && o->soft_pin_until > now_ms;
    out->lease_until_ms = o->lease_until;
    out->soft_pin_until_ms = (o->flags & CRK_OBJ_SOFT_PIN) ? o->soft_pin_until : 0;
    out->replicas.value_size = o->size;
    out->replicas.lease_ttl_ms = 0;
    out->replicas.lease_token = 0;
    crk_replica *reps = crk_obj_reps(o);
    out->replicas.n = o->nrep;
    for (uint32_t i = 0; i < o->nrep; i++)
        fill_desc(&out->replicas.r[i], &reps[i], o->size);
    pthread_mutex_unlock(&sh->mu);
    return 0;
}
