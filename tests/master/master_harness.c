/* master_harness.c - see master_harness.h. */
#include "master_harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHILDREN 32
#define MAX_ARGS     40

static pid_t g_children[MAX_CHILDREN];

static void track(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (g_children[i] == 0) {
            g_children[i] = pid;
            return;
        }
    }
    fprintf(stderr, "harness: too many children\n");
}

static void untrack(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (g_children[i] == pid)
            g_children[i] = 0;
}

void mh_kill_all(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (g_children[i] > 0) {
            kill(g_children[i], SIGKILL);
            waitpid(g_children[i], NULL, 0);
            g_children[i] = 0;
        }
    }
}

uint64_t mh_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void mh_sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

const char *mh_master_bin(void)
{
    const char *bin = getenv("CRESCENT_MASTER_BIN");
    return bin != NULL ? bin : "crescent-master";
}

/*
 * Fork and exec argv with stdin from *to_fd (if to_fd) and stdout to *from_fd
 * (if from_fd); stderr to err_fd if >= 0, else inherited.
 */
static pid_t spawn(const char *const *argv, int *to_fd, int *from_fd, int err_fd)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if ((to_fd != NULL && pipe2(in, O_CLOEXEC) < 0) ||
        (from_fd != NULL && pipe2(out, O_CLOEXEC) < 0))
        return -1;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        if (to_fd != NULL)
            dup2(in[0], 0);
        else {
            int null = open("/dev/null", O_RDONLY);
            dup2(null, 0);
        }
        if (from_fd != NULL)
            dup2(out[1], 1);
        if (err_fd >= 0)
            dup2(err_fd, 2);
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "harness: cannot exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (to_fd != NULL) {
        close(in[0]);
        *to_fd = in[1];
    }
    if (from_fd != NULL) {
        close(out[1]);
        *from_fd = out[0];
    }
    if (pid < 0)
        return -1;
    track(pid);
    return pid;
}

/* Read one line from fd into buf (without '\n'); -1 on EOF or timeout. */
static int read_line(int fd, char *buf, size_t len, int timeout_ms)
{
    size_t n = 0;
    uint64_t deadline = mh_now_ms() + (uint64_t)timeout_ms;
    while (n + 1 < len) {
        uint64_t now = mh_now_ms();
        if (now >= deadline)
            break;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int pr = poll(&pf, 1, (int)(deadline - now));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break;
        char c;
        ssize_t r = read(fd, &c, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r != 1)
            break;
        if (c == '\n') {
            buf[n] = '\0';
            return 0;
        }
        buf[n++] = c;
    }
    buf[n] = '\0';
    return -1;
}

/* Wait up to timeout_ms for pid; its exit status, 128+signal, or -1 (still running). */
static int wait_exit(pid_t pid, int timeout_ms)
{
    uint64_t deadline = mh_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        int st = 0;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            untrack(pid);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (r < 0 && errno != EINTR)
            return -1;
        if (mh_now_ms() >= deadline)
            return -1;
        mh_sleep_ms(10);
    }
}

static void reap_killed(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    untrack(pid);
}

/* --- master ------------------------------------------------------------------ */

int mh_master_start(mh_master *m, const char *const *args)
{
    return mh_master_start_err(m, args, -1);
}

