/*
 * thin.h - the thin mode of cr_store (include/crescent/store.h,
 * cr_store_setup_thin): a client whose every call the standalone store
 * client daemon (crescent-client) carries out, over a Unix socket with the
 * thin-client RPC (proto/thin.h) and memory both processes map.
 *
 *   crc_thin ─ pool        one sealed memfd: [0, pool_size) this process
 *            │             allocates (cr_store_pool_alloc, staging of copying
 *            │             puts and of slow-path calls), [pool_size, +lb) the
 *            │             daemon fills with copying gets' values
 *            ─ regions     registered memory: in the pool, shared (a file the
 *            │             daemon maps too) or slow path (copied through the pool)
 *            ─ connections one per concurrently calling thread (at most
 *            │             max_connections), each one request at a time; the
 *            │             first opens the daemon's session, the others attach
 *            ─ session     id + token + generation; a lost daemon ends it and
 *                          the next call opens a new one (same pool, regions
 *                          registered again)
 *
 * Files: thin_conn.c (session, connections, calls), thin_mem.c (pool,
 * regions, translation of pointers to extents), thin_ops.c (the store
 * operations), thin_sessions.c (Mooncake's ranged session API),
 * thin_direct.c (gets read straight from the daemon's segment),
 * thin_direct_put.c (puts written straight into it).
 *
 * Threading: every function may be called from any thread at once. Locks:
 * `lock` (session state and the idle connections), `pool_lock` (the pool's
 * allocator), `reg_lock` (the region table, a rwlock), `copy_lock` (a
 * rwlock: readers copy values out of the local buffer, a reconnect takes
 * it to write before a new session can place values there), `direct_mu`
 * and `direct_lock` (thin_direct.c: setting up / using the daemon's segment
 * mapping). Order: lock -> reg_lock; direct_mu -> direct_lock; a direct get
 * holds direct_lock (read) but no other lock across its master call;
 * pool_lock and copy_lock are taken alone.
 */
#ifndef CRESCENT_STORE_THIN_H
#define CRESCENT_STORE_THIN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "crescent/store.h"
#include "base/offset_allocator.h"
#include "base/spin.h"
#include "proto/frame_reader.h"
#include "proto/thin.h"

#define CRC_THIN_MIN_AREA   (2ull << 20) /* smallest pool and local buffer */
#define CRC_THIN_BATCH_KEYS 1024         /* keys per request */
#define CRC_THIN_BATCH_EXT  16384        /* extents per request */
#define CRC_THIN_KEY_BYTES  (256u << 10) /* key bytes per request */

typedef struct crc_thin_conn {
    struct crc_thin_conn *next; /* idle list */
    int fd;
    uint64_t gen; /* the session generation it belongs to */
    uint64_t last_used_ns;
    uint64_t next_id; /* request ids */
    uint8_t *in;      /* replies: bytes [0, in_len) received, not yet consumed */
    size_t in_len, in_cap;
    crp_buf out;
    int rx_fd;  /* a descriptor that came with a reply (SEGMENT), -1 if none */
    int rx_fd2; /* a second one (SEGMENT's writable descriptor), -1 if none */
} crc_thin_conn;

enum { CRC_REGION_POOL = 0, CRC_REGION_SHARED = 1, CRC_REGION_SLOW = 2 };

typedef struct crc_thin_region {
    uint8_t *base;
    uint64_t len;
    int kind;             /* CRC_REGION_* */
    int fd;               /* SHARED: our descriptor of the file, else -1 */
    uint64_t file_offset; /* SHARED: where base lies in the file */
    uint64_t daemon_id;   /* SHARED: the daemon's id in session generation id_gen */
    uint64_t id_gen;
} crc_thin_region;

