/*
 * main.c - crescent-metadata-server: the standalone HTTP metadata server
 * (the same crd_http_server the master embeds), a drop-in for Mooncake's
 * mooncake_http_metadata_server.
 *
 *   crescent-metadata-server [--host ADDR] [--port N] [--max_total_bytes SIZE] ...
 *
 * Flags come from one table on the parser crescent-master uses too
 * (base/flagtab.h): "--flag value", "--flag=value", "-flag=value", '-' and
 * '_' alike. --host defaults to 127.0.0.1 (pass 0.0.0.0 to serve other
 * machines), --port to 8080; port 0 lets the kernel pick. The quota flags
 * bound what the server holds (keys and values, stored and arriving).
 * When the server is ready it prints
 * "crescent-metadata-server listening on HOST:PORT" on stdout, so scripts
 * can wait for that line and read the port from it.
 *
 * Exit codes: 0 after SIGINT/SIGTERM (clean shutdown), 1 when the server
 * cannot start (e.g. the port is taken), 2 for a bad command line.
 * Design: SIGINT and SIGTERM are blocked before any thread starts and taken
 * with sigwait() on the main thread, so shutdown runs in ordinary context.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/flagtab.h"
#include "mdserver/http_server.h"

#define PROG "crescent-metadata-server"

typedef struct options {
    char host[256];
    uint16_t port;
    uint64_t request_timeout_ms;
    uint32_t max_connections, threads;
    uint64_t max_total_bytes, max_value_bytes, max_keys;
} options;

#define O(m) CRB_FLAG_FIELD(options, m)
/* clang-format off */
static const crb_flag FLAGS[] = {
    {"host", CRB_FLAG_NONEMPTY, O(host), 0, 0, 0, NULL, "127.0.0.1",
     "address to listen on (0.0.0.0 for all)"},
    {"port", CRB_FLAG_PORT, O(port), 0, 65535, 0, NULL, "8080", "port to listen on (0: any free)"},
    {"max_total_bytes", CRB_FLAG_SIZE, O(max_total_bytes), 1, UINT64_MAX, 0, NULL, "256MiB",
     "quota: bytes of keys and values, stored and arriving (a PUT over it is 507)"},
    {"max_value_bytes", CRB_FLAG_SIZE, O(max_value_bytes), 1, UINT64_MAX, 0, NULL, "64MiB",
     "largest value (a larger PUT is 413)"},
    {"max_keys", CRB_FLAG_U64, O(max_keys), 1, UINT64_MAX, 0, NULL, "1000000",
     "quota: keys stored (a PUT of a new key over it is 507)"},
    {"max_connections", CRB_FLAG_U32, O(max_connections), 1, 1000000, 0, NULL, "1024",
     "requests served at once (slow clients wait, or give up their slot)"},
    {"request_timeout_sec", CRB_FLAG_DURATION, O(request_timeout_ms), 100, 3600000, 1000, NULL,
     "30", "a request, body included, must complete this long after its connection"},
    {"threads", CRB_FLAG_U32, O(threads), 1, 256, 0, NULL, "4", "worker threads"},
};
/* clang-format on */
static const crb_flag_set TABLE = {FLAGS, sizeof(FLAGS) / sizeof(FLAGS[0])};

static void usage(FILE *to)
{
    options d;
    memset(&d, 0, sizeof(d));
    crb_flags_defaults(&TABLE, &d);
    fprintf(to, "usage: " PROG " [--flag=value ...]\n"
                "Serves GET/PUT/DELETE /metadata?key=K and GET /health until SIGINT/SIGTERM.\n"
                "Sizes take B, KB/KiB, MB/MiB, GB/GiB; durations ms, s, m, h.\n");
    crb_flags_usage(to, &TABLE, &d);
    fprintf(to, "  %-44s %s\n", "--help, -h", "print this text and exit");
}

int main(int argc, char **argv)
{
    static const char *const help[] = {"help", "h", NULL};
    if (crb_flags_present(argc, argv, help)) {
        usage(stdout);
        return 0;
    }
    options o;
    memset(&o, 0, sizeof(o));
    crb_flags_defaults(&TABLE, &o);
    crb_flag_arg *args = calloc((size_t)(argc > 0 ? argc : 1), sizeof(*args));
    size_t n = 0;
    int rc =
        args == NULL ? CR_ERR_NO_MEMORY : crb_flags_resolve(&TABLE, argc, argv, help, args, &n);
    if (rc == 0)
        rc = crb_flags_apply(&o, args, n);
    free(args);
    if (rc < 0) {
        fprintf(stderr, PROG ": %s\n", cr_last_error_message());
        usage(stderr);
        return 2;
    }

    /* Block the shutdown signals in every thread; the main thread takes them with sigwait. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    crd_http_server_config cfg;
    crd_http_server_config_default(&cfg);
    cfg.max_total_bytes = o.max_total_bytes;
    cfg.max_value_bytes = o.max_value_bytes;
    cfg.max_keys = o.max_keys;
    cfg.max_connections = o.max_connections;
    cfg.request_timeout_ms = (unsigned)o.request_timeout_ms;
    cfg.threads = o.threads;
    crd_http_server *server = NULL;
    if (crd_http_server_start_with(o.host, o.port, &cfg, &server) < 0) {
        fprintf(stderr, PROG ": %s\n", cr_last_error_message());
        return 1;
    }
    int v6 = strchr(o.host, ':') != NULL;
    printf(PROG " listening on %s%s%s:%u\n", v6 ? "[" : "", o.host, v6 ? "]" : "",
           (unsigned)crd_http_server_port(server));
    fflush(stdout);

    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, PROG ": %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    crd_http_server_stop(server);
    return 0;
}
