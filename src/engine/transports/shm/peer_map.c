/*
 * peer_map.c - a same-host peer's fd service, seen from the initiator: one
 * SEQPACKET connection per peer, opened on the first same-host transfer;
 * the peer's control page mapped with the first request; each shared
 * region mapped once, the first time a transfer touches it, and cached.
 * Nothing is mapped at connect time.
 *
 * The connection stays open and sits in a worker's epoll set (EPOLLRDHUP
 * only, so replies are not stolen from the requesting thread): when the peer
 * dies it hangs up, and every mapping of it is dropped. A restarted peer
 * (new instance id in its descriptor) has its old mappings dropped too.
 *
 * Locking: `lock` serialises connecting, requests and map-cache updates;
 * copies hold `map_lock` shared while they touch a mapping, and dropping
 * takes it exclusive, so no copy ever runs on an unmapped region.
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
#include "base/net.h"
#include "engine/transports/shm/shm.h"

static shm_engine *shm_of(cre_peer_local *l)
{
    return cre_shm_tp(l->engine)->priv;
}

void cre_peer_local_init(cre_peer_local *l, cr_engine *e, cre_peer *p)
{
    memset(l, 0, sizeof(*l));
    l->engine = e;
    l->peer = p;
    l->sock = -1;
    pthread_mutex_init(&l->lock, NULL);
    pthread_rwlock_init(&l->map_lock, NULL);
}

/* Unmap everything and close the connection. Caller holds lock and
 * map_lock exclusively. */
static void drop_locked(cre_peer_local *l)
{
    for (size_t i = 0; i < l->n_maps; i++)
        munmap(l->maps[i].base, l->maps[i].size);
    if (l->n_maps > 0)
        atomic_fetch_sub(&shm_of(l)->mappings, l->n_maps);
    l->n_maps = 0;
    if (l->ctl != NULL)
        munmap(l->ctl, l->ctl_size);
    l->ctl = NULL;
    if (l->sock >= 0) {
        crb_loop_del(&l->watch);
        close(l->sock);
    }
    l->sock = -1;
    atomic_store(&l->cma_state, 0);
}

void cre_peer_local_fini(cre_peer_local *l)
{
    /* engine teardown: workers are stopped, no copy runs */
    for (size_t i = 0; i < l->n_maps; i++)
        munmap(l->maps[i].base, l->maps[i].size);
    if (l->ctl != NULL)
        munmap(l->ctl, l->ctl_size);
    if (l->sock >= 0)
        close(l->sock);
    free(l->maps);
    pthread_mutex_destroy(&l->lock);
    pthread_rwlock_destroy(&l->map_lock);
}

void cre_peer_local_drop(cre_peer_local *l)
{
    pthread_mutex_lock(&l->lock);
    pthread_rwlock_wrlock(&l->map_lock);
    if (l->sock >= 0 || l->n_maps > 0)
        crb_log(CRB_LOG_INFO, "dropping %zu shared mapping(s) of %s", l->n_maps, l->peer->name);
    drop_locked(l);
    atomic_store(&l->refused, false);
    pthread_rwlock_unlock(&l->map_lock);
    pthread_mutex_unlock(&l->lock);
}

