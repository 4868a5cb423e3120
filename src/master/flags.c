/*
 * flags.c - crescent-master's flags (see flags.h for the syntax).
 *
 * Design: one table describes every flag (name, type, field, bounds, default
 * unit, help), and every way of setting a flag (argv, JSON file,
 * crk_master_options_set) funnels into set_value() with the value as text,
 * so the three paths cannot disagree about what is valid. JSON scalars are
 * turned into text first (numbers printed, booleans as true/false), after a
 * type check that keeps e.g. a JSON number out of a string flag.
 *
 * Parsing argv is three passes: --help/--version short-circuit; a syntax
 * pass that resolves every argument to (flag, value text) and reports
 * unknown flags, missing values and stray arguments; then defaults, the
 * config file and the recorded assignments in order, and the cross-flag
 * checks. Everything happens on a local copy that is written to the caller
 * only on success.
 *
 * A few Mooncake flags name features crescent-master does not have (HA,
 * offload, multi-tenancy, the legacy disk tier, other allocators). They are
 * accepted at their default value, so unchanged deployment scripts work,
 * and refused with a clear message otherwise: never silently ignored.
 */
#include "master/flags.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "base/error.h"
#include "crescent/status.h"

#define MS_PER_S     ((uint64_t)1000)
#define MS_PER_MIN   (60 * MS_PER_S)
#define MS_PER_HOUR  (60 * MS_PER_MIN)
#define MAX_DURATION (365 * 24 * MS_PER_HOUR) /* one year, in ms */
#define MAX_THREADS  1024
#define NAME_BUF     64  /* longest flag name + slack */
#define CONTEXT_BUF  320 /* "--flag=value" or "config 'path': key 'k'" for messages */

typedef enum ftype {
    F_BOOL,
    F_PORT,        /* uint16_t, 0..65535 */
    F_U32,         /* uint32_t in [min, max] */
    F_DURATION,    /* uint64_t ms in [min, max]; bare numbers in unit_ms */
    F_RATIO,       /* double in [0, 1] */
    F_STRING,      /* char[size], may be empty */
    F_NONEMPTY,    /* char[size], must not be empty (hosts, cluster id) */
    F_STRATEGY,    /* crk_alloc_strategy */
    F_PATH,        /* --config_path: argv only */
    F_COMPAT_BOOL, /* Mooncake flag for an absent feature: only false is accepted */
    F_COMPAT_STR,  /* Mooncake flag for an absent feature: only `only` is accepted */
} ftype;

typedef struct flag {
    const char *name;
    ftype type;
    size_t offset; /* into crk_master_options */
    size_t size;   /* of the field */
    uint64_t min, max;
    uint64_t unit_ms; /* F_DURATION: unit of a bare number */
    const char *only; /* F_COMPAT_STR: the one accepted value */
    const char *help;
} flag;

#define FIELD(f) offsetof(crk_master_options, f), sizeof(((crk_master_options *)0)->f)
#define NO_FIELD 0, 0

