/*
 * daemon.h - crescent-client, the standalone store client (Mooncake's
 * "real client", mooncake_client): one per host, it owns the host's global
 * segment, the transfer engine and the master connection (one embedded
 * cr_store), and carries out the store calls of the thin clients on this
 * host (cr_store_setup_thin) that reach it over a Unix socket.
 *
 *   crs_daemon ─ store        the embedded cr_store (segment mounted, heartbeats,
 *              │              remount after a master restart)
 *              ─ loops[]      --threads service loops (base/evloop.h); loop 0 also
 *              │              accepts (base/acceptor.h); each connection lives on
 *              │              one loop, which reads its requests and runs them
 *              │              inline, one at a time: no thread per client
 *              ─ sessions     one per thin client process: its pool mapped here,
 *              │              its registered regions, its local-buffer allocator,
 *              │              its session tables; ends with its last connection
 *              ─ http         optional /metrics and /health (--enable_http_server)
 *
 * Files: server.c (lifecycle, loops, connections, framing, SCM_RIGHTS),
 * session.c (sessions, memory mapping, teardown), handlers.c (the ops),
 * flags.c (the command line), http.c (/metrics, /health).
 *
 * Threading: crs_daemon_start / _stop from one thread (main); everything
 * else runs on the service loops. Locks: d->lock (session table, connection
 * list) -> session->mu (regions, tables, local buffer); counters are
 * relaxed atomics.
 */
#ifndef CRESCENT_CLIENT_DAEMON_H
#define CRESCENT_CLIENT_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "crescent/store.h"
#include "base/acceptor.h"
#include "base/evloop.h"
#include "base/offset_allocator.h"
#include "httpd/mhd_server.h"
#include "proto/messages.h"
#include "proto/thin.h"

#define CRS_MAX_LOOPS       64
#define CRS_QUEUED_FDS      16          /* descriptors received and not yet claimed */
#define CRS_INPUT_START     (64u << 10) /* connection input buffer, grown to a frame */
#define CRS_MAX_OUT_PENDING (16u << 20) /* unsent replies before a connection stops reading */

/* What the command line configures (flags.c). */
typedef struct crs_config {
    char host[256]; /* --host: the engine's local hostname */
    char metadata[1024];
    char protocol[32];
    char devices[1024];
    char master[1024];
    uint64_t global_segment_size;
    uint64_t local_buffer_size; /* the daemon's own staging */
    char tenant[CRP_THIN_MAX_TENANT + 1];
    uint16_t port;    /* --port: names the socket @crescent-client-<port> */
    char socket[108]; /* --socket: "@name" or a path; overrides the port's name */
    uint32_t threads; /* service loops */
    uint32_t max_clients;
    char secret[256];    /* --shared_secret (or CRESCENT_CLIENT_SECRET) */
    bool allow_any_user; /* serve clients of other uids (their memory must be sealed) */
    bool enable_http_server;
    uint16_t http_port;
    char http_host[256];
    char log_dir[1024];
    uint32_t rpc_timeout_ms, transfer_timeout_ms, heartbeat_ms;
    bool enable_offload; /* --enable_offload: the host's SSD tier at
                            MOONCAKE_OFFLOAD_FILE_STORAGE_PATH (docs/disk-tier.md) */
    char ssd_path[1024]; /* --ssd_offload_path (crescent): overrides the variable */
    bool show_help, show_version;
} crs_config;

/* Defaults: Mooncake's real_client_main where it has the flag. */
void crs_config_defaults(crs_config *c);

/*
 * Parse argv (Mooncake's flags and crescent's, see flags.c). 0, or
 * CR_INVALID_PARAMS with a message naming the flag (the caller exits 2).
 */
int crs_parse_flags(crs_config *c, int argc, char **argv);

/* The usage text (for --help). */
const char *crs_usage(void);

/* --- the daemon ------------------------------------------------------------ */

typedef struct crs_session crs_session;
typedef struct crs_conn crs_conn;

