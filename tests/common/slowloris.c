/*
 * slowloris.c - see slowloris.h.
 */
#include "slowloris.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static int open_conn(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The start of a request whose head (or body) never ends. */
static int begin(const sl_attack *a, int fd)
{
    static const char head[] = "GET /health HTTP/1.1\r\nHost: x\r\n";
    static const char put[] = "PUT /metadata?key=slow HTTP/1.1\r\nHost: x\r\n"
                              "Content-Length: 1000000\r\n\r\n";
    const char *s = a->body ? put : head;
    size_t n = strlen(s);
    return send(fd, s, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

static void *trickle(void *arg)
{
    sl_attack *a = arg;
    while (!atomic_load(&a->stop)) {
        for (size_t i = 0; i < a->n && !atomic_load(&a->stop); i++) {
            char c = a->body ? 'x' : 'X';
            if (a->fds[i] >= 0 && send(a->fds[i], &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
                continue;
            if (a->fds[i] >= 0 && errno == EAGAIN)
                continue;
            if (a->fds[i] >= 0)
                close(a->fds[i]);
            a->fds[i] = open_conn(a->port);
            if (a->fds[i] >= 0 && begin(a, a->fds[i]) != 0) {
                close(a->fds[i]);
                a->fds[i] = -1;
            }
            atomic_fetch_add(&a->reopened, 1);
        }
        struct timespec ts = {0, (long)a->interval_ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int sl_start(sl_attack *a, uint16_t port, size_t n, int interval_ms, bool body)
{
    memset(a, 0, sizeof(*a));
    a->port = port;
    a->n = n;
    a->interval_ms = interval_ms;
    a->body = body;
    a->fds = malloc(n * sizeof(*a->fds));
    if (a->fds == NULL)
        return -1;
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        a->fds[i] = open_conn(port);
        if (a->fds[i] >= 0 && begin(a, a->fds[i]) == 0)
            ok++;
    }
    a->running = pthread_create(&a->tid, NULL, trickle, a) == 0;
    return ok == n && a->running ? 0 : -1;
}

void sl_stop(sl_attack *a)
{
    atomic_store(&a->stop, true);
    if (a->running)
        pthread_join(a->tid, NULL);
    a->running = false;
    for (size_t i = 0; a->fds != NULL && i < a->n; i++)
        if (a->fds[i] >= 0)
            close(a->fds[i]);
    free(a->fds);
    a->fds = NULL;
}

int sl_get(uint16_t port, const char *path, int timeout_ms)
{
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    int fd = -1;
    while (fd < 0 && now_ms() < deadline) {
        fd = open_conn(port);
        if (fd < 0) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    if (fd < 0)
        return -1;
    char req[512];
    int len =
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    if (send(fd, req, (size_t)len, MSG_NOSIGNAL) != len) {
        close(fd);
        return -1;
    }
    char buf[4096];
    size_t got = 0;
    int status = -1;
    while (got < sizeof(buf) - 1) {
        uint64_t now = now_ms();
        if (now >= deadline)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(deadline - now)) <= 0)
            break;
        ssize_t r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
        buf[got] = '\0';
        if (strstr(buf, "\r\n\r\n") != NULL) {
            if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
                status = -1;
            break;
        }
    }
    close(fd);
    return status;
}
