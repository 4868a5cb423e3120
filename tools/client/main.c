/*
 * main.c - crescent-client (and, through the mooncake package, the
 * mooncake_client command): the standalone store client of this host.
 *
 * Parses Mooncake's real_client flags (exit 2 with a message for a bad or
 * unknown one), starts the daemon (exit 1 if the store or the socket cannot
 * be set up), prints one ready line on stdout
 *   crescent-client: serving <socket> segment <name> tenant <t> pid <pid> http <port|0>
 * and runs until SIGTERM or SIGINT: then it stops accepting, ends every
 * thin-client session, unmounts its segment at the master and exits 0.
 * Signals are blocked in every thread and taken with sigwait here, so no
 * handler runs inside the store.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "client/daemon.h"

static int redirect_log(const char *dir)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/crescent-client.%d.log", dir, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "crescent-client: --log_dir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    dup2(fd, 2);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    crs_config cfg;
    crs_config_defaults(&cfg);
    if (crs_parse_flags(&cfg, argc, argv) < 0) {
        fprintf(stderr, "crescent-client: %s\n", cr_last_error_message());
        return 2;
    }
    if (cfg.show_help) {
        fputs(crs_usage(), stdout);
        return 0;
    }
    if (cfg.show_version) {
        printf("crescent-client (crescent) 0.1.0, thin protocol %d\n", CRP_THIN_VERSION);
        return 0;
    }
    if (cfg.log_dir[0] != '\0' && redirect_log(cfg.log_dir) < 0)
        return 2;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    static crs_daemon d;
    if (crs_daemon_start(&d, &cfg) < 0) {
        fprintf(stderr, "crescent-client: %s\n", cr_last_error_message());
        return 1;
    }
    printf("crescent-client: serving %s segment %s tenant %s pid %d http %u\n", d.socket_name,
           d.segment, cfg.tenant, (int)getpid(), d.http_running ? (unsigned)d.http.port : 0u);
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    crb_log(CRB_LOG_INFO, "crescent-client: %s: stopping", strsignal(sig));
    crs_daemon_stop(&d);
    return 0;
}
