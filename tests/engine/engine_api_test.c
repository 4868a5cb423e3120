/*
 * engine_api_test.c - configuration and registration errors, batch
 * cancel/free while in flight, the unregistration barrier with transfers in
 * flight, destroy while another thread waits in a call, and the http
 * metadata backend with a real peer process.
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
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "crescent/engine.h"
#include "harness.h"
#include "mdserver/http_server.h"

static int create_with(const char *field, const char *value, uint64_t number)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    if (strcmp(field, "protocol") == 0)
        cfg.protocol = value;
    else if (strcmp(field, "metadata") == 0)
        cfg.metadata = value;
    else if (strcmp(field, "local_hostname") == 0)
        cfg.local_hostname = value;
    else if (strcmp(field, "slice_size") == 0)
        cfg.slice_size = number;
    else if (strcmp(field, "worker_threads") == 0)
        cfg.worker_threads = (uint32_t)number;
    else if (strcmp(field, "struct_size") == 0)
        cfg.struct_size = (uint32_t)number;
    cr_engine *e = NULL;
    int rc = cr_engine_create(&cfg, &e);
    if (rc == 0)
        cr_engine_destroy(e);
    else
        assert_null(e);
    return rc;
}

static void bad_config_is_named(void **state)
{
    (void)state;
    assert_int_equal(create_with("protocol", "rdmaa", 0), CR_ERR_INVALID_CONFIG);
    assert_non_null(strstr(cr_last_error_message(), "rdmaa"));
    /* The message lists each accepted name once. */
    const char *m = strstr(cr_last_error_message(), "(supported: auto, ");
    assert_non_null(m);
    const char *shm = strstr(m, "shm");
    assert_true(shm != NULL && strstr(shm + 3, "shm") == NULL);
    assert_non_null(strstr(m, "tcp"));
    assert_int_equal(create_with("metadata", "etcd2://h:1", 0), CR_ERR_INVALID_CONFIG);
    assert_non_null(strstr(cr_last_error_message(), "etcd2://h:1"));
    assert_int_equal(create_with("metadata", "", 0), CR_ERR_INVALID_CONFIG);
    assert_int_equal(create_with("local_hostname", "127.0.0.1:99999", 0), CR_ERR_INVALID_CONFIG);
    assert_non_null(strstr(cr_last_error_message(), "99999"));
    assert_int_equal(create_with("slice_size", NULL, 1), CR_ERR_INVALID_CONFIG);
    assert_int_equal(create_with("worker_threads", NULL, 100000), CR_ERR_INVALID_CONFIG);
    assert_int_equal(create_with("struct_size", NULL, 3), CR_ERR_INVALID_CONFIG);
    assert_int_equal(cr_engine_create(NULL, NULL), CR_INVALID_PARAMS);
    /* A good one reports its port and name. */
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cr_engine *e;
    assert_int_equal(cr_engine_create(&cfg, &e), 0);
    char name[300], want[64];
    assert_true(cr_engine_rpc_port(e) > 0);
    assert_int_equal(cr_engine_segment_name(e, name, sizeof(name)), 0);
    snprintf(want, sizeof(want), "127.0.0.1:%u", cr_engine_rpc_port(e));
    assert_string_equal(name, want);
    assert_int_equal(cr_engine_segment_name(e, name, 3), CR_INVALID_PARAMS);
    cr_engine_destroy(e);
}

