/*
 * ha_standby.c - the standby's side of replication (ha.h, docs/ha.md).
 *
 * One thread follows the leader: it connects to the leader's RPC port,
 * sends CRP_REPL_SUBSCRIBE ("term address"), applies every CRP_REPL_DATA
 * frame to its catalog (ha_catalog.h) and acknowledges what it received
 * with CRP_REPL_ACK (request_id = the last sequence number of the frames
 * read at once; sent on receipt, before they are applied in the same hold
 * of sb->mu, so a promotion never sees an acknowledged frame unapplied). The
 * subscription starts with a snapshot (RESET ... SNAP_END end_seq); the
 * standby holds the leader's state once it applied everything up to
 * end_seq, and it is in the leader's in-sync set once the leader published
 * that in etcd: only then may it campaign without losing acknowledged
 * writes (crk_ha_standby_synced).
 *
 * Leader death: when the stream ends and the leader's address then refuses
 * two connections POLL_MS apart, no process listens there any more
 * (crk_ha_standby_leader_dead): the election revokes its lease instead of
 * waiting for the TTL. A timeout is never taken as death.
 *
 * Locking: sb->mu guards the target, the catalog and the sync state; the
 * thread holds it while applying a frame, the promotion while restoring.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "master/ha_catalog.h"
#include "master/ha_codec.h"
#include "master/ha_internal.h"
#include "master/internal.h"
#include "proto/frame.h"

#define POLL_MS 50

struct crk_ha_standby {
    pthread_t thread;
    bool running;
    pthread_mutex_t mu;
    char target[300]; /* leader to follow ("" none) */
    uint64_t term;
    crk_ha_catalog *cat;
    uint64_t applied;     /* last sequence number applied */
    uint64_t snap_end;    /* UINT64_MAX until SNAP_END arrived */
    uint64_t synced_term; /* term whose state the catalog holds (0: none) */
    bool promoted;
    _Atomic int refusals;   /* consecutive refused connects after the stream ended */
    _Atomic bool connected; /* streaming from the leader now */
    _Atomic uint64_t last_frame_ms;
    _Atomic uint64_t applied_pub;
    /* counters (crk_ha_status) */
    _Atomic uint64_t frames, entries, acks, apply_ns;
};

/* Connect to addr; -1 with *refused set when the kernel said ECONNREFUSED. */
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

static int send_header(int fd, int type, uint64_t request_id, const void *body, size_t len)
{
    uint8_t frame[CRP_HEADER_SIZE + 512];
    if (len > 512)
        return CR_INVALID_PARAMS;
    crp_header h = {.version = CRP_VERSION,
                    .type = (uint8_t)type,
                    .body_len = (uint32_t)len,
                    .request_id = request_id};
    crp_header_encode(&h, frame);
    if (len > 0)
        memcpy(frame + CRP_HEADER_SIZE, body, len);
    return crb_write_full(fd, frame, CRP_HEADER_SIZE + len, crb_now_ns() + 2000000000ull);
}

/* Apply one DATA frame (sb->mu held). Returns 1 + the sequence number to
 * acknowledge, 0 for a snapshot frame (no ack), or a negative status
 * (resubscribe). */
