/*
 * store_harness.c - see store_harness.h. A thin layer over tests/testing:
 * crescent-master through ct_master, store clients through tt_child (stderr
 * inherited, so CTest shows their logs).
 */
#include "store_harness.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t sh_now_ms(void)
{
    return ct_now_ms();
}

void sh_sleep_ms(int ms)
{
    ct_sleep_ms(ms);
}

static void master_fill(sh_master *m)
{
    m->port = m->cm.port;
    m->metrics_port = m->cm.metrics_port;
    snprintf(m->addr, sizeof(m->addr), "%s", m->cm.addr);
}

int sh_master_start(sh_master *m, const char *const *args)
{
    memset(m, 0, sizeof(*m));
    ct_master_opts o = {
        .bin = tt_bin("CRESCENT_MASTER_BIN", "crescent-master"), .args = args, .ready_ms = 10000};
    if (ct_master_start(&m->cm, &o) < 0)
        return -1;
    master_fill(m);
    return 0;
}

int sh_master_start_retry(sh_master *m, const char *const *args, int timeout_ms)
{
    memset(m, 0, sizeof(*m));
    ct_master_opts o = {
        .bin = tt_bin("CRESCENT_MASTER_BIN", "crescent-master"), .args = args, .ready_ms = 10000};
    if (ct_master_start_retry(&m->cm, &o, timeout_ms) < 0)
        return -1;
    master_fill(m);
    return 0;
}

int sh_master_stop(sh_master *m)
{
    return ct_master_stop(&m->cm, 10000);
}

void sh_master_kill(sh_master *m)
{
    ct_master_kill(&m->cm);
}

int sh_client_start(sh_client *c, const char *master_addr, const char *const *args)
{
    const char *argv[48] = {tt_bin("CRESCENT_STORE_CLIENT_BIN", "crescent-test-store-client"),
                            "--master", master_addr};
    int argc = 3;
    for (int i = 0; args != NULL && args[i] != NULL && argc < 47; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    memset(c, 0, sizeof(*c));
    int rc = tt_child_start(&c->child, argv, SH_LINE_MAX, 20000);
    c->line = c->child.line;
    if (rc < 0)
        return -1; /* c->line: what it printed instead of READY */
    snprintf(c->name, sizeof(c->name), "%s", c->child.name);
    return 0;
}

static const char *vcmd(sh_client *c, const char *fmt, va_list ap)
{
    c->line = tt_child_vcmd(&c->child, 60000, fmt, ap);
    return c->line;
}

const char *sh_cmd(sh_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = vcmd(c, fmt, ap);
    va_end(ap);
    return r;
}

long long sh_rc(sh_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = vcmd(c, fmt, ap);
    va_end(ap);
    if (strcmp(r, "DEAD") == 0)
        return SH_DEAD;
    return strtoll(r, NULL, 10);
}

long long sh_field(const char *line, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(line, name); p != NULL; p = strstr(p + 1, name)) {
        if ((p == line || p[-1] == ' ') && p[n] == '=')
            return strtoll(p + n + 1, NULL, 10);
    }
    return -1;
}

int sh_client_stop(sh_client *c)
{
    int st = tt_child_stop(&c->child, 20000);
    c->line = "DEAD";
    return st;
}

void sh_client_kill(sh_client *c)
{
    tt_child_kill(&c->child);
    c->line = "DEAD";
}

void sh_kill_all(void)
{
    ct_proc_kill_all();
}

int sh_http_get(uint16_t port, const char *path, char *out, size_t cap)
{
    char *body = NULL;
    int status = tt_http_get(NULL, port, path, &body);
    snprintf(out, cap, "%s", body != NULL ? body : "");
    free(body);
    return status;
}

double sh_metric(const sh_master *m, const char *name)
{
    char *body = NULL;
    double v = -1;
    if (tt_http_get(NULL, m->metrics_port, "/metrics", &body) == 200)
        v = tt_prom_value(body, name);
    free(body);
    return v;
}

uint16_t sh_closed_port(void)
{
    uint16_t port = ct_free_port(NULL);
    return port != 0 ? port : 1;
}

/* --- other helper processes ---------------------------------------------------- */

int sh_proc_spawn(sh_proc *p, const char *bin, const char *const *argv, int want_stdin)
{
    p->line[0] = '\0';
    ct_spawn_opts o = {.exe = bin, .pipe_stdin = want_stdin != 0, .pipe_stdout = true};
    return ct_proc_spawn(&p->proc, argv, &o);
}

int sh_proc_read_line(sh_proc *p, int timeout_ms)
{
    return ct_proc_read_line(&p->proc, p->line, sizeof(p->line), timeout_ms);
}

int sh_proc_signal_stop(sh_proc *p, int sig, int timeout_ms)
{
    int st = ct_proc_stop(&p->proc, sig, timeout_ms);
    return st >= 128 ? -1 : st;
}

void sh_proc_kill(sh_proc *p)
{
    ct_proc_kill(&p->proc);
}

int sh_send(sh_client *c, const char *fmt, ...)
{
    char cmd[SH_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(cmd) || c->child.proc.pid <= 0)
        return -1;
    return ct_proc_send(&c->child.proc, cmd);
}

const char *sh_recv(sh_client *c, int timeout_ms)
{
    if (c->child.line == NULL || c->child.proc.pid <= 0 ||
        ct_proc_read_line(&c->child.proc, c->child.line, c->child.line_cap, timeout_ms) < 0)
        c->line = "DEAD";
    else
        c->line = c->child.line;
    return c->line;
}
