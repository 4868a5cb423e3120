/*
 * module.c - the crescent._crescent module: exception classes, the
 * BufferHandle type, module-level helpers (status names, shareable memory,
 * size parsing, raw memory copies) and the status constants.
 *
 * Design: exceptions are created here and shared by engine.c and store.c
 * through pcr_raise(). CrescentError derives from RuntimeError so code
 * written against Mooncake's bindings (which raise RuntimeError) still
 * catches it; NotFoundError additionally derives from KeyError. The status
 * constants and the name table come from CR_STATUS_TABLE in the public
 * header, so they cannot drift from the C library.
 *
 * BufferHandle owns a malloc'd copy of a value (from cr_store_get /
 * cr_store_batch_get) and exposes it through the buffer protocol
 * (writable, one-dimensional, bytes); memoryviews keep the handle alive, so
 * the memory is freed only when the last view and the handle are gone.
 */
#include "pycrescent.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>

PyObject *pcr_CrescentError;
PyObject *pcr_NotFoundError;

/* ------------------------------------------------------------------------- */
/* Errors                                                                    */
/* ------------------------------------------------------------------------- */

static PyObject *raise_text(int64_t status, const char *text)
{
    int code = status < INT32_MIN ? CR_INTERNAL_ERROR : (int)status;
    PyObject *cls = code == CR_OBJECT_NOT_FOUND ? pcr_NotFoundError : pcr_CrescentError;
    const char *name = cr_status_name(code);
    PyObject *msg = text != NULL && text[0] != '\0'
                        ? PyUnicode_FromFormat("%s (%d)", text, code)
                        : PyUnicode_FromFormat("%s (%d): %s", name, code, cr_strerror(code));
    if (msg == NULL)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(cls, msg);
    Py_DECREF(msg);
    if (exc == NULL)
        return NULL;
    PyObject *pycode = PyLong_FromLong(code);
    PyObject *pyname = PyUnicode_FromString(name);
    PyObject *pytext = PyUnicode_FromString(text ? text : "");
    if (pycode == NULL || pyname == NULL || pytext == NULL ||
        PyObject_SetAttrString(exc, "code", pycode) < 0 ||
        PyObject_SetAttrString(exc, "name", pyname) < 0 ||
        PyObject_SetAttrString(exc, "detail", pytext) < 0) {
        Py_XDECREF(pycode);
        Py_XDECREF(pyname);
        Py_XDECREF(pytext);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(pycode);
    Py_DECREF(pyname);
    Py_DECREF(pytext);
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *pcr_raise(int64_t status)
{
    return raise_text(status, cr_last_error_message());
}

PyObject *pcr_raise_msg(int64_t status, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return raise_text(status, text);
}

/* ------------------------------------------------------------------------- */
/* Call guard                                                                */
/* ------------------------------------------------------------------------- */

int pcr_guard_enter(pcr_guard *g, bool open, const char *what)
{
    if (!open || g->closing) {
        pcr_raise_msg(CR_UNAVAILABLE_IN_CURRENT_STATUS, "%s is closed", what);
        return -1;
    }
    atomic_fetch_add(&g->inflight, 1);
    return 0;
}

void pcr_guard_leave(pcr_guard *g)
{
    atomic_fetch_sub(&g->inflight, 1);
}

void pcr_guard_drain(pcr_guard *g)
{
    while (atomic_load(&g->inflight) > 0) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* ------------------------------------------------------------------------- */
/* BufferHandle                                                              */
/* ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD void *data;
    size_t size;
} BufferHandle;

PyObject *pcr_buffer_handle_new(void *data, size_t size)
{
    BufferHandle *h = PyObject_New(BufferHandle, &pcr_BufferHandleType);
    if (h == NULL) {
        free(data);
        return NULL;
    }
    h->data = data;
    h->size = size;
    return (PyObject *)h;
}

static void bh_dealloc(BufferHandle *h)
{
    free(h->data);
    PyObject_Free(h);
}

static int bh_getbuffer(BufferHandle *h, Py_buffer *view, int flags)
{
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)h, h->data ? h->data : empty, (Py_ssize_t)h->size, 0,
                             flags);
}

static PyObject *bh_ptr(BufferHandle *h, PyObject *unused)
{
    return PyLong_FromVoidPtr(h->data);
}

static PyObject *bh_size(BufferHandle *h, PyObject *unused)
{
    return PyLong_FromSize_t(h->size);
}

static PyObject *bh_tobytes(BufferHandle *h, PyObject *unused)
{
    return PyBytes_FromStringAndSize(h->data, (Py_ssize_t)h->size);
}

static Py_ssize_t bh_len(BufferHandle *h)
{
    return (Py_ssize_t)h->size;
}

static PyObject *bh_repr(BufferHandle *h)
{
    return PyUnicode_FromFormat("<BufferHandle ptr=%p size=%zu>", h->data, h->size);
}

static PyBufferProcs bh_as_buffer = {(getbufferproc)bh_getbuffer, NULL};
static PySequenceMethods bh_as_sequence = {.sq_length = (lenfunc)bh_len};

static PyMethodDef bh_methods[] = {
    {"ptr", (PyCFunction)bh_ptr, METH_NOARGS, "Address of the first byte (int)."},
    {"size", (PyCFunction)bh_size, METH_NOARGS, "Number of bytes."},
    {"tobytes", (PyCFunction)bh_tobytes, METH_NOARGS, "A bytes copy of the contents."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject pcr_BufferHandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "crescent.BufferHandle",
    .tp_basicsize = sizeof(BufferHandle),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes of one value read from the store, owned by this object.\n\n"
              "Supports the buffer protocol (memoryview(h), numpy.frombuffer(h),\n"
              "torch.frombuffer(h)); ptr() and size() give the address and length. The\n"
              "memory is freed when the handle and every view of it are gone.",
    .tp_dealloc = (destructor)bh_dealloc,
    .tp_repr = (reprfunc)bh_repr,
    .tp_as_buffer = &bh_as_buffer,
    .tp_as_sequence = &bh_as_sequence,
    .tp_methods = bh_methods,
};

/* ------------------------------------------------------------------------- */
/* Module functions                                                          */
/* ------------------------------------------------------------------------- */

static PyObject *m_status_name(PyObject *mod, PyObject *arg)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(cr_status_name((int)v));
}

static PyObject *m_strerror(PyObject *mod, PyObject *arg)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(cr_strerror((int)v));
}

static PyObject *m_parse_size(PyObject *mod, PyObject *arg)
{
    if (PyLong_Check(arg) && !PyBool_Check(arg)) {
        size_t v;
        if (pcr_size(arg, "size", &v) < 0)
            return NULL;
        return PyLong_FromSize_t(v);
    }
    const char *text;
    if (pcr_opt_str(arg, "size", &text) < 0 || text == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "size must be str or int, not None");
        return NULL;
    }
    uint64_t out = 0;
    int rc = cr_parse_size(text, &out);
    if (rc < 0)
        return pcr_raise(rc);
    return PyLong_FromUnsignedLongLong(out);
}

