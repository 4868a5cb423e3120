/*
 * crash_test.c - kill -9 of a process writing to a disk store, then reopen.
 *
 * The test runs rounds. In each, a child (this executable, "--child")
 * opens the store and runs a deterministic sequence of batches from a
 * given index on: each batch is a crf_put_batch of 1..4 keys (values from 1
 * byte to 1 MiB, several records in flight per submission) and maybe
 * removes of other keys; after each batch returns the child prints its
 * index. The parent reads those acknowledgements, kills the child with
 * SIGKILL at a random moment while it writes, opens the same directory
 * itself and checks every key:
 *   - a key whose last acknowledged operation was a put has exactly that
 *     value, or the value of the one unacknowledged batch in flight;
 *   - a key whose last acknowledged operation was a remove is missing, or
 *     has the in-flight batch's value;
 *   - no get returns anything but the exact bytes of a value that was put
 *     (no torn record, no older value of an overwritten or removed key).
 * The parent then takes what it found as the truth for the in-flight batch
 * and starts the next child after it. Rounds alternate O_DIRECT (where the
 * filesystem takes it) and buffered I/O.
 *
 * Every child is killed and reaped, also when a check fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "disk/disk.h"
#include "disk/disk_test_util.h"
#include "testing.h"

#define KEYS   64
#define ROUNDS 8

static const uint64_t sizes[] = {1, 100, 4096, 5000, 65536, 70000, 300000, 1 << 20};

typedef struct op {
    uint64_t key;
    bool remove;
    uint64_t version; /* batch index + 1 */
    uint64_t len;
} op;

/* The ops of batch b (distinct keys). */
static int batch_ops(uint64_t b, op *ops)
{
    int n = 1 + (int)(tu_mix(b) % 4);
    for (int j = 0; j < n; j++) {
        uint64_t r = tu_mix(b * 16 + (uint64_t)j);
        ops[j].key = (b * 5 + (uint64_t)j * 17) % KEYS;
        ops[j].remove = r % 6 == 0;
        ops[j].version = b + 1;
        ops[j].len = sizes[(r >> 8) % (sizeof(sizes) / sizeof(sizes[0]))];
    }
    return n;
}

static void config(crf_config *c, const char *dir, bool direct)
{
    crf_config_init(c);
    c->path = dir;
    c->io_mode = direct ? CRF_IO_AUTO : CRF_IO_BUFFERED;
    c->sync = CRF_SYNC_NONE; /* kill -9 loses nothing the kernel has: no fdatasync needed */
    c->capacity_bytes = 4ull << 30;
    c->bucket_keys_limit = 16;
    c->bucket_size_limit = 4u << 20;
    c->background_compaction = true;
    c->compaction_dead_ratio = 0.3;
}

static int child_main(const char *dir, bool direct, uint64_t first)
{
    crf_config c;
    config(&c, dir, direct);
    crf_store *s = NULL;
    int rc = crf_open(&c, &s);
    if (rc != 0) {
        printf("E open: %s\n", cr_last_error_message());
        return 1;
    }
    uint8_t *vals[4];
    for (int i = 0; i < 4; i++)
        vals[i] = malloc(1 << 20);
    char keys[4][32];
    for (uint64_t b = first;; b++) {
        op ops[4];
        int n = batch_ops(b, ops);
        crf_put_item items[4];
        int results[4];
        int np = 0;
        for (int j = 0; j < n; j++) {
            if (ops[j].remove)
                continue;
            tu_key(keys[np], sizeof(keys[np]), ops[j].key);
            tu_fill(vals[np], ops[j].len, ops[j].key, ops[j].version);
            items[np] = (crf_put_item){keys[np],   strlen(keys[np]), vals[np],
                                       ops[j].len, &ops[j].version,  sizeof(ops[j].version)};
            np++;
        }
        if (np > 0 && (rc = crf_put_batch(s, items, (size_t)np, results)) != 0) {
            printf("E batch %llu: %s\n", (unsigned long long)b, cr_last_error_message());
            return 1;
        }
        for (int j = 0; j < np; j++) {
            if (results[j] != 0) {
                printf("E put in batch %llu: %s\n", (unsigned long long)b,
                       cr_status_name(results[j]));
                return 1;
            }
        }
        for (int j = 0; j < n; j++) {
            if (!ops[j].remove)
                continue;
            char key[32];
            tu_key(key, sizeof(key), ops[j].key);
            rc = crf_remove(s, key, strlen(key));
            if (rc != 0 && rc != CR_OBJECT_NOT_FOUND) {
                printf("E remove in batch %llu: %s\n", (unsigned long long)b, cr_status_name(rc));
                return 1;
            }
        }
        printf("%llu\n", (unsigned long long)b);
        fflush(stdout);
    }
}

