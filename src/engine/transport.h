/*
 * transport.h - the ops table every transport implements.
 *
 * At submit the engine resolves each request's local buffer and remote
 * buffer (kind, device, and for same-process targets the live registry
 * entry), then asks the installed transports in priority order whether they
 * can move bytes between that pair; the first that can, does. Nothing is
 * opened per buffer until a transfer touches it, so a buffer no transport
 * can serve fails only the requests that touch it.
 *
 * Installed transports follow the configured protocol: "tcp" installs tcp
 * alone (even self-transfers use loopback lanes), "auto" installs every
 * transport built in, fastest first (local, then tcp; shm/CMA and UCX slot
 * in between).
 */
#ifndef CRESCENT_ENGINE_TRANSPORT_H
#define CRESCENT_ENGINE_TRANSPORT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct cr_engine cr_engine;
typedef struct cre_peer cre_peer;
typedef struct cre_task cre_task;
typedef struct cre_buffer cre_buffer;

/* What submit resolved about a request's two ends. */
typedef struct cre_endpoints {
    cre_peer *peer;
    int local_kind;
    int remote_kind;
    int remote_device;
    cre_buffer *self_target; /* target in our own registry (same process), else NULL */
    uint64_t peer_instance;  /* descriptor instance the range was validated against */
    /* The remote buffer as the peer's descriptor describes it. */
    uint64_t remote_base;   /* start of the remote buffer */
    uint64_t shared_id;     /* its cr_alloc_shared region, 0 if not shareable */
    uint64_t shared_offset; /* remote_base's offset in that region */
    uint32_t ctl_slot;      /* its control-page slot */
    uint64_t ctl_gen;       /* 0 if the peer offers no control page */
    bool same_host;         /* the peer runs on this host */
    int32_t cma_pid;        /* the peer's pid if it offers CMA, else 0 */
} cre_endpoints;

typedef struct cre_transport {
    const char *name;
    /* Does this transport serve the pair? Pure; called under no lock. */
    bool (*can_serve)(const cr_engine *e, const cre_endpoints *ep);
    /* Start a validated task (its slices_left is set by the transport).
     * Returns 0, or a negative status with nothing started;
     * CR_ERR_TRANSPORT_UNSUPPORTED means "found at first use that this peer
     * refuses this path": the engine then tries the next transport. */
    int (*submit)(cr_engine *e, const cre_endpoints *ep, cre_task *t);
} cre_transport;

extern const cre_transport cre_transport_local;
extern const cre_transport cre_transport_shm;
extern const cre_transport cre_transport_cma;
extern const cre_transport cre_transport_tcp;

/* Every host memory kind; the transports built today move host memory only. */
bool cre_kind_is_host(int kind);

#endif
