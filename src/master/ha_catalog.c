/*
 * ha_catalog.c - the standby's copy of the leader's state (ha_catalog.h):
 * an open-addressed table of key -> raw KEY entry and key -> raw DISK entry
 * (the key's disk copy: a second record in the same table, matched by kind
 * and hashed apart; slots hold the hash,
 * so a probe for an absent key touches only the slot array; linear probing,
 * at most half full, deletion shifts the run back), a small array of
 * segments by epoch, and the graveyard (pruned of expired entries as it
 * grows). A large slot array is mapped with transparent huge pages where
 * the kernel offers them (MADV_HUGEPAGE): a standby touches one random
 * slot per entry, and with 4 KiB pages most of those were TLB misses.
 */
#include "master/ha_catalog.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/error.h"

typedef struct cat_key {
    uint64_t seq;
    size_t len;
    uint8_t raw[]; /* the KEY entry: u8 kind, u16 key_len, key bytes, ... */
} cat_key;

typedef struct cat_slot {
    uint64_t hash;
    cat_key *k; /* NULL: empty */
} cat_slot;

typedef struct cat_seg {
    uint64_t epoch;
    size_t len;
    uint8_t *raw; /* the MOUNT entry */
} cat_seg;

struct crk_ha_catalog {
    cat_slot *slots;
    size_t nslots, nkeys; /* nslots: a power of two; nkeys: KEY records */
    size_t ndisk;         /* DISK records */
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

#define HUGE_BYTES ((size_t)2 << 20)

/* n zeroed slots: calloc below HUGE_BYTES, else an anonymous mapping
 * aligned to HUGE_BYTES and advised to use huge pages. NULL without memory. */
static cat_slot *slots_alloc(size_t n)
{
    size_t bytes = n * sizeof(cat_slot);
    if (bytes < HUGE_BYTES)
        return calloc(n, sizeof(cat_slot));
    size_t span = bytes + HUGE_BYTES;
    uint8_t *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    uintptr_t at = ((uintptr_t)m + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1);
    if (at > (uintptr_t)m)
        munmap(m, at - (uintptr_t)m);
    size_t tail = (size_t)((uintptr_t)m + span - (at + bytes));
    if (tail > 0)
        munmap((uint8_t *)at + bytes, tail);
    (void)madvise((void *)at, bytes, MADV_HUGEPAGE); /* a hint: fine where refused */
    return (cat_slot *)at;
}

static void slots_free(cat_slot *s, size_t n)
{
    size_t bytes = n * sizeof(cat_slot);
    if (bytes < HUGE_BYTES)
        free(s);
    else if (s != NULL)
        munmap(s, bytes);
}

int crk_ha_catalog_create(crk_ha_catalog **out)
{
    crk_ha_catalog *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->slots = slots_alloc(1024)) == NULL) {
        free(c);
        return crb_error(CR_ERR_NO_MEMORY, "ha catalog");
    }
    c->nslots = 1024;
    *out = c;
    return 0;
}

void crk_ha_catalog_clear(crk_ha_catalog *c)
{
    for (size_t i = 0; i < c->nslots; i++) {
        free(c->slots[i].k);
        c->slots[i] = (cat_slot){0, NULL};
    }
    c->nkeys = c->ndisk = 0;
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
    slots_free(c->slots, c->nslots);
    free(c->segs);
    free(c->graves);
    free(c);
}

size_t crk_ha_catalog_keys(const crk_ha_catalog *c)
{
    return c->nkeys;
}

/* KEY and DISK records both start u8 kind, u16 key_len, key bytes. */
static bool same_key(const cat_key *k, int kind, const char *key, size_t len)
{
    size_t klen = (size_t)k->raw[1] | (size_t)k->raw[2] << 8;
    return k->raw[0] == kind && klen == len && memcmp(k->raw + 3, key, len) == 0;
}

