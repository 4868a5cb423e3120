"""LMCache's mooncakestore connector (api-contract.md §2.6): 7-positional setup
(return not checked), ReplicateConfig(replica_num=1, preferred_segment =
get_hostname()), register_buffer(pinned_ptr, numel) / unregister_buffer,
is_exist used as a truth value, batch_get_into via asyncio.to_thread (<= 0 is
a miss), batch_get_buffer consumed through memoryview / torch.frombuffer
(None on a miss), put_from(key, ptr, size, rc) with a positional config,
put_parts(key, meta_bytes, kv_bytes), close()."""

import asyncio
import os
import struct

import numpy as np
import pytest

import crescent
from conftest import torch_or_none
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

MiB = 1 << 20
CHUNK = 64 * 1024
torch = torch_or_none()


class LMCacheConnector:
    def __init__(self, master, prefer_local=True):
        self.store = MooncakeDistributedStore()
        rc = self.store.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 16 * MiB, "tcp", "", master)
        if rc != 0:  # LMCache does not check it; a test that fails later says why here
            print("setup returned %d: %s" % (rc, crescent.last_error_message()), flush=True)
        self.rc = ReplicateConfig()
        self.rc.replica_num = 1
        if prefer_local:
            self.rc.preferred_segment = self.store.get_hostname()
        self.pinned = np.zeros(16 * CHUNK, dtype=np.uint8)  # "pinned" staging buffer
        self.store.register_buffer(self.pinned.ctypes.data, self.pinned.size)

    def put_chunk(self, key, kv: bytes, meta: dict):
        meta_bytes = struct.pack("<QQ", meta["layer"], len(kv))
        return self.store.put_parts(key, meta_bytes, kv)

    def put_zero_copy(self, key, data: np.ndarray, slot: int):
        self.pinned[slot * CHUNK:slot * CHUNK + data.size] = data
        return self.store.put_from(key, self.pinned.ctypes.data + slot * CHUNK, data.size,
                                   self.rc)

    async def batched_get(self, keys):
        ptrs = [self.pinned.ctypes.data + i * CHUNK for i in range(len(keys))]
        res = await asyncio.to_thread(self.store.batch_get_into, keys, ptrs, [CHUNK] * len(keys))
        return [None if r <= 0 else self.pinned[i * CHUNK:i * CHUNK + r].tobytes()
                for i, r in enumerate(res)]

    def close(self):
        self.store.unregister_buffer(self.pinned.ctypes.data)
        self.store.close()


def test_put_parts_and_batch_get_buffer(master):
    c = LMCacheConnector(master)
    kv = [os.urandom(CHUNK - 16) for _ in range(8)]
    for i, v in enumerate(kv):
        assert c.put_chunk(f"lm/p{i}", v, {"layer": i}) == 0
    assert c.store.is_exist("lm/p0") and not c.store.is_exist("lm/none")
    handles = c.store.batch_get_buffer([f"lm/p{i}" for i in range(8)] + ["lm/none"])
    assert handles[-1] is None
    for i, h in enumerate(handles[:-1]):
        mv = memoryview(h)
        layer, n = struct.unpack("<QQ", mv[:16])
        assert layer == i and n == len(kv[i]) and mv[16:].tobytes() == kv[i]
        assert h.size() == CHUNK and h.ptr() != 0
        arr = np.frombuffer(h, dtype=np.uint8)
        assert arr.size == CHUNK
        if torch is not None:
            t = torch.frombuffer(h, dtype=torch.uint8)
            assert t.numel() == CHUNK and bytes(t[16:32].numpy()) == kv[i][:16]
    c.close()


def test_put_from_positional_config_and_async_get(master):
    c = LMCacheConnector(master)
    rng = np.random.default_rng(4)
    datas = [rng.integers(0, 255, CHUNK // 2, dtype=np.uint8) for _ in range(6)]
    for i, d in enumerate(datas):
        assert c.put_zero_copy(f"lm/z{i}", d, i) == 0
    c.pinned[:] = 0

    first = asyncio.run(c.batched_get([f"lm/z{i}" for i in range(3)] + ["lm/none"]))
    assert first[:3] == [d.tobytes() for d in datas[:3]] and first[3] is None
    second = asyncio.run(c.batched_get([f"lm/z{i}" for i in range(3, 6)]))
    assert second == [d.tobytes() for d in datas[3:]]
    c.close()


CHILD_PUT = r"""
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", MASTER) == 0
for i in range(4):
    assert s.put_parts("lmx/%d" % i, b"meta%d" % i, bytes([i]) * 100000) == 0
print(s.get_hostname(), flush=True)
sys.stdin.readline()
s.close()
"""


def test_cross_process_reads(master, child):
    writer = child(CHILD_PUT, master)
    writer_host = writer.readline()
    c = LMCacheConnector(master, prefer_local=False)
    assert c.store.get_hostname() != writer_host
    hs = c.store.batch_get_buffer([f"lmx/{i}" for i in range(4)])
    for i, h in enumerate(hs):
        b = bytes(memoryview(h))
        assert b == b"meta%d" % i + bytes([i]) * 100000
    writer.send("quit")
    writer.finish()
    # The writer's segment is gone with it.
    assert c.store.batch_get_buffer(["lmx/0"]) == [None]
    assert not c.store.is_exist("lmx/0")
    c.close()


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_torch_sources_and_destinations(master):
    c = LMCacheConnector(master)
    s = c.store
    t = torch.arange(4096, dtype=torch.float16)
    rc = s.put("lm/t", t)  # a contiguous CPU tensor as a value
    assert rc == 0, crescent.last_error_message()
    assert bytes(s.get("lm/t")) == t.numpy().tobytes()
    out = torch.zeros(4096, dtype=torch.float16)
    assert s.register_buffer(out.data_ptr(), out.numel() * out.element_size()) == 0
    assert s.get_into("lm/t", out.data_ptr(), out.numel() * out.element_size()) == 8192
    assert torch.equal(out, t)
    assert s.put_from("lm/t2", out, 8192) == 0  # tensor where a pointer is expected
    assert s.unregister_buffer(out.data_ptr()) == 0
    with pytest.raises(ValueError):
        s.put("lm/t3", t[::2])  # not contiguous
    c.close()
