"""mooncake: crescent's drop-in replacement for Mooncake's Python wheel.

``from mooncake.store import MooncakeDistributedStore, ReplicateConfig`` and
``from mooncake.engine import TransferEngine`` work as with Mooncake, backed
by crescent's C library (see the ``crescent`` package). Console commands
``mooncake_master`` and ``mooncake_http_metadata_server`` start crescent's
servers with Mooncake's flag syntax (``mooncake.cli``).
"""

__version__ = "0.3.12+crescent.0.1.0"

try:  # Mooncake's wheel imports its buffer pool here, guarded the same way.
    from . import buffer_pool
    from .buffer_pool import BufferPool, RegisteredBufferPool
except ImportError:  # pragma: no cover
    buffer_pool = None
    BufferPool = RegisteredBufferPool = None  # type: ignore[assignment,misc]

__all__ = ["BufferPool", "RegisteredBufferPool", "buffer_pool"]
