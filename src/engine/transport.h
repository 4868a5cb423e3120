/*
 * transport.h - the interface every transport implements, and what the
 * engine core hands it.
 *
 * A transport is one ops table (cre_transport_ops) in its own folder under
 * transports/, listed once in the registry (transports/registry.c, fed by
 * CMake with the transports this build has). Adding one touches its folder,
 * that list and CMake, nothing in the core.
 *
 * An engine installs the transports its protocol names (config.c), ordered
 * by rank: "tcp" = tcp; "shm" = the same-process and same-host ones; "ucx"
 * = ucx; "auto" = every built-in one, each told it was not asked for by
 * name, so it may decline at init (ucx without an RDMA device does). Each
 * installed transport is a cre_tp: its ops, its index, a private area of
 * ops->engine_size bytes the core allocates, and counters.
 *
 * Per-object private state, all allocated and zeroed by the core:
 *   engine  tp->priv                  (ops->engine_size bytes)
 *   peer    cre_peer_tp(p, tp)        (ops->peer_size bytes)
 *   buffer  b->tp_state[tp->index]    (set by ops->reg; the blob it writes
 *                                      travels in our descriptor)
 *   remote  cre_desc.tp_state[index]  (set by ops->desc_parse when a peer's
 *                                      descriptor arrives; freed by
 *                                      ops->desc_free with the snapshot)
 *
 * At submit the core validates a request, resolves both ends into a
 * cre_route and asks the installed transports in rank order whether they
 * can serve it; the first that can gets the task. A transport that finds at
 * first use that the peer refuses its path returns
 * CR_ERR_TRANSPORT_UNSUPPORTED and the next one that can serve takes over.
 *
 * Locking and blocking, per slot (every slot not marked "required" may be
 * NULL):
 *   init        engine create, caller's thread, after the workers exist and
 *               before they run; may block (bind, open devices). No lock.
 *   fini        engine destroy, after every worker has stopped; no other
 *               call runs concurrently. No lock.
 *   endpoint    descriptor build, any thread, under the descriptor lock;
 *               must not block.
 *   reg         registration, the caller's thread, no engine lock held;
 *               may block (pinning memory). Writes the blob peers will see.
 *   dereg       unregistration, after every local reference to the buffer
 *               is gone; may block, bounded (waits for peers' in-flight
 *               copies). After it returns the transport never touches the
 *               buffer again and no peer can reach it through this path.
 *   peer_init   a peer object is created (no I/O yet), under peers_lock.
 *   peer_fini   engine destroy, after the workers stopped (before fini).
 *   quiesce     engine destroy, after the workers stopped and before the
 *               registry goes: give back every reference to registered
 *               buffers still held (requests being served). Optional.
 *   desc_parse  a new descriptor of a peer arrived, any thread, no lock;
 *               parse what you need (cheap), unpack nothing expensive.
 *   peer_reset  the peer restarted (new instance) or died: drop what was
 *               imported from it. Any thread, no lock held.
 *   can_serve   required. Pure, any thread, no lock; may read tp->priv,
 *               the peer's private area with atomics, and the route.
 *   submit      required. The caller's thread, no lock held; must not
 *               block on the network (queue and kick a worker instead).
 *               Sets t->slices_left and completes the task through
 *               cre_task_slice_done, now or later from any thread.
 *   tick        every worker's tick (cre_worker w), on that worker's
 *               thread: deadlines, retries, canceled work, progress.
 *   cancel      cr_batch_cancel marked tasks canceled; any thread.
 *   counters    cr_engine_counters: append extra (name, value) counters.
 *   serve_role / serve: a connection to our port authenticated with this
 *               HELLO role; serve takes it over (worker thread).
 *   classify    registration, the caller's thread, before any reg; may
 *               call a device driver (bounded). detect: the location was
 *               "*": claim memory of a kind this transport owns (set
 *               b->kind, b->device). Otherwise check the location's kind
 *               against what the memory is; a contradiction is
 *               CR_ERR_MEMORY_KIND_MISMATCH.
 *   stager      (not a function) staging services for the others, below.
 *
 * Memory kinds: a transport whose `kinds` names device memory kinds owns
 * them. It is installed with every protocol, so that registrations of
 * its memory are classified and the other transports can stage through
 * it; when the protocol did not ask for its own paths ("tcp", "ucx"),
 * tp->kind_only is set and the core never asks it to move data itself.
 */
