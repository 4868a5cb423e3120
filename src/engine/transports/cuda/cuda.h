/*
 * cuda.h - private interface of the cuda transport (docs/gpu.md).
 *
 * Pieces:
 *   cuda.c     ops table: driver at init, classify/reg/dereg of buffers,
 *              can_serve and submit for the paths it serves, counters
 *   copy.c     copies on per-slot streams (completion = the event fired),
 *              device <-> host in one process, device <-> a same-host
 *              peer's shared host memory (through the shm transport's
 *              mapping), pinned bounce windows for pageable host memory
 *   stage.c    the stager (transport.h): two pinned windows per stream,
 *              for tcp (both sides) and the bounce paths above
 *   service.c  our IPC service: hands peers our control page, legacy IPC
 *              handles and VMM fds (SCM_RIGHTS) for our device buffers
 *   import.c   a peer's device memory seen from here: the connection to its
 *              service, its control page, imported allocations (cached,
 *              dropped on unregister, restart and death)
 *   wire.c     the service's request/reply datagrams (bounds-checked, fuzzed)
 *
 * Contexts (design.md §2.3): every driver call is preceded by making the
 * device's primary context current on the calling thread explicitly:
 * crv_push/crv_pop on caller threads (the caller's context is restored),
 * crv_bind on engine threads. Nothing reads a thread's current context.
 */
#ifndef CRESCENT_ENGINE_TRANSPORTS_CUDA_H
#define CRESCENT_ENGINE_TRANSPORTS_CUDA_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/transports/shm/local_service.h"
#include "device/driver.h"
#include "device/pointer.h"
#include "engine/internal.h"
#include "engine/transports/shm/ctl_page.h"

#define CUDA_WINDOW     (1u << 20) /* bytes of one pinned staging window */
#define CUDA_SLOTS      4          /* copy streams per device */
#define CUDA_HANDLE_LEN 64         /* CUipcMemHandle */

/* The blob a device buffer carries in our descriptor, little-endian:
 * u8 version (1), u8 share (crv_share), u16 device ordinal (as we see it),
 * u32 control slot, u64 its generation (0: not reachable by IPC), u8
 * device UUID[16] (ordinals differ between processes; UUIDs do not). */
#define CUDA_BLOB_SIZE 32

typedef struct cuda_blob {
    uint8_t share;   /* crv_share; CRV_SHARE_NONE: no IPC path */
    uint16_t device; /* ordinal in the owner's process */
    uint32_t ctl_slot;
    uint64_t ctl_gen; /* 0: no control slot (not remote-accessible) */
    uint8_t uuid[16];
} cuda_blob;

void cuda_blob_encode(const cuda_blob *b, uint8_t out[CUDA_BLOB_SIZE]);
/* 0, or CR_ERR_MALFORMED_FRAME for a blob of the wrong size or version. */
int cuda_blob_decode(const uint8_t *in, size_t len, cuda_blob *out);

/* Service datagrams (wire.c). */
enum { CUDA_REQ_CONTROL_PAGE = 1, CUDA_REQ_EXPORT = 2 };
typedef struct cuda_req {
    uint8_t op;
    uint64_t addr; /* CUDA_REQ_EXPORT: an address in a device buffer of ours */
} cuda_req;
typedef struct cuda_reply {
    int32_t status;
    uint8_t share; /* crv_share of the allocation holding addr */
    uint64_t base; /* that allocation (legacy) or mapping (VMM) */
    uint64_t size;
    uint8_t handle[CUDA_HANDLE_LEN]; /* legacy IPC handle; VMM: fd rides SCM_RIGHTS */
} cuda_reply;
#define CUDA_REQ_SIZE   12
#define CUDA_REPLY_SIZE (4 + 1 + 8 + 8 + CUDA_HANDLE_LEN)
void cuda_req_encode(const cuda_req *m, uint8_t out[CUDA_REQ_SIZE]);
int cuda_req_decode(const uint8_t *in, size_t len, cuda_req *out);
void cuda_reply_encode(const cuda_reply *m, uint8_t out[CUDA_REPLY_SIZE]);
int cuda_reply_decode(const uint8_t *in, size_t len, cuda_reply *out);

/* What reg attached to a buffer. */
typedef struct cuda_buffer {
    bool pinned; /* host memory CUDA has page-locked */
    int share;   /* device memory: crv_share */
    uint32_t ctl_slot;
    uint64_t ctl_gen; /* 0: none */
} cuda_buffer;

/* An allocation of a peer imported into this process. */
typedef struct cuda_import {
    uint64_t remote_base, size;
    CUdeviceptr local;                   /* where it is mapped here */
    int share;                           /* how it was imported */
    int device;                          /* local ordinal it was opened on */
    CUmemGenericAllocationHandle handle; /* VMM */
    size_t reserved;                     /* VMM: bytes of VA reserved */
    int users;                           /* copies using it now; guarded by the peer's lock */
    bool dead;                           /* drop when users reaches 0 */
} cuda_import;

/* A peer's device memory seen from here (the per-peer area). */
typedef struct cuda_peer {
    cr_engine *engine;
    cre_peer *peer;
    pthread_mutex_t lock; /* everything below */
    int sock;             /* SEQPACKET to its service, -1 if none */
    crb_io watch;         /* notices it hanging up */
    bool watching;
    cre_ctl_slot *ctl; /* its control page, mapped */
    uint64_t ctl_size;
    int ctl_users;         /* copies holding a slot pointer */
    bool ctl_stale;        /* unmap when ctl_users reaches 0 */
    cuda_import **imports; /* each heap-allocated: a copy's pointer stays valid */
    size_t n_imports, cap_imports;
    atomic_bool refused; /* the peer refused us (credentials) */
} cuda_peer;

