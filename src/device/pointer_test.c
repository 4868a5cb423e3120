/*
 * pointer_test.c - the driver loader and memory classification with no
 * libcuda: a fake driver table is injected (crv_driver_use), whose
 * cuPointerGetAttributes answers from a small table of made-up
 * allocations, so detection and every refusal path run without a GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "device/driver.h"
#include "device/pointer.h"

/* ---- a fake driver: allocations are (base, size, type, device, share) ---- */

typedef struct fake_alloc {
    uint64_t base, size;
    int mem_type; /* CU_MEMORYTYPE_* or 0 */
    int device;
    bool legacy, vmm, managed;
} fake_alloc;

static fake_alloc allocs[8];
static size_t n_allocs;
static CUresult init_result;
static int ctx_dummy[4];
static _Thread_local CUcontext cur_ctx;

static CUresult f_init(unsigned int f)
{
    return init_result;
}
static CUresult f_version(int *v)
{
    *v = 12040;
    return CUDA_SUCCESS;
}
static CUresult f_err_name(CUresult e, const char **s)
{
    *s = e == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_OTHER";
    return CUDA_SUCCESS;
}
static CUresult f_count(int *n)
{
    *n = 2;
    return CUDA_SUCCESS;
}
static CUresult f_get(CUdevice *d, int i)
{
    *d = i;
    return CUDA_SUCCESS;
}
static CUresult f_uuid(CUuuid *u, CUdevice d)
{
    memset(u, 0, sizeof(*u));
    u->bytes[0] = (char)(0x40 + d);
    return CUDA_SUCCESS;
}
static CUresult f_retain(CUcontext *c, CUdevice d)
{
    *c = (CUcontext)&ctx_dummy[d];
    return CUDA_SUCCESS;
}
static CUresult f_release(CUdevice d)
{
    return CUDA_SUCCESS;
}
static CUresult f_set(CUcontext c)
{
    cur_ctx = c;
    return CUDA_SUCCESS;
}
static CUresult f_getcur(CUcontext *c)
{
    *c = cur_ctx;
    return CUDA_SUCCESS;
}

static CUresult f_attrs(unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr p)
{
    if (p == 0xdead0000)
        return CUDA_ERROR_INVALID_VALUE;
    const fake_alloc *a = NULL;
    for (size_t i = 0; i < n_allocs; i++)
        if (p >= allocs[i].base && p - allocs[i].base < allocs[i].size)
            a = &allocs[i];
    for (unsigned int i = 0; i < n; i++) {
        switch (attrs[i]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            *(unsigned int *)data[i] = a ? (unsigned int)a->mem_type : 0;
            break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:
            *(bool *)data[i] = a && a->managed;
            break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
            *(int *)data[i] = a ? a->device : -2;
            break;
        case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
            *(bool *)data[i] = a && a->legacy;
            break;
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
            *(CUdeviceptr *)data[i] = a ? (a->vmm ? a->base & ~0xfffffull : a->base) : 0;
            break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
            *(size_t *)data[i] = a ? (a->vmm ? 1u << 30 : a->size) : 0;
            break;
        case CU_POINTER_ATTRIBUTE_MAPPED:
            *(bool *)data[i] = a != NULL;
            break;
        case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
            *(unsigned long long *)data[i] =
                a && a->vmm ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : 0;
            break;
        case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
            *(CUdeviceptr *)data[i] = a ? a->base : 0;
            break;
        case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
            *(size_t *)data[i] = a ? a->size : 0;
            break;
        default:
            break;
        }
    }
    return CUDA_SUCCESS;
}

static crv_driver table;

static void fill_table(void)
{
    memset(&table, 0, sizeof(table));
    table.init = f_init;
    table.driver_get_version = f_version;
    table.get_error_name = f_err_name;
    table.device_get_count = f_count;
    table.device_get = f_get;
    table.device_get_uuid = f_uuid;
    table.primary_ctx_retain = f_retain;
    table.primary_ctx_release = f_release;
    table.ctx_set_current = f_set;
    table.ctx_get_current = f_getcur;
    table.pointer_get_attributes = f_attrs;
}

static void add(uint64_t base, uint64_t size, int type, int dev, bool legacy, bool vmm)
{
    allocs[n_allocs++] = (fake_alloc){base, size, type, dev, legacy, vmm, false};
}

static int setup(void **state)
{
    n_allocs = 0;
    init_result = CUDA_SUCCESS;
    cur_ctx = NULL;
    crv_driver_reset_for_tests();
    fill_table();
    add(0x10000000, 0x100000, CU_MEMORYTYPE_DEVICE, 0, true, false);  /* legacy, cuda:0 */
    add(0x10100000, 0x100000, CU_MEMORYTYPE_DEVICE, 0, true, false);  /* adjacent, cuda:0 */
    add(0x10200000, 0x100000, CU_MEMORYTYPE_DEVICE, 1, true, false);  /* adjacent, cuda:1 */
    add(0x20000000, 0x200000, CU_MEMORYTYPE_DEVICE, 1, false, true);  /* VMM chunk */
    add(0x20200000, 0x200000, CU_MEMORYTYPE_DEVICE, 1, false, true);  /* VMM chunk */
    add(0x30000000, 0x100000, CU_MEMORYTYPE_HOST, 0, false, false);   /* pinned host */
    add(0x40000000, 0x100000, CU_MEMORYTYPE_DEVICE, 0, false, false); /* pool: no IPC */
    return 0;
}

