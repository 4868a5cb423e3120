/*
 * bench.h - shared pieces of crescent-bench.
 *
 * Design: main.c only dispatches on the subcommand (argv[1]); each subcommand
 * lives in its own file behind a cb_<name>_main(argc, argv) entry point whose
 * argv[0] is the subcommand name. The helpers here are deliberately small and
 * engine-agnostic so later subcommands (store, ...) can reuse them:
 *   util.c      flag/size parsing, clocks, a log-linear latency histogram,
 *               the verification pattern, the progress line
 *   child.c     fork+exec of /proc/self/exe with stdin/stdout pipes
 *   baseline.c  plain TCP socket copy and memcpy reference measurements
 * Only the public crescent headers are used, except by disk_bench.c, which
 * measures the disk tier's layer (src/disk) before it has a public API.
 */
#ifndef CRESCENT_BENCH_H
#define CRESCENT_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "proc.h"

#define CB_PROG       "crescent-bench"
#define CB_EXIT_OK    0
#define CB_EXIT_FAIL  1 /* a transfer, a verification or the environment failed */
#define CB_EXIT_USAGE 2 /* bad command line */

#define CB_KIB ((uint64_t)1 << 10)
#define CB_MIB ((uint64_t)1 << 20)
#define CB_GIB ((uint64_t)1 << 30)

/* ---- subcommands (argv[0] is the subcommand name) ----------------------- */

int cb_engine_main(int argc, char **argv);
int cb_master_main(int argc, char **argv);
int cb_store_main(int argc, char **argv);
int cb_thin_main(int argc, char **argv);
int cb_metadata_main(int argc, char **argv);
int cb_disk_main(int argc, char **argv); /* links the disk layer (src/disk) directly */
int cb_soak_main(int argc, char **argv);
int cb_ha_main(int argc, char **argv);      /* etcd + HA masters (docs/ha.md) */
int cb_offload_main(int argc, char **argv); /* the SSD tier through the store */

/* ---- util.c ------------------------------------------------------------- */

/* Monotonic clock in nanoseconds. */
uint64_t cb_now_ns(void);

/* "N", "NK", "NM", "NG", "NT" (binary; an optional trailing "B"/"iB"). */
/*
 * A comma list of sizes ("4K,64K,1M") into out[0..max), each in [1, limit];
 * *n the count. 0, or -1 after printing "<prog>: <flag> ..." naming the bad
 * item (empty item, not a size, out of range, more than max).
 */
int cb_parse_size_list(const char *prog, const char *flag, const char *text, uint64_t limit,
                       uint64_t *out, size_t max, size_t *n);
int cb_parse_size(const char *text, uint64_t *out);
/* Decimal integer in [min, max]. */
int cb_parse_u32(const char *text, uint32_t min, uint32_t max, uint32_t *out);
/* Positive, finite number of seconds (fractions allowed), at most a day. */
int cb_parse_seconds(const char *text, double *out);
/* Decimal or 0x-prefixed hexadecimal unsigned 64-bit integer. */
int cb_parse_u64(const char *text, uint64_t *out);

/* Exact compact size: "4K", "1M", "1536K", "1000". Returns buf. */
/* A flag's value that is not what it must be: "crescent-bench BENCH: FLAG 'VALUE' is
 * not WANT" on stderr. Returns -1 (a parse failure). */
int cb_bad_value(const char *bench, const char *flag, const char *value, const char *want);

const char *cb_format_size(uint64_t v, char *buf, size_t len);
/* Rounded human size with binary units: "1.23 GiB". Returns buf. */
const char *cb_format_bytes(uint64_t v, char *buf, size_t len);

/*
 * Log-linear histogram of nanosecond values: exact below 32, then 32
 * sub-buckets per power of two (relative error <= 1/64 at the midpoint).
 */
#define CB_HIST_BUCKETS (60 * 32)
typedef struct cb_hist {
    uint64_t counts[CB_HIST_BUCKETS];
    uint64_t total;
} cb_hist;

void cb_hist_add(cb_hist *h, uint64_t value_ns, uint64_t weight);
void cb_hist_merge(cb_hist *dst, const cb_hist *src);
/* Value at quantile q (0 < q <= 1), bucket midpoint; 0 for an empty histogram. */
uint64_t cb_hist_quantile(const cb_hist *h, double q);

/** Smallest, median (the mean of the middle two for an even n) and largest of v[0..n),
 *  1 <= n <= 64; v is not changed. */
void cb_range(const double *v, unsigned n, double *lo, double *med, double *hi);

/*
 * The verification pattern: byte o of a logical buffer filled with seed s is
 * byte (o % 8) (little-endian) of splitmix64(o / 8 + s). It does not repeat
 * within a buffer, so a block landing at the wrong offset is detected.
 * cb_pattern_fill writes bytes [offset, offset+len) of that buffer to dst.
 */
void cb_pattern_fill(uint8_t *dst, uint64_t offset, uint64_t len, uint64_t seed);
/* Index of the first differing byte, or -1 if equal. */
int64_t cb_first_mismatch(const uint8_t *got, const uint8_t *want, size_t len);

/* One-line progress on stderr (\r, padded); cb_progress_clear erases it. */
void cb_progress(const char *label, double elapsed_s, double gbps);
void cb_progress_clear(void);

