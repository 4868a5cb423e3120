/*
 * client.c - store client lifecycle: setup (engine, memory, master
 * connections, mount), the heartbeat thread (ping on its own connection;
 * "remount needed" → remount the segment), close, and small helpers shared
 * by the put/get paths (key checks, the segment-handle cache, RPC calls).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "store/internal.h"
#include "store/offload.h"
#include "store/thin.h"

void cr_store_config_init(cr_store_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->local_hostname = "127.0.0.1";
    cfg->metadata = "P2PHANDSHAKE";
    cfg->global_segment_size = 64ull << 20;
    cfg->local_buffer_size = 16ull << 20;
    cfg->protocol = "auto";
    cfg->master_address = "127.0.0.1:50051";
    cfg->transfer_timeout_ms = 30000;
    cfg->rpc_timeout_ms = 5000;
    cfg->heartbeat_interval_ms = 1000;
}

void cr_replicate_config_init(cr_replicate_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->replica_num = 1;
}

void crc_config_to_wire(const cr_replicate_config *cfg, crp_rpc_replica_config *out)
{
    cr_replicate_config d;
    if (cfg == NULL) {
        cr_replicate_config_init(&d);
        cfg = &d;
    }
    *out = (crp_rpc_replica_config){
        .replica_num = cfg->replica_num,
        .hard_pin = cfg->hard_pin,
        .soft_pin_action = (uint8_t)cfg->soft_pin_action,
        .has_soft_pin_ttl = cfg->has_soft_pin_ttl,
        .soft_pin_ttl_ms = cfg->soft_pin_ttl_ms,
        .n_preferred = cfg->n_preferred,
        .preferred_segments = (char **)cfg->preferred_segments,
        .prefer_same_node = cfg->prefer_same_node,
    };
}

int crc_enter(cr_store *s, crc_guard *g)
{
    if (s == NULL)
        return crb_error(CR_INVALID_PARAMS, "store handle is NULL");
    atomic_fetch_add(&s->calls, 1);
    if (atomic_load(&s->closed)) {
        crc_leave(s);
        return crb_error(CR_UNAVAILABLE_IN_CURRENT_STATUS, "store is closed");
    }
    g->s = s;
    return 0;
}

void crc_leave(cr_store *s)
{
    if (atomic_fetch_sub(&s->calls, 1) == 1 && atomic_load(&s->closed)) {
        pthread_mutex_lock(&s->calls_lock);
        pthread_cond_broadcast(&s->calls_done);
        pthread_mutex_unlock(&s->calls_lock);
    }
}

int crc_check_open(cr_store *s)
{
    if (s == NULL)
        return crb_error(CR_INVALID_PARAMS, "store handle is NULL");
    if (atomic_load(&s->closed))
        return crb_error(CR_UNAVAILABLE_IN_CURRENT_STATUS, "store is closed");
    return 0;
}

int crc_check_key(const char *key)
{
    if (key == NULL || key[0] == '\0')
        return crb_error(CR_INVALID_KEY, "key is empty");
    size_t n = strnlen(key, CR_STORE_MAX_KEY + 1);
    if (n > CR_STORE_MAX_KEY)
        return crb_error(CR_INVALID_KEY, "key of more than %d bytes", CR_STORE_MAX_KEY);
    return 0;
}

/* A reader's wait for a staged copy (crc_call): every STAGE_POLL_US for STAGE_FAST_MS,
 * then doubling up to STAGE_SLOW_US. */
#define STAGE_POLL_US 250
#define STAGE_FAST_MS 50
#define STAGE_SLOW_US 4000
/* With a master that holds such replies (CRP_RPC_CAP_STAGE_WAIT), each ask may wait there
 * this long for the stage to land ("swt"); what is left of the deadline bounds it. */
#define STAGE_HOLD_MS 200

