/*
 * store_session_test.c - get and put sessions (cr_store_sessions, the
 * layer-wise ranged API) against a crescent-master child whose read lease
 * is 800 ms: a writer and a reader cr_store in this process, each with its
 * own engine and segment (the reader reads the writer's segment through
 * shared memory).
 *
 *   layerwise_round_trip  a put session per key, one ranged write per layer
 *       (4 layers of 4 KiB from 4 registered buffers), end; the object is
 *       invisible until the end. A get session per key, one ranged read per
 *       layer into other buffers, plus a call with two fragments out of
 *       order: every byte checked. Ranged reads cost no master request (at
 *       most one lease renewal over the four), starts cost one batch
 *       request each. After get_session_end a ranged read is INVALID_PARAMS.
 *   session_errors  ranged calls without a session, past the object's end
 *       or with NULL fragment arrays are INVALID_PARAMS for that key only;
 *       a second start of a key (same call or later) is INVALID_PARAMS, a
 *       start on a complete key OBJECT_ALREADY_EXISTS; after end the
 *       session is sealed (ranged write INVALID_PARAMS, second end
 *       INVALID_PARAMS); revoke drops the object (get: OBJECT_NOT_FOUND);
 *       a get session of a missing key is OBJECT_NOT_FOUND.
 *   lease_held_for_session  ranged reads every ~100 ms for 2.4 s (three
 *       lease lengths) all succeed and a plain remove meanwhile is
 *       OBJECT_HAS_LEASE; left idle past the lease, the next ranged read is
 *       LEASE_EXPIRED and the session is gone.
 *   replaced_object_expires  after an upsert of the key, the session keeps
 *       reading the old bytes (never the new ones) until its lease ends,
 *       then LEASE_EXPIRED: the renewal refuses a different replica.
 *   destroy_revokes  a put session left open is revoked when the table is
 *       destroyed: a new put of the key succeeds at once (it is not busy).
 *   end_drains_concurrent_writes  four threads rewrite their pages of one
 *       put session in a loop while the main thread ends it: end returns 0,
 *       every writer then sees INVALID_PARAMS (sealed), and the object reads
 *       back whole (end waited for the writes in flight).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crescent/store.h"
#include "store_harness.h"
#include "store_pattern.h"

#define LEASE_MS 800
#define LAYERS   4
#define PAGE     4096

static sh_master master;

static cr_store *open_store(void)
{
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = master.addr;
    cfg.global_segment_size = 16 << 20;
    cfg.local_buffer_size = 1 << 20;
    cr_store *s = NULL;
    assert_int_equal(cr_store_setup(&cfg, &s), 0);
    return s;
}

static double requests(const char *op)
{
    char name[128];
    snprintf(name, sizeof(name), "master_requests_total{op=\"%s\"}", op);
    double v = sh_metric(&master, name);
    return v < 0 ? 0 : v;
}

static int setup(void **state)
{
    (void)state;
    static const char *const args[] = {"--default_kv_lease_ttl=800ms", NULL};
    return sh_master_start(&master, args);
}

static int teardown(void **state)
{
    (void)state;
    int rc = sh_master_stop(&master);
    sh_kill_all();
    return rc;
}

/* A writer and a reader with a registered region each. */
typedef struct pair {
    cr_store *w, *r;
    cr_store_sessions *wt, *rt;
    uint8_t *wreg, *rreg;
    size_t region;
} pair;

static void pair_open(pair *p)
{
    p->w = open_store();
    p->r = open_store();
    assert_int_equal(cr_store_sessions_create(p->w, &p->wt), 0);
    assert_int_equal(cr_store_sessions_create(p->r, &p->rt), 0);
    p->region = 1 << 20;
    p->wreg = aligned_alloc(4096, p->region);
    p->rreg = aligned_alloc(4096, p->region);
    assert_non_null(p->wreg);
    assert_non_null(p->rreg);
    assert_int_equal(cr_store_register_buffer(p->w, p->wreg, p->region), 0);
    assert_int_equal(cr_store_register_buffer(p->r, p->rreg, p->region), 0);
}

static void pair_close(pair *p)
{
    cr_store_sessions_destroy(p->wt);
    cr_store_sessions_destroy(p->rt);
    cr_store_unregister_buffer(p->w, p->wreg);
    cr_store_unregister_buffer(p->r, p->rreg);
    cr_store_destroy(p->w);
    cr_store_destroy(p->r);
    free(p->wreg);
    free(p->rreg);
}

