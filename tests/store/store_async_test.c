/*
 * store_async_test.c - the completion queue (cr_store_cq, store.h) against
 * real processes: a crescent-master child, a holder child
 * (crescent-test-store-client with a segment) and a cr_store in this
 * process without a segment, so every value lives in the holder's process.
 *
 *   sixty_four_in_flight  one thread keeps 64 put_from, then 64 get_into and
 *       64 exist (half of them misses), then 64 copying gets in flight; every
 *       byte read is checked,
 *       the eventfd is readable exactly while completions wait, each batch
 *       submit form runs once, 64 removes leave nothing.
 *   bad_arguments  NULL queue/key/arrays, bad config fields, a full queue
 *       (CR_ERR_BUSY) each get their code and no completion.
 *   cancel_and_destroy_in_flight  with the one driver held in a pass (the master
 *       stopped), exactly the 32 pending calls canceled complete with
 *       CR_ERR_CANCELED and the other 32 read their value; destroying a queue with 192 calls in
 *       flight returns and leaks nothing (ASan), and the store still works.
 *   dead_holder_then_dead_master  with the holder killed every get fails with
 *       a named code within its transfer deadline; with the master killed
 *       every exist fails with CR_RPC_FAIL / CR_RPC_TIMEOUT within its rpc
 *       deadline.
 */
#include <poll.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crescent/store.h"
#include "store_harness.h"
#include "store_pattern.h"

#define N        64
#define VAL_MAX  (64 << 10)
#define DEADLINE 2000 /* ms: the store's rpc and transfer timeouts here */

static sh_master master;
static sh_client holder;

static int setup(void **state)
{
    (void)state;
    if (sh_master_start(&master, NULL) < 0)
        return -1;
    const char *args[] = {"--segment", "64M", "--region", "0", NULL};
    return sh_client_start(&holder, master.addr, args);
}

static int teardown(void **state)
{
    (void)state;
    if (holder.child.proc.pid > 0)
        sh_client_stop(&holder);
    if (master.cm.p.pid > 0)
        sh_master_stop(&master);
    sh_kill_all();
    return 0;
}

static cr_store *open_client_with(const char *protocol)
{
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.protocol = protocol;
    cfg.master_address = master.addr;
    cfg.global_segment_size = 0;
    cfg.local_buffer_size = 2 << 20;
    cfg.rpc_timeout_ms = DEADLINE;
    cfg.transfer_timeout_ms = DEADLINE;
    cr_store *s = NULL;
    assert_int_equal(cr_store_setup(&cfg, &s), 0);
    return s;
}

static cr_store *open_client(void)
{
    return open_client_with("auto");
}

static size_t val_len(int i)
{
    return (size_t)(4096 + (i * 977) % (VAL_MAX - 4096));
}

/* Wait for exactly n completions (within 30 s), indexed by user_data < N*4. */
static void reap(cr_store_cq *q, size_t n, cr_store_completion *got)
{
    size_t have = 0;
    uint64_t t0 = sh_now_ms();
    while (have < n) {
        int k = cr_store_cq_wait(q, got + have, n - have, n - have, 1000);
        assert_true(k >= 0);
        have += (size_t)k;
        assert_true(sh_now_ms() - t0 < 30000);
    }
    assert_int_equal(cr_store_cq_in_flight(q), 0);
}

