/*
 * import.c - a same-host peer's device memory, seen from here (CUDA IPC).
 *
 * Nothing is imported when a peer is opened. The first transfer touching
 * one of its device buffers connects to its service (service.c), maps its
 * control page, asks for the allocation holding the address and imports
 * it: cuIpcOpenMemHandle for legacy memory, cuMemImportFromShareableHandle
 * + cuMemAddressReserve + cuMemMap + cuMemSetAccess for VMM memory. The
 * import is cached for later transfers. It is dropped when the peer's new
 * descriptor no longer has a buffer over it (unregistered), when the peer
 * restarts (peer_reset) and when its service connection hangs up (it
 * died), each time after the copies using it have finished (users count).
 *
 * Copies are fenced by the peer's control-page slot of the buffer, as shm
 * copies are (ctl_page.h): a peer that unregisters the buffer during our
 * copy makes it fail rather than report success for memory it reuses.
 * They run on a stream of the device that owns the memory, with its
 * primary context made current explicitly (crv_push) on the submitting
 * thread, which waits for the copy's event.
 *
 * Locking: cp->lock serialises connecting, requests and the import table;
 * it is not held during copies.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/transports/cuda/cuda.h"
#include "engine/transports/shm/shm.h"

static cuda_engine *engine_of(cuda_peer *cp)
{
    return cre_engine_tp(cp->engine, "cuda")->priv;
}

void cuda_peer_init(cuda_peer *cp, cr_engine *e, cre_peer *p)
{
    memset(cp, 0, sizeof(*cp));
    cp->engine = e;
    cp->peer = p;
    cp->sock = -1;
    pthread_mutex_init(&cp->lock, NULL);
}

/* Unmap/close an import. Caller holds cp->lock. */
static void import_close(cuda_peer *cp, cuda_import *im)
{
    cuda_engine *ce = engine_of(cp);
    crv_driver *d = ce->drv;
    crv_saved saved;
    if (crv_push(d, im->device, &saved) == 0) {
        if (im->share == CRV_SHARE_LEGACY) {
            d->ipc_close_mem_handle(im->local);
        } else {
            d->mem_unmap(im->local, im->reserved);
            d->mem_address_free(im->local, im->reserved);
            d->mem_release(im->handle);
        }
    }
    crv_pop(d, &saved);
    atomic_fetch_sub(&ce->imports, 1);
}

/* Close dead imports nobody uses; compact the table. Caller holds lock. */
static void sweep_locked(cuda_peer *cp)
{
    size_t k = 0;
    for (size_t i = 0; i < cp->n_imports; i++) {
        cuda_import *im = cp->imports[i];
        if (im->dead && im->users == 0) {
            import_close(cp, im);
            free(im);
        } else {
            cp->imports[k++] = im;
        }
    }
    cp->n_imports = k;
    if (cp->ctl_stale && cp->ctl_users == 0 && cp->ctl != NULL) {
        munmap(cp->ctl, cp->ctl_size);
        cp->ctl = NULL;
        cp->ctl_stale = false;
    }
}

static void close_sock_locked(cuda_peer *cp)
{
    if (cp->sock < 0)
        return;
    if (cp->watching)
        crb_loop_del(&cp->watch);
    cp->watching = false;
    close(cp->sock);
    cp->sock = -1;
}

/* Everything imported from the peer is worthless (restart, death). */
static void drop_locked(cuda_peer *cp)
{
    for (size_t i = 0; i < cp->n_imports; i++)
        cp->imports[i]->dead = true;
    cp->ctl_stale = cp->ctl != NULL;
    close_sock_locked(cp);
    sweep_locked(cp);
}

void cuda_peer_drop(cuda_peer *cp)
{
    pthread_mutex_lock(&cp->lock);
    drop_locked(cp);
    pthread_mutex_unlock(&cp->lock);
}

void cuda_peer_fini(cuda_peer *cp)
{
    if (cp->engine == NULL)
        return;
    pthread_mutex_lock(&cp->lock);
    drop_locked(cp);
    pthread_mutex_unlock(&cp->lock);
    free(cp->imports);
    pthread_mutex_destroy(&cp->lock);
}

