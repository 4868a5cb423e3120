/*
 * internal.h - the engine's private structures, shared by its files.
 *
 * Object graph (all owned by cr_engine, freed by cr_engine_destroy):
 *
 *   cr_engine ─ registry          local buffers (registry.h)
 *             ─ workers[]         I/O threads; each owns an epoll set and the
 *                                 connections (server side and lanes) in it
 *             ─ listener fd       on worker 0; accepted connections are
 *                                 handed round-robin to workers
 *             ─ segments          handle table → cre_peer
 *             ─ peers             one per remote segment name; each has a
 *                                 cached descriptor and lanes_per_peer lanes
 *             ─ batches           handle table → cre_batch → cre_task[]
 *
 * Threads: API calls run on caller threads; they validate, create tasks and
 * slices, push slices onto a lane's queue and wake the lane's worker. Only
 * the owning worker thread touches a connection's socket, so closing it on
 * that thread guarantees no later I/O into a failed slice's memory.
 */
#ifndef CRESCENT_ENGINE_INTERNAL_H
#define CRESCENT_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/net.h"
#include "crescent/engine.h"
#include "engine/ctl_page.h"
#include "engine/registry.h"
#include "engine/transport.h"
#include "metadata/backend.h"
#include "proto/frame.h"
#include "proto/messages.h"

typedef struct cre_worker cre_worker;
typedef struct cre_conn cre_conn;
typedef struct cre_peer cre_peer;
typedef struct cre_batch cre_batch;
typedef struct cre_task cre_task;
typedef struct cre_slice cre_slice;

/* ---- tasks and batches -------------------------------------------------- */

struct cre_task {
    cre_batch *batch;
    int opcode;
    uint8_t *local;
    uint64_t remote_addr;
    uint64_t length;
    cre_buffer *local_buf; /* reference held until the task finishes */
    atomic_uint slices_left;
    atomic_int error; /* first error, 0 if none */
    atomic_int state; /* cr_task_state */
    atomic_ullong done_bytes;
    atomic_bool canceled;
};

struct cre_batch {
    cr_engine *engine;
    size_t capacity;
    size_t count; /* submitted tasks; guarded by lock */
    cre_task *tasks;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    size_t unfinished; /* guarded by lock */
    bool freed;        /* id released; free memory when quiescent */
    int users;         /* API calls currently holding it; guarded by lock */
};

/* One wire request: a piece of a task, at most slice_size bytes. */
struct cre_slice {
    cre_slice *next;
    cre_task *task;
    uint8_t *local;
    uint64_t remote_addr;
    uint64_t length;
    uint64_t request_id;
    uint64_t deadline_ns;
    uint64_t peer_instance; /* instance the range was validated against */
    size_t sent;            /* bytes of header+body+payload written */
    uint8_t head[CRP_HEADER_SIZE + 32];
    size_t head_len;
};

/* ---- connections -------------------------------------------------------- */

enum cre_conn_kind {
    CRE_CONN_SERVER,
    CRE_CONN_LANE,
    CRE_CONN_LISTENER,
    CRE_CONN_WAKE,
    CRE_CONN_SHM_LISTENER, /* our same-host fd service (Unix SEQPACKET) */
    CRE_CONN_SHM_SERVER,   /* a peer connected to it */
    CRE_CONN_SHM_WATCH,    /* our connection to a peer's fd service */
};

enum cre_read_phase { CRE_READ_HEADER, CRE_READ_BODY, CRE_READ_DATA };

/* An outbound item on a server connection: header(+body) then optional payload. */
typedef struct cre_out {
    struct cre_out *next;
    uint8_t *head; /* header + body, malloc'd */
    size_t head_len;
    const uint8_t *payload; /* registered memory; NULL if none */
    size_t payload_len;
    cre_buffer *payload_buf; /* reference released when sent */
    size_t sent;
} cre_out;

