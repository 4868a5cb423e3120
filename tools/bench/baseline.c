/*
 * baseline.c - reference measurements the engine is compared against.
 *
 *   socket: the simplest possible process-to-process copy over loopback TCP.
 *           We spawn "<subcmd> --role sink" exactly like the engine target
 *           (same child mechanism), connect one stream and send() 1 MiB
 *           blocks from a 64 MiB area in a blocking loop; the sink recv()s
 *           them into its own 64 MiB area. The clock stops when the sink has
 *           acknowledged the byte count, so nothing is left in socket buffers.
 *           With N streams: N sinks and N sending threads at once, each with its
 *           own 64 MiB area (cache-cold, like real values), one clock for all.
 *           Fresh pages (role "sink-fresh"): the sink receives into never-touched
 *           pages of a 4 GiB memfd mapped MAP_NORESERVE, front to back (a hole is
 *           punched over all of it if a run wraps), so every byte lands on a page
 *           the kernel commits on that write: the floor of a write into a lazily
 *           committed store segment (design 2.9), which the warm streams above
 *           are not.
 *   memcpy: one thread copying 1 MiB blocks between two 64 MiB areas.
 *   ping-pong: the floor of a small READ: one loopback connection to a
 *           "<subcmd> --role echo" child, a 32-byte request answered by a
 *           reply of `size` bytes, one round trip at a time, blocking
 *           send()/recv() on both sides with TCP_NODELAY. Latency per round
 *           trip into a histogram (p50/p99), round trips per second.
 *
 * Design: no tuning (default socket buffers, no TCP_NODELAY, no zero-copy),
 * because the point is "what does a naive copy cost on this machine".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"

static uint8_t *alloc_area(void)
{
    uint8_t *p = aligned_alloc(4096, CB_BASELINE_AREA);
    if (p != NULL)
        memset(p, 0x42, CB_BASELINE_AREA); /* fault the pages in before timing */
    return p;
}

static bool keep_going(uint64_t start_ns, double seconds, uint64_t total, uint64_t done)
{
    if (total != 0 && done >= total)
        return false;
    return (double)(cb_now_ns() - start_ns) < seconds * 1e9;
}

