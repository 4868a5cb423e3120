/*
 * io.c - the disk store's I/O thread: one io_uring ring, the append writer,
 * reads, eviction, and applying finished records to the index.
 *
 * Loop: take every queued request; place pending records in the active
 * bucket (sequence numbers, bucket roll-over, capacity admission and
 * eviction); copy placed records into the aligned staging ring; submit
 * writes (full chunks as soon as they fill, the partial last block once
 * nothing more is waiting) and queued reads; one io_uring_submit for all of
 * it; sleep in the ring until a completion (callers wake it through an
 * eventfd the ring polls); handle completions; finish the records that have
 * landed, in order.
 *
 * The writer. The ring mirrors the active bucket's tail: file offset f is at
 * ring[f % ring_size]. Bytes from the block holding the last landed byte up
 * to the copy tail stay in the ring, so the partial last block can be
 * rewritten (whole, O_DIRECT-aligned) when more records follow it. That
 * rewrite carries the already-landed bytes of the block unchanged, so a
 * crash during it cannot damage them. Two writes of the same block are
 * never in flight together (`partial_block`), so a late completion cannot
 * leave an older copy of the block behind. Writes complete in any order;
 * `completed` advances over the FIFO of writes in offset order, and a record
 * is "landed" when completed passes its end. Records are then applied to
 * the index strictly in placement order, so sequence numbers and index
 * updates agree.
 *
 * Zero copy. With O_DIRECT, a block-aligned value (CRF_DIRECT_MIN bytes or
 * more, at a block-aligned file offset, from block-aligned caller memory) is
 * not copied into the ring: its whole blocks are written straight from the
 * caller's memory (which stays untouched until the put returns), as one
 * "direct segment" between the ring bytes before it (the record header
 * block, complete and block-aligned at its end) and after it (the value's
 * last partial block, if any, and the next records). Its file range still
 * counts in the ring's window (tail - completed), so ring bytes never wrap
 * onto bytes not yet landed. One direct segment is pending at a time. The
 * ring bytes that end where it starts go out with its first chunk in one
 * vectored write (IORING_OP_WRITEV: one write per 1 MiB record, not two).
 *
 * Preallocation. With O_DIRECT, appends that extend the file are serialised
 * by the filesystem (ext4: the inode lock) and allocate as they go; writes
 * inside the file's size into allocated extents are not. So the active
 * bucket is fallocate'd ahead of its write tail, up to prealloc_bytes, never
 * past what the bucket can still take nor the capacity left, and cut back
 * with ftruncate at seal (after the trailer landed: the trailer ends the
 * file again). A crash leaves zeros after the last record; recovery skips
 * zero blocks (recover.c).
 *
 * Sealing a bucket appends the FOOTER record (every record of the bucket)
 * and the trailer as the bucket's last bytes, waits for them to land (and
 * fdatasync under CRF_SYNC_SEAL / PUT), then clears `writable`; the next
 * record opens a new bucket. Bucket files are created synchronously with
 * their header block written first, so a file whose header does not verify
 * holds nothing.
 *
 * Eviction (capacity admission of a put) dooms the coldest closed bucket:
 * its keys leave the index at once, a tombstone is appended for every
 * dropped key that shadows an older record still on disk, tombstones still
 * needed are carried forward, and the file is unlinked by an UNLINK marker
 * once all of those have landed (and are durable under SEAL / PUT), so no
 * reopen can resurrect a dropped or older value.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "disk/internal.h"

enum { SEAL_NONE = 0, SEAL_DRAIN, SEAL_SYNC };

#define NO_BLOCK UINT64_MAX

/* ---- request completion ----------------------------------------------------- */

static void req_complete(crf_req *r)
{
    pthread_mutex_lock(&r->mu);
    r->done = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* One item of a request is finished; the last one completes it (r may be gone after). */
static void item_done(crf_req *r)
{
    if (--r->pending == 0)
        req_complete(r);
}

static void rec_result(crf_rec *rec, int status)
{
    crf_req *r = rec->req;
    if (r == NULL)
        return;
    if (r->results != NULL)
        r->results[rec->item] = status;
    item_done(r);
}

/* ---- SQEs -------------------------------------------------------------------- */

static struct io_uring_sqe *get_sqe(crf_store *s)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
    if (sqe == NULL) {
        int n = io_uring_submit(&s->ring);
        if (n > 0) {
            atomic_fetch_add_explicit(&s->n_submits, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&s->n_sqes, (uint64_t)n, memory_order_relaxed);
        }
        s->sqes_pending = 0;
        sqe = io_uring_get_sqe(&s->ring);
    }
    if (sqe != NULL)
        s->sqes_pending++;
    return sqe;
}

static void arm_poll(crf_store *s)
{
    struct io_uring_sqe *sqe = get_sqe(s);
    if (sqe == NULL)
        return; /* cannot happen with an empty ring; the loop re-arms on the next pass */
    s->poll_op.kind = CRF_IOP_POLL;
    s->poll_op.in_flight = true;
    io_uring_prep_poll_add(sqe, s->efd, POLLIN);
    io_uring_sqe_set_data(sqe, &s->poll_op);
}

#define MAX_SQE_BYTES (1u << 30)

static bool submit_iop(crf_store *s, crf_iop *op)
{
    struct io_uring_sqe *sqe = get_sqe(s);
    if (sqe == NULL)
        return false;
    uint64_t left = op->len - op->got;
    unsigned n = left > MAX_SQE_BYTES ? MAX_SQE_BYTES : (unsigned)left;
    if (op->kind == CRF_IOP_READ) {
        io_uring_prep_read(sqe, op->fd, op->buf + op->got, n, op->off + op->got);
    } else if (op->n_iov > 0) {
        /* a vectored write (at most 2 MiB): what is left of its pieces; cur_iov stays put
         * in the op until the write completes */
        uint64_t skip = op->got;
        unsigned k = 0;
        for (int i = 0; i < op->n_iov; i++) {
            if (skip >= op->iov[i].iov_len) {
                skip -= op->iov[i].iov_len;
                continue;
            }
            op->cur_iov[k].iov_base = (uint8_t *)op->iov[i].iov_base + skip;
            op->cur_iov[k].iov_len = op->iov[i].iov_len - skip;
            skip = 0;
            k++;
        }
        io_uring_prep_writev(sqe, op->fd, op->cur_iov, k, op->off + op->got);
    } else {
        io_uring_prep_write(sqe, op->fd, op->buf + op->got, n, op->off + op->got);
    }
    io_uring_sqe_set_data(sqe, op);
    op->in_flight = true;
    return true;
}

static void submit_fsync(crf_store *s, crf_bucket *b)
{
    if (s->fsync_op.in_flight)
        return;
    struct io_uring_sqe *sqe = get_sqe(s);
    if (sqe == NULL)
        return;
    s->fsync_op.kind = CRF_IOP_FSYNC;
    s->fsync_op.in_flight = true;
    s->fsync_op.err = 0;
    s->fsync_gen = s->written_gen;
    io_uring_prep_fsync(sqe, b->fd, IORING_FSYNC_DATASYNC);
    io_uring_sqe_set_data(sqe, &s->fsync_op);
}

/* ---- FIFOs ------------------------------------------------------------------- */

static void pend_push_back(crf_store *s, crf_rec *r)
{
    r->next = NULL;
    if (s->pend_tail != NULL)
        s->pend_tail->next = r;
    else
        s->pend_head = r;
    s->pend_tail = r;
}

/* Put a chain [first..last] in front of the pending records. */
static void pend_push_front(crf_store *s, crf_rec *first, crf_rec *last)
{
    last->next = s->pend_head;
    s->pend_head = first;
    if (s->pend_tail == NULL)
        s->pend_tail = last;
}

static crf_rec *pend_pop(crf_store *s)
{
    crf_rec *r = s->pend_head;
    s->pend_head = r->next;
    if (s->pend_head == NULL)
        s->pend_tail = NULL;
    r->next = NULL;
    return r;
}

static void fly_push(crf_store *s, crf_rec *r)
{
    r->next = NULL;
    if (s->fly_tail != NULL)
        s->fly_tail->next = r;
    else
        s->fly_head = r;
    s->fly_tail = r;
    if (s->copy_cur == NULL && r->n_pieces > 0)
        s->copy_cur = r;
}

