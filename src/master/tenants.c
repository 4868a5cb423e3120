/*
 * tenants.c - tenant namespaces in the master (see tenants.h).
 *
 * Design: tenancy is a naming convention on the object table, applied
 * where requests enter (dispatch.c qualifies the keys of a request with the
 * tenant's prefix), so the object table, eviction, leases and replicas need
 * no change and the default tenant's requests are byte for byte what they
 * were. Removal by pattern or of everything is scoped by objects.c's
 * scans (crk_remove_in_namespace, with their regex budgets and shutdown
 * checks); the per-tenant counts walk the shards here with their locks.
 */
#include "master/tenants.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "master/internal.h"

int crk_tenant_prefix(const char *tenant, char out[CRK_TENANT_PREFIX + 1])
{
    out[0] = '\0';
    if (tenant == NULL || tenant[0] == '\0' || strcmp(tenant, "default") == 0)
        return 0;
    size_t n = strnlen(tenant, CRK_TENANT_MAX + 1);
    if (n > CRK_TENANT_MAX)
        return crb_error(CR_INVALID_PARAMS, "tenant name of more than %d bytes", CRK_TENANT_MAX);
    if (memchr(tenant, CRK_TENANT_MARK, n) != NULL)
        return crb_error(CR_INVALID_PARAMS, "tenant name contains the reserved byte 0x1f");
    out[0] = CRK_TENANT_MARK;
    memcpy(out + 1, tenant, n);
    out[n + 1] = CRK_TENANT_MARK;
    out[n + 2] = '\0';
    return 0;
}

size_t crk_tenant_stats(crk_service *s, crk_tenant_stat *out, size_t cap)
{
    size_t n = 0;
    if (cap > 0) {
        memset(&out[0], 0, sizeof(out[0]));
        snprintf(out[0].name, sizeof(out[0].name), "default");
    }
    n = 1;
    for (size_t i = 0; i < CRK_NUM_SHARDS; i++) {
        crk_shard *sh = &s->shards[i];
        pthread_mutex_lock(&sh->mu);
        for (size_t j = 0; j < sh->nslots; j++) {
            const crk_object *o = sh->slots[j].obj;
            if (o == NULL || !(o->flags & CRK_OBJ_COMPLETE))
                continue; /* a write in flight (a client's put grant among them) is no key yet */
            const char *name = "default";
            size_t len = 7;
            if (o->key[0] == CRK_TENANT_MARK) {
                const char *end = memchr(o->key + 1, CRK_TENANT_MARK, o->key_len - 1u);
                if (end == NULL)
                    continue; /* not a tenant key (cannot be stored: refused) */
                name = o->key + 1;
                len = (size_t)(end - name);
            }
            size_t k = 0;
            for (; k < n && k < cap; k++)
                if (strlen(out[k].name) == len && memcmp(out[k].name, name, len) == 0)
                    break;
            if (k == n) {
                if (n < cap) {
                    memset(&out[k], 0, sizeof(out[k]));
                    memcpy(out[k].name, name, len < CRK_TENANT_MAX ? len : CRK_TENANT_MAX);
                }
                n++;
            }
            if (k < cap) {
                out[k].keys++;
                out[k].bytes += o->size;
            }
        }
        pthread_mutex_unlock(&sh->mu);
    }
    return n;
}
