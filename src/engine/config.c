/*
 * config.c - defaults and validation of cr_engine_config.
 *
 * Every rejected value produces CR_ERR_INVALID_CONFIG with a message naming
 * the field and the value, never an abort.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/internal.h"

#define DEFAULT_WORKERS    2
#define DEFAULT_LANES      4
#define DEFAULT_SLICE      (1ull << 20)
#define DEFAULT_CONNECT_MS 3000
#define DEFAULT_REQUEST_MS 30000
#define MAX_WORKERS        64
#define MAX_LANES          64
#define MIN_SLICE          4096ull
#define MAX_SLICE          (64ull << 20)
#define DEFAULT_MAX_CONNS  4096
/* Mooncake's key prefix, so operators find descriptors where Mooncake puts them. */
#define CRE_DEFAULT_METADATA_PREFIX "mooncake"

void cr_engine_config_init(cr_engine_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->local_hostname = "127.0.0.1";
    cfg->metadata = "P2PHANDSHAKE";
    cfg->metadata_prefix = CRE_DEFAULT_METADATA_PREFIX;
    cfg->protocol = "auto";
}

static int copy_str(char *dst, size_t cap, const char *src, const char *field)
{
    size_t n = strlen(src);
    if (n == 0 || n >= cap)
        return crb_error(CR_ERR_INVALID_CONFIG, "%s '%s' is empty or longer than %zu bytes", field,
                         src, cap - 1);
    memcpy(dst, src, n + 1);
    return 0;
}

