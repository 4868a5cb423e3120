/*
 * store_copy_test.c - the copying calls copy once (staging.c) against a
 * crescent-master child, two cr_stores in this process:
 *
 *   direct_tcp / direct_auto  with no local buffer at all (so nothing can be
 *       staged), put, put_parts, batch_put (a 3 MiB value, an empty one, a
 *       repeated key), get, batch_get and cr_store_get_alloc round-trip
 *       every byte over the tcp and the same-host (shm/local) paths; the
 *       engines count the transfers as unregistered requests, none refused;
 *       a copying batch put is one batch start (only the repeat alone).
 *   staged_mode  CRESCENT_STORE_COPY=staged stages again (no unregistered
 *       request; without a local buffer the copying calls are refused), a
 *       bad value of the variable fails setup.
 *   refused_falls_back  over ucx (UCX_TLS=tcp; skipped in builds without
 *       it), whose path needs registered memory: the engine refuses, the
 *       calls stage through the local buffer and still round-trip, and the
 *       refusal shows in the engine's "unregistered_refused" counter.
 *   get_alloc  the allocator is asked once for the value's size, is not
 *       asked for a miss, its failure is the call's, bad arguments refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crescent/engine.h"
#include "crescent/store.h"
#include "store_harness.h"
#include "store_pattern.h"

static sh_master master;

static int setup(void **state)
{
    (void)state;
    return sh_master_start(&master, NULL);
}

static int teardown(void **state)
{
    (void)state;
    int rc = sh_master_stop(&master);
    sh_kill_all();
    return rc;
}

static int open_store(const char *protocol, uint64_t local_buffer, cr_store **out)
{
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = master.addr;
    cfg.global_segment_size = 32 << 20;
    cfg.local_buffer_size = local_buffer;
    cfg.protocol = protocol;
    *out = NULL;
    return cr_store_setup(&cfg, out);
}

static double requests(const char *op)
{
    char name[128];
    snprintf(name, sizeof(name), "master_requests_total{op=\"%s\"}", op);
    double v = sh_metric(&master, name);
    return v < 0 ? 0 : v;
}

static uint64_t counter(cr_store *s, const char *transport, const char *name)
{
    cr_engine *e = cr_store_engine(s);
    cr_engine_counter c[128];
    size_t total = 0;
    assert_int_equal(cr_engine_counters(e, c, 128, &total), 0);
    uint64_t sum = 0;
    for (size_t i = 0; i < total && i < 128; i++)
        if (strcmp(c[i].transport, transport) == 0 && strcmp(c[i].name, name) == 0)
            sum += c[i].value;
    return sum;
}

#define NB 6

/* Every copying form, round-tripped between w and r. staged: the copying
 * batch put stages (values larger than the free local buffer go alone). */
