/*
 * bounce.c - size-classed cache of aligned buffers (bounce.h).
 */
#include "disk/bounce.h"

#include <stdlib.h>

#include "disk/format.h"

static unsigned size_class(size_t len)
{
    unsigned c = 0;
    size_t sz = CRF_BLOCK;
    while (sz < len && c + 1 < CRF_BOUNCE_CLASSES) {
        sz <<= 1;
        c++;
    }
    return c;
}

static size_t class_size(unsigned c)
{
    return (size_t)CRF_BLOCK << c;
}

void crf_bounce_init(crf_bounce_pool *p, size_t cache_limit)
{
    pthread_mutex_init(&p->mu, NULL);
    for (unsigned i = 0; i < CRF_BOUNCE_CLASSES; i++)
        p->free[i] = NULL;
    p->cached = 0;
    p->cache_limit = cache_limit;
}

void crf_bounce_destroy(crf_bounce_pool *p)
{
    for (unsigned i = 0; i < CRF_BOUNCE_CLASSES; i++) {
        while (p->free[i] != NULL) {
            crf_bounce_free *f = p->free[i];
            p->free[i] = f->next;
            free(f);
        }
    }
    p->cached = 0;
    pthread_mutex_destroy(&p->mu);
}

void *crf_bounce_get(crf_bounce_pool *p, size_t len)
{
    unsigned c = size_class(len);
    size_t sz = class_size(c);
    if (sz < len)
        return NULL; /* beyond the largest class */
    pthread_mutex_lock(&p->mu);
    crf_bounce_free *f = p->free[c];
    if (f != NULL) {
        p->free[c] = f->next;
        p->cached -= sz;
    }
    pthread_mutex_unlock(&p->mu);
    if (f != NULL)
        return f;
    void *buf = NULL;
    if (posix_memalign(&buf, CRF_BLOCK, sz) != 0)
        return NULL;
    return buf;
}

void crf_bounce_put(crf_bounce_pool *p, void *buf, size_t len)
{
    if (buf == NULL)
        return;
    unsigned c = size_class(len);
    size_t sz = class_size(c);
    pthread_mutex_lock(&p->mu);
    if (p->cached + sz <= p->cache_limit) {
        crf_bounce_free *f = buf;
        f->next = p->free[c];
        p->free[c] = f;
        p->cached += sz;
        buf = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    free(buf);
}
