/*
 * offset_allocator.h - O(1) bin-based offset allocator for one segment.
 *
 * Manages the byte range [0, capacity) of a segment: it hands out offsets,
 * never touches memory. Design (after Sebastian Aaltonen's OffsetAllocator,
 * itself a TLSF variant), widened to 64 bits:
 *
 *   - Sizes are counted in units of `alignment` bytes (a power of two), so
 *     every offset and every allocated size is a multiple of the alignment.
 *   - Free blocks live in 512 bins indexed by a "small float" of their size
 *     (3 mantissa bits, 6 exponent bits: 8 linear bins per power of two,
 *     sizes below 8 units exact). A 64-bit top bitmap plus one 8-bit leaf
 *     bitmap per top bin find the first non-empty bin >= a size class with
 *     two count-trailing-zeros, so allocation and free are O(1).
 *   - A free block is filed in the bin of its size rounded DOWN; a request
 *     searches from its size rounded UP, so any block found fits. Before that
 *     search the request checks the head of its rounded-down bin for a block
 *     that fits exactly enough (a few nodes, O(1)): a block freed by an
 *     equal-size allocation lands in that bin, so uniform-size KV blocks are
 *     reused with no waste and a segment fills to ~100 % even after churn.
 *     (Mooncake instead rounds every request up to its bin size, wasting up to
 *     1/8 of each non-representable size.) If both fail, the rounded-down bin
 *     is scanned completely, so an allocation fails only when no single free
 *     block is large enough.
 *   - Warm space first: the allocator remembers the highest end of any
 *     allocation so far (the touched frontier). When the block chosen above
 *     would reach past it, another free block that fits is taken instead if
 *     one is found in O(1) (a few nodes of the same bin, the head of the next
 *     non-empty bin). Space below the frontier was handed out before, so a
 *     store segment's pages there are committed and warm; above it they are
 *     lazily mapped and cost a page fault and a zeroing on first write (on
 *     a VM also the host's backing). Put/remove churn thus rewrites the
 *     same pages, and a lazily committed segment commits only as much as
 *     was live at its peak.
 *   - Every block (free or used) is a node in an address-ordered neighbour
 *     list; free merges a block with free neighbours at once (coalescing).
 *   - Node storage is an array that starts small and doubles on demand
 *     (nothing is sized for the worst case up front); spare nodes are
 *     recycled through a free list. A node is 32 bytes.
 *
 * Threading: none. The owner serialises every call (the master holds the
 * segment's mutex around each one; the store client its staging lock).
 */
#ifndef CRESCENT_BASE_OFFSET_ALLOCATOR_H
#define CRESCENT_BASE_OFFSET_ALLOCATOR_H

#include <stdint.h>

#include "base/alloc.h"

typedef struct crb_oa crb_oa;

/** An allocation: byte offset, allocated bytes (>= requested), node handle. */
typedef struct crb_oa_allocation {
    uint64_t offset;
    uint64_t size;
    uint32_t node;
} crb_oa_allocation;

typedef struct crb_oa_stats {
    uint64_t capacity;      /* managed bytes (segment size rounded down to alignment) */
    uint64_t used;          /* bytes in allocations */
    uint64_t free;          /* capacity - used */
    uint64_t largest_free;  /* largest single free block, bytes */
    uint32_t allocations;   /* live allocations */
    uint32_t free_blocks;   /* free blocks (1 when fully coalesced and empty) */
    uint32_t nodes;         /* nodes in use (allocations + free blocks) */
    uint32_t node_capacity; /* nodes the storage array holds now */
} crb_oa_stats;

/**
 * Create an allocator over [0, size) with the given alignment (a power of
 * two >= 1). The capacity is size rounded down to the alignment. The
 * allocator's own bookkeeping comes from `heap` (NULL: libc), which must
 * outlive it; the master passes its counted heap so node storage shows in
 * its metadata bytes.
 * Errors: CR_INVALID_PARAMS (alignment not a power of two, capacity 0),
 * CR_ERR_NO_MEMORY. *out is written only on success.
 */
int crb_oa_create(uint64_t size, uint64_t alignment, const crb_alloc_ops *heap, crb_oa **out);

/** Free the allocator and all its bookkeeping. NULL is ignored. */
void crb_oa_destroy(crb_oa *oa);

/**
 * Allocate `size` bytes (> 0; rounded up to the alignment). *out is written
 * only on success. Errors: CR_INVALID_PARAMS (size 0 or too large to round),
 * CR_NO_AVAILABLE_HANDLE (no free block is large enough), CR_ERR_NO_MEMORY
 * (node storage could not grow).
 */
int crb_oa_alloc(crb_oa *oa, uint64_t size, crb_oa_allocation *out);

/**
 * Free the allocation whose node handle is `node`, merging it with free
 * neighbours. Errors: CR_INVALID_PARAMS for a handle that is not a live
 * allocation (double free, garbage); nothing changes then.
 */
int crb_oa_free(crb_oa *oa, uint32_t node);

/** Bytes currently allocated. O(1). */
uint64_t crb_oa_used(const crb_oa *oa);

/** Managed capacity in bytes. O(1). */
uint64_t crb_oa_capacity(const crb_oa *oa);

/**
 * The touched frontier in bytes: the highest end of any allocation made so
 * far (0 for a new allocator). Never decreases. O(1).
 */
uint64_t crb_oa_touched(const crb_oa *oa);

/**
 * Fill *st. O(1) except largest_free, which scans the highest non-empty bin.
 */
void crb_oa_get_stats(const crb_oa *oa, crb_oa_stats *st);

/** Bytes of heap the allocator itself holds (node array and header). */
uint64_t crb_oa_footprint(const crb_oa *oa);

#endif
