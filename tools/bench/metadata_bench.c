/*
 * metadata_bench.c - "crescent-bench metadata": latency of one segment
 * descriptor fetch through each metadata backend.
 *
 * For every backend in --backends (p2p,http,etcd,redis by default) two
 * engines run in this process: a target ("127.0.0.1", --buffers registered
 * buffers, so its descriptor has that many entries) and a reader
 * ("localhost"). The reader opens the target's segment --fetches times;
 * every cr_engine_open_segment refetches and decodes the descriptor: a
 * DESC_GET over the target's RPC port (p2p), a GET of
 * "<prefix>/ram/<segment>" from the server (http, etcd, redis). A row
 * reports fetches/s and latency p50/p99/max/mean of one open.
 *
 * Servers: etcd and redis are spawned from --etcd-bin / --redis-bin
 * (default /usr/bin/etcd, /usr/bin/redis-server; kernel-chosen ports on
 * 127.0.0.1, a private data directory under /tmp, stopped with SIGTERM at
 * the end) unless --etcd / --redis name running ones; a backend whose
 * server binary is missing is skipped with a note. http uses the
 * crescent-metadata-server next to this binary (../metadata-server/) or
 * --http URL. Only the public engine API is used.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "crescent/engine.h"
#include "crescent/status.h"
#include "options.h"
#include "servers.h"
#include "tool_util.h"

#define MD_MAX_BUFFERS 4096
#define MD_READY_MS    15000

typedef struct md_opts {
    const char *backends;
    uint32_t fetches, buffers;
    const char *etcd, *redis, *http;
    const char *etcd_bin, *redis_bin, *mdserver_bin;
    bool json;
} md_opts;

/* A server this benchmark spawned: etcd/redis (tools/common/servers.h) or
 * crescent-metadata-server (a ct_proc whose ready line names its port). */
typedef struct md_server {
    ct_server server; /* etcd, redis */
    ct_proc mdserver; /* crescent-metadata-server */
    char endpoint[128];
} md_server;

static void usage(FILE *to)
{
    fprintf(to, "usage: " CB_PROG " metadata [flags]\n"
                "Latency of one segment descriptor fetch (cr_engine_open_segment) per backend.\n"
                "  --backends LIST        p2p,http,etcd,redis (default: all)\n"
                "  --fetches N            descriptor fetches per backend (default 2000)\n"
                "  --buffers N            buffers registered in the target (default 8)\n"
                "  --etcd HOST:PORT       use a running etcd instead of spawning one\n"
                "  --redis HOST:PORT      use a running redis instead of spawning one\n"
                "  --http URL             use a running metadata server (http://h:p/metadata)\n"
                "  --etcd-bin PATH        etcd to spawn (default /usr/bin/etcd)\n"
                "  --redis-bin PATH       redis-server to spawn (default /usr/bin/redis-server)\n"
                "  --metadata-server-bin PATH  crescent-metadata-server to spawn\n"
                "  --json                 JSON lines on stdout instead of the table\n");
}

static void server_stop(md_server *s)
{
    ct_server_stop(&s->server);
    ct_proc_stop(&s->mdserver, SIGTERM, 5000);
}

static int start_etcd(const char *bin, md_server *s)
{
    if (ct_etcd_start(&s->server, bin) < 0)
        return -1;
    snprintf(s->endpoint, sizeof(s->endpoint), "%s", s->server.endpoint);
    return 0;
}

static int start_redis(const char *bin, md_server *s)
{
    if (ct_redis_start(&s->server, bin) < 0)
        return -1;
    snprintf(s->endpoint, sizeof(s->endpoint), "%s", s->server.endpoint);
    return 0;
}

/* crescent-metadata-server --port 0: reads "listening on HOST:PORT". */
static int start_mdserver(const char *bin, md_server *s)
{
    const char *argv[] = {bin, "--host", "127.0.0.1", "--port", "0", NULL};
    ct_spawn_opts so = {.pipe_stdout = true};
    if (ct_proc_spawn(&s->mdserver, argv, &so) < 0)
        return -1;
    char line[256];
    if (ct_proc_read_line(&s->mdserver, line, sizeof(line), MD_READY_MS) < 0)
        return -1;
    const char *colon = strrchr(line, ':');
    if (colon == NULL)
        return -1;
    snprintf(s->endpoint, sizeof(s->endpoint), "http://127.0.0.1:%s/metadata", colon + 1);
    return 0;
}

typedef struct md_row {
    char backend[16];
    uint32_t fetches;
    double seconds;
    uint64_t p50_ns, p99_ns, max_ns;
    double mean_ns;
} md_row;

