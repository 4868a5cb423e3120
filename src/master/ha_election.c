/*
 * ha_election.c - the campaign for leadership through etcd, the leader's
 * lease watch and the gate (ha.h; docs/ha.md).
 *
 * One thread runs the election loop:
 *
 *   1. hold a lease (grant one; re-grant after a loss);
 *   2. create-if-absent master_view = our address under the lease;
 *   3. won (or the key already carries our lease: a retried create): lead;
 *      otherwise follow the address the key holds, polling the key every
 *      POLL_MS until it is gone, and campaign again (a standby that holds
 *      no synced copy of the leader's state waits a while first, so an
 *      in-sync standby wins);
 *   4. leading: every POLL_MS move serve_until to the lease's known end
 *      minus the guard; when the lease is lost or the margin runs out, stop
 *      serving and exit the process (status 3): a deposed leader never
 *      serves its possibly stale state again.
 *
 * Fast takeover: a standby whose stream from the leader broke and whose
 * leader address refuses connections (ha_standby.c) revokes the leader's
 * lease, which deletes master_view at once; a timeout is never taken as
 * death (then the lease expires on its own).
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "master/ha_internal.h"

#define POLL_MS          50
#define RETRY_MS         200
#define UNSYNCED_WAIT_MS 3000 /* a standby without a synced copy lets others win first */

const char *crk_ha_role_name(int role)
{
    switch (role) {
    case CRK_HA_LEADER:
        return "leader";
    case CRK_HA_STANDBY:
        return "standby";
    default:
        return "candidate";
    }
}

static bool stopping(crk_ha *ha)
{
    return atomic_load(&ha->stop);
}

static void nap(crk_ha *ha, int ms)
{
    for (int t = 0; t < ms && !stopping(ha); t += 10)
        usleep(10000);
}

static void set_leader(crk_ha *ha, const char *addr, size_t len, int64_t lease, uint64_t term)
{
    pthread_mutex_lock(&ha->leader_mu);
    if (len >= sizeof(ha->leader))
        len = sizeof(ha->leader) - 1;
    memcpy(ha->leader, addr, len);
    ha->leader[len] = '\0';
    ha->leader_lease = lease;
    pthread_mutex_unlock(&ha->leader_mu);
    atomic_store(&ha->term, term);
}

int crk_ha_gate(crk_ha *ha, uint64_t now_ms, char *msg, size_t cap)
{
    int role = atomic_load(&ha->role);
    if (role == CRK_HA_LEADER && now_ms < atomic_load(&ha->serve_until))
        return 0;
    char leader[sizeof(ha->leader)];
    pthread_mutex_lock(&ha->leader_mu);
    memcpy(leader, ha->leader, sizeof(leader));
    pthread_mutex_unlock(&ha->leader_mu);
    uint64_t term = atomic_load(&ha->term);
    if (role == CRK_HA_LEADER)
        snprintf(msg, cap, "NOT_LEADER: leader lease of term %" PRIu64 " is running out", term);
    else if (leader[0] != '\0' && role == CRK_HA_STANDBY)
        snprintf(msg, cap, "NOT_LEADER: leader is %s (term %" PRIu64 ")", leader, term);
    else
        snprintf(msg, cap, "NOT_LEADER: no leader elected yet");
    return CR_ERR_NOT_LEADER;
}

uint64_t crk_ha_term(crk_ha *ha)
{
    return atomic_load(&ha->term);
}

void crk_ha_status_get(crk_ha *ha, crk_ha_status *out)
{
    memset(out, 0, sizeof(*out));
    out->role = atomic_load(&ha->role);
    out->term = atomic_load(&ha->term);
    pthread_mutex_lock(&ha->leader_mu);
    memcpy(out->leader, ha->leader, sizeof(out->leader));
    pthread_mutex_unlock(&ha->leader_mu);
    out->fenced_writes = atomic_load(&ha->fenced_writes);
    if (out->role == CRK_HA_LEADER) {
        uint64_t now = crb_now_ms(), until = atomic_load(&ha->serve_until);
        out->lease_margin_ms = until > now ? (int64_t)(until - now) : 0;
        crk_ha_log_status(ha, out);
    } else {
        crk_ha_standby_status(ha, out);
    }
}

/* This master must never serve again: it already refuses everything (role
 * and serve_until were cleared); the daemon is asked to shut down and exits
 * with status 3 (crk_ha_deposed). */
static void depose(crk_ha *ha)
{
    atomic_store(&ha->serve_until, 0);
    atomic_store(&ha->role, CRK_HA_CANDIDATE);
    atomic_store(&ha->deposed, true);
    atomic_store(&ha->stop, true);
    kill(getpid(), SIGTERM); /* the daemon's main thread waits for it */
}

bool crk_ha_deposed(crk_ha *ha)
{
    return ha != NULL && atomic_load(&ha->deposed);
}

