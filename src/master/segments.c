/*
 * segments.c - the segment table: mount, remount, unmount, the restart
 * fence, and replica placement.
 *
 * The table is a name-hash of segments plus a dense array (for sampling and
 * iteration) under seg_lock (a rwlock). Each segment has its own offset
 * allocator under its own mutex, so placements on different segments run in
 * parallel under the shared read lock.
 *
 * Unmount is two-phase. Begin (seg_lock held for writing): mark the segment
 * unmounting; from then on no allocation succeeds in it and readers skip its
 * replicas. Finish (no global lock): scan the shards one at a time, removing
 * every replica on the segment (objects left with none are erased), then
 * take seg_lock for writing to unlink and free the segment. A placement holds
 * seg_lock for reading while it uses segment pointers, and a replica is only
 * touched under its shard lock, which the scan also takes, so nothing can
 * reach the segment once it is freed.
 *
 * The fence. Every segment records `horizon`: the latest time at which a
 * reader (lease) or a writer (in-flight put, which may write until its start
 * + put_start_release_timeout) may still touch its memory on the strength of
 * a descriptor this master handed out. When a segment is unmounted while its
 * horizon is in the future, a tombstone remembers the name and the horizon;
 * a later mount of the same name gets `fence_until = horizon` and refuses all
 * allocations until then. A REMOUNT (the client says: this memory may hold
 * replicas of a previous master instance) is additionally fenced until
 * service start + restart_fence_ms, which covers every lease that previous
 * instance could have granted. Placement skips fenced segments, so no reader
 * holding an old address can ever be handed bytes of a newer object.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "master/internal.h"
#include "master/mem.h"
#include "master/rng.h"

/* --- table helpers (seg_lock held) ----------------------------------------- */

static size_t seg_bucket(const crk_service *s, const char *name, size_t len)
{
    return (size_t)crk_key_hash(s, name, len) & (s->seg_nbuckets - 1);
}

static crk_segment *seg_find_locked(crk_service *s, const char *name, size_t len)
{
    for (crk_segment *g = s->seg_buckets[seg_bucket(s, name, len)]; g; g = g->hnext)
        if (g->name_len == len && memcmp(g->name, name, len) == 0)
            return g;
    return NULL;
}

static void seg_grow_buckets_locked(crk_service *s)
{
    size_t nb = s->seg_nbuckets * 2;
    crk_segment **b = crk_calloc(nb, sizeof(*b));
    if (!b)
        return; /* longer chains, still correct */
    crk_segment **old = s->seg_buckets;
    size_t old_n = s->seg_nbuckets;
    s->seg_buckets = b;
    s->seg_nbuckets = nb;
    for (size_t i = 0; i < old_n; i++) {
        crk_segment *g = old[i];
        while (g) {
            crk_segment *next = g->hnext;
            size_t j = seg_bucket(s, g->name, g->name_len);
            g->hnext = b[j];
            b[j] = g;
            g = next;
        }
    }
    crk_free(old);
}

static void seg_unlink_locked(crk_service *s, crk_segment *seg)
{
    crk_segment **pp = &s->seg_buckets[seg_bucket(s, seg->name, seg->name_len)];
    while (*pp && *pp != seg)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = seg->hnext;
    size_t last = s->nsegs - 1;
    if (seg->dense != last) {
        s->segs[seg->dense] = s->segs[last];
        s->segs[seg->dense]->dense = seg->dense;
    }
    s->nsegs--;
}

static void seg_destroy(crk_segment *seg)
{
    crb_oa_destroy(seg->oa);
    pthread_mutex_destroy(&seg->mu);
    crk_free(seg);
}

/* --- tombstones (seg_lock held for writing) ---------------------------------- */

static crk_tomb **tomb_find_locked(crk_service *s, const char *name)
{
    crk_tomb **pp = &s->tombs;
    while (*pp && strcmp((*pp)->name, name) != 0)
        pp = &(*pp)->next;
    return pp;
}

/*
 * The fence a new mount of `name` over [base, base + size) inherits from
 * its tombstone: the tombstone's horizon if the ranges overlap (the tomb is
 * then taken: the new segment's own horizon carries it on), else 0 and the
 * tomb stays for a later mount that does overlap.
 */
