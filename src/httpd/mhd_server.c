/*
 * mhd_server.c - see mhd_server.h.
 *
 * The gate: one thread, one epoll set holding the listening socket (level
 * triggered), an eventfd for stop, and the waiting connections (edge
 * triggered, because their bytes are peeked and stay in the socket: a
 * level-triggered watch would fire until they are read). A waiting
 * connection whose head is complete is handed to libmicrohttpd with
 * MHD_add_connection as soon as a slot is free; while none is, the gate
 * retries every 20 ms and dooms the oldest served request (see the header).
 * libmicrohttpd runs without a listening socket (MHD_USE_NO_LISTEN_SOCKET,
 * with its inter-thread channel so added connections and stop are seen at
 * once); its connection notifications keep the list of served connections
 * that the gate dooms from and the wrapped handler checks.
 *
 * Slots are counted from the hand-over, not from libmicrohttpd's "started"
 * notification, and libmicrohttpd's own limit is set so that one worker
 * alone could take every slot: libmicrohttpd 0.9.75 (Debian 12) leaves a
 * worker's cleanup mutex locked when a connection added with
 * MHD_add_connection finds that worker at its share of the limit (its
 * check at add time races with the worker starting the ones added before),
 * and the worker's next lock deadlocks it for good: a burst of hand-overs
 * under a body slowloris froze all four workers of a TSan-built metadata
 * server, and MHD_stop_daemon then waited for them forever. With every
 * added connection already counted against the gate's slots, no worker
 * ever comes near its share.
 */
#include "httpd/mhd_server.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "crescent/status.h"

#define DEFAULT_HEADER_TIMEOUT_MS 5000
#define DEFAULT_MAX_PENDING       256
#define HEADER_MAX                16384 /* bytes of a request head */
#define DOOM_MIN_AGE_MS           1000  /* a request this young is never doomed */
#define SLOT_MARGIN               64    /* each libmicrohttpd worker's limit above the gate's */

/* A connection waiting with the gate for its request head. */
typedef struct crh_pending {
    int fd; /* -1: free */
    bool complete;
    uint64_t since_ms;
    struct sockaddr_storage addr;
    socklen_t addr_len;
} crh_pending;

/* A connection inside libmicrohttpd (its socket context). */
typedef struct crh_conn {
    struct crh_conn *prev, *next;
    uint64_t start_ms;
    atomic_bool doomed;
} crh_conn;

/* libmicrohttpd's logger: keep the last line for error messages, log it. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    crh_mhd_server *m = cls;
    char line[sizeof(m->last_error)];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        line[--n] = '\0';
    pthread_mutex_lock(&m->log_lock);
    memcpy(m->last_error, line, n + 1);
    pthread_mutex_unlock(&m->log_lock);
    crb_log(CRB_LOG_INFO, "%s: %s", m->what, line);
}

void crh_mhd_response_headers(struct MHD_Response *r)
{
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
}

/* --- connections inside libmicrohttpd ---------------------------------------- */

static void on_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)connection;
    crh_mhd_server *m = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        crh_conn *c = calloc(1, sizeof(*c));
        *socket_context = c;
        if (c == NULL)
            return; /* served without a deadline: libmicrohttpd's idle timeout still holds */
        c->start_ms = crb_now_ms();
        pthread_mutex_lock(&m->conn_lock);
        c->prev = m->conn_tail;
        if (m->conn_tail)
            m->conn_tail->next = c;
        else
            m->conn_head = c;
        m->conn_tail = c;
        pthread_mutex_unlock(&m->conn_lock);
        return; /* (its slot was counted at the hand-over) */
    }
    /* Closed: every started connection is, once; its slot is free again. */
    atomic_fetch_sub(&m->in_mhd, 1);
    crh_conn *c = *socket_context;
    if (c == NULL)
        return;
    pthread_mutex_lock(&m->conn_lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        m->conn_head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        m->conn_tail = c->prev;
    pthread_mutex_unlock(&m->conn_lock);
    free(c);
    *socket_context = NULL;
}

/* The daemon's handler, for connections that are neither doomed nor late. */
static enum MHD_Result gated(void *cls, struct MHD_Connection *conn, const char *url,
                             const char *method, const char *version, const char *upload_data,
                             size_t *upload_data_size, void **req_cls)
{
    crh_mhd_server *m = cls;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    crh_conn *c = ci != NULL ? ci->socket_context : NULL;
    if (c != NULL &&
        (atomic_load(&c->doomed) || crb_now_ms() - c->start_ms > m->request_timeout_ms))
        return MHD_NO; /* libmicrohttpd closes the connection */
    return m->handler(m->handler_cls, conn, url, method, version, upload_data, upload_data_size,
                      req_cls);
}

