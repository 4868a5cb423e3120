/*
 * registry.c - registered buffers: sorted array, rwlock, per-buffer
 * reference counts, and the unregistration barrier described in registry.h.
 */
#include "engine/registry.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "crescent/engine.h"
#include "engine/shared_alloc.h"
#include "proto/messages.h"

int cre_registry_init(cre_registry *r, const cre_registry_hooks *hooks)
{
    memset(r, 0, sizeof(*r));
    if (hooks != NULL)
        r->hooks = *hooks;
    pthread_rwlock_init(&r->lock, NULL);
    pthread_mutex_init(&r->drain_lock, NULL);
    pthread_cond_init(&r->drained, NULL);
    return 0;
}

/* Undo what prepare attached, unpin the shared allocation, free. */
static void buffer_free(cre_registry *r, cre_buffer *b, bool prepared)
{
    if (prepared && r->hooks.release != NULL)
        r->hooks.release(r->hooks.ctx, b);
    for (size_t i = 0; i < CRE_MAX_TRANSPORTS; i++)
        crp_buf_free(&b->tp_blob[i]);
    if (b->shared_id != 0)
        cre_shared_unpin(b->shared_id);
    free(b);
}

void cre_registry_fini(cre_registry *r)
{
    for (size_t i = 0; i < r->count; i++)
        buffer_free(r, r->items[i], true);
    free(r->items);
    pthread_rwlock_destroy(&r->lock);
    pthread_mutex_destroy(&r->drain_lock);
    pthread_cond_destroy(&r->drained);
}

/* Index of the first buffer whose addr > a (caller holds the lock). */
static size_t upper_bound(const cre_registry *r, uint64_t a)
{
    size_t lo = 0, hi = r->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->items[mid]->addr <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int check_overlap(const cre_registry *r, const cre_buffer_spec *s)
{
    size_t i = upper_bound(r, s->addr);
    if (i > 0) {
        const cre_buffer *prev = r->items[i - 1];
        if (prev->addr + prev->length > s->addr)
            return crb_error(CR_ERR_ADDRESS_OVERLAPPED,
                             "[0x%llx, +%llu) overlaps registered [0x%llx, +%llu)",
                             (unsigned long long)s->addr, (unsigned long long)s->length,
                             (unsigned long long)prev->addr, (unsigned long long)prev->length);
    }
    if (i < r->count && r->items[i]->addr < s->addr + s->length)
        return crb_error(
            CR_ERR_ADDRESS_OVERLAPPED, "[0x%llx, +%llu) overlaps registered [0x%llx, +%llu)",
            (unsigned long long)s->addr, (unsigned long long)s->length,
            (unsigned long long)r->items[i]->addr, (unsigned long long)r->items[i]->length);
    return 0;
}

static int insert_sorted(cre_registry *r, cre_buffer *b)
{
    if (r->count == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 16;
        cre_buffer **n = realloc(r->items, ncap * sizeof(*n));
        if (n == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "registry: growing to %zu entries", ncap);
        r->items = n;
        r->cap = ncap;
    }
    size_t i = upper_bound(r, b->addr);
    memmove(&r->items[i + 1], &r->items[i], (r->count - i) * sizeof(*r->items));
    r->items[i] = b;
    r->count++;
    return 0;
}

static void remove_at(cre_registry *r, size_t i)
{
    memmove(&r->items[i], &r->items[i + 1], (r->count - i - 1) * sizeof(*r->items));
    r->count--;
}

static size_t find_exact(const cre_registry *r, uint64_t addr)
{
    size_t i = upper_bound(r, addr);
    if (i > 0 && r->items[i - 1]->addr == addr)
        return i - 1;
    return SIZE_MAX;
}

/* A checked, prepared buffer for spec i (not yet in the table). */
static int buffer_make(cre_registry *r, const cre_buffer_spec *s, size_t i, cre_buffer **out)
{
    if (s->length == 0)
        return crb_error(CR_ERR_ZERO_LENGTH, "buffer %zu at 0x%llx has length 0", i,
                         (unsigned long long)s->addr);
    if (s->addr == 0)
        return crb_error(CR_INVALID_PARAMS, "buffer %zu has a NULL address", i);
    if (s->addr + s->length < s->addr)
        return crb_error(CR_ERR_RANGE_OVERFLOW, "buffer %zu: 0x%llx + %llu overflows", i,
                         (unsigned long long)s->addr, (unsigned long long)s->length);
    cre_buffer *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "registry: allocating buffer %zu", i);
    b->addr = s->addr;
    b->length = s->length;
    b->kind = s->kind;
    b->device = s->device;
    b->remote_accessible = s->remote_accessible;
    b->owner = r;
    atomic_init(&b->refs, 0);
    if (r->hooks.classify != NULL) {
        int rc = r->hooks.classify(r->hooks.ctx, b, s->detect);
        if (rc < 0) {
            free(b);
            return crb_error(rc, "buffer %zu: %s", i, cr_last_error_message());
        }
    }
    if (b->kind == CR_MEM_HOST &&
        cre_shared_pin(b->addr, b->length, &b->shared_id, &b->shared_offset))
        b->kind = CR_MEM_HOST_SHAREABLE;
    if (r->hooks.prepare != NULL) {
        int rc = r->hooks.prepare(r->hooks.ctx, b);
        if (rc < 0) {
            buffer_free(r, b, false);
            return rc;
        }
    }
    b->desc_bytes = CRP_DESC_BUFFER_OVERHEAD;
    for (size_t t = 0; t < CRE_MAX_TRANSPORTS; t++)
        if (b->tp_blob[t].len > 0)
            b->desc_bytes += b->tp_blob[t].len + CRP_DESC_BLOB_OVERHEAD;
    *out = b;
    return 0;
}

