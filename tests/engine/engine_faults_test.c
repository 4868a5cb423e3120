/*
 * engine_faults_test.c - dead, restarted, silent and unauthenticated peers,
 * with real processes: kill -9 in the middle of a batch fails every
 * unfinished task within its deadline, the initiator stays usable, and a
 * restarted target is reachable after the segment is reopened.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "crescent/engine.h"
#include "harness.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static cr_engine *make_engine(const char *secret, uint32_t request_ms)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.protocol = test_protocol();
    cfg.shared_secret = secret;
    cfg.request_timeout_ms = request_ms;
    cfg.connect_timeout_ms = 1000;
    cr_engine *e = NULL;
    assert_int_equal(cr_engine_create(&cfg, &e), 0);
    return e;
}

/* Peer death without peer-failure handling: UCX 1.13's shared-memory
 * transports cannot detect a dead peer, so over ucx with UCX_TLS naming only
 * those (the ucx transport then leaves cma out: with it, UCX aborts the
 * process when a peer dies mid-transfer) the transfers of a dead peer are
 * bounded by their deadline instead, and fail as timed out. */
static bool peer_death_is_deadline_bound(void)
{
    const char *tls = getenv("UCX_TLS");
    if (strcmp(test_protocol(), "ucx") != 0 || tls == NULL)
        return false;
    return strstr(tls, "tcp") == NULL && strstr(tls, "rc") == NULL && strstr(tls, "ud") == NULL &&
           strstr(tls, "dc") == NULL && strstr(tls, "ib") == NULL && strcmp(tls, "all") != 0;
}

/* Start p on a free port below the ephemeral range (32768 and up here): the test restarts the
 * peer on its port, and a port the kernel picked could meanwhile be the local port of one of
 * the initiator's outgoing connections (a redial, or a connection to another peer), which a
 * new listener cannot share. */
static void start_on_fixed_port(test_peer *p, char *port, size_t port_len)
{
    unsigned seed = (unsigned)getpid() ^ (unsigned)now_ms();
    for (int tries = 0; tries < 40; tries++) {
        snprintf(port, port_len, "%d", 20000 + (int)(rand_r(&seed) % 12000));
        const char *args[] = {"--port", port, NULL};
        if (peer_start(p, args) == 0)
            return;
    }
    fail_msg("no free port in 20000..31999 for the peer: %s", p->line);
}

