"""mooncake.buffer_pool: leases of registered host memory for zero-copy store calls.

``BufferPool(store)`` allocates one region of crescent shareable memory
(``crescent.alloc_shared``: zeroed, 2 MiB aligned), registers it with the
store (``store.register_buffer``) and hands out sub-allocations of it as
leases. A lease is usable wherever the store takes a pointer
(``store.put_from(key, lease.ptr, n)``, ``get_into``, ...; ``lease.ptr`` and
``lease.size`` are properties, as in Mooncake's native pool) or a buffer
(it supports the buffer protocol: ``memoryview(lease)``, ``bytes(lease)``,
``numpy.frombuffer(lease)``, ``torch.frombuffer(lease, dtype=...)``,
``f.readinto(lease)``; it is a ctypes byte array, so ``lease[i:j] = data``
works too). Python 3.11 lets only C types export buffers, so a lease is a
ctypes array and ``memoryview(lease)`` has ctypes' format ``"<B"``, which
memoryview cannot assign items through; ``lease.buffer`` (Mooncake's name)
and ``lease.memoryview()`` are the same memory as a plain ``"B"`` view that
can (``lease.buffer[:5] = b"hello"``).

Allocation is first-fit over a free list kept sorted by offset; sizes are
rounded up to ``alignment``; a release merges the block with free neighbours.
When the region cannot serve a request (full, fragmented or too small) the
pool makes an *overflow* lease: a temporary region of its own, allocated and
registered for the request and unregistered and freed on release. Limits:

* ``max_regions``: overflow regions alive at once (0 disables overflow);
* ``max_bytes``: bytes of the pool region plus the live overflow regions
  (``None``: no limit).

A request that no state of the pool could ever serve (larger than the region
and than the overflow allowance) raises ``ValueError`` at once. Otherwise
``acquire`` waits for a release while both the region and the overflow
allowance are exhausted: ``timeout=None`` waits forever, ``timeout=0`` does
not wait, and expiry raises ``TimeoutError``. ``try_acquire`` returns
``None`` instead of waiting.

All methods are thread-safe (one ``threading.Condition``). ``close()`` makes
later acquires raise ``RuntimeError`` and wakes waiters; the region is
unregistered and freed once the last lease is released (at once if there
is none). Leases are context managers; releasing twice is a no-op. A
lease's memory must not be used after its release. The store must stay
open while the pool is in use (closing it first is harmless: the
unregistration then fails quietly).

Mooncake's native pool leases parts of the store's setup-time local
buffer; crescent's local buffer is internal to the C library, so the pool
owns a separate registered region instead.
"""

from __future__ import annotations

import bisect
import ctypes
import threading
import time
from typing import Any, Dict, List, Optional

import crescent

__all__ = ["BufferPool", "BufferLease", "RegisteredBufferPool", "RegisteredBufferLease"]

_MIB = 1 << 20


class _LeaseMixin:
    """Methods of a lease; the concrete class is a ctypes byte array of its size."""

    __slots__ = ()

    @property
    def ptr(self) -> int:
        """Address of the first byte (a property, as Mooncake's BufferLease.ptr)."""
        return ctypes.addressof(self)  # type: ignore[arg-type]

    def data_ptr(self) -> int:
        """Same as .ptr (lets the lease stand in for a pointer argument)."""
        return ctypes.addressof(self)  # type: ignore[arg-type]

    @property
    def size(self) -> int:
        """Number of bytes leased, the requested size (a property, as Mooncake's)."""
        return len(self)  # type: ignore[arg-type]

    @property
    def buffer(self) -> memoryview:
        """A writable memoryview (format "B") of the leased bytes (Mooncake's .buffer)."""
        return memoryview(self).cast("B")  # type: ignore[arg-type]

    def memoryview(self) -> memoryview:
        """Same as .buffer."""
        return memoryview(self).cast("B")  # type: ignore[arg-type]

    @property
    def is_overflow(self) -> bool:
        """True for a lease served by a temporary region outside the pool."""
        return self._lease_info[1] is not None  # type: ignore[attr-defined]

    @property
    def released(self) -> bool:
        return self._lease_info[2]  # type: ignore[attr-defined]

    def release(self) -> None:
        """Give the memory back to the pool (idempotent)."""
        self._lease_info[0]._release(self)  # type: ignore[attr-defined]

    def __enter__(self) -> "_LeaseMixin":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        kind = "overflow" if self.is_overflow else "pool"
        state = " released" if self.released else ""
        return f"<BufferLease {kind} ptr={self.ptr:#x} size={self.size}{state}>"


class BufferLease(_LeaseMixin):
    """Type of the leases (for isinstance checks); every lease is an instance."""

    __slots__ = ()


_lease_types: Dict[int, type] = {}
_lease_types_lock = threading.Lock()


