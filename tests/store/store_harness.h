/*
 * store_harness.h - real crescent-master processes and store client
 * processes (crescent-test-store-client) for the multi-process store tests,
 * over the shared test harness (tests/testing/testing.h).
 *
 * Design: every child is a ct_proc (PR_SET_PDEATHSIG(SIGKILL), recorded in
 * one table), so a failing cmocka assertion (a longjmp out of the test)
 * still ends with sh_kill_all() in the teardown killing and reaping
 * whatever is left, and a crashed test process leaves nothing behind. The
 * normal paths stop children themselves: sh_master_stop sends SIGTERM and
 * returns the exit status, sh_client_stop sends "quit"; tests check both
 * are 0. Binary paths come from the environment (CTest sets them):
 * CRESCENT_MASTER_BIN and CRESCENT_STORE_CLIENT_BIN. Everything listens on
 * 127.0.0.1 with kernel-chosen ports unless a test restarts a master on the
 * port it had.
 *
 * Not thread-safe: one test thread drives the children.
 */
#ifndef CRESCENT_TESTS_STORE_HARNESS_H
#define CRESCENT_TESTS_STORE_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "testing.h"

#define SH_LINE_MAX 8192
#define SH_DEAD     (-99999) /* sh_rc of a reply from a dead or silent child */

/* Any other helper process (crescent-client in tests/client). */
typedef struct sh_proc {
    ct_proc proc;
    char line[SH_LINE_MAX]; /* the last line read */
} sh_proc;

typedef struct sh_master {
    ct_master cm;
    uint16_t port, metrics_port;
    char addr[96]; /* "127.0.0.1:PORT" */
} sh_master;

typedef struct sh_client {
    tt_child child;
    char name[300];   /* its segment name, from READY */
    const char *line; /* the last reply line ("DEAD" once it is gone) */
} sh_client;

/*
 * Start crescent-master on 127.0.0.1 with --rpc_port=0 --metrics_port=0 and
 * then `args` (NULL-terminated, may be NULL; later flags win, so
 * "--rpc_port=N" picks a port). Waits up to 10 s for the ready line. Returns
 * 0, or -1 (reason on stderr; nothing left running).
 */
int sh_master_start(sh_master *m, const char *const *args);
/* Like sh_master_start, retried for up to timeout_ms while the port is busy. */
int sh_master_start_retry(sh_master *m, const char *const *args, int timeout_ms);
/* SIGTERM and wait up to 10 s: exit status (0 expected), -1 if killed/signalled. */
int sh_master_stop(sh_master *m);
/* SIGKILL and reap. */
void sh_master_kill(sh_master *m);

/* Start a store client of `master_addr` with extra flags (NULL-terminated,
 * may be NULL). Returns 0 when it printed READY; -1 otherwise (its FAIL line
 * is in c->line). */
int sh_client_start(sh_client *c, const char *master_addr, const char *const *args);
/* Send one command, read the one reply line (c->line, "DEAD" on EOF or
 * after 60 s of silence). */
const char *sh_cmd(sh_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* sh_cmd, then the reply's leading integer (SH_DEAD for "DEAD"). */
long long sh_rc(sh_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Value of "name=<int>" in a reply line, or -1 if absent. */
long long sh_field(const char *line, const char *name);
/* "quit" and wait up to 20 s: exit status (0 expected), -1 otherwise. */
int sh_client_stop(sh_client *c);
/* SIGKILL and reap. */
void sh_client_kill(sh_client *c);

/* Kill and reap every child still running (teardown after a failure). */
void sh_kill_all(void);

/* Any binary as a tracked child (argv[0] = bin, NULL-terminated): stdout
 * piped, stdin piped if want_stdin. 0 or -1. */
int sh_proc_spawn(sh_proc *p, const char *bin, const char *const *argv, int want_stdin);
/* One line of its stdout into p->line within timeout_ms; 0 or -1. */
int sh_proc_read_line(sh_proc *p, int timeout_ms);
/* Send sig, wait up to timeout_ms: exit status, -1 if it did not exit (then
 * killed) or died of a signal. */
int sh_proc_signal_stop(sh_proc *p, int sig, int timeout_ms);
/* SIGKILL and reap. */
void sh_proc_kill(sh_proc *p);

/* Send one command without reading its reply (several clients at once);
 * sh_recv reads it later ("DEAD" on EOF or timeout). */
int sh_send(sh_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *sh_recv(sh_client *c, int timeout_ms);

/* GET http://127.0.0.1:port/path; the body into out (NUL-terminated).
 * Returns the HTTP status or -1. */
int sh_http_get(uint16_t port, const char *path, char *out, size_t cap);
/* A gauge from the master's /metrics ("name value"), or -1. */
double sh_metric(const sh_master *m, const char *name);

/* A 127.0.0.1 port nothing listens on (bound, then closed). */
uint16_t sh_closed_port(void);

/* Milliseconds of a monotonic clock; sleep ms. */
uint64_t sh_now_ms(void);
void sh_sleep_ms(int ms);

#endif
