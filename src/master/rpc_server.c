/*
 * rpc_server.c - see rpc_server.h.
 *
 * Each I/O thread runs one event loop (base/evloop.h) holding the
 * connections it owns; the listener sits in thread 0's loop and hands
 * accepted sockets round-robin to the threads (crb_loop_add on another
 * thread's loop is safe; the connection is fully built before it is added,
 * and the owning thread's list is guarded by its mutex). Requests are
 * reassembled by proto's incremental frame reader (proto/frame_reader.h),
 * served in order as they complete, and the replies buffered, written as
 * far as the socket takes them, the rest on EPOLLOUT.
 *
 * Bounds (master/rpc_limits.h): the reader holds at most its read buffer
 * and one body of at most a frame; while a connection has out_high bytes of
 * unsent replies it is neither read from nor served (its handler pauses the
 * reader), so a client that pipelines without reading cannot grow the
 * master's memory. Fairness: a connection serves FRAMES_PER_TURN frames,
 * then goes on its thread's ready list and the loop runs another pass
 * (crb_loop_again) before it gets its next turn.
 *
 * Off the I/O threads: scans (REMOVE_BY_REGEX / REMOVE_ALL) go to one scan
 * worker while their connection is parked; the reply comes back through the
 * thread's done list and a loop wake-up. HA (master/ha.h): a reply whose
 * change is not yet on the standbys is held (with every reply after it)
 * until the commit index reaches it. The standbys' acks are read on these
 * loops too (the replicator puts each standby's socket on the loop of the
 * thread that took its subscription): the HA code's notify (on_commit)
 * has the thread that saw the commit move release its own held replies
 * after that pass, without a wake-up, and wakes only the other threads
 * that hold replies.
 *
 * Stage waits (docs/WIRE.md): a GET_REPLICA_LIST or BATCH_GET_REPLICA_LIST
 * with "swt" whose reply would say "being staged" (the value is on a
 * holder's disk) is not answered at once: the request goes to the stage
 * waiter thread, which asks the service again whenever a holder's heartbeat
 * reported stage results (crk_service_on_stage_results) and at the wait's
 * end, and sends the reply back through the done list like a scan's. The
 * connection is not parked: its other requests are served meanwhile and the
 * held reply comes out of order (replies carry their request's id). A
 * connection freed while requests of it are held stays allocated (a
 * "zombie", torn down otherwise) until the last one comes back.
 *
 * Commit waits (docs/WIRE.md, "Commit ahead"): a get, exist or remove (single
 * or batch) whose reply names a key committed ahead of its copy
 * (CR_ERR_PUT_COMMITTING) is held the same way, "swt" or not, and asked again
 * when that write ends (the service reports its key like a stage result);
 * at the end of its wait it is answered as for any put in flight.
 */
#include "master/rpc_server.h"

#include "master/rpc_limits.h"
#include "master/ha.h"
#include "master/tenants.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/evloop.h"
#include "base/log.h"
#include "base/net.h"
#include "proto/frame.h"
#include "proto/frame_reader.h"
#include "proto/messages.h"
#include "proto/offload.h"
#include "proto/rpc.h"

#define REPLY_KEEP_BYTES (1u << 20) /* reply buffer kept between requests */
#define TICK_MS          100        /* the loops' tick: listener back-off, sweeps */
#define SWEEP_MS         200        /* idle connections are looked for this often */
#define FRAMES_PER_TURN  64         /* then the thread's other connections get theirs */
#define FD_RESERVE       64         /* fds kept for everything but connections */
#define LISTEN_PAUSE_MS  100        /* the listener rests this long when no fd can be had */

typedef struct rpc_conn {
    crb_io io; /* the socket, on its thread's loop */
    struct rpc_thread *thread;
    crp_reader rd; /* reassembles the requests */
    uint8_t *out;
    size_t out_len, out_off, out_cap;
    bool closing;         /* flush what is queued, then close */
    bool parked;          /* a request of this connection is with the scan worker */
    bool drop;            /* a frame's handler said: close now, without flushing */
    unsigned turn;        /* frames served in this turn */
    uint64_t progress_ms; /* last byte read or written */
    bool ready;           /* on its thread's ready list: frames may wait */
    crk_peer peer;        /* the client this connection speaks for (dispatch.h) */
    bool dead;            /* closed by the peer while parked: free when the job returns */
    unsigned waiting;     /* its requests with the stage waiter (owner thread only) */
    bool zombie;          /* torn down with requests held: freed when the last returns */
    /* HA (master/ha.h): out[hold_off..out_len) waits until the commit index
     * reaches hold_seq (replies after a held one are held with it, in order). */
    bool holding;
    size_t hold_off;
    uint64_t hold_seq;
    uint64_t hold_ns; /* when it began holding (crk_ha_note_held) */
} rpc_conn;

/* A request handed to the scan worker or the stage waiter, and then its
 * encoded reply frame. */
typedef struct scan_job {
    struct scan_job *next;
    rpc_conn *conn;
    uint64_t request_id;
    uint64_t t0_ns;
    crp_rpc_req req; /* decoded; owns its arena */
    crp_buf frame;   /* the reply: header and body */
    /* Stage waits only: the connection is not parked (its peer is copied:
     * the I/O thread goes on using its own); asked again when a report
     * names one of its keys (the marks of its keys' buckets, or stage_gen
     * when buckets is NULL, moved from seen), answered as it stands at
     * deadline_ms. */
    bool stage;
    crk_peer peer;
    uint32_t *buckets; /* its keys' buckets in stage_marks; NULL: any report */
    size_t n_buckets;
    uint64_t seen; /* their marks when last asked; UINT64_MAX: never by the waiter */
    uint64_t deadline_ms;
} scan_job;

#define STAGE_WAIT_MAX_MS    1000  /* a longer "swt" is cut to this */
#define STAGE_WAITS_PER_CONN 256   /* held requests of one connection; more are answered */
#define STAGE_WAITS_MAX      16384 /* held requests in all */
#define STAGE_MARKS          4096  /* buckets of the keys holders report */
#define STAGE_KEYS_TRACKED   64    /* a batch of more keys is asked again on any report */
#define COMMIT_WAIT_MS       CRK_COMMIT_WAIT_MS

typedef struct rpc_thread {
    crk_rpc_server *srv;
    crb_loop loop;
    bool loop_inited;
    uint64_t next_sweep_ms; /* loop thread only */
    pthread_mutex_t lock;   /* conns list */
    rpc_conn **conns;
    size_t n_conns, cap_conns;
    crk_scratch scratch; /* reply memory, reset after every request */
    crp_buf reply;       /* encoded reply body; emptied, not freed, per request */
    pthread_mutex_t done_lock;
    scan_job *done;           /* replies back from the scan worker (done_lock) */
    atomic_bool commit_moved; /* HA: the commit index moved since the last look */
    /* HA: its connections holding replies; a thread with none is not woken
     * when the commit index moves (counted before the commit is looked at,
     * so either that look sees the new commit or on_commit sees the count). */
    _Atomic uint32_t n_holding;
    /* Connections that used their turn (owner thread only). */
    rpc_conn **ready;
    size_t n_ready, cap_ready;
} rpc_thread;

/* A listening socket on thread 0's loop: the TCP port, and the local socket. */
typedef struct rpc_listener {
    crb_io io;
    struct crk_rpc_server *srv;
    bool local; /* the abstract unix socket (docs/WIRE.md "Local socket") */
    bool added; /* watched by the loop now */
} rpc_listener;

