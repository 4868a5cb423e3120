/*
 * flags.c - crescent-master's flags (see flags.h for the syntax).
 *
 * Design: FLAGS is the one table of every flag (name, type, field, bounds,
 * default, help) on the generic parser of base/flagtab.h; the command line,
 * the JSON file and crk_master_options_set all set values through it, so
 * they cannot disagree about what is valid. The service's flags write the
 * embedded crk_config (o->svc) directly: their defaults come from
 * crk_config_default and the rules between them from crk_config_validate,
 * both owned by the service, so there is no second copy of either here.
 * Config-file scalars (master/conf_file.h: JSON or YAML) arrive as text with
 * their kind; a type check keeps e.g. a JSON number out of a string flag,
 * while YAML's untyped plain scalars go to the flag's own parser.
 *
 * Parsing argv: --help/--version short-circuit; then every argument is
 * resolved to (flag, value text), reporting unknown flags, missing values
 * and stray arguments; then defaults, the config file and the assignments
 * are applied in order, and the service's checks run last. Everything
 * happens on a local copy that is written to the caller only on success.
 *
 * Mooncake's flags and config keys of features crescent-master does not
 * have (HA, snapshots, offload, NVMe-oF, CXL, KV events, dynamic
 * replication, tenant quotas, the task manager, glog) are in the table too:
 * a switch is accepted at its off value and refused otherwise, a tuning knob
 * of such a feature with any value; either way the name is recorded in
 * o->unsupported so the daemon warns once that it has no effect. Unchanged
 * deployment scripts and Mooncake's sample configs work; nothing is
 * silently ignored.
 */
#include "master/flags.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/flagtab.h"
#include "crescent/status.h"
#include "master/conf_file.h"
#include "master/flagfile.h"

#define MS_PER_S         ((uint64_t)1000)
#define MS_PER_HOUR      (3600 * MS_PER_S)
#define MAX_BUSY_POLL_US 10000 /* as CRESCENT_BUSY_POLL_US's bound in the client and engine */
#define MAX_DURATION     (365 * 24 * MS_PER_HOUR) /* one year, in ms */
#define MAX_THREADS      1024
#define MAX_CONNS        1000000
#define CONTEXT_BUF      320 /* "--flag=value" or "config 'path': key 'k'" for messages */

_Static_assert(sizeof(crk_alloc_strategy) == sizeof(int), "ENUM flags store an int");

#define O(member) CRB_FLAG_FIELD(crk_master_options, member)
#define NO_FIELD  0, 0

static const char *const STRATEGIES[] = {"random", "free_ratio_first", "local_first", NULL};
static const char *const ONLY_OFFSET[] = {"offset", NULL};
static const char *const ONLY_EMPTY[] = {"", NULL};
static const char *const ONLY_OFF[] = {"off", NULL};
static const char *const HA_BACKENDS[] = {"etcd", NULL};