void cuda_peer_release(cuda_peer *cp, cuda_import *im, bool drop_import)
{
    pthread_mutex_lock(&cp->lock);
    if (im != NULL) {
        im->users--;
        if (drop_import)
            im->dead = true; /* do not keep memory the peer let go of alive */
    }
    cp->ctl_users--;
    sweep_locked(cp);
    pthread_mutex_unlock(&cp->lock);
}

/* Drop imports that no buffer of the new descriptor covers. */
void cuda_peer_prune(cuda_peer *cp, const crp_descriptor *d)
{
    pthread_mutex_lock(&cp->lock);
    for (size_t i = 0; i < cp->n_imports; i++) {
        cuda_import *im = cp->imports[i];
        bool live = false;
        for (size_t j = 0; j < d->n_buffers && !live; j++) {
            const crp_buffer_desc *b = &d->buffers[j];
            live = b->kind == CR_MEM_CUDA && b->addr < im->remote_base + im->size &&
                   im->remote_base < b->addr + b->length;
        }
        if (!live)
            im->dead = true;
    }
    sweep_locked(cp);
    pthread_mutex_unlock(&cp->lock);
}

static void watch_event(crb_io *io, uint32_t events)
{
    cuda_peer *cp = (cuda_peer *)((char *)io - offsetof(cuda_peer, watch));
    if (!(events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        return;
    crb_log(CRB_LOG_INFO, "cuda: %s hung up its IPC service; dropping its imports", cp->peer->name);
    cuda_peer_drop(cp);
}

/* One request/reply over the peer's service, under cp->lock. */
static int call_locked(cuda_peer *cp, const char *address, const cuda_req *req, cuda_reply *rep,
                       int *fd_out)
{
    cr_engine *e = cp->engine;
    if (cp->sock < 0) {
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return crb_error(CR_ERR_SYSTEM, "socket(AF_UNIX): %s", strerror(errno));
        struct sockaddr_un sa;
        socklen_t sl = cre_abstract_addr(address, &sa);
        if (connect(fd, (struct sockaddr *)&sa, sl) < 0) {
            int rc = crb_error(CR_ERR_PEER_UNREACHABLE, "cuda service %s of %s: %s", address,
                               cp->peer->name, strerror(errno));
            close(fd);
            return rc;
        }
        int rc = cre_local_authenticate(e, fd,
                                        crb_now_ns() + (uint64_t)e->connect_timeout_ms * 1000000ull,
                                        "cuda", "cuda service", cp->peer->name);
        if (rc < 0) {
            close(fd);
            if (rc == CR_ERR_AUTH_FAILED)
                atomic_store(&cp->refused, true);
            return rc;
        }
        cp->sock = fd;
        cp->watch.fd = fd;
        cp->watch.on_event = watch_event;
        cp->watching = crb_loop_add(&cre_worker_next(e)->loop, &cp->watch, EPOLLRDHUP) == 0;
    }
    uint8_t raw[CUDA_REQ_SIZE];
    cuda_req_encode(req, raw);
    if (send(cp->sock, raw, sizeof(raw), MSG_NOSIGNAL) != (ssize_t)sizeof(raw)) {
        close_sock_locked(cp);
        return crb_error(CR_ERR_PEER_UNREACHABLE, "cuda service of %s: send failed",
                         cp->peer->name);
    }
    struct pollfd pfd = {cp->sock, POLLIN, 0};
    int pr;
    do
        pr = poll(&pfd, 1, (int)e->connect_timeout_ms);
    while (pr < 0 && errno == EINTR);
    if (pr <= 0) {
        close_sock_locked(cp);
        return crb_error(CR_ERR_TIMEOUT, "cuda service of %s did not answer", cp->peer->name);
    }
    uint8_t buf[CUDA_REPLY_SIZE + 16];
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b)};
    ssize_t n = recvmsg(cp->sock, &mh, MSG_CMSG_CLOEXEC);
    int fd = -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
            cm->cmsg_len >= CMSG_LEN(sizeof(int)))
            memcpy(&fd, CMSG_DATA(cm), sizeof(int));
    int rc = n <= 0
                 ? crb_error(CR_ERR_PEER_UNREACHABLE, "cuda service of %s hung up", cp->peer->name)
                 : cuda_reply_decode(buf, (size_t)n, rep);
    if (rc == 0 && rep->status < 0)
        rc = crb_error(rep->status, "cuda service of %s refused: %s", cp->peer->name,
                       cr_strerror(rep->status));
    if (rc < 0) {
        if (fd >= 0)
            close(fd);
        if (rc == CR_ERR_PEER_UNREACHABLE || rc == CR_ERR_MALFORMED_FRAME)
            close_sock_locked(cp);
        if (rc == CR_ERR_AUTH_FAILED)
            atomic_store(&cp->refused, true);
        return rc;
    }
    if (fd_out != NULL)
        *fd_out = fd;
    else if (fd >= 0)
        close(fd);
    return 0;
}

