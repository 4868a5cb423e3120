/*
 * compat_abi_test.c - libcrescent-mooncake-compat through Mooncake's C
 * declarations only (transfer_engine_c.h, store_c.h from
 * include/mooncake-compat: the same names and types as Mooncake's headers),
 * moving verified bytes between this process and a peer process (this
 * binary re-executed as "te-peer" / "store-peer", driven over its stdin and
 * stdout), against a crescent-master child for the store.
 *
 *   te_between_processes  createTransferEngine in P2P mode picks its RPC port
 *       in 15000..17000; openSegment ids (LOCAL_SEGMENT for our own name,
 *       the same id twice for a peer, -1 for ""); allocateBatchID /
 *       submitTransfer / getTransferStatus READ and WRITE of patterned bytes
 *       checked on both sides; submitTransferWithNotify delivers its message
 *       once the batch is seen complete; genNotifyInEngine; Mooncake's return
 *       conventions for errors (positive Status codes from submitTransfer,
 *       -7 for an overlapping registration, INVALID_BATCH, NULL transports
 *       for hardware crescent lacks); MC_HANDSHAKE_PORT is named on stderr.
 *   store_between_processes  the peer sets up (hostname port in
 *       12300..14300), puts a value with mooncake_store_put and three with
 *       mooncake_store_batch_put_from; this process reads them back with
 *       get_into / batch_get_into and checks every byte; is_exist,
 *       batch_is_exist, get_size, remove family, too-small (-600) and missing
 *       (-704) destinations, NULL arguments (-1), calls before setup (-1).
 *   store_setup_again_gets_another_name  eight stores set up one after the
 *       other in an 8-port MC_STORE_CLIENT_*_PORT range get eight names, and
 *       each one's put right after setup succeeds (a name picked again would
 *       land its segment on its predecessor's memory, which the master
 *       fences while that one's reads may still run: the put would fail).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "store_c.h"
#include "store_harness.h"
#include "transfer_engine_c.h"

#define BUF_SIZE (1u << 20)

static char self_path[4096];
static sh_master master;

/* --- patterns --------------------------------------------------------------- */

static uint8_t pattern_byte(uint64_t i, uint64_t seed)
{
    uint64_t x = (i / 8 + seed) * 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    return (uint8_t)(x >> (8 * (i % 8)));
}

static void fill(uint8_t *p, uint64_t off, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        p[i] = pattern_byte(off + i, seed);
}

static int check(const uint8_t *p, uint64_t off, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        if (p[i] != pattern_byte(off + i, seed))
            return -1;
    return 0;
}

/* --- peers ------------------------------------------------------------------------ */

typedef struct peer {
    ct_proc proc; /* this executable re-run in a peer mode (tests/testing) */
    char line[4096];
} peer;

static peer *live_peer;

static void peer_start(peer *p, const char *mode, const char *arg)
{
    const char *argv[] = {self_path, mode, arg, NULL};
    ct_spawn_opts o = {.pipe_stdin = true, .pipe_stdout = true};
    assert_int_equal(ct_proc_spawn(&p->proc, argv, &o), 0);
    live_peer = p;
}

