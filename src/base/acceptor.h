/*
 * acceptor.h - accepting connections on a listening socket in an event
 * loop, without the failure modes of a bare accept loop:
 *
 *   - At the fd limit (EMFILE/ENFILE) a level-triggered listener stays
 *     readable forever; a loop that just returns spins a core and floods the
 *     log. The acceptor keeps one spare descriptor: it closes it, accepts
 *     the pending connection and closes that at once (the client sees a
 *     clean close instead of hanging in the backlog), reopens the spare,
 *     stops watching the listener for a back-off and logs at most once a
 *     second with the number of connections refused meanwhile.
 *   - A cap on open connections (max_conns; 0 = none): past it, new
 *     connections are accepted and closed at once, logged the same way. The
 *     owner reports each connection's end with crb_acceptor_closed.
 *
 * Threading: the handlers run on the loop's thread; crb_acceptor_closed may
 * be called from any thread; crb_acceptor_tick must run on the loop's thread
 * (from the loop's tick callback) to end a back-off.
 */
#ifndef CRESCENT_BASE_ACCEPTOR_H
#define CRESCENT_BASE_ACCEPTOR_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/evloop.h"

typedef struct crb_acceptor crb_acceptor;

/** A new connection (non-blocking, close-on-exec). The callee owns fd. */
typedef void (*crb_accept_fn)(crb_acceptor *a, int fd);

struct crb_acceptor {
    crb_io io; /* the listening socket (owned by the acceptor once added) */
    int spare_fd;
    unsigned max_conns;
    atomic_uint open;
    crb_accept_fn on_accept;
    void *owner;
    char what[64]; /* "engine port 4711", for log lines */
    uint64_t paused_until_ns;
    uint64_t last_log_ns;
    unsigned refused_since_log;
    _Atomic uint64_t refused_total;
};

/**
 * Take ownership of listen_fd and watch it on `loop`. Errors: CR_ERR_SYSTEM
 * (no spare descriptor, epoll); on failure listen_fd is still the caller's.
 */
int crb_acceptor_start(crb_acceptor *a, crb_loop *loop, int listen_fd, unsigned max_conns,
                       crb_accept_fn on_accept, void *owner, const char *what);

/** Resume a back-off that has elapsed. Loop thread (its tick). */
void crb_acceptor_tick(crb_acceptor *a, uint64_t now_ns);

/** A connection handed out by on_accept has been closed. Any thread. */
void crb_acceptor_closed(crb_acceptor *a);

/** Connections refused (fd limit or cap) so far. */
uint64_t crb_acceptor_refused(crb_acceptor *a);

/** Stop watching and close the listening socket and the spare. */
void crb_acceptor_stop(crb_acceptor *a);

#endif