/* Count the disk-served replicas of a get reply (a staged copy has segment epoch 0). */
static void count_disk_reads(cr_store *s, const crp_rpc_resp *r)
{
    uint64_t n = 0;
    if (r->op == CRP_RPC_GET_REPLICA_LIST && r->status == 0)
        n = r->u.get.n_replicas == 1 && r->u.get.replicas[0].epoch == 0;
    else if (r->op == CRP_RPC_BATCH_GET_REPLICA_LIST && r->status == 0)
        for (size_t i = 0; i < r->u.batch_get.n; i++)
            n += r->u.batch_get.results[i].status == 0 &&
                 r->u.batch_get.results[i].n_replicas == 1 &&
                 r->u.batch_get.results[i].replicas[0].epoch == 0;
    if (n > 0)
        atomic_fetch_add(&s->disk_reads, n);
}

/* A batch get's deadline (0: none) for its rounds' waits on stages, set by the batch for
 * its calling thread (crc_stage_deadline, store/get.c): a later round, asking again for
 * the keys still being staged, waits no longer than what is left of it, so the batch ends
 * within one RPC timeout of its start, not within two. */
static _Thread_local uint64_t stage_deadline_ms;

void crc_stage_deadline(uint64_t deadline_ms)
{
    stage_deadline_ms = deadline_ms;
}

int crc_call(cr_store *s, const crp_rpc_req *req, crp_rpc_resp *resp)
{
    return crc_call_sent(s, req, resp, NULL, NULL);
}

/* How long the master may hold this ask of a get for a stage ("swt"): 0 (answer at once)
 * when it cannot hold replies or too little of the deadline is left for a wait to help. */
static uint32_t stage_hold_ms(cr_store *s, uint64_t deadline)
{
    if (!(crc_master_caps(s->master) & CRP_RPC_CAP_STAGE_WAIT))
        return 0;
    uint64_t now = crb_now_ms();
    uint64_t left = deadline > now ? deadline - now : 0;
    if (left < 20)
        return 0;
    left -= 10; /* the reply's way back */
    return left < STAGE_HOLD_MS ? (uint32_t)left : STAGE_HOLD_MS;
}

int crc_call_sent(cr_store *s, const crp_rpc_req *req, crp_rpc_resp *resp, crc_sent_fn sent,
                  void *sent_arg)
{
    if (req->op != CRP_RPC_GET_REPLICA_LIST && req->op != CRP_RPC_BATCH_GET_REPLICA_LIST)
        return crc_master_call_sent(s->master, req, resp, (int)s->rpc_timeout_ms, sent, sent_arg);
    uint64_t first = crb_now_ms(), last = first;
    uint64_t deadline = first + s->rpc_timeout_ms;
    if (stage_deadline_ms != 0 && stage_deadline_ms < deadline)
        deadline = stage_deadline_ms;
    /* A get of a disk-only value asks the master to hold the reply until the stage lands
     * (a memory hit is answered at once either way). */
    crp_rpc_req ask = *req;
    ask.stage_wait_ms = stage_hold_ms(s, deadline);
    int rc = crc_master_call_sent(s->master, &ask, resp, (int)s->rpc_timeout_ms, sent, sent_arg);
    /* A disk-only value is being staged by its holder (docs/disk-tier.md): ask again until
     * it is, within the RPC deadline. (A batch is asked again whole while none of its keys
     * is ready; the other keys' reads of the earlier replies end with their lease TTL.) A
     * stage takes a disk read (~2 ms
     * for 1 MiB here) plus the holder's two heartbeats, so the wait is asked about every
     * STAGE_POLL_US while it is young (the staged copy is taken within that of its
     * arrival, where a doubling back-off to 4 ms left it waiting ~1 ms at p50), and with
     * the doubling back-off after STAGE_FAST_MS (a holder with a long queue). A master
     * with CRP_RPC_CAP_STAGE_WAIT holds each ask instead (STAGE_HOLD_MS), answering once a
     * holder's heartbeat reported the stage: no sleep here, no asks in between. */
    uint32_t wait_us = STAGE_POLL_US;
    while (rc == 0 && crp_rpc_resp_is_staging(resp) && crb_now_ms() < deadline) {
        crp_rpc_resp_clear(resp);
        ask.stage_wait_ms = stage_hold_ms(s, deadline);
        if (ask.stage_wait_ms == 0) {
            struct timespec ts = {0, (long)wait_us * 1000};
            nanosleep(&ts, NULL);
            if (crb_now_ms() - first >= STAGE_FAST_MS)
                wait_us = wait_us < STAGE_SLOW_US / 2 ? wait_us * 2 : STAGE_SLOW_US;
        }
        last = crb_now_ms();
        rc = crc_master_call(s->master, &ask, resp, (int)s->rpc_timeout_ms);
    }
    if (rc != 0)
        return rc;
    /* The caller measures the lease from before its first request; this one was granted
     * no earlier than `last`. */
    uint64_t late = last - first;
    if (resp->op == CRP_RPC_GET_REPLICA_LIST && resp->status == 0)
        resp->u.get.lease_ttl_ms += late;
    else if (resp->status == 0)
        resp->u.batch_get.lease_ttl_ms += late;
    count_disk_reads(s, resp);
    return rc;
}

