/*
 * backends_test.c - the etcd:// and redis:// metadata backends
 * (crm_backend_open) against real servers started here: put/get/del round
 * trips, published keys carry a TTL (etcd lease / redis PTTL) and vanish
 * when the backend is destroyed, published keys come back after the server
 * lost them (etcd wiped and restarted; redis restarted empty), calls fail
 * with named errors within their deadline while the server is gone; and
 * both backends against misbehaving servers (fake_server.c): every
 * malformed reply is a named error, never a crash or a hang. Skips (77)
 * without /usr/bin/etcd or /usr/bin/redis-server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <hiredis/hiredis.h>

#include "base/error.h"
#include "fake_server.h"
#include "metadata/backend.h"
#include "metadata/etcd.h"
#include "testing.h"

static ct_server etcd, redis;

static int group_setup(void **state)
{
    if (ct_etcd_start(&etcd, NULL) != 0)
        return -1;
    return ct_redis_start(&redis, NULL) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    ct_server_stop(&etcd);
    ct_server_stop(&redis);
    return 0;
}

static void sleep_ms(int ms)
{
    usleep((useconds_t)ms * 1000);
}

static crm_backend *open_backend(const char *scheme, const char *endpoint, const char *opts,
                                 int timeout_ms)
{
    char conn[256];
    snprintf(conn, sizeof(conn), "%s%s%s", scheme, endpoint, opts);
    crm_backend *b = NULL;
    if (crm_backend_open(conn, timeout_ms, &b) != 0)
        fail_msg("open %s: %s", conn, cr_last_error_message());
    return b;
}

static void check_value(crm_backend *b, const char *key, const void *want, size_t len)
{
    void *v = NULL;
    size_t n = 0;
    int rc = b->ops->get(b, key, &v, &n);
    if (rc != 0)
        fail_msg("get %s: %s", key, cr_last_error_message());
    assert_int_equal(n, len);
    assert_memory_equal(v, want, len);
    free(v);
}

static void check_missing(crm_backend *b, const char *key)
{
    void *v = (void *)0x1;
    size_t n = 77;
    assert_int_equal(b->ops->get(b, key, &v, &n), CR_ERR_METADATA_NOT_FOUND);
    assert_ptr_equal(v, (void *)0x1);
    assert_non_null(strstr(cr_last_error_message(), key));
}

static void round_trip(crm_backend *b)
{
    check_missing(b, "mooncake/ram/seg0");
    uint8_t bin[1000];
    for (size_t i = 0; i < sizeof(bin); i++)
        bin[i] = (uint8_t)(i ^ 0xa5);
    assert_int_equal(b->ops->put(b, "mooncake/ram/seg0", bin, sizeof(bin)), 0);
    check_value(b, "mooncake/ram/seg0", bin, sizeof(bin));
    assert_int_equal(b->ops->put(b, "mooncake/ram/seg0", "d2", 2), 0);
    check_value(b, "mooncake/ram/seg0", "d2", 2);
    assert_int_equal(b->ops->put(b, "mooncake/rpc_meta/seg0", "", 0), 0);
    check_value(b, "mooncake/rpc_meta/seg0", "", 0);
    assert_int_equal(b->ops->del(b, "mooncake/ram/seg0"), 0);
    assert_int_equal(b->ops->del(b, "mooncake/ram/seg0"), 0);
    check_missing(b, "mooncake/ram/seg0");
    assert_int_equal(b->ops->del(b, "mooncake/rpc_meta/seg0"), 0);
    assert_int_equal(b->ops->put(b, "", "x", 1), CR_INVALID_PARAMS);
}

static void etcd_round_trip(void **state)
{
    crm_backend *b = open_backend("etcd://", etcd.endpoint, "", 3000);
    round_trip(b);
    crm_backend_close(b);
    /* the bare form is etcd too */
    b = open_backend("", etcd.endpoint, "", 3000);
    assert_string_equal(b->ops->name, "etcd");
    round_trip(b);
    crm_backend_close(b);
}