typedef struct crs_counters {
    _Atomic uint64_t calls[64], failures[64]; /* by op (op % 64) */
    /* Time spent serving by op (op % 64), from the decoded request to the
     * queued reply: what a call costs inside the daemon, the rest of a thin
     * client's latency being the hop (wake-ups, socket, framing). */
    _Atomic uint64_t busy_ns[64];
    _Atomic uint64_t connections_accepted, connections_refused, auth_failures;
    _Atomic uint64_t sessions_opened, sessions_closed, protocol_errors;
    _Atomic uint64_t zero_copy_bytes, transient_bytes, copied_out_bytes;
    _Atomic uint64_t revoked_tables;
} crs_counters;

typedef struct crs_daemon {
    crs_config cfg;
    cr_store *store;
    char segment[CR_STORE_MAX_SEGMENT + 1];
    char socket_name[128]; /* for messages: "@crescent-client-50052" */
    uid_t uid;
    /* The segment for thin clients' direct reads (SEGMENT, direct.c): a
     * read-only descriptor of its memfd (-1: none), where it lies here. */
    int seg_fd;
    int seg_rw_fd; /* a writable one for same-uid direct puts (-1: none) */
    uint64_t seg_base, seg_size;

    crb_loop loops[CRS_MAX_LOOPS];
    unsigned n_loops;
    bool loops_started;
    crb_acceptor acceptor;
    bool accepting;
    atomic_uint next_loop;

    pthread_mutex_t lock;
    crs_session **sessions;
    size_t n_sessions, cap_sessions;
    uint64_t next_session;
    crs_conn *conns; /* every open connection */
    size_t n_conns;

    crh_mhd_server http;
    bool http_running;
    crs_counters ctr;
    _Atomic uint64_t mapped_bytes; /* client memory mapped now */
    _Atomic uint64_t lb_used;      /* local-buffer bytes handed out now */
    _Atomic uint64_t regions;      /* registered regions now */
} crs_daemon;

/* Set up the store, bind the socket, start the loops (and the HTTP server).
 * On failure everything started is stopped again. */
int crs_daemon_start(crs_daemon *d, const crs_config *cfg);
/* Stop accepting, close every connection (ending their sessions), stop the
 * loops and the HTTP server, then close the store (unmount). Idempotent. */
void crs_daemon_stop(crs_daemon *d);

/* --- server.c: for the other files ------------------------------------------ */

struct crs_conn {
    crb_io io; /* first member */
    crs_daemon *d;
    crs_conn *next, *prev; /* d->conns */
    int fd;
    pid_t pid;
    uid_t uid;
    uint8_t nonce[CRP_THIN_NONCE_SIZE];
    crs_session *sess; /* after HELLO */
    uint8_t *in;
    size_t in_len, in_cap;
    int fds[CRS_QUEUED_FDS];
    size_t n_fds;
    crp_buf out;
    size_t out_off;
    bool closing;
};

/* Take the first n queued descriptors of c (the caller owns them). */
int crs_conn_take_fds(crs_conn *c, size_t n, int *out);

/* --- session.c ------------------------------------------------------------- */

/* A registered region of a session (a file of the client mapped here). */
typedef struct crs_region {
    uint32_t id;
    uint8_t *map;     /* our mapping */
    uint64_t map_len; /* of the mapping */
    uint8_t *base;    /* where the client's region starts in it */
    uint64_t len;
    int refs; /* calls using it + 1 while registered */
    bool registered;
} crs_region;

typedef struct crs_table {
    uint32_t id;
    cr_store_sessions *t;
    int refs;
} crs_table;

struct crs_session {
    uint64_t id;
    uint8_t token[CRP_THIN_TOKEN_SIZE];
    pid_t pid;
    uid_t uid;
    int conns; /* open connections (d->lock) */
    uint8_t *map;
    uint64_t map_size, pool_size, lb_size;
    pthread_mutex_t mu;
    crb_oa *lb_oa;
    /* live local-buffer allocations: offset -> node (open addressing) */
    uint64_t *lb_keys;
    uint32_t *lb_nodes;
    size_t lb_cap, lb_count;
    crs_region **regions;
    size_t n_regions, cap_regions;
    uint32_t next_region;
    crs_table **tables;
    size_t n_tables, cap_tables;
    uint32_t next_table;
};