static void registration_errors(void **state)
{
    (void)state;
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cr_engine *e;
    assert_int_equal(cr_engine_create(&cfg, &e), 0);
    static uint8_t mem[1 << 16];
    assert_int_equal(cr_engine_register(e, mem, 0, "cpu:0", true), CR_ERR_ZERO_LENGTH);
    assert_int_equal(cr_engine_register(e, NULL, 10, "cpu:0", true), CR_INVALID_PARAMS);
    assert_int_equal(cr_engine_register(e, mem, 100, "npu:0", true), CR_INVALID_PARAMS);
    assert_non_null(strstr(cr_last_error_message(), "npu:0"));
    assert_int_equal(cr_engine_register(e, mem, 100, "cuda:x", true), CR_INVALID_PARAMS);
    assert_int_equal(cr_engine_register(e, mem, 4096, "cpu:0", true), 0);
    assert_int_equal(cr_engine_register(e, mem + 4000, 4096, "*", true), CR_ERR_ADDRESS_OVERLAPPED);
    assert_int_equal(cr_engine_register(e, mem, 4096, "cpu:0", true), CR_ERR_ADDRESS_OVERLAPPED);
    assert_int_equal(cr_engine_unregister(e, mem + 1), CR_ERR_ADDRESS_NOT_REGISTERED);
    cr_buffer_spec batch[3] = {{mem + 8192, 100, "cpu:0", true},
                               {mem + 16384, 100, "cuda:0", false},
                               {mem + 8192 + 50, 100, NULL, true}};
    assert_int_equal(cr_engine_register_batch(e, batch, 3), CR_ERR_ADDRESS_OVERLAPPED);
    assert_int_equal(cr_engine_registration_count(e), 1);
    assert_int_equal(cr_engine_register_batch(e, batch, 2), 0);
    assert_int_equal(cr_engine_registration_count(e), 3);
    void *addrs[3] = {mem + 8192, mem + 16384, mem + 3};
    assert_int_equal(cr_engine_unregister_batch(e, addrs, 3), CR_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(cr_engine_registration_count(e), 1);
    assert_int_equal(cr_engine_unregister(e, mem), 0);
    cr_batch_id b;
    assert_int_equal(cr_batch_create(e, 0, &b), CR_INVALID_PARAMS);
    assert_int_equal(cr_engine_close_segment(e, 42), CR_ERR_INVALID_HANDLE);
    cr_engine_destroy(e);
}

typedef struct in_flight {
    test_peer peer;
    cr_engine *engine;
    cr_segment_handle seg;
    uint64_t remote;
    uint8_t *local;
    size_t len;
} in_flight;

static void setup_in_flight(in_flight *f)
{
    assert_int_equal(peer_start(&f->peer, NULL), 0);
    f->len = 64 << 20;
    f->remote = peer_reg(&f->peer, "cpu:0", f->len, 0);
    assert_true(f->remote != 0);
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.protocol = test_protocol();
    assert_int_equal(cr_engine_create(&cfg, &f->engine), 0);
    assert_int_equal(cr_engine_open_segment(f->engine, f->peer.name, &f->seg), 0);
    f->local = malloc(f->len);
    memset(f->local, 0, f->len);
    assert_int_equal(cr_engine_register(f->engine, f->local, f->len, "cpu:0", true), 0);
}

static void teardown_in_flight(in_flight *f)
{
    cr_engine_destroy(f->engine);
    assert_int_equal(peer_stop(&f->peer), 0);
    free(f->local);
}

static cr_batch_id submit_many(in_flight *f, size_t n, size_t blk)
{
    cr_batch_id b;
    assert_int_equal(cr_batch_create(f->engine, n, &b), 0);
    cr_transfer_request *r = calloc(n, sizeof(*r));
    for (size_t i = 0; i < n; i++) {
        size_t off = (i * blk) % f->len;
        r[i] = (cr_transfer_request){CR_OP_READ, f->local + off, f->seg, f->remote + off, blk};
    }
    assert_int_equal(cr_batch_submit(f->engine, b, r, n), 0);
    free(r);
    return b;
}

static void cancel_and_free_in_flight(void **state)
{
    (void)state;
    in_flight f;
    setup_in_flight(&f);
    const size_t n = 256;
    /* Cancel right after submit: every task ends COMPLETED or CANCELED and
     * the wait returns. How many were still unsent is timing (an idle
     * lane's requests leave from the submitting thread at once, so under a
     * sanitizer every one may be on the wire already): printed, not asserted. */
    cr_batch_id b = submit_many(&f, n, 1 << 20);
    assert_int_equal(cr_batch_cancel(f.engine, b), 0);
    int rc = cr_batch_wait(f.engine, b, 20000);
    assert_true(rc == 0 || rc == CR_ERR_CANCELED);
    size_t canceled = 0;
    for (size_t i = 0; i < n; i++) {
        cr_task_status st;
        assert_int_equal(cr_batch_task_status(f.engine, b, i, &st), 0);
        assert_true(st.state == CR_TASK_COMPLETED || st.state == CR_TASK_CANCELED);
        canceled += st.state == CR_TASK_CANCELED;
    }
    print_message("cancel: %zu of %zu tasks canceled before they ran\n", canceled, n);
    assert_int_equal(cr_batch_free(f.engine, b), 0);

    /* Free while in flight: the id dies at once, memory is reclaimed later. */
    b = submit_many(&f, n, 1 << 20);
    assert_int_equal(cr_batch_free(f.engine, b), 0);
    cr_task_status st;
    assert_int_equal(cr_batch_task_status(f.engine, b, 0, &st), CR_ERR_INVALID_HANDLE);
    /* The engine keeps working (and ASan proves nothing touched freed memory). */
    assert_int_equal(
        cr_engine_transfer_sync(f.engine, CR_OP_READ, f.local, f.seg, f.remote, 4096, 0), 0);
    teardown_in_flight(&f);
}

typedef struct unreg_arg {
    cr_engine *engine;
    void *addr;
    atomic_int rc;
} unreg_arg;

static void *unregister_now(void *p)
{
    unreg_arg *a = p;
    atomic_store(&a->rc, cr_engine_unregister(a->engine, a->addr));
    return NULL;
}

static void unregister_waits_for_in_flight_transfers(void **state)
{
    (void)state;
    if (test_copies_in_submit()) {
        print_message("not applicable: %s copies finish inside submit\n", test_protocol());
        skip();
    }
    in_flight f;
    setup_in_flight(&f);
    const size_t n = 128;
    cr_batch_id b = submit_many(&f, n, 1 << 20);
    cr_task_status last;
    assert_int_equal(cr_batch_task_status(f.engine, b, n - 1, &last), 0);
    assert_int_equal(last.state, CR_TASK_WAITING); /* 128 MiB cannot be done yet */
    unreg_arg a = {f.engine, f.local, 1};
    pthread_t th;
    pthread_create(&th, NULL, unregister_now, &a);
    pthread_join(th, NULL);
    /* The barrier: unregister returned only when no task used the buffer. */
    assert_int_equal(atomic_load(&a.rc), 0);
    for (size_t i = 0; i < n; i++) {
        cr_task_status st;
        assert_int_equal(cr_batch_task_status(f.engine, b, i, &st), 0);
        assert_int_equal(st.state, CR_TASK_COMPLETED);
    }
    /* Every byte landed before unregister returned. */
    for (size_t i = 0; i < (64u << 20); i += 4093)
        if (f.local[i] != test_pattern(i, f.remote))
            fail_msg("byte %zu wrong", i);
    /* New transfers into the range are refused. */
    assert_int_equal(cr_engine_transfer_sync(f.engine, CR_OP_READ, f.local, f.seg, f.remote, 64, 0),
                     CR_ERR_ADDRESS_NOT_REGISTERED);
    assert_int_equal(cr_batch_free(f.engine, b), 0);
    teardown_in_flight(&f);
}

/* --- destroy while another thread is inside a call -------------------------- */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

typedef struct waiter {
    cr_engine *e;
    cr_batch_id b;
    int rc;
} waiter;

static void *wait_forever(void *p)
{
    waiter *w = p;
    w->rc = cr_batch_wait(w->e, w->b, -1);
    return NULL;
}

/*
 * A thread sleeps in cr_batch_wait on READs from a SIGSTOPped peer (they
 * would run to their 30 s deadline); cr_engine_destroy on another thread
 * wakes it with CR_ERR_SHUTDOWN and returns only after it has left the
 * engine (under ASan a wait that touched the freed batch or engine would
 * be reported), in far less than the deadline.
 */
static void destroy_while_a_call_waits(void **state)
{
    (void)state;
    if (test_copies_in_submit()) {
        print_message("not applicable: %s copies finish inside submit\n", test_protocol());
        skip();
    }
    in_flight f;
    assert_int_equal(peer_start(&f.peer, NULL), 0);
    f.len = 64 << 20;
    f.remote = peer_reg(&f.peer, "cpu:0", f.len, 0);
    assert_true(f.remote != 0);
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.protocol = test_protocol();
    cfg.request_timeout_ms = 30000;
    assert_int_equal(cr_engine_create(&cfg, &f.engine), 0);
    assert_int_equal(cr_engine_open_segment(f.engine, f.peer.name, &f.seg), 0);
    f.local = malloc(f.len);
    memset(f.local, 0, f.len);
    assert_int_equal(cr_engine_register(f.engine, f.local, f.len, "cpu:0", true), 0);
    /* connected first, then the peer stops answering */
    assert_int_equal(
        cr_engine_transfer_sync(f.engine, CR_OP_READ, f.local, f.seg, f.remote, 4096, 10000), 0);
    pid_t pid = f.peer.child.proc.pid;
    assert_int_equal(tt_stop_process(pid), 0); /* stopped for sure before the batch goes out */
    waiter w = {.e = f.engine, .b = submit_many(&f, 16, 4 << 20), .rc = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_forever, &w), 0);
    usleep(300 * 1000);
    uint64_t t0 = now_ms();
    cr_engine_destroy(f.engine);
    uint64_t took = now_ms() - t0;
    assert_int_equal(pthread_join(th, NULL), 0);
    print_message("destroy with a waiting call: %llu ms; the wait returned %s\n",
                  (unsigned long long)took, cr_status_name(w.rc));
    assert_int_equal(w.rc, CR_ERR_SHUTDOWN);
    assert_true(took < 10000);
    /* The stopped target is not what this test is about (resumed after its
     * initiator vanished, UCX 1.13 over tcp may trip an internal wireup
     * assertion): it is killed, not asked to quit. */
    peer_kill(&f.peer);
    free(f.local);
}

