/*
 * offload_test.c - the master's side of the disk tier (master/offload.h),
 * driven through crk_off_heartbeat as a holder would, with scripted time:
 * an eviction queues an offload and keeps the object readable until the
 * result; the result frees the memory and records the disk copy; a get
 * stages it; remove/upsert drop it and never route to it again; stale and
 * failed results; announces after a holder restart; the holder's silence.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "master/internal.h"
#include "master/offload.h"
#include "master/test_util.h"
#include "proto/offload.h"

#define SEG  (1u << 20)
#define VAL  (64u << 10)
#define BASE 0x100000000ull

typedef struct fixture {
    crk_service *s;
    crk_client_id holder;
    uint64_t now;
} fixture;

static fixture setup_fx(bool on_evict)
{
    crk_config c = tu_config();
    c.client_ttl_ms = 10000;
    c.enable_offload = true;
    c.offload_on_evict = on_evict;
    fixture f = {tu_service(&c, 1000), tu_client(1), 1000};
    tu_mount(f.s, f.holder, "holder:1", BASE, SEG, f.now);
    return f;
}

static fixture setup_with(crk_config c)
{
    c.client_ttl_ms = 10000;
    c.enable_offload = true;
    c.offload_on_evict = true;
    fixture f = {tu_service(&c, 1000), tu_client(1), 1000};
    tu_mount(f.s, f.holder, "holder:1", BASE, SEG, f.now);
    return f;
}

/* One heartbeat with the given items; the reply's tasks into *tasks (caller clears). */
static void beat(fixture *f, crp_off_item *items, size_t n, crp_off_msg *tasks)
{
    crp_off_msg m = {.segment = "holder:1", .n_items = n, .items = n ? items : NULL};
    crp_buf req = {0}, reply = {0};
    assert_int_equal(crp_off_encode(&m, &req), 0);
    assert_int_equal(crk_off_heartbeat(f->s, f->holder, req.data, req.len, f->now, &reply), 0);
    assert_int_equal(crp_off_decode(reply.data, reply.len, tasks), 0);
    crp_buf_free(&req);
    crp_buf_free(&reply);
}

static const crp_off_item *find_task(const crp_off_msg *m, uint8_t kind, const char *key)
{
    for (size_t i = 0; i < m->n_items; i++)
        if (m->items[i].kind == kind && strcmp(m->items[i].key, key) == 0)
            return &m->items[i];
    return NULL;
}

/* Fill the segment with VAL-byte keys k0..; the next put evicts (and queues offloads). */
static void fill(fixture *f, int n)
{
    crk_replicate_config cfg = tu_cfg(1);
    char key[32];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        f->now += 10;
        int rc = tu_put(f->s, f->holder, key, VAL, &cfg, f->now);
        assert_true(rc == 0 || rc == CR_NO_AVAILABLE_HANDLE);
    }
}

