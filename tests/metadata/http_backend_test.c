/*
 * http_test.c - the HTTP metadata server and the http backend together, in
 * one process: round trips (overwrite, binary values with NULs, empty and
 * 8 MiB values, keys that need escaping), the server's answers to malformed
 * requests (400/404/405/413, /health), concurrent clients, and the client's
 * failure modes: nothing listening, a listener that never answers (must
 * time out, not hang), and a server that went away and came back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/net.h"
#include "metadata/backend.h"
#include "mdserver/http_server.h"

typedef struct fixture {
    crd_http_server *server;
    crm_backend *backend;
    char url[128];
} fixture;

static int setup_server(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL || crd_http_server_start("127.0.0.1", 0, &f->server) != 0) {
        print_error("server start: %s\n", cr_last_error_message());
        free(f);
        return -1;
    }
    snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%u/metadata",
             (unsigned)crd_http_server_port(f->server));
    if (crm_backend_open(f->url, 10000, &f->backend) != 0) {
        crd_http_server_stop(f->server);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown_server(void **state)
{
    fixture *f = *state;
    crm_backend_close(f->backend);
    crd_http_server_stop(f->server);
    free(f);
    return 0;
}

static void check_value(crm_backend *b, const char *key, const void *want, size_t want_len)
{
    void *v = NULL;
    size_t len = 0;
    int rc = b->ops->get(b, key, &v, &len);
    if (rc != 0)
        fail_msg("get '%s': %d %s", key, rc, cr_last_error_message());
    assert_non_null(v);
    assert_int_equal(len, want_len);
    if (want_len > 0)
        assert_memory_equal(v, want, want_len);
    free(v);
}

static void check_missing(crm_backend *b, const char *key)
{
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(b->ops->get(b, key, &v, &len), CR_ERR_METADATA_NOT_FOUND);
    assert_null(v);
}

/* ---- raw HTTP, for what the backend cannot express ---- */

typedef struct upload {
    size_t left;
} upload;

static size_t fill_upload(char *buf, size_t size, size_t nmemb, void *userdata)
{
    upload *u = userdata;
    size_t n = size * nmemb < u->left ? size * nmemb : u->left;
    memset(buf, 'z', n);
    u->left -= n;
    return n;
}

static size_t collect(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    char *out = userdata; /* 256 bytes, NUL-terminated */
    size_t have = strlen(out), n = size * nmemb;
    size_t keep = n < 255 - have ? n : 255 - have;
    memcpy(out + have, ptr, keep);
    out[have + keep] = '\0';
    return n;
}

/*
 * method path[?query] on the server; returns the status and the first 255
 * bytes of the body. chunked_len > 0 uploads that many bytes chunked.
 */
static long raw_request(const fixture *f, const char *method, const char *path_query,
                        size_t chunked_len, char body[256])
{
    char url[512];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", (unsigned)crd_http_server_port(f->server),
             path_query);
    CURL *h = curl_easy_init();
    assert_non_null(h);
    body[0] = '\0';
    upload u = {.left = chunked_len};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 20000L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    struct curl_slist *hdrs = NULL;
    if (chunked_len > 0) {
        hdrs = curl_slist_append(hdrs, "Transfer-Encoding: chunked");
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, fill_upload);
        curl_easy_setopt(h, CURLOPT_READDATA, &u);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    }
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK)
        fail_msg("%s %s: %s", method, url, curl_easy_strerror(cc));
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return status;
}

/* ---- tests ---- */

