/*
 * ha_repl.c - the leader's side of replication (ha.h, docs/ha.md).
 *
 * The log: after each mutating RPC, crk_ha_log_request re-reads the post-
 * image of every key the request named (under the key's shard lock, so the
 * last image logged for a key is always its current state) and appends it;
 * mounts are logged the same way, unmounts from the service's hook under
 * seg_lock. Entries get consecutive sequence numbers; their bytes are kept
 * only while a standby still has to be sent them (nothing is kept without
 * standbys: a new standby starts from a snapshot).
 *
 * Per standby one thread, the sender (snapshot: RESET, every segment and
 * every key, SNAP_END; then the log from where the snapshot began, in
 * frames of at most ~512 KiB: whatever accumulated while the last frame was
 * in flight), and one ack reader that is no thread: the standby's socket is
 * watched by the event loop of the RPC I/O thread that took the
 * subscription (on_ack), so the thread that sees the commit index move
 * releases its own held replies without a wake-up in between. A standby
 * whose ack reached its SNAP_END is in sync: it is counted in the in-sync
 * set (ISR) at once, and the monitor publishes the new ISR in etcd (a txn
 * guarded by its term) right after.
 *
 * Durability point: with --ha_sync_replicas >= 1, a mutation's reply waits
 * until every in-sync standby acknowledged applying everything logged so
 * far. A standby that does not acknowledge within --ha_replication_timeout_ms
 * is dropped: the ISR without it is published first, then the reply goes
 * out (so a dropped standby can never win an election and lose that write);
 * if etcd does not take the new ISR the reply is ERR_NOT_REPLICATED. With no
 * standby in sync the leader serves alone ("degraded": /metrics says how
 * many standbys stream).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "master/ha_codec.h"
#include "master/ha_internal.h"
#include "master/internal.h"
#include "master/offload.h"
#include "proto/frame.h"
#include "proto/rpc.h"

#define FRAME_BYTES  (512u << 10)
#define LOG_MAX      (256u << 20) /* a standby this far behind is dropped */
#define LOG_RETAIN   (32u << 20)  /* kept after sending: a reconnecting standby resumes from it */
#define MAX_STANDBYS 16

typedef struct sender {
    struct sender *next;
    crk_ha *ha;
    int fd;
    char addr[300];
    pthread_t thread;
    bool started_sender;
    /* Acks: ack_io (on fd) sits on an RPC I/O thread's loop; only that
     * thread runs on_ack and touches ack_in/ack_have. */
    crb_io ack_io;
    uint8_t ack_in[64 * CRP_HEADER_SIZE];
    size_t ack_have;
    /* Writes to fd once streaming: whoever holds wmu (the sender thread, or
     * the thread that just logged a change: no wake-up of the sender on the
     * way to the standby) builds the next frame and sends it. */
    pthread_mutex_t wmu;
    uint8_t *out; /* wmu: the frame being sent (header + body) */
    size_t out_cap, out_off, out_len;
    /* log_mu */
    bool streaming; /* the snapshot and the stream's start frame are out */
    bool resumed;   /* streams from the log where its last subscription ended */
    bool rest;      /* a frame is partly sent: the sender thread finishes it */
    uint32_t users; /* threads using it outside log_mu (not reaped meanwhile) */
    /* log_mu */
    uint64_t pos;      /* absolute byte position of the next entry to send */
    uint64_t pos_seq;  /* sequence number of the entry before pos */
    uint64_t snap_end; /* in sync once acked reaches it */
    bool snap_done;
    bool synced;            /* counted in the commit index (and published in the ISR) */
    bool drop;              /* to leave the ISR: published without it, then uncounted */
    bool dead;              /* its connection is closed */
    bool ack_on_loop;       /* ack_io is watched: not freed until on_ack let go */
    bool join_pending;      /* counted in the ISR, not yet published (the monitor does) */
    uint64_t join_retry_ms; /* its ISR write failed: the monitor tries again from then */
    bool joining;           /* in the monitor's ISR write under way */
    uint64_t acked;
    uint64_t last_ack_ms; /* last ack that moved it, or last time it was caught up */
} sender;

struct crk_ha_log {
    pthread_mutex_t mu;
    pthread_cond_t more;  /* new entries or a sender change */
    pthread_cond_t acked; /* an acknowledgement arrived */
    bool leading;
    uint64_t term;
    crk_ha_buf buf;     /* entries (u32 len + entry) from byte base_off on */
    uint64_t base_off;  /* absolute position of buf.data[0] */
    uint64_t base_seq;  /* sequence number of the entry before base_off */
    uint64_t resumes;   /* subscriptions served from the log (no snapshot) */
    uint64_t snapshots; /* subscriptions served with a snapshot */
    uint64_t head;      /* last sequence number assigned */
    sender *senders;
    size_t nsenders;
    pthread_mutex_t isr_mu; /* one ISR write at a time */
    uint64_t not_replicated;
    _Atomic uint64_t commit;  /* min acked over the counted standbys */
    _Atomic uint32_t counted; /* standbys counted in it (0: everything is committed) */
    void (*notify)(void *);   /* the RPC server: release held replies */
    void *notify_ctx;
    /* counters (crk_ha_status) */
    _Atomic uint64_t frames_sent, entries_sent, ack_reads, commit_moves, held_replies, held_ns;
    pthread_t monitor;
    bool monitor_running;
    atomic_bool monitor_stop;
};

/* Recompute the commit index and wake whoever waits on it (log_mu held). */
static void recompute_locked(crk_ha_log *l)
{
    uint64_t c = l->head;
    uint32_t n = 0;
    for (sender *s = l->senders; s != NULL; s = s->next) {
        if (s->synced) {
            n++;
            if (s->acked < c)
                c = s->acked;
        }
    }
    bool moved = atomic_load(&l->commit) != c || atomic_load(&l->counted) != n;
    atomic_store(&l->commit, c);
    atomic_store(&l->counted, n);
    if (!moved)
        return; /* e.g. the faster standby's ack: nothing new is committed */
    pthread_cond_broadcast(&l->acked);
    atomic_fetch_add_explicit(&l->commit_moves, 1, memory_order_relaxed);
    if (l->notify != NULL)
        l->notify(l->notify_ctx);
}

/* --- the log -------------------------------------------------------------------- */

static uint64_t log_end(const crk_ha_log *l)
{
    return l->base_off + l->buf.len;
}

