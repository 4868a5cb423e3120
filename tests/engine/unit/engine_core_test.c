/*
 * engine_core_test.c - unit tests of the engine core against fake
 * transports (fake_transport.h): batches (submit, wait, cancel and free
 * while tasks are in flight, capacity, empty submits), the descriptor
 * snapshot refresh path, and routing with fallback from a transport that
 * refuses at first use.
 *
 * Two engines (A initiates, B is the target) live in this process with
 * protocol "auto"; the fakes rank ahead of the real transports, so with
 * fake_ctl.serve set every host-memory request goes through them. Bytes
 * are checked after every completed transfer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "crescent/engine.h"
#include "crescent/status.h"
#include "engine/internal.h"
#include "engine/transports/tcp/tcp.h"
#include "fake_transport.h"

#define BUF_LEN (1u << 20)

typedef struct fixture {
    cr_engine *a, *b;
    uint8_t *abuf, *bbuf;
    cr_segment_handle seg; /* B, opened by A */
} fixture;

static uint8_t pattern(size_t i, unsigned seed)
{
    return (uint8_t)(i * 131u + seed);
}

static void fill(uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = pattern(i, seed);
}

static int check(const uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(i, seed))
            return -1;
    return 0;
}

static cr_engine *make_engine(void)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.local_hostname = "127.0.0.1";
    cfg.protocol = "auto";
    cfg.request_timeout_ms = 5000;
    cr_engine *e = NULL;
    assert_int_equal(cr_engine_create(&cfg, &e), 0);
    return e;
}

static int setup(void **state)
{
    fake_reset();
    fixture *f = calloc(1, sizeof(*f));
    f->a = make_engine();
    f->b = make_engine();
    f->abuf = aligned_alloc(4096, BUF_LEN);
    f->bbuf = aligned_alloc(4096, BUF_LEN);
    fill(f->bbuf, BUF_LEN, 7);
    memset(f->abuf, 0, BUF_LEN);
    assert_int_equal(cr_engine_register(f->a, f->abuf, BUF_LEN, "cpu:0", true), 0);
    assert_int_equal(cr_engine_register(f->b, f->bbuf, BUF_LEN, "cpu:0", true), 0);
    char name[300];
    assert_int_equal(cr_engine_segment_name(f->b, name, sizeof(name)), 0);
    assert_int_equal(cr_engine_open_segment(f->a, name, &f->seg), 0);
    /* Both engines installed the fakes ahead of the real transports. */
    assert_non_null(cre_engine_tp(f->a, "fake"));
    assert_non_null(cre_engine_tp(f->a, "fake_refuse"));
    assert_string_equal(f->a->tps[0].ops->name, "fake_refuse");
    assert_string_equal(f->a->tps[1].ops->name, "fake");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    fake_complete(SIZE_MAX, CR_ERR_SHUTDOWN); /* nothing may stay held */
    cr_engine_destroy(f->a);
    cr_engine_destroy(f->b);
    free(f->abuf);
    free(f->bbuf);
    free(f);
    return 0;
}

static cr_transfer_request read_req(fixture *f, size_t off, size_t len)
{
    cr_transfer_request r = {.opcode = CR_OP_READ,
                             .local_addr = f->abuf + off,
                             .segment = f->seg,
                             .remote_addr = (uint64_t)(uintptr_t)(f->bbuf + off),
                             .length = len};
    return r;
}

static int task_state(fixture *f, cr_batch_id id, size_t i)
{
    cr_task_status st;
    assert_int_equal(cr_batch_task_status(f->a, id, i, &st), 0);
    return st.state;
}

