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

/**
 * Listen on the abstract unix socket `name` (Linux; no file, gone with the
 * process; visible only in this network namespace). Close-on-exec,
 * non-blocking. Returns the fd. Errors: CR_INVALID_PARAMS (name empty or
 * longer than 100 bytes), CR_ERR_SYSTEM (the name is taken, or no socket).
 */
int crb_listen_abstract(const char *name, int backlog);

/**
 * Connect to the abstract unix socket `name` (a local connect does not wait:
 * it succeeds or fails at once). Returns a blocking, close-on-exec fd and,
 * when peer_pid is not NULL, writes the pid of the process that listens
 * (SO_PEERCRED, in this process's pid namespace; 0 when that process is not
 * visible in it). Errors: CR_INVALID_PARAMS, CR_ERR_PEER_UNREACHABLE.
 */
int crb_connect_abstract(const char *name, int32_t *peer_pid);

/** The local port of TCP socket fd (0: not bound, or not TCP). */
uint16_t crb_local_port(int fd);

/**
 * The port of the far end of TCP connection fd when that end is on this
 * host in this network namespace (its address is a loopback one, or the
 * connection's own local address), else 0 (also for a non-TCP fd).
 */
uint16_t crb_same_host_peer_port(int fd);

/** Fill buf with len cryptographically random bytes (getrandom). */
int crb_random_bytes(void *buf, size_t len);

#endif
