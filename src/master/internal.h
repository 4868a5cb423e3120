/*
 * internal.h - data structures shared by the master core's source files
 * (service.c: lifecycle, clients, tick, stats; segments.c: segment table,
 * mounts, placement; objects.c: object table, puts, reads, removal;
 * eviction.c: eviction, deferred releases, stale-write sweeps).
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
#include "master/service.h"

/* --- segments -------------------------------------------------------------- */

enum { CRK_SEG_MOUNTED = 0, CRK_SEG_UNMOUNTING = 1 };

typedef struct crk_segment {
    struct crk_segment *hnext; /* name-hash chain (seg_lock) */
    uint32_t dense;            /* index in s->segs (seg_lock) */
    uint32_t name_len;
    crk_client_id owner;
    uint64_t base, size, capacity;
    uint64_t epoch;
    uint64_t fence_until;     /* no allocation before this; immutable once published */
    _Atomic int state;        /* CRK_SEG_*; set under seg_lock (write) and mu */
    _Atomic uint64_t used;    /* mirrors crb_oa_used(oa); written under mu */
    _Atomic uint64_t horizon; /* latest lease/writer deadline on this memory */
    pthread_mutex_t mu;       /* guards oa */
    crb_oa *oa;
    char name[];
} crk_segment;

/* A replica: a range of one segment. */
typedef struct crk_replica {
    crk_segment *seg;
    uint64_t offset;
    uint32_t node; /* allocator handle */
} crk_replica;

/* Space waiting for a deferred release (a lease or a slow writer may still
 * touch it). Lives in the shard of the key it belonged to. */
typedef struct crk_discard {
    struct crk_discard *next;
    uint64_t release_at;
    uint64_t bytes; /* allocated bytes, for the discarded_bytes gauge */
    uint32_t nrep;
    crk_replica rep[];
} crk_discard;

/* --- objects --------------------------------------------------------------- */

#define CRK_OBJ_COMPLETE 0x01u /* rep[] is readable */
#define CRK_OBJ_HARD_PIN 0x02u
#define CRK_OBJ_SOFT_PIN 0x04u /* soft_pin_until is a deadline */
#define CRK_OBJ_IN_LRU   0x08u

struct crk_write;

/*
 * One key. Allocated as one block: header, key bytes + NUL padded to 8, then
 * the replica array (crk_obj_reps). 64 bytes of header; see the memory test.
 */
typedef struct crk_object {
    struct crk_object *lru_prev, *lru_next; /* shard LRU, head = least recent */
    struct crk_write *write;                /* write in flight, or NULL */
    uint64_t size;                          /* value size */
    uint64_t lease_until;                   /* read lease deadline (0: none) */
    uint64_t soft_pin_until;                /* CRK_OBJ_SOFT_PIN: deadline */
    uint64_t last_access;                   /* put_end or last get: the LRU clock */
    uint32_t hash;                          /* low 32 bits of the key hash */
    uint16_t key_len;
    uint8_t nrep;
    uint8_t flags;
    char key[]; /* key_len bytes + NUL, then padding, then crk_replica[nrep] */
} crk_object;

/*
 * A put or upsert in flight. For a first put the replicas are the object's
 * own (object not CRK_OBJ_COMPLETE); for an upsert of a complete object
 * they are in rep[] here. Linked in its shard's list, oldest first.
 */
typedef struct crk_write {
    struct crk_write *prev, *next;
    crk_object *obj;
    crk_client_id owner;
    uint64_t start_ms;
    uint64_t size;         /* value size of the new version */
    uint64_t soft_pin_ttl; /* resolved TTL when soft_action is ENABLE */
    uint8_t soft_action;
    uint8_t hard_pin;
    uint8_t upsert; /* rep[] holds the new replicas */
    uint8_t nrep;
    crk_replica rep[];
} crk_write;

/* A slot of a shard's open-addressed table: the key hash's low 32 bits
 * (compared before the object is touched) and the object, NULL if empty. */
typedef struct crk_slot {
    uint32_t hash;
    crk_object *obj;
} crk_slot;