static void test_offload_then_stage(void **state)
{
    (void)state;
    fixture f = setup_fx(true);
    crp_off_msg t;
    beat(&f, NULL, 0, &t); /* the holder joins */
    assert_int_equal(t.n_items, 0);
    crp_off_clear(&t);
    fill(&f, 20); /* 16 fit: evictions queue offloads of the oldest */
    beat(&f, NULL, 0, &t);
    const crp_off_item *k0 = find_task(&t, CRP_OFF_OFFLOAD, "k0");
    assert_non_null(k0);
    assert_true(k0->addr >= BASE && k0->addr < BASE + SEG && k0->size == VAL);
    /* still readable from memory while the offload runs */
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(f.s, "k0", f.now, &l), 0);
    assert_true(l.r[0].mount_epoch != 0);
    /* the result: the disk copy is recorded and the memory released */
    crp_off_item res = {CRP_OFF_OFFLOAD, 0, "k0", k0->version, 0, VAL, 0};
    uint64_t v0 = k0->version;
    crp_off_clear(&t);
    f.now += 20000; /* past the lease of the get above */
    beat(&f, &res, 1, &t);
    crp_off_clear(&t);
    assert_int_equal(crk_exist(f.s, "k0", f.now), 1);
    /* query_key sees the disk copy: complete, on the holder's disk, no lease, no stage */
    crk_key_info ki;
    assert_int_equal(crk_query_key(f.s, "k0", f.now, &ki), 0);
    assert_true(ki.on_disk && ki.disk_holder_live && ki.complete && ki.value_size == VAL);
    assert_int_equal(ki.replicas.n, 1);
    assert_string_equal(ki.replicas.r[0].segment, "holder:1");
    assert_true(ki.replicas.r[0].address == 0 && ki.replicas.r[0].mount_epoch == 0);
    assert_int_equal(crk_query_key(f.s, "no-such-key", f.now, &ki), CR_OBJECT_NOT_FOUND);
    /* a get stages it */
    assert_int_equal(crk_get_replica_list(f.s, "k0", f.now, &l), CR_ERR_OFFLOAD_STAGING);
    beat(&f, NULL, 0, &t);
    const crp_off_item *st = find_task(&t, CRP_OFF_STAGE, "k0");
    assert_non_null(st);
    assert_true(st->version == v0);
    crp_off_clear(&t);
    crp_off_item staged = {CRP_OFF_STAGE, 0, "k0", v0, 0x7000000, VAL, 5000};
    beat(&f, &staged, 1, &t);
    crp_off_clear(&t);
    assert_int_equal(crk_get_replica_list(f.s, "k0", f.now, &l), 0);
    assert_int_equal(l.n, 1);
    assert_true(l.r[0].address == 0x7000000 && l.r[0].mount_epoch == 0);
    assert_string_equal(l.r[0].segment, "holder:1");
    assert_true(l.lease_ttl_ms > 0 && l.lease_ttl_ms < 5000);
    assert_true(l.lease_token >> 63);
    /* the last reader's release frees the staging space */
    const char *keys[] = {"k0"};
    uint64_t tok[] = {l.lease_token};
    crk_release_leases(f.s, keys, tok, 1, f.now);
    beat(&f, NULL, 0, &t);
    const crp_off_item *un = find_task(&t, CRP_OFF_UNSTAGE, "k0");
    assert_non_null(un);
    assert_true(un->addr == 0x7000000);
    crp_off_clear(&t);
    /* a staged copy past its time is never handed out */
    beat(&f, &staged, 1, &t);
    crp_off_clear(&t);
    f.now += 4600;
    assert_int_equal(crk_get_replica_list(f.s, "k0", f.now, &l), CR_ERR_OFFLOAD_STAGING);
    crk_off_stats os;
    crk_off_get_stats(f.s, &os);
    assert_true(os.disk_objects == 1 && os.writes == 1 && os.staged_hits == 1);
    crk_service_destroy(f.s);
}

/* A second staged copy of a key while readers hold the first: the first stays
 * (it is still being read) and the holder is told to free the second. With no
 * readers the second replaces the first, which is freed. */
static void test_second_stage_keeps_read_copy(void **state)
{
    (void)state;
    fixture f = setup_fx(true);
    crp_off_msg t;
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    fill(&f, 20);
    beat(&f, NULL, 0, &t);
    const crp_off_item *k0 = find_task(&t, CRP_OFF_OFFLOAD, "k0");
    assert_non_null(k0);
    uint64_t v0 = k0->version;
    crp_off_item res = {CRP_OFF_OFFLOAD, 0, "k0", v0, 0, VAL, 0};
    crp_off_clear(&t);
    f.now += 20000;
    beat(&f, &res, 1, &t);
    crp_off_clear(&t);
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(f.s, "k0", f.now, &l), CR_ERR_OFFLOAD_STAGING);
    crp_off_item first = {CRP_OFF_STAGE, 0, "k0", v0, 0x7000000, VAL, 5000};
    beat(&f, &first, 1, &t);
    crp_off_clear(&t);
    assert_int_equal(crk_get_replica_list(f.s, "k0", f.now, &l), 0); /* a reader */
    assert_true(l.r[0].address == 0x7000000);
    uint64_t reader_token = l.lease_token;
    /* a re-asked stage completes too, elsewhere in the staging area */
    crp_off_item second = {CRP_OFF_STAGE, 0, "k0", v0, 0x7100000, VAL, 5000};
    beat(&f, &second, 1, &t); /* the reply carries the holder's next tasks */
    const crp_off_item *un = find_task(&t, CRP_OFF_UNSTAGE, "k0");
    assert_non_null(un);
    assert_true(un->addr == 0x7100000); /* the unread copy, never the one being read */
    crp_off_clear(&t);
    assert_int_equal(crk_get_replica_list(f.s, "k0", f.now, &l), 0);
    assert_true(l.r[0].address == 0x7000000);
    /* both readers release: the first copy is freed */
    const char *keys[] = {"k0", "k0"};
    uint64_t tok[] = {reader_token, l.lease_token};
    crk_release_leases(f.s, keys, tok, 2, f.now);
    beat(&f, NULL, 0, &t);
    un = find_task(&t, CRP_OFF_UNSTAGE, "k0");
    assert_non_null(un);
    assert_true(un->addr == 0x7000000);
    crp_off_clear(&t);
    /* no readers: a second copy replaces the first, which is freed */
    assert_int_equal(crk_get_replica_list(f.s, "k0", f.now, &l), CR_ERR_OFFLOAD_STAGING);
    beat(&f, &first, 1, &t);
    crp_off_clear(&t);
    beat(&f, &second, 1, &t);
    un = find_task(&t, CRP_OFF_UNSTAGE, "k0");
    assert_non_null(un);
    assert_true(un->addr == 0x7000000);
    crp_off_clear(&t);
    assert_int_equal(crk_get_replica_list(f.s, "k0", f.now, &l), 0);
    assert_true(l.r[0].address == 0x7100000);
    crk_service_destroy(f.s);
}