/* clang-format off */
static const crb_flag FLAGS[] = {
    {"rpc_port", CRB_FLAG_PORT, O(rpc_port), 0, 65535, 0, NULL, "50051",
     "RPC listen port (0: any free port)"},
    {"port", CRB_FLAG_PORT, O(rpc_port), 0, 65535, 0, NULL, NULL,
     "deprecated alias of --rpc_port"},
    {"rpc_address", CRB_FLAG_NONEMPTY, O(rpc_address), 0, 0, 0, NULL, "0.0.0.0",
     "address the RPC server binds"},
    {"rpc_interface", CRB_FLAG_STRING, O(rpc_interface), 0, 0, 0, NULL, "",
     "bind the IPv4 address of this network interface instead of --rpc_address"},
    {"rpc_thread_num", CRB_FLAG_U32, O(rpc_thread_num), 0, MAX_THREADS, 0, NULL, "0",
     "RPC I/O threads (0: min(--max_threads, CPU cores))"},
    {"max_threads", CRB_FLAG_U32, O(max_threads), 1, MAX_THREADS, 0, NULL, "16",
     "deprecated: RPC I/O threads cap when --rpc_thread_num is 0"},
    {"rpc_conn_timeout_seconds", CRB_FLAG_DURATION, O(rpc_conn_timeout_ms), 0, MAX_DURATION,
     MS_PER_S, NULL, "0", "close a client connection idle this long (0: never)"},
    {"rpc_enable_tcp_no_delay", CRB_FLAG_BOOL, O(rpc_enable_tcp_no_delay), 0, 0, 0, NULL, "true",
     "set TCP_NODELAY on RPC connections"},
    {"rpc_max_connections", CRB_FLAG_U32, O(rpc_max_connections), 0, MAX_CONNS, 0, NULL, "0",
     "RPC connections served at once; more are accepted and closed (0: fd limit - 64)"},
    {"rpc_local_socket", CRB_FLAG_BOOL, O(rpc_local_socket), 0, 0, 0, NULL, "true",
     "also serve clients on this host over an abstract unix socket (they switch to it after "
     "their TCP handshake; false: TCP only)"},
    {"rpc_busy_poll_us", CRB_FLAG_U32, O(rpc_busy_poll_us), 0, MAX_BUSY_POLL_US, 0, NULL, "0",
     "an RPC I/O thread that handled a request polls this many microseconds before sleeping "
     "(0: --rpc_adaptive_poll decides; costs a CPU core while clients are active)"},
    {"rpc_adaptive_poll", CRB_FLAG_BOOL, O(rpc_adaptive_poll), 0, 0, 0, NULL, "false",
     "with --rpc_busy_poll_us=0, an RPC I/O thread polls ~20 us after a request while the next "
     "ones come within that and backs off while they do not (false: it never polls)"},
    {"enable_metric_reporting", CRB_FLAG_BOOL, O(enable_metric_reporting), 0, 0, 0, NULL, "true",
     "log a metrics summary every --metric_report_interval_sec (/metrics is served either way)"},
    {"metric_report_interval_sec", CRB_FLAG_DURATION, O(metric_report_interval_ms), 100,
     MAX_DURATION, MS_PER_S, NULL, "10", "interval of the --enable_metric_reporting summary"},
    {"metrics_port", CRB_FLAG_PORT, O(metrics_port), 0, 65535, 0, NULL, "9003",
     "port of /metrics, /health, /get_all_segments, /query_key (0: any free port)"},
    {"metrics_host", CRB_FLAG_NONEMPTY, O(metrics_host), 0, 0, 0, NULL, "0.0.0.0",
     "address the metrics HTTP server binds"},
    {"enable_http_metadata_server", CRB_FLAG_BOOL, O(enable_http_metadata_server), 0, 0, 0, NULL,
     "false", "serve the transfer engine's HTTP metadata (/metadata?key=) from the master"},
    {"http_metadata_server_port", CRB_FLAG_PORT, O(http_metadata_server_port), 0, 65535, 0, NULL,
     "8080", "port of the embedded HTTP metadata server (0: any free port)"},
    {"http_metadata_server_host", CRB_FLAG_NONEMPTY, O(http_metadata_server_host), 0, 0, 0, NULL,
     "0.0.0.0", "address the embedded HTTP metadata server binds"},
    {"enable_metadata_cleanup_on_timeout", CRB_FLAG_BOOL, O(enable_metadata_cleanup_on_timeout),
     0, 0, 0, NULL, "false",
     "delete an expired client's transfer-engine entries from the embedded metadata server"},
    {"default_kv_lease_ttl", CRB_FLAG_DURATION, O(svc.default_kv_lease_ttl_ms), 1, MAX_DURATION,
     1, NULL, NULL, "read lease granted by get_replica_list and friends"},
    {"default_kv_soft_pin_ttl", CRB_FLAG_DURATION, O(svc.default_kv_soft_pin_ttl_ms), 0,
     MAX_DURATION, 1, NULL, NULL, "soft pin lifetime when a put asks for one without a ttl"},
    {"max_kv_soft_pin_ttl", CRB_FLAG_DURATION, O(svc.max_kv_soft_pin_ttl_ms), 0, MAX_DURATION, 1,
     NULL, NULL, "longest soft pin a put may ask for"},
    {"allow_evict_soft_pinned_objects", CRB_FLAG_BOOL, O(svc.allow_evict_soft_pinned_objects), 0,
     0, 0, NULL, NULL, "evict soft-pinned objects as a last resort"},
    {"eviction_ratio", CRB_FLAG_RATIO, O(svc.eviction_ratio), 0, 0, 0, NULL, NULL,
     "fraction of used bytes one eviction round frees"},
    {"eviction_high_watermark_ratio", CRB_FLAG_RATIO, O(svc.eviction_high_watermark_ratio), 0, 0,
     0, NULL, NULL, "evict when used/capacity exceeds this"},
    {"allocation_strategy", CRB_FLAG_ENUM, O(svc.allocation_strategy), 0, 0, 0, STRATEGIES, NULL,
     "replica placement: random (sample a few segments, emptiest first), free_ratio_first "
     "(every segment, emptiest first) or local_first (the writer's own segments first)"},
    {"client_ttl", CRB_FLAG_DURATION, O(svc.client_ttl_ms), 1, MAX_DURATION, MS_PER_S, NULL, NULL,
     "a client silent this long is expired and its segments unmounted"},
    {"put_start_discard_timeout_sec", CRB_FLAG_DURATION, O(svc.put_start_discard_timeout_ms), 0,
     MAX_DURATION, MS_PER_S, NULL, NULL, "a put in flight this long may be preempted by a new put"},
    {"put_start_release_timeout_sec", CRB_FLAG_DURATION, O(svc.put_start_release_timeout_ms), 0,
     MAX_DURATION, MS_PER_S, NULL, NULL,
     "space of a preempted or abandoned put is freed after this"},
    {"shared_secret", CRB_FLAG_STRING, O(shared_secret), 0, 0, 0, NULL, "",
     "secret every RPC connection must prove (HMAC challenge; default $CRESCENT_MASTER_SECRET, "
     "which keeps it out of ps)"},
    {"cluster_id", CRB_FLAG_NONEMPTY, O(cluster_id), 0, 0, 0, NULL, "mooncake_cluster",
     "name of this store cluster (in /health, /metrics and the ready line)"},
    {"config_path", CRB_FLAG_PATH, O(config_path), 0, 0, 0, NULL, "",
     "JSON (.json) or YAML (.yaml, .yml) file of settings (the command line wins)"},
    {"client_live_ttl_sec", CRB_FLAG_DURATION, O(svc.client_ttl_ms), 1, MAX_DURATION, MS_PER_S,
     NULL, NULL, "Mooncake's config-file name of --client_ttl"},
    {"memory_allocator", CRB_FLAG_COMPAT_STR, NO_FIELD, 0, 0, 0, ONLY_OFFSET, NULL,
     "segment allocator (only offset)"},
    {"root_fs_dir", CRB_FLAG_COMPAT_STR, NO_FIELD, 0, 0, 0, ONLY_EMPTY, NULL,
     "legacy disk tier (not supported: empty only)"},
    {"enable_disk_eviction", CRB_FLAG_COMPAT_ANYBOOL, NO_FIELD, 0, 0, 0, NULL, "true",
     "eviction of the legacy disk tier (no such tier: no effect)"},
    {"global_file_segment_size", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "size of the legacy disk tier (no such tier: no effect)"},
    /* High availability (docs/ha.md): election through etcd, replication to
     * standbys; Mooncake's oplog and snapshots are other designs. */
    {"enable_ha", CRB_FLAG_BOOL, O(enable_ha), 0, 0, 0, NULL, "false",
     "high availability: campaign for leadership through etcd (docs/ha.md)"},
    {"etcd_endpoints", CRB_FLAG_STRING, O(etcd_endpoints), 0, 0, 0, NULL, "",
     "etcd members h:p[;h:p...] for --enable_ha"},
    {"ha_backend_type", CRB_FLAG_ENUM, O(ha_backend_type), 0, 0, 0, HA_BACKENDS, "etcd",
     "HA backend (only etcd)"},
    {"ha_backend_connstring", CRB_FLAG_STRING, O(ha_backend_connstring), 0, 0, 0, NULL, "",
     "HA backend members (overrides --etcd_endpoints)"},
    {"ha_lease_ttl_sec", CRB_FLAG_DURATION, O(ha_lease_ttl_ms), 2 * MS_PER_S, 3600 * MS_PER_S,
     MS_PER_S, NULL, "5", "leader lease TTL in etcd (whole seconds)"},
    {"ha_advertise_address", CRB_FLAG_STRING, O(ha_advertise_address), 0, 0, 0, NULL, "",
     "host:port the leader publishes for clients (default: rpc address and port)"},
    {"ha_sync_replicas", CRB_FLAG_U32, O(ha_sync_replicas), 0, 1, 0, NULL, "1",
     "1: answer a change once every in-sync standby applied it; 0: do not wait (a failover "
     "may lose the last changes)"},
    {"ha_replication_timeout_ms", CRB_FLAG_DURATION, O(ha_replication_timeout_ms), 10, 60000, 1,
     NULL, "1000", "a follower silent this long leaves the in-sync set"},
    {"enable_oplog", CRB_FLAG_COMPAT_BOOL, NO_FIELD, 0, 0, 0, NULL, NULL,
     "HA oplog replication (not supported: false only)"},
    {"oplog_poll_interval_ms", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "1000",
     "HA oplog (not supported: no effect)"},
    {"oplog_batch_max_entries", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "1024",
     "HA oplog (not supported: no effect)"},
    {"batch_oplog_retry_timeout_sec", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "180",
     "HA oplog (not supported: no effect)"},
    {"enable_snapshot", CRB_FLAG_COMPAT_BOOL, NO_FIELD, 0, 0, 0, NULL, NULL,
     "snapshots of the master's data (not supported: false only)"},
    {"enable_snapshot_restore", CRB_FLAG_COMPAT_BOOL, NO_FIELD, 0, 0, 0, NULL, NULL,
     "restore from a snapshot (not supported: false only)"},
    {"snapshot_backup_dir", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "snapshots (not supported: no effect)"},
    {"snapshot_interval_seconds", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "snapshots (not supported: no effect)"},
    {"snapshot_child_timeout_seconds", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "snapshots (not supported: no effect)"},
    {"snapshot_retention_count", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "snapshots (not supported: no effect)"},
    {"snapshot_object_store_type", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "snapshots (not supported: no effect)"},
    {"snapshot_payload_store_type", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "snapshots (not supported: no effect)"},
    {"snapshot_payload_backend_type", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "snapshots (not supported: no effect)"},
    {"snapshot_catalog_store_type", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "snapshots (not supported: no effect)"},
    {"snapshot_catalog_backend_type", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "snapshots (not supported: no effect)"},
    {"snapshot_catalog_store_connstring", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "snapshots (not supported: no effect)"},
    {"snapshot_catalog_backend_connstring", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "snapshots (not supported: no effect)"},
    /* SSD offload and promotion (docs/disk-tier.md). */
    {"enable_offload", CRB_FLAG_BOOL, O(svc.enable_offload), 0, 0, 0, NULL, NULL,
     "use the SSD tiers of clients that have one (docs/disk-tier.md)"},
    {"offload_on_evict", CRB_FLAG_BOOL, O(svc.offload_on_evict), 0, 0, 0, NULL, NULL,
     "write an object to its holder's disk when it is evicted (else at put end)"},
    {"promotion_on_hit", CRB_FLAG_BOOL, O(svc.promotion_on_hit), 0, 0, 0, NULL, NULL,
     "copy a disk-only object back to memory after --promotion_admission_threshold hits"},
    {"promotion_admission_threshold", CRB_FLAG_U32, O(svc.promotion_admission_threshold), 1, 255,
     0, NULL, NULL, "disk hits of an object before it is promoted (1..255)"},
    {"offload_force_evict", CRB_FLAG_BOOL, O(svc.offload_force_evict), 0, 0, 0, NULL, NULL,
     "with --offload_on_evict: an evicted object the disk tier cannot take now (the round's "
     "cap or the holder's queue is full) is dropped (default: it stays in memory)"},
    {"offloading_queue_limit", CRB_FLAG_U64, O(svc.offloading_queue_limit), 1, 100000000, 0,
     NULL, NULL, "offload tasks waiting for one holder (1..100000000)"},
    {"offload_cap_ratio", CRB_FLAG_RATIO, O(svc.offload_cap_ratio), 0, 0, 0, NULL, NULL,
     "offloads one eviction round may queue, as a fraction of --offloading_queue_limit"},
    {"promotion_queue_limit", CRB_FLAG_U32, O(svc.promotion_queue_limit), 0, UINT32_MAX, 0,
     NULL, NULL, "promotions in flight across all holders (0: none)"},
    {"promotion_max_per_heartbeat", CRB_FLAG_U32, O(svc.promotion_max_per_heartbeat), 0,
     UINT32_MAX, 0, NULL, NULL, "promotions handed to a holder per heartbeat (0 counts as 1)"},
    /* NVMe-oF segments. */
    {"nof_eviction_ratio", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "NVMe-oF segments (not supported: no effect)"},
    {"nof_eviction_high_watermark_ratio", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "NVMe-oF segments (not supported: no effect)"},
    {"nof_heartbeat_interval_sec", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "NVMe-oF segments (not supported: no effect)"},
    {"nof_heartbeat_probe_timeout_ms", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "NVMe-oF segments (not supported: no effect)"},
    {"nof_heartbeat_failures_threshold", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "NVMe-oF segments (not supported: no effect)"},
    /* CXL memory. */
    {"enable_cxl", CRB_FLAG_COMPAT_BOOL, NO_FIELD, 0, 0, 0, NULL, NULL,
     "CXL memory (not supported: false only)"},
    {"cxl_path", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "CXL memory (not supported: no effect)"},
    {"cxl_size", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "CXL memory (not supported: no effect)"},
    /* Dynamic replication. */
    {"dynamic_replication_mode", CRB_FLAG_COMPAT_STR, NO_FIELD, 0, 0, 0, ONLY_OFF, NULL,
     "dynamic replica fan-out (not supported: off only)"},
    {"dynamic_replication_heat_window_seconds", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL,
     "10", "dynamic replication (not supported: no effect)"},
    {"dynamic_replication_admission_qps_threshold", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL,
     "0.8", "dynamic replication (not supported: no effect)"},
    {"dynamic_replication_max_memory_replicas", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL,
     "2", "dynamic replication (not supported: no effect)"},
    /* KV events (ZeroMQ publisher). */
    {"enable_kv_events", CRB_FLAG_COMPAT_BOOL, NO_FIELD, 0, 0, 0, NULL, NULL,
     "KV event publishing (not supported: false only)"},
    {"kv_events_bind_endpoint", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "KV events (not supported: no effect)"},
    {"kv_events_model_name", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "KV events (not supported: no effect)"},
    {"kv_events_backend_id", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "KV events (not supported: no effect)"},
    {"kv_events_tenant_id", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "default",
     "KV events (not supported: no effect)"},
    {"kv_events_additional_salt", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "KV events (not supported: no effect)"},
    {"kv_events_lora_name", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "KV events (not supported: no effect)"},
    {"kv_events_block_size", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "0",
     "KV events (not supported: no effect)"},
    {"kv_events_dp_rank", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "0",
     "KV events (not supported: no effect)"},
    {"kv_events_emit_legacy_compat", CRB_FLAG_COMPAT_ANYBOOL, NO_FIELD, 0, 0, 0, NULL, "true",
     "KV events (not supported: no effect)"},
    {"kv_events_emit_object_key", CRB_FLAG_COMPAT_ANYBOOL, NO_FIELD, 0, 0, 0, NULL, "true",
     "KV events (not supported: no effect)"},
    {"kv_events_queue_capacity", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "65536",
     "KV events (not supported: no effect)"},
    /* Multi-tenancy quotas (crescent's tenants are namespaces without quotas). */
    {"enable_multi_tenants", CRB_FLAG_COMPAT_BOOL, NO_FIELD, 0, 0, 0, NULL, NULL,
     "tenant quotas (not supported: false only)"},
    {"tenant_quota_connector_type", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "file",
     "tenant quotas (not supported: no effect)"},
    {"tenant_quota_connector_uri", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "tenant quotas (not supported: no effect)"},
    {"quota_bytes", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "0",
     "tenant quotas (not supported: no effect)"},
    /* Kubernetes identity (only used by Mooncake's HA views). */
    {"pod_name", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "pod identity of HA views (not used by crescent: no effect)"},
    {"pod_namespace", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "pod identity of HA views (not used by crescent: no effect)"},
    /* The task manager (drain jobs). */
    {"max_total_finished_tasks", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "10000",
     "task manager (not supported: no effect)"},
    {"max_total_pending_tasks", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "10000",
     "task manager (not supported: no effect)"},
    {"max_total_processing_tasks", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "10000",
     "task manager (not supported: no effect)"},
    {"pending_task_timeout_sec", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "300",
     "task manager (not supported: no effect)"},
    {"processing_task_timeout_sec", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "300",
     "task manager (not supported: no effect)"},
    {"max_retry_attempts", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, "10",
     "task manager (not supported: no effect)"},
    /* glog's flags (crescent logs to stderr; the level is CRESCENT_LOG). */
    {"log_dir", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "glog (crescent logs to stderr: no effect)"},
    {"v", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "glog verbosity (set CRESCENT_LOG=debug instead: no effect)"},
    {"minloglevel", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "glog level (set CRESCENT_LOG instead: no effect)"},
    {"stderrthreshold", CRB_FLAG_COMPAT_ANY, NO_FIELD, 0, 0, 0, NULL, NULL,
     "glog (crescent logs to stderr: no effect)"},
    {"logtostderr", CRB_FLAG_COMPAT_ANYBOOL, NO_FIELD, 0, 0, 0, NULL, NULL,
     "glog (crescent logs to stderr: no effect)"},
    {"alsologtostderr", CRB_FLAG_COMPAT_ANYBOOL, NO_FIELD, 0, 0, 0, NULL, NULL,
     "glog (crescent logs to stderr: no effect)"},
};
/* clang-format on */

