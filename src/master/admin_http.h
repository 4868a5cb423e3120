/*
 * admin_http.h - crescent-master's metrics and admin HTTP server.
 *
 * Endpoints (GET or HEAD; another method is 405, another path 404):
 *   /metrics                Prometheus text exposition 0.0.4
 *   /health                 JSON; {"status":"ok"} unless a callback says more
 *   /get_all_segments       JSON from the all_segments callback
 *   /query_key?key=K        JSON from the query_key callback; K is URL-decoded,
 *                           missing, empty or containing NUL is 400
 *
 * The server knows nothing of the master's data: the daemon passes a
 * callbacks struct and a context. A callback appends its body to the
 * reply and returns 0 for 200, or a negative cr_status, mapped to:
 *   CR_OBJECT_NOT_FOUND, CR_SEGMENT_NOT_FOUND, CR_ERR_NOT_FOUND    404
 *   CR_INVALID_KEY, CR_INVALID_PARAMS, CR_ERR_INVALID_ARGUMENT      400
 *   CR_UNAVAILABLE_IN_CURRENT_STATUS, CR_ERR_SHUTDOWN              503
 *   anything else                                                  500
 * whatever it appended is then discarded and the body is
 * {"error": "<status name>", "code": <status>, "message": "<last error>"}.
 * A NULL callback makes its endpoint 404 ("/health" answers the default).
 *
 * Threading: callbacks run on the server's worker threads, possibly several
 * at once, and must be thread-safe; they must not call crk_admin_http_stop.
 * Once stop returns no callback is running or will run. start/stop/port
 * may be called from any thread, but stop must not race with other calls
 * on the same server.
 */
#ifndef CRESCENT_MASTER_ADMIN_HTTP_H
#define CRESCENT_MASTER_ADMIN_HTTP_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "master/prom.h"

/** What a callback fills in: either text in body, or a JSON value in json
 *  (the server serializes it compactly and frees it; takes precedence over
 *  body). JSON is built with jansson, never by hand. */
typedef struct crk_admin_reply {
    crk_text body;            /* append the response body */
    json_t *json;             /* or set a JSON value (owned by the reply) */
    const char *content_type; /* preset to the endpoint's default; may point to a static string */
} crk_admin_reply;

/**
 * A JSON string for bytes that come from clients (keys, segment names):
 * valid UTF-8 is kept; every byte of an invalid sequence becomes U+FFFD,
 * so the document stays valid JSON. NULL only without memory.
 */
json_t *crk_admin_json_text(const char *s);

/** Is s (NUL-terminated) valid UTF-8 (no overlong forms, no surrogates)? */
bool crk_admin_is_utf8(const char *s);

/** s as lowercase hex (for an exact copy of a non-UTF-8 key); NULL without memory. */
json_t *crk_admin_json_hex(const char *s);

typedef struct crk_admin_callbacks {
    void *ctx; /* passed to every callback */
    /* /metrics: append the exposition (e.g. with crk_prom_*). */
    int (*render_metrics)(void *ctx, crk_admin_reply *reply);
    /* /health: append a JSON object; a failure answers 503/500 as above. */
    int (*health)(void *ctx, crk_admin_reply *reply);
    /* /get_all_segments */
    int (*all_segments)(void *ctx, crk_admin_reply *reply);
    /* /query_key: key is NUL-terminated, non-empty, URL-decoded. */
    int (*query_key)(void *ctx, const char *key, crk_admin_reply *reply);
    /* /role and /leader (HA masters, docs/ha.md): text; NULL: 404. */
    int (*role)(void *ctx, crk_admin_reply *reply);
    int (*leader)(void *ctx, crk_admin_reply *reply);
} crk_admin_callbacks;

typedef struct crk_admin_http crk_admin_http;

/**
 * Serve on host:port (numeric address or name; port 0 picks a free port,
 * see crk_admin_http_port). The callbacks struct is copied. Errors:
 * CR_ERR_INVALID_ARGUMENT, CR_ERR_DNS, CR_ERR_BIND (message names
 * host:port and why), CR_ERR_NO_MEMORY, CR_ERR_SYSTEM.
 */
int crk_admin_http_start(const char *host, uint16_t port, const crk_admin_callbacks *cb,
                         crk_admin_http **out);

/** The port actually bound. */
uint16_t crk_admin_http_port(const crk_admin_http *s);

/** Close the listener and every connection, join the threads, free. NULL is fine. */
void crk_admin_http_stop(crk_admin_http *s);

/** Content type of /metrics. */
#define CRK_ADMIN_PROMETHEUS_TYPE "text/plain; version=0.0.4; charset=utf-8"
/** Default content type of the other endpoints. */
#define CRK_ADMIN_JSON_TYPE "application/json; charset=utf-8"

#endif
