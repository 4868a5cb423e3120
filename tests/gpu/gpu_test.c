/*
 * gpu_test.c - device memory through the engine, across two processes on
 * one GPU (docs/gpu.md). One binary, four roles:
 *
 *   gpu_test pair     device<->device, device<->host, host<->device with a
 *                     peer process, with protocol "auto" (CUDA IPC, legacy
 *                     cudaMalloc memory and a VMM allocation) and "tcp"
 *                     (pinned staging on both sides), plus in-process
 *                     copies; the engine's counters must show the path
 *   gpu_test seed000  24 short-lived threads with no CUDA context register
 *                     device buffers, transfer and unregister (seed 000);
 *                     no thread is left with a context it did not have
 *   gpu_test kill     kill -9 of the peer during transfers: they end
 *                     within a bound with named errors, the engine keeps
 *                     working with a new peer
 *   gpu_test secret   a peer with a shared secret: its CUDA IPC service
 *                     hands nothing to a same-uid process without the
 *                     proof; an engine with the secret moves device
 *                     memory through IPC, one with another secret cannot
 *   gpu_test peer P   the peer process (engine with protocol P)
 *
 * Every byte is verified where it lies: device buffers by a checksum
 * kernel (kernels.ptx: the mismatch count is computed on the device), host
 * buffers on the CPU. Without a CUDA driver every role exits 77 (skip).
 * With CRESCENT_CUDA_DRIVER naming the fake driver (fake_cuda.c) the same
 * code runs without a GPU, which checks the engine's logic, not CUDA's.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../engine/harness.h"
#include "crescent/engine.h"
#include "device/driver.h"
#include "proto/messages.h"
#include "gpu_kernels.h"

#define SZ   (4u << 20)  /* each buffer */
#define LEN  (SZ - 4097) /* an odd length: partial staging windows */
#define GRAN (2u << 20)

