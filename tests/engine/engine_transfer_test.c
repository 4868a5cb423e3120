/*
 * engine_transfer_test.c - reads and writes between real processes over tcp:
 * sizes from 1 byte to several slices, batches, every byte verified; range
 * validation on both sides; memory kinds (seed 002); notify and probe.
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

typedef struct fixture {
    test_peer peer;
    cr_engine *engine;
    cr_segment_handle seg;
    uint8_t *local;
    size_t local_len;
} fixture;

static cr_engine *make_engine(const char *protocol)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.protocol = protocol;
    cfg.slice_size = 64 * 1024; /* several slices per MiB */
    cfg.request_timeout_ms = 10000;
    cr_engine *e = NULL;
    assert_int_equal(cr_engine_create(&cfg, &e), 0);
    return e;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    assert_int_equal(peer_start(&f->peer, NULL), 0);
    f->engine = make_engine(test_protocol());
    assert_int_equal(cr_engine_open_segment(f->engine, f->peer.name, &f->seg), 0);
    f->local_len = 16 << 20;
    f->local = aligned_alloc(4096, f->local_len);
    memset(f->local, 0, f->local_len);
    assert_int_equal(cr_engine_register(f->engine, f->local, f->local_len, "cpu:0", true), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    assert_int_equal(cr_engine_unregister(f->engine, f->local), 0);
    assert_int_equal(cr_engine_registration_count(f->engine), 0);
    cr_engine_destroy(f->engine);
    assert_int_equal(peer_stop(&f->peer), 0);
    free(f->local);
    free(f);
    return 0;
}

static void verify_pattern(const uint8_t *p, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        if (p[i] != test_pattern(i, seed))
            fail_msg("byte %llu: got %u want %u", (unsigned long long)i, p[i],
                     test_pattern(i, seed));
}

static void fill_pattern(uint8_t *p, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        p[i] = test_pattern(i, seed);
}

static void read_and_write_every_size(void **state)
{
    fixture *f = *state;
    uint64_t sizes[] = {1, 4096, 65535, 65536, 65537, (1 << 20) + 1, 8 << 20};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        uint64_t len = sizes[k];
        uint64_t remote = peer_reg(&f->peer, "cpu:0", len, 0);
        assert_true(remote != 0);
        memset(f->local, 0, len);
        /* READ: the peer filled its buffer with pattern(seed = address). */
        assert_int_equal(
            cr_engine_transfer_sync(f->engine, CR_OP_READ, f->local, f->seg, remote, len, 0), 0);
        verify_pattern(f->local, len, remote);
        /* WRITE a different pattern at an offset inside, then let the peer check. */
        fill_pattern(f->local + 7, len, 99);
        uint64_t wlen = len > 7 ? len - 7 : len;
        uint64_t woff = len > 7 ? 7 : 0;
        assert_int_equal(cr_engine_transfer_sync(f->engine, CR_OP_WRITE, f->local + 7, f->seg,
                                                 remote + woff, wlen, 0),
                         0);
        assert_string_equal(peer_cmd(&f->peer, "check %llu %llu 99",
                                     (unsigned long long)(remote + woff), (unsigned long long)wlen),
                            "OK");
        assert_string_equal(peer_cmd(&f->peer, "unreg %llu", (unsigned long long)remote), "OK");
    }
    cr_engine_stats st;
    assert_int_equal(cr_engine_get_stats(f->engine, &st), 0);
    assert_true(test_bytes_via_protocol(f->engine) > 16 << 20);
}

