/*
 * store_c.c - Mooncake's store_c.h over crescent's store client (cr_store).
 *
 * A mooncake_store_t is a crx_store: the cr_store once set up, behind a
 * read-write lock so that destroy (or a second setup) never races a call
 * in flight. Arguments are checked the way Mooncake's wrapper checks them
 * (NULL store / key / arrays: -1). Results are Mooncake's ErrorCode numbers:
 * crescent's store codes are those numbers already, engine codes are
 * mapped (crx_store_error), and a destination smaller than the value is
 * INVALID_PARAMS (-600) as in Mooncake.
 *
 * setup() follows Mooncake's real client: a local_hostname without a port
 * gets one from MC_STORE_CLIENT_MIN_PORT..MC_STORE_CLIENT_MAX_PORT
 * (12300..14300), retried MC_STORE_CLIENT_SETUP_RETRIES times (20) when the
 * port is taken; protocol "tcp" stays sockets only, "rdma" becomes crescent's
 * "auto"; P2PHANDSHAKE and http:// metadata are supported.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compat/compat.h"
#include "store_c.h"

#define STORE_MAGIC 0x43525354u /* "CRST" */

typedef struct crx_store {
    uint32_t magic;
    pthread_rwlock_t lock; /* read: calls; write: setup, destroy */
    cr_store *s;
} crx_store;

static crx_store *as_store(mooncake_store_t h)
{
    crx_store *x = h;
    return x != NULL && x->magic == STORE_MAGIC ? x : NULL;
}

/* Enter a call on a set-up store (read lock held on success). */
static cr_store *enter(mooncake_store_t h, crx_store **out)
{
    crx_store *x = as_store(h);
    if (x == NULL)
        return NULL;
    pthread_rwlock_rdlock(&x->lock);
    if (x->s == NULL) {
        pthread_rwlock_unlock(&x->lock);
        crx_log("the store is not set up (call mooncake_store_setup first)");
        return NULL;
    }
    *out = x;
    return x->s;
}

static void leave(crx_store *x)
{
    pthread_rwlock_unlock(&x->lock);
}

/* Mooncake's replicate config as crescent's (preferred segments borrowed). */
static void to_config(const mooncake_replicate_config_t *in, cr_replicate_config *out)
{
    cr_replicate_config_init(out);
    if (in == NULL)
        return;
    out->replica_num = in->replica_num > UINT32_MAX ? UINT32_MAX : (uint32_t)in->replica_num;
    out->soft_pin_action = in->with_soft_pin ? CR_SOFT_PIN_ENABLE : CR_SOFT_PIN_PRESERVE;
    out->hard_pin = in->with_hard_pin != 0;
    if (in->preferred_segments != NULL && in->preferred_segments_count > 0) {
        out->preferred_segments = in->preferred_segments;
        out->n_preferred = in->preferred_segments_count;
    }
}

/* Mooncake skips NULL entries of preferred_segments; crescent wants none. */
static int check_config(const mooncake_replicate_config_t *c)
{
    for (size_t i = 0;
         c != NULL && c->preferred_segments != NULL && i < c->preferred_segments_count; i++)
        if (c->preferred_segments[i] == NULL) {
            crx_log("preferred_segments[%zu] is NULL", i);
            return -1;
        }
    return 0;
}

static int put_result(int rc, const char *what)
{
    if (rc < 0)
        crx_log_failure(what, rc);
    return crx_store_error(rc);
}

/* --- lifecycle --------------------------------------------------------------- */

CRX_EXPORT mooncake_store_t mooncake_store_create(void)
{
    crx_store *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return NULL;
    pthread_rwlock_init(&x->lock, NULL);
    x->magic = STORE_MAGIC;
    return x;
}

CRX_EXPORT void mooncake_store_destroy(mooncake_store_t store)
{
    crx_store *x = as_store(store);
    if (x == NULL)
        return;
    pthread_rwlock_wrlock(&x->lock);
    cr_store_destroy(x->s);
    x->s = NULL;
    x->magic = 0;
    pthread_rwlock_unlock(&x->lock);
    pthread_rwlock_destroy(&x->lock);
    free(x);
}

