/*
 * session.c - crescent-client's sessions: one per thin client process.
 *
 * A session owns our mapping of the client's pool memfd (pool + local
 * buffer, registered with the embedded store so that calls on it are
 * zero-copy), the regions the client registered (other files of the client
 * mapped here), the allocator of the local buffer (where copying gets place
 * values until the client's RELEASE) and the session tables of the ranged
 * API. It ends when its last connection closes, which is also what the
 * kernel does for a thin client that dies: the tables are destroyed (their
 * open put sessions revoked), every region and the pool are unregistered
 * from the engine (a barrier: no transfer touches them afterwards) and
 * unmapped, so nothing of the client stays mapped, open or allocated here.
 *
 * Memory a client hands over is checked before it is mapped: it must be a
 * regular file (memfds are) at least as large as claimed; when clients of
 * other users are served (--allow_any_user) it must also be sealed against
 * shrinking, so that no later ftruncate can make our accesses fault.
 *
 * Regions and tables are reference counted: a call pins what it uses, and
 * an UNREGISTER / TABLE_DESTROY that comes meanwhile on another connection
 * only takes the entry out of the table; the last reference unmaps or
 * destroys it.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "client/daemon.h"

/* --- mapping client memory ----------------------------------------------------- */

int crs_map_client_file(crs_daemon *d, int fd, uid_t uid, uint64_t offset, uint64_t len,
                        uint8_t **map, uint64_t *map_len, uint8_t **base)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return crb_error(CR_ERR_REGION_INVALID, "fstat of the client's descriptor: %s",
                         strerror(errno));
    if (!S_ISREG(st.st_mode))
        return crb_error(CR_ERR_REGION_INVALID, "the client's descriptor is not a regular file");
    if (len == 0 || offset > (uint64_t)st.st_size || len > (uint64_t)st.st_size - offset)
        return crb_error(
            CR_ERR_REGION_INVALID, "[%llu, +%llu) is not inside the client's %lld-byte file",
            (unsigned long long)offset, (unsigned long long)len, (long long)st.st_size);
    if (d->cfg.allow_any_user && uid != d->uid) {
        int seals = fcntl(fd, F_GET_SEALS);
        if (seals < 0 || !(seals & F_SEAL_SHRINK))
            return crb_error(CR_ERR_REGION_INVALID,
                             "memory of uid %u must be a memfd sealed with F_SEAL_SHRINK",
                             (unsigned)uid);
    }
    uint64_t align = (uint64_t)sysconf(_SC_PAGESIZE);
    struct statfs sf;
    if (fstatfs(fd, &sf) == 0 && sf.f_type == HUGETLBFS_MAGIC && st.st_blksize > 0)
        align = (uint64_t)st.st_blksize;
    uint64_t start = offset / align * align;
    uint64_t mlen = (offset - start + len + align - 1) / align * align;
    void *p =
        mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, (off_t)start);
    if (p == MAP_FAILED)
        return crb_error(CR_ERR_REGION_INVALID, "mapping %llu bytes of the client's file: %s",
                         (unsigned long long)mlen, strerror(errno));
    *map = p;
    *map_len = mlen;
    *base = (uint8_t *)p + (offset - start);
    atomic_fetch_add(&d->mapped_bytes, mlen);
    return 0;
}

void crs_unmap_client(crs_daemon *d, uint8_t *map, uint64_t len)
{
    munmap(map, len);
    atomic_fetch_sub(&d->mapped_bytes, len);
}

/* --- sessions ---------------------------------------------------------------------- */

