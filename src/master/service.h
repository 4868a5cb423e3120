/*
 * service.h - the store master's in-memory core: clients, segments, objects,
 * replicas, leases, pins, eviction and metrics. No networking: an RPC server
 * wraps these calls. Time is injected: every entry point takes `now_ms`, a
 * monotonic millisecond clock chosen by the caller (crb_now_ms() in the
 * daemon, scripted values in tests), so every timeout is deterministic.
 * Calls tolerate slightly non-monotonic `now_ms` across threads.
 *
 * Model (Mooncake's master, with the lessons of its issues applied):
 *   - Clients (128-bit ids) mount segments: named byte ranges of their memory
 *     [base, base + size). Each mount gets a mount epoch, unique within this
 *     service (epoch_base + counter), carried in every replica descriptor.
 *   - An object is a key with 1..CRK_MAX_REPLICAS replicas of `value_size`
 *     bytes, each on a DISTINCT segment. Two-phase put: put_start allocates
 *     replicas (object invisible), the owner writes the bytes, put_end makes
 *     the object readable (put_revoke frees the allocation).
 *   - Reads (get_replica_list) see only complete objects and grant a read
 *     lease (default_kv_lease_ttl_ms) that protects the object from remove
 *     and eviction. exist/batch_exist never grant or extend leases and never
 *     touch LRU recency, so probes cannot starve eviction (Mooncake #2187).
 *   - Space that a reader might still read is never reused while its lease
 *     runs: force-remove, upsert and the restart fence all defer reuse.
 *
 * Status codes are crescent/status.h's (Mooncake's numbers). Every failure
 * records a detail message with crb_error() (cr_last_error_message()).
 * Output parameters are written only on success; batch calls always write
 * their per-key result array and write per-key outputs only for keys that
 * succeeded.
 *
 * Threading: every function may be called from any thread concurrently,
 * except crk_service_destroy (no other call may be running or follow). The
 * object table is split into CRK_NUM_SHARDS shards by key hash, each with its
 * own mutex; calls on different keys mostly run in parallel. The lock order
 * is documented in internal.h.
 */
#ifndef CRESCENT_MASTER_SERVICE_H
#define CRESCENT_MASTER_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crescent/status.h"

/* Keys are at most CRK_MAX_KEY_LEN bytes, excluding the NUL: a wire key
 * (4096) in a tenant's namespace (master/tenants.h). */
#define CRK_NUM_SHARDS       64
#define CRK_MAX_KEY_LEN      (4096 + 130)
#define CRK_MAX_SEGMENT_NAME 256 /* bytes, excluding the NUL (= CRP_MAX_NAME) */
#define CRK_MAX_REPLICAS     8

typedef struct crk_service crk_service;

/** A client identity (a UUID: two 64-bit halves). All-zero is invalid. */
typedef struct crk_client_id {
    uint64_t hi, lo;
} crk_client_id;

/** Ping results: Mooncake's ClientStatus values. */
enum crk_client_status {
    CRK_CLIENT_UNDEFINED = 0,
    CRK_CLIENT_OK = 1,
    CRK_CLIENT_NEED_REMOUNT = 2,
};

/** Soft-pin actions: Mooncake's SoftPinAction values. */
enum crk_soft_pin_action {
    CRK_SOFT_PIN_PRESERVE = 0, /* fresh object: no pin; upsert: keep the old deadline */
    CRK_SOFT_PIN_ENABLE = 1,   /* pin for a TTL from the moment the object becomes readable */
    CRK_SOFT_PIN_DISABLE = 2,  /* no pin (clears an upserted object's pin) */
};

/** Replica placement (Mooncake's --allocation_strategy). */
typedef enum crk_alloc_strategy {
    CRK_ALLOC_RANDOM = 0,           /* "random": sample a few segments, emptiest first */
    CRK_ALLOC_FREE_RATIO_FIRST = 1, /* "free_ratio_first": every segment, emptiest first */
    CRK_ALLOC_LOCAL_FIRST = 2,      /* "local_first": the writer's own segments first */
} crk_alloc_strategy;

