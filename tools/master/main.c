/*
 * crescent-master - the store's metadata server.
 *
 * Wires the pieces together: flags (Mooncake's names, master/flags.h), the
 * in-memory service (master/service.h), the RPC server (rpc_server.h), the
 * admin HTTP server on the metrics port (/metrics, /health,
 * /get_all_segments, /query_key; JSON through jansson), the embedded HTTP
 * metadata server when enabled, and a housekeeping thread that ticks the
 * service every 100 ms (client expiry, deferred releases, stale puts,
 * watermark eviction) and, with --enable_metric_reporting, logs a metrics
 * summary every --metric_report_interval_sec (10 s).
 *
 * Every flag takes effect: a value that cannot be used (unknown
 * --rpc_interface, a bad combination) is refused with exit 2 before
 * anything starts; exit 1 means a resource was unavailable (port taken).
 * SIGTERM / SIGINT shut everything down cleanly (exit 0).
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "master/admin_http.h"
#include "master/flags.h"
#include "master/offload.h"
#include "master/prom.h"
#include "master/rpc_server.h"
#include "master/service.h"
#include "master/tenants.h"
#include "mdserver/http_server.h"

#define SOFTWARE "crescent-master 0.1.0"
#define TICK_MS  100

typedef struct master {
    crk_master_options opt;
    char rpc_host[CRB_HOST_MAX]; /* --rpc_address, or the address of --rpc_interface */
    unsigned rpc_threads;
    crk_service *svc;
    crk_rpc_server *rpc;
    crk_admin_http *admin;
    crd_http_server *metadata;
    crk_server_info info;
    pthread_t ticker;
    bool ticker_running;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    bool stop;
    uint64_t started_ms;
} master;

/* --- housekeeping ---------------------------------------------------------- */

/* The --enable_metric_reporting line (Mooncake's "Master Metrics" summary). */
static void report(master *m, const crk_stats *st, const crk_stats *last, uint64_t interval_ms)
{
    uint64_t req = 0, last_req = 0, fail = 0;
    for (int op = 0; op < CRK_OP_COUNT; op++) {
        req += st->requests[op];
        last_req += last->requests[op];
        fail += st->failures[op];
    }
    crk_rpc_server_stats rs;
    crk_rpc_server_stats_get(m->rpc, &rs);
    crb_log(CRB_LOG_INFO,
            "master metrics: cluster=%s clients=%" PRIu64 " segments=%" PRIu64 " keys=%" PRIu64
            " capacity=%" PRIu64 " allocated=%" PRIu64 " deferred=%" PRIu64 " connections=%" PRIu64
            " requests=%" PRIu64 " (%.0f/s) failures=%" PRIu64 " evicted_keys=%" PRIu64
            " expired_clients=%" PRIu64,
            m->opt.cluster_id, st->clients, st->segments, st->keys, st->capacity_bytes,
            st->allocated_bytes, st->discarded_bytes, rs.connections_open, req,
            interval_ms ? (double)(req - last_req) * 1000.0 / (double)interval_ms : 0.0, fail,
            st->evicted_keys, st->clients_expired);
}

/* Sleep until `until_ms` or a stop request; false when stopping. */
static bool wait_until(master *m, uint64_t until_ms)
{
    pthread_mutex_lock(&m->stop_lock);
    while (!m->stop) {
        uint64_t now = crb_now_ms();
        if (now >= until_ms)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (until_ms - now) * 1000000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        pthread_cond_timedwait(&m->stop_cond, &m->stop_lock, &ts);
    }
    bool go_on = !m->stop;
    pthread_mutex_unlock(&m->stop_lock);
    return go_on;
}

