/*
 * grants.c - put grants: a single put in one master round trip (docs/WIRE.md,
 * "Put grants").
 *
 * A two-phase put pays two master round trips around its copy: PUT_START
 * (where?) and PUT_END (done). A grant answers "where?" ahead of time: it is a
 * fresh write in flight of a hidden key of ours (GRANT_PREFIX + 32 random hex
 * digits), owned by our master connection, i.e. space the master placed for a
 * value of a given size and replica config that nobody can read. A put of
 * that size and config takes an idle grant, writes its value into the grant's
 * replicas and sends PUT_END {key, "gk": grant}: the master completes the key
 * on those replicas and the grant key is gone. The PUT_START of the next grant
 * goes in the same write (crc_master_call2), so both are answered in the same
 * round trip, and a stream of puts of one size costs one round trip each.
 *
 * Safety rests on two bounds. The owned-write bound D ("ow"): this master
 * instance never reuses a grant's space before the grant's start + D,
 * whatever happens to this client or its connection; a grant is written into
 * only while it is younger than GRANT_USE_MS (from before its PUT_START was
 * sent) and a write is bounded by the store's transfer timeout, so D =
 * GRANT_USE_MS + transfer timeout + 1 s + GRANT_MARGIN_MS covers every write.
 * And a master that restarts knows nothing of grants, but fences a remounted
 * segment's allocations for lease + 1 s (>= 1 s) after it starts, after the
 * grant was asked: GRANT_USE_MS = 1 s means every write into a grant starts
 * within that fence, as a two-phase put's write that was in flight across the
 * restart does. Under HA (an etcd:// address) a grant is a write in flight
 * like a PUT_START's: replicated before it is answered (--ha_sync_replicas=1)
 * and, on a promotion, fenced with every write in flight (its range freed
 * after put_start_release_timeout); the pair follows the new leader
 * (crc_master_call2). Older grants are revoked (a notice, no wait), and all
 * idle ones when a put finds no space (the put is then tried once more: they
 * may have held it). Values over GRANT_MAX_BYTES are not granted. A grant the
 * master no longer knows (connection lost, restart, HA failover, segment
 * unmounted) makes the end fail with CR_OBJECT_NOT_FOUND and the put falls
 * back to the two-phase form.
 *
 * On by default; CRESCENT_PUT_GRANTS=0 turns them off. Not used with a master
 * that does not
 * announce CRP_RPC_CAP_PUT_GRANT, for configs naming
 * more than GRANT_PREF_MAX preferred segments, and after the master refused a
 * grant's PUT_START outright (logged once).
 *
 * Threading: any thread; the pool has its own mutex, never held across a call.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "store/internal.h"

#define GRANTS_MAX      4    /* grants a store holds or is asking for at once */
#define GRANT_USE_MS    1000 /* written into only while younger than this (see above) */
#define GRANT_MARGIN_MS 1000 /* added to the bound D beyond the longest write */
#define GRANT_PREFIX                                                                               \
    "\x02"                                                                                         \
    "crescent-grant/"
#define GRANT_PREF_MAX  4   /* preferred segments a grant's config may name */
#define GRANT_PREF_TEXT 512 /* and their names' bytes, NULs included */
/* Values larger than this are not granted: the round trip a grant saves is a few
 * percent of moving 4 MiB over a socket, while an idle grant holds its space. */
#define GRANT_MAX_BYTES (4ull << 20)

struct crc_grant {
    char key[64];
    uint64_t size;
    crp_rpc_replica_config cfg; /* preferred_segments: pref[] */
    char *pref[GRANT_PREF_MAX];
    char pref_text[GRANT_PREF_TEXT];
    uint64_t asked_ns; /* before its PUT_START was sent */
    crp_rpc_resp resp; /* that PUT_START's reply: resp.u.alloc */
};

struct crc_grants {
    pthread_mutex_t mu;
    crc_grant *idle[GRANTS_MAX]; /* ready for a put, oldest first */
    size_t n_idle;
    size_t n_out; /* idle, taken by a put, or being asked for */
    uint64_t secret[2];
    uint64_t counter;
    uint64_t owned_ms; /* D */
    atomic_bool refused;
};

int crc_grants_create(cr_store *s)
{
    const char *v = getenv("CRESCENT_PUT_GRANTS");
    if (v != NULL && v[0] != '\0' && strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
        return crb_error(CR_INVALID_PARAMS, "CRESCENT_PUT_GRANTS='%s' is not 0 or 1", v);
    if (v != NULL && strcmp(v, "0") == 0)
        return 0;
    crc_grants *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "put grants");
    pthread_mutex_init(&p->mu, NULL);
    if (crb_random_bytes(p->secret, sizeof(p->secret)) < 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return crb_error(CR_ERR_SYSTEM, "put grants: no random bytes for their keys");
    }
    p->owned_ms = GRANT_USE_MS + (uint64_t)s->transfer_timeout_ms + 1000 + GRANT_MARGIN_MS;
    s->grants = p;
    return 0;
}

