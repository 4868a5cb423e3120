/*
 * rpc.h - the store master's RPC messages (client <-> crescent-master).
 *
 * Framing. Requests travel in CRP_RPC_REQ frames and replies in CRP_RPC_RESP
 * frames (proto/frame.h); the reply echoes the request_id, so a client may
 * keep many requests in flight on one connection and match replies in any
 * order. The frame header's status of a reply mirrors the body's "st".
 * A request body that cannot be decoded is answered with a CRP_ERROR frame
 * (proto/messages.h) carrying the decoder's status: CR_ERR_MALFORMED_FRAME,
 * or CR_NOT_SUPPORTED for a well-formed body whose op this side does not know.
 *
 * Bodies. Every body is a msgpack map following the rules of docs/WIRE.md
 * (strict types, unknown string keys skipped, known keys at most once, no
 * trailing bytes, strings without NUL). The first field is the opcode:
 *
 *   request: {"op": u16, <request fields of the op's shape>,
 *             "tn": str tenant (optional, <= CRP_RPC_MAX_TENANT; absent = default)}
 *   reply:   {"op": u16, "st": i32 (<= 0), "msg": str (optional, <= 512),
 *             <reply fields of the op's shape, present iff st == 0>}
 *
 * Only SERVICE_READY replies carry their fields whatever the status, so that
 * a version mismatch (st = CR_INVALID_VERSION) still tells the client which
 * protocol and software version the master speaks. A batch operation whose
 * frame-level status is 0 reports per-key results in its reply; the master
 * answers a batch with one result per request key, in request order (the
 * decoder cannot check this: the caller compares the counts).
 *
 * Shapes (keys are short to keep batches small):
 *
 *   uuid      bin[16]  (hi then lo, big-endian)
 *   segment   {"n": str name (<= CRP_MAX_NAME), "b": u64 base, "l": u64 size (> 0,
 *              base + size must not overflow), "e": u64 epoch}
 *   replica   {"s": str segment name, "a": u64 address, "l": u64 size (address + size
 *              must not overflow), "e": u64 segment epoch, "t": u8 crp_rpc_replica_status}
 *   config    {"n": u32 replica_num, "hp": bool hard pin, "spa": u8 soft pin action,
 *              "spt": u64 soft pin ttl ms (optional: absent = master default),
 *              "pref": [str segment name] (<= CRP_RPC_MAX_PREFERRED), "same": bool}
 *   result    {"st": i32 (<= 0), "reps": [replica] (present iff st == 0),
 *              "lt": u64 lease token (optional: absent = 0, none)}
 *
 *   request shape    fields
 *   hello            "v": u32 protocol, "caps": u64, "cid": uuid, "sw": str software,
 *                    "cn": bin[16] client nonce + "mac": bin[32] proof (optional, both or
 *                    neither: the shared-secret answer to the master's "sn")
 *   client           "cid"
 *   mount            "cid", "seg": segment
 *   remount          "cid", "segs": [segment] (<= CRP_RPC_MAX_SEGMENTS)
 *   unmount          "cid", "n": str segment name
 *   key              "k": str key
 *   keys             "ks": [str key] (<= CRP_RPC_MAX_BATCH)
 *   leases           "ks", "lts": [u64 lease token] (as many as "ks")
 *   put_start        "cid", "k", "sz": u64 value size, "cfg": config,
 *                    "ow": u64 ms (optional: absent = 0, not owned; crp_rpc_req.owned_ms)
 *   owner_key        "cid", "k", "gk": str grant key (optional, PUT_END / UPSERT_END only;
 *                    crp_rpc_req.grant_key)
 *   batch_put_start  "cid", "ks", "szs": [u64] (as many as "ks"), "cfg", "ow" (optional)
 *   owner_keys       "cid", "ks"
 *   remove           "k", "f": bool force
 *   regex            "re": str pattern (<= CRP_RPC_MAX_REGEX), "f"
 *   force            "f"
 *   batch_remove     "ks", "f"
 *   replica_clear    "cid", "ks", "n": str segment name (<= CRP_MAX_NAME; "" = every replica)
 *   name             "n": str segment name
 *   blob             "cid", "b": bin (<= CRP_RPC_MAX_BLOB; its own codec: proto/offload.h)
 *   none             (no fields)
 *
 *   reply shape      fields
 *   hello            "v": u32, "caps": u64, "sw": str, "view": u64 view version,
 *                    "sn": bin[16] server nonce (optional: a master with a shared
 *                    secret asking for proof), "smac": bin[32] the master's proof
 *                    (optional: answering a client's "mac"), "ls": str local socket
 *                    (optional, <= CRP_RPC_MAX_LOCAL; with it "lport": u16 the
 *                    client's TCP port as seen by the master, "lpid": u32 its pid)
 *   ping             "cs": u8 crp_rpc_client_status, "view": u64, "fence": u64 ms
 *                    (optional: absent = 0; the client's segments are fenced)
 *   exist            "ex": bool
 *   statuses         "r": [i32] (<= CRP_RPC_MAX_BATCH)
 *   get              "reps": [replica] (<= CRP_RPC_MAX_REPLICAS), "lease": u64 ttl ms,
 *                    "lt": u64 lease token (optional: absent = 0, none),
 *                    "ov": u64 object version (optional: absent = 0, none)
 *   end              "ov": u64 the committed value's version (optional: absent = 0)
 *   alloc            "reps"
 *   batch_get        "r": [result], "lease": u64 ttl ms
 *   batch_alloc      "r": [result]
 *   count            "n": u64
 *   names            "names": [str segment name] (<= CRP_RPC_MAX_SEGMENTS)
 *   segment_info     "seg": segment, "used": u64 bytes, "cid": uuid owner
 *   key_info         "sz": u64, "reps", "lease": u64 ms left, "hp": bool,
 *                    "sp": u64 soft pin ms left (0 = none), "cid": uuid owner
 *   blob             "b": bin (<= CRP_RPC_MAX_BLOB; proto/offload.h)
 *   none             (no fields)
 *
 * Bounds: keys and regexes are at most CRP_RPC_MAX_KEY bytes (empty keys pass
 * the decoder; the master answers CR_INVALID_KEY), a batch has at most
 * CRP_RPC_MAX_BATCH keys, and a whole body at most CRP_MAX_BODY bytes, which
 * is the effective limit for batches of long keys: a sender splits larger
 * batches. Decoders check structure, bounds and enum ranges only; semantic
 * checks (replica_num >= 1, soft pin ttl <= max, ...) are the master's, so
 * that one bad key in a batch fails only that key.
 *
 * API. One tagged union per direction: crp_rpc_req / crp_rpc_resp hold the
 * op and, in `u`, the member named by the op's shape in CRP_RPC_OP_TABLE.
 * Encoders append to a crp_buf and return 0, CR_ERR_NO_MEMORY, or
 * CR_INVALID_PARAMS for anything the decoder would refuse (unknown op,
 * NULL string, bound exceeded, body over CRP_MAX_BODY), leaving the buffer as
 * it was. Decoders fill the caller's struct only on success; every string
 * and array of a decoded message lives in one block owned by the message
 * (`arena`) and is released by *_clear. A caller-built message has a NULL
 * arena: *_clear then frees nothing and only zeroes the struct.
 *
 * Threading: all functions are reentrant; a message may be used by one
 * thread at a time.
 */
