/*
 * flags_test.c - crescent-master's command line and config file.
 *
 * Defaults against Mooncake's table; every flag set through the command
 * line with its edge values; every syntax (--f=v, --f v, -f=v, -f v,
 * dashes in names, boolean forms); duration units; rejections with the
 * flag and value named in the message and the output untouched; the JSON
 * config file with every value type, precedence (the command line wins
 * wherever --config_path appears), malformed JSON, unknown keys and wrong
 * types; and the usage text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crescent/status.h"
#include "master/flags.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

#define MAX_ARGS 16

/* Parse "crescent-master" followed by the NULL-terminated args. */
static int parse_v(crk_master_options *o, const char *first, va_list ap)
{
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = "crescent-master";
    for (const char *a = first; a != NULL; a = va_arg(ap, const char *)) {
        assert_true(argc < MAX_ARGS);
        argv[argc++] = (char *)a;
    }
    argv[argc] = NULL;
    return crk_master_options_parse(argc, argv, o);
}

/* Parsing must succeed. */
static crk_master_options ok(const char *first, ...)
{
    crk_master_options o;
    va_list ap;
    va_start(ap, first);
    int rc = parse_v(&o, first, ap);
    va_end(ap);
    if (rc != 0)
        fail_msg("parse failed: %d %s", rc, cr_last_error_message());
    return o;
}

static void expect_mentions(const char *needle)
{
    const char *msg = cr_last_error_message();
    if (strstr(msg, needle) == NULL)
        fail_msg("error message \"%s\" lacks \"%s\"", msg, needle);
}

/* Parsing must fail with CR_INVALID_PARAMS, leave the output alone, name `mention`. */
static void bad_at(const char *mention, const char *file, int line, const char *first, ...)
{
    crk_master_options o, before;
    memset(&o, 0x5A, sizeof(o));
    before = o;
    va_list ap;
    va_start(ap, first);
    int rc = parse_v(&o, first, ap);
    va_end(ap);
    if (rc != CR_INVALID_PARAMS)
        fprintf(stderr, "%s:%d: parse returned %d (%s), want CR_INVALID_PARAMS\n", file, line, rc,
                cr_last_error_message());
    _assert_int_equal((LargestIntegralType)rc, (LargestIntegralType)CR_INVALID_PARAMS, file, line);
    _assert_true(memcmp(&o, &before, sizeof(o)) == 0, "output untouched", file, line);
    if (mention != NULL && strstr(cr_last_error_message(), mention) == NULL) {
        fprintf(stderr, "%s:%d: error message \"%s\" lacks \"%s\"\n", file, line,
                cr_last_error_message(), mention);
        _assert_true(0, "message names the flag/value", file, line);
    }
}

#define BAD(mention, ...) bad_at((mention), __FILE__, __LINE__, __VA_ARGS__, (const char *)NULL)
#define OK(...)           ok(__VA_ARGS__, (const char *)NULL)

/* A temporary config file named *ext with the given content; returns its
 * path (static buffer, one per extension). */
static const char *write_config_ext(const char *text, const char *ext)
{
    static char paths[2][64];
    char *path = paths[strcmp(ext, ".json") == 0 ? 0 : 1];
    assert_true(strlen(ext) < 16);
    snprintf(path, 64, "/tmp/crk_flags_test_XXXXXX%s", ext);
    int fd = mkstemps(path, (int)strlen(ext));
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    return path;
}

/* A temporary JSON file with the given content; returns its path (static buffer). */
static const char *write_config(const char *json)
{
    return write_config_ext(json, ".json");
}

/* ------------------------------------------------------------------------ */
/* Defaults                                                                 */
/* ------------------------------------------------------------------------ */

static void check_defaults(const crk_master_options *o)
{
    assert_int_equal(o->rpc_port, 50051);
    assert_string_equal(o->rpc_address, "0.0.0.0");
    assert_string_equal(o->rpc_interface, "");
    assert_int_equal(o->rpc_thread_num, 0);
    assert_int_equal(o->max_threads, 16);
    assert_true(o->rpc_conn_timeout_ms == 0);
    assert_true(o->rpc_enable_tcp_no_delay);
    assert_true(o->enable_metric_reporting);
    assert_int_equal(o->metrics_port, 9003);
    assert_string_equal(o->metrics_host, "0.0.0.0");
    assert_false(o->enable_http_metadata_server);
    assert_int_equal(o->http_metadata_server_port, 8080);
    assert_string_equal(o->http_metadata_server_host, "0.0.0.0");
    assert_false(o->enable_metadata_cleanup_on_timeout);
    assert_true(o->svc.default_kv_lease_ttl_ms == 10000);
    assert_true(o->svc.default_kv_soft_pin_ttl_ms == 1800000);
    assert_true(o->svc.max_kv_soft_pin_ttl_ms == 86400000);
    assert_true(o->svc.allow_evict_soft_pinned_objects);
    assert_true(o->svc.eviction_ratio == 0.05);
    assert_true(o->svc.eviction_high_watermark_ratio == 0.90);
    assert_int_equal(o->svc.allocation_strategy, CRK_ALLOC_RANDOM);
    assert_true(o->svc.client_ttl_ms == 10000);
    assert_true(o->svc.put_start_discard_timeout_ms == 30000);
    assert_true(o->svc.put_start_release_timeout_ms == 600000);
    assert_string_equal(o->cluster_id, "mooncake_cluster");
    assert_string_equal(o->config_path, "");
    assert_false(o->show_help);
    assert_false(o->show_version);
}

/* The service's flags are its own config: same defaults as
 * crk_config_default, and a parsed value is what crk_service_create gets. */
