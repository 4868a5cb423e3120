/*
 * store_compat.c - Store methods the mooncake package builds Mooncake's
 * newer surface on: get/put sessions and their ranged transfers
 * (cr_store_sessions), the segment list (cr_store_list_segments) and the
 * store engine's counters (MC_TE_METRIC reports).
 *
 * The session table is created on the first session call (with the GIL
 * held, so two threads cannot both create it) and lives until the Store
 * closes. Fragment lists are converted like the multi-buffer batch forms:
 * one inner list per key of addresses, sizes and object offsets, shapes
 * checked (ValueError) before the GIL is released.
 */
#include "store_obj.h"

#include <string.h>

_Static_assert(sizeof(size_t) == sizeof(uint64_t), "offsets are passed as size_t arrays");

/* The store's session table, created on first use. NULL with an exception. */
static cr_store_sessions *sessions_of(Store *self)
{
    if (self->sessions == NULL) {
        int rc = cr_store_sessions_create(self->store, &self->sessions);
        if (rc < 0) {
            pcr_raise(rc);
            return NULL;
        }
    }
    return self->sessions;
}

/* Three parallel lists of lists (addresses, sizes, offsets), n inner lists each. */
static int fragments(pcr_call *cx, PyObject *addrs, PyObject *sizes_o, PyObject *offs_o, size_t n,
                     bool writable, void ****bufs_out, size_t ***sizes_out, size_t ***offs_out,
                     size_t **counts_out)
{
    PyObject *at, *st, *ot;
    size_t an, sn, on;
    if (pcr_seq(cx, addrs, "addresses", &at, &an) < 0 ||
        pcr_seq(cx, sizes_o, "sizes", &st, &sn) < 0 || pcr_seq(cx, offs_o, "offsets", &ot, &on) < 0)
        return -1;
    if (an != n || sn != n || on != n) {
        PyErr_Format(PyExc_ValueError,
                     "%zu address lists, %zu size lists and %zu offset lists for %zu keys", an, sn,
                     on, n);
        return -1;
    }
    void ***bufs = pcr_call_alloc(cx, n, sizeof(*bufs));
    size_t **sizes = pcr_call_alloc(cx, n, sizeof(*sizes));
    size_t **offs = pcr_call_alloc(cx, n, sizeof(*offs));
    size_t *counts = pcr_call_alloc(cx, n, sizeof(*counts));
    if (bufs == NULL || sizes == NULL || offs == NULL || counts == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        PyObject *inner;
        if (pcr_seq(cx, PyTuple_GET_ITEM(at, (Py_ssize_t)i), "addresses[i]", &inner, &counts[i]) <
                0 ||
            pcr_ptrs(cx, inner, counts[i], writable, "addresses[i]", &bufs[i]) < 0 ||
            pcr_sizes(cx, PyTuple_GET_ITEM(st, (Py_ssize_t)i), counts[i], "sizes[i]", &sizes[i]) <
                0 ||
            pcr_sizes(cx, PyTuple_GET_ITEM(ot, (Py_ssize_t)i), counts[i], "offsets[i]", &offs[i]) <
                0)
            return -1;
    }
    *bufs_out = bufs;
    *sizes_out = sizes;
    *offs_out = offs;
    *counts_out = counts;
    return 0;
}

typedef int (*keys_fn)(cr_store_sessions *t, const char *const *keys, size_t n, int *results);

/* get_session_start / put_session_end / put_session_revoke: keys -> list[int]. */
static PyObject *keys_call(PyObject *obj, PyObject *args, PyObject *kw, keys_fn fn, const char *fmt)
{
    Store *self = (Store *)obj;
    static char *kwlist[] = {"keys", NULL};
    PyObject *keys_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &keys_o))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char **keys;
    size_t n;
    int *res;
    PyObject *result = NULL;
    cr_store_sessions *t = sessions_of(self);
    if (t != NULL && pcr_keys(&cx, keys_o, &keys, &n) == 0 &&
        (res = pcr_call_alloc(&cx, n, sizeof(*res))) != NULL) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = fn(t, keys, n, res);
        Py_END_ALLOW_THREADS
        result = rc < 0 ? pcr_raise(rc) : pcr_int_list(res, n);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

PyObject *pcr_store_get_session_start(PyObject *self, PyObject *args, PyObject *kw)
{
    return keys_call(self, args, kw, cr_store_get_session_start, "O:get_session_start");
}

PyObject *pcr_store_put_session_end(PyObject *self, PyObject *args, PyObject *kw)
{
    return keys_call(self, args, kw, cr_store_put_session_end, "O:put_session_end");
}

PyObject *pcr_store_put_session_revoke(PyObject *self, PyObject *args, PyObject *kw)
{
    return keys_call(self, args, kw, cr_store_put_session_revoke, "O:put_session_revoke");
}

