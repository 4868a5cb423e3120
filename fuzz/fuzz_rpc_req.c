/*
 * fuzz_rpc_req.c - libFuzzer target for crp_rpc_req_decode (every opcode).
 *
 * A failure must be a decode status (malformed, or not supported for an
 * unknown opcode) and leave the output untouched. A success must satisfy
 * the structural invariants the master relies on (bounds, counts matching
 * pointers, no NULL strings), re-encode, decode again, and re-encode to the
 * very same bytes (canonical form: nothing decoded is lost or invented).
 */
#include "fuzz_common.h"
#include "proto/rpc.h"

static void check_strs(size_t n, char *const *v, size_t max_n, size_t max_len)
{
    FUZZ_CHECK(n <= max_n);
    FUZZ_CHECK((n == 0) == (v == NULL));
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(v[i] != NULL && strlen(v[i]) <= max_len);
}

static void check_segment(const crp_rpc_segment *s)
{
    FUZZ_CHECK(s->name != NULL && strlen(s->name) <= CRP_MAX_NAME);
    FUZZ_CHECK(s->size > 0 && s->base <= UINT64_MAX - s->size);
}

static void check_config(const crp_rpc_replica_config *c)
{
    FUZZ_CHECK(c->soft_pin_action <= CRP_RPC_SOFT_PIN_DISABLE);
    check_strs(c->n_preferred, c->preferred_segments, CRP_RPC_MAX_PREFERRED, CRP_MAX_NAME);
}

static void check_invariants(const crp_rpc_req *m)
{
    FUZZ_CHECK(crp_rpc_op_valid(m->op));
    switch (m->op) {
    case CRP_RPC_SERVICE_READY:
        FUZZ_CHECK(m->u.hello.software != NULL);
        FUZZ_CHECK(strlen(m->u.hello.software) <= CRP_RPC_MAX_SOFTWARE);
        break;
    case CRP_RPC_MOUNT_SEGMENT:
        check_segment(&m->u.mount.segment);
        break;
    case CRP_RPC_REMOUNT_SEGMENT:
        FUZZ_CHECK(m->u.remount.n_segments <= CRP_RPC_MAX_SEGMENTS);
        FUZZ_CHECK((m->u.remount.n_segments == 0) == (m->u.remount.segments == NULL));
        for (size_t i = 0; i < m->u.remount.n_segments; i++)
            check_segment(&m->u.remount.segments[i]);
        break;
    case CRP_RPC_EXIST:
    case CRP_RPC_GET_REPLICA_LIST:
    case CRP_RPC_QUERY_KEY:
        FUZZ_CHECK(m->u.key.key != NULL && strlen(m->u.key.key) <= CRP_RPC_MAX_KEY);
        break;
    case CRP_RPC_BATCH_EXIST:
    case CRP_RPC_BATCH_GET_REPLICA_LIST:
        check_strs(m->u.keys.n_keys, m->u.keys.keys, CRP_RPC_MAX_BATCH, CRP_RPC_MAX_KEY);
        break;
    case CRP_RPC_RELEASE_LEASES:
        check_strs(m->u.leases.n_keys, m->u.leases.keys, CRP_RPC_MAX_BATCH, CRP_RPC_MAX_KEY);
        FUZZ_CHECK((m->u.leases.n_keys == 0) == (m->u.leases.tokens == NULL));
        break;
    case CRP_RPC_PUT_START:
    case CRP_RPC_UPSERT_START:
        FUZZ_CHECK(m->u.put_start.key != NULL);
        check_config(&m->u.put_start.config);
        break;
    case CRP_RPC_BATCH_PUT_START:
    case CRP_RPC_BATCH_UPSERT_START:
        check_strs(m->u.batch_put_start.n_keys, m->u.batch_put_start.keys, CRP_RPC_MAX_BATCH,
                   CRP_RPC_MAX_KEY);
        FUZZ_CHECK((m->u.batch_put_start.n_keys == 0) ==
                   (m->u.batch_put_start.value_sizes == NULL));
        check_config(&m->u.batch_put_start.config);
        break;
    case CRP_RPC_BATCH_PUT_END:
    case CRP_RPC_BATCH_PUT_REVOKE:
    case CRP_RPC_BATCH_UPSERT_END:
    case CRP_RPC_BATCH_UPSERT_REVOKE:
        check_strs(m->u.owner_keys.n_keys, m->u.owner_keys.keys, CRP_RPC_MAX_BATCH,
                   CRP_RPC_MAX_KEY);
        break;
    case CRP_RPC_BATCH_REMOVE:
        check_strs(m->u.batch_remove.n_keys, m->u.batch_remove.keys, CRP_RPC_MAX_BATCH,
                   CRP_RPC_MAX_KEY);
        break;
    case CRP_RPC_BATCH_REPLICA_CLEAR:
        check_strs(m->u.replica_clear.n_keys, m->u.replica_clear.keys, CRP_RPC_MAX_BATCH,
                   CRP_RPC_MAX_KEY);
        FUZZ_CHECK(m->u.replica_clear.segment != NULL);
        FUZZ_CHECK(strlen(m->u.replica_clear.segment) <= CRP_MAX_NAME);
        break;
    case CRP_RPC_REMOVE_BY_REGEX:
        FUZZ_CHECK(m->u.regex.pattern != NULL);
        FUZZ_CHECK(strlen(m->u.regex.pattern) <= CRP_RPC_MAX_REGEX);
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    crp_rpc_req first, second;
    crp_buf enc1 = {0}, enc2 = {0};

    memset(&first, FUZZ_SENTINEL, sizeof(first));
    int rc = crp_rpc_req_decode(data, size, &first);
    if (rc != 0) {
        FUZZ_CHECK(rc == CR_ERR_MALFORMED_FRAME || rc == CR_NOT_SUPPORTED);
        FUZZ_CHECK(fuzz_untouched(&first, sizeof(first)));
        FUZZ_CHECK(cr_last_error_message()[0] != '\0');
        return 0;
    }
    check_invariants(&first);
    FUZZ_CHECK(crp_rpc_req_encode(&first, &enc1) == 0);
    FUZZ_CHECK(enc1.len <= size + 16); /* canonical form is never much longer than the input */
    memset(&second, 0, sizeof(second));
    FUZZ_CHECK(crp_rpc_req_decode(enc1.data, enc1.len, &second) == 0);
    FUZZ_CHECK(second.op == first.op);
    FUZZ_CHECK(crp_rpc_req_encode(&second, &enc2) == 0);
    fuzz_check_same_bytes(&enc1, &enc2);
    crp_rpc_req_clear(&first);
    crp_rpc_req_clear(&second);
    crp_buf_free(&enc1);
    crp_buf_free(&enc2);
    return 0;
}