static void test_service_mapping(void **state)
{
    (void)state;
    crk_master_options o;
    crk_master_options_defaults(&o);
    crk_config d;
    crk_config_default(&d);
    assert_memory_equal(&o.svc, &d, sizeof(d));
    o = OK("--default_kv_lease_ttl=1500", "--client_ttl=4", "--allocation_strategy=local_first",
           "--eviction_ratio=0.2");
    crk_service *svc = NULL;
    assert_int_equal(crk_service_create(&o.svc, 0, &svc), 0);
    const crk_config *c = crk_service_config(svc);
    assert_true(c->default_kv_lease_ttl_ms == 1500);
    assert_true(c->client_ttl_ms == 4000);
    assert_int_equal(c->allocation_strategy, CRK_ALLOC_LOCAL_FIRST);
    assert_true(c->eviction_ratio == 0.2);
    crk_service_destroy(svc);
    o = OK("--rpc_max_connections=100", "--metric_report_interval_sec=2");
    assert_int_equal(o.rpc_max_connections, 100);
    assert_int_equal(o.rpc_busy_poll_us, 0); /* default: never spin */
    assert_false(o.rpc_adaptive_poll);
    o = OK("--rpc_adaptive_poll=true");
    assert_true(o.rpc_adaptive_poll);
    o = OK("--rpc_busy_poll_us=200", "--metric_report_interval_sec=2");
    assert_int_equal(o.rpc_busy_poll_us, 200);
    assert_true(o.metric_report_interval_ms == 2000);
}

static void test_defaults(void **state)
{
    (void)state;
    crk_master_options o;
    crk_master_options_defaults(&o);
    check_defaults(&o);
    char *argv[] = {"crescent-master", NULL};
    memset(&o, 0x77, sizeof(o));
    assert_int_equal(crk_master_options_parse(1, argv, &o), 0);
    check_defaults(&o);
    /* argc 0 (no program name) is fine too. */
    assert_int_equal(crk_master_options_parse(0, argv, &o), 0);
    check_defaults(&o);
}

/* ------------------------------------------------------------------------ */
/* Every flag                                                               */
/* ------------------------------------------------------------------------ */

static void test_every_flag(void **state)
{
    (void)state;
    crk_master_options o;

    o = OK("--rpc_port=1");
    assert_int_equal(o.rpc_port, 1);
    o = OK("--rpc_port=65535");
    assert_int_equal(o.rpc_port, 65535);
    o = OK("--rpc_port=0");
    assert_int_equal(o.rpc_port, 0);
    o = OK("--port=7000");
    assert_int_equal(o.rpc_port, 7000);
    o = OK("--rpc_address=127.0.0.1");
    assert_string_equal(o.rpc_address, "127.0.0.1");
    o = OK("--rpc_interface=eth0");
    assert_string_equal(o.rpc_interface, "eth0");
    o = OK("--rpc_interface=");
    assert_string_equal(o.rpc_interface, "");
    o = OK("--rpc_thread_num=1024");
    assert_int_equal(o.rpc_thread_num, 1024);
    o = OK("--max_threads=1");
    assert_int_equal(o.max_threads, 1);
    o = OK("--rpc_conn_timeout_seconds=30");
    assert_true(o.rpc_conn_timeout_ms == 30000);
    o = OK("--rpc_enable_tcp_no_delay=false");
    assert_false(o.rpc_enable_tcp_no_delay);
    o = OK("--enable_metric_reporting=0");
    assert_false(o.enable_metric_reporting);
    o = OK("--metrics_port=9100");
    assert_int_equal(o.metrics_port, 9100);
    o = OK("--metrics_host=::1");
    assert_string_equal(o.metrics_host, "::1");
    o = OK("--enable_http_metadata_server");
    assert_true(o.enable_http_metadata_server);
    o = OK("--http_metadata_server_port=18080");
    assert_int_equal(o.http_metadata_server_port, 18080);
    o = OK("--http_metadata_server_host=localhost");
    assert_string_equal(o.http_metadata_server_host, "localhost");
    o = OK("--enable_metadata_cleanup_on_timeout=yes");
    assert_true(o.enable_metadata_cleanup_on_timeout);
    o = OK("--default_kv_lease_ttl=500");
    assert_true(o.svc.default_kv_lease_ttl_ms == 500);
    o = OK("--default_kv_soft_pin_ttl=60000");
    assert_true(o.svc.default_kv_soft_pin_ttl_ms == 60000);
    o = OK("--max_kv_soft_pin_ttl=2h");
    assert_true(o.svc.max_kv_soft_pin_ttl_ms == 7200000);
    o = OK("--allow_evict_soft_pinned_objects=false");
    assert_false(o.svc.allow_evict_soft_pinned_objects);
    o = OK("--eviction_ratio=0.1");
    assert_true(o.svc.eviction_ratio == 0.1);
    o = OK("--eviction_high_watermark_ratio=1.0");
    assert_true(o.svc.eviction_high_watermark_ratio == 1.0);
    o = OK("--allocation_strategy=free_ratio_first");
    assert_int_equal(o.svc.allocation_strategy, CRK_ALLOC_FREE_RATIO_FIRST);
    o = OK("--allocation_strategy=local_first");
    assert_int_equal(o.svc.allocation_strategy, CRK_ALLOC_LOCAL_FIRST);
    o = OK("--allocation_strategy=random");
    assert_int_equal(o.svc.allocation_strategy, CRK_ALLOC_RANDOM);
    o = OK("--client_ttl=3");
    assert_true(o.svc.client_ttl_ms == 3000);
    o = OK("--put_start_discard_timeout_sec=5");
    assert_true(o.svc.put_start_discard_timeout_ms == 5000);
    o = OK("--put_start_release_timeout_sec=3600");
    assert_true(o.svc.put_start_release_timeout_ms == 3600000);
    o = OK("--cluster_id=prod-a");
    assert_string_equal(o.cluster_id, "prod-a");
    o = OK("--config_path=");
    assert_string_equal(o.config_path, "");

    /* Mooncake flags for absent features: accepted at their default only. */
    o = OK("--enable_ha=false", "--enable_offload=false", "--offload_on_evict=0",
           "--enable_multi_tenants=no", "--memory_allocator=offset", "--root_fs_dir=");
    check_defaults(&o);
    /* The disk tier's flags (master/offload.h) take effect. */
    o = OK("--enable_offload=true", "--offload_on_evict=true", "--promotion_on_hit=true",
           "--promotion_admission_threshold=3");
    assert_true(o.svc.enable_offload && o.svc.offload_on_evict && o.svc.promotion_on_hit);
    assert_int_equal(o.svc.promotion_admission_threshold, 3);
    /* Mooncake's queue and cap knobs (defaults: Mooncake's) */
    assert_false(o.svc.offload_force_evict);
    assert_true(o.svc.offloading_queue_limit == 50000 && o.svc.offload_cap_ratio == 0.5);
    assert_true(o.svc.promotion_queue_limit == 50000 && o.svc.promotion_max_per_heartbeat == 1);
    o = OK("--enable_offload=true", "--offload_on_evict=true", "--offload_force_evict=true",
           "--offloading_queue_limit=1000", "--offload_cap_ratio=0.25", "--promotion_queue_limit=7",
           "--promotion_max_per_heartbeat=4");
    assert_true(o.svc.offload_force_evict && o.svc.offloading_queue_limit == 1000);
    assert_true(o.svc.offload_cap_ratio == 0.25 && o.svc.promotion_queue_limit == 7);
    assert_int_equal(o.svc.promotion_max_per_heartbeat, 4);
    BAD("--offloading_queue_limit=0", "--offloading_queue_limit=0");
    BAD("--offloading_queue_limit=100000001", "--offloading_queue_limit=100000001");
    BAD("--offload_cap_ratio=1.5", "--offload_cap_ratio=1.5");
    BAD("offload_on_evict needs enable_offload", "--offload_on_evict=true");
    BAD("--promotion_admission_threshold=256", "--promotion_admission_threshold=256");
    BAD("--memory_allocator=cachelib", "--memory_allocator=cachelib");
    BAD("--root_fs_dir=/mnt/x", "--root_fs_dir=/mnt/x");
    BAD("--enable_multi_tenants=maybe", "--enable_multi_tenants=maybe");
    /* HA (docs/ha.md): only etcd, whole-second TTLs of at least 2 s. */
    BAD("--ha_backend_type=redis", "--ha_backend_type=redis");
    BAD("--ha_lease_ttl_sec=1", "--ha_lease_ttl_sec=1");
    o = OK("--enable_ha", "--etcd_endpoints=127.0.0.1:2379", "--ha_lease_ttl_sec=3");
    assert_true(o.enable_ha);
    assert_int_equal(o.ha_lease_ttl_ms, 3000);
}

