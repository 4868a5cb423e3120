/*
 * dispatch.h - turning one decoded RPC request into a call on the master
 * service and a reply. Transport-free: the RPC server decodes frames, calls
 * crk_dispatch, encodes the reply and frees the scratch.
 */
#ifndef CRESCENT_MASTER_DISPATCH_H
#define CRESCENT_MASTER_DISPATCH_H

#include <stdint.h>

#include "master/service.h"
#include "proto/rpc.h"

/*
 * Memory a reply points into: a bump arena. Valid until crk_scratch_reset or
 * crk_scratch_free. An I/O thread keeps one scratch for all the requests it
 * serves and resets it after each reply is encoded, so a request costs no
 * malloc once the arena has grown to the thread's usual reply size.
 * Zero-initialise before first use; not thread-safe (one owner thread).
 */
typedef struct crk_scratch_block crk_scratch_block;
typedef struct crk_scratch {
    crk_scratch_block *head; /* block being carved; older blocks follow */
} crk_scratch;

/* Forget every allocation; keeps the largest block for the next request. */
void crk_scratch_reset(crk_scratch *s);
/* Free everything; the scratch is empty (and reusable) afterwards. */
void crk_scratch_free(crk_scratch *s);

/* What the server tells the dispatcher about itself. */
typedef struct crk_server_info {
    uint64_t view_version; /* changes when the master restarts */
    const char *software;  /* "crescent-master 0.1.0" */
} crk_server_info;

/**
 * Execute req against the service at now_ms and fill *resp (op, status,
 * message and the reply shape). Never fails as a call: every outcome,
 * including bad parameters, is a status in the reply. Arrays and strings in
 * *resp live in `scratch` (or in req) until the caller frees them.
 * Thread-safe as the service is.
 */
void crk_dispatch(crk_service *s, const crk_server_info *info, const crp_rpc_req *req,
                  uint64_t now_ms, crp_rpc_resp *resp, crk_scratch *scratch);

#endif
