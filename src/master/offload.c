/*
 * offload.c - the master's side of the disk tier (see offload.h).
 *
 * Data: a chained hash table of entries (key -> holder, version, size,
 * state, staging), a short list of holders (the clients that sent
 * OFFLOAD_HEARTBEAT) each with a FIFO mailbox of tasks, and counters.
 * Everything is under one mutex taken after a shard lock (offload.h).
 *
 * Versions: next_version starts at (random 24 bits << 40) + 1, so a version
 * issued by an earlier master instance (read back from a holder's disk after
 * this master restarted) is recognised as foreign: a re-announced key this
 * master knows nothing about is accepted only with a foreign version (the
 * key cannot have been removed or overwritten here without this master
 * knowing it), never with one of ours that no entry holds any more.
 */
#include "master/offload.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "master/internal.h"
#include "master/mem.h"
#include "master/prom.h"
#include "master/regex.h"
#include "master/tenants.h"
#include "proto/offload.h"
#include "proto/rpc.h"

#define STAGE_MARGIN_MS    1000  /* a staged copy is handed out only this long before its end */
#define STAGE_RETRY_MS     2000  /* a STAGE task unanswered this long is queued again */
#define MAILBOX_LIMIT      65536 /* tasks waiting per holder; more are refused */
#define REPLY_MAX_ITEMS    1024  /* tasks per heartbeat reply */
#define REPLY_MAX_KEYBYTES (256u << 10)
#define VERSION_SHIFT      40
/* Early write-behind (offload_on_evict): a put that completes while the memory holds more
 * than EARLY_RATIO of the capacity has its disk copy written at once, up to EARLY_DEPTH bytes
 * (at most a quarter of the capacity) in flight per holder. CRESCENT_OFFLOAD_EARLY_RATIO
 * overrides the ratio (>= 1: never). */
#define EARLY_RATIO    0.5
#define EARLY_DEPTH    (16ull << 20)
#define EARLY_PAUSE_MS 1000 /* no early copies to a holder this long after one failed */

enum { ENTRY_PENDING = 1, ENTRY_DISK = 2 };

typedef struct entry {
    struct entry *next;
    uint64_t hash;
    crk_client_id holder;
    uint64_t version, size;
    uint64_t staged_addr, staged_until, stage_asked_at;
    uint64_t stage_token; /* lease token of the staged copy's readers (bit 63 set) */
    uint64_t leaving;     /* evict mode: memory bytes released when the offload resolves */
    uint32_t hits;
    uint16_t stage_readers; /* hand-outs of the staged copy not yet released */
    uint8_t state;
    bool evict_mode; /* PENDING from an eviction: release the memory on success */
    bool early;      /* PENDING early write-behind: counted in its holder's early_bytes */
    bool promote_queued;
    uint8_t promote_tries; /* promotions that found no memory (offloads free it; retried) */
    size_t key_len;
    char key[];
} entry;

typedef struct task {
    uint8_t kind; /* crp_off_kind */
    uint64_t version, addr, size;
    char *key;
} task;

typedef struct holder {
    struct holder *next;
    crk_client_id id;
    char segment[CRK_MAX_SEGMENT_NAME + 1];
    uint64_t last_seen;
    uint64_t stats[CRP_OFF_NSTATS];
    task *tasks;
    size_t head, n, cap;         /* ring */
    uint64_t offloads_queued;    /* OFFLOAD tasks in the ring (<= offload_limit) */
    uint64_t offload_limit;      /* --offloading_queue_limit */
    uint64_t early_bytes;        /* sizes of this holder's PENDING early write-behind entries */
    uint64_t early_paused_until; /* no early copies before (an early copy failed) */
    crk_service *svc;            /* its on_tasks hook hears of every task queued */
} holder;

struct crk_offload {
    pthread_mutex_t mu;
    entry **buckets;
    size_t nbuckets, n_entries, n_disk;
    holder *holders;
    uint64_t next_version, instance, next_token;
    _Atomic uint64_t leaving; /* sum of the entries' `leaving` */
    uint64_t writes, reads, staged_hits, promotions, failures, refused;
    crk_service *svc; /* HA: its ha_disk hook hears of every disk copy made or dropped */
    uint64_t promotions_in_flight; /* entries with promote_queued (<= promotion_queue_limit) */
    uint64_t cap_round, cap_used;  /* offloads queued by eviction round cap_round */
    uint64_t kept, forced;         /* evictions the tier could not take: kept / dropped */
    double early_ratio;            /* EARLY_RATIO or CRESCENT_OFFLOAD_EARLY_RATIO */
    uint64_t early_writes;         /* early write-behind offloads queued */
};

/* HA (master/ha_repl.c): the standbys learn of e's disk copy (mu held). */
static void note_disk(struct crk_offload *o, const entry *e, bool on_disk)
{
    if (o->svc->ha_disk != NULL)
        o->svc->ha_disk(o->svc->ha_ctx, e->key, e->key_len, e->holder, e->version, e->size,
                        on_disk);
}

/* --- entries --------------------------------------------------------------- */

static entry **find_slot(struct crk_offload *o, const char *key, size_t len, uint64_t h)
{
    entry **p = &o->buckets[h & (o->nbuckets - 1)];
    for (; *p; p = &(*p)->next)
        if ((*p)->hash == h && (*p)->key_len == len && memcmp((*p)->key, key, len) == 0)
            return p;
    return p;
}

/* The disk-only entry of key (mu held), or NULL when there is none. */
static entry *disk_entry(crk_service *s, const char *key, size_t len)
{
    entry *e = *find_slot(s->off, key, len, crk_key_hash(s, key, len));
    return e != NULL && e->state == ENTRY_DISK ? e : NULL;
}

static void grow(struct crk_offload *o)
{
    if (o->n_entries < o->nbuckets)
        return;
    size_t nb = o->nbuckets * 2;
    entry **b = crk_calloc(nb, sizeof(*b));
    if (b == NULL)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < o->nbuckets; i++) {
        for (entry *e = o->buckets[i], *next; e; e = next) {
            next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    }
    crk_free(o->buckets);
    o->buckets = b;
    o->nbuckets = nb;
}

static entry *new_entry(struct crk_offload *o, const char *key, size_t len, uint64_t h)
{
    grow(o);
    entry *e = crk_calloc(1, sizeof(*e) + len + 1);
    if (e == NULL)
        return NULL;
    e->hash = h;
    e->key_len = len;
    memcpy(e->key, key, len);
    entry **p = &o->buckets[h & (o->nbuckets - 1)];
    e->next = *p;
    *p = e;
    o->n_entries++;
    return e;
}

