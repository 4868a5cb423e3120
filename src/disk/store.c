/*
 * store.c - the disk store's public calls (disk.h): open and close, the
 * caller-side halves of put / get / remove (validation, checksums, bounce
 * copies; the I/O runs on the I/O thread, io.c), lookups, stats, and the
 * small helpers the other files share (bucket references, the bucket
 * table, requests).
 *
 * Design: callers do the CPU work that scales with them (XXH3 of values on
 * put, copies out of bounce buffers and XXH3 verification on get) and hand
 * the I/O thread ready-made records and read segments in one request per
 * call, then sleep on the request's condition variable until it is done.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "disk/internal.h"

#define BOUNCE_CACHE_BYTES (64u << 20)
#define LOCK_NAME          "crf.lock"
#define PROBE_NAME         "crf.probe"

/* ---- helpers shared by the files of the layer ---------------------------- */

void crf_bucket_name(uint64_t id, char *name)
{
    snprintf(name, 32, "crf-%016llx.bkt", (unsigned long long)id);
}

void crf_bucket_ref(crf_bucket *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

void crf_bucket_unref(crf_bucket *b)
{
    if (b == NULL || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (b->fd >= 0)
        close(b->fd);
    while (b->tomb_head != NULL) {
        crf_entry *t = b->tomb_head;
        b->tomb_head = t->bnext;
        free(t);
    }
    free(b);
}

int crf_table_add(crf_store *s, crf_bucket *b)
{
    if (s->n_buckets == s->cap_buckets) {
        size_t cap = s->cap_buckets == 0 ? 16 : s->cap_buckets * 2;
        crf_bucket **nb = realloc(s->buckets, cap * sizeof(*nb));
        if (nb == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "disk: bucket table of %zu", cap);
        s->buckets = nb;
        s->cap_buckets = cap;
    }
    size_t i = s->n_buckets;
    while (i > 0 && s->buckets[i - 1]->id > b->id) {
        s->buckets[i] = s->buckets[i - 1];
        i--;
    }
    s->buckets[i] = b;
    s->n_buckets++;
    s->used_bytes += b->bytes;
    return 0;
}

void crf_table_remove(crf_store *s, crf_bucket *b)
{
    for (size_t i = 0; i < s->n_buckets; i++) {
        if (s->buckets[i] != b)
            continue;
        memmove(&s->buckets[i], &s->buckets[i + 1], (s->n_buckets - i - 1) * sizeof(*s->buckets));
        s->n_buckets--;
        s->used_bytes -= b->bytes;
        return;
    }
}

void crf_bucket_link_live(crf_bucket *b, crf_entry *e)
{
    e->bucket = b;
    e->bprev = NULL;
    e->bnext = b->live_head;
    if (b->live_head != NULL)
        b->live_head->bprev = e;
    b->live_head = e;
    b->live_count++;
    b->live_bytes += crf_entry_extent(e);
}

void crf_bucket_unlink_live(crf_bucket *b, crf_entry *e)
{
    if (e->bprev != NULL)
        e->bprev->bnext = e->bnext;
    else
        b->live_head = e->bnext;
    if (e->bnext != NULL)
        e->bnext->bprev = e->bprev;
    e->bprev = e->bnext = NULL;
    b->live_count--;
    b->live_bytes -= crf_entry_extent(e);
}

void crf_bucket_link_tomb(crf_bucket *b, crf_entry *e)
{
    e->bucket = b;
    e->bprev = NULL;
    e->bnext = b->tomb_head;
    if (b->tomb_head != NULL)
        b->tomb_head->bprev = e;
    b->tomb_head = e;
    b->tomb_bytes += crf_entry_extent(e);
}

void crf_bucket_unlink_tomb(crf_bucket *b, crf_entry *e)
{
    if (e->bprev != NULL)
        e->bprev->bnext = e->bnext;
    else
        b->tomb_head = e->bnext;
    if (e->bnext != NULL)
        e->bnext->bprev = e->bprev;
    e->bprev = e->bnext = NULL;
    b->tomb_bytes -= crf_entry_extent(e);
}

void crf_bucket_note_seq(crf_bucket *b, uint64_t seq)
{
    if (seq < b->min_seq)
        b->min_seq = seq;
    if (seq > b->max_seq)
        b->max_seq = seq;
}

bool crf_tomb_needed(const crf_store *s, const crf_bucket *except, uint64_t seq)
{
    for (size_t i = 0; i < s->n_buckets; i++) {
        const crf_bucket *b = s->buckets[i];
        if (b != except && b->records > 0 && b->min_seq < seq)
            return true;
    }
    return false;
}

bool crf_bucket_wants_compaction(const crf_store *s, const crf_bucket *b)
{
    double ratio = s->cfg.compaction_dead_ratio;
    return ratio > 0 && !b->writable && !b->doomed && !b->compacting && b->bytes > 0 &&
           b->dead_bytes > 0 && (double)b->dead_bytes >= ratio * (double)b->bytes;
}

void crf_drop_entry(crf_store *s, crf_entry *e)
{
    crf_bucket *b = e->bucket;
    crf_index_remove(&s->index, e);
    crf_bucket_unlink_live(b, e);
    b->dead_bytes += crf_entry_extent(e);
    s->live_bytes -= crf_entry_extent(e);
    if (crf_bucket_wants_compaction(s, b))
        crf_kick_maint(s);
    free(e);
}

int crf_errno_status(int err)
{
    if (err == ENOSPC || err == EFBIG || err == EDQUOT)
        return CR_ERR_DISK_FULL;
    return CR_ERR_DISK_IO;
}

bool crf_on_io_thread(const crf_store *s)
{
    return s->io_started && pthread_equal(pthread_self(), s->io_thread);
}

void crf_req_init(crf_req *r, uint8_t kind)
{
    memset(r, 0, sizeof(*r));
    r->kind = kind;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
}

void crf_req_fini(crf_req *r)
{
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

void crf_req_fail(crf_req *r, int status, const char *fmt, ...)
{
    if (r->status != 0)
        return;
    r->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
    va_end(ap);
}

int crf_submit_wait(crf_store *s, crf_req *r)
{
    bool wake = false;
    pthread_mutex_lock(&s->q_mu);
    if (s->stopping && r->kind != CRF_REQ_STOP) {
        pthread_mutex_unlock(&s->q_mu);
        return crb_error(CR_ERR_SHUTDOWN, "disk store is closing");
    }
    r->next = NULL;
    if (s->q_tail != NULL)
        s->q_tail->next = r;
    else
        s->q_head = r;
    s->q_tail = r;
    if (s->io_idle) {
        s->io_idle = false;
        wake = true;
    }
    pthread_mutex_unlock(&s->q_mu);
    if (wake) {
        uint64_t one = 1;
        ssize_t n = write(s->efd, &one, sizeof(one));
        (void)n; /* a full counter already wakes the thread */
    }
    pthread_mutex_lock(&r->mu);
    while (!r->done)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

void crf_kick_maint(crf_store *s)
{
    if (!s->maint_started)
        return;
    pthread_mutex_lock(&s->maint_mu);
    s->maint_kick = true;
    pthread_cond_signal(&s->maint_cv);
    pthread_mutex_unlock(&s->maint_mu);
}

/* ---- open / close ---------------------------------------------------------- */

static int validate_config(const crf_config *c)
{
    if (c->path == NULL || c->path[0] == '\0')
        return crb_error(CR_ERR_INVALID_CONFIG,
                         "disk: no path (MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)");
    if (strlen(c->path) > 3000)
        return crb_error(CR_ERR_INVALID_CONFIG, "disk: path longer than 3000 bytes");
    if (c->bucket_size_limit < 2 * CRF_BLOCK || c->bucket_size_limit > CRF_MAX_BUCKET_BYTES / 4)
        return crb_error(CR_ERR_INVALID_CONFIG, "disk: bucket_size_limit %llu outside [%u, %llu]",
                         (unsigned long long)c->bucket_size_limit, 2 * CRF_BLOCK,
                         (unsigned long long)(CRF_MAX_BUCKET_BYTES / 4));
    if (c->bucket_keys_limit == 0)
        return crb_error(CR_ERR_INVALID_CONFIG, "disk: bucket_keys_limit is 0");
    if (c->max_keys == 0)
        return crb_error(CR_ERR_INVALID_CONFIG, "disk: max_keys is 0");
    if (c->eviction > CRF_EVICT_FIFO || c->sync > CRF_SYNC_PUT || c->io_mode > CRF_IO_BUFFERED)
        return crb_error(CR_ERR_INVALID_CONFIG, "disk: unknown eviction, sync or io mode");
    if (!(c->compaction_dead_ratio >= 0.0 && c->compaction_dead_ratio <= 1.0))
        return crb_error(CR_ERR_INVALID_CONFIG, "disk: compaction_dead_ratio outside [0, 1]");
    if (c->queue_depth < 8 || c->queue_depth > 4096)
        return crb_error(CR_ERR_INVALID_CONFIG, "disk: queue_depth %u outside [8, 4096]",
                         c->queue_depth);
    if (c->write_buffer_bytes < 16 * CRF_BLOCK || c->write_buffer_bytes > (1ull << 32))
        return crb_error(CR_ERR_INVALID_CONFIG, "disk: write_buffer_bytes %llu outside [64K, 4G]",
                         (unsigned long long)c->write_buffer_bytes);
    if (c->prealloc_bytes > CRF_MAX_BUCKET_BYTES)
        return crb_error(CR_ERR_INVALID_CONFIG, "disk: prealloc_bytes %llu over %llu",
                         (unsigned long long)c->prealloc_bytes,
                         (unsigned long long)CRF_MAX_BUCKET_BYTES);
    return 0;
}

/*
 * Can this directory's filesystem do O_DIRECT? Creates a probe file, writes
 * and reads one aligned block with O_DIRECT, removes it. On refusal, says
 * why in s->io_reason and returns false.
 */
static bool probe_direct(crf_store *s)
{
    int fd = openat(s->dir_fd, PROBE_NAME, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(s->io_reason, sizeof(s->io_reason), "open(O_DIRECT) of %s/%s: %s", s->path,
                 PROBE_NAME, strerror(errno));
        /* The probe file may exist from a buffered retry; never leave it behind. */
        unlinkat(s->dir_fd, PROBE_NAME, 0);
        return false;
    }
    bool ok = false;
    void *buf = NULL;
    if (posix_memalign(&buf, CRF_BLOCK, CRF_BLOCK) != 0) {
        snprintf(s->io_reason, sizeof(s->io_reason), "no memory for the O_DIRECT probe");
        goto out_close;
    }
    memset(buf, 0xA5, CRF_BLOCK);
    if (pwrite(fd, buf, CRF_BLOCK, 0) != (ssize_t)CRF_BLOCK) {
        snprintf(s->io_reason, sizeof(s->io_reason), "O_DIRECT write to %s/%s: %s", s->path,
                 PROBE_NAME, strerror(errno));
        goto out_free;
    }
    if (pread(fd, buf, CRF_BLOCK, 0) != (ssize_t)CRF_BLOCK) {
        snprintf(s->io_reason, sizeof(s->io_reason), "O_DIRECT read of %s/%s: %s", s->path,
                 PROBE_NAME, strerror(errno));
        goto out_free;
    }
    ok = true;
    snprintf(s->io_reason, sizeof(s->io_reason), "O_DIRECT accepted by the filesystem of %s",
             s->path);
out_free:
    free(buf);
out_close:
    close(fd);
    unlinkat(s->dir_fd, PROBE_NAME, 0);
    return ok;
}

static int choose_io(crf_store *s)
{
    if (s->cfg.io_mode == CRF_IO_BUFFERED) {
        s->direct = false;
        snprintf(s->io_reason, sizeof(s->io_reason), "buffered I/O requested");
        return 0;
    }
    s->direct = probe_direct(s);
    if (!s->direct && s->cfg.io_mode == CRF_IO_DIRECT)
        return crb_error(CR_ERR_DISK_DIRECT_IO, "disk: %s", s->io_reason);
    if (!s->direct)
        crb_log(CRB_LOG_WARN, "disk: buffered I/O for %s: %s", s->path, s->io_reason);
    return 0;
}

static int choose_capacity(crf_store *s)
{
    if (s->cfg.capacity_bytes == 0) {
        struct statvfs vfs;
        if (fstatvfs(s->dir_fd, &vfs) != 0)
            return crb_error(CR_ERR_SYSTEM, "disk: statvfs of %s: %s", s->path, strerror(errno));
        s->cfg.capacity_bytes = (uint64_t)((double)vfs.f_blocks * (double)vfs.f_frsize * 0.9);
    }
    /* Eviction works in whole buckets: keep several of them within the capacity. */
    if (s->cfg.capacity_bytes < 4 * s->cfg.bucket_size_limit) {
        uint64_t limit = crf_round_down(s->cfg.capacity_bytes / 4, CRF_BLOCK);
        if (limit < 2 * CRF_BLOCK)
            return crb_error(CR_ERR_INVALID_CONFIG, "disk: capacity %llu bytes is too small",
                             (unsigned long long)s->cfg.capacity_bytes);
        crb_log(CRB_LOG_INFO, "disk: bucket size limit lowered from %llu to %llu (capacity/4)",
                (unsigned long long)s->cfg.bucket_size_limit, (unsigned long long)limit);
        s->cfg.bucket_size_limit = limit;
    }
    return 0;
}

static int open_dir(crf_store *s)
{
    if (mkdir(s->path, 0755) != 0 && errno != EEXIST)
        return crb_error(CR_ERR_INVALID_CONFIG, "disk: mkdir %s: %s", s->path, strerror(errno));
    s->dir_fd = open(s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dir_fd < 0)
        return crb_error(CR_ERR_INVALID_CONFIG, "disk: open directory %s: %s", s->path,
                         strerror(errno));
    s->lock_fd = openat(s->dir_fd, LOCK_NAME, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (s->lock_fd < 0)
        return crb_error(CR_ERR_SYSTEM, "disk: open %s/%s: %s", s->path, LOCK_NAME,
                         strerror(errno));
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK)
            return crb_error(CR_ERR_DISK_LOCKED, "disk: %s is in use by another store", s->path);
        return crb_error(CR_ERR_SYSTEM, "disk: lock %s/%s: %s", s->path, LOCK_NAME,
                         strerror(errno));
    }
    return 0;
}

static void free_store(crf_store *s)
{
    for (size_t i = 0; i < s->n_buckets; i++)
        crf_bucket_unref(s->buckets[i]);
    free(s->buckets);
    crf_index_destroy(&s->index);
    crf_bounce_destroy(&s->bounce);
    if (s->efd >= 0)
        close(s->efd);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* releases the flock */
    if (s->dir_fd >= 0)
        close(s->dir_fd);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->q_mu);
    pthread_mutex_destroy(&s->compact_mu);
    pthread_mutex_destroy(&s->maint_mu);
    pthread_cond_destroy(&s->maint_cv);
    free(s->path);
    free(s);
}

int crf_open(const crf_config *cfg, crf_store **out)
{
    if (cfg == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crf_open: NULL argument");
    int rc = validate_config(cfg);
    if (rc != 0)
        return rc;
    crf_store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "crf_open: store");
    s->cfg = *cfg;
    s->dir_fd = s->lock_fd = s->efd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->q_mu, NULL);
    pthread_mutex_init(&s->compact_mu, NULL);
    pthread_mutex_init(&s->maint_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->maint_cv, &ca);
    pthread_condattr_destroy(&ca);
    crf_index_init(&s->index);
    crf_bounce_init(&s->bounce, BOUNCE_CACHE_BYTES);
    s->next_seq = 1;
    s->next_bucket_id = 1;
    s->path = strdup(cfg->path);
    s->cfg.path = s->path;
    s->cfg.write_buffer_bytes = crf_round_up(cfg->write_buffer_bytes, CRF_BLOCK);
    s->cfg.prealloc_bytes = crf_round_up(cfg->prealloc_bytes, CRF_BLOCK);
    if (s->path == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "crf_open: path");
        goto err_free;
    }
    if ((rc = open_dir(s)) != 0 || (rc = choose_io(s)) != 0 || (rc = choose_capacity(s)) != 0)
        goto err_free;
    s->efd = eventfd(0, EFD_CLOEXEC);
    if (s->efd < 0) {
        rc = crb_error(CR_ERR_SYSTEM, "crf_open: eventfd: %s", strerror(errno));
        goto err_free;
    }
    if ((rc = crf_recover(s)) != 0)
        goto err_free;
    /* read before the I/O thread starts changing them */
    size_t recovered_buckets = s->n_buckets, recovered_keys = s->index.count;
    if ((rc = crf_io_start(s)) != 0)
        goto err_free;
    if (s->cfg.background_compaction && (rc = crf_compact_start(s)) != 0)
        goto err_stop_io;
    crb_log(CRB_LOG_INFO, "disk: opened %s: %zu buckets, %zu keys, %s, capacity %llu bytes",
            s->path, recovered_buckets, recovered_keys, s->direct ? "O_DIRECT" : "buffered",
            (unsigned long long)s->cfg.capacity_bytes);
    *out = s;
    return 0;

err_stop_io:
    crf_io_stop(s);
err_free:
    free_store(s);
    return rc;
}

