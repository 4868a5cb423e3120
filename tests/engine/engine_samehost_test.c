/*
 * engine_samehost_test.c - same-host transports with real processes:
 * shared memory (shm) for cr_alloc_shared buffers, process_vm_readv/writev
 * (cma) for private ones, tcp when a peer refuses either; the protocol
 * choice honoured; a peer of another user refused fds; peer death dropping
 * mappings; the unregistration fence; a buffer registered again at a freed
 * one's address read at the latest on the second try; mixed memory kinds (seed 002); the
 * fd service refusing a same-uid process without the shared secret.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "crescent/engine.h"
#include "harness.h"
#include "proto/messages.h"

static cr_engine *make_engine(const char *protocol)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.protocol = protocol;
    cfg.request_timeout_ms = 5000;
    cr_engine *e = NULL;
    assert_int_equal(cr_engine_create(&cfg, &e), 0);
    return e;
}

static void check_pattern(const uint8_t *p, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        if (p[i] != test_pattern(i, seed))
            fail_msg("byte %llu: got %u want %u", (unsigned long long)i, p[i],
                     test_pattern(i, seed));
}

static void fill(uint8_t *p, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        p[i] = test_pattern(i, seed);
}

/* Read the whole remote buffer, verify, write a new pattern at an offset,
 * have the peer check it. */
static void round_trip(cr_engine *e, test_peer *peer, cr_segment_handle seg, uint8_t *local,
                       uint64_t remote, uint64_t len, uint64_t seed)
{
    memset(local, 0, len);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_READ, local, seg, remote, len, 0), 0);
    check_pattern(local, len, remote);
    fill(local, len - 100, seed);
    assert_int_equal(
        cr_engine_transfer_sync(e, CR_OP_WRITE, local, seg, remote + 100, len - 100, 0), 0);
    assert_string_equal(peer_cmd(peer, "check %llu %llu %llu", (unsigned long long)(remote + 100),
                                 (unsigned long long)(len - 100), (unsigned long long)seed),
                        "OK");
    /* Put the original contents back for the next round trip. */
    fill(local, len, remote);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_WRITE, local, seg, remote, len, 0), 0);
}