/* ---- parent ----------------------------------------------------------------- */

typedef struct key_state {
    bool present;
    uint64_t version, len;
} key_state;

static ct_proc child = {.pid = 0, .in_fd = -1, .out_fd = -1, .err_fd = -1};

static void kill_child(void)
{
    ct_proc_kill(&child);
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "crash_test: " __VA_ARGS__);                                               \
        fprintf(stderr, "\n");                                                                     \
        kill_child();                                                                              \
        return 1;                                                                                  \
    } while (0)

/* What a get of key returns now: 0 = missing, 1 = bytes of (version, len) it claims. */
static int observe(crf_store *s, uint64_t id, uint8_t *buf, key_state *out, char *why, size_t wl)
{
    char key[32];
    tu_key(key, sizeof(key), id);
    int64_t got = crf_get(s, key, strlen(key), buf, 1 << 20);
    if (got == CR_OBJECT_NOT_FOUND) {
        out->present = false;
        return 0;
    }
    if (got < 0) {
        snprintf(why, wl, "get %s: %s: %s", key, cr_status_name((int)got), cr_last_error_message());
        return -1;
    }
    crf_key_info info;
    if (crf_stat(s, key, strlen(key), &info) != 0 || info.meta_len != 8) {
        snprintf(why, wl, "stat %s failed after a hit", key);
        return -1;
    }
    uint64_t version;
    memcpy(&version, info.meta, 8);
    if (!tu_check(buf, (uint64_t)got, id, version)) {
        snprintf(why, wl, "get %s: %lld bytes that are not version %llu's", key, (long long)got,
                 (unsigned long long)version);
        return -1;
    }
    out->present = true;
    out->version = version;
    out->len = (uint64_t)got;
    return 1;
}

static bool same(const key_state *a, const key_state *b)
{
    return a->present == b->present &&
           (!a->present || (a->version == b->version && a->len == b->len));
}