static PyObject *m_alloc_shared(PyObject *mod, PyObject *arg)
{
    size_t size;
    if (pcr_size(arg, "size", &size) < 0)
        return NULL;
    void *p = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_alloc_shared(size, &p);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return pcr_raise(rc);
    return PyLong_FromVoidPtr(p);
}

static PyObject *m_free_shared(PyObject *mod, PyObject *arg)
{
    pcr_call cx = PCR_CALL_INIT;
    void *p;
    if (pcr_ptr(&cx, arg, false, true, "ptr", &p) < 0) {
        pcr_call_release(&cx);
        return NULL;
    }
    pcr_call_release(&cx);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_free_shared(p);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return pcr_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *m_read_memory(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "read_memory(address, length) takes 2 arguments");
        return NULL;
    }
    pcr_call cx = PCR_CALL_INIT;
    void *p;
    size_t n;
    PyObject *r = NULL;
    if (pcr_ptr(&cx, args[0], false, false, "address", &p) == 0 &&
        pcr_size(args[1], "length", &n) == 0)
        r = PyBytes_FromStringAndSize(p, (Py_ssize_t)n);
    pcr_call_release(&cx);
    return r;
}

static PyObject *m_write_memory(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "write_memory(address, data, length) takes 3 arguments");
        return NULL;
    }
    pcr_call cx = PCR_CALL_INIT;
    void *dst;
    const void *src;
    size_t len, n;
    PyObject *r = NULL;
    if (pcr_ptr(&cx, args[0], true, false, "address", &dst) == 0 &&
        pcr_value(&cx, args[1], &src, &len) == 0 && pcr_size(args[2], "length", &n) == 0) {
        if (n > len) {
            PyErr_Format(PyExc_ValueError, "length %zu exceeds the %zu bytes of data", n, len);
        } else {
            memmove(dst, src, n);
            r = Py_NewRef(Py_None);
        }
    }
    pcr_call_release(&cx);
    return r;
}

static PyObject *m_last_error_message(PyObject *mod, PyObject *unused)
{
    return PyUnicode_FromString(cr_last_error_message());
}

