/* master_harness.c - see master_harness.h. */
#include "master_harness.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mh_kill_all(void)
{
    ct_proc_kill_all();
}

uint64_t mh_now_ms(void)
{
    return ct_now_ms();
}

void mh_sleep_ms(unsigned ms)
{
    ct_sleep_ms((int)ms);
}

const char *mh_master_bin(void)
{
    return tt_bin("CRESCENT_MASTER_BIN", "crescent-master");
}

/* --- master ------------------------------------------------------------------ */

int mh_master_start(mh_master *m, const char *const *args)
{
    return mh_master_start_err(m, args, -1);
}

int mh_master_start_err(mh_master *m, const char *const *args, int err_fd)
{
    memset(m, 0, sizeof(*m));
    char log_path[64];
    ct_master_opts o = {.bin = mh_master_bin(), .args = args, .ready_ms = 15000};
    if (err_fd >= 0) { /* the child opens the file it inherited */
        snprintf(log_path, sizeof(log_path), "/proc/self/fd/%d", err_fd);
        o.log_path = log_path;
    }
    if (ct_master_start(&m->cm, &o) < 0)
        return -1;
    m->port = m->cm.port;
    m->metrics_port = m->cm.metrics_port;
    snprintf(m->addr, sizeof(m->addr), "%s", m->cm.addr);
    return 0;
}

int mh_master_stop(mh_master *m)
{
    return ct_master_stop(&m->cm, 10000);
}

void mh_master_kill(mh_master *m)
{
    ct_master_kill(&m->cm);
}

/* --- clients ------------------------------------------------------------------ */

int mh_client_start(mh_client *c, const char *addr)
{
    memset(c, 0, sizeof(*c));
    const char *argv[] = {tt_bin("CRESCENT_MASTER_CLIENT_BIN", "crescent-test-master-client"), addr,
                          NULL};
    int rc = tt_child_start(&c->child, argv, MH_LINE_MAX, 15000);
    c->line = c->child.line;
    if (rc < 0) {
        mh_client_kill(c);
        return -1;
    }
    snprintf(c->id, sizeof(c->id), "%.39s", c->child.name);
    return 0;
}

static const char *vcmd(mh_client *c, const char *fmt, va_list ap)
{
    static char dead[] = "DEAD";
    if (c->line == NULL)
        return dead;
    return tt_child_vcmd(&c->child, 30000, fmt, ap);
}

const char *mh_cmd(mh_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = vcmd(c, fmt, ap);
    va_end(ap);
    return r;
}

int mh_cmd_st(mh_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *r = vcmd(c, fmt, ap);
    va_end(ap);
    return mh_status(r);
}

int mh_client_stop(mh_client *c)
{
    int st = tt_child_stop(&c->child, 10000);
    c->line = NULL;
    return st;
}

void mh_client_kill(mh_client *c)
{
    tt_child_kill(&c->child);
    c->line = NULL;
}

/* --- reply parsing ------------------------------------------------------------ */

int mh_status(const char *line)
{
    if (line == NULL || strncmp(line, "DEAD", 4) == 0)
        return -99999;
    return atoi(line);
}

const char *mh_field(const char *line, const char *key, char *buf, size_t len)
{
    char pat[64];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *p = strstr(line, pat);
    if (p == NULL)
        return NULL;
    p += strlen(pat);
    size_t n = strcspn(p, " ");
    if (n >= len)
        n = len - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

int mh_list_has(const char *list, const char *item)
{
    size_t il = strlen(item);
    for (const char *p = list; p != NULL && *p != '\0';) {
        size_t n = strcspn(p, ",");
        if (n == il && strncmp(p, item, il) == 0)
            return 1;
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

int mh_list_len(const char *list)
{
    if (list == NULL || *list == '\0')
        return 0;
    int n = 1;
    for (const char *p = list; *p != '\0'; p++)
        n += *p == ',';
    return n;
}

/* --- raw sockets, HTTP, run to completion -------------------------------------- */

int mh_connect_raw(uint16_t port)
{
    return tt_connect(NULL, port);
}

int mh_http_get(uint16_t port, const char *path, char **body)
{
    return tt_http_get(NULL, port, path, body);
}

double mh_prom_value(const char *text, const char *sample)
{
    return tt_prom_value(text, sample);
}

int mh_run(const char *const *argv, char *out, size_t out_len, char *err, size_t err_len)
{
    int st = ct_run(argv, out, out_len, err, err_len, 10000);
    return st >= 128 ? -1 : st;
}
