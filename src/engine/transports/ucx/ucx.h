/*
 * ucx.h - private interface of the ucx transport: one-sided READ/WRITE
 * through UCX's UCP RMA API (RDMA on InfiniBand/RoCE NICs; UCX's tcp and
 * shared-memory transports on one machine).
 *
 * Rails: the transport runs one UCP context per rail. Without device_name
 * there is one rail with UCX's own device choice (UCX_NET_DEVICES,
 * UCX_TLS); with a NIC list ("mlx5_0,mlx5_1", Mooncake's device_name) each
 * NIC is a rail of its own, so a large request stripes over rails and a
 * buffer is registered on the NICs nearest its memory (topology.h). Peers
 * match rails by position: list the NICs in the same order on every host.
 *
 * Threads: every UCP object (workers, endpoints, unpacked rkeys, requests)
 * is touched only by the engine worker that owns it (UCS_THREAD_MODE_SINGLE
 * workers, one per engine worker per rail). Submitting threads cut tasks
 * into ops and queue them to a worker (ucx_wstate.qlock), then wake it; the
 * worker posts them, progresses UCP when its event fd fires and on every
 * tick, and completes tasks from UCP callbacks. Memory registration
 * (ucp_mem_map/unmap on contexts) is thread-safe (multi-threaded contexts)
 * and runs on the registering thread.
 *
 * Completion means applied: a READ completes when its get completed (bytes
 * are local); a WRITE when a flush posted after it on the same endpoint
 * completed (the target has the bytes). A deadline, the peer's death or its
 * restart closes the endpoint with UCP_EP_CLOSE_FLAG_FORCE; its requests
 * complete (canceled) before the tasks fail, so no later I/O touches them.
 */
#ifndef CRESCENT_ENGINE_TRANSPORTS_UCX_H
#define CRESCENT_ENGINE_TRANSPORTS_UCX_H

#include <ucp/api/ucp.h>

#include "engine/internal.h"
#include "engine/topology.h"

#define UCX_MAX_RAILS 8

typedef struct ucx_ep ucx_ep;
typedef struct ucx_wstate ucx_wstate;

/* One slice of a task on one rail. Queued (submit), then posted and in
 * flight on an endpoint (worker thread), then completed and freed. */
typedef struct ucx_op {
    struct ucx_op *next, *prev;
    cre_task *task;
    cre_peer *peer;
    cre_desc *desc; /* snapshot the range was validated against (ref held) */
    size_t remote_index;
    int rail;
    int opcode;
    uint8_t *local;
    uint64_t remote_addr, length;
    ucp_mem_h local_memh;
    uint64_t deadline_ns;
    ucx_ep *ep;
    void *request; /* in flight, NULL when done or not posted */
    ucs_status_t status;
    bool rma_done, flushed; /* WRITE: both before it completes */
    bool in_flush;          /* WRITE: covered by a flush posted after it */
    /* active-message mode (software paths, ucx_am.c) */
    uint64_t am_id;     /* the id the target echoes; 0 when not registered */
    uint8_t am_hdr[32]; /* AM_REQ header: UCX may send it after the call returns */
    void *recv_req;     /* receiving a READ reply's payload */
    int am_status;      /* the target's status */
    bool abandoned;     /* its task already failed; UCX still holds a request of it */
    /* Inside a UCX call that names this op as user data (a send, put, get
     * or payload receive). UCX may fail the endpoint (err_cb -> ep_fail) or
     * run the op's own callback before that call returns; op_maybe_done
     * then leaves the op alone, and the caller settles it after the call
     * (cre_ucx_op_settle), so the op is never freed under the caller. */
    bool in_ucx_call;
} ucx_op;

/* rkeys unpacked on one endpoint for one descriptor snapshot. */
typedef struct ucx_rkeys {
    uint64_t instance, version;
    size_t n;
    ucp_rkey_h *keys;
    struct ucx_rkeys *next; /* retired caches, destroyed once the ep is idle */
} ucx_rkeys;

/* Our endpoint to one remote worker, on one rail, owned by one worker. */
struct ucx_ep {
    ucp_ep_h ep;
    ucx_wstate *ws;
    struct ucx_ep **slot; /* its place in the peer's table while live */
    int rail;
    uint64_t peer_gen;   /* peer generation it was created for */
    int failed;          /* 0, or the status its ops end with */
    bool no_peer_errors; /* created without peer failure handling (shared memory) */
    uint64_t failed_ns;
    bool closing; /* ucp_ep_close_nbx posted */
    void *close_req;
    ucx_op *ops; /* posted, not finished */
    size_t n_ops;
    ucx_op *wait_head, *wait_tail; /* routed here, not posted: the window is full */
    ucx_rkeys *rkeys;
    ucx_rkeys *retired;
};

/* Per engine worker: its UCP workers (one per rail), the queue from
 * submitters, and the endpoints it owns. */