static int fd_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void sixty_four_in_flight(void **state)
{
    (void)state;
    cr_store *s = open_client();
    size_t region = (size_t)N * VAL_MAX * 2;
    uint8_t *src = aligned_alloc(4096, region), *dst = src + (size_t)N * VAL_MAX;
    assert_non_null(src);
    assert_int_equal(cr_store_register_buffer(s, src, region), 0);
    cr_store_cq *q = NULL;
    assert_int_equal(cr_store_cq_create(s, NULL, &q), 0);
    int efd = cr_store_cq_fd(q);
    assert_true(efd >= 0);
    assert_false(fd_readable(efd));

    char keys[2 * N][32];
    cr_store_completion got[4 * N];
    for (int i = 0; i < 2 * N; i++)
        snprintf(keys[i], sizeof(keys[i]), "async-%d", i);
    for (int i = 0; i < N; i++) {
        sp_fill(src + (size_t)i * VAL_MAX, val_len(i), 5000 + (uint64_t)i);
        assert_int_equal(cr_store_submit_put_from(q, keys[i], src + (size_t)i * VAL_MAX, val_len(i),
                                                  NULL, (uint64_t)i),
                         0);
    }
    assert_true(cr_store_cq_in_flight(q) <= N);
    /* The fd becomes readable once something completed. */
    struct pollfd p = {.fd = efd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 10000), 1);
    reap(q, N, got);
    assert_false(fd_readable(efd));
    bool seen[4 * N] = {false};
    for (int k = 0; k < N; k++) {
        assert_true(got[k].user_data < N);
        assert_false(seen[got[k].user_data]);
        seen[got[k].user_data] = true;
        assert_int_equal(got[k].op, CR_ASYNC_PUT_FROM);
        assert_int_equal(got[k].result, 0);
    }

    /* 64 gets and 64 exists (keys N..2N-1 were never put) at once. */
    memset(dst, 0xEE, (size_t)N * VAL_MAX);
    for (int i = 0; i < N; i++) {
        assert_int_equal(
            cr_store_submit_get_into(q, keys[i], dst + (size_t)i * VAL_MAX, VAL_MAX, (uint64_t)i),
            0);
        assert_int_equal(cr_store_submit_exist(q, keys[(i % 2) ? i : N + i], (uint64_t)(N + i)), 0);
    }
    reap(q, 2 * N, got);
    memset(seen, 0, sizeof(seen));
    for (int k = 0; k < 2 * N; k++) {
        uint64_t u = got[k].user_data;
        assert_true(u < 2 * N);
        assert_false(seen[u]);
        seen[u] = true;
        if (u < N) {
            assert_int_equal(got[k].op, CR_ASYNC_GET_INTO);
            assert_int_equal(got[k].result, (int64_t)val_len((int)u));
            assert_int_equal(sp_check(dst + u * VAL_MAX, val_len((int)u), 5000 + u), -1);
        } else {
            int i = (int)(u - N);
            assert_int_equal(got[k].op, CR_ASYNC_EXIST);
            assert_int_equal(got[k].result, (i % 2) ? 1 : 0);
        }
    }

    /* 64 copying gets: each completion owns a malloc'd copy. */
    for (int i = 0; i < N; i++)
        assert_int_equal(cr_store_submit_get(q, keys[i], (uint64_t)i), 0);
    reap(q, N, got);
    for (int k = 0; k < N; k++) {
        uint64_t u = got[k].user_data;
        assert_int_equal(got[k].op, CR_ASYNC_GET);
        assert_int_equal(got[k].result, (int64_t)val_len((int)u));
        assert_non_null(got[k].value);
        assert_int_equal(sp_check(got[k].value, val_len((int)u), 5000 + u), -1);
        free(got[k].value);
    }
    assert_int_equal(cr_store_submit_get(q, "async-never-put", 7), 0);
    reap(q, 1, got);
    assert_int_equal(got[0].result, CR_OBJECT_NOT_FOUND);
    assert_null(got[0].value);

    /* The batch forms, one each, in flight together. */
    const char *bk[N];
    void *bb[N];
    size_t bl[N];
    int put_res[N], ex_res[N], rm_res[N];
    int64_t get_res[N];
    for (int i = 0; i < N; i++) {
        bk[i] = keys[i];
        bb[i] = dst + (size_t)i * VAL_MAX;
        bl[i] = VAL_MAX;
    }
    memset(dst, 0, (size_t)N * VAL_MAX);
    assert_int_equal(cr_store_submit_batch_get_into(q, bk, bb, bl, N, get_res, 1), 0);
    assert_int_equal(cr_store_submit_batch_exist(q, bk, N, ex_res, 2), 0);
    reap(q, 2, got);
    for (int k = 0; k < 2; k++)
        assert_int_equal(got[k].result, 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(get_res[i], (int64_t)val_len(i));
        assert_int_equal(sp_check(dst + (size_t)i * VAL_MAX, val_len(i), 5000 + (uint64_t)i), -1);
        assert_int_equal(ex_res[i], 1);
    }
    /* A batch put of keys N..2N-1; then 64 single removes (forced: the gets above hold read
     * leases) and one batch remove.  */
    const char *nk[N];
    void *nb[N];
    size_t ns[N];
    for (int i = 0; i < N; i++) {
        nk[i] = keys[N + i];
        nb[i] = src + (size_t)i * VAL_MAX;
        ns[i] = val_len(i);
    }
    assert_int_equal(cr_store_submit_batch_put_from(q, nk, nb, ns, N, NULL, put_res, 3), 0);
    reap(q, 1, got);
    assert_int_equal(got[0].result, 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(put_res[i], 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(cr_store_submit_remove(q, keys[i], true, (uint64_t)i), 0);
    assert_int_equal(cr_store_submit_batch_remove(q, nk, N, false, rm_res, 99), 0);
    reap(q, N + 1, got);
    for (int k = 0; k < N + 1; k++)
        assert_int_equal(got[k].result, 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(rm_res[i], 0);
    for (int i = 0; i < 2 * N; i++)
        assert_int_equal(cr_store_exist(s, keys[i]), 0);

    cr_store_cq_destroy(q);
    assert_int_equal(cr_store_unregister_buffer(s, src), 0);
    cr_store_destroy(s);
    free(src);
}

static void bad_arguments(void **state)
{
    (void)state;
    cr_store *s = open_client();
    cr_store_cq *q = NULL;
    cr_store_cq_config cfg;
    cr_store_cq_config_init(&cfg);
    cfg.drivers = 0;
    assert_int_equal(cr_store_cq_create(s, &cfg, &q), CR_INVALID_PARAMS);
    cr_store_cq_config_init(&cfg);
    cfg.max_coalesce = 5000;
    assert_int_equal(cr_store_cq_create(s, &cfg, &q), CR_INVALID_PARAMS);
    cr_store_cq_config_init(&cfg);
    cfg.struct_size = 3;
    assert_int_equal(cr_store_cq_create(s, &cfg, &q), CR_INVALID_PARAMS);
    assert_int_equal(cr_store_cq_create(NULL, NULL, &q), CR_INVALID_PARAMS);
    assert_null(q);
    assert_int_equal(cr_store_submit_exist(NULL, "k", 0), CR_INVALID_PARAMS);

    cr_store_cq_config_init(&cfg);
    cfg.max_in_flight = 4;
    assert_int_equal(cr_store_cq_create(s, &cfg, &q), 0);
    assert_int_equal(cr_store_submit_exist(q, NULL, 0), CR_INVALID_PARAMS);
    assert_int_equal(cr_store_submit_get_into(q, "k", NULL, 10, 0), CR_INVALID_PARAMS);
    assert_int_equal(cr_store_submit_batch_exist(q, NULL, 3, NULL, 0), CR_INVALID_PARAMS);
    assert_int_equal(cr_store_cq_in_flight(q), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(cr_store_submit_exist(q, "bad-args-missing", (uint64_t)i), 0);
    assert_int_equal(cr_store_submit_exist(q, "one-too-many", 9), CR_ERR_BUSY);
    cr_store_completion got[4];
    reap(q, 4, got);
    for (int k = 0; k < 4; k++)
        assert_int_equal(got[k].result, 0); /* missing */
    /* An invalid key fails alone, with the synchronous call's code. */
    assert_int_equal(cr_store_submit_exist(q, "", 7), 0);
    reap(q, 1, got);
    assert_int_equal(got[0].result, CR_INVALID_KEY);
    /* Nothing in flight: wait returns at once with nothing. */
    assert_int_equal(cr_store_cq_wait(q, got, 4, 1, -1), 0);
    cr_store_cq_destroy(q);
    cr_store_destroy(s);
}

static void cancel_and_destroy_in_flight(void **state)
{
    (void)state;
    cr_store *s = open_client();
    uint8_t *buf = aligned_alloc(4096, 4 << 20);
    assert_non_null(buf);
    assert_int_equal(cr_store_register_buffer(s, buf, 4 << 20), 0);
    sp_fill(buf, 4096, 1);
    assert_int_equal(cr_store_put_from(s, "cancel-key", buf, 4096, NULL), 0);

    cr_store_cq_config cfg;
    cr_store_cq_config_init(&cfg);
    cfg.drivers = 1;
    cr_store_cq *q = NULL;
    assert_int_equal(cr_store_cq_create(s, &cfg, &q), 0);
    /* Hold the only driver in a pass: with the master stopped, its exist waits (up to the rpc
     * deadline). Gets do not batch with an exist, so they stay pending and can be canceled. */
    assert_int_equal(tt_stop_process(master.cm.p.pid), 0);
    assert_int_equal(cr_store_submit_exist(q, "cancel-key", 100), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(cr_store_submit_get_into(q, "cancel-key", buf + 4096 + (size_t)i * 4096,
                                                  4096, (uint64_t)(i % 2)),
                         0);
    int canceled = cr_store_cq_cancel(q, 1);
    assert_int_equal(kill(master.cm.p.pid, SIGCONT), 0);
    assert_int_equal(canceled, N / 2);
    cr_store_completion got[N + 1];
    reap(q, N + 1, got);
    int n_canceled = 0;
    for (int k = 0; k < N + 1; k++) {
        if (got[k].user_data == 100) {
            assert_true(got[k].result == 1 || got[k].result == CR_RPC_TIMEOUT);
        } else if (got[k].result == CR_ERR_CANCELED) {
            assert_int_equal(got[k].user_data, 1);
            n_canceled++;
        } else {
            assert_int_equal(got[k].user_data, 0);
            assert_int_equal(got[k].result, 4096);
        }
    }
    assert_int_equal(n_canceled, N / 2);
    /* Destroy with 192 calls in flight (some running, most queued). */
    for (int i = 0; i < N; i++) {
        assert_int_equal(cr_store_submit_get_into(q, "cancel-key", buf + 4096 + (size_t)i * 4096,
                                                  4096, (uint64_t)i),
                         0);
        assert_int_equal(cr_store_submit_exist(q, "cancel-key", (uint64_t)i), 0);
        assert_int_equal(cr_store_submit_get(q, "cancel-key", (uint64_t)i), 0);
    }
    sh_sleep_ms(20); /* some complete, unreaped: destroy frees their copies */
    cr_store_cq_destroy(q);
    /* The store is unharmed; closing it with a new queue's calls in flight is safe too. */
    assert_int_equal(cr_store_exist(s, "cancel-key"), 1);
    assert_int_equal(cr_store_cq_create(s, NULL, &q), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(cr_store_submit_exist(q, "cancel-key", (uint64_t)i), 0);
    assert_int_equal(cr_store_close(s), 0);
    reap(q, N, got);
    for (int k = 0; k < N; k++)
        assert_true(got[k].result == 1 || got[k].result == CR_UNAVAILABLE_IN_CURRENT_STATUS);
    cr_store_cq_destroy(q);
    cr_store_destroy(s);
    free(buf);
}

static void dead_holder_then_dead_master(void **state)
{
    (void)state;
    /* tcp: a dead holder refuses the connection. (Over shm this process may still read the
     * dead holder's pages through its own mapping until the master drops the segment.) */
    cr_store *s = open_client_with("tcp");
    uint8_t *buf = aligned_alloc(4096, (size_t)N * 8192);
    assert_non_null(buf);
    assert_int_equal(cr_store_register_buffer(s, buf, (size_t)N * 8192), 0);
    char keys[N][32];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "dead-%d", i);
        sp_fill(buf, 4096, (uint64_t)i);
        assert_int_equal(cr_store_put_from(s, keys[i], buf, 4096, NULL), 0);
    }
    cr_store_cq *q = NULL;
    assert_int_equal(cr_store_cq_create(s, NULL, &q), 0);
    sh_client_kill(&holder);

    cr_store_completion got[N];
    uint64_t t0 = sh_now_ms();
    for (int i = 0; i < N; i++)
        assert_int_equal(
            cr_store_submit_get_into(q, keys[i], buf + (size_t)i * 8192, 8192, (uint64_t)i), 0);
    reap(q, N, got);
    uint64_t took = sh_now_ms() - t0;
    for (int k = 0; k < N; k++) {
        assert_true(got[k].result < 0);
        assert_true(got[k].result != CR_ERR_CANCELED);
        assert_string_not_equal(cr_strerror((int)got[k].result), cr_strerror(-1));
    }
    print_message("dead holder: %d calls failed in %llu ms (first %lld: %s)\n", N,
                  (unsigned long long)took, (long long)got[0].result,
                  cr_strerror((int)got[0].result));
    /* One pass of up to 64 coalesced gets: one transfer deadline, plus retries of other replicas
     * (none here), plus slack for a loaded machine. */
    assert_true(took < 3 * DEADLINE + 5000);

    sh_master_kill(&master);
    t0 = sh_now_ms();
    for (int i = 0; i < N; i++)
        assert_int_equal(cr_store_submit_exist(q, keys[i], (uint64_t)i), 0);
    reap(q, N, got);
    took = sh_now_ms() - t0;
    for (int k = 0; k < N; k++)
        assert_true(got[k].result == CR_RPC_FAIL || got[k].result == CR_RPC_TIMEOUT);
    print_message("dead master: %d exists failed in %llu ms (%s)\n", N, (unsigned long long)took,
                  cr_strerror((int)got[0].result));
    assert_true(took < 3 * DEADLINE + 5000);
    cr_store_cq_destroy(q);
    cr_store_destroy(s);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sixty_four_in_flight),
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(cancel_and_destroy_in_flight),
        cmocka_unit_test(dead_holder_then_dead_master),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
