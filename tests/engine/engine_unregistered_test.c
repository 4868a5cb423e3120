/*
 * engine_unregistered_test.c - CR_OP_LOCAL_UNREGISTERED against a real peer
 * process, once per protocol (tcp, shm, ucx variants): reads into and
 * writes from malloc'd memory no engine registered, every byte verified, on
 * the transports that move any local memory (tcp, shm/cma), and a refusal
 * with CR_ERR_NEEDS_REGISTERED (nothing moved) where the path needs
 * registration (ucx); mixed batches; the range checks that still apply; the
 * engine counters that make both outcomes visible.
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
#include "harness.h"

#define FLAG CR_OP_LOCAL_UNREGISTERED

typedef struct fixture {
    test_peer peer;
    cr_engine *engine;
    cr_segment_handle seg;
    uint8_t *reg; /* a registered local buffer */
    size_t reg_len;
} fixture;

static bool needs_registration(void)
{
    return strcmp(test_protocol(), "ucx") == 0;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    assert_int_equal(peer_start(&f->peer, NULL), 0);
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.protocol = test_protocol();
    cfg.slice_size = 64 * 1024; /* several slices per MiB */
    cfg.request_timeout_ms = 10000;
    assert_int_equal(cr_engine_create(&cfg, &f->engine), 0);
    assert_int_equal(cr_engine_open_segment(f->engine, f->peer.name, &f->seg), 0);
    f->reg_len = 1 << 20;
    f->reg = aligned_alloc(4096, f->reg_len);
    memset(f->reg, 0, f->reg_len);
    assert_int_equal(cr_engine_register(f->engine, f->reg, f->reg_len, "cpu:0", true), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    assert_int_equal(cr_engine_unregister(f->engine, f->reg), 0);
    cr_engine_destroy(f->engine);
    assert_int_equal(peer_stop(&f->peer), 0);
    free(f->reg);
    free(f);
    return 0;
}

static void fill(uint8_t *p, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        p[i] = test_pattern(i, seed);
}

static void verify(const uint8_t *p, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        if (p[i] != test_pattern(i, seed))
            fail_msg("byte %llu: got %u want %u", (unsigned long long)i, p[i],
                     test_pattern(i, seed));
}

/* Reads into and writes from malloc'd memory of several sizes. */
static void unregistered_reads_and_writes(void **state)
{
    fixture *f = *state;
    uint64_t sizes[] = {1, 4096, 65537, (1 << 20) + 3, 4 << 20};
    uint64_t req0 = test_counter(f->engine, "engine", "unregistered_requests");
    uint64_t ref0 = test_counter(f->engine, "engine", "unregistered_refused");
    uint64_t moved0 = test_bytes_via_protocol(f->engine);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        uint64_t len = sizes[k];
        uint64_t remote = peer_reg(&f->peer, "cpu:0", len, 0);
        assert_true(remote != 0);
        uint8_t *mem = malloc(len);
        assert_non_null(mem);
        memset(mem, 0, len);
        int rc = cr_engine_transfer_sync(f->engine, CR_OP_READ | FLAG, mem, f->seg, remote, len, 0);
        if (needs_registration()) {
            assert_int_equal(rc, CR_ERR_NEEDS_REGISTERED);
            assert_non_null(strstr(cr_last_error_message(), "ucx"));
            for (uint64_t i = 0; i < len; i++)
                assert_int_equal(mem[i], 0); /* nothing moved */
        } else {
            assert_int_equal(rc, 0);
            verify(mem, len, remote);
        }
        fill(mem, len, 99);
        rc = cr_engine_transfer_sync(f->engine, CR_OP_WRITE | FLAG, mem, f->seg, remote, len, 0);
        if (needs_registration()) {
            assert_int_equal(rc, CR_ERR_NEEDS_REGISTERED);
            /* the peer's bytes are still its own pattern */
            assert_string_equal(peer_cmd(&f->peer, "check %llu %llu %llu",
                                         (unsigned long long)remote, (unsigned long long)len,
                                         (unsigned long long)remote),
                                "OK");
        } else {
            assert_int_equal(rc, 0);
            assert_string_equal(peer_cmd(&f->peer, "check %llu %llu 99", (unsigned long long)remote,
                                         (unsigned long long)len),
                                "OK");
        }
        free(mem); /* at once: the task is over, nothing may touch it any more */
        assert_string_equal(peer_cmd(&f->peer, "unreg %llu", (unsigned long long)remote), "OK");
    }
    size_t n = sizeof(sizes) / sizeof(sizes[0]);
    uint64_t req = test_counter(f->engine, "engine", "unregistered_requests") - req0;
    uint64_t ref = test_counter(f->engine, "engine", "unregistered_refused") - ref0;
    if (needs_registration()) {
        assert_int_equal(req, 0);
        assert_int_equal(ref, 2 * n);
    } else {
        assert_int_equal(req, 2 * n);
        assert_int_equal(ref, 0);
        assert_true(test_bytes_via_protocol(f->engine) - moved0 >= 2 * (5 << 20));
    }
}