struct crk_rpc_server {
    crk_service *svc;
    const crk_server_info *info;
    rpc_listener listeners[2]; /* [0] TCP; [1] the local socket when local_socket[0] */
    unsigned n_listeners;
    char local_socket[CRP_RPC_MAX_LOCAL + 1]; /* its name; "": none */
    uint16_t port;
    unsigned n_threads;
    unsigned n_started;
    rpc_thread *threads;
    bool tcp_nodelay;
    crk_io_budget budget;
    uint32_t max_body; /* the largest request body a connection's reader takes */
    uint64_t idle_timeout_ms;
    unsigned max_conns;
    crk_fd_reserve reserve;       /* thread 0 (the listener's) only */
    crk_ratelimit refuse_log;     /* thread 0 only */
    uint64_t listen_paused_until; /* thread 0 only; 0: listening */
    _Atomic uint64_t refused, shed, idle_closed;
    atomic_bool stop;
    atomic_uint next;
    _Atomic uint64_t latency[CRP_RPC_OP_COUNT][CRK_LAT_BUCKETS];
    _Atomic uint64_t accepted, open, frames, malformed;
    _Atomic uint64_t local_accepted; /* of accepted: on the local socket */
    /* The scan worker: one thread, a FIFO of jobs. */
    pthread_t scan_tid;
    bool scan_started;
    pthread_mutex_t scan_lock;
    pthread_cond_t scan_cond;
    scan_job *scan_head, *scan_tail;
    /* The stage waiter: one thread, the held gets (unordered). */
    pthread_t wait_tid;
    bool wait_started;
    pthread_mutex_t wait_lock;
    pthread_cond_t wait_cond;
    scan_job *waits;                           /* wait_lock */
    _Atomic uint64_t n_waits;                  /* held now (changed under wait_lock) */
    _Atomic uint64_t stage_gen;                /* heartbeats with stage results so far */
    _Atomic uint64_t stage_marks[STAGE_MARKS]; /* reported keys so far, per bucket */
    _Atomic uint64_t stage_waits, stage_waits_expired, task_waits;
    _Atomic uint64_t commit_waits, commit_waits_expired;
};

static int buf_reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 4096;
    while (ncap < need)
        ncap *= 2;
    uint8_t *nb = realloc(*buf, ncap);
    if (nb == NULL)
        return CR_ERR_NO_MEMORY;
    *buf = nb;
    *cap = ncap;
    return 0;
}

static int queue_bytes(rpc_conn *c, const void *bytes, size_t n)
{
    if (buf_reserve(&c->out, &c->out_cap, c->out_len + n) < 0)
        return CR_ERR_NO_MEMORY;
    memcpy(c->out + c->out_len, bytes, n);
    c->out_len += n;
    return 0;
}

static int queue_frame(rpc_conn *c, int type, int32_t status, uint64_t request_id,
                       const crp_buf *body)
{
    size_t need = c->out_len + CRP_HEADER_SIZE + body->len;
    if (buf_reserve(&c->out, &c->out_cap, need) < 0)
        return CR_ERR_NO_MEMORY;
    crp_header h = {.version = CRP_VERSION,
                    .type = (uint8_t)type,
                    .body_len = (uint32_t)body->len,
                    .status = status,
                    .request_id = request_id};
    crp_header_encode(&h, c->out + c->out_len);
    memcpy(c->out + c->out_len + CRP_HEADER_SIZE, body->data, body->len);
    c->out_len = need;
    return 0;
}

static bool is_scan(uint16_t op)
{
    return op == CRP_RPC_REMOVE_BY_REGEX || op == CRP_RPC_REMOVE_ALL;
}

static void record_latency(crk_rpc_server *srv, uint16_t op, uint64_t t0_ns)
{
    uint64_t us = (crb_now_ns() - t0_ns) / 1000;
    int bucket = 0;
    while (bucket < CRK_LAT_BUCKETS - 1 && us >= (1ull << bucket))
        bucket++;
    int idx = crp_rpc_op_index(op);
    if (idx >= 0)
        atomic_fetch_add(&srv->latency[idx][bucket], 1);
}

/* j takes c's request (moved: *req is left empty) for the scan worker or the stage waiter. */
static void job_take(scan_job *j, rpc_conn *c, uint64_t request_id, crp_rpc_req *req,
                     uint64_t t0_ns)
{
    j->conn = c;
    j->request_id = request_id;
    j->t0_ns = t0_ns;
    j->req = *req;
    memset(req, 0, sizeof(*req));
}

/* Park c and hand its request (moved into the job) to the scan worker. */
static int start_scan(rpc_conn *c, uint64_t request_id, crp_rpc_req *req, uint64_t t0_ns)
{
    crk_rpc_server *srv = c->thread->srv;
    scan_job *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return CR_ERR_NO_MEMORY;
    job_take(j, c, request_id, req, t0_ns);
    c->parked = true;
    pthread_mutex_lock(&srv->scan_lock);
    if (srv->scan_tail)
        srv->scan_tail->next = j;
    else
        srv->scan_head = j;
    srv->scan_tail = j;
    pthread_cond_signal(&srv->scan_cond);
    pthread_mutex_unlock(&srv->scan_lock);
    return 0;
}

static void job_free(scan_job *j)
{
    free(j->buckets);
    crp_rpc_req_clear(&j->req);
    crp_buf_free(&j->frame);
    free(j);
}

/* Encode a reply (or, if it cannot be encoded, an ERROR) as a whole frame. */
static void encode_reply_frame(const crp_rpc_resp *resp, uint64_t request_id, crp_buf *frame)
{
    uint8_t hdr[CRP_HEADER_SIZE] = {0};
    frame->len = 0;
    int type = CRP_RPC_RESP;
    int32_t status = resp->status;
    int rc = crp_buf_append(frame, hdr, sizeof(hdr));
    if (rc == 0)
        rc = crp_rpc_resp_encode(resp, frame);
    if (rc < 0) {
        frame->len = 0;
        crp_error e = {.message = (char *)cr_last_error_message()};
        type = CRP_ERROR;
        status = rc;
        if (crp_buf_append(frame, hdr, sizeof(hdr)) != 0 || crp_error_encode(&e, frame) != 0)
            frame->len = 0;
    }
    if (frame->len == 0)
        return;
    crp_header h = {.version = CRP_VERSION,
                    .type = (uint8_t)type,
                    .body_len = (uint32_t)(frame->len - CRP_HEADER_SIZE),
                    .status = status,
                    .request_id = request_id};
    crp_header_encode(&h, frame->data);
}

/* Hand j's reply to its connection's thread (a scan's or a held request's). */
static void job_done(scan_job *j)
{
    rpc_thread *t = j->conn->thread;
    pthread_mutex_lock(&t->done_lock);
    j->next = t->done;
    t->done = j;
    pthread_mutex_unlock(&t->done_lock);
    crb_loop_wake(&t->loop);
}

static void *scan_main(void *arg)
{
    crk_rpc_server *srv = arg;
    crk_scratch scratch = {0};
    pthread_mutex_lock(&srv->scan_lock);
    for (;;) {
        while (!atomic_load(&srv->stop) && srv->scan_head == NULL)
            pthread_cond_wait(&srv->scan_cond, &srv->scan_lock);
        if (atomic_load(&srv->stop))
            break;
        scan_job *j = srv->scan_head;
        srv->scan_head = j->next;
        if (srv->scan_head == NULL)
            srv->scan_tail = NULL;
        j->next = NULL;
        pthread_mutex_unlock(&srv->scan_lock);

        crp_rpc_resp resp;
        j->conn->peer.defer_durable = false; /* this thread may wait (master/ha.h) */
        crk_dispatch(srv->svc, srv->info, &j->conn->peer, &j->req, crb_now_ms(), &resp, &scratch);
        encode_reply_frame(&resp, j->request_id, &j->frame);
        record_latency(srv, j->req.op, j->t0_ns);
        crk_scratch_reset(&scratch);
        crp_rpc_req_clear(&j->req);

        job_done(j);
        pthread_mutex_lock(&srv->scan_lock);
    }
    pthread_mutex_unlock(&srv->scan_lock);
    crk_scratch_free(&scratch);
    return NULL;
}

/* Would this reply make its client wait (and so may be held, "swt")? A get's when it says
 * "being staged" (the client's own test, store/client.c; a batch's when no key is ready and
 * some key is being staged); a holder's heartbeat's when it carries no task. */