static int64_t apply_frame(crk_ha *ha, crk_ha_standby *sb, const uint8_t *body, size_t len)
{
    uint64_t first = 0;
    uint32_t count = 0;
    int rc = crk_ha_frame_header(body, len, &first, &count);
    if (rc < 0)
        return rc;
    crk_service *s = ha->cfg.svc;
    uint64_t now = crb_now_ms();
    uint64_t read_hold = s->cfg.default_kv_lease_ttl_ms + 1000;
    uint64_t write_hold = s->cfg.put_start_release_timeout_ms;
    size_t off = 12;
    /* Two cursors run ahead, prefetching each entry's catalog slot (16
     * entries ahead) and then its record (8 ahead): a frame of many
     * entries waits for memory once, not once or twice per entry. */
    size_t slot_off = 12;
    uint32_t slot_at = 0, rec_at = 0;
    /* Each entry's record hash, computed once by the slot cursor and used
     * by the record cursor and the apply (it runs at most 16 ahead). */
    uint64_t hashes[16] = {0};
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *raw;
        size_t n;
        crk_ha_entry e;
        for (; slot_at < count && slot_at < i + 16; slot_at++) {
            if (crk_ha_frame_entry(body, len, &slot_off, &raw, &n) < 0) {
                slot_at = count;
                break;
            }
            hashes[slot_at % 16] = crk_ha_catalog_prefetch_slot(sb->cat, raw, n);
        }
        for (; rec_at < count && rec_at < i + 8 && rec_at < slot_at; rec_at++)
            crk_ha_catalog_prefetch_record(sb->cat, hashes[rec_at % 16]);
        rc = crk_ha_frame_entry(body, len, &off, &raw, &n);
        if (rc == 0)
            rc = crk_ha_entry_decode(raw, n, &e);
        if (rc < 0)
            return rc;
        if (e.kind == CRK_HA_RESET) {
            sb->snap_end = UINT64_MAX;
            sb->synced_term = 0;
        } else if (e.kind == CRK_HA_SNAP_END) {
            sb->snap_end = e.end_seq;
        }
        /* (entry i parsed, so the slot cursor, on the same bytes, hashed it) */
        rc = crk_ha_catalog_apply_hashed(sb->cat, &e, raw, n, hashes[i % 16], first ? first + i : 0,
                                         now, read_hold, write_hold);
        if (rc < 0)
            return rc;
    }
    if (off != len)
        return crb_error(CR_ERR_MALFORMED_FRAME, "ha frame: %zu trailing bytes", len - off);
    if (first == 0)
        return 0;
    sb->applied = first + count - 1; /* count 0: the stream starts after first - 1 */
    atomic_store(&sb->applied_pub, sb->applied);
    if (sb->snap_end != UINT64_MAX && sb->applied >= sb->snap_end && sb->synced_term != sb->term) {
        sb->synced_term = sb->term;
        crb_log(CRB_LOG_INFO, "ha: caught up with the leader (%zu keys, seq %" PRIu64 ")",
                crk_ha_catalog_keys(sb->cat), sb->applied);
    }
    return (int64_t)sb->applied + 1;
}

/* Follow the stream on fd until it ends, the leader changes or we stop.
 * Reads take whatever the socket holds (several frames at once when the
 * leader is ahead); every complete frame is applied under one hold of
 * sb->mu and the last sequence number is acknowledged once for them all
 * (group acknowledgement: fewer system calls and wake-ups on both sides). */