/* A peer's descriptor, parsed. */
typedef struct cuda_desc {
    char address[128]; /* its service ("" if none) */
    bool same_process; /* another engine of this process: its pointers work here */
    size_t n;
    cuda_blob *bufs; /* parallel to the descriptor's buffers */
    bool *has;       /* bufs[i] is valid */
} cuda_desc;

/* A copy issued on a worker's stream, completed by that worker's tick once
 * its event has fired (copy.c). */
typedef struct cuda_pending {
    struct cuda_pending *next;
    cre_task *t;
    CUevent ev;
    int device;
    uint64_t bytes;
    atomic_ullong *kind_counter; /* bytes_d2d / h2d / d2h */
    bool ipc;
    /* IPC: the fence and the import the copy holds (NULL where none) */
    struct cuda_peer *cp;
    struct cuda_import *im;
    cre_ctl_slot *slot;
    uint64_t gen, addr;
} cuda_pending;

typedef struct cuda_worker {
    pthread_mutex_t lock; /* the list; issue order = stream order */
    cuda_pending *head, *tail;
    cre_worker *w;
} cuda_worker;

/* The transport's engine area. */
typedef struct cuda_engine {
    cre_tp *tp;
    crv_driver *drv;      /* NULL: the driver is absent (transport declined) */
    pthread_mutex_t lock; /* streams, events, stagers */
    CUstream streams[CRV_MAX_DEVICES][CUDA_SLOTS];
    CUevent *events[CRV_MAX_DEVICES]; /* free events per device */
    size_t n_events[CRV_MAX_DEVICES], cap_events[CRV_MAX_DEVICES];
    cre_stage *free_stages;
    atomic_uint next_slot;
    cuda_worker *workers; /* one per engine worker: its pending copies */
    uint32_t n_workers;
    cre_ctl_page ctl;
    bool ctl_ready;
    /* IPC service (worker 0) */
    cre_local_service svc; /* "@crescent-cuda-<pid>-<instance>" */
    /* counters */
    atomic_ullong bytes_d2d, bytes_d2h, bytes_h2d, bytes_ipc, bytes_bounce, bytes_staged_out,
        bytes_staged_in, imports, exports;
} cuda_engine;

struct cre_stage {
    cuda_engine *ce;
    struct cre_stage *next_free;
    int device; /* -1 until first used */
    CUstream stream;
    CUevent ev[2];
    uint8_t *win[2];
    size_t win_len[2];
    bool busy[2];
    int dir;     /* 0 idle, 1 out, 2 in */
    bool bounce; /* a bounce copy in this process, not tcp staging (counters) */
    uint64_t dev, len, issued, handed;
    int cur;
};

/* cuda.c */
cuda_engine *cuda_of(cre_tp *tp);

/* copy.c */
/* Issue a direct copy on a worker's stream; p (filled by the caller with
 * its task, fence and counters) completes the task's slice from that
 * worker's tick when the event has fired. The caller added one to
 * t->slices_left for it. Errors: the copy was not issued (p untouched). */
int cuda_issue(cuda_engine *ce, int device, uint64_t dst, uint64_t src, uint64_t n,
               cuda_pending *p);
void cuda_complete_tick(cre_tp *tp, cre_worker *w, uint64_t now_ns);
/* Wait for and complete every pending copy (workers stopped). */
void cuda_drain(cuda_engine *ce);
/* Copy n bytes between addresses CUDA can reach directly (device memory,
 * pinned host memory, imported mappings) on a slot stream of `device`
 * and wait for its event. Caller has the device's context current. */
int cuda_copy(cuda_engine *ce, int device, uint64_t dst, uint64_t src, uint64_t n);
/* Device <-> pageable host memory through pinned windows (stager). */
int cuda_bounce(cuda_engine *ce, int device, bool to_device, uint64_t dev, uint8_t *host,
                uint64_t n);
int cuda_submit_local(cre_tp *tp, const cre_route *r, cre_task *t);
int cuda_submit_shm_host(cre_tp *tp, const cre_route *r, cre_task *t);
bool cuda_can_shm_host(cre_tp *tp, const cre_route *r);

/* stage.c */
extern const cre_stager_ops cuda_stager_ops;
int cuda_stage_get(cuda_engine *ce, cre_stage **out);
void cuda_stage_put(cuda_engine *ce, cre_stage *st);
void cuda_stages_free(cuda_engine *ce);

/* service.c */
int cuda_service_start(cre_tp *tp);
void cuda_service_stop(cre_tp *tp);
/* The IPC service's listener back from a back-off (worker 0's tick). */
void cuda_service_tick(cre_tp *tp, cre_worker *w, uint64_t now_ns);

/* import.c */
void cuda_peer_init(cuda_peer *cp, cr_engine *e, cre_peer *p);
void cuda_peer_fini(cuda_peer *cp);
void cuda_peer_drop(cuda_peer *cp);
void cuda_peer_prune(cuda_peer *cp, const crp_descriptor *d);
/* A copy that held im (may be NULL) and a control-page slot pointer ended. */
void cuda_peer_release(cuda_peer *cp, cuda_import *im, bool drop_import);
bool cuda_can_ipc(cre_tp *tp, const cre_route *r);
int cuda_submit_ipc(cre_tp *tp, const cre_route *r, cre_task *t);

#endif
