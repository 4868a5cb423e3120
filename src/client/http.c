/*
 * http.c - crescent-client's optional HTTP port (--enable_http_server,
 * --http_port, Mooncake's client metrics port): GET /metrics in
 * Prometheus text, GET /health (200 "ok" when the master answers and the
 * segment is mounted, else 503 with the reason). Bodiless GETs answered on
 * their first callback, as the master's admin port does.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "base/error.h"
#include "base/log.h"
#include "client/daemon.h"

typedef struct text {
    char *p;
    size_t len, cap;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (t->p != NULL && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t ncap = (t->cap ? t->cap * 2 : 4096) + (size_t)n;
        char *np = realloc(t->p, ncap);
        if (np == NULL)
            return;
        t->p = np;
        t->cap = ncap;
    }
}

static void metric(text *t, const char *name, const char *type, const char *help, uint64_t v)
{
    add(t, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
        (unsigned long long)v);
}

char *crs_metrics_text(crs_daemon *d)
{
    text t = {0};
    pthread_mutex_lock(&d->lock);
    size_t sessions = d->n_sessions, conns = d->n_conns;
    pthread_mutex_unlock(&d->lock);
    metric(&t, "crescent_client_thin_clients", "gauge", "thin client sessions served now",
           sessions);
    metric(&t, "crescent_client_connections", "gauge", "open thin-client connections", conns);
    metric(&t, "crescent_client_mapped_bytes", "gauge",
           "thin clients' memory mapped now (pools, regions, transient values)",
           atomic_load(&d->mapped_bytes));
    metric(&t, "crescent_client_local_buffer_bytes", "gauge",
           "bytes of thin clients' local buffers holding values not yet copied out",
           atomic_load(&d->lb_used));
    metric(&t, "crescent_client_regions", "gauge", "registered thin-client regions mapped now",
           atomic_load(&d->regions));
    metric(&t, "crescent_client_sessions_opened_total", "counter", "sessions opened",
           atomic_load(&d->ctr.sessions_opened));
    metric(&t, "crescent_client_sessions_closed_total", "counter",
           "sessions ended (last connection closed, e.g. the client exited or was killed)",
           atomic_load(&d->ctr.sessions_closed));
    metric(&t, "crescent_client_connections_refused_total", "counter",
           "connections refused by SO_PEERCRED", atomic_load(&d->ctr.connections_refused));
    metric(&t, "crescent_client_auth_failures_total", "counter", "wrong or missing shared secret",
           atomic_load(&d->ctr.auth_failures));
    metric(&t, "crescent_client_protocol_errors_total", "counter",
           "malformed frames or bodies from thin clients", atomic_load(&d->ctr.protocol_errors));
    metric(&t, "crescent_client_zero_copy_bytes_total", "counter",
           "value bytes moved in place in thin clients' memory",
           atomic_load(&d->ctr.zero_copy_bytes));
    metric(&t, "crescent_client_local_buffer_out_bytes_total", "counter",
           "value bytes of copying gets placed in local buffers",
           atomic_load(&d->ctr.copied_out_bytes));
    metric(&t, "crescent_client_transient_bytes_total", "counter",
           "bytes of values passed through transient memfds (too large for the pools)",
           atomic_load(&d->ctr.transient_bytes));
    metric(&t, "crescent_client_revoked_tables_total", "counter",
           "session tables of ended sessions destroyed (their open puts revoked)",
           atomic_load(&d->ctr.revoked_tables));
    add(&t, "# HELP crescent_client_calls_total thin-client requests by op\n"
            "# TYPE crescent_client_calls_total counter\n");
    for (int op = 0; op < 64; op++) {
        uint64_t v = atomic_load(&d->ctr.calls[op]);
        if (v > 0)
            add(&t, "crescent_client_calls_total{op=\"%s\"} %llu\n", crp_thin_op_name(op),
                (unsigned long long)v);
    }
    add(&t, "# HELP crescent_client_call_failures_total failed thin-client requests by op\n"
            "# TYPE crescent_client_call_failures_total counter\n");
    for (int op = 0; op < 64; op++) {
        uint64_t v = atomic_load(&d->ctr.failures[op]);
        if (v > 0)
            add(&t, "crescent_client_call_failures_total{op=\"%s\"} %llu\n", crp_thin_op_name(op),
                (unsigned long long)v);
    }
    add(&t, "# HELP crescent_client_call_seconds_total time spent serving thin-client "
            "requests by op (decoded request to queued reply)\n"
            "# TYPE crescent_client_call_seconds_total counter\n");
    for (int op = 0; op < 64; op++) {
        uint64_t v = atomic_load(&d->ctr.busy_ns[op]);
        if (v > 0)
            add(&t, "crescent_client_call_seconds_total{op=\"%s\"} %.9f\n", crp_thin_op_name(op),
                (double)v / 1e9);
    }
    cr_engine *e = cr_store_engine(d->store);
    size_t total = 0;
    if (e != NULL && cr_engine_counters(e, NULL, 0, &total) == 0 && total > 0) {
        cr_engine_counter *c = calloc(total, sizeof(*c));
        if (c != NULL && cr_engine_counters(e, c, total, &total) == 0) {
            add(&t, "# HELP crescent_client_engine engine and transport counters\n"
                    "# TYPE crescent_client_engine counter\n");
            for (size_t i = 0; i < total; i++)
                add(&t, "crescent_client_engine{transport=\"%s\",name=\"%s\"} %llu\n",
                    c[i].transport, c[i].name, (unsigned long long)c[i].value);
        }
        free(c);
    }
    return t.p;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned int status, char *body,
                             const char *type)
{
    struct MHD_Response *r =
        body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE)
             : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_len, void **req_cls)
{
    crs_daemon *d = cls;
    (void)version;
    (void)data;
    (void)data_len;
    (void)req_cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, "text/plain");
    if (strcmp(url, "/metrics") == 0)
        return reply(conn, MHD_HTTP_OK, crs_metrics_text(d), "text/plain; version=0.0.4");
    if (strcmp(url, "/health") == 0) {
        int rc = cr_store_health(d->store);
        char *body = malloc(640);
        if (body != NULL)
            snprintf(body, 640, rc == 0 ? "ok\n" : "unhealthy: %s: %s\n", cr_status_name(rc),
                     cr_last_error_message());
        return reply(conn, rc == 0 ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, body,
                     "text/plain");
    }
    return reply(conn, MHD_HTTP_NOT_FOUND, NULL, "text/plain");
}

int crs_http_start(crs_daemon *d)
{
    crh_mhd_config mc = {.threads = 1,
                         .connection_limit = 64,
                         .idle_timeout_s = 30,
                         .on_request = on_request,
                         .request_cls = d};
    int rc =
        crh_mhd_start(&d->http, "crescent-client http", d->cfg.http_host, d->cfg.http_port, &mc);
    if (rc == 0)
        d->http_running = true;
    return rc;
}

bool crs_http_stop(crs_daemon *d)
{
    bool stopped = !d->http_running || crh_mhd_stop(&d->http);
    if (!stopped)
        crb_log(CRB_LOG_WARN, "the client's http server was left to the process exit");
    d->http_running = false;
    return stopped;
}
