/*
 * store.c - crescent._crescent.Store: the KV-store client (cr_store).
 *
 * Design: one Python object owns one cr_store. Scalar methods raise
 * CrescentError (NotFoundError for a miss); batch methods return one int per
 * key (bytes read, 0, 1/0 for existence, or a negative status), exactly the
 * per-key results of the C API, so a batch never raises for a per-key
 * failure. Arguments are converted first (pcr_call arena), then the GIL is
 * released around the single C call.
 *
 * Every batch method is one C batch call (one master round trip per phase
 * for the whole batch); only upsert of parts, which has no C form, is
 * composed here. Buffer objects passed to register_buffer() are pinned until
 * unregister_buffer(), as in engine.c. The lifecycle, pins and result lists
 * shared with Engine live in common.c; this file holds what is store-only.
 */
#include "pycrescent.h"

#include <stdlib.h>
#include <string.h>

#include "store_obj.h"

/* A size from an int or a human-readable str ("16MB"). */
int pcr_store_size_arg(PyObject *o, const char *what, uint64_t *out)
{
    if (PyUnicode_Check(o)) {
        const char *text = PyUnicode_AsUTF8(o);
        if (text == NULL)
            return -1;
        int rc = cr_parse_size(text, out);
        if (rc < 0) {
            pcr_raise(rc);
            return -1;
        }
        return 0;
    }
    size_t v;
    if (pcr_size(o, what, &v) < 0)
        return -1;
    *out = v;
    return 0;
}

/* The keys of a batch and a zeroed int result per key, both owned by cx. */
static int keys_with_results(pcr_call *cx, PyObject *keys_o, const char ***keys, size_t *n,
                             int **res)
{
    if (pcr_keys(cx, keys_o, keys, n) < 0)
        return -1;
    *res = pcr_call_alloc(cx, *n, sizeof(**res));
    return *res == NULL ? -1 : 0;
}

/* A list of addresses and a matching list of sizes, n entries each (one per key). */
static int flat(pcr_call *cx, PyObject *addrs, PyObject *sizes_o, size_t n, bool writable,
                void ***bufs, size_t **sizes)
{
    if (pcr_ptrs(cx, addrs, n, writable, "addresses", bufs) < 0 ||
        pcr_sizes(cx, sizes_o, n, "sizes", sizes) < 0)
        return -1;
    return 0;
}

/* One value's buffers: a list of addresses and a matching list of sizes (*n each). */
static int buffer_lists(pcr_call *cx, PyObject *addrs, PyObject *sizes_o, bool writable,
                        void ***bufs, size_t **sizes, size_t *n)
{
    PyObject *t;
    if (pcr_seq(cx, addrs, "addresses", &t, n) < 0 ||
        flat(cx, t, sizes_o, *n, writable, bufs, sizes) < 0)
        return -1;
    return 0;
}

/*
 * Convert a list of lists of addresses and a matching list of lists of sizes
 * (one inner list per key) into flat arrays with per-key offsets.
 */