static uint64_t tomb_take_locked(crk_service *s, const char *name, uint64_t base, uint64_t size)
{
    crk_tomb **pp = tomb_find_locked(s, name);
    if (!*pp)
        return 0;
    crk_tomb *t = *pp;
    uint64_t end = base + size;
    if (end <= t->base || base >= t->end)
        return 0;
    uint64_t h = t->horizon;
    *pp = t->next;
    crk_free(t);
    return h;
}

static void tomb_put_locked(crk_service *s, const crk_segment *seg, uint64_t horizon)
{
    uint64_t end = seg->base + seg->size;
    crk_tomb **pp = tomb_find_locked(s, seg->name);
    if (*pp) {
        crk_tomb *t = *pp;
        if (horizon > t->horizon)
            t->horizon = horizon;
        if (seg->base < t->base)
            t->base = seg->base;
        if (end > t->end)
            t->end = end;
        return;
    }
    crk_tomb *t = crk_malloc(sizeof(*t) + seg->name_len + 1);
    if (!t) {
        crb_log(CRB_LOG_ERROR, "master: out of memory keeping the fence of segment '%s'",
                seg->name);
        return;
    }
    t->horizon = horizon;
    t->base = seg->base;
    t->end = end;
    memcpy(t->name, seg->name, seg->name_len + 1);
    t->next = s->tombs;
    s->tombs = t;
}

void crk_prune_tombs(crk_service *s, uint64_t now)
{
    pthread_rwlock_rdlock(&s->seg_lock);
    bool any = false;
    for (crk_tomb *t = s->tombs; t; t = t->next)
        if (t->horizon <= now)
            any = true;
    pthread_rwlock_unlock(&s->seg_lock);
    if (!any)
        return;
    pthread_rwlock_wrlock(&s->seg_lock);
    crk_tomb **pp = &s->tombs;
    while (*pp) {
        crk_tomb *t = *pp;
        if (t->horizon <= now) {
            *pp = t->next;
            crk_free(t);
        } else {
            pp = &t->next;
        }
    }
    pthread_rwlock_unlock(&s->seg_lock);
}

/* --- mount ----------------------------------------------------------------------- */

static int validate_spec(const crk_service *s, const crk_segment_spec *spec, size_t *len_out)
{
    if (!spec || !spec->name)
        return crb_error(CR_INVALID_PARAMS, "mount: segment spec or name is NULL");
    size_t len = strnlen(spec->name, CRK_MAX_SEGMENT_NAME + 1);
    if (len == 0 || len > CRK_MAX_SEGMENT_NAME)
        return crb_error(CR_INVALID_PARAMS, "mount: segment name length %zu is not in 1..%d", len,
                         CRK_MAX_SEGMENT_NAME);
    if (spec->size < s->cfg.alloc_alignment)
        return crb_error(
            CR_INVALID_PARAMS, "mount: segment '%s' size %llu is below the alignment %llu",
            spec->name, (unsigned long long)spec->size, (unsigned long long)s->cfg.alloc_alignment);
    if (spec->base > UINT64_MAX - spec->size)
        return crb_error(CR_INVALID_PARAMS, "mount: segment '%s' base + size overflows",
                         spec->name);
    *len_out = len;
    return 0;
}

/* Mount one segment for client record cl; clients_lock and seg_lock (write)
 * held. *epoch_out: 0, or the epoch the new segment keeps (a restore). */
