/*
 * engine.c - crescent._crescent.Engine: the transfer engine (cr_engine).
 *
 * Design: one Python object owns one cr_engine. Methods mirror the C API
 * (register / open_segment / batches / synchronous transfers /
 * notifications / probe / stats) and raise CrescentError on failure.
 * Segments may be given as a handle (int) or a name (str, opened on the
 * fly; the engine returns the same handle for the same name). Addresses are
 * ints, tensors (data_ptr()) or buffer-protocol objects; a buffer object
 * passed to register() is pinned (a memoryview is kept) until it is
 * unregistered, so Python cannot free or resize memory the engine may
 * still touch.
 *
 * Every blocking C call runs with the GIL released; close() waits for the
 * calls in flight (see pcr_guard in pycrescent.h). The lifecycle, pins and
 * result lists shared with Store live in common.c.
 */
#include "pycrescent.h"

#include <string.h>

typedef struct {
    pcr_object base;   /* call guard and pins (common.c) */
    cr_engine *engine; /* NULL once closed */
    int borrowers;     /* Stores running on this engine (GIL-protected) */
} Engine;

#define ENTER(self)                                                                                \
    do {                                                                                           \
        if (pcr_guard_enter(&(self)->base.guard, (self)->engine != NULL, "engine") < 0)            \
            return NULL;                                                                           \
    } while (0)
#define LEAVE(self) pcr_guard_leave(&(self)->base.guard)

/* O& converters for keyword parsing (see also pcr_conv_str / pcr_conv_u32). */
static int conv_u16(PyObject *o, void *out)
{
    uint32_t v;
    if (!pcr_conv_u32(o, &v))
        return 0;
    if (v > 65535) {
        PyErr_SetString(PyExc_OverflowError, "port is larger than 65535");
        return 0;
    }
    *(uint16_t *)out = (uint16_t)v;
    return 1;
}

static int conv_u64(PyObject *o, void *out)
{
    size_t v;
    if (pcr_size(o, "argument", &v) < 0)
        return 0;
    *(uint64_t *)out = (uint64_t)v;
    return 1;
}

static int conv_int(PyObject *o, void *out)
{
    if (PyBool_Check(o) || !PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "expected an int, not %.100s", Py_TYPE(o)->tp_name);
        return 0;
    }
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return 0;
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "value does not fit in 32 bits");
        return 0;
    }
    *(int *)out = (int)v;
    return 1;
}

static int conv_opcode(PyObject *o, void *out)
{
    int v;
    if (!conv_int(o, &v))
        return 0;
    if (v != CR_OP_READ && v != CR_OP_WRITE) {
        PyErr_Format(PyExc_ValueError, "opcode %d is neither OP_READ (0) nor OP_WRITE (1)", v);
        return 0;
    }
    *(int *)out = v;
    return 1;
}

/* ------------------------------------------------------------------------- */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------- */

static int engine_init(Engine *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"local_hostname",     "metadata",
                             "protocol",           "rpc_port",
                             "metadata_prefix",    "worker_threads",
                             "lanes_per_peer",     "slice_size",
                             "connect_timeout_ms", "request_timeout_ms",
                             "shared_secret",      "shm_allow_any_user",
                             "disable_cma",        NULL};
    if (self->engine != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Engine is already initialised");
        return -1;
    }
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    int any_user = 0, no_cma = 0;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "|O&O&O&O&$O&O&O&O&O&O&O&pp:Engine", kwlist, pcr_conv_str,
            &cfg.local_hostname, pcr_conv_str, &cfg.metadata, pcr_conv_str, &cfg.protocol, conv_u16,
            &cfg.rpc_port, pcr_conv_str, &cfg.metadata_prefix, pcr_conv_u32, &cfg.worker_threads,
            pcr_conv_u32, &cfg.lanes_per_peer, conv_u64, &cfg.slice_size, pcr_conv_u32,
            &cfg.connect_timeout_ms, pcr_conv_u32, &cfg.request_timeout_ms, pcr_conv_str,
            &cfg.shared_secret, &any_user, &no_cma))
        return -1;
    cr_engine_config d;
    cr_engine_config_init(&d);
    if (cfg.local_hostname == NULL)
        cfg.local_hostname = d.local_hostname;
    if (cfg.metadata == NULL)
        cfg.metadata = d.metadata;
    if (cfg.protocol == NULL)
        cfg.protocol = d.protocol;
    if (cfg.metadata_prefix == NULL)
        cfg.metadata_prefix = d.metadata_prefix;
    cfg.shm_allow_any_user = any_user != 0;
    cfg.disable_cma = no_cma != 0;
    cr_engine *e = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_engine_create(&cfg, &e);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        pcr_raise(rc);
        return -1;
    }
    self->engine = e;
    self->base.guard.closing = false;
    return 0;
}

