/*
 * crescent/status.h - the one table of status codes used by every layer.
 *
 * Every crescent C function returns 0 (or a non-negative value) on success and
 * a negative cr_status on failure. The store's codes are numerically equal to
 * Mooncake's ErrorCode values so that Python bindings can pass them through
 * unchanged, and every layer uses them where they fit (a bad argument is
 * INVALID_PARAMS in the engine too). crescent's own codes live in their own
 * range, -3001..-3199 (CR_STATUS_OWN_FIRST and below), which Mooncake does
 * not use.
 *
 * Threading: every function here is pure and may be called from any thread.
 */
#ifndef CRESCENT_STATUS_H
#define CRESCENT_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CR_API __attribute__((visibility("default")))
#else
#define CR_API
#endif

/*
 * X(NAME, value, "message"). The enum, cr_status_name() and cr_strerror() are
 * all generated from this list, so they cannot drift apart.
 */
#define CR_STATUS_TABLE(X)                                                                         \
    X(OK, 0, "success")                                                                            \
    /* --- store codes: numerically identical to Mooncake's ErrorCode --- */                       \
    X(INTERNAL_ERROR, -1, "internal error")                                                        \
    X(BUFFER_OVERFLOW, -10, "buffer too small for the value")                                      \
    X(SHARD_INDEX_OUT_OF_RANGE, -100, "shard index out of range")                                  \
    X(SEGMENT_NOT_FOUND, -101, "segment not found")                                                \
    X(SEGMENT_ALREADY_EXISTS, -102, "segment already exists")                                      \
    X(CLIENT_NOT_FOUND, -103, "client not found")                                                  \
    X(NO_AVAILABLE_HANDLE, -200, "no space available for allocation")                              \
    X(INVALID_VERSION, -300, "invalid version")                                                    \
    X(INVALID_KEY, -400, "invalid key")                                                            \
    X(WRITE_FAIL, -500, "write failed")                                                            \
    X(INVALID_PARAMS, -600, "invalid parameters")                                                  \
    X(ILLEGAL_CLIENT, -601, "illegal client")                                                      \
    X(INVALID_WRITE, -700, "invalid write")                                                        \
    X(INVALID_READ, -701, "invalid read")                                                          \
    X(INVALID_REPLICA, -702, "invalid replica")                                                    \
    X(REPLICA_IS_NOT_READY, -703, "replica is not ready")                                          \
    X(OBJECT_NOT_FOUND, -704, "object not found")                                                  \
    X(OBJECT_ALREADY_EXISTS, -705, "object already exists")                                        \
    X(OBJECT_HAS_LEASE, -706, "object has an active lease")                                        \
    X(LEASE_EXPIRED, -707, "lease expired during the transfer")                                    \
    X(OBJECT_HAS_REPLICATION_TASK, -708, "object has a replication task")                          \
    X(OBJECT_NO_REPLICATION_TASK, -709, "object has no replication task")                          \
    X(REPLICA_NOT_FOUND, -710, "replica not found")                                                \
    X(REPLICA_ALREADY_EXISTS, -711, "replica already exists")                                      \
    X(REPLICA_IS_GONE, -712, "replica is gone")                                                    \
    X(REPLICA_NOT_IN_LOCAL_MEMORY, -713, "replica not in local memory")                            \
    X(OBJECT_REPLICA_BUSY, -714, "object replica is busy")                                         \
    X(TRANSFER_FAIL, -800, "transfer failed")                                                      \
    X(CHECKSUM_MISMATCH, -801, "checksum mismatch")                                                \
    X(RPC_FAIL, -900, "rpc failed")                                                                \
    X(RPC_TIMEOUT, -901, "rpc timed out")                                                          \
    X(ETCD_OPERATION_ERROR, -1000, "etcd operation error")                                         \
    X(ETCD_KEY_NOT_EXIST, -1001, "etcd key does not exist")                                        \
    X(ETCD_TRANSACTION_FAIL, -1002, "etcd transaction failed")                                     \
    X(ETCD_CTX_CANCELLED, -1003, "etcd context cancelled")                                         \
    X(UNAVAILABLE_IN_CURRENT_STATUS, -1010, "unavailable in current status")                       \
    X(UNAVAILABLE_IN_CURRENT_MODE, -1011, "unavailable in current mode")                           \
    X(NOT_SUPPORTED, -1012, "not supported")                                                       \
    /* --- crescent's own codes, -3001..-3199 (-3000 is retired: bad arguments in every layer      \
     * are INVALID_PARAMS); the transfer engine first --- */                                       \
    X(ERR_INVALID_CONFIG, -3001, "invalid configuration value")                                    \
    X(ERR_NO_MEMORY, -3002, "out of memory")                                                       \
    X(ERR_ADDRESS_NOT_REGISTERED, -3003, "address range is not registered")                        \
    X(ERR_ADDRESS_OVERLAPPED, -3004, "range overlaps a registered buffer")                         \
    X(ERR_OUT_OF_RANGE, -3005, "range extends past its registered buffer")                         \
    X(ERR_RANGE_OVERFLOW, -3006, "address plus length overflows")                                  \
    X(ERR_ZERO_LENGTH, -3007, "length is zero")                                                    \
    X(ERR_NOT_REMOTE_ACCESSIBLE, -3008, "buffer is not remote-accessible")                         \
    X(ERR_INVALID_HANDLE, -3009, "stale or invalid handle")                                        \
    X(ERR_TOO_MANY_REQUESTS, -3010, "more requests than the batch capacity")                       \
    X(ERR_BATCH_BUSY, -3011, "batch has transfers in flight")                                      \
    X(ERR_TRANSPORT_UNSUPPORTED, -3012, "no transport can serve this memory")                      \
    X(ERR_PEER_UNREACHABLE, -3013, "peer is unreachable")                                          \
    X(ERR_CONNECTION, -3014, "connection failed or was lost")                                      \
    X(ERR_TIMEOUT, -3015, "deadline expired")                                                      \
    X(ERR_CANCELED, -3016, "canceled")                                                             \
    X(ERR_MALFORMED_FRAME, -3017, "malformed or oversized frame")                                  \
    X(ERR_VERSION_MISMATCH, -3018, "protocol version mismatch")                                    \
    X(ERR_AUTH_FAILED, -3019, "peer authentication failed")                                        \
    X(ERR_METADATA, -3020, "metadata backend failure")                                             \
    X(ERR_METADATA_NOT_FOUND, -3021, "metadata key not found")                                     \
    X(ERR_DNS, -3022, "host name could not be resolved")                                           \
    X(ERR_BIND, -3023, "could not bind the listening socket")                                      \
    X(ERR_NOT_IMPLEMENTED, -3024, "not implemented")                                               \
    X(ERR_SHUTDOWN, -3025, "engine is shutting down")                                              \
    X(ERR_REMOTE, -3026, "peer reported an error")                                                 \
    X(ERR_SYSTEM, -3027, "system call failed")                                                     \
    X(ERR_NOT_FOUND, -3028, "not found")                                                           \
    X(ERR_DESCRIPTOR_FULL, -3029, "the segment descriptor cannot carry more registrations")        \
    X(ERR_BUSY, -3030, "resource busy; retry later")                                               \
    /* --- metadata servers (etcd, redis): -3100..-3119 --- */                                     \
    X(ERR_METADATA_UNAVAILABLE, -3100, "no metadata server answered in time")                      \
    X(ERR_LEASE_LOST, -3101, "lease expired or was revoked")                                       \
    X(ERR_METADATA_MALFORMED, -3102, "malformed reply from the metadata server")                   \
    X(ERR_ETCD_COMPACTED, -3103, "etcd revision was compacted")                                    \
    /* --- disk tier (src/disk): -3120..-3139 --- */                                               \
    X(ERR_DISK_FULL, -3120, "disk tier is full and nothing can be evicted")                        \
    X(ERR_DISK_IO, -3121, "disk I/O failed")                                                       \
    X(ERR_DISK_CORRUPT, -3122, "on-disk data is corrupt")                                          \
    X(ERR_DISK_LOCKED, -3123, "disk tier directory is in use by another process")                  \
    X(ERR_DISK_DIRECT_IO, -3124, "O_DIRECT I/O is refused by the filesystem")                      \
    X(ERR_OFFLOAD_STAGING, -3125, "the object is on its holder's disk and is being staged; retry") \
    X(ERR_OFFLOAD_UNAVAILABLE, -3126, "the disk holder of the object is not reachable")            \
    /* --- store master hardening: -3140..-3159 --- */                                             \
    X(ERR_REGEX_BUDGET, -3140, "regular expression exceeded its matching budget")                  \
    X(ERR_SEGMENT_FENCED, -3141, "segment accepts no allocations yet (fenced)")                    \
    X(ERR_NOT_LEADER, -3142, "this master is not the leader (HA standby or deposed)")              \
    X(ERR_NOT_REPLICATED, -3143, "the change reached no follower in time; its outcome is unknown") \
    X(ERR_PUT_COMMITTING, -3144, "a put of the object is committing; its readers wait for it")     \
    /* --- standalone store client and thin clients: -3060..-3079 --- */                           \
    X(ERR_DAEMON_UNREACHABLE, -3060,                                                               \
      "the standalone store client (crescent-client) is not "                                      \
      "reachable")                                                                                 \
    X(ERR_DAEMON_LOST, -3061, "crescent-client went away during the call; its outcome is unknown") \
    X(ERR_TENANT_MISMATCH, -3062,                                                                  \
      "the thin client's tenant is not the one crescent-client "                                   \
      "serves")                                                                                    \
    X(ERR_REGION_INVALID, -3063, "memory passed to crescent-client cannot be mapped as described") \
    /* --- copy-once transfers of unregistered local memory: -3080..-3089 --- */                   \
    X(ERR_NEEDS_REGISTERED, -3080,                                                                 \
      "the transport for this request moves registered local memory only")                         \
    /* --- master shared secret and Mooncake compatibility: -3160..-3169 --- */                    \
    X(ERR_MASTER_AUTH_REQUIRED, -3160,                                                             \
      "the master requires a shared secret this client does not have")                             \
    X(ERR_MASTER_AUTH_FAILED, -3161, "the master and this client do not share the same secret")    \
    /* --- device memory (src/device, transports/cuda): -3180..-3199 --- */                        \
    X(ERR_NO_CUDA, -3180, "CUDA is not available (no driver, or a build without CUDA)")            \
    X(ERR_CUDA, -3181, "a CUDA driver call failed")                                                \
    X(ERR_MEMORY_KIND_MISMATCH, -3182, "memory is not of the kind or device its location names")

