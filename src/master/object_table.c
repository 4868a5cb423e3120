/*
 * object_table.c - one shard's hash table, LRU and write list (see
 * object_table.h). Moved out of objects.c so the data structures can be
 * tested on their own (object_table_test.c).
 */
#include "master/object_table.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "master/mem.h"

#define INITIAL_SLOTS 16

int crk_shard_init(crk_shard *sh)
{
    sh->slots = crk_calloc(INITIAL_SLOTS, sizeof(*sh->slots));
    if (!sh->slots)
        return crb_error(CR_ERR_NO_MEMORY, "master: shard slots");
    if (pthread_mutex_init(&sh->mu, NULL) != 0) {
        crk_free(sh->slots);
        sh->slots = NULL;
        return crb_error(CR_ERR_NO_MEMORY, "master: shard mutex");
    }
    sh->nslots = INITIAL_SLOTS;
    atomic_store_explicit(&sh->hint_slots, sh->slots, memory_order_relaxed);
    atomic_store_explicit(&sh->hint_mask, INITIAL_SLOTS - 1, memory_order_relaxed);
    return 0;
}

void crk_shard_destroy(crk_shard *sh)
{
    for (size_t j = 0; j < sh->nslots; j++) {
        crk_object *o = sh->slots[j].obj;
        if (o) {
            crk_free(o->write);
            crk_free(o);
        }
    }
    crk_discard *d = sh->discards;
    while (d) {
        crk_discard *next = d->next;
        crk_free(d);
        d = next;
    }
    sh->discards = NULL;
    crk_free(sh->slots);
    sh->slots = NULL;
    sh->nslots = 0;
    pthread_mutex_destroy(&sh->mu);
}

/* Index of the slot holding this key, or of the empty slot ending its probe. */
size_t crk_shard_probe(const crk_shard *sh, const char *key, size_t len, uint32_t h)
{
    size_t mask = sh->nslots - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        const crk_slot *sl = &sh->slots[i];
        if (!sl->obj ||
            (sl->hash == h && sl->obj->key_len == len && memcmp(sl->obj->key, key, len) == 0))
            return i;
    }
}

/* Index of the slot holding o (which is in the table). */
size_t crk_shard_slot_of(const crk_shard *sh, const crk_object *o)
{
    size_t mask = sh->nslots - 1;
    size_t i = o->hash & mask;
    while (sh->slots[i].obj != o)
        i = (i + 1) & mask;
    return i;
}

/* Empty slot i and shift later entries of its run back so that every probe
 * still reaches its key without crossing an empty slot. */
void crk_shard_slot_clear(crk_shard *sh, size_t i)
{
    size_t mask = sh->nslots - 1;
    for (size_t j = (i + 1) & mask; sh->slots[j].obj; j = (j + 1) & mask) {
        size_t home = sh->slots[j].hash & mask;
        /* The entry at j may fill the hole unless its home lies in (i, j]. */
        bool home_after_hole = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!home_after_hole) {
            sh->slots[i] = sh->slots[j];
            i = j;
        }
    }
    sh->slots[i] = (crk_slot){0, NULL};
}

/* Double the slot array; false (table unchanged) without memory. */
static bool grow_slots(crk_shard *sh)
{
    size_t n = sh->nslots * 2;
    crk_slot *t = crk_calloc(n, sizeof(*t));
    if (!t)
        return false;
    for (size_t i = 0; i < sh->nslots; i++) {
        crk_slot sl = sh->slots[i];
        if (!sl.obj)
            continue;
        size_t j = sl.hash & (n - 1);
        while (t[j].obj)
            j = (j + 1) & (n - 1);
        t[j] = sl;
    }
    crk_free(sh->slots);
    sh->slots = t;
    sh->nslots = n;
    atomic_store_explicit(&sh->hint_slots, t, memory_order_relaxed);
    atomic_store_explicit(&sh->hint_mask, n - 1, memory_order_relaxed);
    return true;
}

/* Room for one more object: grows at 3/4 full; fails only when the table
 * could not grow and would have no empty slot left. */
