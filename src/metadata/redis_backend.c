/*
 * redis_backend.c - the "redis://host:port" metadata backend (hiredis).
 *
 * Keys and values are stored as they are (GET/SET/DEL), as Mooncake's redis
 * plugin does. publish SETs the key with PX <ttl> and remembers it; a
 * refresher thread extends every remembered key every TTL/3 (PEXPIRE) and
 * SETs it again when redis no longer has it (redis restarted or the key
 * expired while redis was unreachable), so a killed process's keys vanish
 * within the TTL and a live one's come back. destroy deletes what is still
 * remembered. Mooncake's MC_REDIS_USERNAME / MC_REDIS_PASSWORD (AUTH) and
 * MC_REDIS_DB_INDEX (SELECT, 0..255) are honoured on every connection.
 *
 * Connections: hiredis contexts are not thread-safe, so a call takes one
 * from a small pool (or connects a new one: connect limit min(timeout, 1 s),
 * then each command bounded by the timeout) and parks it afterwards; a
 * context that saw an error is freed. A command that fails on a parked
 * context with an I/O error is retried once on a fresh connection (the
 * server may have closed an idle one). Errors: no answer or a broken
 * connection is CR_ERR_METADATA_UNAVAILABLE, a protocol violation or an
 * unexpected reply type CR_ERR_METADATA_MALFORMED, a redis error reply
 * CR_ERR_METADATA quoting it; each message names the server and the key.
 *
 * Locking: pool_lock guards the idle contexts; `lock` (the publish lock)
 * serialises publish, del, the refresher's pass and destroy, so a refresh
 * never writes an older value over a newer publish.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "metadata/backend.h"
#include "metadata/published.h"

#define REDIS_POOL_MAX    4
#define REDIS_DEFAULT_MS  3000
#define REDIS_CONNECT_MS  1000
#define REDIS_MAX_VALUE   (64u << 20)
#define REDIS_MIN_REFRESH 100

typedef struct redis_backend {
    crm_backend base;
    char host[CRB_HOST_MAX];
    uint16_t port;
    char name[CRB_HOST_MAX + 16]; /* "host:port" for messages */
    int timeout_ms;
    int connect_ms;
    long long ttl_ms;
    char *username; /* NULL: none */
    char *password;
    int db;
    pthread_mutex_t pool_lock;
    redisContext *idle[REDIS_POOL_MAX];
    int n_idle;
    pthread_mutex_t lock; /* the publish lock */
    crm_published table;
    pthread_cond_t wake;
    bool stopping;
    pthread_t refresher;
} redis_backend;

static struct timeval tv_of(int ms)
{
    return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
}

/* A redis error, NULL reply, or wrong type, as a status with a message. */
static int reply_error(redis_backend *rb, const char *cmd, const char *key, redisContext *ctx,
                       redisReply *r)
{
    if (r == NULL) {
        int status = ctx->err == REDIS_ERR_PROTOCOL ? CR_ERR_METADATA_MALFORMED
                     : ctx->err == REDIS_ERR_OOM    ? CR_ERR_NO_MEMORY
                                                    : CR_ERR_METADATA_UNAVAILABLE;
        return crb_error(status, "redis %s %.200s at %s: %s", cmd, key, rb->name,
                         ctx->errstr[0] != '\0' ? ctx->errstr : "no reply");
    }
    if (r->type == REDIS_REPLY_ERROR)
        return crb_error(CR_ERR_METADATA, "redis %s %.200s at %s: %.200s", cmd, key, rb->name,
                         r->str != NULL ? r->str : "error");
    return crb_error(CR_ERR_METADATA_MALFORMED, "redis %s %.200s at %s: unexpected reply type %d",
                     cmd, key, rb->name, r->type);
}