typedef struct crk_config {
    uint64_t default_kv_lease_ttl_ms;      /* 10000: read lease granted by get_replica_list */
    uint64_t default_kv_soft_pin_ttl_ms;   /* 1800000: TTL for ENABLE with ttl 0 */
    uint64_t max_kv_soft_pin_ttl_ms;       /* 86400000: larger TTLs are refused (-600) */
    bool allow_evict_soft_pinned_objects;  /* true: soft-pinned objects are a last resort */
    double eviction_ratio;                 /* 0.05: fraction of used bytes one round frees */
    double eviction_high_watermark_ratio;  /* 0.90: used/capacity above this evicts in tick */
    uint64_t client_ttl_ms;                /* 10000: a client silent this long is expired */
    uint64_t put_start_discard_timeout_ms; /* 30000: an older in-flight put may be preempted */
    uint64_t put_start_release_timeout_ms; /* 600000: a preempted/stale put's space is freed */
    uint64_t alloc_alignment;              /* 64: replica offsets and sizes are multiples */
    /*
     * How long after service creation a REMOUNTED segment accepts no new
     * allocations (the restart fence, see crk_remount_segments). Must be at
     * least the lease TTL the previous master instance granted. 0 means
     * default_kv_lease_ttl_ms + 1000 ms of margin.
     */
    uint64_t restart_fence_ms;
    uint32_t max_evict_retries;             /* 2: evictions a failing put_start may run */
    uint64_t epoch_base;                    /* 0: first mount epoch is epoch_base + 1 */
    crk_alloc_strategy allocation_strategy; /* CRK_ALLOC_RANDOM */
    /* The disk tier (master/offload.h, docs/disk-tier.md). Mooncake's flags. */
    bool enable_offload;                    /* false: holders' disk tiers are not used */
    bool offload_on_evict;                  /* false: write behind at put_end instead */
    bool promotion_on_hit;                  /* false: disk hits are served from disk */
    uint32_t promotion_admission_threshold; /* 2: disk hits before a promotion (<= 255) */
    bool offload_force_evict;               /* false: an eviction the tier cannot take now
                                               (cap or queue full) keeps the object; true:
                                               drops it */
    uint64_t offloading_queue_limit;        /* 50000: offload tasks waiting per holder
                                               (1..1e8) */
    double offload_cap_ratio;               /* 0.5: offloads one eviction round may queue, as
                                               a fraction of offloading_queue_limit */
    uint32_t promotion_queue_limit;         /* 50000: promotions in flight, all holders */
    uint32_t promotion_max_per_heartbeat;   /* 1: promotions per heartbeat reply (0 = 1) */
} crk_config;

/** Fill *cfg with the defaults above (Mooncake's). */
void crk_config_default(crk_config *cfg);

/**
 * Check cfg as crk_service_create does: CR_INVALID_PARAMS naming the field
 * (a ratio outside [0,1], release timeout < discard timeout, default soft
 * pin TTL > max, alignment not a power of two, zero lease TTL or client
 * TTL, unknown allocation strategy), else 0. The daemon's flag parser calls
 * it, so a bad combination is a usage error before anything starts.
 */
int crk_config_validate(const crk_config *cfg);

/** One segment to mount: its name, client virtual address and size. */
typedef struct crk_segment_spec {
    const char *name; /* 1..CRK_MAX_SEGMENT_NAME bytes */
    uint64_t base;
    uint64_t size;
} crk_segment_spec;

/** Replication request of a put (Mooncake's ReplicateConfig). */
typedef struct crk_replicate_config {
    uint32_t replica_num; /* 1..CRK_MAX_REPLICAS; best effort */
    bool hard_pin;        /* never evicted */
    int soft_pin_action;  /* enum crk_soft_pin_action */
    /* ENABLE only: 0 = default_kv_soft_pin_ttl_ms; > max_kv_soft_pin_ttl_ms is refused.
     * Nonzero with PRESERVE/DISABLE is refused. */
    uint64_t soft_pin_ttl_ms;
    const char *const *preferred_segments; /* tried first, in order; may be NULL */
    size_t n_preferred;
    /* Owned writes (docs/WIRE.md "Owned writes"): owner_conn != 0 ties the
     * write to that connection (a crk_conn_tag); when the connection closes,
     * crk_revoke_conn_writes revokes it at once and reuses its space at
     * start + owned_ms (the writer's promise that its writing ends by then;
     * 1..put_start_release_timeout_ms, else CR_INVALID_PARAMS). owner_conn
     * 0: owned_ms is ignored, the write behaves as always. */
    uint64_t owner_conn;
    uint64_t owned_ms;
} crk_replicate_config;

/** What a client needs to move the bytes of one replica. */
typedef struct crk_replica_desc {
    char segment[CRK_MAX_SEGMENT_NAME + 1]; /* segment name (the engine's target) */
    uint64_t address;                       /* segment base + offset */
    uint64_t size;                          /* value size in bytes */
    uint64_t mount_epoch;                   /* epoch of the segment mount */
} crk_replica_desc;

