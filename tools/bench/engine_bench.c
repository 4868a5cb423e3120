/*
 * engine_bench.c - "crescent-bench engine": batched READ/WRITE throughput and
 * latency of the transfer engine between two processes.
 *
 * Roles (--role):
 *   initiator (default) spawns "engine --role target" itself (fork + exec of
 *             /proc/self/exe) unless --target names a running one, then runs
 *             one case per (op, block size) and prints a row for each.
 *   target    creates an engine on 127.0.0.1 (rpc_port 0), registers one
 *             buffer filled with the pattern, prints one line
 *             "READY segment=HOST:PORT addr=0xADDR len=BYTES" and serves until
 *             its stdin closes; then it destroys the engine and frees memory.
 *   sink      (internal) the receiver of the plain-socket baseline.
 *   echo      (internal) the far end of the 4 KiB plain-socket ping-pong.
 *
 * Layout: the initiator's local buffer has the target buffer's length and a
 * request uses the same offset on both sides. The buffer is split into one
 * region per thread; a thread cycles its requests over the block-sized slots
 * of its region, so threads never touch each other's bytes.
 *
 * Verification: the pattern is keyed by the target's virtual address (the
 * byte at remote address A is byte A of the pattern), so an initiator given
 * any sub-range of the target buffer knows what to expect there. The target
 * holds cb_pattern(TARGET_SEED) whenever a case starts, and so does the local
 * buffer outside --verify (so unverified WRITEs store the same bytes). READ:
 * the local buffer is poisoned; after each batch every request's block is
 * compared with a reference copy of the pattern and poisoned again. WRITE:
 * the local buffer holds a per-case pattern; after the timed loop the written
 * slots are poisoned, read back and compared, then the target pattern is
 * written back for later cases and runs.
 *
 * Latency: a thread keeps one batch in flight; the time from cr_batch_submit
 * to the return of cr_batch_wait is attributed to every request in the batch
 * (polling task status would burn one of the cores being measured).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "options.h"
#include "device_mem.h"
#include "tool_util.h"
#include "crescent/engine.h"

#define TARGET_SEED     0x6372657363656e74ull /* "crescent" */
#define WRITE_SEED_BASE 0x7772697465000000ull /* "write" + case index */
#define POISON          0xa5
#define MAX_BLOCKS      32
#define MIN_BUFFER      (64 * CB_MIB)
#define CHILD_TIMEOUT   30000 /* ms for the target to start / to exit */
#define MAX_PROTOCOLS   4

enum { OPS_READ = 1, OPS_WRITE = 2 };

typedef struct eb_opts {
    const char *subcmd; /* our argv[0], passed to the children */
    const char *role;
    unsigned ops;
    uint64_t blocks[MAX_BLOCKS];
    size_t n_blocks;
    uint32_t batch, threads, lanes, workers;
    uint64_t slice_size;
    const char *protocol;                 /* the one being measured now */
    const char *protocols[MAX_PROTOCOLS]; /* --protocol a,b: each in turn, same run */
    size_t n_protocols;
    char protocol_list[64];
    double duration;
    bool duration_set;
    uint64_t total;
    uint64_t buffer_size; /* 0 = default */
    bool verify, json, baseline, quiet, shared, ucx_perftest;
    bool sync; /* --sync: cr_engine_transfer_sync_batch per batch */
    const char *target;
    uint64_t target_addr, target_len;
    const char *location, *remote_location; /* "cuda:N" or NULL/"cpu" */
    int device, remote_device;              /* -1: host memory */
    bool target_addr_set, target_len_set;
} eb_opts;

typedef struct eb_result {
    double seconds;
    uint64_t bytes, requests;
    uint64_t p50_ns, p99_ns, p999_ns;
    /* Engine byte counters over the timed loop: which path moved the data. */
    uint64_t via_local, via_shm, via_cma, via_tcp, via_ucx, via_cuda, via_staged;
    char via[32];
} eb_result;

/* Everything the initiator's cases share. */
typedef struct eb_ctx {
    const eb_opts *o;
    cr_engine *engine;
    cr_segment_handle seg;
    uint8_t *local;     /* registered, len bytes */
    uint8_t *reference; /* --verify: cb_pattern(TARGET_SEED) over len bytes */
    uint8_t *expect;    /* --verify: one block of expected bytes (write read-back) */
    uint64_t len;
    uint64_t remote_addr;
    char segment[256];
    bool progress;
    bool have_baseline;
    bool have_ucx;
    cb_ucx_result ucx_get, ucx_put, ucx_get_4k; /* ucx_perftest, same UCX_TLS */
    /* Latency baselines that wait for each operation: ucp_get -O 1 (one-sided,
     * one at a time) and ucp_am_lat (a ping-pong through the target's AM
     * handler, as crescent's checked active messages go; perftest prints
     * half the round trip). ucp_get 4K above keeps many gets in flight, so
     * its "latency" is the time per get of a pipelined stream. */
    cb_ucx_result ucx_get_4k_o1, ucx_am_lat_4k;
    bool have_ucx_lat;
    /* The same tests on plain heap memory (UCX_ALLOC_PRIO=heap), the kind
     * of memory crescent is handed to register: perftest's own buffers are
     * allocated by UCX (ucp_mem_map ALLOCATE; over sm as posix shared
     * memory the peer maps and memcpys), crescent's are the caller's. */
    cb_ucx_result heap_get, heap_put, heap_get_4k_o1;
    bool have_ucx_heap;
    cb_measure sock, sock2, mem; /* sock2: two streams at once */
    cb_measure fresh, fresh2;    /* the same into never-written pages of the sinks */
    cb_pingpong pp;              /* 4 KiB plain-socket ping-pong (--baseline) */
    bool printed_header;
    /* --protocol a,b: every case's result per protocol, compared at the end. */
    size_t proto_index;
    bool have_result[MAX_PROTOCOLS][2][MAX_BLOCKS];
    eb_result results[MAX_PROTOCOLS][2][MAX_BLOCKS];
} eb_ctx;

/* One (op, block size) case; shared by its threads. */
typedef struct eb_case {
    eb_ctx *ctx;
    int op; /* cr_opcode */
    uint64_t block;
    uint64_t write_seed;
    char label[64];
    uint64_t start_ns;
    uint64_t deadline_ns;  /* UINT64_MAX: none */
    atomic_ullong claimed; /* --total: bytes handed out to threads */
    atomic_ullong bytes_done;
    atomic_bool stop;
    atomic_uint running;
} eb_case;

typedef struct eb_thread {
    eb_case *c;
    unsigned index;
    pthread_t tid;
    uint64_t region_off, slots;
    uint64_t cursor; /* requests issued; slot = cursor % slots */
    uint64_t bytes, requests, batches, end_ns;
    cr_transfer_request *reqs;
    cb_hist *hist;
    bool failed;
    char error[512];
} eb_thread;

