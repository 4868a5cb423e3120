#!/usr/bin/python3
"""Python-side store benchmark: the workload of `crescent-bench store` driven
through the `mooncake` drop-in, to compare the bindings' cost with C.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/bench_store.py \
        [--value-size 1M] [--batch 16] [--duration 2] [--keys 256] [--protocol rdma]

Processes (127.0.0.1, P2PHANDSHAKE): a crescent-master (spawned unless
--master), a holder client that contributes the segment the values live in,
and this process as the driver. The driver registers one region, writes
--keys values into the holder's segment (batch_put_from with
preferred_segment = the holder; untimed), then times batch_get_into of
--batch keys per call for --duration seconds, cycling over the keys (the
zcopy/batch get case of crescent-bench store). Then it times is_exist on one
key three ways: mooncake's is_exist, crescent.Store.exists (the extension
without the mooncake layer) and cr_store_exist called through ctypes (the C
round trip plus ctypes' own call cost). Prints one line per measurement.
"""

import argparse
import ctypes
import re
import subprocess
import sys
import time

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


def start_master(args):
    path = cli.find_binary(cli.MASTER)
    if path is None:
        sys.exit("crescent-master not found (set CRESCENT_BIN_DIR)")
    p = subprocess.Popen([path, "--rpc_port=0", "--metrics_port=0", "--rpc_address=127.0.0.1",
                          "--metrics_host=127.0.0.1", "--enable_metric_reporting=false",
                          "--default_kv_lease_ttl=%dms" % args.lease_ms],
                         stdout=subprocess.PIPE, text=True)
    m = re.search(r"listening on (\S+)", p.stdout.readline())
    if m is None:
        p.kill()
        sys.exit("crescent-master did not start")
    return p, m.group(1)


def time_loop(fn, duration):
    n = 0
    start = time.perf_counter()
    deadline = start + duration
    while True:
        fn(n)
        n += 1
        now = time.perf_counter()
        if now >= deadline:
            return n, now - start


