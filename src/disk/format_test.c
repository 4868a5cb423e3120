/*
 * format_test.c - the on-disk structures round-trip through their encoders
 * and decoders, and every decoder refuses damage: a flipped byte anywhere
 * in a header (checksum), a header moved to another offset or bucket (the
 * seed), a record reaching past the file, lengths over the limits, a gap
 * that breaks the alignment rule, truncated buffers. Also the index table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "disk/format.h"
#include "disk/index.h"

static void test_bucket_header(void **state)
{
    (void)state;
    crf_bucket_header h = {9, 0xabcdef, 77, 123456789}, out;
    uint8_t buf[CRF_BUCKET_HEADER_SIZE];
    crf_bucket_header_encode(&h, buf);
    assert_int_equal(crf_bucket_header_decode(buf, sizeof(buf), &out), 0);
    assert_memory_equal(&h, &out, sizeof(h));
    assert_int_equal(crf_bucket_header_decode(buf, sizeof(buf) - 1, &out), CR_ERR_DISK_CORRUPT);
    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] ^= 0x10;
        assert_int_equal(crf_bucket_header_decode(buf, sizeof(buf), &out), CR_ERR_DISK_CORRUPT);
        buf[i] ^= 0x10;
    }
}

static size_t make_record(uint8_t *buf, uint8_t type, uint64_t rec_off, uint64_t salt,
                          uint64_t value_len, const char *key, const char *meta)
{
    uint8_t flags;
    uint32_t klen = (uint32_t)strlen(key), mlen = meta ? (uint32_t)strlen(meta) : 0;
    crf_record_header h = {
        .type = type,
        .meta_len = (uint16_t)mlen,
        .key_len = klen,
        .value_len = value_len,
        .seq = 99,
        .value_hash = 5,
    };
    h.value_gap = crf_record_gap(rec_off, klen, mlen, value_len, &flags);
    h.flags = flags;
    crf_record_header_encode(&h, key, meta, salt, rec_off, buf);
    memcpy(buf + CRF_RECORD_HEADER_SIZE, key, klen);
    if (mlen)
        memcpy(buf + CRF_RECORD_HEADER_SIZE + klen, meta, mlen);
    return CRF_RECORD_HEADER_SIZE + klen + mlen;
}

static void test_record_header(void **state)
{
    (void)state;
    uint8_t buf[256];
    const uint64_t salt = 0x1122334455667788ull, off = 4096 + 64, file = 1 << 20;
    size_t n = make_record(buf, CRF_REC_PUT, off, salt, 100000, "some-key", "meta");
    crf_record_header h;
    const uint8_t *k, *m;
    assert_int_equal(crf_record_header_decode(buf, n, off, salt, file, &h, &k, &m), 0);
    assert_int_equal(h.type, CRF_REC_PUT);
    assert_int_equal(h.key_len, 8);
    assert_int_equal(h.meta_len, 4);
    assert_int_equal(h.value_len, 100000);
    assert_int_equal(h.seq, 99);
    assert_true(h.flags & CRF_RECF_ALIGNED);
    assert_int_equal((off + crf_record_value_rel(&h)) % CRF_BLOCK, 0);
    assert_memory_equal(k, "some-key", 8);
    assert_memory_equal(m, "meta", 4);
    /* Position and bucket are part of the checksum. */
    assert_int_equal(crf_record_header_decode(buf, n, off + 8, salt, file, &h, &k, &m),
                     CR_ERR_DISK_CORRUPT);
    assert_int_equal(crf_record_header_decode(buf, n, off, salt + 1, file, &h, &k, &m),
                     CR_ERR_DISK_CORRUPT);
    /* Past the end of the file; truncated key. */
    assert_int_equal(crf_record_header_decode(buf, n, off, salt, off + 1000, &h, &k, &m),
                     CR_ERR_DISK_CORRUPT);
    assert_int_equal(crf_record_header_decode(buf, n - 1, off, salt, file, &h, &k, &m),
                     CR_ERR_DISK_CORRUPT);
    for (size_t i = 0; i < n; i++) {
        buf[i] ^= 0x01;
        assert_int_equal(crf_record_header_decode(buf, n, off, salt, file, &h, &k, &m),
                         CR_ERR_DISK_CORRUPT);
        buf[i] ^= 0x01;
    }
    /* Short values are dense; tombstones carry no value. */
    n = make_record(buf, CRF_REC_TOMB, off, salt, 0, "k", NULL);
    assert_int_equal(crf_record_header_decode(buf, n, off, salt, file, &h, &k, &m), 0);
    assert_int_equal(h.value_gap, 0);
    assert_null(m);
    n = make_record(buf, CRF_REC_TOMB, off, salt, 5, "k", NULL);
    assert_int_equal(crf_record_header_decode(buf, n, off, salt, file, &h, &k, &m),
                     CR_ERR_DISK_CORRUPT);
    /* Misplaced records and empty keys. */
    n = make_record(buf, CRF_REC_PUT, 100, salt, 5, "k", NULL);
    assert_int_equal(crf_record_header_decode(buf, n, 100, salt, file, &h, &k, &m),
                     CR_ERR_DISK_CORRUPT);
}

