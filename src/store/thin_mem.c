/*
 * thin_mem.c - a thin client's memory: the pool memfd, registered regions
 * and the translation of this process's pointers into extents the daemon
 * resolves in its own mapping.
 *
 * The pool is one memfd (pool + local buffer, each rounded up to 2 MiB)
 * mapped MAP_SHARED | MAP_NORESERVE at a 2 MiB-aligned address, like
 * cr_alloc_shared, and sealed against shrinking and growing before it is
 * handed over: the daemon maps the same pages, and a sealed size means no
 * later ftruncate can turn the daemon's accesses into SIGBUS. Pool space is
 * handed out by an offset allocator; staging for copies waits for space
 * only while other staging is in flight (space held by cr_store_pool_alloc
 * may never come back), otherwise the value goes through a transient memfd.
 *
 * Registration of memory outside the pool: the region's mapping is looked
 * up in /proc/self/maps. A shared mapping of a file we can name by a
 * descriptor (the file still has its path, /proc/self/map_files opens it,
 * or one of our descriptors is that file: memfds of cr_alloc_shared,
 * /dev/shm files of other libraries) is passed to the daemon, which maps
 * the same pages: zero-copy. Anything else (malloc, anonymous or private
 * mappings) is a slow-path region: its bytes are copied through the pool
 * on every call and counted. Why not process_vm_readv/writev for those:
 * it needs ptrace rights over this process (Yama's ptrace_scope,
 * containers), it costs the same one copy into memory the daemon can hand
 * to its engine, and the copy here needs no privilege at all.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "store/internal.h"
#include "store/thin.h"

#define AREA_ALIGN (2ull << 20)

static uint64_t round_area(uint64_t v)
{
    if (v < CRC_THIN_MIN_AREA)
        v = CRC_THIN_MIN_AREA;
    return (v + AREA_ALIGN - 1) & ~(AREA_ALIGN - 1);
}

static void *map_aligned(int fd, uint64_t size)
{
    uint8_t *raw = mmap(NULL, size + AREA_ALIGN, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return MAP_FAILED;
    uintptr_t aligned = ((uintptr_t)raw + AREA_ALIGN - 1) & ~(uintptr_t)(AREA_ALIGN - 1);
    void *p = mmap((void *)aligned, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_NORESERVE | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        munmap(raw, size + AREA_ALIGN);
        return MAP_FAILED;
    }
    if (aligned > (uintptr_t)raw)
        munmap(raw, aligned - (uintptr_t)raw);
    uintptr_t end = aligned + size, raw_end = (uintptr_t)raw + size + AREA_ALIGN;
    if (raw_end > end)
        munmap((void *)end, raw_end - end);
    return p;
}

int crc_thin_pool_create(crc_thin *t, uint64_t pool_size, uint64_t lb_size)
{
    if (pool_size > (1ull << 44) || lb_size > (1ull << 44))
        return crb_error(CR_INVALID_PARAMS, "thin pool of %llu + %llu bytes is absurd",
                         (unsigned long long)pool_size, (unsigned long long)lb_size);
    t->pool_size = round_area(pool_size);
    t->lb_size = round_area(lb_size);
    t->map_size = t->pool_size + t->lb_size;
    int rc;
    t->pool_fd = memfd_create("crescent-thin-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (t->pool_fd < 0)
        return crb_error(CR_ERR_SYSTEM, "memfd_create: %s", strerror(errno));
    if (ftruncate(t->pool_fd, (off_t)t->map_size) < 0) {
        rc = crb_error(CR_ERR_NO_MEMORY, "thin pool of %llu bytes: %s",
                       (unsigned long long)t->map_size, strerror(errno));
        goto err_close_fd;
    }
    if (fcntl(t->pool_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        rc = crb_error(CR_ERR_SYSTEM, "sealing the thin pool: %s", strerror(errno));
        goto err_close_fd;
    }
    t->pool = map_aligned(t->pool_fd, t->map_size);
    if (t->pool == MAP_FAILED) {
        t->pool = NULL;
        rc = crb_error(CR_ERR_NO_MEMORY, "mapping the thin pool: %s", strerror(errno));
        goto err_close_fd;
    }
    madvise(t->pool, t->map_size, MADV_HUGEPAGE);
    rc = crb_oa_create(t->pool_size, 64, NULL, &t->pool_oa);
    if (rc < 0)
        goto err_unmap;
    return 0;

err_unmap:
    munmap(t->pool, t->map_size);
    t->pool = NULL;
err_close_fd:
    close(t->pool_fd);
    t->pool_fd = -1;
    return rc;
}

void crc_thin_pool_destroy(crc_thin *t)
{
    crb_oa_destroy(t->pool_oa);
    t->pool_oa = NULL;
    if (t->pool != NULL)
        munmap(t->pool, t->map_size);
    t->pool = NULL;
    if (t->pool_fd >= 0)
        close(t->pool_fd);
    t->pool_fd = -1;
}

int crc_thin_pool_take(crc_thin *t, uint64_t size, bool wait, crb_oa_allocation *out)
{
    if (size == 0 || size > t->pool_size)
        return CR_NO_AVAILABLE_HANDLE;
    uint64_t deadline = crb_now_ms() + t->call_timeout_ms;
    pthread_mutex_lock(&t->pool_lock);
    for (;;) {
        if (crb_oa_alloc(t->pool_oa, size, out) == 0) {
            t->staging_live++;
            pthread_mutex_unlock(&t->pool_lock);
            return 0;
        }
        /* Wait only while other calls' staging can make room: space that
         * cr_store_pool_alloc holds may never come back. */
        if (!wait || t->staging_live == 0 || crb_now_ms() >= deadline)
            break;
        struct timespec ts = crb_deadline_ts(50);
        pthread_cond_timedwait(&t->pool_freed, &t->pool_lock, &ts);
    }
    pthread_mutex_unlock(&t->pool_lock);
    return CR_NO_AVAILABLE_HANDLE;
}