static int mount_one_locked(crk_service *s, crk_client *cl, const crk_segment_spec *spec,
                            size_t len, bool remount, uint64_t now, uint64_t *epoch_out)
{
    crk_client_id client = cl->id;
    crk_segment *old = seg_find_locked(s, spec->name, len);
    if (old) {
        if (atomic_load(&old->state) != CRK_SEG_MOUNTED)
            return crb_error(CR_UNAVAILABLE_IN_CURRENT_STATUS,
                             "mount: segment '%s' is being unmounted; retry", spec->name);
        if (!crk_id_eq(old->owner, client) || old->base != spec->base || old->size != spec->size)
            return crb_error(
                CR_SEGMENT_ALREADY_EXISTS, "mount: segment '%s' is already mounted %s", spec->name,
                crk_id_eq(old->owner, client) ? "with a different range" : "by another client");
        *epoch_out = old->epoch; /* idempotent */
        return 0;
    }

    crk_segment *seg = crk_calloc(1, sizeof(*seg) + len + 1);
    if (!seg)
        return crb_error(CR_ERR_NO_MEMORY, "mount: segment '%s'", spec->name);
    int rc = crb_oa_create(spec->size, s->cfg.alloc_alignment, &crk_counted_heap, &seg->oa);
    if (rc != 0)
        goto undo_seg;
    if (pthread_mutex_init(&seg->mu, NULL) != 0) {
        rc = crb_error(CR_ERR_NO_MEMORY, "mount: segment '%s' mutex", spec->name);
        goto undo_oa;
    }
    if (s->nsegs == s->segs_cap) {
        size_t cap = s->segs_cap ? s->segs_cap * 2 : 16;
        crk_segment **grown = crk_realloc(s->segs, cap * sizeof(*grown));
        if (!grown) {
            rc = crb_error(CR_ERR_NO_MEMORY, "mount: segment array of %zu", cap);
            goto undo_mutex;
        }
        s->segs = grown;
        s->segs_cap = cap;
    }
    memcpy(seg->name, spec->name, len);
    seg->name[len] = '\0';
    seg->name_len = (uint32_t)len;
    seg->owner = client;
    seg->base = spec->base;
    seg->size = spec->size;
    seg->capacity = crb_oa_capacity(seg->oa);
    /* *epoch_out in: an epoch to keep (an HA promotion restores its segments) */
    seg->epoch = *epoch_out != 0 ? *epoch_out
                                 : s->cfg.epoch_base + atomic_fetch_add(&s->epoch_counter, 1) + 1;
    uint64_t fence = tomb_take_locked(s, seg->name, spec->base, spec->size);
    seg->fence_reason = fence > now ? CRK_FENCE_TOMB : CRK_FENCE_NONE;
    uint64_t restart_end = crk_sat_add(s->start_ms, s->cfg.restart_fence_ms);
    if (remount && restart_end > fence && restart_end > now) {
        fence = restart_end;
        seg->fence_reason = CRK_FENCE_RESTART;
    }
    seg->fence_until = fence > now ? fence : 0;
    if (seg->fence_until > cl->fence_until)
        cl->fence_until = seg->fence_until;
    atomic_init(&seg->state, CRK_SEG_MOUNTED);
    atomic_init(&seg->used, 0);
    atomic_init(&seg->horizon, seg->fence_until);
    atomic_init(&seg->orphan, false); /* mounted over a connection of its owner */

    size_t b = seg_bucket(s, seg->name, len);
    seg->hnext = s->seg_buckets[b];
    s->seg_buckets[b] = seg;
    seg->dense = (uint32_t)s->nsegs;
    s->segs[s->nsegs++] = seg;
    if (s->nsegs > s->seg_nbuckets)
        seg_grow_buckets_locked(s);
    crk_add(s->c.capacity, seg->capacity);
    if (seg->fence_until)
        crb_log(CRB_LOG_INFO,
                "master: %s segment '%s' (%llu bytes, epoch %llu), fenced for %llu ms: %s",
                remount ? "remounted" : "mounted", seg->name, (unsigned long long)seg->size,
                (unsigned long long)seg->epoch, (unsigned long long)(seg->fence_until - now),
                seg->fence_reason == CRK_FENCE_RESTART
                    ? "the previous master instance may have granted leases on it"
                    : "reads or writes of its name's previous memory may still be running");
    else
        crb_log(CRB_LOG_INFO, "master: %s segment '%s' (%llu bytes, epoch %llu)",
                remount ? "remounted" : "mounted", seg->name, (unsigned long long)seg->size,
                (unsigned long long)seg->epoch);
    *epoch_out = seg->epoch;
    return 0;

undo_mutex:
    pthread_mutex_destroy(&seg->mu);
undo_oa:
    crb_oa_destroy(seg->oa);
undo_seg:
    crk_free(seg);
    return rc;
}

int crk_mount_segment(crk_service *s, crk_client_id client, const crk_segment_spec *seg,
                      uint64_t now_ms, uint64_t *epoch_out)
{
    crk_add(s->c.requests[CRK_OP_MOUNT], 1);
    size_t len = 0;
    int rc;
    if (!crk_id_valid(client)) {
        rc = crb_error(CR_ILLEGAL_CLIENT, "mount: the zero client id is not valid");
        goto out;
    }
    rc = validate_spec(s, seg, &len);
    if (rc != 0)
        goto out;
    uint64_t epoch = 0;
    pthread_mutex_lock(&s->clients_lock);
    crk_client *cl = NULL;
    rc = crk_client_touch_locked(s, client, now_ms, &cl);
    if (rc == 0) {
        pthread_rwlock_wrlock(&s->seg_lock);
        rc = mount_one_locked(s, cl, seg, len, false, now_ms, &epoch);
        pthread_rwlock_unlock(&s->seg_lock);
        if (rc != 0)
            cl->need_remount = true; /* its heartbeat says NEED_REMOUNT until one works */
    }
    pthread_mutex_unlock(&s->clients_lock);
    if (rc == 0 && epoch_out)
        *epoch_out = epoch;
out:
    if (rc != 0)
        crk_add(s->c.failures[CRK_OP_MOUNT], 1);
    return rc;
}

