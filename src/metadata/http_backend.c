/*
 * http_backend.c - metadata in a Mooncake-compatible HTTP key/value server.
 *
 * Protocol (Mooncake's transfer_metadata_plugin): GET, PUT and DELETE on
 * "<url>?key=<percent-escaped key>"; PUT carries the raw value bytes as
 * application/octet-stream. HTTP 200 is success, 404 on GET means "not
 * found", 404 on DELETE counts as success (the key is gone either way), and
 * any other status or transport failure is CR_ERR_METADATA naming the URL,
 * the key and the status or curl error.
 *
 * Design: libcurl easy handles from a small pool (curl_util.h) so that
 * back-to-back calls reuse a kept-alive connection; a call takes a handle out
 * (or makes a new one), so any number of threads may call at once and no
 * handle is ever shared. Each request is
 * bounded by the connect and total timeouts derived from timeout_ms.
 * Proxies are disabled: the metadata server sits on the cluster network, and
 * an inherited http_proxy would otherwise silently reroute (or break) every
 * lookup.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "base/error.h"
#include "base/net.h"
#include "metadata/backend.h"
#include "metadata/curl_util.h"

#define HTTP_DEFAULT_CONNECT_MS 1500
#define HTTP_DEFAULT_TOTAL_MS   3000
/* Below this size a PUT goes out without "Expect: 100-continue" (saves a round trip). */
#define HTTP_EXPECT_THRESHOLD (1u << 20)

typedef struct http_backend {
    crm_backend base;
    char *url;
    char sep; /* '?' or '&', whichever starts the key parameter */
    long connect_ms;
    long total_ms;
    crm_curl_pool pool;
} http_backend;

/*
 * One request. On transport success returns 0 with the HTTP status in
 * *status and the body (up to resp->limit bytes) in resp.
 */
static int http_request(http_backend *hb, const char *method, const char *key, const void *value,
                        size_t len, crm_curl_body *resp, long *status)
{
    if (key == NULL || key[0] == '\0')
        return crb_error(CR_INVALID_PARAMS, "metadata %s %.200s: the key is empty", method,
                         hb->url);
    CURL *h = crm_curl_pool_acquire(&hb->pool);
    if (h == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "metadata %s %.200s: curl_easy_init failed", method,
                         hb->url);
    int rc = 0;
    struct curl_slist *headers = NULL;
    char *full_url = NULL;
    char *escaped = curl_easy_escape(h, key, 0);
    if (escaped == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "metadata %s %.200s: cannot escape key '%.100s'", method,
                       hb->url, key);
        goto release_handle;
    }
    size_t url_len = strlen(hb->url) + strlen("?key=") + strlen(escaped) + 1;
    full_url = malloc(url_len);
    if (full_url == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "metadata %s %.200s: out of memory", method, hb->url);
        goto free_escaped;
    }
    snprintf(full_url, url_len, "%s%ckey=%s", hb->url, hb->sep, escaped);

    char errbuf[CURL_ERROR_SIZE] = "";
    bool bad = false;
#define SETOPT(opt, val) bad |= curl_easy_setopt(h, (opt), (val)) != CURLE_OK
    SETOPT(CURLOPT_URL, full_url);
    SETOPT(CURLOPT_ERRORBUFFER, errbuf);
    SETOPT(CURLOPT_NOSIGNAL, 1L);
    SETOPT(CURLOPT_CONNECTTIMEOUT_MS, hb->connect_ms);
    SETOPT(CURLOPT_TIMEOUT_MS, hb->total_ms);
    SETOPT(CURLOPT_PROXY, "");
    SETOPT(CURLOPT_PROTOCOLS_STR, "http");
    SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
    SETOPT(CURLOPT_WRITEFUNCTION, crm_curl_on_body);
    SETOPT(CURLOPT_WRITEDATA, resp);
    if (strcmp(method, "GET") == 0) {
        SETOPT(CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "PUT") == 0) {
        headers = curl_slist_append(NULL, "Content-Type: application/octet-stream");
        if (headers != NULL && len <= HTTP_EXPECT_THRESHOLD) {
            struct curl_slist *more = curl_slist_append(headers, "Expect:");
            if (more == NULL)
                bad = true;
            else
                headers = more;
        }
        if (headers == NULL)
            bad = true;
        SETOPT(CURLOPT_CUSTOMREQUEST, "PUT");
        SETOPT(CURLOPT_HTTPHEADER, headers);
        SETOPT(CURLOPT_POSTFIELDS, len > 0 ? value : "");
        SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    } else {
        SETOPT(CURLOPT_CUSTOMREQUEST, method);
    }
