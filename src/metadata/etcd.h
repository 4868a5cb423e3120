/*
 * etcd.h - a small etcd v3 client over etcd's JSON gateway (libcurl +
 * jansson), for the etcd metadata backend and the HA master.
 *
 * Wire: POST http://<member>/v3/<service>/<method> with a JSON body; keys and
 * values travel base64-encoded, int64 fields as decimal strings (the
 * gateway's protobuf JSON mapping). Every reply is decoded strictly by
 * etcd_codec.c (bounded sizes, every field type checked, named errors).
 *
 * Endpoints: "h:p[,h:p...]" (',' or ';' separate, an optional "http://" per
 * member is accepted, as Mooncake's client does). A call starts at the member
 * that last answered, and moves to the next one when a member cannot be
 * connected within connect_timeout_ms or answers "unavailable" (no leader,
 * stopping). The whole call, failover included, ends by request_timeout_ms.
 * A request that reached a member and then lost its connection is retried on
 * the next member too, so a put or txn may apply twice; puts are idempotent,
 * and a retried create-if-absent txn can answer "already exists" for a key it
 * created itself: callers that care compare the existing key's lease (or
 * value) with their own (see crm_etcd_create).
 *
 * Errors: CR_ERR_METADATA_UNAVAILABLE (no member answered before the
 * deadline; the message names each member and why), CR_ETCD_OPERATION_ERROR
 * (a member answered with an error; message quotes etcd's),
 * CR_ETCD_KEY_NOT_EXIST (crm_etcd_get of a missing key),
 * CR_ERR_METADATA_MALFORMED (a reply that is not what the gateway sends),
 * CR_ERR_LEASE_LOST, CR_ERR_ETCD_COMPACTED, CR_ETCD_CTX_CANCELLED (a watch
 * stopped by its caller), CR_ERR_TIMEOUT (a watch's duration ran out),
 * CR_INVALID_PARAMS / CR_ERR_INVALID_CONFIG, CR_ERR_NO_MEMORY.
 *
 * Ownership: results (crm_etcd_kv, crm_etcd_range, crm_etcd_txn_result,
 * crm_etcd_cas) own malloc'd memory released with their _clear function;
 * they are written only on success.
 *
 * Threading: a crm_etcd may be used by any number of threads at once
 * (connections come from a pool; no handle is shared). Each lease runs its
 * own keepalive thread. crm_etcd_close must not race with other calls.
 */
#ifndef CRESCENT_METADATA_ETCD_H
#define CRESCENT_METADATA_ETCD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/net.h"

#define CRM_ETCD_MAX_ENDPOINTS 16
/* Largest reply accepted by default (a range of many descriptors fits). */
#define CRM_ETCD_DEFAULT_MAX_REPLY (8u << 20)

typedef struct crm_etcd crm_etcd;

/** Parsed endpoint list. */
typedef struct crm_etcd_endpoints {
    size_t n;
    char host[CRM_ETCD_MAX_ENDPOINTS][CRB_HOST_MAX];
    uint16_t port[CRM_ETCD_MAX_ENDPOINTS];
} crm_etcd_endpoints;

/**
 * Parse "h:p[,h:p...]" (';' also separates, spaces around members are
 * ignored, each member may start with "http://", IPv6 in brackets). Every
 * member needs a non-zero port. Errors: CR_ERR_INVALID_CONFIG naming the text
 * and the bad member. `out` is written only on success.
 */
int crm_etcd_parse_endpoints(const char *text, crm_etcd_endpoints *out);

typedef struct crm_etcd_config {
    /** Endpoint list as for crm_etcd_parse_endpoints. Required. */
    const char *endpoints;
    /** Deadline of one call, failover included; 0 = 3000 ms. */
    int request_timeout_ms;
    /** Per member connect limit; 0 = min(1000, request_timeout_ms). */
    int connect_timeout_ms;
    /** Largest reply body (or watch message) accepted; 0 = 8 MiB. */
    size_t max_reply_bytes;
} crm_etcd_config;

/**
 * Create a client. Connects to nothing yet. On success *out owns it (free
 * with crm_etcd_close). Errors: CR_ERR_INVALID_CONFIG, CR_ERR_NO_MEMORY,
 * CR_ERR_METADATA (curl could not be initialised).
 */
int crm_etcd_open(const crm_etcd_config *cfg, crm_etcd **out);

/**
 * Release every lease still held (revoking it: its keys are deleted by etcd)
 * and free the client. No other call on `c` may be running. NULL is a no-op.
 */
void crm_etcd_close(crm_etcd *c);

/** "host:port" of the member the next call starts with (the last good one). */
const char *crm_etcd_current_endpoint(const crm_etcd *c);

/** The request deadline the client was configured with, in ms. */
int crm_etcd_request_timeout_ms(const crm_etcd *c);

/* ----------------------------------------------------------------------- */
/* Keys                                                                    */

