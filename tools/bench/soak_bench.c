/*
 * soak_bench.c - "crescent-bench soak": a bounded soak of the store with
 * crashes, every byte checked, resource use watched.
 *
 * Roles (one binary):
 *   orchestrator (default) spawns crescent-master and --clients client
 *       processes ("soak --role client", /proc/self/exe through the shared
 *       spawner, tools/common/proc.h). Every --kill-every seconds it kill -9s
 *       a random client other than client 0 (the survivor) and starts it
 *       again as a new incarnation, or, once per --master-every seconds, kill
 *       -9s the master and restarts it on the same ports. Every --sample
 *       seconds it prints the RSS and open fds of every process and the
 *       clients' counters. At the end it stops everything and prints a
 *       verdict: no wrong bytes anywhere, every client still working, and RSS
 *       and fd counts flat after warm-up for every process incarnation that
 *       lived long enough to judge (RSS peak <= baseline * 1.10 + 16 MiB, fds
 *       peak <= baseline + 4, baseline = its first sample at least --warmup
 *       seconds into its life; at least 3 later samples, else "not judged").
 *       Exit 0 only if all of that holds.
 *   client: one cr_store; loops a mix of upsert / put / get / batch_upsert /
 *       batch_put / batch_get / remove / exist over its own keys
 *       "soak/c<id>/<n>" (it is their only writer) and reads of the other
 *       clients' keys, until its stdin closes. Every value carries a header
 *       (magic, hash of its key, seed, length) followed by pattern(seed), so
 *       any reader verifies any value: the header must name the key that was
 *       asked for and every byte must match ("bad"). For its own keys the
 *       client also knows what it last upserted: a read of an older value
 *       after a successful upsert is "stale". Not-found (after a master
 *       restart, an eviction, the owner's expiry) and named errors during
 *       faults are counted, not failures. A line "STAT ..." every second.
 *
 * Not a CI test at full length (10 minutes is the recorded run, see
 * docs/PERFORMANCE.md); bench_soak_smoke runs it for a few seconds.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "crescent/status.h"
#include "crescent/store.h"
#include "master_proc.h"
#include "options.h"
#include "tool_util.h"

#define SO_MAX_CLIENTS 16
#define SO_OWN_KEYS    48
#define SO_BATCH       4
#define SO_MAGIC       0x314c41564b414f53ull /* "SOAKVAL1" */
#define SO_HEADER      32
#define SO_MAX_SAMPLES 4096

typedef struct so_opts {
    const char *role;
    double duration, kill_every, master_every, sample, warmup;
    uint32_t clients, id;
    uint64_t max_value;
    const char *master_bin, *master_addr;
    bool quiet;
} so_opts;

/* ---- values --------------------------------------------------------------- */

static uint64_t key_hash(const char *key)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = key; *p != '\0'; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    return h;
}

static void make_value(uint8_t *v, uint64_t len, const char *key, uint64_t seed)
{
    uint64_t head[4] = {SO_MAGIC, key_hash(key), seed, len};
    memcpy(v, head, sizeof(head));
    cb_pattern_fill(v + SO_HEADER, SO_HEADER, len - SO_HEADER, seed);
}

/* 0 and *seed when v (got bytes) is a whole, uncorrupted value of key. */
static int check_value(const uint8_t *v, int64_t got, const char *key, uint64_t *seed, char *why,
                       size_t why_len)
{
    uint64_t head[4];
    if (got < SO_HEADER) {
        snprintf(why, why_len, "%" PRId64 " bytes, shorter than a header", got);
        return -1;
    }
    memcpy(head, v, sizeof(head));
    if (head[0] != SO_MAGIC || head[1] != key_hash(key) || head[3] != (uint64_t)got) {
        snprintf(why, why_len,
                 "header magic %016" PRIx64 " key-hash %s length %" PRIu64 " (got %" PRId64 ")",
                 head[0], head[1] == key_hash(key) ? "ok" : "OF ANOTHER KEY", head[3], got);
        return -1;
    }
    uint8_t want[4096];
    for (uint64_t off = SO_HEADER; off < (uint64_t)got; off += sizeof(want)) {
        uint64_t n = (uint64_t)got - off < sizeof(want) ? (uint64_t)got - off : sizeof(want);
        cb_pattern_fill(want, off, n, head[2]);
        int64_t bad = cb_first_mismatch(v + off, want, (size_t)n);
        if (bad >= 0) {
            snprintf(why, why_len, "byte %" PRIu64 " differs", off + (uint64_t)bad);
            return -1;
        }
    }
    *seed = head[2];
    return 0;
}