static bool reply_would_wait(const crp_rpc_resp *r)
{
    if (r->op != CRP_RPC_OFFLOAD_HEARTBEAT)
        return crp_rpc_resp_is_staging(r);
    crp_off_msg tasks;
    if (r->status != 0 || crp_off_decode(r->u.blob.data, r->u.blob.len, &tasks) != 0)
        return false;
    bool none = tasks.n_items == 0 && !tasks.more;
    crp_off_clear(&tasks);
    return none;
}

/* Does this reply name a key whose put is committing ahead of its copy (CR_ERR_PUT_COMMITTING:
 * a get, exist or remove, single or batch, or a key query, that must wait for it)? */
static bool reply_committing(const crp_rpc_resp *r)
{
    switch (r->op) {
    case CRP_RPC_GET_REPLICA_LIST:
    case CRP_RPC_EXIST:
    case CRP_RPC_REMOVE:
    case CRP_RPC_QUERY_KEY:
        return r->status == CR_ERR_PUT_COMMITTING;
    case CRP_RPC_BATCH_GET_REPLICA_LIST:
        for (size_t i = 0; r->status == 0 && i < r->u.batch_get.n; i++)
            if (r->u.batch_get.results[i].status == CR_ERR_PUT_COMMITTING)
                return true;
        return false;
    case CRP_RPC_BATCH_EXIST:
    case CRP_RPC_BATCH_REMOVE:
        for (size_t i = 0; r->status == 0 && i < r->u.statuses.n; i++)
            if (r->u.statuses.results[i] == CR_ERR_PUT_COMMITTING)
                return true;
        return false;
    default:
        return false;
    }
}

/* A reply sent while a key it names is still committing (its wait ended, or it could not be
 * held) answers as for any put in flight: a get or remove REPLICA_IS_NOT_READY, an exist
 * "no". CR_ERR_PUT_COMMITTING never goes on the wire. */
static void settle_committing(crp_rpc_resp *r)
{
    switch (r->op) {
    case CRP_RPC_GET_REPLICA_LIST:
    case CRP_RPC_REMOVE:
    case CRP_RPC_QUERY_KEY:
        if (r->status == CR_ERR_PUT_COMMITTING)
            r->status = CR_REPLICA_IS_NOT_READY;
        break;
    case CRP_RPC_EXIST:
        if (r->status == CR_ERR_PUT_COMMITTING) {
            r->status = 0;
            r->message = NULL;
            r->u.exist.exists = false;
        }
        break;
    case CRP_RPC_BATCH_GET_REPLICA_LIST:
        for (size_t i = 0; r->status == 0 && i < r->u.batch_get.n; i++)
            if (r->u.batch_get.results[i].status == CR_ERR_PUT_COMMITTING)
                r->u.batch_get.results[i].status = CR_REPLICA_IS_NOT_READY;
        break;
    case CRP_RPC_BATCH_EXIST:
    case CRP_RPC_BATCH_REMOVE:
        for (size_t i = 0; r->status == 0 && i < r->u.statuses.n; i++)
            if (r->u.statuses.results[i] == CR_ERR_PUT_COMMITTING)
                r->u.statuses.results[i] =
                    r->op == CRP_RPC_BATCH_EXIST ? 0 : CR_REPLICA_IS_NOT_READY;
        break;
    default:
        break;
    }
}

/* Is req's reply r one to hold: a stage it asked to wait for ("swt"), or a committing key? */
static bool reply_holds(const crp_rpc_req *req, const crp_rpc_resp *r)
{
    return (req->stage_wait_ms != 0 && reply_would_wait(r)) || reply_committing(r);
}

/* The keys a held request names (n: 1 for a single key, 0 for a heartbeat). */
static const char *const *held_keys(const crp_rpc_req *req, size_t *n)
{
    switch (req->op) {
    case CRP_RPC_GET_REPLICA_LIST:
    case CRP_RPC_EXIST:
    case CRP_RPC_QUERY_KEY:
        *n = 1;
        return (const char *const *)&req->u.key.key;
    case CRP_RPC_REMOVE:
        *n = 1;
        return (const char *const *)&req->u.remove.key;
    case CRP_RPC_BATCH_REMOVE:
        *n = req->u.batch_remove.n_keys;
        return (const char *const *)req->u.batch_remove.keys;
    case CRP_RPC_BATCH_GET_REPLICA_LIST:
    case CRP_RPC_BATCH_EXIST:
        *n = req->u.keys.n_keys;
        return (const char *const *)req->u.keys.keys;
    default:
        *n = 0;
        return NULL;
    }
}

/* The earliest deadline of the held gets, or UINT64_MAX (wait_lock held). */
static uint64_t waits_next_deadline(const crk_rpc_server *srv)
{
    uint64_t next = UINT64_MAX;
    for (const scan_job *j = srv->waits; j != NULL; j = j->next)
        if (j->deadline_ms < next)
            next = j->deadline_ms;
    return next;
}

/* The bucket of an internal key (tenant prefix, then the key) in stage_marks: FNV-1a. */
static uint32_t stage_bucket(const char *prefix, const char *key, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = prefix; *p != '\0'; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)key[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 32)) & (STAGE_MARKS - 1);
}

/* The bucket of a holder's heartbeats held for tasks: its id as hex after a 0xff byte (no
 * internal key is hashed with that prefix; a collision would only cost an ask). */
static uint32_t holder_bucket(uint64_t hi, uint64_t lo)
{
    char id[34];
    snprintf(id, sizeof(id), "%016llx%016llx", (unsigned long long)hi, (unsigned long long)lo);
    return stage_bucket("\xff", id, 32);
}

/* The reports so far that may concern j: the marks of its keys' buckets (a collision only
 * costs an ask), or every report for a batch of many keys. */
static uint64_t job_marks(crk_rpc_server *srv, const scan_job *j)
{
    if (j->buckets == NULL)
        return atomic_load(&srv->stage_gen);
    uint64_t sum = 0;
    for (size_t i = 0; i < j->n_buckets; i++)
        sum += atomic_load(&srv->stage_marks[j->buckets[i]]);
    return sum;
}

/* The stage waiter: asks the service again for every held get whose stage
 * may have landed (a report named one of its keys since it was last asked)
 * or whose wait ended; answers it when the reply no longer says "being
 * staged" or at the deadline, else keeps holding it. Marks are read before
 * each ask, and a holder reports after the service has the result, so a
 * report either is seen by the ask or moves the marks after it. */
static void *stage_main(void *arg)
{
    crk_rpc_server *srv = arg;
    crk_scratch scratch = {0};
    pthread_mutex_lock(&srv->wait_lock);
    while (!atomic_load(&srv->stop)) {
        uint64_t now = crb_now_ms();
        scan_job *due = NULL, **pp = &srv->waits;
        while (*pp != NULL) {
            scan_job *j = *pp;
            if (j->seen != job_marks(srv, j) || j->deadline_ms <= now) {
                *pp = j->next;
                j->next = due;
                due = j;
            } else {
                pp = &j->next;
            }
        }
        if (due == NULL) {
            uint64_t next = waits_next_deadline(srv);
            if (next == UINT64_MAX) {
                pthread_cond_wait(&srv->wait_cond, &srv->wait_lock);
            } else {
                struct timespec ts = crb_deadline_ts(next > now ? next - now : 0);
                pthread_cond_timedwait(&srv->wait_cond, &srv->wait_lock, &ts);
            }
            continue;
        }
        pthread_mutex_unlock(&srv->wait_lock);
        scan_job *keep = NULL;
        while (due != NULL) {
            scan_job *j = due;
            due = j->next;
            crp_rpc_resp resp;
            uint64_t at = crb_now_ms();
            uint64_t seen = job_marks(srv, j);
            crk_dispatch(srv->svc, srv->info, &j->peer, &j->req, at, &resp, &scratch);
            if (at < j->deadline_ms && reply_holds(&j->req, &resp)) {
                j->seen = seen; /* asked as of these marks: again when they move */
                j->next = keep;
                keep = j;
            } else {
                if (j->req.op != CRP_RPC_OFFLOAD_HEARTBEAT && reply_would_wait(&resp))
                    atomic_fetch_add(&srv->stage_waits_expired, 1);
                if (reply_committing(&resp)) {
                    atomic_fetch_add(&srv->commit_waits_expired, 1);
                    settle_committing(&resp);
                }
                encode_reply_frame(&resp, j->request_id, &j->frame);
                record_latency(srv, j->req.op, j->t0_ns);
                crp_rpc_req_clear(&j->req);
                atomic_fetch_sub(&srv->n_waits, 1);
                job_done(j);
            }
            crk_scratch_reset(&scratch);
        }
        pthread_mutex_lock(&srv->wait_lock);
        while (keep != NULL) {
            scan_job *j = keep;
            keep = j->next;
            j->next = srv->waits;
            srv->waits = j;
        }
    }
    pthread_mutex_unlock(&srv->wait_lock);
    crk_scratch_free(&scratch);
    return NULL;
}