struct ucx_wstate {
    struct ucx_engine *ue;
    cre_worker *worker;
    ucp_worker_h uw[UCX_MAX_RAILS];
    struct ucx_efd *efd; /* [n_rails] */
    pthread_mutex_t qlock;
    ucx_op *queue_head, *queue_tail;
    /* active-message mode: ids of our ops in flight, and requests we serve */
    ucx_op **am_ops;
    uint32_t *am_gens;
    size_t am_cap;
    uint32_t *am_free;
    size_t n_am_free;
    struct ucx_serving *serving;
    struct reply_msg *replies; /* replies UCX has not finished sending */
    uint64_t seen_unregister_epoch;
    void *am_args[UCX_MAX_RAILS];
    ucx_ep **live; /* endpoints in use (in their peers' slots) */
    size_t n_live, cap_live;
    ucx_ep **dead; /* endpoints closing, freed when their ops are done */
    size_t n_dead, cap_dead;
    uint64_t spin_until; /* busy-poll: no arming and sleeping before this */
    /* A peer reached without peer-failure handling (shared memory) passed a
     * deadline on this worker: if it died while sending to us, the UCP
     * worker's shared-memory receive queue is blocked for good (see
     * check_deadlines in ucx_worker.c), and later timeouts say so. */
    bool rx_maybe_blocked;
};

/* A UCP worker's event fd in the engine worker's loop. */
typedef struct ucx_efd {
    crb_io io;
    ucx_wstate *ws;
} ucx_efd;

typedef struct ucx_rail {
    char devices[128];          /* UCX_NET_DEVICES of its context ("" = UCX's choice) */
    int nic;                    /* index in the topology, -1 if not one NIC */
    atomic_bool no_peer_errors; /* its endpoints cannot have peer failure handling */
    ucp_context_h context;
} ucx_rail;

typedef struct ucx_engine {
    cre_tp *tp;
    size_t n_rails;
    ucx_rail rails[UCX_MAX_RAILS];
    ucx_wstate *ws; /* one per engine worker */
    cre_topology topo;
    bool software_rma; /* no RDMA device: UCX's tcp/shared-memory paths */
    bool use_am;       /* move bytes with checked active messages, not RMA */
    atomic_uint next_ws;
    atomic_ullong eps_created, eps_failed, flushes, rails_striped, reg_ns, regs;
} ucx_engine;

/* A registered buffer's UCP handles, per rail (NULL: not on that rail). */
typedef struct ucx_buffer {
    ucp_mem_h memh[UCX_MAX_RAILS];
} ucx_buffer;

/* A peer's descriptor as this transport reads it. */
typedef struct ucx_remote_buf {
    uint8_t rails; /* bit mask */
    const uint8_t *rkey[UCX_MAX_RAILS];
    uint16_t rkey_len[UCX_MAX_RAILS];
} ucx_remote_buf;

typedef struct ucx_desc {
    uint64_t instance, version;
    size_t n_rails, n_workers;
    const uint8_t **addr; /* [rail * n_workers + w] worker addresses */
    uint16_t *addr_len;
    size_t n_bufs;
    ucx_remote_buf *bufs;
} ucx_desc;

/* The transport's per-peer area: endpoints by (our worker, rail). */
typedef struct ucx_peer {
    atomic_ullong gen; /* bumped when the peer restarted: endpoints are rebuilt */
    ucx_ep **eps;      /* [worker * n_rails + rail]; each slot owned by its worker */
} ucx_peer;

/* ucx_am.c: checked active messages instead of one-sided RMA, where UCX's
 * software paths would not check the target's rkeys. */
int cre_ucx_am_init(ucx_wstate *ws, size_t rail);
/* Destroy, workers stopped: served requests give back their buffers. */
void cre_ucx_am_quiesce(ucx_wstate *ws);
/* After the UCP workers are destroyed (no callback can run any more): free
 * what UCX never gave back (servings, replies) and the op tables. */
void cre_ucx_am_fini(ucx_wstate *ws);
/* Post op (its endpoint found): 0, or a negative status (op not posted). */
int cre_ucx_am_post(ucx_wstate *ws, ucx_ep *ep, ucx_op *op);
/* The op is finishing: forget its id. */
void cre_ucx_am_forget(ucx_wstate *ws, ucx_op *op);
/* Tick: cancel served requests past their deadline or on dying buffers. */
void cre_ucx_am_tick(ucx_wstate *ws, uint64_t now_ns);
/* ucx_worker.c: an op's state changed; finish it if it is done. */
void cre_ucx_op_maybe_done(ucx_op *op);
/* After a UCX call made with op->in_ucx_call set: clear it and finish the
 * op if what happened meanwhile (its callback, a failed endpoint) ended
 * it. The op may be freed: the caller must not touch it afterwards. */
void cre_ucx_op_settle(ucx_op *op);

/* ucx_worker.c */
int cre_ucx_workers_init(ucx_engine *ue);
/* Fail (CR_ERR_SHUTDOWN) the ops submitted to ws that its worker never
 * posted: their tasks hold references to registered buffers, so this runs
 * at quiesce, before the engine frees its registry. Workers stopped. */
void cre_ucx_fail_queued(ucx_wstate *ws);
void cre_ucx_workers_fini(ucx_engine *ue);
void cre_ucx_queue(ucx_engine *ue, ucx_wstate *ws, ucx_op *first, ucx_op *last);
void cre_ucx_tick(cre_tp *tp, cre_worker *w, uint64_t now_ns);
/* Engine teardown (workers stopped): close the peer's endpoints. */
void cre_ucx_peer_close(ucx_engine *ue, ucx_peer *up);

#endif
