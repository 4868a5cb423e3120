/*
 * admin_keys.h - walks of the object table for the admin port: the listing
 * behind Mooncake's /get_all_keys and the value sizes of /metrics.
 *
 * Threading: thread-safe as the service is (takes each shard's lock in turn;
 * the listing is per shard consistent, not a snapshot of the whole table).
 */
#ifndef CRESCENT_MASTER_ADMIN_KEYS_H
#define CRESCENT_MASTER_ADMIN_KEYS_H

#include <stddef.h>

#include "master/prom.h"
#include "master/prom_mooncake.h"
#include "master/service.h"

/**
 * Append "key\n" to out for every readable (complete) object of the default
 * tenant, as Mooncake lists its default tenant's keys with a readable
 * replica. Keys with a newline byte are skipped (they would break the
 * format; /batch_query_keys still finds them). 0 with *listed (if not
 * NULL) the number listed, or CR_ERR_NO_MEMORY (out keeps what was
 * appended).
 */
int crk_admin_list_keys(crk_service *s, crk_text *out, size_t *listed);

/**
 * The sizes of every readable object (all tenants) in Mooncake's
 * master_value_size_bytes buckets. Never fails.
 */
void crk_admin_value_sizes(crk_service *s, crk_value_sizes *out);

#endif
