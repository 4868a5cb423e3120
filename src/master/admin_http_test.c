/*
 * admin_http_test.c - the metrics/admin HTTP server, queried with libcurl on
 * 127.0.0.1 with a kernel-picked port.
 *
 * Fake callbacks stand in for the master: they render a small exposition
 * with the prom builder, list two segments, and answer /query_key from a
 * tiny table, recording the keys they were asked for (URL decoding is
 * checked on that side). Then: status mapping of callback failures,
 * 400/404/405 answers, HEAD, NULL callbacks, a bind failure on a busy
 * port, concurrent clients (TSan-clean), and stop while idle.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "base/error.h"
#include "crescent/status.h"
#include "master/admin_http.h"

/* ------------------------------------------------------------------------ */
/* Fake master                                                              */
/* ------------------------------------------------------------------------ */

typedef struct fake {
    atomic_uint metrics_calls;
    atomic_uint query_calls;
    pthread_mutex_t lock; /* guards last_key */
    char last_key[256];
    atomic_int fail_with; /* status the callbacks return (0: succeed) */
} fake;

static int fake_metrics(void *ctx, crk_admin_reply *reply)
{
    fake *f = ctx;
    unsigned n = atomic_fetch_add(&f->metrics_calls, 1) + 1;
    int fail = atomic_load(&f->fail_with);
    if (fail != 0) {
        crk_text_puts(&reply->body, "partial output that must not be sent");
        return crb_error(fail, "metrics are unavailable right now");
    }
    crk_prom_counter(&reply->body, "master_scrapes_total", "Scrapes so far.", n);
    crk_prom_gauge(&reply->body, "master_key_count", "Keys.", 42);
    return 0;
}

static int fake_health(void *ctx, crk_admin_reply *reply)
{
    fake *f = ctx;
    int fail = atomic_load(&f->fail_with);
    if (fail != 0)
        return crb_error(fail, "not ready");
    return crk_text_puts(&reply->body, "{\"status\": \"ok\", \"role\": \"master\"}");
}

static int fake_segments(void *ctx, crk_admin_reply *reply)
{
    fake *f = ctx;
    int fail = atomic_load(&f->fail_with);
    if (fail != 0)
        return crb_error(fail, "segments unavailable");
    reply->json = json_pack("[s,s]", "node-a:17000", "node-\"b\"");
    return reply->json != NULL ? 0 : CR_ERR_NO_MEMORY;
}

static int fake_query(void *ctx, const char *key, crk_admin_reply *reply)
{
    fake *f = ctx;
    atomic_fetch_add(&f->query_calls, 1);
    pthread_mutex_lock(&f->lock);
    snprintf(f->last_key, sizeof(f->last_key), "%s", key);
    pthread_mutex_unlock(&f->lock);
    if (strcmp(key, "text") == 0) {
        reply->content_type = "text/plain";
        return crk_text_puts(&reply->body, "plain answer");
    }
    if (strcmp(key, "empty") == 0)
        return 0;
    if (strcmp(key, "bad") == 0)
        return crb_error(CR_INVALID_KEY, "key '%s' is not valid", key);
    if (strcmp(key, "positive") == 0)
        return 5;
    if (strncmp(key, "layer/", 6) != 0 && strcmp(key, "a b/\xd0\xba&x=1") != 0 &&
        strncmp(key, "raw", 3) != 0)
        return crb_error(CR_OBJECT_NOT_FOUND, "key '%s' not found", key);
    reply->json = json_pack("{s:o,s:i}", "key", crk_admin_json_text(key), "size", 4096);
    return reply->json != NULL ? 0 : CR_ERR_NO_MEMORY;
}

typedef struct fixture {
    fake f;
    crk_admin_http *server;
    char base[64];
} fixture;

static int setup(void **state)
{
    fixture *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return -1;
    pthread_mutex_init(&x->f.lock, NULL);
    crk_admin_callbacks cb = {.ctx = &x->f,
                              .render_metrics = fake_metrics,
                              .health = fake_health,
                              .all_segments = fake_segments,
                              .query_key = fake_query};
    if (crk_admin_http_start("127.0.0.1", 0, &cb, &x->server) != 0) {
        print_error("start: %s\n", cr_last_error_message());
        free(x);
        return -1;
    }
    snprintf(x->base, sizeof(x->base), "http://127.0.0.1:%u",
             (unsigned)crk_admin_http_port(x->server));
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    fixture *x = *state;
    crk_admin_http_stop(x->server);
    pthread_mutex_destroy(&x->f.lock);
    free(x);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* HTTP client                                                              */
/* ------------------------------------------------------------------------ */

typedef struct response {
    long status;
    char body[8192];
    size_t len;
    char content_type[128];
} response;

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    response *r = arg;
    size_t bytes = size * n;
    size_t room = sizeof(r->body) - 1 - r->len;
    size_t take = bytes < room ? bytes : room;
    memcpy(r->body + r->len, p, take);
    r->len += take;
    r->body[r->len] = '\0';
    return bytes;
}

