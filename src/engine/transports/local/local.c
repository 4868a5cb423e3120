/*
 * local.c - the local transport: both ends are in this process, so a
 * transfer is one memcpy on the submitting thread. Used for the engine's own
 * segment when the protocol is "auto"; with protocol "tcp" the caller asked
 * for tcp only and self-transfers go through loopback lanes instead.
 */
#include <string.h>

#include "engine/internal.h"

void cre_local_transfer(cre_task *t, uint8_t *remote)
{
    if (t->opcode == CR_OP_WRITE)
        memmove(remote, t->local, t->length);
    else
        memmove(t->local, remote, t->length);
    atomic_fetch_add(&t->batch->engine->stats.bytes_local, t->length);
    atomic_store(&t->slices_left, 1);
    cre_task_slice_done(t, 0, t->length);
}
