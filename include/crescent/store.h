/*
 * crescent/store.h - the distributed KV-cache store, client side.
 *
 * A process calls cr_store_setup(): it creates a transfer engine, contributes
 * `global_segment_size` bytes of shareable memory to the cluster (mounted at
 * crescent-master), and keeps `local_buffer_size` bytes for staging copies.
 * It can then put and get objects that live in any client's segment; the
 * master only keeps metadata, the bytes move through the engine (memcpy in
 * this process, shared memory on this host, tcp elsewhere).
 *
 * Return values: 0 (or a size / count / 1-0 answer where documented) on
 * success, a negative cr_status on failure. Status codes are Mooncake's
 * ErrorCode numbers: a miss is CR_OBJECT_NOT_FOUND (-704), so "missing",
 * "empty value" (size 0) and "error" are always distinguishable. Batch calls
 * return 0 when the call itself ran and put one result per key in the
 * caller's results array. cr_last_error_message() says what failed and where.
 *
 * Threading: one cr_store may be used by many threads at once, including
 * short-lived pool threads (register a region, batch-put hundreds of keys in
 * it, unregister it). Keys are borrowed for the call; values passed to the
 * copying calls are borrowed for the call; buffers passed to zero-copy calls
 * (_from / _into) must lie inside memory registered with
 * cr_store_register_buffer (pointers anywhere inside a registered region are
 * fine) and stay valid for the call.
 */
#ifndef CRESCENT_STORE_H
#define CRESCENT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crescent/engine.h"
#include "crescent/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Longest key, in bytes. */
#define CR_STORE_MAX_KEY 4096

/** Longest segment name, in bytes (the master protocol's name limit). */
#define CR_STORE_MAX_SEGMENT 256

typedef struct cr_store cr_store;

/**
 * Parse a human-readable size: "1048576", "16 MB", "16MiB", "4gb", "512k"
 * (binary multiples: k/K/kb/KiB = 1024, m = 2^20, g = 2^30, t = 2^40;
 * case-insensitive, optional space). Anything else — "50%", "-1", "1.5x",
 * "" — is CR_INVALID_PARAMS naming the text. Pure; any thread.
 */
CR_API int cr_parse_size(const char *text, uint64_t *out);

/** Store configuration; initialise with cr_store_config_init (sets defaults).
 *  Every string (and the tenant, device and address strings) is borrowed
 *  for cr_store_setup / cr_store_setup_thin only: the store copies what it
 *  keeps, so the caller may free them once setup returns. */
typedef struct cr_store_config {
    uint32_t struct_size;
    const char *local_hostname;     /**< "127.0.0.1" (default) or "host[:port]" */
    const char *metadata;           /**< "P2PHANDSHAKE" (default) or http://... */
    uint64_t global_segment_size;   /**< contributed to the cluster; default 64 MiB; 0 = none */
    uint64_t local_buffer_size;     /**< staging for copying put/get; default 16 MiB */
    const char *protocol;           /**< engine protocol: "auto" (default), "tcp", "shm" */
    const char *devices;            /**< accepted for compatibility; unused by tcp/shm */
    const char *master_address;     /**< "host:port"; default "127.0.0.1:50051" */
    uint32_t transfer_timeout_ms;   /**< deadline of one put/get transfer; default 30000 */
    uint32_t rpc_timeout_ms;        /**< deadline of one master call; default 5000 */
    uint32_t heartbeat_interval_ms; /**< default 1000 */
    /** An existing engine to use instead of creating one (borrowed: it must
     *  outlive the store; local_hostname, metadata and protocol are then the
     *  engine's). The store registers its segment and local buffer with it
     *  and unregisters them on close. NULL (default): the store owns its own. */
    cr_engine *engine;
    /** Mooncake's tenant_id: this client's keys live in the tenant's own
     *  namespace at the master (remove_by_regex and remove_all reach only
     *  them). NULL, "" or "default" (default): the default namespace, as
     *  before tenants existed. At most 128 bytes, no byte 0x1F. */
    const char *tenant_id;
    /** Mooncake's enable_ssd_offload: keep objects the master evicts from this
     *  client's segment on local disk (bucket files under ssd_offload_path,
     *  docs/disk-tier.md) and serve them from there. Needs a segment and a
     *  master started with --enable_offload. Default false. */
    bool enable_ssd_offload;
    /** Mooncake's ssd_offload_path: the disk tier's directory (created if
     *  missing, not its parents). NULL or "": MOONCAKE_OFFLOAD_FILE_STORAGE_PATH.
     *  The other MOONCAKE_OFFLOAD_* variables tune it (disk-tier.md). */
    const char *ssd_offload_path;
} cr_store_config;

/** Fill defaults. Never fails. */
CR_API void cr_store_config_init(cr_store_config *cfg);

/** The disk tier of one store client (cr_store_offload_stats). */
typedef struct cr_store_offload_stats {
    bool enabled;           /**< this client holds a disk tier */
    uint64_t disk_keys;     /**< values on its disk */
    uint64_t disk_bytes;    /**< bucket file bytes */
    uint64_t disk_capacity; /**< the tier's capacity limit */
    uint64_t offloads;      /**< values written to disk for the master */
    uint64_t offload_failures;
    uint64_t stage_reads;    /**< values read from disk to serve a reader */
    uint64_t promotions;     /**< values copied back into memory */
    uint64_t disk_evictions; /**< values the disk tier dropped for room */
    uint64_t compactions;
    uint64_t rpc_reads; /**< gets of this client served from a holder's disk (Mooncake's
                             get_offload_rpc_read_count) */
} cr_store_offload_stats;