static void round_trip(cr_store *w, cr_store *r, const char *tag, bool staged)
{
    char k1[32], k2[32], bk[NB][32];
    snprintf(k1, sizeof(k1), "%s-one", tag);
    snprintf(k2, sizeof(k2), "%s-parts", tag);
    size_t len1 = (1 << 20) + 3;
    uint8_t *v1 = malloc(len1);
    sp_fill(v1, len1, 11);
    int prc = cr_store_put(w, k1, v1, len1, NULL);
    if (prc != 0)
        fail_msg("put %s: %d %s", k1, prc, cr_last_error_message());

    /* put_parts: three parts, one empty */
    uint8_t *p0 = malloc(1000), *p2 = malloc(70000);
    sp_fill(p0, 1000, 12);
    sp_fill(p2, 70000, 13);
    const void *parts[3] = {p0, p0, p2};
    size_t psizes[3] = {1000, 0, 70000};
    prc = cr_store_put_parts(w, k2, parts, psizes, 3, NULL);
    if (prc != 0)
        fail_msg("put_parts %s: %d %s", k2, prc, cr_last_error_message());

    /* batch_put: a large value, an empty one, a repeated key (alone, second) */
    static const size_t blens[NB] = {100, 0, 3 << 20, 700 << 10, 4096, 100};
    const char *bkeys[NB];
    const void *bvals[NB];
    uint8_t *bdata[NB];
    for (int i = 0; i < NB; i++) {
        snprintf(bk[i], sizeof(bk[i]), "%s-b%d", tag, i == NB - 1 ? 0 : i);
        bkeys[i] = bk[i];
        bdata[i] = malloc(blens[i] + 1);
        sp_fill(bdata[i], blens[i], 20 + (uint64_t)i);
        bvals[i] = bdata[i];
    }
    int res[NB];
    double single0 = requests("put_start"), batch0 = requests("batch_put_start");
    assert_int_equal(cr_store_batch_put(w, bkeys, bvals, blens, NB, NULL, res), 0);
    for (int i = 0; i < NB; i++)
        assert_int_equal(res[i], 0);
    assert_true(requests("batch_put_start") == batch0 + 1);
    if (staged) /* the 3 MiB value alone, perhaps one 700 KiB one, the repeat */
        assert_true(requests("put_start") >= single0 + 2);
    else /* the repeat: nothing else alone */
        assert_true(requests("put_start") == single0 + 1);

    /* get, get_alloc, batch_get */
    void *out = NULL;
    assert_int_equal(cr_store_get(r, k1, &out), (int64_t)len1);
    assert_memory_equal(out, v1, len1);
    free(out);
    out = NULL;
    assert_int_equal(cr_store_get(r, k2, &out), 71000);
    assert_memory_equal(out, p0, 1000);
    assert_memory_equal((uint8_t *)out + 1000, p2, 70000);
    free(out);
    const char *gkeys[NB];
    for (int i = 0; i < NB - 1; i++)
        gkeys[i] = bkeys[i];
    gkeys[NB - 1] = "missing";
    void *gv[NB];
    int64_t gres[NB];
    assert_int_equal(cr_store_batch_get(r, gkeys, NB, gv, gres), 0);
    for (int i = 0; i < NB - 1; i++) {
        assert_int_equal(gres[i], (int64_t)blens[i]);
        assert_memory_equal(gv[i], bdata[i], blens[i]); /* b0: the first put's value */
        free(gv[i]);
    }
    assert_int_equal(gres[NB - 1], CR_OBJECT_NOT_FOUND);
    assert_null(gv[NB - 1]);

    for (int i = 0; i < NB; i++)
        free(bdata[i]);
    free(p0);
    free(p2);
    free(v1);
}

static void direct(const char *protocol)
{
    cr_store *w, *r;
    assert_int_equal(open_store(protocol, 0, &w), 0);
    assert_int_equal(open_store(protocol, 0, &r), 0);
    uint64_t tcp0 = counter(w, "tcp", "bytes");
    round_trip(w, r, protocol, false);
    /* put 1, put_parts 2 (the empty part moves nothing), batch 4 (the
     * repeat finds its key complete and moves nothing); gets 2 + 4: every
     * transfer named the values' own memory */
    assert_true(counter(w, "engine", "unregistered_requests") >= 7);
    assert_true(counter(r, "engine", "unregistered_requests") >= 6);
    assert_int_equal(counter(w, "engine", "unregistered_refused"), 0);
    assert_int_equal(counter(r, "engine", "unregistered_refused"), 0);
    if (strcmp(protocol, "tcp") == 0)
        assert_true(counter(w, "tcp", "bytes") - tcp0 >= (4u << 20));
    assert_int_equal(cr_store_remove_all(w, true) >= 0, 1);
    cr_store_destroy(r);
    cr_store_destroy(w);
}

static void direct_tcp(void **state)
{
    (void)state;
    direct("tcp");
}

static void direct_auto(void **state)
{
    (void)state;
    direct("auto");
}

static void staged_mode(void **state)
{
    (void)state;
    cr_store *w, *r, *bad;
    setenv("CRESCENT_STORE_COPY", "bogus", 1);
    assert_int_equal(open_store("tcp", 1 << 20, &bad), CR_INVALID_PARAMS);
    assert_non_null(strstr(cr_last_error_message(), "CRESCENT_STORE_COPY"));
    setenv("CRESCENT_STORE_COPY", "staged", 1);
    assert_int_equal(open_store("tcp", 0, &bad), 0);
    int wrc = open_store("tcp", 1 << 20, &w), rrc = open_store("tcp", 1 << 20, &r);
    unsetenv("CRESCENT_STORE_COPY");
    assert_int_equal(wrc, 0);
    assert_int_equal(rrc, 0);
    uint8_t v[100] = {1};
    assert_int_equal(cr_store_put(bad, "staged-none", v, sizeof(v), NULL), CR_TRANSFER_FAIL);
    assert_non_null(strstr(cr_last_error_message(), "local buffer"));
    cr_store_destroy(bad);
    size_t len = 3 << 20; /* larger than the local buffer: chunks */
    uint8_t *val = malloc(len);
    sp_fill(val, len, 5);
    assert_int_equal(cr_store_put(w, "staged-big", val, len, NULL), 0);
    void *out = NULL;
    assert_int_equal(cr_store_get(r, "staged-big", &out), (int64_t)len);
    assert_memory_equal(out, val, len);
    free(out);
    assert_int_equal(counter(w, "engine", "unregistered_requests"), 0);
    assert_int_equal(counter(r, "engine", "unregistered_requests"), 0);
    free(val);
    assert_int_equal(cr_store_remove_all(w, true) >= 0, 1);
    cr_store_destroy(r);
    cr_store_destroy(w);
}

