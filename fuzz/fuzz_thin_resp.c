/*
 * fuzz_thin_resp.c - libFuzzer target for crp_thin_resp_decode (the
 * replies a thin client decodes from crescent-client).
 *
 * A failure must be a decode status and leave the output untouched. A
 * success must carry only the fields its op's reply may carry, a status
 * that is 0 or negative, bounded arrays whose pointers match their counts,
 * replica ranges that do not overflow, and must re-encode, decode again
 * and re-encode to the very same bytes.
 */
#include "fuzz_common.h"
#include "proto/thin.h"

static void check_invariants(const crp_thin_resp *m)
{
    FUZZ_CHECK(crp_thin_op_valid(m->op));
    FUZZ_CHECK(m->status <= 0);
    FUZZ_CHECK((m->fields & ~crp_thin_resp_allowed(m->op)) == 0);
    FUZZ_CHECK(m->message == NULL || strlen(m->message) <= CRP_THIN_MAX_MSG);
    FUZZ_CHECK(m->n_results <= CRP_THIN_MAX_KEYS && (m->n_results == 0) == (m->results == NULL));
    FUZZ_CHECK(m->n_vals <= CRP_THIN_MAX_EXTENTS && (m->n_vals == 0) == (m->vals == NULL));
    FUZZ_CHECK(m->n_names <= CRP_THIN_MAX_NAMES && (m->n_names == 0) == (m->names == NULL));
    FUZZ_CHECK(m->n_reps <= CRP_THIN_MAX_REPLICAS && (m->n_reps == 0) == (m->reps == NULL));
    for (size_t i = 0; i < m->n_reps; i++) {
        FUZZ_CHECK(m->reps[i].segment != NULL);
        FUZZ_CHECK(m->reps[i].addr <= UINT64_MAX - m->reps[i].size);
    }
    if (m->fields & CRP_THIN_R_SESSION)
        FUZZ_CHECK(m->segment != NULL && strlen(m->segment) <= CRP_MAX_NAME);
}

/* A round trip keeps op and fields (the rest is checked by the bytes). */
static void same_op(const crp_thin_resp *a, const crp_thin_resp *b)
{
    FUZZ_CHECK(b->op == a->op && b->fields == a->fields);
}

FUZZ_ROUNDTRIP_TARGET(crp_thin_resp, crp_thin_resp_decode, crp_thin_resp_encode,
                      crp_thin_resp_clear, check_invariants, same_op, 16, 1)