static void test_trailer(void **state)
{
    (void)state;
    crf_trailer t = {8192, 4, 8000, 3, 12}, out;
    uint8_t buf[CRF_TRAILER_SIZE];
    crf_trailer_encode(&t, 77, buf);
    assert_int_equal(crf_trailer_decode(buf, sizeof(buf), 77, 16384, &out), 0);
    assert_memory_equal(&t, &out, sizeof(t));
    assert_int_equal(crf_trailer_decode(buf, sizeof(buf), 78, 16384, &out), CR_ERR_DISK_CORRUPT);
    assert_int_equal(crf_trailer_decode(buf, sizeof(buf), 77, 8192, &out), CR_ERR_DISK_CORRUPT);
    assert_int_equal(crf_trailer_decode(buf, sizeof(buf), 77, 16385, &out), CR_ERR_DISK_CORRUPT);
    crf_trailer bad = {8192, 4, 9000, 3, 12}; /* data past the footer */
    crf_trailer_encode(&bad, 77, buf);
    assert_int_equal(crf_trailer_decode(buf, sizeof(buf), 77, 16384, &out), CR_ERR_DISK_CORRUPT);
}

static void test_footer_entries(void **state)
{
    (void)state;
    uint8_t buf[1024];
    size_t len = 0;
    const char *keys[] = {"a", "bb", "ccc"};
    for (int i = 0; i < 3; i++) {
        uint8_t flags;
        crf_footer_entry e = {
            .rec_off = 4096 + (uint64_t)i * 200000,
            .seq = (uint64_t)i + 1,
            .value_len = i == 1 ? 0 : 70000,
            .value_hash = 3,
            .key_len = (uint32_t)strlen(keys[i]),
            .meta_len = i == 2 ? 2 : 0,
            .type = i == 1 ? CRF_REC_TOMB : CRF_REC_PUT,
            .key = (const uint8_t *)keys[i],
            .meta = (const uint8_t *)"mm",
        };
        e.value_gap = crf_record_gap(e.rec_off, e.key_len, e.meta_len, e.value_len, &flags);
        e.flags = flags;
        crf_footer_entry_encode(&e, buf + len);
        len += crf_footer_entry_size(e.key_len, e.meta_len);
    }
    size_t pos = 0;
    crf_footer_entry e;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(crf_footer_entry_decode(buf, len, &pos, 1 << 20, &e), 0);
        assert_memory_equal(e.key, keys[i], strlen(keys[i]));
    }
    assert_int_equal(pos, len);
    pos = 0;
    assert_int_equal(crf_footer_entry_decode(buf, len, &pos, 4096 + 1000, &e), CR_ERR_DISK_CORRUPT);
    assert_int_equal(pos, 0);
    assert_int_equal(crf_footer_entry_decode(buf, 10, &pos, 1 << 20, &e), CR_ERR_DISK_CORRUPT);
}

static crf_entry *entry(const char *key)
{
    crf_entry *e = crf_entry_new(key, strlen(key), NULL, 0);
    e->hash = crf_key_hash(key, strlen(key)) & 0xF; /* force collisions */
    return e;
}

static void test_index(void **state)
{
    (void)state;
    crf_index ix;
    crf_index_init(&ix);
    char key[32];
    enum { N = 500 };
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(crf_index_insert(&ix, entry(key)), 0);
    }
    assert_int_equal(ix.count, N);
    for (int i = 0; i < N; i += 2) {
        snprintf(key, sizeof(key), "k%d", i);
        crf_entry *e = crf_index_find(&ix, key, strlen(key), crf_key_hash(key, strlen(key)) & 0xF);
        assert_non_null(e);
        crf_index_remove(&ix, e);
        free(e);
    }
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        crf_entry *e = crf_index_find(&ix, key, strlen(key), crf_key_hash(key, strlen(key)) & 0xF);
        if (i % 2 == 0)
            assert_null(e);
        else
            assert_non_null(e);
    }
    snprintf(key, sizeof(key), "k1");
    crf_entry *old = crf_index_find(&ix, key, 2, crf_key_hash(key, 2) & 0xF);
    crf_entry *nu = entry("k1");
    crf_index_replace(&ix, old, nu);
    free(old);
    assert_ptr_equal(crf_index_find(&ix, key, 2, crf_key_hash(key, 2) & 0xF), nu);
    assert_int_equal(ix.count, N / 2);
    crf_index_destroy(&ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_header), cmocka_unit_test(test_record_header),
        cmocka_unit_test(test_trailer),       cmocka_unit_test(test_footer_entries),
        cmocka_unit_test(test_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
