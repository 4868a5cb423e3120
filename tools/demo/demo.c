/*
 * demo.c - crescent-demo: the store end to end on one machine, in a few
 * seconds. `bash scripts/demo.sh` builds and runs it.
 *
 * What it does (everything on 127.0.0.1, P2PHANDSHAKE, no other server):
 *   1. starts a crescent-master (--client_ttl=2) and three client processes
 *      (this binary, --role client), each contributing a 512 MiB segment;
 *   2. every client writes a KV-cache-like mix, all with replica_num 2:
 *      batches of 32 blocks of 16-256 KiB from registered memory
 *      (batch_put_from), single 4 KiB-4 MiB blocks from registered memory
 *      (put_from), single 4-512 KiB copies (put) and batches of 16 small
 *      copies (batch_put); client C also puts 8 single-replica objects on
 *      its own segment;
 *   3. every client reads another client's objects back with the matching
 *      read calls (batch_get_into, get_into, get, batch_get) and checks
 *      every byte against the value's pattern;
 *   4. shows memory use from the master's /metrics and /get_segments_detail;
 *   5. kills client C with SIGKILL: client A reads all ~1,900 objects again
 *      (every one has a replica outside C), waits until the master expires
 *      C, reads them all once more and shows C's single-replica objects gone;
 *   6. prints a summary table (operations/s, GB/s, latency p50/p99 per kind
 *      of call) and stops everything: clients by "quit", the master by
 *      SIGTERM; both exit statuses are checked.
 * Exit status 0 when every step succeeded and every byte matched; otherwise
 * 1 and a message saying which step failed and why.
 *
 * Design: the orchestrator drives the clients over their stdin/stdout, one
 * command line each, answered by "S ..." statistics lines and one
 * "DONE <errors> <verified> <missing> <wrong> <message>" line. The workload
 * is a pure function of (writer, class, index) - sizes and contents - so a
 * reader regenerates what it expects and only statistics cross the pipes.
 * Latency is per call (a batch call covers its whole batch); ops/s and GB/s
 * are objects and value bytes over the time spent inside those calls, one
 * call in flight per client; each phase also prints its aggregate wall-clock
 * rate. Paths: --master-bin, else ../master/crescent-master next to this
 * binary's folder, else crescent-master on PATH.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "master_proc.h"
#include "options.h"
#include "tool_util.h"
#include "crescent/store.h"

#define N_CLIENTS  3
#define SEGMENT    (512ull << 20)
#define LOCAL_BUF  (16ull << 20)
#define REGION     (16ull << 20)
#define CLIENT_TTL 2 /* s: how soon the master forgets a dead client */
#define LINE       65536
#define TIMEOUT_MS 30000

/* ------------------------------------------------------------------------ */
/* small helpers                                                            */
/* ------------------------------------------------------------------------ */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Byte i of a value with this seed: byte i%8 of splitmix(seed + i/8). */
static void fill(uint8_t *p, uint64_t len, uint64_t seed)
{
    uint64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = splitmix(seed + i / 8);
        memcpy(p + i, &w, 8); /* little-endian hosts; check() mirrors it */
    }
    if (i < len) {
        uint64_t w = splitmix(seed + i / 8);
        memcpy(p + i, &w, len - i);
    }
}

static bool check(const uint8_t *p, uint64_t len, uint64_t seed)
{
    uint64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = splitmix(seed + i / 8);
        if (memcmp(p + i, &w, 8) != 0)
            return false;
    }
    if (i < len) {
        uint64_t w = splitmix(seed + i / 8);
        if (memcmp(p + i, &w, len - i) != 0)
            return false;
    }
    return true;
}

/* Log-linear latency histogram: 16 sub-buckets per power of two of ns. */
#define HB 1024
typedef struct hist {
    uint64_t c[HB];
    uint64_t n;
} hist;

static size_t hidx(uint64_t v)
{
    if (v < 16)
        return (size_t)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    size_t i = (size_t)(msb - 3) * 16 + (size_t)((v >> (msb - 4)) & 15);
    return i < HB ? i : HB - 1;
}

static uint64_t hmid(size_t i)
{
    if (i < 16)
        return i;
    unsigned msb = (unsigned)(i / 16) + 3;
    uint64_t lo = (16u + i % 16) << (msb - 4);
    return lo + ((uint64_t)1 << (msb - 4)) / 2;
}

static uint64_t hq(const hist *h, double q)
{
    if (h->n == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)h->n + 0.999999), seen = 0;
    for (size_t i = 0; i < HB; i++) {
        seen += h->c[i];
        if (seen >= rank && h->c[i] > 0)
            return hmid(i);
    }
    return hmid(HB - 1);
}

/* ------------------------------------------------------------------------ */
/* the workload: a pure function of (writer, class, index)                  */
/* ------------------------------------------------------------------------ */