/** Replicas of one object. Only r[0..n) are written. */
typedef struct crk_replica_list {
    uint64_t value_size;
    uint64_t lease_ttl_ms; /* get: the lease granted; a reader must finish by
                              request_start + lease_ttl_ms. put_start: 0 */
    uint64_t lease_token;  /* get: give it back with crk_release_leases when done */
    uint64_t version;      /* get: the object's version (crk_object.version) */
    uint32_t n;
    crk_replica_desc r[CRK_MAX_REPLICAS];
} crk_replica_list;

/** Operator view of a key (crk_query_key; grants no lease). */
typedef struct crk_key_info {
    uint64_t value_size;
    bool complete;        /* readable */
    bool write_in_flight; /* a put/upsert is in progress */
    bool committing;      /* that put was committed ahead: readable once its writer's end
                           * arrives (docs/WIRE.md, "Commit ahead"); reads wait for it */
    bool hard_pinned;
    bool soft_pinned;        /* soft pin deadline in the future */
    uint64_t lease_until_ms; /* 0 if never leased */
    uint64_t soft_pin_until_ms;
    crk_replica_list replicas; /* complete replicas (in-flight ones if not complete) */
    bool on_disk;              /* only on a holder's disk (docs/disk-tier.md): replicas.r[0] names
                                  the holder's segment, address 0, epoch 0 */
    bool disk_holder_live;     /* on_disk: its holder is heard from (a get can stage it) */
} crk_key_info;

/** Operator view of a segment. */
typedef struct crk_segment_info {
    char name[CRK_MAX_SEGMENT_NAME + 1];
    crk_client_id owner;
    uint64_t base, size;
    uint64_t capacity; /* size rounded down to the alignment */
    uint64_t used;
    uint64_t mount_epoch;
    uint64_t fenced_until_ms; /* no allocations before this (0: none) */
    bool unmounting;
} crk_segment_info;

/** Operations counted in crk_stats. */
enum crk_op {
    CRK_OP_MOUNT,
    CRK_OP_REMOUNT,
    CRK_OP_UNMOUNT,
    CRK_OP_PING,
    CRK_OP_EXIST,
    CRK_OP_GET_REPLICA_LIST,
    CRK_OP_PUT_START,
    CRK_OP_UPSERT_START,
    CRK_OP_PUT_END,
    CRK_OP_PUT_REVOKE,
    CRK_OP_REMOVE,
    CRK_OP_REMOVE_BY_REGEX,
    CRK_OP_REMOVE_ALL,
    CRK_OP_BATCH_EXIST,
    CRK_OP_BATCH_GET_REPLICA_LIST,
    CRK_OP_BATCH_PUT_START,
    CRK_OP_BATCH_UPSERT_START,
    CRK_OP_BATCH_PUT_END,
    CRK_OP_BATCH_PUT_REVOKE,
    CRK_OP_BATCH_REMOVE,
    CRK_OP_BATCH_REPLICA_CLEAR,
    CRK_OP_RELEASE_LEASES,
    CRK_OP_COUNT
};

/** snake_case name of an op ("put_start"), for metric names; "unknown" if out of range. */
const char *crk_op_name(int op);

/**
 * Counters for /metrics. Gauges are a snapshot; counters only grow. Batch ops
 * count one request per call; their keys are counted in batch_items and the
 * keys that failed in batch_failed_items.
 */
