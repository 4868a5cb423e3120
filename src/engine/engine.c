/*
 * engine.c - engine lifecycle and the public registration, notification,
 * probe and statistics calls. Batches live in batch.c, segments in
 * segment.c, our port in server.c, the transports in transports/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "engine/internal.h"

const char *cr_mem_kind_name(int kind)
{
    switch (kind) {
    case CR_MEM_HOST:
        return "host";
    case CR_MEM_HOST_SHAREABLE:
        return "host-shareable";
    case CR_MEM_CUDA:
        return "cuda";
    default:
        return "unknown";
    }
}

static int engine_listen(cr_engine *e)
{
    uint16_t bound = 0;
    int fd = crb_listen(e->hostname, e->rpc_port, 512, &bound);
    if (fd < 0)
        return fd;
    e->listen_fd = fd;
    e->rpc_port = bound;
    return 0;
}

/* Registry hooks: the transports that own device memory settle a new
 * buffer's kind; then every installed transport attaches its state (and
 * the blob peers will see) to it, and detaches it at the end. */
static int buffer_classify(void *ctx, cre_buffer *b, bool detect)
{
    cr_engine *e = ctx;
    for (size_t i = 0; i < e->n_tps; i++) {
        cre_tp *tp = &e->tps[i];
        if (tp->ops->classify == NULL)
            continue;
        int rc = tp->ops->classify(tp, b, detect);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int buffer_prepare(void *ctx, cre_buffer *b)
{
    cr_engine *e = ctx;
    for (size_t i = 0; i < e->n_tps; i++) {
        cre_tp *tp = &e->tps[i];
        if (tp->ops->reg == NULL)
            continue;
        int rc = tp->ops->reg(tp, b, &b->tp_blob[i]);
        if (rc == 0 && b->tp_blob[i].len > CRP_MAX_BLOB)
            rc = crb_error(CR_INTERNAL_ERROR, "transport %s made a %zu-byte blob", tp->ops->name,
                           b->tp_blob[i].len);
        if (rc < 0) {
            for (size_t j = i + 1; j-- > 0;)
                if (e->tps[j].ops->dereg != NULL && (j < i || rc == 0))
                    e->tps[j].ops->dereg(&e->tps[j], b);
            return rc;
        }
    }
    return 0;
}

static void buffer_dying(void *ctx, cre_buffer *b)
{
    cr_engine *e = ctx;
    /* Workers close served connections that still use b (conn.c). */
    atomic_fetch_add(&e->unregister_epoch, 1);
    if (e->workers_running)
        cre_workers_kick_all(e);
}

static void buffer_release(void *ctx, cre_buffer *b)
{
    cr_engine *e = ctx;
    for (size_t i = e->n_tps; i-- > 0;)
        if (e->tps[i].ops->dereg != NULL)
            e->tps[i].ops->dereg(&e->tps[i], b);
}

/* What the descriptor may spend on buffers: everything a frame carries
 * but room for the name, host identity and every endpoint. */
#define DESC_BUFFER_BYTES                                                                          \
    (CRP_MAX_BODY - CRP_MAX_ENDPOINTS * (CRP_MAX_ENDPOINT + 64) - 4 * CRP_MAX_NAME - 256)

int cr_engine_create(const cr_engine_config *cfg, cr_engine **out)
{
    if (out == NULL)
        return crb_error(CR_INVALID_PARAMS, "cr_engine_create: out is NULL");
    cr_engine *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "engine");
    e->listen_fd = -1;
    cre_registry_hooks hooks = {buffer_classify, buffer_prepare, buffer_dying, buffer_release, e};
    cre_registry_init(&e->registry, &hooks);
    e->registry.max_desc_bytes = DESC_BUFFER_BYTES;
    cre_handles_init(&e->segments);
    cre_handles_init(&e->batches);
    pthread_mutex_init(&e->desc_lock, NULL);
    pthread_mutex_init(&e->peers_lock, NULL);
    pthread_mutex_init(&e->notify_lock, NULL);
    pthread_mutex_init(&e->calls_lock, NULL);
    pthread_cond_init(&e->calls_done, NULL);

    int rc = cre_config_apply(e, cfg);
    if (rc < 0)
        goto err_destroy;
    const char *meta = cfg->metadata ? cfg->metadata : "P2PHANDSHAKE";
    rc = crm_backend_open(meta, (int)e->connect_timeout_ms, &e->metadata);
    if (rc < 0)
        goto err_destroy;
    crb_random_bytes(&e->instance, sizeof(e->instance));
    rc = engine_listen(e);
    if (rc < 0)
        goto err_destroy;
    if (e->metadata->peer_to_peer)
        snprintf(e->segment_name, sizeof(e->segment_name), "%s:%u", e->hostname,
                 (unsigned)e->rpc_port);
    else
        snprintf(e->segment_name, sizeof(e->segment_name), "%s",
                 cfg->local_hostname ? cfg->local_hostname : e->hostname);
    if (strlen(e->segment_name) >= CRP_MAX_NAME) {
        rc = crb_error(CR_ERR_INVALID_CONFIG, "segment name '%s' is longer than %d bytes",
                       e->segment_name, CRP_MAX_NAME - 1);
        goto err_destroy;
    }
    rc = cre_workers_init(e);
    if (rc < 0)
        goto err_destroy;
    rc = cre_transports_install(e);
    if (rc < 0)
        goto err_destroy;
    rc = cre_server_start(e);
    if (rc < 0)
        goto err_destroy;
    rc = cre_workers_start(e);
    if (rc < 0)
        goto err_destroy;
    rc = cre_descriptor_publish(e);
    if (rc < 0)
        goto err_destroy;
    if (crb_log_enabled(CRB_LOG_INFO)) {
        char names[96] = "";
        for (size_t i = 0; i < e->n_tps; i++)
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? "," : "",
                     e->tps[i].ops->name);
        crb_log(CRB_LOG_INFO, "engine %s up (instance %016llx, %u workers, transports %s)",
                e->segment_name, (unsigned long long)e->instance, e->n_workers, names);
    }
    *out = e;
    return 0;

err_destroy:
    cr_engine_destroy(e);
    return rc;
}

