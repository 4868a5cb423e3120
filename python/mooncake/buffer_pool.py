"""mooncake.buffer_pool: Mooncake's native BufferPool is not part of crescent.

The module exists because ``import mooncake`` imports it (guarded). Creating
a ``BufferPool`` raises ``NotImplementedError``.
"""

from typing import Any


class BufferPool:
    """Not available in crescent (Mooncake's local-buffer lease pool)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("mooncake.buffer_pool.BufferPool is not available in crescent")
