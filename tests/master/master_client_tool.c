/*
 * master_client_tool.c - crescent-test-master-client: a fake-but-real store
 * client for the multi-process master tests.
 *
 *   crescent-test-master-client HOST:PORT
 *
 * Design: it connects with crc_master_connect (the real pipelined client,
 * SERVICE_READY handshake and all) under a random client id, prints
 * "READY <client id hex>" and then executes one command per stdin line,
 * answering each with exactly one stdout line. The first token of every
 * answer is a status: the transport error of crc_master_call if the call
 * failed, else the reply's own status (0 or a negative cr_status). Named
 * fields follow as key=value tokens; lists are comma-separated, and per-key
 * segment lists in batch answers join names with '+' ('-' for none).
 *
 *   mount NAME BASE SIZE          -> st            (remembered for remount)
 *   unmount NAME                  -> st
 *   remount                       -> st            (every remembered segment)
 *   ping                          -> st cs=<crp_rpc_client_status>
 *   put KEY SIZE [OPTS]           -> st n=N segs=a,b   (put_start + put_end)
 *   put_start KEY SIZE [OPTS]     -> st n=N segs=a,b
 *   put_end KEY / revoke KEY      -> st
 *   put_ahead KEY GRANT           -> st ov=V  (PUT_END with "gk" GRANT and "ca": committed
 *                                              ahead; a later put_end KEY completes it)
 *   get KEY                       -> st n=N segs=a,b lease=MS
 *   exist KEY                     -> st ex=0|1
 *   query KEY                     -> st sz=B n=N segs=.. lease_ms=MS hp=0|1 sp_ms=MS
 *   remove KEY [force]            -> st
 *   remove_regex RE [force]       -> st count=N
 *   remove_all [force]            -> st count=N
 *   segments                      -> st names=a,b
 *   batch_exist K1,K2,..          -> st r=1,0,..
 *   batch_get K1,K2,..            -> st r=0,-704,.. segs=a+b,-,.. lease=MS
 *   batch_put K1,K2,.. SIZE [OPTS]-> st r=.. segs=..   (start, then end of the started keys)
 *   batch_put_start K1,.. SIZE [OPTS] -> st r=.. segs=..
 *   batch_put_end K1,.. / batch_revoke K1,.. -> st r=..
 *   batch_put_ahead K1,..         -> st r=..  (BATCH_PUT_END with "ca": committed ahead; a
 *                                              later batch_put_end completes them)
 *   batch_remove K1,.. [force]    -> st r=..
 *   heartbeat on|off              -> 0   (a thread pings every 200 ms and
 *                                          remounts on NEED_REMOUNT)
 *   remounts                      -> 0 count=N last=ST  (remounts the heartbeat did)
 *   view                          -> 0 view=V local=0|1 (on the master's local socket)
 *   sleep_ms MS CMD...            -> CMD's reply, MS ms later
 *   quit                          -> 0, then exit 0
 *
 * OPTS: n=REPLICAS (default 1), hp (hard pin), sp (soft pin, master's TTL),
 * sp=MS, pref=SEG1,SEG2, ow=MS (put starts: owned by this connection with
 * that bound, docs/WIRE.md "Owned writes").
 *
 * The process exits when stdin closes. Its parent may SIGKILL it at any
 * time (the liveness test does); PR_SET_PDEATHSIG ends it if the test dies.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "base/clock.h"
#include "base/net.h"
#include "crescent/status.h"
#include "proto/rpc.h"
#include "store/master_client.h"

#define CALL_TIMEOUT_MS 10000
#define MAX_SEGS        16
#define MAX_TOKENS      64
#define LINE_MAX_BYTES  (256 * 1024)
#define OUT_MAX_BYTES   (512 * 1024)

typedef struct tool_seg {
    char name[CRP_MAX_NAME + 1];
    uint64_t base, size;
} tool_seg;

static crc_master *g_master;
static crp_rpc_uuid g_cid;

static pthread_mutex_t g_seg_lock = PTHREAD_MUTEX_INITIALIZER;
static tool_seg g_segs[MAX_SEGS];
static size_t g_nsegs;

static pthread_mutex_t g_hb_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_hb_cond;
static bool g_hb_running, g_hb_stop;
static pthread_t g_hb_thread;
static atomic_int g_remounts;
static atomic_int g_last_remount_status;

/* --- output ---------------------------------------------------------------- */