static uint64_t rec_bytes(const crf_rec *r)
{
    uint64_t n = 0;
    for (int i = 0; i < r->n_pieces; i++)
        n += r->pieces[i].len;
    return n;
}

static void add_piece(crf_rec *r, const void *p, uint64_t len)
{
    if (len == 0)
        return;
    r->pieces[r->n_pieces].p = p;
    r->pieces[r->n_pieces].len = len;
    r->n_pieces++;
}

/* ---- buckets ----------------------------------------------------------------- */

static uint64_t random_salt(uint64_t id)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ (id << 32) ^
            (uint64_t)getpid();
    }
    return v;
}

/* Create the next bucket file, write its header block, make it the active bucket. */
static int create_bucket(crf_store *s, char *msg, size_t msg_len)
{
    crf_writer *w = &s->w;
    uint64_t id = s->next_bucket_id++;
    char name[32];
    crf_bucket_name(id, name);
    int flags = O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | (s->direct ? O_DIRECT : 0);
    int fd = openat(s->dir_fd, name, flags, 0644);
    if (fd < 0) {
        int err = errno;
        snprintf(msg, msg_len, "disk: create %s/%s: %s", s->path, name, strerror(err));
        return err == ENOSPC || err == EDQUOT ? CR_ERR_DISK_FULL : CR_ERR_DISK_IO;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    crf_bucket_header h = {
        .bucket_id = id,
        .salt = random_salt(id),
        .seq_floor = s->next_seq,
        .created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
    };
    memset(s->hdr_block, 0, CRF_BLOCK);
    crf_bucket_header_encode(&h, s->hdr_block);
    ssize_t n = pwrite(fd, s->hdr_block, CRF_BLOCK, 0);
    int err = n == (ssize_t)CRF_BLOCK ? 0 : (n < 0 ? errno : EIO);
    if (err == 0 && s->cfg.sync >= CRF_SYNC_SEAL) {
        if (fdatasync(fd) != 0 || fsync(s->dir_fd) != 0)
            err = errno;
        atomic_fetch_add_explicit(&s->n_fdatasyncs, 1, memory_order_relaxed);
    }
    crf_bucket *b = err == 0 ? calloc(1, sizeof(*b)) : NULL;
    if (b == NULL) {
        if (err == 0)
            err = ENOMEM;
        snprintf(msg, msg_len, "disk: write header of %s/%s: %s", s->path, name, strerror(err));
        close(fd);
        unlinkat(s->dir_fd, name, 0);
        return crf_errno_status(err);
    }
    b->id = id;
    b->salt = h.salt;
    b->fd = fd;
    atomic_init(&b->refs, 2); /* the table's and the writer's */
    b->writable = true;
    b->bytes = CRF_FIRST_RECORD;
    b->min_seq = UINT64_MAX;
    b->last_access_ns = crb_now_ns();
    pthread_mutex_lock(&s->mu);
    int rc = crf_table_add(s, b);
    pthread_mutex_unlock(&s->mu);
    if (rc != 0) {
        snprintf(msg, msg_len, "disk: no memory for the bucket table");
        free(b);
        close(fd);
        unlinkat(s->dir_fd, name, 0);
        return rc;
    }
    w->b = b;
    w->reserved = w->tail = w->submitted = w->completed = CRF_FIRST_RECORD;
    w->direct_len = 0;
    w->partial_block = NO_BLOCK;
    w->footer_len = 0;
    w->footer_count = 0;
    w->min_seq = UINT64_MAX;
    w->max_seq = 0;
    w->data_end = CRF_FIRST_RECORD;
    w->seal_state = SEAL_NONE;
    w->broken = 0;
    w->prealloc_end = CRF_FIRST_RECORD;
    w->rec_cost_max = 0;
    w->preallocated = false;
    w->prealloc_stop = false;
    return 0;
}

/* ---- preallocation ------------------------------------------------------------- */

/*
 * fallocate the active bucket ahead of what is to be written (see the top of
 * the file): up to prealloc_bytes past the write tail, never past what the
 * bucket can still take (its size limit, and the keys left times the largest
 * record so far, with their footer entries) nor past the capacity left.
 * Called before writes are submitted; a bucket with nothing in flight yet
 * gets its whole estimate at once.
 */
static void prealloc_step(crf_store *s)
{
    crf_writer *w = &s->w;
    uint64_t step = s->cfg.prealloc_bytes;
    if (step == 0 || !s->direct || s->prealloc_refused || w->b == NULL || w->broken != 0 ||
        w->prealloc_stop || w->rec_cost_max == 0)
        return;
    uint64_t need = crf_round_up(w->tail, CRF_BLOCK);
    if (need + step / 2 <= w->prealloc_end)
        return; /* enough ahead */
    uint64_t keys_left =
        s->cfg.bucket_keys_limit > w->footer_count ? s->cfg.bucket_keys_limit - w->footer_count : 0;
    uint64_t by_keys = w->reserved + keys_left * w->rec_cost_max + 2 * CRF_BLOCK;
    uint64_t by_size = CRF_FIRST_RECORD + s->cfg.bucket_size_limit + 2 * CRF_BLOCK;
    uint64_t end = need + step;
    if (end > by_keys)
        end = by_keys;
    if (end > by_size)
        end = by_size;
    if (w->seal_state != SEAL_NONE && end > w->reserved)
        end = w->reserved; /* sealing: the file's final length is known */
    pthread_mutex_lock(&s->mu);
    uint64_t room =
        s->cfg.capacity_bytes > s->used_bytes ? s->cfg.capacity_bytes - s->used_bytes : 0;
    pthread_mutex_unlock(&s->mu);
    if (end > w->reserved + room)
        end = w->reserved + room; /* preallocated bytes stay inside the capacity */
    end = crf_round_down(end, CRF_BLOCK);
    if (end <= w->prealloc_end || end <= need)
        return;
    w->preallocated = true;
    int rc = fallocate(w->b->fd, 0, (off_t)w->prealloc_end, (off_t)(end - w->prealloc_end));
    if (rc == 0) {
        w->prealloc_end = end;
        atomic_fetch_add_explicit(&s->n_fallocates, 1, memory_order_relaxed);
        return;
    }
    int err = errno;
    w->prealloc_stop = true;
    if (err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) {
        s->prealloc_refused = true;
        crb_log(CRB_LOG_INFO, "disk: %s: fallocate not supported (%s); buckets grow as written",
                s->path, strerror(err));
    } else {
        crb_log(CRB_LOG_DEBUG, "disk: fallocate of bucket %llu to %llu: %s",
                (unsigned long long)w->b->id, (unsigned long long)end, strerror(err));
    }
}

/*
 * Cut the active bucket's file back to `end` (its last written byte, rounded
 * to a block) if preallocation left it longer. A failure only costs space
 * (recovery reads such a file record by record and cuts it itself).
 */
static void trim_prealloc(crf_store *s, uint64_t end)
{
    crf_writer *w = &s->w;
    if (!w->preallocated)
        return;
    w->preallocated = false;
    struct stat st;
    if (fstat(w->b->fd, &st) != 0 || (uint64_t)st.st_size <= end)
        return;
    if (ftruncate(w->b->fd, (off_t)end) != 0) {
        crb_log(CRB_LOG_WARN, "disk: trimming bucket %llu to %llu bytes: %s",
                (unsigned long long)w->b->id, (unsigned long long)end, strerror(errno));
        return;
    }
    atomic_fetch_add_explicit(&s->n_prealloc_trims, 1, memory_order_relaxed);
}

/* Grow the active bucket's accounted bytes to its new reserved end. */
static void account_reserved(crf_store *s, uint64_t new_reserved)
{
    crf_writer *w = &s->w;
    uint64_t grow = new_reserved - w->reserved;
    w->reserved = new_reserved;
    pthread_mutex_lock(&s->mu);
    w->b->bytes += grow;
    s->used_bytes += grow;
    pthread_mutex_unlock(&s->mu);
}

static int footer_append(crf_writer *w, const crf_rec *r)
{
    size_t need = crf_footer_entry_size(r->key_len, r->meta_len);
    if (w->footer_len + need > w->footer_cap) {
        size_t cap = w->footer_cap == 0 ? 16384 : w->footer_cap * 2;
        while (cap < w->footer_len + need)
            cap *= 2;
        uint8_t *nf = realloc(w->footer, cap);
        if (nf == NULL)
            return CR_ERR_NO_MEMORY;
        w->footer = nf;
        w->footer_cap = cap;
    }
    crf_footer_entry e = {
        .rec_off = r->rec_off,
        .seq = r->seq,
        .value_len = r->value_len,
        .value_hash = r->value_hash,
        .key_len = r->key_len,
        .value_gap = r->value_rel - CRF_RECORD_HEADER_SIZE - r->key_len - r->meta_len,
        .meta_len = (uint16_t)r->meta_len,
        .type = r->type,
        .flags = r->value_len >= CRF_ALIGNED_VALUE_MIN ? CRF_RECF_ALIGNED : 0,
        .key = r->key,
        .meta = r->meta,
    };
    crf_footer_entry_encode(&e, w->footer + w->footer_len);
    w->footer_len += need;
    w->footer_count++;
    if (r->seq < w->min_seq)
        w->min_seq = r->seq;
    if (r->seq > w->max_seq)
        w->max_seq = r->seq;
    return 0;
}

/* Append the FOOTER record, padding and trailer: the bucket's last bytes. */
static void begin_seal(crf_store *s)
{
    crf_writer *w = &s->w;
    crf_rec *f = &w->seal_recs[0], *t = &w->seal_recs[1];
    memset(f, 0, sizeof(*f));
    memset(t, 0, sizeof(*t));
    f->kind = CRF_RK_FOOTER;
    f->type = CRF_REC_FOOTER;
    f->bucket = t->bucket = w->b;
    f->rec_off = w->reserved;
    f->value = w->footer;
    f->value_len = w->footer_len;
    f->value_hash = crf_value_hash(w->footer, w->footer_len);
    uint8_t flags;
    uint32_t gap = crf_record_gap(f->rec_off, 0, 0, f->value_len, &flags);
    crf_record_header h = {
        .type = CRF_REC_FOOTER,
        .flags = flags,
        .value_gap = gap,
        .value_len = f->value_len,
        .value_hash = f->value_hash,
    };
    crf_record_header_encode(&h, NULL, NULL, w->b->salt, f->rec_off, f->hdr);
    f->value_rel = CRF_RECORD_HEADER_SIZE + gap;
    f->end = f->rec_off + f->value_rel + f->value_len;
    uint64_t after = crf_round_up(f->end, CRF_RECORD_ALIGN);
    add_piece(f, f->hdr, CRF_RECORD_HEADER_SIZE);
    add_piece(f, NULL, gap);
    add_piece(f, w->footer, w->footer_len);
    add_piece(f, NULL, after - f->end);
    uint64_t file_len = crf_round_up(after + CRF_TRAILER_SIZE, CRF_BLOCK);
    crf_trailer tr = {
        .footer_off = f->rec_off,
        .record_count = w->footer_count,
        .data_end = w->data_end,
        .min_seq = w->footer_count > 0 ? w->min_seq : 0,
        .max_seq = w->footer_count > 0 ? w->max_seq : 0,
    };
    crf_trailer_encode(&tr, w->b->salt, w->trailer);
    t->kind = CRF_RK_RAW;
    t->rec_off = after;
    t->end = file_len;
    add_piece(t, NULL, file_len - CRF_TRAILER_SIZE - after);
    add_piece(t, w->trailer, CRF_TRAILER_SIZE);
    account_reserved(s, file_len);
    fly_push(s, f);
    fly_push(s, t);
    w->seal_state = SEAL_DRAIN;
}

/* The seal has landed (and is durable as the policy asks): close the bucket. */
static void finish_seal(crf_store *s)
{
    crf_writer *w = &s->w;
    crf_bucket *b = w->b;
    pthread_mutex_lock(&s->mu);
    b->writable = false;
    bool compact = crf_bucket_wants_compaction(s, b);
    pthread_mutex_unlock(&s->mu);
    b->unsynced = s->cfg.sync == CRF_SYNC_NONE;
    if (s->cfg.sync >= CRF_SYNC_SEAL)
        s->synced_gen = s->written_gen;
    w->b = NULL;
    w->seal_state = SEAL_NONE;
    crf_bucket_unref(b);
    if (compact)
        crf_kick_maint(s);
}

/* ---- eviction ------------------------------------------------------------------ */

/* A tombstone record made by the I/O thread (for key, with seq 0 = assign). */
static crf_rec *internal_tomb(uint8_t kind, const uint8_t *key, size_t key_len, uint64_t seq,
                              crf_rec *group)
{
    crf_rec *r = calloc(1, sizeof(*r));
    uint8_t *k = malloc(key_len);
    if (r == NULL || k == NULL) {
        free(r);
        free(k);
        return NULL;
    }
    memcpy(k, key, key_len);
    r->kind = kind;
    r->type = CRF_REC_TOMB;
    r->key = k;
    r->key_len = (uint32_t)key_len;
    r->owned = k;
    r->seq = seq;
    r->value_hash = crf_value_hash(NULL, 0);
    r->internal = true;
    r->group = group;
    return r;
}

/*
 * Take bucket b out of service: drop its live keys from the index (telling
 * on_evict), queue the tombstones that must outlive it, and an UNLINK marker
 * after them. `req` (a compaction's DOOM request) is finished by the marker.
 * In front of the pending records for eviction (the put waiting for room
 * comes after), behind them for compaction.
 */
static void doom_bucket(crf_store *s, crf_bucket *b, crf_req *req, bool front)
{
    crf_rec *unlink_rec = calloc(1, sizeof(*unlink_rec));
    crf_rec *first = NULL, *last = NULL;
    crf_key_info *infos = NULL;
    size_t n_infos = 0, cap_infos = 0;
    bool no_memory = unlink_rec == NULL;

    pthread_mutex_lock(&s->mu);
    if (b->doomed) {
        pthread_mutex_unlock(&s->mu);
        free(unlink_rec);
        if (req != NULL)
            item_done(req);
        return;
    }
    for (crf_entry *e = b->live_head; e != NULL;) {
        crf_entry *next = e->bnext;
        if (s->cfg.on_evict != NULL && !no_memory) {
            if (n_infos == cap_infos) {
                size_t cap = cap_infos == 0 ? 64 : cap_infos * 2;
                crf_key_info *ni = realloc(infos, cap * sizeof(*ni));
                if (ni != NULL) {
                    infos = ni;
                    cap_infos = cap;
                }
            }
            if (n_infos < cap_infos) {
                crf_key_info *ki = &infos[n_infos];
                uint8_t *k = malloc(e->key_len);
                if (k != NULL) {
                    memcpy(k, crf_entry_key(e), e->key_len);
                    ki->key = k;
                    ki->key_len = e->key_len;
                    ki->value_len = e->value_len;
                    ki->seq = e->seq;
                    ki->meta_len = e->meta_len;
                    memcpy(ki->meta, crf_entry_meta(e), e->meta_len);
                    n_infos++;
                }
            }
        }
        if ((e->flags & CRF_ENTRY_SHADOWS) != 0) {
            crf_rec *t =
                internal_tomb(CRF_RK_TOMB_EVICT, crf_entry_key(e), e->key_len, 0, unlink_rec);
            if (t == NULL) {
                no_memory = true;
            } else {
                if (last != NULL)
                    last->next = t;
                else
                    first = t;
                last = t;
            }
        }
        crf_index_remove(&s->index, e);
        s->live_bytes -= crf_entry_extent(e);
        b->dead_bytes += crf_entry_extent(e);
        b->live_bytes -= crf_entry_extent(e);
        b->live_count--;
        free(e);
        e = next;
    }
    b->live_head = NULL;
    for (crf_entry *t = b->tomb_head; t != NULL; t = t->bnext) {
        if (!crf_tomb_needed(s, b, t->seq))
            continue;
        crf_rec *r =
            internal_tomb(CRF_RK_TOMB_KEEP, crf_entry_key(t), t->key_len, t->seq, unlink_rec);
        if (r == NULL) {
            no_memory = true;
            continue;
        }
        if (last != NULL)
            last->next = r;
        else
            first = r;
        last = r;
    }
    for (crf_entry *t = b->tomb_head; t != NULL; t = t->bnext)
        s->tombstones--;
    b->doomed = true;
    crf_table_remove(s, b);
    pthread_mutex_unlock(&s->mu);

    if (unlink_rec != NULL) {
        unlink_rec->kind = CRF_RK_UNLINK;
        unlink_rec->from = b; /* carries the table's reference */
        unlink_rec->internal = true;
        unlink_rec->req = req;
        if (no_memory)
            unlink_rec->status = CR_ERR_NO_MEMORY; /* keep the file: nothing resurfaces wrongly */
        if (last != NULL)
            last->next = unlink_rec;
        else
            first = unlink_rec;
        last = unlink_rec;
    } else {
        crf_bucket_unref(b); /* the file stays until a restart reads it again */
        if (req != NULL)
            item_done(req);
    }
    if (first != NULL) {
        if (front) {
            pend_push_front(s, first, last);
        } else {
            for (crf_rec *r = first; r != NULL;) {
                crf_rec *next = r->next;
                pend_push_back(s, r);
                r = next;
            }
        }
    }
    if (n_infos > 0) {
        s->cfg.on_evict(s->cfg.on_evict_arg, infos, n_infos);
        for (size_t i = 0; i < n_infos; i++)
            free((void *)infos[i].key);
    }
    free(infos);
}

/* Evict one closed bucket by the policy. false when there is none. */
static bool evict_one(crf_store *s)
{
    if (s->cfg.eviction == CRF_EVICT_NONE)
        return false;
    crf_bucket *victim = NULL;
    uint64_t keys = 0;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_buckets; i++) {
        crf_bucket *b = s->buckets[i];
        if (b->writable || b->doomed || atomic_load(&b->pending_applies) > 0)
            continue;
        if (victim == NULL ||
            (s->cfg.eviction == CRF_EVICT_LRU && b->last_access_ns < victim->last_access_ns))
            victim = b;
    }
    if (victim != NULL)
        keys = victim->live_count;
    pthread_mutex_unlock(&s->mu);
    if (victim == NULL)
        return false;
    atomic_fetch_add_explicit(&s->n_evicted_buckets, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->n_evicted_keys, keys, memory_order_relaxed);
    crb_log(CRB_LOG_DEBUG, "disk: evicting bucket %llu (%llu keys)", (unsigned long long)victim->id,
            (unsigned long long)keys);
    doom_bucket(s, victim, NULL, true);
    return true;
}