static const crb_flag_set TABLE = {FLAGS, sizeof(FLAGS) / sizeof(FLAGS[0])};
static const char *const ACTIONS[] = {"help", "h", "version", NULL};

const char *crk_alloc_strategy_name(crk_alloc_strategy s)
{
    if ((unsigned)s < sizeof(STRATEGIES) / sizeof(STRATEGIES[0]) - 1)
        return STRATEGIES[s];
    return "?";
}

void crk_master_options_defaults(crk_master_options *o)
{
    memset(o, 0, sizeof(*o));
    crk_config_default(&o->svc);
    int rc = crb_flags_defaults(&TABLE, o);
    (void)rc; /* the table's defaults are valid (flags_test checks them) */
}

/* Rules between flags, checked once everything is applied: the service's. */
static int check_cross(const crk_master_options *o)
{
    int rc = crk_config_validate(&o->svc);
    if (rc != 0)
        return crb_error(rc, "flags: %s", cr_last_error_message());
    if (o->ha_lease_ttl_ms % MS_PER_S != 0)
        return crb_error(CR_INVALID_PARAMS,
                         "--ha_lease_ttl_sec must be whole seconds (etcd's unit)");
    return 0;
}

static bool is_action(const char *name)
{
    const char *const *a = ACTIONS;
    for (; *a != NULL; a++)
        if (strcmp(*a, name) == 0)
            return true;
    return false;
}