PyObject *pcr_store_get_session_end(PyObject *obj, PyObject *args, PyObject *kw)
{
    Store *self = (Store *)obj;
    static char *kwlist[] = {"keys", NULL};
    PyObject *keys_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:get_session_end", kwlist, &keys_o))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char **keys;
    size_t n;
    PyObject *result = NULL;
    cr_store_sessions *t = sessions_of(self);
    if (t != NULL && pcr_keys(&cx, keys_o, &keys, &n) == 0) {
        int rc = cr_store_get_session_end(t, keys, n); /* in memory only: keeps the GIL */
        result = rc < 0 ? pcr_raise(rc) : Py_NewRef(Py_None);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

typedef int (*ranges_fn)(cr_store_sessions *t, const char *const *keys, void *const *const *bufs,
                         const size_t *const *sizes, const uint64_t *const *offsets,
                         const size_t *counts, size_t n, int64_t *results);

static PyObject *ranges_call(PyObject *obj, PyObject *args, PyObject *kw, ranges_fn fn,
                             bool writable, const char *fmt)
{
    Store *self = (Store *)obj;
    static char *kwlist[] = {"keys", "addresses", "sizes", "offsets", NULL};
    PyObject *keys_o, *addrs, *sizes_o, *offs_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &keys_o, &addrs, &sizes_o, &offs_o))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char **keys;
    void ***bufs;
    size_t n, **sizes, **offs, *counts;
    int64_t *res;
    PyObject *result = NULL;
    cr_store_sessions *t = sessions_of(self);
    if (t != NULL && pcr_keys(&cx, keys_o, &keys, &n) == 0 &&
        fragments(&cx, addrs, sizes_o, offs_o, n, writable, &bufs, &sizes, &offs, &counts) == 0 &&
        (res = pcr_call_alloc(&cx, n, sizeof(*res))) != NULL) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = fn(t, keys, (void *const *const *)bufs, (const size_t *const *)sizes,
                (const uint64_t *const *)offs, counts, n, res);
        Py_END_ALLOW_THREADS
        result = rc < 0 ? pcr_raise(rc) : pcr_i64_list(res, n);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

PyObject *pcr_store_batch_get_ranges(PyObject *self, PyObject *args, PyObject *kw)
{
    return ranges_call(self, args, kw, cr_store_batch_get_ranges, true, "OOOO:batch_get_ranges");
}

PyObject *pcr_store_batch_put_ranges(PyObject *self, PyObject *args, PyObject *kw)
{
    return ranges_call(self, args, kw, cr_store_batch_put_ranges, false, "OOOO:batch_put_ranges");
}

PyObject *pcr_store_put_session_start(PyObject *obj, PyObject *args, PyObject *kw)
{
    Store *self = (Store *)obj;
    static char *kwlist[] = {"keys", "sizes", "config", NULL};
    PyObject *keys_o, *sizes_o, *config = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:put_session_start", kwlist, &keys_o, &sizes_o,
                                     &config))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const char **keys;
    size_t n, *sizes;
    int *res;
    cr_replicate_config cfg;
    PyObject *result = NULL;
    cr_store_sessions *t = sessions_of(self);
    if (t != NULL && pcr_keys(&cx, keys_o, &keys, &n) == 0 &&
        pcr_sizes(&cx, sizes_o, n, "sizes", &sizes) == 0 &&
        pcr_replicate_config(&cx, config, &cfg, NULL, self->name) == 0 &&
        (res = pcr_call_alloc(&cx, n, sizeof(*res))) != NULL) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_store_put_session_start(t, keys, (const uint64_t *)sizes, n, &cfg, res);
        Py_END_ALLOW_THREADS
        result = rc < 0 ? pcr_raise(rc) : pcr_int_list(res, n);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

PyObject *pcr_store_list_segments(PyObject *obj, PyObject *unused)
{
    Store *self = (Store *)obj;
    ENTER(self);
    char **names = NULL;
    size_t n = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_store_list_segments(self->store, &names, &n);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (rc < 0) {
        pcr_raise(rc);
    } else if ((result = PyList_New((Py_ssize_t)n)) != NULL) {
        for (size_t i = 0; i < n; i++) {
            PyObject *s = PyUnicode_DecodeUTF8(names[i], (Py_ssize_t)strlen(names[i]), "replace");
            if (s == NULL) {
                Py_CLEAR(result);
                break;
            }
            PyList_SET_ITEM(result, (Py_ssize_t)i, s);
        }
    }
    cr_store_free_names(names, n);
    LEAVE(self);
    return result;
}

/* The engine counters of the copy-once path (staging.c): copying calls whose
 * transfers named the caller's memory, and the engine's refusals of that
 * (the calls then staged). */
static int add_copy_counters(cr_engine *e, PyObject *d)
{
    cr_engine_counter c[128];
    size_t total = 0;
    int rc = cr_engine_counters(e, c, 128, &total);
    if (rc < 0) {
        pcr_raise(rc);
        return -1;
    }
    for (size_t i = 0; i < total && i < 128; i++) {
        if (strcmp(c[i].transport, "engine") != 0 || strncmp(c[i].name, "unregistered_", 13) != 0)
            continue;
        PyObject *v = PyLong_FromUnsignedLongLong(c[i].value);
        if (v == NULL || PyDict_SetItemString(d, c[i].name, v) < 0) {
            Py_XDECREF(v);
            return -1;
        }
        Py_DECREF(v);
    }
    return 0;
}

PyObject *pcr_store_engine_stats(PyObject *obj, PyObject *unused)
{
    Store *self = (Store *)obj;
    ENTER(self);
    cr_engine *e = cr_store_engine(self->store);
    PyObject *d = pcr_engine_stats_dict(e);
    if (d != NULL && add_copy_counters(e, d) < 0)
        Py_CLEAR(d);
    LEAVE(self);
    return d;
}
