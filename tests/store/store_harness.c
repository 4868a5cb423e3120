/*
 * store_harness.c - see store_harness.h.
 *
 * Children are fork+exec'd with pipes on stdin/stdout (stderr is inherited,
 * so CTest shows their logs). The table of live children lets sh_kill_all
 * clean up after an assertion jumped out of a test.
 */
#include "store_harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHILDREN 64

static pid_t children[MAX_CHILDREN];

static void track(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] == 0) {
            children[i] = pid;
            return;
        }
    }
}

static void untrack(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == pid)
            children[i] = 0;
}

uint64_t sh_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void sh_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Spawn bin with argv; our ends of the pipes go to p. want_stdin: pipe it. */
static int spawn(sh_proc *p, const char *bin, const char *const *argv, int want_stdin)
{
    int in[2] = {-1, -1}, out[2];
    if (want_stdin && pipe2(in, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(out, O_CLOEXEC) < 0)
        return -1;
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        if (want_stdin)
            dup2(in[0], 0);
        else {
            int devnull = open("/dev/null", O_RDONLY);
            dup2(devnull, 0);
        }
        dup2(out[1], 1);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    if (want_stdin)
        close(in[0]);
    close(out[1]);
    p->pid = pid;
    p->to_fd = want_stdin ? in[1] : -1;
    p->from_fd = out[0];
    track(pid);
    return 0;
}

static int read_line(sh_proc *p, int timeout_ms)
{
    size_t n = 0;
    uint64_t deadline = sh_now_ms() + (uint64_t)timeout_ms;
    while (n + 1 < sizeof(p->line)) {
        uint64_t now = sh_now_ms();
        if (now >= deadline)
            return -1;
        struct pollfd pf = {.fd = p->from_fd, .events = POLLIN};
        int r = poll(&pf, 1, (int)(deadline - now));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        char c;
        ssize_t got = read(p->from_fd, &c, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got != 1)
            return -1;
        if (c == '\n')
            break;
        p->line[n++] = c;
    }
    p->line[n] = '\0';
    return 0;
}

static void close_fds(sh_proc *p)
{
    if (p->to_fd >= 0)
        close(p->to_fd);
    if (p->from_fd >= 0)
        close(p->from_fd);
    p->to_fd = p->from_fd = -1;
}

static void kill_proc(sh_proc *p)
{
    if (p->pid > 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
        untrack(p->pid);
        p->pid = 0;
    }
    close_fds(p);
}

/* Wait up to timeout_ms for p to exit: exit status, or -1 (killed). */
static int reap(sh_proc *p, int timeout_ms)
{
    uint64_t deadline = sh_now_ms() + (uint64_t)timeout_ms;
    int st = 0;
    pid_t r;
    while ((r = waitpid(p->pid, &st, WNOHANG)) == 0 && sh_now_ms() < deadline)
        sh_sleep_ms(10);
    if (r != p->pid) {
        fprintf(stderr, "harness: pid %d did not exit within %d ms; killing it\n", (int)p->pid,
                timeout_ms);
        kill_proc(p);
        return -1;
    }
    untrack(p->pid);
    p->pid = 0;
    close_fds(p);
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "harness: child died of signal %d\n", WTERMSIG(st));
        return -1;
    }
    return WEXITSTATUS(st);
}

int sh_master_start(sh_master *m, const char *const *args)
{
    const char *bin = getenv("CRESCENT_MASTER_BIN");
    if (bin == NULL)
        bin = "crescent-master";
    const char *argv[48] = {bin, "--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1",
                            "--rpc_port=0", "--metrics_port=0"};
    int argc = 5;
    for (int i = 0; args != NULL && args[i] != NULL && argc < 47; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    memset(m, 0, sizeof(*m));
    if (spawn(&m->p, bin, argv, 0) < 0) {
        perror("harness: spawning crescent-master");
        return -1;
    }
    unsigned port = 0, mport = 0;
    if (read_line(&m->p, 10000) < 0 ||
        sscanf(m->p.line, "crescent-master listening on 127.0.0.1:%u (metrics 127.0.0.1:%u", &port,
               &mport) != 2) {
        fprintf(stderr, "harness: crescent-master did not start: '%s'\n", m->p.line);
        kill_proc(&m->p);
        return -1;
    }
    m->port = (uint16_t)port;
    m->metrics_port = (uint16_t)mport;
    snprintf(m->addr, sizeof(m->addr), "127.0.0.1:%u", port);
    return 0;
}

int sh_master_start_retry(sh_master *m, const char *const *args, int timeout_ms)
{
    uint64_t deadline = sh_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        if (sh_master_start(m, args) == 0)
            return 0;
        if (sh_now_ms() >= deadline)
            return -1;
        sh_sleep_ms(200);
    }
}

int sh_master_stop(sh_master *m)
{
    if (m->p.pid <= 0)
        return -1;
    kill(m->p.pid, SIGTERM);
    return reap(&m->p, 10000);
}

void sh_master_kill(sh_master *m)
{
    kill_proc(&m->p);
}