int mh_master_start_err(mh_master *m, const char *const *args, int err_fd)
{
    memset(m, 0, sizeof(*m));
    m->out_fd = -1;
    const char *argv[MAX_ARGS] = {mh_master_bin(), "--rpc_address=127.0.0.1",
                                  "--metrics_host=127.0.0.1", "--rpc_port=0", "--metrics_port=0"};
    int n = 5;
    for (int i = 0; args != NULL && args[i] != NULL && n < MAX_ARGS - 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    m->pid = spawn(argv, NULL, &m->out_fd, err_fd);
    if (m->pid < 0) {
        fprintf(stderr, "harness: cannot start %s\n", argv[0]);
        return -1;
    }
    char line[512], host[64], mhost[64];
    unsigned port = 0, mport = 0;
    if (read_line(m->out_fd, line, sizeof(line), 15000) < 0 ||
        sscanf(line, "crescent-master listening on %63[^:]:%u (metrics %63[^:]:%u", host, &port,
               mhost, &mport) != 4 ||
        port == 0 || port > 65535 || mport > 65535) {
        fprintf(stderr, "harness: master did not start: '%s'\n", line);
        mh_master_kill(m);
        return -1;
    }
    m->port = (uint16_t)port;
    m->metrics_port = (uint16_t)mport;
    snprintf(m->addr, sizeof(m->addr), "127.0.0.1:%u", port);
    return 0;
}

int mh_master_stop(mh_master *m)
{
    if (m->pid <= 0)
        return -1;
    kill(m->pid, SIGTERM);
    int st = wait_exit(m->pid, 10000);
    if (st < 0)
        reap_killed(m->pid);
    if (m->out_fd >= 0)
        close(m->out_fd);
    m->out_fd = -1;
    m->pid = 0;
    return st >= 128 ? -1 : st;
}

void mh_master_kill(mh_master *m)
{
    if (m->pid > 0)
        reap_killed(m->pid);
    if (m->out_fd >= 0)
        close(m->out_fd);
    m->out_fd = -1;
    m->pid = 0;
}

/* --- clients ------------------------------------------------------------------ */

int mh_client_start(mh_client *c, const char *addr)
{
    memset(c, 0, sizeof(*c));
    c->to_fd = c->from_fd = -1;
    c->line = malloc(MH_LINE_MAX);
    if (c->line == NULL)
        return -1;
    c->line[0] = '\0';
    const char *bin = getenv("CRESCENT_MASTER_CLIENT_BIN");
    const char *argv[] = {bin != NULL ? bin : "crescent-test-master-client", addr, NULL};
    c->pid = spawn(argv, &c->to_fd, &c->from_fd, -1);
    if (c->pid < 0)
        return -1;
    if (read_line(c->from_fd, c->line, MH_LINE_MAX, 15000) < 0 ||
        strncmp(c->line, "READY ", 6) != 0) {
        fprintf(stderr, "harness: client did not start: '%s'\n", c->line);
        mh_client_kill(c);
        return -1;
    }
    snprintf(c->id, sizeof(c->id), "%s", c->line + 6);
    return 0;
}

static const char *vcmd(mh_client *c, const char *fmt, va_list ap)
{
    size_t cap = 64 * 1024;
    char *cmd = malloc(cap);
    if (cmd == NULL || c->pid <= 0) {
        free(cmd);
        snprintf(c->line, MH_LINE_MAX, "DEAD");
        return c->line;
    }
    int n = vsnprintf(cmd, cap - 1, fmt, ap);
    if (n < 0 || (size_t)n >= cap - 1)
        n = 0;
    cmd[n++] = '\n';
    ssize_t w = write(c->to_fd, cmd, (size_t)n);
    free(cmd);
    if (w != n || read_line(c->from_fd, c->line, MH_LINE_MAX, 30000) < 0)
        snprintf(c->line, MH_LINE_MAX, "DEAD");
    return c->line;
}

const char *mh_cmd(mh_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = vcmd(c, fmt, ap);
    va_end(ap);
    return r;
}

int mh_cmd_st(mh_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = vcmd(c, fmt, ap);
    va_end(ap);
    return mh_status(r);
}

int mh_client_stop(mh_client *c)
{
    int st = -1;
    if (c->pid > 0) {
        if (write(c->to_fd, "quit\n", 5) == 5)
            st = wait_exit(c->pid, 10000);
        if (st < 0)
            reap_killed(c->pid);
    }
    if (c->to_fd >= 0)
        close(c->to_fd);
    if (c->from_fd >= 0)
        close(c->from_fd);
    c->to_fd = c->from_fd = -1;
    c->pid = 0;
    free(c->line);
    c->line = NULL;
    return st >= 128 ? -1 : st;
}

void mh_client_kill(mh_client *c)
{
    if (c->pid > 0)
        reap_killed(c->pid);
    if (c->to_fd >= 0)
        close(c->to_fd);
    if (c->from_fd >= 0)
        close(c->from_fd);
    c->to_fd = c->from_fd = -1;
    c->pid = 0;
    free(c->line);
    c->line = NULL;
}

/* --- reply parsing ------------------------------------------------------------ */

int mh_status(const char *line)
{
    if (line == NULL || strncmp(line, "DEAD", 4) == 0)
        return -99999;
    return atoi(line);
}

const char *mh_field(const char *line, const char *key, char *buf, size_t len)
{
    char pat[64];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *p = strstr(line, pat);
    if (p == NULL)
        return NULL;
    p += strlen(pat);
    size_t n = strcspn(p, " ");
    if (n >= len)
        n = len - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

int mh_list_has(const char *list, const char *item)
{
    size_t il = strlen(item);
    for (const char *p = list; p != NULL && *p != '\0';) {
        size_t n = strcspn(p, ",");
        if (n == il && strncmp(p, item, il) == 0)
            return 1;
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

int mh_list_len(const char *list)
{
    if (list == NULL || *list == '\0')
        return 0;
    int n = 1;
    for (const char *p = list; *p != '\0'; p++)
        n += *p == ',';
    return n;
}

/* --- raw sockets and HTTP ----------------------------------------------------- */

int mh_connect_raw(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int mh_http_get(uint16_t port, const char *path, char **body)
{
    *body = NULL;
    int fd = mh_connect_raw(port);
    if (fd < 0)
        return -1;
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (buf == NULL)
            break;
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL)
                break;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (buf == NULL)
        return -1;
    buf[len] = '\0';
    int code = -1;
    char *sep = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1 || sep == NULL) {
        free(buf);
        return -1;
    }
    memmove(buf, sep + 4, len - (size_t)(sep + 4 - buf) + 1);
    *body = buf;
    return code;
}

double mh_prom_value(const char *text, const char *sample)
{
    size_t sl = strlen(sample);
    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, sample, sl) == 0 && p[sl] == ' ')
            return strtod(p + sl + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}

/* --- run to completion ----------------------------------------------------------- */

/* Read what fd has into buf (truncating); false at EOF or error. */
static bool drain(int fd, char *buf, size_t len, size_t *used)
{
    char tmp[4096];
    ssize_t r = read(fd, tmp, sizeof(tmp));
    if (r < 0 && errno == EINTR)
        return true;
    if (r <= 0)
        return false;
    size_t room = len - 1 - *used;
    size_t k = (size_t)r < room ? (size_t)r : room;
    memcpy(buf + *used, tmp, k);
    *used += k;
    buf[*used] = '\0';
    return true;
}

int mh_run(const char *const *argv, char *out, size_t out_len, char *err, size_t err_len)
{
    int errp[2];
    out[0] = err[0] = '\0';
    if (pipe2(errp, O_CLOEXEC) < 0)
        return -1;
    int out_fd = -1;
    pid_t pid = spawn(argv, NULL, &out_fd, errp[1]);
    close(errp[1]);
    if (pid < 0) {
        close(errp[0]);
        return -1;
    }
    size_t used[2] = {0, 0};
    char *bufs[2] = {out, err};
    size_t lens[2] = {out_len, err_len};
    struct pollfd pf[2] = {{.fd = out_fd, .events = POLLIN}, {.fd = errp[0], .events = POLLIN}};
    uint64_t deadline = mh_now_ms() + 10000;
    while ((pf[0].fd >= 0 || pf[1].fd >= 0) && mh_now_ms() < deadline) {
        if (poll(pf, 2, 100) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd >= 0 && pf[i].revents != 0 &&
                !drain(pf[i].fd, bufs[i], lens[i], &used[i])) {
                close(pf[i].fd);
                pf[i].fd = -1;
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (pf[i].fd >= 0)
            close(pf[i].fd);
    int st = wait_exit(pid, 2000);
    if (st < 0)
        reap_killed(pid);
    return st >= 128 ? -1 : st;
}
