/*
 * dispatch.c - maps RPC requests (proto/rpc.h) onto the master service
 * (service.h) and its results onto replies.
 *
 * Batches are executed in chunks of CHUNK keys so the per-key replica lists
 * the service fills (a few KiB each) never need more than a bounded amount
 * of memory, whatever the batch size on the wire.
 */
#include "master/dispatch.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "master/auth.h"
#include "master/ha.h"
#include "master/offload.h"
#include "master/tenants.h"

#define CHUNK 256

#define SCRATCH_BLOCK (64 * 1024)
#define SCRATCH_KEEP  (1024 * 1024) /* largest block kept across resets */

struct crk_scratch_block {
    crk_scratch_block *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

void crk_scratch_free(crk_scratch *s)
{
    while (s->head != NULL) {
        crk_scratch_block *b = s->head;
        s->head = b->next;
        free(b);
    }
}

void crk_scratch_reset(crk_scratch *s)
{
    crk_scratch_block *keep = NULL;
    while (s->head != NULL) {
        crk_scratch_block *b = s->head;
        s->head = b->next;
        if (keep == NULL || b->cap > keep->cap) {
            free(keep);
            keep = b;
        } else {
            free(b);
        }
    }
    if (keep != NULL && keep->cap > SCRATCH_KEEP) {
        free(keep);
        keep = NULL;
    }
    if (keep != NULL) {
        keep->used = 0;
        keep->next = NULL;
    }
    s->head = keep;
}

/* n*size bytes from the arena, 16-byte aligned, not zeroed; NULL on failure. */
static void *scratch_alloc_raw(crk_scratch *s, size_t n, size_t size)
{
    if (size != 0 && n > (SIZE_MAX - 64) / size)
        return NULL;
    size_t bytes = (n * size + 15) & ~(size_t)15;
    crk_scratch_block *b = s->head;
    if (b == NULL || b->cap - b->used < bytes) {
        size_t cap = bytes > SCRATCH_BLOCK ? bytes : SCRATCH_BLOCK;
        crk_scratch_block *nb = malloc(sizeof(*nb) + cap);
        if (nb == NULL)
            return NULL;
        nb->cap = cap;
        nb->used = 0;
        /* Keep carving the old head when the new block is a one-off large one. */
        if (b != NULL && cap == bytes && b->cap - b->used >= 64) {
            nb->next = b->next;
            b->next = nb;
            nb->used = bytes;
            return nb->data;
        }
        nb->next = b;
        s->head = b = nb;
    }
    void *p = b->data + b->used;
    b->used += bytes;
    return p;
}

/* Zeroed n*size bytes from the arena; NULL on failure. */
static void *scratch_alloc(crk_scratch *s, size_t n, size_t size)
{
    void *p = scratch_alloc_raw(s, n, size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

static crk_client_id client_of(crp_rpc_uuid u)
{
    return (crk_client_id){u.hi, u.lo};
}

/*
 * The service's placement config for a request. prefer_same_node (Mooncake's
 * prefer_alloc_in_same_node) becomes "the requesting client's own segments
 * first" when the caller named no preferred segments itself.
 */
static crk_replicate_config config_of(crk_service *s, crk_scratch *sc, crk_client_id client,
                                      const crp_rpc_replica_config *c)
{
    crk_replicate_config cfg = {
        .replica_num = c->replica_num,
        .hard_pin = c->hard_pin,
        .soft_pin_action = c->soft_pin_action,
        .soft_pin_ttl_ms = c->has_soft_pin_ttl ? c->soft_pin_ttl_ms : 0,
        .preferred_segments = (const char *const *)c->preferred_segments,
        .n_preferred = c->n_preferred,
    };
    if (!c->prefer_same_node || c->n_preferred > 0)
        return cfg;
    size_t total = 0;
    crk_list_segments(s, NULL, 0, &total);
    crk_segment_info *all = scratch_alloc(sc, total, sizeof(*all));
    const char **own = scratch_alloc(sc, total, sizeof(*own));
    if (all == NULL || own == NULL)
        return cfg;
    crk_list_segments(s, all, total, &total);
    size_t n = 0;
    for (size_t i = 0; i < total; i++)
        if (all[i].owner.hi == client.hi && all[i].owner.lo == client.lo)
            own[n++] = all[i].name;
    cfg.preferred_segments = own;
    cfg.n_preferred = n;
    return cfg;
}

/* "ow" of a put start: the write is owned by peer's connection (tagged at
 * its first such write). In-process callers (no peer) own nothing. */
static void own_write(crk_service *s, crk_peer *peer, uint64_t owned_ms, crk_replicate_config *cfg)
{
    if (owned_ms == 0 || peer == NULL)
        return;
    if (peer->conn_tag == 0)
        peer->conn_tag = crk_conn_tag(s);
    cfg->owner_conn = peer->conn_tag;
    cfg->owned_ms = owned_ms;
}

void crk_peer_closed(crk_service *s, crk_peer *peer, uint64_t now_ms)
{
    if (peer != NULL && peer->conn_tag != 0)
        (void)crk_revoke_conn_writes(s, peer->conn_tag, now_ms);
    if (peer != NULL && peer->bound) {
        crk_client_linked(s, client_of(peer->client_id), false);
        peer->bound = false; /* (a peer is closed once; this makes a second call harmless) */
    }
}

/* Copy a service replica list into reply replicas (segment names too). */
static int replicas_of(crk_scratch *s, const crk_replica_list *l, uint8_t status,
                       crp_rpc_replica **out, size_t *n_out)
{
    crp_rpc_replica *r = scratch_alloc(s, l->n, sizeof(*r));
    if (r == NULL)
        return CR_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < l->n; i++) {
        size_t nl = strlen(l->r[i].segment) + 1;
        char *name = scratch_alloc_raw(s, nl, 1);
        if (name == NULL)
            return CR_ERR_NO_MEMORY;
        memcpy(name, l->r[i].segment, nl);
        r[i] = (crp_rpc_replica){name, l->r[i].address, l->r[i].size, l->r[i].mount_epoch, status};
    }
    *out = r;
    *n_out = l->n;
    return 0;
}

typedef int (*batch_fn)(crk_service *s, crk_client_id c, const char *const *keys,
                        const uint64_t *sizes, size_t n, const crk_replicate_config *cfg,
                        uint64_t now, int *results, crk_replica_list *lists, bool continued);

static int do_batch_put_start(crk_service *s, crk_client_id c, const char *const *keys,
                              const uint64_t *sizes, size_t n, const crk_replicate_config *cfg,
                              uint64_t now, int *results, crk_replica_list *lists, bool continued)
{
    return crk_batch_put_start(s, c, keys, sizes, n, cfg, now, results, lists, continued);
}

static int do_batch_upsert_start(crk_service *s, crk_client_id c, const char *const *keys,
                                 const uint64_t *sizes, size_t n, const crk_replicate_config *cfg,
                                 uint64_t now, int *results, crk_replica_list *lists,
                                 bool continued)
{
    return crk_batch_upsert_start(s, c, keys, sizes, n, cfg, now, results, lists, continued);
}

static int do_batch_get(crk_service *s, crk_client_id c, const char *const *keys,
                        const uint64_t *sizes, size_t n, const crk_replicate_config *cfg,
                        uint64_t now, int *results, crk_replica_list *lists, bool continued)
{
    return crk_batch_get_replica_list(s, keys, n, now, results, lists, continued);
}

/* Run a batch that returns replica lists, chunk by chunk. */
static int batch_with_lists(crk_service *s, crk_scratch *sc, batch_fn fn, crk_client_id client,
                            char **keys, const uint64_t *sizes, size_t n,
                            const crk_replicate_config *cfg, uint64_t now, uint8_t replica_status,
                            crp_rpc_key_result **out, uint64_t *lease_ttl)
{
    crp_rpc_key_result *res = scratch_alloc(sc, n, sizeof(*res));
    size_t chunk = n < CHUNK ? n : CHUNK;
    int *st = scratch_alloc_raw(sc, chunk ? chunk : 1, sizeof(int));
    crk_replica_list *lists = scratch_alloc_raw(sc, chunk ? chunk : 1, sizeof(*lists));
    if (res == NULL || st == NULL || lists == NULL)
        return CR_ERR_NO_MEMORY;
    int rc = 0;
    for (size_t off = 0; off < n && rc == 0; off += CHUNK) {
        size_t m = n - off < CHUNK ? n - off : CHUNK;
        rc = fn(s, client, (const char *const *)keys + off, sizes ? sizes + off : NULL, m, cfg, now,
                st, lists, off > 0);
        for (size_t i = 0; i < m && rc == 0; i++) {
            res[off + i].status = st[i];
            if (st[i] == 0) {
                rc = replicas_of(sc, &lists[i], replica_status, &res[off + i].replicas,
                                 &res[off + i].n_replicas);
                res[off + i].lease_token = lease_ttl != NULL ? lists[i].lease_token : 0;
                if (lease_ttl != NULL && lists[i].lease_ttl_ms > 0)
                    *lease_ttl = lists[i].lease_ttl_ms;
            }
        }
    }
    *out = res;
    return rc;
}

/* A batch op answered with one status per key; conn: the connection the request came on
 * (crk_peer.conn_tag, 0 if none). */
typedef int (*statuses_fn)(crk_service *s, crk_client_id c, uint64_t conn, const char *const *keys,
                           size_t n, bool force, uint64_t now, int *results);

static int do_exist(crk_service *s, crk_client_id c, uint64_t conn, const char *const *k, size_t n,
                    bool f, uint64_t now, int *r)
{
    return crk_batch_exist(s, k, n, now, r);
}
static int do_end(crk_service *s, crk_client_id c, uint64_t conn, const char *const *k, size_t n,
                  bool f, uint64_t now, int *r)
{
    return crk_batch_put_end(s, c, k, n, now, r);
}
static int do_end_ahead(crk_service *s, crk_client_id c, uint64_t conn, const char *const *k,
                        size_t n, bool f, uint64_t now, int *r)
{
    return crk_batch_put_end_ahead(s, c, conn, k, n, now, r);
}
static int do_revoke(crk_service *s, crk_client_id c, uint64_t conn, const char *const *k, size_t n,
                     bool f, uint64_t now, int *r)
{
    return crk_batch_put_revoke(s, c, k, n, now, r);
}
static int do_remove(crk_service *s, crk_client_id c, uint64_t conn, const char *const *k, size_t n,
                     bool f, uint64_t now, int *r)
{
    return crk_batch_remove(s, k, n, f, now, r);
}

static int batch_statuses(crk_service *s, crk_scratch *sc, statuses_fn fn, crk_client_id c,
                          uint64_t conn, char **keys, size_t n, bool force, uint64_t now,
                          crp_rpc_statuses_resp *out)
{
    int32_t *r32 = scratch_alloc(sc, n, sizeof(*r32));
    int *r = malloc((n ? n : 1) * sizeof(int));
    int rc = 0;
    if (r32 == NULL || r == NULL) {
        free(r);
        return CR_ERR_NO_MEMORY;
    }
    rc = fn(s, c, conn, (const char *const *)keys, n, force, now, r);
    for (size_t i = 0; i < n; i++)
        r32[i] = r[i];
    free(r);
    out->n = n;
    out->results = r32;
    return rc;
}

/* The client id a request names, or NULL for ops that name none. */
static const crp_rpc_uuid *named_client(const crp_rpc_req *req)
{
    const __typeof__(req->u) *u = &req->u;
    switch (req->op) {
    case CRP_RPC_SERVICE_READY:
        return &u->hello.client_id;
    case CRP_RPC_PING:
        return &u->client.client_id;
    case CRP_RPC_MOUNT_SEGMENT:
        return &u->mount.client_id;
    case CRP_RPC_REMOUNT_SEGMENT:
        return &u->remount.client_id;
    case CRP_RPC_UNMOUNT_SEGMENT:
        return &u->unmount.client_id;
    case CRP_RPC_PUT_START:
    case CRP_RPC_UPSERT_START:
        return &u->put_start.client_id;
    case CRP_RPC_PUT_END:
    case CRP_RPC_UPSERT_END:
    case CRP_RPC_PUT_REVOKE:
    case CRP_RPC_UPSERT_REVOKE:
        return &u->owner_key.client_id;
    case CRP_RPC_BATCH_PUT_START:
    case CRP_RPC_BATCH_UPSERT_START:
        return &u->batch_put_start.client_id;
    case CRP_RPC_BATCH_PUT_END:
    case CRP_RPC_BATCH_UPSERT_END:
    case CRP_RPC_BATCH_PUT_REVOKE:
    case CRP_RPC_BATCH_UPSERT_REVOKE:
        return &u->owner_keys.client_id;
    case CRP_RPC_BATCH_REPLICA_CLEAR:
        return &u->replica_clear.client_id;
    case CRP_RPC_OFFLOAD_HEARTBEAT:
        return &u->blob.client_id;
    default:
        return NULL;
    }
}

/* Bind peer to the id req names (counted as the client's connection: links.c), or refuse a
 * request for another client. */
static int check_peer(crk_service *s, crk_peer *peer, const crp_rpc_req *req)
{
    const crp_rpc_uuid *id = named_client(req);
    if (peer == NULL || id == NULL || (id->hi == 0 && id->lo == 0))
        return 0; /* the service refuses the zero id itself */
    if (!peer->bound) {
        peer->client_id = *id;
        peer->bound = true;
        crk_client_linked(s, client_of(*id), true);
        return 0;
    }
    if (peer->client_id.hi == id->hi && peer->client_id.lo == id->lo)
        return 0;
    return crb_error(CR_ILLEGAL_CLIENT,
                     "%s: this connection speaks for client %016llx%016llx; a request for "
                     "another client needs its own connection",
                     crp_rpc_op_name(req->op), (unsigned long long)peer->client_id.hi,
                     (unsigned long long)peer->client_id.lo);
}

static int query_segment(crk_service *s, crk_scratch *sc, const crk_peer *peer, const char *name,
                         crp_rpc_segment_info_resp *out)
{
    size_t total = 0;
    crk_list_segments(s, NULL, 0, &total);
    crk_segment_info *all = malloc((total ? total : 1) * sizeof(*all));
    if (all == NULL)
        return CR_ERR_NO_MEMORY;
    crk_list_segments(s, all, total, &total);
    int rc = CR_SEGMENT_NOT_FOUND;
    for (size_t i = 0; i < total; i++) {
        if (strcmp(all[i].name, name) != 0)
            continue;
        size_t nl = strlen(all[i].name) + 1;
        char *copy = scratch_alloc(sc, nl, 1);
        if (copy == NULL) {
            rc = CR_ERR_NO_MEMORY;
            break;
        }
        memcpy(copy, all[i].name, nl);
        out->segment = (crp_rpc_segment){copy, all[i].base, all[i].size, all[i].mount_epoch};
        out->used = all[i].used;
        /* The owner's id is its secret: only the owner's own connection learns it. */
        bool own = peer != NULL && peer->bound && peer->client_id.hi == all[i].owner.hi &&
                   peer->client_id.lo == all[i].owner.lo;
        out->client_id = own ? peer->client_id : (crp_rpc_uuid){0, 0};
        rc = 0;
        break;
    }
    free(all);
    return rc;
}

static int all_segments(crk_service *s, crk_scratch *sc, crp_rpc_names_resp *out)
{
    size_t total = 0;
    crk_list_segments(s, NULL, 0, &total);
    crk_segment_info *all = malloc((total ? total : 1) * sizeof(*all));
    char **names = scratch_alloc(sc, total, sizeof(char *));
    if (all == NULL || names == NULL) {
        free(all);
        return CR_ERR_NO_MEMORY;
    }
    crk_list_segments(s, all, total, &total);
    int rc = 0;
    for (size_t i = 0; i < total && rc == 0; i++) {
        size_t nl = strlen(all[i].name) + 1;
        names[i] = scratch_alloc(sc, nl, 1);
        if (names[i] == NULL)
            rc = CR_ERR_NO_MEMORY;
        else
            memcpy(names[i], all[i].name, nl);
    }
    free(all);
    out->n_names = total;
    out->names = names;
    return rc;
}

/* --- tenants (master/tenants.h) ------------------------------------------------ */

/* key in the namespace ns (length nl): ns + key; for the default namespace
 * the key itself, or "" (which the service refuses as CR_INVALID_KEY) when
 * it begins with the reserved byte. NULL when out of memory. */
static char *qualified(crk_scratch *sc, const char *ns, size_t nl, char *key)
{
    if (key == NULL)
        return key;
    if (nl == 0)
        return key[0] == CRK_TENANT_MARK ? (char *)"" : key;
    size_t kl = strlen(key);
    char *q = scratch_alloc_raw(sc, nl + kl + 1, 1);
    if (q != NULL) {
        memcpy(q, ns, nl);
        memcpy(q + nl, key, kl + 1);
    }
    return q;
}

static int qualify_all(crk_scratch *sc, const char *ns, size_t nl, char ***keys, size_t n)
{
    bool change = nl > 0;
    for (size_t i = 0; i < n && !change; i++)
        change = (*keys)[i] != NULL && (*keys)[i][0] == CRK_TENANT_MARK;
    if (!change)
        return 0;
    char **q = scratch_alloc(sc, n, sizeof(char *));
    if (q == NULL)
        return CR_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++)
        if ((q[i] = qualified(sc, ns, nl, (*keys)[i])) == NULL)
            return CR_ERR_NO_MEMORY;
    *keys = q;
    return 0;
}

/* *q = req with every key in the namespace of req's tenant, whose prefix
 * goes to ns. 0, CR_INVALID_PARAMS (bad tenant name), CR_ERR_NO_MEMORY. */
static int tenant_view(const crp_rpc_req *req, crk_scratch *sc, char ns[CRK_TENANT_PREFIX + 1],
                       crp_rpc_req *q)
{
    *q = *req;
    int rc = crk_tenant_prefix(req->tenant, ns);
    if (rc < 0)
        return rc;
    size_t nl = strlen(ns);
    __typeof__(q->u) *u = &q->u;
    char **one = NULL;
    switch (req->op) {
    case CRP_RPC_EXIST:
    case CRP_RPC_GET_REPLICA_LIST:
    case CRP_RPC_QUERY_KEY:
        one = &u->key.key;
        break;
    case CRP_RPC_PUT_START:
    case CRP_RPC_UPSERT_START:
        one = &u->put_start.key;
        break;
    case CRP_RPC_PUT_END:
    case CRP_RPC_UPSERT_END:
        if (q->grant_key != NULL && (q->grant_key = qualified(sc, ns, nl, q->grant_key)) == NULL)
            return CR_ERR_NO_MEMORY;
        one = &u->owner_key.key;
        break;
    case CRP_RPC_PUT_REVOKE:
    case CRP_RPC_UPSERT_REVOKE:
        one = &u->owner_key.key;
        break;
    case CRP_RPC_REMOVE:
        one = &u->remove.key;
        break;
    case CRP_RPC_BATCH_EXIST:
    case CRP_RPC_BATCH_GET_REPLICA_LIST:
        return qualify_all(sc, ns, nl, &u->keys.keys, u->keys.n_keys);
    case CRP_RPC_RELEASE_LEASES: /* the reads a get in this tenant was granted */
        return qualify_all(sc, ns, nl, &u->leases.keys, u->leases.n_keys);
    case CRP_RPC_BATCH_PUT_START:
    case CRP_RPC_BATCH_UPSERT_START:
        return qualify_all(sc, ns, nl, &u->batch_put_start.keys, u->batch_put_start.n_keys);
    case CRP_RPC_BATCH_PUT_END:
    case CRP_RPC_BATCH_UPSERT_END:
    case CRP_RPC_BATCH_PUT_REVOKE:
    case CRP_RPC_BATCH_UPSERT_REVOKE:
        return qualify_all(sc, ns, nl, &u->owner_keys.keys, u->owner_keys.n_keys);
    case CRP_RPC_BATCH_REMOVE:
        return qualify_all(sc, ns, nl, &u->batch_remove.keys, u->batch_remove.n_keys);
    case CRP_RPC_BATCH_REPLICA_CLEAR:
        return qualify_all(sc, ns, nl, &u->replica_clear.keys, u->replica_clear.n_keys);
    default:
        return 0;
    }
    *one = qualified(sc, ns, nl, *one);
    return *one != NULL ? 0 : CR_ERR_NO_MEMORY;
}

static uint64_t view_of(const crk_server_info *info)
{
    return info->ha != NULL ? crk_ha_term(info->ha) : info->view_version;
}

void crk_dispatch(crk_service *s, const crk_server_info *info, crk_peer *peer,
                  const crp_rpc_req *req, uint64_t now, crp_rpc_resp *resp, crk_scratch *sc)
{
    memset(resp, 0, sizeof(*resp));
    resp->op = req->op;
    if (peer != NULL)
        peer->durable_seq = 0;
    if (info->ha != NULL) {
        char why[384];
        int refused = crk_ha_gate(info->ha, now, why, sizeof(why));
        if (refused < 0) {
            char *copy = scratch_alloc(sc, strlen(why) + 1, 1);
            if (copy != NULL)
                memcpy(copy, why, strlen(why) + 1);
            resp->status = refused;
            resp->message = copy;
            if (req->op == CRP_RPC_SERVICE_READY) /* its reply shape is kept on errors */
                resp->u.hello = (crp_rpc_hello_resp){.version = CRP_RPC_VERSION,
                                                     .caps = crk_server_caps(info),
                                                     .software = (char *)info->software,
                                                     .view_version = view_of(info)};
            return;
        }
    }
    crp_rpc_req in_tenant;
    char ns[CRK_TENANT_PREFIX + 1];
    int rc = tenant_view(req, sc, ns, &in_tenant);
    if (rc == 0 && req->op == CRP_RPC_REMOVE_BY_REGEX && req->u.regex.pattern == NULL)
        rc = crb_error(CR_INVALID_PARAMS, "remove_by_regex: pattern is NULL");
    if (rc < 0) {
        const char *m = cr_last_error_message();
        char *copy = scratch_alloc(sc, strlen(m) + 1, 1);
        if (copy != NULL)
            memcpy(copy, m, strlen(m) + 1);
        resp->status = rc;
        resp->message = copy;
        return;
    }
    req = &in_tenant;
    const __typeof__(req->u) *u = &req->u;
    rc = crk_auth_check(info, peer, req, resp); /* the shared secret first */
    if (rc == 0)
        rc = check_peer(s, peer, req);
    switch (rc == 0 ? req->op : 0) {
    case 0:
        break; /* refused by check_peer */
    case CRP_RPC_SERVICE_READY:
        rc = crp_rpc_check_version("client", u->hello.version);
        resp->u.hello = (crp_rpc_hello_resp){.version = CRP_RPC_VERSION,
                                             .caps = crk_server_caps(info),
                                             .software = (char *)info->software,
                                             .view_version = view_of(info)};
        if (peer != NULL && peer->local_socket != NULL) {
            resp->u.hello.local_socket = (char *)peer->local_socket;
            resp->u.hello.local_port = peer->local_port;
            resp->u.hello.local_pid = (uint32_t)getpid();
        }
        break;
    case CRP_RPC_PING: {
        crk_heartbeat_info hi = {0};
        rc = crk_heartbeat(s, client_of(u->client.client_id), now, &hi);
        resp->u.ping.client_status =
            hi.status == CRK_CLIENT_NEED_REMOUNT ? CRP_RPC_CLIENT_NEED_REMOUNT : CRP_RPC_CLIENT_OK;
        resp->u.ping.view_version = view_of(info);
        resp->u.ping.fenced_ms = hi.fenced_ms;
        break;
    }
    case CRP_RPC_MOUNT_SEGMENT: {
        const crp_rpc_segment *g = &u->mount.segment;
        crk_segment_spec spec = {g->name, g->base, g->size};
        rc = crk_mount_segment(s, client_of(u->mount.client_id), &spec, now, NULL);
        break;
    }
    case CRP_RPC_REMOUNT_SEGMENT: {
        size_t n = u->remount.n_segments;
        crk_segment_spec *specs = scratch_alloc(sc, n, sizeof(*specs));
        if (specs == NULL) {
            rc = CR_ERR_NO_MEMORY;
            break;
        }
        for (size_t i = 0; i < n; i++)
            specs[i] = (crk_segment_spec){u->remount.segments[i].name, u->remount.segments[i].base,
                                          u->remount.segments[i].size};
        rc = crk_remount_segments(s, client_of(u->remount.client_id), specs, n, now, NULL);
        break;
    }
    case CRP_RPC_UNMOUNT_SEGMENT:
        rc = crk_unmount_segment(s, client_of(u->unmount.client_id), u->unmount.name, now);
        break;
    case CRP_RPC_EXIST:
        rc = crk_exist(s, u->key.key, now);
        resp->u.exist.exists = rc == 1;
        if (rc > 0)
            rc = 0;
        break;
    case CRP_RPC_BATCH_EXIST:
        rc = batch_statuses(s, sc, do_exist, (crk_client_id){0, 0}, 0, u->keys.keys, u->keys.n_keys,
                            false, now, &resp->u.statuses);
        break;
    case CRP_RPC_GET_REPLICA_LIST: {
        crk_replica_list l;
        rc = crk_get_replica_list(s, u->key.key, now, &l);
        if (rc == 0) {
            rc = replicas_of(sc, &l, CRP_RPC_REPLICA_COMPLETE, &resp->u.get.replicas,
                             &resp->u.get.n_replicas);
            resp->u.get.lease_ttl_ms = l.lease_ttl_ms;
            resp->u.get.lease_token = l.lease_token;
            resp->u.get.version = l.version;
        }
        break;
    }
    case CRP_RPC_BATCH_GET_REPLICA_LIST:
        rc = batch_with_lists(s, sc, do_batch_get, (crk_client_id){0, 0}, u->keys.keys, NULL,
                              u->keys.n_keys, NULL, now, CRP_RPC_REPLICA_COMPLETE,
                              &resp->u.batch_get.results, &resp->u.batch_get.lease_ttl_ms);
        resp->u.batch_get.n = u->keys.n_keys;
        break;
    case CRP_RPC_RELEASE_LEASES:
        crk_release_leases(s, (const char *const *)u->leases.keys, u->leases.tokens,
                           u->leases.n_keys, now);
        break;
    case CRP_RPC_PUT_START:
    case CRP_RPC_UPSERT_START: {
        crk_replicate_config cfg =
            config_of(s, sc, client_of(u->put_start.client_id), &u->put_start.config);
        own_write(s, peer, req->owned_ms, &cfg);
        crk_replica_list l;
        crk_client_id c = client_of(u->put_start.client_id);
        rc = req->op == CRP_RPC_PUT_START
                 ? crk_put_start(s, c, u->put_start.key, u->put_start.value_size, &cfg, now, &l)
                 : crk_upsert_start(s, c, u->put_start.key, u->put_start.value_size, &cfg, now, &l);
        if (rc == 0)
            rc = replicas_of(sc, &l, CRP_RPC_REPLICA_PROCESSING, &resp->u.alloc.replicas,
                             &resp->u.alloc.n_replicas);
        break;
    }
    case CRP_RPC_BATCH_PUT_START:
    case CRP_RPC_BATCH_UPSERT_START: {
        crk_replicate_config cfg =
            config_of(s, sc, client_of(u->batch_put_start.client_id), &u->batch_put_start.config);
        own_write(s, peer, req->owned_ms, &cfg);
        rc = batch_with_lists(
            s, sc, req->op == CRP_RPC_BATCH_PUT_START ? do_batch_put_start : do_batch_upsert_start,
            client_of(u->batch_put_start.client_id), u->batch_put_start.keys,
            u->batch_put_start.value_sizes, u->batch_put_start.n_keys, &cfg, now,
            CRP_RPC_REPLICA_PROCESSING, &resp->u.batch_alloc.results, NULL);
        resp->u.batch_alloc.n = u->batch_put_start.n_keys;
        break;
    }
    case CRP_RPC_PUT_END:
    case CRP_RPC_UPSERT_END:
        if (req->commit_ahead && !(crk_server_caps(info) & CRP_RPC_CAP_COMMIT_AHEAD))
            rc = crb_error(CR_NOT_SUPPORTED,
                           "put_end '%s': this master does not commit ahead "
                           "(HA); the grant is untouched",
                           u->owner_key.key);
        else if (req->commit_ahead) /* docs/WIRE.md, "Commit ahead" */
            rc = crk_put_end_ahead(s, client_of(u->owner_key.client_id), u->owner_key.key,
                                   req->grant_key, now, &resp->u.end.version);
        else if (req->grant_key != NULL) /* a put grant (docs/WIRE.md) */
            rc = crk_put_end_granted(s, client_of(u->owner_key.client_id), u->owner_key.key,
                                     req->grant_key, req->op == CRP_RPC_UPSERT_END, now,
                                     &resp->u.end.version);
        else
            rc = crk_put_end_versioned(s, client_of(u->owner_key.client_id), u->owner_key.key, now,
                                       &resp->u.end.version);
        break;
    case CRP_RPC_PUT_REVOKE:
    case CRP_RPC_UPSERT_REVOKE:
        rc = crk_put_revoke(s, client_of(u->owner_key.client_id), u->owner_key.key, now);
        break;
    case CRP_RPC_BATCH_PUT_END:
    case CRP_RPC_BATCH_UPSERT_END:
        if (req->commit_ahead && !(crk_server_caps(info) & CRP_RPC_CAP_BATCH_COMMIT_AHEAD))
            rc = crb_error(CR_NOT_SUPPORTED,
                           "batch_put_end of %zu keys: this master does not commit ahead (HA); "
                           "the writes are untouched",
                           u->owner_keys.n_keys);
        else /* "ca": the keys must be writes owned by this connection (WIRE.md) */
            rc = batch_statuses(s, sc, req->commit_ahead ? do_end_ahead : do_end,
                                client_of(u->owner_keys.client_id),
                                peer != NULL ? peer->conn_tag : 0, u->owner_keys.keys,
                                u->owner_keys.n_keys, false, now, &resp->u.statuses);
        break;
    case CRP_RPC_BATCH_PUT_REVOKE:
    case CRP_RPC_BATCH_UPSERT_REVOKE:
        rc =
            batch_statuses(s, sc, do_revoke, client_of(u->owner_keys.client_id), 0,
                           u->owner_keys.keys, u->owner_keys.n_keys, false, now, &resp->u.statuses);
        break;
    case CRP_RPC_REMOVE:
        rc = crk_remove(s, u->remove.key, u->remove.force, now);
        break;
    case CRP_RPC_REMOVE_BY_REGEX: /* scoped to the tenant (master/tenants.h) */
        rc = crk_remove_in_namespace(s, ns, u->regex.pattern, u->regex.force, now,
                                     &resp->u.count.count);
        break;
    case CRP_RPC_REMOVE_ALL:
        rc = crk_remove_in_namespace(s, ns, NULL, u->force.force, now, &resp->u.count.count);
        break;
    case CRP_RPC_BATCH_REMOVE:
        rc = batch_statuses(s, sc, do_remove, (crk_client_id){0, 0}, 0, u->batch_remove.keys,
                            u->batch_remove.n_keys, u->batch_remove.force, now, &resp->u.statuses);
        break;
    case CRP_RPC_BATCH_REPLICA_CLEAR: {
        const crp_rpc_replica_clear_req *r = &u->replica_clear;
        int32_t *r32 = scratch_alloc(sc, r->n_keys, sizeof(*r32));
        int *st = scratch_alloc_raw(sc, r->n_keys ? r->n_keys : 1, sizeof(int));
        if (r32 == NULL || st == NULL) {
            rc = CR_ERR_NO_MEMORY;
            break;
        }
        rc = crk_batch_replica_clear(s, client_of(r->client_id), (const char *const *)r->keys,
                                     r->n_keys, r->segment, now, st);
        for (size_t i = 0; rc == 0 && i < r->n_keys; i++)
            r32[i] = st[i];
        resp->u.statuses = (crp_rpc_statuses_resp){r->n_keys, r32};
        break;
    }
    case CRP_RPC_GET_ALL_SEGMENTS:
        rc = all_segments(s, sc, &resp->u.names);
        break;
    case CRP_RPC_QUERY_SEGMENT:
        rc = query_segment(s, sc, peer, u->name.name, &resp->u.segment_info);
        break;
    case CRP_RPC_QUERY_KEY: {
        crk_key_info ki;
        rc = crk_query_key(s, u->key.key, now, &ki);
        if (rc == 0 && ki.committing) /* held by the RPC server until its end (WIRE.md) */
            rc = crb_error(CR_ERR_PUT_COMMITTING, "query_key '%s': put committing", u->key.key);
        if (rc == 0) {
            crp_rpc_key_info_resp *k = &resp->u.key_info;
            k->value_size = ki.value_size;
            k->hard_pin = ki.hard_pinned;
            k->lease_ms_left = ki.lease_until_ms > now ? ki.lease_until_ms - now : 0;
            k->soft_pin_ms_left = ki.soft_pin_until_ms > now ? ki.soft_pin_until_ms - now : 0;
            rc = replicas_of(sc, &ki.replicas,
                             ki.complete ? CRP_RPC_REPLICA_COMPLETE : CRP_RPC_REPLICA_PROCESSING,
                             &k->replicas, &k->n_replicas);
        }
        break;
    }
    case CRP_RPC_OFFLOAD_HEARTBEAT: {
        crp_buf reply = {0};
        rc = crk_off_heartbeat(s, client_of(u->blob.client_id), u->blob.data, u->blob.len, now,
                               &reply);
        uint8_t *copy = rc == 0 ? scratch_alloc(sc, reply.len ? reply.len : 1, 1) : NULL;
        if (rc == 0 && copy == NULL)
            rc = crb_error(CR_ERR_NO_MEMORY, "offload_heartbeat reply of %zu bytes", reply.len);
        if (rc == 0) {
            memcpy(copy, reply.data, reply.len);
            resp->u.blob = (crp_rpc_blob_resp){reply.len, copy};
        }
        crp_buf_free(&reply);
        break;
    }
    default:
        rc = crb_error(CR_NOT_SUPPORTED, "opcode %u is not served", (unsigned)req->op);
        break;
    }
    if (rc == 0)
        crk_auth_prove(info, peer, req, resp);
    /* A mutation is answered at its durability point (docs/ha.md). */
    if (info->ha != NULL && crk_ha_op_mutates(req->op)) {
        crk_ha_log_request(info->ha, req);
        if (peer != NULL && peer->defer_durable) {
            peer->durable_seq = crk_ha_log_head(info->ha); /* the RPC server holds the reply */
        } else {
            int durable = crk_ha_wait_durable(info->ha);
            if (durable < 0 && rc == 0)
                rc = durable;
        }
    }
    resp->status = rc;
    if (rc < 0 && req->op != CRP_RPC_SERVICE_READY)
        memset(&resp->u, 0, sizeof(resp->u));
    if (rc < 0) {
        /* The detail, if the failure recorded one on this thread just now. */
        const char *m = cr_last_error_message();
        const char *name = cr_status_name(rc);
        bool fresh = strncmp(m, name, strlen(name)) == 0;
        size_t nl = strlen(m) + 1;
        char *copy = fresh && nl > 1 ? scratch_alloc(sc, nl, 1) : NULL;
        if (copy != NULL) {
            memcpy(copy, m, nl);
            resp->message = copy;
        }
    }
}