/* A holder reported stage results for these internal keys (crk_service_on_stage_results):
 * the held gets of those keys are asked again. */
static void on_stage_results(void *arg, const char *const *keys, const size_t *lens, size_t n)
{
    crk_rpc_server *srv = arg;
    for (size_t i = 0; keys != NULL && i < n; i++)
        atomic_fetch_add(&srv->stage_marks[stage_bucket("", keys[i], lens[i])], 1);
    for (size_t b = 0; keys == NULL && b < STAGE_MARKS; b++)
        atomic_fetch_add(&srv->stage_marks[b], 1); /* which keys is not known */
    atomic_fetch_add(&srv->stage_gen, 1);
    if (atomic_load(&srv->n_waits) == 0)
        return; /* a get held later is asked again by the waiter first (seen: never) */
    pthread_mutex_lock(&srv->wait_lock);
    pthread_cond_signal(&srv->wait_cond);
    pthread_mutex_unlock(&srv->wait_lock);
}

/* A task was queued for holder (crk_service_on_holder_tasks; the disk tier's lock held):
 * its heartbeats held for tasks are asked again. */
static void on_holder_tasks(void *arg, crk_client_id holder)
{
    crk_rpc_server *srv = arg;
    atomic_fetch_add(&srv->stage_marks[holder_bucket(holder.hi, holder.lo)], 1);
    atomic_fetch_add(&srv->stage_gen, 1);
    if (atomic_load(&srv->n_waits) == 0)
        return;
    pthread_mutex_lock(&srv->wait_lock);
    pthread_cond_signal(&srv->wait_cond);
    pthread_mutex_unlock(&srv->wait_lock);
}

/* Hold c's get (moved into a job; its reply said "being staged") until its stage lands, or
 * a holder's heartbeat (its reply carried no task) until a task is queued for it, or until
 * req->stage_wait_ms pass; a read of a committing key (commit: its reply named one) until
 * that write ends, or COMMIT_WAIT_MS. 0, or nonzero when it is answered at once
 * instead (the limits, no memory, a tenant name the service refused anyway). */
static int hold_for_stage(rpc_conn *c, uint64_t request_id, crp_rpc_req *req, uint64_t t0_ns,
                          bool commit)
{
    crk_rpc_server *srv = c->thread->srv;
    if (c->waiting >= STAGE_WAITS_PER_CONN || atomic_load(&srv->n_waits) >= STAGE_WAITS_MAX)
        return -1;
    char prefix[CRK_TENANT_PREFIX + 1];
    if (crk_tenant_prefix(req->tenant, prefix) != 0)
        return -1;
    bool beat = req->op == CRP_RPC_OFFLOAD_HEARTBEAT;
    size_t n = 1;
    const char *const *keys = beat ? NULL : held_keys(req, &n);
    scan_job *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return -1;
    if (n <= STAGE_KEYS_TRACKED) {
        j->buckets = malloc(n * sizeof(*j->buckets));
        if (j->buckets == NULL) {
            free(j);
            return -1;
        }
        for (size_t i = 0; i < n && !beat; i++)
            j->buckets[i] = stage_bucket(prefix, keys[i], strlen(keys[i]));
        if (beat)
            j->buckets[0] = holder_bucket(req->u.blob.client_id.hi, req->u.blob.client_id.lo);
        j->n_buckets = n;
    }
    j->seen = UINT64_MAX; /* the waiter asks once more first: a report during our ask */
    uint32_t ms = req->stage_wait_ms < STAGE_WAIT_MAX_MS ? req->stage_wait_ms : STAGE_WAIT_MAX_MS;
    if (commit)
        ms = COMMIT_WAIT_MS;
    job_take(j, c, request_id, req, t0_ns);
    j->stage = true;
    j->peer = c->peer;
    j->peer.defer_durable = false;
    j->peer.durable_seq = 0;
    j->deadline_ms = crb_now_ms() + ms;
    c->waiting++;
    atomic_fetch_add(beat ? &srv->task_waits : commit ? &srv->commit_waits : &srv->stage_waits, 1);
    pthread_mutex_lock(&srv->wait_lock);
    j->next = srv->waits;
    srv->waits = j;
    atomic_fetch_add(&srv->n_waits, 1);
    pthread_cond_signal(&srv->wait_cond);
    pthread_mutex_unlock(&srv->wait_lock);
    return 0;
}

static int queue_error(rpc_conn *c, int status, uint64_t request_id, const char *text)
{
    crp_buf body = {0};
    crp_error e = {.message = (char *)text};
    int rc = crp_error_encode(&e, &body);
    if (rc == 0)
        rc = queue_frame(c, CRP_ERROR, status, request_id, &body);
    crp_buf_free(&body);
    return rc;
}

/* Take c off its thread's list (the listener appends to it: t->lock). */
static void thread_unlist(rpc_thread *t, rpc_conn *c)
{
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n_conns; i++) {
        if (t->conns[i] == c) {
            t->conns[i] = t->conns[--t->n_conns];
            break;
        }
    }
    pthread_mutex_unlock(&t->lock);
}

static void conn_free(rpc_conn *c)
{
    rpc_thread *t = c->thread;
    if (c->zombie)
        return; /* torn down already; freed when its last held request returns */
    crk_peer_closed(t->srv->svc, &c->peer, crb_now_ms()); /* its owned writes (dispatch.h) */
    if (c->holding)
        atomic_fetch_sub(&t->n_holding, 1);
    for (size_t i = 0; c->ready && i < t->n_ready; i++)
        if (t->ready[i] == c)
            t->ready[i] = NULL; /* skipped when the list is run */
    crb_loop_del(&c->io);
    close(c->io.fd);
    thread_unlist(t, c);
    atomic_fetch_sub(&t->srv->open, 1);
    crp_reader_fini(&c->rd);
    free(c->out);
    c->out = NULL;
    if (c->waiting > 0) {
        c->zombie = true; /* the stage waiter still holds requests of it */
        return;
    }
    free(c);
}

/* A held get comes back to a connection that cannot take its reply (torn down or
 * stopping): count it off, and free a zombie with nothing more held. */
static void stage_job_drop(scan_job *j)
{
    rpc_conn *c = j->conn;
    c->waiting--;
    if (c->zombie && c->waiting == 0)
        free(c);
    job_free(j);
}

static void set_events(rpc_conn *c)
{
    const crk_io_budget *b = &c->thread->srv->budget;
    bool paused =
        c->parked || !crk_budget_may_read(b, crp_reader_buffered(&c->rd), c->out_len - c->out_off);
    /* A parked connection is not watched for input or half-close (both
     * level-triggered: they would fire until it is read); a full hang-up
     * or error is still reported. */
    size_t sendable = c->holding ? c->hold_off : c->out_len;
    uint32_t ev = (paused ? 0 : EPOLLIN | EPOLLRDHUP) | (sendable > c->out_off ? EPOLLOUT : 0);
    crb_loop_mod(&c->io, ev);
}

