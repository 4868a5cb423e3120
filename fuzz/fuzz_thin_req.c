/*
 * fuzz_thin_req.c - libFuzzer target for crp_thin_req_decode (every op of
 * the thin-client RPC that crescent-client decodes from its clients).
 *
 * A failure must be a decode status (malformed, or not supported for an
 * unknown op) and leave the output untouched. A success must satisfy the
 * invariants the daemon relies on before it touches memory: the op's
 * required fields present and no foreign ones, counts matching pointers,
 * one extent count per key summing to the extents, one object offset per
 * extent, no (offset, length) or region range that overflows, flags and
 * descriptor counts in range; then it must re-encode, decode again and
 * re-encode to the very same bytes.
 */
#include "fuzz_common.h"
#include "proto/thin.h"

static void check_invariants(const crp_thin_req *m)
{
    FUZZ_CHECK(crp_thin_op_valid(m->op));
    uint32_t req = crp_thin_req_required(m->op), opt = crp_thin_req_optional(m->op);
    FUZZ_CHECK((m->fields & req) == req);
    FUZZ_CHECK((m->fields & ~(req | opt)) == 0);
    if (m->fields & CRP_THIN_F_KEYS) {
        FUZZ_CHECK(m->n_keys <= CRP_THIN_MAX_KEYS);
        FUZZ_CHECK((m->n_keys == 0) == (m->keys == NULL));
        for (size_t i = 0; i < m->n_keys; i++)
            FUZZ_CHECK(m->keys[i] != NULL && strlen(m->keys[i]) <= CRP_THIN_MAX_KEY);
    }
    if (m->fields & CRP_THIN_F_EXT) {
        uint64_t sum = 0;
        FUZZ_CHECK(m->n_ext <= CRP_THIN_MAX_EXTENTS);
        FUZZ_CHECK((m->n_keys == 0) == (m->counts == NULL));
        for (size_t i = 0; i < m->n_keys; i++)
            sum += m->counts[i];
        FUZZ_CHECK(sum == m->n_ext);
        for (size_t i = 0; i < m->n_ext; i++)
            FUZZ_CHECK(m->ext[i].offset <= UINT64_MAX - m->ext[i].len);
    }
    if (m->fields & CRP_THIN_F_OFFS)
        FUZZ_CHECK((m->n_ext == 0) == (m->offsets == NULL));
    if (m->fields & CRP_THIN_F_VALS)
        FUZZ_CHECK(m->n_vals <= CRP_THIN_MAX_EXTENTS && (m->n_vals == 0) == (m->vals == NULL));
    if (m->fields & CRP_THIN_F_FLAGS)
        FUZZ_CHECK((m->flags & ~CRP_THIN_FLAGS_ALL) == 0);
    if (m->fields & CRP_THIN_F_TEXT)
        FUZZ_CHECK(m->text != NULL && strlen(m->text) <= CRP_THIN_MAX_TEXT);
    if (m->fields & CRP_THIN_F_REGION)
        FUZZ_CHECK(m->len > 0 && m->addr <= UINT64_MAX - m->len);
    if (m->fields & CRP_THIN_F_NFD)
        FUZZ_CHECK(m->n_fds <= CRP_THIN_MAX_FDS);
    if (m->fields & CRP_THIN_F_TENANT)
        FUZZ_CHECK(m->tenant != NULL && strlen(m->tenant) <= CRP_THIN_MAX_TENANT);
    if (m->fields & CRP_THIN_F_CFG) {
        FUZZ_CHECK(m->cfg.soft_pin_action <= CRP_RPC_SOFT_PIN_DISABLE);
        FUZZ_CHECK(m->cfg.n_preferred <= CRP_RPC_MAX_PREFERRED);
    }
}

/* A round trip keeps op and fields (the rest is checked by the bytes). */
static void same_op(const crp_thin_req *a, const crp_thin_req *b)
{
    FUZZ_CHECK(b->op == a->op && b->fields == a->fields);
}

FUZZ_ROUNDTRIP_TARGET(crp_thin_req, crp_thin_req_decode, crp_thin_req_encode, crp_thin_req_clear,
                      check_invariants, same_op, 16, 1)
