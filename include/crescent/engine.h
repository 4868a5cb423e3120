/*
 * crescent/engine.h - the transfer engine: one-sided, batched READ/WRITE
 * between registered memory of processes and hosts.
 *
 * A process creates one engine. It registers ranges of its memory (buffers);
 * peers address those bytes as (segment, remote virtual address), where the
 * segment is the engine's name ("host:rpc_port" in P2P mode). Transfers are
 * submitted in batches and complete asynchronously; synchronous helpers are
 * built on top.
 *
 * Threading: unless a declaration says otherwise, every function may be called
 * from any thread, concurrently with any other, including short-lived pool
 * threads. The engine keeps no per-thread state; what a buffer needs (its
 * memory kind, its device) is captured when it is registered.
 *
 * Errors: functions return 0 (or a documented non-negative value) on success
 * and a negative cr_status on failure; cr_last_error_message() then says what
 * and where. Output parameters are written only on success.
 */
#ifndef CRESCENT_ENGINE_H
#define CRESCENT_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crescent/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** An engine. Opaque; created by cr_engine_create, freed by cr_engine_destroy. */
typedef struct cr_engine cr_engine;

/**
 * Engine configuration. Always initialise with cr_engine_config_init() first:
 * it sets struct_size and every default, so fields added in later versions
 * keep their defaults for callers compiled against this header.
 *
 * Strings are borrowed for the duration of cr_engine_create() only; the
 * engine copies what it keeps.
 */
typedef struct cr_engine_config {
    /** sizeof(cr_engine_config) as compiled by the caller; set by _init. */
    uint32_t struct_size;
    /** "host" or "host:port" peers use to reach us. Default "127.0.0.1". A
     *  port here is used as the RPC port when rpc_port is 0. */
    const char *local_hostname;
    /** "P2PHANDSHAKE" (default), "http://host:port/path",
     *  "etcd://host:port[,host:port...]" (or the bare endpoint list) or
     *  "redis://host:port"; etcd and redis take "?ttl=<seconds>" (default
     *  10): how long this engine's keys outlive it (docs/metadata.md). */
    const char *metadata;
    /** Key prefix in a metadata server. Default "mooncake" (Mooncake's
     *  layout: <prefix>/ram/<segment>, <prefix>/rpc_meta/<segment>); the
     *  default becomes "mooncake/<id>" when MC_METADATA_CLUSTER_ID is set. */
    const char *metadata_prefix;
    /** "auto" (default: the fastest path each pair of buffers allows:
     *  local, cuda, shm, cma, ucx when UCX has an RDMA device, tcp last), or
     *  one path by name:
     *  - "tcp": sockets only, even on one host;
     *  - "shm": the same-host group: local memcpy, mapped shared memory,
     *    process_vm_readv/writev (cma);
     *  - "local": memcpy between buffers of this process only;
     *  - "cma": process_vm_readv/writev to same-host peers only (the shm
     *    transport is installed for its control page and fd service, not
     *    its copies);
     *  - "ucx": UCX alone, whatever UCX itself is allowed: RDMA, or tcp/sm
     *    with UCX_TLS (builds with libucx-dev);
     *  - "cuda": device memory paths (CUDA IPC, direct copies; builds with
     *    CUDA headers). The cuda transport also comes with every protocol
     *    for its memory kinds, so "tcp" stages device memory through it.
     *  A name this build lacks is CR_ERR_INVALID_CONFIG; the message lists
     *  the names it has. */
    const char *protocol;
    /** RPC port to listen on; 0 = choose a free one (query it afterwards). */
    uint16_t rpc_port;
    /** I/O worker threads; 0 = default (2). */
    uint32_t worker_threads;
    /** TCP connections per peer; 0 = default (4). */
    uint32_t lanes_per_peer;
    /** Largest unit one request is cut into on the wire; 0 = default 1 MiB. Over tcp a
     *  request alone in its batch of 1 MiB up to two slices goes in two halves. */
    uint64_t slice_size;
    /** Connecting to a peer, incl. handshake; 0 = default 3000 ms. */
    uint32_t connect_timeout_ms;
    /** Deadline of one transfer request; 0 = default 30000 ms. */
    uint32_t request_timeout_ms;
    /** If non-NULL and non-empty, peers must prove knowledge of this secret
     *  (HMAC-SHA256 challenge) and we prove it to them. */
    const char *shared_secret;
    /** Hand shared-memory fds to same-host peers of any user, not only to
     *  processes of our own uid (SO_PEERCRED). Default false. */
    bool shm_allow_any_user;
    /** Do not offer process_vm_readv/writev access to peers. Default false. */
    bool disable_cma;
    /** Connections to our port open at once; more are accepted and closed
     *  at once. 0 = default (4096). */
    uint32_t max_connections;
    /** NICs the ucx transport uses, comma-separated ("mlx5_0,mlx5_1";
     *  Mooncake's device_name). Each is a rail: large requests stripe over
     *  rails and a buffer is registered on the NICs nearest its memory.
     *  NULL/"" = UCX's own choice (UCX_NET_DEVICES). */
    const char *device_name;
} cr_engine_config;