void crf_close(crf_store *s)
{
    if (s == NULL)
        return;
    crf_compact_stop(s);
    crf_io_stop(s);
    free_store(s);
}

/* ---- put / remove / seal / sync ------------------------------------------- */

static int check_key(const void *key, size_t key_len)
{
    if (key == NULL || key_len == 0 || key_len > CRF_MAX_KEY)
        return crb_error(CR_INVALID_KEY, "disk: key of %zu bytes (1..%u)", key_len, CRF_MAX_KEY);
    return 0;
}

static int check_caller(const crf_store *s, const char *what)
{
    if (s == NULL)
        return crb_error(CR_INVALID_PARAMS, "%s: NULL store", what);
    if (crf_on_io_thread(s))
        return crb_error(CR_INVALID_PARAMS, "%s: called from the disk I/O thread", what);
    return 0;
}

/* Run a records request; re-raise the I/O thread's first failure here. */
static int run_records(crf_store *s, crf_rec *recs, size_t n, int *results)
{
    crf_req r;
    crf_req_init(&r, CRF_REQ_RECORDS);
    r.recs = recs;
    r.n = n;
    r.results = results;
    for (size_t i = 0; i < n; i++)
        recs[i].req = &r;
    int rc = crf_submit_wait(s, &r);
    if (rc == 0 && r.status != 0)
        crb_error(r.status, "%s", r.msg);
    int status = r.status;
    crf_req_fini(&r);
    return rc != 0 ? rc : status;
}

