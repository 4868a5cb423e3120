/*
 * pointer.c - memory classification with cuPointerGetAttributes (pointer.h).
 *
 * One call asks for the memory type, the device, managed-ness, legacy IPC
 * capability, the allocation's range and the handle types it may be
 * exported as; a second call asks for the VMM mapping's extent
 * (CU_POINTER_ATTRIBUTE_MAPPING_*, CUDA 12.x), tolerated to fail on older
 * drivers. Unknown host memory is not an error: the driver answers with
 * memory type 0.
 */
#include "device/pointer.h"

#include <stdio.h>

#include "base/error.h"

const char *crv_mem_type_name(int type)
{
    switch (type) {
    case CRV_MEM_PAGEABLE:
        return "pageable host";
    case CRV_MEM_PINNED:
        return "pinned host";
    case CRV_MEM_DEVICE:
        return "device";
    case CRV_MEM_MANAGED:
        return "managed";
    default:
        return "unknown";
    }
}

int crv_query(const crv_driver *d, uint64_t addr, crv_ptr_info *out)
{
    unsigned int mem_type = 0, managed = 0, legacy_ipc = 0, mapped = 0;
    int ordinal = -1;
    CUdeviceptr range_start = 0;
    size_t range_size = 0;
    unsigned long long handle_types = 0;
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,   CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        CU_POINTER_ATTRIBUTE_MAPPED,           CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
    };
    void *data[] = {&mem_type,    &managed,    &ordinal, &legacy_ipc,
                    &range_start, &range_size, &mapped,  &handle_types};
    CUresult rc =
        d->pointer_get_attributes(sizeof(attrs) / sizeof(attrs[0]), attrs, data, (CUdeviceptr)addr);
    if (rc != CUDA_SUCCESS) {
        char what[96];
        snprintf(what, sizeof(what), "cuPointerGetAttributes(0x%llx)", (unsigned long long)addr);
        return crv_check(d, rc, what);
    }
    crv_ptr_info info = {.type = CRV_MEM_PAGEABLE, .device = -1, .share = CRV_SHARE_NONE};
    if (managed) {
        info.type = CRV_MEM_MANAGED;
        info.device = ordinal;
    } else if (mem_type == CU_MEMORYTYPE_HOST) {
        info.type = CRV_MEM_PINNED;
    } else if (mem_type == CU_MEMORYTYPE_DEVICE) {
        info.type = CRV_MEM_DEVICE;
        info.device = ordinal;
        info.base = range_start;
        info.size = range_size;
        if (legacy_ipc)
            info.share = CRV_SHARE_LEGACY;
        else if (handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
            info.share = CRV_SHARE_VMM_FD;
        if (!legacy_ipc) {
            /* A VMM address: the mapping it lies in is what a peer imports. */
            CUdeviceptr map_base = 0;
            size_t map_size = 0;
            CUpointer_attribute mattrs[] = {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
                                            CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
            void *mdata[] = {&map_base, &map_size};
            if (d->pointer_get_attributes(2, mattrs, mdata, (CUdeviceptr)addr) == CUDA_SUCCESS &&
                map_size > 0 && map_base <= addr && addr - map_base < map_size) {
                info.base = map_base;
                info.size = map_size;
            }
        }
        if (info.size == 0 || info.base > addr || addr - info.base >= info.size) {
            info.base = addr; /* the driver told us nothing useful: one-byte steps are wrong */
            info.size = 0;
        }
    }
    *out = info;
    return 0;
}

static bool is_device(int type)
{
    return type == CRV_MEM_DEVICE;
}

int crv_classify_range(const crv_driver *d, uint64_t addr, uint64_t len, crv_ptr_info *out)
{
    crv_ptr_info first;
    int rc = crv_query(d, addr, &first);
    if (rc < 0)
        return rc;
    uint64_t end = addr + len;
    if (!is_device(first.type)) {
        crv_ptr_info last;
        rc = crv_query(d, end - 1, &last);
        if (rc < 0)
            return rc;
        if (is_device(last.type))
            return crb_error(CR_ERR_MEMORY_KIND_MISMATCH,
                             "[0x%llx, +%llu) starts in %s memory but ends in device memory of "
                             "cuda:%d",
                             (unsigned long long)addr, (unsigned long long)len,
                             crv_mem_type_name(first.type), last.device);
        if (first.type == CRV_MEM_PINNED && last.type != CRV_MEM_PINNED)
            first.type = CRV_MEM_PAGEABLE;
        *out = first;
        return 0;
    }
    /* Device memory: every allocation in the range, same device. */
    crv_ptr_info cur = first;
    int share = first.share;
    uint64_t p = addr;
    for (;;) {
        if (cur.size == 0)
            break; /* extent unknown: trust the first answer for the rest */
        uint64_t next = cur.base + cur.size;
        if (next >= end || next <= p)
            break;
        p = next;
        rc = crv_query(d, p, &cur);
        if (rc < 0)
            return rc;
        if (!is_device(cur.type) || cur.device != first.device)
            return crb_error(CR_ERR_MEMORY_KIND_MISMATCH,
                             "[0x%llx, +%llu) is device memory of cuda:%d up to 0x%llx, then %s "
                             "memory%s",
                             (unsigned long long)addr, (unsigned long long)len, first.device,
                             (unsigned long long)p, crv_mem_type_name(cur.type),
                             is_device(cur.type) ? " of another device" : "");
        if (cur.share != share)
            share = CRV_SHARE_NONE; /* mixed allocations: none of one way for all */
    }
    first.share = share;
    *out = first;
    return 0;
}
