/*
 * size.c - cr_parse_size: human-readable sizes with binary multiples (the
 * parser itself is base's crb_parse_size, shared with the daemons' flags).
 */
#include "base/flagtab.h"
#include "crescent/store.h"

int cr_parse_size(const char *text, uint64_t *out)
{
    return crb_parse_size(text, out);
}
