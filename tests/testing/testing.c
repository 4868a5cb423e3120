/*
 * testing.c - see testing.h.
 */
#include "testing.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/time.h>
#include <unistd.h>

const char *tt_bin(const char *env, const char *fallback)
{
    const char *v = getenv(env);
    return v != NULL && v[0] != '\0' ? v : fallback;
}

void tt_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("skipped: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    ct_proc_kill_all();
    exit(TT_SKIP);
}

void tt_require_exe(const char *path)
{
    if (access(path, X_OK) != 0)
        tt_skip("%s is not installed (scripts/install-deps.sh installs it)", path);
}

int tt_teardown(void **state)
{
    (void)state;
    ct_proc_kill_all();
    return 0;
}

/* --- helper programs ------------------------------------------------------- */

static void child_release(tt_child *c)
{
    if (c->line != c->failed)
        free(c->line);
    c->line = NULL;
    c->line_cap = 0;
}

/* Keep what a child that did not start printed, in storage of c's own. */
static int start_failed(tt_child *c)
{
    snprintf(c->failed, sizeof(c->failed), "%s", c->line);
    free(c->line);
    c->line = c->failed;
    c->line_cap = sizeof(c->failed);
    return -1;
}

int tt_child_start(tt_child *c, const char *const *argv, size_t line_cap, int ready_ms)
{
    memset(c, 0, sizeof(*c));
    ct_proc_init(&c->proc);
    c->line = malloc(line_cap);
    if (c->line == NULL)
        return -1;
    c->line_cap = line_cap;
    c->line[0] = '\0';
    ct_spawn_opts o = {.pipe_stdin = true, .pipe_stdout = true};
    if (ct_proc_spawn(&c->proc, argv, &o) < 0) {
        fprintf(stderr, "testing: cannot start %s: %s\n", argv[0], strerror(errno));
        snprintf(c->line, c->line_cap, "SPAWN FAILED");
        return start_failed(c);
    }
    if (ct_proc_read_line(&c->proc, c->line, c->line_cap, ready_ms) < 0 ||
        strncmp(c->line, "READY ", 6) != 0) {
        fprintf(stderr, "testing: %s did not start: '%s'\n", argv[0], c->line);
        ct_proc_kill(&c->proc);
        return start_failed(c); /* c->line: what it printed */
    }
    snprintf(c->name, sizeof(c->name), "%s", c->line + 6);
    return 0;
}

const char *tt_child_vcmd(tt_child *c, int timeout_ms, const char *fmt, va_list ap)
{
    static const char dead[] = "DEAD";
    if (c->line == NULL)
        return dead;
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    char *cmd = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (cmd == NULL) {
        snprintf(c->line, c->line_cap, "%s", dead);
        return c->line;
    }
    vsnprintf(cmd, (size_t)n + 1, fmt, ap);
    if (c->proc.pid <= 0 || ct_proc_cmd(&c->proc, cmd, c->line, c->line_cap, timeout_ms) < 0)
        snprintf(c->line, c->line_cap, "%s", dead);
    free(cmd);
    return c->line;
}

const char *tt_child_cmd(tt_child *c, int timeout_ms, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = tt_child_vcmd(c, timeout_ms, fmt, ap);
    va_end(ap);
    return r;
}

int tt_child_stop(tt_child *c, int timeout_ms)
{
    int st = -1;
    if (c->proc.pid > 0) {
        if (ct_proc_send(&c->proc, "quit") == 0)
            st = ct_proc_stop(&c->proc, 0, timeout_ms);
        else
            ct_proc_kill(&c->proc);
    }
    child_release(c);
    return st >= 128 ? -1 : st;
}

void tt_child_kill(tt_child *c)
{
    ct_proc_kill(&c->proc);
    child_release(c);
}

int tt_stop_process(pid_t pid)
{
    return ct_stop_process(pid);
}

/* --- plain sockets --------------------------------------------------------- */

int tt_connect_abstract(const char *prefix)
{
    FILE *f = fopen("/proc/net/unix", "r");
    if (f == NULL)
        return -1;
    char line[512], path[108] = "";
    while (path[0] == '\0' && fgets(line, sizeof(line), f) != NULL) {
        char *at = strstr(line, prefix);
        if (at != NULL) {
            at[strcspn(at, " \n")] = '\0';
            snprintf(path, sizeof(path), "%s", at);
        }
    }
    fclose(f);
    if (path[0] == '\0')
        return -1;
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    memcpy(sa.sun_path, path, n);
    sa.sun_path[0] = '\0'; /* '@' marks the abstract namespace */
    if (connect(s, (struct sockaddr *)&sa,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) != 0) {
        close(s);
        return -1;
    }
    struct timeval tv = {5, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return s;
}

int tt_connect(const char *host, uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, host != NULL ? host : "127.0.0.1", &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int tt_http_get(const char *host, uint16_t port, const char *path, char **body)
{
    *body = NULL;
    int fd = tt_connect(host, port);
    if (fd < 0)
        return -1;
    char req[1024];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n",
                     path, host != NULL ? host : "127.0.0.1");
    if (n < 0 || n >= (int)sizeof(req) || write(fd, req, (size_t)n) != n) {
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
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
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

double tt_prom_value(const char *text, const char *sample)
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
