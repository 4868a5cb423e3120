"""TransferQueue's MooncakeStoreClient call pattern (api-contract.md §1).

The client below mirrors transfer_queue/storage/clients/mooncake_client.py at
HEAD: 7-positional setup, ReplicateConfig with with_hard_pin, puts and gets
split into batches of at most 400 keys run by a ThreadPoolExecutor(4) on ONE
store, each task registering the merged union of its tensors' memory and
passing pointers inside it, batch_upsert_from(..., config=rc) /
batch_get_into with the failed subset retried, batch_remove(keys, force=True)
with -704 treated as success, close().
"""

import pickle
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import torch_or_none
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

MiB = 1 << 20
BATCH_SIZE_LIMIT = 400
torch = torch_or_none()


def merge_contiguous_memory(spans):
    """[(ptr, size)] -> merged [(ptr, size)] regions (tensor_utils.merge_contiguous_memory)."""
    regions = []
    for ptr, size in sorted(spans):
        if regions and ptr <= regions[-1][0] + regions[-1][1]:
            start, length = regions[-1]
            regions[-1] = (start, max(length, ptr + size - start))
        else:
            regions.append((ptr, size))
    return regions


class TQMooncakeClient:
    def __init__(self, config):
        self.rc = ReplicateConfig()
        self.rc.with_hard_pin = bool(config.get("hard_pin", False))
        self._store = MooncakeDistributedStore()
        ret = self._store.setup(config["local_hostname"], config["metadata_server"],
                                config["global_segment_size"], config["local_buffer_size"],
                                config["protocol"], config.get("device_name") or "",
                                config["master_server_address"])
        if ret != 0:
            raise RuntimeError(f"setup failed: {ret}")
        self.retry_sleep = config.get("retry_sleep", 1.0)
        self.retries = []

    def _with_retry(self, op, keys, ptrs, sizes, ok):
        pending = list(range(len(keys)))
        for attempt in range(4):
            res = op([keys[i] for i in pending], [ptrs[i] for i in pending],
                     [sizes[i] for i in pending])
            assert len(res) == len(pending)
            pending = [i for i, r in zip(pending, res) if not ok(r)]
            if not pending:
                return
            self.retries.append((op.__name__, len(pending), res))
            if attempt < 3:
                time.sleep(self.retry_sleep)
        raise RuntimeError(f"{op.__name__}: {len(pending)} keys failed after retries")

    def _task(self, fn, keys, spans):
        regions = merge_contiguous_memory(spans)
        for p, n in regions:
            self._store.register_buffer(p, n)  # return ignored, as in TQ
        try:
            fn(keys, [p for p, _ in spans], [n for _, n in spans])
        finally:
            for p, _ in regions:
                self._store.unregister_buffer(p)

    def _upsert(self, keys, ptrs, sizes):
        up = lambda k, p, s: self._store.batch_upsert_from(k, p, s, config=self.rc)  # noqa: E731
        up.__name__ = "batch_upsert_from"
        self._with_retry(up, keys, ptrs, sizes, lambda r: r == 0)

    def _get(self, keys, ptrs, sizes):
        self._with_retry(self._store.batch_get_into, keys, ptrs, sizes, lambda r: r >= 0)

    def _run(self, fn, keys, spans):
        with ThreadPoolExecutor(max_workers=4) as pool:
            futs = [pool.submit(self._task, fn, keys[i:i + BATCH_SIZE_LIMIT],
                                spans[i:i + BATCH_SIZE_LIMIT])
                    for i in range(0, len(keys), BATCH_SIZE_LIMIT)]
            for f in futs:
                f.result()

    def put(self, tensor_keys, tensor_spans, other_keys, other_spans):
        # Tensor batches and non-tensor batches run concurrently.
        with ThreadPoolExecutor(max_workers=2) as outer:
            a = outer.submit(self._run, self._upsert, tensor_keys, tensor_spans)
            b = outer.submit(self._run, self._upsert, other_keys, other_spans)
            a.result()
            b.result()

    def get(self, keys, spans):
        self._run(self._get, keys, spans)

    def clear(self, keys):
        res = self._store.batch_remove(keys, force=True)
        bad = [r for r in res if r not in (0, -704)]
        assert not bad, bad
        return res

    def close(self):
        self._store.close()
        self._store = None


