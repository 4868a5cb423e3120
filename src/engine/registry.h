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
 * lookups fail), waits until the last reference is released, lets the
 * owner undo what it attached (the transports' dereg, through hooks), then
 * frees it.
 */
#ifndef CRESCENT_ENGINE_REGISTRY_H
#define CRESCENT_ENGINE_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/messages.h"

#include "engine/transport.h"

typedef struct cre_buffer {
    uint64_t addr;
    uint64_t length;
    int kind;   /* cr_mem_kind */
    int device; /* device index for device memory, else -1 */
    bool remote_accessible;
    uint64_t shared_id;     /* cr_alloc_shared allocation holding it, 0 if none */
    uint64_t shared_offset; /* offset of addr inside that allocation's memfd */
    /* Per installed transport (index = cre_tp.index): what its reg made of
     * this buffer, and the blob peers see in our descriptor. Written before
     * the buffer is inserted, immutable afterwards. */
    void *tp_state[CRE_MAX_TRANSPORTS];
    crp_buf tp_blob[CRE_MAX_TRANSPORTS];
    size_t desc_bytes; /* upper bound of what it adds to our descriptor */
    /* References in flight, with CRE_BUFFER_DYING set once unregistration
     * has begun: one word, so a release learns atomically whether the
     * unregistering thread may be waiting for it (registry.c). */
    atomic_uint refs;
    struct cre_registry *owner; /* NULL: transient (cre_buffer_transient) */
} cre_buffer;

/* High bit of cre_buffer.refs: unregistration has begun. */
#define CRE_BUFFER_DYING 0x80000000u

/* What the owner does around a buffer's life (the engine: transports'
 * reg/dereg). Every hook may be NULL. */
typedef struct cre_registry_hooks {
    /* A new buffer, before anything else: settle its kind and device
     * (detect: the location was "*"). Negative refuses it. */
    int (*classify)(void *ctx, cre_buffer *b, bool detect);
    /* A new buffer, before it is inserted; may block. Negative refuses it. */
    int (*prepare)(void *ctx, cre_buffer *b);
    /* Unregistration began: no new lookups find b (references may remain). */
    void (*dying)(void *ctx, cre_buffer *b);
    /* The last reference is gone (or prepare succeeded but insertion
     * failed): undo prepare; may block, bounded. */
    void (*release)(void *ctx, cre_buffer *b);
    void *ctx;
} cre_registry_hooks;

typedef struct cre_registry {
    pthread_rwlock_t lock;
    cre_registry_hooks hooks;
    size_t max_desc_bytes; /* 0 = no limit */
    cre_buffer **items;    /* sorted by addr, non-overlapping */
    size_t count, cap;
    size_t desc_bytes; /* sum over items */
    uint64_t version;  /* bumped on every change; guarded by lock */
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
    bool detect; /* location "*": the kind is whatever the memory is */
} cre_buffer_spec;

/** hooks may be NULL (a bare table, for tests). */
int cre_registry_init(cre_registry *r, const cre_registry_hooks *hooks);
/** Release (hooks) and free every buffer still registered. No concurrent use. */
void cre_registry_fini(cre_registry *r);

/** Insert all specs or none. Errors: CR_ERR_ZERO_LENGTH,
 *  CR_INVALID_PARAMS (NULL address, too many buffers),
 *  CR_ERR_RANGE_OVERFLOW, CR_ERR_ADDRESS_OVERLAPPED (with each other or an
 *  existing buffer; the message names both ranges), CR_ERR_DESCRIPTOR_FULL
 *  (our descriptor could not carry them), a prepare hook's error.
 *  Host memory inside a cr_alloc_shared allocation becomes host-shareable
 *  (and pins the allocation). */
int cre_registry_add(cre_registry *r, const cre_buffer_spec *specs, size_t n);

/** Remove the buffer starting exactly at addr: new lookups fail at once,
 *  then wait for its references, run the release hook and free it. */
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

/** Release a reference; a transient buffer is freed with its last one. */
/** cre_registry_acquire that records no error message when the range is in
 *  no buffer (CR_ERR_ADDRESS_NOT_REGISTERED returned as is): for callers
 *  that have an answer for that (CR_OP_LOCAL_UNREGISTERED). */
int cre_registry_acquire_or_miss(cre_registry *r, uint64_t addr, uint64_t len, const char *what,
                                 cre_buffer **out);

void cre_buffer_release(cre_buffer *b);

/**
 * A transient buffer for [addr, addr+len) of unregistered host memory
 * (CR_OP_LOCAL_UNREGISTERED): kind host, device -1, not remote-accessible,
 * no transport state, in no registry, one reference held by the caller;
 * freed by the cre_buffer_release that drops the last one. Nothing waits
 * for it (no unregistration barrier: the memory is the caller's to keep
 * valid). Errors: CR_ERR_ZERO_LENGTH, CR_ERR_RANGE_OVERFLOW,
 * CR_ERR_NO_MEMORY.
 */
int cre_buffer_transient(uint64_t addr, uint64_t len, cre_buffer **out);

/** Has unregistration of b begun? (A holder should let go soon.) */
static inline bool cre_buffer_dying(cre_buffer *b)
{
    return (atomic_load(&b->refs) & CRE_BUFFER_DYING) != 0;
}

size_t cre_registry_count(cre_registry *r);

/** The table's version (bumped on every change). */
uint64_t cre_registry_version(cre_registry *r);

/**
 * Call fn once with the whole table (address order) under the read lock,
 * so what fn reads of the buffers stays valid for the call; fn must not
 * call back into the registry. Returns fn's value.
 */
int cre_registry_visit(cre_registry *r,
                       int (*fn)(void *ctx, cre_buffer *const *items, size_t n, uint64_t version),
                       void *ctx);

#endif