/* ---- client ----------------------------------------------------------------- */

typedef struct so_counts {
    uint64_t ops, ok, notfound, errors, bad, stale;
} so_counts;

#define SO_CODES 12

typedef struct so_client {
    cr_store *store;
    int codes[SO_CODES]; /* the errors seen, most frequent kinds */
    uint64_t code_counts[SO_CODES];
    const so_opts *o;
    uint64_t rng;
    uint64_t seeds[SO_OWN_KEYS]; /* last upserted seed; 0 = unknown, UINT64_MAX = absent */
    so_counts c;
    uint8_t *buf;
} so_client;

static uint64_t next_rand(so_client *cl)
{
    cl->rng ^= cl->rng << 13;
    cl->rng ^= cl->rng >> 7;
    cl->rng ^= cl->rng << 17;
    return cl->rng;
}

static void own_key(const so_client *cl, unsigned n, char *out, size_t len)
{
    snprintf(out, len, "soak/c%u/%u", cl->o->id, n);
}

static uint64_t value_len(so_client *cl)
{
    uint64_t span = cl->o->max_value - 4096;
    return 4096 + (span > 0 ? next_rand(cl) % span : 0);
}

static void count_rc(so_client *cl, int64_t rc)
{
    cl->c.ops++;
    if (rc >= 0)
        cl->c.ok++;
    else if (rc == CR_OBJECT_NOT_FOUND)
        cl->c.notfound++;
    else {
        cl->c.errors++;
        for (int k = 0; k < SO_CODES; k++) {
            if (cl->codes[k] == (int)rc || cl->codes[k] == 0) {
                cl->codes[k] = (int)rc;
                cl->code_counts[k]++;
                break;
            }
        }
    }
}

/* A value read for key: integrity always; for our own key n, staleness. */
static void verify(so_client *cl, const char *key, int own, const uint8_t *v, int64_t got)
{
    uint64_t seed = 0;
    char why[160];
    if (check_value(v, got, key, &seed, why, sizeof(why)) < 0) {
        cl->c.bad++;
        fprintf(stderr, CB_PROG " soak client %u: WRONG BYTES for %s: %s\n", cl->o->id, key, why);
        return;
    }
    if (own >= 0 && cl->seeds[own] != 0 && cl->seeds[own] != UINT64_MAX && seed != cl->seeds[own]) {
        cl->c.stale++;
        fprintf(stderr,
                CB_PROG " soak client %u: STALE %s: seed %" PRIu64 ", upserted %" PRIu64 "\n",
                cl->o->id, key, seed, cl->seeds[own]);
    }
}

static void op_upsert(so_client *cl, bool put_form)
{
    unsigned n = (unsigned)(next_rand(cl) % SO_OWN_KEYS);
    if (put_form && cl->seeds[n] != UINT64_MAX)
        return; /* put leaves an existing key as it is: only for keys known absent */
    char key[64];
    own_key(cl, n, key, sizeof(key));
    uint64_t len = value_len(cl), seed = (next_rand(cl) | 1) & (UINT64_MAX >> 1);
    make_value(cl->buf, len, key, seed);
    int rc = put_form ? cr_store_put(cl->store, key, cl->buf, len, NULL)
                      : cr_store_upsert(cl->store, key, cl->buf, len, NULL);
    count_rc(cl, rc);
    /* a failed upsert may or may not have replaced the value */
    cl->seeds[n] = rc == 0 ? seed : 0;
}

static void op_get(so_client *cl, bool own)
{
    char key[64];
    int n = (int)(next_rand(cl) % SO_OWN_KEYS);
    if (own) {
        own_key(cl, (unsigned)n, key, sizeof(key));
    } else {
        unsigned other = (unsigned)(next_rand(cl) % cl->o->clients);
        snprintf(key, sizeof(key), "soak/c%u/%d", other, n);
        if (other == cl->o->id)
            own = true;
    }
    int64_t rc = cr_store_get_into(cl->store, key, cl->buf, cl->o->max_value);
    count_rc(cl, rc);
    if (rc >= 0)
        verify(cl, key, own ? n : -1, cl->buf, rc);
    else if (own && rc == CR_OBJECT_NOT_FOUND)
        cl->seeds[n] = 0; /* gone (master restart, eviction): unknown again */
}

