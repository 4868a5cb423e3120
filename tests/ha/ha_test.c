/*
 * ha_test.c - the HA master with real processes (docs/ha.md): one etcd
 * (Debian's etcd-server, a private data dir, free ports), three
 * crescent-master --enable_ha processes, and store client processes
 * (crescent-test-store-client) given the master address etcd://127.0.0.1:P.
 * Skips (77) without /usr/bin/etcd.
 *
 *   failover         N verified objects; kill -9 the leader; time until a put
 *                    succeeds again (printed); every object acknowledged before
 *                    the kill reads back with correct bytes; new puts and gets
 *                    work; a standby refuses client RPCs with NOT_LEADER.
 *   stepdown         the leader is SIGSTOPped past its lease, a standby takes
 *                    over, and the resumed old leader steps down (exits 3)
 *                    without serving; the data is still all there.
 *   etcd_outage      etcd paused 1.5 s (inside the lease margin): the leader keeps
 *                    serving; paused past the lease: it is deposed (exit 3) and,
 *                    etcd back, an in-sync standby leads with every object.
 *   disk_failover    two masters with --enable_offload --offload_on_evict, a
 *                    holder with a 16 MiB segment and an SSD tier, a reader
 *                    without a segment: 1 MiB values overflow the segment onto
 *                    the holder's disk; kill -9 of the leader: the new leader
 *                    knows every disk-only key at once (the holder never
 *                    re-announces: it was not restarted) and each reads back
 *                    with correct bytes.
 *   standby_partition  a standby is SIGSTOPped (its stream silent past
 *                    --ha_replication_timeout_ms): the leader drops it from the
 *                    in-sync set and keeps serving puts; the leader is then
 *                    killed and the paused standby resumed at once: the in-sync
 *                    standby takes over with every object, never the stale one.
 *   higher_term      a client that saw the leader at term T finds etcd naming a
 *                    master whose handshake announces a lower term (the
 *                    leader of another, older election): it refuses it (the
 *                    call fails, nothing reaches that master) and follows the
 *                    next leader, elected at a higher term.
 *   standby_resume   a standby paused past the replication timeout (dropped)
 *                    and resumed resubscribes with what it applied: the leader
 *                    streams the rest from its log, no snapshot (counted in
 *                    /metrics); with the leader and the other standby killed,
 *                    the resumed one leads with every object.
 *   bad_standby      a fake standby subscribes to the leader and acknowledges a
 *                    sequence number it was never sent; another sends a frame
 *                    that is no ack: the leader drops both (their connections
 *                    closed, never counted in sync) and keeps serving.
 *   grant_failover   put grants (CRESCENT_PUT_GRANTS=1) through etcd://: single
 *                    puts commit through grants at the leader (its counter);
 *                    kill -9 of the leader: the writer's next put (the value's
 *                    PUT_START and the next grant's in one write) follows the
 *                    new leader, whose puts go through grants again, and every
 *                    value acknowledged before and after reads back correct.
 *   standby_restart  a standby is killed and restarted; it catches up from the
 *                    leader (snapshot + stream); keys are removed by regex; the
 *                    other standby and the leader are killed: the restarted one
 *                    leads with every object, and the removed ones stay gone.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/net.h"
#include "crescent/status.h"
#include "proto/frame.h"
#include "metadata/etcd.h"
#include "store_harness.h"
#include "store_pattern.h"

#define NMASTERS 3
#define OBJECTS  24
#define VALUE    (64 * 1024)

static ct_server etcd;
static sh_master masters[NMASTERS];
static char etcd_flag[128], etcd_url[128];

static int setup(void **state)
{
    (void)state;
    tt_require_exe(CT_ETCD_BIN);
    if (ct_etcd_start(&etcd, NULL) != 0)
        return -1;
    snprintf(etcd_flag, sizeof(etcd_flag), "--etcd_endpoints=%s", etcd.endpoint);
    snprintf(etcd_url, sizeof(etcd_url), "etcd://%s", etcd.endpoint);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unsetenv("CRESCENT_PUT_GRANTS");
    sh_kill_all();
    ct_server_stop(&etcd);
    return 0;
}

static const char *lease_flag = "--ha_lease_ttl_sec=2";

static const char *extra_flags[3]; /* more master flags (NULL-terminated) */