/* AUTH / SELECT on a new connection. */
static int session_setup(redis_backend *rb, redisContext *ctx)
{
    if (rb->password != NULL) {
        const char *argv[3] = {"AUTH", rb->username != NULL ? rb->username : rb->password,
                               rb->password};
        size_t lens[3] = {4, strlen(argv[1]), strlen(rb->password)};
        int argc = rb->username != NULL ? 3 : 2;
        redisReply *r = redisCommandArgv(ctx, argc, argv, lens);
        bool ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        int rc = ok ? 0 : reply_error(rb, "AUTH", "", ctx, r);
        freeReplyObject(r);
        if (rc < 0)
            return rc;
    }
    if (rb->db != 0) {
        redisReply *r = redisCommand(ctx, "SELECT %d", rb->db);
        bool ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        int rc = ok ? 0 : reply_error(rb, "SELECT", "", ctx, r);
        freeReplyObject(r);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int connect_new(redis_backend *rb, redisContext **out)
{
    redisContext *ctx = redisConnectWithTimeout(rb->host, rb->port, tv_of(rb->connect_ms));
    if (ctx == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "redis %s: cannot allocate a context", rb->name);
    if (ctx->err != 0) {
        int rc = crb_error(CR_ERR_METADATA_UNAVAILABLE, "redis %s: cannot connect: %s", rb->name,
                           ctx->errstr);
        redisFree(ctx);
        return rc;
    }
    if (redisSetTimeout(ctx, tv_of(rb->timeout_ms)) != REDIS_OK) {
        int rc =
            crb_error(CR_ERR_SYSTEM, "redis %s: cannot set the timeout: %s", rb->name, ctx->errstr);
        redisFree(ctx);
        return rc;
    }
    int rc = session_setup(rb, ctx);
    if (rc < 0) {
        redisFree(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

static redisContext *pool_take(redis_backend *rb)
{
    redisContext *ctx = NULL;
    pthread_mutex_lock(&rb->pool_lock);
    if (rb->n_idle > 0)
        ctx = rb->idle[--rb->n_idle];
    pthread_mutex_unlock(&rb->pool_lock);
    return ctx;
}

static void pool_give(redis_backend *rb, redisContext *ctx)
{
    if (ctx->err != 0) {
        redisFree(ctx);
        return;
    }
    pthread_mutex_lock(&rb->pool_lock);
    if (rb->n_idle < REDIS_POOL_MAX) {
        rb->idle[rb->n_idle++] = ctx;
        ctx = NULL;
    }
    pthread_mutex_unlock(&rb->pool_lock);
    if (ctx != NULL)
        redisFree(ctx);
}

/*
 * Run one command. On success returns 0 with *reply (caller frees with
 * freeReplyObject); the reply may be an error reply — callers check types.
 */
static int command(redis_backend *rb, const char *cmd, const char *key, int argc, const char **argv,
                   const size_t *lens, redisReply **reply)
{
    for (int tries = 0; tries < 2; tries++) {
        redisContext *ctx = pool_take(rb);
        bool parked = ctx != NULL;
        if (ctx == NULL) {
            int rc = connect_new(rb, &ctx);
            if (rc < 0)
                return rc;
        }
        redisReply *r = redisCommandArgv(ctx, argc, argv, lens);
        if (r != NULL) {
            pool_give(rb, ctx);
            *reply = r;
            return 0;
        }
        bool stale =
            parked && (ctx->err == REDIS_ERR_EOF || ctx->err == REDIS_ERR_IO) && tries == 0;
        int rc = reply_error(rb, cmd, key, ctx, NULL);
        redisFree(ctx);
        if (!stale)
            return rc;
    }
    return crb_error(CR_ERR_METADATA_UNAVAILABLE, "redis %s %.200s at %s: no answer", cmd, key,
                     rb->name);
}

static int check_key(const char *key)
{
    if (key == NULL || key[0] == '\0')
        return crb_error(CR_INVALID_PARAMS, "redis metadata: the key is empty");
    return 0;
}

/* SET key value [PX ttl]: expects +OK. */
static int set_key(redis_backend *rb, const char *key, const void *value, size_t len, bool ttl)
{
    char px[24];
    snprintf(px, sizeof(px), "%lld", rb->ttl_ms);
    const char *argv[5] = {"SET", key, len > 0 ? value : "", "PX", px};
    size_t lens[5] = {3, strlen(key), len, 2, strlen(px)};
    redisReply *r;
    int rc = command(rb, "SET", key, ttl ? 5 : 3, argv, lens, &r);
    if (rc < 0)
        return rc;
    if (r->type != REDIS_REPLY_STATUS || r->str == NULL || strcmp(r->str, "OK") != 0)
        rc = reply_error(rb, "SET", key, NULL, r);
    freeReplyObject(r);
    return rc;
}

static int redis_put(crm_backend *b, const char *key, const void *value, size_t len)
{
    int rc = check_key(key);
    return rc < 0 ? rc : set_key((redis_backend *)b, key, value, len, false);
}

static int redis_publish(crm_backend *b, const char *key, const void *value, size_t len)
{
    redis_backend *rb = (redis_backend *)b;
    int rc = check_key(key);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&rb->lock);
    rc = set_key(rb, key, value, len, true);
    if (rc == 0)
        rc = crm_published_set(&rb->table, key, value, len);
    pthread_mutex_unlock(&rb->lock);
    return rc;
}

static int redis_get(crm_backend *b, const char *key, void **value, size_t *len)
{
    redis_backend *rb = (redis_backend *)b;
    int rc = check_key(key);
    if (rc < 0)
        return rc;
    const char *argv[2] = {"GET", key};
    size_t lens[2] = {3, strlen(key)};
    redisReply *r;
    rc = command(rb, "GET", key, 2, argv, lens, &r);
    if (rc < 0)
        return rc;
    if (r->type == REDIS_REPLY_NIL) {
        rc = crb_error(CR_ERR_METADATA_NOT_FOUND, "metadata key '%.200s' not found in redis %s",
                       key, rb->name);
    } else if (r->type != REDIS_REPLY_STRING) {
        rc = reply_error(rb, "GET", key, NULL, r);
    } else if (r->len > REDIS_MAX_VALUE) {
        rc = crb_error(CR_ERR_METADATA_MALFORMED, "redis GET %.200s at %s: %zu bytes (limit %u)",
                       key, rb->name, (size_t)r->len, REDIS_MAX_VALUE);
    } else {
        uint8_t *v = malloc((size_t)r->len + 1);
        if (v == NULL) {
            rc = crb_error(CR_ERR_NO_MEMORY, "redis GET %.200s: %zu bytes", key, (size_t)r->len);
        } else {
            memcpy(v, r->str, (size_t)r->len);
            v[r->len] = 0;
            *value = v;
            *len = (size_t)r->len;
        }
    }
    freeReplyObject(r);
    return rc;
}

static int del_key(redis_backend *rb, const char *key)
{
    const char *argv[2] = {"DEL", key};
    size_t lens[2] = {3, strlen(key)};
    redisReply *r;
    int rc = command(rb, "DEL", key, 2, argv, lens, &r);
    if (rc < 0)
        return rc;
    if (r->type != REDIS_REPLY_INTEGER)
        rc = reply_error(rb, "DEL", key, NULL, r);
    freeReplyObject(r);
    return rc;
}

static int redis_del(crm_backend *b, const char *key)
{
    redis_backend *rb = (redis_backend *)b;
    int rc = check_key(key);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&rb->lock);
    crm_published_remove(&rb->table, key);
    rc = del_key(rb, key);
    pthread_mutex_unlock(&rb->lock);
    return rc;
}

/* Extend one remembered key; SET it again if redis lost it. Caller holds lock. */
static int refresh_one(redis_backend *rb, const crm_published_entry *e)
{
    char px[24];
    snprintf(px, sizeof(px), "%lld", rb->ttl_ms);
    const char *argv[3] = {"PEXPIRE", e->key, px};
    size_t lens[3] = {7, strlen(e->key), strlen(px)};
    redisReply *r;
    int rc = command(rb, "PEXPIRE", e->key, 3, argv, lens, &r);
    if (rc < 0)
        return rc;
    bool gone = r->type == REDIS_REPLY_INTEGER && r->integer == 0;
    if (r->type != REDIS_REPLY_INTEGER)
        rc = reply_error(rb, "PEXPIRE", e->key, NULL, r);
    freeReplyObject(r);
    if (rc == 0 && gone) {
        crb_log(CRB_LOG_INFO, "redis metadata %s: '%s' was gone; publishing it again", rb->name,
                e->key);
        rc = set_key(rb, e->key, e->value, e->len, true);
    }
    return rc;
}

static void *refresher_main(void *arg)
{
    redis_backend *rb = arg;
    long long period = rb->ttl_ms / 3 > REDIS_MIN_REFRESH ? rb->ttl_ms / 3 : REDIS_MIN_REFRESH;
    pthread_mutex_lock(&rb->lock);
    while (!rb->stopping) {
        struct timespec ts = crb_deadline_ts((uint64_t)period);
        pthread_cond_timedwait(&rb->wake, &rb->lock, &ts);
        if (rb->stopping)
            break;
        for (size_t i = 0; i < rb->table.n; i++)
            if (refresh_one(rb, &rb->table.entries[i]) < 0)
                crb_log(CRB_LOG_WARN, "redis metadata: refreshing '%s' failed: %s",
                        rb->table.entries[i].key, cr_last_error_message());
    }
    pthread_mutex_unlock(&rb->lock);
    return NULL;
}

static void redis_destroy(crm_backend *b)
{
    redis_backend *rb = (redis_backend *)b;
    pthread_mutex_lock(&rb->lock);
    rb->stopping = true;
    pthread_cond_signal(&rb->wake);
    pthread_mutex_unlock(&rb->lock);
    pthread_join(rb->refresher, NULL);
    for (size_t i = 0; i < rb->table.n; i++)
        if (del_key(rb, rb->table.entries[i].key) < 0)
            crb_log(CRB_LOG_WARN,
                    "redis metadata: deleting '%s' failed (it expires within %lld "
                    "ms): %s",
                    rb->table.entries[i].key, rb->ttl_ms, cr_last_error_message());
    crm_published_clear(&rb->table);
    for (int i = 0; i < rb->n_idle; i++)
        redisFree(rb->idle[i]);
    pthread_cond_destroy(&rb->wake);
    pthread_mutex_destroy(&rb->lock);
    pthread_mutex_destroy(&rb->pool_lock);
    free(rb->username);
    free(rb->password);
    free(rb);
}

static const crm_backend_ops redis_ops = {
    .name = "redis",
    .put = redis_put,
    .publish = redis_publish,
    .get = redis_get,
    .del = redis_del,
    .destroy = redis_destroy,
};

/* MC_REDIS_USERNAME, MC_REDIS_PASSWORD, MC_REDIS_DB_INDEX (Mooncake's names). */
static int read_env(redis_backend *rb)
{
    const char *user = getenv("MC_REDIS_USERNAME");
    const char *pass = getenv("MC_REDIS_PASSWORD");
    const char *db = getenv("MC_REDIS_DB_INDEX");
    if (pass != NULL && pass[0] != '\0') {
        rb->password = strdup(pass);
        if (user != NULL && user[0] != '\0')
            rb->username = strdup(user);
        if (rb->password == NULL || (user != NULL && user[0] != '\0' && rb->username == NULL))
            return crb_error(CR_ERR_NO_MEMORY, "redis credentials");
    } else if (user != NULL && user[0] != '\0') {
        return crb_error(CR_ERR_INVALID_CONFIG,
                         "MC_REDIS_USERNAME is set but MC_REDIS_PASSWORD is not");
    }
    if (db != NULL && db[0] != '\0') {
        char *end;
        errno = 0;
        long v = strtol(db, &end, 10);
        if (errno != 0 || *end != '\0' || v < 0 || v > 255)
            return crb_error(CR_ERR_INVALID_CONFIG, "MC_REDIS_DB_INDEX '%.40s' is not 0..255", db);
        rb->db = (int)v;
    }
    return 0;
}

int crm_redis_backend_create(const char *hostport, int timeout_ms, int ttl_s, crm_backend **out)
{
    if (hostport == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crm_redis_backend_create: NULL argument");
    if (ttl_s < 1 || ttl_s > 3600)
        return crb_error(CR_ERR_INVALID_CONFIG, "redis metadata TTL %d s is outside 1..3600",
                         ttl_s);
    redis_backend *rb = calloc(1, sizeof(*rb));
    if (rb == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "redis metadata backend");
    int rc;
    if (strpbrk(hostport, "/?#@, \t") != NULL ||
        crb_parse_hostport(hostport, rb->host, &rb->port) < 0 || rb->port == 0 ||
        rb->host[0] == '\0') {
        rc = crb_error(CR_ERR_INVALID_CONFIG,
                       "redis address '%.200s' is not host:port (e.g. redis://127.0.0.1:6379)",
                       hostport);
        goto err_free;
    }
    rc = read_env(rb);
    if (rc < 0)
        goto err_free;
    snprintf(rb->name, sizeof(rb->name), "%s", hostport);
    rb->timeout_ms = timeout_ms > 0 ? timeout_ms : REDIS_DEFAULT_MS;
    rb->connect_ms = rb->timeout_ms < REDIS_CONNECT_MS ? rb->timeout_ms : REDIS_CONNECT_MS;
    rb->ttl_ms = (long long)ttl_s * 1000;
    pthread_mutex_init(&rb->pool_lock, NULL);
    pthread_mutex_init(&rb->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rb->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&rb->refresher, NULL, refresher_main, rb) != 0) {
        rc = crb_error(CR_ERR_SYSTEM, "redis metadata backend: cannot start its thread");
        goto err_destroy_sync;
    }
    rb->base.ops = &redis_ops;
    rb->base.peer_to_peer = false;
    rb->base.timeout_ms = rb->timeout_ms;
    *out = &rb->base;
    return 0;

err_destroy_sync:
    pthread_cond_destroy(&rb->wake);
    pthread_mutex_destroy(&rb->lock);
    pthread_mutex_destroy(&rb->pool_lock);
err_free:
    free(rb->username);
    free(rb->password);
    free(rb);
    return rc;
}
