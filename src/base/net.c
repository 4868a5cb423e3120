/*
 * net.c - socket helpers. Blocking I/O here is always bounded by a deadline
 * through poll(); the engine's hot data path does not use these functions.
 */
#include "base/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"

int crb_parse_hostport(const char *text, char host[CRB_HOST_MAX], uint16_t *port)
{
    if (text == NULL || text[0] == '\0')
        return crb_error(CR_INVALID_PARAMS, "empty host name");
    const char *host_start = text, *host_end, *port_text = NULL;
    if (text[0] == '[') {
        host_start = text + 1;
        host_end = strchr(host_start, ']');
        if (host_end == NULL)
            return crb_error(CR_INVALID_PARAMS, "unterminated '[' in host '%s'", text);
        if (host_end[1] == ':')
            port_text = host_end + 2;
        else if (host_end[1] != '\0')
            return crb_error(CR_INVALID_PARAMS, "junk after ']' in host '%s'", text);
    } else {
        const char *colon = strrchr(text, ':');
        if (colon != NULL && strchr(text, ':') != colon)
            colon = NULL; /* bare IPv6 address without port */
        host_end = colon != NULL ? colon : text + strlen(text);
        if (colon != NULL)
            port_text = colon + 1;
    }
    size_t hlen = (size_t)(host_end - host_start);
    if (hlen == 0 || hlen >= CRB_HOST_MAX)
        return crb_error(CR_INVALID_PARAMS, "bad host part in '%s'", text);
    unsigned long p = 0;
    if (port_text != NULL) {
        char *end = NULL;
        errno = 0;
        p = strtoul(port_text, &end, 10);
        if (port_text[0] == '\0' || *end != '\0' || errno != 0 || p > 65535 ||
            port_text[0] == '-' || port_text[0] == '+')
            return crb_error(CR_INVALID_PARAMS, "bad port '%s' in '%s'", port_text, text);
    }
    memcpy(host, host_start, hlen);
    host[hlen] = '\0';
    *port = (uint16_t)p;
    return 0;
}

int crb_resolve(const char *host, uint16_t port, struct sockaddr_storage *addr, socklen_t *addrlen)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char portbuf[8];
    snprintf(portbuf, sizeof(portbuf), "%u", (unsigned)port);
    int rc = getaddrinfo(host, portbuf, &hints, &res);
    if (rc != 0 || res == NULL)
        return crb_error(CR_ERR_DNS, "cannot resolve '%s': %s", host, gai_strerror(rc));
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int crb_set_nonblocking(int fd, int on)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0)
        return crb_error(CR_ERR_SYSTEM, "fcntl(F_GETFL): %s", strerror(errno));
    flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
    if (fcntl(fd, F_SETFL, flags) < 0)
        return crb_error(CR_ERR_SYSTEM, "fcntl(F_SETFL): %s", strerror(errno));
    return 0;
}

int crb_listen(const char *host, uint16_t port, int backlog, uint16_t *bound_port)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    int rc = crb_resolve(host, port, &ss, &sl);
    if (rc < 0)
        return rc;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return crb_error(CR_ERR_SYSTEM, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
        rc = crb_error(CR_ERR_BIND, "bind %s:%u: %s", host, (unsigned)port, strerror(errno));
        goto err_close;
    }
    if (listen(fd, backlog) < 0) {
        rc = crb_error(CR_ERR_BIND, "listen %s:%u: %s", host, (unsigned)port, strerror(errno));
        goto err_close;
    }
    struct sockaddr_storage bound;
    socklen_t bl = sizeof(bound);
    getsockname(fd, (struct sockaddr *)&bound, &bl);
    *bound_port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
    return fd;
err_close:
    close(fd);
    return rc;
}

static int wait_fd(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = crb_now_ns();
        if (now >= deadline_ns)
            return CR_ERR_TIMEOUT;
        int ms = (int)((deadline_ns - now + 999999) / 1000000);
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return CR_ERR_SYSTEM;
    }
}

int crb_connect(const char *host, uint16_t port, int timeout_ms)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    int rc = crb_resolve(host, port, &ss, &sl);
    if (rc < 0)
        return rc;
    uint64_t deadline = crb_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return crb_error(CR_ERR_SYSTEM, "socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&ss, sl) < 0) {
        if (errno != EINPROGRESS) {
            rc = crb_error(CR_ERR_PEER_UNREACHABLE, "connect %s:%u: %s", host, (unsigned)port,
                           strerror(errno));
            goto err_close;
        }
        rc = wait_fd(fd, POLLOUT, deadline);
        if (rc < 0) {
            rc = crb_error(rc, "connect %s:%u: no answer within %d ms", host, (unsigned)port,
                           timeout_ms);
            goto err_close;
        }
        int err = 0;
        socklen_t el = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err != 0) {
            rc = crb_error(CR_ERR_PEER_UNREACHABLE, "connect %s:%u: %s", host, (unsigned)port,
                           strerror(err));
            goto err_close;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    crb_set_nonblocking(fd, 0);
    return fd;
err_close:
    close(fd);
    return rc;
}

