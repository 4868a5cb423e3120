/*
 * store_async_bench.c - "crescent-bench store --async" (store_async.h): one
 * thread's calls per second, synchronous (one call in flight) next to the
 * completion queue (--async-depth calls in flight from the same thread), in
 * alternating slices of one run so both see the same machine load.
 *
 * The measuring store lives in the orchestrator process, without a segment:
 * its puts place the values in the spawned client processes' segments, so
 * every get reads across a process boundary and every exist is a master
 * round trip. Slices: exist (keys that exist), get_into (value_size bytes
 * into registered memory, cycling over the keys). The async slices keep
 * the queue full: submit until depth calls are in flight, wait for at least
 * one completion, submit again.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "crescent/store.h"
#include "store_async.h"

enum { SL_EXIST_SYNC, SL_EXIST_ASYNC, SL_GET_SYNC, SL_GET_ASYNC, SL_COUNT };
static const char *const slice_names[SL_COUNT] = {"exist sync", "exist async", "get_into sync",
                                                  "get_into async"};

typedef struct ab_ctx {
    cr_store *s;
    cr_store_cq *q;
    uint8_t *region; /* keys values, then depth destinations */
    uint64_t size;
    unsigned keys, depth;
    char (*names)[48];
    bool verify;
    uint64_t bad, errors;
    int first_error;
} ab_ctx;

static void fill(uint8_t *p, uint64_t len, unsigned key)
{
    for (uint64_t i = 0; i < len; i++)
        p[i] = (uint8_t)(key * 131u + i * 7u);
}

static void check(ab_ctx *c, const uint8_t *p, int64_t got, unsigned key)
{
    if (got != (int64_t)c->size) {
        c->errors++;
        if (c->first_error == 0)
            c->first_error = got < 0 ? (int)got : -1;
        return;
    }
    if (!c->verify)
        return;
    for (uint64_t i = 0; i < c->size; i++) {
        if (p[i] != (uint8_t)(key * 131u + i * 7u)) {
            c->bad++;
            return;
        }
    }
}

static uint8_t *dest(ab_ctx *c, unsigned slot)
{
    return c->region + (uint64_t)c->keys * c->size + (uint64_t)slot * c->size;
}

/* One slice; returns calls per second. */
static double run_slice(ab_ctx *c, int kind, double secs)
{
    uint64_t t0 = cb_now_ns(), end = t0 + (uint64_t)(secs * 1e9), calls = 0;
    unsigned next = 0;
    if (kind == SL_EXIST_SYNC || kind == SL_GET_SYNC) {
        while (cb_now_ns() < end) {
            for (int k = 0; k < 16; k++, next = (next + 1) % c->keys, calls++) {
                if (kind == SL_EXIST_SYNC) {
                    int r = cr_store_exist(c->s, c->names[next]);
                    if (r != 1) {
                        c->errors++;
                        c->first_error = c->first_error ? c->first_error : (r < 0 ? r : -1);
                    }
                } else {
                    int64_t r = cr_store_get_into(c->s, c->names[next], dest(c, 0), c->size);
                    check(c, dest(c, 0), r, next);
                }
            }
        }
    } else {
        /* slot s in flight reads key keyof[s] into dest(s) */
        unsigned *keyof = calloc(c->depth, sizeof(*keyof));
        unsigned *free_slots = calloc(c->depth, sizeof(*free_slots));
        cr_store_completion *done = calloc(c->depth, sizeof(*done));
        if (keyof == NULL || free_slots == NULL || done == NULL) {
            free(keyof);
            free(free_slots);
            free(done);
            return 0;
        }
        unsigned n_free = c->depth;
        for (unsigned i = 0; i < c->depth; i++)
            free_slots[i] = i;
        bool stopping = false;
        for (;;) {
            if (!stopping && cb_now_ns() >= end)
                stopping = true;
            while (!stopping && n_free > 0) {
                unsigned slot = free_slots[--n_free];
                keyof[slot] = next;
                int rc = kind == SL_EXIST_ASYNC
                             ? cr_store_submit_exist(c->q, c->names[next], slot)
                             : cr_store_submit_get_into(c->q, c->names[next], dest(c, slot),
                                                        c->size, slot);
                if (rc < 0) {
                    free_slots[n_free++] = slot;
                    c->errors++;
                    c->first_error = c->first_error ? c->first_error : rc;
                    stopping = true;
                    break;
                }
                next = (next + 1) % c->keys;
            }
            if (n_free == c->depth)
                break;
            int k = cr_store_cq_wait(c->q, done, c->depth, 1, 10000);
            if (k <= 0) {
                c->errors++;
                c->first_error = c->first_error ? c->first_error : -1;
                break;
            }
            for (int i = 0; i < k; i++) {
                unsigned slot = (unsigned)done[i].user_data;
                if (kind == SL_EXIST_ASYNC) {
                    if (done[i].result != 1) {
                        c->errors++;
                        c->first_error = c->first_error
                                             ? c->first_error
                                             : (done[i].result < 0 ? (int)done[i].result : -1);
                    }
                } else {
                    check(c, dest(c, slot), done[i].result, keyof[slot]);
                }
                free_slots[n_free++] = slot;
                calls++;
            }
        }
        free(keyof);
        free(free_slots);
        free(done);
    }
    double dt = (double)(cb_now_ns() - t0) / 1e9;
    return dt > 0 ? (double)calls / dt : 0;
}