static void op_batch_upsert(so_client *cl, bool put_form)
{
    char keys[SO_BATCH][64];
    const char *kp[SO_BATCH];
    const void *vals[SO_BATCH];
    size_t sizes[SO_BATCH];
    unsigned ns[SO_BATCH];
    uint64_t seeds[SO_BATCH];
    int results[SO_BATCH];
    uint8_t *bufs[SO_BATCH];
    size_t n = 0;
    unsigned first = (unsigned)(next_rand(cl) % (SO_OWN_KEYS - SO_BATCH));
    for (unsigned k = 0; k < SO_BATCH; k++) {
        unsigned idx = first + k;
        if (put_form && cl->seeds[idx] != UINT64_MAX)
            continue;
        own_key(cl, idx, keys[n], sizeof(keys[n]));
        sizes[n] = value_len(cl) / 2 + SO_HEADER;
        seeds[n] = (next_rand(cl) | 1) & (UINT64_MAX >> 1);
        bufs[n] = malloc(sizes[n]);
        if (bufs[n] == NULL)
            break;
        make_value(bufs[n], sizes[n], keys[n], seeds[n]);
        kp[n] = keys[n];
        vals[n] = bufs[n];
        ns[n] = idx;
        n++;
    }
    if (n == 0)
        return;
    int rc = put_form ? cr_store_batch_put(cl->store, kp, vals, sizes, n, NULL, results)
                      : cr_store_batch_upsert(cl->store, kp, vals, sizes, n, NULL, results);
    for (size_t k = 0; k < n; k++) {
        int r = rc < 0 ? rc : results[k];
        count_rc(cl, r);
        cl->seeds[ns[k]] = r == 0 ? seeds[k] : 0;
        free(bufs[k]);
    }
}

static void op_batch_get(so_client *cl)
{
    char keys[SO_BATCH][64];
    const char *kp[SO_BATCH];
    int own[SO_BATCH];
    void *vals[SO_BATCH] = {NULL};
    int64_t results[SO_BATCH];
    for (unsigned k = 0; k < SO_BATCH; k++) {
        unsigned owner = (unsigned)(next_rand(cl) % cl->o->clients);
        int n = (int)(next_rand(cl) % SO_OWN_KEYS);
        snprintf(keys[k], sizeof(keys[k]), "soak/c%u/%d", owner, n);
        own[k] = owner == cl->o->id ? n : -1;
        kp[k] = keys[k];
    }
    int rc = cr_store_batch_get(cl->store, kp, SO_BATCH, vals, results);
    for (unsigned k = 0; k < SO_BATCH; k++) {
        int64_t r = rc < 0 ? rc : results[k];
        count_rc(cl, r);
        if (r >= 0 && vals[k] != NULL)
            verify(cl, keys[k], own[k], vals[k], r);
        free(vals[k]);
    }
}

static void op_remove(so_client *cl)
{
    unsigned n = (unsigned)(next_rand(cl) % SO_OWN_KEYS);
    char key[64];
    own_key(cl, n, key, sizeof(key));
    int rc = cr_store_remove(cl->store, key, false);
    count_rc(cl, rc);
    if (rc == 0 || rc == CR_OBJECT_NOT_FOUND)
        cl->seeds[n] = UINT64_MAX;
    else
        cl->seeds[n] = 0;
}

static void op_exist(so_client *cl)
{
    char key[64];
    own_key(cl, (unsigned)(next_rand(cl) % SO_OWN_KEYS), key, sizeof(key));
    count_rc(cl, cr_store_exist(cl->store, key));
}

static void print_stat(const so_client *cl, const char *tag)
{
    printf("%s ops=%" PRIu64 " ok=%" PRIu64 " notfound=%" PRIu64 " errors=%" PRIu64 " bad=%" PRIu64
           " stale=%" PRIu64 "\n",
           tag, cl->c.ops, cl->c.ok, cl->c.notfound, cl->c.errors, cl->c.bad, cl->c.stale);
    fflush(stdout);
}

