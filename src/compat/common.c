/*
 * common.c - what both Mooncake C interfaces need: mapping crescent's status
 * codes onto Mooncake's two conventions (negative errors, positive Status
 * codes) and its store ErrorCode, stderr logging (Mooncake's C interface has
 * no error channel but its log), Mooncake's port ranges and environment
 * variables, and its protocol / metadata strings.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "compat/compat.h"

int crx_te_error(int status)
{
    switch (status) {
    case CR_OK:
        return 0;
    case CR_ERR_TOO_MANY_REQUESTS:
        return CRX_TE_TOO_MANY_REQUESTS;
    case CR_ERR_ADDRESS_NOT_REGISTERED:
    case CR_ERR_NOT_REMOTE_ACCESSIBLE:
        return CRX_TE_ADDRESS_NOT_REGISTERED;
    case CR_ERR_BATCH_BUSY:
        return CRX_TE_BATCH_BUSY;
    case CR_ERR_ADDRESS_OVERLAPPED:
        return CRX_TE_ADDRESS_OVERLAPPED;
    case CR_ERR_DNS:
        return CRX_TE_DNS;
    case CR_ERR_PEER_UNREACHABLE:
    case CR_ERR_CONNECTION:
    case CR_ERR_BIND:
    case CR_ERR_TIMEOUT:
    case CR_ERR_SHUTDOWN:
    case CR_ERR_REMOTE:
        return CRX_TE_SOCKET;
    case CR_ERR_AUTH_FAILED:
    case CR_ERR_VERSION_MISMATCH:
    case CR_ERR_MALFORMED_FRAME:
        return CRX_TE_REJECT_HANDSHAKE;
    case CR_ERR_METADATA:
    case CR_ERR_METADATA_NOT_FOUND:
        return CRX_TE_METADATA;
    case CR_ERR_NO_MEMORY:
    case CR_ERR_SYSTEM:
        return CRX_TE_MEMORY;
    case CR_ERR_NOT_IMPLEMENTED:
    case CR_ERR_TRANSPORT_UNSUPPORTED:
        return CRX_TE_NOT_IMPLEMENTED;
    default:
        return status < 0 ? CRX_TE_INVALID_ARGUMENT : 0;
    }
}

int crx_te_status(int status)
{
    switch (status) {
    case CR_OK:
        return 0;
    case CR_ERR_TRANSPORT_UNSUPPORTED:
        return 8; /* kNotSupportedTransport */
    case CR_ERR_NOT_IMPLEMENTED:
        return 999; /* kNotImplemented */
    default:
        return -crx_te_error(status); /* the other codes share their magnitudes */
    }
}

int crx_store_error(int status)
{
    if (status >= 0 || status > CR_STATUS_OWN_FIRST)
        return status; /* success, or already a Mooncake store code */
    switch (status) {
    case CR_ERR_INVALID_CONFIG:
    case CR_ERR_ADDRESS_NOT_REGISTERED:
    case CR_ERR_ADDRESS_OVERLAPPED:
    case CR_ERR_OUT_OF_RANGE:
    case CR_ERR_RANGE_OVERFLOW:
    case CR_ERR_ZERO_LENGTH:
    case CR_ERR_NOT_REMOTE_ACCESSIBLE:
        return CR_INVALID_PARAMS;
    case CR_ERR_PEER_UNREACHABLE:
    case CR_ERR_CONNECTION:
    case CR_ERR_TIMEOUT:
    case CR_ERR_CANCELED:
    case CR_ERR_REMOTE:
    case CR_ERR_TRANSPORT_UNSUPPORTED:
        return CR_TRANSFER_FAIL;
    default:
        return CR_INTERNAL_ERROR;
    }
}

void crx_log(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "crescent-mooncake-compat: %s\n", line);
}

void crx_log_failure(const char *what, int status)
{
    const char *detail = cr_last_error_message();
    crx_log("%s: %s (%s)%s%s", what, cr_strerror(status), cr_status_name(status),
            detail[0] ? ": " : "", detail);
}