/* Reads through fake complete at submit and move the right bytes. */
static void read_write_through_fake(void **state)
{
    fixture *f = *state;
    assert_int_equal(cr_engine_transfer_sync(f->a, CR_OP_READ, f->abuf, f->seg,
                                             (uint64_t)(uintptr_t)f->bbuf, BUF_LEN, 2000),
                     0);
    assert_int_equal(check(f->abuf, BUF_LEN, 7), 0);
    fill(f->abuf, 4096, 9);
    assert_int_equal(cr_engine_transfer_sync(f->a, CR_OP_WRITE, f->abuf, f->seg,
                                             (uint64_t)(uintptr_t)(f->bbuf + 8192), 4096, 2000),
                     0);
    assert_int_equal(check(f->bbuf + 8192, 4096, 9), 0);
    assert_int_equal(atomic_load(&fake_ctl.fake_submits), 2);
    assert_int_equal(atomic_load(&fake_ctl.refuse_submits), 0);
    cre_tp *tp = cre_engine_tp(f->a, "fake");
    assert_int_equal(atomic_load(&tp->requests), 2);
    assert_int_equal(atomic_load(&tp->bytes), BUF_LEN + 4096);
}

/* n == 0 moves nothing and succeeds; an empty batch waits for nothing. */
static void empty_submit(void **state)
{
    fixture *f = *state;
    cr_batch_id id;
    assert_int_equal(cr_batch_create(f->a, 4, &id), 0);
    assert_int_equal(cr_batch_submit(f->a, id, NULL, 0), 0);
    assert_int_equal(cr_batch_wait(f->a, id, 0), 0);
    cr_task_status st;
    assert_int_equal(cr_batch_task_status(f->a, id, 0, &st), CR_INVALID_PARAMS);
    assert_int_equal(atomic_load(&fake_ctl.fake_submits), 0);
    /* n > 0 with a NULL array is refused */
    assert_int_equal(cr_batch_submit(f->a, id, NULL, 1), CR_INVALID_PARAMS);
    assert_int_equal(cr_batch_free(f->a, id), 0);
}

/* Capacity counts every task ever submitted; an overflowing submit starts
 * nothing; capacity 0 and huge capacities are refused. */
static void capacity(void **state)
{
    fixture *f = *state;
    cr_batch_id id;
    assert_int_equal(cr_batch_create(f->a, 0, &id), CR_INVALID_PARAMS);
    assert_int_equal(cr_batch_create(f->a, (size_t)1 << 40, &id), CR_INVALID_PARAMS);
    assert_int_equal(cr_batch_create(f->a, 2, &id), 0);
    cr_transfer_request r[3] = {read_req(f, 0, 4096), read_req(f, 4096, 4096),
                                read_req(f, 8192, 4096)};
    assert_int_equal(cr_batch_submit(f->a, id, r, 3), CR_ERR_TOO_MANY_REQUESTS);
    assert_int_equal(atomic_load(&fake_ctl.fake_submits), 0);
    assert_int_equal(cr_batch_submit(f->a, id, r, 2), 0);
    assert_int_equal(cr_batch_wait(f->a, id, 2000), 0);
    assert_int_equal(cr_batch_submit(f->a, id, &r[2], 1), CR_ERR_TOO_MANY_REQUESTS);
    assert_int_equal(atomic_load(&fake_ctl.fake_submits), 2);
    assert_int_equal(check(f->abuf, 8192, 7), 0);
    assert_int_equal(cr_batch_free(f->a, id), 0);
}

/* A batch is all-or-nothing at validation: one bad request starts none. */
static void invalid_request_starts_nothing(void **state)
{
    fixture *f = *state;
    cr_batch_id id;
    assert_int_equal(cr_batch_create(f->a, 4, &id), 0);
    cr_transfer_request r[2] = {read_req(f, 0, 4096), read_req(f, BUF_LEN - 100, 4096)};
    assert_int_equal(cr_batch_submit(f->a, id, r, 2), CR_ERR_OUT_OF_RANGE);
    r[1] = read_req(f, 0, 0);
    assert_int_equal(cr_batch_submit(f->a, id, r, 2), CR_ERR_ZERO_LENGTH);
    assert_int_equal(atomic_load(&fake_ctl.fake_submits), 0);
    assert_int_equal(cr_batch_free(f->a, id), 0);
}

