/*
 * notify_frame.c - the framing of Mooncake's (name, msg) notifications in
 * crescent's notification payloads: "\0MCNOTIFY\0" name "\0" msg, the
 * framing the mooncake Python package uses too. A payload without the
 * magic is a crescent-native notification (its sender is its name). The
 * parser takes bytes from a peer: bounds-checked, fuzzed
 * (fuzz/fuzz_compat_notify.c).
 */
#include <stdlib.h>
#include <string.h>

#include "compat/compat.h"

#define MAGIC     "\0MCNOTIFY\0"
#define MAGIC_LEN 10

int crx_notify_frame(const char *name, const char *msg, size_t cap, char **out, size_t *len)
{
    size_t nl = strlen(name), ml = strlen(msg);
    if (nl > cap || ml > cap || MAGIC_LEN + nl + 1 + ml > cap)
        return -1;
    size_t n = MAGIC_LEN + nl + 1 + ml;
    char *p = malloc(n);
    if (p == NULL)
        return -1;
    memcpy(p, MAGIC, MAGIC_LEN);
    memcpy(p + MAGIC_LEN, name, nl + 1);
    memcpy(p + MAGIC_LEN + nl + 1, msg, ml);
    *out = p;
    *len = n;
    return 0;
}

int crx_notify_parse(const char *payload, size_t len, const char *sender, char **name, char **msg)
{
    char *n = NULL, *m = NULL;
    if (len >= MAGIC_LEN && memcmp(payload, MAGIC, MAGIC_LEN) == 0) {
        const char *p = payload + MAGIC_LEN;
        size_t rest = len - MAGIC_LEN;
        size_t nl = strnlen(p, rest);
        n = strndup(p, nl);
        m = nl < rest ? strndup(p + nl + 1, rest - nl - 1) : strdup("");
    } else {
        n = strdup(sender != NULL ? sender : "");
        m = strndup(payload, len);
    }
    if (n == NULL || m == NULL) {
        free(n);
        free(m);
        return -1;
    }
    *name = n;
    *msg = m;
    return 0;
}
