/*
 * etcd_codec_test.c - the etcd gateway formats: base64 vectors and strict
 * decoding, replies captured from a real etcd 3.4 decoding to the right
 * fields, every malformed variant refused with ERR_METADATA_MALFORMED and
 * the output untouched, request bodies, prefix ends and endpoint lists.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "metadata/etcd.h"
#include "metadata/etcd_codec.h"

#define HDR                                                                                        \
    "\"header\":{\"cluster_id\":\"15118495548433857066\",\"member_id\":\"1366\",\"revision\":"     \
    "\"7\",\"raft_term\":\"2\"}"

static void test_base64(void **state)
{
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const coded[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                        "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        char *enc;
        size_t n;
        assert_int_equal(crm_b64_encode(plain[i], strlen(plain[i]), &enc, &n), 0);
        assert_string_equal(enc, coded[i]);
        assert_int_equal(n, strlen(coded[i]));
        free(enc);
        uint8_t *dec;
        assert_int_equal(crm_b64_decode(coded[i], strlen(coded[i]), &dec, &n), 0);
        assert_int_equal(n, strlen(plain[i]));
        assert_memory_equal(dec, plain[i], n);
        assert_int_equal(dec[n], 0);
        free(dec);
    }
    /* every byte value round-trips */
    uint8_t all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    char *enc;
    size_t n;
    assert_int_equal(crm_b64_encode(all, sizeof(all), &enc, &n), 0);
    uint8_t *dec;
    assert_int_equal(crm_b64_decode(enc, n, &dec, &n), 0);
    assert_int_equal(n, 256);
    assert_memory_equal(dec, all, 256);
    free(dec);
    free(enc);
    static const char *const bad[] = {"Zg=",  "Zg",   "Z===", "Zh==", "Zm9=",   "Zm9v=",
                                      "Zm-v", "Zm_v", "=Zm9", "Zm=v", "Zm9v\n", "Zm 9"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t *out = (uint8_t *)0x1;
        size_t len = 77;
        if (crm_b64_decode(bad[i], strlen(bad[i]), &out, &len) != CR_ERR_METADATA_MALFORMED)
            fail_msg("'%s' accepted", bad[i]);
        assert_ptr_equal(out, (uint8_t *)0x1);
        assert_int_equal(len, 77);
    }
}

