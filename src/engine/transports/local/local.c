/*
 * local.c - the local transport: both ends are in this process, so a
 * transfer is one memcpy on the submitting thread. Installed with protocol
 * "auto" and "shm"; with "tcp" the caller asked for sockets only and
 * self-transfers go through loopback connections instead.
 */
#include <string.h>

#include "engine/internal.h"

static bool local_can_serve(cre_tp *tp, const cre_route *r)
{
    return r->self_target != NULL && cre_kind_is_host(r->local_kind) &&
           cre_kind_is_host(r->remote_kind);
}

static int local_submit(cre_tp *tp, const cre_route *r, cre_task *t)
{
    uint8_t *remote = (uint8_t *)(uintptr_t)t->remote_addr;
    if (t->opcode == CR_OP_WRITE)
        memmove(remote, t->local, t->length);
    else
        memmove(t->local, remote, t->length);
    atomic_store(&t->slices_left, 1);
    cre_task_slice_done(t, 0, t->length);
    return 0;
}

const cre_transport_ops cre_transport_local = {
    .name = "local",
    .rank = 0,
    .reach = CRE_REACH_PROCESS,
    .can_serve = local_can_serve,
    .any_local = true,
    .submit = local_submit,
};