/* Is there something to send to sd now (log_mu held)? */
static bool sendable_locked(const crk_ha_log *l, const sender *sd)
{
    return sd->streaming && !sd->dead && l->leading && sd->pos != log_end(l);
}

/* Drop the bytes every sender has sent, except the last LOG_RETAIN (a
 * standby that reconnects resumes from them). Amortised: only once at least
 * half the buffer (and 1 MiB) can go, at an entry boundary (log_mu held). */
static void trim_locked(crk_ha_log *l)
{
    uint64_t end = log_end(l);
    uint64_t target = end > LOG_RETAIN ? end - LOG_RETAIN : 0;
    for (sender *s = l->senders; s != NULL; s = s->next)
        if (!s->dead && s->pos < target)
            target = s->pos;
    if (target <= l->base_off)
        return;
    size_t want = (size_t)(target - l->base_off);
    if (want < l->buf.len && (want < (1u << 20) || want < l->buf.len / 2))
        return;
    size_t at = 0;
    uint64_t n = 0;
    while (at + 4 <= want) {
        uint32_t len = 0;
        for (int i = 0; i < 4; i++)
            len |= (uint32_t)l->buf.data[at + (size_t)i] << (8 * i);
        if (at + 4 + len > want)
            break;
        at += 4 + len;
        n++;
    }
    memmove(l->buf.data, l->buf.data + at, l->buf.len - at);
    l->buf.len -= at;
    l->base_off += at;
    l->base_seq += n;
}

/* The log position of the entry after sequence number seq, if the log still
 * holds it: true with *pos (log_mu held). */
static bool log_find_locked(const crk_ha_log *l, uint64_t seq, uint64_t *pos)
{
    if (seq < l->base_seq || seq > l->head)
        return false;
    size_t at = 0;
    for (uint64_t k = l->base_seq; k < seq; k++) {
        if (at + 4 > l->buf.len)
            return false;
        uint32_t len = 0;
        for (int i = 0; i < 4; i++)
            len |= (uint32_t)l->buf.data[at + (size_t)i] << (8 * i);
        at += 4 + len;
    }
    if (at > l->buf.len)
        return false;
    *pos = l->base_off + at;
    return true;
}

/* Append one encoded entry (log_mu held). */
static void append_locked(crk_ha_log *l, const crk_ha_entry *e)
{
    l->head++;
    size_t at = l->buf.len;
    crk_ha_buf *b = &l->buf;
    if (b->len + 4 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        uint8_t *p = realloc(b->data, cap);
        if (p == NULL)
            goto fail;
        b->data = p;
        b->cap = cap;
    }
    b->len += 4;
    if (crk_ha_entry_encode(e, b) < 0) {
        b->len = at;
        goto fail;
    }
    uint32_t n = (uint32_t)(b->len - at - 4);
    for (int i = 0; i < 4; i++)
        b->data[at + (size_t)i] = (uint8_t)(n >> (8 * i));
    if (b->len > LOG_MAX) {
        /* A standby this far behind starts over from a snapshot rather
         * than holding the log's memory. */
        for (sender *s = l->senders; s != NULL; s = s->next) {
            if (!s->dead && log_end(l) - s->pos > LOG_MAX / 2) {
                crb_log(CRB_LOG_WARN, "ha: standby %s is %llu bytes behind; dropping it", s->addr,
                        (unsigned long long)(log_end(l) - s->pos));
                s->dead = true;
                if (s->synced)
                    s->drop = true;
                shutdown(s->fd, SHUT_RDWR);
            }
        }
        trim_locked(l);
    }
    return; /* the senders are woken once per request (kick) */
fail:
    /* Without memory the standbys cannot get this change: drop them all
     * (they resubscribe and start over from a snapshot). */
    crb_log(CRB_LOG_ERROR, "ha: out of memory logging a change; dropping the standbys");
    for (sender *s = l->senders; s != NULL; s = s->next) {
        s->dead = true;
        shutdown(s->fd, SHUT_RDWR);
    }
    /* The log lacks this change: nobody may resume across it. */
    l->base_off += l->buf.len;
    l->buf.len = 0;
    l->base_seq = l->head;
}

static void key_image(crk_service *s, crk_object *o, const char *key, size_t len, crk_ha_entry *e,
                      uint64_t now)
{
    memset(e, 0, offsetof(crk_ha_entry, rep)); /* the encoder reads rep[0..nrep) only */
    e->kind = CRK_HA_KEY;
    e->key = key;
    e->key_len = len;
    if (o == NULL)
        return;
    crk_replica *reps = crk_obj_reps(o);
    crk_write *w = o->write;
    if (o->flags & CRK_OBJ_COMPLETE) {
        e->flags |= CRK_HA_F_COMPLETE;
        if (o->flags & CRK_OBJ_HARD_PIN)
            e->flags |= CRK_HA_F_HARD_PIN;
        if (o->flags & CRK_OBJ_SOFT_PIN) {
            e->flags |= CRK_HA_F_SOFT_PIN;
            e->soft_left_ms = o->soft_pin_until > now ? o->soft_pin_until - now : 0;
        }
        e->size = o->size;
        e->nrep = o->nrep;
        for (uint32_t i = 0; i < o->nrep && i < CRK_HA_MAX_REPS; i++)
            e->rep[i] = (crk_ha_rep){reps[i].seg->epoch, reps[i].offset};
    }
    if (w != NULL) {
        e->flags |= CRK_HA_F_WRITING;
        e->wsize = w->size;
        const crk_replica *wr = w->upsert ? w->rep : reps;
        uint32_t n = w->upsert ? w->nrep : o->nrep;
        e->wnrep = n;
        for (uint32_t i = 0; i < n && i < CRK_HA_MAX_REPS; i++)
            e->wrep[i] = (crk_ha_rep){wr[i].seg->epoch, wr[i].offset};
    }
    (void)s;
}

/* Log key's current image (its shard locked while the image is read and
 * appended, so per-key log order is effect order). */
static void log_key(crk_ha *ha, const char *key)
{
    crk_service *s = ha->cfg.svc;
    if (key == NULL)
        return;
    size_t len = strnlen(key, CRK_MAX_KEY_LEN + 1);
    if (len == 0 || len > CRK_MAX_KEY_LEN)
        return;
    uint64_t h = crk_key_hash(s, key, len);
    crk_shard *sh = &s->shards[(h >> 40) % CRK_NUM_SHARDS];
    pthread_mutex_lock(&sh->mu);
    size_t i = crk_shard_probe(sh, key, len, (uint32_t)h);
    crk_ha_entry e;
    key_image(s, sh->slots[i].obj, key, len, &e, crb_now_ms());
    pthread_mutex_lock(&ha->log->mu);
    append_locked(ha->log, &e);
    pthread_mutex_unlock(&ha->log->mu);
    pthread_mutex_unlock(&sh->mu);
}

