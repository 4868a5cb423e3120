/*
 * etcd_client.c - the etcd v3 client's endpoint list, its one request path
 * (crm_etcd_call: POST to the gateway with member failover) and the key and
 * transaction calls built on it. Leases are in etcd_lease.c, the watch
 * stream in etcd_watch.c, the JSON formats in etcd_codec.c.
 *
 * Failover: a call starts at `preferred` (the member that answered last)
 * and walks the list, giving each member an equal share of the time left
 * (at least 500 ms). A member is passed over when it cannot be connected
 * within connect_ms, when the connection breaks or its share runs out, or
 * when it answers that it is unavailable (gRPC UNAVAILABLE or
 * DEADLINE_EXCEEDED, HTTP 502/503: no leader, no quorum, shutting down).
 * If some member was unavailable or accepted the request without answering
 * in its share (etcd drops proposals made during an election and never
 * answers them) and time is left, the walk is repeated after 100 ms. Any
 * other answer ends the call: a 200 reply, an etcd error
 * (ETCD_OPERATION_ERROR), or a reply that is not the gateway's
 * (ERR_METADATA_MALFORMED: a misconfigured endpoint should be loud).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "metadata/etcd_codec.h"
#include "metadata/etcd_internal.h"

#define DEFAULT_REQUEST_MS 3000
#define DEFAULT_CONNECT_MS 1000
#define MAX_TXN_OPS        64
#define REASONS_MAX        600
#define MIN_ATTEMPT_MS     500

int crm_etcd_parse_endpoints(const char *text, crm_etcd_endpoints *out)
{
    if (text == NULL)
        return crb_error(CR_ERR_INVALID_CONFIG, "etcd endpoints are missing");
    crm_etcd_endpoints eps;
    memset(&eps, 0, sizeof(eps));
    const char *p = text;
    while (true) {
        size_t n = strcspn(p, ",;");
        const char *s = p, *e = p + n;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e > s) {
            if ((size_t)(e - s) > 7 && strncmp(s, "http://", 7) == 0)
                s += 7;
            char member[CRB_HOST_MAX + 8];
            size_t len = (size_t)(e - s);
            if (len >= sizeof(member))
                return crb_error(CR_ERR_INVALID_CONFIG, "etcd endpoint in '%.200s' is too long",
                                 text);
            memcpy(member, s, len);
            member[len] = '\0';
            if (eps.n == CRM_ETCD_MAX_ENDPOINTS)
                return crb_error(CR_ERR_INVALID_CONFIG,
                                 "etcd endpoints '%.200s': more than %d members", text,
                                 CRM_ETCD_MAX_ENDPOINTS);
            const char *colon = strrchr(member, ':');
            const char *close = strchr(member, ']');
            bool bad = colon == NULL || (close != NULL && colon < close) ||
                       strpbrk(member, "/?#@ \t") != NULL;
            if (!bad && member[0] != '[' && strchr(member, ':') != colon)
                bad = true; /* IPv6 needs brackets */
            if (!bad)
                bad = crb_parse_hostport(member, eps.host[eps.n], &eps.port[eps.n]) < 0 ||
                      eps.port[eps.n] == 0 || eps.host[eps.n][0] == '\0';
            if (bad)
                return crb_error(CR_ERR_INVALID_CONFIG,
                                 "etcd endpoint '%s' in '%.200s' is not host:port (e.g. "
                                 "127.0.0.1:2379)",
                                 member, text);
            eps.n++;
        }
        if (p[n] == '\0')
            break;
        p += n + 1;
    }
    if (eps.n == 0)
        return crb_error(CR_ERR_INVALID_CONFIG, "etcd endpoints '%.200s' name no member", text);
    *out = eps;
    return 0;
}

