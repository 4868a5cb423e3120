/*
 * store_bench.c - "crescent-bench store": put/get throughput and latency of
 * the store client (include/crescent/store.h) between processes on one
 * host, next to the shared-memory transport measured between the same
 * processes in the same run.
 *
 * Processes (all on 127.0.0.1, P2PHANDSHAKE):
 *   orchestrator (default role) spawns a crescent-master (unless --master
 *       names a running one; path from --master-bin, else
 *       ../master/crescent-master next to this binary's folder, else PATH)
 *       and --clients client processes ("store --role client", fork + exec
 *       of /proc/self/exe), sends each case to the drivers, merges their
 *       results, prints one row per case, and stops everything at the end
 *       (clients: stdin EOF; master: SIGTERM, exit status checked).
 *   client sets up one cr_store (segment --segment-size, local buffer
 *       --buffer-size), registers a zero-copy region (cr_store_register_buffer)
 *       and a remote-accessible shm target region on the store's engine,
 *       prints "READY name=SEG target=0xADDR len=N", and runs the cases it is
 *       sent (one line each) until stdin closes.
 * The first --drivers clients drive; driver d works against client
 * (d + 1) % clients: its puts place the single replica in that client's
 * segment (preferred_segments), so every byte crosses a process boundary.
 *
 * Cases, per value size: the shm baseline (engine WRITE and READ of one
 * value, cr_engine_transfer_sync, and of --batch values,
 * cr_engine_transfer_sync_batch, from the driver's region to the peer's
 * target region: the store's own transport without the store), then for
 * each mode (zcopy: put_from/get_into and batch_put_from/batch_get_into on
 * the registered region; copy: put/get and batch_put/batch_get) and shape
 * (single, batch): a put case writing fresh keys, a get case reading those
 * keys back (cycling), and a clean-up (remove_all, untimed).
 *
 * Every case runs for --duration seconds. A put case writes fresh keys until
 * they fill 80 % of the peer's segment (so the master never evicts), then
 * removes them (one batch call, no lease holds them, the space is free at
 * once) and writes the same names again; the get case reads the last round.
 * Before the first case a warm-up fills every peer segment once and removes
 * it, so timed puts write into committed pages, as in a long-running cache.
 * After each put/get pair everything is removed and the bench waits out the
 * read lease (--lease-ms) so the next pair finds its space free. Threads
 * (--threads per driver) each keep one call in flight.
 *
 * Reported: ops/s = keys per second; GB/s = 10^9 value bytes per second of
 * case wall time; latency p50/p99/p999 per call (a batch call covers --batch
 * keys) from the log-linear histogram of util.c; via = the driver engine's
 * byte counters over the case; x shm = GB/s over the shm baseline of the
 * same size, direction (put~write, get~read) and shape. --verify fills each
 * value with a per-key pattern before its put and checks every byte of every
 * get (inside the timed loop: a correctness run, not a speed run).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "master_proc.h"
#include "options.h"
#include "tool_util.h"
#include "bench.h"
#include "crescent/store.h"
#include "store_async.h"

#define MAX_SIZES      16
#define MAX_CLIENTS    64
#define MAX_THREADS    256
#define LINE_LEN       (96 * 1024)
#define CHILD_TIMEOUT  30000 /* ms: a client's READY, a case beyond its duration */
#define BUDGET_PERCENT 80    /* of the peer segment a put case may fill */
#define KEY_LEN        96
#define BASELINE_AREA  (256 * CB_MIB) /* the shm baseline's remote area per client */
#define WARM_MAX       (4 * CB_MIB)   /* largest value of the warm-up pass */
#define MAX_ROUNDS     9
#define SHM_WARM_S     30.0 /* at most: one untimed engine write over the baseline's area */

enum { KIND_STORE = 0, KIND_SHM = 1 };
enum { OP_PUT = 0, OP_GET = 1 };

typedef struct sb_opts {
    const char *subcmd;
    const char *role;
    uint64_t sizes[MAX_SIZES];
    size_t n_sizes;
    uint32_t batch, threads, clients, drivers;
    uint32_t thread_list[8]; /* --threads 1,8: every case once per count */
    size_t n_threads;
    double duration;
    bool verify, json, quiet, no_baseline;
    bool fresh;    /* no warm-up pass: puts land on never-touched segment pages */
    bool physical; /* --baseline: socket stream, memcpy and ping-pong in this run */
    bool vs_mooncake;
    bool async; /* --async: one thread's calls/s, sync vs completion queue */
    uint32_t async_depth, async_rounds;
    uint32_t rounds; /* --rounds: the case list this often, alternating; medians reported */
    bool zcopy, copy, single, batched;
    uint64_t segment_size, buffer_size, region_size, target_size;
    uint64_t working_set; /* bytes a put round may fill before it starts over (0: 80 %) */
    uint32_t lease_ms;
    uint32_t master_busy_poll_us; /* the spawned master's --rpc_busy_poll_us */
    const char *protocol;
    const char *master_bin, *master_addr;
} sb_opts;

/* ======================================================================== */
/* client role                                                              */
/* ======================================================================== */

typedef struct sb_client {
    cr_store *s;
    cr_engine *e;
    uint8_t *region; /* registered with the store: zero-copy source/destination */
    uint8_t *target; /* remote-accessible on the engine: a peer's shm baseline target */
    uint64_t region_size, target_size;
    char name[256];
    uint64_t written[MAX_THREADS]; /* keys the last put case wrote, per thread */
    uint64_t wbase[MAX_THREADS];   /* index of the first of them */
    unsigned written_gid;
} sb_client;

typedef struct sb_job {
    sb_client *c;
    int kind, op;
    bool zcopy, verify;
    bool warm;             /* warm-up put: one round up to the budget, no recycling */
    bool keep_last;        /* --working-set: a full round removes the one before it */
    uint64_t size, budget; /* budget: keys per thread (put) */
    uint32_t batch, threads;
    double duration;
    unsigned gid, drv; /* key group; driver index (keys of drivers never collide) */
    char peer[256];
    uint64_t taddr, tlen;
    cr_segment_handle peer_seg;
    uint64_t start_ns, deadline_ns;
    atomic_ullong bytes_done;
    atomic_uint running;
    pthread_mutex_t err_lock;
    int first_error;
    char err_msg[512];
    atomic_ullong errors, verify_fail;
} sb_job;

typedef struct sb_worker {
    sb_job *j;
    unsigned idx;
    pthread_t tid;
    uint64_t keys, calls, bytes, end_ns;
    cb_hist *hist;
    char (*keys_buf)[KEY_LEN];
    const char **key_ptrs;
    void **bufs;
    size_t *sizes;
    int *res;
    int64_t *res64;
    uint8_t *expect; /* --verify: one value */
    uint64_t cursor; /* get: next key index */
} sb_worker;

static void job_error(sb_job *j, int rc, const char *what)
{
    atomic_fetch_add(&j->errors, 1);
    pthread_mutex_lock(&j->err_lock);
    if (j->first_error == 0) {
        j->first_error = rc;
        snprintf(j->err_msg, sizeof(j->err_msg), "%s: %s (%s)", what, cr_status_name(rc),
                 cr_last_error_message());
    }
    pthread_mutex_unlock(&j->err_lock);
}

static uint64_t value_seed(const sb_job *j, unsigned thread, uint64_t i)
{
    return ((uint64_t)j->gid << 48) ^ ((uint64_t)j->drv << 42) ^ ((uint64_t)thread << 34) ^ i;
}

static void key_name(char *buf, const sb_job *j, unsigned thread, uint64_t i)
{
    snprintf(buf, KEY_LEN, "sb%u/%u/%u/%" PRIu64, j->gid, j->drv, thread, i);
}

/* Verify one value read into got (len bytes). */
static void check_value(sb_worker *w, const uint8_t *got, int64_t len, uint64_t index)
{
    sb_job *j = w->j;
    if (len != (int64_t)j->size) {
        atomic_fetch_add(&j->verify_fail, 1);
        job_error(j, CR_CHECKSUM_MISMATCH, "a get returned the wrong size");
        return;
    }
    cb_pattern_fill(w->expect, 0, j->size, value_seed(j, w->idx, index));
    int64_t bad = cb_first_mismatch(got, w->expect, j->size);
    if (bad >= 0) {
        char key[KEY_LEN], what[200];
        key_name(key, j, w->idx, index);
        snprintf(what, sizeof(what), "verification: key %s differs at byte %" PRId64, key, bad);
        atomic_fetch_add(&j->verify_fail, 1);
        job_error(j, CR_CHECKSUM_MISMATCH, what);
    }
}

