/*
 * transfer_engine_c.h - Mooncake's transfer-engine C interface, as
 * libcrescent-mooncake-compat provides it over crescent's engine.
 *
 * The declarations match Mooncake's own transfer_engine_c.h (the header its
 * Go and Rust bindings and NIXL's Mooncake plugin compile against): the
 * same names, types, macros and return conventions, so code built against
 * either header links against this library. What crescent does behind each
 * call, and which calls have nothing to do here, is in docs/compat.md.
 *
 * Return conventions (Mooncake's):
 *   - createTransferEngine: an engine, or NULL (the reason goes to stderr);
 *   - openSegment / openSegmentNoCache: a segment id >= 0 (LOCAL_SEGMENT for
 *     this engine's own segment), or -1;
 *   - allocateBatchID: a batch id, or INVALID_BATCH;
 *   - submitTransfer, submitTransferWithNotify, getTransferStatus,
 *     freeBatchID: 0, or a *positive* Mooncake status code (1 invalid
 *     argument, 2 too many requests, 3 address not registered, 4 batch
 *     busy, 8 transport not supported, 102 socket, 200 metadata, 302
 *     memory, 999 not implemented);
 *   - every other int: 0 (or a count), or a negative Mooncake error
 *     (ERR_INVALID_ARGUMENT -1, ERR_TOO_MANY_REQUESTS -2,
 *     ERR_ADDRESS_NOT_REGISTERED -3, ERR_BATCH_BUSY -4,
 *     ERR_ADDRESS_OVERLAPPED -7, ERR_DNS -101, ERR_SOCKET -102,
 *     ERR_REJECT_HANDSHAKE -104, ERR_METADATA -200, ERR_MEMORY -302,
 *     ERR_NOT_IMPLEMENTED -303).
 *
 * Strings passed in are copied before the call returns. Threading: as
 * crescent's engine, every function may be called from any thread, except
 * destroyTransferEngine, which no other call may overlap.
 */
#ifndef TRANSFER_ENGINE_C
#define TRANSFER_ENGINE_C

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Mooncake spells these types as macros; so do we, for code that relies on it. */
#define segment_handle_t int32_t
#define segment_id_t     int32_t
#define batch_id_t       uint64_t
#define LOCAL_SEGMENT    (0)
#define INVALID_BATCH    UINT64_MAX

#define OPCODE_READ  (0)
#define OPCODE_WRITE (1)

/* One transfer: READ copies target -> source, WRITE source -> target.
 * target_offset is the address in the target segment's memory. */
struct transfer_request {
    int opcode;
    void *source;
    segment_id_t target_id;
    uint64_t target_offset;
    uint64_t length;
};
typedef struct transfer_request transfer_request_t;

/* A notification: a name and a message, both NUL-terminated. */
struct notify_msg {
    char *name;
    char *msg;
};
typedef struct notify_msg notify_msg_t;

/* Task states (Mooncake's TransferStatusEnum). */
#define STATUS_WAITING   (0)
#define STATUS_PENDING   (1)
#define STATUS_INVALID   (2)
#define STATUS_CANCELED  (3)
#define STATUS_COMPLETED (4)
#define STATUS_TIMEOUT   (5)
#define STATUS_FAILED    (6)

struct transfer_status {
    int status;
    uint64_t transferred_bytes;
};

/* A segment to mount (Mooncake's RDMA / NVMe-oF descriptions; unused here). */
struct segment_desc {
    int type;
    union {
        struct {
            void *addr;
            uint64_t size;
            const char *location;
        } rdma;
        struct {
            const char *file_path;
            const char *subsystem_name;
            const char *proto;
            const char *ip;
            uint64_t port;
        } nvmeof;
    } desc_;
};

typedef struct transfer_status transfer_status_t;

/* One buffer for registerLocalMemoryBatch. */
struct buffer_entry {
    void *addr;
    size_t length;
};
typedef struct buffer_entry buffer_entry_t;

typedef struct segment_desc segment_desc_t;
typedef void *transfer_engine_t;
typedef void *transport_t;

/* Engine lifecycle and naming. */
transfer_engine_t createTransferEngine(const char *metadata_conn_string,
                                       const char *local_server_name, const char *ip_or_host_name,
                                       uint64_t rpc_port, int auto_discover);
int discoverTopology(transfer_engine_t engine);
int getLocalIpAndPort(transfer_engine_t engine, char *buf_out, size_t buf_len);
transport_t installTransport(transfer_engine_t engine, const char *proto, void **args);
int uninstallTransport(transfer_engine_t engine, const char *proto);
void destroyTransferEngine(transfer_engine_t engine);

/* Segments. */
segment_id_t openSegment(transfer_engine_t engine, const char *segment_name);
segment_id_t openSegmentNoCache(transfer_engine_t engine, const char *segment_name);
int closeSegment(transfer_engine_t engine, segment_id_t segment_id);
int warmupEfaSegment(transfer_engine_t engine, const char *segment_name);
int removeLocalSegment(transfer_engine_t engine, const char *segment_name);
int syncSegmentCache(transfer_engine_t engine);

/* Memory registration. */
int registerLocalMemory(transfer_engine_t engine, void *addr, size_t length, const char *location,
                        int remote_accessible);
int unregisterLocalMemory(transfer_engine_t engine, void *addr);
int registerLocalMemoryBatch(transfer_engine_t engine, buffer_entry_t *buffer_list,
                             size_t buffer_len, const char *location);
int unregisterLocalMemoryBatch(transfer_engine_t engine, void **addr_list, size_t addr_len);

/* Batches. */
batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size);
int submitTransfer(transfer_engine_t engine, batch_id_t batch_id, struct transfer_request *entries,
                   size_t count);
int submitTransferWithNotify(transfer_engine_t engine, batch_id_t batch_id,
                             struct transfer_request *entries, size_t count,
                             notify_msg_t notify_msg);
int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id, size_t task_id,
                      struct transfer_status *status);
int freeBatchID(transfer_engine_t engine, batch_id_t batch_id);

/* Notifications. getNotifsFromEngine returns a malloc'd array of *size
 * entries (NULL when there is none) to free with freeNotifsMsgBuf. */
notify_msg_t *getNotifsFromEngine(transfer_engine_t engine, int *size);
int freeNotifsMsgBuf(notify_msg_t *msg, int size);
int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id, notify_msg_t notify_msg);

/* Introspection. */
struct nic_load_stat {
    char device_name[64];
    uint64_t inflight_bytes;
    double ewma_bandwidth_bps;
};
typedef struct nic_load_stat nic_load_stat_t;

int getNicLoadStats(transfer_engine_t engine, nic_load_stat_t *stats, size_t *count);
void enableGracefulShutdown(transfer_engine_t engine);
int showLinks(transfer_engine_t engine, char *buf_out, size_t buf_len, int json);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFER_ENGINE_C */
