/*
 * shm.c - the shm transport: a peer on this host registered memory from
 * cr_alloc_shared; we map its memfd once and copy with one memcpy on the
 * submitting thread, no kernel round trip per transfer. Every copy is
 * bracketed by the peer's control-page slot (ctl_page.h), so a copy that
 * overlaps the peer unregistering the buffer fails instead of reporting
 * success for bytes that went into memory the peer has reused.
 *
 * It also owns the same-host machinery the cma transport shares: our
 * control page and fd service (init/fini), a control slot per registered
 * buffer (reg/dereg: the blob peers see), and per peer the fd-service
 * connection and mappings (peer area), pruned when a descriptor no longer
 * lists a region and dropped when the peer restarts or hangs up.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "engine/transports/shm/shm.h"

cre_tp *cre_shm_tp(cr_engine *e)
{
    return cre_engine_tp(e, "shm");
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int shm_init(cre_tp *tp, bool explicit_choice)
{
    shm_engine *se = tp->priv;
    se->tp = tp;
    int rc = cre_ctl_init(&se->ctl);
    if (rc < 0)
        return rc;
    rc = cre_shm_service_start(tp);
    if (rc < 0)
        cre_ctl_fini(&se->ctl);
    return rc;
}

static void shm_fini(cre_tp *tp)
{
    shm_engine *se = tp->priv;
    cre_shm_service_stop(tp);
    cre_ctl_fini(&se->ctl);
}

static int shm_endpoint(cre_tp *tp, crp_buf *out)
{
    shm_engine *se = tp->priv;
    return se->svc.address[0] ? crp_buf_append(out, se->svc.address, strlen(se->svc.address)) : 0;
}

/* Every buffer gets a control slot: shm and cma copies are fenced by it. */
static int shm_reg(cre_tp *tp, cre_buffer *b, crp_buf *blob)
{
    shm_engine *se = tp->priv;
    shm_buffer_state *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "shm state of a buffer");
    int rc = cre_ctl_acquire(&se->ctl, &st->ctl_slot, &st->ctl_gen);
    if (rc < 0) {
        free(st);
        return rc;
    }
    uint8_t raw[CRE_SHM_BLOB_SIZE];
    put_u32(raw, st->ctl_slot);
    put_u64(raw + 4, st->ctl_gen);
    put_u64(raw + 12, b->shared_id);
    put_u64(raw + 20, b->shared_offset);
    rc = crp_buf_append(blob, raw, sizeof(raw));
    if (rc < 0) {
        cre_ctl_retire(&se->ctl, st->ctl_slot, 0);
        free(st);
        return rc;
    }
    b->tp_state[tp->index] = st;
    return 0;
}

/* Fence same-host peers out of the buffer: bump its slot and wait (bounded
 * by the request timeout) for copies in progress. */
static void shm_dereg(cre_tp *tp, cre_buffer *b)
{
    shm_engine *se = tp->priv;
    shm_buffer_state *st = b->tp_state[tp->index];
    if (st == NULL)
        return;
    cre_ctl_retire(&se->ctl, st->ctl_slot, tp->engine->request_timeout_ms);
    free(st);
    b->tp_state[tp->index] = NULL;
}

static int shm_peer_init(cre_tp *tp, cre_peer *p, void *pp)
{
    cre_peer_local_init(pp, tp->engine, p);
    return 0;
}

static void shm_peer_fini(cre_tp *tp, cre_peer *p, void *pp)
{
    cre_peer_local_fini(pp);
}

static void shm_peer_reset(cre_tp *tp, cre_peer *p, void *pp)
{
    cre_peer_local_drop(pp); /* mappings of the old process are worthless */
}

static void shm_desc_free(cre_tp *tp, void *state)
{
    shm_desc *d = state;
    free(d->bufs);
    free(d);
}

/* Read our blobs and the peer's endpoints; let go of mapped regions the
 * new descriptor no longer has buffers in. */
static void *shm_desc_parse(cre_tp *tp, cre_peer *p, const crp_descriptor *d)
{
    shm_desc *sd = calloc(1, sizeof(*sd));
    if (sd == NULL)
        return NULL;
    sd->bufs = calloc(d->n_buffers ? d->n_buffers : 1, sizeof(*sd->bufs));
    uint64_t *live = calloc(d->n_buffers ? d->n_buffers : 1, sizeof(*live));
    if (sd->bufs == NULL || live == NULL) {
        free(live);
        shm_desc_free(tp, sd);
        return NULL;
    }
    sd->n = d->n_buffers;
    size_t n_live = 0;
    for (size_t i = 0; i < d->n_buffers; i++) {
        size_t len = 0;
        const uint8_t *x = crp_buffer_blob(&d->buffers[i], "shm", &len);
        if (x == NULL || len != CRE_SHM_BLOB_SIZE)
            continue;
        shm_remote *r = &sd->bufs[i];
        r->ctl_slot = (uint32_t)get_u64(x, 4);
        r->ctl_gen = get_u64(x + 4, 8);
        r->shared_id = get_u64(x + 12, 8);
        r->shared_offset = get_u64(x + 20, 8);
        if (r->ctl_slot >= CRE_CTL_SLOTS || r->ctl_gen == 0) {
            memset(r, 0, sizeof(*r));
            continue;
        }
        if (r->shared_id != 0)
            live[n_live++] = r->shared_id;
    }
    const crp_endpoint *ep = crp_descriptor_endpoint(d, "shm");
    if (ep != NULL && ep->address_len < sizeof(sd->address) && ep->address[0] == '@')
        memcpy(sd->address, ep->address, ep->address_len + 1);
    const crp_endpoint *cma = crp_descriptor_endpoint(d, "cma");
    if (cma != NULL)
        sd->cma_pid = (int32_t)atoi(cma->address);
    if (!p->is_self)
        cre_peer_local_prune(cre_peer_tp(p, tp), live, n_live);
    free(live);
    return sd;
}