typedef struct crc_thin {
    /* configuration */
    struct sockaddr_un addr;
    socklen_t addr_len;
    char address[128]; /* for messages */
    char secret[256];
    bool has_secret;
    char tenant[CRP_THIN_MAX_TENANT + 1];
    uint32_t call_timeout_ms, max_conns;
    crb_spin spin; /* CRESCENT_BUSY_POLL_US: how a caller polls for its reply before sleeping */

    /* pool + local buffer: one memfd */
    int pool_fd;
    uint8_t *pool;
    uint64_t pool_size, lb_size, map_size;
    crb_oa *pool_oa;
    size_t staging_live; /* staging extents taken (pool_lock) */
    pthread_mutex_t pool_lock;
    pthread_cond_t pool_freed;

    /* session and connections */
    pthread_mutex_t lock;
    pthread_cond_t conn_freed;
    bool connected;
    _Atomic uint64_t gen; /* bumped before each new session */
    uint64_t session;
    uint8_t token[CRP_THIN_TOKEN_SIZE];
    char segment[CR_STORE_MAX_SEGMENT + 1];
    char daemon_tenant[CRP_THIN_MAX_TENANT + 1];
    uint64_t last_attempt_ns;
    int last_error;
    char last_error_msg[256];
    crc_thin_conn *idle;
    size_t n_conns;
    pthread_rwlock_t copy_lock;

    /* regions, sorted by base */
    pthread_rwlock_t reg_lock;
    crc_thin_region *regs;
    size_t n_regs, cap_regs;

    /* direct reads and puts (thin_direct.c, thin_direct_put.c): the
     * daemon's segment mapped (read-write when the daemon handed a writable
     * descriptor and direct puts are on, else read-only) and a master
     * connection of our own */
    pthread_mutex_t direct_mu;           /* setting them up */
    pthread_rwlock_t direct_lock;        /* readers: reads from seg_map; writer: replacing it */
    bool direct_off;                     /* CRESCENT_THIN_DIRECT=0 (gets and puts) */
    bool direct_put_off;                 /* CRESCENT_THIN_DIRECT_PUT=0 (or direct_off) */
    uint64_t direct_gen;                 /* the session generation seg_map belongs to (0: none) */
    bool direct_on;                      /* for direct_gen: usable */
    bool direct_put_on;                  /* ... and writable, at a master that owns writes */
    atomic_bool direct_put_refused;      /* the master refused our owned writes: off for good */
    uint32_t put_owned_ms, put_bound_ms; /* thin_direct_put.c: D and B */
    uint8_t *seg_map;
    uint64_t seg_base, seg_size; /* where it lies in the daemon */
    char seg_name[CR_STORE_MAX_SEGMENT + 1];
    char master_addr[1024];
    struct crc_master *master;
    crp_rpc_uuid master_id; /* the client id of that connection */
    uint32_t rpc_timeout_ms;

    /* speculative direct single gets (thin_direct.c, as the embedded client's: get.c):
     * NULL when CRESCENT_GET_SPECULATE=0 */
    struct crc_loc_cache *loc;
    uint64_t spec_min;
    _Atomic uint64_t spec_reads, spec_hits;

    atomic_bool closed;
    _Atomic uint64_t direct_keys, direct_fallbacks;
    _Atomic uint64_t direct_put_keys, direct_put_fallbacks; /* thin_direct_put.c */
    _Atomic uint64_t calls, zero_copy_bytes, copied_bytes, slow_calls, slow_bytes, transient_calls,
        reconnects, lost;
} crc_thin;

/* thin_conn.c ------------------------------------------------------------- */

/* Parse server_address into t->addr (thin.h's forms). */
int crc_thin_parse_address(const char *text, struct sockaddr_un *addr, socklen_t *len,
                           char *display, size_t display_len);
/* Open the first session (setup). */
int crc_thin_connect(crc_thin *t);
/* Close every connection (the daemon's session ends when the last closes). */
void crc_thin_disconnect(crc_thin *t);
/*
 * One call: send req (with fds attached, if any) and wait for the reply
 * (decoded into *resp; the caller clears it). Reconnects first when the
 * session was lost (or a connection was found closed before sending).
 * need_gen (0: any) refuses to send the request in another session than
 * that one (its extents name that session's regions): CR_ERR_DAEMON_LOST.
 * *gen_out (may be NULL) is the session generation the call ran in.
 * Errors: CR_ERR_DAEMON_UNREACHABLE, CR_ERR_DAEMON_LOST, CR_ERR_TIMEOUT,
 * CR_ERR_MALFORMED_FRAME, CR_UNAVAILABLE_IN_CURRENT_STATUS (closed), codec
 * errors. The reply's own status is in resp->status.
 */
int crc_thin_call(crc_thin *t, const crp_thin_req *req, const int *fds, size_t n_fds,
                  crp_thin_resp *resp, uint64_t need_gen, uint64_t *gen_out);
