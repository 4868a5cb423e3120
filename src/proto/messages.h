/*
 * messages.h - frame bodies, encoded with msgpack.
 *
 * Every body is a msgpack map with short string keys, so fields can be added
 * without breaking older peers: decoders ignore keys they do not know and
 * fail with CR_ERR_MALFORMED_FRAME when a required key is missing or has the
 * wrong type, or a length bound is exceeded. One encoder and one decoder per
 * message type.
 *
 * Encoders append to a crp_buf (growable byte buffer) and return 0,
 * CR_ERR_NO_MEMORY, or CR_INVALID_PARAMS for a value the decoder
 * would reject (so a sender fails locally rather than at the peer). Decoders take (data, len), fill
 * a caller-provided struct and return 0, or a negative status with nothing allocated. Decoded
 * strings and arrays are heap copies owned by the struct; free them with the matching *_clear
 * function (safe on a zeroed struct).
 */
#ifndef CRESCENT_PROTO_MESSAGES_H
#define CRESCENT_PROTO_MESSAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds enforced by decoders. */
#define CRP_MAX_NAME       256 /* segment names, host ids, transports */
#define CRP_MAX_ENDPOINTS  16
#define CRP_MAX_BUFFERS    32768 /* 32768 entries of <= 30 bytes fit CRP_MAX_BODY */
#define CRP_NONCE_SIZE     16
#define CRP_MAC_SIZE       32
#define CRP_MAX_NOTIFY     4096
#define CRP_MAX_ERROR_TEXT 512

/** A growable output buffer. Zero-initialise; free with crp_buf_free. */
typedef struct crp_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} crp_buf;

void crp_buf_free(crp_buf *b);
/** Set len to 0, keep the allocation. */
void crp_buf_reset(crp_buf *b);
/** Append n bytes of p; CR_ERR_NO_MEMORY (b unchanged) if it cannot grow. */
int crp_buf_append(crp_buf *b, const void *p, size_t n);

/* --- CHALLENGE: {"n": bin[16]} ---------------------------------------- */
typedef struct crp_challenge {
    uint8_t nonce[CRP_NONCE_SIZE];
} crp_challenge;
int crp_challenge_encode(const crp_challenge *m, crp_buf *out);
int crp_challenge_decode(const void *data, size_t len, crp_challenge *out);

/* --- HELLO ---------------------------------------------------------------
 * {"v": u32 protocol version, "caps": u32, "role": u8 (crp_role),
 *  "name": str sender segment name, "inst": u64 sender instance id,
 *  "cn": bin[16] client nonce, "mac": bin[32] (optional)}              */
typedef enum crp_role { CRP_ROLE_CONTROL = 0, CRP_ROLE_DATA = 1 } crp_role;
typedef struct crp_hello {
    uint32_t version;
    uint32_t caps;
    uint8_t role;
    char *name;
    uint64_t instance;
    uint8_t client_nonce[CRP_NONCE_SIZE];
    bool has_mac;
    uint8_t mac[CRP_MAC_SIZE];
} crp_hello;
int crp_hello_encode(const crp_hello *m, crp_buf *out);
int crp_hello_decode(const void *data, size_t len, crp_hello *out);
void crp_hello_clear(crp_hello *m);

/* --- HELLO_ACK -----------------------------------------------------------
 * {"v": u32, "caps": u32, "name": str, "inst": u64, "mac": bin[32] opt}  */
typedef struct crp_hello_ack {
    uint32_t version;
    uint32_t caps;
    char *name;
    uint64_t instance;
    bool has_mac;
    uint8_t mac[CRP_MAC_SIZE];
} crp_hello_ack;
int crp_hello_ack_encode(const crp_hello_ack *m, crp_buf *out);
int crp_hello_ack_decode(const void *data, size_t len, crp_hello_ack *out);
void crp_hello_ack_clear(crp_hello_ack *m);

/* --- DESCRIPTOR ----------------------------------------------------------
 * {"name": str, "host": str host identity, "inst": u64 engine instance,
 *  "ver": u64 descriptor version (bumped on every (un)registration),
 *  "eps": [{"t": str transport, "a": bin endpoint (<= CRP_MAX_ENDPOINT)}],
 *  "bufs": [{"a": u64 addr, "l": u64 length, "k": u8 kind, "d": i32 device,
 *            "r": bool remote accessible,
 *            "x": {str transport: bin blob (<= CRP_MAX_BLOB)} (optional)}]}
 * Endpoints and per-buffer blobs are opaque to everyone but the transport
 * that wrote them (a tcp address, an fd-service name, a UCX worker address,
 * a packed rkey, a shared-region handle); transports unpack them on first
 * use. Kinds are carried as numbers and decoded whatever their value;
 * deciding what a kind means is the engine's job, not the decoder's.     */
#define CRP_MAX_ENDPOINT       4096 /* bytes of one endpoint address */
#define CRP_MAX_BLOB           1024 /* bytes of one transport's blob for one buffer */
#define CRP_MAX_BLOBS          8    /* transports with a blob on one buffer */
#define CRP_MAX_TRANSPORT_NAME 32
typedef struct crp_endpoint {
    char *transport;
    char *address;      /* address_len bytes, followed by a NUL for text addresses */
    size_t address_len; /* encoder: 0 means strlen(address) */
} crp_endpoint;
typedef struct crp_blob {
    char *transport;
    uint8_t *data;
    size_t len;
} crp_blob;
typedef struct crp_buffer_desc {
    uint64_t addr;
    uint64_t length;
    uint8_t kind;
    int32_t device;
    bool remote_accessible;
    size_t n_blobs;
    crp_blob *blobs; /* NULL when n_blobs is 0 */
} crp_buffer_desc;
typedef struct crp_descriptor {
    char *name;
    char *host_id;
    uint64_t instance;
    uint64_t version;
    size_t n_endpoints;
    crp_endpoint *endpoints;
    size_t n_buffers;
    crp_buffer_desc *buffers;
} crp_descriptor;
/* Encoded bytes one buffer entry needs at most beyond its blobs, and per
 * blob beyond its bytes: lets the engine refuse a registration that would
 * push the descriptor over CRP_MAX_BODY before it happens. */