/* Wait while tasks are in flight times out; completion wakes it. */
static void wait_in_flight(void **state)
{
    fixture *f = *state;
    atomic_store(&fake_ctl.hold, true);
    cr_batch_id id;
    assert_int_equal(cr_batch_create(f->a, 8, &id), 0);
    cr_transfer_request r[4];
    for (int i = 0; i < 4; i++)
        r[i] = read_req(f, (size_t)i * 65536, 65536);
    assert_int_equal(cr_batch_submit(f->a, id, r, 4), 0);
    assert_int_equal(fake_pending(), 4);
    assert_int_equal(cr_batch_wait(f->a, id, 50), CR_ERR_TIMEOUT);
    assert_int_equal(task_state(f, id, 0), CR_TASK_WAITING);
    assert_int_equal(fake_complete(2, 0), 2);
    assert_int_equal(task_state(f, id, 0), CR_TASK_COMPLETED);
    assert_int_equal(task_state(f, id, 2), CR_TASK_WAITING);
    assert_int_equal(cr_batch_wait(f->a, id, 50), CR_ERR_TIMEOUT);
    /* one fails: wait reports that task's error */
    assert_int_equal(fake_complete(1, CR_ERR_REMOTE), 1);
    assert_int_equal(fake_complete(1, 0), 1);
    assert_int_equal(cr_batch_wait(f->a, id, 1000), CR_ERR_REMOTE);
    assert_int_equal(task_state(f, id, 2), CR_TASK_FAILED);
    assert_int_equal(task_state(f, id, 3), CR_TASK_COMPLETED);
    assert_int_equal(check(f->abuf, 2 * 65536, 7), 0);
    assert_int_equal(check(f->abuf + 3 * 65536, 65536, 7), 0);
    assert_int_equal(cr_batch_free(f->a, id), 0);
}

/* CRESCENT_BUSY_POLL_US: refused when it is not a bounded number of
 * microseconds; accepted values make waits spin at most that long before
 * they sleep, and waits still time out and complete as without it; unset,
 * the engine polls adaptively, 0 never. */
static void busy_poll_is_validated_and_bounded(void **state)
{
    (void)state;
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cr_engine *e = NULL;
    setenv("CRESCENT_BUSY_POLL_US", "fast", 1);
    assert_int_equal(cr_engine_create(&cfg, &e), CR_ERR_INVALID_CONFIG);
    assert_non_null(strstr(cr_last_error_message(), "CRESCENT_BUSY_POLL_US"));
    setenv("CRESCENT_BUSY_POLL_US", "20000", 1); /* above the 10 ms bound */
    assert_int_equal(cr_engine_create(&cfg, &e), CR_ERR_INVALID_CONFIG);
    assert_null(e);
    setenv("CRESCENT_BUSY_POLL_US", "2000", 1);
    void *st = NULL;
    assert_int_equal(setup(&st), 0);
    fixture *f = st;
    assert_int_equal(f->a->spin_mode_ns, 2000000);
    wait_in_flight(&st); /* timeouts and completions behave the same */
    /* A wait spins at most 2 ms, then sleeps: a held task still times out. */
    atomic_store(&fake_ctl.hold, true);
    cr_batch_id id;
    assert_int_equal(cr_batch_create(f->a, 1, &id), 0);
    cr_transfer_request r = read_req(f, 0, 4096);
    assert_int_equal(cr_batch_submit(f->a, id, &r, 1), 0);
    assert_int_equal(cr_batch_wait(f->a, id, 20), CR_ERR_TIMEOUT);
    assert_int_equal(fake_complete(1, 0), 1);
    assert_int_equal(cr_batch_wait(f->a, id, 1000), 0);
    assert_int_equal(cr_batch_free(f->a, id), 0);
    assert_int_equal(teardown(&st), 0);
    setenv("CRESCENT_BUSY_POLL_US", "-5", 1);
    assert_int_equal(cr_engine_create(&cfg, &e), CR_ERR_INVALID_CONFIG);
    setenv("CRESCENT_BUSY_POLL_US", "0", 1);
    assert_int_equal(setup(&st), 0);
    assert_int_equal(((fixture *)st)->a->spin_mode_ns, 0); /* 0: never poll */
    assert_int_equal(teardown(&st), 0);
    unsetenv("CRESCENT_BUSY_POLL_US");
    assert_int_equal(setup(&st), 0);
    assert_int_equal(((fixture *)st)->a->spin_mode_ns, CRB_SPIN_ADAPTIVE); /* the default */
    wait_in_flight(&st);
    assert_int_equal(teardown(&st), 0);
}

