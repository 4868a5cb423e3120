/*
 * index.h - the disk store's in-memory index: key -> crf_entry (where the
 * key's newest record is and what a get needs to verify it).
 *
 * An open-addressed table of (key hash, entry pointer) slots with linear
 * probing, doubled at 3/4 full; deletion shifts later entries of the run
 * back, so there are no tombstone slots. Entries are allocated by the
 * caller (crf_entry_new) and owned by whoever holds them: the index while
 * inserted, a bucket's tombstone list for tombstones.
 *
 * Threading: none inside; the store guards every index with its mutex.
 */
#ifndef CRESCENT_DISK_INDEX_H
#define CRESCENT_DISK_INDEX_H

#include <stddef.h>
#include <stdint.h>

struct crf_bucket;

#define CRF_ENTRY_SHADOWS                                                                          \
    0x01u /* an older record of the key may still be on disk                                       \
             uncovered by a tombstone: dropping this one needs one */

typedef struct crf_entry {
    uint64_t hash; /* crf_key_hash of the key */
    struct crf_bucket *bucket;
    struct crf_entry *bprev, *bnext; /* the bucket's list (live entries or tombstones) */
    uint64_t rec_off;
    uint64_t value_len;
    uint64_t seq;
    uint64_t value_hash;
    uint32_t value_rel; /* value offset from rec_off */
    uint16_t key_len;
    uint16_t meta_len;
    uint8_t flags;  /* CRF_ENTRY_* */
    uint8_t data[]; /* key_len key bytes, then meta_len metadata bytes */
} crf_entry;

static inline const uint8_t *crf_entry_key(const crf_entry *e)
{
    return e->data;
}

static inline const uint8_t *crf_entry_meta(const crf_entry *e)
{
    return e->data + e->key_len;
}

/** Record bytes from the header to the value's end. */
static inline uint64_t crf_entry_extent(const crf_entry *e)
{
    return e->value_rel + e->value_len;
}

/** A zeroed entry holding a copy of key and meta; NULL when out of memory. */
crf_entry *crf_entry_new(const void *key, size_t key_len, const void *meta, size_t meta_len);

typedef struct crf_index_slot {
    uint64_t hash;
    crf_entry *entry; /* NULL = empty */
} crf_index_slot;

typedef struct crf_index {
    crf_index_slot *slots;
    size_t cap; /* power of two */
    size_t count;
} crf_index;

/** An empty index (allocates lazily). */
void crf_index_init(crf_index *ix);

/** Free the table and every entry in it. */
void crf_index_destroy(crf_index *ix);

/** The entry for key, or NULL. */
crf_entry *crf_index_find(const crf_index *ix, const void *key, size_t key_len, uint64_t hash);

/**
 * Insert e (its key must not be in the index). 0, or CR_ERR_NO_MEMORY when
 * the table cannot grow (e is then not inserted).
 */
int crf_index_insert(crf_index *ix, crf_entry *e);

/** Replace the entry holding old's key (old must be in the index) with e. */
void crf_index_replace(crf_index *ix, crf_entry *old, crf_entry *e);

/** Remove e (which must be in the index); the caller owns it afterwards. */
void crf_index_remove(crf_index *ix, crf_entry *e);

/** Call fn on every entry; stops at and returns the first non-zero return. */
int crf_index_each(const crf_index *ix, int (*fn)(void *arg, crf_entry *e), void *arg);

#endif
