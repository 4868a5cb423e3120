/*
 * offload.c - a store client's disk tier (see offload.h).
 *
 * The disk thread's round: (1) free staging slots whose TTL passed; (2) send
 * one OFFLOAD_HEARTBEAT carrying the disk counters, the results of the
 * tasks done since the last one, up to ANNOUNCE_CHUNK re-announced keys
 * (after a restart) and the keys the disk tier evicted; (3) run the tasks of
 * the reply: offloads go to the writer threads' queue, stages with
 * crf_get_batch into the staging area (registered remote-accessible with the
 * engine, so readers pull the bytes through the engine; page-aligned, so the
 * reads are O_DIRECT), removals (only the version the master names), and
 * promotions (a plain put of the value, which the master allows only to the
 * holder). It polls again at once while the master says more tasks wait,
 * else it sleeps until a writer has results to report or the poll interval
 * has passed (BURST_POLL_US instead for BURST_MS after a heartbeat that
 * brought tasks, STAGE_POLL_US after one that brought stages: disk hits come
 * in bursts, and each waits for a poll).
 *
 * With a master that holds requests (CRP_RPC_CAP_STAGE_WAIT) a task thread
 * keeps one heartbeat waiting at the master (empty, "swt" TASK_WAIT_MS): the
 * master answers it as soon as a task is queued for this holder, and the
 * task thread hands the tasks to the disk thread (`got`, under mu), which
 * runs them at once. So a disk hit reaches the holder one round trip after
 * the reader asked, not at the disk thread's next poll (up to 10 ms when it
 * was idle), and the disk thread's polls remain as the fallback.
 *
 * Stages go to the same worker threads, ahead of offloads: a worker takes up
 * to STAGE_CHUNK bytes of queued stages, reads them with one crf_get_batch
 * (the reads in parallel) and reports them at once, so readers take the first
 * staged values while the rest are still being read, and the heartbeat that
 * carries them does not wait for a whole batch (nor delay the next tasks).
 * A stage that finds the staging area full waits in the holder ("parked")
 * until a reader's release (UNSTAGE) or an expiry frees space, for at most
 * PARK_MAX_MS (then it is answered "no space" and the master asks again).
 * Answering "no space" at once sent each reader retry through the master to
 * queue the same stage again, a round trip per retry that found the area
 * still full (the batch_staging test asked the holder 72 times for 32
 * values; now 32). A value larger than the whole staging area
 * (MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES) is staged in an overflow area of
 * the segment's size, allocated and registered at the first such stage, one
 * such value at a time (another is answered "no space" meanwhile, and the
 * master asks again); before, such a value could never be read back once it
 * was on disk.
 *
 * The writers (WRITERS threads) take offloads from the queue in chunks of
 * about WRITE_CHUNK bytes and write each chunk with one crf_put_batch
 * straight from this client's segment memory (the master keeps that memory
 * allocated until the result arrives), then wake the disk thread to report
 * it. So the master frees memory chunk by chunk while the rest of a batch is
 * still being written, the writers' puts refill it meanwhile, and with two
 * chunks in flight the disk never waits for a chunk's results to travel
 * (measured: docs/PERFORMANCE.md, "SSD tier through the store").
 *
 * Each record's metadata is the master's version (8 bytes, little-endian):
 * a re-announce names it, and a removal or stage of another version is not
 * applied to this one.
 */
#include "store/offload.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/offset_allocator.h"
#include "disk/disk.h"
#include "proto/offload.h"
#include "store/internal.h"

#define ANNOUNCE_CHUNK    1024
#define MAX_RESULTS       CRP_OFF_MAX_ITEMS
#define DEFAULT_POLL_MS   10
#define DEFAULT_STAGE     (64ull << 20)
#define DEFAULT_STAGE_TTL 5000
#define BURST_MS          100  /* after a heartbeat that brought tasks, poll every */
#define BURST_POLL_US     1000 /* BURST_POLL_US for this long, STAGE_POLL_US after one */
#define STAGE_POLL_US     250  /* that brought stages (disk hits come in bursts) */
#define TASK_WAIT_MS      100  /* the task thread's heartbeat waits this long at the master */
#define TASK_UNHELD       3    /* replies at once without tasks in a row: the task thread ends */
#define WRITERS           3
#define WRITE_CHUNK       (4ull << 20) /* bytes per crf_put_batch of a writer */
#define WRITE_CHUNK_ITEMS 256          /* and at most this many values */
#define STAGE_CHUNK       (8ull << 20) /* bytes per crf_get_batch of a stage */
#define STAGE_CHUNK_ITEMS 64           /* and at most this many values */
/* A stage waits this long for staging space at most: well under the master's 2 s re-ask, so
 * a parked stage is not read twice (the master would UNSTAGE the first copy at once). */
#define PARK_MAX_MS 1000

typedef struct owned_item {
    crp_off_item it; /* it.key malloc'd */
} owned_item;

typedef struct stage_slot {
    crb_oa_allocation a;
    uint64_t expire_ms;
} stage_slot;

struct crc_offload {
    cr_store *s;
    crf_store *disk;
    crc_master *conn;
    uint8_t *stage;
    uint64_t stage_size, stage_ttl_ms;
    bool stage_registered;
    /* staging slots: allocated by the workers, freed by the disk thread (expiry, UNSTAGE)
     * and the workers (failed reads), under stage_mu */
    pthread_mutex_t stage_mu;
    crb_oa *stage_oa;
    stage_slot *slots;
    size_t n_slots, cap_slots;
    /* the overflow area (big_alloc): one staged value larger than the staging area at a
     * time; big and big_cap are set once, by the worker that holds big_busy (all under
     * stage_mu) */
    uint8_t *big;
    uint64_t big_cap, big_expire_ms;
    bool big_busy; /* stage_mu */
    uint32_t poll_ms;

    pthread_t thread;
    bool running;
    atomic_bool stop;

    /* results and reports to send (disk thread; writers and on_evict under mu); `wake`
     * (with mu) tells the disk thread that results wait */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    owned_item *out;
    size_t n_out, cap_out;

