/*
 * recover.c - crf_open's reading of the directory: every bucket file back
 * into the bucket table, and the index rebuilt from their records.
 *
 * A sealed bucket is read through its trailer and FOOTER record (one read
 * at the end of the file, verified by checksums). Any other bucket (it was
 * being written when the process died, or its footer does not verify) is
 * read record by record from the first record slot: a header that does not
 * verify is skipped 8 bytes at a time until one that does (records written
 * out of order can leave a hole before complete ones); a record whose value
 * does not match its checksum is skipped whole. The bytes after the last
 * complete record are cut off and a footer is written there, so the bucket
 * is sealed from then on. A file whose bucket header does not verify held no
 * record yet (headers are written before any record) and is removed.
 *
 * The index: for each key, the PUT record with the highest sequence number
 * wins unless a tombstone of the key has a higher one. Every tombstone is
 * kept in its bucket's list (compaction decides when one may go); every
 * losing record counts as dead bytes of its bucket.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "base/log.h"
#include "disk/internal.h"

#define SCAN_CHUNK (4u << 20)

typedef struct rec_list {
    crf_entry **items; /* entries with bucket, seq, location, and flags bit 0x80 = tombstone */
    uint8_t *types;
    size_t n, cap;
} rec_list;

static int rec_add(rec_list *l, crf_bucket *b, uint8_t type, uint64_t rec_off, uint64_t seq,
                   uint64_t value_len, uint64_t value_hash, uint32_t value_rel, const uint8_t *key,
                   uint32_t key_len, const uint8_t *meta, uint32_t meta_len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap == 0 ? 1024 : l->cap * 2;
        crf_entry **ni = realloc(l->items, cap * sizeof(*ni));
        if (ni == NULL)
            return CR_ERR_NO_MEMORY;
        l->items = ni;
        uint8_t *nt = realloc(l->types, cap);
        if (nt == NULL)
            return CR_ERR_NO_MEMORY;
        l->types = nt;
        l->cap = cap;
    }
    crf_entry *e = crf_entry_new(key, key_len, meta, meta_len);
    if (e == NULL)
        return CR_ERR_NO_MEMORY;
    e->hash = crf_key_hash(key, key_len);
    e->bucket = b;
    e->rec_off = rec_off;
    e->seq = seq;
    e->value_len = value_len;
    e->value_hash = value_hash;
    e->value_rel = value_rel;
    l->items[l->n] = e;
    l->types[l->n] = type;
    l->n++;
    return 0;
}

/* A read-only window over a bucket file, refilled in aligned chunks. */
typedef struct window {
    int fd;
    uint8_t *buf;
    uint64_t start, end; /* file range held */
} window;

static int window_fill(window *w, uint64_t at, uint64_t want)
{
    if (at >= w->start && at + want <= w->end)
        return 0;
    uint64_t start = crf_round_down(at, CRF_BLOCK);
    ssize_t n = pread(w->fd, w->buf, SCAN_CHUNK, (off_t)start);
    if (n < 0)
        return crb_error(CR_ERR_DISK_IO, "disk: read at %llu: %s", (unsigned long long)start,
                         strerror(errno));
    w->start = start;
    w->end = start + (uint64_t)n;
    return 0;
}

/* XXH3 of file bytes [off, off+len) through the window. */
static int hash_range(window *w, uint64_t off, uint64_t len, uint64_t *out)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    while (len > 0) {
        int rc = window_fill(w, off, 1);
        if (rc != 0)
            return rc;
        if (off < w->start || off >= w->end)
            return crb_error(CR_ERR_DISK_CORRUPT, "disk: file ends inside a record");
        uint64_t n = w->end - off;
        if (n > len)
            n = len;
        XXH3_64bits_update(&st, w->buf + (off - w->start), (size_t)n);
        off += n;
        len -= n;
    }
    *out = XXH3_64bits_digest(&st);
    return 0;
}