/* The offload of e resolved (or was dropped): its memory no longer counts as leaving. */
static void settle(struct crk_offload *o, entry *e)
{
    if (e->leaving > 0)
        atomic_fetch_sub(&o->leaving, e->leaving);
    e->leaving = 0;
}

/* e's object's memory will be released when its offload resolves. */
static void mark_leaving(crk_service *s, struct crk_offload *o, entry *e, const crk_object *obj)
{
    if (e->leaving > 0)
        return;
    e->leaving = crk_rep_bytes(s, obj->size) * obj->nrep;
    atomic_fetch_add(&o->leaving, e->leaving);
}

static holder *find_holder(struct crk_offload *o, crk_client_id id);

/* e's early write-behind resolved or was dropped: its holder may take more. */
static void settle_early(struct crk_offload *o, entry *e)
{
    if (!e->early)
        return;
    e->early = false;
    holder *h = find_holder(o, e->holder);
    if (h != NULL)
        h->early_bytes = h->early_bytes > e->size ? h->early_bytes - e->size : 0;
}

static void unlink_entry(struct crk_offload *o, entry **p)
{
    entry *e = *p;
    settle(o, e);
    settle_early(o, e);
    *p = e->next;
    o->n_entries--;
    if (e->state == ENTRY_DISK) {
        o->n_disk--;
        note_disk(o, e, false);
    }
    if (e->promote_queued)
        o->promotions_in_flight--;
    crk_free(e);
}

/* --- holders and mailboxes --------------------------------------------------- */

static holder *find_holder(struct crk_offload *o, crk_client_id id)
{
    for (holder *h = o->holders; h; h = h->next)
        if (crk_id_eq(h->id, id))
            return h;
    return NULL;
}

static bool holder_live(const crk_service *s, const holder *h, uint64_t now)
{
    return h != NULL && h->segment[0] != '\0' &&
           crk_elapsed(now, h->last_seen) < s->cfg.client_ttl_ms;
}

static void free_holder(holder *h)
{
    for (size_t i = 0; i < h->n; i++)
        crk_free(h->tasks[(h->head + i) % h->cap].key);
    crk_free(h->tasks);
    crk_free(h);
}

/* A task of kind was queued for h (mu held): a heartbeat of it held for tasks may be
 * answered. Only for work someone waits on (a reader's stage, a promotion, an offload whose
 * memory an eviction wants); an UNSTAGE or a REMOVE goes with the holder's next poll instead
 * of waking it (and the master's waiter) after every disk hit's release. */
static void tasks_queued(const holder *h, uint8_t kind)
{
    if (kind == CRP_OFF_UNSTAGE || kind == CRP_OFF_REMOVE)
        return;
    if (h->svc != NULL && h->svc->on_tasks != NULL)
        h->svc->on_tasks(h->svc->on_tasks_ctx, h->id);
}

/* Queue a task for h, at the front of its mailbox when `front` (an eviction's offload: its
 * memory is wanted, so it goes ahead of early write-behind): false when the mailbox is full
 * or memory is short. */
static bool push_task_at(holder *h, bool front, uint8_t kind, const char *key, size_t len,
                         uint64_t version, uint64_t addr, uint64_t size)
{
    if (h->n >= MAILBOX_LIMIT)
        return false;
    if (kind == CRP_OFF_OFFLOAD && h->offloads_queued >= h->offload_limit)
        return false; /* --offloading_queue_limit */
    if (h->n == h->cap) {
        size_t ncap = h->cap ? h->cap * 2 : 64;
        task *t = crk_calloc(ncap, sizeof(*t));
        if (t == NULL)
            return false;
        for (size_t i = 0; i < h->n; i++)
            t[i] = h->tasks[(h->head + i) % h->cap];
        crk_free(h->tasks);
        h->tasks = t;
        h->cap = ncap;
        h->head = 0;
    }
    char *k = crk_malloc(len + 1);
    if (k == NULL)
        return false;
    memcpy(k, key, len);
    k[len] = '\0';
    if (front) {
        h->head = (h->head + h->cap - 1) % h->cap;
        h->tasks[h->head] = (task){kind, version, addr, size, k};
    } else {
        h->tasks[(h->head + h->n) % h->cap] = (task){kind, version, addr, size, k};
    }
    h->n++;
    if (kind == CRP_OFF_OFFLOAD)
        h->offloads_queued++;
    tasks_queued(h, kind);
    return true;
}

static bool push_task(holder *h, uint8_t kind, const char *key, size_t len, uint64_t version,
                      uint64_t addr, uint64_t size)
{
    return push_task_at(h, false, kind, key, len, version, addr, size);
}

/* Tell the holder to drop its copy (best effort: a full mailbox only leaves a dead record,
 * which no get is ever routed to). */
static void queue_remove(struct crk_offload *o, crk_client_id id, const char *key, size_t len,
                         uint64_t version)
{
    holder *h = find_holder(o, id);
    if (h != NULL)
        (void)push_task(h, CRP_OFF_REMOVE, key, len, version, 0, 0);
}

/* The live holder among o's replicas' owners, or NULL. */
static holder *holder_of(crk_service *s, struct crk_offload *off, crk_object *o,
                         const crk_replica **rep, uint64_t now)
{
    crk_replica *reps = crk_obj_reps(o);
    for (uint32_t i = 0; i < o->nrep; i++) {
        holder *h = find_holder(off, reps[i].seg->owner);
        if (holder_live(s, h, now)) {
            *rep = &reps[i];
            return h;
        }
    }
    return NULL;
}

/* --- lifecycle --------------------------------------------------------------------- */

int crk_off_create(crk_service *s)
{
    if (!s->cfg.enable_offload)
        return 0;
    struct crk_offload *o = crk_calloc(1, sizeof(*o));
    if (o == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "offload table");
    o->nbuckets = 1024;
    o->buckets = crk_calloc(o->nbuckets, sizeof(*o->buckets));
    if (o->buckets == NULL || pthread_mutex_init(&o->mu, NULL) != 0) {
        crk_free(o->buckets);
        crk_free(o);
        return crb_error(CR_ERR_NO_MEMORY, "offload table");
    }
    uint32_t r = 0;
    (void)crb_random_bytes(&r, sizeof(r));
    o->instance = (uint64_t)((r & 0xffffffu) | 1u);
    o->next_version = (o->instance << VERSION_SHIFT) + 1;
    o->early_ratio = EARLY_RATIO;
    const char *er = getenv("CRESCENT_OFFLOAD_EARLY_RATIO");
    if (er != NULL && *er != '\0') {
        char *end;
        double ratio = strtod(er, &end);
        if (*end == '\0' && ratio >= 0)
            o->early_ratio = ratio;
        else
            crb_log(CRB_LOG_WARN,
                    "master: CRESCENT_OFFLOAD_EARLY_RATIO '%s' is not a ratio; using %g", er,
                    o->early_ratio);
    }
    o->svc = s;
    s->off = o;
    return 0;
}