/* Cancel before send, for sure: the peer is stopped, so the lane's socket
 * fills after a few MiB and the rest of 64 x 1 MiB WRITEs cannot leave.
 * cr_batch_cancel must end those unsent tasks CANCELED at once (while the
 * peer is still stopped), and after the peer resumes every task has ended
 * COMPLETED (already on the wire) or CANCELED, and the wait returns. Over
 * UCX the library buffers sends itself, so how many stay unsent there is
 * UCX's business: printed, asserted for crescent's own tcp only. */
static void cancel_unsent_with_peer_stopped(void **state)
{
    (void)state;
    if (test_copies_in_submit()) {
        print_message("not applicable: %s copies finish inside submit\n", test_protocol());
        skip();
    }
    in_flight f;
    setup_in_flight(&f);
    assert_int_equal(
        cr_engine_transfer_sync(f.engine, CR_OP_READ, f.local, f.seg, f.remote, 4096, 10000), 0);
    pid_t pid = f.peer.child.proc.pid;
    assert_int_equal(tt_stop_process(pid), 0);
    const size_t n = 64, blk = 1 << 20;
    cr_batch_id b;
    assert_int_equal(cr_batch_create(f.engine, n, &b), 0);
    cr_transfer_request r[64];
    for (size_t i = 0; i < n; i++)
        r[i] =
            (cr_transfer_request){CR_OP_WRITE, f.local + i * blk, f.seg, f.remote + i * blk, blk};
    assert_int_equal(cr_batch_submit(f.engine, b, r, n), 0);
    usleep(200 * 1000); /* let the lanes fill their sockets */
    assert_int_equal(cr_batch_cancel(f.engine, b), 0);
    size_t canceled = 0;
    for (int tries = 0; tries < 100; tries++) { /* up to 2 s, peer still stopped */
        canceled = 0;
        for (size_t i = 0; i < n; i++) {
            cr_task_status st;
            assert_int_equal(cr_batch_task_status(f.engine, b, i, &st), 0);
            assert_true(st.state != CR_TASK_COMPLETED); /* nothing can have arrived */
            canceled += st.state == CR_TASK_CANCELED;
        }
        if (canceled >= n / 2)
            break;
        usleep(20 * 1000);
    }
    print_message("cancel with the peer stopped: %zu of %zu unsent tasks canceled at once\n",
                  canceled, n);
    if (strcmp(test_protocol(), "tcp") == 0)
        assert_true(canceled >= n / 2);
    assert_int_equal(kill(pid, SIGCONT), 0);
    int rc = cr_batch_wait(f.engine, b, 20000);
    assert_true(rc == 0 || rc == CR_ERR_CANCELED);
    size_t completed = 0;
    canceled = 0;
    for (size_t i = 0; i < n; i++) {
        cr_task_status st;
        assert_int_equal(cr_batch_task_status(f.engine, b, i, &st), 0);
        assert_true(st.state == CR_TASK_COMPLETED || st.state == CR_TASK_CANCELED);
        completed += st.state == CR_TASK_COMPLETED;
        canceled += st.state == CR_TASK_CANCELED;
    }
    assert_int_equal(completed + canceled, n);
    assert_int_equal(cr_batch_free(f.engine, b), 0);
    /* The lane keeps working after the canceled tasks were dropped. */
    assert_int_equal(
        cr_engine_transfer_sync(f.engine, CR_OP_READ, f.local, f.seg, f.remote, 4096, 10000), 0);
    teardown_in_flight(&f);
}

