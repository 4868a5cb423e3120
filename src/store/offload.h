/*
 * offload.h - a store client's disk tier (the holder's side of
 * docs/disk-tier.md phase B): a crf_ store under ssd_offload_path, a
 * staging area registered with the engine, and a disk thread that runs
 * OFFLOAD_HEARTBEAT with the master (proto/offload.h): it writes objects the
 * master evicts from this client's segment to disk, stages disk-only values
 * for readers, removes dead copies, promotes hot ones back to memory, and
 * after a restart re-announces every recovered record.
 *
 * Threading: crc_off_start / crc_off_stop from setup / close only; the
 * counters may be read from any thread (crc_off_stats). Everything else runs
 * on the disk thread; the disk tier's on_evict callback (its I/O thread)
 * only queues keys under the module's mutex.
 */
#ifndef CRESCENT_STORE_OFFLOAD_H
#define CRESCENT_STORE_OFFLOAD_H

#include "crescent/store.h"

typedef struct crc_offload crc_offload;

/**
 * Open the disk tier at path (NULL or "": MOONCAKE_OFFLOAD_FILE_STORAGE_PATH),
 * register the staging area, connect and start the disk thread. *out on
 * success. Errors: CR_INVALID_PARAMS (no path, no segment), the disk tier's
 * (CR_ERR_DISK_LOCKED, CR_ERR_DISK_IO, ...), engine and master errors.
 */
int crc_off_start(cr_store *s, const char *path, crc_offload **out);

/** Stop the thread, unregister and free the staging area, close the disk tier.
 *  NULL is a no-op. Before the engine and the master connections go. */
void crc_off_stop(cr_store *s, crc_offload *o);

/** Counters (o may be NULL: zeros). */
void crc_off_stats(crc_offload *o, cr_store_offload_stats *out);

#endif
