#!/usr/bin/python3
"""Issue 12's table, crescent and upstream Mooncake side by side in one run.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/bench_vs_mooncake.py \
        --mooncake-build /path/to/mooncake/build [--rounds 2] [--duration 2] \
        [--value-sizes 4K,64K,1M,16M] [--threads 1,8] [--batch 16] [--segment 4G] \
        [--skip-engine] [--skip-store] [--skip-floor] \
        [--crescent-busy-poll-us N]

Needs a build tree of upstream Mooncake (its transfer_engine_bench, mooncake_master and
the pybind `store` module: docs/PERFORMANCE.md, "Against upstream Mooncake built here", says
how one was built on this machine). Nothing of Mooncake's is installed: its `store` module
is imported as `mooncake.store` from a temporary package made of links into the build tree,
so the same client code below runs against either implementation, each in its own process.

Store rows (the issue's Python benchmark; protocol tcp, everything on 127.0.0.1): per
implementation and round, its master, a holder process that mounts --segment bytes, and a
client process without a segment that times, for --duration seconds each, per value size and
thread count (each thread its own registered buffer and keys; puts stop early once the
threads together wrote an eighth of the segment, so no case runs into eviction):
  get             copying get of one value (cycling over 64 values put before, untimed)
  put             copying put of one fresh key per call
  batch_get_into  --batch keys per call into a registered buffer
  batch_put_from  --batch fresh keys per call from a registered buffer
Every value read is checked (length and a sampled byte pattern, outside the timed call's
own work is only the check of the returned sizes). Keys put are removed between cases.

Engine rows: crescent-bench engine and Mooncake's transfer_engine_bench (one initiator
thread each, tcp): 4 KiB reads one at a time (crescent's synchronous transfer, which is what
Python's transfer_sync_read does; Mooncake's bench submits and polls, which is what its
transfer_sync_read does) and 1 MiB reads and writes in batches of 16. Requests per second are
compared (Mooncake's bench reports no percentiles).

Crescent's engine polls adaptively before it sleeps by default (docs/latency.md).
--crescent-busy-poll-us N gives its side a fixed window instead (CRESCENT_BUSY_POLL_US=N in its
clients, holder and engine bench, --rpc_busy_poll_us=N on its master), and 0 turns its polling
off (CRESCENT_BUSY_POLL_US=0); Mooncake runs as it is (its bench's initiator polls for
completions).

Floor rows (unless --skip-floor; first in every round): what this machine's loopback allows
any implementation, from `crescent-bench engine --baseline` (plain blocking sockets between
two processes, 1 MiB send/recv, nothing of crescent's): one stream and two at once, into the
receiver's warm pages and into never-written pages (the floor of a put into a freshly mounted,
lazily committed holder, crescent's default: design 2.9), and a 4 KiB ping-pong. For values of
1 MiB and more the report then gives each store row's ceiling: the faster of the one- and
two-stream floors over Mooncake's figure, the crescent / Mooncake ratio of a transport that
moved bytes exactly as fast as plain sockets in this run (the puts' ceiling from the warm
floor; a fresh holder's lower one in the note under it). It is a plain-socket bound, not a
hard one: crescent's lanes pass plain sockets by ~15 % with large batches (16 MiB values).

Implementations alternate within each round (crescent, then Mooncake); the report gives
every round's figures, the medians and crescent / Mooncake.
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

HOLDER = r"""
import sys
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
rc = s.setup("127.0.0.1", "P2PHANDSHAKE", int(sys.argv[2]), 16 << 20, "tcp", "", sys.argv[1])
print("ready" if rc == 0 else "setup failed: %d" % rc, flush=True)
sys.stdin.readline()
s.close()
"""

CLIENT = r"""
import json, sys, threading, time
import numpy as np
from mooncake.store import MooncakeDistributedStore

master, size, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
duration, threads, put_cap = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
tag = "%d_%d_" % (size, threads)  # keys of one run only: another's may still be leased
s = MooncakeDistributedStore()
rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, max(64 << 20, 2 * size * batch), "tcp", "", master)
if rc != 0:
    sys.exit("client setup failed: %d" % rc)
N_READ = 64
pattern = [np.full(size, (i * 37 + 11) % 251, dtype=np.uint8) for i in range(N_READ)]
# Written once here (np.ones, not the lazily zeroed np.zeros), so no timed call pays the first
# touch of its pages: with 16 MiB values and 8 threads that was 2 GiB, the whole case.
bufs = [np.ones(size * batch, dtype=np.uint8) for _ in range(threads)]
for b in bufs:
    assert s.register_buffer(b.ctypes.data, b.nbytes) == 0