static crv_driver *D;
static CUmodule mod;
static CUfunction kfill, kcheck;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " (last error: %s)\n", cr_last_error_message());                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define CU(call) CHECK((call) == CUDA_SUCCESS, "%s", #call)

static int gpu_open(void)
{
    if (crv_driver_open(&D) < 0) {
        fprintf(stderr, "skip: %s\n", cr_last_error_message());
        return 77;
    }
    CHECK(crv_bind(D, 0) == 0, "binding cuda:0");
    CHECK(D->module_load_data && D->launch_kernel, "driver has no kernel entry points");
    CU(D->module_load_data(&mod, crescent_gpu_kernels_ptx));
    CU(D->module_get_function(&kfill, mod, "crescent_fill"));
    CU(D->module_get_function(&kcheck, mod, "crescent_check"));
    return 0;
}

static uint8_t pattern(uint64_t i, uint64_t seed)
{
    return (uint8_t)(((i + seed) * 0x9E3779B97F4A7C15ull) >> 56);
}

static uint64_t dev_alloc(size_t n)
{
    CUdeviceptr p;
    CU(D->mem_alloc(&p, n));
    return p;
}

/* A VMM allocation exportable as a POSIX fd (PyTorch's expandable segments). */
static uint64_t vmm_alloc(size_t n)
{
    CHECK(D->vmm, "driver lacks the VMM API");
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    size_t size = (n + GRAN - 1) / GRAN * GRAN;
    CUmemGenericAllocationHandle h;
    CUdeviceptr p;
    CU(D->mem_create(&h, size, &prop, 0));
    CU(D->mem_address_reserve(&p, size, 0, 0, 0));
    CU(D->mem_map(p, size, 0, h, 0));
    CUmemAccessDesc acc = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU(D->mem_set_access(p, size, &acc, 1));
    D->mem_release(h); /* the mapping keeps it */
    return p;
}

static void launch(CUfunction f, void **params)
{
    CU(D->launch_kernel(f, 264, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
}

static void dev_fill(uint64_t p, uint64_t n, uint64_t seed)
{
    void *params[] = {&p, &n, &seed};
    launch(kfill, params);
    uint8_t probe;
    CU(D->memcpy_dtoh(&probe, p, 1)); /* synchronises with the default stream */
}

/* Bytes of [p, p+n) that differ from the pattern, counted on the device. */
static uint64_t dev_check(uint64_t p, uint64_t n, uint64_t seed)
{
    static uint64_t bad_dev;
    if (bad_dev == 0)
        bad_dev = dev_alloc(8);
    CU(D->memset_d8(bad_dev, 0, 8));
    void *params[] = {&p, &n, &seed, &bad_dev};
    launch(kcheck, params);
    uint64_t bad = 0;
    CU(D->memcpy_dtoh(&bad, bad_dev, 8));
    return bad;
}

static void host_fill(uint8_t *p, uint64_t n, uint64_t seed)
{
    for (uint64_t i = 0; i < n; i++)
        p[i] = pattern(i, seed);
}

static uint64_t host_check(const uint8_t *p, uint64_t n, uint64_t seed)
{
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++)
        bad += p[i] != pattern(i, seed);
    return bad;
}

static cr_engine *make_engine(const char *protocol)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.protocol = protocol;
    cfg.request_timeout_ms = 5000;
    cfg.connect_timeout_ms = 2000;
    cfg.shared_secret = getenv("CRESCENT_GPU_TEST_SECRET"); /* the peer inherits it */
    cr_engine *e = NULL;
    CHECK(cr_engine_create(&cfg, &e) == 0, "engine %s", protocol);
    return e;
}

static uint64_t counter(cr_engine *e, const char *tp, const char *name)
{
    cr_engine_counter c[128];
    size_t n = 0;
    cr_engine_counters(e, c, 128, &n);
    for (size_t i = 0; i < n && i < 128; i++)
        if (strcmp(c[i].transport, tp) == 0 && strcmp(c[i].name, name) == 0)
            return c[i].value;
    return 0;
}

static int xfer(cr_engine *e, cr_segment_handle seg, int op, uint64_t local, uint64_t remote,
                uint64_t n)
{
    return cr_engine_transfer_sync(e, op, (void *)(uintptr_t)local, seg, remote, n, 0);
}

/* --- the peer process --------------------------------------------------- */

static int peer_main(const char *protocol)
{
    int rc = gpu_open();
    if (rc != 0)
        return rc;
    cr_engine *e = make_engine(protocol);
    uint64_t a = dev_alloc(SZ), b = vmm_alloc(SZ);
    void *h = NULL;
    CHECK(cr_alloc_shared(SZ, &h) == 0, "shared host buffer");
    cr_buffer_spec specs[3] = {{(void *)(uintptr_t)a, SZ, "*", true},
                               {(void *)(uintptr_t)b, SZ, "*", true},
                               {h, SZ, "*", true}};
    CHECK(cr_engine_register_batch(e, specs, 3) == 0, "peer registrations");
    char name[256];
    cr_engine_segment_name(e, name, sizeof(name));
    printf("READY %s\n", name);
    fflush(stdout);
    char line[512];
    while (fgets(line, sizeof(line), stdin) != NULL) {
        unsigned long long x = 0, n = 0, seed = 0;
        char cmd[32];
        if (sscanf(line, "%31s %llx %llu %llu", cmd, &x, &n, &seed) < 1)
            continue;
        if (strcmp(cmd, "addrs") == 0) {
            printf("A %llx B %llx H %llx\n", (unsigned long long)a, (unsigned long long)b,
                   (unsigned long long)(uintptr_t)h);
        } else if (strcmp(cmd, "fill") == 0) {
            if (x >= (uintptr_t)h && x < (uintptr_t)h + SZ)
                host_fill((uint8_t *)(uintptr_t)x, n, seed);
            else
                dev_fill(x, n, seed);
            printf("OK\n");
        } else if (strcmp(cmd, "check") == 0) {
            uint64_t bad = x >= (uintptr_t)h && x < (uintptr_t)h + SZ
                               ? host_check((const uint8_t *)(uintptr_t)x, n, seed)
                               : dev_check(x, n, seed);
            printf("BAD %llu\n", (unsigned long long)bad);
        } else if (strcmp(cmd, "quit") == 0) {
            printf("BYE\n");
            fflush(stdout);
            break;
        } else {
            printf("ERR unknown command\n");
        }
        fflush(stdout);
    }
    cr_engine_destroy(e);
    cr_free_shared(h);
    return 0;
}

typedef struct remote {
    test_peer p;
    uint64_t a, b, h;
} remote;

/* Peers alive, killed at exit so a failed CHECK leaves no process behind. */
static pid_t live_peers[8];

static void kill_live_peers(void)
{
    for (size_t i = 0; i < sizeof(live_peers) / sizeof(live_peers[0]); i++)
        if (live_peers[i] > 0 && kill(live_peers[i], 0) == 0) {
            kill(live_peers[i], SIGKILL);
            waitpid(live_peers[i], NULL, 0);
        }
}

static void start_peer(remote *r, const char *protocol)
{
    const char *args[] = {"peer", protocol, NULL};
    static bool hooked;
    if (!hooked) {
        atexit(kill_live_peers);
        hooked = true;
    }
    CHECK(peer_start(&r->p, args) == 0, "starting the peer");
    for (size_t i = 0; i < sizeof(live_peers) / sizeof(live_peers[0]); i++)
        if (live_peers[i] <= 0 || kill(live_peers[i], 0) != 0) {
            live_peers[i] = r->p.child.proc.pid;
            break;
        }
    unsigned long long a, b, h;
    CHECK(sscanf(peer_cmd(&r->p, "addrs"), "A %llx B %llx H %llx", &a, &b, &h) == 3, "addrs");
    r->a = a;
    r->b = b;
    r->h = h;
}

static uint64_t peer_check(remote *r, uint64_t addr, uint64_t n, uint64_t seed)
{
    unsigned long long bad = ~0ull;
    const char *l = peer_cmd(&r->p, "check %llx %llu %llu", (unsigned long long)addr,
                             (unsigned long long)n, (unsigned long long)seed);
    CHECK(sscanf(l, "BAD %llu", &bad) == 1, "peer check answered '%s'", l);
    return bad;
}

static void peer_fill(remote *r, uint64_t addr, uint64_t n, uint64_t seed)
{
    const char *l = peer_cmd(&r->p, "fill %llx %llu %llu", (unsigned long long)addr,
                             (unsigned long long)n, (unsigned long long)seed);
    CHECK(strcmp(l, "OK") == 0, "peer fill answered '%s'", l);
}

/* --- pair ---------------------------------------------------------------- */

static void pair_round(const char *protocol)
{
    remote r;
    start_peer(&r, protocol);
    cr_engine *e = make_engine(protocol);
    uint64_t la = dev_alloc(SZ);
    uint8_t *lh = malloc(SZ);
    void *lp = NULL;
    CU(D->mem_host_alloc(&lp, SZ, CU_MEMHOSTALLOC_PORTABLE));
    /* A contradicting location is refused; "*" detects device memory. */
    CHECK(cr_engine_register(e, (void *)(uintptr_t)la, SZ, "cpu:0", true) ==
              CR_ERR_MEMORY_KIND_MISMATCH,
          "cpu:0 on device memory must be refused");
    CHECK(cr_engine_register(e, lh, SZ, "cuda:0", true) == CR_ERR_MEMORY_KIND_MISMATCH,
          "cuda:0 on host memory must be refused");
    CHECK(cr_engine_register(e, (void *)(uintptr_t)la, SZ, "*", true) == 0, "register la");
    CHECK(cr_engine_register(e, lh, SZ, "*", true) == 0, "register lh");
    CHECK(cr_engine_register(e, lp, SZ, "*", true) == 0, "register lp");
    cr_segment_handle seg, self;
    CHECK(cr_engine_open_segment(e, r.p.name, &seg) == 0, "open peer");
    char myname[256];
    cr_engine_segment_name(e, myname, sizeof(myname));
    CHECK(cr_engine_open_segment(e, myname, &self) == 0, "open self");
    /* The peer's descriptor carries the kinds it detected. */
    cr_buffer_info info[3];
    size_t total = 0;
    CHECK(cr_engine_segment_buffers(e, seg, info, 3, &total) == 0 && total == 3, "buffers");
    for (size_t i = 0; i < 3; i++) {
        int want = info[i].addr == r.h ? CR_MEM_HOST_SHAREABLE : CR_MEM_CUDA;
        CHECK(info[i].kind == want, "buffer 0x%llx is kind %d, not %d",
              (unsigned long long)info[i].addr, info[i].kind, want);
    }
    /* device -> peer device (legacy) */
    dev_fill(la, LEN, 11);
    CHECK(xfer(e, seg, CR_OP_WRITE, la, r.a, LEN) == 0, "%s: WRITE dev->peer dev", protocol);
    CHECK(peer_check(&r, r.a, LEN, 11) == 0, "%s: peer A after WRITE", protocol);
    /* peer device (VMM) -> device */
    peer_fill(&r, r.b + 1, LEN, 12);
    CHECK(xfer(e, seg, CR_OP_READ, la, r.b + 1, LEN) == 0, "%s: READ peer vmm->dev", protocol);
    CHECK(dev_check(la, LEN, 12) == 0, "%s: la after READ of B", protocol);
    /* host (pageable) -> peer device, peer device -> host */
    host_fill(lh, LEN, 13);
    CHECK(xfer(e, seg, CR_OP_WRITE, (uint64_t)(uintptr_t)lh, r.b, LEN) == 0, "%s: WRITE host->vmm",
          protocol);
    CHECK(peer_check(&r, r.b, LEN, 13) == 0, "%s: peer B after WRITE", protocol);
    peer_fill(&r, r.a, LEN, 14);
    CHECK(xfer(e, seg, CR_OP_READ, (uint64_t)(uintptr_t)lh, r.a, LEN) == 0, "%s: READ dev->host",
          protocol);
    CHECK(host_check(lh, LEN, 14) == 0, "%s: lh after READ of A", protocol);
    /* device -> peer shared host memory and back */
    dev_fill(la, LEN, 15);
    CHECK(xfer(e, seg, CR_OP_WRITE, la, r.h, LEN) == 0, "%s: WRITE dev->peer host", protocol);
    CHECK(peer_check(&r, r.h, LEN, 15) == 0, "%s: peer H after WRITE", protocol);
    peer_fill(&r, r.h, LEN, 16);
    CHECK(xfer(e, seg, CR_OP_READ, la, r.h, LEN) == 0, "%s: READ peer host->dev", protocol);
    CHECK(dev_check(la, LEN, 16) == 0, "%s: la after READ of H", protocol);
    /* pinned host -> peer device */
    host_fill(lp, LEN, 17);
    CHECK(xfer(e, seg, CR_OP_WRITE, (uint64_t)(uintptr_t)lp, r.a, LEN) == 0, "%s: pinned->dev",
          protocol);
    CHECK(peer_check(&r, r.a, LEN, 17) == 0, "%s: peer A after pinned WRITE", protocol);
    /* in this process: device -> pageable host, pinned host -> device */
    dev_fill(la, LEN, 18);
    CHECK(xfer(e, self, CR_OP_WRITE, la, (uint64_t)(uintptr_t)lh, LEN) == 0, "%s: self d2h",
          protocol);
    CHECK(host_check(lh, LEN, 18) == 0, "%s: lh after self WRITE", protocol);
    host_fill(lp, LEN, 19);
    CHECK(xfer(e, self, CR_OP_READ, la, (uint64_t)(uintptr_t)lp, LEN) == 0, "%s: self h2d",
          protocol);
    CHECK(dev_check(la, LEN, 19) == 0, "%s: la after self READ", protocol);
    /* host buffers still move as before next to device memory (seed 002) */
    host_fill(lh, 65536, 20);
    CHECK(xfer(e, seg, CR_OP_WRITE, (uint64_t)(uintptr_t)lh, r.h, 65536) == 0, "host->host");
    CHECK(peer_check(&r, r.h, 65536, 20) == 0, "peer H after host WRITE");
    /* the path taken is in the counters */
    uint64_t ipc = counter(e, "cuda", "bytes_ipc"), tcp = counter(e, "tcp", "bytes");
    uint64_t out = counter(e, "cuda", "bytes_staged_out"),
             in = counter(e, "cuda", "bytes_staged_in");
    printf("%s: cuda bytes_ipc %llu staged_out %llu staged_in %llu bounced %llu; tcp bytes %llu\n",
           protocol, (unsigned long long)ipc, (unsigned long long)out, (unsigned long long)in,
           (unsigned long long)counter(e, "cuda", "bytes_bounced"), (unsigned long long)tcp);
    if (strcmp(protocol, "tcp") == 0) {
        CHECK(ipc == 0 && out >= 3ull * LEN && in >= 3ull * LEN && tcp > 0,
              "tcp must stage device memory");
    } else {
        CHECK(ipc >= 5ull * LEN && tcp == 0 && out == 0 && in == 0,
              "auto must use CUDA IPC and never tcp on one host");
    }
    CHECK(peer_stop(&r.p) == 0, "peer exit");
    cr_engine_destroy(e);
    CU(D->mem_free(la));
    CU(D->mem_free_host(lp));
    free(lh);
}

/* --- seed 000 ----------------------------------------------------------- */

#define THREADS 24
#define PER     7
#define PIECE   (16u << 10)

typedef struct seed_job {
    cr_engine *e;
    cr_segment_handle seg;
    uint64_t region, target;
    int index;
    int failed;
} seed_job;

static void *seed_thread(void *arg)
{
    seed_job *j = arg;
    CUcontext c = (CUcontext)1;
    D->ctx_get_current(&c);
    if (c != NULL) {
        j->failed = 1; /* a fresh thread has no context */
        return NULL;
    }
    for (int k = 0; k < PER; k++) {
        uint64_t off = ((uint64_t)j->index * PER + (uint64_t)k) * PIECE;
        void *p = (void *)(uintptr_t)(j->region + off);
        if (cr_engine_register(j->e, p, PIECE, "*", false) != 0 ||
            cr_engine_transfer_sync(j->e, CR_OP_WRITE, p, j->seg, j->target + off, PIECE, 0) != 0 ||
            cr_engine_unregister(j->e, p) != 0) {
            fprintf(stderr, "thread %d piece %d: %s\n", j->index, k, cr_last_error_message());
            j->failed = 2;
            return NULL;
        }
    }
    D->ctx_get_current(&c);
    if (c != NULL)
        j->failed = 3; /* the engine left its context on our thread */
    return NULL;
}

static int seed000(void)
{
    remote r;
    start_peer(&r, "auto");
    cr_engine *e = make_engine("auto");
    cr_segment_handle seg;
    CHECK(cr_engine_open_segment(e, r.p.name, &seg) == 0, "open peer");
    uint64_t total = (uint64_t)THREADS * PER * PIECE;
    CHECK(total <= SZ, "pieces fit the peer's buffer");
    uint64_t region = dev_alloc(total);
    dev_fill(region, total, 31); /* the owner thread fills it */
    for (int round = 0; round < 3; round++) {
        pthread_t th[THREADS];
        seed_job jobs[THREADS];
        for (int i = 0; i < THREADS; i++) {
            jobs[i] = (seed_job){e, seg, region, r.a, i, 0};
            CHECK(pthread_create(&th[i], NULL, seed_thread, &jobs[i]) == 0, "thread");
        }
        for (int i = 0; i < THREADS; i++) {
            pthread_join(th[i], NULL);
            CHECK(jobs[i].failed == 0, "round %d thread %d failed (%d)", round, i, jobs[i].failed);
        }
        CHECK(cr_engine_registration_count(e) == 0, "every registration was undone");
        CHECK(peer_check(&r, r.a, total, 31) == 0, "round %d: peer holds every piece", round);
        peer_fill(&r, r.a, total, 0); /* scramble for the next round */
    }
    printf("seed000: %d threads x %d registrations x 3 rounds verified\n", THREADS, PER);
    CHECK(peer_stop(&r.p) == 0, "peer exit");
    cr_engine_destroy(e);
    CU(D->mem_free(region));
    return 0;
}

/* --- kill -9 ------------------------------------------------------------- */

typedef struct loop_job {
    cr_engine *e;
    cr_segment_handle seg;
    uint64_t local, target;
    atomic_int stop;
    atomic_int last_error;
    atomic_int ok;
} loop_job;

static void *loop_thread(void *arg)
{
    loop_job *j = arg;
    while (!atomic_load(&j->stop)) {
        int rc = cr_engine_transfer_sync(j->e, CR_OP_WRITE, (void *)(uintptr_t)j->local, j->seg,
                                         j->target, LEN, 0);
        if (rc != 0) {
            atomic_store(&j->last_error, rc);
            break;
        }
        atomic_fetch_add(&j->ok, 1);
    }
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int kill_peer(const char *protocol)
{
    remote r;
    start_peer(&r, protocol);
    cr_engine *e = make_engine(protocol);
    uint64_t la = dev_alloc(SZ);
    CHECK(cr_engine_register(e, (void *)(uintptr_t)la, SZ, "*", false) == 0, "register");
    cr_segment_handle seg;
    CHECK(cr_engine_open_segment(e, r.p.name, &seg) == 0, "open peer");
    dev_fill(la, LEN, 41);
    loop_job j = {.e = e, .seg = seg, .local = la, .target = r.a};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, loop_thread, &j) == 0, "thread");
    /* kill once transfers are flowing (slowly, under a sanitizer) */
    for (int i = 0; i < 1000 && atomic_load(&j.ok) < 3 && atomic_load(&j.last_error) == 0; i++)
        usleep(10 * 1000);
    usleep(50 * 1000);
    peer_kill(&r.p); /* SIGKILL, reaped */
    double killed = now_s();
    /* The transfers end, with a named error, within the request timeout. */
    while (atomic_load(&j.last_error) == 0 && now_s() - killed < 15)
        usleep(10 * 1000);
    atomic_store(&j.stop, 1);
    pthread_join(th, NULL);
    double took = now_s() - killed;
    int ok = atomic_load(&j.ok), last = atomic_load(&j.last_error);
    printf("kill %s: %d transfers before the kill; then %s after %.2f s\n", protocol, ok,
           cr_status_name(last), took);
    CHECK(ok > 0, "transfers ran before the kill");
    CHECK(last != 0 && strcmp(cr_status_name(last), "UNKNOWN") != 0,
          "transfers to a dead peer fail with a named error");
    CHECK(took < 12, "they failed within the deadline");
    /* The engine keeps working: a new peer, a verified transfer. */
    remote r2;
    start_peer(&r2, protocol);
    cr_segment_handle seg2;
    CHECK(cr_engine_open_segment(e, r2.p.name, &seg2) == 0, "open new peer");
    dev_fill(la, LEN, 42);
    CHECK(xfer(e, seg2, CR_OP_WRITE, la, r2.a, LEN) == 0, "transfer to the new peer");
    CHECK(peer_check(&r2, r2.a, LEN, 42) == 0, "new peer's bytes");
    CHECK(peer_stop(&r2.p) == 0, "peer exit");
    cr_engine_destroy(e);
    CU(D->mem_free(la));
    return 0;
}

