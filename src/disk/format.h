/*
 * format.h - the on-disk layout of the disk tier's bucket files, with one
 * bounds-checked decoder per structure (fuzzed by fuzz/fuzz_disk_format.c).
 *
 * A bucket file (crf-<16 hex digits of the bucket id>.bkt) is:
 *
 *   [0, 4096)          bucket header (CRF_BUCKET_HEADER_SIZE meaningful bytes,
 *                      zeros after), written and completed before any record
 *   [4096, data_end)   records, back to back, each starting 8-byte aligned
 *   sealed buckets only:
 *   FOOTER record      a record whose value lists every record of the bucket
 *   zeros, trailer     the trailer is the last CRF_TRAILER_SIZE bytes of the
 *                      file; a sealed file's length is a multiple of 4096
 *
 * A record is a 48-byte header, the key, the metadata, `value_gap` zero
 * bytes and the value. Values of CRF_ALIGNED_VALUE_MIN bytes or more start
 * at a 4096-aligned file offset (value_gap pads up to it), so a get can read
 * them straight into the caller's memory with O_DIRECT; smaller values are
 * packed densely (value_gap 0). The next record starts at the end rounded up
 * to 8.
 *
 * Integrity: every header carries XXH3-64 of its first 40 bytes, key and
 * metadata, seeded with the bucket's random salt and the record's file
 * offset, so a header is valid only at its own position in its own bucket
 * (a value that happens to contain a copy of some record, or stale bytes of
 * an older bucket, never parses as a record). The value carries an unseeded
 * XXH3-64 of its bytes (computable before the record has an offset, and kept
 * in the in-memory index so a get verifies what it read). The bucket header
 * and the trailer carry their own XXH3-64.
 *
 * All integers are little-endian. Decoders never read outside [buf, buf+len),
 * validate every length against the limits below and against the file's
 * length (overflow-safe), and write their output only on success; a failure
 * is CR_ERR_DISK_CORRUPT with a message naming the field.
 *
 * Threading: every function here is pure; any thread.
 */
#ifndef CRESCENT_DISK_FORMAT_H
#define CRESCENT_DISK_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "crescent/status.h"

#define CRF_BLOCK              4096u /* layout alignment: header block, aligned values */
#define CRF_RECORD_ALIGN       8u    /* records start at multiples of this */
#define CRF_FORMAT_VERSION     1u
#define CRF_BUCKET_HEADER_SIZE 64u
#define CRF_RECORD_HEADER_SIZE 48u
#define CRF_TRAILER_SIZE       64u
#define CRF_FOOTER_ENTRY_SIZE  48u   /* fixed part; key and metadata follow */
#define CRF_MAX_KEY            4096u /* = CR_STORE_MAX_KEY */
#define CRF_MAX_META           256u  /* caller metadata per record */
#define CRF_MAX_VALUE          (1ull << 40)
#define CRF_ALIGNED_VALUE_MIN  (64u * 1024u) /* values this long start block-aligned */
#define CRF_MAX_BUCKET_BYTES   (1ull << 42)  /* a bucket file is never longer */
#define CRF_MAX_RECORD_PREFIX  (CRF_RECORD_HEADER_SIZE + CRF_MAX_KEY + CRF_MAX_META)
#define CRF_FIRST_RECORD       CRF_BLOCK

/** Record types. */
enum crf_record_type {
    CRF_REC_PUT = 1,    /* key -> value (and metadata) */
    CRF_REC_TOMB = 2,   /* key removed: deletes records of the key with a lower seq */
    CRF_REC_FOOTER = 3, /* sealed bucket's table of contents (no key) */
};

/** Record flags. */
#define CRF_RECF_ALIGNED 0x01u /* value starts at a CRF_BLOCK-aligned file offset */

typedef struct crf_bucket_header {
    uint64_t bucket_id;
    uint64_t salt;       /* random, seeds the record header hashes */
    uint64_t seq_floor;  /* the store's next seq when the bucket was created: keeps the
                            counter monotonic across restarts even for an empty bucket */
    uint64_t created_ns; /* CLOCK_REALTIME at creation (diagnostics) */
} crf_bucket_header;

typedef struct crf_record_header {
    uint8_t type;  /* enum crf_record_type */
    uint8_t flags; /* CRF_RECF_* */
    uint16_t meta_len;
    uint32_t key_len;
    uint32_t value_gap;
    uint64_t value_len;
    uint64_t seq;
    uint64_t value_hash;
} crf_record_header;

typedef struct crf_trailer {
    uint64_t footer_off;       /* file offset of the FOOTER record */
    uint64_t record_count;     /* entries in the footer */
    uint64_t data_end;         /* end of the last data record (<= footer_off) */
    uint64_t min_seq, max_seq; /* over the footer's entries; 0,0 when empty */
} crf_trailer;

