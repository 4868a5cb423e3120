/*
 * master_proc.h - a crescent-master child process for the tests and the
 * tools (crescent-demo, crescent-bench store/master/soak): started on
 * kernel-chosen ports, ready when it printed its "listening" line, stopped
 * with SIGTERM and then SIGKILL after a bound. Built on proc.h, so the
 * master dies with its parent (PR_SET_PDEATHSIG) and ct_proc_kill_all
 * reaches it.
 *
 * Not thread-safe per ct_master; different masters may be driven from
 * different threads.
 */
#ifndef CRESCENT_TOOLS_MASTER_PROC_H
#define CRESCENT_TOOLS_MASTER_PROC_H

#include <stdint.h>

#include "proc.h"

typedef struct ct_master_opts {
    const char *bin;  /* crescent-master; NULL = $CRESCENT_MASTER_BIN, else PATH */
    const char *host; /* --rpc_address and --metrics_host; NULL = 127.0.0.1 */
    /* Extra flags after the defaults (--rpc_port=0 --metrics_port=0), so a
     * later "--rpc_port=N" wins; NULL-terminated, may be NULL. */
    const char *const *args;
    /* Run under this command (e.g. {"ip", "netns", "exec", "ns", NULL}):
     * the master's argv is appended; NULL-terminated, may be NULL. */
    const char *const *wrap;
    const char *log_path; /* its stderr appended here; NULL = inherited */
    int ready_ms;         /* wait for the ready line (0 = 15 s) */
} ct_master_opts;

typedef struct ct_master {
    ct_proc p; /* stdout piped (the ready line), stdin /dev/null */
    uint16_t port, metrics_port;
    char host[64];
    char addr[96]; /* "host:port" for clients */
} ct_master;

/*
 * Start a master. Returns 0 when it printed "crescent-master listening on
 * H:P (metrics H:P" in time, else -1 (the reason on stderr; nothing is
 * left running).
 */
int ct_master_start(ct_master *m, const ct_master_opts *o);
/* ct_master_start, retried every 200 ms for up to timeout_ms while it fails
 * (a fixed --rpc_port still held by the previous master). */
int ct_master_start_retry(ct_master *m, const ct_master_opts *o, int timeout_ms);
/* SIGTERM, wait up to timeout_ms (0 = 10 s), then SIGKILL: its exit status
 * (0 expected), or -1 if it had to be killed or died of a signal. */
int ct_master_stop(ct_master *m, int timeout_ms);
/* SIGKILL and reap (a crash, for restart tests). */
void ct_master_kill(ct_master *m);
/* Is it running? */
int ct_master_running(const ct_master *m);

#endif
