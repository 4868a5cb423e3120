/*
 * internal.h - the store client's private state, shared by its files.
 *
 *   cr_store ─ engine            moves the bytes (local / shm / cma / tcp)
 *            ─ segment           cr_alloc_shared memory mounted at the master
 *            ─ staging           local buffer + offset allocator for copying calls
 *            ─ master            data-path RPC connection (pipelined, thread-safe)
 *            ─ heartbeat         its own RPC connection and thread: ping, remount
 *            ─ segment handles   name → engine handle cache
 */
#ifndef CRESCENT_STORE_INTERNAL_H
#define CRESCENT_STORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/uio.h>

#include "crescent/store.h"
#include "base/offset_allocator.h"
#include "proto/rpc.h"
#include "store/master_client.h"

typedef struct crc_seg_cache_entry {
    char *name;
    cr_segment_handle handle;
} crc_seg_cache_entry;

struct cr_store {
    struct crc_thin *thin; /* thin mode (store/thin.h): crescent-client runs every call */
    cr_engine *engine;
    bool owns_engine; /* false: borrowed through cr_store_config.engine */
    bool segment_registered, staging_registered;
    char segment_name[300];
    char master_address[300];
    crp_rpc_uuid client_id;
    uint32_t transfer_timeout_ms, rpc_timeout_ms, heartbeat_interval_ms;

    crc_master *master;
    crc_master *heartbeat_conn;
    pthread_t heartbeat_thread;
    bool heartbeat_running;
    atomic_bool stop;
    atomic_bool closed;
    atomic_int remounts;
    /* Public calls in progress (CRC_ENTER); cr_store_close waits for them. */
    atomic_int calls;
    pthread_mutex_t calls_lock;
    pthread_cond_t calls_done;

    uint8_t *segment;
    uint64_t segment_size;
    pthread_t populate_thread; /* CRESCENT_SEGMENT_POPULATE=background (populate.c) */
    bool populate_running;

    uint8_t *staging;
    uint64_t staging_size;
    crb_oa *staging_oa;
    pthread_mutex_t staging_lock;
    pthread_cond_t staging_freed;

    pthread_mutex_t seg_lock;
    crc_seg_cache_entry *segs;
    size_t n_segs, cap_segs;

    /* Copying calls move the caller's bytes straight through the engine
     * (CR_OP_LOCAL_UNREGISTERED) unless the engine refused that within the
     * last second (staging.c: crc_direct_ok). */
    _Atomic uint64_t direct_retry_ms; /* 0: never refused */
    atomic_bool direct_logged;
    bool copy_staged; /* CRESCENT_STORE_COPY=staged: always stage (crc_copy_mode) */

    /* Speculative single gets (loc_cache.c; NULL: CRESCENT_GET_SPECULATE=0) and their
     * counters (cr_store_get_stats_get). */
    struct crc_loc_cache *loc;
    uint64_t spec_min; /* smallest value read so (1; "large": CRC_SPECULATE_MIN) */
    _Atomic uint64_t spec_reads, spec_hits;

    /* Reads are given back (RELEASE_LEASES) ahead of the next master call,
     * or by the heartbeat thread within ~30 ms; CRESCENT_LEASE_RELEASE=now:
     * each in a write of its own right after its get (get.c). */
    bool release_at_once;

    struct crc_grants *grants; /* put grants (grants.c), or NULL: CRESCENT_PUT_GRANTS=0 */
    bool put_ahead; /* CRESCENT_PUT_COMMIT_AHEAD (default 1): puts' ends go before the copy */
    struct crc_offload *off;     /* the disk tier (store/offload.h), or NULL */
    _Atomic uint64_t disk_reads; /* gets served from a holder's disk (rpc_reads) */
};

/* prefault.c: a copying batch get's values, sizes[j] bytes at vals[j] (NULL or a size
 * <= 0: skipped), are committed before the engine writes them when they add up to
 * 4 MiB or more and the allocator handed out never-touched pages (probed once with
 * mincore). Returns how many values it committed. Any thread. */
size_t crc_prefault_values(void *const *vals, const int64_t *sizes, size_t n);

/* populate.c: when the segment's pages are committed (CRESCENT_SEGMENT_POPULATE). */
enum { CRC_POPULATE_LAZY, CRC_POPULATE_MOUNT, CRC_POPULATE_BACKGROUND };
/* The mode the environment asks for, else the default: background for a store with a disk
 * tier (disk_tier), lazy otherwise; CR_INVALID_PARAMS names a bad value. */
