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
 * JSON scalars are turned into text first (numbers printed, booleans as
 * true/false), after a type check that keeps e.g. a JSON number out of a
 * string flag.
 *
 * Parsing argv: --help/--version short-circuit; then every argument is
 * resolved to (flag, value text), reporting unknown flags, missing values
 * and stray arguments; then defaults, the config file and the assignments
 * are applied in order, and the service's checks run last. Everything
 * happens on a local copy that is written to the caller only on success.
 *
 * A few Mooncake flags name features crescent-master does not have (HA,
 * offload, multi-tenancy, the legacy disk tier, other allocators). They are
 * accepted at their default value, so unchanged deployment scripts work,
 * and refused with a clear message otherwise: never silently ignored.
 */
#include "master/flags.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "base/flagtab.h"
#include "crescent/status.h"

#define MS_PER_S     ((uint64_t)1000)
#define MS_PER_HOUR  (3600 * MS_PER_S)
#define MAX_DURATION (365 * 24 * MS_PER_HOUR) /* one year, in ms */
#define MAX_THREADS  1024
#define MAX_CONNS    1000000
#define CONTEXT_BUF  320 /* "--flag=value" or "config 'path': key 'k'" for messages */

_Static_assert(sizeof(crk_alloc_strategy) == sizeof(int), "ENUM flags store an int");

#define O(member) CRB_FLAG_FIELD(crk_master_options, member)
#define NO_FIELD  0, 0

static const char *const STRATEGIES[] = {"random", "free_ratio_first", "local_first", NULL};
static const char *const ONLY_OFFSET[] = {"offset", NULL};
static const char *const ONLY_EMPTY[] = {"", NULL};

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
    {"cluster_id", CRB_FLAG_NONEMPTY, O(cluster_id), 0, 0, 0, NULL, "mooncake_cluster",
     "name of this store cluster (in /health, /metrics and the ready line)"},
    {"config_path", CRB_FLAG_PATH, O(config_path), 0, 0, 0, NULL, "",
     "JSON file of flag values (the command line wins)"},
    {"memory_allocator", CRB_FLAG_COMPAT_STR, NO_FIELD, 0, 0, 0, ONLY_OFFSET, NULL,
     "segment allocator (only offset)"},
    {"enable_ha", CRB_FLAG_COMPAT_BOOL, NO_FIELD, 0, 0, 0, NULL, NULL,
     "high availability (not supported: false only)"},
    {"enable_offload", CRB_FLAG_BOOL, O(svc.enable_offload), 0, 0, 0, NULL, NULL,
     "use the SSD tiers of clients that have one (docs/disk-tier.md)"},
    {"offload_on_evict", CRB_FLAG_BOOL, O(svc.offload_on_evict), 0, 0, 0, NULL, NULL,
     "write an object to its holder's disk when it is evicted (else at put end)"},
    {"promotion_on_hit", CRB_FLAG_BOOL, O(svc.promotion_on_hit), 0, 0, 0, NULL, NULL,
     "copy a disk-only object back to memory after --promotion_admission_threshold hits"},
    {"promotion_admission_threshold", CRB_FLAG_U32, O(svc.promotion_admission_threshold), 1, 255,
     0, NULL, NULL, "disk hits of an object before it is promoted (1..255)"},
    {"enable_multi_tenants", CRB_FLAG_COMPAT_BOOL, NO_FIELD, 0, 0, 0, NULL, NULL,
     "tenants (not supported: false only)"},
    {"root_fs_dir", CRB_FLAG_COMPAT_STR, NO_FIELD, 0, 0, 0, ONLY_EMPTY, NULL,
     "legacy disk tier (not supported: empty only)"},
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

/* Apply one JSON member; ctx already names the file. */
static int apply_json(crk_master_options *o, const char *path, const char *key, json_t *val)
{
    char ctx[CONTEXT_BUF];
    char text[64];
    const char *value = text;

    const crb_flag *f = crb_flag_find(&TABLE, key, strlen(key));
    if (f == NULL || is_action(key))
        return crb_error(CR_INVALID_PARAMS, "config '%s': unknown key '%s'", path, key);
    if (f->type == CRB_FLAG_PATH)
        return crb_error(CR_INVALID_PARAMS,
                         "config '%s': key '%s' is only accepted on the command line", path, key);

    bool stringish = f->type == CRB_FLAG_STRING || f->type == CRB_FLAG_NONEMPTY ||
                     f->type == CRB_FLAG_ENUM || f->type == CRB_FLAG_COMPAT_STR;
    switch (json_typeof(val)) {
    case JSON_STRING:
        value = json_string_value(val);
        if (strlen(value) != json_string_length(val))
            return crb_error(CR_INVALID_PARAMS, "config '%s': key '%s' contains a NUL byte", path,
                             key);
        break;
    case JSON_TRUE:
    case JSON_FALSE:
        if (!crb_flag_is_bool(f))
            return crb_error(CR_INVALID_PARAMS, "config '%s': key '%s' must not be a boolean", path,
                             key);
        snprintf(text, sizeof(text), "%s", json_is_true(val) ? "true" : "false");
        break;
    case JSON_INTEGER:
        if (stringish || crb_flag_is_bool(f))
            return crb_error(CR_INVALID_PARAMS, "config '%s': key '%s' must be a %s", path, key,
                             crb_flag_is_bool(f) ? "boolean" : "string");
        snprintf(text, sizeof(text), "%" JSON_INTEGER_FORMAT, json_integer_value(val));
        break;
    case JSON_REAL:
        if (f->type != CRB_FLAG_RATIO)
            return crb_error(CR_INVALID_PARAMS, "config '%s': key '%s' must be %s", path, key,
                             stringish             ? "a string"
                             : crb_flag_is_bool(f) ? "a boolean"
                                                   : "an integer");
        snprintf(text, sizeof(text), "%.17g", json_real_value(val));
        break;
    default:
        return crb_error(CR_INVALID_PARAMS,
                         "config '%s': key '%s' must be a string, number or boolean", path, key);
    }
    snprintf(ctx, sizeof(ctx), "config '%s': key '%s' = %s", path, key, value);
    return crb_flag_set_value(f, o, value, ctx);
}

/* Apply the file over *o without the cross-flag checks (the caller runs them). */
static int load_file(crk_master_options *o, const char *path)
{
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (root == NULL) {
        if (err.line <= 0)
            return crb_error(CR_INVALID_PARAMS, "config '%s': %s", path, err.text);
        return crb_error(CR_INVALID_PARAMS, "config '%s': line %d column %d: %s", path, err.line,
                         err.column, err.text);
    }
    int rc = 0;
    if (!json_is_object(root)) {
        rc = crb_error(CR_INVALID_PARAMS, "config '%s': the top level must be a JSON object", path);
        goto decref_root;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        rc = apply_json(o, path, key, val);
        if (rc != 0)
            break;
    }
decref_root:
    json_decref(root);
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

int crk_master_options_parse(int argc, char *const argv[], crk_master_options *out)
{
    crk_master_options o;
    crk_master_options_defaults(&o);
    if (argc < 0 || (argc > 0 && argv == NULL) || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crk_master_options_parse: bad arguments");

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
            "a bare number is in the unit shown. The command line overrides --config_path.\n"
            "\n",
            argv0 != NULL ? argv0 : "crescent-master");
    crb_flags_usage(f, &TABLE, &d);
    fprintf(f, "  %-44s %s\n  %-44s %s\n", "--help, -h", "print this text and exit", "--version",
            "print the version and exit");
}
