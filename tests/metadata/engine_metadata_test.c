/*
 * engine_metadata_test.c - transfer engines in separate processes finding
 * each other through etcd and through redis (real servers started here)
 * and moving verified bytes; a killed (kill -9) engine's descriptor
 * expiring within the TTL; a restarted one republishing (and being
 * reachable again); a cleanly stopped one removing its keys at once; and,
 * for etcd, an engine whose keys etcd lost (wiped and restarted) putting
 * them back. The peer is tests/engine/peer.c (CRESCENT_PEER_BIN), driven
 * through tests/engine/harness.c. Skips (77) without the servers.
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

#include "base/error.h"
#include "crescent/engine.h"
#include "harness.h"
#include "metadata/backend.h"
#include "testing.h"

#define TTL_S   2
#define LEN     (1u << 20)
#define PEER    "127.0.0.1"
#define RAM_KEY "mooncake/ram/" PEER
#define RPC_KEY "mooncake/rpc_meta/" PEER

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

typedef struct fixture {
    char conn[128];
    test_peer peer;
    bool peer_up;
    cr_engine *engine;
    uint8_t *buf;
    crm_backend *probe; /* a separate client looking at the server */
} fixture;

/* port 0: kernel-chosen. Engines that opened a segment keep its first
 * address, so a restarted peer comes back on the same port. */
static void start_peer(fixture *f, unsigned port)
{
    char port_text[16];
    snprintf(port_text, sizeof(port_text), "%u", port);
    const char *args[] = {"--metadata", f->conn,  "--host",  PEER, "--protocol",
                          "tcp",        "--port", port_text, NULL};
    assert_int_equal(peer_start(&f->peer, args), 0);
    f->peer_up = true;
    assert_string_equal(f->peer.name, PEER);
}

static bool key_present(fixture *f, const char *key)
{
    void *v = NULL;
    size_t n = 0;
    int rc = f->probe->ops->get(f->probe, key, &v, &n);
    free(v);
    if (rc != 0 && rc != CR_ERR_METADATA_NOT_FOUND)
        fail_msg("probing %s: %s", key, cr_last_error_message());
    return rc == 0;
}

/* Read `len` bytes of the peer's buffer at `remote` and check the pattern. */
static void read_verified(fixture *f, uint64_t remote)
{
    cr_segment_handle seg;
    int rc = cr_engine_open_segment(f->engine, PEER, &seg);
    if (rc != 0)
        fail_msg("open_segment: %s", cr_last_error_message());
    memset(f->buf, 0, LEN);
    rc = cr_engine_transfer_sync(f->engine, CR_OP_READ, f->buf, seg, remote, LEN, 0);
    if (rc != 0)
        fail_msg("read: %s", cr_last_error_message());
    for (size_t i = 0; i < LEN; i++)
        if (f->buf[i] != test_pattern(i, remote))
            fail_msg("byte %zu wrong", i);
    /* and a write lands in the peer */
    for (size_t i = 0; i < LEN; i++)
        f->buf[i] = test_pattern(i, 9);
    rc = cr_engine_transfer_sync(f->engine, CR_OP_WRITE, f->buf, seg, remote, LEN, 0);
    if (rc != 0)
        fail_msg("write: %s", cr_last_error_message());
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "check %llu %u 9", (unsigned long long)remote, LEN);
    assert_string_equal(peer_cmd(&f->peer, "%s", cmd), "OK");
}

static fixture current;

/* After a failed test: stop what it left running. */
static int teardown(void **state)
{
    if (current.peer_up)
        peer_kill(&current.peer);
    current.peer_up = false;
    return 0;
}