#ifndef CRESCENT_ENGINE_TRANSPORT_H
#define CRESCENT_ENGINE_TRANSPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crescent/engine.h"
#include "proto/messages.h"

typedef struct cre_peer cre_peer;
typedef struct cre_task cre_task;
typedef struct cre_buffer cre_buffer;
typedef struct cre_worker cre_worker;
typedef struct cre_conn cre_conn;
typedef struct cre_desc cre_desc;
typedef struct cre_tp cre_tp;

#define CRE_MAX_TRANSPORTS 8

/* What a transport can reach (ops->reach). */
#define CRE_REACH_PROCESS 1u /* this process only */
#define CRE_REACH_HOST    2u /* other processes of this host */
#define CRE_REACH_REMOTE  4u /* other hosts */

/* What submit resolved about a request's two ends. */
typedef struct cre_route {
    cre_peer *peer;
    cre_buffer *local_buf; /* the local registered buffer (a reference is held) */
    int local_kind, local_device;
    /* The target: in this process (self_target, a live registry entry with a
     * reference held) or described by the peer's descriptor snapshot. */
    cre_buffer *self_target;
    cre_desc *desc;      /* snapshot the range was validated against (ref held) */
    size_t remote_index; /* its buffer in desc->d.buffers */
    int remote_kind, remote_device;
    uint64_t remote_base;   /* start of the remote buffer */
    uint64_t peer_instance; /* descriptor instance (ours for self) */
    bool same_host;         /* the peer runs on this host (not this process) */
} cre_route;

/*
 * Staging: moving device memory through pinned host windows, for transports
 * that can only touch host memory (tcp, ucx without CUDA support). A
 * cre_stage is one staging stream (two pinned windows: the copy of window
 * k+1 overlaps the network moving window k), used by one thread at a time
 * (a lane's or a served connection's worker). Every call may block briefly
 * on a copy engine (never on the network).
 *
 *   outbound (device -> wire): out_begin(src, len); then out_next() returns
 *     each window in order, ready to send, and starts copying the window
 *     after it into the buffer the previous one used (which the caller has
 *     finished sending when it asks for the next).
 *   inbound (wire -> device): in_begin(dst, len); in_window() says where the
 *     next bytes go (at most *len); in_commit(n) starts copying the n bytes
 *     received there to the device; in_finish() waits for every copy: 0
 *     means the bytes are in device memory (completion means applied).
 *   A failed or abandoned stream is reset by the next begin or by close.
 */
typedef struct cre_stage cre_stage;

typedef struct cre_stager_ops {
    int (*open)(cre_tp *tp, cre_stage **out);
    void (*close)(cre_stage *st); /* waits for its copies in flight */
    int (*out_begin)(cre_stage *st, int device, uint64_t src, uint64_t len);
    int (*out_next)(cre_stage *st, const uint8_t **ptr, size_t *len);
    int (*in_begin)(cre_stage *st, int device, uint64_t dst, uint64_t len);
    int (*in_window)(cre_stage *st, uint8_t **ptr, size_t *len);
    int (*in_commit)(cre_stage *st, size_t n);
    int (*in_finish)(cre_stage *st);
} cre_stager_ops;