/* ------------------------------------------------------------------------ */
/* Syntax                                                                   */
/* ------------------------------------------------------------------------ */

static void test_syntax(void **state)
{
    (void)state;
    crk_master_options o;

    o = OK("--rpc_port=1234");
    assert_int_equal(o.rpc_port, 1234);
    o = OK("--rpc_port", "1235");
    assert_int_equal(o.rpc_port, 1235);
    o = OK("-rpc_port=1236");
    assert_int_equal(o.rpc_port, 1236);
    o = OK("-rpc_port", "1237");
    assert_int_equal(o.rpc_port, 1237);
    o = OK("--rpc-port=1238");
    assert_int_equal(o.rpc_port, 1238);
    o = OK("--default-kv-lease-ttl", "5s");
    assert_true(o.svc.default_kv_lease_ttl_ms == 5000);

    /* Last one wins, aliases included. */
    o = OK("--rpc_port=1", "--port=2", "--rpc_port", "3");
    assert_int_equal(o.rpc_port, 3);
    o = OK("--port=9", "--rpc_port=8", "--port=7");
    assert_int_equal(o.rpc_port, 7);

    /* A value may contain '=' and start with '-'. */
    o = OK("--cluster_id=a=b");
    assert_string_equal(o.cluster_id, "a=b");
    o = OK("--cluster_id", "-x");
    assert_string_equal(o.cluster_id, "-x");

    /* Booleans. */
    static const char *const truthy[] = {"true", "TRUE", "True", "1", "yes", "YES"};
    static const char *const falsy[] = {"false", "FALSE", "0", "no", "No"};
    for (size_t i = 0; i < sizeof(truthy) / sizeof(truthy[0]); i++) {
        char arg[64];
        snprintf(arg, sizeof(arg), "--enable_http_metadata_server=%s", truthy[i]);
        o = OK(arg);
        assert_true(o.enable_http_metadata_server);
    }
    for (size_t i = 0; i < sizeof(falsy) / sizeof(falsy[0]); i++) {
        char arg[64];
        snprintf(arg, sizeof(arg), "--rpc_enable_tcp_no_delay=%s", falsy[i]);
        o = OK(arg);
        assert_false(o.rpc_enable_tcp_no_delay);
    }
    o = OK("--enable_http_metadata_server");
    assert_true(o.enable_http_metadata_server);
    o = OK("-enable_http_metadata_server");
    assert_true(o.enable_http_metadata_server);
    o = OK("--norpc_enable_tcp_no_delay");
    assert_false(o.rpc_enable_tcp_no_delay);
    o = OK("-noallow_evict_soft_pinned_objects");
    assert_false(o.svc.allow_evict_soft_pinned_objects);
    o = OK("--noenable_ha");
    o = OK("--enable_http_metadata_server", "--noenable_http_metadata_server");
    assert_false(o.enable_http_metadata_server);
    BAD("--noenable_http_metadata_server", "--noenable_http_metadata_server=true");
    BAD("'maybe'", "--enable_http_metadata_server", "maybe");
    BAD("'false'", "--enable_http_metadata_server", "false");
    BAD("--enable_http_metadata_server=on", "--enable_http_metadata_server=on");
    BAD("--enable_http_metadata_server=", "--enable_http_metadata_server=");
    BAD("norpc_port", "--norpc_port");

    /* Stray arguments, unknown flags, missing values. */
    BAD("'extra'", "extra");
    BAD("'-'", "-");
    BAD("'--bogus'", "--bogus=1");
    expect_mentions("unknown flag");
    BAD("'--bogus'", "--bogus");
    BAD("'-rpc_prot'", "-rpc_prot", "5");
    BAD("'---rpc_port'", "---rpc_port=5");
    BAD("--rpc_port", "--rpc_port");
    expect_mentions("needs a value");
    BAD("'x'", "--", "x");
    o = OK("--rpc_port=5", "--");
    assert_int_equal(o.rpc_port, 5);
    BAD("unknown flag", "--=5");
    char long_name[200];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[0] = '-';
    long_name[1] = '-';
    long_name[sizeof(long_name) - 1] = '\0';
    BAD("unknown flag", long_name);
    BAD("'--help' takes no value", "--help=1");
    BAD("'--version' takes no value", "--version=yes");
}