bool crx_has_port(const char *host)
{
    if (host[0] == '[')
        return strstr(host, "]:") != NULL;
    const char *c = strchr(host, ':');
    return c != NULL && strchr(c + 1, ':') == NULL && c[1] != '\0';
}

int crx_host_part(const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    if (name[0] == '[') {
        const char *end = strchr(name, ']');
        n = end ? (size_t)(end - name) + 1 : n;
    } else if (crx_has_port(name)) {
        n = (size_t)(strchr(name, ':') - name);
    }
    if (n + 1 > cap)
        return -1;
    memcpy(out, name, n);
    out[n] = '\0';
    return 0;
}

long crx_env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end != '\0') {
        crx_log("%s=%s is not an integer; using %ld", name, v, dflt);
        return dflt;
    }
    return x;
}

bool crx_env_flag(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 ||
                         strcasecmp(v, "yes") == 0 || strcasecmp(v, "on") == 0);
}

static bool valid_port(long p)
{
    return p >= 1024 && p <= 65535 && !(p >= 32768 && p <= 60999);
}

static long first_env(const char *const *names, long dflt)
{
    for (size_t i = 0; names[i] != NULL; i++) {
        const char *v = getenv(names[i]);
        if (v != NULL && *v != '\0') {
            char *end;
            long x = strtol(v, &end, 10);
            return *end == '\0' ? x : -1;
        }
    }
    return dflt;
}

void crx_port_range(const char *const *min_names, const char *const *max_names, int dlo, int dhi,
                    int *lo, int *hi)
{
    long a = first_env(min_names, dlo), b = first_env(max_names, dhi);
    if (!valid_port(a) || !valid_port(b) || a > b) {
        crx_log("invalid port range [%ld, %ld] from %s/%s; using [%d, %d]", a, b, min_names[0],
                max_names[0], dlo, dhi);
        a = dlo;
        b = dhi;
    }
    *lo = (int)a;
    *hi = (int)b;
}

#define CRX_RECENT_PORTS 64
static struct {
    pthread_mutex_t mu;
    int port[CRX_RECENT_PORTS]; /* a ring; 0: empty */
    unsigned next;
} recent_ports = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

/* Is port among this process's last picks in [lo, hi] (all but one of a small range)? */
static bool picked_lately(int port, int lo, int hi)
{
    int keep_off = hi - lo, seen = 0;
    bool found = false;
    pthread_mutex_lock(&recent_ports.mu);
    for (unsigned i = 1; i <= CRX_RECENT_PORTS && seen < keep_off && !found; i++) {
        int p = recent_ports.port[(recent_ports.next - i) % CRX_RECENT_PORTS];
        if (p < lo || p > hi) /* another range's, or empty */
            continue;
        seen++;
        found = p == port;
    }
    pthread_mutex_unlock(&recent_ports.mu);
    return found;
}

static void note_picked(int port)
{
    pthread_mutex_lock(&recent_ports.mu);
    recent_ports.port[recent_ports.next++ % CRX_RECENT_PORTS] = port;
    pthread_mutex_unlock(&recent_ports.mu);
}

int crx_pick_port(const char *host, int lo, int hi)
{
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    char bare[256];
    if (crx_host_part(host, bare, sizeof(bare)) < 0)
        return 0;
    const char *h = bare;
    if (bare[0] == '[') {
        bare[strlen(bare) - 1] = '\0';
        h = bare + 1;
    }
    if (getaddrinfo(h, "0", &hints, &ai) != 0 || ai == NULL)
        return 0;
    int port = 0;
    for (int attempt = 0; attempt < 500 && port == 0; attempt++) {
        uint32_t r = 0;
        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
            r = (uint32_t)rand();
        int p = lo + (int)(r % (uint32_t)(hi - lo + 1));
        if (attempt < 250 && picked_lately(p, lo, hi))
            continue;
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            break;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_storage ss;
        memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
        if (ss.ss_family == AF_INET6)
            ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)p);
        else
            ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)p);
        if (bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) == 0)
            port = p;
        close(fd);
    }
    freeaddrinfo(ai);
    if (port != 0)
        note_picked(port);
    return port;
}

