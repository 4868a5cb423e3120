/*
 * flags.h - crescent-master's command line and --config_path JSON file.
 *
 * Flag names and defaults are Mooncake's (mooncake_master), so existing
 * deployment scripts keep working. Precedence: built-in defaults, then the
 * JSON file named by --config_path (an object whose keys are flag names),
 * then the command line, wherever --config_path appears on it; a flag given
 * twice on the command line takes its last value.
 *
 * The file is JSON (".json") or YAML (".yaml", ".yml"), a flat mapping of
 * Mooncake's setting names to scalars (master/conf_file.h); its keys are
 * the flags' names plus Mooncake's file-only aliases (client_live_ttl_sec).
 * An unknown key or a bad value is refused naming the file, line and key.
 *
 * Syntax: --flag=value, --flag value, -flag=value, -flag value; '-' and '_'
 * are interchangeable inside names (--rpc-port). Booleans: --flag alone is
 * true, --noflag is false, --flag=true|false|1|0|yes|no (any case); a
 * boolean never takes the next argument ("--enable_ha false" is an error,
 * not a silent true). "--" ends the flags; crescent-master takes no
 * positional arguments.
 *
 * Values:
 *   durations  <digits>[ms|s|m|h]; without a unit the flag's Mooncake unit
 *              (ms for the *_kv_*_ttl flags, s for client_ttl and *_sec /
 *              *_seconds flags). Stored in milliseconds.
 *   ratios     a decimal in [0, 1].
 *   ports      0..65535; 0 asks the kernel for a free port (tests).
 *   strings    at most the field's size - 1 bytes; hosts must be non-empty.
 *
 * One table (flags.c, on base/flagtab.h) holds every flag's name, type,
 * field, bounds, default and help; the service's fields are in `svc`, with
 * crk_config_default's defaults and checked by crk_config_validate after
 * everything is applied.
 *
 * Every failure is CR_INVALID_PARAMS with a message that names the flag (or
 * file and key) and the value; nothing here prints, exits or aborts:
 * --help and --version only set show_help / show_version for the caller.
 *
 * Threading: no shared state; functions are reentrant.
 */
#ifndef CRESCENT_MASTER_FLAGS_H
#define CRESCENT_MASTER_FLAGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "master/service.h"

#define CRK_FLAG_HOST_MAX        256
#define CRK_FLAG_NAME_MAX        256
#define CRK_FLAG_PATH_MAX        4096
#define CRK_FLAG_UNSUPPORTED_MAX 128
#define CRK_FLAG_SECRET_MAX      256