typedef struct crk_stats {
    /* gauges */
    uint64_t capacity_bytes;  /* sum of mounted segments' capacity */
    uint64_t allocated_bytes; /* bytes allocated in them (incl. in-flight, discarded) */
    uint64_t segments;
    uint64_t clients;
    uint64_t keys; /* objects, complete or in flight */
    uint64_t writes_in_flight;
    uint64_t soft_pinned_keys; /* objects configured with a soft pin */
    uint64_t hard_pinned_keys;
    uint64_t discarded_bytes; /* allocated bytes waiting for a deferred release */
    uint64_t metadata_bytes;  /* heap held by the master core (mem.h counter) */
    /* counters */
    uint64_t requests[CRK_OP_COUNT];
    uint64_t failures[CRK_OP_COUNT];
    uint64_t batch_items[CRK_OP_COUNT];
    uint64_t batch_failed_items[CRK_OP_COUNT];
    uint64_t evictions_attempted;  /* eviction rounds started */
    uint64_t evictions_successful; /* rounds that freed something */
    uint64_t evicted_keys;
    uint64_t evicted_bytes;
    uint64_t alloc_failures;       /* put_start that allocated nothing (-200) */
    uint64_t partial_allocations;  /* put_start that got fewer replicas than asked */
    uint64_t put_start_discards;   /* in-flight puts preempted */
    uint64_t put_start_releases;   /* deferred releases done */
    uint64_t owned_writes_revoked; /* writes revoked because their connection closed */
    uint64_t granted_puts;         /* keys completed on a put grant's replicas */
    uint64_t ahead_puts;           /* keys committed ahead of their copy (crk_put_end_ahead) */
    uint64_t lease_releases;       /* reads released by readers (crk_release_leases) */
    uint64_t early_releases;       /* deferred releases done because the last reader released */
    uint64_t early_released_bytes;
    uint64_t discard_entries; /* gauge: deferred releases waiting */
    uint64_t leases_granted;
    uint64_t clients_expired;
} crk_stats;

/* --- lifecycle ----------------------------------------------------------- */

/**
 * Create a service. `now_ms` is the start time: the restart fence counts from
 * it. cfg NULL means defaults. Errors: CR_INVALID_PARAMS (a ratio outside
 * [0,1], release timeout < discard timeout, default soft pin TTL > max,
 * alignment not a power of two, zero lease TTL), CR_ERR_NO_MEMORY.
 */
int crk_service_create(const crk_config *cfg, uint64_t now_ms, crk_service **out);

/** Free everything. NULL is ignored. No other call may run concurrently. */
void crk_service_destroy(crk_service *s);

/**
 * Called (on the thread running crk_tick, holding no service lock) with the
 * name of every segment unmounted because its client expired, before the
 * segment is gone. The daemon uses it for --enable_metadata_cleanup_on_timeout.
 * Set it before the service is shared between threads; NULL clears it.
 */
typedef void (*crk_expired_segment_fn)(void *ctx, const char *segment_name);
void crk_service_on_expired_segment(crk_service *s, crk_expired_segment_fn fn, void *ctx);

/**
 * Called (on the thread serving an OFFLOAD_HEARTBEAT, holding no service
 * lock, after the service applied them) with the internal keys (tenant
 * prefix included; keys[i] of lens[i] bytes, valid during the call) of the
 * stage and promotion results a holder's heartbeat reported: gets of those
 * disk-only keys held for their stage (the RPC server's stage waits) may be
 * answerable now (keys NULL: which keys is not known, every held get may be).
 * The RPC server sets it before its threads start and clears it after they
 * stopped; NULL clears it.
 */
typedef void (*crk_stage_notify_fn)(void *ctx, const char *const *keys, const size_t *lens,
                                    size_t n);
void crk_service_on_stage_results(crk_service *s, crk_stage_notify_fn fn, void *ctx);

/**
 * Called with the disk tier's lock held (so: quick, and never into the
 * service) each time a task is queued for the holder `holder`: a heartbeat of
 * it held for tasks (the RPC server's stage waits) may be answerable now. Set
 * and cleared as crk_service_on_stage_results.
 */
typedef void (*crk_tasks_notify_fn)(void *ctx, crk_client_id holder);
void crk_service_on_holder_tasks(crk_service *s, crk_tasks_notify_fn fn, void *ctx);

/**
 * Make the long scans (crk_remove_by_regex, crk_remove_all) in progress and
 * later ones give up with CR_ERR_SHUTDOWN at their next check (every 256
 * keys, every shard), so a daemon's shutdown never waits for one. One-way;
 * any thread.
 */
void crk_service_stop_scans(crk_service *s);

/** The effective configuration (restart_fence_ms resolved). Valid until destroy. */
const crk_config *crk_service_config(const crk_service *s);

/* --- clients and segments ------------------------------------------------- */

/**
 * Mount a segment of fresh memory for `client` (registering the client and
 * counting as a heartbeat). Idempotent: mounting the same name with the same
 * client, base and size again succeeds and returns the existing epoch. A
 * segment with this name that was unmounted while readers held leases on it
 * stays fenced (no allocations) until those leases have run out.
 * Errors: CR_INVALID_PARAMS (bad name, zero size, base + size overflows, size
 * below the alignment), CR_ILLEGAL_CLIENT (zero id), CR_SEGMENT_ALREADY_EXISTS
 * (name mounted by another client or with another range),
 * CR_UNAVAILABLE_IN_CURRENT_STATUS (that name is being unmounted; retry),
 * CR_ERR_NO_MEMORY. *epoch_out (may be NULL) is written on success.
 */
