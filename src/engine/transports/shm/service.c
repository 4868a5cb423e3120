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
 * so they learn to use another path. The service greets each connection
 * with a fresh nonce; when the engine has a shared secret, a peer must
 * first prove it (AUTH: HMAC-SHA256(secret, "shm" | our nonce | its
 * nonce), auth.c) or it gets CR_ERR_AUTH_FAILED and the connection closes:
 * the same secret guards the memory here as on the tcp port. A region is
 * handed out only while a registered, remote-accessible buffer lies in it.
 *
 * The listener (cre_local_service_listen, shared with the cuda IPC
 * service) and its connections sit in worker 0's loop (the service is asked a handful of times per
 * peer, not per transfer).
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

#include "base/acceptor.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "engine/shared_alloc.h"
#include "engine/transports/shm/shm.h"

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

/* A peer connected to our fd service (worker 0 owns them all). */
typedef struct shm_service_conn {
    crb_io io;
    cre_tp *tp;
    bool allowed;                  /* may this peer's uid receive fds? */
    bool authed;                   /* proved the shared secret (or the engine has none) */
    uint8_t nonce[CRP_NONCE_SIZE]; /* ours, sent in the greeting */
    struct shm_service_conn *prev, *next;
} shm_service_conn;

static void service_close(shm_service_conn *c)
{
    shm_engine *se = c->tp->priv;
    crb_loop_del(&c->io);
    close(c->io.fd);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        se->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    free(c);
    crb_acceptor_closed(&se->acceptor);
}

/* Is a registered, remote-accessible buffer inside shared region `id`? */
static int region_scan(void *ctx, cre_buffer *const *items, size_t n, uint64_t version)
{
    const uint64_t *id = ctx;
    for (size_t i = 0; i < n; i++)
        if (items[i]->shared_id == *id && items[i]->remote_accessible)
            return 1;
    return 0;
}

static void reply(shm_service_conn *c, int32_t status, uint64_t size, int fd)
{
    crp_shm_reply r = {.status = status, .size = size};
    cre_local_send_reply(c->io.fd, &r, fd, "shm service");
}

/* Serve one datagram; false when the connection must close. */
static bool serve_request(shm_service_conn *c, const uint8_t *data, size_t len)
{
    cr_engine *e = c->tp->engine;
    shm_engine *se = c->tp->priv;
    if (!c->authed) {
        /* The first datagram must prove the secret; no second try. */
        if (cre_local_auth_serve(e, c->io.fd, "shm", c->nonce, data, len, "shm service") < 0)
            return false;
        c->authed = true;
        return true;
    }
    crp_shm_request req;
    if (crp_shm_request_decode(data, len, &req) < 0 || req.op == CRP_SHM_AUTH) {
        reply(c, CR_ERR_MALFORMED_FRAME, 0, -1);
        return true;
    }
    if (!c->allowed) {
        reply(c, CR_ERR_AUTH_FAILED, 0, -1);
        return true;
    }
    int fd = -1;
    uint64_t size = 0;
    int rc;
    if (req.op == CRP_SHM_CONTROL_PAGE) {
        fd = fcntl(se->ctl.fd, F_DUPFD_CLOEXEC, 0);
        size = se->ctl.size;
        rc = fd >= 0 ? 0 : CR_ERR_SYSTEM;
    } else if (cre_registry_visit(&e->registry, region_scan, &req.id) != 1) {
        rc = CR_ERR_ADDRESS_NOT_REGISTERED;
    } else {
        rc = cre_shared_dup_fd(req.id, &fd, &size);
    }
    reply(c, rc, size, rc == 0 ? fd : -1);
    if (fd >= 0)
        close(fd);
    return true;
}

static void service_on_event(crb_io *io, uint32_t events)
{
    shm_service_conn *c = (shm_service_conn *)((char *)io - offsetof(shm_service_conn, io));
    for (;;) {
        uint8_t buf[256];
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
        service_close(c); /* closed or failed */
        return;
    }
}

static void service_accept(crb_acceptor *a, int fd)
{
    cre_tp *tp = a->owner;
    shm_engine *se = tp->priv;
    cr_engine *e = tp->engine;
    bool allowed = cre_local_peer_allowed(e, fd);
    shm_service_conn *c = calloc(1, sizeof(*c));
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
    c->next = se->conns;
    if (se->conns != NULL)
        se->conns->prev = c;
    se->conns = c;
    cre_local_greet(e, fd, c->nonce, "shm service");
}

void cre_shm_service_tick(cre_tp *tp, cre_worker *w, uint64_t now_ns)
{
    shm_engine *se = tp->priv;
    if (w->index == 0 && se->acceptor_started)
        crb_acceptor_tick(&se->acceptor, now_ns);
}

bool cre_local_peer_allowed(cr_engine *e, int fd)
{
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0)
        return false;
    if (e->shm_allow_any_user || cred.uid == getuid())
        return true;
    crb_log(CRB_LOG_INFO, "same-host service: peer pid %d uid %d may not receive fds",
            (int)cred.pid, (int)cred.uid);
    return false;
}

int cre_local_service_listen(cr_engine *e, const char *address, const char *what, crb_acceptor *a,
                             crb_accept_fn on_accept, void *owner)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return crb_error(CR_ERR_SYSTEM, "%s: socket(AF_UNIX): %s", what, strerror(errno));
    struct sockaddr_un sa;
    socklen_t sl = cre_abstract_addr(address, &sa);
    if (bind(fd, (struct sockaddr *)&sa, sl) < 0 || listen(fd, 128) < 0) {
        int rc = crb_error(CR_ERR_BIND, "%s %s: %s", what, address, strerror(errno));
        close(fd);
        return rc;
    }
    char label[160];
    snprintf(label, sizeof(label), "%s %s", what, address);
    int rc = crb_acceptor_start(a, &e->workers[0].loop, fd, CRE_LOCAL_SERVICE_MAX_CONNS, on_accept,
                                owner, label);
    if (rc < 0)
        close(fd);
    return rc;
}

int cre_shm_service_start(cre_tp *tp)
{
    cr_engine *e = tp->engine;
    shm_engine *se = tp->priv;
    snprintf(se->address, sizeof(se->address), "@crescent-%d-%016llx", (int)getpid(),
             (unsigned long long)e->instance);
    int rc =
        cre_local_service_listen(e, se->address, "shm service", &se->acceptor, service_accept, tp);
    if (rc < 0) {
        se->address[0] = '\0';
        return rc;
    }
    se->acceptor_started = true;
    return 0;
}

/* Workers have stopped: close the listener and every connection. */
void cre_shm_service_stop(cre_tp *tp)
{
    shm_engine *se = tp->priv;
    while (se->conns != NULL)
        service_close(se->conns);
    if (se->acceptor_started)
        crb_acceptor_stop(&se->acceptor);
    se->acceptor_started = false;
}
