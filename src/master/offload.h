/*
 * offload.h - the master's side of the disk tier (docs/disk-tier.md, phase
 * B): which clients hold a disk tier, which keys live on whose disk, and the
 * per-holder mailboxes of offload / stage / remove / promote tasks that the
 * holders collect with OFFLOAD_HEARTBEAT (proto/offload.h).
 *
 * Model. A key is in one of three places: memory only (the object table),
 * memory and disk (a DISK entry next to the object: write-behind or a
 * promoted object), or disk only (a DISK entry, no object). A PENDING entry
 * is an offload task in flight for an object still in memory; an eviction
 * that queued it marked the object CRK_OBJ_OFFLOADING (out of the LRU, still
 * readable) and its memory is released only when the holder reports the
 * record written ("before the memory is reused"). Every task carries a
 * version (unique per master instance: its top 24 bits are random per
 * instance); the holder stores it as the record's metadata and a result or a
 * re-announce is accepted only if it names the entry's current version, so
 * a removed or overwritten key is never routed to a disk copy again.
 *
 * Gets of a disk-only key answer CR_ERR_OFFLOAD_STAGING and queue a STAGE
 * task; the holder reads the value into its staging area (registered with
 * its engine) and reports the address; the next get answers that address
 * as a replica on the holder's engine segment, with a lease that ends
 * before the holder reuses the staging space.
 *
 * Locking: one mutex (mu), a leaf: it may be taken with a shard lock held
 * (shard.mu -> offload.mu), never the other way round. Every change of an
 * entry that must agree with the object table (offload success, upsert,
 * remove) happens with the key's shard locked.
 */
#ifndef CRESCENT_MASTER_OFFLOAD_H
#define CRESCENT_MASTER_OFFLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master/object_table.h"
#include "master/service.h"
#include "proto/messages.h"

struct crk_shard;

/* The object is being written to its holder's disk (not in the LRU). */
#define CRK_OBJ_OFFLOADING 0x10u

/** Counters and gauges for /metrics (a snapshot). */
typedef struct crk_off_stats {
    uint64_t holders;          /* holders heard from within client_ttl */
    uint64_t disk_objects;     /* keys with a disk copy */
    uint64_t disk_bytes;       /* holders' bucket file bytes (their last heartbeat) */
    uint64_t disk_capacity;    /* holders' capacities */
    uint64_t tasks_pending;    /* tasks waiting in mailboxes */
    uint64_t writes;           /* offloads the holders reported written */
    uint64_t reads;            /* disk reads the master asked for (stage + promote) */
    uint64_t staged_hits;      /* gets answered from a staging area */
    uint64_t promotions;       /* promotions the holders reported done */
    uint64_t compactions;      /* holders' compactions (their last heartbeat) */
    uint64_t offload_failures; /* offloads the holders reported failed */
    uint64_t refused;          /* results / announces refused (stale version) */
    uint64_t evictions_kept;   /* evictions the tier could not take that kept the object */
    uint64_t evictions_forced; /* ... that dropped it (--offload_force_evict) */
    uint64_t promotions_in_flight;
    uint64_t early_writes; /* early write-behind offloads queued (ahead of eviction) */
} crk_off_stats;

/** Set up s->off when cfg.enable_offload (else s->off stays NULL): 0 or CR_ERR_NO_MEMORY. */
int crk_off_create(crk_service *s);
void crk_off_destroy(crk_service *s);

/** What an eviction of an object does with the disk tier. */
typedef enum crk_off_evict_action {
    CRK_OFF_EVICT_ERASE = 0, /* erase it now: an up-to-date disk copy exists, no holder has a
                                tier, or --offload_force_evict drops what the tier cannot take */
    CRK_OFF_EVICT_TAKEN,     /* an offload task was queued: o is marked CRK_OBJ_OFFLOADING
                                and out of the LRU; the caller must not erase it */
    CRK_OFF_EVICT_KEEP,      /* the holder's queue is full (--offloading_queue_limit): o
                                stays in memory (moved to its LRU's tail); not freed */
} crk_off_evict_action;

/** Eviction of o (its shard sh locked), in an eviction round (s->evict_lock held). */
crk_off_evict_action crk_off_evict_locked(crk_service *s, struct crk_shard *sh, crk_object *o,
                                          uint64_t now);

/** o (flagged CRK_OBJ_OFFLOADING, its shard locked) is being erased (removed, its segment
 *  gone, ...): a pending offload of it no longer frees memory and is dropped. */