    /* offloads (wq) and stages (sq) waiting for a worker: FIFO rings under wq_mu, `wq_cv`
     * wakes the workers; stages are taken first */
    pthread_mutex_t wq_mu;
    pthread_cond_t wq_cv;
    owned_item *wq;
    size_t wq_head, wq_n, wq_cap;
    owned_item *sq;
    size_t sq_head, sq_n, sq_cap;
    /* stages that found the staging area full, waiting (FIFO ring, wq_mu) for a slot to
     * free: `slots_freed` (set by whoever frees one) sends them back to a worker */
    owned_item *pk;
    size_t pk_head, pk_n, pk_cap;
    atomic_bool slots_freed;
    pthread_t writers[WRITERS];
    size_t n_writers;
    /* recovered keys still to announce */
    owned_item *ann;
    size_t n_ann, ann_pos;

    /* the task thread (CRP_RPC_CAP_STAGE_WAIT): the tasks its held heartbeats brought, for
     * the disk thread (mu; `wake` tells it) */
    pthread_t task_thread;
    bool task_running;
    crp_off_msg *got;
    size_t n_got, cap_got;

    _Atomic uint64_t offloads, offload_failures, stage_reads, promotions, evicted;
    uint64_t last_tasks_ms; /* when a heartbeat last brought tasks (disk thread) */
    uint64_t last_stage_ms; /* and stages */
};

/* --- helpers ------------------------------------------------------------------------ */

static void free_items(owned_item *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].it.key);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    return *end == '\0' ? (uint64_t)x : dflt;
}

static void put_le64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *b, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 8 && i < n; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return n == 8 ? v : 0;
}

/* Queue a result or report (mu held). Dropped when full: the master then times out the
 * task (a stage is asked again, an offload stays pending until the key is written again). */
static void push_out_locked(crc_offload *o, uint8_t kind, int32_t st, const char *key,
                            uint64_t version, uint64_t addr, uint64_t size, uint64_t ttl)
{
    if (o->n_out == o->cap_out) {
        size_t ncap = o->cap_out ? o->cap_out * 2 : 256;
        if (ncap > MAX_RESULTS * 4)
            return;
        owned_item *n = realloc(o->out, ncap * sizeof(*n));
        if (n == NULL)
            return;
        o->out = n;
        o->cap_out = ncap;
    }
    char *k = strdup(key);
    if (k == NULL)
        return;
    o->out[o->n_out++].it = (crp_off_item){kind, st, k, version, addr, size, ttl};
}

static void push_out(crc_offload *o, uint8_t kind, int32_t st, const char *key, uint64_t version,
                     uint64_t addr, uint64_t size, uint64_t ttl)
{
    pthread_mutex_lock(&o->mu);
    push_out_locked(o, kind, st, key, version, addr, size, ttl);
    pthread_cond_signal(&o->wake);
    pthread_mutex_unlock(&o->mu);
}

/* The disk tier's I/O thread: keys it dropped for room. Queue only. */
static void on_evict(void *arg, const crf_key_info *keys, size_t n)
{
    crc_offload *o = arg;
    pthread_mutex_lock(&o->mu);
    for (size_t i = 0; i < n; i++) {
        char key[CRP_OFF_MAX_KEY + 1];
        size_t len = keys[i].key_len < CRP_OFF_MAX_KEY ? keys[i].key_len : CRP_OFF_MAX_KEY;
        memcpy(key, keys[i].key, len);
        key[len] = '\0';
        push_out_locked(o, CRP_OFF_EVICTED, 0, key, get_le64(keys[i].meta, keys[i].meta_len), 0,
                        keys[i].value_len, 0);
    }
    atomic_fetch_add(&o->evicted, n);
    pthread_mutex_unlock(&o->mu);
}

static int collect_recovered(void *arg, const crf_key_info *info)
{
    crc_offload *o = arg;
    if (o->n_ann % 1024 == 0) {
        owned_item *n = realloc(o->ann, (o->n_ann + 1024) * sizeof(*n));
        if (n == NULL)
            return CR_ERR_NO_MEMORY;
        o->ann = n;
    }
    char *k = malloc(info->key_len + 1);
    if (k == NULL)
        return CR_ERR_NO_MEMORY;
    memcpy(k, info->key, info->key_len);
    k[info->key_len] = '\0';
    o->ann[o->n_ann++].it = (crp_off_item){
        CRP_OFF_ANNOUNCE, 0, k, get_le64(info->meta, info->meta_len), 0, info->value_len, 0};
    return 0;
}

/* --- staging -------------------------------------------------------------------------- */

static void wake_parked(crc_offload *o);

/* The overflow area for a staged value larger than the staging area: the holder's segment
 * size (no larger value can have been offloaded here), allocated and registered with the
 * engine at the first such stage and kept until the tier stops (registering a buffer per
 * value made readers' cached descriptors of the holder go stale). One value at a time:
 * CR_NO_AVAILABLE_HANDLE while it is in use (the master asks again). The pages a value
 * touched stay committed until the tier stops. */
static int big_alloc(crc_offload *o, uint64_t size, uint64_t expire_ms, uint8_t **out)
{
    pthread_mutex_lock(&o->stage_mu);
    bool busy = o->big_busy;
    if (!busy) {
        o->big_busy = true;
        o->big_expire_ms = expire_ms;
    }
    uint8_t *big = o->big;
    uint64_t cap = o->big_cap;
    pthread_mutex_unlock(&o->stage_mu);
    if (busy)
        return CR_NO_AVAILABLE_HANDLE;
    int rc = 0;
    if (big == NULL) { /* only this thread can be here: it holds big_busy */
        cap = o->s->segment_size > size ? o->s->segment_size : size;
        cap = (cap + 4095) & ~4095ull;
        void *p = NULL;
        rc = cr_alloc_shared(cap, &p);
        if (rc == 0) {
            rc = cr_engine_register(o->s->engine, p, cap, "cpu:0", true);
            if (rc < 0)
                cr_free_shared(p);
        }
        big = rc == 0 ? p : NULL;
    }
    if (rc == 0 && size > cap)
        rc = crb_error(CR_NO_AVAILABLE_HANDLE, "stage of %llu bytes: larger than the overflow area",
                       (unsigned long long)size);
    pthread_mutex_lock(&o->stage_mu);
    if (big != NULL && o->big == NULL) {
        o->big = big;
        o->big_cap = cap;
    }
    if (rc < 0)
        o->big_busy = false;
    pthread_mutex_unlock(&o->stage_mu);
    if (rc == 0)
        *out = big;
    return rc;
}