/* Serve one complete frame. Returns 0, 1 when the connection was parked
 * (a scan), or a negative status if the connection must close now. */
static int serve_frame(rpc_conn *c, const crp_header *h, const uint8_t *body)
{
    crk_rpc_server *srv = c->thread->srv;
    atomic_fetch_add(&srv->frames, 1);
    if (h->type == CRP_REPL_SUBSCRIBE && srv->info->ha != NULL) {
        /* An HA standby: the replicator takes the socket (master/ha.h). */
        int fd = dup(c->io.fd);
        if (fd >= 0)
            crk_ha_take_standby(srv->info->ha, fd, body, h->body_len, &c->thread->loop);
        return CR_ERR_CONNECTION;
    }
    if (h->type != CRP_RPC_REQ) {
        atomic_fetch_add(&srv->malformed, 1);
        queue_error(c, CR_ERR_MALFORMED_FRAME, h->request_id, "expected an RPC request frame");
        return 0;
    }
    crp_rpc_req req;
    int rc = crp_rpc_req_decode(body, h->body_len, &req);
    if (rc < 0) {
        atomic_fetch_add(&srv->malformed, 1);
        crb_log(CRB_LOG_INFO, "rpc: undecodable request: %s", cr_last_error_message());
        queue_error(c, rc, h->request_id, cr_last_error_message());
        return 0;
    }
    uint64_t t0 = crb_now_ns();
    if (is_scan(req.op)) {
        rc = start_scan(c, h->request_id, &req, t0);
        if (rc == 0)
            return 1; /* parked: the reply comes from the scan worker */
        crp_rpc_req_clear(&req);
        return queue_error(c, rc, h->request_id, "out of memory queueing a scan");
    }
    crp_rpc_resp resp;
    crk_scratch *scratch = &c->thread->scratch;
    c->peer.defer_durable = srv->info->ha != NULL;
    crk_dispatch(srv->svc, srv->info, &c->peer, &req, crb_now_ms(), &resp, scratch);
    bool commit = reply_committing(&resp);
    if (c->peer.durable_seq == 0 && reply_holds(&req, &resp) &&
        hold_for_stage(c, h->request_id, &req, t0, commit) == 0) {
        crk_scratch_reset(scratch); /* the stage waiter answers it (req moved there) */
        return 0;
    }
    if (commit)
        settle_committing(&resp); /* not held (the limits): as for any put in flight */
    size_t before = c->out_len;
    crp_buf *out = &c->thread->reply;
    out->len = 0;
    rc = crp_rpc_resp_encode(&resp, out);
    if (rc < 0) {
        /* e.g. a reply larger than a frame: say so instead of going silent */
        queue_error(c, rc, h->request_id, cr_last_error_message());
    } else {
        rc = queue_frame(c, CRP_RPC_RESP, resp.status, h->request_id, out);
    }
    uint64_t seq = c->peer.durable_seq;
    if (seq != 0 && !c->holding) {
        atomic_fetch_add(&c->thread->n_holding, 1);
        if (crk_ha_committed(srv->info->ha) < seq) {
            /* held until its change is on the standbys (master/ha.h) */
            c->hold_off = before;
            c->hold_ns = crb_now_ns();
            c->holding = true;
            c->hold_seq = seq;
        } else {
            atomic_fetch_sub(&c->thread->n_holding, 1);
        }
    } else if (seq != 0 && seq > c->hold_seq) {
        c->hold_seq = seq; /* held behind the one before */
    }
    record_latency(srv, req.op, t0);
    if (out->cap > REPLY_KEEP_BYTES)
        crp_buf_free(out); /* do not pin a rare huge reply's memory */
    crk_scratch_reset(scratch);
    crp_rpc_req_clear(&req);
    return rc < 0 ? rc : 0;
}

/* Put c on its thread's ready list (it used its turn; frames may wait) and
 * have the loop come back to the list after its next pass. */
static void mark_ready(rpc_conn *c)
{
    rpc_thread *t = c->thread;
    if (c->ready)
        return;
    if (t->n_ready == t->cap_ready) {
        size_t cap = t->cap_ready ? 2 * t->cap_ready : 16;
        rpc_conn **r = realloc(t->ready, cap * sizeof(*r));
        if (r == NULL)
            return; /* served at its next event instead */
        t->ready = r;
        t->cap_ready = cap;
    }
    t->ready[t->n_ready++] = c;
    c->ready = true;
    crb_loop_again(&t->loop);
}

/* crp_reader: RPC frames carry no data bytes. */
static int rpc_on_head(void *ctx, const crp_header *h, const uint8_t *body, uint8_t **data_dst)
{
    if (h->data_len != 0)
        return crb_error(CR_ERR_MALFORMED_FRAME, "RPC frames carry no data bytes");
    return 0;
}

/* One request is whole: serve it, then pause the reader if c is parked, has
 * too many replies waiting, or used its turn. */
static int rpc_on_frame(void *ctx, const crp_header *h, const uint8_t *body)
{
    rpc_conn *c = ctx;
    int rc = serve_frame(c, h, body);
    if (rc < 0) {
        c->drop = true;
        return rc;
    }
    if (rc == 1)
        return CRP_READER_PAUSED; /* parked */
    if (c->out_len - c->out_off >= c->thread->srv->budget.out_high)
        return CRP_READER_PAUSED; /* let the client drain replies first */
    if (++c->turn >= FRAMES_PER_TURN) {
        if (crp_reader_buffered(&c->rd) > 0)
            mark_ready(c); /* fairness: one turn of frames, then the others */
        return CRP_READER_PAUSED;
    }
    return 0;
}

static const crp_reader_ops rpc_reader_ops = {.on_head = rpc_on_head, .on_frame = rpc_on_frame};

/*
 * One turn: serve the frames already buffered, then what the socket holds,
 * until it has nothing more or the connection pauses. A header that is
 * malformed (the stream cannot be resynchronised) gets an ERROR frame and
 * the connection closes once it is flushed. Returns a negative status when
 * the connection must close now.
 */
static int conn_read(rpc_conn *c)
{
    c->turn = 0;
    uint64_t before = c->rd.received;
    int rc = crp_reader_read(&c->rd, c->io.fd, &rpc_reader_ops, c);
    if (c->rd.received != before)
        c->progress_ms = crb_now_ms();
    if (rc >= 0)
        return 0;
    if (c->drop || rc == CR_ERR_CONNECTION || rc == CR_ERR_NO_MEMORY)
        return rc;
    atomic_fetch_add(&c->thread->srv->malformed, 1);
    queue_error(c, rc, 0, cr_last_error_message());
    c->closing = true;
    return 0;
}

/* May c be served now (not parked or closing, replies below the budget)? */
static bool conn_may_serve(const rpc_conn *c)
{
    return !c->parked && !c->closing && c->out_len - c->out_off < c->thread->srv->budget.out_high;
}

static int conn_flush(rpc_conn *c)
{
    size_t limit = c->holding ? c->hold_off : c->out_len;
    while (c->out_off < limit) {
        ssize_t n = send(c->io.fd, c->out + c->out_off, limit - c->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return CR_ERR_CONNECTION;
        }
        c->out_off += (size_t)n;
        c->progress_ms = crb_now_ms();
    }
    if (c->holding) { /* keep the held replies at the front */
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->hold_off -= c->out_off;
        c->out_off = 0;
        return 0;
    }
    c->out_off = c->out_len = 0;
    return 0;
}

/*
 * After c was served (rc: its last status): flush; if that made room, serve
 * the frames it still has buffered (unless it waits on the ready list for
 * its next turn) and flush again; then close it or watch what it waits for.
 */