/* ---- placement ----------------------------------------------------------------- */

enum { PLACED, BLOCKED, RETRY };

static void fail_rec(crf_store *s, crf_rec *r, int status, const char *msg)
{
    if (r->req != NULL)
        crf_req_fail(r->req, status, "%s", msg);
    if (r->kind == CRF_RK_TOMB_EVICT || r->kind == CRF_RK_TOMB_KEEP) {
        if (r->group != NULL && r->group->status == 0)
            r->group->status = status;
    }
    bool internal = r->internal; /* r may be freed once its result is in */
    rec_result(r, status);
    if (internal) {
        free(r->owned);
        free(r);
    }
}

/*
 * Place the first pending record (or marker). PLACED: it moved to the
 * in-flight FIFO (or failed and was finished); BLOCKED: it must wait for
 * the writer (a seal or a broken bucket draining); RETRY: eviction put new
 * records in front of it.
 */
static int place_head(crf_store *s)
{
    crf_writer *w = &s->w;
    crf_rec *r = s->pend_head;
    char msg[200];

    if (r->kind == CRF_RK_SEAL || r->kind == CRF_RK_SYNC || r->kind == CRF_RK_UNLINK) {
        if (w->seal_state != SEAL_NONE || w->broken != 0)
            return BLOCKED;
        pend_pop(s);
        r->bucket = NULL;
        if (r->kind == CRF_RK_SEAL && w->b != NULL) {
            r->bucket = w->b;
            begin_seal(s);
        }
        fly_push(s, r);
        return PLACED;
    }
    if (w->seal_state != SEAL_NONE || w->broken != 0)
        return BLOCKED;

    bool is_put = r->kind == CRF_RK_PUT;
    uint32_t k = r->key_len, m = r->meta_len;
    uint64_t cap = s->cfg.capacity_bytes;
    /* Where it would go, and its size. */
    uint64_t rec_off = w->b != NULL ? w->reserved : CRF_FIRST_RECORD;
    uint8_t flags;
    uint32_t gap = crf_record_gap(rec_off, k, m, r->value_len, &flags);
    uint64_t extent = CRF_RECORD_HEADER_SIZE + k + m + gap + r->value_len;
    if (w->b != NULL && w->footer_count > 0 &&
        (w->footer_count >= s->cfg.bucket_keys_limit ||
         rec_off + extent - CRF_FIRST_RECORD > s->cfg.bucket_size_limit)) {
        begin_seal(s);
        return BLOCKED;
    }
    if (is_put) {
        uint64_t need = extent + CRF_RECORD_ALIGN + (w->b == NULL ? CRF_BLOCK : 0);
        if (need + 2 * CRF_BLOCK > cap) {
            pend_pop(s);
            snprintf(msg, sizeof(msg),
                     "disk: a %llu-byte record does not fit the %llu-byte capacity",
                     (unsigned long long)extent, (unsigned long long)cap);
            fail_rec(s, r, CR_ERR_DISK_FULL, msg);
            return PLACED;
        }
        for (;;) {
            pthread_mutex_lock(&s->mu);
            bool over_bytes = s->used_bytes + need > cap;
            bool over_keys = false;
            if (s->index.count >= s->cfg.max_keys)
                over_keys = crf_index_find(&s->index, r->key, k, crf_key_hash(r->key, k)) == NULL;
            pthread_mutex_unlock(&s->mu);
            if (!over_bytes && !over_keys)
                break;
            if (evict_one(s))
                return RETRY;
            pend_pop(s);
            snprintf(msg, sizeof(msg),
                     over_bytes ? "disk: %s is full (%llu of %llu bytes) and nothing can be evicted"
                                : "disk: %s holds the most keys allowed (%llu) and nothing can be "
                                  "evicted",
                     s->path,
                     over_bytes ? (unsigned long long)s->used_bytes
                                : (unsigned long long)s->cfg.max_keys,
                     (unsigned long long)cap);
            fail_rec(s, r, CR_ERR_DISK_FULL, msg);
            return PLACED;
        }
    }
    if (w->b == NULL) {
        int rc = create_bucket(s, msg, sizeof(msg));
        if (rc != 0) {
            pend_pop(s);
            fail_rec(s, r, rc, msg);
            return PLACED;
        }
        return RETRY; /* recompute the gap at the new bucket's first offset */
    }
    pend_pop(s);
    if (r->seq == 0)
        r->seq = s->next_seq++;
    r->bucket = w->b;
    r->rec_off = rec_off;
    r->value_rel = CRF_RECORD_HEADER_SIZE + k + m + gap;
    r->end = rec_off + extent;
    if (footer_append(w, r) != 0) {
        fail_rec(s, r, CR_ERR_NO_MEMORY, "disk: no memory for the bucket footer");
        return PLACED;
    }
    r->counted = true; /* until finish_step has applied it */
    atomic_fetch_add_explicit(&w->b->pending_applies, 1, memory_order_relaxed);
    crf_record_header h = {
        .type = r->type,
        .flags = flags,
        .meta_len = (uint16_t)m,
        .key_len = k,
        .value_gap = gap,
        .value_len = r->value_len,
        .seq = r->seq,
        .value_hash = r->value_hash,
    };
    crf_record_header_encode(&h, r->key, r->meta, w->b->salt, rec_off, r->hdr);
    r->n_pieces = 0;
    add_piece(r, r->hdr, CRF_RECORD_HEADER_SIZE);
    add_piece(r, r->key, k);
    add_piece(r, r->meta, m);
    add_piece(r, NULL, gap);
    add_piece(r, r->value, r->value_len);
    uint64_t next = crf_round_up(r->end, CRF_RECORD_ALIGN);
    add_piece(r, NULL, next - r->end);
    r->copied = 0;
    w->data_end = r->end;
    uint64_t cost = next - rec_off + crf_footer_entry_size(k, m);
    if (cost > w->rec_cost_max)
        w->rec_cost_max = cost;
    pthread_mutex_lock(&s->mu);
    w->b->records++;
    crf_bucket_note_seq(w->b, r->seq);
    if (r->kind == CRF_RK_PUT || r->kind == CRF_RK_REMOVE)
        w->b->last_access_ns = crb_now_ns();
    pthread_mutex_unlock(&s->mu);
    account_reserved(s, next);
    fly_push(s, r);
    return PLACED;
}

