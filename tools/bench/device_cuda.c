/* device_cuda.c - device_mem.h through the CUDA driver (src/device). */
#include "device_mem.h"

#include <time.h>

#include "base/error.h"
#include "device/driver.h"

static crv_driver *drv;

static int open_device(int device)
{
    if (drv == NULL && crv_driver_open(&drv) < 0)
        return CR_ERR_NO_CUDA;
    return crv_bind(drv, device);
}

int bench_device_alloc(int device, uint64_t len, uint8_t **out)
{
    int rc = open_device(device);
    if (rc < 0)
        return rc;
    CUdeviceptr p;
    rc = crv_check(drv, drv->mem_alloc(&p, len), "cuMemAlloc");
    if (rc == 0)
        rc = crv_check(drv, drv->memset_d8(p, 0x5a, len), "cuMemsetD8");
    if (rc == 0)
        *out = (uint8_t *)(uintptr_t)p;
    return rc;
}

void bench_device_free(uint8_t *p)
{
    if (drv != NULL && p != NULL)
        drv->mem_free((CUdeviceptr)(uintptr_t)p);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int bench_device_copy_gbps(int device, uint64_t block, double seconds, double *gbps)
{
    uint8_t *a = NULL, *b = NULL;
    int rc = bench_device_alloc(device, block, &a);
    if (rc == 0)
        rc = bench_device_alloc(device, block, &b);
    CUstream s = NULL;
    if (rc == 0)
        rc = crv_check(drv, drv->stream_create(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    uint64_t bytes = 0;
    double t0 = now_s(), t = t0;
    while (rc == 0 && t - t0 < seconds) {
        for (int i = 0; i < 16 && rc == 0; i++) {
            rc = crv_check(
                drv,
                drv->memcpy_async((CUdeviceptr)(uintptr_t)b, (CUdeviceptr)(uintptr_t)a, block, s),
                "cuMemcpyAsync");
            bytes += block;
        }
        if (rc == 0)
            rc = crv_check(drv, drv->stream_synchronize(s), "cuStreamSynchronize");
        t = now_s();
    }
    if (s != NULL)
        drv->stream_destroy(s);
    bench_device_free(a);
    bench_device_free(b);
    if (rc == 0)
        *gbps = (double)bytes / (t - t0) / 1e9;
    return rc;
}