static int send_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int recv_all(int fd, uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The streams report ready (connected, or failed) and wait until all have. */
typedef struct stream_start {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned ready;
    bool go;
} stream_start;

static void stream_ready_wait(stream_start *s)
{
    pthread_mutex_lock(&s->mu);
    s->ready++;
    pthread_cond_broadcast(&s->cv);
    while (!s->go)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* One stream of the socket baseline, on its own thread: a sink child, a connection, 1 MiB
 * sends cycling over its own 64 MiB area until the deadline, the sink's acknowledgement. */
typedef struct socket_stream {
    const char *subcmd;
    const char *sink_role; /* "sink" or "sink-fresh" */
    double seconds;
    uint64_t total;
    struct stream_start *start; /* every stream connected: the clock starts for all */
    uint64_t sent;
    int rc;
    char err[192];
} socket_stream;

static void *socket_stream_main(void *arg)
{
    socket_stream *st = arg;
    int fd = -1;
    uint8_t *area = NULL;
    cb_child child = CB_CHILD_INIT;
    char *argv[] = {CB_PROG, (char *)st->subcmd, "--role", (char *)st->sink_role, NULL};
    char line[128], why[160];
    bool started = false;

    st->rc = -1;
    if (cb_child_spawn(&child, argv) < 0) {
        snprintf(st->err, sizeof(st->err), "socket baseline: cannot start the sink: %s",
                 strerror(errno));
        goto wait_others;
    }
    unsigned port = 0;
    if (cb_child_read_line(&child, line, sizeof(line), 30000) < 0 ||
        sscanf(line, "READY port=%u", &port) != 1 || port == 0 || port > 65535) {
        snprintf(st->err, sizeof(st->err), "socket baseline: the sink did not report READY");
        goto kill_child;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(st->err, sizeof(st->err), "socket baseline: socket: %s", strerror(errno));
        goto kill_child;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        snprintf(st->err, sizeof(st->err), "socket baseline: connect to 127.0.0.1:%u: %s", port,
                 strerror(errno));
        goto close_socket;
    }
    area = alloc_area();
    if (area == NULL) {
        snprintf(st->err, sizeof(st->err), "socket baseline: out of memory");
        goto close_socket;
    }
    stream_ready_wait(st->start);
    started = true;
    uint64_t sent = 0, off = 0;
    uint64_t start = cb_now_ns();
    while (keep_going(start, st->seconds, st->total, sent)) {
        if (send_all(fd, area + off, CB_BASELINE_BLOCK) < 0) {
            snprintf(st->err, sizeof(st->err), "socket baseline: send: %s", strerror(errno));
            goto free_area;
        }
        sent += CB_BASELINE_BLOCK;
        off = (off + CB_BASELINE_BLOCK) % CB_BASELINE_AREA;
    }
    shutdown(fd, SHUT_WR);
    uint64_t acked = 0;
    if (recv_all(fd, (uint8_t *)&acked, sizeof(acked)) < 0 || acked != sent) {
        snprintf(st->err, sizeof(st->err),
                 "socket baseline: sink acknowledged %" PRIu64 " of %" PRIu64 " bytes", acked,
                 sent);
        goto free_area;
    }
    st->sent = sent;
    st->rc = 0;

free_area:
    free(area);
close_socket:
    close(fd);
kill_child:
    if (st->rc == 0) {
        if (cb_child_stop(&child, 10000, why, sizeof(why)) != 0) {
            snprintf(st->err, sizeof(st->err), "socket baseline: the sink %s", why);
            st->rc = -1;
        }
    } else {
        cb_child_kill(&child);
    }
wait_others:
    if (!started)
        stream_ready_wait(st->start); /* counted as ready: the others do not wait for it */
    return NULL;
}

static int socket_streams(const char *subcmd, const char *sink_role, unsigned streams,
                          double seconds, uint64_t total, cb_measure *out, char *err,
                          size_t err_len)
{
    if (streams < 1 || streams > 8) {
        snprintf(err, err_len, "socket baseline: %u streams (1..8)", streams);
        return -1;
    }
    socket_stream st[8];
    pthread_t tid[8];
    stream_start start = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false};
    unsigned started = 0;
    for (; started < streams; started++) {
        st[started] =
            (socket_stream){subcmd, sink_role, seconds, total / streams, &start, 0, -1, ""};
        if (pthread_create(&tid[started], NULL, socket_stream_main, &st[started]) != 0)
            break;
    }
    pthread_mutex_lock(&start.mu);
    while (start.ready < started)
        pthread_cond_wait(&start.cv, &start.mu);
    start.go = true;
    pthread_cond_broadcast(&start.cv);
    pthread_mutex_unlock(&start.mu);
    uint64_t begin = cb_now_ns();
    for (unsigned i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    uint64_t end = cb_now_ns();
    int rc = 0;
    if (started < streams) {
        snprintf(err, err_len, "socket baseline: cannot start stream %u", started);
        rc = -1;
    }
    uint64_t bytes = 0;
    for (unsigned i = 0; i < started; i++) {
        if (st[i].rc != 0 && rc == 0) {
            snprintf(err, err_len, "%s", st[i].err);
            rc = -1;
        }
        bytes += st[i].sent;
    }
    if (rc == 0) {
        out->bytes = bytes;
        out->seconds = (double)(end - begin) / 1e9;
        out->gbps = (double)bytes / (double)(end - begin);
    }
    return rc;
}

int cb_baseline_socket_streams(const char *subcmd, unsigned streams, double seconds, uint64_t total,
                               cb_measure *out, char *err, size_t err_len)
{
    return socket_streams(subcmd, "sink", streams, seconds, total, out, err, err_len);
}

int cb_baseline_socket(const char *subcmd, double seconds, uint64_t total, cb_measure *out,
                       char *err, size_t err_len)
{
    return socket_streams(subcmd, "sink", 1, seconds, total, out, err, err_len);
}

int cb_baseline_socket_fresh(const char *subcmd, unsigned streams, double seconds, uint64_t total,
                             cb_measure *out, char *err, size_t err_len)
{
    return socket_streams(subcmd, "sink-fresh", streams, seconds, total, out, err, err_len);
}

int cb_baseline_memcpy(double seconds, uint64_t total, cb_measure *out, char *err, size_t err_len)
{
    uint8_t *src = alloc_area();
    uint8_t *dst = alloc_area();
    if (src == NULL || dst == NULL) {
        snprintf(err, err_len, "memcpy baseline: out of memory");
        free(src);
        free(dst);
        return -1;
    }
    uint64_t copied = 0, off = 0;
    uint64_t start = cb_now_ns();
    while (keep_going(start, seconds, total, copied)) {
        memcpy(dst + off, src + off, CB_BASELINE_BLOCK);
        copied += CB_BASELINE_BLOCK;
        off = (off + CB_BASELINE_BLOCK) % CB_BASELINE_AREA;
    }
    uint64_t end = cb_now_ns();
    /* Observe the destination so the copies cannot be optimised away. */
    volatile uint8_t sink = dst[copied % CB_BASELINE_AREA];
    (void)sink;
    out->bytes = copied;
    out->seconds = (double)(end - start) / 1e9;
    out->gbps = (double)copied / (double)(end - start);
    free(src);
    free(dst);
    return 0;
}

/* Wait for a connection on lfd, giving up when stdin closes (parent gone). */
static int accept_or_orphaned(int lfd)
{
    struct pollfd pfd[2] = {{.fd = lfd, .events = POLLIN}, {.fd = STDIN_FILENO, .events = POLLIN}};
    for (;;) {
        int pr = poll(pfd, 2, -1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return -1;
        if (pfd[0].revents & POLLIN)
            return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (pfd[1].revents != 0) {
            char c;
            if (read(STDIN_FILENO, &c, 1) <= 0)
                return -1;
        }
    }
}

/* The fresh sink's area: a memfd of CB_FRESH_AREA bytes, mapped without reserving memory;
 * nothing is written before the stream, so each page is committed by the recv that fills it. */
static uint8_t *map_fresh_area(int *memfd)
{
    int fd = memfd_create("crescent-bench-fresh-sink", MFD_CLOEXEC);
    if (fd < 0)
        return NULL;
    if (ftruncate(fd, (off_t)CB_FRESH_AREA) < 0) {
        close(fd);
        return NULL;
    }
    void *p = mmap(NULL, CB_FRESH_AREA, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    *memfd = fd;
    return p;
}

int cb_sink_main(bool fresh)
{
    int rc = CB_EXIT_FAIL;
    int memfd = -1;
    uint64_t area_size = fresh ? CB_FRESH_AREA : CB_BASELINE_AREA;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) {
        fprintf(stderr, CB_PROG " sink: socket: %s\n", strerror(errno));
        return CB_EXIT_FAIL;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 1) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0) {
        fprintf(stderr, CB_PROG " sink: listen: %s\n", strerror(errno));
        goto close_listener;
    }
    uint8_t *area = fresh ? map_fresh_area(&memfd) : alloc_area();
    if (area == NULL) {
        fprintf(stderr, CB_PROG " sink: cannot make its %s area: %s\n",
                fresh ? "fresh (memfd)" : "64 MiB", strerror(errno));
        goto close_listener;
    }
    printf("READY port=%u\n", (unsigned)ntohs(sa.sin_port));
    fflush(stdout);

    int fd = accept_or_orphaned(lfd);
    if (fd < 0)
        goto free_area;
    uint64_t received = 0, off = 0, got = 0;
    for (;;) {
        ssize_t n = recv(fd, area + off + got, CB_BASELINE_BLOCK - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fprintf(stderr, CB_PROG " sink: recv: %s\n", strerror(errno));
            goto close_conn;
        }
        if (n == 0)
            break;
        received += (uint64_t)n;
        got += (uint64_t)n;
        if (got == CB_BASELINE_BLOCK) {
            got = 0;
            off = (off + CB_BASELINE_BLOCK) % area_size;
            /* Wrapped: give every page back so the next pass writes fresh ones again. */
            if (fresh && off == 0 &&
                fallocate(memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                          (off_t)CB_FRESH_AREA) < 0) {
                fprintf(stderr, CB_PROG " sink: punching the fresh area: %s\n", strerror(errno));
                goto close_conn;
            }
        }
    }
    if (send_all(fd, (const uint8_t *)&received, sizeof(received)) < 0) {
        fprintf(stderr, CB_PROG " sink: send: %s\n", strerror(errno));
        goto close_conn;
    }
    /* Stay until the parent closes our stdin, like the engine target. */
    cb_wait_for_eof(STDIN_FILENO);
    rc = CB_EXIT_OK;

close_conn:
    close(fd);
free_area:
    if (fresh) {
        munmap(area, CB_FRESH_AREA);
        close(memfd);
    } else {
        free(area);
    }
close_listener:
    close(lfd);
    return rc;
}

#define PING_REQUEST 32

/* Spawn "<subcmd> --role echo" and connect to it (TCP_NODELAY). */
static int echo_connect(const char *subcmd, cb_child *child, int *fd_out, char *err, size_t err_len)
{
    char *argv[] = {CB_PROG, (char *)subcmd, "--role", "echo", NULL};
    char line[128];
    if (cb_child_spawn(child, argv) < 0) {
        snprintf(err, err_len, "ping-pong baseline: cannot start the echo child: %s",
                 strerror(errno));
        return -1;
    }
    unsigned port = 0;
    if (cb_child_read_line(child, line, sizeof(line), 30000) < 0 ||
        sscanf(line, "READY port=%u", &port) != 1 || port == 0 || port > 65535) {
        snprintf(err, err_len, "ping-pong baseline: the echo child did not report READY");
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, err_len, "ping-pong baseline: socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        snprintf(err, err_len, "ping-pong baseline: connect: %s", strerror(errno));
        close(fd);
        return -1;
    }
    *fd_out = fd;
    return 0;
}

int cb_baseline_pingpong(const char *subcmd, uint32_t size, double seconds, cb_pingpong *out,
                         char *err, size_t err_len)
{
    int rc = -1, fd = -1;
    cb_child child = CB_CHILD_INIT;
    char why[160];
    uint8_t req[PING_REQUEST];
    uint8_t *reply = malloc(size ? size : 1);
    cb_hist *h = calloc(1, sizeof(*h));
    if (reply == NULL || h == NULL) {
        snprintf(err, err_len, "ping-pong baseline: out of memory");
        goto out;
    }
    if (echo_connect(subcmd, &child, &fd, err, err_len) < 0)
        goto out;
    memset(req, 0, sizeof(req));
    memcpy(req, &size, sizeof(size)); /* the reply size the echo child sends */
    uint64_t trips = 0, start = cb_now_ns(), end = start;
    uint64_t stop = start + (uint64_t)(seconds * 1e9);
    while (end < stop) {
        uint64_t t0 = cb_now_ns();
        if (send_all(fd, req, sizeof(req)) < 0 || recv_all(fd, reply, size) < 0) {
            snprintf(err, err_len, "ping-pong baseline: round trip %" PRIu64 ": %s", trips,
                     strerror(errno));
            goto out;
        }
        end = cb_now_ns();
        cb_hist_add(h, end - t0, 1);
        trips++;
    }
    out->size = size;
    out->round_trips = trips;
    out->seconds = (double)(end - start) / 1e9;
    out->per_s = out->seconds > 0 ? (double)trips / out->seconds : 0;
    out->p50_us = (double)cb_hist_quantile(h, 0.50) / 1e3;
    out->p99_us = (double)cb_hist_quantile(h, 0.99) / 1e3;
    rc = 0;
out:
    if (fd >= 0)
        close(fd); /* the echo child sees EOF and waits for its stdin to close */
    if (rc == 0) {
        if (cb_child_stop(&child, 10000, why, sizeof(why)) != 0) {
            snprintf(err, err_len, "ping-pong baseline: the echo child %s", why);
            rc = -1;
        }
    } else {
        cb_child_kill(&child);
    }
    free(reply);
    free(h);
    return rc;
}

int cb_echo_main(void)
{
    int rc = CB_EXIT_FAIL;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) {
        fprintf(stderr, CB_PROG " echo: socket: %s\n", strerror(errno));
        return CB_EXIT_FAIL;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    uint8_t *reply = NULL;
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 1) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0) {
        fprintf(stderr, CB_PROG " echo: listen: %s\n", strerror(errno));
        goto close_listener;
    }
    printf("READY port=%u\n", (unsigned)ntohs(sa.sin_port));
    fflush(stdout);
    int fd = accept_or_orphaned(lfd);
    if (fd < 0)
        goto close_listener;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint32_t have = 0;
    uint8_t req[PING_REQUEST];
    while (recv_all(fd, req, sizeof(req)) == 0) {
        uint32_t size;
        memcpy(&size, req, sizeof(size));
        if (size == 0 || size > 64 * CB_MIB)
            break;
        if (size > have) {
            free(reply);
            reply = calloc(1, size);
            if (reply == NULL)
                goto close_conn;
            have = size;
        }
        if (send_all(fd, reply, size) < 0)
            goto close_conn;
    }
    cb_wait_for_eof(STDIN_FILENO);
    rc = CB_EXIT_OK;
close_conn:
    close(fd);
close_listener:
    free(reply);
    close(lfd);
    return rc;
}