static void every_path_is_taken(void **state)
{
    (void)state;
    test_peer peer;
    assert_int_equal(peer_start(&peer, NULL), 0);
    const uint64_t len = 4 << 20;
    uint64_t shared = peer_reg(&peer, "shared", len, 0);
    uint64_t priv = peer_reg(&peer, "cpu:0", len, 0);
    assert_true(shared != 0 && priv != 0);
    uint8_t *local = malloc(len);

    /* auto: shm for shareable memory, cma for private memory, no tcp. */
    cr_engine *e = make_engine("auto");
    assert_int_equal(cr_engine_register(e, local, len, "cpu:0", true), 0);
    cr_segment_handle seg;
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
    cr_engine_stats st;
    cr_engine_get_stats(e, &st);
    assert_int_equal(st.shm_mappings, 0); /* nothing mapped at connect time */
    round_trip(e, &peer, seg, local, shared, len, 11);
    cr_engine_get_stats(e, &st);
    assert_int_equal(st.bytes_shm, 3 * len - 100);
    assert_int_equal(st.shm_mappings, 1);
    round_trip(e, &peer, seg, local, priv, len, 12);
    cr_engine_get_stats(e, &st);
    assert_int_equal(st.bytes_cma, 3 * len - 100);
    assert_int_equal(st.bytes_tcp, 0);
    assert_int_equal(cr_engine_unregister(e, local), 0);
    cr_engine_destroy(e);

    /* cma requested: process_vm_readv/writev for both buffers, even the
     * shareable one (shm is installed for its control page only). */
    e = make_engine("cma");
    assert_int_equal(cr_engine_register(e, local, len, "cpu:0", true), 0);
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
    round_trip(e, &peer, seg, local, shared, len, 15);
    round_trip(e, &peer, seg, local, priv, len, 16);
    cr_engine_get_stats(e, &st);
    assert_int_equal(st.bytes_cma, 2 * (3 * len - 100));
    assert_int_equal(st.bytes_shm + st.bytes_tcp, 0);
    assert_int_equal(cr_engine_unregister(e, local), 0);
    cr_engine_destroy(e);

    /* tcp requested: nothing else is used, even on one host. */
    e = make_engine("tcp");
    assert_int_equal(cr_engine_register(e, local, len, "cpu:0", true), 0);
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
    round_trip(e, &peer, seg, local, shared, len, 13);
    cr_engine_get_stats(e, &st);
    assert_int_equal(st.bytes_shm + st.bytes_cma, 0);
    assert_int_equal(st.bytes_tcp, 3 * len - 100);
    assert_int_equal(cr_engine_unregister(e, local), 0);
    cr_engine_destroy(e);

    /* Another (simulated) host: tcp, although both paths exist here. */
    setenv("CRESCENT_HOST_ID", "somewhere-else", 1);
    e = make_engine("auto");
    unsetenv("CRESCENT_HOST_ID");
    assert_int_equal(cr_engine_register(e, local, len, "cpu:0", true), 0);
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
    round_trip(e, &peer, seg, local, shared, len, 14);
    cr_engine_get_stats(e, &st);
    assert_int_equal(st.bytes_shm + st.bytes_cma, 0);
    assert_true(st.bytes_tcp > 0);
    assert_int_equal(cr_engine_unregister(e, local), 0);
    cr_engine_destroy(e);

    /* shm only, with a peer that offers no CMA: the private buffer cannot
     * be reached and the refusal names it. */
    test_peer nocma;
    const char *args[] = {"--no-cma", NULL};
    assert_int_equal(peer_start(&nocma, args), 0);
    uint64_t priv2 = peer_reg(&nocma, "cpu:0", 4096, 0);
    e = make_engine("shm");
    assert_int_equal(cr_engine_register(e, local, len, "cpu:0", true), 0);
    assert_int_equal(cr_engine_open_segment(e, nocma.name, &seg), 0);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_READ, local, seg, priv2, 4096, 0),
                     CR_ERR_TRANSPORT_UNSUPPORTED);
    assert_int_equal(cr_engine_unregister(e, local), 0);
    cr_engine_destroy(e);
    assert_int_equal(peer_stop(&nocma), 0);

    free(local);
    assert_int_equal(peer_stop(&peer), 0);
}

/* Runs in a child that dropped to uid/gid 65534: exit code says what failed. */
static int unprivileged_initiator(const char *peer_name, uint64_t shared, uint64_t priv,
                                  int expect_shm)
{
    if (setgid(65534) != 0 || setuid(65534) != 0)
        return 10;
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cr_engine *e;
    if (cr_engine_create(&cfg, &e) != 0)
        return 11;
    uint64_t len = 1 << 20;
    uint8_t *local = malloc(len);
    int rc = 0;
    cr_segment_handle seg;
    if (cr_engine_register(e, local, len, "cpu:0", true) != 0 ||
        cr_engine_open_segment(e, peer_name, &seg) != 0)
        rc = 12;
    if (rc == 0 && cr_engine_transfer_sync(e, CR_OP_READ, local, seg, shared, len, 0) != 0)
        rc = 13;
    for (uint64_t i = 0; rc == 0 && i < len; i++)
        if (local[i] != test_pattern(i, shared))
            rc = 14;
    if (rc == 0 && cr_engine_transfer_sync(e, CR_OP_READ, local, seg, priv, len, 0) != 0)
        rc = 15;
    for (uint64_t i = 0; rc == 0 && i < len; i++)
        if (local[i] != test_pattern(i, priv))
            rc = 16;
    cr_engine_stats st;
    cr_engine_get_stats(e, &st);
    if (rc == 0 && st.bytes_cma != 0)
        rc = 17; /* the kernel or the peer must have refused CMA */
    if (rc == 0 && expect_shm && st.bytes_shm != len)
        rc = 18;
    if (rc == 0 && !expect_shm && st.bytes_shm != 0)
        rc = 19; /* the peer must have refused the fd */
    if (rc == 0 && st.bytes_tcp != (expect_shm ? len : 2 * len))
        rc = 20; /* what was refused went over tcp */
    if (rc == 0 && st.transport_fallbacks == 0)
        rc = 21;
    cr_engine_unregister(e, local);
    cr_engine_destroy(e);
    free(local);
    return rc;
}

