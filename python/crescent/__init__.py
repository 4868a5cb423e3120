"""crescent: Python bindings of crescent's transfer engine and KV store.

The native extension ``crescent._crescent`` wraps the public C API
(``crescent/engine.h``, ``crescent/store.h``); this package adds a few
Python conveniences on top:

* :class:`Engine` -- one-sided READ/WRITE between registered memory of
  processes and hosts (``with Engine(...) as e: ...``).
* :class:`Store` -- a client of the distributed KV store run by
  ``crescent-master`` (``with Store(master_address="host:port") as s: ...``).
* :class:`ReplicateConfig` / :class:`SoftPinAction` -- replica placement.
* :class:`CrescentError` (a ``RuntimeError``) with ``.code`` (negative
  status, numerically Mooncake's ErrorCode for store errors), ``.name``
  (e.g. ``"OBJECT_NOT_FOUND"``) and ``.detail``; :class:`NotFoundError`
  (also a ``KeyError``) for misses.
* :class:`SharedMemory` -- shareable host memory from ``cr_alloc_shared``
  (same-host peers copy from it directly).

Every blocking call releases the GIL; one Engine or Store may be used from
many threads. Addresses are ints, tensors (``data_ptr()``) or
buffer-protocol objects (bytes, bytearray, memoryview, numpy arrays).

For code written against Mooncake, use the ``mooncake`` package shipped
alongside (``from mooncake.store import MooncakeDistributedStore``).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

from . import _crescent
from ._config import ReplicateConfig, SoftPinAction
from ._crescent import (  # noqa: F401  (re-exported)
    STATUS_CODES,
    BufferHandle,
    CrescentError,
    NotFoundError,
    alloc_shared,
    free_shared,
    last_error_message,
    parse_size,
    read_memory,
    status_name,
    strerror,
    write_memory,
)

__version__ = "0.1.0"

OP_READ = _crescent.OP_READ
OP_WRITE = _crescent.OP_WRITE

# Every status name as a module constant (crescent.OBJECT_NOT_FOUND == -704, ...).
globals().update(STATUS_CODES)

__all__ = [
    "Engine", "Store", "ReplicateConfig", "SoftPinAction", "BufferHandle", "SharedMemory",
    "CrescentError", "NotFoundError", "STATUS_CODES", "OP_READ", "OP_WRITE",
    "status_name", "strerror", "parse_size", "alloc_shared", "free_shared",
    "read_memory", "write_memory", "last_error_message",
]


class Engine(_crescent.Engine):
    __doc__ = _crescent.Engine.__doc__

    @contextlib.contextmanager
    def registered(self, address: Any, length: Optional[int] = None, location: str = "*",
                   remote_accessible: bool = True) -> Iterator[int]:
        """Register memory for the duration of a ``with`` block; yields the address."""
        addr = self.register(address, length, location, remote_accessible)
        try:
            yield addr
        finally:
            if not self.closed:
                self.unregister(addr)

    def __repr__(self) -> str:
        if self.closed:
            return "<crescent.Engine (closed)>"
        return f"<crescent.Engine {self.segment_name}>"


class Store(_crescent.Store):
    __doc__ = _crescent.Store.__doc__

    @contextlib.contextmanager
    def registered(self, address: Any, size: Optional[int] = None) -> Iterator[int]:
        """Register memory for the zero-copy calls inside a ``with`` block."""
        addr = self.register_buffer(address, size)
        try:
            yield addr
        finally:
            if not self.closed:
                self.unregister_buffer(addr)

    def __contains__(self, key: str) -> bool:
        return self.exists(key)

    def __repr__(self) -> str:
        if self.closed:
            return "<crescent.Store (closed)>"
        return f"<crescent.Store {self.hostname}>"


class SharedMemory:
    """Zeroed shareable host memory (memfd-backed, 2 MiB aligned).

    ``address`` and ``size`` describe it; ``memoryview(shm)`` is not offered
    because the memory is freed explicitly by :meth:`close` (or on leaving a
    ``with`` block): use :func:`read_memory` / :func:`write_memory` or hand
    the address to an engine or store.
    """

    def __init__(self, size: int) -> None:
        self.size = int(size)
        self.address: int = alloc_shared(self.size)

    def close(self) -> None:
        """Free the memory (unregister it from every engine first)."""
        if self.address:
            free_shared(self.address)
            self.address = 0

    def __enter__(self) -> "SharedMemory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<crescent.SharedMemory address=0x{self.address:x} size={self.size}>"
