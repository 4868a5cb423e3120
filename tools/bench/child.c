/*
 * child.c - the benchmark's helper processes: /proc/self/exe re-run in a
 * role, through the shared spawner (tools/common/proc.h: pipes on stdin and
 * stdout, PR_SET_PDEATHSIG, the child table).
 *
 * Design: the child reports readiness with one line on stdout and runs until
 * its stdin reaches EOF, so closing our end of the stdin pipe is the one
 * shutdown signal (and it also fires if we die).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tool_util.h"
#include "bench.h"

int cb_child_spawn(cb_child *c, char *const argv[])
{
    ct_spawn_opts o = {.pipe_stdin = true, .pipe_stdout = true, .exe = "/proc/self/exe"};
    return ct_proc_spawn(&c->proc, (const char *const *)argv, &o);
}

int cb_child_read_line(cb_child *c, char *buf, size_t len, int timeout_ms)
{
    return ct_proc_read_line(&c->proc, buf, len, timeout_ms);
}

int cb_child_stop(cb_child *c, int timeout_ms, char *why, size_t why_len)
{
    if (c->proc.pid <= 0)
        return 0;
    ct_proc_close_stdin(&c->proc);
    int st = ct_proc_stop(&c->proc, 0, timeout_ms);
    if (st == -1) {
        snprintf(why, why_len, "did not exit within %d ms after its stdin closed; killed",
                 timeout_ms);
        return -1;
    }
    if (st >= 128) {
        snprintf(why, why_len, "killed by signal %d", st - 128);
        return -1;
    }
    if (st != 0)
        snprintf(why, why_len, "exited with status %d", st);
    return st;
}

void cb_wait_for_eof(int fd)
{
    char buf[256];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r > 0 || (r < 0 && errno == EINTR))
            continue;
        return;
    }
}

void cb_child_kill(cb_child *c)
{
    ct_proc_kill(&c->proc);
}
