/*
 * ha_partition_test.c - the HA master cut off by a real network partition
 * (docs/ha.md, "Split brain"), on the network-namespace test bed of
 * tests/testing/netbed.h (every address 10.77.0.x inside namespaces this
 * test creates; netbed removes them, and every process here is stopped by
 * the test or dies with it):
 *
 *   host 0  master A (leads first) and two store clients ("local" reads,
 *           "writer" writes) that talk to A directly (10.77.0.1), from
 *           inside A's namespace
 *   host 1  etcd (10.77.0.2, free ports, a private data dir)
 *   host 2  master B          host 3  master C (the standbys)
 *   host 4  the store clients given etcd://: a holder (32 MiB segment) and
 *           a user (no segment); the test thread lives here
 *
 * 24 verified objects are put; then host 0's cable is cut (its bridge port
 * down): A reaches neither etcd nor its standbys nor the clients of host 4,
 * and only "local" still reaches A. The test asserts that
 *   - no write is acknowledged by A after the cut (a put from a second
 *     client in host 0 fails: no standby acknowledges it and the in-sync
 *     set cannot shrink without etcd), and that key never appears anywhere;
 *   - A stops serving before another master can be elected: every request
 *     A answered successfully after the cut was answered before etcd last
 *     showed A's election key (polled from host 4 every few ms; the key
 *     exists until A's lease expires, and no other master can be elected
 *     while it exists), and A refuses or is gone after that;
 *   - A is deposed (exits 3) on its own, without being reachable;
 *   - B or C leads, and every object acknowledged before the cut reads back
 *     with correct bytes through etcd://; new puts work.
 * Then the cable is healed and everything stopped.
 *
 * Needs root, ip(8), /dev/net/tun (netbed) and /usr/bin/etcd: skips (77)
 * otherwise.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crescent/status.h"
#include "metadata/etcd.h"
#include "netbed.h"
#include "store_harness.h"

#define H_LEADER 0
#define H_ETCD   1
#define H_USERS  4
#define N_HOSTS  5
#define OBJECTS  24
#define VALUE    (64 * 1024)
#define VIEW_KEY "mooncake-store/mooncake_cluster/master_view"

static tt_netbed bed;
static ct_proc etcd;
static char etcd_dir[128], etcd_ep[64], etcd_flag[128], etcd_url[128];
static ct_master masters[3]; /* A, B, C on hosts 0, 2, 3 */
static const int master_host[3] = {0, 2, 3};

static void enter(int host)
{
    if (tt_netbed_enter(&bed, host) < 0)
        fail_msg("cannot enter host %d's namespace", host);
}