#ifndef CRESCENT_PROTO_RPC_H
#define CRESCENT_PROTO_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/messages.h"

/* Protocol version exchanged by SERVICE_READY; bumped on incompatible change. */
#define CRP_RPC_VERSION 1

/* Capability bits announced in SERVICE_READY ("caps"). */
#define CRP_RPC_CAP_BATCH         (1ull << 0) /* batch forms of the hot operations */
#define CRP_RPC_CAP_UPSERT        (1ull << 1) /* UPSERT_* */
#define CRP_RPC_CAP_SOFT_PIN      (1ull << 2) /* soft pin action and ttl in config */
#define CRP_RPC_CAP_EPOCH         (1ull << 3) /* segment epochs in replicas (restart fence) */
#define CRP_RPC_CAP_REPLICA_CLEAR (1ull << 4) /* BATCH_REPLICA_CLEAR */
#define CRP_RPC_CAP_LEASE_RELEASE (1ull << 5) /* lease tokens in reads, RELEASE_LEASES */
#define CRP_RPC_CAP_OFFLOAD       (1ull << 6) /* OFFLOAD_HEARTBEAT: the disk tier (proto/offload.h) */
/* "ow" in put/upsert starts: writes owned by their connection, revoked when it closes */
#define CRP_RPC_CAP_OWNED_WRITES (1ull << 7)
/* "swt" in GET_REPLICA_LIST / BATCH_GET_REPLICA_LIST: the master holds a reply that would say
 * "being staged" until the stage lands or the wait ends; in OFFLOAD_HEARTBEAT: a reply that
 * would carry no task, until a task is queued (docs/WIRE.md, "Stage waits") */
