/*
 * flags.c - crescent-client's command line: the flags of Mooncake's
 * real_client_main (mooncake_client), with its defaults, plus crescent's own.
 *
 * Syntax as gflags reads it: --flag=value, --flag value, -flag=value,
 * -flag value; '-' and '_' are interchangeable inside names; booleans are
 * --flag, --noflag or --flag=true|false|1|0|yes|no (a boolean never takes
 * the next argument); --flagfile=FILE reads one flag per line (blank lines
 * and lines starting with '#' are skipped). Sizes take Mooncake's forms
 * ("4 GB", "16MB", "0"). Every flag real_client_main defines or reads is
 * known here: each is either honoured or refused with a message naming it
 * (the caller exits 2); an unknown flag is refused the same way.
 */
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "client/daemon.h"

enum kind { K_STR, K_SIZE, K_U16, K_U32, K_BOOL, K_INT, K_REFUSE };

typedef struct flag {
    const char *name;
    enum kind kind;
    size_t off, cap;
    const char *help;
} flag;

#define STR(f, h)                                                                                  \
    {                                                                                              \
#f, K_STR, offsetof(crs_config, f), sizeof(((crs_config *)0)->f), h                        \
    }
#define SIZE(f, h)                                                                                 \
    {                                                                                              \
#f, K_SIZE, offsetof(crs_config, f), 0, h                                                  \
    }
#define U16(f, h)                                                                                  \
    {                                                                                              \
#f, K_U16, offsetof(crs_config, f), 0, h                                                   \
    }
#define U32(f, h)                                                                                  \
    {                                                                                              \
#f, K_U32, offsetof(crs_config, f), 0, h                                                   \
    }
#define BOOL(f, h)                                                                                 \
    {                                                                                              \
#f, K_BOOL, offsetof(crs_config, f), 0, h                                                  \
    }

/* Flags that have no field: handled by name. */
static bool start_offload_rpc_server, logtostderr, alsologtostderr;
static int verbosity, minloglevel;

static const flag FLAGS[] = {
    /* Mooncake's real_client_main */
    STR(host, "local hostname peers reach the engine at (Mooncake default 0.0.0.0 means "
              "127.0.0.1 here)"),
    STR(metadata, "metadata server connection string (--metadata_server)"),
    STR(devices, "device names (--device_names), as Mooncake's"),
    STR(master, "master address host:port (--master_server_address)"),
    STR(protocol, "tcp | rdma | auto | shm | ucx"),
    U16(port, "the service port: names the socket @crescent-client-<port>"),
    SIZE(global_segment_size, "memory this host contributes, e.g. \"4 GB\""),
    SIZE(local_buffer_size, "crescent-client's own staging (0 = 16 MiB)"),
    U32(threads, "service threads"),
    STR(tenant, "tenant of every key stored through this daemon (--tenant_id)"),
    BOOL(enable_offload, "keep objects evicted from this host's segment on its SSD tier "
                         "(MOONCAKE_OFFLOAD_FILE_STORAGE_PATH) and serve them from there"),
    STR(ssd_path, "the SSD tier's directory (--ssd_offload_path; default: "
                  "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)"),
    {"start_offload_rpc_server", K_BOOL, SIZE_MAX, 0,
     "accepted: disk-tier reads are always served (through the engine's staging area)"},
    BOOL(enable_http_server, "serve /metrics and /health"),
    U16(http_port, "port of the HTTP server"),
    STR(log_dir, "append the log to <dir>/crescent-client.<pid>.log (glog's --log_dir)"),
    {"v", K_INT, SIZE_MAX, 0, "glog verbosity (> 0: debug log)"},
    {"minloglevel", K_INT, SIZE_MAX, 0, "glog minimum level (0 info ... 3 fatal)"},
    {"logtostderr", K_BOOL, SIZE_MAX, 0, "accepted: the log goes to stderr"},
    {"alsologtostderr", K_BOOL, SIZE_MAX, 0, "accepted: the log goes to stderr"},
    /* crescent's */
    STR(socket, "listen on @name or a path instead of @crescent-client-<port>"),
    STR(secret, "shared secret thin clients must prove (--shared_secret; default "
                "$CRESCENT_CLIENT_SECRET)"),
    BOOL(allow_any_user, "serve thin clients of other uids (their memory must be sealed)"),
    U32(max_clients, "thin client processes served at once (--max_thin_clients)"),
    STR(http_host, "address of the HTTP server"),
    U32(rpc_timeout_ms, "deadline of one master call"),
    U32(transfer_timeout_ms, "deadline of one transfer"),
    U32(heartbeat_ms, "master heartbeat interval (--heartbeat_interval_ms)"),
    {"fromenv", K_REFUSE, SIZE_MAX, 0, NULL},
    {"tryfromenv", K_REFUSE, SIZE_MAX, 0, NULL},
    {"undefok", K_REFUSE, SIZE_MAX, 0, NULL},
};

