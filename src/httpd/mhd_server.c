/*
 * mhd_server.c - see mhd_server.h.
 */
#include "httpd/mhd_server.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "base/error.h"
#include "base/log.h"
#include "base/net.h"
#include "crescent/status.h"

/* libmicrohttpd's logger: keep the last line for error messages, log it. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    crh_mhd_server *m = cls;
    char line[sizeof(m->last_error)];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        line[--n] = '\0';
    pthread_mutex_lock(&m->log_lock);
    memcpy(m->last_error, line, n + 1);
    pthread_mutex_unlock(&m->log_lock);
    crb_log(CRB_LOG_INFO, "%s: %s", m->what, line);
}

int crh_mhd_start(crh_mhd_server *m, const char *what, const char *host, uint16_t port,
                  const crh_mhd_config *cfg)
{
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int rc = crb_resolve(host, port, &addr, &addrlen);
    if (rc < 0)
        return rc;
    memset(m, 0, sizeof(*m));
    m->what = what;
    if (pthread_mutex_init(&m->log_lock, NULL) != 0)
        return crb_error(CR_ERR_SYSTEM, "%s: pthread_mutex_init failed", what);

    unsigned int flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    MHD_RequestCompletedCallback completed = cfg->on_completed;
    m->daemon = MHD_start_daemon(flags, port, NULL, NULL, cfg->on_request, cfg->request_cls,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, m, MHD_OPTION_SOCK_ADDR,
                                 (const struct sockaddr *)&addr, MHD_OPTION_THREAD_POOL_SIZE,
                                 cfg->threads, MHD_OPTION_CONNECTION_LIMIT, cfg->connection_limit,
                                 MHD_OPTION_CONNECTION_TIMEOUT, cfg->idle_timeout_s,
                                 completed != NULL ? MHD_OPTION_NOTIFY_COMPLETED : MHD_OPTION_END,
                                 completed, cfg->completed_cls, MHD_OPTION_END);
    if (m->daemon == NULL) {
        rc = crb_error(CR_ERR_BIND, "%s cannot listen on %s:%u: %s", what, host, (unsigned)port,
                       m->last_error[0] != '\0' ? m->last_error : "MHD_start_daemon failed");
        pthread_mutex_destroy(&m->log_lock);
        return rc;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
    m->port = info != NULL && info->port != 0 ? info->port : port;
    crb_log(CRB_LOG_INFO, "%s listening on %s:%u", what, host, (unsigned)m->port);
    return 0;
}

void crh_mhd_stop(crh_mhd_server *m)
{
    MHD_stop_daemon(m->daemon);
    m->daemon = NULL;
    pthread_mutex_destroy(&m->log_lock);
}
