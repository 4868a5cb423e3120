/*
 * admin_http.c - the master's admin port (/metrics, /health and Mooncake's
 * admin paths) on libmicrohttpd (see admin_http.h).
 *
 * Design: as in mdserver/http_server.c, the shared wrapper (httpd/mhd_server.h)
 * gates connections until their request head is complete and MHD serves
 * them with a small worker pool, one request per connection within a
 * deadline, so slow clients cannot take /health away; every request is answered on its
 * first callback: these are bodiless GETs, so nothing is buffered per
 * request. The handler builds the body in a crk_text (or a jansson value,
 * serialized compactly) through the daemon's callback, found in one table
 * of paths (ROUTES: path, callback, parameter, content type), and hands the bytes to
 * MHD without copying (MHD frees them). A failing callback's partial output
 * is dropped and replaced by a JSON error naming the status, with the detail
 * the callback recorded through crb_error on this same worker thread. Bytes
 * from clients (keys) reach JSON only through crk_admin_json_text, which
 * replaces invalid UTF-8, so every document is valid JSON.
 *
 * MHD's own messages go to crb_log; the last one is kept so that a failed
 * start can say why (e.g. "Address already in use").
 */
#include "master/admin_http.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "base/error.h"
#include "base/log.h"
#include "httpd/mhd_server.h"
#include "crescent/status.h"

#define ADMIN_THREADS            2
#define ADMIN_CONNECTION_LIMIT   256
#define ADMIN_IDLE_TIMEOUT_S     5
#define ADMIN_REQUEST_TIMEOUT_MS 10000

struct crk_admin_http {
    crh_mhd_server mhd;
    crk_admin_callbacks cb;
};

/* Queue the bytes of body (taken over) with a status and content type. */
static enum MHD_Result send_text(struct MHD_Connection *conn, unsigned int status, crk_text *body,
                                 const char *content_type)
{
    size_t len = 0;
    char *bytes = crk_text_steal(body, &len);
    struct MHD_Response *r;
    if (bytes == NULL || len == 0) {
        free(bytes);
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    } else {
        r = MHD_create_response_from_buffer(len, bytes, MHD_RESPMEM_MUST_FREE);
        if (r == NULL)
            free(bytes);
    }
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    crh_mhd_response_headers(r);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static unsigned int http_status_of(int rc)
{
    switch (rc) {
    case CR_OBJECT_NOT_FOUND:
    case CR_SEGMENT_NOT_FOUND:
    case CR_ERR_NOT_FOUND:
        return MHD_HTTP_NOT_FOUND;
    case CR_INVALID_KEY:
    case CR_INVALID_PARAMS:
        return MHD_HTTP_BAD_REQUEST;
    case CR_UNAVAILABLE_IN_CURRENT_STATUS:
    case CR_ERR_SHUTDOWN:
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    default:
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
}

/* --- JSON helpers ------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if it is not one. */
static size_t utf8_seq(const unsigned char *p)
{
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    unsigned cp = c & (0x7Fu >> n);
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

bool crk_admin_is_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p != '\0') {
        size_t n = utf8_seq(p);
        if (n == 0)
            return false;
        p += n;
    }
    return true;
}

json_t *crk_admin_json_text(const char *s)
{
    if (crk_admin_is_utf8(s))
        return json_string(s);
    size_t len = strlen(s);
    char *clean = malloc(len * 3 + 1);
    if (clean == NULL)
        return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t w = 0;
    while (*p != '\0') {
        size_t n = utf8_seq(p);
        if (n == 0) {
            memcpy(clean + w, "\xEF\xBF\xBD", 3); /* U+FFFD */
            w += 3;
            p++;
        } else {
            memcpy(clean + w, p, n);
            w += n;
            p += n;
        }
    }
    clean[w] = '\0';
    json_t *j = json_string(clean);
    free(clean);
    return j;
}

json_t *crk_admin_json_hex(const char *s)
{
    static const char digits[] = "0123456789abcdef";
    size_t len = strlen(s);
    char *hex = malloc(len * 2 + 1);
    if (hex == NULL)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        hex[2 * i] = digits[(unsigned char)s[i] >> 4];
        hex[2 * i + 1] = digits[(unsigned char)s[i] & 15];
    }
    hex[2 * len] = '\0';
    json_t *j = json_string(hex);
    free(hex);
    return j;
}