static void refused_falls_back(void **state)
{
    (void)state;
    setenv("UCX_TLS", "tcp", 1);
    cr_store *w, *r;
    int rc = open_store("ucx", 1 << 20, &w);
    if (rc == CR_ERR_INVALID_CONFIG || rc == CR_ERR_TRANSPORT_UNSUPPORTED) {
        skip(); /* a build or machine without ucx */
    }
    assert_int_equal(rc, 0);
    assert_int_equal(open_store("ucx", 1 << 20, &r), 0);
    round_trip(w, r, "ucx", true);
    assert_int_equal(counter(w, "engine", "unregistered_requests"), 0);
    assert_int_equal(counter(r, "engine", "unregistered_requests"), 0);
    assert_true(counter(w, "engine", "unregistered_refused") >= 1);
    assert_true(counter(r, "engine", "unregistered_refused") >= 1);
    assert_true(counter(w, "ucx", "bytes") >= (4u << 20));
    assert_int_equal(cr_store_remove_all(w, true) >= 0, 1);
    cr_store_destroy(r);
    cr_store_destroy(w);
}

typedef struct counting_alloc {
    int calls, releases, fail_with;
    uint64_t size;
    void *given;
} counting_alloc;

static int ca_alloc(void *ctx, uint64_t size, void **ptr)
{
    counting_alloc *c = ctx;
    c->calls++;
    c->size = size;
    if (c->fail_with < 0)
        return c->fail_with;
    c->given = malloc(size ? size : 1);
    *ptr = c->given;
    return 0;
}

static void ca_release(void *ctx, void *ptr)
{
    counting_alloc *c = ctx;
    c->releases++;
    free(ptr);
}

static void get_alloc(void **state)
{
    (void)state;
    cr_store *w, *r;
    assert_int_equal(open_store("auto", 0, &w), 0);
    assert_int_equal(open_store("tcp", 0, &r), 0);
    size_t len = 200000;
    uint8_t *val = malloc(len);
    sp_fill(val, len, 9);
    assert_int_equal(cr_store_put(w, "ga", val, len, NULL), 0);
    counting_alloc c = {0};
    cr_value_alloc a = {ca_alloc, ca_release, &c};
    void *out = NULL;
    assert_int_equal(cr_store_get_alloc(r, "ga", &a, &out), (int64_t)len);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.size, len);
    assert_ptr_equal(out, c.given);
    assert_memory_equal(out, val, len);
    free(out);
    /* a miss asks for nothing */
    c = (counting_alloc){0};
    assert_int_equal(cr_store_get_alloc(r, "ga-missing", &a, &out), CR_OBJECT_NOT_FOUND);
    assert_int_equal(c.calls, 0);
    /* the allocator's failure is the call's */
    c = (counting_alloc){.fail_with = CR_ERR_NO_MEMORY};
    assert_int_equal(cr_store_get_alloc(r, "ga", &a, &out), CR_ERR_NO_MEMORY);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.releases, 0);
    /* bad arguments */
    assert_int_equal(cr_store_get_alloc(r, "ga", NULL, &out), CR_INVALID_PARAMS);
    assert_int_equal(cr_store_get_alloc(r, "ga", &a, NULL), CR_INVALID_PARAMS);
    cr_value_alloc half = {ca_alloc, NULL, &c};
    assert_int_equal(cr_store_get_alloc(r, "ga", &half, &out), CR_INVALID_PARAMS);
    free(val);
    assert_int_equal(cr_store_remove_all(w, true) >= 0, 1);
    cr_store_destroy(r);
    cr_store_destroy(w);
}

int main(void)
{
    /* These tests count PUT_START requests to see which values a batch puts on their own;
     * put grants (docs/WIRE.md) would add their own PUT_STARTs and take some away. */
    setenv("CRESCENT_PUT_GRANTS", "0", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(direct_tcp),  cmocka_unit_test(direct_auto),
        cmocka_unit_test(staged_mode), cmocka_unit_test(refused_falls_back),
        cmocka_unit_test(get_alloc),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