/* ---- copying into the ring and writing ------------------------------------------ */

/* Is r's value written straight from its memory (the ring takes the bytes around it)? */
static bool direct_value(const crf_store *s, const crf_rec *r)
{
    return s->direct && r->value != NULL && r->value_len >= CRF_DIRECT_MIN &&
           (r->rec_off + r->value_rel) % CRF_BLOCK == 0 && (uintptr_t)r->value % CRF_BLOCK == 0;
}

static void copy_step(crf_store *s)
{
    crf_writer *w = &s->w;
    while (s->copy_cur != NULL) {
        crf_rec *r = s->copy_cur;
        uint64_t total = rec_bytes(r);
        if (r->copied >= total || r->bucket != w->b || r->status != 0) {
            r->copied = total;
            crf_rec *n = r->next;
            while (n != NULL && n->n_pieces == 0)
                n = n->next;
            s->copy_cur = n;
            continue;
        }
        uint64_t held = w->tail - crf_round_down(w->completed, CRF_BLOCK);
        bool direct = direct_value(s, r);
        if (direct && r->copied == r->value_rel && w->tail == r->rec_off + r->value_rel) {
            if (w->direct_len != 0)
                return; /* one direct segment at a time: after this one is submitted */
            w->direct_src = r->value;
            w->direct_off = w->tail;
            w->direct_len = crf_round_down(r->value_len, CRF_BLOCK);
            w->tail += w->direct_len;
            r->copied += w->direct_len;
            continue; /* the rest of the record (the value's tail, padding) into the ring */
        }
        if (held >= w->ring_size - CRF_BLOCK)
            return; /* (a direct segment can take the window past the ring's size) */
        uint64_t room = w->ring_size - CRF_BLOCK - held;
        uint64_t skip = r->copied, want = total - r->copied;
        if (want > room)
            want = room;
        if (direct && r->copied < r->value_rel && want > r->value_rel - r->copied)
            want = r->value_rel - r->copied; /* up to the value: it goes straight from memory */
        r->copied += want;
        for (int i = 0; i < r->n_pieces && want > 0; i++) {
            const crf_piece *p = &r->pieces[i];
            if (skip >= p->len) {
                skip -= p->len;
                continue;
            }
            uint64_t n = p->len - skip;
            if (n > want)
                n = want;
            uint64_t done = 0;
            while (done < n) {
                uint64_t pos = w->tail % w->ring_size;
                uint64_t run = w->ring_size - pos;
                if (run > n - done)
                    run = n - done;
                if (p->p != NULL)
                    memcpy(w->ring + pos, p->p + skip + done, run);
                else
                    memset(w->ring + pos, 0, run);
                w->tail += run;
                done += run;
            }
            want -= n;
            skip = 0;
        }
    }
}