static int map_ctl_locked(cuda_peer *cp, const char *address)
{
    if (cp->ctl != NULL && !cp->ctl_stale)
        return 0;
    if (cp->ctl_stale && cp->ctl_users > 0)
        return crb_error(CR_ERR_CONNECTION, "%s restarted; retry", cp->peer->name);
    sweep_locked(cp);
    cuda_req req = {.op = CUDA_REQ_CONTROL_PAGE};
    cuda_reply rep;
    int fd = -1;
    int rc = call_locked(cp, address, &req, &rep, &fd);
    if (rc < 0)
        return rc;
    if (fd < 0 || rep.size < sizeof(cre_ctl_slot) * CRE_CTL_SLOTS) {
        if (fd >= 0)
            close(fd);
        return crb_error(CR_ERR_MALFORMED_FRAME, "%s sent no usable control page", cp->peer->name);
    }
    void *m = mmap(NULL, rep.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return crb_error(CR_ERR_SYSTEM, "mapping the control page of %s: %s", cp->peer->name,
                         strerror(errno));
    cp->ctl = m;
    cp->ctl_size = rep.size;
    return 0;
}

static cuda_import *find_locked(cuda_peer *cp, uint64_t addr)
{
    for (size_t i = 0; i < cp->n_imports; i++) {
        cuda_import *im = cp->imports[i];
        if (!im->dead && addr >= im->remote_base && addr - im->remote_base < im->size)
            return im;
    }
    return NULL;
}

/* Import the peer's allocation holding addr onto local device `device`. */
static int import_locked(cuda_peer *cp, const char *address, uint64_t addr, int device,
                         cuda_import **out)
{
    cuda_engine *ce = engine_of(cp);
    crv_driver *d = ce->drv;
    cuda_req req = {.op = CUDA_REQ_EXPORT, .addr = addr};
    cuda_reply rep;
    int fd = -1;
    int rc = call_locked(cp, address, &req, &rep, &fd);
    if (rc < 0)
        return rc;
    if (addr < rep.base || addr - rep.base >= rep.size) {
        if (fd >= 0)
            close(fd);
        return crb_error(CR_ERR_MALFORMED_FRAME, "%s exported an allocation not holding 0x%llx",
                         cp->peer->name, (unsigned long long)addr);
    }
    cuda_import im = {
        .remote_base = rep.base, .size = rep.size, .share = rep.share, .device = device};
    if (rep.share == CRV_SHARE_LEGACY) {
        CUipcMemHandle h;
        memcpy(&h, rep.handle, sizeof(h));
        rc = crv_check(d, d->ipc_open_mem_handle(&im.local, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                       "cuIpcOpenMemHandle");
    } else if (rep.share == CRV_SHARE_VMM_FD && d->vmm && fd >= 0) {
        rc =
            crv_check(d,
                      d->mem_import_from_shareable_handle(&im.handle, (void *)(intptr_t)fd,
                                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                      "cuMemImportFromShareableHandle");
        CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .location = {CU_MEM_LOCATION_TYPE_DEVICE, device}};
        size_t gran = 0;
        if (rc == 0)
            rc = crv_check(
                d,
                d->mem_get_allocation_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                "cuMemGetAllocationGranularity");
        if (rc == 0) {
            im.reserved = gran ? (rep.size + gran - 1) / gran * gran : rep.size;
            rc = crv_check(d, d->mem_address_reserve(&im.local, im.reserved, 0, 0, 0),
                           "cuMemAddressReserve");
            if (rc == 0) {
                rc = crv_check(d, d->mem_map(im.local, im.reserved, 0, im.handle, 0), "cuMemMap");
                CUmemAccessDesc acc = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, device},
                                       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
                if (rc == 0)
                    rc = crv_check(d, d->mem_set_access(im.local, im.reserved, &acc, 1),
                                   "cuMemSetAccess");
                if (rc < 0) {
                    d->mem_unmap(im.local, im.reserved);
                    d->mem_address_free(im.local, im.reserved);
                }
            }
            if (rc < 0)
                d->mem_release(im.handle);
        }
    } else {
        rc = crb_error(CR_ERR_TRANSPORT_UNSUPPORTED,
                       "%s's allocation at 0x%llx cannot be imported here (share %d)",
                       cp->peer->name, (unsigned long long)addr, (int)rep.share);
    }
    if (fd >= 0)
        close(fd);
    if (rc < 0)
        return rc;
    cuda_import *keep = malloc(sizeof(*keep));
    if (keep != NULL && cp->n_imports == cp->cap_imports) {
        size_t ncap = cp->cap_imports ? cp->cap_imports * 2 : 8;
        cuda_import **n = realloc(cp->imports, ncap * sizeof(*n));
        if (n == NULL) {
            free(keep);
            keep = NULL;
        } else {
            cp->imports = n;
            cp->cap_imports = ncap;
        }
    }
    if (keep == NULL) {
        import_close(cp, &im);
        atomic_fetch_add(&ce->imports, 1); /* import_close counted it down */
        return crb_error(CR_ERR_NO_MEMORY, "cuda import table");
    }
    *keep = im;
    cp->imports[cp->n_imports++] = keep;
    *out = keep;
    atomic_fetch_add(&ce->imports, 1);
    return 0;
}

static const cuda_desc *desc_of(cre_tp *tp, const cre_route *r, const cuda_blob **blob)
{
    const cuda_desc *cd = cre_route_state(r, tp);
    if (cd == NULL || r->remote_index >= cd->n || !cd->has[r->remote_index])
        return NULL;
    *blob = &cd->bufs[r->remote_index];
    return cd;
}

bool cuda_can_ipc(cre_tp *tp, const cre_route *r)
{
    cuda_engine *ce = tp->priv;
    const cuda_blob *bl = NULL;
    const cuda_desc *cd = desc_of(tp, r, &bl);
    cuda_peer *cp = cre_peer_tp(r->peer, tp);
    if (cd == NULL || cd->address[0] == '\0' || atomic_load(&cp->refused) || bl->ctl_gen == 0)
        return false;
    if (bl->share == CRV_SHARE_NONE || (bl->share == CRV_SHARE_VMM_FD && !ce->drv->vmm))
        return false;
    return crv_device_by_uuid(ce->drv, bl->uuid) >= 0; /* the GPU is visible here */
}

/* One piece: [addr, addr+n) of the peer inside one allocation. */
static int ipc_piece(cre_tp *tp, cuda_peer *cp, const cuda_desc *cd, const cuda_blob *bl,
                     int device, cre_task *t, uint64_t off, uint64_t *moved, bool *async)
{
    cuda_engine *ce = tp->priv;
    uint64_t addr = t->remote_addr + off;
    pthread_mutex_lock(&cp->lock);
    int rc = map_ctl_locked(cp, cd->address);
    cuda_import *im = NULL;
    /* Another engine of this process: its device pointers are ours (CUDA
     * refuses to open a process's own IPC handles); only the fence is
     * needed. */
    cuda_import direct = {
        .remote_base = t->remote_addr, .size = t->length, .local = t->remote_addr};
    if (rc == 0 && cd->same_process)
        im = &direct;
    else if (rc == 0) {
        im = find_locked(cp, addr);
        if (im == NULL)
            rc = import_locked(cp, cd->address, addr, device, &im);
    }
    if (rc < 0) {
        pthread_mutex_unlock(&cp->lock);
        return rc;
    }
    uint64_t n = t->length - off;
    if (n > im->size - (addr - im->remote_base))
        n = im->size - (addr - im->remote_base);
    CUdeviceptr remote = im->local + (addr - im->remote_base);
    cre_ctl_slot *slot = &cp->ctl[bl->ctl_slot];
    im->users++;
    cp->ctl_users++;
    pthread_mutex_unlock(&cp->lock);

    cuda_import *held = cd->same_process ? NULL : im; /* `direct` lives on this stack */
    if (!cre_ctl_enter(slot, bl->ctl_gen)) {
        cre_peer_mark_stale(cp->peer); /* a new buffer may sit there now: fetch it again */
        rc = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                       "%s unregistered device buffer 0x%llx before the copy started",
                       cp->peer->name, (unsigned long long)addr);
        cuda_peer_release(cp, held, true);
        return rc;
    }
    uint64_t local = (uint64_t)(uintptr_t)t->local + off;
    bool local_dev = t->local_buf->kind == CR_MEM_CUDA;
    const cuda_buffer *lb = t->local_buf->tp_state[tp->index];
    bool local_pinned = lb != NULL && lb->pinned;
    atomic_ullong *kind_counter = local_dev                  ? &ce->bytes_d2d
                                  : t->opcode == CR_OP_WRITE ? &ce->bytes_h2d
                                                             : &ce->bytes_d2h;
    if (local_dev || local_pinned) {
        /* asynchronous: the fence and the import are let go of when the
         * copy's event has fired (cuda_complete_tick) */
        cuda_pending *p = calloc(1, sizeof(*p));
        rc = p == NULL ? crb_error(CR_ERR_NO_MEMORY, "a pending copy") : 0;
        if (rc == 0) {
            *p = (cuda_pending){.t = t,
                                .kind_counter = kind_counter,
                                .ipc = true,
                                .cp = cp,
                                .im = held,
                                .slot = slot,
                                .gen = bl->ctl_gen,
                                .addr = addr};
            atomic_fetch_add(&t->slices_left, 1);
            rc = t->opcode == CR_OP_WRITE ? cuda_issue(ce, device, remote, local, n, p)
                                          : cuda_issue(ce, device, local, remote, n, p);
            if (rc < 0) {
                atomic_fetch_sub(&t->slices_left, 1);
                free(p);
            }
        }
        if (rc < 0) {
            cre_ctl_leave(slot, bl->ctl_gen);
            cuda_peer_release(cp, held, false);
            return rc;
        }
        *moved = n;
        *async = true;
        return 0;
    }
    rc = cuda_bounce(ce, device, t->opcode == CR_OP_WRITE, remote, (uint8_t *)(uintptr_t)local, n);
    if (!cre_ctl_leave(slot, bl->ctl_gen) && rc == 0)
        rc = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                       "%s unregistered device buffer 0x%llx during the copy", cp->peer->name,
                       (unsigned long long)addr);
    if (rc == 0) {
        atomic_fetch_add(&ce->bytes_ipc, n);
        atomic_fetch_add(kind_counter, n);
    }
    cuda_peer_release(cp, held, rc == CR_ERR_ADDRESS_NOT_REGISTERED);
    if (rc == 0)
        *moved = n;
    return rc;
}