int crk_remount_segments(crk_service *s, crk_client_id client, const crk_segment_spec *segs,
                         size_t n, uint64_t now_ms, int *results)
{
    crk_add(s->c.requests[CRK_OP_REMOUNT], 1);
    int first = 0;
    if (!crk_id_valid(client)) {
        first = crb_error(CR_ILLEGAL_CLIENT, "remount: the zero client id is not valid");
        goto out;
    }
    if (n > 0 && !segs) {
        first = crb_error(CR_INVALID_PARAMS, "remount: %zu segments but no array", n);
        goto out;
    }
    pthread_mutex_lock(&s->clients_lock);
    crk_client *cl = NULL;
    first = crk_client_touch_locked(s, client, now_ms, &cl);
    if (first == 0) {
        pthread_rwlock_wrlock(&s->seg_lock);
        for (size_t i = 0; i < n; i++) {
            size_t len = 0;
            uint64_t epoch = 0;
            int rc = validate_spec(s, &segs[i], &len);
            if (rc == 0)
                rc = mount_one_locked(s, cl, &segs[i], len, true, now_ms, &epoch);
            if (results)
                results[i] = rc;
            if (rc != 0 && first == 0)
                first = rc;
        }
        pthread_rwlock_unlock(&s->seg_lock);
        /* The remount lists all of the client's segments: it needs another
         * one exactly when one of them failed. */
        cl->need_remount = first != 0;
    }
    pthread_mutex_unlock(&s->clients_lock);
out:
    if (first != 0)
        crk_add(s->c.failures[CRK_OP_REMOUNT], 1);
    return first;
}

int crk_restore_segment(crk_service *s, crk_client_id owner, const crk_segment_spec *spec,
                        uint64_t epoch, uint64_t now_ms, crk_segment **out)
{
    size_t len = 0;
    int rc = validate_spec(s, spec, &len);
    if (rc != 0 || !crk_id_valid(owner) || epoch == 0)
        return rc != 0 ? rc : crb_error(CR_INVALID_PARAMS, "restore: segment '%s'", spec->name);
    pthread_mutex_lock(&s->clients_lock);
    crk_client *cl = NULL;
    rc = crk_client_touch_locked(s, owner, now_ms, &cl);
    if (rc == 0) {
        pthread_rwlock_wrlock(&s->seg_lock);
        uint64_t e = epoch;
        rc = mount_one_locked(s, cl, spec, len, false, now_ms, &e);
        if (rc == 0 && e != epoch)
            rc = crb_error(CR_SEGMENT_ALREADY_EXISTS, "restore: segment '%s' exists", spec->name);
        if (rc == 0)
            *out = seg_find_locked(s, spec->name, len);
        uint64_t counter = epoch > s->cfg.epoch_base ? epoch - s->cfg.epoch_base : 0;
        if (atomic_load(&s->epoch_counter) < counter) /* later mounts get larger epochs */
            atomic_store(&s->epoch_counter, counter);
        pthread_rwlock_unlock(&s->seg_lock);
    }
    pthread_mutex_unlock(&s->clients_lock);
    return rc;
}

/* --- unmount ------------------------------------------------------------------ */

int crk_unmount_begin_locked(crk_service *s, crk_segment *seg)
{
    if (atomic_load(&seg->state) == CRK_SEG_UNMOUNTING)
        return 1;
    pthread_mutex_lock(&seg->mu);
    atomic_store(&seg->state, CRK_SEG_UNMOUNTING);
    pthread_mutex_unlock(&seg->mu);
    return 0;
}