/* Cancel ends held tasks CANCELED through the transport's cancel op, and
 * their local memory is untouched. */
static void cancel_in_flight(void **state)
{
    fixture *f = *state;
    atomic_store(&fake_ctl.hold, true);
    cr_batch_id id;
    assert_int_equal(cr_batch_create(f->a, 4, &id), 0);
    cr_transfer_request r[3] = {read_req(f, 0, 4096), read_req(f, 4096, 4096),
                                read_req(f, 8192, 4096)};
    assert_int_equal(cr_batch_submit(f->a, id, r, 3), 0);
    assert_int_equal(fake_complete(1, 0), 1); /* the first one finished before the cancel */
    assert_int_equal(cr_batch_cancel(f->a, id), 0);
    assert_int_equal(fake_pending(), 0);
    assert_int_equal(atomic_load(&fake_ctl.fake_canceled), 2);
    assert_int_equal(cr_batch_wait(f->a, id, 1000), CR_ERR_CANCELED);
    assert_int_equal(task_state(f, id, 0), CR_TASK_COMPLETED);
    assert_int_equal(task_state(f, id, 1), CR_TASK_CANCELED);
    assert_int_equal(task_state(f, id, 2), CR_TASK_CANCELED);
    uint8_t zero[8192] = {0};
    assert_memory_equal(f->abuf + 4096, zero, sizeof(zero));
    assert_int_equal(cr_batch_free(f->a, id), 0);
}

/* Free while tasks are in flight: the id dies at once, the memory when the
 * last task finishes (ASan checks there is no use after free and no leak);
 * the local buffer stays referenced until then. */
static void free_in_flight(void **state)
{
    fixture *f = *state;
    atomic_store(&fake_ctl.hold, true);
    cr_batch_id id;
    assert_int_equal(cr_batch_create(f->a, 4, &id), 0);
    cr_transfer_request r[2] = {read_req(f, 0, 4096), read_req(f, 4096, 4096)};
    assert_int_equal(cr_batch_submit(f->a, id, r, 2), 0);
    assert_int_equal(cr_batch_free(f->a, id), 0);
    cr_task_status st;
    assert_int_equal(cr_batch_task_status(f->a, id, 0, &st), CR_ERR_INVALID_HANDLE);
    assert_int_equal(cr_batch_wait(f->a, id, 0), CR_ERR_INVALID_HANDLE);
    assert_int_equal(cr_batch_submit(f->a, id, r, 1), CR_ERR_INVALID_HANDLE);
    assert_int_equal(cr_batch_free(f->a, id), CR_ERR_INVALID_HANDLE);
    assert_int_equal(fake_complete(1, 0), 1);
    assert_int_equal(fake_complete(1, 0), 1); /* the last one destroys the batch */
    assert_int_equal(check(f->abuf, 8192, 7), 0);
    /* the local buffer is free again: unregister does not wait */
    assert_int_equal(cr_engine_unregister(f->a, f->abuf), 0);
    assert_int_equal(cr_engine_register(f->a, f->abuf, BUF_LEN, "cpu:0", true), 0);
}

/* A transport that refuses at first use hands the task to the next one that
 * serves the pair; it then declines that peer, so the next request goes to
 * the fallback directly. With no transport left the task fails, named. */