static void grant_free(crc_grant *g)
{
    crp_rpc_resp_clear(&g->resp);
    free(g);
}

/* Tell the master we are done with g's key (its reply is not waited for). */
static void revoke_notice(cr_store *s, const crc_grant *g)
{
    crp_rpc_req req = {.op = CRP_RPC_PUT_REVOKE};
    req.u.owner_key = (crp_rpc_owner_key_req){s->client_id, (char *)g->key};
    (void)crc_master_send_later(s->master, &req, (int)s->rpc_timeout_ms);
}

size_t crc_grants_release(cr_store *s)
{
    crc_grants *p = s->grants;
    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->mu);
    size_t n = p->n_idle;
    for (size_t i = 0; i < n; i++) {
        revoke_notice(s, p->idle[i]);
        grant_free(p->idle[i]);
    }
    p->n_out -= n;
    p->n_idle = 0;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void crc_grants_destroy(cr_store *s)
{
    crc_grants *p = s->grants;
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n_idle; i++)
        grant_free(p->idle[i]);
    pthread_mutex_destroy(&p->mu);
    free(p);
    s->grants = NULL;
}

static bool same_config(const crp_rpc_replica_config *a, const crp_rpc_replica_config *b)
{
    if (a->n_preferred != b->n_preferred)
        return false;
    for (size_t i = 0; i < a->n_preferred; i++)
        if (strcmp(a->preferred_segments[i], b->preferred_segments[i]) != 0)
            return false;
    return a->replica_num == b->replica_num && a->hard_pin == b->hard_pin &&
           a->soft_pin_action == b->soft_pin_action && a->has_soft_pin_ttl == b->has_soft_pin_ttl &&
           (!a->has_soft_pin_ttl || a->soft_pin_ttl_ms == b->soft_pin_ttl_ms) &&
           a->prefer_same_node == b->prefer_same_node;
}

/* Does cfg's list of preferred segments fit a grant? */
static bool pref_fits(const crp_rpc_replica_config *cfg)
{
    if (cfg->n_preferred > GRANT_PREF_MAX)
        return false;
    size_t bytes = 0;
    for (size_t i = 0; i < cfg->n_preferred; i++)
        bytes += strlen(cfg->preferred_segments[i]) + 1;
    return bytes <= GRANT_PREF_TEXT;
}

bool crc_grants_usable(cr_store *s, const crp_rpc_replica_config *cfg)
{
    const uint64_t need = CRP_RPC_CAP_PUT_GRANT | CRP_RPC_CAP_OWNED_WRITES;
    return s->grants != NULL && !atomic_load(&s->grants->refused) && pref_fits(cfg) &&
           (crc_master_caps(s->master) & need) == need;
}

/* Take the idle grants too old to be written into off the list (p->mu held): into
 * out[], returns how many. They are no longer counted. */
static size_t take_stale_locked(crc_grants *p, uint64_t now, crc_grant **out)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n_idle;) {
        crc_grant *g = p->idle[i];
        if (now - g->asked_ns < (uint64_t)GRANT_USE_MS * 1000000ull) {
            i++;
            continue;
        }
        memmove(&p->idle[i], &p->idle[i + 1], (p->n_idle - i - 1) * sizeof(p->idle[0]));
        p->n_idle--;
        p->n_out--;
        out[n++] = g;
    }
    return n;
}

static void give_back(cr_store *s, crc_grant **stale, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        revoke_notice(s, stale[i]);
        grant_free(stale[i]);
    }
}

crc_grant *crc_grant_take(cr_store *s, uint64_t size, const crp_rpc_replica_config *cfg)
{
    crc_grants *p = s->grants;
    crc_grant *found = NULL, *stale[GRANTS_MAX];
    pthread_mutex_lock(&p->mu);
    size_t n_stale = take_stale_locked(p, crb_now_ns(), stale);
    for (size_t i = 0; i < p->n_idle && found == NULL; i++) {
        crc_grant *g = p->idle[i];
        if (g->size != size || !same_config(&g->cfg, cfg))
            continue;
        found = g;
        memmove(&p->idle[i], &p->idle[i + 1], (p->n_idle - i - 1) * sizeof(p->idle[0]));
        p->n_idle--;
    }
    pthread_mutex_unlock(&p->mu);
    give_back(s, stale, n_stale);
    return found;
}

