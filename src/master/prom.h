/*
 * prom.h - a text buffer and a Prometheus text exposition (0.0.4) builder.
 *
 * crk_text is a growable, always NUL-terminated byte buffer with a sticky
 * status: after the first failure (out of memory, or an invalid metric or
 * label name) every append is refused and returns that status, so a
 * renderer may append a whole page and check once at the end.
 *
 * The exposition builder writes families in the format Prometheus scrapes:
 *
 *   # HELP master_key_count Number of keys.          (\ and newline escaped)
 *   # TYPE master_key_count gauge
 *   master_key_count 42
 *   master_put_start_requests_total{op="put_start"} 7  (\, " and newline escaped)
 *   master_rpc_latency_seconds_bucket{le="0.001"} 3   (cumulative)
 *   master_rpc_latency_seconds_bucket{le="+Inf"} 5
 *   master_rpc_latency_seconds_sum 0.0042
 *   master_rpc_latency_seconds_count 5
 *
 * Metric names must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
 * [a-zA-Z_][a-zA-Z0-9_]* without a leading "__", and a histogram's own
 * labels must not include "le"; a violation is CR_INVALID_PARAMS.
 * Numbers are written in the shortest form that reads back exactly; NaN
 * and infinities as NaN, +Inf, -Inf.
 *
 * crk_prom_hist is a fixed-bucket histogram that any number of threads may
 * observe into without locks (relaxed atomics); a reader takes a snapshot
 * that is internally consistent (count equals the sum of the buckets it
 * read), though observations racing with it may land in either scrape.
 *
 * Threading: a crk_text belongs to one thread at a time; crk_prom_hist
 * observe and write may run concurrently from any threads.
 */
#ifndef CRESCENT_MASTER_PROM_H
#define CRESCENT_MASTER_PROM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* --- Text buffer ---------------------------------------------------------- */

/** Zero-initialise; free with crk_text_free. data is NUL-terminated once non-NULL. */
typedef struct crk_text {
    char *data;
    size_t len;
    size_t cap;
    int status; /* first failure; 0 while none */
} crk_text;

void crk_text_free(crk_text *t);
/** Empty the text and clear its status; keeps the allocation. */
void crk_text_reset(crk_text *t);
/** Hand the bytes to the caller (free() them); t becomes empty. NULL if nothing was written. */
char *crk_text_steal(crk_text *t, size_t *len);
int crk_text_append(crk_text *t, const void *s, size_t n);
int crk_text_puts(crk_text *t, const char *s);
int crk_text_appendf(crk_text *t, const char *fmt, ...) CRB_PRINTF(2, 3);

/* --- Prometheus exposition ------------------------------------------------ */

typedef enum crk_prom_type {
    CRK_PROM_COUNTER,
    CRK_PROM_GAUGE,
    CRK_PROM_HISTOGRAM,
    CRK_PROM_UNTYPED,
} crk_prom_type;

typedef struct crk_prom_label {
    const char *name;
    const char *value;
} crk_prom_label;

/** "# HELP name help" (omitted when help is NULL) and "# TYPE name type". */
int crk_prom_family(crk_text *t, const char *name, crk_prom_type type, const char *help);

/** One sample line: name{labels} value. */
int crk_prom_sample(crk_text *t, const char *name, const crk_prom_label *labels, size_t n_labels,
                    double value);
/** As crk_prom_sample, with an exact integer value (counters past 2^53). */
int crk_prom_sample_u64(crk_text *t, const char *name, const crk_prom_label *labels,
                        size_t n_labels, uint64_t value);

/** A whole unlabelled counter family: HELP, TYPE and one sample. */
int crk_prom_counter(crk_text *t, const char *name, const char *help, uint64_t value);
/** A whole unlabelled gauge family. */
int crk_prom_gauge(crk_text *t, const char *name, const char *help, double value);

/**
 * The samples of one histogram series (the family line is the caller's):
 * bucket_counts has n_bounds + 1 entries, the count of observations per
 * bucket (not cumulative; the last one is above every bound); bounds are
 * strictly increasing and finite. Writes name_bucket{...,le="b"} with
 * cumulative counts, le="+Inf", name_sum and name_count.
 */
int crk_prom_histogram(crk_text *t, const char *name, const crk_prom_label *labels, size_t n_labels,
                       const double *bounds, const uint64_t *bucket_counts, size_t n_bounds,
                       double sum);

/* --- Lock-free histogram -------------------------------------------------- */

#define CRK_PROM_HIST_MAX_BOUNDS 32

typedef struct crk_prom_hist {
    size_t n_bounds;
    uint64_t bounds[CRK_PROM_HIST_MAX_BOUNDS]; /* inclusive upper bounds, increasing */
    _Atomic uint64_t counts[CRK_PROM_HIST_MAX_BOUNDS + 1];
    _Atomic uint64_t sum;
} crk_prom_hist;

/** Latency bounds in microseconds, 10 us .. 10 s (for crk_prom_hist_init). */
extern const uint64_t crk_prom_latency_bounds_us[];
extern const size_t crk_prom_latency_bounds_us_count;

/**
 * Set up h with n (1..CRK_PROM_HIST_MAX_BOUNDS) strictly increasing bounds
 * in the unit of later observations. CR_INVALID_PARAMS otherwise.
 * Not thread-safe against concurrent use of h.
 */
int crk_prom_hist_init(crk_prom_hist *h, const uint64_t *bounds, size_t n);

/** Count one observation (binary search, relaxed atomics). Any thread. */
void crk_prom_hist_observe(crk_prom_hist *h, uint64_t value);

/**
 * Write h's series like crk_prom_histogram, bounds and sum divided by
 * divisor (> 0; e.g. 1e6 to expose microsecond observations in seconds:
 * dividing keeps a bound of 10 us an exact-looking "1e-05").
 */
int crk_prom_hist_write(crk_text *t, const char *name, const crk_prom_label *labels,
                        size_t n_labels, const crk_prom_hist *h, double divisor);

#endif