int crc_segment_handle(cr_store *s, const char *name, cr_segment_handle *out)
{
    pthread_mutex_lock(&s->seg_lock);
    for (size_t i = 0; i < s->n_segs; i++) {
        if (strcmp(s->segs[i].name, name) == 0) {
            *out = s->segs[i].handle;
            pthread_mutex_unlock(&s->seg_lock);
            return 0;
        }
    }
    pthread_mutex_unlock(&s->seg_lock);
    /* Open outside the lock: it talks to the peer. */
    cr_segment_handle h;
    int rc = cr_engine_open_segment(s->engine, name, &h);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&s->seg_lock);
    if (s->n_segs == s->cap_segs) {
        size_t ncap = s->cap_segs ? s->cap_segs * 2 : 8;
        crc_seg_cache_entry *ns = realloc(s->segs, ncap * sizeof(*ns));
        if (ns == NULL) {
            pthread_mutex_unlock(&s->seg_lock);
            return crb_error(CR_ERR_NO_MEMORY, "segment cache");
        }
        s->segs = ns;
        s->cap_segs = ncap;
    }
    char *copy = strdup(name);
    if (copy != NULL)
        s->segs[s->n_segs++] = (crc_seg_cache_entry){copy, h};
    pthread_mutex_unlock(&s->seg_lock);
    *out = h;
    return 0;
}

static int mount_segment(cr_store *s, crc_master *conn, bool remount)
{
    crp_rpc_segment seg = {s->segment_name, (uint64_t)(uintptr_t)s->segment, s->segment_size, 1};
    /* A client that contributes no memory still registers itself (a remount
     * of zero segments), so its heartbeats are answered OK. */
    if (s->segment_size == 0)
        remount = true;
    crp_rpc_req req = {.op = remount ? CRP_RPC_REMOUNT_SEGMENT : CRP_RPC_MOUNT_SEGMENT};
    if (remount)
        req.u.remount = (crp_rpc_remount_req){s->client_id, s->segment_size ? 1 : 0, &seg};
    else
        req.u.mount = (crp_rpc_mount_req){s->client_id, seg};
    crp_rpc_resp resp;
    int rc = crc_master_call(conn, &req, &resp, (int)s->rpc_timeout_ms);
    if (rc < 0)
        return rc;
    rc = resp.status;
    if (rc < 0)
        crb_error(rc, "%s of segment %s refused: %s", remount ? "remount" : "mount",
                  s->segment_name, resp.message ? resp.message : cr_strerror(rc));
    crp_rpc_resp_clear(&resp);
    return rc;
}