static void usage(FILE *to)
{
    fprintf(to,
            "usage: " CB_PROG " engine [flags]\n"
            "\n"
            "Batched one-sided READ/WRITE between two processes through the transfer engine.\n"
            "The initiator spawns its own target (this binary, --role target) on 127.0.0.1\n"
            "and stops it at the end; one table row per (op, block size) case.\n"
            "\n"
            "  --op read|write|both   operations to measure (default both)\n"
            "  --block-sizes LIST     comma-separated sizes, K/M/G binary (default 4K,64K,1M,4M)\n"
            "  --batch N              requests per batch (default 16)\n"
            "  --threads N            initiator threads, each with its own batches (default 1)\n"
            "  --sync                 each batch is one cr_engine_transfer_sync_batch call\n"
            "                         (submit and wait; with --batch 1 the synchronous single\n"
            "                         transfer of Python's transfer_sync_read/write)\n"
            "  --duration SECONDS     per case, fractions allowed (default 2)\n"
            "  --total BYTES          stop each case after moving BYTES; --duration then only\n"
            "                         applies when given explicitly\n"
            "  --verify               check every READ byte by byte against the target's pattern;\n"
            "                         WRITE cases read back what they wrote and check it\n"
            "                         (checking is inside the timed loop: not a speed run)\n"
            "  --lanes N              engine TCP connections per peer (engine default 4)\n"
            "  --workers N            engine I/O threads, both sides (engine default 2)\n"
            "  --slice-size BYTES     largest unit a request is cut into (engine default 1M)\n"
            "  --protocol tcp|shm|ucx|auto[,...]\n"
            "                         engine protocol (default tcp: sockets even on one host;\n"
            "                         shm/auto also use same-host paths: shared memory, CMA);\n"
            "                         a comma list (e.g. tcp,ucx) runs every case over each in\n"
            "                         turn, in this run, and ends with a table comparing them\n"
            "                         to the first\n"
            "  --shared               allocate both buffers with cr_alloc_shared (memfd), so the\n"
            "                         shm transport can map them\n"
            "  --location cpu|cuda:N  where the local buffer lives (default cpu); device memory\n"
            "                         needs a CUDA driver, else the run is skipped (exit 77)\n"
            "  --remote-location cpu|cuda:N\n"
            "                         where the target's buffer lives (default: cpu)\n"
            "  --buffer-size BYTES    target (and local) buffer size; default is the larger of\n"
            "                         64M and largest block x batch x threads\n"
            "  --ucx-perftest         also run ucx_perftest (ucp_get, ucp_put_bw 1M; ucp_get 4K;\n"
            "                         one at a time: ucp_get -O 1 4K, ucp_am_lat 4K; and on heap\n"
            "                         memory, UCX_ALLOC_PRIO=heap) with the same UCX_TLS and\n"
            "                         compare (for --protocol ucx)\n"
            "  --baseline             also measure, in the same run, a plain TCP socket copy to\n"
            "                         a child process (blocking 1 MiB send/recv; one stream,\n"
            "                         then two at once, each its own child and 64 MiB area;\n"
            "                         then both again into the children's never-written\n"
            "                         pages: the floor of a put into a fresh store segment)\n"
            "                         and single-threaded memcpy of 1 MiB blocks over 64 MiB,\n"
            "                         and a plain-socket ping-pong (32-byte request, 4 KiB\n"
            "                         reply, one at a time); print them and each case's ratio\n"
            "                         (4K reads: p50 over the ping-pong's p50)\n"
            "  --json                 JSON lines on stdout instead of the table\n"
            "  --quiet                no progress line, no informational lines\n"
            "  --role initiator|target\n"
            "                         run one side by hand (default initiator); a target prints\n"
            "                         READY segment=NAME addr=0xADDR len=BYTES and serves until\n"
            "                         its stdin closes (Ctrl-D)\n"
            "  --target NAME --target-addr ADDR --target-len BYTES\n"
            "                         initiator: use that running target instead of spawning one\n"
            "\n"
            "Method: each thread keeps one batch in flight (create, submit, wait, free).\n"
            "Latency = time from cr_batch_submit to cr_batch_wait returning, attributed to\n"
            "every request of the batch; p50/p99/p999 come from a log-linear histogram (~3%%\n"
            "resolution). GB/s = 10^9 bytes per second of case wall time; requests/s likewise.\n"
            "via = the engine path that moved the bytes (its byte counters: tcp, shm, cma,\n"
            "local). Connections are warmed up before the first case, and the buffers by one\n"
            "READ pass over them (1 MiB transfers).\n"
            "Exit status: 0 ok, 1 a transfer or verification failed (the message names the\n"
            "case and offset), 2 bad usage.\n");
}

/* ---- option parsing ----------------------------------------------------- */

static int parse_blocks(const char *text, eb_opts *o)
{
    size_t n = 0;
    if (cb_parse_size_list(CB_PROG " engine", "--block-sizes", text, UINT64_MAX / 2, o->blocks,
                           MAX_BLOCKS, &n) < 0)
        return -1;
    o->n_blocks = n;
    return 0;
}

static int apply_value(eb_opts *o, const char *flag, const char *v)
{
    if (strcmp(flag, "--role") == 0) {
        if (strcmp(v, "initiator") != 0 && strcmp(v, "target") != 0 && strcmp(v, "sink") != 0 &&
            strcmp(v, "sink-fresh") != 0 && strcmp(v, "echo") != 0)
            return cb_bad_value("engine", flag, v, "initiator or target");
        o->role = v;
    } else if (strcmp(flag, "--op") == 0) {
        if (strcmp(v, "read") == 0)
            o->ops = OPS_READ;
        else if (strcmp(v, "write") == 0)
            o->ops = OPS_WRITE;
        else if (strcmp(v, "both") == 0)
            o->ops = OPS_READ | OPS_WRITE;
        else
            return cb_bad_value("engine", flag, v, "read, write or both");
    } else if (strcmp(flag, "--block-sizes") == 0) {
        return parse_blocks(v, o);
    } else if (strcmp(flag, "--location") == 0 || strcmp(flag, "--remote-location") == 0) {
        int dev = -1;
        if (strncmp(v, "cuda:", 5) == 0) {
            char *end;
            long d = strtol(v + 5, &end, 10);
            if (v[5] == '\0' || *end != '\0' || d < 0 || d > 63)
                return cb_bad_value("engine", flag, v, "cpu or cuda:N");
            dev = (int)d;
        } else if (strcmp(v, "cpu") != 0) {
            return cb_bad_value("engine", flag, v, "cpu or cuda:N");
        }
        if (strcmp(flag, "--location") == 0) {
            o->location = v;
            o->device = dev;
        } else {
            o->remote_location = v;
            o->remote_device = dev;
        }
    } else if (strcmp(flag, "--batch") == 0) {
        if (cb_parse_u32(v, 1, 65536, &o->batch) < 0)
            return cb_bad_value("engine", flag, v, "a number from 1 to 65536");
    } else if (strcmp(flag, "--threads") == 0) {
        if (cb_parse_u32(v, 1, 256, &o->threads) < 0)
            return cb_bad_value("engine", flag, v, "a number from 1 to 256");
    } else if (strcmp(flag, "--lanes") == 0) {
        if (cb_parse_u32(v, 1, 1024, &o->lanes) < 0)
            return cb_bad_value("engine", flag, v, "a number from 1 to 1024");
    } else if (strcmp(flag, "--workers") == 0) {
        if (cb_parse_u32(v, 1, 1024, &o->workers) < 0)
            return cb_bad_value("engine", flag, v, "a number from 1 to 1024");
    } else if (strcmp(flag, "--slice-size") == 0) {
        if (cb_parse_size(v, &o->slice_size) < 0 || o->slice_size == 0)
            return cb_bad_value("engine", flag, v, "a positive size (K/M/G binary)");
    } else if (strcmp(flag, "--protocol") == 0) {
        /* One protocol, or a comma list measured one after the other in
         * this run (against the same baselines) and compared at the end. */
        if (strlen(v) >= sizeof(o->protocol_list))
            return cb_bad_value("engine", flag, v, "tcp, shm, ucx or auto, or a comma list");
        snprintf(o->protocol_list, sizeof(o->protocol_list), "%s", v);
        o->n_protocols = 0;
        for (char *save = NULL, *t = strtok_r(o->protocol_list, ",", &save); t != NULL;
             t = strtok_r(NULL, ",", &save)) {
            if (strcmp(t, "tcp") != 0 && strcmp(t, "shm") != 0 && strcmp(t, "auto") != 0 &&
                strcmp(t, "ucx") != 0)
                return cb_bad_value("engine", flag, v, "tcp, shm, ucx or auto, or a comma list");
            if (o->n_protocols == MAX_PROTOCOLS)
                return cb_bad_value("engine", flag, v, "at most 4 protocols");
            o->protocols[o->n_protocols++] = t;
        }
        if (o->n_protocols == 0)
            return cb_bad_value("engine", flag, v, "tcp, shm, ucx or auto, or a comma list");
        o->protocol = o->protocols[0];
    } else if (strcmp(flag, "--duration") == 0) {
        if (cb_parse_seconds(v, &o->duration) < 0)
            return cb_bad_value("engine", flag, v, "a positive number of seconds (at most 86400)");
        o->duration_set = true;
    } else if (strcmp(flag, "--total") == 0) {
        if (cb_parse_size(v, &o->total) < 0 || o->total == 0)
            return cb_bad_value("engine", flag, v, "a positive size (K/M/G binary)");
    } else if (strcmp(flag, "--buffer-size") == 0) {
        if (cb_parse_size(v, &o->buffer_size) < 0 || o->buffer_size == 0)
            return cb_bad_value("engine", flag, v, "a positive size (K/M/G binary)");
    } else if (strcmp(flag, "--target") == 0) {
        if (v[0] == '\0')
            return cb_bad_value("engine", flag, v, "a segment name (host:port)");
        o->target = v;
    } else if (strcmp(flag, "--target-addr") == 0) {
        if (cb_parse_u64(v, &o->target_addr) < 0 || o->target_addr == 0)
            return cb_bad_value("engine", flag, v, "an address (0x... or decimal)");
        o->target_addr_set = true;
    } else if (strcmp(flag, "--target-len") == 0) {
        if (cb_parse_size(v, &o->target_len) < 0 || o->target_len == 0)
            return cb_bad_value("engine", flag, v, "a positive size (K/M/G binary)");
        o->target_len_set = true;
    }
    return 0;
}

static uint64_t max_block(const eb_opts *o)
{
    uint64_t m = 0;
    for (size_t i = 0; i < o->n_blocks; i++)
        if (o->blocks[i] > m)
            m = o->blocks[i];
    return m;
}

/* The buffer length both sides use when we choose it. */
static uint64_t default_buffer(const eb_opts *o)
{
    if (o->buffer_size != 0)
        return o->buffer_size;
    uint64_t want = max_block(o) * o->batch * o->threads; /* <= 2^43 * 2^16 * 2^8 */
    return want > MIN_BUFFER ? want : MIN_BUFFER;
}

static int apply_flag(void *ctx, const char *flag, const char *v)
{
    return apply_value(ctx, flag, v);
}