static int client_main(const so_opts *o)
{
    setenv("CRESCENT_LOG", "error", 0);
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = o->master_addr;
    cfg.global_segment_size = 32ull << 20;
    cfg.local_buffer_size = 8ull << 20;
    cfg.rpc_timeout_ms = 2000;
    cfg.transfer_timeout_ms = 5000;
    cfg.heartbeat_interval_ms = 500;
    so_client cl = {.o = o};
    cl.rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)getpid() << 16) ^ o->id;
    cl.buf = malloc(o->max_value);
    if (cl.buf == NULL)
        return CB_EXIT_FAIL;
    /* the master may be restarting: retry for 30 s */
    uint64_t t0 = cb_now_ns();
    int rc;
    while ((rc = cr_store_setup(&cfg, &cl.store)) < 0 && cb_now_ns() - t0 < 30000000000ull)
        ct_sleep_ms(200);
    if (rc < 0) {
        printf("FAIL %d %s\n", rc, cr_last_error_message());
        free(cl.buf);
        return CB_EXIT_FAIL;
    }
    char name[300];
    cr_store_hostname(cl.store, name, sizeof(name));
    printf("READY %s\n", name);
    fflush(stdout);
    uint64_t last_stat = cb_now_ns();
    for (;;) {
        struct pollfd pf = {.fd = 0, .events = POLLIN};
        if (poll(&pf, 1, 0) > 0) {
            char tmp[64];
            if (read(0, tmp, sizeof(tmp)) <= 0)
                break; /* the orchestrator closed our stdin (or died) */
        }
        unsigned r = (unsigned)(next_rand(&cl) % 100);
        if (r < 22)
            op_upsert(&cl, false);
        else if (r < 27)
            op_upsert(&cl, true);
        else if (r < 47)
            op_get(&cl, true);
        else if (r < 62)
            op_get(&cl, false);
        else if (r < 70)
            op_batch_upsert(&cl, false);
        else if (r < 74)
            op_batch_upsert(&cl, true);
        else if (r < 86)
            op_batch_get(&cl);
        else if (r < 96)
            op_remove(&cl);
        else
            op_exist(&cl);
        if (cb_now_ns() - last_stat > 1000000000ull) {
            print_stat(&cl, "STAT");
            last_stat = cb_now_ns();
        }
    }
    for (int k = 0; k < SO_CODES && cl.codes[k] != 0; k++)
        fprintf(stderr, CB_PROG " soak client %u: %" PRIu64 " x %s\n", o->id, cl.code_counts[k],
                cr_status_name(cl.codes[k]));
    print_stat(&cl, "FINAL");
    cr_store_destroy(cl.store);
    free(cl.buf);
    return cl.c.bad + cl.c.stale == 0 ? CB_EXIT_OK : CB_EXIT_FAIL;
}

/* ---- orchestrator -------------------------------------------------------------- */

typedef struct so_sample {
    double age; /* seconds since this incarnation started */
    uint64_t rss_kib, fds;
} so_sample;

/* One process incarnation: a client's or the master's life between kills. */
typedef struct so_life {
    char label[32];
    so_sample *samples;
    size_t n;
    double born;
} so_life;

typedef struct so_slot {
    cb_child child; /* clients */
    unsigned incarnation;
    so_counts last, total; /* last STAT of this incarnation; sum of the dead ones */
    double born;
    so_life *life;
    char line[512];
    size_t line_len;
} so_slot;

typedef struct so_run {
    const so_opts *o;
    ct_master master;
    ct_master_opts mopts;
    const char *margs[8];
    char port_arg[32], mport_arg[32];
    double master_born;
    so_life *master_life;
    so_slot slots[SO_MAX_CLIENTS];
    so_life lives[1024];
    size_t n_lives;
    uint64_t t0;
    unsigned client_kills, master_kills;
    uint64_t rng;
} so_run;

static double run_secs(const so_run *r)
{
    return (double)(cb_now_ns() - r->t0) / 1e9;
}

static so_life *new_life(so_run *r, const char *what, unsigned index, unsigned incarnation)
{
    if (r->n_lives == sizeof(r->lives) / sizeof(r->lives[0]))
        return NULL;
    so_life *l = &r->lives[r->n_lives++];
    if (strcmp(what, "master") == 0)
        snprintf(l->label, sizeof(l->label), "master#%u", incarnation);
    else
        snprintf(l->label, sizeof(l->label), "client%u#%u", index, incarnation);
    l->samples = calloc(SO_MAX_SAMPLES, sizeof(*l->samples));
    l->born = run_secs(r);
    return l;
}

static int proc_usage(pid_t pid, uint64_t *rss_kib, uint64_t *fds)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    *rss_kib = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %" SCNu64, rss_kib) == 1)
            break;
    fclose(f);
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    *fds = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            (*fds)++;
    closedir(d);
    return 0;
}

