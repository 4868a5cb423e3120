/*
 * evloop.c - see evloop.h. One thread per loop: epoll_wait with the tick as
 * timeout, handlers in the order epoll reports them, then the tick callback
 * when a wake-up arrived or the tick is due.
 */
#include "base/evloop.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"

#define MAX_EVENTS 64

static void on_wake(crb_io *io, uint32_t events)
{
    crb_loop *loop = (crb_loop *)((char *)io - offsetof(crb_loop, wake_io));
    uint64_t v;
    ssize_t r = read(loop->wakefd, &v, sizeof(v));
    (void)r;
    atomic_store(&loop->wake_pending, false);
    loop->woken = true;
}

int crb_loop_init(crb_loop *loop, const char *name, unsigned tick_ms, crb_tick_fn on_tick,
                  void *owner)
{
    memset(loop, 0, sizeof(*loop));
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->epfd < 0)
        return crb_error(CR_ERR_SYSTEM, "epoll_create1 for loop %s: %s", name, strerror(errno));
    loop->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (loop->wakefd < 0) {
        int rc = crb_error(CR_ERR_SYSTEM, "eventfd for loop %s: %s", name, strerror(errno));
        close(loop->epfd);
        return rc;
    }
    loop->tick_ms = tick_ms ? tick_ms : 100;
    loop->on_tick = on_tick;
    loop->owner = owner;
    snprintf(loop->name, sizeof(loop->name), "%s", name);
    loop->wake_io.fd = loop->wakefd;
    loop->wake_io.on_event = on_wake;
    int rc = crb_loop_add(loop, &loop->wake_io, EPOLLIN);
    if (rc < 0) {
        close(loop->wakefd);
        close(loop->epfd);
    }
    return rc;
}

static void *loop_main(void *arg)
{
    crb_loop *loop = arg;
    pthread_setname_np(pthread_self(), loop->name);
    struct epoll_event events[MAX_EVENTS];
    uint64_t next_tick = crb_now_ns() + loop->tick_ms * 1000000ull;
    uint64_t spin_until = 0; /* a spin window is open: no sleeping before this */
    void *last_only = NULL;  /* the source of the last pass, if it had one event */
    while (!atomic_load(&loop->stop)) {
        uint64_t now = crb_now_ns();
        int timeout = now >= next_tick ? 0 : (int)((next_tick - now + 999999) / 1000000);
        if (loop->again || now < spin_until) {
            timeout = 0; /* (a poll within the window: what it finds was caught) */
        } else if (spin_until != 0) {
            crb_spin_done(&loop->spin, false); /* the window ran out: sleep */
            spin_until = 0;
        }
        int n = epoll_wait(loop->epfd, events, MAX_EVENTS, timeout);
        if (n > 0) {
            if (spin_until != 0)
                crb_spin_done(&loop->spin, true);
            spin_until = 0;
            /* An adaptive window only while the loop serves one partner (the
             * same single source two passes in a row): a loop serving many
             * is woken often anyway, and its polling would take the CPU its
             * clients need (a fixed window polls regardless). */
            void *only = n == 1 ? events[0].data.ptr : NULL;
            if (loop->spin.mode_ns >= 0 || (only != NULL && only == last_only)) {
                uint64_t window = crb_spin_window(&loop->spin);
                spin_until = window > 0 ? crb_now_ns() + window : 0;
            }
            last_only = only; /* (compared, never dereferenced: it may be freed) */
        }
        loop->woken = loop->again;
        loop->again = false;
        for (int i = 0; i < n; i++) {
            crb_io *io = events[i].data.ptr; /* may be freed by its handler */
            io->on_event(io, events[i].events);
        }
        now = crb_now_ns();
        bool due = now >= next_tick;
        if (due)
            next_tick = now + loop->tick_ms * 1000000ull;
        if ((loop->woken || due) && loop->on_tick != NULL)
            loop->on_tick(loop, now, loop->woken);
        if (n == 0 && now < spin_until && !loop->again)
            crb_spin_pause(); /* polled in vain: a thread runnable on this CPU goes first */
    }
    if (spin_until != 0)
        crb_spin_done(&loop->spin, false); /* stopped with a window open */
    return NULL;
}

void crb_loop_set_busy_poll(crb_loop *loop, int64_t mode_ns)
{
    crb_spin_init(&loop->spin, mode_ns);
}

int crb_loop_start(crb_loop *loop)
{
    if (pthread_create(&loop->thread, NULL, loop_main, loop) != 0)
        return crb_error(CR_ERR_SYSTEM, "starting the %s thread", loop->name);
    loop->running = true;
    return 0;
}

void crb_loop_stop(crb_loop *loop)
{
    if (loop->running) {
        atomic_store(&loop->stop, true);
        crb_loop_wake(loop);
        pthread_join(loop->thread, NULL);
        loop->running = false;
    }
}

void crb_loop_fini(crb_loop *loop)
{
    crb_loop_stop(loop);
    if (loop->wakefd >= 0)
        close(loop->wakefd);
    if (loop->epfd >= 0)
        close(loop->epfd);
    loop->wakefd = loop->epfd = -1;
}

int crb_loop_add(crb_loop *loop, crb_io *io, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = io};
    io->loop = loop;
    io->events = events;
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, io->fd, &ev) < 0) {
        io->loop = NULL;
        return crb_error(CR_ERR_SYSTEM, "epoll_ctl(ADD fd %d) on loop %s: %s", io->fd, loop->name,
                         strerror(errno));
    }
    return 0;
}

void crb_loop_mod(crb_io *io, uint32_t events)
{
    if (io->loop == NULL || io->fd < 0 || io->events == events)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = io};
    if (epoll_ctl(io->loop->epfd, EPOLL_CTL_MOD, io->fd, &ev) == 0)
        io->events = events;
}

void crb_loop_del(crb_io *io)
{
    if (io->loop == NULL || io->fd < 0)
        return;
    epoll_ctl(io->loop->epfd, EPOLL_CTL_DEL, io->fd, NULL);
    io->loop = NULL;
}

void crb_loop_wake(crb_loop *loop)
{
    if (atomic_exchange(&loop->wake_pending, true))
        return;
    uint64_t one = 1;
    ssize_t n = write(loop->wakefd, &one, sizeof(one));
    (void)n;
}

void crb_loop_again(crb_loop *loop)
{
    loop->again = true;
}

bool crb_loop_on_thread(const crb_loop *loop)
{
    return loop->running && pthread_equal(pthread_self(), loop->thread);
}