void crc_thin_pool_give(crc_thin *t, const crb_oa_allocation *a)
{
    pthread_mutex_lock(&t->pool_lock);
    crb_oa_free(t->pool_oa, a->node);
    t->staging_live--;
    pthread_cond_broadcast(&t->pool_freed);
    pthread_mutex_unlock(&t->pool_lock);
}

/* --- public pool calls --------------------------------------------------------- */

/* cr_store_pool_alloc hands out extents with their node kept in a header
 * before the returned pointer (64 bytes, so the memory stays aligned). */
#define POOL_HDR 64u

int cr_store_pool_alloc(cr_store *s, size_t size, void **out)
{
    if (s == NULL || out == NULL || size == 0)
        return crb_error(CR_INVALID_PARAMS, "pool_alloc: NULL store/out or size 0");
    if (s->thin == NULL)
        return crb_error(CR_UNAVAILABLE_IN_CURRENT_MODE,
                         "pool_alloc: not a thin client (cr_store_setup_thin)");
    crc_thin *t = s->thin;
    crb_oa_allocation a;
    int rc = CR_NO_AVAILABLE_HANDLE;
    if (size <= t->pool_size - POOL_HDR) {
        pthread_mutex_lock(&t->pool_lock);
        rc = crb_oa_alloc(t->pool_oa, size + POOL_HDR, &a);
        pthread_mutex_unlock(&t->pool_lock);
    }
    if (rc < 0)
        return crb_error(CR_NO_AVAILABLE_HANDLE,
                         "pool_alloc: no free block of %zu bytes in the "
                         "%llu-byte pool",
                         size, (unsigned long long)t->pool_size);
    uint8_t *p = t->pool + a.offset;
    memcpy(p, &a, sizeof(a));
    *out = p + POOL_HDR;
    return 0;
}

