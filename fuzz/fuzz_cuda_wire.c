/*
 * fuzz_cuda_wire.c - libFuzzer target for the cuda transport's wire
 * decoders (src/engine/transports/cuda/wire.c): the per-buffer descriptor
 * blob a peer sends us, and the IPC service's request and reply datagrams.
 * The first byte picks the decoder; the rest is its input. Failures must
 * leave the output untouched; accepted inputs must re-encode to the same
 * bytes (the layouts are fixed, so decode(encode(x)) == x byte for byte).
 */
#include "engine/transports/cuda/cuda.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *in = data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0: {
        cuda_blob b;
        memset(&b, FUZZ_SENTINEL, sizeof(b));
        int rc = cuda_blob_decode(in, n, &b);
        if (rc != 0) {
            FUZZ_CHECK(rc == CR_ERR_MALFORMED_FRAME && fuzz_untouched(&b, sizeof(b)));
            return 0;
        }
        FUZZ_CHECK(b.share <= CRV_SHARE_VMM_FD && b.ctl_slot < CRE_CTL_SLOTS);
        uint8_t out[CUDA_BLOB_SIZE];
        cuda_blob_encode(&b, out);
        FUZZ_CHECK(n == CUDA_BLOB_SIZE && memcmp(out, in, n) == 0);
        cuda_blob again;
        FUZZ_CHECK(cuda_blob_decode(out, sizeof(out), &again) == 0);
        FUZZ_CHECK(memcmp(&again.uuid, &b.uuid, 16) == 0 && again.ctl_gen == b.ctl_gen);
        return 0;
    }
    case 1: {
        cuda_req r;
        memset(&r, FUZZ_SENTINEL, sizeof(r));
        int rc = cuda_req_decode(in, n, &r);
        if (rc != 0) {
            FUZZ_CHECK(rc == CR_ERR_MALFORMED_FRAME && fuzz_untouched(&r, sizeof(r)));
            return 0;
        }
        uint8_t out[CUDA_REQ_SIZE];
        cuda_req_encode(&r, out);
        FUZZ_CHECK(n == CUDA_REQ_SIZE && memcmp(out, in, n) == 0);
        return 0;
    }
    default: {
        cuda_reply r;
        memset(&r, FUZZ_SENTINEL, sizeof(r));
        int rc = cuda_reply_decode(in, n, &r);
        if (rc != 0) {
            FUZZ_CHECK(rc == CR_ERR_MALFORMED_FRAME && fuzz_untouched(&r, sizeof(r)));
            return 0;
        }
        FUZZ_CHECK(r.status <= 0 && r.share <= CRV_SHARE_VMM_FD);
        FUZZ_CHECK(r.status != 0 || (r.size > 0 && r.base + r.size >= r.base));
        uint8_t out[CUDA_REPLY_SIZE];
        cuda_reply_encode(&r, out);
        FUZZ_CHECK(n == CUDA_REPLY_SIZE && memcmp(out, in, n) == 0);
        return 0;
    }
    }
}