/* Connect if the session was lost; *gen: the session generation now (the
 * one extents translated afterwards belong to). Errors as crc_thin_call. */
int crc_thin_ensure(crc_thin *t, uint64_t *gen);

/* thin_mem.c -------------------------------------------------------------- */

int crc_thin_pool_create(crc_thin *t, uint64_t pool_size, uint64_t lb_size);
void crc_thin_pool_destroy(crc_thin *t);
/* An extent of exactly size (> 0) bytes of the pool; wait: sleep until one
 * is free (size <= pool), else CR_NO_AVAILABLE_HANDLE at once. */
int crc_thin_pool_take(crc_thin *t, uint64_t size, bool wait, crb_oa_allocation *out);
void crc_thin_pool_give(crc_thin *t, const crb_oa_allocation *a);

/* How [p, p + len) is reached by the daemon. */
typedef enum crc_reach { CRC_REACH_DIRECT, CRC_REACH_SLOW } crc_reach;
/* DIRECT: *ext names it (pool or a shared region); SLOW: registered memory
 * the daemon cannot map. Errors: CR_ERR_ADDRESS_NOT_REGISTERED. */
int crc_thin_translate(crc_thin *t, const void *p, uint64_t len, crp_thin_ext *ext, crc_reach *how);
/* Register the shared regions with a new session (conn is its first
 * connection, not yet in the idle list). */
int crc_thin_replay_regions(crc_thin *t, crc_thin_conn *c, uint64_t gen);
int crc_thin_register(cr_store *s, void *buf, size_t len);
int crc_thin_unregister(cr_store *s, void *buf);
void crc_thin_regions_free(crc_thin *t);

/* A temporary memfd for one value too large for the pool or local buffer. */
typedef struct crc_transient {
    int fd;
    uint8_t *p;
    uint64_t len;
} crc_transient;
int crc_transient_create(uint64_t len, crc_transient *out);
void crc_transient_destroy(crc_transient *tr);

/* thin_conn.c: a connection taken for a call and given back. */
int crc_thin_conn_take(crc_thin *t, crc_thin_conn **out);
void crc_thin_conn_give(crc_thin *t, crc_thin_conn *c, bool broken);
int crc_thin_conn_call(crc_thin *t, crc_thin_conn *c, const crp_thin_req *req, const int *fds,
                       size_t n_fds, crp_thin_resp *resp, bool *sent);
/* Send a request that has no reply (RELEASE) on a connection taken for a
 * call, before giving it back. */
int crc_thin_conn_send(crc_thin *t, crc_thin_conn *c, const crp_thin_req *req);
/* Is rc a failure after which a connection cannot be used again? */
bool crc_thin_breaks_conn(int rc);

/* thin_direct.c: reads straight from the daemon's segment ---------------- */

void crc_thin_direct_init(crc_thin *t);
void crc_thin_direct_fini(crc_thin *t);
/*
 * Try the n keys (each checked) directly: one replica-list call to the
 * master on our own connection, and for each key whose replica lies in the
 * daemon's segment a copy out of our mapping of it, under the read lease
 * (CR_LEASE_EXPIRED if it ran out, as an embedded get), then the lease
 * release. Zero-copy form: bufs/sizes/counts per key (the parts must be
 * memory the daemon path would accept too); copying form: bufs == NULL and
 * values_out[i] gets a malloc'd value. done[i] tells which keys got their
 * final results[i] (and values_out[i]); the others go through the daemon
 * (replica elsewhere, a master error other than not-found, a lost daemon,
 * direct reads refused or off). Never fails as a whole.
 */
void crc_thin_direct_get(crc_thin *t, const char *const *keys, size_t n, void *const *const *bufs,
                         const size_t *const *sizes, const size_t *counts, void **values_out,
                         int64_t *results, bool *done);

/*
 * Take a connection of the current session and set up the direct mapping
 * for its generation if needed; on success direct_lock is held for reading
 * (t->direct_on / direct_put_on say what is usable for c->gen, when
 * t->direct_gen == c->gen) until crc_thin_direct_leave gives c back
 * (lost: the daemon is gone, the connection with it). Errors: the
 * connection's (the daemon path reports them).
 */