static void session_free(crs_daemon *d, crs_session *s)
{
    if (s->map != NULL) {
        cr_store_unregister_buffer(d->store, s->map);
        crs_unmap_client(d, s->map, s->map_size);
    }
    crb_oa_destroy(s->lb_oa);
    free(s->lb_keys);
    free(s->lb_nodes);
    free(s->regions);
    free(s->tables);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int crs_session_open(crs_daemon *d, crs_conn *c, const crp_thin_req *hello, int fd,
                     crs_session **out)
{
    if (hello->pool_size == 0 || hello->buffer_size == 0 || hello->pool_size > (1ull << 44) ||
        hello->buffer_size > (1ull << 44) || hello->pool_size % 4096 || hello->buffer_size % 4096)
        return crb_error(CR_ERR_REGION_INVALID, "pool of %llu + %llu bytes",
                         (unsigned long long)hello->pool_size,
                         (unsigned long long)hello->buffer_size);
    pthread_mutex_lock(&d->lock);
    size_t live = d->n_sessions;
    pthread_mutex_unlock(&d->lock);
    if (d->cfg.max_clients && live >= d->cfg.max_clients)
        return crb_error(CR_ERR_BUSY,
                         "crescent-client serves %zu thin clients already (at most %u)", live,
                         d->cfg.max_clients);
    crs_session *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "session");
    pthread_mutex_init(&s->mu, NULL);
    s->pid = c->pid;
    s->uid = c->uid;
    s->pool_size = hello->pool_size;
    s->lb_size = hello->buffer_size;
    uint8_t *base;
    int rc = crs_map_client_file(d, fd, c->uid, 0, s->pool_size + s->lb_size, &s->map, &s->map_size,
                                 &base);
    if (rc < 0) {
        session_free(d, s);
        return rc;
    }
    rc = cr_store_register_buffer(d->store, s->map, s->map_size);
    if (rc < 0) {
        crs_unmap_client(d, s->map, s->map_size);
        s->map = NULL;
        session_free(d, s);
        return rc;
    }
    if ((rc = crb_oa_create(s->lb_size, 64, NULL, &s->lb_oa)) < 0) {
        session_free(d, s);
        return rc;
    }
    crb_random_bytes(s->token, sizeof(s->token));
    pthread_mutex_lock(&d->lock);
    if (d->n_sessions == d->cap_sessions) {
        size_t ncap = d->cap_sessions ? d->cap_sessions * 2 : 16;
        crs_session **ns = realloc(d->sessions, ncap * sizeof(*ns));
        if (ns == NULL) {
            pthread_mutex_unlock(&d->lock);
            session_free(d, s);
            return crb_error(CR_ERR_NO_MEMORY, "session table");
        }
        d->sessions = ns;
        d->cap_sessions = ncap;
    }
    s->id = ++d->next_session;
    s->conns = 1;
    d->sessions[d->n_sessions++] = s;
    pthread_mutex_unlock(&d->lock);
    atomic_fetch_add(&d->ctr.sessions_opened, 1);
    crb_log(CRB_LOG_INFO, "crescent-client: session %llu for pid %d (pool %llu + %llu bytes)",
            (unsigned long long)s->id, (int)s->pid, (unsigned long long)s->pool_size,
            (unsigned long long)s->lb_size);
    *out = s;
    return 0;
}

int crs_session_attach(crs_daemon *d, crs_conn *c, const crp_thin_req *hello, crs_session **out)
{
    pthread_mutex_lock(&d->lock);
    crs_session *s = NULL;
    for (size_t i = 0; i < d->n_sessions; i++)
        if (d->sessions[i]->id == hello->session)
            s = d->sessions[i];
    bool ok = s != NULL && s->uid == c->uid &&
              CRYPTO_memcmp(s->token, hello->token, CRP_THIN_TOKEN_SIZE) == 0;
    if (ok)
        s->conns++;
    pthread_mutex_unlock(&d->lock);
    if (!ok)
        return crb_error(CR_ILLEGAL_CLIENT, "no session %llu with that token for uid %u",
                         (unsigned long long)hello->session, (unsigned)c->uid);
    *out = s;
    return 0;
}

static void region_release(crs_daemon *d, crs_region *r)
{
    if (r->registered)
        cr_store_unregister_buffer(d->store, r->base);
    crs_unmap_client(d, r->map, r->map_len);
    atomic_fetch_sub(&d->regions, 1);
    free(r);
}