static void destroy_engine(void *engine)
{
    cr_engine_destroy(engine);
}

static void engine_shutdown(Engine *self)
{
    if (!pcr_object_close(&self->base, self->engine, destroy_engine))
        return;
    self->engine = NULL;
    PyDict_Clear(self->base.pins);
}

static void engine_dealloc(Engine *self)
{
    engine_shutdown(self);
    pcr_object_free(&self->base);
}

static PyObject *engine_close(Engine *self, PyObject *unused)
{
    if (self->borrowers > 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "engine is in use by a store (setup(engine=...)); close the store first");
        return NULL;
    }
    engine_shutdown(self);
    Py_RETURN_NONE;
}

cr_engine *pcr_engine_borrow(PyObject *o)
{
    if (!PyObject_TypeCheck(o, &pcr_EngineType)) {
        PyErr_Format(PyExc_TypeError, "engine must be a crescent Engine, not %.100s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    Engine *e = (Engine *)o;
    if (e->engine == NULL || e->base.guard.closing) {
        PyErr_SetString(PyExc_RuntimeError, "engine is closed");
        return NULL;
    }
    e->borrowers++;
    Py_INCREF(o);
    return e->engine;
}

void pcr_engine_release(PyObject *o)
{
    if (o == NULL)
        return;
    ((Engine *)o)->borrowers--;
    Py_DECREF(o);
}

static PyObject *engine_enter(Engine *self, PyObject *unused)
{
    return pcr_object_enter(&self->base, self->engine != NULL, "engine");
}

static PyObject *engine_exit(Engine *self, PyObject *args)
{
    return pcr_exit_result(engine_close(self, NULL));
}

static PyObject *engine_get_closed(Engine *self, void *unused)
{
    return PyBool_FromLong(self->engine == NULL);
}

static PyObject *engine_get_segment_name(Engine *self, void *unused)
{
    ENTER(self);
    char buf[512];
    int rc = cr_engine_segment_name(self->engine, buf, sizeof(buf));
    LEAVE(self);
    if (rc < 0)
        return pcr_raise(rc);
    return PyUnicode_FromString(buf);
}

static PyObject *engine_get_rpc_port(Engine *self, void *unused)
{
    ENTER(self);
    unsigned port = cr_engine_rpc_port(self->engine);
    LEAVE(self);
    return PyLong_FromUnsignedLong(port);
}

/* ------------------------------------------------------------------------- */
/* Registration                                                              */
/* ------------------------------------------------------------------------- */

static PyObject *engine_register(Engine *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"address", "length", "location", "remote_accessible", NULL};
    PyObject *addr, *length = Py_None;
    const char *location = NULL;
    int remote = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO&p:register", kwlist, &addr, &length,
                                     pcr_conv_str, &location, &remote))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    void *p;
    size_t n;
    PyObject *mv = NULL, *result = NULL;
    if (pcr_buffer_arg(&cx, addr, length, "length", &p, &n, &mv) == 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_engine_register(self->engine, p, n, location, remote != 0);
        Py_END_ALLOW_THREADS
        if (rc < 0)
            pcr_raise(rc);
        else if (pcr_pin(&self->base, p, mv) == 0)
            result = PyLong_FromVoidPtr(p);
    }
    Py_XDECREF(mv);
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *engine_register_batch(Engine *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffers", "location", "remote_accessible", NULL};
    PyObject *seq;
    const char *location = NULL;
    int remote = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O&p:register_batch", kwlist, &seq, pcr_conv_str,
                                     &location, &remote))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    PyObject *t, *result = NULL, *mvs = NULL;
    size_t n;
    cr_buffer_spec *specs = NULL;
    if (pcr_seq(&cx, seq, "buffers", &t, &n) < 0 ||
        (specs = pcr_call_alloc(&cx, n, sizeof(*specs))) == NULL || (mvs = PyList_New(0)) == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(t, (Py_ssize_t)i), *a, *l = Py_None, *mv;
        if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2) {
            a = PyTuple_GET_ITEM(item, 0);
            l = PyTuple_GET_ITEM(item, 1);
        } else {
            a = item;
        }
        if (pcr_buffer_arg(&cx, a, l, "length", &specs[i].addr, &specs[i].length, &mv) < 0)
            goto out;
        specs[i].location = location;
        specs[i].remote_accessible = remote != 0;
        PyObject *pair =
            Py_BuildValue("(NO)", PyLong_FromVoidPtr(specs[i].addr), mv ? mv : Py_None);
        Py_XDECREF(mv);
        if (pair == NULL || PyList_Append(mvs, pair) < 0) {
            Py_XDECREF(pair);
            goto out;
        }
        Py_DECREF(pair);
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_engine_register_batch(self->engine, specs, n);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        pcr_raise(rc);
        goto out;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(mvs); i++) {
        PyObject *pair = PyList_GET_ITEM(mvs, i);
        PyObject *mv = PyTuple_GET_ITEM(pair, 1);
        if (mv != Py_None && PyDict_SetItem(self->base.pins, PyTuple_GET_ITEM(pair, 0), mv) < 0)
            goto out;
    }
    result = Py_NewRef(Py_None);
