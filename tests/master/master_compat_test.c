/*
 * master_compat_test.c - crescent-master as Mooncake's mooncake_master, with
 * real processes: a master started with a YAML --config_path (command-line
 * flags overriding it), real store clients (crescent-test-store-client)
 * putting objects, and Mooncake's admin paths and metric names checked
 * against those objects; the mooncake_master name (argv[0]) and the exit
 * status of a bad config file; and a master with a shared secret against
 * store clients with, without and with the wrong secret.
 *
 * Every process a test starts it stops; the teardown kills what a failed
 * assertion left behind.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "store_harness.h"

#define BODY_MAX (1 << 20)

static char body[BODY_MAX];

static int teardown_kill(void **state)
{
    (void)state;
    sh_kill_all();
    return 0;
}

/* A temporary file with `text`, named with `ext`; path in out. */
static void write_temp(char *out, size_t len, const char *ext, const char *text)
{
    snprintf(out, len, "/tmp/crk_compat_XXXXXX%s", ext);
    int fd = mkstemps(out, (int)strlen(ext));
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
}

static const char YAML[] = "# Mooncake's conf/master.yaml layout\n"
                           "enable_metric_reporting: true\n"
                           "metrics_port: 1\n" /* overridden by the harness's --metrics_port=0 */
                           "rpc_port: 1\n"     /* and --rpc_port=0 */
                           "rpc_address: \"127.0.0.1\"\n"
                           "default_kv_lease_ttl: 2000\n"
                           "eviction_high_watermark_ratio: 1.0\n"
                           "dynamic_replication_mode: \"off\"\n"
                           "enable_ha: false\n"
                           "etcd_endpoints: \"http://localhost:2379\"\n"
                           "cluster_id: \"yaml_cluster\"\n"
                           "memory_allocator: \"offset\"\n"
                           "client_live_ttl_sec: 30\n";

static double metric(const sh_master *m, const char *name)
{
    return sh_metric(m, name);
}