/** Fill *cfg with struct_size and defaults. Never fails. */
CR_API void cr_engine_config_init(cr_engine_config *cfg);

/**
 * Create an engine: validate the configuration, bind the RPC port, start the
 * worker and listener threads, publish the (empty) segment descriptor.
 * On success *out owns a new engine (free with cr_engine_destroy).
 * Errors: CR_ERR_INVALID_CONFIG (message names the bad field and value),
 * CR_ERR_BIND, CR_ERR_METADATA, CR_ERR_NO_MEMORY, CR_ERR_SYSTEM.
 */
CR_API int cr_engine_create(const cr_engine_config *cfg, cr_engine **out);

/**
 * Stop all threads, fail transfers still in flight with CR_ERR_SHUTDOWN,
 * unpublish metadata, close sockets and free the engine. Registered buffers
 * remain the caller's memory. Calls already running on other threads when
 * destroy starts finish first, or (waits, cr_batch_wait on a batch not yet
 * freed) return CR_ERR_SHUTDOWN at once; calls that begin while it runs get
 * CR_ERR_SHUTDOWN; destroy returns after they have all left. No call may
 * begin after destroy has returned (the engine is gone). NULL is a no-op.
 */
CR_API void cr_engine_destroy(cr_engine *engine);

/**
 * Copy the segment name ("host:rpc_port" in P2P mode, else the hostname) into
 * buf (NUL-terminated). Errors: CR_INVALID_PARAMS if it does not fit.
 */
CR_API int cr_engine_segment_name(const cr_engine *engine, char *buf, size_t len);

/** The RPC port the engine listens on (always > 0 after create). */
CR_API uint16_t cr_engine_rpc_port(const cr_engine *engine);

/* ----------------------------------------------------------------------- */
/* Memory registration                                                     */
/* ----------------------------------------------------------------------- */

/** What kind of memory a buffer is. Travels in the segment descriptor. */
typedef enum cr_mem_kind {
    CR_MEM_HOST = 0,           /**< ordinary host memory */
    CR_MEM_HOST_SHAREABLE = 1, /**< host memory backed by a shareable fd */
    CR_MEM_CUDA = 2,           /**< CUDA device memory */
    CR_MEM_KIND_COUNT
} cr_mem_kind;

/** Short name of a kind ("host", "host-shareable", "cuda"); static string. */
CR_API const char *cr_mem_kind_name(int kind);

/** One buffer for the batch registration call. */
typedef struct cr_buffer_spec {
    void *addr;
    size_t length;
    /** "cpu:N", "cuda:N", or "*" / NULL (detect: host memory unless a
     *  device runtime claims it). */
    const char *location;
    /** May peers read and write it? */
    bool remote_accessible;
} cr_buffer_spec;

/**
 * Register [addr, addr+length) so it can be a transfer source/destination and,
 * if remote_accessible, a target of peers' transfers. Pointers anywhere inside
 * a registered buffer are valid in transfers. The memory stays the caller's;
 * it must stay valid until cr_engine_unregister returns.
 * Errors: CR_ERR_ZERO_LENGTH, CR_INVALID_PARAMS (NULL addr, bad
 * location string), CR_ERR_RANGE_OVERFLOW, CR_ERR_ADDRESS_OVERLAPPED (message
 * names the existing range), CR_ERR_NO_MEMORY, CR_ERR_METADATA.
 */
