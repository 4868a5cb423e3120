/*
 * store_badinput_test.c - the store API refusing bad input cleanly, and a
 * dead or hung master producing a clear error within the deadline.
 *
 *   parse_size          good and bad human-readable sizes ("50%" refused).
 *   setup_refusals      bad configuration; a closed port (CR_RPC_FAIL at
 *                       once); a port that accepts but never answers
 *                       (CR_RPC_TIMEOUT within rpc_timeout_ms).
 *   bad_calls           unregistered pointers to put_from / get_into, ranges
 *                       running off a registered region, a destination
 *                       smaller than the value (CR_BUFFER_OVERFLOW), empty,
 *                       NULL and over-long keys (CR_INVALID_KEY), per-key
 *                       results in batches with bad keys, calls after close.
 *                       Nothing crashes and no half-written object appears.
 *   master_dies         operations after a SIGKILLed master fail within the
 *                       rpc deadline; a SIGSTOPped (hung) master makes them
 *                       time out with CR_RPC_TIMEOUT; close does not hang.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "crescent/store.h"
#include "store_harness.h"
#include "store_pattern.h"

#define RPC_TIMEOUT_MS 1000

static int teardown(void **state)
{
    (void)state;
    sh_kill_all();
    return 0;
}

static cr_store *make_store(const char *master_addr, uint64_t segment)
{
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = master_addr;
    cfg.global_segment_size = segment;
    cfg.local_buffer_size = 1ull << 20;
    cfg.rpc_timeout_ms = RPC_TIMEOUT_MS;
    cfg.transfer_timeout_ms = 3000;
    cr_store *s = NULL;
    int rc = cr_store_setup(&cfg, &s);
    if (rc != 0)
        fprintf(stderr, "setup: %d %s\n", rc, cr_last_error_message());
    assert_int_equal(rc, 0);
    return s;
}

/* ------------------------------------------------------------------------ */

static void parse_size(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t want;
    } good[] = {
        {"0", 0},
        {"1048576", 1048576},
        {"16 MB", 16ull << 20},
        {"16MiB", 16ull << 20},
        {"16mib", 16ull << 20},
        {"4gb", 4ull << 30},
        {"4 GiB", 4ull << 30},
        {"512k", 512ull << 10},
        {"512 KB", 512ull << 10},
        {"3200 MB", 3200ull << 20},
        {"1t", 1ull << 40},
        {"100b", 100},
        {" 7 ", 7},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        uint64_t v = 12345;
        int rc = cr_parse_size(good[i].text, &v);
        if (rc != 0 || v != good[i].want)
            fail_msg("cr_parse_size('%s') = %d, %llu; want %llu", good[i].text, rc,
                     (unsigned long long)v, (unsigned long long)good[i].want);
    }
    static const char *const bad[] = {"50%",
                                      "-1",
                                      "1.5x",
                                      "",
                                      "   ",
                                      "abc",
                                      "16 XB",
                                      "1.5G",
                                      "0x10",
                                      "4 g b",
                                      "16MBs",
                                      "k",
                                      "99999999999999999999",
                                      "17179869184 GB"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 12345;
        int rc = cr_parse_size(bad[i], &v);
        if (rc != CR_INVALID_PARAMS || v != 12345)
            fail_msg("cr_parse_size('%s') = %d (value %llu); want CR_INVALID_PARAMS, untouched",
                     bad[i], rc, (unsigned long long)v);
        /* The message names the text. */
        if (bad[i][0] != '\0' && bad[i][0] != ' ' &&
            strstr(cr_last_error_message(), bad[i]) == NULL)
            fail_msg("message for '%s' does not name it: %s", bad[i], cr_last_error_message());
    }
    uint64_t v;
    assert_int_equal(cr_parse_size(NULL, &v), CR_INVALID_PARAMS);
    assert_int_equal(cr_parse_size("1", NULL), CR_INVALID_PARAMS);
}