int crk_master_options_set(crk_master_options *o, const char *name, const char *value)
{
    char ctx[CONTEXT_BUF];
    if (name == NULL || value == NULL)
        return crb_error(CR_INVALID_PARAMS, "crk_master_options_set: NULL argument");
    const crb_flag *f = crb_flag_find(&TABLE, name, strlen(name));
    if (f == NULL || f->type == CRB_FLAG_PATH || is_action(name))
        return crb_error(CR_INVALID_PARAMS, "unknown or unsettable flag '--%s'", name);
    snprintf(ctx, sizeof(ctx), "--%s=%s", f->name, value);
    crk_master_options tmp = *o;
    int rc = crb_flag_set_value(f, &tmp, value, ctx);
    if (rc == 0)
        rc = check_cross(&tmp);
    if (rc == 0)
        *o = tmp;
    return rc;
}

static bool is_unsupported(const crb_flag *f)
{
    return f->type == CRB_FLAG_COMPAT_BOOL || f->type == CRB_FLAG_COMPAT_STR ||
           f->type == CRB_FLAG_COMPAT_ANY || f->type == CRB_FLAG_COMPAT_ANYBOOL;
}

/* Remember that an unsupported feature's setting was given (once per name). */
static void note_unsupported(crk_master_options *o, const crb_flag *f)
{
    if (!is_unsupported(f))
        return;
    for (size_t i = 0; i < o->n_unsupported; i++)
        if (strcmp(o->unsupported[i], f->name) == 0)
            return;
    if (o->n_unsupported < CRK_FLAG_UNSUPPORTED_MAX)
        o->unsupported[o->n_unsupported++] = f->name;
}

