/* alloc.c - the libc heap as a crb_alloc_ops table. */
#include "base/alloc.h"

#include <stdlib.h>

const crb_alloc_ops crb_alloc_libc = {
    .alloc = malloc,
    .alloc_zeroed = calloc,
    .resize = realloc,
    .release = free,
};
