/*
 * ha_restore_test.c - the HA replication entries (ha_codec.c), the standby's
 * catalog (ha_catalog.c) and the promotion restore (ha_restore.c), without
 * processes: a "leader" service's state is described as stream entries, a
 * fresh service is restored from them, and the restored objects must be
 * the leader's (same segments, addresses, epochs, sizes), writes in flight
 * fenced, recently freed ranges and every live range never handed out again;
 * DISK records (disk copies) kept beside the keys' images.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "master/ha_catalog.h"
#include "master/ha_codec.h"
#include "master/ha_internal.h"
#include "master/test_util.h"

#define SEG_BASE (1ull << 30)
#define SEG_SIZE (1ull << 20)
#define VALUE    4096

static void apply(crk_ha_catalog *c, const crk_ha_entry *e, uint64_t seq, uint64_t now)
{
    crk_ha_buf b = {0};
    assert_int_equal(crk_ha_entry_encode(e, &b), 0);
    crk_ha_entry d;
    assert_int_equal(crk_ha_entry_decode(b.data, b.len, &d), 0);
    assert_int_equal(crk_ha_catalog_apply(c, &d, b.data, b.len, seq, now, 1000, 60000), 0);
    crk_ha_buf_free(&b);
}

/* apply through the standby's path: the hash from the slot prefetch */
static void apply_hashed(crk_ha_catalog *c, const crk_ha_entry *e, uint64_t seq, uint64_t now)
{
    crk_ha_buf b = {0};
    assert_int_equal(crk_ha_entry_encode(e, &b), 0);
    crk_ha_entry d;
    assert_int_equal(crk_ha_entry_decode(b.data, b.len, &d), 0);
    uint64_t h = crk_ha_catalog_prefetch_slot(c, b.data, b.len);
    crk_ha_catalog_prefetch_record(c, h);
    assert_int_equal(crk_ha_catalog_apply_hashed(c, &d, b.data, b.len, h, seq, now, 1000, 60000),
                     0);
    crk_ha_buf_free(&b);
}

static crk_ha_entry key_entry(const char *key, uint8_t flags, uint64_t size, uint64_t epoch,
                              uint64_t offset)
{
    crk_ha_entry e = {.kind = CRK_HA_KEY, .key = key, .key_len = strlen(key), .flags = flags};
    if (flags & CRK_HA_F_COMPLETE) {
        e.size = size;
        e.nrep = 1;
        e.rep[0] = (crk_ha_rep){epoch, offset};
    }
    if (flags & CRK_HA_F_WRITING) {
        e.wsize = size;
        e.wnrep = 1;
        e.wrep[0] = (crk_ha_rep){epoch, offset + (flags & CRK_HA_F_COMPLETE ? VALUE : 0)};
    }
    return e;
}

static void test_codec_round_trip_and_refusals(void **state)
{
    (void)state;
    crk_ha_entry e =
        key_entry("k", CRK_HA_F_COMPLETE | CRK_HA_F_WRITING | CRK_HA_F_HARD_PIN, 77, 9, 4096);
    crk_ha_buf b = {0};
    assert_int_equal(crk_ha_entry_encode(&e, &b), 0);
    crk_ha_entry d;
    assert_int_equal(crk_ha_entry_decode(b.data, b.len, &d), 0);
    assert_int_equal(d.kind, CRK_HA_KEY);
    assert_int_equal(d.size, 77);
    assert_int_equal(d.nrep, 1);
    assert_int_equal(d.rep[0].epoch, 9);
    assert_int_equal(d.wrep[0].offset, 8192);
    assert_memory_equal(d.key, "k", 1);
    /* every truncation and a trailing byte are refused */
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(crk_ha_entry_decode(b.data, n, &d), CR_ERR_MALFORMED_FRAME);
    uint8_t longer[256];
    memcpy(longer, b.data, b.len);
    longer[b.len] = 0;
    assert_int_equal(crk_ha_entry_decode(longer, b.len + 1, &d), CR_ERR_MALFORMED_FRAME);
    /* too many replicas, unknown kinds and flags */
    b.data[0] = 99;
    assert_int_equal(crk_ha_entry_decode(b.data, b.len, &d), CR_ERR_MALFORMED_FRAME);
    crk_ha_buf_free(&b);
    e.nrep = 9;
    assert_int_equal(crk_ha_entry_encode(&e, &b), CR_INVALID_PARAMS);
    crk_ha_buf_free(&b);
    /* frame framing */
    uint8_t frame[12 + 4 + 3] = {1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 2, 1, 0};
    uint64_t first;
    uint32_t count;
    assert_int_equal(crk_ha_frame_header(frame, sizeof(frame), &first, &count), 0);
    assert_int_equal(first, 1);
    assert_int_equal(count, 1);
    size_t off = 12;
    const uint8_t *p;
    size_t n;
    assert_int_equal(crk_ha_frame_entry(frame, sizeof(frame), &off, &p, &n), 0);
    assert_int_equal(n, 3);
    off = 12;
    assert_int_equal(crk_ha_frame_entry(frame, sizeof(frame) - 1, &off, &p, &n),
                     CR_ERR_MALFORMED_FRAME);
    assert_int_equal(crk_ha_frame_header(frame, 11, &first, &count), CR_ERR_MALFORMED_FRAME);
}