/* ------------------------------------------------------------------------ */

static void setup_refusals(void **state)
{
    (void)state;
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.rpc_timeout_ms = RPC_TIMEOUT_MS;
    cr_store *s = (cr_store *)0x1;
    assert_int_equal(cr_store_setup(NULL, &s), CR_INVALID_PARAMS);
    assert_int_equal(cr_store_setup(&cfg, NULL), CR_INVALID_PARAMS);
    cfg.local_buffer_size = 100;
    assert_int_equal(cr_store_setup(&cfg, &s), CR_INVALID_PARAMS);
    assert_ptr_equal(s, (cr_store *)0x1);
    cfg.local_buffer_size = 1ull << 20;
    cfg.global_segment_size = 1ull << 20;

    /* Nothing listens: CR_RPC_FAIL, quickly. */
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)sh_closed_port());
    cfg.master_address = addr;
    uint64_t t0 = sh_now_ms();
    int rc = cr_store_setup(&cfg, &s);
    uint64_t took = sh_now_ms() - t0;
    fprintf(stderr, "setup against a closed port: %d after %llu ms: %s\n", rc,
            (unsigned long long)took, cr_last_error_message());
    assert_int_equal(rc, CR_RPC_FAIL);
    assert_true(took < RPC_TIMEOUT_MS + 500);
    assert_non_null(strstr(cr_last_error_message(), addr));

    /* Something accepts the connection but never answers: CR_RPC_TIMEOUT. */
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(lfd, 16), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
    t0 = sh_now_ms();
    rc = cr_store_setup(&cfg, &s);
    took = sh_now_ms() - t0;
    fprintf(stderr, "setup against a silent port: %d after %llu ms: %s\n", rc,
            (unsigned long long)took, cr_last_error_message());
    assert_int_equal(rc, CR_RPC_TIMEOUT);
    assert_true(took >= RPC_TIMEOUT_MS - 50 && took < 2 * RPC_TIMEOUT_MS + 500);
    close(lfd);

    /* Not host:port. */
    cfg.master_address = "no-port-here";
    rc = cr_store_setup(&cfg, &s);
    fprintf(stderr, "setup with master_address 'no-port-here': %d %s\n", rc,
            cr_last_error_message());
    assert_true(rc < 0);
}

/* ------------------------------------------------------------------------ */

