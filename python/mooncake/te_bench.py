"""``transfer_engine_bench``: Mooncake's transfer-engine benchmark command on crescent.

Takes Mooncake's flags with gflags syntax (``--flag=value``, ``--flag value``,
``-flag``, ``--flag`` / ``--noflag`` for booleans, ``--flagfile=FILE``):

    transfer_engine_bench --mode=target [--local_server_name=127.0.0.1]
        [--metadata_server=P2PHANDSHAKE] [--protocol=tcp] [--buffer_size=1073741824]
    transfer_engine_bench --mode=initiator --segment_id=<target segment>
        [--operation=read|write] [--threads=12] [--batch_size=128] [--block_size=65536]
        [--duration=10] [--report_unit=GB] [--report_precision=2]

Every flag of Mooncake's benchmark is known here:

* honoured: mode, operation, protocol, local_server_name, metadata_server,
  segment_id, buffer_size, batch_size, block_size, duration, threads,
  report_unit (GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb, decimal and binary as
  Mooncake's; another unit warns and uses GB), report_precision, init_mem
  (fill the buffers with 0xCC before the run, as Mooncake does; default
  true), device_name (names a NIC for RDMA; tcp and shm use none);
* accepted at the values that ask for nothing crescent lacks, refused by
  name (exit 2) otherwise: backend (classic; "tent" is refused),
  use_vram / gpu_id (host memory: --use_vram=false; --use_vram=true needs a
  device-memory transport crescent's engine does not have yet; gpu_id only
  selects the GPU of that memory), auto_discovery (false; NIC topology
  discovery is RDMA's), nic_priority_matrix (empty; RDMA NIC selection).

The target allocates and registers a buffer, prints
``transfer_engine_bench target ready: segment <name> ...`` and serves until
SIGINT/SIGTERM. The initiator finds the target's first buffer, runs
batch_transfer_sync_read/write from --threads threads for --duration
seconds and prints ``Test completed: duration D, batch count N, throughput
X GB/s`` like Mooncake's. Exit 0 on success, 1 if a transfer fails, 2 on
bad flags.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import signal
import sys
import threading
import time
from typing import List, Optional

from mooncake.engine import TransferEngine

log = logging.getLogger("mooncake")

# Mooncake's RATE_UNIT_MP: decimal units, binary ones, and bits.
_UNITS = {"GB": 1e9, "GiB": float(1 << 30), "Gb": 1e9 / 8, "MB": 1e6, "MiB": float(1 << 20),
          "Mb": 1e6 / 8, "KB": 1e3, "KiB": float(1 << 10), "Kb": 1e3 / 8}

_BOOL_FLAGS = {"auto_discovery", "use_vram", "init_mem"}
_TRUE = ("1", "true", "yes", "t", "y")
_FALSE = ("0", "false", "no", "f", "n")


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r}")


def _gflags(args: List[str]) -> List[str]:
    """gflags spellings argparse does not know: -flag, bare --boolflag,
    --noboolflag, --flagfile=FILE."""
    out: List[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and not a.startswith("--") and len(a) > 2:
            a = "-" + a  # -flag=value -> --flag=value
        name = a[2:].split("=", 1)[0] if a.startswith("--") else ""
        if name == "flagfile":
            path = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
            if "=" not in a:
                i += 1
            with open(path, encoding="utf-8") as f:
                lines = [ln.strip() for ln in f]
            out.extend(_gflags([ln for ln in lines if ln and not ln.startswith("#")]))
        elif name in _BOOL_FLAGS and "=" not in a and \
                (i + 1 >= len(args) or args[i + 1].lower() not in _TRUE + _FALSE):
            out.append(f"--{name}=true")
        elif name.startswith("no") and name[2:] in _BOOL_FLAGS and "=" not in a:
            out.append(f"--{name[2:]}=false")
        else:
            out.append(a)
        i += 1
    return out


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
    p.add_argument("--nic_priority_matrix", default="")
    p.add_argument("--threads", type=int, default=12)
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--block_size", type=int, default=65536)
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--buffer_size", type=int, default=1 << 30)
    p.add_argument("--report_unit", default="GB")
    p.add_argument("--report_precision", type=int, default=2)
    p.add_argument("--backend", default="classic")
    p.add_argument("--auto_discovery", type=_bool, default=False)
    p.add_argument("--use_vram", type=_bool, default=False)
    p.add_argument("--init_mem", type=_bool, default=True)
    p.add_argument("--gpu_id", type=int, default=0)
    return p


def _refusal(ns: argparse.Namespace) -> Optional[str]:
    """Why these flags ask for something crescent does not have, or None."""
    if ns.backend != "classic":
        return (f"--backend={ns.backend}: crescent has one engine (Mooncake's 'classic' "
                "backend); 'tent' and others are not available")
    if ns.use_vram:
        return ("--use_vram=true: crescent's engine has no device-memory transport yet; "
                "benchmark host memory with --use_vram=false")
    if ns.gpu_id < -1:
        return f"--gpu_id={ns.gpu_id}: must be a GPU index or -1"
    if ns.auto_discovery:
        return ("--auto_discovery=true: NIC topology discovery is for RDMA, which crescent's "
                "engine does not have; leave it false")
    if ns.nic_priority_matrix:
        return ("--nic_priority_matrix: RDMA NIC selection, which crescent's engine does not "
                "have; leave it empty")
    if ns.report_precision < 0 or ns.report_precision > 20:
        return f"--report_precision={ns.report_precision}: must be 0..20"
    for name in ("threads", "batch_size", "block_size", "buffer_size"):
        if getattr(ns, name) <= 0:
            return f"--{name}={getattr(ns, name)}: must be positive"
    if ns.duration <= 0:
        return f"--duration={ns.duration}: must be positive"
    return None


def _rate(ns: argparse.Namespace, nbytes: float, seconds: float) -> str:
    return f"{nbytes / seconds / _UNITS[ns.report_unit]:.{ns.report_precision}f} " \
           f"{ns.report_unit}/s"


def _init_mem(ns: argparse.Namespace, addr: int, size: int) -> None:
    if ns.init_mem:
        ctypes.memset(addr, 0xCC, size)


def _target(ns: argparse.Namespace, te: TransferEngine) -> int:
    buf = te.allocate_managed_buffer(ns.buffer_size)
    if buf == 0:
        sys.stderr.write("transfer_engine_bench: cannot allocate the target buffer\n")
        return 1
    _init_mem(ns, buf, ns.buffer_size)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"transfer_engine_bench target ready: segment {te.get_local_segment_name()} "
          f"buffer {buf:#x} size {ns.buffer_size}", flush=True)
    while not stop.wait(0.2):
        pass
    te.free_managed_buffer(buf, ns.buffer_size)
    return 0


def _initiator(ns: argparse.Namespace, te: TransferEngine) -> int:
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
    _init_mem(ns, local, need)
    op = te.batch_transfer_sync_read if ns.operation == "read" else te.batch_transfer_sync_write
    done_batches = [0] * ns.threads
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
            done_batches[t] += 1

    start = time.monotonic()
    threads = [threading.Thread(target=run, args=(t,)) for t in range(ns.threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.monotonic() - start
    te.free_managed_buffer(local, need)
    batches = sum(done_batches)
    print(f"Test completed: duration {elapsed:.2f}, batch count {batches}, throughput "
          f"{_rate(ns, batches * per_thread, elapsed)}", flush=True)
    if sum(failures):
        sys.stderr.write(f"transfer_engine_bench: {sum(failures)} batch(es) failed\n")
        return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        ns = _parser().parse_args(_gflags(args))
    except SystemExit as e:
        return int(e.code or 0) if e.code in (0, None) else 2
    except OSError as e:  # --flagfile
        sys.stderr.write(f"transfer_engine_bench: {e}\n")
        return 2
    why = _refusal(ns)
    if why:
        sys.stderr.write(f"transfer_engine_bench: {why}\n")
        return 2
    if ns.report_unit not in _UNITS:
        sys.stderr.write(f"transfer_engine_bench: warning: --report_unit={ns.report_unit} is not "
                         "one of GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb; using GB\n")
        ns.report_unit = "GB"
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