#define CRP_RPC_CAP_STAGE_WAIT (1ull << 8)
/* "gk" in PUT_END / UPSERT_END: complete the key on the replicas of the caller's own write in
 * flight of the grant key "gk" (docs/WIRE.md, "Put grants") */
#define CRP_RPC_CAP_PUT_GRANT (1ull << 9)
/* "ca" in a PUT_END with "gk": commit ahead of the copy; the key is "committing" (its reads
 * held) until the writer's plain PUT_END (docs/WIRE.md, "Commit ahead"). Not announced by an
 * HA master. */
#define CRP_RPC_CAP_COMMIT_AHEAD (1ull << 10)
/* "ca" in a BATCH_PUT_END: every key named (the caller's own fresh puts, owned by this
 * connection) commits ahead of its copy, as above (docs/WIRE.md, "Commit ahead"). Not
 * announced by an HA master. */
#define CRP_RPC_CAP_BATCH_COMMIT_AHEAD (1ull << 11)
#define CRP_RPC_CAPS_DEFINED                                                                       \
    (CRP_RPC_CAP_BATCH | CRP_RPC_CAP_UPSERT | CRP_RPC_CAP_SOFT_PIN | CRP_RPC_CAP_EPOCH |           \
     CRP_RPC_CAP_REPLICA_CLEAR | CRP_RPC_CAP_LEASE_RELEASE | CRP_RPC_CAP_OFFLOAD |                 \
     CRP_RPC_CAP_OWNED_WRITES | CRP_RPC_CAP_STAGE_WAIT | CRP_RPC_CAP_PUT_GRANT |                   \
     CRP_RPC_CAP_COMMIT_AHEAD | CRP_RPC_CAP_BATCH_COMMIT_AHEAD)

/* Bounds enforced by encoders and decoders. */
#define CRP_RPC_MAX_KEY       4096       /* bytes per key */
#define CRP_RPC_MAX_BATCH     65536      /* keys per batch request, results per batch reply */
#define CRP_RPC_MAX_REPLICAS  32         /* replicas per object in a reply */
#define CRP_RPC_MAX_PREFERRED 32         /* preferred segments in a replica config */
#define CRP_RPC_MAX_SEGMENTS  65536      /* segments per REMOUNT, names per GET_ALL_SEGMENTS */
#define CRP_RPC_MAX_REGEX     4096       /* bytes per REMOVE_BY_REGEX pattern */
#define CRP_RPC_MAX_SOFTWARE  128        /* bytes of the software version text */
#define CRP_RPC_MAX_MSG       512        /* bytes of a reply's error text (longer is cut) */
#define CRP_RPC_MAX_TENANT    128        /* bytes of a request's tenant ("tn") */
#define CRP_RPC_MAX_BLOB      (1u << 19) /* bytes of an OFFLOAD_HEARTBEAT body ("b") */
#define CRP_RPC_MAX_LOCAL     64         /* bytes of a hello's local socket name ("ls") */

/*
 * X(NAME, value, "metric name", request shape, reply shape). The opcode enum,
 * crp_rpc_op_name() and the codec dispatch are all generated from this list.
 * The shapes are the member of crp_rpc_req.u / crp_rpc_resp.u to use.
 */