static void test_help_and_version(void **state)
{
    (void)state;
    crk_master_options o = OK("--help");
    assert_true(o.show_help);
    assert_false(o.show_version);
    o = OK("-h");
    assert_true(o.show_help);
    o = OK("-help");
    assert_true(o.show_help);
    o = OK("--version");
    assert_true(o.show_version);
    o = OK("-version");
    assert_true(o.show_version);
    /* They win over bad flags and missing config files, and read nothing. */
    o = OK("--bogus", "--config_path=/nonexistent/x.json", "--version", "--eviction_ratio=7");
    assert_true(o.show_version);
    assert_true(o.svc.eviction_ratio == 0.05);
    /* ...but not after "--". */
    BAD("'--help'", "--", "--help");
}

/* ------------------------------------------------------------------------ */
/* Values                                                                   */
/* ------------------------------------------------------------------------ */

static void test_durations(void **state)
{
    (void)state;
    static const struct {
        const char *arg;
        uint64_t ms;
    } ms_flag[] = {
        {"--default_kv_lease_ttl=1", 1},        {"--default_kv_lease_ttl=500", 500},
        {"--default_kv_lease_ttl=500ms", 500},  {"--default_kv_lease_ttl=5000ms", 5000},
        {"--default_kv_lease_ttl=5s", 5000},    {"--default_kv_lease_ttl=30m", 1800000},
        {"--default_kv_lease_ttl=1h", 3600000}, {"--default_kv_lease_ttl=8760h", 31536000000},
        {"--default_kv_lease_ttl=007", 7},
    };
    for (size_t i = 0; i < sizeof(ms_flag) / sizeof(ms_flag[0]); i++) {
        crk_master_options o = OK(ms_flag[i].arg);
        if (o.svc.default_kv_lease_ttl_ms != ms_flag[i].ms)
            fail_msg("%s gave %llu ms", ms_flag[i].arg,
                     (unsigned long long)o.svc.default_kv_lease_ttl_ms);
    }
    /* A zero lease is refused by the flag table itself (issue 9: the table
     * accepted 0, the service refused it, and the process exited 1). */
    BAD("--default_kv_lease_ttl=0", "--default_kv_lease_ttl=0");
    expect_mentions("out of range");
    BAD("--client_ttl=0", "--client_ttl=0");

    /* Second-unit flags: a bare number is seconds. */
    static const struct {
        const char *arg;
        uint64_t ms;
    } s_flag[] = {
        {"--client_ttl=10", 10000},    {"--client_ttl=500ms", 500},  {"--client_ttl=5s", 5000},
        {"--client_ttl=30m", 1800000}, {"--client_ttl=1h", 3600000}, {"--client_ttl=1ms", 1},
    };
    for (size_t i = 0; i < sizeof(s_flag) / sizeof(s_flag[0]); i++) {
        crk_master_options o = OK(s_flag[i].arg);
        if (o.svc.client_ttl_ms != s_flag[i].ms)
            fail_msg("%s gave %llu ms", s_flag[i].arg, (unsigned long long)o.svc.client_ttl_ms);
    }
    BAD("--default_kv_lease_ttl=5x", "--default_kv_lease_ttl=5x");
    expect_mentions("not a duration");
    BAD("--default_kv_lease_ttl=-1", "--default_kv_lease_ttl=-1");
    BAD("--default_kv_lease_ttl=", "--default_kv_lease_ttl=");
    BAD("--default_kv_lease_ttl=5 s", "--default_kv_lease_ttl=5 s");
    BAD("--default_kv_lease_ttl=1.5s", "--default_kv_lease_ttl=1.5s");
    BAD("--default_kv_lease_ttl=s", "--default_kv_lease_ttl=s");
    BAD("--default_kv_lease_ttl=5S", "--default_kv_lease_ttl=5S");
    BAD("--default_kv_lease_ttl=+5", "--default_kv_lease_ttl=+5");
    BAD("--default_kv_lease_ttl=99999999999999999999",
        "--default_kv_lease_ttl=99999999999999999999");
    BAD("--default_kv_lease_ttl=5124095576030431h", "--default_kv_lease_ttl=5124095576030431h");
    BAD("out of range", "--default_kv_lease_ttl=8761h");
    BAD("--rpc_busy_poll_us=10001", "--rpc_busy_poll_us=10001");
    expect_mentions("out of range");
    BAD("--client_ttl=0", "--client_ttl=0");
    expect_mentions("out of range");
    BAD("--put_start_discard_timeout_sec=1y", "--put_start_discard_timeout_sec=1y");
}

static void test_numbers(void **state)
{
    (void)state;
    crk_master_options o = OK("--eviction_ratio=0", "--eviction_high_watermark_ratio=1");
    assert_true(o.svc.eviction_ratio == 0.0);
    assert_true(o.svc.eviction_high_watermark_ratio == 1.0);
    o = OK("--eviction_ratio=.25", "--eviction_high_watermark_ratio=9e-1");
    assert_true(o.svc.eviction_ratio == 0.25);
    assert_true(fabs(o.svc.eviction_high_watermark_ratio - 0.9) < 1e-12);
    BAD("--eviction_ratio=1.5", "--eviction_ratio=1.5");
    expect_mentions("[0, 1]");
    BAD("--eviction_ratio=-0.1", "--eviction_ratio=-0.1");
    BAD("--eviction_high_watermark_ratio=1.0000001", "--eviction_high_watermark_ratio=1.0000001");
    BAD("--eviction_ratio=nan", "--eviction_ratio=nan");
    BAD("--eviction_ratio=inf", "--eviction_ratio=inf");
    BAD("--eviction_ratio=abc", "--eviction_ratio=abc");
    BAD("--eviction_ratio=", "--eviction_ratio=");
    BAD("--eviction_ratio=0.5x", "--eviction_ratio=0.5x");
    BAD("--eviction_ratio= 0.5", "--eviction_ratio= 0.5");
    BAD("--eviction_ratio=1e400", "--eviction_ratio=1e400");

    BAD("--rpc_port=65536", "--rpc_port=65536");
    expect_mentions("out of range");
    BAD("--rpc_port=-1", "--rpc_port=-1");
    BAD("--metrics_port=http", "--metrics_port=http");
    BAD("--http_metadata_server_port=80.5", "--http_metadata_server_port=80.5");
    BAD("--port=", "--port=");
    BAD("--rpc_thread_num=1025", "--rpc_thread_num=1025");
    BAD("--max_threads=0", "--max_threads=0");
    BAD("--rpc_thread_num=0x10", "--rpc_thread_num=0x10");
    BAD("--rpc_conn_timeout_seconds=-5", "--rpc_conn_timeout_seconds=-5");
}