static void mount_image(const crk_segment *seg, crk_ha_entry *e)
{
    memset(e, 0, sizeof(*e));
    e->kind = CRK_HA_MOUNT;
    e->epoch = seg->epoch;
    e->owner_hi = seg->owner.hi;
    e->owner_lo = seg->owner.lo;
    e->base = seg->base;
    e->size = seg->size;
    e->name = seg->name;
    e->name_len = seg->name_len;
}

/* Log the segment a client just (re)mounted, if it is still there. */
static void log_mount(crk_ha *ha, const char *name)
{
    crk_service *s = ha->cfg.svc;
    if (name == NULL)
        return;
    pthread_rwlock_rdlock(&s->seg_lock);
    for (size_t i = 0; i < s->nsegs; i++) {
        const crk_segment *seg = s->segs[i];
        if (strcmp(seg->name, name) == 0) {
            crk_ha_entry e;
            mount_image(seg, &e);
            pthread_mutex_lock(&ha->log->mu);
            append_locked(ha->log, &e);
            pthread_mutex_unlock(&ha->log->mu);
            break;
        }
    }
    pthread_rwlock_unlock(&s->seg_lock);
}

/* An object erased by the service (its shard lock held). */
static void on_erased(void *ctx, const char *key, size_t len)
{
    crk_ha *ha = ctx;
    crk_ha_entry e = {.kind = CRK_HA_KEY, .key = key, .key_len = len};
    pthread_mutex_lock(&ha->log->mu);
    append_locked(ha->log, &e);
    pthread_mutex_unlock(&ha->log->mu);
}

/* Wake the senders once for everything a request logged (a batch of 128
 * keys goes out as one frame, not 128). */
/* A disk copy made or dropped (master/offload.c, under its mutex). */
static void on_disk(void *ctx, const char *key, size_t len, crk_client_id holder, uint64_t version,
                    uint64_t size, bool present)
{
    crk_ha *ha = ctx;
    crk_ha_entry e = {.kind = CRK_HA_DISK,
                      .key = key,
                      .key_len = len,
                      .flags = present ? CRK_HA_F_ON_DISK : 0,
                      .owner_hi = holder.hi,
                      .owner_lo = holder.lo,
                      .disk_version = version,
                      .size = size};
    pthread_mutex_lock(&ha->log->mu);
    append_locked(ha->log, &e);
    pthread_mutex_unlock(&ha->log->mu);
}

static void push_to(crk_ha_log *l, sender *sd);
static void kick(crk_ha *ha);

static _Thread_local bool batching, batch_pending;

void crk_ha_batch_begin(void)
{
    batching = true;
}

bool crk_ha_batch_pending(void)
{
    return batch_pending;
}

void crk_ha_batch_end(crk_ha *ha)
{
    batching = false;
    if (batch_pending && ha != NULL) {
        batch_pending = false;
        kick(ha);
    }
}

static void kick(crk_ha *ha)
{
    if (batching) { /* sent once at the end of the I/O thread's round */
        batch_pending = true;
        return;
    }
    crk_ha_log *l = ha->log;
    sender *use[MAX_STANDBYS];
    size_t n = 0;
    pthread_mutex_lock(&l->mu);
    for (sender *s = l->senders; s != NULL && n < MAX_STANDBYS; s = s->next) {
        if (sendable_locked(l, s)) {
            s->users++;
            use[n++] = s;
        }
    }
    pthread_mutex_unlock(&l->mu);
    for (size_t i = 0; i < n; i++)
        push_to(l, use[i]);
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < n; i++)
        use[i]->users--;
    pthread_mutex_unlock(&l->mu);
}

static void on_unmounted(void *ctx, const crk_segment *seg)
{
    crk_ha *ha = ctx;
    crk_ha_entry e = {.kind = CRK_HA_UNMOUNT, .epoch = seg->epoch};
    pthread_mutex_lock(&ha->log->mu);
    append_locked(ha->log, &e);
    pthread_cond_broadcast(&ha->log->more);
    pthread_mutex_unlock(&ha->log->mu);
}

static void log_keys(crk_ha *ha, char *const *keys, size_t n)
{
    for (size_t i = 0; keys != NULL && i < n; i++)
        log_key(ha, keys[i]);
}

void crk_ha_log_request(crk_ha *ha, const void *request)
{
    const crp_rpc_req *req = request;
    const __typeof__(req->u) *u = &req->u;
    switch (req->op) {
    case CRP_RPC_MOUNT_SEGMENT:
        log_mount(ha, u->mount.segment.name);
        break;
    case CRP_RPC_REMOUNT_SEGMENT:
        for (size_t i = 0; i < u->remount.n_segments; i++)
            log_mount(ha, u->remount.segments[i].name);
        break;
    case CRP_RPC_PUT_START:
    case CRP_RPC_UPSERT_START:
        log_key(ha, u->put_start.key);
        break;
    case CRP_RPC_BATCH_PUT_START:
    case CRP_RPC_BATCH_UPSERT_START:
        log_keys(ha, u->batch_put_start.keys, u->batch_put_start.n_keys);
        break;
    case CRP_RPC_PUT_END:
    case CRP_RPC_UPSERT_END:
        /* A grant's end: the grant key's image (gone) first, so that a standby never holds
         * two objects on the same replicas; a leader lost between the two never acknowledged
         * the end, and the space is merely free there. */
        log_key(ha, req->grant_key);
        log_key(ha, u->owner_key.key);
        break;
    case CRP_RPC_PUT_REVOKE:
    case CRP_RPC_UPSERT_REVOKE:
        log_key(ha, u->owner_key.key);
        break;
    case CRP_RPC_BATCH_PUT_END:
    case CRP_RPC_BATCH_UPSERT_END:
    case CRP_RPC_BATCH_PUT_REVOKE:
    case CRP_RPC_BATCH_UPSERT_REVOKE:
        log_keys(ha, u->owner_keys.keys, u->owner_keys.n_keys);
        break;
    case CRP_RPC_REMOVE:
        log_key(ha, u->remove.key);
        break;
    case CRP_RPC_BATCH_REMOVE:
        log_keys(ha, u->batch_remove.keys, u->batch_remove.n_keys);
        break;
    case CRP_RPC_BATCH_REPLICA_CLEAR:
        log_keys(ha, u->replica_clear.keys, u->replica_clear.n_keys);
        break;
    default:
        break; /* unmounts and erasures (remove_by_regex, remove_all
                * included): logged by the service's hooks */
    }
    kick(ha);
}