#define CRP_RPC_OP_TABLE(X)                                                                        \
    X(SERVICE_READY, 1, "service_ready", hello, hello)                                             \
    X(PING, 2, "ping", client, ping)                                                               \
    X(MOUNT_SEGMENT, 10, "mount_segment", mount, none)                                             \
    X(REMOUNT_SEGMENT, 11, "remount_segment", remount, none)                                       \
    X(UNMOUNT_SEGMENT, 12, "unmount_segment", unmount, none)                                       \
    X(EXIST, 20, "exist_key", key, exist)                                                          \
    X(BATCH_EXIST, 21, "batch_exist_key", keys, statuses)                                          \
    X(GET_REPLICA_LIST, 22, "get_replica_list", key, get)                                          \
    X(BATCH_GET_REPLICA_LIST, 23, "batch_get_replica_list", keys, batch_get)                       \
    X(RELEASE_LEASES, 24, "release_leases", leases, none)                                          \
    X(PUT_START, 30, "put_start", put_start, alloc)                                                \
    X(PUT_END, 31, "put_end", owner_key, end)                                                      \
    X(PUT_REVOKE, 32, "put_revoke", owner_key, none)                                               \
    X(BATCH_PUT_START, 33, "batch_put_start", batch_put_start, batch_alloc)                        \
    X(BATCH_PUT_END, 34, "batch_put_end", owner_keys, statuses)                                    \
    X(BATCH_PUT_REVOKE, 35, "batch_put_revoke", owner_keys, statuses)                              \
    X(UPSERT_START, 40, "upsert_start", put_start, alloc)                                          \
    X(UPSERT_END, 41, "upsert_end", owner_key, end)                                                \
    X(UPSERT_REVOKE, 42, "upsert_revoke", owner_key, none)                                         \
    X(BATCH_UPSERT_START, 43, "batch_upsert_start", batch_put_start, batch_alloc)                  \
    X(BATCH_UPSERT_END, 44, "batch_upsert_end", owner_keys, statuses)                              \
    X(BATCH_UPSERT_REVOKE, 45, "batch_upsert_revoke", owner_keys, statuses)                        \
    X(REMOVE, 50, "remove", remove, none)                                                          \
    X(REMOVE_BY_REGEX, 51, "remove_by_regex", regex, count)                                        \
    X(REMOVE_ALL, 52, "remove_all", force, count)                                                  \
    X(BATCH_REMOVE, 53, "batch_remove", batch_remove, statuses)                                    \
    X(BATCH_REPLICA_CLEAR, 54, "batch_replica_clear", replica_clear, statuses)                     \
    X(GET_ALL_SEGMENTS, 60, "get_all_segments", none, names)                                       \
    X(QUERY_SEGMENT, 61, "query_segment", name, segment_info)                                      \
    X(QUERY_KEY, 62, "query_key", key, key_info)                                                   \
    X(OFFLOAD_HEARTBEAT, 70, "offload_heartbeat", blob, blob)

typedef enum crp_rpc_op {
    CRP_RPC_OP_NONE = 0, /* never valid on the wire */
#define CRP_RPC_OP_ENUM_(name, value, str, req, resp) CRP_RPC_##name = (value),
    CRP_RPC_OP_TABLE(CRP_RPC_OP_ENUM_)
#undef CRP_RPC_OP_ENUM_
} crp_rpc_op;

/** Number of opcodes in CRP_RPC_OP_TABLE. */
#define CRP_RPC_OP_COUNT 31

/** Mooncake's ReplicaStatus. */
typedef enum crp_rpc_replica_status {
    CRP_RPC_REPLICA_UNDEFINED = 0,
    CRP_RPC_REPLICA_INITIALIZED = 1,
    CRP_RPC_REPLICA_PROCESSING = 2,
    CRP_RPC_REPLICA_COMPLETE = 3,
    CRP_RPC_REPLICA_REMOVED = 4,
    CRP_RPC_REPLICA_FAILED = 5,
} crp_rpc_replica_status;