int cre_config_apply(cr_engine *e, const cr_engine_config *cfg)
{
    if (cfg == NULL)
        return crb_error(CR_INVALID_PARAMS, "config is NULL");
    if (cfg->struct_size < offsetof(cr_engine_config, shared_secret) + sizeof(char *) ||
        cfg->struct_size > 4096)
        return crb_error(CR_ERR_INVALID_CONFIG,
                         "struct_size %u is not a cr_engine_config (call cr_engine_config_init)",
                         cfg->struct_size);

    const char *hostname = cfg->local_hostname ? cfg->local_hostname : "127.0.0.1";
    uint16_t host_port = 0;
    if (crb_parse_hostport(hostname, e->hostname, &host_port) < 0)
        return crb_error(CR_ERR_INVALID_CONFIG, "local_hostname '%s' is not host or host:port",
                         hostname);
    e->rpc_port = cfg->rpc_port ? cfg->rpc_port : host_port;

    /* Which transports this names is decided by cre_transports_install. */
    const char *proto = cfg->protocol ? cfg->protocol : "auto";
    if (strlen(proto) == 0 || strlen(proto) >= sizeof(e->protocol))
        return crb_error(CR_ERR_INVALID_CONFIG, "protocol '%.64s' is empty or too long", proto);
    memcpy(e->protocol, proto, strlen(proto) + 1);

    /* Mooncake's key layout: "mooncake/" or, with MC_METADATA_CLUSTER_ID,
     * "mooncake/<id>/" in front of "ram/<segment>" and "rpc_meta/<segment>". */
    const char *prefix = cfg->metadata_prefix ? cfg->metadata_prefix : CRE_DEFAULT_METADATA_PREFIX;
    char clustered[sizeof(e->metadata_prefix)];
    const char *cluster = getenv("MC_METADATA_CLUSTER_ID");
    if (strcmp(prefix, CRE_DEFAULT_METADATA_PREFIX) == 0 && cluster != NULL && cluster[0] != '\0') {
        size_t n = strlen(cluster);
        while (n > 0 && cluster[n - 1] == '/')
            n--;
        if ((size_t)snprintf(clustered, sizeof(clustered), "%s/%.*s", prefix, (int)n, cluster) >=
            sizeof(clustered))
            return crb_error(CR_ERR_INVALID_CONFIG, "MC_METADATA_CLUSTER_ID '%.200s' is too long",
                             cluster);
        prefix = clustered;
    }
    int rc = copy_str(e->metadata_prefix, sizeof(e->metadata_prefix), prefix, "metadata_prefix");
    if (rc < 0)
        return rc;

    e->n_workers = cfg->worker_threads ? cfg->worker_threads : DEFAULT_WORKERS;
    if (e->n_workers > MAX_WORKERS)
        return crb_error(CR_ERR_INVALID_CONFIG, "worker_threads %u exceeds %d", cfg->worker_threads,
                         MAX_WORKERS);
    e->lanes_per_peer = cfg->lanes_per_peer ? cfg->lanes_per_peer : DEFAULT_LANES;
    if (e->lanes_per_peer > MAX_LANES)
        return crb_error(CR_ERR_INVALID_CONFIG, "lanes_per_peer %u exceeds %d", cfg->lanes_per_peer,
                         MAX_LANES);
    e->slice_size = cfg->slice_size ? cfg->slice_size : DEFAULT_SLICE;
    if (e->slice_size < MIN_SLICE || e->slice_size > MAX_SLICE)
        return crb_error(CR_ERR_INVALID_CONFIG, "slice_size %llu is outside [%llu, %llu]",
                         (unsigned long long)cfg->slice_size, MIN_SLICE, MAX_SLICE);
    e->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : DEFAULT_CONNECT_MS;
    e->request_timeout_ms = cfg->request_timeout_ms ? cfg->request_timeout_ms : DEFAULT_REQUEST_MS;
    if (e->connect_timeout_ms > 3600000 || e->request_timeout_ms > 3600000)
        return crb_error(CR_ERR_INVALID_CONFIG, "timeouts above one hour (%u, %u ms) are refused",
                         e->connect_timeout_ms, e->request_timeout_ms);

        /* Fields added after the first release are read only if the caller's
         * struct has them. */
#define CFG_HAS(field) (cfg->struct_size >= offsetof(cr_engine_config, field) + sizeof(cfg->field))
    e->shm_allow_any_user = CFG_HAS(shm_allow_any_user) && cfg->shm_allow_any_user;
    e->cma_enabled = !(CFG_HAS(disable_cma) && cfg->disable_cma);
    e->max_connections =
        CFG_HAS(max_connections) && cfg->max_connections ? cfg->max_connections : DEFAULT_MAX_CONNS;
    if (CFG_HAS(device_name) && cfg->device_name != NULL && cfg->device_name[0] != '\0') {
        if (strlen(cfg->device_name) > 1024)
            return crb_error(CR_ERR_INVALID_CONFIG, "device_name of %zu bytes is too long",
                             strlen(cfg->device_name));
        e->device_names = strdup(cfg->device_name);
        if (e->device_names == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "copying device_name");
    }
#undef CFG_HAS

    if (cfg->shared_secret != NULL && cfg->shared_secret[0] != '\0') {
        e->secret = strdup(cfg->shared_secret);
        if (e->secret == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "copying shared_secret");
        e->secret_len = strlen(e->secret);
    }

    /* Host identity: lets peers tell they share a host. Tests may simulate
     * several hosts with CRESCENT_HOST_ID. */
    const char *hid = getenv("CRESCENT_HOST_ID");
    char buf[128] = "";
    if (hid == NULL || hid[0] == '\0') {
        FILE *f = fopen("/etc/machine-id", "r");
        if (f != NULL) {
            if (fgets(buf, sizeof(buf), f) != NULL)
                buf[strcspn(buf, "\r\n")] = '\0';
            fclose(f);
        }
        if (buf[0] == '\0')
            snprintf(buf, sizeof(buf), "host-%.100s", e->hostname);
        hid = buf;
    }
    snprintf(e->host_id, sizeof(e->host_id), "%s", hid);

    /* How waits and the workers poll before they sleep (base/spin.h):
     * adaptive brief windows unless CRESCENT_BUSY_POLL_US fixes one or 0
     * turns polling off (design §2.7: spin briefly, then sleep). */
    int rc_spin = crb_spin_mode_from_env(CR_ERR_INVALID_CONFIG, &e->spin_mode_ns);
    if (rc_spin < 0)
        return rc_spin;
    crb_spin_init(&e->batch_spin, e->spin_mode_ns);
    /* A synchronous call's one small tcp request is sent and its reply read
     * by the calling thread (tcp/sync.c); 0 sends it through the lanes. */
    const char *cr = getenv("CRESCENT_TCP_CALLER_READS");
    e->tcp_caller_reads = true;
    if (cr != NULL && cr[0] != '\0') {
        if (strcmp(cr, "0") != 0 && strcmp(cr, "1") != 0)
            return crb_error(CR_ERR_INVALID_CONFIG, "CRESCENT_TCP_CALLER_READS '%s' is not 0 or 1",
                             cr);
        e->tcp_caller_reads = cr[0] == '1';
    }
    return 0;
}
