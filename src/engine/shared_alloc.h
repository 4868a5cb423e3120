/*
 * shared_alloc.h - the process-wide table of memory handed out by
 * cr_alloc_shared(). Each allocation is one memfd mapped once; engines
 * consult the table when a buffer is registered (a range inside an
 * allocation becomes host-shareable memory) and when a same-host peer asks
 * for the fd of a region.
 */
#ifndef CRESCENT_ENGINE_SHARED_ALLOC_H
#define CRESCENT_ENGINE_SHARED_ALLOC_H

#include <stdbool.h>
#include <stdint.h>

/**
 * If [addr, addr+len) lies inside one shared allocation, pin it (it cannot be
 * freed while pinned) and return true with its id and the range's offset in
 * the memfd. Thread-safe.
 */
bool cre_shared_pin(uint64_t addr, uint64_t len, uint64_t *id, uint64_t *offset);

/** Undo one cre_shared_pin of allocation `id`. */
void cre_shared_unpin(uint64_t id);

/** Duplicate the memfd of allocation `id` (caller closes it) and give its
 *  size. Errors: CR_ERR_NOT_FOUND. */
int cre_shared_dup_fd(uint64_t id, int *fd, uint64_t *size);

#endif
