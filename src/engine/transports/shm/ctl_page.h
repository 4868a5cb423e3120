/*
 * ctl_page.h - per-engine shared control page that fences same-host copies
 * against unregistration.
 *
 * The page is a memfd of slots {gen, users}, one slot per registered buffer.
 * Same-host peers map it read-write once (received with the first region fd)
 * and bracket every direct copy into or out of a buffer:
 *
 *   initiator                              target (unregister)
 *   users += 1           (seq_cst RMW)     gen += 1              (seq_cst)
 *   gen == expected ? else users -= 1,     wait users == 0 (bounded)
 *                     fail                 slot free (or retired if the
 *   memcpy / process_vm_*                    wait ran out: a peer died
 *   gen == expected ? else fail              mid-copy)
 *   users -= 1
 *
 * Sequential consistency gives the Dekker guarantee: either the initiator
 * sees the new generation and copies nothing, or the target sees users > 0
 * and waits until the copy is over. If the bounded wait runs out, the second
 * generation check makes the copy fail visibly instead of reporting
 * success for bytes that went into memory the target has reused.
 */
#ifndef CRESCENT_ENGINE_TRANSPORTS_SHM_CTL_PAGE_H
#define CRESCENT_ENGINE_TRANSPORTS_SHM_CTL_PAGE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define CRE_CTL_SLOTS 32768

typedef struct cre_ctl_slot {
    _Atomic uint64_t gen;
    _Atomic uint64_t users;
} cre_ctl_slot;

typedef struct cre_ctl_page {
    int fd;
    cre_ctl_slot *slots;
    uint64_t size;
    pthread_mutex_t lock;
    uint32_t *free_slots; /* stack of reusable slot indexes */
    uint32_t n_free;
} cre_ctl_page;

int cre_ctl_init(cre_ctl_page *c);
void cre_ctl_fini(cre_ctl_page *c);

/** Take a slot for a newly registered buffer; *gen is its current generation. */
int cre_ctl_acquire(cre_ctl_page *c, uint32_t *slot, uint64_t *gen);

/** Fence a slot at unregistration: bump the generation, wait (at most
 *  timeout_ms) for peers' copies to finish, then recycle it. */
void cre_ctl_retire(cre_ctl_page *c, uint32_t slot, uint64_t timeout_ms);

/** Initiator side: enter a copy if the buffer is still the one we validated. */
static inline bool cre_ctl_enter(cre_ctl_slot *s, uint64_t gen)
{
    atomic_fetch_add(&s->users, 1);
    if (atomic_load(&s->gen) == gen)
        return true;
    atomic_fetch_sub(&s->users, 1);
    return false;
}

/** Initiator side: leave; false if the buffer was retired during the copy. */
static inline bool cre_ctl_leave(cre_ctl_slot *s, uint64_t gen)
{
    bool still = atomic_load(&s->gen) == gen;
    atomic_fetch_sub(&s->users, 1);
    return still;
}

#endif
