/*
 * engine_sync_test.c - the tcp transport's path for a caller that waits
 * (transports/tcp/sync.c), with real peer processes: a synchronous call's
 * one small request is carried by the calling thread on a pooled
 * connection of its own (the tcp counters sync_transfers / sync_connects
 * say so, and no lane connects), bytes are right both ways, bigger requests
 * and CRESCENT_TCP_CALLER_READS=0 go through the lanes (a lone 1 MiB request
 * over exactly two of them, cut in halves), more callers than
 * pooled connections all finish, a stopped peer costs a caller its own
 * timeout and not more, a restarted peer is noticed (a pooled connection to
 * the dead process is replaced, a request checked against the old instance
 * fails with CR_ERR_CONNECTION), and destroying the engine wakes a blocked
 * caller with CR_ERR_SHUTDOWN.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "crescent/engine.h"
#include "harness.h"

#define REMOTE_LEN (8u << 20)

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

typedef struct fixture {
    test_peer peer;
    uint64_t remote;
    cr_engine *e;
    uint8_t *local;
    cr_segment_handle seg;
} fixture;

static void fixture_start(fixture *f, uint32_t request_ms)
{
    assert_int_equal(peer_start(&f->peer, NULL), 0);
    f->remote = peer_reg(&f->peer, "cpu:0", REMOTE_LEN, 0);
    assert_true(f->remote != 0);
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.protocol = "tcp";
    cfg.request_timeout_ms = request_ms;
    cfg.connect_timeout_ms = 2000;
    assert_int_equal(cr_engine_create(&cfg, &f->e), 0);
    f->local = calloc(1, REMOTE_LEN);
    assert_non_null(f->local);
    assert_int_equal(cr_engine_register(f->e, f->local, REMOTE_LEN, "cpu:0", true), 0);
    assert_int_equal(cr_engine_open_segment(f->e, f->peer.name, &f->seg), 0);
}

static void fixture_stop(fixture *f)
{
    assert_int_equal(cr_engine_unregister(f->e, f->local), 0);
    cr_engine_destroy(f->e);
    free(f->local);
}

static uint64_t sync_transfers(cr_engine *e)
{
    return test_counter(e, "tcp", "sync_transfers");
}

static void expect_pattern(const uint8_t *p, uint64_t off, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        if (p[i] != test_pattern(off + i, seed))
            fail_msg("byte %llu of %llu is %u, not %u", (unsigned long long)i,
                     (unsigned long long)len, p[i], test_pattern(off + i, seed));
}

static void carried_by_the_caller(void **state)
{
    (void)state;
    fixture f;
    fixture_start(&f, 5000);
    const uint64_t sizes[] = {1, 4096, 64 << 10, 1020 << 10};
    uint64_t off = 0;
    for (size_t k = 0; k < 4; k++) {
        memset(f.local, 0, sizes[k]);
        assert_int_equal(
            cr_engine_transfer_sync(f.e, CR_OP_READ, f.local, f.seg, f.remote + off, sizes[k], 0),
            0);
        expect_pattern(f.local, off, sizes[k], f.remote);
        off += sizes[k] + 13;
    }
    /* A write lands: the peer checks the bytes itself. */
    const uint64_t wr_at = f.remote + (6u << 20);
    for (uint64_t i = 0; i < (64 << 10); i++)
        f.local[i] = test_pattern(i, 91);
    assert_int_equal(cr_engine_transfer_sync(f.e, CR_OP_WRITE, f.local, f.seg, wr_at, 64 << 10, 0),
                     0);
    assert_string_equal(peer_cmd(&f.peer, "check %llu %u 91", (unsigned long long)wr_at, 64u << 10),
                        "OK");
    assert_int_equal(sync_transfers(f.e), 5);
    assert_int_equal(test_counter(f.e, "tcp", "sync_connects"), 1); /* one, reused */
    assert_int_equal(test_counter(f.e, "tcp", "connects"), 0);      /* no lane was needed */

    /* A batch made with CR_BATCH_CALLER_WAITS has ended when submit returns. */
    cr_batch_id b;
    assert_int_equal(cr_batch_create_ex(f.e, 1, CR_BATCH_CALLER_WAITS, &b), 0);
    cr_transfer_request r = {CR_OP_READ, f.local, f.seg, f.remote + 4096, 4096};
    assert_int_equal(cr_batch_submit(f.e, b, &r, 1), 0);
    cr_task_status st;
    assert_int_equal(cr_batch_task_status(f.e, b, 0, &st), 0);
    assert_int_equal(st.state, CR_TASK_COMPLETED);
    assert_int_equal(st.transferred_bytes, 4096);
    assert_int_equal(cr_batch_wait(f.e, b, 0), 0);
    assert_int_equal(cr_batch_free(f.e, b), 0);
    expect_pattern(f.local, 4096, 4096, f.remote);
    assert_int_equal(sync_transfers(f.e), 6);

    /* 1 MiB and more, or a plain batch: the lanes carry it. A lone request of 1 MiB up to two
     * slices is cut in halves that two lanes carry at once: exactly two lanes connect. */
    for (uint64_t i = 0; i < (1u << 20) + 4096; i++)
        f.local[i] = test_pattern(i, 92);
    const uint64_t half_at = f.remote + (5u << 20) + 4096;
    assert_int_equal(
        cr_engine_transfer_sync(f.e, CR_OP_WRITE, f.local, f.seg, half_at, (1u << 20) + 4096, 0),
        0);
    assert_string_equal(
        peer_cmd(&f.peer, "check %llu %u 92", (unsigned long long)half_at, (1u << 20) + 4096),
        "OK");
    assert_int_equal(test_counter(f.e, "tcp", "connects"), 2);
    memset(f.local, 0, 1u << 20);
    assert_int_equal(
        cr_engine_transfer_sync(f.e, CR_OP_READ, f.local, f.seg, f.remote + 8191, 1u << 20, 0), 0);
    expect_pattern(f.local, 8191, 1u << 20, f.remote);
    assert_int_equal(sync_transfers(f.e), 6); /* (its halves: the next two of the four lanes) */
    assert_int_equal(cr_engine_transfer_sync(f.e, CR_OP_READ, f.local, f.seg, f.remote, 4 << 20, 0),
                     0);
    expect_pattern(f.local, 0, 4 << 20, f.remote);
    assert_int_equal(cr_batch_create(f.e, 1, &b), 0);
    assert_int_equal(cr_batch_submit(f.e, b, &r, 1), 0);
    assert_int_equal(cr_batch_wait(f.e, b, 5000), 0);
    assert_int_equal(cr_batch_free(f.e, b), 0);
    assert_int_equal(sync_transfers(f.e), 6);
    assert_true(test_counter(f.e, "tcp", "connects") >= 1);
    fixture_stop(&f);
    assert_int_equal(peer_stop(&f.peer), 0);
}