static void write_step(crf_store *s)
{
    crf_writer *w = &s->w;
    if (w->b == NULL || w->broken != 0)
        return;
    if (w->tail > w->submitted)
        prealloc_step(s);
    bool flush_all = s->copy_cur == NULL;
    while (w->w_count < CRF_MAX_WRITES && w->tail > w->submitted) {
        if (w->direct_len != 0 && w->submitted >= w->direct_off) {
            /* the direct segment: straight from the caller's memory */
            uint64_t done = w->submitted - w->direct_off;
            uint64_t len = w->direct_len - done < w->chunk ? w->direct_len - done : w->chunk;
            unsigned slot = (w->w_head + w->w_count) % CRF_MAX_WRITES;
            crf_wop *op = &w->wops[slot];
            memset(op, 0, sizeof(*op));
            op->iop.kind = CRF_IOP_WRITE;
            op->iop.fd = w->b->fd;
            op->iop.buf = (uint8_t *)(uintptr_t)w->direct_src + done;
            op->iop.off = w->submitted;
            op->iop.len = op->iop.need = len;
            op->iop.owner = w->b;
            op->end = w->submitted + len;
            if (!submit_iop(s, &op->iop))
                return;
            w->w_count++;
            w->submitted = op->end;
            atomic_fetch_add_explicit(&s->n_direct_write_bytes, len, memory_order_relaxed);
            if (done + len == w->direct_len)
                w->direct_len = 0; /* all of it submitted: the next one may start */
            continue;
        }
        /* ring bytes: those before a pending direct segment are complete (they end at its
         * block-aligned start), so they go out whole */
        uint64_t limit = w->direct_len != 0 ? w->direct_off : w->tail;
        bool final = flush_all || w->direct_len != 0;
        uint64_t start = crf_round_down(w->submitted, CRF_BLOCK);
        if (w->partial_block != NO_BLOCK && start == w->partial_block)
            return;
        uint64_t full_end = crf_round_down(limit, CRF_BLOCK);
        uint64_t len;
        bool partial = false;
        if (full_end > start && full_end - start >= w->chunk) {
            len = w->chunk;
        } else if (final) {
            len = crf_round_up(limit, CRF_BLOCK) - start;
            if (len > w->chunk)
                len = w->chunk;
            else
                partial = (limit % CRF_BLOCK) != 0;
        } else {
            return; /* more is coming: wait for a full chunk */
        }
        uint64_t pos = start % w->ring_size;
        if (pos + len > w->ring_size) {
            len = w->ring_size - pos;
            partial = false;
        }
        if (partial) {
            uint64_t tpos = w->tail % w->ring_size;
            memset(w->ring + tpos, 0, crf_round_up(w->tail, CRF_BLOCK) - w->tail);
        }
        unsigned slot = (w->w_head + w->w_count) % CRF_MAX_WRITES;
        crf_wop *op = &w->wops[slot];
        memset(op, 0, sizeof(*op));
        op->iop.kind = CRF_IOP_WRITE;
        op->iop.fd = w->b->fd;
        op->iop.buf = w->ring + pos;
        op->iop.off = start;
        op->iop.len = op->iop.need = len;
        op->iop.owner = w->b;
        op->end = partial ? limit : start + len;
        uint64_t direct_len = 0;
        if (w->direct_len != 0 && start + len == w->direct_off) {
            /* the ring bytes end where the direct segment starts (a record's header
             * block, and whatever shares it): one vectored write carries both */
            direct_len = w->direct_len < w->chunk ? w->direct_len : w->chunk;
            op->iop.n_iov = 2;
            op->iop.iov[0].iov_base = w->ring + pos;
            op->iop.iov[0].iov_len = len;
            op->iop.iov[1].iov_base = (uint8_t *)(uintptr_t)w->direct_src;
            op->iop.iov[1].iov_len = direct_len;
            op->iop.len = op->iop.need = len + direct_len;
            op->end = w->direct_off + direct_len;
        }
        if (!submit_iop(s, &op->iop))
            return;
        w->w_count++;
        w->submitted = op->end;
        if (partial)
            w->partial_block = crf_round_down(w->tail, CRF_BLOCK);
        if (direct_len != 0) {
            atomic_fetch_add_explicit(&s->n_direct_write_bytes, direct_len, memory_order_relaxed);
            atomic_fetch_add_explicit(&s->n_coalesced_writes, 1, memory_order_relaxed);
            if (direct_len == w->direct_len)
                w->direct_len = 0; /* all of it submitted: the next one may start */
        }
    }
}

/* A write failed: fail everything placed in the bucket and abandon it once drained. */
static void break_bucket(crf_store *s, int status, int err)
{
    crf_writer *w = &s->w;
    if (w->broken != 0)
        return;
    w->broken = status;
    crb_log(CRB_LOG_ERROR, "disk: write to bucket %llu failed: %s", (unsigned long long)w->b->id,
            strerror(err));
    for (crf_rec *r = s->fly_head; r != NULL; r = r->next)
        if (r->bucket == w->b && r->status == 0 && r->end > w->completed)
            r->status = status;
}

