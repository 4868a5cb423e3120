/*
 * fake_transport.c - see fake_transport.h.
 */
#include "fake_transport.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "engine/internal.h"

#define FAKE_MAX_HELD 1024

fake_control fake_ctl;

static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static cre_task *held[FAKE_MAX_HELD];
static size_t n_held;

void fake_reset(void)
{
    atomic_store(&fake_ctl.refuse, false);
    atomic_store(&fake_ctl.serve, true);
    atomic_store(&fake_ctl.hold, false);
    atomic_store(&fake_ctl.refuse_submits, 0);
    atomic_store(&fake_ctl.fake_submits, 0);
    atomic_store(&fake_ctl.fake_completed, 0);
    atomic_store(&fake_ctl.fake_canceled, 0);
    atomic_store(&fake_ctl.desc_parses, 0);
    atomic_store(&fake_ctl.desc_frees, 0);
    atomic_store(&fake_ctl.peer_resets, 0);
}

static bool host_pair(const cre_route *r)
{
    return cre_kind_is_host(r->local_kind) && cre_kind_is_host(r->remote_kind) &&
           r->self_target == NULL;
}

/* --- fake_refuse --------------------------------------------------------- */

static bool refuse_can_serve(cre_tp *tp, const cre_route *r)
{
    atomic_bool *refused = cre_peer_tp(r->peer, tp);
    return atomic_load(&fake_ctl.refuse) && host_pair(r) && !atomic_load(refused);
}

static int refuse_submit(cre_tp *tp, const cre_route *r, cre_task *t)
{
    (void)t;
    atomic_bool *refused = cre_peer_tp(r->peer, tp);
    atomic_store(refused, true);
    atomic_fetch_add(&fake_ctl.refuse_submits, 1);
    return CR_ERR_TRANSPORT_UNSUPPORTED;
}

static void refuse_peer_reset(cre_tp *tp, cre_peer *p, void *pp)
{
    (void)tp;
    (void)p;
    atomic_store((atomic_bool *)pp, false);
    atomic_fetch_add(&fake_ctl.peer_resets, 1);
}

const cre_transport_ops cre_transport_fake_refuse = {
    .name = "fake_refuse",
    .rank = -2,
    .reach = CRE_REACH_HOST | CRE_REACH_REMOTE,
    .peer_size = sizeof(atomic_bool),
    .peer_reset = refuse_peer_reset,
    .can_serve = refuse_can_serve,
    .submit = refuse_submit,
};

/* --- fake ---------------------------------------------------------------- */

static void copy(cre_task *t)
{
    void *remote = (void *)(uintptr_t)t->remote_addr;
    if (t->opcode == CR_OP_READ)
        memcpy(t->local, remote, t->length);
    else
        memcpy(remote, t->local, t->length);
}

static void finish(cre_task *t, int status)
{
    if (status == 0)
        copy(t);
    if (status == CR_ERR_CANCELED)
        atomic_fetch_add(&fake_ctl.fake_canceled, 1);
    else
        atomic_fetch_add(&fake_ctl.fake_completed, 1);
    cre_task_slice_done(t, status, status == 0 ? t->length : 0);
}

static bool fake_can_serve(cre_tp *tp, const cre_route *r)
{
    (void)tp;
    return atomic_load(&fake_ctl.serve) && host_pair(r);
}

static int fake_submit(cre_tp *tp, const cre_route *r, cre_task *t)
{
    (void)tp;
    (void)r;
    atomic_fetch_add(&fake_ctl.fake_submits, 1);
    atomic_store(&t->slices_left, 1);
    if (atomic_load(&fake_ctl.hold)) {
        pthread_mutex_lock(&held_lock);
        if (n_held < FAKE_MAX_HELD) {
            held[n_held++] = t;
            pthread_mutex_unlock(&held_lock);
            return 0;
        }
        pthread_mutex_unlock(&held_lock);
        return CR_ERR_NO_MEMORY; /* the core fails the task */
    }
    finish(t, 0);
    return 0;
}

size_t fake_pending(void)
{
    pthread_mutex_lock(&held_lock);
    size_t n = n_held;
    pthread_mutex_unlock(&held_lock);
    return n;
}

size_t fake_complete(size_t n, int status)
{
    cre_task *take[FAKE_MAX_HELD];
    pthread_mutex_lock(&held_lock);
    size_t k = n < n_held ? n : n_held;
    memcpy(take, held, k * sizeof(take[0]));
    memmove(held, held + k, (n_held - k) * sizeof(held[0]));
    n_held -= k;
    pthread_mutex_unlock(&held_lock);
    for (size_t i = 0; i < k; i++)
        finish(take[i], status);
    return k;
}

/* Canceled held tasks end CANCELED now: nothing of theirs is "on the wire". */
static void fake_cancel(cre_tp *tp)
{
    (void)tp;
    cre_task *take[FAKE_MAX_HELD];
    size_t k = 0;
    pthread_mutex_lock(&held_lock);
    size_t keep = 0;
    for (size_t i = 0; i < n_held; i++) {
        if (atomic_load(&held[i]->canceled))
            take[k++] = held[i];
        else
            held[keep++] = held[i];
    }
    n_held = keep;
    pthread_mutex_unlock(&held_lock);
    for (size_t i = 0; i < k; i++)
        finish(take[i], CR_ERR_CANCELED);
}

static void *fake_desc_parse(cre_tp *tp, cre_peer *p, const crp_descriptor *d)
{
    (void)tp;
    (void)p;
    (void)d;
    atomic_fetch_add(&fake_ctl.desc_parses, 1);
    return malloc(1); /* freed by desc_free: ASan checks the pairing */
}

static void fake_desc_free(cre_tp *tp, void *state)
{
    (void)tp;
    if (state != NULL)
        atomic_fetch_add(&fake_ctl.desc_frees, 1);
    free(state);
}

const cre_transport_ops cre_transport_fake = {
    .name = "fake",
    .rank = -1,
    .reach = CRE_REACH_HOST | CRE_REACH_REMOTE,
    .desc_parse = fake_desc_parse,
    .desc_free = fake_desc_free,
    .can_serve = fake_can_serve,
    .submit = fake_submit,
    .cancel = fake_cancel,
};