/* etcd on host 1's address, so that every host reaches it over the bed. */
static void start_etcd(void)
{
    enter(H_ETCD);
    const char *ip = bed.addr[H_ETCD];
    uint16_t port = ct_free_port(ip), peer_port = ct_free_port(ip);
    /* on tmpfs where there is one: etcd's fsyncs must not stall its leases */
    snprintf(etcd_dir, sizeof(etcd_dir), "/dev/shm/crescent-ha-part-XXXXXX");
    if (mkdtemp(etcd_dir) == NULL) {
        snprintf(etcd_dir, sizeof(etcd_dir), "/tmp/crescent-ha-part-XXXXXX");
        assert_non_null(mkdtemp(etcd_dir));
    }
    char client[96], peer[96], cluster[128], data[200], log[200];
    snprintf(client, sizeof(client), "http://%s:%u", ip, (unsigned)port);
    snprintf(peer, sizeof(peer), "http://%s:%u", ip, (unsigned)peer_port);
    snprintf(cluster, sizeof(cluster), "m0=%s", peer);
    snprintf(data, sizeof(data), "%s/data", etcd_dir);
    snprintf(log, sizeof(log), "%s/server.log", etcd_dir);
    const char *argv[] = {CT_ETCD_BIN, "--name",
                          "m0",        "--data-dir",
                          data,        "--listen-client-urls",
                          client,      "--advertise-client-urls",
                          client,      "--listen-peer-urls",
                          peer,        "--initial-advertise-peer-urls",
                          peer,        "--initial-cluster",
                          cluster,     "--initial-cluster-state",
                          "new",       "--logger",
                          "zap",       "--log-level",
                          "warn",      NULL};
    ct_spawn_opts o = {.log_path = log};
    assert_int_equal(ct_proc_spawn(&etcd, argv, &o), 0);
    snprintf(etcd_ep, sizeof(etcd_ep), "%s:%u", ip, (unsigned)port);
    snprintf(etcd_flag, sizeof(etcd_flag), "--etcd_endpoints=%s", etcd_ep);
    snprintf(etcd_url, sizeof(etcd_url), "etcd://%s", etcd_ep);
    uint64_t end = ct_now_ms() + 20000;
    for (;;) {
        char *body = NULL;
        int st = tt_http_get(ip, port, "/health", &body);
        bool ok = st == 200 && body != NULL && strstr(body, "\"health\":\"true\"") != NULL;
        free(body);
        if (ok)
            return;
        if (ct_now_ms() > end || ct_proc_wait(&etcd, 0) != -2)
            fail_msg("etcd on %s did not come up (log: %s)", etcd_ep, log);
        ct_sleep_ms(50);
    }
}

static void stop_etcd(void)
{
    if (etcd.pid > 0) {
        kill(etcd.pid, SIGTERM);
        if (ct_proc_wait(&etcd, 5000) == -2)
            ct_proc_kill(&etcd);
    }
    if (etcd_dir[0] != '\0') {
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", etcd_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", etcd_dir);
        etcd_dir[0] = '\0';
    }
}

static void start_master(int i)
{
    enter(master_host[i]);
    const char *args[] = {"--enable_ha",          etcd_flag,
                          "--ha_lease_ttl_sec=2", "--default_kv_lease_ttl=1000",
                          "--client_ttl=20",      NULL};
    ct_master_opts o = {.bin = tt_bin("CRESCENT_MASTER_BIN", "crescent-master"),
                        .host = bed.addr[master_host[i]],
                        .args = args,
                        .ready_ms = 10000};
    assert_int_equal(ct_master_start(&masters[i], &o), 0);
}

/* GET path from master i's admin port: the body (static) or "" if down. */
static const char *admin_get(int i, const char *path)
{
    static char out[1 << 16];
    out[0] = '\0';
    char *body = NULL;
    if (ct_master_running(&masters[i]) &&
        tt_http_get(masters[i].host, masters[i].metrics_port, path, &body) == 200 && body != NULL)
        snprintf(out, sizeof(out), "%s", body);
    free(body);
    return out;
}

static bool is_leader(int i)
{
    return strncmp(admin_get(i, "/role"), "leader", 6) == 0;
}

static double metric(int i, const char *name)
{
    const char *text = admin_get(i, "/metrics");
    size_t len = strlen(name);
    for (const char *p = strstr(text, name); p != NULL; p = strstr(p + len, name))
        if ((p == text || p[-1] == '\n') && p[len] == ' ')
            return strtod(p + len + 1, NULL);
    return -1;
}

static void wait_until(bool (*cond)(int), int i, int ms, const char *what)
{
    uint64_t end = ct_now_ms() + (uint64_t)ms;
    while (!cond(i)) {
        if (ct_now_ms() > end)
            fail_msg("master %d: not %s within %d ms", i, what, ms);
        ct_sleep_ms(20);
    }
}

static bool both_in_sync(int i)
{
    return metric(i, "master_ha_in_sync_standbys") >= 2;
}

