/*
 * net.h - small socket helpers shared by the engine and tools: parsing
 * "host:port", resolving, listening, connecting with a deadline, and blocking
 * full reads/writes bounded by a deadline (poll-based; never spins).
 *
 * Every function returns 0 / a non-negative value or a negative cr_status
 * recorded with crb_error (message names the host, port or errno).
 */
#ifndef CRESCENT_BASE_NET_H
#define CRESCENT_BASE_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define CRB_HOST_MAX 256

/**
 * Split "host", "host:port" or "[v6]:port" into host and port. A missing port
 * yields *port = 0. Errors: CR_INVALID_PARAMS naming the text.
 */
int crb_parse_hostport(const char *text, char host[CRB_HOST_MAX], uint16_t *port);

/** Resolve host:port (numeric or name) to the first IPv4/IPv6 address. */
int crb_resolve(const char *host, uint16_t port, struct sockaddr_storage *addr, socklen_t *addrlen);

/**
 * Listen on host:port (port 0 = kernel picks). SO_REUSEADDR, close-on-exec,
 * non-blocking. On success returns the fd and writes the bound port.
 */
int crb_listen(const char *host, uint16_t port, int backlog, uint16_t *bound_port);

/**
 * Connect to host:port within timeout_ms. Returns a blocking, close-on-exec
 * fd with TCP_NODELAY set. Errors: CR_ERR_DNS, CR_ERR_PEER_UNREACHABLE,
 * CR_ERR_TIMEOUT.
 */
int crb_connect(const char *host, uint16_t port, int timeout_ms);

/** Read exactly len bytes before deadline_ns (crb_now_ns clock). */
int crb_read_full(int fd, void *buf, size_t len, uint64_t deadline_ns);
/** Write exactly len bytes before deadline_ns. Never raises SIGPIPE. */
int crb_write_full(int fd, const void *buf, size_t len, uint64_t deadline_ns);

int crb_set_nonblocking(int fd, int on);

/**
 * The first IPv4 address of network interface `ifname` (e.g. "eth0") as
 * dotted text into host. Errors: CR_ERR_INVALID_CONFIG when there is no such
 * interface or it has no IPv4 address (the message lists the interfaces
 * that have one), CR_ERR_SYSTEM when the interfaces cannot be read.
 */
int crb_interface_ipv4(const char *ifname, char host[CRB_HOST_MAX]);

/** Fill buf with len cryptographically random bytes (getrandom). */
int crb_random_bytes(void *buf, size_t len);

#endif
