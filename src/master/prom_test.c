/*
 * prom_test.c - the text buffer and the Prometheus exposition builder.
 *
 * Every check compares the exact bytes produced: HELP/TYPE lines, label
 * escaping, number formatting, cumulative histogram buckets, and the
 * sticky status after an invalid name (no partial line left behind).
 * The lock-free histogram is hammered by several threads (TSan-clean)
 * and must count every observation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "master/prom.h"

static void expect_text(const crk_text *t, const char *want)
{
    assert_int_equal(t->status, 0);
    assert_non_null(t->data);
    if (strcmp(t->data, want) != 0)
        fail_msg("got:\n%s\nwant:\n%s", t->data, want);
    assert_int_equal(t->len, strlen(want));
}

static void test_text(void **state)
{
    (void)state;
    crk_text t = {0};
    assert_int_equal(crk_text_puts(&t, "a"), 0);
    assert_int_equal(crk_text_appendf(&t, "%d-%s", 42, "b"), 0);
    assert_int_equal(crk_text_append(&t, "xyz", 2), 0);
    assert_int_equal(crk_text_append(&t, NULL, 0), 0);
    expect_text(&t, "a42-bxy");
    /* Growth past the first chunk keeps the contents and the terminator. */
    for (int i = 0; i < 1000; i++)
        assert_int_equal(crk_text_appendf(&t, "%04d", i), 0);
    assert_int_equal(t.len, 7 + 4000);
    assert_int_equal(strlen(t.data), t.len);
    assert_memory_equal(t.data + t.len - 8, "09980999", 8);
    crk_text_reset(&t);
    expect_text(&t, "");
    assert_int_equal(crk_text_puts(&t, "z"), 0);
    size_t len = 0;
    char *p = crk_text_steal(&t, &len);
    assert_string_equal(p, "z");
    assert_int_equal(len, 1);
    assert_null(t.data);
    assert_int_equal(t.len, 0);
    free(p);
    assert_null(crk_text_steal(&t, NULL));
    crk_text_free(&t);
}

static void test_counter_gauge(void **state)
{
    (void)state;
    crk_text t = {0};
    assert_int_equal(crk_prom_counter(&t, "master_put_start_requests_total",
                                      "Total PutStart requests.", UINT64_MAX),
                     0);
    assert_int_equal(crk_prom_gauge(&t, "master_eviction_ratio", NULL, 0.05), 0);
    assert_int_equal(crk_prom_gauge(&t, "master:ratio", "multi\nline \\ help \"q\"", 1e-07), 0);
    expect_text(&t, "# HELP master_put_start_requests_total Total PutStart requests.\n"
                    "# TYPE master_put_start_requests_total counter\n"
                    "master_put_start_requests_total 18446744073709551615\n"
                    "# TYPE master_eviction_ratio gauge\n"
                    "master_eviction_ratio 0.05\n"
                    "# HELP master:ratio multi\\nline \\\\ help \"q\"\n"
                    "# TYPE master:ratio gauge\n"
                    "master:ratio 1e-07\n");
    crk_text_free(&t);
}

