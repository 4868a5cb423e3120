/*
 * etcd_codec.h - the etcd v3 JSON gateway's formats: base64, request bodies
 * and strict decoders of every reply the client reads.
 *
 * Decoders take the raw reply bytes (from a socket: untrusted) and either
 * fill their output completely and return 0, or leave it untouched and
 * return CR_ERR_METADATA_MALFORMED (the message names the reply and the
 * field) or CR_ETCD_OPERATION_ERROR (the reply is a well-formed error object;
 * the message quotes etcd's). Unknown fields are ignored (newer servers add
 * some); known fields must have the gateway's types: int64 as a decimal
 * string (or a JSON integer), bytes as padded standard base64, booleans as
 * JSON booleans; a field at its default value may be absent. Fuzzed by
 * fuzz/fuzz_etcd_reply.c.
 *
 * Threading: pure functions.
 */
#ifndef CRESCENT_METADATA_ETCD_CODEC_H
#define CRESCENT_METADATA_ETCD_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "metadata/etcd.h"

/* gRPC status codes the client acts on. */
#define CRM_GRPC_NOT_FOUND         5
#define CRM_GRPC_DEADLINE_EXCEEDED 4
#define CRM_GRPC_UNAVAILABLE       14

/** Padded standard base64 of data[0..len): malloc'd, NUL-terminated. */
int crm_b64_encode(const void *data, size_t len, char **out, size_t *out_len);

/**
 * Decode padded standard base64 (length a multiple of 4, '=' only at the
 * end, unused bits zero). *out is malloc'd with a NUL after the bytes.
 * Errors: CR_ERR_METADATA_MALFORMED.
 */
int crm_b64_decode(const char *text, size_t len, uint8_t **out, size_t *out_len);

/**
 * The range_end that makes [key, range_end) the keys starting with key:
 * key with its last byte below 0xff incremented (trailing 0xff dropped); the
 * single byte "\0" (every key) when there is none. malloc'd, *len bytes.
 */
int crm_etcd_prefix_end(const char *key, size_t key_len, char **out, size_t *len);

/* Request bodies (jansson values; NULL when out of memory). */
json_t *crm_etcd_json_range(const char *key, bool prefix, int64_t limit);
json_t *crm_etcd_json_put(const char *key, const void *value, size_t len, int64_t lease);
json_t *crm_etcd_json_delete(const char *key, bool prefix);
json_t *crm_etcd_json_txn(const crm_etcd_compare *cmp, size_t n_cmp, const crm_etcd_op *success,
                          size_t n_success, const crm_etcd_op *failure, size_t n_failure);
json_t *crm_etcd_json_lease_grant(int64_t ttl);
json_t *crm_etcd_json_lease_id(int64_t id); /* keepalive, revoke */
json_t *crm_etcd_json_watch(const char *key, bool prefix, int64_t start_revision);

/** Serialise and release `j` (even on failure). *out is malloc'd. */
int crm_etcd_json_dump(json_t *j, char **out, size_t *len);

/**
 * A non-200 gateway reply: {"error": "...", "message": "...", "code": N}.
 * On success *grpc_code and msg (NUL-terminated, truncated to cap) are
 * written. Errors: CR_ERR_METADATA_MALFORMED.
 */
int crm_etcd_decode_error(const char *body, size_t len, int *grpc_code, char *msg, size_t cap);

int crm_etcd_decode_range(const char *body, size_t len, crm_etcd_range *out);
int crm_etcd_decode_put(const char *body, size_t len, int64_t *revision);
int crm_etcd_decode_delete(const char *body, size_t len, int64_t *deleted, int64_t *revision);
int crm_etcd_decode_txn(const char *body, size_t len, crm_etcd_txn_result *out);
/** {"ID": id, "TTL": ttl} (an "error" string field is an operation error). */
int crm_etcd_decode_lease_grant(const char *body, size_t len, int64_t *id, int64_t *ttl);
/** The first message of a keepalive stream: {"result": {"ID", "TTL"}}. TTL 0: gone. */
int crm_etcd_decode_keepalive(const char *body, size_t len, int64_t *id, int64_t *ttl);

/** One message of a watch stream. */
typedef struct crm_etcd_watch_msg {
    int64_t revision;
    bool created;
    bool canceled;
    int64_t compact_revision;
    char cancel_reason[160];
    size_t n_events;
    crm_etcd_event *events;
} crm_etcd_watch_msg;

void crm_etcd_watch_msg_clear(crm_etcd_watch_msg *m);

/** Decode one line of the watch stream ({"result": ...} or {"error": ...}). */
int crm_etcd_decode_watch(const char *body, size_t len, crm_etcd_watch_msg *out);

#endif