void crk_unmount_finish(crk_service *s, crk_segment *seg, uint64_t now)
{
    uint64_t writers = 0;
    for (size_t i = 0; i < CRK_NUM_SHARDS; i++) {
        crk_shard *sh = &s->shards[i];
        pthread_mutex_lock(&sh->mu);
        uint64_t w = crk_purge_segment_locked(s, sh, seg);
        pthread_mutex_unlock(&sh->mu);
        if (w > writers)
            writers = w;
    }
    /* Every lease on the segment was noted before the scan passed its shard. */
    uint64_t horizon = atomic_load(&seg->horizon);
    if (writers > horizon)
        horizon = writers;
    if (seg->fence_until > horizon)
        horizon = seg->fence_until;

    pthread_rwlock_wrlock(&s->seg_lock);
    seg_unlink_locked(s, seg);
    if (s->ha_unmounted != NULL) /* HA: standbys forget it (master/ha_repl.c) */
        s->ha_unmounted(s->ha_ctx, seg);
    if (horizon > now)
        tomb_put_locked(s, seg, horizon);
    pthread_rwlock_unlock(&s->seg_lock);

    pthread_mutex_lock(&seg->mu);
    crk_sub(s->c.capacity, seg->capacity);
    pthread_mutex_unlock(&seg->mu);
    crb_log(CRB_LOG_INFO, "master: unmounted segment '%s' (epoch %llu)%s", seg->name,
            (unsigned long long)seg->epoch, horizon > now ? "; name fenced" : "");
    seg_destroy(seg);
}

int crk_unmount_segment(crk_service *s, crk_client_id client, const char *name, uint64_t now_ms)
{
    crk_add(s->c.requests[CRK_OP_UNMOUNT], 1);
    int rc = 0;
    if (!name) {
        rc = crb_error(CR_INVALID_PARAMS, "unmount: segment name is NULL");
        goto out;
    }
    size_t len = strnlen(name, CRK_MAX_SEGMENT_NAME + 1);
    pthread_rwlock_wrlock(&s->seg_lock);
    crk_segment *seg = len <= CRK_MAX_SEGMENT_NAME ? seg_find_locked(s, name, len) : NULL;
    if (!seg) {
        pthread_rwlock_unlock(&s->seg_lock);
        goto out; /* idempotent */
    }
    if (!crk_id_eq(seg->owner, client)) {
        pthread_rwlock_unlock(&s->seg_lock);
        rc = crb_error(CR_ILLEGAL_CLIENT, "unmount: segment '%s' belongs to another client", name);
        goto out;
    }
    int busy = crk_unmount_begin_locked(s, seg);
    pthread_rwlock_unlock(&s->seg_lock);
    if (!busy)
        crk_unmount_finish(s, seg, now_ms);
out:
    if (rc != 0)
        crk_add(s->c.failures[CRK_OP_UNMOUNT], 1);
    return rc;
}

void crk_segments_destroy(crk_service *s)
{
    for (size_t i = 0; i < s->nsegs; i++)
        seg_destroy(s->segs[i]);
    crk_free(s->segs);
    crk_free(s->seg_buckets);
    crk_tomb *t = s->tombs;
    while (t) {
        crk_tomb *next = t->next;
        crk_free(t);
        t = next;
    }
}

/* --- replicas --------------------------------------------------------------------- */

void crk_free_replica(const crk_replica *r)
{
    crk_segment *seg = r->seg;
    pthread_mutex_lock(&seg->mu);
    if (crb_oa_free(seg->oa, r->node) != 0)
        crb_log(CRB_LOG_ERROR, "master: freeing replica node %u of segment '%s' failed", r->node,
                seg->name);
    uint64_t after = crb_oa_used(seg->oa);
    atomic_store_explicit(&seg->used, after, CRK_RELAXED);
    pthread_mutex_unlock(&seg->mu);
}

void crk_note_horizon(crk_segment *seg, uint64_t until)
{
    uint64_t cur = atomic_load_explicit(&seg->horizon, CRK_RELAXED);
    while (cur < until && !atomic_compare_exchange_weak_explicit(&seg->horizon, &cur, until,
                                                                 CRK_RELAXED, CRK_RELAXED)) {
    }
}

/* --- placement (seg_lock held for reading) -------------------------------------- */

enum { ALLOC_OK, ALLOC_NO_ROOM, ALLOC_BUSY };

/* Allocate a replica in seg. With wait false a segment whose allocator
 * another thread holds answers ALLOC_BUSY instead of blocking. */
