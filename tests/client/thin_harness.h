/*
 * thin_harness.h - crescent-client processes for the thin-client tests, on
 * top of tests/store/store_harness.h (masters, crescent-test-store-client
 * children, child tracking and clean-up).
 *
 * A daemon is started with a socket name unique to the test process
 * (@crescent-test-<pid>-<n>), P2PHANDSHAKE metadata and an HTTP port the
 * kernel picks; its ready line gives the socket and the segment name.
 * Thin clients are crescent-test-store-client children started with
 * --thin <socket>. Binary paths come from CTest's environment:
 * CRESCENT_CLIENT_BIN (and the store harness's).
 *
 * Not thread-safe: one test thread drives the children.
 */
#ifndef CRESCENT_TESTS_THIN_HARNESS_H
#define CRESCENT_TESTS_THIN_HARNESS_H

#include <stdint.h>
#include <sys/types.h>

#include "store_harness.h"

typedef struct th_daemon {
    sh_proc p;
    char socket[96];
    char segment[300];
    uint16_t http_port;
} th_daemon;

/* Start crescent-client for master_addr on a fresh socket (socket NULL) or
 * on `socket` (a restart), with extra flags (NULL-terminated, may be NULL).
 * Waits up to 20 s for the ready line. 0 or -1 (nothing left running). */
int th_daemon_start(th_daemon *d, const char *master_addr, const char *socket,
                    const char *const *extra);
/* SIGTERM: exit status (0 expected), -1 if it did not exit in 20 s. */
int th_daemon_stop(th_daemon *d);
void th_daemon_kill(th_daemon *d);

/* A thin client of d (crescent-test-store-client --thin) with extra flags. */
int th_client_start(sh_client *c, const th_daemon *d, const char *const *extra);

/* Open descriptors of pid, or -1. */
int th_fd_count(pid_t pid);
/* pid's descriptors as "fd=target" words (sockets as "socket:[inode]"), truncated to len. */
void th_fd_list(pid_t pid, char *out, size_t len);
/* Bytes of pid's shared file mappings ("s" in /proc/pid/maps), or -1. */
long long th_shared_mapped(pid_t pid);
/* A metric of the daemon's /metrics ("name value"), or -1. */
double th_metric(const th_daemon *d, const char *name);

#endif
