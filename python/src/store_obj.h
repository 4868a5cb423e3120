/*
 * store_obj.h - the Store object's layout, shared by store.c (the type and
 * its core methods) and store_compat.c (the session methods).
 *
 * The Store owns its cr_store and, created on first use with the GIL held,
 * one cr_store_sessions table; both are destroyed together (sessions first)
 * when the Store closes, after the calls in flight have drained.
 */
#ifndef PYCRESCENT_STORE_OBJ_H
#define PYCRESCENT_STORE_OBJ_H

#include "pycrescent.h"

typedef struct {
    pcr_object base;             /* call guard and pins (common.c) */
    cr_store *store;             /* NULL once closed */
    cr_store_sessions *sessions; /* NULL until a session method runs */
    char name[256];              /* this client's segment name, for prefer_alloc_in_same_node */
    PyObject *engine_obj;        /* borrowed Engine (setup(engine=...)), or NULL */
} Store;

#define ENTER(self)                                                                                \
    do {                                                                                           \
        if (pcr_guard_enter(&(self)->base.guard, (self)->store != NULL, "store") < 0)              \
            return NULL;                                                                           \
    } while (0)
#define LEAVE(self) pcr_guard_leave(&(self)->base.guard)

/* store_compat.c: methods listed in store.c's method table. */
PyObject *pcr_store_get_session_start(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pcr_store_get_session_end(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pcr_store_batch_get_ranges(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pcr_store_put_session_start(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pcr_store_batch_put_ranges(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pcr_store_put_session_end(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pcr_store_put_session_revoke(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pcr_store_list_segments(PyObject *self, PyObject *unused);
PyObject *pcr_store_engine_stats(PyObject *self, PyObject *unused);

/* store_thin.c: thin mode (a thin client of crescent-client). */
int pcr_store_size_arg(PyObject *o, const char *what, uint64_t *out);
int pcr_store_init_thin(Store *self, const char *address, PyObject *pool, PyObject *lbs,
                        const char *secret, const char *tenant, uint32_t call_timeout_ms);
PyObject *pcr_store_pool_alloc(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pcr_store_pool_free(PyObject *self, PyObject *args, PyObject *kw);
PyObject *pcr_store_thin_stats(PyObject *self, PyObject *unused);
PyObject *pcr_store_get_is_thin(PyObject *self, void *unused);
/* store_offload.c: the disk tier's counters. */
PyObject *pcr_store_offload_stats(PyObject *self, PyObject *unused);

#define PCR_SESSION_KW     (METH_VARARGS | METH_KEYWORDS)
#define PCR_SESSION_FN(fn) ((PyCFunction)(void (*)(void))(fn))
#define PCR_STORE_SESSION_METHODS                                                                  \
    {"get_session_start", PCR_SESSION_FN(pcr_store_get_session_start), PCR_SESSION_KW,             \
     "get_session_start(keys) -> list[int]\n\nOpen a get session per key (one master call, a "     \
     "read lease held\nfor the session): 0 or a negative status per key."},                        \
        {"get_session_end", PCR_SESSION_FN(pcr_store_get_session_end), PCR_SESSION_KW,             \
         "get_session_end(keys)\n\nDrop the keys' get sessions."},                                 \
        {"batch_get_ranges", PCR_SESSION_FN(pcr_store_batch_get_ranges), PCR_SESSION_KW,           \
         "batch_get_ranges(keys, addresses, sizes, offsets) -> list[int]\n\nRead byte ranges of "  \
         "objects with open get sessions: for key i,\nsizes[i][k] bytes at offsets[i][k] into "    \
         "addresses[i][k]. Bytes read\nor a negative status per key; no master call."},            \
        {"put_session_start", PCR_SESSION_FN(pcr_store_put_session_start), PCR_SESSION_KW,         \
         "put_session_start(keys, sizes, config=None) -> list[int]\n\nAllocate objects of the "    \
         "given sizes, invisible until put_session_end."},                                         \
        {"batch_put_ranges", PCR_SESSION_FN(pcr_store_batch_put_ranges), PCR_SESSION_KW,           \
         "batch_put_ranges(keys, addresses, sizes, offsets) -> list[int]\n\nWrite byte ranges of " \
         "objects with open put sessions into every\nreplica. Bytes written or a negative status " \
         "per key."},                                                                              \
        {"put_session_end", PCR_SESSION_FN(pcr_store_put_session_end), PCR_SESSION_KW,             \
         "put_session_end(keys) -> list[int]\n\nSeal, drain and make the objects readable."},      \
        {"put_session_revoke", PCR_SESSION_FN(pcr_store_put_session_revoke), PCR_SESSION_KW,       \
         "put_session_revoke(keys) -> list[int]\n\nSeal, drain and release the objects."},         \
        {"list_segments", PCR_SESSION_FN(pcr_store_list_segments), METH_NOARGS,                    \
         "list_segments() -> list[str]\n\nNames of every segment mounted at the master."},         \
        {"engine_stats", PCR_SESSION_FN(pcr_store_engine_stats), METH_NOARGS,                      \
         "engine_stats() -> dict\n\nCounters of the store's transfer engine (Engine.stats())."},   \
        {"pool_alloc", PCR_SESSION_FN(pcr_store_pool_alloc), PCR_SESSION_KW,                       \
         "pool_alloc(size) -> int\n\nThin mode: size bytes of the pool shared with "               \
         "crescent-client\n(zero-copy for put_from / get_into); the address."},                    \
        {"pool_free", PCR_SESSION_FN(pcr_store_pool_free), PCR_SESSION_KW,                         \
         "pool_free(address)\n\nThin mode: free what pool_alloc returned."},                       \
    {                                                                                              \
        "thin_stats", PCR_SESSION_FN(pcr_store_thin_stats), METH_NOARGS,                           \
            "thin_stats() -> dict\n\nThin mode: counters (zero-copy and slow-path bytes, "         \
            "reconnects, ...)."                                                                    \
    }

#endif
