/*
 * disk.h - the disk tier's object store (crf_): key -> value records in
 * append-only bucket files under one directory, an in-memory index rebuilt
 * on open, io_uring I/O (O_DIRECT where the filesystem allows it), a
 * capacity limit with its own eviction, and compaction of mostly-dead
 * buckets. docs/disk-tier.md describes the format, durability, recovery and
 * how the store client and the master use it.
 *
 * Semantics
 *   - crf_put stores (key, value, metadata); a later put of the same key
 *     replaces it (every record carries a store-wide sequence number; the
 *     highest wins, on reopen too). crf_remove writes a tombstone.
 *   - A put or remove is visible to gets once it returns (its record is
 *     written); a get never returns bytes that are not exactly the value of a
 *     completed put of that key: values are checksummed (XXH3-64) and a
 *     mismatch is CR_CHECKSUM_MISMATCH, never the bytes.
 *   - Durability: see crf_sync_policy. After kill -9 of the process, every
 *     put and remove that returned is recovered by the next crf_open of the
 *     same directory (whatever the policy: the kernel has the bytes); with
 *     CRF_SYNC_PUT that also holds across power loss. A record whose bytes
 *     are incomplete or whose checksum fails is never recovered; a removed
 *     or overwritten key never comes back (tombstones and sequence numbers
 *     are persisted and kept as long as an older record could resurface).
 *   - Capacity: bucket file bytes never exceed capacity_bytes by more than
 *     one record's tombstones; a put that does not fit evicts whole buckets
 *     (least recently read first, or oldest first) and fails with
 *     CR_ERR_DISK_FULL when nothing can be evicted. The filesystem's own
 *     ENOSPC / EFBIG / EDQUOT is CR_ERR_DISK_FULL too.
 *
 * Threading: a crf_store is used by any number of threads at once. Each
 * call blocks its caller until done; the I/O itself runs on the store's one
 * I/O thread, which batches what every caller submitted into io_uring
 * submissions (a batch call's records and reads go in one submission). CPU
 * work scales with the callers: checksums of puts and gets, and the copies
 * out of bounce buffers, run on the calling thread. A background thread
 * compacts buckets (config.background_compaction). No call may be made from
 * inside the on_evict callback (it runs on the I/O thread: such a call fails
 * with CR_INVALID_PARAMS instead of deadlocking).
 *
 * Errors: 0 / non-negative on success, a negative cr_status otherwise, with
 * cr_last_error_message() naming what failed. Outputs are written only on
 * success.
 */
#ifndef CRESCENT_DISK_DISK_H
#define CRESCENT_DISK_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crescent/status.h"
#include "disk/format.h"

typedef struct crf_store crf_store;

/** How bucket files are read and written. */
typedef enum crf_io_mode {
    CRF_IO_AUTO = 0,     /* O_DIRECT if the filesystem takes it (probed at open), else buffered */
    CRF_IO_DIRECT = 1,   /* O_DIRECT or crf_open fails with CR_ERR_DISK_DIRECT_IO */
    CRF_IO_BUFFERED = 2, /* through the page cache */
} crf_io_mode;

/**
 * When written bytes are made durable with fdatasync. A put always returns
 * after its record is written (the kernel has it: it survives the process
 * being killed); what differs is what survives power loss or a kernel crash:
 *   NONE  nothing is promised; the kernel writes back when it likes.
 *   SEAL  (default) a bucket is fdatasync'ed when it is sealed (full, or at
 *         crf_close), before a compacted bucket's file is unlinked, and the
 *         directory is fsync'ed after bucket files are created or removed;
 *         crf_sync() makes everything written so far durable.
 *   PUT   as SEAL, and a put / remove returns only after an fdatasync that
 *         covers its record (one fdatasync per I/O round: group commit).
 */
typedef enum crf_sync_policy {
    CRF_SYNC_NONE = 0,
    CRF_SYNC_SEAL = 1,
    CRF_SYNC_PUT = 2,
} crf_sync_policy;

/** Which buckets go first when the capacity limit needs room. */
typedef enum crf_eviction {
    CRF_EVICT_NONE = 0, /* never: a put that does not fit fails with CR_ERR_DISK_FULL */
    CRF_EVICT_LRU = 1,  /* (default) the bucket least recently read (or written) */
    CRF_EVICT_FIFO = 2, /* the oldest bucket */
} crf_eviction;

/** What the store says about one key (crf_stat, crf_for_each, on_evict). */
typedef struct crf_key_info {
    const uint8_t *key; /* borrowed: valid for the callback / until the next crf_stat */
    size_t key_len;
    uint64_t value_len;
    uint64_t seq; /* the record's sequence number (higher = newer) */
    uint8_t meta[CRF_MAX_META];
    size_t meta_len;
} crf_key_info;