static void abandon_broken(crf_store *s)
{
    crf_writer *w = &s->w;
    if (w->broken == 0 || w->w_count > 0)
        return;
    crf_bucket *b = w->b;
    trim_prealloc(s, crf_round_up(w->tail, CRF_BLOCK)); /* keeps every byte it wrote */
    pthread_mutex_lock(&s->mu);
    b->writable = false;
    pthread_mutex_unlock(&s->mu);
    b->unsynced = true;
    w->b = NULL;
    w->broken = 0;
    w->seal_state = SEAL_NONE;
    crf_bucket_unref(b);
}

static void seal_step(crf_store *s)
{
    crf_writer *w = &s->w;
    if (w->seal_state == SEAL_NONE || w->broken != 0)
        return;
    if (w->seal_state == SEAL_DRAIN) {
        if (w->completed < w->reserved || w->w_count > 0)
            return;
        trim_prealloc(s, w->reserved); /* the trailer is the file's last 64 bytes again */
        if (s->cfg.sync == CRF_SYNC_NONE) {
            finish_seal(s);
            return;
        }
        w->seal_state = SEAL_SYNC;
    }
    if (s->fsync_op.in_flight)
        return;
    if (s->synced_gen >= s->written_gen && s->fsync_op.err == 0) {
        finish_seal(s);
        return;
    }
    submit_fsync(s, w->b);
}

/* ---- finishing records ------------------------------------------------------------ */

static crf_entry *entry_for(const crf_rec *r, uint8_t flags)
{
    crf_entry *e = crf_entry_new(r->key, r->key_len, r->meta, r->meta_len);
    if (e == NULL)
        return NULL;
    e->hash = crf_key_hash(r->key, r->key_len);
    e->rec_off = r->rec_off;
    e->value_len = r->value_len;
    e->seq = r->seq;
    e->value_hash = r->value_hash;
    e->value_rel = r->value_rel;
    e->flags = flags;
    return e;
}

static uint64_t rec_extent(const crf_rec *r)
{
    return r->end - r->rec_off;
}

/* mu held: the record is on disk but indexes nothing. */
static void count_dead(crf_store *s, crf_rec *r)
{
    r->bucket->dead_bytes += rec_extent(r);
    if (crf_bucket_wants_compaction(s, r->bucket))
        crf_kick_maint(s);
}

static int apply_put(crf_store *s, crf_rec *r)
{
    uint64_t hash = crf_key_hash(r->key, r->key_len);
    crf_entry *old = crf_index_find(&s->index, r->key, r->key_len, hash);
    if (old != NULL && old->seq > r->seq) {
        count_dead(s, r);
        return 0;
    }
    crf_entry *e = entry_for(r, (uint8_t)(r->entry_flags | (old != NULL ? CRF_ENTRY_SHADOWS : 0)));
    if (e == NULL) {
        count_dead(s, r);
        return CR_ERR_NO_MEMORY;
    }
    if (old != NULL) {
        crf_index_replace(&s->index, old, e);
        crf_bucket *ob = old->bucket;
        crf_bucket_unlink_live(ob, old);
        ob->dead_bytes += crf_entry_extent(old);
        s->live_bytes -= crf_entry_extent(old);
        if (crf_bucket_wants_compaction(s, ob))
            crf_kick_maint(s);
        free(old);
    } else if (crf_index_insert(&s->index, e) != 0) {
        free(e);
        count_dead(s, r);
        return CR_ERR_NO_MEMORY;
    }
    crf_bucket_link_live(r->bucket, e);
    s->live_bytes += crf_entry_extent(e);
    return 0;
}

static void add_tomb(crf_store *s, crf_rec *r)
{
    crf_entry *t = entry_for(r, 0);
    if (t == NULL) {
        count_dead(s, r); /* the tombstone is on disk; only our memory of it is lost */
        return;
    }
    crf_bucket_link_tomb(r->bucket, t);
    s->tombstones++;
}

static void apply_remove(crf_store *s, crf_rec *r)
{
    crf_entry *e = crf_index_find(&s->index, r->key, r->key_len, crf_key_hash(r->key, r->key_len));
    if (e != NULL && e->seq < r->seq && (r->from_off == 0 || e->seq == r->from_off))
        crf_drop_entry(s, e);
    add_tomb(s, r);
}

static void apply_move(crf_store *s, crf_rec *r)
{
    crf_entry *e = crf_index_find(&s->index, r->key, r->key_len, crf_key_hash(r->key, r->key_len));
    if (e == NULL || e->seq != r->seq || e->bucket != r->from || e->rec_off != r->from_off) {
        count_dead(s, r);
        return;
    }
    crf_bucket *ob = e->bucket;
    crf_bucket_unlink_live(ob, e);
    ob->dead_bytes += crf_entry_extent(e);
    s->live_bytes -= crf_entry_extent(e);
    e->rec_off = r->rec_off;
    e->value_rel = r->value_rel;
    e->flags |= CRF_ENTRY_SHADOWS; /* its old copy lasts until the victim is unlinked */
    crf_bucket_link_live(r->bucket, e);
    s->live_bytes += crf_entry_extent(e);
    atomic_fetch_add_explicit(&s->n_compacted_records, 1, memory_order_relaxed);
}

