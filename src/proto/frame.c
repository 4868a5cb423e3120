/*
 * frame.c - the 32-byte frame header.
 *
 * Design: the header is written and read one byte at a time with explicit
 * little-endian shifts, never by copying a struct, so the wire layout does not
 * depend on the host's endianness, padding or alignment. Decoding checks the
 * magic first and the version second: once the version differs nothing else
 * in the header can be interpreted, so a newer peer always gets
 * CR_ERR_VERSION_MISMATCH rather than a complaint about a type or flag that
 * its version may legitimately use. The output is written only on success.
 */
#include "proto/frame.h"

#include "base/error.h"

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Frame types whose header may announce raw payload bytes after the body. */
static int type_carries_data(uint8_t type)
{
    return type == CRP_READ_RESP || type == CRP_WRITE_REQ;
}

void crp_header_encode(const crp_header *h, uint8_t out[CRP_HEADER_SIZE])
{
    put_u32(out + 0, CRP_MAGIC);
    out[4] = h->version;
    out[5] = h->type;
    put_u16(out + 6, h->flags);
    put_u32(out + 8, h->body_len);
    put_u32(out + 12, (uint32_t)h->status);
    put_u64(out + 16, h->request_id);
    put_u64(out + 24, h->data_len);
}

int crp_header_decode(const uint8_t in[CRP_HEADER_SIZE], crp_header *out)
{
    crp_header h;
    uint32_t magic = get_u32(in + 0);
    if (magic != CRP_MAGIC)
        return crb_error(CR_ERR_MALFORMED_FRAME, "frame header: bad magic 0x%08x (want 0x%08x)",
                         (unsigned)magic, (unsigned)CRP_MAGIC);
    h.version = in[4];
    if (h.version != CRP_VERSION)
        return crb_error(CR_ERR_VERSION_MISMATCH, "frame header: framing version %u (speak %u)",
                         (unsigned)h.version, (unsigned)CRP_VERSION);
    h.type = in[5];
    if (h.type < CRP_CHALLENGE || h.type >= CRP_TYPE_END)
        return crb_error(CR_ERR_MALFORMED_FRAME, "frame header: unknown type %u", (unsigned)h.type);
    h.flags = get_u16(in + 6);
    if (h.flags != 0)
        return crb_error(CR_ERR_MALFORMED_FRAME, "frame header: %s has reserved flags 0x%04x",
                         crp_type_name(h.type), (unsigned)h.flags);
    h.body_len = get_u32(in + 8);
    if (h.body_len > CRP_MAX_BODY)
        return crb_error(CR_ERR_MALFORMED_FRAME, "frame header: %s body_len %u exceeds %u",
                         crp_type_name(h.type), (unsigned)h.body_len, (unsigned)CRP_MAX_BODY);
    h.status = (int32_t)get_u32(in + 12);
    h.request_id = get_u64(in + 16);
    h.data_len = get_u64(in + 24);
    if (h.data_len > CRP_MAX_DATA)
        return crb_error(CR_ERR_MALFORMED_FRAME, "frame header: %s data_len %llu exceeds %llu",
                         crp_type_name(h.type), (unsigned long long)h.data_len,
                         (unsigned long long)CRP_MAX_DATA);
    if (h.data_len != 0 && !type_carries_data(h.type))
        return crb_error(CR_ERR_MALFORMED_FRAME,
                         "frame header: %s carries no data but data_len is %llu",
                         crp_type_name(h.type), (unsigned long long)h.data_len);
    *out = h;
    return 0;
}

const char *crp_type_name(int type)
{
    switch (type) {
    case CRP_CHALLENGE:
        return "CHALLENGE";
    case CRP_HELLO:
        return "HELLO";
    case CRP_HELLO_ACK:
        return "HELLO_ACK";
    case CRP_DESC_GET:
        return "DESC_GET";
    case CRP_DESC_REPLY:
        return "DESC_REPLY";
    case CRP_NOTIFY:
        return "NOTIFY";
    case CRP_NOTIFY_ACK:
        return "NOTIFY_ACK";
    case CRP_PROBE:
        return "PROBE";
    case CRP_PROBE_ACK:
        return "PROBE_ACK";
    case CRP_READ_REQ:
        return "READ_REQ";
    case CRP_READ_RESP:
        return "READ_RESP";
    case CRP_WRITE_REQ:
        return "WRITE_REQ";
    case CRP_WRITE_ACK:
        return "WRITE_ACK";
    case CRP_ERROR:
        return "ERROR";
    case CRP_RPC_REQ:
        return "RPC_REQ";
    case CRP_RPC_RESP:
        return "RPC_RESP";
    case CRP_THIN_REQ:
        return "THIN_REQ";
    case CRP_THIN_RESP:
        return "THIN_RESP";
    case CRP_REPL_SUBSCRIBE:
        return "REPL_SUBSCRIBE";
    case CRP_REPL_DATA:
        return "REPL_DATA";
    case CRP_REPL_ACK:
        return "REPL_ACK";
    default:
        return "?";
    }
}