static int run_unprivileged(const char *const *peer_args, int expect_shm)
{
    test_peer peer;
    assert_int_equal(peer_start(&peer, peer_args), 0);
    uint64_t shared = peer_reg(&peer, "shared", 1 << 20, 0);
    uint64_t priv = peer_reg(&peer, "cpu:0", 1 << 20, 0);
    pid_t pid = fork();
    if (pid == 0)
        _exit(unprivileged_initiator(peer.name, shared, priv, expect_shm));
    int st = 0;
    waitpid(pid, &st, 0);
    assert_int_equal(peer_stop(&peer), 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

static void another_user_is_refused_and_falls_back(void **state)
{
    (void)state;
    if (getuid() != 0) {
        print_message("needs root to create a second user; skipped\n");
        skip();
    }
    /* Default peer: fds only for its own uid → shm and cma refused → tcp. */
    assert_int_equal(run_unprivileged(NULL, 0), 0);
    /* Peer allowing any user: shm works; CMA into a root process is refused
     * by the kernel (EPERM) → tcp. */
    const char *args[] = {"--any-user", NULL};
    assert_int_equal(run_unprivileged(args, 1), 0);
}

/* --- the fd service and the shared secret (issue 11 item 9) ----------------- */

/* Connect to the fd service of process pid as an attacker would: its
 * abstract socket "@crescent-<pid>-..." is listed in /proc/net/unix. */
static int connect_fd_service(pid_t pid)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "@crescent-%d-", (int)pid);
    int s = tt_connect_abstract(prefix);
    if (s < 0)
        fail_msg("no fd service of pid %d to connect to in /proc/net/unix", (int)pid);
    return s;
}

/* One reply datagram; *got_fd: whether it carried a descriptor. */
static crp_shm_reply recv_reply(int s, bool *got_fd)
{
    uint8_t buf[256];
    union {
        char c[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.c, .msg_controllen = sizeof(u.c)};
    ssize_t n = recvmsg(s, &mh, 0);
    assert_true(n > 0);
    *got_fd = false;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm), sizeof(int));
            close(fd);
            *got_fd = true;
        }
    crp_shm_reply r;
    assert_int_equal(crp_shm_reply_decode(buf, (size_t)n, &r), 0);
    return r;
}

static void send_shm_request(int s, const crp_shm_request *req)
{
    crp_buf b = {0};
    assert_int_equal(crp_shm_request_encode(req, &b), 0);
    assert_int_equal(send(s, b.data, b.len, MSG_NOSIGNAL), (ssize_t)b.len);
    crp_buf_free(&b);
}

static void assert_closed(int s)
{
    char c;
    assert_int_equal(recv(s, &c, 1, 0), 0);
    close(s);
}

