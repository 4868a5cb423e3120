/*
 * ha_repl.c - the leader's side of replication (ha.h, docs/ha.md): the
 * standbys' connections handed over by the RPC server, and the durability
 * wait of a mutation's reply.
 *
 * This step holds each standby's connection open for as long as this master
 * leads: a standby detects the leader's death by the connection's end (and
 * its address refusing new ones), which is what lets it take over at once
 * instead of after the lease TTL. State is not streamed yet: a failover
 * keeps segments (clients remount them) but not objects.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "master/ha_internal.h"

#define MAX_STANDBYS 16

struct crk_ha_log {
    pthread_mutex_t mu;
    int fds[MAX_STANDBYS];
    size_t n;
    bool leading;
};

int crk_ha_log_create(crk_ha *ha)
{
    crk_ha_log *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ha log");
    pthread_mutex_init(&l->mu, NULL);
    ha->log = l;
    return 0;
}

static void close_all_locked(crk_ha_log *l)
{
    for (size_t i = 0; i < l->n; i++)
        close(l->fds[i]);
    l->n = 0;
}

void crk_ha_log_destroy(crk_ha *ha)
{
    crk_ha_log *l = ha->log;
    if (l == NULL)
        return;
    close_all_locked(l);
    pthread_mutex_destroy(&l->mu);
    free(l);
    ha->log = NULL;
}

void crk_ha_log_begin(crk_ha *ha, uint64_t term)
{
    (void)term;
    pthread_mutex_lock(&ha->log->mu);
    ha->log->leading = true;
    pthread_mutex_unlock(&ha->log->mu);
}

void crk_ha_log_end(crk_ha *ha)
{
    if (ha->log == NULL)
        return;
    pthread_mutex_lock(&ha->log->mu);
    ha->log->leading = false;
    close_all_locked(ha->log);
    pthread_mutex_unlock(&ha->log->mu);
}

void crk_ha_log_status(crk_ha *ha, crk_ha_status *st)
{
    pthread_mutex_lock(&ha->log->mu);
    st->standbys = (uint32_t)ha->log->n;
    pthread_mutex_unlock(&ha->log->mu);
}

void crk_ha_take_standby(void *arg, int fd, const uint8_t *body, size_t len)
{
    crk_ha *ha = arg;
    (void)body;
    (void)len;
    crk_ha_log *l = ha->log;
    pthread_mutex_lock(&l->mu);
    if (l->leading && l->n < MAX_STANDBYS) {
        l->fds[l->n++] = fd;
        fd = -1;
    }
    pthread_mutex_unlock(&l->mu);
    if (fd >= 0)
        close(fd); /* not leading (or too many): the standby retries */
}

int crk_ha_wait_durable(crk_ha *ha)
{
    (void)ha;
    return 0;
}

bool crk_ha_op_mutates(unsigned op)
{
    return (op >= 10 && op < 20) || (op >= 30 && op < 60);
}
