/*
 * internal.h - the disk store's shared structures (src/disk only).
 *
 * Ownership and locks
 *   s->mu      guards the index, the bucket table and every bucket field
 *              marked (mu), the accounting and the store-wide counters that
 *              are not atomics. Held only for short, non-blocking sections.
 *   s->q_mu    guards the request queue and io_idle.
 *   s->compact_mu  serialises compactions (one at a time).
 *   The I/O thread alone owns the ring, the writer (crf_writer) and every
 *   crf_rec / crf_iop while they are queued in it.
 *   Lock order: compact_mu -> mu; q_mu is never held with mu.
 *
 * Buckets are reference-counted: the table holds one reference while the
 * bucket is listed, the writer one while it appends, and every get or
 * compaction read one while its I/O is in flight, so a file that was
 * evicted or compacted away (unlinked) stays readable through its open fd
 * until the last reader lets go. Bytes of a bucket are never rewritten once
 * a record has completed, so a read of a completed record returns its bytes
 * whatever happened to the key since.
 */
#ifndef CRESCENT_DISK_INTERNAL_H
#define CRESCENT_DISK_INTERNAL_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/error.h"
#include "disk/bounce.h"
#include "disk/disk.h"
#include "disk/index.h"

typedef struct crf_bucket {
    uint64_t id;
    uint64_t salt;
    int fd;
    atomic_int refs;
    bool writable;   /* (mu) the active bucket: the I/O thread appends to it */
    bool doomed;     /* (mu) out of the table; unlinked once its replacement records land */
    bool compacting; /* (mu) a compaction is copying its live records out */
    uint64_t bytes;  /* (mu) file bytes counted against capacity */
    uint64_t live_bytes, dead_bytes, tomb_bytes; /* (mu) record bytes by state */
    uint64_t records;                            /* (mu) PUT and TOMB records in the file */
    uint64_t live_count;                         /* (mu) entries on live_head */
    uint64_t min_seq, max_seq;                   /* (mu) over its records; UINT64_MAX, 0 if none */
    uint64_t last_access_ns;                     /* (mu) last get hit or write (LRU) */
    bool unsynced;                               /* (I/O thread) written since its last fdatasync */
    /* Records placed in this file whose index effect (the entry on live_head,
     * the tombstone) is not applied yet. Compaction and eviction take only a
     * bucket with none: a record applied after their snapshot would be
     * dropped with the file. Changed by the I/O thread, read under mu. */
    atomic_uint pending_applies;
    crf_entry *live_head; /* (mu) index entries whose record is here */
    crf_entry *tomb_head; /* (mu) tombstone records here (owned) */
} crf_bucket;

/* ---- records queued for the writer --------------------------------------- */

enum crf_rec_kind {
    CRF_RK_PUT,        /* a caller's put */
    CRF_RK_REMOVE,     /* a caller's remove (a TOMB record) */
    CRF_RK_MOVE,       /* compaction: a live record re-appended with its own seq */
    CRF_RK_TOMB_KEEP,  /* eviction/compaction: a tombstone carried forward (own seq) */
    CRF_RK_TOMB_EVICT, /* eviction: a tombstone for a dropped key that shadows an older record */
    CRF_RK_FOOTER,     /* the writer's footer record at seal */
    CRF_RK_RAW,        /* zero padding and the trailer at seal */
    CRF_RK_SEAL,       /* marker: seal the active bucket (crf_seal, crf_close) */
    CRF_RK_SYNC,       /* marker: fdatasync everything written before it (crf_sync) */
    CRF_RK_UNLINK,     /* marker: unlink `target` once everything before it has landed */
};

struct crf_req;

typedef struct crf_piece {
    const uint8_t *p; /* NULL = zeros */
    uint64_t len;
} crf_piece;

typedef struct crf_rec {
    uint8_t kind; /* enum crf_rec_kind */
    uint8_t type; /* CRF_REC_* for data records */
    const uint8_t *key;
    uint32_t key_len;
    const uint8_t *meta;
    uint32_t meta_len;
    const uint8_t *value;
    uint64_t value_len;
    uint64_t value_hash;
    uint64_t seq;        /* given (moves, carried tombstones) or assigned at placement */
    uint8_t entry_flags; /* CRF_ENTRY_* of the entry this record creates */
    bool internal;       /* made by the I/O thread: freed (with `owned`) when done */
    bool counted;        /* placed: counted in bucket->pending_applies until finished */
    int status;          /* set when its bucket broke before it landed */
    struct crf_req *req;
    size_t item;
    crf_bucket *from;  /* MOVE: where the record was; UNLINK: the bucket to unlink */
    uint64_t from_off; /* MOVE: its record offset there; REMOVE: the seq it must have (0 = any) */
    struct crf_rec *group; /* carried/evicted tombstones: the UNLINK marker they must precede */
    void *owned;           /* freed when the record is done (internal records' key copies) */
    /* placement (writer) */
    crf_bucket *bucket;
    uint64_t rec_off, end; /* end: rec_off + extent */
    uint32_t value_rel;
    uint64_t written_gen; /* writer gen when its bytes had landed (sync waits) */
    crf_piece pieces[6];
    int n_pieces;
    uint64_t copied; /* bytes of the pieces already in the ring */
    uint8_t hdr[CRF_RECORD_HEADER_SIZE];
    struct crf_rec *next;
} crf_rec;