/* --- ISR in etcd ---------------------------------------------------------------- */

static int publish_isr(crk_ha *ha)
{
    crk_ha_log *l = ha->log;
    char value[MAX_STANDBYS * 300 + 64];
    pthread_mutex_lock(&l->isr_mu);
    pthread_mutex_lock(&l->mu);
    uint64_t term = l->term;
    int n = snprintf(value, sizeof(value), "%" PRIu64 " ", term);
    for (sender *s = l->senders; s != NULL; s = s->next)
        if (s->synced && !s->drop && !s->dead && (size_t)n < sizeof(value))
            n += snprintf(value + n, sizeof(value) - (size_t)n, "%s,", s->addr);
    pthread_mutex_unlock(&l->mu);
    if ((size_t)n >= sizeof(value))
        n = (int)sizeof(value) - 1;
    crm_etcd_compare cmp = {.key = ha->view_key,
                            .target = CRM_ETCD_CMP_CREATE,
                            .result = CRM_ETCD_EQUAL,
                            .number = (int64_t)term};
    crm_etcd_op put = {
        .type = CRM_ETCD_OP_PUT, .key = ha->isr_key, .value = value, .value_len = (size_t)n};
    crm_etcd_txn_result res;
    int rc = crm_etcd_txn(ha->etcd, &cmp, 1, &put, 1, NULL, 0, &res);
    if (rc == 0) {
        if (!res.succeeded)
            rc =
                crb_error(CR_ERR_NOT_LEADER, "ha: ISR not written: term %" PRIu64 " is over", term);
        crm_etcd_txn_result_clear(&res);
    }
    pthread_mutex_unlock(&l->isr_mu);
    return rc;
}

/* --- senders --------------------------------------------------------------------- */

/* One frame in one system call (header and body as one TCP segment where
 * they fit: the standby wakes once per frame, not twice). */
static int send_frame(int fd, int type, uint64_t request_id, const uint8_t *body, size_t len)
{
    uint8_t hdr[CRP_HEADER_SIZE];
    crp_header h = {.version = CRP_VERSION,
                    .type = (uint8_t)type,
                    .body_len = (uint32_t)len,
                    .request_id = request_id};
    crp_header_encode(&h, hdr);
    uint64_t deadline = crb_now_ns() + 5000000000ull;
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)body, len}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = len > 0 ? 2 : 1};
    ssize_t n;
    do
        n = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        return crb_error(CR_ERR_CONNECTION, "ha: sending to a standby: %s", strerror(errno));
    size_t sent = n > 0 ? (size_t)n : 0;
    int rc = 0;
    if (sent < sizeof(hdr))
        rc = crb_write_full(fd, hdr + sent, sizeof(hdr) - sent, deadline);
    size_t body_sent = sent > sizeof(hdr) ? sent - sizeof(hdr) : 0;
    if (rc == 0 && body_sent < len)
        rc = crb_write_full(fd, body + body_sent, len - body_sent, deadline);
    return rc;
}

/* Snapshot entries (each u32 len + entry) encoded under the locks that
 * guard what they describe, sent after the lock is dropped in frames of at
 * most ~FRAME_BYTES. */
typedef struct snap {
    crk_ha_buf b;
    uint32_t count;
    int fd;
    int rc;
} snap;

static void snap_add(snap *sn, const crk_ha_entry *e)
{
    if (sn->rc != 0)
        return;
    size_t at = sn->b.len;
    uint8_t len4[4] = {0};
    if (sn->b.len + 4 > sn->b.cap) {
        size_t cap = sn->b.cap ? sn->b.cap * 2 : 65536;
        uint8_t *p = realloc(sn->b.data, cap);
        if (p == NULL) {
            sn->rc = crb_error(CR_ERR_NO_MEMORY, "ha snapshot buffer");
            return;
        }
        sn->b.data = p;
        sn->b.cap = cap;
    }
    memcpy(sn->b.data + at, len4, 4);
    sn->b.len += 4;
    if (crk_ha_entry_encode(e, &sn->b) < 0) {
        sn->b.len = at;
        return;
    }
    uint32_t n = (uint32_t)(sn->b.len - at - 4);
    for (int i = 0; i < 4; i++)
        sn->b.data[at + (size_t)i] = (uint8_t)(n >> (8 * i));
    sn->count++;
}

/* Send what accumulated, split at entry boundaries. */
static void snap_flush(snap *sn)
{
    uint8_t *frame = NULL;
    size_t off = 0;
    while (sn->rc == 0 && off < sn->b.len) {
        size_t at = off;
        uint32_t count = 0;
        while (at < sn->b.len && (count == 0 || at - off < FRAME_BYTES)) {
            uint32_t n = 0;
            for (int i = 0; i < 4; i++)
                n |= (uint32_t)sn->b.data[at + (size_t)i] << (8 * i);
            at += 4 + n;
            count++;
        }
        size_t bytes = at - off;
        uint8_t *p = realloc(frame, bytes + 12);
        if (p == NULL) {
            sn->rc = crb_error(CR_ERR_NO_MEMORY, "ha snapshot frame");
            break;
        }
        frame = p;
        memset(frame, 0, 8);
        for (int i = 0; i < 4; i++)
            frame[8 + i] = (uint8_t)(count >> (8 * i));
        memcpy(frame + 12, sn->b.data + off, bytes);
        sn->rc = send_frame(sn->fd, CRP_REPL_DATA, 0, frame, bytes + 12);
        off = at;
    }
    free(frame);
    sn->b.len = 0;
    sn->count = 0;
}

static void snap_disk(void *ctx, const char *key, size_t len, crk_client_id holder,
                      uint64_t version, uint64_t size)
{
    crk_ha_entry e = {.kind = CRK_HA_DISK,
                      .key = key,
                      .key_len = len,
                      .flags = CRK_HA_F_ON_DISK,
                      .owner_hi = holder.hi,
                      .owner_lo = holder.lo,
                      .disk_version = version,
                      .size = size};
    snap_add(ctx, &e);
}

