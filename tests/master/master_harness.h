/*
 * master_harness.h - real crescent-master processes and fake-but-real client
 * processes (crescent-test-master-client) for the multi-process master tests.
 *
 * Design: a thin layer over the shared test harness (tests/testing): every
 * child is a ct_proc, recorded in one table with PR_SET_PDEATHSIG, so a
 * failing cmocka assertion (a longjmp out of the test) still ends with
 * mh_kill_all() in the test's teardown killing and reaping whatever is left; the normal paths stop
 * children themselves (mh_master_stop sends SIGTERM and returns the exit status, which tests check
 * is 0). Binary paths come from the environment (CTest sets them): CRESCENT_MASTER_BIN and
 * CRESCENT_MASTER_CLIENT_BIN. Everything listens on 127.0.0.1 with kernel-chosen ports unless a
 * test asks for a given port (restarting a master on the port it had).
 *
 * Not thread-safe: one test thread drives everything.
 */
#ifndef CRESCENT_TESTS_MASTER_HARNESS_H
#define CRESCENT_TESTS_MASTER_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "testing.h"

#define MH_LINE_MAX (512 * 1024)

typedef struct mh_master {
    ct_master cm;
    uint16_t port;         /* RPC */
    uint16_t metrics_port; /* /metrics, /health, ... */
    char addr[96];         /* "127.0.0.1:PORT" for clients */
} mh_master;

typedef struct mh_client {
    tt_child child;
    char id[40]; /* client id (hex) from its READY line */
    char *line;  /* the last reply line (MH_LINE_MAX bytes) */
} mh_client;

/*
 * Start crescent-master on 127.0.0.1 with --rpc_port=0 --metrics_port=0 and
 * then `args` (NULL-terminated; may be NULL; later flags win, so
 * "--rpc_port=N" picks a port). Waits for the ready line. Returns 0 or -1
 * (the reason on stderr; nothing left running).
 */
int mh_master_start(mh_master *m, const char *const *args);
/* mh_master_start with the master's stderr going to err_fd (a file the test reads). */
int mh_master_start_err(mh_master *m, const char *const *args, int err_fd);
/* SIGTERM and wait up to 10 s: the exit status (0 expected), or -1 if it had
 * to be killed or died of a signal. */
int mh_master_stop(mh_master *m);
/* SIGKILL and reap (a crash, for restart tests). */
void mh_master_kill(mh_master *m);

/* Start a client connected to master address `addr`. Returns 0 when READY. */
int mh_client_start(mh_client *c, const char *addr);
/* Send one command line and read the one reply line (c->line; "DEAD" if the
 * client is gone or silent for 30 s). */
const char *mh_cmd(mh_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* mh_cmd and return the reply's leading status (or -99999 for "DEAD"). */
int mh_cmd_st(mh_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "quit", wait: its exit status (0 expected), or -1. */
int mh_client_stop(mh_client *c);
/* SIGKILL and reap. */
void mh_client_kill(mh_client *c);

/* Kill and reap every child still running (test teardown). */
void mh_kill_all(void);

/* The status leading a reply line. */
int mh_status(const char *line);
/* Copy the value of " key=" in line into buf; returns buf, or NULL if absent. */
const char *mh_field(const char *line, const char *key, char *buf, size_t len);
/* Does the comma list `list` contain `item`? */
int mh_list_has(const char *list, const char *item);
/* Number of items in a comma list ("" has 0). */
int mh_list_len(const char *list);

/*
 * GET http://127.0.0.1:port/path over a raw socket (HTTP/1.0). Returns the
 * HTTP status code and a malloc'd NUL-terminated body in *body, or -1.
 */
int mh_http_get(uint16_t port, const char *path, char **body);
/* The value of the Prometheus sample whose line starts with `sample` followed
 * by a space (e.g. "master_key_count" or "master_requests_total{op=\"exist_key\"}");
 * -1 if absent. */
double mh_prom_value(const char *text, const char *sample);

/*
 * Run a program to completion (argv[0] is the path) with stdout and stderr
 * captured into out / err (NUL-terminated, truncated to the sizes), within
 * 10 s. Returns the exit status, or -1.
 */
int mh_run(const char *const *argv, char *out, size_t out_len, char *err, size_t err_len);

/* Connect a raw TCP socket to 127.0.0.1:port (blocking, 5 s timeouts). -1 on failure. */
int mh_connect_raw(uint16_t port);

/* Monotonic milliseconds. */
uint64_t mh_now_ms(void);
void mh_sleep_ms(unsigned ms);

/* Path of crescent-master (CRESCENT_MASTER_BIN). */
const char *mh_master_bin(void);

#endif