/* One store call covering n keys starting at key index `first` (put) or cursor (get). */
static void store_call(sb_worker *w, size_t n, uint64_t first)
{
    sb_job *j = w->j;
    sb_client *c = j->c;
    uint64_t written = c->written[w->idx];
    uint8_t *slice = c->region + (uint64_t)w->idx * j->batch * j->size;
    uint64_t index[1024];
    for (size_t k = 0; k < n; k++) {
        index[k] = j->op == OP_PUT ? first + k : c->wbase[w->idx] + (first + k) % written;
        key_name(w->keys_buf[k], j, w->idx, index[k]);
        w->key_ptrs[k] = w->keys_buf[k];
        w->bufs[k] = slice + k * j->size;
        w->sizes[k] = j->size;
        if (j->verify && j->op == OP_PUT)
            cb_pattern_fill(w->bufs[k], 0, j->size, value_seed(j, w->idx, index[k]));
        else if (j->verify)
            memset(w->bufs[k], 0xa5, j->size);
    }
    const char *const *keys = w->key_ptrs;
    cr_replicate_config cfg;
    cr_replicate_config_init(&cfg);
    const char *pref[1] = {j->peer};
    cfg.preferred_segments = pref;
    cfg.n_preferred = 1;
    bool single = j->batch == 1;
    uint64_t t0 = cb_now_ns();
    int rc = 0;
    if (j->op == OP_PUT) {
        if (single && j->zcopy)
            rc = w->res[0] = cr_store_put_from(c->s, keys[0], w->bufs[0], j->size, &cfg);
        else if (single)
            rc = w->res[0] = cr_store_put(c->s, keys[0], w->bufs[0], j->size, &cfg);
        else if (j->zcopy)
            rc = cr_store_batch_put_from(c->s, keys, w->bufs, w->sizes, n, &cfg, w->res);
        else
            rc = cr_store_batch_put(c->s, keys, (const void *const *)w->bufs, w->sizes, n, &cfg,
                                    w->res);
    } else {
        void **copies = w->bufs; /* copy mode: malloc'd values */
        if (single && j->zcopy) {
            w->res64[0] = cr_store_get_into(c->s, keys[0], w->bufs[0], j->size);
        } else if (single) {
            void *v = NULL;
            w->res64[0] = cr_store_get(c->s, keys[0], &v);
            copies[0] = v;
        } else if (j->zcopy) {
            rc = cr_store_batch_get_into(c->s, keys, w->bufs, w->sizes, n, w->res64);
        } else {
            rc = cr_store_batch_get(c->s, keys, n, copies, w->res64);
        }
    }
    uint64_t lat = cb_now_ns() - t0;
    cb_hist_add(w->hist, lat, 1);
    w->calls++;
    if (rc < 0 && (!single || j->op == OP_GET)) {
        job_error(j, rc, j->op == OP_PUT ? "batch put" : "batch get");
        return;
    }
    for (size_t k = 0; k < n; k++) {
        int64_t r = j->op == OP_PUT ? w->res[k] : w->res64[k];
        if (r < 0) {
            job_error(j, (int)r, j->op == OP_PUT ? "put" : "get");
        } else {
            w->keys++;
            w->bytes += j->size;
            if (j->verify && j->op == OP_GET)
                check_value(w, w->bufs[k], r, index[k]);
        }
        if (j->op == OP_GET && !j->zcopy) {
            free(w->bufs[k]);
            w->bufs[k] = NULL;
        }
    }
}

/*
 * The baseline: the same engine moving the same bytes between the same two
 * processes, without the store. The local side is the same slice of the
 * region a zero-copy store call uses; the remote side cycles over this
 * thread's share of the peer's target area, as store values land all over
 * the peer's segment (so neither side of the copy is one cache-hot block).
 */
static void shm_call(sb_worker *w, size_t n)
{
    sb_job *j = w->j;
    sb_client *c = j->c;
    uint8_t *slice = c->region + (uint64_t)w->idx * j->batch * j->size;
    uint64_t area = j->tlen / j->threads, slots = area / j->size;
    uint64_t remote[1024], lens[1024];
    for (size_t k = 0; k < n; k++) {
        w->bufs[k] = slice + k * j->size;
        remote[k] = j->taddr + (uint64_t)w->idx * area + (w->cursor++ % slots) * j->size;
        lens[k] = j->size;
    }
    int op = j->op == OP_PUT ? CR_OP_WRITE : CR_OP_READ;
    uint64_t t0 = cb_now_ns();
    int rc =
        n == 1 ? cr_engine_transfer_sync(c->e, op, w->bufs[0], j->peer_seg, remote[0], j->size, 0)
               : cr_engine_transfer_sync_batch(c->e, op, j->peer_seg, w->bufs, remote, lens, n, 0);
    cb_hist_add(w->hist, cb_now_ns() - t0, 1);
    w->calls++;
    if (rc < 0) {
        job_error(j, rc, op == CR_OP_WRITE ? "shm write" : "shm read");
        return;
    }
    w->keys += n;
    w->bytes += n * j->size;
}

/*
 * A put case whose keys reached the budget (80 % of the peer's segment)
 * removes them (no reader holds a lease on them, so the space is free at
 * once) and starts over with the same key names. The removal is inside the
 * case's wall time but not in the latency histogram; with the default 1 GiB
 * segment it is one batch call per ~800 MiB written. With --working-set
 * (keep_last) the keys alternate between two halves of the index space: a
 * full round removes the round before it, [first, first + count), and the
 * next round rewrites those names, so the last round stays readable.
 */
static int recycle(sb_worker *w, uint64_t first_key, uint64_t count)
{
    sb_job *j = w->j;
    char(*names)[KEY_LEN] = calloc(1024, KEY_LEN);
    const char **ptrs = calloc(1024, sizeof(*ptrs));
    int *res = calloc(1024, sizeof(*res));
    int rc = names && ptrs && res ? 0 : CR_ERR_NO_MEMORY;
    for (uint64_t first = 0; rc == 0 && first < count; first += 1024) {
        size_t n = count - first < 1024 ? (size_t)(count - first) : 1024;
        for (size_t k = 0; k < n; k++) {
            key_name(names[k], j, w->idx, first_key + first + k);
            ptrs[k] = names[k];
        }
        rc = cr_store_batch_remove(j->c->s, ptrs, n, false, res);
        for (size_t k = 0; rc == 0 && k < n; k++)
            if (res[k] != 0 && res[k] != CR_OBJECT_NOT_FOUND)
                rc = res[k];
    }
    if (rc != 0)
        job_error(j, rc, "removing a full round of keys");
    free(names);
    free(ptrs);
    free(res);
    return rc;
}

static void *worker_main(void *arg)
{
    sb_worker *w = arg;
    sb_job *j = w->j;
    uint64_t next = 0, base = 0;
    if (j->kind == KIND_STORE && j->op == OP_GET && j->c->written[w->idx] == 0) {
        job_error(j, CR_OBJECT_NOT_FOUND, "get case without keys (did the put case fail?)");
        goto out;
    }
    /* At least one call, so that a thread started late on a loaded machine still leaves
     * keys for the get case. */
    for (bool first = true; (first || cb_now_ns() < j->deadline_ns) && atomic_load(&j->errors) == 0;
         first = false) {
        size_t n = j->batch;
        if (j->kind == KIND_STORE && j->op == OP_PUT) {
            if (next >= j->budget) {
                uint64_t other = base == 0 ? j->budget : 0;
                if (j->warm ||
                    recycle(w, j->keep_last ? other : base, j->keep_last ? j->budget : next) < 0)
                    break;
                if (j->keep_last)
                    base = other;
                next = 0;
            }
            if (n > j->budget - next)
                n = (size_t)(j->budget - next);
        }
        uint64_t before = w->bytes;
        if (j->kind == KIND_SHM) {
            shm_call(w, n);
            /* the untimed pass before the baselines: once over this thread's share */
            if (j->warm && w->cursor >= j->tlen / j->threads / j->size)
                break;
        } else if (j->op == OP_PUT) {
            store_call(w, n, base + next);
            next += n;
        } else {
            store_call(w, n, w->cursor);
            w->cursor += n;
        }
        atomic_fetch_add(&j->bytes_done, w->bytes - before);
    }
    if (j->kind == KIND_STORE && j->op == OP_PUT) {
        j->c->written[w->idx] = next;
        j->c->wbase[w->idx] = base;
    }
out:
    w->end_ns = cb_now_ns();
    atomic_fetch_sub(&j->running, 1);
    return NULL;
}

static void print_hist(const cb_hist *h)
{
    printf(" hist=");
    bool first = true;
    for (size_t i = 0; i < CB_HIST_BUCKETS; i++) {
        if (h->counts[i] == 0)
            continue;
        printf("%s%zu:%" PRIu64, first ? "" : ",", i, h->counts[i]);
        first = false;
    }
    if (first)
        printf("-");
}