/**
 * Single gets (cr_store_get_into of one registered buffer, and the copying cr_store_get /
 * cr_store_get_alloc) of values of 64 KiB and more read the replica this client last read
 * the key's current version from while they ask the master, and keep those bytes only
 * when the reply names the same object version and replica (docs/WIRE.md, "Object
 * versions"); otherwise they read again from the reply's replicas. So a get_into buffer
 * may be written even by a get that then fails. CRESCENT_GET_SPECULATE=0 turns this off,
 * =all extends it to every size.
 */
typedef struct cr_store_get_stats {
    bool speculating;           /**< on (CRESCENT_GET_SPECULATE is not 0) */
    uint64_t speculative_reads; /**< gets that read a cached location while asking */
    uint64_t speculative_hits;  /**< ... and kept it (the reply confirmed it) */
} cr_store_get_stats;

/** Snapshot of an embedded client's get counters since setup. 0, CR_INVALID_PARAMS, or
 *  CR_UNAVAILABLE_IN_CURRENT_MODE for a thin client. Any thread. */
CR_API int cr_store_get_stats_get(cr_store *s, cr_store_get_stats *out);

/** Snapshot of s's disk-tier counters (zeros with enabled false when it has none).
 *  0 or CR_INVALID_PARAMS. Any thread. */
CR_API int cr_store_offload_stats_get(cr_store *s, cr_store_offload_stats *out);

/**
 * Create a store client: engine, segment and local buffer (memfd-backed,
 * reserved without committing pages), master connections (data and
 * heartbeat), mount. On success *out owns it (cr_store_destroy).
 * Errors: CR_INVALID_PARAMS (message names the field), CR_RPC_FAIL /
 * CR_RPC_TIMEOUT (master unreachable within rpc_timeout_ms), engine errors.
 */
CR_API int cr_store_setup(const cr_store_config *cfg, cr_store **out);

/**
 * Unmount the segment, stop heartbeats and close connections; later calls
 * other than cr_store_destroy fail with CR_UNAVAILABLE_IN_CURRENT_STATUS.
 * Idempotent; returns 0. Objects whose only replicas lived here vanish.
 *
 * Threading: may be called while other threads are inside calls on s. It
 * waits for every call that started before it (each is bounded by
 * rpc_timeout_ms and transfer_timeout_ms) and then closes; a call that
 * starts after it began fails with CR_UNAVAILABLE_IN_CURRENT_STATUS and
 * touches nothing. So no call ever sees a freed connection, engine or
 * buffer. Do not call it from inside a call on the same store.
 */
CR_API int cr_store_close(cr_store *s);

/**
 * cr_store_close, then free. NULL is a no-op. Unlike close, destroy must
 * not race with any call on s: every other thread must have returned from
 * its calls (close first if they may still be running) and make none after.
 */
CR_API void cr_store_destroy(cr_store *s);

/**
 * 0 if the master answers and our segment is mounted and accepts
 * allocations, else the failure: CR_RPC_FAIL / CR_RPC_TIMEOUT (master
 * unreachable), CR_UNAVAILABLE_IN_CURRENT_STATUS (the segment is not
 * mounted at the master: a remount is pending, and the heartbeat retries
 * it), CR_ERR_SEGMENT_FENCED (mounted, but fenced for a while: reads of
 * memory an earlier segment of this name had may still run; the message
 * says for how long). Any thread.
 */
CR_API int cr_store_health(cr_store *s);

/** This client's segment name (what preferred_segments refers to). */
CR_API int cr_store_hostname(cr_store *s, char *buf, size_t len);

/** The store's engine (borrowed; valid until cr_store_close, which destroys an
 *  engine the store created). */
CR_API cr_engine *cr_store_engine(cr_store *s);

/** Soft pin actions (Mooncake's SoftPinAction). */
typedef enum cr_soft_pin_action {
    CR_SOFT_PIN_PRESERVE = 0,
    CR_SOFT_PIN_ENABLE = 1,
    CR_SOFT_PIN_DISABLE = 2,
} cr_soft_pin_action;

/** How a put places its replicas. NULL config = defaults. */
typedef struct cr_replicate_config {
    uint32_t replica_num; /**< default 1; best effort on distinct segments */
    bool hard_pin;        /**< never evicted */
    int soft_pin_action;  /**< cr_soft_pin_action */
    bool has_soft_pin_ttl;
    uint64_t soft_pin_ttl_ms;
    /** Tried first (segment names). The array and strings are borrowed for
     *  the call that takes this config (copied into the request). */
    const char *const *preferred_segments;
    size_t n_preferred;
    bool prefer_same_node; /**< place the (single) replica in this client's segment */
} cr_replicate_config;

CR_API void cr_replicate_config_init(cr_replicate_config *cfg);

/* --- writes --------------------------------------------------------------- */

/** Copying put: value is staged through the local buffer (in chunks when it
 *  is larger than the free staging space). An existing complete key is left
 *  as it is and the call succeeds (Mooncake's behaviour); upsert replaces. */
CR_API int cr_store_put(cr_store *s, const char *key, const void *value, size_t len,
                        const cr_replicate_config *cfg);
CR_API int cr_store_upsert(cr_store *s, const char *key, const void *value, size_t len,
                           const cr_replicate_config *cfg);
/** Zero-copy put from registered memory. */
CR_API int cr_store_put_from(cr_store *s, const char *key, const void *buf, size_t len,
                             const cr_replicate_config *cfg);
CR_API int cr_store_upsert_from(cr_store *s, const char *key, const void *buf, size_t len,
                                const cr_replicate_config *cfg);
