/*
 * disk_bench.c - crescent-bench disk: the disk tier's store (src/disk)
 * against plain sequential O_DIRECT I/O of the same bytes on the same
 * filesystem, in the same run.
 *
 *   crescent-bench disk [--dir D] [--value-sizes 4K,1M] [--bytes 1G] [--small-bytes 128M]
 *                       [--batch 16] [--threads 1] [--io auto|direct|buffered]
 *                       [--sync none|seal|put] [--latency N] [--verify] [--keep]
 *
 * Per value size S, with the same number of bytes B (B = --bytes, or
 * --small-bytes for values under 64 KiB):
 *   baseline write  one file, pwrite of S-byte blocks, back to back, O_DIRECT,
 *                   then fdatasync (what `dd oflag=direct bs=S` does, plus the sync)
 *   baseline read   pread of the same blocks from that file, O_DIRECT
 *   offload (put)   B/S crf_put_batch calls of --batch values from --threads
 *                   threads, then crf_sync
 *   disk hit (get)  the same keys, crf_get_batch into CRF_BLOCK-aligned memory
 *   ratios          put / baseline write and get / baseline read (target >= 0.8
 *                   for 1 MiB)
 * The bytes are cut into --rounds slices and, slice by slice, the baseline
 * and the store take turns (alternating which goes first), writes first, then
 * reads: a disk whose speed drifts (a shared virtual disk) affects both sides
 * alike, so the ratio is not an artefact of when each side ran.
 * With S <= 64 KiB the block baseline is also given at 1 MiB blocks, and
 * --latency N measures N single-key crf_get calls against N single-block
 * O_DIRECT preads at random offsets (p50 / p99): the cost of handing each
 * call to the store's I/O thread.
 *
 * This subcommand links the disk layer directly (it has no public API yet).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "bench.h"
#include "options.h"
#include "disk/disk.h"
#include "tool_util.h"

#define MAX_SIZES   8
#define RING_VALUES 64 /* distinct values cycled through (verifiable, not one buffer) */

typedef struct db_opts {
    const char *dir;
    uint64_t sizes[MAX_SIZES];
    int n_sizes;
    uint64_t bytes, small_bytes;
    uint32_t batch, threads, latency, rounds;
    crf_io_mode io;
    crf_sync_policy sync;
    bool verify, keep;
} db_opts;

static void usage(FILE *to)
{
    fprintf(to,
            "usage: " CB_PROG " disk [flags]\n"
            "  --dir D            where to create the store and baseline files (default $TMPDIR\n"
            "                     or /tmp); a fresh subdirectory is made and removed\n"
            "  --value-sizes L    value sizes, e.g. 4K,1M (default 4K,1M)\n"
            "  --bytes B          bytes per case for values >= 64K (default 1G)\n"
            "  --small-bytes B    bytes per case for smaller values (default 128M)\n"
            "  --batch N          values per crf_put_batch / crf_get_batch (default 16)\n"
            "  --threads N        calling threads (default 1)\n"
            "  --io MODE          auto | direct | buffered (default auto)\n"
            "  --sync MODE        none | seal | put (default seal)\n"
            "  --latency N        single-key get latency samples (default 2000; 0 = skip)\n"
            "  --rounds N         baseline and store alternate in N slices of the bytes, so\n"
            "                     both see the same disk conditions (default 8)\n"
            "  --verify           check every byte read back\n"
            "  --keep             leave the files behind\n"
            "Exit status: 0 ok, 1 an operation or verification failed, 2 bad usage.\n");
}

static int parse_sizes(const char *text, db_opts *o)
{
    size_t n = 0;
    if (cb_parse_size_list(CB_PROG " disk", "--value-sizes", text, 256 * CB_MIB, o->sizes,
                           MAX_SIZES, &n) < 0)
        return -1;
    o->n_sizes = n;
    return 0;
}

