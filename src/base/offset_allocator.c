/*
 * offset_allocator.c - TLSF-style offset allocator with 64-bit offsets (see
 * offset_allocator.h for the design). All internal sizes and offsets are in
 * units of the alignment.
 *
 * Node states, told apart by bin_prev:
 *   free block : bin_prev is a node index or NIL, the node is in bin list
 *   allocation : bin_prev == USED
 *   spare node : bin_prev == SPARE, chained through bin_next in spare list
 */
#include "base/offset_allocator.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/alloc.h"

#define NIL       0xFFFFFFFFu
#define USED      0xFFFFFFFEu
#define SPARE     0xFFFFFFFDu
#define MAX_NODES 0xFFFFFF00u

#define MANTISSA_BITS    3
#define MANTISSA_VALUE   (1u << MANTISSA_BITS)
#define MANTISSA_MASK    (MANTISSA_VALUE - 1)
#define TOP_BINS         64
#define LEAF_BINS        8
#define NUM_BINS         (TOP_BINS * LEAF_BINS)
#define EXACT_FIT_PROBES 8
#define INITIAL_NODES    64
#define WARM_PROBES      64 /* nodes of one bin tried to stay below the frontier */

typedef struct oa_node {
    uint64_t off; /* units */
    uint64_t len; /* units */
    uint32_t bin_prev, bin_next;
    uint32_t nb_prev, nb_next; /* address-order neighbours */
} oa_node;

struct crb_oa {
    uint64_t capacity_units;
    uint64_t used_units;
    uint64_t touched_units; /* highest end of any allocation so far */
    unsigned shift;         /* log2(alignment) */
    uint32_t allocations;
    uint32_t free_blocks;
    const crb_alloc_ops *heap; /* where nodes and this header come from */
    oa_node *nodes;
    uint32_t node_cap;
    uint32_t spare; /* head of spare-node list */
    uint32_t spare_count;
    uint64_t top_bitmap;
    uint8_t leaf_bitmap[TOP_BINS];
    uint32_t bin_head[NUM_BINS];
};

static unsigned highest_bit(uint64_t v)
{
    return 63u - (unsigned)__builtin_clzll(v);
}

/* Bin whose lower bound is <= size: where a free block of `size` is filed. */
static uint32_t bin_round_down(uint64_t size)
{
    if (size < MANTISSA_VALUE)
        return (uint32_t)size;
    unsigned start = highest_bit(size) - MANTISSA_BITS;
    uint32_t exp = start + 1;
    uint32_t mant = (uint32_t)(size >> start) & MANTISSA_MASK;
    return (exp << MANTISSA_BITS) + mant;
}

/* Smallest bin whose every block holds `size`. */
static uint32_t bin_round_up(uint64_t size)
{
    if (size < MANTISSA_VALUE)
        return (uint32_t)size;
    unsigned start = highest_bit(size) - MANTISSA_BITS;
    uint32_t exp = start + 1;
    uint32_t mant = (uint32_t)(size >> start) & MANTISSA_MASK;
    if (size & ((1ull << start) - 1))
        mant++; /* may carry into the exponent: that is the next bin */
    return (exp << MANTISSA_BITS) + mant;
}

static void bin_insert(crb_oa *oa, uint32_t n)
{
    oa_node *node = &oa->nodes[n];
    uint32_t bin = bin_round_down(node->len);
    uint32_t head = oa->bin_head[bin];
    node->bin_prev = NIL;
    node->bin_next = head;
    if (head != NIL)
        oa->nodes[head].bin_prev = n;
    else {
        oa->leaf_bitmap[bin >> 3] |= (uint8_t)(1u << (bin & 7));
        oa->top_bitmap |= 1ull << (bin >> 3);
    }
    oa->bin_head[bin] = n;
    oa->free_blocks++;
}

