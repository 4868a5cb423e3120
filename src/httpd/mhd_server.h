/*
 * mhd_server.h - starting and stopping a libmicrohttpd daemon the way every
 * crescent HTTP endpoint does (the metadata server, the master's admin
 * port): resolve the host, listen with a small internal thread pool,
 * connection limit and idle timeout, report the bound port (0 = chosen by
 * the kernel), and turn a failure into CR_ERR_BIND with libmicrohttpd's own
 * last log line.
 *
 * Threading: start and stop from one thread; the request handlers run on
 * the daemon's threads.
 */
#ifndef CRESCENT_METADATA_MHD_SERVER_H
#define CRESCENT_METADATA_MHD_SERVER_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>

/* A daemon and what its logger keeps; embed it in the server object (it
 * must not move while the daemon runs). */
typedef struct crh_mhd_server {
    struct MHD_Daemon *daemon;
    uint16_t port;            /* bound port once started */
    const char *what;         /* "metadata server" (static string, for messages) */
    pthread_mutex_t log_lock; /* guards last_error */
    char last_error[200];     /* libmicrohttpd's last log line */
} crh_mhd_server;

typedef struct crh_mhd_config {
    unsigned threads;
    unsigned connection_limit;
    unsigned idle_timeout_s;
    MHD_AccessHandlerCallback on_request;
    void *request_cls;
    MHD_RequestCompletedCallback on_completed; /* may be NULL */
    void *completed_cls;
} crh_mhd_config;

/**
 * Listen on host:port and serve with cfg. 0 on success (m->port set, an
 * info line logged); otherwise the status (bad host, CR_ERR_BIND with the
 * reason) and m holds nothing to stop.
 */
int crh_mhd_start(crh_mhd_server *m, const char *what, const char *host, uint16_t port,
                  const crh_mhd_config *cfg);

/** Stop the daemon (waits for its threads) and release m's lock. */
void crh_mhd_stop(crh_mhd_server *m);

#endif
