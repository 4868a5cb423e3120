/*
 * async.c - the store's completion queue (cr_store_cq, include/crescent/store.h;
 * docs/store-async.md).
 *
 * Design: a submit appends a call to the queue's pending list and wakes an
 * idle driver; it never talks to the master. A driver (a few per queue)
 * takes, under the lock, the oldest pending call and every other pending
 * call of the same kind that can share one batch with it (single exists;
 * single gets; single puts with the same cfg; single removes with the same
 * force flag), up to max_coalesce, and runs them as one synchronous batch
 * call of the store (cr_store_batch_exist / _get_into / _put_from /
 * _remove: one master round trip per phase and one engine batch for all of
 * them) — or, for a group of one, the single call. Batch submits run alone
 * as their batch call. The finished calls move to the completed list,
 * which waiters (cr_store_cq_wait) and the eventfd report. So the number of
 * threads is the queue's, not the calls', and calls queued while a pass
 * runs become the next pass's batch (natural batching without a timer).
 *
 * The eventfd holds a non-zero count exactly while the completed list is
 * non-empty: written when it becomes non-empty, drained when a poll empties
 * it, both under the lock.
 *
 * Destroy: sets stopping, completes every pending call with CR_ERR_CANCELED,
 * joins the drivers (each finishes its pass, bounded by the store's
 * deadlines), then frees every call whether reaped or not.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "store/internal.h"

#define CQ_MAX_DRIVERS   16
#define CQ_MAX_COALESCE  1024
#define CQ_MAX_IN_FLIGHT (1u << 20)

typedef struct cq_call {
    struct cq_call *next;
    int op; /* cr_store_async_op */
    uint64_t user_data;
    int64_t result;
    void *value; /* CR_ASYNC_GET: the malloc'd copy, until reaped */
    /* single calls */
    const char *key;
    void *buf;
    size_t len; /* cap (get) or size (put) */
    bool force;
    const cr_replicate_config *cfg;
    /* batch calls */
    const char *const *keys;
    void *const *bufs;
    const size_t *lens;
    size_t n;
    int *results;
    int64_t *results64;
} cq_call;

typedef struct cq_list {
    cq_call *head, *tail;
    size_t n;
} cq_list;

struct cr_store_cq {
    cr_store *s;
    uint32_t max_in_flight, n_drivers, max_coalesce;
    pthread_mutex_t lock;
    pthread_cond_t work; /* drivers: a call is pending, or stopping */
    pthread_cond_t done; /* waiters: a call completed */
    cq_list pending, completed;
    size_t in_flight; /* submitted, not reaped */
    size_t idle_drivers;
    bool stopping;
    int efd;
    pthread_t drivers[CQ_MAX_DRIVERS];
    size_t n_started;
};

static void list_push(cq_list *l, cq_call *c)
{
    c->next = NULL;
    if (l->tail != NULL)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
    l->n++;
}

static cq_call *list_pop(cq_list *l)
{
    cq_call *c = l->head;
    if (c != NULL) {
        l->head = c->next;
        if (l->head == NULL)
            l->tail = NULL;
        l->n--;
    }
    return c;
}

void cr_store_cq_config_init(cr_store_cq_config *cfg)
{
    if (cfg == NULL)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->max_in_flight = 4096;
    cfg->drivers = 2;
    cfg->max_coalesce = 256;
}

/* Under q->lock: the eventfd is readable iff completed is non-empty. */
static void efd_raise(cr_store_cq *q)
{
    uint64_t one = 1;
    ssize_t w;
    do {
        w = write(q->efd, &one, sizeof(one));
    } while (w < 0 && errno == EINTR);
}

static void efd_drain(cr_store_cq *q)
{
    uint64_t v;
    ssize_t r;
    do {
        r = read(q->efd, &v, sizeof(v));
    } while (r < 0 && errno == EINTR);
}