static void record(so_life *l, double age, uint64_t rss, uint64_t fds)
{
    if (l != NULL && l->samples != NULL && l->n < SO_MAX_SAMPLES)
        l->samples[l->n++] = (so_sample){age, rss, fds};
}

static int master_start(so_run *r)
{
    if (ct_master_start_retry(&r->master, &r->mopts, 15000) < 0)
        return -1;
    if (r->port_arg[0] == '\0') {
        /* restarts reuse the ports, so clients reconnect to the same address */
        snprintf(r->port_arg, sizeof(r->port_arg), "--rpc_port=%u", r->master.port);
        snprintf(r->mport_arg, sizeof(r->mport_arg), "--metrics_port=%u", r->master.metrics_port);
        size_t n = 0;
        while (r->margs[n] != NULL)
            n++;
        r->margs[n++] = r->port_arg;
        r->margs[n++] = r->mport_arg;
        r->margs[n] = NULL;
    }
    r->master_born = run_secs(r);
    r->master_life = new_life(r, "master", 0, r->master_kills);
    return 0;
}

static int client_start(so_run *r, unsigned i)
{
    so_slot *s = &r->slots[i];
    char id[16];
    snprintf(id, sizeof(id), "%u", i);
    char clients[16], maxv[32];
    snprintf(clients, sizeof(clients), "%u", r->o->clients);
    snprintf(maxv, sizeof(maxv), "%" PRIu64, r->o->max_value);
    char *argv[] = {CB_PROG,        "soak", "--role", "client",    "--master",
                    r->master.addr, "--id", id,       "--clients", clients,
                    "--max-value",  maxv,   NULL};
    s->child = (cb_child)CB_CHILD_INIT;
    if (cb_child_spawn(&s->child, argv) < 0)
        return -1;
    char line[512];
    if (cb_child_read_line(&s->child, line, sizeof(line), 40000) < 0 ||
        strncmp(line, "READY ", 6) != 0) {
        fprintf(stderr, CB_PROG " soak: client %u did not start: '%s'\n", i, line);
        cb_child_kill(&s->child);
        return -1;
    }
    s->born = run_secs(r);
    s->last = (so_counts){0};
    s->line_len = 0;
    s->life = new_life(r, "client", i, s->incarnation);
    return 0;
}

static void parse_counts(const char *line, so_counts *c)
{
    sscanf(strchr(line, ' ') != NULL ? strchr(line, ' ') : line,
           " ops=%" SCNu64 " ok=%" SCNu64 " notfound=%" SCNu64 " errors=%" SCNu64 " bad=%" SCNu64
           " stale=%" SCNu64,
           &c->ops, &c->ok, &c->notfound, &c->errors, &c->bad, &c->stale);
}

/* Read whatever STAT lines the client has written (non-blocking). */
static void drain_client(so_slot *s)
{
    for (;;) {
        struct pollfd pf = {.fd = s->child.proc.out_fd, .events = POLLIN};
        if (s->child.proc.out_fd < 0 || poll(&pf, 1, 0) <= 0)
            return;
        char c;
        if (read(s->child.proc.out_fd, &c, 1) != 1)
            return;
        if (c != '\n') {
            if (s->line_len + 1 < sizeof(s->line))
                s->line[s->line_len++] = c;
            continue;
        }
        s->line[s->line_len] = '\0';
        s->line_len = 0;
        if (strncmp(s->line, "STAT ", 5) == 0 || strncmp(s->line, "FINAL ", 6) == 0)
            parse_counts(s->line, &s->last);
    }
}

static void add_counts(so_counts *to, const so_counts *c)
{
    to->ops += c->ops;
    to->ok += c->ok;
    to->notfound += c->notfound;
    to->errors += c->errors;
    to->bad += c->bad;
    to->stale += c->stale;
}