out:
    Py_XDECREF(mvs);
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *engine_unregister(Engine *self, PyObject *arg)
{
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    void *p;
    PyObject *result = NULL;
    if (pcr_ptr(&cx, arg, false, true, "address", &p) == 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_engine_unregister(self->engine, p);
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

static PyObject *engine_unregister_batch(Engine *self, PyObject *arg)
{
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    PyObject *t, *result = NULL;
    size_t n;
    void **addrs = NULL;
    if (pcr_seq(&cx, arg, "addresses", &t, &n) == 0 &&
        (addrs = pcr_call_alloc(&cx, n, sizeof(*addrs))) != NULL) {
        size_t i = 0;
        for (; i < n; i++)
            if (pcr_ptr(&cx, PyTuple_GET_ITEM(t, (Py_ssize_t)i), false, true, "address",
                        &addrs[i]) < 0)
                break;
        if (i == n) {
            int rc;
            Py_BEGIN_ALLOW_THREADS
            rc = cr_engine_unregister_batch(self->engine, addrs, n);
            Py_END_ALLOW_THREADS
            /* Every address is attempted even when one fails: unpin them all. */
            for (i = 0; i < n; i++)
                pcr_unpin(&self->base, addrs[i]);
            result = pcr_none_or_raise(rc);
        }
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *engine_registration_count(Engine *self, PyObject *unused)
{
    ENTER(self);
    size_t n = cr_engine_registration_count(self->engine);
    LEAVE(self);
    return PyLong_FromSize_t(n);
}

/* ------------------------------------------------------------------------- */
/* Segments and transfers                                                    */
/* ------------------------------------------------------------------------- */

/* A segment handle from an int handle or a str name (opened; GIL released). */
static int segment_arg(Engine *self, PyObject *o, cr_segment_handle *out)
{
    if (PyUnicode_Check(o)) {
        const char *name = PyUnicode_AsUTF8(o);
        if (name == NULL)
            return -1;
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_engine_open_segment(self->engine, name, out);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            pcr_raise(rc);
            return -1;
        }
        return 0;
    }
    size_t v;
    if (pcr_size(o, "segment", &v) < 0)
        return -1;
    *out = (cr_segment_handle)v;
    return 0;
}

static PyObject *engine_open_segment(Engine *self, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "segment name must be str, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    ENTER(self);
    cr_segment_handle h = 0;
    int rc = segment_arg(self, arg, &h);
    LEAVE(self);
    return rc < 0 ? NULL : PyLong_FromUnsignedLongLong(h);
}

static PyObject *engine_close_segment(Engine *self, PyObject *arg)
{
    size_t h;
    if (pcr_size(arg, "segment", &h) < 0)
        return NULL;
    ENTER(self);
    int rc = cr_engine_close_segment(self->engine, (cr_segment_handle)h);
    LEAVE(self);
    return pcr_none_or_raise(rc);
}

/* (address, length, kind, device, remote_accessible) of cr_buffer_info[i]. */
static PyObject *buffer_info_item(const void *items, size_t i)
{
    const cr_buffer_info *b = &((const cr_buffer_info *)items)[i];
    return Py_BuildValue("(KKiiO)", (unsigned long long)b->addr, (unsigned long long)b->length,
                         b->kind, b->device, b->remote_accessible ? Py_True : Py_False);
}

/* segment_buffers(handle) -> [(address, length, kind, device, remote_accessible)] */
static PyObject *engine_segment_buffers(Engine *self, PyObject *arg)
{
    size_t h;
    if (pcr_size(arg, "segment", &h) < 0)
        return NULL;
    ENTER(self);
    size_t total = 0;
    cr_buffer_info *info = NULL;
    int rc = cr_engine_segment_buffers(self->engine, (cr_segment_handle)h, NULL, 0, &total);
    if (rc == 0 && total > 0) {
        info = PyMem_Calloc(total, sizeof(*info));
        rc = info == NULL ? CR_ERR_NO_MEMORY
                          : cr_engine_segment_buffers(self->engine, (cr_segment_handle)h, info,
                                                      total, &total);
    }
    LEAVE(self);
    if (rc < 0) {
        PyMem_Free(info);
        return pcr_raise(rc);
    }
    PyObject *list = pcr_list_build(total, buffer_info_item, info);
    PyMem_Free(info);
    return list;
}

static PyObject *engine_transfer_sync(Engine *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"opcode", "local_address", "segment", "remote_address",
                             "length", "timeout_ms",    NULL};
    int op, timeout = 0;
    PyObject *local, *seg, *remote, *length;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&OOOO|O&:transfer_sync", kwlist, conv_opcode, &op,
                                     &local, &seg, &remote, &length, conv_int, &timeout))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    void *lp;
    size_t raddr, len;
    cr_segment_handle h;
    PyObject *result = NULL;
    if (pcr_ptr(&cx, local, op == CR_OP_READ, true, "local_address", &lp) == 0 &&
        pcr_size(remote, "remote_address", &raddr) == 0 && pcr_size(length, "length", &len) == 0 &&
        segment_arg(self, seg, &h) == 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_engine_transfer_sync(self->engine, op, lp, h, raddr, len, timeout);
        Py_END_ALLOW_THREADS
        result = pcr_none_or_raise(rc);
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *engine_transfer_sync_batch(Engine *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {
        "opcode", "segment", "local_addresses", "remote_addresses", "lengths", "timeout_ms", NULL};
    int op, timeout = 0;
    PyObject *seg, *locals, *remotes, *lengths;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&OOOO|O&:transfer_sync_batch", kwlist, conv_opcode,
                                     &op, &seg, &locals, &remotes, &lengths, conv_int, &timeout))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    PyObject *t, *result = NULL;
    size_t n;
    void **lp;
    size_t *ra, *lens;
    cr_segment_handle h;
    if (pcr_seq(&cx, locals, "local_addresses", &t, &n) == 0 &&
        pcr_ptrs(&cx, t, n, op == CR_OP_READ, "local_addresses", &lp) == 0 &&
        pcr_sizes(&cx, remotes, n, "remote_addresses", &ra) == 0 &&
        pcr_sizes(&cx, lengths, n, "lengths", &lens) == 0 && segment_arg(self, seg, &h) == 0) {
        uint64_t *ra64 = pcr_call_alloc(&cx, n, sizeof(uint64_t));
        uint64_t *len64 = pcr_call_alloc(&cx, n, sizeof(uint64_t));
        if (ra64 != NULL && len64 != NULL) {
            for (size_t i = 0; i < n; i++) {
                ra64[i] = ra[i];
                len64[i] = lens[i];
            }
            int rc;
            Py_BEGIN_ALLOW_THREADS
            rc = cr_engine_transfer_sync_batch(self->engine, op, h, lp, ra64, len64, n, timeout);
            Py_END_ALLOW_THREADS
            result = pcr_none_or_raise(rc);
        }
    }
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *engine_batch_create(Engine *self, PyObject *arg)
{
    size_t cap;
    if (pcr_size(arg, "capacity", &cap) < 0)
        return NULL;
    ENTER(self);
    cr_batch_id b = 0;
    int rc = cr_batch_create(self->engine, cap, &b);
    LEAVE(self);
    return rc < 0 ? pcr_raise(rc) : PyLong_FromUnsignedLongLong(b);
}

static PyObject *engine_batch_submit(Engine *self, PyObject *args)
{
    PyObject *batch, *reqs;
    if (!PyArg_ParseTuple(args, "OO:batch_submit", &batch, &reqs))
        return NULL;
    size_t b;
    if (pcr_size(batch, "batch", &b) < 0)
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    PyObject *t, *result = NULL;
    size_t n;
    cr_transfer_request *rq = NULL;
    if (pcr_seq(&cx, reqs, "requests", &t, &n) < 0 ||
        (rq = pcr_call_alloc(&cx, n, sizeof(*rq))) == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(t, (Py_ssize_t)i);
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 5) {
            PyErr_SetString(PyExc_TypeError, "each request is a tuple (opcode, local_address, "
                                             "segment, remote_address, length)");
            goto out;
        }
        size_t ra, len;
        if (!conv_opcode(PyTuple_GET_ITEM(it, 0), &rq[i].opcode) ||
            pcr_ptr(&cx, PyTuple_GET_ITEM(it, 1), rq[i].opcode == CR_OP_READ, true, "local_address",
                    &rq[i].local_addr) < 0 ||
            segment_arg(self, PyTuple_GET_ITEM(it, 2), &rq[i].segment) < 0 ||
            pcr_size(PyTuple_GET_ITEM(it, 3), "remote_address", &ra) < 0 ||
            pcr_size(PyTuple_GET_ITEM(it, 4), "length", &len) < 0)
            goto out;
        rq[i].remote_addr = ra;
        rq[i].length = len;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_batch_submit(self->engine, (cr_batch_id)b, rq, n);
    Py_END_ALLOW_THREADS
    result = pcr_none_or_raise(rc);
out:
    return pcr_call_finish(&cx, &self->base, result);
}

static PyObject *engine_batch_task_status(Engine *self, PyObject *args)
{
    unsigned long long b;
    Py_ssize_t idx;
    if (!PyArg_ParseTuple(args, "Kn:batch_task_status", &b, &idx))
        return NULL;
    if (idx < 0) {
        PyErr_SetString(PyExc_ValueError, "index must not be negative");
        return NULL;
    }
    ENTER(self);
    cr_task_status st;
    int rc = cr_batch_task_status(self->engine, (cr_batch_id)b, (size_t)idx, &st);
    LEAVE(self);
    if (rc < 0)
        return pcr_raise(rc);
    return Py_BuildValue("(iiK)", st.state, st.error, (unsigned long long)st.transferred_bytes);
}

static PyObject *engine_batch_wait(Engine *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"batch", "timeout_ms", NULL};
    uint64_t b;
    int timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|O&:batch_wait", kwlist, conv_u64, &b, conv_int,
                                     &timeout))
        return NULL;
    ENTER(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_batch_wait(self->engine, (cr_batch_id)b, timeout);
    Py_END_ALLOW_THREADS
    LEAVE(self);
    return pcr_none_or_raise(rc);
}

