/*
 * fuzz_notify.c - libFuzzer target for crp_notify_decode.
 *
 * Decode arbitrary bytes; a success must survive encode -> decode with the
 * same fields and re-encode to the same bytes; a failure must leave the
 * output untouched (see fuzz_common.h).
 */
#include "fuzz_common.h"

static void check_equal(const crp_notify *a, const crp_notify *b)
{
    FUZZ_CHECK(a->from != NULL && fuzz_str_eq(a->from, b->from));
    FUZZ_CHECK(a->length == b->length);
    FUZZ_CHECK(a->length <= CRP_MAX_NOTIFY);
    FUZZ_CHECK(a->message != NULL && b->message != NULL);
    FUZZ_CHECK(a->message[a->length] == 0);
    FUZZ_CHECK(a->length == 0 || memcmp(a->message, b->message, a->length) == 0);
}

FUZZ_ROUNDTRIP_TARGET(crp_notify, crp_notify_decode, crp_notify_encode, crp_notify_clear,
                      FUZZ_NO_CHECK, check_equal, SIZE_MAX, 0)
