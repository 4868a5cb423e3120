/*
 * ha_restore.c - promotion: the standby's catalog (ha_catalog.h) becomes
 * the new leader's service state (docs/ha.md, "promotion").
 *
 *   1. Segments are mounted for their owners with the epochs they had
 *      (crk_restore_segment: no fence; the clients' records are created, so
 *      their pings keep getting OK).
 *   2. Every replica range (complete objects, writes in flight, the
 *      graveyard) is placed on its segment. Overlaps can exist only between
 *      a range the leader reused and an older image the stream never
 *      retracted (an evicted key: eviction is not logged); the image logged
 *      later wins (the leader allocates a range only after freeing it), and
 *      graveyard ranges lose to every live one.
 *   3. Each segment's allocator is rebuilt at exactly those offsets: from a
 *      fresh allocator, gaps are taken by filler allocations, each range is
 *      allocated in address order (the allocator serves a fresh block front
 *      first), and the fillers are freed.
 *   4. Complete objects are inserted (pins and soft-pin deadlines kept).
 *      Writes in flight are fenced: the object is not created, their ranges
 *      become deferred releases (freed after put_start_release_timeout), so
 *      their put_end fails and no reader sees half a value while the old
 *      writer may still be writing. Graveyard ranges are deferred releases
 *      until their deadlines (reads granted by the old leader may run).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "master/ha_catalog.h"
#include "master/ha_internal.h"
#include "master/internal.h"
#include "master/offload.h"
#include "master/mem.h"

enum { R_LIVE = 0, R_WRITE = 1, R_GRAVE = 2 };

typedef struct range {
    uint64_t off, bytes;
    int64_t prio; /* seq for live/write, -1 for the graveyard */
    int kind;
    size_t owner; /* key index (live/write), grave index */
    uint32_t idx; /* replica index */
    bool valid;
    uint32_t node;
    uint64_t until; /* graveyard: release no earlier than this */
} range;

typedef struct seg_rec {
    crk_segment *seg;
    uint64_t epoch;
    range *r;
    size_t n, cap;
} seg_rec;

typedef struct key_rec {
    crk_ha_entry e; /* points into the catalog */
    uint64_t seq;
    uint8_t nlive, nwrite; /* placed replicas (step 3) */
    crk_replica live[CRK_MAX_REPLICAS], write[CRK_MAX_REPLICAS];
} key_rec;

typedef struct restore {
    crk_service *s;
    uint64_t now;
    seg_rec *segs;
    size_t nsegs, segs_cap;
    key_rec *keys;
    size_t nkeys, keys_cap;
    crk_ha_grave *graves;
    size_t ngraves, graves_cap;
    int rc;
} restore;

static seg_rec *seg_of(restore *st, uint64_t epoch)
{
    for (size_t i = 0; i < st->nsegs; i++)
        if (st->segs[i].epoch == epoch)
            return &st->segs[i];
    return NULL;
}

static int add_segment(void *ctx, const crk_ha_entry *e)
{
    restore *st = ctx;
    char name[CRK_MAX_SEGMENT_NAME + 1];
    memcpy(name, e->name, e->name_len);
    name[e->name_len] = '\0';
    crk_segment_spec spec = {name, e->base, e->size};
    crk_segment *seg = NULL;
    int rc = crk_restore_segment(st->s, (crk_client_id){e->owner_hi, e->owner_lo}, &spec, e->epoch,
                                 st->now, &seg);
    if (rc < 0) {
        crb_log(CRB_LOG_ERROR, "ha: restoring segment '%s': %s", name, cr_last_error_message());
        return 0;
    }
    if (st->nsegs == st->segs_cap) {
        size_t cap = st->segs_cap ? st->segs_cap * 2 : 16;
        seg_rec *p = realloc(st->segs, cap * sizeof(*p));
        if (p == NULL) {
            st->rc = crb_error(CR_ERR_NO_MEMORY, "ha restore");
            return 1;
        }
        st->segs = p;
        st->segs_cap = cap;
    }
    st->segs[st->nsegs++] = (seg_rec){seg, e->epoch, NULL, 0, 0};
    return 0;
}