static const char *const *master_args(void)
{
    static const char *args[10];
    args[0] = "--enable_ha";
    args[1] = etcd_flag;
    args[2] = lease_flag;
    args[3] = "--default_kv_lease_ttl=1000";
    args[4] = "--client_ttl=20";
    size_t n = 5;
    for (size_t i = 0; i < 2 && extra_flags[i] != NULL; i++)
        args[n++] = extra_flags[i];
    args[n] = NULL;
    return args;
}

static void start_master(int i)
{
    assert_int_equal(sh_master_start(&masters[i], master_args()), 0);
}

static void role_of(int i, char *out, size_t cap)
{
    out[0] = '\0';
    if (!ct_master_running(&masters[i].cm) ||
        sh_http_get(masters[i].metrics_port, "/role", out, cap) != 200)
        snprintf(out, cap, "down");
    out[strcspn(out, "\n")] = '\0';
}

/* The index of the one leader among the running masters, waiting up to ms. */
static int wait_leader(int ms, int not_this)
{
    uint64_t end = sh_now_ms() + (uint64_t)ms;
    do {
        int found = -1, n = 0;
        for (int i = 0; i < NMASTERS; i++) {
            char r[64];
            if (i == not_this)
                continue;
            role_of(i, r, sizeof(r));
            if (strcmp(r, "leader") == 0) {
                found = i;
                n++;
            }
        }
        if (n == 1)
            return found;
        assert_true(n <= 1); /* never two serving leaders */
        sh_sleep_ms(20);
    } while (sh_now_ms() < end);
    fail_msg("no leader within %d ms", ms);
    return -1;
}

/* Wait until the leader counts `n` standbys in sync (its /metrics). */
static void wait_in_sync(int leader, int n)
{
    uint64_t end = sh_now_ms() + 10000;
    while (sh_metric(&masters[leader], "master_ha_in_sync_standbys") < n) {
        if (sh_now_ms() > end)
            fail_msg("leader %d: fewer than %d standbys in sync after 10 s", leader, n);
        sh_sleep_ms(20);
    }
}

static void check_read(sh_client *c, const char *key, int seed)
{
    const char *reply = sh_cmd(c, "get %s %d", key, seed);
    char check[32] = "";
    long long rc = strtoll(reply, NULL, 10);
    sscanf(reply, "%*s %*s %31s", check);
    if (rc != VALUE || strcmp(check, "ok") != 0)
        fail_msg("%s: expected %d correct bytes, got '%s'", key, VALUE, reply);
}

static void start_clients(sh_client *holder, sh_client *user)
{
    const char *const cargs[] = {"--segment", "32M", "--rpc-timeout", "4000", "--heartbeat",
                                 "300",       NULL};
    assert_int_equal(sh_client_start(holder, etcd_url, cargs), 0);
    assert_int_equal(sh_client_start(user, etcd_url, cargs), 0);
}

static void put_objects(sh_client *c, const char *prefix)
{
    for (int i = 0; i < OBJECTS; i++)
        assert_int_equal(sh_rc(c, "put %s%d %d %d", prefix, i, VALUE, 100 + i), 0);
}

static void check_objects(sh_client *c, const char *prefix)
{
    char key[64];
    for (int i = 0; i < OBJECTS; i++) {
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        check_read(c, key, 100 + i);
    }
}

/* Puts of fresh keys until one succeeds; the ms it took from t0. */
static uint64_t first_put_after(sh_client *c, uint64_t t0, const char *prefix)
{
    for (int i = 0;; i++) {
        long long rc = sh_rc(c, "put %s%d %d %d", prefix, i, VALUE, 900 + i);
        if (rc == 0)
            return sh_now_ms() - t0;
        assert_true(rc != SH_DEAD);
        if (sh_now_ms() - t0 > 15000)
            fail_msg("no put succeeded within 15 s of the failover (last %lld)", rc);
        sh_sleep_ms(10);
    }
}

/* Every master up, a leader with all standbys in sync, a holder and a
 * user client, and the "obj" objects put: the leader's index. */
static int start_cluster(sh_client *holder, sh_client *user)
{
    for (int i = 0; i < NMASTERS; i++)
        start_master(i);
    int leader = wait_leader(10000, -1);
    wait_in_sync(leader, NMASTERS - 1);
    start_clients(holder, user);
    put_objects(user, "obj");
    return leader;
}

