/*
 * frame.h - the one framing used by every crescent connection.
 *
 * A frame is a fixed 32-byte header, a msgpack-encoded body of body_len bytes
 * (<= CRP_MAX_BODY) and, for data frames only, data_len raw payload bytes
 * that the receiver places directly in their destination.
 *
 *   0  u32 magic "CRSC" (0x43 0x52 0x53 0x43 on the wire)
 *   4  u8  framing version (CRP_VERSION)
 *   5  u8  type (crp_type)
 *   6  u16 flags (0; reserved)
 *   8  u32 body_len
 *  12  i32 status (cr_status; 0 in requests)
 *  16  u64 request_id (echoed in the reply)
 *  24  u64 data_len (non-zero only for READ_RESP and WRITE_REQ)
 *
 * All integers little-endian. The header layout never changes; a newer
 * framing version is answered with an ERROR frame of status
 * CR_ERR_VERSION_MISMATCH in version 1 framing.
 */
#ifndef CRESCENT_PROTO_FRAME_H
#define CRESCENT_PROTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define CRP_MAGIC       0x43535243u /* bytes "CRSC" read as little-endian u32 */
#define CRP_VERSION     1
#define CRP_HEADER_SIZE 32
#define CRP_MAX_BODY    (1u << 20)
#define CRP_MAX_DATA    (256ull << 20)

typedef enum crp_type {
    CRP_CHALLENGE = 1,       /* server → client, first frame: nonce */
    CRP_HELLO = 2,           /* client → server: version, role, name, auth */
    CRP_HELLO_ACK = 3,       /* server → client: version, name, instance, auth */
    CRP_DESC_GET = 4,        /* empty body */
    CRP_DESC_REPLY = 5,      /* body: descriptor */
    CRP_NOTIFY = 6,          /* body: notify */
    CRP_NOTIFY_ACK = 7,      /* empty body */
    CRP_PROBE = 8,           /* empty body */
    CRP_PROBE_ACK = 9,       /* empty body */
    CRP_READ_REQ = 10,       /* body: data request */
    CRP_READ_RESP = 11,      /* empty body, data_len payload bytes (if status 0) */
    CRP_WRITE_REQ = 12,      /* body: data request, data_len payload bytes */
    CRP_WRITE_ACK = 13,      /* empty body; status says whether it was applied */
    CRP_ERROR = 14,          /* body: error message; status is the code */
    CRP_RPC_REQ = 15,        /* body: master RPC request (proto/rpc.h) */
    CRP_RPC_RESP = 16,       /* body: master RPC reply (proto/rpc.h); status mirrors its "st" */
    CRP_THIN_REQ = 17,       /* body: thin client -> crescent-client request (proto/thin.h) */
    CRP_THIN_RESP = 18,      /* body: crescent-client reply (proto/thin.h); status mirrors "st" */
    CRP_REPL_SUBSCRIBE = 19, /* standby -> HA leader: body "term applied_seq" (master/ha_repl.c) */
    CRP_REPL_DATA = 20,      /* HA leader -> standby: body: change entries (master/ha_codec.h) */
    CRP_REPL_ACK = 21,       /* standby -> HA leader: request_id = applied sequence number */
    CRP_TYPE_END
} crp_type;

typedef struct crp_header {
    uint8_t version;
    uint8_t type;
    uint16_t flags;
    uint32_t body_len;
    int32_t status;
    uint64_t request_id;
    uint64_t data_len;
} crp_header;

/** Write h into out[0..CRP_HEADER_SIZE). Never fails. */
void crp_header_encode(const crp_header *h, uint8_t out[CRP_HEADER_SIZE]);

/**
 * Decode and validate a header: magic, version (CR_ERR_VERSION_MISMATCH),
 * type in range, flags 0, body_len <= CRP_MAX_BODY, data_len <= CRP_MAX_DATA
 * and non-zero only for types that carry data. Returns 0 and fills *out, or
 * CR_ERR_MALFORMED_FRAME / CR_ERR_VERSION_MISMATCH (via crb_error).
 */
int crp_header_decode(const uint8_t in[CRP_HEADER_SIZE], crp_header *out);

/** Short name of a frame type for logs ("HELLO"); "?" if unknown. */
const char *crp_type_name(int type);

#endif
