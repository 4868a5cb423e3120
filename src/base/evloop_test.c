/*
 * evloop_test.c - the event loop (handlers, wake-ups, ticks) and the
 * acceptor (connection cap, the fd limit without a busy loop).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/acceptor.h"
#include "base/clock.h"
#include "base/evloop.h"
#include "base/net.h"

typedef struct probe {
    crb_io io;
    atomic_int reads;
    atomic_int ticks, woken_ticks;
    atomic_int accepted;
    int accepted_fds[8];
} probe;

static probe *probe_of(crb_io *io)
{
    return (probe *)((char *)io - offsetof(probe, io));
}

static void on_readable(crb_io *io, uint32_t events)
{
    char buf[64];
    while (read(io->fd, buf, sizeof(buf)) > 0)
        ;
    atomic_fetch_add(&probe_of(io)->reads, 1);
}

static void on_tick(crb_loop *loop, uint64_t now, bool woken)
{
    probe *p = loop->owner;
    atomic_fetch_add(&p->ticks, 1);
    if (woken)
        atomic_fetch_add(&p->woken_ticks, 1);
}

static void wait_for(atomic_int *v, int at_least)
{
    uint64_t end = crb_now_ns() + 3000000000ull;
    while (atomic_load(v) < at_least && crb_now_ns() < end)
        usleep(1000);
}

static void test_handlers_wakeups_and_ticks(void **state)
{
    probe p = {0};
    crb_loop loop;
    assert_int_equal(crb_loop_init(&loop, "test-loop", 20, on_tick, &p), 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    p.io.fd = sv[0];
    p.io.on_event = on_readable;
    assert_int_equal(crb_loop_add(&loop, &p.io, EPOLLIN), 0);
    assert_int_equal(crb_loop_start(&loop), 0);
    assert_int_equal(write(sv[1], "x", 1), 1);
    wait_for(&p.reads, 1);
    assert_true(atomic_load(&p.reads) >= 1);
    crb_loop_wake(&loop);
    wait_for(&p.woken_ticks, 1);
    assert_true(atomic_load(&p.woken_ticks) >= 1);
    usleep(100000);
    assert_true(atomic_load(&p.ticks) >= 3); /* 20 ms ticks over 100 ms */
    crb_loop_mod(&p.io, 0);                  /* not watched: no more reads */
    int before = atomic_load(&p.reads);
    assert_int_equal(write(sv[1], "y", 1), 1);
    usleep(50000);
    assert_int_equal(atomic_load(&p.reads), before);
    crb_loop_fini(&loop);
    close(sv[0]);
    close(sv[1]);
}

/* Adaptive polling (base/spin.h): requests that follow each reply at once
 * are caught by the loop's windows; requests 3 ms apart make it back off
 * (fewer windows than requests), and every request is still answered. */
static void on_echo(crb_io *io, uint32_t events)
{
    char buf[64];
    ssize_t n;
    while ((n = read(io->fd, buf, sizeof(buf))) > 0) {
        atomic_fetch_add(&probe_of(io)->reads, (int)n); /* bytes echoed, counted first */
        assert_int_equal(write(io->fd, buf, (size_t)n), n);
    }
}

/* Send one byte and wait for its echo, polling (spin) or sleeping in poll. */
static void round_trip(int fd, bool spin)
{
    assert_int_equal(write(fd, "p", 1), 1);
    uint64_t end = crb_now_ns() + 3000000000ull;
    char c;
    for (;;) {
        if (read(fd, &c, 1) == 1)
            return;
        assert_true(errno == EAGAIN && crb_now_ns() < end);
        if (!spin) {
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            poll(&pf, 1, 3000);
        }
    }
}

