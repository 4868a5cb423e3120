/*
 * mac.c - HMAC-SHA256 proofs of a shared secret (mac.h), through OpenSSL's
 * libcrypto.
 */
#include "proto/mac.h"

#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

void crp_proof(const void *secret, size_t secret_len, const char *label, const uint8_t *a,
               size_t a_len, const uint8_t *b, size_t b_len, uint8_t mac[CRP_PROOF_SIZE])
{
    uint8_t msg[CRP_PROOF_LABEL_MAX + 2 * CRP_PROOF_NONCE_MAX];
    size_t ll = strlen(label);
    if (ll > CRP_PROOF_LABEL_MAX)
        ll = CRP_PROOF_LABEL_MAX;
    if (a_len > CRP_PROOF_NONCE_MAX)
        a_len = CRP_PROOF_NONCE_MAX;
    if (b_len > CRP_PROOF_NONCE_MAX)
        b_len = CRP_PROOF_NONCE_MAX;
    memcpy(msg, label, ll);
    if (a_len > 0)
        memcpy(msg + ll, a, a_len);
    if (b_len > 0)
        memcpy(msg + ll + a_len, b, b_len);
    unsigned int len = CRP_PROOF_SIZE;
    HMAC(EVP_sha256(), secret, (int)secret_len, msg, ll + a_len + b_len, mac, &len);
}

bool crp_proof_equal(const uint8_t x[CRP_PROOF_SIZE], const uint8_t y[CRP_PROOF_SIZE])
{
    return CRYPTO_memcmp(x, y, CRP_PROOF_SIZE) == 0;
}
