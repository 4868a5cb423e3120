/*
 * size.c - cr_parse_size: human-readable sizes with binary multiples.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "crescent/store.h"

int cr_parse_size(const char *text, uint64_t *out)
{
    if (text == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "size: NULL argument");
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (!isdigit((unsigned char)*p))
        return crb_error(CR_INVALID_PARAMS, "size '%s' does not start with a number", text);
    errno = 0;
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno != 0)
        return crb_error(CR_INVALID_PARAMS, "size '%s' is out of range", text);
    while (isspace((unsigned char)*end))
        end++;
    static const struct {
        const char *suffix;
        unsigned shift;
    } units[] = {{"", 0},     {"b", 0},   {"k", 10},   {"kb", 10}, {"kib", 10},
                 {"m", 20},   {"mb", 20}, {"mib", 20}, {"g", 30},  {"gb", 30},
                 {"gib", 30}, {"t", 40},  {"tb", 40},  {"tib", 40}};
    size_t n = strlen(end);
    while (n > 0 && isspace((unsigned char)end[n - 1]))
        n--;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strlen(units[i].suffix) != n || strncasecmp(end, units[i].suffix, n) != 0)
            continue;
        if (units[i].shift > 0 && v > (UINT64_MAX >> units[i].shift))
            return crb_error(CR_INVALID_PARAMS, "size '%s' overflows 64 bits", text);
        *out = (uint64_t)v << units[i].shift;
        return 0;
    }
    return crb_error(CR_INVALID_PARAMS,
                     "size '%s' has an unknown unit (use B, KB/KiB, MB/MiB, GB/GiB, TB/TiB)", text);
}