static void expire_slots(crc_offload *o, uint64_t now)
{
    bool freed = false;
    pthread_mutex_lock(&o->stage_mu);
    if (o->big_busy && o->big != NULL && o->big_expire_ms <= now)
        o->big_busy = false;
    for (size_t i = 0; i < o->n_slots;) {
        if (o->slots[i].expire_ms > now) {
            i++;
            continue;
        }
        crb_oa_free(o->stage_oa, o->slots[i].a.node);
        o->slots[i] = o->slots[--o->n_slots];
        freed = true;
    }
    pthread_mutex_unlock(&o->stage_mu);
    if (freed)
        wake_parked(o);
}

/* The readers of the staged copy at addr are done. */
static void unstage(crc_offload *o, uint64_t addr)
{
    bool freed = false, big = false;
    pthread_mutex_lock(&o->stage_mu);
    if (o->big_busy && o->big != NULL && (uint64_t)(uintptr_t)o->big == addr)
        o->big_busy = false, big = true;
    for (size_t i = 0; i < o->n_slots && !big; i++) {
        if ((uint64_t)(uintptr_t)(o->stage + o->slots[i].a.offset) == addr) {
            crb_oa_free(o->stage_oa, o->slots[i].a.node);
            o->slots[i] = o->slots[--o->n_slots];
            freed = true;
            break;
        }
    }
    pthread_mutex_unlock(&o->stage_mu);
    if (freed)
        wake_parked(o);
}

/* A staging slot of size bytes, kept until expire_ms (or its UNSTAGE). */
static int stage_alloc(crc_offload *o, uint64_t size, uint64_t expire_ms, crb_oa_allocation *a)
{
    int rc = 0;
    pthread_mutex_lock(&o->stage_mu);
    if (o->n_slots == o->cap_slots) {
        size_t ncap = o->cap_slots ? o->cap_slots * 2 : 64;
        stage_slot *n = realloc(o->slots, ncap * sizeof(*n));
        if (n == NULL)
            rc = CR_ERR_NO_MEMORY;
        else
            o->slots = n, o->cap_slots = ncap;
    }
    if (rc == 0)
        rc = crb_oa_alloc(o->stage_oa, size ? size : 1, a);
    if (rc == 0)
        o->slots[o->n_slots++] = (stage_slot){*a, expire_ms};
    pthread_mutex_unlock(&o->stage_mu);
    return rc;
}

/* --- tasks ---------------------------------------------------------------------------- */

static bool version_matches(crc_offload *o, const char *key, uint64_t version, uint64_t *size)
{
    crf_key_info info;
    if (crf_stat(o->disk, key, strlen(key), &info) != 0)
        return false;
    if (size != NULL)
        *size = info.value_len;
    return version == 0 || get_le64(info.meta, info.meta_len) == version;
}

static bool ring_push(owned_item **ring, size_t *head, size_t *n, size_t *cap,
                      const crp_off_item *t);

/* Someone freed staging space: the parked stages go back to a worker. */
static void wake_parked(crc_offload *o)
{
    atomic_store(&o->slots_freed, true);
    pthread_mutex_lock(&o->wq_mu);
    if (o->pk_n > 0)
        pthread_cond_broadcast(&o->wq_cv);
    pthread_mutex_unlock(&o->wq_mu);
}

/* Keep stage t (a value of size bytes that found no staging space at now) until space
 * frees; false: not parked (it can never fit, it waited PARK_MAX_MS already, or no
 * memory), the caller answers it as failed and the master asks again. In the holder, a
 * queued stage's ttl_ms (unused in a STAGE task) holds when it was first parked. */
static bool park(crc_offload *o, const crp_off_item *t, uint64_t size, uint64_t now)
{
    if (size > o->stage_size || (t->ttl_ms != 0 && t->ttl_ms + PARK_MAX_MS <= now))
        return false;
    crp_off_item c = *t;
    if (c.ttl_ms == 0)
        c.ttl_ms = now ? now : 1;
    pthread_mutex_lock(&o->wq_mu);
    bool ok = ring_push(&o->pk, &o->pk_head, &o->pk_n, &o->pk_cap, &c);
    pthread_cond_broadcast(&o->wq_cv); /* (space may have freed before it was parked) */
    pthread_mutex_unlock(&o->wq_mu);
    return ok;
}

/* The disk thread, each round: a stage parked for PARK_MAX_MS goes back to a worker (which
 * answers it) even when no space freed meanwhile. */
static void wake_stale_parked(crc_offload *o, uint64_t now)
{
    bool stale = false;
    pthread_mutex_lock(&o->wq_mu);
    for (size_t i = 0; i < o->pk_n && !stale; i++)
        stale = o->pk[(o->pk_head + i) % o->pk_cap].it.ttl_ms + PARK_MAX_MS <= now;
    pthread_mutex_unlock(&o->wq_mu);
    if (stale)
        wake_parked(o);
}

/* Stage n values (tasks[0..n), a worker's chunk) with one crf_get_batch: the reads run in
 * parallel. */
