/*
 * dispatch.h - turning one decoded RPC request into a call on the master
 * service and a reply. Transport-free: the RPC server decodes frames, calls
 * crk_dispatch, encodes the reply and frees the scratch.
 */
#ifndef CRESCENT_MASTER_DISPATCH_H
#define CRESCENT_MASTER_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master/service.h"
#include "proto/rpc.h"

/*
 * Memory a reply points into: a bump arena. Valid until crk_scratch_reset or
 * crk_scratch_free. An I/O thread keeps one scratch for all the requests it
 * serves and resets it after each reply is encoded, so a request costs no
 * malloc once the arena has grown to the thread's usual reply size.
 * Zero-initialise before first use; not thread-safe (one owner thread).
 */
typedef struct crk_scratch_block crk_scratch_block;
typedef struct crk_scratch {
    crk_scratch_block *head; /* block being carved; older blocks follow */
} crk_scratch;

/* Forget every allocation; keeps the largest block for the next request. */
void crk_scratch_reset(crk_scratch *s);
/* Free everything; the scratch is empty (and reusable) afterwards. */
void crk_scratch_free(crk_scratch *s);

/* What the server tells the dispatcher about itself. */
typedef struct crk_server_info {
    uint64_t view_version; /* changes when the master restarts */
    const char *software;  /* "crescent-master 0.1.0" */
    const char *secret;    /* shared secret connections must prove (master/auth.h); NULL: none */
    size_t secret_len;
    /* HA (master/ha.h), NULL without: requests pass its gate first, a
     * mutation's reply waits for its durability point, and the view version
     * clients see is the election term. */
    struct crk_ha *ha;
} crk_server_info;

/* The capability bits this master announces: every defined one but commit ahead under HA
 * (a committed-ahead put's completion is a notice the standbys would not have). */
static inline uint64_t crk_server_caps(const crk_server_info *info)
{
    return info->ha != NULL
               ? CRP_RPC_CAPS_DEFINED & ~(CRP_RPC_CAP_COMMIT_AHEAD | CRP_RPC_CAP_BATCH_COMMIT_AHEAD)
               : CRP_RPC_CAPS_DEFINED;
}

/*
 * The client identity a connection speaks for (issue 11 item 7). The first
 * request on a connection that names a non-zero client id (SERVICE_READY
 * normally) binds the connection to it; a later request naming another id
 * is refused with CR_ILLEGAL_CLIENT, so one connection cannot mount,
 * unmount, ping, end or revoke puts for another client. Client ids are
 * never disclosed to other connections (QUERY_SEGMENT answers the owner's
 * id only to the owner, zero otherwise), so an id is a 128-bit secret that
 * only its client holds: another client can neither learn it nor act as it.
 * With a shared secret (master/auth.h) nothing is served on a connection
 * before it proved the secret, so the binding is also to a connection that
 * holds the secret. One per connection; zero-initialise.
 */
typedef struct crk_peer {
    crp_rpc_uuid client_id;
    bool bound;
    bool authenticated;            /* proved the shared secret (master/auth.h) */
    bool challenged;               /* nonce sent, answer outstanding */
    uint8_t nonce[CRP_NONCE_SIZE]; /* the last server nonce */
    /* HA (master/ha.h): with defer_durable set by the caller, a mutation
     * does not wait for its durability point; crk_dispatch sets
     * durable_seq to the sequence number the reply must wait for (0: none)
     * and the caller holds the reply until crk_ha_committed reaches it. */
    bool defer_durable;
    uint64_t durable_seq;
    /* Owned writes (docs/WIRE.md): this connection's crk_conn_tag, taken at
     * its first put start with "ow" (0: it never owned a write). */
    uint64_t conn_tag;
    /* A TCP connection from this host (docs/WIRE.md "Local socket"): the RPC
     * server's local socket name, offered in the hello reply with the client's
     * port as seen here (NULL / 0: not offered). */
    const char *local_socket;
    uint16_t local_port;
} crk_peer;

/**
 * The connection of `peer` is being freed (the RPC server calls this once
 * per connection, on its I/O thread, after its last request): the writes it
 * still owns are revoked (crk_revoke_conn_writes), and a peer bound to a
 * client is uncounted (crk_client_linked: the client's last connection
 * closing makes its segments a placement's last resort). NULL peer: nothing.
 */
void crk_peer_closed(crk_service *s, crk_peer *peer, uint64_t now_ms);

/**
 * Execute req against the service at now_ms for the connection `peer`
 * (NULL: no connection identity, as in-process callers) and fill *resp
 * (op, status, message and the reply shape). Never fails as a call: every
 * outcome, including bad parameters, is a status in the reply. Arrays and
 * strings in *resp live in `scratch` (or in req) until the caller frees
 * them. Thread-safe as the service is; one thread at a time per peer.
 */
void crk_dispatch(crk_service *s, const crk_server_info *info, crk_peer *peer,
                  const crp_rpc_req *req, uint64_t now_ms, crp_rpc_resp *resp,
                  crk_scratch *scratch);

#endif
