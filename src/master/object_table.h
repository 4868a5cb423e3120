/*
 * object_table.h - one shard of the master's object table: the key -> object
 * hash table, the LRU list of evictable objects and the list of writes in
 * flight, and the object block itself. Pure data structures: no service, no
 * segments, no clock. objects.c builds the key operations on them.
 *
 * The table is open-addressed with linear probing over 16-byte slots (the
 * key hash's low 32 bits and the object pointer), so probing for an absent
 * key touches only the slot array; it doubles at 3/4 full; deletion shifts
 * later entries of the run back instead of leaving tombstones, so probes
 * never cross an empty slot and never see a dead one.
 *
 * Threading: every function requires the shard's mutex (sh->mu) held by the
 * caller, except crk_shard_init / crk_shard_destroy (no other user) and
 * crk_obj_new. The hint_* fields may be read without the lock (prefetch
 * only). The keys and writes gauges are relaxed atomics so that stats read
 * them without the lock.
 */
#ifndef CRESCENT_MASTER_OBJECT_TABLE_H
#define CRESCENT_MASTER_OBJECT_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master/service.h"

struct crk_segment;

/* A replica: a range of one segment. */
typedef struct crk_replica {
    struct crk_segment *seg;
    uint64_t offset;
    uint32_t node; /* allocator handle */
} crk_replica;

/* Space waiting for a deferred release (a lease or a slow writer may still
 * touch it). Lives in the shard of the key it belonged to. */
typedef struct crk_discard {
    struct crk_discard *next;
    uint64_t release_at;
    uint64_t bytes;     /* allocated bytes, for the discarded_bytes gauge */
    uint32_t key_hash;  /* slot hash of the key, and ... */
    uint32_t lease_era; /* ... the lease era of the version: a release names them (0: none) */
    uint16_t readers;   /* reads of that era not yet released; 0 frees the entry */
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
 * the replica array (crk_obj_reps). 80 bytes of header; see the memory test.
 *
 * Readers: every get_replica_list of a lease era (a period during which the
 * lease never lapsed) counts one reader and hands out the era as its token;
 * crk_release_leases with that token uncounts it, and the last one ends the
 * lease. A lapsed lease starts a new era with no readers, so a stale token
 * never matches again.
 */
typedef struct crk_object {
    struct crk_object *lru_prev, *lru_next; /* shard LRU, head = least recent */
    struct crk_write *write;                /* write in flight, or NULL */
    uint64_t size;                          /* value size */
    uint64_t lease_until;                   /* read lease deadline (0: none) */
    uint64_t soft_pin_until;                /* CRK_OBJ_SOFT_PIN: deadline */
    uint64_t last_access;                   /* put_end or last get: the LRU clock */
    uint64_t version; /* the committed value's version (crk_next_version): never reused */
    uint32_t hash;    /* low 32 bits of the key hash */
    uint16_t key_len;
    uint8_t nrep;
    uint8_t flags;
    uint32_t lease_era; /* era of lease_until (0: never leased) */
    uint16_t readers;   /* unreleased reads of that era; CRK_READERS_MAX = uncounted */
    uint16_t spare;     /* keeps key[] (and the replicas after it) 8-byte aligned */
    char key[];         /* key_len bytes + NUL, then padding, then crk_replica[nrep] */
} crk_object;
_Static_assert(offsetof(crk_object, key) % 8 == 0, "replicas follow the key 8-byte aligned");

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
    uint8_t promotion; /* the disk tier's holder puts a disk-only key back (master/offload.h) */
    /* Committed ahead (docs/WIRE.md, "Commit ahead"): a grant's write moved to its key
     * before the value was written; its object already has its version, and its reads
     * answer CR_ERR_PUT_COMMITTING (held by the RPC server) until it ends. */
    uint8_t ahead;
    /* Owned writes (crk_replicate_config.owner_conn): the connection that
     * owns it (0: none) and when its space may be reused once that
     * connection closed (start + the writer's declared bound). */
    uint64_t conn;
    uint64_t own_until;
    crk_replica rep[];
} crk_write;

#define CRK_READERS_MAX UINT16_MAX

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
    crk_discard *discards; /* deferred releases, newest first */
} crk_shard;

static inline crk_replica *crk_obj_reps(crk_object *o)
{
    return (crk_replica *)(void *)(o->key + (((size_t)o->key_len + 1 + 7) & ~(size_t)7));
}

/* --- the shard ---------------------------------------------------------------- */

/** Set up an empty shard (16 slots). CR_ERR_NO_MEMORY or 0. */
int crk_shard_init(crk_shard *sh);

/** Free every object (and its write), every discard entry, the slots and the
 *  mutex. Replicas are not freed (their segments are being destroyed too). */
void crk_shard_destroy(crk_shard *sh);

/** Index of the slot holding key (len bytes, slot hash h), or of the empty
 *  slot that ends its probe run (slots[i].obj == NULL: absent). */
size_t crk_shard_probe(const crk_shard *sh, const char *key, size_t len, uint32_t h);

/** Index of the slot holding o, which must be in the table. */
size_t crk_shard_slot_of(const crk_shard *sh, const crk_object *o);

/** Empty slot i, shifting later entries of its run back. */
void crk_shard_slot_clear(crk_shard *sh, size_t i);

/** Room for one more object: grows at 3/4 full. CR_ERR_NO_MEMORY only when
 *  the table could not grow and would have no empty slot left. */
int crk_shard_reserve(crk_shard *sh);

/** Insert o (known absent) after crk_shard_reserve succeeded; counts a key. */
void crk_shard_insert(crk_shard *sh, crk_object *o);

/** Take o out of the table and the LRU; uncounts a key. o is not freed. */
void crk_shard_remove(crk_shard *sh, crk_object *o);

/* --- LRU (complete, not hard-pinned objects; head = least recently used) --- */

void crk_lru_push_tail(crk_shard *sh, crk_object *o);
/** No-op for an object not in the list. */
void crk_lru_unlink(crk_shard *sh, crk_object *o);
/** No-op for an object not in the list. */
void crk_lru_move_to_tail(crk_shard *sh, crk_object *o);

/* --- writes in flight (oldest first) -------------------------------------------- */

/** Append w and count a write in flight. */
void crk_write_push(crk_shard *sh, crk_write *w);
/** Unlink w (not uncounted, not freed). */
void crk_write_unlink(crk_shard *sh, crk_write *w);
/** Unlink, uncount and free w; clears its object's write pointer. */
void crk_write_drop(crk_shard *sh, crk_write *w);

/* --- objects ------------------------------------------------------------------- */

/** A zeroed object block for key (len bytes, slot hash h) with room for nrep
 *  replicas (nrep set); NULL without memory. Free with crk_free. */
crk_object *crk_obj_new(const char *key, size_t len, uint32_t h, uint32_t nrep);

#endif
