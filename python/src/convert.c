/*
 * convert.c - Python argument conversion for the crescent extension.
 *
 * Design: every converter runs with the GIL held and records what it needs
 * to keep alive (buffer views, sequence snapshots, scratch arrays) in the
 * caller's pcr_call arena, so that the C call that follows can run with the
 * GIL released while other Python threads mutate, resize or drop the
 * objects the caller passed. Sequences are snapshotted into tuples for the
 * same reason: a list mutated by another thread cannot free the key strings
 * the C call is reading.
 *
 * Type rules follow Mooncake's bindings where they exist: pointers are ints,
 * sizes are non-negative ints, keys are str (bytes also accepted), values
 * are buffer-protocol objects. In addition pointers may be given as objects
 * with data_ptr() (torch tensors) or as buffer-protocol objects, and values
 * as contiguous CPU tensors. Wrong types raise TypeError, negative numbers
 * ValueError; nothing here can crash on bad input.
 */
#include "pycrescent.h"

#include <string.h>

/* ------------------------------------------------------------------------- */
/* Arena                                                                     */
/* ------------------------------------------------------------------------- */

void pcr_call_release(pcr_call *cx)
{
    for (size_t i = 0; i < cx->n_views; i++)
        PyBuffer_Release(&cx->views[i]);
    for (size_t i = 0; i < cx->n_refs; i++)
        Py_DECREF(cx->refs[i]);
    for (size_t i = 0; i < cx->n_blocks; i++)
        PyMem_Free(cx->blocks[i]);
    PyMem_Free(cx->views);
    PyMem_Free(cx->refs);
    PyMem_Free(cx->blocks);
    memset(cx, 0, sizeof(*cx));
}

