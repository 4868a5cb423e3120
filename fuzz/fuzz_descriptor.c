/*
 * fuzz_descriptor.c - libFuzzer target for crp_descriptor_decode.
 *
 * Decode arbitrary bytes; a success must survive encode -> decode with the
 * same fields and re-encode to the same bytes; a failure must leave the
 * output untouched (see fuzz_common.h).
 */
#include "fuzz_common.h"

static void check_equal(const crp_descriptor *a, const crp_descriptor *b)
{
    FUZZ_CHECK(a->name != NULL && fuzz_str_eq(a->name, b->name));
    FUZZ_CHECK(a->host_id != NULL && fuzz_str_eq(a->host_id, b->host_id));
    FUZZ_CHECK(a->instance == b->instance);
    FUZZ_CHECK(a->version == b->version);
    FUZZ_CHECK(a->n_endpoints == b->n_endpoints);
    FUZZ_CHECK(a->n_endpoints <= CRP_MAX_ENDPOINTS);
    FUZZ_CHECK((a->n_endpoints == 0) == (a->endpoints == NULL));
    for (size_t i = 0; i < a->n_endpoints; i++) {
        FUZZ_CHECK(fuzz_str_eq(a->endpoints[i].transport, b->endpoints[i].transport));
        FUZZ_CHECK(a->endpoints[i].address_len == b->endpoints[i].address_len);
        FUZZ_CHECK(a->endpoints[i].address_len >= 1 &&
                   a->endpoints[i].address_len <= CRP_MAX_ENDPOINT);
        FUZZ_CHECK(memcmp(a->endpoints[i].address, b->endpoints[i].address,
                          a->endpoints[i].address_len) == 0);
        FUZZ_CHECK(a->endpoints[i].transport != NULL && a->endpoints[i].address != NULL);
    }
    FUZZ_CHECK(a->n_buffers == b->n_buffers);
    FUZZ_CHECK(a->n_buffers <= CRP_MAX_BUFFERS);
    FUZZ_CHECK((a->n_buffers == 0) == (a->buffers == NULL));
    for (size_t i = 0; i < a->n_buffers; i++) {
        const crp_buffer_desc *x = &a->buffers[i], *y = &b->buffers[i];
        FUZZ_CHECK(x->addr == y->addr);
        FUZZ_CHECK(x->length == y->length);
        FUZZ_CHECK(x->length != 0 && x->addr <= UINT64_MAX - x->length);
        FUZZ_CHECK(x->kind == y->kind);
        FUZZ_CHECK(x->device == y->device);
        FUZZ_CHECK(x->remote_accessible == y->remote_accessible);
        FUZZ_CHECK(x->n_blobs == y->n_blobs && x->n_blobs <= CRP_MAX_BLOBS);
        FUZZ_CHECK((x->n_blobs == 0) == (x->blobs == NULL));
        for (size_t j = 0; j < x->n_blobs; j++) {
            FUZZ_CHECK(fuzz_str_eq(x->blobs[j].transport, y->blobs[j].transport));
            FUZZ_CHECK(x->blobs[j].len == y->blobs[j].len);
            FUZZ_CHECK(x->blobs[j].len >= 1 && x->blobs[j].len <= CRP_MAX_BLOB);
            FUZZ_CHECK(memcmp(x->blobs[j].data, y->blobs[j].data, x->blobs[j].len) == 0);
        }
    }
}

FUZZ_ROUNDTRIP_TARGET(crp_descriptor, crp_descriptor_decode, crp_descriptor_encode,
                      crp_descriptor_clear, FUZZ_NO_CHECK, check_equal, SIZE_MAX, 0)
