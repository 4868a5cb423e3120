/*
 * ucx_baseline.c - UCX's own benchmark as the baseline of the ucx
 * transport: ucx_perftest (Debian ucx-utils) run as a server and a client
 * on 127.0.0.1 in the same run, with the same UCX_TLS as the engine cases
 * (inherited from the environment). Its "Final:" line gives the typical
 * latency (µs) and the overall bandwidth (MB/s, 2^20 bytes).
 *
 * A missing ucx_perftest is reported, not faked: the caller prints that the
 * baseline is unavailable.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sl) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static pid_t spawn(char *const argv[], int out_fd)
{
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        int null = open("/dev/null", 0);
        dup2(null, 0);
        dup2(out_fd >= 0 ? out_fd : null, 1);
        dup2(null, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static void stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

int cb_baseline_ucx_perftest(const char *test, uint64_t size, unsigned iters, cb_ucx_result *out,
                             char *err, size_t err_len)
{
    return cb_baseline_ucx_perftest_window(test, size, iters, 0, out, err, err_len);
}

int cb_baseline_ucx_perftest_window(const char *test, uint64_t size, unsigned iters,
                                    unsigned outstanding, cb_ucx_result *out, char *err,
                                    size_t err_len)
{
    int port = free_port();
    if (port < 0) {
        snprintf(err, err_len, "no free port");
        return -1;
    }
    char sz[32], n[32], w[32], p[16], o[16];
    snprintf(o, sizeof(o), "%u", outstanding);
    snprintf(sz, sizeof(sz), "%llu", (unsigned long long)size);
    snprintf(n, sizeof(n), "%u", iters);
    snprintf(w, sizeof(w), "%u", iters / 10 + 1);
    snprintf(p, sizeof(p), "%d", port);
    /* -O only when asked: the last two slots stay NULL otherwise. */
    char *srv[] = {"ucx_perftest",
                   "-t",
                   (char *)test,
                   "-s",
                   sz,
                   "-n",
                   n,
                   "-w",
                   w,
                   "-p",
                   p,
                   outstanding ? "-O" : NULL,
                   o,
                   NULL};
    /* The client: the same arguments after the server's address. */
    enum { N_SRV = sizeof(srv) / sizeof(srv[0]) };
    char *cli[N_SRV + 1] = {srv[0], "127.0.0.1"};
    for (size_t i = 1; i < N_SRV; i++)
        cli[i + 1] = srv[i];
    pid_t server = spawn(srv, -1);
    if (server < 0) {
        snprintf(err, err_len, "fork: %s", strerror(errno));
        return -1;
    }
    usleep(300 * 1000); /* let it listen */
    int pipefd[2];
    if (pipe(pipefd) < 0) {
        stop(server);
        snprintf(err, err_len, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t client = spawn(cli, pipefd[1]);
    close(pipefd[1]);
    char buf[65536];
    size_t len = 0;
    uint64_t deadline = cb_now_ns() + 120ull * 1000000000ull;
    for (;;) {
        struct pollfd pf = {.fd = pipefd[0], .events = POLLIN};
        uint64_t now = cb_now_ns();
        if (now >= deadline)
            break;
        if (poll(&pf, 1, (int)((deadline - now) / 1000000)) <= 0)
            break;
        ssize_t r = read(pipefd[0], buf + len, sizeof(buf) - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len >= sizeof(buf) - 1)
            len = 0; /* keep the tail: Final: is the last line */
    }
    buf[len] = '\0';
    close(pipefd[0]);
    int status = 0;
    bool exited = waitpid(client, &status, WNOHANG) == client;
    if (!exited)
        stop(client);
    stop(server);
    const char *fin = strstr(buf, "Final:");
    double v[7];
    if (fin == NULL || sscanf(fin, "Final: %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3],
                              &v[4], &v[5], &v[6]) != 7) {
        snprintf(err, err_len, "ucx_perftest %s produced no result (is ucx-utils installed?)",
                 test);
        return -1;
    }
    out->latency_us = v[1];
    out->gbps = v[5] * 1048576.0 / 1e9;
    return 0;
}
