/*
 * auth.c - challenge and proof of the master's shared secret (auth.h).
 *
 * Design: the state is three fields of the connection's crk_peer (the
 * nonce sent, whether one is outstanding, whether the connection proved the
 * secret). The nonce is fresh per challenge and forgotten after one answer,
 * right or wrong, so a recorded exchange is useless on another connection
 * and a guess costs a round trip. Proofs are compared in constant time; a
 * wrong one is logged (rate-limited per I/O thread).
 */
#include "master/auth.h"

#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "crescent/status.h"
#include "master/rpc_limits.h"
#include "proto/mac.h"

#define AUTH_LOG_INTERVAL_MS 10000

/* A wrong proof is worth a warning, at most one per I/O thread per 10 s. */
static void log_wrong_proof(void)
{
    static _Thread_local crk_ratelimit limit = {.interval_ms = AUTH_LOG_INTERVAL_MS};
    uint64_t suppressed = 0;
    if (crk_ratelimit_allow(&limit, crb_now_ms(), &suppressed))
        crb_log(CRB_LOG_WARN,
                "master: a connection failed the shared-secret proof (%llu more since the last "
                "message)",
                (unsigned long long)suppressed);
}

void crk_auth_mac(const char *secret, size_t secret_len, const char *label,
                  const uint8_t a[CRP_NONCE_SIZE], const uint8_t b[CRP_NONCE_SIZE],
                  uint8_t mac[CRP_MAC_SIZE])
{
    crp_proof(secret, secret_len, label, a, CRP_NONCE_SIZE, b, CRP_NONCE_SIZE, mac);
}

static void hello_fields(const crk_server_info *info, crp_rpc_resp *resp)
{
    resp->u.hello = (crp_rpc_hello_resp){.version = CRP_RPC_VERSION,
                                         .caps = crk_server_caps(info),
                                         .software = (char *)info->software,
                                         .view_version = info->view_version};
}

int crk_auth_check(const crk_server_info *info, crk_peer *peer, const crp_rpc_req *req,
                   crp_rpc_resp *resp)
{
    if (info->secret == NULL || info->secret_len == 0 || peer == NULL || peer->authenticated)
        return 0;
    if (req->op != CRP_RPC_SERVICE_READY)
        return crb_error(CR_ERR_MASTER_AUTH_REQUIRED,
                         "%s: this master requires a shared secret; prove it in SERVICE_READY "
                         "first (clients: set CRESCENT_MASTER_SECRET)",
                         crp_rpc_op_name(req->op));
    const crp_rpc_hello_req *h = &req->u.hello;
    hello_fields(info, resp);
    if (h->has_mac && peer->challenged) {
        uint8_t want[CRP_MAC_SIZE];
        crk_auth_mac(info->secret, info->secret_len, CRK_AUTH_CLIENT_LABEL, peer->nonce,
                     h->client_nonce, want);
        peer->challenged = false; /* one answer per challenge */
        if (crp_proof_equal(want, h->mac)) {
            peer->authenticated = true;
            return 0;
        }
        log_wrong_proof();
        return crb_error(CR_ERR_MASTER_AUTH_FAILED,
                         "service_ready: wrong shared-secret proof (the client's "
                         "CRESCENT_MASTER_SECRET is not the master's)");
    }
    /* First contact (or a proof without a challenge): challenge. */
    if (crb_random_bytes(peer->nonce, CRP_NONCE_SIZE) < 0)
        return crb_error(CR_ERR_SYSTEM, "service_ready: no random nonce");
    peer->challenged = true;
    memcpy(resp->u.hello.server_nonce, peer->nonce, CRP_NONCE_SIZE);
    resp->u.hello.has_server_nonce = true;
    return crb_error(CR_ERR_MASTER_AUTH_REQUIRED,
                     "service_ready: this master requires a shared secret (clients: set "
                     "CRESCENT_MASTER_SECRET); answer the server nonce");
}

void crk_auth_prove(const crk_server_info *info, const crk_peer *peer, const crp_rpc_req *req,
                    crp_rpc_resp *resp)
{
    if (info->secret == NULL || info->secret_len == 0 || peer == NULL || !peer->authenticated ||
        req->op != CRP_RPC_SERVICE_READY || !req->u.hello.has_mac)
        return;
    crk_auth_mac(info->secret, info->secret_len, CRK_AUTH_SERVER_LABEL, req->u.hello.client_nonce,
                 peer->nonce, resp->u.hello.mac);
    resp->u.hello.has_mac = true;
}
