/*
 * tcp.c - the tcp transport's ops table: persistent connections (lanes)
 * to peers for our requests (lane.c), connections a synchronous caller
 * holds for its own small request (sync.c), and the data role of our port
 * for theirs (serve.c). Reaches every host; moves host memory only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/transports/tcp/tcp.h"

static int tcp_init(cre_tp *tp, bool explicit_choice)
{
    cr_engine *e = tp->engine;
    tcp_engine *te = tp->priv;
    te->workers = calloc(e->n_workers, sizeof(*te->workers));
    if (te->workers == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "tcp: per-worker state");
    for (uint32_t i = 0; i < e->n_workers; i++)
        pthread_mutex_init(&te->workers[i].lock, NULL);
    return 0;
}

static void tcp_fini(cre_tp *tp)
{
    cr_engine *e = tp->engine;
    tcp_engine *te = tp->priv;
    if (te->workers == NULL)
        return;
    for (uint32_t i = 0; i < e->n_workers; i++) {
        free(te->workers[i].lanes);
        pthread_mutex_destroy(&te->workers[i].lock);
    }
    free(te->workers);
    te->workers = NULL;
}

static int tcp_endpoint(cre_tp *tp, crp_buf *out)
{
    cr_engine *e = tp->engine;
    char address[CRB_HOST_MAX + 8];
    int n = snprintf(address, sizeof(address), "%s:%u", e->hostname, (unsigned)e->rpc_port);
    return crp_buf_append(out, address, (size_t)n);
}

/* Give the peer's lanes to workers (spreading peers across workers). */
static int tcp_peer_init(cre_tp *tp, cre_peer *p, void *pp)
{
    cr_engine *e = tp->engine;
    tcp_engine *te = tp->priv;
    tcp_peer *tpeer = pp;
    pthread_mutex_init(&tpeer->queue_lock, NULL);
    pthread_mutex_init(&tpeer->addr_lock, NULL);
    pthread_mutex_init(&tpeer->sync_lock, NULL);
    tpeer->addr_len = 0;
    atomic_init(&tpeer->addr_stale, false);
    tpeer->n_lanes = e->lanes_per_peer;
    tpeer->lanes = calloc(tpeer->n_lanes, sizeof(*tpeer->lanes));
    if (tpeer->lanes == NULL) {
        pthread_mutex_destroy(&tpeer->sync_lock);
        pthread_mutex_destroy(&tpeer->addr_lock);
        pthread_mutex_destroy(&tpeer->queue_lock);
        return crb_error(CR_ERR_NO_MEMORY, "lanes for peer '%s'", p->name);
    }
    size_t first = atomic_fetch_add(&e->next_worker, 1);
    for (size_t i = 0; i < tpeer->n_lanes; i++) {
        cre_worker *w = &e->workers[(first + i) % e->n_workers];
        tcp_lane *l = &tpeer->lanes[i];
        cre_tcp_lane_init(l, tpeer, p, (int)i, w);
        tcp_worker *tw = &te->workers[w->index];
        pthread_mutex_lock(&tw->lock);
        if (tw->n_lanes == tw->cap_lanes) {
            size_t ncap = tw->cap_lanes ? tw->cap_lanes * 2 : 16;
            tcp_lane **nl = realloc(tw->lanes, ncap * sizeof(*nl));
            if (nl == NULL) {
                pthread_mutex_unlock(&tw->lock);
                return crb_error(CR_ERR_NO_MEMORY, "worker lane table");
            }
            tw->lanes = nl;
            tw->cap_lanes = ncap;
        }
        tw->lanes[tw->n_lanes++] = l;
        pthread_mutex_unlock(&tw->lock);
    }
    return 0;
}

