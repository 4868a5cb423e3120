/*
 * etcd_codec.c - base64, request bodies and strict reply decoders of etcd's
 * v3 JSON gateway (see etcd_codec.h for the rules every decoder follows).
 *
 * Design: replies are parsed whole by jansson (duplicate keys rejected),
 * then walked with small typed getters that record "<reply>: field '<f>'
 * <what is wrong>" on the first mismatch. Decoders build their result in a
 * local and copy it out only when everything checked, so a failure leaves
 * the caller's output untouched. Sizes are bounded by the caller (the
 * client refuses reply bodies over max_reply_bytes before they get here).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "metadata/etcd_codec.h"
#include "metadata/quote.h"

/* ------------------------------------------------------------------------ */
/* base64                                                                   */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int crm_b64_encode(const void *data, size_t len, char **out, size_t *out_len)
{
    if (len > (SIZE_MAX - 1) / 4 * 3 - 3)
        return crb_error(CR_INVALID_PARAMS, "base64: %zu bytes is too long", len);
    size_t n = (len + 2) / 3 * 4;
    char *s = malloc(n + 1);
    if (s == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "base64 of %zu bytes", len);
    const uint8_t *p = data;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        s[o++] = b64_alphabet[(v >> 18) & 63];
        s[o++] = b64_alphabet[(v >> 12) & 63];
        s[o++] = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
        s[o++] = i + 2 < len ? b64_alphabet[v & 63] : '=';
    }
    s[o] = '\0';
    *out = s;
    if (out_len != NULL)
        *out_len = o;
    return 0;
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Decode; on failure *why says what is wrong (a static string). */
static int b64_decode(const char *text, size_t len, uint8_t **out, size_t *out_len,
                      const char **why)
{
    if (len % 4 != 0) {
        *why = "is not base64 (length not a multiple of 4)";
        return CR_ERR_METADATA_MALFORMED;
    }
    size_t pad = 0;
    if (len > 0 && text[len - 1] == '=')
        pad = (len > 1 && text[len - 2] == '=') ? 2 : 1;
    size_t n = len / 4 * 3 - pad;
    uint8_t *d = malloc(n + 1);
    if (d == NULL) {
        *why = "out of memory";
        return CR_ERR_NO_MEMORY;
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        bool last = i + 4 == len;
        int v[4];
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)text[i + (size_t)k];
            if (c == '=' && last && k >= 4 - (int)pad) {
                v[k] = 0;
                continue;
            }
            v[k] = b64_value(c);
            if (v[k] < 0) {
                free(d);
                *why = "is not base64 (a character outside the alphabet)";
                return CR_ERR_METADATA_MALFORMED;
            }
        }
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        if (last && ((pad == 1 && (w & 0xff) != 0) || (pad == 2 && (w & 0xffff) != 0))) {
            free(d);
            *why = "is not base64 (non-zero padding bits)";
            return CR_ERR_METADATA_MALFORMED;
        }
        d[o++] = (uint8_t)(w >> 16);
        if (!last || pad < 2)
            d[o++] = (uint8_t)(w >> 8);
        if (!last || pad < 1)
            d[o++] = (uint8_t)w;
    }
    d[o] = 0;
    *out = d;
    *out_len = o;
    return 0;
}

int crm_b64_decode(const char *text, size_t len, uint8_t **out, size_t *out_len)
{
    const char *why = "";
    int rc = b64_decode(text, len, out, out_len, &why);
    if (rc < 0)
        return crb_error(rc, "base64 of %zu characters: %s", len, why);
    return 0;
}