/** Mooncake's ClientStatus, answered by PING. */
typedef enum crp_rpc_client_status {
    CRP_RPC_CLIENT_UNDEFINED = 0,
    CRP_RPC_CLIENT_OK = 1,
    CRP_RPC_CLIENT_NEED_REMOUNT = 2,
} crp_rpc_client_status;

/** Mooncake's SoftPinAction. */
typedef enum crp_rpc_soft_pin_action {
    CRP_RPC_SOFT_PIN_PRESERVE = 0,
    CRP_RPC_SOFT_PIN_ENABLE = 1,
    CRP_RPC_SOFT_PIN_DISABLE = 2,
} crp_rpc_soft_pin_action;

/* --- Shared field types -------------------------------------------------- */

/** A client's identity: random per client process (Mooncake's UUID). */
typedef struct crp_rpc_uuid {
    uint64_t hi;
    uint64_t lo;
} crp_rpc_uuid;

typedef struct crp_rpc_segment {
    char *name;
    uint64_t base;
    uint64_t size;
    uint64_t epoch; /* changes whenever the client re-creates the segment's memory */
} crp_rpc_segment;

typedef struct crp_rpc_replica {
    char *segment;
    uint64_t addr;
    uint64_t size;
    uint64_t epoch;
    uint8_t status; /* crp_rpc_replica_status */
} crp_rpc_replica;

typedef struct crp_rpc_replica_config {
    uint32_t replica_num;
    bool hard_pin;
    uint8_t soft_pin_action; /* crp_rpc_soft_pin_action */
    bool has_soft_pin_ttl;   /* false: the master's default_kv_soft_pin_ttl */
    uint64_t soft_pin_ttl_ms;
    size_t n_preferred;
    char **preferred_segments;
    bool prefer_same_node;
} crp_rpc_replica_config;

/** One key's outcome in a batch reply; replicas only when status == 0. */
typedef struct crp_rpc_key_result {
    int32_t status;
    size_t n_replicas;
    crp_rpc_replica *replicas;
    uint64_t lease_token; /* batch get: give back with RELEASE_LEASES (0: none) */
} crp_rpc_key_result;

/* --- Request shapes ------------------------------------------------------ */

typedef struct crp_rpc_hello_req {
    uint32_t version; /* CRP_RPC_VERSION */
    uint64_t caps;
    crp_rpc_uuid client_id;
    char *software; /* e.g. "crescent 0.1.0" */
    bool has_mac;   /* the shared-secret answer (docs/WIRE.md, master secret) */
    uint8_t client_nonce[CRP_NONCE_SIZE];
    uint8_t mac[CRP_MAC_SIZE];
} crp_rpc_hello_req;

typedef struct crp_rpc_client_req {
    crp_rpc_uuid client_id;
} crp_rpc_client_req;

typedef struct crp_rpc_mount_req {
    crp_rpc_uuid client_id;
    crp_rpc_segment segment;
} crp_rpc_mount_req;

typedef struct crp_rpc_remount_req {
    crp_rpc_uuid client_id;
    size_t n_segments;
    crp_rpc_segment *segments;
} crp_rpc_remount_req;

typedef struct crp_rpc_unmount_req {
    crp_rpc_uuid client_id;
    char *name;
} crp_rpc_unmount_req;

typedef struct crp_rpc_key_req {
    char *key;
} crp_rpc_key_req;

typedef struct crp_rpc_keys_req {
    size_t n_keys;
    char **keys;
} crp_rpc_keys_req;

/* RELEASE_LEASES: the reader is done with the reads these tokens granted. */
typedef struct crp_rpc_leases_req {
    size_t n_keys;
    char **keys;
    uint64_t *tokens; /* n_keys entries */
} crp_rpc_leases_req;

typedef struct crp_rpc_put_start_req {
    crp_rpc_uuid client_id;
    char *key;
    uint64_t value_size;
    crp_rpc_replica_config config;
} crp_rpc_put_start_req;

typedef struct crp_rpc_owner_key_req {
    crp_rpc_uuid client_id;
    char *key;
} crp_rpc_owner_key_req;

typedef struct crp_rpc_batch_put_start_req {
    crp_rpc_uuid client_id;
    size_t n_keys;
    char **keys;
    uint64_t *value_sizes; /* n_keys entries */
    crp_rpc_replica_config config;
} crp_rpc_batch_put_start_req;