out, errors = {}, []

def timed(fn, bytes_per_call, cap=0):
    # fn(t, n) on every thread at once until the deadline (or, with cap, until the threads
    # together moved cap bytes); the bytes per second of all of them together.
    counts = [0] * threads
    go = threading.Barrier(threads + 1)
    def run(t):
        go.wait()
        try:
            n = 0
            while time.perf_counter() < deadline:
                if cap and sum(counts) * bytes_per_call >= cap:
                    break
                fn(t, n)
                n += 1
                counts[t] = n
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(repr(e))
    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for th in ts:
        th.start()
    start = time.perf_counter()
    deadline = start + duration
    go.wait()
    for th in ts:
        th.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise SystemExit("; ".join(errors[:3]))
    return sum(counts) * bytes_per_call / elapsed

def fill_reads():  # the values the reads read (untimed)
    for i in range(N_READ):
        assert s.put(tag + "r%d" % i, pattern[i].tobytes()) == 0

def get(t, n):
    i = (n * threads + t) % N_READ
    v = s.get(tag + "r%d" % i)
    if len(v) != size or v[size // 2] != pattern[i][0]:
        raise RuntimeError("get %sr%d: %d bytes, wrong value" % (tag, i, len(v)))

value = pattern[0].tobytes()
def put(t, n):
    rc = s.put(tag + "p%d_%d" % (t, n), value)
    if rc != 0:
        raise RuntimeError("put p%d_%d: %d" % (t, n, rc))

def ptrs(t):
    return [bufs[t].ctypes.data + j * size for j in range(batch)]

def bgi(t, n):
    keys = [tag + "r%d" % ((n * batch + j + t) % N_READ) for j in range(batch)]
    got = s.batch_get_into(keys, ptrs(t), [size] * batch)
    if list(got) != [size] * batch:
        raise RuntimeError("batch_get_into: %s" % list(got))

def bpf(t, n):
    keys = [tag + "b%d_%d_%d" % (t, n, j) for j in range(batch)]
    res = s.batch_put_from(keys, ptrs(t), [size] * batch)
    if any(r != 0 for r in res):
        raise RuntimeError("batch_put_from: %s" % list(res))

fill_reads()
out["get"] = timed(get, size)
out["put"] = timed(put, size, put_cap)
s.remove_all()
fill_reads()
out["batch_get_into"] = timed(bgi, size * batch)
bgi(0, 0)  # once more, untimed, to check the bytes of every slot
for j in range(batch):
    if bufs[0][j * size + size // 2] != pattern[j % N_READ][0]:
        raise SystemExit("batch_get_into: wrong bytes in slot %d" % j)
out["batch_put_from"] = timed(bpf, size * batch, put_cap)
s.remove_all()
s.close()
print(json.dumps(out), flush=True)
"""

STORE_ROWS = ["get", "put", "batch_get_into", "batch_put_from"]


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if m is None:
        raise argparse.ArgumentTypeError("not a size: %r" % text)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port, proc, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %d before listening" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on port %d within %.0f s" % (what, port, timeout))


def stop(proc):
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Impl:
    def __init__(self, name, master, env, engine_cmd, master_args=()):
        self.name, self.master, self.env, self.engine_cmd = name, master, env, engine_cmd
        self.master_args = list(master_args)


def crescent_impl(build, busy_poll_us):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(build, "python")
    args = []
    if busy_poll_us is not None:
        env["CRESCENT_BUSY_POLL_US"] = str(busy_poll_us)
        if busy_poll_us > 0:
            args.append("--rpc_busy_poll_us=%d" % busy_poll_us)
    master = os.path.join(build, "tools", "master", "crescent-master")
    return Impl("crescent", master, env, os.path.join(build, "tools", "bench", "crescent-bench"),
                args)


def mooncake_impl(mc_build, pkg_dir):
    integ = os.path.join(mc_build, "mooncake-integration")
    pkg = os.path.join(pkg_dir, "mooncake")
    os.makedirs(pkg, exist_ok=True)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    for f in os.listdir(integ):
        if f.endswith(".so") and (f.startswith("store.") or f.startswith("engine.")):
            os.symlink(os.path.join(integ, f), os.path.join(pkg, f))
    env = dict(os.environ)
    env["PYTHONPATH"] = pkg_dir
    env["LD_LIBRARY_PATH"] = os.path.join(mc_build, "mooncake-common") + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    master = os.path.join(mc_build, "mooncake-store", "src", "mooncake_master")
    bench = os.path.join(mc_build, "mooncake-transfer-engine", "example", "transfer_engine_bench")
    return Impl("mooncake", master, env, bench)


def store_round(impl, a, configs):
    """One master and holder of impl; a client run per (value size, threads) of configs."""
    port, mport = free_port(), free_port()
    master = holder = None
    try:
        master = subprocess.Popen(
            [impl.master, "--rpc_port=%d" % port, "--rpc_address=127.0.0.1",
             "--metrics_port=%d" % mport, "--enable_metric_reporting=false",
             "--default_kv_lease_ttl=%d" % a.lease_ms] + impl.master_args,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=impl.env)
        wait_port(port, master, impl.name + " master")
        addr = "127.0.0.1:%d" % port
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, addr, str(a.segment)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=impl.env)
        line = holder.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError("%s holder: %s" % (impl.name, line or "no answer"))
        got = {}
        for size, threads in configs:
            res = subprocess.run([sys.executable, "-c", CLIENT, addr, str(size), str(a.batch),
                                  str(a.duration), str(threads), str(a.segment // 8)],
                                 capture_output=True, text=True, env=impl.env, timeout=900)
            if res.returncode != 0:
                raise RuntimeError("%s client (%s, %d threads): %s" % (
                    impl.name, fmt_size(size), threads, res.stderr.strip()[-2000:]))
            got[(size, threads)] = json.loads(res.stdout.strip().splitlines()[-1])
        return got
    finally:
        if holder is not None and holder.poll() is None:
            try:
                holder.stdin.write("\n")
                holder.stdin.flush()
                holder.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                pass
        stop(holder)
        stop(master)


ENGINE_CASES = [("read", 4096, 1), ("read", 1 << 20, 16), ("write", 1 << 20, 16)]


def crescent_engine(impl, op, block, batch, duration):
    cmd = [impl.engine_cmd, "engine", "--op", op, "--block-sizes", str(block), "--batch",
           str(batch), "--duration", str(duration), "--json", "--quiet"]
    if batch == 1:
        cmd.append("--sync")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=impl.env)
    for line in res.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            if row.get("type") == "engine" and row.get("op") == op:
                return row["requests_per_s"]
    raise RuntimeError("crescent-bench engine: no result (%s)" % res.stderr.strip()[-500:])


def mooncake_engine(impl, op, block, batch, duration):
    common = ["--metadata_server=P2PHANDSHAKE", "--local_server_name=127.0.0.1",
              "--protocol=tcp", "--buffer_size=%d" % (256 << 20), "--logtostderr"]
    target = subprocess.Popen([impl.engine_cmd, "--mode=target"] + common,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env=impl.env)
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = target.stderr.readline()
            if not line:
                raise RuntimeError("Mooncake bench target exited")
            m = re.search(r"P2P handshake, listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
        if port is None:
            raise RuntimeError("Mooncake bench target did not say its port")
        time.sleep(0.5)  # its segment is registered after the handshake port opens
        res = subprocess.run(
            [impl.engine_cmd, "--mode=initiator", "--segment_id=127.0.0.1:%d" % port,
             "--threads=1", "--duration=%d" % max(1, round(duration)), "--report_unit=MB",
             "--operation=" + op, "--block_size=%d" % block, "--batch_size=%d" % batch]
            + common, capture_output=True, text=True, env=impl.env, timeout=300)
        m = re.search(r"duration ([\d.]+), batch count (\d+)", res.stderr)
        if m is None:
            raise RuntimeError("Mooncake bench: no result (%s)" % res.stderr.strip()[-800:])
        return int(m.group(2)) * batch / float(m.group(1))
    finally:
        stop(target)


FLOORS = ["tcp_socket", "tcp_socket_2_streams", "tcp_socket_fresh_pages",
          "tcp_socket_fresh_pages_2_streams", "tcp_pingpong"]


def floors(crescent_build, duration):
    """This machine's loopback floors, from crescent-bench engine --baseline (plain sockets):
    GB/s for the streams, round trips per second for the ping-pong."""
    cmd = [os.path.join(crescent_build, "tools", "bench", "crescent-bench"), "engine",
           "--baseline", "--op", "read", "--block-sizes", "1M", "--batch", "16", "--duration",
           str(duration), "--json", "--quiet"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, CRESCENT_LOG="error"))
    got = {}
    for line in res.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            if row.get("type") == "baseline" and row.get("name") in FLOORS:
                got[row["name"]] = row["per_s"] if "per_s" in row else row["gbps"]
    missing = [f for f in FLOORS if f not in got]
    if missing:
        raise RuntimeError("crescent-bench engine --baseline: no %s (%s)" % (
            ", ".join(missing), res.stderr.strip()[-500:]))
    return got


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mooncake-build", required=True,
                    help="upstream Mooncake's cmake build directory")
    ap.add_argument("--crescent-build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--value-sizes", type=lambda t: [parse_size(x) for x in t.split(",")],
                    default=[1 << 20], help="comma-separated, K/M/G (default 1M)")
    ap.add_argument("--threads", type=lambda t: [int(x) for x in t.split(",")], default=[1],
                    help="client threads, comma-separated (default 1)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--segment", type=parse_size, default=4 << 30)
    ap.add_argument("--lease-ms", type=int, default=30000,
                    help="both masters' default_kv_lease_ttl (a batch read that outlasts its "
                    "lease fails: Mooncake's 16 x 16 MiB from 8 threads took over 5 s here)")
    ap.add_argument("--skip-engine", action="store_true")
    ap.add_argument("--skip-store", action="store_true")
    ap.add_argument("--skip-floor", action="store_true",
                    help="no plain-socket floors (crescent-bench engine --baseline) per round")
    ap.add_argument("--crescent-busy-poll-us", type=int, default=None,
                    help="crescent's fixed busy-poll window, microseconds (0: no polling; "
                    "unset: its adaptive default)")
    a = ap.parse_args()
    if a.rounds < 1 or a.duration <= 0 or a.batch < 1 or min(a.value_sizes) < 1 or a.lease_ms < 1:
        ap.error("--rounds, --duration, --batch, --value-sizes and --lease-ms must be positive")
    if not all(1 <= t <= 64 for t in a.threads):
        ap.error("--threads must lie in 1..64")
    if a.crescent_busy_poll_us is not None and not 0 <= a.crescent_busy_poll_us <= 10000:
        ap.error("--crescent-busy-poll-us must lie in 0..10000")
    if max(a.value_sizes) * (64 + a.batch * max(a.threads)) > a.segment // 2:
        ap.error("--segment is too small for the largest value: 64 values to read and a batch "
                 "per thread in flight must fit in half of it (16M values, 8 threads: 8G)")
    configs = [(size, t) for size in a.value_sizes for t in a.threads]
    with tempfile.TemporaryDirectory(prefix="crescent-vs-mooncake-") as pkg_dir:
        impls = [crescent_impl(a.crescent_build, a.crescent_busy_poll_us),
                 mooncake_impl(a.mooncake_build, pkg_dir)]
        for impl in impls:
            for path in (impl.master, impl.engine_cmd):
                if not os.access(path, os.X_OK):
                    sys.exit("%s: %s is not an executable" % (impl.name, path))
        store = {i.name: {(c, r): [] for c in configs for r in STORE_ROWS} for i in impls}
        engine = {i.name: {c: [] for c in ENGINE_CASES} for i in impls}
        floor = {f: [] for f in FLOORS}
        for rnd in range(a.rounds):
            if not a.skip_floor:
                got = floors(a.crescent_build, a.duration)
                for f in FLOORS:
                    floor[f].append(got[f])
                print("round %d floors: socket GB/s 1 stream %.3f, 2 streams %.3f; into fresh "
                      "pages 1 stream %.3f, 2 streams %.3f; 4 KiB ping-pong %.0f round trips/s"
                      % tuple([rnd + 1] + [got[f] for f in FLOORS]), flush=True)
            for impl in impls:
                if not a.skip_store:
                    got = store_round(impl, a, configs)
                    for c in configs:
                        for r in STORE_ROWS:
                            store[impl.name][(c, r)].append(got[c][r] / 1e6)
                        print("round %d %-8s store MB/s, %s values, %d thread(s): %s" % (
                            rnd + 1, impl.name, fmt_size(c[0]), c[1],
                            ", ".join("%s %.0f" % (r, got[c][r] / 1e6) for r in STORE_ROWS)),
                            flush=True)
                if not a.skip_engine:
                    run = crescent_engine if impl.name == "crescent" else mooncake_engine
                    for c in ENGINE_CASES:
                        engine[impl.name][c].append(run(impl, *c, a.duration))
                    print("round %d %-8s engine requests/s: %s" % (
                        rnd + 1, impl.name, ", ".join(
                            "%s %s x%d %.0f" % (c[0], fmt_size(c[1]), c[2],
                                                engine[impl.name][c][-1])
                            for c in ENGINE_CASES)), flush=True)
        print()
        print("%-40s %10s %10s %7s   per round (crescent / mooncake)" % (
            "call (tcp, medians)", "crescent", "mooncake", "ratio"))
        if not a.skip_store:
            for c in configs:
                for r in STORE_ROWS:
                    cv, mv = store["crescent"][(c, r)], store["mooncake"][(c, r)]
                    label = "%s %s%s, %d thr, MB/s" % (
                        r, fmt_size(c[0]), " x%d" % a.batch if r.startswith("batch") else "",
                        c[1])
                    print("%-40s %10.0f %10.0f %7.2f   %s" % (
                        label, median(cv), median(mv), median(cv) / median(mv),
                        " ".join("%.2f" % (x / y) for x, y in zip(cv, mv))))
        if not a.skip_engine:
            for case in ENGINE_CASES:
                cv, mv = engine["crescent"][case], engine["mooncake"][case]
                label = "engine %s %s x%d req/s" % (case[0], fmt_size(case[1]), case[2])
                print("%-40s %10.0f %10.0f %7.2f   %s" % (
                    label, median(cv), median(mv), median(cv) / median(mv),
                    " ".join("%.2f" % (x / y) for x, y in zip(cv, mv))))
            cv = median(engine["crescent"][ENGINE_CASES[0]])
            mv = median(engine["mooncake"][ENGINE_CASES[0]])
            print("4 KiB read, mean latency: crescent %.1f us, mooncake %.1f us" % (1e6 / cv,
                                                                                   1e6 / mv))
        if not a.skip_floor:
            report_floors(a, configs, store, engine, floor)
    return 0


def report_floors(a, configs, store, engine, floor):
    """The floors' medians, and what they allow each row: floor / Mooncake."""
    f = {k: median(v) for k, v in floor.items()}
    warm, fresh = max(f["tcp_socket"], f["tcp_socket_2_streams"]), max(
        f["tcp_socket_fresh_pages"], f["tcp_socket_fresh_pages_2_streams"])
    print()
    print("floors (plain sockets, medians): 1 MiB stream %.3f GB/s, two streams %.3f GB/s; into "
          "never-written pages %.3f / %.3f GB/s; 4 KiB ping-pong %.0f round trips/s (%.1f us)" % (
              f["tcp_socket"], f["tcp_socket_2_streams"], f["tcp_socket_fresh_pages"],
              f["tcp_socket_fresh_pages_2_streams"], f["tcp_pingpong"],
              1e6 / f["tcp_pingpong"]))
    big = [c for c in configs if c[0] >= (1 << 20)]
    if not a.skip_store and big:
        print("%-40s %10s %10s %10s %9s" % ("call (tcp, medians)", "crescent", "floor",
                                             "x floor", "ceiling"))
        for c in big:
            for r in STORE_ROWS:
                cv, mv = median(store["crescent"][(c, r)]), median(store["mooncake"][(c, r)])
                label = "%s %s%s, %d thr, MB/s" % (
                    r, fmt_size(c[0]), " x%d" % a.batch if r.startswith("batch") else "", c[1])
                print("%-40s %10.0f %10.0f %10.2f %9.2f" % (label, cv, warm * 1000,
                                                          cv / (warm * 1000), warm * 1000 / mv))
        print("(ceiling: the floor over Mooncake's median, the ratio of a transport as fast as "
              "plain sockets; tuned transports can pass it with large batches; puts into a "
              "freshly mounted, lazily committed holder meet the never-written-pages floor "
              "first: %.2f x Mooncake's put, %.2f x its batch_put_from, %s values, %d thr)" % (
                  fresh * 1000 / median(store["mooncake"][(big[0], "put")]),
                  fresh * 1000 / median(store["mooncake"][(big[0], "batch_put_from")]),
                  fmt_size(big[0][0]), big[0][1]))
    if not a.skip_engine:
        cv = median(engine["crescent"][ENGINE_CASES[0]])
        mv = median(engine["mooncake"][ENGINE_CASES[0]])
        print("4 KiB read one at a time: crescent %.2f x the ping-pong's round trips/s, Mooncake "
              "%.2f x" % (cv / f["tcp_pingpong"], mv / f["tcp_pingpong"]))


def fmt_size(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, unit)
    return str(n)


if __name__ == "__main__":
    sys.exit(main())
