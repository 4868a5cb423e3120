/*
 * mem.c - counted heap allocation (see mem.h). The footprint of one block is
 * malloc_usable_size() plus one size_t of chunk header.
 */
#include "master/mem.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>

static _Atomic uint64_t live_bytes;

static uint64_t footprint(void *p)
{
    return (uint64_t)malloc_usable_size(p) + sizeof(size_t);
}

void *crk_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p)
        atomic_fetch_add_explicit(&live_bytes, footprint(p), memory_order_relaxed);
    return p;
}

void *crk_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p)
        atomic_fetch_add_explicit(&live_bytes, footprint(p), memory_order_relaxed);
    return p;
}

void *crk_realloc(void *p, size_t n)
{
    if (!p)
        return crk_malloc(n);
    uint64_t before = footprint(p);
    void *q = realloc(p, n ? n : 1);
    if (!q)
        return NULL;
    atomic_fetch_sub_explicit(&live_bytes, before, memory_order_relaxed);
    atomic_fetch_add_explicit(&live_bytes, footprint(q), memory_order_relaxed);
    return q;
}

void crk_free(void *p)
{
    if (!p)
        return;
    atomic_fetch_sub_explicit(&live_bytes, footprint(p), memory_order_relaxed);
    free(p);
}

uint64_t crk_mem_live_bytes(void)
{
    return atomic_load_explicit(&live_bytes, memory_order_relaxed);
}
