/*
 * ha_internal.h - state shared by the HA master's files: ha_election.c (the
 * campaign, the gate, the leader's lease watch), ha_repl.c (the leader's
 * change log, the senders to standbys, the durability wait) and
 * ha_standby.c (the standby's subscription, its copy of the state, and the
 * restore at promotion). See ha.h and docs/ha.md.
 *
 * Locking: leader_mu guards leader[] and leader_lease; log_mu (ha_repl.c)
 * guards the log and the sender list; atomics otherwise. Lock order:
 * service locks -> log_mu (the service's change hook appends under the
 * shard or segment lock that made the change, so log order is effect
 * order); leader_mu is a leaf.
 */
#ifndef CRESCENT_MASTER_HA_INTERNAL_H
#define CRESCENT_MASTER_HA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "master/ha.h"
#include "metadata/etcd.h"

typedef struct crk_ha_log crk_ha_log;
typedef struct crk_ha_standby crk_ha_standby;

struct crk_ha {
    crk_ha_config cfg;
    char endpoints[4096], cluster_id[256], advertise[300];
    char view_key[512];
    char isr_key[512]; /* mooncake-store/<cluster>/crescent/isr: "term addr,addr," */
    crm_etcd *etcd;
    crm_etcd_lease *lease;

    _Atomic int role;               /* enum crk_ha_role */
    _Atomic uint64_t term;          /* current leader's term (ours when leading) */
    _Atomic uint64_t serve_until;   /* leader: serve while crb_now_ms() < this */
    _Atomic int64_t lease_margin;   /* for /health */
    _Atomic uint64_t fenced_writes; /* writes fenced at promotion */

    pthread_mutex_t leader_mu;
    char leader[300];     /* leader's address ("" unknown) */
    int64_t leader_lease; /* its lease id (for a fast takeover) */

    atomic_bool stop;
    atomic_bool deposed; /* lost its lease while leading: the daemon exits 3 */
    pthread_t election;
    bool election_running;

    crk_ha_log *log;         /* leader side (ha_repl.c) */
    crk_ha_standby *standby; /* standby side (ha_standby.c) */
};

/* ha_repl.c */
int crk_ha_log_create(crk_ha *ha);
void crk_ha_log_destroy(crk_ha *ha);
/* Start logging for term (promotion): installs the service's change hook. */
void crk_ha_log_begin(crk_ha *ha, uint64_t term);
/* Stop every sender (step-down, stop). */
void crk_ha_log_end(crk_ha *ha);
void crk_ha_log_status(crk_ha *ha, crk_ha_status *st);

/* ha_standby.c */
int crk_ha_standby_create(crk_ha *ha);
void crk_ha_standby_destroy(crk_ha *ha);
/* Follow the leader at addr for term: (re)subscribe when the leader changed. */
void crk_ha_standby_follow(crk_ha *ha, const char *addr, uint64_t term);
/* True when the stream from the leader broke and its address refuses
 * connections twice in a row (no process listens: the leader is dead). */
bool crk_ha_standby_leader_dead(crk_ha *ha);
/* True when this standby holds the leader's state up to the stream's end
 * (snapshot received and applied), so it may campaign without losing data. */
bool crk_ha_standby_synced(crk_ha *ha);
/* Stop the subscription and install the copy into the service (promotion). */
int crk_ha_standby_promote(crk_ha *ha, uint64_t now_ms);
void crk_ha_standby_status(crk_ha *ha, crk_ha_status *st);

/* ha_restore.c: install the catalog into svc (promotion); *fenced_out
 * counts the writes in flight that were fenced, *objects_out the objects. */
struct crk_ha_catalog;
int crk_ha_restore(crk_service *svc, struct crk_ha_catalog *cat, uint64_t now_ms,
                   uint64_t *fenced_out, uint64_t *objects_out);

#endif