/* Stop both clients and every master but `gone` (killed or exited). */
static void stop_cluster(sh_client *holder, sh_client *user, int gone)
{
    assert_int_equal(sh_client_stop(user), 0);
    assert_int_equal(sh_client_stop(holder), 0);
    for (int i = 0; i < NMASTERS; i++)
        if (i != gone)
            assert_int_equal(sh_master_stop(&masters[i]), 0);
}

static void failover(void **state)
{
    (void)state;
    sh_client holder, user;
    int leader = start_cluster(&holder, &user);
    check_objects(&holder, "obj");

    /* A standby refuses client RPCs with NOT_LEADER (the store client's
     * direct connection: an address, not etcd://). */
    int standby = (leader + 1) % NMASTERS;
    sh_client direct;
    const char *const dargs[] = {"--segment", "8M", "--rpc-timeout", "1000", NULL};
    assert_int_not_equal(sh_client_start(&direct, masters[standby].addr, dargs), 0);
    assert_non_null(strstr(direct.child.line, "NOT_LEADER"));

    /* A third client keeps a batch of puts in flight across the kill. */
    sh_client load;
    const char *const largs[] = {"--segment", "32M", "--rpc-timeout", "4000", NULL};
    assert_int_equal(sh_client_start(&load, etcd_url, largs), 0);
    assert_int_equal(sh_send(&load, "batch_put load %d %d 500", 2 * OBJECTS, VALUE), 0);
    sh_sleep_ms(5);
    sh_master_kill(&masters[leader]);
    uint64_t t0 = sh_now_ms();
    uint64_t took = first_put_after(&user, t0, "after");
    fprintf(stderr, "failover: first successful put %llu ms after kill -9 of the leader\n",
            (unsigned long long)took);
    const char *lr = sh_recv(&load, 30000);
    fprintf(stderr, "failover: batch in flight across the kill: %s\n", lr);
    assert_true(strcmp(lr, "DEAD") != 0);
    int next = wait_leader(5000, leader);
    assert_int_not_equal(next, leader);
    check_objects(&holder, "obj");
    check_objects(&user, "obj");
    /* Whatever of that batch exists reads back right: never wrong bytes. */
    const char *g = sh_cmd(&holder, "batch_get load %d %d 500", 2 * OBJECTS, VALUE);
    fprintf(stderr, "failover: reading that batch back: %s\n", g);
    assert_int_equal(sh_field(g, "bad"), 0);
    assert_int_equal(sh_field(g, "err"), 0);
    assert_int_equal(sh_client_stop(&load), 0);
    put_objects(&user, "new");
    check_objects(&holder, "new");
    stop_cluster(&holder, &user, leader);
}

static void grant_failover(void **state)
{
    (void)state;
    setenv("CRESCENT_PUT_GRANTS", "1", 1); /* the clients started from here on */
    sh_client holder, user;
    int leader = start_cluster(&holder, &user);
    double granted = sh_metric(&masters[leader], "master_put_grant_commits_total");
    fprintf(stderr, "grant_failover: %d puts, %.0f through grants at the leader\n", OBJECTS,
            granted);
    assert_true(granted >= OBJECTS - 1); /* the first put asks for the first grant */
    /* An HA master does not offer commit ahead (its completing end is a notice the standbys
     * would not have): every grant's put was completed after its copy. */
    assert_true(sh_metric(&masters[leader], "master_put_commit_ahead_total") == 0);

    sh_master_kill(&masters[leader]);
    uint64_t t0 = sh_now_ms();
    uint64_t took = first_put_after(&user, t0, "after");
    fprintf(stderr, "grant_failover: first successful put %llu ms after kill -9 of the leader\n",
            (unsigned long long)took);
    int next = wait_leader(5000, leader);
    assert_int_not_equal(next, leader);
    put_objects(&user, "new");
    double again = sh_metric(&masters[next], "master_put_grant_commits_total");
    fprintf(stderr, "grant_failover: %.0f puts through grants at the new leader\n", again);
    assert_true(again >= OBJECTS - 1);
    assert_true(sh_metric(&masters[next], "master_put_commit_ahead_total") == 0);
    check_objects(&holder, "obj");
    check_objects(&holder, "new");
    check_objects(&user, "obj");
    stop_cluster(&holder, &user, leader);
}

