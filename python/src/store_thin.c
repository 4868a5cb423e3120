/*
 * store_thin.c - the thin mode of crescent._crescent.Store: Store(thin=ADDRESS,
 * ...) sets up a cr_store with cr_store_setup_thin (a thin client of the
 * crescent-client daemon on this host; mooncake's setup_dummy), and the
 * methods only a thin store has: pool_alloc / pool_free (memory of the pool
 * both processes map) and thin_stats. Every other Store method works as in
 * embedded mode: the C library forwards the calls.
 */
#include "pycrescent.h"

#include "store_obj.h"

int pcr_store_init_thin(Store *self, const char *address, PyObject *pool, PyObject *lbs,
                        const char *secret, const char *tenant, uint32_t call_timeout_ms)
{
    cr_store_thin_config cfg;
    cr_store_thin_config_init(&cfg);
    cfg.server_address = address;
    cfg.shared_secret = secret;
    cfg.tenant_id = tenant;
    if (call_timeout_ms)
        cfg.call_timeout_ms = call_timeout_ms;
    if (pool != NULL && pool != Py_None &&
        pcr_store_size_arg(pool, "mem_pool_size", &cfg.mem_pool_size) < 0)
        return -1;
    if (lbs != NULL && lbs != Py_None &&
        pcr_store_size_arg(lbs, "local_buffer_size", &cfg.local_buffer_size) < 0)
        return -1;
    cr_store *s = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_store_setup_thin(&cfg, &s);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        pcr_raise(rc);
        return -1;
    }
    self->store = s;
    self->base.guard.closing = false;
    if (cr_store_hostname(s, self->name, sizeof(self->name)) < 0)
        self->name[0] = '\0';
    return 0;
}

PyObject *pcr_store_pool_alloc(PyObject *obj, PyObject *args, PyObject *kw)
{
    Store *self = (Store *)obj;
    static char *kwlist[] = {"size", NULL};
    PyObject *size_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:pool_alloc", kwlist, &size_o))
        return NULL;
    size_t size;
    if (pcr_size(size_o, "size", &size) < 0)
        return NULL;
    ENTER(self);
    void *p = NULL;
    int rc = cr_store_pool_alloc(self->store, size, &p);
    LEAVE(self);
    return rc < 0 ? pcr_raise(rc) : PyLong_FromVoidPtr(p);
}

PyObject *pcr_store_pool_free(PyObject *obj, PyObject *args, PyObject *kw)
{
    Store *self = (Store *)obj;
    static char *kwlist[] = {"address", NULL};
    unsigned long long addr;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "K:pool_free", kwlist, &addr))
        return NULL;
    ENTER(self);
    int rc = cr_store_pool_free(self->store, (void *)(uintptr_t)addr);
    LEAVE(self);
    return pcr_none_or_raise(rc);
}

PyObject *pcr_store_thin_stats(PyObject *obj, PyObject *unused)
{
    Store *self = (Store *)obj;
    (void)unused;
    ENTER(self);
    cr_store_thin_stats st;
    int rc = cr_store_thin_stats_get(self->store, &st);
    LEAVE(self);
    if (rc < 0)
        return pcr_raise(rc);
    return Py_BuildValue(
        "{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsK}", "calls", (unsigned long long)st.calls,
        "zero_copy_bytes", (unsigned long long)st.zero_copy_bytes, "copied_bytes",
        (unsigned long long)st.copied_bytes, "slow_path_calls",
        (unsigned long long)st.slow_path_calls, "slow_path_bytes",
        (unsigned long long)st.slow_path_bytes, "transient_calls",
        (unsigned long long)st.transient_calls, "reconnects", (unsigned long long)st.reconnects,
        "daemon_lost", (unsigned long long)st.daemon_lost, "shared_regions",
        (unsigned long long)st.shared_regions, "slow_path_regions",
        (unsigned long long)st.slow_path_regions, "connections", (unsigned long long)st.connections,
        "pool_used", (unsigned long long)st.pool_used, "direct_get_keys",
        (unsigned long long)st.direct_get_keys, "direct_get_fallbacks",
        (unsigned long long)st.direct_get_fallbacks, "direct_put_keys",
        (unsigned long long)st.direct_put_keys, "direct_put_fallbacks",
        (unsigned long long)st.direct_put_fallbacks);
}

PyObject *pcr_store_get_is_thin(PyObject *obj, void *unused)
{
    Store *self = (Store *)obj;
    (void)unused;
    return PyBool_FromLong(self->store != NULL && cr_store_is_thin(self->store));
}