const char *crk_master_flag_help(const char *name)
{
    const crb_flag *f = name != NULL ? crb_flag_find(&TABLE, name, strlen(name)) : NULL;
    return f != NULL ? f->help : NULL;
}

/* Apply one config-file entry; messages name the file, line and key. */
static int apply_entry(crk_master_options *o, const char *path, const crk_conf_entry *e)
{
    char ctx[CONTEXT_BUF];
    const char *key = e->key;
    char where[CONTEXT_BUF / 2];
    if (e->line > 0)
        snprintf(where, sizeof(where), "%s:%d", path, e->line);
    else
        snprintf(where, sizeof(where), "%s", path);

    const crb_flag *f = crb_flag_find(&TABLE, key, strlen(key));
    if (f == NULL || is_action(key) || strchr(key, '-') != NULL)
        return crb_error(CR_INVALID_PARAMS, "%s: unknown key '%s'", where, key);
    if (f->type == CRB_FLAG_PATH)
        return crb_error(CR_INVALID_PARAMS, "%s: key '%s' is only accepted on the command line",
                         where, key);

    bool is_bool = crb_flag_is_bool(f);
    bool any = f->type == CRB_FLAG_COMPAT_ANY;
    bool stringish = f->type == CRB_FLAG_STRING || f->type == CRB_FLAG_NONEMPTY ||
                     f->type == CRB_FLAG_ENUM || f->type == CRB_FLAG_COMPAT_STR;
    switch (e->kind) {
    case CRK_CONF_STRING:
    case CRK_CONF_PLAIN:
        break;
    case CRK_CONF_BOOL:
        if (!is_bool && !any)
            return crb_error(CR_INVALID_PARAMS, "%s: key '%s' must not be a boolean", where, key);
        break;
    case CRK_CONF_INT:
        if ((stringish || is_bool) && !any)
            return crb_error(CR_INVALID_PARAMS, "%s: key '%s' must be a %s", where, key,
                             is_bool ? "boolean" : "string");
        break;
    case CRK_CONF_REAL:
        if (f->type != CRB_FLAG_RATIO && !any)
            return crb_error(CR_INVALID_PARAMS, "%s: key '%s' must be %s", where, key,
                             stringish ? "a string"
                             : is_bool ? "a boolean"
                                       : "an integer");
        break;
    case CRK_CONF_NULL:
        return crb_error(CR_INVALID_PARAMS, "%s: key '%s' must not be null", where, key);
    }
    snprintf(ctx, sizeof(ctx), "%s: key '%s' = %s", where, key, e->value);
    int rc = crb_flag_set_value(f, o, e->value, ctx);
    if (rc == 0)
        note_unsupported(o, f);
    return rc;
}