struct cre_conn {
    int kind; /* cre_conn_kind */
    int fd;
    cre_worker *worker;
    cr_engine *engine;
    /* reader */
    int phase;
    uint8_t hdr_bytes[CRP_HEADER_SIZE];
    size_t hdr_got;
    crp_header hdr;
    uint8_t *body;
    size_t body_cap, body_got;
    uint8_t *data_dst; /* where DATA goes; NULL → discard */
    uint64_t data_got;
    uint8_t *rbuf; /* read buffer (conn.c), malloc'd on first use */
    size_t rbuf_off, rbuf_len;
    bool want_out; /* EPOLLOUT armed */
    /* server side */
    bool authed;
    uint8_t nonce[CRP_NONCE_SIZE];
    cre_out *out_head, *out_tail;
    cre_buffer *rx_buf; /* WRITE target buffer being received into */
    int rx_status;      /* status to ack for the WRITE being received */
    /* lane side */
    cre_peer *peer;
    int lane_index;
    /* shm server side: may this peer receive fds? */
    bool shm_allowed;
};

/* ---- peers and lanes ---------------------------------------------------- */

enum cre_lane_state { LANE_IDLE, LANE_CONNECTING, LANE_WAIT_CHALLENGE, LANE_WAIT_ACK, LANE_READY };

typedef struct cre_lane {
    cre_peer *peer;
    int index;
    cre_worker *worker;
    /* submit side → worker: guarded by peer->lock */
    cre_slice *queue_head, *queue_tail;
    /* worker-owned */
    int state;
    cre_conn conn;
    cre_slice *send_head, *send_tail;     /* taken from queue, not fully written */
    cre_slice *flight_head, *flight_tail; /* written, awaiting response */
    uint64_t next_request_id;
    uint64_t retry_at_ns;
    uint64_t connect_deadline_ns;
    uint32_t backoff_ms;
    uint64_t instance; /* peer instance seen in HELLO_ACK */
    uint8_t client_nonce[CRP_NONCE_SIZE];
    crp_buf scratch; /* encoding space for request bodies */
} cre_lane;

/* A mapped region of a same-host peer. */
typedef struct cre_shm_map {
    uint64_t id;
    uint8_t *base;
    uint64_t size;
} cre_shm_map;

/* Same-host state of a peer (shm and CMA transports). */
typedef struct cre_peer_local {
    pthread_mutex_t lock;      /* connecting, mapping; before map_lock */
    pthread_rwlock_t map_lock; /* copies hold it shared; dropping takes it exclusive */
    int sock;                  /* SEQPACKET to the peer's fd service, -1 if none */
    cre_conn watch;            /* sock in a worker's epoll: notices the peer dying */
    atomic_bool refused;       /* the peer refused us fds (credentials) */
    cre_ctl_slot *ctl;         /* the peer's control page, mapped */
    uint64_t ctl_size;
    cre_shm_map *maps;
    size_t n_maps, cap_maps;
    atomic_int cma_state; /* 0 untried, 1 works, -1 refused by the kernel */
    uint64_t instance;    /* peer instance the mappings belong to */
} cre_peer_local;

/* Per descriptor buffer: its parsed shm handle. */
typedef struct cre_buffer_extra {
    uint64_t shared_id, shared_offset;
    uint32_t ctl_slot;
    uint64_t ctl_gen;
} cre_buffer_extra;

struct cre_peer {
    cr_engine *engine;
    char name[CRB_HOST_MAX + 8];
    char host[CRB_HOST_MAX];
    uint16_t port;
    bool is_self;
    pthread_mutex_t lock;                  /* descriptor, lane queues */
    crp_descriptor desc;                   /* cached; desc.instance identifies the process */
    cre_buffer_extra *desc_extra;          /* parallel to desc.buffers */
    bool same_host;                        /* desc.host_id equals ours */
    char shm_address[CRP_MAX_ADDRESS + 1]; /* peer's fd service ("" if none) */
    int32_t cma_pid;                       /* 0 if the peer offers no CMA */
    cre_peer_local local;
    bool desc_valid;
    bool desc_stale;               /* peer restarted: refetch before next submit */
    atomic_ullong lane_bytes;      /* slice bytes charged so far: picks the lane (lane.c) */
    atomic_bool reset_backoff[64]; /* per lane: set when the peer came back */
    cre_lane *lanes;
    size_t n_lanes;
};