static int nested(pcr_call *cx, PyObject *addrs, PyObject *sizes_o, size_t n, bool writable,
                  void ****bufs_out, size_t ***sizes_out, size_t **counts_out)
{
    PyObject *at, *st;
    size_t an, sn;
    if (pcr_seq(cx, addrs, "addresses", &at, &an) < 0 ||
        pcr_seq(cx, sizes_o, "sizes", &st, &sn) < 0)
        return -1;
    if (an != n || sn != n) {
        PyErr_Format(PyExc_ValueError, "%zu address lists and %zu size lists for %zu keys", an, sn,
                     n);
        return -1;
    }
    void ***bufs = pcr_call_alloc(cx, n, sizeof(*bufs));
    size_t **sizes = pcr_call_alloc(cx, n, sizeof(*sizes));
    size_t *counts = pcr_call_alloc(cx, n, sizeof(*counts));
    if (bufs == NULL || sizes == NULL || counts == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        PyObject *inner;
        if (pcr_seq(cx, PyTuple_GET_ITEM(at, (Py_ssize_t)i), "addresses[i]", &inner, &counts[i]) <
                0 ||
            pcr_ptrs(cx, inner, counts[i], writable, "addresses[i]", &bufs[i]) < 0 ||
            pcr_sizes(cx, PyTuple_GET_ITEM(st, (Py_ssize_t)i), counts[i], "sizes[i]", &sizes[i]) <
                0)
            return -1;
    }
    *bufs_out = bufs;
    *sizes_out = sizes;
    *counts_out = counts;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------- */

static int store_init(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"local_hostname",
                             "metadata",
                             "global_segment_size",
                             "local_buffer_size",
                             "protocol",
                             "devices",
                             "master_address",
                             "transfer_timeout_ms",
                             "rpc_timeout_ms",
                             "heartbeat_interval_ms",
                             "engine",
                             "thin",
                             "mem_pool_size",
                             "shared_secret",
                             "tenant_id",
                             "call_timeout_ms",
                             "enable_ssd_offload",
                             "ssd_offload_path",
                             NULL};
    if (self->store != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Store is already set up");
        return -1;
    }
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    const char *host = NULL, *meta = NULL, *proto = NULL, *dev = NULL, *master = NULL;
    const char *thin = NULL, *secret = NULL, *tenant = NULL;
    PyObject *gss = NULL, *lbs = NULL, *engine = NULL, *pool = NULL;
    uint32_t call_timeout = 0;
    int ssd = 0;
    const char *ssd_path = NULL;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "|O&O&OOO&O&O&$O&O&O&OO&OO&O&O&pO&:Store", kwlist, pcr_conv_str, &host,
            pcr_conv_str, &meta, &gss, &lbs, pcr_conv_str, &proto, pcr_conv_str, &dev, pcr_conv_str,
            &master, pcr_conv_u32, &cfg.transfer_timeout_ms, pcr_conv_u32, &cfg.rpc_timeout_ms,
            pcr_conv_u32, &cfg.heartbeat_interval_ms, &engine, pcr_conv_str, &thin, &pool,
            pcr_conv_str, &secret, pcr_conv_str, &tenant, pcr_conv_u32, &call_timeout, &ssd,
            pcr_conv_str, &ssd_path))
        return -1;
    if (thin != NULL && ssd) {
        PyErr_SetString(PyExc_ValueError, "enable_ssd_offload: a thin client has no segment of "
                                          "its own (start crescent-client with the disk tier)");
        return -1;
    }
    cfg.enable_ssd_offload = ssd != 0;
    cfg.ssd_offload_path = ssd_path;
    if (thin != NULL)
        return pcr_store_init_thin(self, thin, pool, lbs, secret, tenant, call_timeout);
    if (host != NULL)
        cfg.local_hostname = host;
    if (meta != NULL)
        cfg.metadata = meta;
    if (proto != NULL)
        cfg.protocol = proto;
    if (dev != NULL)
        cfg.devices = dev;
    if (master != NULL)
        cfg.master_address = master;
    cfg.tenant_id = tenant;
    if (gss != NULL && gss != Py_None &&
        pcr_store_size_arg(gss, "global_segment_size", &cfg.global_segment_size) < 0)
        return -1;
    if (lbs != NULL && lbs != Py_None &&
        pcr_store_size_arg(lbs, "local_buffer_size", &cfg.local_buffer_size) < 0)
        return -1;
    if (engine != NULL && engine != Py_None) {
        cfg.engine = pcr_engine_borrow(engine);
        if (cfg.engine == NULL)
            return -1;
    }
    cr_store *s = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_store_setup(&cfg, &s);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        if (cfg.engine != NULL)
            pcr_engine_release(engine);
        pcr_raise(rc);
        return -1;
    }
    if (cfg.engine != NULL)
        self->engine_obj = engine;
    self->store = s;
    self->base.guard.closing = false;
    if (cr_store_hostname(s, self->name, sizeof(self->name)) < 0)
        self->name[0] = '\0';
    return 0;
}

/* Runs without the GIL once the calls in flight have drained. */
static void destroy_store(void *obj)
{
    Store *self = obj;
    cr_store_sessions_destroy(self->sessions); /* revokes open put sessions first */
    self->sessions = NULL;
    cr_store_destroy(self->store);
}

static void store_shutdown(Store *self)
{
    if (!pcr_object_close(&self->base, self->store != NULL ? self : NULL, destroy_store))
        return;
    self->store = NULL;
    PyDict_Clear(self->base.pins);
    PyObject *engine = self->engine_obj; /* the engine may close from now on */
    self->engine_obj = NULL;
    pcr_engine_release(engine);
}

static void store_dealloc(Store *self)
{
    store_shutdown(self);
    pcr_object_free(&self->base);
}

static PyObject *store_close(Store *self, PyObject *unused)
{
    store_shutdown(self);
    Py_RETURN_NONE;
}

static PyObject *store_enter(Store *self, PyObject *unused)
{
    return pcr_object_enter(&self->base, self->store != NULL, "store");
}

static PyObject *store_exit(Store *self, PyObject *args)
{
    return pcr_exit_result(store_close(self, NULL));
}

static PyObject *store_get_closed(Store *self, void *unused)
{
    return PyBool_FromLong(self->store == NULL);
}

static PyObject *store_get_hostname(Store *self, void *unused)
{
    ENTER(self);
    char buf[512];
    int rc = cr_store_hostname(self->store, buf, sizeof(buf));
    LEAVE(self);
    return rc < 0 ? pcr_raise(rc) : PyUnicode_FromString(buf);
}

static PyObject *store_get_engine_rpc_port(Store *self, void *unused)
{
    ENTER(self);
    cr_engine *e = cr_store_engine(self->store);
    unsigned port = e ? cr_engine_rpc_port(e) : 0;
    LEAVE(self);
    return PyLong_FromUnsignedLong(port);
}