static void switched_off_uses_the_lanes(void **state)
{
    (void)state;
    setenv("CRESCENT_TCP_CALLER_READS", "0", 1);
    fixture f;
    fixture_start(&f, 5000);
    unsetenv("CRESCENT_TCP_CALLER_READS");
    assert_int_equal(cr_engine_transfer_sync(f.e, CR_OP_READ, f.local, f.seg, f.remote, 4096, 0),
                     0);
    expect_pattern(f.local, 0, 4096, f.remote);
    assert_int_equal(sync_transfers(f.e), 0);
    assert_int_equal(test_counter(f.e, "tcp", "sync_connects"), 0);
    assert_true(test_counter(f.e, "tcp", "connects") >= 1);
    fixture_stop(&f);
    assert_int_equal(peer_stop(&f.peer), 0);
}

#define CALLERS 24 /* more than the 16 pooled connections a peer keeps */
#define ROUNDS  60

typedef struct caller {
    fixture *f;
    int index;
    int failures;
    char first_error[256];
} caller;

static void *caller_main(void *arg)
{
    caller *c = arg;
    fixture *f = c->f;
    const uint64_t len = 4096;
    for (int i = 0; i < ROUNDS; i++) {
        uint64_t off = ((uint64_t)c->index * ROUNDS + (uint64_t)i) * len;
        uint8_t *dst = f->local + off;
        int rc = cr_engine_transfer_sync(f->e, CR_OP_READ, dst, f->seg, f->remote + off, len, 0);
        bool right = rc == 0;
        for (uint64_t j = 0; right && j < len; j++)
            right = dst[j] == test_pattern(off + j, f->remote);
        if (!right && c->failures++ == 0)
            snprintf(c->first_error, sizeof(c->first_error), "round %d: %s", i,
                     rc == 0 ? "wrong bytes" : cr_last_error_message());
    }
    return NULL;
}

