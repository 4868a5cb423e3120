/*
 * curl_util.h - what the libcurl-based metadata clients (http_backend.c,
 * the etcd client) share: one-time global initialisation, a small pool of
 * easy handles (so back-to-back calls reuse kept-alive connections and no
 * handle is ever used by two threads), and a bounded response collector.
 *
 * Threading: crm_curl_pool_* may be called from any thread; a handle taken
 * with crm_curl_pool_acquire belongs to the caller until released.
 */
#ifndef CRESCENT_METADATA_CURL_UTIL_H
#define CRESCENT_METADATA_CURL_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

#include "metadata/quote.h"

#define CRM_CURL_POOL_MAX 4

/**
 * curl_global_init once per process (never undone: a library cannot know when
 * its last user is gone). Returns 0, or CR_ERR_METADATA naming `who`.
 */
int crm_curl_global_init(const char *who);

typedef struct crm_curl_pool {
    pthread_mutex_t lock;
    CURL *idle[CRM_CURL_POOL_MAX];
    int n_idle;
} crm_curl_pool;

/** Initialise an empty pool. Returns 0 or CR_ERR_SYSTEM. */
int crm_curl_pool_init(crm_curl_pool *p);
/** Clean up every idle handle; no handle may be out. */
void crm_curl_pool_fini(crm_curl_pool *p);
/** An idle handle, or a new one; NULL when curl_easy_init fails. */
CURL *crm_curl_pool_acquire(crm_curl_pool *p);
/** Reset the handle's options (its connection cache stays) and park it. */
void crm_curl_pool_release(crm_curl_pool *p, CURL *h);

/*
 * A response body being received. Bytes past `limit` are dropped, or, with
 * fail_over_limit, abort the transfer (curl reports CURLE_WRITE_ERROR and
 * `over` is set). `data` is malloc'd (NULL while empty); the owner frees it.
 */
typedef struct crm_curl_body {
    char *data;
    size_t len;
    size_t cap;
    size_t limit;
    bool fail_over_limit;
    bool over;
    bool oom;
} crm_curl_body;

/** CURLOPT_WRITEFUNCTION for a crm_curl_body passed as CURLOPT_WRITEDATA. */
size_t crm_curl_on_body(char *ptr, size_t size, size_t nmemb, void *userdata);

/** Append bytes to a body (the collector's core, also used by stream readers). */
bool crm_curl_body_append(crm_curl_body *b, const char *ptr, size_t n);

#endif
