/*
 * tcp.h - private interface of the tcp transport: lanes (the initiator
 * side, lane.c), the serving side of data connections (serve.c), and the
 * ops table that ties them to the engine (tcp.c).
 *
 * Ownership: a peer's lanes live in its tcp area (tcp_peer) and are each
 * owned by one worker; the worker's list of lanes (tcp_worker) is appended
 * under its lock when a peer is created and walked by that worker only.
 * Slices move submit → lane queue (tcp_peer.queue_lock) → send list →
 * in-flight list. Everything of a lane past its queue (socket, state, send
 * and in-flight lists, reader) is guarded by the lane's io_lock: its worker
 * holds it while it serves the lane, and a submitting thread that finds the
 * lane READY and the lock free writes the socket itself (lane.c), instead
 * of waking the worker. Lock order: tcp_worker.lock → tcp_lane.io_lock →
 * tcp_peer.queue_lock / addr_lock.
 */
#ifndef CRESCENT_ENGINE_TRANSPORTS_TCP_H
#define CRESCENT_ENGINE_TRANSPORTS_TCP_H

#include "engine/internal.h"

/* One wire request: a piece of a task, at most slice_size bytes. */
typedef struct tcp_slice {
    struct tcp_slice *next;
    cre_task *task;
    uint8_t *local;
    uint64_t remote_addr;
    uint64_t length;
    uint64_t request_id;
    uint64_t deadline_ns;
    uint64_t peer_instance; /* instance the range was validated against */
    size_t sent;            /* bytes of header+body+payload written */
    int status;             /* its result, once finished (lane.c: slice_finish) */
    uint8_t head[CRP_HEADER_SIZE + 32];
    size_t head_len;
    /* local device memory: its payload moves through the lane's stages */
    bool staged;
    const uint8_t *win;        /* WRITE: the staged window being sent */
    size_t win_start, win_end; /* its payload offsets */
} tcp_slice;

enum tcp_lane_state { LANE_IDLE, LANE_CONNECTING, LANE_WAIT_CHALLENGE, LANE_WAIT_ACK, LANE_READY };

typedef struct tcp_lane {
    struct tcp_peer *tpeer;
    cre_peer *peer;
    int index;
    cre_worker *worker;
    /* submit side → worker: guarded by tpeer->queue_lock */
    tcp_slice *queue_head, *queue_tail;
    /* guarded by io_lock (the worker, or a submitter that took it) */
    pthread_mutex_t io_lock;
    bool send_failed;                 /* a submitter's write failed: the worker closes the lane */
    tcp_slice *done_head, *done_tail; /* finished, completed once io_lock is released */
    int state;
    crb_io io;
    crp_reader reader;
    tcp_slice *send_head, *send_tail;     /* taken from queue, not fully written */
    tcp_slice *flight_head, *flight_tail; /* written, awaiting response */
    uint64_t next_request_id;
    uint64_t retry_at_ns;
    uint64_t connect_deadline_ns;
    uint32_t backoff_ms;
    uint64_t instance; /* peer instance seen in HELLO_ACK */
    uint8_t server_nonce[CRP_NONCE_SIZE];
    uint8_t client_nonce[CRP_NONCE_SIZE];
    crp_buf scratch;           /* encoding space for request bodies */
    atomic_bool reset_backoff; /* the peer answered again: retry at once */
    /* staging of local device memory (opened on first use) */
    cre_tp *stager;
    const cre_stager_ops *sops;
    cre_stage *tx_stage, *rx_stage;
    int rx_status;    /* first staging error of the READ being received */
    uint64_t rx_left; /* its payload bytes not yet given a window */
} tcp_lane;

/* A connection a synchronous caller holds for one request (sync.c). */
typedef struct tcp_sync_conn {
    struct tcp_sync_conn *next; /* in the peer's idle list */
    int fd;                     /* blocking, 100 ms receive/send timeouts */
    uint64_t instance;          /* the peer's instance id from HELLO_ACK */
    uint64_t next_request_id;
    crp_buf body;  /* the request body's encoding, reused by each request */
    crb_spin spin; /* how its caller polls for a reply (the engine's spin mode) */
} tcp_sync_conn;