static const flag FLAGS[] = {
    {"rpc_port", F_PORT, FIELD(rpc_port), 0, 65535, 0, NULL, "RPC listen port (0: any free port)"},
    {"port", F_PORT, FIELD(rpc_port), 0, 65535, 0, NULL, "deprecated alias of --rpc_port"},
    {"rpc_address", F_NONEMPTY, FIELD(rpc_address), 0, 0, 0, NULL, "address the RPC server binds"},
    {"rpc_interface", F_STRING, FIELD(rpc_interface), 0, 0, 0, NULL,
     "bind the address of this network interface instead of --rpc_address"},
    {"rpc_thread_num", F_U32, FIELD(rpc_thread_num), 0, MAX_THREADS, 0, NULL,
     "RPC worker threads (0: --max_threads)"},
    {"max_threads", F_U32, FIELD(max_threads), 1, MAX_THREADS, 0, NULL,
     "worker threads when --rpc_thread_num is 0"},
    {"rpc_conn_timeout_seconds", F_DURATION, FIELD(rpc_conn_timeout_ms), 0, MAX_DURATION, MS_PER_S,
     NULL, "close a client connection idle this long (0: never)"},
    {"rpc_enable_tcp_no_delay", F_BOOL, FIELD(rpc_enable_tcp_no_delay), 0, 0, 0, NULL,
     "set TCP_NODELAY on RPC connections"},
    {"enable_metric_reporting", F_BOOL, FIELD(enable_metric_reporting), 0, 0, 0, NULL,
     "log a metrics summary every 10 s"},
    {"metrics_port", F_PORT, FIELD(metrics_port), 0, 65535, 0, NULL,
     "port of /metrics, /health, /get_all_segments, /query_key (0: any free port)"},
    {"metrics_host", F_NONEMPTY, FIELD(metrics_host), 0, 0, 0, NULL,
     "address the metrics HTTP server binds"},
    {"enable_http_metadata_server", F_BOOL, FIELD(enable_http_metadata_server), 0, 0, 0, NULL,
     "serve the transfer engine's HTTP metadata (/metadata?key=) from the master"},
    {"http_metadata_server_port", F_PORT, FIELD(http_metadata_server_port), 0, 65535, 0, NULL,
     "port of the embedded HTTP metadata server (0: any free port)"},
    {"http_metadata_server_host", F_NONEMPTY, FIELD(http_metadata_server_host), 0, 0, 0, NULL,
     "address the embedded HTTP metadata server binds"},
    {"enable_metadata_cleanup_on_timeout", F_BOOL, FIELD(enable_metadata_cleanup_on_timeout), 0, 0,
     0, NULL, "delete an expired client's HTTP metadata entries"},
    {"default_kv_lease_ttl", F_DURATION, FIELD(default_kv_lease_ttl_ms), 0, MAX_DURATION, 1, NULL,
     "read lease granted by get_replica_list and friends"},
    {"default_kv_soft_pin_ttl", F_DURATION, FIELD(default_kv_soft_pin_ttl_ms), 0, MAX_DURATION, 1,
     NULL, "soft pin lifetime when a put asks for one without a ttl"},
    {"max_kv_soft_pin_ttl", F_DURATION, FIELD(max_kv_soft_pin_ttl_ms), 0, MAX_DURATION, 1, NULL,
     "longest soft pin a put may ask for"},
    {"allow_evict_soft_pinned_objects", F_BOOL, FIELD(allow_evict_soft_pinned_objects), 0, 0, 0,
     NULL, "evict soft-pinned objects as a last resort"},
    {"eviction_ratio", F_RATIO, FIELD(eviction_ratio), 0, 0, 0, NULL,
     "fraction of used bytes one eviction round frees"},
    {"eviction_high_watermark_ratio", F_RATIO, FIELD(eviction_high_watermark_ratio), 0, 0, 0, NULL,
     "evict when used/capacity exceeds this"},
    {"allocation_strategy", F_STRATEGY, FIELD(allocation_strategy), 0, 0, 0, NULL,
     "replica placement: random, free_ratio_first or local_first"},
    {"client_ttl", F_DURATION, FIELD(client_ttl_ms), 1, MAX_DURATION, MS_PER_S, NULL,
     "a client silent this long is expired and its segments unmounted"},
    {"put_start_discard_timeout_sec", F_DURATION, FIELD(put_start_discard_timeout_ms), 0,
     MAX_DURATION, MS_PER_S, NULL, "a put in flight this long may be preempted by a new put"},
    {"put_start_release_timeout_sec", F_DURATION, FIELD(put_start_release_timeout_ms), 0,
     MAX_DURATION, MS_PER_S, NULL, "space of a preempted or abandoned put is freed after this"},
    {"cluster_id", F_NONEMPTY, FIELD(cluster_id), 0, 0, 0, NULL, "name of this store cluster"},
    {"config_path", F_PATH, FIELD(config_path), 0, 0, 0, NULL,
     "JSON file of flag values (the command line wins)"},
    {"memory_allocator", F_COMPAT_STR, NO_FIELD, 0, 0, 0, "offset",
     "segment allocator (only offset)"},
    {"enable_ha", F_COMPAT_BOOL, NO_FIELD, 0, 0, 0, NULL,
     "high availability (not supported: false only)"},
    {"enable_offload", F_COMPAT_BOOL, NO_FIELD, 0, 0, 0, NULL,
     "SSD offload (not supported: false only)"},
    {"offload_on_evict", F_COMPAT_BOOL, NO_FIELD, 0, 0, 0, NULL,
     "offload on eviction (not supported: false only)"},
    {"enable_multi_tenants", F_COMPAT_BOOL, NO_FIELD, 0, 0, 0, NULL,
     "tenants (not supported: false only)"},
    {"root_fs_dir", F_COMPAT_STR, NO_FIELD, 0, 0, 0, "",
     "legacy disk tier (not supported: empty only)"},
};
#define N_FLAGS (sizeof(FLAGS) / sizeof(FLAGS[0]))

