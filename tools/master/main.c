/*
 * crescent-master - the store's metadata server.
 *
 * Wires the pieces together: flags (Mooncake's names, master/flags.h), the
 * in-memory service (master/service.h), the RPC server (rpc_server.h), the
 * admin HTTP server on the metrics port (/metrics, /health,
 * /get_all_segments, /query_key), the embedded HTTP metadata server when
 * enabled, and a housekeeping thread that ticks the service every 100 ms
 * (client expiry, deferred releases, stale puts, watermark eviction).
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

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "master/admin_http.h"
#include "master/flags.h"
#include "master/prom.h"
#include "master/rpc_server.h"
#include "master/service.h"
#include "master/tenants.h"
#include "mdserver/http_server.h"

#define SOFTWARE "crescent-master 0.1.0"

typedef struct master {
    crk_master_options opt;
    crk_service *svc;
    crk_rpc_server *rpc;
    crk_admin_http *admin;
    crd_http_server *metadata;
    crk_server_info info;
    pthread_t ticker;
    atomic_bool stop;
    uint64_t started_ms;
} master;

static void *tick_main(void *arg)
{
    master *m = arg;
    crk_stats last = {0};
    while (!atomic_load(&m->stop)) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        crk_tick(m->svc, crb_now_ms());
        crk_stats st;
        crk_get_stats(m->svc, &st);
        if (st.clients_expired > last.clients_expired)
            crb_log(CRB_LOG_WARN,
                    "master: %" PRIu64 " client(s) expired (silent > %" PRIu64
                    " ms); their segments were unmounted",
                    st.clients_expired - last.clients_expired, m->opt.client_ttl_ms);
        if (st.evictions_attempted > last.evictions_attempted)
            crb_log(CRB_LOG_INFO,
                    "master: eviction round(s): %" PRIu64 " keys, %" PRIu64 " bytes freed so far",
                    st.evicted_keys, st.evicted_bytes);
        last = st;
    }
    return NULL;
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
    return t->status;
}

static int health(void *ctx, crk_admin_reply *r)
{
    master *m = ctx;
    crk_text_appendf(&r->body, "{\"status\":\"ok\",\"uptime_ms\":%" PRIu64 "}",
                     crb_now_ms() - m->started_ms);
    return r->body.status;
}

static int all_segments(void *ctx, crk_admin_reply *r)
{
    master *m = ctx;
    size_t total = 0;
    crk_list_segments(m->svc, NULL, 0, &total);
    crk_segment_info *segs = calloc(total ? total : 1, sizeof(*segs));
    if (segs == NULL)
        return CR_ERR_NO_MEMORY;
    crk_list_segments(m->svc, segs, total, &total);
    crk_text *t = &r->body;
    crk_text_puts(t, "{\"segments\":[");
    for (size_t i = 0; i < total; i++) {
        crk_text_puts(t, i ? ",{\"name\":" : "{\"name\":");
        crk_text_json_string(t, segs[i].name);
        crk_text_appendf(t,
                         ",\"base\":%" PRIu64 ",\"size\":%" PRIu64 ",\"used\":%" PRIu64
                         ",\"epoch\":%" PRIu64 ",\"fenced_until_ms\":%" PRIu64 "}",
                         segs[i].base, segs[i].size, segs[i].used, segs[i].mount_epoch,
                         segs[i].fenced_until_ms);
    }
    crk_text_puts(t, "]}");
    free(segs);
    return t->status;
}

static int query_key(void *ctx, const char *key, crk_admin_reply *r)
{
    master *m = ctx;
    crk_key_info ki;
    int rc = crk_query_key(m->svc, key, crb_now_ms(), &ki);
    if (rc < 0)
        return rc;
    crk_text *t = &r->body;
    crk_text_puts(t, "{\"key\":");
    crk_text_json_string(t, key);
    crk_text_appendf(t, ",\"size\":%" PRIu64 ",\"complete\":%s,\"hard_pinned\":%s,\"replicas\":[",
                     ki.value_size, ki.complete ? "true" : "false",
                     ki.hard_pinned ? "true" : "false");
    for (uint32_t i = 0; i < ki.replicas.n; i++) {
        crk_text_puts(t, i ? ",{\"segment\":" : "{\"segment\":");
        crk_text_json_string(t, ki.replicas.r[i].segment);
        crk_text_appendf(t, ",\"address\":%" PRIu64 ",\"epoch\":%" PRIu64 "}",
                         ki.replicas.r[i].address, ki.replicas.r[i].mount_epoch);
    }
    crk_text_puts(t, "]}");
    return t->status;
}

/* --- lifecycle ---------------------------------------------------------------- */

