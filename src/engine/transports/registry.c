/*
 * registry.c - the transports this build has, and installing the ones an
 * engine's protocol names.
 *
 * The list comes from CMake (transport_list.h in the build tree, one
 * CRE_TRANSPORT(name) line per transport whose folder was compiled), so an
 * optional transport is chosen by what CMake found, never by #ifdef here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "engine/internal.h"

#define CRE_TRANSPORT(name) extern const cre_transport_ops cre_transport_##name;
#include "transport_list.h"
#undef CRE_TRANSPORT

static const cre_transport_ops *const builtin[] = {
#define CRE_TRANSPORT(name) &cre_transport_##name,
#include "transport_list.h"
#undef CRE_TRANSPORT
};

#define N_BUILTIN (sizeof(builtin) / sizeof(builtin[0]))

size_t cre_builtin_transports(const cre_transport_ops *const **out)
{
    *out = builtin;
    return N_BUILTIN;
}

int cre_transport_check(const cre_transport_ops *ops)
{
    if (ops->name == NULL || ops->can_serve == NULL || ops->submit == NULL)
        return crb_error(CR_ERR_INVALID_CONFIG,
                         "transport '%s' lacks a required op (name, can_serve, submit)",
                         ops->name ? ops->name : "?");
    if (strlen(ops->name) >= CRP_MAX_TRANSPORT_NAME)
        return crb_error(CR_ERR_INVALID_CONFIG, "transport name '%s' is too long", ops->name);
    return 0;
}

/* Does `protocol` ask for transport t? *named: by its own name. */
static bool wanted(const char *protocol, const cre_transport_ops *t, bool *named)
{
    *named = strcmp(protocol, t->name) == 0;
    if (strcmp(protocol, "auto") == 0)
        return true;
    if (strcmp(protocol, "shm") == 0)
        return (t->reach & CRE_REACH_REMOTE) == 0; /* same-process and same-host paths */
    return *named;
}

/* Is t needed by a transport the protocol asks for (ops->needs)? */
static bool needed(const char *protocol, const cre_transport_ops *t)
{
    for (size_t i = 0; i < N_BUILTIN; i++) {
        bool named;
        if (builtin[i]->needs != NULL && strcmp(builtin[i]->needs, t->name) == 0 &&
            wanted(protocol, builtin[i], &named))
            return true;
    }
    return false;
}

/* A transport owning memory kinds comes with every protocol, and one that
 * a wanted transport needs comes with it (both kind_only when the protocol
 * did not ask for their paths). */
static bool installed(const char *protocol, const cre_transport_ops *t, bool *named,
                      bool *kind_only)
{
    bool w = wanted(protocol, t, named);
    *kind_only = !w && (t->kinds != 0 || needed(protocol, t));
    return w || *kind_only;
}

static int by_rank(const void *a, const void *b)
{
    const cre_transport_ops *x = *(const cre_transport_ops *const *)a;
    const cre_transport_ops *y = *(const cre_transport_ops *const *)b;
    return x->rank - y->rank;
}

/* "auto", then every transport of this build by name ("shm" is both one
 * and the same-host group). */
static void names_of_builtin(char *out, size_t cap)
{
    snprintf(out, cap, "auto");
    for (size_t i = 0; i < N_BUILTIN; i++)
        snprintf(out + strlen(out), cap - strlen(out), ", %s", builtin[i]->name);
}