static void batch_of_many_requests(void **state)
{
    fixture *f = *state;
    const size_t n = 256, blk = 4096 * 3;
    uint64_t remote = peer_reg(&f->peer, "cpu:0", n * blk, 0);
    assert_true(remote != 0);
    cr_batch_id b;
    assert_int_equal(cr_batch_create(f->engine, n, &b), 0);
    cr_transfer_request *reqs = calloc(n, sizeof(*reqs));
    for (size_t i = 0; i < n; i++) /* reversed placement: request i lands at slot n-1-i */
        reqs[i] = (cr_transfer_request){CR_OP_READ, f->local + (n - 1 - i) * blk, f->seg,
                                        remote + i * blk, blk};
    assert_int_equal(cr_batch_submit(f->engine, b, reqs, n), 0);
    assert_int_equal(cr_batch_wait(f->engine, b, 10000), 0);
    for (size_t i = 0; i < n; i++) {
        cr_task_status st;
        assert_int_equal(cr_batch_task_status(f->engine, b, i, &st), 0);
        assert_int_equal(st.state, CR_TASK_COMPLETED);
        assert_int_equal(st.transferred_bytes, blk);
        const uint8_t *p = f->local + (n - 1 - i) * blk;
        for (size_t j = 0; j < blk; j++)
            if (p[j] != test_pattern(i * blk + j, remote))
                fail_msg("request %zu byte %zu wrong", i, j);
    }
    /* The batch is full now. */
    assert_int_equal(cr_batch_submit(f->engine, b, reqs, 1), CR_ERR_TOO_MANY_REQUESTS);
    /* An empty submit succeeds and moves nothing. */
    assert_int_equal(cr_batch_submit(f->engine, b, NULL, 0), 0);
    assert_int_equal(cr_batch_free(f->engine, b), 0);
    /* Stale and garbage ids are errors, never crashes. */
    assert_int_equal(cr_batch_wait(f->engine, b, 0), CR_ERR_INVALID_HANDLE);
    assert_int_equal(cr_batch_free(f->engine, b), CR_ERR_INVALID_HANDLE);
    assert_int_equal(cr_batch_submit(f->engine, 0xdeadbeefcafeull, reqs, 1), CR_ERR_INVALID_HANDLE);
    cr_task_status st;
    assert_int_equal(cr_batch_task_status(f->engine, 12345, 0, &st), CR_ERR_INVALID_HANDLE);
    free(reqs);
    assert_string_equal(peer_cmd(&f->peer, "unreg %llu", (unsigned long long)remote), "OK");
}

static int submit_one(fixture *f, int op, void *local, uint64_t remote, uint64_t len)
{
    cr_batch_id b;
    assert_int_equal(cr_batch_create(f->engine, 1, &b), 0);
    cr_transfer_request r = {op, local, f->seg, remote, len};
    int rc = cr_batch_submit(f->engine, b, &r, 1);
    if (rc == 0)
        rc = cr_batch_wait(f->engine, b, 10000);
    cr_batch_free(f->engine, b);
    return rc;
}

