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
 * a shared secret, the same proof of it (local_auth.c, label "cuda"). The
 * listener (cre_local_service_listen, shared with the shm fd service) and
 * its connections live in worker 0's loop, which binds the device's context itself before each
 * driver call.
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

static void service_close(cuda_service_conn *c)
{
    cuda_engine *ce = c->tp->priv;
    crb_loop_del(&c->io);
    close(c->io.fd);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        ce->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    free(c);
    crb_acceptor_closed(&ce->acceptor);
}

static void reply(cuda_service_conn *c, const cuda_reply *r, int fd)
{
    uint8_t raw[CUDA_REPLY_SIZE];
    cuda_reply_encode(r, raw);
    struct iovec iov = {raw, sizeof(raw)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        mh.msg_control = u.buf;
        mh.msg_controllen = sizeof(u.buf);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    if (sendmsg(c->io.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        crb_log(CRB_LOG_WARN, "cuda service: reply failed: %s", strerror(errno));
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

/* Serve one datagram; false when the connection must close. */
static bool serve_request(cuda_service_conn *c, const uint8_t *data, size_t len)
{
    cuda_engine *ce = c->tp->priv;
    if (!c->authed) {
        /* The first datagram must prove the secret; no second try. */
        if (cre_local_auth_serve(ce->tp->engine, c->io.fd, "cuda", c->nonce, data, len,
                                 "cuda service") < 0)
            return false;
        c->authed = true;
        return true;
    }
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

static void service_on_event(crb_io *io, uint32_t events)
{
    cuda_service_conn *c = (cuda_service_conn *)((char *)io - offsetof(cuda_service_conn, io));
    for (;;) {
        uint8_t buf[256]; /* an AUTH datagram (msgpack) is the largest */
        ssize_t n = recv(io->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            if (!serve_request(c, buf, (size_t)n)) {
                service_close(c);
                return;
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        service_close(c);
        return;
    }
}

static void service_accept(crb_acceptor *a, int fd)
{
    cre_tp *tp = a->owner;
    cuda_engine *ce = tp->priv;
    cr_engine *e = tp->engine;
    bool allowed = cre_local_peer_allowed(e, fd);
    cuda_service_conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        crb_acceptor_closed(a);
        return;
    }
    c->io.fd = fd;
    c->io.on_event = service_on_event;
    c->tp = tp;
    c->allowed = allowed;
    c->authed = e->secret == NULL;
    if (crb_loop_add(&e->workers[0].loop, &c->io, EPOLLIN) < 0) {
        close(fd);
        free(c);
        crb_acceptor_closed(a);
        return;
    }
    c->next = ce->conns;
    if (ce->conns != NULL)
        ce->conns->prev = c;
    ce->conns = c;
    cre_local_greet(e, fd, c->nonce, "cuda service");
}

void cuda_service_tick(cre_tp *tp, cre_worker *w, uint64_t now_ns)
{
    cuda_engine *ce = tp->priv;
    if (w->index == 0 && ce->acceptor_started)
        crb_acceptor_tick(&ce->acceptor, now_ns);
}

int cuda_service_start(cre_tp *tp)
{
    cr_engine *e = tp->engine;
    cuda_engine *ce = tp->priv;
    snprintf(ce->address, sizeof(ce->address), "@crescent-cuda-%d-%016llx", (int)getpid(),
             (unsigned long long)e->instance);
    int rc =
        cre_local_service_listen(e, ce->address, "cuda service", &ce->acceptor, service_accept, tp);
    if (rc < 0) {
        ce->address[0] = '\0';
        return rc;
    }
    ce->acceptor_started = true;
    return 0;
}

void cuda_service_stop(cre_tp *tp)
{
    cuda_engine *ce = tp->priv;
    while (ce->conns != NULL)
        service_close(ce->conns);
    if (ce->acceptor_started)
        crb_acceptor_stop(&ce->acceptor);
    ce->acceptor_started = false;
}