static void redis_round_trip(void **state)
{
    crm_backend *b = open_backend("redis://", redis.endpoint, "", 3000);
    round_trip(b);
    crm_backend_close(b);
}

static crm_etcd *etcd_client(void)
{
    crm_etcd_config cfg = {.endpoints = etcd.endpoint};
    crm_etcd *c;
    assert_int_equal(crm_etcd_open(&cfg, &c), 0);
    return c;
}

static void etcd_published_keys(void **state)
{
    crm_backend *b = open_backend("etcd://", etcd.endpoint, "?ttl=2", 3000);
    assert_int_equal(crm_backend_publish(b, "mooncake/ram/p", "desc", 4), 0);
    assert_int_equal(crm_backend_publish(b, "mooncake/rpc_meta/p", "127.0.0.1:1", 11), 0);
    assert_int_equal(crm_backend_publish(b, "mooncake/ram/p", "desc2", 5), 0);
    crm_etcd *c = etcd_client();
    crm_etcd_kv kv, kv2;
    assert_int_equal(crm_etcd_get(c, "mooncake/ram/p", &kv, NULL), 0);
    assert_int_equal(crm_etcd_get(c, "mooncake/rpc_meta/p", &kv2, NULL), 0);
    assert_true(kv.lease != 0);
    assert_int_equal(kv.lease, kv2.lease); /* one lease per process */
    assert_memory_equal(kv.value, "desc2", 5);
    crm_etcd_kv_clear(&kv);
    crm_etcd_kv_clear(&kv2);
    /* kept alive past the TTL */
    sleep_ms(2600);
    check_value(b, "mooncake/ram/p", "desc2", 5);
    /* etcd loses everything (wiped and restarted): the keys come back */
    ct_server_kill(&etcd);
    ct_server_wipe(&etcd);
    assert_int_equal(ct_server_restart(&etcd), 0);
    uint64_t t0 = ct_now_ms();
    void *v = NULL;
    size_t n = 0;
    while (b->ops->get(b, "mooncake/rpc_meta/p", &v, &n) != 0) {
        if (ct_now_ms() - t0 > 8000)
            fail_msg("published keys not restored 8 s after etcd came back");
        sleep_ms(100);
    }
    printf("etcd wiped: published keys restored %llu ms after it came back\n",
           (unsigned long long)(ct_now_ms() - t0));
    free(v);
    check_value(b, "mooncake/ram/p", "desc2", 5);
    check_value(b, "mooncake/rpc_meta/p", "127.0.0.1:1", 11);
    /* del stops keeping a key; destroy revokes the rest at once */
    assert_int_equal(b->ops->del(b, "mooncake/rpc_meta/p"), 0);
    crm_backend_close(b);
    assert_int_equal(crm_etcd_get(c, "mooncake/ram/p", &kv, NULL), CR_ETCD_KEY_NOT_EXIST);
    assert_int_equal(crm_etcd_get(c, "mooncake/rpc_meta/p", &kv, NULL), CR_ETCD_KEY_NOT_EXIST);
    crm_etcd_close(c);
}

static long long redis_pttl(const char *key)
{
    redisContext *ctx = redisConnect("127.0.0.1", redis.port);
    assert_non_null(ctx);
    redisReply *r = redisCommand(ctx, "PTTL %s", key);
    assert_non_null(r);
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -99;
    freeReplyObject(r);
    redisFree(ctx);
    return v;
}