static const char *const STRATEGIES[] = {"random", "free_ratio_first", "local_first"};

const char *crk_alloc_strategy_name(crk_alloc_strategy s)
{
    if ((unsigned)s < sizeof(STRATEGIES) / sizeof(STRATEGIES[0]))
        return STRATEGIES[s];
    return "?";
}

void crk_master_options_defaults(crk_master_options *o)
{
    memset(o, 0, sizeof(*o));
    o->rpc_port = 50051;
    strcpy(o->rpc_address, "0.0.0.0");
    o->rpc_thread_num = 0;
    o->max_threads = 16;
    o->rpc_conn_timeout_ms = 0;
    o->rpc_enable_tcp_no_delay = true;
    o->enable_metric_reporting = true;
    o->metrics_port = 9003;
    strcpy(o->metrics_host, "0.0.0.0");
    o->enable_http_metadata_server = false;
    o->http_metadata_server_port = 8080;
    strcpy(o->http_metadata_server_host, "0.0.0.0");
    o->enable_metadata_cleanup_on_timeout = false;
    o->default_kv_lease_ttl_ms = 10000;
    o->default_kv_soft_pin_ttl_ms = 30 * MS_PER_MIN;
    o->max_kv_soft_pin_ttl_ms = 24 * MS_PER_HOUR;
    o->allow_evict_soft_pinned_objects = true;
    o->eviction_ratio = 0.05;
    o->eviction_high_watermark_ratio = 0.90;
    o->allocation_strategy = CRK_ALLOC_RANDOM;
    o->client_ttl_ms = 10 * MS_PER_S;
    o->put_start_discard_timeout_ms = 30 * MS_PER_S;
    o->put_start_release_timeout_ms = 600 * MS_PER_S;
    strcpy(o->cluster_id, "mooncake_cluster");
}

/* ------------------------------------------------------------------------ */
/* Names                                                                    */
/* ------------------------------------------------------------------------ */

/* Copy the first n bytes of name into buf with '-' as '_'; -1 if too long. */
static int normalize(const char *name, size_t n, char buf[NAME_BUF])
{
    if (n == 0 || n >= NAME_BUF)
        return -1;
    for (size_t i = 0; i < n; i++)
        buf[i] = name[i] == '-' ? '_' : name[i];
    buf[n] = '\0';
    return 0;
}

static const flag *find_flag(const char *name)
{
    for (size_t i = 0; i < N_FLAGS; i++)
        if (strcmp(FLAGS[i].name, name) == 0)
            return &FLAGS[i];
    return NULL;
}

static bool is_bool(const flag *f)
{
    return f->type == F_BOOL || f->type == F_COMPAT_BOOL;
}

/* ------------------------------------------------------------------------ */
/* Values                                                                   */
/* ------------------------------------------------------------------------ */

