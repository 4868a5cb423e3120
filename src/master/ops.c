/*
 * ops.c - names of the operations counted in crk_stats (metric labels).
 */
#include "master/service.h"

static const char *const op_names[CRK_OP_COUNT] = {
    [CRK_OP_MOUNT] = "mount_segment",
    [CRK_OP_REMOUNT] = "remount_segment",
    [CRK_OP_UNMOUNT] = "unmount_segment",
    [CRK_OP_PING] = "ping",
    [CRK_OP_EXIST] = "exist_key",
    [CRK_OP_GET_REPLICA_LIST] = "get_replica_list",
    [CRK_OP_PUT_START] = "put_start",
    [CRK_OP_UPSERT_START] = "upsert_start",
    [CRK_OP_PUT_END] = "put_end",
    [CRK_OP_PUT_REVOKE] = "put_revoke",
    [CRK_OP_REMOVE] = "remove",
    [CRK_OP_REMOVE_BY_REGEX] = "remove_by_regex",
    [CRK_OP_REMOVE_ALL] = "remove_all",
    [CRK_OP_BATCH_EXIST] = "batch_exist_key",
    [CRK_OP_BATCH_GET_REPLICA_LIST] = "batch_get_replica_list",
    [CRK_OP_BATCH_PUT_START] = "batch_put_start",
    [CRK_OP_BATCH_UPSERT_START] = "batch_upsert_start",
    [CRK_OP_BATCH_PUT_END] = "batch_put_end",
    [CRK_OP_BATCH_PUT_REVOKE] = "batch_put_revoke",
    [CRK_OP_BATCH_REMOVE] = "batch_remove",
    [CRK_OP_BATCH_REPLICA_CLEAR] = "batch_replica_clear",
    [CRK_OP_RELEASE_LEASES] = "release_leases",
};

const char *crk_op_name(int op)
{
    if (op < 0 || op >= CRK_OP_COUNT)
        return "unknown";
    return op_names[op];
}