static void sample(so_run *r)
{
    char text[2048];
    size_t used = 0;
    double now = run_secs(r);
    uint64_t rss = 0, fds = 0;
    if (ct_master_running(&r->master) && proc_usage(r->master.p.pid, &rss, &fds) == 0) {
        record(r->master_life, now - r->master_born, rss, fds);
        used += (size_t)snprintf(text + used, sizeof(text) - used,
                                 " master rss=%" PRIu64 "M fds=%" PRIu64, rss / 1024, fds);
    }
    for (unsigned i = 0; i < r->o->clients; i++) {
        so_slot *s = &r->slots[i];
        drain_client(s);
        if (s->child.proc.pid > 0 && proc_usage(s->child.proc.pid, &rss, &fds) == 0) {
            record(s->life, now - s->born, rss, fds);
            used += (size_t)snprintf(text + used, sizeof(text) - used,
                                     " | c%u#%u rss=%" PRIu64 "M fds=%" PRIu64 " ops=%" PRIu64
                                     " err=%" PRIu64 " bad=%" PRIu64,
                                     i, s->incarnation, rss / 1024, fds, s->total.ops + s->last.ops,
                                     s->total.errors + s->last.errors,
                                     s->total.bad + s->last.bad + s->total.stale + s->last.stale);
        }
        if (used >= sizeof(text) - 64)
            break;
    }
    printf("t=%5.0fs%s\n", now, text);
    fflush(stdout);
}

/* The flatness verdict of one incarnation: 1 flat, 0 not flat, -1 not judged. */
static int judge(const so_life *l, double warmup, char *why, size_t why_len)
{
    size_t b = 0;
    while (b < l->n && l->samples[b].age < warmup)
        b++;
    if (b >= l->n || l->n - b < 4) {
        snprintf(why, why_len, "lived %.0f s: too short to judge",
                 l->n > 0 ? l->samples[l->n - 1].age : 0.0);
        return -1;
    }
    uint64_t rss0 = l->samples[b].rss_kib, fds0 = l->samples[b].fds, rss_max = rss0, fds_max = fds0;
    for (size_t k = b + 1; k < l->n; k++) {
        if (l->samples[k].rss_kib > rss_max)
            rss_max = l->samples[k].rss_kib;
        if (l->samples[k].fds > fds_max)
            fds_max = l->samples[k].fds;
    }
    uint64_t rss_bound = rss0 + rss0 / 10 + 16 * 1024, fds_bound = fds0 + 4;
    snprintf(why, why_len,
             "%zu samples over %.0f s after warm-up: RSS %" PRIu64 " -> peak %" PRIu64
             " KiB (bound %" PRIu64 "), fds %" PRIu64 " -> peak %" PRIu64 " (bound %" PRIu64 ")",
             l->n - b, l->samples[l->n - 1].age - l->samples[b].age, rss0, rss_max, rss_bound, fds0,
             fds_max, fds_bound);
    return rss_max <= rss_bound && fds_max <= fds_bound;
}

