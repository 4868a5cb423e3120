/*
 * descriptor.c - this engine's segment descriptor: built from a registry
 * snapshot, cached in encoded form until the registry changes, served to
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

/*
 * A buffer's same-host handle: "c<slot>.<gen>" (its control-page slot) and,
 * for shareable memory, ",m<region>.<offset>" (its cr_alloc_shared region
 * and offset). Returns false when there is nothing to say.
 */
bool cre_handle_format(const cre_buffer_spec *s, char *out, size_t cap)
{
    if (s->ctl_gen == 0)
        return false;
    int n = snprintf(out, cap, "c%u.%llu", s->ctl_slot, (unsigned long long)s->ctl_gen);
    if (s->shared_id != 0)
        snprintf(out + n, cap - (size_t)n, ",m%llu.%llu", (unsigned long long)s->shared_id,
                 (unsigned long long)s->shared_offset);
    return true;
}

bool cre_handle_parse(const char *h, cre_buffer_extra *out)
{
    cre_buffer_extra x = {0};
    unsigned slot;
    unsigned long long gen, id = 0, off = 0;
    int used = 0;
    if (h == NULL || sscanf(h, "c%u.%llu%n", &slot, &gen, &used) != 2)
        return false;
    if (h[used] == ',' && sscanf(h + used, ",m%llu.%llu", &id, &off) != 2)
        return false;
    if (slot >= CRE_CTL_SLOTS || gen == 0)
        return false;
    x.ctl_slot = slot;
    x.ctl_gen = gen;
    x.shared_id = id;
    x.shared_offset = off;
    *out = x;
    return true;
}

static uint64_t registry_version(cre_registry *r)
{
    pthread_rwlock_rdlock(&r->lock);
    uint64_t v = r->version;
    pthread_rwlock_unlock(&r->lock);
    return v;
}

/* Rebuild e->desc_encoded if the registry moved. Caller holds desc_lock. */
static int rebuild_locked(cr_engine *e)
{
    if (e->desc_built && registry_version(&e->registry) == e->desc_version)
        return 0;
    cre_buffer_spec *specs;
    size_t n;
    uint64_t version;
    int rc = cre_registry_snapshot(&e->registry, &specs, &n, &version);
    if (rc < 0)
        return rc;
    crp_buffer_desc *bufs = calloc(n ? n : 1, sizeof(*bufs));
    char(*handles)[64] = calloc(n ? n : 1, sizeof(*handles));
    if (bufs == NULL || handles == NULL) {
        free(bufs);
        free(handles);
        free(specs);
        return crb_error(CR_ERR_NO_MEMORY, "descriptor of %zu buffers", n);
    }
    for (size_t i = 0; i < n; i++) {
        bufs[i] = (crp_buffer_desc){.addr = specs[i].addr,
                                    .length = specs[i].length,
                                    .kind = (uint8_t)specs[i].kind,
                                    .device = specs[i].device,
                                    .remote_accessible = specs[i].remote_accessible};
        if (cre_handle_format(&specs[i], handles[i], sizeof(handles[i])))
            bufs[i].shm_handle = handles[i];
    }
    char address[CRB_HOST_MAX + 8], pid[24];
    snprintf(address, sizeof(address), "%s:%u", e->hostname, (unsigned)e->rpc_port);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    crp_endpoint eps[3] = {{.transport = "tcp", .address = address}};
    size_t n_eps = 1;
    if (e->shm_address[0] != '\0')
        eps[n_eps++] = (crp_endpoint){.transport = "shm", .address = e->shm_address};
    if (e->shm_address[0] != '\0' && e->cma_enabled)
        eps[n_eps++] = (crp_endpoint){.transport = "cma", .address = pid};
    crp_descriptor d = {.name = e->segment_name,
                        .host_id = e->host_id,
                        .instance = e->instance,
                        .version = version,
                        .n_endpoints = n_eps,
                        .endpoints = eps,
                        .n_buffers = n,
                        .buffers = bufs};
    crp_buf_reset(&e->desc_encoded);
    rc = crp_descriptor_encode(&d, &e->desc_encoded);
    free(handles);
    free(bufs);
    free(specs);
    if (rc < 0)
        return rc;
    e->desc_version = version;
    e->desc_built = true;
    return 0;
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
