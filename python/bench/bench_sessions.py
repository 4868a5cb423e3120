#!/usr/bin/python3
"""Layer-wise reads: one get session and a ranged read per layer vs one
object per (block, layer) read with batch_get_into per layer.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/bench_sessions.py \
        [--blocks 128] [--layers 16] [--page 4096] [--reps 5]

Processes (127.0.0.1, P2PHANDSHAKE, protocol tcp): a crescent-master
(spawned), a writer client holding the values, and a reader client, both in
this process (their own engines and connections). The session path opens one
get session for all blocks (one master call), reads each layer's page of
every block with batch_get_into_multi_buffer_ranges (no master call) and ends
the session; the baseline reads layer l of every block as separate objects
"blk<k>/L<l>" with one batch_get_into per layer (one master call per layer).
Every byte is checked. Prints milliseconds per full load for both, per rep.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from conftest import Server  # noqa: E402
from mooncake import cli  # noqa: E402
from mooncake.store import MooncakeDistributedStore  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=128)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--page", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    K, L, P = a.blocks, a.layers, a.page
    srv = Server([cli.find_binary(cli.MASTER), "--rpc_port=0", "--metrics_port=0",
                  "--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1"],
                 r"listening on (\S+) \(metrics (\S+)\)")
    m = srv.match.group(1)
    w, r = MooncakeDistributedStore(), MooncakeDistributedStore()
    assert w.setup("127.0.0.1", "P2PHANDSHAKE", 4 * K * L * P + (64 << 20), 16 << 20, "tcp",
                   "", m) == 0
    assert r.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", m) == 0
    src = np.random.default_rng(1).integers(0, 255, K * L * P, dtype=np.uint8)
    dst = np.zeros_like(src)
    assert w.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert r.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    keys = [f"blk{k}" for k in range(K)]
    at = lambda base, k, layer: base.ctypes.data + (k * L + layer) * P  # noqa: E731
    assert w.batch_put_session_start(keys, [L * P] * K) == [0] * K
    for layer in range(L):
        assert w.batch_put_from_multi_buffer_ranges(keys, [[at(src, k, layer)] for k in range(K)],
                                                    [[P]] * K, [[layer * P]] * K) == [P] * K
    assert w.batch_put_session_end(keys) == [0] * K
    for layer in range(L):
        assert w.batch_put_from([f"blk{k}/L{layer}" for k in range(K)],
                                [at(src, k, layer) for k in range(K)], [P] * K) == [0] * K
    for rep in range(a.reps):
        dst[:] = 0
        t0 = time.perf_counter()
        assert r.batch_get_session_start(keys) == [0] * K
        for layer in range(L):
            assert r.batch_get_into_multi_buffer_ranges(
                keys, [[at(dst, k, layer)] for k in range(K)], [[P]] * K,
                [[layer * P]] * K) == [P] * K
        r.batch_get_session_end(keys)
        t1 = time.perf_counter()
        assert (dst == src).all()
        dst[:] = 0
        t2 = time.perf_counter()
        for layer in range(L):
            assert r.batch_get_into([f"blk{k}/L{layer}" for k in range(K)],
                                    [at(dst, k, layer) for k in range(K)], [P] * K) == [P] * K
        t3 = time.perf_counter()
        assert (dst == src).all()
        print(f"rep {rep}: session {1e3 * (t1 - t0):.1f} ms, per-layer objects "
              f"{1e3 * (t3 - t2):.1f} ms ({K} blocks x {L} layers x {P} B)")
    w.close()
    r.close()
    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