static void fd_service_needs_the_secret(void **state)
{
    (void)state;
    const char *args[] = {"--secret", "s3cret", NULL};
    test_peer peer;
    assert_int_equal(peer_start(&peer, args), 0);
    uint64_t shared = peer_reg(&peer, "shared", 1 << 20, 0);
    pid_t pid = peer.child.proc.pid;
    bool fd;

    /* Same uid, no secret: asks for the control page at once. */
    int s = connect_fd_service(pid);
    crp_shm_reply hi = recv_reply(s, &fd);
    assert_true(hi.has_nonce && hi.auth && !fd);
    crp_shm_request ask = {.op = CRP_SHM_CONTROL_PAGE};
    send_shm_request(s, &ask);
    crp_shm_reply r = recv_reply(s, &fd);
    assert_int_equal(r.status, CR_ERR_AUTH_FAILED);
    assert_false(fd);
    assert_closed(s);

    /* A made-up proof. */
    s = connect_fd_service(pid);
    hi = recv_reply(s, &fd);
    crp_shm_request auth = {.op = CRP_SHM_AUTH};
    memset(auth.client_nonce, 7, sizeof(auth.client_nonce));
    memset(auth.mac, 0x5a, sizeof(auth.mac));
    send_shm_request(s, &auth);
    r = recv_reply(s, &fd);
    assert_int_equal(r.status, CR_ERR_AUTH_FAILED);
    assert_false(fd);
    assert_closed(s);

    /* An engine with the secret moves the shared buffer through shm. */
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.protocol = "auto";
    cfg.shared_secret = "s3cret";
    cfg.request_timeout_ms = 5000;
    cr_engine *e = NULL;
    assert_int_equal(cr_engine_create(&cfg, &e), 0);
    uint64_t len = 1 << 20;
    uint8_t *local = malloc(len);
    assert_int_equal(cr_engine_register(e, local, len, "cpu:0", true), 0);
    cr_segment_handle seg;
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_READ, local, seg, shared, len, 0), 0);
    check_pattern(local, len, shared);
    cr_engine_stats st;
    assert_int_equal(cr_engine_get_stats(e, &st), 0);
    assert_int_equal(st.bytes_shm, len);
    cr_engine_unregister(e, local);
    cr_engine_destroy(e);

    /* One with another secret gets nothing through the fd service. */
    cfg.shared_secret = "guess";
    assert_int_equal(cr_engine_create(&cfg, &e), 0);
    assert_int_equal(cr_engine_register(e, local, len, "cpu:0", true), 0);
    int rc = cr_engine_open_segment(e, peer.name, &seg);
    if (rc == 0)
        rc = cr_engine_transfer_sync(e, CR_OP_READ, local, seg, shared, len, 0);
    print_message("another secret: %s (%s)\n", cr_status_name(rc), cr_last_error_message());
    assert_true(rc < 0);
    assert_int_equal(cr_engine_get_stats(e, &st), 0);
    assert_int_equal(st.bytes_shm, 0);
    cr_engine_unregister(e, local);
    cr_engine_destroy(e);
    free(local);
    assert_int_equal(peer_stop(&peer), 0);
}

/* CPU seconds (user + system) process pid has used, from /proc/<pid>/stat. */
static double cpu_seconds(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    assert_non_null(p);
    unsigned long long ut = 0, st = 0;
    /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
     */
    assert_int_equal(
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st), 2);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/*
 * 1100 connections held open on a peer's fd service (more than its cap and
 * than its descriptor limit): the excess is closed at once, the peer does not
 * spin, and once they are gone an engine moves bytes through shm again.
 */
static void fd_service_bounds_its_connections(void **state)
{
    (void)state;
    enum { N = 1100 };
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max < N + 100) {
        print_message("RLIMIT_NOFILE hard limit %llu is too low; skipped\n",
                      (unsigned long long)rl.rlim_max);
        skip();
    }
    struct rlimit raised = {N + 100, rl.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &raised), 0);
    test_peer peer;
    assert_int_equal(peer_start(&peer, NULL), 0);
    uint64_t shared = peer_reg(&peer, "shared", 1 << 20, 0);
    pid_t pid = peer.child.proc.pid;
    static int fds[N];
    int greeted = 0, refused = 0;
    double cpu0 = cpu_seconds(pid);
    for (int i = 0; i < N; i++) {
        fds[i] = connect_fd_service(pid);
        uint8_t buf[256];
        ssize_t n = recv(fds[i], buf, sizeof(buf), 0);
        if (n > 0)
            greeted++;
        else
            refused++;
    }
    usleep(1000 * 1000);
    double cpu = cpu_seconds(pid) - cpu0;
    print_message("fd service: %d greeted, %d closed at once; the peer used %.2f s of CPU\n",
                  greeted, refused, cpu);
    assert_true(refused > 0);
    assert_true(greeted >= 500);
    assert_true(cpu < 1.0); /* accepting 1100 connections, then idle: no spinning */
    for (int i = 0; i < N; i++)
        close(fds[i]);
    usleep(200 * 1000);
    cr_engine *e = make_engine("auto");
    uint64_t len = 1 << 20;
    uint8_t *local = malloc(len);
    assert_int_equal(cr_engine_register(e, local, len, "cpu:0", true), 0);
    cr_segment_handle seg;
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_READ, local, seg, shared, len, 0), 0);
    check_pattern(local, len, shared);
    cr_engine_stats st;
    assert_int_equal(cr_engine_get_stats(e, &st), 0);
    assert_int_equal(st.bytes_shm, len);
    cr_engine_unregister(e, local);
    cr_engine_destroy(e);
    free(local);
    assert_int_equal(peer_stop(&peer), 0);
    setrlimit(RLIMIT_NOFILE, &rl);
}

