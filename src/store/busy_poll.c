/*
 * busy_poll.c - CRESCENT_BUSY_POLL_US for the store's own waits: the
 * master client's wait for a reply, a thin client's wait for crescent-
 * client's reply, and crescent-client's service loops. The engine reads
 * the same variable for its workers and batch waits (engine/config.c).
 * Off (0) unless set: design.md §2.7 (no spinning by default) holds.
 */
#include <stdlib.h>

#include "base/error.h"
#include "store/internal.h"

#define MAX_BUSY_POLL_US 10000

int crc_busy_poll_ns(uint64_t *out)
{
    const char *bp = getenv("CRESCENT_BUSY_POLL_US");
    if (bp == NULL || bp[0] == '\0') {
        *out = 0;
        return 0;
    }
    char *end = NULL;
    unsigned long us = strtoul(bp, &end, 10);
    if (end == bp || *end != '\0' || us > MAX_BUSY_POLL_US)
        return crb_error(CR_INVALID_PARAMS,
                         "CRESCENT_BUSY_POLL_US '%s' is not a number of microseconds from 0 to %d",
                         bp, MAX_BUSY_POLL_US);
    *out = (uint64_t)us * 1000;
    return 0;
}
