/*
 * fuzz_error.c - libFuzzer target for crp_error_decode.
 *
 * Decode arbitrary bytes; a success must survive encode -> decode with the
 * same fields and re-encode to the same bytes; a failure must leave the
 * output untouched (see fuzz_common.h).
 */
#include "fuzz_common.h"

static void check_equal(const crp_error *a, const crp_error *b)
{
    FUZZ_CHECK(a->message != NULL && fuzz_str_eq(a->message, b->message));
    FUZZ_CHECK(strlen(a->message) <= CRP_MAX_ERROR_TEXT);
}

FUZZ_ROUNDTRIP_TARGET(crp_error, crp_error_decode, crp_error_encode, crp_error_clear, FUZZ_NO_CHECK,
                      check_equal, SIZE_MAX, 0)