static int add_key(void *ctx, const crk_ha_entry *e, uint64_t seq)
{
    restore *st = ctx;
    if (st->nkeys == st->keys_cap) {
        size_t cap = st->keys_cap ? st->keys_cap * 2 : 1024;
        key_rec *p = realloc(st->keys, cap * sizeof(*p));
        if (p == NULL) {
            st->rc = crb_error(CR_ERR_NO_MEMORY, "ha restore");
            return 1;
        }
        st->keys = p;
        st->keys_cap = cap;
    }
    key_rec *k = &st->keys[st->nkeys++];
    memset(k, 0, sizeof(*k));
    k->e = *e;
    k->seq = seq;
    return 0;
}

static int add_grave(void *ctx, const crk_ha_grave *g)
{
    restore *st = ctx;
    if (g->until_ms <= st->now)
        return 0;
    if (st->ngraves == st->graves_cap) {
        size_t cap = st->graves_cap ? st->graves_cap * 2 : 256;
        crk_ha_grave *p = realloc(st->graves, cap * sizeof(*p));
        if (p == NULL) {
            st->rc = crb_error(CR_ERR_NO_MEMORY, "ha restore");
            return 1;
        }
        st->graves = p;
        st->graves_cap = cap;
    }
    st->graves[st->ngraves++] = *g;
    return 0;
}

static void add_range(restore *st, uint64_t epoch, uint64_t off, uint64_t value_size, int kind,
                      int64_t prio, size_t owner, uint32_t idx, uint64_t until)
{
    seg_rec *sr = seg_of(st, epoch);
    if (sr == NULL || st->rc != 0)
        return;
    if (sr->n == sr->cap) {
        size_t cap = sr->cap ? sr->cap * 2 : 64;
        range *p = realloc(sr->r, cap * sizeof(*p));
        if (p == NULL) {
            st->rc = crb_error(CR_ERR_NO_MEMORY, "ha restore");
            return;
        }
        sr->r = p;
        sr->cap = cap;
    }
    sr->r[sr->n++] =
        (range){off, crk_rep_bytes(st->s, value_size), prio, kind, owner, idx, true, 0, until};
}