typedef struct tcp_peer {
    pthread_mutex_t queue_lock; /* the lanes' queues */
    /* The peer's address, resolved by a submitting thread (never under a
     * lane's or worker's lock: a slow resolver stalls only that caller);
     * a failed connect marks it stale so the next submit resolves again. */
    pthread_mutex_t addr_lock;
    struct sockaddr_storage addr;
    socklen_t addr_len; /* 0: not resolved yet */
    atomic_bool addr_stale;
    atomic_ullong lane_bytes; /* slice bytes charged so far: picks the lane */
    tcp_lane *lanes;
    size_t n_lanes;
    /* Connections of synchronous callers (sync.c): idle ones in a list,
     * a busy one owned by the thread using it. Guarded by sync_lock. */
    pthread_mutex_t sync_lock;
    tcp_sync_conn *sync_idle;
    unsigned sync_open; /* idle + busy */
} tcp_peer;

typedef struct tcp_worker {
    pthread_mutex_t lock; /* lanes[] */
    tcp_lane **lanes;
    size_t n_lanes, cap_lanes;
} tcp_worker;

typedef struct tcp_engine {
    tcp_worker *workers; /* one per engine worker */
    atomic_ullong connects;
    atomic_ullong sync_connects;  /* connections opened by synchronous callers */
    atomic_ullong sync_transfers; /* requests a synchronous caller carried itself */
} tcp_engine;

/* lane.c */
int cre_tcp_submit(cre_tp *tp, const cre_route *r, cre_task *t);
/* The slice length t is cut into: the engine's slice_size, or half of t (rounded up to 4 KiB)
 * for a task alone in its batch of at least 1 MiB and less than two slices, to a peer with two
 * lanes or more, so that two lanes (two workers on each side) carry it at once. A task cut in
 * two is never carried by a synchronous caller's own connection (sync.c). */
uint64_t cre_tcp_slice_of(const cr_engine *e, const tcp_peer *p, const cre_task *t);
/* After a run of submits to peer: send what they queued (or wake the worker). */
void cre_tcp_submit_flush(cre_tp *tp, cre_peer *peer);
void cre_tcp_lanes_tick(cre_tp *tp, cre_worker *w, uint64_t now_ns);
/* Engine teardown (workers stopped): fail everything, close the socket. */
void cre_tcp_lane_fail_all(tcp_lane *l, int status);
void cre_tcp_lane_init(tcp_lane *l, tcp_peer *tpeer, cre_peer *p, int index, cre_worker *w);
void cre_tcp_lane_fini(tcp_lane *l);

/* sync.c: a synchronous caller's small host-memory task (t->batch->
 * caller_waits) runs on the calling thread over a pooled connection of its
 * own. Returns true when it took the task (t is complete, with its status),
 * false when the lanes must carry it (every pooled connection busy). */
bool cre_tcp_sync_run(cre_tp *tp, tcp_peer *p, const cre_route *r, cre_task *t,
                      uint64_t deadline_ns);
/* Is rep the right reply to req (a READ or WRITE of `length` bytes) on a
 * synchronous connection? 0 and *status (the task's result: 0, the peer's
 * negative cr_status, CR_ERR_REMOTE for a positive one), or the
 * connection's failure: CR_ERR_MALFORMED_FRAME (wrong type, id, body or
 * payload length), or an ERROR frame's status. */
int cre_tcp_sync_reply_check(const crp_header *req, const crp_header *rep, uint64_t length,
                             const char *peer, int *status);
/* Engine teardown: close the idle connections (no caller holds one then). */
void cre_tcp_sync_fini(tcp_peer *p);

/* The stager for a buffer of `kind` (NULL for host memory or none). */
cre_tp *cre_tcp_stager(cr_engine *e, int kind, const cre_stager_ops **ops);

/* serve.c: take over an authenticated data connection. */
int cre_tcp_serve(cre_tp *tp, cre_conn *c);

#endif