static void more_callers_than_connections(void **state)
{
    (void)state;
    fixture f;
    fixture_start(&f, 10000);
    pthread_t th[CALLERS];
    caller c[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        c[i] = (caller){.f = &f, .index = i};
        assert_int_equal(pthread_create(&th[i], NULL, caller_main, &c[i]), 0);
    }
    for (int i = 0; i < CALLERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        if (c[i].failures > 0)
            fail_msg("caller %d: %d failed, first %s", i, c[i].failures, c[i].first_error);
    }
    uint64_t carried = sync_transfers(f.e), opened = test_counter(f.e, "tcp", "sync_connects");
    print_message("%d calls: %llu carried by their callers over %llu connections\n",
                  CALLERS * ROUNDS, (unsigned long long)carried, (unsigned long long)opened);
    assert_true(carried > 0 && carried <= CALLERS * ROUNDS);
    assert_true(opened >= 1 && opened <= 16);
    fixture_stop(&f);
    assert_int_equal(peer_stop(&f.peer), 0);
}

static void stopped_peer_costs_the_callers_timeout(void **state)
{
    (void)state;
    fixture f;
    fixture_start(&f, 10000);
    assert_int_equal(cr_engine_transfer_sync(f.e, CR_OP_READ, f.local, f.seg, f.remote, 4096, 0),
                     0);
    pid_t pid = f.peer.child.proc.pid;
    assert_int_equal(tt_stop_process(pid), 0);
    uint64_t t0 = now_ms();
    int rc = cr_engine_transfer_sync(f.e, CR_OP_READ, f.local, f.seg, f.remote, 4096, 300);
    uint64_t took = now_ms() - t0;
    print_message("stopped peer: %s after %llu ms (timeout 300 ms)\n", cr_status_name(rc),
                  (unsigned long long)took);
    assert_int_equal(rc, CR_ERR_TIMEOUT);
    assert_true(took >= 290 && took < 1500);
    assert_int_equal(kill(pid, SIGCONT), 0);
    /* The timed-out connection was closed (its late reply must not answer a
     * later request); the next call opens another and reads the right bytes. */
    memset(f.local, 0, 8192);
    assert_int_equal(
        cr_engine_transfer_sync(f.e, CR_OP_READ, f.local, f.seg, f.remote + 4096, 8192, 0), 0);
    expect_pattern(f.local, 4096, 8192, f.remote);
    assert_int_equal(test_counter(f.e, "tcp", "sync_connects"), 2);
    fixture_stop(&f);
    assert_int_equal(peer_stop(&f.peer), 0);
}

/* Start, pool one connection with a good read, then kill -9 the peer; its
 * port into port[16]. */
static void pooled_then_killed(fixture *f, char port[16])
{
    fixture_start(f, 5000);
    assert_int_equal(
        cr_engine_transfer_sync(f->e, CR_OP_READ, f->local, f->seg, f->remote, 4096, 0), 0);
    snprintf(port, 16, "%s", strrchr(f->peer.name, ':') + 1);
    peer_kill(&f->peer);
}

