/*
 * netns_store_test.c - faults between hosts: crescent-master and three store
 * clients (crescent-test-store-client) on four "hosts" of a network-namespace
 * test bed (tests/testing/netbed.h: 10.77.0.1 = master, .2-.4 = clients,
 * cabled to one bridge by crescent-test-netwire), every byte checked.
 *
 * Phases, in order (each client puts its own keys, then every client reads
 * every other client's keys, so values cross "hosts" over tcp):
 *   1. clean network                      every call succeeds
 *   2. 50 ms latency +-10 ms jitter       every call succeeds
 *   3. 1 % frame loss                     every call succeeds
 *   4. client 3 partitioned (link down) for longer than the client TTL:
 *      the master drops its segment; the others keep working; after the
 *      link is back, client 3 remounts, is usable, and its new keys read
 *      back from the others
 *   5. the master partitioned for longer than the client TTL: calls fail
 *      with a named error in time; the master drops every segment; after
 *      the link is back every client remounts and is usable
 * Invariants checked on every call of every phase: no wrong bytes (a get or
 * batch_get that returns data returns exactly the pattern put), and no call
 * takes longer than its deadline plus one second, where a call's deadline
 * is what the store API documents for its parts: each master call
 * rpc_timeout_ms, each transfer round transfer_timeout_ms (+ 1 s of staging
 * wait), e.g. put = 3 master calls (start, end, revoke) + 1 round.
 *
 * Skips (77) where namespaces, ip(8) or /dev/net/tun are not available.
 * Runtime ~1 min. The test process itself lives in the master's namespace
 * (it reads the master's /get_all_segments at 10.77.0.1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netbed.h"
#include "testing.h"

#define N_CLIENTS 3
/* A master call may meet a lost frame on each of its two cables: at 1 % loss a retransmission
 * waits an RTO of 200-300 ms, doubling per try (a 1.5 s timeout failed one CI run in ~30). */
#define RPC_MS 3000
/* 128 KiB over a 100 ms RTT wire with jitter (reordering), on a loaded CI machine */
#define TRANSFER_MS  4000
#define HEARTBEAT_MS 300
#define TTL_S        3
#define KEYS         4
#define LINE_MAX     8192

static tt_netbed bed;
static ct_master master;
static tt_child clients[N_CLIENTS + 1]; /* [1..3]: client on host i */
static uint64_t worst_over_ms;          /* largest (elapsed - deadline) seen */
static unsigned calls;

static uint64_t deadline_ms(const char *cmd)
{
    uint64_t rpcs = 1, rounds = 0;
    if (strncmp(cmd, "put", 3) == 0 || strncmp(cmd, "upsert", 6) == 0 ||
        strncmp(cmd, "batch_put", 9) == 0) {
        rpcs = 3;
        rounds = 1;
    } else if (strncmp(cmd, "get", 3) == 0 || strncmp(cmd, "batch_get", 9) == 0) {
        rpcs = 2; /* replica list, and one retry after a stale handle */
        rounds = 1;
    }
    return rpcs * RPC_MS + rounds * (TRANSFER_MS + 1000);
}

/* One command to each client in `which` (a bit mask) at once; replies in
 * out[i]; every elapsed time is checked against the command's deadline. */