void crk_off_destroy(crk_service *s)
{
    struct crk_offload *o = s->off;
    if (o == NULL)
        return;
    for (size_t i = 0; i < o->nbuckets; i++) {
        for (entry *e = o->buckets[i], *next; e; e = next) {
            next = e->next;
            crk_free(e);
        }
    }
    crk_free(o->buckets);
    for (holder *h = o->holders, *next; h; h = next) {
        next = h->next;
        free_holder(h);
    }
    pthread_mutex_destroy(&o->mu);
    crk_free(o);
    s->off = NULL;
}

/* --- hooks of the object table -------------------------------------------------------- */

/* The tier cannot take o now (the round's cap, or the holder's queue is full): Mooncake's
 * --offload_force_evict drops it, else it stays in memory for a later round. */
static crk_off_evict_action cannot_take(crk_service *s, struct crk_offload *off)
{
    if (s->cfg.offload_force_evict) {
        off->forced++;
        return CRK_OFF_EVICT_ERASE;
    }
    off->kept++;
    return CRK_OFF_EVICT_KEEP;
}

crk_off_evict_action crk_off_evict_locked(crk_service *s, crk_shard *sh, crk_object *o,
                                          uint64_t now)
{
    struct crk_offload *off = s->off;
    if (off == NULL)
        return CRK_OFF_EVICT_ERASE;
    crk_off_evict_action act = CRK_OFF_EVICT_ERASE;
    bool taken = false;
    uint64_t h = crk_key_hash(s, o->key, o->key_len);
    pthread_mutex_lock(&off->mu);
    entry **p = find_slot(off, o->key, o->key_len, h);
    entry *e = *p;
    if (e != NULL && e->state == ENTRY_DISK) {
        goto out; /* the disk copy is this version's: the memory may go */
    }
    if (e != NULL && e->state == ENTRY_PENDING) {
        e->evict_mode = true; /* write-behind in flight: release the memory once it lands */
        mark_leaving(s, off, e, o);
        taken = true;
        goto out;
    }
    if (!s->cfg.offload_on_evict)
        goto out;
    const crk_replica *rep = NULL;
    holder *hd = holder_of(s, off, o, &rep, now);
    if (hd == NULL)
        goto out;
    /* --offload_force_evict: at most offloading_queue_limit * offload_cap_ratio offloads per
     * eviction round (rounds are serialised; evict_rounds counts the finished ones) */
    uint64_t round = atomic_load(&s->evict_rounds);
    if (off->cap_round != round) {
        off->cap_round = round;
        off->cap_used = 0;
    }
    if (s->cfg.offload_force_evict &&
        (double)off->cap_used >= (double)s->cfg.offloading_queue_limit * s->cfg.offload_cap_ratio) {
        act = cannot_take(s, off);
        goto out;
    }
    e = new_entry(off, o->key, o->key_len, h);
    if (e == NULL)
        goto out;
    e->state = ENTRY_PENDING;
    e->evict_mode = true;
    e->holder = hd->id;
    e->size = o->size;
    e->version = off->next_version++;
    if (!push_task_at(hd, true, CRP_OFF_OFFLOAD, o->key, o->key_len, e->version,
                      rep->seg->base + rep->offset, o->size)) {
        unlink_entry(off, find_slot(off, o->key, o->key_len, h));
        act = cannot_take(s, off); /* the holder's queue is full */
        goto out;
    }
    off->cap_used++;
    mark_leaving(s, off, e, o);
    taken = true;
out:
    if (taken) {
        o->flags |= CRK_OBJ_OFFLOADING;
        crk_lru_unlink(sh, o);
        act = CRK_OFF_EVICT_TAKEN;
    } else if (act == CRK_OFF_EVICT_KEEP) {
        crk_lru_move_to_tail(sh, o); /* looked at again in a later round, not this one */
    }
    pthread_mutex_unlock(&off->mu);
    return act;
}

/* Early write-behind (offload_on_evict, off->mu held; used: crk_allocated, read before
 * off->mu, which stays a leaf lock): o, just put on hd's segment, gets its disk copy written
 * now when the memory is fuller than early_ratio and hd has room for it.
 * Once the memory is full every eviction then finds the coldest objects' copies on disk and
 * releases their memory at once, instead of waiting for the holder to write them; and the
 * holder's disk works while the memory fills. The cost: a copy of an object that is removed or
 * overwritten before it is evicted is written for nothing (once per version). */
static bool early_wanted(crk_service *s, struct crk_offload *off, const holder *hd,
                         const crk_object *o, uint64_t used, uint64_t now)
{
    if (now < hd->early_paused_until)
        return false;
    uint64_t cap = crk_get(s->c.capacity);
    uint64_t leaving = atomic_load(&off->leaving);
    used = used > leaving ? used - leaving : 0;
    if (cap == 0 || off->early_ratio >= 1.0 || (double)used <= off->early_ratio * (double)cap)
        return false;
    /* (never more than half the mailbox or of --offloading_queue_limit: an eviction's
     * offload must always find room) */
    if (hd->n >= MAILBOX_LIMIT / 2 || hd->offloads_queued >= hd->offload_limit / 2)
        return false;
    uint64_t depth = EARLY_DEPTH < cap / 4 ? EARLY_DEPTH : cap / 4;
    return hd->early_bytes == 0 || hd->early_bytes + o->size <= depth;
}

