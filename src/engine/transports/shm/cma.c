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
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "engine/transports/shm/shm.h"

/* cma works with shm's per-peer state and parsed descriptor. */
static cre_peer_local *local_of(cre_tp *shm, cre_peer *p)
{
    return cre_peer_tp(p, shm);
}

static const shm_remote *remote_of(cre_tp *shm, const cre_route *r, const shm_desc **sd_out)
{
    const shm_desc *sd = cre_route_state(r, shm);
    if (sd == NULL || r->remote_index >= sd->n)
        return NULL;
    *sd_out = sd;
    return &sd->bufs[r->remote_index];
}

static int cma_init(cre_tp *tp, bool explicit_choice)
{
    if (cre_shm_tp(tp->engine) == NULL)
        return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED,
                         "cma needs the shm transport (its control page fences copies)");
    if (!tp->engine->cma_enabled)
        return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED, "disabled by disable_cma");
    return 0;
}

static int cma_endpoint(cre_tp *tp, crp_buf *out)
{
    char pid[24];
    int n = snprintf(pid, sizeof(pid), "%d", (int)getpid());
    return crp_buf_append(out, pid, (size_t)n);
}

static bool cma_can_serve(cre_tp *tp, const cre_route *r)
{
    cre_tp *shm = cre_shm_tp(tp->engine);
    const shm_desc *sd = NULL;
    const shm_remote *rb = r->same_host && shm != NULL ? remote_of(shm, r, &sd) : NULL;
    if (rb == NULL)
        return false;
    cre_peer_local *l = local_of(shm, r->peer);
    return sd->cma_pid > 0 && sd->address[0] != '\0' && atomic_load(&l->cma_state) >= 0 &&
           !atomic_load(&l->refused) && rb->ctl_gen != 0 && cre_kind_is_host(r->local_kind) &&
           cre_kind_is_host(r->remote_kind);
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

static int cma_submit(cre_tp *tp, const cre_route *r, cre_task *t)
{
    cre_tp *shm = cre_shm_tp(tp->engine);
    const shm_desc *sd = NULL;
    const shm_remote *rb = remote_of(shm, r, &sd);
    cre_peer *p = r->peer;
    cre_peer_local *l = local_of(shm, p);
    int rc = cre_peer_local_connect(l, sd->address); /* the control page fences the copy */
    if (rc == CR_ERR_AUTH_FAILED || rc == CR_ERR_PEER_UNREACHABLE)
        return CR_ERR_TRANSPORT_UNSUPPORTED;
    if (rc < 0)
        return rc;
    pthread_rwlock_rdlock(&l->map_lock);
    cre_ctl_slot *slot = l->ctl != NULL ? &l->ctl[rb->ctl_slot] : NULL;
    if (slot == NULL) {
        pthread_rwlock_unlock(&l->map_lock);
        return crb_error(CR_ERR_CONNECTION, "control page of %s is gone", p->name);
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
        int err = cma_copy(sd->cma_pid, t->opcode, t->local, t->remote_addr, t->length);
        bool still = cre_ctl_leave(slot, rb->ctl_gen);
        if (err == -EPERM) {
            pthread_rwlock_unlock(&l->map_lock);
            atomic_store(&l->cma_state, -1);
            crb_log(CRB_LOG_INFO,
                    "process_vm_* into %s (pid %d) is not permitted; using the "
                    "next transport",
                    p->name, (int)sd->cma_pid);
            return CR_ERR_TRANSPORT_UNSUPPORTED;
        }
        if (err < 0)
            status = crb_error(err == -ESRCH ? CR_ERR_CONNECTION : CR_ERR_SYSTEM,
                               "process_vm_%s with %s: %s", t->opcode ? "writev" : "readv", p->name,
                               strerror(-err));
        else if (!still)
            status = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                               "%s unregistered buffer 0x%llx during the copy", p->name,
                               (unsigned long long)r->remote_base);
        else
            atomic_store(&l->cma_state, 1);
    }
    pthread_rwlock_unlock(&l->map_lock);
    if (status == 0 && crb_log_enabled(CRB_LOG_DEBUG))
        crb_log(CRB_LOG_DEBUG, "cma %s %llu bytes %s %s", t->opcode ? "wrote" : "read",
                (unsigned long long)t->length, t->opcode ? "to" : "from", p->name);
    atomic_store(&t->slices_left, 1);
    cre_task_slice_done(t, status, status == 0 ? t->length : 0);
    return 0;
}

const cre_transport_ops cre_transport_cma = {
    .name = "cma",
    .rank = 20,
    .reach = CRE_REACH_HOST,
    .init = cma_init,
    .endpoint = cma_endpoint,
    .can_serve = cma_can_serve,
    .any_local = true,
    .submit = cma_submit,
    .needs = "shm",
};