/* ---- child.c ------------------------------------------------------------ */

/* A child running /proc/self/exe (a ct_proc of tools/common/proc.h: it
 * dies with us): we hold its stdin (write; closing it tells the child to
 * exit) and stdout (read). */
typedef struct cb_child {
    ct_proc proc;
} cb_child;

#define CB_CHILD_INIT                                                                              \
    {                                                                                              \
        {                                                                                          \
            0, -1, -1, -1                                                                          \
        }                                                                                          \
    }

/* Fork and exec /proc/self/exe with argv (argv[0] is the display name). */
int cb_child_spawn(cb_child *c, char *const argv[]);
/* Read one line (without '\n') from the child's stdout; -1 on EOF/timeout. */
int cb_child_read_line(cb_child *c, char *buf, size_t len, int timeout_ms);
/*
 * Close the child's stdin and reap it, killing it if it has not exited after
 * timeout_ms. Returns its exit status (0 = success), or -1 if it was killed
 * by a signal, did not exit in time or could not be reaped; *why says how.
 * A child that was never spawned returns 0.
 */
int cb_child_stop(cb_child *c, int timeout_ms, char *why, size_t why_len);
/* SIGKILL and reap (error paths). */
void cb_child_kill(cb_child *c);
/* In a child: read fd (its stdin) until EOF or an error. */
void cb_wait_for_eof(int fd);

/* ---- baseline.c --------------------------------------------------------- */

#define CB_BASELINE_BLOCK (1 * CB_MIB)
#define CB_BASELINE_AREA  (64 * CB_MIB)
#define CB_FRESH_AREA     (4096 * CB_MIB) /* the fresh-pages sink's memfd (reserved lazily) */

typedef struct cb_measure {
    uint64_t bytes;
    double seconds;
    double gbps; /* 1e9 bytes per second */
} cb_measure;

/*
 * Plain single-stream TCP copy over loopback to a child process
 * ("<argv0> <subcmd> --role sink"): blocking 1 MiB send() calls from a 64 MiB
 * area for `seconds` (or until total bytes, if non-zero); the time includes
 * the child's acknowledgement that it has received every byte.
 */
int cb_baseline_socket(const char *subcmd, double seconds, uint64_t total, cb_measure *out,
                       char *err, size_t err_len);
/* The same with `streams` (1..8) connections to as many sinks at once, one thread each and
 * one clock for all (total, if non-zero, split between them): what a transport with several
 * connections per peer could reach on this machine. */
int cb_baseline_socket_streams(const char *subcmd, unsigned streams, double seconds, uint64_t total,
                               cb_measure *out, char *err, size_t err_len);
/* The same into fresh pages: each sink ("--role sink-fresh") receives front to back into a
 * never-written memfd mapping (MAP_NORESERVE, CB_FRESH_AREA bytes; a run that wraps punches a
 * hole over it first), so every page is committed by the write that fills it: the floor of a
 * put into a freshly mounted, lazily committed store segment on this machine. */
int cb_baseline_socket_fresh(const char *subcmd, unsigned streams, double seconds, uint64_t total,
                             cb_measure *out, char *err, size_t err_len);
/* Single-threaded memcpy of 1 MiB blocks cycling over a 64 MiB area. */
int cb_baseline_memcpy(double seconds, uint64_t total, cb_measure *out, char *err, size_t err_len);
/* A small-request round trip over one loopback TCP connection. */
typedef struct cb_pingpong {
    uint32_t size; /* reply bytes (the request is 32 bytes) */
    uint64_t round_trips;
    double seconds, per_s, p50_us, p99_us;
} cb_pingpong;
/*
 * Plain-socket ping-pong to a child ("<argv0> <subcmd> --role echo"): a
 * 32-byte request, a reply of `size` bytes, one at a time, TCP_NODELAY, for
 * `seconds`. 0, or -1 with err set.
 */
int cb_baseline_pingpong(const char *subcmd, uint32_t size, double seconds, cb_pingpong *out,
                         char *err, size_t err_len);
/* The "--role echo" child: answer each 32-byte request with the bytes it asks for. */
int cb_echo_main(void);
/* ucx_perftest's result (ucx_baseline.c). */
typedef struct cb_ucx_result {
    double latency_us; /* typical */
    double gbps;       /* overall bandwidth, 1e9 bytes per second */
} cb_ucx_result;
/* Run ucx_perftest -t <test> -s <size> as server and client on 127.0.0.1
 * with the environment's UCX_TLS. 0, or -1 with err set. */
int cb_baseline_ucx_perftest(const char *test, uint64_t size, unsigned iters, cb_ucx_result *out,
                             char *err, size_t err_len);
/* The same with at most `outstanding` operations in flight (-O; 0: perftest's default). */
int cb_baseline_ucx_perftest_window(const char *test, uint64_t size, unsigned iters,
                                    unsigned outstanding, cb_ucx_result *out, char *err,
                                    size_t err_len);
/* The "--role sink" child (fresh: "--role sink-fresh", into never-written pages): accept one
 * connection, count bytes, acknowledge. */
int cb_sink_main(bool fresh);

#endif /* CRESCENT_BENCH_H */