CR_API int cr_engine_register(cr_engine *engine, void *addr, size_t length, const char *location,
                              bool remote_accessible);

/**
 * Register n buffers atomically: either all are registered or none is (the
 * first failure is returned and nothing changes). Publishes once. The
 * array and its location strings are borrowed for the call (copied); the
 * memory itself stays the caller's as with cr_engine_register.
 */
CR_API int cr_engine_register_batch(cr_engine *engine, const cr_buffer_spec *buffers, size_t n);

/**
 * Unregister the buffer that starts exactly at addr.
 *
 * In-flight transfers: unregistration is a barrier. New transfers touching
 * the buffer are refused from the moment this call starts; transfers already
 * using it (as a local source/destination, or being served to a peer) run to
 * completion, failure or deadline; then the buffer is removed and the call
 * returns. After it returns the engine never touches the range again.
 * Errors: CR_ERR_ADDRESS_NOT_REGISTERED if no buffer starts at addr.
 */
CR_API int cr_engine_unregister(cr_engine *engine, void *addr);

/**
 * Unregister n buffers by base address. Every address is attempted; returns 0
 * if all succeeded, else the first failure (the others are still removed).
 */
CR_API int cr_engine_unregister_batch(cr_engine *engine, void *const *addrs, size_t n);

/** Number of buffers currently registered. */
CR_API size_t cr_engine_registration_count(cr_engine *engine);

/**
 * Allocate `size` bytes of shareable host memory: backed by a memfd, mapped
 * MAP_SHARED | MAP_NORESERVE (no page is committed until touched), aligned to
 * 2 MiB so transparent huge pages can back it where the kernel allows. When
 * a range inside it is registered with an engine, peers on the same host map
 * it once and copy directly (the shm transport) instead of using sockets.
 * On success *out is the zero-filled memory, owned by the caller until
 * cr_free_shared. Thread-safe. Errors: CR_INVALID_PARAMS (size 0),
 * CR_ERR_NO_MEMORY, CR_ERR_SYSTEM (memfd/mmap failure, message says which).
 */
CR_API int cr_alloc_shared(size_t size, void **out);

/**
 * Free memory from cr_alloc_shared. Refused with CR_INVALID_PARAMS
 * while any engine still has a range
 * of it registered (unregister first), or if ptr did not come from
 * cr_alloc_shared. NULL is a no-op returning 0.
 */
CR_API int cr_free_shared(void *ptr);

/* ----------------------------------------------------------------------- */
/* Segments                                                                */
/* ----------------------------------------------------------------------- */

/** A handle to an opened segment. Generation-checked: stale values are
 *  refused with CR_ERR_INVALID_HANDLE. 0 is never a valid handle. */
typedef uint64_t cr_segment_handle;

/**
 * Open the segment `name` (a peer's "host:port", or our own name for local
 * transfers): fetch and cache its descriptor. Opening the same name twice
 * returns the same handle. The descriptor is refreshed when a remote range is
 * not found in it or the peer has restarted.
 * Errors: CR_INVALID_PARAMS, CR_ERR_DNS, CR_ERR_PEER_UNREACHABLE,
 * CR_ERR_TIMEOUT, CR_ERR_AUTH_FAILED, CR_ERR_VERSION_MISMATCH,
 * CR_ERR_METADATA_NOT_FOUND.
 */
CR_API int cr_engine_open_segment(cr_engine *engine, const char *name, cr_segment_handle *out);

/**
 * Close a segment handle: later use of it fails with CR_ERR_INVALID_HANDLE.
 * Transfers already submitted to it complete normally.
 */
CR_API int cr_engine_close_segment(cr_engine *engine, cr_segment_handle segment);

/** One buffer of an opened segment, as its descriptor describes it. */
typedef struct cr_buffer_info {
    uint64_t addr;
    uint64_t length;
    int kind;   /**< cr_mem_kind */
    int device; /**< device index, -1 for host memory */
    bool remote_accessible;
} cr_buffer_info;