/* Write key's layer `layer` (PAGE bytes of value seed) through the put session. */
static int64_t put_layer(pair *p, const char *key, int layer, uint64_t seed)
{
    uint8_t *src = p->wreg + (size_t)layer * PAGE;
    uint8_t whole[LAYERS * PAGE];
    sp_fill(whole, sizeof(whole), seed);
    memcpy(src, whole + (size_t)layer * PAGE, PAGE);
    void *bufs[1] = {src};
    size_t sizes[1] = {PAGE};
    uint64_t offs[1] = {(uint64_t)layer * PAGE};
    void *const *b[1] = {bufs};
    const size_t *sz[1] = {sizes};
    const uint64_t *of[1] = {offs};
    size_t counts[1] = {1};
    const char *keys[1] = {key};
    int64_t res[1] = {0};
    assert_int_equal(cr_store_batch_put_ranges(p->wt, keys, b, sz, of, counts, 1, res), 0);
    return res[0];
}

/* Read key's layer into the reader's region at layer*PAGE; the result. */
static int64_t get_layer(pair *p, const char *key, int layer)
{
    void *bufs[1] = {p->rreg + (size_t)layer * PAGE};
    size_t sizes[1] = {PAGE};
    uint64_t offs[1] = {(uint64_t)layer * PAGE};
    void *const *b[1] = {bufs};
    const size_t *sz[1] = {sizes};
    const uint64_t *of[1] = {offs};
    size_t counts[1] = {1};
    const char *keys[1] = {key};
    int64_t res[1] = {0};
    assert_int_equal(cr_store_batch_get_ranges(p->rt, keys, b, sz, of, counts, 1, res), 0);
    return res[0];
}

/* Put a whole 4-layer object with seed through a put session. */
static void put_object(pair *p, const char *key, uint64_t seed)
{
    const char *keys[1] = {key};
    uint64_t size = LAYERS * PAGE;
    int res[1];
    assert_int_equal(cr_store_put_session_start(p->wt, keys, &size, 1, NULL, res), 0);
    assert_int_equal(res[0], 0);
    for (int l = 0; l < LAYERS; l++)
        assert_int_equal(put_layer(p, key, l, seed), PAGE);
    assert_int_equal(cr_store_put_session_end(p->wt, keys, 1, res), 0);
    assert_int_equal(res[0], 0);
}

static void layerwise_round_trip(void **state)
{
    (void)state;
    pair p;
    pair_open(&p);
    const char *keys[2] = {"sess/a", "sess/b"};
    uint64_t sizes[2] = {LAYERS * PAGE, LAYERS * PAGE};
    int res[2];
    double starts0 = requests("batch_put_start"), single0 = requests("put_start");
    assert_int_equal(cr_store_put_session_start(p.wt, keys, sizes, 2, NULL, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], 0);
    assert_true(requests("batch_put_start") - starts0 == 1);
    assert_true(requests("put_start") == single0);
    for (int l = 0; l < LAYERS; l++) {
        assert_int_equal(put_layer(&p, "sess/a", l, 11), PAGE);
        assert_int_equal(put_layer(&p, "sess/b", l, 22), PAGE);
        /* Not readable before the end. */
        assert_int_equal(cr_store_exist(p.r, "sess/a"), 0);
    }
    assert_int_equal(cr_store_put_session_end(p.wt, keys, 2, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], 0);
    assert_int_equal(cr_store_exist(p.r, "sess/a"), 1);

    double gets0 = requests("batch_get_replica_list");
    assert_int_equal(cr_store_get_session_start(p.rt, keys, 2, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], 0);
    double gets1 = requests("batch_get_replica_list");
    assert_true(gets1 - gets0 == 1);
    uint8_t expect[LAYERS * PAGE];
    for (int k = 0; k < 2; k++) {
        memset(p.rreg, 0, LAYERS * PAGE);
        for (int l = 0; l < LAYERS; l++)
            assert_int_equal(get_layer(&p, keys[k], l), PAGE);
        sp_fill(expect, sizeof(expect), k == 0 ? 11 : 22);
        assert_memory_equal(p.rreg, expect, sizeof(expect));
    }
    /* Eight ranged calls: at most one lease renewal, never one request per call. */
    assert_true(requests("batch_get_replica_list") - gets1 <= 1);

    /* Two fragments of both keys in one call, out of order, at odd offsets. */
    memset(p.rreg, 0, 4 * PAGE);
    void *fa[2] = {p.rreg, p.rreg + 100}, *fb[2] = {p.rreg + 2 * PAGE, p.rreg + 3 * PAGE};
    size_t za[2] = {100, 3000}, zb[2] = {1, PAGE};
    uint64_t oa[2] = {5000, 17}, ob[2] = {LAYERS * PAGE - 1, 0};
    void *const *b[2] = {fa, fb};
    const size_t *z[2] = {za, zb};
    const uint64_t *o[2] = {oa, ob};
    size_t counts[2] = {2, 2};
    int64_t got[2];
    assert_int_equal(cr_store_batch_get_ranges(p.rt, keys, b, z, o, counts, 2, got), 0);
    assert_int_equal(got[0], 3100);
    assert_int_equal(got[1], PAGE + 1);
    sp_fill(expect, sizeof(expect), 11);
    assert_memory_equal(p.rreg, expect + 5000, 100);
    assert_memory_equal(p.rreg + 100, expect + 17, 3000);
    sp_fill(expect, sizeof(expect), 22);
    assert_memory_equal(p.rreg + 2 * PAGE, expect + LAYERS * PAGE - 1, 1);
    assert_memory_equal(p.rreg + 3 * PAGE, expect, PAGE);

    assert_int_equal(cr_store_get_session_end(p.rt, keys, 2), 0);
    assert_int_equal(get_layer(&p, "sess/a", 0), CR_INVALID_PARAMS);
    pair_close(&p);
}

