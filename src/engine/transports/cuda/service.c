/*
 * service.c - our CUDA IPC service: a Unix SEQPACKET socket in the abstract
 * namespace ("@crescent-cuda-<pid>-<instance>", the descriptor's "cuda"
 * endpoint) through which same-host peers ask, on first use, for
 *   - our control page (the memfd fencing their copies against our
 *     unregistrations, ctl_page.h), and
 *   - the allocation holding an address of one of our registered,
 *     remote-accessible device buffers: its extent and either a legacy
 *     IPC handle (cuIpcGetMemHandle, in the reply) or, for VMM memory
 *     (PyTorch's expandable segments), a POSIX fd from
 *     cuMemExportToShareableHandle, passed as SCM_RIGHTS.
 * Nothing is exported before a peer asks. Like the shm fd service, only
 * processes of our uid are answered unless shm_allow_any_user is set, and
 * every connection starts with the same greeting and, when the engine has
 * a shared secret, the same proof of it (label "cuda"): the listener, its
 * connections and that proof are local_service.c's, in worker 0's loop,
 * which binds the device's context itself before each driver call.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "engine/transports/cuda/cuda.h"
#include "engine/transports/shm/shm.h"

static void reply(cre_local_conn *c, const cuda_reply *r, int fd)
{
    uint8_t raw[CUDA_REPLY_SIZE];
    cuda_reply_encode(r, raw);
    cre_local_send_datagram(c->io.fd, raw, sizeof(raw), fd, "cuda service");
}

typedef struct find_ctx {
    uint64_t addr;
    int device;
} find_ctx;

/* Is addr inside a registered, remote-accessible device buffer? */
static int find_device_buffer(void *ctx, cre_buffer *const *items, size_t n, uint64_t version)
{
    find_ctx *f = ctx;
    for (size_t i = 0; i < n; i++) {
        const cre_buffer *b = items[i];
        if (f->addr >= b->addr && f->addr - b->addr < b->length)
            if (b->kind == CR_MEM_CUDA && b->remote_accessible) {
                f->device = b->device;
                return 1;
            }
    }
    return 0;
}

/* The allocation holding req->addr, exported. *fd: a VMM fd to pass. */
static int export_one(cuda_engine *ce, uint64_t addr, cuda_reply *r, int *fd)
{
    cr_engine *e = ce->tp->engine;
    crv_driver *d = ce->drv;
    find_ctx f = {addr, -1};
    if (cre_registry_visit(&e->registry, find_device_buffer, &f) != 1)
        return crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                         "0x%llx is in no registered remote-accessible device buffer",
                         (unsigned long long)addr);
    int rc = crv_bind(d, f.device);
    crv_ptr_info in;
    if (rc == 0)
        rc = crv_query(d, addr, &in);
    if (rc < 0)
        return rc;
    if (in.type != CRV_MEM_DEVICE || in.size == 0)
        return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED, "0x%llx has no exportable allocation",
                         (unsigned long long)addr);
    r->share = (uint8_t)in.share;
    r->base = in.base;
    r->size = in.size;
    if (in.share == CRV_SHARE_LEGACY) {
        CUipcMemHandle h;
        rc = crv_check(d, d->ipc_get_mem_handle(&h, (CUdeviceptr)in.base), "cuIpcGetMemHandle");
        if (rc == 0)
            memcpy(r->handle, &h, sizeof(h) < CUDA_HANDLE_LEN ? sizeof(h) : CUDA_HANDLE_LEN);
        return rc;
    }
    if (in.share == CRV_SHARE_VMM_FD && d->vmm) {
        CUmemGenericAllocationHandle h;
        rc = crv_check(d, d->mem_retain_allocation_handle(&h, (void *)(uintptr_t)addr),
                       "cuMemRetainAllocationHandle");
        if (rc < 0)
            return rc;
        int out = -1;
        rc = crv_check(
            d,
            d->mem_export_to_shareable_handle(&out, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            "cuMemExportToShareableHandle");
        d->mem_release(h); /* the fd holds the allocation now */
        if (rc == 0)
            *fd = out;
        return rc;
    }
    return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED,
                     "the allocation holding 0x%llx cannot be shared (neither legacy IPC nor a VMM "
                     "POSIX fd)",
                     (unsigned long long)addr);
}

/* Serve one datagram past the proof. */
static bool serve_request(cre_local_conn *c, const uint8_t *data, size_t len)
{
    cre_tp *tp = c->svc->owner;
    cuda_engine *ce = tp->priv;
    cuda_reply r = {0};
    cuda_req req;
    int fd = -1;
    if (cuda_req_decode(data, len, &req) < 0) {
        r.status = CR_ERR_MALFORMED_FRAME;
    } else if (!c->allowed) {
        r.status = CR_ERR_AUTH_FAILED;
    } else if (req.op == CUDA_REQ_CONTROL_PAGE) {
        fd = fcntl(ce->ctl.fd, F_DUPFD_CLOEXEC, 0);
        r.status = fd >= 0 ? 0 : CR_ERR_SYSTEM;
        r.base = 0;
        r.size = ce->ctl.size;
    } else {
        r.status = export_one(ce, req.addr, &r, &fd);
        if (r.status == 0)
            atomic_fetch_add(&ce->exports, 1);
        else
            crb_log(CRB_LOG_INFO, "cuda service: %s", cr_last_error_message());
    }
    reply(c, &r, r.status == 0 ? fd : -1);
    if (fd >= 0)
        close(fd);
    return true;
}

void cuda_service_tick(cre_tp *tp, cre_worker *w, uint64_t now_ns)
{
    cuda_engine *ce = tp->priv;
    cre_local_service_tick(&ce->svc, w, now_ns);
}

int cuda_service_start(cre_tp *tp)
{
    cr_engine *e = tp->engine;
    cuda_engine *ce = tp->priv;
    char address[96];
    snprintf(address, sizeof(address), "@crescent-cuda-%d-%016llx", (int)getpid(),
             (unsigned long long)e->instance);
    return cre_local_service_start(&ce->svc, e, tp, address, "cuda service", "cuda", serve_request);
}

void cuda_service_stop(cre_tp *tp)
{
    cuda_engine *ce = tp->priv;
    cre_local_service_stop(&ce->svc);
}
