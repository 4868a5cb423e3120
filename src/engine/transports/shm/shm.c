/*
 * shm.c - the shm transport: a peer on this host registered memory from
 * cr_alloc_shared; we map its memfd once and copy with one memcpy on the
 * submitting thread, no kernel round trip per transfer. Every copy is
 * bracketed by the peer's control-page slot (ctl_page.h), so a copy that
 * overlaps the peer unregistering the buffer fails instead of reporting
 * success for bytes that went into memory the peer has reused.
 */
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "engine/transports/shm/shm.h"

static bool shm_can_serve(const cr_engine *e, const cre_endpoints *ep)
{
    const cre_peer *p = ep->peer;
    return ep->same_host && !atomic_load(&p->local.refused) && ep->shared_id != 0 &&
           ep->ctl_gen != 0 && cre_kind_is_host(ep->local_kind) &&
           ep->remote_kind == CR_MEM_HOST_SHAREABLE;
}

static int shm_submit(cr_engine *e, const cre_endpoints *ep, cre_task *t)
{
    cre_peer *p = ep->peer;
    int rc = cre_peer_local_map(p, ep->shared_id);
    if (rc == CR_ERR_AUTH_FAILED || rc == CR_ERR_PEER_UNREACHABLE)
        return CR_ERR_TRANSPORT_UNSUPPORTED; /* refused: let the next path try */
    if (rc < 0)
        return rc;
    uint64_t offset = ep->shared_offset + (t->remote_addr - ep->remote_base);
    pthread_rwlock_rdlock(&p->local.map_lock);
    uint64_t size = 0;
    uint8_t *base = cre_peer_local_find_locked(p, ep->shared_id, &size);
    cre_ctl_slot *slot = p->local.ctl != NULL ? &p->local.ctl[ep->ctl_slot] : NULL;
    if (base == NULL || slot == NULL || offset > size || t->length > size - offset) {
        pthread_rwlock_unlock(&p->local.map_lock);
        return crb_error(CR_ERR_CONNECTION,
                         "shared region %llu of %s is gone or smaller than the descriptor says",
                         (unsigned long long)ep->shared_id, p->name);
    }
    int status = 0;
    if (!cre_ctl_enter(slot, ep->ctl_gen)) {
        status = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                           "%s unregistered buffer 0x%llx before the copy started", p->name,
                           (unsigned long long)ep->remote_base);
    } else {
        if (t->opcode == CR_OP_WRITE)
            memcpy(base + offset, t->local, t->length);
        else
            memcpy(t->local, base + offset, t->length);
        if (!cre_ctl_leave(slot, ep->ctl_gen))
            status = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                               "%s unregistered buffer 0x%llx during the copy", p->name,
                               (unsigned long long)ep->remote_base);
    }
    pthread_rwlock_unlock(&p->local.map_lock);
    if (status == CR_ERR_ADDRESS_NOT_REGISTERED)
        cre_peer_local_unmap(p, ep->shared_id); /* do not keep its pages alive */
    if (status == 0) {
        atomic_fetch_add(&e->stats.bytes_shm, t->length);
        if (crb_log_enabled(CRB_LOG_DEBUG))
            crb_log(CRB_LOG_DEBUG, "shm %s %llu bytes %s %s", t->opcode ? "wrote" : "read",
                    (unsigned long long)t->length, t->opcode ? "to" : "from", p->name);
    }
    atomic_store(&t->slices_left, 1);
    cre_task_slice_done(t, status, status == 0 ? t->length : 0);
    return 0;
}

const cre_transport cre_transport_shm = {
    .name = "shm",
    .can_serve = shm_can_serve,
    .submit = shm_submit,
};