void crk_off_put_end_locked(crk_service *s, crk_object *o, bool promotion, uint64_t now)
{
    struct crk_offload *off = s->off;
    if (off == NULL)
        return;
    uint64_t h = crk_key_hash(s, o->key, o->key_len);
    uint64_t used = s->cfg.offload_on_evict && off->early_ratio < 1.0 ? crk_allocated(s) : 0;
    pthread_mutex_lock(&off->mu);
    entry **p = find_slot(off, o->key, o->key_len, h);
    entry *e = *p;
    /* A new version: an older disk copy (or offload in flight) is dead, except the copy a
     * promotion (a plain put by the holder, crk_off_put_allowed) just read back. */
    if (e != NULL && !(promotion && e->state == ENTRY_DISK)) {
        queue_remove(off, e->holder, e->key, e->key_len, e->version);
        unlink_entry(off, p);
        e = NULL;
    }
    const crk_replica *rep = NULL;
    holder *hd = e == NULL ? holder_of(s, off, o, &rep, now) : NULL;
    bool early = hd != NULL && s->cfg.offload_on_evict && early_wanted(s, off, hd, o, used, now);
    if (hd != NULL && (!s->cfg.offload_on_evict || early)) { /* write-behind */
        if ((e = new_entry(off, o->key, o->key_len, h)) != NULL) {
            e->state = ENTRY_PENDING;
            e->holder = hd->id;
            e->size = o->size;
            e->version = off->next_version++;
            if (!push_task(hd, CRP_OFF_OFFLOAD, o->key, o->key_len, e->version,
                           rep->seg->base + rep->offset, o->size)) {
                unlink_entry(off, find_slot(off, o->key, o->key_len, h));
            } else if (early) {
                e->early = true;
                hd->early_bytes += o->size;
                off->early_writes++;
            }
        }
    }
    pthread_mutex_unlock(&off->mu);
}

void crk_off_object_gone_locked(crk_service *s, const crk_object *o)
{
    struct crk_offload *off = s->off;
    uint64_t h = crk_key_hash(s, o->key, o->key_len);
    pthread_mutex_lock(&off->mu);
    entry **p = find_slot(off, o->key, o->key_len, h);
    if (*p != NULL && (*p)->state == ENTRY_PENDING) {
        queue_remove(off, (*p)->holder, (*p)->key, (*p)->key_len, (*p)->version);
        unlink_entry(off, p);
    }
    pthread_mutex_unlock(&off->mu);
}

bool crk_off_put_allowed(crk_service *s, const char *key, size_t len, crk_client_id client)
{
    struct crk_offload *off = s->off;
    if (off == NULL)
        return true;
    pthread_mutex_lock(&off->mu);
    entry *e = disk_entry(s, key, len);
    bool ok = e == NULL || crk_id_eq(e->holder, client);
    pthread_mutex_unlock(&off->mu);
    return ok;
}

int crk_off_get(crk_service *s, const char *key, size_t len, uint64_t now, crk_replica_list *out)
{
    struct crk_offload *off = s->off;
    if (off == NULL)
        return crb_error(CR_OBJECT_NOT_FOUND, "get_replica_list '%s': no such object", key);
    int rc;
    pthread_mutex_lock(&off->mu);
    entry *e = disk_entry(s, key, len);
    if (e == NULL) {
        rc = crb_error(CR_OBJECT_NOT_FOUND, "get_replica_list '%s': no such object", key);
        goto unlock;
    }
    holder *h = find_holder(off, e->holder);
    if (!holder_live(s, h, now)) {
        rc = crb_error(CR_ERR_OFFLOAD_UNAVAILABLE,
                       "get_replica_list '%s': its only copy is on the disk of a holder that "
                       "has not been heard from (it may be restarting)",
                       key);
        goto unlock;
    }
    if (e->staged_addr != 0 && e->staged_until > now + STAGE_MARGIN_MS) {
        crk_replica_desc *d = &out->r[0];
        snprintf(d->segment, sizeof(d->segment), "%s", h->segment);
        d->address = e->staged_addr;
        d->size = e->size;
        d->mount_epoch = 0;
        out->n = 1;
        out->value_size = e->size;
        out->lease_ttl_ms = e->staged_until - now - STAGE_MARGIN_MS;
        out->lease_token = e->stage_token;
        if (e->stage_readers < UINT16_MAX)
            e->stage_readers++;
        off->staged_hits++;
        rc = 0;
        goto unlock;
    }
    if (e->staged_until > 0 && e->staged_until <= now + STAGE_MARGIN_MS)
        e->staged_addr = e->staged_until = 0;
    e->hits++;
    if (s->cfg.promotion_on_hit && !e->promote_queued &&
        e->hits >= s->cfg.promotion_admission_threshold &&
        off->promotions_in_flight < s->cfg.promotion_queue_limit &&
        push_task(h, CRP_OFF_PROMOTE, e->key, e->key_len, e->version, 0, e->size)) {
        e->promote_queued = true;
        off->promotions_in_flight++;
        off->reads++;
    }
    if (e->stage_asked_at == 0 || crk_elapsed(now, e->stage_asked_at) >= STAGE_RETRY_MS) {
        if (push_task(h, CRP_OFF_STAGE, e->key, e->key_len, e->version, 0, e->size)) {
            e->stage_asked_at = now ? now : 1;
            off->reads++;
        }
    }
    rc =
        crb_error(CR_ERR_OFFLOAD_STAGING,
                  "get_replica_list '%s': on the disk of %s; being staged, retry", key, h->segment);
unlock:
    pthread_mutex_unlock(&off->mu);
    return rc;
}

int crk_off_exist(crk_service *s, const char *key, size_t len)
{
    struct crk_offload *off = s->off;
    if (off == NULL)
        return 0;
    pthread_mutex_lock(&off->mu);
    int found = disk_entry(s, key, len) != NULL;
    pthread_mutex_unlock(&off->mu);
    return found;
}

int crk_off_remove(crk_service *s, const char *key, size_t len)
{
    struct crk_offload *off = s->off;
    if (off == NULL)
        return crb_error(CR_OBJECT_NOT_FOUND, "remove '%s': no such object", key);
    pthread_mutex_lock(&off->mu);
    entry **p = find_slot(off, key, len, crk_key_hash(s, key, len));
    entry *e = *p;
    int rc = 0;
    if (e == NULL) {
        rc = crb_error(CR_OBJECT_NOT_FOUND, "remove '%s': no such object", key);
    } else {
        if (e->state != ENTRY_DISK)
            rc = crb_error(CR_OBJECT_NOT_FOUND, "remove '%s': no such object", key);
        queue_remove(off, e->holder, e->key, e->key_len, e->version);
        unlink_entry(off, p);
    }
    pthread_mutex_unlock(&off->mu);
    return rc;
}

