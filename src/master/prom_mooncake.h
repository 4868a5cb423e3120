/*
 * prom_mooncake.h - the master's /metrics under Mooncake's metric names
 * (master_metric_manager.cpp), next to crescent's own, so that Mooncake's
 * Grafana dashboard and alerts read a crescent master. The mapping is in
 * docs/compat.md (§10).
 *
 * Threading: pure functions of their arguments.
 */
#ifndef CRESCENT_MASTER_PROM_MOONCAKE_H
#define CRESCENT_MASTER_PROM_MOONCAKE_H

#include <stddef.h>
#include <stdint.h>

#include "master/prom.h"
#include "master/service.h"

/* Mooncake's master_value_size_bytes buckets: 4 KiB .. 64 MiB. */
#define CRK_VALUE_SIZE_BOUNDS 7
extern const uint64_t crk_value_size_bounds[CRK_VALUE_SIZE_BOUNDS];

/** The sizes of the stored values (crk_admin_value_sizes). */
typedef struct crk_value_sizes {
    uint64_t counts[CRK_VALUE_SIZE_BOUNDS + 1]; /* per bucket, the last above every bound */
    uint64_t sum;
} crk_value_sizes;

/**
 * Append Mooncake's families for the counters and gauges crescent keeps:
 * capacity, allocation, keys, soft-pinned keys, clients, the value-size
 * histogram, per-operation request / failure counters
 * (master_<op>_requests_total, master_<op>_failures_total) and batch item
 * counters, eviction, put_start discard / release and allocation failures.
 * 0, or the text's error status.
 */
int crk_prom_mooncake(crk_text *t, const crk_stats *st, const crk_value_sizes *vs);

#endif
