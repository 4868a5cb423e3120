/*
 * compat.h - shared parts of libcrescent-mooncake-compat (layer compat,
 * prefix crx_): Mooncake's C interfaces (include/mooncake-compat/) over
 * crescent's public API (include/crescent/) and nothing else, so this
 * layer depends on no internal header and links libcrescent.so.
 *
 *   common.c             status mapping, logging, ports, protocol/metadata strings
 *   transfer_engine_c.c  transfer_engine_c.h over cr_engine
 *   store_c.c            store_c.h over cr_store
 *
 * Exported functions carry CRX_EXPORT (the project builds with
 * -fvisibility=hidden); crx_ helpers stay internal.
 */
#ifndef CRESCENT_COMPAT_COMPAT_H
#define CRESCENT_COMPAT_COMPAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crescent/engine.h"
#include "crescent/store.h"

#define CRX_EXPORT __attribute__((visibility("default")))

/* Mooncake's transfer-engine errors (its error.h), as negative ints. */
#define CRX_TE_INVALID_ARGUMENT       (-1)
#define CRX_TE_TOO_MANY_REQUESTS      (-2)
#define CRX_TE_ADDRESS_NOT_REGISTERED (-3)
#define CRX_TE_BATCH_BUSY             (-4)
#define CRX_TE_ADDRESS_OVERLAPPED     (-7)
#define CRX_TE_DNS                    (-101)
#define CRX_TE_SOCKET                 (-102)
#define CRX_TE_REJECT_HANDSHAKE       (-104)
#define CRX_TE_METADATA               (-200)
#define CRX_TE_MEMORY                 (-302)
#define CRX_TE_NOT_IMPLEMENTED        (-303)

/** A crescent status as Mooncake's negative transfer-engine error. */
int crx_te_error(int status);
/** A crescent status as Mooncake's Status::Code (0 ok, positive failure),
 *  what submitTransfer / getTransferStatus / freeBatchID return. */
int crx_te_status(int status);
/** A crescent status as Mooncake's store ErrorCode: store codes pass through
 *  (they are Mooncake's numbers), engine codes become INVALID_PARAMS (bad
 *  memory arguments), TRANSFER_FAIL (moving bytes) or INTERNAL_ERROR. */
int crx_store_error(int status);

/** "crescent-mooncake-compat: <what>: <cr_last_error_message()>" to stderr. */
void crx_log_failure(const char *what, int status);
/** "crescent-mooncake-compat: <text>" to stderr. */
void crx_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** Does "host:port" / "[v6]:port" carry a port? */
bool crx_has_port(const char *host);
/** The host part of "host[:port]" into out (cap bytes): 0, or -1 if too long. */
int crx_host_part(const char *name, char *out, size_t cap);

/**
 * A port range from the first set variable of min_names / max_names (each a
 * NULL-terminated list), else [dlo, dhi]; validated as Mooncake validates
 * it (1024..65535 outside the ephemeral 32768..60999, min <= max), a bad
 * range logs and gives the default.
 */
void crx_port_range(const char *const *min_names, const char *const *max_names, int dlo, int dhi,
                    int *lo, int *hi);
/**
 * A random port in [lo, hi] that can be bound on host now, not one of this
 * process's last picks in the range (up to 64, all but one of a smaller
 * range) while the first half of the tries lasts (a store set up again would
 * otherwise now and then get its previous segment's name back over the same
 * memory, which the master fences for up to a lease); 0 if none. Any thread.
 */
int crx_pick_port(const char *host, int lo, int hi);
/** Integer environment variable (default when unset or malformed). */
long crx_env_long(const char *name, long dflt);
/** Is a boolean environment variable set true (1/true/yes/on)? */
bool crx_env_flag(const char *name);

/**
 * Mooncake protocol / metadata strings as crescent's: 0 with *out set, or
 * -1 after logging why (hardware transports, etcd/redis metadata).
 * MC_FORCE_TCP makes every protocol "tcp".
 */
int crx_protocol(const char *mooncake, const char **out);

/**
 * Mooncake's (name, msg) notifications inside crescent's payloads
 * (notify_frame.c): frame into a malloc'd *out of *len bytes (at most cap;
 * -1 when longer or out of memory); parse a peer's payload (any bytes) into
 * malloc'd NUL-terminated *name and *msg (sender names native ones).
 */
int crx_notify_frame(const char *name, const char *msg, size_t cap, char **out, size_t *len);
int crx_notify_parse(const char *payload, size_t len, const char *sender, char **name, char **msg);

/** Name, once per process, each Mooncake environment variable this
 *  interface does not act on, with what crescent does instead. */
void crx_check_env(void);
int crx_metadata(const char *mooncake, const char **out);

#endif