static void *heartbeat_main(void *arg)
{
    cr_store *s = arg;
    uint64_t next = crb_now_ms();
    int last_remount = 0; /* logged once per change, not once a second */
    while (!atomic_load(&s->stop)) {
        /* reads and stale grants given back after the last call do not wait for the next */
        crc_grants_expire(s);
        crc_master_flush_later(s->master, 10 * 1000 * 1000ull, (int)s->rpc_timeout_ms);
        if (crb_now_ms() < next) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        next = crb_now_ms() + s->heartbeat_interval_ms;
        crp_rpc_req req = {.op = CRP_RPC_PING};
        req.u.client.client_id = s->client_id;
        crp_rpc_resp resp;
        int rc = crc_master_call(s->heartbeat_conn, &req, &resp, (int)s->rpc_timeout_ms);
        if (rc < 0) {
            crb_log(CRB_LOG_INFO, "store %s: heartbeat failed: %s", s->segment_name,
                    cr_last_error_message());
            continue;
        }
        bool remount = resp.status == 0 && resp.u.ping.client_status == CRP_RPC_CLIENT_NEED_REMOUNT;
        crp_rpc_resp_clear(&resp);
        if (remount) {
            rc = mount_segment(s, s->heartbeat_conn, true);
            if (rc == 0 || rc != last_remount)
                crb_log(rc == 0 ? CRB_LOG_WARN : CRB_LOG_ERROR,
                        "store %s: master asked for a remount: %s", s->segment_name,
                        rc == 0 ? "done" : cr_last_error_message());
            last_remount = rc;
            if (rc == 0)
                atomic_fetch_add(&s->remounts, 1);
        }
    }
    return NULL;
}

static int copy_field(char *dst, size_t cap, const char *v, const char *dflt, const char *field)
{
    const char *src = v != NULL ? v : dflt;
    if (strlen(src) >= cap)
        return crb_error(CR_INVALID_PARAMS, "%s '%s' is too long", field, src);
    strcpy(dst, src);
    return 0;
}

/* CRESCENT_GET_SPECULATE: single gets read a cached location while they ask the
 * master (get.c): "1" or "all" (default): values of any size; "large": values of at
 * least CRC_SPECULATE_MIN bytes; "0": never. */
int crc_speculate_min(const char *v, uint64_t *min_out)
{
    if (v == NULL || v[0] == '\0' || strcmp(v, "1") == 0 || strcasecmp(v, "all") == 0)
        *min_out = 1;
    else if (strcasecmp(v, "large") == 0)
        *min_out = CRC_SPECULATE_MIN;
    else if (strcmp(v, "0") == 0)
        *min_out = 0;
    else
        return crb_error(CR_INVALID_PARAMS, "CRESCENT_GET_SPECULATE='%s' is not 0, 1, all or large",
                         v);
    return 0;
}

static int speculate_mode(cr_store *s)
{
    uint64_t min = 0;
    int rc = crc_speculate_min(getenv("CRESCENT_GET_SPECULATE"), &min);
    if (rc < 0 || min == 0)
        return rc;
    s->spec_min = min;
    return crc_loc_create(&s->loc);
}

/* CRESCENT_LEASE_RELEASE: "batched" (default) or "now" (store/internal.h). */
static int release_mode(cr_store *s)
{
    const char *v = getenv("CRESCENT_LEASE_RELEASE");
    if (v == NULL || v[0] == '\0' || strcasecmp(v, "batched") == 0)
        s->release_at_once = false;
    else if (strcasecmp(v, "now") == 0)
        s->release_at_once = true;
    else
        return crb_error(CR_INVALID_PARAMS, "CRESCENT_LEASE_RELEASE='%s' is not batched or now", v);
    return 0;
}

/* CRESCENT_PUT_COMMIT_AHEAD (default 1): a put's end goes before its copy, through a grant
 * or in a batch (docs/WIRE.md, "Commit ahead"). */