static void test_prefix_end(void **state)
{
    char *e;
    size_t n;
    assert_int_equal(crm_etcd_prefix_end("mooncake/ram/", 13, &e, &n), 0);
    assert_int_equal(n, 13);
    assert_memory_equal(e, "mooncake/ram0", 13);
    free(e);
    assert_int_equal(crm_etcd_prefix_end("a\xff\xff", 3, &e, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(e[0], 'b');
    free(e);
    assert_int_equal(crm_etcd_prefix_end("", 0, &e, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(e[0], 0);
    free(e);
}

static void test_range(void **state)
{
    const char *one =
        "{" HDR ",\"kvs\":[{\"key\":\"Zm9v\",\"create_revision\":\"2\",\"mod_revision\":"
        "\"3\",\"version\":\"1\",\"value\":\"YmFy\",\"lease\":\"4111120366019810830\"}],"
        "\"count\":\"1\"}";
    crm_etcd_range r;
    assert_int_equal(crm_etcd_decode_range(one, strlen(one), &r), 0);
    assert_int_equal(r.revision, 7);
    assert_int_equal(r.count, 1);
    assert_int_equal(r.n_kvs, 1);
    assert_string_equal(r.kvs[0].key, "foo");
    assert_int_equal(r.kvs[0].value_len, 3);
    assert_memory_equal(r.kvs[0].value, "bar", 3);
    assert_int_equal(r.kvs[0].create_revision, 2);
    assert_int_equal(r.kvs[0].mod_revision, 3);
    assert_int_equal(r.kvs[0].lease, 4111120366019810830ll);
    crm_etcd_range_clear(&r);
    /* empty: etcd omits kvs and count */
    const char *none = "{" HDR "}";
    assert_int_equal(crm_etcd_decode_range(none, strlen(none), &r), 0);
    assert_int_equal(r.n_kvs, 0);
    assert_null(r.kvs);
    assert_int_equal(r.revision, 7);
    crm_etcd_range_clear(&r);
    /* an empty value is omitted too: decoded as "" with a NUL */
    const char *novalue = "{" HDR ",\"kvs\":[{\"key\":\"Zm9v\",\"mod_revision\":5}],\"count\":1}";
    assert_int_equal(crm_etcd_decode_range(novalue, strlen(novalue), &r), 0);
    assert_int_equal(r.kvs[0].value_len, 0);
    assert_non_null(r.kvs[0].value);
    assert_int_equal(r.kvs[0].mod_revision, 5);
    crm_etcd_range_clear(&r);
}

static void test_range_malformed(void **state)
{
    static const char *const bad[] = {
        "",
        "not json",
        "[]",
        "{}", /* no header */
        "{\"header\":[]}",
        "{\"header\":{\"revision\":\"x\"}}",
        "{\"header\":{\"revision\":\"-3\"}}",
        "{\"header\":{\"revision\":\"99999999999999999999\"}}",
        "{\"header\":{\"revision\":1.5}}",
        "{\"header\":{\"cluster_id\":\"-1\"}}",
        "{\"header\":{},\"kvs\":{}}",
        "{\"header\":{},\"kvs\":[1]}",
        "{\"header\":{},\"kvs\":[{}],\"count\":\"1\"}",                /* no key */
        "{\"header\":{},\"kvs\":[{\"key\":\"Zm9\"}],\"count\":\"1\"}", /* bad base64 */
        "{\"header\":{},\"kvs\":[{\"key\":5}],\"count\":\"1\"}",
        "{\"header\":{},\"kvs\":[{\"key\":\"Zm9v\",\"value\":\"@@@@\"}],\"count\":\"1\"}",
        "{\"header\":{},\"kvs\":[{\"key\":\"Zm9v\",\"version\":\"-1\"}],\"count\":\"1\"}",
        "{\"header\":{},\"kvs\":[{\"key\":\"Zm9v\"}]}", /* count below kvs */
        "{\"header\":{},\"count\":\"-1\"}",
        "{\"header\":{},\"more\":\"yes\"}",
        "{\"header\":{},\"header\":{}}", /* duplicate key */
        "{\"header\":{}} trailing",
        "{\"error\":\"etcdserver: too many requests\",\"code\":8}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        crm_etcd_range r;
        memset(&r, 0x5a, sizeof(r));
        int rc = crm_etcd_decode_range(bad[i], strlen(bad[i]), &r);
        int want =
            strstr(bad[i], "error") != NULL ? CR_ETCD_OPERATION_ERROR : CR_ERR_METADATA_MALFORMED;
        if (rc != want)
            fail_msg("'%s' gave %d (%s)", bad[i], rc, cr_last_error_message());
        for (size_t k = 0; k < sizeof(r); k++)
            assert_int_equal(((uint8_t *)&r)[k], 0x5a);
        assert_non_null(strstr(cr_last_error_message(), "etcd"));
    }
}

static void test_put_delete_grant(void **state)
{
    int64_t rev = 0, del = 0, id = 0, ttl = 0;
    const char *put = "{" HDR "}";
    assert_int_equal(crm_etcd_decode_put(put, strlen(put), &rev), 0);
    assert_int_equal(rev, 7);
    const char *d = "{" HDR ",\"deleted\":\"1\"}";
    assert_int_equal(crm_etcd_decode_delete(d, strlen(d), &del, &rev), 0);
    assert_int_equal(del, 1);
    const char *d0 = "{" HDR "}";
    assert_int_equal(crm_etcd_decode_delete(d0, strlen(d0), &del, &rev), 0);
    assert_int_equal(del, 0);
    const char *g = "{" HDR ",\"ID\":\"4111120366019810824\",\"TTL\":\"5\"}";
    assert_int_equal(crm_etcd_decode_lease_grant(g, strlen(g), &id, &ttl), 0);
    assert_int_equal(id, 4111120366019810824ll);
    assert_int_equal(ttl, 5);
    const char *g0 = "{" HDR ",\"ID\":\"1\"}";
    assert_int_equal(crm_etcd_decode_lease_grant(g0, strlen(g0), &id, &ttl),
                     CR_ERR_METADATA_MALFORMED);
    const char *gerr = "{" HDR ",\"ID\":\"1\",\"TTL\":\"5\",\"error\":\"lessor: no space\"}";
    assert_int_equal(crm_etcd_decode_lease_grant(gerr, strlen(gerr), &id, &ttl),
                     CR_ETCD_OPERATION_ERROR);
    assert_non_null(strstr(cr_last_error_message(), "no space"));
    const char *dneg = "{" HDR ",\"deleted\":\"-1\"}";
    assert_int_equal(crm_etcd_decode_delete(dneg, strlen(dneg), &del, &rev),
                     CR_ERR_METADATA_MALFORMED);
}

static void test_keepalive(void **state)
{
    int64_t id = 0, ttl = -1;
    const char *ok = "{\"result\":{" HDR ",\"ID\":\"42\",\"TTL\":\"5\"}}\n";
    assert_int_equal(crm_etcd_decode_keepalive(ok, strlen(ok), &id, &ttl), 0);
    assert_int_equal(id, 42);
    assert_int_equal(ttl, 5);
    const char *gone = "{\"result\":{" HDR ",\"ID\":\"1\"}}";
    assert_int_equal(crm_etcd_decode_keepalive(gone, strlen(gone), &id, &ttl), 0);
    assert_int_equal(ttl, 0);
    const char *err = "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":\"no leader\"}}";
    assert_int_equal(crm_etcd_decode_keepalive(err, strlen(err), &id, &ttl),
                     CR_ETCD_OPERATION_ERROR);
    assert_non_null(strstr(cr_last_error_message(), "no leader"));
    const char *noresult = "{" HDR "}";
    assert_int_equal(crm_etcd_decode_keepalive(noresult, strlen(noresult), &id, &ttl),
                     CR_ERR_METADATA_MALFORMED);
}

static void test_error_body(void **state)
{
    int code = 0;
    char msg[64];
    const char *e = "{\"error\":\"etcdserver: requested lease not found\",\"message\":\"etcdserver:"
                    " requested lease not found\",\"code\":5}";
    assert_int_equal(crm_etcd_decode_error(e, strlen(e), &code, msg, sizeof(msg)), 0);
    assert_int_equal(code, 5);
    assert_string_equal(msg, "etcdserver: requested lease not found");
    const char *s = "{\"error\":{\"grpc_code\":14,\"message\":\"etcdserver: no leader\"}}";
    assert_int_equal(crm_etcd_decode_error(s, strlen(s), &code, msg, sizeof(msg)), 0);
    assert_int_equal(code, 14);
    const char *bad[] = {"<html>404</html>", "{}", "{\"error\":1}",
                         "{\"message\":\"x\",\"code\":\"5\"}"};
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(crm_etcd_decode_error(bad[i], strlen(bad[i]), &code, msg, sizeof(msg)),
                         CR_ERR_METADATA_MALFORMED);
}

static void test_txn(void **state)
{
    const char *won = "{" HDR ",\"succeeded\":true,\"responses\":[{\"response_put\":{\"header\":"
                      "{\"revision\":\"3\"}}}]}";
    crm_etcd_txn_result t;
    assert_int_equal(crm_etcd_decode_txn(won, strlen(won), &t), 0);
    assert_true(t.succeeded);
    assert_int_equal(t.n_results, 1);
    assert_int_equal(t.results[0].type, CRM_ETCD_OP_PUT);
    crm_etcd_txn_result_clear(&t);
    const char *lost =
        "{" HDR ",\"responses\":[{\"response_range\":{\"header\":{\"revision\":\"3\"},"
        "\"kvs\":[{\"key\":\"bGVhZA==\",\"create_revision\":\"3\",\"mod_revision\":"
        "\"3\",\"version\":\"1\",\"value\":\"YQ==\",\"lease\":\"9\"}],\"count\":"
        "\"1\"}},{\"response_delete_range\":{\"deleted\":\"2\"}}]}";
    assert_int_equal(crm_etcd_decode_txn(lost, strlen(lost), &t), 0);
    assert_false(t.succeeded);
    assert_int_equal(t.n_results, 2);
    assert_int_equal(t.results[0].range.n_kvs, 1);
    assert_string_equal(t.results[0].range.kvs[0].key, "lead");
    assert_int_equal(t.results[0].range.kvs[0].lease, 9);
    assert_int_equal(t.results[1].type, CRM_ETCD_OP_DELETE);
    assert_int_equal(t.results[1].deleted, 2);
    crm_etcd_txn_result_clear(&t);
    static const char *const bad[] = {
        "{" HDR ",\"succeeded\":1}",
        "{" HDR ",\"responses\":{}}",
        "{" HDR ",\"responses\":[{}]}",
        "{" HDR ",\"responses\":[{\"response_txn\":{}}]}",
        "{" HDR ",\"responses\":[{\"response_put\":{},\"response_range\":{}}]}",
        "{" HDR ",\"responses\":[{\"response_range\":[]}]}",
        "{" HDR ",\"responses\":[{\"response_put\":{}},{\"response_range\":{\"kvs\":[{}]}}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&t, 0x5a, sizeof(t));
        if (crm_etcd_decode_txn(bad[i], strlen(bad[i]), &t) != CR_ERR_METADATA_MALFORMED)
            fail_msg("'%s' accepted", bad[i]);
        assert_int_equal(((uint8_t *)&t)[0], 0x5a);
    }
}

static void test_watch(void **state)
{
    crm_etcd_watch_msg m;
    const char *created = "{\"result\":{" HDR ",\"created\":true}}";
    assert_int_equal(crm_etcd_decode_watch(created, strlen(created), &m), 0);
    assert_true(m.created);
    assert_int_equal(m.revision, 7);
    assert_int_equal(m.n_events, 0);
    crm_etcd_watch_msg_clear(&m);
    const char *events =
        "{\"result\":{" HDR ",\"events\":[{\"kv\":{\"key\":\"bGVhZA==\",\"create_revision\":\"3\","
        "\"mod_revision\":\"3\",\"version\":\"1\",\"value\":\"YQ==\"}},{\"type\":\"DELETE\",\"kv\":"
        "{\"key\":\"bGVhZA==\",\"mod_revision\":\"5\"}}]}}";
    assert_int_equal(crm_etcd_decode_watch(events, strlen(events), &m), 0);
    assert_int_equal(m.n_events, 2);
    assert_int_equal(m.events[0].type, CRM_ETCD_EVENT_PUT);
    assert_memory_equal(m.events[0].kv.value, "a", 1);
    assert_int_equal(m.events[1].type, CRM_ETCD_EVENT_DELETE);
    assert_int_equal(m.events[1].kv.mod_revision, 5);
    crm_etcd_watch_msg_clear(&m);
    const char *compacted = "{\"result\":{\"header\":{\"raft_term\":\"2\"},\"canceled\":true,"
                            "\"compact_revision\":\"5\"}}";
    assert_int_equal(crm_etcd_decode_watch(compacted, strlen(compacted), &m), 0);
    assert_true(m.canceled);
    assert_int_equal(m.compact_revision, 5);
    crm_etcd_watch_msg_clear(&m);
    static const char *const bad[] = {
        "{}",
        "{\"result\":[]}",
        "{\"result\":{\"events\":[{\"type\":\"PATCH\",\"kv\":{\"key\":\"YQ==\",\"mod_revision\":1}}"
        "]}}",
        "{\"result\":{\"events\":[{\"kv\":{\"key\":\"YQ==\"}}]}}", /* no mod_revision */
        "{\"result\":{\"events\":[{}]}}",
        "{\"result\":{\"events\":[{\"kv\":{\"key\":\"YQ==\",\"mod_revision\":4}},"
        "{\"kv\":{\"key\":\"YQ==\",\"mod_revision\":3}}]}}", /* out of order */
        "{\"result\":{\"cancel_reason\":5}}",
        "{\"result\":{\"created\":\"true\"}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&m, 0x5a, sizeof(m));
        if (crm_etcd_decode_watch(bad[i], strlen(bad[i]), &m) != CR_ERR_METADATA_MALFORMED)
            fail_msg("'%s' accepted", bad[i]);
        assert_int_equal(((uint8_t *)&m)[0], 0x5a);
    }
    const char *err = "{\"error\":{\"grpc_code\":1,\"message\":\"context canceled\"}}";
    assert_int_equal(crm_etcd_decode_watch(err, strlen(err), &m), CR_ETCD_OPERATION_ERROR);
}

static void test_requests(void **state)
{
    char *s;
    size_t n;
    assert_int_equal(crm_etcd_json_dump(crm_etcd_json_range("foo", true, 10), &s, &n), 0);
    assert_non_null(strstr(s, "\"key\":\"Zm9v\""));
    assert_non_null(strstr(s, "\"range_end\":\"Zm9w\""));
    assert_non_null(strstr(s, "\"limit\":\"10\""));
    free(s);
    assert_int_equal(crm_etcd_json_dump(crm_etcd_json_put("foo", "bar", 3, 42), &s, &n), 0);
    assert_non_null(strstr(s, "\"value\":\"YmFy\""));
    assert_non_null(strstr(s, "\"lease\":\"42\""));
    free(s);
    crm_etcd_compare cmp = {.key = "k", .target = CRM_ETCD_CMP_CREATE, .result = CRM_ETCD_EQUAL};
    crm_etcd_op put = {.type = CRM_ETCD_OP_PUT, .key = "k", .value = "v", .value_len = 1};
    crm_etcd_op get = {.type = CRM_ETCD_OP_RANGE, .key = "k"};
    assert_int_equal(crm_etcd_json_dump(crm_etcd_json_txn(&cmp, 1, &put, 1, &get, 1), &s, &n), 0);
    assert_non_null(strstr(s, "\"target\":\"CREATE\""));
    assert_non_null(strstr(s, "\"create_revision\":\"0\""));
    assert_non_null(strstr(s, "\"request_put\""));
    assert_non_null(strstr(s, "\"request_range\""));
    free(s);
    assert_int_equal(crm_etcd_json_dump(crm_etcd_json_watch("k", false, 12), &s, &n), 0);
    assert_non_null(strstr(s, "\"start_revision\":\"12\""));
    free(s);
    assert_int_equal(crm_etcd_json_dump(NULL, &s, &n), CR_ERR_NO_MEMORY);
}

static void test_endpoints(void **state)
{
    crm_etcd_endpoints e;
    assert_int_equal(crm_etcd_parse_endpoints("127.0.0.1:2379", &e), 0);
    assert_int_equal(e.n, 1);
    assert_string_equal(e.host[0], "127.0.0.1");
    assert_int_equal(e.port[0], 2379);
    assert_int_equal(
        crm_etcd_parse_endpoints(" http://10.0.0.1:2379 ; etcd-b:2380,[::1]:2381,", &e), 0);
    assert_int_equal(e.n, 3);
    assert_string_equal(e.host[0], "10.0.0.1");
    assert_string_equal(e.host[1], "etcd-b");
    assert_string_equal(e.host[2], "::1");
    assert_int_equal(e.port[2], 2381);
    static const char *const bad[] = {
        "",
        ",",
        "127.0.0.1",
        "127.0.0.1:0",
        "127.0.0.1:99999",
        "::1:2379",
        "h:p",
        "http://",
        "https://h:1",
        "h:1/path",
        "user@h:1",
        "P2PHANDSHAKE",
        "h :1",
        "a:1,a:2,a:3,a:4,a:5,a:6,a:7,a:8,a:9,a:10,a:11,a:12,a:13,a:14,a:15,a:16,a:17",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&e, 0x5a, sizeof(e));
        if (crm_etcd_parse_endpoints(bad[i], &e) != CR_ERR_INVALID_CONFIG)
            fail_msg("'%s' accepted", bad[i]);
        assert_int_equal(((uint8_t *)&e)[0], 0x5a);
    }
    assert_int_equal(crm_etcd_parse_endpoints(NULL, &e), CR_ERR_INVALID_CONFIG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_prefix_end),
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_range_malformed),
        cmocka_unit_test(test_put_delete_grant),
        cmocka_unit_test(test_keepalive),
        cmocka_unit_test(test_error_body),
        cmocka_unit_test(test_txn),
        cmocka_unit_test(test_watch),
        cmocka_unit_test(test_requests),
        cmocka_unit_test(test_endpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
