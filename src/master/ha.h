/*
 * ha.h - the highly available master (docs/ha.md): leader election through
 * etcd, the gate that keeps standbys and deposed leaders from serving, and
 * replication of the leader's committed state to standbys.
 *
 * Election: every master holds one etcd lease and tries to create the key
 * "mooncake-store/<cluster_id>/master_view" (Mooncake's key) with its RPC
 * address as the value, under that lease, in one create-if-absent
 * transaction. The creator is the leader; its term is the key's
 * create_revision (etcd revisions only grow, so a later leader always has a
 * larger term). The others are standbys of the address they read, and poll
 * the key until it disappears (lease expiry or revocation), then campaign.
 *
 * Split brain: the leader serves only while crb_now_ms() is below the end of
 * its lease as it last saw it acknowledged (crm_etcd_lease_check) minus a
 * guard; etcd cannot expire the lease before that instant, so no successor
 * can exist while the old leader still serves. A leader that loses its lease
 * stops serving at once and is deposed: it sends SIGTERM to its own process
 * (the daemon shuts down and exits with status 3, crk_ha_deposed): its
 * state may be older than its successor's, so it never serves again; a
 * supervisor restarts it as a fresh standby that catches up.
 *
 * Threading: crk_ha_gate and the status/replication calls may be called from
 * any thread. crk_ha_start/crk_ha_stop by the daemon's main thread only.
 */
#ifndef CRESCENT_MASTER_HA_H
#define CRESCENT_MASTER_HA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/evloop.h"
#include "master/service.h"

typedef struct crk_ha crk_ha;

typedef struct crk_ha_config {
    const char *endpoints;    /* etcd members, as crm_etcd_parse_endpoints reads them */
    const char *cluster_id;   /* names the election key */
    uint64_t lease_ttl_ms;    /* leader lease TTL (whole seconds) */
    uint64_t guard_ms;        /* stop serving this long before the lease could end */
    uint32_t sync_replicas;   /* standbys that must apply a change before its reply */
    uint64_t repl_timeout_ms; /* a standby this far behind leaves the in-sync set */
    crk_service *svc;         /* the master's service (outlives the HA object) */
} crk_ha_config;

enum crk_ha_role {
    CRK_HA_CANDIDATE = 0, /* neither: campaigning, or between terms */
    CRK_HA_STANDBY = 1,
    CRK_HA_LEADER = 2,
};

/** What /health, /role, /leader and /metrics show. */
typedef struct crk_ha_status {
    int role;                /* enum crk_ha_role */
    uint64_t term;           /* the leader's election revision (0: none known) */
    char leader[300];        /* the leader's address ("" if none known) */
    int64_t lease_margin_ms; /* leader: time left before it stops serving */
    uint64_t commit_seq;     /* leader: last change applied by enough standbys; standby: applied */
    uint64_t head_seq;       /* leader: last change logged */
    uint32_t standbys;       /* leader: standbys streaming; standby: 1 while connected */
    uint32_t in_sync;        /* leader: standbys in the in-sync set (their acks gate replies) */
    uint64_t lag_entries;    /* leader: the most entries a streaming standby is behind */
    uint64_t lag_ms;         /* standby: since the last frame from the leader */
    uint64_t not_replicated; /* leader: replies that waited for standbys in vain */
    uint64_t fenced_writes;  /* writes in flight at a promotion, fenced */
    uint64_t resumes;        /* leader: subscriptions that resumed from the log */
    uint64_t snapshots;      /* leader: subscriptions that got a full snapshot */
    /* Where replication's cost goes (counters since start; docs/ha.md). */
    uint64_t frames;       /* leader: stream frames sent; standby: frames applied */
    uint64_t entries;      /* leader: entries in them (all standbys); standby: applied */
    uint64_t acks;         /* leader: ack reads that moved a standby; standby: acks sent */
    uint64_t commits;      /* leader: times the commit index moved (RPC threads woken) */
    uint64_t held_replies; /* leader: connections' replies held for the standbys */
    uint64_t held_ns;      /* leader: total time they were held */
    uint64_t apply_ns;     /* standby: time spent applying frames */
} crk_ha_status;

/**
 * Set up the etcd client and the replication state; campaigns only after
 * crk_ha_campaign. The master serves nothing (crk_ha_gate refuses) until it
 * wins.
 * Errors: CR_ERR_INVALID_CONFIG (endpoints), CR_ERR_NO_MEMORY, CR_ERR_SYSTEM.
 */