/** One object gathered from n parts (copying; parts need not be registered). */
CR_API int cr_store_put_parts(cr_store *s, const char *key, const void *const *parts,
                              const size_t *sizes, size_t n, const cr_replicate_config *cfg);
/** One object gathered from n registered buffers (zero-copy). */
CR_API int cr_store_put_from_multi(cr_store *s, const char *key, void *const *bufs,
                                   const size_t *sizes, size_t n, const cr_replicate_config *cfg);
/**
 * Batch forms: one status per key in results[0..n) (0 = stored, including a
 * key that already existed complete for the put forms).
 *
 * Every batch put talks to the master once per phase for the whole batch
 * (one BATCH_PUT_START, one engine batch writing every value to every
 * replica, one BATCH_PUT_END, one BATCH_PUT_REVOKE for what failed), in
 * rounds of up to 1024 keys. A key that occurs again later in the same batch
 * is put on its own after the batch, so the outcome per key is what one put
 * per key in order gives.
 *
 * Copying forms (cr_store_batch_put / cr_store_batch_upsert): each value is
 * copied whole into the local buffer when that much of it is free at the
 * moment, and those values go in one batch; a value that does not fit is
 * put on its own (staged in chunks, as cr_store_put). They return 0 once the
 * call ran and report every failure, even of the master call, per key.
 *
 * Zero-copy forms (_from, _from_multi): the buffers must lie in registered
 * memory. They return 0, or the failure of a master call that failed as a
 * whole (its keys then get that code too); CR_INVALID_PARAMS for NULL
 * arrays with n > 0 leaves results untouched.
 */
CR_API int cr_store_batch_put(cr_store *s, const char *const *keys, const void *const *values,
                              const size_t *sizes, size_t n, const cr_replicate_config *cfg,
                              int *results);
CR_API int cr_store_batch_upsert(cr_store *s, const char *const *keys, const void *const *values,
                                 const size_t *sizes, size_t n, const cr_replicate_config *cfg,
                                 int *results);
CR_API int cr_store_batch_put_from(cr_store *s, const char *const *keys, void *const *bufs,
                                   const size_t *sizes, size_t n, const cr_replicate_config *cfg,
                                   int *results);
CR_API int cr_store_batch_upsert_from(cr_store *s, const char *const *keys, void *const *bufs,
                                      const size_t *sizes, size_t n, const cr_replicate_config *cfg,
                                      int *results);
/**
 * Batch gather put: key i's object is the concatenation of the counts[i]
 * registered buffers bufs[i][0..counts[i]) of sizes[i][0..counts[i]) bytes
 * (parts of 0 bytes are allowed, and counts[i] may be 0: an empty value).
 * Same rounds and results as cr_store_batch_put_from; a key whose part list
 * is invalid (NULL arrays with counts[i] > 0, a NULL part with a size)
 * gets CR_INVALID_PARAMS alone. All arrays are borrowed for the call.
 */
CR_API int cr_store_batch_put_from_multi(cr_store *s, const char *const *keys,
                                         void *const *const *bufs, const size_t *const *sizes,
                                         const size_t *counts, size_t n,
                                         const cr_replicate_config *cfg, int *results);
CR_API int cr_store_batch_upsert_from_multi(cr_store *s, const char *const *keys,
                                            void *const *const *bufs, const size_t *const *sizes,
                                            const size_t *counts, size_t n,
                                            const cr_replicate_config *cfg, int *results);

/* --- reads ---------------------------------------------------------------- */

/**
 * Copying get. On success returns the value's size (0 for an empty value)
 * and *value_out owns a malloc'd copy (free() it; never NULL on success).
 * A miss is CR_OBJECT_NOT_FOUND. A read lease that expired during the
 * transfer is CR_LEASE_EXPIRED, never stale bytes.
 */
CR_API int64_t cr_store_get(cr_store *s, const char *key, void **value_out);
/**
 * Room for a copying get's value, asked for once its size is known
 * (cr_store_get_alloc). alloc: `size` bytes of memory this process can
 * write at *ptr; 0, or a negative status the call then fails with. release:
 * a value alloc placed that the call will not return. Both are called on
 * the calling thread, inside the call, with no store lock held.
 */
typedef struct cr_value_alloc {
    int (*alloc)(void *ctx, uint64_t size, void **ptr);
    void (*release)(void *ctx, void *ptr);
    void *ctx;
} cr_value_alloc;
/**
 * Copying get into the caller's room (a language binding's bytes object):
 * as cr_store_get, but the value is read straight into what a->alloc
 * returned (one copy on the tcp/shm/cma paths; the ucx path and a thin
 * client copy it once more) and *value_out is that pointer. a is borrowed
 * for the call.
 */
CR_API int64_t cr_store_get_alloc(cr_store *s, const char *key, const cr_value_alloc *a,
                                  void **value_out);
/** Zero-copy get into registered memory of `cap` bytes: returns the size,
 *  CR_BUFFER_OVERFLOW (-10) if the value is larger than cap. */
CR_API int64_t cr_store_get_into(cr_store *s, const char *key, void *buf, size_t cap);
/** Scatter one object into n registered buffers (sizes must cover it). */
CR_API int64_t cr_store_get_into_multi(cr_store *s, const char *key, void *const *bufs,
                                       const size_t *sizes, size_t n);
/**
 * Batch forms: results[i] is the size or a negative status, with the
 * single-key semantics (CR_OBJECT_NOT_FOUND for a miss, CR_BUFFER_OVERFLOW
 * when the destination is smaller than the value, CR_LEASE_EXPIRED when the
 * batch's read lease ran out before its transfers finished). One
 * BATCH_GET_REPLICA_LIST and one engine batch reading each value from its
 * best replica (this client's own first), in rounds of up to 1024 keys; a
 * key whose read failed is read again one replica after the other.
 * The zero-copy forms return 0, or the failure of a master call that failed
 * as a whole (its keys then get that code too).
 */
