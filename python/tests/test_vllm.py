"""vLLM's two Mooncake connectors (api-contract.md §2.1, §2.2).

Store connector (v1/mooncake/store/worker.py): config from the JSON file named
by MOONCAKE_CONFIG_PATH, 7-positional setup, register_buffer per KV storage,
batch_is_exist before saving, batch_put_from_multi_buffers(keys, addrs, sizes,
rc) with a positional config, batch_get_into_multi_buffers from several
receive threads, remove_all(force=True), close.

P2P connector (v1/mooncake/mooncake_connector.py): TransferEngine(),
initialize(ip, "P2PHANDSHAKE", protocol, device), get_rpc_port() -> session,
batch_register_memory(ptrs, lens), batch_transfer_sync_write(session, src,
dst, lens) from a ThreadPoolExecutor (num_workers=10) into another process.
"""

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import torch_or_none
from mooncake.engine import TransferEngine
from mooncake.mooncake_config import MooncakeConfig
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

MiB = 1 << 20
torch = torch_or_none()

N_LAYERS = 4
BLOCK = 16 * 1024  # bytes of one block in one layer
N_BLOCKS = 32


def make_kv_caches(use_torch):
    if use_torch:
        return [torch.randint(0, 255, (N_BLOCKS * BLOCK,), dtype=torch.uint8)
                for _ in range(N_LAYERS)]
    rng = np.random.default_rng(11)
    return [rng.integers(0, 255, N_BLOCKS * BLOCK, dtype=np.uint8) for _ in range(N_LAYERS)]


def base_addr(t):
    return t.data_ptr() if hasattr(t, "data_ptr") else t.ctypes.data


class VllmStoreWorker:
    def __init__(self, kv_caches):
        cfg = MooncakeConfig.load_from_env()
        self.store = MooncakeDistributedStore()
        host = os.environ.get("MOONCAKE_REQUESTER_LOCAL_HOSTNAME", "127.0.0.1")
        ret = self.store.setup(host, cfg.metadata_server, cfg.global_segment_size,
                               cfg.local_buffer_size, cfg.protocol, cfg.device_name,
                               cfg.master_server_address)
        if ret != 0:
            raise RuntimeError(f"setup failed {ret}")
        self.rc = ReplicateConfig()
        pref = os.environ.get("MOONCAKE_PREFERRED_SEGMENT")
        if pref:
            self.rc.preferred_segment = pref
        self.kv = kv_caches
        for t in kv_caches:
            ret = self.store.register_buffer(base_addr(t), t.numel() if hasattr(t, "numel")
                                             else t.nbytes)
            assert ret == 0

    def block_addrs(self, block):
        return [base_addr(t) + block * BLOCK for t in self.kv], [BLOCK] * N_LAYERS

    def save(self, keys, blocks):
        exists = self.store.batch_is_exist(keys)
        todo = [(k, b) for k, b, e in zip(keys, blocks, exists) if e != 1]
        if not todo:
            return []
        addrs, sizes = zip(*(self.block_addrs(b) for _, b in todo))
        res = self.store.batch_put_from_multi_buffers([k for k, _ in todo], list(addrs),
                                                      list(sizes), self.rc)
        assert all(r == 0 for r in res), res
        return [k for k, _ in todo]

    def load(self, keys, blocks):
        addrs, sizes = zip(*(self.block_addrs(b) for b in blocks))
        return self.store.batch_get_into_multi_buffers(keys, list(addrs), list(sizes))

    def close(self):
        self.store.close()


@pytest.fixture
def config_file(master, tmp_path, monkeypatch):
    path = tmp_path / "mooncake.json"
    path.write_text(json.dumps({
        "local_hostname": "127.0.0.1",
        "metadata_server": "P2PHANDSHAKE", "master_server_address": master,
        "protocol": "rdma", "device_name": "", "global_segment_size": "64MB",
        "local_buffer_size": "16MB"}))
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(path))
    return path


@pytest.mark.parametrize("use_torch", [False, pytest.param(True, marks=pytest.mark.skipif(
    torch is None, reason="torch not installed"))])