/* All slots are taken: doom the oldest request that is old enough. */
static void doom_oldest(crh_mhd_server *m, uint64_t now)
{
    pthread_mutex_lock(&m->conn_lock);
    for (crh_conn *c = m->conn_head; c != NULL; c = c->next) {
        if (now - c->start_ms < DOOM_MIN_AGE_MS)
            break; /* the rest are younger */
        if (!atomic_load(&c->doomed)) {
            atomic_store(&c->doomed, true);
            atomic_fetch_add(&m->doomed, 1);
            break;
        }
    }
    pthread_mutex_unlock(&m->conn_lock);
}

/* --- the gate ------------------------------------------------------------------ */

static void pending_close(crh_mhd_server *m, crh_pending *p)
{
    epoll_ctl(m->epfd, EPOLL_CTL_DEL, p->fd, NULL);
    close(p->fd);
    p->fd = -1;
    p->complete = false;
    m->n_pending--;
}

/* Give p to libmicrohttpd if a slot is free; true when it is gone from the gate. */
static bool hand_over(crh_mhd_server *m, crh_pending *p, uint64_t now)
{
    if (atomic_load(&m->in_mhd) >= m->slots) {
        doom_oldest(m, now);
        return false;
    }
    epoll_ctl(m->epfd, EPOLL_CTL_DEL, p->fd, NULL);
    int fd = p->fd;
    p->fd = -1;
    p->complete = false;
    m->n_pending--;
    /* libmicrohttpd owns (and on failure closes) the socket from here on.
     * The slot is taken now: the worker starts the connection later. */
    atomic_fetch_add(&m->in_mhd, 1);
    if (MHD_add_connection(m->daemon, fd, (const struct sockaddr *)&p->addr, p->addr_len) ==
        MHD_YES)
        atomic_fetch_add(&m->handed_over, 1);
    else
        atomic_fetch_sub(&m->in_mhd, 1);
    return true;
}

/* Does the head in buf[0..n) end (an empty line)? */
static bool head_complete(const char *buf, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (buf[i] != '\n')
            continue;
        if (buf[i + 1] == '\n' || (buf[i + 1] == '\r' && i + 2 < n && buf[i + 2] == '\n'))
            return true;
    }
    return false;
}

/* New bytes on a waiting connection. */
static void pending_readable(crh_mhd_server *m, crh_pending *p, char *peek, uint64_t now)
{
    ssize_t r = recv(p->fd, peek, m->header_max, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        pending_close(m, p);
        return;
    }
    if (r < 0)
        return;
    if (head_complete(peek, (size_t)r)) {
        p->complete = true;
        hand_over(m, p, now);
    } else if ((size_t)r >= m->header_max) {
        pending_close(m, p); /* a head that large is not a request of ours */
    }
}

static crh_pending *pending_slot(crh_mhd_server *m, char *peek, uint64_t now)
{
    crh_pending *oldest = NULL;
    for (unsigned i = 0; i < m->max_pending; i++) {
        crh_pending *p = &m->pending[i];
        if (p->fd < 0)
            return p;
        if (oldest == NULL || p->since_ms < oldest->since_ms)
            oldest = p;
    }
    /* Full: the one that has waited longest makes room. A client that sends its
     * request at once is handed over long before it is the oldest, unless a burst
     * of connections is accepted before the gate has seen its bytes (one
     * accept_all round takes 256): so look at it first, and a complete head goes
     * to libmicrohttpd instead of being dropped. */
    if (!oldest->complete)
        pending_readable(m, oldest, peek, now); /* may hand it over, or close it */
    if (oldest->fd >= 0) {
        atomic_fetch_add(&m->dropped_pending, 1);
        pending_close(m, oldest);
    }
    return oldest;
}

static void accept_all(crh_mhd_server *m, char *peek, uint64_t now)
{
    for (int k = 0; k < 256; k++) {
        struct sockaddr_storage addr;
        socklen_t len = sizeof(addr);
        int fd =
            accept4(m->listen_fd, (struct sockaddr *)&addr, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN, or out of fds: the next round retries */
        atomic_fetch_add(&m->accepted, 1);
        crh_pending *p = pending_slot(m, peek, now);
        *p = (crh_pending){.fd = fd, .since_ms = now, .addr = addr, .addr_len = len};
        struct epoll_event e = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = p};
        if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, fd, &e) != 0) {
            close(fd);
            p->fd = -1;
            continue;
        }
        m->n_pending++;
        pending_readable(m, p, peek, now); /* the request is often there already */
    }
}