static int send_snapshot(crk_ha *ha, sender *sd)
{
    crk_service *s = ha->cfg.svc;
    snap sn = {.fd = sd->fd};
    crk_ha_entry e = {.kind = CRK_HA_RESET};
    snap_add(&sn, &e);
    pthread_rwlock_rdlock(&s->seg_lock);
    for (size_t i = 0; i < s->nsegs; i++) {
        mount_image(s->segs[i], &e);
        snap_add(&sn, &e);
    }
    pthread_rwlock_unlock(&s->seg_lock);
    snap_flush(&sn);
    uint64_t now = crb_now_ms();
    for (size_t k = 0; k < CRK_NUM_SHARDS && sn.rc == 0; k++) {
        /* A whole shard under its lock: dropping it midway could let a
         * deletion shift a key past the scan. */
        crk_shard *sh = &s->shards[k];
        pthread_mutex_lock(&sh->mu);
        for (size_t i = 0; i < sh->nslots; i++) {
            crk_object *o = sh->slots[i].obj;
            if (o == NULL)
                continue;
            key_image(s, o, o->key, o->key_len, &e, now);
            snap_add(&sn, &e);
        }
        pthread_mutex_unlock(&sh->mu);
        snap_flush(&sn);
    }
    if (sn.rc == 0) {
        crk_off_each_disk(s, snap_disk, &sn);
        snap_flush(&sn);
    }
    pthread_mutex_lock(&ha->log->mu);
    e = (crk_ha_entry){.kind = CRK_HA_SNAP_END, .end_seq = ha->log->head};
    sd->snap_end = ha->log->head;
    sd->snap_done = true;
    pthread_mutex_unlock(&ha->log->mu);
    snap_add(&sn, &e);
    snap_flush(&sn);
    int rc = sn.rc;
    crk_ha_buf_free(&sn.b);
    return rc;
}

/* Take the next frame (whole entries from pos, up to FRAME_BYTES, at
 * least one) into sd->out (wmu and log_mu held). False when there is
 * nothing to send or no memory (then sd is dead). */
static bool next_frame_locked(crk_ha_log *l, sender *sd)
{
    if (!sendable_locked(l, sd))
        return false;
    size_t from = (size_t)(sd->pos - l->base_off), at = from;
    uint32_t count = 0;
    while (at < l->buf.len && (count == 0 || at - from < FRAME_BYTES)) {
        uint32_t n = 0;
        for (int i = 0; i < 4; i++)
            n |= (uint32_t)l->buf.data[at + (size_t)i] << (8 * i);
        at += 4 + n;
        count++;
    }
    size_t bytes = at - from, total = CRP_HEADER_SIZE + 12 + bytes;
    if (sd->out_cap < total) {
        uint8_t *p = realloc(sd->out, total);
        if (p == NULL) {
            crb_log(CRB_LOG_ERROR, "ha: out of memory framing for %s; dropping it", sd->addr);
            sd->dead = true;
            if (sd->synced)
                sd->drop = true;
            shutdown(sd->fd, SHUT_RDWR);
            return false;
        }
        sd->out = p;
        sd->out_cap = total;
    }
    uint64_t first = sd->pos_seq + 1;
    crp_header h = {.version = CRP_VERSION,
                    .type = CRP_REPL_DATA,
                    .body_len = (uint32_t)(12 + bytes),
                    .request_id = first + count - 1};
    crp_header_encode(&h, sd->out);
    uint8_t *body = sd->out + CRP_HEADER_SIZE;
    for (int i = 0; i < 8; i++)
        body[i] = (uint8_t)(first >> (8 * i));
    for (int i = 0; i < 4; i++)
        body[8 + i] = (uint8_t)(count >> (8 * i));
    memcpy(body + 12, l->buf.data + from, bytes);
    sd->pos += bytes;
    sd->pos_seq += count;
    atomic_fetch_add_explicit(&l->frames_sent, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->entries_sent, count, memory_order_relaxed);
    sd->out_off = 0;
    sd->out_len = total;
    trim_locked(l);
    return true;
}

static void kill_sender_locked(crk_ha_log *l, sender *sd)
{
    sd->dead = true;
    if (sd->synced)
        sd->drop = true; /* the monitor takes it out of the ISR */
    shutdown(sd->fd, SHUT_RDWR);
    pthread_cond_broadcast(&l->acked);
}

/* Send what the log holds for sd (wmu held). may_block: the sender
 * thread, which finishes a frame the socket did not take at once; any other
 * thread leaves that rest to it (returns false: wake the sender). */
static bool drain_wlocked(crk_ha_log *l, sender *sd, bool may_block)
{
    for (;;) {
        if (sd->out_off == sd->out_len) {
            pthread_mutex_lock(&l->mu);
            bool more = next_frame_locked(l, sd);
            pthread_mutex_unlock(&l->mu);
            if (!more)
                return true;
        }
        ssize_t n;
        do
            n = send(sd->fd, sd->out + sd->out_off, sd->out_len - sd->out_off,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            goto broken;
        sd->out_off += n > 0 ? (size_t)n : 0;
        if (sd->out_off == sd->out_len)
            continue;
        if (!may_block)
            return false;
        if (crb_write_full(sd->fd, sd->out + sd->out_off, sd->out_len - sd->out_off,
                           crb_now_ns() + 5000000000ull) < 0)
            goto broken;
        sd->out_off = sd->out_len;
    }
broken:
    pthread_mutex_lock(&l->mu);
    kill_sender_locked(l, sd);
    pthread_mutex_unlock(&l->mu);
    sd->out_off = sd->out_len = 0;
    return true;
}

/* The thread that logged a change sends it (when no one else is sending to
 * sd right now; whoever is will see it: it looks again after letting go). */
static void push_to(crk_ha_log *l, sender *sd)
{
    for (;;) {
        if (pthread_mutex_trylock(&sd->wmu) != 0)
            return;
        bool done = drain_wlocked(l, sd, false);
        pthread_mutex_unlock(&sd->wmu);
        pthread_mutex_lock(&l->mu);
        bool again = done && sendable_locked(l, sd);
        if (!done) {
            sd->rest = true;
            pthread_cond_broadcast(&l->more); /* the sender finishes that frame */
        }
        pthread_mutex_unlock(&l->mu);
        if (!again)
            return;
    }
}

static void *sender_main(void *arg)
{
    sender *sd = arg;
    pthread_setname_np(pthread_self(), "crk-ha-send"); /* (not the I/O thread's name) */
    crk_ha *ha = sd->ha;
    crk_ha_log *l = ha->log;
    int rc = sd->resumed ? 0 : send_snapshot(ha, sd);
    if (rc == 0) {
        /* An empty sequenced frame: tells the standby where the stream
         * starts (so it can acknowledge SNAP_END even if nothing follows). */
        uint8_t start[12] = {0};
        pthread_mutex_lock(&l->mu);
        uint64_t first = sd->pos_seq + 1;
        pthread_mutex_unlock(&l->mu);
        for (int i = 0; i < 8; i++)
            start[i] = (uint8_t)(first >> (8 * i));
        rc = send_frame(sd->fd, CRP_REPL_DATA, first - 1, start, sizeof(start));
    }
    pthread_mutex_lock(&l->mu);
    sd->streaming = rc == 0;
    while (rc == 0 && !sd->dead && l->leading) {
        if (!sendable_locked(l, sd) && !sd->rest) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += 100000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&l->more, &l->mu, &ts);
            continue;
        }
        sd->rest = false;
        pthread_mutex_unlock(&l->mu);
        pthread_mutex_lock(&sd->wmu);
        (void)drain_wlocked(l, sd, true);
        pthread_mutex_unlock(&sd->wmu);
        pthread_mutex_lock(&l->mu);
    }
    kill_sender_locked(l, sd);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/*
 * A standby's acks (its socket readable), on the RPC I/O thread whose loop
 * watches it. Acks are bare headers; take every one the socket holds and act
 * on the highest (one recompute for a burst). When the commit index moves,
 * recompute_locked tells the RPC server, which has this thread release its
 * own held replies after this pass (no wake-up) and wakes only the other
 * threads that hold replies. The ISR write a join needs (an etcd round trip)
 * is left to the monitor: this thread does not wait for etcd.
 */
