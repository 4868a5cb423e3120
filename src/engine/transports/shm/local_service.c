/*
 * local_service.c - the listener, connections, credential check and
 * shared-secret proof of the same-host services (local_service.h), and
 * the peer side of that proof.
 *
 * The service's first datagram on a connection is a greeting (crp_shm_reply
 * with a fresh nonce and whether it wants the secret). When it does, the
 * peer's first datagram must be an AUTH request whose mac is
 * HMAC-SHA256(secret, label | service nonce | peer nonce) (auth.c); the
 * label names the service ("shm", "cuda") so a proof for one is not one for
 * the other. A wrong or missing proof is answered CR_ERR_AUTH_FAILED and
 * the connection closes. These messages are proto's crp_shm_* (strict,
 * fuzzed by fuzz_shm) whatever the service speaks afterwards. A peer's
 * credentials are read once at accept (SO_PEERCRED): only our uid may
 * receive our memory unless shm_allow_any_user is set.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "engine/transports/shm/local_service.h"

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

void cre_local_send_datagram(int sock, const void *data, size_t len, int fd, const char *what)
{
    struct iovec iov = {(void *)data, len};
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
    if (sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        crb_log(CRB_LOG_WARN, "%s: reply failed: %s", what, strerror(errno));
}

void cre_local_send_reply(int sock, const crp_shm_reply *r, int fd, const char *what)
{
    crp_buf body = {0};
    if (crp_shm_reply_encode(r, &body) < 0)
        return;
    cre_local_send_datagram(sock, body.data, body.len, fd, what);
    crp_buf_free(&body);
}

/* --- the service side ------------------------------------------------------ */

static void greet(cr_engine *e, int sock, uint8_t nonce[CRP_NONCE_SIZE], const char *what)
{
    crb_random_bytes(nonce, CRP_NONCE_SIZE);
    crp_shm_reply hi = {.has_nonce = true, .auth = e->secret != NULL};
    memcpy(hi.nonce, nonce, CRP_NONCE_SIZE);
    cre_local_send_reply(sock, &hi, -1, what);
}

static int auth_serve(cr_engine *e, int sock, const char *label,
                      const uint8_t nonce[CRP_NONCE_SIZE], const uint8_t *data, size_t len,
                      const char *what)
{
    crp_shm_request req;
    if (crp_shm_request_decode(data, len, &req) < 0 || req.op != CRP_SHM_AUTH ||
        !cre_auth_check(e, label, nonce, req.client_nonce, req.mac)) {
        crb_log(CRB_LOG_WARN, "%s: a peer did not prove the shared secret; closing", what);
        crp_shm_reply no = {.status = CR_ERR_AUTH_FAILED};
        cre_local_send_reply(sock, &no, -1, what);
        return CR_ERR_AUTH_FAILED;
    }
    crp_shm_reply ok = {.status = 0};
    cre_local_send_reply(sock, &ok, -1, what);
    return 0;
}

/* May the process at the other end of fd receive our memory's descriptors? */
static bool peer_allowed(cr_engine *e, int fd)
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

static void conn_close(cre_local_conn *c)
{
    cre_local_service *svc = c->svc;
    crb_loop_del(&c->io);
    close(c->io.fd);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        svc->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    free(c);
    crb_acceptor_closed(&svc->acceptor);
}

/* One datagram: the proof first (when wanted), then the service's own. */
static bool conn_datagram(cre_local_conn *c, const uint8_t *data, size_t len)
{
    cre_local_service *svc = c->svc;
    if (!c->authed) {
        /* The first datagram must prove the secret; no second try. */
        if (auth_serve(svc->engine, c->io.fd, svc->label, c->nonce, data, len, svc->what) < 0)
            return false;
        c->authed = true;
        return true;
    }
    return svc->serve(c, data, len);
}