int crb_read_full(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    /* Try first and wait only when the socket has nothing: most calls find
     * their bytes already there and cost one system call, not two. */
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n == 0)
            return crb_error(CR_ERR_CONNECTION, "read: peer closed the connection");
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return crb_error(CR_ERR_CONNECTION, "read: %s", strerror(errno));
            int rc = wait_fd(fd, POLLIN, deadline_ns);
            if (rc < 0)
                return crb_error(rc, "read: no data before the deadline");
            continue;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int crb_write_full(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return crb_error(CR_ERR_CONNECTION, "write: %s", strerror(errno));
            int rc = wait_fd(fd, POLLOUT, deadline_ns);
            if (rc < 0)
                return crb_error(rc, "write: peer not accepting data before the deadline");
            continue;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int crb_interface_ipv4(const char *ifname, char host[CRB_HOST_MAX])
{
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) != 0)
        return crb_error(CR_ERR_SYSTEM, "interface '%s': getifaddrs: %s", ifname, strerror(errno));
    char seen[256] = "";
    int rc = CR_ERR_INVALID_CONFIG;
    for (struct ifaddrs *a = all; a != NULL; a = a->ifa_next) {
        if (a->ifa_addr == NULL || a->ifa_addr->sa_family != AF_INET)
            continue;
        if (strcmp(a->ifa_name, ifname) == 0) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)a->ifa_addr;
            inet_ntop(AF_INET, &in->sin_addr, host, CRB_HOST_MAX);
            rc = 0;
            break;
        }
        size_t l = strlen(seen);
        snprintf(seen + l, sizeof(seen) - l, "%s%s", l ? ", " : "", a->ifa_name);
    }
    freeifaddrs(all);
    if (rc != 0)
        return crb_error(rc, "interface '%s' does not exist or has no IPv4 address (have: %s)",
                         ifname, seen[0] ? seen : "none");
    return 0;
}

int crb_random_bytes(void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return crb_error(CR_ERR_SYSTEM, "getrandom: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A non-blocking, close-on-exec unix stream socket and the sockaddr_un of the abstract
 * name (a leading NUL, then the name, not NUL-terminated). Returns the fd. */
static int abstract_socket(const char *name, struct sockaddr_un *sa, socklen_t *len)
{
    size_t n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n > 100)
        return crb_error(CR_INVALID_PARAMS, "abstract socket name '%s' must be 1..100 bytes",
                         name != NULL ? name : "(null)");
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path + 1, name, n);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return crb_error(CR_ERR_SYSTEM, "socket(AF_UNIX) for @%s: %s", name, strerror(errno));
    return fd;
}

int crb_listen_abstract(const char *name, int backlog)
{
    struct sockaddr_un sa;
    socklen_t len;
    int fd = abstract_socket(name, &sa, &len);
    if (fd < 0)
        return fd;
    if (bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, backlog) != 0) {
        int rc = crb_error(CR_ERR_SYSTEM, "listening on @%s: %s", name, strerror(errno));
        close(fd);
        return rc;
    }
    return fd;
}

int crb_connect_abstract(const char *name, int32_t *peer_pid)
{
    struct sockaddr_un sa;
    socklen_t len;
    /* Non-blocking: a full backlog is an error at once, not a wait. */
    int fd = abstract_socket(name, &sa, &len);
    if (fd < 0)
        return fd;
    int rc;
    if (connect(fd, (struct sockaddr *)&sa, len) != 0) {
        rc = crb_error(CR_ERR_PEER_UNREACHABLE, "connect @%s: %s", name, strerror(errno));
        goto err_close;
    }
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (peer_pid != NULL && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
        rc = crb_error(CR_ERR_PEER_UNREACHABLE, "connect @%s: SO_PEERCRED: %s", name,
                       strerror(errno));
        goto err_close;
    }
    crb_set_nonblocking(fd, 0);
    if (peer_pid != NULL)
        *peer_pid = cred.pid;
    return fd;
err_close:
    close(fd);
    return rc;
}

uint16_t crb_local_port(int fd)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof(a);
    if (getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return 0;
    if (a.ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)&a)->sin_port);
    if (a.ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)&a)->sin6_port);
    return 0;
}

uint16_t crb_same_host_peer_port(int fd)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);
    if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 || me.ss_family != peer.ss_family)
        return 0;
    if (peer.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&me;
        const struct sockaddr_in *b = (const struct sockaddr_in *)&peer;
        bool loop = (ntohl(b->sin_addr.s_addr) >> 24) == 127;
        return loop || a->sin_addr.s_addr == b->sin_addr.s_addr ? ntohs(b->sin_port) : 0;
    }
    if (peer.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&me;
        const struct sockaddr_in6 *b = (const struct sockaddr_in6 *)&peer;
        bool loop = IN6_IS_ADDR_LOOPBACK(&b->sin6_addr) ||
                    (IN6_IS_ADDR_V4MAPPED(&b->sin6_addr) && b->sin6_addr.s6_addr[12] == 127);
        return loop || memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) == 0
                   ? ntohs(b->sin6_port)
                   : 0;
    }
    return 0;
}