/**
 * List the buffers of an opened segment (from its cached descriptor, in
 * address order): copies up to `cap` entries into `out` (may be NULL when
 * cap is 0) and writes the total count to *total. Errors:
 * CR_ERR_INVALID_HANDLE.
 */
CR_API int cr_engine_segment_buffers(cr_engine *engine, cr_segment_handle segment,
                                     cr_buffer_info *out, size_t cap, size_t *total);

/* ----------------------------------------------------------------------- */
/* Batches                                                                 */
/* ----------------------------------------------------------------------- */

typedef enum cr_opcode { CR_OP_READ = 0, CR_OP_WRITE = 1 } cr_opcode;

/** Task states; numerically Mooncake's TransferStatusEnum. */
typedef enum cr_task_state {
    CR_TASK_WAITING = 0,   /**< submitted, not finished */
    CR_TASK_PENDING = 1,   /**< unused slot */
    CR_TASK_INVALID = 2,   /**< refused at submit (see error) */
    CR_TASK_CANCELED = 3,  /**< canceled before completion */
    CR_TASK_COMPLETED = 4, /**< every byte applied and acknowledged */
    CR_TASK_TIMEOUT = 5,   /**< deadline expired */
    CR_TASK_FAILED = 6,    /**< failed; see error */
} cr_task_state;

/**
 * Flag OR'd into cr_transfer_request.opcode: the local range may lie outside
 * every registered buffer (the copying store calls move a caller's bytes
 * with it, instead of staging them through a registered buffer).
 *
 * A local range inside one registered buffer is served as without the flag.
 * Any other range is taken as ordinary host memory of this process for the
 * life of the task: the caller keeps [local_addr, +length) mapped, and does
 * not touch it while a READ fills it, until the task reaches a final state
 * (cr_batch_wait returned anything but CR_ERR_TIMEOUT; after a timeout,
 * cancel and wait again: cancellation alone does not end a task). Such a
 * request is served only by the transports that move any local memory (tcp
 * sends and receives, shm and local memcpy, cma process_vm_readv/writev).
 * When the transport that ranks first for the pair needs registered memory
 * (ucx), or the remote buffer is device memory, submit refuses the batch
 * with CR_ERR_NEEDS_REGISTERED (nothing starts): register the memory or
 * stage it through a registered buffer. The engine counters
 * "unregistered_requests" and "unregistered_refused" count both outcomes.
 */
#define CR_OP_LOCAL_UNREGISTERED 0x100

/** One transfer. READ copies remote → local, WRITE local → remote. */
typedef struct cr_transfer_request {
    int opcode;                /**< cr_opcode, optionally | CR_OP_LOCAL_UNREGISTERED */
    void *local_addr;          /**< inside a locally registered buffer (see the flag) */
    cr_segment_handle segment; /**< from cr_engine_open_segment */
    uint64_t remote_addr;      /**< virtual address in the peer's buffer */
    uint64_t length;           /**< > 0 */
} cr_transfer_request;

typedef struct cr_task_status {
    int state;                  /**< cr_task_state */
    int error;                  /**< 0, or the cr_status that ended it */
    uint64_t transferred_bytes; /**< bytes known applied (lower bound) */
} cr_task_status;

/** A batch id. Generation-checked; 0 is never valid. */
typedef uint64_t cr_batch_id;

/** Create a batch that can hold `capacity` (> 0) tasks in total. */
CR_API int cr_batch_create(cr_engine *engine, size_t capacity, cr_batch_id *out);

/**
 * Flag of cr_batch_create_ex: the creating thread waits for the batch right
 * after cr_batch_submit. A batch of capacity 1 whose request is small host
 * memory over tcp may then be carried by the submitting thread itself (as
 * cr_engine_transfer_sync does): cr_batch_submit returns with the task
 * already ended, and cr_batch_wait returns at once. Submitting from a thread
 * that must not block is then a mistake; without the flag submit never
 * waits for the peer. Ignored for capacities above 1 and with
 * CRESCENT_TCP_CALLER_READS=0.
 */
