/*
 * backend_test.c - crm_backend_open: which connection strings select which
 * backend, that every unsupported or malformed one is CR_ERR_INVALID_CONFIG
 * with a message naming it, and the P2PHANDSHAKE backend's behaviour.
 * Nothing here talks to a server (creating an http, etcd or redis backend
 * never connects).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "metadata/backend.h"

static void test_p2p(void **state)
{
    crm_backend *b = NULL;
    assert_int_equal(crm_backend_open("P2PHANDSHAKE", 1234, &b), 0);
    assert_non_null(b);
    assert_string_equal(b->ops->name, "p2p");
    assert_true(b->peer_to_peer);
    assert_int_equal(b->timeout_ms, 1234);
    assert_int_equal(b->ops->put(b, "mooncake/ram/x", "v", 1), 0);
    assert_int_equal(b->ops->del(b, "mooncake/ram/x"), 0);
    assert_int_equal(b->ops->del(b, "never/there"), 0);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(b->ops->get(b, "mooncake/ram/x", &v, &len), CR_ERR_METADATA_NOT_FOUND);
    assert_null(v);
    assert_non_null(strstr(cr_last_error_message(), "mooncake/ram/x"));
    crm_backend_close(b);
    crm_backend_close(NULL);
}

static void test_http_good(void **state)
{
    static const char *const good[] = {
        "http://127.0.0.1:8080/metadata",
        "http://localhost/metadata",
        "http://metadata-server.cluster.local:18080/metadata",
        "http://[::1]:8080/metadata",
        "http://10.0.0.1:8080/",
        "http://10.0.0.1:8080/api/v1/metadata",
        "http://10.0.0.1:8080/metadata?cluster=a",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        crm_backend *b = NULL;
        int rc = crm_backend_open(good[i], 500, &b);
        if (rc != 0)
            fail_msg("'%s' refused: %s", good[i], cr_last_error_message());
        assert_non_null(b);
        assert_string_equal(b->ops->name, "http");
        assert_false(b->peer_to_peer);
        assert_int_equal(b->timeout_ms, 500);
        crm_backend_close(b);
    }
    /* timeout 0 means the default (Mooncake's 3 s total) */
    crm_backend *b = NULL;
    assert_int_equal(crm_backend_open("http://127.0.0.1:8080/metadata", 0, &b), 0);
    assert_int_equal(b->timeout_ms, 3000);
    crm_backend_close(b);
    /* the direct constructor behaves the same */
    assert_int_equal(crm_http_backend_create("http://127.0.0.1/metadata", 100, &b), 0);
    crm_backend_close(b);
}

static void test_bad_schemes(void **state)
{
    static const char *const bad[] = {
        "",
        "p2phandshake",
        "P2PHandshake",
        " P2PHANDSHAKE",
        "P2PHANDSHAKE ",
        "P2PHANDSHAKEX",
        "etcd2://h:1",
        "redis:127.0.0.1:6379",
        "https://127.0.0.1:8443/metadata",
        "HTTP://127.0.0.1:8080/metadata",
        "ftp://127.0.0.1/metadata",
        "127.0.0.1",
        "http:/127.0.0.1:8080/metadata",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        crm_backend *b = (crm_backend *)0x1;
        int rc = crm_backend_open(bad[i], 1000, &b);
        if (rc != CR_ERR_INVALID_CONFIG)
            fail_msg("'%s' gave %d (%s), want INVALID_CONFIG", bad[i], rc, cr_last_error_message());
        assert_null(b);
        const char *msg = cr_last_error_message();
        if (bad[i][0] != '\0' && strstr(msg, bad[i]) == NULL)
            fail_msg("message for '%s' does not name it: %s", bad[i], msg);
        assert_non_null(strstr(msg, "P2PHANDSHAKE, http://host:port/path, etcd://"));
    }
    crm_backend *b = (crm_backend *)0x1;
    assert_int_equal(crm_backend_open(NULL, 1000, &b), CR_ERR_INVALID_CONFIG);
    assert_null(b);
    assert_non_null(strstr(cr_last_error_message(), "P2PHANDSHAKE, http://host:port/path"));
}

static void test_bad_http_urls(void **state)
{
    static const char *const bad[] = {
        "http://",
        "http:///metadata",
        "http://127.0.0.1:8080",
        "http://127.0.0.1",
        "http://127.0.0.1:8080?key=x",
        "http://127.0.0.1:/metadata",
        "http://127.0.0.1:0/metadata",
        "http://127.0.0.1:99999/metadata",
        "http://127.0.0.1:80a/metadata",
        "http://127.0.0.1:-1/metadata",
        "http://user:pw@127.0.0.1:8080/metadata",
        "http://::1:8080/metadata",
        "http://[::1/metadata",
        "http://127.0.0.1:8080/meta data",
        "http://127.0.0.1:8080/metadata#frag",
        "http://127.0.0.1:8080/meta\tdata",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        crm_backend *b = (crm_backend *)0x1;
        int rc = crm_backend_open(bad[i], 1000, &b);
        if (rc != CR_ERR_INVALID_CONFIG)
            fail_msg("'%s' gave %d (%s), want INVALID_CONFIG", bad[i], rc, cr_last_error_message());
        assert_null(b);
        if (strstr(cr_last_error_message(), bad[i]) == NULL)
            fail_msg("message for '%s' does not name it: %s", bad[i], cr_last_error_message());
    }
}