static PyMethodDef module_methods[] = {
    {"status_name", m_status_name, METH_O,
     "status_name(code) -> str\n\nSymbolic name of a status code, e.g. 'OBJECT_NOT_FOUND'."},
    {"strerror", m_strerror, METH_O, "strerror(code) -> str\n\nOne-line description of a code."},
    {"parse_size", m_parse_size, METH_O,
     "parse_size(text) -> int\n\nParse '16MB', '4 GiB', '1048576' (binary multiples)."},
    {"alloc_shared", m_alloc_shared, METH_O,
     "alloc_shared(size) -> int\n\nAllocate zeroed shareable host memory (memfd-backed, "
     "2 MiB aligned);\nreturns its address. Free with free_shared()."},
    {"free_shared", m_free_shared, METH_O,
     "free_shared(address)\n\nFree memory from alloc_shared (after unregistering it)."},
    {"read_memory", (PyCFunction)(void (*)(void))m_read_memory, METH_FASTCALL,
     "read_memory(address, length) -> bytes\n\nCopy raw process memory (no validation)."},
    {"write_memory", (PyCFunction)(void (*)(void))m_write_memory, METH_FASTCALL,
     "write_memory(address, data, length)\n\nCopy `length` bytes of `data` to raw memory "
     "(no validation)."},
    {"last_error_message", m_last_error_message, METH_NOARGS,
     "last_error_message() -> str\n\nDetails of this thread's last failed crescent call."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "crescent._crescent",
    .m_doc = "Native bindings of crescent's transfer engine and KV store (C API wrapper).",
    .m_size = -1,
    .m_methods = module_methods,
};

static int add_type(PyObject *m, PyTypeObject *t, const char *name)
{
    if (PyType_Ready(t) < 0)
        return -1;
    Py_INCREF(t);
    if (PyModule_AddObject(m, name, (PyObject *)t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

static int add_statuses(PyObject *m)
{
    PyObject *names = PyDict_New();
    if (names == NULL)
        return -1;
#define PCR_ADD_STATUS_(name, value, msg)                                                          \
    do {                                                                                           \
        PyObject *v_ = PyLong_FromLong(value);                                                     \
        int rc_ = v_ ? PyDict_SetItemString(names, #name, v_) : -1;                                \
        Py_XDECREF(v_);                                                                            \
        if (rc_ < 0 || PyModule_AddIntConstant(m, #name, value) < 0) {                             \
            Py_DECREF(names);                                                                      \
            return -1;                                                                             \
        }                                                                                          \
    } while (0);
    CR_STATUS_TABLE(PCR_ADD_STATUS_)
#undef PCR_ADD_STATUS_
    if (PyModule_AddObject(m, "STATUS_CODES", names) < 0) {
        Py_DECREF(names);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__crescent(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    PyObject *dict = Py_BuildValue("{s:s}", "__doc__",
                                   "A crescent call failed.\n\nAttributes: code (int, negative "
                                   "status), name (str, e.g. 'RPC_FAIL'),\ndetail (str, what "
                                   "failed and where).");
    if (dict == NULL)
        goto fail;
    pcr_CrescentError = PyErr_NewException("crescent.CrescentError", PyExc_RuntimeError, dict);
    Py_DECREF(dict);
    if (pcr_CrescentError == NULL)
        goto fail;
    PyObject *bases = PyTuple_Pack(2, pcr_CrescentError, PyExc_KeyError);
    if (bases == NULL)
        goto fail;
    pcr_NotFoundError = PyErr_NewExceptionWithDoc(
        "crescent.NotFoundError", "The key does not exist (OBJECT_NOT_FOUND, -704).", bases, NULL);
    Py_DECREF(bases);
    if (pcr_NotFoundError == NULL)
        goto fail;
    Py_INCREF(pcr_CrescentError);
    Py_INCREF(pcr_NotFoundError);
    if (PyModule_AddObject(m, "CrescentError", pcr_CrescentError) < 0 ||
        PyModule_AddObject(m, "NotFoundError", pcr_NotFoundError) < 0)
        goto fail;
    if (add_type(m, &pcr_BufferHandleType, "BufferHandle") < 0 ||
        add_type(m, &pcr_EngineType, "Engine") < 0 || add_type(m, &pcr_StoreType, "Store") < 0)
        goto fail;
    if (add_statuses(m) < 0 || PyModule_AddIntConstant(m, "OP_READ", CR_OP_READ) < 0 ||
        PyModule_AddIntConstant(m, "OP_WRITE", CR_OP_WRITE) < 0 ||
        PyModule_AddIntConstant(m, "TASK_WAITING", CR_TASK_WAITING) < 0 ||
        PyModule_AddIntConstant(m, "TASK_PENDING", CR_TASK_PENDING) < 0 ||
        PyModule_AddIntConstant(m, "TASK_INVALID", CR_TASK_INVALID) < 0 ||
        PyModule_AddIntConstant(m, "TASK_CANCELED", CR_TASK_CANCELED) < 0 ||
        PyModule_AddIntConstant(m, "TASK_COMPLETED", CR_TASK_COMPLETED) < 0 ||
        PyModule_AddIntConstant(m, "TASK_TIMEOUT", CR_TASK_TIMEOUT) < 0 ||
        PyModule_AddIntConstant(m, "TASK_FAILED", CR_TASK_FAILED) < 0 ||
        PyModule_AddIntConstant(m, "SOFT_PIN_PRESERVE", CR_SOFT_PIN_PRESERVE) < 0 ||
        PyModule_AddIntConstant(m, "SOFT_PIN_ENABLE", CR_SOFT_PIN_ENABLE) < 0 ||
        PyModule_AddIntConstant(m, "SOFT_PIN_DISABLE", CR_SOFT_PIN_DISABLE) < 0 ||
        PyModule_AddIntConstant(m, "MAX_KEY", CR_STORE_MAX_KEY) < 0 ||
        PyModule_AddIntConstant(m, "NOTIFY_MAX_MESSAGE", CR_NOTIFY_MAX_MESSAGE) < 0)
        goto fail;
    return m;

fail:
    Py_DECREF(m);
    return NULL;
}
