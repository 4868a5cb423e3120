/*
 * clients.c - the master's client table: heartbeats (ping), registration by
 * mount/remount, and expiry of silent clients.
 *
 * Clients live in a small chained hash table under clients_lock. A client is
 * created by mount/remount and kept alive by pings; crk_expire_clients (from
 * the tick) removes the ones silent for client_ttl_ms: under clients_lock it
 * unlinks them and, under seg_lock, marks their segments unmounting (so a
 * racing remount sees "unmounting" instead of a segment about to vanish);
 * then, holding no global lock, it finishes each unmount (segments.c), which
 * scans the shards one at a time.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "master/internal.h"
#include "master/mem.h"

/* --- clients ------------------------------------------------------------------ */

static size_t client_bucket(const crk_service *s, crk_client_id id)
{
    return (size_t)crk_key_hash(s, &id, sizeof(id)) & (s->cl_nbuckets - 1);
}

static crk_client *client_find_locked(crk_service *s, crk_client_id id)
{
    for (crk_client *c = s->cl_buckets[client_bucket(s, id)]; c; c = c->next)
        if (crk_id_eq(c->id, id))
            return c;
    return NULL;
}

static void client_grow_locked(crk_service *s)
{
    size_t nb = s->cl_nbuckets * 2;
    crk_client **b = crk_calloc(nb, sizeof(*b));
    if (!b)
        return; /* keep the longer chains */
    crk_client **old = s->cl_buckets;
    size_t old_n = s->cl_nbuckets;
    s->cl_buckets = b;
    s->cl_nbuckets = nb;
    for (size_t i = 0; i < old_n; i++) {
        crk_client *c = old[i];
        while (c) {
            crk_client *next = c->next;
            size_t j = client_bucket(s, c->id);
            c->next = b[j];
            b[j] = c;
            c = next;
        }
    }
    crk_free(old);
}

int crk_client_touch_locked(crk_service *s, crk_client_id id, uint64_t now, crk_client **out)
{
    crk_client *c = client_find_locked(s, id);
    if (!c) {
        c = crk_calloc(1, sizeof(*c));
        if (!c)
            return crb_error(CR_ERR_NO_MEMORY, "master: new client record");
        c->id = id;
        size_t b = client_bucket(s, id);
        c->next = s->cl_buckets[b];
        s->cl_buckets[b] = c;
        s->nclients++;
        crb_log(CRB_LOG_INFO, "master: client %016llx%016llx joined", (unsigned long long)id.hi,
                (unsigned long long)id.lo);
        if (s->nclients > s->cl_nbuckets)
            client_grow_locked(s);
    }
    if (now > c->last_seen)
        c->last_seen = now;
    if (out)
        *out = c;
    return 0;
}

int crk_heartbeat(crk_service *s, crk_client_id client, uint64_t now_ms, crk_heartbeat_info *out)
{
    crk_add(s->c.requests[CRK_OP_PING], 1);
    if (!crk_id_valid(client)) {
        crk_add(s->c.failures[CRK_OP_PING], 1);
        return crb_error(CR_ILLEGAL_CLIENT, "ping: the zero client id is not valid");
    }
    crk_heartbeat_info hi = {CRK_CLIENT_NEED_REMOUNT, 0};
    pthread_mutex_lock(&s->clients_lock);
    crk_client *c = client_find_locked(s, client);
    if (c) {
        if (now_ms > c->last_seen)
            c->last_seen = now_ms;
        hi.status = c->need_remount ? CRK_CLIENT_NEED_REMOUNT : CRK_CLIENT_OK;
        hi.fenced_ms = c->fence_until > now_ms ? c->fence_until - now_ms : 0;
    }
    pthread_mutex_unlock(&s->clients_lock);
    if (out)
        *out = hi;
    return 0;
}

int crk_ping(crk_service *s, crk_client_id client, uint64_t now_ms, int *status_out)
{
    crk_heartbeat_info hi;
    int rc = crk_heartbeat(s, client, now_ms, &hi);
    if (rc == 0 && status_out)
        *status_out = hi.status;
    return rc;
}

/*
 * Expire silent clients. Phase 1 (clients_lock, then seg_lock): unlink them
 * and mark their segments unmounting. Phase 2 (no global lock): finish the
 * unmounts.
 */
int crk_expire_clients(crk_service *s, uint64_t now)
{
    int rc = 0;
    crk_segment **dying = NULL;
    size_t ndying = 0;

    pthread_mutex_lock(&s->clients_lock);
    size_t nexp = 0;
    for (size_t b = 0; b < s->cl_nbuckets; b++)
        for (crk_client *c = s->cl_buckets[b]; c; c = c->next)
            if (crk_elapsed(now, c->last_seen) >= s->cfg.client_ttl_ms)
                nexp++;
    if (nexp == 0) {
        pthread_mutex_unlock(&s->clients_lock);
        return 0;
    }
    crk_client_id *ids = crk_malloc(nexp * sizeof(*ids));
    if (!ids) {
        pthread_mutex_unlock(&s->clients_lock);
        return crb_error(CR_ERR_NO_MEMORY, "client expiry: %zu ids", nexp);
    }
    size_t n = 0;
    for (size_t b = 0; b < s->cl_nbuckets; b++) {
        crk_client **pp = &s->cl_buckets[b];
        while (*pp) {
            crk_client *c = *pp;
            if (crk_elapsed(now, c->last_seen) >= s->cfg.client_ttl_ms) {
                *pp = c->next;
                ids[n++] = c->id;
                s->nclients--;
                crb_log(CRB_LOG_WARN, "master: client %016llx%016llx expired (silent %llu ms)",
                        (unsigned long long)c->id.hi, (unsigned long long)c->id.lo,
                        (unsigned long long)crk_elapsed(now, c->last_seen));
                crk_free(c);
            } else {
                pp = &c->next;
            }
        }
    }
    crk_add(s->c.clients_expired, n);

    pthread_rwlock_wrlock(&s->seg_lock);
    if (s->nsegs > 0) {
        dying = crk_malloc(s->nsegs * sizeof(*dying));
        if (!dying)
            rc = crb_error(CR_ERR_NO_MEMORY, "client expiry: segment list");
    }
    for (size_t i = 0; dying && i < s->nsegs; i++) {
        crk_segment *seg = s->segs[i];
        for (size_t k = 0; k < n; k++) {
            if (crk_id_eq(seg->owner, ids[k])) {
                if (crk_unmount_begin_locked(s, seg) == 0)
                    dying[ndying++] = seg;
                break;
            }
        }
    }
    pthread_rwlock_unlock(&s->seg_lock);
    pthread_mutex_unlock(&s->clients_lock);

    for (size_t i = 0; i < ndying; i++) {
        crb_log(CRB_LOG_INFO, "master: unmounting segment '%s' of an expired client",
                dying[i]->name);
        if (s->on_expired)
            s->on_expired(s->on_expired_ctx, dying[i]->name);
        crk_unmount_finish(s, dying[i], now);
    }
    crk_free(dying);
    crk_free(ids);
    return rc;
}

void crk_clients_destroy(crk_service *s)
{
    for (size_t b = 0; b < s->cl_nbuckets; b++) {
        crk_client *c = s->cl_buckets[b];
        while (c) {
            crk_client *next = c->next;
            crk_free(c);
            c = next;
        }
    }
    crk_free(s->cl_buckets);
    s->cl_buckets = NULL;
}