/* "run KIND OP MODE SIZE BATCH THREADS DURATION VERIFY GID DRV BUDGET PEER TADDR TLEN" */
static void client_run(sb_client *c, const char *line)
{
    char kind[16], op[16], mode[16];
    sb_job *j = calloc(1, sizeof(*j));
    unsigned verify = 0;
    if (j == NULL ||
        sscanf(line,
               "run %15s %15s %15s %" SCNu64 " %u %u %lf %u %u %u %" SCNu64 " %255s %" SCNx64
               " %" SCNu64,
               kind, op, mode, &j->size, &j->batch, &j->threads, &j->duration, &verify, &j->gid,
               &j->drv, &j->budget, j->peer, &j->taddr, &j->tlen) != 14 ||
        j->threads == 0 || j->threads > MAX_THREADS || j->batch == 0 || j->batch > 1024 ||
        (uint64_t)j->threads * j->batch * j->size > c->region_size ||
        j->tlen / j->threads < (uint64_t)j->batch * j->size) {
        printf("E bad run command: %s\nR keys=0 calls=0 bytes=0 secs=0 errors=1 verify_fail=0 "
               "local=0 shm=0 cma=0 tcp=0 hist=-\n",
               line);
        fflush(stdout);
        free(j);
        return;
    }
    j->c = c;
    j->kind = strcmp(kind, "shm") == 0 ? KIND_SHM : KIND_STORE;
    j->warm = strcmp(op, "warm") == 0;
    j->keep_last = strcmp(op, "put2") == 0;
    j->op = strcmp(op, "put") == 0 || j->warm || j->keep_last ? OP_PUT : OP_GET;
    j->zcopy = strcmp(mode, "zcopy") == 0;
    j->verify = verify != 0;
    pthread_mutex_init(&j->err_lock, NULL);
    if (j->kind == KIND_STORE && j->op == OP_PUT) {
        memset(c->written, 0, sizeof(c->written));
        memset(c->wbase, 0, sizeof(c->wbase));
        c->written_gid = j->gid;
    }
    int rc = 0;
    if (j->kind == KIND_SHM) {
        rc = cr_engine_open_segment(c->e, j->peer, &j->peer_seg);
        if (rc < 0)
            job_error(j, rc, "opening the peer's segment");
    }
    sb_worker *ws = calloc(j->threads, sizeof(*ws));
    cr_engine_stats before = {0}, after = {0};
    cr_engine_get_stats(c->e, &before);
    unsigned started = 0;
    j->start_ns = cb_now_ns();
    j->deadline_ns = j->start_ns + (uint64_t)(j->duration * 1e9);
    for (unsigned t = 0; ws != NULL && rc == 0 && t < j->threads; t++) {
        sb_worker *w = &ws[t];
        w->j = j;
        w->idx = t;
        w->hist = calloc(1, sizeof(*w->hist));
        w->keys_buf = calloc(j->batch, KEY_LEN);
        w->key_ptrs = calloc(j->batch, sizeof(*w->key_ptrs));
        w->bufs = calloc(j->batch, sizeof(*w->bufs));
        w->sizes = calloc(j->batch, sizeof(*w->sizes));
        w->res = calloc(j->batch, sizeof(*w->res));
        w->res64 = calloc(j->batch, sizeof(*w->res64));
        w->expect = malloc(j->size ? j->size : 1);
        if (w->hist == NULL || w->keys_buf == NULL || w->key_ptrs == NULL || w->bufs == NULL ||
            w->sizes == NULL || w->res == NULL || w->res64 == NULL || w->expect == NULL) {
            job_error(j, CR_ERR_NO_MEMORY, "worker buffers");
            break;
        }
        atomic_fetch_add(&j->running, 1);
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0) {
            atomic_fetch_sub(&j->running, 1);
            job_error(j, CR_ERR_SYSTEM, "starting a worker thread");
            break;
        }
        started++;
    }
    while (atomic_load(&j->running) > 0) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        printf("P %" PRIu64 " %.3f\n", (uint64_t)atomic_load(&j->bytes_done),
               (double)(cb_now_ns() - j->start_ns) / 1e9);
        fflush(stdout);
    }
    uint64_t keys = 0, calls = 0, bytes = 0, end = j->start_ns;
    cb_hist *all = calloc(1, sizeof(*all));
    for (unsigned t = 0; t < started; t++) {
        pthread_join(ws[t].tid, NULL);
        keys += ws[t].keys;
        calls += ws[t].calls;
        bytes += ws[t].bytes;
        if (ws[t].end_ns > end)
            end = ws[t].end_ns;
        if (all != NULL)
            cb_hist_merge(all, ws[t].hist);
    }
    cr_engine_get_stats(c->e, &after);
    if (j->first_error != 0)
        printf("E %s\n", j->err_msg);
    printf("R keys=%" PRIu64 " calls=%" PRIu64 " bytes=%" PRIu64 " secs=%.6f errors=%" PRIu64
           " verify_fail=%" PRIu64 " local=%" PRIu64 " shm=%" PRIu64 " cma=%" PRIu64
           " tcp=%" PRIu64,
           keys, calls, bytes, (double)(end - j->start_ns) / 1e9,
           (uint64_t)atomic_load(&j->errors) + (ws == NULL || all == NULL),
           (uint64_t)atomic_load(&j->verify_fail), after.bytes_local - before.bytes_local,
           after.bytes_shm - before.bytes_shm, after.bytes_cma - before.bytes_cma,
           after.bytes_tcp - before.bytes_tcp);
    if (all != NULL)
        print_hist(all);
    printf("\n");
    fflush(stdout);
    for (unsigned t = 0; ws != NULL && t < j->threads; t++) {
        free(ws[t].hist);
        free(ws[t].keys_buf);
        free(ws[t].key_ptrs);
        free(ws[t].bufs);
        free(ws[t].sizes);
        free(ws[t].res);
        free(ws[t].res64);
        free(ws[t].expect);
    }
    free(ws);
    free(all);
    pthread_mutex_destroy(&j->err_lock);
    free(j);
}

static int client_main(const sb_opts *o)
{
    sb_client c;
    memset(&c, 0, sizeof(c));
    c.region_size = o->region_size;
    c.target_size = o->target_size;
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = o->master_addr;
    cfg.global_segment_size = o->segment_size;
    cfg.local_buffer_size = o->buffer_size;
    cfg.protocol = o->protocol;
    int rc = cr_store_setup(&cfg, &c.s);
    if (rc < 0) {
        fprintf(stderr, CB_PROG " store client: cr_store_setup: %s\n", cr_last_error_message());
        return CB_EXIT_FAIL;
    }
    c.e = cr_store_engine(c.s);
    cr_store_hostname(c.s, c.name, sizeof(c.name));
    rc = cr_alloc_shared(c.region_size, (void **)&c.region);
    if (rc == 0) {
        cb_pattern_fill(c.region, 0, c.region_size, 0x73746f7265ull); /* "store" */
        rc = cr_store_register_buffer(c.s, c.region, c.region_size);
    }
    if (rc == 0)
        rc = cr_alloc_shared(c.target_size, (void **)&c.target);
    if (rc == 0) {
        memset(c.target, 0, c.target_size); /* commit the pages before anything is timed */
        rc = cr_engine_register(c.e, c.target, c.target_size, "cpu:0", true);
    }
    if (rc < 0) {
        fprintf(stderr, CB_PROG " store client: buffers of %" PRIu64 " bytes: %s\n", c.region_size,
                cr_last_error_message());
        cr_store_destroy(c.s);
        return CB_EXIT_FAIL;
    }
    printf("READY name=%s target=0x%" PRIxPTR " len=%" PRIu64 "\n", c.name, (uintptr_t)c.target,
           c.target_size);
    fflush(stdout);
    static char line[4096];
    while (fgets(line, sizeof(line), stdin) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "run ", 4) == 0) {
            client_run(&c, line);
        } else if (strcmp(line, "clean") == 0) {
            int64_t n = cr_store_remove_all(c.s, true);
            printf("C %" PRId64 "\n", n);
        } else {
            printf("E unknown command '%s'\n", line);
        }
        fflush(stdout);
    }
    cr_store_unregister_buffer(c.s, c.region);
    cr_engine_unregister(c.e, c.target);
    cr_store_destroy(c.s);
    cr_free_shared(c.region);
    cr_free_shared(c.target);
    return CB_EXIT_OK;
}

/* ======================================================================== */
/* orchestrator                                                             */
/* ======================================================================== */

typedef struct sb_peer {
    cb_child child;
    char name[256];
    uint64_t target, len;
} sb_peer;

typedef struct sb_master {
    ct_master m; /* spawned; m.p.pid is 0 when given (--master) */
    char addr[128];
} sb_master;

typedef struct sb_result {
    uint64_t keys, calls, bytes, errors, verify_fail;
    uint64_t local, shm, cma, tcp;
    double secs;
    cb_hist *hist;
    char error[600];
} sb_result;

/* The shm baseline, per (size index, op, shape): GB/s. */
typedef struct sb_baselines {
    double gbps[MAX_SIZES][2][2];
    bool have[MAX_SIZES][2][2];
} sb_baselines;

typedef struct sb_run {
    const sb_opts *o;
    sb_master master;
    sb_peer peers[MAX_CLIENTS];
    unsigned n_peers;
    sb_baselines base;
    bool progress, printed_header;
    unsigned gid;
    int failures;
    double target[2][2]; /* 1 MiB zero-copy x shm, [op][shape], for the summary */
    double keys4k_put, keys4k_get;
    double keys4k_r[2][MAX_ROUNDS]; /* --rounds: each round's, [op][round] */
    uint32_t threads;               /* of the cases running now */
    /* --vs-mooncake: GB/s per [size index][zcopy][batched][op][thread list index] */
    double gbps[MAX_SIZES][2][2][2][8];
    double vs_engine[MAX_SIZES][2][2][2][8]; /* the same cases' x shm (0: no baseline) */
    /* --rounds: each round's figures of the above, [..][round]; medians go into the arrays
     * above after the last round */
    double gbps_r[MAX_SIZES][2][2][2][8][MAX_ROUNDS];
    double vs_r[MAX_SIZES][2][2][2][8][MAX_ROUNDS];
    double target_r[2][2][MAX_ROUNDS];
    unsigned round;
    size_t ti;
    cb_measure sock, sock2, mem; /* sock2: two streams at once */
    cb_pingpong pp;
    bool have_physical;
} sb_run;