static void bin_remove(crb_oa *oa, uint32_t n)
{
    oa_node *node = &oa->nodes[n];
    if (node->bin_prev != NIL) {
        oa->nodes[node->bin_prev].bin_next = node->bin_next;
    } else {
        uint32_t bin = bin_round_down(node->len);
        oa->bin_head[bin] = node->bin_next;
        if (node->bin_next == NIL) {
            oa->leaf_bitmap[bin >> 3] &= (uint8_t) ~(1u << (bin & 7));
            if (oa->leaf_bitmap[bin >> 3] == 0)
                oa->top_bitmap &= ~(1ull << (bin >> 3));
        }
    }
    if (node->bin_next != NIL)
        oa->nodes[node->bin_next].bin_prev = node->bin_prev;
    node->bin_prev = NIL;
    node->bin_next = NIL;
    oa->free_blocks--;
}

/* Make sure at least one spare node exists. */
static int reserve_node(crb_oa *oa)
{
    if (oa->spare != NIL)
        return 0;
    if (oa->node_cap >= MAX_NODES)
        return crb_error(CR_ERR_NO_MEMORY, "offset allocator: node limit %u reached", MAX_NODES);
    uint64_t want = (uint64_t)oa->node_cap * 2;
    if (want > MAX_NODES)
        want = MAX_NODES;
    oa_node *grown = oa->heap->resize(oa->nodes, (size_t)want * sizeof(*grown));
    if (!grown)
        return crb_error(CR_ERR_NO_MEMORY, "offset allocator: growing nodes to %llu",
                         (unsigned long long)want);
    oa->nodes = grown;
    /* Chain the new nodes into the spare list, lowest index first. */
    for (uint64_t i = want; i-- > oa->node_cap;) {
        grown[i].bin_prev = SPARE;
        grown[i].bin_next = oa->spare;
        oa->spare = (uint32_t)i;
    }
    oa->spare_count += (uint32_t)(want - oa->node_cap);
    oa->node_cap = (uint32_t)want;
    return 0;
}

static uint32_t take_spare(crb_oa *oa)
{
    uint32_t n = oa->spare;
    oa->spare = oa->nodes[n].bin_next;
    oa->spare_count--;
    return n;
}

static void put_spare(crb_oa *oa, uint32_t n)
{
    oa->nodes[n].bin_prev = SPARE;
    oa->nodes[n].bin_next = oa->spare;
    oa->spare = n;
    oa->spare_count++;
}

int crb_oa_create(uint64_t size, uint64_t alignment, const crb_alloc_ops *heap, crb_oa **out)
{
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        return crb_error(CR_INVALID_PARAMS,
                         "offset allocator: alignment %llu is not a power of two",
                         (unsigned long long)alignment);
    unsigned shift = (unsigned)__builtin_ctzll(alignment);
    uint64_t units = size >> shift;
    if (units == 0)
        return crb_error(CR_INVALID_PARAMS,
                         "offset allocator: size %llu is smaller than the alignment %llu",
                         (unsigned long long)size, (unsigned long long)alignment);
    if (heap == NULL)
        heap = &crb_alloc_libc;
    crb_oa *oa = heap->alloc_zeroed(1, sizeof(*oa));
    if (!oa)
        return crb_error(CR_ERR_NO_MEMORY, "offset allocator: header");
    oa->heap = heap;
    oa->nodes = heap->alloc(INITIAL_NODES * sizeof(oa_node));
    if (!oa->nodes)
        goto undo_header;
    oa->node_cap = INITIAL_NODES;
    oa->capacity_units = units;
    oa->shift = shift;
    for (size_t b = 0; b < NUM_BINS; b++)
        oa->bin_head[b] = NIL;
    oa->spare = NIL;
    for (uint32_t i = INITIAL_NODES; i-- > 1;)
        put_spare(oa, i);
    oa_node *all = &oa->nodes[0];
    all->off = 0;
    all->len = units;
    all->nb_prev = NIL;
    all->nb_next = NIL;
    bin_insert(oa, 0);
    *out = oa;
    return 0;

undo_header:
    heap->release(oa);
    return crb_error(CR_ERR_NO_MEMORY, "offset allocator: initial nodes");
}

void crb_oa_destroy(crb_oa *oa)
{
    if (!oa)
        return;
    const crb_alloc_ops *heap = oa->heap;
    heap->release(oa->nodes);
    heap->release(oa);
}

