/*
 * fuzz_hello_ack.c - libFuzzer target for crp_hello_ack_decode.
 *
 * Decode arbitrary bytes; a success must survive encode -> decode with the
 * same fields and re-encode to the same bytes; a failure must leave the
 * output untouched (see fuzz_common.h).
 */
#include "fuzz_common.h"

static void check_equal(const crp_hello_ack *a, const crp_hello_ack *b)
{
    FUZZ_CHECK(a->version == b->version);
    FUZZ_CHECK(a->caps == b->caps);
    FUZZ_CHECK(a->name != NULL && fuzz_str_eq(a->name, b->name));
    FUZZ_CHECK(strlen(a->name) <= CRP_MAX_NAME);
    FUZZ_CHECK(a->instance == b->instance);
    FUZZ_CHECK(a->has_mac == b->has_mac);
    FUZZ_CHECK(!a->has_mac || memcmp(a->mac, b->mac, CRP_MAC_SIZE) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    crp_hello_ack first, second;
    crp_buf enc1 = {0}, enc2 = {0};

    memset(&first, FUZZ_SENTINEL, sizeof(first));
    int rc = crp_hello_ack_decode(data, size, &first);
    if (rc != 0) {
        fuzz_check_failure(rc, &first, sizeof(first));
        return 0;
    }
    FUZZ_CHECK(crp_hello_ack_encode(&first, &enc1) == 0);
    memset(&second, 0, sizeof(second));
    FUZZ_CHECK(crp_hello_ack_decode(enc1.data, enc1.len, &second) == 0);
    check_equal(&first, &second);
    FUZZ_CHECK(crp_hello_ack_encode(&second, &enc2) == 0);
    fuzz_check_same_bytes(&enc1, &enc2);
    crp_hello_ack_clear(&first);
    crp_hello_ack_clear(&second);
    crp_buf_free(&enc1);
    crp_buf_free(&enc2);
    return 0;
}