static void fallback_at_first_use(void **state)
{
    fixture *f = *state;
    atomic_store(&fake_ctl.refuse, true);
    cr_engine_stats st0, st1;
    assert_int_equal(cr_engine_get_stats(f->a, &st0), 0);
    assert_int_equal(cr_engine_transfer_sync(f->a, CR_OP_READ, f->abuf, f->seg,
                                             (uint64_t)(uintptr_t)f->bbuf, 65536, 2000),
                     0);
    assert_int_equal(check(f->abuf, 65536, 7), 0);
    assert_int_equal(atomic_load(&fake_ctl.refuse_submits), 1);
    assert_int_equal(atomic_load(&fake_ctl.fake_submits), 1);
    assert_int_equal(cr_engine_get_stats(f->a, &st1), 0);
    assert_int_equal(st1.transport_fallbacks - st0.transport_fallbacks, 1);
    /* it learned: the refuser is not asked again for this peer */
    memset(f->abuf, 0, 65536);
    assert_int_equal(cr_engine_transfer_sync(f->a, CR_OP_READ, f->abuf, f->seg,
                                             (uint64_t)(uintptr_t)f->bbuf, 65536, 2000),
                     0);
    assert_int_equal(check(f->abuf, 65536, 7), 0);
    assert_int_equal(atomic_load(&fake_ctl.refuse_submits), 1);
    assert_int_equal(atomic_load(&fake_ctl.fake_submits), 2);
    cre_tp *refuser = cre_engine_tp(f->a, "fake_refuse");
    assert_int_equal(atomic_load(&refuser->requests), 0);
    cre_tp *fake = cre_engine_tp(f->a, "fake");
    assert_int_equal(atomic_load(&fake->requests), 2);
}

/* Without the fakes the real transports behind them serve the pair (tcp or
 * shm: whichever ranks first here); routing never lands on a transport that
 * said it cannot serve. */
static void routing_skips_declining(void **state)
{
    fixture *f = *state;
    atomic_store(&fake_ctl.serve, false);
    assert_int_equal(cr_engine_transfer_sync(f->a, CR_OP_READ, f->abuf, f->seg,
                                             (uint64_t)(uintptr_t)f->bbuf, 65536, 5000),
                     0);
    assert_int_equal(check(f->abuf, 65536, 7), 0);
    assert_int_equal(atomic_load(&fake_ctl.fake_submits), 0);
    cr_engine_stats st;
    assert_int_equal(cr_engine_get_stats(f->a, &st), 0);
    assert_true(st.bytes_shm + st.bytes_cma + st.bytes_tcp >= 65536);
}

/* A range outside the snapshot triggers one refetch; a buffer B registered
 * after A opened the segment is found through it; the transports parse the
 * new snapshot and free the old one once nothing holds it. A range that is
 * still unknown after the refetch fails, named. */
static void descriptor_refresh(void **state)
{
    fixture *f = *state;
    assert_int_equal(cr_engine_transfer_sync(f->a, CR_OP_READ, f->abuf, f->seg,
                                             (uint64_t)(uintptr_t)f->bbuf, 4096, 2000),
                     0);
    unsigned parses = atomic_load(&fake_ctl.desc_parses);
    unsigned frees = atomic_load(&fake_ctl.desc_frees);
    assert_true(parses >= 1);
    cr_engine_stats st0, st1; /* B counts the descriptor fetches it served */
    assert_int_equal(cr_engine_get_stats(f->b, &st0), 0);

    uint8_t *late = aligned_alloc(4096, 65536);
    fill(late, 65536, 21);
    assert_int_equal(cr_engine_register(f->b, late, 65536, "cpu:0", true), 0);
    memset(f->abuf, 0, 65536);
    assert_int_equal(cr_engine_transfer_sync(f->a, CR_OP_READ, f->abuf, f->seg,
                                             (uint64_t)(uintptr_t)late, 65536, 2000),
                     0);
    assert_int_equal(check(f->abuf, 65536, 21), 0);
    assert_int_equal(cr_engine_get_stats(f->b, &st1), 0);
    assert_int_equal(st1.descriptor_fetches - st0.descriptor_fetches, 1);
    assert_int_equal(atomic_load(&fake_ctl.desc_parses), parses + 1);
    assert_int_equal(atomic_load(&fake_ctl.desc_frees), frees + 1);
    /* the same range again: the new snapshot has it, no refetch */
    assert_int_equal(cr_engine_transfer_sync(f->a, CR_OP_READ, f->abuf, f->seg,
                                             (uint64_t)(uintptr_t)late, 4096, 2000),
                     0);
    assert_int_equal(cr_engine_get_stats(f->b, &st0), 0);
    assert_int_equal(st0.descriptor_fetches, st1.descriptor_fetches);

    /* after B drops it, A's snapshot still lists it; the transfer is refused
     * by B's side or, after a refetch, by A's validation - never served from
     * the freed range */
    assert_int_equal(cr_engine_unregister(f->b, late), 0);
    free(late);
    static uint8_t unknown[4096];
    int rc = cr_engine_transfer_sync(f->a, CR_OP_READ, f->abuf, f->seg,
                                     (uint64_t)(uintptr_t)unknown, sizeof(unknown), 2000);
    assert_int_equal(rc, CR_ERR_ADDRESS_NOT_REGISTERED);
    assert_non_null(strstr(cr_last_error_message(), "not in any buffer"));
}