static void kill_mid_batch_then_restart(void **state)
{
    (void)state;
    test_peer peer;
    char port[16];
    start_on_fixed_port(&peer, port, sizeof(port));
    uint64_t remote = peer_reg(&peer, "cpu:0", 64 << 20, 0);
    assert_true(remote != 0);

    const uint32_t deadline_ms = 4000;
    cr_engine *e = make_engine(NULL, deadline_ms);
    size_t len = 64 << 20;
    uint8_t *local = malloc(len);
    assert_int_equal(cr_engine_register(e, local, len, "cpu:0", true), 0);
    cr_segment_handle seg;
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);

    const size_t n = 512, blk = 1 << 20; /* 512 MiB: far more than moves in 30 ms */
    cr_transfer_request *reqs = calloc(n, sizeof(*reqs));
    for (size_t i = 0; i < n; i++)
        reqs[i] = (cr_transfer_request){CR_OP_READ, local + (i % 64) * blk, seg,
                                        remote + (i % 64) * blk, blk};
    uint64_t t0;
    cr_batch_id b;
    assert_int_equal(cr_batch_create(e, n, &b), 0);
    assert_int_equal(cr_batch_submit(e, b, reqs, n), 0);
    usleep(30 * 1000);
    uint64_t killed_at = now_ms();
    peer_kill(&peer);
    int rc = cr_batch_wait(e, b, (int)deadline_ms + 2000);
    uint64_t waited = now_ms() - killed_at;
    /* Same-host copies finish inside submit, before the kill: all complete. */
    bool in_submit = test_copies_in_submit();
    assert_true(in_submit ? rc == 0 : rc < 0);
    /* The wait itself did not run out (its limit is 2 s past the deadline);
     * where a dead peer can only be noticed by the deadline, its tasks fail
     * as timed out at the deadline. */
    if (!peer_death_is_deadline_bound())
        assert_true(rc != CR_ERR_TIMEOUT);
    assert_true(waited <= deadline_ms + 500);
    size_t completed = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        cr_task_status st;
        assert_int_equal(cr_batch_task_status(e, b, i, &st), 0);
        assert_true(st.state == CR_TASK_COMPLETED || st.state == CR_TASK_FAILED ||
                    st.state == CR_TASK_TIMEOUT);
        if (st.state == CR_TASK_COMPLETED)
            completed++;
        else
            failed++;
    }
    print_message("kill -9: %zu completed, %zu failed, all finished %llu ms after the kill\n",
                  completed, failed, (unsigned long long)waited);
    assert_true(in_submit ? failed == 0 : failed > 0);
    assert_int_equal(cr_batch_free(e, b), 0);

    /* The initiator stays usable: a second peer works. */
    test_peer other;
    assert_int_equal(peer_start(&other, NULL), 0);
    uint64_t r2 = peer_reg(&other, "cpu:0", 4096, 0);
    cr_segment_handle seg2;
    assert_int_equal(cr_engine_open_segment(e, other.name, &seg2), 0);
    t0 = now_ms();
    int second = cr_engine_transfer_sync(e, CR_OP_READ, local, seg2, r2, 4096, 0);
    if (second != 0 && peer_death_is_deadline_bound()) {
        /* UCX 1.13's shared-memory receive queue (mm FIFO): a peer killed
         * after claiming a slot of ours and before marking it written blocks
         * every later message to this engine's UCP workers (ARCHITECTURE.md,
         * "ucx over shared memory: a peer that dies mid-send"). It happens
         * when the kill lands inside a reply's copy: rarely in plain builds,
         * often under TSan, whose copies are slower. What must hold then:
         * the failure is bounded by the deadline and named, not a hang. */
        assert_int_equal(second, CR_ERR_TIMEOUT);
        assert_true(now_ms() - t0 <= deadline_ms + 1000);
        print_message("the dead shared-memory peer blocked this engine's UCX receive queue: the "
                      "new peer's transfer timed out after %llu ms (documented UCX 1.13 limit)\n",
                      (unsigned long long)(now_ms() - t0));
        assert_int_equal(peer_stop(&other), 0);
        free(reqs);
        assert_int_equal(cr_engine_unregister(e, local), 0);
        cr_engine_destroy(e);
        free(local);
        return;
    }
    assert_int_equal(second, 0);
    for (size_t i = 0; i < 4096; i++)
        assert_int_equal(local[i], test_pattern(i, r2));
    assert_int_equal(peer_stop(&other), 0);

    /* Dead peer: transfers fail fast, not after the deadline. */
    t0 = now_ms();
    assert_true(cr_engine_transfer_sync(e, CR_OP_READ, local, seg, remote, 4096, 0) < 0);
    assert_true(now_ms() - t0 < deadline_ms);

    /* Restart the target on the same port; reopen; it works. */
    const char *args[] = {"--port", port, NULL};
    assert_int_equal(peer_start(&peer, args), 0);
    uint64_t r3 = peer_reg(&peer, "cpu:0", 1 << 20, 0);
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_READ, local, seg, r3, 1 << 20, 0), 0);
    for (size_t i = 0; i < (1 << 20); i++)
        if (local[i] != test_pattern(i, r3))
            fail_msg("byte %zu wrong after restart", i);
    assert_int_equal(peer_stop(&peer), 0);

    free(reqs);
    assert_int_equal(cr_engine_unregister(e, local), 0);
    cr_engine_destroy(e);
    free(local);
}