void crs_session_drop(crs_daemon *d, crs_session *s)
{
    pthread_mutex_lock(&d->lock);
    bool last = --s->conns == 0;
    if (last) {
        for (size_t i = 0; i < d->n_sessions; i++) {
            if (d->sessions[i] == s) {
                d->sessions[i] = d->sessions[--d->n_sessions];
                break;
            }
        }
    }
    pthread_mutex_unlock(&d->lock);
    if (!last)
        return;
    /* No connection is left, so no call of this session runs anywhere. */
    for (size_t i = 0; i < s->n_tables; i++) {
        cr_store_sessions_destroy(s->tables[i]->t); /* revokes its open put sessions */
        free(s->tables[i]);
        atomic_fetch_add(&d->ctr.revoked_tables, 1);
    }
    s->n_tables = 0;
    for (size_t i = 0; i < s->n_regions; i++)
        region_release(d, s->regions[i]);
    s->n_regions = 0;
    atomic_fetch_sub(&d->lb_used, crb_oa_used(s->lb_oa));
    atomic_fetch_add(&d->ctr.sessions_closed, 1);
    crb_log(CRB_LOG_INFO, "crescent-client: session %llu of pid %d ended",
            (unsigned long long)s->id, (int)s->pid);
    session_free(d, s);
}

/* --- extents -------------------------------------------------------------------------- */

int crs_session_resolve(crs_session *s, const crp_thin_ext *e, crs_pins *pins, void **out)
{
    if (e->len == 0) {
        *out = s->map;
        return 0;
    }
    if (e->region == CRP_THIN_REGION_POOL) {
        if (e->offset >= s->pool_size || e->len > s->pool_size - e->offset)
            return crb_error(CR_ERR_OUT_OF_RANGE,
                             "extent [%llu, +%llu) is outside the %llu-byte "
                             "pool",
                             (unsigned long long)e->offset, (unsigned long long)e->len,
                             (unsigned long long)s->pool_size);
        *out = s->map + e->offset;
        return 0;
    }
    pthread_mutex_lock(&s->mu);
    crs_region *r = NULL;
    for (size_t i = 0; i < s->n_regions; i++)
        if (s->regions[i]->id == e->region)
            r = s->regions[i];
    int rc = 0;
    if (r == NULL)
        rc = crb_error(CR_ERR_ADDRESS_NOT_REGISTERED, "no region %u in this session", e->region);
    else if (e->offset >= r->len || e->len > r->len - e->offset)
        rc = crb_error(CR_ERR_OUT_OF_RANGE,
                       "extent [%llu, +%llu) is outside region %u (%llu "
                       "bytes)",
                       (unsigned long long)e->offset, (unsigned long long)e->len, e->region,
                       (unsigned long long)r->len);
    if (rc == 0) {
        size_t k = 0;
        while (k < pins->n && pins->r[k] != r)
            k++;
        if (k == pins->n) {
            if (pins->n == sizeof(pins->r) / sizeof(pins->r[0]))
                rc = crb_error(CR_INVALID_PARAMS, "one call names more than %zu regions",
                               sizeof(pins->r) / sizeof(pins->r[0]));
            else {
                pins->r[pins->n++] = r;
                r->refs++;
            }
        }
    }
    if (rc == 0)
        *out = r->base + e->offset;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void crs_session_unpin_all(crs_daemon *d, crs_session *s, crs_pins *pins)
{
    for (size_t i = 0; i < pins->n; i++) {
        pthread_mutex_lock(&s->mu);
        bool last = --pins->r[i]->refs == 0;
        pthread_mutex_unlock(&s->mu);
        if (last)
            region_release(d, pins->r[i]);
    }
    pins->n = 0;
}

int crs_session_register(crs_daemon *d, crs_session *s, const crp_thin_req *req, int fd,
                         uint32_t *id)
{
    crs_region *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "region");
    int rc = crs_map_client_file(d, fd, s->uid, req->file_offset, req->len, &r->map, &r->map_len,
                                 &r->base);
    if (rc < 0) {
        free(r);
        return rc;
    }
    r->len = req->len;
    rc = cr_store_register_buffer(d->store, r->base, r->len);
    if (rc < 0) {
        crs_unmap_client(d, r->map, r->map_len);
        free(r);
        return rc;
    }
    r->registered = true;
    r->refs = 1;
    atomic_fetch_add(&d->regions, 1);
    pthread_mutex_lock(&s->mu);
    if (s->n_regions == s->cap_regions) {
        size_t ncap = s->cap_regions ? s->cap_regions * 2 : 8;
        crs_region **nr = realloc(s->regions, ncap * sizeof(*nr));
        if (nr == NULL) {
            pthread_mutex_unlock(&s->mu);
            region_release(d, r);
            return crb_error(CR_ERR_NO_MEMORY, "region table");
        }
        s->regions = nr;
        s->cap_regions = ncap;
    }
    r->id = ++s->next_region; /* never 0 (the pool) */
    s->regions[s->n_regions++] = r;
    pthread_mutex_unlock(&s->mu);
    *id = r->id;
    return 0;
}