static int try_alloc(crk_segment *seg, uint64_t size, uint64_t now, bool wait, crk_replica *out)
{
    int res = ALLOC_NO_ROOM;
    if (wait)
        pthread_mutex_lock(&seg->mu);
    else if (pthread_mutex_trylock(&seg->mu) != 0)
        return ALLOC_BUSY;
    if (atomic_load(&seg->state) == CRK_SEG_MOUNTED && now >= seg->fence_until) {
        crb_oa_allocation a;
        if (crb_oa_alloc(seg->oa, size, &a) == 0) {
            out->seg = seg;
            out->offset = a.offset;
            out->node = a.node;
            atomic_store_explicit(&seg->used, crb_oa_used(seg->oa), CRK_RELAXED);
            res = ALLOC_OK;
        }
    }
    pthread_mutex_unlock(&seg->mu);
    return res;
}

static bool already_used(const crk_replica *out, uint32_t k, const crk_segment *seg)
{
    for (uint32_t i = 0; i < k; i++)
        if (out[i].seg == seg)
            return true;
    return false;
}

/* Can this segment take a replica right now (cheap pre-check, no lock)? */
static bool eligible(const crk_segment *seg, uint64_t size, uint64_t now, crk_place_info *info)
{
    if (atomic_load(&seg->state) != CRK_SEG_MOUNTED)
        return false;
    if (seg->capacity < size)
        return false;
    if (now < seg->fence_until) {
        if (!info->any_fenced || seg->fence_until < info->min_fence) {
            info->min_fence = seg->fence_until;
            info->fence_reason = seg->fence_reason;
            memcpy(info->fenced, seg->name, seg->name_len + 1);
        }
        info->any_fenced = true;
        return false;
    }
    info->any_fits = true;
    uint64_t used = atomic_load_explicit(&seg->used, CRK_RELAXED);
    return seg->capacity - used >= size;
}

static double free_ratio(const crk_segment *seg)
{
    uint64_t used = atomic_load_explicit(&seg->used, CRK_RELAXED);
    return (double)(seg->capacity - used) / (double)seg->capacity;
}

#define SAMPLE_MAX (3 * CRK_MAX_REPLICAS + 4)

/* Its owner's bound connections all closed (links.c): placed on only as a last resort. */
static bool orphaned(const crk_segment *seg)
{
    return atomic_load_explicit(&seg->orphan, CRK_RELAXED);
}