static void stream(crk_ha *ha, crk_ha_standby *sb, int fd, const char *target, uint64_t term)
{
    size_t cap = 2 * ((size_t)CRP_HEADER_SIZE + CRP_MAX_BODY);
    uint8_t *buf = malloc(cap);
    if (buf == NULL)
        return;
    size_t have = 0;
    /* The last read took all the socket held: the next one blocks (for at
     * most POLL_MS, SO_RCVTIMEO, then the loop looks at the stop and the
     * target again): one system call per wake-up, not a poll and a recv. */
    bool drained = false;
    struct timeval wait = {.tv_sec = 0, .tv_usec = POLL_MS * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    for (;;) {
        if (atomic_load(&ha->stop) || atomic_load(&ha->role) != CRK_HA_STANDBY)
            break;
        pthread_mutex_lock(&sb->mu);
        bool moved = strcmp(sb->target, target) != 0 || sb->term != term;
        pthread_mutex_unlock(&sb->mu);
        if (moved)
            break;
        ssize_t got = recv(fd, buf + have, cap - have, drained ? 0 : MSG_DONTWAIT);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            drained = true;
            continue;
        }
        if (got <= 0)
            break; /* the leader closed the stream (or died) */
        drained = (size_t)got < cap - have;
        have += (size_t)got;
        atomic_store(&sb->last_frame_ms, crb_now_ms());
        /* Acknowledged on receipt: the complete frames' headers are
         * checked and their last sequence number acknowledged first, then
         * they are applied, all under one hold of sb->mu, so a promotion
         * (which takes sb->mu) never sees an acknowledged frame unapplied.
         * The leader's reply waits one standby round trip less the apply
         * time. A frame that then fails to apply (out of memory, a
         * malformed entry) leaves the copy unsynced (no fast campaign) and
         * resubscribes with a snapshot. */
        size_t end = 0, at = 0;
        uint64_t ack = 0;
        bool bad = false, acked = false;
        uint64_t t0 = crb_now_ns(), nframes = 0, nentries = 0;
        pthread_mutex_lock(&sb->mu);
        while (have - end >= CRP_HEADER_SIZE) {
            crp_header h;
            uint64_t first = 0;
            uint32_t count = 0;
            if (crp_header_decode(buf + end, &h) < 0 || h.type != CRP_REPL_DATA) {
                bad = true;
                break;
            }
            if (have - end < CRP_HEADER_SIZE + (size_t)h.body_len)
                break; /* the rest of this frame is still on its way */
            if (crk_ha_frame_header(buf + end + CRP_HEADER_SIZE, h.body_len, &first, &count) < 0) {
                bad = true;
                break;
            }
            if (first != 0)
                ack = first + count; /* 1 + the last sequence number (count 0: first - 1) */
            nframes++;
            nentries += count;
            end += CRP_HEADER_SIZE + (size_t)h.body_len;
        }
        if (ack > 0 && !sb->promoted) {
            acked = send_header(fd, CRP_REPL_ACK, ack - 1, NULL, 0) == 0;
            if (!acked)
                bad = true; /* applied below all the same; then resubscribe */
        }
        while (at < end) {
            crp_header h;
            (void)crp_header_decode(buf + at, &h); /* checked above */
            if (sb->promoted) {
                bad = true;
                break;
            }
            if (apply_frame(ha, sb, buf + at + CRP_HEADER_SIZE, h.body_len) < 0) {
                sb->synced_term = 0; /* acknowledged, not applied: not a safe candidate */
                bad = true;
                break;
            }
            at += CRP_HEADER_SIZE + (size_t)h.body_len;
        }
        pthread_mutex_unlock(&sb->mu);
        atomic_fetch_add_explicit(&sb->frames, nframes, memory_order_relaxed);
        atomic_fetch_add_explicit(&sb->entries, nentries, memory_order_relaxed);
        atomic_fetch_add_explicit(&sb->apply_ns, crb_now_ns() - t0, memory_order_relaxed);
        if (acked)
            atomic_fetch_add_explicit(&sb->acks, 1, memory_order_relaxed);
        if (bad) {
            crb_log(CRB_LOG_WARN, "ha: replication stream from %s: %s; resubscribing", target,
                    cr_last_error_message());
            break;
        }
        memmove(buf, buf + at, have - at);
        have -= at;
    }
    free(buf);
}

static void *standby_main(void *arg)
{
    pthread_setname_np(pthread_self(), "crk-ha-standby");
    crk_ha *ha = arg;
    crk_ha_standby *sb = ha->standby;
    while (!atomic_load(&ha->stop)) {
        char target[sizeof(sb->target)];
        pthread_mutex_lock(&sb->mu);
        memcpy(target, sb->target, sizeof(target));
        uint64_t term = sb->term;
        /* Our copy is this term's up to `applied`: the leader may resume
         * from its log instead of sending a snapshot. */
        uint64_t resume = sb->synced_term == term && term != 0 ? sb->applied : 0;
        bool done = sb->promoted;
        pthread_mutex_unlock(&sb->mu);
        if (done)
            break;
        if (target[0] == '\0' || atomic_load(&ha->role) != CRK_HA_STANDBY) {
            usleep(POLL_MS * 1000);
            continue;
        }
        bool refused = false;
        int fd = dial(target, &refused);
        if (fd < 0 && atomic_load(&sb->refusals) == 0)
            crb_log(CRB_LOG_INFO, "ha: cannot reach the leader %s (%s)", target,
                    refused ? "refused" : "no answer");
        if (fd < 0) {
            if (refused)
                atomic_fetch_add(&sb->refusals, 1);
            else
                atomic_store(&sb->refusals, 0);
            usleep(POLL_MS * 1000);
            continue;
        }
        atomic_store(&sb->refusals, 0);
        char body[400];
        int n = resume != 0 ? snprintf(body, sizeof(body), "%" PRIu64 " %s %" PRIu64, term,
                                       ha->advertise, resume)
                            : snprintf(body, sizeof(body), "%" PRIu64 " %s", term, ha->advertise);
        if (send_header(fd, CRP_REPL_SUBSCRIBE, 0, body, (size_t)n) < 0) {
            close(fd);
            usleep(POLL_MS * 1000);
            continue;
        }
        atomic_store(&sb->connected, true);
        atomic_store(&sb->last_frame_ms, crb_now_ms());
        crb_log(CRB_LOG_DEBUG, "ha: subscribed to %s (term %" PRIu64 ")", target, term);
        stream(ha, sb, fd, target, term);
        atomic_store(&sb->connected, false);
        close(fd);
        usleep(20000); /* a leader that refuses the subscription is not hammered */
    }
    return NULL;
}