/* ---- io_uring operations -------------------------------------------------- */

enum crf_iop_kind { CRF_IOP_POLL = 1, CRF_IOP_WRITE, CRF_IOP_READ, CRF_IOP_FSYNC };

typedef struct crf_iop {
    uint8_t kind;
    bool in_flight;
    bool done;
    int fd;
    uint8_t *buf;
    uint64_t off;
    uint64_t len;  /* bytes requested */
    uint64_t need; /* reads: at least this many must arrive (the rest may be past EOF) */
    uint64_t got;  /* bytes transferred so far */
    int err;       /* -errno, 0 */
    /* writes only: n_iov > 0 makes it one vectored write of iov[0..n_iov) (buf unused);
     * cur_iov is what the kernel is given (the part not transferred yet) */
    int n_iov;
    struct iovec iov[2], cur_iov[2];
    void *owner;
    struct crf_iop *next; /* queue of reads waiting for a submission slot */
} crf_iop;

/** One value read: one or two segments (straight into dst, and a tail block via a bounce). */
typedef struct crf_read {
    crf_bucket *bucket; /* reference held by the requester */
    crf_iop seg[2];
    int n_seg;
    int left;
    int status;
    size_t item; /* the caller's item index */
    struct crf_req *req;
} crf_read;

enum crf_req_kind {
    CRF_REQ_RECORDS, /* puts, removes, moves, markers: recs[0..n) in order */
    CRF_REQ_READ,    /* reads[0..n) */
    CRF_REQ_DOOM,    /* compaction's end: doom `target` (carry its tombstones, unlink) */
    CRF_REQ_STOP,    /* crf_close: seal, drain, exit */
};

