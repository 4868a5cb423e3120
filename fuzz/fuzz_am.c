/*
 * fuzz_am.c - libFuzzer target for the UCX active-message headers
 * (crp_am_req_decode, crp_am_reply_decode): the first CRP_AM_REQ_SIZE bytes
 * (or fewer) are a request header, the rest a reply header. A decoded
 * header re-encodes to exactly its input; a failed decode leaves the output
 * untouched and names its error.
 */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t req_len = size < CRP_AM_REQ_SIZE ? size : CRP_AM_REQ_SIZE;
    crp_am_req req, keep_req;
    memset(&req, FUZZ_SENTINEL, sizeof(req));
    keep_req = req;
    int rc = crp_am_req_decode(data, req_len, &req);
    if (rc == 0) {
        uint8_t again[CRP_AM_REQ_SIZE];
        crp_am_req_encode(&req, again);
        FUZZ_CHECK(req_len == CRP_AM_REQ_SIZE && memcmp(again, data, CRP_AM_REQ_SIZE) == 0);
        FUZZ_CHECK(req.length > 0 && req.addr <= UINT64_MAX - req.length && req.op <= 1);
    } else {
        FUZZ_CHECK(rc == CR_ERR_MALFORMED_FRAME);
        FUZZ_CHECK(memcmp(&req, &keep_req, sizeof(req)) == 0);
    }
    const uint8_t *rep_data = data + req_len;
    size_t rep_len = size - req_len;
    crp_am_reply rep, keep_rep;
    memset(&rep, FUZZ_SENTINEL, sizeof(rep));
    keep_rep = rep;
    rc = crp_am_reply_decode(rep_data, rep_len, &rep);
    if (rc == 0) {
        uint8_t again[CRP_AM_REPLY_SIZE];
        crp_am_reply_encode(&rep, again);
        FUZZ_CHECK(rep_len == CRP_AM_REPLY_SIZE && memcmp(again, rep_data, CRP_AM_REPLY_SIZE) == 0);
        FUZZ_CHECK(rep.status <= 0);
    } else {
        FUZZ_CHECK(rc == CR_ERR_MALFORMED_FRAME);
        FUZZ_CHECK(memcmp(&rep, &keep_rep, sizeof(rep)) == 0);
    }
    return 0;
}