static void peer_death_drops_mappings(void **state)
{
    (void)state;
    test_peer peer;
    assert_int_equal(peer_start(&peer, NULL), 0);
    uint64_t shared = peer_reg(&peer, "shared", 1 << 20, 0);
    cr_engine *e = make_engine("auto");
    uint8_t *local = malloc(1 << 20);
    assert_int_equal(cr_engine_register(e, local, 1 << 20, "cpu:0", true), 0);
    cr_segment_handle seg;
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_READ, local, seg, shared, 1 << 20, 0), 0);
    cr_engine_stats st;
    cr_engine_get_stats(e, &st);
    assert_int_equal(st.shm_mappings, 1);
    peer_kill(&peer);
    for (int i = 0; i < 200; i++) { /* the watcher notices the hang-up */
        cr_engine_get_stats(e, &st);
        if (st.shm_mappings == 0)
            break;
        usleep(10 * 1000);
    }
    assert_int_equal(st.shm_mappings, 0);
    /* A restarted peer works after reopening. */
    assert_int_equal(peer_start(&peer, NULL), 0);
    shared = peer_reg(&peer, "shared", 1 << 20, 0);
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_READ, local, seg, shared, 1 << 20, 0), 0);
    check_pattern(local, 1 << 20, shared);
    cr_engine_get_stats(e, &st);
    assert_int_equal(st.shm_mappings, 1);
    assert_int_equal(peer_stop(&peer), 0);
    assert_int_equal(cr_engine_unregister(e, local), 0);
    cr_engine_destroy(e);
    free(local);
}

typedef struct writer {
    cr_engine *e;
    cr_segment_handle seg;
    uint8_t *local;
    uint64_t remote, len;
    atomic_bool stop;
    atomic_int ok, refused, other;
} writer;

static void *keep_writing(void *p)
{
    writer *w = p;
    while (!atomic_load(&w->stop)) {
        int rc = cr_engine_transfer_sync(w->e, CR_OP_WRITE, w->local, w->seg, w->remote, w->len, 0);
        if (rc == 0)
            atomic_fetch_add(&w->ok, 1);
        else if (rc == CR_ERR_ADDRESS_NOT_REGISTERED)
            atomic_fetch_add(&w->refused, 1);
        else
            atomic_fetch_add(&w->other, 1);
    }
    return NULL;
}