static void on_ack(crb_io *io, uint32_t events)
{
    sender *sd = (sender *)((char *)io - offsetof(sender, ack_io));
    crk_ha_log *l = sd->ha->log;
    (void)events; /* a hang-up or error shows as recv's 0 or failure */
    bool closed = false;
    uint64_t top = 0;
    for (;;) {
        size_t room = sizeof(sd->ack_in) - sd->ack_have;
        ssize_t got = recv(io->fd, sd->ack_in + sd->ack_have, room, MSG_DONTWAIT);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (got <= 0) {
            closed = true;
            break;
        }
        sd->ack_have += (size_t)got;
        size_t at = 0;
        for (; sd->ack_have - at >= CRP_HEADER_SIZE; at += CRP_HEADER_SIZE) {
            crp_header h;
            if (crp_header_decode(sd->ack_in + at, &h) < 0 || h.type != CRP_REPL_ACK ||
                h.body_len != 0) {
                closed = true;
                break;
            }
            if (h.request_id > top)
                top = h.request_id;
        }
        if (closed)
            break;
        memmove(sd->ack_in, sd->ack_in + at, sd->ack_have - at);
        sd->ack_have -= at;
        if ((size_t)got < room)
            break; /* the socket is drained (level-triggered: more comes as an event) */
    }
    pthread_mutex_lock(&l->mu);
    if (top > sd->pos_seq) {
        /* It acknowledges what it was never sent: not a standby to count on
         * (it would join the ISR holding nothing). */
        crb_log(CRB_LOG_WARN,
                "ha: standby %s acknowledged %" PRIu64 ", past %" PRIu64 " sent; dropping it",
                sd->addr, top, sd->pos_seq);
        closed = true;
        top = 0;
    }
    if (top > sd->acked) {
        sd->acked = top;
        sd->last_ack_ms = crb_now_ms();
        atomic_fetch_add_explicit(&l->ack_reads, 1, memory_order_relaxed);
    }
    if (!closed && sd->snap_done && !sd->synced && !sd->dead && sd->acked >= sd->snap_end) {
        /* Counted first (writes wait for it from now on), then published
         * (by the monitor): an ISR member in etcd always has every
         * acknowledged write. */
        sd->synced = true;
        sd->join_pending = true;
    }
    if (sd->synced)
        recompute_locked(l);
    if (closed) {
        crb_loop_del(io);
        sd->ack_on_loop = false; /* reap may free sd from now on */
        kill_sender_locked(l, sd);
        pthread_cond_broadcast(&l->more);
    }
    pthread_mutex_unlock(&l->mu);
}

void crk_ha_acks_detach(crk_ha *ha)
{
    crk_ha_log *l = ha->log;
    pthread_mutex_lock(&l->mu);
    for (sender *s = l->senders; s != NULL; s = s->next) {
        if (!s->ack_on_loop)
            continue;
        crb_loop_del(&s->ack_io); /* its loop is stopped: no on_ack runs */
        s->ack_on_loop = false;
        kill_sender_locked(l, s);
    }
    pthread_cond_broadcast(&l->more);
    pthread_mutex_unlock(&l->mu);
}

/* Publish the ISR for the standbys counted in it (join_pending). On failure
 * they are uncounted again and rejoin at a later ack, or (an idle stream
 * sends no acks) when the monitor retries. Monitor thread only. */
static void publish_joins(crk_ha *ha, uint64_t now, uint64_t *warned)
{
    crk_ha_log *l = ha->log;
    /* Those pending now are in the value publish_isr reads after this; one
     * counted meanwhile stays pending for the monitor's next round. */
    pthread_mutex_lock(&l->mu);
    for (sender *s = l->senders; s != NULL; s = s->next) {
        s->joining = s->join_pending;
        s->join_pending = false;
    }
    pthread_mutex_unlock(&l->mu);
    int rc = publish_isr(ha);
    char joined[MAX_STANDBYS][300];
    size_t n = 0;
    pthread_mutex_lock(&l->mu);
    for (sender *s = l->senders; s != NULL; s = s->next) {
        if (!s->joining)
            continue;
        s->joining = false;
        if (rc < 0 && s->synced && !s->drop) {
            s->synced = false;
            s->snap_end = l->head; /* try again at a later ack */
            s->join_retry_ms = now + 200;
        } else if (rc == 0 && !s->dead && n < MAX_STANDBYS) {
            snprintf(joined[n++], sizeof(joined[0]), "%s", s->addr);
        }
    }
    if (rc < 0)
        recompute_locked(l);
    pthread_mutex_unlock(&l->mu);
    if (rc < 0 && now - *warned > 1000) {
        crb_log(CRB_LOG_WARN, "ha: publishing the ISR for a standby in sync: %s",
                cr_last_error_message());
        *warned = now;
    }
    for (size_t i = 0; i < n; i++)
        crb_log(CRB_LOG_INFO, "ha: standby %s is in sync", joined[i]);
}