static int ahead_mode(cr_store *s)
{
    const char *v = getenv("CRESCENT_PUT_COMMIT_AHEAD");
    if (v != NULL && v[0] != '\0' && strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
        return crb_error(CR_INVALID_PARAMS, "CRESCENT_PUT_COMMIT_AHEAD='%s' is not 0 or 1", v);
    s->put_ahead = v == NULL || strcmp(v, "0") != 0;
    return 0;
}

int cr_store_setup(const cr_store_config *cfg, cr_store **out)
{
    if (cfg == NULL || out == NULL || cfg->struct_size < sizeof(uint32_t))
        return crb_error(CR_INVALID_PARAMS, "cr_store_setup: NULL config/out or uninitialised "
                                            "config (call cr_store_config_init)");
    if (cfg->local_buffer_size > 0 && cfg->local_buffer_size < 4096)
        return crb_error(CR_INVALID_PARAMS, "local_buffer_size %llu is below 4 KiB",
                         (unsigned long long)cfg->local_buffer_size);
    cr_store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "store");
    pthread_mutex_init(&s->staging_lock, NULL);
    pthread_cond_init(&s->staging_freed, NULL);
    pthread_mutex_init(&s->seg_lock, NULL);
    pthread_mutex_init(&s->calls_lock, NULL);
    pthread_cond_init(&s->calls_done, NULL);
    s->transfer_timeout_ms = cfg->transfer_timeout_ms ? cfg->transfer_timeout_ms : 30000;
    s->rpc_timeout_ms = cfg->rpc_timeout_ms ? cfg->rpc_timeout_ms : 5000;
    s->heartbeat_interval_ms = cfg->heartbeat_interval_ms ? cfg->heartbeat_interval_ms : 1000;
    int rc = copy_field(s->master_address, sizeof(s->master_address), cfg->master_address,
                        "127.0.0.1:50051", "master_address");
    if (rc == 0)
        rc = crc_copy_mode(&s->copy_staged);
    if (rc == 0)
        rc = speculate_mode(s);
    if (rc == 0)
        rc = release_mode(s);
    if (rc == 0)
        rc = ahead_mode(s);
    if (rc == 0)
        rc = crc_grants_create(s);
    if (rc < 0)
        goto err_destroy;

    bool has_engine_field =
        cfg->struct_size >= offsetof(cr_store_config, engine) + sizeof(cfg->engine);
    if (has_engine_field && cfg->engine != NULL) {
        s->engine = cfg->engine; /* borrowed */
    } else {
        cr_engine_config ec;
        cr_engine_config_init(&ec);
        if (cfg->local_hostname)
            ec.local_hostname = cfg->local_hostname;
        if (cfg->metadata)
            ec.metadata = cfg->metadata;
        if (cfg->protocol)
            ec.protocol = cfg->protocol;
        ec.request_timeout_ms = s->transfer_timeout_ms;
        rc = cr_engine_create(&ec, &s->engine);
        if (rc < 0)
            goto err_destroy;
        s->owns_engine = true;
    }
    cr_engine_segment_name(s->engine, s->segment_name, sizeof(s->segment_name));

    s->segment_size = cfg->global_segment_size;
    bool has_offload = cfg->struct_size >=
                       offsetof(cr_store_config, ssd_offload_path) + sizeof(cfg->ssd_offload_path);
    bool disk_tier = has_offload && cfg->enable_ssd_offload;
    int populate = CRC_POPULATE_LAZY;
    if (s->segment_size > 0) {
        rc = crc_populate_mode(disk_tier, &populate);
        if (rc == 0)
            rc = cr_alloc_shared(s->segment_size, (void **)&s->segment);
        if (rc == 0 && populate == CRC_POPULATE_MOUNT)
            rc = crc_populate_now(s);
        if (rc == 0)
            rc = cr_engine_register(s->engine, s->segment, s->segment_size, "cpu:0", true);
        if (rc == 0)
            s->segment_registered = true;
        if (rc < 0)
            goto err_destroy;
    }
    s->staging_size = cfg->local_buffer_size;
    if (s->staging_size > 0) {
        rc = cr_alloc_shared(s->staging_size, (void **)&s->staging);
        if (rc == 0)
            rc = cr_engine_register(s->engine, s->staging, s->staging_size, "cpu:0", false);
        if (rc == 0)
            s->staging_registered = true;
        if (rc == 0)
            rc = crb_oa_create(s->staging_size, 64, NULL, &s->staging_oa);
        if (rc < 0)
            goto err_destroy;
    }
    crb_random_bytes(&s->client_id, sizeof(s->client_id));
    rc = crc_master_connect(s->master_address, s->client_id, (int)s->rpc_timeout_ms, &s->master);
    if (rc == 0)
        rc = crc_master_connect(s->master_address, s->client_id, (int)s->rpc_timeout_ms,
                                &s->heartbeat_conn);
    bool has_tenant =
        cfg->struct_size >= offsetof(cr_store_config, tenant_id) + sizeof(cfg->tenant_id);
    if (rc == 0 && has_tenant && cfg->tenant_id != NULL) /* keys in the tenant's namespace */
        rc = crc_master_set_tenant(s->master, cfg->tenant_id);
    if (rc == 0)
        rc = mount_segment(s, s->master, false);
    if (rc < 0)
        goto err_destroy;
    if (pthread_create(&s->heartbeat_thread, NULL, heartbeat_main, s) != 0) {
        rc = crb_error(CR_ERR_SYSTEM, "starting the heartbeat thread");
        goto err_destroy;
    }
    s->heartbeat_running = true;
    if (populate == CRC_POPULATE_BACKGROUND && crc_populate_start(s) < 0)
        crb_log(CRB_LOG_WARN, "store %s: %s; the segment stays lazy", s->segment_name,
                cr_last_error_message());
    if (disk_tier) {
        rc = crc_off_start(s, cfg->ssd_offload_path, &s->off);
        if (rc < 0)
            goto err_destroy;
    }
    crb_log(CRB_LOG_INFO, "store %s: %llu-byte segment mounted at %s", s->segment_name,
            (unsigned long long)s->segment_size, s->master_address);
    *out = s;
    return 0;

err_destroy : {
    char detail[512];
    snprintf(detail, sizeof(detail), "%s", cr_last_error_message());
    cr_store_destroy(s);
    return crb_error(rc, "store setup: %s", detail);
}
}

