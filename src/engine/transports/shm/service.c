/*
 * service.c - the same-host fd service: a Unix SEQPACKET socket in the
 * abstract namespace ("@crescent-<pid>-<instance>", advertised in the
 * descriptor as the "shm" endpoint) through which peers on this host ask
 * for the memfd of our control page or of a shared region.
 *
 * Each request is one datagram (crp_shm_request), each reply one datagram
 * (crp_shm_reply) carrying the fd as SCM_RIGHTS. A peer's credentials are
 * read once at accept (SO_PEERCRED): only processes of our own uid get fds
 * unless shm_allow_any_user is set; others get CR_ERR_AUTH_FAILED replies,
 * so they learn to use another path. A region is handed out only while a
 * registered, remote-accessible buffer lies in it.
 *
 * Connections are owned by worker threads like tcp server connections.
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
#include "engine/internal.h"
#include "engine/shared_alloc.h"

/* sockaddr for "@name" (abstract namespace). */
socklen_t cre_abstract_addr(const char *name, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n > sizeof(sa->sun_path) - 1)
        n = sizeof(sa->sun_path) - 1;
    memcpy(sa->sun_path, name, n);
    sa->sun_path[0] = '\0'; /* '@' marks the abstract namespace */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
}

int cre_shm_service_start(cr_engine *e)
{
    snprintf(e->shm_address, sizeof(e->shm_address), "@crescent-%d-%016llx", (int)getpid(),
             (unsigned long long)e->instance);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return crb_error(CR_ERR_SYSTEM, "socket(AF_UNIX): %s", strerror(errno));
    struct sockaddr_un sa;
    socklen_t sl = cre_abstract_addr(e->shm_address, &sa);
    int rc;
    if (bind(fd, (struct sockaddr *)&sa, sl) < 0 || listen(fd, 128) < 0) {
        rc = crb_error(CR_ERR_BIND, "shm service %s: %s", e->shm_address, strerror(errno));
        close(fd);
        e->shm_address[0] = '\0';
        return rc;
    }
    e->shm_listen_fd = fd;
    e->shm_listen_conn.kind = CRE_CONN_SHM_LISTENER;
    e->shm_listen_conn.fd = fd;
    e->shm_listen_conn.engine = e;
    rc = cre_worker_add_conn(&e->workers[0], &e->shm_listen_conn, EPOLLIN);
    if (rc < 0) {
        close(fd);
        e->shm_listen_fd = -1;
        e->shm_address[0] = '\0';
    }
    return rc;
}

void cre_shm_service_stop(cr_engine *e)
{
    if (e->shm_listen_fd >= 0)
        close(e->shm_listen_fd);
    e->shm_listen_fd = -1;
}

static void service_close(cre_conn *c)
{
    cre_worker *w = c->worker;
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < w->n_conns; i++) {
        if (w->conns[i] == c) {
            w->conns[i] = w->conns[--w->n_conns];
            break;
        }
    }
    pthread_mutex_unlock(&w->lock);
    free(c);
}

void cre_shm_service_accept(cr_engine *e)
{
    for (;;) {
        int fd = accept4(e->shm_listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct ucred cred;
        socklen_t cl = sizeof(cred);
        bool allowed = false;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
            allowed = e->shm_allow_any_user || cred.uid == getuid();
        if (!allowed)
            crb_log(CRB_LOG_INFO, "shm service: peer pid %d uid %d may not receive fds",
                    (int)cred.pid, (int)cred.uid);
        cre_conn *c = calloc(1, sizeof(*c));
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->kind = CRE_CONN_SHM_SERVER;
        c->fd = fd;
        c->engine = e;
        c->shm_allowed = allowed;
        if (cre_worker_adopt_conn(e, c, EPOLLIN) < 0) {
            close(fd);
            free(c);
            continue;
        }
    }
}

/* Is a registered, remote-accessible buffer inside shared region `id`? */
static bool region_is_served(cr_engine *e, uint64_t id)
{
    bool found = false;
    pthread_rwlock_rdlock(&e->registry.lock);
    for (size_t i = 0; i < e->registry.count && !found; i++) {
        const cre_buffer *b = e->registry.items[i];
        found = b->shared_id == id && b->remote_accessible;
    }
    pthread_rwlock_unlock(&e->registry.lock);
    return found;
}

static void reply(cre_conn *c, int32_t status, uint64_t size, int fd)
{
    crp_buf body = {0};
    crp_shm_reply r = {.status = status, .size = size};
    if (crp_shm_reply_encode(&r, &body) < 0)
        return;
    struct iovec iov = {body.data, body.len};
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
    if (sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        crb_log(CRB_LOG_WARN, "shm service: reply failed: %s", strerror(errno));
    crp_buf_free(&body);
}

static void serve_request(cre_conn *c, const uint8_t *data, size_t len)
{
    cr_engine *e = c->engine;
    crp_shm_request req;
    if (crp_shm_request_decode(data, len, &req) < 0) {
        reply(c, CR_ERR_MALFORMED_FRAME, 0, -1);
        return;
    }
    if (!c->shm_allowed) {
        reply(c, CR_ERR_AUTH_FAILED, 0, -1);
        return;
    }
    int fd = -1;
    uint64_t size = 0;
    int rc;
    if (req.op == CRP_SHM_CONTROL_PAGE) {
        fd = fcntl(e->ctl.fd, F_DUPFD_CLOEXEC, 0);
        size = e->ctl.size;
        rc = fd >= 0 ? 0 : CR_ERR_SYSTEM;
    } else if (!region_is_served(e, req.id)) {
        rc = CR_ERR_ADDRESS_NOT_REGISTERED;
    } else {
        rc = cre_shared_dup_fd(req.id, &fd, &size);
    }
    reply(c, rc, size, rc == 0 ? fd : -1);
    if (fd >= 0)
        close(fd);
}

void cre_shm_service_on_event(cre_conn *c, uint32_t events)
{
    for (;;) {
        uint8_t buf[256];
        ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            serve_request(c, buf, (size_t)n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        service_close(c); /* closed or failed */
        return;
    }
}