static void run_stages(crc_offload *o, const crp_off_item *tasks, size_t n, uint64_t now)
{
    if (n == 0)
        return;
    crf_get_item *gets = calloc(n, sizeof(*gets));
    crb_oa_allocation *al = calloc(n, sizeof(*al));
    int64_t *res = calloc(n, sizeof(*res));
    size_t *which = calloc(n, sizeof(*which));
    uint64_t *sizes = calloc(n, sizeof(*sizes));
    if (gets == NULL || al == NULL || res == NULL || which == NULL || sizes == NULL) {
        for (size_t j = 0; j < n; j++)
            push_out(o, CRP_OFF_STAGE, CR_ERR_NO_MEMORY, tasks[j].key, tasks[j].version, 0, 0, 0);
        goto out;
    }
    size_t m = 0;
    for (size_t j = 0; j < n; j++) {
        const crp_off_item *t = &tasks[j];
        uint64_t size = 0;
        if (!version_matches(o, t->key, t->version, &size)) {
            push_out(o, CRP_OFF_STAGE, CR_OBJECT_NOT_FOUND, t->key, t->version, 0, 0, 0);
            continue;
        }
        if (size > o->stage_size) { /* larger than the staging area: the overflow area */
            uint8_t *dst = NULL;
            int brc = big_alloc(o, size, now + o->stage_ttl_ms, &dst);
            if (brc < 0) {
                push_out(o, CRP_OFF_STAGE, brc, t->key, t->version, 0, 0, 0);
                continue;
            }
            gets[m] = (crf_get_item){t->key, strlen(t->key), dst, size};
            sizes[m] = size;
            which[m++] = j;
            continue;
        }
        if (stage_alloc(o, size, now + o->stage_ttl_ms, &al[m]) < 0) {
            /* full: wait here for a slot to free (readers' releases, expiry), not in a
             * round trip through the reader and the master */
            if (!park(o, t, size, now))
                push_out(o, CRP_OFF_STAGE, CR_NO_AVAILABLE_HANDLE, t->key, t->version, 0, 0, 0);
            continue;
        }
        gets[m] = (crf_get_item){t->key, strlen(t->key), o->stage + al[m].offset, al[m].size};
        sizes[m] = size;
        which[m++] = j;
    }
    int rc = m ? crf_get_batch(o->disk, gets, m, res) : 0;
    for (size_t j = 0; j < m; j++) {
        const crp_off_item *t = &tasks[which[j]];
        int64_t got = rc < 0 ? rc : res[j];
        if (got < 0 || (uint64_t)got != sizes[j]) {
            unstage(o, (uint64_t)(uintptr_t)gets[j].dst);
            push_out(o, CRP_OFF_STAGE, got < 0 ? (int32_t)got : CR_ERR_DISK_IO, t->key, t->version,
                     0, 0, 0);
            continue;
        }
        atomic_fetch_add(&o->stage_reads, 1);
        push_out(o, CRP_OFF_STAGE, 0, t->key, t->version, (uint64_t)(uintptr_t)gets[j].dst,
                 sizes[j], o->stage_ttl_ms);
    }
out:
    free(gets);
    free(al);
    free(res);
    free(which);
    free(sizes);
}

/* The name this store's puts give the master's key `key` (tenant T's key K is "\x1fT\x1fK" at
 * the master, docs/standalone-client.md): K when key is in this store's tenant, NULL when it
 * is in another one's namespace. A promotion is a put through this store's own namespace, so
 * only such a key can be put back where it was; another tenant's stays on disk (staged). */
static const char *own_name(crc_offload *o, const char *key)
{
    const char *tenant = crc_master_tenant(o->s->master);
    size_t n = strlen(tenant);
    if (n == 0)
        return key[0] == '\x1f' ? NULL : key;
    if (key[0] != '\x1f' || strncmp(key + 1, tenant, n) != 0 || key[n + 1] != '\x1f')
        return NULL;
    return key + n + 2;
}

static void run_promote(crc_offload *o, const crp_off_item *t)
{
    uint64_t size = 0;
    int rc = CR_OBJECT_NOT_FOUND;
    const char *name = own_name(o, t->key);
    if (name != NULL && version_matches(o, t->key, t->version, &size)) {
        void *buf = malloc(size ? size : 1);
        rc = CR_ERR_NO_MEMORY;
        if (buf != NULL) {
            int64_t n = crf_get(o->disk, t->key, strlen(t->key), buf, size);
            rc = n < 0 ? (int)n : crc_put_promotion(o->s, name, buf, size);
            free(buf);
        }
    }
    if (rc == 0)
        atomic_fetch_add(&o->promotions, 1);
    push_out(o, CRP_OFF_PROMOTE, rc < 0 ? rc : 0, t->key, t->version, 0, size, 0);
}

static void run_offloads(crc_offload *o, const crp_off_item *tasks, const size_t *idx, size_t n)
{
    /* (tasks[idx[j]], j < n; a writer passes idx NULL: tasks[0..n)) */
    if (n == 0)
        return;
    crf_put_item *items = calloc(n, sizeof(*items));
    uint8_t(*meta)[8] = calloc(n, 8);
    int *res = calloc(n, sizeof(*res));
    if (items == NULL || meta == NULL || res == NULL) {
        for (size_t j = 0; j < n; j++)
            push_out(o, CRP_OFF_OFFLOAD, CR_ERR_NO_MEMORY, tasks[idx ? idx[j] : j].key,
                     tasks[idx ? idx[j] : j].version, 0, 0, 0);
        goto out;
    }
    uint64_t base = (uint64_t)(uintptr_t)o->s->segment, end = base + o->s->segment_size;
    for (size_t j = 0; j < n; j++) {
        const crp_off_item *t = &tasks[idx ? idx[j] : j];
        put_le64(meta[j], t->version);
        bool inside = t->addr >= base && t->size <= end - t->addr && t->addr <= end;
        items[j] = (crf_put_item){t->key,
                                  strlen(t->key),
                                  inside ? (const void *)(uintptr_t)t->addr : NULL,
                                  inside ? t->size : 0,
                                  meta[j],
                                  8};
        res[j] = inside ? 0 : CR_INVALID_PARAMS;
    }
    /* Items outside the segment are not written: a batch of only the good ones. */
    size_t m = 0;
    for (size_t j = 0; j < n; j++)
        if (res[j] == 0)
            items[m++] = items[j];
    int *res2 = calloc(m ? m : 1, sizeof(*res2));
    int rc = res2 == NULL ? CR_ERR_NO_MEMORY : m ? crf_put_batch(o->disk, items, m, res2) : 0;
    for (size_t j = 0, k = 0; j < n; j++) {
        int st = res[j];
        if (st == 0)
            st = rc < 0 ? rc : res2[k++];
        if (st == 0)
            atomic_fetch_add(&o->offloads, 1);
        else
            atomic_fetch_add(&o->offload_failures, 1);
        const crp_off_item *t = &tasks[idx ? idx[j] : j];
        push_out(o, CRP_OFF_OFFLOAD, st, t->key, t->version, 0, t->size, 0);
    }
    free(res2);
out:
    free(items);
    free(meta);
    free(res);
}

