/*
 * backend.h - where segment descriptors are published and looked up.
 *
 * The engine talks to one backend chosen by the metadata connection string:
 *   "P2PHANDSHAKE"       no server; descriptors are fetched from the peer's
 *                        RPC port, so this backend stores nothing (put/del
 *                        succeed, get returns CR_ERR_METADATA_NOT_FOUND).
 *   "http://host:port/path"
 *                        GET/PUT/DELETE <url>?key=<escaped key>; 200 is
 *                        success, 404 on GET is "not found".
 *   "etcd://h:p[,h:p...][?ttl=N]", or the bare "h:p[,h:p...][?ttl=N]"
 *                        etcd v3 through its JSON gateway (etcd.h);
 *                        published keys live under a lease of N seconds
 *                        (default 10) that the backend keeps alive.
 *   "redis://h:p[?ttl=N]" redis through hiredis; published keys are SET
 *                        with PX N*1000 and refreshed every N/3 seconds.
 * See docs/metadata.md for the forms, key layout and failure behaviour.
 *
 * Keys are "<prefix>/ram/<segment>" (descriptor) and
 * "<prefix>/rpc_meta/<segment>" (how to reach the segment's RPC port).
 *
 * Threading: a backend may be used from many threads at once.
 */
#ifndef CRESCENT_METADATA_BACKEND_H
#define CRESCENT_METADATA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

typedef struct crm_backend crm_backend;

typedef struct crm_backend_ops {
    const char *name; /* "p2p", "http", "etcd", "redis" */
    /* Store value (borrowed for the call) under key. */
    int (*put)(crm_backend *b, const char *key, const void *value, size_t len);
    /*
     * Optional (NULL: put). Store value under key as this process's own
     * record: it must disappear within the backend's TTL once the process
     * dies, and the backend keeps it alive (and restores it after the
     * server lost it) until del or destroy. Publishing a key again replaces
     * its value.
     */
    int (*publish)(crm_backend *b, const char *key, const void *value, size_t len);
    /* On success *value is a malloc'd copy (caller frees), *len its size. */
    int (*get)(crm_backend *b, const char *key, void **value, size_t *len);
    /* Remove key (and stop keeping it alive); removing a missing key is success. */
    int (*del)(crm_backend *b, const char *key);
    /* Stop keeping keys alive, drop what this process published, free. */
    void (*destroy)(crm_backend *b);
} crm_backend_ops;

struct crm_backend {
    const crm_backend_ops *ops;
    /* true for P2PHANDSHAKE: the engine must ask peers directly */
    bool peer_to_peer;
    int timeout_ms;
};

/**
 * Parse a connection string and create its backend. Unknown schemes give
 * CR_ERR_INVALID_CONFIG with a message naming the string and the schemes
 * this build supports. timeout_ms bounds each operation.
 */
int crm_backend_open(const char *conn, int timeout_ms, crm_backend **out);

static inline void crm_backend_close(crm_backend *b)
{
    if (b != NULL)
        b->ops->destroy(b);
}

/** Publish (ops->publish, or put where the backend has no TTLs). */
static inline int crm_backend_publish(crm_backend *b, const char *key, const void *value,
                                      size_t len)
{
    return b->ops->publish != NULL ? b->ops->publish(b, key, value, len)
                                   : b->ops->put(b, key, value, len);
}

/* Default TTL of published keys in the etcd and redis backends. */
#define CRM_DEFAULT_TTL_S 10

/* Constructors of the built-in backends (used by crm_backend_open). */
int crm_p2p_backend_create(crm_backend **out);
int crm_http_backend_create(const char *url, int timeout_ms, crm_backend **out);
/* endpoints: "h:p[,h:p...]" (etcd.h); ttl_s: lease TTL of published keys. */
int crm_etcd_backend_create(const char *endpoints, int timeout_ms, int ttl_s, crm_backend **out);
/* host:port of the redis server; ttl_s: expiry of published keys. */
int crm_redis_backend_create(const char *hostport, int timeout_ms, int ttl_s, crm_backend **out);

#endif