uint32_t crk_place(crk_service *s, uint64_t alloc_size, uint32_t want, const char *const *preferred,
                   size_t n_preferred, crk_client_id writer, uint64_t seed, uint64_t now,
                   crk_replica *out, crk_place_info *info)
{
    uint32_t k = 0;
    memset(info, 0, sizeof(*info));
    pthread_rwlock_rdlock(&s->seg_lock);

    /* 1. Preferred segments, in order, one replica each. */
    for (size_t p = 0; preferred && p < n_preferred && k < want; p++) {
        if (!preferred[p])
            continue;
        size_t len = strnlen(preferred[p], CRK_MAX_SEGMENT_NAME + 1);
        if (len == 0 || len > CRK_MAX_SEGMENT_NAME)
            continue;
        crk_segment *seg = seg_find_locked(s, preferred[p], len);
        if (!seg || already_used(out, k, seg) || orphaned(seg) ||
            !eligible(seg, alloc_size, now, info))
            continue;
        if (try_alloc(seg, alloc_size, now, true, &out[k]) == ALLOC_OK)
            k++;
    }

    /* 1b. local_first: the writer's own segments, one replica each. */
    if (s->cfg.allocation_strategy == CRK_ALLOC_LOCAL_FIRST)
        for (size_t i = 0; i < s->nsegs && k < want; i++) {
            crk_segment *seg = s->segs[i];
            if (!crk_id_eq(seg->owner, writer) || already_used(out, k, seg) ||
                !eligible(seg, alloc_size, now, info))
                continue;
            if (try_alloc(seg, alloc_size, now, true, &out[k]) == ALLOC_OK)
                k++;
        }

    /*
     * 2. Sample a few eligible segments starting at a random index, try them
     * by free ratio (emptiest first), so load spreads without every writer
     * piling onto the one newest, emptiest segment (Mooncake #3688).
     * A sampled segment whose allocator another thread holds is passed over
     * for the next candidate and only waited for if no other one had room,
     * so concurrent puts spread instead of queueing on the emptiest segment.
     * 3. If that is not enough, try every remaining segment once.
     */
    size_t n = s->nsegs;
    if (k < want && n > 0) {
        size_t idx = (size_t)(crk_rng_next(&s->rng, seed) % n);
        size_t scanned = 0;
        size_t goal = 3 * (size_t)(want - k);
        if (goal < 4)
            goal = 4;
        /* free_ratio_first looks at every segment and keeps the emptiest. */
        bool all = s->cfg.allocation_strategy == CRK_ALLOC_FREE_RATIO_FIRST;
        if (all || goal > SAMPLE_MAX)
            goal = SAMPLE_MAX;
        crk_segment *cand[SAMPLE_MAX];
        double ratio[SAMPLE_MAX];
        size_t nc = 0;
        while (scanned < n && (nc < goal || all)) {
            crk_segment *seg = s->segs[idx];
            idx = idx + 1 == n ? 0 : idx + 1;
            scanned++;
            if (already_used(out, k, seg) || orphaned(seg) || !eligible(seg, alloc_size, now, info))
                continue;
            /* insertion sort, descending free ratio; when full, drop the fullest */
            double r = free_ratio(seg);
            if (nc == goal) {
                if (ratio[nc - 1] >= r)
                    continue;
                nc--;
            }
            size_t j = nc++;
            while (j > 0 && ratio[j - 1] < r) {
                cand[j] = cand[j - 1];
                ratio[j] = ratio[j - 1];
                j--;
            }
            cand[j] = seg;
            ratio[j] = r;
        }
        bool busy[SAMPLE_MAX] = {false};
        size_t nbusy = 0;
        for (size_t c = 0; c < nc && k < want; c++) {
            int r = try_alloc(cand[c], alloc_size, now, false, &out[k]);
            if (r == ALLOC_OK)
                k++;
            else if (r == ALLOC_BUSY) {
                busy[c] = true;
                nbusy++;
            }
        }
        for (size_t c = 0; c < nc && k < want && nbusy > 0; c++)
            if (busy[c] && try_alloc(cand[c], alloc_size, now, true, &out[k]) == ALLOC_OK)
                k++;
        while (k < want && scanned < n) {
            crk_segment *seg = s->segs[idx];
            idx = idx + 1 == n ? 0 : idx + 1;
            scanned++;
            if (already_used(out, k, seg) || orphaned(seg) || !eligible(seg, alloc_size, now, info))
                continue;
            if (try_alloc(seg, alloc_size, now, true, &out[k]) == ALLOC_OK)
                k++;
        }
        /* 4. The last resort: segments whose owner has no connection open (links.c). */
        for (size_t i = 0; i < n && k < want; i++) {
            crk_segment *seg = s->segs[i];
            if (!orphaned(seg) || already_used(out, k, seg) ||
                !eligible(seg, alloc_size, now, info))
                continue;
            if (try_alloc(seg, alloc_size, now, true, &out[k]) == ALLOC_OK)
                k++;
        }
    }
    pthread_rwlock_unlock(&s->seg_lock);
    return k;
}

/* --- operator view ------------------------------------------------------------------ */

uint64_t crk_allocated(crk_service *s)
{
    uint64_t total = 0;
    pthread_rwlock_rdlock(&s->seg_lock);
    for (size_t i = 0; i < s->nsegs; i++)
        total += atomic_load_explicit(&s->segs[i]->used, CRK_RELAXED);
    pthread_rwlock_unlock(&s->seg_lock);
    return total;
}

int crk_list_segments(crk_service *s, crk_segment_info *out, size_t cap, size_t *total_out)
{
    if (cap > 0 && !out)
        return crb_error(CR_INVALID_PARAMS, "list segments: no output array for %zu", cap);
    pthread_rwlock_rdlock(&s->seg_lock);
    size_t n = s->nsegs;
    for (size_t i = 0; i < n && i < cap; i++) {
        crk_segment *seg = s->segs[i];
        crk_segment_info *si = &out[i];
        memset(si, 0, sizeof(*si));
        memcpy(si->name, seg->name, seg->name_len + 1);
        si->owner = seg->owner;
        si->base = seg->base;
        si->size = seg->size;
        si->capacity = seg->capacity;
        si->used = atomic_load_explicit(&seg->used, CRK_RELAXED);
        si->mount_epoch = seg->epoch;
        si->fenced_until_ms = seg->fence_until;
        si->unmounting = atomic_load(&seg->state) != CRK_SEG_MOUNTED;
    }
    pthread_rwlock_unlock(&s->seg_lock);
    if (total_out)
        *total_out = n;
    return 0;
}