typedef struct crk_master_options {
    /* RPC server */
    uint16_t rpc_port;                     /* --rpc_port (alias --port): 50051 */
    char rpc_address[CRK_FLAG_HOST_MAX];   /* --rpc_address: "0.0.0.0" */
    char rpc_interface[CRK_FLAG_HOST_MAX]; /* --rpc_interface: "" (bind rpc_address) */
    uint32_t rpc_thread_num;               /* --rpc_thread_num: 0 = min(max_threads, cores) */
    uint32_t max_threads;                  /* --max_threads: 16 */
    uint64_t rpc_conn_timeout_ms;          /* --rpc_conn_timeout_seconds: 0 = none */
    bool rpc_enable_tcp_no_delay;          /* --rpc_enable_tcp_no_delay: true */
    uint32_t rpc_max_connections;          /* --rpc_max_connections: 0 = from the fd limit */
    bool rpc_local_socket;                 /* --rpc_local_socket: true */
    uint32_t rpc_busy_poll_us;             /* --rpc_busy_poll_us: 0 = as rpc_adaptive_poll says */
    bool rpc_adaptive_poll;                /* --rpc_adaptive_poll: false (base/spin.h) */

    /* Metrics and admin HTTP (/metrics, /health, /get_all_segments, /query_key) */
    bool enable_metric_reporting;         /* --enable_metric_reporting: true (summary log) */
    uint64_t metric_report_interval_ms;   /* --metric_report_interval_sec: 10 s */
    uint16_t metrics_port;                /* --metrics_port: 9003 */
    char metrics_host[CRK_FLAG_HOST_MAX]; /* --metrics_host: "0.0.0.0" */

    /* Embedded HTTP metadata server for the transfer engine */
    bool enable_http_metadata_server;                  /* false */
    uint16_t http_metadata_server_port;                /* 8080 */
    char http_metadata_server_host[CRK_FLAG_HOST_MAX]; /* "0.0.0.0" */
    bool enable_metadata_cleanup_on_timeout;           /* false */

    /* The service (objects, leases, pins, eviction, clients, in-flight puts,
     * placement): the flags --default_kv_lease_ttl ... --allocation_strategy
     * write these fields directly; defaults are crk_config_default's and
     * validation crk_config_validate's, so the service and the flags cannot
     * disagree. */
    crk_config svc;

    /* Shared secret RPC connections must prove (master/auth.h): --shared_secret,
     * else $CRESCENT_MASTER_SECRET (the daemon reads it); "" = none. */
    char shared_secret[CRK_FLAG_SECRET_MAX];
    /* High availability (docs/ha.md) */
    bool enable_ha;                                /* --enable_ha: false */
    char etcd_endpoints[CRK_FLAG_PATH_MAX];        /* --etcd_endpoints: "" */
    int ha_backend_type;                           /* --ha_backend_type: 0 = etcd (only) */
    char ha_backend_connstring[CRK_FLAG_PATH_MAX]; /* --ha_backend_connstring: "" */
    uint64_t ha_lease_ttl_ms;                      /* --ha_lease_ttl_sec: 5 s */
    char ha_advertise_address[CRK_FLAG_HOST_MAX];  /* --ha_advertise_address: "" */
    uint32_t ha_sync_replicas;                     /* --ha_sync_replicas: 1 */
    uint64_t ha_replication_timeout_ms;            /* --ha_replication_timeout_ms: 1000 */

    /* Cluster */
    char cluster_id[CRK_FLAG_NAME_MAX];  /* --cluster_id: "mooncake_cluster" */
    char config_path[CRK_FLAG_PATH_MAX]; /* --config_path: "" (none) */

    /* Mooncake settings of features crescent-master lacks that were given
     * at a value it accepts (the feature's off/default value, or any value
     * of one of its tuning knobs): the caller warns once for each. The
     * names are the flag table's (static); at most CRK_FLAG_UNSUPPORTED_MAX. */
    const char *unsupported[CRK_FLAG_UNSUPPORTED_MAX];
    size_t n_unsupported;

    /* Actions for the caller */
    bool show_help;    /* --help / -h */
    bool show_version; /* --version */
} crk_master_options;

/** Fill *o with the defaults. Never fails. */
void crk_master_options_defaults(crk_master_options *o);

/**
 * Parse argv[1..argc) (argv[0] is the program) over the defaults, loading
 * --config_path first if given. When --help or --version appears anywhere,
 * only show_help / show_version are set (everything else is defaults and no
 * file is read) and the call succeeds. On success *out is written; on
 * failure it is untouched and the status is CR_INVALID_PARAMS.
 */
int crk_master_options_parse(int argc, char *const argv[], crk_master_options *out);

/**
 * The help text of flag `name` (for warnings about an unsupported
 * setting), or NULL when there is no such flag.
 */
const char *crk_master_flag_help(const char *name);

/**
 * Set one flag by name from text, exactly as "--name=value" would, then
 * re-check the cross-flag rules. For embedding and tests. On failure *o is
 * untouched. "config_path", "help" and "version" are not settable here.
 */
int crk_master_options_set(crk_master_options *o, const char *name, const char *value);

/**
 * Apply a JSON or YAML config file over *o (keys are flag names). Unknown keys,
 * values of the wrong type or out of range, and unreadable or malformed
 * files are CR_INVALID_PARAMS naming the file, and the key or line/column.
 * On failure *o is untouched.
 */
int crk_master_options_load_file(crk_master_options *o, const char *path);

/** Write the usage text (every flag, its default and unit) to f. */
void crk_master_options_usage(FILE *f, const char *argv0);

/** "random", "free_ratio_first", "local_first"; "?" otherwise. */
const char *crk_alloc_strategy_name(crk_alloc_strategy s);

#endif