#define CR_BATCH_CALLER_WAITS 1u

/**
 * cr_batch_create with flags (CR_BATCH_CALLER_WAITS, or 0 for the same batch
 * as cr_batch_create). Unknown flags: CR_INVALID_PARAMS.
 */
CR_API int cr_batch_create_ex(cr_engine *engine, size_t capacity, unsigned flags, cr_batch_id *out);

/**
 * Validate and start n requests (appended after earlier submits to the same
 * batch). Validation happens before anything starts: if any request is
 * invalid (unregistered local range, remote range not in the peer's
 * descriptor, memory kind no transport can serve, ...) nothing is submitted
 * and the error names the request index, buffer, kind and transport.
 * n == 0 succeeds and moves nothing. `requests` is borrowed for the call.
 * Errors: CR_ERR_INVALID_HANDLE, CR_ERR_TOO_MANY_REQUESTS, and the range
 * and kind errors above.
 */
CR_API int cr_batch_submit(cr_engine *engine, cr_batch_id batch,
                           const cr_transfer_request *requests, size_t n);

/** Current status of task `index` (submission order). */
CR_API int cr_batch_task_status(cr_engine *engine, cr_batch_id batch, size_t index,
                                cr_task_status *out);

/**
 * Block until every submitted task has finished or timeout_ms passes (< 0:
 * wait forever; the tasks' own deadlines bound it anyway). Sleeps; never
 * spins a core. Returns 0 if all tasks COMPLETED, CR_ERR_TIMEOUT if the wait
 * timed out with tasks still running, else the error of the first failed task.
 */
CR_API int cr_batch_wait(cr_engine *engine, cr_batch_id batch, int timeout_ms);

/**
 * Cancel unfinished tasks. Work not yet on the wire is dropped at once: a
 * task with any slice dropped ends CANCELED (once its other slices are done,
 * so no further I/O touches its local memory). Slices already on the wire
 * (for UCX: handed to the library) are not recalled; a task all of whose
 * slices were sent ends as they do: COMPLETED with its bytes applied, or
 * with their error. Returns immediately; cr_batch_wait then reports
 * CR_ERR_CANCELED for a batch with a canceled task.
 */
CR_API int cr_batch_cancel(cr_engine *engine, cr_batch_id batch);

/**
 * Free a batch. Allowed while tasks are in flight: the id becomes invalid at
 * once and the memory is reclaimed when the last task finishes. Racing
 * another thread's cr_batch_wait/_task_status/_cancel on the same id is
 * safe: a call that found the batch before the free keeps it alive and
 * returns its normal result; one that looks it up after the free gets
 * CR_ERR_INVALID_HANDLE. The id is never reused for another batch.
 */
CR_API int cr_batch_free(cr_engine *engine, cr_batch_id batch);

/**
 * Synchronous single transfer: submit, wait (timeout_ms <= 0: the engine's
 * request timeout), return 0 or the task's error.
 *
 * Over tcp a request of host memory that fits one slice and is under 1 MiB
 * is carried by the calling thread (from 1 MiB on it goes in two halves over
 * two of the engine's connections at once, which is faster): it writes the request on a connection
 * it holds for the call (each peer keeps up to 16 such connections, opened on first use) and reads
 * the reply itself, so no engine worker is woken on this side. With every such connection busy, or
 * CRESCENT_TCP_CALLER_READS=0, it goes through the engine's workers like any batch. Either way the
 * result, the errors and the counters are the same; the tcp counters sync_transfers and
 * sync_connects count this path.
 *
 * A transfer that a same-host path refused with CR_ERR_ADDRESS_NOT_REGISTERED
 * (the buffer our descriptor of the peer names is gone) runs once more with
 * the descriptor fetched again: the peer may have registered a new buffer at
 * the freed one's address. So the error means the range is not registered
 * now.
 */
CR_API int cr_engine_transfer_sync(cr_engine *engine, int opcode, void *local_addr,
                                   cr_segment_handle segment, uint64_t remote_addr, uint64_t length,
                                   int timeout_ms);

