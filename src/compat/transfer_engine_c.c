/*
 * transfer_engine_c.c - Mooncake's transfer_engine_c.h over crescent's
 * engine (cr_engine).
 *
 * A transfer_engine_t is a crx_engine: the cr_engine and what Mooncake's
 * interface adds on top of it, all under one mutex:
 *
 *   segment ids   Mooncake addresses peers by small int ids; crescent by
 *                 generation-checked 64-bit handles. Id 0 (LOCAL_SEGMENT) is
 *                 this engine's own segment, ids 1.. index a table of
 *                 (name, handle), so opening a name twice gives the same id.
 *   notifications submitTransferWithNotify keeps (batch, target, message);
 *                 the message is sent once the batch is seen complete (in
 *                 getTransferStatus or freeBatchID), as Mooncake sends it
 *                 when it sees the batch completed. Messages travel as
 *                 "\0MCNOTIFY\0" name "\0" msg, the framing the mooncake
 *                 Python package uses, so both ends may be either.
 *   batches       the ids not yet freed, so that after enableGracefulShutdown
 *                 destroyTransferEngine waits for their transfers.
 *
 * Naming: in P2PHANDSHAKE mode the segment is "host:port" with the port
 * picked from MC_MIN_RPC_PORT..MC_MAX_RPC_PORT (15000..17000), as
 * Mooncake's; with a metadata server it is local_server_name. The protocol
 * is crescent's "auto" (memcpy / shared memory / tcp per buffer pair), or
 * "tcp" under MC_FORCE_TCP; installTransport accepts "tcp" and "rdma" and
 * refuses the hardware transports crescent does not have.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "compat/compat.h"
#include "transfer_engine_c.h"

#define ENGINE_MAGIC 0x43524e47u /* "CRNG" */

typedef struct crx_segment {
    char *name;
    cr_segment_handle handle;
} crx_segment;

typedef struct crx_notify {
    uint64_t batch;
    int32_t target;
    char *name, *msg;
} crx_notify;

typedef struct crx_engine {
    uint32_t magic;
    cr_engine *engine;
    char name[300];
    const char *protocol;
    pthread_mutex_t mu;
    crx_segment *segs; /* segs[0] is the local segment (its handle opened lazily) */
    size_t n_segs, cap_segs;
    crx_notify *notifies;
    size_t n_notifies, cap_notifies;
    uint64_t *batches;
    size_t n_batches, cap_batches;
    bool graceful, tcp_note;
} crx_engine;

static crx_engine *as_engine(transfer_engine_t e)
{
    crx_engine *x = e;
    return x != NULL && x->magic == ENGINE_MAGIC ? x : NULL;
}

/* Grow *v (n used, *cap slots of size sz) by one slot; 0 or -1. */
static int grow(void **v, size_t n, size_t *cap, size_t sz)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *nv = realloc(*v, ncap * sz);
    if (nv == NULL)
        return -1;
    *v = nv;
    *cap = ncap;
    return 0;
}

/* --- lifecycle ----------------------------------------------------------- */

