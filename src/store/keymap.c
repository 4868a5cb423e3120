/*
 * keymap.c - open-addressing string map for the session table: FNV-1a
 * hashes, linear probing, tombstones on removal, growth (and a rehash that
 * drops the tombstones) when live entries plus tombstones pass 3/4 of the
 * slots.
 */
#include "store/keymap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

typedef struct crc_keymap_slot {
    char *key; /* NULL: empty; TOMBSTONE: removed */
    void *value;
    uint64_t hash;
} crc_keymap_slot;

static char tombstone_mark;
#define TOMBSTONE (&tombstone_mark)

static uint64_t hash_key(const char *key)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        h ^= *p;
        h *= 1099511628211ull;
    }
    return h;
}

void crc_keymap_init(crc_keymap *m)
{
    memset(m, 0, sizeof(*m));
}

void crc_keymap_fini(crc_keymap *m)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key != NULL && m->slots[i].key != TOMBSTONE)
            free(m->slots[i].key);
    free(m->slots);
    memset(m, 0, sizeof(*m));
}

/* The slot holding key, or NULL. */
static crc_keymap_slot *find(const crc_keymap *m, const char *key, uint64_t h)
{
    if (m->cap == 0)
        return NULL;
    for (size_t i = h & (m->cap - 1), probes = 0; probes < m->cap;
         i = (i + 1) & (m->cap - 1), probes++) {
        crc_keymap_slot *s = &m->slots[i];
        if (s->key == NULL)
            return NULL;
        if (s->key != TOMBSTONE && s->hash == h && strcmp(s->key, key) == 0)
            return s;
    }
    return NULL;
}

void *crc_keymap_get(const crc_keymap *m, const char *key)
{
    crc_keymap_slot *s = find(m, key, hash_key(key));
    return s ? s->value : NULL;
}

static int grow(crc_keymap *m)
{
    size_t ncap = m->cap ? m->cap : 16;
    while ((m->used + 1) * 4 > ncap * 3)
        ncap *= 2;
    crc_keymap_slot *ns = calloc(ncap, sizeof(*ns));
    if (ns == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "session table of %zu keys", m->used + 1);
    for (size_t i = 0; i < m->cap; i++) {
        crc_keymap_slot *s = &m->slots[i];
        if (s->key == NULL || s->key == TOMBSTONE)
            continue;
        size_t j = s->hash & (ncap - 1);
        while (ns[j].key != NULL)
            j = (j + 1) & (ncap - 1);
        ns[j] = *s;
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    m->dead = 0;
    return 0;
}

int crc_keymap_put(crc_keymap *m, const char *key, void *value, void **old)
{
    uint64_t h = hash_key(key);
    crc_keymap_slot *s = find(m, key, h);
    if (s != NULL) {
        if (old != NULL)
            *old = s->value;
        s->value = value;
        return 0;
    }
    if ((m->used + m->dead + 1) * 4 > m->cap * 3) {
        int rc = grow(m);
        if (rc < 0)
            return rc;
    }
    char *copy = strdup(key);
    if (copy == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "session key");
    size_t i = h & (m->cap - 1);
    while (m->slots[i].key != NULL && m->slots[i].key != TOMBSTONE)
        i = (i + 1) & (m->cap - 1);
    if (m->slots[i].key == TOMBSTONE)
        m->dead--;
    m->slots[i] = (crc_keymap_slot){copy, value, h};
    m->used++;
    if (old != NULL)
        *old = NULL;
    return 0;
}

void *crc_keymap_remove(crc_keymap *m, const char *key)
{
    crc_keymap_slot *s = find(m, key, hash_key(key));
    if (s == NULL)
        return NULL;
    void *v = s->value;
    free(s->key);
    s->key = TOMBSTONE;
    s->value = NULL;
    m->used--;
    m->dead++;
    return v;
}

void crc_keymap_each(const crc_keymap *m, void (*fn)(void *value, void *arg), void *arg)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key != NULL && m->slots[i].key != TOMBSTONE)
            fn(m->slots[i].value, arg);
}
