/*
 * rpc_limits.h - the bounds the master's RPC server puts on every
 * connection and on the process, as small pieces that do not depend on how
 * the event loop is written (issue 11 items 4 and 6; they are meant to move
 * with the connections onto the shared event loop):
 *
 *   crk_io_budget    per-connection byte budgets: a connection is read from
 *                    only while it has fewer than `in_max` bytes of
 *                    unprocessed input and fewer than `out_high` bytes of
 *                    unsent replies, so a client that pipelines without
 *                    reading costs at most about in_max + out_high + one
 *                    reply, however long it keeps at it; buffers larger
 *                    than `keep` are given back once the connection has
 *                    been quiet for a second (not after every request: a
 *                    busy connection keeps its buffers).
 *   crk_fd_reserve   one spare descriptor held open, so that at the fd limit
 *                    (EMFILE) the listener can still accept-and-close
 *                    instead of staying readable (a busy loop).
 *   crk_ratelimit    at most one log line per interval, counting the rest.
 *   crk_conn_cap     connections served at once: the flag's value, or what
 *                    RLIMIT_NOFILE leaves after a reserve.
 *
 * Threading: a crk_fd_reserve and a crk_ratelimit belong to one thread (the
 * accepting one); the rest are pure functions.
 */
#ifndef CRESCENT_MASTER_RPC_LIMITS_H
#define CRESCENT_MASTER_RPC_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct crk_io_budget {
    size_t in_max;   /* unprocessed input bytes at most (>= one whole frame) */
    size_t out_high; /* unsent reply bytes at which reading stops */
    size_t keep;     /* buffer capacity kept once empty */
} crk_io_budget;

/** The server's budgets: 1 MiB frames, 256 KiB of replies, 64 KiB kept. */
crk_io_budget crk_io_budget_default(void);

/** May a connection with this much input and output pending be read from? */
static inline bool crk_budget_may_read(const crk_io_budget *b, size_t in_pending,
                                       size_t out_pending)
{
    return in_pending < b->in_max && out_pending < b->out_high;
}

/** How many bytes one read may add to in_pending (0: none). */
static inline size_t crk_budget_read_room(const crk_io_budget *b, size_t in_pending)
{
    return in_pending < b->in_max ? b->in_max - in_pending : 0;
}

typedef struct crk_fd_reserve {
    int spare; /* -1 when it could not be (re)opened */
} crk_fd_reserve;

/** Open the spare descriptor (/dev/null). */
void crk_fd_reserve_init(crk_fd_reserve *r);
void crk_fd_reserve_close(crk_fd_reserve *r);

/**
 * After accept failed with EMFILE/ENFILE: give up the spare, accept the
 * waiting connection and close it at once, take the spare again. Returns
 * true if one connection was shed (call again while it returns true).
 */
bool crk_fd_reserve_shed(crk_fd_reserve *r, int listen_fd);

typedef struct crk_ratelimit {
    uint64_t interval_ms;
    uint64_t last_ms; /* 0: never logged */
    uint64_t suppressed;
} crk_ratelimit;

/**
 * Should the event at now_ms be logged? true at most once per interval; the
 * events in between are counted in *suppressed_out (reported with the next
 * line, then reset).
 */
bool crk_ratelimit_allow(crk_ratelimit *r, uint64_t now_ms, uint64_t *suppressed_out);

/**
 * Connections to serve at once: `wanted` if non-zero (clamped to what the
 * fd limit allows), else RLIMIT_NOFILE's soft limit less `reserve` fds for
 * everything else the process opens (at least 16).
 */
unsigned crk_conn_cap(unsigned wanted, unsigned reserve);

#endif
