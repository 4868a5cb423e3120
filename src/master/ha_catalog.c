/*
 * ha_catalog.c - the standby's copy of the leader's state (ha_catalog.h):
 * a chained hash table of key -> raw KEY entry, a small array of segments by
 * epoch, and the graveyard (pruned of expired entries as it grows).
 */
#include "master/ha_catalog.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

typedef struct cat_key {
    struct cat_key *next;
    uint64_t hash, seq;
    size_t len;
    uint8_t raw[]; /* the KEY entry */
} cat_key;

typedef struct cat_seg {
    uint64_t epoch;
    size_t len;
    uint8_t *raw; /* the MOUNT entry */
} cat_seg;

struct crk_ha_catalog {
    cat_key **buckets;
    size_t nbuckets, nkeys;
    cat_seg *segs;
    size_t nsegs, segs_cap;
    crk_ha_grave *graves;
    size_t ngraves, graves_cap;
};

static uint64_t fnv(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

int crk_ha_catalog_create(crk_ha_catalog **out)
{
    crk_ha_catalog *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->buckets = calloc(1024, sizeof(*c->buckets))) == NULL) {
        free(c);
        return crb_error(CR_ERR_NO_MEMORY, "ha catalog");
    }
    c->nbuckets = 1024;
    *out = c;
    return 0;
}

void crk_ha_catalog_clear(crk_ha_catalog *c)
{
    for (size_t b = 0; b < c->nbuckets; b++) {
        cat_key *k = c->buckets[b];
        while (k != NULL) {
            cat_key *next = k->next;
            free(k);
            k = next;
        }
        c->buckets[b] = NULL;
    }
    c->nkeys = 0;
    for (size_t i = 0; i < c->nsegs; i++)
        free(c->segs[i].raw);
    c->nsegs = 0;
    c->ngraves = 0;
}

void crk_ha_catalog_destroy(crk_ha_catalog *c)
{
    if (c == NULL)
        return;
    crk_ha_catalog_clear(c);
    free(c->buckets);
    free(c->segs);
    free(c->graves);
    free(c);
}

size_t crk_ha_catalog_keys(const crk_ha_catalog *c)
{
    return c->nkeys;
}

static void grow_buckets(crk_ha_catalog *c)
{
    size_t nb = c->nbuckets * 2;
    cat_key **nbk = calloc(nb, sizeof(*nbk));
    if (nbk == NULL)
        return; /* longer chains, still correct */
    for (size_t b = 0; b < c->nbuckets; b++) {
        cat_key *k = c->buckets[b];
        while (k != NULL) {
            cat_key *next = k->next;
            k->next = nbk[k->hash & (nb - 1)];
            nbk[k->hash & (nb - 1)] = k;
            k = next;
        }
    }
    free(c->buckets);
    c->buckets = nbk;
    c->nbuckets = nb;
}

static int bury(crk_ha_catalog *c, uint64_t epoch, uint64_t offset, uint64_t size, uint64_t until,
                uint64_t now)
{
    if (c->ngraves == c->graves_cap) {
        size_t keep = 0; /* prune the expired ones first */
        for (size_t i = 0; i < c->ngraves; i++)
            if (c->graves[i].until_ms > now)
                c->graves[keep++] = c->graves[i];
        c->ngraves = keep;
    }
    if (c->ngraves == c->graves_cap) {
        size_t cap = c->graves_cap ? c->graves_cap * 2 : 256;
        crk_ha_grave *g = realloc(c->graves, cap * sizeof(*g));
        if (g == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "ha graveyard");
        c->graves = g;
        c->graves_cap = cap;
    }
    c->graves[c->ngraves++] = (crk_ha_grave){epoch, offset, size, until};
    return 0;
}

static bool has_rep(const crk_ha_rep *reps, uint32_t n, crk_ha_rep r)
{
    for (uint32_t i = 0; i < n; i++)
        if (reps[i].epoch == r.epoch && reps[i].offset == r.offset)
            return true;
    return false;
}

/* Ranges of old that new no longer uses go to the graveyard. */
static int bury_dropped(crk_ha_catalog *c, const crk_ha_entry *old, const crk_ha_entry *new,
                        uint64_t now, uint64_t read_hold, uint64_t write_hold)
{
    int rc = 0;
    for (uint32_t i = 0; i < old->nrep && rc == 0; i++)
        if (!has_rep(new->rep, new->nrep, old->rep[i]) &&
            !has_rep(new->wrep, new->wnrep, old->rep[i]))
            rc = bury(c, old->rep[i].epoch, old->rep[i].offset, old->size, now + read_hold, now);
    for (uint32_t i = 0; i < old->wnrep && rc == 0; i++)
        if (!has_rep(new->rep, new->nrep, old->wrep[i]) &&
            !has_rep(new->wrep, new->wnrep, old->wrep[i]))
            rc =
                bury(c, old->wrep[i].epoch, old->wrep[i].offset, old->wsize, now + write_hold, now);
    return rc;
}

