/*
 * published.c - see published.h. A flat array: a process publishes a
 * handful of keys (an engine two), so linear search is the right size.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "metadata/published.h"

static crm_published_entry *find(crm_published *t, const char *key)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->entries[i].key, key) == 0)
            return &t->entries[i];
    return NULL;
}

int crm_published_set(crm_published *t, const char *key, const void *value, size_t len)
{
    uint8_t *copy = malloc(len > 0 ? len : 1);
    if (copy == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "published copy of '%.200s'", key);
    if (len > 0)
        memcpy(copy, value, len);
    crm_published_entry *e = find(t, key);
    if (e != NULL) {
        free(e->value);
        e->value = copy;
        e->len = len;
        return 0;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap > 0 ? t->cap * 2 : 4;
        crm_published_entry *n = realloc(t->entries, cap * sizeof(*n));
        if (n == NULL) {
            free(copy);
            return crb_error(CR_ERR_NO_MEMORY, "published key table");
        }
        t->entries = n;
        t->cap = cap;
    }
    char *k = strdup(key);
    if (k == NULL) {
        free(copy);
        return crb_error(CR_ERR_NO_MEMORY, "published key '%.200s'", key);
    }
    t->entries[t->n++] = (crm_published_entry){k, copy, len};
    return 0;
}

void crm_published_remove(crm_published *t, const char *key)
{
    crm_published_entry *e = find(t, key);
    if (e == NULL)
        return;
    free(e->key);
    free(e->value);
    *e = t->entries[--t->n];
}

void crm_published_clear(crm_published *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->entries[i].key);
        free(t->entries[i].value);
    }
    free(t->entries);
    t->entries = NULL;
    t->n = t->cap = 0;
}