static uint64_t record_hash(int kind, const char *key, size_t len)
{
    uint64_t h = fnv(key, len);
    return kind == CRK_HA_DISK ? h ^ 0x9e3779b97f4a7c15ull : h;
}

/* The slot holding key's record of that kind, or the empty slot ending its probe run. */
static size_t probe(const crk_ha_catalog *c, uint64_t h, int kind, const char *key, size_t len)
{
    size_t mask = c->nslots - 1, i = h & mask;
    while (c->slots[i].k != NULL &&
           (c->slots[i].hash != h || !same_key(c->slots[i].k, kind, key, len)))
        i = (i + 1) & mask;
    return i;
}

/* The kind and key of a raw KEY or DISK entry: false for other bytes. */
static bool raw_key(const uint8_t *raw, size_t n, int *kind, const char **key, size_t *len)
{
    if (n < 3 || (raw[0] != CRK_HA_KEY && raw[0] != CRK_HA_DISK))
        return false;
    *kind = raw[0];
    *len = (size_t)raw[1] | (size_t)raw[2] << 8;
    *key = (const char *)raw + 3;
    return *len <= n - 3;
}

uint64_t crk_ha_catalog_prefetch_slot(const crk_ha_catalog *c, const uint8_t *raw, size_t raw_len)
{
    int kind;
    const char *key;
    size_t len;
    if (!raw_key(raw, raw_len, &kind, &key, &len))
        return 0;
    uint64_t h = record_hash(kind, key, len);
    __builtin_prefetch(&c->slots[h & (c->nslots - 1)]);
    return h;
}

void crk_ha_catalog_prefetch_record(const crk_ha_catalog *c, uint64_t h)
{
    const cat_slot *s = &c->slots[h & (c->nslots - 1)];
    if (s->k != NULL && s->hash == h)
        __builtin_prefetch(s->k);
}

/* Empty slot i, shifting the rest of its run back (no tombstones). */
static void slot_clear(crk_ha_catalog *c, size_t i)
{
    size_t mask = c->nslots - 1, j = i;
    c->slots[i].k = NULL;
    for (;;) {
        j = (j + 1) & mask;
        if (c->slots[j].k == NULL)
            return;
        size_t home = c->slots[j].hash & mask;
        /* slot j's entry may move to i when i lies cyclically in [home, j) */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            c->slots[i] = c->slots[j];
            c->slots[j].k = NULL;
            i = j;
        }
    }
}