static void *tick_main(void *arg)
{
    master *m = arg;
    crk_stats last = {0}, reported = {0};
    uint64_t interval = m->opt.metric_report_interval_ms;
    uint64_t next = crb_now_ms() + TICK_MS, next_report = crb_now_ms() + interval;
    uint64_t last_report_at = crb_now_ms();
    while (wait_until(m, next)) {
        next += TICK_MS;
        uint64_t now = crb_now_ms();
        if (next < now)
            next = now + TICK_MS;
        crk_tick(m->svc, now);
        crk_stats st;
        crk_get_stats(m->svc, &st);
        if (st.clients_expired > last.clients_expired)
            crb_log(CRB_LOG_WARN,
                    "master: %" PRIu64 " client(s) expired (silent > %" PRIu64
                    " ms); their segments were unmounted",
                    st.clients_expired - last.clients_expired, m->opt.svc.client_ttl_ms);
        last = st;
        if (m->opt.enable_metric_reporting && now >= next_report) {
            report(m, &st, &reported, now - last_report_at);
            reported = st;
            last_report_at = now;
            next_report = now + interval;
        }
    }
    return NULL;
}

static void forget_expired_segment(void *ctx, const char *name)
{
    master *m = ctx;
    size_t n = crd_http_server_forget_segment(m->metadata, name);
    crb_log(CRB_LOG_INFO, "master: deleted %zu metadata entr%s of expired segment '%s'", n,
            n == 1 ? "y" : "ies", name);
}

/* --- admin HTTP callbacks --------------------------------------------------- */

static int render_metrics(void *ctx, crk_admin_reply *r)
{
    master *m = ctx;
    crk_stats st;
    crk_get_stats(m->svc, &st);
    crk_text *t = &r->body;
    crk_prom_gauge(t, "master_total_capacity_bytes", "Capacity of mounted segments",
                   (double)st.capacity_bytes);
    crk_prom_gauge(t, "master_allocated_bytes", "Bytes allocated in mounted segments",
                   (double)st.allocated_bytes);
    crk_prom_gauge(t, "master_key_count", "Objects (complete or being written)", (double)st.keys);
    crk_tenant_stat ts[64]; /* per tenant (master/tenants.h); the first 64 tenants */
    size_t nt = crk_tenant_stats(m->svc, ts, 64);
    nt = nt < 64 ? nt : 64;
    crk_prom_family(t, "master_tenant_keys", CRK_PROM_GAUGE, "Objects per tenant");
    for (size_t i = 0; i < nt; i++)
        crk_prom_sample_u64(t, "master_tenant_keys", &(crk_prom_label){"tenant", ts[i].name}, 1,
                            ts[i].keys);
    crk_prom_family(t, "master_tenant_bytes", CRK_PROM_GAUGE, "Value bytes per tenant");
    for (size_t i = 0; i < nt; i++)
        crk_prom_sample_u64(t, "master_tenant_bytes", &(crk_prom_label){"tenant", ts[i].name}, 1,
                            ts[i].bytes);
    crk_prom_gauge(t, "master_active_clients", "Clients with a live heartbeat", (double)st.clients);
    crk_prom_gauge(t, "master_segments", "Mounted segments", (double)st.segments);
    crk_prom_gauge(t, "master_metadata_bytes", "Heap held by the master's tables",
                   (double)st.metadata_bytes);
    crk_prom_gauge(t, "master_deferred_free_bytes",
                   "Allocated bytes of replaced or removed values waiting until no reader "
                   "(lease) or writer can still touch them",
                   (double)st.discarded_bytes);
    crk_prom_counter(t, "master_deferred_frees_total", "Deferred releases carried out",
                     st.put_start_releases);
    crk_prom_counter(t, "master_eviction_attempts_total", "Eviction rounds started",
                     st.evictions_attempted);
    crk_prom_counter(t, "master_eviction_success_total", "Eviction rounds that freed space",
                     st.evictions_successful);
    crk_prom_counter(t, "master_evicted_keys_total", "Objects evicted", st.evicted_keys);
    crk_prom_counter(t, "master_allocation_failures_total", "put_start with no space",
                     st.alloc_failures);
    crk_prom_counter(t, "master_clients_expired_total", "Clients expired", st.clients_expired);
    crk_prom_family(t, "master_requests_total", CRK_PROM_COUNTER, "Requests per operation");
    for (int op = 0; op < CRK_OP_COUNT; op++) {
        crk_prom_label l = {"op", crk_op_name(op)};
        crk_prom_sample_u64(t, "master_requests_total", &l, 1, st.requests[op]);
    }
    crk_prom_family(t, "master_failures_total", CRK_PROM_COUNTER, "Failures per operation");
    for (int op = 0; op < CRK_OP_COUNT; op++) {
        crk_prom_label l = {"op", crk_op_name(op)};
        crk_prom_sample_u64(t, "master_failures_total", &l, 1, st.failures[op]);
    }
    crk_rpc_server_stats rs;
    crk_rpc_server_stats_get(m->rpc, &rs);
    crk_prom_gauge(t, "master_rpc_connections", "Open RPC connections",
                   (double)rs.connections_open);
    crk_prom_counter(t, "master_rpc_connections_accepted_total", "RPC connections accepted",
                     rs.connections_accepted);
    crk_prom_counter(t, "master_rpc_malformed_frames_total", "Malformed RPC frames",
                     rs.malformed_frames);
    /* RPC latency histograms per opcode (buckets in seconds). */
    double bounds[CRK_LAT_BUCKETS - 1];
    for (int b = 0; b < CRK_LAT_BUCKETS - 1; b++)
        bounds[b] = (double)(1ull << b) / 1e6;
    crk_prom_family(t, "master_rpc_latency_seconds", CRK_PROM_HISTOGRAM,
                    "RPC service time per operation");
    for (int idx = 0; idx < CRP_RPC_OP_COUNT; idx++) {
        uint64_t h[CRK_LAT_BUCKETS], total = 0;
        crk_rpc_server_latency(m->rpc, idx, h);
        for (int b = 0; b < CRK_LAT_BUCKETS; b++)
            total += h[b];
        if (total == 0)
            continue;
        const char *name = "?";
#define OPNAME_(n, v, s, a, b)                                                                     \
    if (crp_rpc_op_index(v) == idx)                                                                \
        name = s;
        CRP_RPC_OP_TABLE(OPNAME_)
#undef OPNAME_
        crk_prom_label l = {"op", name};
        crk_prom_histogram(t, "master_rpc_latency_seconds", &l, 1, bounds, h, CRK_LAT_BUCKETS - 1,
                           0.0);
    }
    crk_off_prom(m->svc, t); /* the disk tier (master/offload.h); nothing without it */
    return t->status;
}