int crk_mount_segment(crk_service *s, crk_client_id client, const crk_segment_spec *seg,
                      uint64_t now_ms, uint64_t *epoch_out);

/**
 * Re-register a client's segments after the master (or the client's
 * registration) was lost; the client calls it after ping said NEED_REMOUNT.
 * n may be 0 (registers the client only). Segments already mounted with the
 * same owner and range are kept as they are (idempotent). Otherwise the same
 * checks as crk_mount_segment apply per segment.
 *
 * The restart fence: the remounted memory may still be read by readers that
 * got its addresses from the previous master instance, whose leases this
 * instance never saw. A remounted segment therefore accepts no allocation
 * until service start + restart_fence_ms (>= any lease the previous instance
 * could have granted, since it died before this one started), and not before
 * any lease this instance granted on an earlier mount of the same name ran
 * out. So no reader can receive bytes of a different object written into
 * memory it was still allowed to read.
 *
 * results (may be NULL) receives one status per segment. Returns 0 if every
 * segment is mounted, else the first failure.
 */
int crk_remount_segments(crk_service *s, crk_client_id client, const crk_segment_spec *segs,
                         size_t n, uint64_t now_ms, int *results);

/**
 * Unmount a segment: no new allocations from now on, its replicas vanish from
 * every object (objects left with none are erased; other replicas stay).
 * Idempotent: an unknown name succeeds. Scans the object table one shard at a
 * time, holding no global lock while it does. The segment name stays fenced
 * for a later mount until every lease granted on it has run out.
 * Errors: CR_ILLEGAL_CLIENT (the segment belongs to another client).
 */
int crk_unmount_segment(crk_service *s, crk_client_id client, const char *name, uint64_t now_ms);

/**
 * Heartbeat. *status_out = CRK_CLIENT_OK for a known client (its expiry timer
 * restarts), CRK_CLIENT_NEED_REMOUNT for one the service does not know
 * (restarted master, or the client expired) and for one whose last mount or
 * remount of a segment failed (so its segment is not mounted; it retries).
 * Errors: CR_ILLEGAL_CLIENT (zero id).
 */
int crk_ping(crk_service *s, crk_client_id client, uint64_t now_ms, int *status_out);

/** What a heartbeat tells the client. */
typedef struct crk_heartbeat_info {
    int status;         /* enum crk_client_status, as crk_ping */
    uint64_t fenced_ms; /* its segments accept no allocations for this long yet (0: none) */
} crk_heartbeat_info;

/** crk_ping with the fence of the client's segments too (for health()). */
int crk_heartbeat(crk_service *s, crk_client_id client, uint64_t now_ms, crk_heartbeat_info *out);

/**
 * Housekeeping; the server calls it periodically (e.g. every 100 ms):
 * expires clients silent for client_ttl_ms (unmounting their segments),
 * releases deferred space whose time has come, drops in-flight puts older
 * than put_start_release_timeout_ms, and evicts when used/capacity exceeds
 * eviction_high_watermark_ratio. Returns 0 (or CR_ERR_NO_MEMORY from an
 * internal step, after completing the others).
 */
int crk_tick(crk_service *s, uint64_t now_ms);

/* --- writes --------------------------------------------------------------- */

/**
 * Start a put of `key` (NUL-terminated, 1..CRK_MAX_KEY_LEN bytes) with
 * `value_size` bytes (0 allowed: an empty value) owned by `client`. Allocates
 * up to replica_num replicas on distinct segments: preferred segments first
 * (in order, unknown names skipped), then random sampling of a few segments
 * with room, best free ratio first. Best effort: out->n may be below
 * replica_num (counted as a partial allocation). The object is invisible to
 * readers until crk_put_end.
 *   - key complete: CR_OBJECT_ALREADY_EXISTS, nothing changes (Mooncake; its
 *     client reports the put as a success).
 *   - key being written and that write is younger than
 *     put_start_discard_timeout_ms: CR_OBJECT_REPLICA_BUSY (-714).
 *   - key being written for longer: the old write is preempted; its space is
 *     released only put_start_release_timeout_ms after it started (the slow
 *     writer may still be writing), and this put proceeds.
 *   - no space: evicts and retries (max_evict_retries times), then
 *     CR_NO_AVAILABLE_HANDLE (-200). Segments fenced by a remount are skipped.
 * Other errors: CR_INVALID_KEY, CR_INVALID_PARAMS (replica_num, soft pin),
 * CR_ILLEGAL_CLIENT (zero id), CR_ERR_NO_MEMORY. *out is written on success.
 */