/* How the tcp lanes cut a task (transports/tcp/lane.c): a task alone in its batch, of 1 MiB
 * up to less than two slices, to a peer with two lanes or more, goes in two halves (4 KiB
 * aligned, never over the slice size); anything else in slices of the engine's slice size. */
static void tcp_lone_megabyte_is_cut_in_halves(void **state)
{
    (void)state;
    static cr_engine e;
    e.slice_size = 1u << 20;
    tcp_peer p = {.n_lanes = 4};
    cre_task t = {.alone = true, .length = 1u << 20};
    assert_int_equal(cre_tcp_slice_of(&e, &p, &t), 512u << 10);
    t.length = (1u << 20) + 4096 + 1; /* half rounded up to 4 KiB, the second slice shorter */
    assert_int_equal(cre_tcp_slice_of(&e, &p, &t), (512u << 10) + 4096);
    t.length = (2u << 20) - 4096; /* halves of 1 MiB and 1 MiB - 4 KiB */
    assert_int_equal(cre_tcp_slice_of(&e, &p, &t), 1u << 20);
    t.length = 2u << 20; /* two slices already */
    assert_int_equal(cre_tcp_slice_of(&e, &p, &t), 1u << 20);
    t.length = (1u << 20) - 4096; /* below 1 MiB: one slice */
    assert_int_equal(cre_tcp_slice_of(&e, &p, &t), 1u << 20);
    t.length = 1u << 20;
    t.alone = false; /* one of several tasks: the batch already spreads over the lanes */
    assert_int_equal(cre_tcp_slice_of(&e, &p, &t), 1u << 20);
    t.alone = true;
    p.n_lanes = 1;
    assert_int_equal(cre_tcp_slice_of(&e, &p, &t), 1u << 20);
    p.n_lanes = 2;
    e.slice_size = 1000000; /* not 4 KiB aligned: a rounded half would pass it */
    t.length = 1999999;
    assert_int_equal(cre_tcp_slice_of(&e, &p, &t), 1000000);
    t.length = 1500000;
    assert_int_equal(cre_tcp_slice_of(&e, &p, &t), 753664);
}

/* The synchronous tcp path's reply check (transports/tcp/sync.c): only the
 * exact answer to the request is accepted; anything else names the fault. */
