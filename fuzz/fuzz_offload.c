/*
 * fuzz_offload.c - libFuzzer target for crp_off_decode (the disk tier's
 * OFFLOAD_HEARTBEAT body, proto/offload.h).
 *
 * A failure must be a decode status and leave the output untouched; a
 * success must satisfy the bounds the master and the holder rely on, and
 * re-encode, decode and re-encode to the same bytes.
 */
#include "fuzz_common.h"
#include "proto/offload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    crp_off_msg first, second;
    crp_buf enc1 = {0}, enc2 = {0};
    memset(&first, FUZZ_SENTINEL, sizeof(first));
    int rc = crp_off_decode(data, size, &first);
    if (rc != 0) {
        FUZZ_CHECK(rc == CR_ERR_MALFORMED_FRAME);
        FUZZ_CHECK(fuzz_untouched(&first, sizeof(first)));
        FUZZ_CHECK(cr_last_error_message()[0] != '\0');
        return 0;
    }
    FUZZ_CHECK(first.segment != NULL && strlen(first.segment) <= CRP_MAX_NAME);
    FUZZ_CHECK(first.n_stats <= CRP_OFF_MAX_STATS && first.n_items <= CRP_OFF_MAX_ITEMS);
    FUZZ_CHECK((first.n_items == 0) == (first.items == NULL));
    for (size_t i = 0; i < first.n_items; i++) {
        const crp_off_item *it = &first.items[i];
        FUZZ_CHECK(it->kind >= CRP_OFF_OFFLOAD && it->kind <= CRP_OFF_UNSTAGE);
        FUZZ_CHECK(it->key != NULL && it->key[0] != '\0' && strlen(it->key) <= CRP_OFF_MAX_KEY);
        FUZZ_CHECK(it->status <= 0);
    }
    FUZZ_CHECK(crp_off_encode(&first, &enc1) == 0);
    memset(&second, 0, sizeof(second));
    FUZZ_CHECK(crp_off_decode(enc1.data, enc1.len, &second) == 0);
    FUZZ_CHECK(crp_off_encode(&second, &enc2) == 0);
    fuzz_check_same_bytes(&enc1, &enc2);
    crp_off_clear(&first);
    crp_off_clear(&second);
    crp_buf_free(&enc1);
    crp_buf_free(&enc2);
    return 0;
}