/* method NULL = GET. Returns the curl result. */
static CURLcode request(const char *url, const char *method, response *r)
{
    memset(r, 0, sizeof(*r));
    CURL *c = curl_easy_init();
    assert_non_null(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (method != NULL && strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (method != NULL)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
        char *ct = NULL;
        curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
        if (ct != NULL)
            snprintf(r->content_type, sizeof(r->content_type), "%s", ct);
    }
    curl_easy_cleanup(c);
    return rc;
}

static void get(const fixture *x, const char *path, const char *method, response *r)
{
    char url[512];
    snprintf(url, sizeof(url), "%s%s", x->base, path);
    CURLcode rc = request(url, method, r);
    if (rc != CURLE_OK)
        fail_msg("%s %s: %s", method != NULL ? method : "GET", url, curl_easy_strerror(rc));
}

static void expect_contains(const response *r, const char *needle)
{
    if (strstr(r->body, needle) == NULL)
        fail_msg("body \"%s\" lacks \"%s\"", r->body, needle);
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void test_metrics(void **state)
{
    fixture *x = *state;
    response r;
    get(x, "/metrics", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.content_type, CRK_ADMIN_PROMETHEUS_TYPE);
    assert_string_equal(r.body, "# HELP master_scrapes_total Scrapes so far.\n"
                                "# TYPE master_scrapes_total counter\n"
                                "master_scrapes_total 1\n"
                                "# HELP master_key_count Keys.\n"
                                "# TYPE master_key_count gauge\n"
                                "master_key_count 42\n");
    get(x, "/metrics", NULL, &r);
    expect_contains(&r, "master_scrapes_total 2\n");
    /* HEAD: headers, no body, callback still consulted. */
    get(x, "/metrics", "HEAD", &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.len, 0);
    assert_int_equal(atomic_load(&x->f.metrics_calls), 3);
}

static void test_health_and_segments(void **state)
{
    fixture *x = *state;
    response r;
    get(x, "/health", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"status\": \"ok\", \"role\": \"master\"}");
    assert_string_equal(r.content_type, CRK_ADMIN_JSON_TYPE);
    get(x, "/get_all_segments", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "[\"node-a:17000\",\"node-\\\"b\\\"\"]");
}

static void test_query_key(void **state)
{
    fixture *x = *state;
    response r;
    get(x, "/query_key?key=layer/0/block/1", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"key\":\"layer/0/block/1\",\"size\":4096}");

    /* URL-decoded before the callback sees it. */
    get(x, "/query_key?key=a%20b%2F%D0%BA%26x%3D1", NULL, &r);
    assert_int_equal(r.status, 200);
    pthread_mutex_lock(&x->f.lock);
    assert_string_equal(x->f.last_key, "a b/\xd0\xba&x=1");
    pthread_mutex_unlock(&x->f.lock);
    expect_contains(&r, "\"a b/\xd0\xba&x=1\"");

    /* Other query arguments are ignored. */
    get(x, "/query_key?x=1&key=layer/9&y=2", NULL, &r);
    assert_int_equal(r.status, 200);
    expect_contains(&r, "layer/9");

    /* The callback's content type and an empty body. */
    get(x, "/query_key?key=text", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.content_type, "text/plain");
    assert_string_equal(r.body, "plain answer");
    get(x, "/query_key?key=empty", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.len, 0);

    /* Failures map to HTTP statuses with a JSON error. */
    get(x, "/query_key?key=nope", NULL, &r);
    assert_int_equal(r.status, 404);
    expect_contains(&r, "\"error\":\"OBJECT_NOT_FOUND\"");
    expect_contains(&r, "\"code\":-704");
    expect_contains(&r, "key 'nope' not found");
    get(x, "/query_key?key=bad", NULL, &r);
    assert_int_equal(r.status, 400);
    expect_contains(&r, "INVALID_KEY");
    get(x, "/query_key?key=positive", NULL, &r);
    assert_int_equal(r.status, 500);
    expect_contains(&r, "returned 5");

    /* Missing, empty or NUL-bearing keys never reach the callback. */
    unsigned calls = atomic_load(&x->f.query_calls);
    get(x, "/query_key", NULL, &r);
    assert_int_equal(r.status, 400);
    expect_contains(&r, "missing key");
    get(x, "/query_key?key=", NULL, &r);
    assert_int_equal(r.status, 400);
    get(x, "/query_key?other=1", NULL, &r);
    assert_int_equal(r.status, 400);
    get(x, "/query_key?key=a%00b", NULL, &r);
    assert_int_equal(r.status, 400);
    expect_contains(&r, "NUL");
    assert_int_equal(atomic_load(&x->f.query_calls), calls);

    /* A key that is not UTF-8 (issue 11: echoed raw, the document was not
     * JSON): its invalid bytes come back as U+FFFD, in the answer and in
     * an error message. */
    get(x, "/query_key?key=raw%FF%C3%28%ED%A0%80ok", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"key\":\"raw\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbd\xef\xbf\xbd"
                                "\xef\xbf\xbdok\",\"size\":4096}");
    json_error_t jerr;
    json_t *doc = json_loads(r.body, 0, &jerr);
    assert_non_null(doc);
    json_decref(doc);
    get(x, "/query_key?key=nope%FF", NULL, &r);
    assert_int_equal(r.status, 404);
    doc = json_loads(r.body, 0, &jerr);
    if (doc == NULL)
        fail_msg("error body is not JSON: %s (%s)", r.body, jerr.text);
    json_decref(doc);
}

static void test_json_text(void **state)
{
    (void)state;
    assert_true(crk_admin_is_utf8("plain \xc3\xa9 \xf0\x9f\x98\x80"));
    assert_false(crk_admin_is_utf8("\xc0\xaf"));         /* overlong */
    assert_false(crk_admin_is_utf8("\xed\xa0\x80"));     /* surrogate */
    assert_false(crk_admin_is_utf8("\xf4\x90\x80\x80")); /* > U+10FFFF */
    assert_false(crk_admin_is_utf8("\xe2\x82"));         /* truncated */
    json_t *j = crk_admin_json_text("q\"b\\\n\x01\xff");
    char *text = json_dumps(j, JSON_ENCODE_ANY);
    assert_string_equal(text, "\"q\\\"b\\\\\\n\\u0001\xef\xbf\xbd\"");
    free(text);
    json_decref(j);
    j = crk_admin_json_hex("a\xff");
    assert_string_equal(json_string_value(j), "61ff");
    json_decref(j);
}

static void test_bad_requests(void **state)
{
    fixture *x = *state;
    response r;
    get(x, "/", NULL, &r);
    assert_int_equal(r.status, 404);
    get(x, "/metrics/extra", NULL, &r);
    assert_int_equal(r.status, 404);
    get(x, "/metadata?key=x", NULL, &r);
    assert_int_equal(r.status, 404);
    expect_contains(&r, "no such path");
    static const char *const methods[] = {"POST", "PUT", "DELETE", "PATCH"};
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        get(x, "/metrics", methods[i], &r);
        assert_int_equal(r.status, 405);
        get(x, "/query_key?key=layer/1", methods[i], &r);
        assert_int_equal(r.status, 405);
    }
}

static void test_callback_failures(void **state)
{
    fixture *x = *state;
    response r;
    static const struct {
        int status;
        long http;
    } map[] = {
        {CR_UNAVAILABLE_IN_CURRENT_STATUS, 503},
        {CR_ERR_SHUTDOWN, 503},
        {CR_INVALID_PARAMS, 400},
        {CR_INVALID_PARAMS, 400},
        {CR_SEGMENT_NOT_FOUND, 404},
        {CR_ERR_NOT_FOUND, 404},
        {CR_INTERNAL_ERROR, 500},
        {CR_ERR_NO_MEMORY, 500},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        atomic_store(&x->f.fail_with, map[i].status);
        get(x, "/metrics", NULL, &r);
        assert_int_equal(r.status, map[i].http);
        assert_string_equal(r.content_type, CRK_ADMIN_JSON_TYPE);
        assert_null(strstr(r.body, "partial output"));
        expect_contains(&r, cr_status_name(map[i].status));
        expect_contains(&r, "metrics are unavailable right now");
        get(x, "/health", NULL, &r);
        assert_int_equal(r.status, map[i].http);
        expect_contains(&r, "not ready");
        get(x, "/get_all_segments", NULL, &r);
        assert_int_equal(r.status, map[i].http);
    }
    atomic_store(&x->f.fail_with, 0);
    get(x, "/health", NULL, &r);
    assert_int_equal(r.status, 200);
}

/* A server whose daemon supplies only some callbacks. */
static void test_null_callbacks(void **state)
{
    (void)state;
    crk_admin_callbacks cb = {0};
    crk_admin_http *s = NULL;
    assert_int_equal(crk_admin_http_start("127.0.0.1", 0, &cb, &s), 0);
    fixture x = {.server = s};
    snprintf(x.base, sizeof(x.base), "http://127.0.0.1:%u", (unsigned)crk_admin_http_port(s));
    response r;
    get(&x, "/health", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"status\":\"ok\"}");
    get(&x, "/metrics", NULL, &r);
    assert_int_equal(r.status, 404);
    get(&x, "/get_all_segments", NULL, &r);
    assert_int_equal(r.status, 404);
    get(&x, "/query_key?key=a", NULL, &r);
    assert_int_equal(r.status, 404);
    crk_admin_http_stop(s);
    crk_admin_http_stop(NULL);
}

static void test_start_errors(void **state)
{
    fixture *x = *state;
    crk_admin_callbacks cb = {0};
    crk_admin_http *s = NULL;
    /* The fixture's port is taken. */
    uint16_t busy = crk_admin_http_port(x->server);
    assert_int_equal(crk_admin_http_start("127.0.0.1", busy, &cb, &s), CR_ERR_BIND);
    assert_null(s);
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%u", (unsigned)busy);
    assert_non_null(strstr(cr_last_error_message(), want));
    assert_int_equal(crk_admin_http_start("no-such-host.invalid", 0, &cb, &s), CR_ERR_DNS);
    assert_int_equal(crk_admin_http_start(NULL, 0, &cb, &s), CR_INVALID_PARAMS);
    assert_int_equal(crk_admin_http_start("127.0.0.1", 0, NULL, &s), CR_INVALID_PARAMS);
    assert_int_equal(crk_admin_http_start("127.0.0.1", 0, &cb, NULL), CR_INVALID_PARAMS);
    /* IPv6 loopback, where available. */
    if (crk_admin_http_start("::1", 0, &cb, &s) == 0) {
        char url[64];
        response r;
        snprintf(url, sizeof(url), "http://[::1]:%u/health", (unsigned)crk_admin_http_port(s));
        if (request(url, NULL, &r) == CURLE_OK)
            assert_int_equal(r.status, 200);
        crk_admin_http_stop(s);
    }
}

#define CLIENTS       4
#define CLIENT_ROUNDS 25

typedef struct client_arg {
    const fixture *x;
    int failures;
} client_arg;

static void *client_main(void *p)
{
    client_arg *a = p;
    char url[128];
    response r;
    for (int i = 0; i < CLIENT_ROUNDS; i++) {
        snprintf(url, sizeof(url), "%s%s", a->x->base,
                 i % 2 == 0 ? "/metrics" : "/query_key?key=layer/7");
        if (request(url, NULL, &r) != CURLE_OK || r.status != 200)
            a->failures++;
    }
    return NULL;
}

static void test_concurrent_clients(void **state)
{
    fixture *x = *state;
    unsigned before = atomic_load(&x->f.metrics_calls);
    pthread_t th[CLIENTS];
    client_arg args[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        args[i] = (client_arg){x, 0};
        assert_int_equal(pthread_create(&th[i], NULL, client_main, &args[i]), 0);
    }
    for (int i = 0; i < CLIENTS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(args[i].failures, 0);
    }
    assert_int_equal(atomic_load(&x->f.metrics_calls) - before,
                     CLIENTS * ((CLIENT_ROUNDS + 1) / 2));
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_health_and_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_key, setup, teardown),
        cmocka_unit_test(test_json_text),
        cmocka_unit_test_setup_teardown(test_bad_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callback_failures, setup, teardown),
        cmocka_unit_test(test_null_callbacks),
        cmocka_unit_test_setup_teardown(test_start_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_clients, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