/** One footer entry: where a record is and what the index needs of it. */
typedef struct crf_footer_entry {
    uint64_t rec_off;
    uint64_t seq;
    uint64_t value_len;
    uint64_t value_hash;
    uint32_t key_len;
    uint32_t value_gap;
    uint16_t meta_len;
    uint8_t type;        /* CRF_REC_PUT or CRF_REC_TOMB */
    uint8_t flags;       /* CRF_RECF_* */
    const uint8_t *key;  /* points into the decoded buffer */
    const uint8_t *meta; /* points into the decoded buffer (NULL when meta_len is 0) */
} crf_footer_entry;

/* ---- sizes and placement ----------------------------------------------- */

static inline uint64_t crf_round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

static inline uint64_t crf_round_down(uint64_t v, uint64_t a)
{
    return v / a * a;
}

/**
 * The value_gap a record of this shape gets when its header starts at
 * rec_off: 0 for short values, else the padding that puts the value on the
 * next CRF_BLOCK boundary. Sets *flags to the matching CRF_RECF_* bits.
 */
uint32_t crf_record_gap(uint64_t rec_off, uint32_t key_len, uint32_t meta_len, uint64_t value_len,
                        uint8_t *flags);

/** Offset of the value from the record start. */
static inline uint64_t crf_record_value_rel(const crf_record_header *h)
{
    return CRF_RECORD_HEADER_SIZE + (uint64_t)h->key_len + h->meta_len + h->value_gap;
}

/** Bytes from the record start to the end of its value. */
static inline uint64_t crf_record_extent(const crf_record_header *h)
{
    return crf_record_value_rel(h) + h->value_len;
}

/* ---- encoders (pure; the caller sizes the output) ---------------------- */

/** Encode a bucket header into out[CRF_BUCKET_HEADER_SIZE]. */
void crf_bucket_header_encode(const crf_bucket_header *h, uint8_t *out);

/**
 * Encode a record header into out[CRF_RECORD_HEADER_SIZE] for a record at
 * rec_off in a bucket with `salt`; key and meta are the bytes that follow it
 * (hashed into the header's checksum).
 */
void crf_record_header_encode(const crf_record_header *h, const void *key, const void *meta,
                              uint64_t salt, uint64_t rec_off, uint8_t *out);

/** Encode a trailer into out[CRF_TRAILER_SIZE]. */
void crf_trailer_encode(const crf_trailer *t, uint64_t salt, uint8_t *out);

/** Bytes one footer entry takes. */
static inline size_t crf_footer_entry_size(uint32_t key_len, uint32_t meta_len)
{
    return CRF_FOOTER_ENTRY_SIZE + key_len + meta_len;
}

/** Encode one footer entry at out (crf_footer_entry_size bytes). */
void crf_footer_entry_encode(const crf_footer_entry *e, uint8_t *out);

/* ---- decoders (bounds-checked; output written only on success) --------- */

/**
 * Decode and verify a bucket header from buf[0..len). 0, or
 * CR_ERR_DISK_CORRUPT (short, wrong magic or version, bad checksum).
 */
int crf_bucket_header_decode(const uint8_t *buf, size_t len, crf_bucket_header *out);

/**
 * Decode and verify the record header at file offset rec_off of a bucket
 * with `salt` whose file is file_len bytes long; buf holds the file's bytes
 * from rec_off on, len of them (the caller passes at least
 * min(CRF_MAX_RECORD_PREFIX, file_len - rec_off) bytes). Checks the magic,
 * type, lengths against the limits, the gap against the alignment rule, that
 * the whole record lies inside the file, and the header checksum. On success
 * *out is the header and *key / *meta point into buf (meta NULL when empty).
 */
int crf_record_header_decode(const uint8_t *buf, size_t len, uint64_t rec_off, uint64_t salt,
                             uint64_t file_len, crf_record_header *out, const uint8_t **key,
                             const uint8_t **meta);

/**
 * Decode and verify a trailer from buf[0..len) (the file's last
 * CRF_TRAILER_SIZE bytes) of a file_len-byte bucket with `salt`: checksum,
 * data_end <= footer_off < file_len, footer after the first record slot.
 */
int crf_trailer_decode(const uint8_t *buf, size_t len, uint64_t salt, uint64_t file_len,
                       crf_trailer *out);

/**
 * Decode the footer entry at buf[*pos..len) and advance *pos past it. The
 * entry must describe a PUT or TOMB record lying inside [CRF_FIRST_RECORD,
 * data_end) with lengths inside the limits and a gap that follows the
 * alignment rule. key/meta of *out point into buf.
 */
int crf_footer_entry_decode(const uint8_t *buf, size_t len, size_t *pos, uint64_t data_end,
                            crf_footer_entry *out);

/* ---- hashes ------------------------------------------------------------- */

/** XXH3-64 of a value (unseeded): what records store and gets verify. */
uint64_t crf_value_hash(const void *data, size_t len);

/** XXH3-64 of a key: the index's hash. */
uint64_t crf_key_hash(const void *key, size_t len);

#endif