static void stepdown(void **state)
{
    (void)state;
    sh_client holder, user;
    int leader = start_cluster(&holder, &user);

    kill(masters[leader].cm.p.pid, SIGSTOP);
    uint64_t t0 = sh_now_ms();
    int next = wait_leader(8000, leader); /* lease TTL 2 s + etcd's expiry tick */
    fprintf(stderr, "stepdown: standby %d leads %llu ms after SIGSTOP of %d\n", next,
            (unsigned long long)(sh_now_ms() - t0), leader);
    uint64_t took = first_put_after(&user, t0, "during");
    fprintf(stderr, "stepdown: first put %llu ms after SIGSTOP\n", (unsigned long long)took);
    sh_sleep_ms(500);
    kill(masters[leader].cm.p.pid, SIGCONT);
    /* It finds its lease gone, never serves again, and exits 3. */
    int st = ct_proc_wait(&masters[leader].cm.p, 5000);
    assert_int_equal(st, 3);
    check_objects(&holder, "obj");
    put_objects(&user, "new");
    check_objects(&holder, "new");
    stop_cluster(&holder, &user, leader);
}

static void standby_restart(void **state)
{
    (void)state;
    sh_client holder, user;
    int leader = start_cluster(&holder, &user);

    /* Restart one standby; it catches up with what was written before and
     * while it was down. */
    int sb = (leader + 1) % NMASTERS;
    sh_master_kill(&masters[sb]);
    put_objects(&user, "down");
    start_master(sb);
    put_objects(&user, "back");
    wait_in_sync(leader, NMASTERS - 1);
    assert_int_equal(sh_rc(&user, "remove_regex ^down"), OBJECTS);
    /* Kill the other standby and then the leader: the restarted one must
     * take over with everything. */
    int other = (leader + 2) % NMASTERS;
    sh_master_kill(&masters[other]);
    sh_sleep_ms(300);
    sh_master_kill(&masters[leader]);
    uint64_t took = first_put_after(&user, sh_now_ms(), "after");
    fprintf(stderr, "standby_restart: restarted standby serving after %llu ms\n",
            (unsigned long long)took);
    assert_int_equal(wait_leader(5000, -1), sb);
    check_objects(&holder, "obj");
    check_objects(&holder, "back");
    /* Removals were replicated too: nothing removed comes back. */
    for (int i = 0; i < OBJECTS; i++)
        assert_int_equal(sh_rc(&holder, "exist down%d", i), 0);
    assert_int_equal(sh_rc(&holder, "exist obj0"), 1);
    assert_int_equal(sh_client_stop(&user), 0);
    assert_int_equal(sh_client_stop(&holder), 0);
    assert_int_equal(sh_master_stop(&masters[sb]), 0);
}

static void etcd_outage(void **state)
{
    (void)state;
    lease_flag = "--ha_lease_ttl_sec=5"; /* >= 2.8 s of keepalive margin */
    sh_client holder, user;
    int leader = start_cluster(&holder, &user);

    /* etcd unreachable for 1.5 s: inside the margin, the leader keeps
     * leading and serving (replication does not need etcd). */
    ct_server_pause(&etcd, true);
    uint64_t t0 = sh_now_ms();
    int n = 0;
    while (sh_now_ms() - t0 < 1500) { /* at most 200: the segments hold ~1000 */
        if (n < 200) {
            assert_int_equal(sh_rc(&user, "put short%d %d %d", n, VALUE, 300 + n), 0);
            n++;
        } else {
            sh_sleep_ms(10);
        }
    }
    ct_server_pause(&etcd, false);
    fprintf(stderr, "etcd_outage: %d puts during a 1.5 s etcd pause\n", n);
    assert_int_equal(wait_leader(3000, -1), leader);

    /* etcd gone past the lease: the leader stops serving before its lease
     * can expire and is deposed (exit 3); once etcd is back, the lease
     * expires there and an in-sync standby takes over with everything. */
    ct_server_pause(&etcd, true);
    int st = ct_proc_wait(&masters[leader].cm.p, 8000);
    ct_server_pause(&etcd, false);
    assert_int_equal(st, 3);
    uint64_t took = first_put_after(&user, sh_now_ms(), "after");
    fprintf(stderr, "etcd_outage: puts work again %llu ms after etcd came back\n",
            (unsigned long long)took);
    int next = wait_leader(8000, leader);
    assert_int_not_equal(next, leader);
    check_objects(&holder, "obj");
    char key[64];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "short%d", i);
        const char *reply = sh_cmd(&holder, "get %s %d", key, 300 + i);
        if (strtoll(reply, NULL, 10) != VALUE || strstr(reply, " ok") == NULL)
            fail_msg("%s: '%s'", key, reply);
    }
    stop_cluster(&holder, &user, leader);
}

