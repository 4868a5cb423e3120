/*
 * fuzz_compat_notify.c - libcrescent-mooncake-compat's parser of Mooncake
 * notification payloads (src/compat/notify_frame.c) on arbitrary peer bytes:
 * it must never read past the payload, and what it frames it must parse back
 * to the same name and message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compat/compat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *name = NULL, *msg = NULL;
    if (crx_notify_parse((const char *)data, size, "peer:1", &name, &msg) == 0) {
        char *framed = NULL;
        size_t len = 0;
        if (crx_notify_frame(name, msg, 1u << 20, &framed, &len) == 0) {
            char *n2 = NULL, *m2 = NULL;
            if (crx_notify_parse(framed, len, "peer:1", &n2, &m2) != 0 || strcmp(n2, name) != 0 ||
                strcmp(m2, msg) != 0)
                abort();
            free(n2);
            free(m2);
            free(framed);
        }
        free(name);
        free(msg);
    }
    return 0;
}
