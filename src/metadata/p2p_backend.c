/*
 * p2p_backend.c - the "P2PHANDSHAKE" backend: no metadata server at all.
 *
 * In P2P mode each engine serves its own segment descriptor from its RPC
 * port and peers ask for it directly, so there is nothing to publish: put
 * and del succeed without doing anything, and get always reports "not
 * found" so that a caller that forgot to check peer_to_peer learns why.
 * The backend holds no state besides its header; it is thread-safe.
 */
#include <stdlib.h>

#include "base/error.h"
#include "metadata/backend.h"

static int p2p_put(crm_backend *b, const char *key, const void *value, size_t len)
{
    return 0;
}

static int p2p_get(crm_backend *b, const char *key, void **value, size_t *len)
{
    return crb_error(CR_ERR_METADATA_NOT_FOUND,
                     "P2PHANDSHAKE metadata stores nothing; ask the peer for '%.200s' directly",
                     key != NULL ? key : "(null)");
}

static int p2p_del(crm_backend *b, const char *key)
{
    return 0;
}

static void p2p_destroy(crm_backend *b)
{
    free(b);
}

static const crm_backend_ops p2p_ops = {
    .name = "p2p",
    .put = p2p_put,
    .get = p2p_get,
    .del = p2p_del,
    .destroy = p2p_destroy,
};

int crm_p2p_backend_create(crm_backend **out)
{
    crm_backend *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "P2PHANDSHAKE backend: out of memory");
    b->ops = &p2p_ops;
    b->peer_to_peer = true;
    *out = b;
    return 0;
}
