/*
 * auth.c - shared-secret proof for connection handshakes.
 *
 * The server opens every connection with a random nonce (CHALLENGE). The
 * client answers with HMAC-SHA256(secret, "client" | server nonce | client
 * nonce) in HELLO; the server proves itself with HMAC-SHA256(secret,
 * "server" | client nonce | server nonce) in HELLO_ACK. Fresh nonces on both
 * sides make a recorded exchange useless for a later connection.
 */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>

#include "engine/internal.h"

void cre_auth_mac(const cr_engine *e, const char *label, const uint8_t a[CRP_NONCE_SIZE],
                  const uint8_t b[CRP_NONCE_SIZE], uint8_t mac[CRP_MAC_SIZE])
{
    uint8_t msg[16 + 2 * CRP_NONCE_SIZE];
    size_t ll = strlen(label);
    memcpy(msg, label, ll);
    memcpy(msg + ll, a, CRP_NONCE_SIZE);
    memcpy(msg + ll + CRP_NONCE_SIZE, b, CRP_NONCE_SIZE);
    unsigned int len = CRP_MAC_SIZE;
    HMAC(EVP_sha256(), e->secret, (int)e->secret_len, msg, ll + 2 * CRP_NONCE_SIZE, mac, &len);
}

bool cre_auth_check(const cr_engine *e, const char *label, const uint8_t a[CRP_NONCE_SIZE],
                    const uint8_t b[CRP_NONCE_SIZE], const uint8_t mac[CRP_MAC_SIZE])
{
    uint8_t want[CRP_MAC_SIZE];
    cre_auth_mac(e, label, a, b, want);
    return CRYPTO_memcmp(want, mac, CRP_MAC_SIZE) == 0;
}