static int orchestrate(const so_opts *o)
{
    static so_run run;
    so_run *r = &run;
    memset(r, 0, sizeof(*r));
    r->o = o;
    r->t0 = cb_now_ns();
    r->rng = 0x2545f4914f6cdd1dull ^ (uint64_t)getpid();
    char path[PATH_MAX + 32];
    r->margs[0] = "--client_ttl=4";
    r->margs[1] = "--default_kv_lease_ttl=2000";
    r->margs[2] = NULL;
    r->mopts = (ct_master_opts){.bin = o->master_bin ? o->master_bin
                                                     : ct_default_master_bin(path, sizeof(path)),
                                .args = r->margs};
    int status = CB_EXIT_OK;
    if (master_start(r) < 0) {
        fprintf(stderr, CB_PROG " soak: crescent-master did not start\n");
        return CB_EXIT_FAIL;
    }
    for (unsigned i = 0; i < o->clients; i++)
        if (client_start(r, i) < 0) {
            ct_proc_kill_all();
            return CB_EXIT_FAIL;
        }
    printf("soak: master %s, %u clients (client 0 is never killed), %.0f s; kill -9 every %.0f s "
           "(the master once per %.0f s); samples every %.0f s, warm-up %.0f s\n",
           r->master.addr, o->clients, o->duration, o->kill_every, o->master_every, o->sample,
           o->warmup);
    fflush(stdout);
    double next_kill = o->kill_every, next_sample = 0, last_master_kill = 0;
    while (run_secs(r) < o->duration) {
        double now = run_secs(r);
        for (unsigned i = 0; i < o->clients; i++)
            drain_client(&r->slots[i]);
        if (now >= next_sample) {
            sample(r);
            next_sample += o->sample;
        }
        if (now >= next_kill && now + 5 < o->duration) {
            next_kill += o->kill_every;
            if (now - last_master_kill >= o->master_every) {
                last_master_kill = now;
                ct_master_kill(&r->master);
                r->master_kills++;
                printf("t=%5.0fs kill -9 crescent-master (#%u)\n", now, r->master_kills);
                if (master_start(r) < 0) {
                    fprintf(stderr, CB_PROG " soak: crescent-master did not restart\n");
                    status = CB_EXIT_FAIL;
                    break;
                }
            } else if (o->clients > 1) {
                unsigned v = 1 + (unsigned)(r->rng % (o->clients - 1));
                r->rng = r->rng * 6364136223846793005ull + 1442695040888963407ull;
                so_slot *s = &r->slots[v];
                drain_client(s);
                add_counts(&s->total, &s->last);
                cb_child_kill(&s->child);
                s->incarnation++;
                r->client_kills++;
                printf("t=%5.0fs kill -9 client %u, restarting it (#%u)\n", now, v, s->incarnation);
                if (client_start(r, v) < 0) {
                    status = CB_EXIT_FAIL;
                    break;
                }
            }
            fflush(stdout);
        }
        ct_sleep_ms(100);
    }
    sample(r);

    /* Every client must still be working: ok ops in its last seconds. */
    so_counts before[SO_MAX_CLIENTS];
    for (unsigned i = 0; i < o->clients; i++) {
        drain_client(&r->slots[i]);
        before[i] = r->slots[i].last;
    }
    ct_sleep_ms(3000);
    so_counts sum = {0};
    bool all_working = true;
    for (unsigned i = 0; i < o->clients; i++) {
        so_slot *s = &r->slots[i];
        drain_client(s);
        uint64_t ok_recent = s->last.ok - before[i].ok;
        if (ok_recent == 0) {
            all_working = false;
            printf("client %u: no successful call in the last 3 s\n", i);
        }
        char why[160] = "";
        ct_proc_close_stdin(&s->child.proc);
        /* FINAL line, then exit status (1 = it saw wrong bytes) */
        char line[512];
        while (ct_proc_read_line(&s->child.proc, line, sizeof(line), 30000) == 0)
            if (strncmp(line, "FINAL ", 6) == 0) {
                parse_counts(line, &s->last);
                break;
            }
        int st = cb_child_stop(&s->child, 30000, why, sizeof(why));
        if (st != 0) {
            printf("client %u: %s\n", i, why);
            status = CB_EXIT_FAIL;
        }
        add_counts(&s->total, &s->last);
        add_counts(&sum, &s->total);
    }
    int mst = ct_master_stop(&r->master, 10000);
    if (mst != 0) {
        printf("crescent-master did not exit 0 on SIGTERM (%d)\n", mst);
        status = CB_EXIT_FAIL;
    }

    printf("\nsoak: %.0f s, %u client kills, %u master kills; %" PRIu64 " calls: %" PRIu64
           " ok, %" PRIu64 " not found, %" PRIu64 " errors (named, during faults), %" PRIu64
           " wrong bytes, %" PRIu64 " stale\n",
           run_secs(r), r->client_kills, r->master_kills, sum.ops, sum.ok, sum.notfound, sum.errors,
           sum.bad, sum.stale);
    bool bytes_ok = sum.bad == 0 && sum.stale == 0;
    printf("verdict bytes: %s\n", bytes_ok ? "PASS (every value read was whole and right)"
                                           : "FAIL (wrong or stale bytes)");
    printf("verdict clients usable at the end: %s\n", all_working ? "PASS" : "FAIL");
    bool flat = true, judged_master = false, judged_survivor = false;
    for (size_t k = 0; k < r->n_lives; k++) {
        char why[320];
        int v = judge(&r->lives[k], o->warmup, why, sizeof(why));
        if (v == 1 && strncmp(r->lives[k].label, "master", 6) == 0)
            judged_master = true;
        if (v >= 0 && strcmp(r->lives[k].label, "client0#0") == 0)
            judged_survivor = true;
        if (v == 0)
            flat = false;
        if (!o->quiet || v == 0)
            printf("  %-12s %s: %s\n", r->lives[k].label,
                   v == 1   ? "flat"
                   : v == 0 ? "GROWING"
                            : "-",
                   why);
        free(r->lives[k].samples);
    }
    printf("verdict RSS/fds flat after warm-up: %s%s\n", flat ? "PASS" : "FAIL",
           judged_master && judged_survivor ? ""
                                            : " (the run was too short to judge the master and "
                                              "the survivor)");
    if (!bytes_ok || !all_working || !flat || sum.ok == 0)
        status = CB_EXIT_FAIL;
    printf("soak %s\n", status == CB_EXIT_OK ? "OK" : "FAILED");
    return status;
}