int sh_client_start(sh_client *c, const char *master_addr, const char *const *args)
{
    const char *bin = getenv("CRESCENT_STORE_CLIENT_BIN");
    if (bin == NULL)
        bin = "crescent-test-store-client";
    const char *argv[48] = {bin, "--master", master_addr};
    int argc = 3;
    for (int i = 0; args != NULL && args[i] != NULL && argc < 47; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    memset(c, 0, sizeof(*c));
    if (spawn(&c->p, bin, argv, 1) < 0) {
        perror("harness: spawning the store client");
        return -1;
    }
    if (read_line(&c->p, 20000) < 0 || strncmp(c->p.line, "READY ", 6) != 0) {
        fprintf(stderr, "harness: store client did not start: '%s'\n", c->p.line);
        char keep[SH_LINE_MAX];
        snprintf(keep, sizeof(keep), "%s", c->p.line);
        kill_proc(&c->p);
        snprintf(c->p.line, sizeof(c->p.line), "%s", keep);
        return -1;
    }
    snprintf(c->name, sizeof(c->name), "%s", c->p.line + 6);
    return 0;
}

static const char *vcmd(sh_client *c, const char *fmt, va_list ap)
{
    char cmd[SH_LINE_MAX];
    int n = vsnprintf(cmd, sizeof(cmd) - 1, fmt, ap);
    if (n < 0 || n >= (int)sizeof(cmd) - 1)
        n = (int)sizeof(cmd) - 2;
    cmd[n++] = '\n';
    if (c->p.pid <= 0 || write(c->p.to_fd, cmd, (size_t)n) != n || read_line(&c->p, 60000) < 0)
        snprintf(c->p.line, sizeof(c->p.line), "DEAD");
    return c->p.line;
}

const char *sh_cmd(sh_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = vcmd(c, fmt, ap);
    va_end(ap);
    return r;
}

long long sh_rc(sh_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = vcmd(c, fmt, ap);
    va_end(ap);
    if (strcmp(r, "DEAD") == 0)
        return SH_DEAD;
    return strtoll(r, NULL, 10);
}

long long sh_field(const char *line, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(line, name); p != NULL; p = strstr(p + 1, name)) {
        if ((p == line || p[-1] == ' ') && p[n] == '=')
            return strtoll(p + n + 1, NULL, 10);
    }
    return -1;
}

int sh_client_stop(sh_client *c)
{
    if (c->p.pid <= 0)
        return -1;
    if (write(c->p.to_fd, "quit\n", 5) != 5) {
        kill_proc(&c->p);
        return -1;
    }
    return reap(&c->p, 20000);
}

void sh_client_kill(sh_client *c)
{
    kill_proc(&c->p);
}

void sh_kill_all(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] > 0) {
            kill(children[i], SIGKILL);
            waitpid(children[i], NULL, 0);
            children[i] = 0;
        }
    }
}

int sh_http_get(uint16_t port, const char *path, char *out, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    char *buf = malloc(1 << 20);
    if (buf == NULL) {
        close(fd);
        return -1;
    }
    for (;;) {
        ssize_t r = read(fd, buf + got, (1 << 20) - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        if (got == (1 << 20) - 1)
            break;
    }
    close(fd);
    buf[got] = '\0';
    int status = -1;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        status = -1;
    const char *body = strstr(buf, "\r\n\r\n");
    body = body != NULL ? body + 4 : "";
    snprintf(out, cap, "%s", body);
    free(buf);
    return status;
}

double sh_metric(const sh_master *m, const char *name)
{
    static char body[1 << 20];
    if (sh_http_get(m->metrics_port, "/metrics", body, sizeof(body)) != 200)
        return -1;
    size_t n = strlen(name);
    for (char *p = body; p != NULL && *p != '\0';) {
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}

uint16_t sh_closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &l) < 0) {
        if (fd >= 0)
            close(fd);
        return 1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

int sh_proc_spawn(sh_proc *p, const char *bin, const char *const *argv, int want_stdin)
{
    memset(p, 0, sizeof(*p));
    return spawn(p, bin, argv, want_stdin);
}

int sh_proc_read_line(sh_proc *p, int timeout_ms)
{
    return read_line(p, timeout_ms);
}

int sh_proc_signal_stop(sh_proc *p, int sig, int timeout_ms)
{
    if (p->pid <= 0)
        return -1;
    kill(p->pid, sig);
    return reap(p, timeout_ms);
}

void sh_proc_kill(sh_proc *p)
{
    kill_proc(p);
}

int sh_send(sh_client *c, const char *fmt, ...)
{
    char cmd[SH_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof(cmd) - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof(cmd) - 1)
        n = (int)sizeof(cmd) - 2;
    cmd[n++] = '\n';
    return c->p.pid > 0 && write(c->p.to_fd, cmd, (size_t)n) == n ? 0 : -1;
}

const char *sh_recv(sh_client *c, int timeout_ms)
{
    if (c->p.pid <= 0 || read_line(&c->p, timeout_ms) < 0)
        snprintf(c->p.line, sizeof(c->p.line), "DEAD");
    return c->p.line;
}