static int apply_key(crk_ha_catalog *c, const crk_ha_entry *e, const uint8_t *raw, size_t len,
                     uint64_t seq, uint64_t now, uint64_t read_hold, uint64_t write_hold)
{
    uint64_t h = fnv(e->key, e->key_len);
    cat_key **pp = &c->buckets[h & (c->nbuckets - 1)];
    while (*pp != NULL) {
        cat_key *k = *pp;
        crk_ha_entry old;
        if (k->hash == h && crk_ha_entry_decode(k->raw, k->len, &old) == 0 &&
            old.key_len == e->key_len && memcmp(old.key, e->key, e->key_len) == 0) {
            int rc = bury_dropped(c, &old, e, now, read_hold, write_hold);
            if (rc < 0)
                return rc;
            *pp = k->next;
            free(k);
            c->nkeys--;
            break;
        }
        pp = &k->next;
    }
    bool live = (e->flags & (CRK_HA_F_COMPLETE | CRK_HA_F_WRITING)) != 0;
    if (!live)
        return 0;
    cat_key *k = malloc(sizeof(*k) + len);
    if (k == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ha catalog key");
    k->hash = h;
    k->seq = seq;
    k->len = len;
    memcpy(k->raw, raw, len);
    size_t b = h & (c->nbuckets - 1);
    k->next = c->buckets[b];
    c->buckets[b] = k;
    if (++c->nkeys > c->nbuckets)
        grow_buckets(c);
    return 0;
}

static int apply_segment(crk_ha_catalog *c, const crk_ha_entry *e, const uint8_t *raw, size_t len)
{
    for (size_t i = 0; i < c->nsegs; i++) {
        if (c->segs[i].epoch == e->epoch) {
            free(c->segs[i].raw);
            c->segs[i] = c->segs[--c->nsegs];
            break;
        }
    }
    if (e->kind == CRK_HA_UNMOUNT)
        return 0;
    if (c->nsegs == c->segs_cap) {
        size_t cap = c->segs_cap ? c->segs_cap * 2 : 16;
        cat_seg *s = realloc(c->segs, cap * sizeof(*s));
        if (s == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "ha catalog segments");
        c->segs = s;
        c->segs_cap = cap;
    }
    uint8_t *copy = malloc(len);
    if (copy == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ha catalog segment");
    memcpy(copy, raw, len);
    c->segs[c->nsegs++] = (cat_seg){e->epoch, len, copy};
    return 0;
}

int crk_ha_catalog_apply(crk_ha_catalog *c, const crk_ha_entry *e, const uint8_t *raw,
                         size_t raw_len, uint64_t seq, uint64_t now, uint64_t read_hold_ms,
                         uint64_t write_hold_ms)
{
    switch (e->kind) {
    case CRK_HA_RESET:
        crk_ha_catalog_clear(c);
        return 0;
    case CRK_HA_MOUNT:
    case CRK_HA_UNMOUNT:
        return apply_segment(c, e, raw, raw_len);
    case CRK_HA_KEY:
        return apply_key(c, e, raw, raw_len, seq, now, read_hold_ms, write_hold_ms);
    default:
        return 0;
    }
}

void crk_ha_catalog_each_segment(crk_ha_catalog *c, int (*fn)(void *, const crk_ha_entry *),
                                 void *ctx)
{
    for (size_t i = 0; i < c->nsegs; i++) {
        crk_ha_entry e;
        if (crk_ha_entry_decode(c->segs[i].raw, c->segs[i].len, &e) == 0 && fn(ctx, &e) != 0)
            return;
    }
}

void crk_ha_catalog_each_key(crk_ha_catalog *c,
                             int (*fn)(void *, const crk_ha_entry *, uint64_t seq), void *ctx)
{
    for (size_t b = 0; b < c->nbuckets; b++) {
        for (cat_key *k = c->buckets[b]; k != NULL; k = k->next) {
            crk_ha_entry e;
            if (crk_ha_entry_decode(k->raw, k->len, &e) == 0 && fn(ctx, &e, k->seq) != 0)
                return;
        }
    }
}

void crk_ha_catalog_each_grave(crk_ha_catalog *c, int (*fn)(void *, const crk_ha_grave *),
                               void *ctx)
{
    for (size_t i = 0; i < c->ngraves; i++)
        if (fn(ctx, &c->graves[i]) != 0)
            return;
}