/* Under q->lock. */
static void complete_locked(cr_store_cq *q, cq_call *c)
{
    bool was_empty = q->completed.n == 0;
    list_push(&q->completed, c);
    if (was_empty)
        efd_raise(q);
}

/* ---- running calls --------------------------------------------------------- */

/* Can c share a batch with the group's first call g? */
static bool coalesces(const cq_call *g, const cq_call *c)
{
    if (g->op != c->op)
        return false;
    switch (g->op) {
    case CR_ASYNC_EXIST:
    case CR_ASYNC_GET_INTO:
    case CR_ASYNC_GET:
        return true;
    case CR_ASYNC_REMOVE:
        return g->force == c->force;
    case CR_ASYNC_PUT_FROM:
        return g->cfg == c->cfg;
    default:
        return false;
    }
}

static void run_batch_call(cr_store *s, cq_call *c)
{
    switch (c->op) {
    case CR_ASYNC_BATCH_EXIST:
        c->result = cr_store_batch_exist(s, c->keys, c->n, c->results);
        break;
    case CR_ASYNC_BATCH_REMOVE:
        c->result = cr_store_batch_remove(s, c->keys, c->n, c->force, c->results);
        break;
    case CR_ASYNC_BATCH_GET_INTO:
        c->result = cr_store_batch_get_into(s, c->keys, c->bufs, c->lens, c->n, c->results64);
        break;
    case CR_ASYNC_BATCH_PUT_FROM:
        c->result = cr_store_batch_put_from(s, c->keys, c->bufs, c->lens, c->n, c->cfg, c->results);
        break;
    default:
        c->result = CR_INVALID_PARAMS;
        break;
    }
}

static void run_single(cr_store *s, cq_call *c)
{
    switch (c->op) {
    case CR_ASYNC_EXIST:
        c->result = cr_store_exist(s, c->key);
        break;
    case CR_ASYNC_REMOVE:
        c->result = cr_store_remove(s, c->key, c->force);
        break;
    case CR_ASYNC_GET_INTO:
        c->result = cr_store_get_into(s, c->key, c->buf, c->len);
        break;
    case CR_ASYNC_PUT_FROM:
        c->result = cr_store_put_from(s, c->key, c->buf, c->len, c->cfg);
        break;
    case CR_ASYNC_GET:
        c->result = cr_store_get(s, c->key, &c->value);
        break;
    default:
        run_batch_call(s, c);
        break;
    }
}

/*
 * n (>= 2) single calls of one kind as one batch call. A batch that failed
 * as a whole gives its code to every key that has no failure of its own
 * (for exist a 0 would otherwise read as "missing").
 */
static void run_group(cr_store *s, cq_call **g, size_t n)
{
    const char **keys = malloc(n * sizeof(*keys));
    void **bufs = calloc(n, sizeof(*bufs));
    size_t *lens = malloc(n * sizeof(*lens));
    int64_t *res = malloc(n * sizeof(*res));
    int *ires = malloc(n * sizeof(*ires));
    if (keys == NULL || bufs == NULL || lens == NULL || res == NULL || ires == NULL) {
        for (size_t i = 0; i < n; i++)
            g[i]->result = CR_ERR_NO_MEMORY;
        goto out_free;
    }
    for (size_t i = 0; i < n; i++) {
        keys[i] = g[i]->key;
        bufs[i] = g[i]->buf;
        lens[i] = g[i]->len;
        ires[i] = 0;
        res[i] = 0;
    }
    int rc;
    bool wide = false;
    switch (g[0]->op) {
    case CR_ASYNC_EXIST:
        rc = cr_store_batch_exist(s, keys, n, ires);
        break;
    case CR_ASYNC_REMOVE:
        rc = cr_store_batch_remove(s, keys, n, g[0]->force, ires);
        break;
    case CR_ASYNC_GET_INTO:
        rc = cr_store_batch_get_into(s, keys, bufs, lens, n, res);
        wide = true;
        break;
    case CR_ASYNC_GET:
        for (size_t i = 0; i < n; i++)
            bufs[i] = NULL;
        rc = cr_store_batch_get(s, keys, n, bufs, res);
        wide = true;
        for (size_t i = 0; i < n; i++) {
            if (rc < 0 || res[i] < 0) {
                free(bufs[i]); /* NULL unless the key was read */
                bufs[i] = NULL;
            }
            g[i]->value = bufs[i];
        }
        break;
    default: /* CR_ASYNC_PUT_FROM */
        rc = cr_store_batch_put_from(s, keys, bufs, lens, n, g[0]->cfg, ires);
        break;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t r = wide ? res[i] : ires[i];
        g[i]->result = (rc < 0 && r >= 0) ? rc : r;
    }
out_free:
    free(keys);
    free(bufs);
    free(lens);
    free(res);
    free(ires);
}