static void cmd_all(unsigned which, char out[][LINE_MAX], const char *fmt, ...)
{
    char cmds[N_CLIENTS + 1][600];
    uint64_t t0[N_CLIENTS + 1] = {0};
    size_t got[N_CLIENTS + 1] = {0};
    bool done[N_CLIENTS + 1] = {false};
    for (int i = 1; i <= N_CLIENTS; i++) {
        if (!(which & (1u << i)))
            continue;
        va_list ap;
        va_start(ap, fmt);
        char tmpl[512];
        vsnprintf(tmpl, sizeof(tmpl), fmt, ap);
        va_end(ap);
        /* every "{i}" in the formatted text stands for the client's number */
        size_t o = 0;
        for (const char *p = tmpl; *p != '\0' && o + 4 < sizeof(cmds[i]); p++) {
            if (strncmp(p, "{i}", 3) == 0) {
                cmds[i][o++] = (char)('0' + i);
                p += 2;
            } else {
                cmds[i][o++] = *p;
            }
        }
        cmds[i][o] = '\0';
        t0[i] = ct_now_ms();
        if (ct_proc_send(&clients[i].proc, cmds[i]) < 0)
            fail_msg("client %d is gone (%s)", i, cmds[i]);
        out[i][0] = '\0';
    }
    uint64_t give_up = ct_now_ms() + 60000;
    for (;;) {
        struct pollfd pf[N_CLIENTS + 1];
        int idx[N_CLIENTS + 1], n = 0;
        for (int i = 1; i <= N_CLIENTS; i++)
            if ((which & (1u << i)) && !done[i]) {
                pf[n] = (struct pollfd){.fd = clients[i].proc.out_fd, .events = POLLIN};
                idx[n++] = i;
            }
        if (n == 0)
            break;
        if (ct_now_ms() > give_up)
            fail_msg("a client did not answer '%s' within 60 s", cmds[idx[0]]);
        if (poll(pf, (nfds_t)n, 100) <= 0)
            continue;
        for (int k = 0; k < n; k++) {
            if (pf[k].revents == 0)
                continue;
            int i = idx[k];
            char c;
            ssize_t r = read(pf[k].fd, &c, 1);
            if (r <= 0)
                fail_msg("client %d died during '%s'", i, cmds[i]);
            if (c != '\n' && got[i] + 1 < LINE_MAX) {
                out[i][got[i]++] = c;
                continue;
            }
            out[i][got[i]] = '\0';
            done[i] = true;
            uint64_t took = ct_now_ms() - t0[i], limit = deadline_ms(cmds[i]);
            calls++;
            if (took > limit && took - limit > worst_over_ms)
                worst_over_ms = took - limit;
            if (took > limit + 1000)
                fail_msg("client %d: '%s' took %llu ms, deadline %llu ms (+1 s allowed): '%s'", i,
                         cmds[i], (unsigned long long)took, (unsigned long long)limit, out[i]);
            /* never wrong bytes, whatever else happened */
            if (strstr(out[i], " bad:") != NULL ||
                (strstr(out[i], "bad=") != NULL && strstr(out[i], "bad=0") == NULL))
                fail_msg("client %d: WRONG BYTES for '%s': '%s'", i, cmds[i], out[i]);
        }
    }
}