/* Append a copy of t to a worker ring (wq_mu held); false: no memory. */
static bool ring_push(owned_item **ring, size_t *head, size_t *n, size_t *cap,
                      const crp_off_item *t)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 256;
        owned_item *q = malloc(ncap * sizeof(*q));
        if (q == NULL)
            return false;
        for (size_t i = 0; i < *n; i++)
            q[i] = (*ring)[(*head + i) % *cap];
        free(*ring);
        *ring = q;
        *cap = ncap;
        *head = 0;
    }
    char *k = strdup(t->key);
    if (k == NULL)
        return false;
    crp_off_item it = *t;
    it.key = k;
    (*ring)[(*head + (*n)++) % *cap].it = it;
    return true;
}

/* Take up to max_items queued items of up to about max_bytes (at least one) from a worker
 * ring into chunk (wq_mu held); returns how many. */
static size_t ring_take(owned_item *ring, size_t *head, size_t *n, size_t cap, crp_off_item *chunk,
                        size_t max_items, uint64_t max_bytes)
{
    size_t k = 0;
    uint64_t bytes = 0;
    while (*n > 0 && k < max_items && (k == 0 || bytes < max_bytes)) {
        chunk[k] = ring[*head].it;
        bytes += chunk[k++].size;
        *head = (*head + 1) % cap;
        (*n)--;
    }
    return k;
}

/* Hand n offloads and stages (tasks[idx[0..n)]) to the workers. One that cannot be queued
 * (no memory) is answered as failed: the master then drops or keeps the object as for a
 * failed write, or asks for the stage again. */
static void queue_tasks(crc_offload *o, const crp_off_item *tasks, const size_t *idx, size_t n)
{
    if (n == 0)
        return;
    pthread_mutex_lock(&o->wq_mu);
    for (size_t j = 0; j < n; j++) {
        const crp_off_item *t = &tasks[idx[j]];
        bool stage = t->kind == CRP_OFF_STAGE;
        if (stage ? ring_push(&o->sq, &o->sq_head, &o->sq_n, &o->sq_cap, t)
                  : ring_push(&o->wq, &o->wq_head, &o->wq_n, &o->wq_cap, t))
            continue;
        push_out(o, t->kind, CR_ERR_NO_MEMORY, t->key, t->version, 0, stage ? 0 : t->size, 0);
        if (!stage)
            atomic_fetch_add(&o->offload_failures, 1);
    }
    pthread_cond_broadcast(&o->wq_cv);
    pthread_mutex_unlock(&o->wq_mu);
}

/* A worker: chunks of queued stages (first: a reader waits), each one crf_get_batch, and
 * of queued offloads, each one crf_put_batch; results reported at once. */
static void *writer_main(void *arg)
{
    crc_offload *o = arg;
    crp_off_item *chunk = calloc(WRITE_CHUNK_ITEMS, sizeof(*chunk));
    pthread_mutex_lock(&o->wq_mu);
    while (!atomic_load(&o->stop)) {
        /* parked stages once space freed (they are older), then new stages, then offloads */
        bool parked = o->pk_n > 0 && atomic_load(&o->slots_freed);
        if ((o->wq_n == 0 && o->sq_n == 0 && !parked) || chunk == NULL) {
            pthread_cond_wait(&o->wq_cv, &o->wq_mu);
            continue;
        }
        if (parked)
            atomic_store(&o->slots_freed, false); /* (a later free sets it again) */
        bool stage = parked || o->sq_n > 0;
        size_t n = parked  ? ring_take(o->pk, &o->pk_head, &o->pk_n, o->pk_cap, chunk,
                                       STAGE_CHUNK_ITEMS, STAGE_CHUNK)
                   : stage ? ring_take(o->sq, &o->sq_head, &o->sq_n, o->sq_cap, chunk,
                                       STAGE_CHUNK_ITEMS, STAGE_CHUNK)
                           : ring_take(o->wq, &o->wq_head, &o->wq_n, o->wq_cap, chunk,
                                       WRITE_CHUNK_ITEMS, WRITE_CHUNK);
        pthread_mutex_unlock(&o->wq_mu);
        if (stage)
            run_stages(o, chunk, n, crb_now_ms());
        else
            run_offloads(o, chunk, NULL, n);
        for (size_t i = 0; i < n; i++)
            free(chunk[i].key);
        pthread_mutex_lock(&o->wq_mu);
    }
    pthread_mutex_unlock(&o->wq_mu);
    free(chunk);
    return NULL;
}

static void run_tasks(crc_offload *o, const crp_off_msg *m)
{
    size_t *offload_idx = calloc(m->n_items ? m->n_items : 1, sizeof(*offload_idx));
    size_t n_off = 0;
    for (size_t i = 0; i < m->n_items; i++) {
        const crp_off_item *t = &m->items[i];
        switch (t->kind) {
        case CRP_OFF_OFFLOAD:
        case CRP_OFF_STAGE:
            if (offload_idx != NULL)
                offload_idx[n_off++] = i;
            break;
        case CRP_OFF_REMOVE:
            if (version_matches(o, t->key, t->version, NULL))
                (void)crf_remove(o->disk, t->key, strlen(t->key));
            break;
        case CRP_OFF_UNSTAGE:
            unstage(o, t->addr);
            break;
        default:
            break;
        }
    }
    /* Offloads and stages to the workers (the disk starts on them at once). Promotions
     * last: they need the memory the offloads release. */
    queue_tasks(o, m->items, offload_idx, n_off);
    for (size_t i = 0; i < m->n_items; i++)
        if (m->items[i].kind == CRP_OFF_PROMOTE)
            run_promote(o, &m->items[i]);
    free(offload_idx);
}

/* --- the disk thread ----------------------------------------------------------------------- */

static void fill_stats(crc_offload *o, crp_off_msg *m)
{
    crf_stats st;
    crf_get_stats(o->disk, &st);
    m->n_stats = CRP_OFF_NSTATS;
    m->stats[CRP_OFF_STAT_KEYS] = st.keys;
    m->stats[CRP_OFF_STAT_BYTES] = st.file_bytes;
    m->stats[CRP_OFF_STAT_CAPACITY] = st.capacity_bytes;
    m->stats[CRP_OFF_STAT_READS] = atomic_load(&o->stage_reads) + atomic_load(&o->promotions);
    m->stats[CRP_OFF_STAT_WRITES] = atomic_load(&o->offloads);
    m->stats[CRP_OFF_STAT_COMPACTIONS] = st.compactions;
    m->stats[CRP_OFF_STAT_EVICTED] = st.evicted_keys;
}