typedef struct crm_etcd_kv {
    char *key; /* key_len bytes + NUL */
    size_t key_len;
    uint8_t *value; /* value_len bytes + NUL (never NULL in a decoded kv) */
    size_t value_len;
    int64_t create_revision;
    int64_t mod_revision;
    int64_t version;
    int64_t lease; /* 0 = none */
} crm_etcd_kv;

typedef struct crm_etcd_range {
    int64_t revision; /* store revision the answer reflects */
    int64_t count;    /* keys in the range (more than n_kvs under a limit) */
    bool more;
    size_t n_kvs;
    crm_etcd_kv *kvs;
} crm_etcd_range;

void crm_etcd_kv_clear(crm_etcd_kv *kv);
void crm_etcd_range_clear(crm_etcd_range *r);

/**
 * Read one key. On success *out holds it and *revision (optional) the store
 * revision. Errors: CR_ETCD_KEY_NOT_EXIST when absent, and the client errors.
 */
int crm_etcd_get(crm_etcd *c, const char *key, crm_etcd_kv *out, int64_t *revision);

/**
 * Read `key`, or with `prefix` every key starting with it (in key order), at
 * most `limit` keys (0 = all). On success *out holds the answer.
 */
int crm_etcd_read_range(crm_etcd *c, const char *key, bool prefix, int64_t limit,
                        crm_etcd_range *out);

/**
 * Store value[0..len) under key, attached to `lease` (0 = none). On success
 * *revision (optional) is the revision of the write.
 */
int crm_etcd_put(crm_etcd *c, const char *key, const void *value, size_t len, int64_t lease,
                 int64_t *revision);

/**
 * Delete key (or every key under the prefix). Deleting nothing is success;
 * *deleted (optional) counts what went.
 */
int crm_etcd_delete(crm_etcd *c, const char *key, bool prefix, int64_t *deleted);

/* ----------------------------------------------------------------------- */
/* Transactions                                                            */

typedef enum crm_etcd_cmp_target {
    CRM_ETCD_CMP_VERSION,
    CRM_ETCD_CMP_CREATE, /* create_revision; 0 = key absent */
    CRM_ETCD_CMP_MOD,    /* mod_revision; 0 = key absent */
    CRM_ETCD_CMP_VALUE,
    CRM_ETCD_CMP_LEASE,
} crm_etcd_cmp_target;

typedef enum crm_etcd_cmp_result {
    CRM_ETCD_EQUAL,
    CRM_ETCD_GREATER,
    CRM_ETCD_LESS,
    CRM_ETCD_NOT_EQUAL,
} crm_etcd_cmp_result;

typedef struct crm_etcd_compare {
    const char *key;
    crm_etcd_cmp_target target;
    crm_etcd_cmp_result result;
    int64_t number;    /* VERSION, CREATE, MOD, LEASE */
    const void *value; /* VALUE */
    size_t value_len;
} crm_etcd_compare;

typedef enum crm_etcd_op_type {
    CRM_ETCD_OP_RANGE,
    CRM_ETCD_OP_PUT,
    CRM_ETCD_OP_DELETE,
} crm_etcd_op_type;

typedef struct crm_etcd_op {
    crm_etcd_op_type type;
    const char *key;
    bool prefix;       /* RANGE, DELETE: every key under `key` */
    const void *value; /* PUT */
    size_t value_len;
    int64_t lease; /* PUT: 0 = none */
} crm_etcd_op;

typedef struct crm_etcd_op_result {
    crm_etcd_op_type type;
    int64_t deleted;      /* DELETE */
    crm_etcd_range range; /* RANGE */
} crm_etcd_op_result;

typedef struct crm_etcd_txn_result {
    bool succeeded;   /* every compare held: the success branch ran */
    int64_t revision; /* store revision after the txn */
    size_t n_results; /* one per op of the branch that ran, in order */
    crm_etcd_op_result *results;
} crm_etcd_txn_result;

void crm_etcd_txn_result_clear(crm_etcd_txn_result *r);

/**
 * One atomic transaction: if every compare holds run `success`, else
 * `failure` (either list may be empty; at most 64 entries each). A compare
 * that does not hold is not an error: out->succeeded tells.
 */
int crm_etcd_txn(crm_etcd *c, const crm_etcd_compare *cmp, size_t n_cmp, const crm_etcd_op *success,
                 size_t n_success, const crm_etcd_op *failure, size_t n_failure,
                 crm_etcd_txn_result *out);

/** Result of a compare-and-swap helper. */
typedef struct crm_etcd_cas {
    bool succeeded;
    int64_t revision;    /* of the write when succeeded, else of the read */
    bool exists;         /* !succeeded: the key exists, `current` holds it */
    crm_etcd_kv current; /* !succeeded && exists */
} crm_etcd_cas;

void crm_etcd_cas_clear(crm_etcd_cas *r);

/**
 * Create key = value under `lease` only if the key does not exist (compare
 * create_revision == 0). If it exists, out->current is what is there (after
 * a retried request it may be our own write: compare current.lease).
 */
int crm_etcd_create(crm_etcd *c, const char *key, const void *value, size_t len, int64_t lease,
                    crm_etcd_cas *out);

