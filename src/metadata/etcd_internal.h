/*
 * etcd_internal.h - what the etcd client's files (etcd_client.c, the kv and
 * txn calls; etcd_lease.c; etcd_watch.c) share: the client itself and the
 * one request path with member failover.
 *
 * Threading: every field is set at open and read-only afterwards except
 * `preferred` (atomic) and the lease list (leases_lock).
 */
#ifndef CRESCENT_METADATA_ETCD_INTERNAL_H
#define CRESCENT_METADATA_ETCD_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <jansson.h>

#include "metadata/curl_util.h"
#include "metadata/etcd.h"

struct crm_etcd_lease;

struct crm_etcd {
    crm_etcd_endpoints eps;
    char member[CRM_ETCD_MAX_ENDPOINTS][CRB_HOST_MAX + 8];    /* "host:port" for messages */
    char base_url[CRM_ETCD_MAX_ENDPOINTS][CRB_HOST_MAX + 16]; /* "http://host:port" */
    atomic_size_t preferred;                                  /* the member that answered last */
    int request_ms;
    int connect_ms;
    size_t max_reply;
    crm_curl_pool pool;
    pthread_mutex_t leases_lock;
    struct crm_etcd_lease *leases; /* still held, for crm_etcd_close */
};

/* The outcome of one call that reached a member. */
typedef struct etcd_reply {
    crm_curl_body body; /* the reply's body; owned, free(body.data) */
    long http_status;
} etcd_reply;

/*
 * POST `json` (consumed) to `path` ("/v3/kv/range"), trying members from the
 * preferred one until one answers or deadline_ms (crb_now_ms clock) passes.
 * `what` names the call in messages ("range 'key'"). Returns 0 with a 200
 * reply in *reply; a member's error reply becomes CR_ETCD_OPERATION_ERROR
 * (*grpc_code, optional, tells which: e.g. CRM_GRPC_NOT_FOUND), every member
 * failing CR_ERR_METADATA_UNAVAILABLE.
 */
int crm_etcd_call(crm_etcd *c, const char *path, json_t *json, uint64_t deadline_ms,
                  const char *what, etcd_reply *reply, int *grpc_code);

/* Lease bookkeeping for crm_etcd_close (etcd_lease.c). */
void crm_etcd_leases_release_all(crm_etcd *c);

#endif
