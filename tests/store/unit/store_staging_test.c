/*
 * store_staging_test.c - unit tests of the store client's staging buffer
 * and transfer rounds (src/store/staging.c) against its internals, without
 * a master: a cr_store is assembled by hand around a staging buffer and
 * two in-process engines (the store's own engine and a "remote" one whose
 * buffers stand in for replicas; tcp between them).
 *
 *   staging: halving from `want` down to `min`, all-or-nothing try_alloc,
 *   a waiter woken by another thread's free, the bounded wait ending
 *   CR_NO_AVAILABLE_HANDLE with a message, no buffer at all.
 *   rounds: crc_run_batch moves every transfer of a good batch; a batch the
 *   engine refuses at validation is run one at a time and only the bad
 *   transfer is marked failed; crc_transfer writes every replica and checks
 *   ranges against the replica size.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/offset_allocator.h"
#include "crescent/engine.h"
#include "crescent/status.h"
#include "store/internal.h"

#define STAGING (1u << 20)
#define REMOTE  (1u << 20)

typedef struct fixture {
    cr_store s;
    cr_engine *remote;
    uint8_t *remote_buf;
    char remote_name[300];
} fixture;

static cr_engine *make_engine(void)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.local_hostname = "127.0.0.1";
    cfg.protocol = "tcp";
    cfg.request_timeout_ms = 3000;
    cr_engine *e = NULL;
    assert_int_equal(cr_engine_create(&cfg, &e), 0);
    return e;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    cr_store *s = &f->s;
    s->transfer_timeout_ms = 500; /* the staging wait is bounded by this + 1 s */
    s->staging_size = STAGING;
    s->staging = aligned_alloc(4096, STAGING);
    assert_int_equal(crb_oa_create(STAGING, 4096, NULL, &s->staging_oa), 0);
    pthread_mutex_init(&s->staging_lock, NULL);
    pthread_cond_init(&s->staging_freed, NULL);
    pthread_mutex_init(&s->seg_lock, NULL);
    s->engine = make_engine();
    assert_int_equal(cr_engine_register(s->engine, s->staging, STAGING, "cpu:0", false), 0);
    f->remote = make_engine();
    f->remote_buf = aligned_alloc(4096, REMOTE);
    memset(f->remote_buf, 0, REMOTE);
    assert_int_equal(cr_engine_register(f->remote, f->remote_buf, REMOTE, "cpu:0", true), 0);
    assert_int_equal(cr_engine_segment_name(f->remote, f->remote_name, sizeof(f->remote_name)), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    cr_store *s = &f->s;
    cr_engine_destroy(s->engine);
    cr_engine_destroy(f->remote);
    for (size_t i = 0; i < s->n_segs; i++)
        free(s->segs[i].name);
    free(s->segs);
    crb_oa_destroy(s->staging_oa);
    pthread_mutex_destroy(&s->staging_lock);
    pthread_cond_destroy(&s->staging_freed);
    pthread_mutex_destroy(&s->seg_lock);
    free(s->staging);
    free(f->remote_buf);
    free(f);
    return 0;
}

/* Asking for more than is free halves down to what fits, never below min. */
static void staging_halves_to_fit(void **state)
{
    fixture *f = *state;
    cr_store *s = &f->s;
    crb_oa_allocation a, b, c;
    uint8_t *pa, *pb, *pc;
    assert_int_equal(crc_staging_alloc(s, 768 << 10, 4096, &a, &pa), 0);
    assert_true(pa >= s->staging && pa + (768 << 10) <= s->staging + STAGING);
    /* 256 KiB left: a 1 MiB want comes back as 256 KiB (1M -> 512K -> 256K) */
    assert_int_equal(crc_staging_alloc(s, 1 << 20, 4096, &b, &pb), 0);
    assert_int_equal(crb_oa_used(s->staging_oa), STAGING);
    /* full: try_alloc never waits and says CR_NO_AVAILABLE_HANDLE */
    assert_int_equal(crc_staging_try_alloc(s, 4096, &c, &pc), CR_NO_AVAILABLE_HANDLE);
    crc_staging_free(s, &b);
    assert_int_equal(crc_staging_try_alloc(s, 256 << 10, &c, &pc), 0);
    assert_int_equal(crc_staging_try_alloc(s, 0, &b, &pb), CR_NO_AVAILABLE_HANDLE);
    assert_int_equal(crc_staging_try_alloc(s, STAGING + 1, &b, &pb), CR_NO_AVAILABLE_HANDLE);
    crc_staging_free(s, &a);
    crc_staging_free(s, &c);
    assert_int_equal(crb_oa_used(s->staging_oa), 0);
}

typedef struct freer {
    cr_store *s;
    crb_oa_allocation a;
} freer;

static void *free_later(void *arg)
{
    freer *fr = arg;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    crc_staging_free(fr->s, &fr->a);
    return NULL;
}