static void test_adaptive_spin(void **state)
{
    probe p = {0};
    crb_loop loop;
    assert_int_equal(crb_loop_init(&loop, "test-spin", 100, NULL, &p), 0);
    crb_loop_set_busy_poll(&loop, CRB_SPIN_ADAPTIVE);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    p.io.fd = sv[0];
    p.io.on_event = on_echo;
    assert_int_equal(crb_loop_add(&loop, &p.io, EPOLLIN), 0);
    assert_int_equal(crb_loop_start(&loop), 0);
    for (int i = 0; i < 2000; i++)
        round_trip(sv[1], true);
    uint64_t windows = atomic_load(&loop.spin.windows), caught = atomic_load(&loop.spin.caught);
    print_message("request/reply: %llu windows, %llu caught\n", (unsigned long long)windows,
                  (unsigned long long)caught);
    assert_true(caught > 0);
    assert_true(caught <= windows);
    for (int i = 0; i < 30; i++) {
        usleep(3000);
        round_trip(sv[1], false);
    }
    uint64_t sparse_windows = atomic_load(&loop.spin.windows) - windows;
    print_message("3 ms apart: %llu windows for 30 requests, %llu caught\n",
                  (unsigned long long)sparse_windows,
                  (unsigned long long)(atomic_load(&loop.spin.caught) - caught));
    assert_true(sparse_windows < 20); /* ~8: three misses, then one window per 3, 5, 9, 9... */
    assert_int_equal(atomic_load(&p.reads), 2030); /* every request answered */
    crb_loop_fini(&loop);
    close(sv[0]);
    close(sv[1]);
}

/* crb_loop_again: each tick asks for one more; they come at once, not a
 * 10 s tick apart, and stop when no more are asked for. */
typedef struct again_probe {
    atomic_int woken_ticks;
    int left; /* loop thread only */
} again_probe;

static void again_tick(crb_loop *loop, uint64_t now, bool woken)
{
    again_probe *p = loop->owner;
    if (woken)
        atomic_fetch_add(&p->woken_ticks, 1);
    if (p->left > 0) {
        p->left--;
        crb_loop_again(loop);
    }
}

static void test_again_and_stop(void **state)
{
    again_probe p = {.left = 5};
    crb_loop loop;
    assert_int_equal(crb_loop_init(&loop, "test-again", 10000, again_tick, &p), 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    probe io = {0};
    io.io.fd = sv[0];
    io.io.on_event = on_readable;
    assert_int_equal(crb_loop_add(&loop, &io.io, EPOLLIN), 0);
    assert_int_equal(crb_loop_start(&loop), 0);
    crb_loop_wake(&loop); /* the first tick; it asks for five more */
    wait_for(&p.woken_ticks, 6);
    assert_int_equal(atomic_load(&p.woken_ticks), 6);
    usleep(50000);
    assert_int_equal(atomic_load(&p.woken_ticks), 6); /* nothing asked: it sleeps */
    /* Stopped, not finished: the loop's fds are still there to delete from. */
    crb_loop_stop(&loop);
    assert_false(loop.running);
    crb_loop_del(&io.io);
    assert_null(io.io.loop);
    assert_int_equal(epoll_ctl(loop.epfd, EPOLL_CTL_DEL, sv[0], NULL), -1);
    assert_int_equal(errno, ENOENT); /* it was deleted from a live epoll set */
    crb_loop_fini(&loop);
    close(sv[0]);
    close(sv[1]);
}

static void on_conn(crb_acceptor *a, int fd)
{
    probe *p = a->owner;
    int i = atomic_fetch_add(&p->accepted, 1);
    if (i < 8)
        p->accepted_fds[i] = fd;
    else
        close(fd);
}

typedef struct acc_fixture {
    probe p;
    crb_loop loop;
    crb_acceptor acc;
    uint16_t port;
} acc_fixture;

static void acc_tick(crb_loop *loop, uint64_t now, bool woken)
{
    acc_fixture *f = loop->owner;
    crb_acceptor_tick(&f->acc, now);
}

static void acc_start(acc_fixture *f, unsigned cap)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(crb_loop_init(&f->loop, "test-acc", 20, acc_tick, f), 0);
    int lfd = crb_listen("127.0.0.1", 0, 16, &f->port);
    assert_true(lfd >= 0);
    assert_int_equal(
        crb_acceptor_start(&f->acc, &f->loop, lfd, cap, on_conn, &f->p, "test listener"), 0);
    assert_int_equal(crb_loop_start(&f->loop), 0);
}