CR_API int cr_store_batch_get_into(cr_store *s, const char *const *keys, void *const *bufs,
                                   const size_t *caps, size_t n, int64_t *results);
/**
 * Batch scatter get: key i's object is read into the counts[i] registered
 * buffers bufs[i][k] of sizes[i][k] bytes, in order (the buffers together
 * must hold it, else CR_BUFFER_OVERFLOW and nothing is read; bytes past the
 * value are left as they were). A key whose buffer list is invalid gets
 * CR_INVALID_PARAMS alone. All arrays are borrowed for the call.
 */
CR_API int cr_store_batch_get_into_multi(cr_store *s, const char *const *keys,
                                         void *const *const *bufs, const size_t *const *sizes,
                                         const size_t *counts, size_t n, int64_t *results);
/**
 * Copying batch get: values_out[i] is a malloc'd copy (caller frees) when
 * results[i] >= 0, else NULL. Values that fit the free local buffer are read
 * in one engine batch through it; larger ones are read in chunks under the
 * same lease. Returns 0 once the call ran; failures are reported per key.
 * The values are fresh malloc memory: with glibc, freeing a whole batch of
 * large values lets the arena return their pages to the kernel, and the
 * next batch's values fault them in again (docs/PERFORMANCE.md, "Copying
 * batch gets and glibc"); cr_store_batch_get_into reuses the caller's.
 */
CR_API int cr_store_batch_get(cr_store *s, const char *const *keys, size_t n, void **values_out,
                              int64_t *results);
/** Value size, or CR_OBJECT_NOT_FOUND. Grants no lease. */
CR_API int64_t cr_store_get_size(cr_store *s, const char *key);
/** 1 exists, 0 missing, negative error. Does not extend leases. */
CR_API int cr_store_exist(cr_store *s, const char *key);
CR_API int cr_store_batch_exist(cr_store *s, const char *const *keys, size_t n, int *results);

/* --- removal ---------------------------------------------------------------- */

/** Remove a key; a held read lease blocks it (CR_OBJECT_HAS_LEASE) unless force. */
CR_API int cr_store_remove(cr_store *s, const char *key, bool force);
/** Remove keys matching a POSIX extended regex; returns the count. */
CR_API int64_t cr_store_remove_by_regex(cr_store *s, const char *pattern, bool force);
/** Remove everything; returns the count. */
CR_API int64_t cr_store_remove_all(cr_store *s, bool force);
CR_API int cr_store_batch_remove(cr_store *s, const char *const *keys, size_t n, bool force,
                                 int *results);

/* --- replicas ---------------------------------------------------------------- */

/** Where one replica of an object lives, as the master knows it. */
typedef struct cr_replica_info {
    char segment[CR_STORE_MAX_SEGMENT + 1]; /**< segment name (an engine segment name) */
    uint64_t address;                       /**< start of the replica in that segment */
    uint64_t size;                          /**< value size in bytes */
    bool complete; /**< readable; false while the object's first put is in flight */
    bool on_disk;  /**< the copy on its holder's SSD tier (docs/disk-tier.md) of a key that is
                        in no memory segment: segment names the holder, address is 0 (a get
                        stages it; it cannot be read at an address) */
} cr_replica_info;

/**
 * The replicas the master knows for key (one QUERY_KEY call; grants no read
 * lease and does not count as an access). Writes min(n, cap) entries to out
 * (out may be NULL when cap is 0) and returns n, the number of replicas,
 * which may exceed cap: call again with a larger array to see them all.
 * Errors: CR_OBJECT_NOT_FOUND (a miss), CR_INVALID_KEY, CR_INVALID_PARAMS
 * (out NULL with cap > 0), CR_RPC_FAIL / CR_RPC_TIMEOUT, and the master's
 * codes. The answer is a snapshot: replicas may be added or dropped at once.
 * A key only on a holder's SSD tier has one entry with on_disk set.
 */
CR_API int cr_store_get_replicas(cr_store *s, const char *key, cr_replica_info *out, size_t cap);

/**
 * Drop replicas of n keys (Mooncake's batch_replica_clear). segment NULL or
 * "": every replica goes, i.e. the object is removed. Otherwise only the
 * replicas on that segment go; an object left without replicas is removed,
 * one with replicas elsewhere stays readable from them. results[i]:
 *   0                          cleared
 *   CR_OBJECT_NOT_FOUND        no such key
 *   CR_OBJECT_HAS_LEASE        a read lease is running (no force: skipped)
 *   CR_REPLICA_IS_NOT_READY    a put/upsert is in flight (skipped)
 *   CR_REPLICA_NOT_FOUND       the key has no replica on that segment
 *   CR_INVALID_KEY             empty or over-long key (not sent)
 * Large batches go to the master in parts; a part that fails as a whole
 * (CR_RPC_FAIL, CR_RPC_TIMEOUT, CR_NOT_SUPPORTED from a master without
 * this operation, ...) gives each of its keys that code. Returns 0 if every
 * key got its result from the master or was refused locally; else the code
 * of the first part that failed as a whole (results are still filled in).
 * CR_INVALID_PARAMS (NULL arrays with n > 0, segment name over
 * CR_STORE_MAX_SEGMENT bytes) and CR_UNAVAILABLE_IN_CURRENT_STATUS (closed)
 * leave results untouched.
 */