static void watch_on_event(crb_io *io, uint32_t events)
{
    if (!(events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        return;
    cre_peer_local *l = (cre_peer_local *)((char *)io - offsetof(cre_peer_local, watch));
    crb_log(CRB_LOG_INFO, "same-host peer %s hung up", l->peer->name);
    /* Take it out of the loop first so it does not fire again. */
    crb_loop_del(io);
    cre_peer_local_drop(l);
}

static int receive(cre_peer_local *l, uint64_t deadline, crp_shm_reply *rep, int *fd)
{
    return cre_local_recv(l->sock, deadline, "shm service", l->peer->name, rep, fd);
}

static int send_request(cre_peer_local *l, const crp_shm_request *req, uint64_t deadline)
{
    return cre_local_send(l->sock, deadline, "shm service", l->peer->name, req);
}

static uint64_t request_deadline(cre_peer_local *l)
{
    return crb_now_ns() + (uint64_t)l->engine->connect_timeout_ms * 1000000ull;
}

/* One request/reply exchange; on success *fd is the received descriptor. */
static int ask(cre_peer_local *l, uint8_t op, uint64_t id, int *fd, uint64_t *size)
{
    cre_peer *p = l->peer;
    uint64_t deadline = request_deadline(l);
    crp_shm_request req = {.op = op, .id = id};
    int rc = send_request(l, &req, deadline);
    crp_shm_reply rep;
    int got_fd = -1;
    if (rc == 0)
        rc = receive(l, deadline, &rep, &got_fd);
    if (rc < 0)
        return rc;
    if (rep.status != 0)
        rc = crb_error(rep.status < 0 ? rep.status : CR_ERR_REMOTE,
                       "shm service of %s refused %s %llu", p->name,
                       op == CRP_SHM_CONTROL_PAGE ? "the control page" : "region",
                       (unsigned long long)id);
    if (rc == 0 && got_fd < 0)
        rc = crb_error(CR_ERR_MALFORMED_FRAME, "shm reply of %s carried no fd", p->name);
    if (rc < 0) {
        if (got_fd >= 0)
            close(got_fd);
        return rc;
    }
    *fd = got_fd;
    *size = rep.size;
    return 0;
}

/* Connect and map the control page. Caller holds l->lock. */
static int connect_locked(cre_peer_local *l, const char *address)
{
    cre_peer *p = l->peer;
    cr_engine *e = l->engine;
    if (l->sock >= 0)
        return 0;
    if (address[0] != '@')
        return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED, "%s offers no shm service", p->name);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0)
        return crb_error(CR_ERR_SYSTEM, "socket(AF_UNIX): %s", strerror(errno));
    struct sockaddr_un sa;
    socklen_t sl = cre_abstract_addr(address, &sa);
    if (connect(s, (struct sockaddr *)&sa, sl) < 0) {
        int err = errno;
        close(s);
        return crb_error(CR_ERR_PEER_UNREACHABLE, "shm service %s of %s: %s", address, p->name,
                         strerror(err));
    }
    l->sock = s;
    int fd;
    uint64_t size;
    int rc = cre_local_authenticate(e, s, request_deadline(l), "shm", "shm service", p->name);
    if (rc == 0)
        rc = ask(l, CRP_SHM_CONTROL_PAGE, 0, &fd, &size);
    if (rc == 0) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
            rc = crb_error(CR_ERR_SYSTEM, "mapping the control page of %s: %s", p->name,
                           strerror(errno));
        else if (size < (uint64_t)CRE_CTL_SLOTS * sizeof(cre_ctl_slot))
            rc = crb_error(CR_ERR_MALFORMED_FRAME, "control page of %s is %llu bytes", p->name,
                           (unsigned long long)size);
        if (rc == 0) {
            l->ctl = m;
            l->ctl_size = size;
        } else if (m != MAP_FAILED) {
            munmap(m, size);
        }
    }
    if (rc < 0) {
        if (rc == CR_ERR_AUTH_FAILED)
            atomic_store(&l->refused, true);
        close(l->sock);
        l->sock = -1;
        return rc;
    }
    /* Watch for the peer hanging up. */
    l->watch.fd = l->sock;
    l->watch.on_event = watch_on_event;
    if (crb_loop_add(&cre_worker_next(e)->loop, &l->watch, EPOLLRDHUP) < 0)
        crb_log(CRB_LOG_WARN, "cannot watch same-host peer %s: %s", p->name,
                cr_last_error_message());
    return 0;
}

int cre_peer_local_connect(cre_peer_local *l, const char *address)
{
    pthread_mutex_lock(&l->lock);
    int rc = atomic_load(&l->refused) ? CR_ERR_AUTH_FAILED : connect_locked(l, address);
    pthread_mutex_unlock(&l->lock);
    return rc;
}