/* One flag with a value (ct_parse_options' apply). */
static int apply_value(void *ctx, const char *name, const char *v)
{
    db_opts *o = ctx;
    uint32_t u;
    if (strcmp(name, "--dir") == 0) {
        o->dir = v;
    } else if (strcmp(name, "--value-sizes") == 0) {
        if (parse_sizes(v, o) < 0)
            return -1;
    } else if (strcmp(name, "--bytes") == 0 || strcmp(name, "--small-bytes") == 0) {
        uint64_t b;
        if (cb_parse_size(v, &b) < 0 || b < CB_MIB)
            return cb_bad_value("disk", name, v, "a size of at least 1M");
        *(name[2] == 'b' ? &o->bytes : &o->small_bytes) = b;
    } else if (strcmp(name, "--batch") == 0 || strcmp(name, "--threads") == 0 ||
               strcmp(name, "--latency") == 0) {
        uint32_t lo = strcmp(name, "--latency") == 0 ? 0 : 1;
        uint32_t hi = strcmp(name, "--batch") == 0 ? 1024 : 1000000;
        if (strcmp(name, "--threads") == 0)
            hi = 64;
        if (cb_parse_u32(v, lo, hi, &u) < 0)
            return cb_bad_value("disk", name, v, "a whole number in range");
        *(name[2] == 'b' ? &o->batch : name[2] == 't' ? &o->threads : &o->latency) = u;
    } else if (strcmp(name, "--rounds") == 0) {
        if (cb_parse_u32(v, 1, 64, &u) < 0)
            return cb_bad_value("disk", name, v, "a whole number from 1 to 64");
        o->rounds = u;
    } else if (strcmp(name, "--io") == 0) {
        if (strcmp(v, "auto") == 0)
            o->io = CRF_IO_AUTO;
        else if (strcmp(v, "direct") == 0)
            o->io = CRF_IO_DIRECT;
        else if (strcmp(v, "buffered") == 0)
            o->io = CRF_IO_BUFFERED;
        else
            return cb_bad_value("disk", name, v, "auto, direct or buffered");
    } else if (strcmp(name, "--sync") == 0) {
        if (strcmp(v, "none") == 0)
            o->sync = CRF_SYNC_NONE;
        else if (strcmp(v, "seal") == 0)
            o->sync = CRF_SYNC_SEAL;
        else if (strcmp(v, "put") == 0)
            o->sync = CRF_SYNC_PUT;
        else
            return cb_bad_value("disk", name, v, "none, seal or put");
    }
    return 0;
}

static int parse_opts(int argc, char **argv, db_opts *o)
{
    memset(o, 0, sizeof(*o));
    const char *tmp = getenv("TMPDIR");
    o->dir = tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp";
    o->sizes[0] = 4 * CB_KIB;
    o->sizes[1] = CB_MIB;
    o->n_sizes = 2;
    o->bytes = CB_GIB;
    o->small_bytes = 128 * CB_MIB;
    o->batch = 16;
    o->threads = 1;
    o->latency = 2000;
    o->rounds = 8;
    o->io = CRF_IO_AUTO;
    o->sync = CRF_SYNC_SEAL;
    ct_option table[] = {
        CT_SWITCH("--verify", &o->verify),
        CT_SWITCH("--keep", &o->keep),
        CT_APPLY("--dir"),
        CT_APPLY("--value-sizes"),
        CT_APPLY("--bytes"),
        CT_APPLY("--small-bytes"),
        CT_APPLY("--batch"),
        CT_APPLY("--threads"),
        CT_APPLY("--io"),
        CT_APPLY("--sync"),
        CT_APPLY("--latency"),
        CT_APPLY("--rounds"),
    };
    int pr = ct_parse_options(argc, argv, table, sizeof(table) / sizeof(table[0]), apply_value, o,
                              CB_PROG " disk");
    if (pr == CT_OPTS_HELP) {
        usage(stdout);
        return 1;
    }
    if (pr < 0)
        return -1;
    return 0;
}