static int parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes"};
    static const char *const no[] = {"false", "0", "no"};
    for (size_t i = 0; i < 3; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

/* Leading decimal digits of s as a u64; *end after them. -1 if none or overflow. */
static int parse_digits(const char *s, uint64_t *out, const char **end)
{
    uint64_t v = 0;
    const char *p = s;
    if (!isdigit((unsigned char)*p))
        return -1;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    *end = p;
    return 0;
}

/* "<digits>[ms|s|m|h]" in ms; a bare number is in unit_ms. */
static int parse_duration(const char *s, uint64_t unit_ms, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t ms;
    } units[] = {{"ms", 1}, {"s", MS_PER_S}, {"m", MS_PER_MIN}, {"h", MS_PER_HOUR}};
    uint64_t v;
    const char *end;
    if (parse_digits(s, &v, &end) != 0)
        return -1;
    uint64_t mult = unit_ms;
    if (*end != '\0') {
        mult = 0;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
            if (strcmp(end, units[i].suffix) == 0)
                mult = units[i].ms;
        if (mult == 0)
            return -1;
    }
    if (v > UINT64_MAX / mult)
        return -1;
    *out = v * mult;
    return 0;
}

static const char *unit_name(uint64_t unit_ms)
{
    return unit_ms == MS_PER_S ? "s" : "ms";
}

/* Set f in *o from text; ctx names the origin ("--flag=value") for messages. */
static int set_value(crk_master_options *o, const flag *f, const char *text, const char *ctx)
{
    char *field = (char *)o + f->offset;
    uint64_t v;
    const char *end;

    switch (f->type) {
    case F_BOOL: {
        bool b;
        if (parse_bool(text, &b) != 0)
            return crb_error(CR_INVALID_PARAMS, "%s: not a boolean (true, false, 1, 0, yes, no)",
                             ctx);
        *(bool *)(void *)field = b;
        return 0;
    }
    case F_PORT:
    case F_U32:
        if (parse_digits(text, &v, &end) != 0 || *end != '\0')
            return crb_error(CR_INVALID_PARAMS, "%s: not a non-negative integer", ctx);
        if (v < f->min || v > f->max)
            return crb_error(CR_INVALID_PARAMS, "%s: out of range [%" PRIu64 ", %" PRIu64 "]", ctx,
                             f->min, f->max);
        if (f->type == F_PORT)
            *(uint16_t *)(void *)field = (uint16_t)v;
        else
            *(uint32_t *)(void *)field = (uint32_t)v;
        return 0;
    case F_DURATION:
        if (parse_duration(text, f->unit_ms, &v) != 0)
            return crb_error(CR_INVALID_PARAMS,
                             "%s: not a duration (a number of %s, or with a unit: 500ms, 5s, "
                             "30m, 1h)",
                             ctx, unit_name(f->unit_ms));
        if (v < f->min || v > f->max)
            return crb_error(CR_INVALID_PARAMS, "%s: out of range [%" PRIu64 " ms, %" PRIu64 " ms]",
                             ctx, f->min, f->max);
        *(uint64_t *)(void *)field = v;
        return 0;
    case F_RATIO: {
        char *stop = NULL;
        errno = 0;
        double d = strtod(text, &stop);
        if (text[0] == '\0' || isspace((unsigned char)text[0]) || *stop != '\0' || errno != 0 ||
            !isfinite(d))
            return crb_error(CR_INVALID_PARAMS, "%s: not a number", ctx);
        if (!(d >= 0.0 && d <= 1.0))
            return crb_error(CR_INVALID_PARAMS, "%s: must be a ratio in [0, 1]", ctx);
        *(double *)(void *)field = d;
        return 0;
    }
    case F_STRING:
    case F_NONEMPTY:
    case F_PATH: {
        size_t n = strlen(text);
        if (n >= f->size)
            return crb_error(CR_INVALID_PARAMS, "%s: longer than %zu bytes", ctx, f->size - 1);
        if (n == 0 && f->type == F_NONEMPTY)
            return crb_error(CR_INVALID_PARAMS, "%s: must not be empty", ctx);
        memcpy(field, text, n + 1);
        return 0;
    }
    case F_STRATEGY:
        for (size_t i = 0; i < sizeof(STRATEGIES) / sizeof(STRATEGIES[0]); i++) {
            if (strcmp(text, STRATEGIES[i]) == 0) {
                *(crk_alloc_strategy *)(void *)field = (crk_alloc_strategy)i;
                return 0;
            }
        }
        return crb_error(CR_INVALID_PARAMS,
                         "%s: unknown strategy (random, free_ratio_first, local_first)", ctx);
    case F_COMPAT_BOOL: {
        bool b;
        if (parse_bool(text, &b) != 0)
            return crb_error(CR_INVALID_PARAMS, "%s: not a boolean (true, false, 1, 0, yes, no)",
                             ctx);
        if (b)
            return crb_error(CR_INVALID_PARAMS, "%s: not supported by crescent-master (%s)", ctx,
                             f->help);
        return 0;
    }
    case F_COMPAT_STR:
        if (strcmp(text, f->only) != 0)
            return crb_error(CR_INVALID_PARAMS, "%s: not supported by crescent-master (%s)", ctx,
                             f->help);
        return 0;
    }
    return crb_error(CR_INVALID_PARAMS, "%s: unhandled flag type", ctx);
}

