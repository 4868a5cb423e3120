"""SGLang's HiCache Mooncake backend and PD-disaggregation engine
(api-contract.md §2.4, §2.5).

HiCache: setup(host, metadata, per-rank segment, 16 MiB, protocol, device,
master, transfer_engine_or_None, **extra) -- the 8th positional engine, and
the retry loop that drops a keyword named in a TypeError; warm-up put /
is_exist / get; register_buffer of the host KV pool; batch_is_exist;
batch_put_from (with a 4th positional ReplicateConfig carrying group_ids);
batch_put_from_multi_buffers; batch_get_into (success > 0);
batch_get_into_multi_buffers; remove_all() without arguments.

PD: TransferEngine initialize(host, "P2PHANDSHAKE", protocol, device or ""),
MC_FORCE_TCP, session "host:get_rpc_port()", register_memory /
unregister_memory, transfer_sync_write, batch_transfer_sync_write,
send_probe, get_engine() handed to the HiCache store.
"""

import json
import uuid

import numpy as np
import pytest

from mooncake.engine import TransferEngine
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

MiB = 1 << 20
PAGE = 8 * 1024


def setup_with_fallback(store, args, kwargs):
    """SGLang: drop any keyword a TypeError names and try again."""
    kwargs = dict(kwargs)
    dropped = []
    while True:
        try:
            return store.setup(*args, **kwargs), dropped
        except TypeError as e:
            names = [k for k in kwargs if k in str(e)]
            if not names:
                raise
            for k in names:
                kwargs.pop(k)
                dropped.append(k)


class HiCacheStore:
    def __init__(self, master, transfer_engine=None, extra=None):
        self.store = MooncakeDistributedStore()
        args = ("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 16 * MiB, "tcp", "", master,
                transfer_engine)
        ret, self.dropped = setup_with_fallback(self.store, args, extra or {})
        if ret != 0:
            raise RuntimeError(f"setup failed: {ret}")
        self.warmup()

    def warmup(self):
        key = "sglang_mooncake_store_warmup_key" + uuid.uuid4().hex
        value = bytes(4 * 1024)
        for _ in range(10):
            if self.store.put(key, value) == 0:
                break
        assert self.store.is_exist(key) == 1
        assert self.store.get(key) == value


def test_hicache_setup_variants(master):
    # Known keywords pass; a keyword this version lacks is dropped after a TypeError.
    hc = HiCacheStore(master, None, {"enable_client_http_server": False,
                                     "client_http_port": 9300, "tenant_id": "default",
                                     "enable_ssd_offload": False, "ssd_offload_path": "",
                                     "some_future_option": True})
    assert hc.dropped == ["some_future_option"]
    hc.store.close()
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    hc2 = HiCacheStore(master, te.get_engine())  # 8th positional engine
    # The store runs on that engine: same RPC port, bytes through it.
    assert hc2.store._s.engine_rpc_port == te.get_rpc_port()
    assert hc2.store.put("sgl/shared-engine", b"x" * 5000) == 0
    assert hc2.store.get("sgl/shared-engine") == b"x" * 5000
    with pytest.raises(RuntimeError, match="in use by a store"):
        te._e.close()  # the engine outlives the store that borrows it
    hc2.store.close()
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 16 * MiB, "tcp", "", master,
                   engine=te.get_engine()) == 0
    assert s._s.engine_rpc_port == te.get_rpc_port()
    s.close()
    bad = MooncakeDistributedStore()
    assert bad.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 16 * MiB, "tcp", "", master,
                     engine=object()) == -600
    te.close()


