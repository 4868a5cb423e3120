/*
 * fuzz_common.h - helpers shared by the libFuzzer targets.
 *
 * Every target follows the same contract check: decode the input; on
 * failure the status must be a decode failure and the output struct must be
 * byte-for-byte untouched; on success the struct must re-encode, decode
 * again to the same fields, and encode canonically (the second encoding is
 * identical to the first). Any violation aborts so libFuzzer records it.
 */
#ifndef CRESCENT_FUZZ_COMMON_H
#define CRESCENT_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "proto/messages.h"

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

/* A failed decode: a decode status, and the output not written. */
static inline void fuzz_check_failure(int rc, const void *out, size_t n)
{
    FUZZ_CHECK(rc == CR_ERR_MALFORMED_FRAME);
    FUZZ_CHECK(fuzz_untouched(out, n));
    FUZZ_CHECK(cr_last_error_message()[0] != '\0');
}

/* Two encodings of the same message must be byte-identical. */
static inline void fuzz_check_same_bytes(const crp_buf *a, const crp_buf *b)
{
    FUZZ_CHECK(a->len == b->len);
    FUZZ_CHECK(a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static inline int fuzz_str_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

#endif