/* Sealed bucket: records from the footer. 0, or CR_ERR_DISK_CORRUPT to fall back to a scan. */
static int read_footer(crf_bucket *b, window *win, uint64_t file_len, rec_list *out,
                       uint64_t *data_end)
{
    if (file_len % CRF_BLOCK != 0 || file_len < CRF_FIRST_RECORD + CRF_BLOCK)
        return CR_ERR_DISK_CORRUPT;
    int rc = window_fill(win, file_len - CRF_TRAILER_SIZE, CRF_TRAILER_SIZE);
    if (rc != 0)
        return rc;
    if (win->end < file_len)
        return CR_ERR_DISK_CORRUPT;
    crf_trailer t;
    rc = crf_trailer_decode(win->buf + (file_len - CRF_TRAILER_SIZE - win->start), CRF_TRAILER_SIZE,
                            b->salt, file_len, &t);
    if (rc != 0)
        return rc;
    uint64_t limit = file_len - CRF_TRAILER_SIZE;
    uint64_t want = limit - t.footer_off;
    if (want > CRF_MAX_RECORD_PREFIX)
        want = CRF_MAX_RECORD_PREFIX;
    if ((rc = window_fill(win, t.footer_off, want)) != 0)
        return rc;
    if (win->end < t.footer_off + want)
        return CR_ERR_DISK_CORRUPT;
    crf_record_header h;
    const uint8_t *key, *meta;
    rc = crf_record_header_decode(win->buf + (t.footer_off - win->start), win->end - t.footer_off,
                                  t.footer_off, b->salt, limit, &h, &key, &meta);
    if (rc != 0)
        return rc;
    if (h.type != CRF_REC_FOOTER || h.value_len > SIZE_MAX / 2)
        return crb_error(CR_ERR_DISK_CORRUPT, "disk: trailer does not point at a footer");
    uint64_t vo = t.footer_off + crf_record_value_rel(&h);
    uint8_t *footer = malloc(h.value_len > 0 ? (size_t)h.value_len : 1);
    if (footer == NULL)
        return CR_ERR_NO_MEMORY;
    for (uint64_t got = 0; got < h.value_len;) {
        if ((rc = window_fill(win, vo + got, 1)) != 0)
            goto out_free;
        if (vo + got >= win->end) {
            rc = CR_ERR_DISK_CORRUPT;
            goto out_free;
        }
        uint64_t n = win->end - (vo + got);
        if (n > h.value_len - got)
            n = h.value_len - got;
        memcpy(footer + got, win->buf + (vo + got - win->start), (size_t)n);
        got += n;
    }
    if (XXH3_64bits(footer, (size_t)h.value_len) != h.value_hash) {
        rc = crb_error(CR_ERR_DISK_CORRUPT, "disk: footer checksum mismatch");
        goto out_free;
    }
    size_t pos = 0, start_n = out->n;
    uint64_t count = 0;
    while (pos < h.value_len) {
        crf_footer_entry e;
        if ((rc = crf_footer_entry_decode(footer, (size_t)h.value_len, &pos, t.data_end, &e)) != 0)
            goto out_undo;
        uint32_t rel = CRF_RECORD_HEADER_SIZE + e.key_len + e.meta_len + e.value_gap;
        if ((rc = rec_add(out, b, e.type, e.rec_off, e.seq, e.value_len, e.value_hash, rel, e.key,
                          e.key_len, e.meta, e.meta_len)) != 0)
            goto out_undo;
        count++;
    }
    if (count != t.record_count) {
        rc = crb_error(CR_ERR_DISK_CORRUPT, "disk: footer lists %llu records, trailer %llu",
                       (unsigned long long)count, (unsigned long long)t.record_count);
        goto out_undo;
    }
    *data_end = t.data_end;
    free(footer);
    return 0;
out_undo:
    while (out->n > start_n)
        free(out->items[--out->n]);
out_free:
    free(footer);
    return rc;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        if (v != 0)
            return false;
    }
    return true;
}