static void test_round_trip(void **state)
{
    fixture *f = *state;
    crm_backend *b = f->backend;
    assert_int_equal(crd_http_server_key_count(f->server), 0);
    check_missing(b, "mooncake/ram/seg0");
    assert_non_null(strstr(cr_last_error_message(), "mooncake/ram/seg0"));

    assert_int_equal(b->ops->put(b, "mooncake/ram/seg0", "descriptor-1", 12), 0);
    check_value(b, "mooncake/ram/seg0", "descriptor-1", 12);
    assert_int_equal(crd_http_server_key_count(f->server), 1);

    /* overwrite */
    assert_int_equal(b->ops->put(b, "mooncake/ram/seg0", "d2", 2), 0);
    check_value(b, "mooncake/ram/seg0", "d2", 2);
    assert_int_equal(crd_http_server_key_count(f->server), 1);

    /* binary value with NUL bytes, and an empty value */
    const unsigned char bin[] = {0x82, 0x00, 0xa1, 0x00, 0x00, 0xff, 0x00};
    assert_int_equal(b->ops->put(b, "mooncake/rpc_meta/seg0", bin, sizeof(bin)), 0);
    check_value(b, "mooncake/rpc_meta/seg0", bin, sizeof(bin));
    assert_int_equal(b->ops->put(b, "empty", NULL, 0), 0);
    check_value(b, "empty", NULL, 0);
    assert_int_equal(crd_http_server_key_count(f->server), 3);

    /* keys that must be escaped keep their identity */
    static const char *const keys[] = {
        "a/b c+d&e=f%g?h#i",
        "plus+sign",
        "plus sign",
        "%41",
        "A",
        "mooncake/ram/10.0.0.1:15001",
        "\xe6\x9c\x88/\xc3\xa9",
        "tab\there",
    };
    size_t nkeys = sizeof(keys) / sizeof(keys[0]);
    for (size_t i = 0; i < nkeys; i++)
        assert_int_equal(b->ops->put(b, keys[i], keys[i], strlen(keys[i])), 0);
    for (size_t i = 0; i < nkeys; i++)
        check_value(b, keys[i], keys[i], strlen(keys[i]));
    assert_int_equal(crd_http_server_key_count(f->server), 3 + nkeys);

    /* delete: present, then missing (both succeed), then it is gone */
    assert_int_equal(b->ops->del(b, "mooncake/ram/seg0"), 0);
    assert_int_equal(b->ops->del(b, "mooncake/ram/seg0"), 0);
    check_missing(b, "mooncake/ram/seg0");
    check_value(b, "mooncake/rpc_meta/seg0", bin, sizeof(bin));
    assert_int_equal(crd_http_server_key_count(f->server), 2 + nkeys);

    /* the client refuses empty keys itself */
    assert_int_equal(b->ops->put(b, "", "x", 1), CR_INVALID_PARAMS);
}

static void test_large_value(void **state)
{
    fixture *f = *state;
    crm_backend *b = f->backend;
    size_t n = (size_t)8 << 20;
    unsigned char *big = malloc(n);
    assert_non_null(big);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        big[i] = (unsigned char)(x >> 16);
    }
    big[0] = 0;
    big[n - 1] = 0;
    assert_int_equal(b->ops->put(b, "big", big, n), 0);
    check_value(b, "big", big, n);
    free(big);

    /* exactly the limit is accepted */
    size_t max = CRD_HTTP_SERVER_MAX_VALUE;
    char *at_limit = malloc(max);
    assert_non_null(at_limit);
    memset(at_limit, 'm', max);
    int rc = b->ops->put(b, "at-limit", at_limit, max);
    if (rc != 0)
        fail_msg("put of %zu bytes: %s", max, cr_last_error_message());
    free(at_limit);
    assert_int_equal(b->ops->del(b, "at-limit"), 0);
}

static void test_too_large(void **state)
{
    fixture *f = *state;
    crm_backend *b = f->backend;
    size_t over = CRD_HTTP_SERVER_MAX_VALUE + 1;

    /* Content-Length over the limit: refused before the body is read */
    int fd = crb_connect("127.0.0.1", crd_http_server_port(f->server), 2000);
    assert_true(fd >= 0);
    char req[256];
    int len =
        snprintf(req, sizeof(req),
                 "PUT /metadata?key=huge HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", over);
    assert_int_equal(crb_write_full(fd, req, (size_t)len, crb_now_ns() + 2000000000ull), 0);
    char resp[13] = {0};
    assert_int_equal(crb_read_full(fd, resp, 12, crb_now_ns() + 5000000000ull), 0);
    assert_string_equal(resp, "HTTP/1.1 413");
    close(fd);

    /* chunked body over the limit: discarded and refused at the end */
    char body[256];
    assert_int_equal(raw_request(f, "PUT", "/metadata?key=huge", over, body), 413);
    /* a small chunked body is fine */
    assert_int_equal(raw_request(f, "PUT", "/metadata?key=chunked", 100000, body), 200);
    assert_int_equal(crd_http_server_key_count(f->server), 1);
    check_missing(b, "huge");

    /* through the backend: an error naming the status */
    char *big = calloc(1, over);
    assert_non_null(big);
    assert_int_equal(b->ops->put(b, "huge", big, over), CR_ERR_METADATA);
    assert_non_null(strstr(cr_last_error_message(), "HTTP 413"));
    free(big);
    check_missing(b, "huge");
}

