/*
 * thin_bench.c - "crescent-bench thin": a thin client through
 * crescent-client next to an embedded store client, in the same run.
 *
 * Processes: a crescent-master (--master-bin, else next to this binary) and
 * a crescent-client daemon (--client-bin) on a socket of this run; in this
 * process an embedded cr_store (its own segment) and a thin cr_store of the
 * daemon. Both place every replica in the segment of the process that
 * moves the bytes (prefer_same_node: the embedded client's own, the
 * daemon's), so the two paths differ only by the thin client's hop to the
 * daemon: what is measured is its cost.
 *
 * Cases, per value size (--value-sizes) and shape (single calls, batches
 * of --batch keys): zero-copy (put_from / get_into; the embedded client's
 * buffer is registered cr_alloc_shared memory, the thin client's is pool
 * memory: zero-copy for both) and copying (put / get, batch_put /
 * batch_get), each a put case writing fresh keys and a get case reading
 * them back. Every case runs the two clients in alternating slices
 * (--slices, the order flipped every slice) of --duration / slices seconds
 * each, so drift of a shared machine hits both alike. A put case that fills
 * 60 % of a segment removes its keys (untimed) and goes on. Before a get
 * case each client's round is topped up (untimed) to the same number of
 * keys, READ_SET bytes' worth (at most the round's budget), and both read
 * over exactly that many: the same working set, larger than the caches.
 * (Reading whatever the put slices left, a client whose last round had
 * just restarted read a few MiB over and over from cache: 40 GB/s "gets".)
 *
 * Reported per case and client: keys/s, GB/s (10^9 value bytes per second),
 * latency p50 / p99 per call; then thin / embedded throughput and the
 * latency the hop adds (thin minus embedded, p50 and p99). --verify checks
 * every byte of every get (inside the timing: a correctness run).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "options.h"
#include "crescent/store.h"
#include "tool_util.h"

#define MAX_SIZES  8
#define MAX_BATCH  1024
#define KEY_LEN    64
#define FILL_SHARE 60             /* percent of a segment a put case fills before recycling */
#define READ_SET   (128ull << 20) /* bytes of distinct values a get case reads over */

typedef struct tb_opts {
    uint64_t sizes[MAX_SIZES];
    size_t n_sizes;
    uint32_t batch, slices;
    double duration;
    uint64_t segment;
    bool verify, zcopy, copy, single, batched;
    const char *master_bin, *client_bin;
} tb_opts;

typedef struct tb_side {
    const char *name;
    cr_store *s;
    uint8_t *buf; /* registered (embedded) or pool (thin) memory: 2 * batch * size */
    uint64_t buf_size;
    uint64_t written; /* keys of the current put round */
    uint64_t gen;     /* bumps the key names after a recycle */
    /* results of the current case */
    uint64_t keys, calls, ns;
    cb_hist *hist;
    int errors, first_error;
} tb_side;

static void thin_usage(FILE *to)
{
    fprintf(to, "usage: " CB_PROG " thin [--value-sizes 4K,1M] [--batch 32] [--duration 2] "
                "[--slices 6]\n"
                "       [--mode zcopy|copy|both] [--shape single|batch|both] "
                "[--segment-size 1G]\n"
                "       [--master-bin PATH] [--client-bin PATH] [--verify]\n");
}

/* The flags with values that need more than a string or a bounded number. */
static int apply_flag(void *ctx, const char *flag, const char *v)
{
    tb_opts *o = ctx;
    if (strcmp(flag, "--value-sizes") == 0) {
        o->n_sizes = 0;
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", v);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && o->n_sizes < MAX_SIZES;
             t = strtok_r(NULL, ",", &save))
            if (cb_parse_size(t, &o->sizes[o->n_sizes++]) < 0 || o->sizes[o->n_sizes - 1] == 0)
                return cb_bad_value("thin", flag, t, "a list of positive sizes (K/M/G binary)");
    } else if (strcmp(flag, "--duration") == 0) {
        if (cb_parse_seconds(v, &o->duration) < 0)
            return cb_bad_value("thin", flag, v, "seconds, more than 0");
    } else if (strcmp(flag, "--segment-size") == 0) {
        if (cb_parse_size(v, &o->segment) < 0 || o->segment == 0)
            return cb_bad_value("thin", flag, v, "a positive size (K/M/G binary)");
    } else if (strcmp(flag, "--mode") == 0) {
        o->zcopy = strcmp(v, "zcopy") == 0 || strcmp(v, "both") == 0;
        o->copy = strcmp(v, "copy") == 0 || strcmp(v, "both") == 0;
        if (!o->zcopy && !o->copy)
            return cb_bad_value("thin", flag, v, "zcopy, copy or both");
    } else if (strcmp(flag, "--shape") == 0) {
        o->single = strcmp(v, "single") == 0 || strcmp(v, "both") == 0;
        o->batched = strcmp(v, "batch") == 0 || strcmp(v, "both") == 0;
        if (!o->single && !o->batched)
            return cb_bad_value("thin", flag, v, "single, batch or both");
    }
    return 0;
}

