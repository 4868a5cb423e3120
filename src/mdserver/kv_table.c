/*
 * kv_table.c - separate-chaining hash map from strings to byte strings.
 *
 * Design: a power-of-two array of bucket lists; each entry holds its full
 * 64-bit hash (so resizing and most mismatches never touch the key), the
 * key inline after the header, and a malloc'd value. The table doubles when
 * the load factor passes 1 and never shrinks (metadata tables stay small).
 *
 * Keys arrive from the network, so the hash is SipHash-1-3 (base/siphash.h)
 * keyed with a random per-table key: a client cannot pick keys that all land in one
 * bucket and turn the server's lookups quadratic.
 */
#include "mdserver/kv_table.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/error.h"
#include "base/net.h"
#include "base/siphash.h"

#define KV_INITIAL_BUCKETS 16

typedef struct kv_entry {
    struct kv_entry *next;
    uint64_t hash;
    void *value; /* NULL when len is 0 */
    size_t len;
    size_t key_len;
    char key[]; /* key_len bytes plus a NUL */
} kv_entry;

struct crd_kv_table {
    kv_entry **buckets;
    size_t nbuckets; /* power of two */
    size_t count;
    size_t value_bytes;
    size_t key_bytes;
    crb_sipkey seed;
};

void *crd_value_alloc(size_t n)
{
    if (n < CRD_VALUE_MAP_MIN)
        return malloc(n ? n : 1);
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void crd_value_free(void *p, size_t n)
{
    if (p == NULL)
        return;
    if (n < CRD_VALUE_MAP_MIN)
        free(p);
    else
        munmap(p, n);
}

int crd_kv_table_create(crd_kv_table **out)
{
    crd_kv_table *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "kv table: cannot allocate the table");
    t->buckets = calloc(KV_INITIAL_BUCKETS, sizeof(*t->buckets));
    if (t->buckets == NULL) {
        free(t);
        return crb_error(CR_ERR_NO_MEMORY, "kv table: cannot allocate %d buckets",
                         KV_INITIAL_BUCKETS);
    }
    t->nbuckets = KV_INITIAL_BUCKETS;
    int rc = crb_random_bytes(&t->seed, sizeof(t->seed));
    if (rc < 0) {
        free(t->buckets);
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void crd_kv_table_destroy(crd_kv_table *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->nbuckets; i++) {
        kv_entry *e = t->buckets[i];
        while (e != NULL) {
            kv_entry *next = e->next;
            crd_value_free(e->value, e->len);
            free(e);
            e = next;
        }
    }
    free(t->buckets);
    free(t);
}

/* Returns the link that points at key's entry (or at the NULL ending its chain). */
static kv_entry **find_link(const crd_kv_table *t, const char *key, size_t key_len, uint64_t hash)
{
    kv_entry **link = &t->buckets[hash & (t->nbuckets - 1)];
    while (*link != NULL) {
        kv_entry *e = *link;
        if (e->hash == hash && e->key_len == key_len && memcmp(e->key, key, key_len) == 0)
            break;
        link = &e->next;
    }
    return link;
}

/* Double the bucket array; on allocation failure keep the old one (still correct). */
static void grow(crd_kv_table *t)
{
    size_t n = t->nbuckets * 2;
    if (n < t->nbuckets || n > SIZE_MAX / sizeof(kv_entry *))
        return;
    kv_entry **nb = calloc(n, sizeof(*nb));
    if (nb == NULL)
        return;
    for (size_t i = 0; i < t->nbuckets; i++) {
        kv_entry *e = t->buckets[i];
        while (e != NULL) {
            kv_entry *next = e->next;
            size_t j = e->hash & (n - 1);
            e->next = nb[j];
            nb[j] = e;
            e = next;
        }
    }
    free(t->buckets);
    t->buckets = nb;
    t->nbuckets = n;
}

int crd_kv_table_put_owned(crd_kv_table *t, const char *key, void *value, size_t len)
{
    size_t key_len = strlen(key);
    uint64_t hash = crb_siphash13(&t->seed, key, key_len);
    kv_entry **link = find_link(t, key, key_len, hash);
    kv_entry *e = *link;
    if (e != NULL) {
        t->value_bytes -= e->len;
        crd_value_free(e->value, e->len);
        e->value = len > 0 ? value : NULL;
        e->len = len;
        t->value_bytes += len;
        if (len == 0)
            crd_value_free(value, 0);
        return 0;
    }
    if (key_len > SIZE_MAX - sizeof(*e) - 1)
        return crb_error(CR_ERR_NO_MEMORY, "kv table: key of %zu bytes is too long", key_len);
    e = malloc(sizeof(*e) + key_len + 1);
    if (e == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "kv table: cannot allocate an entry for key '%.100s'",
                         key);
    e->next = NULL;
    e->hash = hash;
    e->value = len > 0 ? value : NULL;
    e->len = len;
    e->key_len = key_len;
    memcpy(e->key, key, key_len + 1);
    if (len == 0)
        crd_value_free(value, 0);
    *link = e;
    t->count++;
    t->value_bytes += len;
    t->key_bytes += key_len;
    if (t->count > t->nbuckets)
        grow(t);
    return 0;
}

int crd_kv_table_put(crd_kv_table *t, const char *key, const void *value, size_t len)
{
    void *copy = NULL;
    if (len > 0) {
        copy = crd_value_alloc(len);
        if (copy == NULL)
            return crb_error(CR_ERR_NO_MEMORY,
                             "kv table: cannot copy a %zu-byte value for key '%.100s'", len, key);
        memcpy(copy, value, len);
    }
    int rc = crd_kv_table_put_owned(t, key, copy, len);
    if (rc < 0)
        crd_value_free(copy, len);
    return rc;
}

int crd_kv_table_get(const crd_kv_table *t, const char *key, void **value, size_t *len)
{
    size_t key_len = strlen(key);
    kv_entry *e = *find_link(t, key, key_len, crb_siphash13(&t->seed, key, key_len));
    if (e == NULL)
        return crb_error(CR_ERR_NOT_FOUND, "kv table: no key '%.200s'", key);
    void *copy = malloc(e->len > 0 ? e->len : 1);
    if (copy == NULL)
        return crb_error(CR_ERR_NO_MEMORY,
                         "kv table: cannot copy the %zu-byte value of key '%.100s'", e->len, key);
    if (e->len > 0)
        memcpy(copy, e->value, e->len);
    *value = copy;
    *len = e->len;
    return 0;
}

int crd_kv_table_del(crd_kv_table *t, const char *key)
{
    size_t key_len = strlen(key);
    kv_entry **link = find_link(t, key, key_len, crb_siphash13(&t->seed, key, key_len));
    kv_entry *e = *link;
    if (e == NULL)
        return crb_error(CR_ERR_NOT_FOUND, "kv table: no key '%.200s'", key);
    *link = e->next;
    t->count--;
    t->value_bytes -= e->len;
    t->key_bytes -= e->key_len;
    crd_value_free(e->value, e->len);
    free(e);
    return 0;
}

size_t crd_kv_table_del_if(crd_kv_table *t, int (*doomed)(const char *key, void *ctx), void *ctx)
{
    size_t n = 0;
    for (size_t i = 0; i < t->nbuckets; i++) {
        kv_entry **link = &t->buckets[i];
        while (*link != NULL) {
            kv_entry *e = *link;
            if (!doomed(e->key, ctx)) {
                link = &e->next;
                continue;
            }
            *link = e->next;
            t->count--;
            t->value_bytes -= e->len;
            t->key_bytes -= e->key_len;
            crd_value_free(e->value, e->len);
            free(e);
            n++;
        }
    }
    return n;
}

size_t crd_kv_table_count(const crd_kv_table *t)
{
    return t->count;
}

size_t crd_kv_table_value_bytes(const crd_kv_table *t)
{
    return t->value_bytes;
}

size_t crd_kv_table_key_bytes(const crd_kv_table *t)
{
    return t->key_bytes;
}

bool crd_kv_table_contains(const crd_kv_table *t, const char *key)
{
    size_t key_len = strlen(key);
    return *find_link(t, key, key_len, crb_siphash13(&t->seed, key, key_len)) != NULL;
}