static void unregister_race(const char *loc)
{
    test_peer peer;
    assert_int_equal(peer_start(&peer, NULL), 0);
    const uint64_t len = 32 << 20;
    uint64_t remote = peer_reg(&peer, loc, len, 0);
    assert_true(remote != 0);
    writer w = {.e = make_engine("auto"), .remote = remote, .len = len};
    w.local = malloc(len);
    memset(w.local, 0xee, len);
    assert_int_equal(cr_engine_register(w.e, w.local, len, "cpu:0", true), 0);
    assert_int_equal(cr_engine_open_segment(w.e, peer.name, &w.seg), 0);
    pthread_t th;
    pthread_create(&th, NULL, keep_writing, &w);
    while (atomic_load(&w.ok) < 3)
        usleep(1000);
    /* The peer unregisters while writes stream in, reuses the memory at once
     * and checks 300 ms later that no write landed after unregister
     * returned. */
    const char *r = peer_cmd(&peer, "unreg_reuse %llu %llu", (unsigned long long)remote,
                             (unsigned long long)len);
    atomic_store(&w.stop, true);
    pthread_join(th, NULL);
    assert_string_equal(r, "OK");
    print_message("%s: %d writes before, %d refused after, %d other\n", loc, atomic_load(&w.ok),
                  atomic_load(&w.refused), atomic_load(&w.other));
    assert_true(atomic_load(&w.refused) > 0); /* failed visibly */
    assert_int_equal(atomic_load(&w.other), 0);
    cr_engine_stats st;
    cr_engine_get_stats(w.e, &st);
    assert_int_equal(st.bytes_tcp, 0);    /* it really was a same-host path */
    assert_int_equal(st.shm_mappings, 0); /* the unregistered region was unmapped */
    assert_int_equal(cr_engine_unregister(w.e, w.local), 0);
    cr_engine_destroy(w.e);
    free(w.local);
    assert_int_equal(peer_stop(&peer), 0);
}

static void unregistration_fence_shm(void **state)
{
    (void)state;
    unregister_race("shared");
}

static void unregistration_fence_cma(void **state)
{
    (void)state;
    unregister_race("cpu:0");
}

/* The peer frees a registered buffer and registers a new one of the same size (the
 * allocator puts it at the same address) filled with seed; returns its address. */
static uint64_t register_again(test_peer *peer, const char *loc, uint64_t old, uint64_t len,
                               int seed)
{
    assert_string_equal(peer_cmd(peer, "unreg %llu", (unsigned long long)old), "OK");
    uint64_t again = peer_reg(peer, loc, len, 0);
    assert_true(again != 0);
    assert_string_equal(peer_cmd(peer, "fill %llu %llu %d", (unsigned long long)again,
                                 (unsigned long long)len, seed),
                        "OK");
    return again;
}

/* The peer unregisters a buffer and registers a new one, which the allocator puts at the
 * same address, with other bytes. Our descriptor of the peer still lists the old buffer
 * there. A synchronous read reads the new bytes at once (it runs again after the old
 * buffer's fence refused it, with the descriptor fetched again); a batch's first read may
 * fail (ADDRESS_NOT_REGISTERED), the next one reads them. Before, every later read failed the
 * same way (the descriptor was never fetched again: the range check against it passed).
 * Stale bytes: never. */
static void reregistration(const char *loc)
{
    test_peer peer;
    assert_int_equal(peer_start(&peer, NULL), 0);
    const uint64_t len = 1 << 20;
    uint64_t remote = peer_reg(&peer, loc, len, 0);
    assert_true(remote != 0);
    cr_engine *e = make_engine("auto");
    uint8_t *local = malloc(len);
    assert_int_equal(cr_engine_register(e, local, len, "cpu:0", true), 0);
    cr_segment_handle seg;
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_READ, local, seg, remote, len, 0), 0);
    check_pattern(local, len, remote);

    uint64_t again = register_again(&peer, loc, remote, len, 99);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_READ, local, seg, again, len, 0), 0);
    check_pattern(local, len, 99);
    bool same = again == remote;

    uint64_t third = register_again(&peer, loc, again, len, 98);
    same = same && third == again;
    cr_transfer_request req = {CR_OP_READ, local, seg, third, len};
    int failed = 0, rc;
    for (;;) {
        cr_batch_id b;
        assert_int_equal(cr_batch_create(e, 1, &b), 0);
        assert_int_equal(cr_batch_submit(e, b, &req, 1), 0);
        rc = cr_batch_wait(e, b, 5000);
        assert_int_equal(cr_batch_free(e, b), 0);
        if (rc == 0)
            break;
        assert_int_equal(rc, CR_ERR_ADDRESS_NOT_REGISTERED);
        assert_true(++failed < 2);
    }
    check_pattern(local, len, 98);
    print_message("%s: new buffers at %s address; the batch read failed %d time(s) first\n", loc,
                  same ? "the same" : "another", failed);
    cr_engine_stats st;
    cr_engine_get_stats(e, &st);
    assert_int_equal(st.bytes_tcp, 0); /* a same-host path throughout */
    assert_int_equal(cr_engine_unregister(e, local), 0);
    cr_engine_destroy(e);
    free(local);
    assert_int_equal(peer_stop(&peer), 0);
}