/* etcd and redis: Mooncake's forms are accepted (nothing connects yet). */
static void test_etcd_redis_forms(void **state)
{
    static const struct {
        const char *conn;
        const char *name;
        int timeout;
    } good[] = {
        {"etcd://127.0.0.1:2379", "etcd", 1500},
        {"etcd://10.0.0.1:2379,10.0.0.2:2379;10.0.0.3:2379", "etcd", 1500},
        {"etcd://http://10.0.0.1:2379", "etcd", 1500},
        {"127.0.0.1:2379", "etcd", 1500},
        {"etcd-a:2379,etcd-b:2379", "etcd", 1500},
        {"etcd://127.0.0.1:2379?ttl=3", "etcd", 1500},
        {"127.0.0.1:2379?ttl=60", "etcd", 0},
        {"redis://127.0.0.1:6379", "redis", 1500},
        {"redis://localhost:6379?ttl=2", "redis", 0},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        crm_backend *b = NULL;
        int rc = crm_backend_open(good[i].conn, good[i].timeout, &b);
        if (rc != 0)
            fail_msg("'%s' refused: %s", good[i].conn, cr_last_error_message());
        assert_string_equal(b->ops->name, good[i].name);
        assert_false(b->peer_to_peer);
        assert_non_null(b->ops->publish);
        assert_int_equal(b->timeout_ms, good[i].timeout > 0 ? good[i].timeout : 3000);
        crm_backend_close(b);
    }
    static const char *const bad[] = {
        "etcd://",
        "etcd://127.0.0.1",
        "etcd://127.0.0.1:0",
        "etcd://127.0.0.1:2379/path",
        "etcd://127.0.0.1:2379?ttl=0",
        "etcd://127.0.0.1:2379?ttl=3601",
        "etcd://127.0.0.1:2379?ttl=2s",
        "etcd://127.0.0.1:2379?ttl=",
        "etcd://127.0.0.1:2379?lease=2",
        "127.0.0.1:2379?ttl=x",
        "redis://",
        "redis://127.0.0.1",
        "redis://127.0.0.1:6379,127.0.0.1:6380",
        "redis://user@127.0.0.1:6379",
        "redis://127.0.0.1:6379/0",
        "redis://127.0.0.1:6379?db=1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        crm_backend *b = (crm_backend *)0x1;
        int rc = crm_backend_open(bad[i], 1000, &b);
        if (rc != CR_ERR_INVALID_CONFIG)
            fail_msg("'%s' gave %d (%s), want INVALID_CONFIG", bad[i], rc, cr_last_error_message());
        assert_null(b);
        const char *msg = cr_last_error_message();
        if (strstr(msg, bad[i]) == NULL && strstr(msg, bad[i] + 7) == NULL &&
            strstr(msg, bad[i] + 8) == NULL)
            fail_msg("message for '%s' does not name it: %s", bad[i], msg);
    }
}

/* Mooncake's redis credentials come from the environment and are checked. */
static void test_redis_env(void **state)
{
    crm_backend *b = NULL;
    setenv("MC_REDIS_DB_INDEX", "256", 1);
    assert_int_equal(crm_backend_open("redis://127.0.0.1:6379", 0, &b), CR_ERR_INVALID_CONFIG);
    assert_non_null(strstr(cr_last_error_message(), "MC_REDIS_DB_INDEX"));
    setenv("MC_REDIS_DB_INDEX", "3", 1);
    assert_int_equal(crm_backend_open("redis://127.0.0.1:6379", 0, &b), 0);
    crm_backend_close(b);
    unsetenv("MC_REDIS_DB_INDEX");
    setenv("MC_REDIS_USERNAME", "u", 1);
    assert_int_equal(crm_backend_open("redis://127.0.0.1:6379", 0, &b), CR_ERR_INVALID_CONFIG);
    setenv("MC_REDIS_PASSWORD", "p", 1);
    assert_int_equal(crm_backend_open("redis://127.0.0.1:6379", 0, &b), 0);
    crm_backend_close(b);
    unsetenv("MC_REDIS_USERNAME");
    unsetenv("MC_REDIS_PASSWORD");
}

static void test_null_out(void **state)
{
    assert_int_equal(crm_backend_open("P2PHANDSHAKE", 0, NULL), CR_INVALID_PARAMS);
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_p2p),
        cmocka_unit_test(test_http_good),
        cmocka_unit_test(test_bad_schemes),
        cmocka_unit_test(test_bad_http_urls),
        cmocka_unit_test(test_etcd_redis_forms),
        cmocka_unit_test(test_redis_env),
        cmocka_unit_test(test_null_out),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