static void shared_secret_is_enforced(void **state)
{
    (void)state;
    test_peer peer;
    const char *args[] = {"--secret", "s3cret", NULL};
    assert_int_equal(peer_start(&peer, args), 0);
    uint64_t remote = peer_reg(&peer, "cpu:0", 4096, 0);
    cr_segment_handle seg;

    cr_engine *none = make_engine(NULL, 5000);
    assert_int_equal(cr_engine_open_segment(none, peer.name, &seg), CR_ERR_AUTH_FAILED);
    assert_int_equal(cr_engine_probe(none, peer.name, 1000), CR_ERR_AUTH_FAILED);
    cr_engine_destroy(none);

    cr_engine *wrong = make_engine("guess", 5000);
    assert_int_equal(cr_engine_open_segment(wrong, peer.name, &seg), CR_ERR_AUTH_FAILED);
    cr_engine_destroy(wrong);

    cr_engine *right = make_engine("s3cret", 5000);
    uint8_t buf[4096];
    assert_int_equal(cr_engine_register(right, buf, sizeof(buf), "cpu:0", true), 0);
    assert_int_equal(cr_engine_open_segment(right, peer.name, &seg), 0);
    assert_int_equal(cr_engine_transfer_sync(right, CR_OP_READ, buf, seg, remote, 4096, 0), 0);
    assert_int_equal(buf[100], test_pattern(100, remote));

    /* A peer that cannot prove the secret is refused by the initiator too. */
    test_peer open_peer;
    assert_int_equal(peer_start(&open_peer, NULL), 0);
    assert_int_equal(cr_engine_open_segment(right, open_peer.name, &seg), CR_ERR_AUTH_FAILED);
    assert_int_equal(peer_stop(&open_peer), 0);

    assert_int_equal(cr_engine_unregister(right, buf), 0);
    cr_engine_destroy(right);
    assert_int_equal(peer_stop(&peer), 0);
}

static void dead_and_silent_peers_fail_within_deadline(void **state)
{
    (void)state;
    cr_engine *e = make_engine(NULL, 2000);
    /* A port nobody listens on. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t al = sizeof(a);
    getsockname(s, (struct sockaddr *)&a, &al);
    char name[64];
    snprintf(name, sizeof(name), "127.0.0.1:%u", ntohs(a.sin_port));
    cr_segment_handle seg;
    assert_int_equal(cr_engine_open_segment(e, name, &seg), CR_ERR_PEER_UNREACHABLE);
    assert_int_equal(cr_engine_probe(e, name, 500), CR_ERR_PEER_UNREACHABLE);
    /* Now it listens but never answers: the handshake deadline applies. */
    assert_int_equal(listen(s, 8), 0);
    uint64_t t0 = now_ms();
    assert_int_equal(cr_engine_open_segment(e, name, &seg), CR_ERR_TIMEOUT);
    assert_true(now_ms() - t0 < 3000);
    assert_int_equal(cr_engine_probe(e, name, 300), CR_ERR_TIMEOUT);
    close(s);
    /* Garbage names. */
    assert_int_equal(cr_engine_open_segment(e, "no-port-here", &seg), CR_INVALID_PARAMS);
    assert_int_equal(cr_engine_open_segment(e, "", &seg), CR_INVALID_PARAMS);
    assert_int_equal(cr_engine_open_segment(e, "host:70000", &seg), CR_INVALID_PARAMS);
    cr_engine_destroy(e);
}

/* argv[1]: "kill" (peer death cases) or "other"; none = all. */
int main(int argc, char **argv)
{
    test_require_protocol();
    const char *which = argc > 1 ? argv[1] : "all";
    const struct CMUnitTest kill_tests[] = {
        cmocka_unit_test(kill_mid_batch_then_restart),
        cmocka_unit_test(dead_and_silent_peers_fail_within_deadline),
    };
    const struct CMUnitTest other_tests[] = {
        cmocka_unit_test(shared_secret_is_enforced),
    };
    int rc = 0;
    if (strcmp(which, "all") == 0 || strcmp(which, "kill") == 0)
        rc |= cmocka_run_group_tests_name("peer death", kill_tests, NULL, NULL);
    if (strcmp(which, "all") == 0 || strcmp(which, "other") == 0)
        rc |= cmocka_run_group_tests_name("other faults", other_tests, NULL, NULL);
    return rc;
}
