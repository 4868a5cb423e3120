/*
 * fake_server.h - a misbehaving server on 127.0.0.1 for malformed-reply
 * tests: every connection gets the same canned reply (after the request
 * has arrived), then is closed, or is held open without a reply (hang).
 * One thread; stopped (and joined) by fake_server_stop.
 */
#ifndef CRESCENT_TESTS_METADATA_FAKE_SERVER_H
#define CRESCENT_TESTS_METADATA_FAKE_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fake_server {
    int listen_fd;
    uint16_t port;
    char endpoint[32];
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t lock;
    char *reply; /* NULL: hang (read, never answer) */
    size_t reply_len;
    bool http; /* wait for a whole HTTP request (headers + Content-Length) */
    atomic_int connections;
} fake_server;

int fake_server_start(fake_server *f, bool http);
/** Set the canned reply (copied); NULL = hang. */
void fake_server_reply(fake_server *f, const void *reply, size_t len);
/** An HTTP response with this status and body (Content-Length, Connection: close). */
void fake_server_http(fake_server *f, int status, const char *body, size_t len);
void fake_server_stop(fake_server *f);

#endif
