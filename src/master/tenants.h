/*
 * tenants.h - key namespaces per tenant in the master (Mooncake's
 * tenant_id). A request carries its tenant in the RPC's optional "tn"
 * field (proto/rpc.h); no field is the default tenant, which keeps today's
 * behaviour. A tenant's keys are stored under the internal name
 * "\x1f<tenant>\x1f<key>"; default-tenant keys are stored as they are, and
 * a default-tenant key that begins with the reserved byte 0x1F is refused
 * (CR_INVALID_KEY), so no request reaches another tenant's keys. Removal by
 * regex and remove-all are scoped to the caller's tenant (the regex sees
 * the key as the tenant wrote it), and /metrics reports keys and value
 * bytes per tenant.
 *
 * Threading: all functions are thread-safe as the service is.
 */
#ifndef CRESCENT_MASTER_TENANTS_H
#define CRESCENT_MASTER_TENANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master/service.h"

#define CRK_TENANT_MARK   '\x1f'
#define CRK_TENANT_MAX    128 /* bytes of a tenant name */
#define CRK_TENANT_PREFIX (CRK_TENANT_MAX + 2)

/*
 * The internal key prefix of tenant (NULL, "" or "default": the default
 * tenant, prefix ""). Errors: CR_INVALID_PARAMS for a name that is too
 * long or contains the reserved byte.
 */
int crk_tenant_prefix(const char *tenant, char out[CRK_TENANT_PREFIX + 1]);

/*
 * Remove the objects of the namespace `prefix` (from crk_tenant_prefix)
 whose key, without the prefix, matches pattern (NULL: every object),
 * exactly as crk_remove_by_regex / crk_remove_all do (same pattern syntax
 * and budgets, matching outside the shard locks, leased objects only with
 * force, never ones being written). Implemented in objects.c. Counted as
 * REMOVE_BY_REGEX or REMOVE_ALL. Errors: those of crk_remove_by_regex.
 */
int crk_remove_in_namespace(crk_service *s, const char *prefix, const char *pattern, bool force,
                            uint64_t now_ms, uint64_t *removed_out);

/* Keys and value bytes of one tenant ("default" for the default one). */
typedef struct crk_tenant_stat {
    char name[CRK_TENANT_MAX + 1];
    uint64_t keys, bytes;
} crk_tenant_stat;

/*
 * Per-tenant totals of complete objects (writes in flight, put grants among
 * them, are not counted), walking every shard (for /metrics scrapes). Fills up to
 * cap entries and returns how many tenants there are (more than cap: the
 * rest are not reported). The default tenant comes first.
 */
size_t crk_tenant_stats(crk_service *s, crk_tenant_stat *out, size_t cap);

#endif
