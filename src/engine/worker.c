/*
 * worker.c - the engine's I/O threads. Each worker is one event loop
 * (base/evloop.h): the connections to our port handed to it and whatever
 * the transports hang on it (tcp lanes, watches of same-host peers, UCX
 * worker fds). Every pass that was woken, and at least every TICK_MS, it
 * runs each transport's tick (queued work, deadlines, retries) and the
 * bookkeeping of its connections.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "engine/internal.h"

#define TICK_MS 20

static void worker_tick(crb_loop *loop, uint64_t now, bool woken)
{
    cre_worker *w = loop->owner;
    cr_engine *e = w->engine;
    if (woken)
        cre_server_take_inbox(w);
    for (size_t i = 0; i < e->n_tps; i++)
        if (e->tps[i].ops->tick != NULL)
            e->tps[i].ops->tick(&e->tps[i], w, now);
    cre_conns_tick(w, now);
    if (w->index == 0 && e->acceptor_started)
        crb_acceptor_tick(&e->acceptor, now);
}

void cre_worker_kick(cre_worker *w)
{
    crb_loop_wake(&w->loop);
}

void cre_workers_kick_all(cr_engine *e)
{
    for (uint32_t i = 0; i < e->n_workers; i++)
        crb_loop_wake(&e->workers[i].loop);
}

cre_worker *cre_worker_next(cr_engine *e)
{
    return &e->workers[atomic_fetch_add(&e->next_worker, 1) % e->n_workers];
}

int cre_workers_init(cr_engine *e)
{
    e->workers = calloc(e->n_workers, sizeof(*e->workers));
    if (e->workers == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "allocating %u workers", e->n_workers);
    for (uint32_t i = 0; i < e->n_workers; i++) {
        cre_worker *w = &e->workers[i];
        w->engine = e;
        w->index = (int)i;
        pthread_mutex_init(&w->inbox_lock, NULL);
        char name[16];
        snprintf(name, sizeof(name), "cre-w%u", i % 1000);
        int rc = crb_loop_init(&w->loop, name, TICK_MS, worker_tick, w);
        if (rc == 0)
            crb_loop_set_busy_poll(&w->loop, e->spin_mode_ns);
        if (rc < 0) {
            for (uint32_t j = 0; j <= i; j++) {
                if (j < i)
                    crb_loop_fini(&e->workers[j].loop);
                pthread_mutex_destroy(&e->workers[j].inbox_lock);
            }
            free(e->workers);
            e->workers = NULL;
            return rc;
        }
    }
    return 0;
}

int cre_workers_start(cr_engine *e)
{
    for (uint32_t i = 0; i < e->n_workers; i++) {
        int rc = crb_loop_start(&e->workers[i].loop);
        if (rc < 0) {
            cre_workers_stop(e);
            return rc;
        }
    }
    e->workers_running = true;
    return 0;
}

/* Join every thread, then close what the workers still own. Transports'
 * fini (after this) fails what their queues still hold. */
void cre_workers_stop(cr_engine *e)
{
    if (e->workers == NULL)
        return;
    for (uint32_t i = 0; i < e->n_workers; i++)
        crb_loop_fini(&e->workers[i].loop); /* joins a started thread */
    e->workers_running = false;
}

void cre_workers_free(cr_engine *e)
{
    if (e->workers == NULL)
        return;
    for (uint32_t i = 0; i < e->n_workers; i++) {
        cre_conns_close_all(&e->workers[i]);
        cre_server_drop_inbox(&e->workers[i]);
    }
    free(e->workers);
    e->workers = NULL;
}
