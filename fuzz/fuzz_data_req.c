/*
 * fuzz_data_req.c - libFuzzer target for crp_data_req_decode.
 *
 * Besides the round trip, the hand-written hot-path decoder is checked
 * against msgpack-c itself: both must agree on whether the input is exactly
 * one two-element array of non-negative integers, and on its values. The
 * reference is only consulted for inputs where msgpack-c cannot be asked to
 * pre-allocate a huge array (no 16/32-bit container header anywhere but a
 * small one in front), since msgpack-c sizes arrays from their declared
 * count before reading them.
 */
#include <msgpack.h>

#include "fuzz_common.h"

static int reference_safe(const uint8_t *data, size_t size)
{
    if (size == 0 || size > 64)
        return 0;
    size_t from = 0;
    if (data[0] == 0xdc || data[0] == 0xdd) {
        size_t n = data[0] == 0xdc ? 2 : 4;
        if (size < 1 + n)
            return 0;
        uint64_t count = 0;
        for (size_t i = 0; i < n; i++)
            count = (count << 8) | data[1 + i];
        if (count > 16)
            return 0;
        from = 1 + n;
    }
    for (size_t i = from; i < size; i++)
        if (data[i] >= 0xdc && data[i] <= 0xdf)
            return 0;
    return 1;
}

/* msgpack-c's verdict: 1 and the values if data is [uint, uint], else 0. */
static int reference_decode(const uint8_t *data, size_t size, crp_data_req *out)
{
    msgpack_unpacked u;
    size_t off = 0;
    int ok = 0;

    msgpack_unpacked_init(&u);
    msgpack_unpack_return r = msgpack_unpack_next(&u, (const char *)data, size, &off);
    if (r == MSGPACK_UNPACK_SUCCESS && off == size && u.data.type == MSGPACK_OBJECT_ARRAY &&
        u.data.via.array.size == 2 &&
        u.data.via.array.ptr[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
        u.data.via.array.ptr[1].type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        out->addr = u.data.via.array.ptr[0].via.u64;
        out->length = u.data.via.array.ptr[1].via.u64;
        ok = 1;
    }
    msgpack_unpacked_destroy(&u);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    crp_data_req first, second, ref;
    crp_buf enc1 = {0}, enc2 = {0};

    memset(&first, FUZZ_SENTINEL, sizeof(first));
    int rc = crp_data_req_decode(data, size, &first);
    if (reference_safe(data, size)) {
        int ref_ok = reference_decode(data, size, &ref);
        FUZZ_CHECK(ref_ok == (rc == 0));
        FUZZ_CHECK(!ref_ok || (ref.addr == first.addr && ref.length == first.length));
    }
    if (rc != 0) {
        fuzz_check_failure(rc, &first, sizeof(first));
        return 0;
    }
    FUZZ_CHECK(crp_data_req_encode(&first, &enc1) == 0);
    FUZZ_CHECK(crp_data_req_decode(enc1.data, enc1.len, &second) == 0);
    FUZZ_CHECK(second.addr == first.addr && second.length == first.length);
    FUZZ_CHECK(crp_data_req_encode(&second, &enc2) == 0);
    fuzz_check_same_bytes(&enc1, &enc2);
    crp_buf_free(&enc1);
    crp_buf_free(&enc2);
    return 0;
}