static PyObject *store_health(Store *self, PyObject *unused)
{
    ENTER(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_store_health(self->store);
    Py_END_ALLOW_THREADS
    LEAVE(self);
    return pcr_none_or_raise(rc);
}

/* ------------------------------------------------------------------------- */
/* Writes                                                                    */
/* ------------------------------------------------------------------------- */

typedef int (*put_fn)(cr_store *, const char *, const void *, size_t, const cr_replicate_config *);

static PyObject *put_common(Store *self, PyObject *args, PyObject *kw, put_fn fn, const char *name)
{
    static char *kwlist[] = {"key", "value", "config", NULL};
    PyObject *key, *value, *config = Py_None;
    char fmt[64];
    snprintf(fmt, sizeof(fmt), "OO|O:%s", name);
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &key, &value, &config))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char *k;
    const void *p;
    size_t n;
    cr_replicate_config cfg;
    PyObject *result = NULL;
    if (pcr_key(&cx, key, &k) == 0 && pcr_value(&cx, value, &p, &n) == 0 &&
        pcr_replicate_config(&cx, config, &cfg, NULL, self->name) == 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = fn(self->store, k, p, n, &cfg);
        Py_END_ALLOW_THREADS
        result = pcr_none_or_raise(rc);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_put(Store *self, PyObject *args, PyObject *kw)
{
    return put_common(self, args, kw, cr_store_put, "put");
}

static PyObject *store_upsert(Store *self, PyObject *args, PyObject *kw)
{
    return put_common(self, args, kw, cr_store_upsert, "upsert");
}

static PyObject *put_from_common(Store *self, PyObject *args, PyObject *kw, put_fn fn,
                                 const char *name)
{
    static char *kwlist[] = {"key", "address", "size", "config", NULL};
    PyObject *key, *addr, *size, *config = Py_None;
    char fmt[64];
    snprintf(fmt, sizeof(fmt), "OOO|O:%s", name);
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &key, &addr, &size, &config))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char *k;
    void *p;
    size_t n;
    cr_replicate_config cfg;
    PyObject *result = NULL;
    if (pcr_key(&cx, key, &k) == 0 && pcr_ptr(&cx, addr, false, true, "address", &p) == 0 &&
        pcr_size(size, "size", &n) == 0 &&
        pcr_replicate_config(&cx, config, &cfg, NULL, self->name) == 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = fn(self->store, k, p, n, &cfg);
        Py_END_ALLOW_THREADS
        result = pcr_none_or_raise(rc);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_put_from(Store *self, PyObject *args, PyObject *kw)
{
    return put_from_common(self, args, kw, cr_store_put_from, "put_from");
}

static PyObject *store_upsert_from(Store *self, PyObject *args, PyObject *kw)
{
    return put_from_common(self, args, kw, cr_store_upsert_from, "upsert_from");
}

/* put_parts / upsert_parts: key, *parts, config=None */
static PyObject *parts_common(Store *self, PyObject *args, PyObject *kw, bool upsert)
{
    const char *name = upsert ? "upsert_parts" : "put_parts";
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs < 1) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'key'", name);
        return NULL;
    }
    PyObject *config = Py_None;
    if (kw != NULL) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kw, &pos, &k, &v)) {
            if (!PyUnicode_Check(k) || PyUnicode_CompareWithASCIIString(k, "config") != 0) {
                PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%S'", name,
                             k);
                return NULL;
            }
            config = v;
        }
    }
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char *k;
    size_t n = (size_t)(nargs - 1);
    const void **parts = pcr_call_alloc(&cx, n, sizeof(*parts));
    size_t *sizes = pcr_call_alloc(&cx, n, sizeof(*sizes));
    cr_replicate_config cfg;
    PyObject *result = NULL;
    if (parts == NULL || sizes == NULL || pcr_key(&cx, PyTuple_GET_ITEM(args, 0), &k) < 0 ||
        pcr_replicate_config(&cx, config, &cfg, NULL, self->name) < 0)
        goto out;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (pcr_value(&cx, PyTuple_GET_ITEM(args, (Py_ssize_t)i + 1), &parts[i], &sizes[i]) < 0)
            goto out;
        total += sizes[i];
    }
    int rc;
    if (!upsert) {
        Py_BEGIN_ALLOW_THREADS
        rc = cr_store_put_parts(self->store, k, parts, sizes, n, &cfg);
        Py_END_ALLOW_THREADS
    } else {
        /* No upsert_parts in the C API: gather into one value, then upsert. */
        char *joined = malloc(total ? total : 1);
        if (joined == NULL) {
            PyErr_NoMemory();
            goto out;
        }
        Py_BEGIN_ALLOW_THREADS
        size_t off = 0;
        for (size_t i = 0; i < n; i++) {
            if (sizes[i] > 0)
                memcpy(joined + off, parts[i], sizes[i]);
            off += sizes[i];
        }
        rc = cr_store_upsert(self->store, k, joined, total, &cfg);
        Py_END_ALLOW_THREADS
        free(joined);
    }
    result = pcr_none_or_raise(rc);
out:
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_put_parts(Store *self, PyObject *args, PyObject *kw)
{
    return parts_common(self, args, kw, false);
}

static PyObject *store_upsert_parts(Store *self, PyObject *args, PyObject *kw)
{
    return parts_common(self, args, kw, true);
}