/**
 * Called on the I/O thread after a bucket was evicted for room, with the
 * keys it held (no longer readable). Must not call into the store and
 * should not block; queue work for another thread instead.
 */
typedef void (*crf_evict_fn)(void *arg, const crf_key_info *keys, size_t n);

/** Called by crf_for_each for every key; a non-zero return stops the walk and is returned. */
typedef int (*crf_visit_fn)(void *arg, const crf_key_info *info);

/** Configuration; crf_config_init fills the defaults. Mooncake's variable names in brackets. */
typedef struct crf_config {
    const char *path;             /* directory [MOONCAKE_OFFLOAD_FILE_STORAGE_PATH]; created if
                                     missing (not its parents); borrowed for crf_open */
    uint64_t bucket_size_limit;   /* record bytes per bucket before it is sealed; default 256 MiB
                                     [MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES] */
    uint32_t bucket_keys_limit;   /* records per bucket before it is sealed; default 500
                                     [MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT] */
    uint64_t capacity_bytes;      /* bucket file bytes at most; 0 = 90% of the filesystem's size
                                     [MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE, else
                                     MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES] */
    uint64_t max_keys;            /* live keys at most; default 10,000,000
                                     [MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT] */
    crf_eviction eviction;        /* default LRU [MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY] */
    crf_sync_policy sync;         /* default SEAL [CRESCENT_OFFLOAD_SYNC none|seal|put] */
    crf_io_mode io_mode;          /* default AUTO [CRESCENT_OFFLOAD_IO auto|direct|buffered] */
    double compaction_dead_ratio; /* a sealed bucket whose dead record bytes reach this share
                                     of its file is compacted; default 0.5; 0 = never
                                     [CRESCENT_OFFLOAD_COMPACTION_DEAD_RATIO] */
    bool background_compaction;   /* compact from a background thread; default true */
    uint32_t queue_depth;         /* io_uring submission queue entries; default 64 */
    uint64_t write_buffer_bytes;  /* aligned staging ring for appends; default 8 MiB */
    uint64_t prealloc_bytes;      /* the active bucket file is fallocate'd up to this far ahead
                                     of its write position (never past its size limit, nor past
                                     the capacity left), and trimmed when sealed; default
                                     256 MiB; 0 = never [CRESCENT_OFFLOAD_PREALLOC] */
    crf_evict_fn on_evict;        /* optional */
    void *on_evict_arg;
} crf_config;

/** Defaults (see crf_config). Never fails. Pure; any thread. */
void crf_config_init(crf_config *cfg);

/**
 * Overlay the environment variables named in crf_config onto cfg (unset
 * ones leave the field alone). A value that does not parse is
 * CR_ERR_INVALID_CONFIG naming the variable and the text; cfg is then
 * unchanged. MOONCAKE_OFFLOAD_FILE_STORAGE_PATH is pointed to, not copied.
 * Any thread (reads the environment; do not setenv concurrently).
 */
int crf_config_from_env(crf_config *cfg);

/**
 * Open (or create) the store in cfg->path: take the directory's lock (a
 * second opener gets CR_ERR_DISK_LOCKED), probe O_DIRECT, read every bucket
 * (sealed ones by their footer, others record by record: a torn tail is cut
 * off and the bucket sealed), rebuild the index and start the threads.
 * *out on success; close it with crf_close. cfg is copied (path too).
 * Any thread; blocks for the directory's size.
 */
int crf_open(const crf_config *cfg, crf_store **out);

/**
 * Finish every call in flight, seal the active bucket, stop the threads,
 * release the lock and free the store. NULL is ignored. No call may run on
 * the store concurrently with or after crf_close. Blocks until drained.
 */
void crf_close(crf_store *s);

/** One put of a batch. Borrowed for the call. */
typedef struct crf_put_item {
    const void *key;
    size_t key_len; /* 1..CRF_MAX_KEY */
    const void *value;
    uint64_t value_len; /* 0..CRF_MAX_VALUE */
    const void *meta;
    size_t meta_len; /* 0..CRF_MAX_META */
} crf_put_item;

/** Store one value (see crf_put_batch). Any thread but the I/O thread; blocks. */
int crf_put(crf_store *s, const void *key, size_t key_len, const void *value, uint64_t value_len,
            const void *meta, size_t meta_len);

/**
 * Store n values: one I/O-thread round, records appended in order (a key
 * repeated in the batch ends with its last value). results[i] is 0 or the
 * item's error (CR_ERR_DISK_FULL, CR_ERR_DISK_IO, CR_INVALID_KEY,
 * CR_INVALID_PARAMS). Returns 0 when the call ran (even if items failed),
 * negative when it could not run at all (results then unwritten).
 * Items are borrowed for the call. Any number of threads at once, not the
 * I/O thread (on_evict); blocks until every record has landed (and, under
 * CRF_SYNC_PUT, is durable).
 */