static void session_errors(void **state)
{
    (void)state;
    pair p;
    pair_open(&p);
    /* No session. */
    assert_int_equal(put_layer(&p, "err/none", 0, 1), CR_INVALID_PARAMS);
    assert_int_equal(get_layer(&p, "err/none", 0), CR_INVALID_PARAMS);
    const char *none[1] = {"err/none"};
    int r1[1];
    assert_int_equal(cr_store_put_session_end(p.wt, none, 1, r1), 0);
    assert_int_equal(r1[0], CR_INVALID_PARAMS);
    assert_int_equal(cr_store_put_session_revoke(p.wt, none, 1, r1), 0);
    assert_int_equal(r1[0], CR_INVALID_PARAMS);
    assert_int_equal(cr_store_get_session_start(p.rt, none, 1, r1), 0);
    assert_int_equal(r1[0], CR_OBJECT_NOT_FOUND);

    /* Same key twice in one start; a later start of an open one. */
    const char *dup[3] = {"err/d", "err/d", "err/e"};
    uint64_t sizes[3] = {LAYERS * PAGE, LAYERS * PAGE, LAYERS * PAGE};
    int r3[3];
    assert_int_equal(cr_store_put_session_start(p.wt, dup, sizes, 3, NULL, r3), 0);
    assert_int_equal(r3[0], 0);
    assert_int_equal(r3[1], CR_INVALID_PARAMS);
    assert_int_equal(r3[2], 0);
    assert_int_equal(cr_store_put_session_start(p.wt, dup, sizes, 1, NULL, r1), 0);
    assert_int_equal(r1[0], CR_INVALID_PARAMS);

    /* Ranges past the end, NULL fragment arrays: that key only. */
    uint8_t *src = p.wreg;
    void *bufs[1] = {src};
    size_t past[1] = {PAGE + 1};
    uint64_t at_end[1] = {(LAYERS - 1) * PAGE};
    size_t ok_size[1] = {PAGE};
    uint64_t ok_off[1] = {0};
    const char *two[2] = {"err/d", "err/e"};
    void *const *b[2] = {bufs, bufs};
    const size_t *z[2] = {past, ok_size};
    const uint64_t *o[2] = {at_end, ok_off};
    size_t counts[2] = {1, 1};
    int64_t got[2];
    assert_int_equal(cr_store_batch_put_ranges(p.wt, two, b, z, o, counts, 2, got), 0);
    assert_int_equal(got[0], CR_INVALID_PARAMS);
    assert_int_equal(got[1], PAGE);
    void *const *nb[2] = {NULL, bufs};
    assert_int_equal(cr_store_batch_put_ranges(p.wt, two, nb, z, o, counts, 2, got), 0);
    assert_int_equal(got[0], CR_INVALID_PARAMS);
    assert_int_equal(got[1], PAGE);
    size_t zero_counts[2] = {0, 1};
    assert_int_equal(cr_store_batch_put_ranges(p.wt, two, nb, z, o, zero_counts, 2, got), 0);
    assert_int_equal(got[0], 0); /* no fragments: nothing moved, no error */

    /* End seals: ranged writes and a second end fail; the object is readable. */
    assert_int_equal(cr_store_put_session_end(p.wt, two, 1, r1), 0);
    assert_int_equal(r1[0], 0);
    assert_int_equal(put_layer(&p, "err/d", 0, 1), CR_INVALID_PARAMS);
    assert_int_equal(cr_store_put_session_end(p.wt, two, 1, r1), 0);
    assert_int_equal(r1[0], CR_INVALID_PARAMS);
    assert_int_equal(cr_store_exist(p.r, "err/d"), 1);
    /* A start on a complete key. */
    assert_int_equal(cr_store_put_session_start(p.wt, two, sizes, 1, NULL, r1), 0);
    assert_int_equal(r1[0], CR_OBJECT_ALREADY_EXISTS);

    /* Revoke: the object never appears; the session is gone. */
    assert_int_equal(cr_store_put_session_revoke(p.wt, two + 1, 1, r1), 0);
    assert_int_equal(r1[0], 0);
    void *v = NULL;
    assert_int_equal(cr_store_get(p.r, "err/e", &v), CR_OBJECT_NOT_FOUND);
    assert_int_equal(cr_store_put_session_revoke(p.wt, two + 1, 1, r1), 0);
    assert_int_equal(r1[0], CR_INVALID_PARAMS);

    /* Get ranges past the end of a real object. */
    assert_int_equal(cr_store_get_session_start(p.rt, two, 1, r1), 0);
    assert_int_equal(r1[0], 0);
    void *dst[1] = {p.rreg};
    void *const *db[1] = {dst};
    const size_t *dz[1] = {past};
    const uint64_t *dof[1] = {at_end};
    int64_t g1[1];
    assert_int_equal(cr_store_batch_get_ranges(p.rt, two, db, dz, dof, counts, 1, g1), 0);
    assert_int_equal(g1[0], CR_INVALID_PARAMS);
    /* Whole-call errors leave results alone. */
    assert_int_equal(cr_store_batch_get_ranges(p.rt, two, NULL, dz, dof, counts, 1, g1),
                     CR_INVALID_PARAMS);
    assert_int_equal(cr_store_get_session_end(p.rt, two, 1), 0);
    pair_close(&p);
}

