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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    crp_notify first, second;
    crp_buf enc1 = {0}, enc2 = {0};

    memset(&first, FUZZ_SENTINEL, sizeof(first));
    int rc = crp_notify_decode(data, size, &first);
    if (rc != 0) {
        fuzz_check_failure(rc, &first, sizeof(first));
        return 0;
    }
    FUZZ_CHECK(crp_notify_encode(&first, &enc1) == 0);
    memset(&second, 0, sizeof(second));
    FUZZ_CHECK(crp_notify_decode(enc1.data, enc1.len, &second) == 0);
    check_equal(&first, &second);
    FUZZ_CHECK(crp_notify_encode(&second, &enc2) == 0);
    fuzz_check_same_bytes(&enc1, &enc2);
    crp_notify_clear(&first);
    crp_notify_clear(&second);
    crp_buf_free(&enc1);
    crp_buf_free(&enc2);
    return 0;
}