/* The address etcd names as the leader ("" when none), and its term. */
static int view(crm_etcd *e, char *addr, size_t cap, uint64_t *term)
{
    crm_etcd_kv kv;
    addr[0] = '\0';
    *term = 0;
    int rc = crm_etcd_get(e, VIEW_KEY, &kv, NULL);
    if (rc == CR_ETCD_KEY_NOT_EXIST)
        return 0;
    if (rc < 0)
        return rc;
    snprintf(addr, cap, "%.*s", (int)kv.value_len, (const char *)kv.value);
    *term = (uint64_t)kv.create_revision;
    crm_etcd_kv_clear(&kv);
    return 0;
}

static void partition(void **state)
{
    (void)state;
    start_etcd();
    start_master(0);
    wait_until(is_leader, 0, 10000, "leading");
    start_master(1);
    start_master(2);
    wait_until(both_in_sync, 0, 15000, "with both standbys in sync");

    enter(H_USERS);
    sh_client holder, user, local, writer;
    const char *const hargs[] = {"--segment", "32M", "--rpc-timeout", "4000", "--heartbeat",
                                 "300",       NULL};
    const char *const uargs[] = {"--segment", "0", "--rpc-timeout", "4000", NULL};
    assert_int_equal(sh_client_start(&holder, etcd_url, hargs), 0);
    assert_int_equal(sh_client_start(&user, etcd_url, uargs), 0);
    for (int i = 0; i < OBJECTS; i++)
        assert_int_equal(sh_rc(&user, "put obj%d %d %d", i, VALUE, 100 + i), 0);

    /* Two clients inside A's namespace (a held write reply holds every later
     * reply on its connection, so reads and the write use one each). */
    enter(H_LEADER);
    const char *const largs[] = {"--segment", "0", "--rpc-timeout", "500", NULL};
    const char *const wargs[] = {"--segment", "0", "--rpc-timeout", "8000", NULL};
    assert_int_equal(sh_client_start(&local, masters[0].addr, largs), 0);
    assert_int_equal(sh_client_start(&writer, masters[0].addr, wargs), 0);
    enter(H_USERS);
    assert_int_equal(sh_rc(&local, "exist obj0"), 1);

    crm_etcd *e = NULL;
    crm_etcd_config ec = {.endpoints = etcd_ep};
    assert_int_equal(crm_etcd_open(&ec, &e), 0);
    char addr[300];
    uint64_t term_a = 0, term;
    assert_int_equal(view(e, addr, sizeof(addr), &term_a), 0);
    assert_string_equal(addr, masters[0].addr);

    /* The cut. */
    assert_int_equal(tt_netbed_link(&bed, H_LEADER, false), 0);
    uint64_t t_cut = ct_now_ms();
    /* A write on the cut-off leader (its reply read at the end). */
    assert_int_equal(sh_send(&writer, "put cut0 %d 7", VALUE), 0);

    uint64_t last_ok = 0, last_present = 0, refused_at = 0, gone_at = 0;
    unsigned oks = 0, refusals = 0;
    while (gone_at == 0) {
        if (ct_now_ms() - t_cut > 20000)
            fail_msg("etcd still names the cut-off leader 20 s after the cut");
        uint64_t sent = ct_now_ms();
        assert_int_equal(view(e, addr, sizeof(addr), &term), 0);
        if (strcmp(addr, masters[0].addr) == 0 && term == term_a)
            last_present = sent;
        else
            gone_at = ct_now_ms();
        if (refused_at == 0 || ct_master_running(&masters[0])) {
            long long rc = sh_rc(&local, "exist obj0");
            if (rc == 1) {
                last_ok = ct_now_ms(); /* the reply came back: A served it by now */
                oks++;
            } else if (refused_at == 0) {
                refused_at = ct_now_ms();
                fprintf(stderr, "partition: the cut-off leader refuses %llu ms after the cut: %s\n",
                        (unsigned long long)(refused_at - t_cut), local.line);
                refusals++;
            } else {
                refusals++;
            }
        }
        ct_sleep_ms(5);
    }
    fprintf(stderr,
            "partition: %u requests served after the cut, the last %llu ms after it; its key "
            "last seen %llu ms after it, gone at %llu ms (%s leads)\n",
            oks, (unsigned long long)(last_ok - t_cut), (unsigned long long)(last_present - t_cut),
            (unsigned long long)(gone_at - t_cut), addr[0] ? addr : "nobody yet");
    assert_true(refused_at != 0 && refusals > 0);
    /* Stopped serving while its key still existed: before anyone else could
     * be elected (last_ok is when a reply arrived, after A sent it;
     * last_present when a read that still saw the key was sent, before the
     * key could go). */
    assert_true(last_ok < last_present);
    assert_true(refused_at < last_present);

    /* Deposed on its own: exits 3 without anyone reaching it. */
    int st = ct_proc_wait(&masters[0].p, 10000);
    assert_int_equal(st, 3);
    /* The write was never acknowledged. */
    const char *wr = sh_recv(&writer, 15000);
    fprintf(stderr, "partition: the put sent to the cut-off leader: %s\n", wr);
    assert_true(strcmp(wr, "DEAD") != 0 && strtoll(wr, NULL, 10) < 0);

    /* A standby leads with every acknowledged object. */
    uint64_t end = ct_now_ms() + 15000;
    while (!is_leader(1) && !is_leader(2)) {
        if (ct_now_ms() > end)
            fail_msg("no standby leads 15 s after the old leader's key went");
        ct_sleep_ms(20);
    }
    for (int i = 0; i < OBJECTS; i++) {
        const char *reply = sh_cmd(&user, "get obj%d %d", i, 100 + i);
        if (strtoll(reply, NULL, 10) != VALUE || strstr(reply, " ok") == NULL)
            fail_msg("obj%d after the partition: '%s'", i, reply);
    }
    assert_int_equal(sh_rc(&user, "exist cut0"), 0);
    for (int i = 0; i < OBJECTS; i++)
        assert_int_equal(sh_rc(&user, "put new%d %d %d", i, VALUE, 500 + i), 0);
    for (int i = 0; i < OBJECTS; i++) {
        const char *reply = sh_cmd(&holder, "get new%d %d", i, 500 + i);
        if (strtoll(reply, NULL, 10) != VALUE || strstr(reply, " ok") == NULL)
            fail_msg("new%d: '%s'", i, reply);
    }
    assert_int_equal(view(e, addr, sizeof(addr), &term), 0);
    assert_true(term > term_a);
    assert_true(strcmp(addr, masters[1].addr) == 0 || strcmp(addr, masters[2].addr) == 0);
    fprintf(stderr,
            "partition: %s leads (term %" PRIu64 " > %" PRIu64
            "); every object intact, new puts work\n",
            addr, term, term_a);

    assert_int_equal(tt_netbed_link(&bed, H_LEADER, true), 0);
    crm_etcd_close(e);
    assert_int_equal(sh_client_stop(&local), 0);
    assert_int_equal(sh_client_stop(&writer), 0);
    assert_int_equal(sh_client_stop(&user), 0);
    assert_int_equal(sh_client_stop(&holder), 0);
    for (int i = 1; i < 3; i++)
        assert_int_equal(ct_master_stop(&masters[i], 10000), 0);
    stop_etcd();
}

static int teardown(void **state)
{
    tt_teardown(state);
    stop_etcd();
    tt_netbed_destroy(&bed);
    return 0;
}

int main(void)
{
    tt_require_exe(CT_ETCD_BIN);
    int rc =
        tt_netbed_create(&bed, N_HOSTS, tt_bin("CRESCENT_NETWIRE_BIN", "crescent-test-netwire"));
    if (rc == TT_SKIP)
        return TT_SKIP;
    if (rc < 0) {
        fprintf(stderr, "netns test bed could not be built\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(partition, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