static void lease_held_for_session(void **state)
{
    (void)state;
    pair p;
    pair_open(&p);
    put_object(&p, "lease/k", 33);
    const char *keys[1] = {"lease/k"};
    int r1[1];
    assert_int_equal(cr_store_get_session_start(p.rt, keys, 1, r1), 0);
    assert_int_equal(r1[0], 0);
    uint8_t expect[LAYERS * PAGE];
    sp_fill(expect, sizeof(expect), 33);
    uint64_t until = sh_now_ms() + 3 * LEASE_MS;
    int rounds = 0;
    while (sh_now_ms() < until) {
        int l = rounds % LAYERS;
        assert_int_equal(get_layer(&p, "lease/k", l), PAGE);
        assert_memory_equal(p.rreg + l * PAGE, expect + l * PAGE, PAGE);
        if (rounds == 12)
            assert_int_equal(cr_store_remove(p.w, "lease/k", false), CR_OBJECT_HAS_LEASE);
        rounds++;
        sh_sleep_ms(100);
    }
    assert_true(rounds >= 10);
    sh_sleep_ms(LEASE_MS + 400); /* idle: the lease runs out */
    assert_int_equal(get_layer(&p, "lease/k", 0), CR_LEASE_EXPIRED);
    assert_int_equal(get_layer(&p, "lease/k", 0), CR_INVALID_PARAMS);
    assert_int_equal(cr_store_remove(p.w, "lease/k", false), 0);
    pair_close(&p);
}

static void replaced_object_expires(void **state)
{
    (void)state;
    pair p;
    pair_open(&p);
    put_object(&p, "repl/k", 44);
    const char *keys[1] = {"repl/k"};
    int r1[1];
    assert_int_equal(cr_store_get_session_start(p.rt, keys, 1, r1), 0);
    assert_int_equal(r1[0], 0);
    uint8_t fresh[LAYERS * PAGE], expect[LAYERS * PAGE];
    sp_fill(fresh, sizeof(fresh), 55);
    sp_fill(expect, sizeof(expect), 44);
    assert_int_equal(cr_store_upsert(p.w, "repl/k", fresh, sizeof(fresh), NULL), 0);
    uint64_t give_up = sh_now_ms() + 4 * LEASE_MS;
    int64_t rc = 0;
    int ok = 0;
    while (sh_now_ms() < give_up) {
        rc = get_layer(&p, "repl/k", 1);
        if (rc != PAGE)
            break;
        assert_memory_equal(p.rreg + PAGE, expect + PAGE, PAGE); /* never the new bytes */
        ok++;
        sh_sleep_ms(50);
    }
    assert_int_equal(rc, CR_LEASE_EXPIRED);
    assert_true(ok >= 1);
    pair_close(&p);
}

