/*
 * master_bench.c - "crescent-bench master": metadata operations per second of
 * crescent-master from several client connections.
 *
 * Operations (--ops, all by default), each timed for --duration seconds:
 *   exist        EXIST of a random prefilled key
 *   put          PUT_START + PUT_END of a fresh key (one op = two RPCs)
 *   get          GET_REPLICA_LIST of a random prefilled key (grants a lease)
 *   batch_exist  BATCH_EXIST of --batch random prefilled keys
 *   batch_put    BATCH_PUT_START + BATCH_PUT_END of --batch fresh keys
 *   batch_get    BATCH_GET_REPLICA_LIST of --batch random prefilled keys
 * A row reports ops/s (an op is one line above), keys/s, RPCs/s, and the
 * latency p50/p99 of an op (first request sent to last reply received).
 *
 * The master: spawned (fork + exec, 127.0.0.1, kernel-chosen ports; its
 * path from --master-bin, else ../master/crescent-master next to this
 * binary's folder, else crescent-master on PATH; stopped with SIGTERM and
 * its exit status checked) unless --master HOST:PORT names a running one.
 * A setup connection mounts a segment and prefills --keys keys; every
 * worker connection mounts its own segment (1 TiB of address space each:
 * the master stores metadata only, so nothing is allocated here), like a
 * store client would, and a heartbeat thread pings every client id each
 * second, each over a connection of its own (the master binds a connection
 * to the client it speaks for), so no client expires mid-run.
 *
 * Clients (--client):
 *   lib  (default) the store's master client (src/store/master_client.h:
 *        crc_master_call, thread-safe and pipelined). Its calls block, so a
 *        connection keeps as many requests in flight as it has caller
 *        threads: --threads per connection (default 16).
 *   raw  one thread per connection speaking the wire protocol itself
 *        (proto/rpc.h codecs, its own socket, on which it also handshakes
 *        and mounts; the library is not involved), keeping --depth ops in flight
 *        and batching its writes. It measures what the master can serve
 *        when the client costs little; a put's PUT_END is still sent only
 *        after its PUT_START reply arrived, as a real writer must.
 * Connections are threads of this process, or with --processes one forked
 * process each (forked before this process starts any thread).
 *
 * Errors: any failed RPC or key result is counted; a run with errors exits 1.
 * Against an external master the keys carry a random run tag and are removed
 * (REMOVE_BY_REGEX, force) at the end.
 *
 * This subcommand uses the store's internal client and codec headers (src/),
 * since the store has no public API yet; the engine bench uses public ones.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/net.h"
#include "master_proc.h"
#include "options.h"
#include "tool_util.h"
#include "bench.h"
#include "crescent/status.h"
#include "proto/frame.h"
#include "proto/frame_reader.h"
#include "proto/rpc.h"
#include "store/master_client.h"

#define MB_MAX_CONNS   256
#define MB_MAX_THREADS 256
#define MB_MAX_DEPTH   1024
#define MB_MAX_BATCH   4096
#define MB_KEY_MAX     64
#define MB_CALL_MS     30000
#define MB_START_MS    15000
#define MB_SEG_SIZE    (1ull << 40) /* address space per mounted segment */
#define MB_SEG_BASE    (1ull << 44)

typedef enum mb_op {
    MB_EXIST,
    MB_PUT,
    MB_GET,
    MB_BATCH_EXIST,
    MB_BATCH_PUT,
    MB_BATCH_GET,
    MB_N_OPS
} mb_op;

static const char *const op_names[MB_N_OPS] = {"exist",       "put",       "get",
                                               "batch_exist", "batch_put", "batch_get"};

static bool op_is_batch(mb_op op)
{
    return op >= MB_BATCH_EXIST;
}

static bool op_is_put(mb_op op)
{
    return op == MB_PUT || op == MB_BATCH_PUT;
}

typedef struct mb_opts {
    const char *master;     /* --master HOST:PORT, or NULL to spawn */
    const char *master_bin; /* --master-bin */
    uint32_t master_threads;
    const char *client; /* "lib" or "raw" */
    bool raw;
    uint32_t conns, threads, depth, batch, keys, replicas;
    uint64_t value_size;
    double duration;
    unsigned ops; /* bit per mb_op */
    bool processes, json;
} mb_opts;

/* One worker's (connection's) outcome of one op. Plain data: crosses pipes. */
typedef struct mb_result {
    uint64_t ops, keys, rpcs, errors;
    double seconds;
    cb_hist hist; /* op latency, ns */
    char error[160];
} mb_result;

typedef struct mb_conn {
    const mb_opts *o;
    unsigned index;
    const char *addr;
    const char *tag;
    crp_rpc_uuid cid;
    crc_master *m; /* lib */
    int fd;        /* raw */
    uint64_t next_id;
    uint64_t seq; /* fresh-key counter (raw; lib threads have their own) */
} mb_conn;

/* --- keys and requests ----------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void pre_key(char *k, const char *tag, uint64_t i)
{
    snprintf(k, MB_KEY_MAX, "%s:pre:%" PRIu64, tag, i);
}

/* A fresh key: unique per (op, connection, thread, sequence). */
static void new_key(char *k, const char *tag, mb_op op, unsigned conn, unsigned thread,
                    uint64_t seq)
{
    snprintf(k, MB_KEY_MAX, "%s:%s:%u.%u.%" PRIu64, tag, op_names[op], conn, thread, seq);
}

/* Key storage of one op: up to batch keys plus the pointer array. */
typedef struct mb_keys {
    char (*buf)[MB_KEY_MAX];
    char **ptr;
    uint64_t *sizes;
    char **ended; /* put: keys whose start succeeded */
    size_t n;
} mb_keys;

static int keys_init(mb_keys *k, size_t cap, uint64_t value_size)
{
    k->buf = calloc(cap, sizeof(*k->buf));
    k->ptr = calloc(cap, sizeof(char *));
    k->ended = calloc(cap, sizeof(char *));
    k->sizes = calloc(cap, sizeof(uint64_t));
    if (k->buf == NULL || k->ptr == NULL || k->ended == NULL || k->sizes == NULL)
        return -1;
    for (size_t i = 0; i < cap; i++) {
        k->ptr[i] = k->buf[i];
        k->sizes[i] = value_size;
    }
    return 0;
}

