/*
 * servers.h - real etcd and redis servers for tests: started on
 * kernel-chosen free ports on 127.0.0.1 with a private temporary data
 * directory, and always stopped (by the test, by an atexit handler if the
 * test fails out, and by PR_SET_PDEATHSIG if the test process is killed).
 *
 * A test whose server binary is missing exits 77 (skip) through
 * servers_require(), never passes.
 */
#ifndef CRESCENT_TESTS_METADATA_SERVERS_H
#define CRESCENT_TESTS_METADATA_SERVERS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define ETCD_BIN  "/usr/bin/etcd"
#define REDIS_BIN "/usr/bin/redis-server"

typedef enum { SERVER_ETCD, SERVER_REDIS } server_kind;

typedef struct test_server {
    server_kind kind;
    pid_t pid;
    char dir[128]; /* private data directory (removed by server_stop) */
    char name[32];
    uint16_t port;      /* client port */
    uint16_t peer_port; /* etcd only */
    char endpoint[64];  /* "127.0.0.1:<port>" */
    char cluster[1024]; /* etcd: the --initial-cluster value */
    char token[64];     /* etcd: the --initial-cluster-token (one per cluster) */
    bool registered;
} test_server;

/** Exit 77 (skip) when `bin` is not executable. */
void servers_require(const char *bin);

/** A port nobody listens on right now (bound then released). */
uint16_t test_free_port(void);

/** Start a single-member etcd. 0 when it answers /health. */
int etcd_start(test_server *s);

/**
 * Start an n-member etcd cluster (members[i] filled); 0 when every member
 * answers /health.
 */
int etcd_cluster_start(test_server *members, int n);

/** Start (again) with the same ports and data directory. */
int server_restart(test_server *s);

/** Start redis (no persistence). 0 when it answers PING. */
int redis_start(test_server *s);

/** SIGKILL and reap; the data directory stays (server_restart). */
void server_kill(test_server *s);

/** SIGSTOP / SIGCONT. */
void server_pause(test_server *s, bool paused);

/** SIGTERM (then SIGKILL after 5 s), reap, remove the data directory. */
void server_stop(test_server *s);

/** Remove the data directory's contents (the next start is a fresh server). */
void server_wipe(test_server *s);

/** Milliseconds since an arbitrary point (monotonic). */
uint64_t test_now_ms(void);

#endif
