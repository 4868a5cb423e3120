/*
 * ha_bench.c - "crescent-bench ha": the HA master (docs/ha.md) measured.
 *
 *   throughput  "crescent-bench master" (a child process of this binary,
 *               --json) against a plain master and against the leader of an
 *               HA cluster (etcd + 3 masters, sync replication), alternated
 *               --rounds times in one run; prints ops/s and the HA/plain ratio
 *               per operation (best round of each).
 *   failover    --runs times: wait until both standbys are in sync, kill -9
 *               the leader, time until a PUT_START + PUT_END through an
 *               etcd:// master client succeeds again; restart the killed
 *               master (it rejoins as a standby). Prints each time, p50, max.
 *
 * etcd: Debian's /usr/bin/etcd (--etcd-bin), on free ports with a private data
 * directory, stopped at the end; without it the bench exits 77 (not measured). Masters:
 * --master-bin (default: next to this binary). Everything on 127.0.0.1.
 */
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/net.h"
#include "bench.h"
#include "crescent/status.h"
#include "master_proc.h"
#include "metadata/etcd.h"
#include "options.h"
#include "servers.h"
#include "store/master_client.h"
#include "tool_util.h"

#define HA_MASTERS 3
#define MAX_RUNS   100

typedef struct hb_opts {
    uint32_t runs, rounds;
    const char *duration, *ops, *master_bin, *etcd_bin;
    const char *log_dir; /* the HA masters' logs (ha-<i>.log, appended); NULL: /dev/null */
    uint32_t lease_ttl;
    const char *connections, *threads; /* passed to the master bench (NULL: its defaults) */
    const char *client, *depth;        /* likewise: lib|raw, and raw's ops in flight */
} hb_opts;

typedef struct hb_cluster {
    ct_server etcd;
    ct_master m[HA_MASTERS];
    char etcd_flag[128], ttl_flag[64];
    crm_etcd *etcd_client;
} hb_cluster;

static int start_ha_master(hb_cluster *c, int i, const hb_opts *o)
{
    const char *args[] = {"--enable_ha", c->etcd_flag, c->ttl_flag, "--client_ttl=600", NULL};
    char log[PATH_MAX];
    snprintf(log, sizeof(log), "%s/ha-%d.log", o->log_dir, i);
    ct_master_opts mo = {
        .bin = o->master_bin, .args = args, .log_path = o->log_dir ? log : "/dev/null"};
    return ct_master_start(&c->m[i], &mo);
}

/* The leader's address from etcd and how many standbys its ISR lists. */
static int leader_of(hb_cluster *c, char *addr, size_t cap, int *isr)
{
    crm_etcd_kv kv;
    if (crm_etcd_get(c->etcd_client, "mooncake-store/mooncake_cluster/master_view", &kv, NULL) < 0)
        return -1;
    snprintf(addr, cap, "%s", (const char *)kv.value);
    uint64_t term = (uint64_t)kv.create_revision;
    crm_etcd_kv_clear(&kv);
    *isr = 0;
    if (crm_etcd_get(c->etcd_client, "mooncake-store/mooncake_cluster/crescent/isr", &kv, NULL) ==
        0) {
        if (strtoull((const char *)kv.value, NULL, 10) == term)
            for (const char *p = (const char *)kv.value; *p; p++)
                *isr += *p == ',';
        crm_etcd_kv_clear(&kv);
    }
    return 0;
}

static int wait_in_sync(hb_cluster *c, int want, char *addr, size_t cap, int timeout_ms)
{
    uint64_t end = crb_now_ms() + (uint64_t)timeout_ms;
    int isr = 0;
    while (crb_now_ms() < end) {
        if (leader_of(c, addr, cap, &isr) == 0 && isr >= want)
            return 0;
        usleep(20000);
    }
    fprintf(stderr, "ha bench: no leader with %d standbys in sync within %d ms (%d)\n", want,
            timeout_ms, isr);
    return -1;
}

/* --- replication counters (master_ha_* in /metrics) -------------------------- */

enum { M_FRAMES, M_ENTRIES, M_ACKS, M_COMMITS, M_HELD, M_HELD_S, M_APPLY_S, M_ROLE, M_N };
static const char *const metric_names[M_N] = {
    "master_ha_frames_total",        "master_ha_entries_total",
    "master_ha_acks_total",          "master_ha_commits_total",
    "master_ha_held_replies_total",  "master_ha_held_seconds_total",
    "master_ha_apply_seconds_total", "master_ha_role"};