static const char *fs_name(const char *path, char *buf, size_t len)
{
    struct statfs sf;
    if (statfs(path, &sf) != 0) {
        snprintf(buf, len, "unknown (%s)", strerror(errno));
        return buf;
    }
    switch ((unsigned long)sf.f_type) {
    case 0xEF53:
        return "ext4";
    case 0x794C7630:
        return "overlayfs";
    case 0x01021994:
        return "tmpfs";
    case 0x58465342:
        return "xfs";
    case 0x9123683E:
        return "btrfs";
    case 0x6969:
        return "nfs";
    case 0x65735546:
        return "fuse";
    default:
        snprintf(buf, len, "0x%lx", (unsigned long)sf.f_type);
        return buf;
    }
}

/* ---- the plain O_DIRECT baseline -------------------------------------------- */

/* pwrite (or pread) blocks [lo, hi) of the baseline file; seconds, or -1. */
static double baseline_range(int fd, bool rd, uint64_t block, uint64_t lo, uint64_t hi,
                             uint8_t *src, uint8_t *dst, char *err, size_t el)
{
    uint64_t t0 = cb_now_ns();
    for (uint64_t i = lo; i < hi; i++) {
        ssize_t n = rd ? pread(fd, dst, block, (off_t)(i * block))
                       : pwrite(fd, src + (i % RING_VALUES) * block, block, (off_t)(i * block));
        if (n != (ssize_t)block) {
            snprintf(err, el, "baseline %s: %s", rd ? "pread" : "pwrite",
                     n < 0 ? strerror(errno) : "short");
            return -1;
        }
    }
    return (double)(cb_now_ns() - t0) / 1e9;
}