#define CRP_DESC_BUFFER_OVERHEAD 64
#define CRP_DESC_BLOB_OVERHEAD   (CRP_MAX_TRANSPORT_NAME + 8)
int crp_descriptor_encode(const crp_descriptor *m, crp_buf *out);
/* Rejects buffers with length 0 or addr+length overflowing. */
int crp_descriptor_decode(const void *data, size_t len, crp_descriptor *out);
void crp_descriptor_clear(crp_descriptor *m);
/** The blob `transport` wrote for buffer b, or NULL (then *len is untouched). */
const uint8_t *crp_buffer_blob(const crp_buffer_desc *b, const char *transport, size_t *len);
/** The endpoint of `transport`, or NULL. */
const crp_endpoint *crp_descriptor_endpoint(const crp_descriptor *d, const char *transport);

/* --- NOTIFY: {"from": str, "msg": bin (<= CRP_MAX_NOTIFY)} -------------- */
typedef struct crp_notify {
    char *from;
    uint8_t *message; /* NUL-terminated copy; length excludes the NUL */
    size_t length;
} crp_notify;
int crp_notify_encode(const crp_notify *m, crp_buf *out);
int crp_notify_decode(const void *data, size_t len, crp_notify *out);
void crp_notify_clear(crp_notify *m);

/* --- DATA REQUEST (READ_REQ / WRITE_REQ body): [u64 addr, u64 length] ----
 * A fixed two-element array: the hot path decodes it without allocating. */
typedef struct crp_data_req {
    uint64_t addr;
    uint64_t length;
} crp_data_req;
int crp_data_req_encode(const crp_data_req *m, crp_buf *out);
int crp_data_req_decode(const void *data, size_t len, crp_data_req *out);

/* --- ERROR: {"msg": str (<= CRP_MAX_ERROR_TEXT)} ------------------------- */
typedef struct crp_error {
    char *message;
} crp_error;
int crp_error_encode(const crp_error *m, crp_buf *out);
int crp_error_decode(const void *data, size_t len, crp_error *out);
void crp_error_clear(crp_error *m);

/* --- SHM REQUEST (same-host Unix socket, one datagram): ------------------
 * {"op": u8 (crp_shm_op), "id": u64 region id (0 for the control page)};
 * op AUTH also carries "cn": bin[16] client nonce and "mac": bin[32]
 * (HMAC-SHA256(secret, "shm" | server nonce | client nonce)).
 * --- SHM REPLY: {"st": i32 status, "size": u64 bytes to map}; on status 0
 * the file descriptor travels as SCM_RIGHTS ancillary data. The service's
 * first datagram on a connection is a reply with "non": bin[16] (the
 * server nonce) and "auth": bool (a shared secret is required: AUTH before
 * anything else).                                                        */
typedef enum crp_shm_op {
    CRP_SHM_CONTROL_PAGE = 1,
    CRP_SHM_REGION = 2,
    CRP_SHM_AUTH = 3
} crp_shm_op;
typedef struct crp_shm_request {
    uint8_t op;
    uint64_t id;
    uint8_t client_nonce[CRP_NONCE_SIZE]; /* AUTH only */
    uint8_t mac[CRP_MAC_SIZE];            /* AUTH only */
} crp_shm_request;
typedef struct crp_shm_reply {
    int32_t status;
    uint64_t size;
    bool has_nonce; /* the greeting: nonce and auth are set */
    uint8_t nonce[CRP_NONCE_SIZE];
    bool auth;
} crp_shm_reply;
int crp_shm_request_encode(const crp_shm_request *m, crp_buf *out);
int crp_shm_request_decode(const void *data, size_t len, crp_shm_request *out);
int crp_shm_reply_encode(const crp_shm_reply *m, crp_buf *out);
int crp_shm_reply_decode(const void *data, size_t len, crp_shm_reply *out);

/* --- UCX active messages (ucx transport on UCX's software paths) ---------
 * Fixed little-endian layouts, carried as UCX AM headers; the payload, if
 * any, is the AM's data.
 *   AM_REQ   (32 bytes): u8 op (0 READ, 1 WRITE), 7 zero bytes, u64 id,
 *                        u64 remote address, u64 length
 *   AM_REPLY (16 bytes): u64 id, i32 status, 4 zero bytes
 * The id is the initiator's; the target echoes it. */
#define CRP_AM_REQ_SIZE   32
#define CRP_AM_REPLY_SIZE 16
typedef struct crp_am_req {
    uint8_t op;
    uint64_t id, addr, length;
} crp_am_req;
typedef struct crp_am_reply {
    uint64_t id;
    int32_t status;
} crp_am_reply;
void crp_am_req_encode(const crp_am_req *m, uint8_t out[CRP_AM_REQ_SIZE]);
/* Errors: CR_ERR_MALFORMED_FRAME (size, op, padding, length 0 or overflow). */
int crp_am_req_decode(const void *data, size_t len, crp_am_req *out);
void crp_am_reply_encode(const crp_am_reply *m, uint8_t out[CRP_AM_REPLY_SIZE]);
/* Errors: CR_ERR_MALFORMED_FRAME (size, padding, a positive status). */
int crp_am_reply_decode(const void *data, size_t len, crp_am_reply *out);

#endif