enum { W_ZBATCH, W_ZSINGLE, W_CSINGLE, W_CBATCH, R_ZBATCH, R_ZSINGLE, R_CSINGLE, R_CBATCH, N_OPS };

static const char *const op_names[N_OPS] = {
    "batch_put_from (zero-copy)", "put_from (zero-copy)", "put (copying)", "batch_put (copying)",
    "batch_get_into (zero-copy)", "get_into (zero-copy)", "get (copying)", "batch_get (copying)",
};

#define ZB_BATCHES 12
#define ZB_PER     32
#define ZS_COUNT   24
#define CS_COUNT   96
#define CB_BATCHES 8
#define CB_PER     16
#define SOLO_COUNT 8

static uint64_t obj_size(int cls, int i)
{
    static const uint64_t zb[] = {16 << 10, 64 << 10, 128 << 10, 256 << 10};
    static const uint64_t zs[] = {1 << 20,   4 << 20,        (2 << 20) + 4096,
                                  512 << 10, (3 << 20) - 64, 4 << 10};
    switch (cls) {
    case W_ZBATCH:
        return zb[(i / ZB_PER) % 4];
    case W_ZSINGLE:
        return zs[i % 6];
    case W_CSINGLE:
        return (4096ull << (i % 8)) + (uint64_t)(i % 3) * 100;
    default:
        return (4096ull << (i % 4)) - (uint64_t)(i % 5) * 8;
    }
}

static const char *const class_tags[] = {"zb", "zs", "cs", "cb"};

static void obj_key(char *buf, size_t len, char writer, int cls, int i)
{
    snprintf(buf, len, "demo/kv/%c/%s/%04d", writer, class_tags[cls], i);
}

static uint64_t obj_seed(char writer, int cls, int i)
{
    return splitmix(((uint64_t)(unsigned char)writer << 40) ^ ((uint64_t)cls << 32) ^ (uint64_t)i);
}

/* ------------------------------------------------------------------------ */
/* client role                                                              */
/* ------------------------------------------------------------------------ */

typedef struct op_stat {
    uint64_t calls, keys, bytes, ns;
    hist h;
} op_stat;

typedef struct client {
    cr_store *s;
    uint8_t *region;
    char name[256];
    op_stat st[N_OPS];
    int errors;
    uint64_t verified, missing, wrong;
    char msg[512];
} client;

static void note_error(client *c, const char *what, int64_t rc)
{
    c->errors++;
    if (c->msg[0] == '\0')
        snprintf(c->msg, sizeof(c->msg), "%s: %s", what,
                 rc < 0 ? cr_last_error_message() : "wrong bytes");
}

static void account(client *c, int op, uint64_t t0, uint64_t keys, uint64_t bytes)
{
    uint64_t dt = now_ns() - t0;
    op_stat *s = &c->st[op];
    s->calls++;
    s->keys += keys;
    s->bytes += bytes;
    s->ns += dt;
    s->h.c[hidx(dt)]++;
    s->h.n++;
}

static void report(client *c)
{
    for (int op = 0; op < N_OPS; op++) {
        op_stat *s = &c->st[op];
        if (s->calls == 0)
            continue;
        printf("S %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, op, s->calls, s->keys, s->bytes,
               s->ns);
        for (size_t i = 0; i < HB; i++)
            if (s->h.c[i])
                printf(" %zu:%" PRIu64, i, s->h.c[i]);
        printf("\n");
    }
    printf("DONE %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %s\n", c->errors, c->verified, c->missing,
           c->wrong, c->msg[0] ? c->msg : "ok");
    fflush(stdout);
    memset(c->st, 0, sizeof(c->st));
    c->errors = 0;
    c->verified = c->missing = c->wrong = 0;
    c->msg[0] = '\0';
}

