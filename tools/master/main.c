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
#include "master/admin_keys.h"
#include "master/flags.h"
#include "master/ha.h"
#include "master/offload.h"
#include "master/prom.h"
#include "master/rpc_server.h"
#include "master/service.h"
#include "master/tenants.h"
#include "mdserver/http_server.h"
#include "metadata/etcd.h"

#define SOFTWARE "crescent-master 0.1.0"
/* The Mooncake release whose master flags, config keys, admin paths and
 * metric names this master follows (reported by mooncake_master --version). */
#define MOONCAKE_COMPAT_VERSION "0.3.12"
#define TICK_MS                 100

typedef struct master {
    crk_master_options opt;
    char rpc_host[CRB_HOST_MAX]; /* --rpc_address, or the address of --rpc_interface */
    unsigned rpc_threads;
    crk_service *svc;
    crk_rpc_server *rpc;
    crk_admin_http *admin;
    crd_http_server *metadata;
    crk_server_info info;
    crk_ha *ha;              /* --enable_ha */
    char ha_endpoints[4096]; /* --ha_backend_connstring, else --etcd_endpoints */
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

static void render_ha_metrics(master *m, crk_text *t);

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
    if (m->ha != NULL)
        render_ha_metrics(m, t);
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
    crk_value_sizes vs;
    crk_admin_value_sizes(m->svc, &vs);
    crk_prom_mooncake(t, &st, &vs); /* Mooncake's names for the same counters */
    crk_rpc_server_stats rs;
    crk_rpc_server_stats_get(m->rpc, &rs);
    crk_prom_gauge(t, "master_rpc_connections", "Open RPC connections",
                   (double)rs.connections_open);
    crk_prom_counter(t, "master_rpc_connections_accepted_total", "RPC connections accepted",
                     rs.connections_accepted);
    crk_prom_counter(t, "master_rpc_local_connections_accepted_total",
                     "RPC connections accepted on the local socket (clients on this host)",
                     rs.local_accepted);
    crk_prom_counter(t, "master_rpc_malformed_frames_total", "Malformed RPC frames",
                     rs.malformed_frames);
    crk_prom_counter(t, "master_rpc_stage_waits_total",
                     "Gets of disk-only keys held until their stage landed (swt)", rs.stage_waits);
    crk_prom_counter(t, "master_rpc_stage_waits_expired_total",
                     "Held gets answered 'being staged' when their wait ended",
                     rs.stage_waits_expired);
    crk_prom_counter(t, "master_rpc_commit_waits_total",
                     "Reads of a key committed ahead of its copy held until its put ended",
                     rs.commit_waits);
    crk_prom_counter(t, "master_rpc_commit_waits_expired_total",
                     "Held reads of a committing key answered as a put in flight when their wait "
                     "ended",
                     rs.commit_waits_expired);
    crk_prom_counter(t, "master_rpc_task_waits_total",
                     "Holders' heartbeats held until a task was queued for them (swt)",
                     rs.task_waits);
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
    r->json = json_pack("{s:s, s:s, s:s, s:b, s:s, s:I, s:I, s:I}", "status", "ok", "role",
                        "leader", "ha_state", "serving", "service_ready", 1, "cluster_id",
                        m->opt.cluster_id, "uptime_ms", (json_int_t)(crb_now_ms() - m->started_ms),
                        "clients", (json_int_t)st.clients, "segments", (json_int_t)st.segments);
    if (r->json != NULL && m->ha != NULL) {
        crk_ha_status hs;
        crk_ha_status_get(m->ha, &hs);
        json_t *h = json_pack(
            "{s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "role", crk_ha_role_name(hs.role),
            "term", (json_int_t)hs.term, "leader", hs.leader, "lease_margin_ms",
            (json_int_t)hs.lease_margin_ms, "commit_seq", (json_int_t)hs.commit_seq, "head_seq",
            (json_int_t)hs.head_seq, "standbys", (json_int_t)hs.standbys, "lag_entries",
            (json_int_t)hs.lag_entries, "lag_ms", (json_int_t)hs.lag_ms);
        if (h == NULL || json_object_update(r->json, h) != 0) {
            json_decref(h);
            return crb_error(CR_ERR_NO_MEMORY, "/health");
        }
        json_decref(h);
    }
    return r->json != NULL ? 0 : crb_error(CR_ERR_NO_MEMORY, "/health");
}