static int health(void *ctx, crk_admin_reply *r)
{
    master *m = ctx;
    crk_stats st;
    crk_get_stats(m->svc, &st);
    r->json = json_pack("{s:s, s:s, s:I, s:I, s:I}", "status", "ok", "cluster_id",
                        m->opt.cluster_id, "uptime_ms", (json_int_t)(crb_now_ms() - m->started_ms),
                        "clients", (json_int_t)st.clients, "segments", (json_int_t)st.segments);
    return r->json != NULL ? 0 : crb_error(CR_ERR_NO_MEMORY, "/health");
}

/* Set key `field` of obj to the client bytes s, plus field_hex when s is not UTF-8. */
static int set_text(json_t *obj, const char *field, const char *s)
{
    int rc = json_object_set_new(obj, field, crk_admin_json_text(s));
    if (rc == 0 && !crk_admin_is_utf8(s)) {
        char hex_field[64];
        snprintf(hex_field, sizeof(hex_field), "%s_hex", field);
        rc = json_object_set_new(obj, hex_field, crk_admin_json_hex(s));
    }
    return rc == 0 ? 0 : crb_error(CR_ERR_NO_MEMORY, "admin JSON");
}

static int all_segments(void *ctx, crk_admin_reply *r)
{
    master *m = ctx;
    size_t total = 0;
    crk_list_segments(m->svc, NULL, 0, &total);
    crk_segment_info *segs = calloc(total ? total : 1, sizeof(*segs));
    if (segs == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "/get_all_segments: %zu segments", total);
    crk_list_segments(m->svc, segs, total, &total);
    json_t *list = json_array();
    r->json = json_pack("{s:o*}", "segments", list);
    int rc = r->json != NULL ? 0 : crb_error(CR_ERR_NO_MEMORY, "/get_all_segments");
    for (size_t i = 0; rc == 0 && i < total; i++) {
        json_t *seg = json_pack("{s:I, s:I, s:I, s:I, s:I}", "base", (json_int_t)segs[i].base,
                                "size", (json_int_t)segs[i].size, "used", (json_int_t)segs[i].used,
                                "epoch", (json_int_t)segs[i].mount_epoch, "fenced_until_ms",
                                (json_int_t)segs[i].fenced_until_ms);
        rc = seg != NULL ? set_text(seg, "name", segs[i].name)
                         : crb_error(CR_ERR_NO_MEMORY, "/get_all_segments");
        if (seg != NULL && json_array_append_new(list, seg) != 0 && rc == 0)
            rc = crb_error(CR_ERR_NO_MEMORY, "/get_all_segments");
    }
    free(segs);
    return rc;
}