/* Grow a pointer-sized array by one slot; -1 with MemoryError. */
static int grow(void **arr, size_t *n, size_t *cap, size_t elem)
{
    if (*n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *p = PyMem_Realloc(*arr, ncap * elem);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *arr = p;
    *cap = ncap;
    return 0;
}

void *pcr_call_alloc(pcr_call *cx, size_t n, size_t size)
{
    if (grow((void **)&cx->blocks, &cx->n_blocks, &cx->cap_blocks, sizeof(void *)) < 0)
        return NULL;
    if (n == 0)
        n = 1;
    if (size != 0 && n > SIZE_MAX / size) {
        PyErr_NoMemory();
        return NULL;
    }
    void *p = PyMem_Calloc(n, size);
    if (p == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    cx->blocks[cx->n_blocks++] = p;
    return p;
}

/* Keep a new reference for the call (steals `o`). */
static int hold(pcr_call *cx, PyObject *o)
{
    if (grow((void **)&cx->refs, &cx->n_refs, &cx->cap_refs, sizeof(PyObject *)) < 0) {
        Py_DECREF(o);
        return -1;
    }
    cx->refs[cx->n_refs++] = o;
    return 0;
}

/* Get a buffer view held for the call; -1 with an exception. */
static int hold_view(pcr_call *cx, PyObject *o, int flags, Py_buffer **out)
{
    if (grow((void **)&cx->views, &cx->n_views, &cx->cap_views, sizeof(Py_buffer)) < 0)
        return -1;
    Py_buffer *v = &cx->views[cx->n_views];
    if (PyObject_GetBuffer(o, v, flags) < 0)
        return -1;
    cx->n_views++;
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Scalars                                                                   */
/* ------------------------------------------------------------------------- */

int pcr_key(pcr_call *cx, PyObject *o, const char **out)
{
    (void)cx; /* the caller keeps `o` alive (argument or snapshot item) */
    const char *s;
    Py_ssize_t n;
    if (PyUnicode_Check(o)) {
        s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s == NULL)
            return -1;
    } else if (PyBytes_Check(o)) {
        s = PyBytes_AS_STRING(o);
        n = PyBytes_GET_SIZE(o);
    } else {
        PyErr_Format(PyExc_TypeError, "key must be str, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    if ((size_t)n != strlen(s)) {
        PyErr_SetString(PyExc_ValueError, "key contains a NUL character");
        return -1;
    }
    *out = s;
    return 0;
}

int pcr_seq(pcr_call *cx, PyObject *seq, const char *what, PyObject **tuple, size_t *n)
{
    if (seq == NULL || seq == Py_None || PyUnicode_Check(seq) || PyBytes_Check(seq) ||
        !PySequence_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list, not %.100s", what,
                     seq ? Py_TYPE(seq)->tp_name : "NULL");
        return -1;
    }
    PyObject *t = PySequence_Tuple(seq);
    if (t == NULL || hold(cx, t) < 0)
        return -1;
    *tuple = t;
    *n = (size_t)PyTuple_GET_SIZE(t);
    return 0;
}

int pcr_keys(pcr_call *cx, PyObject *seq, const char ***out, size_t *n)
{
    PyObject *t;
    if (pcr_seq(cx, seq, "keys", &t, n) < 0)
        return -1;
    const char **keys = pcr_call_alloc(cx, *n, sizeof(*keys));
    if (keys == NULL)
        return -1;
    for (size_t i = 0; i < *n; i++)
        if (pcr_key(cx, PyTuple_GET_ITEM(t, (Py_ssize_t)i), &keys[i]) < 0)
            return -1;
    *out = keys;
    return 0;
}

/* Convert a Python int to uint64 with a clear error; -1 with an exception. */
static int to_u64(PyObject *o, const char *what, uint64_t *out)
{
    if (PyBool_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(o);
    if (i == NULL)
        return -1;
    int overflow = 0;
    long long sv = PyLong_AsLongLongAndOverflow(i, &overflow);
    if (sv == -1 && PyErr_Occurred()) {
        Py_DECREF(i);
        return -1;
    }
    if (overflow < 0 || (overflow == 0 && sv < 0)) {
        Py_DECREF(i);
        PyErr_Format(PyExc_ValueError, "%s must not be negative", what);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(i);
    Py_DECREF(i);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_OverflowError, "%s is too large", what);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

int pcr_size(PyObject *o, const char *what, size_t *out)
{
    uint64_t v;
    if (to_u64(o, what, &v) < 0)
        return -1;
    if (v > (uint64_t)SIZE_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s is too large", what);
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

/* o.name into *v (new reference), or *v = NULL if there is no such attribute. */
static int opt_attr(PyObject *o, const char *name, PyObject **v)
{
    *v = PyObject_GetAttrString(o, name);
    if (*v != NULL)
        return 0;
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
        return -1;
    PyErr_Clear();
    return 0;
}

/* Call o.data_ptr() if o has it: 1 found (*out set), 0 absent, -1 error. */
static int tensor_ptr(PyObject *o, uint64_t *out)
{
    if (PyLong_Check(o) || PyObject_CheckBuffer(o) || PyIndex_Check(o))
        return 0;
    PyObject *m = NULL;
    if (opt_attr(o, "data_ptr", &m) < 0)
        return -1;
    if (m == NULL)
        return 0;
    PyObject *r = PyObject_CallNoArgs(m);
    Py_DECREF(m);
    if (r == NULL)
        return -1;
    int rc = to_u64(r, "data_ptr()", out);
    Py_DECREF(r);
    return rc < 0 ? -1 : 1;
}

int pcr_buffer_like(PyObject *o)
{
    if (PyLong_Check(o) || !PyObject_CheckBuffer(o))
        return 0;
    if (!PyIndex_Check(o))
        return 1;
    /* numpy integer scalars and 0-d arrays export a buffer but mean a number. */
    Py_buffer v;
    if (PyObject_GetBuffer(o, &v, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        return 0;
    }
    int nd = v.ndim;
    PyBuffer_Release(&v);
    return nd > 0;
}

int pcr_ptr(pcr_call *cx, PyObject *o, bool writable, bool allow_null, const char *what, void **out)
{
    if (o == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s must be an address (int), not None", what);
        return -1;
    }
    uint64_t v;
    int t = tensor_ptr(o, &v);
    if (t < 0)
        return -1;
    if (t == 0 && pcr_buffer_like(o)) {
        Py_buffer *view;
        int flags = PyBUF_ANY_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
        if (hold_view(cx, o, flags, &view) < 0)
            return -1;
        *out = view->buf;
        return 0;
    }
    if (t == 0 && to_u64(o, what, &v) < 0)
        return -1;
    if (v > (uint64_t)UINTPTR_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s is not an address", what);
        return -1;
    }
    if (v == 0 && !allow_null) {
        PyErr_Format(PyExc_ValueError, "%s is a null pointer", what);
        return -1;
    }
    *out = (void *)(uintptr_t)v;
    return 0;
}

/* A sequence snapshot of exactly n entries (one per key); ValueError otherwise. */
static int seq_of_len(pcr_call *cx, PyObject *seq, size_t n, const char *what, PyObject **tuple)
{
    size_t m;
    if (pcr_seq(cx, seq, what, tuple, &m) < 0)
        return -1;
    if (m != n) {
        PyErr_Format(PyExc_ValueError, "%s has %zu entries for %zu keys", what, m, n);
        return -1;
    }
    return 0;
}

int pcr_ptrs(pcr_call *cx, PyObject *seq, size_t n, bool writable, const char *what, void ***out)
{
    PyObject *t;
    if (seq_of_len(cx, seq, n, what, &t) < 0)
        return -1;
    void **p = pcr_call_alloc(cx, n, sizeof(*p));
    if (p == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (pcr_ptr(cx, PyTuple_GET_ITEM(t, (Py_ssize_t)i), writable, true, what, &p[i]) < 0)
            return -1;
    *out = p;
    return 0;
}

int pcr_sizes(pcr_call *cx, PyObject *seq, size_t n, const char *what, size_t **out)
{
    PyObject *t;
    if (seq_of_len(cx, seq, n, what, &t) < 0)
        return -1;
    size_t *s = pcr_call_alloc(cx, n, sizeof(*s));
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (pcr_size(PyTuple_GET_ITEM(t, (Py_ssize_t)i), what, &s[i]) < 0)
            return -1;
    *out = s;
    return 0;
}

/* A contiguous CPU tensor's (data_ptr, nbytes): 1 found, 0 not a tensor, -1 error. */
static int tensor_value(PyObject *o, const void **ptr, size_t *len)
{
    if (PyObject_CheckBuffer(o) || !PyObject_HasAttrString(o, "data_ptr") ||
        !PyObject_HasAttrString(o, "element_size") || !PyObject_HasAttrString(o, "numel"))
        return 0;
    PyObject *dev = PyObject_GetAttrString(o, "is_cuda");
    if (dev == NULL)
        PyErr_Clear();
    else {
        int cuda = PyObject_IsTrue(dev);
        Py_DECREF(dev);
        if (cuda) {
            PyErr_SetString(PyExc_TypeError, "value is a CUDA tensor; pass a CPU tensor");
            return -1;
        }
    }
    PyObject *c = PyObject_CallMethod(o, "is_contiguous", NULL);
    if (c == NULL)
        return -1;
    int contiguous = PyObject_IsTrue(c);
    Py_DECREF(c);
    if (!contiguous) {
        PyErr_SetString(PyExc_ValueError, "value tensor is not contiguous");
        return -1;
    }
    uint64_t addr, esize, numel;
    PyObject *r = PyObject_CallMethod(o, "data_ptr", NULL);
    int rc = r ? to_u64(r, "data_ptr()", &addr) : -1;
    Py_XDECREF(r);
    if (rc == 0) {
        r = PyObject_CallMethod(o, "element_size", NULL);
        rc = r ? to_u64(r, "element_size()", &esize) : -1;
        Py_XDECREF(r);
    }
    if (rc == 0) {
        r = PyObject_CallMethod(o, "numel", NULL);
        rc = r ? to_u64(r, "numel()", &numel) : -1;
        Py_XDECREF(r);
    }
    if (rc < 0)
        return -1;
    if (numel != 0 && esize > SIZE_MAX / numel) {
        PyErr_SetString(PyExc_OverflowError, "tensor is too large");
        return -1;
    }
    *ptr = (const void *)(uintptr_t)addr;
    *len = (size_t)(esize * numel);
    if (*ptr == NULL && *len > 0) {
        PyErr_SetString(PyExc_ValueError, "tensor has no storage");
        return -1;
    }
    return 1;
}

int pcr_value(pcr_call *cx, PyObject *o, const void **ptr, size_t *len)
{
    if (PyUnicode_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "value must be a bytes-like object, not str");
        return -1;
    }
    if (PyObject_CheckBuffer(o)) {
        Py_buffer *view;
        if (hold_view(cx, o, PyBUF_C_CONTIGUOUS, &view) < 0)
            return -1;
        *ptr = view->buf;
        *len = (size_t)view->len;
        return 0;
    }
    int t = tensor_value(o, ptr, len);
    if (t < 0)
        return -1;
    if (t == 0) {
        PyErr_Format(PyExc_TypeError, "value must be a bytes-like object or a tensor, not %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    return 0;
}

int pcr_opt_str(PyObject *o, const char *what, const char **out)
{
    if (o == NULL || o == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be str, not %.100s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    const char *s = PyUnicode_AsUTF8(o);
    if (s == NULL)
        return -1;
    *out = s;
    return 0;
}

int pcr_conv_str(PyObject *o, void *out)
{
    return pcr_opt_str(o, "argument", out) == 0;
}

int pcr_conv_u32(PyObject *o, void *out)
{
    size_t v;
    if (pcr_size(o, "argument", &v) < 0)
        return 0;
    if (v > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "argument is too large");
        return 0;
    }
    *(uint32_t *)out = (uint32_t)v;
    return 1;
}

/* ------------------------------------------------------------------------- */
/* ReplicateConfig                                                           */
/* ------------------------------------------------------------------------- */

/* Fetch attribute `name` of `o` into a held reference; *v NULL if absent. */
static int cfg_attr(pcr_call *cx, PyObject *o, const char *name, PyObject **v)
{
    *v = NULL;
    if (opt_attr(o, name, v) < 0)
        return -1;
    if (*v != NULL && hold(cx, *v) < 0)
        return -1;
    return 0;
}

static int cfg_bool(pcr_call *cx, PyObject *o, const char *name, bool *out)
{
    PyObject *v;
    if (cfg_attr(cx, o, name, &v) < 0)
        return -1;
    if (v == NULL || v == Py_None)
        return 0;
    int b = PyObject_IsTrue(v);
    if (b < 0)
        return -1;
    *out = b != 0;
    return 0;
}

static int cfg_u64(pcr_call *cx, PyObject *o, const char *name, uint64_t *out, bool *present)
{
    PyObject *v;
    if (present)
        *present = false;
    if (cfg_attr(cx, o, name, &v) < 0)
        return -1;
    if (v == NULL || v == Py_None)
        return 0;
    char what[96];
    snprintf(what, sizeof(what), "ReplicateConfig.%s", name);
    if (to_u64(v, what, out) < 0)
        return -1;
    if (present)
        *present = true;
    return 0;
}

/* Append the str items of list attribute `name` to segs. */
static int cfg_segments(pcr_call *cx, PyObject *o, const char *name, const char **segs, size_t cap,
                        size_t *n)
{
    PyObject *v;
    if (cfg_attr(cx, o, name, &v) < 0)
        return -1;
    if (v == NULL || v == Py_None)
        return 0;
    if (PyUnicode_Check(v)) {
        if (PyUnicode_GET_LENGTH(v) == 0)
            return 0;
        if (*n < cap && pcr_opt_str(v, name, &segs[*n]) < 0)
            return -1;
        (*n)++;
        return 0;
    }
    PyObject *t;
    size_t m;
    if (pcr_seq(cx, v, name, &t, &m) < 0)
        return -1;
    for (size_t i = 0; i < m && *n < cap; i++) {
        PyObject *item = PyTuple_GET_ITEM(t, (Py_ssize_t)i);
        if (!PyUnicode_Check(item)) {
            PyErr_Format(PyExc_TypeError, "ReplicateConfig.%s items must be str", name);
            return -1;
        }
        if (pcr_opt_str(item, name, &segs[*n]) < 0)
            return -1;
        (*n)++;
    }
    return 0;
}

#define MAX_PREFERRED 64

int pcr_replicate_config(pcr_call *cx, PyObject *o, cr_replicate_config *cfg, bool *given,
                         const char *self_segment)
{
    cr_replicate_config_init(cfg);
    if (given)
        *given = false;
    if (o == NULL || o == Py_None)
        return 0;
    if (PyLong_Check(o) || PyUnicode_Check(o) || PyBytes_Check(o) || PyList_Check(o)) {
        PyErr_Format(PyExc_TypeError, "config must be a ReplicateConfig, not %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if (given)
        *given = true;
    uint64_t u = 1;
    if (cfg_u64(cx, o, "replica_num", &u, NULL) < 0)
        return -1;
    if (u > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "ReplicateConfig.replica_num is too large");
        return -1;
    }
    cfg->replica_num = (uint32_t)u;
    if (cfg_bool(cx, o, "with_hard_pin", &cfg->hard_pin) < 0)
        return -1;
    uint64_t action = CR_SOFT_PIN_PRESERVE;
    if (cfg_u64(cx, o, "soft_pin_action", &action, NULL) < 0)
        return -1;
    if (action > CR_SOFT_PIN_DISABLE) {
        PyErr_Format(PyExc_ValueError,
                     "ReplicateConfig.soft_pin_action %llu is not a "
                     "SoftPinAction",
                     (unsigned long long)action);
        return -1;
    }
    cfg->soft_pin_action = (int)action;
    if (cfg_u64(cx, o, "soft_pin_ttl_ms", &cfg->soft_pin_ttl_ms, &cfg->has_soft_pin_ttl) < 0)
        return -1;
    if (cfg_bool(cx, o, "prefer_alloc_in_same_node", &cfg->prefer_same_node) < 0)
        return -1;
    const char **segs = pcr_call_alloc(cx, MAX_PREFERRED, sizeof(*segs));
    if (segs == NULL)
        return -1;
    size_t n = 0;
    /* A non-empty deprecated preferred_segment wins over preferred_segments. */
    if (cfg_segments(cx, o, "preferred_segment", segs, MAX_PREFERRED, &n) < 0)
        return -1;
    if (n == 0 && cfg_segments(cx, o, "preferred_segments", segs, MAX_PREFERRED, &n) < 0)
        return -1;
    /* The master places by preferred segments only, so "same node" is expressed as
     * "this client's own segment first". */
    if (n == 0 && cfg->prefer_same_node && self_segment != NULL && self_segment[0] != '\0')
        segs[n++] = self_segment;
    cfg->preferred_segments = segs;
    cfg->n_preferred = n < MAX_PREFERRED ? n : MAX_PREFERRED;
    return 0;
}