static int parse_opts(int argc, char **argv, tb_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->sizes[0] = 4 * CB_KIB;
    o->sizes[1] = CB_MIB;
    o->n_sizes = 2;
    o->batch = 32;
    o->slices = 6;
    o->duration = 2.0;
    o->segment = CB_GIB;
    o->zcopy = o->copy = o->single = o->batched = true;
    const ct_option opts[] = {
        CT_APPLY("--value-sizes"),
        CT_U32("--batch", &o->batch, 1, MAX_BATCH),
        CT_U32("--slices", &o->slices, 2, 1000),
        CT_APPLY("--duration"),
        CT_APPLY("--segment-size"),
        CT_STRING("--master-bin", &o->master_bin),
        CT_STRING("--client-bin", &o->client_bin),
        CT_APPLY("--mode"),
        CT_APPLY("--shape"),
        CT_SWITCH("--verify", &o->verify),
    };
    int pr = ct_parse_options(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), apply_flag, o,
                              CB_PROG " thin");
    if (pr == CT_OPTS_HELP) {
        thin_usage(stdout);
        exit(0);
    }
    return pr < 0 ? -1 : 0;
}

/* --- processes -------------------------------------------------------------- */

typedef struct tb_proc {
    pid_t pid;
    int out;
} tb_proc;

static int spawn(tb_proc *p, char *const argv[], char *line, size_t len)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    p->pid = pid;
    p->out = fds[0];
    return ct_read_line(p->out, line, len, 20000);
}

static int stop(tb_proc *p)
{
    if (p->pid <= 0)
        return 0;
    kill(p->pid, SIGTERM);
    int st = 0;
    waitpid(p->pid, &st, 0);
    close(p->out);
    p->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *sibling(char *buf, size_t len, const char *dir, const char *name)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            int w = snprintf(buf, len, "%s/../%s/%s", self, dir, name);
            if (w > 0 && (size_t)w < len && access(buf, X_OK) == 0)
                return buf;
        }
    }
    snprintf(buf, len, "%s", name);
    return buf;
}

/* --- one case ----------------------------------------------------------------- */

/*
 * The floor of one hop to the daemon: a 64-byte request / 64-byte reply
 * ping-pong over a Unix socket pair with a forked echo child, for secs.
 * Called while this process has no other threads (before setup, after
 * destroy). 0 with the p50 / p99 in us, or -1.
 */
static int uds_pingpong(double secs, double *p50, double *p99)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (pid == 0) {
        close(sv[0]);
        char b[64];
        for (;;) {
            ssize_t n = recv(sv[1], b, sizeof(b), MSG_WAITALL);
            if (n != (ssize_t)sizeof(b) || send(sv[1], b, sizeof(b), MSG_NOSIGNAL) != n)
                _exit(0);
        }
    }
    close(sv[1]);
    cb_hist *h = calloc(1, sizeof(*h));
    int rc = h != NULL ? 0 : -1;
    char b[64] = {0};
    uint64_t end = cb_now_ns() + (uint64_t)(secs * 1e9);
    while (rc == 0 && cb_now_ns() < end) {
        uint64_t t0 = cb_now_ns();
        if (send(sv[0], b, sizeof(b), MSG_NOSIGNAL) != (ssize_t)sizeof(b) ||
            recv(sv[0], b, sizeof(b), MSG_WAITALL) != (ssize_t)sizeof(b))
            rc = -1;
        else
            cb_hist_add(h, cb_now_ns() - t0, 1);
    }
    close(sv[0]);
    waitpid(pid, NULL, 0);
    if (rc == 0) {
        *p50 = (double)cb_hist_quantile(h, 0.5) / 1e3;
        *p99 = (double)cb_hist_quantile(h, 0.99) / 1e3;
    }
    free(h);
    return rc;
}