uint64_t crk_off_remove_all(crk_service *s, const char *ns, size_t nl)
{
    struct crk_offload *off = s->off;
    if (off == NULL)
        return 0;
    uint64_t n = 0;
    pthread_mutex_lock(&off->mu);
    for (size_t i = 0; i < off->nbuckets; i++) {
        for (entry **p = &off->buckets[i]; *p;) {
            entry *e = *p;
            bool in = ns == NULL || (nl == 0 ? e->key[0] != CRK_TENANT_MARK
                                             : e->key_len >= nl && memcmp(e->key, ns, nl) == 0);
            if (!in || e->state != ENTRY_DISK) {
                p = &e->next;
                continue;
            }
            queue_remove(off, e->holder, e->key, e->key_len, e->version);
            unlink_entry(off, p);
            n++;
        }
    }
    pthread_mutex_unlock(&off->mu);
    return n;
}

int crk_off_query(crk_service *s, const char *key, size_t len, uint64_t now, crk_key_info *out)
{
    struct crk_offload *off = s->off;
    if (off == NULL)
        return crb_error(CR_OBJECT_NOT_FOUND, "query_key '%s': no such object", key);
    int rc = 0;
    pthread_mutex_lock(&off->mu);
    entry *e = disk_entry(s, key, len);
    if (e == NULL) {
        rc = crb_error(CR_OBJECT_NOT_FOUND, "query_key '%s': no such object", key);
        goto unlock;
    }
    holder *h = find_holder(off, e->holder);
    memset(out, 0, sizeof(*out));
    out->value_size = e->size;
    out->complete = true;
    out->on_disk = true;
    out->disk_holder_live = holder_live(s, h, now);
    out->replicas.value_size = e->size;
    out->replicas.n = 1;
    crk_replica_desc *d = &out->replicas.r[0];
    snprintf(d->segment, sizeof(d->segment), "%s", h != NULL ? h->segment : "");
    d->size = e->size; /* address 0, epoch 0: the holder's disk, not a segment */
unlock:
    pthread_mutex_unlock(&off->mu);
    return rc;
}

/* A disk-only key of a regex scan: hash, length, bytes at `off` in the buffer. */
typedef struct scan_key {
    uint64_t hash;
    size_t len, off;
} scan_key;

int crk_off_remove_matching(crk_service *s, const char *ns, size_t nl, crk_regex *re,
                            uint64_t *count)
{
    struct crk_offload *off = s->off;
    if (off == NULL)
        return 0;
    /* Copy the keys under the lock, match them without it (a pattern's cost never delays a
     * heartbeat or a get), then remove each matched key that is still disk-only. */
    scan_key *keys = NULL;
    char *bytes = NULL;
    size_t n = 0, cap = 0, blen = 0, bcap = 0;
    int rc = 0;
    pthread_mutex_lock(&off->mu);
    for (size_t i = 0; i < off->nbuckets && rc == 0; i++) {
        for (entry *e = off->buckets[i]; e != NULL && rc == 0; e = e->next) {
            bool in = ns == NULL || (nl == 0 ? e->key[0] != CRK_TENANT_MARK
                                             : e->key_len >= nl && memcmp(e->key, ns, nl) == 0);
            if (!in || e->state != ENTRY_DISK)
                continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 256;
                scan_key *k = crk_realloc(keys, nc * sizeof(*k));
                if (k == NULL) {
                    rc = CR_ERR_NO_MEMORY;
                    break;
                }
                keys = k;
                cap = nc;
            }
            if (blen + e->key_len > bcap) {
                size_t nc = bcap ? bcap * 2 : 16384;
                while (nc < blen + e->key_len)
                    nc *= 2;
                char *b = crk_realloc(bytes, nc);
                if (b == NULL) {
                    rc = CR_ERR_NO_MEMORY;
                    break;
                }
                bytes = b;
                bcap = nc;
            }
            memcpy(bytes + blen, e->key, e->key_len);
            keys[n++] = (scan_key){e->hash, e->key_len, blen};
            blen += e->key_len;
        }
    }
    pthread_mutex_unlock(&off->mu);
    if (rc != 0) {
        rc = crb_error(rc, "remove_by_regex: copying the disk tier's keys");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const char *key = bytes + keys[i].off;
        /* the key as its tenant knows it: without the namespace prefix */
        int m = crk_regex_match(re, key + nl, keys[i].len - nl);
        if (m < 0) {
            rc = crb_error(m, "remove_by_regex stopped after removing %llu keys: %s",
                           (unsigned long long)*count, cr_last_error_message());
            goto out;
        }
        if (m != 1)
            continue;
        /* Only a key absent from the object table: one in memory was judged (removable or
         * not) by the shard scan, which dropped its disk copy with it. */
        crk_shard *sh = crk_shard_for(s, keys[i].hash);
        pthread_mutex_lock(&sh->mu);
        crk_object *o =
            sh->slots[crk_shard_probe(sh, key, keys[i].len, (uint32_t)keys[i].hash)].obj;
        if (o == NULL) {
            pthread_mutex_lock(&off->mu);
            entry **p = find_slot(off, key, keys[i].len, keys[i].hash);
            if (*p != NULL && (*p)->state == ENTRY_DISK) {
                queue_remove(off, (*p)->holder, (*p)->key, (*p)->key_len, (*p)->version);
                unlink_entry(off, p);
                (*count)++;
            }
            pthread_mutex_unlock(&off->mu);
        }
        pthread_mutex_unlock(&sh->mu);
    }
out:
    crk_free(keys);
    crk_free(bytes);
    return rc;
}

/* --- heartbeats --------------------------------------------------------------------- */

static holder *touch_holder(crk_service *s, struct crk_offload *off, crk_client_id id,
                            const crp_off_msg *m, uint64_t now)
{
    holder *h = find_holder(off, id);
    if (h == NULL) {
        /* A restarted holder with the same engine name retires its old record: its tasks
         * are dropped and it is never live again (records are freed only with the service,
         * so a heartbeat running for the old id never sees freed memory). */
        for (holder *old = off->holders; old; old = old->next) {
            if (old->segment[0] != '\0' && strcmp(old->segment, m->segment) == 0) {
                for (size_t i = 0; i < old->n; i++)
                    crk_free(old->tasks[(old->head + i) % old->cap].key);
                old->n = old->head = 0;
                old->offloads_queued = 0;
                old->early_bytes = 0;
                old->segment[0] = '\0';
                old->last_seen = 0;
                memset(old->stats, 0, sizeof(old->stats));
            }
        }
        h = crk_calloc(1, sizeof(*h));
        if (h == NULL)
            return NULL;
        h->id = id;
        h->svc = s;
        h->offload_limit = s->cfg.offloading_queue_limit;
        h->next = off->holders;
        off->holders = h;
        crb_log(CRB_LOG_INFO, "master: disk tier of %s joined", m->segment);
    }
    snprintf(h->segment, sizeof(h->segment), "%s", m->segment);
    h->last_seen = now;
    for (size_t i = 0; i < CRP_OFF_NSTATS && i < m->n_stats; i++)
        h->stats[i] = m->stats[i];
    return h;
}