CRX_EXPORT transfer_engine_t createTransferEngine(const char *metadata_conn_string,
                                                  const char *local_server_name,
                                                  const char *ip_or_host_name, uint64_t rpc_port,
                                                  int auto_discover)
{
    (void)rpc_port;      /* Mooncake picks the RPC port itself too */
    (void)auto_discover; /* crescent's transports need no topology discovery */
    crx_check_env();
    const char *meta, *proto;
    if (crx_metadata(metadata_conn_string, &meta) < 0 || crx_protocol("auto", &proto) < 0)
        return NULL;
    const char *server = local_server_name && *local_server_name ? local_server_name
                         : ip_or_host_name && *ip_or_host_name   ? ip_or_host_name
                                                                 : "127.0.0.1";
    char host[256];
    if (crx_host_part(server, host, sizeof(host)) < 0) {
        crx_log("createTransferEngine: local_server_name '%s' is too long", server);
        return NULL;
    }
    bool p2p = strcmp(meta, "P2PHANDSHAKE") == 0;
    bool legacy = crx_env_flag("MC_LEGACY_RPC_PORT_BINDING") && crx_has_port(server);
    crx_engine *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return NULL;
    static const char *const min_names[] = {"MC_MIN_RPC_PORT", "MC_MIN_PRC_PORT", NULL};
    static const char *const max_names[] = {"MC_MAX_RPC_PORT", "MC_MAX_PRC_PORT", NULL};
    int lo, hi;
    crx_port_range(min_names, max_names, 15000, 17000, &lo, &hi);
    int rc = CR_ERR_BIND;
    for (int attempt = 0; attempt < 20 && rc == CR_ERR_BIND; attempt++) {
        cr_engine_config cfg;
        cr_engine_config_init(&cfg);
        cfg.metadata = meta;
        cfg.protocol = proto;
        if (legacy) {
            cfg.local_hostname = server;
        } else {
            int port = crx_pick_port(host, lo, hi);
            if (port == 0) {
                crx_log("createTransferEngine: no free RPC port in [%d, %d] "
                        "(MC_MIN_RPC_PORT / MC_MAX_RPC_PORT)",
                        lo, hi);
                free(x);
                return NULL;
            }
            cfg.rpc_port = (uint16_t)port;
            /* P2P: the segment is host:port; with a metadata server it is the
             * name as given (without a port: the port lives in the metadata). */
            cfg.local_hostname = p2p ? host : server;
        }
        rc = cr_engine_create(&cfg, &x->engine);
        if (legacy)
            break;
    }
    if (rc < 0) {
        crx_log_failure("createTransferEngine", rc);
        free(x);
        return NULL;
    }
    if (ip_or_host_name && *ip_or_host_name && strcmp(ip_or_host_name, host) != 0 && !p2p)
        crx_log("createTransferEngine: crescent binds and advertises '%s' (local_server_name); "
                "ip_or_host_name '%s' is not used",
                host, ip_or_host_name);
    cr_engine_segment_name(x->engine, x->name, sizeof(x->name));
    x->protocol = proto;
    x->magic = ENGINE_MAGIC;
    pthread_mutex_init(&x->mu, NULL);
    x->segs = calloc(8, sizeof(*x->segs));
    x->cap_segs = 8;
    if (x->segs == NULL || (x->segs[0].name = strdup(x->name)) == NULL) {
        destroyTransferEngine(x);
        return NULL;
    }
    x->n_segs = 1;
    return x;
}

CRX_EXPORT void destroyTransferEngine(transfer_engine_t engine)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL)
        return;
    if (x->graceful) {
        /* Let transfers still running finish before the engine goes. */
        for (size_t i = 0; i < x->n_batches; i++)
            cr_batch_wait(x->engine, x->batches[i], -1);
    }
    cr_engine_destroy(x->engine);
    for (size_t i = 0; i < x->n_segs; i++)
        free(x->segs[i].name);
    for (size_t i = 0; i < x->n_notifies; i++) {
        free(x->notifies[i].name);
        free(x->notifies[i].msg);
    }
    free(x->segs);
    free(x->notifies);
    free(x->batches);
    pthread_mutex_destroy(&x->mu);
    x->magic = 0;
    free(x);
}

CRX_EXPORT int discoverTopology(transfer_engine_t engine)
{
    return as_engine(engine) ? 0 : CRX_TE_INVALID_ARGUMENT;
}

CRX_EXPORT int getLocalIpAndPort(transfer_engine_t engine, char *buf_out, size_t buf_len)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL || buf_out == NULL || buf_len == 0)
        return CRX_TE_INVALID_ARGUMENT;
    char host[256];
    if (crx_has_port(x->name)) {
        snprintf(buf_out, buf_len, "%s", x->name);
    } else if (crx_host_part(x->name, host, sizeof(host)) == 0) {
        snprintf(buf_out, buf_len, "%s:%u", host, (unsigned)cr_engine_rpc_port(x->engine));
    } else {
        return CRX_TE_INVALID_ARGUMENT;
    }
    return 0;
}

CRX_EXPORT transport_t installTransport(transfer_engine_t engine, const char *proto, void **args)
{
    (void)args; /* RDMA NIC priority matrices: nothing to configure */
    crx_engine *x = as_engine(engine);
    if (x == NULL || proto == NULL)
        return NULL;
    if (strcasecmp(proto, "tcp") != 0 && strcasecmp(proto, "rdma") != 0) {
        crx_log("installTransport: '%s' is not available in crescent (tcp and rdma are)", proto);
        return NULL;
    }
    pthread_mutex_lock(&x->mu);
    bool note = strcasecmp(proto, "tcp") == 0 && strcmp(x->protocol, "tcp") != 0 && !x->tcp_note;
    x->tcp_note = x->tcp_note || note;
    pthread_mutex_unlock(&x->mu);
    if (note)
        crx_log("installTransport('tcp'): crescent's engine also copies between processes of "
                "one host through shared memory; set MC_FORCE_TCP=1 for sockets only");
    /* Any non-NULL token; Mooncake's callers only test it against NULL. */
    return (transport_t)x->engine;
}

