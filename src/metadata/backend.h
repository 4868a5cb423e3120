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
 *   later "etcd://..." and "redis://..." slot in as further ops tables.
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
    const char *name; /* "p2p", "http" */
    /* Store value (borrowed for the call) under key. */
    int (*put)(crm_backend *b, const char *key, const void *value, size_t len);
    /* On success *value is a malloc'd copy (caller frees), *len its size. */
    int (*get)(crm_backend *b, const char *key, void **value, size_t *len);
    /* Remove key; removing a missing key is success. */
    int (*del)(crm_backend *b, const char *key);
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

/* Constructors of the built-in backends (used by crm_backend_open). */
int crm_p2p_backend_create(crm_backend **out);
int crm_http_backend_create(const char *url, int timeout_ms, crm_backend **out);

#endif