static void test_remove_and_upsert(void **state)
{
    (void)state;
    fixture f = setup_fx(true);
    crp_off_msg t;
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    fill(&f, 20);
    beat(&f, NULL, 0, &t);
    crp_off_item res[2];
    size_t n = 0;
    for (size_t i = 0; i < t.n_items && n < 2; i++)
        if (t.items[i].kind == CRP_OFF_OFFLOAD)
            res[n++] = (crp_off_item){
                CRP_OFF_OFFLOAD, 0, strdup(t.items[i].key), t.items[i].version, 0, VAL, 0};
    assert_int_equal(n, 2);
    crp_off_clear(&t);
    beat(&f, res, 2, &t);
    crp_off_clear(&t);
    /* remove of a disk-only key: gone at once, the holder told to drop that version */
    assert_int_equal(crk_remove(f.s, res[0].key, false, f.now), 0);
    assert_int_equal(crk_exist(f.s, res[0].key, f.now), 0);
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(f.s, res[0].key, f.now, &l), CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_remove(f.s, res[0].key, false, f.now), CR_OBJECT_NOT_FOUND);
    beat(&f, NULL, 0, &t);
    const crp_off_item *rm = find_task(&t, CRP_OFF_REMOVE, res[0].key);
    assert_non_null(rm);
    assert_true(rm->version == res[0].version);
    crp_off_clear(&t);
    /* a re-announce of the removed version is refused */
    crp_off_item ann = {CRP_OFF_ANNOUNCE, 0, res[0].key, res[0].version, 0, VAL, 0};
    beat(&f, &ann, 1, &t);
    assert_non_null(find_task(&t, CRP_OFF_REMOVE, res[0].key));
    crp_off_clear(&t);
    assert_int_equal(crk_exist(f.s, res[0].key, f.now), 0);
    /* a put by another client of a disk-only key: exists */
    crk_replicate_config cfg = tu_cfg(1);
    crk_replica_list al;
    assert_int_equal(crk_put_start(f.s, tu_client(2), res[1].key, VAL, &cfg, f.now, &al),
                     CR_OBJECT_ALREADY_EXISTS);
    /* an upsert replaces it: the disk copy is dropped when the new version completes */
    f.now += 20000;
    int rc = crk_upsert_start(f.s, tu_client(2), res[1].key, VAL / 2, &cfg, f.now, &al);
    if (rc == CR_NO_AVAILABLE_HANDLE) { /* the segment is full of pending offloads */
        assert_int_equal(crk_remove(f.s, "k19", true, f.now), 0);
        rc = crk_upsert_start(f.s, tu_client(2), res[1].key, VAL / 2, &cfg, f.now, &al);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(crk_put_end(f.s, tu_client(2), res[1].key, f.now), 0);
    assert_int_equal(crk_get_replica_list(f.s, res[1].key, f.now, &l), 0);
    assert_true(l.value_size == VAL / 2 && l.r[0].mount_epoch != 0);
    beat(&f, NULL, 0, &t);
    assert_non_null(find_task(&t, CRP_OFF_REMOVE, res[1].key));
    crp_off_clear(&t);
    ann = (crp_off_item){CRP_OFF_ANNOUNCE, 0, res[1].key, res[1].version, 0, VAL, 0};
    beat(&f, &ann, 1, &t);
    assert_non_null(find_task(&t, CRP_OFF_REMOVE, res[1].key));
    crp_off_clear(&t);
    free(res[0].key);
    free(res[1].key);
    crk_service_destroy(f.s);
}

/* remove_by_regex reaches keys only on disk (and only the matching ones); a removed one is
 * gone for query_key, exist and get, and its holder is told to drop that version. */