static void test_strings(void **state)
{
    (void)state;
    char arg[CRK_FLAG_HOST_MAX + 32];
    int n = snprintf(arg, sizeof(arg), "--rpc_address=");
    memset(arg + n, 'h', CRK_FLAG_HOST_MAX - 1);
    arg[n + CRK_FLAG_HOST_MAX - 1] = '\0';
    crk_master_options o = OK(arg);
    assert_int_equal(strlen(o.rpc_address), CRK_FLAG_HOST_MAX - 1);
    arg[n + CRK_FLAG_HOST_MAX - 1] = 'h';
    arg[n + CRK_FLAG_HOST_MAX] = '\0';
    BAD("longer than", arg);
    BAD("--rpc_address=", "--rpc_address=");
    expect_mentions("must not be empty");
    BAD("--metrics_host=", "--metrics_host=");
    BAD("--http_metadata_server_host=", "--http_metadata_server_host=");
    BAD("--cluster_id=", "--cluster_id=");
    BAD("--allocation_strategy=round_robin", "--allocation_strategy=round_robin");
    expect_mentions("random, free_ratio_first, local_first");
    BAD("--allocation_strategy=RANDOM", "--allocation_strategy=RANDOM");
    assert_string_equal(crk_alloc_strategy_name(CRK_ALLOC_FREE_RATIO_FIRST), "free_ratio_first");
    assert_string_equal(crk_alloc_strategy_name((crk_alloc_strategy)9), "?");
}

static void test_cross_checks(void **state)
{
    (void)state;
    BAD("default_kv_soft_pin_ttl", "--default_kv_soft_pin_ttl=25h");
    expect_mentions("max_kv_soft_pin_ttl");
    crk_master_options o = OK("--default_kv_soft_pin_ttl=25h", "--max_kv_soft_pin_ttl=48h");
    assert_true(o.svc.default_kv_soft_pin_ttl_ms == 25 * 3600000ull);
    /* Order on the command line does not matter: checks run at the end. */
    o = OK("--max_kv_soft_pin_ttl=48h", "--default_kv_soft_pin_ttl=25h");
    BAD("put_start_release_timeout", "--put_start_release_timeout_sec=10");
    expect_mentions("put_start_discard_timeout");
    o = OK("--put_start_release_timeout_sec=10", "--put_start_discard_timeout_sec=10");
    assert_true(o.svc.put_start_release_timeout_ms == 10000);
}

/* ------------------------------------------------------------------------ */
/* Config file                                                              */
/* ------------------------------------------------------------------------ */

static void test_config_file(void **state)
{
    (void)state;
    const char *path = write_config("{\n"
                                    "  \"rpc_port\": 6000,\n"
                                    "  \"rpc_address\": \"127.0.0.1\",\n"
                                    "  \"rpc_thread_num\": 4,\n"
                                    "  \"rpc_enable_tcp_no_delay\": false,\n"
                                    "  \"enable_metric_reporting\": \"false\",\n"
                                    "  \"metrics_port\": \"9100\",\n"
                                    "  \"default_kv_lease_ttl\": 5000,\n"
                                    "  \"default_kv_soft_pin_ttl\": \"10m\",\n"
                                    "  \"eviction_ratio\": 0.1,\n"
                                    "  \"eviction_high_watermark_ratio\": 1,\n"
                                    "  \"client_ttl\": 20,\n"
                                    "  \"put_start_release_timeout_sec\": \"2h\",\n"
                                    "  \"allocation_strategy\": \"local_first\",\n"
                                    "  \"enable_ha\": false,\n"
                                    "  \"memory_allocator\": \"offset\",\n"
                                    "  \"cluster_id\": \"from-file\"\n"
                                    "}\n");
    char arg[128];
    snprintf(arg, sizeof(arg), "--config_path=%s", path);
    crk_master_options o = OK(arg);
    assert_int_equal(o.rpc_port, 6000);
    assert_string_equal(o.rpc_address, "127.0.0.1");
    assert_int_equal(o.rpc_thread_num, 4);
    assert_false(o.rpc_enable_tcp_no_delay);
    assert_false(o.enable_metric_reporting);
    assert_int_equal(o.metrics_port, 9100);
    assert_true(o.svc.default_kv_lease_ttl_ms == 5000);
    assert_true(o.svc.default_kv_soft_pin_ttl_ms == 600000);
    assert_true(o.svc.eviction_ratio == 0.1);
    assert_true(o.svc.eviction_high_watermark_ratio == 1.0);
    assert_true(o.svc.client_ttl_ms == 20000);
    assert_true(o.svc.put_start_release_timeout_ms == 7200000);
    assert_int_equal(o.svc.allocation_strategy, CRK_ALLOC_LOCAL_FIRST);
    assert_string_equal(o.cluster_id, "from-file");
    assert_string_equal(o.config_path, path);
    /* Untouched keys keep their defaults. */
    assert_int_equal(o.http_metadata_server_port, 8080);

    /* The command line wins, before or after --config_path. */
    o = OK("--rpc_port=7000", arg, "--cluster_id=cli", "-eviction_ratio", "0.2");
    assert_int_equal(o.rpc_port, 7000);
    assert_string_equal(o.cluster_id, "cli");
    assert_true(o.svc.eviction_ratio == 0.2);
    assert_string_equal(o.rpc_address, "127.0.0.1");
    o = OK("--config_path", path, "--norpc_enable_tcp_no_delay", "--rpc_enable_tcp_no_delay");
    assert_true(o.rpc_enable_tcp_no_delay);

    /* The file is read directly too, over an existing struct. */
    crk_master_options d;
    crk_master_options_defaults(&d);
    d.max_threads = 3;
    assert_int_equal(crk_master_options_load_file(&d, path), 0);
    assert_int_equal(d.rpc_port, 6000);
    assert_int_equal(d.max_threads, 3);
    unlink(path);

    /* An empty object changes nothing. */
    path = write_config("{}");
    snprintf(arg, sizeof(arg), "--config_path=%s", path);
    o = OK(arg);
    crk_master_options_defaults(&d);
    strcpy(d.config_path, path);
    assert_memory_equal(&o, &d, sizeof(o));
    unlink(path);
}