/* ---- flags ------------------------------------------------------------------------ */

static void usage(FILE *to)
{
    fprintf(to,
            "usage: " CB_PROG " soak [flags]\n"
            "Store soak: several client processes put/upsert/get/batch/remove with every byte\n"
            "checked, while clients and the master are killed (-9) and restarted; RSS and fds of\n"
            "every process sampled; a verdict at the end (exit 0 only if it passes).\n"
            "  --duration T        how long (s, or with s/m/h: 90s, 10m; default 60s)\n"
            "  --clients N         client processes, 2..16 (default 3; client 0 is never killed)\n"
            "  --kill-every T      kill -9 and restart a process this often (default 20s)\n"
            "  --master-every T    the master at most this often (default 120s)\n"
            "  --sample T          RSS/fd sampling period (default 5s)\n"
            "  --warmup T          samples before this age are not judged (default 30s)\n"
            "  --max-value SIZE    largest value (default 256K, at least 8K)\n"
            "  --master-bin PATH   crescent-master (default ../master/crescent-master)\n"
            "  --quiet             print only failing incarnations in the verdict\n");
}

static int parse_duration(const char *v, double *out)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (errno != 0 || end == v || x <= 0)
        return -1;
    if (strcmp(end, "m") == 0)
        x *= 60;
    else if (strcmp(end, "h") == 0)
        x *= 3600;
    else if (strcmp(end, "s") != 0 && *end != '\0')
        return -1;
    *out = x;
    return 0;
}

static int apply(void *ctx, const char *name, const char *v)
{
    so_opts *o = ctx;
    double *d = strcmp(name, "--duration") == 0       ? &o->duration
                : strcmp(name, "--kill-every") == 0   ? &o->kill_every
                : strcmp(name, "--master-every") == 0 ? &o->master_every
                : strcmp(name, "--sample") == 0       ? &o->sample
                : strcmp(name, "--warmup") == 0       ? &o->warmup
                                                      : NULL;
    if (d != NULL) {
        if (parse_duration(v, d) < 0) {
            fprintf(stderr, CB_PROG " soak: %s '%s' is not a duration (90, 90s, 10m)\n", name, v);
            return -1;
        }
        return 0;
    }
    if (strcmp(name, "--max-value") == 0) {
        if (cb_parse_size(v, &o->max_value) < 0 || o->max_value < 8192 ||
            o->max_value > (64u << 20)) {
            fprintf(stderr, CB_PROG " soak: --max-value '%s' is not a size in 8K..64M\n", v);
            return -1;
        }
    }
    return 0;
}

int cb_soak_main(int argc, char **argv)
{
    so_opts o = {.role = "orchestrator",
                 .duration = 60,
                 .kill_every = 20,
                 .master_every = 120,
                 .sample = 5,
                 .warmup = 30,
                 .clients = 3,
                 .max_value = 256 * 1024};
    const ct_option table[] = {
        CT_STRING("--role", &o.role),
        CT_STRING("--master", &o.master_addr),
        CT_STRING("--master-bin", &o.master_bin),
        CT_U32("--id", &o.id, 0, SO_MAX_CLIENTS - 1),
        CT_U32("--clients", &o.clients, 2, SO_MAX_CLIENTS),
        CT_APPLY("--duration"),
        CT_APPLY("--kill-every"),
        CT_APPLY("--master-every"),
        CT_APPLY("--sample"),
        CT_APPLY("--warmup"),
        CT_APPLY("--max-value"),
        CT_SWITCH("--quiet", &o.quiet),
    };
    int pr = ct_parse_options(argc, argv, table, sizeof(table) / sizeof(table[0]), apply, &o,
                              CB_PROG " soak");
    if (pr == CT_OPTS_HELP) {
        usage(stdout);
        return CB_EXIT_OK;
    }
    if (pr < 0)
        return CB_EXIT_USAGE;
    if (strcmp(o.role, "client") == 0) {
        if (o.master_addr == NULL) {
            fprintf(stderr, CB_PROG " soak --role client needs --master\n");
            return CB_EXIT_USAGE;
        }
        return client_main(&o);
    }
    if (strcmp(o.role, "orchestrator") != 0) {
        fprintf(stderr, CB_PROG " soak: --role is orchestrator or client\n");
        return CB_EXIT_USAGE;
    }
    return orchestrate(&o);
}
