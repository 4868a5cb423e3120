/* harness.c - see harness.h. */
#include "harness.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int read_line(test_peer *p, int timeout_ms)
{
    size_t n = 0;
    while (n + 1 < sizeof(p->line)) {
        struct pollfd pf = {.fd = p->from_fd, .events = POLLIN};
        if (poll(&pf, 1, timeout_ms) <= 0)
            return -1;
        char c;
        if (read(p->from_fd, &c, 1) != 1)
            return -1;
        if (c == '\n')
            break;
        p->line[n++] = c;
    }
    p->line[n] = '\0';
    return 0;
}

int peer_start(test_peer *p, const char *const *args)
{
    const char *bin = getenv("CRESCENT_PEER_BIN");
    if (bin == NULL)
        bin = "./crescent-test-peer";
    int in[2], out[2];
    if (pipe(in) < 0 || pipe(out) < 0)
        return -1;
    const char *argv[32] = {bin};
    int argc = 1;
    for (int i = 0; args != NULL && args[i] != NULL && argc < 31; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    /* A peer that died must read as "DEAD" in peer_cmd, not kill this
     * process with SIGPIPE on the next command. */
    signal(SIGPIPE, SIG_IGN);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->pid = pid;
    p->to_fd = in[1];
    p->from_fd = out[0];
    if (read_line(p, 10000) < 0 || strncmp(p->line, "READY ", 6) != 0) {
        fprintf(stderr, "peer did not start: '%s'\n", p->line);
        peer_kill(p);
        return -1;
    }
    snprintf(p->name, sizeof(p->name), "%s", p->line + 6);
    return 0;
}

const char *peer_cmd(test_peer *p, const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof(cmd) - 1, fmt, ap);
    va_end(ap);
    cmd[n++] = '\n';
    if (write(p->to_fd, cmd, (size_t)n) != n || read_line(p, 30000) < 0)
        snprintf(p->line, sizeof(p->line), "DEAD");
    return p->line;
}

uint64_t peer_reg(test_peer *p, const char *loc, uint64_t size, int read_only)
{
    const char *r =
        peer_cmd(p, "reg %s %llu %s", loc, (unsigned long long)size, read_only ? "ro" : "rw");
    if (strncmp(r, "OK ", 3) != 0)
        return 0;
    return strtoull(r + 3, NULL, 10);
}

/* waitpid with a deadline: the pid's status, or -1 if it has not exited. */
static int wait_exit(pid_t pid, int timeout_ms, int *st)
{
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
        pid_t r = waitpid(pid, st, WNOHANG);
        if (r == pid)
            return 0;
        if (r < 0)
            return -1;
        usleep(10000);
    }
    return -1;
}

int peer_stop(test_peer *p)
{
    int st = -1;
    /* A peer that does not exit within 30 s is a failure to report, not a
     * reason for the test to hang until CTest's timeout. */
    if (write(p->to_fd, "quit\n", 5) == 5 && wait_exit(p->pid, 30000, &st) == 0) {
        close(p->to_fd);
        close(p->from_fd);
        p->pid = 0;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    fprintf(stderr, "peer %d did not exit within 30 s of 'quit'; killing it\n", (int)p->pid);
    peer_kill(p);
    return -1;
}

void peer_kill(test_peer *p)
{
    if (p->pid > 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
        close(p->to_fd);
        close(p->from_fd);
        p->pid = 0;
    }
}

const char *test_protocol(void)
{
    const char *p = getenv("CRESCENT_TEST_PROTOCOL");
    return p != NULL && p[0] != '\0' ? p : "tcp";
}

void test_require_protocol(void)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.protocol = test_protocol();
    cr_engine *e;
    int rc = cr_engine_create(&cfg, &e);
    if (rc == CR_ERR_INVALID_CONFIG || rc == CR_ERR_TRANSPORT_UNSUPPORTED) {
        printf("skipped: protocol %s is not available here: %s\n", cfg.protocol,
               cr_last_error_message());
        exit(77);
    }
    if (rc == 0)
        cr_engine_destroy(e);
}

uint64_t test_counter(cr_engine *e, const char *transport, const char *name)
{
    cr_engine_counter c[128];
    size_t n = 0;
    if (cr_engine_counters(e, c, 128, &n) < 0)
        return 0;
    for (size_t i = 0; i < n && i < 128; i++)
        if (strcmp(c[i].transport, transport) == 0 && strcmp(c[i].name, name) == 0)
            return c[i].value;
    return 0;
}

uint64_t test_bytes_via(cr_engine *e, const char *transport)
{
    return test_counter(e, transport, "bytes");
}

bool test_target_checks_ranges(cr_engine *e)
{
    return !(test_counter(e, "ucx", "software_rma") == 1 &&
             test_counter(e, "ucx", "checked_active_messages") == 0);
}