void cr_engine_destroy(cr_engine *e)
{
    if (e == NULL)
        return;
    cre_calls_drain(e); /* calls in flight on other threads finish or fail first */
    cre_descriptor_unpublish(e);
    cre_workers_stop(e);
    cre_server_stop(e);
    /* The workers have stopped: close the connections they served now,
     * while the buffers and transports those hold (payload references,
     * staging streams) still exist. */
    if (e->workers != NULL)
        for (uint32_t i = 0; i < e->n_workers; i++)
            cre_conns_close_all(&e->workers[i]);
    cre_peers_destroy(e);      /* transports' per-peer state (lanes, mappings) */
    cre_transports_quiesce(e); /* requests being served let go of their buffers */
    /* Buffers still registered: transports detach from them while they are
     * still installed. */
    cre_registry_fini(&e->registry);
    cre_transports_fini(e); /* fails what their queues still hold */
    cre_workers_free(e);
    if (e->listen_fd >= 0)
        close(e->listen_fd);
    /* Batches the caller never freed: every task has finished by now. */
    for (size_t i = 0; i < e->batches.cap; i++) {
        cre_batch *b = e->batches.items[i];
        if (b != NULL) {
            pthread_mutex_destroy(&b->lock);
            pthread_cond_destroy(&b->cond);
            free(b->tasks);
            free(b);
        }
    }
    cre_handles_fini(&e->batches);
    cre_handles_fini(&e->segments);
    crm_backend_close(e->metadata);
    cr_notifications_free(e->notifications, e->n_notifications);
    crp_buf_free(&e->desc_encoded);
    pthread_mutex_destroy(&e->desc_lock);
    pthread_mutex_destroy(&e->peers_lock);
    pthread_mutex_destroy(&e->notify_lock);
    pthread_mutex_destroy(&e->calls_lock);
    pthread_cond_destroy(&e->calls_done);
    free(e->secret);
    free(e->device_names);
    free(e);
}

