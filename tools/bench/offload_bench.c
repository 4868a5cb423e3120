/*
 * offload_bench.c - crescent-bench offload: the SSD tier through the whole
 * store path (docs/disk-tier.md phase B) against plain sequential O_DIRECT
 * I/O of the same bytes on the same filesystem, in the same run.
 *
 *   crescent-bench offload [--master-bin P] [--dir D] [--value-sizes 4K,1M]
 *                          [--bytes 256M] [--small-bytes 48M] [--batch 32]
 *                          [--latency 200] [--latency-gap-ms 0] [--poll-ms 2] [--copying-gets]
 *                          [--rounds 1] [--verify]
 *
 * A crescent-master with --enable_offload --offload_on_evict, and in this
 * process two store clients: a holder (segment = a quarter of the bytes,
 * at most 64 MiB; its SSD tier in a fresh directory under --dir) and a
 * writer/reader without a segment. Per value size S, with B bytes (--bytes,
 * or --small-bytes below 64 KiB):
 *   baseline write  pwrite of S-byte blocks to one file, O_DIRECT, then fdatasync
 *   baseline read   pread of the same blocks, O_DIRECT; both are measured before
 *                   the tier's phases and again after the disk hits, and the
 *                   ratios are against the mean of the two (this disk's speed
 *                   drifts within a run)
 *   offload         the writer puts B/S values, made before the clock starts (up to
 *                   1 GiB of them; retrying while the segment waits
 *                   for offloads; values under 64 KiB in batch puts of --batch,
 *                   larger ones one at a time); offload GB/s = bytes the holder wrote to disk
 *                   / time from the first put until the last offload landed (so
 *                   it includes filling the empty segment up to the master's
 *                   early write-behind ratio, when nothing is written); the
 *                   bytes include the copies of values still in memory (written
 *                   ahead of their eviction once the memory is half full);
 *                   "once the segment is full": the bytes offloaded after the
 *                   first offload landed / the time from then on
 *   disk hit        batch gets (--batch keys) of every disk-only value (asked of
 *                   the master with get_replicas): the holder stages them from
 *                   disk, the reader's engine reads them into a registered buffer
 *                   (batch_get_into; --copying-gets: batch_get's malloc'd
 *                   copies); GB/s of the values read. Every disk-only value is
 *                   read twice (HIT_PASSES): "first pass" is the first use of the
 *                   holder's staging area and of the reader's mapping of it (on
 *                   this VM each first touch of a page by a process costs ~6 us,
 *                   docs/PERFORMANCE.md), "disk hit" the second pass. The
 *                   readers' buffers are allocated and registered before the
 *                   clock starts.
 *   tier files      the holder's bucket files read back sequentially, O_DIRECT,
 *                   right after the passes: the same bytes in the same cache
 *                   state of the disk (a baseline file written just before it is
 *                   read is served from the host's cache at up to 7 GB/s here)
 *   latency         --latency single gets of disk-only values (each staged anew)
 *                   and of memory-resident values: p50 / p99
 * --rounds N runs each size N times (a fresh tier, its own baselines and key names per round)
 * and ends with the median and range of each ratio: this virtual disk's speed swings more
 * between runs than the tier's ratios do between changes.
 * Both clients are in one process (two engines), so the reader's transfer is
 * a same-host copy; the holder's disk thread polls the master every
 * --poll-ms (CRESCENT_OFFLOAD_POLL_MS) when idle.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "options.h"
#include "crescent/status.h"
#include "crescent/store.h"
#include "master_proc.h"
#include "tool_util.h"

#define MAX_SIZES   4
#define HIT_PASSES  2 /* the disk-hit phase reads every disk-only value this often */
#define MAX_ROUNDS  9
#define PREFILL_MAX (1ull << 30) /* values made before the offload clock starts, up to this */

typedef struct ob_opts {
    const char *master_bin, *dir;
    uint64_t sizes[MAX_SIZES];
    size_t n_sizes;
    uint64_t bytes, small_bytes;
    uint32_t batch, latency, latency_gap_ms, poll_ms, threads;
    uint32_t rounds; /* --rounds: every size this often, a fresh tier each time; medians */
    bool verify, copying_gets;
} ob_opts;

/* One round's ratios of a size, for the --rounds summary. */
enum { R_OFFLOAD, R_FULL, R_HIT, R_FIRST, R_HIT_TIER, N_RATIOS };