static void usage(FILE *to)
{
    fprintf(
        to,
        "usage: " CB_PROG " store [flags]\n"
        "\n"
        "put/get throughput and latency of the store between client processes on this host,\n"
        "next to the shared-memory transport measured between the same processes.\n"
        "Spawns a crescent-master and --clients client processes on 127.0.0.1 and stops\n"
        "them at the end.\n"
        "\n"
        "  --value-sizes LIST     comma-separated sizes, K/M/G binary (default 4K,64K,1M)\n"
        "  --batch N              keys per batch call in the batch cases (default 16, max 1024)\n"
        "  --threads N[,N...]     threads per driver, one call in flight each (default 1);\n"
        "                         a list runs every case once per count\n"
        "  --clients N            client processes (default 2)\n"
        "  --drivers N            clients that run the cases, each against the next client's\n"
        "                         segment (default 1)\n"
        "  --duration SECONDS     per case (default 1); a put case that fills 80%% of the\n"
        "                         peer's segment removes its keys and starts over\n"
        "  --working-set BYTES    a put case's rounds hold this much (at most 40%% of the\n"
        "                         segment), and a full round removes the round before it: a\n"
        "                         steady put/remove state, where (with --fresh) puts after\n"
        "                         the first two rounds land in space freed before\n"
        "  --modes LIST           zcopy,copy (default both): put_from/get_into on registered\n"
        "                         memory, or put/get staged through the local buffer\n"
        "  --shapes LIST          single,batch (default both)\n"
        "  --segment-size BYTES   each client's global segment (default 1G; reserved, pages\n"
        "                         committed as they are written)\n"
        "  --buffer-size BYTES    each client's local staging buffer (default 16M)\n"
        "  --protocol auto|shm|tcp  the clients' engine protocol (default auto)\n"
        "  --lease-ms N           read lease of the spawned master (default 500); after each\n"
        "                         group's clean-up the bench waits it out. With --master, give\n"
        "                         that master's --default_kv_lease_ttl\n"
        "  --master-busy-poll-us N  the spawned master's --rpc_busy_poll_us (default 0: its\n"
        "                         I/O threads sleep between requests); with\n"
        "                         CRESCENT_BUSY_POLL_US=N for the clients, both sides poll\n"
        "                         fixed windows\n"
        "  --no-baseline          skip the engine transport cases\n"
        "  --rounds N             run the whole case list N times (1-9, default 1), engine and\n"
        "                         store cases alternating; the summary reports medians\n"
        "  --baseline             also measure, first, a plain TCP socket copy (one stream, then\n"
        "                         two at once), memcpy and a\n"
        "                         4 KiB plain-socket ping-pong (the physical floor)\n"
        "  --fresh                no warm-up fill, and every holder client is restarted before\n"
        "                         each put case: puts write never-touched segment pages (a\n"
        "                         freshly mounted holder) instead of committed ones\n"
        "  --vs-mooncake          end with issue 12's table: these figures next to Mooncake's\n"
        "                         recorded ones (and the --baseline floor)\n"
        "  --async                instead of the cases: one thread's exist and get_into calls/s\n"
        "                         (first --value-sizes size), synchronous vs the completion\n"
        "                         queue (cr_store_cq), --async-rounds alternating slices of\n"
        "                         --duration each\n"
        "  --async-depth N        calls in flight in the async slices (default 64)\n"
        "  --async-rounds N       rounds of the four slices (default 5)\n"
        "  --verify               fill every value with a per-key pattern and check every byte\n"
        "                         of every get (inside the timed loop: not a speed run)\n"
        "  --json                 JSON lines on stdout instead of the table\n"
        "  --quiet                no progress line, no informational lines\n"
        "  --master HOST:PORT     use a running crescent-master instead of spawning one\n"
        "  --master-bin PATH      crescent-master to spawn (default ../master/crescent-master\n"
        "                         next to this binary's folder, else PATH)\n"
        "\n"
        "ops/s = keys per second; GB/s = 1e9 value bytes per second of case wall time;\n"
        "latency is per call (a batch call covers --batch keys), log-linear histogram\n"
        "(~3%% resolution). via = the engine path that moved the bytes. x shm = GB/s over the\n"
        "shm baseline of the same size, direction (put~write, get~read) and shape; the\n"
        "baseline is cr_engine_transfer_sync(_batch) between the same two processes.\n"
        "Exit status: 0 ok, 1 an operation or verification failed, 2 bad usage.\n");
}

static int parse_sizes(const char *text, sb_opts *o)
{
    size_t n = 0;
    if (cb_parse_size_list(CB_PROG " store", "--value-sizes", text, CB_GIB, o->sizes, MAX_SIZES,
                           &n) < 0)
        return -1;
    o->n_sizes = n;
    return 0;
}

/* "--threads 1,8": up to 8 counts from 1 to MAX_THREADS; o->threads is the largest. */
static int parse_threads(const char *text, sb_opts *o)
{
    o->n_threads = 0;
    o->threads = 0;
    const char *p = text;
    for (;;) {
        char item[16];
        size_t n = strcspn(p, ",");
        uint32_t v;
        if (n == 0 || n >= sizeof(item) || o->n_threads == 8)
            return cb_bad_value("store", "--threads", text,
                                "a list of up to 8 numbers from 1 to 256");
        memcpy(item, p, n);
        item[n] = '\0';
        if (cb_parse_u32(item, 1, MAX_THREADS, &v) < 0)
            return cb_bad_value("store", "--threads", text,
                                "a list of up to 8 numbers from 1 to 256");
        o->thread_list[o->n_threads++] = v;
        if (v > o->threads)
            o->threads = v;
        p += n;
        if (*p == '\0')
            return 0;
        p++;
    }
}

/* A list of words: each must be one of a or b; sets *fa / *fb. */
static int parse_pair(const char *flag, const char *text, const char *a, const char *b, bool *fa,
                      bool *fb)
{
    *fa = *fb = false;
    const char *p = text;
    for (;;) {
        size_t n = strcspn(p, ",");
        if (n == strlen(a) && strncmp(p, a, n) == 0)
            *fa = true;
        else if (n == strlen(b) && strncmp(p, b, n) == 0)
            *fb = true;
        else {
            char want[64];
            snprintf(want, sizeof(want), "a list of %s and %s", a, b);
            return cb_bad_value("store", flag, text, want);
        }
        p += n;
        if (*p == '\0')
            return 0;
        p++;
    }
}

static int apply_value(sb_opts *o, const char *flag, const char *v)
{
    if (strcmp(flag, "--role") == 0) {
        if (strcmp(v, "orchestrator") != 0 && strcmp(v, "client") != 0 && strcmp(v, "sink") != 0 &&
            strcmp(v, "sink-fresh") != 0 && strcmp(v, "echo") != 0)
            return cb_bad_value("store", flag, v, "orchestrator or client");
        o->role = v;
    } else if (strcmp(flag, "--value-sizes") == 0) {
        return parse_sizes(v, o);
    } else if (strcmp(flag, "--batch") == 0) {
        if (cb_parse_u32(v, 1, 1024, &o->batch) < 0)
            return cb_bad_value("store", flag, v, "a number from 1 to 1024");
    } else if (strcmp(flag, "--threads") == 0) {
        return parse_threads(v, o);
    } else if (strcmp(flag, "--clients") == 0) {
        if (cb_parse_u32(v, 2, MAX_CLIENTS, &o->clients) < 0)
            return cb_bad_value("store", flag, v, "a number from 2 to 64");
    } else if (strcmp(flag, "--drivers") == 0) {
        if (cb_parse_u32(v, 1, MAX_CLIENTS, &o->drivers) < 0)
            return cb_bad_value("store", flag, v, "a number from 1 to 64");
    } else if (strcmp(flag, "--duration") == 0) {
        if (cb_parse_seconds(v, &o->duration) < 0)
            return cb_bad_value("store", flag, v, "a positive number of seconds (at most 86400)");
    } else if (strcmp(flag, "--modes") == 0) {
        return parse_pair(flag, v, "zcopy", "copy", &o->zcopy, &o->copy);
    } else if (strcmp(flag, "--shapes") == 0) {
        return parse_pair(flag, v, "single", "batch", &o->single, &o->batched);
    } else if (strcmp(flag, "--segment-size") == 0) {
        if (cb_parse_size(v, &o->segment_size) < 0 || o->segment_size < CB_MIB)
            return cb_bad_value("store", flag, v, "a size of at least 1M (K/M/G binary)");
    } else if (strcmp(flag, "--buffer-size") == 0) {
        if (cb_parse_size(v, &o->buffer_size) < 0 || o->buffer_size < 64 * CB_KIB)
            return cb_bad_value("store", flag, v, "a size of at least 64K (K/M/G binary)");
    } else if (strcmp(flag, "--working-set") == 0) {
        if (cb_parse_size(v, &o->working_set) < 0 || o->working_set == 0)
            return cb_bad_value("store", flag, v, "a positive size (K/M/G binary)");
    } else if (strcmp(flag, "--region-size") == 0) {
        if (cb_parse_size(v, &o->region_size) < 0 || o->region_size == 0)
            return cb_bad_value("store", flag, v, "a positive size");
    } else if (strcmp(flag, "--target-size") == 0) {
        if (cb_parse_size(v, &o->target_size) < 0 || o->target_size == 0)
            return cb_bad_value("store", flag, v, "a positive size");
    } else if (strcmp(flag, "--async-depth") == 0) {
        if (cb_parse_u32(v, 1, 4096, &o->async_depth) < 0)
            return cb_bad_value("store", flag, v, "a number from 1 to 4096");
    } else if (strcmp(flag, "--rounds") == 0) {
        if (cb_parse_u32(v, 1, MAX_ROUNDS, &o->rounds) < 0)
            return cb_bad_value("store", flag, v, "a number from 1 to 9");
    } else if (strcmp(flag, "--async-rounds") == 0) {
        if (cb_parse_u32(v, 1, 64, &o->async_rounds) < 0)
            return cb_bad_value("store", flag, v, "a number from 1 to 64");
    } else if (strcmp(flag, "--master-busy-poll-us") == 0) {
        if (cb_parse_u32(v, 0, 10000, &o->master_busy_poll_us) < 0)
            return cb_bad_value("store", flag, v, "a number of microseconds from 0 to 10000");
    } else if (strcmp(flag, "--lease-ms") == 0) {
        if (cb_parse_u32(v, 10, 600000, &o->lease_ms) < 0)
            return cb_bad_value("store", flag, v, "a number of milliseconds from 10 to 600000");
    } else if (strcmp(flag, "--protocol") == 0) {
        if (strcmp(v, "tcp") != 0 && strcmp(v, "shm") != 0 && strcmp(v, "auto") != 0)
            return cb_bad_value("store", flag, v, "tcp, shm or auto");
        o->protocol = v;
    } else if (strcmp(flag, "--master") == 0) {
        if (v[0] == '\0' || strchr(v, ':') == NULL)
            return cb_bad_value("store", flag, v, "HOST:PORT");
        o->master_addr = v;
    } else if (strcmp(flag, "--master-bin") == 0) {
        o->master_bin = v;
    }
    return 0;
}

