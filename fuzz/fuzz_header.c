/*
 * fuzz_header.c - libFuzzer target for crp_header_decode.
 *
 * Uses the first CRP_HEADER_SIZE bytes of the input. A failure must be
 * CR_ERR_VERSION_MISMATCH exactly when the magic is right and the version is
 * not ours (CR_ERR_MALFORMED_FRAME otherwise) and must leave the output
 * untouched. A success must re-encode to the very same 32 bytes, since every
 * field of a valid header is carried verbatim, and decode again to the same
 * fields.
 */
#include "fuzz_common.h"
#include "proto/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    crp_header first, second;
    uint8_t wire[CRP_HEADER_SIZE];

    if (size < CRP_HEADER_SIZE)
        return 0;
    memset(&first, FUZZ_SENTINEL, sizeof(first));
    int rc = crp_header_decode(data, &first);
    if (rc != 0) {
        int magic_ok = data[0] == 'C' && data[1] == 'R' && data[2] == 'S' && data[3] == 'C';
        int want =
            magic_ok && data[4] != CRP_VERSION ? CR_ERR_VERSION_MISMATCH : CR_ERR_MALFORMED_FRAME;
        FUZZ_CHECK(rc == want);
        FUZZ_CHECK(fuzz_untouched(&first, sizeof(first)));
        return 0;
    }
    FUZZ_CHECK(first.version == CRP_VERSION);
    FUZZ_CHECK(first.type >= CRP_CHALLENGE && first.type < CRP_TYPE_END);
    FUZZ_CHECK(first.flags == 0);
    FUZZ_CHECK(first.body_len <= CRP_MAX_BODY);
    FUZZ_CHECK(first.data_len <= CRP_MAX_DATA);
    FUZZ_CHECK(first.data_len == 0 || first.type == CRP_READ_RESP || first.type == CRP_WRITE_REQ);
    FUZZ_CHECK(strcmp(crp_type_name(first.type), "?") != 0);

    crp_header_encode(&first, wire);
    FUZZ_CHECK(memcmp(wire, data, CRP_HEADER_SIZE) == 0);
    FUZZ_CHECK(crp_header_decode(wire, &second) == 0);
    FUZZ_CHECK(second.version == first.version && second.type == first.type);
    FUZZ_CHECK(second.flags == first.flags && second.body_len == first.body_len);
    FUZZ_CHECK(second.status == first.status && second.request_id == first.request_id);
    FUZZ_CHECK(second.data_len == first.data_len);
    return 0;
}
