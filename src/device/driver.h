/*
 * driver.h - the CUDA driver API as crescent uses it: a table of function
 * pointers filled by dlopen("libcuda.so.1") at run time, so libcrescent
 * never links libcuda or libcudart and runs (without device memory) where
 * no driver is installed. Compiled only when CMake found the CUDA headers
 * (CRESCENT_WITH_CUDA); the types come from <cuda.h>.
 *
 * Loading: crv_driver_open() loads the library once per process (the path
 * can be overridden with $CRESCENT_CUDA_DRIVER, which the tests use to load
 * a fake driver), resolves every entry point by its exported versioned name
 * (cuMemAlloc_v2, ...: the ABI of each is fixed whatever the driver's
 * version), calls cuInit(0) and counts devices. Failure is remembered with
 * its reason and reported as CR_ERR_NO_CUDA on every later open. Engines
 * open at creation and close at destroy; the last close releases the
 * primary contexts we retained (the library stays loaded: dlclose under a
 * live driver is unsafe).
 *
 * Contexts (design.md §2.3): nothing here reads the calling thread's
 * current context. A device's primary context is retained on first use and
 * made current explicitly by whoever is about to call the driver for that
 * device: worker threads with crv_bind(), caller threads (registration,
 * submit) with crv_push()/crv_pop(), which restore whatever context the
 * caller had, so the application's own thread state is never changed.
 *
 * Threading: every function may be called from any thread.
 */
#ifndef CRESCENT_DEVICE_DRIVER_H
#define CRESCENT_DEVICE_DRIVER_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CRV_MAX_DEVICES 64

/* Entry points; names drop the "cu" prefix (cuda.h #defines many cu* names
 * to their _v2 symbols). Those marked optional may be NULL: the features
 * that need them are then off (VMM import, kernels for tests). */
typedef struct crv_driver {
    CUresult (*init)(unsigned int flags);
    CUresult (*driver_get_version)(int *version);
    CUresult (*get_error_name)(CUresult e, const char **s);
    CUresult (*device_get_count)(int *n);
    CUresult (*device_get)(CUdevice *d, int ordinal);
    CUresult (*device_get_attribute)(int *v, CUdevice_attribute a, CUdevice d);
    CUresult (*device_get_uuid)(CUuuid *u, CUdevice d);
    CUresult (*device_get_pci_bus_id)(char *id, int len, CUdevice d);
    CUresult (*primary_ctx_retain)(CUcontext *c, CUdevice d);
    CUresult (*primary_ctx_release)(CUdevice d);
    CUresult (*ctx_set_current)(CUcontext c);
    CUresult (*ctx_get_current)(CUcontext *c);
    CUresult (*pointer_get_attributes)(unsigned int n, CUpointer_attribute *attrs, void **data,
                                       CUdeviceptr p);
    CUresult (*mem_alloc)(CUdeviceptr *p, size_t n);
    CUresult (*mem_free)(CUdeviceptr p);
    CUresult (*mem_host_alloc)(void **p, size_t n, unsigned int flags);
    CUresult (*mem_free_host)(void *p);
    CUresult (*mem_host_register)(void *p, size_t n, unsigned int flags);
    CUresult (*mem_host_unregister)(void *p);
    CUresult (*memcpy_async)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
    CUresult (*memcpy_htod)(CUdeviceptr dst, const void *src, size_t n);
    CUresult (*memcpy_dtoh)(void *dst, CUdeviceptr src, size_t n);
    CUresult (*memset_d8)(CUdeviceptr p, unsigned char v, size_t n);
    CUresult (*stream_create)(CUstream *s, unsigned int flags);
    CUresult (*stream_destroy)(CUstream s);
    CUresult (*stream_synchronize)(CUstream s);
    CUresult (*event_create)(CUevent *e, unsigned int flags);
    CUresult (*event_record)(CUevent e, CUstream s);
    CUresult (*event_query)(CUevent e);
    CUresult (*event_synchronize)(CUevent e);
    CUresult (*event_destroy)(CUevent e);
    CUresult (*ipc_get_mem_handle)(CUipcMemHandle *h, CUdeviceptr p);
    CUresult (*ipc_open_mem_handle)(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags);
    CUresult (*ipc_close_mem_handle)(CUdeviceptr p);
    /* VMM (optional) */
    CUresult (*mem_create)(CUmemGenericAllocationHandle *h, size_t n,
                           const CUmemAllocationProp *prop, unsigned long long flags);
    CUresult (*mem_release)(CUmemGenericAllocationHandle h);
    CUresult (*mem_address_reserve)(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr,
                                    unsigned long long flags);
    CUresult (*mem_address_free)(CUdeviceptr p, size_t n);
    CUresult (*mem_map)(CUdeviceptr p, size_t n, size_t offset, CUmemGenericAllocationHandle h,
                        unsigned long long flags);
    CUresult (*mem_unmap)(CUdeviceptr p, size_t n);
    CUresult (*mem_set_access)(CUdeviceptr p, size_t n, const CUmemAccessDesc *desc, size_t count);
    CUresult (*mem_export_to_shareable_handle)(void *out, CUmemGenericAllocationHandle h,
                                               CUmemAllocationHandleType type,
                                               unsigned long long flags);
    CUresult (*mem_import_from_shareable_handle)(CUmemGenericAllocationHandle *h, void *os_handle,
                                                 CUmemAllocationHandleType type);
    CUresult (*mem_retain_allocation_handle)(CUmemGenericAllocationHandle *h, void *addr);
    CUresult (*mem_get_allocation_granularity)(size_t *g, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option);
    /* kernels (optional; the GPU tests' device-side checksums) */
    CUresult (*module_load_data)(CUmodule *m, const void *image);
    CUresult (*module_unload)(CUmodule m);
    CUresult (*module_get_function)(CUfunction *f, CUmodule m, const char *name);
    CUresult (*launch_kernel)(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                              unsigned int bx, unsigned int by, unsigned int bz,
                              unsigned int shared, CUstream s, void **params, void **extra);
    /* launch_host_func (optional): a callback after prior work of a stream */
    CUresult (*launch_host_func)(CUstream s, CUhostFn fn, void *data);

    /* --- state (filled by crv_driver_open / crv_driver_use) --- */
    int version; /* cuDriverGetVersion */
    int n_devices;
    bool vmm; /* every VMM entry point resolved */
    const char *path;
    pthread_mutex_t ctx_lock;
    CUcontext primary[CRV_MAX_DEVICES]; /* retained on first use */
    CUdevice devices[CRV_MAX_DEVICES];
    CUuuid uuids[CRV_MAX_DEVICES];
    int users; /* engines holding it open; guarded by ctx_lock */
} crv_driver;

