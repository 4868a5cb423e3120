/*
 * admin_http.h - crescent-master's metrics and admin HTTP server.
 *
 * Endpoints (GET or HEAD; another method is 405, another path 404), with
 * Mooncake's master paths and parameters (master_admin_service.cpp):
 *   /metrics                    Prometheus text exposition 0.0.4
 *   /metrics/summary            text from the metrics_summary callback
 *   /health                     JSON; {"status":"ok"} unless a callback says more
 *   /role, /ha_status           text from the role / ha_status callbacks
 *   /leader, /kv_events/status  from the leader / kv_events callbacks
 *   /api/v1/segments/status?segment=S  from the segment_status callback
 *   /get_all_segments           from the all_segments callback
 *   /get_all_keys               from the all_keys callback
 *   /get_segments_detail        from the segments_detail callback
 *   /query_key?key=K            from the query_key callback
 *   /query_segment?segment=S    from the query_segment callback
 *   /batch_query_keys?keys=L    from the batch_query_keys callback (L: the
 *                               comma-separated list, as sent)
 * Parameters are URL-decoded; a missing or empty one, or one containing
 * NUL, is 400.
 *
 * The server knows nothing of the master's data: the daemon passes a
 * callbacks struct and a context. A callback appends its body to the
 * reply and returns 0 for 200, or a negative cr_status, mapped to:
 *   CR_OBJECT_NOT_FOUND, CR_SEGMENT_NOT_FOUND, CR_ERR_NOT_FOUND    404
 *   CR_INVALID_KEY, CR_INVALID_PARAMS                              400
 *   CR_UNAVAILABLE_IN_CURRENT_STATUS, CR_ERR_SHUTDOWN              503
 *   anything else                                                  500
 * whatever it appended is then discarded and the body is
 * {"success": false, "error_code": <status>, "error_message": "<last error>",
 *  "error": "<status name>", "code": <status>, "message": "<last error>"}
 * (Mooncake's error fields first, crescent's after them).
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
    /* The rest of Mooncake's paths; `arg` is the path's parameter (NULL for
     * the ones without), NUL-terminated, non-empty, URL-decoded. */
    int (*metrics_summary)(void *ctx, const char *arg, crk_admin_reply *reply);
    int (*all_keys)(void *ctx, const char *arg, crk_admin_reply *reply);
    int (*segments_detail)(void *ctx, const char *arg, crk_admin_reply *reply);
    int (*query_segment)(void *ctx, const char *segment, crk_admin_reply *reply);
    int (*batch_query_keys)(void *ctx, const char *keys, crk_admin_reply *reply);
    int (*role)(void *ctx, const char *arg, crk_admin_reply *reply);
    int (*ha_status)(void *ctx, const char *arg, crk_admin_reply *reply);
    int (*leader)(void *ctx, const char *arg, crk_admin_reply *reply);
    int (*kv_events)(void *ctx, const char *arg, crk_admin_reply *reply);
    int (*segment_status)(void *ctx, const char *segment, crk_admin_reply *reply);
} crk_admin_callbacks;

typedef struct crk_admin_http crk_admin_http;

/**
 * Serve on host:port (numeric address or name; port 0 picks a free port,
 * see crk_admin_http_port). The callbacks struct is copied. Errors:
 * CR_INVALID_PARAMS, CR_ERR_DNS, CR_ERR_BIND (message names
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
/** Content type of Mooncake's plain-text admin answers (/get_all_keys, ...). */
#define CRK_ADMIN_TEXT_TYPE "text/plain; version=0.0.4"

#endif
