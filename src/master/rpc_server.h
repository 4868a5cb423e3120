/*
 * rpc_server.h - the master's RPC front end: a TCP listener and a few I/O
 * threads (one base/evloop.h loop each) that read CRP_RPC_REQ frames
 * (reassembled by proto/frame_reader.h), run them on the service through
 * crk_dispatch and write CRP_RPC_RESP frames back. Requests on one
 * connection are answered in order, and a client may pipeline as many as it
 * likes; connections are spread over the threads.
 *
 * A frame whose header is malformed (bad magic, oversized body, unknown
 * type, data bytes) gets one ERROR frame and the connection is closed, since
 * the stream cannot be resynchronised; a well-framed body that does not
 * decode gets an ERROR frame and the connection keeps serving.
 */
#ifndef CRESCENT_MASTER_RPC_SERVER_H
#define CRESCENT_MASTER_RPC_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "master/dispatch.h"
#include "master/service.h"

/* A read of a key committed ahead of its copy (docs/WIRE.md, "Commit ahead") is held this long
 * at most: the writer's end was written before its put returned, but a lost TCP segment is sent
 * again only after an RTO (200 ms at least, doubling), so this covers two tries. The admin
 * HTTP key queries wait as long. */
#define CRK_COMMIT_WAIT_MS 1000

typedef struct crk_rpc_server crk_rpc_server;

/* Latency histogram buckets: bucket i counts requests that took
 * < 2^i microseconds (the last bucket is "everything slower"). */
#define CRK_LAT_BUCKETS 24

/** How the server listens and treats connections. */
typedef struct crk_rpc_server_options {
    const char *host;         /* address to bind */
    uint16_t port;            /* 0: the kernel picks (crk_rpc_server_port) */
    unsigned threads;         /* I/O threads; 0 = 2 */
    bool tcp_nodelay;         /* TCP_NODELAY on accepted connections */
    uint64_t idle_timeout_ms; /* close a connection silent this long; 0 = never */
    unsigned max_connections; /* connections served at once; 0 = from RLIMIT_NOFILE */
    uint32_t busy_poll_us;    /* an I/O thread that handled events polls this long before it
                                 sleeps again (crb_loop_set_busy_poll); 0 = adaptive_poll says */
    bool adaptive_poll;       /* with busy_poll_us 0: poll adaptively (base/spin.h); false:
                                 never spin */
    bool local_socket;        /* also listen on an abstract unix socket offered to clients on
                                 this host (docs/WIRE.md "Local socket") */
} crk_rpc_server_options;

/** Defaults: 127.0.0.1, port 0, 2 threads, TCP_NODELAY, no idle timeout, a local socket,
 * no polling. */
void crk_rpc_server_options_default(crk_rpc_server_options *o);

/**
 * Listen and serve as `opt` says. The service and info must outlive the
 * server. On success *out owns the running server.
 */
int crk_rpc_server_start(crk_service *svc, const crk_server_info *info,
                         const crk_rpc_server_options *opt, crk_rpc_server **out);

uint16_t crk_rpc_server_port(const crk_rpc_server *srv);

/** Copy the latency histogram of op index `op_index` (crp_rpc_op_index). */
void crk_rpc_server_latency(crk_rpc_server *srv, int op_index, uint64_t out[CRK_LAT_BUCKETS]);

/** Counters of the transport itself. */
typedef struct crk_rpc_server_stats {
    uint64_t connections_accepted;
    uint64_t connections_open;
    uint64_t frames_in;
    uint64_t malformed_frames;
    uint64_t connections_refused; /* over max_connections: accepted and closed */
    uint64_t connections_shed;    /* at the fd limit: accepted and closed */
    uint64_t connections_idle_closed;
    uint64_t stage_waits;         /* gets held for a disk stage ("swt", docs/WIRE.md) */
    uint64_t stage_waits_expired; /* ... answered "being staged" at the end of their wait */
    uint64_t task_waits;          /* holders' heartbeats held for tasks ("swt") */
    uint64_t local_accepted;      /* of connections_accepted: on the local socket */
    uint64_t commit_waits; /* reads of a committing key held (docs/WIRE.md, "Commit ahead") */
    uint64_t commit_waits_expired; /* ... answered as a put in flight at the end of their wait */
} crk_rpc_server_stats;
void crk_rpc_server_stats_get(crk_rpc_server *srv, crk_rpc_server_stats *out);

/** Stop accepting, close every connection, join the threads, free. NULL ok. */
void crk_rpc_server_stop(crk_rpc_server *srv);

#endif