int crf_put_batch(crf_store *s, const crf_put_item *items, size_t n, int *results)
{
    int rc = check_caller(s, "crf_put_batch");
    if (rc != 0)
        return rc;
    if (n == 0)
        return 0;
    if (items == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "crf_put_batch: NULL items or results");
    crf_rec *recs = calloc(n, sizeof(*recs));
    if (recs == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "crf_put_batch: %zu records", n);
    size_t valid = 0;
    for (size_t i = 0; i < n; i++) {
        const crf_put_item *it = &items[i];
        if ((rc = check_key(it->key, it->key_len)) != 0) {
            results[i] = rc;
            continue;
        }
        if (it->meta_len > CRF_MAX_META || (it->meta_len > 0 && it->meta == NULL) ||
            it->value_len > CRF_MAX_VALUE || (it->value_len > 0 && it->value == NULL)) {
            results[i] = crb_error(CR_INVALID_PARAMS,
                                   "crf_put_batch: item %zu: value %llu bytes (max %llu), "
                                   "metadata %zu bytes (max %u)",
                                   i, (unsigned long long)it->value_len,
                                   (unsigned long long)CRF_MAX_VALUE, it->meta_len, CRF_MAX_META);
            continue;
        }
        crf_rec *r = &recs[valid++];
        r->kind = CRF_RK_PUT;
        r->type = CRF_REC_PUT;
        r->key = it->key;
        r->key_len = (uint32_t)it->key_len;
        r->meta = it->meta;
        r->meta_len = (uint32_t)it->meta_len;
        r->value = it->value;
        r->value_len = it->value_len;
        r->value_hash = crf_value_hash(it->value, it->value_len);
        r->item = i;
    }
    if (valid > 0) {
        rc = run_records(s, recs, valid, results);
        if (rc == CR_ERR_SHUTDOWN) {
            free(recs);
            return rc;
        }
        uint64_t ok = 0, bytes = 0;
        for (size_t i = 0; i < valid; i++) {
            if (results[recs[i].item] == 0) {
                ok++;
                bytes += recs[i].value_len;
            }
        }
        atomic_fetch_add_explicit(&s->n_puts, ok, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->n_put_bytes, bytes, memory_order_relaxed);
    }
    free(recs);
    return 0;
}