static void standby_partition(void **state)
{
    (void)state;
    sh_client holder, user;
    int leader = start_cluster(&holder, &user);
    int stale = (leader + 1) % NMASTERS, fresh = (leader + 2) % NMASTERS;

    /* The stale standby stops acknowledging: the first put waits for the
     * replication timeout (1 s), then the leader serves with one standby. */
    assert_int_equal(tt_stop_process(masters[stale].cm.p.pid), 0);
    uint64_t t0 = sh_now_ms();
    put_objects(&user, "part");
    fprintf(stderr, "standby_partition: %d puts with a standby paused took %llu ms\n", OBJECTS,
            (unsigned long long)(sh_now_ms() - t0));
    assert_int_equal(sh_metric(&masters[leader], "master_ha_in_sync_standbys"), 1);
    assert_true(sh_metric(&masters[leader], "master_ha_not_replicated_total") >= 1);
    char role[64];
    role_of(leader, role, sizeof(role));
    assert_string_equal(role, "leader");

    /* Leader gone, the stale standby back at the same moment: only the
     * in-sync one may take over (the stale one is not in the published ISR). */
    sh_master_kill(&masters[leader]);
    kill(masters[stale].cm.p.pid, SIGCONT);
    int next = wait_leader(8000, leader);
    fprintf(stderr, "standby_partition: master %d leads (stale %d, in sync %d)\n", next, stale,
            fresh);
    assert_int_equal(next, fresh);
    check_objects(&holder, "obj");
    check_objects(&holder, "part");
    /* The stale one follows the new leader and catches up. */
    wait_in_sync(next, 1);
    put_objects(&user, "new");
    check_objects(&holder, "new");
    stop_cluster(&holder, &user, leader);
}

static void standby_resume(void **state)
{
    (void)state;
    sh_client holder, user;
    int leader = start_cluster(&holder, &user);
    int paused = (leader + 1) % NMASTERS, other = (leader + 2) % NMASTERS;
    assert_int_equal(sh_metric(&masters[leader], "master_ha_standby_snapshots_total"), 2);

    assert_int_equal(tt_stop_process(masters[paused].cm.p.pid), 0);
    put_objects(&user, "part"); /* it is dropped from the ISR meanwhile */
    assert_int_equal(sh_metric(&masters[leader], "master_ha_in_sync_standbys"), 1);
    kill(masters[paused].cm.p.pid, SIGCONT);
    wait_in_sync(leader, 2);
    double resumes = sh_metric(&masters[leader], "master_ha_standby_resumes_total");
    double snaps = sh_metric(&masters[leader], "master_ha_standby_snapshots_total");
    fprintf(stderr, "standby_resume: %.0f resumed from the log, %.0f snapshots\n", resumes, snaps);
    assert_int_equal(resumes, 1);
    assert_int_equal(snaps, 2);
    put_objects(&user, "back");

    /* Only the resumed standby is left: it must have everything. */
    sh_master_kill(&masters[other]);
    sh_sleep_ms(300);
    sh_master_kill(&masters[leader]);
    uint64_t took = first_put_after(&user, sh_now_ms(), "after");
    fprintf(stderr, "standby_resume: the resumed standby serves after %llu ms\n",
            (unsigned long long)took);
    assert_int_equal(wait_leader(5000, -1), paused);
    check_objects(&holder, "obj");
    check_objects(&holder, "part");
    check_objects(&holder, "back");
    assert_int_equal(sh_client_stop(&user), 0);
    assert_int_equal(sh_client_stop(&holder), 0);
    assert_int_equal(sh_master_stop(&masters[paused]), 0);
}