/** Status codes. 0 is success; every failure is negative. */
typedef enum cr_status {
#define CR_STATUS_ENUM_(name, value, msg) CR_##name = (value),
    CR_STATUS_TABLE(CR_STATUS_ENUM_)
#undef CR_STATUS_ENUM_
} cr_status;

/** Codes at or below this one are crescent's own; above it (down to -1), Mooncake's. */
#define CR_STATUS_OWN_FIRST (-3000)

/**
 * The symbolic name of a status ("ERR_TIMEOUT", "OBJECT_NOT_FOUND"), or
 * "UNKNOWN" for a value not in the table. Returns a static string; never NULL.
 */
CR_API const char *cr_status_name(int status);

/**
 * A one-line human description of a status; "unknown status" for a value not
 * in the table. Returns a static string; never NULL.
 */
CR_API const char *cr_strerror(int status);

/**
 * Details of the most recent failure reported on the calling thread, e.g.
 * "protocol 'rdmaa' is not one of tcp, auto". Every public function that
 * returns a negative status writes this message first; it stays valid until
 * the same thread's next failing crescent call. Returns "" if the thread has
 * seen no failure. This is a diagnostic side channel only: no engine state
 * depends on which thread calls what.
 */
CR_API const char *cr_last_error_message(void);

#ifdef __cplusplus
}
#endif

#endif /* CRESCENT_STATUS_H */
