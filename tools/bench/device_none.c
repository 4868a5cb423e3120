/* device_none.c - device_mem.h in a build without CUDA headers: no device. */
#include "device_mem.h"

#include "base/error.h"

int bench_device_alloc(int device, uint64_t len, uint8_t **out)
{
    return crb_error(CR_ERR_NO_CUDA, "crescent was built without CUDA support");
}

void bench_device_free(uint8_t *p)
{
}

int bench_device_copy_gbps(int device, uint64_t block, double seconds, double *gbps)
{
    return crb_error(CR_ERR_NO_CUDA, "crescent was built without CUDA support");
}