static void usage(FILE *to)
{
    fprintf(to, "usage: " CB_PROG " offload [flags]\n"
                "  --master-bin P   crescent-master to start (default: next to this binary)\n"
                "  --dir D          where the SSD tier and the baseline file go (default "
                "$TMPDIR or /tmp)\n"
                "  --value-sizes L  e.g. 4K,1M (default 4K,1M)\n"
                "  --bytes B        bytes per case for values >= 64K (default 256M)\n"
                "  --small-bytes B  bytes per case for smaller values (default 48M)\n"
                "  --batch N        keys per batch get (default 32)\n"
                "  --latency N      single-get latency samples per kind (default 200)\n"
                "  --latency-gap-ms N  sleep N ms before each disk-hit sample: sporadic hits,\n"
                "                   the holder idle between them (default 0: back to back)\n"
                "  --poll-ms N      the holder's idle poll interval (default 2)\n"
                "  --threads N      reader threads of the disk-hit phase (default 4)\n"
                "  --copying-gets   disk-hit phase with cr_store_batch_get (malloc'd copies)\n"
                "                   instead of cr_store_batch_get_into registered buffers\n"
                "  --rounds N       every size N times (1-9, default 1), each round a fresh\n"
                "                   tier and its own baselines; a last line per size gives the\n"
                "                   median and range of each ratio over the rounds\n"
                "  --verify         check every byte read\n");
}

/* The size flags (ct_parse_options' APPLY kind). */
static int apply_flag(void *ctx, const char *f, const char *v)
{
    ob_opts *o = ctx;
    if (strcmp(f, "--value-sizes") == 0)
        return cb_parse_size_list(CB_PROG " offload", f, v, 64 * CB_MIB, o->sizes, MAX_SIZES,
                                  &o->n_sizes) < 0
                   ? -1
                   : 0;
    uint64_t *dst = strcmp(f, "--bytes") == 0 ? &o->bytes : &o->small_bytes;
    if (cb_parse_size(v, dst) < 0)
        return cb_bad_value("offload", f, v, "a size (K/M/G binary)");
    return 0;
}

static int parse(int argc, char **argv, ob_opts *o)
{
    *o = (ob_opts){.bytes = 256 * CB_MIB,
                   .small_bytes = 48 * CB_MIB,
                   .batch = 32,
                   .latency = 200,
                   .poll_ms = 2,
                   .threads = 4,
                   .rounds = 1,
                   .n_sizes = 2};
    o->sizes[0] = 4 * CB_KIB;
    o->sizes[1] = CB_MIB;
    o->dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    const ct_option opts[] = {
        CT_SWITCH("--verify", &o->verify),
        CT_SWITCH("--copying-gets", &o->copying_gets),
        CT_STRING("--master-bin", &o->master_bin),
        CT_STRING("--dir", &o->dir),
        CT_APPLY("--value-sizes"),
        CT_APPLY("--bytes"),
        CT_APPLY("--small-bytes"),
        CT_U32("--batch", &o->batch, 1, 1024),
        CT_U32("--latency", &o->latency, 0, 1000000),
        CT_U32("--latency-gap-ms", &o->latency_gap_ms, 0, 10000),
        CT_U32("--threads", &o->threads, 1, 64),
        CT_U32("--poll-ms", &o->poll_ms, 1, 1000),
        CT_U32("--rounds", &o->rounds, 1, MAX_ROUNDS),
    };
    int pr = ct_parse_options(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), apply_flag, o,
                              CB_PROG " offload");
    if (pr == CT_OPTS_HELP) {
        usage(stdout);
        exit(CB_EXIT_OK);
    }
    if (pr < 0) {
        usage(stderr);
        return -1;
    }
    return 0;
}

static double secs(uint64_t t0)
{
    return (double)(cb_now_ns() - t0) / 1e9;
}

/* The device under --dir as /proc/diskstats counts it: the milliseconds it had I/O in flight
 * (io_ticks) and the sectors written, so a phase can say how busy the disk was: a pipeline
 * that leaves the disk idle shows as a low share, a slow access pattern as a busy disk
 * writing slowly. ok is false where the file or the device is not found. */
typedef struct disk_sample {
    uint64_t t_ns, busy_ms, wr_sectors;
    bool ok;
} disk_sample;

static disk_sample disk_now(dev_t dev)
{
    disk_sample d = {.t_ns = cb_now_ns()};
    FILE *f = fopen("/proc/diskstats", "r");
    if (f == NULL)
        return d;
    unsigned maj, min;
    char name[64];
    unsigned long long v[11];
    while (fscanf(f, "%u %u %63s %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu%*[^\n]",
                  &maj, &min, name, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8],
                  &v[9], &v[10]) == 14) {
        if (makedev(maj, min) == dev) {
            d.wr_sectors = v[6];
            d.busy_ms = v[9];
            d.ok = true;
            break;
        }
    }
    fclose(f);
    return d;
}

