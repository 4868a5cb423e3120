/*
 * loc_cache.c - where this client last read each key: the cache behind
 * speculative single gets (get.c, docs/ARCHITECTURE.md "Single gets read
 * while they ask").
 *
 * A fixed table of LOC_SLOTS entries, direct-mapped by a hash of the key (a
 * newer key takes its slot: the table never grows). An entry is the object
 * version a GET_REPLICA_LIST reply named and the replica the read used. It
 * is only a hint: a get that finds one reads that replica while it asks the
 * master, and keeps the bytes only if the reply names the same version and
 * lists the same replica (docs/WIRE.md, "Object versions"). So a stale or
 * wrong entry costs one wasted read, never wrong bytes.
 *
 * Threading: one mutex for the table; lookups copy the entry out.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "store/internal.h"

#define LOC_SLOTS 65536 /* a power of two; 56 bytes each, the keys and names apart */

typedef struct loc_entry {
    uint64_t hash; /* 0: empty */
    char *key;     /* malloc'd */
    char *segment; /* malloc'd */
    uint64_t version, addr, size, epoch;
} loc_entry;

struct crc_loc_cache {
    pthread_mutex_t mu;
    loc_entry slots[LOC_SLOTS];
};

static uint64_t key_hash(const char *key)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)key; *p != '\0'; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return h ? h : 1;
}

static void entry_clear(loc_entry *e)
{
    free(e->key);
    free(e->segment);
    memset(e, 0, sizeof(*e));
}

int crc_loc_create(crc_loc_cache **out)
{
    crc_loc_cache *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "the get location cache");
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return 0;
}

void crc_loc_destroy(crc_loc_cache *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < LOC_SLOTS; i++)
        entry_clear(&c->slots[i]);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

bool crc_loc_lookup(crc_loc_cache *c, const char *key, crc_loc *out)
{
    uint64_t h = key_hash(key);
    loc_entry *e = &c->slots[h & (LOC_SLOTS - 1)];
    bool hit = false;
    pthread_mutex_lock(&c->mu);
    if (e->hash == h && strcmp(e->key, key) == 0 && strlen(e->segment) < sizeof(out->segment)) {
        memcpy(out->segment, e->segment, strlen(e->segment) + 1);
        out->version = e->version;
        out->addr = e->addr;
        out->size = e->size;
        out->epoch = e->epoch;
        hit = true;
    }
    pthread_mutex_unlock(&c->mu);
    return hit;
}

void crc_loc_store(crc_loc_cache *c, const char *key, uint64_t version, const crp_rpc_replica *r)
{
    /* Nothing to conclude without a version; a staged disk copy (epoch 0) is gone after
     * the read. */
    if (version == 0 || r->epoch == 0 || r->status != CRP_RPC_REPLICA_COMPLETE ||
        strlen(r->segment) >= sizeof(((crc_loc *)NULL)->segment))
        return;
    uint64_t h = key_hash(key);
    char *k = strdup(key), *seg = strdup(r->segment);
    if (k == NULL || seg == NULL) {
        free(k);
        free(seg);
        return; /* (only a hint) */
    }
    loc_entry *e = &c->slots[h & (LOC_SLOTS - 1)];
    pthread_mutex_lock(&c->mu);
    entry_clear(e);
    *e = (loc_entry){h, k, seg, version, r->addr, r->size, r->epoch};
    pthread_mutex_unlock(&c->mu);
}

void crc_loc_forget(crc_loc_cache *c, const char *key)
{
    uint64_t h = key_hash(key);
    loc_entry *e = &c->slots[h & (LOC_SLOTS - 1)];
    pthread_mutex_lock(&c->mu);
    if (e->hash == h && strcmp(e->key, key) == 0)
        entry_clear(e);
    pthread_mutex_unlock(&c->mu);
}

bool crc_loc_confirms(const crc_loc *l, uint64_t version, const crp_rpc_replica *reps, size_t n)
{
    if (version == 0 || version != l->version)
        return false;
    for (size_t i = 0; i < n; i++)
        if (reps[i].addr == l->addr && reps[i].size == l->size && reps[i].epoch == l->epoch &&
            reps[i].status == CRP_RPC_REPLICA_COMPLETE && strcmp(reps[i].segment, l->segment) == 0)
            return true;
    return false;
}
