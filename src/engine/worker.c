/*
 * worker.c - I/O threads. Each worker owns an epoll set with an eventfd for
 * wake-ups, the server connections handed to it, and the lanes assigned to
 * it. It sleeps in epoll_wait (never spins) and wakes at least every 20 ms to
 * enforce request deadlines and retry connections.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/internal.h"

#define TICK_MS 20

void cre_worker_kick(cre_worker *w)
{
    if (atomic_exchange(&w->kicked, true))
        return;
    uint64_t one = 1;
    ssize_t n = write(w->wakefd, &one, sizeof(one));
    (void)n;
}

int cre_worker_add_conn(cre_worker *w, cre_conn *c, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};
    c->worker = w;
    c->want_out = (events & EPOLLOUT) != 0;
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0)
        return crb_error(CR_ERR_SYSTEM, "epoll_ctl(ADD fd %d): %s", c->fd, strerror(errno));
    return 0;
}

int cre_worker_adopt_conn(cr_engine *e, cre_conn *c, uint32_t events)
{
    cre_worker *w = &e->workers[atomic_fetch_add(&e->next_worker, 1) % e->n_workers];
    /* Registering with another worker's epoll is thread-safe; its conn list
     * is appended under its lock and only read by that worker. */
    pthread_mutex_lock(&w->lock);
    if (w->n_conns == w->cap_conns) {
        size_t ncap = w->cap_conns ? w->cap_conns * 2 : 16;
        cre_conn **nc = realloc(w->conns, ncap * sizeof(*nc));
        if (nc == NULL) {
            pthread_mutex_unlock(&w->lock);
            return crb_error(CR_ERR_NO_MEMORY, "worker connection list of %zu", w->n_conns);
        }
        w->conns = nc;
        w->cap_conns = ncap;
    }
    w->conns[w->n_conns++] = c;
    c->worker = w;
    pthread_mutex_unlock(&w->lock);
    if (cre_worker_add_conn(w, c, events) < 0)
        crb_log(CRB_LOG_WARN, "cannot watch accepted connection: %s", cr_last_error_message());
    return 0;
}

void cre_worker_mod_conn(cre_conn *c, bool want_out)
{
    if (c->want_out == want_out || c->fd < 0)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(c->worker->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = want_out;
}

static void *worker_main(void *arg)
{
    cre_worker *w = arg;
    struct epoll_event events[64];
    uint64_t next_tick = crb_now_ns();
    while (!atomic_load(&w->stop)) {
        int n = epoll_wait(w->epfd, events, 64, TICK_MS);
        bool woke = false;
        for (int i = 0; i < n; i++) {
            cre_conn *c = events[i].data.ptr; /* may be freed by its handler */
            switch (c->kind) {
            case CRE_CONN_WAKE: {
                uint64_t v;
                ssize_t r = read(w->wakefd, &v, sizeof(v));
                (void)r;
                atomic_store(&w->kicked, false);
                woke = true;
                break;
            }
            case CRE_CONN_LISTENER:
                cre_server_accept(w->engine);
                break;
            case CRE_CONN_SERVER:
                cre_server_on_event(c, events[i].events);
                break;
            case CRE_CONN_LANE:
                cre_lane_on_event(c, events[i].events);
                break;
            case CRE_CONN_SHM_LISTENER:
                cre_shm_service_accept(w->engine);
                break;
            case CRE_CONN_SHM_SERVER:
                cre_shm_service_on_event(c, events[i].events);
                break;
            case CRE_CONN_SHM_WATCH:
                cre_shm_watch_on_event(c, events[i].events);
                break;
            }
        }
        /* Lanes may have new slices queued (kick) or deadlines to enforce. */
        uint64_t now = crb_now_ns();
        if (woke || now >= next_tick) {
            cre_lanes_tick(w, now);
            if (now >= next_tick)
                next_tick = now + TICK_MS * 1000000ull;
        }
    }
    return NULL;
}

int cre_workers_start(cr_engine *e)
{
    e->workers = calloc(e->n_workers, sizeof(*e->workers));
    if (e->workers == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "allocating %u workers", e->n_workers);
    uint32_t started = 0;
    int rc;
    for (uint32_t i = 0; i < e->n_workers; i++) {
        cre_worker *w = &e->workers[i];
        w->engine = e;
        w->index = (int)i;
        pthread_mutex_init(&w->lock, NULL);
        w->epfd = epoll_create1(EPOLL_CLOEXEC);
        w->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (w->epfd < 0 || w->wakefd < 0) {
            rc = crb_error(CR_ERR_SYSTEM, "epoll/eventfd: %s", strerror(errno));
            goto err_stop_started;
        }
        w->wake_conn.kind = CRE_CONN_WAKE;
        w->wake_conn.fd = w->wakefd;
        rc = cre_worker_add_conn(w, &w->wake_conn, EPOLLIN);
        if (rc < 0)
            goto err_stop_started;
    }
    e->listen_conn.kind = CRE_CONN_LISTENER;
    e->listen_conn.fd = e->listen_fd;
    e->listen_conn.engine = e;
    rc = cre_worker_add_conn(&e->workers[0], &e->listen_conn, EPOLLIN);
    if (rc < 0)
        goto err_stop_started;
    for (; started < e->n_workers; started++) {
        if (pthread_create(&e->workers[started].thread, NULL, worker_main, &e->workers[started]) !=
            0) {
            rc = crb_error(CR_ERR_SYSTEM, "pthread_create for worker %u failed", started);
            goto err_stop_started;
        }
    }
    return 0;

err_stop_started:
    for (uint32_t i = 0; i < started; i++) {
        atomic_store(&e->workers[i].stop, true);
        cre_worker_kick(&e->workers[i]);
        pthread_join(e->workers[i].thread, NULL);
    }
    for (uint32_t i = 0; i < e->n_workers; i++) {
        if (e->workers[i].epfd > 0)
            close(e->workers[i].epfd);
        if (e->workers[i].wakefd > 0)
            close(e->workers[i].wakefd);
        pthread_mutex_destroy(&e->workers[i].lock);
    }
    free(e->workers);
    e->workers = NULL;
    return rc;
}

void cre_workers_stop(cr_engine *e)
{
    if (e->workers == NULL)
        return;
    for (uint32_t i = 0; i < e->n_workers; i++) {
        atomic_store(&e->workers[i].stop, true);
        cre_worker_kick(&e->workers[i]);
    }
    for (uint32_t i = 0; i < e->n_workers; i++)
        pthread_join(e->workers[i].thread, NULL);
    /* Threads are gone: fail whatever lanes still hold, close server conns. */
    for (uint32_t i = 0; i < e->n_workers; i++) {
        cre_worker *w = &e->workers[i];
        for (size_t j = 0; j < w->n_lanes; j++)
            cre_lane_fail_all(w->lanes[j], CR_ERR_SHUTDOWN);
        cre_server_close_all(w);
        free(w->lanes);
        close(w->epfd);
        close(w->wakefd);
        pthread_mutex_destroy(&w->lock);
    }
    free(e->workers);
    e->workers = NULL;
}