static void test_remove_by_regex_on_disk(void **state)
{
    (void)state;
    fixture f = setup_fx(true);
    crp_off_msg t;
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    fill(&f, 20);
    beat(&f, NULL, 0, &t);
    crp_off_item res[8];
    size_t n = 0;
    for (size_t i = 0; i < t.n_items && n < 8; i++)
        if (t.items[i].kind == CRP_OFF_OFFLOAD)
            res[n++] = (crp_off_item){
                CRP_OFF_OFFLOAD, 0, strdup(t.items[i].key), t.items[i].version, 0, VAL, 0};
    assert_true(n >= 2);
    crp_off_clear(&t);
    f.now += 20000;
    beat(&f, res, n, &t);
    crp_off_clear(&t);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(crk_exist(f.s, res[i].key, f.now), 1);
    /* a pattern naming only res[0] (anchored: "k1" must not take "k10".."k19") */
    char pat[64];
    snprintf(pat, sizeof(pat), "^%s$", res[0].key);
    uint64_t removed = 0;
    assert_int_equal(crk_remove_by_regex(f.s, pat, false, f.now, &removed), 0);
    assert_int_equal(removed, 1);
    crk_key_info ki;
    assert_int_equal(crk_query_key(f.s, res[0].key, f.now, &ki), CR_OBJECT_NOT_FOUND);
    assert_int_equal(crk_exist(f.s, res[0].key, f.now), 0);
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(f.s, res[0].key, f.now, &l), CR_OBJECT_NOT_FOUND);
    for (size_t i = 1; i < n; i++) {
        assert_int_equal(crk_query_key(f.s, res[i].key, f.now, &ki), 0);
        assert_true(ki.on_disk);
    }
    beat(&f, NULL, 0, &t);
    const crp_off_item *rm = find_task(&t, CRP_OFF_REMOVE, res[0].key);
    assert_non_null(rm);
    assert_true(rm->version == res[0].version);
    crp_off_clear(&t);
    /* a pattern matching every key: the disk-only ones and the memory ones go */
    assert_int_equal(crk_remove_by_regex(f.s, "^k", true, f.now, &removed), 0);
    assert_true(removed >= n - 1);
    for (size_t i = 1; i < n; i++) {
        assert_int_equal(crk_exist(f.s, res[i].key, f.now), 0);
        assert_int_equal(crk_query_key(f.s, res[i].key, f.now, &ki), CR_OBJECT_NOT_FOUND);
    }
    for (size_t i = 0; i < n; i++)
        free(res[i].key);
    crk_service_destroy(f.s);
}

static size_t count_tasks(const crp_off_msg *m, uint8_t kind)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n_items; i++)
        n += m->items[i].kind == kind;
    return n;
}

/* --offloading_queue_limit: at most that many offloads wait for a holder; an eviction
 * beyond it keeps the object in memory (Mooncake's default, without --offload_force_evict)
 * and the next round queues more once the holder has taken the first ones. */
static void test_offloading_queue_limit(void **state)
{
    (void)state;
    crk_config c = tu_config();
    c.offloading_queue_limit = 3;
    fixture f = setup_with(c);
    crp_off_msg t;
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    fill(&f, 14);
    uint64_t keys = 0;
    crk_evict_round(f.s, 8 * VAL, f.now, &keys); /* 8 victims: 3 taken, 5 kept */
    crk_off_stats st;
    crk_off_get_stats(f.s, &st);
    assert_true(st.evictions_kept >= 5);
    assert_int_equal(st.evictions_forced, 0);
    int present = 0;
    for (int i = 0; i < 14; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i);
        present += crk_exist(f.s, key, f.now) == 1;
    }
    assert_int_equal(present, 14); /* nothing dropped */
    beat(&f, NULL, 0, &t);
    assert_int_equal(count_tasks(&t, CRP_OFF_OFFLOAD), 3);
    char first[3][32];
    for (size_t i = 0, j = 0; i < t.n_items; i++)
        if (t.items[i].kind == CRP_OFF_OFFLOAD)
            snprintf(first[j++], sizeof(first[0]), "%s", t.items[i].key);
    crp_off_clear(&t);
    /* the holder took them: the next round queues 3 more, other keys */
    crk_evict_round(f.s, 8 * VAL, f.now, &keys);
    beat(&f, NULL, 0, &t);
    assert_int_equal(count_tasks(&t, CRP_OFF_OFFLOAD), 3);
    for (size_t i = 0; i < t.n_items; i++)
        for (int j = 0; j < 3; j++)
            assert_string_not_equal(t.items[i].key, first[j]);
    crp_off_clear(&t);
    crk_service_destroy(f.s);
}

/* --offload_force_evict with --offload_cap_ratio: a round queues at most limit * ratio
 * offloads and drops the rest of its victims. */