static void higher_term(void **state)
{
    (void)state;
    /* Master 2 leads cluster "older" first: its term is the lowest. */
    extra_flags[0] = "--cluster_id=older";
    start_master(2);
    extra_flags[0] = NULL;
    assert_int_equal(wait_leader(10000, -1), 2);
    start_master(0);
    start_master(1);
    int leader = -1;
    for (uint64_t end = sh_now_ms() + 10000; leader < 0 && sh_now_ms() < end; sh_sleep_ms(20)) {
        char r[64];
        for (int i = 0; i < 2; i++) {
            role_of(i, r, sizeof(r));
            if (strcmp(r, "leader") == 0)
                leader = i;
        }
    }
    assert_true(leader >= 0);
    double t_leader = sh_metric(&masters[leader], "master_ha_term");
    double t_older = sh_metric(&masters[2], "master_ha_term");
    assert_true(t_older < t_leader);
    sh_client c;
    const char *const cargs[] = {"--segment", "8M", "--rpc-timeout", "1500", NULL};
    assert_int_equal(sh_client_start(&c, etcd_url, cargs), 0);
    assert_int_equal(sh_rc(&c, "put seen %d 1", VALUE), 0); /* it has seen t_leader */

    /* The cluster's masters die; etcd then names the older election's
     * leader (a key written now: its revision is the highest, but the master
     * there announces t_older in its handshake). */
    sh_master_kill(&masters[0]);
    sh_master_kill(&masters[1]);
    crm_etcd_config ec = {.endpoints = etcd.endpoint};
    crm_etcd *e = NULL;
    assert_int_equal(crm_etcd_open(&ec, &e), 0);
    const char *view = "mooncake-store/mooncake_cluster/master_view";
    assert_int_equal(crm_etcd_delete(e, view, false, NULL), 0);
    assert_int_equal(crm_etcd_put(e, view, masters[2].addr, strlen(masters[2].addr), 0, NULL), 0);
    long long rc = sh_rc(&c, "put stale %d 2", VALUE);
    fprintf(stderr, "higher_term: put with a lower-term master named: %lld (%s)\n", rc, c.line);
    assert_true(rc < 0 && rc != SH_DEAD);
    sh_client direct; /* nothing reached the older leader */
    const char *const dargs[] = {"--segment", "0", NULL};
    assert_int_equal(sh_client_start(&direct, masters[2].addr, dargs), 0);
    assert_int_equal(sh_rc(&direct, "exist stale"), 0);
    assert_int_equal(sh_client_stop(&direct), 0);

    /* A new election (a higher term): the client follows it. */
    assert_int_equal(crm_etcd_delete(e, view, false, NULL), 0);
    crm_etcd_close(e);
    start_master(0);
    uint64_t t0 = sh_now_ms();
    for (;;) {
        rc = sh_rc(&c, "put after %d 3", VALUE);
        if (rc == 0 || sh_now_ms() - t0 > 15000)
            break;
        sh_sleep_ms(20);
    }
    assert_int_equal(rc, 0);
    assert_true(sh_metric(&masters[0], "master_ha_term") > t_leader);
    assert_int_equal(sh_client_stop(&c), 0);
    assert_int_equal(sh_master_stop(&masters[0]), 0);
    assert_int_equal(sh_master_stop(&masters[2]), 0);
}

#define MIB (1024 * 1024)

/* "rc fnv ok" with len bytes, retrying while the disk tier is not reachable
 * yet (the holder's first heartbeat to the new leader) or is staging. */
static const char *get_disk(sh_client *c, const char *key, int seed)
{
    uint64_t until = sh_now_ms() + 10000;
    for (;;) {
        const char *r = sh_cmd(c, "get %s %d", key, seed);
        long long rc = strtoll(r, NULL, 10);
        if ((rc != CR_ERR_OFFLOAD_UNAVAILABLE && rc != CR_ERR_OFFLOAD_STAGING) ||
            sh_now_ms() > until)
            return r;
        sh_sleep_ms(10);
    }
}

