/*
 * fuzz_hello.c - libFuzzer target for crp_hello_decode.
 *
 * Decode arbitrary bytes; a success must survive encode -> decode with the
 * same fields and re-encode to the same bytes; a failure must leave the
 * output untouched (see fuzz_common.h).
 */
#include "fuzz_common.h"

static void check_equal(const crp_hello *a, const crp_hello *b)
{
    FUZZ_CHECK(a->version == b->version);
    FUZZ_CHECK(a->caps == b->caps);
    FUZZ_CHECK(a->role == b->role);
    FUZZ_CHECK(a->name != NULL && fuzz_str_eq(a->name, b->name));
    FUZZ_CHECK(strlen(a->name) <= CRP_MAX_NAME);
    FUZZ_CHECK(a->instance == b->instance);
    FUZZ_CHECK(memcmp(a->client_nonce, b->client_nonce, CRP_NONCE_SIZE) == 0);
    FUZZ_CHECK(a->has_mac == b->has_mac);
    FUZZ_CHECK(!a->has_mac || memcmp(a->mac, b->mac, CRP_MAC_SIZE) == 0);
}

FUZZ_ROUNDTRIP_TARGET(crp_hello, crp_hello_decode, crp_hello_encode, crp_hello_clear, FUZZ_NO_CHECK,
                      check_equal, SIZE_MAX, 0)