CR_API int cr_store_batch_replica_clear(cr_store *s, const char *const *keys, size_t n,
                                        const char *segment, int *results);

/* --- sessions (Mooncake's layer-wise ranged transfers) ------------------------ */

/**
 * A table of open get and put sessions on one store (Mooncake's
 * batch_{get,put}_session_* and *_multi_buffer_ranges). A session is keyed
 * by object key: opening one asks the master once, and the ranged calls
 * that follow move bytes of the object without master round trips, so a
 * layer-by-layer load or save of a KV block costs one master call per
 * phase instead of one per layer.
 *
 * Get session: cr_store_get_session_start grants a read lease (as a get
 * does) and caches the object's replicas. cr_store_batch_get_ranges then
 * reads byte ranges of it. The lease is held for the session: a ranged call
 * that finds less than half of the lease left renews it with one batched
 * master call (only if the master still names the same replica: the same
 * bytes, not an object written since). A session left idle until its lease
 * runs out ends with CR_LEASE_EXPIRED at its next ranged call, as does a
 * ranged call whose transfers outlast the lease (the bytes may be stale).
 *
 * Put session: cr_store_put_session_start allocates the objects
 * (BATCH_PUT_START, invisible to readers) and cr_store_batch_put_ranges
 * writes byte ranges into every replica; cr_store_put_session_end makes
 * them readable (BATCH_PUT_END), cr_store_put_session_revoke releases them.
 * End and revoke seal the session first (no later ranged write starts) and
 * wait for ranged writes in flight. A session that is neither ended nor
 * revoked is preempted by the master after its put_start_discard_timeout
 * if another writer asks for the key.
 *
 * Results are per key, with Mooncake's conventions: CR_INVALID_PARAMS for a
 * key without a session (or with one already, for a put start), for
 * fragment lists of different lengths, and for a range outside the object;
 * ranged calls give the bytes moved (the sum of the fragment sizes; 0 for no
 * fragments) or a negative status. Each call returns 0 once it ran (every
 * failure is reported per key), or CR_INVALID_PARAMS / CR_ERR_NO_MEMORY /
 * CR_UNAVAILABLE_IN_CURRENT_STATUS for the call as a whole (results
 * untouched).
 *
 * Threading: any thread may call any function at once; ranged calls on the
 * same keys may overlap. The table borrows the store: destroy it before
 * the store.
 */
typedef struct cr_store_sessions cr_store_sessions;

/** An empty session table for store s (borrowed). Errors: CR_INVALID_PARAMS,
 *  CR_ERR_NO_MEMORY. */
CR_API int cr_store_sessions_create(cr_store *s, cr_store_sessions **out);

/** Revoke the put sessions still open (best effort, if the store is still
 *  open), drop the get sessions and free the table. No call may be in
 *  flight. NULL is a no-op. */
CR_API void cr_store_sessions_destroy(cr_store_sessions *t);

/** Open (or reopen) a get session per key: results[i] is 0, or the key's
 *  failure (CR_OBJECT_NOT_FOUND, CR_REPLICA_IS_NOT_READY while its first
 *  put is in flight, CR_INVALID_KEY, RPC failures); a failed start drops any
 *  earlier session of that key. */
CR_API int cr_store_get_session_start(cr_store_sessions *t, const char *const *keys, size_t n,
                                      int *results);

/** Drop the get sessions of keys (absent ones are ignored). Returns 0. */
CR_API int cr_store_get_session_end(cr_store_sessions *t, const char *const *keys, size_t n);

/**
 * Ranged batch get: for key i, fragment k reads sizes[i][k] bytes at byte
 * offsets[i][k] of the object into registered memory bufs[i][k]
 * (counts[i] fragments; 0-byte fragments move nothing). All fragments of
 * all keys go in one engine batch; a key whose transfer failed is read
 * again from its other replicas. results[i]: the bytes moved, or
 * CR_INVALID_PARAMS (no session, range past the object's end, NULL
 * arrays), CR_LEASE_EXPIRED (the session is dropped), CR_TRANSFER_FAIL.
 */
CR_API int cr_store_batch_get_ranges(cr_store_sessions *t, const char *const *keys,
                                     void *const *const *bufs, const size_t *const *sizes,
                                     const uint64_t *const *offsets, const size_t *counts, size_t n,
                                     int64_t *results);

/** Open a put session per key for an object of sizes[i] bytes with cfg's
 *  placement: results[i] is 0, CR_INVALID_PARAMS (a session for the key is
 *  open), CR_OBJECT_ALREADY_EXISTS, CR_OBJECT_REPLICA_BUSY, CR_NO_AVAILABLE_HANDLE,
 *  ... (the master's answer). */
CR_API int cr_store_put_session_start(cr_store_sessions *t, const char *const *keys,
                                      const uint64_t *sizes, size_t n,
                                      const cr_replicate_config *cfg, int *results);

/**
 * Ranged batch put: for key i, fragment k writes sizes[i][k] bytes of
 * registered memory bufs[i][k] at byte offsets[i][k] of the object, into
 * every replica, in one engine batch for all keys. results[i]: the bytes
 * written (counted once, not per replica), or CR_INVALID_PARAMS (no open
 * session, session sealed by end/revoke, range past the object's end),
 * CR_TRANSFER_FAIL.
 */
CR_API int cr_store_batch_put_ranges(cr_store_sessions *t, const char *const *keys,
                                     void *const *const *bufs, const size_t *const *sizes,
                                     const uint64_t *const *offsets, const size_t *counts, size_t n,
                                     int64_t *results);

/** Seal, wait for ranged writes in flight, and make the objects readable:
 *  results[i] is 0 (the session is closed), CR_INVALID_PARAMS (no session),
 *  or the master's failure (the session stays, sealed, for a retry of end
 *  or a revoke). */
