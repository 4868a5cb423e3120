/*
 * internal.h - the engine core's private structures, shared by its files
 * and by the transports (transport.h is their contract).
 *
 * Object graph (all owned by cr_engine, freed by cr_engine_destroy):
 *
 *   cr_engine ─ tps[]             installed transports (transport.h)
 *             ─ registry          local buffers (registry.h)
 *             ─ workers[]         I/O threads: one event loop each
 *                                 (base/evloop.h); transports hang their
 *                                 connections and ticks on them
 *             ─ acceptor          the engine's one port, on worker 0
 *             ─ segments          handle table → cre_peer
 *             ─ peers             one per remote segment name: the current
 *                                 descriptor snapshot and each transport's
 *                                 per-peer area
 *             ─ batches           handle table → cre_batch → cre_task[]
 *
 * Threads: API calls run on caller threads; they validate, resolve a route
 * and hand the task to a transport. Only the owning worker thread touches a
 * connection's socket, so closing it on that thread guarantees no later I/O
 * into a failed request's memory.
 */
#ifndef CRESCENT_ENGINE_INTERNAL_H
#define CRESCENT_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/acceptor.h"
#include "base/evloop.h"
#include "base/net.h"
#include "crescent/engine.h"
#include "engine/registry.h"
#include "engine/transport.h"
#include "metadata/backend.h"
#include "proto/frame.h"
#include "proto/frame_reader.h"
#include "proto/messages.h"

typedef struct cre_batch cre_batch;

/* ---- tasks and batches -------------------------------------------------- */

struct cre_task {
    cre_batch *batch;
    int opcode;
    uint8_t *local;
    uint64_t remote_addr;
    uint64_t length;
    cre_buffer *local_buf; /* reference held until the task finishes */
    cre_tp *tp;            /* the transport that took it */
    atomic_uint slices_left;
    bool alone;       /* the only task of its batch when submitted (a transport may split it) */
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
    size_t unfinished;          /* guarded by lock */
    atomic_size_t pending_hint; /* unfinished, readable without the lock (busy-poll) */
    bool freed;                 /* id released; free memory when quiescent */
    /* Made by a synchronous call that waits for it at once (one task): a
     * transport may run the task on the calling thread (tcp: sync.c). */
    bool caller_waits;
    uint64_t caller_deadline_ns; /* when that caller stops waiting */
    char caller_error[256];      /* why that task failed, when the caller carried it */
    int users;                   /* API calls currently holding it; guarded by lock */
};

/* ---- descriptors and peers ---------------------------------------------- */

/* An immutable snapshot of a peer's descriptor, reference-counted: submits
 * and transports hold it while they use what it says; a refresh replaces
 * the peer's current one. Buffers are sorted by address. */
struct cre_desc {
    atomic_uint refs;
    cr_engine *engine;
    crp_descriptor d;
    void *tp_state[CRE_MAX_TRANSPORTS]; /* per transport (desc_parse) */
};

struct cre_peer {
    cr_engine *engine;
    char name[CRB_HOST_MAX + 8];
    char host[CRB_HOST_MAX];
    uint16_t port;
    bool is_self;
    pthread_mutex_t lock; /* desc, desc_stale, same_host */
    cre_desc *desc;       /* current snapshot, NULL until fetched */
    bool desc_stale; /* the peer restarted, or a same-host copy found a buffer of it gone: refetch
                        before the next submit */
    bool same_host;  /* desc->d.host_id equals ours */
    void *tp_priv[CRE_MAX_TRANSPORTS];
};

/* ---- connections to our port -------------------------------------------- */

/* A payload produced window by window (device memory staged through host
 * memory): next() hands the next window once the previous one has been
 * written; release() when the item is freed (sent or dropped). Worker
 * thread. */
typedef struct cre_out_source {
    int (*next)(void *ctx, const uint8_t **ptr, size_t *len);
    void (*release)(void *ctx);
    void *ctx;
} cre_out_source;

/* An outbound item: header(+body) then an optional payload from registered
 * memory (a reference on its buffer is held until it has been sent). */
typedef struct cre_out {
    struct cre_out *next;
    uint8_t *head; /* header + body, malloc'd */
    size_t head_len;
    const uint8_t *payload;
    size_t payload_len;
    cre_buffer *payload_buf;
    uint64_t deadline_ns; /* queued + request timeout */
    size_t sent;
    cre_out_source source;     /* staged payload (source.next != NULL) */
    size_t win_start, win_end; /* payload offsets of the current window */
} cre_out;

/* What happens to a connection's frames; set by whoever serves it. */
typedef struct cre_conn_handler {
    int (*on_head)(cre_conn *c, const crp_header *h, const uint8_t *body, uint8_t **data_dst);
    int (*on_frame)(cre_conn *c, const crp_header *h, const uint8_t *body);
    /* A windowed payload's window filled (crp_reader_window); may be NULL. */
    int (*on_data)(cre_conn *c, const crp_header *h, size_t filled, uint8_t **next,
                   size_t *next_len);
    /* The connection is closing: release what the handler holds. */
    void (*on_close)(cre_conn *c);
    /* Does the handler hold a buffer that is being unregistered? */
    bool (*holds_dying)(cre_conn *c);
} cre_conn_handler;