int cr_store_close(cr_store *s)
{
    if (s == NULL || atomic_exchange(&s->closed, true))
        return 0;
    /* Calls that entered before `closed` was set finish first; later ones
     * fail with CR_UNAVAILABLE_IN_CURRENT_STATUS without touching anything. */
    pthread_mutex_lock(&s->calls_lock);
    while (atomic_load(&s->calls) > 0)
        pthread_cond_wait(&s->calls_done, &s->calls_lock);
    pthread_mutex_unlock(&s->calls_lock);
    if (cr_store_is_thin(s)) {
        crc_thin_close(s);
        return 0;
    }
    atomic_store(&s->stop, true);
    crc_populate_stop(s);
    if (s->heartbeat_running)
        pthread_join(s->heartbeat_thread, NULL);
    s->heartbeat_running = false;
    crc_off_stop(s, s->off); /* before the connections and the engine go */
    s->off = NULL;
    if (s->master != NULL) /* grants and reads given back, before the connection goes */
        crc_grants_release(s);
    if (s->master != NULL)
        crc_master_flush_later(s->master, 0, (int)s->rpc_timeout_ms);
    if (s->master != NULL && s->segment_size > 0) {
        crp_rpc_req req = {.op = CRP_RPC_UNMOUNT_SEGMENT};
        req.u.unmount = (crp_rpc_unmount_req){s->client_id, s->segment_name};
        crp_rpc_resp resp;
        if (crc_master_call(s->master, &req, &resp, (int)s->rpc_timeout_ms) == 0)
            crp_rpc_resp_clear(&resp);
    }
    crc_master_close(s->heartbeat_conn);
    crc_master_close(s->master);
    s->heartbeat_conn = s->master = NULL;
    /* The engine lets go of the memory first: an owned engine is destroyed,
     * a borrowed one unregisters our buffers (a barrier: no transfer touches
     * them afterwards) and lives on. */
    if (s->owns_engine) {
        cr_engine_destroy(s->engine);
    } else if (s->engine != NULL) {
        if (s->segment_registered)
            cr_engine_unregister(s->engine, s->segment);
        if (s->staging_registered)
            cr_engine_unregister(s->engine, s->staging);
    }
    s->engine = NULL;
    crb_oa_destroy(s->staging_oa);
    s->staging_oa = NULL;
    cr_free_shared(s->segment);
    cr_free_shared(s->staging);
    s->segment = s->staging = NULL;
    return 0;
}