static void test_bad_requests(void **state)
{
    fixture *f = *state;
    char body[256];
    assert_int_equal(raw_request(f, "GET", "/health", 0, body), 200);
    assert_string_equal(body, "OK");
    assert_int_equal(raw_request(f, "PUT", "/health", 0, body), 405);
    assert_int_equal(raw_request(f, "GET", "/metadata", 0, body), 400);
    assert_int_equal(raw_request(f, "GET", "/metadata?key=", 0, body), 400);
    assert_int_equal(raw_request(f, "GET", "/metadata?other=1", 0, body), 400);
    assert_int_equal(raw_request(f, "PUT", "/metadata?k=1", 0, body), 400);
    assert_int_equal(raw_request(f, "DELETE", "/metadata", 0, body), 400);
    assert_int_equal(raw_request(f, "GET", "/metadata?key=a%00b", 0, body), 400);
    assert_int_equal(raw_request(f, "GET", "/", 0, body), 404);
    assert_int_equal(raw_request(f, "GET", "/metadata/x?key=a", 0, body), 404);
    assert_int_equal(raw_request(f, "GET", "/metadataa?key=a", 0, body), 404);
    assert_int_equal(raw_request(f, "POST", "/metadata?key=a", 0, body), 405);
    assert_int_equal(raw_request(f, "PATCH", "/metadata?key=a", 0, body), 405);
    assert_int_equal(raw_request(f, "DELETE", "/metadata?key=nothing", 0, body), 404);
    assert_int_equal(raw_request(f, "GET", "/metadata?key=nothing", 0, body), 404);
    assert_string_equal(body, "metadata not found");
    /* a key given twice: the first one counts */
    assert_int_equal(raw_request(f, "PUT", "/metadata?key=one&key=two", 0, body), 200);
    assert_int_equal(raw_request(f, "GET", "/metadata?key=one", 0, body), 200);
    assert_int_equal(raw_request(f, "DELETE", "/metadata?key=one", 0, body), 200);
    assert_int_equal(crd_http_server_key_count(f->server), 0);
}

static void test_non_200_is_metadata_error(void **state)
{
    fixture *f = *state;
    char url[160];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/wrong/path",
             (unsigned)crd_http_server_port(f->server));
    crm_backend *b = NULL;
    assert_int_equal(crm_backend_open(url, 5000, &b), 0);
    assert_int_equal(b->ops->put(b, "mooncake/ram/k", "v", 1), CR_ERR_METADATA);
    const char *msg = cr_last_error_message();
    assert_non_null(strstr(msg, url));
    assert_non_null(strstr(msg, "mooncake/ram/k"));
    assert_non_null(strstr(msg, "HTTP 404"));
    crm_backend_close(b);
}

/* A port with nothing listening on it (bound, then released). */
static uint16_t unused_port(void)
{
    uint16_t port = 0;
    int fd = crb_listen("127.0.0.1", 0, 1, &port);
    assert_true(fd >= 0);
    close(fd);
    return port;
}

static void test_nothing_listening(void **state)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metadata", (unsigned)unused_port());
    crm_backend *b = NULL;
    assert_int_equal(crm_backend_open(url, 2000, &b), 0);
    uint64_t t0 = crb_now_ms();
    assert_int_equal(b->ops->put(b, "k", "v", 1), CR_ERR_METADATA);
    assert_non_null(strstr(cr_last_error_message(), url));
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(b->ops->get(b, "k", &v, &len), CR_ERR_METADATA);
    assert_int_equal(b->ops->del(b, "k"), CR_ERR_METADATA);
    assert_true(crb_now_ms() - t0 < 3 * 2000);
    crm_backend_close(b);
}