/* A connection accepted on our port (conn.c). Owned by one worker. */
struct cre_conn {
    crb_io io;
    cr_engine *engine;
    cre_worker *worker;
    struct cre_conn *prev, *next; /* the worker's list (worker thread) */
    crp_reader reader;
    const cre_conn_handler *handler;
    void *handler_data;
    bool authed;
    uint8_t role;
    uint64_t accepted_ns;
    uint8_t nonce[CRP_NONCE_SIZE];
    /* output queue and its bounds (hostile peers that never read) */
    cre_out *out_head, *out_tail;
    size_t out_items, out_bytes;
    bool reading_paused;
    bool closing; /* flush what is queued, then close */
};

/* ---- workers ------------------------------------------------------------ */

struct cre_worker {
    crb_loop loop;
    cr_engine *engine;
    int index;
    cre_conn *conns; /* connections to our port owned by this worker */
    size_t n_conns;
    uint64_t seen_unregister_epoch;
    /* accepted sockets waiting to be adopted by this worker (server.c) */
    pthread_mutex_t inbox_lock;
    int *inbox;
    size_t n_inbox, cap_inbox;
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
    char protocol[16];
    char *secret;
    size_t secret_len;
    char *device_names; /* cr_engine_config.device_name, NULL if none */
    uint16_t rpc_port;
    uint32_t n_workers, lanes_per_peer;
    uint64_t slice_size;
    uint32_t connect_timeout_ms, request_timeout_ms;
    uint32_t max_connections;
    uint64_t instance;
    bool shm_allow_any_user, cma_enabled;
    /* CRESCENT_BUSY_POLL_US as a base/spin.h mode (unset: CRB_SPIN_ADAPTIVE):
     * the workers' loops, tcp/sync.c's connections and the ucx workers (a
     * fixed window only) start from it. */
    int64_t spin_mode_ns;
    crb_spin batch_spin;   /* cr_batch_wait's polling, shared by its callers */
    bool tcp_caller_reads; /* CRESCENT_TCP_CALLER_READS (default 1): tcp/sync.c */

    cre_tp tps[CRE_MAX_TRANSPORTS]; /* installed, by rank */
    size_t n_tps;

    crm_backend *metadata;
    cre_registry registry;
    atomic_ullong unregister_epoch; /* bumped when an unregistration begins */

    /* cached local descriptor encoding, rebuilt when registry version moves */
    pthread_mutex_t desc_lock;
    crp_buf desc_encoded;
    uint64_t desc_version;
    bool desc_built;

    int listen_fd;
    crb_acceptor acceptor;
    bool acceptor_started;
    cre_worker *workers;
    bool workers_running;
    atomic_uint next_worker;

    cre_handle_table segments;
    cre_handle_table batches;
    pthread_mutex_t peers_lock;
    cre_peer **peers;
    size_t n_peers, cap_peers;

    pthread_mutex_t notify_lock;
    cr_notification *notifications;
    size_t n_notifications, cap_notifications;

    /* API calls in flight: destroy waits for them (lifecycle.c) */
    pthread_mutex_t calls_lock;
    pthread_cond_t calls_done;
    atomic_uint calls_in_flight_atomic;
    atomic_bool shutting_down;

