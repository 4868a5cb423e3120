/*
 * master_client.h - a client's connection to crescent-master.
 *
 * One persistent TCP connection, opened with the SERVICE_READY handshake
 * (protocol version and capabilities; a mismatch is CR_INVALID_VERSION with
 * a message naming both versions). Any number of threads may call at once:
 * requests are pipelined on the connection, and one waiting caller at a
 * time reads the socket and matches replies to callers by request id
 * (leader/follower; no reader thread). A broken connection fails the calls
 * in flight with CR_RPC_FAIL and is re-opened by the next call. An
 * "etcd://" address follows the HA leader (store/leader.h): calls refused
 * with NOT_LEADER or cut by a failover are retried within their deadline.
 *
 * Shared secret: when CRESCENT_MASTER_SECRET is set (read at connect), the
 * handshake answers the master's challenge with it and checks the master's
 * proof (docs/WIRE.md, "Master shared secret"); a master that asks for a
 * secret the client lacks fails the connect with CR_ERR_MASTER_AUTH_REQUIRED,
 * a wrong secret (either side) with CR_ERR_MASTER_AUTH_FAILED.
 */
#ifndef CRESCENT_STORE_MASTER_CLIENT_H
#define CRESCENT_STORE_MASTER_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/rpc.h"

typedef struct crc_master crc_master;

/**
 * Connect to "host:port" within timeout_ms and handshake. "etcd://h:p[,h:p]"
 * names an HA master (docs/ha.md): the leader is looked up in etcd at every
 * (re)connection, a master announcing a lower term than one seen is
 * refused, and crc_master_call retries a call that met no leader (refused or
 * lost connection, ERR_NOT_LEADER) within its timeout. client_id is sent
 * in SERVICE_READY. On success *out owns the connection.
 * Errors: CR_INVALID_PARAMS (bad address), CR_RPC_FAIL (cannot reach
 * it), CR_RPC_TIMEOUT, CR_INVALID_VERSION, CR_ERR_MASTER_AUTH_REQUIRED,
 * CR_ERR_MASTER_AUTH_FAILED.
 */
int crc_master_connect(const char *address, crp_rpc_uuid client_id, int timeout_ms,
                       crc_master **out);

/**
 * Send req and wait for its reply (at most timeout_ms). On success (0) *resp
 * holds the decoded reply — its own status says how the operation went —
 * and must be released with crp_rpc_resp_clear. Errors (transport only):
 * CR_RPC_FAIL, CR_RPC_TIMEOUT, or the request's encoding error. A reply
 * that is an ERROR frame (the master could not decode the request) comes
 * back as 0 with resp->status set to the master's code.
 */
int crc_master_call(crc_master *m, const crp_rpc_req *req, crp_rpc_resp *resp, int timeout_ms);

/**
 * crc_master_call, and once the request is on the wire (the first time it is, if an HA
 * call is retried), sent(sent_arg) on the calling thread before it waits for the reply:
 * work to overlap with the master's. Not called when the request never went out. The wait
 * for the reply ends timeout_ms after the request went out or after sent returned,
 * whichever is later: the caller's own work does not use it up.
 */
typedef void (*crc_sent_fn)(void *arg);
int crc_master_call_sent(crc_master *m, const crp_rpc_req *req, crp_rpc_resp *resp, int timeout_ms,
                         crc_sent_fn sent, void *sent_arg);

/**
 * Two calls in one write: a, then b, on this connection (served in that order), and
 * both replies waited for (at most timeout_ms in all). 0: *resp_a and *resp_b hold
 * decoded replies, each to release with crp_rpc_resp_clear; otherwise neither does
 * (transport errors as crc_master_call's). Through etcd the pair is sent again to
 * the new leader when a (whose reply came first) found none; a NOT_LEADER of b
 * alone is left in *resp_b.
 */
int crc_master_call2(crc_master *m, const crp_rpc_req *a, crp_rpc_resp *resp_a,
                     const crp_rpc_req *b, crp_rpc_resp *resp_b, int timeout_ms);