static PyObject *batch_simple(Engine *self, PyObject *arg, int (*fn)(cr_engine *, cr_batch_id))
{
    size_t b;
    if (pcr_size(arg, "batch", &b) < 0)
        return NULL;
    ENTER(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fn(self->engine, (cr_batch_id)b);
    Py_END_ALLOW_THREADS
    LEAVE(self);
    return pcr_none_or_raise(rc);
}

static PyObject *engine_batch_cancel(Engine *self, PyObject *arg)
{
    return batch_simple(self, arg, cr_batch_cancel);
}

static PyObject *engine_batch_free(Engine *self, PyObject *arg)
{
    return batch_simple(self, arg, cr_batch_free);
}

/* ------------------------------------------------------------------------- */
/* Notifications, probe, stats                                               */
/* ------------------------------------------------------------------------- */

static PyObject *engine_notify(Engine *self, PyObject *args)
{
    PyObject *seg, *msg;
    if (!PyArg_ParseTuple(args, "OO:notify", &seg, &msg))
        return NULL;
    ENTER(self);
    pcr_call cx = PCR_CALL_INIT;
    const void *p;
    size_t n;
    cr_segment_handle h;
    PyObject *result = NULL;
    if (PyUnicode_Check(msg)) {
        Py_ssize_t sn;
        p = PyUnicode_AsUTF8AndSize(msg, &sn);
        n = (size_t)sn;
        if (p == NULL)
            goto out;
    } else if (pcr_value(&cx, msg, &p, &n) < 0) {
        goto out;
    }
    if (segment_arg(self, seg, &h) == 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = cr_engine_notify(self->engine, h, p, n);
        Py_END_ALLOW_THREADS
        result = pcr_none_or_raise(rc);
    }
out:
    return pcr_call_finish(&cx, &self->base, result);
}

/* (sender, message) of cr_notification[i]. */
static PyObject *notification_item(const void *items, size_t i)
{
    const cr_notification *m = &((const cr_notification *)items)[i];
    return Py_BuildValue("(sy#)", m->from, m->message, (Py_ssize_t)m->length);
}

static PyObject *engine_take_notifications(Engine *self, PyObject *unused)
{
    ENTER(self);
    cr_notification *list = NULL;
    size_t n = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_engine_take_notifications(self->engine, &list, &n);
    Py_END_ALLOW_THREADS
    LEAVE(self);
    if (rc < 0)
        return pcr_raise(rc);
    PyObject *out = pcr_list_build(n, notification_item, list);
    cr_notifications_free(list, n);
    return out;
}

static PyObject *engine_probe(Engine *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "timeout_ms", NULL};
    const char *name;
    int timeout = 1000;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|O&:probe", kwlist, &name, conv_int, &timeout))
        return NULL;
    ENTER(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cr_engine_probe(self->engine, name, timeout);
    Py_END_ALLOW_THREADS
    LEAVE(self);
    return pcr_none_or_raise(rc);
}

/* Every transport's generic counters as "<transport>_<name>" ("ucx_bytes",
 * "tcp_requests", ...), beside the fixed fields; -1 with an exception set. */
static int add_transport_counters(cr_engine *engine, PyObject *d)
{
    size_t total = 0;
    int rc = cr_engine_counters(engine, NULL, 0, &total);
    if (rc < 0) {
        pcr_raise(rc);
        return -1;
    }
    if (total == 0)
        return 0;
    cr_engine_counter *c = PyMem_Calloc(total, sizeof(*c));
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t n = 0;
    rc = cr_engine_counters(engine, c, total, &n);
    if (rc < 0) {
        PyMem_Free(c);
        pcr_raise(rc);
        return -1;
    }
    int ret = 0;
    for (size_t i = 0; i < n && i < total && ret == 0; i++) {
        if (strcmp(c[i].transport, "engine") == 0)
            continue; /* the engine's own are the fixed fields */
        char key[96];
        snprintf(key, sizeof(key), "%s_%s", c[i].transport, c[i].name);
        PyObject *v = PyLong_FromUnsignedLongLong((unsigned long long)c[i].value);
        if (v == NULL || PyDict_SetItemString(d, key, v) < 0)
            ret = -1;
        Py_XDECREF(v);
    }
    PyMem_Free(c);
    return ret;
}

PyObject *pcr_engine_stats_dict(cr_engine *engine)
{
    cr_engine_stats st;
    int rc = cr_engine_get_stats(engine, &st);
    if (rc < 0)
        return pcr_raise(rc);
    PyObject *d = Py_BuildValue(
        "{sKsKsKsKsKsKsKsKsKsKsK}", "tasks_completed", (unsigned long long)st.tasks_completed,
        "tasks_failed", (unsigned long long)st.tasks_failed, "bytes_local",
        (unsigned long long)st.bytes_local, "bytes_shm", (unsigned long long)st.bytes_shm,
        "bytes_cma", (unsigned long long)st.bytes_cma, "bytes_tcp",
        (unsigned long long)st.bytes_tcp, "bytes_served", (unsigned long long)st.bytes_served,
        "tcp_connects", (unsigned long long)st.tcp_connects, "descriptor_fetches",
        (unsigned long long)st.descriptor_fetches, "shm_mappings",
        (unsigned long long)st.shm_mappings, "transport_fallbacks",
        (unsigned long long)st.transport_fallbacks);
    if (d == NULL || add_transport_counters(engine, d) < 0) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *engine_stats(Engine *self, PyObject *unused)
{
    ENTER(self);
    PyObject *d = pcr_engine_stats_dict(self->engine);
    LEAVE(self);
    return d;
}

/* ------------------------------------------------------------------------- */
/* Type                                                                      */
/* ------------------------------------------------------------------------- */

#define KW    (METH_VARARGS | METH_KEYWORDS)
#define F(fn) ((PyCFunction)(void (*)(void))(fn))

static PyMethodDef engine_methods[] = {
    {"close", F(engine_close), METH_NOARGS,
     "close()\n\nStop the engine (waits for calls in flight). Idempotent."},
    {"__enter__", F(engine_enter), METH_NOARGS, NULL},
    {"__exit__", F(engine_exit), METH_VARARGS, NULL},
    {"register", F(engine_register), KW,
     "register(address, length=None, location='*', remote_accessible=True) -> int\n\n"
     "Register memory for transfers. `address` is an int (then `length` is\n"
     "required) or a buffer object, which stays pinned until unregister().\n"
     "Returns the registered address."},
    {"register_batch", F(engine_register_batch), KW,
     "register_batch(buffers, location='*', remote_accessible=True)\n\n"
     "Register [(address, length) or buffer, ...] atomically (all or none)."},
    {"unregister", F(engine_unregister), METH_O,
     "unregister(address)\n\nUnregister the buffer starting at `address` (waits for the\n"
     "transfers using it)."},
    {"unregister_batch", F(engine_unregister_batch), METH_O,
     "unregister_batch(addresses)\n\nUnregister each address; raises the first failure."},
    {"registration_count", F(engine_registration_count), METH_NOARGS,
     "registration_count() -> int"},
    {"open_segment", F(engine_open_segment), METH_O,
     "open_segment(name) -> int\n\nOpen a peer segment ('host:port') and return its handle."},
    {"close_segment", F(engine_close_segment), METH_O, "close_segment(handle)"},
    {"segment_buffers", F(engine_segment_buffers), METH_O,
     "segment_buffers(handle) -> [(address, length, kind, device, remote_accessible)], in "
     "address order"},
    {"transfer_sync", F(engine_transfer_sync), KW,
     "transfer_sync(opcode, local_address, segment, remote_address, length, timeout_ms=0)\n\n"
     "One blocking READ (remote -> local) or WRITE (local -> remote). `segment` is\n"
     "a handle or a name. Raises CrescentError on failure."},
    {"transfer_sync_batch", F(engine_transfer_sync_batch), KW,
     "transfer_sync_batch(opcode, segment, local_addresses, remote_addresses, lengths,\n"
     "                    timeout_ms=0)\n\nBlocking batch of one opcode to one segment."},
    {"batch_create", F(engine_batch_create), METH_O, "batch_create(capacity) -> int batch id"},
    {"batch_submit", F(engine_batch_submit), METH_VARARGS,
     "batch_submit(batch, requests)\n\nStart [(opcode, local_address, segment, remote_address,\n"
     "length), ...] asynchronously (all validated first; none start on error)."},
    {"batch_task_status", F(engine_batch_task_status), METH_VARARGS,
     "batch_task_status(batch, index) -> (state, error, transferred_bytes)"},
    {"batch_wait", F(engine_batch_wait), KW,
     "batch_wait(batch, timeout_ms=-1)\n\nBlock until every task finished; raises the first "
     "failure\n(ERR_TIMEOUT if the wait itself timed out)."},
    {"batch_cancel", F(engine_batch_cancel), METH_O, "batch_cancel(batch)"},
    {"batch_free", F(engine_batch_free), METH_O, "batch_free(batch)"},
    {"notify", F(engine_notify), METH_VARARGS,
     "notify(segment, message)\n\nDeliver a short message (bytes or str) to the peer."},
    {"take_notifications", F(engine_take_notifications), METH_NOARGS,
     "take_notifications() -> list[tuple[str, bytes]]\n\nDrain (sender, message) pairs."},
    {"probe", F(engine_probe), KW,
     "probe(name, timeout_ms=1000)\n\nRaise unless the engine at `name` answers."},
    {"stats", F(engine_stats), METH_NOARGS, "stats() -> dict of monotonic counters"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef engine_getset[] = {
    {"segment_name", (getter)engine_get_segment_name, NULL,
     "This engine's segment name ('host:rpc_port' in P2P mode).", NULL},
    {"rpc_port", (getter)engine_get_rpc_port, NULL, "The RPC port the engine listens on.", NULL},
    {"closed", (getter)engine_get_closed, NULL, "True after close().", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pcr_EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "crescent.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Engine(local_hostname='127.0.0.1', metadata='P2PHANDSHAKE', protocol='auto',\n"
              "       rpc_port=0, *, metadata_prefix=None, worker_threads=0,\n"
              "       lanes_per_peer=0, slice_size=0, connect_timeout_ms=0,\n"
              "       request_timeout_ms=0, shared_secret=None, shm_allow_any_user=False,\n"
              "       disable_cma=False)\n\n"
              "crescent's transfer engine: one-sided READ/WRITE between registered memory\n"
              "of processes and hosts. protocol is 'tcp', 'shm' or 'auto'. Thread-safe;\n"
              "a context manager (close() on exit).",
    .tp_new = pcr_object_new,
    .tp_init = (initproc)engine_init,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_methods = engine_methods,
    .tp_getset = engine_getset,
};