static void *driver_main(void *arg)
{
    cr_store_cq *q = arg;
    cq_call **group = malloc(q->max_coalesce * sizeof(*group));
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (q->pending.n == 0 && !q->stopping) {
            q->idle_drivers++;
            pthread_cond_wait(&q->work, &q->lock);
            q->idle_drivers--;
        }
        if (q->pending.n == 0 && q->stopping)
            break;
        /* The oldest call, and the pending calls that batch with it. */
        cq_call *first = list_pop(&q->pending);
        size_t n = 1;
        if (group != NULL) {
            group[0] = first;
            cq_call **link = &q->pending.head, *prev = NULL;
            while (*link != NULL && n < q->max_coalesce) {
                cq_call *c = *link;
                if (coalesces(first, c)) {
                    *link = c->next;
                    if (q->pending.tail == c)
                        q->pending.tail = prev;
                    q->pending.n--;
                    group[n++] = c;
                } else {
                    prev = c;
                    link = &c->next;
                }
            }
        }
        /* Another driver may start on what is left while this pass runs. */
        if (q->pending.n > 0 && q->idle_drivers > 0)
            pthread_cond_signal(&q->work);
        pthread_mutex_unlock(&q->lock);

        if (n == 1)
            run_single(q->s, first);
        else
            run_group(q->s, group, n);

        pthread_mutex_lock(&q->lock);
        if (n == 1) {
            complete_locked(q, first);
        } else {
            for (size_t i = 0; i < n; i++)
                complete_locked(q, group[i]);
        }
        pthread_cond_broadcast(&q->done);
    }
    pthread_mutex_unlock(&q->lock);
    free(group);
    return NULL;
}

/* ---- the queue ------------------------------------------------------------- */

int cr_store_cq_create(cr_store *s, const cr_store_cq_config *cfg, cr_store_cq **out)
{
    if (s == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "cq_create: NULL %s", s == NULL ? "store" : "out");
    cr_store_cq_config def;
    cr_store_cq_config_init(&def);
    if (cfg == NULL)
        cfg = &def;
    if (cfg->struct_size != sizeof(*cfg))
        return crb_error(CR_INVALID_PARAMS, "cq_create: struct_size %u (expected %zu)",
                         cfg->struct_size, sizeof(*cfg));
    if (cfg->max_in_flight == 0 || cfg->max_in_flight > CQ_MAX_IN_FLIGHT)
        return crb_error(CR_INVALID_PARAMS, "cq_create: max_in_flight %u (1..%u)",
                         cfg->max_in_flight, CQ_MAX_IN_FLIGHT);
    if (cfg->drivers == 0 || cfg->drivers > CQ_MAX_DRIVERS)
        return crb_error(CR_INVALID_PARAMS, "cq_create: drivers %u (1..%d)", cfg->drivers,
                         CQ_MAX_DRIVERS);
    if (cfg->max_coalesce == 0 || cfg->max_coalesce > CQ_MAX_COALESCE)
        return crb_error(CR_INVALID_PARAMS, "cq_create: max_coalesce %u (1..%d)", cfg->max_coalesce,
                         CQ_MAX_COALESCE);
    cr_store_cq *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "cq_create");
    q->s = s;
    q->max_in_flight = cfg->max_in_flight;
    q->n_drivers = cfg->drivers;
    q->max_coalesce = cfg->max_coalesce;
    int rc;
    q->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (q->efd < 0) {
        rc = crb_error(CR_ERR_SYSTEM, "cq_create: eventfd: %s", strerror(errno));
        goto err_free;
    }
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->done, &ca);
    pthread_condattr_destroy(&ca);
    for (uint32_t i = 0; i < q->n_drivers; i++) {
        int e = pthread_create(&q->drivers[i], NULL, driver_main, q);
        if (e != 0) {
            rc = crb_error(CR_ERR_SYSTEM, "cq_create: driver thread: %s", strerror(e));
            goto err_stop;
        }
        q->n_started++;
    }
    *out = q;
    return 0;