static void key_of(char *out, const tb_side *sd, uint64_t size, uint64_t i)
{
    snprintf(out, KEY_LEN, "%s-%" PRIu64 "-%" PRIu64 "-%" PRIu64, sd->name, size, sd->gen, i);
}

static void note_error(tb_side *sd, int rc)
{
    if (rc < 0) {
        if (sd->errors++ == 0) {
            sd->first_error = rc;
            fprintf(stderr, CB_PROG " thin: %s: %s (%s)\n", sd->name, cr_status_name(rc),
                    cr_last_error_message());
        }
    }
}

/* Remove this side's keys of the current round (untimed) and start a new one. */
static void recycle(tb_side *sd, uint64_t size)
{
    const char *keys[MAX_BATCH];
    char kb[MAX_BATCH][KEY_LEN];
    int res[MAX_BATCH];
    for (uint64_t from = 0; from < sd->written;) {
        size_t m = 0;
        for (; m < MAX_BATCH && from < sd->written; m++, from++) {
            key_of(kb[m], sd, size, from);
            keys[m] = kb[m];
        }
        cr_store_batch_remove(sd->s, keys, m, true, res);
    }
    sd->written = 0;
    sd->gen++;
}

typedef struct tb_case {
    uint64_t size;
    bool put, zcopy, batched;
    uint32_t batch;
    bool verify;
    uint64_t budget; /* keys per round */
} tb_case;

/* Run one slice of a case on a side for `seconds`. */
static void run_slice(tb_side *sd, const tb_case *c, double seconds, uint64_t *read_pos,
                      uint64_t readable)
{
    uint32_t n = c->batched ? c->batch : 1;
    const char *keys[MAX_BATCH];
    char kb[MAX_BATCH][KEY_LEN];
    void *bufs[MAX_BATCH];
    const void *vals[MAX_BATCH];
    size_t sizes[MAX_BATCH];
    int res[MAX_BATCH];
    int64_t gres[MAX_BATCH];
    void *outs[MAX_BATCH];
    cr_replicate_config cfg;
    cr_replicate_config_init(&cfg);
    cfg.prefer_same_node = true;
    uint64_t end = cb_now_ns() + (uint64_t)(seconds * 1e9);
    while (cb_now_ns() < end) {
        if (c->put && sd->written + n > c->budget)
            recycle(sd, c->size);
        for (uint32_t k = 0; k < n; k++) {
            uint64_t idx = c->put ? sd->written + k : (*read_pos + k) % readable;
            key_of(kb[k], sd, c->size, idx);
            keys[k] = kb[k];
            bufs[k] = sd->buf + (uint64_t)k * c->size;
            vals[k] = bufs[k];
            sizes[k] = c->size;
            if (c->put && c->verify)
                cb_pattern_fill(bufs[k], 0, c->size, idx + 1);
        }
        uint64_t t0 = cb_now_ns();
        int rc = 0;
        if (c->put) {
            if (!c->batched)
                rc = c->zcopy ? cr_store_put_from(sd->s, keys[0], bufs[0], c->size, &cfg)
                              : cr_store_put(sd->s, keys[0], vals[0], c->size, &cfg);
            else
                rc = c->zcopy ? cr_store_batch_put_from(sd->s, keys, bufs, sizes, n, &cfg, res)
                              : cr_store_batch_put(sd->s, keys, vals, sizes, n, &cfg, res);
        } else {
            if (!c->batched) {
                int64_t g = c->zcopy ? cr_store_get_into(sd->s, keys[0], bufs[0], c->size)
                                     : cr_store_get(sd->s, keys[0], &outs[0]);
                gres[0] = g;
                rc = g < 0 ? (int)g : 0;
            } else {
                rc = c->zcopy ? cr_store_batch_get_into(sd->s, keys, bufs, sizes, n, gres)
                              : cr_store_batch_get(sd->s, keys, n, outs, gres);
            }
        }
        uint64_t dt = cb_now_ns() - t0;
        cb_hist_add(sd->hist, dt, 1);
        sd->ns += dt;
        sd->calls++;
        note_error(sd, rc);
        for (uint32_t k = 0; k < n && rc == 0; k++) {
            int one = c->put ? (c->batched ? res[k] : 0) : (gres[k] < 0 ? (int)gres[k] : 0);
            note_error(sd, one);
            if (!c->put && !c->zcopy && gres[k] >= 0) {
                if (c->verify) {
                    uint8_t *want = malloc(c->size);
                    cb_pattern_fill(want, 0, c->size, (*read_pos + k) % readable + 1);
                    if (cb_first_mismatch(outs[k], want, c->size) >= 0)
                        note_error(sd, CR_CHECKSUM_MISMATCH);
                    free(want);
                }
                free(outs[k]);
            } else if (!c->put && c->verify && gres[k] >= 0) {
                uint8_t *want = malloc(c->size);
                cb_pattern_fill(want, 0, c->size, (*read_pos + k) % readable + 1);
                if (cb_first_mismatch(bufs[k], want, c->size) >= 0)
                    note_error(sd, CR_CHECKSUM_MISMATCH);
                free(want);
            }
        }
        sd->keys += n;
        if (c->put)
            sd->written += n;
        else
            *read_pos += n;
    }
}

