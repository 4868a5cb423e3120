/*
 * etcd_watch.c - crm_etcd_watch: one streaming POST to /v3/watch.
 *
 * The gateway answers a watch with a chunked body of newline-separated JSON
 * messages: first {"result": {"created": true}}, then one message per batch
 * of events, and {"result": {"canceled": true, ...}} if etcd ends the watch
 * (e.g. the start revision was compacted). Each line (bounded by the
 * client's max_reply) is decoded by crm_etcd_decode_watch and its events are
 * handed to the caller in order, advancing the caller's revision cursor.
 *
 * The transfer runs on a curl multi handle polled every 100 ms so that the
 * caller's stop flag and duration are honoured promptly. Members are tried
 * in order from the preferred one until one accepts the watch ("created");
 * after that a broken stream ends the call (the caller re-watches from its
 * cursor, possibly on another member).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "metadata/etcd_codec.h"
#include "metadata/etcd_internal.h"

#define POLL_MS 100

typedef struct watch_ctx {
    crm_etcd *c;
    size_t member;
    int64_t *revision;
    crm_etcd_watch_fn fn;
    void *arg;
    crm_curl_body line; /* bytes of the message being received */
    bool created;
    bool done; /* ended by the stream's content: rc says how */
    int rc;
    long http_status_seen; /* non-200 replies: the body is an error */
} watch_ctx;

static void handle_message(watch_ctx *w, const char *msg, size_t len)
{
    crm_etcd_watch_msg m;
    int rc = crm_etcd_decode_watch(msg, len, &m);
    if (rc < 0) {
        w->done = true;
        w->rc = rc;
        return;
    }
    if (!w->created) {
        if (!m.created) {
            w->done = true;
            w->rc = m.canceled
                        ? crb_error(CR_ETCD_OPERATION_ERROR, "etcd watch at %s was refused: %s",
                                    w->c->member[w->member], m.cancel_reason)
                        : crb_error(CR_ERR_METADATA_MALFORMED,
                                    "etcd watch at %s: the first message is not "
                                    "'created'",
                                    w->c->member[w->member]);
            crm_etcd_watch_msg_clear(&m);
            return;
        }
        w->created = true;
        if (*w->revision <= 0)
            *w->revision = m.revision + 1;
    }
    for (size_t i = 0; i < m.n_events && !w->done; i++) {
        const crm_etcd_event *ev = &m.events[i];
        if (ev->kv.mod_revision < *w->revision)
            continue; /* already delivered */
        *w->revision = ev->kv.mod_revision + 1;
        if (w->fn(w->arg, ev) != 0) {
            w->done = true;
            w->rc = 0;
        }
    }
    if (!w->done && m.canceled) {
        w->done = true;
        if (m.compact_revision > 0)
            w->rc = crb_error(CR_ERR_ETCD_COMPACTED,
                              "etcd watch from revision %" PRId64 ": compacted up to %" PRId64
                              " (re-read, then watch again)",
                              *w->revision, m.compact_revision);
        else
            w->rc = crb_error(CR_ETCD_OPERATION_ERROR, "etcd watch canceled by %s: %s",
                              w->c->member[w->member],
                              m.cancel_reason[0] != '\0' ? m.cancel_reason : "no reason given");
    }
    crm_etcd_watch_msg_clear(&m);
}

static size_t on_stream(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    watch_ctx *w = userdata;
    size_t n = size * nmemb;
    if (w->done)
        return 0;
    size_t off = 0;
    while (off < n && !w->done) {
        const char *nl = memchr(ptr + off, '\n', n - off);
        size_t chunk = nl != NULL ? (size_t)(nl - (ptr + off)) : n - off;
        if (!crm_curl_body_append(&w->line, ptr + off, chunk)) {
            w->done = true;
            w->rc = w->line.oom ? crb_error(CR_ERR_NO_MEMORY, "etcd watch message")
                                : crb_error(CR_ERR_METADATA_MALFORMED,
                                            "etcd watch at %s: a message is larger than %zu "
                                            "bytes",
                                            w->c->member[w->member], w->line.limit);
            return 0;
        }
        off += chunk;
        if (nl == NULL)
            break;
        off++; /* the newline */
        if (w->line.len > 0 && w->http_status_seen == 200)
            handle_message(w, w->line.data, w->line.len);
        if (w->http_status_seen == 200)
            w->line.len = 0;
    }
    return w->done ? 0 : n;
}

