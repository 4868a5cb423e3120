/*
 * etcd_backend.c - the "etcd://" metadata backend: segment descriptors in
 * etcd, published under a lease this process keeps alive.
 *
 * put/get/del are plain etcd puts, ranges and deletes. publish puts the key
 * under the backend's lease, granted on the first publish (TTL from the
 * connection string, default CRM_DEFAULT_TTL_S) and kept alive by the etcd
 * client's keepalive thread, so a killed process's descriptor vanishes
 * within the TTL. Every published key is remembered with its value: when
 * the lease is lost (etcd unreachable for longer than the TTL, or etcd lost
 * its data) a repair thread grants a new lease and puts every remembered key
 * back under it, retrying every second until etcd answers again. destroy
 * revokes the lease, which deletes every key still attached.
 *
 * Locking: `lock` (the publish lock) serialises publish, del, repair and
 * destroy, and so orders their writes; it is held across etcd calls (each
 * bounded by the request deadline). The lease-lost callback runs on the
 * keepalive thread and touches only `lost` and the wake condition, never
 * `lock`, because a publish holding `lock` may be joining that thread.
 * get and put take no lock.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "metadata/backend.h"
#include "metadata/etcd.h"
#include "metadata/published.h"

#define REPAIR_RETRY_MS 1000

typedef struct etcd_backend {
    crm_backend base;
    crm_etcd *client;
    char endpoints[512];
    int ttl_s;
    pthread_mutex_t lock; /* the publish lock */
    crm_etcd_lease *lease;
    bool reput_needed; /* a new lease was granted; some keys are not under it yet */
    crm_published table;
    /* Wake-up of the repair thread. */
    pthread_mutex_t wake_lock;
    pthread_cond_t wake;
    atomic_bool lost;
    atomic_bool repair_pending; /* a lease or re-put attempt failed: retry in the thread */
    bool stopping;
    pthread_t repair_thread;
} etcd_backend;

static void wake_repair(etcd_backend *eb)
{
    pthread_mutex_lock(&eb->wake_lock);
    pthread_cond_signal(&eb->wake);
    pthread_mutex_unlock(&eb->wake_lock);
}

static void on_lease_lost(void *arg, crm_etcd_lease *lease, int status)
{
    etcd_backend *eb = arg;
    atomic_store(&eb->lost, true);
    wake_repair(eb);
}

/* Put every remembered key under the current lease. Caller holds lock. */
static int reput_locked(etcd_backend *eb)
{
    int64_t id = crm_etcd_lease_id(eb->lease);
    for (size_t i = 0; i < eb->table.n; i++) {
        const crm_published_entry *e = &eb->table.entries[i];
        int rc = crm_etcd_put(eb->client, e->key, e->value, e->len, id, NULL);
        if (rc < 0)
            return rc;
    }
    eb->reput_needed = false;
    return 0;
}

/*
 * A live lease with every remembered key under it. Caller holds lock. On
 * failure the repair thread is asked to keep trying, so remembered keys come
 * back once etcd answers even if nobody publishes again.
 */
static int ensure_lease_attempt_locked(etcd_backend *eb);

static int ensure_lease_locked(etcd_backend *eb)
{
    int rc = ensure_lease_attempt_locked(eb);
    if (rc < 0 && eb->table.n > 0) {
        atomic_store(&eb->repair_pending, true);
        wake_repair(eb);
    }
    return rc;
}

static int ensure_lease_attempt_locked(etcd_backend *eb)
{
    bool alive =
        eb->lease != NULL && !atomic_load(&eb->lost) && crm_etcd_lease_check(eb->lease, NULL) == 0;
    if (!alive) {
        if (eb->lease != NULL) {
            crb_log(CRB_LOG_WARN, "etcd metadata %s: lease %lld lost; granting a new one",
                    eb->endpoints, (long long)crm_etcd_lease_id(eb->lease));
            crm_etcd_lease_release(eb->lease, false);
            eb->lease = NULL;
        }
        atomic_store(&eb->lost, false);
        int rc = crm_etcd_lease_grant(eb->client, eb->ttl_s, on_lease_lost, eb, &eb->lease);
        if (rc < 0)
            return rc;
        eb->reput_needed = eb->table.n > 0;
    }
    return eb->reput_needed ? reput_locked(eb) : 0;
}

static void *repair_main(void *arg)
{
    etcd_backend *eb = arg;
    bool retry = false;
    pthread_mutex_lock(&eb->wake_lock);
    while (!eb->stopping) {
        bool pending = atomic_load(&eb->repair_pending);
        if (!atomic_load(&eb->lost) && !retry && !pending) {
            pthread_cond_wait(&eb->wake, &eb->wake_lock);
            continue;
        }
        if ((retry || pending) && !atomic_load(&eb->lost)) {
            struct timespec ts = crb_deadline_ts(REPAIR_RETRY_MS);
            pthread_cond_timedwait(&eb->wake, &eb->wake_lock, &ts);
            if (eb->stopping)
                break;
        }
        pthread_mutex_unlock(&eb->wake_lock);
        pthread_mutex_lock(&eb->lock);
        atomic_store(&eb->repair_pending, false);
        int rc = 0;
        if (eb->table.n == 0) {
            /* Nothing to keep: drop the dead lease, grant on the next publish. */
            crm_etcd_lease_release(eb->lease, false);
            eb->lease = NULL;
            atomic_store(&eb->lost, false);
        } else {
            rc = ensure_lease_attempt_locked(eb);
            if (rc < 0)
                crb_log(CRB_LOG_WARN, "etcd metadata %s: cannot restore %zu published keys: %s",
                        eb->endpoints, eb->table.n, cr_last_error_message());
            else
                crb_log(CRB_LOG_INFO, "etcd metadata %s: %zu published keys restored",
                        eb->endpoints, eb->table.n);
        }
        pthread_mutex_unlock(&eb->lock);
        pthread_mutex_lock(&eb->wake_lock);
        retry = rc < 0;
    }
    pthread_mutex_unlock(&eb->wake_lock);
    return NULL;
}