int crk_ha_start(const crk_ha_config *cfg, crk_ha **out);

/**
 * Publish `advertise` ("host:port" that clients and standbys dial) as this
 * master's address and start campaigning (a thread of its own). Call once,
 * after the RPC server listens.
 */
int crk_ha_campaign(crk_ha *ha, const char *advertise);

/** Resign: a leader stops serving and deletes its key so a standby takes
 *  over at once; the election ends. The gate refuses from then on. NULL ok. */
void crk_ha_resign(crk_ha *ha);

/** Resign, stop every thread, free. Call after the RPC server stopped (its
 *  threads call the gate). NULL is a no-op. */
void crk_ha_stop(crk_ha *ha);

/**
 * May this master serve a client request now? 0 yes; CR_ERR_NOT_LEADER (with
 * a message naming the leader and its term when known, written to msg) when
 * it is a standby, a candidate, or a leader within `guard_ms` of its lease's
 * end.
 */
int crk_ha_gate(crk_ha *ha, uint64_t now_ms, char *msg, size_t cap);

/** The term as clients see it (the handshake's view version). */
uint64_t crk_ha_term(crk_ha *ha);

/** Was this master deposed (lease lost while leading)? The daemon exits 3. */
bool crk_ha_deposed(crk_ha *ha);

void crk_ha_status_get(crk_ha *ha, crk_ha_status *out);

const char *crk_ha_role_name(int role);

/**
 * Durability (docs/ha.md): a change is committed once every standby counted
 * in the in-sync set applied it. crk_ha_committed is the highest committed
 * sequence number (UINT64_MAX when no standby is counted, or with
 * --ha_sync_replicas=0); crk_ha_log_head the last one logged. The RPC server
 * holds a mutation's reply until crk_ha_committed reaches the head as it was
 * after the mutation, and is told through the notify callback (called with
 * HA locks held, from HA threads or from the RPC I/O thread whose loop reads
 * a standby's acks: it must only flag and wake the I/O threads) each time
 * the commit index moves.
 */
uint64_t crk_ha_committed(crk_ha *ha);
uint64_t crk_ha_log_head(crk_ha *ha);
void crk_ha_set_notify(crk_ha *ha, void (*fn)(void *), void *ctx);

/** The RPC server held a connection's replies for `ns` until their changes
 *  were committed (counted in crk_ha_status). Any thread. */
void crk_ha_note_held(crk_ha *ha, uint64_t ns);

/**
 * Blocking form, for callers that cannot hold a reply (the scan worker):
 * wait until everything logged so far is committed. 0, or
 * CR_ERR_NOT_REPLICATED when that did not happen in time (the outcome is
 * unknown to the caller).
 */
int crk_ha_wait_durable(crk_ha *ha);

/**
 * Log what the mutating RPC `request` (a crp_rpc_req, keys already in their
 * tenant's namespace) changed: the current image of every key it named, the
 * segments it mounted. Called after the service executed it, before
 * crk_ha_wait_durable.
 */
void crk_ha_log_request(crk_ha *ha, const void *request);

/**
 * Group commit for an I/O thread: between crk_ha_batch_begin and
 * crk_ha_batch_end (one round of its event loop) the changes this thread
 * logs are sent to the standbys once, at the end, in one frame, instead of
 * once per request. Other threads (the scan worker) send at once. ha NULL:
 * nothing to do. Thread-local state only.
 */
void crk_ha_batch_begin(void);
void crk_ha_batch_end(crk_ha *ha);
/** Did this thread log changes that wait for its crk_ha_batch_end? */
bool crk_ha_batch_pending(void);

/** Does RPC opcode op (proto/rpc.h) change replicated state? */
bool crk_ha_op_mutates(unsigned op);

/**
 * A connection whose first frame was CRP_REPL_SUBSCRIBE (body, len): the
 * replicator takes the socket fd (it is the caller's no more) and streams
 * the state to that standby; the standby's acks are read on `acks`, the
 * calling I/O thread's own loop (the handler runs there, so the thread that
 * sees the commit index move is an RPC thread). Called by that I/O thread.
 */
void crk_ha_take_standby(void *ha, int fd, const uint8_t *body, size_t len, crb_loop *acks);

/**
 * The RPC server stopped its loops (crb_loop_stop of every loop, before it
 * frees them): the standbys whose acks they watched are dropped and their
 * sockets taken off the loops, so the replicator can free them. Call from
 * the thread that stopped the loops; ha must not be NULL.
 */
void crk_ha_acks_detach(crk_ha *ha);

#endif