/* First non-empty bin >= `bin`, or NIL. */
static uint32_t find_bin_at_least(const crb_oa *oa, uint32_t bin)
{
    uint32_t top = bin >> 3;
    if (top >= TOP_BINS)
        return NIL;
    uint32_t leaf_mask = oa->leaf_bitmap[top] & (0xFFu << (bin & 7));
    if (leaf_mask)
        return (top << 3) | (uint32_t)__builtin_ctz(leaf_mask);
    if (top + 1 >= TOP_BINS)
        return NIL;
    uint64_t top_mask = oa->top_bitmap & (~0ull << (top + 1));
    if (!top_mask)
        return NIL;
    top = (uint32_t)__builtin_ctzll(top_mask);
    return (top << 3) | (uint32_t)__builtin_ctz(oa->leaf_bitmap[top]);
}

/* Scan bin `bin` for a block of >= units, skipping the first `skip` nodes. */
static uint32_t scan_bin(const crb_oa *oa, uint32_t bin, uint64_t units, uint32_t skip,
                         uint32_t limit)
{
    uint32_t n = oa->bin_head[bin];
    for (uint32_t i = 0; n != NIL && i < limit; i++, n = oa->nodes[n].bin_next) {
        if (i >= skip && oa->nodes[n].len >= units)
            return n;
    }
    return NIL;
}

/*
 * Candidate n (a free block of >= units) would reach past the touched
 * frontier. Only the last block holds never-allocated space (everything above
 * the frontier is one coalesced free block), so any other block that fits is
 * entirely below it: look for one among the first nodes of n's bin, at the
 * head of the next non-empty bin above it (every block there fits, since
 * bin(n) >= bin_round_down(units)), and among the first WARM_PROBES nodes of
 * the request's rounded-down bin. O(1); NIL when there is none.
 */
static uint32_t warm_alternative(const crb_oa *oa, uint32_t n, uint64_t units)
{
    uint32_t bin = bin_round_down(oa->nodes[n].len);
    uint32_t m = oa->bin_head[bin];
    for (uint32_t i = 0; m != NIL && i < EXACT_FIT_PROBES; i++, m = oa->nodes[m].bin_next)
        if (m != n && oa->nodes[m].len >= units)
            return m;
    if (bin + 1 < NUM_BINS) {
        uint32_t above = find_bin_at_least(oa, bin + 1);
        if (above != NIL)
            return oa->bin_head[above];
    }
    /* Blocks filed below the request's rounded-up bin may still fit it; the
     * first EXACT_FIT_PROBES of them were tried already. */
    uint32_t down = bin_round_down(units);
    if (down == bin_round_up(units) || down == bin)
        return NIL;
    return scan_bin(oa, down, units, EXACT_FIT_PROBES, WARM_PROBES);
}

int crb_oa_alloc(crb_oa *oa, uint64_t size, crb_oa_allocation *out)
{
    if (size == 0)
        return crb_error(CR_INVALID_PARAMS, "offset allocator: zero-size allocation");
    uint64_t mask = (1ull << oa->shift) - 1;
    if (size > UINT64_MAX - mask)
        return crb_error(CR_INVALID_PARAMS, "offset allocator: size %llu overflows alignment",
                         (unsigned long long)size);
    uint64_t units = (size + mask) >> oa->shift;
    if (units > oa->capacity_units - oa->used_units)
        return crb_error(CR_NO_AVAILABLE_HANDLE,
                         "offset allocator: %llu bytes requested, %llu free",
                         (unsigned long long)size,
                         (unsigned long long)((oa->capacity_units - oa->used_units) << oa->shift));
    /* A split needs a spare node; reserve before touching any list. */
    int rc = reserve_node(oa);
    if (rc != 0)
        return rc;

    uint32_t down = bin_round_down(units);
    uint32_t up = bin_round_up(units);
    uint32_t n = NIL;
    if (down != up)
        n = scan_bin(oa, down, units, 0, EXACT_FIT_PROBES);
    if (n == NIL) {
        uint32_t bin = find_bin_at_least(oa, up);
        if (bin != NIL)
            n = oa->bin_head[bin];
    }
    if (n == NIL && down != up)
        n = scan_bin(oa, down, units, EXACT_FIT_PROBES, UINT32_MAX);
    if (n == NIL)
        return crb_error(CR_NO_AVAILABLE_HANDLE,
                         "offset allocator: no free block of %llu bytes (fragmented)",
                         (unsigned long long)size);
    if (oa->nodes[n].off + units > oa->touched_units) {
        uint32_t warm = warm_alternative(oa, n, units);
        if (warm != NIL)
            n = warm;
    }

    bin_remove(oa, n);
    oa_node *node = &oa->nodes[n];
    uint64_t rest = node->len - units;
    if (rest > 0) {
        uint32_t r = take_spare(oa);
        node = &oa->nodes[n]; /* no realloc since reserve; keep it obvious */
        oa_node *tail = &oa->nodes[r];
        tail->off = node->off + units;
        tail->len = rest;
        tail->nb_prev = n;
        tail->nb_next = node->nb_next;
        if (node->nb_next != NIL)
            oa->nodes[node->nb_next].nb_prev = r;
        node->nb_next = r;
        node->len = units;
        bin_insert(oa, r);
    }
    node->bin_prev = USED;
    node->bin_next = NIL;
    oa->used_units += units;
    oa->allocations++;
    if (node->off + units > oa->touched_units)
        oa->touched_units = node->off + units;
    out->offset = node->off << oa->shift;
    out->size = units << oa->shift;
    out->node = n;
    return 0;
}