int crc_populate_mode(bool disk_tier, int *mode);
/* Commit every page of s->segment now (setup, before the mount). */
int crc_populate_now(cr_store *s);
/* Start / stop (sets s->stop, joins) the background populate thread. */
int crc_populate_start(cr_store *s);
void crc_populate_stop(cr_store *s);

/* client.c */

/*
 * Calls in flight. Every public function that uses the store's state starts
 * with CRC_ENTER(s): it counts the call (refusing it with
 * CR_UNAVAILABLE_IN_CURRENT_STATUS once the store is closed, or
 * CR_INVALID_PARAMS for NULL), and the count is dropped when the function
 * returns, whichever return it takes (a cleanup attribute). cr_store_close
 * sets `closed` and then waits for the count to reach 0 before it frees the
 * master connections, so no call ever uses freed state.
 */
typedef struct crc_guard {
    cr_store *s;
} crc_guard;
int crc_enter(cr_store *s, crc_guard *g);
void crc_leave(cr_store *s);
static inline void crc_guard_release(crc_guard *g)
{
    if (g->s != NULL)
        crc_leave(g->s);
}
#define CRC_ENTER(s)                                                                               \
    __attribute__((cleanup(crc_guard_release))) crc_guard crc_guard_ = {NULL};                     \
    do {                                                                                           \
        int crc_enter_rc_ = crc_enter((s), &crc_guard_);                                           \
        if (crc_enter_rc_ < 0)                                                                     \
            return crc_enter_rc_;                                                                  \
    } while (0)

int crc_check_open(cr_store *s);
int crc_check_key(const char *key);
int crc_segment_handle(cr_store *s, const char *name, cr_segment_handle *out);
int crc_call(cr_store *s, const crp_rpc_req *req, crp_rpc_resp *resp);
/* crc_call, with sent(sent_arg) once the first request is on the wire
 * (crc_master_call_sent). */
int crc_call_sent(cr_store *s, const crp_rpc_req *req, crp_rpc_resp *resp, crc_sent_fn sent,
                  void *sent_arg);
/* The calling thread's crc_call calls wait for stages until deadline_ms at most (0: one
 * RPC timeout each, the default); set around a batch get's rounds. */
void crc_stage_deadline(uint64_t deadline_ms);
void crc_config_to_wire(const cr_replicate_config *cfg, crp_rpc_replica_config *out);

/* staging.c: take up to `want` bytes (at least `min`) of the local buffer */
int crc_staging_alloc(cr_store *s, uint64_t want, uint64_t min, crb_oa_allocation *out,
                      uint8_t **ptr);
/* staging.c: take exactly `size` (> 0) bytes if they are free now; never
 * waits and records no error message (CR_NO_AVAILABLE_HANDLE otherwise) */
int crc_staging_try_alloc(cr_store *s, uint64_t size, crb_oa_allocation *out, uint8_t **ptr);
void crc_staging_free(cr_store *s, const crb_oa_allocation *a);

/* Batches go to the master in parts of at most this many keys (and
 * CRC_BATCH_KEY_BYTES bytes of keys) so that requests and replies stay well
 * inside one frame body. */
#define CRC_BATCH_KEYS      1024
#define CRC_BATCH_KEY_BYTES (256u << 10)

/* transfers: write/read one contiguous range to/from every (or one) replica */
int crc_transfer(cr_store *s, int opcode, const crp_rpc_replica *reps, size_t n_reps,
                 uint64_t offset, void *local, uint64_t len);

/*
 * A place for a copying get's value, chosen once its size is known (the
 * standalone client daemon reads values straight into a thin client's
 * local buffer). alloc: room for key `index`'s value (0 for a single get,
 * the key's index in the caller's arrays for a batch) of `size` bytes at
 * *ptr, *registered telling
 * whether it lies in memory registered with this store's engine (read in
 * place) or not (read through staging); 0 or a negative status (the key
 * then fails with it). release: a value alloc placed that the call will not
 * return. Both are called on the calling thread.
 */
typedef struct crc_value_dest {
    int (*alloc)(void *ctx, size_t index, uint64_t size, void **ptr, bool *registered);
    void (*release)(void *ctx, void *ptr);
    void *ctx;
} crc_value_dest;