/* Lead until the lease is lost or the margin runs out (then depose), or stop. */
static void lead(crk_ha *ha, uint64_t term, int64_t mod_revision)
{
    uint64_t now = crb_now_ms();
    int rc = crk_ha_standby_promote(ha, now);
    if (rc < 0) {
        crb_log(CRB_LOG_ERROR, "ha: promotion failed (%s); resigning", cr_last_error_message());
        crm_etcd_cas cas;
        if (crm_etcd_delete_if_mod(ha->etcd, ha->view_key, mod_revision, &cas) == 0)
            crm_etcd_cas_clear(&cas);
        depose(ha);
        return;
    }
    set_leader(ha, ha->advertise, strlen(ha->advertise), crm_etcd_lease_id(ha->lease), term);
    crk_ha_log_begin(ha, term);
    uint64_t valid_until = 0;
    if (crm_etcd_lease_check(ha->lease, &valid_until) == 0)
        atomic_store(&ha->serve_until,
                     valid_until > ha->cfg.guard_ms ? valid_until - ha->cfg.guard_ms : 0);
    atomic_store(&ha->role, CRK_HA_LEADER);
    crb_log(CRB_LOG_WARN, "ha: leader of %s at term %" PRIu64 " (%s)", ha->cluster_id, term,
            ha->advertise);
    while (!stopping(ha)) {
        usleep(POLL_MS * 1000);
        rc = crm_etcd_lease_check(ha->lease, &valid_until);
        uint64_t until = valid_until > ha->cfg.guard_ms ? valid_until - ha->cfg.guard_ms : 0;
        if (rc == 0)
            atomic_store(&ha->serve_until, until);
        now = crb_now_ms();
        if (rc != 0 || now >= until) {
            atomic_store(&ha->serve_until, 0);
            atomic_store(&ha->role, CRK_HA_CANDIDATE);
            crb_log(CRB_LOG_ERROR,
                    "ha: lost the leader lease of term %" PRIu64 " (%s); stopped serving, exiting "
                    "so that a fresh standby replaces this process",
                    term, rc != 0 ? "etcd says it is gone" : "no keepalive acknowledged in time");
            depose(ha);
            return;
        }
    }
    /* Resign: stop serving first, then free the key for a standby. */
    atomic_store(&ha->serve_until, 0);
    atomic_store(&ha->role, CRK_HA_CANDIDATE);
    crk_ha_log_end(ha);
    crm_etcd_cas cas;
    if (crm_etcd_delete_if_mod(ha->etcd, ha->view_key, mod_revision, &cas) == 0)
        crm_etcd_cas_clear(&cas);
}

/* Stand by for the leader in cur until its key is gone (or stop). */
static void stand_by(crk_ha *ha, const crm_etcd_kv *cur)
{
    uint64_t term = (uint64_t)cur->create_revision;
    set_leader(ha, (const char *)cur->value, cur->value_len, cur->lease, term);
    atomic_store(&ha->role, CRK_HA_STANDBY);
    crk_ha_standby_follow(ha, ha->leader, term);
    crb_log(CRB_LOG_INFO, "ha: standby of %s (term %" PRIu64 ")", ha->leader, term);
    bool revoked = false;
    while (!stopping(ha)) {
        if (!revoked && crk_ha_standby_leader_dead(ha)) {
            crb_log(CRB_LOG_WARN, "ha: leader %s refuses connections; revoking its lease",
                    ha->leader);
            if (crm_etcd_revoke_lease_id(ha->etcd, cur->lease) == 0)
                revoked = true;
        }
        crm_etcd_kv kv;
        int rc = crm_etcd_get(ha->etcd, ha->view_key, &kv, NULL);
        if (rc == CR_ETCD_KEY_NOT_EXIST)
            return;
        if (rc == 0) {
            bool changed = kv.create_revision != cur->create_revision;
            crm_etcd_kv_clear(&kv);
            if (changed)
                return; /* another leader already: follow it */
        }
        if (crm_etcd_lease_check(ha->lease, NULL) != 0)
            return; /* our own lease is gone: re-grant before anything else */
        nap(ha, POLL_MS);
    }
}

