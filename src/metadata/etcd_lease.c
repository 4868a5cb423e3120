/*
 * etcd_lease.c - leases: grant, a keepalive thread per lease, loss
 * detection, revoke.
 *
 * The keepalive thread sends /v3/lease/keepalive every TTL/3 (counted from
 * the last acknowledged send). A failed keepalive is retried every
 * min(TTL/10, 500 ms) (at least 100 ms). Each acknowledgement moves the
 * lease's local expiry to send time + the TTL etcd answered: etcd counts the
 * TTL from when it received the request, which is later, so the local expiry
 * is never later than etcd's. The lease is lost, for good, when etcd answers
 * TTL 0 or "lease not found" (expired, revoked by someone else, data lost)
 * or when the local expiry passes without a newer acknowledgement; the
 * owner's callback then runs once on the keepalive thread. No keepalive
 * request may outlive the local expiry, so loss is reported on time even
 * when etcd hangs.
 *
 * Locking: lease->lock guards status, valid_until_ms and stopping; it is
 * never held across a request or the callback. The client's leases_lock
 * guards its list of held leases (for crm_etcd_close).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "metadata/etcd_codec.h"
#include "metadata/etcd_internal.h"

#define MAX_TTL_S 86400

struct crm_etcd_lease {
    crm_etcd *client;
    int64_t id;
    int ttl_s;
    crm_etcd_lease_lost_fn on_lost;
    void *arg;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stopping;
    int status;              /* 0 alive, CR_ERR_LEASE_LOST */
    uint64_t valid_until_ms; /* local expiry */
    uint64_t last_ack_send_ms;
    pthread_t thread;
    struct crm_etcd_lease *next; /* client's list */
};

static int64_t keepalive_once(crm_etcd_lease *l, uint64_t deadline_ms, int *rc_out)
{
    char what[64];
    snprintf(what, sizeof(what), "keepalive of lease %" PRId64, l->id);
    etcd_reply reply = {0};
    int grpc = 0;
    int rc = crm_etcd_call(l->client, "/v3/lease/keepalive", crm_etcd_json_lease_id(l->id),
                           deadline_ms, what, &reply, &grpc);
    int64_t id = 0, ttl = -1;
    if (rc == 0) {
        rc = crm_etcd_decode_keepalive(reply.body.data, reply.body.len, &id, &ttl);
        free(reply.body.data);
        if (rc == 0 && ttl > 0 && id != l->id)
            rc = crb_error(CR_ERR_METADATA_MALFORMED,
                           "etcd keepalive of lease %" PRId64 " answered for lease %" PRId64, l->id,
                           id);
    } else if (rc == CR_ETCD_OPERATION_ERROR && grpc == CRM_GRPC_NOT_FOUND) {
        rc = 0;
        ttl = 0;
    }
    *rc_out = rc;
    return rc == 0 ? ttl : -1;
}

