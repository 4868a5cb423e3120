/*
 * testing.h - what every multi-process test shares (library
 * crescent_testing, tests/testing/).
 *
 * The spawner itself, crescent-master children and etcd/redis servers live
 * in tools/common (proc.h, master_proc.h, servers.h: crescent_tool_util,
 * linked by crescent_testing) because the tools (crescent-demo,
 * crescent-bench) start the same processes; this header adds the test-only
 * conventions on top: binaries named by CTest's environment, skipping with
 * exit 77, a teardown that leaves no child behind, and plain-socket HTTP
 * to read a daemon's /metrics and /health without the code under test.
 *
 * The driver protocol of the test helper programs (crescent-test-peer,
 * crescent-test-store-client, crescent-test-master-client) is one command
 * line on stdin, one reply line on stdout, "READY <name>" first: tt_child
 * speaks it.
 *
 * Not thread-safe: one test thread drives the children.
 */
#ifndef CRESCENT_TESTS_TESTING_H
#define CRESCENT_TESTS_TESTING_H

#include <stdarg.h>
#include <sys/types.h>
#include <stddef.h>
#include <stdint.h>

#include "master_proc.h"
#include "proc.h"
#include "servers.h"

#define TT_SKIP 77 /* CTest's SKIP_RETURN_CODE (cmake/crescent.cmake cr_test) */

/* The path in environment variable `env` (CTest sets it), else `fallback`. */
const char *tt_bin(const char *env, const char *fallback);
/* Print "skipped: <why>" and exit 77. */
void tt_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* tt_skip unless `path` is executable. */
void tt_require_exe(const char *path);
/* Kill and reap every child still running; a cmocka setup/teardown. */
int tt_teardown(void **state);

/* --- helper programs driven over stdin/stdout ---------------------------- */

typedef struct tt_child {
    ct_proc proc;
    char *line;        /* the last line read (line_cap bytes) */
    size_t line_cap;   /* set by tt_child_start */
    char name[300];    /* what followed "READY " */
    char failed[1024]; /* what a child that did not start printed (c->line then) */
} tt_child;

/*
 * Start argv with stdin and stdout piped and wait up to ready_ms for its
 * "READY <name>" line. line_cap: the reply buffer's size (malloc'd, freed
 * when the child is stopped or killed). Returns 0, or -1 with the line it
 * printed instead (e.g. "FAIL ...") in c->line (c->failed: nothing to free)
 * and nothing left running.
 */
int tt_child_start(tt_child *c, const char *const *argv, size_t line_cap, int ready_ms);
/* Send a printf-formatted command, read one reply into c->line within
 * timeout_ms; "DEAD" when the child is gone, closed its stdout or was
 * silent that long. Returns c->line. */
const char *tt_child_vcmd(tt_child *c, int timeout_ms, const char *fmt, va_list ap);
const char *tt_child_cmd(tt_child *c, int timeout_ms, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "quit" and wait up to timeout_ms: its exit status (0 expected), -1 if it
 * had to be killed. */
int tt_child_stop(tt_child *c, int timeout_ms);
/* SIGKILL and reap. */
void tt_child_kill(tt_child *c);
/* SIGSTOP pid and wait (up to 2 s) until /proc says it is stopped: the
 * signal takes effect asynchronously, after kill() returns. 0, or -1 if
 * it did not stop in time. */
int tt_stop_process(pid_t pid);

/* --- plain sockets --------------------------------------------------------- */

/* Connect a SEQPACKET socket, as any same-uid process could, to the
 * abstract Unix socket listed in /proc/net/unix whose name starts with
 * `prefix` (e.g. "@crescent-<pid>-"), with a 5 s receive timeout; the fd,
 * or -1 when none is listed or the connect fails. */
int tt_connect_abstract(const char *prefix);
/* Connect a TCP socket to host:port (host NULL = 127.0.0.1) with 5 s send
 * and receive timeouts and TCP_NODELAY; the fd or -1. */
int tt_connect(const char *host, uint16_t port);
/*
 * GET http://host:port/path (HTTP/1.0, Connection: close). Returns the HTTP
 * status and the body in *body (malloc'd, NUL-terminated; the caller frees
 * it), or -1 with *body NULL.
 */
int tt_http_get(const char *host, uint16_t port, const char *path, char **body);
/* The value of the Prometheus sample whose line starts with `sample` and a
 * space (e.g. "master_key_count"); -1 if absent. */
double tt_prom_value(const char *text, const char *sample);

#endif