int cr_store_pool_free(cr_store *s, void *ptr)
{
    if (ptr == NULL)
        return 0;
    if (s == NULL || s->thin == NULL)
        return crb_error(CR_INVALID_PARAMS, "pool_free: not a thin client");
    crc_thin *t = s->thin;
    uint8_t *p = ptr;
    if (p < t->pool + POOL_HDR || p >= t->pool + t->pool_size)
        return crb_error(CR_INVALID_PARAMS, "pool_free(%p): not pool memory", ptr);
    crb_oa_allocation a;
    memcpy(&a, p - POOL_HDR, sizeof(a));
    if (t->pool + a.offset + POOL_HDR != p)
        return crb_error(CR_INVALID_PARAMS, "pool_free(%p): not from cr_store_pool_alloc", ptr);
    pthread_mutex_lock(&t->pool_lock);
    crb_oa_free(t->pool_oa, a.node);
    pthread_cond_broadcast(&t->pool_freed);
    pthread_mutex_unlock(&t->pool_lock);
    return 0;
}

/* --- transient regions ------------------------------------------------------------ */

int crc_transient_create(uint64_t len, crc_transient *out)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t size = (len + page - 1) / page * page;
    int fd = memfd_create("crescent-thin-value", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return crb_error(CR_ERR_SYSTEM, "memfd_create: %s", strerror(errno));
    if (ftruncate(fd, (off_t)size) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        int e = errno;
        close(fd);
        return crb_error(CR_ERR_NO_MEMORY, "a %llu-byte memfd: %s", (unsigned long long)size,
                         strerror(e));
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return crb_error(CR_ERR_NO_MEMORY, "mapping a %llu-byte memfd: %s",
                         (unsigned long long)size, strerror(e));
    }
    *out = (crc_transient){fd, p, size};
    return 0;
}

void crc_transient_destroy(crc_transient *tr)
{
    if (tr->p != NULL)
        munmap(tr->p, tr->len);
    if (tr->fd >= 0)
        close(tr->fd);
    tr->p = NULL;
    tr->fd = -1;
}

/* --- regions ----------------------------------------------------------------------- */

/* Index of the last region with base <= p, or -1 (reg_lock held). */
static ptrdiff_t region_at(const crc_thin *t, const uint8_t *p)
{
    ptrdiff_t lo = 0, hi = (ptrdiff_t)t->n_regs - 1, found = -1;
    while (lo <= hi) {
        ptrdiff_t mid = (lo + hi) / 2;
        if (t->regs[mid].base <= p) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

int crc_thin_translate(crc_thin *t, const void *p, uint64_t len, crp_thin_ext *ext, crc_reach *how)
{
    const uint8_t *b = p;
    *how = CRC_REACH_DIRECT;
    if (len == 0) {
        *ext = (crp_thin_ext){CRP_THIN_REGION_POOL, 0, 0};
        return 0;
    }
    if (b >= t->pool && b < t->pool + t->pool_size) {
        if (len > (uint64_t)(t->pool + t->pool_size - b))
            return crb_error(CR_ERR_OUT_OF_RANGE, "[%p, +%llu) runs past the thin pool", p,
                             (unsigned long long)len);
        *ext = (crp_thin_ext){CRP_THIN_REGION_POOL, (uint64_t)(b - t->pool), len};
        return 0;
    }
    pthread_rwlock_rdlock(&t->reg_lock);
    ptrdiff_t i = region_at(t, b);
    int rc = 0;
    if (i < 0 || (uint64_t)(b - t->regs[i].base) >= t->regs[i].len) {
        rc = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                       "%p is neither in the thin pool nor in registered memory", p);
    } else if (len > t->regs[i].len - (uint64_t)(b - t->regs[i].base)) {
        rc = crb_error(CR_ERR_OUT_OF_RANGE, "[%p, +%llu) runs past its registered buffer", p,
                       (unsigned long long)len);
    } else if (t->regs[i].kind == CRC_REGION_SHARED && t->regs[i].id_gen == atomic_load(&t->gen)) {
        *ext = (crp_thin_ext){(uint32_t)t->regs[i].daemon_id, (uint64_t)(b - t->regs[i].base), len};
    } else {
        *how = CRC_REACH_SLOW; /* slow path, or a shared region the session lacks */
    }
    pthread_rwlock_unlock(&t->reg_lock);
    return rc;
}

/* Is fd open read-write on the file (ino, dev)? */
static bool is_file_rw(int fd, unsigned long long ino, dev_t dev)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_ino != ino || st.st_dev != dev)
        return false;
    int acc = fcntl(fd, F_GETFL);
    return acc >= 0 && (acc & O_ACCMODE) == O_RDWR;
}