/* The share of the time from a to b the disk was busy (-1: not known). */
static double busy_share(disk_sample a, disk_sample b)
{
    if (!a.ok || !b.ok || b.t_ns <= a.t_ns)
        return -1;
    return (double)(b.busy_ms - a.busy_ms) * 1e6 / (double)(b.t_ns - a.t_ns);
}

static dev_t dir_dev(const char *dir)
{
    struct stat st;
    return stat(dir, &st) == 0 ? st.st_dev : 0;
}

/* Sequential O_DIRECT write then read of n blocks of s bytes: GB/s of each; *wbusy: the
 * disk's busy share during the write. */
static int baseline(const char *dir, uint64_t s, uint64_t n, double *w, double *r, double *wbusy)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/baseline.bin", dir) >= (int)sizeof(path))
        return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0) {
        fprintf(stderr, CB_PROG " offload: O_DIRECT open of %s: %s\n", path, strerror(errno));
        return -1;
    }
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, s) != 0) {
        close(fd);
        return -1;
    }
    cb_pattern_fill(buf, 0, s, 7);
    int rc = 0;
    disk_sample d0 = disk_now(dir_dev(dir));
    uint64_t t0 = cb_now_ns();
    for (uint64_t i = 0; i < n && rc == 0; i++)
        rc = pwrite(fd, buf, s, (off_t)(i * s)) == (ssize_t)s ? 0 : -1;
    if (rc == 0)
        rc = fdatasync(fd);
    *w = (double)(n * s) / secs(t0) / 1e9;
    *wbusy = busy_share(d0, disk_now(dir_dev(dir)));
    t0 = cb_now_ns();
    for (uint64_t i = 0; i < n && rc == 0; i++)
        rc = pread(fd, buf, s, (off_t)(i * s)) == (ssize_t)s ? 0 : -1;
    *r = (double)(n * s) / secs(t0) / 1e9;
    if (rc != 0)
        fprintf(stderr, CB_PROG " offload: baseline I/O on %s: %s\n", path, strerror(errno));
    free(buf);
    close(fd);
    unlink(path);
    return rc;
}

/* The disk tier's own files read back sequentially, O_DIRECT, in blocks of s bytes (at least
 * 64 KiB): the same bytes the disk hits read, in the same cache state of this (virtual) disk,
 * so the drift of the written-just-before baseline file does not enter the ratio. GB/s. */
static int tier_files_read(const char *ssd, uint64_t s, double *r)
{
    uint64_t block = s < 64 * CB_KIB ? 64 * CB_KIB : s, total = 0;
    DIR *d = opendir(ssd);
    void *buf = NULL;
    if (d == NULL || posix_memalign(&buf, 4096, block) != 0) {
        if (d != NULL)
            closedir(d);
        return -1;
    }
    memset(buf, 0, block);
    int rc = 0;
    uint64_t t0 = cb_now_ns();
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        char path[PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof(path), "%s/%s", ssd, e->d_name) >= (int)sizeof(path) ||
            stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        int fd = open(path, O_RDONLY | O_DIRECT);
        if (fd < 0) {
            rc = -1;
            break;
        }
        for (off_t off = 0;; off += (off_t)block) {
            ssize_t got = pread(fd, buf, block, off);
            if (got <= 0) {
                rc = got < 0 ? -1 : 0;
                break;
            }
            total += (uint64_t)got;
        }
        close(fd);
    }
    double sec = secs(t0);
    closedir(d);
    free(buf);
    if (rc == 0 && total > 0)
        *r = (double)total / sec / 1e9;
    return rc == 0 && total > 0 ? 0 : -1;
}

static int setup_store(const char *master, uint64_t segment, const char *ssd, cr_store **out)
{
    cr_store_config c;
    cr_store_config_init(&c);
    c.master_address = master;
    c.global_segment_size = segment;
    c.local_buffer_size = 64 * CB_MIB;
    c.protocol = "auto";
    c.enable_ssd_offload = ssd != NULL;
    c.ssd_offload_path = ssd;
    int rc = cr_store_setup(&c, out);
    if (rc < 0)
        fprintf(stderr, CB_PROG " offload: store setup: %s\n", cr_last_error_message());
    return rc;
}

static uint64_t seed_of(uint64_t i)
{
    return 0x5eed0000ull + i;
}