CRX_EXPORT int uninstallTransport(transfer_engine_t engine, const char *proto)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL || proto == NULL)
        return CRX_TE_INVALID_ARGUMENT;
    return strcasecmp(proto, "tcp") == 0 || strcasecmp(proto, "rdma") == 0
               ? 0
               : CRX_TE_INVALID_ARGUMENT;
}

/* --- segments -------------------------------------------------------------- */

/* The handle of segment id `id` (opening the local one on first use). */
static int segment_handle(crx_engine *x, int32_t id, cr_segment_handle *out)
{
    pthread_mutex_lock(&x->mu);
    if (id < 0 || (size_t)id >= x->n_segs) {
        pthread_mutex_unlock(&x->mu);
        crx_log("segment id %d was not returned by openSegment", (int)id);
        return CR_ERR_INVALID_HANDLE;
    }
    cr_segment_handle h = x->segs[id].handle;
    pthread_mutex_unlock(&x->mu);
    if (h == 0) {
        int rc = cr_engine_open_segment(x->engine, x->name, &h);
        if (rc < 0) {
            crx_log_failure("opening this engine's own segment", rc);
            return rc;
        }
        pthread_mutex_lock(&x->mu);
        x->segs[0].handle = h;
        pthread_mutex_unlock(&x->mu);
    }
    *out = h;
    return 0;
}

CRX_EXPORT segment_id_t openSegment(transfer_engine_t engine, const char *segment_name)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL || segment_name == NULL)
        return CRX_TE_INVALID_ARGUMENT;
    while (*segment_name == '/')
        segment_name++; /* Mooncake strips leading slashes too */
    if (*segment_name == '\0')
        return CRX_TE_INVALID_ARGUMENT;
    if (strcmp(segment_name, x->name) == 0)
        return LOCAL_SEGMENT;
    cr_segment_handle h;
    int rc = cr_engine_open_segment(x->engine, segment_name, &h);
    if (rc < 0) {
        crx_log_failure("openSegment", rc);
        return CRX_TE_INVALID_ARGUMENT;
    }
    pthread_mutex_lock(&x->mu);
    int32_t id = -1;
    for (size_t i = 1; i < x->n_segs && id < 0; i++)
        if (strcmp(x->segs[i].name, segment_name) == 0) {
            x->segs[i].handle = h;
            id = (int32_t)i;
        }
    if (id < 0 && x->n_segs < INT32_MAX &&
        grow((void **)&x->segs, x->n_segs, &x->cap_segs, sizeof(*x->segs)) == 0) {
        char *copy = strdup(segment_name);
        if (copy != NULL) {
            x->segs[x->n_segs] = (crx_segment){copy, h};
            id = (int32_t)x->n_segs++;
        }
    }
    pthread_mutex_unlock(&x->mu);
    return id;
}

CRX_EXPORT segment_id_t openSegmentNoCache(transfer_engine_t engine, const char *segment_name)
{
    /* crescent re-fetches the descriptor on every open: nothing is cached stale. */
    return openSegment(engine, segment_name);
}

CRX_EXPORT int closeSegment(transfer_engine_t engine, segment_id_t segment_id)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL)
        return CRX_TE_INVALID_ARGUMENT;
    (void)segment_id; /* as Mooncake's: ids stay valid; peers stay cached */
    return 0;
}

CRX_EXPORT int warmupEfaSegment(transfer_engine_t engine, const char *segment_name)
{
    (void)segment_name; /* no EFA: nothing to warm up, as Mooncake without EFA */
    return as_engine(engine) ? 0 : CRX_TE_INVALID_ARGUMENT;
}

CRX_EXPORT int removeLocalSegment(transfer_engine_t engine, const char *segment_name)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL || segment_name == NULL || *segment_name == '\0')
        return CRX_TE_INVALID_ARGUMENT;
    /* The segment's metadata goes with the engine (destroyTransferEngine);
     * removing it from a live engine is not possible in crescent. */
    crx_log("removeLocalSegment('%s'): not supported; crescent unpublishes a segment when its "
            "engine is destroyed",
            segment_name);
    return CRX_TE_NOT_IMPLEMENTED;
}