/* Take up to max queued results (mu held by the caller). */
static owned_item *take_out_locked(crc_offload *o, size_t max, size_t *n_out)
{
    size_t n = o->n_out < max ? o->n_out : max;
    owned_item *v = NULL;
    if (n > 0 && (v = malloc(n * sizeof(*v))) != NULL) {
        memcpy(v, o->out, n * sizeof(*v));
        memmove(o->out, o->out + n, (o->n_out - n) * sizeof(*v));
        o->n_out -= n;
    } else {
        n = 0;
    }
    *n_out = n;
    return v;
}

/* Put results that could not be sent back in front of the queue (mu held). */
static void requeue_locked(crc_offload *o, owned_item *v, size_t n)
{
    if (n == 0)
        return; /* (o->out may still be NULL) */
    if (o->n_out + n > o->cap_out) {
        owned_item *g = realloc(o->out, (o->n_out + n) * sizeof(*g));
        if (g == NULL) {
            free_items(v, n);
            return;
        }
        o->out = g;
        o->cap_out = o->n_out + n;
    }
    memmove(o->out + n, o->out, o->n_out * sizeof(*v));
    memcpy(o->out, v, n * sizeof(*v));
    o->n_out += n;
}

/* Run the tasks the task thread's held heartbeats brought (disk thread): true when the master
 * said more wait. */
static bool run_got_tasks(crc_offload *o)
{
    pthread_mutex_lock(&o->mu);
    crp_off_msg *got = o->got;
    size_t n = o->n_got;
    o->got = NULL;
    o->n_got = o->cap_got = 0;
    pthread_mutex_unlock(&o->mu);
    bool more = false;
    for (size_t i = 0; i < n; i++) {
        o->last_tasks_ms = crb_now_ms();
        for (size_t k = 0; k < got[i].n_items; k++)
            if (got[i].items[k].kind == CRP_OFF_STAGE)
                o->last_stage_ms = o->last_tasks_ms;
        run_tasks(o, &got[i]);
        more = more || got[i].more;
        crp_off_clear(&got[i]);
    }
    free(got);
    return more;
}

/* One heartbeat: 1 = poll again at once, 0 = wait, < 0 = the call failed. */
static int heartbeat(crc_offload *o)
{
    crp_off_msg m = {.segment = o->s->segment_name};
    fill_stats(o, &m);
    size_t n_sent = 0;
    pthread_mutex_lock(&o->mu);
    owned_item *sent = take_out_locked(o, CRP_OFF_MAX_ITEMS - ANNOUNCE_CHUNK, &n_sent);
    pthread_mutex_unlock(&o->mu);

    size_t n_ann = o->n_ann - o->ann_pos < ANNOUNCE_CHUNK ? o->n_ann - o->ann_pos : ANNOUNCE_CHUNK;
    crp_off_item *items = calloc(n_sent + n_ann + 1, sizeof(*items));
    crp_buf body = {0};
    int rc = items == NULL ? crb_error(CR_ERR_NO_MEMORY, "offload heartbeat") : 0;
    if (rc == 0) {
        for (size_t i = 0; i < n_sent; i++)
            items[i] = sent[i].it;
        for (size_t i = 0; i < n_ann; i++)
            items[n_sent + i] = o->ann[o->ann_pos + i].it;
        m.items = items;
        m.n_items = n_sent + n_ann;
        rc = crp_off_encode(&m, &body);
    }
    crp_rpc_resp resp;
    memset(&resp, 0, sizeof(resp));
    if (rc == 0) {
        crp_rpc_req req = {.op = CRP_RPC_OFFLOAD_HEARTBEAT};
        req.u.blob = (crp_rpc_blob_req){o->s->client_id, body.len, body.data};
        rc = crc_master_call(o->conn, &req, &resp, (int)o->s->rpc_timeout_ms);
        if (rc == 0 && resp.status < 0) {
            rc = crb_error(resp.status, "offload heartbeat: %s",
                           resp.message ? resp.message : cr_strerror(resp.status));
            crp_rpc_resp_clear(&resp);
        }
    }
    free(items);
    crp_buf_free(&body);
    if (rc < 0) { /* sent again next round: an offload result must reach the master */
        pthread_mutex_lock(&o->mu);
        requeue_locked(o, sent, n_sent);
        pthread_mutex_unlock(&o->mu);
        free(sent);
        return rc;
    }
    free_items(sent, n_sent);
    free(sent);
    for (size_t i = 0; i < n_ann; i++)
        free(o->ann[o->ann_pos + i].it.key);
    o->ann_pos += n_ann;
    crp_off_msg tasks;
    rc = crp_off_decode(resp.u.blob.data, resp.u.blob.len, &tasks);
    crp_rpc_resp_clear(&resp);
    if (rc < 0)
        return rc;
    if (tasks.n_items > 0)
        o->last_tasks_ms = crb_now_ms();
    for (size_t i = 0; i < tasks.n_items; i++)
        if (tasks.items[i].kind == CRP_OFF_STAGE)
            o->last_stage_ms = o->last_tasks_ms;
    /* tasks the task thread was handed meanwhile were taken from the mailbox first (the
     * versions in every task make the order safe either way; this keeps it where it can) */
    bool more = run_got_tasks(o);
    run_tasks(o, &tasks);
    bool again = more || tasks.more || tasks.n_items > 0 || o->ann_pos < o->n_ann;
    crp_off_clear(&tasks);
    pthread_mutex_lock(&o->mu);
    again = again || o->n_out > 0;
    pthread_mutex_unlock(&o->mu);
    return again ? 1 : 0;
}

/* Hand a held heartbeat's tasks to the disk thread (task thread): false without memory for
 * the list (the caller keeps them and tries again). */
static bool hand_tasks(crc_offload *o, crp_off_msg *tasks)
{
    pthread_mutex_lock(&o->mu);
    bool ok = true;
    if (o->n_got == o->cap_got) {
        size_t cap = o->cap_got ? 2 * o->cap_got : 4;
        crp_off_msg *g = realloc(o->got, cap * sizeof(*g));
        ok = g != NULL;
        if (ok) {
            o->got = g;
            o->cap_got = cap;
        }
    }
    if (ok) {
        o->got[o->n_got++] = *tasks;
        pthread_cond_broadcast(&o->wake);
    }
    pthread_mutex_unlock(&o->mu);
    return ok;
}