/* --- no driver (CRESCENT_CUDA_DRIVER names a missing library) -------------
 * The engine starts, says why there is no CUDA, keeps moving host memory,
 * and refuses device memory at submit with a named error. */
static int no_driver(void)
{
    crv_driver *d = NULL;
    CHECK(crv_driver_open(&d) == CR_ERR_NO_CUDA, "the driver must be missing for this role");
    CHECK(strstr(cr_last_error_message(), "cannot load the CUDA driver") != NULL, "reason");
    cr_engine *e = make_engine("auto");
    CHECK(counter(e, "cuda", "driver_loaded") == 0, "no cuda transport without a driver");
    static uint8_t host[65536], declared[65536];
    CHECK(cr_engine_register(e, host, sizeof(host), "*", true) == 0, "host buffer");
    CHECK(cr_engine_register(e, declared, sizeof(declared), "cuda:0", true) == 0,
          "cuda:N without a driver is recorded as data");
    char name[256];
    cr_engine_segment_name(e, name, sizeof(name));
    cr_segment_handle self;
    CHECK(cr_engine_open_segment(e, name, &self) == 0, "open self");
    memset(host, 7, 4096);
    CHECK(xfer(e, self, CR_OP_WRITE, (uint64_t)(uintptr_t)host, (uint64_t)(uintptr_t)host + 8192,
               4096) == 0,
          "host memory still moves");
    int rc =
        xfer(e, self, CR_OP_WRITE, (uint64_t)(uintptr_t)host, (uint64_t)(uintptr_t)declared, 4096);
    CHECK(rc == CR_ERR_TRANSPORT_UNSUPPORTED, "device memory refused at submit (%d)", rc);
    CHECK(strstr(cr_last_error_message(), "cuda") != NULL &&
              strstr(cr_last_error_message(), "no driver") != NULL,
          "the refusal names the kind and the missing driver");
    cr_engine_destroy(e);
    printf("nodriver: host memory moves, device memory refused: %s\n", cr_last_error_message());
    return 0;
}