/* ---- workers ------------------------------------------------------------ */

struct cre_worker {
    cr_engine *engine;
    int index;
    int epfd;
    int wakefd; /* eventfd */
    cre_conn wake_conn;
    pthread_t thread;
    atomic_bool stop;
    atomic_bool kicked;
    pthread_mutex_t lock;
    cre_lane **lanes; /* lanes owned by this worker; guarded by lock */
    size_t n_lanes, cap_lanes;
    cre_conn **conns; /* server conns owned by this worker (worker thread only) */
    size_t n_conns, cap_conns;
};

/* ---- the engine --------------------------------------------------------- */

typedef struct cre_handle_table {
    pthread_mutex_t lock;
    void **items;
    uint32_t *gens;
    size_t cap;
} cre_handle_table;

struct cr_engine {
    /* configuration (copied) */
    char hostname[CRB_HOST_MAX];
    char segment_name[CRB_HOST_MAX + 8];
    char metadata_prefix[128];
    char host_id[128];
    char *secret;
    size_t secret_len;
    const cre_transport *transports[4]; /* installed, fastest first */
    size_t n_transports;
    uint16_t rpc_port;
    uint32_t n_workers, lanes_per_peer;
    uint64_t slice_size;
    uint32_t connect_timeout_ms, request_timeout_ms;
    uint64_t instance;
    bool shm_allow_any_user, cma_enabled;

    crm_backend *metadata;
    cre_registry registry;
    cre_ctl_page ctl;
    int shm_listen_fd;
    cre_conn shm_listen_conn;
    char shm_address[CRP_MAX_ADDRESS + 1]; /* "@crescent-<pid>-<instance>" */

    /* cached local descriptor encoding, rebuilt when registry version moves */
    pthread_mutex_t desc_lock;
    crp_buf desc_encoded;
    uint64_t desc_version;
    bool desc_built;

    int listen_fd;
    cre_conn listen_conn;
    cre_worker *workers;
    atomic_uint next_worker;

    cre_handle_table segments;
    cre_handle_table batches;
    pthread_mutex_t peers_lock;
    cre_peer **peers;
    size_t n_peers, cap_peers;

    pthread_mutex_t notify_lock;
    cr_notification *notifications;
    size_t n_notifications, cap_notifications;

    atomic_bool shutting_down;
    struct {
        atomic_ullong tasks_completed, tasks_failed, bytes_local, bytes_shm, bytes_cma, bytes_tcp,
            bytes_served, tcp_connects, descriptor_fetches, shm_mappings, transport_fallbacks;
    } stats;
};

/* handles.c */
int cre_handles_init(cre_handle_table *t);
void cre_handles_fini(cre_handle_table *t);
int cre_handles_add(cre_handle_table *t, void *item, uint64_t *out);
/* Returns the item, or NULL for a stale/garbage handle. Caller holds t->lock. */
void *cre_handles_get_locked(cre_handle_table *t, uint64_t h);
/* Invalidate h; returns the item it named or NULL. Caller holds t->lock. */
void *cre_handles_remove_locked(cre_handle_table *t, uint64_t h);

/* config.c */
int cre_config_apply(cr_engine *e, const cr_engine_config *cfg);

/* descriptor.c */
bool cre_handle_format(const cre_buffer_spec *s, char *out, size_t cap);
bool cre_handle_parse(const char *h, cre_buffer_extra *out);
int cre_descriptor_encoded(cr_engine *e, crp_buf *copy_out);
int cre_descriptor_publish(cr_engine *e);
void cre_descriptor_unpublish(cr_engine *e);

