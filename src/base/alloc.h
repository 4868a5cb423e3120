/*
 * alloc.h - a pluggable heap for data structures that want their memory
 * counted by their owner (the master counts its metadata bytes; the store
 * client does not care and uses libc).
 *
 * Threading: the ops table is immutable; whether its functions may be called
 * from several threads is the implementation's promise (libc's and the
 * master's counted heap both may).
 */
#ifndef CRESCENT_BASE_ALLOC_H
#define CRESCENT_BASE_ALLOC_H

#include <stddef.h>

typedef struct crb_alloc_ops {
    void *(*alloc)(size_t n);                     /* malloc semantics */
    void *(*alloc_zeroed)(size_t n, size_t size); /* calloc semantics */
    void *(*resize)(void *p, size_t n);           /* realloc semantics: NULL leaves p */
    void (*release)(void *p);                     /* free semantics; NULL ignored */
} crb_alloc_ops;

/** malloc / calloc / realloc / free. */
extern const crb_alloc_ops crb_alloc_libc;

#endif