/* Blocking fdatasync of every bucket written since its last one. */
static int sync_all(crf_store *s, char *msg, size_t msg_len)
{
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    size_t n = s->n_buckets;
    crf_bucket **list = malloc((n + 1) * sizeof(*list));
    size_t m = 0;
    for (size_t i = 0; list != NULL && i < n; i++) {
        if (s->buckets[i]->unsynced || s->buckets[i] == s->w.b) {
            crf_bucket_ref(s->buckets[i]);
            list[m++] = s->buckets[i];
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (list == NULL) {
        snprintf(msg, msg_len, "disk: no memory to sync");
        return CR_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < m; i++) {
        if (fdatasync(list[i]->fd) != 0 && rc == 0) {
            snprintf(msg, msg_len, "disk: fdatasync of bucket %llu: %s",
                     (unsigned long long)list[i]->id, strerror(errno));
            rc = CR_ERR_DISK_IO;
        } else {
            list[i]->unsynced = false;
        }
        atomic_fetch_add_explicit(&s->n_fdatasyncs, 1, memory_order_relaxed);
        crf_bucket_unref(list[i]);
    }
    free(list);
    if (fsync(s->dir_fd) != 0 && rc == 0) {
        snprintf(msg, msg_len, "disk: fsync of %s: %s", s->path, strerror(errno));
        rc = CR_ERR_DISK_IO;
    }
    if (rc == 0)
        s->synced_gen = s->written_gen;
    return rc;
}

static void do_unlink(crf_store *s, crf_rec *r)
{
    crf_bucket *b = r->from;
    char name[32];
    crf_bucket_name(b->id, name);
    if (r->status == 0) {
        char msg[200];
        /* What replaced the bucket (moved records, tombstones) must be durable first. */
        if (s->cfg.sync >= CRF_SYNC_SEAL && s->w.b != NULL && fdatasync(s->w.b->fd) != 0)
            r->status = CR_ERR_DISK_IO;
        if (r->status == 0 && unlinkat(s->dir_fd, name, 0) != 0 && errno != ENOENT) {
            snprintf(msg, sizeof(msg), "disk: unlink %s/%s: %s", s->path, name, strerror(errno));
            crb_log(CRB_LOG_ERROR, "%s", msg);
        }
        if (r->status == 0 && s->cfg.sync >= CRF_SYNC_SEAL)
            fsync(s->dir_fd);
    } else {
        crb_log(CRB_LOG_WARN, "disk: bucket %llu kept on disk: its replacement records failed",
                (unsigned long long)b->id);
    }
    crf_bucket_unref(b);
}

/*
 * Finish landed records and markers at the head of the in-flight FIFO, in
 * order. Returns when the head must wait (bytes not landed, an fdatasync
 * the policy requires, a seal in progress).
 */
static void finish_step(crf_store *s)
{
    crf_writer *w = &s->w;
    char msg[200];
    while (s->fly_head != NULL) {
        crf_rec *r = s->fly_head;
        bool data = r->n_pieces > 0;
        if (data && r->status == 0 && r->bucket == w->b && r->end > w->completed)
            return;
        if (r->kind == CRF_RK_SEAL && r->bucket != NULL && r->bucket == w->b)
            return;
        if (r->kind == CRF_RK_FOOTER || r->kind == CRF_RK_RAW) {
            /* nothing to apply; the seal itself is finished by seal_step */
        } else if (r->status == 0 && (r->kind == CRF_RK_PUT || r->kind == CRF_RK_REMOVE) &&
                   s->cfg.sync == CRF_SYNC_PUT && r->bucket == w->b) {
            /* (a record of a sealed bucket was made durable by the seal) */
            if (r->written_gen == 0)
                r->written_gen = s->written_gen;
            if (s->synced_gen < r->written_gen) {
                submit_fsync(s, w->b);
                return;
            }
        }
        s->fly_head = r->next;
        if (s->fly_head == NULL)
            s->fly_tail = NULL;
        if (s->copy_cur == r)
            s->copy_cur = r->next;
        r->next = NULL;

        /* A caller's record may be freed as soon as its result is in: read it first. */
        bool internal = r->internal;
        int status = r->status;
        crf_bucket *applied_in = r->counted ? r->bucket : NULL;
        switch (r->kind) {
        case CRF_RK_PUT:
            if (status == 0) {
                pthread_mutex_lock(&s->mu);
                status = apply_put(s, r);
                pthread_mutex_unlock(&s->mu);
            }
            if (status != 0 && r->req != NULL)
                crf_req_fail(r->req, status, "disk: put of a %llu-byte value failed: %s",
                             (unsigned long long)r->value_len, cr_strerror(status));
            rec_result(r, status);
            break;
        case CRF_RK_REMOVE:
            if (status == 0) {
                pthread_mutex_lock(&s->mu);
                apply_remove(s, r);
                pthread_mutex_unlock(&s->mu);
            } else if (r->req != NULL) {
                crf_req_fail(r->req, status, "disk: remove failed: %s", cr_strerror(status));
            }
            rec_result(r, status);
            break;
        case CRF_RK_MOVE:
            if (status == 0) {
                pthread_mutex_lock(&s->mu);
                apply_move(s, r);
                pthread_mutex_unlock(&s->mu);
            }
            rec_result(r, status);
            break;
        case CRF_RK_TOMB_KEEP:
        case CRF_RK_TOMB_EVICT:
            if (status == 0) {
                pthread_mutex_lock(&s->mu);
                add_tomb(s, r);
                pthread_mutex_unlock(&s->mu);
            } else if (r->group != NULL && r->group->status == 0) {
                r->group->status = status;
            }
            break;
        case CRF_RK_SYNC:
            status = sync_all(s, msg, sizeof(msg));
            if (status != 0 && r->req != NULL)
                crf_req_fail(r->req, status, "%s", msg);
            rec_result(r, status);
            break;
        case CRF_RK_SEAL:
            rec_result(r, 0);
            break;
        case CRF_RK_UNLINK:
            do_unlink(s, r);
            if (r->req != NULL)
                item_done(r->req);
            r->req = NULL;
            break;
        default:
            break;
        }
        /* applied (or failed): its bucket may be compacted or evicted now */
        if (applied_in != NULL)
            atomic_fetch_sub_explicit(&applied_in->pending_applies, 1, memory_order_release);
        if (internal) {
            free(r->owned);
            free(r);
        }
    }
}

/* ---- completions ------------------------------------------------------------------- */

static void read_done(crf_store *s, crf_iop *op)
{
    crf_read *rd = op->owner;
    s->reads_in_flight--;
    if (op->err != 0 && rd->status == 0) {
        rd->status = CR_ERR_DISK_IO;
        crf_req_fail(rd->req, CR_ERR_DISK_IO, "disk: read of %llu bytes at %llu in bucket %llu: %s",
                     (unsigned long long)op->len, (unsigned long long)op->off,
                     (unsigned long long)rd->bucket->id, strerror(-op->err));
    }
    if (--rd->left == 0)
        item_done(rd->req);
}

static void rq_push_front(crf_store *s, crf_iop *op)
{
    op->next = s->rq_head;
    s->rq_head = op;
    if (s->rq_tail == NULL)
        s->rq_tail = op;
}

static void rq_push_back(crf_store *s, crf_iop *op)
{
    op->next = NULL;
    if (s->rq_tail != NULL)
        s->rq_tail->next = op;
    else
        s->rq_head = op;
    s->rq_tail = op;
}

static void write_landed(crf_store *s)
{
    crf_writer *w = &s->w;
    while (w->w_count > 0 && w->wops[w->w_head].iop.done) {
        crf_wop *op = &w->wops[w->w_head];
        if (w->broken == 0 && op->end > w->completed)
            w->completed = op->end;
        if (w->partial_block != NO_BLOCK && op->end % CRF_BLOCK != 0 &&
            crf_round_down(op->end, CRF_BLOCK) == w->partial_block)
            w->partial_block = NO_BLOCK;
        w->w_head = (w->w_head + 1) % CRF_MAX_WRITES;
        w->w_count--;
        s->written_gen++;
        if (w->b != NULL)
            w->b->unsynced = true;
    }
}

static void handle_cqe(crf_store *s, struct io_uring_cqe *cqe)
{
    crf_iop *op = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    if (op == NULL)
        return;
    op->in_flight = false;
    switch (op->kind) {
    case CRF_IOP_POLL: {
        ssize_t n = read(s->efd, &s->efd_buf, sizeof(s->efd_buf));
        (void)n;
        arm_poll(s);
        return;
    }
    case CRF_IOP_FSYNC:
        atomic_fetch_add_explicit(&s->n_fdatasyncs, 1, memory_order_relaxed);
        if (res < 0) {
            op->err = res;
            crb_log(CRB_LOG_ERROR, "disk: fdatasync failed: %s", strerror(-res));
            if (s->w.b != NULL)
                break_bucket(s, CR_ERR_DISK_IO, -res);
        } else if (s->fsync_gen > s->synced_gen) {
            s->synced_gen = s->fsync_gen;
        }
        return;
    case CRF_IOP_READ:
        if (res == -EINTR || res == -EAGAIN) {
            rq_push_front(s, op);
            s->reads_in_flight--;
            return;
        }
        if (res < 0) {
            op->err = res;
        } else if (res == 0) {
            if (op->got < op->need)
                op->err = -EIO; /* the file ends before the record does */
        } else {
            op->got += (uint64_t)res;
            if (op->got < op->need && op->got < op->len) {
                rq_push_front(s, op); /* short read: ask for the rest */
                s->reads_in_flight--;
                return;
            }
        }
        op->done = true;
        read_done(s, op);
        return;
    case CRF_IOP_WRITE:
        if (res == -EINTR || res == -EAGAIN) {
            submit_iop(s, op);
            return;
        }
        if (res < 0) {
            op->err = res;
            op->done = true;
            break_bucket(s, crf_errno_status(-res), -res);
        } else {
            op->got += (uint64_t)res;
            if (op->got < op->len && res > 0 && !s->direct) {
                submit_iop(s, op); /* short buffered write: the rest */
                return;
            }
            if (op->got < op->len) {
                op->err = -ENOSPC;
                break_bucket(s, CR_ERR_DISK_FULL, ENOSPC);
            }
            op->done = true;
        }
        write_landed(s);
        return;
    default:
        return;
    }
}

/* ---- intake -------------------------------------------------------------------------- */

static void intake(crf_store *s, crf_req *r)
{
    switch (r->kind) {
    case CRF_REQ_RECORDS: {
        /* One extra count held over the loop: finishing the last record
         * inside it would let the caller free r under our feet. */
        size_t n = r->n;
        crf_rec *recs = r->recs;
        r->pending = n + 1;
        for (size_t i = 0; i < n; i++) {
            crf_rec *rec = &recs[i];
            if (rec->kind == CRF_RK_REMOVE) {
                pthread_mutex_lock(&s->mu);
                crf_entry *e = crf_index_find(&s->index, rec->key, rec->key_len,
                                              crf_key_hash(rec->key, rec->key_len));
                bool present = e != NULL && (rec->from_off == 0 || e->seq == rec->from_off);
                pthread_mutex_unlock(&s->mu);
                if (!present) {
                    crf_req_fail(r, CR_OBJECT_NOT_FOUND, "disk: no such key");
                    rec_result(rec, CR_OBJECT_NOT_FOUND);
                    continue;
                }
            }
            pend_push_back(s, rec);
        }
        item_done(r);
        return;
    }
    case CRF_REQ_READ:
        r->pending = r->n;
        for (size_t i = 0; i < r->n; i++) {
            crf_read *rd = &r->reads[i];
            rd->left = rd->n_seg;
            for (int k = 0; k < rd->n_seg; k++) {
                crf_iop *op = &rd->seg[k];
                op->kind = CRF_IOP_READ;
                op->fd = rd->bucket->fd;
                op->owner = rd;
                op->got = 0;
                op->err = 0;
                op->done = false;
                rq_push_back(s, op);
            }
        }
        if (r->n == 0)
            req_complete(r);
        return;
    case CRF_REQ_DOOM:
        r->pending = 1;
        doom_bucket(s, r->target, r, false);
        return;
    case CRF_REQ_STOP: {
        s->stop_req = r;
        crf_rec *seal = calloc(1, sizeof(*seal));
        if (seal != NULL) {
            seal->kind = CRF_RK_SEAL;
            seal->internal = true;
            pend_push_back(s, seal);
        }
        return;
    }
    default:
        req_complete(r);
    }
}

static void read_step(crf_store *s)
{
    while (s->rq_head != NULL && s->reads_in_flight < s->read_slots) {
        crf_iop *op = s->rq_head;
        s->rq_head = op->next;
        if (s->rq_head == NULL)
            s->rq_tail = NULL;
        if (!submit_iop(s, op)) {
            rq_push_front(s, op);
            return;
        }
        s->reads_in_flight++;
    }
}

static bool idle(const crf_store *s)
{
    return s->pend_head == NULL && s->fly_head == NULL && s->rq_head == NULL &&
           s->reads_in_flight == 0 && s->w.w_count == 0 && s->w.seal_state == SEAL_NONE &&
           !s->fsync_op.in_flight;
}

typedef struct io_state {
    const void *p[7];
    uint64_t v[5];
    int i[2];
} io_state;

static void snapshot(const crf_store *s, io_state *st)
{
    memset(st, 0, sizeof(*st));
    st->p[0] = s->pend_head;
    st->p[1] = s->fly_head;
    st->p[2] = s->fly_tail;
    st->p[3] = s->copy_cur;
    st->p[4] = s->w.b;
    st->p[5] = s->rq_head;
    st->p[6] = s->pend_tail;
    st->v[0] = s->w.tail;
    st->v[1] = s->w.submitted;
    st->v[2] = s->w.completed;
    st->v[3] = s->sqes_pending;
    st->v[4] = s->w.direct_len;
    st->i[0] = s->w.seal_state;
    st->i[1] = s->w.broken;
}

/* Run every step until a whole round changes nothing. */
static void progress(crf_store *s)
{
    io_state before, after;
    snapshot(s, &before);
    for (;;) {
        while (s->pend_head != NULL) {
            if (place_head(s) == BLOCKED)
                break;
        }
        copy_step(s);
        write_step(s);
        seal_step(s);
        abandon_broken(s);
        finish_step(s);
        read_step(s);
        snapshot(s, &after);
        if (memcmp(&before, &after, sizeof(before)) == 0)
            return;
        before = after;
    }
}

static void *io_main(void *arg)
{
    crf_store *s = arg;
    arm_poll(s);
    for (;;) {
        pthread_mutex_lock(&s->q_mu);
        crf_req *q = s->q_head;
        s->q_head = s->q_tail = NULL;
        pthread_mutex_unlock(&s->q_mu);
        while (q != NULL) {
            crf_req *next = q->next;
            intake(s, q);
            q = next;
        }
        progress(s);
        if (s->sqes_pending > 0) {
            int n = io_uring_submit(&s->ring);
            if (n > 0) {
                atomic_fetch_add_explicit(&s->n_submits, 1, memory_order_relaxed);
                atomic_fetch_add_explicit(&s->n_sqes, (uint64_t)n, memory_order_relaxed);
            }
            s->sqes_pending = 0;
        }
        if (s->stop_req != NULL && idle(s)) {
            pthread_mutex_lock(&s->q_mu);
            bool empty = s->q_head == NULL;
            pthread_mutex_unlock(&s->q_mu);
            if (empty)
                break;
        }
        struct io_uring_cqe *cqe = NULL;
        if (io_uring_peek_cqe(&s->ring, &cqe) != 0) {
            pthread_mutex_lock(&s->q_mu);
            bool sleep = s->q_head == NULL;
            s->io_idle = sleep;
            pthread_mutex_unlock(&s->q_mu);
            if (!sleep)
                continue;
            int rc = io_uring_wait_cqe(&s->ring, &cqe);
            pthread_mutex_lock(&s->q_mu);
            s->io_idle = false;
            pthread_mutex_unlock(&s->q_mu);
            if (rc != 0)
                continue;
        }
        unsigned head, n = 0;
        io_uring_for_each_cqe(&s->ring, head, cqe)
        {
            handle_cqe(s, cqe);
            n++;
        }
        io_uring_cq_advance(&s->ring, n);
    }
    crf_req *stop = s->stop_req;
    s->stop_req = NULL;
    req_complete(stop);
    return NULL;
}

int crf_io_start(crf_store *s)
{
    crf_writer *w = &s->w;
    unsigned entries = s->cfg.queue_depth;
    int rc = io_uring_queue_init(entries, &s->ring, 0);
    if (rc < 0)
        return crb_error(CR_ERR_SYSTEM, "disk: io_uring_queue_init(%u): %s", entries,
                         strerror(-rc));
    s->ring_ready = true;
    s->read_slots = entries > CRF_MAX_WRITES + 4 ? entries - CRF_MAX_WRITES - 2 : 4;
    w->ring_size = s->cfg.write_buffer_bytes;
    w->chunk =
        w->ring_size / 4 < (1u << 20) ? crf_round_down(w->ring_size / 4, CRF_BLOCK) : (1u << 20);
    w->partial_block = NO_BLOCK;
    void *ring = NULL, *hdr = NULL;
    if (posix_memalign(&ring, CRF_BLOCK, w->ring_size) != 0 ||
        posix_memalign(&hdr, CRF_BLOCK, CRF_BLOCK) != 0) {
        free(ring);
        io_uring_queue_exit(&s->ring);
        s->ring_ready = false;
        return crb_error(CR_ERR_NO_MEMORY, "disk: %llu-byte write ring",
                         (unsigned long long)w->ring_size);
    }
    w->ring = ring;
    s->hdr_block = hdr;
    rc = pthread_create(&s->io_thread, NULL, io_main, s);
    if (rc != 0) {
        free(w->ring);
        free(s->hdr_block);
        w->ring = NULL;
        s->hdr_block = NULL;
        io_uring_queue_exit(&s->ring);
        s->ring_ready = false;
        return crb_error(CR_ERR_SYSTEM, "disk: start the I/O thread: %s", strerror(rc));
    }
    s->io_started = true;
    return 0;
}

void crf_io_stop(crf_store *s)
{
    if (!s->io_started)
        return;
    crf_req r;
    crf_req_init(&r, CRF_REQ_STOP);
    pthread_mutex_lock(&s->q_mu);
    s->stopping = true;
    pthread_mutex_unlock(&s->q_mu);
    crf_submit_wait(s, &r);
    pthread_join(s->io_thread, NULL);
    crf_req_fini(&r);
    s->io_started = false;
    /* The poll on the eventfd is still armed; tearing the ring down cancels it. */
    io_uring_queue_exit(&s->ring);
    s->ring_ready = false;
    free(s->w.ring);
    free(s->w.footer);
    free(s->hdr_block);
    s->w.ring = NULL;
    s->w.footer = NULL;
    s->hdr_block = NULL;
}