/* Rules between flags, checked once everything is applied. */
static int check_cross(const crk_master_options *o)
{
    if (o->default_kv_soft_pin_ttl_ms > o->max_kv_soft_pin_ttl_ms)
        return crb_error(CR_INVALID_PARAMS,
                         "--default_kv_soft_pin_ttl=%" PRIu64
                         "ms exceeds --max_kv_soft_pin_ttl=%" PRIu64 "ms",
                         o->default_kv_soft_pin_ttl_ms, o->max_kv_soft_pin_ttl_ms);
    if (o->put_start_release_timeout_ms < o->put_start_discard_timeout_ms)
        return crb_error(CR_INVALID_PARAMS,
                         "--put_start_release_timeout_sec=%" PRIu64
                         "ms is shorter than --put_start_discard_timeout_sec=%" PRIu64
                         "ms: a preempted put's space must outlive its discard timeout",
                         o->put_start_release_timeout_ms, o->put_start_discard_timeout_ms);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Single flag, JSON file                                                   */
/* ------------------------------------------------------------------------ */

static bool is_action(const char *name)
{
    return strcmp(name, "help") == 0 || strcmp(name, "version") == 0 || strcmp(name, "h") == 0;
}

int crk_master_options_set(crk_master_options *o, const char *name, const char *value)
{
    char norm[NAME_BUF];
    char ctx[CONTEXT_BUF];
    if (name == NULL || value == NULL)
        return crb_error(CR_INVALID_PARAMS, "crk_master_options_set: NULL argument");
    const flag *f = normalize(name, strlen(name), norm) == 0 ? find_flag(norm) : NULL;
    if (f == NULL || f->type == F_PATH || is_action(norm))
        return crb_error(CR_INVALID_PARAMS, "unknown or unsettable flag '--%s'", name);
    snprintf(ctx, sizeof(ctx), "--%s=%s", f->name, value);
    crk_master_options tmp = *o;
    int rc = set_value(&tmp, f, value, ctx);
    if (rc == 0)
        rc = check_cross(&tmp);
    if (rc == 0)
        *o = tmp;
    return rc;
}

/* Apply one JSON member; ctx already names the file. */
static int apply_json(crk_master_options *o, const char *path, const char *key, json_t *val)
{
    char norm[NAME_BUF];
    char ctx[CONTEXT_BUF];
    char text[64];
    const char *value = text;

    const flag *f = normalize(key, strlen(key), norm) == 0 ? find_flag(norm) : NULL;
    if (f == NULL || is_action(norm))
        return crb_error(CR_INVALID_PARAMS, "config '%s': unknown key '%s'", path, key);
    if (f->type == F_PATH)
        return crb_error(CR_INVALID_PARAMS,
                         "config '%s': key '%s' is only accepted on the command line", path, key);

    bool stringish = f->type == F_STRING || f->type == F_NONEMPTY || f->type == F_STRATEGY ||
                     f->type == F_COMPAT_STR;
    switch (json_typeof(val)) {
    case JSON_STRING:
        value = json_string_value(val);
        if (strlen(value) != json_string_length(val))
            return crb_error(CR_INVALID_PARAMS, "config '%s': key '%s' contains a NUL byte", path,
                             key);
        break;
    case JSON_TRUE:
    case JSON_FALSE:
        if (!is_bool(f))
            return crb_error(CR_INVALID_PARAMS, "config '%s': key '%s' must not be a boolean", path,
                             key);
        snprintf(text, sizeof(text), "%s", json_is_true(val) ? "true" : "false");
        break;
    case JSON_INTEGER:
        if (stringish || is_bool(f))
            return crb_error(CR_INVALID_PARAMS, "config '%s': key '%s' must be a %s", path, key,
                             is_bool(f) ? "boolean" : "string");
        snprintf(text, sizeof(text), "%" JSON_INTEGER_FORMAT, json_integer_value(val));
        break;
    case JSON_REAL:
        if (f->type != F_RATIO)
            return crb_error(CR_INVALID_PARAMS, "config '%s': key '%s' must be %s", path, key,
                             stringish    ? "a string"
                             : is_bool(f) ? "a boolean"
                                          : "an integer");
        snprintf(text, sizeof(text), "%.17g", json_real_value(val));
        break;
    default:
        return crb_error(CR_INVALID_PARAMS,
                         "config '%s': key '%s' must be a string, number or boolean", path, key);
    }
    snprintf(ctx, sizeof(ctx), "config '%s': key '%s' = %s", path, key, value);
    return set_value(o, f, value, ctx);
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

/* ------------------------------------------------------------------------ */
/* Command line                                                             */
/* ------------------------------------------------------------------------ */

typedef struct assignment {
    const flag *f;
    const char *value;
} assignment;

/* Is arg (as typed) --name / -name for one of names? */
static bool arg_is(const char *arg, const char *name)
{
    if (arg[0] != '-')
        return false;
    const char *p = arg[1] == '-' ? arg + 2 : arg + 1;
    return strcmp(p, name) == 0;
}

/*
 * Resolve argv[*i] into an assignment, consuming argv[*i + 1] as the value
 * of a non-boolean flag written without '='. Returns 0, or CR_INVALID_PARAMS.
 */
static int resolve_arg(int argc, char *const argv[], int *i, assignment *out)
{
    const char *arg = argv[*i];
    char norm[NAME_BUF] = "";

    if (arg[0] != '-' || arg[1] == '\0')
        return crb_error(CR_INVALID_PARAMS, "unexpected argument '%s' (flags start with --)", arg);
    const char *name = arg[1] == '-' ? arg + 2 : arg + 1;
    const char *eq = strchr(name, '=');
    size_t name_len = eq != NULL ? (size_t)(eq - name) : strlen(name);
    const flag *f = normalize(name, name_len, norm) == 0 ? find_flag(norm) : NULL;
    if (f == NULL && is_action(norm))
        return crb_error(CR_INVALID_PARAMS, "'%s': flag '--%s' takes no value", arg, norm);
    bool negated = false;
    if (f == NULL && strncmp(norm, "no", 2) == 0 && find_flag(norm + 2) != NULL &&
        is_bool(find_flag(norm + 2))) {
        f = find_flag(norm + 2);
        negated = true;
    }
    if (f == NULL)
        return crb_error(CR_INVALID_PARAMS, "unknown flag '%.*s' (see --help)",
                         (int)(name_len + (size_t)(name - arg)), arg);
    out->f = f;
    if (negated) {
        if (eq != NULL)
            return crb_error(CR_INVALID_PARAMS, "'%s': --no%s takes no value", arg, f->name);
        out->value = "false";
        return 0;
    }
    if (eq != NULL) {
        out->value = eq + 1;
        return 0;
    }
    if (is_bool(f)) {
        out->value = "true";
        return 0;
    }
    if (*i + 1 >= argc)
        return crb_error(CR_INVALID_PARAMS, "flag '--%s' needs a value", f->name);
    out->value = argv[++*i];
    return 0;
}

int crk_master_options_parse(int argc, char *const argv[], crk_master_options *out)
{
    crk_master_options o;
    crk_master_options_defaults(&o);
    if (argc < 0 || (argc > 0 && argv == NULL) || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crk_master_options_parse: bad arguments");

    /* --help / --version win over everything else, even over bad flags. */
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (arg_is(argv[i], "help") || strcmp(argv[i], "-h") == 0)
            o.show_help = true;
        else if (arg_is(argv[i], "version"))
            o.show_version = true;
    }
    if (o.show_help || o.show_version) {
        *out = o;
        return 0;
    }

    assignment *as = argc > 1 ? calloc((size_t)argc, sizeof(*as)) : NULL;
    if (argc > 1 && as == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "flags: out of memory");
    size_t n = 0;
    const char *config = NULL;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            if (i + 1 < argc)
                rc = crb_error(CR_INVALID_PARAMS, "unexpected argument '%s' after '--'",
                               argv[i + 1]);
            break;
        }
        rc = resolve_arg(argc, argv, &i, &as[n]);
        if (rc != 0)
            break;
        if (as[n].f->type == F_PATH)
            config = as[n].value;
        n++;
    }
    if (rc == 0 && config != NULL && config[0] != '\0')
        rc = load_file(&o, config);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        char ctx[CONTEXT_BUF];
        snprintf(ctx, sizeof(ctx), "--%s=%s", as[k].f->name, as[k].value);
        rc = set_value(&o, as[k].f, as[k].value, ctx);
    }
    if (rc == 0)
        rc = check_cross(&o);
    free(as);
    if (rc == 0)
        *out = o;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Usage                                                                    */
