/*
 * evloop.h - the event loop of crescent's I/O threads: the engine's workers,
 * crescent-client's service threads and the master's RPC I/O threads.
 *
 * A loop is an epoll set, an eventfd that other threads use to wake it, and
 * a periodic tick. Sources are crb_io records embedded in their owner's
 * object: a file descriptor, the events wanted, and the handler the loop
 * calls (on the loop's thread) when they fire. The loop sleeps in
 * epoll_wait and never spins, unless its owner gave it a spin mode
 * (crb_loop_set_busy_poll, base/spin.h): then, after a pass that handled
 * events, it polls without sleeping for the window the mode gives: a fixed
 * one after every such pass, or an adaptive one, only after a pass whose one
 * event came from the same source as the pass before (a loop serving one
 * partner), that backs off while windows run out empty. The tick bounds how
 * late deadlines are seen. An owner with work left over after a pass (a
 * connection that used up its turn) asks for another one at once
 * (crb_loop_again) instead of waking itself through the eventfd.
 *
 * Ownership and threading:
 *   - A loop owns its epoll fd, eventfd and thread; the crb_io records and
 *     their fds belong to whoever added them.
 *   - crb_loop_add / _mod / _del may be called from any thread (epoll_ctl
 *     is thread-safe), but an io's handler runs only on its loop's thread,
 *     so an owner that frees an io from another thread must first make sure
 *     the loop is stopped or the io was never added.
 *   - crb_loop_wake may be called from any thread at any time; wake-ups
 *     coalesce until the loop has run.
 *   - A handler may delete and free its own io (the loop reads nothing of
 *     it afterwards in that pass).
 */
#ifndef CRESCENT_BASE_EVLOOP_H
#define CRESCENT_BASE_EVLOOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/spin.h"

typedef struct crb_loop crb_loop;
typedef struct crb_io crb_io;

/** Called on the loop thread with the epoll events that fired. */
typedef void (*crb_io_fn)(crb_io *io, uint32_t events);

/** One watched fd. Embed it in the object it belongs to. */
struct crb_io {
    int fd;
    uint32_t events; /* what is watched now (EPOLLIN/EPOLLOUT/...) */
    crb_io_fn on_event;
    crb_loop *loop; /* set by crb_loop_add */
};

/**
 * Called on the loop thread after every pass that was woken (crb_loop_wake)
 * and at least every tick_ms. `woken` says whether a wake-up happened.
 */
typedef void (*crb_tick_fn)(crb_loop *loop, uint64_t now_ns, bool woken);

struct crb_loop {
    int epfd;
    int wakefd;
    crb_io wake_io;
    unsigned tick_ms;
    crb_tick_fn on_tick; /* may be NULL */
    void *owner;         /* the owner's object, for handlers */
    pthread_t thread;
    bool running;
    atomic_bool stop;
    atomic_bool wake_pending;
    bool woken;    /* a wake-up arrived in this pass (loop thread only) */
    bool again;    /* crb_loop_again was called (loop thread only) */
    crb_spin spin; /* mode 0 (never spin) unless set before crb_loop_start */
    char name[16];
};

/**
 * Set up a loop (no thread yet): `name` names the thread (truncated to 15
 * bytes), `owner` is handed back through loop->owner. Errors: CR_ERR_SYSTEM
 * (epoll/eventfd). On failure nothing is left to release.
 */
int crb_loop_init(crb_loop *loop, const char *name, unsigned tick_ms, crb_tick_fn on_tick,
                  void *owner);

/**
 * Spin mode (base/spin.h): after a pass that handled events, poll without
 * sleeping for the mode's window before sleeping again. `mode_ns`:
 * CRB_SPIN_ADAPTIVE, a fixed window in ns, or 0 (the default: always sleep).
 * Call before crb_loop_start.
 */
void crb_loop_set_busy_poll(crb_loop *loop, int64_t mode_ns);

/** Start the loop's thread. Errors: CR_ERR_SYSTEM. */
int crb_loop_start(crb_loop *loop);

/**
 * Stop and join the thread (if started); the loop's fds stay open, so its
 * owner can still crb_loop_del the io records it frees afterwards. A no-op
 * when not running. Must not be called from the loop's own thread.
 */
void crb_loop_stop(crb_loop *loop);

/**
 * Stop and join the thread (if started, crb_loop_stop), then close the
 * loop's own fds.
 * The io records added to it are left to their owners (their fds are not
 * closed). Must not be called from the loop's own thread.
 */
void crb_loop_fini(crb_loop *loop);

/** Watch io->fd for `events` with handler io->on_event. Errors: CR_ERR_SYSTEM. */
int crb_loop_add(crb_loop *loop, crb_io *io, uint32_t events);

/** Change what io watches; a no-op when unchanged. */
void crb_loop_mod(crb_io *io, uint32_t events);

/** Stop watching io (its fd stays open). Safe on an io never added. */
void crb_loop_del(crb_io *io);

/** Make the loop run its tick soon. Any thread; coalesced. */
void crb_loop_wake(crb_loop *loop);

/**
 * Loop thread only: there is work left for the tick. The next epoll_wait
 * does not sleep, and on_tick runs after that pass with woken = true (a
 * cheap self-wake: no eventfd write).
 */
void crb_loop_again(crb_loop *loop);

/** Is the caller running on this loop's thread? */
bool crb_loop_on_thread(const crb_loop *loop);

#endif