CR_API int cr_store_put_session_end(cr_store_sessions *t, const char *const *keys, size_t n,
                                    int *results);

/** Seal, wait for ranged writes in flight, and release the objects:
 *  results[i] is 0 (also when the master no longer knows the key),
 *  CR_INVALID_PARAMS (no session), or the master's failure (the session
 *  stays for a retry). */
CR_API int cr_store_put_session_revoke(cr_store_sessions *t, const char *const *keys, size_t n,
                                       int *results);

/* --- cluster ----------------------------------------------------------------- */

/**
 * The names of every segment mounted at the master (GET_ALL_SEGMENTS). On
 * success *names_out owns an array of *n_out malloc'd strings (possibly
 * NULL/0); free it with cr_store_free_names. Errors: CR_RPC_FAIL,
 * CR_RPC_TIMEOUT, CR_UNAVAILABLE_IN_CURRENT_STATUS, CR_ERR_NO_MEMORY.
 */
CR_API int cr_store_list_segments(cr_store *s, char ***names_out, size_t *n_out);

/** Free what cr_store_list_segments returned. NULL is a no-op. */
CR_API void cr_store_free_names(char **names, size_t n);

/* --- memory ------------------------------------------------------------------ */

/** Register memory for zero-copy calls: host memory or, where the engine
 *  has CUDA, device memory (detected, as location "*"); the _from / _into
 *  calls then move device memory directly (docs/gpu.md). In thin mode see
 *  cr_store_setup_thin for what registration means. The memory stays the
 *  caller's and must stay valid until cr_store_unregister_buffer returns
 *  (which waits for calls using it) or the store is closed. Any thread. */
CR_API int cr_store_register_buffer(cr_store *s, void *buf, size_t len);
CR_API int cr_store_unregister_buffer(cr_store *s, void *buf);

/* --- asynchronous calls: a completion queue ----------------------------------- */

/**
 * Submit store calls and collect their outcomes later, many in flight from
 * one thread (docs/store-async.md). A cr_store_cq belongs to one store; a
 * submit only queues the call (no master round trip, no wait) and returns;
 * the queue's driver threads (a few per queue, never one per call) take
 * every call queued at that moment and run them together: single exists
 * become one BATCH_EXIST, single gets one batch_get_into or batch_get (one
 * replica-list call, one engine batch), single puts with the same cfg one batch_put_from,
 * single removes one BATCH_REMOVE. So a thread with 64 calls in flight pays
 * about one master round trip per driver pass, not 64. A batch submit runs
 * as the matching cr_store_batch_* call. Each call ends with exactly one
 * cr_store_completion, in completion order (calls in flight at once have no
 * order among them: wait for a put's completion before a get that must see
 * it).
 *
 * Outcome per call (cr_store_completion.result), with the synchronous
 * call's meaning: exist 1 / 0 / negative; get_into and get the size or negative
 * (CR_OBJECT_NOT_FOUND, CR_BUFFER_OVERFLOW, CR_TRANSFER_FAIL, ...);
 * put_from and remove 0 or negative; a batch submit 0 or the whole call's
 * failure, with per-key outcomes in the caller's results array. A call
 * whose master call failed as a whole gets that code (CR_RPC_FAIL,
 * CR_RPC_TIMEOUT, ...); a dead holder fails a get with the transfer's code.
 * Every call ends within the store's deadlines (rpc_timeout_ms for each
 * master call, transfer_timeout_ms for each transfer) after a driver took
 * it. CR_ERR_CANCELED: canceled (cr_store_cq_cancel) or the queue was
 * destroyed before a driver took it. CR_UNAVAILABLE_IN_CURRENT_STATUS: the
 * store was closed first. Error messages of asynchronous calls are not
 * recorded for the polling thread (cr_last_error_message).
 *
 * Ownership: keys, buffers, results arrays and the cfg passed to a submit
 * are borrowed until that call's completion has been returned by
 * cr_store_cq_poll / cr_store_cq_wait (or cr_store_cq_destroy returned):
 * the driver reads and writes them until then. A copying get's value
 * belongs to whoever reaps its completion (destroy frees those not reaped). Zero-copy buffers must
 * lie in registered memory, as for the synchronous calls.
 *
 * Threading: any thread may submit, poll, wait and cancel at once. Works
 * for embedded and thin stores alike.
 */
typedef struct cr_store_cq cr_store_cq;

/** Completion queue settings; initialise with cr_store_cq_config_init. */
typedef struct cr_store_cq_config {
    uint32_t struct_size;
    /** Calls submitted and not yet reaped, at most (a submit beyond it is
     *  CR_ERR_BUSY); default 4096, at most 1 << 20. */
    uint32_t max_in_flight;
    /** Driver threads (passes in flight at once); default 2, 1..16. */
    uint32_t drivers;
    /** Single calls one driver pass coalesces into one batch, at most;
     *  default 256, 1..1024. */
    uint32_t max_coalesce;
} cr_store_cq_config;

/** Fill defaults. Never fails. */
CR_API void cr_store_cq_config_init(cr_store_cq_config *cfg);

/** What a call was (cr_store_completion.op). */
typedef enum cr_store_async_op {
    CR_ASYNC_EXIST = 1,
    CR_ASYNC_REMOVE = 2,
    CR_ASYNC_GET_INTO = 3,
    CR_ASYNC_PUT_FROM = 4,
    CR_ASYNC_BATCH_EXIST = 5,
    CR_ASYNC_BATCH_REMOVE = 6,
    CR_ASYNC_BATCH_GET_INTO = 7,
    CR_ASYNC_BATCH_PUT_FROM = 8,
    CR_ASYNC_GET = 9,
} cr_store_async_op;