/* Mooncake's names for fields named otherwise here. */
static const struct {
    const char *alias, *name;
} ALIASES[] = {
    {"metadata_server", "metadata"},     {"device_names", "devices"},
    {"master_server_address", "master"}, {"tenant_id", "tenant"},
    {"ssd_offload_path", "ssd_path"},    {"shared_secret", "secret"},
    {"max_thin_clients", "max_clients"}, {"heartbeat_interval_ms", "heartbeat_ms"},
};

void crs_config_defaults(crs_config *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->host, sizeof(c->host), "0.0.0.0");
    snprintf(c->metadata, sizeof(c->metadata), "http://127.0.0.1:8080/metadata");
    snprintf(c->master, sizeof(c->master), "127.0.0.1:50051");
    snprintf(c->protocol, sizeof(c->protocol), "tcp");
    c->port = 50052;
    c->global_segment_size = 4ull << 30;
    c->local_buffer_size = 0;
    c->threads = 1;
    snprintf(c->tenant, sizeof(c->tenant), "default");
    c->http_port = 9300;
    snprintf(c->http_host, sizeof(c->http_host), "0.0.0.0");
    c->max_clients = 256;
    const char *secret = getenv("CRESCENT_CLIENT_SECRET");
    if (secret != NULL)
        snprintf(c->secret, sizeof(c->secret), "%s", secret);
    start_offload_rpc_server = true;
}

const char *crs_usage(void)
{
    static char text[8192];
    if (text[0] != '\0')
        return text;
    size_t n = (size_t)snprintf(text, sizeof(text),
                                "usage: crescent-client [--flag=value ...]  (mooncake_client)\n"
                                "The standalone store client: owns this host's segment and "
                                "serves thin clients (setup_dummy) over a Unix socket.\n\n");
    for (size_t i = 0; i < sizeof(FLAGS) / sizeof(FLAGS[0]) && n < sizeof(text); i++) {
        if (FLAGS[i].help == NULL)
            continue;
        const char *name = FLAGS[i].name;
        for (size_t a = 0; a < sizeof(ALIASES) / sizeof(ALIASES[0]); a++)
            if (strcmp(ALIASES[a].name, name) == 0)
                name = ALIASES[a].alias;
        n += (size_t)snprintf(text + n, sizeof(text) - n, "  --%-26s %s\n", name, FLAGS[i].help);
    }
    if (n < sizeof(text))
        snprintf(text + n, sizeof(text) - n,
                 "  --flagfile=FILE            read flags from FILE\n"
                 "  --help, --version\n");
    return text;
}

/* Normalise a name: '-' -> '_', aliases resolved. */
static const flag *find_flag(const char *name, size_t len, bool *negated)
{
    char buf[64];
    if (len >= sizeof(buf))
        return NULL;
    for (size_t i = 0; i < len; i++)
        buf[i] = name[i] == '-' ? '_' : name[i];
    buf[len] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        const char *n = buf;
        if (pass == 1) {
            if (strncmp(buf, "no", 2) != 0)
                return NULL;
            n = buf + 2;
        }
        for (size_t a = 0; a < sizeof(ALIASES) / sizeof(ALIASES[0]); a++)
            if (strcmp(ALIASES[a].alias, n) == 0)
                n = ALIASES[a].name;
        for (size_t i = 0; i < sizeof(FLAGS) / sizeof(FLAGS[0]); i++) {
            if (strcmp(FLAGS[i].name, n) != 0)
                continue;
            if (pass == 1 && FLAGS[i].kind != K_BOOL)
                return NULL;
            *negated = pass == 1;
            return &FLAGS[i];
        }
    }
    return NULL;
}