/* ------------------------------------------------------------------------ */

static void format_default(const crk_master_options *o, const flag *f, char *buf, size_t len)
{
    const char *field = (const char *)o + f->offset;
    switch (f->type) {
    case F_BOOL:
        snprintf(buf, len, "%s", *(const bool *)(const void *)field ? "true" : "false");
        break;
    case F_PORT:
        snprintf(buf, len, "%u", (unsigned)*(const uint16_t *)(const void *)field);
        break;
    case F_U32:
        snprintf(buf, len, "%u", (unsigned)*(const uint32_t *)(const void *)field);
        break;
    case F_DURATION: {
        uint64_t ms = *(const uint64_t *)(const void *)field;
        if (f->unit_ms == MS_PER_S && ms % MS_PER_S == 0)
            snprintf(buf, len, "%" PRIu64 "s", ms / MS_PER_S);
        else
            snprintf(buf, len, "%" PRIu64 "ms", ms);
        break;
    }
    case F_RATIO:
        snprintf(buf, len, "%g", *(const double *)(const void *)field);
        break;
    case F_STRING:
    case F_NONEMPTY:
    case F_PATH:
        snprintf(buf, len, "\"%s\"", field);
        break;
    case F_STRATEGY:
        snprintf(buf, len, "%s",
                 crk_alloc_strategy_name(*(const crk_alloc_strategy *)(const void *)field));
        break;
    case F_COMPAT_BOOL:
        snprintf(buf, len, "false");
        break;
    case F_COMPAT_STR:
        snprintf(buf, len, "\"%s\"", f->only);
        break;
    }
}

static const char *value_hint(const flag *f)
{
    switch (f->type) {
    case F_BOOL:
    case F_COMPAT_BOOL:
        return "[=BOOL]";
    case F_PORT:
        return "=PORT";
    case F_U32:
        return "=N";
    case F_DURATION:
        return f->unit_ms == MS_PER_S ? "=DURATION(s)" : "=DURATION(ms)";
    case F_RATIO:
        return "=RATIO";
    case F_PATH:
        return "=FILE";
    default:
        return "=TEXT";
    }
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
    for (size_t i = 0; i < N_FLAGS; i++) {
        char def[CRK_FLAG_HOST_MAX + 8];
        char head[NAME_BUF + 24];
        format_default(&d, &FLAGS[i], def, sizeof(def));
        snprintf(head, sizeof(head), "--%s%s", FLAGS[i].name, value_hint(&FLAGS[i]));
        fprintf(f, "  %-44s %s (default %s)\n", head, FLAGS[i].help, def);
    }
    fprintf(f, "  %-44s %s\n  %-44s %s\n", "--help, -h", "print this text and exit", "--version",
            "print the version and exit");
}