/* GET /metrics of m and read the counters above (0 where absent). */
static int scrape(const ct_master *m, double *v)
{
    memset(v, 0, sizeof(double) * M_N);
    int fd = crb_connect(m->host, m->metrics_port, 2000);
    if (fd < 0)
        return -1;
    static char text[1 << 17];
    const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    size_t have = 0;
    if (write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1)) {
        close(fd);
        return -1;
    }
    for (ssize_t n;
         have + 1 < sizeof(text) && (n = read(fd, text + have, sizeof(text) - 1 - have)) > 0;)
        have += (size_t)n;
    close(fd);
    text[have] = '\0';
    for (int i = 0; i < M_N; i++) {
        size_t len = strlen(metric_names[i]);
        for (const char *p = strstr(text, metric_names[i]); p != NULL;
             p = strstr(p + len, metric_names[i])) {
            if ((p == text || p[-1] == '\n') && p[len] == ' ') {
                v[i] = strtod(p + len + 1, NULL);
                break;
            }
        }
    }
    return 0;
}

static void scrape_all(hb_cluster *c, double v[HA_MASTERS][M_N])
{
    for (int i = 0; i < HA_MASTERS; i++)
        if (!ct_master_running(&c->m[i]) || scrape(&c->m[i], v[i]) < 0)
            memset(v[i], 0, sizeof(v[i]));
}

/* What replication did during one HA round (counter differences). */
static void print_repl(double before[HA_MASTERS][M_N], double after[HA_MASTERS][M_N], double secs)
{
    double frames = 0, entries = 0, acks = 0, commits = 0, held = 0, held_s = 0;
    double sb_frames = 0, sb_entries = 0, sb_acks = 0, sb_apply = 0;
    for (int i = 0; i < HA_MASTERS; i++) {
        double d[M_N];
        for (int k = 0; k < M_N; k++)
            d[k] = after[i][k] - before[i][k];
        if (after[i][M_ROLE] == 2) {
            frames = d[M_FRAMES], entries = d[M_ENTRIES], acks = d[M_ACKS];
            commits = d[M_COMMITS], held = d[M_HELD], held_s = d[M_HELD_S];
        } else {
            sb_frames += d[M_FRAMES], sb_entries += d[M_ENTRIES], sb_acks += d[M_ACKS];
            sb_apply += d[M_APPLY_S];
        }
    }
    printf("  replication: leader %.0f frames/s (all standbys), %.1f entries/frame, %.0f acks/s, "
           "%.0f commits/s, %.0f held replies/s, %.0f us held on average; standbys %.0f "
           "frames/s, %.1f entries/frame, %.0f acks/s, %.1f us applying a frame\n",
           frames / secs, frames > 0 ? entries / frames : 0, acks / secs, commits / secs,
           held / secs, held > 0 ? held_s * 1e6 / held : 0, sb_frames / secs,
           sb_frames > 0 ? sb_entries / sb_frames : 0, sb_acks / secs,
           sb_frames > 0 ? sb_apply * 1e6 / sb_frames : 0);
}

/* CPU seconds (user + system) used so far by pid, or by this process's
 * reaped children (pid 0: the bench child and the plain master it ran). */