/* HELLO of a new session: map the pool (fd is ours), register it. */
int crs_session_open(crs_daemon *d, crs_conn *c, const crp_thin_req *hello, int fd,
                     crs_session **out);
/* HELLO of a further connection: find the session and check its token. */
int crs_session_attach(crs_daemon *d, crs_conn *c, const crp_thin_req *hello, crs_session **out);
/* A connection of s closed; the last one tears it down. */
void crs_session_drop(crs_daemon *d, crs_session *s);

/* Resolve an extent of s into our address space; pins its region (unpin
 * with crs_session_unpin_all on the list it was added to). */
typedef struct crs_pins {
    crs_region *r[16];
    size_t n;
    bool overflow;
} crs_pins;
int crs_session_resolve(crs_session *s, const crp_thin_ext *e, crs_pins *pins, void **out);
void crs_session_unpin_all(crs_daemon *d, crs_session *s, crs_pins *pins);

int crs_session_register(crs_daemon *d, crs_session *s, const crp_thin_req *req, int fd,
                         uint32_t *id);
int crs_session_unregister(crs_daemon *d, crs_session *s, uint32_t id);

/* Local buffer: room for a value, its offset from the mapping's start. */
int crs_lb_alloc(crs_daemon *d, crs_session *s, uint64_t size, uint64_t *offset);
void crs_lb_free(crs_daemon *d, crs_session *s, uint64_t offset);

int crs_table_create(crs_daemon *d, crs_session *s, uint32_t *id);
crs_table *crs_table_get(crs_session *s, uint32_t id);
void crs_table_put(crs_daemon *d, crs_session *s, crs_table *t);
int crs_table_destroy(crs_daemon *d, crs_session *s, uint32_t id);

/* Map [offset, offset + len) of a client's file: validated (size, seals when
 * serving any user), aligned for mmap. */
int crs_map_client_file(crs_daemon *d, int fd, uid_t uid, uint64_t offset, uint64_t len,
                        uint8_t **map, uint64_t *map_len, uint8_t **base);
void crs_unmap_client(crs_daemon *d, uint8_t *map, uint64_t len);

/* --- direct.c: the segment for direct reads ------------------------------------ */

/* Open d->seg_fd (a read-only descriptor of the embedded store's segment);
 * no segment or no descriptor leaves it -1 (SEGMENT is then refused). */
void crs_direct_open(crs_daemon *d);
void crs_direct_close(crs_daemon *d);
/* Answer SEGMENT (request id) on c: the segment's name, base, size
 * and the master address, with the descriptor riding on the reply's first
 * byte; refused (CR_UNAVAILABLE_IN_CURRENT_MODE) for a client of another
 * uid, without a segment, or with replies still queued. Returns false if
 * the connection must close. */
bool crs_direct_answer(crs_conn *c, uint64_t id);
/* server.c: append a reply frame for request id to c's output (sent after the request). */
void crs_conn_reply(crs_conn *c, uint64_t id, crp_thin_resp *resp);

/* --- handlers.c -------------------------------------------------------------- */

/* Run one request of an established session; fill resp (whose arrays may
 * point into *scratch, freed by the caller with crs_scratch_free). */
typedef struct crs_scratch {
    void *p[16];
    size_t n;
} crs_scratch;
void *crs_scratch_alloc(crs_scratch *sc, size_t size);
void crs_scratch_free(crs_scratch *sc);
void crs_handle(crs_daemon *d, crs_conn *c, const crp_thin_req *req, crp_thin_resp *resp,
                crs_scratch *sc);

/* --- http.c ------------------------------------------------------------------ */

int crs_http_start(crs_daemon *d);
/* Stops the /health and /metrics server if it runs. False when a handler
 * stayed stuck past libmicrohttpd's stop bound (logged): what handlers read
 * (d's store, lock, counters) must then stay allocated until the exit. */
bool crs_http_stop(crs_daemon *d);
/* The Prometheus text of /metrics (malloc'd, NUL-terminated). */
char *crs_metrics_text(crs_daemon *d);

#endif