/* --- secret ------------------------------------------------------------- */

/* Connect to the CUDA IPC service of process pid as an attacker of the
 * same uid would: its abstract socket is listed in /proc/net/unix. */
static int connect_cuda_service(pid_t pid)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "@crescent-cuda-%d-", (int)pid);
    int s = tt_connect_abstract(prefix);
    CHECK(s >= 0, "no cuda service of pid %d to connect to in /proc/net/unix", (int)pid);
    return s;
}

/* One datagram from the service: its length (0: closed), whether an fd came. */
static ssize_t recv_datagram(int s, uint8_t *buf, size_t cap, bool *got_fd)
{
    union {
        char c[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {buf, cap};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.c, .msg_controllen = sizeof(u.c)};
    ssize_t n = recvmsg(s, &mh, 0);
    *got_fd = false;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm), sizeof(int));
            close(fd);
            *got_fd = true;
        }
    return n;
}

/* Ask for the control page (the first thing an importer asks) without
 * proving the secret: refused, no fd, connection closed. */
static void raw_ask_is_refused(pid_t pid, bool made_up_proof)
{
    int s = connect_cuda_service(pid);
    uint8_t buf[256];
    bool fd = false;
    ssize_t n = recv_datagram(s, buf, sizeof(buf), &fd);
    crp_shm_reply hi;
    CHECK(n > 0 && crp_shm_reply_decode(buf, (size_t)n, &hi) == 0 && hi.has_nonce && hi.auth && !fd,
          "the greeting must ask for the secret");
    if (made_up_proof) {
        crp_shm_request auth = {.op = CRP_SHM_AUTH};
        memset(auth.client_nonce, 7, sizeof(auth.client_nonce));
        memset(auth.mac, 0x5a, sizeof(auth.mac));
        crp_buf b = {0};
        CHECK(crp_shm_request_encode(&auth, &b) == 0, "encode");
        CHECK(send(s, b.data, b.len, MSG_NOSIGNAL) == (ssize_t)b.len, "send proof");
        crp_buf_free(&b);
    } else {
        uint8_t ask[12] = {1}; /* a cuda_req (docs/WIRE.md): op 1, the control page */
        CHECK(send(s, ask, sizeof(ask), MSG_NOSIGNAL) == (ssize_t)sizeof(ask), "send ask");
    }
    n = recv_datagram(s, buf, sizeof(buf), &fd);
    crp_shm_reply r;
    CHECK(n > 0 && crp_shm_reply_decode(buf, (size_t)n, &r) == 0 && r.status == CR_ERR_AUTH_FAILED,
          "a %s must be answered AUTH_FAILED", made_up_proof ? "made-up proof" : "bare request");
    CHECK(!fd, "no fd without the secret");
    n = recv_datagram(s, buf, sizeof(buf), &fd);
    CHECK(n == 0, "the service must close the connection (got %zd)", n);
    close(s);
}