static PyObject *store_put_from_multi(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"key", "addresses", "sizes", "config", NULL};
    PyObject *key, *addrs, *sizes_o, *config = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O:put_from_multi", kwlist, &key, &addrs,
                                     &sizes_o, &config))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char *k;
    PyObject *result = NULL;
    size_t n, *sizes;
    void **bufs;
    cr_replicate_config cfg;
    if (pcr_key(&cx, key, &k) == 0 &&
        buffer_lists(&cx, addrs, sizes_o, false, &bufs, &sizes, &n) == 0 &&
        pcr_replicate_config(&cx, config, &cfg, NULL, self->name) == 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_store_put_from_multi(self->store, k, bufs, sizes, n, &cfg);
        Py_END_ALLOW_THREADS
        result = pcr_none_or_raise(rc);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

/* batch_put / batch_upsert: copying, one value per key. */
static PyObject *batch_put_common(Store *self, PyObject *args, PyObject *kw, bool upsert)
{
    static char *kwlist[] = {"keys", "values", "config", NULL};
    PyObject *keys_o, *values_o, *config = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, upsert ? "OO|O:batch_upsert" : "OO|O:batch_put",
                                     kwlist, &keys_o, &values_o, &config))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char **keys;
    PyObject *vt, *result = NULL;
    size_t n, m;
    cr_replicate_config cfg;
    if (pcr_keys(&cx, keys_o, &keys, &n) < 0 || pcr_seq(&cx, values_o, "values", &vt, &m) < 0 ||
        pcr_replicate_config(&cx, config, &cfg, NULL, self->name) < 0)
        goto out;
    if (m != n) {
        PyErr_Format(PyExc_ValueError, "values has %zu entries for %zu keys", m, n);
        goto out;
    }
    const void **vals = pcr_call_alloc(&cx, n, sizeof(*vals));
    size_t *sizes = pcr_call_alloc(&cx, n, sizeof(*sizes));
    int *res = pcr_call_alloc(&cx, n, sizeof(*res));
    if (vals == NULL || sizes == NULL || res == NULL)
        goto out;
    for (size_t i = 0; i < n; i++)
        if (pcr_value(&cx, PyTuple_GET_ITEM(vt, (Py_ssize_t)i), &vals[i], &sizes[i]) < 0)
            goto out;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = upsert ? cr_store_batch_upsert(self->store, keys, vals, sizes, n, &cfg, res)
                : cr_store_batch_put(self->store, keys, vals, sizes, n, &cfg, res);
    Py_END_ALLOW_THREADS
    result = rc < 0 ? pcr_raise(rc) : pcr_int_list(res, n);
out:
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_batch_put(Store *self, PyObject *args, PyObject *kw)
{
    return batch_put_common(self, args, kw, false);
}

static PyObject *store_batch_upsert(Store *self, PyObject *args, PyObject *kw)
{
    return batch_put_common(self, args, kw, true);
}

typedef int (*batch_from_fn)(cr_store *, const char *const *, void *const *, const size_t *, size_t,
                             const cr_replicate_config *, int *);

static PyObject *batch_from_common(Store *self, PyObject *args, PyObject *kw, batch_from_fn fn,
                                   const char *name)
{
    static char *kwlist[] = {"keys", "addresses", "sizes", "config", NULL};
    PyObject *keys_o, *addrs, *sizes_o, *config = Py_None;
    char fmt[64];
    snprintf(fmt, sizeof(fmt), "OOO|O:%s", name);
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &keys_o, &addrs, &sizes_o, &config))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char **keys;
    void **bufs;
    size_t n, *sizes;
    int *res;
    cr_replicate_config cfg;
    PyObject *result = NULL;
    if (pcr_keys(&cx, keys_o, &keys, &n) == 0 &&
        flat(&cx, addrs, sizes_o, n, false, &bufs, &sizes) == 0 &&
        pcr_replicate_config(&cx, config, &cfg, NULL, self->name) == 0 &&
        (res = pcr_call_alloc(&cx, n, sizeof(*res))) != NULL) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = fn(self->store, keys, bufs, sizes, n, &cfg, res);
        Py_END_ALLOW_THREADS
        result = rc < 0 ? pcr_raise(rc) : pcr_int_list(res, n);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_batch_put_from(Store *self, PyObject *args, PyObject *kw)
{
    return batch_from_common(self, args, kw, cr_store_batch_put_from, "batch_put_from");
}

static PyObject *store_batch_upsert_from(Store *self, PyObject *args, PyObject *kw)
{
    return batch_from_common(self, args, kw, cr_store_batch_upsert_from, "batch_upsert_from");
}

static PyObject *batch_from_multi_common(Store *self, PyObject *args, PyObject *kw, bool upsert)
{
    static char *kwlist[] = {"keys", "addresses", "sizes", "config", NULL};
    PyObject *keys_o, *addrs, *sizes_o, *config = Py_None;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, upsert ? "OOO|O:batch_upsert_from_multi" : "OOO|O:batch_put_from_multi",
            kwlist, &keys_o, &addrs, &sizes_o, &config))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char **keys;
    void ***bufs;
    size_t n, **sizes, *counts;
    int *res;
    cr_replicate_config cfg;
    PyObject *result = NULL;
    if (pcr_keys(&cx, keys_o, &keys, &n) == 0 &&
        nested(&cx, addrs, sizes_o, n, false, &bufs, &sizes, &counts) == 0 &&
        pcr_replicate_config(&cx, config, &cfg, NULL, self->name) == 0 &&
        (res = pcr_call_alloc(&cx, n, sizeof(*res))) != NULL) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc =
            upsert
                ? cr_store_batch_upsert_from_multi(self->store, keys, (void *const *const *)bufs,
                                                   (const size_t *const *)sizes, counts, n, &cfg,
                                                   res)
                : cr_store_batch_put_from_multi(self->store, keys, (void *const *const *)bufs,
                                                (const size_t *const *)sizes, counts, n, &cfg, res);
        Py_END_ALLOW_THREADS
        result = rc < 0 ? pcr_raise(rc) : pcr_int_list(res, n);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_batch_put_from_multi(Store *self, PyObject *args, PyObject *kw)
{
    return batch_from_multi_common(self, args, kw, false);
}

static PyObject *store_batch_upsert_from_multi(Store *self, PyObject *args, PyObject *kw)
{
    return batch_from_multi_common(self, args, kw, true);
}