/* The file mapped at [start, end) through /proc/self/map_files, if this
 * process may open it: a descriptor (ours), or -1. */
static int open_map_file(uintptr_t start, uintptr_t end, unsigned long long ino, dev_t dev)
{
    char path[96];
    snprintf(path, sizeof(path), "/proc/self/map_files/%" PRIxPTR "-%" PRIxPTR, start, end);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0 && !is_file_rw(fd, ino, dev)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* A duplicate (ours to close) of one of the process's descriptors open
 * read-write on (ino, dev), or -1. Another thread may close a descriptor
 * and open another file under its number while this scans, so the
 * duplicate itself is checked: it can never name the wrong file. */
static int dup_own_descriptor(unsigned long long ino, dev_t dev)
{
    long max_fd = sysconf(_SC_OPEN_MAX);
    for (int fd = 0; fd < max_fd && fd < 65536; fd++) {
        if (!is_file_rw(fd, ino, dev))
            continue;
        int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (d < 0)
            continue;
        if (is_file_rw(d, ino, dev))
            return d;
        close(d); /* fd was reused meanwhile: keep looking */
    }
    return -1;
}

/* Find the shared file mapping holding [p, p + len): a descriptor of the
 * file (ours to close) and p's offset in it. 0, or -1 when there is none. */
static int find_shared(const void *p, uint64_t len, int *fd_out, uint64_t *off_out)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return -1;
    uintptr_t a = (uintptr_t)p;
    char line[4096 + 256];
    int found = -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        uintptr_t start, end;
        char perms[8];
        unsigned long long off, ino;
        unsigned maj, min;
        int path_at = 0;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %llx %x:%x %llu %n", &start, &end, perms,
                   &off, &maj, &min, &ino, &path_at) < 7)
            continue;
        if (a < start || a >= end)
            continue;
        if (len > end - a || perms[3] != 's' || ino == 0 || path_at == 0)
            break; /* not one shared file mapping */
        char *path = line + path_at;
        path[strcspn(path, "\n")] = '\0';
        dev_t dev = makedev(maj, min);
        uint64_t file_off = off + (a - start);
        struct stat st;
        const char *deleted = strstr(path, " (deleted)");
        if (path[0] == '/' && deleted == NULL) {
            int fd = open(path, O_RDWR | O_CLOEXEC);
            if (fd >= 0 && fstat(fd, &st) == 0 && st.st_ino == ino && st.st_dev == dev) {
                *fd_out = fd;
                *off_out = file_off;
                found = 0;
                break;
            }
            if (fd >= 0)
                close(fd);
        }
        /* The file has no path (a memfd) or lost it: the mapping itself
         * (map_files needs CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN), else
         * one of our descriptors. */
        int fd = open_map_file(start, end, ino, dev);
        if (fd < 0)
            fd = dup_own_descriptor(ino, dev);
        if (fd >= 0) {
            *fd_out = fd;
            *off_out = file_off;
            found = 0;
        }
        break;
    }
    fclose(f);
    return found;
}

/* REGISTER one shared region with the session on conn c (NULL: any);
 * *gen: the session generation the id belongs to. */