/* An OFFLOAD result: with the key's shard locked, so that the memory object and the entry
 * change together. */
static void offload_result(crk_service *s, struct crk_offload *off, holder *hd,
                           const crp_off_item *it, uint64_t now)
{
    size_t len = strlen(it->key);
    if (len > CRK_MAX_KEY_LEN)
        return;
    uint64_t h = crk_key_hash(s, it->key, len);
    crk_shard *sh = crk_shard_for(s, h);
    pthread_mutex_lock(&sh->mu);
    size_t slot = crk_shard_probe(sh, it->key, len, (uint32_t)h);
    crk_object *o = sh->slots[slot].obj;
    pthread_mutex_lock(&off->mu);
    entry **p = find_slot(off, it->key, len, h);
    entry *e = *p;
    bool current = e != NULL && e->state == ENTRY_PENDING && e->version == it->version &&
                   crk_id_eq(e->holder, hd->id) && o != NULL && o->size == e->size;
    if (!current) {
        /* A result sent again (its heartbeat was cut, e.g. by an HA failover: the
         * new leader got the copy from the old one's log) names the copy as it is. */
        bool applied = e != NULL && e->state == ENTRY_DISK && e->version == it->version &&
                       crk_id_eq(e->holder, hd->id) && it->status == 0;
        if (applied)
            goto unlock;
        off->refused++;
        if (it->status == 0)
            (void)push_task(hd, CRP_OFF_REMOVE, it->key, len, it->version, 0, 0);
        goto unlock;
    }
    bool release = e->evict_mode || (o->flags & CRK_OBJ_OFFLOADING);
    if (it->status < 0) {
        off->failures++;
        /* An early copy that failed (a full disk, mostly) pauses early copies to this holder for
         * EARLY_PAUSE_MS, and is logged only at debug level: nothing was evicted, and every put
         * past half the memory would otherwise fail and log again. */
        bool early_only = e->early && !release;
        if (e->early)
            hd->early_paused_until = now + EARLY_PAUSE_MS;
        unlink_entry(off, p);
        crb_log(early_only ? CRB_LOG_DEBUG : CRB_LOG_INFO,
                "master: offload of '%s' to %s failed (%s)%s", it->key, hd->segment,
                cr_status_name(it->status),
                release      ? "; evicted"
                : early_only ? " (an early copy; it stays in memory)"
                             : "");
    } else {
        settle(off, e);
        settle_early(off, e);
        e->state = ENTRY_DISK;
        off->n_disk++;
        off->writes++;
        note_disk(off, e, true);
    }
    pthread_mutex_unlock(&off->mu);
    if (release)
        crk_erase_object_locked(s, sh, o, now); /* a reader's lease still defers the memory */
    pthread_mutex_unlock(&sh->mu);
    return;
unlock:
    pthread_mutex_unlock(&off->mu);
    pthread_mutex_unlock(&sh->mu);
}

/* A re-announced key (a restarted holder read it back from its disk). */
static void announce(crk_service *s, struct crk_offload *off, holder *hd, const crp_off_item *it)
{
    size_t len = strlen(it->key);
    if (len > CRK_MAX_KEY_LEN)
        return;
    uint64_t h = crk_key_hash(s, it->key, len);
    crk_shard *sh = crk_shard_for(s, h);
    pthread_mutex_lock(&sh->mu);
    crk_object *o = sh->slots[crk_shard_probe(sh, it->key, len, (uint32_t)h)].obj;
    pthread_mutex_lock(&off->mu);
    entry *e = *find_slot(off, it->key, len, h);
    bool ok;
    if (e != NULL) {
        ok = e->state == ENTRY_DISK && e->version == it->version && e->size == it->size;
        if (ok) {
            e->holder = hd->id;
            e->staged_addr = e->staged_until = e->stage_asked_at = 0;
            if (e->promote_queued)
                off->promotions_in_flight--;
            e->promote_queued = false;
            note_disk(off, e, true);
        }
    } else {
        /* Unknown here: only a copy issued by another master instance may come back, and
         * only while no other version of the key exists. */
        ok = o == NULL && (it->version >> VERSION_SHIFT) != off->instance;
        if (ok && (e = new_entry(off, it->key, len, h)) != NULL) {
            e->state = ENTRY_DISK;
            e->holder = hd->id;
            e->version = it->version;
            e->size = it->size;
            off->n_disk++;
            note_disk(off, e, true);
        }
    }
    if (!ok) {
        off->refused++;
        (void)push_task(hd, CRP_OFF_REMOVE, it->key, len, it->version, 0, 0);
    }
    pthread_mutex_unlock(&off->mu);
    pthread_mutex_unlock(&sh->mu);
}

static void other_report(crk_service *s, struct crk_offload *off, holder *hd,
                         const crp_off_item *it, uint64_t now)
{
    size_t len = strlen(it->key);
    pthread_mutex_lock(&off->mu);
    entry **p = find_slot(off, it->key, len, crk_key_hash(s, it->key, len));
    entry *e = *p;
    bool current = e != NULL && e->state == ENTRY_DISK && e->version == it->version &&
                   crk_id_eq(e->holder, hd->id);
    switch (it->kind) {
    case CRP_OFF_STAGE:
        if (!current)
            break;
        e->stage_asked_at = 0;
        if (it->status == 0 && it->addr != 0 && it->ttl_ms > STAGE_MARGIN_MS) {
            if (e->staged_addr != 0 && e->staged_addr != it->addr) { /* a second copy */
                if (e->stage_readers > 0 && e->staged_until > now) {
                    /* Readers hold leases on the first copy: freeing it could hand its
                     * memory to another value under them. Keep it; free the new one. */
                    (void)push_task(hd, CRP_OFF_UNSTAGE, e->key, e->key_len, e->version, it->addr,
                                    0);
                    break;
                }
                (void)push_task(hd, CRP_OFF_UNSTAGE, e->key, e->key_len, e->version, e->staged_addr,
                                0);
            }
            e->staged_addr = it->addr;
            e->staged_until = now + it->ttl_ms - STAGE_MARGIN_MS / 2;
            e->stage_token = (1ull << 63) | ++off->next_token;
            e->stage_readers = 0;
        } else if (it->status == CR_OBJECT_NOT_FOUND || it->status == CR_CHECKSUM_MISMATCH) {
            crb_log(CRB_LOG_INFO, "master: %s lost the disk copy of '%s' (%s)", hd->segment,
                    it->key, cr_status_name(it->status));
            unlink_entry(off, p);
        }
        break;
    case CRP_OFF_PROMOTE:
        if (current && it->status == CR_NO_AVAILABLE_HANDLE && e->promote_tries < 20 &&
            push_task(hd, CRP_OFF_PROMOTE, e->key, e->key_len, e->version, 0, e->size)) {
            e->promote_tries++; /* after the offloads queued before it have freed memory */
            break;
        }
        if (current && e->promote_queued) {
            e->promote_queued = false;
            off->promotions_in_flight--;
        }
        if (it->status == 0)
            off->promotions++;
        break;
    case CRP_OFF_EVICTED:
        if (current)
            unlink_entry(off, p);
        break;
    default:
        break;
    }
    pthread_mutex_unlock(&off->mu);
}