void crk_off_object_gone_locked(crk_service *s, const crk_object *o);

/** A put or upsert of o completed (its shard locked): the key's disk copy (or offload in
 *  flight) is dropped unless this write is a promotion (the holder putting that very copy
 *  back); write-behind (enable_offload without offload_on_evict) queues an offload. */
void crk_off_put_end_locked(crk_service *s, crk_object *o, bool promotion, uint64_t now);

/** May `client` start a (non-upsert) put of key? False (the key exists on disk) unless the
 *  client is its holder (a promotion). */
bool crk_off_put_allowed(crk_service *s, const char *key, size_t len, crk_client_id client);

/** A get of a key absent from the object table: 0 with out filled (a staged copy),
 *  CR_ERR_OFFLOAD_STAGING (retry soon), CR_ERR_OFFLOAD_UNAVAILABLE, or CR_OBJECT_NOT_FOUND. */
int crk_off_get(crk_service *s, const char *key, size_t len, uint64_t now, crk_replica_list *out);

/** A reader of a staged copy is done (RELEASE_LEASES with a token that has bit 63 set):
 *  when it was the last, the holder is told to free the staging space. */
void crk_off_release(crk_service *s, const char *key, uint64_t token);

/** Is key on disk? 1 or 0. */
int crk_off_exist(crk_service *s, const char *key, size_t len);

/** Drop key's disk copy (a remove): 0, or CR_OBJECT_NOT_FOUND when it had none. */
int crk_off_remove(crk_service *s, const char *key, size_t len);

/** Drop every disk copy in the namespace (ns NULL: all; nl 0: the default tenant's):
 *  returns how many. */
uint64_t crk_off_remove_all(crk_service *s, const char *ns, size_t nl);

/** query_key of a key absent from the object table: 0 with *out filled for its disk copy
 *  (complete, on_disk, one replica: the holder's segment name, address 0, epoch 0), or
 *  CR_OBJECT_NOT_FOUND. No lease, nothing staged. */
int crk_off_query(crk_service *s, const char *key, size_t len, uint64_t now,
                  struct crk_key_info *out);

struct crk_regex;
/** remove_by_regex's pass over the disk-only keys of namespace ns (as crk_off_remove_all):
 *  each key (without the ns prefix) that re matches and that is absent from the object
 *  table loses its disk copy (the holder is told). Adds the removed keys to *count.
 *  0, CR_ERR_NO_MEMORY, or the regex's error. Takes shard locks: call with none held. */
int crk_off_remove_matching(crk_service *s, const char *ns, size_t nl, struct crk_regex *re,
                            uint64_t *count);

/**
 * One OFFLOAD_HEARTBEAT of `client`: apply the results and reports in
 * body[0..len) and encode the reply (tasks) into *reply. 0, or
 * CR_NOT_SUPPORTED (no --enable_offload), CR_ERR_MALFORMED_FRAME, CR_ERR_NO_MEMORY.
 */
int crk_off_heartbeat(crk_service *s, crk_client_id client, const void *body, size_t len,
                      uint64_t now, crp_buf *reply);

/** Memory bytes of objects being offloaded for an eviction: allocated still, but
 *  released as soon as their holders report them written (eviction counts them as freed). */
uint64_t crk_off_leaving_bytes(crk_service *s);

/** Fill *out (zeros when offload is off). */
void crk_off_get_stats(crk_service *s, crk_off_stats *out);

/** HA snapshot: fn(ctx, key, len, holder, version, size) for every key with a disk copy,
 *  under the table's mutex (fn must not call back into the disk tier). */
void crk_off_each_disk(crk_service *s,
                       void (*fn)(void *, const char *, size_t, crk_client_id, uint64_t, uint64_t),
                       void *ctx);

/** HA promotion: key has a disk copy of `version` on holder's disk (replacing what the
 *  table had). segment (the holder's engine segment; NULL if it has none mounted): an
 *  unknown holder gets a record, live from `now` as after a heartbeat. 0 (also without a
 *  disk tier: nothing to do) or CR_ERR_NO_MEMORY. */
int crk_off_restore_disk(crk_service *s, const char *key, size_t len, crk_client_id holder,
                         const char *segment, uint64_t version, uint64_t size, uint64_t now);

struct crk_text;
/** Append the disk tier's /metrics families (master_disk_*, master_offload_*) to t;
 *  nothing when offload is off. */
void crk_off_prom(crk_service *s, struct crk_text *t);

#endif
