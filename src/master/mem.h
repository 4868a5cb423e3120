/*
 * mem.h - counted heap allocation for the master's metadata.
 *
 * Every allocation the master core makes (objects, writes, discards, hash
 * buckets, segments, allocator nodes) goes through these wrappers, which keep
 * a process-wide count of live bytes. The count is the allocator's real
 * footprint, not the requested size: malloc_usable_size(p) plus one word of
 * chunk header (glibc's per-chunk overhead). Under ASan, malloc_usable_size
 * reports the requested size, so sanitized builds count slightly less.
 *
 * The counter lets a test measure bytes per stored object directly, and feeds
 * the metadata_bytes metric.
 *
 * Threading: all functions may be called from any thread. Each thread
 * batches its changes (up to 64 KiB) before adding them to the shared
 * counter, so the count read by one thread is exact for its own allocations
 * and may lag other threads' by less than 64 KiB each.
 */
#ifndef CRESCENT_MASTER_MEM_H
#define CRESCENT_MASTER_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"

/** malloc(n), counted. NULL on failure (nothing counted). */
void *crk_malloc(size_t n);

/** calloc(n, size), counted. NULL on failure or overflow. */
void *crk_calloc(size_t n, size_t size);

/**
 * realloc(p, n), counted. On failure returns NULL and leaves p (and the
 * count) unchanged. p may be NULL.
 */
void *crk_realloc(void *p, size_t n);

/** free(p) of a pointer from the functions above. NULL is ignored. */
void crk_free(void *p);

/** The functions above as a heap for base data structures (the offset
 *  allocator's node storage). */
extern const crb_alloc_ops crk_counted_heap;

/** Live bytes currently held by crk_ allocations in this process. */
uint64_t crk_mem_live_bytes(void);

#endif