def test_hicache_data_path(master):
    hc = HiCacheStore(master)
    s = hc.store
    pool = np.random.default_rng(1).integers(0, 255, 256 * PAGE, dtype=np.uint8)
    assert s.register_buffer(pool.ctypes.data, pool.nbytes) == 0
    keys = [f"sgl/{i}" for i in range(64)]
    assert s.batch_is_exist(keys) == [0] * 64
    ptrs = [pool.ctypes.data + i * PAGE for i in range(64)]
    assert s.batch_put_from(keys[:32], ptrs[:32], [PAGE] * 32) == [0] * 32
    rc = ReplicateConfig()
    rc.group_ids = [f"g{i % 4}" for i in range(32)]
    assert s.batch_put_from(keys[32:], ptrs[32:], [PAGE] * 32, rc) == [0] * 32
    # MLA-style: K and V halves of one page from two places.
    mkeys = [f"sgl/m{i}" for i in range(16)]
    ptrs2 = [[pool.ctypes.data + i * PAGE, pool.ctypes.data + (128 + i) * PAGE]
             for i in range(16)]
    assert s.batch_put_from_multi_buffers(mkeys, ptrs2, [[PAGE, PAGE]] * 16, ReplicateConfig()) \
        == [0] * 16
    assert s.batch_is_exist(keys + mkeys) == [1] * 80
    # Load into the other half of the pool.
    dst = [pool.ctypes.data + (64 + i) * PAGE for i in range(64)]
    res = s.batch_get_into(keys, dst, [PAGE] * 64)
    assert all(r > 0 for r in res) and res == [PAGE] * 64
    assert (pool[64 * PAGE:128 * PAGE] == pool[:64 * PAGE]).all()
    dst2 = [[pool.ctypes.data + (200 + i) * PAGE, pool.ctypes.data + (216 + i) * PAGE]
            for i in range(16)]
    assert s.batch_get_into_multi_buffers(mkeys, dst2, [[PAGE, PAGE]] * 16) == [2 * PAGE] * 16
    for i in range(16):
        assert (pool[(200 + i) * PAGE:(201 + i) * PAGE] == pool[i * PAGE:(i + 1) * PAGE]).all()
    assert s.remove_all() >= 0  # no arguments (leased keys may be skipped)
    s.remove_all(force=True)
    assert s.batch_is_exist(keys[:2]) == [0, 0]
    assert s.unregister_buffer(pool.ctypes.data) == 0
    s.close()


PD_DECODE = r"""
import numpy as np
from mooncake.engine import TransferEngine
te = TransferEngine()
assert te.initialize("127.0.0.1", "P2PHANDSHAKE", ARGS[0], "") == 0
buf = np.zeros(int(ARGS[1]), dtype=np.uint8)
assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0
print(json.dumps({"session": "127.0.0.1:%d" % te.get_rpc_port(), "addr": buf.ctypes.data}),
      flush=True)
sys.stdin.readline()
print(json.dumps(buf[:int(ARGS[2])].tobytes().hex()), flush=True)
assert te.unregister_memory(buf.ctypes.data) == 0
"""


@pytest.mark.parametrize("force_tcp", [False, True])
def test_pd_transfer(child, monkeypatch, force_tcp):
    if force_tcp:
        monkeypatch.setenv("MC_FORCE_TCP", "1")
    n = 64 * 1024
    decode = child(PD_DECODE, args=["rdma", str(MiB), str(n)],
                   env={"MC_FORCE_TCP": "1"} if force_tcp else None)
    info = json.loads(decode.readline())
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0
    assert te.send_probe(info["session"]) == 0
    src = np.random.default_rng(2).integers(0, 255, n, dtype=np.uint8)
    assert te.register_memory(src.ctypes.data, src.nbytes) == 0
    assert te.transfer_sync_write(info["session"], src.ctypes.data, info["addr"], 4096) == 0
    bufs = [src.ctypes.data + off for off in range(4096, n, 4096)]
    peers = [info["addr"] + off for off in range(4096, n, 4096)]
    assert te.batch_transfer_sync_write(info["session"], bufs, peers, [4096] * len(bufs)) == 0
    stats = te._e.stats()  # the protocol asked for is the one used
    if force_tcp:
        assert stats["bytes_tcp"] == n and stats["bytes_cma"] + stats["bytes_shm"] == 0
    else:
        assert stats["bytes_tcp"] == 0 and stats["bytes_cma"] + stats["bytes_shm"] == n
    decode.send("check")
    assert bytes.fromhex(json.loads(decode.readline())) == src.tobytes()
    decode.finish()
    # The peer is gone: probe and transfers fail with negative codes.
    assert te.send_probe(info["session"]) < 0
    assert te.transfer_sync_write(info["session"], src.ctypes.data, info["addr"], 16) < 0
    assert te.unregister_memory(src.ctypes.data) == 0
    te.close()
