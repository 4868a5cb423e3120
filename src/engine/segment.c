/*
 * segment.c - opened segments and the peers behind them.
 *
 * A peer is created the first time its name is opened and lives until the
 * engine is destroyed (transports keep per-peer state in it: tcp lanes,
 * same-host mappings, UCX endpoints). Segment handles are
 * generation-checked references to peers; closing a handle invalidates it
 * without disturbing transfers already submitted.
 *
 * Descriptors are fetched from the peer itself (P2PHANDSHAKE: DESC_GET on its
 * RPC port) or from the metadata server ("<prefix>/ram/<name>"), decoded,
 * sorted by address for O(log n) range checks, and kept as an immutable,
 * reference-counted snapshot (cre_desc) that each transport parses once
 * (desc_parse) and submits hold while they use it. They are refetched
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

void cre_desc_ref(cre_desc *d)
{
    atomic_fetch_add(&d->refs, 1);
}

void cre_desc_unref(cre_desc *d)
{
    if (d == NULL || atomic_fetch_sub(&d->refs, 1) != 1)
        return;
    cr_engine *e = d->engine;
    for (size_t i = 0; i < e->n_tps; i++)
        if (d->tp_state[i] != NULL && e->tps[i].ops->desc_free != NULL)
            e->tps[i].ops->desc_free(&e->tps[i], d->tp_state[i]);
    crp_descriptor_clear(&d->d);
    free(d);
}

void *cre_peer_tp(cre_peer *p, const cre_tp *tp)
{
    return p->tp_priv[tp->index];
}

const uint8_t *cre_route_blob(const cre_route *r, const cre_tp *tp, size_t *len)
{
    if (r->desc == NULL)
        return NULL;
    return crp_buffer_blob(&r->desc->d.buffers[r->remote_index], tp->ops->name, len);
}

void *cre_route_state(const cre_route *r, const cre_tp *tp)
{
    return r->desc != NULL ? r->desc->tp_state[tp->index] : NULL;
}

void cre_peer_mark_stale(cre_peer *p)
{
    pthread_mutex_lock(&p->lock);
    if (p->desc != NULL)
        p->desc_stale = true;
    pthread_mutex_unlock(&p->lock);
}

int cre_peer_refresh(cre_peer *p)
{
    cr_engine *e = p->engine;
    cre_desc *nd = calloc(1, sizeof(*nd));
    if (nd == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "descriptor of %s", p->name);
    atomic_init(&nd->refs, 1);
    nd->engine = e;
    int rc = fetch_descriptor(p, &nd->d);
    if (rc < 0) {
        free(nd);
        return rc;
    }
    for (size_t i = 0; i < e->n_tps; i++)
        if (e->tps[i].ops->desc_parse != NULL)
            nd->tp_state[i] = e->tps[i].ops->desc_parse(&e->tps[i], p, &nd->d);
    bool same_host = !p->is_self && strcmp(nd->d.host_id, e->host_id) == 0;

    pthread_mutex_lock(&p->lock);
    cre_desc *old = p->desc;
    bool restarted = old != NULL && old->d.instance != nd->d.instance;
    p->desc = nd;
    p->same_host = same_host;
    p->desc_stale = false;
    pthread_mutex_unlock(&p->lock);
    /* A restarted peer's imported state (mappings, endpoints) is worthless;
     * transports also prune against the new descriptor in desc_parse. */
    if (restarted)
        for (size_t i = 0; i < e->n_tps; i++)
            if (e->tps[i].ops->peer_reset != NULL)
                e->tps[i].ops->peer_reset(&e->tps[i], p, p->tp_priv[i]);
    cre_desc_unref(old);
    return 0;
}

/* Resolve a segment name to host:port. */
static int resolve_name(cr_engine *e, const char *name, char host[CRB_HOST_MAX], uint16_t *port)
{
    if (e->metadata->peer_to_peer) {
        int rc = crb_parse_hostport(name, host, port);
        if (rc < 0 || *port == 0)
            return crb_error(CR_INVALID_PARAMS,
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

static void peer_free(cre_peer *p)
{
    cr_engine *e = p->engine;
    for (size_t i = 0; i < e->n_tps; i++) {
        if (p->tp_priv[i] == NULL)
            continue;
        if (e->tps[i].ops->peer_fini != NULL)
            e->tps[i].ops->peer_fini(&e->tps[i], p, p->tp_priv[i]);
        free(p->tp_priv[i]);
    }
    cre_desc_unref(p->desc);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static int peer_create(cr_engine *e, const char *name, cre_peer **out)
{
    cre_peer *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "peer '%s'", name);
    int rc = resolve_name(e, name, p->host, &p->port);
    if (rc < 0) {
        free(p);
        return rc;
    }
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->engine = e;
    p->is_self = strcmp(name, e->segment_name) == 0;
    pthread_mutex_init(&p->lock, NULL);
    for (size_t i = 0; i < e->n_tps; i++) {
        const cre_transport_ops *ops = e->tps[i].ops;
        if (ops->peer_size == 0)
            continue;
        p->tp_priv[i] = calloc(1, ops->peer_size);
        rc = p->tp_priv[i] == NULL
                 ? crb_error(CR_ERR_NO_MEMORY, "%s state for peer '%s'", ops->name, name)
             : ops->peer_init != NULL ? ops->peer_init(&e->tps[i], p, p->tp_priv[i])
                                      : 0;
        if (rc < 0) {
            free(p->tp_priv[i]);
            p->tp_priv[i] = NULL;
            peer_free(p);
            return rc;
        }
    }
    *out = p;
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
    e->peers[e->n_peers++] = p;
    *out = p;
out_unlock:
    pthread_mutex_unlock(&e->peers_lock);
    return rc;
}

int cr_engine_open_segment(cr_engine *e, const char *name, cr_segment_handle *out)
{
    CRE_CALL(e, "cr_engine_open_segment");
    if (e == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "open_segment: NULL engine or out");
    if (name == NULL || name[0] == '\0')
        return crb_error(CR_INVALID_PARAMS, "open_segment: empty segment name");
    while (*name == '/')
        name++;
    if (strlen(name) >= CRB_HOST_MAX)
        return crb_error(CR_INVALID_PARAMS, "segment name of %zu bytes is too long", strlen(name));
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
    CRE_CALL(e, "cr_engine_close_segment");
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
    for (size_t i = 0; i < e->n_peers; i++)
        peer_free(e->peers[i]);
    free(e->peers);
    e->peers = NULL;
    e->n_peers = 0;
}

int cr_engine_segment_buffers(cr_engine *e, cr_segment_handle h, cr_buffer_info *out, size_t cap,
                              size_t *total)
{
    CRE_CALL(e, "cr_engine_segment_buffers");
    if (e == NULL || total == NULL || (cap > 0 && out == NULL))
        return crb_error(CR_INVALID_PARAMS, "segment_buffers: NULL argument");
    cre_peer *p = NULL;
    int rc = cre_segment_lookup(e, h, &p);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&p->lock);
    size_t n = p->desc != NULL ? p->desc->d.n_buffers : 0;
    for (size_t i = 0; i < n && i < cap; i++) {
        const crp_buffer_desc *b = &p->desc->d.buffers[i];
        out[i] = (cr_buffer_info){b->addr, b->length, b->kind, b->device, b->remote_accessible};
    }
    pthread_mutex_unlock(&p->lock);
    *total = n;
    return 0;
}