typedef struct crp_rpc_owner_keys_req {
    crp_rpc_uuid client_id;
    size_t n_keys;
    char **keys;
} crp_rpc_owner_keys_req;

typedef struct crp_rpc_remove_req {
    char *key;
    bool force;
} crp_rpc_remove_req;

typedef struct crp_rpc_regex_req {
    char *pattern;
    bool force;
} crp_rpc_regex_req;

typedef struct crp_rpc_force_req {
    bool force;
} crp_rpc_force_req;

typedef struct crp_rpc_batch_remove_req {
    size_t n_keys;
    char **keys;
    bool force;
} crp_rpc_batch_remove_req;

/* BATCH_REPLICA_CLEAR: drop the replicas of keys on one segment ("" = all). */
typedef struct crp_rpc_replica_clear_req {
    crp_rpc_uuid client_id;
    size_t n_keys;
    char **keys;
    char *segment; /* never NULL on the wire; "" clears every replica */
} crp_rpc_replica_clear_req;

typedef struct crp_rpc_name_req {
    char *name;
} crp_rpc_name_req;

/* An opaque body with its own codec (OFFLOAD_HEARTBEAT: proto/offload.h). */
typedef struct crp_rpc_blob_req {
    crp_rpc_uuid client_id;
    size_t len;
    uint8_t *data;
} crp_rpc_blob_req;

struct crp_rpc_arena; /* decoder-owned storage of one message */

typedef struct crp_rpc_req {
    uint16_t op; /* crp_rpc_op */
    union {
        crp_rpc_hello_req hello;
        crp_rpc_client_req client;
        crp_rpc_mount_req mount;
        crp_rpc_remount_req remount;
        crp_rpc_unmount_req unmount;
        crp_rpc_key_req key;
        crp_rpc_keys_req keys;
        crp_rpc_leases_req leases;
        crp_rpc_put_start_req put_start;
        crp_rpc_owner_key_req owner_key;
        crp_rpc_batch_put_start_req batch_put_start;
        crp_rpc_owner_keys_req owner_keys;
        crp_rpc_remove_req remove;
        crp_rpc_regex_req regex;
        crp_rpc_force_req force;
        crp_rpc_batch_remove_req batch_remove;
        crp_rpc_replica_clear_req replica_clear;
        crp_rpc_name_req name;
        crp_rpc_blob_req blob;
    } u;
    /* Optional "tn" of every request: the tenant whose keys the request
     * names (master/tenants.h). NULL or "" is the default tenant and is not
     * sent, so default requests are what they always were. */
    char *tenant;
    /* Optional "ow" of the put_start and batch_put_start shapes (PUT_START,
     * UPSERT_START and their batch forms; CRP_RPC_CAP_OWNED_WRITES; ignored
     * by other ops' encoders, refused in their bodies by nothing: unknown
     * keys are skipped). Nonzero marks the write(s) as owned by the
     * connection that sends the request, with the writer's promise that its
     * writing ends by start + owned_ms: when that connection closes, the
     * master revokes them at once (the keys are free) and reuses their space
     * at start + owned_ms (docs/WIRE.md, "Owned writes"). 0 (not sent): as
     * before. */
    uint64_t owned_ms;
    /* Optional "swt" of GET_REPLICA_LIST, BATCH_GET_REPLICA_LIST and OFFLOAD_HEARTBEAT
     * (CRP_RPC_CAP_STAGE_WAIT; ignored by other ops' encoders and decoders): a get reply that
     * would answer CR_ERR_OFFLOAD_STAGING (for a batch: no key ready, some being staged) may be
     * held by the master up to this many ms, until the stage lands; a heartbeat reply that
     * would carry no task, until one is queued for the holder. 0 (not sent): answered at
     * once. */
    uint32_t stage_wait_ms;
    /* Optional "gk" of PUT_END and UPSERT_END (CRP_RPC_CAP_PUT_GRANT; ignored by other ops'
     * encoders and decoders; <= CRP_RPC_MAX_KEY): the key of a fresh write in flight of the
     * same client (its "grant") whose replicas already hold the value; the end completes
     * "k" on those replicas instead of on k's own write, and the grant is gone (docs/WIRE.md,
     * "Put grants"). NULL (not sent): a plain end. */
    char *grant_key;
    /* Optional "ca" of PUT_END with "gk" (CRP_RPC_CAP_COMMIT_AHEAD; sent only as true, and
     * only with grant_key): the writer sends the end before it writes the value; the key
     * becomes a write in flight on the grant's replicas whose reads the master holds, and
     * the writer's plain PUT_END of it, once written, completes it (docs/WIRE.md, "Commit
     * ahead"). In BATCH_PUT_END (CRP_RPC_CAP_BATCH_COMMIT_AHEAD): every key named, a write
     * in flight of the caller owned by this connection, gets its version and is held the
     * same way until the writer's plain BATCH_PUT_END. false (not sent): the end of values
     * already written. */
    bool commit_ahead;
    struct crp_rpc_arena *arena; /* NULL unless decoded */
} crp_rpc_req;