static void keys_free(mb_keys *k)
{
    free(k->buf);
    free(k->ptr);
    free(k->ended);
    free(k->sizes);
}

/* Fill k with the keys of one op: random prefilled ones, or fresh ones. */
static void keys_fill(mb_keys *k, const mb_opts *o, const char *tag, mb_op op, unsigned conn,
                      unsigned thread, uint64_t *seq, uint64_t *rng)
{
    k->n = op_is_batch(op) ? o->batch : 1;
    for (size_t i = 0; i < k->n; i++) {
        if (op_is_put(op))
            new_key(k->buf[i], tag, op, conn, thread, (*seq)++);
        else
            pre_key(k->buf[i], tag, rng_next(rng) % o->keys);
    }
}

static crp_rpc_replica_config put_config(const mb_opts *o)
{
    return (crp_rpc_replica_config){.replica_num = o->replicas};
}

/* The first request of an op over keys k. */
static void first_request(const mb_conn *c, mb_op op, const mb_keys *k, crp_rpc_req *req)
{
    memset(req, 0, sizeof(*req));
    switch (op) {
    case MB_EXIST:
        req->op = CRP_RPC_EXIST;
        req->u.key.key = k->ptr[0];
        break;
    case MB_GET:
        req->op = CRP_RPC_GET_REPLICA_LIST;
        req->u.key.key = k->ptr[0];
        break;
    case MB_PUT:
        req->op = CRP_RPC_PUT_START;
        req->u.put_start =
            (crp_rpc_put_start_req){c->cid, k->ptr[0], c->o->value_size, put_config(c->o)};
        break;
    case MB_BATCH_EXIST:
        req->op = CRP_RPC_BATCH_EXIST;
        req->u.keys = (crp_rpc_keys_req){k->n, k->ptr};
        break;
    case MB_BATCH_GET:
        req->op = CRP_RPC_BATCH_GET_REPLICA_LIST;
        req->u.keys = (crp_rpc_keys_req){k->n, k->ptr};
        break;
    case MB_BATCH_PUT:
        req->op = CRP_RPC_BATCH_PUT_START;
        req->u.batch_put_start =
            (crp_rpc_batch_put_start_req){c->cid, k->n, k->ptr, k->sizes, put_config(c->o)};
        break;
    default:
        break;
    }
}

/*
 * Check a reply of an op's first request: returns the number of failed keys
 * (or the whole op's key count when the RPC failed). For puts, the keys that
 * started are collected in k->ended (count in *n_ended) for the end request.
 */
static uint64_t check_first(mb_op op, const crp_rpc_resp *resp, mb_keys *k, size_t *n_ended)
{
    *n_ended = 0;
    if (resp->status != 0)
        return k->n;
    uint64_t bad = 0;
    switch (op) {
    case MB_EXIST:
        return resp->u.exist.exists ? 0 : 1;
    case MB_GET:
        return 0;
    case MB_PUT:
        k->ended[(*n_ended)++] = k->ptr[0];
        return 0;
    case MB_BATCH_EXIST:
        if (resp->u.statuses.n != k->n)
            return k->n;
        for (size_t i = 0; i < k->n; i++)
            bad += resp->u.statuses.results[i] != 1;
        return bad;
    case MB_BATCH_GET:
        if (resp->u.batch_get.n != k->n)
            return k->n;
        for (size_t i = 0; i < k->n; i++)
            bad += resp->u.batch_get.results[i].status != 0;
        return bad;
    case MB_BATCH_PUT:
        if (resp->u.batch_alloc.n != k->n)
            return k->n;
        for (size_t i = 0; i < k->n; i++) {
            if (resp->u.batch_alloc.results[i].status == 0)
                k->ended[(*n_ended)++] = k->ptr[i];
            else
                bad++;
        }
        return bad;
    default:
        return k->n;
    }
}

/* The end request of a put over k->ended[0..n). */
static void end_request(const mb_conn *c, mb_op op, const mb_keys *k, size_t n, crp_rpc_req *req)
{
    memset(req, 0, sizeof(*req));
    if (op == MB_PUT) {
        req->op = CRP_RPC_PUT_END;
        req->u.owner_key = (crp_rpc_owner_key_req){c->cid, k->ended[0]};
    } else {
        req->op = CRP_RPC_BATCH_PUT_END;
        req->u.owner_keys = (crp_rpc_owner_keys_req){c->cid, n, k->ended};
    }
}

static uint64_t check_end(mb_op op, const crp_rpc_resp *resp, size_t n)
{
    if (resp->status != 0)
        return n;
    if (op == MB_PUT)
        return 0;
    if (resp->u.statuses.n != n)
        return n;
    uint64_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += resp->u.statuses.results[i] != 0;
    return bad;
}

/* --- lib client: caller threads on a shared crc_master ---------------------------------- */

typedef struct lib_thread {
    mb_conn *c;
    unsigned index;
    mb_op op;
    uint64_t end_ns;
    mb_result r;
} lib_thread;

static void *lib_thread_main(void *arg)
{
    lib_thread *t = arg;
    mb_conn *c = t->c;
    const mb_opts *o = c->o;
    mb_result *r = &t->r;
    mb_keys k;
    if (keys_init(&k, o->batch, o->value_size) < 0) {
        snprintf(r->error, sizeof(r->error), "out of memory");
        keys_free(&k);
        return NULL;
    }
    uint64_t rng = ((uint64_t)c->index << 32) ^ t->index ^ cb_now_ns();
    uint64_t seq = 0;
    uint64_t first = cb_now_ns(), last = first;
    while ((last = cb_now_ns()) < t->end_ns) {
        keys_fill(&k, o, c->tag, t->op, c->index, t->index, &seq, &rng);
        crp_rpc_req req;
        crp_rpc_resp resp;
        first_request(c, t->op, &k, &req);
        uint64_t t0 = cb_now_ns();
        int rc = crc_master_call(c->m, &req, &resp, MB_CALL_MS);
        r->rpcs++;
        size_t n_ended = 0;
        uint64_t bad = k.n;
        if (rc == 0) {
            bad = check_first(t->op, &resp, &k, &n_ended);
            crp_rpc_resp_clear(&resp);
        } else if (r->error[0] == '\0') {
            snprintf(r->error, sizeof(r->error), "%s: %s", op_names[t->op],
                     cr_last_error_message());
        }
        if (n_ended > 0) {
            end_request(c, t->op, &k, n_ended, &req);
            rc = crc_master_call(c->m, &req, &resp, MB_CALL_MS);
            r->rpcs++;
            if (rc == 0) {
                bad += check_end(t->op, &resp, n_ended);
                crp_rpc_resp_clear(&resp);
            } else {
                bad += n_ended;
            }
        }
        uint64_t t1 = cb_now_ns();
        cb_hist_add(&r->hist, t1 - t0, 1);
        r->ops++;
        r->keys += k.n;
        r->errors += bad;
    }
    r->seconds = (double)(last - first) / 1e9;
    keys_free(&k);
    return NULL;
}