typedef struct crk_shard {
    _Alignas(64) pthread_mutex_t mu;
    crk_slot *slots; /* linear probing, at most 3/4 full */
    size_t nslots;   /* power of two */
    /* slots and nslots - 1 again, for batch prefetching without the lock: a
     * stale pair only makes a prefetch useless (a prefetch never faults).
     * On a line of their own: written only when the table grows, read by
     * every thread, so they must not share a line with the mutex or the
     * counters and lists below that each put writes. */
    _Alignas(64) _Atomic(crk_slot *) hint_slots;
    _Atomic size_t hint_mask;
    _Alignas(64) size_t nobjs;
    /* Gauges and counters kept per shard and summed when read, so that two
     * threads putting keys in different shards never write one cache line
     * (written under mu, read anywhere). */
    _Atomic uint64_t keys, writes, leases_granted;
    crk_object *lru_head, *lru_tail;
    size_t lru_count;
    crk_write *w_head, *w_tail;
    crk_discard *discards;
} crk_shard;

/* --- clients and tombstones -------------------------------------------------- */

typedef struct crk_client {
    struct crk_client *next;
    crk_client_id id;
    uint64_t last_seen;
} crk_client;

/* An unmounted segment name whose memory may still be read or written until
 * `horizon`: a new mount of the name is fenced until then. */
typedef struct crk_tomb {
    struct crk_tomb *next;
    uint64_t horizon;
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
    _Atomic uint64_t clients_expired;
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

    _Atomic uint64_t epoch_counter;
    _Atomic uint64_t rng;
    crk_counters c;
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

/* 64-bit hash of bytes. */
uint64_t crk_hash_bytes(const void *p, size_t n);

/* A random 64-bit value: splitmix64 over a per-thread counter (seeded once
 * per thread from the service), mixed with seed. */
uint64_t crk_random(crk_service *s, uint64_t seed);

/* Bytes allocated in all mounted (or unmounting) segments. Takes seg_lock. */
uint64_t crk_allocated(crk_service *s);

/* Allocated bytes of one replica of a value of `size` bytes. */
static inline uint64_t crk_rep_bytes(const crk_service *s, uint64_t size)
{
    uint64_t a = s->cfg.alloc_alignment;
    uint64_t v = size ? size : 1;
    return v > UINT64_MAX - (a - 1) ? UINT64_MAX : (v + a - 1) & ~(a - 1);
}

static inline crk_replica *crk_obj_reps(crk_object *o)
{
    return (crk_replica *)(void *)(o->key + (((size_t)o->key_len + 1 + 7) & ~(size_t)7));
}

/* service.c */
/* Find or create a client and refresh its heartbeat (clients_lock held). */
int crk_client_touch_locked(crk_service *s, crk_client_id id, uint64_t now);

/* segments.c */
typedef struct crk_place_info {
    bool any_fits;      /* an open segment's capacity holds the value */
    bool any_fenced;    /* a segment was skipped because of its fence */
    uint64_t min_fence; /* earliest fence end among those */
} crk_place_info;

uint32_t crk_place(crk_service *s, uint64_t alloc_size, uint32_t want, const char *const *preferred,
                   size_t n_preferred, uint64_t seed, uint64_t now, crk_replica *out,
                   crk_place_info *info);
void crk_free_replica(const crk_replica *r);
void crk_note_horizon(crk_segment *seg, uint64_t until);
int crk_unmount_begin_locked(crk_service *s, crk_segment *seg);
void crk_unmount_finish(crk_service *s, crk_segment *seg, uint64_t now);
void crk_prune_tombs(crk_service *s, uint64_t now);
void crk_segments_destroy(crk_service *s);

/* objects.c */
int crk_shards_init(crk_service *s);
void crk_shards_destroy(crk_service *s);
/* Remove every replica on `seg` from shard `sh` (shard locked); returns the
 * latest deadline until which a writer may still write into seg. */
uint64_t crk_purge_segment_locked(crk_service *s, crk_shard *sh, crk_segment *seg);
/* Erase an object with no write in flight (shard locked): table, LRU,
 * gauges; its replicas are freed, or deferred until its lease ends. */
void crk_erase_object_locked(crk_service *s, crk_shard *sh, crk_object *o, uint64_t now);
void crk_lru_move_to_tail(crk_shard *sh, crk_object *o);
/* Free reps now if release_at <= now, else park them in a discard entry. */
void crk_release_or_defer(crk_service *s, crk_shard *sh, const crk_replica *reps, uint32_t n,
                          uint64_t value_size, uint64_t release_at, uint64_t now);
void crk_write_unlink(crk_shard *sh, crk_write *w);

/* eviction.c */
uint64_t crk_evict_round(crk_service *s, uint64_t target_bytes, uint64_t now, uint64_t *keys_out);

void crk_evict_for_alloc(crk_service *s, uint64_t need_bytes, uint64_t seen_rounds, uint64_t now);
void crk_shard_housekeeping_locked(crk_service *s, crk_shard *sh, uint64_t now);

#endif