/* Header callback: learn the status before the body arrives. */
static size_t on_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    watch_ctx *w = userdata;
    size_t n = size * nmemb;
    if (n > 9 && strncmp(ptr, "HTTP/", 5) == 0) {
        const char *sp = memchr(ptr, ' ', n);
        if (sp != NULL)
            w->http_status_seen = strtol(sp + 1, NULL, 10);
    }
    return n;
}

typedef enum stream_end {
    STREAM_DONE,       /* w.rc says how */
    STREAM_STOPPED,    /* caller's stop flag */
    STREAM_DURATION,   /* caller's duration passed */
    STREAM_TRANSPORT,  /* curl failed: reason in why */
    STREAM_HTTP_ERROR, /* a non-200 reply, body in w.line */
} stream_end;

static stream_end run_stream(watch_ctx *w, const char *body, size_t body_len, uint64_t end_ms,
                             const atomic_bool *stop, char *why, size_t why_cap)
{
    crm_etcd *c = w->c;
    CURL *h = curl_easy_init();
    CURLM *m = curl_multi_init();
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    stream_end end = STREAM_TRANSPORT;
    if (h == NULL || m == NULL || headers == NULL) {
        snprintf(why, why_cap, "out of memory");
        goto cleanup;
    }
    char url[CRB_HOST_MAX + 64];
    snprintf(url, sizeof(url), "%s/v3/watch", c->base_url[w->member]);
    char errbuf[CURL_ERROR_SIZE] = "";
    bool bad = false;
#define SETOPT(opt, val) bad |= curl_easy_setopt(h, (opt), (val)) != CURLE_OK
    SETOPT(CURLOPT_URL, url);
    SETOPT(CURLOPT_ERRORBUFFER, errbuf);
    SETOPT(CURLOPT_NOSIGNAL, 1L);
    SETOPT(CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_ms);
    SETOPT(CURLOPT_PROXY, "");
    SETOPT(CURLOPT_PROTOCOLS_STR, "http");
    SETOPT(CURLOPT_HTTPHEADER, headers);
    SETOPT(CURLOPT_POSTFIELDS, body);
    SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    SETOPT(CURLOPT_WRITEFUNCTION, on_stream);
    SETOPT(CURLOPT_WRITEDATA, w);
    SETOPT(CURLOPT_HEADERFUNCTION, on_header);
    SETOPT(CURLOPT_HEADERDATA, w);
    SETOPT(CURLOPT_TCP_KEEPALIVE, 1L);
    SETOPT(CURLOPT_TCP_KEEPIDLE, 5L);
    SETOPT(CURLOPT_TCP_KEEPINTVL, 2L);
#undef SETOPT
    if (bad || curl_multi_add_handle(m, h) != CURLM_OK) {
        snprintf(why, why_cap, "cannot set up the curl request");
        goto cleanup;
    }
    int running = 1;
    while (running) {
        if (curl_multi_perform(m, &running) != CURLM_OK) {
            snprintf(why, why_cap, "curl_multi_perform failed");
            goto remove;
        }
        if (!running)
            break;
        if (stop != NULL && atomic_load(stop)) {
            end = STREAM_STOPPED;
            goto remove;
        }
        uint64_t now = crb_now_ms();
        if (end_ms != 0 && now >= end_ms) {
            end = STREAM_DURATION;
            goto remove;
        }
        int wait = POLL_MS;
        if (end_ms != 0 && end_ms - now < (uint64_t)wait)
            wait = (int)(end_ms - now);
        curl_multi_poll(m, NULL, 0, wait, NULL);
    }
    CURLcode result = CURLE_OK;
    int left;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(m, &left)) != NULL)
        if (msg->msg == CURLMSG_DONE)
            result = msg->data.result;
    if (w->done) {
        end = STREAM_DONE;
    } else if (result != CURLE_OK) {
        snprintf(why, why_cap, "%s", errbuf[0] != '\0' ? errbuf : curl_easy_strerror(result));
    } else if (w->http_status_seen != 200) {
        end = STREAM_HTTP_ERROR;
    } else {
        /* A trailing message without its newline, then the end of the stream. */
        if (w->line.len > 0)
            handle_message(w, w->line.data, w->line.len);
        if (w->done)
            end = STREAM_DONE;
        else
            snprintf(why, why_cap, "the stream ended");
    }