/*
 * Unsealed bucket: every complete, verified record, from the first slot on.
 * A whole block of zeros holds no record start (a header begins with its
 * non-zero magic, and one starting late in a block would have its magic in
 * that block), so zero blocks -- a write that never landed, the preallocated
 * tail of a bucket that was being written -- are passed a block at a time.
 * Zero blocks after the last valid record are the tail, not torn bytes.
 */
static int scan_records(crf_store *s, crf_bucket *b, window *win, uint64_t file_len, rec_list *out,
                        uint64_t *valid_end)
{
    uint8_t key[CRF_MAX_KEY], meta[CRF_MAX_META];
    uint64_t p = CRF_FIRST_RECORD, end = CRF_FIRST_RECORD, torn = 0, zeros = 0;
    while (p + CRF_RECORD_HEADER_SIZE <= file_len) {
        uint64_t want = file_len - p < CRF_MAX_RECORD_PREFIX ? file_len - p : CRF_MAX_RECORD_PREFIX;
        int rc = window_fill(win, p, want);
        if (rc != 0)
            return rc;
        crf_record_header h;
        const uint8_t *k, *m;
        uint64_t avail = win->end > p ? win->end - p : 0;
        if (p % CRF_BLOCK == 0 && avail >= CRF_BLOCK &&
            all_zero(win->buf + (p - win->start), CRF_BLOCK)) {
            p += CRF_BLOCK;
            zeros += CRF_BLOCK;
            continue;
        }
        if (avail < CRF_RECORD_HEADER_SIZE ||
            crf_record_header_decode(win->buf + (p - win->start), (size_t)avail, p, b->salt,
                                     file_len, &h, &k, &m) != 0) {
            p += CRF_RECORD_ALIGN;
            torn += CRF_RECORD_ALIGN;
            continue;
        }
        memcpy(key, k, h.key_len);
        if (h.meta_len > 0)
            memcpy(meta, m, h.meta_len);
        uint64_t extent = crf_record_extent(&h);
        uint64_t hash = 0;
        if ((rc = hash_range(win, p + crf_record_value_rel(&h), h.value_len, &hash)) != 0)
            return rc;
        uint64_t next = crf_round_up(p + extent, CRF_RECORD_ALIGN);
        if (hash != h.value_hash) {
            torn += next - p;
            p = next;
            continue;
        }
        if (h.type != CRF_REC_FOOTER) {
            rc = rec_add(out, b, h.type, p, h.seq, h.value_len, h.value_hash,
                         (uint32_t)crf_record_value_rel(&h), key, h.key_len,
                         h.meta_len > 0 ? meta : NULL, h.meta_len);
            if (rc != 0)
                return rc;
            end = p + extent;
            torn += zeros; /* a hole before a valid record */
            zeros = 0;
        }
        p = next;
    }
    s->rec_torn_bytes += torn;
    *valid_end = end;
    return 0;
}

/*
 * Seal a scanned bucket: footer of records[first..n) at the 8-aligned valid
 * end, zeros, trailer; the file is cut to that length. Written through a
 * buffered descriptor (no alignment to keep); O_DIRECT reads later see it.
 */
