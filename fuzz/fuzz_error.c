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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    crp_error first, second;
    crp_buf enc1 = {0}, enc2 = {0};

    memset(&first, FUZZ_SENTINEL, sizeof(first));
    int rc = crp_error_decode(data, size, &first);
    if (rc != 0) {
        fuzz_check_failure(rc, &first, sizeof(first));
        return 0;
    }
    FUZZ_CHECK(crp_error_encode(&first, &enc1) == 0);
    memset(&second, 0, sizeof(second));
    FUZZ_CHECK(crp_error_decode(enc1.data, enc1.len, &second) == 0);
    check_equal(&first, &second);
    FUZZ_CHECK(crp_error_encode(&second, &enc2) == 0);
    fuzz_check_same_bytes(&enc1, &enc2);
    crp_error_clear(&first);
    crp_error_clear(&second);
    crp_buf_free(&enc1);
    crp_buf_free(&enc2);
    return 0;
}