static int check(const uint8_t *got, uint64_t s, uint64_t i, uint8_t *want)
{
    cb_pattern_fill(want, 0, s, seed_of(i));
    return memcmp(got, want, s) == 0 ? 0 : -1;
}

/* The disk-hit phase: threads take batches of keys from `next`. */
typedef struct hit_job {
    const ob_opts *o;
    cr_store *rw;
    const char *sz;
    const uint64_t *idx; /* the disk-only keys' numbers */
    uint64_t s, n_disk;
    _Atomic uint64_t next, bytes, bad, failed;
    /* the passes' gate (mu): threads count themselves `ready` once their buffer is set up,
     * run pass p once `pass` reaches p, and count themselves `done` after it */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t ready, pass, done;
} hit_job;

/* A disk-hit thread: wait for pass p to be started (false: the phase is over). */
static bool hit_wait_pass(hit_job *j, uint32_t p)
{
    pthread_mutex_lock(&j->mu);
    while (j->pass < p)
        pthread_cond_wait(&j->cv, &j->mu);
    bool run = j->pass == p;
    pthread_mutex_unlock(&j->mu);
    return run;
}

static void hit_count(hit_job *j, uint32_t *counter)
{
    pthread_mutex_lock(&j->mu);
    (*counter)++;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* The main thread: wait until `*counter` reaches n. */
static void hit_await(hit_job *j, const uint32_t *counter, uint32_t n)
{
    pthread_mutex_lock(&j->mu);
    while (*counter < n)
        pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
}

/* Start pass p (UINT32_MAX: end the phase). */
static void hit_start(hit_job *j, uint32_t p)
{
    pthread_mutex_lock(&j->mu);
    atomic_store(&j->next, 0);
    atomic_store(&j->bytes, 0);
    j->done = 0;
    j->pass = p;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* One pass over the disk-only keys: batches taken from `next` until none is left. */
static void hit_pass(hit_job *j, bool ready, bool registered, uint8_t *area, const char **keys,
                     char (*kb)[64], void **vals, int64_t *res, size_t *caps, uint8_t *want)
{
    uint32_t b = j->o->batch;
    while (ready) {
        uint64_t i = atomic_fetch_add(&j->next, b);
        if (i >= j->n_disk)
            break;
        size_t m = j->n_disk - i < b ? (size_t)(j->n_disk - i) : b;
        for (size_t k = 0; k < m; k++) {
            snprintf(kb[k], 64, "ob-%s-%" PRIu64, j->sz, j->idx[i + k]);
            keys[k] = kb[k];
        }
        for (size_t k = 0; registered && k < m; k++) {
            vals[k] = area + k * j->s;
            caps[k] = j->s;
        }
        int brc = registered ? cr_store_batch_get_into(j->rw, keys, vals, caps, m, res)
                             : cr_store_batch_get(j->rw, keys, m, vals, res);
        if (brc < 0) {
            atomic_fetch_add(&j->failed, m);
            continue;
        }
        for (size_t k = 0; k < m; k++) {
            if (res[k] == (int64_t)j->s) {
                atomic_fetch_add(&j->bytes, j->s);
                if (j->o->verify && check(vals[k], j->s, j->idx[i + k], want) < 0)
                    atomic_fetch_add(&j->bad, 1);
            } else {
                atomic_fetch_add(&j->failed, 1);
            }
            if (!registered)
                free(vals[k]);
        }
    }
}

static void *hit_main(void *arg)
{
    hit_job *j = arg;
    uint32_t b = j->o->batch;
    const char **keys = calloc(b, sizeof(*keys));
    char(*kb)[64] = calloc(b, 64);
    void **vals = calloc(b, sizeof(*vals));
    int64_t *res = calloc(b, sizeof(*res));
    size_t *caps = calloc(b, sizeof(*caps));
    uint8_t *want = malloc(j->s);
    /* zero-copy: one registered buffer of b values, read straight into by the engine */
    uint8_t *area = NULL;
    bool registered = false;
    if (!j->o->copying_gets && posix_memalign((void **)&area, 4096, (size_t)b * j->s) == 0) {
        memset(area, 0, (size_t)b * j->s);
        registered = cr_store_register_buffer(j->rw, area, (size_t)b * j->s) == 0;
    }
    if (!j->o->copying_gets && !registered) {
        fprintf(stderr, CB_PROG " offload: registering the disk-hit buffer: %s\n",
                cr_last_error_message());
        atomic_fetch_add(&j->failed, 1); /* (the run fails; this thread reads nothing) */
    }
    bool ready = j->o->copying_gets || registered;
    ready = ready && keys && kb && vals && res && caps && want;
    hit_count(j, &j->ready);
    for (uint32_t pass = 1; hit_wait_pass(j, pass); pass++) {
        hit_pass(j, ready, registered, area, keys, kb, vals, res, caps, want);
        hit_count(j, &j->done);
    }
    if (registered)
        cr_store_unregister_buffer(j->rw, area);
    free(area);
    free(caps);
    free(keys);
    free(kb);
    free(vals);
    free(res);
    free(want);
    return NULL;
}

/* Put values lo .. lo+m-1 of size s with one cr_store_batch_put, again for the keys refused
 * for space (CR_NO_AVAILABLE_HANDLE: the holder is still offloading) every 200 us for up to
 * 30 s. vals holds m values of s bytes (filled: their patterns are there already, else they
 * are written first). Returns 0, or -1 after printing the failure. */
static int put_batch(cr_store *rw, const char *sz, uint64_t s, uint64_t lo, size_t m, uint8_t *vals,
                     bool filled, uint64_t *retries)
{
    char(*kb)[64] = calloc(m, 64);
    const char **keys = calloc(m, sizeof(*keys));
    const void **v = calloc(m, sizeof(*v));
    size_t *sizes = calloc(m, sizeof(*sizes));
    int *res = calloc(m, sizeof(*res));
    int rc = kb && keys && v && sizes && res ? 0 : -1;
    size_t left = m;
    for (size_t k = 0; rc == 0 && k < m; k++) {
        snprintf(kb[k], 64, "ob-%s-%" PRIu64, sz, lo + k);
        if (!filled)
            cb_pattern_fill(vals + k * s, 0, s, seed_of(lo + k));
        keys[k] = kb[k], v[k] = vals + k * s, sizes[k] = s;
    }
    uint64_t until = cb_now_ns() + 30ull * 1000000000ull;
    while (rc == 0 && left > 0) {
        rc = cr_store_batch_put(rw, keys, v, sizes, left, NULL, res);
        if (rc < 0)
            fprintf(stderr, CB_PROG " offload: batch put: %s\n", cr_last_error_message());
        size_t again = 0;
        for (size_t k = 0; rc == 0 && k < left; k++) {
            if (res[k] == CR_NO_AVAILABLE_HANDLE && cb_now_ns() < until) {
                keys[again] = keys[k], v[again] = v[k];
                again++;
            } else if (res[k] < 0) {
                fprintf(stderr, CB_PROG " offload: put %s: %s\n", keys[k], cr_status_name(res[k]));
                rc = -1;
            }
        }
        *retries += again;
        left = again;
        if (rc == 0 && left > 0) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
    free(kb);
    free(keys);
    free(v);
    free(sizes);
    free(res);
    return rc;
}

/* One round of value size s: its figures printed, its ratios (0: not measured) into
 * ratios[N_RATIOS]. Keys and the tier's directory carry the round (keys of a round never
 * meet an earlier round's). */
static int run_size(const ob_opts *o, const char *master, const char *root, uint64_t s,
                    uint32_t round, double *ratios)
{
    uint64_t bytes = s >= 64 * CB_KIB ? o->bytes : o->small_bytes;
    uint64_t n = bytes / s, segment = bytes / 4 > 64 * CB_MIB ? 64 * CB_MIB : bytes / 4;
    segment = (segment + CB_MIB - 1) & ~(CB_MIB - 1);
    char ssd[PATH_MAX], label[16], sz[32];
    cb_format_size(s, label, sizeof(label));
    if (round == 0)
        snprintf(sz, sizeof(sz), "%s", label);
    else
        snprintf(sz, sizeof(sz), "%s.r%u", label, round + 1);
    if (snprintf(ssd, sizeof(ssd), "%s/ssd-%s", root, sz) >= (int)sizeof(ssd))
        return -1;
    double bw = 0, br = 0, bw1 = 0, br1 = 0, wbusy = -1, wbusy2 = -1;
    if (baseline(root, s, n, &bw, &br, &wbusy) < 0)
        return -1;
    cr_store *holder = NULL, *rw = NULL;
    int rc = setup_store(master, segment, ssd, &holder);
    if (rc == 0)
        rc = setup_store(master, 0, NULL, &rw);
    /* values under 64 KiB are put in batches of --batch (one at a time, the bench's own put
     * rate, not the tier, bounded the offload stream), larger ones one at a time */
    size_t put_b = s < 64 * CB_KIB ? o->batch : 1;
    /* The values are made before the clock starts, as a server's KV blocks exist before they
     * are put (the pattern fill, ~0.15 ms per MiB here, would otherwise compete with the tier
     * for these two vCPUs inside the timed region); above PREFILL_MAX each is made as it is
     * put. */
    bool filled = n * s <= PREFILL_MAX;
    uint8_t *val = malloc(filled ? n * s : s * put_b), *want = malloc(s);
    char key[64];
    if (rc < 0 || val == NULL || want == NULL)
        goto out;
    for (uint64_t i = 0; filled && i < n; i++)
        cb_pattern_fill(val + i * s, 0, s, seed_of(i));
    /* offload: a put stream that overflows the segment */
    cr_store_offload_stats st0, st1;
    cr_store_offload_stats_get(holder, &st0);
    dev_t dev = dir_dev(root);
    disk_sample d_start = disk_now(dev), d_last = d_start, d_first = d_start;
    uint64_t t0 = cb_now_ns(), retries = 0, t_first = 0, first_n = 0, first_put = 0;
    double first_ms = 0;
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        if (t_first == 0) { /* when the first offload landed (the memory was full before) */
            cr_store_offload_stats_get(holder, &st1);
            if (st1.offloads > st0.offloads) {
                t_first = cb_now_ns();
                first_ms = (double)(t_first - t0) / 1e6;
                first_put = i;
                first_n = st1.offloads - st0.offloads;
                d_first = disk_now(dev);
            }
        }
        if (put_b > 1) {
            size_t m = n - i < put_b ? (size_t)(n - i) : put_b;
            rc = put_batch(rw, sz, s, i, m, filled ? val + i * s : val, filled, &retries);
            i += m - 1;
            continue;
        }
        snprintf(key, sizeof(key), "ob-%s-%" PRIu64, sz, i);
        uint8_t *v = filled ? val + i * s : val;
        if (!filled)
            cb_pattern_fill(v, 0, s, seed_of(i));
        uint64_t until = cb_now_ns() + 30ull * 1000000000ull;
        while ((rc = cr_store_put(rw, key, v, s, NULL)) == CR_NO_AVAILABLE_HANDLE &&
               cb_now_ns() < until) {
            retries++;
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
        if (rc < 0)
            fprintf(stderr, CB_PROG " offload: put %s: %s\n", key, cr_last_error_message());
    }
    /* until the last offload has landed (no change for 100 ms) */
    uint64_t last = cb_now_ns(), prev = 0;
    for (;;) {
        cr_store_offload_stats_get(holder, &st1);
        if (st1.offloads != prev) {
            prev = st1.offloads;
            last = cb_now_ns();
            d_last = disk_now(dev);
        } else if (cb_now_ns() - last > 100000000ull) {
            break;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    uint64_t offloaded = st1.offloads - st0.offloads;
    double off_gbps = (double)(offloaded * s) / ((double)(last - t0) / 1e9) / 1e9;
    double stream_gbps =
        t_first != 0 && last > t_first && offloaded > first_n
            ? (double)((offloaded - first_n) * s) / ((double)(last - t_first) / 1e9) / 1e9
            : 0;
    /* Which keys are on disk only (evicted) and which in memory (some of those have a disk
     * copy too: the master writes copies ahead of eviction once the memory is half full). */
    uint64_t *disk_idx = calloc(n, sizeof(*disk_idx)), *mem_idx = calloc(n, sizeof(*mem_idx));
    uint64_t n_disk = 0, n_mem = 0;
    for (uint64_t i = 0; disk_idx != NULL && mem_idx != NULL && i < n; i++) {
        cr_replica_info ri;
        snprintf(key, sizeof(key), "ob-%s-%" PRIu64, sz, i);
        int nr = cr_store_get_replicas(rw, key, &ri, 1);
        if (nr >= 1 && ri.on_disk)
            disk_idx[n_disk++] = i;
        else if (nr >= 1)
            mem_idx[n_mem++] = i;
    }
    /* disk hits: batch gets of every disk-only value, from several threads */
    hit_job job = {.o = o, .rw = rw, .sz = sz, .idx = disk_idx, .s = s, .n_disk = n_disk};
    pthread_mutex_init(&job.mu, NULL);
    pthread_cond_init(&job.cv, NULL);
    pthread_t th[64];
    uint32_t nt = o->threads;
    for (uint32_t t = 0; t < nt; t++)
        if (pthread_create(&th[t], NULL, hit_main, &job) != 0)
            nt = t;
    hit_await(&job, &job.ready, nt); /* buffers allocated and registered: not timed */
    double pass_gbps[HIT_PASSES];
    for (uint32_t p = 1; p <= HIT_PASSES; p++) {
        hit_start(&job, p);
        t0 = cb_now_ns();
        hit_await(&job, &job.done, nt);
        pass_gbps[p - 1] = (double)atomic_load(&job.bytes) / secs(t0) / 1e9;
    }
    hit_start(&job, UINT32_MAX);
    for (uint32_t t = 0; t < nt; t++)
        pthread_join(th[t], NULL);
    pthread_cond_destroy(&job.cv);
    pthread_mutex_destroy(&job.mu);
    double first_gbps = pass_gbps[0], hit_gbps = pass_gbps[HIT_PASSES - 1], tier_r = 0;
    if (tier_files_read(ssd, s, &tier_r) < 0)
        tier_r = 0; /* (reported as 0: the files could not be read O_DIRECT) */
    /* the baseline again, after the tier's phases: this disk's speed drifts within a run, so
     * the ratios are against the mean of the two */
    double bw2 = 0, br2 = 0;
    if (baseline(root, s, n, &bw2, &br2, &wbusy2) == 0) {
        bw1 = bw, br1 = br;
        bw = (bw + bw2) / 2, br = (br + br2) / 2;
    }
    uint64_t bad = atomic_load(&job.bad), failed = atomic_load(&job.failed);
    /* latency: single gets, disk-only vs in memory */
    cb_hist hd = {{0}, 0}, hm = {{0}, 0};
    for (uint32_t k = 0; rc == 0 && k < o->latency && n_disk > 0 && n_mem > 0; k++) {
        uint64_t i = disk_idx[(uint64_t)k * 7919 % n_disk];
        snprintf(key, sizeof(key), "ob-%s-%" PRIu64, sz, i);
        void *v = NULL;
        if (o->latency_gap_ms > 0)
            usleep(o->latency_gap_ms * 1000u);
        uint64_t a = cb_now_ns();
        int64_t g = cr_store_get(rw, key, &v);
        cb_hist_add(&hd, cb_now_ns() - a, 1);
        if (g != (int64_t)s || (o->verify && check(v, s, i, want) < 0))
            bad += g == (int64_t)s, failed += g != (int64_t)s;
        free(v);
        i = mem_idx[n_mem - 1 - (uint64_t)k % n_mem];
        snprintf(key, sizeof(key), "ob-%s-%" PRIu64, sz, i);
        a = cb_now_ns();
        g = cr_store_get(rw, key, &v);
        cb_hist_add(&hm, cb_now_ns() - a, 1);
        if (g != (int64_t)s || (o->verify && check(v, s, i, want) < 0))
            bad += g == (int64_t)s, failed += g != (int64_t)s;
        free(v);
    }
    printf("%-5s bytes=%s offloaded=%" PRIu64 "/%" PRIu64 ", disk-only %" PRIu64
           " (put retries %" PRIu64 ")\n"
           "      baseline O_DIRECT write %.2f GB/s, read %.2f GB/s (before %.2f/%.2f, after "
           "%.2f/%.2f)\n"
           "      offload %.2f GB/s (%.2fx write)  disk hit %.2f GB/s (%.2fx read; "
           "first pass %.2f GB/s, %.2fx)\n"
           "      the tier's files read back with O_DIRECT %.2f GB/s: disk hit %.2fx that\n"
           "      offload once the segment is full %.2f GB/s (%.2fx write; the first landed "
           "%.1f ms after the first put, at put %" PRIu64 ")\n"
           "      disk busy: offload %.0f%% (once full %.0f%%; %.0f MiB written), baseline writes "
           "%.0f%%/%.0f%%\n"
           "      get latency p50/p99: disk hit %.0f/%.0f us, memory hit %.0f/%.0f us\n"
           "      failed gets %" PRIu64 ", wrong bytes %" PRIu64 "%s\n",
           sz, cb_format_size(bytes, (char[32]){0}, 32), offloaded, n, n_disk, retries, bw, br, bw1,
           br1, bw2, br2, off_gbps, bw > 0 ? off_gbps / bw : 0, hit_gbps,
           br > 0 ? hit_gbps / br : 0, first_gbps, br > 0 ? first_gbps / br : 0, tier_r,
           tier_r > 0 ? hit_gbps / tier_r : 0, stream_gbps, bw > 0 ? stream_gbps / bw : 0, first_ms,
           first_put, 100 * busy_share(d_start, d_last), 100 * busy_share(d_first, d_last),
           (double)(d_last.wr_sectors - d_start.wr_sectors) * 512 / (double)CB_MIB, 100 * wbusy,
           100 * wbusy2, (double)cb_hist_quantile(&hd, 0.5) / 1e3,
           (double)cb_hist_quantile(&hd, 0.99) / 1e3, (double)cb_hist_quantile(&hm, 0.5) / 1e3,
           (double)cb_hist_quantile(&hm, 0.99) / 1e3, failed, bad, o->verify ? " (verified)" : "");
    fflush(stdout);
    ratios[R_OFFLOAD] = bw > 0 ? off_gbps / bw : 0;
    ratios[R_FULL] = bw > 0 ? stream_gbps / bw : 0;
    ratios[R_HIT] = br > 0 ? hit_gbps / br : 0;
    ratios[R_FIRST] = br > 0 ? first_gbps / br : 0;
    ratios[R_HIT_TIER] = tier_r > 0 ? hit_gbps / tier_r : 0;
    if (bad > 0 || failed > 0)
        rc = -1;
    free(disk_idx);
    free(mem_idx);
out:
    free(val);
    free(want);
    if (rw != NULL)
        cr_store_remove_all(rw, true);
    cr_store_destroy(rw);
    cr_store_destroy(holder);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ssd);
    if (system(cmd) != 0)
        fprintf(stderr, CB_PROG " offload: could not remove %s\n", ssd);
    return rc < 0 ? -1 : 0;
}

/* --rounds: the median and range of each ratio over the rounds of one value size. */
static void print_rounds(uint64_t s, uint32_t rounds, double r[][N_RATIOS])
{
    static const char *const names[N_RATIOS] = {"offload x write", "once full x write",
                                                "disk hit x read", "first pass x read",
                                                "disk hit x tier files"};
    char sz[32];
    printf("%-5s median over %u rounds (range):", cb_format_size(s, sz, sizeof(sz)), rounds);
    for (int k = 0; k < N_RATIOS; k++) {
        double v[MAX_ROUNDS], lo, med, hi;
        for (uint32_t i = 0; i < rounds; i++)
            v[i] = r[i][k];
        cb_range(v, rounds, &lo, &med, &hi);
        printf("%s %s %.2f (%.2f..%.2f)", k ? "," : "", names[k], med, lo, hi);
    }
    printf("\n");
    fflush(stdout);
}

int cb_offload_main(int argc, char **argv)
{
    ob_opts o;
    if (parse(argc, argv, &o) < 0)
        return CB_EXIT_USAGE;
    char root[PATH_MAX];
    snprintf(root, sizeof(root), "%s/crescent-offload-bench-XXXXXX", o.dir);
    if (mkdtemp(root) == NULL) {
        fprintf(stderr, CB_PROG " offload: mkdtemp in %s: %s\n", o.dir, strerror(errno));
        return CB_EXIT_FAIL;
    }
    char poll[16];
    snprintf(poll, sizeof(poll), "%u", o.poll_ms);
    setenv("CRESCENT_OFFLOAD_POLL_MS", poll, 1);
    char path[PATH_MAX + 32];
    const char *bin = o.master_bin ? o.master_bin : ct_default_master_bin(path, sizeof(path));
    const char *args[] = {"--enable_offload=true", "--offload_on_evict=true", NULL};
    ct_master m;
    ct_master_opts mo = {.bin = bin, .args = args, .ready_ms = 10000};
    int rc = ct_master_start(&m, &mo);
    if (rc < 0) {
        fprintf(stderr, CB_PROG " offload: %s did not start (--master-bin PATH)\n", bin);
        rmdir(root);
        return CB_EXIT_FAIL;
    }
    const char *populate = getenv("CRESCENT_SEGMENT_POPULATE");
    printf("offload bench: dir %s, poll %u ms, batch %u, holder's segment committed: %s\n", root,
           o.poll_ms, o.batch,
           populate != NULL && populate[0] != '\0' ? populate
                                                   : "background (a disk tier's default)");
    for (size_t i = 0; i < o.n_sizes && rc == 0; i++) {
        double r[MAX_ROUNDS][N_RATIOS] = {{0}};
        for (uint32_t k = 0; k < o.rounds && rc == 0; k++)
            rc = run_size(&o, m.addr, root, o.sizes[i], k, r[k]);
        if (rc == 0 && o.rounds > 1)
            print_rounds(o.sizes[i], o.rounds, r);
    }
    ct_master_stop(&m, 10000);
    rmdir(root);
    return rc == 0 ? CB_EXIT_OK : CB_EXIT_FAIL;
}