/* Returns 0 to run, 1 after --help, -1 for a bad command line. */
static int parse_opts(int argc, char **argv, eb_opts *o)
{
    static const char *const value_flags[] = {
        "--role",
        "--op",
        "--block-sizes",
        "--batch",
        "--threads",
        "--lanes",
        "--workers",
        "--slice-size",
        "--protocol",
        "--duration",
        "--total",
        "--buffer-size",
        "--target",
        "--target-addr",
        "--target-len",
        "--location",
        "--remote-location",
    };
    static const uint64_t default_blocks[] = {4 * CB_KIB, 64 * CB_KIB, CB_MIB, 4 * CB_MIB};
    memset(o, 0, sizeof(*o));
    o->subcmd = argv[0];
    o->device = o->remote_device = -1;
    o->role = "initiator";
    o->ops = OPS_READ | OPS_WRITE;
    memcpy(o->blocks, default_blocks, sizeof(default_blocks));
    o->n_blocks = sizeof(default_blocks) / sizeof(default_blocks[0]);
    o->batch = 16;
    o->threads = 1;
    o->protocol = o->protocols[0] = "tcp";
    o->n_protocols = 1;
    o->duration = 2.0;

    ct_option table[sizeof(value_flags) / sizeof(value_flags[0]) + 7] = {
        CT_SWITCH("--verify", &o->verify),     CT_SWITCH("--json", &o->json),
        CT_SWITCH("--baseline", &o->baseline), CT_SWITCH("--quiet", &o->quiet),
        CT_SWITCH("--shared", &o->shared),     CT_SWITCH("--ucx-perftest", &o->ucx_perftest),
        CT_SWITCH("--sync", &o->sync),
    };
    size_t n = 7;
    for (size_t f = 0; f < sizeof(value_flags) / sizeof(value_flags[0]); f++)
        table[n++] = (ct_option)CT_APPLY(value_flags[f]);
    int pr = ct_parse_options(argc, argv, table, n, apply_flag, o, CB_PROG " engine");
    if (pr == CT_OPTS_HELP) {
        usage(stdout);
        return 1;
    }
    if (pr < 0)
        return -1;

    bool by_hand = o->target != NULL || o->target_addr_set || o->target_len_set;
    if (by_hand && (o->target == NULL || !o->target_addr_set || !o->target_len_set)) {
        fprintf(stderr, CB_PROG " engine: --target, --target-addr and --target-len go "
                                "together\n");
        return -1;
    }
    if (by_hand && strcmp(o->role, "initiator") != 0) {
        fprintf(stderr, CB_PROG " engine: --target is for --role initiator\n");
        return -1;
    }
    if (o->n_protocols > 1 && (by_hand || strcmp(o->role, "initiator") != 0)) {
        fprintf(stderr, CB_PROG " engine: a list of protocols needs the spawned target (one "
                                "protocol with --role or --target)\n");
        return -1;
    }
    if (by_hand && o->buffer_size != 0) {
        fprintf(stderr, CB_PROG " engine: --buffer-size is the target's; with --target the "
                                "length is --target-len\n");
        return -1;
    }
    /* The target only sizes its buffer; the initiator checks it against the blocks. */
    uint64_t len = by_hand ? o->target_len : default_buffer(o);
    if (strcmp(o->role, "initiator") == 0 && len / o->threads < max_block(o)) {
        char a[32], b[32];
        fprintf(stderr,
                CB_PROG " engine: a buffer of %s bytes cannot hold one %s block for "
                        "each of %u thread(s)\n",
                cb_format_size(len, a, sizeof(a)), cb_format_size(max_block(o), b, sizeof(b)),
                o->threads);
        return -1;
    }
    return 0;
}

/* What a failed crescent call said; its message already names the status. */
static const char *why_failed(int st)
{
    const char *m = cr_last_error_message();
    return m[0] != '\0' ? m : cr_status_name(st);
}

static int make_engine(const eb_opts *o, cr_engine **out)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.local_hostname = "127.0.0.1";
    cfg.protocol = o->protocol;
    cfg.rpc_port = 0;
    cfg.worker_threads = o->workers;
    cfg.lanes_per_peer = o->lanes;
    cfg.slice_size = o->slice_size;
    return cr_engine_create(&cfg, out);
}

static int engine_create_failed(const char *who, int st)
{
    fprintf(stderr, CB_PROG " engine %s: cr_engine_create: %s\n", who, why_failed(st));
    return st == CR_ERR_INVALID_CONFIG ? CB_EXIT_USAGE : CB_EXIT_FAIL;
}

static uint8_t *alloc_buffer(uint64_t len)
{
    return aligned_alloc(4096, (len + 4095) / 4096 * 4096);
}

static bool no_device; /* --location cuda:N but no device memory: skip (77) */

/* The registered buffers: aligned heap memory, memfd-backed with --shared,
 * or device memory with --location cuda:N. */
static uint8_t *alloc_registered(const eb_opts *o, uint64_t len)
{
    if (o->device >= 0) {
        uint8_t *d = NULL;
        int st = bench_device_alloc(o->device, len, &d);
        if (st < 0) {
            fprintf(stderr, CB_PROG " engine: skipped: no device memory on cuda:%d: %s\n",
                    o->device, why_failed(st));
            no_device = true;
            return NULL;
        }
        return d;
    }
    if (!o->shared)
        return alloc_buffer(len);
    void *p = NULL;
    int st = cr_alloc_shared(len, &p);
    if (st < 0) {
        fprintf(stderr, CB_PROG " engine: cr_alloc_shared(%" PRIu64 "): %s\n", len, why_failed(st));
        return NULL;
    }
    return p;
}

/* Free what alloc_registered returned, after it is unregistered. NULL is a no-op. */
static void free_registered(const eb_opts *o, uint8_t *p)
{
    if (o->device >= 0)
        bench_device_free(p);
    else if (o->shared)
        cr_free_shared(p);
    else
        free(p);
}

/* ---- target ------------------------------------------------------------- */

static int target_main(const eb_opts *o)
{
    int rc = CB_EXIT_FAIL;
    uint64_t len = default_buffer(o);
    uint8_t *buf = alloc_registered(o, len);
    if (buf == NULL) {
        if (no_device)
            return 77;
        fprintf(stderr, CB_PROG " engine target: cannot allocate %" PRIu64 " bytes\n", len);
        return CB_EXIT_FAIL;
    }
    if (o->device < 0)
        cb_pattern_fill(buf, (uint64_t)(uintptr_t)buf, len, TARGET_SEED);
    cr_engine *e = NULL;
    int st = make_engine(o, &e);
    if (st < 0) {
        rc = engine_create_failed("target", st);
        goto free_buffer;
    }
    st = cr_engine_register(e, buf, len, NULL, true);
    if (st < 0) {
        fprintf(stderr, CB_PROG " engine target: cr_engine_register: %s\n", why_failed(st));
        goto destroy_engine;
    }
    char name[256];
    st = cr_engine_segment_name(e, name, sizeof(name));
    if (st < 0) {
        fprintf(stderr, CB_PROG " engine target: cr_engine_segment_name: %s\n", why_failed(st));
        goto unregister_buffer;
    }
    printf("READY segment=%s addr=0x%" PRIxPTR " len=%" PRIu64 "\n", name, (uintptr_t)buf, len);
    fflush(stdout);
    if (!o->quiet)
        fprintf(stderr,
                "target ready; in another shell run:\n"
                "  " CB_PROG " engine --target %s --target-addr 0x%" PRIxPTR
                " --target-len %" PRIu64 "\n"
                "close stdin (Ctrl-D) to stop\n",
                name, (uintptr_t)buf, len);
    cb_wait_for_eof(STDIN_FILENO);
    rc = CB_EXIT_OK;

unregister_buffer:
    cr_engine_unregister(e, buf);
destroy_engine:
    cr_engine_destroy(e);
free_buffer:
    free_registered(o, buf);
    return rc;
}

/* ---- initiator: one batch ----------------------------------------------- */

static const char *op_name(int op)
{
    return op == CR_OP_READ ? "read" : "write";
}

static const char *task_state_name(int state)
{
    static const char *const names[] = {"waiting",   "pending",   "invalid", "canceled",
                                        "completed", "timed out", "failed"};
    return state >= 0 && state <= CR_TASK_FAILED ? names[state] : "unknown";
}

/*
 * Create a batch, submit n requests, wait, free. *lat_ns = submit..wait.
 * On failure writes a message naming the failed request and its offset.
 */