def test_store_connector(config_file, use_torch, monkeypatch):
    kv = make_kv_caches(use_torch)
    w = VllmStoreWorker(kv)
    monkeypatch.setenv("MOONCAKE_PREFERRED_SEGMENT", w.store.get_hostname())
    w2 = VllmStoreWorker(make_kv_caches(use_torch))  # a second rank: different data
    keys = [f"vllm/{use_torch}/blk{b}" for b in range(N_BLOCKS)]
    assert w.save(keys[:20], range(20)) == keys[:20]
    assert w.save(keys, range(N_BLOCKS)) == keys[20:]  # dedup via batch_is_exist
    assert w.store.batch_is_exist(keys + ["vllm/none"]) == [1] * N_BLOCKS + [0]

    # Several receive threads load into rank 2's caches.
    def recv(part):
        ks = keys[part::4]
        bs = list(range(N_BLOCKS))[part::4]
        res = w2.load(ks, bs)
        assert res == [BLOCK * N_LAYERS] * len(ks), res

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(recv, range(4)))
    for a, b in zip(w.kv, w2.kv):
        if use_torch:
            assert torch.equal(a, b)
        else:
            assert (a == b).all()
    assert w2.load(["vllm/none"], [0]) == [-704]
    assert w.store.remove_all(force=True) == N_BLOCKS
    assert w.store.batch_is_exist(keys[:1]) == [0]
    w2.close()
    w.close()


def test_store_connector_send_and_recv_threads(config_file):
    w = VllmStoreWorker(make_kv_caches(False))
    stop = threading.Event()
    errors = []

    def sender():
        i = 0
        while not stop.is_set():
            k = f"vllm/threads/{i}"
            try:
                w.save([k], [i % N_BLOCKS])
            except AssertionError as e:
                errors.append(("save", k, e))
            i += 1

    def receiver(j):
        while not stop.is_set():
            res = w.load([f"vllm/threads/{j}"], [N_BLOCKS - 1])
            # A miss (-704), a put still in flight (-703), or a read whose
            # lease (200 ms in this cluster) ran out before its transfer
            # finished on a slow, loaded machine (-707: the bytes are not
            # returned) is a cache miss for vLLM; anything else is an error.
            if res[0] not in (BLOCK * N_LAYERS, -704, -703, -707):
                errors.append(("load", j, res))

    threads = [threading.Thread(target=sender)] + [threading.Thread(target=receiver, args=(j,))
                                                    for j in range(3)]
    for t in threads:
        t.start()
    threading.Event().wait(0.5)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    w.store.remove_all(force=True)
    w.close()


P2P_DECODE = r"""
import numpy as np
from mooncake.engine import TransferEngine
te = TransferEngine()
assert te.initialize("127.0.0.1", "P2PHANDSHAKE", ARGS[0], "") == 0
n, size = int(ARGS[1]), int(ARGS[2])
caches = [np.zeros(size, dtype=np.uint8) for _ in range(n)]
assert te.batch_register_memory([c.ctypes.data for c in caches], [size] * n) == 0
print(json.dumps({"session": "127.0.0.1:%d" % te.get_rpc_port(),
                  "addrs": [c.ctypes.data for c in caches]}), flush=True)
sys.stdin.readline()
print(json.dumps([int(c.astype(np.uint64).sum()) for c in caches]), flush=True)
assert te.batch_unregister_memory([c.ctypes.data for c in caches]) == 0
"""


@pytest.mark.parametrize("protocol", ["rdma", "tcp"])
def test_p2p_connector(child, protocol):
    n, size, chunk = 4, 4 * MiB, 256 * 1024
    decode = child(P2P_DECODE, args=[protocol, str(n), str(size)])
    info = json.loads(decode.readline())
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", protocol, "") == 0
    assert te.get_rpc_port() > 0
    rng = np.random.default_rng(5)
    prefill = [rng.integers(0, 255, size, dtype=np.uint8) for _ in range(n)]
    assert te.batch_register_memory([p.ctypes.data for p in prefill], [size] * n) == 0

    def send(job):
        layer, start = job
        src = [prefill[layer].ctypes.data + start + k * chunk for k in range(4)]
        dst = [info["addrs"][layer] + start + k * chunk for k in range(4)]
        return te.batch_transfer_sync_write(info["session"], src, dst, [chunk] * 4)

    jobs = [(layer, s) for layer in range(n) for s in range(0, size, 4 * chunk)]
    with ThreadPoolExecutor(max_workers=10) as pool:
        assert set(pool.map(send, jobs)) == {0}
    stats = te._e.stats()
    assert stats["bytes_tcp" if protocol == "tcp" else "bytes_cma"] == n * size
    decode.send("check")
    sums = json.loads(decode.readline())
    assert sums == [int(p.astype(np.uint64).sum()) for p in prefill]
    decode.finish()
    assert te.batch_unregister_memory([p.ctypes.data for p in prefill]) == 0
    te.close()
