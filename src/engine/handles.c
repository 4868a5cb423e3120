/*
 * handles.c - generation-checked handle tables for batches and segments.
 *
 * A handle is (generation << 32) | (slot + 1). A slot's generation is bumped
 * whenever its handle is removed, so stale handles and garbage values fail
 * the lookup instead of reaching freed memory.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/internal.h"

int cre_handles_init(cre_handle_table *t)
{
    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    return 0;
}

void cre_handles_fini(cre_handle_table *t)
{
    free(t->items);
    free(t->gens);
    pthread_mutex_destroy(&t->lock);
}

int cre_handles_add(cre_handle_table *t, void *item, uint64_t *out)
{
    pthread_mutex_lock(&t->lock);
    size_t slot = 0;
    while (slot < t->cap && t->items[slot] != NULL)
        slot++;
    if (slot == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 64;
        void **items = realloc(t->items, ncap * sizeof(*items));
        if (items == NULL)
            goto err_no_memory;
        t->items = items;
        uint32_t *gens = realloc(t->gens, ncap * sizeof(*gens));
        if (gens == NULL)
            goto err_no_memory;
        t->gens = gens;
        for (size_t i = t->cap; i < ncap; i++) {
            t->items[i] = NULL;
            t->gens[i] = 1;
        }
        t->cap = ncap;
    }
    t->items[slot] = item;
    *out = ((uint64_t)t->gens[slot] << 32) | (uint64_t)(slot + 1);
    pthread_mutex_unlock(&t->lock);
    return 0;
err_no_memory:
    pthread_mutex_unlock(&t->lock);
    return crb_error(CR_ERR_NO_MEMORY, "handle table growth");
}

static size_t slot_of(const cre_handle_table *t, uint64_t h)
{
    uint64_t slot1 = h & 0xffffffffu;
    if (slot1 == 0 || slot1 > t->cap)
        return SIZE_MAX;
    size_t slot = (size_t)slot1 - 1;
    if (t->items[slot] == NULL || t->gens[slot] != (uint32_t)(h >> 32))
        return SIZE_MAX;
    return slot;
}

void *cre_handles_get_locked(cre_handle_table *t, uint64_t h)
{
    size_t slot = slot_of(t, h);
    return slot == SIZE_MAX ? NULL : t->items[slot];
}

void *cre_handles_remove_locked(cre_handle_table *t, uint64_t h)
{
    size_t slot = slot_of(t, h);
    if (slot == SIZE_MAX)
        return NULL;
    void *item = t->items[slot];
    t->items[slot] = NULL;
    t->gens[slot]++;
    if (t->gens[slot] == 0)
        t->gens[slot] = 1;
    return item;
}