err_stop:
    cr_store_cq_destroy(q);
    return rc;
err_free:
    free(q);
    return rc;
}

void cr_store_cq_destroy(cr_store_cq *q)
{
    if (q == NULL)
        return;
    pthread_mutex_lock(&q->lock);
    q->stopping = true;
    cq_call *c;
    while ((c = list_pop(&q->pending)) != NULL) {
        c->result = CR_ERR_CANCELED;
        complete_locked(q, c);
    }
    pthread_cond_broadcast(&q->work);
    pthread_cond_broadcast(&q->done);
    pthread_mutex_unlock(&q->lock);
    for (size_t i = 0; i < q->n_started; i++)
        pthread_join(q->drivers[i], NULL);
    while ((c = list_pop(&q->completed)) != NULL) {
        free(c->value); /* a copying get's value nobody reaped */
        free(c);
    }
    close(q->efd);
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->done);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

int cr_store_cq_fd(cr_store_cq *q)
{
    if (q == NULL)
        return crb_error(CR_INVALID_PARAMS, "cq_fd: NULL queue");
    return q->efd;
}

size_t cr_store_cq_in_flight(cr_store_cq *q)
{
    if (q == NULL)
        return 0;
    pthread_mutex_lock(&q->lock);
    size_t n = q->in_flight;
    pthread_mutex_unlock(&q->lock);
    return n;
}

/* Under q->lock: move up to cap completions to out. */
static size_t take_locked(cr_store_cq *q, cr_store_completion *out, size_t cap)
{
    size_t k = 0;
    while (k < cap && q->completed.n > 0) {
        cq_call *c = list_pop(&q->completed);
        out[k++] = (cr_store_completion){
            .user_data = c->user_data, .result = c->result, .op = c->op, .value = c->value};
        free(c);
        q->in_flight--;
    }
    if (k > 0 && q->completed.n == 0)
        efd_drain(q);
    return k;
}

int cr_store_cq_poll(cr_store_cq *q, cr_store_completion *out, size_t cap)
{
    if (q == NULL || (out == NULL && cap > 0))
        return crb_error(CR_INVALID_PARAMS, "cq_poll: NULL %s", q == NULL ? "queue" : "out");
    pthread_mutex_lock(&q->lock);
    size_t k = take_locked(q, out, cap);
    pthread_mutex_unlock(&q->lock);
    return (int)(k > INT32_MAX ? INT32_MAX : k);
}

int cr_store_cq_wait(cr_store_cq *q, cr_store_completion *out, size_t cap, size_t min_count,
                     int timeout_ms)
{
    if (q == NULL || (out == NULL && cap > 0))
        return crb_error(CR_INVALID_PARAMS, "cq_wait: NULL %s", q == NULL ? "queue" : "out");
    if (cap > INT32_MAX)
        cap = INT32_MAX;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (timeout_ms >= 0) {
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    if (min_count > cap)
        min_count = cap;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        size_t want = min_count < q->in_flight ? min_count : q->in_flight;
        if (want == 0 || (q->completed.n > 0 && q->completed.n >= want))
            break;
        int e = timeout_ms < 0 ? pthread_cond_wait(&q->done, &q->lock)
                               : pthread_cond_timedwait(&q->done, &q->lock, &deadline);
        if (e == ETIMEDOUT)
            break;
    }
    size_t k = take_locked(q, out, cap);
    pthread_mutex_unlock(&q->lock);
    return (int)k;
}