def _config(master, **kw):
    cfg = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
           "master_server_address": master, "global_segment_size": 128 * MiB,
           "local_buffer_size": 16 * MiB, "protocol": "tcp", "device_name": None}
    cfg.update(kw)
    return cfg


def make_fields(n_tensor, n_other, seed=0):
    """Tensor values as views into a few big buffers (pointers inside regions),
    non-tensor values pickled and packed into one uint8 buffer."""
    rng = np.random.default_rng(seed)
    bigs = [rng.integers(0, 255, size=n_tensor // 3 * 1024 + 4096, dtype=np.uint8)
            for _ in range(3)]
    tensor_keys, tensor_spans, tensor_bytes = [], [], []
    for i in range(n_tensor):
        big = bigs[i % 3]
        off = (i // 3) * 1024
        size = 512 + (i % 5) * 100
        tensor_keys.append(f"tq/{seed}/t{i}")
        tensor_spans.append((big.ctypes.data + off, size))
        tensor_bytes.append(big[off:off + size].tobytes())
    frames = [pickle.dumps({"i": i, "s": "x" * (i % 50), "seed": seed}) for i in range(n_other)]
    packed = np.frombuffer(b"".join(frames), dtype=np.uint8).copy()
    other_keys, other_spans, off = [], [], 0
    for i, fr in enumerate(frames):
        other_keys.append(f"tq/{seed}/o{i}")
        other_spans.append((packed.ctypes.data + off, len(fr)))
        off += len(fr)
    return bigs, packed, (tensor_keys, tensor_spans, tensor_bytes), (other_keys, other_spans,
                                                                       frames)


def alloc_and_get(client, keys, expected):
    out = np.zeros(sum(len(e) for e in expected) + 64, dtype=np.uint8)
    spans, off = [], 0
    for e in expected:
        spans.append((out.ctypes.data + off, len(e)))
        off += len(e)
    client.get(keys, spans)
    off = 0
    for k, e in zip(keys, expected):
        assert out[off:off + len(e)].tobytes() == e, k
        off += len(e)


def test_put_get_upsert_clear(master):
    client = TQMooncakeClient(_config(master, hard_pin=True))
    bigs, packed, (tk, ts, tb), (ok_, os_, ob) = make_fields(900, 500, seed=1)
    client.put(tk, ts, ok_, os_)
    alloc_and_get(client, tk + ok_, tb + ob)
    # Field update: re-putting existing keys overwrites them (upsert semantics).
    bigs[0][:] = 255 - bigs[0]
    tb2 = [bigs[i % 3][(i // 3) * 1024:(i // 3) * 1024 + (512 + (i % 5) * 100)].tobytes()
           for i in range(len(tk))]
    client.put(tk, ts, [], [])
    alloc_and_get(client, tk, tb2)
    assert client.retries == []
    assert set(client.clear(tk + ok_)) == {0}
    assert set(client.clear(tk[:10])) == {-704}  # already gone: still fine for TQ
    client.close()


def test_concurrent_overlapping_registrations(master):
    """Threads registering identical, adjacent and overlapping merged regions."""
    client = TQMooncakeClient(_config(master))
    store = client._store
    big = np.random.default_rng(3).integers(0, 255, size=4 * MiB, dtype=np.uint8)
    base = big.ctypes.data
    windows = [(0, MiB), (0, MiB), (MiB, MiB), (MiB // 2, MiB), (3 * MiB, MiB), (0, 4 * MiB)]
    errors = []

    def worker(w, rounds=15):
        off, size = windows[w % len(windows)]
        for r in range(rounds):
            keys = [f"ov/{w}/{r}/{j}" for j in range(20)]
            ptrs = [base + off + j * 4096 for j in range(20)]
            sizes = [4096] * 20
            assert store.register_buffer(base + off, size) == 0
            try:
                res = store.batch_upsert_from(keys, ptrs, sizes, config=client.rc)
                if any(x != 0 for x in res):
                    errors.append(res)
            finally:
                assert store.unregister_buffer(base + off) == 0

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    out = np.zeros(4096, np.uint8)
    assert store.register_buffer(out.ctypes.data, out.nbytes) == 0
    off = windows[3][0]
    assert store.batch_get_into(["ov/3/14/5"], [out.ctypes.data], [4096]) == [4096]
    assert out.tobytes() == big[off + 5 * 4096:off + 6 * 4096].tobytes()
    store.unregister_buffer(out.ctypes.data)
    client.close()


def test_retry_of_failed_subset(master):
    """A put that runs out of space (-200) succeeds on retry once space is freed."""
    client = TQMooncakeClient(_config(master, global_segment_size=8 * MiB, hard_pin=True,
                                      retry_sleep=0.5))
    store = client._store
    filler = np.zeros(MiB, np.uint8)
    store.register_buffer(filler.ctypes.data, filler.nbytes)
    pins = [f"fill/{i}" for i in range(64)]
    res = store.batch_upsert_from(pins, [filler.ctypes.data] * 64, [MiB] * 64, config=client.rc)
    assert -200 in res  # the 8 MiB segment is full
    filled = [k for k, r in zip(pins, res) if r == 0]

    def free_space_soon():
        # Free the space once the first attempt has failed (not after a fixed
        # delay: on a loaded machine the put may start late).
        deadline = time.monotonic() + 30
        while not client.retries and time.monotonic() < deadline:
            time.sleep(0.001)
        store.batch_remove(filled, force=True)

    data = np.arange(64 * 1024, dtype=np.uint8)
    t = threading.Thread(target=free_space_soon)
    t.start()
    client.put([f"retry/{i}" for i in range(16)],
               [(data.ctypes.data + i * 4096, 4096) for i in range(16)], [], [])
    t.join()
    assert client.retries and client.retries[0][0] == "batch_upsert_from"
    assert any(r == -200 for r in client.retries[0][2])
    alloc_and_get(client, [f"retry/{i}" for i in range(16)],
                  [data[i * 4096:(i + 1) * 4096].tobytes() for i in range(16)])
    store.unregister_buffer(filler.ctypes.data)
    client.close()


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_torch_tensors(master):
    client = TQMooncakeClient(_config(master))
    big = torch.arange(0, 300 * 256, dtype=torch.float32)
    views = [big[i * 256:(i + 1) * 256] for i in range(300)]
    keys = [f"tqt/{i}" for i in range(300)]
    spans = [(v.data_ptr(), v.numel() * v.element_size()) for v in views]
    client.put(keys, spans, [], [])
    out = torch.empty(300 * 256, dtype=torch.float32)
    outs = [out[i * 256:(i + 1) * 256] for i in range(300)]
    client.get(keys, [(o.data_ptr(), o.numel() * o.element_size()) for o in outs])
    assert torch.equal(out, big)
    client.clear(keys)
    client.close()


CHILD_PUT = r"""
import numpy as np
sys.path.insert(0, ARGS[0])
from test_transferqueue import TQMooncakeClient, _config, make_fields
client = TQMooncakeClient(_config(MASTER))
bigs, packed, (tk, ts, tb), (ok_, os_, ob) = make_fields(300, 200, seed=7)
client.put(tk, ts, ok_, os_)
print("done", flush=True)
sys.stdin.readline()   # keep the segment mounted until the reader is finished
client.close()
"""


def test_cross_process(master, child):
    import os

    writer = child(CHILD_PUT, master, [os.path.dirname(__file__)])
    assert writer.readline() == "done"
    client = TQMooncakeClient(_config(master))
    _, _, (tk, ts, tb), (ok_, os_, ob) = make_fields(300, 200, seed=7)
    alloc_and_get(client, tk + ok_, tb + ob)
    assert set(client.clear(tk + ok_)) == {0}
    writer.send("quit")
    writer.finish()
    client.close()
