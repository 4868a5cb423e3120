/*
 * busy_poll.c - CRESCENT_BUSY_POLL_US for the store's own waits: the
 * master client's wait for a reply, a thin client's wait for crescent-
 * client's reply, and crescent-client's service loops. Unlike the engine's
 * waits (engine/config.c: adaptive polling when unset) these sleep at once
 * unless a fixed window is set: the adaptive windows cost the master client
 * 10-30 % of its calls per second with many caller threads on a small
 * machine, and a store call's master or crescent-client sees gaps between
 * one caller's requests longer than the window anyway (docs/latency.md).
 */
#include "base/spin.h"
#include "store/internal.h"

int crc_spin_mode(int64_t *mode_ns)
{
    int64_t mode;
    int rc = crb_spin_mode_from_env(CR_INVALID_PARAMS, &mode);
    if (rc < 0)
        return rc;
    *mode_ns = mode == CRB_SPIN_ADAPTIVE ? 0 : mode;
    return 0;
}
