/*
 * fuzz_disk_format.c - libFuzzer target for the disk tier's on-disk
 * decoders (src/disk/format.c): bucket header, record header, trailer and
 * footer entries. The first input byte picks the decoder; for records and
 * trailers the next 24 bytes are the salt, the record offset and the file
 * length the decoder is told about.
 *
 * A failure must be CR_ERR_DISK_CORRUPT with a message and leave the output
 * untouched. A success must describe a structure that lies where the
 * decoder was told it may (inside the buffer, inside the file) and encode
 * back to exactly the bytes it was decoded from.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "disk/format.h"
#include "fuzz_check.h"

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void check_failure(int rc, const void *out, size_t n)
{
    FUZZ_CHECK(rc == CR_ERR_DISK_CORRUPT);
    FUZZ_CHECK(fuzz_untouched(out, n));
    FUZZ_CHECK(cr_last_error_message()[0] != '\0');
}

static void fuzz_bucket_header(const uint8_t *d, size_t n)
{
    crf_bucket_header h;
    memset(&h, FUZZ_SENTINEL, sizeof(h));
    int rc = crf_bucket_header_decode(d, n, &h);
    if (rc != 0) {
        check_failure(rc, &h, sizeof(h));
        return;
    }
    uint8_t again[CRF_BUCKET_HEADER_SIZE];
    crf_bucket_header_encode(&h, again);
    FUZZ_CHECK(memcmp(again, d, CRF_BUCKET_HEADER_SIZE) == 0);
}

static void fuzz_record_header(const uint8_t *d, size_t n)
{
    if (n < 24)
        return;
    uint64_t salt = get64(d);
    uint64_t rec_off = get64(d + 8) % (CRF_MAX_BUCKET_BYTES + 4096);
    uint64_t file_len = get64(d + 16);
    d += 24;
    n -= 24;
    crf_record_header h;
    const uint8_t *key = (const uint8_t *)&h, *meta = (const uint8_t *)&h;
    memset(&h, FUZZ_SENTINEL, sizeof(h));
    int rc = crf_record_header_decode(d, n, rec_off, salt, file_len, &h, &key, &meta);
    if (rc != 0) {
        check_failure(rc, &h, sizeof(h));
        FUZZ_CHECK(key == (const uint8_t *)&h && meta == (const uint8_t *)&h);
        return;
    }
    FUZZ_CHECK(h.type >= CRF_REC_PUT && h.type <= CRF_REC_FOOTER);
    FUZZ_CHECK(h.key_len <= CRF_MAX_KEY && h.meta_len <= CRF_MAX_META);
    FUZZ_CHECK(key == d + CRF_RECORD_HEADER_SIZE);
    FUZZ_CHECK(CRF_RECORD_HEADER_SIZE + (size_t)h.key_len + h.meta_len <= n);
    FUZZ_CHECK((meta == NULL) == (h.meta_len == 0));
    FUZZ_CHECK(rec_off + crf_record_extent(&h) <= file_len);
    if (h.flags & CRF_RECF_ALIGNED)
        FUZZ_CHECK((rec_off + crf_record_value_rel(&h)) % CRF_BLOCK == 0);
    uint8_t again[CRF_RECORD_HEADER_SIZE];
    crf_record_header_encode(&h, key, meta, salt, rec_off, again);
    FUZZ_CHECK(memcmp(again, d, CRF_RECORD_HEADER_SIZE) == 0);
}

static void fuzz_trailer(const uint8_t *d, size_t n)
{
    if (n < 16)
        return;
    uint64_t salt = get64(d);
    uint64_t file_len = get64(d + 8);
    d += 16;
    n -= 16;
    crf_trailer t;
    memset(&t, FUZZ_SENTINEL, sizeof(t));
    int rc = crf_trailer_decode(d, n, salt, file_len, &t);
    if (rc != 0) {
        check_failure(rc, &t, sizeof(t));
        return;
    }
    FUZZ_CHECK(t.data_end >= CRF_FIRST_RECORD && t.data_end <= t.footer_off);
    FUZZ_CHECK(t.footer_off + CRF_RECORD_HEADER_SIZE + CRF_TRAILER_SIZE <= file_len);
    uint8_t again[CRF_TRAILER_SIZE];
    crf_trailer_encode(&t, salt, again);
    FUZZ_CHECK(memcmp(again, d, CRF_TRAILER_SIZE) == 0);
}

static void fuzz_footer(const uint8_t *d, size_t n)
{
    if (n < 8)
        return;
    uint64_t data_end = get64(d);
    d += 8;
    n -= 8;
    size_t pos = 0;
    while (pos < n) {
        crf_footer_entry e;
        memset(&e, FUZZ_SENTINEL, sizeof(e));
        size_t before = pos;
        int rc = crf_footer_entry_decode(d, n, &pos, data_end, &e);
        if (rc != 0) {
            check_failure(rc, &e, sizeof(e));
            FUZZ_CHECK(pos == before);
            return;
        }
        size_t used = crf_footer_entry_size(e.key_len, e.meta_len);
        FUZZ_CHECK(pos == before + used && pos <= n);
        FUZZ_CHECK(e.type == CRF_REC_PUT || e.type == CRF_REC_TOMB);
        FUZZ_CHECK(e.key == d + before + CRF_FOOTER_ENTRY_SIZE);
        FUZZ_CHECK(e.rec_off >= CRF_FIRST_RECORD);
        uint64_t extent =
            CRF_RECORD_HEADER_SIZE + (uint64_t)e.key_len + e.meta_len + e.value_gap + e.value_len;
        FUZZ_CHECK(e.rec_off + extent <= data_end);
        uint8_t *again = malloc(used);
        FUZZ_CHECK(again != NULL);
        crf_footer_entry_encode(&e, again);
        FUZZ_CHECK(memcmp(again, d + before, used) == 0);
        free(again);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 4) {
    case 0:
        fuzz_bucket_header(data + 1, size - 1);
        break;
    case 1:
        fuzz_record_header(data + 1, size - 1);
        break;
    case 2:
        fuzz_trailer(data + 1, size - 1);
        break;
    default:
        fuzz_footer(data + 1, size - 1);
        break;
    }
    return 0;
}