static void no_library_is_no_cuda(void **state)
{
    setenv("CRESCENT_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
    crv_driver *d = NULL;
    assert_int_equal(crv_driver_open(&d), CR_ERR_NO_CUDA);
    assert_null(d);
    assert_non_null(strstr(cr_last_error_message(), "/nonexistent/libcuda.so.1"));
    /* remembered: a second open fails the same way without retrying */
    assert_int_equal(crv_driver_open(&d), CR_ERR_NO_CUDA);
    unsetenv("CRESCENT_CUDA_DRIVER");
}

static void init_failure_is_no_cuda(void **state)
{
    init_result = CUDA_ERROR_NO_DEVICE;
    assert_int_equal(crv_driver_use(&table), CR_ERR_NO_CUDA);
    assert_non_null(strstr(cr_last_error_message(), "cuInit"));
}

static void classify_kinds(void **state)
{
    assert_int_equal(crv_driver_use(&table), 0);
    crv_ptr_info in;
    /* unknown host memory is pageable, not an error */
    assert_int_equal(crv_classify_range(&table, 0x50000000, 4096, &in), 0);
    assert_int_equal(in.type, CRV_MEM_PAGEABLE);
    assert_int_equal(in.device, -1);
    /* pinned */
    assert_int_equal(crv_classify_range(&table, 0x30000000, 0x1000, &in), 0);
    assert_int_equal(in.type, CRV_MEM_PINNED);
    /* one legacy allocation, interior pointer */
    assert_int_equal(crv_classify_range(&table, 0x10000100, 0x100, &in), 0);
    assert_int_equal(in.type, CRV_MEM_DEVICE);
    assert_int_equal(in.device, 0);
    assert_int_equal(in.share, CRV_SHARE_LEGACY);
    assert_int_equal(in.base, 0x10000000);
    assert_int_equal(in.size, 0x100000);
    /* two adjacent allocations of one device */
    assert_int_equal(crv_classify_range(&table, 0x10000000, 0x200000, &in), 0);
    assert_int_equal(in.device, 0);
    /* a VMM mapping: the mapping, not the reservation, is the unit */
    assert_int_equal(crv_classify_range(&table, 0x20000010, 0x300000, &in), 0);
    assert_int_equal(in.share, CRV_SHARE_VMM_FD);
    assert_int_equal(in.device, 1);
    assert_int_equal(in.base, 0x20000000);
    assert_int_equal(in.size, 0x200000);
    /* a pool allocation cannot be shared */
    assert_int_equal(crv_classify_range(&table, 0x40000000, 0x1000, &in), 0);
    assert_int_equal(in.share, CRV_SHARE_NONE);
}

static void classify_refusals(void **state)
{
    assert_int_equal(crv_driver_use(&table), 0);
    crv_ptr_info in;
    /* device memory that runs into another device's */
    assert_int_equal(crv_classify_range(&table, 0x10100000, 0x200000, &in),
                     CR_ERR_MEMORY_KIND_MISMATCH);
    assert_non_null(strstr(cr_last_error_message(), "another device"));
    /* device memory that runs into host memory */
    assert_int_equal(crv_classify_range(&table, 0x10200000, 0x200000, &in),
                     CR_ERR_MEMORY_KIND_MISMATCH);
    /* host memory that ends in device memory */
    assert_int_equal(crv_classify_range(&table, 0x0ff00000, 0x200000, &in),
                     CR_ERR_MEMORY_KIND_MISMATCH);
    /* the driver failing is a named CUDA error */
    assert_int_equal(crv_classify_range(&table, 0xdead0000, 16, &in), CR_ERR_CUDA);
    assert_non_null(strstr(cr_last_error_message(), "CUDA_ERROR_INVALID_VALUE"));
}

static void contexts_are_explicit(void **state)
{
    assert_int_equal(crv_driver_use(&table), 0);
    crv_driver *d = NULL;
    assert_int_equal(crv_driver_open(&d), 0);
    assert_ptr_equal(d, &table);
    /* a caller's context survives an engine call */
    CUcontext mine = (CUcontext)&ctx_dummy[3];
    cur_ctx = mine;
    crv_saved saved;
    assert_int_equal(crv_push(d, 1, &saved), 0);
    assert_ptr_equal(cur_ctx, (CUcontext)&ctx_dummy[1]);
    crv_pop(d, &saved);
    assert_ptr_equal(cur_ctx, mine);
    /* a thread without one is left without one */
    cur_ctx = NULL;
    assert_int_equal(crv_push(d, 0, &saved), 0);
    crv_pop(d, &saved);
    assert_null(cur_ctx);
    /* workers bind; unknown devices are refused */
    assert_int_equal(crv_bind(d, 0), 0);
    assert_ptr_equal(cur_ctx, (CUcontext)&ctx_dummy[0]);
    assert_int_equal(crv_bind(d, 7), CR_INVALID_PARAMS);
    uint8_t uuid[16] = {0x41};
    assert_int_equal(crv_device_by_uuid(d, uuid), 1);
    uuid[0] = 0x7f;
    assert_int_equal(crv_device_by_uuid(d, uuid), -1);
    crv_driver_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(no_library_is_no_cuda, setup),
        cmocka_unit_test_setup(init_failure_is_no_cuda, setup),
        cmocka_unit_test_setup(classify_kinds, setup),
        cmocka_unit_test_setup(classify_refusals, setup),
        cmocka_unit_test_setup(contexts_are_explicit, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