static void *gate_main(void *arg)
{
    crh_mhd_server *m = arg;
    char *peek = malloc(m->header_max);
    if (peek == NULL) {
        crb_log(CRB_LOG_ERROR, "%s: out of memory in the connection gate", m->what);
        return NULL;
    }
    struct epoll_event ev[64];
    bool waiting = false;
    while (!atomic_load(&m->stop)) {
        int n = epoll_wait(m->epfd, ev, 64, waiting ? 20 : 100);
        uint64_t now = crb_now_ms();
        for (int i = 0; i < n; i++) {
            void *ptr = ev[i].data.ptr;
            if (ptr == &m->listen_fd)
                accept_all(m, peek, now);
            else if (ptr != &m->wakefd && ((crh_pending *)ptr)->fd >= 0)
                pending_readable(m, ptr, peek, now);
        }
        /* Heads that are complete wait for a slot, oldest first; heads that
         * are late are dropped. */
        waiting = false;
        for (unsigned i = 0; i < m->max_pending; i++) {
            crh_pending *p = &m->pending[i];
            if (p->fd < 0)
                continue;
            if (now - p->since_ms > m->header_timeout_ms) {
                atomic_fetch_add(&m->timed_out_heads, 1);
                pending_close(m, p);
            } else if (p->complete && !hand_over(m, p, now)) {
                waiting = true;
            }
        }
    }
    free(peek);
    return NULL;
}

/* --- lifecycle ------------------------------------------------------------------ */

static void release(crh_mhd_server *m)
{
    for (unsigned i = 0; m->pending != NULL && i < m->max_pending; i++)
        if (m->pending[i].fd >= 0)
            close(m->pending[i].fd);
    free(m->pending);
    m->pending = NULL;
    if (m->listen_fd >= 0)
        close(m->listen_fd);
    if (m->epfd >= 0)
        close(m->epfd);
    if (m->wakefd >= 0)
        close(m->wakefd);
    m->listen_fd = m->epfd = m->wakefd = -1;
    pthread_mutex_destroy(&m->conn_lock);
    pthread_mutex_destroy(&m->log_lock);
}

int crh_mhd_start(crh_mhd_server *m, const char *what, const char *host, uint16_t port,
                  const crh_mhd_config *cfg)
{
    memset(m, 0, sizeof(*m));
    m->what = what;
    m->listen_fd = m->epfd = m->wakefd = -1;
    if (pthread_mutex_init(&m->log_lock, NULL) != 0)
        return crb_error(CR_ERR_SYSTEM, "%s: pthread_mutex_init failed", what);
    pthread_mutex_init(&m->conn_lock, NULL);
    m->handler = cfg->on_request;
    m->handler_cls = cfg->request_cls;
    m->slots = cfg->connection_limit ? cfg->connection_limit : 256;
    m->max_pending = cfg->max_pending ? cfg->max_pending : DEFAULT_MAX_PENDING;
    m->header_timeout_ms =
        cfg->header_timeout_ms ? cfg->header_timeout_ms : DEFAULT_HEADER_TIMEOUT_MS;
    m->request_timeout_ms = cfg->request_timeout_ms ? cfg->request_timeout_ms : 30000;
    m->header_max = HEADER_MAX;

    int rc = crb_listen(host, port, 1024, &m->port);
    if (rc < 0) {
        rc = crb_error(rc == CR_ERR_DNS ? CR_ERR_DNS : CR_ERR_BIND, "%s cannot listen on %s:%u: %s",
                       what, host, (unsigned)port, cr_last_error_message());
        release(m);
        return rc;
    }
    m->listen_fd = rc;
    m->pending = malloc(m->max_pending * sizeof(*m->pending));
    m->epfd = epoll_create1(EPOLL_CLOEXEC);
    m->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (m->pending == NULL || m->epfd < 0 || m->wakefd < 0) {
        rc = crb_error(CR_ERR_NO_MEMORY, "%s: gate resources", what);
        release(m);
        return rc;
    }
    for (unsigned i = 0; i < m->max_pending; i++)
        m->pending[i].fd = -1;
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = &m->listen_fd};
    struct epoll_event we = {.events = EPOLLIN, .data.ptr = &m->wakefd};
    epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->listen_fd, &le);
    epoll_ctl(m->epfd, EPOLL_CTL_ADD, m->wakefd, &we);

    unsigned int flags =
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    MHD_RequestCompletedCallback completed = cfg->on_completed;
    /* libmicrohttpd splits its limit evenly among the workers: give each
     * worker room for every slot (see the top of this file). */
    unsigned threads = cfg->threads > 0 ? cfg->threads : 1;
    unsigned mhd_limit = (m->slots + SLOT_MARGIN) * threads;
    m->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, gated, m, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, m,
        MHD_OPTION_THREAD_POOL_SIZE, cfg->threads, MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->idle_timeout_s, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, m, completed != NULL ? MHD_OPTION_NOTIFY_COMPLETED : MHD_OPTION_END,
        completed, cfg->completed_cls, MHD_OPTION_END);
    if (m->daemon == NULL) {
        rc = crb_error(CR_ERR_BIND, "%s cannot start on %s:%u: %s", what, host, (unsigned)port,
                       m->last_error[0] != '\0' ? m->last_error : "MHD_start_daemon failed");
        release(m);
        return rc;
    }
    if (pthread_create(&m->gate, NULL, gate_main, m) != 0) {
        MHD_stop_daemon(m->daemon);
        m->daemon = NULL;
        release(m);
        return crb_error(CR_ERR_SYSTEM, "%s: starting the connection gate", what);
    }
    m->gate_running = true;
    crb_log(CRB_LOG_INFO, "%s listening on %s:%u", what, host, (unsigned)m->port);
    return 0;
}