/* Each bad file must fail with CR_INVALID_PARAMS naming the file and `mention`. */
static void bad_config_at(const char *json, const char *mention, const char *file, int line)
{
    const char *path = write_config(json);
    char arg[128];
    snprintf(arg, sizeof(arg), "--config_path=%s", path);
    bad_at(path, file, line, arg, (const char *)NULL);
    if (mention != NULL && strstr(cr_last_error_message(), mention) == NULL) {
        fprintf(stderr, "%s:%d: error message \"%s\" lacks \"%s\"\n", file, line,
                cr_last_error_message(), mention);
        _assert_true(0, "message names the key", file, line);
    }
    /* The direct loader refuses it too, and leaves its struct alone. */
    crk_master_options o, before;
    crk_master_options_defaults(&o);
    before = o;
    _assert_int_equal((LargestIntegralType)crk_master_options_load_file(&o, path),
                      (LargestIntegralType)CR_INVALID_PARAMS, file, line);
    _assert_true(memcmp(&o, &before, sizeof(o)) == 0, "loader output untouched", file, line);
    unlink(path);
}

#define BAD_CONFIG(json, mention) bad_config_at((json), (mention), __FILE__, __LINE__)

static void test_config_errors(void **state)
{
    (void)state;
    BAD_CONFIG("{\"rpc_port\": 6000,}", ":1:");
    BAD_CONFIG("{\n\"rpc_port\": 6000\n\"x\": 1}", ":3:");
    BAD_CONFIG("", NULL);
    BAD_CONFIG("[1, 2]", "JSON object");
    BAD_CONFIG("\"rpc_port\"", NULL);
    BAD_CONFIG("{\"rpc_port\": 1, \"rpc_port\": 2}", "rpc_port");
    BAD_CONFIG("{\"rpc_porta\": 1}", "unknown key 'rpc_porta'");
    BAD_CONFIG("{\"etcd_endpoint\": \"\"}", "unknown key 'etcd_endpoint'");
    BAD_CONFIG("{\n  \"rpc_port\": 1,\n  \"rpc_porta\": 1\n}", ":3: unknown key 'rpc_porta'");
    BAD_CONFIG("{\"rpc-port\": 1}", "unknown key 'rpc-port'");
    BAD_CONFIG("{\"dynamic_replication_mode\": \"on\"}", "dynamic_replication_mode");
    BAD_CONFIG("{\"enable_kv_events\": true}", "enable_kv_events");
    BAD_CONFIG("{\"enable_snapshot\": true}", "not supported");
    BAD_CONFIG("{\"help\": true}", "unknown key 'help'");
    BAD_CONFIG("{\"config_path\": \"/x\"}", "command line");
    BAD_CONFIG("{\"rpc_port\": 65536}", "rpc_port");
    BAD_CONFIG("{\"rpc_port\": -1}", "rpc_port");
    BAD_CONFIG("{\"rpc_port\": 5.5}", "integer");
    BAD_CONFIG("{\"rpc_port\": true}", "boolean");
    BAD_CONFIG("{\"rpc_port\": null}", "rpc_port");
    BAD_CONFIG("{\"rpc_port\": [1]}", "rpc_port");
    BAD_CONFIG("{\"rpc_address\": 5}", "string");
    BAD_CONFIG("{\"rpc_address\": \"\"}", "must not be empty");
    BAD_CONFIG("{\"ha_backend_type\": \"k8s\"}", "ha_backend_type");
    BAD_CONFIG("{\"enable_http_metadata_server\": 1}", "boolean");
    BAD_CONFIG("{\"enable_http_metadata_server\": \"perhaps\"}", "perhaps");
    BAD_CONFIG("{\"eviction_ratio\": 1.5}", "[0, 1]");
    BAD_CONFIG("{\"eviction_ratio\": \"x\"}", "eviction_ratio");
    BAD_CONFIG("{\"default_kv_lease_ttl\": \"5 minutes\"}", "5 minutes");
    BAD_CONFIG("{\"client_ttl\": 0}", "client_ttl");
    BAD_CONFIG("{\"cluster_id\": \"a\\u0000b\"}", "NUL");
    BAD_CONFIG("{\"rpc_port\": 1} trailing", NULL);

    /* A missing file. */
    BAD("/nonexistent/crescent.json", "--config_path=/nonexistent/crescent.json");
    crk_master_options o;
    crk_master_options_defaults(&o);
    assert_int_equal(crk_master_options_load_file(&o, "/nonexistent/crescent.json"),
                     CR_INVALID_PARAMS);
    expect_mentions("/nonexistent/crescent.json");
    assert_int_equal(crk_master_options_load_file(&o, NULL), CR_INVALID_PARAMS);

    /* Cross-flag rules apply to values from files too. */
    const char *cross = write_config("{\"default_kv_soft_pin_ttl\": \"25h\"}");
    char cross_arg[128];
    snprintf(cross_arg, sizeof(cross_arg), "--config_path=%s", cross);
    BAD("max_kv_soft_pin_ttl", cross_arg);
    crk_master_options_defaults(&o);
    assert_int_equal(crk_master_options_load_file(&o, cross), CR_INVALID_PARAMS);
    unlink(cross);

    /* A bad file is reported even when the command line sets the same key. */
    const char *path = write_config("{\"rpc_port\": \"x\"}");
    char arg[128];
    snprintf(arg, sizeof(arg), "--config_path=%s", path);
    BAD(path, arg, "--rpc_port=5");
    unlink(path);
}

/* ------------------------------------------------------------------------ */
/* YAML files and Mooncake's sample configs                                 */
/* ------------------------------------------------------------------------ */