def c_exist_loop(master, key, calls):
    """cr_store_exist through ctypes on a store set up through ctypes."""
    lib_path = None
    import crescent._crescent as ext

    for line in open("/proc/self/maps"):
        if "libcrescent.so" in line:
            lib_path = line.split()[-1]
            break
    lib = ctypes.CDLL(lib_path) if lib_path else ctypes.CDLL(ext.__file__)

    class Cfg(ctypes.Structure):
        _fields_ = [("struct_size", ctypes.c_uint32), ("local_hostname", ctypes.c_char_p),
                    ("metadata", ctypes.c_char_p), ("global_segment_size", ctypes.c_uint64),
                    ("local_buffer_size", ctypes.c_uint64), ("protocol", ctypes.c_char_p),
                    ("devices", ctypes.c_char_p), ("master_address", ctypes.c_char_p),
                    ("transfer_timeout_ms", ctypes.c_uint32),
                    ("rpc_timeout_ms", ctypes.c_uint32),
                    ("heartbeat_interval_ms", ctypes.c_uint32),
                    ("engine", ctypes.c_void_p), ("tenant_id", ctypes.c_char_p),
                    ("enable_ssd_offload", ctypes.c_bool),
                    ("ssd_offload_path", ctypes.c_char_p)]

    if not hasattr(lib, "cr_store_setup"):
        return None
    # cr_store_config_init writes the whole C struct: give it room to spare, and use
    # the mirror above only if it has the size the library says (struct_size).
    room = ctypes.create_string_buffer(4096)
    cfg = Cfg.from_buffer(room)
    lib.cr_store_config_init(ctypes.byref(cfg))
    if cfg.struct_size != ctypes.sizeof(Cfg):
        print(f"cr_store_exist via ctypes: skipped (cr_store_config is {cfg.struct_size} bytes, "
              f"this script's mirror {ctypes.sizeof(Cfg)})", file=sys.stderr)
        return None
    master_b = master.encode()
    cfg.master_address = master_b
    cfg.global_segment_size = 0
    handle = ctypes.c_void_p()
    lib.cr_store_setup.argtypes = [ctypes.POINTER(Cfg), ctypes.POINTER(ctypes.c_void_p)]
    if lib.cr_store_setup(ctypes.byref(cfg), ctypes.byref(handle)) != 0:
        return None
    lib.cr_store_exist.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    exist = lib.cr_store_exist
    k = key.encode()
    h = handle.value
    for _ in range(100):
        exist(h, k)
    start = time.perf_counter()
    for _ in range(calls):
        exist(h, k)
    elapsed = time.perf_counter() - start
    lib.cr_store_destroy.argtypes = [ctypes.c_void_p]
    lib.cr_store_destroy(h)
    return elapsed / calls


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--value-size", default="1M")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--keys", type=int, default=256)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--protocol", default="rdma", help="mooncake protocol (rdma = crescent auto)")
    ap.add_argument("--segment-size", default="1G")
    ap.add_argument("--exist-calls", type=int, default=20000)
    ap.add_argument("--lease-ms", type=int, default=500)
    ap.add_argument("--master", help="use a running crescent-master host:port")
    args = ap.parse_args()
    size = crescent.parse_size(args.value_size)
    seg = crescent.parse_size(args.segment_size)
    if args.keys * size > seg * 0.8:
        sys.exit("--keys x --value-size must fit in 80% of --segment-size")

    master_proc = None
    master = args.master
    if master is None:
        master_proc, master = start_master(args)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, master, str(seg), args.protocol],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    holder_name = holder.stdout.readline().strip()
    try:
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, args.protocol, "",
                       master) == 0
        region = np.zeros(max(args.keys, args.batch) * size, dtype=np.uint8)
        region[:] = np.arange(region.size, dtype=np.uint64).astype(np.uint8)
        base = region.ctypes.data
        assert s.register_buffer(base, region.nbytes) == 0
        rc = ReplicateConfig()
        rc.preferred_segment = holder_name
        keys = [f"pyb/{i}" for i in range(args.keys)]
        for i in range(0, args.keys, args.batch):
            ks = keys[i:i + args.batch]
            res = s.batch_put_from(ks, [base + (i + j) * size for j in range(len(ks))],
                                   [size] * len(ks), rc)
            assert res == [0] * len(ks), res
        dst = [base + j * size for j in range(args.batch)]
        sizes = [size] * args.batch
        batches = [keys[i:i + args.batch] for i in range(0, args.keys, args.batch)]

        def get(n):
            res = s.batch_get_into(batches[n % len(batches)], dst, sizes)
            if res[0] != size:
                raise RuntimeError(f"batch_get_into: {res}")

        get(0)
        calls, elapsed = time_loop(get, args.duration)
        gbps = calls * args.batch * size / elapsed / 1e9
        print(f"python batch_get_into value={args.value_size} batch={args.batch}: "
              f"{calls * args.batch / elapsed:.1f} keys/s {gbps:.3f} GB/s "
              f"{elapsed / calls * 1e6:.1f} us/call")

        native = crescent.Store(master_address=master, global_segment_size=0,
                                protocol="tcp")
        for label, fn in (("mooncake is_exist", lambda: s.is_exist(keys[0])),
                          ("crescent Store.exists", lambda: native.exists(keys[0]))):
            for _ in range(200):
                fn()
            start = time.perf_counter()
            for _ in range(args.exist_calls):
                fn()
            per = (time.perf_counter() - start) / args.exist_calls
            print(f"{label}: {per * 1e6:.2f} us/call")
        native.close()
        c_per = c_exist_loop(master, keys[0], args.exist_calls)
        if c_per is not None:
            print(f"cr_store_exist via ctypes: {c_per * 1e6:.2f} us/call")
        s.remove_all(force=True)
        s.unregister_buffer(base)
        s.close()
    finally:
        holder.stdin.write("quit\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
        if master_proc is not None:
            master_proc.terminate()
            master_proc.wait(timeout=30)


if __name__ == "__main__":
    main()