static int query_key(void *ctx, const char *key, crk_admin_reply *r)
{
    master *m = ctx;
    crk_key_info ki;
    int rc = crk_query_key(m->svc, key, crb_now_ms(), &ki);
    if (rc < 0)
        return rc;
    json_t *reps = json_array();
    r->json = json_pack("{s:I, s:b, s:b, s:o*}", "size", (json_int_t)ki.value_size, "complete",
                        ki.complete, "hard_pinned", ki.hard_pinned, "replicas", reps);
    if (r->json == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "/query_key");
    rc = set_text(r->json, "key", key);
    for (uint32_t i = 0; rc == 0 && i < ki.replicas.n; i++) {
        json_t *rep = json_pack("{s:I, s:I}", "address", (json_int_t)ki.replicas.r[i].address,
                                "epoch", (json_int_t)ki.replicas.r[i].mount_epoch);
        rc = rep != NULL ? set_text(rep, "segment", ki.replicas.r[i].segment)
                         : crb_error(CR_ERR_NO_MEMORY, "/query_key");
        if (rep != NULL && json_array_append_new(reps, rep) != 0 && rc == 0)
            rc = crb_error(CR_ERR_NO_MEMORY, "/query_key");
    }
    return rc;
}

/* --- lifecycle ---------------------------------------------------------------- */

static void master_stop(master *m)
{
    pthread_mutex_lock(&m->stop_lock);
    m->stop = true;
    pthread_cond_broadcast(&m->stop_cond);
    pthread_mutex_unlock(&m->stop_lock);
    if (m->ticker_running)
        pthread_join(m->ticker, NULL);
    crk_admin_http_stop(m->admin);
    if (m->svc != NULL)
        crk_service_stop_scans(m->svc); /* a remove_by_regex in progress gives up */
    crk_rpc_server_stop(m->rpc);
    crd_http_server_stop(m->metadata);
    crk_service_destroy(m->svc);
}

/* Options that need the system to be checked (exit 2 when they fail). */
static int resolve_options(master *m)
{
    snprintf(m->rpc_host, sizeof(m->rpc_host), "%s", m->opt.rpc_address);
    if (m->opt.rpc_interface[0] != '\0') {
        int rc = crb_interface_ipv4(m->opt.rpc_interface, m->rpc_host);
        if (rc < 0)
            return crb_error(rc, "--rpc_interface=%s: %s", m->opt.rpc_interface,
                             cr_last_error_message());
        crb_log(CRB_LOG_INFO, "master: --rpc_interface=%s is %s (overrides --rpc_address=%s)",
                m->opt.rpc_interface, m->rpc_host, m->opt.rpc_address);
    }
    m->rpc_threads = m->opt.rpc_thread_num;
    if (m->rpc_threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        m->rpc_threads = m->opt.max_threads;
        if (cores > 0 && (unsigned long)cores < m->rpc_threads)
            m->rpc_threads = (unsigned)cores;
    }
    return 0;
}

