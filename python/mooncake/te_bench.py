"""``transfer_engine_bench``: Mooncake's transfer-engine benchmark command on crescent.

Accepts Mooncake's gflags-style flags (``--flag=value`` or ``--flag value``):

    transfer_engine_bench --mode=target [--local_server_name=127.0.0.1]
        [--metadata_server=P2PHANDSHAKE] [--protocol=tcp] [--buffer_size=1073741824]
    transfer_engine_bench --mode=initiator --segment_id=<target segment>
        [--operation=read|write] [--threads=4] [--batch_size=128] [--block_size=65536]
        [--duration=10] [--buffer_size=...] [--report_unit=GB]

The target allocates and registers a buffer, prints
``transfer_engine_bench target ready: segment <name> ...`` and serves until
SIGINT/SIGTERM. The initiator finds the target's first buffer
(get_first_buffer_address), runs batch_transfer_sync_read/write from
--threads threads for --duration seconds and prints the throughput. Exit 0 on
success, 1 if a transfer fails, 2 on bad flags. ``--device_name`` and other
RDMA-only flags are accepted and ignored.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import List, Optional

from mooncake.engine import TransferEngine

_UNITS = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "Kb": 1e3 / 8, "Mb": 1e6 / 8,
          "Gb": 1e9 / 8}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="transfer_engine_bench",
                                description="Transfer engine benchmark (crescent)")
    p.add_argument("--mode", choices=["initiator", "target"], default="initiator")
    p.add_argument("--metadata_server", default="P2PHANDSHAKE")
    p.add_argument("--local_server_name", default="127.0.0.1")
    p.add_argument("--segment_id", default="")
    p.add_argument("--operation", choices=["read", "write"], default="read")
    p.add_argument("--protocol", default="tcp")
    p.add_argument("--device_name", default="")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--block_size", type=int, default=65536)
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--buffer_size", type=int, default=1 << 30)
    p.add_argument("--report_unit", choices=sorted(_UNITS), default="GB")
    p.add_argument("--auto_discovery", default="false")
    return p


def _target(ns, te: TransferEngine) -> int:
    buf = te.allocate_managed_buffer(ns.buffer_size)
    if buf == 0:
        sys.stderr.write("transfer_engine_bench: cannot allocate the target buffer\n")
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"transfer_engine_bench target ready: segment {te.get_local_segment_name()} "
          f"buffer {buf:#x} size {ns.buffer_size}", flush=True)
    while not stop.wait(0.2):
        pass
    te.free_managed_buffer(buf, ns.buffer_size)
    return 0


def _initiator(ns, te: TransferEngine) -> int:
    if not ns.segment_id:
        sys.stderr.write("transfer_engine_bench: --segment_id is required in initiator mode\n")
        return 2
    per_thread = ns.batch_size * ns.block_size
    need = per_thread * ns.threads
    if need > ns.buffer_size:
        sys.stderr.write(f"transfer_engine_bench: threads*batch_size*block_size = {need} "
                         f"exceeds --buffer_size {ns.buffer_size}\n")
        return 2
    remote = te.get_first_buffer_address(ns.segment_id)
    if remote == 0:
        sys.stderr.write(f"transfer_engine_bench: segment {ns.segment_id} has no buffer\n")
        return 1
    local = te.allocate_managed_buffer(need)
    if local == 0:
        sys.stderr.write("transfer_engine_bench: cannot allocate the local buffer\n")
        return 1
    op = te.batch_transfer_sync_read if ns.operation == "read" else te.batch_transfer_sync_write
    done_bytes = [0] * ns.threads
    failures = [0] * ns.threads
    deadline = time.monotonic() + ns.duration

    def run(t: int) -> None:
        base = t * per_thread
        locs = [local + base + i * ns.block_size for i in range(ns.batch_size)]
        rems = [remote + base + i * ns.block_size for i in range(ns.batch_size)]
        lens = [ns.block_size] * ns.batch_size
        while time.monotonic() < deadline:
            if op(ns.segment_id, locs, rems, lens) != 0:
                failures[t] += 1
                return
            done_bytes[t] += per_thread

    start = time.monotonic()
    threads = [threading.Thread(target=run, args=(t,)) for t in range(ns.threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.monotonic() - start
    te.free_managed_buffer(local, need)
    total = sum(done_bytes)
    print(f"Test completed: duration {elapsed:.2f}, batch count "
          f"{total // max(per_thread, 1)}, throughput "
          f"{total / elapsed / _UNITS[ns.report_unit]:.2f} {ns.report_unit}/s", flush=True)
    if sum(failures):
        sys.stderr.write(f"transfer_engine_bench: {sum(failures)} batch(es) failed\n")
        return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        ns = _parser().parse_args(args)
    except SystemExit as e:
        return int(e.code or 0) if e.code in (0, None) else 2
    te = TransferEngine()
    if te.initialize(ns.local_server_name, ns.metadata_server, ns.protocol, ns.device_name) != 0:
        sys.stderr.write("transfer_engine_bench: engine initialization failed\n")
        return 1
    try:
        return _target(ns, te) if ns.mode == "target" else _initiator(ns, te)
    finally:
        te.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
