/*
 * http_server.c - the HTTP metadata server on libmicrohttpd.
 *
 * Design: the shared wrapper (httpd/mhd_server.h) gates connections until
 * their request head is complete and MHD serves them with a small pool of
 * worker threads, one request per connection within a deadline. The
 * request handler never blocks: GET and DELETE are answered on the first
 * callback; a PUT reserves its announced size against the quota (507 when
 * it does not fit) and gets a buffer that grows as the body arrives (never
 * sized from Content-Length alone), and is answered once the body is
 * complete. Oversized bodies are refused with 413 before reading when
 * Content-Length says so, otherwise discarded as they stream in and refused
 * at the end. The store is a crd_kv_table behind one mutex, which also
 * guards the quota counters; finished PUT buffers are handed to the table
 * without a copy when they are exactly the value's size, and GET copies
 * the value out under the lock so that the response owns its bytes.
 */
#include "mdserver/http_server.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "base/error.h"
#include "base/log.h"
#include "httpd/mhd_server.h"
#include "mdserver/kv_table.h"

#define SERVER_IDLE_TIMEOUT_S 5
#define BODY_FIRST_CHUNK      ((size_t)64 << 10) /* first buffer of a PUT body */

struct crd_http_server {
    crh_mhd_server mhd;
    crd_http_server_config cfg;
    pthread_mutex_t lock; /* guards table and reserved */
    crd_kv_table *table;
    uint64_t reserved; /* quota held by PUTs whose body is arriving */
};

/* State of one PUT while its body arrives. */
typedef struct put_request {
    crd_http_server *s;
    char *key;
    char *buf; /* crd_value_alloc(cap) */
    size_t len;
    size_t cap;
    size_t expect;  /* Content-Length, or 0 when chunked */
    uint64_t holds; /* quota reserved for it */
    bool too_large;
    bool over_quota;
    bool oom;
} put_request;

void crd_http_server_config_default(crd_http_server_config *cfg)
{
    *cfg = (crd_http_server_config){.max_total_bytes = 256ull << 20,
                                    .max_value_bytes = CRD_HTTP_SERVER_MAX_VALUE,
                                    .max_keys = 1000000,
                                    .max_connections = 1024,
                                    .request_timeout_ms = 30000,
                                    .threads = 4};
}

