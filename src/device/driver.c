/*
 * driver.c - loading the CUDA driver with dlopen, once per process, and the
 * context helpers of driver.h.
 *
 * The loaded table is a process-wide singleton: CUDA itself is per process,
 * and engines come and go. A failed load is remembered (with its reason) so
 * that every engine creation reports the same "no CUDA" cleanly and cheaply.
 */
#include "device/driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static crv_driver loaded;     /* the table dlopen filled */
static crv_driver *current;   /* what opens return (loaded or a test's) */
static int load_status;       /* 0 untried, 1 ok, negative: failed */
static char load_reason[512]; /* why it failed */
static const char default_path[] = "libcuda.so.1";

typedef struct sym {
    const char *name;
    size_t offset;
    bool required;
} sym;

#define REQ(field, name)                                                                           \
    {                                                                                              \
        name, offsetof(crv_driver, field), true                                                    \
    }
#define OPT(field, name)                                                                           \
    {                                                                                              \
        name, offsetof(crv_driver, field), false                                                   \
    }

/* Exported, versioned symbol names: each has one ABI forever. */
static const sym symbols[] = {
    REQ(init, "cuInit"),
    REQ(driver_get_version, "cuDriverGetVersion"),
    REQ(get_error_name, "cuGetErrorName"),
    REQ(device_get_count, "cuDeviceGetCount"),
    REQ(device_get, "cuDeviceGet"),
    REQ(device_get_attribute, "cuDeviceGetAttribute"),
    REQ(device_get_uuid, "cuDeviceGetUuid_v2"),
    REQ(device_get_pci_bus_id, "cuDeviceGetPCIBusId"),
    REQ(primary_ctx_retain, "cuDevicePrimaryCtxRetain"),
    REQ(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2"),
    REQ(ctx_set_current, "cuCtxSetCurrent"),
    REQ(ctx_get_current, "cuCtxGetCurrent"),
    REQ(pointer_get_attributes, "cuPointerGetAttributes"),
    REQ(mem_alloc, "cuMemAlloc_v2"),
    REQ(mem_free, "cuMemFree_v2"),
    REQ(mem_host_alloc, "cuMemHostAlloc"),
    REQ(mem_free_host, "cuMemFreeHost"),
    REQ(mem_host_register, "cuMemHostRegister_v2"),
    REQ(mem_host_unregister, "cuMemHostUnregister"),
    REQ(memcpy_async, "cuMemcpyAsync"),
    REQ(memcpy_htod, "cuMemcpyHtoD_v2"),
    REQ(memcpy_dtoh, "cuMemcpyDtoH_v2"),
    REQ(memset_d8, "cuMemsetD8_v2"),
    REQ(stream_create, "cuStreamCreate"),
    REQ(stream_destroy, "cuStreamDestroy_v2"),
    REQ(stream_synchronize, "cuStreamSynchronize"),
    REQ(event_create, "cuEventCreate"),
    REQ(event_record, "cuEventRecord"),
    REQ(event_query, "cuEventQuery"),
    REQ(event_synchronize, "cuEventSynchronize"),
    REQ(event_destroy, "cuEventDestroy_v2"),
    REQ(ipc_get_mem_handle, "cuIpcGetMemHandle"),
    REQ(ipc_open_mem_handle, "cuIpcOpenMemHandle_v2"),
    REQ(ipc_close_mem_handle, "cuIpcCloseMemHandle"),
    OPT(mem_create, "cuMemCreate"),
    OPT(mem_release, "cuMemRelease"),
    OPT(mem_address_reserve, "cuMemAddressReserve"),
    OPT(mem_address_free, "cuMemAddressFree"),
    OPT(mem_map, "cuMemMap"),
    OPT(mem_unmap, "cuMemUnmap"),
    OPT(mem_set_access, "cuMemSetAccess"),
    OPT(mem_export_to_shareable_handle, "cuMemExportToShareableHandle"),
    OPT(mem_import_from_shareable_handle, "cuMemImportFromShareableHandle"),
    OPT(mem_retain_allocation_handle, "cuMemRetainAllocationHandle"),
    OPT(mem_get_allocation_granularity, "cuMemGetAllocationGranularity"),
    OPT(module_load_data, "cuModuleLoadData"),
    OPT(module_unload, "cuModuleUnload"),
    OPT(module_get_function, "cuModuleGetFunction"),
    OPT(launch_kernel, "cuLaunchKernel"),
    OPT(launch_host_func, "cuLaunchHostFunc"),
};

const char *crv_error_name(const crv_driver *d, CUresult rc)
{
    const char *s = NULL;
    if (d != NULL && d->get_error_name != NULL && d->get_error_name(rc, &s) == CUDA_SUCCESS &&
        s != NULL)
        return s;
    return "CUDA_ERROR_UNKNOWN";
}

int crv_check(const crv_driver *d, CUresult rc, const char *what)
{
    if (rc == CUDA_SUCCESS)
        return 0;
    return crb_error(CR_ERR_CUDA, "%s: %s (%d)", what, crv_error_name(d, rc), (int)rc);
}

/* cuInit and the device inventory; the table's entry points are set. */
static int driver_start(crv_driver *d)
{
    CUresult rc = d->init(0);
    if (rc != CUDA_SUCCESS) {
        snprintf(load_reason, sizeof(load_reason), "cuInit failed: %s (%d) (no usable GPU?)",
                 crv_error_name(d, rc), (int)rc);
        return CR_ERR_NO_CUDA;
    }
    d->driver_get_version(&d->version);
    int n = 0;
    rc = d->device_get_count(&n);
    if (rc != CUDA_SUCCESS || n <= 0) {
        snprintf(load_reason, sizeof(load_reason), "the CUDA driver sees no device (%s)",
                 crv_error_name(d, rc));
        return CR_ERR_NO_CUDA;
    }
    if (n > CRV_MAX_DEVICES)
        n = CRV_MAX_DEVICES;
    for (int i = 0; i < n; i++) {
        if (d->device_get(&d->devices[i], i) != CUDA_SUCCESS ||
            d->device_get_uuid(&d->uuids[i], d->devices[i]) != CUDA_SUCCESS) {
            snprintf(load_reason, sizeof(load_reason), "device %d cannot be queried", i);
            return CR_ERR_NO_CUDA;
        }
    }
    d->n_devices = n;
    d->vmm = d->mem_create && d->mem_release && d->mem_address_reserve && d->mem_address_free &&
             d->mem_map && d->mem_unmap && d->mem_set_access && d->mem_export_to_shareable_handle &&
             d->mem_import_from_shareable_handle && d->mem_retain_allocation_handle &&
             d->mem_get_allocation_granularity;
    pthread_mutex_init(&d->ctx_lock, NULL);
    return 0;
}

static int driver_load(void)
{
    const char *path = getenv("CRESCENT_CUDA_DRIVER");
    if (path == NULL || path[0] == '\0')
        path = default_path;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *why = dlerror();
        snprintf(load_reason, sizeof(load_reason), "cannot load the CUDA driver %s: %s", path,
                 why ? why : "unknown error");
        return CR_ERR_NO_CUDA;
    }
    memset(&loaded, 0, sizeof(loaded));
    for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
        void *f = dlsym(h, symbols[i].name);
        if (f == NULL && symbols[i].required) {
            snprintf(load_reason, sizeof(load_reason),
                     "the CUDA driver %s lacks %s (too old for crescent)", path, symbols[i].name);
            /* keep h loaded: unloading a half-initialised driver is riskier */
            return CR_ERR_NO_CUDA;
        }
        memcpy((char *)&loaded + symbols[i].offset, &f, sizeof(f));
    }
    loaded.path = path;
    return driver_start(&loaded);
}