static int master_start(master *m)
{
    m->started_ms = crb_now_ms();
    int rc = crk_service_create(&m->opt.svc, m->started_ms, &m->svc);
    if (rc < 0)
        return rc;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    m->info.view_version = (uint64_t)rt.tv_sec * 1000000ull + (uint64_t)rt.tv_nsec / 1000;
    m->info.software = SOFTWARE;
    crk_rpc_server_options ro;
    crk_rpc_server_options_default(&ro);
    ro.host = m->rpc_host;
    ro.port = m->opt.rpc_port;
    ro.threads = m->rpc_threads;
    ro.tcp_nodelay = m->opt.rpc_enable_tcp_no_delay;
    ro.idle_timeout_ms = m->opt.rpc_conn_timeout_ms;
    ro.max_connections = m->opt.rpc_max_connections;
    rc = crk_rpc_server_start(m->svc, &m->info, &ro, &m->rpc);
    if (rc < 0)
        return rc;
    crk_admin_callbacks cb = {m, render_metrics, health, all_segments, query_key};
    rc = crk_admin_http_start(m->opt.metrics_host, m->opt.metrics_port, &cb, &m->admin);
    if (rc < 0)
        return rc;
    if (m->opt.enable_http_metadata_server) {
        rc = crd_http_server_start(m->opt.http_metadata_server_host,
                                   m->opt.http_metadata_server_port, &m->metadata);
        if (rc < 0)
            return rc;
        if (m->opt.enable_metadata_cleanup_on_timeout)
            crk_service_on_expired_segment(m->svc, forget_expired_segment, m);
    }
    if (pthread_create(&m->ticker, NULL, tick_main, m) != 0)
        return crb_error(CR_ERR_SYSTEM, "starting the housekeeping thread");
    m->ticker_running = true;
    return 0;
}

static int usage_error(const char *msg)
{
    fprintf(stderr, "crescent-master: %s\n", msg);
    fprintf(stderr, "run 'crescent-master --help' for the flags\n");
    return 2;
}

int main(int argc, char **argv)
{
    static master m;
    pthread_mutex_init(&m.stop_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m.stop_cond, &ca);
    pthread_condattr_destroy(&ca);
    crb_log_default_level(CRB_LOG_INFO); /* one line per join, expiry, mount, eviction */
    crk_master_options_defaults(&m.opt);
    int rc = crk_master_options_parse(argc, argv, &m.opt);
    if (rc < 0)
        return usage_error(cr_last_error_message());
    if (m.opt.show_help) {
        crk_master_options_usage(stdout, argv[0]);
        return 0;
    }
    if (m.opt.show_version) {
        printf("%s\n", SOFTWARE);
        return 0;
    }
    if (m.opt.enable_metadata_cleanup_on_timeout && !m.opt.enable_http_metadata_server)
        return usage_error("--enable_metadata_cleanup_on_timeout needs "
                           "--enable_http_metadata_server (it cleans the embedded server)");
    if (resolve_options(&m) < 0)
        return usage_error(cr_last_error_message());
    /* Signals are taken synchronously by the main thread only. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    rc = master_start(&m);
    if (rc < 0) {
        fprintf(stderr, "crescent-master: %s\n", cr_last_error_message());
        master_stop(&m);
        return 1;
    }
    printf("crescent-master listening on %s:%u (metrics %s:%u%s) cluster %s, %u rpc threads\n",
           m.rpc_host, (unsigned)crk_rpc_server_port(m.rpc), m.opt.metrics_host,
           (unsigned)crk_admin_http_port(m.admin), m.metadata ? ", http metadata server on" : "",
           m.opt.cluster_id, m.rpc_threads);
    if (m.metadata)
        printf("crescent-master http metadata server on %s:%u\n", m.opt.http_metadata_server_host,
               (unsigned)crd_http_server_port(m.metadata));
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    crb_log(CRB_LOG_WARN, "crescent-master: signal %d, shutting down", sig);
    master_stop(&m);
    return 0;
}