static int register_with_daemon(crc_thin *t, crc_thin_conn *c, crc_thin_region *r, uint64_t *id,
                                uint64_t *gen)
{
    crp_thin_req req = {.op = CRP_THIN_REGISTER,
                        .fields = CRP_THIN_F_REGION | CRP_THIN_F_NFD,
                        .addr = (uint64_t)(uintptr_t)r->base,
                        .len = r->len,
                        .file_offset = r->file_offset,
                        .n_fds = 1};
    crp_thin_resp resp;
    int rc;
    if (c != NULL) {
        bool sent;
        rc = crc_thin_conn_call(t, c, &req, &r->fd, 1, &resp, &sent);
        *gen = c->gen;
    } else {
        rc = crc_thin_call(t, &req, &r->fd, 1, &resp, 0, gen);
    }
    if (rc < 0)
        return rc;
    rc = resp.status;
    if (rc < 0)
        crb_error(rc, "crescent-client refused to map [%p, +%llu): %s", (void *)r->base,
                  (unsigned long long)r->len, resp.message ? resp.message : cr_strerror(rc));
    else if (!(resp.fields & CRP_THIN_R_VALUE) || resp.value <= 0 || resp.value > UINT32_MAX)
        rc = crb_error(CR_ERR_MALFORMED_FRAME, "REGISTER answered without a region id");
    else
        *id = (uint64_t)resp.value;
    crp_thin_resp_clear(&resp);
    return rc;
}

int crc_thin_replay_regions(crc_thin *t, crc_thin_conn *c, uint64_t gen)
{
    pthread_rwlock_wrlock(&t->reg_lock);
    int rc = 0;
    for (size_t i = 0; i < t->n_regs && rc == 0; i++) {
        crc_thin_region *r = &t->regs[i];
        if (r->kind != CRC_REGION_SHARED)
            continue;
        uint64_t id, g;
        int one = register_with_daemon(t, c, r, &id, &g);
        if (one == 0) {
            r->daemon_id = id;
            r->id_gen = gen;
        } else if (crc_thin_breaks_conn(one) || one == CR_ERR_DAEMON_UNREACHABLE) {
            rc = one; /* the new session is gone too */
        } else {
            r->id_gen = 0; /* served through the pool from now on */
            crb_log(CRB_LOG_WARN, "thin client: region [%p, +%llu) on the slow path: %s",
                    (void *)r->base, (unsigned long long)r->len, cr_last_error_message());
        }
    }
    pthread_rwlock_unlock(&t->reg_lock);
    return rc;
}

static int regions_insert(crc_thin *t, const crc_thin_region *r)
{
    if (t->n_regs == t->cap_regs) {
        size_t ncap = t->cap_regs ? t->cap_regs * 2 : 16;
        crc_thin_region *nr = realloc(t->regs, ncap * sizeof(*nr));
        if (nr == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "thin region table");
        t->regs = nr;
        t->cap_regs = ncap;
    }
    ptrdiff_t i = region_at(t, r->base) + 1;
    memmove(&t->regs[i + 1], &t->regs[i], (t->n_regs - (size_t)i) * sizeof(*r));
    t->regs[i] = *r;
    t->n_regs++;
    return 0;
}