/* Does [a, a+n) overlap any of the ranges (offset, VALUE)? */
static bool overlaps(uint64_t a, uint64_t n, const uint64_t *offs, size_t k)
{
    for (size_t i = 0; i < k; i++)
        if (a < offs[i] + VALUE && offs[i] < a + n)
            return true;
    return false;
}

static void test_restore(void **state)
{
    (void)state;
    uint64_t now = 1000;
    crk_ha_catalog *cat = NULL;
    assert_int_equal(crk_ha_catalog_create(&cat), 0);
    crk_client_id owner = tu_client(7);
    crk_ha_entry m = {.kind = CRK_HA_MOUNT,
                      .epoch = 42,
                      .owner_hi = owner.hi,
                      .owner_lo = owner.lo,
                      .base = SEG_BASE,
                      .size = SEG_SIZE,
                      .name = "seg-a",
                      .name_len = 5};
    apply(cat, &m, 1, now);
    /* live objects at scattered offsets, a hard-pinned one, a phantom
     * (evicted on the leader, its range reused by a later image) */
    const uint64_t live[] = {0, 3 * VALUE, 10 * VALUE, 11 * VALUE};
    const char *names[] = {"a", "b", "c", "pinned"};
    for (int i = 0; i < 4; i++) {
        crk_ha_entry e = key_entry(names[i], CRK_HA_F_COMPLETE | (i == 3 ? CRK_HA_F_HARD_PIN : 0),
                                   VALUE, 42, live[i]);
        apply(cat, &e, (uint64_t)(10 + i), now);
    }
    crk_ha_entry phantom = key_entry("phantom", CRK_HA_F_COMPLETE, VALUE, 42, 3 * VALUE);
    apply(cat, &phantom, 5, now); /* older than "b" at the same range */
    /* a write in flight (fenced) and a removed key (its range buried) */
    crk_ha_entry w = key_entry("inflight", CRK_HA_F_WRITING, VALUE, 42, 20 * VALUE);
    apply(cat, &w, 20, now);
    crk_ha_entry gone = key_entry("gone", CRK_HA_F_COMPLETE, VALUE, 42, 30 * VALUE);
    apply(cat, &gone, 21, now);
    crk_ha_entry absent = key_entry("gone", 0, 0, 0, 0);
    apply(cat, &absent, 22, now);
    /* a replica on a segment the stream unmounted */
    crk_ha_entry orphan = key_entry("orphan", CRK_HA_F_COMPLETE, VALUE, 43, 0);
    apply(cat, &orphan, 23, now);
    assert_int_equal(crk_ha_catalog_keys(cat), 7);

    crk_service *s = tu_service(NULL, now);
    uint64_t fenced = 0, objects = 0;
    assert_int_equal(crk_ha_restore(s, cat, now, &fenced, &objects), 0);
    assert_int_equal(fenced, 1);
    assert_int_equal(objects, 4);
    for (int i = 0; i < 4; i++) {
        crk_replica_list l;
        assert_int_equal(crk_get_replica_list(s, names[i], now, &l), 0);
        assert_int_equal(l.n, 1);
        assert_string_equal(l.r[0].segment, "seg-a");
        assert_int_equal(l.r[0].address, SEG_BASE + live[i]);
        assert_int_equal(l.r[0].mount_epoch, 42);
        assert_int_equal(l.value_size, VALUE);
    }
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(s, "phantom", now, &l), CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_get_replica_list(s, "inflight", now, &l), CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_get_replica_list(s, "gone", now, &l), CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_get_replica_list(s, "orphan", now, &l), CR_OBJECT_NOT_FOUND);
    /* The owner is a known client: its ping is OK, no remount needed. */
    crk_heartbeat_info hi;
    assert_int_equal(crk_heartbeat(s, owner, now, &hi), 0);
    assert_int_equal(hi.status, CRK_CLIENT_OK);
    /* New mounts get later epochs. */
    assert_true(tu_mount(s, tu_client(8), "seg-b", 1ull << 40, SEG_SIZE, now) > 42);
    /* Fill seg-a (preferred) with new objects: none may touch a live, fenced
     * or buried range. */
    const uint64_t reserved[] = {0, 3 * VALUE, 10 * VALUE, 11 * VALUE, 20 * VALUE, 30 * VALUE};
    const char *pref[] = {"seg-a"};
    crk_replicate_config cfg = {.replica_num = 1, .preferred_segments = pref, .n_preferred = 1};
    int placed = 0;
    for (int i = 0; i < 300; i++) {
        char key[32];
        snprintf(key, sizeof(key), "new%d", i);
        crk_replica_list nl;
        if (crk_put_start(s, owner, key, VALUE, &cfg, now, &nl) != 0)
            break;
        if (strcmp(nl.r[0].segment, "seg-a") != 0)
            break; /* seg-a is full */
        assert_false(overlaps(nl.r[0].address - SEG_BASE, VALUE, reserved, 6));
        placed++;
    }
    assert_int_equal(placed, (int)(SEG_SIZE / VALUE) - 6);
    crk_service_destroy(s);
    crk_ha_catalog_destroy(cat);
}