#undef SETOPT
    if (bad) {
        rc = crb_error(CR_ERR_METADATA, "metadata %s %.200s: cannot set up the curl request",
                       method, hb->url);
        goto free_request;
    }

    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        if (resp->oom)
            rc = crb_error(CR_ERR_NO_MEMORY,
                           "metadata %s %.200s key '%.100s': out of memory after %zu bytes", method,
                           hb->url, key, resp->len);
        else
            rc = crb_error(CR_ERR_METADATA, "metadata %s %.200s key '%.100s': %s%s%s", method,
                           hb->url, key, curl_easy_strerror(cc), errbuf[0] != '\0' ? ": " : "",
                           errbuf);
        goto free_request;
    }
    *status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);

free_request:
    curl_slist_free_all(headers);
    free(full_url);
free_escaped:
    curl_free(escaped);
release_handle:
    crm_curl_pool_release(&hb->pool, h);
    return rc;
}

static int status_error(http_backend *hb, const char *method, const char *key, long status,
                        const crm_curl_body *resp)
{
    char quoted[CRM_QUOTE_MAX + 1];
    crm_quote(resp->data, resp->len, quoted);
    return crb_error(CR_ERR_METADATA, "metadata %s %.200s key '%.100s': HTTP %ld%s%s%s", method,
                     hb->url, key, status, quoted[0] != '\0' ? " (" : "", quoted,
                     quoted[0] != '\0' ? ")" : "");
}

static int http_put(crm_backend *b, const char *key, const void *value, size_t len)
{
    http_backend *hb = (http_backend *)b;
    crm_curl_body resp = {.limit = CRM_QUOTE_MAX};
    long status = 0;
    int rc = http_request(hb, "PUT", key, value, len, &resp, &status);
    if (rc == 0 && status != 200)
        rc = status_error(hb, "PUT", key, status, &resp);
    free(resp.data);
    return rc;
}

static int http_get(crm_backend *b, const char *key, void **value, size_t *len)
{
    http_backend *hb = (http_backend *)b;
    crm_curl_body resp = {.limit = SIZE_MAX};
    long status = 0;
    int rc = http_request(hb, "GET", key, NULL, 0, &resp, &status);
    if (rc < 0)
        goto free_body;
    if (status == 404) {
        rc = crb_error(CR_ERR_METADATA_NOT_FOUND, "metadata key '%.200s' not found at %.200s", key,
                       hb->url);
        goto free_body;
    }
    if (status != 200) {
        rc = status_error(hb, "GET", key, status, &resp);
        goto free_body;
    }
    if (resp.data == NULL) {
        resp.data = malloc(1); /* an empty value is still a value the caller frees */
        if (resp.data == NULL) {
            rc = crb_error(CR_ERR_NO_MEMORY, "metadata GET %.200s: out of memory", hb->url);
            goto free_body;
        }
    }
    *value = resp.data;
    *len = resp.len;
    return 0;
free_body:
    free(resp.data);
    return rc;
}

static int http_del(crm_backend *b, const char *key)
{
    http_backend *hb = (http_backend *)b;
    crm_curl_body resp = {.limit = CRM_QUOTE_MAX};
    long status = 0;
    int rc = http_request(hb, "DELETE", key, NULL, 0, &resp, &status);
    if (rc == 0 && status != 200 && status != 404)
        rc = status_error(hb, "DELETE", key, status, &resp);
    free(resp.data);
    return rc;
}