static int by_offset(const void *a, const void *b)
{
    const range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Steps 2 and 3 for one segment. */
static void place(restore *st, seg_rec *sr)
{
    if (sr->n == 0)
        return; /* an empty segment: its fresh allocator is right as it is */
    qsort(sr->r, sr->n, sizeof(*sr->r), by_offset);
    size_t cur = SIZE_MAX;
    for (size_t i = 0; i < sr->n; i++) {
        range *r = &sr->r[i];
        if (r->off + r->bytes > sr->seg->capacity || r->bytes == 0) {
            r->valid = false;
            continue;
        }
        if (cur != SIZE_MAX && r->off < sr->r[cur].off + sr->r[cur].bytes) {
            range *c = &sr->r[cur];
            if (r->prio > c->prio) {
                c->valid = false;
                cur = i;
            } else {
                r->valid = false;
            }
            continue;
        }
        cur = i;
    }
    /* Adjacent graveyard ranges become one (one allocation, one deferred
     * release at the latest deadline): a removal of many keys just before
     * the failover must not cost one discard entry each. */
    size_t g = SIZE_MAX;
    for (size_t i = 0; i < sr->n; i++) {
        range *r = &sr->r[i];
        if (!r->valid)
            continue;
        if (r->kind != R_GRAVE) {
            g = SIZE_MAX;
            continue;
        }
        if (g != SIZE_MAX && sr->r[g].off + sr->r[g].bytes == r->off) {
            sr->r[g].bytes += r->bytes;
            if (r->until > sr->r[g].until)
                sr->r[g].until = r->until;
            r->valid = false;
            continue;
        }
        g = i;
    }
    crk_segment *seg = sr->seg;
    uint32_t *fillers = malloc((sr->n + 1) * sizeof(*fillers));
    size_t nf = 0;
    uint64_t at = 0;
    pthread_mutex_lock(&seg->mu);
    for (size_t i = 0; i < sr->n; i++) {
        range *r = &sr->r[i];
        if (!r->valid)
            continue;
        crb_oa_allocation a;
        if (r->off > at && fillers != NULL && crb_oa_alloc(seg->oa, r->off - at, &a) == 0)
            fillers[nf++] = a.node;
        if (crb_oa_alloc(seg->oa, r->bytes, &a) != 0 || a.offset != r->off) {
            crb_log(CRB_LOG_ERROR, "ha: segment '%s': cannot place %llu bytes at %llu", seg->name,
                    (unsigned long long)r->bytes, (unsigned long long)r->off);
            r->valid = false;
            continue;
        }
        r->node = a.node;
        at = r->off + r->bytes;
    }
    for (size_t i = 0; i < nf; i++)
        crb_oa_free(seg->oa, fillers[i]);
    atomic_store_explicit(&seg->used, crb_oa_used(seg->oa), CRK_RELAXED);
    pthread_mutex_unlock(&seg->mu);
    free(fillers);
}

/* Hand the placed live and write ranges of one segment to their keys. */
static void collect(restore *st, seg_rec *sr)
{
    for (size_t j = 0; j < sr->n; j++) {
        range *r = &sr->r[j];
        if (!r->valid || r->kind == R_GRAVE)
            continue;
        key_rec *k = &st->keys[r->owner];
        crk_replica rep = {sr->seg, r->off, r->node};
        if (r->kind == R_LIVE && k->nlive < CRK_MAX_REPLICAS)
            k->live[k->nlive++] = rep;
        else if (r->kind == R_WRITE && k->nwrite < CRK_MAX_REPLICAS)
            k->write[k->nwrite++] = rep;
    }
}

/* Step 4 for one key. */
static void install_key(restore *st, size_t k, uint64_t *fenced)
{
    crk_service *s = st->s;
    const crk_ha_entry *e = &st->keys[k].e;
    uint64_t h = crk_key_hash(s, e->key, e->key_len);
    crk_shard *sh = &s->shards[(h >> 40) % CRK_NUM_SHARDS];
    key_rec *kr = &st->keys[k];
    crk_replica *reps = kr->live;
    pthread_mutex_lock(&sh->mu);
    if (e->flags & CRK_HA_F_WRITING) {
        crk_release_or_defer(s, sh, kr->write, kr->nwrite, e->wsize,
                             crk_sat_add(st->now, s->cfg.put_start_release_timeout_ms), st->now,
                             NULL);
        (*fenced)++;
    }
    uint32_t n = (e->flags & CRK_HA_F_COMPLETE) ? kr->nlive : 0;
    if (n > 0) {
        size_t slot = crk_shard_probe(sh, e->key, e->key_len, (uint32_t)h);
        crk_object *o = sh->slots[slot].obj == NULL && crk_shard_reserve(sh) == 0
                            ? crk_obj_new(e->key, e->key_len, (uint32_t)h, n)
                            : NULL;
        if (o != NULL) {
            o->size = e->size;
            o->flags = CRK_OBJ_COMPLETE;
            o->version = crk_next_version(st->s);
            o->last_access = st->now;
            memcpy(crk_obj_reps(o), reps, n * sizeof(*reps));
            if (e->flags & CRK_HA_F_HARD_PIN) {
                o->flags |= CRK_OBJ_HARD_PIN;
                crk_add(s->c.hard_pinned, 1);
            }
            if (e->flags & CRK_HA_F_SOFT_PIN) {
                o->flags |= CRK_OBJ_SOFT_PIN;
                o->soft_pin_until = crk_sat_add(st->now, e->soft_left_ms);
                crk_add(s->c.soft_pinned, 1);
            }
            crk_shard_insert(sh, o);
            if (!(o->flags & CRK_OBJ_HARD_PIN))
                crk_lru_push_tail(sh, o);
        } else {
            crk_release_or_defer(s, sh, reps, n, e->size, st->now, st->now, NULL);
        }
    }
    pthread_mutex_unlock(&sh->mu);
}

/* A key's disk copy: the promoted leader routes its gets to the holder at
 * once (master/offload.h), without waiting for the holder to re-announce. */
static int add_disk(void *ctx, const crk_ha_entry *e)
{
    restore *st = ctx;
    crk_client_id holder = {e->owner_hi, e->owner_lo};
    const char *segment = NULL; /* the holder's engine segment (its name in the disk tier) */
    for (size_t i = 0; i < st->nsegs && segment == NULL; i++)
        if (st->segs[i].seg != NULL && crk_id_eq(st->segs[i].seg->owner, holder))
            segment = st->segs[i].seg->name;
    if (st->rc == 0)
        st->rc = crk_off_restore_disk(st->s, e->key, e->key_len, holder, segment, e->disk_version,
                                      e->size, st->now);
    return st->rc != 0;
}

int crk_ha_restore(crk_service *s, crk_ha_catalog *c, uint64_t now, uint64_t *fenced_out,
                   uint64_t *objects_out)
{
    restore st = {.s = s, .now = now};
    crk_ha_catalog_each_segment(c, add_segment, &st);
    crk_ha_catalog_each_key(c, add_key, &st);
    crk_ha_catalog_each_grave(c, add_grave, &st);
    for (size_t k = 0; k < st.nkeys && st.rc == 0; k++) {
        const crk_ha_entry *e = &st.keys[k].e;
        int64_t prio = (int64_t)st.keys[k].seq;
        if (e->flags & CRK_HA_F_COMPLETE)
            for (uint32_t i = 0; i < e->nrep; i++)
                add_range(&st, e->rep[i].epoch, e->rep[i].offset, e->size, R_LIVE, prio, k, i, 0);
        if (e->flags & CRK_HA_F_WRITING)
            for (uint32_t i = 0; i < e->wnrep; i++)
                add_range(&st, e->wrep[i].epoch, e->wrep[i].offset, e->wsize, R_WRITE, prio, k, i,
                          0);
    }
    for (size_t g = 0; g < st.ngraves && st.rc == 0; g++)
        add_range(&st, st.graves[g].epoch, st.graves[g].offset, st.graves[g].value_size, R_GRAVE,
                  -1, g, 0, st.graves[g].until_ms);
    uint64_t fenced = 0, objects = 0;
    if (st.rc == 0) {
        for (size_t i = 0; i < st.nsegs; i++) {
            place(&st, &st.segs[i]);
            collect(&st, &st.segs[i]);
        }
        /* Disk copies (and their holders) before the objects: an eviction of a
         * restored object then offloads it or finds its copy, never drops it. */
        crk_ha_catalog_each_disk(c, add_disk, &st);
        for (size_t k = 0; k < st.nkeys; k++)
            install_key(&st, k, &fenced);
        for (size_t i = 0; i < st.nsegs; i++) {
            seg_rec *sr = &st.segs[i];
            for (size_t j = 0; j < sr->n; j++) {
                range *r = &sr->r[j];
                if (!r->valid || r->kind != R_GRAVE)
                    continue;
                crk_replica rep = {sr->seg, r->off, r->node};
                crk_shard *sh = &s->shards[0];
                pthread_mutex_lock(&sh->mu);
                crk_release_or_defer(s, sh, &rep, 1, r->bytes, r->until, now, NULL);
                pthread_mutex_unlock(&sh->mu);
            }
        }
        for (size_t i = 0; i < CRK_NUM_SHARDS; i++)
            objects += atomic_load_explicit(&s->shards[i].keys, CRK_RELAXED);
    }
    for (size_t i = 0; i < st.nsegs; i++)
        free(st.segs[i].r);
    free(st.segs);
    free(st.keys);
    free(st.graves);
    if (st.rc == 0) {
        *fenced_out = fenced;
        *objects_out = objects;
    }
    return st.rc;
}