/* Drop standbys that stopped acknowledging, and take dropped or dead ones
 * out of the ISR: published in etcd first, then uncounted (so the commit
 * index moves on without them only once no election can pick them). */
static void *monitor_main(void *arg)
{
    pthread_setname_np(pthread_self(), "crk-ha-monitor");
    crk_ha *ha = arg;
    crk_ha_log *l = ha->log;
    uint64_t warned = 0, join_warned = 0;
    while (!atomic_load(&l->monitor_stop)) {
        usleep(10000);
        uint64_t now = crb_now_ms();
        bool need = false, join = false, rejoin = false;
        pthread_mutex_lock(&l->mu);
        for (sender *s = l->senders; s != NULL; s = s->next) {
            if (s->join_retry_ms != 0 && now >= s->join_retry_ms && !s->synced && !s->dead &&
                s->snap_done && s->acked >= s->snap_end) {
                s->synced = true; /* counted first, published below */
                s->join_pending = true;
                rejoin = true;
            }
            if (s->join_pending)
                s->join_retry_ms = 0;
            join |= s->join_pending;
            if (s->acked >= l->head)
                s->last_ack_ms = now;
            /* (an ack may have moved last_ack_ms past `now` meanwhile) */
            if (s->synced && !s->drop && now > s->last_ack_ms &&
                now - s->last_ack_ms > ha->cfg.repl_timeout_ms) {
                crb_log(CRB_LOG_WARN,
                        "ha: standby %s acknowledged nothing for %" PRIu64
                        " ms; dropping it from the in-sync set",
                        s->addr, ha->cfg.repl_timeout_ms);
                s->drop = true;
                s->dead = true;
                shutdown(s->fd, SHUT_RDWR);
                l->not_replicated++;
            }
            if (s->synced && s->drop)
                need = true;
        }
        if (rejoin)
            recompute_locked(l);
        pthread_mutex_unlock(&l->mu);
        if (join)
            publish_joins(ha, now, &join_warned);
        if (!need)
            continue;
        if (publish_isr(ha) < 0) {
            if (now - warned > 1000) {
                crb_log(CRB_LOG_WARN, "ha: cannot shrink the ISR (%s); changes wait",
                        cr_last_error_message());
                warned = now;
            }
            continue;
        }
        pthread_mutex_lock(&l->mu);
        for (sender *s = l->senders; s != NULL; s = s->next)
            if (s->synced && s->drop)
                s->synced = false;
        recompute_locked(l);
        pthread_mutex_unlock(&l->mu);
    }
    return NULL;
}

/* Join and free the senders that are dead (log_mu NOT held). */
static void reap(crk_ha_log *l, bool all)
{
    for (;;) {
        pthread_mutex_lock(&l->mu);
        sender **pp = &l->senders, *victim = NULL;
        bool busy = false;
        while (*pp != NULL) {
            if (((*pp)->users > 0 || (*pp)->ack_on_loop) && ((*pp)->dead || all)) {
                /* a logging thread is leaving it (push_to), or its ack
                 * reader has yet to see the shutdown (on_ack) */
                busy = true;
                if (all)
                    (*pp)->dead = true;
                shutdown((*pp)->fd, SHUT_RDWR);
            } else if (((*pp)->dead && !(*pp)->synced) || all) {
                victim = *pp;
                victim->dead = true;
                shutdown(victim->fd, SHUT_RDWR);
                *pp = victim->next;
                l->nsenders--;
                break;
            }
            pp = &(*pp)->next;
        }
        pthread_cond_broadcast(&l->more);
        pthread_mutex_unlock(&l->mu);
        if (victim == NULL && busy && all) {
            usleep(1000); /* its user is about to let go */
            continue;
        }
        if (victim == NULL)
            return;
        if (victim->started_sender)
            pthread_join(victim->thread, NULL);
        close(victim->fd);
        pthread_mutex_destroy(&victim->wmu);
        free(victim->out);
        free(victim);
    }
}

void crk_ha_take_standby(void *arg, int fd, const uint8_t *body, size_t len, crb_loop *acks)
{
    crk_ha *ha = arg;
    crk_ha_log *l = ha->log;
    reap(l, false);
    sender *sd = calloc(1, sizeof(*sd));
    if (sd == NULL) {
        close(fd);
        return;
    }
    sd->ha = ha;
    sd->fd = fd;
    pthread_mutex_init(&sd->wmu, NULL);
    /* body: "term address [applied]" (ha_standby.c): applied, when the
     * standby holds this term's state up to that sequence number */
    char text[400];
    size_t n = len < sizeof(text) - 1 ? len : sizeof(text) - 1;
    memcpy(text, body, n);
    text[n] = '\0';
    uint64_t term = strtoull(text, NULL, 10), applied = 0;
    const char *sp = strchr(text, ' ');
    const char *sp2 = sp != NULL ? strchr(sp + 1, ' ') : NULL;
    if (sp2 != NULL)
        applied = strtoull(sp2 + 1, NULL, 10);
    snprintf(sd->addr, sizeof(sd->addr), "%.*s",
             sp == NULL    ? 1
             : sp2 != NULL ? (int)(sp2 - sp - 1)
                           : 299,
             sp != NULL ? sp + 1 : "?");
    pthread_mutex_lock(&l->mu);
    if (!l->leading || l->nsenders >= MAX_STANDBYS) {
        crb_log(CRB_LOG_INFO, "ha: standby %s refused: %s", sd->addr,
                l->leading ? "too many standbys" : "not leading");
        pthread_mutex_unlock(&l->mu);
        close(fd);
        pthread_mutex_destroy(&sd->wmu);
        free(sd);
        return;
    }
    uint64_t from = 0;
    if (applied != 0 && term == l->term && log_find_locked(l, applied, &from)) {
        /* Its copy is this term's up to `applied`: the rest of the log, no
         * snapshot; in sync once it acknowledged what the log holds now. */
        sd->pos = from;
        sd->pos_seq = applied;
        sd->resumed = true;
        sd->snap_end = l->head;
        sd->snap_done = true;
        l->resumes++;
    } else {
        sd->pos = log_end(l);
        sd->pos_seq = l->head;
        l->snapshots++;
    }
    sd->next = l->senders;
    l->senders = sd;
    l->nsenders++;
    sd->started_sender = pthread_create(&sd->thread, NULL, sender_main, sd) == 0;
    /* (on_ack runs on this very thread, so not before this returns) */
    sd->ack_io.fd = fd;
    sd->ack_io.on_event = on_ack;
    sd->ack_on_loop =
        sd->started_sender && crb_loop_add(acks, &sd->ack_io, EPOLLIN | EPOLLRDHUP) == 0;
    if (!sd->ack_on_loop) {
        sd->dead = true;
        shutdown(fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&l->mu);
    crb_log(CRB_LOG_INFO, "ha: standby %s subscribed; %s", sd->addr,
            sd->resumed ? "resuming from the log" : "sending a snapshot");
}

/* --- lifecycle and the durability wait ---------------------------------------------- */

int crk_ha_log_create(crk_ha *ha)
{
    crk_ha_log *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ha log");
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->isr_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->more, &ca);
    pthread_cond_init(&l->acked, &ca);
    pthread_condattr_destroy(&ca);
    ha->log = l;
    ha->cfg.svc->ha_ctx = ha;
    ha->cfg.svc->ha_unmounted = on_unmounted;
    ha->cfg.svc->ha_erased = on_erased;
    ha->cfg.svc->ha_disk = on_disk;
    if (pthread_create(&l->monitor, NULL, monitor_main, ha) != 0) {
        ha->cfg.svc->ha_unmounted = NULL;
        ha->cfg.svc->ha_erased = NULL;
        ha->cfg.svc->ha_disk = NULL;
        ha->log = NULL;
        pthread_cond_destroy(&l->more);
        pthread_cond_destroy(&l->acked);
        pthread_mutex_destroy(&l->isr_mu);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return crb_error(CR_ERR_SYSTEM, "ha: starting the replication monitor");
    }
    l->monitor_running = true;
    return 0;
}