static void grow(crk_ha_catalog *c)
{
    size_t ns = c->nslots * 2;
    cat_slot *n = slots_alloc(ns);
    if (n == NULL)
        return; /* fuller and slower, still correct while a slot is free */
    for (size_t i = 0; i < c->nslots; i++) {
        if (c->slots[i].k == NULL)
            continue;
        size_t j = c->slots[i].hash & (ns - 1);
        while (n[j].k != NULL)
            j = (j + 1) & (ns - 1);
        n[j] = c->slots[i];
    }
    slots_free(c->slots, c->nslots);
    c->slots = n;
    c->nslots = ns;
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
                     uint64_t h, uint64_t seq, uint64_t now, uint64_t read_hold,
                     uint64_t write_hold)
{
    size_t i = probe(c, h, CRK_HA_KEY, e->key, e->key_len);
    cat_key *old = c->slots[i].k;
    if (old != NULL) {
        crk_ha_entry prev;
        if (crk_ha_entry_decode(old->raw, old->len, &prev) == 0) {
            int rc = bury_dropped(c, &prev, e, now, read_hold, write_hold);
            if (rc < 0)
                return rc;
        }
    }
    bool live = (e->flags & (CRK_HA_F_COMPLETE | CRK_HA_F_WRITING)) != 0;
    if (!live) {
        if (old != NULL) {
            slot_clear(c, i);
            free(old);
            c->nkeys--;
        }
        return 0;
    }
    cat_key *k = old != NULL && old->len == len ? old : malloc(sizeof(*k) + len);
    if (k == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ha catalog key");
    if (k != old && old != NULL)
        free(old);
    k->seq = seq;
    k->len = len;
    memcpy(k->raw, raw, len);
    if (old == NULL)
        c->nkeys++;
    c->slots[i] = (cat_slot){h, k};
    if ((c->nkeys + c->ndisk) * 2 > c->nslots)
        grow(c);
    return 0;
}

/* A DISK record: replaced, or dropped when the copy is gone. */
static int apply_disk(crk_ha_catalog *c, const crk_ha_entry *e, const uint8_t *raw, size_t len,
                      uint64_t h)
{
    size_t i = probe(c, h, CRK_HA_DISK, e->key, e->key_len);
    cat_key *old = c->slots[i].k;
    if (!(e->flags & CRK_HA_F_ON_DISK)) {
        if (old != NULL) {
            slot_clear(c, i);
            free(old);
            c->ndisk--;
        }
        return 0;
    }
    cat_key *k = old != NULL && old->len == len ? old : malloc(sizeof(*k) + len);
    if (k == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ha catalog disk record");
    if (k != old && old != NULL)
        free(old);
    k->seq = 0;
    k->len = len;
    memcpy(k->raw, raw, len);
    if (old == NULL)
        c->ndisk++;
    c->slots[i] = (cat_slot){h, k};
    if ((c->nkeys + c->ndisk) * 2 > c->nslots)
        grow(c);
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
    uint64_t h = e->kind == CRK_HA_KEY || e->kind == CRK_HA_DISK
                     ? record_hash(e->kind, e->key, e->key_len)
                     : 0;
    return crk_ha_catalog_apply_hashed(c, e, raw, raw_len, h, seq, now, read_hold_ms,
                                       write_hold_ms);
}

int crk_ha_catalog_apply_hashed(crk_ha_catalog *c, const crk_ha_entry *e, const uint8_t *raw,
                                size_t raw_len, uint64_t h, uint64_t seq, uint64_t now,
                                uint64_t read_hold_ms, uint64_t write_hold_ms)
{
    switch (e->kind) {
    case CRK_HA_RESET:
        crk_ha_catalog_clear(c);
        return 0;
    case CRK_HA_MOUNT:
    case CRK_HA_UNMOUNT:
        return apply_segment(c, e, raw, raw_len);
    case CRK_HA_KEY:
        return apply_key(c, e, raw, raw_len, h, seq, now, read_hold_ms, write_hold_ms);
    case CRK_HA_DISK:
        return apply_disk(c, e, raw, raw_len, h);
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
    for (size_t i = 0; i < c->nslots; i++) {
        cat_key *k = c->slots[i].k;
        crk_ha_entry e;
        if (k != NULL && k->raw[0] == CRK_HA_KEY && crk_ha_entry_decode(k->raw, k->len, &e) == 0 &&
            fn(ctx, &e, k->seq) != 0)
            return;
    }
}

void crk_ha_catalog_each_disk(crk_ha_catalog *c, int (*fn)(void *, const crk_ha_entry *), void *ctx)
{
    for (size_t i = 0; i < c->nslots; i++) {
        cat_key *k = c->slots[i].k;
        crk_ha_entry e;
        if (k != NULL && k->raw[0] == CRK_HA_DISK && crk_ha_entry_decode(k->raw, k->len, &e) == 0 &&
            fn(ctx, &e) != 0)
            return;
    }
}

size_t crk_ha_catalog_disk_keys(const crk_ha_catalog *c)
{
    return c->ndisk;
}

void crk_ha_catalog_each_grave(crk_ha_catalog *c, int (*fn)(void *, const crk_ha_grave *),
                               void *ctx)
{
    for (size_t i = 0; i < c->ngraves; i++)
        if (fn(ctx, &c->graves[i]) != 0)
            return;
}