static uint64_t max_size(const sb_opts *o)
{
    uint64_t m = 0;
    for (size_t i = 0; i < o->n_sizes; i++)
        if (o->sizes[i] > m)
            m = o->sizes[i];
    return m;
}

/* Returns 0 to run, 1 after --help, -1 for a bad command line. */
static int apply_flag(void *ctx, const char *flag, const char *v)
{
    return apply_value(ctx, flag, v);
}

static int parse_opts(int argc, char **argv, sb_opts *o)
{
    static const char *const value_flags[] = {
        "--role",         "--value-sizes",
        "--batch",        "--threads",
        "--clients",      "--drivers",
        "--duration",     "--modes",
        "--shapes",       "--segment-size",
        "--protocol",     "--buffer-size",
        "--region-size",  "--master",
        "--master-bin",   "--target-size",
        "--lease-ms",     "--async-depth",
        "--async-rounds", "--working-set",
        "--rounds",       "--master-busy-poll-us",
    };
    static const uint64_t default_sizes[] = {4 * CB_KIB, 64 * CB_KIB, CB_MIB};
    memset(o, 0, sizeof(*o));
    o->subcmd = argv[0];
    o->role = "orchestrator";
    memcpy(o->sizes, default_sizes, sizeof(default_sizes));
    o->n_sizes = 3;
    o->batch = 16;
    o->threads = 1;
    o->thread_list[0] = 1;
    o->n_threads = 1;
    o->clients = 2;
    o->drivers = 1;
    o->duration = 1.0;
    o->zcopy = o->copy = o->single = o->batched = true;
    o->segment_size = CB_GIB;
    o->buffer_size = 16 * CB_MIB;
    o->protocol = "auto";
    o->lease_ms = 500;
    o->async_depth = 64;
    o->async_rounds = 5;
    o->rounds = 1;
    ct_option table[sizeof(value_flags) / sizeof(value_flags[0]) + 8] = {
        CT_SWITCH("--verify", &o->verify),
        CT_SWITCH("--json", &o->json),
        CT_SWITCH("--quiet", &o->quiet),
        CT_SWITCH("--no-baseline", &o->no_baseline),
        CT_SWITCH("--fresh", &o->fresh),
        CT_SWITCH("--baseline", &o->physical),
        CT_SWITCH("--vs-mooncake", &o->vs_mooncake),
        CT_SWITCH("--async", &o->async),
    };
    size_t n = 8;
    for (size_t f = 0; f < sizeof(value_flags) / sizeof(value_flags[0]); f++)
        table[n++] = (ct_option)CT_APPLY(value_flags[f]);
    int pr = ct_parse_options(argc, argv, table, n, apply_flag, o, CB_PROG " store");
    if (pr == CT_OPTS_HELP) {
        usage(stdout);
        return 1;
    }
    if (pr < 0)
        return -1;
    if (strcmp(o->role, "sink") == 0 || strcmp(o->role, "sink-fresh") == 0 ||
        strcmp(o->role, "echo") == 0)
        return 0;
    if (strcmp(o->role, "client") == 0) {
        if (o->master_addr == NULL || o->region_size == 0 || o->target_size == 0) {
            fprintf(stderr, CB_PROG " store --role client needs --master, --region-size and "
                                    "--target-size\n");
            return -1;
        }
        return 0;
    }
    if (o->drivers > o->clients) {
        fprintf(stderr, CB_PROG " store: --drivers %u is more than --clients %u\n", o->drivers,
                o->clients);
        return -1;
    }
    uint64_t slice = max_size(o) * o->batch; /* < 2^30 * 2^10 */
    if (slice > 4 * CB_GIB / o->threads) {
        fprintf(stderr, CB_PROG " store: largest value x --batch x --threads exceeds 4G\n");
        return -1;
    }
    o->region_size = slice * o->threads;
    /* The baseline's remote area: as large as the segment the store's values land in (at
     * most 256M), and at least one slice per thread. */
    o->target_size = o->segment_size < BASELINE_AREA ? o->segment_size : BASELINE_AREA;
    if (o->target_size < o->region_size)
        o->target_size = o->region_size;
    if (o->working_set > 0 && o->working_set > o->segment_size / 100 * (BUDGET_PERCENT / 2)) {
        fprintf(stderr, CB_PROG " store: --working-set is more than 40%% of --segment-size\n");
        return -1;
    }
    if (o->working_set > 0 && o->working_set < max_size(o) * o->batch * o->threads) {
        fprintf(stderr, CB_PROG " store: --working-set is less than one batch per thread\n");
        return -1;
    }
    if (max_size(o) * 10 > o->segment_size * 8) {
        fprintf(stderr, CB_PROG " store: --segment-size must hold the largest value with room to "
                                "spare (80%% of it is used)\n");
        return -1;
    }
    return 0;
}

static int master_spawn(const sb_opts *o, sb_master *m)
{
    char path[PATH_MAX + 32];
    const char *bin = o->master_bin ? o->master_bin : ct_default_master_bin(path, sizeof(path));
    char lease[64];
    snprintf(lease, sizeof(lease), "--default_kv_lease_ttl=%u", o->lease_ms);
    char spin[64];
    snprintf(spin, sizeof(spin), "--rpc_busy_poll_us=%u", o->master_busy_poll_us);
    const char *args[] = {lease, spin, NULL};
    ct_master_opts mo = {.bin = bin, .args = args, .ready_ms = CHILD_TIMEOUT};
    if (ct_master_start(&m->m, &mo) < 0) {
        fprintf(stderr,
                CB_PROG " store: %s did not start (use --master-bin PATH or --master "
                        "HOST:PORT)\n",
                bin);
        return -1;
    }
    snprintf(m->addr, sizeof(m->addr), "%s", m->m.addr);
    return 0;
}

static int master_stop(sb_master *m)
{
    if (!ct_master_running(&m->m))
        return 0;
    if (ct_master_stop(&m->m, 10000) != 0) {
        fprintf(stderr, CB_PROG " store: crescent-master did not exit cleanly on SIGTERM\n");
        return -1;
    }
    return 0;
}

/* ---- clients ------------------------------------------------------------- */

static int spawn_one(sb_run *r, unsigned i, char *seg, char *buf, char *region, char *target);

static int spawn_clients(sb_run *r)
{
    const sb_opts *o = r->o;
    char seg[32], buf[32], region[32], target[32];
    snprintf(seg, sizeof(seg), "%" PRIu64, o->segment_size);
    snprintf(buf, sizeof(buf), "%" PRIu64, o->buffer_size);
    snprintf(region, sizeof(region), "%" PRIu64, o->region_size);
    snprintf(target, sizeof(target), "%" PRIu64, o->target_size);
    for (unsigned i = 0; i < o->clients; i++) {
        if (spawn_one(r, i, seg, buf, region, target) < 0)
            return -1;
        r->n_peers++;
    }
    return 0;
}

