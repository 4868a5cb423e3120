/*
 * fake_cuda.c - a stand-in for libcuda.so.1 that runs without a GPU, so the
 * engine's device paths (registration, CUDA IPC across processes, copy
 * engine paths, tcp staging) run in CI. Loaded with
 * CRESCENT_CUDA_DRIVER=<path to libcrescent_fakecuda.so>. It models what
 * matters to the engine's logic, not CUDA's performance:
 *
 *   - device memory is a memfd mapped twice: at the "device address" with
 *     PROT_NONE (so any CPU access by the engine crashes the test, as it
 *     would fault on a real GPU) and at a private shadow address the fake's
 *     copy engine uses;
 *   - contexts are per thread: calls that need one (allocation, copies,
 *     streams, IPC opens) fail with CUDA_ERROR_INVALID_CONTEXT on a thread
 *     that never set one (seed 000: short-lived pool threads have none);
 *   - streams run their work on their own thread, in order, so events,
 *     host functions and "completion = the event fired" are asynchronous
 *     as on a GPU (FAKE_CUDA_COPY_DELAY_US slows every copy down);
 *   - legacy IPC handles carry (pid, memfd number): the importer opens
 *     /proc/<pid>/fd/<n>; VMM allocations export a dup of their memfd;
 *   - two "kernels" (crescent_fill, crescent_check) stand for the GPU
 *     tests' PTX checksum kernels.
 *
 * FAKE_CUDA_DEVICES=n (default 1) devices; FAKE_CUDA_NO_DEVICE=1 makes
 * cuInit fail with CUDA_ERROR_NO_DEVICE.
 */
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT    __attribute__((visibility("default")))
#define MAX_DEV   8
#define GRAN      (2u << 20)
#define IPC_MAGIC 0x4b414643u /* "CFAK" */

/* ---- contexts ------------------------------------------------------------ */

typedef struct fake_ctx {
    int device;
} fake_ctx;

static fake_ctx primary[MAX_DEV];
static int n_devices;
static bool initialised;
static _Thread_local fake_ctx *tls_ctx;

static CUresult need_ctx(void)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    return tls_ctx != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- memory map ---------------------------------------------------------- */

enum { M_DEVICE, M_IMPORTED, M_VMM, M_PINNED, M_REGISTERED };

typedef struct fake_handle {
    int fd;
    size_t size;
    int device;
    int handle_types;
    atomic_int refs;
} fake_handle;

typedef struct mapping {
    struct mapping *next;
    int kind;
    uint64_t addr; /* what the application sees */
    size_t size;
    uint8_t *shadow; /* CPU view for the copy engine (NULL for host memory) */
    int device;
    int fd;                              /* memfd (device, imported) or -1 */
    fake_handle *handle;                 /* VMM */
    bool access;                         /* VMM: cuMemSetAccess done */
    uint64_t reserve_base, reserve_size; /* VMM: the reservation */
    int import_refs;
    uint64_t ipc_key; /* imported: pid << 32 | fd */
} mapping;

static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static mapping *maps;

static mapping *find_locked(uint64_t a)
{
    for (mapping *m = maps; m != NULL; m = m->next)
        if (a >= m->addr && a - m->addr < m->size)
            return m;
    return NULL;
}

static void unlink_locked(mapping *m)
{
    for (mapping **pp = &maps; *pp != NULL; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            return;
        }
}

/* A CPU pointer for [a, a+n), or NULL (range crosses a mapping's end or
 * touches a VMM mapping without access). Host memory maps to itself. */
static uint8_t *cpu_ptr(uint64_t a, size_t n, CUresult *err)
{
    pthread_mutex_lock(&map_lock);
    mapping *m = find_locked(a);
    uint8_t *p = NULL;
    *err = CUDA_SUCCESS;
    if (m == NULL || m->shadow == NULL) {
        p = (uint8_t *)(uintptr_t)a; /* host memory */
    } else if (n > m->size - (a - m->addr)) {
        *err = CUDA_ERROR_INVALID_VALUE;
    } else if (m->kind == M_VMM && !m->access) {
        *err = CUDA_ERROR_ILLEGAL_ADDRESS;
    } else {
        p = m->shadow + (a - m->addr);
    }
    pthread_mutex_unlock(&map_lock);
    return p;
}

