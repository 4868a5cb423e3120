/*
 * ha_standby.c - the standby's side of replication (ha.h, docs/ha.md): one
 * thread holds a connection to the leader's RPC port, opened with a
 * CRP_REPL_SUBSCRIBE frame, and reads it until it ends. When it ends and the
 * leader's address then refuses two connections POLL_MS apart, no process
 * listens there any more: the leader is dead (crk_ha_standby_leader_dead),
 * and the election revokes its lease instead of waiting for the TTL. A
 * timeout is never taken as death.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "master/ha_internal.h"
#include "proto/frame.h"

#define POLL_MS 50

struct crk_ha_standby {
    pthread_t thread;
    bool running;
    pthread_mutex_t mu;
    char target[300]; /* leader to follow ("" none) */
    uint64_t term;
    _Atomic int refusals;   /* consecutive refused connects after the stream ended */
    _Atomic bool connected; /* streaming from the leader now */
    _Atomic uint64_t last_frame_ms;
};

/* Connect to host:port; -1 with *refused set when the kernel said ECONNREFUSED. */
static int dial(const char *addr, bool *refused)
{
    char host[CRB_HOST_MAX];
    uint16_t port;
    *refused = false;
    if (crb_parse_hostport(addr, host, &port) < 0)
        return -1;
    struct sockaddr_storage sa;
    socklen_t sl = 0;
    if (crb_resolve(host, port, &sa, &sl) < 0)
        return -1;
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {.tv_sec = 0, .tv_usec = 500000}; /* a connect that hangs is no refusal */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sl) != 0) {
        *refused = errno == ECONNREFUSED;
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static int subscribe(int fd, uint64_t term)
{
    char body[64];
    int n = snprintf(body, sizeof(body), "%" PRIu64 " 0", term);
    uint8_t frame[CRP_HEADER_SIZE + 64];
    crp_header h = {.version = CRP_VERSION, .type = CRP_REPL_SUBSCRIBE, .body_len = (uint32_t)n};
    crp_header_encode(&h, frame);
    memcpy(frame + CRP_HEADER_SIZE, body, (size_t)n);
    return crb_write_full(fd, frame, CRP_HEADER_SIZE + (size_t)n, crb_now_ns() + 1000000000ull);
}

static void *standby_main(void *arg)
{
    crk_ha *ha = arg;
    crk_ha_standby *sb = ha->standby;
    while (!atomic_load(&ha->stop)) {
        char target[sizeof(sb->target)];
        pthread_mutex_lock(&sb->mu);
        memcpy(target, sb->target, sizeof(target));
        uint64_t term = sb->term;
        pthread_mutex_unlock(&sb->mu);
        if (target[0] == '\0' || atomic_load(&ha->role) != CRK_HA_STANDBY) {
            usleep(POLL_MS * 1000);
            continue;
        }
        bool refused = false;
        int fd = dial(target, &refused);
        if (fd < 0) {
            if (refused)
                atomic_fetch_add(&sb->refusals, 1);
            else
                atomic_store(&sb->refusals, 0);
            usleep(POLL_MS * 1000);
            continue;
        }
        atomic_store(&sb->refusals, 0);
        if (subscribe(fd, term) < 0) {
            close(fd);
            usleep(POLL_MS * 1000);
            continue;
        }
        atomic_store(&sb->connected, true);
        atomic_store(&sb->last_frame_ms, crb_now_ms());
        for (;;) {
            if (atomic_load(&ha->stop) || atomic_load(&ha->role) != CRK_HA_STANDBY)
                break;
            pthread_mutex_lock(&sb->mu);
            bool moved = strcmp(sb->target, target) != 0 || sb->term != term;
            pthread_mutex_unlock(&sb->mu);
            if (moved)
                break;
            struct pollfd p = {.fd = fd, .events = POLLIN};
            int r = poll(&p, 1, POLL_MS);
            if (r > 0) {
                uint8_t buf[4096];
                ssize_t got = recv(fd, buf, sizeof(buf), 0);
                if (got <= 0)
                    break; /* the leader closed the stream (or died) */
                atomic_store(&sb->last_frame_ms, crb_now_ms());
            }
        }
        atomic_store(&sb->connected, false);
        close(fd);
    }
    return NULL;
}

int crk_ha_standby_create(crk_ha *ha)
{
    crk_ha_standby *sb = calloc(1, sizeof(*sb));
    if (sb == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ha standby");
    pthread_mutex_init(&sb->mu, NULL);
    ha->standby = sb;
    if (pthread_create(&sb->thread, NULL, standby_main, ha) != 0) {
        pthread_mutex_destroy(&sb->mu);
        free(sb);
        ha->standby = NULL;
        return crb_error(CR_ERR_SYSTEM, "ha: starting the standby thread");
    }
    sb->running = true;
    return 0;
}

void crk_ha_standby_destroy(crk_ha *ha)
{
    crk_ha_standby *sb = ha->standby;
    if (sb == NULL)
        return;
    atomic_store(&ha->stop, true);
    if (sb->running)
        pthread_join(sb->thread, NULL);
    pthread_mutex_destroy(&sb->mu);
    free(sb);
    ha->standby = NULL;
}

void crk_ha_standby_follow(crk_ha *ha, const char *addr, uint64_t term)
{
    crk_ha_standby *sb = ha->standby;
    pthread_mutex_lock(&sb->mu);
    if (strcmp(sb->target, addr) != 0 || sb->term != term) {
        snprintf(sb->target, sizeof(sb->target), "%s", addr);
        sb->term = term;
        atomic_store(&sb->refusals, 0);
    }
    pthread_mutex_unlock(&sb->mu);
}

bool crk_ha_standby_leader_dead(crk_ha *ha)
{
    return atomic_load(&ha->standby->refusals) >= 2;
}

bool crk_ha_standby_synced(crk_ha *ha)
{
    (void)ha;
    return true; /* nothing is streamed yet: every standby is as good as another */
}

int crk_ha_standby_promote(crk_ha *ha, uint64_t now_ms)
{
    (void)ha;
    (void)now_ms;
    return 0;
}

void crk_ha_standby_status(crk_ha *ha, crk_ha_status *st)
{
    crk_ha_standby *sb = ha->standby;
    st->standbys = atomic_load(&sb->connected) ? 1 : 0;
    uint64_t now = crb_now_ms(), last = atomic_load(&sb->last_frame_ms);
    st->lag_ms = st->standbys && now > last ? now - last : 0;
}