/* ------------------------------------------------------------------------- */
/* Reads                                                                     */
/* ------------------------------------------------------------------------- */

/* A get's bytes object, allocated at the value's size once the store knows
 * it (cr_store_get_alloc), so the value is read straight into it. Called
 * with the GIL released: each takes it for the allocation alone. */
typedef struct bytes_room {
    PyObject *obj;
} bytes_room;

static int bytes_room_alloc(void *ctx, uint64_t size, void **ptr)
{
    bytes_room *r = ctx;
    if (size > (uint64_t)PY_SSIZE_T_MAX)
        return CR_ERR_NO_MEMORY;
    PyGILState_STATE g = PyGILState_Ensure();
    r->obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (r->obj == NULL)
        PyErr_Clear(); /* the call fails with the status below */
    PyGILState_Release(g);
    if (r->obj == NULL)
        return CR_ERR_NO_MEMORY;
    *ptr = PyBytes_AS_STRING(r->obj);
    return 0;
}

static void bytes_room_release(void *ctx, void *ptr)
{
    (void)ptr;
    bytes_room *r = ctx;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_CLEAR(r->obj);
    PyGILState_Release(g);
}

/* get / get_buffer: the value as bytes (read straight into the bytes object)
 * or as a BufferHandle (the malloc'd copy itself): one copy either way. */
static PyObject *get_common(Store *self, PyObject *args, PyObject *kw, const char *name,
                            bool as_handle)
{
    static char *kwlist[] = {"key", NULL};
    PyObject *key;
    char fmt[64];
    snprintf(fmt, sizeof(fmt), "O:%s", name);
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &key))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char *k;
    PyObject *result = NULL;
    if (pcr_key(&cx, key, &k) == 0) {
        void *v = NULL;
        int64_t rc;
        bytes_room room = {NULL};
        cr_value_alloc alloc = {bytes_room_alloc, bytes_room_release, &room};
        Py_BEGIN_ALLOW_THREADS
        rc = as_handle ? cr_store_get(self->store, k, &v)
                       : cr_store_get_alloc(self->store, k, &alloc, &v);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            Py_CLEAR(room.obj); /* an allocator that was not released (cannot happen) */
            pcr_raise(rc);
        } else if (as_handle) {
            result = pcr_buffer_handle_new(v, (size_t)rc);
        } else {
            result = room.obj;
        }
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_get(Store *self, PyObject *args, PyObject *kw)
{
    return get_common(self, args, kw, "get", false);
}

static PyObject *store_get_buffer(Store *self, PyObject *args, PyObject *kw)
{
    return get_common(self, args, kw, "get_buffer", true);
}

static PyObject *store_batch_get(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"keys", NULL};
    PyObject *keys_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:batch_get", kwlist, &keys_o))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char **keys;
    size_t n;
    PyObject *result = NULL;
    void **vals;
    int64_t *res;
    if (pcr_keys(&cx, keys_o, &keys, &n) == 0 &&
        (vals = pcr_call_alloc(&cx, n, sizeof(*vals))) != NULL &&
        (res = pcr_call_alloc(&cx, n, sizeof(*res))) != NULL) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_store_batch_get(self->store, keys, n, vals, res);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            pcr_raise(rc);
        } else {
            result = PyList_New((Py_ssize_t)n);
            for (size_t i = 0; i < n; i++) {
                PyObject *item = NULL;
                if (result != NULL)
                    item = res[i] >= 0 ? pcr_buffer_handle_new(vals[i], (size_t)res[i])
                                       : PyLong_FromLongLong(res[i]);
                else if (res[i] >= 0)
                    free(vals[i]);
                if (result != NULL && item == NULL)
                    Py_CLEAR(result); /* handles already built free their memory */
                else if (result != NULL)
                    PyList_SET_ITEM(result, (Py_ssize_t)i, item);
            }
        }
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_get_into(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"key", "address", "size", NULL};
    PyObject *key, *addr, *size;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:get_into", kwlist, &key, &addr, &size))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char *k;
    void *p;
    size_t n;
    PyObject *result = NULL;
    if (pcr_key(&cx, key, &k) == 0 && pcr_ptr(&cx, addr, true, true, "address", &p) == 0 &&
        pcr_size(size, "size", &n) == 0) {
        int64_t rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_store_get_into(self->store, k, p, n);
        Py_END_ALLOW_THREADS
        result = pcr_int_or_raise(rc);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_get_into_multi(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"key", "addresses", "sizes", NULL};
    PyObject *key, *addrs, *sizes_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:get_into_multi", kwlist, &key, &addrs,
                                     &sizes_o))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char *k;
    PyObject *result = NULL;
    size_t n, *sizes;
    void **bufs;
    if (pcr_key(&cx, key, &k) == 0 &&
        buffer_lists(&cx, addrs, sizes_o, true, &bufs, &sizes, &n) == 0) {
        int64_t rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_store_get_into_multi(self->store, k, bufs, sizes, n);
        Py_END_ALLOW_THREADS
        result = pcr_int_or_raise(rc);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

/* batch_get_into (one buffer per key) / batch_get_into_multi (a list per key). */
static PyObject *batch_get_into_common(Store *self, PyObject *args, PyObject *kw, bool multi)
{
    static char *kwlist[] = {"keys", "addresses", "sizes", NULL};
    PyObject *keys_o, *addrs, *sizes_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw,
                                     multi ? "OOO:batch_get_into_multi" : "OOO:batch_get_into",
                                     kwlist, &keys_o, &addrs, &sizes_o))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char **keys;
    void **bufs, ***buf_lists;
    size_t n, *sizes, **size_lists, *counts;
    int64_t *res;
    PyObject *result = NULL;
    if (pcr_keys(&cx, keys_o, &keys, &n) == 0 &&
        (multi ? nested(&cx, addrs, sizes_o, n, true, &buf_lists, &size_lists, &counts)
               : flat(&cx, addrs, sizes_o, n, true, &bufs, &sizes)) == 0 &&
        (res = pcr_call_alloc(&cx, n, sizeof(*res))) != NULL) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = multi
                 ? cr_store_batch_get_into_multi(self->store, keys, (void *const *const *)buf_lists,
                                                 (const size_t *const *)size_lists, counts, n, res)
                 : cr_store_batch_get_into(self->store, keys, bufs, sizes, n, res);
        Py_END_ALLOW_THREADS
        result = rc < 0 ? pcr_raise(rc) : pcr_i64_list(res, n);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_batch_get_into(Store *self, PyObject *args, PyObject *kw)
{
    return batch_get_into_common(self, args, kw, false);
}