CRX_EXPORT int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
                                    const char *metadata_server, uint64_t global_segment_size,
                                    uint64_t local_buffer_size, const char *protocol,
                                    const char *device_name, const char *master_server_addr)
{
    crx_store *x = as_store(store);
    if (x == NULL)
        return -1;
    crx_check_env();
    const char *meta, *proto;
    if (crx_metadata(metadata_server, &meta) < 0 ||
        crx_protocol(protocol ? protocol : "tcp", &proto) < 0)
        return CR_INVALID_PARAMS;
    const char *host = local_hostname && *local_hostname ? local_hostname : "";
    if (*host == '\0') {
        crx_log("mooncake_store_setup: local_hostname is empty");
        return CR_INVALID_PARAMS;
    }
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.metadata = meta;
    cfg.protocol = proto;
    cfg.devices = device_name ? device_name : "";
    cfg.master_address =
        master_server_addr && *master_server_addr ? master_server_addr : "127.0.0.1:50051";
    cfg.global_segment_size = global_segment_size;
    cfg.local_buffer_size =
        local_buffer_size > 0 && local_buffer_size < 4096 ? 4096 : local_buffer_size;
    bool pick = !crx_has_port(host);
    static const char *const min_names[] = {"MC_STORE_CLIENT_MIN_PORT", NULL};
    static const char *const max_names[] = {"MC_STORE_CLIENT_MAX_PORT", NULL};
    int lo = 0, hi = 0;
    if (pick)
        crx_port_range(min_names, max_names, 12300, 14300, &lo, &hi);
    long retries = pick ? crx_env_long("MC_STORE_CLIENT_SETUP_RETRIES", 20) : 1;
    if (retries < 1)
        retries = 20;
    pthread_rwlock_wrlock(&x->lock);
    if (x->s != NULL) {
        pthread_rwlock_unlock(&x->lock);
        crx_log("mooncake_store_setup: this store is already set up");
        return CR_INVALID_PARAMS;
    }
    int rc = CR_INTERNAL_ERROR;
    char name[300];
    for (long attempt = 0; attempt < retries; attempt++) {
        if (pick) {
            int port = crx_pick_port(host, lo, hi);
            if (port == 0) {
                rc = CR_INTERNAL_ERROR;
                struct timespec ts = {0, 100 * 1000 * 1000};
                nanosleep(&ts, NULL);
                continue;
            }
            snprintf(name, sizeof(name), "%s:%d", host, port);
            cfg.local_hostname = name;
        } else {
            cfg.local_hostname = host;
        }
        rc = cr_store_setup(&cfg, &x->s);
        if (rc != CR_ERR_BIND && rc != CR_SEGMENT_ALREADY_EXISTS)
            break;
    }
    pthread_rwlock_unlock(&x->lock);
    if (rc < 0) {
        crx_log_failure("mooncake_store_setup", rc);
        return rc == CR_ERR_BIND ? CR_INTERNAL_ERROR : crx_store_error(rc);
    }
    return 0;
}

CRX_EXPORT int mooncake_store_init_all(mooncake_store_t store, const char *protocol,
                                       const char *device_name, uint64_t mount_segment_size)
{
    (void)protocol;
    (void)device_name;
    (void)mount_segment_size;
    if (as_store(store) == NULL)
        return -1;
    crx_log("mooncake_store_init_all (Mooncake's legacy etcd setup) is not supported; use "
            "mooncake_store_setup");
    return -1;
}

CRX_EXPORT int mooncake_store_health_check(mooncake_store_t store)
{
    crx_store *x = as_store(store);
    if (x == NULL)
        return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return 1; /* not set up */
    int rc = cr_store_health(s);
    leave(x);
    return rc == 0 ? 0 : 2; /* 2: the master does not answer (or knows us not) */
}

/* --- writes -------------------------------------------------------------------- */

CRX_EXPORT int mooncake_store_put(mooncake_store_t store, const char *key, const void *value,
                                  size_t size, const mooncake_replicate_config_t *config)
{
    crx_store *x;
    if (key == NULL || (value == NULL && size > 0) || check_config(config) < 0)
        return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    cr_replicate_config cfg;
    to_config(config, &cfg);
    int rc = cr_store_put(s, key, value, size, &cfg);
    leave(x);
    return put_result(rc, "mooncake_store_put");
}

CRX_EXPORT int mooncake_store_put_from(mooncake_store_t store, const char *key, void *buffer,
                                       size_t size, const mooncake_replicate_config_t *config)
{
    crx_store *x;
    if (key == NULL || (buffer == NULL && size > 0) || check_config(config) < 0)
        return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    cr_replicate_config cfg;
    to_config(config, &cfg);
    int rc = cr_store_put_from(s, key, buffer, size, &cfg);
    leave(x);
    return put_result(rc, "mooncake_store_put_from");
}

/* NULL arrays or entries: -1 before anything runs (Mooncake's checks). */
static int check_batch(const char **keys, void **buffers, const size_t *sizes, size_t count,
                       const void *results)
{
    if (keys == NULL || buffers == NULL || sizes == NULL || results == NULL)
        return -1;
    for (size_t i = 0; i < count; i++)
        if (keys[i] == NULL || (buffers[i] == NULL && sizes[i] > 0))
            return -1;
    return 0;
}