/* The flag on registered memory changes nothing, on every transport. */
static void flag_on_registered_memory(void **state)
{
    fixture *f = *state;
    uint64_t len = 300000;
    uint64_t remote = peer_reg(&f->peer, "cpu:0", len, 0);
    assert_true(remote != 0);
    uint64_t req0 = test_counter(f->engine, "engine", "unregistered_requests");
    memset(f->reg, 0, len);
    assert_int_equal(
        cr_engine_transfer_sync(f->engine, CR_OP_READ | FLAG, f->reg, f->seg, remote, len, 0), 0);
    verify(f->reg, len, remote);
    fill(f->reg, len, 42);
    assert_int_equal(
        cr_engine_transfer_sync(f->engine, CR_OP_WRITE | FLAG, f->reg, f->seg, remote, len, 0), 0);
    assert_string_equal(peer_cmd(&f->peer, "check %llu %llu 42", (unsigned long long)remote,
                                 (unsigned long long)len),
                        "OK");
    assert_int_equal(test_counter(f->engine, "engine", "unregistered_requests"), req0);
    assert_string_equal(peer_cmd(&f->peer, "unreg %llu", (unsigned long long)remote), "OK");
}

/* One batch: registered and unregistered requests together. */
static void mixed_batch(void **state)
{
    fixture *f = *state;
    enum { N = 8, BLK = 100000 };
    uint64_t remote = peer_reg(&f->peer, "cpu:0", N * BLK, 0);
    assert_true(remote != 0);
    uint8_t *mem = calloc(N / 2, BLK);
    assert_non_null(mem);
    memset(f->reg, 0, N / 2 * BLK);
    cr_transfer_request reqs[N];
    for (int i = 0; i < N; i++) {
        bool unreg = i % 2 == 0;
        uint8_t *local = unreg ? mem + (size_t)(i / 2) * BLK : f->reg + (size_t)(i / 2) * BLK;
        reqs[i] = (cr_transfer_request){unreg ? CR_OP_READ | FLAG : CR_OP_READ, local, f->seg,
                                        remote + (uint64_t)i * BLK, BLK};
    }
    cr_batch_id b;
    assert_int_equal(cr_batch_create(f->engine, N, &b), 0);
    int rc = cr_batch_submit(f->engine, b, reqs, N);
    if (needs_registration()) {
        assert_int_equal(rc, CR_ERR_NEEDS_REGISTERED);
        assert_non_null(strstr(cr_last_error_message(), "request 0"));
    } else {
        assert_int_equal(rc, 0);
        assert_int_equal(cr_batch_wait(f->engine, b, 20000), 0);
        for (int i = 0; i < N; i++) {
            const uint8_t *p = i % 2 == 0 ? mem + (size_t)(i / 2) * BLK : f->reg + (i / 2) * BLK;
            for (uint64_t j = 0; j < BLK; j++)
                if (p[j] != test_pattern((uint64_t)i * BLK + j, remote))
                    fail_msg("request %d byte %llu", i, (unsigned long long)j);
        }
    }
    assert_int_equal(cr_batch_free(f->engine, b), 0);
    free(mem);
    assert_string_equal(peer_cmd(&f->peer, "unreg %llu", (unsigned long long)remote), "OK");
}

/* What the flag does not waive. */
static void checks_that_still_apply(void **state)
{
    fixture *f = *state;
    uint64_t remote = peer_reg(&f->peer, "cpu:0", 8192, 0);
    assert_true(remote != 0);
    uint8_t mem[8192];
    /* without the flag unregistered memory is refused, as always */
    assert_int_equal(cr_engine_transfer_sync(f->engine, CR_OP_READ, mem, f->seg, remote, 4096, 0),
                     CR_ERR_ADDRESS_NOT_REGISTERED);
    /* unknown opcode bits */
    assert_int_equal(
        cr_engine_transfer_sync(f->engine, CR_OP_READ | 0x200, mem, f->seg, remote, 4096, 0),
        CR_INVALID_PARAMS);
    assert_int_equal(cr_engine_transfer_sync(f->engine, 5 | FLAG, mem, f->seg, remote, 4096, 0),
                     CR_INVALID_PARAMS);
    /* zero length, overflowing local range */
    assert_int_equal(
        cr_engine_transfer_sync(f->engine, CR_OP_READ | FLAG, mem, f->seg, remote, 0, 0),
        CR_ERR_ZERO_LENGTH);
    assert_int_equal(cr_engine_transfer_sync(f->engine, CR_OP_READ | FLAG, (void *)(uintptr_t)-16,
                                             f->seg, remote, 4096, 0),
                     CR_ERR_RANGE_OVERFLOW);
    /* a range that starts in a registered buffer and runs past it */
    assert_int_equal(cr_engine_transfer_sync(f->engine, CR_OP_READ | FLAG,
                                             f->reg + f->reg_len - 100, f->seg, remote, 4096, 0),
                     CR_ERR_OUT_OF_RANGE);
    /* the remote range is validated as ever */
    int rc =
        cr_engine_transfer_sync(f->engine, CR_OP_READ | FLAG, mem, f->seg, remote + 4096, 8192, 0);
    assert_int_equal(rc, CR_ERR_OUT_OF_RANGE);
    assert_string_equal(peer_cmd(&f->peer, "unreg %llu", (unsigned long long)remote), "OK");
}

int main(void)
{
    test_require_protocol();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(unregistered_reads_and_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(flag_on_registered_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(mixed_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(checks_that_still_apply, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
