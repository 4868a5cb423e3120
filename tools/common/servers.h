/*
 * servers.h - real etcd and redis servers for the tests and the metadata
 * bench: started on kernel-chosen free ports on 127.0.0.1 with a private
 * temporary data directory, and always stopped (by the caller, by an atexit
 * handler if a test fails out, and by PR_SET_PDEATHSIG if the process is
 * killed: they are ct_proc children, proc.h).
 *
 * Readiness is probed over a plain socket (GET /health for etcd, PING for
 * redis), so nothing here depends on the code under test. A server that
 * exits during start-up (a port taken between ct_free_port and its bind) is
 * retried on fresh ports, three times.
 *
 * Not thread-safe: one thread starts and stops servers.
 */
#ifndef CRESCENT_TOOLS_SERVERS_H
#define CRESCENT_TOOLS_SERVERS_H

#include <stdbool.h>
#include <stdint.h>

#include "proc.h"

#define CT_ETCD_BIN  "/usr/bin/etcd"
#define CT_REDIS_BIN "/usr/bin/redis-server"

typedef enum { CT_SERVER_ETCD, CT_SERVER_REDIS } ct_server_kind;

typedef struct ct_server {
    ct_server_kind kind;
    ct_proc proc;
    char bin[256]; /* the executable */
    char dir[128]; /* private data directory (removed by ct_server_stop) */
    char name[32];
    uint16_t port;      /* client port */
    uint16_t peer_port; /* etcd only */
    char endpoint[64];  /* "127.0.0.1:<port>" */
    char cluster[1024]; /* etcd: the --initial-cluster value */
    char token[64];     /* etcd: the --initial-cluster-token (one per cluster) */
    bool registered;
} ct_server;

/** Start a single-member etcd (bin NULL: CT_ETCD_BIN). 0 when it answers /health. */
int ct_etcd_start(ct_server *s, const char *bin);

/**
 * Start an n-member etcd cluster (members[i] filled); 0 when every member
 * answers /health.
 */
int ct_etcd_cluster_start(ct_server *members, int n, const char *bin);

/** Start redis (no persistence; bin NULL: CT_REDIS_BIN). 0 when it answers PING. */
int ct_redis_start(ct_server *s, const char *bin);

/** Start (again) with the same ports and data directory. */
int ct_server_restart(ct_server *s);

/** SIGKILL and reap; the data directory stays (ct_server_restart). */
void ct_server_kill(ct_server *s);

/** SIGSTOP (returning once the server is stopped, up to 2 s) / SIGCONT. */
void ct_server_pause(ct_server *s, bool paused);

/** SIGTERM (then SIGKILL after 5 s), reap, remove the data directory. */
void ct_server_stop(ct_server *s);

/** Remove the data directory's contents (the next start is a fresh server). */
void ct_server_wipe(ct_server *s);

/** Is the server running (started and not yet stopped or killed)? */
bool ct_server_running(const ct_server *s);

#endif