/* --- Reply shapes -------------------------------------------------------- */

typedef struct crp_rpc_hello_resp {
    uint32_t version;
    uint64_t caps;
    char *software;
    uint64_t view_version;
    bool has_server_nonce; /* the master asks for shared-secret proof */
    uint8_t server_nonce[CRP_NONCE_SIZE];
    bool has_mac; /* the master's proof */
    uint8_t mac[CRP_MAC_SIZE];
    /* The same-host path (docs/WIRE.md "Local socket"), offered only on a TCP connection
     * from the master's own host: the name of its abstract unix socket (NULL: none), the
     * client's port as the master sees it and the master's pid. */
    char *local_socket;
    uint16_t local_port;
    uint32_t local_pid;
} crp_rpc_hello_resp;

typedef struct crp_rpc_ping_resp {
    uint8_t client_status; /* crp_rpc_client_status */
    uint64_t view_version;
    uint64_t fenced_ms; /* the client's segments accept no allocations this long yet (0: none) */
} crp_rpc_ping_resp;

typedef struct crp_rpc_exist_resp {
    bool exists;
} crp_rpc_exist_resp;

/* Per-key statuses; for BATCH_EXIST 1 = exists, 0 = absent, < 0 = error. */
typedef struct crp_rpc_statuses_resp {
    size_t n;
    int32_t *results;
} crp_rpc_statuses_resp;

typedef struct crp_rpc_get_resp {
    size_t n_replicas;
    crp_rpc_replica *replicas;
    uint64_t lease_ttl_ms;
    uint64_t lease_token; /* give back with RELEASE_LEASES when done (0: none) */
    /* The object's version ("ov"; 0: none, a master before it): never reused by the master
     * instance that issued it, so a client may read a location it cached for this version
     * before the reply and keep the bytes if the reply names the same version and replica
     * (docs/WIRE.md, "Object versions"). */
    uint64_t version;
} crp_rpc_get_resp;

/* PUT_END / UPSERT_END: the version the committed value got ("ov"; 0: none, a master
 * before it). A client that wrote the value may cache (key, version, a replica) and read
 * it speculatively later, as after a GET_REPLICA_LIST (docs/WIRE.md, "Object versions"). */
typedef struct crp_rpc_end_resp {
    uint64_t version;
} crp_rpc_end_resp;

/* PUT_START / UPSERT_START: the replicas allocated, possibly fewer than asked. */
typedef struct crp_rpc_alloc_resp {
    size_t n_replicas;
    crp_rpc_replica *replicas;
} crp_rpc_alloc_resp;

typedef struct crp_rpc_batch_get_resp {
    size_t n;
    crp_rpc_key_result *results;
    uint64_t lease_ttl_ms;
} crp_rpc_batch_get_resp;

typedef struct crp_rpc_batch_alloc_resp {
    size_t n;
    crp_rpc_key_result *results;
} crp_rpc_batch_alloc_resp;

typedef struct crp_rpc_count_resp {
    uint64_t count;
} crp_rpc_count_resp;

