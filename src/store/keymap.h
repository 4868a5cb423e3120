/*
 * keymap.h - a string-keyed hash map of pointers (open addressing, linear
 * probing, tombstones), used by the session table to find a session by
 * object key.
 *
 * The map copies keys; values are the caller's. Not thread-safe: the owner
 * serialises access (the session table holds its mutex).
 */
#ifndef CRESCENT_STORE_KEYMAP_H
#define CRESCENT_STORE_KEYMAP_H

#include <stddef.h>

typedef struct crc_keymap {
    struct crc_keymap_slot *slots;
    size_t cap;  /* power of two, or 0 */
    size_t used; /* live entries */
    size_t dead; /* tombstones */
} crc_keymap;

/** An empty map (no allocation until the first put). */
void crc_keymap_init(crc_keymap *m);

/** Free the slots and key copies (not the values). */
void crc_keymap_fini(crc_keymap *m);

/** The value stored under key, or NULL. */
void *crc_keymap_get(const crc_keymap *m, const char *key);

/** Store value (non-NULL) under key, replacing what was there; *old (may be
 *  NULL) receives the replaced value or NULL. 0, or CR_ERR_NO_MEMORY (the
 *  map is unchanged). */
int crc_keymap_put(crc_keymap *m, const char *key, void *value, void **old);

/** Remove key; returns its value, or NULL if absent. */
void *crc_keymap_remove(crc_keymap *m, const char *key);

/** Call fn(value, arg) for every entry, in no particular order. fn must not
 *  change the map. */
void crc_keymap_each(const crc_keymap *m, void (*fn)(void *value, void *arg), void *arg);

#endif