static PyObject *store_batch_get_into_multi(Store *self, PyObject *args, PyObject *kw)
{
    return batch_get_into_common(self, args, kw, true);
}

/* ------------------------------------------------------------------------- */
/* Existence, size, removal                                                  */
/* ------------------------------------------------------------------------- */

static PyObject *key_int_op(Store *self, PyObject *args, PyObject *kw, const char *name, int op)
{
    static char *kwlist[] = {"key", NULL};
    PyObject *key;
    char fmt[64];
    snprintf(fmt, sizeof(fmt), "O:%s", name);
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &key))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char *k;
    PyObject *result = NULL;
    if (pcr_key(&cx, key, &k) == 0) {
        int64_t rc;
        Py_BEGIN_ALLOW_THREADS
        rc = op == 0 ? cr_store_exist(self->store, k) : cr_store_get_size(self->store, k);
        Py_END_ALLOW_THREADS
        if (rc < 0)
            pcr_raise(rc);
        else
            result = op == 0 ? PyBool_FromLong(rc > 0) : PyLong_FromLongLong(rc);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_exists(Store *self, PyObject *args, PyObject *kw)
{
    return key_int_op(self, args, kw, "exists", 0);
}

static PyObject *store_get_size(Store *self, PyObject *args, PyObject *kw)
{
    return key_int_op(self, args, kw, "get_size", 1);
}

static PyObject *store_batch_exists(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"keys", NULL};
    PyObject *keys_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:batch_exists", kwlist, &keys_o))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char **keys;
    size_t n;
    int *res;
    PyObject *result = NULL;
    if (keys_with_results(&cx, keys_o, &keys, &n, &res) == 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_store_batch_exist(self->store, keys, n, res);
        Py_END_ALLOW_THREADS
        result = rc < 0 ? pcr_raise(rc) : pcr_int_list(res, n);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_remove(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"key", "force", NULL};
    PyObject *key;
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:remove", kwlist, &key, &force))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char *k;
    PyObject *result = NULL;
    if (pcr_key(&cx, key, &k) == 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_store_remove(self->store, k, force != 0);
        Py_END_ALLOW_THREADS
        result = pcr_none_or_raise(rc);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_remove_by_regex(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"pattern", "force", NULL};
    const char *pattern;
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|p:remove_by_regex", kwlist, &pattern, &force))
        return NULL;
    ENTER(self);
    int64_t rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_store_remove_by_regex(self->store, pattern, force != 0);
    Py_END_ALLOW_THREADS
    LEAVE(self);
    return pcr_int_or_raise(rc);
}

static PyObject *store_remove_all(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"force", NULL};
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:remove_all", kwlist, &force))
        return NULL;
    ENTER(self);
    int64_t rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_store_remove_all(self->store, force != 0);
    Py_END_ALLOW_THREADS
    LEAVE(self);
    return pcr_int_or_raise(rc);
}

static PyObject *store_batch_remove(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"keys", "force", NULL};
    PyObject *keys_o;
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:batch_remove", kwlist, &keys_o, &force))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char **keys;
    size_t n;
    int *res;
    PyObject *result = NULL;
    if (keys_with_results(&cx, keys_o, &keys, &n, &res) == 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_store_batch_remove(self->store, keys, n, force != 0, res);
        Py_END_ALLOW_THREADS
        result = rc < 0 ? pcr_raise(rc) : pcr_int_list(res, n);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

/* ------------------------------------------------------------------------- */
/* Replica locations                                                         */
/* ------------------------------------------------------------------------- */

/* (segment, address, size, complete) of cr_replica_info[i]. */
static PyObject *replica_item(const void *items, size_t i)
{
    const cr_replica_info *r = &((const cr_replica_info *)items)[i];
    return Py_BuildValue("(sKKO)", r->segment, (unsigned long long)r->address,
                         (unsigned long long)r->size, r->complete ? Py_True : Py_False);
}

static PyObject *store_get_replicas(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"key", NULL};
    PyObject *key;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:get_replicas", kwlist, &key))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char *k;
    PyObject *result = NULL;
    /* An object has at most a handful of replicas; ask again if there are more. */
    size_t cap = 8;
    cr_replica_info *info = NULL;
    if (pcr_key(&cx, key, &k) != 0)
        goto out;
    for (;;) {
        info = pcr_call_alloc(&cx, cap, sizeof(*info));
        if (info == NULL)
            goto out;
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_store_get_replicas(self->store, k, info, cap);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            pcr_raise(rc);
            goto out;
        }
        if ((size_t)rc > cap) {
            cap = (size_t)rc;
            continue;
        }
        result = pcr_list_build((size_t)rc, replica_item, info);
        break;
    }
out:
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_batch_replica_clear(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"keys", "segment", NULL};
    PyObject *keys_o;
    const char *segment = "";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|s:batch_replica_clear", kwlist, &keys_o,
                                     &segment))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char **keys;
    size_t n;
    int *res;
    PyObject *result = NULL;
    if (keys_with_results(&cx, keys_o, &keys, &n, &res) == 0) {
        int rc;
        /* A status is never positive: 1 marks results the call left untouched. */
        for (size_t i = 0; i < n; i++)
            res[i] = 1;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_store_batch_replica_clear(self->store, keys, n, segment, res);
        Py_END_ALLOW_THREADS
        /* The call refused as a whole: raise. A part that failed at the master
         * put its code into each of its keys' results: return those. */
        result = rc < 0 && (n == 0 || res[0] == 1) ? pcr_raise(rc) : pcr_int_list(res, n);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

/* ------------------------------------------------------------------------- */
/* Memory registration                                                       */
/* ------------------------------------------------------------------------- */

static PyObject *store_register_buffer(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"address", "size", NULL};
    PyObject *addr, *size = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:register_buffer", kwlist, &addr, &size))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    PyObject *mv = NULL, *result = NULL;
    void *p = NULL;
    size_t n = 0;
    if (pcr_buffer_arg(&cx, addr, size, "size", &p, &n, &mv) < 0)
        goto out;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_store_register_buffer(self->store, p, n);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        pcr_raise(rc);
        goto out;
    }
    if (pcr_pin(&self->base, p, mv) < 0)
        goto out;
    result = PyLong_FromVoidPtr(p);