static int count_key(void *ctx, const crk_ha_entry *e, uint64_t seq)
{
    bool *seen = ctx;
    int i = atoi(e->key + 1);
    assert_false(seen[i]);
    assert_int_equal(seq, (uint64_t)i + 1);
    seen[i] = true;
    return 0;
}

/* The catalog's table against a model: random puts and removals of 3000
 * keys (growth, probe runs, backward-shift deletion), then every live key
 * seen exactly once. */
static void test_catalog_table(void **state)
{
    (void)state;
    enum { N = 3000 };
    static bool live[N], seen[N];
    static char names[N][16];
    crk_ha_catalog *cat = NULL;
    assert_int_equal(crk_ha_catalog_create(&cat), 0);
    uint64_t x = 12345;
    size_t n = 0;
    for (int step = 0; step < 40000; step++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int i = (int)((x >> 33) % N);
        bool put = ((x >> 20) & 3) != 0;
        snprintf(names[i], sizeof(names[i]), "k%d", i);
        crk_ha_entry e = key_entry(names[i], put ? CRK_HA_F_COMPLETE : 0, VALUE, 1, 0);
        apply(cat, &e, (uint64_t)i + 1, 0);
        if (put && !live[i])
            n++;
        if (!put && live[i])
            n--;
        live[i] = put;
        assert_int_equal(crk_ha_catalog_keys(cat), n);
    }
    memset(seen, 0, sizeof(seen));
    crk_ha_catalog_each_key(cat, count_key, seen);
    for (int i = 0; i < N; i++)
        assert_int_equal(seen[i], live[i]);
    crk_ha_catalog_destroy(cat);
}

static int count_disk(void *ctx, const crk_ha_entry *e)
{
    uint64_t *sum = ctx;
    sum[0]++;
    sum[1] += e->disk_version;
    return 0;
}

/* DISK records (a key's copy on a holder's SSD): codec round trip and
 * refusals; in the catalog beside the same key's KEY image, independent of
 * it (the KEY image gone, the disk copy stays), replaced, dropped. */