/* A caller that cannot get even `min` waits for another thread's free. */
static void staging_waits_for_free(void **state)
{
    fixture *f = *state;
    cr_store *s = &f->s;
    freer fr = {.s = s};
    uint8_t *p;
    assert_int_equal(crc_staging_alloc(s, STAGING, STAGING, &fr.a, &p), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, free_later, &fr), 0);
    crb_oa_allocation b;
    assert_int_equal(crc_staging_alloc(s, 64 << 10, 64 << 10, &b, &p), 0);
    pthread_join(t, NULL);
    crc_staging_free(s, &b);
}

/* ... but only until its deadline (transfer timeout + 1 s): then a named
 * error. Without a buffer, copying calls are refused at once. */
static void staging_deadline_and_no_buffer(void **state)
{
    fixture *f = *state;
    cr_store *s = &f->s;
    crb_oa_allocation a, b;
    uint8_t *p;
    assert_int_equal(crc_staging_alloc(s, STAGING, STAGING, &a, &p), 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(crc_staging_alloc(s, 4096, 4096, &b, &p), CR_NO_AVAILABLE_HANDLE);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    assert_true(waited >= 0.4 && waited < 4.0);
    assert_non_null(strstr(cr_last_error_message(), "local buffer"));
    crc_staging_free(s, &a);
    crb_oa *keep = s->staging_oa;
    s->staging_oa = NULL;
    assert_int_equal(crc_staging_alloc(s, 4096, 4096, &b, &p), CR_INVALID_PARAMS);
    assert_int_equal(crc_staging_try_alloc(s, 4096, &b, &p), CR_NO_AVAILABLE_HANDLE);
    s->staging_oa = keep;
}

static void pattern(uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(i * 7u + seed);
}

/* A good round moves every transfer; a round with one transfer the engine
 * refuses at validation falls back to one at a time, and only that one is
 * marked failed. */
static void run_batch_rounds(void **state)
{
    fixture *f = *state;
    cr_store *s = &f->s;
    cr_segment_handle h;
    assert_int_equal(crc_segment_handle(s, f->remote_name, &h), 0);
    cr_segment_handle again;
    assert_int_equal(crc_segment_handle(s, f->remote_name, &again), 0);
    assert_int_equal(again, h); /* cached */
    assert_int_equal(s->n_segs, 1);

    pattern(s->staging, 3 * 4096, 5);
    cr_transfer_request reqs[3];
    for (int k = 0; k < 3; k++)
        reqs[k] = (cr_transfer_request){CR_OP_WRITE, s->staging + k * 4096, h,
                                        (uint64_t)(uintptr_t)(f->remote_buf + k * 8192), 4096};
    bool failed[3] = {true, true, true};
    crc_run_batch(s, reqs, 3, failed);
    for (int k = 0; k < 3; k++) {
        assert_false(failed[k]);
        assert_memory_equal(f->remote_buf + k * 8192, s->staging + k * 4096, 4096);
    }
    /* the middle one points past the remote buffer: validation refuses the
     * batch, the others still move */
    memset(f->remote_buf, 0, REMOTE);
    reqs[1].remote_addr = (uint64_t)(uintptr_t)(f->remote_buf + REMOTE - 100);
    crc_run_batch(s, reqs, 3, failed);
    assert_false(failed[0]);
    assert_true(failed[1]);
    assert_false(failed[2]);
    assert_memory_equal(f->remote_buf, s->staging, 4096);
    assert_memory_equal(f->remote_buf + 2 * 8192, s->staging + 2 * 4096, 4096);
    crc_run_batch(s, reqs, 0, failed); /* nothing to do */
}

/* crc_transfer writes every replica, reads one back, and refuses a range
 * past a replica's size. */
static void transfer_replicas(void **state)
{
    fixture *f = *state;
    cr_store *s = &f->s;
    crp_rpc_replica reps[2] = {
        {.segment = f->remote_name, .addr = (uint64_t)(uintptr_t)f->remote_buf, .size = 65536},
        {.segment = f->remote_name,
         .addr = (uint64_t)(uintptr_t)(f->remote_buf + 65536),
         .size = 65536},
    };
    pattern(s->staging, 65536, 11);
    assert_int_equal(crc_transfer(s, CR_OP_WRITE, reps, 2, 0, s->staging, 65536), 0);
    assert_memory_equal(f->remote_buf, s->staging, 65536);
    assert_memory_equal(f->remote_buf + 65536, s->staging, 65536);
    memset(s->staging + 65536, 0, 4096);
    assert_int_equal(crc_transfer(s, CR_OP_READ, &reps[1], 1, 4096, s->staging + 65536, 4096), 0);
    assert_memory_equal(s->staging + 65536, s->staging + 4096, 4096);
    assert_int_equal(crc_transfer(s, CR_OP_WRITE, reps, 2, 65000, s->staging, 4096),
                     CR_INVALID_PARAMS);
    assert_int_equal(crc_transfer(s, CR_OP_WRITE, reps, 2, 0, s->staging, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(staging_halves_to_fit, setup, teardown),
        cmocka_unit_test_setup_teardown(staging_waits_for_free, setup, teardown),
        cmocka_unit_test_setup_teardown(staging_deadline_and_no_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(run_batch_rounds, setup, teardown),
        cmocka_unit_test_setup_teardown(transfer_replicas, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