/* Serialize j (taken over) as the body of a response. */
static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned int status, json_t *j,
                                 const char *content_type)
{
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (text == NULL)
        return MHD_NO;
    crk_text t = {0};
    int rc = crk_text_puts(&t, text);
    free(text);
    if (rc != 0) {
        crk_text_free(&t);
        return MHD_NO;
    }
    return send_text(conn, status, &t, content_type);
}

/* Mooncake's and crescent's error fields with the given HTTP status. */
static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned int status, int rc,
                                  const char *message)
{
    json_t *j = json_pack("{s:b, s:i, s:o*, s:s, s:i, s:o*}", "success", 0, "error_code", rc,
                          "error_message", crk_admin_json_text(message), "error",
                          cr_status_name(rc), "code", rc, "message", crk_admin_json_text(message));
    return send_json(conn, status, j, CRK_ADMIN_JSON_TYPE);
}

typedef int (*arg_fn)(void *ctx, const char *arg, crk_admin_reply *reply);
typedef int (*plain_fn)(void *ctx, crk_admin_reply *reply);

/* One path: its callback (one of the two shapes), parameter, content type. */
typedef struct route {
    const char *path;
    size_t plain_off;  /* offset of a plain_fn in crk_admin_callbacks, or SIZE_MAX */
    size_t arg_off;    /* offset of an arg_fn, or SIZE_MAX */
    const char *param; /* required query parameter, or NULL */
    const char *content_type;
} route;

#define PLAIN(path, member, type)                                                                  \
    {                                                                                              \
        path, offsetof(crk_admin_callbacks, member), SIZE_MAX, NULL, type                          \
    }
#define WITH_ARG(path, member, param, type)                                                        \
    {                                                                                              \
        path, SIZE_MAX, offsetof(crk_admin_callbacks, member), param, type                         \
    }

static const route ROUTES[] = {
    PLAIN("/metrics", render_metrics, CRK_ADMIN_PROMETHEUS_TYPE),
    PLAIN("/health", health, CRK_ADMIN_JSON_TYPE),
    PLAIN("/get_all_segments", all_segments, CRK_ADMIN_TEXT_TYPE),
    WITH_ARG("/query_key", query_key, "key", CRK_ADMIN_JSON_TYPE),
    WITH_ARG("/metrics/summary", metrics_summary, NULL, CRK_ADMIN_TEXT_TYPE),
    WITH_ARG("/get_all_keys", all_keys, NULL, CRK_ADMIN_TEXT_TYPE),
    WITH_ARG("/get_segments_detail", segments_detail, NULL, CRK_ADMIN_JSON_TYPE),
    WITH_ARG("/query_segment", query_segment, "segment", CRK_ADMIN_TEXT_TYPE),
    WITH_ARG("/batch_query_keys", batch_query_keys, "keys", CRK_ADMIN_JSON_TYPE),
    WITH_ARG("/role", role, NULL, "text/plain; charset=utf-8"),
    WITH_ARG("/ha_status", ha_status, NULL, "text/plain; charset=utf-8"),
    WITH_ARG("/leader", leader, NULL, CRK_ADMIN_JSON_TYPE),
    WITH_ARG("/kv_events/status", kv_events, NULL, CRK_ADMIN_JSON_TYPE),
    WITH_ARG("/api/v1/segments/status", segment_status, "segment", CRK_ADMIN_JSON_TYPE),
};

/* The route's callback (NULL when the daemon gave none). */
static plain_fn plain_of(const crk_admin_callbacks *cb, const route *r)
{
    return r->plain_off == SIZE_MAX
               ? NULL
               : *(const plain_fn *)(const void *)((const char *)cb + r->plain_off);
}

static arg_fn arg_of(const crk_admin_callbacks *cb, const route *r)
{
    return r->arg_off == SIZE_MAX ? NULL
                                  : *(const arg_fn *)(const void *)((const char *)cb + r->arg_off);
}

