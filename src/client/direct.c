/*
 * direct.c - the daemon's segment for thin clients' direct reads.
 *
 * A thin get costs three sleeps when the daemon runs it (the daemon waiting
 * for the request, the daemon waiting for the master, the client waiting
 * for the reply) where an embedded get sleeps once. So a thin client asks
 * the master for the replica list itself and, when the replica lies in
 * this daemon's segment, copies the value out of its own read-only mapping
 * of that segment (src/store/thin_direct.c). This file hands it what it
 * needs, once per session: SEGMENT is answered with the segment's name,
 * base address here and size, the master address, and a
 * read-only descriptor of the segment's memfd (SCM_RIGHTS on the reply's
 * first byte).
 *
 * Only clients of this daemon's uid get it (the engine's shm service, when
 * it runs, hands such peers a writable descriptor of the segment already); with
 * --allow_any_user another uid's client would otherwise see every tenant's
 * bytes in the segment, so it is refused and reads through the daemon as
 * before. The descriptor is opened read-only (O_RDONLY on /proc/self/fd/N:
 * a new open file description), which guards against accidental writes
 * only: a process of the memfd's uid can reopen it O_RDWR through its own
 * /proc/self/fd/N. The barrier is the uid check.
 *
 * Direct puts (src/store/thin_direct_put.c): the same clients also get a
 * writable descriptor (O_RDWR on /proc/self/fd/N) as the reply's second
 * descriptor, announced by a third value (1). They gain no right they lack:
 * a same-uid process can reopen the read-only one O_RDWR itself, and the
 * engine's shm service hands same-uid peers writable descriptors of every
 * remote-accessible region. What makes their writes safe is the master's
 * owned writes (docs/WIRE.md): a thin client that dies mid-put leaves no
 * write in flight and no visible key. Another uid gets neither descriptor.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "client/daemon.h"
#include "engine/shared_alloc.h"
#include "proto/frame.h"
#include "store/internal.h"

void crs_direct_open(crs_daemon *d)
{
    d->seg_fd = d->seg_rw_fd = -1;
    cr_store *s = d->store;
    if (s == NULL || s->segment == NULL || s->segment_size == 0)
        return;
    uint64_t id = 0, off = 0, size = 0;
    if (!cre_shared_pin((uint64_t)(uintptr_t)s->segment, s->segment_size, &id, &off))
        return;
    int fd = -1;
    int rc = cre_shared_dup_fd(id, &fd, &size);
    cre_shared_unpin(id);
    if (rc < 0 || off != 0)
        goto out_close;
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    d->seg_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (d->seg_fd < 0) {
        crb_log(CRB_LOG_INFO,
                "crescent-client: no read-only descriptor of the segment (%s): "
                "thin clients read through the daemon",
                strerror(errno));
        goto out_close;
    }
    d->seg_rw_fd = open(path, O_RDWR | O_CLOEXEC);
    if (d->seg_rw_fd < 0)
        crb_log(CRB_LOG_INFO,
                "crescent-client: no writable descriptor of the segment (%s): thin clients put "
                "through the daemon",
                strerror(errno));
    d->seg_base = (uint64_t)(uintptr_t)s->segment;
    d->seg_size = s->segment_size;
out_close:
    if (fd >= 0)
        close(fd);
}

void crs_direct_close(crs_daemon *d)
{
    if (d->seg_fd >= 0)
        close(d->seg_fd);
    if (d->seg_rw_fd >= 0)
        close(d->seg_rw_fd);
    d->seg_fd = d->seg_rw_fd = -1;
}

/* Send the encoded frame, the n (1 or 2) descriptors on its first byte; what
 * the socket does not take now stays in c->out. */
static bool send_with_fds(crs_conn *c, const crp_buf *frame, const int *fds, size_t n_fds)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(2 * sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct iovec iov = {frame->data, frame->len};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = ctl.b,
                         .msg_controllen = CMSG_SPACE(n_fds * sizeof(int))};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(n_fds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, n_fds * sizeof(int));
    ssize_t n;
    do
        n = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return false; /* nothing left: the caller answers without it */
    if ((size_t)n < frame->len) {
        /* The rest goes out with the connection's ordinary output. */
        if (crp_buf_append(&c->out, frame->data + n, frame->len - (size_t)n) < 0)
            c->closing = true;
    }
    return true;
}

bool crs_direct_answer(crs_conn *c, uint64_t id)
{
    crs_daemon *d = c->d;
    crp_thin_resp resp = {.op = CRP_THIN_SEGMENT};
    if (d->seg_fd < 0 || c->sess == NULL || c->uid != d->uid || c->out.len != 0) {
        resp.status = crb_error(CR_UNAVAILABLE_IN_CURRENT_MODE,
                                d->seg_fd < 0     ? "this crescent-client has no shareable segment"
                                : c->out.len != 0 ? "replies are still queued"
                                                  : "the segment is shared with this daemon's "
                                                    "uid only");
        resp.message = (char *)cr_last_error_message();
        atomic_fetch_add(&d->ctr.failures[CRP_THIN_SEGMENT % 64], 1);
        crs_conn_reply(c, id, &resp);
        return true;
    }
    /* vals[2] = 1: the second descriptor is writable (direct puts). */
    uint64_t vals[3] = {d->seg_base, d->seg_size, d->seg_rw_fd >= 0 ? 1 : 0};
    int fds[2] = {d->seg_fd, d->seg_rw_fd};
    char *names[2] = {d->segment, d->cfg.master};
    resp.fields = CRP_THIN_R_VALS | CRP_THIN_R_NAMES;
    resp.n_vals = 3;
    resp.vals = vals;
    resp.n_names = 2;
    resp.names = names;
    crp_buf frame = {0};
    uint8_t hb[CRP_HEADER_SIZE] = {0};
    int rc = crp_buf_append(&frame, hb, sizeof(hb));
    if (rc == 0)
        rc = crp_thin_resp_encode(&resp, &frame);
    if (rc == 0) {
        crp_header h = {.version = CRP_VERSION,
                        .type = CRP_THIN_RESP,
                        .body_len = (uint32_t)(frame.len - CRP_HEADER_SIZE),
                        .request_id = id};
        crp_header_encode(&h, frame.data);
        if (send_with_fds(c, &frame, fds, d->seg_rw_fd >= 0 ? 2 : 1)) {
            crp_buf_free(&frame);
            return !c->closing;
        }
        rc = crb_error(CR_UNAVAILABLE_IN_CURRENT_MODE, "sending the segment: %s", strerror(errno));
    }
    crp_buf_free(&frame);
    crp_thin_resp err = {.op = CRP_THIN_SEGMENT, .status = rc};
    err.message = (char *)cr_last_error_message();
    atomic_fetch_add(&d->ctr.failures[CRP_THIN_SEGMENT % 64], 1);
    crs_conn_reply(c, id, &err);
    return true;
}
