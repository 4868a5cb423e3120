/*
 * shared_alloc.c - cr_alloc_shared / cr_free_shared and the process-wide
 * table behind them.
 *
 * An allocation is a memfd of the requested size (rounded up to 2 MiB),
 * mapped MAP_SHARED | MAP_NORESERVE at a 2 MiB-aligned address: nothing is
 * committed until touched, and transparent huge pages can back it where the
 * kernel's shmem THP policy allows (MADV_HUGEPAGE is requested). Same-host
 * peers receive the memfd over a Unix socket and map it themselves.
 *
 * The table is a small array under a mutex: allocations are few and large
 * (store segments, local buffers), and it is consulted only when buffers are
 * registered and when peers first map a region, never per transfer.
 */
#include "engine/shared_alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"
#include "crescent/engine.h"

#define SHARED_ALIGN (2ull << 20)

typedef struct shared_region {
    uint64_t id;
    uint8_t *base;
    uint64_t size;
    int fd;
    int pins;
} shared_region;

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static shared_region *table;
static size_t table_len, table_cap;
static uint64_t next_id = 1;

static shared_region *find_locked(uint64_t addr, uint64_t len)
{
    for (size_t i = 0; i < table_len; i++) {
        shared_region *r = &table[i];
        uint64_t base = (uint64_t)(uintptr_t)r->base;
        if (addr >= base && addr - base < r->size && len <= r->size - (addr - base))
            return r;
    }
    return NULL;
}

/* Reserve size + alignment of address space, then map the memfd at the
 * aligned address inside it and release the slack. */
static void *map_aligned(int fd, uint64_t size)
{
    uint8_t *raw = mmap(NULL, size + SHARED_ALIGN, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return MAP_FAILED;
    uintptr_t aligned = ((uintptr_t)raw + SHARED_ALIGN - 1) & ~(uintptr_t)(SHARED_ALIGN - 1);
    void *p = mmap((void *)aligned, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_NORESERVE | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        munmap(raw, size + SHARED_ALIGN);
        return MAP_FAILED;
    }
    if (aligned > (uintptr_t)raw)
        munmap(raw, aligned - (uintptr_t)raw);
    uintptr_t end = aligned + size, raw_end = (uintptr_t)raw + size + SHARED_ALIGN;
    if (raw_end > end)
        munmap((void *)end, raw_end - end);
    return p;
}

int cr_alloc_shared(size_t size, void **out)
{
    if (out == NULL)
        return crb_error(CR_INVALID_PARAMS, "cr_alloc_shared: out is NULL");
    if (size == 0)
        return crb_error(CR_INVALID_PARAMS, "cr_alloc_shared: size is 0");
    if (size > (1ull << 46))
        return crb_error(CR_INVALID_PARAMS, "cr_alloc_shared: %zu bytes is absurd", size);
    uint64_t rounded = (size + SHARED_ALIGN - 1) & ~(SHARED_ALIGN - 1);
    int fd = memfd_create("crescent-shared", MFD_CLOEXEC);
    if (fd < 0)
        return crb_error(CR_ERR_SYSTEM, "memfd_create: %s", strerror(errno));
    int rc;
    if (ftruncate(fd, (off_t)rounded) < 0) {
        rc = crb_error(CR_ERR_NO_MEMORY, "ftruncate memfd to %llu bytes: %s",
                       (unsigned long long)rounded, strerror(errno));
        goto err_close_fd;
    }
    void *p = map_aligned(fd, rounded);
    if (p == MAP_FAILED) {
        rc = crb_error(CR_ERR_NO_MEMORY, "mmap of %llu shared bytes: %s",
                       (unsigned long long)rounded, strerror(errno));
        goto err_close_fd;
    }
    madvise(p, rounded, MADV_HUGEPAGE); /* a hint; shmem THP policy decides */
    pthread_mutex_lock(&table_lock);
    if (table_len == table_cap) {
        size_t ncap = table_cap ? table_cap * 2 : 16;
        shared_region *nt = realloc(table, ncap * sizeof(*nt));
        if (nt == NULL) {
            pthread_mutex_unlock(&table_lock);
            rc = crb_error(CR_ERR_NO_MEMORY, "shared allocation table");
            goto err_unmap;
        }
        table = nt;
        table_cap = ncap;
    }
    table[table_len++] = (shared_region){next_id++, p, rounded, fd, 0};
    pthread_mutex_unlock(&table_lock);
    *out = p;
    return 0;

err_unmap:
    munmap(p, rounded);
err_close_fd:
    close(fd);
    return rc;
}

int cr_free_shared(void *ptr)
{
    if (ptr == NULL)
        return 0;
    pthread_mutex_lock(&table_lock);
    for (size_t i = 0; i < table_len; i++) {
        if (table[i].base != ptr)
            continue;
        if (table[i].pins > 0) {
            int pins = table[i].pins;
            pthread_mutex_unlock(&table_lock);
            return crb_error(CR_INVALID_PARAMS,
                             "cr_free_shared(%p): %d registered buffer(s) still inside it; "
                             "unregister them first",
                             ptr, pins);
        }
        shared_region r = table[i];
        table[i] = table[--table_len];
        if (table_len == 0) {
            free(table);
            table = NULL;
            table_cap = 0;
        }
        pthread_mutex_unlock(&table_lock);
        munmap(r.base, r.size);
        close(r.fd);
        return 0;
    }
    pthread_mutex_unlock(&table_lock);
    return crb_error(CR_INVALID_PARAMS, "cr_free_shared(%p): not from cr_alloc_shared", ptr);
}

bool cre_shared_pin(uint64_t addr, uint64_t len, uint64_t *id, uint64_t *offset)
{
    pthread_mutex_lock(&table_lock);
    shared_region *r = find_locked(addr, len);
    if (r != NULL) {
        r->pins++;
        *id = r->id;
        *offset = addr - (uint64_t)(uintptr_t)r->base;
    }
    pthread_mutex_unlock(&table_lock);
    return r != NULL;
}

void cre_shared_unpin(uint64_t id)
{
    pthread_mutex_lock(&table_lock);
    for (size_t i = 0; i < table_len; i++)
        if (table[i].id == id && table[i].pins > 0)
            table[i].pins--;
    pthread_mutex_unlock(&table_lock);
}

int cre_shared_dup_fd(uint64_t id, int *fd, uint64_t *size)
{
    pthread_mutex_lock(&table_lock);
    for (size_t i = 0; i < table_len; i++) {
        if (table[i].id != id)
            continue;
        int d = fcntl(table[i].fd, F_DUPFD_CLOEXEC, 0);
        uint64_t sz = table[i].size;
        pthread_mutex_unlock(&table_lock);
        if (d < 0)
            return crb_error(CR_ERR_SYSTEM, "dup of shared region %llu: %s", (unsigned long long)id,
                             strerror(errno));
        *fd = d;
        *size = sz;
        return 0;
    }
    pthread_mutex_unlock(&table_lock);
    return crb_error(CR_ERR_NOT_FOUND, "no shared region %llu", (unsigned long long)id);
}