static void write_all(client *c, char w)
{
    cr_replicate_config rc2;
    cr_replicate_config_init(&rc2);
    rc2.replica_num = 2;
    char keys[ZB_PER][64];
    const char *kp[ZB_PER];
    void *bufs[ZB_PER];
    size_t sizes[ZB_PER];
    int res[ZB_PER];
    /* Batches of KV blocks from registered memory. */
    for (int b = 0; b < ZB_BATCHES; b++) {
        uint64_t off = 0, bytes = 0;
        for (int k = 0; k < ZB_PER; k++) {
            int i = b * ZB_PER + k;
            obj_key(keys[k], sizeof(keys[k]), w, W_ZBATCH, i);
            kp[k] = keys[k];
            sizes[k] = obj_size(W_ZBATCH, i);
            bufs[k] = c->region + off;
            fill(bufs[k], sizes[k], obj_seed(w, W_ZBATCH, i));
            off += sizes[k];
            bytes += sizes[k];
        }
        uint64_t t0 = now_ns();
        int rc = cr_store_batch_put_from(c->s, kp, bufs, sizes, ZB_PER, &rc2, res);
        account(c, W_ZBATCH, t0, ZB_PER, bytes);
        for (int k = 0; k < ZB_PER; k++)
            if (rc < 0 || res[k] < 0)
                note_error(c, "batch_put_from", rc < 0 ? rc : res[k]);
    }
    /* Single large blocks from registered memory. */
    for (int i = 0; i < ZS_COUNT; i++) {
        char key[64];
        obj_key(key, sizeof(key), w, W_ZSINGLE, i);
        uint64_t n = obj_size(W_ZSINGLE, i);
        fill(c->region, n, obj_seed(w, W_ZSINGLE, i));
        uint64_t t0 = now_ns();
        int rc = cr_store_put_from(c->s, key, c->region, n, &rc2);
        account(c, W_ZSINGLE, t0, 1, n);
        if (rc < 0)
            note_error(c, "put_from", rc);
    }
    /* Copies from ordinary heap memory. */
    uint8_t *heap = malloc(1 << 20);
    for (int i = 0; heap != NULL && i < CS_COUNT; i++) {
        char key[64];
        obj_key(key, sizeof(key), w, W_CSINGLE, i);
        uint64_t n = obj_size(W_CSINGLE, i);
        fill(heap, n, obj_seed(w, W_CSINGLE, i));
        uint64_t t0 = now_ns();
        int rc = cr_store_put(c->s, key, heap, n, &rc2);
        account(c, W_CSINGLE, t0, 1, n);
        if (rc < 0)
            note_error(c, "put", rc);
    }
    for (int b = 0; heap != NULL && b < CB_BATCHES; b++) {
        uint64_t off = 0, bytes = 0;
        const void *vals[CB_PER];
        for (int k = 0; k < CB_PER; k++) {
            int i = b * CB_PER + k;
            obj_key(keys[k], sizeof(keys[k]), w, W_CBATCH, i);
            kp[k] = keys[k];
            sizes[k] = obj_size(W_CBATCH, i);
            vals[k] = heap + off;
            fill(heap + off, sizes[k], obj_seed(w, W_CBATCH, i));
            off += sizes[k];
            bytes += sizes[k];
        }
        uint64_t t0 = now_ns();
        int rc = cr_store_batch_put(c->s, kp, vals, sizes, CB_PER, &rc2, res);
        account(c, W_CBATCH, t0, CB_PER, bytes);
        for (int k = 0; k < CB_PER; k++)
            if (rc < 0 || res[k] < 0)
                note_error(c, "batch_put", rc < 0 ? rc : res[k]);
    }
    if (heap == NULL)
        note_error(c, "malloc", -1);
    free(heap);
}

/* Judge one read: size or status r of object (cls, i) of writer w in p. */
static void judge(client *c, int64_t r, const uint8_t *p, char w, int cls, int i)
{
    if (r == CR_OBJECT_NOT_FOUND) {
        c->missing++;
        char what[96];
        snprintf(what, sizeof(what), "object %c/%s/%d is missing", w, class_tags[cls], i);
        note_error(c, what, r);
    } else if (r < 0) {
        note_error(c, "read", r);
    } else if ((uint64_t)r != obj_size(cls, i) || !check(p, (uint64_t)r, obj_seed(w, cls, i))) {
        c->wrong++;
        char what[96];
        snprintf(what, sizeof(what), "object %c/%s/%d has WRONG BYTES", w, class_tags[cls], i);
        note_error(c, what, 1);
    } else {
        c->verified++;
    }
}

