/*
 * leader.c - the etcd locator of the HA master's leader (leader.h). One
 * etcd read per (re)connection: master_client.c re-resolves whenever its
 * connection broke or a master answered ERR_NOT_LEADER, so a client follows
 * a leader change on its next call without a watch thread. The highest
 * term seen is kept, and a master whose handshake announces a lower term is
 * refused: of two masters that both claim to lead, the client follows the
 * higher election revision.
 */
#include "store/leader.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "metadata/etcd.h"

#define PREFIX "etcd://"

struct crc_leader {
    crm_etcd *etcd;
    char key[512];
    pthread_mutex_t mu; /* max_term: callers waiting on replies ask crc_leader_moved */
    uint64_t max_term;
};

bool crc_leader_is_etcd(const char *address)
{
    return address != NULL && strncmp(address, PREFIX, strlen(PREFIX)) == 0;
}

int crc_leader_open(const char *address, crc_leader **out)
{
    if (!crc_leader_is_etcd(address))
        return crb_error(CR_INVALID_PARAMS, "master address '%s' is not etcd://h:p",
                         address ? address : "(null)");
    const char *eps = address + strlen(PREFIX);
    crm_etcd_endpoints parsed;
    if (crm_etcd_parse_endpoints(eps, &parsed) < 0)
        return crb_error(CR_INVALID_PARAMS, "master address '%s': %s", address,
                         cr_last_error_message());
    crc_leader *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "leader locator");
    pthread_mutex_init(&l->mu, NULL);
    const char *cluster = getenv("MC_STORE_CLUSTER_ID");
    if (cluster == NULL || cluster[0] == '\0')
        cluster = "mooncake_cluster";
    snprintf(l->key, sizeof(l->key), "mooncake-store/%s/master_view", cluster);
    size_t n = strlen(l->key);
    crm_etcd_config ec = {.endpoints = eps, .request_timeout_ms = 1000};
    (void)n;
    int rc = crm_etcd_open(&ec, &l->etcd);
    if (rc < 0) {
        pthread_mutex_destroy(&l->mu);
        free(l);
        return crb_error(rc == CR_ERR_NO_MEMORY ? rc : CR_INVALID_PARAMS, "master address '%s': %s",
                         address, cr_last_error_message());
    }
    *out = l;
    return 0;
}

int crc_leader_resolve(crc_leader *l, int timeout_ms, char host[CRB_HOST_MAX], uint16_t *port,
                       uint64_t *term)
{
    uint64_t deadline = crb_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1);
    char why[1024] = "no leader published";
    for (;;) {
        crm_etcd_kv kv;
        int rc = crm_etcd_get(l->etcd, l->key, &kv, NULL);
        if (rc == 0) {
            uint64_t t = (uint64_t)kv.create_revision;
            char h[CRB_HOST_MAX];
            uint16_t p = 0;
            int prc = crb_parse_hostport((const char *)kv.value, h, &p);
            pthread_mutex_lock(&l->mu);
            bool fresh = t >= l->max_term;
            if (fresh && prc == 0 && p != 0)
                l->max_term = t;
            pthread_mutex_unlock(&l->mu);
            if (prc == 0 && p != 0 && fresh) {
                memcpy(host, h, CRB_HOST_MAX);
                *port = p;
                *term = t;
                crm_etcd_kv_clear(&kv);
                return 0;
            }
            snprintf(why, sizeof(why), "%s holds '%.64s' at term %llu (seen %llu)", l->key,
                     (const char *)kv.value, (unsigned long long)t,
                     (unsigned long long)l->max_term);
            crm_etcd_kv_clear(&kv);
        } else if (rc != CR_ETCD_KEY_NOT_EXIST) {
            snprintf(why, sizeof(why), "%s", cr_last_error_message());
        } else {
            snprintf(why, sizeof(why), "no leader published under %s", l->key);
        }
        if (crb_now_ms() + 50 >= deadline)
            return crb_error(CR_RPC_FAIL, "finding the master leader: %s", why);
        usleep(50000);
    }
}

uint64_t crc_leader_max_term(crc_leader *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t t = l->max_term;
    pthread_mutex_unlock(&l->mu);
    return t;
}

bool crc_leader_accept_term(crc_leader *l, uint64_t term)
{
    pthread_mutex_lock(&l->mu);
    bool ok = term >= l->max_term;
    if (ok)
        l->max_term = term;
    pthread_mutex_unlock(&l->mu);
    return ok;
}

bool crc_leader_moved(crc_leader *l, uint64_t term)
{
    crm_etcd_kv kv;
    if (crm_etcd_get(l->etcd, l->key, &kv, NULL) != 0)
        return false; /* none published (an election), or etcd slow: keep waiting */
    bool moved = (uint64_t)kv.create_revision > term;
    crm_etcd_kv_clear(&kv);
    return moved;
}

void crc_leader_close(crc_leader *l)
{
    if (l == NULL)
        return;
    crm_etcd_close(l->etcd);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