/* get.c: cr_store_get and cr_store_batch_get with the values placed by vd
 * instead of malloc'd (*value_out / values_out[i] are vd's pointers). */
int64_t crc_get_to(cr_store *s, const char *key, const crc_value_dest *vd, void **value_out);
int crc_batch_get_to(cr_store *s, const char *const *keys, size_t n, const crc_value_dest *vd,
                     void **values_out, int64_t *results);

/*
 * get.c: lease releases after the caller's reply. While crc_release_defer(true)
 * holds on a thread, the gets it runs keep the RELEASE_LEASES notice they
 * would send (off the call's critical path); crc_release_flush sends what
 * was kept, one frame (for the last store that kept any), and frees it.
 * crescent-client defers around each thin request and flushes once its
 * reply is on the socket. Until the flush those reads stay leased (as a
 * master without releases keeps them until their TTL).
 */
void crc_release_defer(bool on);
void crc_release_flush(void);

/* busy_poll.c: CRESCENT_BUSY_POLL_US as a base/spin.h mode for the store's
 * own waits: a fixed window, or 0 (never) when unset or 0; CR_INVALID_PARAMS
 * naming a bad value. */
int crc_spin_mode(int64_t *mode_ns);

/* Run t engine transfers as one batch (one at a time if the engine refuses
 * the batch); failed[k] says whether transfer k did not complete. */
void crc_run_batch(cr_store *s, cr_transfer_request *reqs, size_t t, bool *failed);

/*
 * Copy once (staging.c). A copying call names the caller's own memory in
 * its transfers (opcode | CR_OP_LOCAL_UNREGISTERED) instead of gathering
 * into or scattering from the staging buffer, while crc_direct_ok says so.
 * When the engine answers CR_ERR_NEEDS_REGISTERED (its path for a replica
 * needs registered memory: ucx), crc_direct_refused logs it once and turns
 * direct transfers off for a second (the engine's "unregistered_refused"
 * counter shows each refusal), and the call stages as before.
 */
bool crc_direct_ok(cr_store *s);
/* CRESCENT_STORE_COPY: "direct" (default, or unset) or "staged" (every
 * copying call through the staging buffer, as before copy-once: for
 * comparisons); CR_INVALID_PARAMS names another value. */
int crc_copy_mode(bool *staged);
void crc_direct_refused(cr_store *s);
/* crc_transfer of unregistered local memory: CR_ERR_NEEDS_REGISTERED (and
 * nothing moved) when the engine refuses it. Returns only once no task
 * touches local any more, also after a timeout. */
int crc_transfer_direct(cr_store *s, int opcode, const crp_rpc_replica *reps, size_t n_reps,
                        uint64_t offset, void *local, uint64_t len);
/* crc_run_batch where some requests (opcode | CR_OP_LOCAL_UNREGISTERED)
 * name unregistered memory: if the engine refuses those, the others run as
 * one batch and those move through the staging buffer one at a time
 * (crc_direct_refused). Returns once no task touches any local memory. */
void crc_run_batch_direct(cr_store *s, cr_transfer_request *reqs, size_t t, bool *failed);

/* CRESCENT_GET_SPECULATE=large: only values this large are read speculatively (the
 * default until a master call lost three system calls a side; since, 4 KiB gets over tcp
 * gain 22-60 % from it: docs/PERFORMANCE.md, "System calls per master call"). */
#define CRC_SPECULATE_MIN (64u << 10)
/* CRESCENT_GET_SPECULATE's value (NULL: unset) as the smallest value size read
 * speculatively, 0 for never; CR_INVALID_PARAMS for a value it does not know. */
int crc_speculate_min(const char *v, uint64_t *min_out);

/* loc_cache.c: where this client last read each key (speculative single gets, get.c).
 * Any thread; a lookup copies the entry out. */
typedef struct crc_loc_cache crc_loc_cache;
typedef struct crc_loc {
    char segment[256];
    uint64_t version, addr, size, epoch;
} crc_loc;
int crc_loc_create(crc_loc_cache **out);
void crc_loc_destroy(crc_loc_cache *c);
/* The entry of key, if any (true: *out written). */
bool crc_loc_lookup(crc_loc_cache *c, const char *key, crc_loc *out);
/* Remember that key's version `version` was read from r (ignored: version 0, a staged
 * disk copy, a segment name that does not fit). */