int crf_put(crf_store *s, const void *key, size_t key_len, const void *value, uint64_t value_len,
            const void *meta, size_t meta_len)
{
    crf_put_item it = {key, key_len, value, value_len, meta, meta_len};
    int result = 0;
    int rc = crf_put_batch(s, &it, 1, &result);
    return rc != 0 ? rc : result;
}

/* Remove key; with cond_seq != 0 only if its live record has that seq. */
static int remove_key(crf_store *s, const void *key, size_t key_len, uint64_t cond_seq)
{
    crf_rec r;
    memset(&r, 0, sizeof(r));
    r.kind = CRF_RK_REMOVE;
    r.type = CRF_REC_TOMB;
    r.key = key;
    r.key_len = (uint32_t)key_len;
    r.from_off = cond_seq;
    r.value_hash = crf_value_hash(NULL, 0);
    int result = 0;
    int rc = run_records(s, &r, 1, &result);
    if (rc == CR_ERR_SHUTDOWN)
        return rc;
    return result;
}

int crf_remove(crf_store *s, const void *key, size_t key_len)
{
    int rc = check_caller(s, "crf_remove");
    if (rc != 0 || (rc = check_key(key, key_len)) != 0)
        return rc;
    rc = remove_key(s, key, key_len, 0);
    if (rc == 0)
        atomic_fetch_add_explicit(&s->n_removes, 1, memory_order_relaxed);
    return rc;
}