static void redis_published_keys(void **state)
{
    crm_backend *b = open_backend("redis://", redis.endpoint, "?ttl=2", 1000);
    assert_int_equal(crm_backend_publish(b, "mooncake/ram/r", "desc", 4), 0);
    long long pttl = redis_pttl("mooncake/ram/r");
    assert_true(pttl > 0 && pttl <= 2000);
    /* refreshed past the TTL */
    sleep_ms(2600);
    check_value(b, "mooncake/ram/r", "desc", 4);
    assert_true(redis_pttl("mooncake/ram/r") > 0);
    /* redis down: a named error within the deadline */
    ct_server_kill(&redis);
    uint64_t t0 = ct_now_ms();
    void *v;
    size_t n;
    int rc = b->ops->get(b, "mooncake/ram/r", &v, &n);
    assert_int_equal(rc, CR_ERR_METADATA_UNAVAILABLE);
    assert_true(ct_now_ms() - t0 < 2500);
    assert_non_null(strstr(cr_last_error_message(), redis.endpoint));
    /* redis back, empty: the refresher puts the key back */
    assert_int_equal(ct_server_restart(&redis), 0);
    t0 = ct_now_ms();
    while (b->ops->get(b, "mooncake/ram/r", &v, &n) != 0) {
        if (ct_now_ms() - t0 > 5000)
            fail_msg("published key not restored 5 s after redis came back");
        sleep_ms(100);
    }
    printf("redis restarted: published key restored %llu ms after it came back\n",
           (unsigned long long)(ct_now_ms() - t0));
    free(v);
    assert_int_equal(b->ops->put(b, "mooncake/plain", "x", 1), 0);
    assert_int_equal(redis_pttl("mooncake/plain"), -1); /* put has no TTL */
    /* destroy deletes published keys */
    crm_backend_close(b);
    assert_int_equal(redis_pttl("mooncake/ram/r"), -2); /* no such key */
    b = open_backend("redis://", redis.endpoint, "", 1000);
    check_value(b, "mooncake/plain", "x", 1);
    assert_int_equal(b->ops->del(b, "mooncake/plain"), 0);
    crm_backend_close(b);
}

/* A redis that wants a password: Mooncake's MC_REDIS_PASSWORD is sent. */
static void redis_password(void **state)
{
    redisContext *ctx = redisConnect("127.0.0.1", redis.port);
    redisReply *r = redisCommand(ctx, "CONFIG SET requirepass s3cret");
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    crm_backend *b = open_backend("redis://", redis.endpoint, "", 1000);
    assert_int_equal(b->ops->put(b, "k", "v", 1), CR_ERR_METADATA);
    assert_non_null(strstr(cr_last_error_message(), "NOAUTH"));
    crm_backend_close(b);
    setenv("MC_REDIS_PASSWORD", "wrong", 1);
    b = open_backend("redis://", redis.endpoint, "", 1000);
    assert_int_equal(b->ops->put(b, "k", "v", 1), CR_ERR_METADATA);
    crm_backend_close(b);
    setenv("MC_REDIS_PASSWORD", "s3cret", 1);
    setenv("MC_REDIS_DB_INDEX", "2", 1);
    b = open_backend("redis://", redis.endpoint, "", 1000);
    round_trip(b);
    assert_int_equal(b->ops->put(b, "in-db-2", "v", 1), 0);
    crm_backend_close(b);
    r = redisCommand(ctx, "AUTH s3cret");
    freeReplyObject(r);
    r = redisCommand(ctx, "EXISTS in-db-2"); /* db 0: not there */
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    r = redisCommand(ctx, "CONFIG SET requirepass \"\"");
    freeReplyObject(r);
    redisFree(ctx);
    unsetenv("MC_REDIS_PASSWORD");
    unsetenv("MC_REDIS_DB_INDEX");
}

static void expect(crm_backend *b, int want, uint64_t max_ms, const char *what)
{
    void *v = (void *)0x1;
    size_t n = 0;
    uint64_t t0 = ct_now_ms();
    int rc = b->ops->get(b, "mooncake/ram/x", &v, &n);
    uint64_t took = ct_now_ms() - t0;
    if (rc != want)
        fail_msg("%s: got %d (%s), want %s", what, rc, cr_last_error_message(),
                 cr_status_name(want));
    if (took > max_ms)
        fail_msg("%s: took %llu ms", what, (unsigned long long)took);
    assert_ptr_equal(v, (void *)0x1);
    printf("%-40s -> %s: %s\n", what, cr_status_name(rc), cr_last_error_message());
}

