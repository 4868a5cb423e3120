/*
 * child.c - the benchmark's helper processes: fork + exec of /proc/self/exe
 * with a pipe on the child's stdin and one on its stdout.
 *
 * Design: the child reports readiness with one line on stdout and runs until
 * its stdin reaches EOF, so closing our end of the stdin pipe is the one
 * shutdown signal (and it also fires if we die). All pipe ends are O_CLOEXEC,
 * so a second child never inherits the first one's stdin and keeps it open.
 * Between fork and exec the child only calls async-signal-safe functions.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tool_util.h"
#include "bench.h"

/* dup2 onto `to`; if the pipe end already is `to`, just clear O_CLOEXEC. */
static int move_fd(int fd, int to)
{
    if (fd == to)
        return fcntl(fd, F_SETFD, 0);
    return dup2(fd, to) < 0 ? -1 : 0;
}

int cb_child_spawn(cb_child *c, char *const argv[])
{
    int in_pipe[2], out_pipe[2];
    if (pipe2(in_pipe, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(out_pipe, O_CLOEXEC) < 0)
        goto close_in_pipe;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        goto close_out_pipe;
    if (pid == 0) {
        if (move_fd(in_pipe[0], STDIN_FILENO) < 0 || move_fd(out_pipe[1], STDOUT_FILENO) < 0)
            _exit(127);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(in_pipe[0]);
    close(out_pipe[1]);
    c->pid = pid;
    c->in_fd = in_pipe[1];
    c->out_fd = out_pipe[0];
    return 0;

close_out_pipe:
    close(out_pipe[0]);
    close(out_pipe[1]);
close_in_pipe:
    close(in_pipe[0]);
    close(in_pipe[1]);
    return -1;
}

int cb_child_read_line(cb_child *c, char *buf, size_t len, int timeout_ms)
{
    return ct_read_line(c->out_fd, buf, len, timeout_ms);
}

static void close_fds(cb_child *c)
{
    if (c->in_fd >= 0)
        close(c->in_fd);
    if (c->out_fd >= 0)
        close(c->out_fd);
    c->in_fd = -1;
    c->out_fd = -1;
}

int cb_child_stop(cb_child *c, int timeout_ms, char *why, size_t why_len)
{
    if (c->pid < 0) {
        close_fds(c);
        return 0;
    }
    if (c->in_fd >= 0)
        close(c->in_fd);
    c->in_fd = -1;
    uint64_t deadline = cb_now_ns() + (uint64_t)timeout_ms * 1000000u;
    int status = 0;
    pid_t r;
    while ((r = waitpid(c->pid, &status, WNOHANG)) == 0 && cb_now_ns() < deadline) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    int rc = 0;
    if (r == 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &status, 0);
        snprintf(why, why_len, "did not exit within %d ms after its stdin closed; killed",
                 timeout_ms);
        rc = -1;
    } else if (r < 0) {
        snprintf(why, why_len, "waitpid: %s", strerror(errno));
        rc = -1;
    } else if (WIFSIGNALED(status)) {
        snprintf(why, why_len, "killed by signal %d", WTERMSIG(status));
        rc = -1;
    } else if (WEXITSTATUS(status) != 0) {
        snprintf(why, why_len, "exited with status %d", WEXITSTATUS(status));
        rc = WEXITSTATUS(status);
    }
    c->pid = -1;
    close_fds(c);
    return rc;
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
    if (c->pid >= 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        c->pid = -1;
    }
    close_fds(c);
}