static int run_marker(crf_store *s, uint8_t kind, const char *what)
{
    int rc = check_caller(s, what);
    if (rc != 0)
        return rc;
    crf_rec r;
    memset(&r, 0, sizeof(r));
    r.kind = kind;
    int result = 0;
    rc = run_records(s, &r, 1, &result);
    return rc != 0 ? rc : result;
}

int crf_seal(crf_store *s)
{
    return run_marker(s, CRF_RK_SEAL, "crf_seal");
}

int crf_sync(crf_store *s)
{
    return run_marker(s, CRF_RK_SYNC, "crf_sync");
}

/* ---- get ------------------------------------------------------------------- */

typedef struct get_plan {
    crf_bucket *bucket; /* NULL: no read (result already set) */
    uint8_t *dst;
    uint64_t value_off, value_len, value_hash, seq;
    uint8_t *bounce; /* NULL when the value is read straight into dst */
    size_t bounce_len;
    uint64_t bounce_off; /* file offset of bounce[0] */
    uint64_t direct_len; /* bytes read straight into dst (from value_off) */
} get_plan;

/* Plan the segments of one read (s->direct decides the alignment rules). */
static int plan_read(crf_store *s, get_plan *p, crf_read *rd)
{
    rd->bucket = p->bucket;
    rd->n_seg = 0;
    rd->status = 0;
    if (!s->direct) {
        crf_iop *g = &rd->seg[rd->n_seg++];
        memset(g, 0, sizeof(*g));
        g->buf = p->dst;
        g->off = p->value_off;
        g->len = g->need = p->value_len;
        p->direct_len = p->value_len;
        return 0;
    }
    uint64_t direct = 0;
    if (p->value_off % CRF_BLOCK == 0 && ((uintptr_t)p->dst % CRF_BLOCK) == 0)
        direct = crf_round_down(p->value_len, CRF_BLOCK);
    p->direct_len = direct;
    if (direct > 0) {
        crf_iop *g = &rd->seg[rd->n_seg++];
        memset(g, 0, sizeof(*g));
        g->buf = p->dst;
        g->off = p->value_off;
        g->len = g->need = direct;
    }
    if (direct < p->value_len) {
        uint64_t from = p->value_off + direct;
        uint64_t start = crf_round_down(from, CRF_BLOCK);
        uint64_t end = crf_round_up(p->value_off + p->value_len, CRF_BLOCK);
        p->bounce_len = (size_t)(end - start);
        p->bounce_off = start;
        p->bounce = crf_bounce_get(&s->bounce, p->bounce_len);
        if (p->bounce == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "crf_get: %zu-byte bounce buffer", p->bounce_len);
        crf_iop *g = &rd->seg[rd->n_seg++];
        memset(g, 0, sizeof(*g));
        g->buf = p->bounce;
        g->off = start;
        g->len = p->bounce_len;
        g->need = p->value_off + p->value_len - start;
    }
    return 0;
}

