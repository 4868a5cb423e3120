/*
 * internal.h - data structures shared by the master core's source files
 * (service.c: lifecycle, tick, stats; clients.c: the client table;
 * segments.c: segment table, mounts, placement; object_table.c: the shard
 * data structures; objects.c: puts, reads, removal; eviction.c: eviction,
 * deferred releases, stale-write sweeps).
 *
 * Ownership: the service owns shards, segments, clients and tombstones.
 * A shard owns its objects, their in-flight writes and its discard entries.
 * A replica points at its segment; a segment is freed only after an unmount
 * scan removed every replica pointing at it (see segments.c).
 *
 * Lock order (acquire left to right, never the reverse; any level may be
 * skipped; never two locks of one level at once):
 *
 *   clients_lock -> evict_lock -> shard[i].mu -> seg_lock -> segment.mu
 *
 * clients_lock is held only by mount/remount, ping and client expiry and is
 * never held while a shard is locked. evict_lock serialises eviction rounds;
 * a put_start that needs an eviction drops its shard lock first. seg_lock is
 * a rwlock over the segment table (read: placement, lookups; write: mount,
 * unmount start/finish, tombstones). segment.mu guards one allocator.
 * Counters and gauges are relaxed atomics and take no lock.
 */
#ifndef CRESCENT_MASTER_INTERNAL_H
#define CRESCENT_MASTER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/offset_allocator.h"
#include "base/siphash.h"
#include "master/object_table.h"
#include "master/service.h"

/* --- segments -------------------------------------------------------------- */

enum { CRK_SEG_MOUNTED = 0, CRK_SEG_UNMOUNTING = 1 };

/* Why a segment is fenced (what its message says). */
enum {
    CRK_FENCE_NONE = 0,
    CRK_FENCE_TOMB = 1,    /* its name's previous memory may still be read or written */
    CRK_FENCE_RESTART = 2, /* remounted after a master restart */
};

typedef struct crk_segment {
    struct crk_segment *hnext; /* name-hash chain (seg_lock) */
    uint32_t dense;            /* index in s->segs (seg_lock) */
    uint32_t name_len;
    crk_client_id owner;
    uint64_t base, size, capacity;
    uint64_t epoch;
    uint64_t fence_until;     /* no allocation before this; immutable once published */
    uint8_t fence_reason;     /* CRK_FENCE_*; immutable once published */
    _Atomic int state;        /* CRK_SEG_*; set under seg_lock (write) and mu */
    _Atomic uint64_t used;    /* mirrors crb_oa_used(oa); written under mu */
    _Atomic uint64_t horizon; /* latest lease/writer deadline on this memory */
    _Atomic bool orphan;      /* its owner's connections all closed (links.c): placed last */
    pthread_mutex_t mu;       /* guards oa */
    crb_oa *oa;
    char name[];
} crk_segment;

/* --- clients and tombstones -------------------------------------------------- */

#define CRK_LINK_BUCKETS 256
typedef struct crk_link crk_link;
/* links.c: free the connection counts (service destroy). */
void crk_links_destroy(crk_service *s);

typedef struct crk_client {
    struct crk_client *next;
    crk_client_id id;
    uint64_t last_seen;
    uint64_t fence_until; /* latest fence of a segment it mounted (for health) */
    bool need_remount;    /* a (re)mount of one of its segments failed */
} crk_client;

/* An unmounted segment name whose memory [base, end) may still be read or
 * written until `horizon`: a new mount of the name over that range is
 * fenced until then (one over other memory is not: an old descriptor's
 * addresses are outside it, and the engine refuses them). */
typedef struct crk_tomb {
    struct crk_tomb *next;
    uint64_t horizon;
    uint64_t base, end;
    char name[];
} crk_tomb;

/* --- service ----------------------------------------------------------------- */

typedef struct crk_counters {
    _Atomic uint64_t requests[CRK_OP_COUNT];
    _Atomic uint64_t failures[CRK_OP_COUNT];
    _Atomic uint64_t batch_items[CRK_OP_COUNT];
    _Atomic uint64_t batch_failed_items[CRK_OP_COUNT];
    _Atomic uint64_t evictions_attempted, evictions_successful, evicted_keys, evicted_bytes;
    _Atomic uint64_t alloc_failures, partial_allocations;
    _Atomic uint64_t put_start_discards, put_start_releases;
    _Atomic uint64_t lease_releases, early_releases, early_released_bytes, discard_entries;
    /* failed-allocation evictions since the last summary line (eviction.c) */
    _Atomic uint64_t alloc_evictions, alloc_evicted_bytes, alloc_evicted_keys;
    _Atomic uint64_t alloc_evict_logged_ms;
    _Atomic uint64_t clients_expired;
    _Atomic uint64_t owned_writes_revoked; /* crk_revoke_conn_writes */
    _Atomic uint64_t granted_puts;         /* crk_put_end_granted that completed a key */
    _Atomic uint64_t ahead_puts;           /* crk_put_end_ahead that committed a key ahead */
    /* gauges (keys, writes in flight and leases granted are per shard;
     * allocated bytes are the segments' used bytes: see crk_allocated) */
    _Atomic uint64_t capacity, soft_pinned, hard_pinned, discarded;
} crk_counters;