static int open_locked(crv_driver **out)
{
    if (load_status == 0) {
        int rc = driver_load();
        load_status = rc == 0 ? 1 : rc;
        if (rc == 0) {
            current = &loaded;
            crb_log(CRB_LOG_INFO, "CUDA driver %s loaded: version %d, %d device(s)", loaded.path,
                    loaded.version, loaded.n_devices);
        }
    }
    if (load_status < 0)
        return crb_error(CR_ERR_NO_CUDA, "%s", load_reason);
    pthread_mutex_lock(&current->ctx_lock);
    current->users++;
    pthread_mutex_unlock(&current->ctx_lock);
    *out = current;
    return 0;
}

int crv_driver_open(crv_driver **out)
{
    pthread_mutex_lock(&load_lock);
    int rc = open_locked(out);
    pthread_mutex_unlock(&load_lock);
    return rc;
}

int crv_driver_use(crv_driver *table)
{
    pthread_mutex_lock(&load_lock);
    int rc = driver_start(table);
    if (rc == 0) {
        current = table;
        load_status = 1;
    } else {
        rc = crb_error(CR_ERR_NO_CUDA, "%s", load_reason);
    }
    pthread_mutex_unlock(&load_lock);
    return rc;
}

void crv_driver_reset_for_tests(void)
{
    pthread_mutex_lock(&load_lock);
    current = NULL;
    load_status = 0;
    load_reason[0] = '\0';
    pthread_mutex_unlock(&load_lock);
}

