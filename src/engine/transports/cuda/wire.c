/*
 * wire.c - the cuda transport's bytes on the wire: the per-buffer blob in
 * our descriptor and the IPC service's request/reply datagrams. Fixed
 * little-endian layouts; every decoder checks the exact length and the
 * values it hands on (fuzz/cuda_wire_fuzz.c).
 */
#include <string.h>

#include "base/error.h"
#include "engine/transports/cuda/cuda.h"

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void cuda_blob_encode(const cuda_blob *b, uint8_t out[CUDA_BLOB_SIZE])
{
    out[0] = 1;
    out[1] = b->share;
    put_le(out + 2, b->device, 2);
    put_le(out + 4, b->ctl_slot, 4);
    put_le(out + 8, b->ctl_gen, 8);
    memcpy(out + 16, b->uuid, 16);
}

int cuda_blob_decode(const uint8_t *in, size_t len, cuda_blob *out)
{
    if (in == NULL || len != CUDA_BLOB_SIZE || in[0] != 1)
        return crb_error(CR_ERR_MALFORMED_FRAME, "cuda blob of %zu bytes (version %d)", len,
                         in != NULL && len > 0 ? in[0] : -1);
    cuda_blob b = {.share = in[1],
                   .device = (uint16_t)get_le(in + 2, 2),
                   .ctl_slot = (uint32_t)get_le(in + 4, 4),
                   .ctl_gen = get_le(in + 8, 8)};
    if (b.share > CRV_SHARE_VMM_FD || b.ctl_slot >= CRE_CTL_SLOTS)
        return crb_error(CR_ERR_MALFORMED_FRAME, "cuda blob: share %u, slot %u out of range",
                         (unsigned)b.share, (unsigned)b.ctl_slot);
    memcpy(b.uuid, in + 16, 16);
    *out = b;
    return 0;
}

void cuda_req_encode(const cuda_req *m, uint8_t out[CUDA_REQ_SIZE])
{
    out[0] = m->op;
    out[1] = out[2] = out[3] = 0;
    put_le(out + 4, m->addr, 8);
}

int cuda_req_decode(const uint8_t *in, size_t len, cuda_req *out)
{
    if (len != CUDA_REQ_SIZE || (in[0] != CUDA_REQ_CONTROL_PAGE && in[0] != CUDA_REQ_EXPORT) ||
        in[1] || in[2] || in[3])
        return crb_error(CR_ERR_MALFORMED_FRAME, "cuda service request of %zu bytes", len);
    out->op = in[0];
    out->addr = get_le(in + 4, 8);
    return 0;
}

void cuda_reply_encode(const cuda_reply *m, uint8_t out[CUDA_REPLY_SIZE])
{
    put_le(out, (uint32_t)m->status, 4);
    out[4] = m->share;
    put_le(out + 5, m->base, 8);
    put_le(out + 13, m->size, 8);
    memcpy(out + 21, m->handle, CUDA_HANDLE_LEN);
}

int cuda_reply_decode(const uint8_t *in, size_t len, cuda_reply *out)
{
    if (len != CUDA_REPLY_SIZE)
        return crb_error(CR_ERR_MALFORMED_FRAME, "cuda service reply of %zu bytes", len);
    cuda_reply r = {.status = (int32_t)(uint32_t)get_le(in, 4),
                    .share = in[4],
                    .base = get_le(in + 5, 8),
                    .size = get_le(in + 13, 8)};
    memcpy(r.handle, in + 21, CUDA_HANDLE_LEN);
    if (r.status > 0 || r.share > CRV_SHARE_VMM_FD ||
        (r.status == 0 && (r.size == 0 || r.base + r.size < r.base)))
        return crb_error(CR_ERR_MALFORMED_FRAME, "cuda service reply: status %d share %u size %llu",
                         (int)r.status, (unsigned)r.share, (unsigned long long)r.size);
    *out = r;
    return 0;
}