static int spawn_one(sb_run *r, unsigned i, char *seg, char *buf, char *region, char *target)
{
    const sb_opts *o = r->o;
    {
        sb_peer *p = &r->peers[i];
        p->child = (cb_child)CB_CHILD_INIT;
        char *argv[] = {CB_PROG,
                        (char *)o->subcmd,
                        "--role",
                        "client",
                        "--master",
                        r->master.addr,
                        "--segment-size",
                        seg,
                        "--buffer-size",
                        buf,
                        "--region-size",
                        region,
                        "--target-size",
                        target,
                        "--protocol",
                        (char *)o->protocol,
                        NULL};
        if (cb_child_spawn(&p->child, argv) < 0) {
            perror(CB_PROG " store: cannot start a client");
            return -1;
        }
        char line[1024];
        if (cb_child_read_line(&p->child, line, sizeof(line), CHILD_TIMEOUT) < 0 ||
            sscanf(line, "READY name=%255s target=%" SCNx64 " len=%" SCNu64, p->name, &p->target,
                   &p->len) != 3) {
            fprintf(stderr, CB_PROG " store: client %u did not report READY\n", i);
            return -1;
        }
    }
    return 0;
}

/*
 * --fresh: stop every client that only holds memory and start it again, so
 * the next put case writes into a segment whose pages were never touched
 * (a freshly mounted holder; its old segment is unmounted when it exits).
 */
static int respawn_holders(sb_run *r)
{
    const sb_opts *o = r->o;
    char seg[32], buf[32], region[32], target[32], why[160];
    snprintf(seg, sizeof(seg), "%" PRIu64, o->segment_size);
    snprintf(buf, sizeof(buf), "%" PRIu64, o->buffer_size);
    snprintf(region, sizeof(region), "%" PRIu64, o->region_size);
    snprintf(target, sizeof(target), "%" PRIu64, o->target_size);
    for (unsigned i = o->drivers; i < o->clients; i++) {
        if (cb_child_stop(&r->peers[i].child, CHILD_TIMEOUT, why, sizeof(why)) != 0) {
            fprintf(stderr, CB_PROG " store: client %u %s\n", i, why);
            return -1;
        }
        if (spawn_one(r, i, seg, buf, region, target) < 0)
            return -1;
    }
    return 0;
}

static void stop_clients(sb_run *r, bool ok)
{
    for (unsigned i = 0; i < r->n_peers; i++) {
        char why[160];
        if (!ok) {
            cb_child_kill(&r->peers[i].child);
        } else if (cb_child_stop(&r->peers[i].child, CHILD_TIMEOUT, why, sizeof(why)) != 0) {
            fprintf(stderr, CB_PROG " store: client %u %s\n", i, why);
            r->failures++;
        }
    }
}