int cr_store_cq_cancel(cr_store_cq *q, uint64_t user_data)
{
    if (q == NULL)
        return crb_error(CR_INVALID_PARAMS, "cq_cancel: NULL queue");
    int n = 0;
    pthread_mutex_lock(&q->lock);
    cq_call **link = &q->pending.head, *prev = NULL;
    while (*link != NULL) {
        cq_call *c = *link;
        if (c->user_data == user_data) {
            *link = c->next;
            if (q->pending.tail == c)
                q->pending.tail = prev;
            q->pending.n--;
            c->result = CR_ERR_CANCELED;
            complete_locked(q, c);
            n++;
        } else {
            prev = c;
            link = &c->next;
        }
    }
    if (n > 0)
        pthread_cond_broadcast(&q->done);
    pthread_mutex_unlock(&q->lock);
    return n;
}

/* ---- submits --------------------------------------------------------------- */

static int submit(cr_store_cq *q, const cq_call *proto)
{
    cq_call *c = malloc(sizeof(*c));
    if (c == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "submit");
    *c = *proto;
    c->result = 0;
    c->value = NULL;
    pthread_mutex_lock(&q->lock);
    int rc = 0;
    if (q->stopping)
        rc = crb_error(CR_ERR_CANCELED, "submit: the queue is being destroyed");
    else if (q->in_flight >= q->max_in_flight)
        rc = crb_error(CR_ERR_BUSY, "submit: %zu calls in flight (max_in_flight)", q->in_flight);
    if (rc < 0) {
        pthread_mutex_unlock(&q->lock);
        free(c);
        return rc;
    }
    q->in_flight++;
    list_push(&q->pending, c);
    if (q->idle_drivers > 0)
        pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->lock);
    return 0;
}

#define CHECK_Q(q, what)                                                                           \
    do {                                                                                           \
        if ((q) == NULL)                                                                           \
            return crb_error(CR_INVALID_PARAMS, "%s: NULL queue", what);                           \
    } while (0)

int cr_store_submit_exist(cr_store_cq *q, const char *key, uint64_t user_data)
{
    CHECK_Q(q, "submit_exist");
    if (key == NULL)
        return crb_error(CR_INVALID_PARAMS, "submit_exist: NULL key");
    return submit(q, &(cq_call){.op = CR_ASYNC_EXIST, .user_data = user_data, .key = key});
}

int cr_store_submit_remove(cr_store_cq *q, const char *key, bool force, uint64_t user_data)
{
    CHECK_Q(q, "submit_remove");
    if (key == NULL)
        return crb_error(CR_INVALID_PARAMS, "submit_remove: NULL key");
    return submit(
        q, &(cq_call){.op = CR_ASYNC_REMOVE, .user_data = user_data, .key = key, .force = force});
}

int cr_store_submit_get_into(cr_store_cq *q, const char *key, void *buf, size_t cap,
                             uint64_t user_data)
{
    CHECK_Q(q, "submit_get_into");
    if (key == NULL || (buf == NULL && cap > 0))
        return crb_error(CR_INVALID_PARAMS, "submit_get_into: NULL %s",
                         key == NULL ? "key" : "buffer");
    return submit(
        q,
        &(cq_call){
            .op = CR_ASYNC_GET_INTO, .user_data = user_data, .key = key, .buf = buf, .len = cap});
}

