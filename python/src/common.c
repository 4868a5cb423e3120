/*
 * common.c - what Engine (engine.c) and Store (store.c) share: the object
 * lifecycle (new / close / dealloc / context manager), the registration of
 * buffer objects with their pins, and the building of method results.
 *
 * Design: both types start with a pcr_object (call guard + pins dict) and
 * keep their own C object pointer beside it, so these helpers take the C
 * object and its destructor as arguments and never need to know which type
 * they serve. Everything here runs with the GIL held; pcr_object_close()
 * releases it only around the drain and the C destructor.
 */
#include "pycrescent.h"

/* ------------------------------------------------------------------------- */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------- */

PyObject *pcr_object_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    pcr_object *self = (pcr_object *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    atomic_init(&self->guard.inflight, 0);
    self->pins = PyDict_New();
    if (self->pins == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

bool pcr_object_close(pcr_object *o, void *c_obj, void (*destroy)(void *c_obj))
{
    /* A second close() while the first is draining returns at once. */
    if (c_obj == NULL || o->guard.closing)
        return false;
    o->guard.closing = true;
    Py_BEGIN_ALLOW_THREADS
    pcr_guard_drain(&o->guard);
    destroy(c_obj);
    Py_END_ALLOW_THREADS
    return true;
}

void pcr_object_free(pcr_object *o)
{
    Py_XDECREF(o->pins);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

PyObject *pcr_object_enter(pcr_object *o, bool open, const char *what)
{
    if (pcr_guard_enter(&o->guard, open, what) < 0)
        return NULL;
    pcr_guard_leave(&o->guard);
    return Py_NewRef((PyObject *)o);
}

PyObject *pcr_exit_result(PyObject *close_result)
{
    if (close_result == NULL)
        return NULL;
    Py_DECREF(close_result);
    Py_RETURN_FALSE;
}

/* ------------------------------------------------------------------------- */
/* Registration and pins                                                     */
/* ------------------------------------------------------------------------- */

/* The memory of a buffer object as a contiguous memoryview (new reference). */
static PyObject *contiguous_view(PyObject *addr, void **p, size_t *n)
{
    PyObject *mv = PyMemoryView_FromObject(addr);
    if (mv == NULL)
        return NULL;
    Py_buffer *view = PyMemoryView_GET_BUFFER(mv);
    if (!PyBuffer_IsContiguous(view, 'A')) {
        Py_DECREF(mv);
        PyErr_SetString(PyExc_ValueError, "buffer is not contiguous");
        return NULL;
    }
    *p = view->buf;
    *n = (size_t)view->len;
    return mv;
}

int pcr_buffer_arg(pcr_call *cx, PyObject *addr, PyObject *length, const char *what, void **p,
                   size_t *n, PyObject **pin)
{
    *pin = NULL;
    bool have_length = length != NULL && length != Py_None;
    if (pcr_buffer_like(addr)) {
        PyObject *mv = contiguous_view(addr, p, n);
        if (mv == NULL)
            return -1;
        if (have_length) {
            size_t want;
            if (pcr_size(length, what, &want) < 0) {
                Py_DECREF(mv);
                return -1;
            }
            if (want > *n) {
                Py_DECREF(mv);
                PyErr_Format(PyExc_ValueError, "%s %zu exceeds the buffer's %zu bytes", what, want,
                             *n);
                return -1;
            }
            *n = want;
        }
        *pin = mv;
        return 0;
    }
    if (pcr_ptr(cx, addr, false, false, "address", p) < 0)
        return -1;
    if (!have_length) {
        PyErr_Format(PyExc_TypeError, "%s is required when the address is an int", what);
        return -1;
    }
    return pcr_size(length, what, n);
}

int pcr_pin(pcr_object *o, void *addr, PyObject *mv)
{
    if (mv == NULL)
        return 0;
    PyObject *key = PyLong_FromVoidPtr(addr);
    int rc = key ? PyDict_SetItem(o->pins, key, mv) : -1;
    Py_XDECREF(key);
    return rc;
}

void pcr_unpin(pcr_object *o, void *addr)
{
    PyObject *key = PyLong_FromVoidPtr(addr);
    if (key == NULL) {
        PyErr_Clear();
        return;
    }
    if (PyDict_DelItem(o->pins, key) < 0)
        PyErr_Clear();
    Py_DECREF(key);
}

/* ------------------------------------------------------------------------- */
/* Results                                                                   */
/* ------------------------------------------------------------------------- */

PyObject *pcr_call_finish(pcr_call *cx, pcr_object *o, PyObject *result)
{
    pcr_call_release(cx);
    pcr_guard_leave(&o->guard);
    return result;
}

PyObject *pcr_none_or_raise(int64_t rc)
{
    return rc < 0 ? pcr_raise(rc) : Py_NewRef(Py_None);
}

PyObject *pcr_int_or_raise(int64_t rc)
{
    return rc < 0 ? pcr_raise(rc) : PyLong_FromLongLong(rc);
}

PyObject *pcr_list_build(size_t n, PyObject *(*make)(const void *items, size_t i),
                         const void *items)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        PyObject *item = make(items, i);
        if (item == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

static PyObject *int_item(const void *items, size_t i)
{
    return PyLong_FromLong(((const int *)items)[i]);
}

static PyObject *i64_item(const void *items, size_t i)
{
    return PyLong_FromLongLong(((const int64_t *)items)[i]);
}

PyObject *pcr_int_list(const int *v, size_t n)
{
    return pcr_list_build(n, int_item, v);
}

PyObject *pcr_i64_list(const int64_t *v, size_t n)
{
    return pcr_list_build(n, i64_item, v);
}