static void test_disk_records(void **state)
{
    (void)state;
    crk_ha_entry e = {.kind = CRK_HA_DISK,
                      .key = "dk",
                      .key_len = 2,
                      .flags = CRK_HA_F_ON_DISK,
                      .owner_hi = 5,
                      .owner_lo = 6,
                      .disk_version = 77,
                      .size = 1 << 20};
    crk_ha_buf b = {0};
    assert_int_equal(crk_ha_entry_encode(&e, &b), 0);
    crk_ha_entry d;
    assert_int_equal(crk_ha_entry_decode(b.data, b.len, &d), 0);
    assert_int_equal(d.kind, CRK_HA_DISK);
    assert_int_equal(d.flags, CRK_HA_F_ON_DISK);
    assert_int_equal(d.owner_hi, 5);
    assert_int_equal(d.owner_lo, 6);
    assert_int_equal(d.disk_version, 77);
    assert_int_equal(d.size, 1 << 20);
    assert_memory_equal(d.key, "dk", 2);
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(crk_ha_entry_decode(b.data, n, &d), CR_ERR_MALFORMED_FRAME);
    b.data[5] = 0x80; /* flags byte after u8 kind, u16 len, 2 key bytes: unknown flag */
    assert_int_equal(crk_ha_entry_decode(b.data, b.len, &d), CR_ERR_MALFORMED_FRAME);
    crk_ha_buf_free(&b);
    e.flags = 0x80;
    assert_int_equal(crk_ha_entry_encode(&e, &b), CR_INVALID_PARAMS);
    e.flags = CRK_HA_F_ON_DISK;

    crk_ha_catalog *cat = NULL;
    assert_int_equal(crk_ha_catalog_create(&cat), 0);
    crk_ha_entry k = key_entry("dk", CRK_HA_F_COMPLETE, VALUE, 1, 0);
    apply(cat, &k, 1, 0);
    apply(cat, &e, 2, 0);
    assert_int_equal(crk_ha_catalog_keys(cat), 1);
    assert_int_equal(crk_ha_catalog_disk_keys(cat), 1);
    crk_ha_entry gone = key_entry("dk", 0, 0, 0, 0);
    apply(cat, &gone, 3, 0); /* evicted from memory: the disk copy stays */
    assert_int_equal(crk_ha_catalog_keys(cat), 0);
    assert_int_equal(crk_ha_catalog_disk_keys(cat), 1);
    e.disk_version = 78; /* replaced (a new offload of a newer version) */
    apply(cat, &e, 4, 0);
    uint64_t sum[2] = {0, 0};
    crk_ha_catalog_each_disk(cat, count_disk, sum);
    assert_int_equal(sum[0], 1);
    assert_int_equal(sum[1], 78);
    e.flags = 0; /* the copy dropped */
    apply(cat, &e, 5, 0);
    assert_int_equal(crk_ha_catalog_disk_keys(cat), 0);
    sum[0] = sum[1] = 0;
    crk_ha_catalog_each_disk(cat, count_disk, sum);
    assert_int_equal(sum[0], 0);
    crk_ha_catalog_destroy(cat);
}

/* The standby applies with the hash its slot prefetch computed: records
 * written one way are found the other (a wrong hash would leave them). */
static void test_hashed_apply(void **state)
{
    (void)state;
    crk_ha_catalog *c;
    assert_int_equal(crk_ha_catalog_create(&c), 0);
    char key[64];
    enum { N = 3000 }; /* past several doublings of the slot array */
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "hashed-%d", i);
        crk_ha_entry e = key_entry(key, CRK_HA_F_WRITING, VALUE, 1, (uint64_t)i * VALUE);
        if (i % 2)
            apply_hashed(c, &e, (uint64_t)i + 1, 1000);
        else
            apply(c, &e, (uint64_t)i + 1, 1000);
        crk_ha_entry d = {.kind = CRK_HA_DISK,
                          .key = key,
                          .key_len = strlen(key),
                          .flags = CRK_HA_F_ON_DISK,
                          .owner_lo = 7,
                          .disk_version = 1,
                          .size = VALUE};
        if (i % 3 == 0)
            apply_hashed(c, &d, 0, 1000);
    }
    assert_int_equal(crk_ha_catalog_keys(c), N);
    assert_int_equal(crk_ha_catalog_disk_keys(c), (N + 2) / 3);
    for (int i = 0; i < N; i++) { /* gone, through the other path */
        snprintf(key, sizeof(key), "hashed-%d", i);
        crk_ha_entry e = key_entry(key, 0, 0, 0, 0);
        if (i % 2)
            apply(c, &e, (uint64_t)(N + i) + 1, 2000);
        else
            apply_hashed(c, &e, (uint64_t)(N + i) + 1, 2000);
        crk_ha_entry d = {.kind = CRK_HA_DISK, .key = key, .key_len = strlen(key)};
        if (i % 3 == 0)
            apply(c, &d, 0, 2000);
    }
    assert_int_equal(crk_ha_catalog_keys(c), 0);
    assert_int_equal(crk_ha_catalog_disk_keys(c), 0);
    /* bytes that are no KEY or DISK entry hash to 0 and prefetch nothing */
    uint8_t junk[3] = {CRK_HA_RESET, 0, 0};
    assert_int_equal(crk_ha_catalog_prefetch_slot(c, junk, sizeof(junk)), 0);
    assert_int_equal(crk_ha_catalog_prefetch_slot(c, junk, 1), 0);
    crk_ha_catalog_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_round_trip_and_refusals),
        cmocka_unit_test(test_restore),
        cmocka_unit_test(test_catalog_table),
        cmocka_unit_test(test_disk_records),
        cmocka_unit_test(test_hashed_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