static void reregistration_shm(void **state)
{
    (void)state;
    reregistration("shared");
}

static void reregistration_cma(void **state)
{
    (void)state;
    reregistration("cpu:0");
}

static void mixed_kinds_side_by_side(void **state)
{
    (void)state;
    test_peer peer;
    assert_int_equal(peer_start(&peer, NULL), 0);
    uint64_t shared = peer_reg(&peer, "shared", 65536, 0);
    uint64_t priv = peer_reg(&peer, "cpu:0", 65536, 0);
    cr_engine *e = make_engine("auto");
    uint8_t *local = malloc(65536);
    assert_int_equal(cr_engine_register(e, local, 65536, "cpu:0", true), 0);
    cr_segment_handle seg;
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
    round_trip(e, &peer, seg, local, shared, 65536, 21);
    round_trip(e, &peer, seg, local, priv, 65536, 22);
    /* Unservable device memory appears next to them. */
    uint64_t dev = peer_reg(&peer, "cuda:0", 65536, 0);
    uint64_t shared2 = peer_reg(&peer, "shared", 8192, 0);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_READ, local, seg, dev, 4096, 0),
                     CR_ERR_TRANSPORT_UNSUPPORTED);
    assert_non_null(strstr(cr_last_error_message(), "cuda"));
    /* ...and breaks nothing else, old or new. */
    round_trip(e, &peer, seg, local, shared, 65536, 23);
    round_trip(e, &peer, seg, local, priv, 65536, 24);
    round_trip(e, &peer, seg, local, shared2, 8192, 25);
    cr_engine_stats st;
    cr_engine_get_stats(e, &st);
    assert_true(st.bytes_shm > 0 && st.bytes_cma > 0);
    assert_int_equal(st.bytes_tcp, 0);
    assert_int_equal(cr_engine_unregister(e, local), 0);
    cr_engine_destroy(e);
    free(local);
    assert_int_equal(peer_stop(&peer), 0);
}

static void shared_allocation_api(void **state)
{
    (void)state;
    void *p = NULL;
    assert_int_equal(cr_alloc_shared(0, &p), CR_INVALID_PARAMS);
    assert_int_equal(cr_alloc_shared(3200ull << 20, &p), 0); /* reserved, not committed */
    assert_int_equal((uintptr_t)p % (2 << 20), 0);
    cr_engine *e = make_engine("auto");
    assert_int_equal(cr_engine_register(e, (uint8_t *)p + 4096, 1 << 20, "*", true), 0);
    assert_int_equal(cr_free_shared(p), CR_INVALID_PARAMS); /* still registered */
    assert_int_equal(cr_engine_unregister(e, (uint8_t *)p + 4096), 0);
    assert_int_equal(cr_free_shared(p), 0);
    int x;
    assert_int_equal(cr_free_shared(&x), CR_INVALID_PARAMS);
    assert_int_equal(cr_free_shared(NULL), 0);
    cr_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shared_allocation_api),
        cmocka_unit_test(every_path_is_taken),
        cmocka_unit_test(another_user_is_refused_and_falls_back),
        cmocka_unit_test(fd_service_needs_the_secret),
        cmocka_unit_test(fd_service_bounds_its_connections),
        cmocka_unit_test(peer_death_drops_mappings),
        cmocka_unit_test(unregistration_fence_shm),
        cmocka_unit_test(unregistration_fence_cma),
        cmocka_unit_test(reregistration_shm),
        cmocka_unit_test(reregistration_cma),
        cmocka_unit_test(mixed_kinds_side_by_side),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