static void admin_paths_and_metrics(void **state)
{
    (void)state;
    char yaml[64];
    write_temp(yaml, sizeof(yaml), ".yaml", YAML);
    char cfg[96];
    snprintf(cfg, sizeof(cfg), "--config_path=%s", yaml);
    const char *const margs[] = {cfg, NULL};
    sh_master m;
    assert_int_equal(sh_master_start(&m, margs), 0);
    unlink(yaml);

    const char *const cargs[] = {"--segment", "32M", "--buffer", "4M", NULL};
    sh_client a, b;
    assert_int_equal(sh_client_start(&a, m.addr, cargs), 0);
    assert_int_equal(sh_client_start(&b, m.addr, cargs), 0);
    assert_int_equal(sh_rc(&a, "put alpha 5000 1 same"), 0);
    assert_int_equal(sh_rc(&a, "put beta 70000 2 r=2"), 0);
    assert_int_equal(sh_rc(&b, "put gamma 300000 3 same"), 0);
    assert_int_equal(sh_rc(&b, "get alpha 1"), 5000);

    /* The file's settings took effect; the command line's ports won. */
    assert_int_equal(sh_http_get(m.metrics_port, "/health", body, sizeof(body)), 200);
    assert_non_null(strstr(body, "\"cluster_id\":\"yaml_cluster\""));
    assert_non_null(strstr(body, "\"status\":\"ok\""));
    assert_non_null(strstr(body, "\"role\":\"leader\""));

    /* /get_all_segments: one name per line. */
    assert_int_equal(sh_http_get(m.metrics_port, "/get_all_segments", body, sizeof(body)), 200);
    char want[400];
    snprintf(want, sizeof(want), "%s\n", a.name);
    assert_non_null(strstr(body, want));
    snprintf(want, sizeof(want), "%s\n", b.name);
    assert_non_null(strstr(body, want));
    assert_null(strchr(body, '{'));

    /* /get_all_keys: the three keys, one per line. */
    assert_int_equal(sh_http_get(m.metrics_port, "/get_all_keys", body, sizeof(body)), 200);
    assert_non_null(strstr(body, "alpha\n"));
    assert_non_null(strstr(body, "beta\n"));
    assert_non_null(strstr(body, "gamma\n"));
    assert_int_equal(strlen(body), strlen("alpha\nbeta\ngamma\n"));

    /* /query_key: Mooncake's descriptors. */
    assert_int_equal(sh_http_get(m.metrics_port, "/query_key?key=gamma", body, sizeof(body)), 200);
    assert_non_null(strstr(body, "\"success\":true"));
    assert_non_null(strstr(body, "\"size_\":300000"));
    assert_non_null(strstr(body, "\"buffer_address_\":"));
    snprintf(want, sizeof(want), "\"transport_endpoint_\":\"%s\"", b.name);
    assert_non_null(strstr(body, want));
    assert_int_equal(sh_http_get(m.metrics_port, "/query_key?key=nokey", body, sizeof(body)), 404);
    assert_non_null(strstr(body, "\"success\":false"));
    assert_non_null(strstr(body, "\"error_code\":-704"));

    /* /batch_query_keys: per key ok + values, or ok false + error. */
    assert_int_equal(
        sh_http_get(m.metrics_port, "/batch_query_keys?keys=alpha,beta,nokey", body, sizeof(body)),
        200);
    assert_non_null(strstr(body, "\"success\":true"));
    assert_non_null(strstr(body, "\"alpha\":{\"ok\":true,\"values\":[{\"size_\":5000"));
    assert_non_null(strstr(body, "\"nokey\":{\"ok\":false,\"error\":\"OBJECT_NOT_FOUND\"}"));
    /* beta has two replicas, on the two segments. */
    const char *beta = strstr(body, "\"beta\":");
    assert_non_null(beta);
    snprintf(want, sizeof(want), "\"transport_endpoint_\":\"%s\"", a.name);
    assert_non_null(strstr(beta, want));
    snprintf(want, sizeof(want), "\"transport_endpoint_\":\"%s\"", b.name);
    assert_non_null(strstr(beta, want));
    assert_int_equal(sh_http_get(m.metrics_port, "/batch_query_keys", body, sizeof(body)), 400);

    /* /query_segment: name, used and capacity lines. */
    char path[400];
    snprintf(path, sizeof(path), "/query_segment?segment=%s", b.name);
    assert_int_equal(sh_http_get(m.metrics_port, path, body, sizeof(body)), 200);
    unsigned long long used = 0, cap = 0;
    snprintf(want, sizeof(want), "%s\nUsed(bytes): %%llu\nCapacity(bytes) : %%llu\n", b.name);
    assert_int_equal(sscanf(body, want, &used, &cap), 2);
    assert_true(used >= 370000); /* gamma and beta's second replica */
    assert_int_equal(cap, 32ull << 20);
    assert_int_equal(sh_http_get(m.metrics_port, "/query_segment?segment=nope", body, sizeof(body)),
                     404);

    /* /get_segments_detail: both segments with Mooncake's fields. */
    assert_int_equal(sh_http_get(m.metrics_port, "/get_segments_detail", body, sizeof(body)), 200);
    assert_non_null(strstr(body, "\"total_segments\":2"));
    snprintf(want, sizeof(want), "\"segment_name\":\"%s\"", a.name);
    assert_non_null(strstr(body, want));
    assert_non_null(strstr(body, "\"allocator_capacity_bytes\":33554432"));
    assert_non_null(strstr(body, "\"status\":\"OK\""));
    assert_non_null(strstr(body, "\"base_address\":\"0x"));

    /* /metrics/summary, /role. */
    assert_int_equal(sh_http_get(m.metrics_port, "/metrics/summary", body, sizeof(body)), 200);
    assert_non_null(strstr(body, "role=leader"));
    /* The writers' idle put grants (writes in flight: docs/WIRE.md) count as keys until their
     * heartbeats give them back, about a second after the last put. */
    for (int t = 0; t < 150 && strstr(body, "Keys: 3") == NULL; t++) {
        sh_sleep_ms(20);
        assert_int_equal(sh_http_get(m.metrics_port, "/metrics/summary", body, sizeof(body)), 200);
    }
    assert_non_null(strstr(body, "Keys: 3"));
    assert_int_equal(sh_http_get(m.metrics_port, "/role", body, sizeof(body)), 200);
    assert_string_equal(body, "leader");
    assert_int_equal(sh_http_get(m.metrics_port, "/leader", body, sizeof(body)), 200);
    assert_string_equal(body, "{\"present\":false}");
    assert_int_equal(sh_http_get(m.metrics_port, "/kv_events/status", body, sizeof(body)), 200);
    assert_non_null(strstr(body, "\"enabled\":false"));
    snprintf(path, sizeof(path), "/api/v1/segments/status?segment=%s", a.name);
    assert_int_equal(sh_http_get(m.metrics_port, path, body, sizeof(body)), 200);
    assert_non_null(strstr(body, "\"status\":1,\"status_name\":\"OK\""));
    assert_int_equal(
        sh_http_get(m.metrics_port, "/api/v1/segments/status?segment=nope", body, sizeof(body)),
        404);

    /* Mooncake's metric names next to crescent's. */
    assert_int_equal((int)metric(&m, "master_key_count"), 3);
    assert_int_equal((int)metric(&m, "master_active_clients"), 2);
    assert_int_equal((int)metric(&m, "master_total_capacity_bytes"), 64 << 20);
    assert_true(metric(&m, "master_put_start_requests_total") >= 3);
    assert_int_equal((int)metric(&m, "master_put_start_requests_total"),
                     (int)metric(&m, "master_requests_total{op=\"put_start\"}"));
    assert_true(metric(&m, "master_get_replica_list_requests_total") >= 1);
    assert_int_equal((int)metric(&m, "master_put_start_failures_total"), 0);
    assert_true(metric(&m, "master_mount_segment_requests_total") >= 2);
    assert_int_equal((int)metric(&m, "master_soft_pin_key_count"), 0);
    assert_int_equal((int)metric(&m, "master_value_size_bytes_count"), 3);
    assert_int_equal((int)metric(&m, "master_value_size_bytes_bucket{le=\"4096\"}"), 0);
    assert_int_equal((int)metric(&m, "master_value_size_bytes_bucket{le=\"65536\"}"), 1);
    assert_int_equal((int)metric(&m, "master_value_size_bytes_bucket{le=\"262144\"}"), 2);
    assert_int_equal((int)metric(&m, "master_value_size_bytes_sum"), 375000);
    assert_int_equal((int)metric(&m, "master_evicted_key_count"), 0);
    assert_true(metric(&m, "master_put_start_discard_cnt") >= 0);

    assert_int_equal(sh_client_stop(&a), 0);
    assert_int_equal(sh_client_stop(&b), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

/* Run bin with argv (argv[0] as given), stdout+stderr into out; exit status. */
static int run_capture(const char *bin, const char *const *argv, char *out, size_t len)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < len && (r = read(fds[0], out + n, len - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(fds[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void mooncake_master_name_and_bad_config(void **state)
{
    (void)state;
    const char *bin = getenv("CRESCENT_MASTER_BIN");
    assert_non_null(bin);
    /* Under Mooncake's name (an installed symlink). */
    char dir[] = "/tmp/crk_mmXXXXXX";
    assert_non_null(mkdtemp(dir));
    char link[128];
    snprintf(link, sizeof(link), "%s/mooncake_master", dir);
    assert_int_equal(symlink(bin, link), 0);
    const char *const version[] = {"mooncake_master", "--version", NULL};
    assert_int_equal(run_capture(link, version, body, sizeof(body)), 0);
    assert_non_null(strstr(body, "mooncake_master version"));
    const char *const help[] = {link, "--help", NULL};
    assert_int_equal(run_capture(link, help, body, sizeof(body)), 0);
    assert_non_null(strstr(body, "usage: mooncake_master"));

    /* An unknown key: exit 2 naming the key and file:line. */
    char yaml[64];
    write_temp(yaml, sizeof(yaml), ".yaml", "rpc_port: 5\n\nno_such_key: 1\n");
    char cfg[96];
    snprintf(cfg, sizeof(cfg), "--config_path=%s", yaml);
    const char *const bad[] = {link, cfg, NULL};
    assert_int_equal(run_capture(link, bad, body, sizeof(body)), 2);
    snprintf(cfg, sizeof(cfg), "%s:3: unknown key 'no_such_key'", yaml);
    assert_non_null(strstr(body, cfg));
    assert_non_null(strstr(body, "mooncake_master: "));
    unlink(yaml);

    /* A value asking for a missing feature: exit 2 naming it. */
    write_temp(yaml, sizeof(yaml), ".json", "{\n  \"enable_snapshot\": true\n}\n");
    snprintf(cfg, sizeof(cfg), "--config_path=%s", yaml);
    const char *const ha[] = {bin, cfg, NULL};
    assert_int_equal(run_capture(bin, ha, body, sizeof(body)), 2);
    snprintf(cfg, sizeof(cfg), "%s:2: key 'enable_snapshot'", yaml);
    assert_non_null(strstr(body, cfg));
    unlink(yaml);

    unlink(link);
    rmdir(dir);
}

/* A master with a shared secret: store clients need it (named errors
 * otherwise), and with it put and get as usual. */
static void shared_secret_store_clients(void **state)
{
    (void)state;
    unsetenv("CRESCENT_MASTER_SECRET");
    const char *const margs[] = {"--shared_secret=correct horse", NULL};
    sh_master m;
    assert_int_equal(sh_master_start(&m, margs), 0);
    const char *const cargs[] = {"--segment", "16M", "--buffer", "4M", NULL};

    sh_client c;
    assert_int_equal(sh_client_start(&c, m.addr, cargs), -1); /* no secret */
    assert_non_null(strstr(c.line, "-3160"));
    assert_int_equal(setenv("CRESCENT_MASTER_SECRET", "battery staple", 1), 0);
    assert_int_equal(sh_client_start(&c, m.addr, cargs), -1); /* a wrong one */
    assert_non_null(strstr(c.line, "-3161"));

    assert_int_equal(setenv("CRESCENT_MASTER_SECRET", "correct horse", 1), 0);
    sh_client a, b;
    assert_int_equal(sh_client_start(&a, m.addr, cargs), 0);
    assert_int_equal(sh_client_start(&b, m.addr, cargs), 0);
    unsetenv("CRESCENT_MASTER_SECRET");
    assert_int_equal(sh_rc(&a, "put sk 100000 7"), 0);
    assert_int_equal(sh_rc(&b, "get sk 7"), 100000);
    assert_int_equal(sh_http_get(m.metrics_port, "/get_all_keys", body, sizeof(body)), 200);
    assert_string_equal(body, "sk\n");
    assert_int_equal(sh_client_stop(&a), 0);
    assert_int_equal(sh_client_stop(&b), 0);
    assert_int_equal(sh_master_stop(&m), 0);

    /* A client with a secret refuses a master without one (it could be anyone). */
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(setenv("CRESCENT_MASTER_SECRET", "correct horse", 1), 0);
    assert_int_equal(sh_client_start(&c, m.addr, cargs), -1);
    unsetenv("CRESCENT_MASTER_SECRET");
    assert_non_null(strstr(c.line, "-3161"));
    assert_int_equal(sh_master_stop(&m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(admin_paths_and_metrics, teardown_kill),
        cmocka_unit_test_teardown(mooncake_master_name_and_bad_config, teardown_kill),
        cmocka_unit_test_teardown(shared_secret_store_clients, teardown_kill),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