static void render_ha_metrics(master *m, crk_text *t)
{
    crk_ha_status hs;
    crk_ha_status_get(m->ha, &hs);
    crk_prom_gauge(t, "master_ha_role", "HA role: 0 candidate, 1 standby, 2 leader",
                   (double)hs.role);
    crk_prom_gauge(t, "master_ha_term", "Election revision of the leader this master knows",
                   (double)hs.term);
    crk_prom_gauge(t, "master_ha_lease_margin_seconds",
                   "Leader: time left before it stops serving without a keepalive",
                   (double)hs.lease_margin_ms / 1000.0);
    crk_prom_gauge(t, "master_ha_commit_seq", "Last change every in-sync standby applied",
                   (double)hs.commit_seq);
    crk_prom_gauge(t, "master_ha_head_seq", "Last change logged by the leader",
                   (double)hs.head_seq);
    crk_prom_gauge(t, "master_ha_standbys", "Standbys streaming from this leader",
                   (double)hs.standbys);
    crk_prom_gauge(t, "master_ha_in_sync_standbys", "Standbys whose acks gate replies (ISR)",
                   (double)hs.in_sync);
    crk_prom_gauge(t, "master_ha_replication_lag_entries", "Changes the furthest standby is behind",
                   (double)hs.lag_entries);
    crk_prom_gauge(t, "master_ha_replication_lag_seconds",
                   "Standby: time since the last frame from the leader",
                   (double)hs.lag_ms / 1000.0);
    crk_prom_counter(t, "master_ha_not_replicated_total",
                     "Mutation replies that reached no standby in time", hs.not_replicated);
    crk_prom_counter(t, "master_ha_fenced_writes_total",
                     "Writes in flight at a promotion that were fenced", hs.fenced_writes);
    crk_prom_counter(t, "master_ha_standby_resumes_total",
                     "Standby subscriptions that resumed from the log", hs.resumes);
    crk_prom_counter(t, "master_ha_standby_snapshots_total",
                     "Standby subscriptions that got a full snapshot", hs.snapshots);
    crk_prom_counter(t, "master_ha_frames_total",
                     "Leader: stream frames sent (all standbys); standby: frames applied",
                     hs.frames);
    crk_prom_counter(t, "master_ha_entries_total",
                     "Leader: entries in the frames sent; standby: entries applied", hs.entries);
    crk_prom_counter(t, "master_ha_acks_total",
                     "Leader: ack reads that moved a standby; standby: acks sent", hs.acks);
    crk_prom_counter(t, "master_ha_commits_total", "Leader: times the commit index moved",
                     hs.commits);
    crk_prom_counter(t, "master_ha_held_replies_total",
                     "Leader: times a connection's replies were held for the standbys",
                     hs.held_replies);
    crk_prom_family(t, "master_ha_held_seconds_total", CRK_PROM_COUNTER,
                    "Leader: time replies were held for the standbys, summed");
    crk_prom_sample(t, "master_ha_held_seconds_total", NULL, 0, (double)hs.held_ns / 1e9);
    crk_prom_family(t, "master_ha_apply_seconds_total", CRK_PROM_COUNTER,
                    "Standby: time spent applying the stream, summed");
    crk_prom_sample(t, "master_ha_apply_seconds_total", NULL, 0, (double)hs.apply_ns / 1e9);
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

/* Every mounted segment (caller frees *out). */
static int list_segments(master *m, const char *what, crk_segment_info **out, size_t *n)
{
    size_t total = 0;
    crk_list_segments(m->svc, NULL, 0, &total);
    crk_segment_info *segs = calloc(total ? total : 1, sizeof(*segs));
    if (segs == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "%s: %zu segments", what, total);
    size_t cap = total;
    crk_list_segments(m->svc, segs, cap, &total);
    *out = segs;
    *n = total < cap ? total : cap;
    return 0;
}

/* Mooncake's /get_all_segments: one segment name per line. */
static int all_segments(void *ctx, crk_admin_reply *r)
{
    master *m = ctx;
    crk_segment_info *segs;
    size_t n;
    int rc = list_segments(m, "/get_all_segments", &segs, &n);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = crk_text_appendf(&r->body, "%s\n", segs[i].name);
    free(segs);
    return rc;
}

/* Mooncake's /get_segments_detail, plus crescent's epoch and fence. */
static int segments_detail(void *ctx, const char *arg, crk_admin_reply *r)
{
    (void)arg;
    master *m = ctx;
    crk_segment_info *segs;
    size_t n;
    int rc = list_segments(m, "/get_segments_detail", &segs, &n);
    if (rc != 0)
        return rc;
    json_t *list = json_array();
    r->json = json_pack("{s:I, s:o*}", "total_segments", (json_int_t)n, "segments", list);
    if (r->json == NULL)
        rc = crb_error(CR_ERR_NO_MEMORY, "/get_segments_detail");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const crk_segment_info *g = &segs[i];
        char base[32], human[48], seg_id[40];
        snprintf(base, sizeof(base), "0x%" PRIx64, g->base);
        snprintf(human, sizeof(human), "%g GiB", (double)g->size / 1024.0 / 1024.0 / 1024.0);
        /* crescent has no segment UUIDs: the mount epoch names the mount. */
        snprintf(seg_id, sizeof(seg_id), "00000000-0000-0000-%04" PRIx64 "-%012" PRIx64,
                 (g->mount_epoch >> 48) & 0xffff, g->mount_epoch & (uint64_t)0xffffffffffff);
        double pct = g->capacity > 0 ? (double)g->used / (double)g->capacity * 100.0 : 0.0;
        /* The owner's client id is a credential (docs/WIRE.md): never shown. */
        json_t *seg = json_pack(
            "{s:s, s:s, s:s, s:I, s:s, s:s, s:s, s:I, s:I, s:f, s:I, s:I, s:I}", "segment_id",
            seg_id, "client_id", "00000000-0000-0000-0000-000000000000", "base_address", base,
            "size_bytes", (json_int_t)g->size, "size_human", human, "protocol", "tcp", "status",
            g->unmounting ? "UNMOUNTING" : "OK", "allocator_used_bytes", (json_int_t)g->used,
            "allocator_capacity_bytes", (json_int_t)g->capacity, "allocator_usage_percent", pct,
            "epoch", (json_int_t)g->mount_epoch, "fenced_until_ms", (json_int_t)g->fenced_until_ms,
            "base", (json_int_t)g->base);
        rc = seg != NULL ? set_text(seg, "segment_name", g->name)
                         : crb_error(CR_ERR_NO_MEMORY, "/get_segments_detail");
        if (rc == 0)
            rc = set_text(seg, "te_endpoint", g->name);
        if (seg != NULL && json_array_append_new(list, seg) != 0 && rc == 0)
            rc = crb_error(CR_ERR_NO_MEMORY, "/get_segments_detail");
    }
    free(segs);
    return rc;
}