/**
 * Synchronous batch: n transfers of one opcode to one segment. Returns 0 if
 * all completed, else the first error. n == 0 succeeds. A batch refused with
 * CR_ERR_ADDRESS_NOT_REGISTERED runs once more, as cr_engine_transfer_sync.
 */
CR_API int cr_engine_transfer_sync_batch(cr_engine *engine, int opcode, cr_segment_handle segment,
                                         void *const *local_addrs, const uint64_t *remote_addrs,
                                         const uint64_t *lengths, size_t n, int timeout_ms);

/* ----------------------------------------------------------------------- */
/* Notifications and probes                                                */
/* ----------------------------------------------------------------------- */

/** Largest notification message, in bytes. */
#define CR_NOTIFY_MAX_MESSAGE 4096

/**
 * Deliver a short message (at most CR_NOTIFY_MAX_MESSAGE bytes; binary safe)
 * to the peer's engine; returns once the peer has queued it. `message` is
 * borrowed for the call. Any thread.
 */
CR_API int cr_engine_notify(cr_engine *engine, cr_segment_handle segment, const void *message,
                            size_t length);

/** A received notification. */
typedef struct cr_notification {
    char *from;    /**< sender's segment name (NUL-terminated) */
    char *message; /**< payload, NUL-terminated for convenience */
    size_t length; /**< payload length without the terminator */
} cr_notification;

/**
 * Take every notification received so far. On success *out owns an array of
 * *count entries (possibly NULL/0) to release with cr_notifications_free.
 */
CR_API int cr_engine_take_notifications(cr_engine *engine, cr_notification **out, size_t *count);

/** Free what cr_engine_take_notifications returned. NULL is a no-op. */
CR_API void cr_notifications_free(cr_notification *list, size_t count);

/**
 * Does the engine at `name` ("host:port") answer within timeout_ms? Returns 0
 * if it does, else CR_ERR_PEER_UNREACHABLE / CR_ERR_TIMEOUT / ... `name` is
 * borrowed for the call; nothing is cached for it. Any thread.
 */
CR_API int cr_engine_probe(cr_engine *engine, const char *name, int timeout_ms);

/* ----------------------------------------------------------------------- */
/* Statistics                                                              */
/* ----------------------------------------------------------------------- */

/** Counters since create; monotonic. */
typedef struct cr_engine_stats {
    uint64_t tasks_completed;
    uint64_t tasks_failed;
    uint64_t bytes_local;  /**< moved by memcpy within the process */
    uint64_t bytes_shm;    /**< copied through mapped shared memory */
    uint64_t bytes_cma;    /**< moved by process_vm_readv/writev */
    uint64_t bytes_tcp;    /**< moved over tcp lanes (as initiator) */
    uint64_t bytes_served; /**< served to peers as a target */
    uint64_t tcp_connects; /**< lanes connected */
    uint64_t descriptor_fetches;
    uint64_t shm_mappings;        /**< peer regions currently mapped */
    uint64_t transport_fallbacks; /**< requests moved to a slower path at first use */
} cr_engine_stats;

/**
 * Fill *out with the counters above (the per-path fields are read from the
 * generic counters of the transports with those names; 0 when not
 * installed). Any thread. Errors: CR_INVALID_PARAMS.
 */
CR_API int cr_engine_get_stats(cr_engine *engine, cr_engine_stats *out);

/** One counter: which transport (or "engine"), what, how much. The strings
 *  are static and live as long as the process. */
typedef struct cr_engine_counter {
    const char *transport;
    const char *name;
    uint64_t value;
} cr_engine_counter;

/**
 * Every counter of the engine and of each installed transport, one generic
 * array: for each transport "bytes", "requests" and "failures" (tasks it
 * finished as initiator), then the transport's own (tcp "connects", shm
 * "mappings", ...), then the engine's ("tasks_completed", ...). Copies up
 * to `cap` entries into out (may be NULL when cap is 0) and writes the
 * total number to *total, so a caller can size the array. Any thread.
 * Errors: CR_INVALID_PARAMS.
 */
CR_API int cr_engine_counters(cr_engine *engine, cr_engine_counter *out, size_t cap, size_t *total);

#ifdef __cplusplus
}
#endif

#endif /* CRESCENT_ENGINE_H */