int sb_async_run(const char *master_addr, const char *protocol, uint64_t value_size, unsigned keys,
                 unsigned depth, unsigned rounds, double slice_s, bool verify, bool json)
{
    int ret = -1;
    ab_ctx c = {.size = value_size, .keys = keys, .depth = depth, .verify = verify};
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = master_addr;
    cfg.protocol = protocol;
    cfg.global_segment_size = 0;
    cfg.local_buffer_size = 4 * CB_MIB;
    if (cr_store_setup(&cfg, &c.s) < 0) {
        fprintf(stderr, CB_PROG " store --async: setup: %s\n", cr_last_error_message());
        return -1;
    }
    uint64_t region = (uint64_t)(keys + depth) * value_size;
    c.region = aligned_alloc(4096, (region + 4095) & ~(uint64_t)4095);
    c.names = calloc(keys, sizeof(*c.names));
    double(*rate)[SL_COUNT] = calloc(rounds, sizeof(*rate));
    if (c.region == NULL || c.names == NULL || rate == NULL) {
        fprintf(stderr, CB_PROG " store --async: out of memory\n");
        goto out_free;
    }
    if (cr_store_register_buffer(c.s, c.region, region) < 0 ||
        cr_store_cq_create(c.s, NULL, &c.q) < 0) {
        fprintf(stderr, CB_PROG " store --async: %s\n", cr_last_error_message());
        goto out_free;
    }
    for (unsigned i = 0; i < keys; i++) {
        snprintf(c.names[i], sizeof(c.names[i]), "async-bench-%u", i);
        fill(c.region + (uint64_t)i * value_size, value_size, i);
        if (cr_store_put_from(c.s, c.names[i], c.region + (uint64_t)i * value_size, value_size,
                              NULL) < 0) {
            fprintf(stderr, CB_PROG " store --async: put: %s\n", cr_last_error_message());
            goto out_free;
        }
    }
    if (!json)
        printf("one thread; async = completion queue with %u calls in flight (2 drivers); "
               "%u keys of %" PRIu64 " B in other processes' segments; slices of %.2f s "
               "alternate\n",
               depth, keys, value_size, slice_s);
    for (unsigned r = 0; r < rounds; r++) {
        for (int k = 0; k < SL_COUNT; k++) {
            rate[r][k] = run_slice(&c, k, slice_s);
            if (json)
                printf("{\"case\":\"async\",\"round\":%u,\"slice\":\"%s\",\"calls_per_s\":%.0f}\n",
                       r, slice_names[k], rate[r][k]);
        }
        if (!json)
            printf("round %u: exist %.0f -> %.0f calls/s (x%.2f); get_into %.0f -> %.0f "
                   "calls/s (x%.2f)\n",
                   r, rate[r][0], rate[r][1], rate[r][1] / rate[r][0], rate[r][2], rate[r][3],
                   rate[r][3] / rate[r][2]);
    }
    double v[SL_COUNT][64], ratio_e[64], ratio_g[64], lo, med, hi;
    unsigned nr = rounds < 64 ? rounds : 64;
    for (unsigned r = 0; r < nr; r++) {
        for (int k = 0; k < SL_COUNT; k++)
            v[k][r] = rate[r][k];
        ratio_e[r] = rate[r][1] / rate[r][0];
        ratio_g[r] = rate[r][3] / rate[r][2];
    }
    if (!json) {
        for (int k = 0; k < SL_COUNT; k++) {
            cb_range(v[k], nr, &lo, &med, &hi);
            printf("  %-15s %9.0f .. %9.0f calls/s (median %.0f)\n", slice_names[k], lo, hi, med);
        }
        cb_range(ratio_e, nr, &lo, &med, &hi);
        printf("  exist async/sync x%.2f .. x%.2f (median x%.2f); ", lo, hi, med);
        cb_range(ratio_g, nr, &lo, &med, &hi);
        printf("get_into async/sync x%.2f .. x%.2f (median x%.2f)\n", lo, hi, med);
    }
    if (c.errors > 0 || c.bad > 0) {
        fprintf(stderr,
                CB_PROG " store --async: %" PRIu64 " failed calls (first %d: %s), %" PRIu64
                        " values with wrong bytes\n",
                c.errors, c.first_error, cr_strerror(c.first_error), c.bad);
        goto out_free;
    }
    ret = 0;
out_free:
    cr_store_cq_destroy(c.q);
    cr_store_destroy(c.s);
    free(c.region);
    free(c.names);
    free(rate);
    return ret;
}
