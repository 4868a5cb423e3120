/*
 * backend.c - choose a metadata backend from its connection string.
 *
 * The forms are Mooncake's, matched as Mooncake matches them:
 *   "P2PHANDSHAKE" (case matters)        no server (p2p_backend.c)
 *   "http://..."                         handed whole to http_backend.c
 *   "etcd://h:p[,h:p...]"                etcd (etcd_backend.c)
 *   "h:p[,h:p...]" (no "://")            etcd too: Mooncake's default scheme
 *   "redis://h:p"                        redis (redis_backend.c)
 * etcd and redis accept one crescent option after '?': "ttl=<seconds>"
 * (1..3600, default CRM_DEFAULT_TTL_S), the lifetime of published keys
 * after their publisher stops refreshing them. Anything else, including
 * schemes Mooncake knows but this build does not ("https://"), a bare
 * string that is not an endpoint list, and unknown options, is refused with
 * CR_ERR_INVALID_CONFIG naming the string and the supported forms.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "metadata/backend.h"
#include "metadata/etcd.h"

#define SUPPORTED_FORMS                                                                            \
    "P2PHANDSHAKE, http://host:port/path, etcd://host:port[,host:port...], host:port[,...] "       \
    "(etcd), redis://host:port"

#define ADDRESS_MAX 2048

/* Split "<address>[?ttl=N]" into address and TTL. */
static int split_options(const char *conn, const char *rest, char *address, int *ttl_s)
{
    const char *q = strchr(rest, '?');
    size_t n = q != NULL ? (size_t)(q - rest) : strlen(rest);
    if (n >= ADDRESS_MAX)
        return crb_error(CR_ERR_INVALID_CONFIG, "metadata connection string '%.200s' is too long",
                         conn);
    memcpy(address, rest, n);
    address[n] = '\0';
    *ttl_s = CRM_DEFAULT_TTL_S;
    if (q == NULL)
        return 0;
    const char *opt = q + 1;
    if (strncmp(opt, "ttl=", 4) != 0)
        return crb_error(CR_ERR_INVALID_CONFIG,
                         "metadata connection string '%.200s': unknown option '%.60s' (the only "
                         "option is ttl=<seconds>)",
                         conn, opt);
    char *end;
    errno = 0;
    long v = strtol(opt + 4, &end, 10);
    if (errno != 0 || end == opt + 4 || *end != '\0' || v < 1 || v > 3600)
        return crb_error(CR_ERR_INVALID_CONFIG,
                         "metadata connection string '%.200s': ttl '%.40s' is not 1..3600 seconds",
                         conn, opt + 4);
    *ttl_s = (int)v;
    return 0;
}

static int open_etcd(const char *conn, const char *rest, int timeout_ms, crm_backend **out)
{
    char address[ADDRESS_MAX];
    int ttl_s;
    int rc = split_options(conn, rest, address, &ttl_s);
    if (rc < 0)
        return rc;
    return crm_etcd_backend_create(address, timeout_ms, ttl_s, out);
}

static int open_redis(const char *conn, const char *rest, int timeout_ms, crm_backend **out)
{
    char address[ADDRESS_MAX];
    int ttl_s;
    int rc = split_options(conn, rest, address, &ttl_s);
    if (rc < 0)
        return rc;
    return crm_redis_backend_create(address, timeout_ms, ttl_s, out);
}

static int unsupported(const char *conn, const char *why)
{
    return crb_error(
        CR_ERR_INVALID_CONFIG,
        "metadata connection string '%.200s' is not supported%s%s; supported: " SUPPORTED_FORMS,
        conn, why[0] != '\0' ? " " : "", why);
}

int crm_backend_open(const char *conn, int timeout_ms, crm_backend **out)
{
    if (out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crm_backend_open: out is NULL");
    *out = NULL;
    if (conn == NULL)
        return crb_error(CR_ERR_INVALID_CONFIG,
                         "metadata connection string is missing; supported: " SUPPORTED_FORMS);

    crm_backend *b = NULL;
    int rc;
    if (strcmp(conn, "P2PHANDSHAKE") == 0) {
        rc = crm_p2p_backend_create(&b);
        if (rc == 0)
            b->timeout_ms = timeout_ms;
    } else if (strncmp(conn, "http://", 7) == 0) {
        rc = crm_http_backend_create(conn, timeout_ms, &b);
    } else if (strncmp(conn, "etcd://", 7) == 0) {
        rc = open_etcd(conn, conn + 7, timeout_ms, &b);
    } else if (strncmp(conn, "redis://", 8) == 0) {
        rc = open_redis(conn, conn + 8, timeout_ms, &b);
    } else if (strstr(conn, "://") != NULL) {
        return unsupported(conn, "(unknown scheme)");
    } else {
        /* Mooncake reads a string without a scheme as etcd endpoints. */
        char address[ADDRESS_MAX];
        size_t n = strcspn(conn, "?");
        crm_etcd_endpoints eps;
        if (n == 0 || n >= sizeof(address))
            return unsupported(conn, "(without a scheme it must be etcd host:port endpoints)");
        memcpy(address, conn, n);
        address[n] = '\0';
        if (crm_etcd_parse_endpoints(address, &eps) < 0)
            return unsupported(conn, "(without a scheme it must be etcd host:port endpoints)");
        rc = open_etcd(conn, conn, timeout_ms, &b);
    }
    if (rc < 0)
        return rc;
    *out = b;
    return 0;
}