CRX_EXPORT int syncSegmentCache(transfer_engine_t engine)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL)
        return CRX_TE_INVALID_ARGUMENT;
    /* Re-open every known peer: crescent re-fetches descriptors on open. */
    pthread_mutex_lock(&x->mu);
    size_t n = x->n_segs;
    char **names = calloc(n ? n : 1, sizeof(*names));
    for (size_t i = 1; names != NULL && i < n; i++)
        names[i] = strdup(x->segs[i].name);
    pthread_mutex_unlock(&x->mu);
    if (names == NULL)
        return CRX_TE_MEMORY;
    int first = 0;
    for (size_t i = 1; i < n; i++) {
        cr_segment_handle h;
        int rc = names[i] ? cr_engine_open_segment(x->engine, names[i], &h) : CR_ERR_NO_MEMORY;
        if (rc < 0 && first == 0)
            first = crx_te_error(rc);
        free(names[i]);
    }
    free(names);
    return first;
}

/* --- memory ------------------------------------------------------------------ */

CRX_EXPORT int registerLocalMemory(transfer_engine_t engine, void *addr, size_t length,
                                   const char *location, int remote_accessible)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL)
        return CRX_TE_INVALID_ARGUMENT;
    int rc = cr_engine_register(x->engine, addr, length, location, remote_accessible != 0);
    if (rc < 0)
        crx_log_failure("registerLocalMemory", rc);
    return crx_te_error(rc);
}

CRX_EXPORT int unregisterLocalMemory(transfer_engine_t engine, void *addr)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL)
        return CRX_TE_INVALID_ARGUMENT;
    return crx_te_error(cr_engine_unregister(x->engine, addr));
}

CRX_EXPORT int registerLocalMemoryBatch(transfer_engine_t engine, buffer_entry_t *buffer_list,
                                        size_t buffer_len, const char *location)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL || (buffer_list == NULL && buffer_len > 0))
        return CRX_TE_INVALID_ARGUMENT;
    if (buffer_len == 0)
        return 0;
    cr_buffer_spec *specs = calloc(buffer_len, sizeof(*specs));
    if (specs == NULL)
        return CRX_TE_MEMORY;
    for (size_t i = 0; i < buffer_len; i++)
        specs[i] = (cr_buffer_spec){buffer_list[i].addr, buffer_list[i].length, location, true};
    int rc = cr_engine_register_batch(x->engine, specs, buffer_len);
    free(specs);
    if (rc < 0)
        crx_log_failure("registerLocalMemoryBatch", rc);
    return crx_te_error(rc);
}

CRX_EXPORT int unregisterLocalMemoryBatch(transfer_engine_t engine, void **addr_list,
                                          size_t addr_len)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL || (addr_list == NULL && addr_len > 0))
        return CRX_TE_INVALID_ARGUMENT;
    return crx_te_error(cr_engine_unregister_batch(x->engine, addr_list, addr_len));
}

/* --- batches ------------------------------------------------------------------ */

CRX_EXPORT batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL)
        return INVALID_BATCH;
    cr_batch_id b;
    int rc = cr_batch_create(x->engine, batch_size, &b);
    if (rc < 0) {
        crx_log_failure("allocateBatchID", rc);
        return INVALID_BATCH;
    }
    pthread_mutex_lock(&x->mu);
    if (grow((void **)&x->batches, x->n_batches, &x->cap_batches, sizeof(*x->batches)) == 0)
        x->batches[x->n_batches++] = b;
    pthread_mutex_unlock(&x->mu);
    return b;
}

/* Convert Mooncake requests; 0 or a crescent status. */
static int convert_requests(crx_engine *x, const struct transfer_request *entries, size_t count,
                            cr_transfer_request *out)
{
    for (size_t i = 0; i < count; i++) {
        const struct transfer_request *e = &entries[i];
        if (e->opcode != OPCODE_READ && e->opcode != OPCODE_WRITE) {
            crx_log("submitTransfer: request %zu has opcode %d (neither OPCODE_READ nor "
                    "OPCODE_WRITE)",
                    i, e->opcode);
            return CR_INVALID_PARAMS;
        }
        cr_segment_handle h;
        int rc = segment_handle(x, e->target_id, &h);
        if (rc < 0)
            return rc;
        out[i] = (cr_transfer_request){e->opcode == OPCODE_READ ? CR_OP_READ : CR_OP_WRITE,
                                       e->source, h, e->target_offset, e->length};
    }
    return 0;
}