static int secret_round(void)
{
    setenv("CRESCENT_GPU_TEST_SECRET", "s3cret", 1);
    remote r;
    start_peer(&r, "auto");
    raw_ask_is_refused(r.p.child.proc.pid, false);
    raw_ask_is_refused(r.p.child.proc.pid, true);
    /* With the secret: device memory through IPC, every byte checked. */
    cr_engine *e = make_engine("auto");
    uint64_t la = dev_alloc(SZ);
    CHECK(cr_engine_register(e, (void *)(uintptr_t)la, SZ, "*", true) == 0, "register la");
    cr_segment_handle seg;
    CHECK(cr_engine_open_segment(e, r.p.name, &seg) == 0, "open peer");
    dev_fill(la, LEN, 31);
    CHECK(xfer(e, seg, CR_OP_WRITE, la, r.a, LEN) == 0, "WRITE with the secret");
    CHECK(peer_check(&r, r.a, LEN, 31) == 0, "peer A after WRITE");
    CHECK(counter(e, "cuda", "bytes_ipc") >= LEN, "the secret's holder must use CUDA IPC");
    cr_engine_destroy(e);
    /* Another secret: nothing moves, and not through IPC. */
    setenv("CRESCENT_GPU_TEST_SECRET", "guess", 1);
    e = make_engine("auto");
    CHECK(cr_engine_register(e, (void *)(uintptr_t)la, SZ, "*", true) == 0, "register la");
    int rc = cr_engine_open_segment(e, r.p.name, &seg);
    if (rc == 0)
        rc = xfer(e, seg, CR_OP_WRITE, la, r.a, LEN);
    CHECK(rc < 0, "another secret must not move device memory");
    CHECK(counter(e, "cuda", "bytes_ipc") == 0, "another secret: no IPC bytes");
    printf("secret: another secret gets %s (%s)\n", cr_status_name(rc), cr_last_error_message());
    cr_engine_destroy(e);
    CU(D->mem_free(la));
    CHECK(peer_stop(&r.p) == 0, "peer exit");
    printf("secret: the CUDA IPC service needs the shared secret\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "peer") == 0)
        return peer_main(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "nodriver") == 0)
        return no_driver();
    int rc = gpu_open();
    if (rc != 0)
        return rc;
    setenv("CRESCENT_PEER_BIN", "/proc/self/exe", 1);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        setenv("CRESCENT_PEER_BIN", self, 1);
    }
    const char *role = argc >= 2 ? argv[1] : "pair";
    if (strcmp(role, "pair") == 0) {
        const char *only = getenv("CRESCENT_GPU_TEST_PROTOCOL"); /* one round, for debugging */
        if (only == NULL || strcmp(only, "auto") == 0)
            pair_round("auto");
        if (only == NULL || strcmp(only, "tcp") == 0)
            pair_round("tcp");
        printf("pair: every byte verified\n");
        return 0;
    }
    if (strcmp(role, "seed000") == 0)
        return seed000();
    if (strcmp(role, "secret") == 0)
        return secret_round();
    if (strcmp(role, "kill") == 0) {
        kill_peer("auto");
        return kill_peer("tcp");
    }
    fprintf(stderr, "usage: %s pair|seed000|kill|secret|peer PROTOCOL\n", argv[0]);
    return 2;
}