static void http_metadata_backend(void **state)
{
    (void)state;
    crd_http_server *srv;
    assert_int_equal(crd_http_server_start("127.0.0.1", 0, &srv), 0);
    char url[128], port[16];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metadata", crd_http_server_port(srv));
    const char *args[] = {"--metadata", url, "--host", "target-node", NULL};
    test_peer peer;
    /* "target-node" is not resolvable as a listen address: must fail cleanly. */
    assert_int_not_equal(peer_start(&peer, args), 0);
    const char *args2[] = {"--metadata", url, "--host", "127.0.0.1", NULL};
    assert_int_equal(peer_start(&peer, args2), 0);
    assert_string_equal(peer.name, "127.0.0.1");
    uint64_t remote = peer_reg(&peer, "cpu:0", 1 << 20, 0);
    assert_true(remote != 0);
    /* descriptor and rpc_meta of the peer are published */
    assert_true(crd_http_server_key_count(srv) >= 2);

    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.metadata = url;
    cfg.local_hostname = "127.0.0.1:0";
    cfg.protocol = test_protocol();
    (void)port;
    cr_engine *e;
    /* Same segment name as the peer ("127.0.0.1") would collide: use another. */
    cfg.local_hostname = "localhost";
    assert_int_equal(cr_engine_create(&cfg, &e), 0);
    uint8_t *buf = malloc(1 << 20);
    assert_int_equal(cr_engine_register(e, buf, 1 << 20, "cpu:0", true), 0);
    cr_segment_handle seg;
    assert_int_equal(cr_engine_open_segment(e, "127.0.0.1", &seg), 0);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_READ, buf, seg, remote, 1 << 20, 0), 0);
    for (size_t i = 0; i < (1u << 20); i++)
        if (buf[i] != test_pattern(i, remote))
            fail_msg("byte %zu wrong", i);
    /* Registered after we opened: found by refreshing the descriptor. */
    uint64_t later = peer_reg(&peer, "cpu:0", 4096, 0);
    assert_int_equal(cr_engine_transfer_sync(e, CR_OP_READ, buf, seg, later, 4096, 0), 0);
    assert_int_equal(buf[9], test_pattern(9, later));
    assert_int_equal(cr_engine_open_segment(e, "nobody", &seg), CR_ERR_METADATA_NOT_FOUND);
    assert_int_equal(cr_engine_unregister(e, buf), 0);
    cr_engine_destroy(e);
    assert_int_equal(peer_stop(&peer), 0);
    free(buf);
    /* Both engines removed their keys on shutdown. */
    assert_int_equal(crd_http_server_key_count(srv), 0);
    crd_http_server_stop(srv);
}

int main(void)
{
    test_require_protocol();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_config_is_named),
        cmocka_unit_test(registration_errors),
        cmocka_unit_test(cancel_and_free_in_flight),
        cmocka_unit_test(unregister_waits_for_in_flight_transfers),
        cmocka_unit_test(destroy_while_a_call_waits),
        cmocka_unit_test(cancel_unsent_with_peer_stopped),
        cmocka_unit_test(http_metadata_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