/* Put keys (untimed) until this side's round holds `want` of them. */
static void top_up(tb_side *sd, const tb_case *c, uint64_t want)
{
    cr_replicate_config cfg;
    cr_replicate_config_init(&cfg);
    cfg.prefer_same_node = true;
    const char *keys[MAX_BATCH];
    char kb[MAX_BATCH][KEY_LEN];
    const void *vals[MAX_BATCH];
    size_t sizes[MAX_BATCH];
    int res[MAX_BATCH];
    while (sd->written < want) {
        uint32_t n = 0;
        for (; n < c->batch && sd->written + n < want; n++) {
            uint64_t idx = sd->written + n;
            key_of(kb[n], sd, c->size, idx);
            keys[n] = kb[n];
            vals[n] = sd->buf + (uint64_t)n * c->size;
            sizes[n] = c->size;
            if (c->verify)
                cb_pattern_fill(sd->buf + (uint64_t)n * c->size, 0, c->size, idx + 1);
        }
        int rc = cr_store_batch_put(sd->s, keys, vals, sizes, n, &cfg, res);
        note_error(sd, rc);
        for (uint32_t k = 0; k < n && rc == 0; k++)
            note_error(sd, res[k]);
        if (rc < 0)
            return;
        sd->written += n;
    }
}

typedef struct tb_result {
    double kps, gbps, p50_us, p99_us;
} tb_result;

static tb_result result_of(const tb_side *sd, uint64_t size)
{
    double secs = (double)sd->ns / 1e9;
    tb_result r = {0};
    if (secs > 0) {
        r.kps = (double)sd->keys / secs;
        r.gbps = (double)sd->keys * (double)size / secs / 1e9;
    }
    r.p50_us = (double)cb_hist_quantile(sd->hist, 0.50) / 1e3;
    r.p99_us = (double)cb_hist_quantile(sd->hist, 0.99) / 1e3;
    return r;
}

static int run_case(tb_side sides[2], const tb_case *c, const tb_opts *o)
{
    char sz[32];
    double slice = o->duration / o->slices;
    uint64_t readable[2], pos[2] = {0, 0};
    uint64_t read_set = READ_SET / c->size;
    if (read_set > c->budget)
        read_set = c->budget;
    if (read_set < c->batch)
        read_set = c->batch;
    for (int i = 0; i < 2; i++) {
        sides[i].keys = sides[i].calls = sides[i].ns = 0;
        memset(sides[i].hist, 0, sizeof(*sides[i].hist));
        if (!c->put)
            top_up(&sides[i], c, read_set);
        readable[i] = c->put ? 1 : read_set;
    }
    for (uint32_t sl = 0; sl < o->slices; sl++)
        for (int k = 0; k < 2; k++) {
            int i = (sl % 2) ^ k; /* alternate which side runs first */
            run_slice(&sides[i], c, slice, &pos[i], readable[i]);
        }
    tb_result e = result_of(&sides[0], c->size), t = result_of(&sides[1], c->size);
    printf("%-6s %-6s %-5s %-4s | %10.0f %7.3f %8.1f %8.1f | %10.0f %7.3f %8.1f %8.1f | %5.2fx "
           "%+8.1f %+8.1f\n",
           cb_format_size(c->size, sz, sizeof(sz)), c->batched ? "batch" : "single",
           c->zcopy ? "zcopy" : "copy", c->put ? "put" : "get", e.kps, e.gbps, e.p50_us, e.p99_us,
           t.kps, t.gbps, t.p50_us, t.p99_us, e.kps > 0 ? t.kps / e.kps : 0.0, t.p50_us - e.p50_us,
           t.p99_us - e.p99_us);
    fflush(stdout);
    return sides[0].errors + sides[1].errors;
}