void crk_ha_log_destroy(crk_ha *ha)
{
    crk_ha_log *l = ha->log;
    if (l == NULL)
        return;
    atomic_store(&l->monitor_stop, true);
    if (l->monitor_running)
        pthread_join(l->monitor, NULL);
    crk_ha_log_end(ha);
    pthread_cond_destroy(&l->more);
    pthread_cond_destroy(&l->acked);
    pthread_mutex_destroy(&l->isr_mu);
    pthread_mutex_destroy(&l->mu);
    crk_ha_buf_free(&l->buf);
    free(l);
    ha->log = NULL;
}

void crk_ha_log_begin(crk_ha *ha, uint64_t term)
{
    pthread_mutex_lock(&ha->log->mu);
    ha->log->leading = true;
    ha->log->term = term;
    pthread_mutex_unlock(&ha->log->mu);
    if (publish_isr(ha) < 0) /* this term's ISR: nobody yet */
        crb_log(CRB_LOG_WARN, "ha: publishing the ISR: %s", cr_last_error_message());
}

void crk_ha_log_end(crk_ha *ha)
{
    if (ha->log == NULL)
        return;
    pthread_mutex_lock(&ha->log->mu);
    ha->log->leading = false;
    pthread_mutex_unlock(&ha->log->mu);
    reap(ha->log, true);
}

void crk_ha_log_status(crk_ha *ha, crk_ha_status *st)
{
    crk_ha_log *l = ha->log;
    pthread_mutex_lock(&l->mu);
    st->head_seq = l->head;
    st->commit_seq = atomic_load(&l->counted) ? atomic_load(&l->commit) : l->head;
    st->standbys = 0;
    for (sender *s = l->senders; s != NULL; s = s->next) {
        if (s->dead)
            continue;
        st->standbys++;
        uint64_t lag = l->head > s->acked ? l->head - s->acked : 0;
        if (lag > st->lag_entries)
            st->lag_entries = lag;
    }
    st->not_replicated = l->not_replicated;
    st->resumes = l->resumes;
    st->snapshots = l->snapshots;
    st->in_sync = atomic_load(&l->counted);
    pthread_mutex_unlock(&l->mu);
    st->frames = atomic_load(&l->frames_sent);
    st->entries = atomic_load(&l->entries_sent);
    st->acks = atomic_load(&l->ack_reads);
    st->commits = atomic_load(&l->commit_moves);
    st->held_replies = atomic_load(&l->held_replies);
    st->held_ns = atomic_load(&l->held_ns);
}

void crk_ha_note_held(crk_ha *ha, uint64_t ns)
{
    atomic_fetch_add_explicit(&ha->log->held_replies, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ha->log->held_ns, ns, memory_order_relaxed);
}

uint64_t crk_ha_committed(crk_ha *ha)
{
    crk_ha_log *l = ha->log;
    if (ha->cfg.sync_replicas == 0 || atomic_load(&l->counted) == 0)
        return UINT64_MAX;
    return atomic_load(&l->commit);
}

uint64_t crk_ha_log_head(crk_ha *ha)
{
    pthread_mutex_lock(&ha->log->mu);
    uint64_t h = ha->log->head;
    pthread_mutex_unlock(&ha->log->mu);
    return h;
}

void crk_ha_set_notify(crk_ha *ha, void (*fn)(void *), void *ctx)
{
    pthread_mutex_lock(&ha->log->mu);
    ha->log->notify = fn;
    ha->log->notify_ctx = ctx;
    pthread_mutex_unlock(&ha->log->mu);
}

int crk_ha_wait_durable(crk_ha *ha)
{
    crk_ha_log *l = ha->log;
    uint64_t target = crk_ha_log_head(ha);
    /* The monitor drops a silent standby after repl_timeout_ms; give it
     * that and the ISR write to etcd. */
    uint64_t deadline = crb_now_ns() + (ha->cfg.repl_timeout_ms + 2000) * 1000000ull;
    pthread_mutex_lock(&l->mu);
    while (crk_ha_committed(ha) < target) {
        struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
        if (pthread_cond_timedwait(&l->acked, &l->mu, &ts) != 0 && crk_ha_committed(ha) < target) {
            pthread_mutex_unlock(&l->mu);
            return crb_error(CR_ERR_NOT_REPLICATED,
                             "change %" PRIu64 " reached no in-sync standby within %" PRIu64 " ms",
                             target, ha->cfg.repl_timeout_ms + 2000);
        }
    }
    pthread_mutex_unlock(&l->mu);
    return 0;
}

bool crk_ha_op_mutates(unsigned op)
{
    /* OFFLOAD_HEARTBEAT reports disk copies made (logged by master/offload.c's
     * hook); its reply, which may tell the holder to drop a copy, goes out
     * once the standbys know. */
    return (op >= 10 && op < 20) || (op >= 30 && op < 60) || op == CRP_RPC_OFFLOAD_HEARTBEAT;
}