/* Mooncake's /query_segment?segment=S: name, used and capacity lines. */
static int query_segment(void *ctx, const char *name, crk_admin_reply *r)
{
    master *m = ctx;
    crk_segment_info *segs;
    size_t n;
    int rc = list_segments(m, "/query_segment", &segs, &n);
    if (rc != 0)
        return rc;
    rc = crb_error(CR_SEGMENT_NOT_FOUND, "/query_segment: no segment '%s' is mounted", name);
    for (size_t i = 0; i < n; i++)
        if (strcmp(segs[i].name, name) == 0) {
            rc = crk_text_appendf(&r->body,
                                  "%s\nUsed(bytes): %" PRIu64 "\nCapacity(bytes) : %" PRIu64 "\n",
                                  name, segs[i].used, segs[i].capacity);
            break;
        }
    free(segs);
    return rc;
}

static int all_keys(void *ctx, const char *arg, crk_admin_reply *r)
{
    (void)arg;
    master *m = ctx;
    return crk_admin_list_keys(m->svc, &r->body, NULL);
}

/* Mooncake's replica descriptor: {"size_", "buffer_address_", "protocol_",
 * "transport_endpoint_"} (the segment name is the engine's endpoint). */
static json_t *descriptor(const crk_replica_desc *d)
{
    json_t *j = json_pack("{s:I, s:I, s:s}", "size_", (json_int_t)d->size, "buffer_address_",
                          (json_int_t)d->address, "protocol_", "tcp");
    if (j != NULL &&
        json_object_set_new(j, "transport_endpoint_", crk_admin_json_text(d->segment)) != 0) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* Mooncake's LocalDiskDescriptor of a key only on its holder's SSD tier: {"object_size",
 * "transport_endpoint"} (the holder's segment name). */
static json_t *disk_descriptor(const crk_replica_desc *d)
{
    json_t *j = json_pack("{s:I}", "object_size", (json_int_t)d->size);
    if (j != NULL &&
        json_object_set_new(j, "transport_endpoint", crk_admin_json_text(d->segment)) != 0) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* The replicas of a readable key (memory, or the disk copy), as Mooncake's descriptors. */
/* A put committed ahead of its copy whose writer's end is on its way (docs/WIRE.md, "Commit
 * ahead") is waited for until wait_until (ms), as the RPC server holds a get: one request's
 * waits share one deadline, CRK_COMMIT_WAIT_MS after it arrived. */
static int key_descriptors(master *m, const char *key, uint64_t wait_until, crk_key_info *ki,
                           json_t **out)
{
    int rc = crk_query_key(m->svc, key, crb_now_ms(), ki);
    while (rc == 0 && ki->committing && crb_now_ms() < wait_until) {
        usleep(1000);
        rc = crk_query_key(m->svc, key, crb_now_ms(), ki);
    }
    if (rc == 0 && !ki->complete)
        rc = crb_error(CR_REPLICA_IS_NOT_READY, "'%s' is still being written", key);
    if (rc < 0)
        return rc;
    json_t *list = json_array();
    for (uint32_t i = 0; list != NULL && i < ki->replicas.n; i++)
        if (json_array_append_new(list, ki->on_disk ? disk_descriptor(&ki->replicas.r[i])
                                                    : descriptor(&ki->replicas.r[i])) != 0) {
            json_decref(list);
            list = NULL;
        }
    if (list == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "replica descriptors of '%s'", key);
    *out = list;
    return 0;
}

/* Mooncake's {"success": true, "data": [...]} plus crescent's own fields. */
static int query_key(void *ctx, const char *key, crk_admin_reply *r)
{
    master *m = ctx;
    crk_key_info ki;
    json_t *data = NULL;
    int rc = key_descriptors(m, key, crb_now_ms() + CRK_COMMIT_WAIT_MS, &ki, &data);
    if (rc < 0) {
        /* Mooncake answers 404 with its error fields whatever the cause. */
        const char *msg = cr_last_error_message();
        r->json = json_pack("{s:b, s:i, s:s, s:o*}", "success", 0, "error_code", rc, "error",
                            cr_status_name(rc), "error_message", crk_admin_json_text(msg));
        return rc == CR_REPLICA_IS_NOT_READY ? CR_OBJECT_NOT_FOUND : rc;
    }
    json_t *reps = json_array();
    r->json = json_pack("{s:b, s:o, s:I, s:b, s:b, s:b, s:o*}", "success", 1, "data", data, "size",
                        (json_int_t)ki.value_size, "complete", ki.complete, "hard_pinned",
                        ki.hard_pinned, "on_disk", ki.on_disk, "replicas", reps);
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

#define BATCH_QUERY_MAX 10000 /* keys in one /batch_query_keys */

/* Mooncake's /batch_query_keys?keys=a,b: {"success": true, "data": {key:
 * {"ok": true, "values": [...]} or {"ok": false, "error": "..."}}}. A
 * read-only lookup: no lease is granted. */
static int batch_query_keys(void *ctx, const char *keys, crk_admin_reply *r)
{
    master *m = ctx;
    json_t *data = json_object();
    r->json = json_pack("{s:b, s:o*}", "success", 1, "data", data);
    if (r->json == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "/batch_query_keys");
    size_t count = 0;
    uint64_t wait_until = crb_now_ms() + CRK_COMMIT_WAIT_MS;
    for (const char *p = keys;; count++) {
        if (count >= BATCH_QUERY_MAX)
            return crb_error(CR_INVALID_PARAMS, "/batch_query_keys: more than %d keys",
                             BATCH_QUERY_MAX);
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        char *key = strndup(p, len);
        if (key == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "/batch_query_keys");
        crk_key_info ki;
        json_t *values = NULL, *item;
        int rc = len > 0 ? key_descriptors(m, key, wait_until, &ki, &values)
                         : crb_error(CR_INVALID_KEY, "empty key");
        if (rc == 0)
            item = json_pack("{s:b, s:o}", "ok", 1, "values", values);
        else
            item = json_pack("{s:b, s:s}", "ok", 0, "error", cr_status_name(rc));
        rc = item != NULL ? json_object_set_new(data, key, item) : -1;
        free(key);
        if (rc != 0)
            return crb_error(CR_ERR_NO_MEMORY, "/batch_query_keys");
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return 0;
}

/* Mooncake's /metrics/summary line, from crescent's counters (totals since
 * start; Mooncake's are per-second rates of its last report window). */
static int metrics_summary(void *ctx, const char *arg, crk_admin_reply *r)
{
    (void)arg;
    master *m = ctx;
    crk_stats st;
    crk_get_stats(m->svc, &st);
    crk_text *t = &r->body;
    int rc = crk_text_appendf(t,
                              "role=leader, state=serving, service_ready=true, master={Mem "
                              "Storage: %" PRIu64 " B / %" PRIu64 " B",
                              st.allocated_bytes, st.capacity_bytes);
    if (rc == 0 && st.capacity_bytes > 0)
        rc = crk_text_appendf(t, " (%.1f%%)",
                              (double)st.allocated_bytes / (double)st.capacity_bytes * 100.0);
    if (rc == 0)
        rc = crk_text_appendf(t,
                              " | Keys: %" PRIu64 " (soft-pinned: %" PRIu64 ") | Clients: %" PRIu64
                              " | Requests (Success/Total since start): ",
                              st.keys, st.soft_pinned_keys, st.clients);
    static const struct {
        const char *label;
        int op;
    } shown[] = {{"PutStart", CRK_OP_PUT_START},   {"PutEnd", CRK_OP_PUT_END},
                 {"PutRevoke", CRK_OP_PUT_REVOKE}, {"Get", CRK_OP_GET_REPLICA_LIST},
                 {"Exist", CRK_OP_EXIST},          {"Del", CRK_OP_REMOVE},
                 {"DelAll", CRK_OP_REMOVE_ALL},    {"Ping", CRK_OP_PING}};
    for (size_t i = 0; rc == 0 && i < sizeof(shown) / sizeof(shown[0]); i++) {
        uint64_t req = st.requests[shown[i].op], fail = st.failures[shown[i].op];
        rc = crk_text_appendf(t, "%s%s=%" PRIu64 "/%" PRIu64, i ? ", " : "", shown[i].label,
                              req - fail, req);
    }
    if (rc == 0)
        rc = crk_text_appendf(t,
                              " | Eviction: Success/Attempts=%" PRIu64 "/%" PRIu64 ", keys=%" PRIu64
                              ", size=%" PRIu64 " B"
                              " | Discard: Released/Total=%" PRIu64 "/%" PRIu64 "}, ha={}\n",
                              st.evictions_successful, st.evictions_attempted, st.evicted_keys,
                              st.evicted_bytes, st.put_start_releases, st.put_start_discards);
    return rc;
}

/* A master without HA is always the serving leader. */
/* Mooncake's /role: "leader", or with HA this master's role (leader,
 * standby, candidate). */
static int role(void *ctx, const char *arg, crk_admin_reply *r)
{
    master *m = ctx;
    (void)arg;
    if (m->ha == NULL)
        return crk_text_puts(&r->body, "leader");
    crk_ha_status hs;
    crk_ha_status_get(m->ha, &hs);
    return crk_text_puts(&r->body, crk_ha_role_name(hs.role));
}

/* Mooncake's /ha_status: "serving" where this master serves, else "standby". */
static int ha_status(void *ctx, const char *arg, crk_admin_reply *r)
{
    master *m = ctx;
    (void)arg;
    crk_ha_status hs = {.role = CRK_HA_LEADER};
    if (m->ha != NULL)
        crk_ha_status_get(m->ha, &hs);
    return crk_text_puts(&r->body, hs.role == CRK_HA_LEADER ? "serving" : "standby");
}

/* Mooncake's /leader: {"present"} and, with HA, the leader's address and
 * its election term as the view version. */
static int leader(void *ctx, const char *arg, crk_admin_reply *r)
{
    master *m = ctx;
    (void)arg;
    crk_ha_status hs = {0};
    if (m->ha != NULL)
        crk_ha_status_get(m->ha, &hs);
    if (hs.leader[0] == '\0')
        r->json = json_pack("{s:b}", "present", 0);
    else
        r->json = json_pack("{s:b, s:s, s:I}", "present", 1, "leader_address", hs.leader,
                            "view_version", (json_int_t)hs.term);
    return r->json != NULL ? 0 : crb_error(CR_ERR_NO_MEMORY, "/leader");
}

/* Mooncake's /kv_events/status: crescent publishes no KV events. */
static int kv_events(void *ctx, const char *arg, crk_admin_reply *r)
{
    (void)ctx;
    (void)arg;
    r->json = json_pack("{s:b, s:i, s:i, s:i, s:i}", "enabled", 0, "published_batches", 0,
                        "published_events", 0, "dropped_events", 0, "skipped_unparsed_keys", 0);
    return r->json != NULL ? 0 : crb_error(CR_ERR_NO_MEMORY, "/kv_events/status");
}

/* Mooncake's /api/v1/segments/status?segment=S: its SegmentStatus (1 OK,
 * 5 UNMOUNTING; crescent has no draining states). */
static int segment_status(void *ctx, const char *name, crk_admin_reply *r)
{
    master *m = ctx;
    crk_segment_info *segs;
    size_t n;
    int rc = list_segments(m, "/api/v1/segments/status", &segs, &n);
    if (rc != 0)
        return rc;
    rc = crb_error(CR_SEGMENT_NOT_FOUND, "/api/v1/segments/status: no segment '%s' is mounted",
                   name);
    for (size_t i = 0; i < n; i++)
        if (strcmp(segs[i].name, name) == 0) {
            bool down = segs[i].unmounting;
            r->json = json_pack("{s:b, s:i, s:s, s:i, s:s}", "success", 1, "status", down ? 5 : 1,
                                "status_name", down ? "UNMOUNTING" : "OK", "error_code", 0,
                                "error_message", "");
            rc = r->json != NULL ? set_text(r->json, "segment", name)
                                 : crb_error(CR_ERR_NO_MEMORY, "/api/v1/segments/status");
            break;
        }
    free(segs);
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
    crk_ha_resign(m->ha); /* first: a standby takes over at once */
    crk_admin_http_stop(m->admin);
    if (m->svc != NULL)
        crk_service_stop_scans(m->svc); /* a remove_by_regex in progress gives up */
    crk_rpc_server_stop(m->rpc);
    crk_ha_stop(m->ha); /* after the RPC server: its threads call the gate */
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
    if (m->opt.enable_ha) {
        const char *eps = m->opt.ha_backend_connstring[0] != '\0' ? m->opt.ha_backend_connstring
                                                                  : m->opt.etcd_endpoints;
        if (eps[0] == '\0')
            return crb_error(CR_INVALID_PARAMS,
                             "--enable_ha needs --etcd_endpoints (or --ha_backend_connstring)");
        crm_etcd_endpoints parsed;
        if (crm_etcd_parse_endpoints(eps, &parsed) < 0)
            return crb_error(CR_INVALID_PARAMS, "--etcd_endpoints=%s: %s", eps,
                             cr_last_error_message());
        snprintf(m->ha_endpoints, sizeof(m->ha_endpoints), "%s", eps);
        if (m->opt.ha_advertise_address[0] == '\0' &&
            (strcmp(m->rpc_host, "0.0.0.0") == 0 || strcmp(m->rpc_host, "::") == 0))
            return crb_error(CR_INVALID_PARAMS,
                             "--enable_ha: clients cannot dial --rpc_address=%s; give "
                             "--rpc_address or --ha_advertise_address",
                             m->rpc_host);
        char host[CRB_HOST_MAX];
        uint16_t port;
        if (m->opt.ha_advertise_address[0] != '\0' &&
            crb_parse_hostport(m->opt.ha_advertise_address, host, &port) < 0)
            return crb_error(CR_INVALID_PARAMS, "--ha_advertise_address=%s is not host:port",
                             m->opt.ha_advertise_address);
    } else if (m->opt.etcd_endpoints[0] != '\0' || m->opt.ha_backend_connstring[0] != '\0' ||
               m->opt.ha_advertise_address[0] != '\0') {
        /* Mooncake's own conf/master.{json,yaml} set etcd_endpoints with
         * enable_ha false: accepted, and said to do nothing. */
        crb_log(CRB_LOG_WARN, "crescent-master: --etcd_endpoints, --ha_backend_connstring and "
                              "--ha_advertise_address have no effect without --enable_ha");
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
    if (m->opt.shared_secret[0] != '\0') {
        m->info.secret = m->opt.shared_secret;
        m->info.secret_len = strlen(m->opt.shared_secret);
    }
    if (m->opt.enable_ha) {
        crk_ha_config hc = {.endpoints = m->ha_endpoints,
                            .cluster_id = m->opt.cluster_id,
                            .lease_ttl_ms = m->opt.ha_lease_ttl_ms,
                            .sync_replicas = m->opt.ha_sync_replicas,
                            .repl_timeout_ms = m->opt.ha_replication_timeout_ms,
                            .svc = m->svc};
        rc = crk_ha_start(&hc, &m->ha);
        if (rc < 0)
            return rc;
        m->info.ha = m->ha;
    }
    crk_rpc_server_options ro;
    crk_rpc_server_options_default(&ro);
    ro.host = m->rpc_host;
    ro.port = m->opt.rpc_port;
    ro.threads = m->rpc_threads;
    ro.tcp_nodelay = m->opt.rpc_enable_tcp_no_delay;
    ro.idle_timeout_ms = m->opt.rpc_conn_timeout_ms;
    ro.busy_poll_us = m->opt.rpc_busy_poll_us;
    ro.adaptive_poll = m->opt.rpc_adaptive_poll;
    ro.local_socket = m->opt.rpc_local_socket;
    ro.max_connections = m->opt.rpc_max_connections;
    rc = crk_rpc_server_start(m->svc, &m->info, &ro, &m->rpc);
    if (rc < 0)
        return rc;
    if (m->ha != NULL) {
        char adv[CRB_HOST_MAX + 8];
        if (m->opt.ha_advertise_address[0] != '\0')
            snprintf(adv, sizeof(adv), "%s", m->opt.ha_advertise_address);
        else
            snprintf(adv, sizeof(adv), "%s:%u", m->rpc_host, (unsigned)crk_rpc_server_port(m->rpc));
        rc = crk_ha_campaign(m->ha, adv);
        if (rc < 0)
            return rc;
    }
    crk_admin_callbacks cb = {
        .ctx = m,
        .render_metrics = render_metrics,
        .health = health,
        .all_segments = all_segments,
        .query_key = query_key,
        .metrics_summary = metrics_summary,
        .all_keys = all_keys,
        .segments_detail = segments_detail,
        .query_segment = query_segment,
        .batch_query_keys = batch_query_keys,
        .role = role,
        .ha_status = ha_status,
        .leader = leader,
        .kv_events = kv_events,
        .segment_status = segment_status,
    };
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

/* "mooncake_master" when invoked under Mooncake's name (an installed
 * symlink, or the Python package's console command), else "crescent-master". */
static const char *program = "crescent-master";

static void set_program(const char *argv0)
{
    const char *base = argv0 != NULL ? strrchr(argv0, '/') : NULL;
    base = base != NULL ? base + 1 : argv0;
    if (base != NULL && strcmp(base, "mooncake_master") == 0)
        program = "mooncake_master";
}

static int usage_error(const char *msg)
{
    fprintf(stderr, "%s: %s\n", program, msg);
    fprintf(stderr, "run '%s --help' for the flags\n", program);
    return 2;
}

/* One warning per Mooncake setting of a feature crescent-master lacks. */
static void warn_unsupported(const crk_master_options *o)
{
    for (size_t i = 0; i < o->n_unsupported; i++)
        crb_log(CRB_LOG_WARN, "%s: '%s' has no effect: %s", program, o->unsupported[i],
                crk_master_flag_help(o->unsupported[i]));
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
    set_program(argc > 0 ? argv[0] : NULL);
    crk_master_options_defaults(&m.opt);
    int rc = crk_master_options_parse(argc, argv, &m.opt);
    if (rc < 0)
        return usage_error(cr_last_error_message());
    if (m.opt.show_help) {
        crk_master_options_usage(stdout, program);
        return 0;
    }
    if (m.opt.show_version) {
        if (strcmp(program, "mooncake_master") == 0)
            printf("mooncake_master version %s (%s)\n", MOONCAKE_COMPAT_VERSION, SOFTWARE);
        else
            printf("%s\n", SOFTWARE);
        return 0;
    }
    warn_unsupported(&m.opt);
    const char *env_secret = getenv("CRESCENT_MASTER_SECRET");
    if (m.opt.shared_secret[0] == '\0' && env_secret != NULL) {
        if (strlen(env_secret) >= sizeof(m.opt.shared_secret))
            return usage_error("CRESCENT_MASTER_SECRET: longer than 255 bytes");
        snprintf(m.opt.shared_secret, sizeof(m.opt.shared_secret), "%s", env_secret);
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
        fprintf(stderr, "%s: %s\n", program, cr_last_error_message());
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
    bool deposed = crk_ha_deposed(m.ha); /* HA: lost its lease while leading */
    crb_log(CRB_LOG_WARN, "crescent-master: %s, shutting down",
            deposed         ? "deposed as HA leader"
            : sig == SIGINT ? "SIGINT"
                            : "SIGTERM");
    master_stop(&m);
    return deposed ? 3 : 0;
}
