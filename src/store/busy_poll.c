/*
 * busy_poll.c - CRESCENT_BUSY_POLL_US for the store's own waits: the
 * master client's wait for a reply, a thin client's wait for crescent-
 * client's reply, and crescent-client's service loops. The engine reads
 * the same variable for its workers and waits (engine/config.c). Unset:
 * adaptive brief polling (base/spin.h; design §2.7: spin briefly, then
 * sleep); a number fixes the window, 0 turns polling off.
 */
#include "base/spin.h"
#include "store/internal.h"

int crc_spin_mode(int64_t *mode_ns)
{
    return crb_spin_mode_from_env(CR_INVALID_PARAMS, mode_ns);
}