int crk_ha_standby_create(crk_ha *ha)
{
    crk_ha_standby *sb = calloc(1, sizeof(*sb));
    if (sb == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ha standby");
    int rc = crk_ha_catalog_create(&sb->cat);
    if (rc < 0) {
        free(sb);
        return rc;
    }
    sb->snap_end = UINT64_MAX;
    pthread_mutex_init(&sb->mu, NULL);
    ha->standby = sb;
    if (pthread_create(&sb->thread, NULL, standby_main, ha) != 0) {
        pthread_mutex_destroy(&sb->mu);
        crk_ha_catalog_destroy(sb->cat);
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
    crk_ha_catalog_destroy(sb->cat);
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
    crk_ha_standby *sb = ha->standby;
    pthread_mutex_lock(&sb->mu);
    uint64_t synced = sb->synced_term, term = sb->term;
    pthread_mutex_unlock(&sb->mu);
    if (synced == 0 || synced != term)
        return false;
    /* In the leader's published in-sync set for that term? */
    crm_etcd_kv kv;
    int rc = crm_etcd_get(ha->etcd, ha->isr_key, &kv, NULL);
    if (rc < 0)
        return false;
    char *text = (char *)kv.value;
    uint64_t isr_term = strtoull(text, NULL, 10);
    bool member = false;
    const char *list = strchr(text, ' ');
    size_t n = strlen(ha->advertise);
    for (const char *p = list ? list + 1 : NULL; p != NULL && *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && memcmp(p, ha->advertise, n) == 0)
            member = true;
        p = comma ? comma + 1 : NULL;
    }
    crm_etcd_kv_clear(&kv);
    return isr_term == synced && member;
}

int crk_ha_standby_promote(crk_ha *ha, uint64_t now_ms)
{
    crk_ha_standby *sb = ha->standby;
    pthread_mutex_lock(&sb->mu);
    sb->promoted = true; /* the stream thread applies nothing more */
    uint64_t fenced = 0, objects = 0;
    int rc = crk_ha_restore(ha->cfg.svc, sb->cat, now_ms, &fenced, &objects);
    size_t keys = crk_ha_catalog_keys(sb->cat);
    crk_ha_catalog_clear(sb->cat);
    pthread_mutex_unlock(&sb->mu);
    if (rc == 0) {
        atomic_fetch_add(&ha->fenced_writes, fenced);
        crb_log(CRB_LOG_WARN,
                "ha: promoted: %" PRIu64 " objects restored from %zu keys (seq %" PRIu64
                "), %" PRIu64 " writes in flight fenced",
                objects, keys, sb->applied, fenced);
    }
    return rc;
}

void crk_ha_standby_status(crk_ha *ha, crk_ha_status *st)
{
    crk_ha_standby *sb = ha->standby;
    st->standbys = atomic_load(&sb->connected) ? 1 : 0;
    st->commit_seq = atomic_load(&sb->applied_pub);
    uint64_t now = crb_now_ms(), last = atomic_load(&sb->last_frame_ms);
    st->lag_ms = st->standbys && now > last ? now - last : 0;
    st->frames = atomic_load(&sb->frames);
    st->entries = atomic_load(&sb->entries);
    st->acks = atomic_load(&sb->acks);
    st->apply_ns = atomic_load(&sb->apply_ns);
}
