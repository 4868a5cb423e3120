/*
 * mac.h - the one shared-secret proof every crescent handshake uses:
 * HMAC-SHA256(secret, label | a | b), where label names the exchange and
 * the side ("client", "shm", "crescent-master-server", ...) and a, b are
 * the nonces of the exchange (b may be empty). docs/WIRE.md gives each
 * handshake's label and nonces.
 *
 * No state; any thread.
 */
#ifndef CRESCENT_PROTO_MAC_H
#define CRESCENT_PROTO_MAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CRP_PROOF_SIZE      32 /* HMAC-SHA256 */
#define CRP_PROOF_LABEL_MAX 32 /* longer labels are cut to this many bytes */
#define CRP_PROOF_NONCE_MAX 32 /* each nonce, at most */

/**
 * mac = HMAC-SHA256(secret, label | a[0..a_len) | b[0..b_len)). The
 * secret is borrowed; a_len and b_len are at most CRP_PROOF_NONCE_MAX
 * (longer ones are cut).
 */
void crp_proof(const void *secret, size_t secret_len, const char *label, const uint8_t *a,
               size_t a_len, const uint8_t *b, size_t b_len, uint8_t mac[CRP_PROOF_SIZE]);

/** Constant-time comparison of two proofs. */
bool crp_proof_equal(const uint8_t x[CRP_PROOF_SIZE], const uint8_t y[CRP_PROOF_SIZE]);

#endif