void crv_driver_close(crv_driver *d)
{
    if (d == NULL)
        return;
    pthread_mutex_lock(&d->ctx_lock);
    if (--d->users == 0) {
        for (int i = 0; i < d->n_devices; i++) {
            if (d->primary[i] != NULL) {
                d->primary_ctx_release(d->devices[i]);
                d->primary[i] = NULL;
            }
        }
    }
    pthread_mutex_unlock(&d->ctx_lock);
}

/* The retained primary context of `device`. */
static int primary_of(crv_driver *d, int device, CUcontext *out)
{
    if (device < 0 || device >= d->n_devices)
        return crb_error(CR_INVALID_PARAMS, "cuda:%d does not exist (%d device(s) visible)", device,
                         d->n_devices);
    pthread_mutex_lock(&d->ctx_lock);
    int rc = 0;
    if (d->primary[device] == NULL)
        rc = crv_check(d, d->primary_ctx_retain(&d->primary[device], d->devices[device]),
                       "cuDevicePrimaryCtxRetain");
    CUcontext c = d->primary[device];
    pthread_mutex_unlock(&d->ctx_lock);
    if (rc == 0)
        *out = c;
    return rc;
}

int crv_bind(crv_driver *d, int device)
{
    CUcontext c;
    int rc = primary_of(d, device, &c);
    if (rc < 0)
        return rc;
    return crv_check(d, d->ctx_set_current(c), "cuCtxSetCurrent");
}

int crv_push(crv_driver *d, int device, crv_saved *saved)
{
    saved->prev = NULL;
    saved->changed = false;
    CUcontext c;
    int rc = primary_of(d, device, &c);
    if (rc < 0)
        return rc;
    rc = crv_check(d, d->ctx_get_current(&saved->prev), "cuCtxGetCurrent");
    if (rc < 0 || saved->prev == c)
        return rc;
    rc = crv_check(d, d->ctx_set_current(c), "cuCtxSetCurrent");
    saved->changed = rc == 0;
    return rc;
}

void crv_pop(crv_driver *d, const crv_saved *saved)
{
    if (saved->changed)
        d->ctx_set_current(saved->prev);
}

int crv_device_by_uuid(const crv_driver *d, const uint8_t uuid[16])
{
    for (int i = 0; i < d->n_devices; i++)
        if (memcmp(d->uuids[i].bytes, uuid, 16) == 0)
            return i;
    return -1;
}