CRX_EXPORT int submitTransfer(transfer_engine_t engine, batch_id_t batch_id,
                              struct transfer_request *entries, size_t count)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL || (entries == NULL && count > 0))
        return crx_te_status(CR_INVALID_PARAMS);
    cr_transfer_request *reqs = calloc(count ? count : 1, sizeof(*reqs));
    if (reqs == NULL)
        return crx_te_status(CR_ERR_NO_MEMORY);
    int rc = convert_requests(x, entries, count, reqs); /* logs its own failures */
    if (rc == 0) {
        rc = cr_batch_submit(x->engine, batch_id, reqs, count);
        if (rc < 0)
            crx_log_failure("submitTransfer", rc);
    }
    free(reqs);
    return crx_te_status(rc);
}

CRX_EXPORT int submitTransferWithNotify(transfer_engine_t engine, batch_id_t batch_id,
                                        struct transfer_request *entries, size_t count,
                                        notify_msg_t notify_msg)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL || entries == NULL || count == 0 || notify_msg.name == NULL ||
        notify_msg.msg == NULL)
        return crx_te_status(CR_INVALID_PARAMS); /* Mooncake: entries must not be empty */
    crx_notify n = {batch_id, entries[0].target_id, strdup(notify_msg.name),
                    strdup(notify_msg.msg)};
    if (n.name == NULL || n.msg == NULL) {
        free(n.name);
        free(n.msg);
        return crx_te_status(CR_ERR_NO_MEMORY);
    }
    int st = submitTransfer(engine, batch_id, entries, count);
    pthread_mutex_lock(&x->mu);
    if (st == 0 &&
        grow((void **)&x->notifies, x->n_notifies, &x->cap_notifies, sizeof(*x->notifies)) == 0) {
        x->notifies[x->n_notifies++] = n;
        n.name = n.msg = NULL;
    } else if (st == 0) {
        st = crx_te_status(CR_ERR_NO_MEMORY);
    }
    pthread_mutex_unlock(&x->mu);
    free(n.name);
    free(n.msg);
    return st;
}

/* Send a message to segment id `target`: 0 or a crescent status. */
static int send_notify(crx_engine *x, int32_t target, const char *name, const char *msg)
{
    cr_segment_handle h;
    int rc = segment_handle(x, target, &h); /* logs its own failures */
    if (rc < 0)
        return rc;
    char *payload;
    size_t len;
    if (crx_notify_frame(name, msg, CR_NOTIFY_MAX_MESSAGE, &payload, &len) < 0) {
        crx_log("notification '%s': name and message must fit %d bytes", name,
                CR_NOTIFY_MAX_MESSAGE);
        return CR_INVALID_PARAMS;
    }
    rc = cr_engine_notify(x->engine, h, payload, len);
    free(payload);
    if (rc < 0)
        crx_log_failure("sending a notification", rc);
    return rc;
}

/* Send batch b's pending notification if every task of it completed. */
static void flush_notify(crx_engine *x, uint64_t b)
{
    pthread_mutex_lock(&x->mu);
    size_t i = 0;
    while (i < x->n_notifies && x->notifies[i].batch != b)
        i++;
    if (i == x->n_notifies) {
        pthread_mutex_unlock(&x->mu);
        return;
    }
    pthread_mutex_unlock(&x->mu);
    if (cr_batch_wait(x->engine, b, 0) != 0)
        return; /* not (all) completed yet */
    pthread_mutex_lock(&x->mu);
    crx_notify n = {0};
    for (i = 0; i < x->n_notifies; i++)
        if (x->notifies[i].batch == b) {
            n = x->notifies[i];
            x->notifies[i] = x->notifies[--x->n_notifies];
            break;
        }
    pthread_mutex_unlock(&x->mu);
    if (n.name != NULL)
        send_notify(x, n.target, n.name, n.msg); /* logs its own failures */
    free(n.name);
    free(n.msg);
}

CRX_EXPORT int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id, size_t task_id,
                                 struct transfer_status *status)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL || status == NULL)
        return crx_te_status(CR_INVALID_PARAMS);
    cr_task_status st;
    int rc = cr_batch_task_status(x->engine, batch_id, task_id, &st);
    if (rc < 0)
        return crx_te_status(rc);
    status->status = st.state;
    status->transferred_bytes = st.transferred_bytes;
    if (st.state == CR_TASK_COMPLETED)
        flush_notify(x, batch_id);
    return 0;
}

