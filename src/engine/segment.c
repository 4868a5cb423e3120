/*
 * segment.c - opened segments and the peers behind them.
 *
 * A peer is created the first time its name is opened and lives until the
 * engine is destroyed (its lanes are owned by workers). Segment handles are
 * generation-checked references to peers; closing a handle invalidates it
 * without disturbing transfers already submitted.
 *
 * Descriptors are fetched from the peer itself (P2PHANDSHAKE: DESC_GET on its
 * RPC port) or from the metadata server ("<prefix>/ram/<name>"), decoded,
 * sorted by address for O(log n) range checks, and cached. They are refetched
 * when a submit does not find a remote range, when a lane learns the peer
 * restarted (new instance id), and whenever the segment is (re)opened.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/internal.h"

static int cmp_buffer_addr(const void *a, const void *b)
{
    const crp_buffer_desc *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int fetch_descriptor(cre_peer *p, crp_descriptor *out)
{
    cr_engine *e = p->engine;
    crp_buf body = {0};
    int rc;
    if (p->is_self) {
        rc = cre_descriptor_encoded(e, &body);
    } else if (e->metadata->peer_to_peer) {
        crp_header h;
        rc = cre_control_call(e, p->host, p->port, CRP_DESC_GET, NULL, (int)e->connect_timeout_ms,
                              &h, &body);
        if (rc == 0 && h.type != CRP_DESC_REPLY)
            rc = crb_error(CR_ERR_MALFORMED_FRAME, "%s answered DESC_GET with %s", p->name,
                           crp_type_name(h.type));
    } else {
        char key[512];
        snprintf(key, sizeof(key), "%s/ram/%s", e->metadata_prefix, p->name);
        void *v = NULL;
        size_t vl = 0;
        rc = e->metadata->ops->get(e->metadata, key, &v, &vl);
        if (rc == 0) {
            body.data = v;
            body.len = body.cap = vl;
        }
    }
    if (rc == 0) {
        rc = crp_descriptor_decode(body.data, body.len, out);
        if (rc < 0)
            rc = crb_error(rc, "descriptor of %s: %s", p->name, cr_last_error_message());
    }
    crp_buf_free(&body);
    if (rc == 0 && out->n_buffers > 1)
        qsort(out->buffers, out->n_buffers, sizeof(*out->buffers), cmp_buffer_addr);
    return rc;
}

int cre_peer_refresh(cre_peer *p)
{
    crp_descriptor d = {0};
    int rc = fetch_descriptor(p, &d);
    if (rc < 0)
        return rc;
    cre_buffer_extra *extra = calloc(d.n_buffers ? d.n_buffers : 1, sizeof(*extra));
    if (extra == NULL) {
        crp_descriptor_clear(&d);
        return crb_error(CR_ERR_NO_MEMORY, "descriptor of %s", p->name);
    }
    for (size_t i = 0; i < d.n_buffers; i++)
        if (d.buffers[i].shm_handle != NULL)
            cre_handle_parse(d.buffers[i].shm_handle, &extra[i]);
    char shm_address[CRP_MAX_ADDRESS + 1] = "";
    int32_t cma_pid = 0;
    for (size_t i = 0; i < d.n_endpoints; i++) {
        if (strcmp(d.endpoints[i].transport, "shm") == 0)
            snprintf(shm_address, sizeof(shm_address), "%s", d.endpoints[i].address);
        else if (strcmp(d.endpoints[i].transport, "cma") == 0)
            cma_pid = (int32_t)atoi(d.endpoints[i].address);
    }
    bool same_host = !p->is_self && strcmp(d.host_id, p->engine->host_id) == 0;
    /* Shared regions the new descriptor still has buffers in. */
    uint64_t *live = calloc(d.n_buffers ? d.n_buffers : 1, sizeof(*live));
    size_t n_live = 0;
    for (size_t i = 0; live != NULL && i < d.n_buffers; i++)
        if (extra[i].shared_id != 0)
            live[n_live++] = extra[i].shared_id;

    pthread_mutex_lock(&p->lock);
    bool restarted = p->desc_valid && p->desc.instance != d.instance;
    crp_descriptor_clear(&p->desc);
    free(p->desc_extra);
    p->desc = d;
    p->desc_extra = extra;
    p->same_host = same_host;
    memcpy(p->shm_address, shm_address, sizeof(shm_address));
    p->cma_pid = cma_pid;
    p->desc_valid = true;
    p->desc_stale = false;
    pthread_mutex_unlock(&p->lock);
    if (restarted) {
        cre_peer_local_drop(p); /* mappings of the old process are worthless */
    } else if (live != NULL) {
        cre_peer_local_prune(p, live, n_live); /* regions without buffers: let go */
    }
    free(live);
    /* The peer answered: lanes should retry at once rather than wait out a
     * back-off earned while it was down. */
    for (size_t i = 0; i < p->n_lanes; i++)
        atomic_store(&p->reset_backoff[i], true);
    return 0;
}