/* The task thread: one empty heartbeat at a time held at the master until a task is queued
 * for this holder (or TASK_WAIT_MS pass); its tasks go to the disk thread. A reply that came
 * back at once without tasks (a master that did not hold it: its limits, or HA, where a
 * heartbeat is a replicated change answered at once) or a failed call is followed by a pause,
 * so this never spins; after TASK_UNHELD such replies in a row it ends (the disk thread's
 * polls bring the tasks, as without the capability). */
static void *task_main(void *arg)
{
    crc_offload *o = arg;
    unsigned unheld = 0;
    while (!atomic_load(&o->stop)) {
        crp_off_msg m = {.segment = o->s->segment_name};
        crp_buf body = {0};
        crp_rpc_resp resp;
        memset(&resp, 0, sizeof(resp));
        uint64_t t0 = crb_now_ms();
        int rc = crp_off_encode(&m, &body);
        if (rc == 0) {
            crp_rpc_req req = {.op = CRP_RPC_OFFLOAD_HEARTBEAT};
            req.u.blob = (crp_rpc_blob_req){o->s->client_id, body.len, body.data};
            req.stage_wait_ms = TASK_WAIT_MS;
            rc = crc_master_call(o->conn, &req, &resp, (int)o->s->rpc_timeout_ms);
            if (rc == 0 && resp.status < 0) {
                rc = resp.status;
                crp_rpc_resp_clear(&resp);
            }
        }
        crp_buf_free(&body);
        bool got = false;
        if (rc == 0) {
            crp_off_msg tasks;
            rc = crp_off_decode(resp.u.blob.data, resp.u.blob.len, &tasks);
            crp_rpc_resp_clear(&resp);
            got = rc == 0 && (tasks.n_items > 0 || tasks.more);
            /* tasks taken from the master's mailbox are never dropped here: without memory
             * to hand them over, wait for the disk thread to drain the list (or the stop) */
            bool handed = false;
            while (got && !(handed = hand_tasks(o, &tasks)) && !atomic_load(&o->stop))
                nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
            if (rc == 0 && !handed)
                crp_off_clear(&tasks);
        }
        if (got || (rc == 0 && crb_now_ms() - t0 >= TASK_WAIT_MS / 2)) {
            unheld = 0;
            continue;
        }
        if (rc == 0 && ++unheld >= TASK_UNHELD) {
            crb_log(CRB_LOG_INFO,
                    "store %s: disk tier: the master answers heartbeats at once (HA?): its "
                    "tasks come with the polls",
                    o->s->segment_name);
            break;
        }
        struct timespec ts = crb_deadline_ts(rc < 0 ? 200 : o->poll_ms);
        pthread_mutex_lock(&o->mu);
        while (!atomic_load(&o->stop))
            if (pthread_cond_timedwait(&o->wake, &o->mu, &ts) != 0)
                break;
        pthread_mutex_unlock(&o->mu);
    }
    return NULL;
}

/* Sleep up to us, or (on_results) until a writer has results to report, or until the task
 * thread handed tasks over; or stop. */
static void nap(crc_offload *o, uint64_t us, bool on_results)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(us / 1000000);
    ts.tv_nsec += (long)(us % 1000000) * 1000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&o->mu);
    while ((!on_results || o->n_out == 0) && o->n_got == 0 && !atomic_load(&o->stop))
        if (pthread_cond_timedwait(&o->wake, &o->mu, &ts) != 0)
            break;
    pthread_mutex_unlock(&o->mu);
}

static void *disk_main(void *arg)
{
    crc_offload *o = arg;
    int last_rc = 0;
    while (!atomic_load(&o->stop)) {
        expire_slots(o, crb_now_ms());
        wake_stale_parked(o, crb_now_ms());
        bool more = run_got_tasks(o);
        int rc = heartbeat(o);
        if (rc == 0 && more)
            rc = 1; /* the master said more tasks wait */
        if (rc < 0 && rc != last_rc)
            crb_log(CRB_LOG_WARN, "store %s: disk tier: %s", o->s->segment_name,
                    cr_last_error_message());
        last_rc = rc < 0 ? rc : 0;
        if (rc == 1)
            continue;
        /* (results waiting do not make a failing master answer sooner) */
        uint64_t us = (uint64_t)o->poll_ms * 1000, now = crb_now_ms();
        if (now - o->last_tasks_ms < BURST_MS && us > BURST_POLL_US)
            us = BURST_POLL_US; /* the next task of a burst is picked up sooner */
        if (now - o->last_stage_ms < BURST_MS && us > STAGE_POLL_US)
            us = STAGE_POLL_US; /* and the next disk hit sooner still */
        nap(o, rc < 0 ? 200000 : us, rc == 0);
    }
    return NULL;
}

/* --- lifecycle ---------------------------------------------------------------------------- */

static void destroy_sync(crc_offload *o)
{
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->wake);
    pthread_mutex_destroy(&o->wq_mu);
    pthread_cond_destroy(&o->wq_cv);
    pthread_mutex_destroy(&o->stage_mu);
}