void crc_loc_store(crc_loc_cache *c, const char *key, uint64_t version, const crp_rpc_replica *r);
void crc_loc_forget(crc_loc_cache *c, const char *key);
/* Does a reply naming `version` and reps[0..n) confirm l (same version, l's replica
 * listed)? Then what was read from l while asking is the value (docs/WIRE.md). */
bool crc_loc_confirms(const crc_loc *l, uint64_t version, const crp_rpc_replica *reps, size_t n);

/* grants.c: put grants, a single put in one master round trip (docs/WIRE.md, "Put
 * grants"). Any thread. */
typedef struct crc_grants crc_grants;
typedef struct crc_grant crc_grant;
/* At setup: s->grants (left NULL when CRESCENT_PUT_GRANTS=0); CR_INVALID_PARAMS names a bad
 * value of it. */
int crc_grants_create(cr_store *s);
/* A disk-tier holder's promotion of its own key: a put that never goes through a grant (the
 * master lets only a two-phase put promote; put.c). Any thread. */
int crc_put_promotion(cr_store *s, const char *key, const void *value, size_t len);
/* The idle grants are revoked (notices, sent ahead of the next call); returns how many. At
 * close, while the master connection is up, and when a put found no space. */
size_t crc_grants_release(cr_store *s);
void crc_grants_destroy(cr_store *s);
/* The heartbeat thread's tick: idle grants too old to be written into are revoked, so a
 * writer that stopped putting holds none a second later. */
void crc_grants_expire(cr_store *s);
/* May a put with this (wire) config use grants now? */
bool crc_grants_usable(cr_store *s, const crp_rpc_replica_config *cfg);
/* An idle grant for a value of `size` bytes and config cfg, young enough to be written
 * into now, or NULL. Revokes the ones too old to use. The caller owns it until
 * crc_grant_done. */
crc_grant *crc_grant_take(cr_store *s, uint64_t size, const crp_rpc_replica_config *cfg);
/* Does a put through a grant commit ahead of its copy (docs/WIRE.md, "Commit ahead")?
 * CRESCENT_PUT_COMMIT_AHEAD is not 0 and the master announces CRP_RPC_CAP_COMMIT_AHEAD. */
bool crc_grants_ahead(cr_store *s);
/* Where to write a taken grant's value: its PUT_START reply's replicas. */
const crp_rpc_alloc_resp *crc_grant_placement(crc_grant *g);
const char *crc_grant_key(const crc_grant *g);
/* A taken grant is finished with: consumed by the master (revoke false) or to be given
 * back (revoke true: a notice). */
void crc_grant_done(cr_store *s, crc_grant *g, bool revoke);
/* Asking for a new grant in another call's write (crc_master_call2): crc_grant_ask_begin
 * (NULL: the store holds enough grants, or no memory) fills req with the grant's PUT_START,
 * whose reply goes to crc_grant_reply(g); then crc_grant_ask_end with the call's status
 * keeps the grant or drops it. */
crc_grant *crc_grant_ask_begin(cr_store *s, uint64_t size, const crp_rpc_replica_config *cfg,
                               crp_rpc_req *req);
crp_rpc_resp *crc_grant_reply(crc_grant *g);
void crc_grant_ask_end(cr_store *s, crc_grant *g, int rc);

/* get.c: put this client's own replica (its segment's) first; the order gets read in. */
void crc_order_replicas(cr_store *s, crp_rpc_replica *r, size_t n);

/* staging.c: one read started now and waited for later (a speculative get; over tcp
 * start may carry the whole read on this thread, see CR_BATCH_CALLER_WAITS), into
 * registered memory or (unregistered) any memory of this process, as crc_transfer_direct.
 * start: 0 and *batch_out, or a negative status (nothing started). finish: waits until the transfer
 * has ended (even past a timeout: it writes the caller's memory), frees the batch;
 * 0 or the transfer's failure. cancel: the bytes are not wanted (what has not started
 * does not start). */
int crc_read_start(cr_store *s, const char *segment, uint64_t addr, void *local, uint64_t len,
                   bool unregistered, cr_batch_id *batch_out);
int crc_read_finish(cr_store *s, cr_batch_id batch, bool cancel);

#endif