static void etcd_malformed(void **state)
{
    fake_server f;
    assert_int_equal(fake_server_start(&f, true), 0);
    crm_backend *b = open_backend("etcd://", f.endpoint, "", 800);
    static const struct {
        int status;
        const char *body;
        int want;
        const char *what;
    } cases[] = {
        {200, "not json", CR_ERR_METADATA_MALFORMED, "200 with text"},
        {200, "{\"header\":{},\"kvs\":[{\"key\":5}],\"count\":\"1\"}", CR_ERR_METADATA_MALFORMED,
         "key of the wrong type"},
        {200, "{\"header\":{},\"kvs\":[{\"key\":\"!!!!\",\"value\":\"YQ==\"}],\"count\":1}",
         CR_ERR_METADATA_MALFORMED, "bad base64"},
        {200, "{\"header\":{},\"kvs\":[{\"key\":\"b3RoZXI=\"}],\"count\":1}",
         CR_ERR_METADATA_MALFORMED, "another key than asked"},
        {200, "[1,2,3]", CR_ERR_METADATA_MALFORMED, "an array"},
        {200, "{\"kvs\":[]}", CR_ERR_METADATA_MALFORMED, "no header"},
        {404, "<html>not found</html>", CR_ERR_METADATA_MALFORMED, "404 html"},
        {400, "{\"error\":\"bad\",\"message\":\"etcdserver: bad\",\"code\":3}",
         CR_ETCD_OPERATION_ERROR, "an etcd error"},
        {503, "{\"error\":\"x\",\"message\":\"etcdserver: no leader\",\"code\":14}",
         CR_ERR_METADATA_UNAVAILABLE, "no leader"},
        {503, "upstream down", CR_ERR_METADATA_UNAVAILABLE, "503 text"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fake_server_http(&f, cases[i].status, cases[i].body, strlen(cases[i].body));
        expect(b, cases[i].want, 2000, cases[i].what);
    }
    /* A reply larger than the client accepts. */
    size_t big = (9u << 20);
    char *huge = malloc(big);
    memset(huge, ' ', big);
    huge[0] = '{';
    huge[big - 1] = '}';
    fake_server_http(&f, 200, huge, big);
    free(huge);
    expect(b, CR_ERR_METADATA_MALFORMED, 3000, "9 MiB reply");
    /* Truncated body, garbage instead of HTTP, and no answer at all. */
    const char *trunc = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"header\":";
    fake_server_reply(&f, trunc, strlen(trunc));
    expect(b, CR_ERR_METADATA_UNAVAILABLE, 2000, "truncated body");
    fake_server_reply(&f, "\x01\x02garbage\r\n\r\n", 13);
    expect(b, CR_ERR_METADATA_MALFORMED, 2000, "not HTTP");
    fake_server_reply(&f, NULL, 0);
    expect(b, CR_ERR_METADATA_UNAVAILABLE, 2000, "no answer (800 ms deadline)");
    crm_backend_close(b);

    /* Leases against a broken server: grant refused with a named error. */
    crm_etcd_config cfg = {.endpoints = f.endpoint, .request_timeout_ms = 800};
    crm_etcd *c;
    assert_int_equal(crm_etcd_open(&cfg, &c), 0);
    crm_etcd_lease *l;
    fake_server_http(&f, 200, "{\"header\":{},\"ID\":\"0\",\"TTL\":\"5\"}", 33);
    assert_int_equal(crm_etcd_lease_grant(c, 5, NULL, NULL, &l), CR_ERR_METADATA_MALFORMED);
    /* A granted lease whose keepalives come back malformed is lost at its expiry. */
    const char *grant = "{\"header\":{},\"ID\":\"77\",\"TTL\":\"2\"}";
    fake_server_http(&f, 200, grant, strlen(grant));
    uint64_t t0 = ct_now_ms();
    assert_int_equal(crm_etcd_lease_grant(c, 2, NULL, NULL, &l), 0);
    fake_server_http(&f, 200, "{\"result\":5}", 12);
    while (crm_etcd_lease_check(l, NULL) == 0 && ct_now_ms() - t0 < 5000)
        sleep_ms(50);
    assert_int_equal(crm_etcd_lease_check(l, NULL), CR_ERR_LEASE_LOST);
    uint64_t lost_after = ct_now_ms() - t0;
    assert_true(lost_after >= 1900 && lost_after < 3000);
    crm_etcd_lease_release(l, false);
    crm_etcd_close(c);
    fake_server_stop(&f);
}

static int never(void *arg, const crm_etcd_event *ev)
{
    return 0;
}

static void etcd_watch_malformed(void **state)
{
    fake_server f;
    assert_int_equal(fake_server_start(&f, true), 0);
    crm_etcd_config cfg = {.endpoints = f.endpoint, .request_timeout_ms = 800};
    crm_etcd *c;
    assert_int_equal(crm_etcd_open(&cfg, &c), 0);
    static const struct {
        const char *body;
        int want;
    } cases[] = {
        {"{\"result\":{\"created\":true}}\nnot json\n", CR_ERR_METADATA_MALFORMED},
        {"{\"result\":{\"events\":[]}}\n", CR_ERR_METADATA_MALFORMED}, /* not created first */
        {"{\"result\":{\"created\":true}}\n{\"result\":{\"events\":[{\"kv\":{}}]}}\n",
         CR_ERR_METADATA_MALFORMED},
        {"{\"error\":{\"grpc_code\":13,\"message\":\"internal\"}}\n", CR_ETCD_OPERATION_ERROR},
        {"{\"result\":{\"created\":true}}\n", CR_ERR_METADATA_UNAVAILABLE}, /* stream ends */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fake_server_http(&f, 200, cases[i].body, strlen(cases[i].body));
        int64_t rev = 0;
        int rc = crm_etcd_watch(c, "k", false, &rev, 3000, NULL, never, NULL);
        if (rc != cases[i].want)
            fail_msg("watch case %zu: %d (%s), want %s", i, rc, cr_last_error_message(),
                     cr_status_name(cases[i].want));
    }
    crm_etcd_close(c);
    fake_server_stop(&f);
}

static void redis_malformed(void **state)
{
    fake_server f;
    assert_int_equal(fake_server_start(&f, false), 0);
    crm_backend *b = open_backend("redis://", f.endpoint, "", 800);
    static const struct {
        const char *reply;
        int want;
        const char *what;
    } cases[] = {
        {"+OK\r\n", CR_ERR_METADATA_MALFORMED, "status instead of a bulk string"},
        {":5\r\n", CR_ERR_METADATA_MALFORMED, "integer instead of a bulk string"},
        {"*1\r\n$1\r\na\r\n", CR_ERR_METADATA_MALFORMED, "array instead of a bulk string"},
        {"-ERR boom\r\n", CR_ERR_METADATA, "an error reply"},
        {"?garbage\r\n", CR_ERR_METADATA_MALFORMED, "not RESP"},
        {"$10\r\nabc", CR_ERR_METADATA_UNAVAILABLE, "truncated bulk string"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fake_server_reply(&f, cases[i].reply, strlen(cases[i].reply));
        expect(b, cases[i].want, 2500, cases[i].what);
    }
    fake_server_reply(&f, NULL, 0);
    expect(b, CR_ERR_METADATA_UNAVAILABLE, 2500, "no answer (800 ms timeout)");
    crm_backend_close(b);
    fake_server_stop(&f);
}

int main(void)
{
    tt_require_exe(CT_ETCD_BIN);
    tt_require_exe(CT_REDIS_BIN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(etcd_round_trip),      cmocka_unit_test(redis_round_trip),
        cmocka_unit_test(etcd_published_keys),  cmocka_unit_test(redis_published_keys),
        cmocka_unit_test(redis_password),       cmocka_unit_test(etcd_malformed),
        cmocka_unit_test(etcd_watch_malformed), cmocka_unit_test(redis_malformed),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