int cr_engine_segment_name(const cr_engine *e, char *buf, size_t len)
{
    if (e == NULL || buf == NULL)
        return crb_error(CR_INVALID_PARAMS, "segment_name: NULL argument");
    size_t n = strlen(e->segment_name);
    if (n + 1 > len)
        return crb_error(CR_INVALID_PARAMS, "segment name needs %zu bytes, buffer has %zu", n + 1,
                         len);
    memcpy(buf, e->segment_name, n + 1);
    return 0;
}

uint16_t cr_engine_rpc_port(const cr_engine *e)
{
    return e ? e->rpc_port : 0;
}

/* "cpu", "cpu:N", "cuda:N", "*", NULL or "" → kind and device. "*" is
 * host memory unless a transport owning device memory claims it
 * (classify). */
static int parse_location(const char *loc, int *kind, int *device, bool *detect)
{
    *detect = false;
    if (loc == NULL || loc[0] == '\0' || strcmp(loc, "*") == 0) {
        *kind = CR_MEM_HOST;
        *device = -1;
        *detect = true;
        return 0;
    }
    const char *num = NULL;
    if (strncmp(loc, "cpu", 3) == 0 && (loc[3] == '\0' || loc[3] == ':')) {
        *kind = CR_MEM_HOST;
        num = loc[3] == ':' ? loc + 4 : NULL;
    } else if (strncmp(loc, "cuda:", 5) == 0) {
        *kind = CR_MEM_CUDA;
        num = loc + 5;
    } else {
        return crb_error(CR_INVALID_PARAMS, "location '%s' is not one of cpu:N, cuda:N, *", loc);
    }
    long dev = -1;
    if (num != NULL) {
        char *end;
        dev = strtol(num, &end, 10);
        if (num[0] == '\0' || *end != '\0' || dev < 0 || dev > 65535)
            return crb_error(CR_INVALID_PARAMS, "location '%s' has a bad device index", loc);
    }
    if (*kind == CR_MEM_HOST)
        dev = -1;
    *device = (int)dev;
    return 0;
}

int cr_engine_register_batch(cr_engine *e, const cr_buffer_spec *bufs, size_t n)
{
    CRE_CALL(e, "cr_engine_register_batch");
    if (n == 0)
        return 0;
    if (bufs == NULL)
        return crb_error(CR_INVALID_PARAMS, "register_batch: %zu buffers but NULL array", n);
    cre_buffer_spec *specs = calloc(n, sizeof(*specs));
    if (specs == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "register_batch of %zu", n);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        specs[i].addr = (uint64_t)(uintptr_t)bufs[i].addr;
        specs[i].length = bufs[i].length;
        specs[i].remote_accessible = bufs[i].remote_accessible;
        rc = parse_location(bufs[i].location, &specs[i].kind, &specs[i].device, &specs[i].detect);
    }
    if (rc == 0)
        rc = cre_registry_add(&e->registry, specs, n);
    free(specs);
    if (rc == 0 && !e->metadata->peer_to_peer) {
        rc = cre_descriptor_publish(e);
        if (rc < 0) {
            /* Not visible to peers: undo so the caller's view matches. */
            int keep = rc;
            for (size_t i = 0; i < n; i++)
                cre_registry_remove(&e->registry, (uint64_t)(uintptr_t)bufs[i].addr);
            rc = keep;
        }
    }
    return rc;
}

int cr_engine_register(cr_engine *e, void *addr, size_t length, const char *location,
                       bool remote_accessible)
{
    cr_buffer_spec spec = {addr, length, location, remote_accessible};
    return cr_engine_register_batch(e, &spec, 1);
}

int cr_engine_unregister_batch(cr_engine *e, void *const *addrs, size_t n)
{
    CRE_CALL(e, "cr_engine_unregister_batch");
    if (n > 0 && addrs == NULL)
        return crb_error(CR_INVALID_PARAMS, "unregister_batch: NULL array");
    int first = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = cre_registry_remove(&e->registry, (uint64_t)(uintptr_t)addrs[i]);
        if (rc < 0 && first == 0)
            first = rc;
    }
    if (n > 0 && !e->metadata->peer_to_peer) {
        int rc = cre_descriptor_publish(e);
        if (rc < 0 && first == 0)
            first = rc;
    }
    return first;
}

