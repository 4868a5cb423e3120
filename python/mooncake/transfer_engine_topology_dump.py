"""``transfer_engine_topology_dump``: Mooncake's topology dump command on crescent.

Prints ``Local topology [te/<mode>]: <json>`` as Mooncake's command does,
with the JSON of ``TransferEngine.get_local_topology(device_name)``.
crescent's transports (memcpy, shared memory, tcp) use no RDMA NICs, so the
discovered topology is empty; ``--custom-topo-json FILE`` (or
``--use-custom-topo`` with MC_CUSTOM_TOPO_JSON) prints that file's topology
as given. ``--backend tent`` (or MC_USE_TENT / MC_USE_TEV1 with the default
``--backend auto``) asks for Mooncake's TENT engine, which crescent does not
have: exit 2 naming it. Exit 1 when a custom topology cannot be read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="transfer_engine_topology_dump",
                                description="Dump the transfer engine's device topology "
                                            "(crescent)")
    p.add_argument("--device-name", type=str, default="",
                   help="filter by RDMA device name(s), comma-separated")
    p.add_argument("--backend", choices=("auto", "te", "tent"), default="auto")
    p.add_argument("--use-custom-topo", action="store_true",
                   help="print the topology in MC_CUSTOM_TOPO_JSON")
    p.add_argument("--custom-topo-json", type=str, default=None,
                   help="path of a custom topology JSON to print")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    backend = args.backend
    if backend == "auto":
        backend = "tent" if os.environ.get("MC_USE_TENT") or os.environ.get("MC_USE_TEV1") \
            else "te"
    if backend == "tent":
        print("error: --backend tent: crescent has no TENT engine (its engine is Mooncake's "
              "classic 'te')", file=sys.stderr)
        return 2
    path = args.custom_topo_json
    if path is None and args.use_custom_topo:
        path = os.environ.get("MC_CUSTOM_TOPO_JSON", "")
        if not path:
            print("error: --use-custom-topo requires MC_CUSTOM_TOPO_JSON", file=sys.stderr)
            return 1
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                topo = json.dumps(json.load(f))
        except (OSError, ValueError) as e:
            print(f"error: failed to dump topology: {e}", file=sys.stderr)
            return 1
        mode = f"custom ({path})"
    else:
        from mooncake.engine import TransferEngine

        topo = TransferEngine().get_local_topology(device_name=args.device_name or None)
        mode = "discover"
    print(f"Local topology [te/{mode}]: {topo}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