static void test_force_evict_cap(void **state)
{
    (void)state;
    crk_config c = tu_config();
    c.offload_force_evict = true;
    c.offloading_queue_limit = 4;
    c.offload_cap_ratio = 0.5;
    fixture f = setup_with(c);
    crp_off_msg t;
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    fill(&f, 14);
    uint64_t keys = 0;
    crk_evict_round(f.s, 8 * VAL, f.now, &keys);
    crk_off_stats st;
    crk_off_get_stats(f.s, &st);
    assert_int_equal(st.evictions_forced, 6);
    assert_int_equal(st.evictions_kept, 0);
    int present = 0;
    for (int i = 0; i < 14; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i);
        present += crk_exist(f.s, key, f.now) == 1;
    }
    assert_int_equal(present, 14 - 6);
    beat(&f, NULL, 0, &t);
    assert_int_equal(count_tasks(&t, CRP_OFF_OFFLOAD), 2);
    crp_off_clear(&t);
    crk_service_destroy(f.s);
}

/* --promotion_queue_limit and --promotion_max_per_heartbeat. */
static void test_promotion_limits(void **state)
{
    (void)state;
    crk_config c = tu_config();
    c.promotion_on_hit = true;
    c.promotion_admission_threshold = 1;
    c.promotion_queue_limit = 2;
    c.promotion_max_per_heartbeat = 1;
    fixture f = setup_with(c);
    crp_off_msg t;
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    fill(&f, 14);
    uint64_t keys = 0;
    crk_evict_round(f.s, 3 * VAL, f.now, &keys);
    beat(&f, NULL, 0, &t);
    crp_off_item res[3];
    size_t n = 0;
    for (size_t i = 0; i < t.n_items && n < 3; i++)
        if (t.items[i].kind == CRP_OFF_OFFLOAD)
            res[n++] = (crp_off_item){
                CRP_OFF_OFFLOAD, 0, strdup(t.items[i].key), t.items[i].version, 0, VAL, 0};
    assert_int_equal(n, 3);
    crp_off_clear(&t);
    beat(&f, res, 3, &t);
    crp_off_clear(&t);
    crk_replica_list l;
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(crk_get_replica_list(f.s, res[i].key, f.now, &l), CR_ERR_OFFLOAD_STAGING);
    crk_off_stats st;
    crk_off_get_stats(f.s, &st);
    assert_int_equal(st.promotions_in_flight, 2); /* the third waits for room */
    /* one promotion per reply; `more` says the rest wait */
    size_t promos = 0;
    const char *promoted = NULL;
    for (int round = 0; round < 4; round++) {
        beat(&f, NULL, 0, &t);
        size_t k = count_tasks(&t, CRP_OFF_PROMOTE);
        assert_true(k <= 1);
        if (k == 1 && promoted == NULL) {
            for (size_t i = 0; i < 3; i++)
                if (find_task(&t, CRP_OFF_PROMOTE, res[i].key) != NULL)
                    promoted = res[i].key;
        }
        promos += k;
        crp_off_clear(&t);
    }
    assert_int_equal(promos, 2);
    assert_non_null(promoted);
    /* one finishes: the third key's next hit queues its promotion */
    crp_off_item done = {CRP_OFF_PROMOTE, 0, (char *)promoted, 0, 0, VAL, 0};
    for (size_t i = 0; i < 3; i++)
        if (strcmp(res[i].key, promoted) == 0)
            done.version = res[i].version;
    beat(&f, &done, 1, &t);
    crp_off_clear(&t);
    crk_off_get_stats(f.s, &st);
    assert_int_equal(st.promotions_in_flight, 1);
    f.now += 3000;
    for (size_t i = 0; i < 3; i++)
        (void)crk_get_replica_list(f.s, res[i].key, f.now, &l);
    crk_off_get_stats(f.s, &st);
    assert_int_equal(st.promotions_in_flight, 2);
    for (size_t i = 0; i < 3; i++)
        free(res[i].key);
    crk_service_destroy(f.s);
}