/** One finished call. */
typedef struct cr_store_completion {
    uint64_t user_data; /**< the submit's user_data */
    int64_t result;     /**< the call's outcome (see above) */
    int op;             /**< cr_store_async_op */
    /** CR_ASYNC_GET with result >= 0: the value, a malloc'd copy the reaper owns (free() it;
     *  never NULL then). NULL otherwise. */
    void *value;
} cr_store_completion;

/**
 * A completion queue on store s (borrowed: destroy the queue before
 * cr_store_destroy; cr_store_close may come first, later calls then end
 * with CR_UNAVAILABLE_IN_CURRENT_STATUS). cfg NULL: defaults. Starts its
 * driver threads. Errors: CR_INVALID_PARAMS (the field named),
 * CR_ERR_NO_MEMORY, CR_ERR_SYSTEM (eventfd, threads).
 */
CR_API int cr_store_cq_create(cr_store *s, const cr_store_cq_config *cfg, cr_store_cq **out);

/**
 * Cancel the calls no driver has taken (CR_ERR_CANCELED), wait for those a
 * driver runs (each bounded by the store's deadlines), drop every
 * completion not reaped, close the fd and free. After it returns nothing
 * borrowed by any submit is touched again. No other thread may use q
 * during or after it. NULL is a no-op.
 */
CR_API void cr_store_cq_destroy(cr_store_cq *q);

/**
 * An eventfd that is readable exactly while completions wait to be reaped
 * (level-triggered: poll/epoll it for POLLIN, then cr_store_cq_poll; never
 * read or close it yourself). Valid until cr_store_cq_destroy.
 */
CR_API int cr_store_cq_fd(cr_store_cq *q);

/** Up to cap completions that are ready now, oldest first; never waits.
 *  Returns the count (0: none), or CR_INVALID_PARAMS. */
CR_API int cr_store_cq_poll(cr_store_cq *q, cr_store_completion *out, size_t cap);

/**
 * Wait until at least min_count completions are ready (or fewer, if fewer
 * calls are in flight) or timeout_ms passed (< 0: no limit), then take up
 * to cap of them. Returns the count taken (0 when the deadline passed with
 * none ready or nothing is in flight), or CR_INVALID_PARAMS.
 */
CR_API int cr_store_cq_wait(cr_store_cq *q, cr_store_completion *out, size_t cap, size_t min_count,
                            int timeout_ms);

/** Calls submitted whose completion has not been reaped yet. */
CR_API size_t cr_store_cq_in_flight(cr_store_cq *q);

/** Cancel the calls with this user_data that no driver has taken yet
 *  (each completes with CR_ERR_CANCELED). Returns how many; a call a driver
 *  already runs finishes normally. */
CR_API int cr_store_cq_cancel(cr_store_cq *q, uint64_t user_data);

/**
 * Submits: 0 once queued (the outcome comes as a completion), or, with no
 * completion to follow, CR_INVALID_PARAMS (NULL q, arrays or key),
 * CR_ERR_BUSY (max_in_flight reached: reap first), CR_ERR_NO_MEMORY,
 * CR_ERR_CANCELED (the queue is being destroyed). Arguments mean what they
 * mean for the synchronous call of the same name.
 */
CR_API int cr_store_submit_exist(cr_store_cq *q, const char *key, uint64_t user_data);
CR_API int cr_store_submit_remove(cr_store_cq *q, const char *key, bool force, uint64_t user_data);
CR_API int cr_store_submit_get_into(cr_store_cq *q, const char *key, void *buf, size_t cap,
                                    uint64_t user_data);
/** Copying get: the completion's value is a malloc'd copy (cr_store_get). Single copying gets
 *  queued together run as one cr_store_batch_get. */
CR_API int cr_store_submit_get(cr_store_cq *q, const char *key, uint64_t user_data);
CR_API int cr_store_submit_put_from(cr_store_cq *q, const char *key, const void *buf, size_t len,
                                    const cr_replicate_config *cfg, uint64_t user_data);
CR_API int cr_store_submit_batch_exist(cr_store_cq *q, const char *const *keys, size_t n,
                                       int *results, uint64_t user_data);
CR_API int cr_store_submit_batch_remove(cr_store_cq *q, const char *const *keys, size_t n,
                                        bool force, int *results, uint64_t user_data);
CR_API int cr_store_submit_batch_get_into(cr_store_cq *q, const char *const *keys,
                                          void *const *bufs, const size_t *caps, size_t n,
                                          int64_t *results, uint64_t user_data);
CR_API int cr_store_submit_batch_put_from(cr_store_cq *q, const char *const *keys,
                                          void *const *bufs, const size_t *sizes, size_t n,
                                          const cr_replicate_config *cfg, int *results,
                                          uint64_t user_data);

/* --- thin mode: a thin client of crescent-client (docs/standalone-client.md) -- */

/**
 * Thin-client configuration; initialise with cr_store_thin_config_init.
 * Strings are borrowed for cr_store_setup_thin only.
 */