typedef struct cre_transport_ops {
    const char *name; /* required; also its key in descriptors */
    int rank;         /* required; lower is preferred */
    uint32_t reach;   /* CRE_REACH_* */
    size_t engine_size, peer_size;

    /* explicit: the protocol named this transport (it must work or fail
     * create); otherwise it may decline with CR_ERR_TRANSPORT_UNSUPPORTED
     * and is left out. */
    int (*init)(cre_tp *tp, bool explicit_choice);
    void (*fini)(cre_tp *tp);
    /* Append our endpoint address (text or binary) to out; nothing = none. */
    int (*endpoint)(cre_tp *tp, crp_buf *out);

    int (*reg)(cre_tp *tp, cre_buffer *b, crp_buf *blob);
    void (*dereg)(cre_tp *tp, cre_buffer *b);

    int (*peer_init)(cre_tp *tp, cre_peer *p, void *pp);
    void (*peer_fini)(cre_tp *tp, cre_peer *p, void *pp);
    void *(*desc_parse)(cre_tp *tp, cre_peer *p, const crp_descriptor *d);
    void (*desc_free)(cre_tp *tp, void *state);
    void (*peer_reset)(cre_tp *tp, cre_peer *p, void *pp);
    void (*quiesce)(cre_tp *tp);

    bool (*can_serve)(cre_tp *tp, const cre_route *r);
    /* Moves local memory that is not registered (CR_OP_LOCAL_UNREGISTERED):
     * the route's local_buf is then a transient buffer (host kind, no
     * tp_state, in no registry) and the transport touches only t->local.
     * Transports that need what reg attached (ucx's memory handles) leave
     * it false; batch.c then refuses such requests instead of letting a
     * slower path take them. */
    bool any_local;
    int (*submit)(cre_tp *tp, const cre_route *r, cre_task *t);
    /* Optional: every task of one cr_batch_submit call for peer p has been
     * submitted (called once per run of consecutive tasks with the same
     * transport and peer, on the submitting thread, no engine lock held):
     * start what submit only queued, so the run leaves together. */
    void (*submit_flush)(cre_tp *tp, cre_peer *p);
    void (*tick)(cre_tp *tp, cre_worker *w, uint64_t now_ns);
    void (*cancel)(cre_tp *tp);
    size_t (*counters)(cre_tp *tp, cr_engine_counter *out, size_t cap);

    uint8_t serve_role; /* crp_role served by `serve` (0 = none) */
    int (*serve)(cre_tp *tp, cre_conn *c);

    uint32_t kinds; /* device memory kinds owned: bit (1u << cr_mem_kind) */
    int (*classify)(cre_tp *tp, cre_buffer *b, bool detect);
    /* The transport whose state this one's paths use (cma: shm's control
     * page, fd service and peer map), or NULL. When the protocol asks for
     * this one and not that one, that one is installed kind_only. */
    const char *needs;
    const cre_stager_ops *stager;
} cre_transport_ops;

/* An installed transport. */
struct cre_tp {
    const cre_transport_ops *ops;
    cr_engine *engine;
    int index; /* in engine->tps, also the slot of its per-object state */
    void *priv;
    bool kind_only; /* installed for its memory kinds only (see above) */
    /* Counted by the core for every task this transport finished. */
    atomic_ullong bytes, requests, failures;
};

/* The transports this build has, by rank (transports/registry.c). */
size_t cre_builtin_transports(const cre_transport_ops *const **out);
/* Check that an ops table has its required slots; CR_ERR_INVALID_CONFIG. */
int cre_transport_check(const cre_transport_ops *ops);

/* Every host memory kind. */
bool cre_kind_is_host(int kind);

/* --- helpers for transports (segment.c, batch.c) ------------------------ */

/* The peer's private area of tp. */
void *cre_peer_tp(cre_peer *p, const cre_tp *tp);
/* The remote buffer's blob written by this transport, or NULL. */
const uint8_t *cre_route_blob(const cre_route *r, const cre_tp *tp, size_t *len);
/* What tp->ops->desc_parse returned for the route's descriptor. */
void *cre_route_state(const cre_route *r, const cre_tp *tp);
/* Hold / drop a reference on a descriptor snapshot. */
void cre_desc_ref(cre_desc *d);
void cre_desc_unref(cre_desc *d);
/* The installed transport named `name`, or NULL. */
cre_tp *cre_engine_tp(cr_engine *e, const char *name);
/* The installed transport owning memory kind `kind` that offers staging,
 * or NULL (then *ops is untouched). */
cre_tp *cre_engine_stager(cr_engine *e, int kind, const cre_stager_ops **ops);

#endif
