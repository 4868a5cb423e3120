/*
 * thin.h - the local RPC between a thin store client (the thin mode of
 * cr_store, in libcrescent) and the standalone store client daemon
 * (crescent-client) on the same host, over a Unix stream socket.
 *
 * Framing. Requests travel in CRP_THIN_REQ frames and replies in
 * CRP_THIN_RESP frames (proto/frame.h); a reply echoes its request's
 * request_id and its header status mirrors the body's "st". The daemon's
 * first frame on a new connection is an unsolicited CHALLENGE reply
 * (request_id 0). File descriptors (memory to map) travel as SCM_RIGHTS
 * ancillary data on the sendmsg that carries the first byte of the frame
 * naming them ("nfd"); nothing else does. No frame carries data bytes: every
 * value moves through memory both processes map.
 *
 * Bodies. A msgpack map following docs/WIRE.md's rules (strict types,
 * unknown string keys skipped, known keys at most once, no trailing bytes,
 * strings without NUL). Every op uses a subset of one set of generic fields
 * below; the op table says which are required and which are optional for
 * the op's request and which fields its reply may carry. A field the op
 * does not use is skipped by the decoder and refused by the encoder, so a
 * decoded message re-encodes to one canonical form.
 *
 *   request fields (CRP_THIN_F_*)
 *   KEYS    "ks": [str key] (<= CRP_THIN_MAX_KEYS keys of <= CRP_THIN_MAX_KEY bytes)
 *   EXT     "nx": [u32] extents per key (as many as "ks"),
 *           "ex": [[u32 region, u64 offset, u64 length]] (sum of "nx" entries;
 *                 offset + length must not overflow)
 *   OFFS    "of": [u64] object offset of each extent (as many as "ex")
 *   VALS    "vs": [u64] (<= CRP_THIN_MAX_EXTENTS)
 *   CFG     "cfg": replica config, the master RPC's shape (proto/rpc.h)
 *   FLAGS   "f": u32 (CRP_THIN_FLAG_*)
 *   TEXT    "s": str (<= CRP_THIN_MAX_TEXT)
 *   ID      "id": u64
 *   REGION  "a": u64 address, "l": u64 length (> 0, a + l must not overflow),
 *           "fo": u64 offset in the passed file
 *   NFD     "nfd": u32 descriptors passed with the frame (<= CRP_THIN_MAX_FDS)
 *   HELLO   "v": u32 version, "pid": u64, "pool": u64 pool bytes, "lb": u64
 *           local buffer bytes
 *   ATTACH  "sid": u64 session, "tok": bin[16] session token
 *   MAC     "mac": bin[32] HMAC-SHA256 of the challenge nonce
 *   TENANT  "tn": str (<= CRP_THIN_MAX_TENANT)
 *
 *   reply fields (CRP_THIN_R_*), besides "op", "st" (i32 <= 0) and "msg"
 *   (optional str <= CRP_THIN_MAX_MSG)
 *   RESULTS   "r": [i64] one result per key (<= CRP_THIN_MAX_KEYS)
 *   VALS      "vs": [u64] (<= CRP_THIN_MAX_EXTENTS)
 *   VALUE     "n": i64
 *   NAMES     "names": [str] (<= CRP_THIN_MAX_NAMES names of <= CRP_MAX_NAME bytes)
 *   REPS      "reps": [{"s": str segment, "a": u64, "l": u64, "c": bool complete}]
 *             (<= CRP_THIN_MAX_REPLICAS)
 *   SESSION   "sid": u64, "tok": bin[16], "caps": u64, "seg": str segment name
 *   CHALLENGE "v": u32 version, "non": bin[16] nonce, "auth": bool secret required
 *   TENANT    "tn": str
 *
 * API. Encoders append a body to a crp_buf and return 0, CR_ERR_NO_MEMORY,
 * or CR_INVALID_PARAMS for anything the decoder would refuse (unknown
 * op, missing required field, a field the op does not use, bounds, body
 * over CRP_MAX_BODY), leaving the buffer as it was. Decoders fill the
 * caller's struct only on success: CR_ERR_MALFORMED_FRAME, or
 * CR_NOT_SUPPORTED for a well-formed body with an unknown op; every string
 * and array of a decoded message lives in one arena released by *_clear
 * (a caller-built message has a NULL arena: *_clear only zeroes it).
 *
 * Threading: all functions are reentrant; a message belongs to one thread.
 */
