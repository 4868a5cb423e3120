/*
 * published.h - the keys a TTL backend (etcd, redis) published for this
 * process, with copies of their values, so it can refresh them and put them
 * back after the server lost them (a lease that expired while etcd was
 * unreachable, a restarted redis).
 *
 * Threading: none inside; the owning backend serialises every call with its
 * publish lock (which also orders the writes to the server).
 */
#ifndef CRESCENT_METADATA_PUBLISHED_H
#define CRESCENT_METADATA_PUBLISHED_H

#include <stddef.h>
#include <stdint.h>

typedef struct crm_published_entry {
    char *key;
    uint8_t *value;
    size_t len;
} crm_published_entry;

typedef struct crm_published {
    crm_published_entry *entries;
    size_t n;
    size_t cap;
} crm_published;

/** Record key = value (copies; replaces an existing entry). 0 or CR_ERR_NO_MEMORY. */
int crm_published_set(crm_published *t, const char *key, const void *value, size_t len);
/** Forget key (no-op when absent). */
void crm_published_remove(crm_published *t, const char *key);
/** Free every entry. */
void crm_published_clear(crm_published *t);

#endif