int cr_store_submit_get(cr_store_cq *q, const char *key, uint64_t user_data)
{
    CHECK_Q(q, "submit_get");
    if (key == NULL)
        return crb_error(CR_INVALID_PARAMS, "submit_get: NULL key");
    return submit(q, &(cq_call){.op = CR_ASYNC_GET, .user_data = user_data, .key = key});
}

int cr_store_submit_put_from(cr_store_cq *q, const char *key, const void *buf, size_t len,
                             const cr_replicate_config *cfg, uint64_t user_data)
{
    CHECK_Q(q, "submit_put_from");
    if (key == NULL || (buf == NULL && len > 0))
        return crb_error(CR_INVALID_PARAMS, "submit_put_from: NULL %s",
                         key == NULL ? "key" : "buffer");
    return submit(q, &(cq_call){.op = CR_ASYNC_PUT_FROM,
                                .user_data = user_data,
                                .key = key,
                                .buf = (void *)buf,
                                .len = len,
                                .cfg = cfg});
}

static int check_batch(const char *what, const void *keys, const void *results, size_t n)
{
    if (n > 0 && (keys == NULL || results == NULL))
        return crb_error(CR_INVALID_PARAMS, "%s: NULL array", what);
    return 0;
}

int cr_store_submit_batch_exist(cr_store_cq *q, const char *const *keys, size_t n, int *results,
                                uint64_t user_data)
{
    CHECK_Q(q, "submit_batch_exist");
    int rc = check_batch("submit_batch_exist", keys, results, n);
    if (rc < 0)
        return rc;
    return submit(q, &(cq_call){.op = CR_ASYNC_BATCH_EXIST,
                                .user_data = user_data,
                                .keys = keys,
                                .n = n,
                                .results = results});
}

int cr_store_submit_batch_remove(cr_store_cq *q, const char *const *keys, size_t n, bool force,
                                 int *results, uint64_t user_data)
{
    CHECK_Q(q, "submit_batch_remove");
    int rc = check_batch("submit_batch_remove", keys, results, n);
    if (rc < 0)
        return rc;
    return submit(q, &(cq_call){.op = CR_ASYNC_BATCH_REMOVE,
                                .user_data = user_data,
                                .keys = keys,
                                .n = n,
                                .force = force,
                                .results = results});
}

int cr_store_submit_batch_get_into(cr_store_cq *q, const char *const *keys, void *const *bufs,
                                   const size_t *caps, size_t n, int64_t *results,
                                   uint64_t user_data)
{
    CHECK_Q(q, "submit_batch_get_into");
    int rc = check_batch("submit_batch_get_into", keys, results, n);
    if (rc == 0 && n > 0 && (bufs == NULL || caps == NULL))
        rc = crb_error(CR_INVALID_PARAMS, "submit_batch_get_into: NULL array");
    if (rc < 0)
        return rc;
    return submit(q, &(cq_call){.op = CR_ASYNC_BATCH_GET_INTO,
                                .user_data = user_data,
                                .keys = keys,
                                .bufs = bufs,
                                .lens = caps,
                                .n = n,
                                .results64 = results});
}

int cr_store_submit_batch_put_from(cr_store_cq *q, const char *const *keys, void *const *bufs,
                                   const size_t *sizes, size_t n, const cr_replicate_config *cfg,
                                   int *results, uint64_t user_data)
{
    CHECK_Q(q, "submit_batch_put_from");
    int rc = check_batch("submit_batch_put_from", keys, results, n);
    if (rc == 0 && n > 0 && (bufs == NULL || sizes == NULL))
        rc = crb_error(CR_INVALID_PARAMS, "submit_batch_put_from: NULL array");
    if (rc < 0)
        return rc;
    return submit(q, &(cq_call){.op = CR_ASYNC_BATCH_PUT_FROM,
                                .user_data = user_data,
                                .keys = keys,
                                .bufs = bufs,
                                .lens = sizes,
                                .n = n,
                                .cfg = cfg,
                                .results = results});
}