static void *election_main(void *arg)
{
    crk_ha *ha = arg;
    uint64_t absent_since = 0;
    while (!stopping(ha)) {
        if (ha->lease != NULL && crm_etcd_lease_check(ha->lease, NULL) != 0) {
            crm_etcd_lease_release(ha->lease, false);
            ha->lease = NULL;
        }
        if (ha->lease == NULL) {
            int ttl = (int)(ha->cfg.lease_ttl_ms / 1000);
            if (crm_etcd_lease_grant(ha->etcd, ttl, NULL, NULL, &ha->lease) < 0) {
                crb_log(CRB_LOG_WARN, "ha: no lease from etcd: %s", cr_last_error_message());
                ha->lease = NULL;
                nap(ha, RETRY_MS);
                continue;
            }
        }
        /* A standby without a synced copy of the leader's state gives an
         * in-sync standby time to win first. */
        if (atomic_load(&ha->term) != 0 && !crk_ha_standby_synced(ha)) {
            uint64_t now = crb_now_ms();
            if (absent_since == 0)
                absent_since = now;
            if (now - absent_since < UNSYNCED_WAIT_MS) {
                crm_etcd_kv kv;
                int rc = crm_etcd_get(ha->etcd, ha->view_key, &kv, NULL);
                if (rc == 0) {
                    absent_since = 0;
                    stand_by(ha, &kv);
                    crm_etcd_kv_clear(&kv);
                } else {
                    nap(ha, POLL_MS);
                }
                continue;
            }
            crb_log(CRB_LOG_WARN, "ha: no synced standby took over; campaigning unsynced");
        }
        absent_since = 0;
        atomic_store(&ha->role, CRK_HA_CANDIDATE);
        int64_t lease = crm_etcd_lease_id(ha->lease);
        crm_etcd_cas cas;
        int rc = crm_etcd_create(ha->etcd, ha->view_key, ha->advertise, strlen(ha->advertise),
                                 lease, &cas);
        if (rc < 0) {
            crb_log(CRB_LOG_WARN, "ha: campaign failed: %s", cr_last_error_message());
            nap(ha, RETRY_MS);
            continue;
        }
        if (cas.succeeded)
            lead(ha, (uint64_t)cas.revision, cas.revision);
        else if (cas.exists && cas.current.lease == lease)
            lead(ha, (uint64_t)cas.current.create_revision, cas.current.mod_revision);
        else if (cas.exists)
            stand_by(ha, &cas.current);
        crm_etcd_cas_clear(&cas);
    }
    return NULL;
}

int crk_ha_start(const crk_ha_config *cfg, crk_ha **out)
{
    crk_ha *ha = calloc(1, sizeof(*ha));
    if (ha == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ha");
    ha->cfg = *cfg;
    snprintf(ha->endpoints, sizeof(ha->endpoints), "%s", cfg->endpoints);
    snprintf(ha->cluster_id, sizeof(ha->cluster_id), "%s", cfg->cluster_id);
    snprintf(ha->view_key, sizeof(ha->view_key), "mooncake-store/%s/master_view", ha->cluster_id);
    snprintf(ha->isr_key, sizeof(ha->isr_key), "mooncake-store/%s/crescent/isr", ha->cluster_id);
    size_t n = strlen(ha->view_key);
    if (n > 0 && ha->view_key[n - 1] == '/')
        ha->view_key[n - 1] = '\0';
    ha->cfg.endpoints = ha->endpoints;
    ha->cfg.cluster_id = ha->cluster_id;
    if (ha->cfg.guard_ms == 0)
        ha->cfg.guard_ms = 500;
    pthread_mutex_init(&ha->leader_mu, NULL);
    crm_etcd_config ec = {.endpoints = ha->endpoints, .request_timeout_ms = 1000};
    int rc = crm_etcd_open(&ec, &ha->etcd);
    if (rc < 0)
        goto err_free;
    rc = crk_ha_log_create(ha);
    if (rc < 0)
        goto err_close_etcd;
    rc = crk_ha_standby_create(ha);
    if (rc < 0)
        goto err_destroy_log;
    *out = ha;
    return 0;

err_destroy_log:
    crk_ha_log_destroy(ha);
err_close_etcd:
    crm_etcd_close(ha->etcd);
err_free:
    pthread_mutex_destroy(&ha->leader_mu);
    free(ha);
    return rc;
}

void crk_ha_resign(crk_ha *ha)
{
    if (ha == NULL)
        return;
    atomic_store(&ha->stop, true);
    if (ha->election_running)
        pthread_join(ha->election, NULL);
    ha->election_running = false;
}

void crk_ha_stop(crk_ha *ha)
{
    if (ha == NULL)
        return;
    crk_ha_resign(ha);
    crk_ha_log_end(ha);
    crk_ha_standby_destroy(ha);
    crk_ha_log_destroy(ha);
    if (ha->lease != NULL)
        crm_etcd_lease_release(ha->lease, true);
    crm_etcd_close(ha->etcd);
    pthread_mutex_destroy(&ha->leader_mu);
    free(ha);
}

int crk_ha_campaign(crk_ha *ha, const char *advertise)
{
    if (advertise == NULL || strlen(advertise) >= sizeof(ha->advertise))
        return crb_error(CR_ERR_INVALID_CONFIG, "ha: advertise address too long or missing");
    snprintf(ha->advertise, sizeof(ha->advertise), "%s", advertise);
    if (pthread_create(&ha->election, NULL, election_main, ha) != 0)
        return crb_error(CR_ERR_SYSTEM, "ha: starting the election thread");
    ha->election_running = true;
    return 0;
}