int crs_session_unregister(crs_daemon *d, crs_session *s, uint32_t id)
{
    pthread_mutex_lock(&s->mu);
    crs_region *r = NULL;
    for (size_t i = 0; i < s->n_regions; i++) {
        if (s->regions[i]->id == id) {
            r = s->regions[i];
            s->regions[i] = s->regions[--s->n_regions];
            break;
        }
    }
    bool last = r != NULL && --r->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (r == NULL)
        return crb_error(CR_ERR_ADDRESS_NOT_REGISTERED, "no region %u in this session", id);
    if (last)
        region_release(d, r);
    return 0;
}

/* --- local buffer ----------------------------------------------------------------------- */

static size_t lb_slot(const crs_session *s, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 7) & (s->lb_cap - 1);
}

/* Insert key -> node (s->mu held); 0 or CR_ERR_NO_MEMORY. */
static int lb_put(crs_session *s, uint64_t key, uint32_t node)
{
    if ((s->lb_count + 1) * 4 > s->lb_cap * 3) {
        size_t ncap = s->lb_cap ? s->lb_cap * 2 : 64;
        uint64_t *nk = malloc(ncap * sizeof(*nk));
        uint32_t *nn = malloc(ncap * sizeof(*nn));
        if (nk == NULL || nn == NULL) {
            free(nk);
            free(nn);
            return CR_ERR_NO_MEMORY;
        }
        for (size_t i = 0; i < ncap; i++)
            nk[i] = UINT64_MAX;
        uint64_t *ok = s->lb_keys;
        uint32_t *on = s->lb_nodes;
        size_t ocap = s->lb_cap;
        s->lb_keys = nk;
        s->lb_nodes = nn;
        s->lb_cap = ncap;
        s->lb_count = 0;
        for (size_t i = 0; i < ocap; i++)
            if (ok[i] != UINT64_MAX)
                lb_put(s, ok[i], on[i]);
        free(ok);
        free(on);
    }
    size_t i = lb_slot(s, key);
    while (s->lb_keys[i] != UINT64_MAX)
        i = (i + 1) & (s->lb_cap - 1);
    s->lb_keys[i] = key;
    s->lb_nodes[i] = node;
    s->lb_count++;
    return 0;
}

/* Remove key (s->mu held): its node, or -1 if absent. */
static int64_t lb_take(crs_session *s, uint64_t key)
{
    if (s->lb_cap == 0 || key == UINT64_MAX)
        return -1;
    size_t i = lb_slot(s, key);
    while (s->lb_keys[i] != key) {
        if (s->lb_keys[i] == UINT64_MAX)
            return -1;
        i = (i + 1) & (s->lb_cap - 1);
    }
    uint32_t node = s->lb_nodes[i];
    /* Back-shift the run so every probe still finds its key. */
    size_t hole = i;
    for (size_t j = (i + 1) & (s->lb_cap - 1); s->lb_keys[j] != UINT64_MAX;
         j = (j + 1) & (s->lb_cap - 1)) {
        size_t home = lb_slot(s, s->lb_keys[j]);
        bool between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!between) {
            s->lb_keys[hole] = s->lb_keys[j];
            s->lb_nodes[hole] = s->lb_nodes[j];
            hole = j;
        }
    }
    s->lb_keys[hole] = UINT64_MAX;
    s->lb_count--;
    return node;
}