#ifndef CRESCENT_PROTO_THIN_H
#define CRESCENT_PROTO_THIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/messages.h"
#include "proto/rpc.h"

#define CRP_THIN_VERSION      1
#define CRP_THIN_MAX_KEYS     4096
#define CRP_THIN_MAX_KEY      4096
#define CRP_THIN_MAX_EXTENTS  65536
#define CRP_THIN_MAX_TEXT     4096
#define CRP_THIN_MAX_TENANT   128
#define CRP_THIN_MAX_NAMES    65536
#define CRP_THIN_MAX_REPLICAS 64
#define CRP_THIN_MAX_MSG      512
#define CRP_THIN_MAX_FDS      4
#define CRP_THIN_TOKEN_SIZE   16
#define CRP_THIN_NONCE_SIZE   16
#define CRP_THIN_MAC_SIZE     32

/* Request fields. */
#define CRP_THIN_F_KEYS   (1u << 0)
#define CRP_THIN_F_EXT    (1u << 1)
#define CRP_THIN_F_OFFS   (1u << 2)
#define CRP_THIN_F_VALS   (1u << 3)
#define CRP_THIN_F_CFG    (1u << 4)
#define CRP_THIN_F_FLAGS  (1u << 5)
#define CRP_THIN_F_TEXT   (1u << 6)
#define CRP_THIN_F_ID     (1u << 7)
#define CRP_THIN_F_REGION (1u << 8)
#define CRP_THIN_F_NFD    (1u << 9)
#define CRP_THIN_F_HELLO  (1u << 10)
#define CRP_THIN_F_ATTACH (1u << 11)
#define CRP_THIN_F_MAC    (1u << 12)
#define CRP_THIN_F_TENANT (1u << 13)

/* Reply fields. */
#define CRP_THIN_R_RESULTS   (1u << 0)
#define CRP_THIN_R_VALS      (1u << 1)
#define CRP_THIN_R_VALUE     (1u << 2)
#define CRP_THIN_R_NAMES     (1u << 3)
#define CRP_THIN_R_REPS      (1u << 4)
#define CRP_THIN_R_SESSION   (1u << 5)
#define CRP_THIN_R_CHALLENGE (1u << 6)
#define CRP_THIN_R_TENANT    (1u << 7)

/* "f" bits. */
#define CRP_THIN_FLAG_UPSERT (1u << 0) /* puts replace */
#define CRP_THIN_FLAG_FORCE  (1u << 1) /* removals ignore read leases */
#define CRP_THIN_FLAG_SINGLE (1u << 2) /* one key with the single-key call's semantics */
#define CRP_THIN_FLAGS_ALL   (CRP_THIN_FLAG_UPSERT | CRP_THIN_FLAG_FORCE | CRP_THIN_FLAG_SINGLE)

/* The daemon's default socket: the abstract name "@crescent-client-<port>". */
#define CRP_THIN_SOCKET_PREFIX "crescent-client-"
/* HELLO's "mac": HMAC-SHA256(secret, CRP_THIN_MAC_LABEL | challenge nonce). */
#define CRP_THIN_MAC_LABEL "crescent-thin-v1"

/* Memory regions an extent names: 0 is the thin client's pool + local
 * buffer (one memfd), others are ids REGISTER returned. */
#define CRP_THIN_REGION_POOL 0u

/*
 * X(NAME, value, "name", required request fields, optional request fields,
 *   reply fields). The opcode enum, crp_thin_op_name() and the codecs'
 *   checks are generated from this list.
 */