/* --sync: the same requests (one segment) as one synchronous call. */
static int run_sync(eb_ctx *ctx, const cr_transfer_request *reqs, size_t n, uint64_t *lat_ns,
                    char *err, size_t err_len)
{
    enum { MAX_SYNC = 1024 };
    void *locals[MAX_SYNC];
    uint64_t remotes[MAX_SYNC], lengths[MAX_SYNC];
    if (n > MAX_SYNC) {
        snprintf(err, err_len, "--sync takes batches of at most %d", MAX_SYNC);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        locals[i] = reqs[i].local_addr;
        remotes[i] = reqs[i].remote_addr;
        lengths[i] = reqs[i].length;
    }
    uint64_t t0 = cb_now_ns();
    int st = cr_engine_transfer_sync_batch(ctx->engine, reqs[0].opcode, reqs[0].segment, locals,
                                           remotes, lengths, n, -1);
    *lat_ns = cb_now_ns() - t0;
    if (st < 0) {
        snprintf(err, err_len, "%s of %zu requests (first at offset %" PRIu64 ") failed: %s",
                 op_name(reqs[0].opcode), n, reqs[0].remote_addr - ctx->remote_addr,
                 why_failed(st));
        return -1;
    }
    return 0;
}

static int run_batch(eb_ctx *ctx, const cr_transfer_request *reqs, size_t n, uint64_t *lat_ns,
                     char *err, size_t err_len)
{
    if (ctx->o->sync)
        return run_sync(ctx, reqs, n, lat_ns, err, err_len);
    cr_batch_id b = 0;
    int st = cr_batch_create(ctx->engine, n, &b);
    if (st < 0) {
        snprintf(err, err_len, "cr_batch_create(%zu): %s", n, why_failed(st));
        return -1;
    }
    uint64_t t0 = cb_now_ns();
    st = cr_batch_submit(ctx->engine, b, reqs, n);
    if (st < 0) {
        snprintf(err, err_len, "cr_batch_submit: %s", why_failed(st));
        goto free_batch;
    }
    st = cr_batch_wait(ctx->engine, b, -1);
    *lat_ns = cb_now_ns() - t0;
    if (st < 0) {
        /* Name the first request that did not complete. */
        size_t bad = 0;
        cr_task_status ts = {0, st, 0};
        for (size_t i = 0; i < n; i++) {
            cr_task_status s;
            if (cr_batch_task_status(ctx->engine, b, i, &s) == 0 && s.state != CR_TASK_COMPLETED) {
                bad = i;
                ts = s;
                break;
            }
        }
        snprintf(err, err_len,
                 "%s request %zu of %zu (offset %" PRIu64 ", %" PRIu64 " bytes) failed: %s "
                 "(task %s, error %s, %" PRIu64 " bytes done)",
                 op_name(reqs[bad].opcode), bad, n, reqs[bad].remote_addr - ctx->remote_addr,
                 reqs[bad].length, why_failed(st), task_state_name(ts.state),
                 cr_status_name(ts.error), ts.transferred_bytes);
    }
free_batch:
    cr_batch_free(ctx->engine, b);
    return st < 0 ? -1 : 0;
}

/* Build n requests of `op` over consecutive slots of [off, off + n*block). */
static void fill_requests(eb_ctx *ctx, cr_transfer_request *reqs, size_t n, int op, uint64_t off,
                          uint64_t block)
{
    for (size_t i = 0; i < n; i++, off += block) {
        reqs[i].opcode = op;
        reqs[i].local_addr = ctx->local + off;
        reqs[i].segment = ctx->seg;
        reqs[i].remote_addr = ctx->remote_addr + off;
        reqs[i].length = block;
    }
}

/* ---- initiator: case threads -------------------------------------------- */

static int check_reads(eb_thread *t, size_t n)
{
    eb_ctx *ctx = t->c->ctx;
    uint64_t block = t->c->block;
    for (size_t i = 0; i < n; i++) {
        uint64_t off = t->reqs[i].remote_addr - ctx->remote_addr;
        int64_t bad = cb_first_mismatch(ctx->local + off, ctx->reference + off, block);
        if (bad >= 0) {
            snprintf(t->error, sizeof(t->error),
                     "READ verification failed at offset %" PRIu64 " from the target address "
                     "(thread %u, batch %" PRIu64 ", request %zu): expected 0x%02x, got 0x%02x",
                     off + (uint64_t)bad, t->index, t->batches, i,
                     ctx->reference[off + (uint64_t)bad], ctx->local[off + (uint64_t)bad]);
            return -1;
        }
    }
    /* Poison only after all checks: requests of one batch may share a slot. */
    for (size_t i = 0; i < n; i++)
        memset(ctx->local + (t->reqs[i].remote_addr - ctx->remote_addr), POISON, block);
    return 0;
}

static void *case_thread(void *arg)
{
    eb_thread *t = arg;
    eb_case *c = t->c;
    eb_ctx *ctx = c->ctx;
    const eb_opts *o = ctx->o;
    uint64_t block = c->block;

    while (!atomic_load(&c->stop) && cb_now_ns() < c->deadline_ns) {
        size_t n = o->batch;
        if (o->total != 0) {
            uint64_t want = (uint64_t)n * block;
            uint64_t claim = atomic_fetch_add(&c->claimed, want);
            if (claim >= o->total)
                break;
            if (o->total - claim < want)
                n = (size_t)((o->total - claim + block - 1) / block);
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t off = t->region_off + (t->cursor++ % t->slots) * block;
            fill_requests(ctx, &t->reqs[i], 1, c->op, off, block);
        }
        uint64_t lat = 0;
        if (run_batch(ctx, t->reqs, n, &lat, t->error, sizeof(t->error)) < 0 ||
            (o->verify && c->op == CR_OP_READ && check_reads(t, n) < 0)) {
            t->failed = true;
            atomic_store(&c->stop, true);
            break;
        }
        cb_hist_add(t->hist, lat, n);
        t->bytes += (uint64_t)n * block;
        t->requests += n;
        t->batches++;
        atomic_fetch_add(&c->bytes_done, (uint64_t)n * block);
    }
    t->end_ns = cb_now_ns();
    atomic_fetch_sub(&c->running, 1);
    return NULL;
}

/*
 * WRITE --verify, after the timed loop: read back every slot the threads
 * wrote, compare with the case pattern, then restore the target pattern.
 */
static int check_writes(eb_case *c, eb_thread *threads, cr_transfer_request *reqs, char *err,
                        size_t err_len)
{
    eb_ctx *ctx = c->ctx;
    const eb_opts *o = ctx->o;
    uint64_t block = c->block;
    for (unsigned ti = 0; ti < o->threads; ti++) {
        eb_thread *t = &threads[ti];
        uint64_t slots = t->cursor < t->slots ? t->cursor : t->slots;
        uint64_t lat = 0;
        memset(ctx->local + t->region_off, POISON, slots * block);
        for (uint64_t s = 0; s < slots; s += o->batch) {
            size_t n = (size_t)(slots - s < o->batch ? slots - s : o->batch);
            fill_requests(ctx, reqs, n, CR_OP_READ, t->region_off + s * block, block);
            if (run_batch(ctx, reqs, n, &lat, err, err_len) < 0)
                return -1;
        }
        for (uint64_t s = 0; s < slots; s++) {
            uint64_t off = t->region_off + s * block;
            cb_pattern_fill(ctx->expect, ctx->remote_addr + off, block, c->write_seed);
            int64_t bad = cb_first_mismatch(ctx->local + off, ctx->expect, block);
            if (bad >= 0) {
                snprintf(err, err_len,
                         "WRITE verification failed at offset %" PRIu64 " from the target "
                         "address (read back after the case; thread %u, slot %" PRIu64
                         "): expected 0x%02x, got 0x%02x",
                         off + (uint64_t)bad, ti, s, ctx->expect[bad],
                         ctx->local[off + (uint64_t)bad]);
                return -1;
            }
        }
        memcpy(ctx->local + t->region_off, ctx->reference + t->region_off, slots * block);
        for (uint64_t s = 0; s < slots; s += o->batch) {
            size_t n = (size_t)(slots - s < o->batch ? slots - s : o->batch);
            fill_requests(ctx, reqs, n, CR_OP_WRITE, t->region_off + s * block, block);
            if (run_batch(ctx, reqs, n, &lat, err, err_len) < 0)
                return -1;
        }
    }
    return 0;
}

/* One of the engine's generic counters (0 if that transport is absent). */
static uint64_t counter_of(cr_engine *e, const char *tp, const char *name)
{
    cr_engine_counter c[128];
    size_t n = 0;
    if (cr_engine_counters(e, c, 128, &n) < 0)
        return 0;
    for (size_t i = 0; i < n && i < 128; i++)
        if (strcmp(c[i].transport, tp) == 0 && strcmp(c[i].name, name) == 0)
            return c[i].value;
    return 0;
}

/* "tcp", "cma", "tcp+cma", ...: every path that moved at least 1% of the bytes. */
static void describe_via(eb_result *r)
{
    const uint64_t bytes[] = {r->via_tcp, r->via_shm,  r->via_cma,   r->via_local,
                              r->via_ucx, r->via_cuda, r->via_staged};
    static const char *const names[] = {"tcp", "shm", "cma", "local", "ucx", "cuda", "staged"};
    uint64_t total = 0;
    for (size_t i = 0; i < 5; i++)
        total += bytes[i];
    r->via[0] = '\0';
    for (size_t i = 0; i < 7; i++) {
        if (bytes[i] == 0 || bytes[i] < total / 100)
            continue;
        size_t n = strlen(r->via);
        snprintf(r->via + n, sizeof(r->via) - n, "%s%s", n > 0 ? "+" : "", names[i]);
    }
    if (r->via[0] == '\0')
        snprintf(r->via, sizeof(r->via), "-");
}

