/*
 * fuzz_rpc_resp.c - libFuzzer target for crp_rpc_resp_decode (every opcode).
 *
 * Same contract as fuzz_rpc_req.c: failures are decode statuses with the
 * output untouched; successes keep their invariants (status <= 0, payload
 * empty on error except SERVICE_READY, bounded arrays, per-key results with
 * replicas only when their status is 0) and re-encode canonically.
 */
#include "fuzz_common.h"
#include "proto/rpc.h"

static void check_replicas(size_t n, const crp_rpc_replica *r)
{
    FUZZ_CHECK(n <= CRP_RPC_MAX_REPLICAS);
    FUZZ_CHECK((n == 0) == (r == NULL));
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(r[i].segment != NULL && strlen(r[i].segment) <= CRP_MAX_NAME);
        FUZZ_CHECK(r[i].addr <= UINT64_MAX - r[i].size);
        FUZZ_CHECK(r[i].status <= CRP_RPC_REPLICA_FAILED);
    }
}

static void check_results(size_t n, const crp_rpc_key_result *r)
{
    FUZZ_CHECK(n <= CRP_RPC_MAX_BATCH);
    FUZZ_CHECK((n == 0) == (r == NULL));
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(r[i].status <= 0);
        if (r[i].status != 0)
            FUZZ_CHECK(r[i].n_replicas == 0 && r[i].replicas == NULL);
        check_replicas(r[i].n_replicas, r[i].replicas);
    }
}

static int all_zero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return 0;
    return 1;
}

static void check_invariants(const crp_rpc_resp *m)
{
    FUZZ_CHECK(crp_rpc_op_valid(m->op));
    FUZZ_CHECK(m->status <= 0);
    FUZZ_CHECK(m->message == NULL || strlen(m->message) <= CRP_RPC_MAX_MSG);
    if (m->op == CRP_RPC_SERVICE_READY) {
        FUZZ_CHECK(m->u.hello.software != NULL);
        return;
    }
    if (m->status != 0) {
        FUZZ_CHECK(all_zero(&m->u, sizeof(m->u)));
        return;
    }
    switch (m->op) {
    case CRP_RPC_PING:
        FUZZ_CHECK(m->u.ping.client_status <= CRP_RPC_CLIENT_NEED_REMOUNT);
        break;
    case CRP_RPC_GET_REPLICA_LIST:
        check_replicas(m->u.get.n_replicas, m->u.get.replicas);
        break;
    case CRP_RPC_PUT_START:
    case CRP_RPC_UPSERT_START:
        check_replicas(m->u.alloc.n_replicas, m->u.alloc.replicas);
        break;
    case CRP_RPC_BATCH_GET_REPLICA_LIST:
        check_results(m->u.batch_get.n, m->u.batch_get.results);
        break;
    case CRP_RPC_BATCH_PUT_START:
    case CRP_RPC_BATCH_UPSERT_START:
        check_results(m->u.batch_alloc.n, m->u.batch_alloc.results);
        break;
    case CRP_RPC_BATCH_EXIST:
    case CRP_RPC_BATCH_PUT_END:
    case CRP_RPC_BATCH_PUT_REVOKE:
    case CRP_RPC_BATCH_UPSERT_END:
    case CRP_RPC_BATCH_UPSERT_REVOKE:
    case CRP_RPC_BATCH_REMOVE:
        FUZZ_CHECK(m->u.statuses.n <= CRP_RPC_MAX_BATCH);
        FUZZ_CHECK((m->u.statuses.n == 0) == (m->u.statuses.results == NULL));
        break;
    case CRP_RPC_GET_ALL_SEGMENTS:
        FUZZ_CHECK(m->u.names.n_names <= CRP_RPC_MAX_SEGMENTS);
        for (size_t i = 0; i < m->u.names.n_names; i++)
            FUZZ_CHECK(m->u.names.names[i] != NULL);
        break;
    case CRP_RPC_QUERY_SEGMENT:
        FUZZ_CHECK(m->u.segment_info.segment.name != NULL);
        FUZZ_CHECK(m->u.segment_info.segment.size > 0);
        break;
    case CRP_RPC_QUERY_KEY:
        check_replicas(m->u.key_info.n_replicas, m->u.key_info.replicas);
        break;
    default:
        break;
    }
}

/* A round trip keeps op and status (the rest is checked by the bytes). */
static void same_op(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    FUZZ_CHECK(b->op == a->op && b->status == a->status);
}

FUZZ_ROUNDTRIP_TARGET(crp_rpc_resp, crp_rpc_resp_decode, crp_rpc_resp_encode, crp_rpc_resp_clear,
                      check_invariants, same_op, SIZE_MAX, 1)