int crc_off_start(cr_store *s, const char *path, crc_offload **out)
{
    if (path == NULL || *path == '\0')
        path = getenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH");
    if (path == NULL || *path == '\0')
        return crb_error(CR_INVALID_PARAMS, "enable_ssd_offload: no ssd_offload_path and no "
                                            "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH");
    if (s->segment_size == 0)
        return crb_error(CR_INVALID_PARAMS,
                         "enable_ssd_offload: this client contributes no segment "
                         "(global_segment_size 0), so nothing is ever offloaded from it");
    crc_offload *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "disk tier");
    o->s = s;
    pthread_mutex_init(&o->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&o->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&o->wq_mu, NULL);
    pthread_cond_init(&o->wq_cv, NULL);
    pthread_mutex_init(&o->stage_mu, NULL);
    o->poll_ms = (uint32_t)env_u64("CRESCENT_OFFLOAD_POLL_MS", DEFAULT_POLL_MS);
    if (o->poll_ms == 0 || o->poll_ms > 10000)
        o->poll_ms = DEFAULT_POLL_MS;
    o->stage_ttl_ms = env_u64("MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS", DEFAULT_STAGE_TTL);
    if (o->stage_ttl_ms < 2000)
        o->stage_ttl_ms = 2000; /* the master hands a staged copy out for ttl - 1 s */
    o->stage_size = env_u64("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", DEFAULT_STAGE);
    o->stage_size = (o->stage_size + 4095) & ~4095ull;
    if (o->stage_size < (1u << 20))
        o->stage_size = 1u << 20;

    crf_config cfg;
    crf_config_init(&cfg);
    int rc = crf_config_from_env(&cfg);
    if (rc < 0)
        goto err_free;
    cfg.path = path;
    cfg.on_evict = on_evict;
    cfg.on_evict_arg = o;
    rc = crf_open(&cfg, &o->disk);
    if (rc < 0)
        goto err_free;
    rc = cr_alloc_shared(o->stage_size, (void **)&o->stage);
    if (rc == 0)
        rc = cr_engine_register(s->engine, o->stage, o->stage_size, "cpu:0", true);
    if (rc == 0)
        o->stage_registered = true;
    if (rc == 0)
        rc = crb_oa_create(o->stage_size, 4096, NULL, &o->stage_oa);
    if (rc == 0)
        rc = crf_for_each(o->disk, collect_recovered, o);
    if (rc == 0)
        rc = crc_master_connect(s->master_address, s->client_id, (int)s->rpc_timeout_ms, &o->conn);
    if (rc < 0)
        goto err_stop;
    if (!(crc_master_caps(o->conn) & CRP_RPC_CAP_OFFLOAD))
        crb_log(CRB_LOG_WARN, "store %s: the master does not offer the disk tier", s->segment_name);
    for (; o->n_writers < WRITERS; o->n_writers++) {
        if (pthread_create(&o->writers[o->n_writers], NULL, writer_main, o) != 0) {
            rc = crb_error(CR_ERR_SYSTEM, "starting the disk tier's writer threads");
            goto err_stop;
        }
    }
    if (pthread_create(&o->thread, NULL, disk_main, o) != 0) {
        rc = crb_error(CR_ERR_SYSTEM, "starting the disk thread");
        goto err_stop;
    }
    o->running = true;
    if ((crc_master_caps(o->conn) & CRP_RPC_CAP_STAGE_WAIT) &&
        env_u64("CRESCENT_OFFLOAD_TASK_WAIT", 1) != 0) { /* 0: poll only (for comparisons) */
        if (pthread_create(&o->task_thread, NULL, task_main, o) != 0) {
            rc = crb_error(CR_ERR_SYSTEM, "starting the disk tier's task thread");
            goto err_stop;
        }
        o->task_running = true;
    }
    crf_stats st;
    crf_get_stats(o->disk, &st);
    crb_log(CRB_LOG_INFO,
            "store %s: disk tier at %s: %llu recovered keys, %llu bytes, capacity %llu, %s",
            s->segment_name, path, (unsigned long long)st.keys, (unsigned long long)st.file_bytes,
            (unsigned long long)st.capacity_bytes, st.io_reason);
    *out = o;
    return 0;

err_stop : {
    char detail[512];
    snprintf(detail, sizeof(detail), "%s", cr_last_error_message());
    crc_off_stop(s, o);
    return crb_error(rc, "disk tier at %s: %s", path, detail);
}
err_free:
    destroy_sync(o);
    free(o);
    return rc;
}

void crc_off_stop(cr_store *s, crc_offload *o)
{
    if (o == NULL)
        return;
    atomic_store(&o->stop, true);
    pthread_mutex_lock(&o->mu);
    pthread_cond_broadcast(&o->wake);
    pthread_mutex_unlock(&o->mu);
    pthread_mutex_lock(&o->wq_mu);
    pthread_cond_broadcast(&o->wq_cv);
    pthread_mutex_unlock(&o->wq_mu);
    if (o->task_running)
        pthread_join(o->task_thread, NULL); /* within TASK_WAIT_MS: its call is held no longer */
    if (o->running)
        pthread_join(o->thread, NULL);
    for (size_t i = 0; i < o->n_writers; i++)
        pthread_join(o->writers[i], NULL);
    for (size_t i = 0; i < o->wq_n; i++) /* offloads never written: the master times them out */
        free(o->wq[(o->wq_head + i) % o->wq_cap].it.key);
    free(o->wq);
    for (size_t i = 0; i < o->sq_n; i++) /* stages never read: likewise */
        free(o->sq[(o->sq_head + i) % o->sq_cap].it.key);
    free(o->sq);
    for (size_t i = 0; i < o->pk_n; i++) /* parked stages: likewise */
        free(o->pk[(o->pk_head + i) % o->pk_cap].it.key);
    free(o->pk);
    crc_master_close(o->conn);
    if (o->big != NULL) {
        cr_engine_unregister(s->engine, o->big);
        cr_free_shared(o->big);
    }
    if (o->stage_registered)
        cr_engine_unregister(s->engine, o->stage);
    if (o->stage != NULL)
        cr_free_shared(o->stage);
    crb_oa_destroy(o->stage_oa);
    crf_close(o->disk);
    free_items(o->out, o->n_out);
    free(o->out);
    for (size_t i = 0; i < o->n_got; i++) /* tasks never run: the master asks again */
        crp_off_clear(&o->got[i]);
    free(o->got);
    for (size_t i = o->ann_pos; i < o->n_ann; i++)
        free(o->ann[i].it.key);
    free(o->ann);
    free(o->slots);
    destroy_sync(o);
    free(o);
}

void crc_off_stats(crc_offload *o, cr_store_offload_stats *out)
{
    cr_store_offload_stats z = {0};
    *out = z;
    if (o == NULL)
        return;
    crf_stats st;
    crf_get_stats(o->disk, &st);
    out->enabled = true;
    out->disk_keys = st.keys;
    out->disk_bytes = st.file_bytes;
    out->disk_capacity = st.capacity_bytes;
    out->offloads = atomic_load(&o->offloads);
    out->offload_failures = atomic_load(&o->offload_failures);
    out->stage_reads = atomic_load(&o->stage_reads);
    out->promotions = atomic_load(&o->promotions);
    out->disk_evictions = atomic_load(&o->evicted);
    out->compactions = st.compactions;
}
