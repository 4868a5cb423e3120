/*
 * fuzz_check.h - what every libFuzzer target here uses, whatever it decodes
 * (frames, disk structures, etcd replies): the check that aborts with the
 * condition, place and last error so libFuzzer records the input, and the
 * sentinel the output is filled with before a decode, so that a failed
 * decode can be shown to have left it untouched. No dependency beyond
 * crescent/status.h; fuzz_common.h adds the frame codecs' contract.
 */
#ifndef CRESCENT_FUZZ_CHECK_H
#define CRESCENT_FUZZ_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"

#define FUZZ_SENTINEL 0x5A

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz check failed: %s at %s:%d (last error: %s)\n", #cond, __FILE__,  \
                    __LINE__, cr_last_error_message());                                            \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Is every byte of p[0..n) still the sentinel? */
static inline int fuzz_untouched(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != FUZZ_SENTINEL)
            return 0;
    return 1;
}

#endif