#define CRP_THIN_OP_TABLE(X)                                                                       \
    X(CHALLENGE, 1, "challenge", 0, 0, CRP_THIN_R_CHALLENGE)                                       \
    X(HELLO, 2, "hello", CRP_THIN_F_HELLO,                                                         \
      CRP_THIN_F_ATTACH | CRP_THIN_F_MAC | CRP_THIN_F_TENANT | CRP_THIN_F_NFD,                     \
      CRP_THIN_R_SESSION | CRP_THIN_R_TENANT)                                                      \
    X(HEALTH, 3, "health", 0, 0, 0)                                                                \
    X(SEGMENT, 4, "segment", 0, 0, CRP_THIN_R_VALS | CRP_THIN_R_NAMES)                             \
    X(PUT, 10, "put", CRP_THIN_F_KEYS | CRP_THIN_F_EXT | CRP_THIN_F_FLAGS, CRP_THIN_F_CFG,         \
      CRP_THIN_R_RESULTS)                                                                          \
    X(GET, 11, "get", CRP_THIN_F_KEYS | CRP_THIN_F_EXT | CRP_THIN_F_FLAGS, 0, CRP_THIN_R_RESULTS)  \
    X(GET_COPY, 12, "get_copy", CRP_THIN_F_KEYS | CRP_THIN_F_FLAGS, 0,                             \
      CRP_THIN_R_RESULTS | CRP_THIN_R_VALS)                                                        \
    X(RELEASE, 13, "release", CRP_THIN_F_VALS, 0, 0)                                               \
    X(PUT_TRANSIENT, 14, "put_transient",                                                          \
      CRP_THIN_F_KEYS | CRP_THIN_F_REGION | CRP_THIN_F_FLAGS | CRP_THIN_F_NFD, CRP_THIN_F_CFG,     \
      CRP_THIN_R_RESULTS)                                                                          \
    X(GET_TRANSIENT, 15, "get_transient", CRP_THIN_F_KEYS | CRP_THIN_F_REGION | CRP_THIN_F_NFD, 0, \
      CRP_THIN_R_RESULTS)                                                                          \
    X(EXIST, 20, "exist", CRP_THIN_F_KEYS | CRP_THIN_F_FLAGS, 0, CRP_THIN_R_RESULTS)               \
    X(GET_SIZE, 21, "get_size", CRP_THIN_F_KEYS, 0, CRP_THIN_R_VALUE)                              \
    X(REMOVE, 22, "remove", CRP_THIN_F_KEYS | CRP_THIN_F_FLAGS, 0, CRP_THIN_R_RESULTS)             \
    X(REMOVE_REGEX, 23, "remove_regex", CRP_THIN_F_TEXT | CRP_THIN_F_FLAGS, 0, CRP_THIN_R_VALUE)   \
    X(REMOVE_ALL, 24, "remove_all", CRP_THIN_F_FLAGS, 0, CRP_THIN_R_VALUE)                         \
    X(REPLICAS, 25, "replicas", CRP_THIN_F_KEYS | CRP_THIN_F_ID, 0,                                \
      CRP_THIN_R_VALUE | CRP_THIN_R_REPS)                                                          \
    X(REPLICA_CLEAR, 26, "replica_clear", CRP_THIN_F_KEYS | CRP_THIN_F_TEXT, 0,                    \
      CRP_THIN_R_RESULTS)                                                                          \
    X(SEGMENTS, 27, "segments", 0, 0, CRP_THIN_R_NAMES)                                            \
    X(REGISTER, 30, "register", CRP_THIN_F_REGION | CRP_THIN_F_NFD, 0, CRP_THIN_R_VALUE)           \
    X(UNREGISTER, 31, "unregister", CRP_THIN_F_ID, 0, 0)                                           \
    X(TABLE_CREATE, 40, "table_create", 0, 0, CRP_THIN_R_VALUE)                                    \
    X(TABLE_DESTROY, 41, "table_destroy", CRP_THIN_F_ID, 0, 0)                                     \
    X(GET_SESSION_START, 42, "get_session_start", CRP_THIN_F_ID | CRP_THIN_F_KEYS, 0,              \
      CRP_THIN_R_RESULTS)                                                                          \
    X(GET_SESSION_END, 43, "get_session_end", CRP_THIN_F_ID | CRP_THIN_F_KEYS, 0, 0)               \
    X(GET_RANGES, 44, "get_ranges",                                                                \
      CRP_THIN_F_ID | CRP_THIN_F_KEYS | CRP_THIN_F_EXT | CRP_THIN_F_OFFS, 0, CRP_THIN_R_RESULTS)   \
    X(PUT_SESSION_START, 45, "put_session_start",                                                  \
      CRP_THIN_F_ID | CRP_THIN_F_KEYS | CRP_THIN_F_VALS, CRP_THIN_F_CFG, CRP_THIN_R_RESULTS)       \
    X(PUT_RANGES, 46, "put_ranges",                                                                \
      CRP_THIN_F_ID | CRP_THIN_F_KEYS | CRP_THIN_F_EXT | CRP_THIN_F_OFFS, 0, CRP_THIN_R_RESULTS)   \
    X(PUT_SESSION_END, 47, "put_session_end", CRP_THIN_F_ID | CRP_THIN_F_KEYS, 0,                  \
      CRP_THIN_R_RESULTS)                                                                          \
    X(PUT_SESSION_REVOKE, 48, "put_session_revoke", CRP_THIN_F_ID | CRP_THIN_F_KEYS, 0,            \
      CRP_THIN_R_RESULTS)                                                                          \
    X(STATS, 50, "stats", 0, 0, CRP_THIN_R_VALS)

