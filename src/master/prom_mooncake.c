/*
 * prom_mooncake.c - Mooncake's master metric names over crescent's stats.
 *
 * Design: one table of per-operation names (Mooncake's op name -> crescent's
 * crk_op) drives the request, failure and batch-item counters; the other
 * families map one crescent counter or gauge each. Only what crescent counts
 * is exposed: families of features it lacks (NVMe-oF, file storage, tasks,
 * promotion, snapshots) and batch "partial success" counters, which crescent
 * does not keep, are absent rather than reported as zeros. Evictions are all
 * memory evictions, so the *_mem families repeat the totals.
 */
#include "master/prom_mooncake.h"

#include <stdio.h>

const uint64_t crk_value_size_bounds[CRK_VALUE_SIZE_BOUNDS] = {4096,    65536,    262144,  1048576,
                                                               4194304, 16777216, 67108864};

/* Mooncake's name of each operation crescent counts under the same meaning. */
static const struct {
    const char *name;
    int op;
    const char *help; /* "PutStart" etc. for HELP lines */
} OPS[] = {
    {"put_start", CRK_OP_PUT_START, "PutStart"},
    {"put_end", CRK_OP_PUT_END, "PutEnd"},
    {"put_revoke", CRK_OP_PUT_REVOKE, "PutRevoke"},
    {"get_replica_list", CRK_OP_GET_REPLICA_LIST, "GetReplicaList"},
    {"exist_key", CRK_OP_EXIST, "ExistKey"},
    {"remove", CRK_OP_REMOVE, "Remove"},
    {"remove_by_regex", CRK_OP_REMOVE_BY_REGEX, "RemoveByRegex"},
    {"remove_all", CRK_OP_REMOVE_ALL, "RemoveAll"},
    {"mount_segment", CRK_OP_MOUNT, "MountSegment"},
    {"remount_segment", CRK_OP_REMOUNT, "ReMountSegment"},
    {"unmount_segment", CRK_OP_UNMOUNT, "UnmountSegment"},
    {"ping", CRK_OP_PING, "Ping"},
    {"batch_exist_key", CRK_OP_BATCH_EXIST, "BatchExistKey"},
    {"batch_get_replica_list", CRK_OP_BATCH_GET_REPLICA_LIST, "BatchGetReplicaList"},
    {"batch_put_start", CRK_OP_BATCH_PUT_START, "BatchPutStart"},
    {"batch_put_end", CRK_OP_BATCH_PUT_END, "BatchPutEnd"},
    {"batch_put_revoke", CRK_OP_BATCH_PUT_REVOKE, "BatchPutRevoke"},
    {"batch_replica_clear", CRK_OP_BATCH_REPLICA_CLEAR, "BatchReplicaClear"},
};

static int op_counter(crk_text *t, const char *op, const char *kind, const char *what,
                      uint64_t value)
{
    char name[96], help[128];
    snprintf(name, sizeof(name), "master_%s_%s_total", op, kind);
    snprintf(help, sizeof(help), "%s (crescent: the same counter as master_%s{op})", what,
             kind[0] == 'r' ? "requests_total" : "failures_total");
    return crk_prom_counter(t, name, help, value);
}

int crk_prom_mooncake(crk_text *t, const crk_stats *st, const crk_value_sizes *vs)
{
    crk_prom_gauge(t, "master_soft_pin_key_count", "Total number of soft-pinned keys",
                   (double)st->soft_pinned_keys);
    double bounds[CRK_VALUE_SIZE_BOUNDS];
    for (int i = 0; i < CRK_VALUE_SIZE_BOUNDS; i++)
        bounds[i] = (double)crk_value_size_bounds[i];
    crk_prom_family(t, "master_value_size_bytes", CRK_PROM_HISTOGRAM,
                    "Distribution of object value sizes (crescent: the values stored at "
                    "scrape time)");
    crk_prom_histogram(t, "master_value_size_bytes", NULL, 0, bounds, vs->counts,
                       CRK_VALUE_SIZE_BOUNDS, (double)vs->sum);

    for (size_t i = 0; i < sizeof(OPS) / sizeof(OPS[0]); i++) {
        int op = OPS[i].op;
        char what[128];
        snprintf(what, sizeof(what), "Total number of %s requests received", OPS[i].help);
        op_counter(t, OPS[i].name, "requests", what, st->requests[op]);
        snprintf(what, sizeof(what), "Total number of failed %s requests", OPS[i].help);
        op_counter(t, OPS[i].name, "failures", what, st->failures[op]);
        if (OPS[i].name[0] == 'b') {
            char name[96];
            snprintf(name, sizeof(name), "master_%s_items_total", OPS[i].name);
            crk_prom_counter(t, name, "Keys in batch requests", st->batch_items[op]);
            snprintf(name, sizeof(name), "master_%s_failed_items_total", OPS[i].name);
            crk_prom_counter(t, name, "Keys that failed in batch requests",
                             st->batch_failed_items[op]);
        }
    }

    crk_prom_counter(t, "master_put_start_alloc_failures_total",
                     "PutStart requests that could allocate no space", st->alloc_failures);
    crk_prom_counter(t, "master_put_start_partial_allocations_total",
                     "PutStart requests that got fewer replicas than asked",
                     st->partial_allocations);
    crk_prom_counter(t, "master_put_start_discard_cnt",
                     "In-flight puts discarded (preempted after put_start_discard_timeout_sec)",
                     st->put_start_discards);
    crk_prom_counter(t, "master_put_start_release_cnt",
                     "Space of discarded or replaced values released", st->put_start_releases);
    crk_prom_counter(t, "master_owned_writes_revoked_total",
                     "Writes owned by a connection revoked because that connection closed",
                     st->owned_writes_revoked);
    crk_prom_counter(t, "master_put_grant_commits_total",
                     "Puts completed in one round trip on a put grant's replicas (PUT_END with gk; "
                     "committed ahead or not)",
                     st->granted_puts);
    crk_prom_counter(t, "master_put_commit_ahead_total",
                     "Keys committed ahead of their copy (PUT_END with gk and ca, "
                     "BATCH_PUT_END with ca; docs/WIRE.md)",
                     st->ahead_puts);
    crk_prom_gauge(t, "master_put_start_discarded_staging_size",
                   "Bytes of discarded or replaced values waiting to be released",
                   (double)st->discarded_bytes);

    static const char *const suffixes[] = {"total", "mem"};
    for (int k = 0; k < 2; k++) {
        char name[96];
        snprintf(name, sizeof(name), "master_attempted_evictions_%s", suffixes[k]);
        crk_prom_counter(t, name, "Eviction rounds started", st->evictions_attempted);
        snprintf(name, sizeof(name), "master_successful_evictions_%s", suffixes[k]);
        crk_prom_counter(t, name, "Eviction rounds that freed space", st->evictions_successful);
    }
    crk_prom_counter(t, "master_evicted_key_count", "Objects evicted", st->evicted_keys);
    crk_prom_counter(t, "master_evicted_key_count_mem", "Objects evicted from memory",
                     st->evicted_keys);
    crk_prom_counter(t, "master_evicted_size_bytes", "Bytes evicted", st->evicted_bytes);
    crk_prom_counter(t, "master_evicted_size_bytes_mem", "Bytes evicted from memory",
                     st->evicted_bytes);
    return t->status;
}