    struct {
        atomic_ullong tasks_completed, tasks_failed, bytes_served, descriptor_fetches,
            transport_fallbacks, served_timeouts, conns_refused_preauth, unregistered_requests,
            unregistered_refused; /* CR_OP_LOCAL_UNREGISTERED */
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

/* config.c: validate cfg into e (protocol, sizes, timeouts, identity) */
int cre_config_apply(cr_engine *e, const cr_engine_config *cfg);

/* transports/registry.c: install and init the transports e->protocol names,
 * by rank; stop (fini) them again. */
int cre_transports_install(cr_engine *e);
/* Destroy, workers stopped: transports give back buffer references. */
void cre_transports_quiesce(cr_engine *e);
void cre_transports_fini(cr_engine *e);

/* descriptor.c */
int cre_descriptor_encoded(cr_engine *e, crp_buf *copy_out);
int cre_descriptor_publish(cr_engine *e);
void cre_descriptor_unpublish(cr_engine *e);

/* auth.c */
void cre_auth_mac(const cr_engine *e, const char *label, const uint8_t a[CRP_NONCE_SIZE],
                  const uint8_t b[CRP_NONCE_SIZE], uint8_t mac[CRP_MAC_SIZE]);
bool cre_auth_check(const cr_engine *e, const char *label, const uint8_t a[CRP_NONCE_SIZE],
                    const uint8_t b[CRP_NONCE_SIZE], const uint8_t mac[CRP_MAC_SIZE]);
/* A HELLO proving the secret over the server's nonce (control.c, lanes). */
int cre_hello_build(cr_engine *e, uint8_t role, const uint8_t server_nonce[CRP_NONCE_SIZE],
                    uint8_t client_nonce[CRP_NONCE_SIZE], crp_buf *frame);
/* Check a HELLO_ACK body: version, and the server's proof of the secret. */
int cre_hello_ack_check(cr_engine *e, const char *peer, const uint8_t *body, size_t len,
                        const uint8_t server_nonce[CRP_NONCE_SIZE],
                        const uint8_t client_nonce[CRP_NONCE_SIZE], uint64_t *instance);

/* control.c: the client side of the CHALLENGE/HELLO handshake on a fresh
 * blocking connection fd, in `role` (crp_role); every read and write ends by
 * deadline (ns). 0 and *instance (the peer's instance id), or the error. */
int cre_handshake(cr_engine *e, int fd, int role, uint64_t deadline, const char *peer,
                  crp_buf *scratch, uint64_t *instance);
/* control.c: one short request/response exchange over a fresh connection */
int cre_control_call(cr_engine *e, const char *host, uint16_t port, int type, const crp_buf *body,
                     int timeout_ms, crp_header *reply_hdr, crp_buf *reply_body);

/* segment.c */
int cre_peer_refresh(cre_peer *p);
int cre_segment_lookup(cr_engine *e, cr_segment_handle h, cre_peer **out);
void cre_peers_destroy(cr_engine *e);
/* Mark a peer's descriptor stale (it restarted); the next submit refetches. */
void cre_peer_mark_stale(cre_peer *p);

/* worker.c */
int cre_workers_init(cr_engine *e);
int cre_workers_start(cr_engine *e);
void cre_workers_stop(cr_engine *e);
/* After stop and the transports' fini: close connections, free workers. */
void cre_workers_free(cr_engine *e);
void cre_worker_kick(cre_worker *w);
void cre_workers_kick_all(cr_engine *e);
/* The worker that should own a new connection (round-robin). */
cre_worker *cre_worker_next(cr_engine *e);

/* conn.c: connections to our port */
/* Adopt an accepted socket on worker w with handler h. On failure the fd is
 * closed. Worker thread of w or before the workers run. */
int cre_conn_adopt(cre_worker *w, int fd, const cre_conn_handler *h, cre_conn **out);
/* Queue a frame (payload borrowed from registered memory; payload_buf's
 * reference moves to the queue). Worker thread. */
int cre_conn_queue(cre_conn *c, int type, int32_t status, uint64_t request_id, const crp_buf *body,
                   const uint8_t *payload, size_t payload_len, cre_buffer *payload_buf);
int cre_conn_queue_error(cre_conn *c, int status, uint64_t request_id, const char *text);
/* Queue a frame whose payload_len bytes come from src, window by window. */
int cre_conn_queue_staged(cre_conn *c, int type, int32_t status, uint64_t request_id,
                          size_t payload_len, const cre_out_source *src, cre_buffer *payload_buf);
/* Write what the socket takes. Negative when the connection is dead. */
int cre_conn_flush(cre_conn *c);
void cre_conn_close(cre_conn *c);
/* Worker tick: deadlines of unauthenticated connections and queued output,
 * buffers being unregistered. */
void cre_conns_tick(cre_worker *w, uint64_t now_ns);
void cre_conns_close_all(cre_worker *w);

/* server.c: our port (acceptor, handshake, control frames) */
int cre_server_start(cr_engine *e);
void cre_server_stop(cr_engine *e);
/* Worker tick: adopt the sockets worker 0 accepted for this worker. */
void cre_server_take_inbox(cre_worker *w);
/* Worker teardown: close sockets never adopted. */
void cre_server_drop_inbox(cre_worker *w);

/* batch.c */
void cre_task_slice_done(cre_task *t, int status, uint64_t bytes);

/* engine.c: notifications */
int cre_notify_push(cr_engine *e, const char *from, const uint8_t *msg, size_t len);

/* lifecycle.c: every public call brackets itself with these (CRE_CALL).
 * cre_call_enter: 0, CR_INVALID_PARAMS (e NULL), CR_ERR_SHUTDOWN. */
int cre_call_enter(cr_engine *e, const char *what);
void cre_call_leave(cr_engine *e);
typedef struct cre_call_guard {
    cr_engine *e;
} cre_call_guard;
void cre_call_guard_leave(cre_call_guard *g);
/* First statement of a public call returning int: enters the call (or
 * returns the refusal) and leaves it when the function returns. */
#define CRE_CALL(e, what)                                                                          \
    __attribute__((cleanup(cre_call_guard_leave))) cre_call_guard cre_call_guard_ = {NULL};        \
    do {                                                                                           \
        int cre_call_rc_ = cre_call_enter((e), (what));                                            \
        if (cre_call_rc_ < 0)                                                                      \
            return cre_call_rc_;                                                                   \
        cre_call_guard_.e = (e);                                                                   \
    } while (0)
/* Destroy: refuse new calls, wake sleeping ones, wait for the rest. */
void cre_calls_drain(cr_engine *e);

/* Build header+body into a malloc'd buffer. */
int cre_frame_build(int type, int32_t status, uint64_t request_id, uint64_t data_len,
                    const crp_buf *body, uint8_t **out, size_t *out_len);

#endif