/*
 * The peer is gone (a reply could not be sent), but what it sent before it went is still
 * served, the replies dropped: a put committed ahead ends with a notice its writer may send
 * just before it exits (docs/WIRE.md, "Commit ahead"). Bounded by what the reader holds;
 * stops at a scan, an error, or a turn that consumed nothing.
 */
static void serve_leftovers(rpc_conn *c)
{
    if (c->holding)
        return; /* HA (no commit ahead there): the held replies keep their places */
    for (;;) {
        size_t before = crp_reader_buffered(&c->rd);
        if (before == 0 || c->parked || c->drop)
            return;
        c->out_off = c->out_len = 0;
        if (conn_read(c) < 0 || crp_reader_buffered(&c->rd) == before)
            return;
    }
}

static void conn_settle(rpc_conn *c, int rc)
{
    int frc = conn_flush(c);
    if (frc < 0 && rc == 0)
        serve_leftovers(c);
    if (rc == 0 && frc == 0 && !c->ready && conn_may_serve(c) && crp_reader_buffered(&c->rd) > 0) {
        rc = conn_read(c);
        frc = conn_flush(c);
    }
    if (rc < 0 || frc < 0 || (c->closing && c->out_off == c->out_len)) {
        if (c->parked) { /* a scan of it runs (perhaps one of its leftovers): freed after */
            crb_loop_del(&c->io);
            c->dead = true;
            return;
        }
        conn_free(c);
    } else {
        set_events(c);
    }
}

/* HA: send the held replies whose changes are committed now. */
static void release_held(rpc_thread *t)
{
    const crk_server_info *info = t->srv->info;
    if (info->ha == NULL)
        return;
    uint64_t commit = crk_ha_committed(info->ha);
    rpc_conn *batch[64];
    for (;;) {
        size_t n = 0;
        pthread_mutex_lock(&t->lock);
        for (size_t i = 0; i < t->n_conns && n < 64; i++) {
            rpc_conn *c = t->conns[i];
            if (c->holding && c->hold_seq <= commit) {
                c->holding = false;
                c->hold_seq = 0;
                atomic_fetch_sub(&t->n_holding, 1);
                crk_ha_note_held(info->ha, crb_now_ns() - c->hold_ns);
                batch[n++] = c;
            }
        }
        pthread_mutex_unlock(&t->lock);
        for (size_t i = 0; i < n; i++) {
            rpc_conn *c = batch[i];
            if (c->parked)
                set_events(c);
            else
                conn_settle(c, 0);
        }
        if (n < 64)
            return;
    }
}

/* The I/O thread running this code (set as its loop hands it events), so
 * on_commit knows when it runs on a loop thread: a standby's acks. */
static _Thread_local rpc_thread *current_thread;

/* HA commit index moved (called from HA threads, or from an I/O thread
 * reading a standby's acks, HA locks held): the I/O threads that hold
 * replies release them; the calling one after its pass (no wake-up), the
 * others woken. */
static void on_commit(void *arg)
{
    crk_rpc_server *srv = arg;
    for (unsigned i = 0; i < srv->n_started; i++) {
        rpc_thread *t = &srv->threads[i];
        if (atomic_load(&t->n_holding) == 0)
            continue; /* nothing of it waits for the commit */
        atomic_store(&t->commit_moved, true);
        if (t == current_thread)
            crb_loop_again(&t->loop); /* on_tick runs after this pass, woken */
        else
            crb_loop_wake(&t->loop);
    }
}

static void conn_event(crb_io *io, uint32_t events)
{
    rpc_conn *c = (rpc_conn *)((char *)io - offsetof(rpc_conn, io));
    current_thread = c->thread;
    if (c->parked) {
        if ((events & (EPOLLHUP | EPOLLERR)) || conn_flush(c) < 0) {
            /* Gone while its scan runs: stop watching; freed when the job returns. */
            crb_loop_del(&c->io);
            c->dead = true;
            return;
        }
        set_events(c);
        return;
    }
    rpc_thread *t = c->thread;
    int rc = 0;
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) && !c->closing)
        rc = conn_read(c);
    conn_settle(c, rc); /* may free c */
    if (crk_ha_batch_pending())
        crb_loop_again(&t->loop); /* on_tick sends the batch after this pass */
}

/* A connection the master did not serve: count it, say so at most once per 10 s. */
static void note_refused(crk_rpc_server *srv, const char *why)
{
    uint64_t more = 0;
    if (crk_ratelimit_allow(&srv->refuse_log, crb_now_ms(), &more))
        crb_log(CRB_LOG_WARN,
                "master rpc: refused a connection: %s (%llu more since the last message; "
                "open %llu, cap %u)",
                why, (unsigned long long)more, (unsigned long long)atomic_load(&srv->open),
                srv->max_conns);
}

static void pause_listener(crk_rpc_server *srv)
{
    for (unsigned i = 0; i < srv->n_listeners; i++)
        if (srv->listeners[i].added) {
            crb_loop_del(&srv->listeners[i].io);
            srv->listeners[i].added = false;
        }
    srv->listen_paused_until = crb_now_ms() + LISTEN_PAUSE_MS;
}

static void resume_listener(crk_rpc_server *srv)
{
    srv->listen_paused_until = 0;
    for (unsigned i = 0; i < srv->n_listeners; i++) {
        rpc_listener *l = &srv->listeners[i];
        if (!l->added && crb_loop_add(&srv->threads[0].loop, &l->io, EPOLLIN) == 0)
            l->added = true;
        if (!l->added)
            srv->listen_paused_until = crb_now_ms() + LISTEN_PAUSE_MS;
    }
}

/* Hand a new connection to the next thread: listed first, then watched. A TCP
 * connection from this host is offered the local socket in its hello. */
static void adopt(crk_rpc_server *srv, int fd, bool local)
{
    int one = 1;
    if (srv->tcp_nodelay && !local)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    rpc_conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        return;
    }
    if (!local && srv->local_socket[0] != '\0') {
        c->peer.local_port = crb_same_host_peer_port(fd);
        c->peer.local_socket = c->peer.local_port != 0 ? srv->local_socket : NULL;
    }
    c->io.fd = fd;
    c->io.on_event = conn_event;
    c->progress_ms = crb_now_ms();
    crp_reader_init(&c->rd, srv->max_body);
    rpc_thread *t = &srv->threads[atomic_fetch_add(&srv->next, 1) % srv->n_threads];
    c->thread = t;
    pthread_mutex_lock(&t->lock);
    if (t->n_conns == t->cap_conns) {
        size_t ncap = t->cap_conns ? t->cap_conns * 2 : 16;
        rpc_conn **nc = realloc(t->conns, ncap * sizeof(*nc));
        if (nc == NULL) {
            pthread_mutex_unlock(&t->lock);
            close(fd);
            free(c);
            return;
        }
        t->conns = nc;
        t->cap_conns = ncap;
    }
    t->conns[t->n_conns++] = c;
    pthread_mutex_unlock(&t->lock);
    atomic_fetch_add(&srv->accepted, 1);
    if (local)
        atomic_fetch_add(&srv->local_accepted, 1);
    atomic_fetch_add(&srv->open, 1);
    if (crb_loop_add(&t->loop, &c->io, EPOLLIN | EPOLLRDHUP) < 0) {
        /* Never watched, so its thread has not seen it: unlist it here. */
        thread_unlist(t, c);
        atomic_fetch_sub(&srv->open, 1);
        close(fd);
        free(c);
    }
}

