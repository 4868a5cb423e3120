/*
 * fuzz_etcd_reply.c - libFuzzer target for the etcd gateway decoders
 * (src/metadata/etcd_codec.c) and base64.
 *
 * The first byte picks the decoder, the rest is the reply body. Contract:
 * a failure is ERR_METADATA_MALFORMED or ETCD_OPERATION_ERROR with a
 * message, and the output is untouched; a success satisfies the invariants
 * the client relies on (counts match arrays, every decoded key and value is
 * NUL-terminated, revisions are not negative, watch events in order). A
 * base64 string that decodes must re-encode to exactly the same text (the
 * decoder accepts only canonical padded base64).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "fuzz_check.h"
#include "metadata/etcd_codec.h"

static void check_failure(int rc, const void *out, size_t n)
{
    FUZZ_CHECK(rc == CR_ERR_METADATA_MALFORMED || rc == CR_ETCD_OPERATION_ERROR);
    FUZZ_CHECK(fuzz_untouched(out, n));
    FUZZ_CHECK(cr_last_error_message()[0] != '\0');
}

static void check_kv(const crm_etcd_kv *kv)
{
    FUZZ_CHECK(kv->key != NULL && kv->key[kv->key_len] == '\0');
    FUZZ_CHECK(kv->value != NULL && kv->value[kv->value_len] == 0);
    FUZZ_CHECK(kv->create_revision >= 0 && kv->mod_revision >= 0 && kv->version >= 0);
}

static void check_range(const crm_etcd_range *r)
{
    FUZZ_CHECK((r->n_kvs == 0) == (r->kvs == NULL));
    FUZZ_CHECK((int64_t)r->n_kvs <= r->count);
    FUZZ_CHECK(r->revision >= 0);
    for (size_t i = 0; i < r->n_kvs; i++)
        check_kv(&r->kvs[i]);
}

static void fuzz_base64(const char *text, size_t len)
{
    uint8_t *out = (uint8_t *)0x1;
    size_t n = 7;
    int rc = crm_b64_decode(text, len, &out, &n);
    if (rc != 0) {
        FUZZ_CHECK(rc == CR_ERR_METADATA_MALFORMED);
        FUZZ_CHECK(out == (uint8_t *)0x1 && n == 7);
        return;
    }
    FUZZ_CHECK(out[n] == 0);
    char *again;
    size_t alen;
    FUZZ_CHECK(crm_b64_encode(out, n, &again, &alen) == 0);
    FUZZ_CHECK(alen == len && memcmp(again, text, len) == 0);
    free(again);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    int rc;
    switch (data[0] % 9) {
    case 0: {
        crm_etcd_range r;
        memset(&r, FUZZ_SENTINEL, sizeof(r));
        rc = crm_etcd_decode_range(body, len, &r);
        if (rc != 0) {
            check_failure(rc, &r, sizeof(r));
            break;
        }
        check_range(&r);
        crm_etcd_range_clear(&r);
        break;
    }
    case 1: {
        crm_etcd_txn_result t;
        memset(&t, FUZZ_SENTINEL, sizeof(t));
        rc = crm_etcd_decode_txn(body, len, &t);
        if (rc != 0) {
            check_failure(rc, &t, sizeof(t));
            break;
        }
        FUZZ_CHECK((t.n_results == 0) == (t.results == NULL));
        for (size_t i = 0; i < t.n_results; i++) {
            FUZZ_CHECK(t.results[i].type <= CRM_ETCD_OP_DELETE);
            FUZZ_CHECK(t.results[i].deleted >= 0);
            if (t.results[i].type == CRM_ETCD_OP_RANGE)
                check_range(&t.results[i].range);
        }
        crm_etcd_txn_result_clear(&t);
        break;
    }
    case 2: {
        crm_etcd_watch_msg m;
        memset(&m, FUZZ_SENTINEL, sizeof(m));
        rc = crm_etcd_decode_watch(body, len, &m);
        if (rc != 0) {
            check_failure(rc, &m, sizeof(m));
            break;
        }
        FUZZ_CHECK((m.n_events == 0) == (m.events == NULL));
        FUZZ_CHECK(memchr(m.cancel_reason, '\0', sizeof(m.cancel_reason)) != NULL);
        for (size_t i = 0; i < m.n_events; i++) {
            check_kv(&m.events[i].kv);
            FUZZ_CHECK(m.events[i].kv.mod_revision > 0);
            FUZZ_CHECK(i == 0 || m.events[i].kv.mod_revision >= m.events[i - 1].kv.mod_revision);
        }
        crm_etcd_watch_msg_clear(&m);
        break;
    }
    case 3: {
        int64_t id[2];
        memset(id, FUZZ_SENTINEL, sizeof(id));
        rc = crm_etcd_decode_lease_grant(body, len, &id[0], &id[1]);
        if (rc != 0)
            check_failure(rc, id, sizeof(id));
        else
            FUZZ_CHECK(id[0] != 0 && id[1] > 0);
        break;
    }
    case 4: {
        int64_t id[2];
        memset(id, FUZZ_SENTINEL, sizeof(id));
        rc = crm_etcd_decode_keepalive(body, len, &id[0], &id[1]);
        if (rc != 0)
            check_failure(rc, id, sizeof(id));
        else
            FUZZ_CHECK(id[1] >= 0);
        break;
    }
    case 5: {
        int64_t v[2];
        memset(v, FUZZ_SENTINEL, sizeof(v));
        rc = crm_etcd_decode_delete(body, len, &v[0], &v[1]);
        if (rc != 0)
            check_failure(rc, v, sizeof(v));
        else
            FUZZ_CHECK(v[0] >= 0 && v[1] >= 0);
        break;
    }
    case 6: {
        int64_t v;
        memset(&v, FUZZ_SENTINEL, sizeof(v));
        rc = crm_etcd_decode_put(body, len, &v);
        if (rc != 0)
            check_failure(rc, &v, sizeof(v));
        else
            FUZZ_CHECK(v >= 0);
        break;
    }
    case 7: {
        struct {
            int code;
            char msg[64];
        } e;
        memset(&e, FUZZ_SENTINEL, sizeof(e));
        rc = crm_etcd_decode_error(body, len, &e.code, e.msg, sizeof(e.msg));
        if (rc != 0) {
            FUZZ_CHECK(rc == CR_ERR_METADATA_MALFORMED);
            FUZZ_CHECK(fuzz_untouched(&e, sizeof(e)));
        } else {
            FUZZ_CHECK(memchr(e.msg, '\0', sizeof(e.msg)) != NULL);
        }
        break;
    }
    default:
        fuzz_base64(body, len);
        break;
    }
    return 0;
}