static void run(const char *scheme, const ct_server *srv, bool wipe_etcd)
{
    fixture *fp = &current;
    memset(fp, 0, sizeof(*fp));
#define f (*fp)
    snprintf(f.conn, sizeof(f.conn), "%s%s?ttl=%d", scheme, srv->endpoint, TTL_S);
    assert_int_equal(crm_backend_open(f.conn, 2000, &f.probe), 0);
    start_peer(&f, 0);
    uint64_t remote = peer_reg(&f.peer, "cpu:0", LEN, 0);
    assert_true(remote != 0);
    assert_true(key_present(&f, RAM_KEY));
    void *v = NULL;
    size_t n = 0;
    assert_int_equal(f.probe->ops->get(f.probe, RPC_KEY, &v, &n), 0);
    char rpc[64];
    snprintf(rpc, sizeof(rpc), "%.*s", (int)n, (char *)v);
    free(v);
    const char *colon = strrchr(rpc, ':');
    assert_non_null(colon);
    unsigned port = (unsigned)atoi(colon + 1);
    assert_true(port > 0);

    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.metadata = f.conn;
    cfg.local_hostname = "localhost";
    cfg.protocol = "tcp";
    if (cr_engine_create(&cfg, &f.engine) != 0)
        fail_msg("engine with %s: %s", f.conn, cr_last_error_message());
    f.buf = malloc(LEN);
    assert_int_equal(cr_engine_register(f.engine, f.buf, LEN, "cpu:0", true), 0);
    assert_true(key_present(&f, "mooncake/ram/localhost"));
    read_verified(&f, remote);

    /* kill -9: the descriptor expires within the TTL. */
    peer_kill(&f.peer);
    f.peer_up = false;
    uint64_t t0 = ct_now_ms();
    while (key_present(&f, RAM_KEY) || key_present(&f, RPC_KEY)) {
        if (ct_now_ms() - t0 > (TTL_S + 3) * 1000)
            fail_msg("%s: descriptor of the killed engine still there after %d s", scheme,
                     TTL_S + 3);
        sleep_ms(50);
    }
    uint64_t expired = ct_now_ms() - t0;
    printf("%s: killed engine's descriptor gone %llu ms after kill -9 (TTL %d s)\n", scheme,
           (unsigned long long)expired, TTL_S);
    assert_true(expired <= (uint64_t)TTL_S * 1000 + 1500);
    cr_segment_handle seg;
    assert_int_equal(cr_engine_open_segment(f.engine, PEER, &seg), CR_ERR_METADATA_NOT_FOUND);

    /* A restarted engine republishes and is reachable again. */
    start_peer(&f, port);
    remote = peer_reg(&f.peer, "cpu:0", LEN, 0);
    assert_true(remote != 0);
    assert_true(key_present(&f, RAM_KEY));
    read_verified(&f, remote);

    if (wipe_etcd) {
        /* etcd loses every key: both engines put theirs back. */
        ct_server_kill(&etcd);
        ct_server_wipe(&etcd);
        assert_int_equal(ct_server_restart(&etcd), 0);
        t0 = ct_now_ms();
        while (!key_present(&f, RAM_KEY) || !key_present(&f, RPC_KEY) ||
               !key_present(&f, "mooncake/ram/localhost")) {
            if (ct_now_ms() - t0 > 8000)
                fail_msg("engines' keys not back 8 s after etcd was wiped");
            sleep_ms(50);
        }
        printf("etcd wiped: engines' keys back %llu ms after it restarted\n",
               (unsigned long long)(ct_now_ms() - t0));
        assert_string_equal(peer_cmd(&f.peer, "fill %llu %u %llu", (unsigned long long)remote, LEN,
                                     (unsigned long long)remote),
                            "OK");
        read_verified(&f, remote);
    }

    /* A clean stop removes the keys at once. */
    assert_int_equal(peer_stop(&f.peer), 0);
    f.peer_up = false;
    assert_false(key_present(&f, RAM_KEY));
    assert_false(key_present(&f, RPC_KEY));
    assert_int_equal(cr_engine_unregister(f.engine, f.buf), 0);
    cr_engine_destroy(f.engine);
    assert_false(key_present(&f, "mooncake/ram/localhost"));
    free(f.buf);
    crm_backend_close(f.probe);
#undef f
}

static void through_etcd(void **state)
{
    run("etcd://", &etcd, true);
}

static void through_bare_etcd(void **state)
{
    run("", &etcd, false);
}

static void through_redis(void **state)
{
    run("redis://", &redis, false);
}

int main(void)
{
    tt_require_exe(CT_ETCD_BIN);
    tt_require_exe(CT_REDIS_BIN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(through_etcd, teardown),
        cmocka_unit_test_teardown(through_bare_etcd, teardown),
        cmocka_unit_test_teardown(through_redis, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