/**
 * Put key = value under `lease` only if the key's mod_revision is still
 * `mod_revision` (0: only if absent). Otherwise out->current tells why.
 */
int crm_etcd_put_if_mod(crm_etcd *c, const char *key, const void *value, size_t len, int64_t lease,
                        int64_t mod_revision, crm_etcd_cas *out);

/** Delete key only if its mod_revision is still `mod_revision`. */
int crm_etcd_delete_if_mod(crm_etcd *c, const char *key, int64_t mod_revision, crm_etcd_cas *out);

/* ----------------------------------------------------------------------- */
/* Leases                                                                  */

typedef struct crm_etcd_lease crm_etcd_lease;

/**
 * Called once, from the lease's keepalive thread, when the lease is lost:
 * etcd reports it gone (TTL 0: expired or revoked elsewhere), or no
 * keepalive was acknowledged before the lease's local expiry. `status` is
 * CR_ERR_LEASE_LOST. The callback must not release the lease or block for
 * long; it may set flags and signal other threads.
 */
typedef void (*crm_etcd_lease_lost_fn)(void *arg, crm_etcd_lease *lease, int status);

/**
 * Grant a lease of ttl_s seconds (etcd may raise it to its minimum, ~2 s;
 * the granted TTL is what counts) and keep it alive from a background thread
 * every TTL/3, retrying failed keepalives quickly until the lease's local
 * expiry. on_lost may be NULL (poll crm_etcd_lease_check). On success *out
 * owns the lease (crm_etcd_lease_release). Errors: as for any call, and
 * CR_INVALID_PARAMS for ttl_s outside 1..86400.
 */
int crm_etcd_lease_grant(crm_etcd *c, int ttl_s, crm_etcd_lease_lost_fn on_lost, void *arg,
                         crm_etcd_lease **out);

/** The lease's id (for puts). */
int64_t crm_etcd_lease_id(const crm_etcd_lease *l);

/** The TTL etcd granted, in seconds. */
int crm_etcd_lease_ttl(const crm_etcd_lease *l);

/**
 * 0 while the lease is alive, CR_ERR_LEASE_LOST once lost. *valid_until_ms
 * (optional; crb_now_ms clock) is the time until which the lease is known to
 * be alive: the send time of the last acknowledged grant or keepalive plus
 * the TTL etcd answered. etcd cannot expire it earlier (it counts from when
 * it received the request), so a holder that stops acting as owner before
 * this instant never overlaps a successor. Thread-safe.
 */
int crm_etcd_lease_check(const crm_etcd_lease *l, uint64_t *valid_until_ms);

/**
 * Stop the keepalive thread and, with `revoke` (and the lease not lost),
 * revoke the lease so its keys vanish now rather than at expiry. Frees the
 * lease; returns the revoke's status (0 if not revoking; a lease etcd no
 * longer knows counts as revoked). NULL is a no-op.
 */
int crm_etcd_lease_release(crm_etcd_lease *l, bool revoke);

/**
 * Revoke a lease by id (one this client does not hold: e.g. a dead leader's,
 * read from its key's kv.lease). Its keys are deleted at once. A lease etcd
 * no longer knows counts as revoked (0).
 */
int crm_etcd_revoke_lease_id(crm_etcd *c, int64_t id);

/* ----------------------------------------------------------------------- */
/* Watch                                                                   */

typedef enum crm_etcd_event_type {
    CRM_ETCD_EVENT_PUT,
    CRM_ETCD_EVENT_DELETE,
} crm_etcd_event_type;

typedef struct crm_etcd_event {
    crm_etcd_event_type type;
    crm_etcd_kv kv; /* for DELETE only key and mod_revision are set */
} crm_etcd_event;

/**
 * Called for each event in revision order; the event is borrowed for the
 * call. Return 0 to go on, non-zero to end the watch (crm_etcd_watch then
 * returns 0).
 */
typedef int (*crm_etcd_watch_fn)(void *arg, const crm_etcd_event *ev);

/**
 * Watch `key` (or, with `prefix`, every key under it) from revision
 * *revision (0 = from now) on one member (failing over only at connect),
 * blocking the calling thread. *revision is a cursor: it always holds the
 * revision to resume from (after each delivered event, mod_revision + 1), so
 * a caller re-watches after any error without losing or repeating events.
 * Ends with 0 when fn asked to stop, CR_ETCD_CTX_CANCELLED when *stop became
 * true (checked at least every 100 ms; stop may be NULL), CR_ERR_TIMEOUT
 * when duration_ms (> 0) passed, CR_ERR_ETCD_COMPACTED when *revision was
 * compacted (re-read the key, then watch from the read's revision + 1),
 * CR_ERR_METADATA_UNAVAILABLE when the stream broke or no member answered.
 */
int crm_etcd_watch(crm_etcd *c, const char *key, bool prefix, int64_t *revision, int duration_ms,
                   const atomic_bool *stop, crm_etcd_watch_fn fn, void *arg);

#endif
