/*
 * http_server.h - an embeddable HTTP metadata server (Mooncake-compatible).
 *
 * Endpoints:
 *   GET    /metadata?key=K  200 + the value bytes, or 404
 *   PUT    /metadata?key=K  store the request body; 200. A body over
 *                           max_value_bytes is 413; one that would take the
 *                           server over its quota (max_total_bytes of keys
 *                           and values, stored and arriving, or max_keys
 *                           keys) is 507 and changes nothing.
 *   DELETE /metadata?key=K  200 if the key was there, 404 if not
 *   GET    /health          200 "OK"
 * A missing or empty key parameter is 400, another path 404, another method
 * 405. Values live in memory only; stopping the server drops them.
 *
 * Bounded resources (issue 11 items 11 and 12): an announced
 * Content-Length reserves quota, not memory: a body's buffer grows with
 * the bytes that actually arrive. Connections go through the gate of
 * httpd/mhd_server.h (slow request heads never take a slot; at most
 * max_connections requests at once, each within request_timeout_ms).
 * Large values are mapped memory, returned to the system when deleted.
 *
 * Each server is self-contained (no globals), so a process may run several;
 * the standalone crescent-metadata-server and the master both embed it.
 *
 * Threading: requests are served on the server's own threads; the functions
 * below may be called from any thread, but stop must not race with the
 * others on the same server.
 */
#ifndef CRESCENT_METADATA_HTTP_SERVER_H
#define CRESCENT_METADATA_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>

/** Largest PUT body accepted by default. */
#define CRD_HTTP_SERVER_MAX_VALUE ((size_t)64 << 20)

typedef struct crd_http_server crd_http_server;

typedef struct crd_http_server_config {
    uint64_t max_total_bytes;    /* keys + values, stored and arriving: 256 MiB */
    uint64_t max_value_bytes;    /* one value: CRD_HTTP_SERVER_MAX_VALUE (64 MiB) */
    uint64_t max_keys;           /* 1 000 000 */
    unsigned max_connections;    /* requests served at once: 1024 */
    unsigned request_timeout_ms; /* a request, body included, from its accept: 30000 */
    unsigned threads;            /* worker threads: 4 */
} crd_http_server_config;

/** Fill the defaults above. */
void crd_http_server_config_default(crd_http_server_config *cfg);

/**
 * Start serving on host:port (a numeric address or a name; port 0 lets the
 * kernel pick, see crd_http_server_port) with cfg (NULL: defaults). Binds
 * only to that address. Errors: CR_INVALID_PARAMS (also a zero
 * quota or limit), CR_ERR_DNS, CR_ERR_BIND (message names host:port and
 * the reason), CR_ERR_NO_MEMORY.
 */
int crd_http_server_start_with(const char *host, uint16_t port, const crd_http_server_config *cfg,
                               crd_http_server **out);

/** crd_http_server_start_with and the defaults. */
int crd_http_server_start(const char *host, uint16_t port, crd_http_server **out);

/** The port actually bound. */
uint16_t crd_http_server_port(const crd_http_server *s);

/**
 * Delete the transfer engine's entries of segment `name`: every key ending in
 * "/ram/<name>" or "/rpc_meta/<name>" (whatever the engine's prefix). For the
 * master's --enable_metadata_cleanup_on_timeout. Returns how many went.
 */
size_t crd_http_server_forget_segment(crd_http_server *s, const char *name);

/** Number of keys currently stored. */
size_t crd_http_server_key_count(crd_http_server *s);

/** Bytes of keys and values stored (what the quota counts, without arriving bodies). */
uint64_t crd_http_server_stored_bytes(crd_http_server *s);

/** Close the listener and all connections, join the threads, free everything. NULL is ok. */
void crd_http_server_stop(crd_http_server *s);

#endif