typedef struct out_buf {
    char *s;
    size_t len;
} out_buf;

static void outf(out_buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outf(out_buf *o, const char *fmt, ...)
{
    if (o->len >= OUT_MAX_BYTES - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->s + o->len, OUT_MAX_BYTES - o->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n < OUT_MAX_BYTES - o->len ? (size_t)n : OUT_MAX_BYTES - 1 - o->len;
}

static void out_replicas(out_buf *o, const crp_rpc_replica *r, size_t n, char sep)
{
    if (n == 0)
        outf(o, "-");
    for (size_t i = 0; i < n; i++)
        outf(o, "%s%s", i ? (sep == '+' ? "+" : ",") : "", r[i].segment);
}

/* --- calls ------------------------------------------------------------------ */

/* Call and return the transport error or the reply's status. */
static int call(const crp_rpc_req *req, crp_rpc_resp *resp)
{
    memset(resp, 0, sizeof(*resp));
    int rc = crc_master_call(g_master, req, resp, CALL_TIMEOUT_MS);
    if (rc < 0)
        return rc;
    return resp->status;
}

static int remount_all(void)
{
    crp_rpc_segment segs[MAX_SEGS];
    pthread_mutex_lock(&g_seg_lock);
    size_t n = g_nsegs;
    for (size_t i = 0; i < n; i++)
        segs[i] = (crp_rpc_segment){g_segs[i].name, g_segs[i].base, g_segs[i].size, 1};
    crp_rpc_req req = {.op = CRP_RPC_REMOUNT_SEGMENT};
    req.u.remount = (crp_rpc_remount_req){g_cid, n, segs};
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    pthread_mutex_unlock(&g_seg_lock);
    crp_rpc_resp_clear(&resp);
    return st;
}

static void *heartbeat_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_hb_lock);
    while (!g_hb_stop) {
        pthread_mutex_unlock(&g_hb_lock);
        crp_rpc_req req = {.op = CRP_RPC_PING};
        req.u.client.client_id = g_cid;
        crp_rpc_resp resp;
        int st = call(&req, &resp);
        bool need = st == 0 && resp.u.ping.client_status == CRP_RPC_CLIENT_NEED_REMOUNT;
        crp_rpc_resp_clear(&resp);
        if (need) {
            st = remount_all();
            atomic_store(&g_last_remount_status, st);
            if (st == 0)
                atomic_fetch_add(&g_remounts, 1);
        }
        pthread_mutex_lock(&g_hb_lock);
        if (!g_hb_stop) {
            struct timespec ts = crb_deadline_ts(200);
            pthread_cond_timedwait(&g_hb_cond, &g_hb_lock, &ts);
        }
    }
    pthread_mutex_unlock(&g_hb_lock);
    return NULL;
}

static void heartbeat_set(bool on)
{
    pthread_mutex_lock(&g_hb_lock);
    if (on && !g_hb_running) {
        g_hb_stop = false;
        if (pthread_create(&g_hb_thread, NULL, heartbeat_main, NULL) == 0)
            g_hb_running = true;
        pthread_mutex_unlock(&g_hb_lock);
        return;
    }
    if (!on && g_hb_running) {
        g_hb_stop = true;
        pthread_cond_signal(&g_hb_cond);
        pthread_mutex_unlock(&g_hb_lock);
        pthread_join(g_hb_thread, NULL);
        pthread_mutex_lock(&g_hb_lock);
        g_hb_running = false;
    }
    pthread_mutex_unlock(&g_hb_lock);
}

/* --- argument parsing ------------------------------------------------------- */