static int measure(const md_opts *o, const char *backend, const char *conn, md_row *row)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.metadata = conn;
    cfg.protocol = "tcp";
    cfg.local_hostname = "127.0.0.1";
    cr_engine *target = NULL, *reader = NULL;
    uint8_t *mem = NULL;
    int rc = cr_engine_create(&cfg, &target);
    if (rc < 0) {
        fprintf(stderr, CB_PROG " metadata: %s target engine: %s\n", backend,
                cr_last_error_message());
        return CB_EXIT_FAIL;
    }
    cfg.local_hostname = "localhost";
    rc = cr_engine_create(&cfg, &reader);
    if (rc < 0) {
        fprintf(stderr, CB_PROG " metadata: %s reader engine: %s\n", backend,
                cr_last_error_message());
        goto out;
    }
    size_t each = 64 * CB_KIB;
    mem = aligned_alloc(4096, each * o->buffers);
    if (mem == NULL) {
        rc = CR_ERR_NO_MEMORY;
        goto out;
    }
    cr_buffer_spec *specs = calloc(o->buffers, sizeof(*specs));
    if (specs == NULL) {
        rc = CR_ERR_NO_MEMORY;
        goto out;
    }
    for (uint32_t i = 0; i < o->buffers; i++)
        specs[i] = (cr_buffer_spec){mem + i * each, each, "cpu:0", true};
    rc = cr_engine_register_batch(target, specs, o->buffers);
    free(specs);
    if (rc < 0) {
        fprintf(stderr, CB_PROG " metadata: %s register: %s\n", backend, cr_last_error_message());
        goto out;
    }
    char name[300];
    cr_engine_segment_name(target, name, sizeof(name));
    cr_segment_handle seg;
    rc = cr_engine_open_segment(reader, name, &seg); /* resolve + connect once */
    if (rc < 0) {
        fprintf(stderr, CB_PROG " metadata: %s open %s: %s\n", backend, name,
                cr_last_error_message());
        goto out;
    }
    cb_hist *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        rc = CR_ERR_NO_MEMORY;
        goto out;
    }
    uint64_t max = 0, sum = 0;
    uint64_t t0 = cb_now_ns();
    for (uint32_t i = 0; i < o->fetches; i++) {
        uint64_t a = cb_now_ns();
        rc = cr_engine_open_segment(reader, name, &seg);
        uint64_t d = cb_now_ns() - a;
        if (rc < 0) {
            fprintf(stderr, CB_PROG " metadata: %s fetch %u: %s\n", backend, i,
                    cr_last_error_message());
            free(h);
            goto out;
        }
        cb_hist_add(h, d, 1);
        sum += d;
        if (d > max)
            max = d;
    }
    uint64_t total = cb_now_ns() - t0;
    snprintf(row->backend, sizeof(row->backend), "%s", backend);
    row->fetches = o->fetches;
    row->seconds = (double)total / 1e9;
    row->p50_ns = cb_hist_quantile(h, 0.50);
    row->p99_ns = cb_hist_quantile(h, 0.99);
    row->max_ns = max;
    row->mean_ns = (double)sum / o->fetches;
    free(h);
    rc = 0;
out:
    if (target != NULL && mem != NULL)
        for (uint32_t i = 0; i < o->buffers; i++)
            cr_engine_unregister(target, mem + i * each);
    cr_engine_destroy(reader);
    cr_engine_destroy(target);
    free(mem);
    return rc < 0 ? CB_EXIT_FAIL : CB_EXIT_OK;
}

static void print_row(const md_opts *o, const md_row *r)
{
    if (o->json) {
        printf("{\"bench\":\"metadata\",\"backend\":\"%s\",\"buffers\":%u,\"fetches\":%u,"
               "\"fetches_per_s\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,"
               "\"mean_us\":%.1f}\n",
               r->backend, o->buffers, r->fetches, r->fetches / r->seconds, r->p50_ns / 1e3,
               r->p99_ns / 1e3, r->max_ns / 1e3, r->mean_ns / 1e3);
    } else {
        printf("%-8s %8u %10.0f %10.1f %10.1f %10.1f %10.1f\n", r->backend, r->fetches,
               r->fetches / r->seconds, r->p50_ns / 1e3, r->p99_ns / 1e3, r->max_ns / 1e3,
               r->mean_ns / 1e3);
    }
    fflush(stdout);
}

static bool wanted(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p != '\0';) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p += len;
        if (*p == ',')
            p++;
    }
    return false;
}