static void test_stale_and_failed_results(void **state)
{
    (void)state;
    fixture f = setup_fx(true);
    crp_off_msg t;
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    fill(&f, 20);
    beat(&f, NULL, 0, &t);
    const crp_off_item *a = NULL, *b = NULL;
    for (size_t i = 0; i < t.n_items; i++) {
        if (t.items[i].kind != CRP_OFF_OFFLOAD)
            continue;
        if (a == NULL)
            a = &t.items[i];
        else if (b == NULL)
            b = &t.items[i];
    }
    assert_non_null(a);
    assert_non_null(b);
    char *ka = strdup(a->key), *kb = strdup(b->key);
    uint64_t va = a->version, vb = b->version;
    crp_off_clear(&t);
    /* a result naming another version: refused, the holder told to drop it */
    crp_off_item wrong = {CRP_OFF_OFFLOAD, 0, ka, va + 12345, 0, VAL, 0};
    beat(&f, &wrong, 1, &t);
    assert_non_null(find_task(&t, CRP_OFF_REMOVE, ka));
    crp_off_clear(&t);
    assert_int_equal(crk_query_key(f.s, ka, f.now, &(crk_key_info){0}), 0); /* still in memory */
    /* a failed write: the object is evicted as it would have been without a tier */
    crp_off_item failed = {CRP_OFF_OFFLOAD, CR_ERR_DISK_FULL, kb, vb, 0, VAL, 0};
    beat(&f, &failed, 1, &t);
    crp_off_clear(&t);
    assert_int_equal(crk_exist(f.s, kb, f.now), 0);
    /* the holder falls silent: its disk-only keys are unavailable, not wrong */
    crp_off_item ok = {CRP_OFF_OFFLOAD, 0, ka, va, 0, VAL, 0};
    beat(&f, &ok, 1, &t);
    crp_off_clear(&t);
    f.now += 11000;
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(f.s, ka, f.now, &l), CR_ERR_OFFLOAD_UNAVAILABLE);
    /* its successor (a new client id) re-announces the record: readable again */
    f.holder = tu_client(9);
    crp_off_item ann = {CRP_OFF_ANNOUNCE, 0, ka, va, 0, VAL, 0};
    beat(&f, &ann, 1, &t);
    assert_null(find_task(&t, CRP_OFF_REMOVE, ka));
    crp_off_clear(&t);
    assert_int_equal(crk_get_replica_list(f.s, ka, f.now, &l), CR_ERR_OFFLOAD_STAGING);
    free(ka);
    free(kb);
    crk_service_destroy(f.s);
}

/* After an HA promotion a holder known only from the restored disk entries takes offloads
 * like one that sent a heartbeat (its record had a zero --offloading_queue_limit, so every
 * eviction kept its objects in memory until the holder's first heartbeat came in). */
static void test_restored_holder_takes_offloads(void **state)
{
    (void)state;
    fixture f = setup_fx(true);
    assert_int_equal(crk_off_restore_disk(f.s, "restored", 8, f.holder, "holder:1", 1, VAL, f.now),
                     0);
    fill(&f, 20); /* 16 fit: evictions queue offloads to the restored holder */
    crp_off_msg t;
    beat(&f, NULL, 0, &t);
    assert_non_null(find_task(&t, CRP_OFF_OFFLOAD, "k0"));
    crp_off_clear(&t);
    crk_service_destroy(f.s);
}

static void test_foreign_announce_and_refusals(void **state)
{
    (void)state;
    fixture f = setup_fx(true);
    crp_off_msg t;
    /* after a master restart: a key this master never heard of, with another instance's
     * version, is accepted; one with a version of ours is not */
    crp_off_item ann[2] = {{CRP_OFF_ANNOUNCE, 0, "old", 1, 0, VAL, 0}, {0}};
    beat(&f, ann, 1, &t);
    assert_null(find_task(&t, CRP_OFF_REMOVE, "old"));
    crp_off_clear(&t);
    assert_int_equal(crk_exist(f.s, "old", f.now), 1);
    /* garbage bodies: a named error, nothing changes */
    crp_buf reply = {0};
    uint8_t junk[] = {0x81, 0xa2, 'i', 't', 0x91, 0x01};
    assert_int_equal(crk_off_heartbeat(f.s, f.holder, junk, sizeof(junk), f.now, &reply),
                     CR_ERR_MALFORMED_FRAME);
    assert_int_equal(crk_off_heartbeat(f.s, (crk_client_id){0, 0}, junk, 0, f.now, &reply),
                     CR_ILLEGAL_CLIENT);
    crp_buf_free(&reply);
    crk_service_destroy(f.s);
    /* without --enable_offload the op is refused */
    crk_service *s = tu_service(NULL, 1);
    assert_int_equal(crk_off_heartbeat(s, tu_client(1), junk, 0, 1, &reply), CR_NOT_SUPPORTED);
    crk_service_destroy(s);
}

/* Index of key's task of kind in m, or m->n_items when absent. */
static size_t task_index(const crp_off_msg *m, uint8_t kind, const char *key)
{
    for (size_t i = 0; i < m->n_items; i++)
        if (m->items[i].kind == kind && strcmp(m->items[i].key, key) == 0)
            return i;
    return m->n_items;
}