struct crk_service {
    crk_config cfg;
    uint64_t start_ms;
    crk_shard shards[CRK_NUM_SHARDS];

    pthread_rwlock_t seg_lock;
    crk_segment **seg_buckets; /* by name hash */
    size_t seg_nbuckets;
    crk_segment **segs; /* dense, for iteration and sampling */
    size_t nsegs, segs_cap;
    crk_tomb *tombs;

    pthread_mutex_t clients_lock;
    crk_client **cl_buckets;
    size_t cl_nbuckets, nclients;

    pthread_mutex_t evict_lock;
    _Atomic uint64_t evict_rounds; /* bumped after each round */

    pthread_mutex_t links_lock; /* links.c: bound connections per client */
    struct crk_link *links[CRK_LINK_BUCKETS];

    _Atomic uint64_t epoch_counter;
    /* object versions (crk_next_version): from (random 24 bits << 40) + 1, so a client's
     * cached location of another master instance's object does not match by chance */
    _Atomic uint64_t next_version;
    _Atomic uint64_t conn_tags;        /* crk_conn_tag: the last one handed out */
    _Atomic uint64_t rng;              /* seeds each thread's stream (rng.h) */
    crb_sipkey hash_key;               /* of crk_key_hash, random per service */
    _Atomic bool stopping;             /* crk_service_stop_scans: long scans give up */
    crk_expired_segment_fn on_expired; /* set before sharing; read by the tick */
    void *on_expired_ctx;
    /* HA (master/ha_repl.c), set before sharing: told of each finished
     * unmount under seg_lock (write), so the log orders it before any
     * reuse of the name. NULL without HA. */
    void (*ha_unmounted)(void *ctx, const struct crk_segment *seg);
    /* ... and of every object erased (remove, eviction, purge, sweeps), under
     * its shard lock, so standbys forget it in effect order. */
    void (*ha_erased)(void *ctx, const char *key, size_t len);
    /* ... and of every disk copy made or dropped (master/offload.c, under its
     * mutex): on_disk false when the key has no disk copy any more. */
    void (*ha_disk)(void *ctx, const char *key, size_t len, crk_client_id holder, uint64_t version,
                    uint64_t size, bool on_disk);
    void *ha_ctx;
    crk_counters c;
    struct crk_offload *off; /* the disk tier (master/offload.h); NULL without enable_offload */
    crk_stage_notify_fn on_stage; /* crk_service_on_stage_results */
    void *on_stage_ctx;
    crk_tasks_notify_fn on_tasks; /* crk_service_on_holder_tasks */
    void *on_tasks_ctx;
};

/* --- helpers shared between files --------------------------------------------- */

#define CRK_RELAXED       memory_order_relaxed
#define crk_add(field, v) atomic_fetch_add_explicit(&(field), (uint64_t)(v), CRK_RELAXED)
#define crk_sub(field, v) atomic_fetch_sub_explicit(&(field), (uint64_t)(v), CRK_RELAXED)
#define crk_get(field)    atomic_load_explicit(&(field), CRK_RELAXED)

static inline uint64_t crk_elapsed(uint64_t now, uint64_t since)
{
    return now > since ? now - since : 0;
}

static inline uint64_t crk_sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static inline bool crk_id_eq(crk_client_id a, crk_client_id b)
{
    return a.hi == b.hi && a.lo == b.lo;
}

static inline bool crk_id_valid(crk_client_id a)
{
    return a.hi != 0 || a.lo != 0;
}

/* The key hash: SipHash-1-3 (base/siphash.h) under the service's random
 * key, so clients cannot choose colliding keys or segment names. */
static inline uint64_t crk_key_hash(const crk_service *s, const void *p, size_t n)
{
    return crb_siphash13(&s->hash_key, p, n);
}