static void *keepalive_thread(void *arg)
{
    crm_etcd_lease *l = arg;
    uint64_t period_ms = (uint64_t)l->ttl_s * 1000 / 3;
    uint64_t retry_ms = (uint64_t)l->ttl_s * 100;
    if (retry_ms > 500)
        retry_ms = 500;
    if (retry_ms < 100)
        retry_ms = 100;
    uint64_t next_ms = l->last_ack_send_ms + period_ms;
    pthread_mutex_lock(&l->lock);
    while (!l->stopping) {
        uint64_t now = crb_now_ms();
        if (now >= l->valid_until_ms)
            break; /* lost: no acknowledgement in time */
        uint64_t wake = next_ms < l->valid_until_ms ? next_ms : l->valid_until_ms;
        if (now < wake) {
            struct timespec ts = crb_deadline_ts(wake - now);
            pthread_cond_timedwait(&l->cond, &l->lock, &ts);
            continue;
        }
        uint64_t until = l->valid_until_ms;
        pthread_mutex_unlock(&l->lock);

        uint64_t send_ms = crb_now_ms();
        uint64_t deadline_ms = send_ms + (uint64_t)crm_etcd_request_timeout_ms(l->client);
        if (deadline_ms > until)
            deadline_ms = until;
        int rc;
        int64_t ttl = keepalive_once(l, deadline_ms, &rc);

        pthread_mutex_lock(&l->lock);
        if (ttl == 0) {
            crb_log(CRB_LOG_WARN, "etcd lease %" PRId64 " is gone (expired or revoked)", l->id);
            l->valid_until_ms = 0;
            break;
        }
        if (ttl > 0) {
            uint64_t v = send_ms + (uint64_t)ttl * 1000;
            if (v > l->valid_until_ms)
                l->valid_until_ms = v;
            l->last_ack_send_ms = send_ms;
            next_ms = send_ms + period_ms;
        } else {
            crb_log(CRB_LOG_DEBUG, "etcd lease %" PRId64 " keepalive failed: %s", l->id,
                    cr_last_error_message());
            next_ms = crb_now_ms() + retry_ms;
        }
    }
    bool lost = !l->stopping;
    if (lost)
        l->status = CR_ERR_LEASE_LOST;
    pthread_mutex_unlock(&l->lock);
    if (lost) {
        crb_log(CRB_LOG_WARN, "etcd lease %" PRId64 " lost", l->id);
        if (l->on_lost != NULL)
            l->on_lost(l->arg, l, CR_ERR_LEASE_LOST);
    }
    return NULL;
}