static const shm_remote *remote_of(cre_tp *tp, const cre_route *r, const shm_desc **sd_out)
{
    const shm_desc *sd = cre_route_state(r, tp);
    if (sd == NULL || r->remote_index >= sd->n)
        return NULL;
    *sd_out = sd;
    return &sd->bufs[r->remote_index];
}

static bool shm_can_serve(cre_tp *tp, const cre_route *r)
{
    const shm_desc *sd = NULL;
    const shm_remote *rb = r->same_host ? remote_of(tp, r, &sd) : NULL;
    cre_peer_local *l = cre_peer_tp(r->peer, tp);
    return rb != NULL && sd->address[0] != '\0' && !atomic_load(&l->refused) &&
           rb->shared_id != 0 && rb->ctl_gen != 0 && cre_kind_is_host(r->local_kind) &&
           r->remote_kind == CR_MEM_HOST_SHAREABLE;
}

static int shm_submit(cre_tp *tp, const cre_route *r, cre_task *t)
{
    const shm_desc *sd = NULL;
    const shm_remote *rb = remote_of(tp, r, &sd);
    cre_peer *p = r->peer;
    cre_peer_local *l = cre_peer_tp(p, tp);
    int rc = cre_peer_local_map(l, sd->address, rb->shared_id);
    if (rc == CR_ERR_AUTH_FAILED || rc == CR_ERR_PEER_UNREACHABLE)
        return CR_ERR_TRANSPORT_UNSUPPORTED; /* refused: let the next path try */
    if (rc < 0)
        return rc;
    uint64_t offset = rb->shared_offset + (t->remote_addr - r->remote_base);
    pthread_rwlock_rdlock(&l->map_lock);
    uint64_t size = 0;
    uint8_t *base = cre_peer_local_find_locked(l, rb->shared_id, &size);
    cre_ctl_slot *slot = l->ctl != NULL ? &l->ctl[rb->ctl_slot] : NULL;
    if (base == NULL || slot == NULL || offset > size || t->length > size - offset) {
        pthread_rwlock_unlock(&l->map_lock);
        return crb_error(CR_ERR_CONNECTION,
                         "shared region %llu of %s is gone or smaller than the descriptor says",
                         (unsigned long long)rb->shared_id, p->name);
    }
    int status = 0;
    if (!cre_ctl_enter(slot, rb->ctl_gen)) {
        /* Our descriptor of the peer is older than its registrations (it may have
         * registered a new buffer at the same address): the next request fetches it
         * again instead of failing the same way for good. */
        cre_peer_mark_stale(p);
        status = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                           "%s unregistered buffer 0x%llx before the copy started", p->name,
                           (unsigned long long)r->remote_base);
    } else {
        if (t->opcode == CR_OP_WRITE)
            memcpy(base + offset, t->local, t->length);
        else
            memcpy(t->local, base + offset, t->length);
        if (!cre_ctl_leave(slot, rb->ctl_gen))
            status = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                               "%s unregistered buffer 0x%llx during the copy", p->name,
                               (unsigned long long)r->remote_base);
    }
    pthread_rwlock_unlock(&l->map_lock);
    if (status == CR_ERR_ADDRESS_NOT_REGISTERED)
        cre_peer_local_unmap(l, rb->shared_id); /* do not keep its pages alive */
    if (status == 0 && crb_log_enabled(CRB_LOG_DEBUG))
        crb_log(CRB_LOG_DEBUG, "shm %s %llu bytes %s %s", t->opcode ? "wrote" : "read",
                (unsigned long long)t->length, t->opcode ? "to" : "from", p->name);
    atomic_store(&t->slices_left, 1);
    cre_task_slice_done(t, status, status == 0 ? t->length : 0);
    return 0;
}

static size_t shm_counters(cre_tp *tp, cr_engine_counter *out, size_t cap)
{
    shm_engine *se = tp->priv;
    if (cap >= 1)
        out[0] = (cr_engine_counter){"shm", "mappings", atomic_load(&se->mappings)};
    return 1;
}

const cre_transport_ops cre_transport_shm = {
    .name = "shm",
    .rank = 10,
    .reach = CRE_REACH_HOST,
    .engine_size = sizeof(shm_engine),
    .peer_size = sizeof(cre_peer_local),
    .init = shm_init,
    .fini = shm_fini,
    .endpoint = shm_endpoint,
    .reg = shm_reg,
    .dereg = shm_dereg,
    .peer_init = shm_peer_init,
    .peer_fini = shm_peer_fini,
    .desc_parse = shm_desc_parse,
    .desc_free = shm_desc_free,
    .peer_reset = shm_peer_reset,
    .can_serve = shm_can_serve,
    .any_local = true,
    .submit = shm_submit,
    .tick = cre_shm_service_tick,
    .counters = shm_counters,
};
