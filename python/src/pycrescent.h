/*
 * pycrescent.h - shared declarations of the crescent CPython extension
 * (crescent._crescent).
 *
 * Design: the extension is a thin, GIL-releasing layer over the public C API
 * (crescent/engine.h, crescent/store.h); it calls only exported cr_*
 * functions. Every method converts its Python arguments into C values first
 * (with the GIL held), then releases the GIL for the one blocking C call,
 * then builds the Python result. Arguments that must stay alive while the GIL
 * is released (key strings, value buffers, list snapshots) are owned by a
 * per-call `pcr_call` arena that is released when the method returns, so no
 * Python object is touched while other threads run.
 *
 * Errors: a failing C call raises crescent.CrescentError (a RuntimeError)
 * carrying .code, .name and the message from cr_last_error_message(); a miss
 * (CR_OBJECT_NOT_FOUND) raises its subclass crescent.NotFoundError, which is
 * also a KeyError. Batch methods return one int per key instead of raising.
 *
 * Lifetime: Engine and Store objects count the calls in flight; close()
 * refuses new calls and waits (without the GIL) for the running ones before
 * destroying the C object, so closing from one thread while others are
 * inside a call is safe.
 */
#ifndef PYCRESCENT_H
#define PYCRESCENT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crescent/engine.h"
#include "crescent/status.h"
#include "crescent/store.h"

/* --- errors (module.c) ----------------------------------------------------- */

extern PyObject *pcr_CrescentError;
extern PyObject *pcr_NotFoundError;

/* Raise the CrescentError (or NotFoundError) for a negative status; the
 * message is cr_last_error_message() of the calling thread. Returns NULL. */
PyObject *pcr_raise(int64_t status);
/* Same, with an explicit message. */
PyObject *pcr_raise_msg(int64_t status, const char *fmt, ...);

/* --- per-call argument arena (convert.c) ------------------------------------ */

typedef struct pcr_call {
    Py_buffer *views; /* buffers held for the duration of the call */
    size_t n_views, cap_views;
    PyObject **refs; /* new references held for the call */
    size_t n_refs, cap_refs;
    void **blocks; /* malloc'd scratch arrays */
    size_t n_blocks, cap_blocks;
} pcr_call;

#define PCR_CALL_INIT                                                                              \
    {                                                                                              \
        0                                                                                          \
    }

/* Release everything the call holds. Needs the GIL. */
void pcr_call_release(pcr_call *cx);
/* Scratch memory owned by the call (zeroed); NULL with MemoryError set. */
void *pcr_call_alloc(pcr_call *cx, size_t n, size_t size);

/* A key: str (UTF-8) or bytes; no NUL inside; the pointer lives as long as cx. */
int pcr_key(pcr_call *cx, PyObject *o, const char **out);
/* A sequence of keys; *n is its length. */
int pcr_keys(pcr_call *cx, PyObject *seq, const char ***out, size_t *n);
/* A sequence snapshot (tuple) owned by cx; items stay alive for the call. */
int pcr_seq(pcr_call *cx, PyObject *seq, const char *what, PyObject **tuple, size_t *n);

/*
 * A memory address: an int (>= 0; 0 only if allow_null, which call sites
 * whose C function validates addresses against registrations pass), an
 * object with a
 * data_ptr() method (torch.Tensor), or a buffer-protocol object (held for
 * the call; writable if `writable`). None and other types raise TypeError.
 */
int pcr_ptr(pcr_call *cx, PyObject *o, bool writable, bool allow_null, const char *what,
            void **out);
/* 1 if `o` is a buffer object meant as memory (not an int-like numpy scalar). */
int pcr_buffer_like(PyObject *o);
/* A size: a non-negative int (TypeError / ValueError otherwise). */
int pcr_size(PyObject *o, const char *what, size_t *out);
/* Sequences of addresses (0 allowed: the C API validates every address
 * against its registrations before touching memory) / sizes of length `n`
 * (ValueError if different). */
int pcr_ptrs(pcr_call *cx, PyObject *seq, size_t n, bool writable, const char *what, void ***out);
int pcr_sizes(pcr_call *cx, PyObject *seq, size_t n, const char *what, size_t **out);

/*
 * A value to copy from: a C-contiguous buffer-protocol object (bytes,
 * bytearray, memoryview, numpy array) or a contiguous CPU tensor (through
 * data_ptr(), nbytes). str and other types raise TypeError.
 */
int pcr_value(pcr_call *cx, PyObject *o, const void **ptr, size_t *len);

/* A replicate config: None, or any object with Mooncake's ReplicateConfig
 * attribute names (missing attributes keep their defaults). Strings of
 * preferred segments live as long as cx. prefer_alloc_in_same_node without
 * preferred segments makes `self_segment` (the caller's own segment name,
 * may be NULL) the preferred segment. */
int pcr_replicate_config(pcr_call *cx, PyObject *o, cr_replicate_config *cfg, bool *given,
                         const char *self_segment);

/* Optional string keyword (None allowed). */
int pcr_opt_str(PyObject *o, const char *what, const char **out);

