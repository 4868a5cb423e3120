/*
 * local.c - the local transport: both ends are in this process, so a
 * transfer is one memcpy on the submitting thread. Installed with protocol
 * "auto"; with protocol "tcp" the caller asked for tcp only and
 * self-transfers go through loopback lanes instead.
 */
#include <string.h>

#include "engine/internal.h"

static bool local_can_serve(const cr_engine *e, const cre_endpoints *ep)
{
    return ep->self_target != NULL && cre_kind_is_host(ep->local_kind) &&
           cre_kind_is_host(ep->remote_kind);
}

static int local_submit(cr_engine *e, const cre_endpoints *ep, cre_task *t)
{
    uint8_t *remote = (uint8_t *)(uintptr_t)t->remote_addr;
    if (t->opcode == CR_OP_WRITE)
        memmove(remote, t->local, t->length);
    else
        memmove(t->local, remote, t->length);
    atomic_fetch_add(&e->stats.bytes_local, t->length);
    atomic_store(&t->slices_left, 1);
    cre_task_slice_done(t, 0, t->length);
    return 0;
}

const cre_transport cre_transport_local = {
    .name = "local",
    .can_serve = local_can_serve,
    .submit = local_submit,
};