/**
 * The process's CUDA driver: loaded on the first call, then shared. On
 * success *out is the table (valid until the process exits) and the caller
 * holds one use (release with crv_driver_close). Errors: CR_ERR_NO_CUDA,
 * with the reason (library not found, an entry point missing, cuInit
 * failing: no device, no permission) in the message.
 */
int crv_driver_open(crv_driver **out);

/** Drop one use; the last one releases the primary contexts retained. */
void crv_driver_close(crv_driver *d);

/**
 * Tests: make `table` the process's driver (its entry points filled by the
 * test, state fields zero), as if it had been loaded, and run cuInit
 * through it. Later opens return it. Returns crv_driver_open's errors.
 */
int crv_driver_use(crv_driver *table);

/** Forget the process's driver (tests only; no engine may hold it). */
void crv_driver_reset_for_tests(void);

/** 0 for CUDA_SUCCESS, else crb_error(CR_ERR_CUDA, "<what>: <CUDA error name>"). */
int crv_check(const crv_driver *d, CUresult rc, const char *what);

/** The driver's name of a result ("CUDA_ERROR_INVALID_VALUE"). */
const char *crv_error_name(const crv_driver *d, CUresult rc);

/**
 * Make device `device`'s primary context current on this thread (retained
 * on first use). For threads the engine owns (workers), which have no
 * context of their own to keep. Errors: CR_INVALID_PARAMS (no such
 * device), CR_ERR_CUDA.
 */
int crv_bind(crv_driver *d, int device);

/** What crv_push replaced; crv_pop puts it back. */
typedef struct crv_saved {
    CUcontext prev;
    bool changed;
} crv_saved;

/**
 * On a caller's thread: make `device`'s primary context current for the
 * duration of an engine call, remembering the caller's current context.
 * Always pair with crv_pop (also on failure after a successful push).
 */
int crv_push(crv_driver *d, int device, crv_saved *saved);
void crv_pop(crv_driver *d, const crv_saved *saved);

/** The ordinal of the visible device with this UUID, or -1. */
int crv_device_by_uuid(const crv_driver *d, const uint8_t uuid[16]);

#endif
