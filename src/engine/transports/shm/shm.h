/*
 * shm.h - private interface of the same-host transports (shm, cma) and the
 * fd service they share.
 *
 * The shm transport owns the same-host machinery: our control page and fd
 * service (service.c), the blob each of our buffers carries (its control
 * slot and, for shareable memory, its region), and per peer the connection
 * to its fd service with the mappings made through it (peer_map.c). The cma
 * transport moves non-shareable same-host memory with process_vm_* and
 * borrows all of that from shm (it is installed only next to it).
 */
#ifndef CRESCENT_ENGINE_TRANSPORTS_SHM_H
#define CRESCENT_ENGINE_TRANSPORTS_SHM_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "engine/internal.h"
#include "engine/transports/shm/ctl_page.h"
#include "engine/transports/shm/local_service.h"

/* A buffer's shm blob: its control slot and shared region, little-endian
 * u32 slot, u64 gen, u64 region id (0 = not shareable), u64 offset. */
#define CRE_SHM_BLOB_SIZE 28

typedef struct shm_buffer_state {
    uint32_t ctl_slot;
    uint64_t ctl_gen;
} shm_buffer_state;

/* One buffer of a peer's descriptor as the shm transport reads it. */
typedef struct shm_remote {
    uint64_t shared_id, shared_offset;
    uint32_t ctl_slot;
    uint64_t ctl_gen; /* 0: the peer offers no same-host path for it */
} shm_remote;

/* A peer's descriptor, parsed (desc_parse). */
typedef struct shm_desc {
    char address[128]; /* its fd service ("" if none) */
    int32_t cma_pid;   /* 0 if it offers no CMA */
    size_t n;
    shm_remote *bufs; /* parallel to the descriptor's buffers */
} shm_desc;

/* A mapped region of a same-host peer. */
typedef struct cre_shm_map {
    uint64_t id;
    uint8_t *base;
    uint64_t size;
} cre_shm_map;

/* Same-host state of a peer: the shm transport's per-peer area. */
typedef struct cre_peer_local {
    cr_engine *engine;
    cre_peer *peer;
    pthread_mutex_t lock;      /* connecting, mapping; before map_lock */
    pthread_rwlock_t map_lock; /* copies hold it shared; dropping takes it exclusive */
    int sock;                  /* SEQPACKET to the peer's fd service, -1 if none */
    crb_io watch;              /* sock in a worker's loop: notices the peer dying */
    atomic_bool refused;       /* the peer refused us fds (credentials) */
    cre_ctl_slot *ctl;         /* the peer's control page, mapped */
    uint64_t ctl_size;
    cre_shm_map *maps;
    size_t n_maps, cap_maps;
    atomic_int cma_state; /* 0 untried, 1 works, -1 refused by the kernel */
} cre_peer_local;

/* The shm transport's engine area. */
typedef struct shm_engine {
    cre_tp *tp;
    cre_ctl_page ctl;
    cre_local_service svc; /* the fd service, "@crescent-<pid>-<instance>" */
    atomic_ullong mappings;
} shm_engine;

/* The fd service's listener back from a back-off (worker 0's tick). */
void cre_shm_service_tick(cre_tp *tp, cre_worker *w, uint64_t now_ns);

/* The installed shm transport of e (cma uses it). */
cre_tp *cre_shm_tp(cr_engine *e);

/* service.c */
int cre_shm_service_start(cre_tp *tp);
void cre_shm_service_stop(cre_tp *tp);

/* peer_map.c */
void cre_peer_local_init(cre_peer_local *l, cr_engine *e, cre_peer *p);
void cre_peer_local_fini(cre_peer_local *l);
/* Drop every mapping of the peer (it died or restarted). */
void cre_peer_local_drop(cre_peer_local *l);
/* Drop mappings of regions that are not among live_ids. */
void cre_peer_local_prune(cre_peer_local *l, const uint64_t *live_ids, size_t n_live);
/* Connect to the peer's fd service at `address` and map its control page
 * (idempotent). */
int cre_peer_local_connect(cre_peer_local *l, const char *address);
/* Make sure region `id` of the peer is mapped (first use maps it). */
int cre_peer_local_map(cre_peer_local *l, const char *address, uint64_t id);
/* Drop the mapping of region `id` (its buffer was unregistered). */
void cre_peer_local_unmap(cre_peer_local *l, uint64_t id);
/* The mapping of region `id`, or NULL. Caller holds l->map_lock. */
uint8_t *cre_peer_local_find_locked(cre_peer_local *l, uint64_t id, uint64_t *size);

#endif