CRX_EXPORT int freeBatchID(transfer_engine_t engine, batch_id_t batch_id)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL)
        return crx_te_status(CR_INVALID_PARAMS);
    flush_notify(x, batch_id);
    int rc = cr_batch_free(x->engine, batch_id);
    pthread_mutex_lock(&x->mu);
    for (size_t i = 0; rc == 0 && i < x->n_batches; i++)
        if (x->batches[i] == batch_id) {
            x->batches[i] = x->batches[--x->n_batches];
            break;
        }
    for (size_t i = 0; rc == 0 && i < x->n_notifies; i++) /* never completed: dropped */
        if (x->notifies[i].batch == batch_id) {
            free(x->notifies[i].name);
            free(x->notifies[i].msg);
            x->notifies[i] = x->notifies[--x->n_notifies];
            break;
        }
    pthread_mutex_unlock(&x->mu);
    return crx_te_status(rc);
}

/* --- notifications -------------------------------------------------------------- */

CRX_EXPORT notify_msg_t *getNotifsFromEngine(transfer_engine_t engine, int *size)
{
    crx_engine *x = as_engine(engine);
    if (size == NULL)
        return NULL;
    *size = 0;
    if (x == NULL)
        return NULL;
    cr_notification *list = NULL;
    size_t n = 0;
    if (cr_engine_take_notifications(x->engine, &list, &n) < 0 || n == 0)
        return NULL;
    notify_msg_t *out = calloc(n, sizeof(*out));
    for (size_t i = 0; out != NULL && i < n; i++) {
        if (crx_notify_parse(list[i].message, list[i].length, list[i].from, &out[i].name,
                             &out[i].msg) < 0) {
            freeNotifsMsgBuf(out, (int)n);
            out = NULL;
        }
    }
    cr_notifications_free(list, n);
    if (out != NULL)
        *size = (int)n;
    return out;
}

CRX_EXPORT int freeNotifsMsgBuf(notify_msg_t *msg, int size)
{
    for (int i = 0; msg != NULL && i < size; i++) {
        free(msg[i].name);
        free(msg[i].msg);
    }
    free(msg);
    return 0;
}

CRX_EXPORT int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id,
                                 notify_msg_t notify_msg)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL || notify_msg.name == NULL || notify_msg.msg == NULL || target_id > INT32_MAX)
        return CRX_TE_INVALID_ARGUMENT;
    int rc = send_notify(x, (int32_t)target_id, notify_msg.name, notify_msg.msg);
    /* Mooncake: an unknown segment id is ERR_METADATA */
    return rc == CR_ERR_INVALID_HANDLE ? CRX_TE_METADATA : crx_te_error(rc);
}

/* --- introspection ---------------------------------------------------------------- */

CRX_EXPORT int getNicLoadStats(transfer_engine_t engine, nic_load_stat_t *stats, size_t *count)
{
    if (as_engine(engine) == NULL || stats == NULL || count == NULL)
        return -1;
    *count = 0; /* crescent's transports use no RDMA NICs */
    return 0;
}

CRX_EXPORT void enableGracefulShutdown(transfer_engine_t engine)
{
    crx_engine *x = as_engine(engine);
    if (x != NULL) {
        pthread_mutex_lock(&x->mu);
        x->graceful = true;
        pthread_mutex_unlock(&x->mu);
    }
}

CRX_EXPORT int showLinks(transfer_engine_t engine, char *buf_out, size_t buf_len, int json)
{
    crx_engine *x = as_engine(engine);
    if (x == NULL || buf_out == NULL || buf_len == 0)
        return -1;
    cr_engine_stats st;
    if (cr_engine_get_stats(x->engine, &st) < 0)
        memset(&st, 0, sizeof(st));
    pthread_mutex_lock(&x->mu);
    size_t peers = x->n_segs - 1;
    pthread_mutex_unlock(&x->mu);
    if (json)
        snprintf(buf_out, buf_len,
                 "{\"segment\":\"%s\",\"protocol\":\"%s\",\"peers\":%zu,\"tcp_connects\":%llu,"
                 "\"shm_mappings\":%llu}",
                 x->name, x->protocol, peers, (unsigned long long)st.tcp_connects,
                 (unsigned long long)st.shm_mappings);
    else
        snprintf(buf_out, buf_len,
                 "segment %s protocol %s: %zu peers, %llu tcp connections, %llu shared mappings",
                 x->name, x->protocol, peers, (unsigned long long)st.tcp_connects,
                 (unsigned long long)st.shm_mappings);
    return 0;
}
