/*
 * fuzz_shm.c - libFuzzer target for the same-host fd service's datagrams
 * (crp_shm_request_decode, crp_shm_reply_decode): the first byte picks the
 * decoder (even: request, odd: reply), the rest is the datagram. A failed
 * decode names a decode error and leaves the output untouched; a decoded
 * one re-encodes, decodes to the same fields and encodes canonically.
 */
#include "fuzz_common.h"

static void request(const uint8_t *data, size_t size)
{
    crp_shm_request m, keep;
    memset(&m, FUZZ_SENTINEL, sizeof(m));
    keep = m;
    int rc = crp_shm_request_decode(data, size, &m);
    if (rc != 0) {
        FUZZ_CHECK(rc == CR_ERR_MALFORMED_FRAME);
        FUZZ_CHECK(memcmp(&m, &keep, sizeof(m)) == 0);
        return;
    }
    FUZZ_CHECK(m.op == CRP_SHM_CONTROL_PAGE || m.op == CRP_SHM_REGION || m.op == CRP_SHM_AUTH);
    crp_buf a = {0}, b = {0};
    FUZZ_CHECK(crp_shm_request_encode(&m, &a) == 0);
    crp_shm_request again;
    FUZZ_CHECK(crp_shm_request_decode(a.data, a.len, &again) == 0);
    FUZZ_CHECK(again.op == m.op && again.id == m.id);
    if (m.op == CRP_SHM_AUTH)
        FUZZ_CHECK(memcmp(again.client_nonce, m.client_nonce, CRP_NONCE_SIZE) == 0 &&
                   memcmp(again.mac, m.mac, CRP_MAC_SIZE) == 0);
    FUZZ_CHECK(crp_shm_request_encode(&again, &b) == 0);
    FUZZ_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
    crp_buf_free(&a);
    crp_buf_free(&b);
}

static void reply(const uint8_t *data, size_t size)
{
    crp_shm_reply m, keep;
    memset(&m, FUZZ_SENTINEL, sizeof(m));
    keep = m;
    int rc = crp_shm_reply_decode(data, size, &m);
    if (rc != 0) {
        FUZZ_CHECK(rc == CR_ERR_MALFORMED_FRAME);
        FUZZ_CHECK(memcmp(&m, &keep, sizeof(m)) == 0);
        return;
    }
    crp_buf a = {0}, b = {0};
    FUZZ_CHECK(crp_shm_reply_encode(&m, &a) == 0);
    crp_shm_reply again;
    FUZZ_CHECK(crp_shm_reply_decode(a.data, a.len, &again) == 0);
    FUZZ_CHECK(again.status == m.status && again.size == m.size && again.has_nonce == m.has_nonce);
    if (m.has_nonce)
        FUZZ_CHECK(again.auth == m.auth && memcmp(again.nonce, m.nonce, CRP_NONCE_SIZE) == 0);
    FUZZ_CHECK(crp_shm_reply_encode(&again, &b) == 0);
    FUZZ_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
    crp_buf_free(&a);
    crp_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] % 2 == 0)
        request(data + 1, size - 1);
    else
        reply(data + 1, size - 1);
    return 0;
}