static void sync_reply_check_refuses_wrong_replies(void **state)
{
    (void)state;
    crp_header rd = {.version = CRP_VERSION, .type = CRP_READ_REQ, .request_id = 7};
    crp_header wr = {
        .version = CRP_VERSION, .type = CRP_WRITE_REQ, .request_id = 9, .data_len = 4096};
    crp_header ok_rd = {
        .version = CRP_VERSION, .type = CRP_READ_RESP, .request_id = 7, .data_len = 4096};
    crp_header ok_wr = {.version = CRP_VERSION, .type = CRP_WRITE_ACK, .request_id = 9};
    int st = 1;
    assert_int_equal(cre_tcp_sync_reply_check(&rd, &ok_rd, 4096, "p", &st), 0);
    assert_int_equal(st, 0);
    st = 1;
    assert_int_equal(cre_tcp_sync_reply_check(&wr, &ok_wr, 4096, "p", &st), 0);
    assert_int_equal(st, 0);
    /* The peer's refusal of a well-formed request is the task's status. */
    crp_header refused = ok_rd;
    refused.status = CR_ERR_OUT_OF_RANGE;
    refused.data_len = 0;
    assert_int_equal(cre_tcp_sync_reply_check(&rd, &refused, 4096, "p", &st), 0);
    assert_int_equal(st, CR_ERR_OUT_OF_RANGE);
    refused.status = 5; /* not a cr_status */
    assert_int_equal(cre_tcp_sync_reply_check(&rd, &refused, 4096, "p", &st), 0);
    assert_int_equal(st, CR_ERR_REMOTE);
    /* Faults of the reply itself fail the connection, never the bytes. */
    st = 1;
    crp_header bad = ok_rd;
    bad.request_id = 8;
    assert_int_equal(cre_tcp_sync_reply_check(&rd, &bad, 4096, "p", &st), CR_ERR_MALFORMED_FRAME);
    assert_non_null(strstr(cr_last_error_message(), "p answered READ_REQ 7"));
    bad = ok_rd;
    bad.data_len = 4095; /* short payload */
    assert_int_equal(cre_tcp_sync_reply_check(&rd, &bad, 4096, "p", &st), CR_ERR_MALFORMED_FRAME);
    bad = ok_rd;
    bad.body_len = 3;
    assert_int_equal(cre_tcp_sync_reply_check(&rd, &bad, 4096, "p", &st), CR_ERR_MALFORMED_FRAME);
    bad = ok_rd; /* a WRITE answered with a READ's reply */
    bad.request_id = 9;
    assert_int_equal(cre_tcp_sync_reply_check(&wr, &bad, 4096, "p", &st), CR_ERR_MALFORMED_FRAME);
    bad = refused; /* a failed READ that still carries bytes */
    bad.status = CR_ERR_OUT_OF_RANGE;
    bad.data_len = 4096;
    assert_int_equal(cre_tcp_sync_reply_check(&rd, &bad, 4096, "p", &st), CR_ERR_MALFORMED_FRAME);
    crp_header error = {.version = CRP_VERSION, .type = CRP_ERROR, .status = CR_ERR_AUTH_FAILED};
    assert_int_equal(cre_tcp_sync_reply_check(&rd, &error, 4096, "p", &st), CR_ERR_AUTH_FAILED);
    assert_int_equal(st, 1); /* never written on failure */
}

/* CRESCENT_TCP_CALLER_READS is 0 or 1; cr_batch_create_ex knows one flag,
 * which marks only batches of one. */
static void caller_reads_config_and_flag(void **state)
{
    (void)state;
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cr_engine *e = NULL;
    setenv("CRESCENT_TCP_CALLER_READS", "yes", 1);
    assert_int_equal(cr_engine_create(&cfg, &e), CR_ERR_INVALID_CONFIG);
    assert_non_null(strstr(cr_last_error_message(), "CRESCENT_TCP_CALLER_READS 'yes'"));
    assert_null(e);
    setenv("CRESCENT_TCP_CALLER_READS", "0", 1);
    assert_int_equal(cr_engine_create(&cfg, &e), 0);
    assert_false(e->tcp_caller_reads);
    cr_engine_destroy(e);
    unsetenv("CRESCENT_TCP_CALLER_READS");
    e = NULL;
    assert_int_equal(cr_engine_create(&cfg, &e), 0);
    assert_true(e->tcp_caller_reads);
    cr_batch_id id = 0;
    assert_int_equal(cr_batch_create_ex(e, 1, 2u, &id), CR_INVALID_PARAMS);
    assert_int_equal(id, 0);
    assert_int_equal(cr_batch_create_ex(e, 1, CR_BATCH_CALLER_WAITS, &id), 0);
    assert_int_equal(cr_batch_free(e, id), 0);
    cr_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(read_write_through_fake, setup, teardown),
        cmocka_unit_test_setup_teardown(empty_submit, setup, teardown),
        cmocka_unit_test_setup_teardown(capacity, setup, teardown),
        cmocka_unit_test_setup_teardown(invalid_request_starts_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(wait_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(cancel_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(free_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(fallback_at_first_use, setup, teardown),
        cmocka_unit_test_setup_teardown(routing_skips_declining, setup, teardown),
        cmocka_unit_test_setup_teardown(descriptor_refresh, setup, teardown),
        cmocka_unit_test(busy_poll_is_validated_and_bounded),
        cmocka_unit_test(sync_reply_check_refuses_wrong_replies),
        cmocka_unit_test(tcp_lone_megabyte_is_cut_in_halves),
        cmocka_unit_test(caller_reads_config_and_flag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