/* Apply the file over *o without the cross-flag checks (the caller runs them). */
static int load_file(crk_master_options *o, const char *path)
{
    crk_conf_list l = {0};
    int rc = crk_conf_read_file(path, &l);
    for (size_t i = 0; rc == 0 && i < l.n; i++)
        rc = apply_entry(o, path, &l.v[i]);
    crk_conf_list_free(&l);
    return rc;
}

int crk_master_options_load_file(crk_master_options *o, const char *path)
{
    if (o == NULL || path == NULL)
        return crb_error(CR_INVALID_PARAMS, "crk_master_options_load_file: NULL argument");
    crk_master_options tmp = *o;
    int rc = load_file(&tmp, path);
    if (rc == 0)
        rc = check_cross(&tmp);
    if (rc == 0)
        *o = tmp;
    return rc;
}

static int parse_expanded(int argc, char *const argv[], crk_master_options *out);

int crk_master_options_parse(int argc, char *const argv[], crk_master_options *out)
{
    if (argc < 0 || (argc > 0 && argv == NULL) || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crk_master_options_parse: bad arguments");
    /* --help / --version answer without reading any file. */
    static const char *const actions[] = {"help", "h", "version", NULL};
    if (crb_flags_present(argc, argv, actions))
        return parse_expanded(argc, argv, out);
    crk_args a = {0};
    int rc = crk_flagfile_expand(argc, argv, &a);
    if (rc == 0)
        rc = parse_expanded(a.argc, a.argv, out);
    crk_args_free(&a);
    return rc;
}

/* The command line after --flagfile expansion. */
static int parse_expanded(int argc, char *const argv[], crk_master_options *out)
{
    crk_master_options o;
    crk_master_options_defaults(&o);

    /* --help / --version win over everything else, even over bad flags. */
    static const char *const help[] = {"help", "h", NULL};
    static const char *const version[] = {"version", NULL};
    o.show_help = crb_flags_present(argc, argv, help);
    o.show_version = crb_flags_present(argc, argv, version);
    if (o.show_help || o.show_version) {
        *out = o;
        return 0;
    }

    crb_flag_arg *as = argc > 1 ? calloc((size_t)argc, sizeof(*as)) : NULL;
    if (argc > 1 && as == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "flags: out of memory");
    size_t n = 0;
    int rc = argc > 1 ? crb_flags_resolve(&TABLE, argc, argv, ACTIONS, as, &n) : 0;
    const char *config = NULL;
    for (size_t k = 0; rc == 0 && k < n; k++)
        if (as[k].f->type == CRB_FLAG_PATH)
            config = as[k].value;
    if (rc == 0 && config != NULL && config[0] != '\0')
        rc = load_file(&o, config);
    if (rc == 0)
        rc = crb_flags_apply(&o, as, n);
    for (size_t k = 0; rc == 0 && k < n; k++)
        note_unsupported(&o, as[k].f);
    if (rc == 0)
        rc = check_cross(&o);
    free(as);
    if (rc == 0)
        *out = o;
    return rc;
}

void crk_master_options_usage(FILE *f, const char *argv0)
{
    crk_master_options d;
    crk_master_options_defaults(&d);
    fprintf(f,
            "usage: %s [--flag=value ...]\n"
            "\n"
            "crescent-master: metadata service of the crescent KV store (Mooncake-compatible\n"
            "flags). Flags may also be written -flag=value or --flag value; booleans as --flag,\n"
            "--noflag or --flag=true|false. Durations take ms, s, m or h (500ms, 5s, 30m, 1h);\n"
            "a bare number is in the unit shown. The command line overrides --config_path;\n"
            "--flagfile=FILE reads more flags from FILE, one per line.\n"
            "\n",
            argv0 != NULL ? argv0 : "crescent-master");
    crb_flags_usage(f, &TABLE, &d);
    fprintf(f, "  %-44s %s\n  %-44s %s\n", "--help, -h", "print this text and exit", "--version",
            "print the version and exit");
}
