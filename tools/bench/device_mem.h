/*
 * device_mem.h - device memory for crescent-bench engine --location cuda:N
 * (docs/gpu.md). device_cuda.c implements it through the CUDA driver that
 * libcrescent loads (built with the CUDA headers); device_none.c, in builds
 * without them, reports that there is no CUDA. The benchmark exits 77
 * (skipped) when no device memory can be had.
 */
#ifndef CRESCENT_TOOLS_BENCH_DEVICE_MEM_H
#define CRESCENT_TOOLS_BENCH_DEVICE_MEM_H

#include <stdint.h>

/** len bytes of device memory on cuda:device. 0, or CR_ERR_NO_CUDA / CR_ERR_CUDA. */
int bench_device_alloc(int device, uint64_t len, uint8_t **out);
void bench_device_free(uint8_t *p);
/** cuMemcpyAsync device->device within this process: GB/s for `block`-byte copies. */
int bench_device_copy_gbps(int device, uint64_t block, double seconds, double *gbps);

#endif