static int reseal(crf_store *s, crf_bucket *b, const char *name, const rec_list *l, size_t first,
                  uint64_t valid_end, uint64_t *file_len)
{
    size_t footer_len = 0;
    uint64_t min_seq = UINT64_MAX, max_seq = 0;
    for (size_t i = first; i < l->n; i++)
        footer_len += crf_footer_entry_size(l->items[i]->key_len, l->items[i]->meta_len);
    uint64_t foff = crf_round_up(valid_end, CRF_RECORD_ALIGN);
    uint8_t flags;
    uint32_t gap = crf_record_gap(foff, 0, 0, footer_len, &flags);
    uint64_t fend = foff + CRF_RECORD_HEADER_SIZE + gap + footer_len;
    uint64_t len = crf_round_up(crf_round_up(fend, CRF_RECORD_ALIGN) + CRF_TRAILER_SIZE, CRF_BLOCK);
    size_t total = (size_t)(len - foff);
    uint8_t *buf = calloc(1, total);
    if (buf == NULL)
        return CR_ERR_NO_MEMORY;
    uint8_t *footer = buf + CRF_RECORD_HEADER_SIZE + gap;
    size_t pos = 0;
    for (size_t i = first; i < l->n; i++) {
        const crf_entry *e = l->items[i];
        crf_footer_entry fe = {
            .rec_off = e->rec_off,
            .seq = e->seq,
            .value_len = e->value_len,
            .value_hash = e->value_hash,
            .key_len = e->key_len,
            .value_gap = e->value_rel - CRF_RECORD_HEADER_SIZE - e->key_len - e->meta_len,
            .meta_len = e->meta_len,
            .type = l->types[i],
            .flags = e->value_len >= CRF_ALIGNED_VALUE_MIN ? CRF_RECF_ALIGNED : 0,
            .key = crf_entry_key(e),
            .meta = crf_entry_meta(e),
        };
        crf_footer_entry_encode(&fe, footer + pos);
        pos += crf_footer_entry_size(e->key_len, e->meta_len);
        if (e->seq < min_seq)
            min_seq = e->seq;
        if (e->seq > max_seq)
            max_seq = e->seq;
    }
    crf_record_header h = {
        .type = CRF_REC_FOOTER,
        .flags = flags,
        .value_gap = gap,
        .value_len = footer_len,
        .value_hash = XXH3_64bits(footer, footer_len),
    };
    crf_record_header_encode(&h, NULL, NULL, b->salt, foff, buf);
    uint64_t count = l->n - first;
    crf_trailer t = {
        .footer_off = foff,
        .record_count = count,
        .data_end = valid_end,
        .min_seq = count > 0 ? min_seq : 0,
        .max_seq = count > 0 ? max_seq : 0,
    };
    crf_trailer_encode(&t, b->salt, buf + total - CRF_TRAILER_SIZE);
    int rc = 0;
    int fd = openat(s->dir_fd, name, O_RDWR | O_CLOEXEC);
    if (fd < 0 || pwrite(fd, buf, total, (off_t)foff) != (ssize_t)total ||
        ftruncate(fd, (off_t)len) != 0 || (s->cfg.sync >= CRF_SYNC_SEAL && fdatasync(fd) != 0))
        rc = crb_error(CR_ERR_DISK_IO, "disk: seal %s/%s after recovery: %s", s->path, name,
                       strerror(errno));
    if (fd >= 0)
        close(fd);
    free(buf);
    if (rc == 0)
        *file_len = len;
    return rc;
}

static void drop_file(crf_store *s, const char *name, const char *why, int level)
{
    crb_log(level, "disk: removing %s/%s: %s", s->path, name, why);
    unlinkat(s->dir_fd, name, 0);
    s->rec_dropped++;
}