int cr_engine_unregister(cr_engine *e, void *addr)
{
    return cr_engine_unregister_batch(e, &addr, 1);
}

size_t cr_engine_registration_count(cr_engine *e)
{
    return e ? cre_registry_count(&e->registry) : 0;
}

int cre_notify_push(cr_engine *e, const char *from, const uint8_t *msg, size_t len)
{
    char *f = strdup(from ? from : "");
    char *m = malloc(len + 1);
    if (f == NULL || m == NULL)
        goto err_free;
    memcpy(m, msg, len);
    m[len] = '\0';
    pthread_mutex_lock(&e->notify_lock);
    if (e->n_notifications == e->cap_notifications) {
        size_t ncap = e->cap_notifications ? e->cap_notifications * 2 : 16;
        cr_notification *nn = realloc(e->notifications, ncap * sizeof(*nn));
        if (nn == NULL) {
            pthread_mutex_unlock(&e->notify_lock);
            goto err_free;
        }
        e->notifications = nn;
        e->cap_notifications = ncap;
    }
    e->notifications[e->n_notifications++] = (cr_notification){f, m, len};
    pthread_mutex_unlock(&e->notify_lock);
    return 0;
err_free:
    free(f);
    free(m);
    return CR_ERR_NO_MEMORY;
}

int cr_engine_notify(cr_engine *e, cr_segment_handle h, const void *msg, size_t len)
{
    CRE_CALL(e, "cr_engine_notify");
    if (e == NULL || (msg == NULL && len > 0))
        return crb_error(CR_INVALID_PARAMS, "notify: NULL argument");
    if (len > CR_NOTIFY_MAX_MESSAGE)
        return crb_error(CR_INVALID_PARAMS, "notification of %zu bytes exceeds %d", len,
                         CR_NOTIFY_MAX_MESSAGE);
    cre_peer *p;
    int rc = cre_segment_lookup(e, h, &p);
    if (rc < 0)
        return rc;
    crp_notify n = {.from = e->segment_name, .message = (uint8_t *)msg, .length = len};
    crp_buf body = {0}, reply = {0};
    rc = crp_notify_encode(&n, &body);
    crp_header rh;
    if (rc == 0)
        rc = cre_control_call(e, p->host, p->port, CRP_NOTIFY, &body, (int)e->connect_timeout_ms,
                              &rh, &reply);
    if (rc == 0 && (rh.type != CRP_NOTIFY_ACK || rh.status != 0))
        rc = crb_error(rh.status < 0 ? rh.status : CR_ERR_REMOTE,
                       "%s did not accept the notification", p->name);
    crp_buf_free(&body);
    crp_buf_free(&reply);
    return rc;
}

int cr_engine_take_notifications(cr_engine *e, cr_notification **out, size_t *count)
{
    CRE_CALL(e, "cr_engine_take_notifications");
    if (e == NULL || out == NULL || count == NULL)
        return crb_error(CR_INVALID_PARAMS, "take_notifications: NULL argument");
    pthread_mutex_lock(&e->notify_lock);
    *out = e->notifications;
    *count = e->n_notifications;
    e->notifications = NULL;
    e->n_notifications = e->cap_notifications = 0;
    pthread_mutex_unlock(&e->notify_lock);
    return 0;
}

void cr_notifications_free(cr_notification *list, size_t count)
{
    if (list == NULL)
        return;
    for (size_t i = 0; i < count; i++) {
        free(list[i].from);
        free(list[i].message);
    }
    free(list);
}

int cr_engine_probe(cr_engine *e, const char *name, int timeout_ms)
{
    CRE_CALL(e, "cr_engine_probe");
    if (e == NULL || name == NULL)
        return crb_error(CR_INVALID_PARAMS, "probe: NULL argument");
    char host[CRB_HOST_MAX];
    uint16_t port;
    int rc = crb_parse_hostport(name, host, &port);
    if (rc < 0 || port == 0)
        return crb_error(CR_INVALID_PARAMS, "probe: '%s' is not host:port", name);
    crp_header rh;
    crp_buf reply = {0};
    rc = cre_control_call(e, host, port, CRP_PROBE, NULL,
                          timeout_ms > 0 ? timeout_ms : (int)e->connect_timeout_ms, &rh, &reply);
    crp_buf_free(&reply);
    if (rc == 0 && rh.type != CRP_PROBE_ACK)
        rc = crb_error(CR_ERR_MALFORMED_FRAME, "%s answered PROBE with %s", name,
                       crp_type_name(rh.type));
    return rc;
}