static void test_unresponsive_server_times_out(void **state)
{
    uint16_t port = 0;
    int lfd = crb_listen("127.0.0.1", 0, 16, &port); /* accepts in the kernel, never answers */
    assert_true(lfd >= 0);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metadata", (unsigned)port);
    crm_backend *b = NULL;
    assert_int_equal(crm_backend_open(url, 300, &b), 0);
    uint64_t t0 = crb_now_ms();
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(b->ops->get(b, "k", &v, &len), CR_ERR_METADATA);
    uint64_t took = crb_now_ms() - t0;
    assert_true(took >= 250);
    assert_true(took < 3000);
    assert_non_null(strstr(cr_last_error_message(), url));
    crm_backend_close(b);
    close(lfd);
}

static void test_server_gone_then_back(void **state)
{
    fixture *f = *state;
    crm_backend *b = f->backend;
    uint16_t port = crd_http_server_port(f->server);
    assert_int_equal(b->ops->put(b, "k", "v", 1), 0); /* leaves a pooled kept-alive connection */
    crd_http_server_stop(f->server);
    f->server = NULL;

    uint64_t t0 = crb_now_ms();
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(b->ops->get(b, "k", &v, &len), CR_ERR_METADATA);
    assert_true(crb_now_ms() - t0 < 5000);

    /* a new server on the same port: the same backend works again (empty store) */
    assert_int_equal(crd_http_server_start("127.0.0.1", port, &f->server), 0);
    assert_int_equal(crd_http_server_port(f->server), port);
    check_missing(b, "k");
    assert_int_equal(b->ops->put(b, "k", "v2", 2), 0);
    check_value(b, "k", "v2", 2);
}

typedef struct worker_arg {
    crm_backend *b;
    int id;
    int failures;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    char key[64], val[64];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "mooncake/ram/w%d-%d", a->id, i % 10);
        int n = snprintf(val, sizeof(val), "value %d %d", a->id, i);
        void *v = NULL;
        size_t len = 0;
        if (a->b->ops->put(a->b, key, val, (size_t)n) != 0 ||
            a->b->ops->get(a->b, key, &v, &len) != 0 || len != (size_t)n ||
            memcmp(v, val, len) != 0)
            a->failures++;
        free(v);
        if (i % 3 == 0 && a->b->ops->del(a->b, key) != 0)
            a->failures++;
    }
    return NULL;
}

static void test_concurrent_clients(void **state)
{
    fixture *f = *state;
    enum { T = 8 };
    pthread_t th[T];
    worker_arg args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (worker_arg){.b = f->backend, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    /* each worker's last write to each of its 10 keys: i = 90..99, deleted when i % 3 == 0 */
    size_t want = 0;
    for (int i = 90; i < 100; i++)
        want += (i % 3 != 0);
    assert_int_equal(crd_http_server_key_count(f->server), T * want);
}

static void test_start_errors(void **state)
{
    crd_http_server *s = NULL, *s2 = NULL;
    assert_int_equal(crd_http_server_start("127.0.0.1", 0, &s), 0);
    uint16_t port = crd_http_server_port(s);
    assert_true(port != 0);
    int rc = crd_http_server_start("127.0.0.1", port, &s2);
    assert_int_equal(rc, CR_ERR_BIND);
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%u", (unsigned)port);
    assert_non_null(strstr(cr_last_error_message(), where));
    assert_null(s2);
    crd_http_server_stop(s);

    assert_int_equal(crd_http_server_start("no-such-host.invalid", 0, &s), CR_ERR_DNS);
    assert_int_equal(crd_http_server_start(NULL, 0, &s), CR_INVALID_PARAMS);
    crd_http_server_stop(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup_server, teardown_server),
        cmocka_unit_test_setup_teardown(test_large_value, setup_server, teardown_server),
        cmocka_unit_test_setup_teardown(test_too_large, setup_server, teardown_server),
        cmocka_unit_test_setup_teardown(test_bad_requests, setup_server, teardown_server),
        cmocka_unit_test_setup_teardown(test_non_200_is_metadata_error, setup_server,
                                        teardown_server),
        cmocka_unit_test(test_nothing_listening),
        cmocka_unit_test(test_unresponsive_server_times_out),
        cmocka_unit_test_setup_teardown(test_server_gone_then_back, setup_server, teardown_server),
        cmocka_unit_test_setup_teardown(test_concurrent_clients, setup_server, teardown_server),
        cmocka_unit_test(test_start_errors),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup(); /* pairs with the backend's one-time curl_global_init */
    return failed;
}