/* auth.c */
void cre_auth_mac(const cr_engine *e, const char *label, const uint8_t a[CRP_NONCE_SIZE],
                  const uint8_t b[CRP_NONCE_SIZE], uint8_t mac[CRP_MAC_SIZE]);
bool cre_auth_check(const cr_engine *e, const char *label, const uint8_t a[CRP_NONCE_SIZE],
                    const uint8_t b[CRP_NONCE_SIZE], const uint8_t mac[CRP_MAC_SIZE]);

/* control.c: one short request/response exchange over a fresh connection */
int cre_control_call(cr_engine *e, const char *host, uint16_t port, int type, const crp_buf *body,
                     int timeout_ms, crp_header *reply_hdr, crp_buf *reply_body);

/* segment.c */
int cre_peer_refresh(cre_peer *p);
int cre_segment_lookup(cr_engine *e, cr_segment_handle h, cre_peer **out);
void cre_peers_destroy(cr_engine *e);

/* worker.c */
int cre_workers_start(cr_engine *e);
void cre_workers_stop(cr_engine *e);
void cre_worker_kick(cre_worker *w);
int cre_worker_add_conn(cre_worker *w, cre_conn *c, uint32_t events);
/* Hand an accepted connection to the next worker (round-robin): append it to
 * that worker's list under its lock and watch `events`. On failure (no
 * memory) nothing is kept and the caller still owns c. Any thread. */
int cre_worker_adopt_conn(cr_engine *e, cre_conn *c, uint32_t events);
void cre_worker_mod_conn(cre_conn *c, bool want_out);

/* server.c (worker thread) */
void cre_server_accept(cr_engine *e);
void cre_server_on_event(cre_conn *c, uint32_t events);
void cre_server_close_all(cre_worker *w);

/* tcp lanes (transports/tcp) */
void cre_lane_on_event(cre_conn *c, uint32_t events);
void cre_lanes_tick(cre_worker *w, uint64_t now_ns);
void cre_lane_fail_all(cre_lane *l, int status);

/* transports/shm: same-host service and peer state */
int cre_shm_service_start(cr_engine *e);
void cre_shm_service_stop(cr_engine *e);
void cre_shm_service_accept(cr_engine *e);
void cre_shm_service_on_event(cre_conn *c, uint32_t events);
void cre_peer_local_init(cre_peer_local *l);
void cre_peer_local_fini(cre_peer_local *l);
/* Drop every mapping of the peer (it died or restarted). */
void cre_peer_local_drop(cre_peer *p);
/* Drop mappings of regions that are not among live_ids (the descriptor no
 * longer lists a buffer in them). */
void cre_peer_local_prune(cre_peer *p, const uint64_t *live_ids, size_t n_live);
void cre_shm_watch_on_event(cre_conn *c, uint32_t events);

/* batch.c */
void cre_task_slice_done(cre_task *t, int status, uint64_t bytes);

/* notifications */
int cre_notify_push(cr_engine *e, const char *from, const uint8_t *msg, size_t len);

/* shared connection reader (conn.c) */
typedef struct cre_read_ops {
    /* header+body complete: return 0 and set c->data_dst (or NULL to drain)
     * if hdr.data_len > 0; negative to drop the connection. */
    int (*on_head)(cre_conn *c);
    /* whole frame complete; negative to drop the connection. */
    int (*on_frame)(cre_conn *c);
} cre_read_ops;
/* Read until EAGAIN. Returns 0, or negative when the connection must close. */
int cre_conn_read(cre_conn *c, const cre_read_ops *ops);
/* Forget a partly read frame and any buffered bytes (a lane's new socket). */
void cre_conn_reset_reader(cre_conn *c);
/* Build header+body into a malloc'd buffer. */
int cre_frame_build(int type, int32_t status, uint64_t request_id, uint64_t data_len,
                    const crp_buf *body, uint8_t **out, size_t *out_len);

#endif