static void read_all(client *c, char w)
{
    char keys[ZB_PER][64];
    const char *kp[ZB_PER];
    void *bufs[ZB_PER];
    size_t sizes[ZB_PER];
    int64_t res[ZB_PER];
    for (int b = 0; b < ZB_BATCHES; b++) {
        uint64_t off = 0, bytes = 0;
        for (int k = 0; k < ZB_PER; k++) {
            int i = b * ZB_PER + k;
            obj_key(keys[k], sizeof(keys[k]), w, W_ZBATCH, i);
            kp[k] = keys[k];
            sizes[k] = obj_size(W_ZBATCH, i);
            bufs[k] = c->region + off;
            off += sizes[k];
            bytes += sizes[k];
        }
        memset(c->region, 0, off);
        uint64_t t0 = now_ns();
        int rc = cr_store_batch_get_into(c->s, kp, bufs, sizes, ZB_PER, res);
        account(c, R_ZBATCH, t0, ZB_PER, bytes);
        for (int k = 0; k < ZB_PER; k++)
            judge(c, rc < 0 ? rc : res[k], bufs[k], w, W_ZBATCH, b * ZB_PER + k);
    }
    for (int i = 0; i < ZS_COUNT; i++) {
        char key[64];
        obj_key(key, sizeof(key), w, W_ZSINGLE, i);
        memset(c->region, 0, obj_size(W_ZSINGLE, i));
        uint64_t t0 = now_ns();
        int64_t r = cr_store_get_into(c->s, key, c->region, REGION);
        account(c, R_ZSINGLE, t0, 1, r > 0 ? (uint64_t)r : 0);
        judge(c, r, c->region, w, W_ZSINGLE, i);
    }
    for (int i = 0; i < CS_COUNT; i++) {
        char key[64];
        obj_key(key, sizeof(key), w, W_CSINGLE, i);
        void *v = NULL;
        uint64_t t0 = now_ns();
        int64_t r = cr_store_get(c->s, key, &v);
        account(c, R_CSINGLE, t0, 1, r > 0 ? (uint64_t)r : 0);
        judge(c, r, v, w, W_CSINGLE, i);
        free(v);
    }
    for (int b = 0; b < CB_BATCHES; b++) {
        void *vals[CB_PER] = {0};
        uint64_t bytes = 0;
        for (int k = 0; k < CB_PER; k++) {
            obj_key(keys[k], sizeof(keys[k]), w, W_CBATCH, b * CB_PER + k);
            kp[k] = keys[k];
            bytes += obj_size(W_CBATCH, b * CB_PER + k);
        }
        uint64_t t0 = now_ns();
        int rc = cr_store_batch_get(c->s, kp, CB_PER, vals, res);
        account(c, R_CBATCH, t0, CB_PER, bytes);
        for (int k = 0; k < CB_PER; k++) {
            judge(c, rc < 0 ? rc : res[k], vals[k], w, W_CBATCH, b * CB_PER + k);
            free(vals[k]);
        }
    }
}

/* Single-replica objects placed on this client's own segment. */
static void solo_put(client *c)
{
    cr_replicate_config one;
    cr_replicate_config_init(&one);
    const char *pref[1] = {c->name};
    one.preferred_segments = pref;
    one.n_preferred = 1;
    uint8_t *v = malloc(256 << 10);
    for (int i = 0; v != NULL && i < SOLO_COUNT; i++) {
        char key[64];
        snprintf(key, sizeof(key), "demo/solo/%04d", i);
        fill(v, 256 << 10, obj_seed('S', 9, i));
        int rc = cr_store_put(c->s, key, v, 256 << 10, &one);
        if (rc < 0)
            note_error(c, "solo put", rc);
    }
    if (v == NULL)
        note_error(c, "malloc", -1);
    free(v);
}

/* Read the solo objects: verified, missing or wrong (counted in report). */
static void solo_check(client *c)
{
    for (int i = 0; i < SOLO_COUNT; i++) {
        char key[64];
        snprintf(key, sizeof(key), "demo/solo/%04d", i);
        void *v = NULL;
        int64_t r = cr_store_get(c->s, key, &v);
        if (r == CR_OBJECT_NOT_FOUND) {
            c->missing++;
        } else if (r < 0) {
            note_error(c, "solo get", r);
        } else if (r != (256 << 10) || !check(v, (uint64_t)r, obj_seed('S', 9, i))) {
            c->wrong++;
            note_error(c, "solo object has WRONG BYTES", 1);
        } else {
            c->verified++;
        }
        free(v);
    }
}