static int parse_bool(const char *flagname, const char *v, bool *out)
{
    char b[8];
    size_t n = strlen(v);
    if (n >= sizeof(b))
        goto bad;
    for (size_t i = 0; i <= n; i++)
        b[i] = (char)tolower((unsigned char)v[i]);
    if (!strcmp(b, "true") || !strcmp(b, "1") || !strcmp(b, "yes") || !strcmp(b, "y")) {
        *out = true;
        return 0;
    }
    if (!strcmp(b, "false") || !strcmp(b, "0") || !strcmp(b, "no") || !strcmp(b, "n")) {
        *out = false;
        return 0;
    }
bad:
    return crb_error(CR_INVALID_PARAMS, "--%s: '%s' is not a boolean", flagname, v);
}

static int parse_uint(const char *flagname, const char *v, uint64_t max, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (v[0] == '\0' || v[0] == '-' || *end != '\0' || errno != 0 || x > max)
        return crb_error(CR_INVALID_PARAMS, "--%s: '%s' is not a number in 0..%llu", flagname, v,
                         (unsigned long long)max);
    *out = x;
    return 0;
}

static int set_flag(crs_config *c, const flag *f, const char *shown, bool negated,
                    const char *value)
{
    uint8_t *base = (uint8_t *)c;
    uint64_t u;
    bool b = false;
    int rc = 0;
    switch (f->kind) {
    case K_REFUSE:
        return crb_error(CR_INVALID_PARAMS, "--%s is not supported by crescent-client", shown);
    case K_STR:
        if (strlen(value) >= f->cap)
            return crb_error(CR_INVALID_PARAMS, "--%s: value of %zu bytes is too long", shown,
                             strlen(value));
        snprintf((char *)(base + f->off), f->cap, "%s", value);
        return 0;
    case K_SIZE:
        rc = cr_parse_size(value, &u);
        if (rc < 0)
            return crb_error(CR_INVALID_PARAMS, "--%s: '%s' is not a size (e.g. \"4 GB\")", shown,
                             value);
        *(uint64_t *)(base + f->off) = u;
        return 0;
    case K_U16:
        if ((rc = parse_uint(shown, value, 65535, &u)) == 0)
            *(uint16_t *)(base + f->off) = (uint16_t)u;
        return rc;
    case K_U32:
        if ((rc = parse_uint(shown, value, UINT32_MAX, &u)) == 0)
            *(uint32_t *)(base + f->off) = (uint32_t)u;
        return rc;
    case K_INT:
        if ((rc = parse_uint(shown, value, 1000, &u)) < 0)
            return rc;
        if (strcmp(f->name, "v") == 0)
            verbosity = (int)u;
        else
            minloglevel = (int)u;
        return 0;
    case K_BOOL:
        if (value == NULL)
            b = !negated;
        else if (negated)
            return crb_error(CR_INVALID_PARAMS, "--%s takes no value", shown);
        else if ((rc = parse_bool(shown, value, &b)) < 0)
            return rc;
        if (f->off != SIZE_MAX)
            *(bool *)(base + f->off) = b;
        else if (strcmp(f->name, "start_offload_rpc_server") == 0)
            start_offload_rpc_server = b;
        else if (strcmp(f->name, "logtostderr") == 0)
            logtostderr = b;
        else
            alsologtostderr = b;
        return 0;
    }
    return 0;
}

static int parse_args(crs_config *c, int argc, char **argv, int depth);

static int read_flagfile(crs_config *c, const char *path, int depth)
{
    if (depth > 4)
        return crb_error(CR_INVALID_PARAMS, "--flagfile nested too deep at %s", path);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return crb_error(CR_INVALID_PARAMS, "--flagfile %s: %s", path, strerror(errno));
    char line[4096];
    int rc = 0, lineno = 0;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        char *s = line;
        while (isspace((unsigned char)*s))
            s++;
        size_t n = strlen(s);
        while (n > 0 && isspace((unsigned char)s[n - 1]))
            s[--n] = '\0';
        if (n == 0 || s[0] == '#')
            continue;
        char *args[1] = {s};
        rc = parse_args(c, 1, args, depth + 1);
        if (rc < 0)
            rc = crb_error(rc, "%s line %d: %s", path, lineno, cr_last_error_message());
    }
    fclose(f);
    return rc;
}