/**
 * crc_master_call_sent for n (1 or 2) requests in one write, answered as crc_master_call2's.
 * *conn_out (may be NULL) names the connection they went out on (for crc_master_send_on); it
 * is written once they did, also when the wait for the replies then fails (a timeout: the
 * caller may still have to undo on that connection what it asked for), and not at all when
 * nothing went out. A request with commit_ahead set is never written to a master that
 * did not announce CRP_RPC_CAP_COMMIT_AHEAD (checked at the write: CR_NOT_SUPPORTED, sent()
 * not called), since an older master would ignore "ca" and complete the key at once (for a
 * BATCH_PUT_END: CRP_RPC_CAP_BATCH_COMMIT_AHEAD).
 */
int crc_master_calls_sent(crc_master *m, const crp_rpc_req *const *reqs, crp_rpc_resp *const *resps,
                          size_t n, int timeout_ms, crc_sent_fn sent, void *sent_arg,
                          uint64_t *conn_out);

/**
 * crc_master_send, but only on the connection conn (from crc_master_calls_sent): when that
 * one was lost (whether or not another replaced it) nothing is written and the answer is
 * CR_RPC_FAIL. For a notice that means something only to the connection that made the
 * state it ends (a committed-ahead put's end: the master revokes that put when its
 * connection closes).
 */
int crc_master_send_on(crc_master *m, const crp_rpc_req *req, int timeout_ms, uint64_t conn);

/**
 * Send req without waiting for its reply (dropped when it comes): for
 * notices whose outcome the caller does not act on (RELEASE_LEASES). Goes
 * out in order with the calls on this connection. Does not reconnect: 0 if
 * the frame was written within timeout_ms, else CR_RPC_FAIL /
 * CR_RPC_TIMEOUT (the caller loses nothing but the notice).
 */
int crc_master_send(crc_master *m, const crp_rpc_req *req, int timeout_ms);

/**
 * Queue req to go out ahead of the next call's request on this connection,
 * in the same write, its reply dropped when it comes: for notices whose
 * outcome the caller does not act on (RELEASE_LEASES). On this 2-vCPU VM a
 * write that wakes the idle master costs ~14 us and one that finds it busy
 * ~7 us, so a notice written on its own after a call costs the next call's
 * wake-up again. Queued notices go out with the next call, when they pass 64
 * KiB, or through crc_master_flush_later, whichever comes first. 0 when
 * queued (or written); CR_RPC_FAIL without a connection (not queued: the
 * caller loses the notice, nothing else), or the write's error. Thread-safe.
 */
int crc_master_send_later(crc_master *m, const crp_rpc_req *req, int timeout_ms);

/**
 * Write the queued notices if the oldest has waited min_age_ns or more (0:
 * whatever is queued, waiting for the write lock; otherwise it returns at
 * once when a call is being written, which takes the notices with it). 0 when there was nothing to
 * do or they went out, else the write's error (the notices are dropped then). Thread-safe; a store
 * calls it on its heartbeat thread's 20 ms tick and before it closes.
 */
int crc_master_flush_later(crc_master *m, uint64_t min_age_ns, int timeout_ms);

/** The capabilities (CRP_RPC_CAP_*) the master announced at the last handshake. */
uint64_t crc_master_caps(crc_master *m);

/** Send every later request in tenant's namespace (the RPC's "tn"; NULL,
 *  "" or "default": the default tenant). Call before the connection is
 *  shared. Errors: CR_INVALID_PARAMS (longer than CRP_RPC_MAX_TENANT). */
int crc_master_set_tenant(crc_master *m, const char *tenant);

/** The tenant set with crc_master_set_tenant ("" for the default one). The string lives as
 *  long as m; any thread. */
const char *crc_master_tenant(const crc_master *m);

/** Is the connection now the master's local socket (docs/WIRE.md "Local socket")?
 *  false while disconnected or on TCP. Any thread. */
bool crc_master_on_local_socket(crc_master *m);

/** The master's view version seen at the last handshake (changes on restart). */
uint64_t crc_master_view(crc_master *m);

/** Close and free. No call may be in progress. NULL is a no-op. */
void crc_master_close(crc_master *m);

#endif
