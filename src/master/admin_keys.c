/*
 * admin_keys.c - Mooncake's /get_all_keys and the value-size histogram over
 * the master's shards.
 *
 * Design: walks every shard under its own lock (as the per-tenant counts in
 * tenants.c do) and appends the readable default-tenant keys to the caller's
 * text; tenant keys ("\x1f<tenant>\x1f<key>") and objects still being
 * written are left out.
 */
#include "master/admin_keys.h"

#include <pthread.h>
#include <string.h>

#include "base/error.h"
#include "crescent/status.h"
#include "master/internal.h"
#include "master/object_table.h"
#include "master/tenants.h"

int crk_admin_list_keys(crk_service *s, crk_text *out, size_t *listed)
{
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; i < CRK_NUM_SHARDS && rc == 0; i++) {
        crk_shard *sh = &s->shards[i];
        pthread_mutex_lock(&sh->mu);
        for (size_t j = 0; j < sh->nslots && rc == 0; j++) {
            const crk_object *o = sh->slots[j].obj;
            if (o == NULL || !(o->flags & CRK_OBJ_COMPLETE) || o->key[0] == CRK_TENANT_MARK ||
                memchr(o->key, '\n', o->key_len) != NULL)
                continue;
            rc = crk_text_append(out, o->key, o->key_len);
            if (rc == 0)
                rc = crk_text_append(out, "\n", 1);
            n++;
        }
        pthread_mutex_unlock(&sh->mu);
    }
    if (rc != 0)
        return crb_error(CR_ERR_NO_MEMORY, "/get_all_keys: out of memory after %zu keys", n);
    if (listed != NULL)
        *listed = n;
    return 0;
}

void crk_admin_value_sizes(crk_service *s, crk_value_sizes *out)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < CRK_NUM_SHARDS; i++) {
        crk_shard *sh = &s->shards[i];
        pthread_mutex_lock(&sh->mu);
        for (size_t j = 0; j < sh->nslots; j++) {
            const crk_object *o = sh->slots[j].obj;
            if (o == NULL || !(o->flags & CRK_OBJ_COMPLETE))
                continue;
            size_t b = 0;
            while (b < CRK_VALUE_SIZE_BOUNDS && o->size > crk_value_size_bounds[b])
                b++;
            out->counts[b]++;
            out->sum += o->size;
        }
        pthread_mutex_unlock(&sh->mu);
    }
}