void cr_store_destroy(cr_store *s)
{
    if (s == NULL)
        return;
    if (cr_store_is_thin(s))
        return crc_thin_destroy(s);
    cr_store_close(s);
    for (size_t i = 0; i < s->n_segs; i++)
        free(s->segs[i].name);
    free(s->segs);
    crc_loc_destroy(s->loc);
    crc_grants_destroy(s);
    pthread_mutex_destroy(&s->staging_lock);
    pthread_cond_destroy(&s->staging_freed);
    pthread_mutex_destroy(&s->seg_lock);
    pthread_mutex_destroy(&s->calls_lock);
    pthread_cond_destroy(&s->calls_done);
    free(s);
}

int cr_store_get_stats_get(cr_store *s, cr_store_get_stats *out)
{
    if (s == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "get_stats: NULL store or out");
    if (cr_store_is_thin(s))
        return crb_error(CR_UNAVAILABLE_IN_CURRENT_MODE,
                         "get_stats: a thin client's gets run in crescent-client");
    *out = (cr_store_get_stats){s->loc != NULL, atomic_load(&s->spec_reads),
                                atomic_load(&s->spec_hits)};
    return 0;
}

int cr_store_health(cr_store *s)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_health(s);
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    crp_rpc_req req = {.op = CRP_RPC_PING};
    req.u.client.client_id = s->client_id;
    crp_rpc_resp resp;
    rc = crc_call(s, &req, &resp);
    if (rc < 0)
        return rc;
    rc = resp.status;
    if (rc == 0 && resp.u.ping.client_status == CRP_RPC_CLIENT_NEED_REMOUNT)
        rc = crb_error(CR_UNAVAILABLE_IN_CURRENT_STATUS,
                       "segment %s is not mounted at the master (a remount is pending; the "
                       "heartbeat retries it)",
                       s->segment_name);
    else if (rc == 0 && resp.u.ping.fenced_ms > 0)
        rc = crb_error(CR_ERR_SEGMENT_FENCED,
                       "segment %s accepts no allocations for %llu more ms: reads of memory a "
                       "previous segment of this name had may still be running",
                       s->segment_name, (unsigned long long)resp.u.ping.fenced_ms);
    crp_rpc_resp_clear(&resp);
    return rc;
}

int cr_store_hostname(cr_store *s, char *buf, size_t len)
{
    if (cr_store_is_thin(s))
        return crc_thin_hostname(s, buf, len);
    if (s == NULL || buf == NULL)
        return crb_error(CR_INVALID_PARAMS, "hostname: NULL argument");
    size_t n = strlen(s->segment_name);
    if (n + 1 > len)
        return crb_error(CR_BUFFER_OVERFLOW, "hostname needs %zu bytes", n + 1);
    memcpy(buf, s->segment_name, n + 1);
    return 0;
}

cr_engine *cr_store_engine(cr_store *s)
{
    return s ? s->engine : NULL;
}

int cr_store_register_buffer(cr_store *s, void *buf, size_t len)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_register(s, buf, len);
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (buf == NULL || len == 0)
        return crb_error(CR_INVALID_PARAMS, "register_buffer: NULL buffer or length 0");
    /* "*": host or CUDA device memory, whatever the engine detects */
    return cr_engine_register(s->engine, buf, len, "*", false);
}

int cr_store_unregister_buffer(cr_store *s, void *buf)
{
    CRC_ENTER(s);
    if (cr_store_is_thin(s))
        return crc_thin_unregister(s, buf);
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    return cr_engine_unregister(s->engine, buf);
}

int cr_store_offload_stats_get(cr_store *s, cr_store_offload_stats *out)
{
    if (s == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "cr_store_offload_stats_get: NULL argument");
    crc_off_stats(s->off, out);
    out->rpc_reads = atomic_load(&s->disk_reads);
    return 0;
}