remove:
    curl_multi_remove_handle(m, h);
cleanup:
    curl_slist_free_all(headers);
    if (m != NULL)
        curl_multi_cleanup(m);
    if (h != NULL)
        curl_easy_cleanup(h);
    return end;
}

int crm_etcd_watch(crm_etcd *c, const char *key, bool prefix, int64_t *revision, int duration_ms,
                   const atomic_bool *stop, crm_etcd_watch_fn fn, void *arg)
{
    if (c == NULL || key == NULL || (key[0] == '\0' && !prefix) || revision == NULL || fn == NULL ||
        duration_ms < 0 || *revision < 0)
        return crb_error(CR_INVALID_PARAMS, "crm_etcd_watch: bad argument");
    uint64_t end_ms = duration_ms > 0 ? crb_now_ms() + (uint64_t)duration_ms : 0;
    char reasons[600] = "";
    size_t first = atomic_load(&c->preferred);
    for (size_t i = 0; i < c->eps.n; i++) {
        char *body;
        size_t body_len;
        int rc = crm_etcd_json_dump(crm_etcd_json_watch(key, prefix, *revision), &body, &body_len);
        if (rc < 0)
            return rc;
        watch_ctx w = {.c = c,
                       .member = (first + i) % c->eps.n,
                       .revision = revision,
                       .fn = fn,
                       .arg = arg,
                       .line = {.limit = c->max_reply, .fail_over_limit = true}};
        char why[CURL_ERROR_SIZE + 32] = "";
        stream_end end = run_stream(&w, body, body_len, end_ms, stop, why, sizeof(why));
        free(body);
        int code = 0;
        char msg[256] = "";
        switch (end) {
        case STREAM_DONE:
            rc = w.rc;
            break;
        case STREAM_STOPPED:
            rc = crb_error(CR_ETCD_CTX_CANCELLED, "etcd watch of '%.200s' stopped by its caller",
                           key);
            break;
        case STREAM_DURATION:
            rc =
                crb_error(CR_ERR_TIMEOUT, "etcd watch of '%.200s': %d ms passed", key, duration_ms);
            break;
        case STREAM_HTTP_ERROR:
            if (crm_etcd_decode_error(w.line.data, w.line.len, &code, msg, sizeof(msg)) == 0)
                rc = crb_error(CR_ETCD_OPERATION_ERROR, "etcd watch at %s: %s (gRPC code %d)",
                               c->member[w.member], msg, code);
            else
                rc = crb_error(CR_ERR_METADATA_MALFORMED,
                               "etcd watch at %s: HTTP %ld with a body that is not an etcd "
                               "error",
                               c->member[w.member], w.http_status_seen);
            break;
        case STREAM_TRANSPORT:
            if (w.created) {
                rc =
                    crb_error(CR_ERR_METADATA_UNAVAILABLE, "etcd watch of '%.200s' at %s broke: %s",
                              key, c->member[w.member], why);
            } else {
                size_t used = strlen(reasons);
                snprintf(reasons + used, sizeof(reasons) - used, "%s%s: %s", used > 0 ? "; " : "",
                         c->member[w.member], why);
                rc = 1; /* next member */
            }
            break;
        }
        free(w.line.data);
        if (rc <= 0) {
            if (w.created || end == STREAM_HTTP_ERROR)
                atomic_store(&c->preferred, w.member);
            return rc;
        }
        if (end_ms != 0 && crb_now_ms() >= end_ms)
            break;
    }
    return crb_error(CR_ERR_METADATA_UNAVAILABLE, "etcd watch of '%.200s': no member answered (%s)",
                     key, reasons[0] != '\0' ? reasons : "deadline passed");
}