int crm_etcd_prefix_end(const char *key, size_t key_len, char **out, size_t *len)
{
    size_t n = key_len;
    while (n > 0 && (unsigned char)key[n - 1] == 0xff)
        n--;
    char *e = malloc(n > 0 ? n : 1);
    if (e == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "etcd prefix end");
    if (n == 0) {
        e[0] = '\0';
        *out = e;
        *len = 1;
        return 0;
    }
    memcpy(e, key, n);
    e[n - 1] = (char)((unsigned char)e[n - 1] + 1);
    *out = e;
    *len = n;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* request bodies                                                           */

/* obj[name] = base64(data); false when out of memory. */
static bool set_bytes(json_t *obj, const char *name, const void *data, size_t len)
{
    char *b64;
    if (crm_b64_encode(data, len, &b64, NULL) < 0)
        return false;
    bool ok = json_object_set_new(obj, name, json_string(b64)) == 0;
    free(b64);
    return ok;
}

static bool set_int64(json_t *obj, const char *name, int64_t v)
{
    char text[24];
    snprintf(text, sizeof(text), "%" PRId64, v);
    return json_object_set_new(obj, name, json_string(text)) == 0;
}

/* key plus, with prefix, the range_end covering every key under it. */
static bool set_key_range(json_t *obj, const char *key, bool prefix)
{
    size_t klen = strlen(key);
    if (!set_bytes(obj, "key", key, klen))
        return false;
    if (!prefix)
        return true;
    char *end;
    size_t elen;
    if (crm_etcd_prefix_end(key, klen, &end, &elen) < 0)
        return false;
    bool ok = set_bytes(obj, "range_end", end, elen);
    free(end);
    return ok;
}

json_t *crm_etcd_json_range(const char *key, bool prefix, int64_t limit)
{
    json_t *j = json_object();
    if (j == NULL || !set_key_range(j, key, prefix) || (limit > 0 && !set_int64(j, "limit", limit)))
        goto err_free;
    return j;
err_free:
    json_decref(j);
    return NULL;
}

json_t *crm_etcd_json_put(const char *key, const void *value, size_t len, int64_t lease)
{
    json_t *j = json_object();
    if (j == NULL || !set_bytes(j, "key", key, strlen(key)) ||
        !set_bytes(j, "value", len > 0 ? value : "", len) ||
        (lease != 0 && !set_int64(j, "lease", lease)))
        goto err_free;
    return j;
err_free:
    json_decref(j);
    return NULL;
}

json_t *crm_etcd_json_delete(const char *key, bool prefix)
{
    json_t *j = json_object();
    if (j == NULL || !set_key_range(j, key, prefix))
        goto err_free;
    return j;
err_free:
    json_decref(j);
    return NULL;
}

static const char *const cmp_targets[] = {"VERSION", "CREATE", "MOD", "VALUE", "LEASE"};
static const char *const cmp_fields[] = {"version", "create_revision", "mod_revision", "value",
                                         "lease"};
static const char *const cmp_results[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};

static json_t *compare_json(const crm_etcd_compare *c)
{
    if ((unsigned)c->target > CRM_ETCD_CMP_LEASE || (unsigned)c->result > CRM_ETCD_NOT_EQUAL)
        return NULL;
    json_t *j = json_object();
    if (j == NULL || !set_bytes(j, "key", c->key, strlen(c->key)) ||
        json_object_set_new(j, "target", json_string(cmp_targets[c->target])) != 0 ||
        json_object_set_new(j, "result", json_string(cmp_results[c->result])) != 0)
        goto err_free;
    bool ok = c->target == CRM_ETCD_CMP_VALUE
                  ? set_bytes(j, "value", c->value_len > 0 ? c->value : "", c->value_len)
                  : set_int64(j, cmp_fields[c->target], c->number);
    if (!ok)
        goto err_free;
    return j;
err_free:
    json_decref(j);
    return NULL;
}

static json_t *op_json(const crm_etcd_op *op)
{
    json_t *inner = NULL;
    const char *name = NULL;
    switch (op->type) {
    case CRM_ETCD_OP_RANGE:
        inner = crm_etcd_json_range(op->key, op->prefix, 0);
        name = "request_range";
        break;
    case CRM_ETCD_OP_PUT:
        inner = crm_etcd_json_put(op->key, op->value, op->value_len, op->lease);
        name = "request_put";
        break;
    case CRM_ETCD_OP_DELETE:
        inner = crm_etcd_json_delete(op->key, op->prefix);
        name = "request_delete_range";
        break;
    }
    if (inner == NULL)
        return NULL;
    json_t *j = json_object();
    if (j == NULL || json_object_set_new(j, name, inner) != 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static bool add_ops(json_t *txn, const char *name, const crm_etcd_op *ops, size_t n)
{
    json_t *a = json_array();
    if (a == NULL)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (json_array_append_new(a, op_json(&ops[i])) != 0) {
            json_decref(a);
            return false;
        }
    }
    return json_object_set_new(txn, name, a) == 0;
}

json_t *crm_etcd_json_txn(const crm_etcd_compare *cmp, size_t n_cmp, const crm_etcd_op *success,
                          size_t n_success, const crm_etcd_op *failure, size_t n_failure)
{
    json_t *j = json_object();
    json_t *c = json_array();
    if (j == NULL || c == NULL)
        goto err_free;
    for (size_t i = 0; i < n_cmp; i++)
        if (json_array_append_new(c, compare_json(&cmp[i])) != 0)
            goto err_free;
    if (json_object_set_new(j, "compare", c) != 0) {
        c = NULL;
        goto err_free;
    }
    c = NULL;
    if (!add_ops(j, "success", success, n_success) || !add_ops(j, "failure", failure, n_failure))
        goto err_free;
    return j;
err_free:
    json_decref(c);
    json_decref(j);
    return NULL;
}

json_t *crm_etcd_json_lease_grant(int64_t ttl)
{
    json_t *j = json_object();
    if (j == NULL || !set_int64(j, "TTL", ttl)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

json_t *crm_etcd_json_lease_id(int64_t id)
{
    json_t *j = json_object();
    if (j == NULL || !set_int64(j, "ID", id)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

json_t *crm_etcd_json_watch(const char *key, bool prefix, int64_t start_revision)
{
    json_t *cr = json_object();
    json_t *j = json_object();
    if (cr == NULL || j == NULL || !set_key_range(cr, key, prefix) ||
        (start_revision > 0 && !set_int64(cr, "start_revision", start_revision)))
        goto err_free;
    if (json_object_set_new(j, "create_request", cr) != 0) {
        cr = NULL;
        goto err_free;
    }
    return j;
err_free:
    json_decref(cr);
    json_decref(j);
    return NULL;
}

int crm_etcd_json_dump(json_t *j, char **out, size_t *len)
{
    if (j == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "building an etcd request");
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (s == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "serialising an etcd request");
    *out = s;
    *len = strlen(s);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* decoding                                                                 */

/* Which reply is being decoded, for messages. */
typedef struct dctx {
    const char *reply; /* "range reply" */
} dctx;

static int bad(const dctx *d, const char *field, const char *what)
{
    return crb_error(CR_ERR_METADATA_MALFORMED, "etcd %s: %s%s%s%s", d->reply,
                     field != NULL ? "field '" : "", field != NULL ? field : "",
                     field != NULL ? "' " : "", what);
}

static int parse(const dctx *d, const char *body, size_t len, json_t **out)
{
    json_error_t err;
    json_t *j = json_loadb(body != NULL ? body : "", len, JSON_REJECT_DUPLICATES, &err);
    if (j == NULL) {
        char q[CRM_QUOTE_MAX + 1];
        crm_quote(body, len, q);
        return crb_error(CR_ERR_METADATA_MALFORMED, "etcd %s is not JSON (%s at %d): '%s'",
                         d->reply, err.text, err.position, q);
    }
    if (!json_is_object(j)) {
        json_decref(j);
        return bad(d, NULL, "is not a JSON object");
    }
    *out = j;
    return 0;
}

/* Decimal int64 text: optional '-', 1..19 digits, no overflow. */
static bool parse_int64_text(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    if (n > 0 && s[0] == '-') {
        neg = true;
        i = 1;
    }
    if (i == n || n - i > 19)
        return false;
    uint64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if ((!neg && v > (uint64_t)INT64_MAX) || (neg && v > (uint64_t)INT64_MAX + 1))
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* int64 field (absent = 0). */
static int get_int64(const dctx *d, json_t *obj, const char *name, int64_t *out)
{
    json_t *v = json_object_get(obj, name);
    if (v == NULL) {
        *out = 0;
        return 0;
    }
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_string(v) && parse_int64_text(json_string_value(v), json_string_length(v), out))
        return 0;
    return bad(d, name, "is not an int64");
}

/* uint64 field whose value is not needed (cluster_id, member_id). */
static int check_uint64(const dctx *d, json_t *obj, const char *name)
{
    json_t *v = json_object_get(obj, name);
    if (v == NULL || (json_is_integer(v) && json_integer_value(v) >= 0))
        return 0;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        bool digits = n > 0 && n <= 20;
        for (size_t i = 0; digits && i < n; i++)
            digits = s[i] >= '0' && s[i] <= '9';
        if (digits)
            return 0;
    }
    return bad(d, name, "is not a uint64");
}

static int get_bool(const dctx *d, json_t *obj, const char *name, bool *out)
{
    json_t *v = json_object_get(obj, name);
    if (v == NULL) {
        *out = false;
        return 0;
    }
    if (!json_is_boolean(v))
        return bad(d, name, "is not a boolean");
    *out = json_is_true(v);
    return 0;
}

/* Optional object field: *out NULL when absent. */
static int get_object(const dctx *d, json_t *obj, const char *name, json_t **out)
{
    json_t *v = json_object_get(obj, name);
    if (v != NULL && !json_is_object(v))
        return bad(d, name, "is not an object");
    *out = v;
    return 0;
}

static int get_array(const dctx *d, json_t *obj, const char *name, json_t **out)
{
    json_t *v = json_object_get(obj, name);
    if (v != NULL && !json_is_array(v))
        return bad(d, name, "is not an array");
    *out = v;
    return 0;
}

/* Bytes field (absent = empty): malloc'd with a trailing NUL. */
static int get_bytes(const dctx *d, json_t *obj, const char *name, uint8_t **out, size_t *len)
{
    json_t *v = json_object_get(obj, name);
    if (v == NULL) {
        uint8_t *e = malloc(1);
        if (e == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "etcd %s", d->reply);
        e[0] = 0;
        *out = e;
        *len = 0;
        return 0;
    }
    if (!json_is_string(v))
        return bad(d, name, "is not a base64 string");
    const char *why = "";
    int rc = b64_decode(json_string_value(v), json_string_length(v), out, len, &why);
    if (rc == CR_ERR_METADATA_MALFORMED)
        return bad(d, name, why[0] != '\0' ? why : "is not base64");
    if (rc < 0)
        return crb_error(rc, "etcd %s: field '%s': %s", d->reply, name, why);
    return 0;
}

/* The response header: every field typed; *revision = header.revision. */
static int get_header(const dctx *d, json_t *obj, bool required, int64_t *revision)
{
    json_t *h = NULL;
    int rc = get_object(d, obj, "header", &h);
    if (rc < 0)
        return rc;
    if (h == NULL) {
        if (required)
            return bad(d, "header", "is missing");
        *revision = 0;
        return 0;
    }
    int64_t term;
    if ((rc = check_uint64(d, h, "cluster_id")) < 0 || (rc = check_uint64(d, h, "member_id")) < 0 ||
        (rc = get_int64(d, h, "raft_term", &term)) < 0 ||
        (rc = get_int64(d, h, "revision", revision)) < 0)
        return rc;
    if (*revision < 0)
        return bad(d, "header.revision", "is negative");
    return 0;
}

void crm_etcd_kv_clear(crm_etcd_kv *kv)
{
    if (kv == NULL)
        return;
    free(kv->key);
    free(kv->value);
    memset(kv, 0, sizeof(*kv));
}

void crm_etcd_range_clear(crm_etcd_range *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n_kvs; i++)
        crm_etcd_kv_clear(&r->kvs[i]);
    free(r->kvs);
    memset(r, 0, sizeof(*r));
}

static int decode_kv(const dctx *d, json_t *j, crm_etcd_kv *out)
{
    if (!json_is_object(j))
        return bad(d, "kvs[]", "entry is not an object");
    crm_etcd_kv kv = {0};
    uint8_t *key = NULL;
    int rc;
    if ((rc = get_int64(d, j, "create_revision", &kv.create_revision)) < 0 ||
        (rc = get_int64(d, j, "mod_revision", &kv.mod_revision)) < 0 ||
        (rc = get_int64(d, j, "version", &kv.version)) < 0 ||
        (rc = get_int64(d, j, "lease", &kv.lease)) < 0)
        return rc;
    if (kv.create_revision < 0 || kv.mod_revision < 0 || kv.version < 0)
        return bad(d, "kvs[]", "has a negative revision or version");
    if (json_object_get(j, "key") == NULL)
        return bad(d, "kvs[].key", "is missing");
    if ((rc = get_bytes(d, j, "key", &key, &kv.key_len)) < 0)
        return rc;
    kv.key = (char *)key;
    if ((rc = get_bytes(d, j, "value", &kv.value, &kv.value_len)) < 0) {
        free(key);
        return rc;
    }
    *out = kv;
    return 0;
}

static int decode_kvs(const dctx *d, json_t *arr, crm_etcd_kv **out, size_t *n_out)
{
    size_t n = arr != NULL ? json_array_size(arr) : 0;
    crm_etcd_kv *kvs = NULL;
    if (n > 0) {
        kvs = calloc(n, sizeof(*kvs));
        if (kvs == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "etcd %s: %zu kvs", d->reply, n);
    }
    for (size_t i = 0; i < n; i++) {
        int rc = decode_kv(d, json_array_get(arr, i), &kvs[i]);
        if (rc < 0) {
            for (size_t k = 0; k < i; k++)
                crm_etcd_kv_clear(&kvs[k]);
            free(kvs);
            return rc;
        }
    }
    *out = kvs;
    *n_out = n;
    return 0;
}

/* A RangeResponse object (top level or inside a txn). */
static int decode_range_obj(const dctx *d, json_t *j, bool header_required, crm_etcd_range *out)
{
    crm_etcd_range r = {0};
    json_t *kvs = NULL;
    int rc;
    if ((rc = get_header(d, j, header_required, &r.revision)) < 0 ||
        (rc = get_int64(d, j, "count", &r.count)) < 0 ||
        (rc = get_bool(d, j, "more", &r.more)) < 0 || (rc = get_array(d, j, "kvs", &kvs)) < 0)
        return rc;
    if (r.count < 0)
        return bad(d, "count", "is negative");
    if ((rc = decode_kvs(d, kvs, &r.kvs, &r.n_kvs)) < 0)
        return rc;
    if ((int64_t)r.n_kvs > r.count) {
        crm_etcd_range_clear(&r);
        return bad(d, "count", "is smaller than the number of kvs");
    }
    *out = r;
    return 0;
}

/*
 * A 200 reply may still carry an error object in streams; unary replies
 * carry {"error": "..."} only with non-200 statuses, but check anyway.
 */
static int check_error_field(const dctx *d, json_t *j)
{
    json_t *e = json_object_get(j, "error");
    if (e == NULL)
        return 0;
    const char *msg = NULL;
    int code = 0;
    if (json_is_string(e)) {
        msg = json_string_value(e);
        json_t *c = json_object_get(j, "code");
        if (json_is_integer(c))
            code = (int)json_integer_value(c);
    } else if (json_is_object(e)) {
        json_t *m = json_object_get(e, "message");
        json_t *c = json_object_get(e, "grpc_code");
        msg = json_is_string(m) ? json_string_value(m) : NULL;
        if (json_is_integer(c))
            code = (int)json_integer_value(c);
    }
    if (msg == NULL)
        return bad(d, "error", "is neither a message nor an error object");
    return crb_error(CR_ETCD_OPERATION_ERROR, "etcd %s: %.200s (gRPC code %d)", d->reply, msg,
                     code);
}

int crm_etcd_decode_error(const char *body, size_t len, int *grpc_code, char *msg, size_t cap)
{
    dctx d = {"error reply"};
    json_t *j = NULL;
    int rc = parse(&d, body, len, &j);
    if (rc < 0)
        return rc;
    json_t *e = json_object_get(j, "error");
    json_t *m = json_object_get(j, "message");
    json_t *c = json_object_get(j, "code");
    if (json_is_object(e)) { /* the streaming form */
        m = json_object_get(e, "message");
        c = json_object_get(e, "grpc_code");
    }
    const char *text = json_is_string(m)   ? json_string_value(m)
                       : json_is_string(e) ? json_string_value(e)
                                           : NULL;
    if (text == NULL || (c != NULL && !json_is_integer(c))) {
        json_decref(j);
        return bad(&d, NULL, "has no error message and code");
    }
    *grpc_code = c != NULL ? (int)json_integer_value(c) : 0;
    if (cap > 0)
        snprintf(msg, cap, "%s", text);
    json_decref(j);
    return 0;
}

int crm_etcd_decode_range(const char *body, size_t len, crm_etcd_range *out)
{
    dctx d = {"range reply"};
    json_t *j = NULL;
    int rc = parse(&d, body, len, &j);
    if (rc < 0)
        return rc;
    rc = check_error_field(&d, j);
    if (rc == 0)
        rc = decode_range_obj(&d, j, true, out);
    json_decref(j);
    return rc;
}

int crm_etcd_decode_put(const char *body, size_t len, int64_t *revision)
{
    dctx d = {"put reply"};
    json_t *j = NULL;
    int rc = parse(&d, body, len, &j);
    if (rc < 0)
        return rc;
    int64_t rev;
    json_t *prev = NULL;
    rc = check_error_field(&d, j);
    if (rc == 0)
        rc = get_header(&d, j, true, &rev);
    if (rc == 0)
        rc = get_object(&d, j, "prev_kv", &prev);
    json_decref(j);
    if (rc == 0)
        *revision = rev;
    return rc;
}

int crm_etcd_decode_delete(const char *body, size_t len, int64_t *deleted, int64_t *revision)
{
    dctx d = {"delete reply"};
    json_t *j = NULL;
    int rc = parse(&d, body, len, &j);
    if (rc < 0)
        return rc;
    int64_t rev, del;
    rc = check_error_field(&d, j);
    if (rc == 0)
        rc = get_header(&d, j, true, &rev);
    if (rc == 0)
        rc = get_int64(&d, j, "deleted", &del);
    if (rc == 0 && del < 0)
        rc = bad(&d, "deleted", "is negative");
    json_decref(j);
    if (rc == 0) {
        *deleted = del;
        *revision = rev;
    }
    return rc;
}

void crm_etcd_txn_result_clear(crm_etcd_txn_result *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n_results; i++)
        crm_etcd_range_clear(&r->results[i].range);
    free(r->results);
    memset(r, 0, sizeof(*r));
}

static int decode_op_result(const dctx *d, json_t *j, crm_etcd_op_result *out)
{
    if (!json_is_object(j) || json_object_size(j) != 1)
        return bad(d, "responses[]", "entry is not an object with one response");
    crm_etcd_op_result r = {0};
    json_t *v;
    int64_t rev;
    int rc;
    if ((v = json_object_get(j, "response_range")) != NULL) {
        r.type = CRM_ETCD_OP_RANGE;
        if (!json_is_object(v))
            return bad(d, "response_range", "is not an object");
        if ((rc = decode_range_obj(d, v, false, &r.range)) < 0)
            return rc;
    } else if ((v = json_object_get(j, "response_put")) != NULL) {
        r.type = CRM_ETCD_OP_PUT;
        if (!json_is_object(v))
            return bad(d, "response_put", "is not an object");
        if ((rc = get_header(d, v, false, &rev)) < 0)
            return rc;
    } else if ((v = json_object_get(j, "response_delete_range")) != NULL) {
        r.type = CRM_ETCD_OP_DELETE;
        if (!json_is_object(v))
            return bad(d, "response_delete_range", "is not an object");
        if ((rc = get_header(d, v, false, &rev)) < 0 ||
            (rc = get_int64(d, v, "deleted", &r.deleted)) < 0)
            return rc;
        if (r.deleted < 0)
            return bad(d, "deleted", "is negative");
    } else {
        return bad(d, "responses[]", "entry is not a range, put or delete response");
    }
    *out = r;
    return 0;
}

int crm_etcd_decode_txn(const char *body, size_t len, crm_etcd_txn_result *out)
{
    dctx d = {"txn reply"};
    json_t *j = NULL;
    int rc = parse(&d, body, len, &j);
    if (rc < 0)
        return rc;
    crm_etcd_txn_result r = {0};
    json_t *resp = NULL;
    if ((rc = check_error_field(&d, j)) < 0 || (rc = get_header(&d, j, true, &r.revision)) < 0 ||
        (rc = get_bool(&d, j, "succeeded", &r.succeeded)) < 0 ||
        (rc = get_array(&d, j, "responses", &resp)) < 0)
        goto out_decref;
    size_t n = resp != NULL ? json_array_size(resp) : 0;
    if (n > 0) {
        r.results = calloc(n, sizeof(*r.results));
        if (r.results == NULL) {
            rc = crb_error(CR_ERR_NO_MEMORY, "etcd txn reply: %zu responses", n);
            goto out_decref;
        }
    }
    for (size_t i = 0; i < n; i++) {
        rc = decode_op_result(&d, json_array_get(resp, i), &r.results[i]);
        if (rc < 0) {
            crm_etcd_txn_result_clear(&r);
            goto out_decref;
        }
        r.n_results = i + 1;
    }
    *out = r;
out_decref:
    json_decref(j);
    return rc;
}

int crm_etcd_decode_lease_grant(const char *body, size_t len, int64_t *id, int64_t *ttl)
{
    dctx d = {"lease grant reply"};
    json_t *j = NULL;
    int rc = parse(&d, body, len, &j);
    if (rc < 0)
        return rc;
    int64_t rev, lid, lttl;
    rc = check_error_field(&d, j);
    if (rc == 0)
        rc = get_header(&d, j, true, &rev);
    if (rc == 0)
        rc = get_int64(&d, j, "ID", &lid);
    if (rc == 0)
        rc = get_int64(&d, j, "TTL", &lttl);
    if (rc == 0 && lid == 0)
        rc = bad(&d, "ID", "is missing or zero");
    if (rc == 0 && lttl <= 0)
        rc = bad(&d, "TTL", "is missing or not positive");
    json_decref(j);
    if (rc == 0) {
        *id = lid;
        *ttl = lttl;
    }
    return rc;
}

/* First line of a stream (messages are newline-separated). */
static size_t first_line(const char *body, size_t len)
{
    const char *nl = body != NULL ? memchr(body, '\n', len) : NULL;
    return nl != NULL ? (size_t)(nl - body) : len;
}

int crm_etcd_decode_keepalive(const char *body, size_t len, int64_t *id, int64_t *ttl)
{
    dctx d = {"lease keepalive reply"};
    json_t *j = NULL;
    int rc = parse(&d, body, first_line(body, len), &j);
    if (rc < 0)
        return rc;
    int64_t rev, lid = 0, lttl = 0;
    json_t *res = NULL;
    rc = check_error_field(&d, j);
    if (rc == 0)
        rc = get_object(&d, j, "result", &res);
    if (rc == 0 && res == NULL)
        rc = bad(&d, "result", "is missing");
    if (rc == 0)
        rc = get_header(&d, res, true, &rev);
    if (rc == 0)
        rc = get_int64(&d, res, "ID", &lid);
    if (rc == 0)
        rc = get_int64(&d, res, "TTL", &lttl);
    if (rc == 0 && lttl < 0)
        rc = bad(&d, "TTL", "is negative");
    json_decref(j);
    if (rc == 0) {
        *id = lid;
        *ttl = lttl;
    }
    return rc;
}

void crm_etcd_watch_msg_clear(crm_etcd_watch_msg *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n_events; i++)
        crm_etcd_kv_clear(&m->events[i].kv);
    free(m->events);
    memset(m, 0, sizeof(*m));
}

static int decode_event(const dctx *d, json_t *j, crm_etcd_event *out)
{
    if (!json_is_object(j))
        return bad(d, "events[]", "entry is not an object");
    crm_etcd_event ev = {0};
    json_t *t = json_object_get(j, "type");
    if (t == NULL || (json_is_string(t) && strcmp(json_string_value(t), "PUT") == 0) ||
        (json_is_integer(t) && json_integer_value(t) == 0))
        ev.type = CRM_ETCD_EVENT_PUT;
    else if ((json_is_string(t) && strcmp(json_string_value(t), "DELETE") == 0) ||
             (json_is_integer(t) && json_integer_value(t) == 1))
        ev.type = CRM_ETCD_EVENT_DELETE;
    else
        return bad(d, "events[].type", "is neither PUT nor DELETE");
    json_t *kv = NULL;
    int rc = get_object(d, j, "kv", &kv);
    if (rc < 0)
        return rc;
    if (kv == NULL)
        return bad(d, "events[].kv", "is missing");
    if ((rc = decode_kv(d, kv, &ev.kv)) < 0)
        return rc;
    if (ev.kv.mod_revision <= 0) {
        crm_etcd_kv_clear(&ev.kv);
        return bad(d, "events[].kv.mod_revision", "is missing");
    }
    *out = ev;
    return 0;
}

int crm_etcd_decode_watch(const char *body, size_t len, crm_etcd_watch_msg *out)
{
    dctx d = {"watch message"};
    json_t *j = NULL;
    int rc = parse(&d, body, len, &j);
    if (rc < 0)
        return rc;
    crm_etcd_watch_msg m = {0};
    json_t *res = NULL, *events = NULL, *reason = NULL;
    int64_t watch_id;
    if ((rc = check_error_field(&d, j)) < 0 || (rc = get_object(&d, j, "result", &res)) < 0)
        goto out_decref;
    if (res == NULL) {
        rc = bad(&d, "result", "is missing");
        goto out_decref;
    }
    if ((rc = get_header(&d, res, false, &m.revision)) < 0 ||
        (rc = get_int64(&d, res, "watch_id", &watch_id)) < 0 ||
        (rc = get_bool(&d, res, "created", &m.created)) < 0 ||
        (rc = get_bool(&d, res, "canceled", &m.canceled)) < 0 ||
        (rc = get_int64(&d, res, "compact_revision", &m.compact_revision)) < 0 ||
        (rc = get_array(&d, res, "events", &events)) < 0)
        goto out_decref;
    reason = json_object_get(res, "cancel_reason");
    if (reason != NULL && !json_is_string(reason)) {
        rc = bad(&d, "cancel_reason", "is not a string");
        goto out_decref;
    }
    if (reason != NULL)
        snprintf(m.cancel_reason, sizeof(m.cancel_reason), "%s", json_string_value(reason));
    size_t n = events != NULL ? json_array_size(events) : 0;
    if (n > 0) {
        m.events = calloc(n, sizeof(*m.events));
        if (m.events == NULL) {
            rc = crb_error(CR_ERR_NO_MEMORY, "etcd watch message: %zu events", n);
            goto out_decref;
        }
    }
    for (size_t i = 0; i < n; i++) {
        rc = decode_event(&d, json_array_get(events, i), &m.events[i]);
        if (rc < 0) {
            crm_etcd_watch_msg_clear(&m);
            goto out_decref;
        }
        m.n_events = i + 1;
        if (i > 0 && m.events[i].kv.mod_revision < m.events[i - 1].kv.mod_revision) {
            crm_etcd_watch_msg_clear(&m);
            rc = bad(&d, "events[]", "are not in revision order");
            goto out_decref;
        }
    }
    *out = m;
out_decref:
    json_decref(j);
    return rc;
}