static int send_line(cb_child *c, const char *line)
{
    size_t n = strlen(line);
    const char *p = line;
    while (n > 0) {
        ssize_t w = write(c->proc.in_fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void parse_hist(const char *s, cb_hist *h)
{
    const char *p = strstr(s, " hist=");
    if (p == NULL)
        return;
    p += 6;
    while (*p != '\0' && *p != '-') {
        char *end;
        unsigned long idx = strtoul(p, &end, 10);
        if (*end != ':')
            return;
        uint64_t cnt = strtoull(end + 1, &end, 10);
        if (idx < CB_HIST_BUCKETS) {
            h->counts[idx] += cnt;
            h->total += cnt;
        }
        p = *end == ',' ? end + 1 : end;
        if (*end != ',')
            break;
    }
}

/* Read one driver's result: progress lines, error lines, then R. */
static int read_result(sb_run *r, unsigned d, double duration, const char *label, sb_result *res)
{
    static char line[LINE_LEN];
    cb_child *c = &r->peers[d].child;
    double wait_s = duration + CHILD_TIMEOUT / 1000.0;
    uint64_t deadline = cb_now_ns() + (uint64_t)(wait_s * 1e9);
    for (;;) {
        if (cb_now_ns() >= deadline ||
            cb_child_read_line(c, line, sizeof(line), CHILD_TIMEOUT) < 0) {
            snprintf(res->error, sizeof(res->error), "client %u stopped answering", d);
            return -1;
        }
        if (line[0] == 'P') {
            uint64_t bytes = 0;
            double el = 0;
            if (r->progress && d == 0 && sscanf(line, "P %" SCNu64 " %lf", &bytes, &el) == 2 &&
                el > 0)
                cb_progress(label, el, (double)bytes / el / 1e9);
        } else if (line[0] == 'E') {
            if (res->error[0] == '\0')
                snprintf(res->error, sizeof(res->error), "client %u: %.500s", d, line + 2);
        } else if (line[0] == 'R') {
            uint64_t v[10];
            double secs = 0;
            if (sscanf(line,
                       "R keys=%" SCNu64 " calls=%" SCNu64 " bytes=%" SCNu64
                       " secs=%lf errors=%" SCNu64 " verify_fail=%" SCNu64 " local=%" SCNu64
                       " shm=%" SCNu64 " cma=%" SCNu64 " tcp=%" SCNu64,
                       &v[0], &v[1], &v[2], &secs, &v[3], &v[4], &v[5], &v[6], &v[7],
                       &v[8]) != 10) {
                snprintf(res->error, sizeof(res->error), "client %u: bad result line", d);
                return -1;
            }
            res->keys += v[0];
            res->calls += v[1];
            res->bytes += v[2];
            res->errors += v[3];
            res->verify_fail += v[4];
            res->local += v[5];
            res->shm += v[6];
            res->cma += v[7];
            res->tcp += v[8];
            if (secs > res->secs)
                res->secs = secs;
            parse_hist(line, res->hist);
            return 0;
        }
    }
}

static const char *via_of(const sb_result *res, char *buf, size_t len)
{
    const char *names[4] = {"tcp", "shm", "cma", "local"};
    uint64_t v[4] = {res->tcp, res->shm, res->cma, res->local};
    uint64_t total = v[0] + v[1] + v[2] + v[3];
    buf[0] = '\0';
    if (total == 0) {
        snprintf(buf, len, "-");
        return buf;
    }
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        if (v[i] * 20 < total) /* under 5 %: not worth naming */
            continue;
        off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? "+" : "", names[i]);
        if (off >= len)
            break;
    }
    return buf;
}

typedef struct sb_case {
    int kind, op;
    bool zcopy;
    size_t size_idx; /* into o->sizes */
    uint32_t batch;
    uint64_t size;   /* 0: o->sizes[size_idx] */
    double duration; /* 0: --duration */
    bool silent;     /* warm-up: no row */
} sb_case;

static void print_row(sb_run *r, const sb_case *c, const sb_result *res, double vs)
{
    const sb_opts *o = r->o;
    uint64_t size = c->size ? c->size : o->sizes[c->size_idx];
    double secs = res->secs > 0 ? res->secs : 1e-9;
    double ops = (double)res->keys / secs, gbps = (double)res->bytes / secs / 1e9;
    const char *op = c->kind == KIND_SHM ? (c->op == OP_PUT ? "write" : "read")
                                         : (c->op == OP_PUT ? "put" : "get");
    const char *mode = c->kind == KIND_SHM ? "engine" : (c->zcopy ? "zcopy" : "copy");
    char via[32];
    via_of(res, via, sizeof(via));
    double p50 = (double)cb_hist_quantile(res->hist, 0.50) / 1e3;
    double p99 = (double)cb_hist_quantile(res->hist, 0.99) / 1e3;
    double p999 = (double)cb_hist_quantile(res->hist, 0.999) / 1e3;
    if (o->json) {
        char vsb[32] = "null";
        if (vs > 0)
            snprintf(vsb, sizeof(vsb), "%.4f", vs);
        printf("{\"type\":\"%s\",\"op\":\"%s\",\"mode\":\"%s\",\"value\":%" PRIu64 ",\"batch\":%u,"
               "\"threads\":%u,\"drivers\":%u,\"seconds\":%.6f,\"keys\":%" PRIu64
               ",\"calls\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"ops_per_s\":%.1f,\"gbps\":%.4f,"
               "\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"verified\":%s,\"via\":\"%s\","
               "\"vs_shm\":%s,\"errors\":%" PRIu64 "}\n",
               c->kind == KIND_SHM ? "shm" : "store", op, mode, size, c->batch, r->threads,
               o->drivers, res->secs, res->keys, res->calls, res->bytes, ops, gbps, p50, p99, p999,
               o->verify && c->kind == KIND_STORE ? "true" : "false", via, vsb, res->errors);
        fflush(stdout);
        return;
    }
    if (!r->printed_header) {
        printf("%-5s %-6s %6s %5s %3s %11s %8s %9s %9s %9s %8s %-9s %6s\n", "op", "mode", "value",
               "batch", "thr", "ops/s", "GB/s", "p50 us", "p99 us", "p999 us", "verified", "via",
               "x shm");
        r->printed_header = true;
    }
    char sz[32], vsb[16] = "-";
    if (vs > 0)
        snprintf(vsb, sizeof(vsb), "%.3f", vs);
    printf("%-5s %-6s %6s %5u %3u %11.1f %8.3f %9.1f %9.1f %9.1f %8s %-9s %6s\n", op, mode,
           cb_format_size(size, sz, sizeof(sz)), c->batch, r->threads, ops, gbps, p50, p99, p999,
           o->verify && c->kind == KIND_STORE ? "yes" : "no", via, vsb);
    fflush(stdout);
}

/* Run one case on every driver; print its row. Returns 0, or -1 on failure. */
static int run_case(sb_run *r, const sb_case *c)
{
    const sb_opts *o = r->o;
    uint64_t size = c->size ? c->size : o->sizes[c->size_idx];
    double duration = c->duration > 0 ? c->duration : o->duration;
    uint64_t aligned = (size + 63) / 64 * 64;
    uint64_t room = o->segment_size / 100 * BUDGET_PERCENT;
    bool keep_last = o->working_set > 0 && !c->silent && c->kind == KIND_STORE;
    if (keep_last)
        room = o->working_set;
    uint64_t budget = room / aligned / r->threads;
    if (budget == 0)
        budget = 1;
    char sz[32], label[96];
    snprintf(label, sizeof(label), "%s %s %s b%u",
             c->kind == KIND_SHM ? (c->op == OP_PUT ? "shm write" : "shm read")
                                 : (c->op == OP_PUT ? "put" : "get"),
             c->kind == KIND_SHM ? "" : (c->zcopy ? "zcopy" : "copy"),
             cb_format_size(size, sz, sizeof(sz)), c->batch);
    for (unsigned d = 0; d < o->drivers; d++) {
        const sb_peer *peer = &r->peers[(d + 1) % o->clients];
        char line[1024];
        snprintf(line, sizeof(line),
                 "run %s %s %s %" PRIu64 " %u %u %.6f %u %u %u %" PRIu64 " %s %" PRIx64 " %" PRIu64
                 "\n",
                 c->kind == KIND_SHM ? "shm" : "store",
                 c->silent ? "warm" : (c->op == OP_PUT ? (keep_last ? "put2" : "put") : "get"),
                 c->zcopy ? "zcopy" : "copy", size, c->batch, r->threads, duration,
                 o->verify && !c->silent ? 1u : 0u, r->gid, d, budget, peer->name, peer->target,
                 peer->len);
        if (send_line(&r->peers[d].child, line) < 0) {
            fprintf(stderr, CB_PROG " store: client %u is gone\n", d);
            return -1;
        }
    }
    sb_result res;
    memset(&res, 0, sizeof(res));
    res.hist = calloc(1, sizeof(*res.hist));
    if (res.hist == NULL)
        return -1;
    int rc = 0;
    for (unsigned d = 0; d < o->drivers; d++)
        if (read_result(r, d, duration, label, &res) < 0)
            rc = -1;
    if (r->progress)
        cb_progress_clear();
    if (rc < 0 || res.errors > 0 || res.verify_fail > 0) {
        fprintf(stderr,
                CB_PROG " store: case %s: %" PRIu64 " error(s), %" PRIu64
                        " verification failure(s)%s%s\n",
                label, res.errors, res.verify_fail, res.error[0] ? "; first: " : "", res.error);
        free(res.hist);
        r->failures++;
        return -1;
    }
    if (c->silent) {
        free(res.hist);
        return 0;
    }
    int shape = c->batch > 1;
    double gbps = res.secs > 0 ? (double)res.bytes / res.secs / 1e9 : 0;
    double vs = 0;
    if (c->kind == KIND_SHM) {
        r->base.gbps[c->size_idx][c->op][shape] = gbps;
        r->base.have[c->size_idx][c->op][shape] = true;
    } else if (r->base.have[c->size_idx][c->op][shape] &&
               r->base.gbps[c->size_idx][c->op][shape] > 0) {
        vs = gbps / r->base.gbps[c->size_idx][c->op][shape];
    }
    if (c->kind == KIND_STORE && c->zcopy && size == CB_MIB)
        r->target_r[c->op][shape][r->round] = vs;
    if (c->kind == KIND_STORE && size == 4 * CB_KIB && shape && c->zcopy) {
        double ops = res.secs > 0 ? (double)res.keys / res.secs : 0;
        r->keys4k_r[c->op][r->round] = ops;
    }
    if (c->kind == KIND_STORE && r->ti < 8) {
        r->gbps_r[c->size_idx][c->zcopy][shape][c->op][r->ti][r->round] = gbps;
        r->vs_r[c->size_idx][c->zcopy][shape][c->op][r->ti][r->round] = vs;
    }
    print_row(r, c, &res, vs);
    free(res.hist);
    return 0;
}

/*
 * Remove every key (force: the gets hold read leases), then wait out the
 * lease: the master defers reusing the space of a force-removed object until
 * its last lease has expired, and the next case wants the whole budget.
 */
static int clean(sb_run *r)
{
    char line[128];
    if (send_line(&r->peers[0].child, "clean\n") < 0 ||
        cb_child_read_line(&r->peers[0].child, line, sizeof(line), CHILD_TIMEOUT) < 0 ||
        line[0] != 'C') {
        fprintf(stderr, CB_PROG " store: clean-up failed\n");
        return -1;
    }
    struct timespec ts = {(time_t)((r->o->lease_ms + 100) / 1000),
                          (long)((r->o->lease_ms + 100) % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return 0;
}

/*
 * Warm-up: fill each peer segment once up to the budget with large values
 * and remove them again, so the timed cases write into committed pages (as
 * a long-running cache does) and every connection and mapping exists.
 */
static int warm_up(sb_run *r)
{
    const sb_opts *o = r->o;
    uint64_t size = max_size(o) * o->batch;
    if (size > WARM_MAX)
        size = WARM_MAX;
    sb_case c = {KIND_STORE, OP_PUT, true, 0, 1, size, 60.0, true};
    r->threads = o->threads;
    if (o->fresh) { /* connections and mappings only: a few small values */
        c.size = 4 * CB_KIB;
        c.duration = 0.05;
    }
    r->gid++;
    if (run_case(r, &c) < 0)
        return -1;
    return clean(r);
}

static int run_all_threads(sb_run *r);

/* The median of v[0..n) (zeros, "not measured", count as values). */
static double median_of(const double *v, unsigned n)
{
    double lo, med, hi;
    cb_range(v, n, &lo, &med, &hi);
    return med;
}

/* After the last round: every figure the summary reads is the median over the rounds. */
static void take_medians(sb_run *r)
{
    unsigned n = r->o->rounds;
    double *g = &r->gbps[0][0][0][0][0], *v = &r->vs_engine[0][0][0][0][0];
    const double *gr = &r->gbps_r[0][0][0][0][0][0], *vr = &r->vs_r[0][0][0][0][0][0];
    for (size_t i = 0; i < sizeof(r->gbps) / sizeof(double); i++) {
        g[i] = median_of(gr + i * MAX_ROUNDS, n);
        v[i] = median_of(vr + i * MAX_ROUNDS, n);
    }
    for (int op = 0; op < 2; op++)
        for (int sh = 0; sh < 2; sh++)
            r->target[op][sh] = median_of(r->target_r[op][sh], n);
    r->keys4k_put = median_of(r->keys4k_r[OP_PUT], n);
    r->keys4k_get = median_of(r->keys4k_r[OP_GET], n);
}

/* --rounds: the whole case list (engine baselines and store cases) runs once per round, so
 * the two alternate and a slow minute of this machine lands on both; the summary reports
 * the median of each figure over the rounds. */
static int run_all(sb_run *r)
{
    const sb_opts *o = r->o;
    for (r->round = 0; r->round < o->rounds; r->round++) {
        if (o->rounds > 1 && !o->json && !o->quiet) {
            printf("-- round %u of %u\n", r->round + 1, o->rounds);
            fflush(stdout);
        }
        for (size_t ti = 0; ti < o->n_threads; ti++) {
            r->ti = ti;
            r->threads = o->thread_list[ti];
            if (run_all_threads(r) < 0)
                return -1;
        }
    }
    take_medians(r);
    return 0;
}

static int run_all_threads(sb_run *r)
{
    const sb_opts *o = r->o;
    for (size_t si = 0; si < o->n_sizes; si++) {
        uint32_t shapes[2] = {1, o->batch};
        bool want_shape[2] = {o->single, o->batched && o->batch > 1};
        if (o->batch == 1)
            want_shape[0] = true;
        if (!o->no_baseline) {
            /* Untimed: the engine writes once over the whole target area first, so the timed
             * baseline, like the store cases after the warm-up, moves bytes into committed
             * pages this process has mapped (a first write per page costs ~6 us here). */
            sb_case warm = {KIND_SHM, OP_PUT,     true, si, want_shape[1] ? o->batch : 1,
                            0,        SHM_WARM_S, true};
            if (run_case(r, &warm) < 0)
                return -1;
            for (int op = OP_PUT; op <= OP_GET; op++) {
                for (int sh = 0; sh < 2; sh++) {
                    if (!want_shape[sh])
                        continue;
                    sb_case c = {KIND_SHM, op, true, si, shapes[sh], 0, 0, false};
                    if (run_case(r, &c) < 0)
                        return -1;
                }
            }
        }
        for (int m = 0; m < 2; m++) {
            if (!(m == 0 ? o->zcopy : o->copy))
                continue;
            for (int sh = 0; sh < 2; sh++) {
                if (!want_shape[sh])
                    continue;
                r->gid++;
                if (o->fresh && respawn_holders(r) < 0)
                    return -1;
                for (int op = OP_PUT; op <= OP_GET; op++) {
                    sb_case c = {KIND_STORE, op, m == 0, si, shapes[sh], 0, 0, false};
                    if (run_case(r, &c) < 0)
                        return -1;
                }
                if (clean(r) < 0)
                    return -1;
            }
        }
    }
    return 0;
}

/* Mooncake's figures recorded in issue 12 (1 client thread, tcp, batch 16, MB/s). */
typedef struct sb_mooncake_row {
    const char *call;
    uint64_t size;
    int zcopy, batched, op;
    double mooncake_mbps;
} sb_mooncake_row;

static const sb_mooncake_row mooncake_rows[] = {
    {"get (copying, single)", 1 << 20, 0, 0, OP_GET, 911},
    {"put (copying, single)", 1 << 20, 0, 0, OP_PUT, 543},
    {"batch_get_into (zero-copy)", 1 << 20, 1, 1, OP_GET, 1240},
    {"batch_put_from (zero-copy)", 1 << 20, 1, 1, OP_PUT, 1296},
    {"batch_put_from (zero-copy)", 16 << 20, 1, 1, OP_PUT, 1368},
};

/*
 * --vs-mooncake: the calls of issue 12's table, this run's figures next to
 * Mooncake's recorded ones (another run: a rough ratio) and, with
 * --baseline, to the physical floor measured in this run.
 */
static void print_vs_mooncake(sb_run *r)
{
    const sb_opts *o = r->o;
    printf(
        "\nvs Mooncake (its figures recorded in issue 12: tcp, 1 client thread, batch 16, another "
        "run and machine state; a rough ratio)\n");
    printf("%-28s %6s %4s %10s %10s %7s %8s", "call", "value", "thr", "MB/s", "Mooncake", "ratio",
           "x engine");
    if (r->have_physical)
        printf(" %8s %8s", "x sock", "x memcpy");
    printf("\n");
    for (size_t ti = 0; ti < o->n_threads; ti++) {
        for (size_t k = 0; k < sizeof(mooncake_rows) / sizeof(mooncake_rows[0]); k++) {
            const sb_mooncake_row *m = &mooncake_rows[k];
            size_t si = 0;
            while (si < o->n_sizes && o->sizes[si] != m->size)
                si++;
            if (si == o->n_sizes || (m->batched && o->batch == 1))
                continue;
            double g = r->gbps[si][m->zcopy][m->batched][m->op][ti];
            if (g <= 0)
                continue;
            char sz[32], ratio[16] = "-";
            if (o->thread_list[ti] == 1)
                snprintf(ratio, sizeof(ratio), "%.2f", g * 1000 / m->mooncake_mbps);
            char vse[16] = "-";
            double v = r->vs_engine[si][m->zcopy][m->batched][m->op][ti];
            if (v > 0)
                snprintf(vse, sizeof(vse), "%.3f", v);
            printf("%-28s %6s %4u %10.0f %10.0f %7s %8s", m->call,
                   cb_format_size(m->size, sz, sizeof(sz)), o->thread_list[ti], g * 1000,
                   m->mooncake_mbps, ratio, vse);
            if (r->have_physical)
                printf(" %8.3f %8.3f", g / r->sock.gbps, g / r->mem.gbps);
            if (o->rounds > 1 && v > 0) {
                double lo, med, hi;
                cb_range(r->vs_r[si][m->zcopy][m->batched][m->op][ti], o->rounds, &lo, &med, &hi);
                printf("  x engine per round %.3f..%.3f", lo, hi);
            }
            printf("\n");
        }
    }
    printf("(x engine: over the store engine's own transfer of the same size, direction and "
           "shape in this run, the \"shm\" rows above; with --protocol auto or shm on one host "
           "that is the shm transport, issue 12's target >= 0.7)\n");
    if (o->rounds > 1)
        printf("(every figure of this table: the median over %u rounds)\n", o->rounds);
    if (strcmp(o->protocol, "tcp") == 0)
        return;
    for (size_t ti = 0; ti < o->n_threads; ti++) {
        size_t si = 0;
        while (si < o->n_sizes && o->sizes[si] != CB_MIB)
            si++;
        if (si == o->n_sizes)
            break;
        const double *v[4] = {
            &r->vs_engine[si][0][0][OP_GET][ti], &r->vs_engine[si][0][0][OP_PUT][ti],
            &r->vs_engine[si][1][1][OP_GET][ti], &r->vs_engine[si][1][1][OP_PUT][ti]};
        bool all = true, any = false;
        for (int k = 0; k < 4; k++) {
            all = all && *v[k] >= 0.7;
            any = any || *v[k] > 0;
        }
        if (any)
            printf("1 MiB, %u thread(s), %s, x the engine's path (target >= 0.7): get %.3f, put "
                   "%.3f, batch_get_into %.3f, batch_put_from %.3f  (%s)\n",
                   o->thread_list[ti], o->protocol, *v[0], *v[1], *v[2], *v[3],
                   all ? "met" : "NOT met");
    }
}

static void print_summary(sb_run *r)
{
    const sb_opts *o = r->o;
    if (o->json || o->quiet)
        return;
    if (o->vs_mooncake)
        print_vs_mooncake(r);
    for (int sh = 0; sh < 2; sh++) {
        double p = r->target[OP_PUT][sh], g = r->target[OP_GET][sh];
        if (p > 0 || g > 0)
            printf("1 MiB zero-copy %s vs the shm transport (target >= 0.7): put %.3f, get "
                   "%.3f%s\n",
                   sh ? "batch" : "single", p, g, p >= 0.7 && g >= 0.7 ? "  (met)" : "  (NOT met)");
    }
    if (r->keys4k_put > 0 || r->keys4k_get > 0)
        printf("4 KiB zero-copy in batches of %u: put %.0f keys/s, get %.0f keys/s\n", o->batch,
               r->keys4k_put, r->keys4k_get);
}

static int orchestrator_main(const sb_opts *o)
{
    sb_run *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return CB_EXIT_FAIL;
    r->o = o;
    r->progress = !o->quiet && !o->json && isatty(STDERR_FILENO);
    ct_proc_init(&r->master.m.p);
    /* Children log only errors unless the user asked for more. */
    setenv("CRESCENT_LOG", "error", 0);
    int rc = CB_EXIT_FAIL;
    if (o->physical) { /* first, while nothing else of ours competes for the cores */
        char err[256];
        if (cb_baseline_socket(o->subcmd, o->duration, 0, &r->sock, err, sizeof(err)) < 0 ||
            cb_baseline_socket_streams(o->subcmd, 2, o->duration, 0, &r->sock2, err, sizeof(err)) <
                0 ||
            cb_baseline_memcpy(o->duration, 0, &r->mem, err, sizeof(err)) < 0 ||
            cb_baseline_pingpong(o->subcmd, 4096, o->duration, &r->pp, err, sizeof(err)) < 0) {
            fprintf(stderr, CB_PROG " store: %s\n", err);
            free(r);
            return CB_EXIT_FAIL;
        }
        r->have_physical = true;
        if (!o->json)
            printf("baseline tcp socket (1 MiB send/recv, loopback): 1 stream %.3f GB/s, 2 "
                   "streams %.3f GB/s; memcpy (1 thread, 1 MiB blocks): %.3f GB/s; tcp ping-pong "
                   "(32 B request, 4 KiB reply): p50 %.1f us, p99 %.1f us\n",
                   r->sock.gbps, r->sock2.gbps, r->mem.gbps, r->pp.p50_us, r->pp.p99_us);
    }
    if (o->master_addr != NULL) {
        snprintf(r->master.addr, sizeof(r->master.addr), "%s", o->master_addr);
    } else if (master_spawn(o, &r->master) < 0) {
        free(r);
        return CB_EXIT_FAIL;
    }
    if (spawn_clients(r) < 0)
        goto out;
    if (!o->json && !o->quiet) {
        char seg[32], buf[32];
        printf("master %s (%s); %u clients, %u driver(s) x %u thread(s); segment %s, local "
               "buffer %s, protocol %s\n",
               r->master.addr, o->master_addr ? "given" : "spawned", o->clients, o->drivers,
               o->threads, cb_format_bytes(o->segment_size, seg, sizeof(seg)),
               cb_format_bytes(o->buffer_size, buf, sizeof(buf)), o->protocol);
        printf("ops/s = keys/s; latency per call (batch calls cover %u keys); x shm = GB/s over "
               "the engine's shm path, same size/direction/shape\n",
               o->batch);
        fflush(stdout);
    }
    if (o->async) {
        if (sb_async_run(r->master.addr, o->protocol, o->sizes[0], 1024, o->async_depth,
                         o->async_rounds, o->duration, o->verify, o->json) == 0)
            rc = CB_EXIT_OK;
        goto out;
    }
    if (warm_up(r) < 0 || run_all(r) < 0)
        goto out;
    print_summary(r);
    rc = CB_EXIT_OK;
out:
    stop_clients(r, rc == CB_EXIT_OK);
    if (master_stop(&r->master) < 0 || r->failures > 0)
        rc = CB_EXIT_FAIL;
    free(r);
    return rc;
}

int cb_store_main(int argc, char **argv)
{
    sb_opts o;
    int r = parse_opts(argc, argv, &o);
    if (r != 0)
        return r > 0 ? CB_EXIT_OK : CB_EXIT_USAGE;
    if (strcmp(o.role, "client") == 0)
        return client_main(&o);
    if (strcmp(o.role, "sink") == 0 || strcmp(o.role, "sink-fresh") == 0)
        return cb_sink_main(strcmp(o.role, "sink-fresh") == 0);
    if (strcmp(o.role, "echo") == 0)
        return cb_echo_main();
    return orchestrator_main(&o);
}