static void master_stop(master *m)
{
    atomic_store(&m->stop, true);
    if (m->ticker)
        pthread_join(m->ticker, NULL);
    crk_admin_http_stop(m->admin);
    crk_rpc_server_stop(m->rpc);
    crd_http_server_stop(m->metadata);
    crk_service_destroy(m->svc);
}

static int master_start(master *m)
{
    crk_config cfg;
    crk_config_default(&cfg);
    cfg.default_kv_lease_ttl_ms = m->opt.default_kv_lease_ttl_ms;
    cfg.default_kv_soft_pin_ttl_ms = m->opt.default_kv_soft_pin_ttl_ms;
    cfg.max_kv_soft_pin_ttl_ms = m->opt.max_kv_soft_pin_ttl_ms;
    cfg.allow_evict_soft_pinned_objects = m->opt.allow_evict_soft_pinned_objects;
    cfg.eviction_ratio = m->opt.eviction_ratio;
    cfg.eviction_high_watermark_ratio = m->opt.eviction_high_watermark_ratio;
    cfg.client_ttl_ms = m->opt.client_ttl_ms;
    cfg.put_start_discard_timeout_ms = m->opt.put_start_discard_timeout_ms;
    cfg.put_start_release_timeout_ms = m->opt.put_start_release_timeout_ms;
    m->started_ms = crb_now_ms();
    int rc = crk_service_create(&cfg, m->started_ms, &m->svc);
    if (rc < 0)
        return rc;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    m->info.view_version = (uint64_t)rt.tv_sec * 1000000ull + (uint64_t)rt.tv_nsec / 1000;
    m->info.software = SOFTWARE;
    unsigned threads = m->opt.rpc_thread_num ? m->opt.rpc_thread_num : 2;
    rc = crk_rpc_server_start(m->svc, &m->info, m->opt.rpc_address, m->opt.rpc_port, threads,
                              &m->rpc);
    if (rc < 0)
        return rc;
    if (m->opt.enable_metric_reporting) {
        crk_admin_callbacks cb = {m, render_metrics, health, all_segments, query_key};
        rc = crk_admin_http_start(m->opt.metrics_host, m->opt.metrics_port, &cb, &m->admin);
        if (rc < 0)
            return rc;
    }
    if (m->opt.enable_http_metadata_server) {
        rc = crd_http_server_start(m->opt.http_metadata_server_host,
                                   m->opt.http_metadata_server_port, &m->metadata);
        if (rc < 0)
            return rc;
    }
    if (pthread_create(&m->ticker, NULL, tick_main, m) != 0)
        return crb_error(CR_ERR_SYSTEM, "starting the housekeeping thread");
    return 0;
}

int main(int argc, char **argv)
{
    master m = {0};
    crb_log_default_level(CRB_LOG_INFO); /* one line per join, expiry, mount, eviction */
    crk_master_options_defaults(&m.opt);
    int rc = crk_master_options_parse(argc, argv, &m.opt);
    if (rc < 0) {
        fprintf(stderr, "crescent-master: %s\n", cr_last_error_message());
        fprintf(stderr, "run 'crescent-master --help' for the flags\n");
        return 2;
    }
    if (m.opt.show_help) {
        crk_master_options_usage(stdout, argv[0]);
        return 0;
    }
    if (m.opt.show_version) {
        printf("%s\n", SOFTWARE);
        return 0;
    }
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
    printf("crescent-master listening on %s:%u (metrics %s:%u%s)\n", m.opt.rpc_address,
           (unsigned)crk_rpc_server_port(m.rpc), m.opt.metrics_host,
           m.admin ? (unsigned)crk_admin_http_port(m.admin) : 0u,
           m.metadata ? ", http metadata server on" : "");
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