static void conn_on_event(crb_io *io, uint32_t events)
{
    cre_local_conn *c = (cre_local_conn *)((char *)io - offsetof(cre_local_conn, io));
    for (;;) {
        uint8_t buf[512];
        ssize_t n = recv(io->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
        if (n > (ssize_t)sizeof(buf)) { /* no request of either service is this long */
            crb_log(CRB_LOG_WARN, "%s: a %zd-byte datagram; closing", c->svc->what, n);
            conn_close(c);
            return;
        }
        if (n > 0) {
            if (!conn_datagram(c, buf, (size_t)n)) {
                conn_close(c);
                return;
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        conn_close(c); /* closed or failed */
        return;
    }
}

static void conn_accept(crb_acceptor *a, int fd)
{
    cre_local_service *svc = a->owner;
    cr_engine *e = svc->engine;
    cre_local_conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        crb_acceptor_closed(a);
        return;
    }
    c->io.fd = fd;
    c->io.on_event = conn_on_event;
    c->svc = svc;
    c->allowed = peer_allowed(e, fd);
    c->authed = e->secret == NULL;
    if (crb_loop_add(&e->workers[0].loop, &c->io, EPOLLIN) < 0) {
        close(fd);
        free(c);
        crb_acceptor_closed(a);
        return;
    }
    c->next = svc->conns;
    if (svc->conns != NULL)
        svc->conns->prev = c;
    svc->conns = c;
    greet(e, fd, c->nonce, svc->what);
}

int cre_local_service_start(cre_local_service *svc, cr_engine *e, void *owner, const char *address,
                            const char *what, const char *label, cre_local_serve_fn serve)
{
    memset(svc, 0, sizeof(*svc));
    svc->engine = e;
    svc->owner = owner;
    svc->what = what;
    svc->label = label;
    svc->serve = serve;
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
    char label_buf[160];
    snprintf(label_buf, sizeof(label_buf), "%s %s", what, address);
    int rc = crb_acceptor_start(&svc->acceptor, &e->workers[0].loop, fd,
                                CRE_LOCAL_SERVICE_MAX_CONNS, conn_accept, svc, label_buf);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    snprintf(svc->address, sizeof(svc->address), "%s", address);
    svc->started = true;
    return 0;
}

void cre_local_service_tick(cre_local_service *svc, cre_worker *w, uint64_t now_ns)
{
    if (w->index == 0 && svc->started)
        crb_acceptor_tick(&svc->acceptor, now_ns);
}

void cre_local_service_stop(cre_local_service *svc)
{
    while (svc->conns != NULL)
        conn_close(svc->conns);
    if (svc->started)
        crb_acceptor_stop(&svc->acceptor);
    svc->started = false;
    svc->address[0] = '\0';
}

/* --- the peer side --------------------------------------------------------- */

int cre_local_recv(int sock, uint64_t deadline, const char *what, const char *peer,
                   crp_shm_reply *rep, int *fd)
{
    uint8_t buf[256];
    union {
        char c[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.c, .msg_controllen = sizeof(u.c)};
    ssize_t n;
    for (;;) {
        struct pollfd pf = {.fd = sock, .events = POLLIN};
        uint64_t now = crb_now_ns();
        if (now >= deadline)
            return crb_error(CR_ERR_TIMEOUT, "%s of %s did not answer", what, peer);
        if (poll(&pf, 1, (int)((deadline - now) / 1000000 + 1)) <= 0)
            continue;
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        break;
    }
    int got_fd = -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
            memcpy(&got_fd, CMSG_DATA(cm), sizeof(int));
    int rc = n <= 0 ? crb_error(CR_ERR_CONNECTION, "%s of %s closed the connection", what, peer)
                    : crp_shm_reply_decode(buf, (size_t)n, rep);
    if (rc < 0) {
        if (got_fd >= 0)
            close(got_fd);
        return rc;
    }
    *fd = got_fd;
    return 0;
}

int cre_local_send(int sock, uint64_t deadline, const char *what, const char *peer,
                   const crp_shm_request *req)
{
    crp_buf body = {0};
    int rc = crp_shm_request_encode(req, &body);
    if (rc < 0)
        return rc;
    rc = crb_write_full(sock, body.data, body.len, deadline);
    crp_buf_free(&body);
    if (rc < 0)
        return crb_error(CR_ERR_CONNECTION, "%s request to %s: %s", what, peer,
                         cr_last_error_message());
    return 0;
}

int cre_local_authenticate(cr_engine *e, int sock, uint64_t deadline, const char *label,
                           const char *what, const char *peer)
{
    crp_shm_reply hi;
    int fd = -1;
    int rc = cre_local_recv(sock, deadline, what, peer, &hi, &fd);
    if (rc < 0)
        return rc;
    if (fd >= 0)
        close(fd);
    if (!hi.has_nonce)
        return crb_error(CR_ERR_MALFORMED_FRAME, "%s of %s sent no greeting", what, peer);
    if (!hi.auth)
        return 0;
    if (e->secret == NULL)
        return crb_error(CR_ERR_AUTH_FAILED,
                         "%s of %s requires the shared secret; this engine has none", what, peer);
    crp_shm_request req = {.op = CRP_SHM_AUTH};
    crb_random_bytes(req.client_nonce, CRP_NONCE_SIZE);
    cre_auth_mac(e, label, hi.nonce, req.client_nonce, req.mac);
    rc = cre_local_send(sock, deadline, what, peer, &req);
    crp_shm_reply ok;
    if (rc == 0)
        rc = cre_local_recv(sock, deadline, what, peer, &ok, &fd);
    if (rc < 0)
        return rc;
    if (fd >= 0)
        close(fd);
    if (ok.status != 0)
        return crb_error(CR_ERR_AUTH_FAILED, "%s of %s refused the shared secret", what, peer);
    return 0;
}