/* The generic counter array: per transport, then the engine's. */
static size_t collect_counters(cr_engine *e, cr_engine_counter *out, size_t cap)
{
    size_t n = 0;
#define PUT(tname, cname, v)                                                                       \
    do {                                                                                           \
        if (n < cap)                                                                               \
            out[n] = (cr_engine_counter){(tname), (cname), (v)};                                   \
        n++;                                                                                       \
    } while (0)
    for (size_t i = 0; i < e->n_tps; i++) {
        cre_tp *tp = &e->tps[i];
        PUT(tp->ops->name, "bytes", atomic_load(&tp->bytes));
        PUT(tp->ops->name, "requests", atomic_load(&tp->requests));
        PUT(tp->ops->name, "failures", atomic_load(&tp->failures));
        if (tp->ops->counters != NULL)
            n += tp->ops->counters(tp, n < cap ? out + n : NULL, n < cap ? cap - n : 0);
    }
    PUT("engine", "tasks_completed", atomic_load(&e->stats.tasks_completed));
    PUT("engine", "tasks_failed", atomic_load(&e->stats.tasks_failed));
    PUT("engine", "bytes_served", atomic_load(&e->stats.bytes_served));
    PUT("engine", "descriptor_fetches", atomic_load(&e->stats.descriptor_fetches));
    PUT("engine", "transport_fallbacks", atomic_load(&e->stats.transport_fallbacks));
    PUT("engine", "served_timeouts", atomic_load(&e->stats.served_timeouts));
    PUT("engine", "preauth_timeouts", atomic_load(&e->stats.conns_refused_preauth));
    PUT("engine", "unregistered_requests", atomic_load(&e->stats.unregistered_requests));
    PUT("engine", "unregistered_refused", atomic_load(&e->stats.unregistered_refused));
    PUT("engine", "connections_refused",
        e->acceptor_started ? crb_acceptor_refused(&e->acceptor) : 0);
#undef PUT
    return n;
}

int cr_engine_counters(cr_engine *e, cr_engine_counter *out, size_t cap, size_t *total)
{
    CRE_CALL(e, "cr_engine_counters");
    if (e == NULL || total == NULL || (cap > 0 && out == NULL))
        return crb_error(CR_INVALID_PARAMS, "engine_counters: NULL argument");
    *total = collect_counters(e, out, cap);
    return 0;
}

static uint64_t counter_of(const cr_engine_counter *c, size_t n, const char *tp, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(c[i].transport, tp) == 0 && strcmp(c[i].name, name) == 0)
            return c[i].value;
    return 0;
}

int cr_engine_get_stats(cr_engine *e, cr_engine_stats *out)
{
    CRE_CALL(e, "cr_engine_get_stats");
    if (e == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "get_stats: NULL argument");
    cr_engine_counter c[128];
    size_t n = collect_counters(e, c, 128);
    if (n > 128)
        n = 128;
    *out = (cr_engine_stats){
        .tasks_completed = atomic_load(&e->stats.tasks_completed),
        .tasks_failed = atomic_load(&e->stats.tasks_failed),
        .bytes_local = counter_of(c, n, "local", "bytes"),
        .bytes_shm = counter_of(c, n, "shm", "bytes"),
        .bytes_cma = counter_of(c, n, "cma", "bytes"),
        .shm_mappings = counter_of(c, n, "shm", "mappings"),
        .transport_fallbacks = atomic_load(&e->stats.transport_fallbacks),
        .bytes_tcp = counter_of(c, n, "tcp", "bytes"),
        .bytes_served = atomic_load(&e->stats.bytes_served),
        .tcp_connects = counter_of(c, n, "tcp", "connects"),
        .descriptor_fetches = atomic_load(&e->stats.descriptor_fetches),
    };
    return 0;
}
