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
    /* The ends' grant key ("gk"): only on PUT_END / UPSERT_END, bounded like a key. */
    if (m->grant_key != NULL)
        FUZZ_CHECK((m->op == CRP_RPC_PUT_END || m->op == CRP_RPC_UPSERT_END) &&
                   strlen(m->grant_key) <= CRP_RPC_MAX_KEY);
}

/* A round trip keeps the op (the rest is checked by the bytes). */
static void same_op(const crp_rpc_req *a, const crp_rpc_req *b)
{
    FUZZ_CHECK(b->op == a->op);
}

FUZZ_ROUNDTRIP_TARGET(crp_rpc_req, crp_rpc_req_decode, crp_rpc_req_encode, crp_rpc_req_clear,
                      check_invariants, same_op, 16, 1)