/* Resolve a segment name to host:port. */
static int resolve_name(cr_engine *e, const char *name, char host[CRB_HOST_MAX], uint16_t *port)
{
    if (e->metadata->peer_to_peer) {
        int rc = crb_parse_hostport(name, host, port);
        if (rc < 0 || *port == 0)
            return crb_error(CR_ERR_INVALID_ARGUMENT,
                             "segment name '%s' is not host:port (required in P2PHANDSHAKE mode)",
                             name);
        return 0;
    }
    char key[512];
    snprintf(key, sizeof(key), "%s/rpc_meta/%s", e->metadata_prefix, name);
    void *v = NULL;
    size_t vl = 0;
    int rc = e->metadata->ops->get(e->metadata, key, &v, &vl);
    if (rc < 0)
        return crb_error(rc, "segment '%s': %s", name, cr_last_error_message());
    char text[CRB_HOST_MAX + 8];
    if (vl >= sizeof(text)) {
        free(v);
        return crb_error(CR_ERR_METADATA, "rpc_meta of '%s' is %zu bytes", name, vl);
    }
    memcpy(text, v, vl);
    text[vl] = '\0';
    free(v);
    rc = crb_parse_hostport(text, host, port);
    if (rc < 0 || *port == 0)
        return crb_error(CR_ERR_METADATA, "rpc_meta of '%s' is '%s', not host:port", name, text);
    return 0;
}

static int peer_create(cr_engine *e, const char *name, cre_peer **out)
{
    cre_peer *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "peer '%s'", name);
    int rc = resolve_name(e, name, p->host, &p->port);
    if (rc < 0)
        goto err_free_peer;
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->engine = e;
    p->is_self = strcmp(name, e->segment_name) == 0;
    pthread_mutex_init(&p->lock, NULL);
    cre_peer_local_init(&p->local);
    p->n_lanes = e->lanes_per_peer;
    p->lanes = calloc(p->n_lanes, sizeof(*p->lanes));
    if (p->lanes == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "lanes for peer '%s'", name);
        goto err_destroy_lock;
    }
    *out = p;
    return 0;
err_destroy_lock:
    cre_peer_local_fini(&p->local);
    pthread_mutex_destroy(&p->lock);
err_free_peer:
    free(p);
    return rc;
}

/* Give the peer's lanes to workers (spreading peers across workers). */
static int peer_attach_lanes(cr_engine *e, cre_peer *p, size_t peer_index)
{
    for (size_t i = 0; i < p->n_lanes; i++) {
        cre_lane *l = &p->lanes[i];
        l->peer = p;
        l->index = (int)i;
        l->conn.fd = -1;
        l->state = LANE_IDLE;
        l->backoff_ms = 50;
        l->worker = &e->workers[(peer_index + i) % e->n_workers];
        cre_worker *w = l->worker;
        pthread_mutex_lock(&w->lock);
        if (w->n_lanes == w->cap_lanes) {
            size_t ncap = w->cap_lanes ? w->cap_lanes * 2 : 16;
            cre_lane **nl = realloc(w->lanes, ncap * sizeof(*nl));
            if (nl == NULL) {
                pthread_mutex_unlock(&w->lock);
                return crb_error(CR_ERR_NO_MEMORY, "worker lane table");
            }
            w->lanes = nl;
            w->cap_lanes = ncap;
        }
        w->lanes[w->n_lanes++] = l;
        pthread_mutex_unlock(&w->lock);
    }
    return 0;
}