int crm_etcd_lease_grant(crm_etcd *c, int ttl_s, crm_etcd_lease_lost_fn on_lost, void *arg,
                         crm_etcd_lease **out)
{
    if (c == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crm_etcd_lease_grant: NULL argument");
    if (ttl_s < 1 || ttl_s > MAX_TTL_S)
        return crb_error(CR_INVALID_PARAMS, "etcd lease TTL %d s is outside 1..%d", ttl_s,
                         MAX_TTL_S);
    crm_etcd_lease *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "etcd lease");
    uint64_t send_ms = crb_now_ms();
    etcd_reply reply = {0};
    int rc = crm_etcd_call(c, "/v3/lease/grant", crm_etcd_json_lease_grant(ttl_s),
                           send_ms + (uint64_t)c->request_ms, "lease grant", &reply, NULL);
    if (rc < 0)
        goto err_free;
    int64_t id, ttl;
    rc = crm_etcd_decode_lease_grant(reply.body.data, reply.body.len, &id, &ttl);
    free(reply.body.data);
    if (rc < 0)
        goto err_free;
    if (ttl > MAX_TTL_S) {
        rc = crb_error(CR_ERR_METADATA_MALFORMED,
                       "etcd granted lease %" PRId64 " a TTL of %" PRId64 " s for %d s asked", id,
                       ttl, ttl_s);
        goto err_free;
    }
    l->client = c;
    l->id = id;
    l->ttl_s = (int)ttl;
    l->on_lost = on_lost;
    l->arg = arg;
    l->last_ack_send_ms = send_ms;
    l->valid_until_ms = send_ms + (uint64_t)ttl * 1000;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int e1 = pthread_cond_init(&l->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (e1 != 0) {
        rc = crb_error(CR_ERR_SYSTEM, "etcd lease: pthread_cond_init failed");
        goto err_revoke;
    }
    if (pthread_mutex_init(&l->lock, NULL) != 0) {
        rc = crb_error(CR_ERR_SYSTEM, "etcd lease: pthread_mutex_init failed");
        goto err_destroy_cond;
    }
    if (pthread_create(&l->thread, NULL, keepalive_thread, l) != 0) {
        rc = crb_error(CR_ERR_SYSTEM, "etcd lease: cannot start the keepalive thread");
        goto err_destroy_lock;
    }
    pthread_mutex_lock(&c->leases_lock);
    l->next = c->leases;
    c->leases = l;
    pthread_mutex_unlock(&c->leases_lock);
    *out = l;
    return 0;

err_destroy_lock:
    pthread_mutex_destroy(&l->lock);
err_destroy_cond:
    pthread_cond_destroy(&l->cond);
err_revoke : {
    /* Best effort: the lease would otherwise live on for its TTL. */
    etcd_reply r2 = {0};
    if (crm_etcd_call(c, "/v3/lease/revoke", crm_etcd_json_lease_id(id),
                      crb_now_ms() + (uint64_t)c->request_ms, "lease revoke", &r2, NULL) == 0)
        free(r2.body.data);
}
err_free:
    free(l);
    return rc;
}

int64_t crm_etcd_lease_id(const crm_etcd_lease *l)
{
    return l != NULL ? l->id : 0;
}

int crm_etcd_lease_ttl(const crm_etcd_lease *l)
{
    return l != NULL ? l->ttl_s : 0;
}

int crm_etcd_lease_check(const crm_etcd_lease *l, uint64_t *valid_until_ms)
{
    if (l == NULL)
        return crb_error(CR_INVALID_PARAMS, "crm_etcd_lease_check: NULL lease");
    crm_etcd_lease *m = (crm_etcd_lease *)l;
    pthread_mutex_lock(&m->lock);
    int status = m->status;
    uint64_t until = m->valid_until_ms;
    pthread_mutex_unlock(&m->lock);
    if (status == 0 && crb_now_ms() >= until)
        status = CR_ERR_LEASE_LOST; /* the thread has not noticed yet */
    if (status < 0)
        return crb_error(status, "etcd lease %" PRId64 " is lost", l->id);
    if (valid_until_ms != NULL)
        *valid_until_ms = until;
    return 0;
}

int crm_etcd_revoke_lease_id(crm_etcd *c, int64_t id)
{
    if (c == NULL || id == 0)
        return crb_error(CR_INVALID_PARAMS, "crm_etcd_revoke_lease_id: bad argument");
    char what[64];
    snprintf(what, sizeof(what), "revoke of lease %" PRId64, id);
    etcd_reply reply = {0};
    int grpc = 0;
    int rc =
        crm_etcd_call(c, "/v3/lease/revoke", crm_etcd_json_lease_id(id),
                      crb_now_ms() + (uint64_t)crm_etcd_request_timeout_ms(c), what, &reply, &grpc);
    if (rc == CR_ETCD_OPERATION_ERROR && grpc == CRM_GRPC_NOT_FOUND)
        return 0; /* already gone */
    if (rc == 0) {
        int64_t rev;
        /* A revoke reply is a bare header, like a put's. */
        rc = crm_etcd_decode_put(reply.body.data, reply.body.len, &rev);
        free(reply.body.data);
    }
    return rc;
}

/* Stop the thread, unlink, revoke (if asked and alive), free. */
static int release(crm_etcd_lease *l, bool revoke_it, bool unlink)
{
    pthread_mutex_lock(&l->lock);
    l->stopping = true;
    pthread_cond_signal(&l->cond);
    pthread_mutex_unlock(&l->lock);
    pthread_join(l->thread, NULL);
    if (unlink) {
        crm_etcd *c = l->client;
        pthread_mutex_lock(&c->leases_lock);
        for (crm_etcd_lease **p = &c->leases; *p != NULL; p = &(*p)->next) {
            if (*p == l) {
                *p = l->next;
                break;
            }
        }
        pthread_mutex_unlock(&c->leases_lock);
    }
    int rc = 0;
    if (revoke_it && l->status == 0)
        rc = crm_etcd_revoke_lease_id(l->client, l->id);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
    free(l);
    return rc;
}

int crm_etcd_lease_release(crm_etcd_lease *l, bool revoke_it)
{
    if (l == NULL)
        return 0;
    return release(l, revoke_it, true);
}

void crm_etcd_leases_release_all(crm_etcd *c)
{
    pthread_mutex_lock(&c->leases_lock);
    crm_etcd_lease *l = c->leases;
    c->leases = NULL;
    pthread_mutex_unlock(&c->leases_lock);
    while (l != NULL) {
        crm_etcd_lease *next = l->next;
        release(l, true, false);
        l = next;
    }
}