/* The keys and values of Mooncake's conf/master.yaml (its sample), in YAML. */
static const char MOONCAKE_STYLE_YAML[] = "# a master config in Mooncake's layout\n"
                                          "enable_metric_reporting: true\n"
                                          "metrics_port: 9013\n"
                                          "rpc_port: 50061\n"
                                          "rpc_thread_num: 16\n"
                                          "rpc_address: \"127.0.0.1\"\n"
                                          "rpc_interface: \"\"\n"
                                          "rpc_conn_timeout_seconds: 0\n"
                                          "rpc_enable_tcp_no_delay: true\n"
                                          "\n"
                                          "default_kv_lease_ttl: 10000\n"
                                          "default_kv_soft_pin_ttl: 1800000\n"
                                          "max_kv_soft_pin_ttl: 86400000\n"
                                          "allow_evict_soft_pinned_objects: true\n"
                                          "eviction_ratio: 0.1\n"
                                          "eviction_high_watermark_ratio: 1.0\n"
                                          "dynamic_replication_mode: \"off\"\n"
                                          "dynamic_replication_heat_window_seconds: 10\n"
                                          "dynamic_replication_admission_qps_threshold: 0.8\n"
                                          "dynamic_replication_max_memory_replicas: 2\n"
                                          "enable_multi_tenants: false\n"
                                          "tenant_quota_connector_type: \"file\"\n"
                                          "tenant_quota_connector_uri: \"\"\n"
                                          "enable_ha: false\n"
                                          "etcd_endpoints: \"http://localhost:2379\"\n"
                                          "root_fs_dir: \"\"\n"
                                          "cluster_id: \"yaml_cluster\"\n"
                                          "memory_allocator: \"offset\"\n"
                                          "client_live_ttl_sec: 60\n"
                                          "enable_oplog: false\n"
                                          "oplog_poll_interval_ms: 1000\n"
                                          "batch_oplog_retry_timeout_sec: 180\n"
                                          "enable_http_metadata_server: false\n"
                                          "http_metadata_server_host: \"0.0.0.0\"\n"
                                          "http_metadata_server_port: 8080\n";

static void test_yaml_file(void **state)
{
    (void)state;
    const char *path = write_config_ext(MOONCAKE_STYLE_YAML, ".yaml");
    char arg[128];
    snprintf(arg, sizeof(arg), "--config_path=%s", path);
    crk_master_options o = OK(arg);
    assert_int_equal(o.metrics_port, 9013);
    assert_int_equal(o.rpc_port, 50061);
    assert_int_equal(o.rpc_thread_num, 16);
    assert_string_equal(o.rpc_address, "127.0.0.1");
    assert_true(o.rpc_enable_tcp_no_delay);
    assert_int_equal(o.svc.default_kv_lease_ttl_ms, 10000);
    assert_int_equal(o.svc.default_kv_soft_pin_ttl_ms, 1800000);
    assert_true(o.svc.eviction_ratio > 0.099 && o.svc.eviction_ratio < 0.101);
    assert_true(o.svc.eviction_high_watermark_ratio > 0.999);
    assert_string_equal(o.cluster_id, "yaml_cluster");
    assert_int_equal(o.svc.client_ttl_ms, 60000); /* client_live_ttl_sec is --client_ttl */
    /* Settings of absent features are recorded (one warning each), once. */
    bool oplog = false, dyn = false;
    for (size_t i = 0; i < o.n_unsupported; i++) {
        oplog |= strcmp(o.unsupported[i], "oplog_poll_interval_ms") == 0;
        dyn |= strcmp(o.unsupported[i], "dynamic_replication_mode") == 0;
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(o.unsupported[i], o.unsupported[j]);
    }
    assert_true(oplog && dyn);
    /* HA's keys are real flags (docs/ha.md). */
    assert_false(o.enable_ha);
    assert_string_equal(o.etcd_endpoints, "http://localhost:2379");
    assert_non_null(crk_master_flag_help("etcd_endpoints"));

    /* The command line overrides the file, before or after --config_path. */
    o = OK("--rpc_port=7001", arg, "--cluster_id=cli", "--client_ttl=5");
    assert_int_equal(o.rpc_port, 7001);
    assert_string_equal(o.cluster_id, "cli");
    assert_int_equal(o.svc.client_ttl_ms, 5000);
    assert_int_equal(o.metrics_port, 9013); /* the rest still from the file */
    unlink(path);

    /* .yml works; YAML words and quoted numbers go to the flags' parsers. */
    path = write_config_ext("rpc_port: '6100'\nrpc_enable_tcp_no_delay: no\n"
                            "default_kv_lease_ttl: 5s\n",
                            ".yml");
    snprintf(arg, sizeof(arg), "--config_path=%s", path);
    o = OK(arg);
    assert_int_equal(o.rpc_port, 6100);
    assert_false(o.rpc_enable_tcp_no_delay);
    assert_int_equal(o.svc.default_kv_lease_ttl_ms, 5000);
    unlink(path);

    /* An empty YAML file sets nothing. */
    path = write_config_ext("# nothing\n", ".yaml");
    snprintf(arg, sizeof(arg), "--config_path=%s", path);
    o = OK(arg);
    assert_int_equal(o.rpc_port, 50051);
    unlink(path);
}

/* A bad YAML file fails with CR_INVALID_PARAMS naming the file and `mention`. */
static void bad_yaml_at(const char *yaml, const char *mention, const char *file, int line)
{
    const char *path = write_config_ext(yaml, ".yaml");
    char arg[128];
    snprintf(arg, sizeof(arg), "--config_path=%s", path);
    bad_at(path, file, line, arg, (const char *)NULL);
    if (strstr(cr_last_error_message(), mention) == NULL) {
        fprintf(stderr, "%s:%d: error message \"%s\" lacks \"%s\"\n", file, line,
                cr_last_error_message(), mention);
        _assert_true(0, "message names the key and line", file, line);
    }
    unlink(path);
}

#define BAD_YAML(yaml, mention) bad_yaml_at((yaml), (mention), __FILE__, __LINE__)

static void test_yaml_errors(void **state)
{
    (void)state;
    BAD_YAML("rpc_port: 1\n\nrpc_portx: 2\n", ".yaml:3: unknown key 'rpc_portx'");
    BAD_YAML("rpc_port: 1\nrpc_port: 2\n", ":2: duplicate key 'rpc_port'");
    BAD_YAML("a:\n  b: 1\n", "nested mapping");
    BAD_YAML("rpc_port: [1, 2]\n", "sequence");
    BAD_YAML("- 1\n- 2\n", "sequence");
    BAD_YAML("x: &a 1\nrpc_port: *a\n", "alias");
    BAD_YAML("rpc_port: 1\n---\nrpc_port: 2\n", "second YAML document");
    BAD_YAML("rpc_port: 1\n  bad: [\n", ".yaml:");
    BAD_YAML("metrics_port: 1\nrpc_port: seventy\n", ":2: key 'rpc_port' = seventy");
    BAD_YAML("eviction_ratio: 1.5\n", "eviction_ratio");
    BAD_YAML("enable_snapshot: true\n", ":1: key 'enable_snapshot'");
    BAD_YAML("memory_allocator: cachelib\n", "memory_allocator");
    BAD_YAML("config_path: /x\n", "command line");
    BAD_YAML("just text\n", "mapping");

    /* Another ending is refused (Mooncake picks the format by the name). */
    const char *path = write_config_ext("rpc_port: 1\n", ".conf");
    char arg[128];
    snprintf(arg, sizeof(arg), "--config_path=%s", path);
    BAD("unsupported config file format", arg);
    unlink(path);
}

