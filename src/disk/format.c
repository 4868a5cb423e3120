/*
 * format.c - encoders and bounds-checked decoders of the bucket file layout
 * (format.h). Every decoder reads fixed little-endian fields from a buffer
 * whose length it has checked first, validates each length against the
 * format's limits and the file's length with overflow-safe arithmetic, and
 * verifies the checksum before it writes its output.
 */
#include "disk/format.h"

#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "base/error.h"

static const uint8_t bucket_magic[8] = {'C', 'R', 'F', 'B', 'U', 'C', 'K', '1'};
static const uint8_t trailer_magic[8] = {'C', 'R', 'F', 'T', 'R', 'A', 'I', 'L'};
static const uint8_t record_magic[4] = {'C', 'R', 'F', 'R'};

/* Golden-ratio multiplier: spreads record offsets over the seed space. */
#define OFFSET_MIX 0x9E3779B97F4A7C15ull

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

uint64_t crf_value_hash(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

uint64_t crf_key_hash(const void *key, size_t len)
{
    return XXH3_64bits(key, len);
}

uint32_t crf_record_gap(uint64_t rec_off, uint32_t key_len, uint32_t meta_len, uint64_t value_len,
                        uint8_t *flags)
{
    if (value_len < CRF_ALIGNED_VALUE_MIN) {
        *flags = 0;
        return 0;
    }
    uint64_t value_at = rec_off + CRF_RECORD_HEADER_SIZE + key_len + meta_len;
    *flags = CRF_RECF_ALIGNED;
    return (uint32_t)(crf_round_up(value_at, CRF_BLOCK) - value_at);
}

/* ---- bucket header -------------------------------------------------------
 *  0 magic[8]  8 u32 version  12 u32 header size  16 u64 bucket id
 * 24 u64 salt  32 u64 seq_floor  40 u64 created_ns  48 u32 block  52 u32 0
 * 56 u64 XXH3(bytes 0..56)
 */

void crf_bucket_header_encode(const crf_bucket_header *h, uint8_t *out)
{
    memset(out, 0, CRF_BUCKET_HEADER_SIZE);
    memcpy(out, bucket_magic, 8);
    put32(out + 8, CRF_FORMAT_VERSION);
    put32(out + 12, CRF_BUCKET_HEADER_SIZE);
    put64(out + 16, h->bucket_id);
    put64(out + 24, h->salt);
    put64(out + 32, h->seq_floor);
    put64(out + 40, h->created_ns);
    put32(out + 48, CRF_BLOCK);
    put64(out + 56, XXH3_64bits(out, 56));
}

int crf_bucket_header_decode(const uint8_t *buf, size_t len, crf_bucket_header *out)
{
    if (buf == NULL || len < CRF_BUCKET_HEADER_SIZE)
        return crb_error(CR_ERR_DISK_CORRUPT, "bucket header: %zu bytes, need %u", len,
                         CRF_BUCKET_HEADER_SIZE);
    if (memcmp(buf, bucket_magic, 8) != 0)
        return crb_error(CR_ERR_DISK_CORRUPT, "bucket header: bad magic");
    if (get32(buf + 8) != CRF_FORMAT_VERSION)
        return crb_error(CR_ERR_DISK_CORRUPT, "bucket header: format version %u, expected %u",
                         get32(buf + 8), CRF_FORMAT_VERSION);
    if (get32(buf + 12) != CRF_BUCKET_HEADER_SIZE || get32(buf + 48) != CRF_BLOCK ||
        get32(buf + 52) != 0)
        return crb_error(CR_ERR_DISK_CORRUPT, "bucket header: unexpected size, block or flags");
    if (get64(buf + 56) != XXH3_64bits(buf, 56))
        return crb_error(CR_ERR_DISK_CORRUPT, "bucket header: checksum mismatch");
    out->bucket_id = get64(buf + 16);
    out->salt = get64(buf + 24);
    out->seq_floor = get64(buf + 32);
    out->created_ns = get64(buf + 40);
    return 0;
}

/* ---- record header -------------------------------------------------------
 *  0 magic[4]  4 u8 type  5 u8 flags  6 u16 meta_len  8 u32 key_len
 * 12 u32 value_gap  16 u64 value_len  24 u64 seq  32 u64 value_hash
 * 40 u64 XXH3(bytes 0..40 | key | meta; seed salt ^ rec_off * OFFSET_MIX)
 */

static uint64_t record_header_hash(const uint8_t *h40, const void *key, uint32_t key_len,
                                   const void *meta, uint32_t meta_len, uint64_t salt,
                                   uint64_t rec_off)
{
    XXH3_state_t st;
    XXH3_64bits_reset_withSeed(&st, salt ^ (rec_off * OFFSET_MIX));
    XXH3_64bits_update(&st, h40, 40);
    if (key_len > 0)
        XXH3_64bits_update(&st, key, key_len);
    if (meta_len > 0)
        XXH3_64bits_update(&st, meta, meta_len);
    return XXH3_64bits_digest(&st);
}

void crf_record_header_encode(const crf_record_header *h, const void *key, const void *meta,
                              uint64_t salt, uint64_t rec_off, uint8_t *out)
{
    memcpy(out, record_magic, 4);
    out[4] = h->type;
    out[5] = h->flags;
    put16(out + 6, h->meta_len);
    put32(out + 8, h->key_len);
    put32(out + 12, h->value_gap);
    put64(out + 16, h->value_len);
    put64(out + 24, h->seq);
    put64(out + 32, h->value_hash);
    put64(out + 40, record_header_hash(out, key, h->key_len, meta, h->meta_len, salt, rec_off));
}

/*
 * The field checks shared by record headers and footer entries: type,
 * lengths, the gap rule for a record starting at rec_off, and that the
 * record lies inside [CRF_FIRST_RECORD, limit). `what` names the structure.
 */
static int check_record_shape(const char *what, const crf_record_header *h, uint64_t rec_off,
                              uint64_t limit)
{
    if (h->type != CRF_REC_PUT && h->type != CRF_REC_TOMB && h->type != CRF_REC_FOOTER)
        return crb_error(CR_ERR_DISK_CORRUPT, "%s at %llu: unknown type %u", what,
                         (unsigned long long)rec_off, h->type);
    if ((h->flags & ~CRF_RECF_ALIGNED) != 0)
        return crb_error(CR_ERR_DISK_CORRUPT, "%s at %llu: unknown flags 0x%x", what,
                         (unsigned long long)rec_off, h->flags);
    if (h->type == CRF_REC_FOOTER ? h->key_len != 0 : (h->key_len == 0 || h->key_len > CRF_MAX_KEY))
        return crb_error(CR_ERR_DISK_CORRUPT, "%s at %llu: key length %u", what,
                         (unsigned long long)rec_off, h->key_len);
    if (h->meta_len > CRF_MAX_META || (h->type == CRF_REC_FOOTER && h->meta_len != 0))
        return crb_error(CR_ERR_DISK_CORRUPT, "%s at %llu: metadata length %u", what,
                         (unsigned long long)rec_off, h->meta_len);
    if (h->value_len > CRF_MAX_VALUE || (h->type == CRF_REC_TOMB && h->value_len != 0))
        return crb_error(CR_ERR_DISK_CORRUPT, "%s at %llu: value length %llu", what,
                         (unsigned long long)rec_off, (unsigned long long)h->value_len);
    if (rec_off < CRF_FIRST_RECORD || rec_off % CRF_RECORD_ALIGN != 0 ||
        rec_off > CRF_MAX_BUCKET_BYTES)
        return crb_error(CR_ERR_DISK_CORRUPT, "%s: misplaced record offset %llu", what,
                         (unsigned long long)rec_off);
    uint8_t want_flags;
    uint32_t want_gap = crf_record_gap(rec_off, h->key_len, h->meta_len, h->value_len, &want_flags);
    if (h->value_gap != want_gap || h->flags != want_flags)
        return crb_error(CR_ERR_DISK_CORRUPT, "%s at %llu: gap %u flags 0x%x, expected %u 0x%x",
                         what, (unsigned long long)rec_off, h->value_gap, h->flags, want_gap,
                         want_flags);
    /* All terms are bounded (offset <= 2^42, value <= 2^40, rest < 2^14): no overflow. */
    uint64_t end = rec_off + crf_record_extent(h);
    if (end > limit)
        return crb_error(CR_ERR_DISK_CORRUPT, "%s at %llu: ends at %llu, past %llu", what,
                         (unsigned long long)rec_off, (unsigned long long)end,
                         (unsigned long long)limit);
    return 0;
}

int crf_record_header_decode(const uint8_t *buf, size_t len, uint64_t rec_off, uint64_t salt,
                             uint64_t file_len, crf_record_header *out, const uint8_t **key,
                             const uint8_t **meta)
{
    if (buf == NULL || len < CRF_RECORD_HEADER_SIZE)
        return crb_error(CR_ERR_DISK_CORRUPT, "record at %llu: %zu bytes, need %u",
                         (unsigned long long)rec_off, len, CRF_RECORD_HEADER_SIZE);
    if (memcmp(buf, record_magic, 4) != 0)
        return crb_error(CR_ERR_DISK_CORRUPT, "record at %llu: bad magic",
                         (unsigned long long)rec_off);
    crf_record_header h;
    h.type = buf[4];
    h.flags = buf[5];
    h.meta_len = get16(buf + 6);
    h.key_len = get32(buf + 8);
    h.value_gap = get32(buf + 12);
    h.value_len = get64(buf + 16);
    h.seq = get64(buf + 24);
    h.value_hash = get64(buf + 32);
    int rc = check_record_shape("record", &h, rec_off, file_len);
    if (rc != 0)
        return rc;
    size_t prefix = CRF_RECORD_HEADER_SIZE + (size_t)h.key_len + h.meta_len;
    if (len < prefix)
        return crb_error(CR_ERR_DISK_CORRUPT, "record at %llu: %zu bytes, key and meta need %zu",
                         (unsigned long long)rec_off, len, prefix);
    const uint8_t *k = buf + CRF_RECORD_HEADER_SIZE;
    const uint8_t *m = h.meta_len > 0 ? k + h.key_len : NULL;
    if (get64(buf + 40) != record_header_hash(buf, k, h.key_len, m, h.meta_len, salt, rec_off))
        return crb_error(CR_ERR_DISK_CORRUPT, "record at %llu: header checksum mismatch",
                         (unsigned long long)rec_off);
    *out = h;
    *key = k;
    *meta = m;
    return 0;
}

/* ---- trailer -------------------------------------------------------------
 *  0 magic[8]  8 u64 footer_off  16 u64 record_count  24 u64 data_end
 * 32 u64 min_seq  40 u64 max_seq  48 u64 0  56 u64 XXH3(bytes 0..56; seed salt)
 */

void crf_trailer_encode(const crf_trailer *t, uint64_t salt, uint8_t *out)
{
    memcpy(out, trailer_magic, 8);
    put64(out + 8, t->footer_off);
    put64(out + 16, t->record_count);
    put64(out + 24, t->data_end);
    put64(out + 32, t->min_seq);
    put64(out + 40, t->max_seq);
    put64(out + 48, 0);
    put64(out + 56, XXH3_64bits_withSeed(out, 56, salt));
}

int crf_trailer_decode(const uint8_t *buf, size_t len, uint64_t salt, uint64_t file_len,
                       crf_trailer *out)
{
    if (buf == NULL || len < CRF_TRAILER_SIZE)
        return crb_error(CR_ERR_DISK_CORRUPT, "trailer: %zu bytes, need %u", len, CRF_TRAILER_SIZE);
    if (memcmp(buf, trailer_magic, 8) != 0)
        return crb_error(CR_ERR_DISK_CORRUPT, "trailer: bad magic");
    if (get64(buf + 56) != XXH3_64bits_withSeed(buf, 56, salt))
        return crb_error(CR_ERR_DISK_CORRUPT, "trailer: checksum mismatch");
    crf_trailer t = {
        .footer_off = get64(buf + 8),
        .record_count = get64(buf + 16),
        .data_end = get64(buf + 24),
        .min_seq = get64(buf + 32),
        .max_seq = get64(buf + 40),
    };
    if (get64(buf + 48) != 0)
        return crb_error(CR_ERR_DISK_CORRUPT, "trailer: reserved field set");
    if (file_len > CRF_MAX_BUCKET_BYTES || file_len % CRF_BLOCK != 0 ||
        file_len < CRF_FIRST_RECORD + CRF_BLOCK)
        return crb_error(CR_ERR_DISK_CORRUPT, "trailer: file length %llu",
                         (unsigned long long)file_len);
    if (t.data_end < CRF_FIRST_RECORD || t.data_end > t.footer_off ||
        t.footer_off % CRF_RECORD_ALIGN != 0 ||
        t.footer_off + CRF_RECORD_HEADER_SIZE > file_len - CRF_TRAILER_SIZE)
        return crb_error(CR_ERR_DISK_CORRUPT, "trailer: data end %llu, footer at %llu, file %llu",
                         (unsigned long long)t.data_end, (unsigned long long)t.footer_off,
                         (unsigned long long)file_len);
    if (t.min_seq > t.max_seq || (t.record_count == 0) != (t.max_seq == 0 && t.min_seq == 0))
        return crb_error(CR_ERR_DISK_CORRUPT, "trailer: seq range %llu..%llu for %llu records",
                         (unsigned long long)t.min_seq, (unsigned long long)t.max_seq,
                         (unsigned long long)t.record_count);
    *out = t;
    return 0;
}

/* ---- footer entries ------------------------------------------------------
 *  0 u64 rec_off  8 u64 seq  16 u64 value_len  24 u64 value_hash
 * 32 u32 key_len  36 u32 value_gap  40 u16 meta_len  42 u8 type  43 u8 flags
 * 44 u32 0   then key, meta
 */

void crf_footer_entry_encode(const crf_footer_entry *e, uint8_t *out)
{
    put64(out, e->rec_off);
    put64(out + 8, e->seq);
    put64(out + 16, e->value_len);
    put64(out + 24, e->value_hash);
    put32(out + 32, e->key_len);
    put32(out + 36, e->value_gap);
    put16(out + 40, e->meta_len);
    out[42] = e->type;
    out[43] = e->flags;
    put32(out + 44, 0);
    memcpy(out + CRF_FOOTER_ENTRY_SIZE, e->key, e->key_len);
    if (e->meta_len > 0)
        memcpy(out + CRF_FOOTER_ENTRY_SIZE + e->key_len, e->meta, e->meta_len);
}

int crf_footer_entry_decode(const uint8_t *buf, size_t len, size_t *pos, uint64_t data_end,
                            crf_footer_entry *out)
{
    size_t at = *pos;
    if (buf == NULL || at > len || len - at < CRF_FOOTER_ENTRY_SIZE)
        return crb_error(CR_ERR_DISK_CORRUPT, "footer entry at %zu: truncated", at);
    const uint8_t *p = buf + at;
    crf_record_header h = {
        .type = p[42],
        .flags = p[43],
        .meta_len = get16(p + 40),
        .key_len = get32(p + 32),
        .value_gap = get32(p + 36),
        .value_len = get64(p + 16),
        .seq = get64(p + 8),
        .value_hash = get64(p + 24),
    };
    uint64_t rec_off = get64(p);
    if (h.type == CRF_REC_FOOTER)
        return crb_error(CR_ERR_DISK_CORRUPT, "footer entry at %zu: lists a footer", at);
    if (get32(p + 44) != 0)
        return crb_error(CR_ERR_DISK_CORRUPT, "footer entry at %zu: reserved field set", at);
    int rc = check_record_shape("footer entry", &h, rec_off, data_end);
    if (rc != 0)
        return rc;
    size_t need = crf_footer_entry_size(h.key_len, h.meta_len);
    if (len - at < need)
        return crb_error(CR_ERR_DISK_CORRUPT, "footer entry at %zu: key and meta truncated", at);
    out->rec_off = rec_off;
    out->seq = h.seq;
    out->value_len = h.value_len;
    out->value_hash = h.value_hash;
    out->key_len = h.key_len;
    out->value_gap = h.value_gap;
    out->meta_len = h.meta_len;
    out->type = h.type;
    out->flags = h.flags;
    out->key = p + CRF_FOOTER_ENTRY_SIZE;
    out->meta = h.meta_len > 0 ? p + CRF_FOOTER_ENTRY_SIZE + h.key_len : NULL;
    *pos = at + need;
    return 0;
}