/* Early write-behind (offload_on_evict): puts that complete while the memory is more than
 * half full get their disk copy written at once, at most a quarter of the capacity in flight;
 * an eviction's own offloads go ahead of them; an evicted object whose copy landed is dropped
 * at once (no round trip through the holder). */
static void test_early_write_behind(void **state)
{
    (void)state;
    unsetenv("CRESCENT_OFFLOAD_EARLY_RATIO"); /* the default, 0.5 */
    fixture f = setup_fx(true);
    crp_off_msg t;
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    fill(&f, 8); /* k0..k7: exactly half the segment: no copy */
    beat(&f, NULL, 0, &t);
    assert_int_equal(count_tasks(&t, CRP_OFF_OFFLOAD), 0);
    crp_off_clear(&t);
    crk_replicate_config cfg = tu_cfg(1);
    char key[32];
    for (int i = 8; i < 14; i++) { /* k8..k13: past half: copies, 4 in flight at most */
        snprintf(key, sizeof(key), "k%d", i);
        f.now += 10;
        assert_int_equal(tu_put(f.s, f.holder, key, VAL, &cfg, f.now), 0);
    }
    beat(&f, NULL, 0, &t);
    assert_int_equal(count_tasks(&t, CRP_OFF_OFFLOAD), 4);
    crp_off_item res[4];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "k%d", 8 + i);
        const crp_off_item *o = find_task(&t, CRP_OFF_OFFLOAD, key);
        assert_non_null(o);
        assert_true(o->size == VAL && o->addr >= BASE && o->addr < BASE + SEG);
        res[i] = (crp_off_item){CRP_OFF_OFFLOAD, 0, strdup(key), o->version, 0, VAL, 0};
    }
    crp_off_clear(&t);
    beat(&f, res, 4, &t); /* the copies landed: the objects stay in memory */
    assert_int_equal(count_tasks(&t, CRP_OFF_OFFLOAD), 0);
    crp_off_clear(&t);
    for (int i = 0; i < 4; i++)
        free((char *)res[i].key);
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(f.s, "k8", f.now, &l), 0);
    assert_true(l.r[0].mount_epoch != 0);
    assert_int_equal(crk_off_exist(f.s, "k8", 2), 1);
    /* room again: the next put is copied too */
    f.now += 20000;        /* past the lease of the get above */
    beat(&f, NULL, 0, &t); /* (the holder stays live) */
    crp_off_clear(&t);
    assert_int_equal(tu_put(f.s, f.holder, "k14", VAL, &cfg, f.now), 0);
    assert_int_equal(tu_put(f.s, f.holder, "k15", VAL, &cfg, f.now), 0);
    crk_off_stats st;
    crk_off_get_stats(f.s, &st);
    assert_int_equal(st.early_writes, 6); /* k8..k11, k14, k15 */
    /* full: the put evicts k0 and k1 (no copies): their offloads come first */
    f.now += 10;
    int rc = tu_put(f.s, f.holder, "k16", VAL, &cfg, f.now);
    assert_true(rc == 0 || rc == CR_NO_AVAILABLE_HANDLE);
    beat(&f, NULL, 0, &t);
    size_t i0 = task_index(&t, CRP_OFF_OFFLOAD, "k0"), i14 = task_index(&t, CRP_OFF_OFFLOAD, "k14");
    assert_true(i0 < t.n_items && i14 < t.n_items && i0 < i14);
    crp_off_clear(&t);
    /* removing a copied key drops its copy: never served from disk */
    assert_int_equal(crk_remove(f.s, "k9", false, f.now), 0);
    assert_int_equal(crk_off_exist(f.s, "k9", 2), 0);
    assert_int_equal(crk_get_replica_list(f.s, "k9", f.now, &l), CR_OBJECT_NOT_FOUND);
    crk_service_destroy(f.s);

    /* CRESCENT_OFFLOAD_EARLY_RATIO=0: every put is copied; once the memory is full an
     * eviction of copied objects frees their memory at once, so the put succeeds at once */
    setenv("CRESCENT_OFFLOAD_EARLY_RATIO", "0", 1);
    f = setup_fx(true);
    unsetenv("CRESCENT_OFFLOAD_EARLY_RATIO");
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        f.now += 10;
        assert_int_equal(tu_put(f.s, f.holder, key, VAL, &cfg, f.now), 0);
        beat(&f, NULL, 0, &t);
        const crp_off_item *o = find_task(&t, CRP_OFF_OFFLOAD, key);
        assert_non_null(o);
        crp_off_item r1 = {CRP_OFF_OFFLOAD, 0, key, o->version, 0, VAL, 0};
        crp_off_msg t2;
        beat(&f, &r1, 1, &t2);
        crp_off_clear(&t2);
        crp_off_clear(&t);
    }
    f.now += 10;
    assert_int_equal(tu_put(f.s, f.holder, "k16", VAL, &cfg, f.now), 0);
    assert_int_equal(crk_get_replica_list(f.s, "k0", f.now, &l), CR_ERR_OFFLOAD_STAGING);
    crk_service_destroy(f.s);

    /* early copies take at most half of --offloading_queue_limit: evictions find room */
    crk_config c = tu_config();
    c.offloading_queue_limit = 4;
    setenv("CRESCENT_OFFLOAD_EARLY_RATIO", "0", 1);
    f = setup_with(c);
    unsetenv("CRESCENT_OFFLOAD_EARLY_RATIO");
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    fill(&f, 6);
    crk_off_get_stats(f.s, &st);
    assert_int_equal(st.early_writes, 2);
    crk_service_destroy(f.s);

    /* an early copy that failed (a full disk) pauses early copies to that holder for a while;
     * the object stays in memory */
    setenv("CRESCENT_OFFLOAD_EARLY_RATIO", "0", 1);
    f = setup_fx(true);
    unsetenv("CRESCENT_OFFLOAD_EARLY_RATIO");
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    assert_int_equal(tu_put(f.s, f.holder, "p0", VAL, &cfg, f.now), 0);
    beat(&f, NULL, 0, &t);
    const crp_off_item *p0 = find_task(&t, CRP_OFF_OFFLOAD, "p0");
    assert_non_null(p0);
    crp_off_item full = {CRP_OFF_OFFLOAD, CR_ERR_DISK_FULL, "p0", p0->version, 0, VAL, 0};
    crp_off_clear(&t);
    beat(&f, &full, 1, &t);
    crp_off_clear(&t);
    assert_int_equal(crk_exist(f.s, "p0", f.now), 1);
    assert_int_equal(crk_off_exist(f.s, "p0", 2), 0);
    assert_int_equal(tu_put(f.s, f.holder, "p1", VAL, &cfg, f.now), 0);
    beat(&f, NULL, 0, &t);
    assert_null(find_task(&t, CRP_OFF_OFFLOAD, "p1"));
    crp_off_clear(&t);
    f.now += 1500;
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    assert_int_equal(tu_put(f.s, f.holder, "p2", VAL, &cfg, f.now), 0);
    beat(&f, NULL, 0, &t);
    assert_non_null(find_task(&t, CRP_OFF_OFFLOAD, "p2"));
    crp_off_clear(&t);
    crk_service_destroy(f.s);
}