static void disk_failover(void **state)
{
    (void)state;
    enum { N = 40 };
    char dir[] = "/tmp/cr_ha_disk_XXXXXX";
    assert_non_null(mkdtemp(dir));
    extra_flags[0] = "--enable_offload=true";
    extra_flags[1] = "--offload_on_evict=true";
    start_master(0);
    start_master(1);
    int leader = wait_leader(10000, -1);
    wait_in_sync(leader, 1);
    sh_client holder, reader;
    const char *const hargs[] = {"--segment", "16M",           "--ssd", dir, "--region",
                                 "0",         "--rpc-timeout", "4000",  NULL};
    assert_int_equal(sh_client_start(&holder, etcd_url, hargs), 0);
    const char *const rargs[] = {"--segment", "0", "--region", "0", "--rpc-timeout", "4000", NULL};
    assert_int_equal(sh_client_start(&reader, etcd_url, rargs), 0);

    char key[64];
    for (int i = 0; i < N; i++) {
        uint64_t until = sh_now_ms() + 15000;
        long long rc;
        do { /* the segment waits for offloads to free memory */
            rc = sh_rc(&reader, "put disk%d %d %d", i, MIB, 500 + i);
            if (rc == CR_NO_AVAILABLE_HANDLE)
                sh_sleep_ms(5);
        } while (rc == CR_NO_AVAILABLE_HANDLE && sh_now_ms() < until);
        if (rc != 0)
            fail_msg("put disk%d: %lld (%s)", i, rc, reader.line);
    }
    /* The disk-only keys (on disk, no memory replica) as the leader has them. */
    bool only[N];
    int n_only = 0;
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "disk%d", i);
        if (sh_rc(&reader, "exist %s", key) != 1)
            fail_msg("%s is gone before the failover", key);
        /* one replica, and it is the holder's disk copy ("seg/1/size/disk") */
        const char *r = sh_cmd(&reader, "replicas %s", key);
        only[i] = strtoll(r, NULL, 10) == 1 && strstr(r, "/disk") != NULL;
        n_only += only[i];
    }
    double on_disk = sh_metric(&masters[leader], "master_disk_objects");
    fprintf(stderr, "disk_failover: %d of %d values disk-only, %.0f on disk\n", n_only, N, on_disk);
    if (n_only < N / 4)
        fail_msg("only %d disk-only values of %d MiB in a 16 MiB segment", n_only, N);
    wait_in_sync(leader, 1);
    sh_sleep_ms(300); /* the last heartbeat's disk copies on the standby */

    sh_master_kill(&masters[leader]);
    int next = wait_leader(8000, leader);
    /* Known at once: no holder restarted, so none re-announced anything. */
    double known = sh_metric(&masters[next], "master_disk_objects");
    fprintf(stderr, "disk_failover: the new leader knows %.0f disk copies\n", known);
    assert_true(known >= n_only);
    int from_disk = 0;
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "disk%d", i);
        const char *r = get_disk(&reader, key, 500 + i);
        char check[32] = "";
        sscanf(r, "%*s %*s %31s", check);
        if (strtoll(r, NULL, 10) != MIB || strcmp(check, "ok") != 0)
            fail_msg("%s (%s) from the new leader: '%s'", key, only[i] ? "disk-only" : "memory", r);
        from_disk += only[i];
    }
    assert_int_equal(from_disk, n_only);
    assert_int_equal(sh_client_stop(&reader), 0);
    assert_int_equal(sh_client_stop(&holder), 0);
    assert_int_equal(sh_master_stop(&masters[next]), 0);
    extra_flags[0] = extra_flags[1] = NULL;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* A fake standby: SUBSCRIBE to the leader (term, an address nobody uses),
 * then read until the stream's start frame (a sequenced DATA frame of no
 * entries: the snapshot is done). The socket. */