static int lib_run(mb_conn *c, mb_op op, mb_result *out)
{
    const mb_opts *o = c->o;
    lib_thread *ts = calloc(o->threads, sizeof(*ts));
    pthread_t *tids = calloc(o->threads, sizeof(*tids));
    if (ts == NULL || tids == NULL) {
        free(ts);
        free(tids);
        snprintf(out->error, sizeof(out->error), "out of memory");
        return -1;
    }
    uint64_t end = cb_now_ns() + (uint64_t)(o->duration * 1e9);
    unsigned started = 0;
    for (; started < o->threads; started++) {
        ts[started] = (lib_thread){.c = c, .index = started, .op = op, .end_ns = end};
        if (pthread_create(&tids[started], NULL, lib_thread_main, &ts[started]) != 0)
            break;
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    for (unsigned i = 0; i < started; i++) {
        mb_result *r = &ts[i].r;
        out->ops += r->ops;
        out->keys += r->keys;
        out->rpcs += r->rpcs;
        out->errors += r->errors;
        if (r->seconds > out->seconds)
            out->seconds = r->seconds;
        cb_hist_merge(&out->hist, &r->hist);
        if (out->error[0] == '\0' && r->error[0] != '\0')
            snprintf(out->error, sizeof(out->error), "%s", r->error);
    }
    if (started < o->threads)
        snprintf(out->error, sizeof(out->error), "cannot start thread %u", started);
    free(ts);
    free(tids);
    return started < o->threads ? -1 : 0;
}

/* --- raw client: one thread, its own socket, a window of ops ---------------------------- */

typedef struct raw_slot {
    uint64_t t0;  /* when the op's first request was sent */
    uint64_t id;  /* request id of the RPC this slot waits for */
    bool is_end;  /* waiting for the end request of a put */
    size_t n_end; /* keys in that end request */
    uint64_t bad; /* failures so far */
    mb_keys keys; /* the op's keys */
} raw_slot;

typedef struct raw_state {
    mb_conn *c;
    mb_op op;
    crp_buf out;    /* encoded frames not yet written */
    crp_reader in;  /* reassembles the replies */
    uint64_t *rng;  /* keys of ops started from a reply */
    mb_result *res; /* what the run counts */
    uint64_t end_ns, last_ns;
    raw_slot *slots; /* ring, in send order (the master answers in order) */
    size_t cap, head, count;
} raw_state;

static int raw_queue(raw_state *s, const crp_rpc_req *req, uint64_t *id_out)
{
    crp_buf body = {0};
    int rc = crp_rpc_req_encode(req, &body);
    if (rc < 0)
        return rc;
    size_t need = s->out.len + CRP_HEADER_SIZE + body.len;
    if (need > s->out.cap) {
        size_t ncap = s->out.cap ? s->out.cap : 65536;
        while (ncap < need)
            ncap *= 2;
        uint8_t *nb = realloc(s->out.data, ncap);
        if (nb == NULL) {
            crp_buf_free(&body);
            return CR_ERR_NO_MEMORY;
        }
        s->out.data = nb;
        s->out.cap = ncap;
    }
    uint64_t id = s->c->next_id++;
    crp_header h = {.version = CRP_VERSION,
                    .type = CRP_RPC_REQ,
                    .body_len = (uint32_t)body.len,
                    .request_id = id};
    crp_header_encode(&h, s->out.data + s->out.len);
    memcpy(s->out.data + s->out.len + CRP_HEADER_SIZE, body.data, body.len);
    s->out.len = need;
    crp_buf_free(&body);
    *id_out = id;
    return 0;
}

static int raw_flush(raw_state *s)
{
    if (s->out.len == 0)
        return 0;
    int rc = crb_write_full(s->c->fd, s->out.data, s->out.len, cb_now_ns() + 10000000000ull);
    s->out.len = 0;
    return rc;
}

/* Start one op in the ring's next slot. */
static int raw_start_op(raw_state *s, uint64_t *rng, mb_result *r)
{
    raw_slot *sl = &s->slots[(s->head + s->count) % s->cap];
    keys_fill(&sl->keys, s->c->o, s->c->tag, s->op, s->c->index, 0, &s->c->seq, rng);
    crp_rpc_req req;
    first_request(s->c, s->op, &sl->keys, &req);
    sl->t0 = cb_now_ns();
    sl->is_end = false;
    sl->bad = 0;
    int rc = raw_queue(s, &req, &sl->id);
    if (rc < 0)
        return rc;
    s->count++;
    r->rpcs++;
    return 0;
}

/* Handle the reply frame for the oldest slot. */
static int raw_reply(raw_state *s, const crp_header *h, const uint8_t *body, mb_result *r)
{
    raw_slot *sl = &s->slots[s->head];
    if (s->count == 0 || h->request_id != sl->id)
        return CR_ERR_MALFORMED_FRAME; /* replies come in request order */
    crp_rpc_resp resp;
    bool ok = h->type == CRP_RPC_RESP && crp_rpc_resp_decode(body, h->body_len, &resp) == 0;
    if (!ok)
        memset(&resp, 0, sizeof(resp));
    if (!sl->is_end) {
        size_t n_ended = 0;
        sl->bad += ok ? check_first(s->op, &resp, &sl->keys, &n_ended) : sl->keys.n;
        if (!ok && r->error[0] == '\0')
            snprintf(r->error, sizeof(r->error), "%s: %s frame, status %d", op_names[s->op],
                     crp_type_name(h->type), h->status);
        if (n_ended > 0) {
            /* The put's end goes out now; the slot moves to the tail, keeping the order. */
            crp_rpc_req req;
            end_request(s->c, s->op, &sl->keys, n_ended, &req);
            raw_slot moved = *sl;
            moved.is_end = true;
            moved.n_end = n_ended;
            int rc = raw_queue(s, &req, &moved.id);
            crp_rpc_resp_clear(&resp);
            if (rc < 0)
                return rc;
            r->rpcs++;
            /* Swap the slot storage: the tail slot's keys buffer goes to head. */
            raw_slot *tail = &s->slots[(s->head + s->count) % s->cap];
            mb_keys spare = tail->keys;
            *tail = moved;
            sl->keys = spare;
            s->head = (s->head + 1) % s->cap;
            return 0; /* count unchanged: one left the head, one joined the tail */
        }
    } else {
        sl->bad += ok ? check_end(s->op, &resp, sl->n_end) : sl->n_end;
    }
    if (ok)
        crp_rpc_resp_clear(&resp);
    cb_hist_add(&r->hist, cb_now_ns() - sl->t0, 1);
    r->ops++;
    r->keys += sl->keys.n;
    r->errors += sl->bad;
    s->head = (s->head + 1) % s->cap;
    s->count--;
    return 1; /* an op completed */
}

/* crp_reader: one reply; refill the window at once (sent with the batch). */
static int raw_on_frame(void *ctx, const crp_header *h, const uint8_t *body)
{
    raw_state *s = ctx;
    int rc = raw_reply(s, h, body, s->res);
    if (rc <= 0)
        return rc;
    s->last_ns = cb_now_ns();
    if (s->last_ns < s->end_ns && s->count < s->c->o->depth)
        return raw_start_op(s, s->rng, s->res);
    return 0;
}

static const crp_reader_ops raw_reader_ops = {.on_frame = raw_on_frame};

static int raw_run(mb_conn *c, mb_op op, mb_result *r)
{
    const mb_opts *o = c->o;
    uint64_t rng = ((uint64_t)c->index << 32) ^ cb_now_ns();
    raw_state s = {.c = c, .op = op, .cap = o->depth + 1, .rng = &rng, .res = r};
    crp_reader_init(&s.in, CRP_MAX_BODY);
    s.slots = calloc(s.cap, sizeof(*s.slots));
    int rc = s.slots == NULL ? CR_ERR_NO_MEMORY : 0;
    for (size_t i = 0; rc == 0 && i < s.cap; i++)
        if (keys_init(&s.slots[i].keys, o->batch, o->value_size) < 0)
            rc = CR_ERR_NO_MEMORY;
    uint64_t first = cb_now_ns();
    s.end_ns = first + (uint64_t)(o->duration * 1e9);
    s.last_ns = first;
    while (rc == 0) {
        bool stopping = cb_now_ns() >= s.end_ns;
        while (!stopping && s.count < o->depth && rc == 0)
            rc = raw_start_op(&s, &rng, r);
        if (rc == 0)
            rc = raw_flush(&s);
        if (rc < 0 || (stopping && s.count == 0))
            break;
        struct pollfd pf = {.fd = c->fd, .events = POLLIN};
        int pr = poll(&pf, 1, 10000);
        if (pr == 0)
            rc = crb_error(CR_ERR_TIMEOUT, "no reply from the master in 10 s");
        else if (pr > 0)
            rc = crp_reader_read(&s.in, c->fd, &raw_reader_ops, &s);
        else if (errno != EINTR)
            rc = crb_error(CR_ERR_CONNECTION, "poll: %s", strerror(errno));
    }
    if (rc < 0 && r->error[0] == '\0')
        snprintf(r->error, sizeof(r->error), "%s: %s", op_names[op], cr_last_error_message());
    r->seconds = (double)(s.last_ns - first) / 1e9;
    for (size_t i = 0; s.slots != NULL && i < s.cap; i++)
        keys_free(&s.slots[i].keys);
    free(s.slots);
    crp_reader_fini(&s.in);
    crp_buf_free(&s.out);
    return rc < 0 ? -1 : 0;
}

/* One synchronous request on a raw connection that has nothing in flight. */
static int raw_sync_call(mb_conn *c, const crp_rpc_req *req)
{
    raw_state s = {.c = c};
    uint64_t id;
    int rc = raw_queue(&s, req, &id);
    if (rc == 0)
        rc = raw_flush(&s);
    crp_buf_free(&s.out);
    crp_header h;
    crp_buf body = {0};
    if (rc == 0)
        rc = crp_read_frame(c->fd, CRP_MAX_BODY, cb_now_ns() + (uint64_t)MB_CALL_MS * 1000000ull,
                            &h, &body);
    crp_rpc_resp resp;
    if (rc == 0 && h.type == CRP_RPC_RESP && h.request_id == id &&
        crp_rpc_resp_decode(body.data, h.body_len, &resp) == 0) {
        rc = resp.status;
        crp_rpc_resp_clear(&resp);
    } else if (rc == 0) {
        rc = CR_RPC_FAIL;
    }
    crp_buf_free(&body);
    return rc;
}

/*
 * Open a connection and mount the connection's segment: through the library
 * (lib), or over our own socket after SERVICE_READY (raw; the library is
 * not involved at all then).
 */
static int conn_open(mb_conn *c)
{
    c->fd = -1;
    c->next_id = 1;
    char name[64];
    snprintf(name, sizeof(name), "bench-%s-%u", c->tag, c->index);
    crp_rpc_req mount = {.op = CRP_RPC_MOUNT_SEGMENT};
    mount.u.mount = (crp_rpc_mount_req){
        c->cid, {name, MB_SEG_BASE + (uint64_t)c->index * MB_SEG_SIZE, MB_SEG_SIZE, 1}};
    if (!c->o->raw || c->index == c->o->conns) { /* the setup connection always uses lib */
        int rc = crc_master_connect(c->addr, c->cid, MB_START_MS, &c->m);
        if (rc < 0)
            return rc;
        crp_rpc_resp resp;
        rc = crc_master_call(c->m, &mount, &resp, MB_CALL_MS);
        if (rc == 0) {
            rc = resp.status;
            crp_rpc_resp_clear(&resp);
        }
        return rc;
    }
    char host[CRB_HOST_MAX];
    uint16_t port;
    if (crb_parse_hostport(c->addr, host, &port) < 0)
        return CR_INVALID_PARAMS;
    c->fd = crb_connect(host, port, MB_START_MS);
    if (c->fd < 0)
        return c->fd;
    crp_rpc_req hello = {.op = CRP_RPC_SERVICE_READY};
    hello.u.hello = (crp_rpc_hello_req){.version = CRP_RPC_VERSION,
                                        .caps = CRP_RPC_CAPS_DEFINED,
                                        .client_id = c->cid,
                                        .software = "crescent-bench"};
    int rc = raw_sync_call(c, &hello);
    return rc < 0 ? rc : raw_sync_call(c, &mount);
}

static void conn_close(mb_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    crc_master_close(c->m);
    c->m = NULL;
}

static int conn_run(mb_conn *c, mb_op op, mb_result *r)
{
    memset(r, 0, sizeof(*r));
    return c->o->raw ? raw_run(c, op, r) : lib_run(c, op, r);
}

/*
 * Heartbeat: each second, a PING for every connection's client id, each on
 * a heartbeat connection of that client (a master connection speaks for one
 * client). Without it the master would expire the clients (--client_ttl,
 * 10 s) in a long run and unmount their segments.
 */
typedef struct heartbeat {
    crc_master **via; /* one per client */
    mb_conn *conns;
    size_t n;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, running;
} heartbeat;

static void *heartbeat_main(void *arg)
{
    heartbeat *hb = arg;
    pthread_mutex_lock(&hb->mu);
    while (!hb->stop) {
        pthread_mutex_unlock(&hb->mu);
        for (size_t i = 0; i < hb->n; i++) {
            crp_rpc_req req = {.op = CRP_RPC_PING};
            req.u.client.client_id = hb->conns[i].cid;
            crp_rpc_resp resp;
            if (hb->via[i] != NULL && crc_master_call(hb->via[i], &req, &resp, MB_CALL_MS) == 0)
                crp_rpc_resp_clear(&resp);
        }
        pthread_mutex_lock(&hb->mu);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += 1;
        while (!hb->stop && pthread_cond_timedwait(&hb->cv, &hb->mu, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&hb->mu);
    return NULL;
}

static void heartbeat_start(heartbeat *hb, mb_conn *conns, size_t n)
{
    *hb = (heartbeat){.conns = conns, .n = n};
    hb->via = calloc(n, sizeof(*hb->via));
    for (size_t i = 0; hb->via != NULL && i < n; i++)
        if (crc_master_connect(conns[i].addr, conns[i].cid, MB_START_MS, &hb->via[i]) < 0)
            hb->via[i] = NULL; /* that client may expire in a long run */
    pthread_mutex_init(&hb->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&hb->cv, &ca);
    pthread_condattr_destroy(&ca);
    hb->running = pthread_create(&hb->tid, NULL, heartbeat_main, hb) == 0;
}

static void heartbeat_stop(heartbeat *hb)
{
    if (hb->running) {
        pthread_mutex_lock(&hb->mu);
        hb->stop = true;
        pthread_cond_signal(&hb->cv);
        pthread_mutex_unlock(&hb->mu);
        pthread_join(hb->tid, NULL);
        hb->running = false;
    }
    for (size_t i = 0; hb->via != NULL && i < hb->n; i++)
        crc_master_close(hb->via[i]);
    free(hb->via);
    hb->via = NULL;
    pthread_mutex_destroy(&hb->mu);
    pthread_cond_destroy(&hb->cv);
}

/* Prefill o->keys keys through c (batch puts, not timed). */
static int prefill(mb_conn *c, char *err, size_t err_len)
{
    const mb_opts *o = c->o;
    mb_keys k;
    if (keys_init(&k, MB_MAX_BATCH, o->value_size) < 0) {
        keys_free(&k);
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    int rc = 0;
    for (uint64_t i = 0; rc == 0 && i < o->keys;) {
        k.n = o->keys - i < 1024 ? (size_t)(o->keys - i) : 1024;
        for (size_t j = 0; j < k.n; j++)
            pre_key(k.buf[j], c->tag, i + j);
        i += k.n;
        crp_rpc_req req;
        crp_rpc_resp resp;
        first_request(c, MB_BATCH_PUT, &k, &req);
        rc = crc_master_call(c->m, &req, &resp, MB_CALL_MS);
        if (rc < 0)
            break;
        size_t n_ended = 0;
        uint64_t bad = check_first(MB_BATCH_PUT, &resp, &k, &n_ended);
        /* A rerun against an external master finds its keys: fine. */
        for (size_t j = 0; resp.status == 0 && j < resp.u.batch_alloc.n; j++)
            if (resp.u.batch_alloc.results[j].status == CR_OBJECT_ALREADY_EXISTS)
                bad--;
        rc = resp.status;
        crp_rpc_resp_clear(&resp);
        if (rc == 0 && bad > 0)
            rc = CR_NO_AVAILABLE_HANDLE;
        if (rc == 0 && n_ended > 0) {
            end_request(c, MB_BATCH_PUT, &k, n_ended, &req);
            rc = crc_master_call(c->m, &req, &resp, MB_CALL_MS);
            if (rc == 0) {
                rc = check_end(MB_BATCH_PUT, &resp, n_ended) ? CR_INTERNAL_ERROR : 0;
                crp_rpc_resp_clear(&resp);
            }
        }
    }
    keys_free(&k);
    if (rc < 0)
        snprintf(err, err_len, "prefilling %" PRIu32 " keys: %s (%s)", o->keys, cr_status_name(rc),
                 cr_last_error_message());
    return rc < 0 ? -1 : 0;
}

/* --- workers: threads or processes -------------------------------------------------------- */

typedef struct thread_job {
    mb_conn *c;
    mb_op op;
    mb_result r;
} thread_job;

static void *conn_thread_main(void *arg)
{
    thread_job *j = arg;
    conn_run(j->c, j->op, &j->r);
    return NULL;
}

typedef struct proc_worker {
    pid_t pid;
    int cmd_fd; /* we write op bytes */
    int res_fd; /* we read mb_result */
} proc_worker;

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n, int timeout_ms)
{
    uint8_t *b = p;
    uint64_t deadline = cb_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (n > 0) {
        uint64_t now = cb_now_ns();
        if (now >= deadline)
            return -1;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int pr = poll(&pf, 1, (int)((deadline - now) / 1000000ull) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return -1;
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* A forked worker: open the connection, report, then run ops until EOF. */
static void proc_worker_main(mb_conn *c, int cmd_fd, int res_fd)
{
    mb_result *r = calloc(1, sizeof(*r));
    if (r == NULL)
        _exit(1);
    int rc = conn_open(c);
    if (rc < 0)
        snprintf(r->error, sizeof(r->error), "connection %u: %s", c->index,
                 cr_last_error_message());
    if (write_all(res_fd, r, sizeof(*r)) < 0 || rc < 0)
        _exit(1);
    uint8_t op;
    while (read_all(cmd_fd, &op, 1, INT_MAX) == 0 && op < MB_N_OPS) {
        conn_run(c, (mb_op)op, r);
        if (write_all(res_fd, r, sizeof(*r)) < 0)
            break;
    }
    conn_close(c);
    free(r);
    _exit(0);
}

/* --- the master process ------------------------------------------------------------------------
 */

typedef struct master_proc {
    ct_master m; /* tools/common/master_proc.h */
    char addr[CRB_HOST_MAX + 8];
} master_proc;

static int master_spawn(const mb_opts *o, master_proc *mp, char *err, size_t err_len)
{
    char path_buf[PATH_MAX + 32];
    const char *bin =
        o->master_bin ? o->master_bin : ct_default_master_bin(path_buf, sizeof(path_buf));
    char threads[32];
    snprintf(threads, sizeof(threads), "--rpc_thread_num=%" PRIu32, o->master_threads);
    const char *args[] = {threads, NULL};
    ct_master_opts mo = {.bin = bin, .args = args, .ready_ms = MB_START_MS};
    if (ct_master_start(&mp->m, &mo) < 0) {
        snprintf(err, err_len, "%.200s did not start", bin);
        return -1;
    }
    snprintf(mp->addr, sizeof(mp->addr), "%s", mp->m.addr);
    return 0;
}

/* SIGTERM and reap; 0 if it exited 0 within 10 s. */
static int master_stop(master_proc *mp, char *err, size_t err_len)
{
    if (!ct_master_running(&mp->m))
        return 0;
    int st = ct_master_stop(&mp->m, 10000);
    if (st != 0) {
        snprintf(err, err_len, "the master did not exit 0 within 10 s of SIGTERM (%d)", st);
        return -1;
    }
    return 0;
}

/* --- command line
 * ---------------------------------------------------------------------------------- */

static void usage(FILE *to)
{
    fprintf(
        to,
        "usage: " CB_PROG " master [flags]\n\n"
        "Metadata operations per second of crescent-master (exist, put start+end, get\n"
        "replica list; single and batched) from several client connections.\n\n"
        "  --master HOST:PORT     use a running master (default: spawn one)\n"
        "  --master-bin PATH      crescent-master to spawn (default: ../master/crescent-master\n"
        "                         next to this binary's folder, else on PATH)\n"
        "  --master-threads N     --rpc_thread_num of a spawned master (default 2)\n"
        "  --client lib|raw       lib: the store's master client, blocking calls from\n"
        "                         --threads per connection; raw: one thread per connection\n"
        "                         keeping --depth ops in flight (default lib)\n"
        "  --connections N        client connections (default 4)\n"
        "  --threads N            lib: caller threads per connection (default 16)\n"
        "  --depth N              raw: ops in flight per connection (default 16)\n"
        "  --processes            one process per connection instead of one thread\n"
        "  --batch N              keys per batch op (default 128)\n"
        "  --duration SECONDS     per operation (default 2)\n"
        "  --ops LIST             exist,put,get,batch_exist,batch_put,batch_get (default all)\n"
        "  --keys N               prefilled keys read by exist/get (default 100000)\n"
        "  --value-size SIZE      value size of puts (default 64K)\n"
        "  --replicas N           replica_num of puts (default 1)\n"
        "  --json                 JSON lines on stdout instead of the table\n"
        "Exit status: 0 ok, 1 a request failed or the master misbehaved, 2 bad usage.\n");
}

static int parse_ops(const char *text, unsigned *out)
{
    *out = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", text);
    for (char *s = NULL, *t = strtok_r(buf, ",", &s); t != NULL; t = strtok_r(NULL, ",", &s)) {
        int found = -1;
        for (int i = 0; i < MB_N_OPS; i++)
            if (strcmp(t, op_names[i]) == 0)
                found = i;
        if (found < 0)
            return -1;
        *out |= 1u << found;
    }
    return *out != 0 ? 0 : -1;
}

/* 0 ok, CB_EXIT_USAGE bad, -1 help printed. */
/* The flags whose values need more than a range check (ct_parse_options). */
static int apply_value(void *ctx, const char *name, const char *v)
{
    mb_opts *o = ctx;
    if (strcmp(name, "--client") == 0) {
        if (strcmp(v, "lib") != 0 && strcmp(v, "raw") != 0)
            return cb_bad_value("master", name, v, "lib or raw");
        o->client = v;
    } else if (strcmp(name, "--duration") == 0) {
        if (cb_parse_seconds(v, &o->duration) < 0)
            return cb_bad_value("master", name, v, "a positive number of seconds");
    } else if (strcmp(name, "--ops") == 0) {
        if (parse_ops(v, &o->ops) < 0)
            return cb_bad_value("master", name, v,
                                "a list of exist,put,get,batch_exist,batch_put,batch_get");
    } else if (strcmp(name, "--value-size") == 0) {
        if (cb_parse_size(v, &o->value_size) < 0 || o->value_size > CB_GIB)
            return cb_bad_value("master", name, v, "a size up to 1G");
    }
    return 0;
}

static int parse_args(int argc, char **argv, mb_opts *o)
{
    *o = (mb_opts){.master_threads = 2,
                   .client = "lib",
                   .conns = 4,
                   .threads = 16,
                   .depth = 16,
                   .batch = 128,
                   .keys = 100000,
                   .replicas = 1,
                   .value_size = 64 * CB_KIB,
                   .duration = 2.0,
                   .ops = (1u << MB_N_OPS) - 1};
    const ct_option table[] = {
        CT_SWITCH("--json", &o->json),
        CT_SWITCH("--processes", &o->processes),
        CT_STRING("--master", &o->master),
        CT_STRING("--master-bin", &o->master_bin),
        CT_U32("--master-threads", &o->master_threads, 1, 64),
        CT_APPLY("--client"),
        CT_U32("--connections", &o->conns, 1, MB_MAX_CONNS),
        CT_U32("--threads", &o->threads, 1, MB_MAX_THREADS),
        CT_U32("--depth", &o->depth, 1, MB_MAX_DEPTH),
        CT_U32("--batch", &o->batch, 1, MB_MAX_BATCH),
        CT_APPLY("--duration"),
        CT_APPLY("--ops"),
        CT_U32("--keys", &o->keys, 1, 100000000),
        CT_APPLY("--value-size"),
        CT_U32("--replicas", &o->replicas, 1, 8),
    };
    int pr = ct_parse_options(argc, argv, table, sizeof(table) / sizeof(table[0]), apply_value, o,
                              CB_PROG " master");
    if (pr == CT_OPTS_HELP) {
        usage(stdout);
        return -1;
    }
    if (pr < 0)
        return CB_EXIT_USAGE;
    o->raw = strcmp(o->client, "raw") == 0;
    return 0;
}

/* --- reporting
 * --------------------------------------------------------------------------------------- */

static void report(const mb_opts *o, mb_op op, const mb_result *total, double ops_s)
{
    double keys_s = total->ops ? ops_s * (double)total->keys / (double)total->ops : 0;
    double rpcs_s = total->ops ? ops_s * (double)total->rpcs / (double)total->ops : 0;
    double p50 = (double)cb_hist_quantile(&total->hist, 0.50) / 1e3;
    double p99 = (double)cb_hist_quantile(&total->hist, 0.99) / 1e3;
    if (o->json) {
        printf("{\"type\":\"master\",\"op\":\"%s\",\"client\":\"%s\",\"connections\":%" PRIu32
               ",\"threads\":%" PRIu32 ",\"depth\":%" PRIu32 ",\"processes\":%s,\"batch\":%" PRIu32
               ",\"ops\":%" PRIu64 ",\"keys\":%" PRIu64 ",\"rpcs\":%" PRIu64
               ",\"ops_per_s\":%.1f,\"keys_per_s\":%.1f,\"rpcs_per_s\":%.1f,\"p50_us\":%.1f,"
               "\"p99_us\":%.1f,\"errors\":%" PRIu64 "}\n",
               op_names[op], o->client, o->conns, o->raw ? 1 : o->threads,
               o->raw ? o->depth : o->threads, o->processes ? "true" : "false",
               op_is_batch(op) ? o->batch : 1, total->ops, total->keys, total->rpcs, ops_s, keys_s,
               rpcs_s, p50, p99, total->errors);
    } else {
        printf("%-12s %11.0f %11.0f %11.0f %9.1f %9.1f %7" PRIu64 "\n", op_names[op], ops_s, keys_s,
               rpcs_s, p50, p99, total->errors);
    }
    fflush(stdout);
}

/* --- main
 * -----------------------------------------------------------------------------------------------
 */

int cb_master_main(int argc, char **argv)
{
    mb_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc != 0)
        return prc < 0 ? CB_EXIT_OK : prc;
    signal(SIGPIPE, SIG_IGN);

    char err[512] = "";
    int exit_code = CB_EXIT_OK;
    heartbeat hb = {.running = false};
    bool hb_started = false;
    master_proc mp;
    memset(&mp, 0, sizeof(mp));
    ct_proc_init(&mp.m.p);
    const char *addr = o.master;
    if (addr == NULL) {
        if (master_spawn(&o, &mp, err, sizeof(err)) < 0) {
            fprintf(stderr, CB_PROG " master: %s\n", err);
            return CB_EXIT_FAIL;
        }
        addr = mp.addr;
    }
    char tag[16];
    uint32_t tag_bits;
    crb_random_bytes(&tag_bits, sizeof(tag_bits));
    snprintf(tag, sizeof(tag), "%08" PRIx32, tag_bits);

    mb_conn *conns = calloc(o.conns + 1u, sizeof(*conns)); /* [o.conns] is the setup one */
    proc_worker *procs = calloc(o.conns, sizeof(*procs));
    thread_job *jobs = calloc(o.conns, sizeof(*jobs));
    pthread_t *tids = calloc(o.conns, sizeof(*tids));
    mb_result *total = calloc(1, sizeof(*total)), *one = calloc(1, sizeof(*one));
    if (conns == NULL || procs == NULL || jobs == NULL || tids == NULL || total == NULL ||
        one == NULL) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    for (unsigned i = 0; i <= o.conns; i++) {
        conns[i] = (mb_conn){.o = &o, .index = i, .addr = addr, .tag = tag, .fd = -1};
        crb_random_bytes(&conns[i].cid, sizeof(conns[i].cid));
        conns[i].cid.lo |= 1; /* never all-zero */
    }

    /* Workers: processes are forked before this process has any thread. */
    unsigned opened = 0;
    for (; opened < o.conns; opened++) {
        if (!o.processes) {
            if (conn_open(&conns[opened]) < 0) {
                snprintf(err, sizeof(err), "connection %u to %s: %s", opened, addr,
                         cr_last_error_message());
                goto fail;
            }
            continue;
        }
        int cmd[2], res[2];
        if (pipe2(cmd, O_CLOEXEC) < 0 || pipe2(res, O_CLOEXEC) < 0) {
            snprintf(err, sizeof(err), "pipe: %s", strerror(errno));
            goto fail;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            close(cmd[1]);
            close(res[0]);
            for (unsigned j = 0; j < opened; j++) { /* else earlier workers never see EOF */
                close(procs[j].cmd_fd);
                close(procs[j].res_fd);
            }
            proc_worker_main(&conns[opened], cmd[0], res[1]);
        }
        close(cmd[0]);
        close(res[1]);
        procs[opened] = (proc_worker){pid, cmd[1], res[0]};
        if (pid < 0) {
            snprintf(err, sizeof(err), "fork: %s", strerror(errno));
            goto fail;
        }
    }
    for (unsigned i = 0; o.processes && i < o.conns; i++) {
        if (read_all(procs[i].res_fd, one, sizeof(*one), MB_START_MS) < 0 ||
            one->error[0] != '\0') {
            snprintf(err, sizeof(err), "worker process %u: %s", i,
                     one->error[0] ? one->error : "did not start");
            goto fail;
        }
    }
    mb_conn *setup = &conns[o.conns];
    setup->index = o.conns;
    if (conn_open(setup) < 0) {
        snprintf(err, sizeof(err), "setup connection to %s: %s", addr, cr_last_error_message());
        goto fail;
    }
    heartbeat_start(&hb, conns, o.conns + 1u);
    hb_started = true;
    if ((o.ops &
         ((1u << MB_EXIST) | (1u << MB_GET) | (1u << MB_BATCH_EXIST) | (1u << MB_BATCH_GET))) &&
        prefill(setup, err, sizeof(err)) < 0)
        goto fail;

    if (!o.json) {
        char vs[32];
        printf("master %s (%s); client %s: %" PRIu32 " %s x %s%" PRIu32 "; batch %" PRIu32
               ", value %s, replicas %" PRIu32 ", %.1f s per op, %" PRIu32 " prefilled keys\n",
               addr, o.master ? "external" : "spawned", o.client, o.conns,
               o.processes ? "processes" : "connections", o.raw ? "depth " : "threads ",
               o.raw ? o.depth : o.threads, o.batch, cb_format_size(o.value_size, vs, sizeof(vs)),
               o.replicas, o.duration, o.keys);
        printf("%-12s %11s %11s %11s %9s %9s %7s\n", "op", "ops/s", "keys/s", "rpcs/s", "p50 us",
               "p99 us", "errors");
    }
    for (int op = 0; op < MB_N_OPS; op++) {
        if (!(o.ops & (1u << op)))
            continue;
        memset(total, 0, sizeof(*total));
        double ops_s = 0;
        if (o.processes) {
            uint8_t b = (uint8_t)op;
            for (unsigned i = 0; i < o.conns; i++)
                if (write_all(procs[i].cmd_fd, &b, 1) < 0) {
                    snprintf(err, sizeof(err), "worker process %u is gone", i);
                    goto fail;
                }
        } else {
            for (unsigned i = 0; i < o.conns; i++) {
                jobs[i] = (thread_job){.c = &conns[i], .op = (mb_op)op};
                if (pthread_create(&tids[i], NULL, conn_thread_main, &jobs[i]) != 0) {
                    for (unsigned j = 0; j < i; j++)
                        pthread_join(tids[j], NULL);
                    snprintf(err, sizeof(err), "cannot start a connection thread");
                    goto fail;
                }
            }
        }
        for (unsigned i = 0; i < o.conns; i++) {
            mb_result *r = one;
            if (o.processes) {
                int to = (int)(o.duration * 1000) + MB_CALL_MS * 2;
                if (read_all(procs[i].res_fd, one, sizeof(*one), to) < 0) {
                    snprintf(err, sizeof(err), "worker process %u did not report", i);
                    goto fail;
                }
            } else {
                pthread_join(tids[i], NULL);
                r = &jobs[i].r;
            }
            total->ops += r->ops;
            total->keys += r->keys;
            total->rpcs += r->rpcs;
            total->errors += r->errors;
            cb_hist_merge(&total->hist, &r->hist);
            if (r->seconds > 0)
                ops_s += (double)r->ops / r->seconds;
            if (r->error[0] != '\0' && total->error[0] == '\0')
                snprintf(total->error, sizeof(total->error), "%s", r->error);
        }
        report(&o, (mb_op)op, total, ops_s);
        if (total->errors > 0 || total->error[0] != '\0') {
            fprintf(stderr, CB_PROG " master: %s: %" PRIu64 " failed keys%s%s\n", op_names[op],
                    total->errors, total->error[0] ? "; first error: " : "", total->error);
            exit_code = CB_EXIT_FAIL;
        }
    }
    if (o.master != NULL) {
        /* Leave an external master as we found it. */
        char re[32];
        snprintf(re, sizeof(re), "^%s:", tag);
        crp_rpc_req req = {.op = CRP_RPC_REMOVE_BY_REGEX};
        req.u.regex = (crp_rpc_regex_req){re, true};
        crp_rpc_resp resp;
        if (crc_master_call(setup->m, &req, &resp, MB_CALL_MS) == 0)
            crp_rpc_resp_clear(&resp);
    }
    goto done;

fail:
    fprintf(stderr, CB_PROG " master: %s\n", err);
    exit_code = CB_EXIT_FAIL;
done:
    for (unsigned i = 0; procs != NULL && i < o.conns; i++) {
        if (procs[i].pid > 0) {
            close(procs[i].cmd_fd); /* EOF: the worker closes and exits */
            close(procs[i].res_fd);
            int st = 0;
            waitpid(procs[i].pid, &st, 0);
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                exit_code = CB_EXIT_FAIL;
        }
    }
    if (hb_started)
        heartbeat_stop(&hb);
    for (unsigned i = 0; conns != NULL && i <= o.conns; i++)
        conn_close(&conns[i]);
    if (master_stop(&mp, err, sizeof(err)) < 0) {
        fprintf(stderr, CB_PROG " master: %s\n", err);
        exit_code = CB_EXIT_FAIL;
    }
    free(conns);
    free(procs);
    free(jobs);
    free(tids);
    free(total);
    free(one);
    return exit_code;
}
