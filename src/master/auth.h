/*
 * auth.h - the master's shared secret (docs/WIRE.md, "Master shared
 * secret"), checked per connection before anything else is served.
 *
 * With a secret (crk_server_info.secret), a connection first gets a
 * SERVICE_READY reply with status CR_ERR_MASTER_AUTH_REQUIRED and a fresh
 * server nonce "sn"; the client repeats SERVICE_READY with a client nonce
 * "cn" and "mac" = HMAC-SHA256(secret, "crescent-master-client" | sn | cn),
 * and a good proof is answered with the master's own "mac" =
 * HMAC-SHA256(secret, "crescent-master-server" | cn | sn). Until then every
 * other request is refused with CR_ERR_MASTER_AUTH_REQUIRED; a wrong proof
 * is CR_ERR_MASTER_AUTH_FAILED and needs a new challenge. So a segment can
 * only be mounted, and its client's operations only be made, on a
 * connection that proved the secret, and the client-id binding of
 * dispatch.h keeps each such connection to the one client it speaks for.
 *
 * Threading: one thread at a time per peer (the connection's owner).
 */
#ifndef CRESCENT_MASTER_AUTH_H
#define CRESCENT_MASTER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "master/dispatch.h"
#include "proto/rpc.h"

/* Labels of the two proofs (also the client's, src/store/master_client.c). */
#define CRK_AUTH_CLIENT_LABEL "crescent-master-client"
#define CRK_AUTH_SERVER_LABEL "crescent-master-server"

/**
 * HMAC-SHA256(secret, label | a | b) into mac (the wire's proofs).
 */
void crk_auth_mac(const char *secret, size_t secret_len, const char *label,
                  const uint8_t a[CRP_NONCE_SIZE], const uint8_t b[CRP_NONCE_SIZE],
                  uint8_t mac[CRP_MAC_SIZE]);

/**
 * Before dispatching req for peer: 0 when it may be served; otherwise the
 * refusal's status (recorded with crb_error), with resp->u.hello filled
 * (version, caps, software, view, and the challenge) for a SERVICE_READY.
 * Always 0 without a secret or without a peer (in-process callers).
 */
int crk_auth_check(const crk_server_info *info, crk_peer *peer, const crp_rpc_req *req,
                   crp_rpc_resp *resp);

/** After a SERVICE_READY that crk_auth_check let through with a proof:
 *  add the master's proof to the reply. */
void crk_auth_prove(const crk_server_info *info, const crk_peer *peer, const crp_rpc_req *req,
                    crp_rpc_resp *resp);

#endif