int crk_put_start(crk_service *s, crk_client_id client, const char *key, uint64_t value_size,
                  const crk_replicate_config *cfg, uint64_t now_ms, crk_replica_list *out);

/**
 * Like crk_put_start, but a complete key is replaced: new replicas are
 * allocated while readers keep reading the old ones; crk_put_end switches to
 * the new version and frees the old replicas once no lease can still cover
 * them; crk_put_revoke keeps the old version.
 */
int crk_upsert_start(crk_service *s, crk_client_id client, const char *key, uint64_t value_size,
                     const crk_replicate_config *cfg, uint64_t now_ms, crk_replica_list *out);

/**
 * Finish the owner's put/upsert: the new replicas become readable. A repeated
 * put_end on a complete object with no write in flight is a no-op (0).
 * Errors: CR_OBJECT_NOT_FOUND, CR_ILLEGAL_CLIENT (a write of another client
 * is in flight: e.g. this one was preempted), CR_REPLICA_IS_GONE (every
 * replica of the write was on segments unmounted meanwhile; the write is
 * dropped).
 */
int crk_put_end(crk_service *s, crk_client_id client, const char *key, uint64_t now_ms);
/* crk_put_end, and on success *version_out (if not NULL): the committed
 * object's version (the one GET_REPLICA_LIST names; wire "ov" of PUT_END). */
int crk_put_end_versioned(crk_service *s, crk_client_id client, const char *key, uint64_t now_ms,
                          uint64_t *version_out);

/**
 * Put grants (docs/WIRE.md): complete `key` (put, or upsert when `upsert`) on
 * the replicas of `grant`, a fresh write in flight of the same client whose
 * replicas the client already wrote the value into; the grant key is gone
 * afterwards. The key is checked as by put_start (CR_OBJECT_ALREADY_EXISTS,
 * CR_OBJECT_REPLICA_BUSY, a stale write preempted) and gets the grant's size
 * and pins. CR_OBJECT_NOT_FOUND: `grant` is not such a write (nothing
 * changed); on any other failure the grant's space is freed. Also
 * CR_INVALID_KEY, CR_INVALID_PARAMS (key == grant), CR_ERR_NO_MEMORY.
 * *version_out (may be NULL) on success, as crk_put_end_versioned's.
 */
int crk_put_end_granted(crk_service *s, crk_client_id client, const char *key, const char *grant,
                        bool upsert, uint64_t now_ms, uint64_t *version_out);

/**
 * Commit ahead (docs/WIRE.md): put_end of `key` through `grant` sent before the client
 * writes the value. On success `key` is a write in flight of this client on the grant's
 * replicas, moved there with the grant's owner connection and bound, already versioned
 * (*version_out, may be NULL); its gets, exists and removes answer CR_ERR_PUT_COMMITTING
 * until the client's crk_put_end_versioned completes it (the same version) or the write
 * is dropped (revoked, its connection closed, its segment gone). The grant is never
 * touched by a failure (the client may still be writing into it): CR_OBJECT_NOT_FOUND
 * (grant unknown), CR_OBJECT_ALREADY_EXISTS (complete, or on a holder's disk),
 * CR_OBJECT_REPLICA_BUSY, CR_INVALID_KEY, CR_INVALID_PARAMS, CR_ERR_NO_MEMORY. Puts only.
 */
int crk_put_end_ahead(crk_service *s, crk_client_id client, const char *key, const char *grant,
                      uint64_t now_ms, uint64_t *version_out);

/**
 * Abort the owner's put/upsert and free its replicas (a fresh object is
 * erased; an upserted one keeps its old version). Errors: CR_OBJECT_NOT_FOUND,
 * CR_ILLEGAL_CLIENT, CR_INVALID_WRITE (no write in flight).
 */
int crk_put_revoke(crk_service *s, crk_client_id client, const char *key, uint64_t now_ms);

/**
 * A connection bound to client `id` opened (up) or closed (!up): the RPC
 * dispatcher's bookkeeping (master/links.c). When a client's last bound
 * connection closes, its segments are placed on only as a last resort until
 * one opens again or the client expires. Any thread; takes links_lock and
 * seg_lock (read), so call it holding no service lock.
 */
void crk_client_linked(crk_service *s, crk_client_id id, bool up);

