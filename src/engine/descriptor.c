/*
 * descriptor.c - this engine's segment descriptor: built from the registry
 * (each buffer with the blobs its transports made) and the transports'
 * endpoints, cached in encoded form until the registry changes, served to
 * peers (DESC_GET) and, with a metadata server, published under
 * "<prefix>/ram/<segment>" next to "<prefix>/rpc_meta/<segment>" = "host:port"
 * (crm_backend_publish: with etcd or redis the keys live under a TTL the
 * backend keeps alive, so they vanish when this process dies).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "engine/internal.h"

/* Endpoint addresses of every transport that has one. */
static int collect_endpoints(cr_engine *e, crp_endpoint *eps, crp_buf *addrs, size_t *n_eps)
{
    size_t n = 0;
    for (size_t t = 0; t < e->n_tps; t++) {
        if (e->tps[t].ops->endpoint == NULL)
            continue;
        int rc = e->tps[t].ops->endpoint(&e->tps[t], &addrs[t]);
        if (rc < 0)
            return rc;
        if (addrs[t].len == 0)
            continue;
        eps[n++] = (crp_endpoint){(char *)e->tps[t].ops->name, (char *)addrs[t].data, addrs[t].len};
    }
    *n_eps = n;
    return 0;
}

typedef struct encode_job {
    cr_engine *engine;
    crp_endpoint *eps;
    size_t n_eps;
    uint64_t version;
} encode_job;

/* Under the registry's read lock: the buffers' blobs are encoded in place
 * (they are immutable while a buffer is in the table). */
static int encode_locked(void *ctx, cre_buffer *const *items, size_t n, uint64_t version)
{
    encode_job *job = ctx;
    cr_engine *e = job->engine;
    crp_buffer_desc *bufs = calloc(n ? n : 1, sizeof(*bufs));
    crp_blob *blobs = calloc((n ? n : 1) * CRE_MAX_TRANSPORTS, sizeof(*blobs));
    int rc = 0;
    if (bufs == NULL || blobs == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "descriptor of %zu buffers", n);
        goto out_free;
    }
    for (size_t i = 0; i < n; i++) {
        const cre_buffer *b = items[i];
        crp_blob *x = &blobs[i * CRE_MAX_TRANSPORTS];
        bufs[i] = (crp_buffer_desc){.addr = b->addr,
                                    .length = b->length,
                                    .kind = (uint8_t)b->kind,
                                    .device = b->device,
                                    .remote_accessible = b->remote_accessible,
                                    .blobs = x};
        for (size_t t = 0; t < e->n_tps; t++)
            if (b->tp_blob[t].len > 0)
                x[bufs[i].n_blobs++] =
                    (crp_blob){(char *)e->tps[t].ops->name, b->tp_blob[t].data, b->tp_blob[t].len};
        if (bufs[i].n_blobs == 0)
            bufs[i].blobs = NULL;
    }
    crp_descriptor d = {.name = e->segment_name,
                        .host_id = e->host_id,
                        .instance = e->instance,
                        .version = version,
                        .n_endpoints = job->n_eps,
                        .endpoints = job->eps,
                        .n_buffers = n,
                        .buffers = bufs};
    crp_buf_reset(&e->desc_encoded);
    rc = crp_descriptor_encode(&d, &e->desc_encoded);
    job->version = version;
out_free:
    free(bufs);
    free(blobs);
    return rc;
}

/* Rebuild e->desc_encoded if the registry moved. Caller holds desc_lock. */
static int rebuild_locked(cr_engine *e)
{
    if (e->desc_built && cre_registry_version(&e->registry) == e->desc_version)
        return 0;
    crp_endpoint eps[CRE_MAX_TRANSPORTS];
    crp_buf addrs[CRE_MAX_TRANSPORTS] = {{0}};
    encode_job job = {.engine = e, .eps = eps};
    int rc = collect_endpoints(e, eps, addrs, &job.n_eps);
    if (rc == 0)
        rc = cre_registry_visit(&e->registry, encode_locked, &job);
    if (rc == 0) {
        e->desc_version = job.version;
        e->desc_built = true;
    }
    for (size_t t = 0; t < CRE_MAX_TRANSPORTS; t++)
        crp_buf_free(&addrs[t]);
    return rc;
}

int cre_descriptor_encoded(cr_engine *e, crp_buf *copy_out)
{
    pthread_mutex_lock(&e->desc_lock);
    int rc = rebuild_locked(e);
    if (rc == 0) {
        crp_buf_reset(copy_out);
        uint8_t *d = realloc(copy_out->data, e->desc_encoded.len ? e->desc_encoded.len : 1);
        if (d == NULL) {
            rc = crb_error(CR_ERR_NO_MEMORY, "copying the descriptor");
        } else {
            memcpy(d, e->desc_encoded.data, e->desc_encoded.len);
            copy_out->data = d;
            copy_out->len = e->desc_encoded.len;
            copy_out->cap = e->desc_encoded.len ? e->desc_encoded.len : 1;
        }
    }
    pthread_mutex_unlock(&e->desc_lock);
    return rc;
}

static void meta_key(const cr_engine *e, const char *kind, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s/%s", e->metadata_prefix, kind, e->segment_name);
}

int cre_descriptor_publish(cr_engine *e)
{
    if (e->metadata->peer_to_peer)
        return 0;
    char key[512];
    crp_buf enc = {0};
    int rc = cre_descriptor_encoded(e, &enc);
    if (rc == 0) {
        meta_key(e, "ram", key, sizeof(key));
        rc = crm_backend_publish(e->metadata, key, enc.data, enc.len);
    }
    if (rc == 0) {
        char rpc[CRB_HOST_MAX + 8];
        int len = snprintf(rpc, sizeof(rpc), "%s:%u", e->hostname, (unsigned)e->rpc_port);
        meta_key(e, "rpc_meta", key, sizeof(key));
        rc = crm_backend_publish(e->metadata, key, rpc, (size_t)len);
    }
    crp_buf_free(&enc);
    return rc;
}

void cre_descriptor_unpublish(cr_engine *e)
{
    if (e->metadata == NULL || e->metadata->peer_to_peer)
        return;
    char key[512];
    meta_key(e, "ram", key, sizeof(key));
    e->metadata->ops->del(e->metadata, key);
    meta_key(e, "rpc_meta", key, sizeof(key));
    e->metadata->ops->del(e->metadata, key);
}
