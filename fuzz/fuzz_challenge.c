/*
 * fuzz_challenge.c - libFuzzer target for crp_challenge_decode.
 *
 * Decode arbitrary bytes; a success must survive encode -> decode with the
 * same fields and re-encode to the same bytes; a failure must leave the
 * output untouched (see fuzz_common.h).
 */
#include "fuzz_common.h"

static void check_equal(const crp_challenge *a, const crp_challenge *b)
{
    FUZZ_CHECK(memcmp(a->nonce, b->nonce, CRP_NONCE_SIZE) == 0);
}

FUZZ_ROUNDTRIP_TARGET(crp_challenge, crp_challenge_decode, crp_challenge_encode, FUZZ_NO_CLEAR,
                      FUZZ_NO_CHECK, check_equal, SIZE_MAX, 0)