/* Map fd twice: PROT_NONE where the application sees it, RW shadow. */
static CUresult map_fd(int fd, size_t size, uint64_t fixed, uint64_t *addr, uint8_t **shadow)
{
    int flags = MAP_SHARED | (fixed ? MAP_FIXED : 0);
    void *a = mmap((void *)(uintptr_t)fixed, size, PROT_NONE, flags, fd, 0);
    if (a == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *s = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED) {
        munmap(a, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *addr = (uint64_t)(uintptr_t)a;
    *shadow = s;
    return CUDA_SUCCESS;
}

static mapping *add_mapping(int kind, uint64_t addr, size_t size, uint8_t *shadow, int device,
                            int fd)
{
    mapping *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->kind = kind;
    m->addr = addr;
    m->size = size;
    m->shadow = shadow;
    m->device = device;
    m->fd = fd;
    pthread_mutex_lock(&map_lock);
    m->next = maps;
    maps = m;
    pthread_mutex_unlock(&map_lock);
    return m;
}

/* ---- streams ------------------------------------------------------------- */

enum { OP_COPY, OP_EVENT, OP_HOSTFN, OP_KERNEL, OP_MEMSET };

typedef struct fake_event {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int pending;
} fake_event;

typedef struct op {
    struct op *next;
    int type;
    uint64_t dst, src;
    size_t n;
    fake_event *ev;
    CUhostFn fn;
    void *data;
    int kernel;
    uint64_t args[4];
} op;

typedef struct fake_stream {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    op *head, *tail;
    bool busy, stop;
    CUresult error; /* sticky, like a real stream's */
    pthread_t thread;
    int device;
} fake_stream;

struct CUstream_st {
    fake_stream s;
};
struct CUevent_st {
    fake_event e;
};
struct CUfunc_st {
    int kernel;
};
struct CUmod_st {
    int unused;
};

static struct CUfunc_st k_fill = {1}, k_check = {2};

/* The copy engine's byte mover. Not memmove: the fake's "device" accesses
 * are ordered by another process (tests/gpu/tsan.supp), and an intercepted
 * memmove would be checked byte by byte by ThreadSanitizer; this file is
 * built without instrumentation. */
static void copy_bytes(uint8_t *d, const uint8_t *s, size_t n)
{
    if (d == s || n == 0)
        return;
    if (d < s || d >= s + n) {
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    } else {
        for (size_t i = n; i-- > 0;)
            d[i] = s[i];
    }
}

static uint8_t pattern(uint64_t i, uint64_t seed)
{
    return (uint8_t)(((i + seed) * 0x9E3779B97F4A7C15ull) >> 56);
}

static useconds_t copy_delay(void)
{
    const char *v = getenv("FAKE_CUDA_COPY_DELAY_US");
    return v ? (useconds_t)atoi(v) : 0;
}

static void event_done(fake_event *e)
{
    pthread_mutex_lock(&e->lock);
    e->pending--;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
}

static CUresult run_op(op *o)
{
    CUresult err = CUDA_SUCCESS;
    switch (o->type) {
    case OP_COPY: {
        uint8_t *d = cpu_ptr(o->dst, o->n, &err);
        if (err == CUDA_SUCCESS) {
            uint8_t *s = cpu_ptr(o->src, o->n, &err);
            if (err == CUDA_SUCCESS) {
                useconds_t delay = copy_delay();
                if (delay)
                    usleep(delay);
                copy_bytes(d, s, o->n);
            }
        }
        break;
    }
    case OP_MEMSET: {
        uint8_t *d = cpu_ptr(o->dst, o->n, &err);
        if (err == CUDA_SUCCESS)
            for (size_t i = 0; i < o->n; i++)
                d[i] = (uint8_t)o->src;
        break;
    }
    case OP_EVENT:
        event_done(o->ev);
        break;
    case OP_HOSTFN:
        o->fn(o->data);
        break;
    case OP_KERNEL: {
        uint64_t n = o->args[1], seed = o->args[2];
        uint8_t *p = cpu_ptr(o->args[0], n, &err);
        if (err != CUDA_SUCCESS)
            break;
        if (o->kernel == 1) {
            for (uint64_t i = 0; i < n; i++)
                p[i] = pattern(i, seed);
        } else {
            uint64_t *bad = (uint64_t *)cpu_ptr(o->args[3], 8, &err);
            if (err != CUDA_SUCCESS)
                break;
            uint64_t miss = 0;
            for (uint64_t i = 0; i < n; i++)
                miss += p[i] != pattern(i, seed);
            *bad += miss;
        }
        break;
    }
    }
    return err;
}

static void *stream_main(void *arg)
{
    fake_stream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == NULL && !s->stop)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->head == NULL && s->stop)
            break;
        op *o = s->head;
        s->head = o->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->busy = true;
        pthread_mutex_unlock(&s->lock);
        /* After a failure the stream is poisoned (sticky), but events
         * still fire so waiters learn of it. */
        CUresult err = CUDA_SUCCESS;
        if (s->error == CUDA_SUCCESS || o->type == OP_EVENT)
            err = run_op(o);
        free(o);
        pthread_mutex_lock(&s->lock);
        if (err != CUDA_SUCCESS && s->error == CUDA_SUCCESS)
            s->error = err;
        s->busy = false;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Queue o on stream (NULL: run now, synchronously). */
static CUresult enqueue(CUstream hs, op *o)
{
    if (hs == NULL) {
        CUresult err = run_op(o);
        free(o);
        return err;
    }
    fake_stream *s = &hs->s;
    pthread_mutex_lock(&s->lock);
    CUresult sticky = s->error;
    o->next = NULL;
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return sticky;
}

static op *new_op(int type)
{
    op *o = calloc(1, sizeof(*o));
    if (o != NULL)
        o->type = type;
    return o;
}

/* ---- the API ------------------------------------------------------------- */

EXPORT CUresult cuInit(unsigned int flags)
{
    const char *nd = getenv("FAKE_CUDA_NO_DEVICE");
    if (nd != NULL && nd[0] == '1')
        return CUDA_ERROR_NO_DEVICE;
    const char *n = getenv("FAKE_CUDA_DEVICES");
    n_devices = n ? atoi(n) : 1;
    if (n_devices < 1 || n_devices > MAX_DEV)
        n_devices = 1;
    for (int i = 0; i < n_devices; i++)
        primary[i].device = i;
    initialised = true;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
    *v = 13000;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult e, const char **s)
{
    switch (e) {
    case CUDA_SUCCESS:
        *s = "CUDA_SUCCESS";
        break;
    case CUDA_ERROR_INVALID_VALUE:
        *s = "CUDA_ERROR_INVALID_VALUE";
        break;
    case CUDA_ERROR_OUT_OF_MEMORY:
        *s = "CUDA_ERROR_OUT_OF_MEMORY";
        break;
    case CUDA_ERROR_NOT_INITIALIZED:
        *s = "CUDA_ERROR_NOT_INITIALIZED";
        break;
    case CUDA_ERROR_NO_DEVICE:
        *s = "CUDA_ERROR_NO_DEVICE";
        break;
    case CUDA_ERROR_INVALID_CONTEXT:
        *s = "CUDA_ERROR_INVALID_CONTEXT";
        break;
    case CUDA_ERROR_INVALID_HANDLE:
        *s = "CUDA_ERROR_INVALID_HANDLE";
        break;
    case CUDA_ERROR_NOT_READY:
        *s = "CUDA_ERROR_NOT_READY";
        break;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
        *s = "CUDA_ERROR_ILLEGAL_ADDRESS";
        break;
    case CUDA_ERROR_NOT_SUPPORTED:
        *s = "CUDA_ERROR_NOT_SUPPORTED";
        break;
    case CUDA_ERROR_NOT_PERMITTED:
        *s = "CUDA_ERROR_NOT_PERMITTED";
        break;
    default:
        *s = "CUDA_ERROR_UNKNOWN";
        break;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    *n = n_devices;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (ordinal < 0 || ordinal >= n_devices)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    *v = a == CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING ? 1 : 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    memset(u->bytes, 0, sizeof(u->bytes));
    memcpy(u->bytes, "fakecudadevice", 14);
    u->bytes[15] = (char)d;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d)
{
    snprintf(id, (size_t)len, "0000:%02x:00.0", 0x10 + d);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    if (d < 0 || d >= n_devices)
        return CUDA_ERROR_INVALID_DEVICE;
    *c = (CUcontext)&primary[d];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
    tls_ctx = (fake_ctx *)c;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *c)
{
    *c = (CUcontext)tls_ctx;
    return CUDA_SUCCESS;
}

static void put_attr(CUpointer_attribute a, void *data, const mapping *m, uint64_t p)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = m == NULL ? 0
                                : (m->kind == M_PINNED || m->kind == M_REGISTERED)
                                    ? CU_MEMORYTYPE_HOST
                                    : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = m ? m->device : -2;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(bool *)data = m != NULL && m->kind == M_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = m == NULL ? 0 : m->kind == M_VMM ? m->reserve_base : m->addr;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = m == NULL ? 0 : m->kind == M_VMM ? m->reserve_size : m->size;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(bool *)data = m != NULL;
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data =
            m != NULL && m->kind == M_VMM ? (unsigned long long)m->handle->handle_types : 0;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = m ? m->addr : 0;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = m ? m->size : 0;
        break;
    default:
        break;
    }
}

EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                       CUdeviceptr p)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&map_lock);
    mapping *m = find_locked(p);
    for (unsigned int i = 0; i < n; i++)
        put_attr(attrs[i], data[i], m, p);
    pthread_mutex_unlock(&map_lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc(CUdeviceptr *p, size_t n)
{
    CUresult rc = need_ctx();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = memfd_create("fakecuda-dev", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)n) < 0) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t a;
    uint8_t *s;
    rc = map_fd(fd, n, 0, &a, &s);
    if (rc != CUDA_SUCCESS) {
        close(fd);
        return rc;
    }
    add_mapping(M_DEVICE, a, n, s, tls_ctx->device, fd);
    *p = a;
    return CUDA_SUCCESS;
}

static void drop_mapping(mapping *m)
{
    if (m->shadow)
        munmap(m->shadow, m->size);
    if (m->kind == M_DEVICE || m->kind == M_IMPORTED)
        munmap((void *)(uintptr_t)m->addr, m->size);
    if (m->fd >= 0)
        close(m->fd);
    free(m);
}

EXPORT CUresult cuMemFree(CUdeviceptr p)
{
    pthread_mutex_lock(&map_lock);
    mapping *m = find_locked(p);
    if (m == NULL || m->kind != M_DEVICE || m->addr != p) {
        pthread_mutex_unlock(&map_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    unlink_locked(m);
    pthread_mutex_unlock(&map_lock);
    drop_mapping(m);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags)
{
    CUresult rc = need_ctx();
    if (rc != CUDA_SUCCESS)
        return rc;
    void *a = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    add_mapping(M_PINNED, (uint64_t)(uintptr_t)a, n, NULL, tls_ctx->device, -1);
    *p = a;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFreeHost(void *p)
{
    pthread_mutex_lock(&map_lock);
    mapping *m = find_locked((uint64_t)(uintptr_t)p);
    if (m == NULL || m->kind != M_PINNED) {
        pthread_mutex_unlock(&map_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    unlink_locked(m);
    pthread_mutex_unlock(&map_lock);
    munmap(p, m->size);
    free(m);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostRegister(void *p, size_t n, unsigned int flags)
{
    CUresult rc = need_ctx();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&map_lock);
    bool dup = find_locked((uint64_t)(uintptr_t)p) != NULL;
    pthread_mutex_unlock(&map_lock);
    if (dup)
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    add_mapping(M_REGISTERED, (uint64_t)(uintptr_t)p, n, NULL, tls_ctx->device, -1);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
    pthread_mutex_lock(&map_lock);
    mapping *m = find_locked((uint64_t)(uintptr_t)p);
    if (m == NULL || m->kind != M_REGISTERED) {
        pthread_mutex_unlock(&map_lock);
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    unlink_locked(m);
    pthread_mutex_unlock(&map_lock);
    free(m);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    CUresult rc = need_ctx();
    if (rc != CUDA_SUCCESS)
        return rc;
    op *o = new_op(OP_COPY);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->dst = dst;
    o->src = src;
    o->n = n;
    return enqueue(s, o);
}

EXPORT CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
    return cuMemcpyAsync(dst, (CUdeviceptr)(uintptr_t)src, n, NULL);
}

EXPORT CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
    return cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, src, n, NULL);
}

EXPORT CUresult cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n)
{
    CUresult rc = need_ctx();
    if (rc != CUDA_SUCCESS)
        return rc;
    op *o = new_op(OP_MEMSET);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->dst = p;
    o->src = v;
    o->n = n;
    return enqueue(NULL, o);
}

EXPORT CUresult cuStreamCreate(CUstream *out, unsigned int flags)
{
    CUresult rc = need_ctx();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct CUstream_st *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_init(&st->s.lock, NULL);
    pthread_cond_init(&st->s.cond, NULL);
    st->s.device = tls_ctx->device;
    if (pthread_create(&st->s.thread, NULL, stream_main, &st->s) != 0) {
        free(st);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = st;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream hs)
{
    if (hs == NULL)
        return CUDA_SUCCESS;
    fake_stream *s = &hs->s;
    pthread_mutex_lock(&s->lock);
    while (s->head != NULL || s->busy)
        pthread_cond_wait(&s->cond, &s->lock);
    CUresult err = s->error;
    pthread_mutex_unlock(&s->lock);
    return err;
}

EXPORT CUresult cuStreamDestroy(CUstream hs)
{
    if (hs == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    fake_stream *s = &hs->s;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(hs);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(CUevent *out, unsigned int flags)
{
    CUresult rc = need_ctx();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct CUevent_st *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_init(&e->e.lock, NULL);
    pthread_cond_init(&e->e.cond, NULL);
    *out = e;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent he, CUstream hs)
{
    op *o = new_op(OP_EVENT);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&he->e.lock);
    he->e.pending++;
    pthread_mutex_unlock(&he->e.lock);
    o->ev = &he->e;
    enqueue(hs, o);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventQuery(CUevent he)
{
    pthread_mutex_lock(&he->e.lock);
    int p = he->e.pending;
    pthread_mutex_unlock(&he->e.lock);
    return p == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EXPORT CUresult cuEventSynchronize(CUevent he)
{
    pthread_mutex_lock(&he->e.lock);
    while (he->e.pending > 0)
        pthread_cond_wait(&he->e.cond, &he->e.lock);
    pthread_mutex_unlock(&he->e.lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy(CUevent he)
{
    cuEventSynchronize(he);
    pthread_mutex_destroy(&he->e.lock);
    pthread_cond_destroy(&he->e.cond);
    free(he);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchHostFunc(CUstream hs, CUhostFn fn, void *data)
{
    op *o = new_op(OP_HOSTFN);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->fn = fn;
    o->data = data;
    return enqueue(hs, o);
}

/* ---- legacy IPC ---------------------------------------------------------- */

typedef struct ipc_wire {
    uint32_t magic;
    int32_t pid, fd;
    uint64_t size;
} ipc_wire;

EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    pthread_mutex_lock(&map_lock);
    mapping *m = find_locked(p);
    if (m == NULL || m->kind != M_DEVICE || m->addr != p) {
        pthread_mutex_unlock(&map_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    ipc_wire w = {IPC_MAGIC, (int32_t)getpid(), m->fd, m->size};
    pthread_mutex_unlock(&map_lock);
    memset(h, 0, sizeof(*h));
    memcpy(h->reserved, &w, sizeof(w));
    return CUDA_SUCCESS;
}

EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *out, CUipcMemHandle h, unsigned int flags)
{
    CUresult rc = need_ctx();
    if (rc != CUDA_SUCCESS)
        return rc;
    ipc_wire w;
    memcpy(&w, h.reserved, sizeof(w));
    if (w.magic != IPC_MAGIC || w.size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (w.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* CUDA refuses opening one's own handle */
    uint64_t key = ((uint64_t)(uint32_t)w.pid << 32) | (uint32_t)w.fd;
    pthread_mutex_lock(&map_lock);
    for (mapping *m = maps; m != NULL; m = m->next) {
        if (m->kind == M_IMPORTED && m->ipc_key == key) {
            m->import_refs++;
            *out = m->addr;
            pthread_mutex_unlock(&map_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&map_lock);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)w.pid, (int)w.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_INVALID_HANDLE; /* the exporter is gone */
    uint64_t a;
    uint8_t *s;
    rc = map_fd(fd, w.size, 0, &a, &s);
    if (rc != CUDA_SUCCESS) {
        close(fd);
        return rc;
    }
    mapping *m = add_mapping(M_IMPORTED, a, w.size, s, tls_ctx->device, fd);
    m->ipc_key = key;
    m->import_refs = 1;
    *out = a;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p)
{
    pthread_mutex_lock(&map_lock);
    mapping *m = find_locked(p);
    if (m == NULL || m->kind != M_IMPORTED || m->addr != p) {
        pthread_mutex_unlock(&map_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (--m->import_refs > 0) {
        pthread_mutex_unlock(&map_lock);
        return CUDA_SUCCESS;
    }
    unlink_locked(m);
    pthread_mutex_unlock(&map_lock);
    drop_mapping(m);
    return CUDA_SUCCESS;
}

/* ---- VMM ----------------------------------------------------------------- */

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option)
{
    *g = GRAN;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *out, size_t n,
                            const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (n == 0 || n % GRAN != 0 || prop->location.id < 0 || prop->location.id >= n_devices)
        return CUDA_ERROR_INVALID_VALUE;
    fake_handle *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    h->fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
    if (h->fd < 0 || ftruncate(h->fd, (off_t)n) < 0) {
        if (h->fd >= 0)
            close(h->fd);
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    h->size = n;
    h->device = prop->location.id;
    h->handle_types = (int)prop->requestedHandleTypes;
    atomic_init(&h->refs, 1);
    *out = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

static void handle_unref(fake_handle *h)
{
    if (atomic_fetch_sub(&h->refs, 1) == 1) {
        close(h->fd);
        free(h);
    }
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle hh)
{
    handle_unref((fake_handle *)(uintptr_t)hh);
    return CUDA_SUCCESS;
}

typedef struct reservation {
    struct reservation *next;
    uint64_t base, size;
} reservation;
static reservation *reservations;

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr,
                                    unsigned long long flags)
{
    void *a = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    reservation *r = calloc(1, sizeof(*r));
    r->base = (uint64_t)(uintptr_t)a;
    r->size = n;
    pthread_mutex_lock(&map_lock);
    r->next = reservations;
    reservations = r;
    pthread_mutex_unlock(&map_lock);
    *p = r->base;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t n)
{
    pthread_mutex_lock(&map_lock);
    for (reservation **pp = &reservations; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->base == p) {
            reservation *r = *pp;
            *pp = r->next;
            pthread_mutex_unlock(&map_lock);
            munmap((void *)(uintptr_t)p, r->size);
            free(r);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&map_lock);
    return CUDA_ERROR_INVALID_VALUE;
}

static reservation *reservation_of_locked(uint64_t p, size_t n)
{
    for (reservation *r = reservations; r != NULL; r = r->next)
        if (p >= r->base && n <= r->size && p - r->base <= r->size - n)
            return r;
    return NULL;
}

EXPORT CUresult cuMemMap(CUdeviceptr p, size_t n, size_t offset, CUmemGenericAllocationHandle hh,
                         unsigned long long flags)
{
    fake_handle *h = (fake_handle *)(uintptr_t)hh;
    if (offset != 0 || n != h->size)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&map_lock);
    reservation *r = reservation_of_locked(p, n);
    bool taken = find_locked(p) != NULL || find_locked(p + n - 1) != NULL;
    pthread_mutex_unlock(&map_lock);
    if (r == NULL || taken)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t a;
    uint8_t *s;
    CUresult rc = map_fd(h->fd, n, p, &a, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    atomic_fetch_add(&h->refs, 1);
    mapping *m = add_mapping(M_VMM, a, n, s, h->device, -1);
    m->handle = h;
    m->reserve_base = r->base;
    m->reserve_size = r->size;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t n)
{
    pthread_mutex_lock(&map_lock);
    mapping *m = find_locked(p);
    if (m == NULL || m->kind != M_VMM || m->addr != p || m->size != n) {
        pthread_mutex_unlock(&map_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    unlink_locked(m);
    pthread_mutex_unlock(&map_lock);
    munmap(m->shadow, m->size);
    mmap((void *)(uintptr_t)p, n, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    handle_unref(m->handle);
    free(m);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const CUmemAccessDesc *desc, size_t count)
{
    pthread_mutex_lock(&map_lock);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    for (mapping *m = maps; m != NULL; m = m->next) {
        if (m->kind == M_VMM && m->addr >= p && m->addr + m->size <= p + n) {
            m->access = true;
            rc = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&map_lock);
    return rc;
}

EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle hh,
                                             CUmemAllocationHandleType type,
                                             unsigned long long flags)
{
    fake_handle *h = (fake_handle *)(uintptr_t)hh;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
        !(h->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_NOT_PERMITTED;
    int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *out, void *os_handle,
                                               CUmemAllocationHandleType type)
{
    int fd = (int)(intptr_t)os_handle;
    struct stat st;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fstat(fd, &st) < 0 || st.st_size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    fake_handle *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    h->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    h->size = (size_t)st.st_size;
    h->device = 0;
    h->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    atomic_init(&h->refs, 1);
    *out = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *out, void *addr)
{
    pthread_mutex_lock(&map_lock);
    mapping *m = find_locked((uint64_t)(uintptr_t)addr);
    if (m == NULL || m->kind != M_VMM) {
        pthread_mutex_unlock(&map_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    atomic_fetch_add(&m->handle->refs, 1);
    *out = (CUmemGenericAllocationHandle)(uintptr_t)m->handle;
    pthread_mutex_unlock(&map_lock);
    return CUDA_SUCCESS;
}

/* ---- "kernels" ----------------------------------------------------------- */

EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
    static struct CUmod_st mod;
    *m = &mod;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(CUmodule m)
{
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    if (strcmp(name, "crescent_fill") == 0)
        *f = &k_fill;
    else if (strcmp(name, "crescent_check") == 0)
        *f = &k_check;
    else
        return CUDA_ERROR_NOT_FOUND;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int shared, CUstream hs, void **params, void **extra)
{
    CUresult rc = need_ctx();
    if (rc != CUDA_SUCCESS)
        return rc;
    op *o = new_op(OP_KERNEL);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->kernel = f->kernel;
    int nargs = f->kernel == 1 ? 3 : 4;
    for (int i = 0; i < nargs; i++)
        memcpy(&o->args[i], params[i], sizeof(uint64_t));
    return enqueue(hs, o);
}