static bool parse_u64(const char *s, uint64_t *out)
{
    if (s == NULL || *s == '\0')
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

/* Split a comma list in place; returns the count (at most cap). */
static size_t split_list(char *s, char **out, size_t cap)
{
    size_t n = 0;
    while (s != NULL && *s != '\0' && n < cap) {
        out[n++] = s;
        char *c = strchr(s, ',');
        if (c == NULL)
            break;
        *c = '\0';
        s = c + 1;
    }
    return n;
}

/* The last put command's ow=MS (0: none). */
static uint64_t g_owned_ms;

/* Parse put options from tok[0..n) into cfg (pref names stored in prefs). */
static bool parse_opts(char **tok, int n, crp_rpc_replica_config *cfg, char **prefs)
{
    *cfg = (crp_rpc_replica_config){.replica_num = 1};
    g_owned_ms = 0;
    for (int i = 0; i < n; i++) {
        uint64_t v;
        if (strncmp(tok[i], "ow=", 3) == 0 && parse_u64(tok[i] + 3, &v)) {
            g_owned_ms = v;
        } else if (strncmp(tok[i], "n=", 2) == 0 && parse_u64(tok[i] + 2, &v) && v <= UINT32_MAX) {
            cfg->replica_num = (uint32_t)v;
        } else if (strcmp(tok[i], "hp") == 0) {
            cfg->hard_pin = true;
        } else if (strcmp(tok[i], "sp") == 0) {
            cfg->soft_pin_action = CRP_RPC_SOFT_PIN_ENABLE;
        } else if (strncmp(tok[i], "sp=", 3) == 0 && parse_u64(tok[i] + 3, &v)) {
            cfg->soft_pin_action = CRP_RPC_SOFT_PIN_ENABLE;
            cfg->has_soft_pin_ttl = true;
            cfg->soft_pin_ttl_ms = v;
        } else if (strncmp(tok[i], "pref=", 5) == 0) {
            cfg->n_preferred = split_list(tok[i] + 5, prefs, CRP_RPC_MAX_PREFERRED);
            cfg->preferred_segments = prefs;
        } else {
            return false;
        }
    }
    return true;
}

/* --- commands ----------------------------------------------------------------- */

static int cmd_mount(char **tok, int n, out_buf *o)
{
    uint64_t base, size;
    if (n != 4 || !parse_u64(tok[2], &base) || !parse_u64(tok[3], &size) ||
        strlen(tok[1]) > CRP_MAX_NAME)
        return CR_INVALID_PARAMS;
    crp_rpc_req req = {.op = CRP_RPC_MOUNT_SEGMENT};
    req.u.mount = (crp_rpc_mount_req){g_cid, {tok[1], base, size, 1}};
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    crp_rpc_resp_clear(&resp);
    if (st == 0) {
        pthread_mutex_lock(&g_seg_lock);
        bool known = false;
        for (size_t i = 0; i < g_nsegs; i++)
            known = known || strcmp(g_segs[i].name, tok[1]) == 0;
        if (!known && g_nsegs < MAX_SEGS) {
            snprintf(g_segs[g_nsegs].name, sizeof(g_segs[g_nsegs].name), "%s", tok[1]);
            g_segs[g_nsegs].base = base;
            g_segs[g_nsegs].size = size;
            g_nsegs++;
        }
        pthread_mutex_unlock(&g_seg_lock);
    }
    (void)o;
    return st;
}

static int cmd_unmount(char **tok, int n, out_buf *o)
{
    if (n != 2)
        return CR_INVALID_PARAMS;
    crp_rpc_req req = {.op = CRP_RPC_UNMOUNT_SEGMENT};
    req.u.unmount = (crp_rpc_unmount_req){g_cid, tok[1]};
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    crp_rpc_resp_clear(&resp);
    if (st == 0) {
        pthread_mutex_lock(&g_seg_lock);
        for (size_t i = 0; i < g_nsegs; i++) {
            if (strcmp(g_segs[i].name, tok[1]) == 0) {
                g_segs[i] = g_segs[--g_nsegs];
                break;
            }
        }
        pthread_mutex_unlock(&g_seg_lock);
    }
    (void)o;
    return st;
}

static int cmd_ping(out_buf *o)
{
    crp_rpc_req req = {.op = CRP_RPC_PING};
    req.u.client.client_id = g_cid;
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    if (st == 0)
        outf(o, " cs=%u", (unsigned)resp.u.ping.client_status);
    crp_rpc_resp_clear(&resp);
    return st;
}

static int put_start(const char *key, uint64_t size, const crp_rpc_replica_config *cfg, out_buf *o)
{
    crp_rpc_req req = {.op = CRP_RPC_PUT_START};
    req.u.put_start = (crp_rpc_put_start_req){g_cid, (char *)key, size, *cfg};
    req.owned_ms = g_owned_ms;
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    if (st == 0) {
        outf(o, " n=%zu segs=", resp.u.alloc.n_replicas);
        out_replicas(o, resp.u.alloc.replicas, resp.u.alloc.n_replicas, ',');
    }
    crp_rpc_resp_clear(&resp);
    return st;
}

static int owner_key_op(int op, const char *key)
{
    crp_rpc_req req = {.op = (uint16_t)op};
    req.u.owner_key = (crp_rpc_owner_key_req){g_cid, (char *)key};
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    crp_rpc_resp_clear(&resp);
    return st;
}

/* PUT_END {KEY, gk GRANT, ca}: docs/WIRE.md, "Commit ahead". */
static int cmd_put_ahead(char **tok, int n, out_buf *o)
{
    if (n != 3)
        return CR_INVALID_PARAMS;
    crp_rpc_req req = {.op = CRP_RPC_PUT_END, .grant_key = tok[2], .commit_ahead = true};
    req.u.owner_key = (crp_rpc_owner_key_req){g_cid, tok[1]};
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    if (st == 0)
        outf(o, " ov=%" PRIu64, resp.u.end.version);
    crp_rpc_resp_clear(&resp);
    return st;
}

static int cmd_put(char **tok, int n, bool end, out_buf *o)
{
    uint64_t size;
    crp_rpc_replica_config cfg;
    char *prefs[CRP_RPC_MAX_PREFERRED];
    if (n < 3 || !parse_u64(tok[2], &size) || !parse_opts(tok + 3, n - 3, &cfg, prefs))
        return CR_INVALID_PARAMS;
    int st = put_start(tok[1], size, &cfg, o);
    if (st == 0 && end)
        st = owner_key_op(CRP_RPC_PUT_END, tok[1]);
    return st;
}

static int cmd_get(char **tok, int n, out_buf *o)
{
    if (n != 2)
        return CR_INVALID_PARAMS;
    crp_rpc_req req = {.op = CRP_RPC_GET_REPLICA_LIST};
    req.u.key.key = tok[1];
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    if (st == 0) {
        outf(o, " n=%zu segs=", resp.u.get.n_replicas);
        out_replicas(o, resp.u.get.replicas, resp.u.get.n_replicas, ',');
        outf(o, " lease=%" PRIu64 " ov=%" PRIu64, resp.u.get.lease_ttl_ms, resp.u.get.version);
    }
    crp_rpc_resp_clear(&resp);
    return st;
}

static int cmd_exist(char **tok, int n, out_buf *o)
{
    if (n != 2)
        return CR_INVALID_PARAMS;
    crp_rpc_req req = {.op = CRP_RPC_EXIST};
    req.u.key.key = tok[1];
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    if (st == 0)
        outf(o, " ex=%d", resp.u.exist.exists ? 1 : 0);
    crp_rpc_resp_clear(&resp);
    return st;
}

static int cmd_query(char **tok, int n, out_buf *o)
{
    if (n != 2)
        return CR_INVALID_PARAMS;
    crp_rpc_req req = {.op = CRP_RPC_QUERY_KEY};
    req.u.key.key = tok[1];
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    if (st == 0) {
        const crp_rpc_key_info_resp *k = &resp.u.key_info;
        outf(o, " sz=%" PRIu64 " n=%zu segs=", k->value_size, k->n_replicas);
        out_replicas(o, k->replicas, k->n_replicas, ',');
        outf(o, " lease_ms=%" PRIu64 " hp=%d sp_ms=%" PRIu64, k->lease_ms_left, k->hard_pin ? 1 : 0,
             k->soft_pin_ms_left);
    }
    crp_rpc_resp_clear(&resp);
    return st;
}

static bool is_force(char **tok, int n, int at, bool *force)
{
    *force = false;
    if (n == at)
        return true;
    if (n == at + 1 && strcmp(tok[at], "force") == 0) {
        *force = true;
        return true;
    }
    return false;
}

static int cmd_remove(char **tok, int n, out_buf *o)
{
    bool force;
    if (n < 2 || !is_force(tok, n, 2, &force))
        return CR_INVALID_PARAMS;
    crp_rpc_req req = {.op = CRP_RPC_REMOVE};
    req.u.remove = (crp_rpc_remove_req){tok[1], force};
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    crp_rpc_resp_clear(&resp);
    (void)o;
    return st;
}

static int cmd_count_op(char **tok, int n, bool regex, out_buf *o)
{
    bool force;
    crp_rpc_req req = {.op = regex ? CRP_RPC_REMOVE_BY_REGEX : CRP_RPC_REMOVE_ALL};
    if (regex) {
        if (n < 2 || !is_force(tok, n, 2, &force))
            return CR_INVALID_PARAMS;
        req.u.regex = (crp_rpc_regex_req){tok[1], force};
    } else {
        if (!is_force(tok, n, 1, &force))
            return CR_INVALID_PARAMS;
        req.u.force.force = force;
    }
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    if (st == 0)
        outf(o, " count=%" PRIu64, resp.u.count.count);
    crp_rpc_resp_clear(&resp);
    return st;
}

static int cmd_segments(out_buf *o)
{
    crp_rpc_req req = {.op = CRP_RPC_GET_ALL_SEGMENTS};
    crp_rpc_resp resp;
    int st = call(&req, &resp);
    if (st == 0) {
        outf(o, " names=");
        for (size_t i = 0; i < resp.u.names.n_names; i++)
            outf(o, "%s%s", i ? "," : "", resp.u.names.names[i]);
    }
    crp_rpc_resp_clear(&resp);
    return st;
}

static void out_statuses(out_buf *o, const int32_t *r, size_t n)
{
    outf(o, " r=");
    for (size_t i = 0; i < n; i++)
        outf(o, "%s%d", i ? "," : "", (int)r[i]);
}

static void out_key_results(out_buf *o, const crp_rpc_key_result *r, size_t n)
{
    outf(o, " r=");
    for (size_t i = 0; i < n; i++)
        outf(o, "%s%d", i ? "," : "", (int)r[i].status);
    outf(o, " segs=");
    for (size_t i = 0; i < n; i++) {
        if (i)
            outf(o, ",");
        out_replicas(o, r[i].replicas, r[i].status == 0 ? r[i].n_replicas : 0, '+');
    }
}

/* A batch whose reply is one status per key (statuses shape). */
static int batch_statuses(crp_rpc_req *req, size_t nkeys, int32_t *results_out, out_buf *o)
{
    crp_rpc_resp resp;
    int st = call(req, &resp);
    if (st == 0 && resp.u.statuses.n != nkeys)
        st = CR_INTERNAL_ERROR; /* the master must answer one result per key */
    if (st == 0) {
        if (o != NULL)
            out_statuses(o, resp.u.statuses.results, resp.u.statuses.n);
        if (results_out != NULL)
            memcpy(results_out, resp.u.statuses.results, nkeys * sizeof(int32_t));
    }
    crp_rpc_resp_clear(&resp);
    return st;
}

static int cmd_batch_keys(int op, bool ahead, char **tok, int n, out_buf *o)
{
    char **keys = calloc(CRP_RPC_MAX_BATCH, sizeof(char *));
    if (keys == NULL)
        return CR_ERR_NO_MEMORY;
    bool force = false;
    int st = CR_INVALID_PARAMS;
    if (n < 2 || !is_force(tok, n, 2, &force) || (force && op != CRP_RPC_BATCH_REMOVE))
        goto out;
    size_t nk = split_list(tok[1], keys, CRP_RPC_MAX_BATCH);
    crp_rpc_req req = {.op = (uint16_t)op};
    crp_rpc_resp resp;
    switch (op) {
    case CRP_RPC_BATCH_EXIST:
        req.u.keys = (crp_rpc_keys_req){nk, keys};
        st = batch_statuses(&req, nk, NULL, o);
        break;
    case CRP_RPC_BATCH_REMOVE:
        req.u.batch_remove = (crp_rpc_batch_remove_req){nk, keys, force};
        st = batch_statuses(&req, nk, NULL, o);
        break;
    case CRP_RPC_BATCH_PUT_END:
    case CRP_RPC_BATCH_PUT_REVOKE:
        req.u.owner_keys = (crp_rpc_owner_keys_req){g_cid, nk, keys};
        req.commit_ahead = ahead;
        st = batch_statuses(&req, nk, NULL, o);
        break;
    case CRP_RPC_BATCH_GET_REPLICA_LIST:
        req.u.keys = (crp_rpc_keys_req){nk, keys};
        st = call(&req, &resp);
        if (st == 0 && resp.u.batch_get.n != nk)
            st = CR_INTERNAL_ERROR;
        if (st == 0) {
            out_key_results(o, resp.u.batch_get.results, resp.u.batch_get.n);
            outf(o, " lease=%" PRIu64, resp.u.batch_get.lease_ttl_ms);
        }
        crp_rpc_resp_clear(&resp);
        break;
    default:
        break;
    }
out:
    free(keys);
    return st;
}

static int cmd_batch_put(char **tok, int n, bool end, out_buf *o)
{
    char **keys = calloc(CRP_RPC_MAX_BATCH, sizeof(char *));
    char **ended = calloc(CRP_RPC_MAX_BATCH, sizeof(char *));
    uint64_t *sizes = calloc(CRP_RPC_MAX_BATCH, sizeof(uint64_t));
    int32_t *start_st = calloc(CRP_RPC_MAX_BATCH, sizeof(int32_t));
    int32_t *end_st = calloc(CRP_RPC_MAX_BATCH, sizeof(int32_t));
    int st = CR_ERR_NO_MEMORY;
    if (keys == NULL || ended == NULL || sizes == NULL || start_st == NULL || end_st == NULL)
        goto out;
    st = CR_INVALID_PARAMS;
    uint64_t size;
    crp_rpc_replica_config cfg;
    char *prefs[CRP_RPC_MAX_PREFERRED];
    if (n < 3 || !parse_u64(tok[2], &size) || !parse_opts(tok + 3, n - 3, &cfg, prefs))
        goto out;
    size_t nk = split_list(tok[1], keys, CRP_RPC_MAX_BATCH);
    for (size_t i = 0; i < nk; i++)
        sizes[i] = size;
    crp_rpc_req req = {.op = CRP_RPC_BATCH_PUT_START};
    req.u.batch_put_start = (crp_rpc_batch_put_start_req){g_cid, nk, keys, sizes, cfg};
    req.owned_ms = g_owned_ms;
    crp_rpc_resp resp;
    st = call(&req, &resp);
    if (st == 0 && resp.u.batch_alloc.n != nk)
        st = CR_INTERNAL_ERROR;
    if (st != 0 || !end) {
        if (st == 0)
            out_key_results(o, resp.u.batch_alloc.results, resp.u.batch_alloc.n);
        crp_rpc_resp_clear(&resp);
        goto out;
    }
    /* End the keys that started; report per key the first failure. */
    size_t ne = 0;
    for (size_t i = 0; i < nk; i++) {
        start_st[i] = resp.u.batch_alloc.results[i].status;
        if (start_st[i] == 0)
            ended[ne++] = keys[i];
    }
    out_buf tmp = {malloc(OUT_MAX_BYTES), 0};
    if (tmp.s == NULL) {
        crp_rpc_resp_clear(&resp);
        st = CR_ERR_NO_MEMORY;
        goto out;
    }
    out_key_results(&tmp, resp.u.batch_alloc.results, resp.u.batch_alloc.n);
    crp_rpc_resp_clear(&resp);
    if (ne > 0) {
        crp_rpc_req endreq = {.op = CRP_RPC_BATCH_PUT_END};
        endreq.u.owner_keys = (crp_rpc_owner_keys_req){g_cid, ne, ended};
        st = batch_statuses(&endreq, ne, end_st, NULL);
    }
    if (st == 0) {
        outf(o, " r=");
        for (size_t i = 0, j = 0; i < nk; i++)
            outf(o, "%s%d", i ? "," : "", (int)(start_st[i] != 0 ? start_st[i] : end_st[j++]));
        char *segs = strstr(tmp.s, " segs=");
        if (segs != NULL)
            outf(o, "%s", segs);
    }
    free(tmp.s);
out:
    free(keys);
    free(ended);
    free(sizes);
    free(start_st);
    free(end_st);
    return st;
}

/* Execute one command line; returns false on quit. */
static bool execute(char *line, out_buf *o)
{
    char *tok[MAX_TOKENS];
    int n = 0;
    for (char *save = NULL, *t = strtok_r(line, " \t\r\n", &save); t != NULL && n < MAX_TOKENS;
         t = strtok_r(NULL, " \t\r\n", &save))
        tok[n++] = t;
    if (n >= 3 && strcmp(tok[0], "sleep_ms") == 0) { /* a command sent now, run later */
        usleep((useconds_t)strtoul(tok[1], NULL, 10) * 1000);
        memmove(tok, tok + 2, (size_t)(n - 2) * sizeof(tok[0]));
        n -= 2;
    }
    out_buf fields = {malloc(OUT_MAX_BYTES), 0};
    if (fields.s == NULL) {
        outf(o, "%d", CR_ERR_NO_MEMORY);
        return true;
    }
    fields.s[0] = '\0';
    int st = CR_INVALID_PARAMS;
    bool go_on = true;
    const char *c = n > 0 ? tok[0] : "";
    if (strcmp(c, "mount") == 0)
        st = cmd_mount(tok, n, &fields);
    else if (strcmp(c, "unmount") == 0)
        st = cmd_unmount(tok, n, &fields);
    else if (strcmp(c, "remount") == 0)
        st = n == 1 ? remount_all() : CR_INVALID_PARAMS;
    else if (strcmp(c, "ping") == 0)
        st = cmd_ping(&fields);
    else if (strcmp(c, "put") == 0)
        st = cmd_put(tok, n, true, &fields);
    else if (strcmp(c, "put_start") == 0)
        st = cmd_put(tok, n, false, &fields);
    else if (strcmp(c, "put_end") == 0)
        st = n == 2 ? owner_key_op(CRP_RPC_PUT_END, tok[1]) : CR_INVALID_PARAMS;
    else if (strcmp(c, "put_ahead") == 0)
        st = cmd_put_ahead(tok, n, &fields);
    else if (strcmp(c, "revoke") == 0)
        st = n == 2 ? owner_key_op(CRP_RPC_PUT_REVOKE, tok[1]) : CR_INVALID_PARAMS;
    else if (strcmp(c, "get") == 0)
        st = cmd_get(tok, n, &fields);
    else if (strcmp(c, "exist") == 0)
        st = cmd_exist(tok, n, &fields);
    else if (strcmp(c, "query") == 0)
        st = cmd_query(tok, n, &fields);
    else if (strcmp(c, "remove") == 0)
        st = cmd_remove(tok, n, &fields);
    else if (strcmp(c, "remove_regex") == 0)
        st = cmd_count_op(tok, n, true, &fields);
    else if (strcmp(c, "remove_all") == 0)
        st = cmd_count_op(tok, n, false, &fields);
    else if (strcmp(c, "segments") == 0)
        st = cmd_segments(&fields);
    else if (strcmp(c, "batch_exist") == 0)
        st = cmd_batch_keys(CRP_RPC_BATCH_EXIST, false, tok, n, &fields);
    else if (strcmp(c, "batch_get") == 0)
        st = cmd_batch_keys(CRP_RPC_BATCH_GET_REPLICA_LIST, false, tok, n, &fields);
    else if (strcmp(c, "batch_put_end") == 0)
        st = cmd_batch_keys(CRP_RPC_BATCH_PUT_END, false, tok, n, &fields);
    else if (strcmp(c, "batch_put_ahead") == 0)
        st = cmd_batch_keys(CRP_RPC_BATCH_PUT_END, true, tok, n, &fields);
    else if (strcmp(c, "batch_revoke") == 0)
        st = cmd_batch_keys(CRP_RPC_BATCH_PUT_REVOKE, false, tok, n, &fields);
    else if (strcmp(c, "batch_remove") == 0)
        st = cmd_batch_keys(CRP_RPC_BATCH_REMOVE, false, tok, n, &fields);
    else if (strcmp(c, "batch_put") == 0)
        st = cmd_batch_put(tok, n, true, &fields);
    else if (strcmp(c, "batch_put_start") == 0)
        st = cmd_batch_put(tok, n, false, &fields);
    else if (strcmp(c, "heartbeat") == 0 && n == 2 &&
             (strcmp(tok[1], "on") == 0 || strcmp(tok[1], "off") == 0)) {
        heartbeat_set(strcmp(tok[1], "on") == 0);
        st = 0;
    } else if (strcmp(c, "remounts") == 0) {
        st = 0;
        outf(&fields, " count=%d last=%d", atomic_load(&g_remounts),
             atomic_load(&g_last_remount_status));
    } else if (strcmp(c, "view") == 0) {
        st = 0;
        outf(&fields, " view=%" PRIu64 " local=%d", crc_master_view(g_master),
             crc_master_on_local_socket(g_master) ? 1 : 0);
    } else if (strcmp(c, "quit") == 0) {
        st = 0;
        go_on = false;
    }
    outf(o, "%d%s", st, fields.s);
    free(fields.s);
    return go_on;
}

int main(int argc, char **argv)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGPIPE, SIG_IGN);
    if (argc != 2) {
        fprintf(stderr, "usage: %s HOST:PORT\n", argv[0]);
        return 2;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g_hb_cond, &ca);
    pthread_condattr_destroy(&ca);
    while (g_cid.hi == 0 && g_cid.lo == 0)
        crb_random_bytes(&g_cid, sizeof(g_cid));
    int rc = crc_master_connect(argv[1], g_cid, CALL_TIMEOUT_MS, &g_master);
    if (rc < 0) {
        printf("FAILED %d %s\n", rc, cr_last_error_message());
        fflush(stdout);
        return 1;
    }
    printf("READY %016" PRIx64 "%016" PRIx64 "\n", g_cid.hi, g_cid.lo);
    fflush(stdout);
    char *line = malloc(LINE_MAX_BYTES);
    out_buf o = {malloc(OUT_MAX_BYTES), 0};
    if (line == NULL || o.s == NULL)
        return 1;
    bool go_on = true;
    while (go_on && fgets(line, LINE_MAX_BYTES, stdin) != NULL) {
        o.len = 0;
        o.s[0] = '\0';
        go_on = execute(line, &o);
        printf("%s\n", o.s);
        fflush(stdout);
    }
    heartbeat_set(false);
    crc_master_close(g_master);
    pthread_cond_destroy(&g_hb_cond);
    free(line);
    free(o.s);
    return 0;
}