int crf_get_batch(crf_store *s, const crf_get_item *items, size_t n, int64_t *results)
{
    int rc = check_caller(s, "crf_get_batch");
    if (rc != 0)
        return rc;
    if (n == 0)
        return 0;
    if (items == NULL || results == NULL)
        return crb_error(CR_INVALID_PARAMS, "crf_get_batch: NULL items or results");
    get_plan one_plan;
    crf_read one_read;
    get_plan *plans = n == 1 ? &one_plan : calloc(n, sizeof(*plans));
    crf_read *reads = n == 1 ? &one_read : calloc(n, sizeof(*reads));
    if (plans == NULL || reads == NULL) {
        if (n > 1) {
            free(plans);
            free(reads);
        }
        return crb_error(CR_ERR_NO_MEMORY, "crf_get_batch: %zu items", n);
    }
    memset(plans, 0, n * sizeof(*plans));

    uint64_t now = crb_now_ns();
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        const crf_get_item *it = &items[i];
        if (it->key == NULL || it->key_len == 0 || it->key_len > CRF_MAX_KEY) {
            results[i] = CR_INVALID_KEY;
            continue;
        }
        crf_entry *e =
            crf_index_find(&s->index, it->key, it->key_len, crf_key_hash(it->key, it->key_len));
        if (e == NULL) {
            results[i] = CR_OBJECT_NOT_FOUND;
            continue;
        }
        if (e->value_len > it->dst_len || (e->value_len > 0 && it->dst == NULL)) {
            results[i] = CR_BUFFER_OVERFLOW;
            continue;
        }
        get_plan *p = &plans[i];
        p->bucket = e->bucket;
        crf_bucket_ref(e->bucket);
        e->bucket->last_access_ns = now;
        p->dst = it->dst;
        p->value_off = e->rec_off + e->value_rel;
        p->value_len = e->value_len;
        p->value_hash = e->value_hash;
        p->seq = e->seq;
    }
    pthread_mutex_unlock(&s->mu);

    size_t nreads = 0;
    crf_req r;
    crf_req_init(&r, CRF_REQ_READ);
    for (size_t i = 0; i < n; i++) {
        get_plan *p = &plans[i];
        if (p->bucket == NULL)
            continue;
        if (p->value_len == 0) {
            results[i] = 0;
            crf_bucket_unref(p->bucket);
            p->bucket = NULL;
            continue;
        }
        if ((rc = plan_read(s, p, &reads[nreads])) != 0) {
            results[i] = rc;
            crf_bucket_unref(p->bucket);
            p->bucket = NULL;
            continue;
        }
        reads[nreads].item = i;
        reads[nreads].req = &r;
        nreads++;
    }
    if (nreads > 0) {
        r.reads = reads;
        r.n = nreads;
        rc = crf_submit_wait(s, &r);
        if (rc != 0)
            for (size_t k = 0; k < nreads; k++)
                reads[k].status = rc;
    }
    uint64_t hits = 0, bytes = 0;
    for (size_t k = 0; k < nreads; k++) {
        size_t i = reads[k].item;
        get_plan *p = &plans[i];
        int st = reads[k].status;
        if (st == 0 && p->bounce != NULL) {
            uint64_t from = p->value_off + p->direct_len;
            memcpy(p->dst + p->direct_len, p->bounce + (from - p->bounce_off),
                   p->value_len - p->direct_len);
        }
        if (st == 0 && crf_value_hash(p->dst, p->value_len) != p->value_hash) {
            atomic_fetch_add_explicit(&s->n_checksum_failures, 1, memory_order_relaxed);
            crb_log(CRB_LOG_WARN, "disk: checksum mismatch in bucket %llu at %llu (%llu bytes)",
                    (unsigned long long)p->bucket->id, (unsigned long long)p->value_off,
                    (unsigned long long)p->value_len);
            st = CR_CHECKSUM_MISMATCH;
            remove_key(s, items[i].key, items[i].key_len, p->seq);
            crb_error(st, "crf_get: value in bucket %llu at offset %llu fails its checksum",
                      (unsigned long long)p->bucket->id, (unsigned long long)p->value_off);
        } else if (st != 0) {
            crb_error(st, "%s", r.msg[0] != '\0' ? r.msg : "crf_get: read failed");
        }
        if (st == 0) {
            hits++;
            bytes += p->value_len;
        }
        results[i] = st == 0 ? (int64_t)p->value_len : st;
        crf_bounce_put(&s->bounce, p->bounce, p->bounce_len);
        crf_bucket_unref(p->bucket);
    }
    crf_req_fini(&r);
    atomic_fetch_add_explicit(&s->n_gets, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->n_get_hits, hits, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->n_get_bytes, bytes, memory_order_relaxed);
    if (n > 1) {
        free(plans);
        free(reads);
    }
    return 0;
}

