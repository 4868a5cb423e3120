/*
 * registry.h - the engine's table of registered local buffers.
 *
 * A sorted array of buffer pointers under a rwlock: lookup of "is
 * [addr, addr+len) inside one registered buffer" is a binary search
 * (O(log n)) that may run concurrently with other lookups; (un)registration
 * takes the write lock.
 *
 * Lifetime: a successful lookup takes a reference on the buffer, released
 * with cre_buffer_release() once the engine no longer touches the range.
 * Unregistration is a barrier: it removes the buffer from the table (so new
 * lookups fail), waits until the last reference is released, then frees it.
 */
#ifndef CRESCENT_ENGINE_REGISTRY_H
#define CRESCENT_ENGINE_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cre_buffer {
    uint64_t addr;
    uint64_t length;
    int kind;   /* cr_mem_kind */
    int device; /* device index for device memory, else -1 */
    bool remote_accessible;
    uint64_t shared_id;     /* cr_alloc_shared allocation holding it, 0 if none */
    uint64_t shared_offset; /* offset of addr inside that allocation's memfd */
    uint32_t ctl_slot;      /* control-page slot fencing same-host copies */
    uint64_t ctl_gen;       /* 0 when the registry has no control page */
    /* References in flight, with CRE_BUFFER_DYING set once unregistration
     * has begun: one word, so a release learns atomically whether the
     * unregistering thread may be waiting for it (registry.c). */
    atomic_uint refs;
    struct cre_registry *owner;
} cre_buffer;

/* High bit of cre_buffer.refs: unregistration has begun. */
#define CRE_BUFFER_DYING 0x80000000u

typedef struct cre_registry {
    pthread_rwlock_t lock;
    struct cre_ctl_page *ctl; /* NULL: no same-host fencing (unit tests) */
    uint64_t fence_timeout_ms;
    cre_buffer **items; /* sorted by addr, non-overlapping */
    size_t count, cap;
    uint64_t version; /* bumped on every change; guarded by lock */
    pthread_mutex_t drain_lock;
    pthread_cond_t drained;
} cre_registry;

/** Parsed registration request. */
typedef struct cre_buffer_spec {
    uint64_t addr;
    uint64_t length;
    int kind;
    int device;
    bool remote_accessible;
    /* filled by the registry (snapshots); ignored on add */
    uint64_t shared_id, shared_offset;
    uint32_t ctl_slot;
    uint64_t ctl_gen;
} cre_buffer_spec;

int cre_registry_init(cre_registry *r);
void cre_registry_fini(cre_registry *r);

/** Insert all specs or none. Errors: overlap (with each other or existing).
 *  Host memory inside a cr_alloc_shared allocation becomes host-shareable
 *  (and pins the allocation); with a control page each buffer gets a slot. */
int cre_registry_add(cre_registry *r, const cre_buffer_spec *specs, size_t n);

/** Remove the buffer starting exactly at addr, waiting for its local
 *  references and then (control page) for same-host peers' copies. */
int cre_registry_remove(cre_registry *r, uint64_t addr);

/**
 * Find the buffer containing [addr, addr+len) and take a reference.
 * Errors: CR_ERR_ZERO_LENGTH, CR_ERR_RANGE_OVERFLOW,
 * CR_ERR_ADDRESS_NOT_REGISTERED, CR_ERR_OUT_OF_RANGE (starts inside a
 * buffer but runs past its end). `what` names the range in messages
 * ("local", "target").
 */
int cre_registry_acquire(cre_registry *r, uint64_t addr, uint64_t len, const char *what,
                         cre_buffer **out);

void cre_buffer_release(cre_buffer *b);

size_t cre_registry_count(cre_registry *r);

/**
 * Copy a snapshot of the table (for descriptors) into a malloc'd array of
 * specs; *version receives the table version it reflects.
 */
int cre_registry_snapshot(cre_registry *r, cre_buffer_spec **out, size_t *n, uint64_t *version);

#endif