void crc_grants_expire(cr_store *s)
{
    crc_grants *p = s->grants;
    if (p == NULL)
        return;
    crc_grant *stale[GRANTS_MAX];
    pthread_mutex_lock(&p->mu);
    size_t n_stale = take_stale_locked(p, crb_now_ns(), stale);
    pthread_mutex_unlock(&p->mu);
    give_back(s, stale, n_stale);
}

crc_grant *crc_grant_ask_begin(cr_store *s, uint64_t size, const crp_rpc_replica_config *cfg,
                               crp_rpc_req *req)
{
    crc_grants *p = s->grants;
    if (size == 0 || size > GRANT_MAX_BYTES)
        return NULL;
    pthread_mutex_lock(&p->mu);
    bool room = p->n_out < GRANTS_MAX;
    uint64_t n = p->counter++;
    if (room)
        p->n_out++;
    pthread_mutex_unlock(&p->mu);
    if (!room)
        return NULL;
    crc_grant *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        pthread_mutex_lock(&p->mu);
        p->n_out--;
        pthread_mutex_unlock(&p->mu);
        return NULL;
    }
    /* unguessable by other clients: a keyed mix of the counter with the store's secret */
    uint64_t a = p->secret[0] ^ (n * 0x9e3779b97f4a7c15ull);
    uint64_t b = p->secret[1] + n;
    a ^= a >> 31;
    a *= 0xbf58476d1ce4e5b9ull;
    a ^= a >> 29;
    snprintf(g->key, sizeof(g->key), GRANT_PREFIX "%016" PRIx64 "%016" PRIx64, a, b);
    g->size = size;
    g->cfg = *cfg;
    size_t used = 0; /* the caller checked the list with crc_grants_usable (pref_fits) */
    for (size_t i = 0; i < cfg->n_preferred; i++) {
        size_t len = strlen(cfg->preferred_segments[i]) + 1;
        g->pref[i] = memcpy(g->pref_text + used, cfg->preferred_segments[i], len);
        used += len;
    }
    g->cfg.preferred_segments = cfg->n_preferred > 0 ? g->pref : NULL;
    g->asked_ns = crb_now_ns();
    *req = (crp_rpc_req){.op = CRP_RPC_PUT_START};
    req->u.put_start.client_id = s->client_id;
    req->u.put_start.key = g->key;
    req->u.put_start.value_size = size;
    req->u.put_start.config = g->cfg;
    req->owned_ms = p->owned_ms;
    return g;
}

void crc_grant_ask_end(cr_store *s, crc_grant *g, int rc)
{
    crc_grants *p = s->grants;
    if (rc == 0 && g->resp.status == 0 && g->resp.u.alloc.n_replicas > 0) {
        pthread_mutex_lock(&p->mu);
        if (p->n_idle < GRANTS_MAX) {
            p->idle[p->n_idle++] = g;
            g = NULL;
        }
        pthread_mutex_unlock(&p->mu);
        if (g == NULL)
            return;
        rc = -1; /* cannot happen (n_out bounds the idle list): given back below */
    }
    if (rc == 0 && g->resp.status == CR_INVALID_PARAMS && g->resp.message != NULL &&
        strstr(g->resp.message, "owned write") != NULL && !atomic_exchange(&p->refused, true))
        crb_log(CRB_LOG_INFO, "store %s: put grants off: the master refused one (%s)",
                s->segment_name, g->resp.message);
    if (rc != 0 || g->resp.status == 0) /* it may exist (lost reply) or does: give it back */
        revoke_notice(s, g);
    pthread_mutex_lock(&p->mu);
    p->n_out--;
    pthread_mutex_unlock(&p->mu);
    grant_free(g);
}

void crc_grant_done(cr_store *s, crc_grant *g, bool revoke)
{
    if (revoke)
        revoke_notice(s, g);
    pthread_mutex_lock(&s->grants->mu);
    s->grants->n_out--;
    pthread_mutex_unlock(&s->grants->mu);
    grant_free(g);
}

bool crc_grants_ahead(cr_store *s)
{
    return s->grants != NULL && s->put_ahead &&
           (crc_master_caps(s->master) & CRP_RPC_CAP_COMMIT_AHEAD) != 0;
}

const crp_rpc_alloc_resp *crc_grant_placement(crc_grant *g)
{
    return &g->resp.u.alloc;
}

const char *crc_grant_key(const crc_grant *g)
{
    return g->key;
}

crp_rpc_resp *crc_grant_reply(crc_grant *g)
{
    return &g->resp;
}