int crc_thin_direct_enter(crc_thin *t, crc_thin_conn **out);
void crc_thin_direct_leave(crc_thin *t, crc_thin_conn *c, bool lost);
/* Is the daemon of c's session still there? (No EOF or stray bytes on c.) */
bool crc_thin_daemon_alive(crc_thin_conn *c);

/* thin_direct_put.c: puts straight into the daemon's segment -------------- */

/*
 * Try the n keys (already checked, values in parts/sizes/counts) directly:
 * PUT_START (or UPSERT_START) owned by our master connection, one replica
 * preferred in the daemon's segment, a copy into our writable mapping of
 * it, PUT_END. done[i] tells which keys got their final results[i]; the
 * others (another placement, any master refusal, a lost daemon, a copy past
 * the stalled-writer bound, direct puts off or refused) were revoked and go
 * through the daemon. zero_copy: the parts must be memory the daemon path
 * would take too (else none is done). Never fails as a whole.
 */
void crc_thin_direct_put(crc_thin *t, const char *const *keys, size_t n,
                         const void *const *const *parts, const size_t *const *sizes,
                         const size_t *counts, bool zero_copy, bool upsert,
                         const cr_replicate_config *cfg, int *results, bool *done);

/* thin_ops.c: the dispatch targets of cr_store_* in thin mode ------------- */

int crc_thin_health(cr_store *s);
int crc_thin_hostname(cr_store *s, char *buf, size_t len);
void crc_thin_close(cr_store *s);
void crc_thin_destroy(cr_store *s);
int crc_thin_put(cr_store *s, const char *key, const void *const *parts, const size_t *sizes,
                 size_t n, bool zero_copy, bool upsert, const cr_replicate_config *cfg);
int crc_thin_batch_put(cr_store *s, const char *const *keys, const void *const *const *parts,
                       const size_t *const *sizes, const size_t *counts, size_t n, bool zero_copy,
                       bool upsert, const cr_replicate_config *cfg, int *results);
int crc_thin_batch_put1(cr_store *s, const char *const *keys, const void *const *bufs,
                        const size_t *sizes, size_t n, bool zero_copy, bool upsert,
                        const cr_replicate_config *cfg, int *results);
int crc_thin_batch_get_into1(cr_store *s, const char *const *keys, void *const *bufs,
                             const size_t *caps, size_t n, int64_t *results);
int64_t crc_thin_get_into(cr_store *s, const char *key, void *const *bufs, const size_t *sizes,
                          size_t n);
int64_t crc_thin_get(cr_store *s, const char *key, void **value_out);
int crc_thin_batch_get_into(cr_store *s, const char *const *keys, void *const *const *bufs,
                            const size_t *const *sizes, const size_t *counts, size_t n,
                            int64_t *results);
int crc_thin_batch_get(cr_store *s, const char *const *keys, size_t n, void **values_out,
                       int64_t *results);
int64_t crc_thin_get_size(cr_store *s, const char *key);
int crc_thin_exist(cr_store *s, const char *key);
int crc_thin_keys_op(cr_store *s, int op, const char *const *keys, size_t n, bool force,
                     int *results);
int crc_thin_remove(cr_store *s, const char *key, bool force);
int64_t crc_thin_remove_regex(cr_store *s, const char *pattern, bool force);
int64_t crc_thin_remove_all(cr_store *s, bool force);
int crc_thin_get_replicas(cr_store *s, const char *key, cr_replica_info *out, size_t cap);
int crc_thin_replica_clear(cr_store *s, const char *const *keys, size_t n, const char *segment,
                           int *results);
int crc_thin_list_segments(cr_store *s, char ***names_out, size_t *n_out);

/* thin_sessions.c: session tables (a daemon table per client table) ------- */

int crc_thin_table_create(cr_store *s, uint64_t *id);
void crc_thin_table_destroy(cr_store *s, uint64_t id);
int crc_thin_sessions_keys(cr_store *s, int op, uint64_t id, const char *const *keys, size_t n,
                           const uint64_t *sizes, const cr_replicate_config *cfg, int *results);
int crc_thin_ranges(cr_store *s, int op, uint64_t id, const char *const *keys,
                    void *const *const *bufs, const size_t *const *sizes,
                    const uint64_t *const *offsets, const size_t *counts, size_t n,
                    int64_t *results);

/* Closed? (CR_UNAVAILABLE_IN_CURRENT_STATUS) */
int crc_thin_check(cr_store *s);

#endif
