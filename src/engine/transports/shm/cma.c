/*
 * cma.c - the cma transport: same-host memory that is not shareable moves
 * with process_vm_readv / process_vm_writev (one kernel copy, no sockets).
 * The kernel decides per peer whether we may (ptrace access rules); the
 * first transfer to a peer is the probe: EPERM marks the peer refused and
 * this and later requests fall through to the next transport (tcp). Copies
 * are fenced with the peer's control-page slot like shm copies, so the peer
 * must also have handed us its control page (same user or allowed).
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "base/error.h"
#include "base/log.h"
#include "engine/transports/shm/shm.h"

static bool cma_can_serve(const cr_engine *e, const cre_endpoints *ep)
{
    const cre_peer *p = ep->peer;
    return ep->same_host && ep->cma_pid > 0 && atomic_load(&p->local.cma_state) >= 0 &&
           !atomic_load(&p->local.refused) && ep->ctl_gen != 0 &&
           cre_kind_is_host(ep->local_kind) && cre_kind_is_host(ep->remote_kind);
}

/* Move the whole range, looping over partial transfers. */
static int cma_copy(pid_t pid, int opcode, uint8_t *local, uint64_t remote, uint64_t len)
{
    while (len > 0) {
        size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
        struct iovec l = {local, chunk}, r = {(void *)(uintptr_t)remote, chunk};
        ssize_t n = opcode == CR_OP_WRITE ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                                          : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EFAULT;
        local += n;
        remote += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return 0;
}

static int cma_submit(cr_engine *e, const cre_endpoints *ep, cre_task *t)
{
    cre_peer *p = ep->peer;
    int rc = cre_peer_local_connect(p); /* the control page fences the copy */
    if (rc == CR_ERR_AUTH_FAILED || rc == CR_ERR_PEER_UNREACHABLE)
        return CR_ERR_TRANSPORT_UNSUPPORTED;
    if (rc < 0)
        return rc;
    pthread_rwlock_rdlock(&p->local.map_lock);
    cre_ctl_slot *slot = p->local.ctl != NULL ? &p->local.ctl[ep->ctl_slot] : NULL;
    if (slot == NULL) {
        pthread_rwlock_unlock(&p->local.map_lock);
        return crb_error(CR_ERR_CONNECTION, "control page of %s is gone", p->name);
    }
    int status = 0;
    if (!cre_ctl_enter(slot, ep->ctl_gen)) {
        status = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                           "%s unregistered buffer 0x%llx before the copy started", p->name,
                           (unsigned long long)ep->remote_base);
    } else {
        int err = cma_copy(ep->cma_pid, t->opcode, t->local, t->remote_addr, t->length);
        bool still = cre_ctl_leave(slot, ep->ctl_gen);
        if (err == -EPERM) {
            pthread_rwlock_unlock(&p->local.map_lock);
            atomic_store(&p->local.cma_state, -1);
            crb_log(CRB_LOG_INFO,
                    "process_vm_* into %s (pid %d) is not permitted; using the "
                    "next transport",
                    p->name, (int)ep->cma_pid);
            return CR_ERR_TRANSPORT_UNSUPPORTED;
        }
        if (err < 0)
            status = crb_error(err == -ESRCH ? CR_ERR_CONNECTION : CR_ERR_SYSTEM,
                               "process_vm_%s with %s: %s", t->opcode ? "writev" : "readv", p->name,
                               strerror(-err));
        else if (!still)
            status = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                               "%s unregistered buffer 0x%llx during the copy", p->name,
                               (unsigned long long)ep->remote_base);
        else
            atomic_store(&p->local.cma_state, 1);
    }
    pthread_rwlock_unlock(&p->local.map_lock);
    if (status == 0) {
        atomic_fetch_add(&e->stats.bytes_cma, t->length);
        if (crb_log_enabled(CRB_LOG_DEBUG))
            crb_log(CRB_LOG_DEBUG, "cma %s %llu bytes %s %s", t->opcode ? "wrote" : "read",
                    (unsigned long long)t->length, t->opcode ? "to" : "from", p->name);
    }
    atomic_store(&t->slices_left, 1);
    cre_task_slice_done(t, status, status == 0 ? t->length : 0);
    return 0;
}

const cre_transport cre_transport_cma = {
    .name = "cma",
    .can_serve = cma_can_serve,
    .submit = cma_submit,
};
