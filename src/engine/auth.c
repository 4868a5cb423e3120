/*
 * auth.c - shared-secret proof for connection handshakes.
 *
 * The server opens every connection with a random nonce (CHALLENGE). The
 * client answers with HMAC-SHA256(secret, "client" | server nonce | client
 * nonce) in HELLO; the server proves itself with HMAC-SHA256(secret,
 * "server" | client nonce | server nonce) in HELLO_ACK. Fresh nonces on both
 * sides make a recorded exchange useless for a later connection.
 */
#include <string.h>

#include "base/error.h"
#include "engine/internal.h"
#include "proto/mac.h"

void cre_auth_mac(const cr_engine *e, const char *label, const uint8_t a[CRP_NONCE_SIZE],
                  const uint8_t b[CRP_NONCE_SIZE], uint8_t mac[CRP_MAC_SIZE])
{
    crp_proof(e->secret, e->secret_len, label, a, CRP_NONCE_SIZE, b, CRP_NONCE_SIZE, mac);
}

bool cre_auth_check(const cr_engine *e, const char *label, const uint8_t a[CRP_NONCE_SIZE],
                    const uint8_t b[CRP_NONCE_SIZE], const uint8_t mac[CRP_MAC_SIZE])
{
    uint8_t want[CRP_MAC_SIZE];
    cre_auth_mac(e, label, a, b, want);
    return crp_proof_equal(want, mac);
}

int cre_hello_build(cr_engine *e, uint8_t role, const uint8_t server_nonce[CRP_NONCE_SIZE],
                    uint8_t client_nonce[CRP_NONCE_SIZE], crp_buf *frame)
{
    crp_hello hello = {
        .version = CRP_VERSION, .role = role, .name = e->segment_name, .instance = e->instance};
    crb_random_bytes(client_nonce, CRP_NONCE_SIZE);
    memcpy(hello.client_nonce, client_nonce, CRP_NONCE_SIZE);
    if (e->secret != NULL) {
        hello.has_mac = true;
        cre_auth_mac(e, "client", server_nonce, client_nonce, hello.mac);
    }
    crp_buf body = {0};
    int rc = crp_hello_encode(&hello, &body);
    if (rc == 0)
        rc = crp_frame_append(frame, CRP_HELLO, 0, 0, 0, body.data, body.len);
    crp_buf_free(&body);
    return rc;
}

int cre_hello_ack_check(cr_engine *e, const char *peer, const uint8_t *body, size_t len,
                        const uint8_t server_nonce[CRP_NONCE_SIZE],
                        const uint8_t client_nonce[CRP_NONCE_SIZE], uint64_t *instance)
{
    crp_hello_ack ack = {0};
    int rc = crp_hello_ack_decode(body, len, &ack);
    if (rc < 0)
        return crb_error(rc, "HELLO_ACK from %s: %s", peer, cr_last_error_message());
    if (ack.version != CRP_VERSION)
        rc = crb_error(CR_ERR_VERSION_MISMATCH, "%s speaks protocol %u, we speak %u", peer,
                       ack.version, CRP_VERSION);
    else if (e->secret != NULL &&
             (!ack.has_mac || !cre_auth_check(e, "server", client_nonce, server_nonce, ack.mac)))
        rc = crb_error(CR_ERR_AUTH_FAILED, "%s did not prove the shared secret", peer);
    if (rc == 0)
        *instance = ack.instance;
    crp_hello_ack_clear(&ack);
    return rc;
}
