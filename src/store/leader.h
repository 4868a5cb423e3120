/*
 * leader.h - finding the HA master's leader through etcd (docs/ha.md) for a
 * master address "etcd://h:p[,h:p...]" (Mooncake's form). The leader
 * publishes its RPC address under "mooncake-store/<cluster>/master_view"
 * (cluster: $MC_STORE_CLUSTER_ID, else "mooncake_cluster", as Mooncake's
 * client reads it); the key's create_revision is the leader's term.
 *
 * Threading: one crc_leader per crc_master; every call is thread-safe (the
 * term is kept under a mutex).
 */
#ifndef CRESCENT_STORE_LEADER_H
#define CRESCENT_STORE_LEADER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/net.h"

typedef struct crc_leader crc_leader;

/** True when address names etcd ("etcd://..."). */
bool crc_leader_is_etcd(const char *address);

/**
 * Parse "etcd://h:p[,h:p...]" and set up the etcd client (connects to
 * nothing yet). Errors: CR_INVALID_PARAMS naming the address,
 * CR_ERR_NO_MEMORY.
 */
int crc_leader_open(const char *address, crc_leader **out);

/**
 * Read the leader's address and term from etcd, retrying every 50 ms while
 * no leader is published, until timeout_ms. A term lower than the highest
 * this locator has seen is ignored (a stale read). Errors: CR_RPC_FAIL (no
 * leader within the time; the message says why).
 */
int crc_leader_resolve(crc_leader *l, int timeout_ms, char host[CRB_HOST_MAX], uint16_t *port,
                       uint64_t *term);

/** The highest term seen (from etcd or a handshake); 0 if none. */
uint64_t crc_leader_max_term(crc_leader *l);

/** Does etcd name a leader of a higher term than `term` (the connection's)?
 *  false when none is published or etcd did not answer. */
bool crc_leader_moved(crc_leader *l, uint64_t term);

/** Note a term a master announced in its handshake; false when it is lower
 *  than one seen before (a deposed leader: do not use it). */
bool crc_leader_accept_term(crc_leader *l, uint64_t term);

void crc_leader_close(crc_leader *l);

#endif