static int client_main(const char *master)
{
    client *c = calloc(1, sizeof(*c));
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = master;
    cfg.global_segment_size = SEGMENT;
    cfg.local_buffer_size = LOCAL_BUF;
    cfg.rpc_timeout_ms = 3000;
    cfg.transfer_timeout_ms = 5000;
    int rc = c != NULL ? cr_store_setup(&cfg, &c->s) : CR_ERR_NO_MEMORY;
    if (rc == 0)
        rc = cr_alloc_shared(REGION, (void **)&c->region);
    if (rc == 0)
        rc = cr_store_register_buffer(c->s, c->region, REGION);
    if (rc < 0) {
        printf("FAIL %s\n", cr_last_error_message());
        return 1;
    }
    cr_store_hostname(c->s, c->name, sizeof(c->name));
    printf("READY %s\n", c->name);
    fflush(stdout);
    char line[256];
    while (fgets(line, sizeof(line), stdin) != NULL) {
        char cmd[32] = "", arg[32] = "";
        sscanf(line, "%31s %31s", cmd, arg);
        if (strcmp(cmd, "write") == 0) {
            write_all(c, arg[0]);
            report(c);
        } else if (strcmp(cmd, "read") == 0) {
            for (const char *w = arg; *w; w++)
                read_all(c, *w);
            report(c);
        } else if (strcmp(cmd, "solo_put") == 0) {
            solo_put(c);
            report(c);
        } else if (strcmp(cmd, "solo_get") == 0) {
            solo_check(c);
            report(c);
        } else if (strcmp(cmd, "remove_all") == 0) {
            int64_t n = cr_store_remove_all(c->s, false);
            if (n < 0)
                note_error(c, "remove_all", n);
            c->verified = n > 0 ? (uint64_t)n : 0;
            report(c);
        } else if (strcmp(cmd, "stats") == 0) {
            cr_engine_stats es = {0};
            cr_engine_get_stats(cr_store_engine(c->s), &es);
            printf("STATS %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", es.bytes_local,
                   es.bytes_shm, es.bytes_cma, es.bytes_tcp);
            fflush(stdout);
        } else if (strcmp(cmd, "quit") == 0) {
            break;
        }
    }
    cr_store_unregister_buffer(c->s, c->region);
    cr_store_destroy(c->s);
    cr_free_shared(c->region);
    free(c);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* orchestrator                                                             */
/* ------------------------------------------------------------------------ */

/* A child: crescent-master (ct_master) or a client (this binary, --role
 * client) through the shared spawner (tools/common/proc.h). */
typedef struct proc {
    ct_proc c;
    char name[256];
    char tag;
} proc;

static ct_master master_p;
static proc clients[N_CLIENTS];
static uint16_t master_port, metrics_port;
static op_stat totals[N_OPS];
static double mem_alloc[2], mem_cap[2], mem_segs[2]; /* after the writes; after C's expiry */

static int spawn_client(proc *p, const char *const argv[])
{
    /* SIGTERM on our death: a client never outlives the demo, and exits
     * cleanly (unmounting its segment) when it can. */
    ct_spawn_opts o = {.pipe_stdin = true, .pipe_stdout = true, .death_signal = SIGTERM};
    return ct_proc_spawn(&p->c, argv, &o);
}

static int read_line(proc *p, char *buf, size_t len, int timeout_ms)
{
    return ct_proc_read_line(&p->c, buf, len, timeout_ms);
}

static int send_cmd(proc *p, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return ct_proc_send(&p->c, buf);
}

/* Wait for p to exit (up to ms, then SIGKILL); its exit status, or -1. */
static int reap(proc *p, int ms)
{
    if (p->c.pid <= 0)
        return 0;
    int st = ct_proc_stop(&p->c, 0, ms);
    return st >= 128 ? -1 : st;
}

static void kill_all(void)
{
    ct_proc_kill_all();
}

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "\ncrescent-demo: FAILED: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    kill_all();
    return 1;
}