/* Load one bucket file; *b NULL when the file was removed. */
static int load_bucket(crf_store *s, uint64_t id, window *win, rec_list *recs, uint64_t *seq_floor,
                       crf_bucket **out)
{
    char name[32];
    crf_bucket_name(id, name);
    *out = NULL;
    int fd = openat(s->dir_fd, name, O_RDWR | O_CLOEXEC | (s->direct ? O_DIRECT : 0));
    if (fd < 0)
        return crb_error(CR_ERR_DISK_IO, "disk: open %s/%s: %s", s->path, name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return crb_error(CR_ERR_DISK_IO, "disk: stat %s/%s: %s", s->path, name, strerror(errno));
    }
    uint64_t file_len = (uint64_t)st.st_size;
    win->fd = fd;
    win->start = win->end = 0;
    crf_bucket_header bh;
    int rc = window_fill(win, 0, CRF_BUCKET_HEADER_SIZE);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    if (win->end < CRF_BUCKET_HEADER_SIZE ||
        crf_bucket_header_decode(win->buf, CRF_BUCKET_HEADER_SIZE, &bh) != 0 ||
        bh.bucket_id != id) {
        close(fd);
        drop_file(s, name, "no valid bucket header (created just before a crash, or damaged)",
                  CRB_LOG_WARN);
        return 0;
    }
    crf_bucket *b = calloc(1, sizeof(*b));
    if (b == NULL) {
        close(fd);
        return crb_error(CR_ERR_NO_MEMORY, "disk: bucket");
    }
    b->id = id;
    b->salt = bh.salt;
    b->fd = fd;
    atomic_init(&b->refs, 1);
    b->min_seq = UINT64_MAX;
    b->last_access_ns = id; /* older buckets first among the recovered ones */
    if (bh.seq_floor > *seq_floor)
        *seq_floor = bh.seq_floor;

    size_t first = recs->n;
    uint64_t data_end = CRF_FIRST_RECORD;
    rc = read_footer(b, win, file_len, recs, &data_end);
    if (rc == CR_ERR_NO_MEMORY)
        goto err_free;
    if (rc != 0) {
        s->rec_scanned++;
        crb_log(CRB_LOG_INFO, "disk: %s/%s is not sealed; reading it record by record", s->path,
                name);
        if ((rc = scan_records(s, b, win, file_len, recs, &data_end)) != 0)
            goto err_free;
        if (recs->n == first) {
            close(fd);
            free(b);
            drop_file(s, name, "no complete record (created just before a crash)", CRB_LOG_INFO);
            return 0;
        }
        if ((rc = reseal(s, b, name, recs, first, data_end, &file_len)) != 0)
            goto err_free;
    } else if (recs->n == first) {
        close(fd);
        free(b);
        unlinkat(s->dir_fd, name, 0); /* a sealed, empty bucket */
        return 0;
    }
    b->bytes = file_len;
    b->records = recs->n - first;
    for (size_t i = first; i < recs->n; i++)
        crf_bucket_note_seq(b, recs->items[i]->seq);
    *out = b;
    return 0;

err_free:
    while (recs->n > first)
        free(recs->items[--recs->n]);
    close(fd);
    free(b);
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The bucket ids of the directory's bucket files, sorted. */
static int list_buckets(crf_store *s, uint64_t **ids, size_t *n)
{
    int dfd = dup(s->dir_fd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (d == NULL) {
        if (dfd >= 0)
            close(dfd);
        return crb_error(CR_ERR_SYSTEM, "disk: list %s: %s", s->path, strerror(errno));
    }
    rewinddir(d);
    uint64_t *v = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        unsigned long long id;
        char tail[8];
        if (strlen(de->d_name) != 24 || sscanf(de->d_name, "crf-%16llx.%3s", &id, tail) != 2 ||
            strcmp(tail, "bkt") != 0)
            continue;
        if (cnt == cap) {
            cap = cap == 0 ? 64 : cap * 2;
            uint64_t *nv = realloc(v, cap * sizeof(*nv));
            if (nv == NULL) {
                free(v);
                closedir(d);
                return crb_error(CR_ERR_NO_MEMORY, "disk: bucket list");
            }
            v = nv;
        }
        v[cnt++] = id;
    }
    closedir(d);
    if (cnt > 1)
        qsort(v, cnt, sizeof(*v), cmp_u64);
    *ids = v;
    *n = cnt;
    return 0;
}

/* Resolve records into the index (winners), tombstone lists and dead bytes. */
static int build_index(crf_store *s, rec_list *l)
{
    crf_index tmax; /* key -> the highest tombstone (borrowed entries) */
    crf_index_init(&tmax);
    int rc = 0;
    for (size_t i = 0; i < l->n; i++) {
        crf_entry *t = l->items[i];
        if (l->types[i] != CRF_REC_TOMB)
            continue;
        crf_entry *cur = crf_index_find(&tmax, crf_entry_key(t), t->key_len, t->hash);
        if (cur == NULL) {
            if ((rc = crf_index_insert(&tmax, t)) != 0)
                goto out;
        } else if (cur->seq < t->seq) {
            crf_index_replace(&tmax, cur, t);
        }
    }
    for (size_t i = 0; i < l->n; i++) {
        crf_entry *e = l->items[i];
        crf_bucket *b = e->bucket;
        if (l->types[i] == CRF_REC_TOMB) {
            crf_bucket_link_tomb(b, e);
            s->tombstones++;
            l->items[i] = NULL;
            continue;
        }
        crf_entry *t = crf_index_find(&tmax, crf_entry_key(e), e->key_len, e->hash);
        if (t != NULL && t->seq > e->seq) {
            b->dead_bytes += crf_entry_extent(e);
            continue; /* freed below */
        }
        bool shadows = false;
        crf_entry *cur = crf_index_find(&s->index, crf_entry_key(e), e->key_len, e->hash);
        if (cur != NULL) {
            if (cur->seq > e->seq) {
                cur->flags |= CRF_ENTRY_SHADOWS;
                b->dead_bytes += crf_entry_extent(e);
                continue;
            }
            crf_index_replace(&s->index, cur, e);
            crf_bucket_unlink_live(cur->bucket, cur);
            cur->bucket->dead_bytes += crf_entry_extent(cur);
            s->live_bytes -= crf_entry_extent(cur);
            free(cur);
            shadows = true;
        } else if ((rc = crf_index_insert(&s->index, e)) != 0) {
            goto out;
        }
        if (shadows)
            e->flags |= CRF_ENTRY_SHADOWS;
        crf_bucket_link_live(b, e);
        s->live_bytes += crf_entry_extent(e);
        l->items[i] = NULL;
    }
out:
    /* tmax borrows tombstones now owned by bucket lists: free only its table.
     * Entries still in l (losers) are freed by the caller. */
    free(tmax.slots);
    return rc;
}

int crf_recover(crf_store *s)
{
    uint64_t *ids = NULL;
    size_t n = 0;
    int rc = list_buckets(s, &ids, &n);
    if (rc != 0)
        return rc;
    window win = {.fd = -1};
    void *buf = NULL;
    if (posix_memalign(&buf, CRF_BLOCK, SCAN_CHUNK) != 0) {
        free(ids);
        return crb_error(CR_ERR_NO_MEMORY, "disk: %u-byte scan buffer", SCAN_CHUNK);
    }
    win.buf = buf;
    rec_list recs = {0};
    uint64_t seq_floor = 0, max_id = 0;
    for (size_t i = 0; i < n; i++) {
        crf_bucket *b = NULL;
        if (ids[i] > max_id)
            max_id = ids[i];
        if ((rc = load_bucket(s, ids[i], &win, &recs, &seq_floor, &b)) != 0)
            goto out;
        if (b == NULL)
            continue;
        if ((rc = crf_table_add(s, b)) != 0) {
            crf_bucket_unref(b);
            goto out;
        }
    }
    uint64_t max_seq = 0;
    for (size_t i = 0; i < recs.n; i++)
        if (recs.items[i]->seq > max_seq)
            max_seq = recs.items[i]->seq;
    s->rec_records = recs.n;
    rc = build_index(s, &recs);
    s->next_seq = (max_seq > seq_floor ? max_seq : seq_floor) + 1;
    s->next_bucket_id = max_id + 1;
    for (size_t i = 0; i < s->n_buckets; i++)
        if (crf_bucket_wants_compaction(s, s->buckets[i]))
            s->maint_kick = true;
out:
    for (size_t i = 0; i < recs.n; i++)
        free(recs.items[i]); /* losers (NULL for those now owned elsewhere) */
    free(recs.items);
    free(recs.types);
    free(buf);
    free(ids);
    return rc;
}
