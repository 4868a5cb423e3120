/*
 * mem.c - counted heap allocation (see mem.h). The footprint of one block is
 * malloc_usable_size() plus one size_t of chunk header.
 *
 * Each thread accumulates its changes in a thread-local delta and adds it to
 * the process-wide counter once it passes FLUSH_BYTES (and when the thread
 * exits), so that threads allocating objects concurrently do not write one
 * shared cache line on every malloc and free. A reader sees the shared
 * counter plus its own thread's delta: exact for a single thread, and off by
 * less than FLUSH_BYTES per other allocating thread otherwise.
 */
#include "master/mem.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define FLUSH_BYTES (64 * 1024)

static _Atomic int64_t live_bytes;
static _Thread_local int64_t thread_delta;
static _Thread_local int thread_registered;
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

static void flush_delta(void)
{
    atomic_fetch_add_explicit(&live_bytes, thread_delta, memory_order_relaxed);
    thread_delta = 0;
}

static void flush_at_exit(void *unused)
{
    (void)unused;
    flush_delta();
}

static void make_exit_key(void)
{
    pthread_key_create(&exit_key, flush_at_exit);
}

static void count(int64_t bytes)
{
    if (!thread_registered) {
        /* The key's destructor runs only for threads that set a value. */
        pthread_once(&exit_key_once, make_exit_key);
        pthread_setspecific(exit_key, &thread_registered);
        thread_registered = 1;
    }
    thread_delta += bytes;
    if (thread_delta >= FLUSH_BYTES || thread_delta <= -FLUSH_BYTES)
        flush_delta();
}

static int64_t footprint(void *p)
{
    return (int64_t)(malloc_usable_size(p) + sizeof(size_t));
}

void *crk_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p)
        count(footprint(p));
    return p;
}

void *crk_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p)
        count(footprint(p));
    return p;
}

void *crk_realloc(void *p, size_t n)
{
    if (!p)
        return crk_malloc(n);
    int64_t before = footprint(p);
    void *q = realloc(p, n ? n : 1);
    if (!q)
        return NULL;
    count(footprint(q) - before);
    return q;
}

void crk_free(void *p)
{
    if (!p)
        return;
    count(-footprint(p));
    free(p);
}

uint64_t crk_mem_live_bytes(void)
{
    int64_t v = atomic_load_explicit(&live_bytes, memory_order_relaxed) + thread_delta;
    return v > 0 ? (uint64_t)v : 0;
}

const crb_alloc_ops crk_counted_heap = {
    .alloc = crk_malloc,
    .alloc_zeroed = crk_calloc,
    .resize = crk_realloc,
    .release = crk_free,
};
