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
#include <string.h>

#include "crescent/status.h"
#include "fuzz_check.h"
#include "proto/messages.h"

/* A failed decode: a decode status (CR_NOT_SUPPORTED too if
 * unsupported_ok: an op this build does not know), a message, and the
 * output not written. */
static inline void fuzz_check_failure_of(int rc, const void *out, size_t n, int unsupported_ok)
{
    FUZZ_CHECK(rc == CR_ERR_MALFORMED_FRAME || (unsupported_ok && rc == CR_NOT_SUPPORTED));
    FUZZ_CHECK(fuzz_untouched(out, n));
    FUZZ_CHECK(cr_last_error_message()[0] != '\0');
}

/* Two encodings of the same message must be byte-identical. */
static inline void fuzz_check_same_bytes(const crp_buf *a, const crp_buf *b)
{
    FUZZ_CHECK(a->len == b->len);
    FUZZ_CHECK(a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static inline void fuzz_check_failure(int rc, const void *out, size_t n)
{
    fuzz_check_failure_of(rc, out, n, 0);
}

static inline int fuzz_str_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

/* For FUZZ_ROUNDTRIP_TARGET: a message without invariants of its own, a
 * message type without a clear function, a round trip checked by its bytes
 * alone. */
#define FUZZ_NO_CHECK(m)   ((void)(m))
#define FUZZ_NO_CLEAR(m)   ((void)(m))
#define FUZZ_NO_SAME(a, b) ((void)(a), (void)(b))

/*
 * FUZZ_ROUNDTRIP_TARGET defines LLVMFuzzerTestOneInput for a message type T
 * with the contract above: decode the input (into a sentinel-filled T);
 * a failure must be a decode status (fuzz_check_failure_of), a success
 * must pass valid(&first), re-encode to at most max_growth bytes more than
 * the input (SIZE_MAX: no bound), decode again, pass same(&first,
 * &second) (the fields a round trip keeps) and encode to the very same
 * bytes. clear(&m) frees a decoded message (FUZZ_NO_CLEAR: nothing to free).
 */
#define FUZZ_ROUNDTRIP_TARGET(T, decode, encode, clear, valid, same, max_growth, unsupported_ok)   \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)                                   \
    {                                                                                              \
        T first, second;                                                                           \
        crp_buf enc1 = {0}, enc2 = {0};                                                            \
        memset(&first, FUZZ_SENTINEL, sizeof(first));                                              \
        int rc = decode(data, size, &first);                                                       \
        if (rc != 0) {                                                                             \
            fuzz_check_failure_of(rc, &first, sizeof(first), (unsupported_ok));                    \
            return 0;                                                                              \
        }                                                                                          \
        valid(&first);                                                                             \
        FUZZ_CHECK(encode(&first, &enc1) == 0);                                                    \
        FUZZ_CHECK((size_t)(max_growth) == SIZE_MAX || enc1.len <= size + (size_t)(max_growth));   \
        memset(&second, 0, sizeof(second));                                                        \
        FUZZ_CHECK(decode(enc1.data, enc1.len, &second) == 0);                                     \
        same(&first, &second);                                                                     \
        FUZZ_CHECK(encode(&second, &enc2) == 0);                                                   \
        fuzz_check_same_bytes(&enc1, &enc2);                                                       \
        clear(&first);                                                                             \
        clear(&second);                                                                            \
        crp_buf_free(&enc1);                                                                       \
        crp_buf_free(&enc2);                                                                       \
        return 0;                                                                                  \
    }

#endif