static int http_get(const char *path, char *out, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(metrics_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {5, 0};
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char req[256];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    ssize_t r;
    while (got + 1 < cap && (r = read(fd, out + got, cap - 1 - got)) > 0)
        got += (size_t)r;
    close(fd);
    out[got] = '\0';
    char *body = strstr(out, "\r\n\r\n");
    if (strncmp(out, "HTTP/1.1 200", 12) != 0 || body == NULL)
        return -1;
    memmove(out, body + 4, strlen(body + 4) + 1);
    return 0;
}

static double metric(const char *name)
{
    static char body[1 << 20];
    if (http_get("/metrics", body, sizeof(body)) < 0)
        return -1;
    size_t n = strlen(name);
    for (char *p = body; p != NULL && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

static const char *mib(double bytes, char *buf, size_t len)
{
    if (bytes >= (double)(1ull << 30))
        snprintf(buf, len, "%.2f GiB", bytes / (double)(1ull << 30));
    else
        snprintf(buf, len, "%.1f MiB", bytes / (double)(1ull << 20));
    return buf;
}

static int show_memory(int slot, const char *when)
{
    static char body[1 << 16];
    double alloc = metric("master_allocated_bytes"), cap = metric("master_total_capacity_bytes");
    double keys = metric("master_key_count");
    if (alloc < 0 || cap < 0 || http_get("/get_segments_detail", body, sizeof(body)) < 0)
        return -1;
    mem_alloc[slot] = alloc;
    mem_cap[slot] = cap;
    mem_segs[slot] = metric("master_segments");
    char a[32], c[32];
    printf("      memory %s: %s allocated of %s in the segments, %.0f objects\n", when,
           mib(alloc, a, sizeof(a)), mib(cap, c, sizeof(c)), keys);
    /* {"total_segments":N,"segments":[{"segment_id":..,"size_bytes":..,
     *  "allocator_used_bytes":..,...,"segment_name":"..."},...]} */
    for (char *p = strstr(body, "{\"segment_id\":"); p != NULL;
         p = strstr(p + 1, "{\"segment_id\":")) {
        char name[256] = "";
        unsigned long long size = 0, used = 0;
        char *n = strstr(p, "\"segment_name\":\"");
        if (n != NULL)
            sscanf(n, "\"segment_name\":\"%255[^\"]\"", name);
        char *s = strstr(p, "\"size_bytes\":"), *u = strstr(p, "\"allocator_used_bytes\":");
        if (s != NULL)
            size = strtoull(s + 13, NULL, 10);
        if (u != NULL)
            used = strtoull(u + 23, NULL, 10);
        char tag = '?';
        for (int i = 0; i < N_CLIENTS; i++)
            if (strcmp(clients[i].name, name) == 0)
                tag = clients[i].tag;
        printf("        segment %-22s (client %c) %9s used of %s\n", name, tag,
               mib((double)used, a, sizeof(a)), mib((double)size, c, sizeof(c)));
    }
    return 0;
}

/* Read a client's S lines into totals and its DONE line; returns errors or -1. */
typedef struct done {
    int errors;
    uint64_t verified, missing, wrong;
    char msg[600];
} done;

static int collect(proc *p, done *d)
{
    static char line[LINE];
    memset(d, 0, sizeof(*d));
    for (;;) {
        if (read_line(p, line, sizeof(line), 120000) < 0) {
            snprintf(d->msg, sizeof(d->msg), "client %c stopped answering", p->tag);
            return -1;
        }
        if (line[0] == 'S') {
            int op, off = 0;
            op_stat s = {0};
            if (sscanf(line + 2, "%d %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 "%n", &op,
                       &s.calls, &s.keys, &s.bytes, &s.ns, &off) != 5 ||
                op < 0 || op >= N_OPS)
                continue;
            char *q = line + 2 + off;
            op_stat *t = &totals[op];
            t->calls += s.calls;
            t->keys += s.keys;
            t->bytes += s.bytes;
            t->ns += s.ns;
            while (*q == ' ') { /* " index:count" pairs */
                unsigned long i = strtoul(q + 1, &q, 10);
                uint64_t c = *q == ':' ? strtoull(q + 1, &q, 10) : 0;
                if (i < HB) {
                    t->h.c[i] += c;
                    t->h.n += c;
                }
            }
        } else if (strncmp(line, "DONE ", 5) == 0) {
            int off = 0;
            sscanf(line + 5, "%d %" SCNu64 " %" SCNu64 " %" SCNu64 " %n", &d->errors, &d->verified,
                   &d->missing, &d->wrong, &off);
            snprintf(d->msg, sizeof(d->msg), "%s", line + 5 + off);
            return d->errors;
        }
    }
}

static uint64_t total_objects(void)
{
    return (uint64_t)N_CLIENTS * (ZB_BATCHES * ZB_PER + ZS_COUNT + CS_COUNT + CB_BATCHES * CB_PER);
}

/* Send cmd (with per-client argument) to clients [from, to) and collect. */
static int phase(int from, int to, const char *cmd, const char *const *args, uint64_t *verified,
                 double *wall_s)
{
    uint64_t t0 = now_ns();
    for (int i = from; i < to; i++)
        if (send_cmd(&clients[i], "%s %s", cmd, args ? args[i] : "") < 0)
            return fail("client %c is gone (%s)", clients[i].tag, cmd);
    uint64_t v = 0;
    for (int i = from; i < to; i++) {
        done d;
        if (collect(&clients[i], &d) != 0)
            return fail("%s on client %c: %d error(s), %" PRIu64 " missing, %" PRIu64
                        " with wrong bytes; first: %s",
                        cmd, clients[i].tag, d.errors, d.missing, d.wrong, d.msg);
        v += d.verified;
    }
    if (verified != NULL)
        *verified = v;
    if (wall_s != NULL)
        *wall_s = (double)(now_ns() - t0) / 1e9;
    return 0;
}

static void print_summary(void)
{
    printf("\n%-28s %7s %8s %10s %10s %8s %9s %9s\n", "call", "calls", "objects", "MiB", "ops/s",
           "GB/s", "p50 us", "p99 us");
    for (int op = 0; op < N_OPS; op++) {
        op_stat *t = &totals[op];
        if (t->calls == 0)
            continue;
        double s = (double)t->ns / 1e9;
        printf("%-28s %7" PRIu64 " %8" PRIu64 " %10.1f %10.0f %8.3f %9.1f %9.1f\n", op_names[op],
               t->calls, t->keys, (double)t->bytes / (double)(1 << 20), (double)t->keys / s,
               (double)t->bytes / s / 1e9, (double)hq(&t->h, 0.50) / 1e3,
               (double)hq(&t->h, 0.99) / 1e3);
    }
    char a0[32], c0[32], a1[32], c1[32];
    printf("memory used (master /metrics): %s allocated of %s in %.0f segments after the writes; "
           "%s of %s in %.0f after C's expiry\n",
           mib(mem_alloc[0], a0, sizeof(a0)), mib(mem_cap[0], c0, sizeof(c0)), mem_segs[0],
           mib(mem_alloc[1], a1, sizeof(a1)), mib(mem_cap[1], c1, sizeof(c1)), mem_segs[1]);
    printf("(ops/s and GB/s: objects and value bytes over the time spent inside those calls, one "
           "call in flight\n per client; latency per call - a batch call covers its whole batch; "
           "replica_num 2, so puts\n write every byte twice.)\n");
}

static int orchestrate(const char *master_bin)
{
    setenv("CRESCENT_LOG", "error", 0); /* children: errors only */
    signal(SIGPIPE, SIG_IGN);
    char path[PATH_MAX + 32];
    const char *bin = master_bin ? master_bin : ct_default_master_bin(path, sizeof(path));
    char ttl[32];
    snprintf(ttl, sizeof(ttl), "--client_ttl=%d", CLIENT_TTL);
    const char *margs[] = {ttl, NULL};
    uint64_t start = now_ns();
    char line[1024];
    ct_master_opts mo = {.bin = bin, .args = margs, .ready_ms = 10000};
    if (ct_master_start(&master_p, &mo) < 0)
        return fail("could not start %s (build it, or pass --master-bin PATH)", bin);
    master_port = master_p.port;
    metrics_port = master_p.metrics_port;
    unsigned p2 = metrics_port;
    char addr[128];
    snprintf(addr, sizeof(addr), "%s", master_p.addr);
    printf("crescent demo: the KV-cache store on one machine (127.0.0.1, P2PHANDSHAKE)\n");
    printf("[1/6] crescent-master on %s (metrics :%u, client_ttl %d s); %d clients, each "
           "contributing a %llu MiB segment:\n",
           addr, p2, CLIENT_TTL, N_CLIENTS, SEGMENT >> 20);
    for (int i = 0; i < N_CLIENTS; i++) {
        clients[i].tag = (char)('A' + i);
        const char *cargv[] = {"/proc/self/exe", "--role", "client", "--master", addr, NULL};
        if (spawn_client(&clients[i], cargv) < 0 ||
            read_line(&clients[i], line, sizeof(line), TIMEOUT_MS) < 0 ||
            strncmp(line, "READY ", 6) != 0)
            return fail("client %c did not start: %s", 'A' + i, line);
        snprintf(clients[i].name, sizeof(clients[i].name), "%.255s", line + 6);
        printf("      client %c  pid %-7d segment %s\n", clients[i].tag, (int)clients[i].c.pid,
               clients[i].name);
    }
    fflush(stdout);

    /*
     * Writes, all clients at once. The first round lands in fresh segment
     * pages (the kernel commits them on first touch); it is removed and the
     * mix written again, as a long-running cache reuses its memory. The
     * summary table shows the second round.
     */
    static const char *const tags[N_CLIENTS] = {"A", "B", "C"};
    double wall = 0, cold = 0;
    uint64_t removed = 0;
    if (phase(0, N_CLIENTS, "write", tags, NULL, &cold) != 0 ||
        phase(0, 1, "remove_all", NULL, &removed, NULL) != 0)
        return 1;
    if (removed != total_objects())
        return fail("remove_all removed %" PRIu64 " objects, expected %" PRIu64, removed,
                    total_objects());
    memset(totals, 0, sizeof(totals));
    if (phase(0, N_CLIENTS, "write", tags, NULL, &wall) != 0)
        return 1;
    uint64_t wbytes = 0;
    for (int op = W_ZBATCH; op <= W_CBATCH; op++)
        wbytes += totals[op].bytes;
    char b1[32];
    printf("[2/6] %d clients at once wrote %" PRIu64 " objects (%s of KV blocks, 4 KiB-4 MiB), "
           "replica_num 2:\n      into fresh segment pages %.2f s (%.2f GB/s of values); removed "
           "them; again into warm pages %.2f s (%.2f GB/s)\n",
           N_CLIENTS, total_objects(), mib((double)wbytes, b1, sizeof(b1)), cold,
           (double)wbytes / cold / 1e9, wall, (double)wbytes / wall / 1e9);
    if (phase(2, 3, "solo_put", NULL, NULL, NULL) != 0)
        return 1;
    printf("      client C also wrote %d single-replica objects on its own segment\n", SOLO_COUNT);

    /* Reads: each client reads the next client's objects. */
    static const char *const next[N_CLIENTS] = {"B", "C", "A"};
    uint64_t verified = 0;
    uint64_t rb0 = 0;
    for (int op = R_ZBATCH; op < N_OPS; op++)
        rb0 += totals[op].bytes;
    if (phase(0, N_CLIENTS, "read", next, &verified, &wall) != 0)
        return 1;
    uint64_t rbytes = 0;
    for (int op = R_ZBATCH; op < N_OPS; op++)
        rbytes += totals[op].bytes;
    rbytes -= rb0;
    printf("[3/6] every client read another client's objects: %" PRIu64 " objects, %s, every "
           "byte verified: %.2f s, %.2f GB/s\n",
           verified, mib((double)rbytes, b1, sizeof(b1)), wall, (double)rbytes / wall / 1e9);
    uint64_t tcp = 0, shm = 0, local = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        uint64_t l = 0, s = 0, c = 0, t = 0;
        if (send_cmd(&clients[i], "stats") == 0 &&
            read_line(&clients[i], line, sizeof(line), TIMEOUT_MS) == 0 &&
            sscanf(line, "STATS %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, &l, &s, &c, &t) ==
                4) {
            tcp += t;
            shm += s + c;
            local += l;
        }
    }
    char b2[32], b3[32];
    printf("      bytes moved by the engines: %s over shared memory, %s within a process, %s "
           "over tcp\n",
           mib((double)shm, b1, sizeof(b1)), mib((double)local, b2, sizeof(b2)),
           mib((double)tcp, b3, sizeof(b3)));
    if (show_memory(0, "after the writes") < 0)
        return fail("could not read the master's /metrics and /get_segments_detail");

    /* Kill C; A reads everything again. */
    printf("[4/6] killing client C (SIGKILL, pid %d)\n", (int)clients[2].c.pid);
    fflush(stdout);
    ct_proc_kill(&clients[2].c);
    static const char *const all[N_CLIENTS] = {"ABC", "", ""};
    if (phase(0, 1, "read", all, &verified, &wall) != 0)
        return 1;
    printf("      client A read all %" PRIu64 " objects again at once (the master still lists C's "
           "replicas): all verified, %.2f s\n",
           verified, wall);
    uint64_t t0 = now_ns();
    double alive = -1;
    while ((alive = metric("master_active_clients")) != 2 && now_ns() - t0 < 15000000000ull)
        sleep_ms(100);
    if (alive != 2)
        return fail("the master did not expire client C within 15 s (active clients: %.0f)", alive);
    printf("[5/6] the master expired C after %.1f s and dropped its segment; reading again:\n",
           (double)(now_ns() - t0) / 1e9);
    if (phase(0, 1, "read", all, &verified, &wall) != 0)
        return 1;
    if (verified != total_objects())
        return fail("only %" PRIu64 " of %" PRIu64 " objects verified", verified, total_objects());
    printf("      %" PRIu64 " of %" PRIu64 " replicated objects readable and verified: every one "
           "had a replica outside C\n",
           verified, total_objects());
    if (send_cmd(&clients[0], "solo_get ") < 0)
        return fail("client A is gone");
    done d;
    collect(&clients[0], &d);
    if (d.wrong > 0 || d.verified > 0 || d.missing != SOLO_COUNT)
        return fail("C's single-replica objects: %" PRIu64 " still readable, %" PRIu64
                    " wrong (expected all %d gone): %s",
                    d.verified, d.wrong, SOLO_COUNT, d.msg);
    printf("      C's %d single-replica objects are gone (CR_OBJECT_NOT_FOUND), as they should "
           "be\n",
           SOLO_COUNT);
    if (show_memory(1, "after C's expiry") < 0)
        return fail("could not read the master's /metrics");

    printf("[6/6] summary (%d clients, one call in flight each)", N_CLIENTS);
    print_summary();

    /* Shut down. */
    int bad = 0;
    for (int i = 0; i < 2; i++) {
        send_cmd(&clients[i], "quit");
        int st = reap(&clients[i], 20000);
        if (st != 0) {
            fprintf(stderr, "crescent-demo: client %c exited with %d\n", clients[i].tag, st);
            bad++;
        }
    }
    int mst = ct_master_stop(&master_p, 10000);
    if (mst != 0)
        return fail("crescent-master exited with %d on SIGTERM", mst);
    if (bad)
        return fail("%d client(s) did not exit cleanly", bad);
    printf("\nshut down: clients A and B exited 0, crescent-master exited 0; total %.1f s\n",
           (double)(now_ns() - start) / 1e9);
    printf("demo OK\n");
    return 0;
}

int main(int argc, char **argv)
{
    const char *role = NULL, *master = NULL, *master_bin = NULL;
    const ct_option opts[] = {
        CT_STRING("--role", &role),
        CT_STRING("--master", &master),
        CT_STRING("--master-bin", &master_bin),
    };
    int pr = ct_parse_options(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), NULL, NULL,
                              "crescent-demo");
    if (pr == CT_OPTS_HELP) {
        printf("usage: crescent-demo [--master-bin PATH]\n"
               "Starts a crescent-master and %d store clients on 127.0.0.1, writes and reads a\n"
               "KV-cache mix (every byte verified), kills a client and shows replicated\n"
               "objects survive, prints a summary and stops everything. Exit 0 on success.\n",
               N_CLIENTS);
        return 0;
    }
    if (pr < 0)
        return 2;
    if (role != NULL && strcmp(role, "client") == 0 && master != NULL)
        return client_main(master);
    return orchestrate(master_bin);
}
