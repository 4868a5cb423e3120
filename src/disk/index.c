/*
 * index.c - open-addressed key -> entry table (index.h). Slots hold the key
 * hash next to the pointer, so probing past other keys compares hashes
 * without touching their entries.
 */
#include "disk/index.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

crf_entry *crf_entry_new(const void *key, size_t key_len, const void *meta, size_t meta_len)
{
    crf_entry *e = calloc(1, sizeof(*e) + key_len + meta_len);
    if (e == NULL)
        return NULL;
    e->key_len = (uint16_t)key_len;
    e->meta_len = (uint16_t)meta_len;
    memcpy(e->data, key, key_len);
    if (meta_len > 0)
        memcpy(e->data + key_len, meta, meta_len);
    return e;
}

void crf_index_init(crf_index *ix)
{
    memset(ix, 0, sizeof(*ix));
}

void crf_index_destroy(crf_index *ix)
{
    for (size_t i = 0; i < ix->cap; i++)
        free(ix->slots[i].entry);
    free(ix->slots);
    memset(ix, 0, sizeof(*ix));
}

static int same_key(const crf_entry *e, const void *key, size_t key_len)
{
    return e->key_len == key_len && memcmp(e->data, key, key_len) == 0;
}

crf_entry *crf_index_find(const crf_index *ix, const void *key, size_t key_len, uint64_t hash)
{
    if (ix->cap == 0)
        return NULL;
    size_t mask = ix->cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        const crf_index_slot *s = &ix->slots[i];
        if (s->entry == NULL)
            return NULL;
        if (s->hash == hash && same_key(s->entry, key, key_len))
            return s->entry;
    }
}

static void place(crf_index_slot *slots, size_t cap, crf_entry *e)
{
    size_t mask = cap - 1;
    size_t i = e->hash & mask;
    while (slots[i].entry != NULL)
        i = (i + 1) & mask;
    slots[i].hash = e->hash;
    slots[i].entry = e;
}

static int grow(crf_index *ix)
{
    size_t cap = ix->cap == 0 ? 64 : ix->cap * 2;
    crf_index_slot *slots = calloc(cap, sizeof(*slots));
    if (slots == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "disk index: %zu slots", cap);
    for (size_t i = 0; i < ix->cap; i++)
        if (ix->slots[i].entry != NULL)
            place(slots, cap, ix->slots[i].entry);
    free(ix->slots);
    ix->slots = slots;
    ix->cap = cap;
    return 0;
}

int crf_index_insert(crf_index *ix, crf_entry *e)
{
    if ((ix->count + 1) * 4 > ix->cap * 3) {
        int rc = grow(ix);
        if (rc != 0)
            return rc;
    }
    place(ix->slots, ix->cap, e);
    ix->count++;
    return 0;
}

static size_t slot_of(const crf_index *ix, const crf_entry *e)
{
    size_t mask = ix->cap - 1;
    size_t i = e->hash & mask;
    while (ix->slots[i].entry != e)
        i = (i + 1) & mask;
    return i;
}

void crf_index_replace(crf_index *ix, crf_entry *old, crf_entry *e)
{
    ix->slots[slot_of(ix, old)].entry = e;
}

void crf_index_remove(crf_index *ix, crf_entry *e)
{
    size_t mask = ix->cap - 1;
    size_t hole = slot_of(ix, e);
    /* Backward-shift deletion: move later members of the run into the hole
     * when their home slot does not lie (cyclically) between hole and them. */
    for (size_t i = (hole + 1) & mask; ix->slots[i].entry != NULL; i = (i + 1) & mask) {
        size_t home = ix->slots[i].hash & mask;
        size_t dist_home = (i - home) & mask;
        size_t dist_hole = (i - hole) & mask;
        if (dist_home >= dist_hole) {
            ix->slots[hole] = ix->slots[i];
            hole = i;
        }
    }
    ix->slots[hole].entry = NULL;
    ix->slots[hole].hash = 0;
    ix->count--;
}

int crf_index_each(const crf_index *ix, int (*fn)(void *arg, crf_entry *e), void *arg)
{
    for (size_t i = 0; i < ix->cap; i++) {
        if (ix->slots[i].entry == NULL)
            continue;
        int rc = fn(arg, ix->slots[i].entry);
        if (rc != 0)
            return rc;
    }
    return 0;
}
