/*
 * bounce.h - a cache of CRF_BLOCK-aligned buffers for reads that cannot go
 * straight into the caller's memory (O_DIRECT needs aligned memory, offsets
 * and lengths) and for compaction's copies.
 *
 * Buffers come in power-of-two size classes from 4 KiB; released buffers are
 * kept per class up to a total of `cache_limit` bytes, so a steady stream of
 * gets reuses warm pages instead of faulting fresh ones in.
 *
 * Threading: every function may be called from any thread (one mutex).
 */
#ifndef CRESCENT_DISK_BOUNCE_H
#define CRESCENT_DISK_BOUNCE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define CRF_BOUNCE_CLASSES 40

typedef struct crf_bounce_free {
    struct crf_bounce_free *next;
} crf_bounce_free;

typedef struct crf_bounce_pool {
    pthread_mutex_t mu;
    crf_bounce_free *free[CRF_BOUNCE_CLASSES];
    size_t cached, cache_limit;
} crf_bounce_pool;

void crf_bounce_init(crf_bounce_pool *p, size_t cache_limit);
/** Free every cached buffer (all buffers must have been released). */
void crf_bounce_destroy(crf_bounce_pool *p);
/** An aligned buffer of at least len bytes, or NULL (out of memory). */
void *crf_bounce_get(crf_bounce_pool *p, size_t len);
/** Give back a buffer from crf_bounce_get of that len; NULL ignored. */
void crf_bounce_put(crf_bounce_pool *p, void *buf, size_t len);

#endif