static int parse(int argc, char **argv, md_opts *o)
{
    const ct_option table[] = {
        CT_SWITCH("--json", &o->json),
        CT_STRING("--backends", &o->backends),
        CT_U32("--fetches", &o->fetches, 1, 10000000),
        CT_U32("--buffers", &o->buffers, 1, MD_MAX_BUFFERS),
        CT_STRING("--etcd", &o->etcd),
        CT_STRING("--redis", &o->redis),
        CT_STRING("--http", &o->http),
        CT_STRING("--etcd-bin", &o->etcd_bin),
        CT_STRING("--redis-bin", &o->redis_bin),
        CT_STRING("--metadata-server-bin", &o->mdserver_bin),
    };
    int pr = ct_parse_options(argc, argv, table, sizeof(table) / sizeof(table[0]), NULL, NULL,
                              CB_PROG " metadata");
    if (pr == CT_OPTS_HELP) {
        usage(stdout);
        exit(CB_EXIT_OK);
    }
    if (pr < 0)
        return -1;
    static const char *const known[] = {"p2p", "http", "etcd", "redis"};
    for (const char *p = o->backends; *p != '\0';) {
        size_t len = strcspn(p, ",");
        bool ok = false;
        for (size_t k = 0; k < 4; k++)
            ok |= len == strlen(known[k]) && strncmp(p, known[k], len) == 0;
        if (!ok) {
            fprintf(stderr, CB_PROG " metadata: --backends names '%.*s' (p2p, http, etcd, redis)\n",
                    (int)len, p);
            return -1;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return 0;
}

int cb_metadata_main(int argc, char **argv)
{
    md_opts o = {.backends = "p2p,http,etcd,redis",
                 .fetches = 2000,
                 .buffers = 8,
                 .etcd_bin = "/usr/bin/etcd",
                 .redis_bin = "/usr/bin/redis-server"};
    if (parse(argc, argv, &o) < 0)
        return CB_EXIT_USAGE;
    char mdbin[4096];
    if (o.mdserver_bin == NULL) {
        /* next to this binary: <build>/tools/bench -> <build>/tools/metadata-server */
        ssize_t n = readlink("/proc/self/exe", mdbin, sizeof(mdbin) - 64);
        if (n > 0) {
            mdbin[n] = '\0';
            char *slash = strrchr(mdbin, '/');
            if (slash != NULL)
                strcpy(slash, "/../metadata-server/crescent-metadata-server");
        } else {
            snprintf(mdbin, sizeof(mdbin), "crescent-metadata-server");
        }
        o.mdserver_bin = mdbin;
    }
    if (!o.json)
        printf("# descriptor fetch (cr_engine_open_segment) with %u registered buffers\n"
               "%-8s %8s %10s %10s %10s %10s %10s\n",
               o.buffers, "backend", "fetches", "fetch/s", "p50_us", "p99_us", "max_us", "mean_us");
    int status = CB_EXIT_OK;
    static const char *const order[] = {"p2p", "http", "etcd", "redis"};
    for (size_t k = 0; k < 4; k++) {
        const char *b = order[k];
        if (!wanted(o.backends, b))
            continue;
        md_server srv;
        memset(&srv, 0, sizeof(srv));
        ct_proc_init(&srv.server.proc);
        ct_proc_init(&srv.mdserver);
        char conn[512];
        int rc = 0;
        if (strcmp(b, "p2p") == 0) {
            snprintf(conn, sizeof(conn), "P2PHANDSHAKE");
        } else if (strcmp(b, "http") == 0) {
            if (o.http != NULL)
                snprintf(conn, sizeof(conn), "%s", o.http);
            else if ((rc = start_mdserver(o.mdserver_bin, &srv)) == 0)
                snprintf(conn, sizeof(conn), "%s", srv.endpoint);
        } else {
            bool etcd = strcmp(b, "etcd") == 0;
            const char *given = etcd ? o.etcd : o.redis;
            const char *bin = etcd ? o.etcd_bin : o.redis_bin;
            if (given == NULL && access(bin, X_OK) != 0) {
                fprintf(stderr, "# %s skipped: %s is not installed\n", b, bin);
                continue;
            }
            if (given == NULL)
                rc = etcd ? start_etcd(bin, &srv) : start_redis(bin, &srv);
            snprintf(conn, sizeof(conn), "%s%s", etcd ? "etcd://" : "redis://",
                     given != NULL ? given : srv.endpoint);
        }
        if (rc < 0) {
            fprintf(stderr, CB_PROG " metadata: cannot start the %s server\n", b);
            server_stop(&srv);
            status = CB_EXIT_FAIL;
            continue;
        }
        md_row row;
        if (measure(&o, b, conn, &row) == CB_EXIT_OK)
            print_row(&o, &row);
        else
            status = CB_EXIT_FAIL;
        server_stop(&srv);
    }
    return status;
}
