/*
 * ctl_page.c - allocation and retirement of control-page slots (see
 * ctl_page.h for the fencing protocol).
 */
#include "engine/transports/shm/ctl_page.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"

int cre_ctl_init(cre_ctl_page *c)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->size = (uint64_t)CRE_CTL_SLOTS * sizeof(cre_ctl_slot);
    int rc;
    c->fd = memfd_create("crescent-ctl", MFD_CLOEXEC);
    if (c->fd < 0)
        return crb_error(CR_ERR_SYSTEM, "memfd_create(ctl): %s", strerror(errno));
    if (ftruncate(c->fd, (off_t)c->size) < 0) {
        rc = crb_error(CR_ERR_SYSTEM, "ftruncate(ctl): %s", strerror(errno));
        goto err_close;
    }
    c->slots = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, c->fd, 0);
    if (c->slots == MAP_FAILED) {
        c->slots = NULL;
        rc = crb_error(CR_ERR_SYSTEM, "mmap(ctl): %s", strerror(errno));
        goto err_close;
    }
    c->free_slots = malloc(CRE_CTL_SLOTS * sizeof(uint32_t));
    if (c->free_slots == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "ctl slot stack");
        goto err_unmap;
    }
    for (uint32_t i = 0; i < CRE_CTL_SLOTS; i++)
        c->free_slots[i] = CRE_CTL_SLOTS - 1 - i;
    c->n_free = CRE_CTL_SLOTS;
    pthread_mutex_init(&c->lock, NULL);
    return 0;
err_unmap:
    munmap(c->slots, c->size);
    c->slots = NULL;
err_close:
    close(c->fd);
    c->fd = -1;
    return rc;
}

void cre_ctl_fini(cre_ctl_page *c)
{
    if (c->slots == NULL)
        return;
    munmap(c->slots, c->size);
    close(c->fd);
    free(c->free_slots);
    pthread_mutex_destroy(&c->lock);
    c->slots = NULL;
}

int cre_ctl_acquire(cre_ctl_page *c, uint32_t *slot, uint64_t *gen)
{
    pthread_mutex_lock(&c->lock);
    if (c->n_free == 0) {
        pthread_mutex_unlock(&c->lock);
        return crb_error(CR_INVALID_PARAMS, "all %d control slots are in use", CRE_CTL_SLOTS);
    }
    uint32_t s = c->free_slots[--c->n_free];
    pthread_mutex_unlock(&c->lock);
    /* A fresh generation: peers holding an older one fail their checks. */
    *gen = atomic_fetch_add(&c->slots[s].gen, 1) + 1;
    *slot = s;
    return 0;
}

void cre_ctl_retire(cre_ctl_page *c, uint32_t slot, uint64_t timeout_ms)
{
    cre_ctl_slot *s = &c->slots[slot];
    atomic_fetch_add(&s->gen, 1);
    uint64_t deadline = crb_now_ms() + timeout_ms;
    /* Peers in a copy are few and short; poll gently (cross-process: no
     * shared condition variable to sleep on). */
    while (atomic_load(&s->users) > 0) {
        if (crb_now_ms() >= deadline) {
            crb_log(CRB_LOG_WARN,
                    "ctl slot %u: a peer is still inside a copy after %llu ms (it may have "
                    "died); retiring the slot for good",
                    slot, (unsigned long long)timeout_ms);
            return; /* never reused: its users count cannot be trusted */
        }
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&c->lock);
    c->free_slots[c->n_free++] = slot;
    pthread_mutex_unlock(&c->lock);
}