static void bad_calls(void **state)
{
    (void)state;
    sh_master m;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    cr_store *s = make_store(m.addr, 16ull << 20);
    const size_t region_len = 1 << 20;
    uint8_t *region = NULL;
    assert_int_equal(cr_alloc_shared(region_len, (void **)&region), 0);
    assert_int_equal(cr_store_register_buffer(s, region, region_len), 0);
    uint8_t *heap = malloc(region_len);
    sp_fill(heap, 65536, 1);

    /* Zero-copy calls on memory that is not registered: an error, no crash,
     * and no object left behind (the put is revoked). */
    int rc = cr_store_put_from(s, "unreg", heap, 65536, NULL);
    fprintf(stderr, "put_from unregistered: %d %s\n", rc, cr_last_error_message());
    assert_true(rc < 0);
    assert_int_equal(cr_store_exist(s, "unreg"), 0);
    /* A range that starts inside the region and runs past its end. */
    rc = cr_store_put_from(s, "overrun", region + region_len - 100, 4096, NULL);
    assert_true(rc < 0);
    assert_int_equal(cr_store_exist(s, "overrun"), 0);
    /* A pointer anywhere inside a registered region is fine. */
    sp_fill(region + 12345, 65536, 2);
    assert_int_equal(cr_store_put_from(s, "inside", region + 12345, 65536, NULL), 0);
    int64_t got = cr_store_get_into(s, "inside", heap, 65536);
    fprintf(stderr, "get_into unregistered: %lld %s\n", (long long)got, cr_last_error_message());
    assert_true(got < 0);
    got = cr_store_get_into(s, "inside", region + region_len - 100, 65536);
    assert_true(got < 0);
    memset(region, 0, region_len);
    assert_int_equal(cr_store_get_into(s, "inside", region + 7, 65536), 65536);
    assert_int_equal(sp_check(region + 7, 65536, 2), -1);

    /* Destination smaller than the value. */
    assert_int_equal(cr_store_get_into(s, "inside", region, 65535), CR_BUFFER_OVERFLOW);
    assert_non_null(strstr(cr_last_error_message(), "65536"));
    void *bufs[2] = {region, region + 100000};
    size_t sizes[2] = {30000, 30000};
    assert_int_equal(cr_store_get_into_multi(s, "inside", bufs, sizes, 2), CR_BUFFER_OVERFLOW);
    const char *one[1] = {"inside"};
    void *dst[1] = {region};
    size_t caps[1] = {100};
    int64_t r64[1] = {0};
    assert_int_equal(cr_store_batch_get_into(s, one, dst, caps, 1, r64), 0);
    assert_int_equal(r64[0], CR_BUFFER_OVERFLOW);

    /* Keys: empty, NULL, one byte over the limit; exactly the limit works. */
    char *longkey = malloc(CR_STORE_MAX_KEY + 2);
    memset(longkey, 'k', CR_STORE_MAX_KEY + 1);
    longkey[CR_STORE_MAX_KEY + 1] = '\0';
    void *v = NULL;
    assert_int_equal(cr_store_put(s, "", heap, 10, NULL), CR_INVALID_KEY);
    assert_int_equal(cr_store_put(s, NULL, heap, 10, NULL), CR_INVALID_KEY);
    assert_int_equal(cr_store_put(s, longkey, heap, 10, NULL), CR_INVALID_KEY);
    assert_int_equal(cr_store_put_from(s, "", region, 10, NULL), CR_INVALID_KEY);
    assert_int_equal(cr_store_get(s, "", &v), CR_INVALID_KEY);
    assert_int_equal(cr_store_get(s, longkey, &v), CR_INVALID_KEY);
    assert_int_equal(cr_store_get_into(s, "", region, 10), CR_INVALID_KEY);
    assert_int_equal(cr_store_exist(s, ""), CR_INVALID_KEY);
    assert_int_equal(cr_store_exist(s, longkey), CR_INVALID_KEY);
    assert_int_equal(cr_store_get_size(s, ""), CR_INVALID_KEY);
    assert_int_equal(cr_store_remove(s, "", false), CR_INVALID_KEY);
    assert_int_equal(cr_store_remove(s, longkey, true), CR_INVALID_KEY);
    assert_null(v);
    longkey[CR_STORE_MAX_KEY] = '\0'; /* exactly 4096 bytes */
    assert_int_equal(cr_store_put(s, longkey, heap, 4096, NULL), 0);
    assert_int_equal(cr_store_get(s, longkey, &v), 4096);
    assert_memory_equal(v, heap, 4096);
    free(v);
    v = NULL;
    assert_int_equal(cr_store_exist(s, longkey), 1);
    assert_int_equal(cr_store_remove(s, longkey, true), 0);

    /* Batches: the bad key fails alone. */
    const char *keys[3] = {"b-good-0", "", "b-good-2"};
    void *pbufs[3] = {region, region + 4096, region + 8192};
    size_t psizes[3] = {4096, 4096, 4096};
    int res[3] = {1, 1, 1};
    assert_int_equal(cr_store_batch_put_from(s, keys, pbufs, psizes, 3, NULL, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], CR_INVALID_KEY);
    assert_int_equal(res[2], 0);
    int64_t gres[3] = {1, 1, 1};
    assert_int_equal(cr_store_batch_get_into(s, keys, pbufs, psizes, 3, gres), 0);
    assert_int_equal(gres[0], 4096);
    assert_int_equal(gres[1], CR_INVALID_KEY);
    assert_int_equal(gres[2], 4096);
    assert_int_equal(cr_store_batch_exist(s, keys, 3, res), 0);
    assert_int_equal(res[0], 1);
    assert_int_equal(res[1], CR_INVALID_KEY);
    assert_int_equal(res[2], 1);
    /* A batch put from unregistered memory: per-key errors, nothing left. */
    const char *ukeys[2] = {"u-0", "u-1"};
    void *ubufs[2] = {heap, heap + 4096};
    assert_int_equal(cr_store_batch_put_from(s, ukeys, ubufs, psizes, 2, NULL, res), 0);
    fprintf(stderr, "batch_put_from unregistered: %d %d\n", res[0], res[1]);
    assert_true(res[0] < 0 && res[1] < 0);
    assert_int_equal(cr_store_batch_exist(s, ukeys, 2, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], 0);

    /* Other argument errors. */
    assert_int_equal(cr_store_get(s, "inside", NULL), CR_INVALID_PARAMS);
    assert_true(cr_store_register_buffer(s, NULL, 10) < 0);
    assert_true(cr_store_register_buffer(s, heap, 0) < 0);
    assert_true(cr_store_register_buffer(s, region + 10, 100) < 0); /* overlaps */
    assert_true(cr_store_unregister_buffer(s, heap) < 0);
    assert_int_equal(cr_store_get(s, "missing", &v), CR_OBJECT_NOT_FOUND);
    assert_int_equal(cr_store_get_size(s, "missing"), CR_OBJECT_NOT_FOUND);
    assert_int_equal(cr_store_put(s, "empty", NULL, 0, NULL), 0);
    assert_int_equal(cr_store_get(s, "empty", &v), 0);
    assert_non_null(v);
    free(v);
    v = NULL;

    /* After close every call fails; close is idempotent. */
    assert_int_equal(cr_store_unregister_buffer(s, region), 0);
    assert_int_equal(cr_store_close(s), 0);
    assert_int_equal(cr_store_close(s), 0);
    assert_int_equal(cr_store_put(s, "late", heap, 10, NULL), CR_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(cr_store_get(s, "inside", &v), CR_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(cr_store_exist(s, "inside"), CR_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(cr_store_health(s), CR_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(cr_store_register_buffer(s, region, 10), CR_UNAVAILABLE_IN_CURRENT_STATUS);
    cr_store_destroy(s);
    cr_store_destroy(NULL);
    assert_int_equal(cr_free_shared(region), 0);
    free(heap);
    free(longkey);
    assert_int_equal(sh_master_stop(&m), 0);
}

/* ------------------------------------------------------------------------ */

/* SIGSTOP takes effect asynchronously: wait until it has. */
static void stop_process(pid_t pid)
{
    if (tt_stop_process(pid) != 0)
        fail_msg("pid %d did not stop", (int)pid);
}

/* Run op and check it failed within limit_ms. */
#define EXPECT_FAST_FAILURE(what, expr, limit_ms)                                                  \
    do {                                                                                           \
        uint64_t t0_ = sh_now_ms();                                                                \
        int64_t rc_ = (int64_t)(expr);                                                             \
        uint64_t took_ = sh_now_ms() - t0_;                                                        \
        fprintf(stderr, "%s: %lld (%s) after %llu ms\n", what, (long long)rc_,                     \
                cr_status_name((int)rc_), (unsigned long long)took_);                              \
        assert_true(rc_ < 0);                                                                      \
        assert_true(took_ < (limit_ms));                                                           \
    } while (0)

static void master_dies(void **state)
{
    (void)state;
    sh_master m;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    cr_store *s = make_store(m.addr, 8ull << 20);
    uint8_t *buf = malloc(1 << 20);
    sp_fill(buf, 1 << 20, 3);
    assert_int_equal(cr_store_put(s, "k", buf, 1 << 20, NULL), 0);
    assert_int_equal(cr_store_health(s), 0);

    /* Hung master (SIGSTOP): calls time out with CR_RPC_TIMEOUT. */
    stop_process(m.cm.p.pid);
    void *v = NULL;
    const char *keys[2] = {"k", "k2"};
    int res[2];
    int64_t gres[2];
    void *bufs[2] = {buf, buf};
    size_t caps[2] = {10, 10};
    EXPECT_FAST_FAILURE("exist, master stopped", cr_store_exist(s, "k"), 2 * RPC_TIMEOUT_MS);
    assert_int_equal(cr_store_exist(s, "k"), CR_RPC_TIMEOUT);
    EXPECT_FAST_FAILURE("get, master stopped", cr_store_get(s, "k", &v), 2 * RPC_TIMEOUT_MS);
    EXPECT_FAST_FAILURE("put, master stopped", cr_store_put(s, "k2", buf, 4096, NULL),
                        2 * RPC_TIMEOUT_MS);
    EXPECT_FAST_FAILURE("batch_exist, master stopped", cr_store_batch_exist(s, keys, 2, res),
                        2 * RPC_TIMEOUT_MS);
    EXPECT_FAST_FAILURE("health, master stopped", cr_store_health(s), 2 * RPC_TIMEOUT_MS);
    kill(m.cm.p.pid, SIGCONT);
    /* It answers again (late replies to the timed-out calls are dropped). */
    uint64_t t0 = sh_now_ms();
    int rc;
    while ((rc = cr_store_exist(s, "k")) != 1 && sh_now_ms() - t0 < 5000)
        sh_sleep_ms(50);
    assert_int_equal(rc, 1);
    assert_int_equal(cr_store_get(s, "k", &v), 1 << 20);
    assert_memory_equal(v, buf, 1 << 20);
    free(v);
    v = NULL;

    /* Dead master (SIGKILL): every call fails fast, nothing hangs. */
    sh_master_kill(&m);
    EXPECT_FAST_FAILURE("get, master dead", cr_store_get(s, "k", &v), 2 * RPC_TIMEOUT_MS);
    EXPECT_FAST_FAILURE("put, master dead", cr_store_put(s, "k3", buf, 4096, NULL),
                        2 * RPC_TIMEOUT_MS);
    EXPECT_FAST_FAILURE("batch_put_from, master dead",
                        cr_store_batch_put_from(s, keys, bufs, caps, 2, NULL, res) < 0
                            ? -1
                            : (res[0] < 0 && res[1] < 0 ? res[0] : 0),
                        2 * RPC_TIMEOUT_MS);
    EXPECT_FAST_FAILURE("batch_get_into, master dead",
                        cr_store_batch_get_into(s, keys, bufs, caps, 2, gres) < 0
                            ? -1
                            : (gres[0] < 0 && gres[1] < 0 ? gres[0] : 0),
                        2 * RPC_TIMEOUT_MS);
    EXPECT_FAST_FAILURE("remove, master dead", cr_store_remove(s, "k", true), 2 * RPC_TIMEOUT_MS);
    EXPECT_FAST_FAILURE("remove_all, master dead", cr_store_remove_all(s, true),
                        2 * RPC_TIMEOUT_MS);
    EXPECT_FAST_FAILURE("health, master dead", cr_store_health(s), 2 * RPC_TIMEOUT_MS);
    assert_null(v);
    t0 = sh_now_ms();
    cr_store_destroy(s);
    fprintf(stderr, "destroy with the master dead: %llu ms\n",
            (unsigned long long)(sh_now_ms() - t0));
    assert_true(sh_now_ms() - t0 < 2 * RPC_TIMEOUT_MS + 1000);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_size),
        cmocka_unit_test_teardown(setup_refusals, teardown),
        cmocka_unit_test_teardown(bad_calls, teardown),
        cmocka_unit_test_teardown(master_dies, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