int crf_put_batch(crf_store *s, const crf_put_item *items, size_t n, int *results);

/** One get of a batch: the value lands in dst[0..value_len). */
typedef struct crf_get_item {
    const void *key;
    size_t key_len;
    void *dst; /* any alignment; CRF_BLOCK-aligned memory is read into directly */
    uint64_t dst_len;
} crf_get_item;

/**
 * Read one value into dst. Returns its length (>= 0), or CR_OBJECT_NOT_FOUND,
 * CR_BUFFER_OVERFLOW (dst_len too short; nothing written), CR_CHECKSUM_MISMATCH
 * (the bytes read do not match the record: dst holds garbage, the key is
 * dropped from the index), CR_ERR_DISK_IO. dst is written by the kernel
 * and the calling thread only while the call runs. Any thread but the I/O
 * thread; blocks.
 */
int64_t crf_get(crf_store *s, const void *key, size_t key_len, void *dst, uint64_t dst_len);

/**
 * Read n values; results[i] as crf_get returns. All reads go to the I/O
 * thread in one submission. Returns 0 when the call ran. Threading as
 * crf_get.
 */
int crf_get_batch(crf_store *s, const crf_get_item *items, size_t n, int64_t *results);

/** Remove a key: 0, or CR_OBJECT_NOT_FOUND. Durable as a put is. Threading as crf_put. */
int crf_remove(crf_store *s, const void *key, size_t key_len);

/**
 * Describe a key without reading its value. *out's key points to a copy
 * owned by the calling thread, valid until its next crf_stat.
 * 0 or CR_OBJECT_NOT_FOUND. Any thread (index lock only; no I/O).
 */
int crf_stat(crf_store *s, const void *key, size_t key_len, crf_key_info *out);

/**
 * Call fn for every live key (in no particular order) while holding the
 * index lock: fn must not call into the store. Returns 0, or fn's first
 * non-zero return. Any thread; blocks writers' index updates meanwhile.
 */
int crf_for_each(crf_store *s, crf_visit_fn fn, void *arg);

/**
 * Compact up to max_buckets sealed buckets whose dead share reaches
 * compaction_dead_ratio (or, with force, any sealed bucket holding a dead
 * record), worst first: live records are re-appended, then the old file is
 * unlinked. Gets running meanwhile return the right bytes or (for keys
 * removed meanwhile) a clean miss. Returns the number of buckets compacted.
 * Any thread but the I/O thread; one compaction runs at a time (others wait).
 */
int crf_compact(crf_store *s, uint32_t max_buckets, bool force);

/** Seal the active bucket now (write its footer); the next put opens a new one.
 *  Threading as crf_put. */
int crf_seal(crf_store *s);

/** Make every record written so far durable (fdatasync of every bucket written since its
 *  last one, and of the directory). Threading as crf_put. */
int crf_sync(crf_store *s);

/** Counters and state; a snapshot, any thread. */
typedef struct crf_stats {
    uint64_t keys;       /* live keys */
    uint64_t live_bytes; /* record bytes of live keys */
    uint64_t file_bytes; /* bytes of all bucket files (what capacity limits) */
    uint64_t capacity_bytes;
    uint64_t buckets;
    uint64_t puts, put_bytes, removes;
    uint64_t gets, get_hits, get_bytes;
    uint64_t checksum_failures;
    uint64_t evicted_buckets, evicted_keys;
    uint64_t compactions, compacted_records;
    uint64_t tombstones; /* tombstone records on disk */
    uint64_t submits;    /* io_uring_submit calls that submitted something */
    uint64_t sqes;       /* requests submitted */
    uint64_t fdatasyncs;
    uint64_t direct_write_bytes; /* value bytes written straight from callers' memory */
    uint64_t coalesced_writes;   /* writes that carried a record's header and its direct value
                                    (one vectored write instead of two) */
    uint64_t fallocates;         /* fallocate calls that preallocated bucket space */
    uint64_t prealloc_trims;     /* bucket files cut back to their data after preallocation */
    /* recovery, from crf_open */
    uint64_t recovered_records;         /* PUT and TOMB records found valid */
    uint64_t recovered_torn_bytes;      /* bytes of unsealed buckets that held no valid record
                                           (zero blocks after the last record, such as
                                           preallocated space, are not counted) */
    uint64_t recovered_scanned_buckets; /* unsealed buckets read record by record */
    uint64_t recovered_dropped_buckets; /* files without a valid bucket header, removed */
    bool direct_io;
    char io_reason[160]; /* why O_DIRECT is or is not used */
} crf_stats;

/** Fill *out (zeros for a NULL store). Any thread. */
void crf_get_stats(crf_store *s, crf_stats *out);

#endif
