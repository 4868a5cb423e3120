/*
 * local_auth.c - the greeting and shared-secret proof that both same-host
 * services (the shm fd service and the cuda IPC service) run on every
 * connection before they hand out a descriptor of our memory.
 *
 * The service's first datagram is a greeting (crp_shm_reply with a fresh
 * nonce and whether it wants the secret). When it does, the peer's first
 * datagram must be an AUTH request whose mac is HMAC-SHA256(secret, label |
 * service nonce | peer nonce) (auth.c); the label names the service ("shm",
 * "cuda") so a proof for one is not one for the other. A wrong or missing
 * proof is answered CR_ERR_AUTH_FAILED and the service closes the
 * connection. The messages are proto's crp_shm_* (strict, fuzzed by
 * fuzz_shm) whatever the service speaks afterwards.
 *
 * Server functions run on worker 0 (the services' loop); the client
 * functions run on whatever thread connects, under that peer's lock.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "base/clock.h"
#include "engine/transports/shm/shm.h"

void cre_local_send_reply(int sock, const crp_shm_reply *r, int fd, const char *what)
{
    crp_buf body = {0};
    if (crp_shm_reply_encode(r, &body) < 0)
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
    if (sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        crb_log(CRB_LOG_WARN, "%s: reply failed: %s", what, strerror(errno));
    crp_buf_free(&body);
}

void cre_local_greet(cr_engine *e, int sock, uint8_t nonce[CRP_NONCE_SIZE], const char *what)
{
    crb_random_bytes(nonce, CRP_NONCE_SIZE);
    crp_shm_reply hi = {.has_nonce = true, .auth = e->secret != NULL};
    memcpy(hi.nonce, nonce, CRP_NONCE_SIZE);
    cre_local_send_reply(sock, &hi, -1, what);
}

int cre_local_auth_serve(cr_engine *e, int sock, const char *label,
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
