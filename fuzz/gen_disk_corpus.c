/*
 * gen_disk_corpus.c - writes fuzz_disk_format's seed corpus at build time.
 *
 * Usage: fuzz_gen_disk_corpus <dir>. Creates <dir>/disk_format/seed-N with
 * valid structures made by the real encoders (src/disk/format.c), each
 * behind the selector byte and parameters fuzz_disk_format.c expects.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "disk/format.h"

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "gen_disk_corpus: %s: %s\n", what, detail);
    exit(1);
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void seed(const char *root, int n, const uint8_t *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/disk_format", root);
    if (mkdir(root, 0755) != 0 && errno != EEXIST)
        die(root, strerror(errno));
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        die(path, strerror(errno));
    snprintf(path, sizeof(path), "%s/disk_format/seed-%d", root, n);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, len, f) != len || fclose(f) != 0)
        die(path, "cannot write");
}

int main(int argc, char **argv)
{
    if (argc != 2)
        die("usage", "fuzz_gen_disk_corpus <dir>");
    const char *root = argv[1];
    static uint8_t buf[16384];
    int n = 0;

    crf_bucket_header bh = {7, 0x1234567890abcdefull, 42, 1700000000000000000ull};
    buf[0] = 0;
    crf_bucket_header_encode(&bh, buf + 1);
    seed(root, n++, buf, 1 + CRF_BUCKET_HEADER_SIZE);

    const uint64_t salt = 0xfeedfacecafebeefull;
    const char *key = "key-000001";
    const uint8_t meta[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    struct {
        uint8_t type;
        uint64_t off, value_len;
        int with_meta;
    } recs[] = {
        {CRF_REC_PUT, 4096, 100, 1}, {CRF_REC_TOMB, 8192, 0, 0}, {CRF_REC_PUT, 4096 + 8, 70000, 0}};
    for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); i++) {
        uint8_t flags;
        uint32_t klen = (uint32_t)strlen(key), mlen = recs[i].with_meta ? 8 : 0;
        crf_record_header h = {
            .type = recs[i].type,
            .meta_len = (uint16_t)mlen,
            .key_len = klen,
            .value_len = recs[i].value_len,
            .seq = 5 + i,
            .value_hash = crf_value_hash(NULL, 0),
        };
        h.value_gap = crf_record_gap(recs[i].off, klen, mlen, h.value_len, &flags);
        h.flags = flags;
        buf[0] = 1;
        put64(buf + 1, salt);
        put64(buf + 9, recs[i].off);
        put64(buf + 17, 1u << 20);
        crf_record_header_encode(&h, key, mlen ? meta : NULL, salt, recs[i].off, buf + 25);
        memcpy(buf + 25 + CRF_RECORD_HEADER_SIZE, key, klen);
        memcpy(buf + 25 + CRF_RECORD_HEADER_SIZE + klen, meta, mlen);
        crf_record_header back;
        const uint8_t *k, *m;
        if (crf_record_header_decode(buf + 25, CRF_RECORD_HEADER_SIZE + klen + mlen, recs[i].off,
                                     salt, 1u << 20, &back, &k, &m) != 0)
            die("record seed does not decode", cr_last_error_message());
        seed(root, n++, buf, 25 + CRF_RECORD_HEADER_SIZE + klen + mlen);
    }

    crf_trailer t = {8192, 3, 8000, 5, 9};
    buf[0] = 2;
    put64(buf + 1, salt);
    put64(buf + 9, 16384);
    crf_trailer_encode(&t, salt, buf + 17);
    crf_trailer tback;
    if (crf_trailer_decode(buf + 17, CRF_TRAILER_SIZE, salt, 16384, &tback) != 0)
        die("trailer seed does not decode", cr_last_error_message());
    seed(root, n++, buf, 17 + CRF_TRAILER_SIZE);

    buf[0] = 3;
    put64(buf + 1, 1u << 20);
    size_t pos = 9;
    for (int i = 0; i < 3; i++) {
        uint8_t flags;
        crf_footer_entry e = {
            .rec_off = 4096 + (uint64_t)i * 65536,
            .seq = 10 + (uint64_t)i,
            .value_len = i == 2 ? 0 : 1000,
            .key_len = (uint32_t)strlen(key),
            .meta_len = i == 0 ? 8 : 0,
            .type = i == 2 ? CRF_REC_TOMB : CRF_REC_PUT,
            .key = (const uint8_t *)key,
            .meta = meta,
        };
        e.value_gap = crf_record_gap(e.rec_off, e.key_len, e.meta_len, e.value_len, &flags);
        e.flags = flags;
        crf_footer_entry_encode(&e, buf + pos);
        pos += crf_footer_entry_size(e.key_len, e.meta_len);
    }
    for (size_t at = 0; at < pos - 9;) {
        crf_footer_entry back;
        if (crf_footer_entry_decode(buf + 9, pos - 9, &at, 1u << 20, &back) != 0)
            die("footer seed does not decode", cr_last_error_message());
    }
    seed(root, n++, buf, pos);
    return 0;
}