typedef struct crf_req {
    uint8_t kind;
    size_t n;
    crf_rec *recs;
    crf_read *reads;
    int *results;
    crf_bucket *target;
    size_t pending; /* items not finished (I/O thread) */
    int status;     /* first failure of the request */
    char msg[200];  /* its message, re-raised on the caller's thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    struct crf_req *next;
} crf_req;

/* ---- the writer (I/O thread) ---------------------------------------------- */

#define CRF_MAX_WRITES 16
#define CRF_DIRECT_MIN (64u << 10) /* smallest value written straight from caller memory */

typedef struct crf_wop {
    crf_iop iop;
    uint64_t end; /* logical end of the data this write carries */
} crf_wop;

typedef struct crf_writer {
    crf_bucket *b; /* the active bucket, NULL when none */
    uint8_t *ring;
    uint64_t ring_size;     /* multiple of CRF_BLOCK */
    uint64_t chunk;         /* largest single write */
    uint64_t reserved;      /* logical end of placed records (next record at this, 8-aligned) */
    uint64_t tail;          /* logical end of bytes copied into the ring */
    uint64_t submitted;     /* bytes below this were handed to writes */
    uint64_t completed;     /* bytes below this have landed (contiguously) */
    uint64_t partial_block; /* block offset of an in-flight write that ended mid-block, or ~0 */
    uint64_t prealloc_end;  /* the active bucket's file is fallocate'd below this (io.c,
                               "Preallocation"); CRF_FIRST_RECORD when nothing is */
    uint64_t rec_cost_max;  /* the largest file bytes one record of the bucket took, with its
                               footer entry: what the keys left may need at most */
    bool preallocated;      /* fallocate was called on the active bucket: trim it at seal */
    bool prealloc_stop;     /* fallocate failed for the active bucket: no more tries on it */
    /* the pending direct segment (io.c, "Zero copy"): file range [direct_off, direct_off +
     * direct_len) written from direct_src; direct_len 0 when none */
    const uint8_t *direct_src;
    uint64_t direct_off, direct_len;
    crf_wop wops[CRF_MAX_WRITES];
    unsigned w_head, w_count; /* FIFO of in-flight writes, in offset order */
    /* the footer of the active bucket, grown as records are placed */
    uint8_t *footer;
    size_t footer_len, footer_cap;
    uint64_t footer_count, min_seq, max_seq;
    uint64_t data_end;
    int seal_state;       /* enum in io.c */
    crf_rec seal_recs[2]; /* FOOTER and RAW */
    uint8_t trailer[CRF_TRAILER_SIZE];
    int broken; /* a write failed: the status; records placed in b fail */
} crf_writer;

struct crf_store {
    crf_config cfg;
    char *path;
    int dir_fd;
    int lock_fd;
    bool direct;
    bool prealloc_refused; /* (I/O thread) fallocate is not supported here: stop asking */
    char io_reason[160];

    pthread_mutex_t mu;
    crf_index index;
    crf_bucket **buckets; /* (mu) sorted by id */
    size_t n_buckets, cap_buckets;
    uint64_t used_bytes; /* (mu) sum of listed buckets' bytes */
    uint64_t live_bytes; /* (mu) */
    uint64_t tombstones; /* (mu) tombstone records listed */
    uint64_t next_seq;   /* (I/O thread after open) */
    uint64_t next_bucket_id;

    /* the I/O thread */
    pthread_t io_thread;
    bool io_started;
    struct io_uring ring;
    bool ring_ready;
    int efd;
    uint64_t efd_buf;
    crf_iop poll_op;
    pthread_mutex_t q_mu;
    crf_req *q_head, *q_tail; /* (q_mu) */
    bool io_idle;             /* (q_mu) the I/O thread sleeps in the ring */
    crf_writer w;
    crf_rec *pend_head, *pend_tail; /* records not yet placed */
    crf_rec *fly_head, *fly_tail;   /* placed records and markers, in order */
    crf_rec *copy_cur;              /* first placed record not fully in the ring */
    uint8_t *hdr_block;             /* aligned block for bucket headers */
    crf_iop *rq_head, *rq_tail;     /* read segments waiting for a slot */
    unsigned reads_in_flight;
    unsigned read_slots;
    crf_iop fsync_op;
    uint64_t fsync_gen;    /* gen the in-flight fsync covers */
    uint64_t written_gen;  /* bumped when writes land */
    uint64_t synced_gen;   /* writes up to this gen are durable */
    unsigned sqes_pending; /* prepared, not yet submitted */
    bool stopping;
    crf_req *stop_req;

    /* compaction */
    pthread_mutex_t compact_mu;
    pthread_t maint_thread;
    atomic_bool maint_started; /* read by the I/O thread (crf_kick_maint) */
    pthread_mutex_t maint_mu;
    pthread_cond_t maint_cv;
    bool maint_kick, maint_stop; /* (maint_mu) */

    crf_bounce_pool bounce;

    /* counters */
    _Atomic uint64_t n_puts, n_put_bytes, n_removes, n_gets, n_get_hits, n_get_bytes;
    _Atomic uint64_t n_checksum_failures, n_evicted_buckets, n_evicted_keys;
    _Atomic uint64_t n_compactions, n_compacted_records, n_submits, n_sqes, n_fdatasyncs;
    _Atomic uint64_t n_direct_write_bytes, n_coalesced_writes, n_fallocates, n_prealloc_trims;
    uint64_t rec_records, rec_torn_bytes, rec_scanned, rec_dropped;
};

/* ---- store.c -------------------------------------------------------------- */

void crf_bucket_ref(crf_bucket *b);
void crf_bucket_unref(crf_bucket *b);
/** Insert into the table (mu held). 0 or CR_ERR_NO_MEMORY. */
int crf_table_add(crf_store *s, crf_bucket *b);
/** Remove from the table (mu held); the table's reference passes to the caller. */
void crf_table_remove(crf_store *s, crf_bucket *b);
/** "crf-<id>.bkt" into name[32]. */
void crf_bucket_name(uint64_t id, char *name);
/** Is this thread the store's I/O thread? */
bool crf_on_io_thread(const crf_store *s);
/** Submit a request to the I/O thread and wait for it; 0 or CR_ERR_SHUTDOWN. */
int crf_submit_wait(crf_store *s, crf_req *r);
void crf_req_init(crf_req *r, uint8_t kind);
void crf_req_fini(crf_req *r);
/** Record the first failure of a request (I/O thread). */
void crf_req_fail(crf_req *r, int status, const char *fmt, ...) CRB_PRINTF(3, 4);
/** Wake the maintenance thread (a bucket crossed the dead ratio). */
void crf_kick_maint(crf_store *s);
/** Should this closed bucket be compacted by ratio? (mu held) */
bool crf_bucket_wants_compaction(const crf_store *s, const crf_bucket *b);
/** Map an errno from a write to CR_ERR_DISK_FULL or CR_ERR_DISK_IO. */
int crf_errno_status(int err);

/* ---- entries and buckets (mu held) ---------------------------------------- */

void crf_bucket_link_live(crf_bucket *b, crf_entry *e);
void crf_bucket_unlink_live(crf_bucket *b, crf_entry *e);
void crf_bucket_link_tomb(crf_bucket *b, crf_entry *e);
void crf_bucket_unlink_tomb(crf_bucket *b, crf_entry *e);
/** Account a record of seq into b's seq range. */
void crf_bucket_note_seq(crf_bucket *b, uint64_t seq);
/** Does some listed bucket other than except hold records older than seq? */
bool crf_tomb_needed(const crf_store *s, const crf_bucket *except, uint64_t seq);
/** Drop a live entry from the index (it becomes dead in its bucket) and free it. */
void crf_drop_entry(crf_store *s, crf_entry *e);

/* ---- io.c ------------------------------------------------------------------ */

/** Create the ring and start the I/O thread. */
int crf_io_start(crf_store *s);
/** Seal, drain and stop the I/O thread (crf_close). */
void crf_io_stop(crf_store *s);

/* ---- recover.c ------------------------------------------------------------- */

/** Read every bucket file of the directory into the table and the index. */
int crf_recover(crf_store *s);

/* ---- compact.c ------------------------------------------------------------- */

int crf_compact_start(crf_store *s);
void crf_compact_stop(crf_store *s);

#endif