/* Run one endpoint callback and answer with its reply or its failure. */
static enum MHD_Result run_callback(const crk_admin_http *s, struct MHD_Connection *conn,
                                    const route *rt, const char *arg)
{
    crk_admin_reply reply = {.body = {0}, .json = NULL, .content_type = rt->content_type};
    plain_fn plain = plain_of(&s->cb, rt);
    int rc = plain != NULL ? plain(s->cb.ctx, &reply) : arg_of(&s->cb, rt)(s->cb.ctx, arg, &reply);
    if (rc == 0 && reply.body.status != 0)
        rc = reply.body.status;
    if (rc > 0) /* a positive return is a contract violation: treat as internal */
        rc = crb_error(CR_INTERNAL_ERROR, "admin http: %s callback returned %d", rt->path, rc);
    if (rc != 0) {
        crk_text_free(&reply.body);
        json_decref(reply.json);
        return send_error(conn, http_status_of(rc), rc, cr_last_error_message());
    }
    if (reply.content_type == NULL)
        reply.content_type = rt->content_type;
    if (reply.json != NULL) {
        crk_text_free(&reply.body);
        return send_json(conn, MHD_HTTP_OK, reply.json, reply.content_type);
    }
    return send_text(conn, MHD_HTTP_OK, &reply.body, reply.content_type);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)req_cls;
    const crk_admin_http *s = cls;
    const route *rt = NULL;
    for (size_t i = 0; i < sizeof(ROUTES) / sizeof(ROUTES[0]) && rt == NULL; i++)
        if (strcmp(url, ROUTES[i].path) == 0)
            rt = &ROUTES[i];
    bool health = rt != NULL && strcmp(rt->path, "/health") == 0;
    if (rt == NULL || (!health && plain_of(&s->cb, rt) == NULL && arg_of(&s->cb, rt) == NULL))
        return send_error(conn, MHD_HTTP_NOT_FOUND, CR_ERR_NOT_FOUND, "no such path");
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return send_error(conn, MHD_HTTP_METHOD_NOT_ALLOWED, CR_INVALID_PARAMS,
                          "only GET and HEAD are allowed");

    if (health && s->cb.health == NULL)
        return send_json(conn, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"),
                         CRK_ADMIN_JSON_TYPE);
    const char *arg = NULL;
    if (rt->param != NULL) {
        size_t arg_len = 0;
        if (MHD_lookup_connection_value_n(conn, MHD_GET_ARGUMENT_KIND, rt->param, strlen(rt->param),
                                          &arg, &arg_len) != MHD_YES ||
            arg == NULL || arg_len == 0) {
            char msg[96];
            snprintf(msg, sizeof(msg), "missing %s parameter (%s?%s=...)", rt->param, rt->path,
                     rt->param);
            return send_error(
                conn, MHD_HTTP_BAD_REQUEST,
                strcmp(rt->param, "segment") == 0 ? CR_INVALID_PARAMS : CR_INVALID_KEY, msg);
        }
        if (strlen(arg) != arg_len)
            return send_error(conn, MHD_HTTP_BAD_REQUEST, CR_INVALID_KEY,
                              "parameter contains a NUL byte");
    }
    return run_callback(s, conn, rt, arg);
}

int crk_admin_http_start(const char *host, uint16_t port, const crk_admin_callbacks *cb,
                         crk_admin_http **out)
{
    if (host == NULL || cb == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crk_admin_http_start: NULL argument");
    crk_admin_http *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "admin http %s:%u: out of memory", host, (unsigned)port);
    s->cb = *cb;
    const crh_mhd_config cfg = {
        .threads = ADMIN_THREADS,
        .connection_limit = ADMIN_CONNECTION_LIMIT,
        .idle_timeout_s = ADMIN_IDLE_TIMEOUT_S,
        .request_timeout_ms = ADMIN_REQUEST_TIMEOUT_MS,
        .on_request = on_request,
        .request_cls = s,
    };
    int rc = crh_mhd_start(&s->mhd, "admin http server", host, port, &cfg);
    if (rc < 0) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

uint16_t crk_admin_http_port(const crk_admin_http *s)
{
    return s->mhd.port;
}

void crk_admin_http_stop(crk_admin_http *s)
{
    if (s == NULL)
        return;
    if (!crh_mhd_stop(&s->mhd))
        return; /* its stuck workers may still use s (logged): left to the exit */
    free(s);
}