typedef struct crp_rpc_names_resp {
    size_t n_names;
    char **names;
} crp_rpc_names_resp;

typedef struct crp_rpc_segment_info_resp {
    crp_rpc_segment segment;
    uint64_t used;
    crp_rpc_uuid client_id;
} crp_rpc_segment_info_resp;

typedef struct crp_rpc_key_info_resp {
    uint64_t value_size;
    size_t n_replicas;
    crp_rpc_replica *replicas; /* every replica, whatever its status */
    uint64_t lease_ms_left;
    bool hard_pin;
    uint64_t soft_pin_ms_left; /* 0: not soft-pinned */
    crp_rpc_uuid client_id;    /* owner: the client that started the put */
} crp_rpc_key_info_resp;

typedef struct crp_rpc_blob_resp {
    size_t len;
    uint8_t *data;
} crp_rpc_blob_resp;

typedef struct crp_rpc_resp {
    uint16_t op;    /* crp_rpc_op, as in the request */
    int32_t status; /* 0 or a negative cr_status */
    char *message;  /* optional error text; NULL when absent */
    union {
        crp_rpc_hello_resp hello;
        crp_rpc_ping_resp ping;
        crp_rpc_exist_resp exist;
        crp_rpc_statuses_resp statuses;
        crp_rpc_get_resp get;
        crp_rpc_alloc_resp alloc;
        crp_rpc_batch_get_resp batch_get;
        crp_rpc_batch_alloc_resp batch_alloc;
        crp_rpc_count_resp count;
        crp_rpc_names_resp names;
        crp_rpc_segment_info_resp segment_info;
        crp_rpc_key_info_resp key_info;
        crp_rpc_blob_resp blob;
        crp_rpc_end_resp end;
    } u;                         /* meaningful only when status == 0, or for SERVICE_READY */
    struct crp_rpc_arena *arena; /* NULL unless decoded */
} crp_rpc_resp;

/* --- Functions ----------------------------------------------------------- */

/** "put_start", "batch_exist_key", ... (Mooncake's metric names); "?" if unknown. */
const char *crp_rpc_op_name(int op);

/** Is op in CRP_RPC_OP_TABLE? */
bool crp_rpc_op_valid(int op);

/** Dense index 0..CRP_RPC_OP_COUNT-1 of a valid op (for per-op arrays); -1 if unknown. */
int crp_rpc_op_index(int op);

/**
 * Check a peer's SERVICE_READY protocol version against CRP_RPC_VERSION:
 * 0, or CR_INVALID_VERSION with a message naming both versions and who
 * must be upgraded ("peer" is e.g. "master" or "client" for the text).
 */
int crp_rpc_check_version(const char *peer, uint32_t peer_version);

int crp_rpc_req_encode(const crp_rpc_req *m, crp_buf *out);
/** Errors: CR_ERR_MALFORMED_FRAME, CR_NOT_SUPPORTED (unknown op), CR_ERR_NO_MEMORY. */
int crp_rpc_req_decode(const void *data, size_t len, crp_rpc_req *out);
/** Free decoded storage (nothing for caller-built messages) and zero *m. */
void crp_rpc_req_clear(crp_rpc_req *m);

int crp_rpc_resp_encode(const crp_rpc_resp *m, crp_buf *out);
/** Errors: CR_ERR_MALFORMED_FRAME, CR_NOT_SUPPORTED (unknown op), CR_ERR_NO_MEMORY. */
int crp_rpc_resp_decode(const void *data, size_t len, crp_rpc_resp *out);
void crp_rpc_resp_clear(crp_rpc_resp *m);

/**
 * Does this get reply make its reader wait for a disk stage? A GET_REPLICA_LIST reply
 * does when it says CR_ERR_OFFLOAD_STAGING; a BATCH_GET_REPLICA_LIST reply when no key is
 * ready and some key is being staged (one with a key ready goes back to the caller, which
 * reads what is ready). The reader asks again; a master may hold such a reply instead
 * ("swt", docs/WIRE.md "Stage waits"). False for any other reply.
 */
bool crp_rpc_resp_is_staging(const crp_rpc_resp *r);

#endif