int cre_transports_install(cr_engine *e)
{
    const cre_transport_ops *chosen[CRE_MAX_TRANSPORTS];
    bool chosen_kind_only[CRE_MAX_TRANSPORTS];
    size_t n = 0, n_paths = 0;
    bool named_any = false;
    for (size_t i = 0; i < N_BUILTIN && n < CRE_MAX_TRANSPORTS; i++) {
        bool named, kind_only;
        if (!installed(e->protocol, builtin[i], &named, &kind_only))
            continue;
        int rc = cre_transport_check(builtin[i]);
        if (rc < 0)
            return rc;
        named_any |= named;
        n_paths += !kind_only;
        chosen_kind_only[n] = kind_only;
        chosen[n++] = builtin[i];
    }
    /* by rank, keeping each one's kind_only flag with it */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && by_rank(&chosen[j - 1], &chosen[j]) > 0; j--) {
            const cre_transport_ops *t = chosen[j];
            chosen[j] = chosen[j - 1];
            chosen[j - 1] = t;
            bool k = chosen_kind_only[j];
            chosen_kind_only[j] = chosen_kind_only[j - 1];
            chosen_kind_only[j - 1] = k;
        }
    bool group = strcmp(e->protocol, "auto") == 0 || strcmp(e->protocol, "shm") == 0;
    if (n_paths == 0 || (!group && !named_any)) {
        char names[128];
        names_of_builtin(names, sizeof(names));
        return crb_error(CR_ERR_INVALID_CONFIG,
                         "protocol '%s' is not supported by this build (supported: %s)",
                         e->protocol, names);
    }
    for (size_t i = 0; i < n; i++) {
        cre_tp *tp = &e->tps[e->n_tps];
        memset(tp, 0, sizeof(*tp));
        tp->ops = chosen[i];
        tp->engine = e;
        tp->index = (int)e->n_tps;
        tp->kind_only = chosen_kind_only[i];
        if (chosen[i]->engine_size > 0) {
            tp->priv = calloc(1, chosen[i]->engine_size);
            if (tp->priv == NULL)
                return crb_error(CR_ERR_NO_MEMORY, "transport %s state", chosen[i]->name);
        }
        /* Only a transport named by the protocol must start; members of a
         * group ("auto", "shm") may decline. */
        bool explicit_choice = strcmp(e->protocol, chosen[i]->name) == 0;
        int rc = chosen[i]->init != NULL ? chosen[i]->init(tp, explicit_choice) : 0;
        if (rc == CR_ERR_TRANSPORT_UNSUPPORTED && !explicit_choice) {
            crb_log(CRB_LOG_INFO, "transport %s not used: %s", chosen[i]->name,
                    cr_last_error_message());
            free(tp->priv);
            tp->priv = NULL;
            continue;
        }
        if (rc < 0) {
            free(tp->priv);
            tp->priv = NULL;
            return rc;
        }
        e->n_tps++;
    }
    size_t started_paths = 0;
    for (size_t i = 0; i < e->n_tps; i++)
        started_paths += !e->tps[i].kind_only;
    if (started_paths == 0)
        return crb_error(CR_ERR_INVALID_CONFIG, "protocol '%s': no transport could start",
                         e->protocol);
    return 0;
}

void cre_transports_quiesce(cr_engine *e)
{
    for (size_t i = 0; i < e->n_tps; i++)
        if (e->tps[i].ops->quiesce != NULL)
            e->tps[i].ops->quiesce(&e->tps[i]);
}

void cre_transports_fini(cr_engine *e)
{
    for (size_t i = e->n_tps; i-- > 0;) {
        cre_tp *tp = &e->tps[i];
        if (tp->ops->fini != NULL)
            tp->ops->fini(tp);
        free(tp->priv);
        tp->priv = NULL;
    }
    e->n_tps = 0;
}

cre_tp *cre_engine_tp(cr_engine *e, const char *name)
{
    for (size_t i = 0; i < e->n_tps; i++)
        if (strcmp(e->tps[i].ops->name, name) == 0)
            return &e->tps[i];
    return NULL;
}

cre_tp *cre_engine_stager(cr_engine *e, int kind, const cre_stager_ops **ops)
{
    if (kind < 0 || kind >= 32)
        return NULL;
    for (size_t i = 0; i < e->n_tps; i++) {
        const cre_transport_ops *o = e->tps[i].ops;
        if ((o->kinds & (1u << kind)) && o->stager != NULL) {
            *ops = o->stager;
            return &e->tps[i];
        }
    }
    return NULL;
}

bool cre_kind_is_host(int kind)
{
    return kind == CR_MEM_HOST || kind == CR_MEM_HOST_SHAREABLE;
}
