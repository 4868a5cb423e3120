"""``mooncake.cli_bench``: Mooncake's module name for the transfer_engine_bench
entry point (crescent's benchmark is mooncake.te_bench)."""

import sys

from .te_bench import main

__all__ = ["main"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