/* Reserve n more bytes of quota for pr (lock taken); false when it does not fit. */
static bool quota_hold(crd_http_server *s, put_request *pr, uint64_t n, bool new_key)
{
    pthread_mutex_lock(&s->lock);
    uint64_t used =
        crd_kv_table_value_bytes(s->table) + crd_kv_table_key_bytes(s->table) + s->reserved;
    bool ok = n <= s->cfg.max_total_bytes && used <= s->cfg.max_total_bytes - n &&
              (!new_key || crd_kv_table_count(s->table) < s->cfg.max_keys);
    if (ok) {
        s->reserved += n;
        pr->holds += n;
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

static void quota_release_locked(crd_http_server *s, put_request *pr)
{
    s->reserved -= pr->holds;
    pr->holds = 0;
}

/* Queue a response; `owned` bodies came from malloc and are freed by MHD (or here). */
static enum MHD_Result reply(struct MHD_Connection *conn, unsigned int status, const void *body,
                             size_t len, bool owned, const char *content_type)
{
    if (owned && len == 0) {
        free((void *)body);
        body = "";
        owned = false;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, (void *)body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        if (owned)
            free((void *)body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    crh_mhd_response_headers(r);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, PUT, DELETE");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned int status,
                                  const char *text)
{
    return reply(conn, status, text, strlen(text), false, "text/plain");
}

static enum MHD_Result handle_get(crd_http_server *s, struct MHD_Connection *conn, const char *key)
{
    void *value = NULL;
    size_t len = 0;
    pthread_mutex_lock(&s->lock);
    int rc = crd_kv_table_get(s->table, key, &value, &len);
    pthread_mutex_unlock(&s->lock);
    if (rc == CR_ERR_NOT_FOUND)
        return reply_text(conn, MHD_HTTP_NOT_FOUND, "metadata not found");
    if (rc < 0)
        return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    return reply(conn, MHD_HTTP_OK, value, len, true, "application/octet-stream");
}

static enum MHD_Result handle_delete(crd_http_server *s, struct MHD_Connection *conn,
                                     const char *key)
{
    pthread_mutex_lock(&s->lock);
    int rc = crd_kv_table_del(s->table, key);
    pthread_mutex_unlock(&s->lock);
    if (rc < 0)
        return reply_text(conn, MHD_HTTP_NOT_FOUND, "metadata not found");
    return reply_text(conn, MHD_HTTP_OK, "metadata deleted");
}

/* First callback of a PUT: check the announced size against the limits,
 * reserve it against the quota; the buffer comes as the body arrives. */
static enum MHD_Result begin_put(crd_http_server *s, struct MHD_Connection *conn, const char *key,
                                 void **req_cls)
{
    size_t expect = 0;
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(cl, &end, 10);
        if (errno != 0 || v > s->cfg.max_value_bytes)
            return reply_text(conn, MHD_HTTP_CONTENT_TOO_LARGE, "value too large");
        expect = (size_t)v;
    }
    put_request *pr = calloc(1, sizeof(*pr));
    if (pr == NULL)
        return MHD_NO;
    pr->s = s;
    pr->expect = expect;
    pr->key = strdup(key);
    if (pr->key == NULL) {
        free(pr);
        return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    pthread_mutex_lock(&s->lock);
    bool new_key = !crd_kv_table_contains(s->table, key);
    pthread_mutex_unlock(&s->lock);
    if (!quota_hold(s, pr, strlen(key) + expect, new_key)) {
        free(pr->key);
        free(pr);
        return reply_text(conn, MHD_HTTP_INSUFFICIENT_STORAGE,
                          "metadata server quota exhausted (--max_total_bytes / --max_keys)");
    }
    *req_cls = pr;
    return MHD_YES;
}

static void drop_buffer(put_request *pr)
{
    crd_value_free(pr->buf, pr->cap);
    pr->buf = NULL;
    pr->len = pr->cap = 0;
}

static void put_append(put_request *pr, const char *data, size_t n)
{
    crd_http_server *s = pr->s;
    if (pr->too_large || pr->oom || pr->over_quota)
        return; /* already refused: discard the rest */
    if (n > s->cfg.max_value_bytes - pr->len) {
        pr->too_large = true;
        drop_buffer(pr);
        return;
    }
    /* A chunked body (or one longer than announced) holds quota as it grows. */
    size_t want = pr->len + n;
    size_t held = pr->expect;
    if (want > held && !quota_hold(s, pr, want - (pr->holds - strlen(pr->key)), false)) {
        pr->over_quota = true;
        drop_buffer(pr);
        return;
    }
    if (want > pr->cap) {
        size_t cap = pr->cap > 0 ? pr->cap : BODY_FIRST_CHUNK;
        while (cap < want)
            cap *= 2;
        if (pr->expect >= want && cap > pr->expect)
            cap = pr->expect; /* the announced size is the most it needs */
        if (cap > s->cfg.max_value_bytes)
            cap = s->cfg.max_value_bytes;
        char *p = crd_value_alloc(cap);
        if (p == NULL) {
            pr->oom = true;
            drop_buffer(pr);
            return;
        }
        if (pr->len > 0)
            memcpy(p, pr->buf, pr->len);
        crd_value_free(pr->buf, pr->cap);
        pr->buf = p;
        pr->cap = cap;
    }
    memcpy(pr->buf + pr->len, data, n);
    pr->len += n;
}

/* Later callbacks of a PUT: body chunks, then a final call with no data. */
static enum MHD_Result continue_put(crd_http_server *s, struct MHD_Connection *conn,
                                    put_request *pr, const char *data, size_t *data_size)
{
    if (*data_size > 0) {
        put_append(pr, data, *data_size);
        *data_size = 0;
        return MHD_YES;
    }
    if (pr->too_large)
        return reply_text(conn, MHD_HTTP_CONTENT_TOO_LARGE, "value too large");
    if (pr->over_quota)
        return reply_text(conn, MHD_HTTP_INSUFFICIENT_STORAGE,
                          "metadata server quota exhausted (--max_total_bytes)");
    if (pr->oom)
        return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    /* The table owns values of exactly their length. */
    if (pr->cap != pr->len) {
        char *exact = pr->len > 0 ? crd_value_alloc(pr->len) : NULL;
        if (pr->len > 0 && exact == NULL)
            return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
        if (pr->len > 0)
            memcpy(exact, pr->buf, pr->len);
        crd_value_free(pr->buf, pr->cap);
        pr->buf = exact;
        pr->cap = pr->len;
    }
    pthread_mutex_lock(&s->lock);
    quota_release_locked(s, pr); /* the table counts it from here on */
    int rc = crd_kv_table_put_owned(s->table, pr->key, pr->buf, pr->len);
    pthread_mutex_unlock(&s->lock);
    if (rc < 0)
        return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    pr->buf = NULL; /* the table owns it now */
    pr->cap = 0;
    return reply_text(conn, MHD_HTTP_OK, "metadata updated");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    crd_http_server *s = cls;
    if (*req_cls != NULL)
        return continue_put(s, conn, *req_cls, upload_data, upload_data_size);

    bool is_get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    if (strcmp(url, "/health") == 0) {
        if (!is_get)
            return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
        return reply_text(conn, MHD_HTTP_OK, "OK");
    }
    if (strcmp(url, "/metadata") != 0)
        return reply_text(conn, MHD_HTTP_NOT_FOUND, "no such path");
    bool is_put = strcmp(method, MHD_HTTP_METHOD_PUT) == 0;
    bool is_delete = strcmp(method, MHD_HTTP_METHOD_DELETE) == 0;
    if (!is_get && !is_put && !is_delete)
        return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");

    const char *key = NULL;
    size_t key_len = 0;
    if (MHD_lookup_connection_value_n(conn, MHD_GET_ARGUMENT_KIND, "key", 3, &key, &key_len) !=
            MHD_YES ||
        key == NULL || key_len == 0)
        return reply_text(conn, MHD_HTTP_BAD_REQUEST, "missing key parameter");
    if (strlen(key) != key_len)
        return reply_text(conn, MHD_HTTP_BAD_REQUEST, "key contains a NUL byte");

    if (is_get)
        return handle_get(s, conn, key);
    if (is_delete)
        return handle_delete(s, conn, key);
    return begin_put(s, conn, key, req_cls);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    put_request *pr = *req_cls;
    if (pr == NULL)
        return;
    crd_http_server *s = pr->s;
    pthread_mutex_lock(&s->lock);
    quota_release_locked(s, pr);
    pthread_mutex_unlock(&s->lock);
    crd_value_free(pr->buf, pr->cap);
    free(pr->key);
    free(pr);
    *req_cls = NULL;
}

int crd_http_server_start(const char *host, uint16_t port, crd_http_server **out)
{
    return crd_http_server_start_with(host, port, NULL, out);
}

int crd_http_server_start_with(const char *host, uint16_t port, const crd_http_server_config *cfg,
                               crd_http_server **out)
{
    if (host == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crd_http_server_start: NULL argument");
    crd_http_server_config c;
    if (cfg != NULL)
        c = *cfg;
    else
        crd_http_server_config_default(&c);
    if (c.max_total_bytes == 0 || c.max_value_bytes == 0 || c.max_keys == 0 ||
        c.max_connections == 0 || c.request_timeout_ms == 0 || c.threads == 0)
        return crb_error(CR_INVALID_PARAMS,
                         "metadata server: quotas, limits and threads must be > 0");
    crd_http_server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "metadata server %s:%u: out of memory", host,
                         (unsigned)port);
    s->cfg = c;
    int rc = 0;
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        rc = crb_error(CR_ERR_SYSTEM, "metadata server: pthread_mutex_init failed");
        goto free_server;
    }
    rc = crd_kv_table_create(&s->table);
    if (rc < 0)
        goto destroy_lock;
    const crh_mhd_config mcfg = {
        .threads = c.threads,
        .connection_limit = c.max_connections,
        .idle_timeout_s = SERVER_IDLE_TIMEOUT_S,
        .request_timeout_ms = c.request_timeout_ms,
        .on_request = on_request,
        .request_cls = s,
        .on_completed = on_completed,
        .completed_cls = s,
    };
    rc = crh_mhd_start(&s->mhd, "metadata server", host, port, &mcfg);
    if (rc < 0)
        goto destroy_table;
    *out = s;
    return 0;

destroy_table:
    crd_kv_table_destroy(s->table);
destroy_lock:
    pthread_mutex_destroy(&s->lock);
free_server:
    free(s);
    return rc;
}

uint16_t crd_http_server_port(const crd_http_server *s)
{
    return s->mhd.port;
}

static int ends_with(const char *s, size_t sl, const char *tail, size_t tl)
{
    return sl >= tl && memcmp(s + sl - tl, tail, tl) == 0;
}

static int engine_key_of(const char *key, void *ctx)
{
    const char *name = ctx;
    size_t kl = strlen(key), nl = strlen(name);
    if (!ends_with(key, kl, name, nl))
        return 0;
    return ends_with(key, kl - nl, "/ram/", 5) || ends_with(key, kl - nl, "/rpc_meta/", 10);
}

size_t crd_http_server_forget_segment(crd_http_server *s, const char *name)
{
    pthread_mutex_lock(&s->lock);
    size_t n = crd_kv_table_del_if(s->table, engine_key_of, (void *)name);
    pthread_mutex_unlock(&s->lock);
    return n;
}

uint64_t crd_http_server_stored_bytes(crd_http_server *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t n = crd_kv_table_value_bytes(s->table) + crd_kv_table_key_bytes(s->table);
    pthread_mutex_unlock(&s->lock);
    return n;
}

size_t crd_http_server_key_count(crd_http_server *s)
{
    pthread_mutex_lock(&s->lock);
    size_t n = crd_kv_table_count(s->table);
    pthread_mutex_unlock(&s->lock);
    return n;
}

void crd_http_server_stop(crd_http_server *s)
{
    if (s == NULL)
        return;
    if (!crh_mhd_stop(&s->mhd))
        return; /* its stuck workers may still use s (logged): left to the exit */
    crd_kv_table_destroy(s->table);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
