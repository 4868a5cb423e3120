/*
 * store_offload.c - the disk tier's counters on crescent._crescent.Store:
 * offload_stats() -> dict (cr_store_offload_stats_get). The tier itself is
 * switched on by Store(enable_ssd_offload=True, ssd_offload_path=...).
 */
#include "pycrescent.h"

#include "store_obj.h"

PyObject *pcr_store_offload_stats(PyObject *obj, PyObject *unused)
{
    Store *self = (Store *)obj;
    (void)unused;
    ENTER(self);
    cr_store_offload_stats st;
    int rc = cr_store_offload_stats_get(self->store, &st);
    LEAVE(self);
    if (rc < 0)
        return pcr_raise(rc);
    return Py_BuildValue(
        "{sOsKsKsKsKsKsKsKsKsKsK}", "enabled", st.enabled ? Py_True : Py_False, "disk_keys",
        (unsigned long long)st.disk_keys, "disk_bytes", (unsigned long long)st.disk_bytes,
        "disk_capacity", (unsigned long long)st.disk_capacity, "offloads",
        (unsigned long long)st.offloads, "offload_failures",
        (unsigned long long)st.offload_failures, "stage_reads", (unsigned long long)st.stage_reads,
        "promotions", (unsigned long long)st.promotions, "disk_evictions",
        (unsigned long long)st.disk_evictions, "compactions", (unsigned long long)st.compactions,
        "rpc_reads", (unsigned long long)st.rpc_reads);
}