/* The whole baseline at one block size (no store alongside): write, fdatasync, read. */
static int baseline_alone(const char *path, uint64_t block, uint64_t bytes, uint8_t *src,
                          double *write_s, double *read_s, char *err, size_t el)
{
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0644);
    uint8_t *dst = NULL;
    if (fd < 0 || posix_memalign((void **)&dst, 4096, block) != 0) {
        snprintf(err, el, "open(O_DIRECT) %.300s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    uint64_t t0 = cb_now_ns();
    double w = baseline_range(fd, false, block, 0, bytes / block, src, dst, err, el);
    fdatasync(fd);
    *write_s = (double)(cb_now_ns() - t0) / 1e9;
    double r = w < 0 ? -1 : baseline_range(fd, true, block, 0, bytes / block, src, dst, err, el);
    *read_s = r;
    free(dst);
    close(fd);
    return w < 0 || r < 0 ? -1 : 0;
}

/* ---- the store ---------------------------------------------------------------- */

typedef struct job {
    crf_store *s;
    const db_opts *o;
    uint64_t size, lo, hi; /* keys [lo, hi) */
    uint8_t *values;       /* RING_VALUES values of `size` bytes */
    uint32_t thread;
    bool get;
    atomic_int *failed;
    char err[256];
} job;

static void key_of(char *k, size_t len, uint64_t i)
{
    snprintf(k, len, "bench-%010" PRIu64, i);
}

static void *run_job(void *arg)
{
    job *j = arg;
    const db_opts *o = j->o;
    uint32_t b = o->batch;
    char(*keys)[32] = malloc(b * sizeof(*keys));
    crf_put_item *puts = calloc(b, sizeof(*puts));
    crf_get_item *gets = calloc(b, sizeof(*gets));
    int *pres = calloc(b, sizeof(*pres));
    int64_t *gres = calloc(b, sizeof(*gres));
    uint8_t *dst = NULL;
    if (posix_memalign((void **)&dst, 4096, j->size * b) != 0 || keys == NULL || puts == NULL ||
        gets == NULL || pres == NULL || gres == NULL) {
        snprintf(j->err, sizeof(j->err), "out of memory");
        atomic_store(j->failed, 1);
        goto out;
    }
    /* Thread t handles keys lo + t, lo + t + threads, ... in batches. */
    for (uint64_t i = j->lo + j->thread; i < j->hi && !atomic_load(j->failed);) {
        uint32_t n = 0;
        uint64_t first = i;
        for (; n < b && i < j->hi; n++, i += o->threads) {
            key_of(keys[n], sizeof(keys[n]), i);
            if (j->get)
                gets[n] = (crf_get_item){keys[n], strlen(keys[n]), dst + n * j->size, j->size};
            else
                puts[n] = (crf_put_item){keys[n],
                                         strlen(keys[n]),
                                         j->values + (i % RING_VALUES) * j->size,
                                         j->size,
                                         NULL,
                                         0};
        }
        int rc = j->get ? crf_get_batch(j->s, gets, n, gres) : crf_put_batch(j->s, puts, n, pres);
        for (uint32_t k = 0; k < n && rc == 0; k++) {
            if (j->get ? gres[k] != (int64_t)j->size : pres[k] != 0) {
                rc = j->get ? (int)gres[k] : pres[k];
                break;
            }
            if (j->get && o->verify) {
                uint64_t idx = first + (uint64_t)k * o->threads;
                const uint8_t *want = j->values + (idx % RING_VALUES) * j->size;
                if (cb_first_mismatch(dst + k * j->size, want, j->size) >= 0) {
                    snprintf(j->err, sizeof(j->err), "value %" PRIu64 " read back wrong", idx);
                    atomic_store(j->failed, 1);
                    goto out;
                }
            }
        }
        if (rc != 0) {
            snprintf(j->err, sizeof(j->err), "%s: %s: %s", j->get ? "get" : "put",
                     cr_status_name(rc), cr_last_error_message());
            atomic_store(j->failed, 1);
        }
    }
out:
    free(dst);
    free(keys);
    free(puts);
    free(gets);
    free(pres);
    free(gres);
    return NULL;
}

static int run_phase(crf_store *s, const db_opts *o, uint64_t size, uint64_t lo, uint64_t hi,
                     uint8_t *values, bool get, double *secs, char *err, size_t el)
{
    atomic_int failed = 0;
    job *jobs = calloc(o->threads, sizeof(*jobs));
    pthread_t *th = calloc(o->threads, sizeof(*th));
    uint64_t t0 = cb_now_ns();
    for (uint32_t t = 0; t < o->threads; t++) {
        jobs[t] = (job){s, o, size, lo, hi, values, t, get, &failed, ""};
        pthread_create(&th[t], NULL, run_job, &jobs[t]);
    }
    for (uint32_t t = 0; t < o->threads; t++)
        pthread_join(th[t], NULL);
    *secs = (double)(cb_now_ns() - t0) / 1e9;
    int rc = 0;
    if (atomic_load(&failed)) {
        for (uint32_t t = 0; t < o->threads; t++)
            if (jobs[t].err[0] != '\0') {
                snprintf(err, el, "%s", jobs[t].err);
                break;
            }
        rc = -1;
    }
    free(jobs);
    free(th);
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Single-key gets vs single-block preads, random keys/offsets: p50 and p99 in microseconds. */
static void latency(crf_store *s, const char *base_path, uint64_t size, uint64_t count,
                    uint32_t samples)
{
    uint64_t *a = calloc(samples, sizeof(*a)), *b = calloc(samples, sizeof(*b));
    uint8_t *dst = NULL;
    int fd = open(base_path, O_RDONLY | O_DIRECT);
    if (a == NULL || b == NULL || fd < 0 || posix_memalign((void **)&dst, 4096, size) != 0) {
        free(a);
        free(b);
        if (fd >= 0)
            close(fd);
        return;
    }
    uint64_t x = 88172645463325252ull;
    for (uint32_t i = 0; i < samples; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        char key[32];
        key_of(key, sizeof(key), x % count);
        uint64_t t0 = cb_now_ns();
        crf_get(s, key, strlen(key), dst, size);
        a[i] = cb_now_ns() - t0;
        t0 = cb_now_ns();
        if (pread(fd, dst, size, (off_t)((x >> 20) % count * size)) < 0)
            break;
        b[i] = cb_now_ns() - t0;
    }
    qsort(a, samples, sizeof(*a), cmp_u64);
    qsort(b, samples, sizeof(*b), cmp_u64);
    char sz[32];
    printf("  latency %s: crf_get p50 %.1f us p99 %.1f us | O_DIRECT pread p50 %.1f us p99 %.1f "
           "us (%u random samples)\n",
           cb_format_size(size, sz, sizeof(sz)), (double)a[samples / 2] / 1e3,
           (double)a[samples * 99 / 100] / 1e3, (double)b[samples / 2] / 1e3,
           (double)b[samples * 99 / 100] / 1e3, samples);
    free(a);
    free(b);
    free(dst);
    close(fd);
}

static int run_size(const db_opts *o, const char *root, uint64_t size)
{
    char err[512] = "", sz[32], path[4400], store_dir[4400];
    uint64_t bytes = size < 64 * CB_KIB ? o->small_bytes : o->bytes;
    uint64_t count = bytes / size;
    bytes = count * size;
    uint8_t *values = NULL;
    if (posix_memalign((void **)&values, 4096, size * RING_VALUES) != 0) {
        fprintf(stderr, CB_PROG " disk: out of memory\n");
        return CB_EXIT_FAIL;
    }
    for (int v = 0; v < RING_VALUES; v++)
        cb_pattern_fill(values + (uint64_t)v * size, 0, size, (uint64_t)v * 7919 + size);
    cb_format_size(size, sz, sizeof(sz));
    snprintf(path, sizeof(path), "%s/baseline-%s.bin", root, sz);
    snprintf(store_dir, sizeof(store_dir), "%s/store-%s", root, sz);

    double big_w = 0, big_r = 0;
    int rc = 0;
    if (size < CB_MIB && bytes >= RING_VALUES * CB_MIB) {
        uint8_t *bigvals = NULL;
        if (posix_memalign((void **)&bigvals, 4096, CB_MIB * RING_VALUES) == 0) {
            memset(bigvals, 0x5c, CB_MIB * RING_VALUES);
            char bpath[4500];
            snprintf(bpath, sizeof(bpath), "%s.1m", path);
            rc = baseline_alone(bpath, CB_MIB, bytes, bigvals, &big_w, &big_r, err, sizeof(err));
            unlink(bpath);
            free(bigvals);
        }
    }
    crf_config cfg;
    crf_config_init(&cfg);
    cfg.path = store_dir;
    cfg.io_mode = o->io;
    cfg.sync = o->sync;
    cfg.capacity_bytes = bytes * 2 + 64 * CB_MIB;
    crf_store *s = NULL;
    if (rc == 0 && crf_open(&cfg, &s) != 0) {
        snprintf(err, sizeof(err), "crf_open: %s", cr_last_error_message());
        rc = -1;
    }
    int fd = rc == 0 ? open(path, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0644) : -1;
    uint8_t *rbuf = NULL;
    if (rc == 0 && (fd < 0 || posix_memalign((void **)&rbuf, 4096, size) != 0)) {
        snprintf(err, sizeof(err), "open(O_DIRECT) %.300s: %s", path, strerror(errno));
        rc = -1;
    }
    /* Writes, then reads; slice by slice, alternating who goes first. */
    double base_w = 0, base_r = 0, put_s = 0, get_s = 0;
    for (int phase = 0; phase < 2 && rc == 0; phase++) {
        bool rd = phase == 1;
        for (uint32_t r = 0; r < o->rounds && rc == 0; r++) {
            uint64_t lo = count * r / o->rounds, hi = count * (r + 1) / o->rounds;
            for (int side = 0; side < 2 && rc == 0; side++) {
                if ((side == 0) == (r % 2 == 0)) {
                    double t = baseline_range(fd, rd, size, lo, hi, values, rbuf, err, sizeof(err));
                    if (t < 0)
                        rc = -1;
                    *(rd ? &base_r : &base_w) += t;
                } else {
                    double t = 0;
                    rc = run_phase(s, o, size, lo, hi, values, rd, &t, err, sizeof(err));
                    *(rd ? &get_s : &put_s) += t;
                }
            }
        }
        if (rc == 0 && !rd) {
            /* Both sides end their writes durable. */
            uint64_t t0 = cb_now_ns();
            fdatasync(fd);
            base_w += (double)(cb_now_ns() - t0) / 1e9;
            t0 = cb_now_ns();
            if (crf_sync(s) != 0) {
                snprintf(err, sizeof(err), "crf_sync: %s", cr_last_error_message());
                rc = -1;
            }
            put_s += (double)(cb_now_ns() - t0) / 1e9;
        }
    }
    if (fd >= 0)
        close(fd);
    free(rbuf);
    if (rc != 0) {
        fprintf(stderr, CB_PROG " disk: %s: %s\n", sz, err);
        crf_close(s);
        free(values);
        return CB_EXIT_FAIL;
    }
    crf_stats st;
    crf_get_stats(s, &st);
    double gb = (double)bytes / 1e9;
    printf("disk %s x %" PRIu64 " (batch %u, %u thread%s, sync %s): put %.2f GB/s = %.2fx seq "
           "O_DIRECT write %.2f GB/s | get %.2f GB/s = %.2fx seq O_DIRECT read %.2f GB/s\n",
           sz, count, o->batch, o->threads, o->threads == 1 ? "" : "s",
           o->sync == CRF_SYNC_NONE   ? "none"
           : o->sync == CRF_SYNC_SEAL ? "seal"
                                      : "put",
           gb / put_s, base_w / put_s, gb / base_w, gb / get_s, base_r / get_s, gb / base_r);
    if (big_w > 0)
        printf("  vs 1M-block O_DIRECT (run alone, before): write %.2f GB/s (put %.2fx), read "
               "%.2f GB/s (get %.2fx)\n",
               gb / big_w, big_w / put_s, gb / big_r, big_r / get_s);
    printf("  store: %s; %" PRIu64 " buckets, %" PRIu64 " submits for %" PRIu64 " SQEs, %" PRIu64
           " fdatasyncs, %" PRIu64 " MiB written straight from the callers' memory\n",
           st.direct_io ? "O_DIRECT" : "buffered", st.buckets, st.submits, st.sqes, st.fdatasyncs,
           st.direct_write_bytes >> 20);
    if (o->latency > 0)
        latency(s, path, size, count, o->latency);
    crf_close(s);
    if (!o->keep)
        unlink(path);
    free(values);
    return CB_EXIT_OK;
}

static void remove_tree(const char *root)
{
    char cmd[4300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, CB_PROG " disk: could not remove %s\n", root);
}

int cb_disk_main(int argc, char **argv)
{
    db_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc != 0)
        return rc > 0 ? CB_EXIT_OK : CB_EXIT_USAGE;
    char root[4096];
    snprintf(root, sizeof(root), "%s/crescent-bench-disk-XXXXXX", o.dir);
    if (mkdtemp(root) == NULL) {
        fprintf(stderr, CB_PROG " disk: mkdtemp in %s: %s\n", o.dir, strerror(errno));
        return CB_EXIT_FAIL;
    }
    char fsbuf[32];
    printf("disk bench in %s (filesystem %s)\n", root, fs_name(root, fsbuf, sizeof(fsbuf)));
    {
        crf_config cfg;
        crf_config_init(&cfg);
        char probe_dir[4300];
        snprintf(probe_dir, sizeof(probe_dir), "%s/probe", root);
        cfg.path = probe_dir;
        cfg.io_mode = o.io;
        cfg.background_compaction = false;
        crf_store *s = NULL;
        if (crf_open(&cfg, &s) == 0) {
            crf_stats st;
            crf_get_stats(s, &st);
            printf("O_DIRECT: %s (%s)\n", st.direct_io ? "yes" : "no", st.io_reason);
            crf_close(s);
        } else {
            fprintf(stderr, CB_PROG " disk: %s\n", cr_last_error_message());
            if (!o.keep)
                remove_tree(root);
            return CB_EXIT_FAIL;
        }
    }
    int result = CB_EXIT_OK;
    for (int i = 0; i < o.n_sizes && result == CB_EXIT_OK; i++)
        result = run_size(&o, root, o.sizes[i]);
    if (!o.keep)
        remove_tree(root);
    return result;
}
