#!/usr/bin/python3
"""Batch forms, one master round trip per phase vs one call per key.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/bench_batch_multi.py \
        [--keys 128] [--parts 2] [--part-size 32K] [--iters 30] [--protocol tcp]

Processes (127.0.0.1, P2PHANDSHAKE): a crescent-master (spawned), a holder
client whose segment holds the values (preferred_segment), and this process
as the driver, so every transfer crosses processes. For --keys keys of
--parts registered buffers of --part-size bytes each it times, per call:

  put multi   batch_put_from_multi_buffers (one batch) vs the per-key loop it
              replaced (Store.put_from_multi once per key)
  get multi   batch_get_into_multi_buffers vs Store.get_into_multi per key
  put copy    put_batch (copying; staged in one batch) vs put() per key
  get copy    get_batch vs get() per key

Keys are removed (untimed) before each timed put. Prints the median time of
a call over --iters calls, the per-key time, and the master requests per
call (from the master's /metrics counters).
"""

import argparse
import re
import statistics
import subprocess
import sys
import time
import urllib.request

import numpy as np

import crescent
from mooncake import cli
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

HOLDER = r"""
import sys
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", "P2PHANDSHAKE", int(sys.argv[2]), 16 << 20, sys.argv[3], "",
               sys.argv[1]) == 0
print(s.get_hostname(), flush=True)
sys.stdin.readline()
s.close()
"""


def start_master():
    path = cli.find_binary(cli.MASTER)
    if path is None:
        sys.exit("crescent-master not found (set CRESCENT_BIN_DIR)")
    p = subprocess.Popen([path, "--rpc_port=0", "--metrics_port=0", "--rpc_address=127.0.0.1",
                          "--metrics_host=127.0.0.1"],
                         stdout=subprocess.PIPE, text=True)
    m = re.search(r"listening on (\S+) \(metrics (\S+)\)", p.stdout.readline())
    if m is None:
        p.kill()
        sys.exit("crescent-master did not start")
    return p, m.group(1), m.group(2)


def master_requests(metrics):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    body = opener.open(f"http://{metrics}/metrics", timeout=5).read().decode()
    return sum(float(v) for v in re.findall(r'^master_requests_total\{[^}]*\} (\S+)', body,
                                            re.M))


def measure(fn, iters, metrics, before=None):
    times, reqs = [], []
    for _ in range(iters):
        if before is not None:
            before()
        r0 = master_requests(metrics)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        reqs.append(master_requests(metrics) - r0)
    return statistics.median(times), statistics.median(reqs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=128)
    ap.add_argument("--parts", type=int, default=2)
    ap.add_argument("--part-size", default="32K")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--protocol", default="tcp")
    args = ap.parse_args()
    part = crescent.parse_size(args.part_size)
    n, parts = args.keys, args.parts
    value = part * parts

    master, addr, metrics = start_master()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, addr,
                               str(max(256 << 20, 4 * n * value)), args.protocol],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    store = MooncakeDistributedStore()
    try:
        holder_name = holder.stdout.readline().strip()
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 64 << 20, args.protocol, "",
                           addr) == 0
        cfg = ReplicateConfig()
        cfg.preferred_segment = holder_name
        s = store._s
        src = np.random.default_rng(1).integers(0, 256, n * value, dtype=np.uint8)
        dst = np.zeros(n * value, np.uint8)
        for a in (src, dst):
            assert store.register_buffer(a.ctypes.data, a.nbytes) == 0
        keys = [f"bench/{i}" for i in range(n)]
        sptrs = [[src.ctypes.data + i * value + k * part for k in range(parts)] for i in range(n)]
        dptrs = [[dst.ctypes.data + i * value + k * part for k in range(parts)] for i in range(n)]
        sizes = [[part] * parts for _ in range(n)]
        values = [src[i * value:(i + 1) * value].tobytes() for i in range(n)]

        def clear():
            store.batch_remove(keys, force=True)

        def put_multi_loop():
            for k, p, z in zip(keys, sptrs, sizes):
                s.put_from_multi(k, p, z, cfg)

        def put_multi_batch():
            assert store.batch_put_from_multi_buffers(keys, sptrs, sizes, cfg) == [0] * n

        def get_multi_loop():
            for k, p, z in zip(keys, dptrs, sizes):
                s.get_into_multi(k, p, z)

        def get_multi_batch():
            assert store.batch_get_into_multi_buffers(keys, dptrs, sizes) == [value] * n

        def put_copy_loop():
            for k, v in zip(keys, values):
                assert store.put(k, v, cfg) == 0

        def put_copy_batch():
            assert store.put_batch(keys, values, cfg) == 0

        def get_copy_loop():
            for k in keys:
                store.get(k)

        def get_copy_batch():
            store.get_batch(keys)

        print(f"{n} keys x {parts} buffers x {part} bytes ({value} bytes per key), "
              f"protocol {args.protocol}, median of {args.iters} calls")
        cases = [("put multi", put_multi_loop, put_multi_batch, clear),
                 ("get multi", get_multi_loop, get_multi_batch, None),
                 ("put copy", put_copy_loop, put_copy_batch, clear),
                 ("get copy", get_copy_loop, get_copy_batch, None)]
        for name, loop, batch, before in cases:
            res = {}
            for form, fn in (("per-key loop", loop), ("batch", batch)):
                if before is None:  # reads need the values in place
                    clear()
                    put_multi_batch()
                t, r = measure(fn, args.iters, metrics, before)
                res[form] = t
                print(f"{name:10s} {form:13s} {t * 1e3:8.2f} ms/call {t / n * 1e6:8.1f} us/key "
                      f"{r:6.0f} master requests/call")
            if name.startswith("get"):
                assert dst.tobytes() == src.tobytes() or name == "get copy"
            print(f"{name:10s} speed-up      {res['per-key loop'] / res['batch']:8.1f}x")
        for a in (src, dst):
            store.unregister_buffer(a.ctypes.data)
    finally:
        store.close()
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=20)
        master.terminate()
        master.wait(timeout=20)


if __name__ == "__main__":
    main()