/* Unlink free neighbour `m` of a block being freed and recycle its node. */
static void absorb(crb_oa *oa, uint32_t m)
{
    bin_remove(oa, m);
    oa_node *node = &oa->nodes[m];
    if (node->nb_prev != NIL)
        oa->nodes[node->nb_prev].nb_next = node->nb_next;
    if (node->nb_next != NIL)
        oa->nodes[node->nb_next].nb_prev = node->nb_prev;
    put_spare(oa, m);
}

static bool is_free_block(const crb_oa *oa, uint32_t m)
{
    return m != NIL && oa->nodes[m].bin_prev != USED && oa->nodes[m].bin_prev != SPARE;
}

int crb_oa_free(crb_oa *oa, uint32_t n)
{
    if (n >= oa->node_cap || oa->nodes[n].bin_prev != USED)
        return crb_error(CR_INVALID_PARAMS, "offset allocator: node %u is not a live allocation",
                         n);
    oa_node *node = &oa->nodes[n];
    oa->used_units -= node->len;
    oa->allocations--;
    node->bin_prev = NIL;

    uint32_t prev = node->nb_prev;
    if (is_free_block(oa, prev)) {
        node->off = oa->nodes[prev].off;
        node->len += oa->nodes[prev].len;
        absorb(oa, prev);
    }
    uint32_t next = node->nb_next;
    if (is_free_block(oa, next)) {
        node->len += oa->nodes[next].len;
        absorb(oa, next);
    }
    bin_insert(oa, n);
    return 0;
}

uint64_t crb_oa_used(const crb_oa *oa)
{
    return oa->used_units << oa->shift;
}

uint64_t crb_oa_capacity(const crb_oa *oa)
{
    return oa->capacity_units << oa->shift;
}

uint64_t crb_oa_touched(const crb_oa *oa)
{
    return oa->touched_units << oa->shift;
}

void crb_oa_get_stats(const crb_oa *oa, crb_oa_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->capacity = oa->capacity_units << oa->shift;
    st->used = oa->used_units << oa->shift;
    st->free = st->capacity - st->used;
    st->allocations = oa->allocations;
    st->free_blocks = oa->free_blocks;
    st->nodes = oa->node_cap - oa->spare_count;
    st->node_capacity = oa->node_cap;
    if (oa->top_bitmap) {
        uint32_t top = highest_bit(oa->top_bitmap);
        uint32_t bin = (top << 3) | highest_bit(oa->leaf_bitmap[top]);
        uint64_t best = 0;
        for (uint32_t m = oa->bin_head[bin]; m != NIL; m = oa->nodes[m].bin_next)
            if (oa->nodes[m].len > best)
                best = oa->nodes[m].len;
        st->largest_free = best << oa->shift;
    }
}

uint64_t crb_oa_footprint(const crb_oa *oa)
{
    return sizeof(*oa) + (uint64_t)oa->node_cap * sizeof(oa_node);
}
