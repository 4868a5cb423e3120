/*
 * store_async.h - "crescent-bench store --async": calls per second of one
 * thread, synchronous calls next to the completion queue (store.h,
 * cr_store_cq), in alternating slices of one run (store_async_bench.c).
 */
#ifndef CRESCENT_TOOLS_BENCH_STORE_ASYNC_H
#define CRESCENT_TOOLS_BENCH_STORE_ASYNC_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Open a store client without a segment on master_addr (the spawned client
 * processes hold the values), put `keys` values of value_size bytes, then
 * `rounds` times: exist sync, exist async (depth calls in flight), get_into
 * sync, get_into async, each for slice_s seconds, every byte of every get
 * checked when verify. Prints one line per slice and the ranges. Returns 0,
 * or -1 (message on stderr).
 */
int sb_async_run(const char *master_addr, const char *protocol, uint64_t value_size, unsigned keys,
                 unsigned depth, unsigned rounds, double slice_s, bool verify, bool json);

#endif