int cuda_submit_ipc(cre_tp *tp, const cre_route *r, cre_task *t)
{
    cuda_engine *ce = tp->priv;
    const cuda_blob *bl = NULL;
    const cuda_desc *cd = desc_of(tp, r, &bl);
    cuda_peer *cp = cre_peer_tp(r->peer, tp);
    int device = cd != NULL ? crv_device_by_uuid(ce->drv, bl->uuid) : -1;
    if (device < 0)
        return CR_ERR_TRANSPORT_UNSUPPORTED;
    crv_saved saved;
    int rc = crv_push(ce->drv, device, &saved);
    /* One slice held by this call; each asynchronous piece adds its own. */
    atomic_store(&t->slices_left, 1);
    uint64_t off = 0, sync_bytes = 0;
    while (rc == 0 && off < t->length) {
        uint64_t moved = 0;
        bool async = false;
        rc = ipc_piece(tp, cp, cd, bl, device, t, off, &moved, &async);
        off += moved;
        if (!async)
            sync_bytes += moved;
    }
    crv_pop(ce->drv, &saved);
    /* Refused before a byte moved (credentials, an allocation that cannot
     * be shared, the peer's service gone): let tcp staging take it. */
    if (off == 0 && (rc == CR_ERR_AUTH_FAILED || rc == CR_ERR_TRANSPORT_UNSUPPORTED ||
                     rc == CR_ERR_PEER_UNREACHABLE))
        return CR_ERR_TRANSPORT_UNSUPPORTED;
    cre_task_slice_done(t, rc, sync_bytes);
    return 0;
}