static int read_acks(int fd, char *buf, size_t *have, size_t cap, int64_t *last, int timeout_ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    int pr = poll(&p, 1, timeout_ms);
    if (pr <= 0)
        return pr;
    ssize_t n = read(fd, buf + *have, cap - *have - 1);
    if (n <= 0)
        return -1;
    *have += (size_t)n;
    buf[*have] = '\0';
    char *line = buf, *nl;
    while ((nl = strchr(line, '\n')) != NULL) {
        *nl = '\0';
        if (line[0] == 'E') {
            fprintf(stderr, "crash_test: child: %s\n", line);
            return -2;
        }
        *last = strtoll(line, NULL, 10);
        line = nl + 1;
    }
    size_t rest = *have - (size_t)(line - buf);
    memmove(buf, line, rest);
    *have = rest;
    return 1;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--child") == 0)
        return child_main(argv[2], strcmp(argv[3], "direct") == 0, strtoull(argv[4], NULL, 10));
    signal(SIGPIPE, SIG_IGN);
    char *dir = tu_mkdtemp("crash");
    if (dir == NULL)
        FAIL("mkdtemp: %s", strerror(errno));
    key_state model[KEYS];
    memset(model, 0, sizeof(model));
    uint8_t *buf = malloc(1 << 20);
    uint64_t next = 0, total_acked = 0, uncertain_seen = 0;
    srand((unsigned)time(NULL));
    for (int round = 0; round < ROUNDS; round++) {
        bool direct = round % 2 == 0;
        char first[32];
        snprintf(first, sizeof(first), "%llu", (unsigned long long)next);
        const char *cargv[] = {argv[0], "--child", dir, direct ? "direct" : "buffered",
                               first,   NULL};
        ct_spawn_opts so = {.pipe_stdout = true, .exe = "/proc/self/exe"};
        if (ct_proc_spawn(&child, cargv, &so) < 0)
            FAIL("spawn: %s", strerror(errno));
        int ack_fd = child.out_fd; /* ours: read after the child is reaped */
        child.out_fd = -1;
        /* Let it acknowledge a random number of batches, then kill it mid-write. */
        int want = 5 + rand() % 40;
        int64_t last = -1;
        char lines[4096];
        size_t have = 0;
        for (int spins = 0; last < (int64_t)next + want - 1; spins++) {
            int r = read_acks(ack_fd, lines, &have, sizeof(lines), &last, 20000);
            if (r <= 0)
                FAIL("round %d: child stopped acknowledging (%d)", round, r);
        }
        struct timespec ts = {0, (long)(rand() % 3000) * 1000};
        nanosleep(&ts, NULL);
        ct_proc_kill(&child); /* SIGKILL and reap; then what it acknowledged */
        while (read_acks(ack_fd, lines, &have, sizeof(lines), &last, 0) > 0)
            ;
        close(ack_fd);
        /* Batches next..last were acknowledged: the model applies them. */
        for (uint64_t b = next; (int64_t)b <= last; b++) {
            op ops[4];
            int n = batch_ops(b, ops);
            for (int j = 0; j < n; j++) {
                key_state *k = &model[ops[j].key];
                if (ops[j].remove)
                    k->present = false;
                else
                    *k = (key_state){true, ops[j].version, ops[j].len};
            }
        }
        total_acked += (uint64_t)(last - (int64_t)next + 1);
        uint64_t inflight = (uint64_t)(last + 1);
        op fops[4];
        int nf = batch_ops(inflight, fops);

        crf_config c;
        config(&c, dir, direct);
        c.background_compaction = false;
        crf_store *s = NULL;
        if (crf_open(&c, &s) != 0)
            FAIL("round %d: reopen: %s", round, cr_last_error_message());
        for (uint64_t id = 0; id < KEYS; id++) {
            key_state got;
            char why[300];
            if (observe(s, id, buf, &got, why, sizeof(why)) < 0) {
                crf_close(s);
                FAIL("round %d: %s", round, why);
            }
            if (same(&got, &model[id]))
                continue;
            /* Only the in-flight batch may explain a difference. */
            bool ok = false;
            for (int j = 0; j < nf; j++) {
                if (fops[j].key != id)
                    continue;
                key_state alt = {!fops[j].remove, fops[j].version, fops[j].len};
                ok = same(&got, &alt);
            }
            if (!ok) {
                crf_close(s);
                FAIL("round %d: key %llu is %s v%llu/%llu, expected %s v%llu/%llu (acked "
                     "through batch %lld)",
                     round, (unsigned long long)id, got.present ? "present" : "missing",
                     (unsigned long long)got.version, (unsigned long long)got.len,
                     model[id].present ? "present" : "missing",
                     (unsigned long long)model[id].version, (unsigned long long)model[id].len,
                     (long long)last);
            }
            uncertain_seen++;
            model[id] = got;
        }
        crf_stats st;
        crf_get_stats(s, &st);
        printf("round %d (%s): acked through batch %lld; %llu keys; %llu buckets, %llu read "
               "record by record, %llu torn bytes skipped\n",
               round, st.direct_io ? "O_DIRECT" : "buffered", (long long)last,
               (unsigned long long)st.keys, (unsigned long long)st.buckets,
               (unsigned long long)st.recovered_scanned_buckets,
               (unsigned long long)st.recovered_torn_bytes);
        crf_close(s);
        next = inflight + 1; /* the in-flight batch is settled by what was found */
    }
    printf("crash_test: %d rounds, %llu acknowledged batches verified, %llu keys settled by an "
           "in-flight batch\n1 passed, 0 failed\n",
           ROUNDS, (unsigned long long)total_acked, (unsigned long long)uncertain_seen);
    free(buf);
    tu_rmtree(dir);
    return 0;
}