static void restarted_peer_is_noticed(void **state)
{
    (void)state;
    fixture f;
    char port[16];
    pooled_then_killed(&f, port);
    const char *args[] = {"--port", port, NULL};
    assert_int_equal(peer_start(&f.peer, args), 0);
    uint64_t remote = peer_reg(&f.peer, "cpu:0", REMOTE_LEN, 0);
    assert_true(remote != 0);
    /* The pooled connection reached the dead process: it is replaced, and
     * the new process is not the instance the request was checked against. */
    int rc = cr_engine_transfer_sync(f.e, CR_OP_READ, f.local, f.seg, f.remote, 4096, 0);
    print_message("a request checked against the dead instance: %s (%s)\n", cr_status_name(rc),
                  cr_last_error_message());
    assert_int_equal(rc, CR_ERR_CONNECTION);
    assert_non_null(strstr(cr_last_error_message(), "is instance"));
    assert_int_equal(cr_engine_open_segment(f.e, f.peer.name, &f.seg), 0);
    memset(f.local, 0, 65536);
    assert_int_equal(cr_engine_transfer_sync(f.e, CR_OP_READ, f.local, f.seg, remote, 65536, 0), 0);
    expect_pattern(f.local, 0, 65536, remote);
    fixture_stop(&f);
    assert_int_equal(peer_stop(&f.peer), 0);
}

/* A listener that never says CHALLENGE where the peer was: the fresh
 * connection's handshake is bounded by the caller's 300 ms, not by the
 * engine's 2 s connect timeout. */
static void silent_peer_costs_the_callers_timeout(void **state)
{
    (void)state;
    fixture f;
    char port_text[16];
    pooled_then_killed(&f, port_text);
    uint16_t port = (uint16_t)atoi(port_text);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(s, 8), 0);
    uint64_t t0 = now_ms();
    int rc = cr_engine_transfer_sync(f.e, CR_OP_READ, f.local, f.seg, f.remote, 4096, 300);
    uint64_t took = now_ms() - t0;
    print_message("silent listener: %s after %llu ms (%s)\n", cr_status_name(rc),
                  (unsigned long long)took, cr_last_error_message());
    assert_int_equal(rc, CR_ERR_TIMEOUT);
    assert_true(took >= 250 && took < 1500);
    close(s);
    fixture_stop(&f);
}

typedef struct blocked_call {
    fixture *f;
    int rc;
} blocked_call;

static void *blocked_main(void *arg)
{
    blocked_call *b = arg;
    b->rc = cr_engine_transfer_sync(b->f->e, CR_OP_READ, b->f->local, b->f->seg, b->f->remote, 4096,
                                    30000);
    return NULL;
}

static void destroy_wakes_a_blocked_caller(void **state)
{
    (void)state;
    fixture f;
    fixture_start(&f, 30000);
    assert_int_equal(cr_engine_transfer_sync(f.e, CR_OP_READ, f.local, f.seg, f.remote, 4096, 0),
                     0);
    pid_t pid = f.peer.child.proc.pid;
    assert_int_equal(tt_stop_process(pid), 0);
    blocked_call b = {.f = &f, .rc = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, blocked_main, &b), 0);
    usleep(300 * 1000);
    uint64_t t0 = now_ms();
    cr_engine_destroy(f.e);
    uint64_t took = now_ms() - t0;
    assert_int_equal(pthread_join(th, NULL), 0);
    print_message("destroy with a caller blocked on a stopped peer: %llu ms, the call: %s\n",
                  (unsigned long long)took, cr_status_name(b.rc));
    assert_int_equal(b.rc, CR_ERR_SHUTDOWN);
    assert_true(took < 3000);
    free(f.local);
    peer_kill(&f.peer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(carried_by_the_caller),
        cmocka_unit_test(switched_off_uses_the_lanes),
        cmocka_unit_test(more_callers_than_connections),
        cmocka_unit_test(stopped_peer_costs_the_callers_timeout),
        cmocka_unit_test(restarted_peer_is_noticed),
        cmocka_unit_test(silent_peer_costs_the_callers_timeout),
        cmocka_unit_test(destroy_wakes_a_blocked_caller),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