out:
    Py_XDECREF(mv);
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *store_unregister_buffer(Store *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"address", NULL};
    PyObject *addr;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:unregister_buffer", kwlist, &addr))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    void *p;
    PyObject *result = NULL;
    if (pcr_ptr(&cx, addr, false, true, "address", &p) == 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_store_unregister_buffer(self->store, p);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            pcr_raise(rc);
        } else {
            pcr_unpin(&self->base, p);
            result = Py_NewRef(Py_None);
        }
    }
    return pcr_call_finish(&cx, &self->base, result);
}

/* ------------------------------------------------------------------------- */
/* Type                                                                      */
/* ------------------------------------------------------------------------- */

#define KW    (METH_VARARGS | METH_KEYWORDS)
#define F(fn) ((PyCFunction)(void (*)(void))(fn))

static PyMethodDef store_methods[] = {
    {"close", F(store_close), METH_NOARGS,
     "close()\n\nUnmount this client's segment and free it (waits for calls in flight).\n"
     "Objects whose only replicas lived here vanish. Idempotent."},
    {"__enter__", F(store_enter), METH_NOARGS, NULL},
    {"__exit__", F(store_exit), METH_VARARGS, NULL},
    {"offload_stats", F(pcr_store_offload_stats), METH_NOARGS,
     "offload_stats() -> dict\n\nThe disk tier's counters (enable_ssd_offload): disk keys and "
     "bytes,\noffloads, stage reads, promotions, rpc_reads (gets served from a disk)."},
    {"health", F(store_health), METH_NOARGS,
     "health()\n\nRaise unless the master answers and this client's segment is mounted."},
    {"put", F(store_put), KW,
     "put(key, value, config=None)\n\nCopy `value` (bytes-like or CPU tensor) into the store.\n"
     "An existing key is left unchanged (Mooncake semantics); see upsert()."},
    {"upsert", F(store_upsert), KW, "upsert(key, value, config=None)\n\nInsert or replace."},
    {"put_from", F(store_put_from), KW,
     "put_from(key, address, size, config=None)\n\nZero-copy put from registered memory."},
    {"upsert_from", F(store_upsert_from), KW, "upsert_from(key, address, size, config=None)"},
    {"put_parts", F(store_put_parts), KW,
     "put_parts(key, *parts, config=None)\n\nOne object gathered from several bytes-like parts."},
    {"upsert_parts", F(store_upsert_parts), KW, "upsert_parts(key, *parts, config=None)"},
    {"put_from_multi", F(store_put_from_multi), KW,
     "put_from_multi(key, addresses, sizes, config=None)\n\nOne object gathered from several "
     "registered buffers."},
    {"batch_put", F(store_batch_put), KW,
     "batch_put(keys, values, config=None) -> list[int]\n\nCopying puts; 0 or a negative "
     "status per key."},
    {"batch_upsert", F(store_batch_upsert), KW,
     "batch_upsert(keys, values, config=None) -> "
     "list[int]"},
    {"batch_put_from", F(store_batch_put_from), KW,
     "batch_put_from(keys, addresses, sizes, config=None) -> list[int]"},
    {"batch_upsert_from", F(store_batch_upsert_from), KW,
     "batch_upsert_from(keys, addresses, sizes, config=None) -> list[int]"},
    {"batch_put_from_multi", F(store_batch_put_from_multi), KW,
     "batch_put_from_multi(keys, addresses, sizes, config=None) -> list[int]\n\n"
     "Zero-copy gather puts: addresses and sizes are one list per key; one\n"
     "batch for all keys. 0 or a negative status per key."},
    {"batch_upsert_from_multi", F(store_batch_upsert_from_multi), KW,
     "batch_upsert_from_multi(keys, addresses, sizes, config=None) -> list[int]\n\n"
     "Like batch_put_from_multi, replacing existing keys."},
    {"get", F(store_get), KW, "get(key) -> bytes\n\nCopying get; raises NotFoundError on a miss."},
    {"get_buffer", F(store_get_buffer), KW,
     "get_buffer(key) -> BufferHandle\n\nLike get() without the extra copy into bytes."},
    {"batch_get", F(store_batch_get), KW,
     "batch_get(keys) -> list[BufferHandle | int]\n\nA BufferHandle or a negative status per "
     "key."},
    {"get_into", F(store_get_into), KW,
     "get_into(key, address, size) -> int\n\nZero-copy get into registered memory; returns "
     "the\nvalue's size (BUFFER_OVERFLOW if it does not fit)."},
    {"get_into_multi", F(store_get_into_multi), KW,
     "get_into_multi(key, addresses, sizes) -> int\n\nScatter one value over several "
     "buffers."},
    {"batch_get_into", F(store_batch_get_into), KW,
     "batch_get_into(keys, addresses, sizes) -> list[int]\n\nBytes read or a negative status "
     "per key."},
    {"batch_get_into_multi", F(store_batch_get_into_multi), KW,
     "batch_get_into_multi(keys, addresses, sizes) -> list[int]\n\n"
     "Zero-copy scatter gets: addresses and sizes are one list per key; one\n"
     "batch for all keys. Bytes read or a negative status per key\n"
     "(BUFFER_OVERFLOW when the buffers cannot hold the value)."},
    {"exists", F(store_exists), KW, "exists(key) -> bool"},
    {"batch_exists", F(store_batch_exists), KW,
     "batch_exists(keys) -> list[int]\n\n1 exists, 0 missing, negative status per key."},
    {"get_size", F(store_get_size), KW,
     "get_size(key) -> int\n\nThe value's size; raises NotFoundError on a miss."},
    {"remove", F(store_remove), KW,
     "remove(key, force=False)\n\nRemove a key (OBJECT_HAS_LEASE while read-leased unless "
     "force)."},
    {"remove_by_regex", F(store_remove_by_regex), KW,
     "remove_by_regex(pattern, force=False) -> int\n\nRemove keys matching a POSIX extended "
     "regex;\nreturns the count."},
    {"remove_all", F(store_remove_all), KW, "remove_all(force=False) -> int"},
    {"batch_remove", F(store_batch_remove), KW,
     "batch_remove(keys, force=False) -> list[int]\n\n0 or a negative status (-704 missing) "
     "per key."},
    {"get_replicas", F(store_get_replicas), KW,
     "get_replicas(key) -> list[tuple[str, int, int, bool]]\n\n(segment, address, size, "
     "complete) per replica the master knows;\ngrants no lease. Raises NotFoundError on a "
     "miss."},
    {"batch_replica_clear", F(store_batch_replica_clear), KW,
     "batch_replica_clear(keys, segment='') -> list[int]\n\nDrop the keys' replicas on "
     "`segment` ('' = every replica: remove);\nan object left without replicas is removed. "
     "0 or a negative status\nper key (-704 missing, -706 leased, -703 write in flight, "
     "-710 no\nreplica on that segment)."},
    {"register_buffer", F(store_register_buffer), KW,
     "register_buffer(address, size=None) -> int\n\nRegister host memory for the zero-copy "
     "calls. A buffer\nobject is pinned until unregister_buffer(). Returns the address."},
    {"unregister_buffer", F(store_unregister_buffer), KW, "unregister_buffer(address)"},
    PCR_STORE_SESSION_METHODS,
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef store_getset[] = {
    {"is_thin", (getter)pcr_store_get_is_thin, NULL,
     "True for a thin client of crescent-client (Store(thin=...)).", NULL},
    {"hostname", (getter)store_get_hostname, NULL,
     "This client's segment name (what preferred_segments refers to).", NULL},
    {"engine_rpc_port", (getter)store_get_engine_rpc_port, NULL,
     "RPC port of the store's own transfer engine.", NULL},
    {"closed", (getter)store_get_closed, NULL, "True after close().", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pcr_StoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "crescent.Store",
    .tp_basicsize = sizeof(Store),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Store(local_hostname=None, metadata=None, global_segment_size=None,\n"
              "      local_buffer_size=None, protocol=None, devices=None, master_address=None,\n"
              "      *, transfer_timeout_ms=0, rpc_timeout_ms=0, heartbeat_interval_ms=0)\n\n"
              "A crescent KV-store client: contributes global_segment_size bytes to the\n"
              "cluster at master_address ('host:port') and stages copies through\n"
              "local_buffer_size bytes. Sizes are ints or strings like '64MB'. None keeps\n"
              "the C defaults. Thread-safe; a context manager (close() on exit).",
    .tp_new = pcr_object_new,
    .tp_init = (initproc)store_init,
    .tp_dealloc = (destructor)store_dealloc,
    .tp_methods = store_methods,
    .tp_getset = store_getset,
};