def _lease_type(n: int) -> type:
    with _lease_types_lock:
        t = _lease_types.get(n)
        if t is None:
            if len(_lease_types) > 1024:
                _lease_types.clear()
            t = type("BufferLease", (BufferLease, ctypes.c_ubyte * n), {"__slots__": ()})
            _lease_types[n] = t
        return t


def _register(store: Any, ptr: int, size: int) -> None:
    rc = store.register_buffer(ptr, size)
    if isinstance(rc, int) and rc != 0:
        raise RuntimeError(f"register_buffer({ptr:#x}, {size}) failed: {rc}")


def _unregister(store: Any, ptr: int) -> None:
    try:
        store.unregister_buffer(ptr)
    except Exception:  # noqa: BLE001 - closed store: nothing to undo
        pass


class BufferPool:
    """Leases of one registered region, with overflow regions beyond it.

    BufferPool(store, capacity=64 MiB, alignment=64, max_regions=4, max_bytes=None)

    store: a MooncakeDistributedStore (or crescent.Store) that is set up;
      anything with register_buffer(ptr, size) / unregister_buffer(ptr).
    capacity: bytes of the pooled region (> 0).
    alignment: power of two; every lease starts at a multiple of it (and its
      size is rounded up to it inside the pool).
    max_regions: overflow regions alive at once (>= 0).
    max_bytes: limit on region + live overflow bytes (None: unlimited); must
      be at least capacity.
    """

    def __init__(self, store: Any, capacity: int = 64 * _MIB, alignment: int = 64,
                 max_regions: int = 4, max_bytes: Optional[int] = None) -> None:
        for name, v in (("capacity", capacity), ("alignment", alignment),
                        ("max_regions", max_regions)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, not {type(v).__name__}")
        if max_bytes is not None and (isinstance(max_bytes, bool) or
                                      not isinstance(max_bytes, int)):
            raise TypeError(f"max_bytes must be an int or None, not {type(max_bytes).__name__}")
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError("alignment must be a positive power of two")
        if max_regions < 0:
            raise ValueError("max_regions must not be negative")
        if max_bytes is not None and max_bytes < capacity:
            raise ValueError("max_bytes must be at least capacity")
        if not hasattr(store, "register_buffer") or not hasattr(store, "unregister_buffer"):
            raise TypeError("store must have register_buffer / unregister_buffer")
        self._store = store
        self._align = alignment
        self._capacity = (capacity + alignment - 1) // alignment * alignment
        self._max_regions = max_regions
        self._max_bytes = max_bytes
        self._cond = threading.Condition()
        self._base = crescent.alloc_shared(self._capacity)
        try:
            _register(store, self._base, self._capacity)
        except BaseException:
            crescent.free_shared(self._base)
            raise
        self._free_offs: List[int] = [0]  # sorted offsets of free blocks
        self._free_size: Dict[int, int] = {0: self._capacity}
        self._used = 0
        self._leases = 0
        self._ov_regions = 0  # overflow regions alive or being made
        self._ov_bytes = 0
        self._closed = False
        self._freed = False

    # ------------------------------------------------------------------ properties
    @property
    def base(self) -> int:
        """Address of the pooled region."""
        return self._base

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> Dict[str, int]:
        """capacity, used, free, largest_free, leases, overflow_regions, overflow_bytes."""
        with self._cond:
            return {"capacity": self._capacity, "used": self._used,
                    "free": self._capacity - self._used,
                    "largest_free": max(self._free_size.values(), default=0),
                    "leases": self._leases, "overflow_regions": self._ov_regions,
                    "overflow_bytes": self._ov_bytes}

    # ------------------------------------------------------------------ allocation
    def _rounded(self, size: int) -> int:
        return (size + self._align - 1) // self._align * self._align

    def _take(self, need: int) -> Optional[int]:
        for off in self._free_offs:
            n = self._free_size[off]
            if n >= need:
                i = bisect.bisect_left(self._free_offs, off)
                del self._free_offs[i]
                del self._free_size[off]
                if n > need:
                    self._free_offs.insert(i, off + need)
                    self._free_size[off + need] = n - need
                return off
        return None

    def _give(self, off: int, n: int) -> None:
        i = bisect.bisect_left(self._free_offs, off)
        # merge with the following block
        if i < len(self._free_offs) and self._free_offs[i] == off + n:
            n += self._free_size.pop(self._free_offs[i])
            del self._free_offs[i]
        # merge with the preceding block
        if i > 0:
            prev = self._free_offs[i - 1]
            if prev + self._free_size[prev] == off:
                self._free_size[prev] += n
                return
        self._free_offs.insert(i, off)
        self._free_size[off] = n

    def _overflow_allowance(self) -> int:
        """Largest overflow region any state of the pool allows (0: none)."""
        if self._max_regions == 0:
            return 0
        if self._max_bytes is None:
            return 1 << 62
        return self._max_bytes - self._capacity

    def _overflow_fits(self, size: int) -> bool:
        if self._ov_regions >= self._max_regions:
            return False
        return self._max_bytes is None or \
            self._capacity + self._ov_bytes + size <= self._max_bytes

    def _lease(self, ptr: int, size: int, overflow: Optional[int], off: int, n: int) -> Any:
        lease = _lease_type(size).from_address(ptr)
        # [pool, overflow ptr or None, released, (offset, rounded size)]
        lease._lease_info = [self, overflow, False, (off, n)]
        return lease

    def _try(self, size: int) -> Any:
        """One attempt under the lock: a lease, or None. May drop the lock for overflow."""
        need = self._rounded(size)
        off = self._take(need) if need <= self._capacity else None
        if off is not None:
            self._used += need
            self._leases += 1
            return self._lease(self._base + off, size, None, off, need)
        if not self._overflow_fits(size):
            return None
        # Reserve the overflow slot, then allocate and register without the lock.
        self._ov_regions += 1
        self._ov_bytes += size
        self._cond.release()
        ptr = 0
        try:
            ptr = crescent.alloc_shared(size)
            _register(self._store, ptr, size)
        except BaseException:
            if ptr:
                crescent.free_shared(ptr)
            self._cond.acquire()
            self._ov_regions -= 1
            self._ov_bytes -= size
            self._cond.notify_all()
            raise
        self._cond.acquire()
        self._leases += 1
        return self._lease(ptr, size, ptr, 0, size)

    def acquire(self, size: int, block: Optional[bool] = None,
                timeout: Optional[float] = None) -> Any:
        """A lease of ``size`` bytes (> 0). Waits up to ``timeout`` seconds (None:
        forever, 0: no wait) while the pool and the overflow allowance are
        exhausted, then raises TimeoutError; ``block=False`` (Mooncake's
        argument) does not wait at all. ValueError if no state of the pool
        could serve ``size``; RuntimeError after close()."""
        if block is not None and not isinstance(block, bool):
            raise TypeError(f"block must be a bool or None, not {type(block).__name__}")
        if block is False:
            timeout = 0
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"size must be an int, not {type(size).__name__}")
        if size <= 0:
            raise ValueError("size must be positive")
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(f"timeout must be a number or None, not {type(timeout).__name__}")
            if timeout < 0:
                raise ValueError("timeout must not be negative")
        if self._rounded(size) > self._capacity and size > self._overflow_allowance():
            raise ValueError(f"{size} bytes exceed both the pool ({self._capacity}) and "
                             "its overflow allowance")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("buffer pool is closed")
                lease = self._try(size)
                if lease is not None:
                    return lease
                if deadline is None:
                    self._cond.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"no {size}-byte buffer within {timeout} s")
                    self._cond.wait(left)

    def try_acquire(self, size: int) -> Any:
        """A lease, or None when acquire would have to wait."""
        try:
            return self.acquire(size, block=False)
        except TimeoutError:
            return None

    def release(self, lease: Any) -> None:
        """Same as lease.release()."""
        if not isinstance(lease, BufferLease):
            raise TypeError(f"expected a BufferLease, not {type(lease).__name__}")
        self._release(lease)

    def _release(self, lease: Any) -> None:
        info = lease._lease_info
        if info[0] is not self:
            raise ValueError("lease belongs to another pool")
        with self._cond:
            if info[2]:
                return
            info[2] = True
            if info[1] is None:
                off, n = info[3]
                self._give(off, n)
                self._used -= n
                self._leases -= 1
                self._cond.notify_all()
                self._maybe_free()
                return
        # An overflow region: unregister and free it outside the lock.
        _unregister(self._store, info[1])
        crescent.free_shared(info[1])
        with self._cond:
            self._ov_regions -= 1
            self._ov_bytes -= info[3][1]
            self._leases -= 1
            self._cond.notify_all()
            self._maybe_free()

    # ------------------------------------------------------------------ lifecycle
    def _maybe_free(self) -> None:
        """Under the lock: free the region once closed and idle."""
        if self._closed and not self._freed and self._leases == 0:
            self._freed = True
            _unregister(self._store, self._base)
            crescent.free_shared(self._base)

    def close(self) -> None:
        """Refuse new leases, wake waiters; the region goes when the last lease is
        released. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._maybe_free()

    def __enter__(self) -> "BufferPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        st = self.stats()
        return (f"<BufferPool capacity={st['capacity']} used={st['used']} "
                f"leases={st['leases']} overflow={st['overflow_regions']}"
                f"{' closed' if self._closed else ''}>")



# Mooncake's other names for the same classes.
RegisteredBufferPool = BufferPool
RegisteredBufferLease = BufferLease
