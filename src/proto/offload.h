/*
 * offload.h - the disk tier's control message (crp_off_): the body of an
 * OFFLOAD_HEARTBEAT request (holder -> master) and of its reply (master ->
 * holder), carried as the RPC's opaque "b" (proto/rpc.h, shape "blob").
 *
 * One message shape serves both directions (docs/WIRE.md, "Disk tier"):
 *
 *   {"seg": str   the holder's engine segment name (requests; "" in replies),
 *    "st":  [u64] the holder's disk counters, CRP_OFF_STAT_* order (<= 16),
 *    "more": bool reply only: more tasks wait (poll again at once),
 *    "it":  [item] (<= CRP_OFF_MAX_ITEMS)}
 *   item = {"t": u8 crp_off_kind, "k": str key (1..CRP_OFF_MAX_KEY),
 *           "v": u64 version, "a": u64 address, "l": u64 size,
 *           "ttl": u64 ms, "st": i32 status (<= 0)}
 *
 * Every field of an item is required (unused ones are 0). Requests carry
 * results (OFFLOAD, STAGE, PROMOTE with "st") and reports (ANNOUNCE,
 * EVICTED); replies carry tasks (OFFLOAD, STAGE, REMOVE, PROMOTE, UNSTAGE).
 *
 * The decoder follows the RPC rules (strict types, unknown keys skipped,
 * bounds checked, no trailing bytes) and is fuzzed (fuzz/fuzz_offload.c).
 * A decoded message owns one block (crp_off_clear frees it); a caller-built
 * message owns nothing. Reentrant; a message belongs to one thread.
 */
#ifndef CRESCENT_PROTO_OFFLOAD_H
#define CRESCENT_PROTO_OFFLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/messages.h"

#define CRP_OFF_MAX_ITEMS 4096
#define CRP_OFF_MAX_KEY   4226 /* a 4096-byte key in a tenant's namespace */
#define CRP_OFF_MAX_STATS 16

typedef enum crp_off_kind {
    CRP_OFF_OFFLOAD = 1,  /* task: store [a, a+l) of your segment as k (version v); result: st */
    CRP_OFF_STAGE = 2,    /* task: read k (v) into the staging area; result: st, a, ttl */
    CRP_OFF_REMOVE = 3,   /* task: drop k from the disk tier (v = 0: whatever version) */
    CRP_OFF_PROMOTE = 4,  /* task: put k (v) back into memory; result: st */
    CRP_OFF_ANNOUNCE = 5, /* report: k (v, l) is on disk (after a restart) */
    CRP_OFF_EVICTED = 6,  /* report: the disk tier dropped k (v) for room */
    CRP_OFF_UNSTAGE = 7,  /* task: the readers of the staged copy of k at a are done */
} crp_off_kind;

/* Holder counters, in "st" order (crf_stats and the holder's own). */
enum {
    CRP_OFF_STAT_KEYS = 0,
    CRP_OFF_STAT_BYTES = 1, /* bucket file bytes */
    CRP_OFF_STAT_CAPACITY = 2,
    CRP_OFF_STAT_READS = 3,  /* values read from disk (stage + promote) */
    CRP_OFF_STAT_WRITES = 4, /* values written (offloads) */
    CRP_OFF_STAT_COMPACTIONS = 5,
    CRP_OFF_STAT_EVICTED = 6, /* keys the disk LRU dropped */
    CRP_OFF_NSTATS = 7,
};

typedef struct crp_off_item {
    uint8_t kind; /* crp_off_kind */
    int32_t status;
    char *key;
    uint64_t version, addr, size, ttl_ms;
} crp_off_item;

typedef struct crp_off_msg {
    char *segment; /* NULL = "" */
    size_t n_stats;
    uint64_t stats[CRP_OFF_MAX_STATS];
    bool more;
    size_t n_items;
    crp_off_item *items;
    void *block; /* decoder-owned storage */
} crp_off_msg;

/** Append m's encoding to out: 0, CR_ERR_NO_MEMORY, CR_INVALID_PARAMS
 *  (a bound exceeded, an unknown kind, a NULL key, over CRP_RPC_MAX_BLOB). */
int crp_off_encode(const crp_off_msg *m, crp_buf *out);
/** Decode data[0..len): CR_ERR_MALFORMED_FRAME naming the field, or CR_ERR_NO_MEMORY. */
int crp_off_decode(const void *data, size_t len, crp_off_msg *out);
/** Free decoded storage and zero *m. */
void crp_off_clear(crp_off_msg *m);

#endif
