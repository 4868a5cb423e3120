/*
 * slowloris.h - a slowloris attacker and a deadline-bound HTTP probe for the
 * daemons' HTTP ports (tests only).
 *
 * sl_start opens n connections to 127.0.0.1:port; a thread then sends one
 * more byte of a never-ending request head (or, with `body`, of a body
 * that never completes) on each of them every interval_ms, re-opening
 * any the server closed, so the server always sees n slow clients.
 * sl_get issues one GET and returns the HTTP status, or -1 if no complete
 * answer came within timeout_ms.
 *
 * Not thread-safe: one test thread drives an attack.
 */
#ifndef CRESCENT_TESTS_SLOWLORIS_H
#define CRESCENT_TESTS_SLOWLORIS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_attack {
    uint16_t port;
    size_t n;
    int *fds;
    int interval_ms;
    bool body;
    pthread_t tid;
    bool running;
    atomic_bool stop;
    atomic_ulong reopened; /* connections the server closed and the attacker re-opened */
} sl_attack;

/* 0, or -1 if fewer than n connections could be opened. */
int sl_start(sl_attack *a, uint16_t port, size_t n, int interval_ms, bool body);
void sl_stop(sl_attack *a);

/* GET http://127.0.0.1:port/path: the status, or -1 (no answer within timeout_ms). */
int sl_get(uint16_t port, const char *path, int timeout_ms);

#endif