int crs_lb_alloc(crs_daemon *d, crs_session *s, uint64_t size, uint64_t *offset)
{
    if (size > s->lb_size)
        return CR_BUFFER_OVERFLOW;
    crb_oa_allocation a;
    pthread_mutex_lock(&s->mu);
    int rc = crb_oa_alloc(s->lb_oa, size, &a);
    if (rc == 0 && lb_put(s, s->pool_size + a.offset, a.node) < 0) {
        crb_oa_free(s->lb_oa, a.node);
        rc = CR_ERR_NO_MEMORY;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc < 0)
        return rc == CR_ERR_NO_MEMORY ? rc : CR_BUFFER_OVERFLOW;
    atomic_fetch_add(&d->lb_used, a.size);
    *offset = s->pool_size + a.offset;
    return 0;
}

void crs_lb_free(crs_daemon *d, crs_session *s, uint64_t offset)
{
    pthread_mutex_lock(&s->mu);
    int64_t node = lb_take(s, offset);
    uint64_t before = crb_oa_used(s->lb_oa);
    if (node >= 0)
        crb_oa_free(s->lb_oa, (uint32_t)node);
    uint64_t freed = before - crb_oa_used(s->lb_oa);
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_sub(&d->lb_used, freed);
}

/* --- session tables ----------------------------------------------------------------------- */

int crs_table_create(crs_daemon *d, crs_session *s, uint32_t *id)
{
    crs_table *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "session table");
    int rc = cr_store_sessions_create(d->store, &t->t);
    if (rc < 0) {
        free(t);
        return rc;
    }
    t->refs = 1;
    pthread_mutex_lock(&s->mu);
    if (s->n_tables == s->cap_tables) {
        size_t ncap = s->cap_tables ? s->cap_tables * 2 : 4;
        crs_table **nt = realloc(s->tables, ncap * sizeof(*nt));
        if (nt == NULL) {
            pthread_mutex_unlock(&s->mu);
            cr_store_sessions_destroy(t->t);
            free(t);
            return crb_error(CR_ERR_NO_MEMORY, "session tables");
        }
        s->tables = nt;
        s->cap_tables = ncap;
    }
    t->id = ++s->next_table;
    s->tables[s->n_tables++] = t;
    pthread_mutex_unlock(&s->mu);
    *id = t->id;
    return 0;
}

crs_table *crs_table_get(crs_session *s, uint32_t id)
{
    pthread_mutex_lock(&s->mu);
    crs_table *t = NULL;
    for (size_t i = 0; i < s->n_tables; i++)
        if (s->tables[i]->id == id)
            t = s->tables[i];
    if (t != NULL)
        t->refs++;
    pthread_mutex_unlock(&s->mu);
    if (t == NULL)
        crb_error(CR_INVALID_PARAMS, "no session table %u", id);
    return t;
}

void crs_table_put(crs_daemon *d, crs_session *s, crs_table *t)
{
    pthread_mutex_lock(&s->mu);
    bool last = --t->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last) {
        cr_store_sessions_destroy(t->t);
        free(t);
    }
}

int crs_table_destroy(crs_daemon *d, crs_session *s, uint32_t id)
{
    pthread_mutex_lock(&s->mu);
    crs_table *t = NULL;
    for (size_t i = 0; i < s->n_tables; i++) {
        if (s->tables[i]->id == id) {
            t = s->tables[i];
            s->tables[i] = s->tables[--s->n_tables];
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (t == NULL)
        return crb_error(CR_INVALID_PARAMS, "no session table %u", id);
    crs_table_put(d, s, t);
    return 0;
}