static int parse_args(crs_config *c, int argc, char **argv, int depth)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            if (i + 1 < argc)
                return crb_error(CR_INVALID_PARAMS,
                                 "crescent-client takes no positional "
                                 "arguments ('%s')",
                                 argv[i + 1]);
            break;
        }
        if (a[0] != '-')
            return crb_error(CR_INVALID_PARAMS,
                             "crescent-client takes no positional arguments "
                             "('%s')",
                             a);
        const char *name = a + (a[1] == '-' ? 2 : 1);
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const char *value = eq ? eq + 1 : NULL;
        char shown[64];
        snprintf(shown, sizeof(shown), "%.*s", (int)(len < 63 ? len : 63), name);
        if (!strcmp(shown, "help") || !strcmp(shown, "helpfull") || !strcmp(shown, "helpshort")) {
            c->show_help = true;
            continue;
        }
        if (!strcmp(shown, "version")) {
            c->show_version = true;
            continue;
        }
        if (!strcmp(shown, "flagfile")) {
            if (value == NULL && i + 1 < argc)
                value = argv[++i];
            if (value == NULL)
                return crb_error(CR_INVALID_PARAMS, "--flagfile needs a file");
            int rc = read_flagfile(c, value, depth);
            if (rc < 0)
                return rc;
            continue;
        }
        bool negated = false;
        const flag *f = find_flag(name, len, &negated);
        if (f == NULL)
            return crb_error(CR_INVALID_PARAMS,
                             "unknown flag --%s (crescent-client --help lists "
                             "them)",
                             shown);
        if (value == NULL && f->kind != K_BOOL) {
            if (i + 1 >= argc)
                return crb_error(CR_INVALID_PARAMS, "--%s needs a value", shown);
            value = argv[++i];
        }
        int rc = set_flag(c, f, shown, negated, value);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int crs_parse_flags(crs_config *c, int argc, char **argv)
{
    int rc = parse_args(c, argc - 1, argv + 1, 0);
    if (rc < 0 || c->show_help || c->show_version)
        return rc;
    char p[sizeof(c->protocol)];
    for (size_t i = 0; i < sizeof(p); i++)
        p[i] = (char)tolower((unsigned char)c->protocol[i]);
    const char *force = getenv("MC_FORCE_TCP");
    if (force != NULL && force[0] != '\0' && strcmp(force, "0") != 0)
        snprintf(p, sizeof(p), "tcp");
    if (strcmp(p, "rdma") == 0 || p[0] == '\0')
        snprintf(p, sizeof(p), "auto");
    if (strcmp(p, "tcp") != 0 && strcmp(p, "auto") != 0 && strcmp(p, "shm") != 0 &&
        strcmp(p, "ucx") != 0)
        return crb_error(CR_INVALID_PARAMS,
                         "--protocol '%s': crescent has tcp, rdma (= auto), "
                         "auto, shm and ucx",
                         c->protocol);
    snprintf(c->protocol, sizeof(c->protocol), "%s", p);
    if (strcmp(p, "tcp") == 0)
        crb_log(CRB_LOG_INFO, "crescent-client: --protocol=tcp (Mooncake's default): every "
                              "transfer, also into this host's own segment, goes over TCP; "
                              "--protocol=rdma (= auto) copies in memory on this host");
    if (strcmp(c->host, "0.0.0.0") == 0 || c->host[0] == '\0') {
        crb_log(CRB_LOG_WARN,
                "crescent-client: --host %s: the engine is reached at 127.0.0.1; "
                "peers on other hosts need --host=<this host's address>",
                c->host[0] ? c->host : "\"\"");
        snprintf(c->host, sizeof(c->host), "127.0.0.1");
    }
    if (c->port == 0 && c->socket[0] == '\0')
        return crb_error(CR_INVALID_PARAMS, "--port=0 needs --socket (the port names the socket)");
    if (c->threads == 0 || c->threads > CRS_MAX_LOOPS)
        return crb_error(CR_INVALID_PARAMS, "--threads %u: 1..%d", c->threads, CRS_MAX_LOOPS);
    if (c->local_buffer_size == 0)
        c->local_buffer_size = 16ull << 20;
    if (c->tenant[0] == '\0')
        snprintf(c->tenant, sizeof(c->tenant), "default");
    if (c->socket[0] != '\0' && c->socket[0] != '@' && c->socket[0] != '/')
        return crb_error(CR_INVALID_PARAMS, "--socket '%s': \"@name\" or an absolute path",
                         c->socket);
    if (verbosity > 0)
        crb_log_default_level(CRB_LOG_DEBUG);
    else if (minloglevel >= 2)
        crb_log_default_level(CRB_LOG_ERROR);
    else if (minloglevel == 1)
        crb_log_default_level(CRB_LOG_WARN);
    (void)start_offload_rpc_server;
    (void)logtostderr;
    (void)alsologtostderr;
    return 0;
}