/* Tell the RPC server's stage waits which keys the n stage / promotion reports of m name:
 * gets held for them may be answerable now. Without memory for the list, every held get is
 * asked again (an empty list would wake none). */
static void notify_stage_results(crk_service *s, const crp_off_msg *m, size_t n)
{
    const char **keys = crk_calloc(n, sizeof(*keys));
    size_t *lens = crk_calloc(n, sizeof(*lens));
    size_t k = 0;
    for (size_t i = 0; keys != NULL && lens != NULL && i < m->n_items; i++) {
        const crp_off_item *it = &m->items[i];
        if (it->kind != CRP_OFF_OFFLOAD && it->kind != CRP_OFF_ANNOUNCE) {
            keys[k] = it->key;
            lens[k++] = strlen(it->key);
        }
    }
    if (keys == NULL || lens == NULL)
        s->on_stage(s->on_stage_ctx, NULL, NULL, 0); /* keys unknown: every held get */
    else
        s->on_stage(s->on_stage_ctx, keys, lens, k);
    crk_free(keys);
    crk_free(lens);
}

int crk_off_heartbeat(crk_service *s, crk_client_id client, const void *body, size_t len,
                      uint64_t now, crp_buf *reply)
{
    struct crk_offload *off = s->off;
    if (off == NULL)
        return crb_error(CR_NOT_SUPPORTED,
                         "offload_heartbeat: this master runs without --enable_offload");
    if (!crk_id_valid(client))
        return crb_error(CR_ILLEGAL_CLIENT, "offload_heartbeat: the zero client id is not valid");
    crp_off_msg m;
    int rc = crp_off_decode(body, len, &m);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&off->mu);
    holder *hd = touch_holder(s, off, client, &m, now);
    pthread_mutex_unlock(&off->mu);
    if (hd == NULL) {
        crp_off_clear(&m);
        return crb_error(CR_ERR_NO_MEMORY, "offload_heartbeat: holder record");
    }
    /* Holder records live until the service ends, so hd stays valid without the lock. */
    size_t reports = 0;
    for (size_t i = 0; i < m.n_items; i++) {
        const crp_off_item *it = &m.items[i];
        if (it->kind == CRP_OFF_OFFLOAD) {
            offload_result(s, off, hd, it, now);
        } else if (it->kind == CRP_OFF_ANNOUNCE) {
            announce(s, off, hd, it);
        } else {
            other_report(s, off, hd, it, now);
            reports++;
        }
    }
    if (reports > 0 && s->on_stage != NULL)
        notify_stage_results(s, &m, reports);
    crp_off_clear(&m);

    crp_off_msg out = {.segment = ""};
    pthread_mutex_lock(&off->mu);
    size_t n = 0, key_bytes = 0;
    uint32_t promos = 0, max_promos = s->cfg.promotion_max_per_heartbeat;
    if (max_promos == 0)
        max_promos = 1;
    while (n < hd->n && n < REPLY_MAX_ITEMS && key_bytes < REPLY_MAX_KEYBYTES) {
        const task *t = &hd->tasks[(hd->head + n) % hd->cap];
        /* --promotion_max_per_heartbeat: the next promotion (and what follows it) waits for
         * the next heartbeat, which comes at once (`more`) */
        if (t->kind == CRP_OFF_PROMOTE && promos++ == max_promos)
            break;
        key_bytes += strlen(t->key) + 64;
        n++;
    }
    crp_off_item *items = n ? crk_calloc(n, sizeof(*items)) : NULL;
    if (n > 0 && items == NULL) {
        pthread_mutex_unlock(&off->mu);
        return crb_error(CR_ERR_NO_MEMORY, "offload_heartbeat: %zu tasks", n);
    }
    task *taken = n ? crk_calloc(n, sizeof(*taken)) : NULL;
    if (n > 0 && taken == NULL) {
        crk_free(items);
        pthread_mutex_unlock(&off->mu);
        return crb_error(CR_ERR_NO_MEMORY, "offload_heartbeat: %zu tasks", n);
    }
    for (size_t i = 0; i < n; i++) {
        taken[i] = hd->tasks[hd->head];
        hd->head = (hd->head + 1) % hd->cap;
        hd->n--;
        if (taken[i].kind == CRP_OFF_OFFLOAD)
            hd->offloads_queued--;
        items[i] = (crp_off_item){taken[i].kind, 0, taken[i].key, taken[i].version, taken[i].addr,
                                  taken[i].size, 0};
    }
    out.more = hd->n > 0;
    pthread_mutex_unlock(&off->mu);
    out.items = items;
    out.n_items = n;
    rc = crp_off_encode(&out, reply);
    for (size_t i = 0; i < n; i++)
        crk_free(taken[i].key);
    crk_free(taken);
    crk_free(items);
    return rc;
}

void crk_off_get_stats(crk_service *s, crk_off_stats *out)
{
    memset(out, 0, sizeof(*out));
    struct crk_offload *off = s->off;
    if (off == NULL)
        return;
    uint64_t now = crb_now_ms();
    pthread_mutex_lock(&off->mu);
    for (holder *h = off->holders; h; h = h->next) {
        if (holder_live(s, h, now))
            out->holders++;
        out->disk_bytes += h->stats[CRP_OFF_STAT_BYTES];
        out->disk_capacity += h->stats[CRP_OFF_STAT_CAPACITY];
        out->compactions += h->stats[CRP_OFF_STAT_COMPACTIONS];
        out->tasks_pending += h->n;
    }
    out->disk_objects = off->n_disk;
    out->writes = off->writes;
    out->reads = off->reads;
    out->staged_hits = off->staged_hits;
    out->promotions = off->promotions;
    out->offload_failures = off->failures;
    out->refused = off->refused;
    out->evictions_kept = off->kept;
    out->evictions_forced = off->forced;
    out->promotions_in_flight = off->promotions_in_flight;
    out->early_writes = off->early_writes;
    pthread_mutex_unlock(&off->mu);
}

