/*
 * master_proc.c - see master_proc.h.
 */
#include "master_proc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGV 64

int ct_master_start(ct_master *m, const ct_master_opts *o)
{
    static const ct_master_opts defaults = {0};
    if (o == NULL)
        o = &defaults;
    memset(m, 0, sizeof(*m));
    ct_proc_init(&m->p);
    const char *bin = o->bin != NULL ? o->bin : getenv("CRESCENT_MASTER_BIN");
    if (bin == NULL)
        bin = "crescent-master";
    const char *host = o->host != NULL ? o->host : "127.0.0.1";
    char rpc_addr[96], metrics_host[96];
    snprintf(rpc_addr, sizeof(rpc_addr), "--rpc_address=%s", host);
    snprintf(metrics_host, sizeof(metrics_host), "--metrics_host=%s", host);
    const char *argv[MAX_ARGV];
    int n = 0;
    for (int i = 0; o->wrap != NULL && o->wrap[i] != NULL && n < MAX_ARGV - 8; i++)
        argv[n++] = o->wrap[i];
    argv[n++] = bin;
    argv[n++] = rpc_addr;
    argv[n++] = metrics_host;
    argv[n++] = "--rpc_port=0";
    argv[n++] = "--metrics_port=0";
    for (int i = 0; o->args != NULL && o->args[i] != NULL && n < MAX_ARGV - 1; i++)
        argv[n++] = o->args[i];
    argv[n] = NULL;
    ct_spawn_opts so = {.pipe_stdout = true, .search_path = true};
    if (o->log_path != NULL) {
        /* stdout is piped, so only stderr goes to the log */
        so.log_path = o->log_path;
    }
    if (ct_proc_spawn(&m->p, argv, &so) < 0) {
        perror("ct_master: spawning crescent-master");
        return -1;
    }
    char line[512], h1[64], h2[64];
    unsigned port = 0, mport = 0;
    int ready_ms = o->ready_ms > 0 ? o->ready_ms : 15000;
    if (ct_proc_wait_line(&m->p, "crescent-master listening on ", line, sizeof(line), ready_ms) <
            0 ||
        sscanf(line, "crescent-master listening on %63[^:]:%u (metrics %63[^:]:%u", h1, &port, h2,
               &mport) != 4 ||
        port == 0 || port > 65535 || mport > 65535) {
        fprintf(stderr, "ct_master: crescent-master did not start: '%s'\n", line);
        ct_proc_kill(&m->p);
        return -1;
    }
    m->port = (uint16_t)port;
    m->metrics_port = (uint16_t)mport;
    snprintf(m->host, sizeof(m->host), "%s", host);
    snprintf(m->addr, sizeof(m->addr), "%s:%u", host, port);
    return 0;
}

int ct_master_start_retry(ct_master *m, const ct_master_opts *o, int timeout_ms)
{
    uint64_t deadline = ct_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        if (ct_master_start(m, o) == 0)
            return 0;
        if (ct_now_ms() >= deadline)
            return -1;
        ct_sleep_ms(200);
    }
}

int ct_master_stop(ct_master *m, int timeout_ms)
{
    int st = ct_proc_stop(&m->p, SIGTERM, timeout_ms > 0 ? timeout_ms : 10000);
    if (st >= 128) {
        fprintf(stderr, "ct_master: crescent-master died of signal %d\n", st - 128);
        return -1;
    }
    return st;
}

void ct_master_kill(ct_master *m)
{
    ct_proc_kill(&m->p);
}

int ct_master_running(const ct_master *m)
{
    return m->p.pid > 0;
}