static int peer_get(cr_engine *e, const char *name, cre_peer **out)
{
    pthread_mutex_lock(&e->peers_lock);
    for (size_t i = 0; i < e->n_peers; i++) {
        if (strcmp(e->peers[i]->name, name) == 0) {
            *out = e->peers[i];
            pthread_mutex_unlock(&e->peers_lock);
            return 0;
        }
    }
    int rc = 0;
    if (e->n_peers == e->cap_peers) {
        size_t ncap = e->cap_peers ? e->cap_peers * 2 : 16;
        cre_peer **np = realloc(e->peers, ncap * sizeof(*np));
        if (np == NULL) {
            rc = crb_error(CR_ERR_NO_MEMORY, "peer table");
            goto out_unlock;
        }
        e->peers = np;
        e->cap_peers = ncap;
    }
    cre_peer *p = NULL;
    rc = peer_create(e, name, &p);
    if (rc < 0)
        goto out_unlock;
    /* Registered before lanes attach so destroy always finds it. */
    e->peers[e->n_peers++] = p;
    rc = peer_attach_lanes(e, p, e->n_peers - 1);
    if (rc == 0)
        *out = p;
out_unlock:
    pthread_mutex_unlock(&e->peers_lock);
    return rc;
}

int cr_engine_open_segment(cr_engine *e, const char *name, cr_segment_handle *out)
{
    if (e == NULL || out == NULL)
        return crb_error(CR_ERR_INVALID_ARGUMENT, "open_segment: NULL engine or out");
    if (name == NULL || name[0] == '\0')
        return crb_error(CR_ERR_INVALID_ARGUMENT, "open_segment: empty segment name");
    while (*name == '/')
        name++;
    if (strlen(name) >= CRB_HOST_MAX)
        return crb_error(CR_ERR_INVALID_ARGUMENT, "segment name of %zu bytes is too long",
                         strlen(name));
    cre_peer *p = NULL;
    int rc = peer_get(e, name, &p);
    if (rc < 0)
        return rc;
    rc = cre_peer_refresh(p);
    if (rc < 0)
        return rc;
    /* One handle per peer while open. */
    pthread_mutex_lock(&e->segments.lock);
    for (size_t i = 0; i < e->segments.cap; i++) {
        if (e->segments.items[i] == p) {
            *out = ((uint64_t)e->segments.gens[i] << 32) | (uint64_t)(i + 1);
            pthread_mutex_unlock(&e->segments.lock);
            return 0;
        }
    }
    pthread_mutex_unlock(&e->segments.lock);
    return cre_handles_add(&e->segments, p, out);
}

int cr_engine_close_segment(cr_engine *e, cr_segment_handle h)
{
    if (e == NULL)
        return crb_error(CR_ERR_INVALID_ARGUMENT, "close_segment: NULL engine");
    pthread_mutex_lock(&e->segments.lock);
    void *p = cre_handles_remove_locked(&e->segments, h);
    pthread_mutex_unlock(&e->segments.lock);
    if (p == NULL)
        return crb_error(CR_ERR_INVALID_HANDLE, "segment handle 0x%llx is stale or invalid",
                         (unsigned long long)h);
    return 0;
}

int cre_segment_lookup(cr_engine *e, cr_segment_handle h, cre_peer **out)
{
    pthread_mutex_lock(&e->segments.lock);
    cre_peer *p = cre_handles_get_locked(&e->segments, h);
    pthread_mutex_unlock(&e->segments.lock);
    if (p == NULL)
        return crb_error(CR_ERR_INVALID_HANDLE, "segment handle 0x%llx is stale or invalid",
                         (unsigned long long)h);
    *out = p;
    return 0;
}

void cre_peers_destroy(cr_engine *e)
{
    for (size_t i = 0; i < e->n_peers; i++) {
        cre_peer *p = e->peers[i];
        cre_peer_local_fini(&p->local);
        crp_descriptor_clear(&p->desc);
        free(p->desc_extra);
        pthread_mutex_destroy(&p->lock);
        free(p->lanes);
        free(p);
    }
    free(e->peers);
    e->peers = NULL;
    e->n_peers = 0;
}

int cr_engine_segment_buffers(cr_engine *e, cr_segment_handle h, cr_buffer_info *out, size_t cap,
                              size_t *total)
{
    if (e == NULL || total == NULL || (cap > 0 && out == NULL))
        return crb_error(CR_ERR_INVALID_ARGUMENT, "segment_buffers: NULL argument");
    cre_peer *p = NULL;
    int rc = cre_segment_lookup(e, h, &p);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&p->lock);
    size_t n = p->desc_valid ? p->desc.n_buffers : 0;
    for (size_t i = 0; i < n && i < cap; i++) {
        const crp_buffer_desc *b = &p->desc.buffers[i];
        out[i] = (cr_buffer_info){b->addr, b->length, b->kind, b->device, b->remote_accessible};
    }
    pthread_mutex_unlock(&p->lock);
    *total = n;
    return 0;
}