/* PyArg_Parse "O&" converters (1 on success, 0 with an exception): an
 * optional str into `const char *` (pcr_opt_str), a size into uint32_t. */
int pcr_conv_str(PyObject *o, void *out);
int pcr_conv_u32(PyObject *o, void *out);

/* --- types ------------------------------------------------------------------ */

extern PyTypeObject pcr_EngineType;

/*
 * A Store may run on an Engine's cr_engine (setup(engine=...)). Borrowing
 * takes a strong reference and makes the Engine refuse close() until the
 * Store releases it. pcr_engine_borrow returns NULL with an exception set if
 * o is not an open Engine.
 */
cr_engine *pcr_engine_borrow(PyObject *o);
/* cr_engine_get_stats as a dict (Engine.stats(), Store.engine_stats()); NULL with an exception. */
PyObject *pcr_engine_stats_dict(cr_engine *engine);
void pcr_engine_release(PyObject *o);
extern PyTypeObject pcr_StoreType;
extern PyTypeObject pcr_BufferHandleType;

/* Wrap malloc'd memory (taken over; freed with free()) as a BufferHandle. */
PyObject *pcr_buffer_handle_new(void *data, size_t size);

/* Calls in flight on an Engine or Store; see the lifetime note above. */
typedef struct pcr_guard {
    atomic_int inflight;
    bool closing; /* written with the GIL held */
} pcr_guard;

/* Enter a call: 0, or -1 with CrescentError set when closed. GIL held. */
int pcr_guard_enter(pcr_guard *g, bool open, const char *what);
void pcr_guard_leave(pcr_guard *g);
/* Mark closing and wait for the calls in flight; call with the GIL released. */
void pcr_guard_drain(pcr_guard *g);

/* --- Engine / Store common parts (common.c) ---------------------------------- */

/*
 * The head of an Engine or a Store: the call guard and the pinned buffer
 * objects. Each type embeds it first and adds its own C object pointer
 * (NULL once closed). All pcr_object_* and pin helpers need the GIL, except
 * where a helper says it releases it.
 */
typedef struct pcr_object {
    PyObject_HEAD pcr_guard guard;
    PyObject *pins; /* {address: memoryview} for registered buffer objects */
} pcr_object;

/* tp_new of Engine and Store: a closed object with an empty pins dict. */
PyObject *pcr_object_new(PyTypeObject *type, PyObject *args, PyObject *kw);
/*
 * Close `c_obj`, the C object owned by `o`: refuse new calls, wait for the
 * ones in flight and destroy it with `destroy`, both with the GIL released.
 * Returns false, doing nothing, if `c_obj` is NULL (closed) or another
 * close() is already draining. On true the caller forgets `c_obj` and
 * clears o->pins.
 */
bool pcr_object_close(pcr_object *o, void *c_obj, void (*destroy)(void *c_obj));
/* tp_dealloc tail, after the type closed its C object: drop pins, free `o`. */
void pcr_object_free(pcr_object *o);
/* __enter__: `o` (new reference), or CrescentError if it is closed. */
PyObject *pcr_object_enter(pcr_object *o, bool open, const char *what);
/* __exit__ from the result of close(): NULL stays NULL, else False. Steals. */
PyObject *pcr_exit_result(PyObject *close_result);

/*
 * Resolve (address, length) of one buffer to register. A buffer-protocol
 * object yields its memory and length (length may then be None or smaller)
 * and a new memoryview in *pin to keep while registered; an int address
 * (held in cx) requires the length and sets *pin = NULL. `what` names the
 * length argument in errors ("length", "size").
 */
int pcr_buffer_arg(pcr_call *cx, PyObject *addr, PyObject *length, const char *what, void **p,
                   size_t *n, PyObject **pin);
/* Keep `mv` (a pin from pcr_buffer_arg; NULL: none) in o->pins under addr
 * (the dict takes its own reference). 0, or -1 with an exception. */
int pcr_pin(pcr_object *o, void *addr, PyObject *mv);
/* Forget the pin of addr, if any. Never raises. */
void pcr_unpin(pcr_object *o, void *addr);

/* End a guarded method: release cx, leave o's guard, pass `result` through. */
PyObject *pcr_call_finish(pcr_call *cx, pcr_object *o, PyObject *result);

/* A C status as a method result: None, or the raised error (NULL) if < 0. */
PyObject *pcr_none_or_raise(int64_t rc);
/* A C count or size as a method result: an int, or the raised error if < 0. */
PyObject *pcr_int_or_raise(int64_t rc);
/* A new list of n items, item i made by make(items, i) (a new reference);
 * NULL with an exception if the list or any item fails. */
PyObject *pcr_list_build(size_t n, PyObject *(*make)(const void *items, size_t i),
                         const void *items);
/* Per-key batch results as a list of ints (new reference, NULL on error). */
PyObject *pcr_int_list(const int *v, size_t n);
PyObject *pcr_i64_list(const int64_t *v, size_t n);

#endif /* PYCRESCENT_H */
