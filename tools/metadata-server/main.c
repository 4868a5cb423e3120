/*
 * main.c - crescent-metadata-server: the standalone HTTP metadata server
 * (the same crd_http_server the master embeds), a drop-in for Mooncake's
 * mooncake_http_metadata_server.
 *
 *   crescent-metadata-server [--host ADDR] [--port N]
 *
 * Flags take "--flag value" or "--flag=value". --host defaults to
 * 127.0.0.1 (pass 0.0.0.0 to serve other machines), --port to 8080; port 0
 * lets the kernel pick. When the server is ready it prints
 * "crescent-metadata-server listening on HOST:PORT" on stdout, so scripts
 * can wait for that line and read the port from it.
 *
 * Exit codes: 0 after SIGINT/SIGTERM (clean shutdown), 1 when the server
 * cannot start (e.g. the port is taken), 2 for a bad command line.
 * Design: SIGINT and SIGTERM are blocked before any thread starts and taken
 * with sigwait() on the main thread, so shutdown runs in ordinary context.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_util.h"
#include "base/error.h"
#include "mdserver/http_server.h"

#define PROG "crescent-metadata-server"

static void usage(FILE *to)
{
    fprintf(to, "usage: " PROG " [--host ADDR] [--port N]\n"
                "  --host ADDR  address to listen on (default 127.0.0.1; 0.0.0.0 for all)\n"
                "  --port N     port to listen on (default 8080; 0 picks a free one)\n"
                "Serves GET/PUT/DELETE /metadata?key=K and GET /health until SIGINT/SIGTERM.\n");
}

static int parse_port(const char *text, uint16_t *port)
{
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0 || v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    const char *port_text = "8080";
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        int r = ct_flag_value(argc, argv, &i, "--host", &host);
        if (r == 0)
            r = ct_flag_value(argc, argv, &i, "--port", &port_text);
        if (r < 0) {
            fprintf(stderr, PROG ": flag '%s' needs a value\n", arg);
            return 2;
        }
        if (r == 0) {
            fprintf(stderr, PROG ": unknown %s '%s'\n", arg[0] == '-' ? "flag" : "argument", arg);
            usage(stderr);
            return 2;
        }
    }
    uint16_t port = 0;
    if (parse_port(port_text, &port) < 0) {
        fprintf(stderr, PROG ": --port '%s' is not a port number (0-65535)\n", port_text);
        return 2;
    }
    if (host[0] == '\0') {
        fprintf(stderr, PROG ": --host is empty\n");
        return 2;
    }

    /* Block the shutdown signals in every thread; the main thread takes them with sigwait. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    crd_http_server *server = NULL;
    if (crd_http_server_start(host, port, &server) < 0) {
        fprintf(stderr, PROG ": %s\n", cr_last_error_message());
        return 1;
    }
    int v6 = strchr(host, ':') != NULL;
    printf(PROG " listening on %s%s%s:%u\n", v6 ? "[" : "", host, v6 ? "]" : "",
           (unsigned)crd_http_server_port(server));
    fflush(stdout);

    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, PROG ": %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    crd_http_server_stop(server);
    return 0;
}