static int not_found(const char *key, const etcd_backend *eb)
{
    return crb_error(CR_ERR_METADATA_NOT_FOUND, "metadata key '%.200s' not found in etcd %s", key,
                     eb->endpoints);
}

static int etcd_put(crm_backend *b, const char *key, const void *value, size_t len)
{
    etcd_backend *eb = (etcd_backend *)b;
    return crm_etcd_put(eb->client, key, value, len, 0, NULL);
}

static int etcd_publish(crm_backend *b, const char *key, const void *value, size_t len)
{
    etcd_backend *eb = (etcd_backend *)b;
    pthread_mutex_lock(&eb->lock);
    int rc = ensure_lease_locked(eb);
    if (rc == 0)
        rc = crm_etcd_put(eb->client, key, value, len, crm_etcd_lease_id(eb->lease), NULL);
    if (rc == 0)
        rc = crm_published_set(&eb->table, key, value, len);
    pthread_mutex_unlock(&eb->lock);
    return rc;
}

static int etcd_get(crm_backend *b, const char *key, void **value, size_t *len)
{
    etcd_backend *eb = (etcd_backend *)b;
    crm_etcd_kv kv;
    int rc = crm_etcd_get(eb->client, key, &kv, NULL);
    if (rc == CR_ETCD_KEY_NOT_EXIST)
        return not_found(key, eb);
    if (rc < 0)
        return rc;
    *value = kv.value;
    *len = kv.value_len;
    free(kv.key);
    return 0;
}

static int etcd_del(crm_backend *b, const char *key)
{
    etcd_backend *eb = (etcd_backend *)b;
    pthread_mutex_lock(&eb->lock);
    crm_published_remove(&eb->table, key);
    int rc = crm_etcd_delete(eb->client, key, false, NULL);
    pthread_mutex_unlock(&eb->lock);
    return rc;
}

static void etcd_destroy(crm_backend *b)
{
    etcd_backend *eb = (etcd_backend *)b;
    pthread_mutex_lock(&eb->wake_lock);
    eb->stopping = true;
    pthread_cond_signal(&eb->wake);
    pthread_mutex_unlock(&eb->wake_lock);
    pthread_join(eb->repair_thread, NULL);
    /* Revoking deletes every key still under the lease at once. */
    if (eb->lease != NULL && crm_etcd_lease_release(eb->lease, !atomic_load(&eb->lost)) < 0)
        crb_log(CRB_LOG_WARN,
                "etcd metadata %s: revoking the lease failed (its keys expire "
                "within %d s): %s",
                eb->endpoints, eb->ttl_s, cr_last_error_message());
    crm_published_clear(&eb->table);
    crm_etcd_close(eb->client);
    pthread_cond_destroy(&eb->wake);
    pthread_mutex_destroy(&eb->wake_lock);
    pthread_mutex_destroy(&eb->lock);
    free(eb);
}

static const crm_backend_ops etcd_ops = {
    .name = "etcd",
    .put = etcd_put,
    .publish = etcd_publish,
    .get = etcd_get,
    .del = etcd_del,
    .destroy = etcd_destroy,
};

int crm_etcd_backend_create(const char *endpoints, int timeout_ms, int ttl_s, crm_backend **out)
{
    if (endpoints == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crm_etcd_backend_create: NULL argument");
    if (ttl_s < 1 || ttl_s > 3600)
        return crb_error(CR_ERR_INVALID_CONFIG, "etcd metadata TTL %d s is outside 1..3600", ttl_s);
    etcd_backend *eb = calloc(1, sizeof(*eb));
    if (eb == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "etcd metadata backend");
    crm_etcd_config cfg = {.endpoints = endpoints, .request_timeout_ms = timeout_ms};
    int rc = crm_etcd_open(&cfg, &eb->client);
    if (rc < 0)
        goto err_free;
    snprintf(eb->endpoints, sizeof(eb->endpoints), "%s", endpoints);
    eb->ttl_s = ttl_s;
    atomic_init(&eb->lost, false);
    atomic_init(&eb->repair_pending, false);
    pthread_mutex_init(&eb->lock, NULL);
    pthread_mutex_init(&eb->wake_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&eb->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&eb->repair_thread, NULL, repair_main, eb) != 0) {
        rc = crb_error(CR_ERR_SYSTEM, "etcd metadata backend: cannot start its thread");
        goto err_destroy_sync;
    }
    eb->base.ops = &etcd_ops;
    eb->base.peer_to_peer = false;
    eb->base.timeout_ms = crm_etcd_request_timeout_ms(eb->client);
    *out = &eb->base;
    return 0;

err_destroy_sync:
    pthread_cond_destroy(&eb->wake);
    pthread_mutex_destroy(&eb->wake_lock);
    pthread_mutex_destroy(&eb->lock);
    crm_etcd_close(eb->client);
err_free:
    free(eb);
    return rc;
}
