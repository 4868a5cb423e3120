/*
 * pointer.h - what kind of memory an address is, asked of the CUDA driver
 * (cuPointerGetAttributes), for registration.
 *
 * The answer is data captured once, at registration, on whichever thread
 * registers: cuPointerGetAttributes needs no current context, so nothing
 * here depends on the calling thread's CUDA state.
 */
#ifndef CRESCENT_DEVICE_POINTER_H
#define CRESCENT_DEVICE_POINTER_H

#include <stdbool.h>
#include <stdint.h>

#include "device/driver.h"

typedef enum crv_mem_type {
    CRV_MEM_PAGEABLE = 0, /* host memory CUDA does not know */
    CRV_MEM_PINNED = 1,   /* page-locked host memory (cuMemHostAlloc/Register) */
    CRV_MEM_DEVICE = 2,   /* device memory (cuMemAlloc, VMM, pools) */
    CRV_MEM_MANAGED = 3,  /* unified memory: CPU-accessible */
} crv_mem_type;

/* How peers on this host may map a device allocation. */
typedef enum crv_share {
    CRV_SHARE_NONE = 0,   /* not exportable (e.g. a stream-ordered pool) */
    CRV_SHARE_LEGACY = 1, /* cuIpcGetMemHandle */
    CRV_SHARE_VMM_FD = 2, /* VMM allocation exportable as a POSIX fd */
} crv_share;

typedef struct crv_ptr_info {
    int type;      /* crv_mem_type */
    int device;    /* ordinal for device/managed memory, else -1 */
    int share;     /* crv_share (device memory only) */
    uint64_t base; /* the allocation (legacy) or mapping (VMM) holding the address */
    uint64_t size; /* its length (0 if unknown: host memory) */
} crv_ptr_info;

/** Ask the driver about one address. Errors: CR_ERR_CUDA. */
int crv_query(const crv_driver *d, uint64_t addr, crv_ptr_info *out);

/**
 * Classify [addr, addr+len): device memory of one device, in one or more
 * allocations (every one is visited, so a range must not straddle host
 * and device memory or two devices), or host memory (pinned only if both
 * ends are). *out describes the first allocation, with share = the weakest
 * sharing of all of them. Errors: CR_ERR_MEMORY_KIND_MISMATCH (mixed
 * range; the message names the addresses and kinds), CR_ERR_CUDA.
 */
int crv_classify_range(const crv_driver *d, uint64_t addr, uint64_t len, crv_ptr_info *out);

/** "pageable", "pinned", "device", "managed". */
const char *crv_mem_type_name(int type);

#endif
