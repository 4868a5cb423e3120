/*
 * ha_catalog.h - a standby's copy of the leader's replicated state
 * (docs/ha.md): the post-image of every key and segment, as the raw
 * entries of the stream (ha_codec.h), with the sequence number that logged
 * each key (0: from a snapshot), and a graveyard of replica ranges the
 * leader stopped using recently (readers may still read them, writers may
 * still write them), kept until a local deadline.
 *
 * Threading: none; the standby's stream thread owns it, the promotion reads
 * it after that thread stopped.
 */
#ifndef CRESCENT_MASTER_HA_CATALOG_H
#define CRESCENT_MASTER_HA_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include "master/ha_codec.h"

typedef struct crk_ha_catalog crk_ha_catalog;

typedef struct crk_ha_grave {
    uint64_t epoch, offset, value_size;
    uint64_t until_ms; /* local monotonic clock */
} crk_ha_grave;

int crk_ha_catalog_create(crk_ha_catalog **out);
void crk_ha_catalog_destroy(crk_ha_catalog *c);
/** Forget everything (RESET). */
void crk_ha_catalog_clear(crk_ha_catalog *c);

/**
 * Apply one entry (decoded e, its raw bytes) logged at seq at local time
 * now: ranges a key no longer uses go to the graveyard until now +
 * read_hold_ms (complete replicas) or now + write_hold_ms (a write's).
 * CR_ERR_NO_MEMORY (the catalog is then incomplete: the caller resyncs).
 */
int crk_ha_catalog_apply(crk_ha_catalog *c, const crk_ha_entry *e, const uint8_t *raw,
                         size_t raw_len, uint64_t seq, uint64_t now, uint64_t read_hold_ms,
                         uint64_t write_hold_ms);
/** The same with the record's hash already known: `hash` must be what
 *  crk_ha_catalog_prefetch_slot returned for these raw bytes (ignored for
 *  entries other than KEY and DISK). */
int crk_ha_catalog_apply_hashed(crk_ha_catalog *c, const crk_ha_entry *e, const uint8_t *raw,
                                size_t raw_len, uint64_t hash, uint64_t seq, uint64_t now,
                                uint64_t read_hold_ms, uint64_t write_hold_ms);

/**
 * Memory-latency hints for a batch of entries (the standby applies a frame
 * of many): stage 1 prefetches the slot a KEY or DISK entry's record lives
 * in, stage 2 (a few entries later, the slot now in cache) the record
 * itself. Change nothing; any bytes are accepted (malformed ones ignored).
 * Stage 1 returns the record's hash (0 for bytes that are no KEY or DISK
 * entry), which stage 2 and crk_ha_catalog_apply_hashed take instead of
 * hashing the key again.
 */
uint64_t crk_ha_catalog_prefetch_slot(const crk_ha_catalog *c, const uint8_t *raw, size_t raw_len);
void crk_ha_catalog_prefetch_record(const crk_ha_catalog *c, uint64_t hash);

/** Every segment (MOUNT entries), every live key (KEY entries with their
 *  seq), the graveyard; fn returns non-zero to stop. */
void crk_ha_catalog_each_segment(crk_ha_catalog *c, int (*fn)(void *, const crk_ha_entry *),
                                 void *ctx);
void crk_ha_catalog_each_key(crk_ha_catalog *c,
                             int (*fn)(void *, const crk_ha_entry *, uint64_t seq), void *ctx);
void crk_ha_catalog_each_grave(crk_ha_catalog *c, int (*fn)(void *, const crk_ha_grave *),
                               void *ctx);
size_t crk_ha_catalog_keys(const crk_ha_catalog *c);
/** Every disk copy (DISK entries with CRK_HA_F_ON_DISK); fn returns non-zero to stop. */
void crk_ha_catalog_each_disk(crk_ha_catalog *c, int (*fn)(void *, const crk_ha_entry *),
                              void *ctx);
/** How many keys have a disk copy. */
size_t crk_ha_catalog_disk_keys(const crk_ha_catalog *c);

#endif
