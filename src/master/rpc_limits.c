/*
 * rpc_limits.c - see rpc_limits.h.
 */
#include "master/rpc_limits.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

crk_io_budget crk_io_budget_default(void)
{
    return (crk_io_budget){
        .in_max = (1u << 20) + (64u << 10), .out_high = 256u << 10, .keep = 64u << 10};
}

void crk_fd_reserve_init(crk_fd_reserve *r)
{
    r->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void crk_fd_reserve_close(crk_fd_reserve *r)
{
    if (r->spare >= 0)
        close(r->spare);
    r->spare = -1;
}

bool crk_fd_reserve_shed(crk_fd_reserve *r, int listen_fd)
{
    if (r->spare < 0) {
        crk_fd_reserve_init(r); /* a descriptor may have come free since */
        return false;
    }
    close(r->spare);
    r->spare = -1;
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0)
        close(fd);
    crk_fd_reserve_init(r);
    return fd >= 0;
}

bool crk_ratelimit_allow(crk_ratelimit *r, uint64_t now_ms, uint64_t *suppressed_out)
{
    if (r->last_ms != 0 && now_ms - r->last_ms < r->interval_ms) {
        r->suppressed++;
        return false;
    }
    *suppressed_out = r->suppressed;
    r->suppressed = 0;
    r->last_ms = now_ms ? now_ms : 1;
    return true;
}

unsigned crk_conn_cap(unsigned wanted, unsigned reserve)
{
    struct rlimit rl;
    uint64_t fds = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        fds = rl.rlim_cur;
    else if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        fds = 1u << 20;
    uint64_t room = fds > (uint64_t)reserve + 16 ? fds - reserve : 16;
    if (wanted != 0 && wanted < room)
        return wanted;
    return room > 1000000 ? 1000000 : (unsigned)room;
}