/* --- main ----------------------------------------------------------------------- */

int cb_thin_main(int argc, char **argv)
{
    tb_opts o;
    if (parse_opts(argc, argv, &o) < 0)
        return CB_EXIT_USAGE;
    char mbin[4096], cbin[4096], line[1024], master[128], sockname[96];
    const char *mb = o.master_bin ? o.master_bin : ct_default_master_bin(mbin, sizeof(mbin));
    const char *cbp =
        o.client_bin ? o.client_bin : sibling(cbin, sizeof(cbin), "client", "crescent-client");
    tb_proc mp = {0}, dp = {0};
    char *margv[] = {(char *)mb,
                     "--rpc_port=0",
                     "--metrics_port=0",
                     "--rpc_address=127.0.0.1",
                     "--metrics_host=127.0.0.1",
                     "--default_kv_lease_ttl=500",
                     "--enable_metric_reporting=false",
                     NULL};
    unsigned port = 0;
    if (spawn(&mp, margv, line, sizeof(line)) < 0 ||
        sscanf(line, "crescent-master listening on 127.0.0.1:%u", &port) != 1) {
        fprintf(stderr, CB_PROG " thin: %s did not start ('%s')\n", mb, line);
        stop(&mp);
        return CB_EXIT_FAIL;
    }
    snprintf(master, sizeof(master), "127.0.0.1:%u", port);
    snprintf(sockname, sizeof(sockname), "@crescent-bench-%d", (int)getpid());
    char f_master[160], f_sock[128], f_seg[64];
    snprintf(f_master, sizeof(f_master), "--master_server_address=%s", master);
    snprintf(f_sock, sizeof(f_sock), "--socket=%s", sockname);
    snprintf(f_seg, sizeof(f_seg), "--global_segment_size=%" PRIu64, o.segment);
    char *dargv[] = {(char *)cbp,
                     f_master,
                     f_sock,
                     f_seg,
                     "--host=127.0.0.1",
                     "--metadata_server=P2PHANDSHAKE",
                     "--threads=2",
                     "--local_buffer_size=64MB",
                     "--protocol=auto",
                     NULL};
    int rc = CB_EXIT_OK;
    cr_store *emb = NULL, *thin = NULL;
    if (spawn(&dp, dargv, line, sizeof(line)) < 0 || strstr(line, "serving") == NULL) {
        fprintf(stderr, CB_PROG " thin: %s did not start ('%s')\n", cbp, line);
        rc = CB_EXIT_FAIL;
        goto out_stop;
    }
    double uds_p50[2] = {0}, uds_p99[2] = {0};
    if (uds_pingpong(0.5, &uds_p50[0], &uds_p99[0]) < 0)
        fprintf(stderr, CB_PROG " thin: unix socket ping-pong baseline failed\n");
    uint64_t maxsz = 0;
    for (size_t i = 0; i < o.n_sizes; i++)
        maxsz = o.sizes[i] > maxsz ? o.sizes[i] : maxsz;
    uint64_t area = maxsz * o.batch;
    cr_store_config ec;
    cr_store_config_init(&ec);
    ec.master_address = master;
    ec.global_segment_size = o.segment;
    ec.local_buffer_size = area + (64ull << 20);
    cr_store_thin_config tc;
    cr_store_thin_config_init(&tc);
    tc.server_address = sockname;
    tc.mem_pool_size = 2 * area + (64ull << 20);
    tc.local_buffer_size = area + (64ull << 20);
    if (cr_store_setup(&ec, &emb) < 0 || cr_store_setup_thin(&tc, &thin) < 0) {
        fprintf(stderr, CB_PROG " thin: setup: %s\n", cr_last_error_message());
        rc = CB_EXIT_FAIL;
        goto out_close;
    }
    tb_side sides[2] = {{.name = "embedded", .s = emb}, {.name = "thin", .s = thin}};
    sides[0].hist = calloc(1, sizeof(cb_hist));
    sides[1].hist = calloc(1, sizeof(cb_hist));
    if (cr_alloc_shared(area, (void **)&sides[0].buf) < 0 ||
        cr_store_register_buffer(emb, sides[0].buf, area) < 0 ||
        cr_store_pool_alloc(thin, area, (void **)&sides[1].buf) < 0) {
        fprintf(stderr, CB_PROG " thin: buffers: %s\n", cr_last_error_message());
        rc = CB_EXIT_FAIL;
        goto out_free;
    }
    memset(sides[0].buf, 1, area); /* commit the pages before timing */
    memset(sides[1].buf, 1, area);
    printf("# crescent-bench thin: embedded client vs thin client through crescent-client, "
           "%u slices of %.2f s each per case, batch %u\n",
           o.slices, o.duration / o.slices, o.batch);
    printf("%-6s %-6s %-5s %-4s | %10s %7s %8s %8s | %10s %7s %8s %8s | %6s %8s %8s\n", "size",
           "shape", "mode", "op", "emb k/s", "GB/s", "p50 us", "p99 us", "thin k/s", "GB/s",
           "p50 us", "p99 us", "thin/e", "+p50 us", "+p99 us");
    int errors = 0;
    for (size_t si = 0; si < o.n_sizes; si++) {
        for (int shape = 0; shape < 2; shape++) {
            if ((shape == 0 && !o.single) || (shape == 1 && !o.batched))
                continue;
            for (int mode = 0; mode < 2; mode++) {
                if ((mode == 0 && !o.zcopy) || (mode == 1 && !o.copy))
                    continue;
                tb_case c = {.size = o.sizes[si],
                             .zcopy = mode == 0,
                             .batched = shape == 1,
                             .batch = o.batch,
                             .verify = o.verify,
                             .budget = o.segment * FILL_SHARE / 100 / o.sizes[si]};
                if (c.budget < o.batch)
                    c.budget = o.batch;
                c.put = true;
                errors += run_case(sides, &c, &o);
                c.put = false;
                errors += run_case(sides, &c, &o);
                recycle(&sides[0], c.size);
                recycle(&sides[1], c.size);
                usleep(600 * 1000); /* the read leases (500 ms) run out */
            }
        }
    }
    if (errors > 0) {
        fprintf(stderr, CB_PROG " thin: %d failed calls or keys\n", errors);
        rc = CB_EXIT_FAIL;
    }
out_free:
    if (sides[0].buf != NULL) {
        cr_store_unregister_buffer(emb, sides[0].buf);
        cr_free_shared(sides[0].buf);
    }
    if (sides[1].buf != NULL)
        cr_store_pool_free(thin, sides[1].buf);
    free(sides[0].hist);
    free(sides[1].hist);
out_close:
    cr_store_destroy(thin);
    cr_store_destroy(emb);
    if (rc == CB_EXIT_OK && uds_pingpong(0.5, &uds_p50[1], &uds_p99[1]) == 0)
        printf("# floor of the hop: unix socket ping-pong (64 B each way) p50 %.1f / %.1f us, "
               "p99 %.1f / %.1f us (before / after the cases)\n",
               uds_p50[0], uds_p50[1], uds_p99[0], uds_p99[1]);
out_stop:
    if (stop(&dp) != 0 && rc == CB_EXIT_OK) {
        fprintf(stderr, CB_PROG " thin: crescent-client did not exit cleanly\n");
        rc = CB_EXIT_FAIL;
    }
    if (stop(&mp) != 0 && rc == CB_EXIT_OK) {
        fprintf(stderr, CB_PROG " thin: crescent-master did not exit cleanly\n");
        rc = CB_EXIT_FAIL;
    }
    return rc;
}