/* MHD_stop_daemon on a thread of its own, so its caller can stop waiting. */
typedef struct mhd_stopper {
    struct MHD_Daemon *daemon;
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    bool done;
    bool abandoned; /* the caller stopped waiting: the thread frees the stopper */
} mhd_stopper;

static void stopper_free(mhd_stopper *st)
{
    pthread_cond_destroy(&st->done_cv);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

static void *stopper_main(void *arg)
{
    mhd_stopper *st = arg;
    MHD_stop_daemon(st->daemon);
    pthread_mutex_lock(&st->mu);
    st->done = true;
    bool abandoned = st->abandoned;
    pthread_cond_signal(&st->done_cv);
    pthread_mutex_unlock(&st->mu);
    if (abandoned)
        stopper_free(st);
    return NULL;
}

/* Stop the daemon within CRH_MHD_STOP_MS; false when its threads are still
 * running then (the stopper and the daemon are left to them). */
static bool stop_daemon_bounded(crh_mhd_server *m)
{
    mhd_stopper *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        MHD_stop_daemon(m->daemon); /* (no memory for a helper: wait as before) */
        return true;
    }
    st->daemon = m->daemon;
    pthread_mutex_init(&st->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_t th;
    if (pthread_create(&th, NULL, stopper_main, st) != 0) {
        MHD_stop_daemon(m->daemon);
        goto free_stopper;
    }
    struct timespec deadline = crb_deadline_ts(CRH_MHD_STOP_MS);
    pthread_mutex_lock(&st->mu);
    while (!st->done)
        if (pthread_cond_timedwait(&st->done_cv, &st->mu, &deadline) != 0)
            break;
    bool done = st->done;
    st->abandoned = !done;
    pthread_mutex_unlock(&st->mu);
    if (!done) {
        crb_log(CRB_LOG_ERROR,
                "%s: libmicrohttpd's workers did not stop within %d ms (a request handler "
                "still running?); leaving them to the process exit",
                m->what, CRH_MHD_STOP_MS);
        pthread_detach(th);
        return false;
    }
    pthread_join(th, NULL);
free_stopper:
    stopper_free(st);
    return true;
}

bool crh_mhd_stop(crh_mhd_server *m)
{
    atomic_store(&m->stop, true);
    if (m->gate_running) {
        uint64_t one = 1;
        ssize_t w = write(m->wakefd, &one, sizeof(one));
        (void)w;
        pthread_join(m->gate, NULL);
        m->gate_running = false;
    }
    /* No new connection can reach the daemon now; it closes its own. */
    if (m->listen_fd >= 0) {
        close(m->listen_fd);
        m->listen_fd = -1;
    }
    if (!stop_daemon_bounded(m))
        return false; /* its workers may still call into m */
    m->daemon = NULL;
    release(m);
    return true;
}

void crh_mhd_stats_get(crh_mhd_server *m, crh_mhd_stats *out)
{
    *out = (crh_mhd_stats){atomic_load(&m->accepted),        atomic_load(&m->handed_over),
                           atomic_load(&m->dropped_pending), atomic_load(&m->timed_out_heads),
                           atomic_load(&m->doomed),          atomic_load(&m->in_mhd)};
}