/* The shard of a key whose crk_key_hash is h. */
static inline crk_shard *crk_shard_for(crk_service *s, uint64_t h)
{
    return &s->shards[(h >> 40) % CRK_NUM_SHARDS];
}

/* Bytes allocated in all mounted (or unmounting) segments. Takes seg_lock. */
uint64_t crk_allocated(crk_service *s);

/* Allocated bytes of one replica of a value of `size` bytes. */
static inline uint64_t crk_rep_bytes(const crk_service *s, uint64_t size)
{
    uint64_t a = s->cfg.alloc_alignment;
    uint64_t v = size ? size : 1;
    return v > UINT64_MAX - (a - 1) ? UINT64_MAX : (v + a - 1) & ~(a - 1);
}

/* clients.c */
/* Find or create a client and refresh its heartbeat (clients_lock held);
 * *out (may be NULL) is its record. */
int crk_client_touch_locked(crk_service *s, crk_client_id id, uint64_t now, crk_client **out);
/* Expire clients silent for client_ttl_ms, unmounting their segments. */
int crk_expire_clients(crk_service *s, uint64_t now);
/* Free the client table (destroy). */
void crk_clients_destroy(crk_service *s);

/* segments.c */
/* HA promotion (master/ha_restore.c): mount spec for owner with the given
 * epoch, unfenced, creating the client record (last seen now). *out is the
 * segment (valid while mounted). CR_SEGMENT_ALREADY_EXISTS if the name is
 * taken. */
int crk_restore_segment(crk_service *s, crk_client_id owner, const crk_segment_spec *spec,
                        uint64_t epoch, uint64_t now_ms, crk_segment **out);
typedef struct crk_place_info {
    bool any_fits;                         /* an open segment's capacity holds the value */
    bool any_fenced;                       /* a segment was skipped because of its fence */
    uint64_t min_fence;                    /* earliest fence end among those */
    uint8_t fence_reason;                  /* CRK_FENCE_* of that segment */
    char fenced[CRK_MAX_SEGMENT_NAME + 1]; /* its name */
} crk_place_info;

/* Allocate up to `want` replicas of alloc_size on distinct segments: the
 * preferred ones first, then (allocation_strategy local_first) the writer's
 * own, then sampled ones by free ratio (free_ratio_first: all of them). */
uint32_t crk_place(crk_service *s, uint64_t alloc_size, uint32_t want, const char *const *preferred,
                   size_t n_preferred, crk_client_id writer, uint64_t seed, uint64_t now,
                   crk_replica *out, crk_place_info *info);
void crk_free_replica(const crk_replica *r);
void crk_note_horizon(crk_segment *seg, uint64_t until);
int crk_unmount_begin_locked(crk_service *s, crk_segment *seg);
void crk_unmount_finish(crk_service *s, crk_segment *seg, uint64_t now);
void crk_prune_tombs(crk_service *s, uint64_t now);
void crk_segments_destroy(crk_service *s);

/* objects.c */
/* Remove every replica on `seg` from shard `sh` (shard locked); returns the
 * latest deadline until which a writer may still write into seg. */
uint64_t crk_purge_segment_locked(crk_service *s, crk_shard *sh, crk_segment *seg);
/* Erase an object with no write in flight (shard locked): table, LRU,
 * gauges; its replicas are freed, or deferred until its lease ends. */
void crk_erase_object_locked(crk_service *s, crk_shard *sh, crk_object *o, uint64_t now);
/* Free reps now if release_at <= now, else park them in a discard entry.
 * `readers` (may be NULL) is the object version the replicas belonged to:
 * its lease era and reader count go with the entry, so the last reader's
 * crk_release_leases frees it early. */
void crk_release_or_defer(crk_service *s, crk_shard *sh, const crk_replica *reps, uint32_t n,
                          uint64_t value_size, uint64_t release_at, uint64_t now,
                          const crk_object *readers);
/* Free a discard entry's replicas now and uncount it (it is unlinked). */
void crk_discard_free(crk_service *s, crk_discard *d);

/* eviction.c */
uint64_t crk_evict_round(crk_service *s, uint64_t target_bytes, uint64_t now, uint64_t *keys_out);

void crk_evict_for_alloc(crk_service *s, uint64_t need_bytes, uint64_t seen_rounds, uint64_t now);
void crk_shard_housekeeping_locked(crk_service *s, crk_shard *sh, uint64_t now);

/* A new object version: unique within this master instance (see next_version). */
static inline uint64_t crk_next_version(crk_service *s)
{
    return atomic_fetch_add_explicit(&s->next_version, 1, memory_order_relaxed);
}

#endif