static void http_destroy(crm_backend *b)
{
    http_backend *hb = (http_backend *)b;
    crm_curl_pool_fini(&hb->pool);
    free(hb->url);
    free(hb);
}

static const crm_backend_ops http_ops = {
    .name = "http",
    .put = http_put,
    .get = http_get,
    .del = http_del,
    .destroy = http_destroy,
};

/* Why `url` is not a usable http://host[:port]/path, or NULL if it is. */
static const char *url_problem(const char *url)
{
    if (strncmp(url, "http://", 7) != 0)
        return "it must start with http://";
    for (const char *p = url; *p != '\0'; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
            return "it contains a space, control or non-ASCII character";
    if (strchr(url, '#') != NULL)
        return "it contains a '#' fragment";
    const char *authority = url + 7;
    size_t alen = strcspn(authority, "/?");
    if (alen == 0)
        return "the host is missing";
    if (authority[alen] != '/')
        return "the path is missing (the server's is usually /metadata)";
    char hostport[CRB_HOST_MAX + 8];
    if (alen >= sizeof(hostport))
        return "the host is too long";
    memcpy(hostport, authority, alen);
    hostport[alen] = '\0';
    if (strchr(hostport, '@') != NULL)
        return "user names and passwords in the URL are not supported";
    const char *first_colon = strchr(hostport, ':');
    if (hostport[0] != '[' && first_colon != NULL && strchr(first_colon + 1, ':') != NULL)
        return "an IPv6 address must be written in brackets, e.g. http://[::1]:8080/metadata";
    char host[CRB_HOST_MAX];
    uint16_t port = 0;
    if (crb_parse_hostport(hostport, host, &port) < 0)
        return "the host or port cannot be parsed";
    const char *port_colon = hostport[0] == '[' ? strchr(hostport, ']') + 1 : first_colon;
    if (port == 0 && port_colon != NULL && *port_colon == ':')
        return "port 0 is not a valid server port";
    CURLU *u = curl_url();
    if (u == NULL)
        return "out of memory while checking it";
    CURLUcode uc = curl_url_set(u, CURLUPART_URL, url, 0);
    curl_url_cleanup(u);
    if (uc != CURLUE_OK)
        return curl_url_strerror(uc);
    return NULL;
}

int crm_http_backend_create(const char *url, int timeout_ms, crm_backend **out)
{
    if (url == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crm_http_backend_create: NULL argument");
    const char *problem = url_problem(url);
    if (problem != NULL)
        return crb_error(CR_ERR_INVALID_CONFIG,
                         "metadata URL '%.200s' is invalid: %s (expected http://host:port/path, "
                         "e.g. http://127.0.0.1:8080/metadata)",
                         url, problem);
    int rc = crm_curl_global_init("metadata URL");
    if (rc < 0)
        return rc;

    http_backend *hb = calloc(1, sizeof(*hb));
    if (hb == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "metadata URL '%.200s': out of memory", url);
    hb->url = strdup(url);
    if (hb->url == NULL) {
        free(hb);
        return crb_error(CR_ERR_NO_MEMORY, "metadata URL '%.200s': out of memory", url);
    }
    if (crm_curl_pool_init(&hb->pool) < 0) {
        free(hb->url);
        free(hb);
        return crb_error(CR_ERR_SYSTEM, "metadata URL '%.200s': pthread_mutex_init failed", url);
    }
    hb->sep = strchr(url, '?') != NULL ? '&' : '?';
    if (timeout_ms > 0) {
        hb->connect_ms = timeout_ms;
        hb->total_ms = timeout_ms;
    } else {
        hb->connect_ms = HTTP_DEFAULT_CONNECT_MS;
        hb->total_ms = HTTP_DEFAULT_TOTAL_MS;
    }
    hb->base.ops = &http_ops;
    hb->base.peer_to_peer = false;
    hb->base.timeout_ms = (int)hb->total_ms;
    *out = &hb->base;
    return 0;
}