void crk_off_prom(crk_service *s, crk_text *t)
{
    if (s->off == NULL)
        return;
    crk_off_stats st;
    crk_off_get_stats(s, &st);
    crk_prom_gauge(t, "master_disk_holders", "Clients with a live disk tier", (double)st.holders);
    crk_prom_gauge(t, "master_disk_objects", "Keys with a copy on a holder's disk",
                   (double)st.disk_objects);
    crk_prom_gauge(t, "master_disk_bytes", "Bucket file bytes of the holders' disk tiers",
                   (double)st.disk_bytes);
    crk_prom_gauge(t, "master_disk_capacity_bytes", "Capacity of the holders' disk tiers",
                   (double)st.disk_capacity);
    crk_prom_gauge(t, "master_offload_tasks_pending", "Disk tier tasks waiting for holders",
                   (double)st.tasks_pending);
    crk_prom_counter(t, "master_disk_writes_total", "Values the holders wrote to disk", st.writes);
    crk_prom_counter(t, "master_disk_reads_total", "Disk reads asked of holders (stage, promote)",
                     st.reads);
    crk_prom_counter(t, "master_disk_staged_hits_total", "Gets answered from a staging area",
                     st.staged_hits);
    crk_prom_counter(t, "master_disk_promotions_total", "Values promoted back to memory",
                     st.promotions);
    crk_prom_counter(t, "master_disk_compactions_total", "Holders' disk compactions",
                     st.compactions);
    crk_prom_counter(t, "master_offload_failures_total", "Offloads the holders could not write",
                     st.offload_failures);
    crk_prom_counter(t, "master_offload_refused_total",
                     "Results and re-announces refused (removed or overwritten meanwhile)",
                     st.refused);
    crk_prom_counter(t, "master_offload_evictions_kept_total",
                     "Evictions the disk tier could not take (queue full) that kept the object",
                     st.evictions_kept);
    crk_prom_counter(t, "master_offload_evictions_forced_total",
                     "Evictions past --offload_cap_ratio or a full queue that dropped the object "
                     "(--offload_force_evict)",
                     st.evictions_forced);
    crk_prom_gauge(t, "master_promotions_in_flight", "Promotions queued or running",
                   (double)st.promotions_in_flight);
    crk_prom_counter(t, "master_offload_early_writes_total",
                     "Disk copies of objects still in memory written ahead of their eviction "
                     "(the memory was more than half full)",
                     st.early_writes);
}

void crk_off_release(crk_service *s, const char *key, uint64_t token)
{
    struct crk_offload *off = s->off;
    if (off == NULL || key == NULL || !(token >> 63))
        return;
    size_t len = strnlen(key, CRK_MAX_KEY_LEN + 1);
    if (len == 0 || len > CRK_MAX_KEY_LEN)
        return;
    pthread_mutex_lock(&off->mu);
    entry *e = disk_entry(s, key, len);
    if (e != NULL && e->stage_token == token && e->staged_addr != 0 && e->stage_readers > 0 &&
        e->stage_readers != UINT16_MAX && --e->stage_readers == 0) {
        /* The last reader is done: the holder may reuse the staging space at once. */
        holder *h = find_holder(off, e->holder);
        if (h != NULL &&
            push_task(h, CRP_OFF_UNSTAGE, e->key, e->key_len, e->version, e->staged_addr, 0))
            e->staged_addr = e->staged_until = 0;
    }
    pthread_mutex_unlock(&off->mu);
}

uint64_t crk_off_leaving_bytes(crk_service *s)
{
    return s->off != NULL ? atomic_load(&s->off->leaving) : 0;
}

/* --- HA (master/ha_repl.c, ha_restore.c) ---------------------------------------------- */

void crk_off_each_disk(crk_service *s,
                       void (*fn)(void *, const char *, size_t, crk_client_id, uint64_t, uint64_t),
                       void *ctx)
{
    struct crk_offload *off = s->off;
    if (off == NULL)
        return;
    pthread_mutex_lock(&off->mu);
    for (size_t i = 0; i < off->nbuckets; i++)
        for (entry *e = off->buckets[i]; e; e = e->next)
            if (e->state == ENTRY_DISK)
                fn(ctx, e->key, e->key_len, e->holder, e->version, e->size);
    pthread_mutex_unlock(&off->mu);
}

int crk_off_restore_disk(crk_service *s, const char *key, size_t len, crk_client_id holder_id,
                         const char *segment, uint64_t version, uint64_t size, uint64_t now)
{
    struct crk_offload *off = s->off;
    if (off == NULL || len == 0 || len > CRK_MAX_KEY_LEN)
        return 0; /* this master runs without a disk tier: such keys are unknown here */
    uint64_t h = crk_key_hash(s, key, len);
    pthread_mutex_lock(&off->mu);
    if (segment != NULL && find_holder(off, holder_id) == NULL) {
        /* Live from now (until client_ttl without a heartbeat), so eviction offloads
         * to it instead of dropping values before its first heartbeat arrives. */
        holder *hd = crk_calloc(1, sizeof(*hd));
        if (hd != NULL) {
            hd->id = holder_id;
            hd->svc = s;
            hd->offload_limit = s->cfg.offloading_queue_limit; /* (was left 0: no offloads) */
            snprintf(hd->segment, sizeof(hd->segment), "%s", segment);
            hd->last_seen = now;
            hd->next = off->holders;
            off->holders = hd;
        }
    }
    entry **p = find_slot(off, key, len, h);
    if (*p != NULL)
        unlink_entry(off, p);
    entry *e = new_entry(off, key, len, h);
    if (e != NULL) {
        e->state = ENTRY_DISK;
        e->holder = holder_id;
        e->version = version;
        e->size = size;
        off->n_disk++;
    }
    pthread_mutex_unlock(&off->mu);
    return e != NULL ? 0 : crb_error(CR_ERR_NO_MEMORY, "offload entry for '%.*s'", (int)len, key);
}