static int fake_standby(int leader)
{
    int fd = crb_connect("127.0.0.1", masters[leader].port, 2000);
    assert_true(fd >= 0);
    char body[64];
    int n = snprintf(body, sizeof(body), "%.0f 127.0.0.1:1",
                     sh_metric(&masters[leader], "master_ha_term"));
    uint8_t frame[CRP_HEADER_SIZE + 64];
    crp_header h = {.version = CRP_VERSION, .type = CRP_REPL_SUBSCRIBE, .body_len = (uint32_t)n};
    crp_header_encode(&h, frame);
    memcpy(frame + CRP_HEADER_SIZE, body, (size_t)n);
    assert_int_equal(
        crb_write_full(fd, frame, CRP_HEADER_SIZE + (size_t)n, crb_now_ns() + 2000000000ull), 0);
    static uint8_t in[CRP_HEADER_SIZE + (1u << 20)];
    for (;;) {
        uint64_t deadline = crb_now_ns() + 5000000000ull;
        assert_int_equal(crb_read_full(fd, in, CRP_HEADER_SIZE, deadline), 0);
        assert_int_equal(crp_header_decode(in, &h), 0);
        assert_int_equal(h.type, CRP_REPL_DATA);
        assert_true(h.body_len >= 12 && h.body_len <= sizeof(in));
        assert_int_equal(crb_read_full(fd, in, h.body_len, deadline), 0);
        uint64_t first = 0;
        uint32_t count = 0;
        for (int i = 0; i < 8; i++)
            first |= (uint64_t)in[i] << (8 * i);
        for (int i = 0; i < 4; i++)
            count |= (uint32_t)in[8 + i] << (8 * i);
        if (first != 0 && count == 0)
            return fd;
    }
}

/* Send one bare header and expect the leader to close the connection. */
static void expect_dropped(int fd, int type, uint64_t request_id)
{
    uint8_t hdr[CRP_HEADER_SIZE];
    crp_header h = {.version = CRP_VERSION, .type = (uint8_t)type, .request_id = request_id};
    crp_header_encode(&h, hdr);
    assert_int_equal(crb_write_full(fd, hdr, sizeof(hdr), crb_now_ns() + 2000000000ull), 0);
    uint8_t sink[4096];
    uint64_t end = sh_now_ms() + 5000;
    for (;;) { /* whatever it still streams, then the end */
        struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ssize_t got = recv(fd, sink, sizeof(sink), 0);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
            break;
        if (sh_now_ms() > end)
            fail_msg("the leader kept a standby that sent type %d, id %llu", type,
                     (unsigned long long)request_id);
    }
    close(fd);
}

static void bad_standby(void **state)
{
    (void)state;
    sh_client holder, user;
    int leader = start_cluster(&holder, &user);
    /* An ack past anything sent: before, the leader took it and counted the
     * fake in the in-sync set (3 in sync, published in etcd). */
    int fd = fake_standby(leader);
    assert_int_equal(sh_metric(&masters[leader], "master_ha_standbys"), 3);
    expect_dropped(fd, CRP_REPL_ACK, 1ull << 40);
    assert_int_equal(sh_metric(&masters[leader], "master_ha_in_sync_standbys"), 2);
    /* A frame that is no ack. */
    fd = fake_standby(leader);
    expect_dropped(fd, CRP_RPC_REQ, 1);
    put_objects(&user, "after");
    check_objects(&holder, "obj");
    check_objects(&holder, "after");
    assert_int_equal(sh_metric(&masters[leader], "master_ha_in_sync_standbys"), 2);
    uint64_t end = sh_now_ms() + 5000;
    while (sh_metric(&masters[leader], "master_ha_standbys") != 2) {
        if (sh_now_ms() > end)
            fail_msg("the leader still streams to a dropped fake standby");
        sh_sleep_ms(20);
    }
    stop_cluster(&holder, &user, -1);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test_setup_teardown(failover, setup, teardown),
        cmocka_unit_test_setup_teardown(grant_failover, setup, teardown),
        cmocka_unit_test_setup_teardown(stepdown, setup, teardown),
        cmocka_unit_test_setup_teardown(standby_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(etcd_outage, setup, teardown),
        cmocka_unit_test_setup_teardown(disk_failover, setup, teardown),
        cmocka_unit_test_setup_teardown(standby_partition, setup, teardown),
        cmocka_unit_test_setup_teardown(higher_term, setup, teardown),
        cmocka_unit_test_setup_teardown(standby_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_standby, setup, teardown),
    };
    if (argc > 1) { /* one test by name (CTest runs each on its own) */
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            if (strcmp(all[i].name, argv[1]) == 0)
                return _cmocka_run_group_tests(argv[1], &all[i], 1, NULL, NULL) ? 1 : 0;
        fprintf(stderr, "unknown test %s\n", argv[1]);
        return 2;
    }
    return cmocka_run_group_tests(all, NULL, NULL);
}
