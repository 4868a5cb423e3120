/*
 * engine_threads_test.c - seed 000: short-lived pool threads register,
 * transfer and unregister on one engine concurrently. In each of 3 rounds a
 * fresh pool of 24 threads performs 159 registrations and 159
 * unregistrations in total; each registered buffer is written to a peer
 * process and read back, every byte verified; every call returns 0 and the
 * engine reports zero registrations after each round.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "crescent/engine.h"
#include "harness.h"

#define ROUNDS        3
#define THREADS       24
#define REGISTRATIONS 159
#define SLOT          (64 * 1024)

typedef struct shared {
    cr_engine *engine;
    cr_segment_handle seg;
    uint64_t remote;
    atomic_int registrations, unregistrations, failures, verified;
} shared;

typedef struct worker_arg {
    shared *sh;
    int index;
    int count; /* registrations this thread performs */
    int round;
} worker_arg;

/* Progress for the watchdog: a stuck round is reported with where it stood
 * instead of running into CTest's timeout without a word. */
static shared *watch_shared;
static _Atomic int watch_round;

static void watchdog(int sig)
{
    (void)sig;
    char msg[200];
    shared *sh = watch_shared;
    int n = snprintf(msg, sizeof(msg),
                     "engine_threads_test: stuck in round %d: %d registrations, %d "
                     "unregistrations, %d verified, %d failures\n",
                     atomic_load(&watch_round), sh ? atomic_load(&sh->registrations) : -1,
                     sh ? atomic_load(&sh->unregistrations) : -1,
                     sh ? atomic_load(&sh->verified) : -1, sh ? atomic_load(&sh->failures) : -1);
    if (n > 0)
        (void)!write(2, msg, (size_t)n);
    _exit(1);
}

static void *pool_thread(void *p)
{
    worker_arg *a = p;
    shared *sh = a->sh;
    for (int k = 0; k < a->count; k++) {
        size_t len = SLOT - (size_t)(k * 512); /* varied sizes */
        uint8_t *buf = malloc(2 * len);
        uint64_t seed = (uint64_t)(a->round * 1000 + a->index * 10 + k);
        for (size_t i = 0; i < len; i++)
            buf[i] = test_pattern(i, seed);
        memset(buf + len, 0, len);
        if (cr_engine_register(sh->engine, buf, 2 * len, "cpu:0", true) != 0) {
            atomic_fetch_add(&sh->failures, 1);
            free(buf);
            continue;
        }
        atomic_fetch_add(&sh->registrations, 1);
        uint64_t remote = sh->remote + (uint64_t)a->index * SLOT;
        int rc = cr_engine_transfer_sync(sh->engine, CR_OP_WRITE, buf, sh->seg, remote, len, 0);
        if (rc == 0)
            rc =
                cr_engine_transfer_sync(sh->engine, CR_OP_READ, buf + len, sh->seg, remote, len, 0);
        if (rc != 0 || memcmp(buf, buf + len, len) != 0)
            atomic_fetch_add(&sh->failures, 1);
        else
            atomic_fetch_add(&sh->verified, 1);
        if (cr_engine_unregister(sh->engine, buf) == 0)
            atomic_fetch_add(&sh->unregistrations, 1);
        else
            atomic_fetch_add(&sh->failures, 1);
        free(buf);
    }
    return NULL;
}

static void pool_threads_register_transfer_unregister(void **state)
{
    (void)state;
    test_peer peer;
    assert_int_equal(peer_start(&peer, NULL), 0);
    shared sh = {0};
    sh.remote = peer_reg(&peer, "cpu:0", (uint64_t)THREADS * SLOT, 0);
    assert_true(sh.remote != 0);
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.protocol = test_protocol();
    assert_int_equal(cr_engine_create(&cfg, &sh.engine), 0);
    assert_int_equal(cr_engine_open_segment(sh.engine, peer.name, &sh.seg), 0);

    watch_shared = &sh;
    signal(SIGALRM, watchdog);
    alarm(200); /* the whole test takes about a second, 30 s under sanitizers */
    for (int round = 0; round < ROUNDS; round++) {
        atomic_store(&watch_round, round);
        atomic_store(&sh.registrations, 0);
        atomic_store(&sh.unregistrations, 0);
        atomic_store(&sh.verified, 0);
        pthread_t th[THREADS];
        worker_arg args[THREADS];
        for (int i = 0; i < THREADS; i++) {
            /* 159 = 24 * 6 + 15: the first 15 threads do one more */
            args[i] = (worker_arg){&sh, i, REGISTRATIONS / THREADS + (i < REGISTRATIONS % THREADS),
                                   round};
            assert_int_equal(pthread_create(&th[i], NULL, pool_thread, &args[i]), 0);
        }
        for (int i = 0; i < THREADS; i++)
            pthread_join(th[i], NULL);
        assert_int_equal(atomic_load(&sh.failures), 0);
        assert_int_equal(atomic_load(&sh.registrations), REGISTRATIONS);
        assert_int_equal(atomic_load(&sh.unregistrations), REGISTRATIONS);
        assert_int_equal(atomic_load(&sh.verified), REGISTRATIONS);
        assert_int_equal(cr_engine_registration_count(sh.engine), 0);
    }
    atomic_store(&watch_round, ROUNDS); /* shutting down */
    cr_engine_destroy(sh.engine);
    assert_int_equal(peer_stop(&peer), 0);
    alarm(0);
    watch_shared = NULL;
}

int main(void)
{
    test_require_protocol();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pool_threads_register_transfer_unregister),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