static void acc_stop(acc_fixture *f)
{
    crb_loop_fini(&f->loop);
    crb_acceptor_stop(&f->acc);
    int n = atomic_load(&f->p.accepted);
    for (int i = 0; i < n && i < 8; i++)
        close(f->p.accepted_fds[i]);
}

/* A connection the acceptor refused is closed: the client reads EOF. */
static void expect_closed(int fd)
{
    struct timeval tv = {.tv_sec = 3};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c;
    ssize_t n = read(fd, &c, 1);
    assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
}

static void test_connection_cap(void **state)
{
    acc_fixture f;
    acc_start(&f, 2);
    int c1 = crb_connect("127.0.0.1", f.port, 2000);
    int c2 = crb_connect("127.0.0.1", f.port, 2000);
    wait_for(&f.p.accepted, 2);
    int c3 = crb_connect("127.0.0.1", f.port, 2000);
    assert_true(c1 >= 0 && c2 >= 0 && c3 >= 0);
    expect_closed(c3);
    assert_int_equal(atomic_load(&f.p.accepted), 2);
    assert_true(crb_acceptor_refused(&f.acc) >= 1);
    /* One closes: a new connection is accepted again. */
    crb_acceptor_closed(&f.acc);
    int c4 = crb_connect("127.0.0.1", f.port, 2000);
    wait_for(&f.p.accepted, 3);
    assert_int_equal(atomic_load(&f.p.accepted), 3);
    close(c1);
    close(c2);
    close(c3);
    close(c4);
    acc_stop(&f);
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* At the fd limit the pending connection is closed and the loop does not
 * spin while the listener stays readable. */
static void test_fd_limit_without_busy_loop(void **state)
{
    acc_fixture f;
    acc_start(&f, 0);
    int client = crb_connect("127.0.0.1", f.port, 2000);
    assert_true(client >= 0);
    wait_for(&f.p.accepted, 1);
    /* Use up every descriptor below a low limit. */
    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    int fillers[256], nf = 0;
    int probe_fd = dup(0);
    low.rlim_cur = (rlim_t)probe_fd + 8;
    low.rlim_max = old.rlim_max;
    close(probe_fd);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    /* The client socket must exist before the table is full. */
    int victim = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(victim >= 0);
    int fd;
    while (nf < 256 && (fd = dup(0)) >= 0)
        fillers[nf++] = fd;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(f.port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(victim, (struct sockaddr *)&sa, sizeof(sa)), 0);
    double cpu0 = cpu_seconds();
    usleep(400000);
    double cpu = cpu_seconds() - cpu0;
    expect_closed(victim);
    for (int i = 0; i < nf; i++)
        close(fillers[i]);
    setrlimit(RLIMIT_NOFILE, &old);
    assert_true(crb_acceptor_refused(&f.acc) >= 1);
    assert_true(cpu < 0.15); /* a spinning accept loop burns ~0.4 s here */
    /* After the back-off the listener serves again. */
    int again = crb_connect("127.0.0.1", f.port, 2000);
    assert_true(again >= 0);
    wait_for(&f.p.accepted, 2);
    assert_int_equal(atomic_load(&f.p.accepted), 2);
    close(again);
    close(victim);
    close(client);
    acc_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handlers_wakeups_and_ticks),
        cmocka_unit_test(test_again_and_stop),
        cmocka_unit_test(test_adaptive_spin),
        cmocka_unit_test(test_connection_cap),
        cmocka_unit_test(test_fd_limit_without_busy_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