/* Bytes the ucx transport moved so far (a generic counter). */
static uint64_t ucx_bytes(cr_engine *e)
{
    cr_engine_counter c[128];
    size_t n = 0;
    if (cr_engine_counters(e, c, 128, &n) < 0)
        return 0;
    for (size_t i = 0; i < n && i < 128; i++)
        if (strcmp(c[i].transport, "ucx") == 0 && strcmp(c[i].name, "bytes") == 0)
            return c[i].value;
    return 0;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Run one case; on failure *err names the case. Returns 0 or -1. */
static int run_case(eb_ctx *ctx, int op, uint64_t block, unsigned case_index, eb_result *res,
                    char *err, size_t err_len)
{
    const eb_opts *o = ctx->o;
    int rc = -1;
    char bs[32], why[600];
    why[0] = '\0';
    eb_case c;
    memset(&c, 0, sizeof(c));
    c.ctx = ctx;
    c.op = op;
    c.block = block;
    c.write_seed = WRITE_SEED_BASE + case_index;
    snprintf(c.label, sizeof(c.label), "%s %s x%u t%u", op_name(op),
             cb_format_size(block, bs, sizeof(bs)), o->batch, o->threads);
    atomic_init(&c.claimed, 0);
    atomic_init(&c.bytes_done, 0);
    atomic_init(&c.stop, false);
    atomic_init(&c.running, 0);

    eb_thread *threads = calloc(o->threads, sizeof(*threads));
    cr_transfer_request *check_reqs = calloc(o->batch, sizeof(*check_reqs));
    if (threads == NULL || check_reqs == NULL) {
        snprintf(why, sizeof(why), "out of memory");
        goto free_threads;
    }
    uint64_t region = ctx->len / o->threads;
    for (unsigned i = 0; i < o->threads; i++) {
        eb_thread *t = &threads[i];
        t->c = &c;
        t->index = i;
        t->region_off = (uint64_t)i * region;
        t->slots = region / block;
        t->reqs = calloc(o->batch, sizeof(*t->reqs));
        t->hist = calloc(1, sizeof(*t->hist));
        if (t->reqs == NULL || t->hist == NULL) {
            snprintf(why, sizeof(why), "out of memory");
            goto free_threads;
        }
    }
    if (o->verify && op == CR_OP_READ)
        memset(ctx->local, POISON, ctx->len);
    else if (o->verify)
        cb_pattern_fill(ctx->local, ctx->remote_addr, ctx->len, c.write_seed);

    cr_engine_stats before, after;
    memset(&before, 0, sizeof(before));
    memset(&after, 0, sizeof(after));
    cr_engine_get_stats(ctx->engine, &before);
    uint64_t ucx_before = ucx_bytes(ctx->engine);
    uint64_t cuda_before = counter_of(ctx->engine, "cuda", "bytes");
    uint64_t staged_before = counter_of(ctx->engine, "cuda", "bytes_staged_out") +
                             counter_of(ctx->engine, "cuda", "bytes_staged_in");
    c.start_ns = cb_now_ns();
    c.deadline_ns = UINT64_MAX;
    if (o->total == 0 || o->duration_set)
        c.deadline_ns = c.start_ns + (uint64_t)(o->duration * 1e9);
    unsigned started = 0;
    for (; started < o->threads; started++) {
        atomic_fetch_add(&c.running, 1);
        if (pthread_create(&threads[started].tid, NULL, case_thread, &threads[started]) != 0) {
            atomic_fetch_sub(&c.running, 1);
            atomic_store(&c.stop, true);
            snprintf(why, sizeof(why), "cannot start thread %u", started);
            break;
        }
    }
    for (unsigned tick = 1; atomic_load(&c.running) > 0; tick++) {
        sleep_ms(50);
        if (ctx->progress && tick % 4 == 0) {
            double el = (double)(cb_now_ns() - c.start_ns) / 1e9;
            cb_progress(c.label, el, (double)atomic_load(&c.bytes_done) / el / 1e9);
        }
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(threads[i].tid, NULL);
    cr_engine_get_stats(ctx->engine, &after);
    uint64_t ucx_after = ucx_bytes(ctx->engine);
    if (ctx->progress)
        cb_progress_clear();
    if (started < o->threads)
        goto free_threads;

    cb_hist *hist = threads[0].hist; /* merge into thread 0's */
    uint64_t end = c.start_ns;
    memset(res, 0, sizeof(*res));
    for (unsigned i = 0; i < o->threads; i++) {
        eb_thread *t = &threads[i];
        if (t->failed && why[0] == '\0')
            snprintf(why, sizeof(why), "%s", t->error);
        res->bytes += t->bytes;
        res->requests += t->requests;
        if (t->end_ns > end)
            end = t->end_ns;
        if (i > 0)
            cb_hist_merge(hist, t->hist);
    }
    if (why[0] != '\0')
        goto free_threads;
    if (o->verify && op == CR_OP_WRITE &&
        check_writes(&c, threads, check_reqs, why, sizeof(why)) < 0)
        goto free_threads;
    res->seconds = (double)(end - c.start_ns) / 1e9;
    res->via_local = after.bytes_local - before.bytes_local;
    res->via_shm = after.bytes_shm - before.bytes_shm;
    res->via_cma = after.bytes_cma - before.bytes_cma;
    res->via_tcp = after.bytes_tcp - before.bytes_tcp;
    res->via_ucx = ucx_after - ucx_before;
    res->via_cuda = counter_of(ctx->engine, "cuda", "bytes") - cuda_before;
    res->via_staged = counter_of(ctx->engine, "cuda", "bytes_staged_out") +
                      counter_of(ctx->engine, "cuda", "bytes_staged_in") - staged_before;
    describe_via(res);
    res->p50_ns = cb_hist_quantile(hist, 0.50);
    res->p99_ns = cb_hist_quantile(hist, 0.99);
    res->p999_ns = cb_hist_quantile(hist, 0.999);
    rc = 0;

free_threads:
    if (rc < 0)
        snprintf(err, err_len, "case %s %s (batch %u, threads %u): %s", op_name(op), bs, o->batch,
                 o->threads, why);
    if (threads != NULL) {
        for (unsigned i = 0; i < o->threads; i++) {
            free(threads[i].reqs);
            free(threads[i].hist);
        }
    }
    free(threads);
    free(check_reqs);
    return rc;
}

/* ---- initiator: output -------------------------------------------------- */

static double ratio(double a, double b)
{
    return b > 0 ? a / b : 0.0;
}

static double result_gbps(const eb_result *r)
{
    return (double)r->bytes / (r->seconds > 0 ? r->seconds : 1e-9) / 1e9;
}

static void print_baselines(eb_ctx *ctx)
{
    char b1[32], b2[32];
    if (ctx->o->json) {
        printf("{\"type\":\"baseline\",\"name\":\"tcp_socket\",\"block\":%" PRIu64
               ",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"gbps\":%.4f}\n",
               CB_BASELINE_BLOCK, ctx->sock.bytes, ctx->sock.seconds, ctx->sock.gbps);
        printf("{\"type\":\"baseline\",\"name\":\"tcp_socket_2_streams\",\"block\":%" PRIu64
               ",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"gbps\":%.4f}\n",
               CB_BASELINE_BLOCK, ctx->sock2.bytes, ctx->sock2.seconds, ctx->sock2.gbps);
        printf("{\"type\":\"baseline\",\"name\":\"tcp_socket_fresh_pages\",\"block\":%" PRIu64
               ",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"gbps\":%.4f}\n",
               CB_BASELINE_BLOCK, ctx->fresh.bytes, ctx->fresh.seconds, ctx->fresh.gbps);
        printf("{\"type\":\"baseline\",\"name\":\"tcp_socket_fresh_pages_2_streams\",\"block\":"
               "%" PRIu64 ",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"gbps\":%.4f}\n",
               CB_BASELINE_BLOCK, ctx->fresh2.bytes, ctx->fresh2.seconds, ctx->fresh2.gbps);
        printf("{\"type\":\"baseline\",\"name\":\"memcpy\",\"block\":%" PRIu64 ",\"bytes\":%" PRIu64
               ",\"seconds\":%.6f,\"gbps\":%.4f}\n",
               CB_BASELINE_BLOCK, ctx->mem.bytes, ctx->mem.seconds, ctx->mem.gbps);
        printf(
            "{\"type\":\"baseline\",\"name\":\"tcp_pingpong\",\"reply\":%u,\"round_trips\":%" PRIu64
            ",\"seconds\":%.6f,\"per_s\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
            ctx->pp.size, ctx->pp.round_trips, ctx->pp.seconds, ctx->pp.per_s, ctx->pp.p50_us,
            ctx->pp.p99_us);
    } else {
        printf("baseline tcp socket (1 stream, 1 MiB send/recv, loopback, 2 processes): "
               "%8.3f GB/s  (%s in %.2f s)\n",
               ctx->sock.gbps, cb_format_bytes(ctx->sock.bytes, b1, sizeof(b1)), ctx->sock.seconds);
        printf("baseline tcp socket (2 streams at once, each its own 64 MiB area):          "
               "%8.3f GB/s  (%s in %.2f s)\n",
               ctx->sock2.gbps, cb_format_bytes(ctx->sock2.bytes, b1, sizeof(b1)),
               ctx->sock2.seconds);
        printf("baseline tcp socket into the sink's never-written pages: 1 stream %.3f GB/s, "
               "2 streams %.3f GB/s\n",
               ctx->fresh.gbps, ctx->fresh2.gbps);
        printf("baseline memcpy     (1 thread, 1 MiB blocks over 64 MiB):               "
               "%8.3f GB/s  (%s in %.2f s)\n",
               ctx->mem.gbps, cb_format_bytes(ctx->mem.bytes, b2, sizeof(b2)), ctx->mem.seconds);
        printf("baseline tcp ping-pong (32 B request, 4 KiB reply, 1 connection, TCP_NODELAY): "
               "p50 %.1f us, p99 %.1f us, %.0f round trips/s\n",
               ctx->pp.p50_us, ctx->pp.p99_us, ctx->pp.per_s);
    }
    fflush(stdout);
}

static void print_result(eb_ctx *ctx, int op, uint64_t block, const eb_result *r)
{
    const eb_opts *o = ctx->o;
    double secs = r->seconds > 0 ? r->seconds : 1e-9;
    double gbps = (double)r->bytes / secs / 1e9;
    double rps = (double)r->requests / secs;
    if (o->json) {
        char vs[96] = ",\"vs_socket\":null,\"vs_memcpy\":null";
        if (ctx->have_baseline)
            snprintf(vs, sizeof(vs), ",\"vs_socket\":%.4f,\"vs_memcpy\":%.4f",
                     ratio(gbps, ctx->sock.gbps), ratio(gbps, ctx->mem.gbps));
        printf("{\"type\":\"engine\",\"op\":\"%s\",\"block\":%" PRIu64 ",\"batch\":%u,"
               "\"threads\":%u,\"lanes\":%u,\"workers\":%u,\"slice_size\":%" PRIu64 ","
               "\"protocol\":\"%s\",\"seconds\":%.6f,\"bytes\":%" PRIu64 ",\"requests\":%" PRIu64
               ",\"gbps\":%.4f,\"requests_per_s\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
               "\"p999_us\":%.1f,\"verified\":%s,\"via\":\"%s\",\"bytes_tcp\":%" PRIu64
               ",\"bytes_shm\":%" PRIu64 ",\"bytes_cma\":%" PRIu64 ",\"bytes_local\":%" PRIu64
               "%s}\n",
               op_name(op), block, o->batch, o->threads, o->lanes, o->workers, o->slice_size,
               o->protocol, r->seconds, r->bytes, r->requests, gbps, rps, (double)r->p50_ns / 1e3,
               (double)r->p99_ns / 1e3, (double)r->p999_ns / 1e3, o->verify ? "true" : "false",
               r->via, r->via_tcp, r->via_shm, r->via_cma, r->via_local, vs);
        fflush(stdout);
        return;
    }
    if (!ctx->printed_header) {
        printf("%-5s %6s %5s %3s %9s %11s %9s %9s %9s %11s %8s %s", "op", "block", "batch", "thr",
               "GB/s", "req/s", "p50 us", "p99 us", "p999 us", "bytes", "verified", "via");
        if (ctx->have_baseline)
            printf(" %7s %8s", "x sock", "x memcpy");
        printf("\n");
        ctx->printed_header = true;
    }
    char bs[32], moved[32];
    printf("%-5s %6s %5u %3u %9.3f %11.1f %9.1f %9.1f %9.1f %11s %8s %s", op_name(op),
           cb_format_size(block, bs, sizeof(bs)), o->batch, o->threads, gbps, rps,
           (double)r->p50_ns / 1e3, (double)r->p99_ns / 1e3, (double)r->p999_ns / 1e3,
           cb_format_bytes(r->bytes, moved, sizeof(moved)), o->verify ? "yes" : "no", r->via);
    if (ctx->have_baseline)
        printf(" %7.3f %8.3f", ratio(gbps, ctx->sock.gbps), ratio(gbps, ctx->mem.gbps));
    printf("\n");
    if (ctx->have_baseline && block == 4096 && op == CR_OP_READ && !o->json)
        printf("      vs tcp ping-pong 4K: p50 %.1f us vs %.1f us = %.2fx its latency (batch %u)\n",
               (double)r->p50_ns / 1e3, ctx->pp.p50_us,
               ratio((double)r->p50_ns / 1e3, ctx->pp.p50_us), o->batch);
    if (ctx->have_ucx) {
        const cb_ucx_result *u = op == CR_OP_READ ? &ctx->ucx_get : &ctx->ucx_put;
        if (block <= 4096 && op == CR_OP_READ)
            printf("      vs ucx_perftest ucp_get 4K: p50 %.1f us vs %.1f us typical = %.2fx its "
                   "latency\n",
                   (double)r->p50_ns / 1e3, ctx->ucx_get_4k.latency_us,
                   ratio((double)r->p50_ns / 1e3, ctx->ucx_get_4k.latency_us));
        if (block <= 4096 && op == CR_OP_READ && ctx->have_ucx_lat)
            printf("      vs ucx_perftest one at a time: ucp_get -O 1 4K %.1f us = %.2fx; "
                   "ucp_am_lat 4K round trip %.1f us = %.2fx\n",
                   ctx->ucx_get_4k_o1.latency_us,
                   ratio((double)r->p50_ns / 1e3, ctx->ucx_get_4k_o1.latency_us),
                   2 * ctx->ucx_am_lat_4k.latency_us,
                   ratio((double)r->p50_ns / 1e3, 2 * ctx->ucx_am_lat_4k.latency_us));
        else if (block >= (1u << 20))
            printf("      vs ucx_perftest %s 1M: %.3f vs %.3f GB/s = %.2fx its bandwidth\n",
                   op == CR_OP_READ ? "ucp_get" : "ucp_put_bw", gbps, u->gbps,
                   ratio(gbps, u->gbps));
        const cb_ucx_result *h = op == CR_OP_READ ? &ctx->heap_get : &ctx->heap_put;
        if (ctx->have_ucx_heap && block >= (1u << 20))
            printf("      vs ucx_perftest %s 1M on heap memory: %.3f vs %.3f GB/s = %.2fx\n",
                   op == CR_OP_READ ? "ucp_get" : "ucp_put_bw", gbps, h->gbps,
                   ratio(gbps, h->gbps));
        if (ctx->have_ucx_heap && block <= 4096 && op == CR_OP_READ)
            printf("      vs ucx_perftest ucp_get -O 1 4K on heap memory: %.1f us = %.2fx\n",
                   ctx->heap_get_4k_o1.latency_us,
                   ratio((double)r->p50_ns / 1e3, ctx->heap_get_4k_o1.latency_us));
    }
    fflush(stdout);
}

static void print_info(eb_ctx *ctx, bool spawned)
{
    const eb_opts *o = ctx->o;
    if (o->json || o->quiet)
        return;
    char len[32], sl[32];
    char lanes[16] = "default", workers[16] = "default";
    if (o->lanes != 0)
        snprintf(lanes, sizeof(lanes), "%u", o->lanes);
    if (o->workers != 0)
        snprintf(workers, sizeof(workers), "%u", o->workers);
    printf("target %s (%s), buffer %s; protocol %s, lanes %s, workers %s, slice %s\n", ctx->segment,
           spawned ? "spawned" : "given", cb_format_bytes(ctx->len, len, sizeof(len)), o->protocol,
           lanes, workers,
           o->slice_size != 0 ? cb_format_size(o->slice_size, sl, sizeof(sl)) : "default");
    printf("latency: per batch, submit to wait return, attributed to each request; "
           "GB/s = 1e9 B/s\n");
    fflush(stdout);
}

/* ---- initiator ---------------------------------------------------------- */

/* Start the target child and read its READY line. Returns 0 or an exit code. */
static int spawn_target(const eb_opts *o, cb_child *child, eb_ctx *ctx)
{
    char len[32], lanes[16], workers[16], slice[32];
    char *argv[24];
    int n = 0;
    snprintf(len, sizeof(len), "%" PRIu64, default_buffer(o));
    argv[n++] = CB_PROG;
    argv[n++] = (char *)o->subcmd;
    argv[n++] = "--role";
    argv[n++] = "target";
    argv[n++] = "--quiet";
    argv[n++] = "--buffer-size";
    argv[n++] = len;
    argv[n++] = "--protocol";
    argv[n++] = (char *)o->protocol;
    if (o->shared)
        argv[n++] = "--shared";
    if (o->remote_location != NULL) {
        argv[n++] = "--location";
        argv[n++] = (char *)o->remote_location;
    }
    if (o->lanes != 0) {
        snprintf(lanes, sizeof(lanes), "%u", o->lanes);
        argv[n++] = "--lanes";
        argv[n++] = lanes;
    }
    if (o->workers != 0) {
        snprintf(workers, sizeof(workers), "%u", o->workers);
        argv[n++] = "--workers";
        argv[n++] = workers;
    }
    if (o->slice_size != 0) {
        snprintf(slice, sizeof(slice), "%" PRIu64, o->slice_size);
        argv[n++] = "--slice-size";
        argv[n++] = slice;
    }
    argv[n] = NULL;
    if (cb_child_spawn(child, argv) < 0) {
        perror(CB_PROG " engine: cannot start the target");
        return CB_EXIT_FAIL;
    }
    char line[512];
    uint64_t addr = 0, got_len = 0;
    if (cb_child_read_line(child, line, sizeof(line), CHILD_TIMEOUT) < 0 ||
        sscanf(line, "READY segment=%255s addr=%" SCNx64 " len=%" SCNu64, ctx->segment, &addr,
               &got_len) != 3) {
        /* It printed why on stderr; a configuration it refused is a usage error. */
        char why[160];
        int status = cb_child_stop(child, 5000, why, sizeof(why));
        fprintf(stderr, CB_PROG " engine: the target did not report READY%s%s\n",
                status != 0 ? "; it " : "", status != 0 ? why : "");
        if (status == 77 || strstr(why, "77") != NULL)
            return 77;
        return status == CB_EXIT_USAGE ? CB_EXIT_USAGE : CB_EXIT_FAIL;
    }
    ctx->remote_addr = addr;
    ctx->len = got_len;
    return 0;
}

/* Connect every lane before timing anything: 2 small READs per lane. */
static int warm_up(eb_ctx *ctx, char *err, size_t err_len)
{
    size_t n = ctx->o->lanes != 0 ? 2u * ctx->o->lanes : 8u;
    uint64_t block = 4096;
    if (n > 256)
        n = 256;
    if (block > ctx->len)
        block = ctx->len;
    if (n > ctx->len / block)
        n = (size_t)(ctx->len / block);
    cr_transfer_request *reqs = calloc(n, sizeof(*reqs));
    if (reqs == NULL) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    uint64_t lat = 0;
    fill_requests(ctx, reqs, n, CR_OP_READ, 0, block);
    int rc = run_batch(ctx, reqs, n, &lat, err, err_len);
    free(reqs);
    if (rc < 0)
        return rc;
    /* One READ pass over the whole buffers, 1 MiB at a time: on a virtual
     * machine with shadow paging the first copy of a page through a socket
     * costs several microseconds once (docs/PERFORMANCE.md, "The caller
     * reads its own reply"), which would otherwise land on the first case. */
    enum { PASS_BATCH = 64 };
    const uint64_t mib = 1 << 20;
    void *locals[PASS_BATCH];
    uint64_t remotes[PASS_BATCH], lengths[PASS_BATCH];
    for (uint64_t off = 0; off < ctx->len;) {
        size_t k = 0;
        for (; k < PASS_BATCH && off < ctx->len; k++, off += lengths[k - 1]) {
            locals[k] = ctx->local + off;
            remotes[k] = ctx->remote_addr + off;
            lengths[k] = ctx->len - off < mib ? ctx->len - off : mib;
        }
        int st = cr_engine_transfer_sync_batch(ctx->engine, CR_OP_READ, ctx->seg, locals, remotes,
                                               lengths, k, 0);
        if (st < 0) {
            snprintf(err, err_len, "warm-up pass at offset %" PRIu64 ": %s", off, why_failed(st));
            return -1;
        }
    }
    return 0;
}

static int run_cases(eb_ctx *ctx)
{
    const eb_opts *o = ctx->o;
    static const int ops[] = {CR_OP_READ, CR_OP_WRITE};
    unsigned case_index = 0;
    for (size_t oi = 0; oi < 2; oi++) {
        if (!(o->ops & (oi == 0 ? OPS_READ : OPS_WRITE)))
            continue;
        for (size_t bi = 0; bi < o->n_blocks; bi++) {
            eb_result r;
            char err[1024];
            if (run_case(ctx, ops[oi], o->blocks[bi], case_index++, &r, err, sizeof(err)) < 0) {
                fprintf(stderr, CB_PROG " engine: %s\n", err);
                return -1;
            }
            print_result(ctx, ops[oi], o->blocks[bi], &r);
            ctx->results[ctx->proto_index][oi][bi] = r;
            ctx->have_result[ctx->proto_index][oi][bi] = true;
        }
    }
    /* Leave the local buffer holding the pattern again (unverified WRITEs copy it). */
    if (o->verify)
        memcpy(ctx->local, ctx->reference, ctx->len);
    return 0;
}

static int run_baselines(eb_ctx *ctx)
{
    const eb_opts *o = ctx->o;
    char err[256];
    double secs = o->total != 0 && !o->duration_set ? 86400.0 : o->duration;
    if (cb_baseline_socket(o->subcmd, secs, o->total, &ctx->sock, err, sizeof(err)) < 0 ||
        cb_baseline_socket_streams(o->subcmd, 2, secs, o->total, &ctx->sock2, err, sizeof(err)) <
            0 ||
        cb_baseline_socket_fresh(o->subcmd, 1, secs, o->total, &ctx->fresh, err, sizeof(err)) < 0 ||
        cb_baseline_socket_fresh(o->subcmd, 2, secs, o->total, &ctx->fresh2, err, sizeof(err)) <
            0 ||
        cb_baseline_memcpy(secs, o->total, &ctx->mem, err, sizeof(err)) < 0 ||
        cb_baseline_pingpong(o->subcmd, 4096, o->duration > 0 ? o->duration : 1, &ctx->pp, err,
                             sizeof(err)) < 0) {
        fprintf(stderr, CB_PROG " engine: %s\n", err);
        return -1;
    }
    ctx->have_baseline = true;
    print_baselines(ctx);
    return 0;
}

/* ucx_perftest with the same UCX_TLS, in the same run (--ucx-perftest). */
static void run_ucx_perftest(eb_ctx *ctx)
{
    char err[256];
    const char *tls = getenv("UCX_TLS") ? getenv("UCX_TLS") : "(UCX's default)";
    if (cb_baseline_ucx_perftest("ucp_get", 1u << 20, 300, &ctx->ucx_get, err, sizeof(err)) < 0 ||
        cb_baseline_ucx_perftest("ucp_put_bw", 1u << 20, 300, &ctx->ucx_put, err, sizeof(err)) <
            0 ||
        cb_baseline_ucx_perftest("ucp_get", 4096, 3000, &ctx->ucx_get_4k, err, sizeof(err)) < 0) {
        printf("baseline ucx_perftest unavailable: %s\n", err);
        return;
    }
    ctx->have_ucx = true;
    printf("baseline ucx_perftest (UCX_TLS=%s, 127.0.0.1): ucp_get 1M %.3f GB/s, ucp_put_bw 1M "
           "%.3f GB/s, ucp_get 4K %.1f us typical\n",
           tls, ctx->ucx_get.gbps, ctx->ucx_put.gbps, ctx->ucx_get_4k.latency_us);
    if (cb_baseline_ucx_perftest_window("ucp_get", 4096, 3000, 1, &ctx->ucx_get_4k_o1, err,
                                        sizeof(err)) == 0 &&
        cb_baseline_ucx_perftest("ucp_am_lat", 4096, 3000, &ctx->ucx_am_lat_4k, err, sizeof(err)) ==
            0) {
        ctx->have_ucx_lat = true;
        printf("baseline ucx_perftest, one at a time: ucp_get -O 1 4K %.1f us, ucp_am_lat 4K "
               "%.1f us one way (%.1f us round trip)\n",
               ctx->ucx_get_4k_o1.latency_us, ctx->ucx_am_lat_4k.latency_us,
               2 * ctx->ucx_am_lat_4k.latency_us);
    } else {
        printf("baseline ucx_perftest one at a time unavailable: %s\n", err);
    }
    const char *prio = getenv("UCX_ALLOC_PRIO");
    char *saved = prio ? strdup(prio) : NULL;
    setenv("UCX_ALLOC_PRIO", "heap", 1); /* inherited by the perftest children */
    if (cb_baseline_ucx_perftest("ucp_get", 1u << 20, 100, &ctx->heap_get, err, sizeof(err)) == 0 &&
        cb_baseline_ucx_perftest("ucp_put_bw", 1u << 20, 100, &ctx->heap_put, err, sizeof(err)) ==
            0 &&
        cb_baseline_ucx_perftest_window("ucp_get", 4096, 300, 1, &ctx->heap_get_4k_o1, err,
                                        sizeof(err)) == 0) {
        ctx->have_ucx_heap = true;
        printf("baseline ucx_perftest on heap memory (UCX_ALLOC_PRIO=heap, like the memory "
               "crescent registers): ucp_get 1M %.3f GB/s, ucp_put_bw 1M %.3f GB/s, ucp_get -O 1 "
               "4K %.1f us\n",
               ctx->heap_get.gbps, ctx->heap_put.gbps, ctx->heap_get_4k_o1.latency_us);
    } else {
        printf("baseline ucx_perftest on heap memory unavailable: %s\n", err);
    }
    if (saved != NULL)
        setenv("UCX_ALLOC_PRIO", saved, 1);
    else
        unsetenv("UCX_ALLOC_PRIO");
    free(saved);
    fflush(stdout);
}

/* One protocol's cases: start its target, an engine, run every case, stop.
 * Returns an exit code. */
static int run_protocol(eb_ctx *ctx)
{
    const eb_opts *o = ctx->o;
    int rc = CB_EXIT_FAIL;
    char err[1024], why[160];
    cb_child child = CB_CHILD_INIT;
    ctx->engine = NULL;
    ctx->local = ctx->reference = ctx->expect = NULL;
    ctx->printed_header = false;

    bool spawned = o->target == NULL;
    if (spawned) {
        rc = spawn_target(o, &child, ctx);
        if (rc != CB_EXIT_OK)
            return rc;
        rc = CB_EXIT_FAIL;
    } else {
        snprintf(ctx->segment, sizeof(ctx->segment), "%s", o->target);
        ctx->remote_addr = o->target_addr;
        ctx->len = o->target_len;
    }

    ctx->local = alloc_registered(o, ctx->len);
    if (ctx->local == NULL && no_device) {
        rc = 77;
        goto free_buffers;
    }
    if (o->verify) {
        ctx->reference = alloc_buffer(ctx->len);
        ctx->expect = alloc_buffer(max_block(o));
    }
    if (ctx->local == NULL || (o->verify && (ctx->reference == NULL || ctx->expect == NULL))) {
        fprintf(stderr, CB_PROG " engine: cannot allocate %" PRIu64 " bytes\n", ctx->len);
        goto free_buffers;
    }
    if (o->device < 0)
        cb_pattern_fill(ctx->local, ctx->remote_addr, ctx->len, TARGET_SEED);
    if (o->verify)
        memcpy(ctx->reference, ctx->local, ctx->len);

    int st = make_engine(o, &ctx->engine);
    if (st < 0) {
        rc = engine_create_failed("initiator", st);
        goto free_buffers;
    }
    st = cr_engine_register(ctx->engine, ctx->local, ctx->len, NULL, true);
    if (st < 0) {
        fprintf(stderr, CB_PROG " engine: cr_engine_register: %s\n", why_failed(st));
        goto destroy_engine;
    }
    st = cr_engine_open_segment(ctx->engine, ctx->segment, &ctx->seg);
    if (st < 0) {
        fprintf(stderr, CB_PROG " engine: cr_engine_open_segment(%s): %s\n", ctx->segment,
                why_failed(st));
        goto unregister_local;
    }
    print_info(ctx, spawned);
    if (warm_up(ctx, err, sizeof(err)) < 0) {
        fprintf(stderr, CB_PROG " engine: warm-up: %s\n", err);
        goto close_segment;
    }
    if (run_cases(ctx) < 0)
        goto close_segment;
    rc = CB_EXIT_OK;

close_segment:
    cr_engine_close_segment(ctx->engine, ctx->seg);
unregister_local:
    cr_engine_unregister(ctx->engine, ctx->local);
destroy_engine:
    cr_engine_destroy(ctx->engine);
free_buffers:
    free_registered(o, ctx->local);
    free(ctx->reference);
    free(ctx->expect);
    if (rc != CB_EXIT_OK) {
        if (rc == 77)
            fprintf(stderr, CB_PROG " engine: not measured (exit 77)\n");
        cb_child_kill(&child);
    } else if (cb_child_stop(&child, CHILD_TIMEOUT, why, sizeof(why)) != 0) {
        fprintf(stderr, CB_PROG " engine: the target %s\n", why);
        rc = CB_EXIT_FAIL;
    }
    return rc;
}

/* --protocol a,b: the same cases side by side, each as a ratio to the
 * first protocol's (all measured in this run). */
static void print_comparison(const eb_ctx *ctx)
{
    const eb_opts *o = ctx->o;
    static const int ops[] = {CR_OP_READ, CR_OP_WRITE};
    if (o->json) {
        for (size_t p = 1; p < o->n_protocols; p++)
            for (size_t oi = 0; oi < 2; oi++)
                for (size_t bi = 0; bi < o->n_blocks; bi++) {
                    const eb_result *a = &ctx->results[0][oi][bi];
                    const eb_result *b = &ctx->results[p][oi][bi];
                    if (!ctx->have_result[0][oi][bi] || !ctx->have_result[p][oi][bi])
                        continue;
                    printf("{\"type\":\"protocol_ratio\",\"op\":\"%s\",\"block\":%" PRIu64
                           ",\"protocol\":\"%s\",\"versus\":\"%s\",\"gbps_ratio\":%.4f,"
                           "\"p50_ratio\":%.4f}\n",
                           op_name(ops[oi]), o->blocks[bi], o->protocols[p], o->protocols[0],
                           ratio(result_gbps(b), result_gbps(a)),
                           ratio((double)b->p50_ns, (double)a->p50_ns));
                }
        fflush(stdout);
        return;
    }
    printf("\nprotocols side by side (same run; ratios to %s):\n", o->protocols[0]);
    printf("%-5s %6s", "op", "block");
    for (size_t p = 0; p < o->n_protocols; p++)
        printf(" %9s %9s", o->protocols[p], "p50 us");
    for (size_t p = 1; p < o->n_protocols; p++)
        printf("  %s/%s GB/s, p50", o->protocols[p], o->protocols[0]);
    printf("\n");
    for (size_t oi = 0; oi < 2; oi++)
        for (size_t bi = 0; bi < o->n_blocks; bi++) {
            if (!ctx->have_result[0][oi][bi])
                continue;
            char bs[32];
            printf("%-5s %6s", op_name(ops[oi]), cb_format_size(o->blocks[bi], bs, sizeof(bs)));
            for (size_t p = 0; p < o->n_protocols; p++) {
                const eb_result *r = &ctx->results[p][oi][bi];
                printf(" %9.3f %9.1f", result_gbps(r), (double)r->p50_ns / 1e3);
            }
            const eb_result *a = &ctx->results[0][oi][bi];
            for (size_t p = 1; p < o->n_protocols; p++) {
                const eb_result *b = &ctx->results[p][oi][bi];
                printf("  %6.2fx, %5.2fx", ratio(result_gbps(b), result_gbps(a)),
                       ratio((double)b->p50_ns, (double)a->p50_ns));
            }
            printf("\n");
        }
    fflush(stdout);
}

static int initiator_main(const eb_opts *o)
{
    eb_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.o = o;
    ctx.progress = !o->quiet && isatty(STDERR_FILENO);

    if (o->verify && (o->device >= 0 || o->remote_device >= 0)) {
        fprintf(stderr, CB_PROG " engine: --verify checks bytes on the CPU; it cannot be used "
                                "with device memory (tests/gpu verifies device transfers)\n");
        return CB_EXIT_USAGE;
    }
    /* Baselines first, while no engine thread competes for the cores. */
    if (o->baseline && run_baselines(&ctx) < 0)
        return CB_EXIT_FAIL;
    if (o->ucx_perftest)
        run_ucx_perftest(&ctx);
    if (o->baseline && o->device >= 0) {
        double gbps = 0;
        uint64_t block = max_block(o);
        if (bench_device_copy_gbps(o->device, block, o->duration > 0 ? o->duration : 1, &gbps) == 0)
            printf("baseline cuMemcpyAsync device->device in one process, %" PRIu64
                   "-byte blocks: %.2f GB/s\n",
                   block, gbps);
        else
            printf("baseline device->device: not measured (%s)\n", cr_last_error_message());
    }

    /* Each protocol in turn, against the same baselines. */
    int rc = CB_EXIT_OK;
    for (size_t i = 0; i < o->n_protocols && rc == CB_EXIT_OK; i++) {
        eb_opts one = *o;
        one.protocol = o->protocols[i];
        ctx.o = &one;
        ctx.proto_index = i;
        if (o->n_protocols > 1 && !o->json)
            printf("%s== protocol %s ==\n", i > 0 ? "\n" : "", one.protocol);
        rc = run_protocol(&ctx);
    }
    ctx.o = o;
    if (rc == CB_EXIT_OK && o->n_protocols > 1)
        print_comparison(&ctx);
    return rc;
}

int cb_engine_main(int argc, char **argv)
{
    eb_opts o;
    int r = parse_opts(argc, argv, &o);
    if (r != 0)
        return r > 0 ? CB_EXIT_OK : CB_EXIT_USAGE;
    if (strcmp(o.role, "target") == 0)
        return target_main(&o);
    if (strcmp(o.role, "sink") == 0 || strcmp(o.role, "sink-fresh") == 0)
        return cb_sink_main(strcmp(o.role, "sink-fresh") == 0);
    if (strcmp(o.role, "echo") == 0)
        return cb_echo_main();
    return initiator_main(&o);
}
