/*
 * service.c - the same-host fd service: a Unix SEQPACKET socket in the
 * abstract namespace ("@crescent-<pid>-<instance>", advertised in the
 * descriptor as the "shm" endpoint) through which peers on this host ask
 * for the memfd of our control page or of a shared region.
 *
 * The listener, connections, credential check and shared-secret proof are
 * local_service.c's (shared with the cuda IPC service). Past the proof each
 * request is one datagram (crp_shm_request), each reply one datagram
 * (crp_shm_reply) carrying the fd as SCM_RIGHTS. A peer of another uid
 * (without shm_allow_any_user) gets CR_ERR_AUTH_FAILED replies, so it
 * learns to use another path. A region is handed out only while a
 * registered, remote-accessible buffer lies in it.
 */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "engine/shared_alloc.h"
#include "engine/transports/shm/shm.h"

/* Is a registered, remote-accessible buffer inside shared region `id`? */
static int region_scan(void *ctx, cre_buffer *const *items, size_t n, uint64_t version)
{
    const uint64_t *id = ctx;
    for (size_t i = 0; i < n; i++)
        if (items[i]->shared_id == *id && items[i]->remote_accessible)
            return 1;
    return 0;
}

static void reply(cre_local_conn *c, int32_t status, uint64_t size, int fd)
{
    crp_shm_reply r = {.status = status, .size = size};
    cre_local_send_reply(c->io.fd, &r, fd, "shm service");
}

static bool serve_request(cre_local_conn *c, const uint8_t *data, size_t len)
{
    cre_tp *tp = c->svc->owner;
    cr_engine *e = tp->engine;
    shm_engine *se = tp->priv;
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

void cre_shm_service_tick(cre_tp *tp, cre_worker *w, uint64_t now_ns)
{
    shm_engine *se = tp->priv;
    cre_local_service_tick(&se->svc, w, now_ns);
}

int cre_shm_service_start(cre_tp *tp)
{
    cr_engine *e = tp->engine;
    shm_engine *se = tp->priv;
    char address[96];
    snprintf(address, sizeof(address), "@crescent-%d-%016llx", (int)getpid(),
             (unsigned long long)e->instance);
    return cre_local_service_start(&se->svc, e, tp, address, "shm service", "shm", serve_request);
}

/* Workers have stopped: close the listener and every connection. */
void cre_shm_service_stop(cre_tp *tp)
{
    shm_engine *se = tp->priv;
    cre_local_service_stop(&se->svc);
}