int crk_shard_reserve(crk_shard *sh)
{
    if ((sh->nobjs + 1) * 4 <= sh->nslots * 3 || grow_slots(sh) || sh->nobjs + 2 <= sh->nslots)
        return 0;
    return crb_error(CR_ERR_NO_MEMORY, "master: object table of a shard cannot grow past %zu",
                     sh->nobjs);
}

/* Insert o, known absent, after table_reserve succeeded. */
void crk_shard_insert(crk_shard *sh, crk_object *o)
{
    size_t mask = sh->nslots - 1;
    size_t i = o->hash & mask;
    while (sh->slots[i].obj)
        i = (i + 1) & mask;
    sh->slots[i] = (crk_slot){o->hash, o};
    sh->nobjs++;
    atomic_fetch_add_explicit(&sh->keys, 1, memory_order_relaxed);
}

/* --- LRU and write lists --------------------------------------------------------- */

void crk_lru_push_tail(crk_shard *sh, crk_object *o)
{
    o->lru_next = NULL;
    o->lru_prev = sh->lru_tail;
    if (sh->lru_tail)
        sh->lru_tail->lru_next = o;
    else
        sh->lru_head = o;
    sh->lru_tail = o;
    o->flags |= CRK_OBJ_IN_LRU;
    sh->lru_count++;
}

void crk_lru_unlink(crk_shard *sh, crk_object *o)
{
    if (!(o->flags & CRK_OBJ_IN_LRU))
        return;
    if (o->lru_prev)
        o->lru_prev->lru_next = o->lru_next;
    else
        sh->lru_head = o->lru_next;
    if (o->lru_next)
        o->lru_next->lru_prev = o->lru_prev;
    else
        sh->lru_tail = o->lru_prev;
    o->lru_prev = o->lru_next = NULL;
    o->flags &= (uint8_t)~CRK_OBJ_IN_LRU;
    sh->lru_count--;
}

void crk_lru_move_to_tail(crk_shard *sh, crk_object *o)
{
    if (!(o->flags & CRK_OBJ_IN_LRU) || sh->lru_tail == o)
        return;
    crk_lru_unlink(sh, o);
    crk_lru_push_tail(sh, o);
}

void crk_write_push(crk_shard *sh, crk_write *w)
{
    w->next = NULL;
    w->prev = sh->w_tail;
    if (sh->w_tail)
        sh->w_tail->next = w;
    else
        sh->w_head = w;
    sh->w_tail = w;
    atomic_fetch_add_explicit(&sh->writes, 1, memory_order_relaxed);
}

void crk_write_unlink(crk_shard *sh, crk_write *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        sh->w_head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        sh->w_tail = w->prev;
    w->prev = w->next = NULL;
}

/* Unlink, uncount and free a write; clears its object's pointer. */
void crk_write_drop(crk_shard *sh, crk_write *w)
{
    crk_write_unlink(sh, w);
    if (w->obj)
        w->obj->write = NULL;
    atomic_fetch_sub_explicit(&sh->writes, 1, memory_order_relaxed);
    crk_free(w);
}

void crk_shard_remove(crk_shard *sh, crk_object *o)
{
    crk_shard_slot_clear(sh, crk_shard_slot_of(sh, o));
    sh->nobjs--;
    atomic_fetch_sub_explicit(&sh->keys, 1, memory_order_relaxed);
    crk_lru_unlink(sh, o);
}

/* --- objects ------------------------------------------------------------------------ */

crk_object *crk_obj_new(const char *key, size_t len, uint32_t h, uint32_t nrep)
{
    size_t keyspace = (len + 1 + 7) & ~(size_t)7;
    crk_object *o = crk_malloc(sizeof(*o) + keyspace + nrep * sizeof(crk_replica));
    if (!o)
        return NULL;
    memset(o, 0, sizeof(*o));
    memcpy(o->key, key, len);
    o->key[len] = '\0';
    o->key_len = (uint16_t)len;
    o->hash = h;
    o->nrep = (uint8_t)nrep;
    return o;
}