int64_t crf_get(crf_store *s, const void *key, size_t key_len, void *dst, uint64_t dst_len)
{
    crf_get_item it = {key, key_len, dst, dst_len};
    int64_t result = 0;
    int rc = crf_get_batch(s, &it, 1, &result);
    if (rc != 0)
        return rc;
    if (result == CR_OBJECT_NOT_FOUND)
        return crb_error(CR_OBJECT_NOT_FOUND, "crf_get: no such key");
    if (result == CR_BUFFER_OVERFLOW)
        return crb_error(CR_BUFFER_OVERFLOW, "crf_get: value is longer than %llu bytes",
                         (unsigned long long)dst_len);
    if (result == CR_INVALID_KEY)
        return check_key(key, key_len);
    return result;
}

/* ---- lookups and stats ----------------------------------------------------- */

static void fill_info(const crf_entry *e, crf_key_info *out)
{
    out->key = crf_entry_key(e);
    out->key_len = e->key_len;
    out->value_len = e->value_len;
    out->seq = e->seq;
    out->meta_len = e->meta_len;
    if (e->meta_len > 0)
        memcpy(out->meta, crf_entry_meta(e), e->meta_len);
}

int crf_stat(crf_store *s, const void *key, size_t key_len, crf_key_info *out)
{
    static _Thread_local uint8_t key_copy[CRF_MAX_KEY];
    if (s == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crf_stat: NULL argument");
    int rc = check_key(key, key_len);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->mu);
    crf_entry *e = crf_index_find(&s->index, key, key_len, crf_key_hash(key, key_len));
    if (e != NULL) {
        fill_info(e, out);
        memcpy(key_copy, key, key_len);
        out->key = key_copy;
    }
    pthread_mutex_unlock(&s->mu);
    return e != NULL ? 0 : crb_error(CR_OBJECT_NOT_FOUND, "crf_stat: no such key");
}