static void test_numbers(void **state)
{
    (void)state;
    static const struct {
        double v;
        const char *text;
    } cases[] = {
        {0, "0"},
        {-0.0, "-0"},
        {1, "1"},
        {0.1, "0.1"},
        {0.9, "0.9"},
        {1.0 / 3.0, "0.3333333333333333"},
        {123456789012.0, "123456789012"},
        {9007199254740993.0, "9007199254740992"},
        {1e300, "1e+300"},
        {-2.5, "-2.5"},
        {INFINITY, "+Inf"},
        {-INFINITY, "-Inf"},
        {NAN, "NaN"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        crk_text t = {0};
        char want[64];
        assert_int_equal(crk_prom_sample(&t, "m", NULL, 0, cases[i].v), 0);
        snprintf(want, sizeof(want), "m %s\n", cases[i].text);
        expect_text(&t, want);
        crk_text_free(&t);
    }
    crk_text t = {0};
    assert_int_equal(crk_prom_sample_u64(&t, "m", NULL, 0, 9007199254740993ull), 0);
    expect_text(&t, "m 9007199254740993\n");
    crk_text_free(&t);
}

static void test_labels(void **state)
{
    (void)state;
    crk_text t = {0};
    const crk_prom_label l[] = {
        {"op", "put_start"},
        {"segment", "node-a:17000"},
        {"odd", "quote\" back\\slash new\nline"},
        {"empty", ""},
    };
    assert_int_equal(crk_prom_family(&t, "master_rpc_requests_total", CRK_PROM_COUNTER,
                                     "Requests by operation."),
                     0);
    assert_int_equal(crk_prom_sample_u64(&t, "master_rpc_requests_total", l, 1, 7), 0);
    assert_int_equal(crk_prom_sample(&t, "master_rpc_requests_total", l, 4, 8), 0);
    assert_int_equal(crk_prom_family(&t, "u", CRK_PROM_UNTYPED, ""), 0);
    expect_text(&t, "# HELP master_rpc_requests_total Requests by operation.\n"
                    "# TYPE master_rpc_requests_total counter\n"
                    "master_rpc_requests_total{op=\"put_start\"} 7\n"
                    "master_rpc_requests_total{op=\"put_start\",segment=\"node-a:17000\","
                    "odd=\"quote\\\" back\\\\slash new\\nline\",empty=\"\"} 8\n"
                    "# HELP u \n"
                    "# TYPE u untyped\n");
    crk_text_free(&t);
}

static void test_histogram(void **state)
{
    (void)state;
    crk_text t = {0};
    const double bounds[] = {0.001, 0.01, 0.1};
    const uint64_t counts[] = {3, 0, 2, 1};
    const crk_prom_label l[] = {{"op", "get_replica_list"}};
    assert_int_equal(
        crk_prom_family(&t, "master_rpc_latency_seconds", CRK_PROM_HISTOGRAM, "RPC latency."), 0);
    assert_int_equal(
        crk_prom_histogram(&t, "master_rpc_latency_seconds", l, 1, bounds, counts, 3, 0.2565), 0);
    assert_int_equal(crk_prom_histogram(&t, "h", NULL, 0, NULL, (const uint64_t[]){4}, 0, 2), 0);
    expect_text(&t, "# HELP master_rpc_latency_seconds RPC latency.\n"
                    "# TYPE master_rpc_latency_seconds histogram\n"
                    "master_rpc_latency_seconds_bucket{op=\"get_replica_list\",le=\"0.001\"} 3\n"
                    "master_rpc_latency_seconds_bucket{op=\"get_replica_list\",le=\"0.01\"} 3\n"
                    "master_rpc_latency_seconds_bucket{op=\"get_replica_list\",le=\"0.1\"} 5\n"
                    "master_rpc_latency_seconds_bucket{op=\"get_replica_list\",le=\"+Inf\"} 6\n"
                    "master_rpc_latency_seconds_sum{op=\"get_replica_list\"} 0.2565\n"
                    "master_rpc_latency_seconds_count{op=\"get_replica_list\"} 6\n"
                    "h_bucket{le=\"+Inf\"} 4\n"
                    "h_sum 2\n"
                    "h_count 4\n");
    crk_text_free(&t);
}

/* An invalid call fails, records why, leaves no partial line, and sticks. */
static void expect_invalid(crk_text *t, int rc, const char *mention)
{
    assert_int_equal(rc, CR_INVALID_PARAMS);
    assert_int_equal(t->status, CR_INVALID_PARAMS);
    if (strstr(cr_last_error_message(), mention) == NULL)
        fail_msg("error \"%s\" lacks \"%s\"", cr_last_error_message(), mention);
    assert_string_equal(t->data, "ok 1\n");
    assert_int_equal(crk_text_puts(t, "more"), CR_INVALID_PARAMS);
    assert_int_equal(crk_prom_gauge(t, "fine", NULL, 1), CR_INVALID_PARAMS);
    assert_string_equal(t->data, "ok 1\n");
    crk_text_reset(t);
    assert_int_equal(crk_prom_sample(t, "ok", NULL, 0, 1), 0);
}

static void test_invalid_names(void **state)
{
    (void)state;
    crk_text t = {0};
    const crk_prom_label bad_label[] = {{"1x", "v"}};
    const crk_prom_label reserved[] = {{"__name__", "v"}};
    const crk_prom_label le[] = {{"le", "1"}};
    const crk_prom_label dash[] = {{"a-b", "v"}};
    const crk_prom_label colon[] = {{"a:b", "v"}};
    const crk_prom_label null_value[] = {{"a", NULL}};
    const double bounds[] = {2, 1};
    const double inf_bound[] = {INFINITY};
    const uint64_t counts[] = {0, 0, 0};

    assert_int_equal(crk_prom_sample(&t, "ok", NULL, 0, 1), 0);
    expect_invalid(&t, crk_prom_sample(&t, "9lives", NULL, 0, 1), "9lives");
    expect_invalid(&t, crk_prom_sample(&t, "", NULL, 0, 1), "metric name");
    expect_invalid(&t, crk_prom_sample(&t, NULL, NULL, 0, 1), "(null)");
    expect_invalid(&t, crk_prom_sample_u64(&t, "a b", NULL, 0, 1), "a b");
    expect_invalid(&t, crk_prom_family(&t, "a-b", CRK_PROM_GAUGE, "x"), "a-b");
    expect_invalid(&t, crk_prom_family(&t, "ab", (crk_prom_type)42, "x"), "type");
    expect_invalid(&t, crk_prom_counter(&t, "a.b", NULL, 1), "a.b");
    expect_invalid(&t, crk_prom_sample(&t, "m", bad_label, 1, 1), "1x");
    expect_invalid(&t, crk_prom_sample(&t, "m", reserved, 1, 1), "__name__");
    expect_invalid(&t, crk_prom_sample(&t, "m", dash, 1, 1), "a-b");
    expect_invalid(&t, crk_prom_sample(&t, "m", colon, 1, 1), "a:b");
    expect_invalid(&t, crk_prom_sample(&t, "m", null_value, 1, 1), "label value");
    expect_invalid(&t, crk_prom_sample(&t, "m", NULL, 1, 1), "label list");
    expect_invalid(&t, crk_prom_histogram(&t, "h", le, 1, NULL, counts, 0, 0), "le");
    expect_invalid(&t, crk_prom_histogram(&t, "h", NULL, 0, bounds, counts, 2, 0), "bounds");
    expect_invalid(&t, crk_prom_histogram(&t, "h", NULL, 0, inf_bound, counts, 1, 0), "bounds");
    expect_invalid(&t, crk_prom_histogram(&t, "h", NULL, 0, NULL, NULL, 0, 0), "bucket");
    /* "le" is fine on ordinary samples. */
    assert_int_equal(crk_prom_sample(&t, "m", le, 1, 1), 0);
    crk_text_free(&t);
}

/* --- Lock-free histogram ------------------------------------------------- */

static void test_hist_buckets(void **state)
{
    (void)state;
    crk_prom_hist h;
    const uint64_t bounds[] = {10, 100, 1000};
    assert_int_equal(crk_prom_hist_init(&h, bounds, 3), 0);
    const uint64_t obs[] = {0, 10, 11, 100, 101, 1000, 1001, UINT32_MAX};
    for (size_t i = 0; i < sizeof(obs) / sizeof(obs[0]); i++)
        crk_prom_hist_observe(&h, obs[i]);
    crk_text t = {0};
    assert_int_equal(crk_prom_hist_write(&t, "lat_seconds", NULL, 0, &h, 1e6), 0);
    expect_text(&t, "lat_seconds_bucket{le=\"1e-05\"} 2\n"
                    "lat_seconds_bucket{le=\"0.0001\"} 4\n"
                    "lat_seconds_bucket{le=\"0.001\"} 6\n"
                    "lat_seconds_bucket{le=\"+Inf\"} 8\n"
                    "lat_seconds_sum 4294.969518\n"
                    "lat_seconds_count 8\n");
    crk_text_reset(&t);
    assert_int_equal(crk_prom_hist_write(&t, "x", NULL, 0, &h, 0), CR_INVALID_PARAMS);
    crk_text_free(&t);

    /* The default latency bounds are valid and render as seconds. */
    assert_int_equal(
        crk_prom_hist_init(&h, crk_prom_latency_bounds_us, crk_prom_latency_bounds_us_count), 0);
    crk_prom_hist_observe(&h, 750);
    assert_int_equal(crk_prom_hist_write(&t, "l", NULL, 0, &h, 1e6), 0);
    assert_non_null(strstr(t.data, "l_bucket{le=\"0.0005\"} 0\nl_bucket{le=\"0.001\"} 1\n"));
    assert_non_null(strstr(t.data, "l_bucket{le=\"10\"} 1\nl_bucket{le=\"+Inf\"} 1\n"));
    assert_non_null(strstr(t.data, "l_sum 0.00075\nl_count 1\n"));
    crk_text_free(&t);

    const uint64_t decreasing[] = {5, 5};
    assert_int_equal(crk_prom_hist_init(&h, decreasing, 2), CR_INVALID_PARAMS);
    assert_int_equal(crk_prom_hist_init(&h, bounds, 0), CR_INVALID_PARAMS);
    assert_int_equal(crk_prom_hist_init(&h, bounds, CRK_PROM_HIST_MAX_BOUNDS + 1),
                     CR_INVALID_PARAMS);
}

#define HAMMER_THREADS 4
#define HAMMER_OPS     50000

typedef struct hammer {
    crk_prom_hist *h;
    unsigned seed;
} hammer;

static void *hammer_main(void *arg)
{
    hammer *hm = arg;
    for (int i = 0; i < HAMMER_OPS; i++)
        crk_prom_hist_observe(hm->h, (uint64_t)((hm->seed + (unsigned)i) % 2000));
    return NULL;
}

static void test_hist_concurrent(void **state)
{
    (void)state;
    crk_prom_hist h;
    const uint64_t bounds[] = {100, 500, 1000};
    assert_int_equal(crk_prom_hist_init(&h, bounds, 3), 0);
    pthread_t th[HAMMER_THREADS];
    hammer hm[HAMMER_THREADS];
    for (int i = 0; i < HAMMER_THREADS; i++) {
        hm[i] = (hammer){&h, (unsigned)i * 7};
        assert_int_equal(pthread_create(&th[i], NULL, hammer_main, &hm[i]), 0);
    }
    /* Scrape while they run: every snapshot is internally consistent. */
    for (int i = 0; i < 20; i++) {
        crk_text t = {0};
        assert_int_equal(crk_prom_hist_write(&t, "c", NULL, 0, &h, 1), 0);
        unsigned long long inf = 0, count = 0;
        const char *p = strstr(t.data, "c_bucket{le=\"+Inf\"} ");
        assert_non_null(p);
        assert_int_equal(sscanf(p, "c_bucket{le=\"+Inf\"} %llu", &inf), 1);
        p = strstr(t.data, "c_count ");
        assert_int_equal(sscanf(p, "c_count %llu", &count), 1);
        assert_true(inf == count);
        crk_text_free(&t);
    }
    for (int i = 0; i < HAMMER_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    uint64_t total = 0;
    for (size_t i = 0; i <= 3; i++)
        total += atomic_load(&h.counts[i]);
    assert_true(total == (uint64_t)HAMMER_THREADS * HAMMER_OPS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text),         cmocka_unit_test(test_counter_gauge),
        cmocka_unit_test(test_numbers),      cmocka_unit_test(test_labels),
        cmocka_unit_test(test_histogram),    cmocka_unit_test(test_invalid_names),
        cmocka_unit_test(test_hist_buckets), cmocka_unit_test(test_hist_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