int crc_thin_register(cr_store *s, void *buf, size_t len)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    if (buf == NULL || len == 0)
        return crb_error(CR_INVALID_PARAMS, "register_buffer: NULL buffer or length 0");
    crc_thin *t = s->thin;
    uint8_t *b = buf;
    if ((uintptr_t)b > UINTPTR_MAX - len)
        return crb_error(CR_ERR_RANGE_OVERFLOW, "register_buffer: [%p, +%zu) overflows", buf, len);
    crc_thin_region r = {.base = b, .len = len, .kind = CRC_REGION_SLOW, .fd = -1};
    bool in_pool = b >= t->pool && b < t->pool + t->map_size;
    if (in_pool) {
        if (b + len > t->pool + t->pool_size)
            return crb_error(CR_ERR_OUT_OF_RANGE, "register_buffer: [%p, +%zu) runs past the pool",
                             buf, len);
        r.kind = CRC_REGION_POOL;
    } else if (find_shared(buf, len, &r.fd, &r.file_offset) == 0) {
        r.kind = CRC_REGION_SHARED;
    }
    /* Overlaps are refused, as the engine refuses them. */
    pthread_rwlock_rdlock(&t->reg_lock);
    ptrdiff_t i = region_at(t, b + len - 1);
    bool overlap = i >= 0 && t->regs[i].base + t->regs[i].len > b;
    pthread_rwlock_unlock(&t->reg_lock);
    if (overlap) {
        if (r.fd >= 0)
            close(r.fd);
        return crb_error(CR_ERR_ADDRESS_OVERLAPPED,
                         "register_buffer: [%p, +%zu) overlaps a registered buffer", buf, len);
    }
    if (r.kind == CRC_REGION_SHARED) {
        uint64_t gen = 0, id = 0;
        rc = register_with_daemon(t, NULL, &r, &id, &gen);
        if (rc == 0) {
            r.daemon_id = id;
            r.id_gen = gen;
        } else if (rc == CR_ERR_DAEMON_UNREACHABLE || rc == CR_ERR_DAEMON_LOST) {
            r.id_gen = 0; /* registered with the next session */
        } else {
            crb_log(CRB_LOG_WARN, "thin client: [%p, +%zu) goes through the pool: %s", buf, len,
                    cr_last_error_message());
            close(r.fd);
            r.fd = -1;
            r.kind = CRC_REGION_SLOW;
        }
    }
    pthread_rwlock_wrlock(&t->reg_lock);
    rc = regions_insert(t, &r);
    pthread_rwlock_unlock(&t->reg_lock);
    if (rc < 0 && r.fd >= 0)
        close(r.fd);
    if (rc == 0 && r.kind == CRC_REGION_SLOW)
        crb_log(CRB_LOG_INFO,
                "thin client: [%p, +%zu) is not shared memory: zero-copy calls on it copy "
                "through the pool (allocate it with cr_alloc_shared or cr_store_pool_alloc)",
                buf, len);
    return rc;
}

int crc_thin_unregister(cr_store *s, void *buf)
{
    int rc = crc_thin_check(s);
    if (rc < 0)
        return rc;
    crc_thin *t = s->thin;
    pthread_rwlock_wrlock(&t->reg_lock);
    ptrdiff_t i = region_at(t, buf);
    if (i < 0 || t->regs[i].base != buf) {
        pthread_rwlock_unlock(&t->reg_lock);
        return crb_error(CR_ERR_ADDRESS_NOT_REGISTERED,
                         "unregister_buffer(%p): no buffer starts "
                         "there",
                         buf);
    }
    crc_thin_region r = t->regs[i];
    memmove(&t->regs[i], &t->regs[i + 1], (t->n_regs - (size_t)i - 1) * sizeof(r));
    t->n_regs--;
    pthread_rwlock_unlock(&t->reg_lock);
    if (r.kind == CRC_REGION_SHARED && r.id_gen == atomic_load(&t->gen) && r.id_gen != 0) {
        crp_thin_req req = {.op = CRP_THIN_UNREGISTER, .fields = CRP_THIN_F_ID, .id = r.daemon_id};
        crp_thin_resp resp;
        if (crc_thin_call(t, &req, NULL, 0, &resp, 0, NULL) == 0)
            crp_thin_resp_clear(&resp);
    }
    if (r.fd >= 0)
        close(r.fd);
    return 0;
}

void crc_thin_regions_free(crc_thin *t)
{
    for (size_t i = 0; i < t->n_regs; i++)
        if (t->regs[i].fd >= 0)
            close(t->regs[i].fd);
    free(t->regs);
    t->regs = NULL;
    t->n_regs = t->cap_regs = 0;
}