static void test_write_behind(void **state)
{
    (void)state;
    fixture f = setup_fx(false); /* --enable_offload without --offload_on_evict */
    crp_off_msg t;
    beat(&f, NULL, 0, &t);
    crp_off_clear(&t);
    crk_replicate_config cfg = tu_cfg(1);
    assert_int_equal(tu_put(f.s, f.holder, "wb", VAL, &cfg, f.now), 0);
    beat(&f, NULL, 0, &t);
    const crp_off_item *o = find_task(&t, CRP_OFF_OFFLOAD, "wb");
    assert_non_null(o);
    crp_off_item res = {CRP_OFF_OFFLOAD, 0, "wb", o->version, 0, VAL, 0};
    crp_off_clear(&t);
    beat(&f, &res, 1, &t);
    crp_off_clear(&t);
    /* memory and disk: gets read memory; eviction only drops the memory copy */
    crk_replica_list l;
    assert_int_equal(crk_get_replica_list(f.s, "wb", f.now, &l), 0);
    assert_true(l.r[0].mount_epoch != 0);
    f.now += 20000;
    fill(&f, 20);
    assert_int_equal(crk_exist(f.s, "wb", f.now), 1);
    crk_service_destroy(f.s);
}

int main(void)
{
    /* The tests before test_early_write_behind check eviction-time offloads alone. */
    setenv("CRESCENT_OFFLOAD_EARLY_RATIO", "1", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offload_then_stage),
        cmocka_unit_test(test_second_stage_keeps_read_copy),
        cmocka_unit_test(test_remove_and_upsert),
        cmocka_unit_test(test_remove_by_regex_on_disk),
        cmocka_unit_test(test_offloading_queue_limit),
        cmocka_unit_test(test_force_evict_cap),
        cmocka_unit_test(test_promotion_limits),
        cmocka_unit_test(test_stale_and_failed_results),
        cmocka_unit_test(test_foreign_announce_and_refusals),
        cmocka_unit_test(test_restored_holder_takes_offloads),
        cmocka_unit_test(test_write_behind),
        cmocka_unit_test(test_early_write_behind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
