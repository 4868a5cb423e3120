/*
 * fake_server.c - see fake_server.h. Connections are served one at a time
 * on the server's thread; a hanging connection is kept until the next one
 * arrives or the server stops, so a client's deadline, not the server,
 * ends the call.
 */
#include "fake_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Read until the request is complete (or 2 s pass). */
static void read_request(fake_server *f, int fd)
{
    char buf[65536];
    size_t got = 0;
    for (int waited = 0; waited < 2000 && !atomic_load(&f->stop);) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, 50);
        if (r <= 0) {
            waited += 50;
            if (!f->http && got > 0)
                return;
            continue;
        }
        ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (n <= 0)
            return;
        got += (size_t)n;
        buf[got] = '\0';
        if (!f->http)
            return;
        char *end = strstr(buf, "\r\n\r\n");
        if (end != NULL) {
            char *cl = strcasestr(buf, "Content-Length:");
            size_t want = cl != NULL ? strtoul(cl + 15, NULL, 10) : 0;
            if (got - (size_t)(end + 4 - buf) >= want)
                return;
        }
        if (got + 1 >= sizeof(buf))
            return;
    }
}

static void *serve(void *arg)
{
    fake_server *f = arg;
    int held = -1;
    while (!atomic_load(&f->stop)) {
        struct pollfd pf = {.fd = f->listen_fd, .events = POLLIN};
        if (poll(&pf, 1, 50) <= 0)
            continue;
        int fd = accept(f->listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        atomic_fetch_add(&f->connections, 1);
        if (held >= 0) {
            close(held);
            held = -1;
        }
        read_request(f, fd);
        pthread_mutex_lock(&f->lock);
        char *reply = NULL;
        size_t len = f->reply_len;
        if (f->reply != NULL) {
            reply = malloc(len);
            memcpy(reply, f->reply, len);
        }
        pthread_mutex_unlock(&f->lock);
        if (reply == NULL) {
            held = fd; /* hang */
            continue;
        }
        size_t off = 0;
        while (off < len) {
            ssize_t n = send(fd, reply + off, len - off, MSG_NOSIGNAL);
            if (n <= 0)
                break;
            off += (size_t)n;
        }
        free(reply);
        shutdown(fd, SHUT_WR);
        close(fd);
    }
    if (held >= 0)
        close(held);
    return NULL;
}

int fake_server_start(fake_server *f, bool http)
{
    memset(f, 0, sizeof(*f));
    f->http = http;
    pthread_mutex_init(&f->lock, NULL);
    f->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (f->listen_fd < 0 || bind(f->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(f->listen_fd, 16) != 0 ||
        getsockname(f->listen_fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    f->port = ntohs(a.sin_port);
    snprintf(f->endpoint, sizeof(f->endpoint), "127.0.0.1:%u", (unsigned)f->port);
    return pthread_create(&f->thread, NULL, serve, f) == 0 ? 0 : -1;
}

void fake_server_reply(fake_server *f, const void *reply, size_t len)
{
    pthread_mutex_lock(&f->lock);
    free(f->reply);
    f->reply = NULL;
    if (reply != NULL) {
        f->reply = malloc(len > 0 ? len : 1);
        memcpy(f->reply, reply, len);
    }
    f->reply_len = len;
    pthread_mutex_unlock(&f->lock);
}

void fake_server_http(fake_server *f, int status, const char *body, size_t len)
{
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, len);
    char *all = malloc((size_t)n + len);
    memcpy(all, head, (size_t)n);
    memcpy(all + n, body, len);
    fake_server_reply(f, all, (size_t)n + len);
    free(all);
}

void fake_server_stop(fake_server *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->thread, NULL);
    close(f->listen_fd);
    free(f->reply);
    pthread_mutex_destroy(&f->lock);
}