static void on_listen(crb_io *io, uint32_t events)
{
    rpc_listener *l = (rpc_listener *)((char *)io - offsetof(rpc_listener, io));
    crk_rpc_server *srv = l->srv;
    for (int k = 0; k < 1024; k++) {
        int fd = accept4(l->io.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EMFILE && errno != ENFILE)
                return; /* EAGAIN: nothing waiting */
            /* Out of descriptors: shed what waits with the reserved one, or,
             * if even that is gone, stop watching the listener for a while
             * (it would stay readable: a busy loop). */
            bool any = false;
            while (crk_fd_reserve_shed(&srv->reserve, l->io.fd)) {
                atomic_fetch_add(&srv->shed, 1);
                any = true;
            }
            note_refused(srv, "the process is out of file descriptors");
            if (!any)
                pause_listener(srv);
            return;
        }
        if (atomic_load(&srv->open) >= srv->max_conns) {
            close(fd);
            atomic_fetch_add(&srv->refused, 1);
            note_refused(srv, "--rpc_max_connections reached");
            continue;
        }
        adopt(srv, fd, l->local);
    }
}

/*
 * Every SWEEP_MS: close this thread's connections that made no progress for
 * the idle timeout, and give back the buffers of connections quiet for a
 * second (busy ones keep theirs: freeing and reallocating per request would
 * cost an mmap each). The list is read under t->lock (the listener appends
 * to it); only this thread frees its connections, so the ones found stay
 * valid after.
 */
#define QUIET_MS 1000
static void sweep(rpc_thread *t, uint64_t now)
{
    crk_rpc_server *srv = t->srv;
    const crk_io_budget *b = &srv->budget;
    rpc_conn *idle[64];
    size_t n = 0;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n_conns; i++) {
        rpc_conn *c = t->conns[i];
        if (c->parked)
            continue;
        uint64_t quiet = now - c->progress_ms;
        if (srv->idle_timeout_ms != 0 && quiet >= srv->idle_timeout_ms && n < 64) {
            idle[n++] = c;
        } else if (quiet >= QUIET_MS && c->out_off == c->out_len) {
            crp_reader_shrink(&c->rd);
            if (c->out_cap > b->keep) {
                free(c->out);
                c->out = NULL;
                c->out_cap = 0;
            }
            c->out_off = c->out_len = 0;
        }
    }
    pthread_mutex_unlock(&t->lock);
    for (size_t i = 0; i < n; i++) { /* more, if any, at the next sweep */
        atomic_fetch_add(&srv->idle_closed, 1);
        conn_free(idle[i]);
    }
}

/* Replies from the scan worker: queue each and resume its connection. */
static void take_done(rpc_thread *t)
{
    pthread_mutex_lock(&t->done_lock);
    scan_job *j = t->done;
    t->done = NULL;
    pthread_mutex_unlock(&t->done_lock);
    while (j != NULL) {
        scan_job *next = j->next;
        rpc_conn *c = j->conn;
        if (j->stage) { /* a held get: the connection was not parked for it */
            if (c->zombie || c->dead) {
                stage_job_drop(j); /* a dead (parked) one is freed when its scan returns */
            } else {
                c->waiting--;
                int rc = j->frame.len > 0 ? queue_bytes(c, j->frame.data, j->frame.len)
                                          : CR_ERR_NO_MEMORY;
                conn_settle(c, rc);
                job_free(j);
            }
            j = next;
            continue;
        }
        c->parked = false;
        if (c->dead) {
            conn_free(c);
        } else {
            int rc =
                j->frame.len > 0 ? queue_bytes(c, j->frame.data, j->frame.len) : CR_ERR_NO_MEMORY;
            conn_settle(c, rc);
        }
        job_free(j);
        j = next;
    }
}

/* Give every connection on the ready list another turn. */
static void run_ready(rpc_thread *t)
{
    size_t n = t->n_ready;
    for (size_t i = 0; i < n; i++) {
        rpc_conn *c = t->ready[i];
        t->ready[i] = NULL;
        if (c == NULL)
            continue; /* freed meanwhile */
        c->ready = false;
        if (c->parked || c->closing)
            continue;
        conn_settle(c, conn_read(c)); /* may put it back on the list */
    }
    /* Entries added during the turns moved up front. */
    size_t k = 0;
    for (size_t i = n; i < t->n_ready; i++)
        if (t->ready[i] != NULL)
            t->ready[k++] = t->ready[i];
    t->n_ready = k;
}

/* The loop's tick: after a wake-up (scan replies, HA commits), after a pass
 * that left connections ready, and every TICK_MS. */
static void on_tick(crb_loop *loop, uint64_t now_ns, bool woken)
{
    rpc_thread *t = loop->owner;
    crk_rpc_server *srv = t->srv;
    uint64_t now = crb_now_ms();
    if (now >= t->next_sweep_ms) {
        sweep(t, now);
        t->next_sweep_ms = now + SWEEP_MS;
    }
    if (t == &srv->threads[0] && srv->listen_paused_until != 0 && now >= srv->listen_paused_until)
        resume_listener(srv);
    if (woken) {
        take_done(t);
        if (atomic_exchange(&t->commit_moved, false))
            release_held(t);
    }
    if (t->n_ready > 0)
        run_ready(t);
    /* HA group commit: the changes this thread logged since the last tick
     * go to the standbys in one frame now; the next ones wait for the next
     * tick, which conn_event brings forward (crb_loop_again). */
    crk_ha_batch_end(srv->info->ha);
    crk_ha_batch_begin();
}

void crk_rpc_server_options_default(crk_rpc_server_options *o)
{
    *o = (crk_rpc_server_options){
        .host = "127.0.0.1", .port = 0, .threads = 2, .tcp_nodelay = true, .local_socket = true};
}

/* The local socket: an abstract unix socket whose name is random per master
 * (a client learns it only over a TCP connection from this host, in the hello
 * reply, and checks the listener's pid). Without it clients stay on TCP. */
static void open_local_socket(crk_rpc_server *srv)
{
    uint8_t r[8];
    char name[sizeof(srv->local_socket)];
    if (crb_random_bytes(r, sizeof(r)) < 0) {
        crb_log(CRB_LOG_WARN, "master rpc: no local socket (%s); clients on this host use TCP",
                cr_last_error_message());
        return;
    }
    int n = snprintf(name, sizeof(name), "crescent-master.%d.", (int)getpid());
    for (size_t i = 0; i < sizeof(r) && n > 0 && (size_t)n + 2 < sizeof(name); i++)
        n += snprintf(name + n, sizeof(name) - (size_t)n, "%02x", r[i]);
    int fd = crb_listen_abstract(name, 1024);
    if (fd < 0) {
        crb_log(CRB_LOG_WARN, "master rpc: no local socket (%s); clients on this host use TCP",
                cr_last_error_message());
        return;
    }
    memcpy(srv->local_socket, name, sizeof(name));
    srv->listeners[1] =
        (rpc_listener){.io = {.fd = fd, .on_event = on_listen}, .srv = srv, .local = true};
    srv->n_listeners = 2;
}