static cre_shm_map *find_map(cre_peer_local *l, uint64_t id)
{
    for (size_t i = 0; i < l->n_maps; i++)
        if (l->maps[i].id == id)
            return &l->maps[i];
    return NULL;
}

int cre_peer_local_map(cre_peer_local *l, const char *address, uint64_t id)
{
    cre_peer *p = l->peer;
    pthread_mutex_lock(&l->lock);
    int rc = atomic_load(&l->refused) ? CR_ERR_AUTH_FAILED : connect_locked(l, address);
    if (rc < 0 || find_map(l, id) != NULL)
        goto out_unlock;
    int fd;
    uint64_t size;
    rc = ask(l, CRP_SHM_REGION, id, &fd, &size);
    if (rc < 0)
        goto out_unlock;
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        rc = crb_error(CR_ERR_SYSTEM, "mapping region %llu of %s: %s", (unsigned long long)id,
                       p->name, strerror(errno));
        goto out_unlock;
    }
    pthread_rwlock_wrlock(&l->map_lock);
    if (l->n_maps == l->cap_maps) {
        size_t ncap = l->cap_maps ? l->cap_maps * 2 : 8;
        cre_shm_map *nm = realloc(l->maps, ncap * sizeof(*nm));
        if (nm == NULL) {
            pthread_rwlock_unlock(&l->map_lock);
            munmap(m, size);
            rc = crb_error(CR_ERR_NO_MEMORY, "map table of %s", p->name);
            goto out_unlock;
        }
        l->maps = nm;
        l->cap_maps = ncap;
    }
    l->maps[l->n_maps++] = (cre_shm_map){id, m, size};
    pthread_rwlock_unlock(&l->map_lock);
    atomic_fetch_add(&shm_of(l)->mappings, 1);
    crb_log(CRB_LOG_DEBUG, "mapped region %llu of %s (%llu bytes)", (unsigned long long)id, p->name,
            (unsigned long long)size);
out_unlock:
    pthread_mutex_unlock(&l->lock);
    return rc;
}

void cre_peer_local_unmap(cre_peer_local *l, uint64_t id)
{
    cre_peer *p = l->peer;
    pthread_mutex_lock(&l->lock);
    pthread_rwlock_wrlock(&l->map_lock);
    cre_shm_map *m = find_map(l, id);
    if (m != NULL) {
        munmap(m->base, m->size);
        *m = l->maps[--l->n_maps];
        atomic_fetch_sub(&shm_of(l)->mappings, 1);
        crb_log(CRB_LOG_DEBUG, "unmapped region %llu of %s", (unsigned long long)id, p->name);
    }
    pthread_rwlock_unlock(&l->map_lock);
    pthread_mutex_unlock(&l->lock);
}

void cre_peer_local_prune(cre_peer_local *l, const uint64_t *live_ids, size_t n_live)
{
    pthread_mutex_lock(&l->lock);
    pthread_rwlock_wrlock(&l->map_lock);
    for (size_t i = 0; i < l->n_maps;) {
        bool live = false;
        for (size_t j = 0; j < n_live && !live; j++)
            live = live_ids[j] == l->maps[i].id;
        if (live) {
            i++;
            continue;
        }
        munmap(l->maps[i].base, l->maps[i].size);
        l->maps[i] = l->maps[--l->n_maps];
        atomic_fetch_sub(&shm_of(l)->mappings, 1);
    }
    pthread_rwlock_unlock(&l->map_lock);
    pthread_mutex_unlock(&l->lock);
}

uint8_t *cre_peer_local_find_locked(cre_peer_local *l, uint64_t id, uint64_t *size)
{
    cre_shm_map *m = find_map(l, id);
    if (m == NULL)
        return NULL;
    *size = m->size;
    return m->base;
}