int cre_registry_add(cre_registry *r, const cre_buffer_spec *specs, size_t n)
{
    if (n == 0)
        return 0;
    cre_buffer **made = calloc(n, sizeof(*made));
    if (made == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "registry: %zu buffers", n);
    int rc = 0;
    size_t n_made = 0, added = 0, bytes = 0;
    /* Check and prepare outside the lock: preparing may block (pinning
     * memory for a NIC). */
    for (; n_made < n; n_made++) {
        rc = buffer_make(r, &specs[n_made], n_made, &made[n_made]);
        if (rc < 0)
            goto err_free_made;
        bytes += made[n_made]->desc_bytes;
    }
    pthread_rwlock_wrlock(&r->lock);
    if (r->count + n > CRP_MAX_BUFFERS) {
        rc = crb_error(CR_INVALID_PARAMS,
                       "%zu registered + %zu new buffers exceed the limit of %d per engine "
                       "(register fewer, larger regions)",
                       r->count, n, CRP_MAX_BUFFERS);
        goto err_unlock;
    }
    if (r->max_desc_bytes != 0 && r->desc_bytes + bytes > r->max_desc_bytes) {
        rc = crb_error(CR_ERR_DESCRIPTOR_FULL,
                       "%zu more buffers would grow the segment descriptor to about %zu bytes, "
                       "over the %zu peers can fetch (%zu buffers registered; register fewer, "
                       "larger regions)",
                       n, r->desc_bytes + bytes, r->max_desc_bytes, r->count);
        goto err_unlock;
    }
    for (; added < n; added++) {
        cre_buffer_spec s = {.addr = made[added]->addr, .length = made[added]->length};
        rc = check_overlap(r, &s);
        if (rc == 0)
            rc = insert_sorted(r, made[added]);
        if (rc < 0)
            goto err_rollback;
    }
    r->desc_bytes += bytes;
    r->version++;
    pthread_rwlock_unlock(&r->lock);
    free(made);
    return 0;

err_rollback:
    for (size_t i = 0; i < added; i++)
        remove_at(r, find_exact(r, made[i]->addr));
err_unlock:
    pthread_rwlock_unlock(&r->lock);
err_free_made:
    for (size_t i = 0; i < n_made; i++)
        buffer_free(r, made[i], true);
    free(made);
    return rc;
}

int cre_registry_remove(cre_registry *r, uint64_t addr)
{
    pthread_rwlock_wrlock(&r->lock);
    size_t at = find_exact(r, addr);
    if (at == SIZE_MAX) {
        pthread_rwlock_unlock(&r->lock);
        return crb_error(CR_ERR_ADDRESS_NOT_REGISTERED, "unregister: no buffer starts at 0x%llx",
                         (unsigned long long)addr);
    }
    cre_buffer *b = r->items[at];
    atomic_fetch_or(&b->refs, CRE_BUFFER_DYING);
    remove_at(r, at);
    r->desc_bytes -= b->desc_bytes;
    r->version++;
    pthread_rwlock_unlock(&r->lock);
    if (r->hooks.dying != NULL)
        r->hooks.dying(r->hooks.ctx, b);

    /* The last release of a dying buffer broadcasts under drain_lock, and we
     * test the count under it, so the wake-up cannot fall between our test
     * and our sleep. */
    pthread_mutex_lock(&r->drain_lock);
    while ((atomic_load(&b->refs) & ~CRE_BUFFER_DYING) > 0)
        pthread_cond_wait(&r->drained, &r->drain_lock);
    pthread_mutex_unlock(&r->drain_lock);
    buffer_free(r, b, true);
    return 0;
}