/**
 * A fresh connection tag for owned writes (never 0, unique within this
 * service). Any thread.
 */
uint64_t crk_conn_tag(crk_service *s);

/**
 * The connection `conn` (a crk_conn_tag) closed: every write it still owns
 * is revoked now, so the key is free for another put at once (a first put's
 * object is erased; an upsert keeps the old version) and no reader ever sees
 * it, and its space is released at the write's start + owned_ms (now if that
 * has passed): the writer may still be copying into it (a process whose
 * other thread closed the socket), but not past the bound it declared.
 * Scans every shard's list of writes in flight. Returns how many writes it
 * revoked (counted in crk_stats.owned_writes_revoked). conn 0 does nothing.
 */
size_t crk_revoke_conn_writes(crk_service *s, uint64_t conn, uint64_t now_ms);

/* --- reads ---------------------------------------------------------------- */

/**
 * 1 if key has a readable (complete) replica, 0 if not; negative on error
 * (CR_INVALID_KEY). Grants no lease and does not count as an access.
 */
int crk_exist(crk_service *s, const char *key, uint64_t now_ms);

/**
 * The complete replicas of key, with a read lease of default_kv_lease_ttl_ms
 * (extending, never shortening, the current one) that blocks remove without
 * force and eviction; counts as an access for LRU. Errors: CR_INVALID_KEY,
 * CR_OBJECT_NOT_FOUND, CR_REPLICA_IS_NOT_READY (only a first put in flight).
 */
int crk_get_replica_list(crk_service *s, const char *key, uint64_t now_ms, crk_replica_list *out);

/**
 * Readers say they are done with reads that get_replica_list granted:
 * tokens[i] is the lease_token of the read of keys[i]. Each object version
 * counts the reads of its current lease. The lease keeps its TTL for
 * remove and eviction (Mooncake's semantics), but the memory of a version
 * that an upsert replaced or a forced remove dropped is freed as soon as no
 * read of it is outstanding, instead of a whole lease TTL later (issue 11
 * item 8): at once if none is, or at the last release. A reader that never
 * releases (a crashed or older client) holds the memory until the lease
 * runs out. Unknown keys and stale tokens (the lease ran out and a new one
 * began, or the version is gone) are ignored, so a late or repeated release
 * never frees memory another reader still reads. Never fails; counts
 * CRK_OP_RELEASE_LEASES.
 */
void crk_release_leases(crk_service *s, const char *const *keys, const uint64_t *tokens, size_t n,
                        uint64_t now_ms);

/* --- removal -------------------------------------------------------------- */

/**
 * Remove key. Without force a leased object is refused (CR_OBJECT_HAS_LEASE);
 * with force it goes at once, but its space is reused only after the lease
 * ran out. An object with a write in flight is refused even with force
 * (CR_REPLICA_IS_NOT_READY, Mooncake). Hard-pinned objects are removable
 * (Mooncake's Remove checks only the lease). Errors also: CR_INVALID_KEY,
 * CR_OBJECT_NOT_FOUND.
 */
int crk_remove(crk_service *s, const char *key, bool force, uint64_t now_ms);

/**
 * Remove every key matching the regular expression `pattern` (PCRE2/Perl
 * syntax, master/regex.h: a search, anywhere unless anchored). Leased
 * objects are skipped unless force; objects with a write in flight always.
 * Keys are matched outside the shard locks and every cost is bounded: a
 * pattern that exceeds the per-key matching budget stops the call with
 * CR_ERR_REGEX_BUDGET (keys already removed stay removed; the message
 * says how many). *removed_out (may be NULL) gets the count on success.
 * Errors: CR_INVALID_PARAMS (bad or oversized pattern), CR_ERR_REGEX_BUDGET,
 * CR_ERR_SHUTDOWN (crk_service_stop_scans), CR_ERR_NO_MEMORY.
 */
int crk_remove_by_regex(crk_service *s, const char *pattern, bool force, uint64_t now_ms,
                        uint64_t *removed_out);

/** Remove every object (same skipping rules). *removed_out may be NULL.
 *  Errors: CR_ERR_SHUTDOWN (crk_service_stop_scans). */
int crk_remove_all(crk_service *s, bool force, uint64_t now_ms, uint64_t *removed_out);