int crk_rpc_server_start(crk_service *svc, const crk_server_info *info,
                         const crk_rpc_server_options *opt, crk_rpc_server **out)
{
    crk_rpc_server *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "rpc server");
    srv->svc = svc;
    srv->info = info;
    srv->n_threads = opt->threads ? opt->threads : 2;
    srv->tcp_nodelay = opt->tcp_nodelay;
    srv->budget = crk_io_budget_default();
    srv->max_body = srv->budget.in_max - CRP_HEADER_SIZE < CRP_MAX_BODY
                        ? (uint32_t)(srv->budget.in_max - CRP_HEADER_SIZE)
                        : CRP_MAX_BODY;
    srv->idle_timeout_ms = opt->idle_timeout_ms;
    srv->max_conns = crk_conn_cap(opt->max_connections, FD_RESERVE);
    srv->refuse_log = (crk_ratelimit){.interval_ms = 10000};
    crk_fd_reserve_init(&srv->reserve);
    const char *host = opt->host;
    int rc = crb_listen(host, opt->port, 1024, &srv->port);
    if (rc < 0) {
        crk_fd_reserve_close(&srv->reserve);
        free(srv);
        return rc;
    }
    srv->listeners[0] = (rpc_listener){.io = {.fd = rc, .on_event = on_listen}, .srv = srv};
    srv->n_listeners = 1;
    if (opt->local_socket)
        open_local_socket(srv);
    srv->threads = calloc(srv->n_threads, sizeof(*srv->threads));
    if (srv->threads == NULL) {
        for (unsigned i = 0; i < srv->n_listeners; i++)
            close(srv->listeners[i].io.fd);
        crk_fd_reserve_close(&srv->reserve);
        free(srv);
        return crb_error(CR_ERR_NO_MEMORY, "rpc threads");
    }
    pthread_mutex_init(&srv->scan_lock, NULL);
    pthread_cond_init(&srv->scan_cond, NULL);
    pthread_mutex_init(&srv->wait_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the waits' deadlines are monotonic */
    pthread_cond_init(&srv->wait_cond, &ca);
    pthread_condattr_destroy(&ca);
    crk_service_on_stage_results(svc, on_stage_results, srv); /* before any I/O thread runs */
    crk_service_on_holder_tasks(svc, on_holder_tasks, srv);
    for (unsigned i = 0; i < srv->n_threads; i++) {
        rpc_thread *t = &srv->threads[i];
        t->srv = srv;
        t->next_sweep_ms = crb_now_ms() + SWEEP_MS;
        pthread_mutex_init(&t->lock, NULL);
        pthread_mutex_init(&t->done_lock, NULL);
    }
    for (unsigned i = 0; i < srv->n_threads && rc >= 0; i++) {
        char name[32]; /* the loop keeps 15 bytes */
        snprintf(name, sizeof(name), "crk-rpc%u", i);
        rc = crb_loop_init(&srv->threads[i].loop, name, TICK_MS, on_tick, &srv->threads[i]);
        srv->threads[i].loop_inited = rc == 0;
        if (rc == 0 && (opt->busy_poll_us > 0 || opt->adaptive_poll))
            crb_loop_set_busy_poll(&srv->threads[i].loop, opt->busy_poll_us > 0
                                                              ? (int64_t)opt->busy_poll_us * 1000
                                                              : CRB_SPIN_ADAPTIVE);
    }
    for (unsigned i = 0; i < srv->n_listeners && rc >= 0; i++) {
        rc = crb_loop_add(&srv->threads[0].loop, &srv->listeners[i].io, EPOLLIN);
        srv->listeners[i].added = rc == 0;
    }
    for (unsigned i = 0; i < srv->n_threads && rc >= 0; i++) {
        rc = crb_loop_start(&srv->threads[i].loop);
        if (rc == 0)
            srv->n_started++;
    }
    if (rc >= 0) {
        if (pthread_create(&srv->scan_tid, NULL, scan_main, srv) == 0)
            srv->scan_started = true;
        else
            rc = crb_error(CR_ERR_SYSTEM, "starting the rpc scan thread");
    }
    if (rc >= 0) {
        if (pthread_create(&srv->wait_tid, NULL, stage_main, srv) == 0)
            srv->wait_started = true;
        else
            rc = crb_error(CR_ERR_SYSTEM, "starting the rpc stage-wait thread");
    }
    if (rc < 0) {
        crk_rpc_server_stop(srv);
        return rc;
    }
    if (info->ha != NULL)
        crk_ha_set_notify(info->ha, on_commit, srv);
    crb_log(CRB_LOG_INFO,
            "master rpc listening on %s:%u with %u threads (at most %u connections%s)%s%s", host,
            (unsigned)srv->port, srv->n_threads, srv->max_conns,
            srv->idle_timeout_ms ? ", idle ones closed" : "",
            srv->local_socket[0] ? "; clients on this host switch to @" : "", srv->local_socket);
    *out = srv;
    return 0;
}

uint16_t crk_rpc_server_port(const crk_rpc_server *srv)
{
    return srv->port;
}

void crk_rpc_server_latency(crk_rpc_server *srv, int op_index, uint64_t out[CRK_LAT_BUCKETS])
{
    for (int b = 0; b < CRK_LAT_BUCKETS; b++)
        out[b] = op_index >= 0 && op_index < CRP_RPC_OP_COUNT
                     ? atomic_load(&srv->latency[op_index][b])
                     : 0;
}

void crk_rpc_server_stats_get(crk_rpc_server *srv, crk_rpc_server_stats *out)
{
    *out = (crk_rpc_server_stats){atomic_load(&srv->accepted),
                                  atomic_load(&srv->open),
                                  atomic_load(&srv->frames),
                                  atomic_load(&srv->malformed),
                                  atomic_load(&srv->refused),
                                  atomic_load(&srv->shed),
                                  atomic_load(&srv->idle_closed),
                                  atomic_load(&srv->stage_waits),
                                  atomic_load(&srv->stage_waits_expired),
                                  atomic_load(&srv->task_waits),
                                  atomic_load(&srv->local_accepted),
                                  atomic_load(&srv->commit_waits),
                                  atomic_load(&srv->commit_waits_expired)};
}

void crk_rpc_server_stop(crk_rpc_server *srv)
{
    if (srv == NULL)
        return;
    if (srv->info->ha != NULL && srv->n_started == srv->n_threads && srv->scan_started)
        crk_ha_set_notify(srv->info->ha, NULL, NULL); /* no HA thread calls on_commit after */
    atomic_store(&srv->stop, true);
    pthread_mutex_lock(&srv->scan_lock);
    pthread_cond_broadcast(&srv->scan_cond);
    pthread_mutex_unlock(&srv->scan_lock);
    if (srv->scan_started)
        pthread_join(srv->scan_tid, NULL); /* finishes the job it runs, if any */
    while (srv->scan_head != NULL) {
        scan_job *j = srv->scan_head;
        srv->scan_head = j->next;
        job_free(j);
    }
    pthread_mutex_lock(&srv->wait_lock);
    pthread_cond_broadcast(&srv->wait_cond);
    pthread_mutex_unlock(&srv->wait_lock);
    if (srv->wait_started)
        pthread_join(srv->wait_tid, NULL);
    /* Threads first (the loops' fds stay open for the connections' removal). */
    for (unsigned i = 0; i < srv->n_threads; i++)
        if (srv->threads[i].loop_inited)
            crb_loop_stop(&srv->threads[i].loop);
    if (srv->info->ha != NULL)
        crk_ha_acks_detach(srv->info->ha); /* the standbys' ack sockets on those loops */
    crk_service_on_stage_results(srv->svc, NULL, NULL); /* no I/O thread runs now */
    crk_service_on_holder_tasks(srv->svc, NULL, NULL);
    while (srv->waits != NULL) { /* held gets never answered: their connections close */
        scan_job *j = srv->waits;
        srv->waits = j->next;
        stage_job_drop(j);
    }
    for (unsigned i = 0; i < srv->n_listeners; i++)
        if (srv->listeners[i].added)
            crb_loop_del(&srv->listeners[i].io);
    for (unsigned i = 0; i < srv->n_threads; i++) {
        rpc_thread *t = &srv->threads[i];
        while (t->done != NULL) {
            scan_job *j = t->done;
            t->done = j->next;
            if (j->stage)
                stage_job_drop(j);
            else
                job_free(j);
        }
        while (t->n_conns > 0)
            conn_free(t->conns[t->n_conns - 1]);
        free(t->conns);
        free(t->ready);
        crk_scratch_free(&t->scratch);
        crp_buf_free(&t->reply);
        if (t->loop_inited)
            crb_loop_fini(&t->loop);
        pthread_mutex_destroy(&t->lock);
        pthread_mutex_destroy(&t->done_lock);
    }
    pthread_mutex_destroy(&srv->scan_lock);
    pthread_cond_destroy(&srv->scan_cond);
    pthread_mutex_destroy(&srv->wait_lock);
    pthread_cond_destroy(&srv->wait_cond);
    for (unsigned i = 0; i < srv->n_listeners; i++)
        close(srv->listeners[i].io.fd);
    crk_fd_reserve_close(&srv->reserve);
    free(srv->threads);
    free(srv);
}