static const char *peer_cmd(peer *p, const char *fmt, ...)
{
    int rc = 0;
    if (fmt != NULL) {
        char cmd[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        rc = ct_proc_send(&p->proc, cmd);
    }
    if (rc < 0 || ct_proc_read_line(&p->proc, p->line, sizeof(p->line), 60000) < 0)
        snprintf(p->line, sizeof(p->line), "DEAD");
    return p->line;
}

static int peer_stop(peer *p)
{
    live_peer = NULL;
    if (ct_proc_send(&p->proc, "quit") < 0) {
        ct_proc_kill(&p->proc);
        return -1;
    }
    int st = ct_proc_stop(&p->proc, 0, 30000);
    return st >= 128 ? -1 : st;
}

static void kill_peer(void)
{
    if (live_peer != NULL)
        ct_proc_kill(&live_peer->proc);
    live_peer = NULL;
}

/* te-peer: an engine with one patterned, registered buffer. */
static int run_te_peer(void)
{
    transfer_engine_t e = createTransferEngine("P2PHANDSHAKE", "127.0.0.1", "127.0.0.1", 0, 1);
    uint8_t *buf = aligned_alloc(4096, BUF_SIZE);
    if (e == NULL || buf == NULL)
        return 1;
    fill(buf, 0, BUF_SIZE, 7);
    if (registerLocalMemory(e, buf, BUF_SIZE, "cpu:0", 1) != 0)
        return 1;
    char name[256];
    getLocalIpAndPort(e, name, sizeof(name));
    printf("READY %s %llu\n", name, (unsigned long long)(uintptr_t)buf);
    fflush(stdout);
    char line[256];
    while (fgets(line, sizeof(line), stdin) != NULL) {
        unsigned long long off, len, seed;
        if (strncmp(line, "quit", 4) == 0)
            break;
        if (sscanf(line, "check %llu %llu %llu", &off, &len, &seed) == 3) {
            printf("%s\n", check(buf + off, off, len, seed) == 0 ? "OK" : "BAD");
        } else if (strncmp(line, "notifs", 6) == 0) {
            int n = 0;
            notify_msg_t *m = getNotifsFromEngine(e, &n);
            printf("N %d", n);
            for (int i = 0; i < n; i++)
                printf(" %s|%s", m[i].name, m[i].msg);
            printf("\n");
            freeNotifsMsgBuf(m, n);
        } else {
            printf("?\n");
        }
        fflush(stdout);
    }
    int rc = unregisterLocalMemory(e, buf);
    destroyTransferEngine(e);
    free(buf);
    return rc == 0 ? 0 : 1;
}

/* Wait until task `i` of batch b is no longer WAITING; its state. */
static int wait_task(transfer_engine_t e, batch_id_t b, size_t i)
{
    struct transfer_status st = {0};
    for (int spins = 0; spins < 20000; spins++) {
        assert_int_equal(getTransferStatus(e, b, i, &st), 0);
        if (st.status != STATUS_WAITING && st.status != STATUS_PENDING)
            return st.status;
        usleep(1000);
    }
    return -1;
}

static void te_between_processes(void **state)
{
    (void)state;
    peer p;
    peer_start(&p, "te-peer", "");
    char name[256];
    unsigned long long raddr = 0;
    assert_int_equal(sscanf(peer_cmd(&p, NULL), "READY %255s %llu", name, &raddr), 2);

    /* The first engine of a process names the Mooncake variables it ignores. */
    setenv("MC_HANDSHAKE_PORT", "12001", 1);
    char errpath[] = "/tmp/compat_abi_stderr_XXXXXX";
    int errfd = mkstemp(errpath);
    assert_true(errfd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(errfd, 2);
    transfer_engine_t e = createTransferEngine("P2PHANDSHAKE", "127.0.0.1", "127.0.0.1", 0, 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char logged[4096] = {0};
    pread(errfd, logged, sizeof(logged) - 1, 0);
    close(errfd);
    unlink(errpath);
    unsetenv("MC_HANDSHAKE_PORT");
    assert_non_null(strstr(logged, "MC_HANDSHAKE_PORT=12001 is not used by crescent"));
    assert_non_null(e);
    assert_non_null(installTransport(e, "tcp", NULL));
    assert_null(installTransport(e, "efa", NULL));
    assert_int_equal(discoverTopology(e), 0);
    char me[256];
    assert_int_equal(getLocalIpAndPort(e, me, sizeof(me)), 0);
    int port = atoi(strrchr(me, ':') + 1);
    assert_true(port >= 15000 && port <= 17000);
    uint8_t *local = aligned_alloc(4096, BUF_SIZE);
    assert_non_null(local);
    memset(local, 0, BUF_SIZE);
    assert_int_equal(registerLocalMemory(e, local, BUF_SIZE, "*", 1), 0);
    assert_int_equal(registerLocalMemory(e, local + 4096, 4096, "*", 1), -7); /* overlap */

    segment_id_t sid = openSegment(e, name);
    assert_true(sid >= 1);
    assert_int_equal(openSegmentNoCache(e, name), sid);
    assert_int_equal(openSegment(e, me), LOCAL_SEGMENT);
    assert_int_equal(openSegment(e, ""), -1);
    assert_int_equal(syncSegmentCache(e), 0);

    /* READ four 64 KiB blocks from the peer's pattern. */
    batch_id_t b = allocateBatchID(e, 16);
    assert_true(b != INVALID_BATCH);
    struct transfer_request reqs[4];
    for (int i = 0; i < 4; i++)
        reqs[i] = (struct transfer_request){OPCODE_READ, local + i * 65536, sid,
                                            raddr + (uint64_t)i * 200000, 65536};
    assert_int_equal(submitTransfer(e, b, reqs, 4), 0);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(wait_task(e, b, i), STATUS_COMPLETED);
    for (int i = 0; i < 4; i++)
        assert_int_equal(check(local + i * 65536, (uint64_t)i * 200000, 65536, 7), 0);
    struct transfer_status st;
    assert_int_equal(getTransferStatus(e, b, 0, &st), 0);
    assert_int_equal(st.transferred_bytes, 65536);

    /* WRITE 128 KiB of another pattern, checked by the peer. */
    fill(local, 524288, 131072, 9);
    struct transfer_request w = {OPCODE_WRITE, local, sid, raddr + 524288, 131072};
    assert_int_equal(submitTransfer(e, b, &w, 1), 0);
    assert_int_equal(wait_task(e, b, 4), STATUS_COMPLETED);
    assert_string_equal(peer_cmd(&p, "check 524288 131072 9"), "OK");
    assert_string_equal(peer_cmd(&p, "check 0 4096 7"), "OK");

    /* A write with a notification: delivered once the batch is seen complete. */
    batch_id_t b2 = allocateBatchID(e, 2);
    fill(local, 4096, 4096, 11);
    struct transfer_request wn = {OPCODE_WRITE, local, sid, raddr + 4096, 4096};
    notify_msg_t note = {"layer", "done-1"};
    assert_int_equal(submitTransferWithNotify(e, b2, &wn, 1, note), 0);
    assert_int_equal(wait_task(e, b2, 0), STATUS_COMPLETED);
    assert_string_equal(peer_cmd(&p, "check 4096 4096 11"), "OK");
    notify_msg_t hello = {"tag", "hello"};
    assert_int_equal(genNotifyInEngine(e, (uint64_t)sid, hello), 0);
    const char *got = NULL;
    for (int tries = 0; tries < 200; tries++) {
        got = peer_cmd(&p, "notifs");
        if (strcmp(got, "N 0") != 0)
            break;
        usleep(10000);
    }
    assert_non_null(strstr(got, "layer|done-1"));
    if (strstr(got, "tag|hello") == NULL) /* may arrive in a later drain */
        assert_non_null(strstr(peer_cmd(&p, "notifs"), "tag|hello"));
    assert_int_equal(genNotifyInEngine(e, 999, hello), -200); /* no such segment id */

    /* Errors, Mooncake's way: positive Status codes from submitTransfer. */
    uint8_t stray[64];
    struct transfer_request bad = {OPCODE_READ, stray, sid, raddr, 64};
    assert_int_equal(submitTransfer(e, b, &bad, 1), 3); /* address not registered */
    bad = (struct transfer_request){OPCODE_READ, local, sid, raddr + BUF_SIZE, 64};
    assert_int_equal(submitTransfer(e, b, &bad, 1), 3); /* not in the peer's buffers */
    bad = (struct transfer_request){OPCODE_READ, local, 99, raddr, 64};
    assert_int_equal(submitTransfer(e, b, &bad, 1), 1); /* unknown segment id */
    bad = (struct transfer_request){7, local, sid, raddr, 64};
    assert_int_equal(submitTransfer(e, b, &bad, 1), 1); /* bad opcode */
    assert_int_equal(freeBatchID(e, b), 0);
    assert_int_equal(freeBatchID(e, b2), 0);
    assert_int_equal(getTransferStatus(e, b, 0, &st), 1); /* freed */
    assert_true(allocateBatchID(e, 0) == INVALID_BATCH);

    nic_load_stat_t nics[2];
    size_t count = 2;
    assert_int_equal(getNicLoadStats(e, nics, &count), 0);
    assert_int_equal(count, 0);
    char links[512];
    assert_int_equal(showLinks(e, links, sizeof(links), 1), 0);
    assert_true(links[0] == '{');
    assert_int_equal(closeSegment(e, sid), 0);
    assert_int_equal(warmupEfaSegment(e, name), 0);
    assert_int_equal(unregisterLocalMemory(e, local), 0);
    assert_int_equal(unregisterLocalMemory(e, local), -3);
    enableGracefulShutdown(e);
    destroyTransferEngine(e);
    free(local);
    assert_int_equal(peer_stop(&p), 0);
}

/* store-peer: puts values, then waits for quit. */
static int run_store_peer(const char *master_addr)
{
    mooncake_store_t s = mooncake_store_create();
    if (s == NULL || mooncake_store_setup(s, "127.0.0.1", "P2PHANDSHAKE", 16u << 20, 1u << 20,
                                          "tcp", "", master_addr) != 0)
        return 1;
    uint8_t *value = malloc(100000);
    fill(value, 0, 100000, 21);
    if (mooncake_store_put(s, "c/a", value, 100000, NULL) != 0)
        return 2;
    uint8_t *reg = aligned_alloc(4096, BUF_SIZE);
    fill(reg, 0, BUF_SIZE, 22);
    if (mooncake_store_register_buffer(s, reg, BUF_SIZE) != 0)
        return 3;
    const char *keys[3] = {"c/b0", "c/b1", "c/b2"};
    void *bufs[3] = {reg, reg + 300000, reg + 600000};
    size_t sizes[3] = {4096, 65536, 1};
    int res[3] = {-9, -9, -9};
    mooncake_replicate_config_t cfg = {1, 0, 0, NULL, 0};
    if (mooncake_store_batch_put_from(s, keys, bufs, sizes, 3, &cfg, res) != 0 || res[0] != 0 ||
        res[1] != 0 || res[2] != 0)
        return 4;
    char host[256];
    if (mooncake_store_get_hostname(s, host, sizeof(host)) != 0)
        return 5;
    printf("READY %s\n", host);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof(line), stdin) != NULL && strncmp(line, "quit", 4) != 0) {
        printf("?\n");
        fflush(stdout);
    }
    mooncake_store_unregister_buffer(s, reg);
    mooncake_store_destroy(s);
    free(reg);
    free(value);
    return 0;
}

static void store_between_processes(void **state)
{
    (void)state;
    mooncake_store_t s = mooncake_store_create();
    assert_non_null(s);
    uint8_t small[8];
    assert_int_equal(mooncake_store_get_into(s, "c/a", small, sizeof(small)), -1); /* not set up */
    assert_int_equal(mooncake_store_health_check(s), 1);
    assert_int_equal(mooncake_store_setup(s, "127.0.0.1", "zk://127.0.0.1:2181", 1u << 20, 1u << 20,
                                          "tcp", "", master.addr),
                     -600); /* an unknown scheme */
    /* etcd's form is accepted and handed to the library, which finds no etcd there */
    char etcd[64];
    snprintf(etcd, sizeof(etcd), "etcd://127.0.0.1:%u", (unsigned)ct_free_port(NULL));
    int rc = mooncake_store_setup(s, "127.0.0.1", etcd, 8u << 20, 1u << 20, "tcp", "", master.addr);
    assert_true(rc < 0 && rc != -600);
    assert_int_equal(mooncake_store_setup(s, "127.0.0.1", "P2PHANDSHAKE", 8u << 20, 1u << 20, "efa",
                                          "", master.addr),
                     -600);
    assert_int_equal(mooncake_store_setup(s, "127.0.0.1", "P2PHANDSHAKE", 8u << 20, 1u << 20, "tcp",
                                          "", master.addr),
                     0);
    assert_int_equal(mooncake_store_health_check(s), 0);
    char host[256];
    assert_int_equal(mooncake_store_get_hostname(s, host, sizeof(host)), 0);
    int port = atoi(strrchr(host, ':') + 1);
    assert_true(port >= 12300 && port <= 14300);
    assert_int_equal(mooncake_store_get_hostname(s, host, 3), -1);

    peer p;
    peer_start(&p, "store-peer", master.addr);
    char peer_host[256];
    assert_int_equal(sscanf(peer_cmd(&p, NULL), "READY %255s", peer_host), 1);
    assert_string_not_equal(peer_host, host);

    uint8_t *dst = aligned_alloc(4096, BUF_SIZE);
    assert_non_null(dst);
    assert_int_equal(mooncake_store_register_buffer(s, dst, BUF_SIZE), 0);
    memset(dst, 0, BUF_SIZE);
    assert_int_equal(mooncake_store_get_into(s, "c/a", dst, BUF_SIZE), 100000);
    assert_int_equal(check(dst, 0, 100000, 21), 0);
    assert_int_equal(mooncake_store_get_into(s, "c/a", dst, 99999), -600); /* too small */
    assert_int_equal(mooncake_store_get_into(s, "c/none", dst, BUF_SIZE), -704);

    const char *keys[4] = {"c/b0", "c/b1", "c/b2", "c/none"};
    void *bufs[4] = {dst, dst + 100000, dst + 200000, dst + 300000};
    size_t caps[4] = {4096, 65536, 16, 16};
    int64_t got[4];
    memset(dst, 0, BUF_SIZE);
    assert_int_equal(mooncake_store_batch_get_into(s, keys, bufs, caps, 4, got), 0);
    assert_int_equal(got[0], 4096);
    assert_int_equal(got[1], 65536);
    assert_int_equal(got[2], 1);
    assert_int_equal(got[3], -704);
    assert_int_equal(check(dst, 0, 4096, 22), 0);
    assert_int_equal(check(dst + 100000, 300000, 65536, 22), 0);
    assert_int_equal(check(dst + 200000, 600000, 1, 22), 0);

    assert_int_equal(mooncake_store_is_exist(s, "c/a"), 1);
    assert_int_equal(mooncake_store_is_exist(s, "c/none"), 0);
    int ex[2];
    const char *exk[2] = {"c/b1", "c/none"};
    assert_int_equal(mooncake_store_batch_is_exist(s, exk, 2, ex), 0);
    assert_int_equal(ex[0], 1);
    assert_int_equal(ex[1], 0);
    assert_int_equal(mooncake_store_get_size(s, "c/b1"), 65536);
    assert_int_equal(mooncake_store_get_size(s, "c/none"), -704);

    /* Our own puts, then the remove family. */
    mooncake_replicate_config_t cfg = {1, 1, 0, (const char *[]){peer_host}, 1};
    assert_int_equal(mooncake_store_put(s, "c/mine", "abc", 3, &cfg), 0);
    assert_int_equal(mooncake_store_put_from(s, "c/mine2", dst, 64, NULL), 0);
    assert_int_equal(mooncake_store_remove(s, "c/none", 0), -704);
    assert_int_equal(mooncake_store_remove(s, "c/mine", 1), 0);
    assert_int_equal(mooncake_store_remove_by_regex(s, "^c/b[01]$", 1), 2);
    assert_int_equal(mooncake_store_remove_all(s, 1), 3); /* c/a, c/b2, c/mine2 */
    assert_int_equal(mooncake_store_is_exist(s, "c/a"), 0);

    /* Mooncake's NULL-argument convention. */
    assert_int_equal(mooncake_store_put(s, NULL, "x", 1, NULL), -1);
    assert_int_equal(mooncake_store_put(s, "k", NULL, 1, NULL), -1);
    assert_int_equal(mooncake_store_batch_get_into(s, NULL, bufs, caps, 1, got), -1);
    assert_int_equal(mooncake_store_register_buffer(s, NULL, 10), -1);
    assert_int_equal(mooncake_store_is_exist(NULL, "k"), -1);
    assert_int_equal(mooncake_store_init_all(s, "tcp", "", 1u << 20), -1);

    assert_int_equal(mooncake_store_unregister_buffer(s, dst), 0);
    mooncake_store_destroy(s);
    free(dst);
    assert_int_equal(peer_stop(&p), 0);
}

static void store_setup_again_gets_another_name(void **state)
{
    (void)state;
    const int lo = 14410; /* outside the default range: no other test picks from it */
    char lo_text[16], hi_text[16];
    snprintf(lo_text, sizeof(lo_text), "%d", lo);
    snprintf(hi_text, sizeof(hi_text), "%d", lo + 7);
    setenv("MC_STORE_CLIENT_MIN_PORT", lo_text, 1);
    setenv("MC_STORE_CLIENT_MAX_PORT", hi_text, 1);
    bool seen[8] = {false};
    for (int i = 0; i < 8; i++) {
        mooncake_store_t s = mooncake_store_create();
        assert_non_null(s);
        assert_int_equal(mooncake_store_setup(s, "127.0.0.1", "P2PHANDSHAKE", 8u << 20, 1u << 20,
                                              "tcp", "", master.addr),
                         0);
        char host[256], key[32];
        assert_int_equal(mooncake_store_get_hostname(s, host, sizeof(host)), 0);
        int port = atoi(strrchr(host, ':') + 1);
        assert_true(port >= lo && port <= lo + 7);
        assert_false(seen[port - lo]);
        seen[port - lo] = true;
        snprintf(key, sizeof(key), "again/%d", i);
        assert_int_equal(mooncake_store_put(s, key, "abc", 3, NULL), 0);
        char *back = aligned_alloc(4096, 4096);
        assert_non_null(back);
        assert_int_equal(mooncake_store_register_buffer(s, back, 4096), 0);
        assert_int_equal(mooncake_store_get_into(s, key, back, 4096), 3); /* leased */
        assert_memory_equal(back, "abc", 3);
        assert_int_equal(mooncake_store_unregister_buffer(s, back), 0);
        mooncake_store_destroy(s);
        free(back);
    }
    unsetenv("MC_STORE_CLIENT_MIN_PORT");
    unsetenv("MC_STORE_CLIENT_MAX_PORT");
}

static int setup(void **state)
{
    (void)state;
    return sh_master_start(&master, NULL);
}

static int teardown(void **state)
{
    (void)state;
    kill_peer();
    int rc = sh_master_stop(&master);
    sh_kill_all();
    return rc;
}

int main(int argc, char **argv)
{
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof(self_path) - 1);
    if (n <= 0)
        return 1;
    self_path[n] = '\0';
    if (argc >= 2 && strcmp(argv[1], "te-peer") == 0)
        return run_te_peer();
    if (argc >= 3 && strcmp(argv[1], "store-peer") == 0)
        return run_store_peer(argv[2]);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(te_between_processes),
        cmocka_unit_test(store_between_processes),
        cmocka_unit_test(store_setup_again_gets_another_name),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
