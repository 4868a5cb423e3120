/*
 * mhd_server.h - the libmicrohttpd daemons crescent runs (the metadata
 * server, the master's admin port), started the way every one of them
 * needs: resolve the host, listen, serve with a small thread pool, report
 * the bound port (0 = chosen by the kernel), turn a failure into
 * CR_ERR_BIND with libmicrohttpd's own last log line — and stay available
 * under slow or hostile clients (issue 11 item 11):
 *
 *   - A gate thread owns the listening socket. A new connection waits with
 *     the gate, not with libmicrohttpd, until its whole request head has
 *     arrived (peeked, not read), at most header_timeout_ms; at most
 *     max_pending wait at once, and a new one pushes out the oldest. A
 *     client that trickles its head never takes a server slot, and one
 *     that sends a request at once is handed over within microseconds.
 *   - libmicrohttpd serves at most connection_limit connections, one request
 *     each ("Connection: close" on every response, so a second request
 *     cannot come in behind the gate), each within request_timeout_ms from
 *     its accept and idle_timeout_s of silence. When all slots are taken,
 *     the gate dooms the oldest request older than a second (its next body
 *     chunk ends it) and the waiting connection gets the slot.
 *   - Stopping closes the listener and every waiting connection, then stops
 *     libmicrohttpd, which closes its connections: it never waits for a
 *     client.
 *
 * Request handlers are wrapped: they are called only for connections that
 * are neither doomed nor past their deadline, and must add the headers of
 * crh_mhd_response_headers to every response they queue.
 *
 * Threading: start and stop from one thread; handlers run on the daemon's
 * threads; crh_mhd_stats from any thread.
 */
#ifndef CRESCENT_HTTPD_MHD_SERVER_H
#define CRESCENT_HTTPD_MHD_SERVER_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct crh_conn;

/* A daemon, its gate and what its logger keeps; embed it in the server
 * object (it must not move while the daemon runs). */
typedef struct crh_mhd_server {
    struct MHD_Daemon *daemon;
    uint16_t port;            /* bound port once started */
    const char *what;         /* "metadata server" (static string, for messages) */
    pthread_mutex_t log_lock; /* guards last_error */
    char last_error[200];     /* libmicrohttpd's last log line */

    /* the gate (mhd_server.c) */
    int listen_fd, epfd, wakefd;
    pthread_t gate;
    bool gate_running;
    atomic_bool stop;
    struct crh_pending *pending; /* max_pending slots */
    unsigned n_pending, max_pending;
    unsigned header_timeout_ms;
    size_t header_max;
    unsigned slots; /* connections handed to libmicrohttpd at most */
    uint64_t request_timeout_ms;
    /* connections inside libmicrohttpd, oldest first (conn_lock) */
    pthread_mutex_t conn_lock;
    struct crh_conn *conn_head, *conn_tail;
    atomic_uint in_mhd; /* slots taken: handed over and not closed yet */
    MHD_AccessHandlerCallback handler;
    void *handler_cls;
    _Atomic uint64_t accepted, handed_over, dropped_pending, timed_out_heads, doomed;
} crh_mhd_server;

typedef struct crh_mhd_config {
    unsigned threads;            /* libmicrohttpd's pool */
    unsigned connection_limit;   /* requests served at once (slots) */
    unsigned idle_timeout_s;     /* a served connection silent this long is closed */
    unsigned request_timeout_ms; /* a request must be complete this long after its accept */
    unsigned header_timeout_ms;  /* its head must have arrived by then (0: 5000) */
    unsigned max_pending;        /* connections still sending their head (0: 256) */
    MHD_AccessHandlerCallback on_request;
    void *request_cls;
    MHD_RequestCompletedCallback on_completed; /* may be NULL */
    void *completed_cls;
} crh_mhd_config;

/** Counters of the gate (all since start). */
typedef struct crh_mhd_stats {
    uint64_t accepted;        /* TCP connections accepted */
    uint64_t handed_over;     /* with a complete head, given to libmicrohttpd */
    uint64_t dropped_pending; /* pushed out by newer ones while sending their head */
    uint64_t timed_out_heads; /* whose head did not arrive within header_timeout_ms */
    uint64_t doomed;          /* requests ended to free a slot for a waiting one */
    unsigned serving;         /* connections handed to libmicrohttpd and not closed yet */
} crh_mhd_stats;

/**
 * Listen on host:port and serve with cfg. 0 on success (m->port set, an
 * info line logged); otherwise the status (bad host, CR_ERR_BIND with the
 * reason, CR_ERR_NO_MEMORY, CR_ERR_SYSTEM) and m holds nothing to stop.
 */
int crh_mhd_start(crh_mhd_server *m, const char *what, const char *host, uint16_t port,
                  const crh_mhd_config *cfg);

/**
 * Stop the gate and the daemon (never waits for a client) and release m.
 * Returns true then. libmicrohttpd's own shutdown is given CRH_MHD_STOP_MS:
 * when its workers have not ended by then (a handler that does not return;
 * before the gate counted slots at the hand-over, also a worker deadlocked
 * inside libmicrohttpd 0.9.75: see mhd_server.c) an error is logged, those threads are left
 * running, m is not released and false is returned: the caller must then also leave allocated
 * whatever the daemon's handlers use (m included), since a worker may still call them. This keeps a
 * SIGTERM'd server from hanging; it is meant for shutdown.
 */
#define CRH_MHD_STOP_MS 1500
bool crh_mhd_stop(crh_mhd_server *m);

/** Add the headers every response of a gated daemon carries ("Connection: close"). */
void crh_mhd_response_headers(struct MHD_Response *r);

void crh_mhd_stats_get(crh_mhd_server *m, crh_mhd_stats *out);

#endif