static long long field(const char *line, const char *name)
{
    char pat[32];
    snprintf(pat, sizeof(pat), " %s=", name);
    const char *p = strstr(line, pat);
    return p != NULL ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

#define ALL ((1u << 1) | (1u << 2) | (1u << 3))

/* Every client in `which` puts KEYS keys "<tag>c<i>-k" and every one reads
 * every other one's; all must succeed when `must` is set. */
static void round_trip(unsigned which, const char *tag, size_t len, bool must)
{
    char out[N_CLIENTS + 1][LINE_MAX];
    cmd_all(which, out, "batch_put %s-c{i}- %d %zu 1{i}", tag, KEYS, len);
    for (int i = 1; i <= N_CLIENTS; i++)
        if ((which & (1u << i)) && must && (atoll(out[i]) < 0 || field(out[i], "ok") != KEYS))
            fail_msg("%s: client %d batch_put: '%s'", tag, i, out[i]);
    for (int shift = 1; shift < N_CLIENTS; shift++) {
        /* client i reads client j = i + shift's keys (both in `which`) */
        unsigned readers = 0;
        for (int i = 1; i <= N_CLIENTS; i++) {
            int j = (i - 1 + shift) % N_CLIENTS + 1;
            if ((which & (1u << i)) && (which & (1u << j)))
                readers |= 1u << i;
        }
        for (int i = 1; i <= N_CLIENTS; i++) {
            if (!(readers & (1u << i)))
                continue;
            int j = (i - 1 + shift) % N_CLIENTS + 1;
            char one[N_CLIENTS + 1][LINE_MAX];
            cmd_all(1u << i, one, "batch_get %s-c%d- %d %zu 1%d", tag, j, KEYS, len, j);
            if (must && field(one[i], "ok") != KEYS)
                fail_msg("%s: client %d reading client %d's keys: '%s'", tag, i, j, one[i]);
        }
    }
    /* a single copying put and get each */
    cmd_all(which, out, "put %s-single-c{i} %zu 7{i}", tag, len * 2);
    for (int i = 1; i <= N_CLIENTS; i++)
        if ((which & (1u << i)) && must && atoll(out[i]) != 0)
            fail_msg("%s: client %d put: '%s'", tag, i, out[i]);
    cmd_all(which, out, "get %s-single-c{i} 7{i}", tag);
    for (int i = 1; i <= N_CLIENTS; i++)
        if ((which & (1u << i)) && must && strstr(out[i], " ok") == NULL)
            fail_msg("%s: client %d get: '%s'", tag, i, out[i]);
}

/* Does the master list client i's segment? */
static bool master_lists(int i)
{
    char *body = NULL;
    int st = tt_http_get(bed.addr[0], master.metrics_port, "/get_all_segments", &body);
    char want[340]; /* Mooncake's format: one name per line */
    snprintf(want, sizeof(want), "%s\n", clients[i].name);
    bool yes = st == 200 && body != NULL && strstr(body, want) != NULL;
    free(body);
    return yes;
}

/* Wait up to ms for the master to list (want) or not list client i. */
static uint64_t wait_listed(int i, bool want, int ms)
{
    uint64_t t0 = ct_now_ms();
    while (master_lists(i) != want) {
        if (ct_now_ms() - t0 > (uint64_t)ms)
            fail_msg("the master still %s client %d's segment %s after %d ms",
                     want ? "does not list" : "lists", i, clients[i].name, ms);
        ct_sleep_ms(200);
    }
    return ct_now_ms() - t0;
}

/* Retry a put+get on client i until it works (at most ms); then it must keep working. */
static uint64_t wait_usable(int i, const char *tag, int ms)
{
    uint64_t t0 = ct_now_ms();
    for (int attempt = 0;; attempt++) {
        char out[N_CLIENTS + 1][LINE_MAX];
        cmd_all(1u << i, out, "put %s-c%d-%d 65536 5%d", tag, i, attempt, i);
        if (atoll(out[i]) == 0) {
            cmd_all(1u << i, out, "get %s-c%d-%d 5%d", tag, i, attempt, i);
            if (strstr(out[i], " ok") != NULL)
                return ct_now_ms() - t0;
        }
        if (ct_now_ms() - t0 > (uint64_t)ms)
            fail_msg("client %d not usable %d ms after healing: '%s'", i, ms, out[i]);
        ct_sleep_ms(300);
    }
}

static void start_all(void)
{
    /* a 4 s read lease: long enough for a first read over 50 ms cables (a
     * 200 ms round trip: the replica list, connecting 4 lanes with their
     * handshake, TCP slow start, the userspace wire on a loaded machine:
     * 2 s was seen to run out), short enough that the remount fence (the
     * last lease + its TTL) ends soon */
    const char *margs[] = {"--client_ttl=3", "--default_kv_lease_ttl=4000", NULL};
    ct_master_opts mo = {.bin = tt_bin("CRESCENT_MASTER_BIN", "crescent-master"),
                         .host = bed.addr[0],
                         .args = margs};
    if (ct_master_start(&master, &mo) < 0) /* we are in host 0's namespace */
        fail_msg("crescent-master did not start on %s", bed.addr[0]);
    char rpc[16], xfer[16], hb[16];
    snprintf(rpc, sizeof(rpc), "%d", RPC_MS);
    snprintf(xfer, sizeof(xfer), "%d", TRANSFER_MS);
    snprintf(hb, sizeof(hb), "%d", HEARTBEAT_MS);
    for (int i = 1; i <= N_CLIENTS; i++) {
        char host_id[32];
        snprintf(host_id, sizeof(host_id), "CRESCENT_HOST_ID=netns-host-%d", i);
        const char *env[] = {host_id, "CRESCENT_LOG=warn", NULL};
        const char *argv[] = {tt_bin("CRESCENT_STORE_CLIENT_BIN", "crescent-test-store-client"),
                              "--master",
                              master.addr,
                              "--hostname",
                              bed.addr[i],
                              "--protocol",
                              "tcp",
                              "--segment",
                              "32M",
                              "--buffer",
                              "8M",
                              "--region",
                              "0",
                              "--rpc-timeout",
                              rpc,
                              "--transfer-timeout",
                              xfer,
                              "--heartbeat",
                              hb,
                              NULL};
        const char *wrapped[48];
        assert_non_null(tt_netbed_wrap(&bed, i, env, argv, wrapped, 48));
        if (tt_child_start(&clients[i], wrapped, LINE_MAX, 20000) < 0)
            fail_msg("store client %d did not start: '%s'", i, clients[i].line);
        print_message("client %d: segment %s\n", i, clients[i].name);
    }
}

static void faults_between_hosts(void **state)
{
    (void)state;
    uint64_t t_start = ct_now_ms();
    start_all();
    for (int i = 1; i <= N_CLIENTS; i++)
        wait_listed(i, true, 5000);

    round_trip(ALL, "clean", 256 * 1024, true);
    print_message("phase 1 (clean) done at %.1f s\n", (ct_now_ms() - t_start) / 1e3);

    for (int h = 0; h <= N_CLIENTS; h++)
        assert_int_equal(tt_netbed_impair(&bed, h, 50, 10, 0), 0);
    round_trip(ALL, "latency", 128 * 1024, true);
    print_message("phase 2 (50 ms +-10 ms on every cable) done at %.1f s\n",
                  (ct_now_ms() - t_start) / 1e3);

    for (int h = 0; h <= N_CLIENTS; h++)
        assert_int_equal(tt_netbed_impair(&bed, h, 0, 0, 1.0), 0);
    round_trip(ALL, "loss", 256 * 1024, true);
    char st[128];
    assert_int_equal(ct_proc_cmd(&bed.wire, "stats 1", st, sizeof(st), 5000), 0);
    print_message("phase 3 (1 %% loss) done at %.1f s; wire of host 1: %s\n",
                  (ct_now_ms() - t_start) / 1e3, st);
    assert_true(field(st, "lost") > 0); /* the fault was real */
    for (int h = 0; h <= N_CLIENTS; h++)
        assert_int_equal(tt_netbed_impair(&bed, h, 0, 0, 0), 0);

    /* 4. client 3 partitioned */
    assert_int_equal(tt_netbed_link(&bed, 3, false), 0);
    uint64_t t_cut = ct_now_ms();
    char out[N_CLIENTS + 1][LINE_MAX];
    cmd_all(1u << 3, out, "put cut-c3 65536 33");
    assert_true(atoll(out[3]) < 0); /* a named error, in time (checked by cmd_all) */
    while (master_lists(3)) {
        round_trip((1u << 1) | (1u << 2), "during-cut", 64 * 1024, false);
        if (ct_now_ms() - t_cut > (TTL_S + 10) * 1000u)
            fail_msg("the master still lists partitioned client 3 after %d s", TTL_S + 10);
    }
    print_message("phase 4: master dropped client 3 after %.1f s (TTL %d s)\n",
                  (ct_now_ms() - t_cut) / 1e3, TTL_S);
    /* the others do not depend on it any more */
    round_trip((1u << 1) | (1u << 2), "after-drop", 64 * 1024, true);
    ct_sleep_ms(1000);
    assert_int_equal(tt_netbed_link(&bed, 3, true), 0);
    uint64_t healed = ct_now_ms();
    wait_listed(3, true, 15000);
    uint64_t usable = wait_usable(3, "healed", 15000);
    print_message("phase 4: client 3 remounted %.1f s after healing, usable after %.1f s\n",
                  (ct_now_ms() - healed) / 1e3, usable / 1e3);
    round_trip(ALL, "rejoined", 128 * 1024, true);

    /* 5. the master partitioned */
    assert_int_equal(tt_netbed_link(&bed, 0, false), 0);
    uint64_t t_mcut = ct_now_ms();
    cmd_all(ALL, out, "put mcut-c{i} 65536 4{i}");
    for (int i = 1; i <= N_CLIENTS; i++)
        if (atoll(out[i]) >= 0)
            fail_msg("client %d put succeeded with the master cut off: '%s'", i, out[i]);
    cmd_all(ALL, out, "health");
    for (int i = 1; i <= N_CLIENTS; i++)
        if (atoll(out[i]) >= 0)
            fail_msg("client %d health OK with the master cut off: '%s'", i, out[i]);
    for (int i = 1; i <= N_CLIENTS; i++)
        wait_listed(i, false, (TTL_S + 10) * 1000);
    print_message("phase 5: master dropped every segment %.1f s after the cut\n",
                  (ct_now_ms() - t_mcut) / 1e3);
    assert_int_equal(tt_netbed_link(&bed, 0, true), 0);
    healed = ct_now_ms();
    for (int i = 1; i <= N_CLIENTS; i++) {
        wait_listed(i, true, 20000);
        wait_usable(i, "mhealed", 15000);
    }
    print_message("phase 5: every client remounted and usable %.1f s after healing\n",
                  (ct_now_ms() - healed) / 1e3);
    round_trip(ALL, "final", 128 * 1024, true);

    for (int i = 1; i <= N_CLIENTS; i++)
        assert_int_equal(tt_child_stop(&clients[i], 20000), 0);
    assert_int_equal(ct_master_stop(&master, 10000), 0);
    print_message("%u calls, none over its deadline by more than 1 s (worst overrun %llu ms); "
                  "total %.1f s\n",
                  calls, (unsigned long long)worst_over_ms, (ct_now_ms() - t_start) / 1e3);
}

static int teardown(void **state)
{
    tt_teardown(state);
    tt_netbed_destroy(&bed);
    return 0;
}

int main(void)
{
    int rc = tt_netbed_create(&bed, N_CLIENTS + 1,
                              tt_bin("CRESCENT_NETWIRE_BIN", "crescent-test-netwire"));
    if (rc == TT_SKIP)
        return TT_SKIP;
    if (rc < 0) {
        fprintf(stderr, "netns test bed could not be built\n");
        return 1;
    }
    if (tt_netbed_enter(&bed, 0) < 0) {
        tt_netbed_destroy(&bed);
        fprintf(stderr, "cannot enter the master's namespace\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(faults_between_hosts, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