typedef struct cr_store_thin_config {
    uint32_t struct_size;
    /** Where crescent-client listens: "host:port" (the daemon's --port, as
     *  Mooncake's real-client address; the host part is not used, the
     *  daemon is on this host), "@name" (an abstract Unix socket) or
     *  "unix:/path" / "/path". Default "127.0.0.1:50052". */
    const char *server_address;
    /** The shared pool (cr_store_pool_alloc; also the staging space of
     *  copying puts). Default 64 MiB, at least 2 MiB. */
    uint64_t mem_pool_size;
    /** Where the daemon places values of copying gets for this client.
     *  Default 16 MiB, at least 2 MiB. */
    uint64_t local_buffer_size;
    /** The daemon's shared secret, if it has one. NULL: the environment's
     *  CRESCENT_CLIENT_SECRET, if set. */
    const char *shared_secret;
    /** NULL, "" or "default": whatever tenant the daemon serves. Otherwise it
     *  must be the daemon's --tenant_id (CR_ERR_TENANT_MISMATCH). */
    const char *tenant_id;
    /** Longest wait for one answer of the daemon; default 120000 ms (the
     *  daemon's own deadlines end its calls well before). */
    uint32_t call_timeout_ms;
    /** Connections to the daemon at most (one per concurrently calling
     *  thread); default 16. */
    uint32_t max_connections;
} cr_store_thin_config;

/** Fill defaults. Never fails. */
CR_API void cr_store_thin_config_init(cr_store_thin_config *cfg);

/**
 * Create a thin client: a cr_store whose every call is carried out by the
 * standalone store client daemon (crescent-client) on this host, over a
 * Unix socket. The daemon owns the host's segment, engine and master
 * connection; this process owns a memfd of mem_pool_size +
 * local_buffer_size bytes that the daemon maps too, so zero-copy calls on
 * pool memory (cr_store_pool_alloc) move no byte between the processes.
 *
 * Registration (cr_store_register_buffer) of other memory: memory in a
 * shared file mapping this process can name by a descriptor (cr_alloc_shared,
 * memfds, /dev/shm files) is handed to the daemon, which maps it too
 * (zero-copy); other memory (malloc, anonymous mappings) is accepted and
 * copied through the pool on each call (the slow path, counted in
 * cr_store_thin_stats.slow_path_*). Copying calls copy once through the
 * pool (puts) or the local buffer (gets), as an embedded client copies
 * through its staging buffer; values too large for those go through a
 * temporary memfd.
 *
 * Lifetime: if the daemon goes away, calls fail at once with
 * CR_ERR_DAEMON_UNREACHABLE (and CR_ERR_DAEMON_LOST for a call it was
 * answering: its outcome is unknown), cr_store_health says so, and the next
 * call after the daemon is back reconnects (same pool, registrations
 * replayed). Objects live in the daemon's segment and outlive this process.
 * A thin store may not be used across fork(). cr_store_engine returns NULL.
 * Errors: CR_INVALID_PARAMS (the field named), CR_ERR_DAEMON_UNREACHABLE,
 * CR_ERR_AUTH_FAILED, CR_ILLEGAL_CLIENT, CR_ERR_VERSION_MISMATCH,
 * CR_ERR_TENANT_MISMATCH, CR_ERR_NO_MEMORY, CR_ERR_SYSTEM.
 */
CR_API int cr_store_setup_thin(const cr_store_thin_config *cfg, cr_store **out);

/** Is s a thin client? NULL: false. */
CR_API bool cr_store_is_thin(const cr_store *s);

/**
 * size bytes of the thin client's shared pool (64-byte aligned), usable at
 * once for zero-copy calls, until cr_store_pool_free. Waits for nothing:
 * CR_NO_AVAILABLE_HANDLE when the pool has no such free block now.
 * Errors: CR_INVALID_PARAMS (size 0), CR_UNAVAILABLE_IN_CURRENT_MODE (not
 * a thin client).
 */
CR_API int cr_store_pool_alloc(cr_store *s, size_t size, void **out);

/** Free what cr_store_pool_alloc returned; CR_INVALID_PARAMS for anything
 *  else. NULL is a no-op. */
CR_API int cr_store_pool_free(cr_store *s, void *ptr);

/** Counters of a thin client since setup (monotonic unless noted). */
typedef struct cr_store_thin_stats {
    uint64_t calls;           /**< calls sent to the daemon */
    uint64_t zero_copy_bytes; /**< value bytes the daemon moved in place (pool, shared regions) */
    uint64_t copied_bytes;    /**< value bytes of copying calls, copied once here */
    uint64_t slow_path_calls; /**< zero-copy calls on non-shareable registered memory */
    uint64_t slow_path_bytes; /**< ... and their bytes, copied through the pool */
    uint64_t transient_calls; /**< values larger than the pool or local buffer (temporary memfd) */
    uint64_t reconnects;      /**< sessions opened after the first */
    uint64_t daemon_lost;     /**< calls that failed because the daemon went away */
    uint64_t shared_regions;  /**< registered regions the daemon maps (now) */
    uint64_t slow_path_regions;      /**< registered regions copied through the pool (now) */
    uint64_t connections;            /**< open connections (now) */
    uint64_t pool_used;              /**< pool bytes allocated (now) */
    uint64_t direct_get_keys;        /**< keys read straight from the daemon's segment */
    uint64_t direct_get_fallbacks;   /**< keys a direct read handed to the daemon */
    uint64_t direct_get_speculative; /**< direct single gets that copied a cached location
                                          while asking the master (cr_store_get_stats) */
    uint64_t direct_get_kept;        /**< ... and kept it (the reply confirmed it) */
    uint64_t direct_put_keys;        /**< keys written straight into the daemon's segment */
    uint64_t direct_put_fallbacks;   /**< keys a direct put handed to the daemon */
} cr_store_thin_stats;

/** Errors: CR_INVALID_PARAMS, CR_UNAVAILABLE_IN_CURRENT_MODE (not thin). */
CR_API int cr_store_thin_stats_get(cr_store *s, cr_store_thin_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* CRESCENT_STORE_H */