static int acquire(cre_registry *r, uint64_t addr, uint64_t len, const char *what, cre_buffer **out,
                   bool quiet_miss);

int cre_registry_acquire(cre_registry *r, uint64_t addr, uint64_t len, const char *what,
                         cre_buffer **out)
{
    return acquire(r, addr, len, what, out, false);
}

int cre_registry_acquire_or_miss(cre_registry *r, uint64_t addr, uint64_t len, const char *what,
                                 cre_buffer **out)
{
    return acquire(r, addr, len, what, out, true);
}

static int acquire(cre_registry *r, uint64_t addr, uint64_t len, const char *what, cre_buffer **out,
                   bool quiet_miss)
{
    if (len == 0)
        return crb_error(CR_ERR_ZERO_LENGTH, "%s range at 0x%llx has length 0", what,
                         (unsigned long long)addr);
    if (addr + len < addr)
        return crb_error(CR_ERR_RANGE_OVERFLOW, "%s range 0x%llx + %llu overflows", what,
                         (unsigned long long)addr, (unsigned long long)len);
    pthread_rwlock_rdlock(&r->lock);
    size_t i = upper_bound(r, addr);
    cre_buffer *b = i > 0 ? r->items[i - 1] : NULL;
    if (b == NULL || addr >= b->addr + b->length) {
        pthread_rwlock_unlock(&r->lock);
        if (quiet_miss)
            return CR_ERR_ADDRESS_NOT_REGISTERED;
        return crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                         "%s range [0x%llx, +%llu) is not in any registered buffer", what,
                         (unsigned long long)addr, (unsigned long long)len);
    }
    if (addr + len > b->addr + b->length) {
        uint64_t base = b->addr, blen = b->length;
        pthread_rwlock_unlock(&r->lock);
        return crb_error(CR_ERR_OUT_OF_RANGE,
                         "%s range [0x%llx, +%llu) runs past buffer [0x%llx, +%llu)", what,
                         (unsigned long long)addr, (unsigned long long)len,
                         (unsigned long long)base, (unsigned long long)blen);
    }
    atomic_fetch_add(&b->refs, 1);
    pthread_rwlock_unlock(&r->lock);
    *out = b;
    return 0;
}

void cre_buffer_release(cre_buffer *b)
{
    /* Once the count reaches 0 an unregistering thread may free b, so read
     * the registry first and touch only it afterwards. The decrement returns
     * the dying bit of the same word: if it was set and this was the last
     * reference, the unregistering thread is waiting (or about to test the
     * count under drain_lock) and is woken under that lock. Reading a
     * separate "dying" flag before the decrement would lose that wake-up
     * when unregistration starts between the read and the decrement. */
    cre_registry *r = b->owner;
    unsigned old = atomic_fetch_sub(&b->refs, 1);
    if (r == NULL) { /* transient: nobody waits for it */
        if (old == 1u)
            free(b);
        return;
    }
    if (old == (CRE_BUFFER_DYING | 1u)) {
        pthread_mutex_lock(&r->drain_lock);
        pthread_cond_broadcast(&r->drained);
        pthread_mutex_unlock(&r->drain_lock);
    }
}

int cre_buffer_transient(uint64_t addr, uint64_t len, cre_buffer **out)
{
    if (len == 0)
        return crb_error(CR_ERR_ZERO_LENGTH, "local range at 0x%llx has length 0",
                         (unsigned long long)addr);
    if (addr + len < addr)
        return crb_error(CR_ERR_RANGE_OVERFLOW, "local range 0x%llx + %llu overflows",
                         (unsigned long long)addr, (unsigned long long)len);
    cre_buffer *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "transient buffer");
    b->addr = addr;
    b->length = len;
    b->kind = CR_MEM_HOST;
    b->device = -1;
    atomic_init(&b->refs, 1);
    *out = b;
    return 0;
}

size_t cre_registry_count(cre_registry *r)
{
    pthread_rwlock_rdlock(&r->lock);
    size_t n = r->count;
    pthread_rwlock_unlock(&r->lock);
    return n;
}

uint64_t cre_registry_version(cre_registry *r)
{
    pthread_rwlock_rdlock(&r->lock);
    uint64_t v = r->version;
    pthread_rwlock_unlock(&r->lock);
    return v;
}

int cre_registry_visit(cre_registry *r,
                       int (*fn)(void *ctx, cre_buffer *const *items, size_t n, uint64_t version),
                       void *ctx)
{
    pthread_rwlock_rdlock(&r->lock);
    int rc = fn(ctx, r->items, r->count, r->version);
    pthread_rwlock_unlock(&r->lock);
    return rc;
}