static double cpu_seconds(pid_t pid)
{
    if (pid == 0) {
        struct rusage ru;
        getrusage(RUSAGE_CHILDREN, &ru);
        return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    }
    char path[64], line[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    const char *p = strrchr(line, ')'); /* fields after "(comm)": state is field 3 */
    unsigned long long ut = 0, st = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* CPU seconds of every HA master (cpu[i]) and their sum. */
static double masters_cpu(const hb_cluster *c, double cpu[HA_MASTERS])
{
    double t = 0;
    for (int i = 0; i < HA_MASTERS; i++) {
        cpu[i] = ct_master_running(&c->m[i]) ? cpu_seconds(c->m[i].p.pid) : 0;
        t += cpu[i];
    }
    return t;
}

/* Run "crescent-bench master ... --json" as a child; keep the best ops/s per
 * op name in `into`, and print this round's ops/s of each op after `label`
 * (with one op, also the CPU microseconds per op of the bench and the
 * masters, from the CPU seconds they used in the round: bench_cpu,
 * master_cpu). */
static void print_round(const char *label, json_t *round, double secs, double bench_cpu,
                        double master_cpu)
{
    const char *op;
    json_t *v;
    double total = 0;
    int n = 0;
    printf("  %s ops/s:", label);
    json_object_foreach(round, op, v)
    {
        printf(" %s %.0f", op, json_number_value(v));
        total += json_number_value(v);
        n++;
    }
    if (n == 1 && total > 0)
        printf("; CPU per op: bench %.1f us, master%s %.1f us", bench_cpu * 1e6 / (total * secs),
               label[0] == 'H' ? "s" : "", master_cpu * 1e6 / (total * secs));
    printf("\n");
}

static int run_master_bench(const char *self, const hb_opts *o, const char *target_flag,
                            const char *target, json_t *into, json_t *round)
{
    const char *argv[20] = {self,        "master", target_flag, target,  "--duration",
                            o->duration, "--ops",  o->ops,      "--json"};
    size_t n = 9;
    /* The master bench's client shape, where given (NULL: its defaults). */
    const char *pass[][2] = {{"--connections", o->connections},
                             {"--threads", o->threads},
                             {"--client", o->client},
                             {"--depth", o->depth}};
    for (size_t k = 0; k < sizeof(pass) / sizeof(pass[0]); k++) {
        if (pass[k][1] != NULL) {
            argv[n++] = pass[k][0];
            argv[n++] = pass[k][1];
        }
    }
    argv[n] = NULL;
    static char out[1 << 16], err[1 << 14];
    int st = ct_run(argv, out, sizeof(out), err, sizeof(err), 600000);
    if (st != 0) {
        fprintf(stderr, "ha bench: master bench exited %d: %s\n", st, err);
        return -1;
    }
    for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        const char *op = j ? json_string_value(json_object_get(j, "op")) : NULL;
        double v = j ? json_number_value(json_object_get(j, "ops_per_s")) : 0;
        if (op != NULL && round != NULL)
            json_object_set_new(round, op, json_real(v));
        if (op != NULL) {
            double best = json_number_value(json_object_get(into, op));
            if (v > best)
                json_object_set_new(into, op, json_real(v));
        }
        json_decref(j);
    }
    return 0;
}

static int put_once(crc_master *m, crp_rpc_uuid cid, const char *key, int timeout_ms)
{
    crp_rpc_req req = {.op = CRP_RPC_PUT_START};
    req.u.put_start = (crp_rpc_put_start_req){cid, (char *)key, 4096, {.replica_num = 1}};
    crp_rpc_resp resp;
    int rc = crc_master_call(m, &req, &resp, timeout_ms);
    if (rc == 0) {
        rc = resp.status;
        crp_rpc_resp_clear(&resp);
    }
    if (rc < 0)
        return rc;
    crp_rpc_req end = {.op = CRP_RPC_PUT_END};
    end.u.owner_key = (crp_rpc_owner_key_req){cid, (char *)key};
    rc = crc_master_call(m, &end, &resp, timeout_ms);
    if (rc == 0) {
        rc = resp.status;
        crp_rpc_resp_clear(&resp);
    }
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int failover_runs(hb_cluster *c, const hb_opts *o)
{
    char url[128], addr[300];
    snprintf(url, sizeof(url), "etcd://%s", c->etcd.endpoint);
    crp_rpc_uuid cid;
    crb_random_bytes(&cid, sizeof(cid));
    if (wait_in_sync(c, HA_MASTERS - 1, addr, sizeof(addr), 20000) < 0)
        return -1;
    crc_master *m = NULL;
    int rc = crc_master_connect(url, cid, 5000, &m);
    if (rc < 0) {
        fprintf(stderr, "ha bench: connect %s: %s\n", url, cr_last_error_message());
        return -1;
    }
    crp_rpc_req mount = {.op = CRP_RPC_MOUNT_SEGMENT};
    mount.u.mount = (crp_rpc_mount_req){cid, {"ha-bench", 1ull << 44, 1ull << 40, 1}};
    crp_rpc_resp resp;
    rc = crc_master_call(m, &mount, &resp, 5000);
    if (rc == 0) {
        rc = resp.status;
        crp_rpc_resp_clear(&resp);
    }
    uint64_t took[MAX_RUNS];
    int done = 0;
    char key[64];
    for (uint32_t run = 0; rc == 0 && run < o->runs; run++) {
        if (wait_in_sync(c, HA_MASTERS - 1, addr, sizeof(addr), 20000) < 0) {
            rc = -1;
            break;
        }
        snprintf(key, sizeof(key), "before-%" PRIu32, run);
        if ((rc = put_once(m, cid, key, 5000)) < 0)
            break;
        int victim = -1;
        for (int i = 0; i < HA_MASTERS; i++)
            if (strcmp(c->m[i].addr, addr) == 0)
                victim = i;
        if (victim < 0) {
            fprintf(stderr, "ha bench: leader %s is none of ours\n", addr);
            rc = -1;
            break;
        }
        ct_master_kill(&c->m[victim]);
        uint64_t t0 = crb_now_ms();
        for (int i = 0;; i++) {
            snprintf(key, sizeof(key), "after-%" PRIu32 "-%d", run, i);
            if (put_once(m, cid, key, 5000) == 0)
                break;
            if (crb_now_ms() - t0 > 30000) {
                fprintf(stderr, "ha bench: no put within 30 s of the failover\n");
                rc = -1;
                break;
            }
        }
        if (rc < 0)
            break;
        took[done++] = crb_now_ms() - t0;
        printf("failover run %d: first put %" PRIu64 " ms after kill -9 of the leader\n", run + 1,
               took[done - 1]);
        fflush(stdout);
        if (start_ha_master(c, victim, o) < 0) {
            rc = -1;
            break;
        }
    }
    crc_master_close(m);
    if (done > 0) {
        qsort(took, (size_t)done, sizeof(took[0]), cmp_u64);
        printf("failover: %d runs, p50 %" PRIu64 " ms, max %" PRIu64 " ms (lease TTL %" PRIu32
               " s)\n",
               done, took[done / 2], took[done - 1], o->lease_ttl);
    }
    return rc < 0 ? -1 : 0;
}

static void usage(FILE *to)
{
    fprintf(to, "usage: crescent-bench ha [--runs N (5)] [--rounds N (2)] [--duration S (1)]\n"
                "         [--ops exist,put,get,batch_put] [--lease-ttl S (5)]\n"
                "         [--master-bin PATH] [--etcd-bin PATH (/usr/bin/etcd)]\n"
                "         [--log-dir DIR (the HA masters' logs, ha-N.log; default none)]\n"
                "         [--connections N --threads N (the master bench's client: its\n"
                "          connections and caller threads per connection; default 4 x 16)]\n"
                "         [--client lib|raw --depth N (the master bench's client kind; raw:\n"
                "          one thread per connection keeping --depth ops in flight)]\n");
}

int cb_ha_main(int argc, char **argv)
{
    static char bin[PATH_MAX], self[PATH_MAX];
    hb_opts o = {5,    2,    "1", "exist,put,get,batch_put", NULL, CT_ETCD_BIN, NULL, 5, NULL,
                 NULL, NULL, NULL};
    const ct_option opts[] = {
        CT_U32("--runs", &o.runs, 1, MAX_RUNS),
        CT_U32("--rounds", &o.rounds, 1, 1000),
        CT_STRING("--duration", &o.duration),
        CT_STRING("--ops", &o.ops),
        CT_U32("--lease-ttl", &o.lease_ttl, 2, 3600),
        CT_STRING("--master-bin", &o.master_bin),
        CT_STRING("--etcd-bin", &o.etcd_bin),
        CT_STRING("--log-dir", &o.log_dir),
        CT_STRING("--connections", &o.connections),
        CT_STRING("--threads", &o.threads),
        CT_STRING("--client", &o.client),
        CT_STRING("--depth", &o.depth),
    };
    int pr = ct_parse_options(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), NULL, NULL,
                              CB_PROG " ha");
    if (pr == CT_OPTS_HELP) {
        usage(stdout);
        return 0;
    }
    if (pr < 0) {
        usage(stderr);
        return 2;
    }
    if (o.master_bin == NULL)
        o.master_bin = ct_default_master_bin(bin, sizeof(bin));
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    if (access(o.etcd_bin, X_OK) != 0) {
        fprintf(stderr, "ha bench: %s not found (Debian's etcd-server): not measured\n",
                o.etcd_bin);
        return 77;
    }
    hb_cluster c;
    memset(&c, 0, sizeof(c));
    if (ct_etcd_start(&c.etcd, o.etcd_bin) != 0)
        return 1;
    snprintf(c.etcd_flag, sizeof(c.etcd_flag), "--etcd_endpoints=%s", c.etcd.endpoint);
    snprintf(c.ttl_flag, sizeof(c.ttl_flag), "--ha_lease_ttl_sec=%" PRIu32, o.lease_ttl);
    crm_etcd_config ec = {.endpoints = c.etcd.endpoint};
    int rc = crm_etcd_open(&ec, &c.etcd_client);
    for (int i = 0; rc == 0 && i < HA_MASTERS; i++)
        rc = start_ha_master(&c, i, &o);
    char addr[300];
    if (rc == 0)
        rc = wait_in_sync(&c, HA_MASTERS - 1, addr, sizeof(addr), 20000);

    /* Throughput: plain master vs HA leader, alternated in this run. */
    json_t *plain = json_object(), *ha = json_object();
    for (uint32_t r = 0; rc == 0 && r < o.rounds; r++) {
        /* The plain master: the HA masters' flags but --enable_ha. */
        ct_master pm;
        const char *pargs[] = {"--client_ttl=600", NULL};
        ct_master_opts pmo = {.bin = o.master_bin, .args = pargs, .log_path = "/dev/null"};
        if (ct_master_start(&pm, &pmo) < 0) {
            rc = -1;
            break;
        }
        double cpu0 = cpu_seconds(0), pm0 = cpu_seconds(pm.p.pid);
        uint64_t p0 = crb_now_ms();
        json_t *pround = json_object(), *hround = json_object();
        rc = run_master_bench(self, &o, "--master", pm.addr, plain, pround);
        double secs = strtod(o.duration, NULL);
        if (rc == 0) {
            double bc = cpu_seconds(0) - cpu0, mc = cpu_seconds(pm.p.pid) - pm0;
            printf("plain round %" PRIu32 ": bench used %.2f CPU s, the plain master %.2f, in "
                   "%.2f s\n",
                   r + 1, bc, mc, (double)(crb_now_ms() - p0) / 1000.0);
            print_round("plain", pround, secs, bc, mc);
        }
        ct_master_stop(&pm, 10000);
        if (rc == 0)
            rc = wait_in_sync(&c, HA_MASTERS - 1, addr, sizeof(addr), 20000);
        double before[HA_MASTERS][M_N], after[HA_MASTERS][M_N];
        scrape_all(&c, before);
        uint64_t t0 = crb_now_ms();
        double each0[HA_MASTERS], each1[HA_MASTERS];
        double bench0 = cpu_seconds(0), ha0 = masters_cpu(&c, each0);
        if (rc == 0)
            rc = run_master_bench(self, &o, "--master", addr, ha, hround);
        double bench1 = cpu_seconds(0), ha1 = masters_cpu(&c, each1);
        scrape_all(&c, after);
        if (rc == 0) {
            double lead = 0;
            for (int i = 0; i < HA_MASTERS; i++)
                if (after[i][M_ROLE] == 2)
                    lead = each1[i] - each0[i];
            printf("HA round %" PRIu32 ": bench used %.2f CPU s, the 3 HA masters %.2f (the "
                   "leader %.2f), in %.2f s\n",
                   r + 1, bench1 - bench0, ha1 - ha0, lead, (double)(crb_now_ms() - t0) / 1000.0);
            print_repl(before, after, (double)(crb_now_ms() - t0) / 1000.0);
            print_round("HA", hround, secs, bench1 - bench0, ha1 - ha0);
        }
        json_decref(pround);
        json_decref(hround);
    }
    if (rc == 0) {
        printf("throughput (best of %" PRIu32
               " rounds, %s s each; 3 HA masters and the bench share this "
               "machine)\n%-12s %12s %12s %8s\n",
               o.rounds, o.duration, "op", "plain ops/s", "HA ops/s", "HA/plain");
        const char *op;
        json_t *v;
        json_object_foreach(plain, op, v)
        {
            double p = json_number_value(v), h = json_number_value(json_object_get(ha, op));
            printf("%-12s %12.0f %12.0f %8.2f\n", op, p, h, p > 0 ? h / p : 0);
        }
        fflush(stdout);
    }
    json_decref(plain);
    json_decref(ha);
    if (rc == 0)
        rc = failover_runs(&c, &o);
    for (int i = 0; i < HA_MASTERS; i++)
        if (ct_master_running(&c.m[i]))
            ct_master_stop(&c.m[i], 10000);
    crm_etcd_close(c.etcd_client);
    ct_server_stop(&c.etcd);
    return rc == 0 ? 0 : 1;
}