static void destroy_revokes(void **state)
{
    (void)state;
    pair p;
    pair_open(&p);
    const char *keys[1] = {"open/k"};
    uint64_t size = PAGE;
    int r1[1];
    assert_int_equal(cr_store_put_session_start(p.wt, keys, &size, 1, NULL, r1), 0);
    assert_int_equal(r1[0], 0);
    cr_store_sessions_destroy(p.wt);
    assert_int_equal(cr_store_sessions_create(p.w, &p.wt), 0);
    uint8_t v[16] = {1, 2, 3};
    assert_int_equal(cr_store_put(p.w, "open/k", v, sizeof(v), NULL), 0);
    void *out = NULL;
    assert_int_equal(cr_store_get(p.r, "open/k", &out), (int64_t)sizeof(v));
    assert_memory_equal(out, v, sizeof(v));
    free(out);
    pair_close(&p);
}

#define WRITERS          4
#define PAGES_PER_WRITER 8

typedef struct writer_arg {
    pair *p;
    int id;
    atomic_int *ready;
    int64_t last; /* the result that stopped it */
    int rounds;
} writer_arg;

static void *writer_main(void *v)
{
    writer_arg *a = v;
    const char *keys[1] = {"conc/k"};
    uint8_t *src = a->p->wreg + (size_t)a->id * PAGES_PER_WRITER * PAGE;
    for (;;) {
        void *bufs[PAGES_PER_WRITER];
        size_t sizes[PAGES_PER_WRITER];
        uint64_t offs[PAGES_PER_WRITER];
        for (int k = 0; k < PAGES_PER_WRITER; k++) {
            bufs[k] = src + (size_t)k * PAGE;
            sizes[k] = PAGE;
            offs[k] = ((uint64_t)a->id * PAGES_PER_WRITER + (uint64_t)k) * PAGE;
        }
        void *const *b[1] = {bufs};
        const size_t *z[1] = {sizes};
        const uint64_t *o[1] = {offs};
        size_t counts[1] = {PAGES_PER_WRITER};
        int64_t res[1];
        if (cr_store_batch_put_ranges(a->p->wt, keys, b, z, o, counts, 1, res) != 0 ||
            res[0] != PAGES_PER_WRITER * PAGE) {
            a->last = res[0];
            return NULL;
        }
        if (a->rounds++ == 0)
            atomic_fetch_add(a->ready, 1);
    }
}

static void end_drains_concurrent_writes(void **state)
{
    (void)state;
    pair p;
    pair_open(&p);
    uint64_t size = (uint64_t)WRITERS * PAGES_PER_WRITER * PAGE;
    sp_fill(p.wreg, size, 66);
    const char *keys[1] = {"conc/k"};
    int r1[1];
    assert_int_equal(cr_store_put_session_start(p.wt, keys, &size, 1, NULL, r1), 0);
    assert_int_equal(r1[0], 0);
    atomic_int ready = 0;
    pthread_t th[WRITERS];
    writer_arg args[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        args[i] = (writer_arg){&p, i, &ready, 0, 0};
        assert_int_equal(pthread_create(&th[i], NULL, writer_main, &args[i]), 0);
    }
    while (atomic_load(&ready) < WRITERS)
        sh_sleep_ms(5);
    sh_sleep_ms(30);
    assert_int_equal(cr_store_put_session_end(p.wt, keys, 1, r1), 0);
    assert_int_equal(r1[0], 0);
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].last, CR_INVALID_PARAMS);
        assert_true(args[i].rounds >= 1);
    }
    void *out = NULL;
    assert_int_equal(cr_store_get(p.r, "conc/k", &out), (int64_t)size);
    assert_memory_equal(out, p.wreg, size);
    free(out);
    pair_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(layerwise_round_trip),   cmocka_unit_test(session_errors),
        cmocka_unit_test(lease_held_for_session), cmocka_unit_test(replaced_object_expires),
        cmocka_unit_test(destroy_revokes),        cmocka_unit_test(end_drains_concurrent_writes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
