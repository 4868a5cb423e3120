/*
 * fuzz_offload.c - libFuzzer target for crp_off_decode (the disk tier's
 * OFFLOAD_HEARTBEAT body, proto/offload.h).
 *
 * A failure must be a decode status and leave the output untouched; a
 * success must satisfy the bounds the master and the holder rely on, and
 * re-encode, decode and re-encode to the same bytes.
 */
#include "fuzz_common.h"
#include "proto/offload.h"

/* What a decoded message may hold. */
static void check_invariants(const crp_off_msg *m)
{
    FUZZ_CHECK(m->segment != NULL && strlen(m->segment) <= CRP_MAX_NAME);
    FUZZ_CHECK(m->n_stats <= CRP_OFF_MAX_STATS && m->n_items <= CRP_OFF_MAX_ITEMS);
    FUZZ_CHECK((m->n_items == 0) == (m->items == NULL));
    for (size_t i = 0; i < m->n_items; i++) {
        const crp_off_item *it = &m->items[i];
        FUZZ_CHECK(it->kind >= CRP_OFF_OFFLOAD && it->kind <= CRP_OFF_UNSTAGE);
        FUZZ_CHECK(it->key != NULL && it->key[0] != '\0' && strlen(it->key) <= CRP_OFF_MAX_KEY);
        FUZZ_CHECK(it->status <= 0);
    }
}

FUZZ_ROUNDTRIP_TARGET(crp_off_msg, crp_off_decode, crp_off_encode, crp_off_clear, check_invariants,
                      FUZZ_NO_SAME, SIZE_MAX, 0)
