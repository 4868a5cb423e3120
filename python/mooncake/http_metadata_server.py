"""``python -m mooncake.http_metadata_server --host H --port P``.

Mooncake ships an aiohttp server here; crescent runs its own C server
(crescent-metadata-server) with the same /metadata?key= routes.
"""

import sys

from .cli import metadata_server

# Mooncake's entry point name (mooncake_http_metadata_server = ...:main).
main = metadata_server

if __name__ == "__main__":
    sys.exit(metadata_server())