static void bad_ranges_get_their_own_errors(void **state)
{
    fixture *f = *state;
    uint64_t remote = peer_reg(&f->peer, "cpu:0", 65536, 0);
    uint64_t ro = peer_reg(&f->peer, "cpu:0", 4096, 1);
    assert_true(remote != 0 && ro != 0);
    /* Initiator-side checks against the cached descriptor. */
    assert_int_equal(submit_one(f, CR_OP_READ, f->local, remote + 65000, 1000),
                     CR_ERR_OUT_OF_RANGE);
    assert_int_equal(submit_one(f, CR_OP_READ, f->local, remote, 0), CR_ERR_ZERO_LENGTH);
    assert_int_equal(submit_one(f, CR_OP_READ, f->local, UINT64_MAX - 10, 100),
                     CR_ERR_RANGE_OVERFLOW);
    assert_int_equal(submit_one(f, CR_OP_READ, f->local, 0x10, 100), CR_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(submit_one(f, CR_OP_WRITE, f->local, ro, 100), CR_ERR_NOT_REMOTE_ACCESSIBLE);
    /* Local side: a pointer outside any registered buffer. */
    uint8_t stack_buf[64];
    assert_int_equal(submit_one(f, CR_OP_READ, stack_buf, remote, 64),
                     CR_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(submit_one(f, CR_OP_READ, f->local + f->local_len - 10, remote, 64),
                     CR_ERR_OUT_OF_RANGE);
    /* Serving-side check: the peer unregisters after we cached its
     * descriptor, so only the target can catch it. */
    uint64_t gone = peer_reg(&f->peer, "cpu:0", 8192, 0);
    assert_int_equal(submit_one(f, CR_OP_READ, f->local, gone, 8192), 0);
    /* (Where the target cannot check, the stale requests are not even sent:
     * they would write into memory the peer has freed.) */
    assert_string_equal(peer_cmd(&f->peer, "unreg %llu", (unsigned long long)gone), "OK");
    if (test_target_checks_ranges(f->engine)) {
        assert_int_equal(submit_one(f, CR_OP_WRITE, f->local, gone, 8192),
                         CR_ERR_ADDRESS_NOT_REGISTERED);
        assert_int_equal(submit_one(f, CR_OP_READ, f->local, gone, 8192),
                         CR_ERR_ADDRESS_NOT_REGISTERED);
    } else {
        printf("note: one-sided RMA over UCX's software paths: the target cannot refuse a "
               "stale range (docs/ARCHITECTURE.md, ucx); that check is skipped\n");
    }
    /* The same with 1 MiB, above every rendezvous threshold: over ucx the
     * target refuses a WRITE whose payload UCX offers it by rendezvous (it
     * must drop that payload so that UCX answers the sender once). Repeated,
     * so a sender request completed twice would be reused and caught. */
    uint64_t gone_big = peer_reg(&f->peer, "cpu:0", 1 << 20, 0);
    assert_true(gone_big != 0);
    assert_int_equal(submit_one(f, CR_OP_WRITE, f->local, gone_big, 1 << 20), 0);
    assert_string_equal(peer_cmd(&f->peer, "unreg %llu", (unsigned long long)gone_big), "OK");
    if (test_target_checks_ranges(f->engine)) {
        for (int i = 0; i < 8; i++) {
            assert_int_equal(submit_one(f, CR_OP_WRITE, f->local, gone_big, 1 << 20),
                             CR_ERR_ADDRESS_NOT_REGISTERED);
            assert_int_equal(submit_one(f, CR_OP_READ, f->local, remote, 65536), 0);
        }
    }
    /* ...and the target keeps serving everything else. */
    assert_int_equal(submit_one(f, CR_OP_READ, f->local, remote, 65536), 0);
    verify_pattern(f->local, 65536, remote);
    peer_cmd(&f->peer, "unreg %llu", (unsigned long long)remote);
    peer_cmd(&f->peer, "unreg %llu", (unsigned long long)ro);
}

static void memory_kinds_seed_002(void **state)
{
    fixture *f = *state;
    uint64_t host1 = peer_reg(&f->peer, "cpu:0", 65536, 0);
    assert_true(host1 != 0);
    assert_int_equal(submit_one(f, CR_OP_READ, f->local, host1, 65536), 0);
    /* The target registers device memory that no installed transport serves. */
    uint64_t dev = peer_reg(&f->peer, "cuda:0", 65536, 0);
    assert_true(dev != 0);
    uint64_t host2 = peer_reg(&f->peer, "*", 4096, 0);
    assert_true(host2 != 0);
    /* Servable buffers keep working after it appeared. */
    assert_int_equal(submit_one(f, CR_OP_READ, f->local, host1, 65536), 0);
    verify_pattern(f->local, 65536, host1);
    assert_int_equal(submit_one(f, CR_OP_WRITE, f->local, host2, 4096), 0);
    /* A transfer touching the device buffer is refused at submit, and the
     * message names the buffer, its kind and the transport. */
    cr_batch_id b;
    assert_int_equal(cr_batch_create(f->engine, 2, &b), 0);
    cr_transfer_request r[2] = {{CR_OP_READ, f->local, f->seg, host1, 4096},
                                {CR_OP_READ, f->local + 4096, f->seg, dev, 4096}};
    assert_int_equal(cr_batch_submit(f->engine, b, r, 2), CR_ERR_TRANSPORT_UNSUPPORTED);
    const char *msg = cr_last_error_message();
    assert_non_null(strstr(msg, "cuda"));
    assert_non_null(strstr(msg, test_protocol()));
    char addr[32];
    snprintf(addr, sizeof(addr), "0x%llx", (unsigned long long)dev);
    assert_non_null(strstr(msg, addr));
    /* Nothing of the refused submit started. */
    cr_task_status st;
    assert_int_equal(cr_batch_task_status(f->engine, b, 0, &st), CR_INVALID_PARAMS);
    cr_batch_free(f->engine, b);
    /* A local device buffer is refused too. */
    static uint8_t fake_dev[8192];
    assert_int_equal(cr_engine_register(f->engine, fake_dev, sizeof(fake_dev), "cuda:1", true), 0);
    assert_int_equal(submit_one(f, CR_OP_READ, fake_dev, host1, 4096),
                     CR_ERR_TRANSPORT_UNSUPPORTED);
    assert_int_equal(cr_engine_unregister(f->engine, fake_dev), 0);
    peer_cmd(&f->peer, "unreg %llu", (unsigned long long)host1);
    peer_cmd(&f->peer, "unreg %llu", (unsigned long long)host2);
    peer_cmd(&f->peer, "unreg %llu", (unsigned long long)dev);
}

static void segment_buffers_are_listed(void **state)
{
    fixture *f = *state;
    uint64_t a = peer_reg(&f->peer, "cpu:0", 8192, 0);
    uint64_t b = peer_reg(&f->peer, "cuda:3", 4096, 1);
    assert_true(a != 0 && b != 0);
    assert_int_equal(cr_engine_open_segment(f->engine, f->peer.name, &f->seg), 0); /* refresh */
    size_t total = 0;
    assert_int_equal(cr_engine_segment_buffers(f->engine, f->seg, NULL, 0, &total), 0);
    assert_int_equal(total, 2);
    cr_buffer_info info[2];
    assert_int_equal(cr_engine_segment_buffers(f->engine, f->seg, info, 2, &total), 0);
    int seen = 0;
    for (int i = 0; i < 2; i++) {
        if (info[i].addr == a) {
            assert_int_equal(info[i].length, 8192);
            assert_int_equal(info[i].kind, CR_MEM_HOST);
            assert_true(info[i].remote_accessible);
            seen |= 1;
        } else if (info[i].addr == b) {
            assert_int_equal(info[i].kind, CR_MEM_CUDA);
            assert_int_equal(info[i].device, 3);
            assert_false(info[i].remote_accessible);
            seen |= 2;
        }
    }
    assert_int_equal(seen, 3);
    assert_true(info[0].addr < info[1].addr); /* address order */
    assert_int_equal(cr_engine_segment_buffers(f->engine, 12345, info, 2, &total),
                     CR_ERR_INVALID_HANDLE);
    peer_cmd(&f->peer, "unreg %llu", (unsigned long long)a);
    peer_cmd(&f->peer, "unreg %llu", (unsigned long long)b);
}

static void notify_and_probe(void **state)
{
    fixture *f = *state;
    assert_int_equal(cr_engine_notify(f->engine, f->seg, "layer-7-done", 12), 0);
    assert_int_equal(cr_engine_notify(f->engine, f->seg, "second", 6), 0);
    const char *r = peer_cmd(&f->peer, "notes");
    assert_non_null(strstr(r, "NOTES 2"));
    assert_non_null(strstr(r, "layer-7-done"));
    assert_int_equal(cr_engine_probe(f->engine, f->peer.name, 2000), 0);
    char big[CR_NOTIFY_MAX_MESSAGE + 1];
    memset(big, 'x', sizeof(big));
    assert_int_equal(cr_engine_notify(f->engine, f->seg, big, sizeof(big)), CR_INVALID_PARAMS);
}

static void local_segment_uses_memcpy_with_auto(void **state)
{
    (void)state;
    cr_engine *e = make_engine("auto");
    char name[300];
    assert_int_equal(cr_engine_segment_name(e, name, sizeof(name)), 0);
    cr_segment_handle self;
    assert_int_equal(cr_engine_open_segment(e, name, &self), 0);
    size_t len = 1 << 20;
    uint8_t *a = malloc(len), *b = malloc(len);
    fill_pattern(a, len, 5);
    memset(b, 0, len);
    assert_int_equal(cr_engine_register(e, a, len, "cpu:0", true), 0);
    assert_int_equal(cr_engine_register(e, b, len, "cpu:0", true), 0);
    assert_int_equal(
        cr_engine_transfer_sync(e, CR_OP_WRITE, a, self, (uint64_t)(uintptr_t)b, len, 0), 0);
    verify_pattern(b, len, 5);
    cr_engine_stats st;
    cr_engine_get_stats(e, &st);
    assert_int_equal(st.bytes_local, len);
    assert_int_equal(st.bytes_tcp, 0);
    cr_engine_unregister(e, a);
    cr_engine_unregister(e, b);
    cr_engine_destroy(e);
    free(a);
    free(b);
}

int main(void)
{
    test_require_protocol();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(read_and_write_every_size, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_of_many_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_ranges_get_their_own_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(memory_kinds_seed_002, setup, teardown),
        cmocka_unit_test_setup_teardown(segment_buffers_are_listed, setup, teardown),
        cmocka_unit_test_setup_teardown(notify_and_probe, setup, teardown),
        cmocka_unit_test(local_segment_uses_memcpy_with_auto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