typedef struct visit_ctx {
    crf_visit_fn fn;
    void *arg;
    crf_key_info info;
} visit_ctx;

static int visit_one(void *arg, crf_entry *e)
{
    visit_ctx *v = arg;
    fill_info(e, &v->info);
    return v->fn(v->arg, &v->info);
}

int crf_for_each(crf_store *s, crf_visit_fn fn, void *arg)
{
    if (s == NULL || fn == NULL)
        return crb_error(CR_INVALID_PARAMS, "crf_for_each: NULL argument");
    visit_ctx v = {fn, arg, {0}};
    pthread_mutex_lock(&s->mu);
    int rc = crf_index_each(&s->index, visit_one, &v);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void crf_get_stats(crf_store *s, crf_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    out->keys = s->index.count;
    out->live_bytes = s->live_bytes;
    out->file_bytes = s->used_bytes;
    out->buckets = s->n_buckets;
    out->tombstones = s->tombstones;
    pthread_mutex_unlock(&s->mu);
    out->capacity_bytes = s->cfg.capacity_bytes;
#define LOAD(x) atomic_load_explicit(&s->x, memory_order_relaxed)
    out->puts = LOAD(n_puts);
    out->put_bytes = LOAD(n_put_bytes);
    out->removes = LOAD(n_removes);
    out->gets = LOAD(n_gets);
    out->get_hits = LOAD(n_get_hits);
    out->get_bytes = LOAD(n_get_bytes);
    out->checksum_failures = LOAD(n_checksum_failures);
    out->evicted_buckets = LOAD(n_evicted_buckets);
    out->evicted_keys = LOAD(n_evicted_keys);
    out->compactions = LOAD(n_compactions);
    out->compacted_records = LOAD(n_compacted_records);
    out->submits = LOAD(n_submits);
    out->direct_write_bytes = LOAD(n_direct_write_bytes);
    out->coalesced_writes = LOAD(n_coalesced_writes);
    out->fallocates = LOAD(n_fallocates);
    out->prealloc_trims = LOAD(n_prealloc_trims);
    out->sqes = LOAD(n_sqes);
    out->fdatasyncs = LOAD(n_fdatasyncs);
#undef LOAD
    out->recovered_records = s->rec_records;
    out->recovered_torn_bytes = s->rec_torn_bytes;
    out->recovered_scanned_buckets = s->rec_scanned;
    out->recovered_dropped_buckets = s->rec_dropped;
    out->direct_io = s->direct;
    snprintf(out->io_reason, sizeof(out->io_reason), "%s", s->io_reason);
}