/* Engine teardown: workers have stopped; fail what the lanes hold. */
static void tcp_peer_fini(cre_tp *tp, cre_peer *p, void *pp)
{
    tcp_peer *tpeer = pp;
    if (tpeer->lanes == NULL)
        return;
    for (size_t i = 0; i < tpeer->n_lanes; i++) {
        cre_tcp_lane_fail_all(&tpeer->lanes[i], CR_ERR_SHUTDOWN);
        cre_tcp_lane_fini(&tpeer->lanes[i]);
    }
    free(tpeer->lanes);
    tpeer->lanes = NULL;
    cre_tcp_sync_fini(tpeer);
    pthread_mutex_destroy(&tpeer->sync_lock);
    pthread_mutex_destroy(&tpeer->addr_lock);
    pthread_mutex_destroy(&tpeer->queue_lock);
}

/* A fresh descriptor means the peer answered: lanes retry at once rather
 * than wait out a back-off earned while it was down. */
static void *tcp_desc_parse(cre_tp *tp, cre_peer *p, const crp_descriptor *d)
{
    tcp_peer *tpeer = cre_peer_tp(p, tp);
    for (size_t i = 0; i < tpeer->n_lanes; i++)
        atomic_store(&tpeer->lanes[i].reset_backoff, true);
    return NULL;
}

cre_tp *cre_tcp_stager(cr_engine *e, int kind, const cre_stager_ops **ops)
{
    return cre_kind_is_host(kind) ? NULL : cre_engine_stager(e, kind, ops);
}

/* A remote-accessible device buffer we can stage carries a one-byte blob
 * ("s"): peers may send us READs and WRITEs of it. */
static int tcp_reg(cre_tp *tp, cre_buffer *b, crp_buf *blob)
{
    const cre_stager_ops *ops;
    if (cre_kind_is_host(b->kind) || !b->remote_accessible ||
        cre_tcp_stager(tp->engine, b->kind, &ops) == NULL)
        return 0;
    return crp_buf_append(blob, "s", 1);
}

/* Host memory on both ends; device memory where a stager exists here (our
 * end) or the peer said it stages that buffer (its end). */
static bool tcp_can_serve(cre_tp *tp, const cre_route *r)
{
    const cre_stager_ops *ops;
    if (!cre_kind_is_host(r->local_kind) && cre_tcp_stager(tp->engine, r->local_kind, &ops) == NULL)
        return false;
    if (cre_kind_is_host(r->remote_kind))
        return true;
    if (r->self_target != NULL)
        return cre_tcp_stager(tp->engine, r->remote_kind, &ops) != NULL;
    size_t len = 0;
    const uint8_t *x = cre_route_blob(r, tp, &len);
    return x != NULL && len == 1 && x[0] == 's';
}

static void tcp_cancel(cre_tp *tp)
{
    cre_workers_kick_all(tp->engine);
}

static size_t tcp_counters(cre_tp *tp, cr_engine_counter *out, size_t cap)
{
    tcp_engine *te = tp->priv;
    cr_engine_counter all[] = {
        {"tcp", "connects", atomic_load(&te->connects)},
        {"tcp", "sync_connects", atomic_load(&te->sync_connects)},
        {"tcp", "sync_transfers", atomic_load(&te->sync_transfers)},
    };
    size_t n = sizeof(all) / sizeof(all[0]);
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = all[i];
    return n;
}

const cre_transport_ops cre_transport_tcp = {
    .name = "tcp",
    .rank = 100,
    .reach = CRE_REACH_PROCESS | CRE_REACH_HOST | CRE_REACH_REMOTE,
    .engine_size = sizeof(tcp_engine),
    .peer_size = sizeof(tcp_peer),
    .init = tcp_init,
    .fini = tcp_fini,
    .endpoint = tcp_endpoint,
    .reg = tcp_reg,
    .peer_init = tcp_peer_init,
    .peer_fini = tcp_peer_fini,
    .desc_parse = tcp_desc_parse,
    .can_serve = tcp_can_serve,
    .any_local = true,
    .submit = cre_tcp_submit,
    .submit_flush = cre_tcp_submit_flush,
    .tick = cre_tcp_lanes_tick,
    .cancel = tcp_cancel,
    .counters = tcp_counters,
    .serve_role = CRP_ROLE_DATA,
    .serve = cre_tcp_serve,
};