int crm_etcd_open(const crm_etcd_config *cfg, crm_etcd **out)
{
    if (cfg == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crm_etcd_open: NULL argument");
    if (cfg->request_timeout_ms < 0 || cfg->connect_timeout_ms < 0)
        return crb_error(CR_ERR_INVALID_CONFIG, "etcd timeouts must not be negative (%d, %d ms)",
                         cfg->request_timeout_ms, cfg->connect_timeout_ms);
    crm_etcd_endpoints eps;
    int rc = crm_etcd_parse_endpoints(cfg->endpoints, &eps);
    if (rc < 0)
        return rc;
    rc = crm_curl_global_init("etcd client");
    if (rc < 0)
        return rc;
    crm_etcd *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "etcd client");
    c->eps = eps;
    for (size_t i = 0; i < eps.n; i++) {
        bool v6 = strchr(eps.host[i], ':') != NULL;
        snprintf(c->member[i], sizeof(c->member[i]), v6 ? "[%s]:%u" : "%s:%u", eps.host[i],
                 (unsigned)eps.port[i]);
        snprintf(c->base_url[i], sizeof(c->base_url[i]), "http://%s", c->member[i]);
    }
    atomic_init(&c->preferred, 0);
    c->request_ms = cfg->request_timeout_ms > 0 ? cfg->request_timeout_ms : DEFAULT_REQUEST_MS;
    c->connect_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : DEFAULT_CONNECT_MS;
    if (c->connect_ms > c->request_ms)
        c->connect_ms = c->request_ms;
    c->max_reply = cfg->max_reply_bytes > 0 ? cfg->max_reply_bytes : CRM_ETCD_DEFAULT_MAX_REPLY;
    if (crm_curl_pool_init(&c->pool) < 0) {
        free(c);
        return CR_ERR_SYSTEM;
    }
    if (pthread_mutex_init(&c->leases_lock, NULL) != 0) {
        crm_curl_pool_fini(&c->pool);
        free(c);
        return crb_error(CR_ERR_SYSTEM, "etcd client: pthread_mutex_init failed");
    }
    *out = c;
    return 0;
}

void crm_etcd_close(crm_etcd *c)
{
    if (c == NULL)
        return;
    crm_etcd_leases_release_all(c);
    crm_curl_pool_fini(&c->pool);
    pthread_mutex_destroy(&c->leases_lock);
    free(c);
}

const char *crm_etcd_current_endpoint(const crm_etcd *c)
{
    return c->member[atomic_load(&((crm_etcd *)c)->preferred)];
}

int crm_etcd_request_timeout_ms(const crm_etcd *c)
{
    return c->request_ms;
}

/* ------------------------------------------------------------------------ */
/* the request path                                                         */

typedef enum attempt_outcome {
    ATTEMPT_REPLY,       /* 200: *reply filled */
    ATTEMPT_FINAL,       /* an answer that ends the call: rc set */
    ATTEMPT_NEXT,        /* this member cannot serve now: try the next */
    ATTEMPT_UNAVAILABLE, /* the member answered "unavailable": next, and maybe another round */
} attempt_outcome;

/* Why a member was passed over, once per member (later rounds repeat it). */
/* Did this transfer get as far as a TCP connection? */
static bool connected(CURL *h)
{
    curl_off_t t = 0;
    return curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &t) == CURLE_OK && t > 0;
}

static void append_reason(char *reasons, const char *member, const char *why)
{
    char tag[CRB_HOST_MAX + 12];
    snprintf(tag, sizeof(tag), "%s: ", member);
    if (strstr(reasons, tag) != NULL)
        return;
    size_t used = strlen(reasons);
    if (used + 4 < REASONS_MAX)
        snprintf(reasons + used, REASONS_MAX - used, "%s%s: %s", used > 0 ? "; " : "", member, why);
}