/* ------------------------------------------------------------------------ */
/* --flagfile (gflags, as mooncake_master takes it)                         */
/* ------------------------------------------------------------------------ */

static void test_flagfile(void **state)
{
    (void)state;
    char inner[64], outer[64], arg[96];
    snprintf(inner, sizeof(inner), "%s", write_config_ext("--rpc_port=7100\n", ".flags"));
    char text[256];
    snprintf(text, sizeof(text),
             "# Mooncake deployment flags\n\n  --cluster_id=from_file  \n--flagfile=%s\n"
             "-eviction_ratio=0.2\n--metrics_port\n",
             inner);
    /* "--metrics_port" alone at the end takes the next command-line argument. */
    snprintf(outer, sizeof(outer), "%s", write_config_ext(text, ".flagfile"));
    snprintf(arg, sizeof(arg), "--flagfile=%s", outer);
    crk_master_options o = OK(arg, "9100", "--rpc_port=7200");
    assert_string_equal(o.cluster_id, "from_file");
    assert_int_equal(o.metrics_port, 9100);
    assert_int_equal(o.rpc_port, 7200); /* later on the command line wins */
    assert_true(o.svc.eviction_ratio > 0.199 && o.svc.eviction_ratio < 0.201);
    o = OK("--rpc_port=7200", "-flagfile", outer, "1");
    assert_int_equal(o.rpc_port, 7100); /* the file's, expanded where it stands */
    assert_int_equal(o.metrics_port, 1);

    /* Refusals name the file and line. */
    char bad[64];
    snprintf(bad, sizeof(bad), "%s", write_config_ext("--rpc_port=1\nmaster.cpp\n", ".flags"));
    snprintf(arg, sizeof(arg), "--flagfile=%s", bad);
    snprintf(text, sizeof(text), "%s:2: 'master.cpp' is not a flag", bad);
    BAD(text, arg);
    BAD("--flagfile=/nonexistent/f: ", "--flagfile=/nonexistent/f");
    BAD("--flagfile needs a file", "--flagfile");
    unlink(bad);
    /* A file naming itself: the depth bound stops it. */
    char self[64];
    snprintf(self, sizeof(self), "%s", write_config_ext("", ".flags"));
    snprintf(text, sizeof(text), "--flagfile=%s\n", self);
    FILE *f = fopen(self, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    snprintf(arg, sizeof(arg), "--flagfile=%s", self);
    BAD("nested more than", arg);
    unlink(self);
    unlink(inner);
    unlink(outer);
}

/* ------------------------------------------------------------------------ */
/* crk_master_options_set, usage                                            */
/* ------------------------------------------------------------------------ */

static void test_set(void **state)
{
    (void)state;
    crk_master_options o;
    crk_master_options_defaults(&o);
    assert_int_equal(crk_master_options_set(&o, "rpc_port", "0"), 0);
    assert_int_equal(o.rpc_port, 0);
    assert_int_equal(crk_master_options_set(&o, "client-ttl", "250ms"), 0);
    assert_true(o.svc.client_ttl_ms == 250);
    crk_master_options before = o;
    assert_int_equal(crk_master_options_set(&o, "eviction_ratio", "2"), CR_INVALID_PARAMS);
    expect_mentions("--eviction_ratio=2");
    assert_int_equal(crk_master_options_set(&o, "nope", "1"), CR_INVALID_PARAMS);
    expect_mentions("nope");
    assert_int_equal(crk_master_options_set(&o, "config_path", "/x"), CR_INVALID_PARAMS);
    assert_int_equal(crk_master_options_set(&o, "help", "1"), CR_INVALID_PARAMS);
    assert_int_equal(crk_master_options_set(&o, "default_kv_soft_pin_ttl", "48h"),
                     CR_INVALID_PARAMS);
    assert_int_equal(crk_master_options_set(&o, NULL, "1"), CR_INVALID_PARAMS);
    assert_memory_equal(&o, &before, sizeof(o));
}

static void test_usage(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    crk_master_options_usage(f, "crescent-master");
    fclose(f);
    static const char *const expect[] = {
        "usage: crescent-master",
        "--rpc_port=PORT",
        "(default 50051)",
        "--port=PORT",
        "--default_kv_lease_ttl=DURATION(ms)",
        "(default 10000ms)",
        "--default_kv_soft_pin_ttl=DURATION(ms)",
        "(default 1800000ms)",
        "--max_kv_soft_pin_ttl=DURATION(ms)",
        "(default 86400000ms)",
        "--client_ttl=DURATION(s)",
        "(default 10s)",
        "--put_start_discard_timeout_sec=DURATION(s)",
        "(default 30s)",
        "--put_start_release_timeout_sec=DURATION(s)",
        "(default 600s)",
        "--eviction_ratio=RATIO",
        "(default 0.05)",
        "--eviction_high_watermark_ratio=RATIO",
        "(default 0.9)",
        "--metrics_port=PORT",
        "(default 9003)",
        "--enable_http_metadata_server[=BOOL]",
        "--http_metadata_server_port=PORT",
        "(default 8080)",
        "--http_metadata_server_host=TEXT",
        "--cluster_id=TEXT",
        "(default \"mooncake_cluster\")",
        "--config_path=FILE",
        "--allow_evict_soft_pinned_objects[=BOOL]",
        "--rpc_address=TEXT",
        "(default \"0.0.0.0\")",
        "--version",
        "--help",
    };
    for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
        if (strstr(text, expect[i]) == NULL)
            fail_msg("usage lacks \"%s\":\n%s", expect[i], text);
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_flag),
        cmocka_unit_test(test_service_mapping),
        cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_help_and_version),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_cross_checks),
        cmocka_unit_test(test_config_file),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_yaml_file),
        cmocka_unit_test(test_yaml_errors),
        cmocka_unit_test(test_flagfile),
        cmocka_unit_test(test_set),
        cmocka_unit_test(test_usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
