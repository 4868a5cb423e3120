/*
 * shm.h - private interface of the same-host transports (shm, cma) and the
 * fd service they share.
 */
#ifndef CRESCENT_ENGINE_TRANSPORTS_SHM_H
#define CRESCENT_ENGINE_TRANSPORTS_SHM_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "engine/internal.h"

/* sockaddr for an abstract-namespace name written "@name". */
socklen_t cre_abstract_addr(const char *name, struct sockaddr_un *sa);

/* Connect to the peer's fd service and map its control page (idempotent). */
int cre_peer_local_connect(cre_peer *p);
/* Make sure region `id` of the peer is mapped (first use maps it). */
int cre_peer_local_map(cre_peer *p, uint64_t id);
/* Drop the mapping of region `id` (its buffer was unregistered). */
void cre_peer_local_unmap(cre_peer *p, uint64_t id);

/* The mapping of region `id`, or NULL. Caller holds local.map_lock. */
uint8_t *cre_peer_local_find_locked(cre_peer *p, uint64_t id, uint64_t *size);

#endif