int crx_protocol(const char *mooncake, const char **out)
{
    static const char *const hardware[] = {
        "efa",   "cxi",     "cxl",    "ascend", "hccs", "nvlink", "nvlink_intra", "hip", "musa",
        "barex", "ubshmem", "nvmeof", "mnnvl",  "ub",   "maca",   "sunrise_link", NULL};
    const char *p = mooncake != NULL ? mooncake : "";
    if (crx_env_flag("MC_FORCE_TCP") || strcasecmp(p, "tcp") == 0) {
        *out = "tcp";
        return 0;
    }
    if (*p == '\0' || strcasecmp(p, "rdma") == 0 || strcasecmp(p, "auto") == 0) {
        *out = "auto"; /* crescent's fastest path per buffer pair; it has no RDMA */
        return 0;
    }
    if (strcasecmp(p, "shm") == 0 || strcasecmp(p, "ucx") == 0) {
        *out = strcasecmp(p, "shm") == 0 ? "shm" : "ucx"; /* "ucx": crescent's name */
        return 0;
    }
    for (size_t i = 0; hardware[i] != NULL; i++)
        if (strcasecmp(p, hardware[i]) == 0) {
            crx_log("protocol '%s' is not available in crescent (use tcp or rdma)", p);
            return -1;
        }
    crx_log("unknown protocol '%s'", p);
    return -1;
}

int crx_metadata(const char *mooncake, const char **out)
{
    const char *m = mooncake != NULL && *mooncake ? mooncake : "P2PHANDSHAKE";
    if (strcasecmp(m, "P2PHANDSHAKE") == 0) {
        *out = "P2PHANDSHAKE";
        return 0;
    }
    /* The library checks these forms and connects: http(s)://, etcd://h:p[,h:p],
     * redis://h:p, and a bare "h:p[,h:p]" (etcd, Mooncake's default scheme). */
    static const char *const schemes[] = {"http://", "https://", "etcd://", "redis://", NULL};
    for (size_t i = 0; schemes[i] != NULL; i++)
        if (strncmp(m, schemes[i], strlen(schemes[i])) == 0) {
            *out = m;
            return 0;
        }
    if (strstr(m, "://") == NULL) {
        *out = m;
        return 0;
    }
    crx_log("metadata server '%s': unknown scheme; crescent supports P2PHANDSHAKE, "
            "http://, etcd://h:p[,h:p], h:p (etcd) and redis://h:p",
            m);
    return -1;
}

/* Mooncake variables the C interface does not act on, and what it does instead. */
static const struct {
    const char *name, *note;
} env_notes[] = {
    {"MC_TCP_BIND_ADDRESS", "crescent's engine binds and advertises the host of its name"},
    {"MC_USE_IPV6", "the address family follows the host name (give an IPv6 address)"},
    {"MC_HANDSHAKE_PORT", "peers handshake on the engine's one RPC port"},
    {"MC_STORE_USE_HUGEPAGE", "no HugeTLB pages: memfd segments, transparent huge pages where "
                              "the kernel enables them"},
    {"MC_STORE_HUGEPAGE_SIZE", "no HugeTLB pages are allocated"},
    {"MC_MMAP_ARENA_POOL_SIZE", "no mmap arena: memory is reserved lazily (MAP_NORESERVE)"},
    {"MC_STORE_MEMCPY", "the protocol decides: rdma copies in-process with memcpy and on one "
                        "host through shared memory; tcp uses sockets only"},
    {"MC_TE_METRIC", "the C interface logs no throughput reports (the Python package does)"},
    {"MC_STORE_CLIENT_METRIC_INTERVAL", "the store client keeps no metrics of its own; see the "
                                        "master's /metrics"},
};

void crx_check_env(void)
{
    static atomic_flag done = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&done))
        return; /* once per process */
    for (size_t i = 0; i < sizeof(env_notes) / sizeof(env_notes[0]); i++) {
        const char *v = getenv(env_notes[i].name);
        if (v != NULL && *v != '\0')
            crx_log("%s=%s is not used by crescent: %s", env_notes[i].name, v, env_notes[i].note);
    }
}