/* --- batches: one status per key in results[0..n) --------------------------
 * Each returns 0 after processing every key (per-key results as for the single
 * call; exist: 1/0/negative), or CR_INVALID_PARAMS if an array is NULL while n
 * > 0 (nothing processed then).
 *
 * The list-returning batches (get replica list, put/upsert start) fill one
 * crk_replica_list (a few KiB) per key, so a caller may run a large request
 * in parts: `continued` is false for the first part and true for the rest,
 * which count their keys and failures but not another request. */

int crk_batch_exist(crk_service *s, const char *const *keys, size_t n, uint64_t now_ms,
                    int *results);
int crk_batch_get_replica_list(crk_service *s, const char *const *keys, size_t n, uint64_t now_ms,
                               int *results, crk_replica_list *lists, bool continued);
int crk_batch_put_start(crk_service *s, crk_client_id client, const char *const *keys,
                        const uint64_t *value_sizes, size_t n, const crk_replicate_config *cfg,
                        uint64_t now_ms, int *results, crk_replica_list *lists, bool continued);
int crk_batch_upsert_start(crk_service *s, crk_client_id client, const char *const *keys,
                           const uint64_t *value_sizes, size_t n, const crk_replicate_config *cfg,
                           uint64_t now_ms, int *results, crk_replica_list *lists, bool continued);
int crk_batch_put_end(crk_service *s, crk_client_id client, const char *const *keys, size_t n,
                      uint64_t now_ms, int *results);
int crk_batch_put_revoke(crk_service *s, crk_client_id client, const char *const *keys, size_t n,
                         uint64_t now_ms, int *results);

/**
 * A batch put's end committed ahead of its copy (docs/WIRE.md, "Commit ahead"): each key
 * must be a fresh put in flight of `client` owned by connection `conn` (a start with "ow"
 * on it: crk_revoke_conn_writes revokes it if that connection closes before the writer's
 * end). Such a key gets its version now and is committing (reads CR_ERR_PUT_COMMITTING)
 * until crk_batch_put_end / crk_put_end_versioned completes it or the write is dropped;
 * a key already committing is left as it is (0). Per key: 0, CR_OBJECT_NOT_FOUND,
 * CR_INVALID_WRITE (no write in flight), CR_ILLEGAL_CLIENT (another client's),
 * CR_INVALID_PARAMS (an upsert, a disk promotion, or not owned by conn), CR_INVALID_KEY.
 * A refused key is left as it was.
 */
int crk_batch_put_end_ahead(crk_service *s, crk_client_id client, uint64_t conn,
                            const char *const *keys, size_t n, uint64_t now_ms, int *results);
int crk_batch_remove(crk_service *s, const char *const *keys, size_t n, bool force, uint64_t now_ms,
                     int *results);

/**
 * Drop replicas of keys (Mooncake's BatchReplicaClear). With `segment` NULL
 * or "" every replica goes: the object is removed. Otherwise only the
 * replicas on the segment of that name go, and an object left with none is
 * erased; its other replicas stay readable. The space of dropped replicas
 * goes back through the deferred-release path, exactly as for crk_remove.
 * Per key: 0 cleared; CR_INVALID_KEY; CR_OBJECT_NOT_FOUND (no such key);
 * CR_OBJECT_HAS_LEASE (a read lease is still running: skipped, there is no
 * force); CR_REPLICA_IS_NOT_READY (a put or upsert is in flight: skipped);
 * CR_REPLICA_NOT_FOUND (no replica on that segment). `client` is the caller
 * (not the owner: any client may clear); the zero id is refused for the
 * whole call with CR_ILLEGAL_CLIENT, nothing processed. Counted as
 * CRK_OP_BATCH_REPLICA_CLEAR.
 */
int crk_batch_replica_clear(crk_service *s, crk_client_id client, const char *const *keys, size_t n,
                            const char *segment, uint64_t now_ms, int *results);

/* --- operator queries and metrics ------------------------------------------ */

/** Describe key without granting a lease. Errors: CR_INVALID_KEY, CR_OBJECT_NOT_FOUND. */
int crk_query_key(crk_service *s, const char *key, uint64_t now_ms, crk_key_info *out);

/**
 * Copy up to cap segment descriptions into out (may be NULL when cap is 0);
 * *total_out gets the number of mounted segments (may exceed cap).
 */
int crk_list_segments(crk_service *s, crk_segment_info *out, size_t cap, size_t *total_out);

/** Snapshot the metrics. */
void crk_get_stats(crk_service *s, crk_stats *out);

/** Run one eviction round now, as the watermark would (tests, admin). Returns keys evicted. */
int crk_evict(crk_service *s, uint64_t target_bytes, uint64_t now_ms);

#endif