CRX_EXPORT int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys,
                                             void **buffers, const size_t *sizes, size_t count,
                                             const mooncake_replicate_config_t *config,
                                             int *results_out)
{
    crx_store *x;
    if (check_batch(keys, buffers, sizes, count, results_out) < 0 || check_config(config) < 0)
        return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    cr_replicate_config cfg;
    to_config(config, &cfg);
    int rc = cr_store_batch_put_from(s, (const char *const *)keys, buffers, sizes, count, &cfg,
                                     results_out);
    leave(x);
    if (rc < 0 && rc == CR_INVALID_PARAMS)
        return -1;
    for (size_t i = 0; i < count; i++)
        results_out[i] = crx_store_error(results_out[i]);
    return 0;
}

/* --- reads ----------------------------------------------------------------------- */

static int64_t read_code(int64_t v)
{
    return v == CR_BUFFER_OVERFLOW ? CR_INVALID_PARAMS : (int64_t)crx_store_error((int)v);
}

CRX_EXPORT int64_t mooncake_store_get_into(mooncake_store_t store, const char *key, void *buffer,
                                           size_t size)
{
    crx_store *x;
    if (key == NULL || (buffer == NULL && size > 0))
        return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    int64_t rc = cr_store_get_into(s, key, buffer, size);
    leave(x);
    return rc < 0 ? read_code(rc) : rc;
}

CRX_EXPORT int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys,
                                             void **buffers, const size_t *sizes, size_t count,
                                             int64_t *results_out)
{
    crx_store *x;
    if (check_batch(keys, buffers, sizes, count, results_out) < 0)
        return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    int rc =
        cr_store_batch_get_into(s, (const char *const *)keys, buffers, sizes, count, results_out);
    leave(x);
    if (rc == CR_INVALID_PARAMS)
        return -1;
    for (size_t i = 0; i < count; i++)
        if (results_out[i] < 0)
            results_out[i] = read_code(results_out[i]);
    return 0;
}

/* --- existence, size, name ---------------------------------------------------------- */

CRX_EXPORT int mooncake_store_is_exist(mooncake_store_t store, const char *key)
{
    crx_store *x;
    if (key == NULL)
        return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    int rc = cr_store_exist(s, key);
    leave(x);
    return crx_store_error(rc);
}

CRX_EXPORT int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys,
                                             size_t count, int *results_out)
{
    crx_store *x;
    if (keys == NULL || results_out == NULL)
        return -1;
    for (size_t i = 0; i < count; i++)
        if (keys[i] == NULL)
            return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    int rc = cr_store_batch_exist(s, (const char *const *)keys, count, results_out);
    leave(x);
    if (rc < 0) /* the master call failed as a whole */
        for (size_t i = 0; i < count; i++)
            results_out[i] = crx_store_error(rc);
    return 0;
}

CRX_EXPORT int64_t mooncake_store_get_size(mooncake_store_t store, const char *key)
{
    crx_store *x;
    if (key == NULL)
        return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    int64_t rc = cr_store_get_size(s, key);
    leave(x);
    return rc < 0 ? crx_store_error((int)rc) : rc;
}

CRX_EXPORT int mooncake_store_get_hostname(mooncake_store_t store, char *buf_out, size_t buf_len)
{
    crx_store *x;
    if (buf_out == NULL || buf_len == 0)
        return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    int rc = cr_store_hostname(s, buf_out, buf_len);
    leave(x);
    return rc < 0 ? -1 : 0;
}

/* --- removal ------------------------------------------------------------------------ */

CRX_EXPORT int mooncake_store_remove(mooncake_store_t store, const char *key, int force)
{
    crx_store *x;
    if (key == NULL)
        return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    int rc = cr_store_remove(s, key, force != 0);
    leave(x);
    return crx_store_error(rc);
}

CRX_EXPORT int64_t mooncake_store_remove_by_regex(mooncake_store_t store, const char *pattern,
                                                  int force)
{
    crx_store *x;
    if (pattern == NULL)
        return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    int64_t rc = cr_store_remove_by_regex(s, pattern, force != 0);
    leave(x);
    return rc < 0 ? crx_store_error((int)rc) : rc;
}

CRX_EXPORT int64_t mooncake_store_remove_all(mooncake_store_t store, int force)
{
    crx_store *x;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    int64_t rc = cr_store_remove_all(s, force != 0);
    leave(x);
    return rc < 0 ? crx_store_error((int)rc) : rc;
}

/* --- memory ---------------------------------------------------------------------------- */

CRX_EXPORT int mooncake_store_register_buffer(mooncake_store_t store, void *buffer, size_t size)
{
    crx_store *x;
    if (buffer == NULL || size == 0)
        return -1;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    int rc = cr_store_register_buffer(s, buffer, size);
    leave(x);
    return put_result(rc, "mooncake_store_register_buffer");
}

CRX_EXPORT int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer)
{
    crx_store *x;
    cr_store *s = enter(store, &x);
    if (s == NULL)
        return -1;
    int rc = cr_store_unregister_buffer(s, buffer);
    leave(x);
    return put_result(rc, "mooncake_store_unregister_buffer");
}
