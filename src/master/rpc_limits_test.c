/*
 * rpc_limits_test.c - the RPC server's bounds on their own: byte budgets,
 * the rate limiter, the connection cap derived from RLIMIT_NOFILE, and the
 * reserved descriptor that sheds a connection at EMFILE (the fd limit is
 * lowered in this process so accept really fails with EMFILE).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "master/rpc_limits.h"

static void budgets(void **state)
{
    (void)state;
    crk_io_budget b = crk_io_budget_default();
    assert_true(b.in_max >= (1u << 20) + 32); /* one whole frame always fits */
    assert_true(crk_budget_may_read(&b, 0, 0));
    assert_false(crk_budget_may_read(&b, b.in_max, 0));
    assert_false(crk_budget_may_read(&b, 0, b.out_high));
    assert_true(crk_budget_may_read(&b, b.in_max - 1, b.out_high - 1));
    assert_int_equal(crk_budget_read_room(&b, 0), b.in_max);
    assert_int_equal(crk_budget_read_room(&b, b.in_max - 10), 10);
    assert_int_equal(crk_budget_read_room(&b, b.in_max + 10), 0);
}

static void ratelimit(void **state)
{
    (void)state;
    crk_ratelimit r = {.interval_ms = 10000};
    uint64_t more = 99;
    assert_true(crk_ratelimit_allow(&r, 5, &more));
    assert_true(more == 0);
    for (int i = 0; i < 1000; i++)
        assert_false(crk_ratelimit_allow(&r, 6 + (uint64_t)i, &more));
    assert_true(crk_ratelimit_allow(&r, 10005, &more));
    assert_true(more == 1000);
    assert_false(crk_ratelimit_allow(&r, 10006, &more));
}

static void conn_cap(void **state)
{
    (void)state;
    struct rlimit saved, rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    rl = saved;
    rl.rlim_cur = 1024;
    if (rl.rlim_max < 1024)
        skip();
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_int_equal(crk_conn_cap(0, 64), 960);
    assert_int_equal(crk_conn_cap(100, 64), 100);
    assert_int_equal(crk_conn_cap(5000, 64), 960); /* never past the fd limit */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

/* At EMFILE, the reserve accepts and closes the waiting connection. */
static void reserve_sheds_at_emfile(void **state)
{
    (void)state;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t al = sizeof(a);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
    assert_int_equal(listen(lfd, 16), 0);
    crk_fd_reserve r;
    crk_fd_reserve_init(&r);
    assert_true(r.spare >= 0);
    int cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(cfd, (struct sockaddr *)&a, sizeof(a)), 0);

    /* No descriptor left: the highest one in use becomes the limit. */
    struct rlimit saved, rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    int top = cfd > r.spare ? cfd : r.spare;
    top = top > lfd ? top : lfd;
    rl = saved;
    rl.rlim_cur = (rlim_t)top + 1;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    /* Fill every lower free slot so accept has nothing. */
    int filler[4096];
    int nf = 0;
    while (nf < 4096) {
        int d = dup(0);
        if (d < 0)
            break;
        filler[nf++] = d;
    }
    assert_true(accept4(lfd, NULL, NULL, SOCK_CLOEXEC) < 0);
    assert_int_equal(errno, EMFILE);
    assert_true(crk_fd_reserve_shed(&r, lfd));  /* accepted and closed */
    assert_false(crk_fd_reserve_shed(&r, lfd)); /* nothing else waits */
    assert_true(r.spare >= 0);                  /* the reserve is held again */
    for (int i = 0; i < nf; i++)
        close(filler[i]);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
    /* The client sees its connection closed. */
    struct pollfd p = {.fd = cfd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 2000), 1);
    char c;
    assert_true(recv(cfd, &c, 1, 0) <= 0);
    close(cfd);
    crk_fd_reserve_close(&r);
    close(lfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(budgets),
        cmocka_unit_test(ratelimit),
        cmocka_unit_test(conn_cap),
        cmocka_unit_test(reserve_sheds_at_emfile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