static attempt_outcome attempt(crm_etcd *c, size_t idx, const char *path, const char *body,
                               size_t body_len, long remaining_ms, const char *what,
                               etcd_reply *reply, int *grpc_code, int *rc, char *reasons)
{
    CURL *h = crm_curl_pool_acquire(&c->pool);
    if (h == NULL) {
        *rc = crb_error(CR_ERR_NO_MEMORY, "etcd %s: curl_easy_init failed", what);
        return ATTEMPT_FINAL;
    }
    char url[CRB_HOST_MAX + 64];
    snprintf(url, sizeof(url), "%s%s", c->base_url[idx], path);
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    struct curl_slist *more = headers != NULL ? curl_slist_append(headers, "Expect:") : NULL;
    if (more == NULL) {
        curl_slist_free_all(headers);
        crm_curl_pool_release(&c->pool, h);
        *rc = crb_error(CR_ERR_NO_MEMORY, "etcd %s: request headers", what);
        return ATTEMPT_FINAL;
    }
    headers = more;
    crm_curl_body resp = {.limit = c->max_reply, .fail_over_limit = true};
    char errbuf[CURL_ERROR_SIZE] = "";
    long connect_ms = c->connect_ms < remaining_ms ? c->connect_ms : remaining_ms;
    bool bad = false;
#define SETOPT(opt, val) bad |= curl_easy_setopt(h, (opt), (val)) != CURLE_OK
    SETOPT(CURLOPT_URL, url);
    SETOPT(CURLOPT_ERRORBUFFER, errbuf);
    SETOPT(CURLOPT_NOSIGNAL, 1L);
    SETOPT(CURLOPT_CONNECTTIMEOUT_MS, connect_ms > 0 ? connect_ms : 1L);
    SETOPT(CURLOPT_TIMEOUT_MS, remaining_ms > 0 ? remaining_ms : 1L);
    SETOPT(CURLOPT_PROXY, "");
    SETOPT(CURLOPT_PROTOCOLS_STR, "http");
    SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
    SETOPT(CURLOPT_HTTPHEADER, headers);
    SETOPT(CURLOPT_POSTFIELDS, body);
    SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    SETOPT(CURLOPT_WRITEFUNCTION, crm_curl_on_body);
    SETOPT(CURLOPT_WRITEDATA, &resp);
#undef SETOPT
    attempt_outcome out;
    if (bad) {
        *rc = crb_error(CR_ERR_METADATA, "etcd %s: cannot set up the curl request", what);
        out = ATTEMPT_FINAL;
        goto release;
    }
    CURLcode cc = curl_easy_perform(h);
    long status = 0;
    if (cc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (cc != CURLE_OK) {
        if (resp.over) {
            *rc = crb_error(CR_ERR_METADATA_MALFORMED, "etcd %s: %s answered more than %zu bytes",
                            what, c->member[idx], c->max_reply);
            out = ATTEMPT_FINAL;
        } else if (cc == CURLE_WEIRD_SERVER_REPLY || cc == CURLE_UNSUPPORTED_PROTOCOL ||
                   cc == CURLE_BAD_CONTENT_ENCODING) {
            *rc = crb_error(CR_ERR_METADATA_MALFORMED,
                            "etcd %s: %s answered something else "
                            "than HTTP: %s",
                            what, c->member[idx],
                            errbuf[0] != '\0' ? errbuf : curl_easy_strerror(cc));
            out = ATTEMPT_FINAL;
        } else if (resp.oom) {
            *rc = crb_error(CR_ERR_NO_MEMORY, "etcd %s: reply of %s after %zu bytes", what,
                            c->member[idx], resp.len);
            out = ATTEMPT_FINAL;
        } else {
            char why[CURL_ERROR_SIZE + 64];
            snprintf(why, sizeof(why), "%s", errbuf[0] != '\0' ? errbuf : curl_easy_strerror(cc));
            append_reason(reasons, c->member[idx], why);
            /* A member that accepted the request and then did not answer in
             * its share of the time is worth another round (an election). */
            out =
                cc == CURLE_OPERATION_TIMEDOUT && connected(h) ? ATTEMPT_UNAVAILABLE : ATTEMPT_NEXT;
        }
        goto release;
    }
    if (status == 200) {
        reply->body = resp;
        reply->http_status = status;
        resp.data = NULL;
        out = ATTEMPT_REPLY;
        goto release;
    }
    int code = 0;
    char msg[256] = "";
    if (crm_etcd_decode_error(resp.data, resp.len, &code, msg, sizeof(msg)) < 0) {
        char q[CRM_QUOTE_MAX + 1];
        crm_quote(resp.data, resp.len, q);
        if (status == 502 || status == 503) {
            char why[160];
            snprintf(why, sizeof(why), "HTTP %ld", status);
            append_reason(reasons, c->member[idx], why);
            out = ATTEMPT_UNAVAILABLE;
        } else {
            *rc = crb_error(CR_ERR_METADATA_MALFORMED,
                            "etcd %s: %s answered HTTP %ld that is not an etcd reply: '%s'", what,
                            c->member[idx], status, q);
            out = ATTEMPT_FINAL;
        }
        goto release;
    }
    if (code == CRM_GRPC_UNAVAILABLE || code == CRM_GRPC_DEADLINE_EXCEEDED || status == 502 ||
        status == 503) {
        char why[300];
        snprintf(why, sizeof(why), "unavailable: %s", msg);
        append_reason(reasons, c->member[idx], why);
        out = ATTEMPT_UNAVAILABLE;
        goto release;
    }
    atomic_store(&c->preferred, idx);
    if (grpc_code != NULL)
        *grpc_code = code;
    *rc = crb_error(CR_ETCD_OPERATION_ERROR, "etcd %s at %s: %s (gRPC code %d, HTTP %ld)", what,
                    c->member[idx], msg, code, status);
    out = ATTEMPT_FINAL;
release:
    free(resp.data);
    curl_slist_free_all(headers);
    crm_curl_pool_release(&c->pool, h);
    if (out == ATTEMPT_REPLY)
        atomic_store(&c->preferred, idx);
    return out;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int crm_etcd_call(crm_etcd *c, const char *path, json_t *json, uint64_t deadline_ms,
                  const char *what, etcd_reply *reply, int *grpc_code)
{
    char *body;
    size_t body_len;
    int rc = crm_etcd_json_dump(json, &body, &body_len);
    if (rc < 0)
        return rc;
    char reasons[REASONS_MAX] = "";
    uint64_t start_ms = crb_now_ms();
    while (true) {
        bool unavailable = false;
        size_t first = atomic_load(&c->preferred);
        for (size_t i = 0; i < c->eps.n; i++) {
            size_t idx = (first + i) % c->eps.n;
            uint64_t now = crb_now_ms();
            if (now >= deadline_ms)
                goto unavailable;
            /* Share what is left among the members not tried yet this round
             * (at least MIN_ATTEMPT_MS each), so one member stuck on a
             * request etcd will never answer (a proposal dropped by an
             * election) cannot eat the deadline of the whole list. */
            long left = (long)(deadline_ms - now);
            long budget = left / (long)(c->eps.n - i);
            if (budget < MIN_ATTEMPT_MS)
                budget = left < MIN_ATTEMPT_MS ? left : MIN_ATTEMPT_MS;
            attempt_outcome o =
                attempt(c, idx, path, body, body_len, budget, what, reply, grpc_code, &rc, reasons);
            if (o == ATTEMPT_REPLY) {
                free(body);
                return 0;
            }
            if (o == ATTEMPT_FINAL) {
                free(body);
                return rc;
            }
            unavailable |= o == ATTEMPT_UNAVAILABLE;
        }
        uint64_t now = crb_now_ms();
        if (!unavailable || now + 100 >= deadline_ms)
            break;
        sleep_ms(100);
    }
unavailable:
    free(body);
    return crb_error(CR_ERR_METADATA_UNAVAILABLE, "etcd %s: no member answered within %llu ms (%s)",
                     what, (unsigned long long)(crb_now_ms() - start_ms),
                     reasons[0] != '\0' ? reasons : "deadline passed");
}

/* ------------------------------------------------------------------------ */
/* keys                                                                     */

static uint64_t deadline(const crm_etcd *c)
{
    return crb_now_ms() + (uint64_t)c->request_ms;
}

static int check_key(const char *fn, const char *key, bool prefix)
{
    if (key == NULL || (key[0] == '\0' && !prefix))
        return crb_error(CR_INVALID_PARAMS, "%s: the key is %s", fn,
                         key == NULL ? "NULL" : "empty");
    return 0;
}

int crm_etcd_read_range(crm_etcd *c, const char *key, bool prefix, int64_t limit,
                        crm_etcd_range *out)
{
    int rc = check_key("crm_etcd_read_range", key, prefix);
    if (rc < 0)
        return rc;
    if (c == NULL || out == NULL || limit < 0)
        return crb_error(CR_INVALID_PARAMS, "crm_etcd_read_range: bad argument");
    char what[300];
    snprintf(what, sizeof(what), "range '%.200s'%s", key, prefix ? " (prefix)" : "");
    etcd_reply reply = {0};
    rc = crm_etcd_call(c, "/v3/kv/range", crm_etcd_json_range(key, prefix, limit), deadline(c),
                       what, &reply, NULL);
    if (rc < 0)
        return rc;
    rc = crm_etcd_decode_range(reply.body.data, reply.body.len, out);
    free(reply.body.data);
    return rc;
}

int crm_etcd_get(crm_etcd *c, const char *key, crm_etcd_kv *out, int64_t *revision)
{
    if (out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crm_etcd_get: out is NULL");
    crm_etcd_range r;
    int rc = crm_etcd_read_range(c, key, false, 0, &r);
    if (rc < 0)
        return rc;
    if (r.n_kvs == 0) {
        crm_etcd_range_clear(&r);
        return crb_error(CR_ETCD_KEY_NOT_EXIST, "etcd key '%.200s' does not exist", key);
    }
    if (r.n_kvs != 1 || strcmp(r.kvs[0].key, key) != 0 || r.kvs[0].key_len != strlen(key)) {
        crm_etcd_range_clear(&r);
        return crb_error(CR_ERR_METADATA_MALFORMED,
                         "etcd range reply for key '%.200s' holds other keys", key);
    }
    *out = r.kvs[0];
    memset(&r.kvs[0], 0, sizeof(r.kvs[0]));
    if (revision != NULL)
        *revision = r.revision;
    crm_etcd_range_clear(&r);
    return 0;
}

int crm_etcd_put(crm_etcd *c, const char *key, const void *value, size_t len, int64_t lease,
                 int64_t *revision)
{
    int rc = check_key("crm_etcd_put", key, false);
    if (rc < 0)
        return rc;
    if (c == NULL || (value == NULL && len > 0))
        return crb_error(CR_INVALID_PARAMS, "crm_etcd_put: bad argument");
    char what[300];
    snprintf(what, sizeof(what), "put '%.200s'", key);
    etcd_reply reply = {0};
    rc = crm_etcd_call(c, "/v3/kv/put", crm_etcd_json_put(key, value, len, lease), deadline(c),
                       what, &reply, NULL);
    if (rc < 0)
        return rc;
    int64_t rev;
    rc = crm_etcd_decode_put(reply.body.data, reply.body.len, &rev);
    free(reply.body.data);
    if (rc == 0 && revision != NULL)
        *revision = rev;
    return rc;
}

int crm_etcd_delete(crm_etcd *c, const char *key, bool prefix, int64_t *deleted)
{
    int rc = check_key("crm_etcd_delete", key, prefix);
    if (rc < 0)
        return rc;
    if (c == NULL)
        return crb_error(CR_INVALID_PARAMS, "crm_etcd_delete: NULL client");
    char what[300];
    snprintf(what, sizeof(what), "delete '%.200s'%s", key, prefix ? " (prefix)" : "");
    etcd_reply reply = {0};
    rc = crm_etcd_call(c, "/v3/kv/deleterange", crm_etcd_json_delete(key, prefix), deadline(c),
                       what, &reply, NULL);
    if (rc < 0)
        return rc;
    int64_t del, rev;
    rc = crm_etcd_decode_delete(reply.body.data, reply.body.len, &del, &rev);
    free(reply.body.data);
    if (rc == 0 && deleted != NULL)
        *deleted = del;
    return rc;
}

/* ------------------------------------------------------------------------ */
/* transactions                                                             */

static int check_ops(const char *branch, const crm_etcd_op *ops, size_t n)
{
    if (n > MAX_TXN_OPS || (n > 0 && ops == NULL))
        return crb_error(CR_INVALID_PARAMS, "etcd txn: %zu %s ops (at most %d)", n, branch,
                         MAX_TXN_OPS);
    for (size_t i = 0; i < n; i++) {
        if ((unsigned)ops[i].type > CRM_ETCD_OP_DELETE)
            return crb_error(CR_INVALID_PARAMS, "etcd txn: %s op %zu has type %d", branch, i,
                             (int)ops[i].type);
        int rc = check_key("etcd txn op", ops[i].key, ops[i].prefix);
        if (rc < 0)
            return rc;
        if (ops[i].type == CRM_ETCD_OP_PUT && ops[i].value == NULL && ops[i].value_len > 0)
            return crb_error(CR_INVALID_PARAMS, "etcd txn: %s put %zu has no value", branch, i);
    }
    return 0;
}

int crm_etcd_txn(crm_etcd *c, const crm_etcd_compare *cmp, size_t n_cmp, const crm_etcd_op *success,
                 size_t n_success, const crm_etcd_op *failure, size_t n_failure,
                 crm_etcd_txn_result *out)
{
    if (c == NULL || out == NULL || n_cmp > MAX_TXN_OPS || (n_cmp > 0 && cmp == NULL))
        return crb_error(CR_INVALID_PARAMS, "crm_etcd_txn: bad argument");
    for (size_t i = 0; i < n_cmp; i++) {
        int rc = check_key("etcd txn compare", cmp[i].key, false);
        if (rc < 0)
            return rc;
        if ((unsigned)cmp[i].target > CRM_ETCD_CMP_LEASE ||
            (unsigned)cmp[i].result > CRM_ETCD_NOT_EQUAL)
            return crb_error(CR_INVALID_PARAMS, "etcd txn: compare %zu is not valid", i);
    }
    int rc = check_ops("success", success, n_success);
    if (rc == 0)
        rc = check_ops("failure", failure, n_failure);
    if (rc < 0)
        return rc;
    char what[300];
    snprintf(what, sizeof(what), "txn on '%.200s'",
             n_cmp > 0 ? cmp[0].key : (n_success > 0 ? success[0].key : "-"));
    etcd_reply reply = {0};
    rc = crm_etcd_call(c, "/v3/kv/txn",
                       crm_etcd_json_txn(cmp, n_cmp, success, n_success, failure, n_failure),
                       deadline(c), what, &reply, NULL);
    if (rc < 0)
        return rc;
    crm_etcd_txn_result r;
    rc = crm_etcd_decode_txn(reply.body.data, reply.body.len, &r);
    free(reply.body.data);
    if (rc < 0)
        return rc;
    const crm_etcd_op *ran = r.succeeded ? success : failure;
    size_t n_ran = r.succeeded ? n_success : n_failure;
    bool match = r.n_results == n_ran;
    for (size_t i = 0; match && i < n_ran; i++)
        match = r.results[i].type == ran[i].type;
    if (!match) {
        crm_etcd_txn_result_clear(&r);
        return crb_error(CR_ERR_METADATA_MALFORMED,
                         "etcd %s: the reply's responses do not match the %s branch's %zu ops",
                         what, r.succeeded ? "success" : "failure", n_ran);
    }
    *out = r;
    return 0;
}

void crm_etcd_cas_clear(crm_etcd_cas *r)
{
    if (r == NULL)
        return;
    crm_etcd_kv_clear(&r->current);
    memset(r, 0, sizeof(*r));
}

/* One compare on key, one op on success, a read of key on failure. */
static int cas(crm_etcd *c, const crm_etcd_compare *cmp, const crm_etcd_op *op, crm_etcd_cas *out)
{
    if (out == NULL)
        return crb_error(CR_INVALID_PARAMS, "etcd compare-and-swap: out is NULL");
    crm_etcd_op read = {.type = CRM_ETCD_OP_RANGE, .key = cmp->key};
    crm_etcd_txn_result t;
    int rc = crm_etcd_txn(c, cmp, 1, op, 1, &read, 1, &t);
    if (rc < 0)
        return rc;
    crm_etcd_cas r = {.succeeded = t.succeeded, .revision = t.revision};
    if (!t.succeeded) {
        crm_etcd_range *rg = &t.results[0].range;
        if (rg->n_kvs > 1 || (rg->n_kvs == 1 && strcmp(rg->kvs[0].key, cmp->key) != 0)) {
            crm_etcd_txn_result_clear(&t);
            return crb_error(CR_ERR_METADATA_MALFORMED,
                             "etcd txn on '%.200s': the failure read holds other keys", cmp->key);
        }
        if (rg->n_kvs == 1) {
            r.exists = true;
            r.current = rg->kvs[0];
            memset(&rg->kvs[0], 0, sizeof(rg->kvs[0]));
        }
    }
    crm_etcd_txn_result_clear(&t);
    *out = r;
    return 0;
}

int crm_etcd_create(crm_etcd *c, const char *key, const void *value, size_t len, int64_t lease,
                    crm_etcd_cas *out)
{
    crm_etcd_compare cmp = {
        .key = key, .target = CRM_ETCD_CMP_CREATE, .result = CRM_ETCD_EQUAL, .number = 0};
    crm_etcd_op put = {
        .type = CRM_ETCD_OP_PUT, .key = key, .value = value, .value_len = len, .lease = lease};
    return cas(c, &cmp, &put, out);
}

int crm_etcd_put_if_mod(crm_etcd *c, const char *key, const void *value, size_t len, int64_t lease,
                        int64_t mod_revision, crm_etcd_cas *out)
{
    crm_etcd_compare cmp = {
        .key = key, .target = CRM_ETCD_CMP_MOD, .result = CRM_ETCD_EQUAL, .number = mod_revision};
    crm_etcd_op put = {
        .type = CRM_ETCD_OP_PUT, .key = key, .value = value, .value_len = len, .lease = lease};
    return cas(c, &cmp, &put, out);
}

int crm_etcd_delete_if_mod(crm_etcd *c, const char *key, int64_t mod_revision, crm_etcd_cas *out)
{
    crm_etcd_compare cmp = {
        .key = key, .target = CRM_ETCD_CMP_MOD, .result = CRM_ETCD_EQUAL, .number = mod_revision};
    crm_etcd_op del = {.type = CRM_ETCD_OP_DELETE, .key = key};
    return cas(c, &cmp, &del, out);
}