typedef enum crp_thin_op {
#define CRP_THIN_OP_ENUM_(name, value, str, rq, opt, rs) CRP_THIN_##name = (value),
    CRP_THIN_OP_TABLE(CRP_THIN_OP_ENUM_)
#undef CRP_THIN_OP_ENUM_
} crp_thin_op;

/** "put", "get_copy", ...; "?" for an unknown op. */
const char *crp_thin_op_name(int op);
bool crp_thin_op_valid(int op);

/** One piece of memory: `len` bytes at `offset` in region `region`. */
typedef struct crp_thin_ext {
    uint32_t region;
    uint64_t offset;
    uint64_t len;
} crp_thin_ext;

typedef struct crp_thin_replica {
    char *segment;
    uint64_t addr;
    uint64_t size;
    bool complete;
} crp_thin_replica;

struct crp_thin_arena;

typedef struct crp_thin_req {
    uint16_t op;
    uint32_t fields; /* CRP_THIN_F_* present */
    uint32_t flags;  /* FLAGS */
    size_t n_keys;   /* KEYS */
    char **keys;
    uint32_t *counts; /* EXT: n_keys entries */
    size_t n_ext;
    crp_thin_ext *ext;
    uint64_t *offsets; /* OFFS: n_ext entries */
    size_t n_vals;     /* VALS */
    uint64_t *vals;
    crp_rpc_replica_config cfg;      /* CFG */
    char *text;                      /* TEXT */
    uint64_t id;                     /* ID */
    uint64_t addr, len, file_offset; /* REGION */
    uint32_t n_fds;                  /* NFD */
    uint32_t version;                /* HELLO */
    uint64_t pid, pool_size, buffer_size;
    uint64_t session; /* ATTACH */
    uint8_t token[CRP_THIN_TOKEN_SIZE];
    uint8_t mac[CRP_THIN_MAC_SIZE]; /* MAC */
    char *tenant;                   /* TENANT */
    struct crp_thin_arena *arena;
} crp_thin_req;

typedef struct crp_thin_resp {
    uint16_t op;
    int32_t status;
    char *message;   /* optional */
    uint32_t fields; /* CRP_THIN_R_* present */
    size_t n_results;
    int64_t *results;
    size_t n_vals;
    uint64_t *vals;
    int64_t value;
    size_t n_names;
    char **names;
    size_t n_reps;
    crp_thin_replica *reps;
    uint64_t session, caps; /* SESSION */
    uint8_t token[CRP_THIN_TOKEN_SIZE];
    char *segment;
    uint32_t version; /* CHALLENGE */
    uint8_t nonce[CRP_THIN_NONCE_SIZE];
    bool auth;
    char *tenant; /* TENANT */
    struct crp_thin_arena *arena;
} crp_thin_resp;

int crp_thin_req_encode(const crp_thin_req *m, crp_buf *out);
int crp_thin_req_decode(const void *data, size_t len, crp_thin_req *out);
void crp_thin_req_clear(crp_thin_req *m);

int crp_thin_resp_encode(const crp_thin_resp *m, crp_buf *out);
int crp_thin_resp_decode(const void *data, size_t len, crp_thin_resp *out);
void crp_thin_resp_clear(crp_thin_resp *m);

/** The request fields op requires / may carry, and its reply fields; 0 for
 *  an unknown op. */
uint32_t crp_thin_req_required(int op);
uint32_t crp_thin_req_optional(int op);
uint32_t crp_thin_resp_allowed(int op);

#endif
