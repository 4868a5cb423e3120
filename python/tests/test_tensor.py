"""Tensor APIs of MooncakeDistributedStore (Mooncake's test-only tensor family):
round trips of every dtype the local torch has, shapes, batches, upsert vs put,
tensor-parallel shards, reads into registered memory, zero-copy puts of
serialized tensors, safetensors files, the byte layout, and bad input."""

import json
import struct

import numpy as np
import pytest

from conftest import torch_or_none
from mooncake import tensor_format as tf
from mooncake.store import ReplicateConfig

torch = torch_or_none()
pytestmark = pytest.mark.skipif(torch is None, reason="torch is not installed")

MiB = 1 << 20


def supported_dtypes():
    out = []
    for code, name, st, size in tf.DTYPES:
        dt = getattr(torch, name, None)
        if dt is not None:
            out.append((code, dt, size))
    return out


def sample(dt, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dt == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dt.is_floating_point:
        return (torch.randn(shape, generator=g) * 10).to(dt)
    info = torch.iinfo(dt)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dt)


def same(a, b):
    return a is not None and a.dtype == b.dtype and a.shape == b.shape and \
        bytes(tf._raw(a.contiguous())) == bytes(tf._raw(b.contiguous()))


def test_every_dtype_round_trips(store):
    dts = supported_dtypes()
    # This torch has at least the classic dtypes of the enum.
    assert {c for c, _, _ in dts} >= {0, 1, 2, 3, 4, 6, 8, 10, 11, 12}
    for code, dt, size in dts:
        t = sample(dt, (3, 5), seed=code)
        key = f"dtype/{code}"
        assert store.put_tensor(key, t) == 0
        got = store.get_tensor(key)
        assert same(got, t), dt
        # Object = header (64 bytes for 2 dims) + raw data.
        assert store.get_size(key) == 64 + t.numel() * size
        assert got.element_size() == size


def test_shapes_and_non_contiguous(store):
    cases = {
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 4),
        "one": torch.arange(7, dtype=torch.int32),
        "eight_dims": torch.arange(256, dtype=torch.int16).reshape(2, 2, 2, 2, 2, 2, 2, 2),
        "transposed": torch.arange(12.0).reshape(3, 4).t(),
        "strided": torch.arange(40, dtype=torch.int64)[::3],
        "big": torch.randn(256, 1024),
    }
    for name, t in cases.items():
        assert store.put_tensor("shape/" + name, t) == 0, name
        got = store.get_tensor("shape/" + name)
        assert got is not None and got.shape == t.shape and torch.equal(got, t), name
        assert got.is_contiguous()
    with pytest.raises(ValueError):
        store.put_tensor("shape/nine", torch.zeros([1] * 9))


def test_batch_put_get_and_upsert(store):
    keys = [f"batch/{i}" for i in range(6)]
    ts = [torch.full((i + 1, 3), float(i)) for i in range(6)]
    assert store.batch_put_tensor(keys, ts) == [0] * 6
    got = store.batch_get_tensor(keys + ["batch/missing"])
    assert got[-1] is None
    for g, t in zip(got, ts):
        assert torch.equal(g, t)
    # put keeps an existing key; upsert replaces it.
    assert store.put_tensor(keys[0], torch.ones(9)) == 0
    assert torch.equal(store.get_tensor(keys[0]), ts[0])
    assert store.upsert_tensor(keys[0], torch.ones(9)) == 0
    assert torch.equal(store.get_tensor(keys[0]), torch.ones(9))
    assert store.batch_upsert_tensor(keys[:2], [torch.zeros(2), torch.zeros(3)]) == [0, 0]
    assert [g.numel() for g in store.batch_get_tensor(keys[:2])] == [2, 3]
    # Length mismatch: -600 per key, nothing written.
    assert store.batch_put_tensor(["batch/x", "batch/y"], [torch.ones(1)]) == [-600, -600]
    assert store.is_exist("batch/x") == 0
    assert store.batch_get_tensor([]) == []


def test_pub_tensor_with_config(store_factory):
    a, b = store_factory(), store_factory()
    rc = ReplicateConfig()
    rc.replica_num = 2
    t = torch.randn(4, 4)
    assert a.pub_tensor("pub/1", t, rc) == 0
    assert torch.equal(b.get_tensor("pub/1"), t)
    rc1 = ReplicateConfig()
    rc1.preferred_segment = b.get_hostname()
    assert a.batch_pub_tensor(["pub/2", "pub/3"], [t, t * 2], rc1) == [0, 0]
    assert torch.equal(a.get_tensor("pub/3"), t * 2)
    bad = ReplicateConfig()
    bad.prefer_alloc_in_same_node = True
    bad.replica_num = 2
    assert a.pub_tensor("pub/4", t, bad) == -600


def test_tensor_parallel_split_and_reassembly(store):
    w = torch.arange(8 * 6, dtype=torch.float32).reshape(8, 6)
    assert store.put_tensor_with_tp("tp/w", w, tp_rank=0, tp_size=4, split_dim=0) == 0
    shards = [store.get_tensor_with_tp("tp/w", tp_rank=r, tp_size=4, split_dim=0)
              for r in range(4)]
    assert [tuple(s.shape) for s in shards] == [(2, 6)] * 4
    assert torch.equal(torch.cat(shards, 0), w)
    # The shard keys are base + "_tp_" + rank, readable as plain tensors.
    assert torch.equal(store.get_tensor("tp/w_tp_2"), w[4:6])
    assert store.get_tensor("tp/w") is None  # nothing under the base key
    # Header of a shard records the global shape and its axis.
    h = tf.decode_header(store.get_buffer("tp/w_tp_3"))
    assert h.layout_kind == tf.LAYOUT_SHARD and h.global_shape == (8, 6)
    assert h.axes == (tf.Axis(0, 3, 4),)

    # Columns (negative split_dim), uneven split as torch.chunk does it: 7 -> 2, 2, 2, 1.
    w7 = torch.arange(8 * 7, dtype=torch.float32).reshape(8, 7)
    assert store.put_tensor_with_tp("tp/c", w7, 1, 4, -1) == 0
    cols = store.batch_get_tensor_with_tp(["tp/c"], tp_rank=3, tp_size=4, split_dim=-1)
    assert torch.equal(cols[0], w7[:, 6:])
    parts = [store.get_tensor_with_tp("tp/c", r, 4, -1) for r in range(4)]
    assert [p.shape[1] for p in parts] == [2, 2, 2, 1]
    assert torch.equal(torch.cat(parts, 1), w7)
    # 6 columns give only 3 chunks of 2: refused.
    assert store.put_tensor_with_tp("tp/c6", w, 0, 4, 1) == -600
    # Reading with the wrong split description is refused (None).
    assert store.get_tensor_with_tp("tp/w", 1, 4, split_dim=1) is None

    # Batch forms and tp_size 1 (= plain key).
    assert store.batch_put_tensor_with_tp(["tp/a", "tp/b"], [w, w + 1], 0, 2, 1) == [0, 0]
    got = store.batch_get_tensor_with_tp(["tp/a", "tp/b"], 1, 2, 1)
    assert torch.equal(got[0], w[:, 3:]) and torch.equal(got[1], w[:, 3:] + 1)
    assert store.put_tensor_with_tp("tp/one", w) == 0
    assert torch.equal(store.get_tensor("tp/one"), w)
    assert store.upsert_tensor_with_tp("tp/a", torch.zeros(4, 4), 0, 2, 0) == 0
    assert torch.equal(store.get_tensor_with_tp("tp/a", 1, 2, 0), torch.zeros(2, 4))
    assert store.batch_upsert_tensor_with_tp(["tp/a"], [torch.ones(2, 2)], 0, 2, 0) == [0]
    assert store.pub_tensor_with_tp("tp/p", w, ReplicateConfig(), 0, 2, 0) == 0
    assert store.batch_pub_tensor_with_tp(["tp/q"], [w], None, 0, 2, 0) == [0]

    # Bad parallel descriptions: -600 / None, nothing written.
    assert store.put_tensor_with_tp("tp/bad", w, tp_rank=4, tp_size=4) == -600
    assert store.put_tensor_with_tp("tp/bad", w, tp_rank=0, tp_size=0) == -600
    assert store.put_tensor_with_tp("tp/bad", w, 0, 2, split_dim=2) == -600
    assert store.put_tensor_with_tp("tp/bad", torch.ones(3), 0, 4, 0) == -600  # 3 rows, 4 shards
    assert store.get_tensor_with_tp("tp/w", tp_rank=-1, tp_size=4) is None
    assert store.batch_get_tensor_with_tp(["tp/w"], 0, -2) == [None]
    assert store.is_exist("tp/bad_tp_0") == 0
    with pytest.raises(TypeError):
        store.put_tensor_with_tp("tp/bad", w, tp_rank="0", tp_size=2)
    with pytest.raises(TypeError):
        store.get_tensor_with_tp("tp/w", 0, None)


def test_get_tensor_into_registered_memory(store):
    buf = np.zeros(1 * MiB, np.uint8)
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    t = torch.randn(16, 16)
    assert store.put_tensor("into/1", t) == 0
    got = store.get_tensor_into("into/1", buf.ctypes.data, 4096)
    assert torch.equal(got, t)
    # The tensor views the caller's buffer, after the 64-byte header.
    assert got.data_ptr() == buf.ctypes.data + 64
    buf[64:68] = 0
    assert got[0, 0].item() == 0.0
    # Batch, with a miss and a too-small destination.
    assert store.put_tensor("into/2", torch.arange(10)) == 0
    res = store.batch_get_tensor_into(["into/1", "into/2", "into/none", "into/1"],
                                      [buf.ctypes.data + i * 65536 for i in range(4)],
                                      [65536, 65536, 65536, 100])
    assert torch.equal(res[0], t) and torch.equal(res[1], torch.arange(10))
    assert res[2] is None and res[3] is None
    assert store.get_tensor_into("into/none", buf.ctypes.data, 4096) is None
    # Not a tensor -> None.
    assert store.put("into/bytes", b"plain bytes, no tensor header ....") == 0
    assert store.get_tensor_into("into/bytes", buf.ctypes.data, 4096) is None
    assert store.get_tensor("into/bytes") is None
    # Shards into memory.
    assert store.put_tensor_with_tp("into/w", t, 0, 2, 0) == 0
    s1 = store.get_tensor_with_tp_into("into/w", buf.ctypes.data, 4096, 1, 2, 0)
    assert torch.equal(s1, t[8:])
    s0 = store.batch_get_tensor_with_tp_into(["into/w"], [buf.ctypes.data + 8192], [4096],
                                             0, 2, 0)
    assert torch.equal(s0[0], t[:8])
    with pytest.raises(TypeError):
        store.get_tensor_into_cuda("into/1", 0, 0)
    assert store.get_tensor_into_cuda("into/1", t) == -600  # a CPU tensor is no destination
    assert store.unregister_buffer(buf.ctypes.data) == 0


def test_put_tensor_from_serialized(store):
    buf = np.zeros(64 * 1024, np.uint8)
    ptr = buf.ctypes.data
    assert store.register_buffer(ptr, buf.nbytes) == 0
    t = torch.arange(100, dtype=torch.float64).reshape(10, 10)
    blob = tf.serialize_tensor(t)
    assert len(blob) == tf.serialized_size(t) == 64 + 800
    buf[:len(blob)] = np.frombuffer(blob, np.uint8)
    assert store.put_tensor_from("from/1", ptr, len(blob)) == 0
    assert torch.equal(store.get_tensor("from/1"), t)
    assert torch.equal(tf.deserialize_tensor(bytearray(blob)), t)
    buf[len(blob):2 * len(blob)] = np.frombuffer(blob, np.uint8)
    assert store.batch_put_tensor_from(["from/2", "from/3"], [ptr, ptr + len(blob)],
                                       [len(blob), len(blob)]) == [0, 0]
    assert torch.equal(store.get_tensor("from/3"), t)
    assert store.upsert_tensor_from("from/1", ptr, len(blob)) == 0
    assert store.batch_upsert_tensor_from(["from/2"], [ptr], [len(blob)]) == [0]
    # Registered memory that is not a serialized tensor, or a cut one: -600.
    buf[40000:40100] = 7
    assert store.put_tensor_from("from/bad", ptr + 40000, 100) == -600
    assert store.put_tensor_from("from/bad", ptr, len(blob) - 1) == -600
    assert store.batch_put_tensor_from(["from/bad", "from/4"], [ptr + 40000, ptr],
                                       [100, len(blob)]) == [-600, 0]
    assert store.is_exist("from/bad") == 0
    assert store.batch_put_tensor_from(["a", "b"], [ptr], [1]) == [-600, -600]
    assert store.unregister_buffer(ptr) == 0


def test_safetensors_round_trip(store, tmp_path):
    t = sample(torch.bfloat16, (3, 7), seed=4)
    assert store.put_tensor("st/a", t) == 0
    path = tmp_path / "a.safetensors"
    assert store.save_tensor_to_safetensor("st/a", str(path)) == 0
    # Hand-parsed file: u64 LE header length, JSON header, then the data.
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n])
    assert header["st/a"] == {"dtype": "BF16", "shape": [3, 7], "data_offsets": [0, 42]}
    assert header["__metadata__"]["format"] == "pt"
    assert raw[8 + n:] == bytes(tf._raw(t))
    # Back into the store under another key (the file's only tensor).
    assert store.load_tensor_from_safetensor("st/b", str(path)) == 0
    assert same(store.get_tensor("st/b"), t)
    # A file of several tensors: the one named like the key.
    multi = tmp_path / "m.safetensors"
    x, y = torch.arange(5, dtype=torch.int32), torch.ones(2, 2, dtype=torch.float16)
    tf.save_safetensors(str(multi), {"x": x, "y": y})
    assert store.load_tensor_from_safetensor("y", str(multi)) == 0
    assert same(store.get_tensor("y"), y)
    assert store.load_tensor_from_safetensor("zzz", str(multi)) == -704
    loaded = tf.load_safetensors(str(multi))
    assert same(loaded["x"], x) and same(loaded["y"], y)
    # Errors: missing key / file, malformed file, unwritable path.
    assert store.save_tensor_to_safetensor("st/none", str(tmp_path / "n.safetensors")) == -704
    assert store.load_tensor_from_safetensor("k", str(tmp_path / "missing")) == -1100
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(struct.pack("<Q", 5) + b"{not json")
    assert store.load_tensor_from_safetensor("k", str(junk)) == -1102
    junk.write_bytes(struct.pack("<Q", 1 << 40))
    assert store.load_tensor_from_safetensor("k", str(junk)) == -1102
    assert store.save_tensor_to_safetensor("st/a", str(tmp_path / "no/dir/x")) == -1103
    with pytest.raises(TypeError):
        store.save_tensor_to_safetensor("st/a", None)
    with pytest.raises(TypeError):
        store.load_tensor_from_safetensor(None, str(path))


def test_byte_layout():
    t = torch.arange(6, dtype=torch.int16).reshape(2, 3)
    blob = tf.serialize_tensor(t)
    magic, ver, hsize, dtype, ndim, kind, flags, off, nbytes = \
        struct.unpack_from("<IHHHHHHQQ", blob)
    assert (magic, ver, hsize, dtype, ndim, kind, flags) == (0x4D4F4F4E, 1, 32, 4, 2, 0, 0)
    assert (off, nbytes) == (64, 12)
    assert struct.unpack_from("<2q", blob, 32) == (2, 3)
    assert blob[48:64] == bytes(16)
    assert blob[64:] == struct.pack("<6h", *range(6))
    # Corruptions are detected.
    for pos, val in ((0, 0), (4, 9), (8, 99), (10, 9), (24, 13)):
        bad = bytearray(blob)
        bad[pos] = val
        with pytest.raises(tf.FormatError):
            tf.decode_header(bad)
    with pytest.raises(tf.FormatError):
        tf.decode_header(blob[:70])
    with pytest.raises(tf.FormatError):
        tf.decode_header(b"short")


def test_bad_tensor_input(store):
    t = torch.ones(4)
    with pytest.raises(TypeError):
        store.put_tensor("bad/1", b"bytes are not a tensor")
    with pytest.raises(TypeError):
        store.put_tensor("bad/1", None)
    with pytest.raises(TypeError):
        store.put_tensor(None, t)
    with pytest.raises(TypeError):
        store.put_tensor(123, t)
    with pytest.raises(TypeError):  # not on the CPU: a clear error, no GPU path
        store.put_tensor("bad/1", torch.empty(4, device="meta"))
    with pytest.raises(TypeError):
        store.put_tensor("bad/1", torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(TypeError):
        store.put_tensor("bad/1", torch.zeros(2, 2).to_sparse())
    with pytest.raises(TypeError):
        store.batch_put_tensor(["bad/1", "bad/2"], [t, "x"])
    assert store.is_exist("bad/1") == 0  # the batch wrote nothing
    with pytest.raises(TypeError):
        store.get_tensor(None)
    with pytest.raises(TypeError):
        store.get_tensor_into("bad/1", None, 10)
    with pytest.raises(ValueError):
        store.get_tensor_into("bad/1", 4096, -1)
    with pytest.raises(TypeError):
        store.put_tensor_from("bad/1", "ptr", 10)
    with pytest.raises(ValueError):
        store.put_tensor_from("bad/1", 4096, -10)
    assert store.get_tensor("") is None
    # Unregistered memory: the store refuses it (no crash).
    raw = bytearray(tf.serialize_tensor(t))
    ptr = np.frombuffer(raw, np.uint8).ctypes.data
    assert store.put_tensor_from("bad/unreg", ptr, len(raw)) < 0


def test_multi_axis_parallelism(store):
    from mooncake.store import ParallelAxis, ReadTarget, TensorParallelism

    w = torch.arange(8 * 6 * 2, dtype=torch.float32).reshape(8, 6, 2)
    par = TensorParallelism([ParallelAxis(dim=0, size=2), ParallelAxis(dim=1, size=3)])
    assert store.put_tensor_with_parallelism("par/w", w, par) == 0
    # Shard (r0, r1) = rows r0 of 2, columns r1 of 3, under key_tp_r0_r1.
    assert torch.equal(store.get_tensor("par/w_tp_1_2"), w[4:, 4:])
    local = TensorParallelism([ParallelAxis(0, 2, 1), ParallelAxis(1, 3, 0)])
    assert torch.equal(store.get_tensor_with_parallelism("par/w", local), w[4:, :2])
    whole = store.get_tensor_with_parallelism("par/w", par, ReadTarget.GLOBAL)
    assert torch.equal(whole, w)
    # One axis: the same keys as *_with_tp.
    one = TensorParallelism(ParallelAxis(dim=-1, size=2, rank=1))
    assert store.batch_put_tensor_with_parallelism(["par/a"], [w], one) == [0]
    assert torch.equal(store.get_tensor_with_tp("par/a", 1, 2, -1), w[:, :, 1:])
    got = store.batch_get_tensor_with_parallelism(["par/a", "par/none"], one, ReadTarget.GLOBAL)
    assert torch.equal(got[0], w) and got[1] is None
    assert store.upsert_tensor_with_parallelism("par/a", w + 1, one) == 0
    assert torch.equal(store.get_tensor_with_parallelism("par/a", one, ReadTarget.GLOBAL), w + 1)
    # Bad descriptions: -600 / None; wrong types raise.
    same_dim = TensorParallelism([ParallelAxis(0, 2), ParallelAxis(0, 2)])
    assert store.put_tensor_with_parallelism("par/bad", w, same_dim) == -600
    assert store.put_tensor_with_parallelism("par/bad", w, TensorParallelism([])) == -600
    assert store.put_tensor_with_parallelism("par/bad", w,
                                             TensorParallelism(ParallelAxis(3, 2))) == -600
    assert store.put_tensor_with_parallelism("par/bad", w,
                                             TensorParallelism(ParallelAxis(1, 4))) == -600
    assert store.is_exist("par/bad_tp_0") == 0
    # Reading with a different cut than the one written: None.
    assert store.get_tensor_with_parallelism("par/w", TensorParallelism(ParallelAxis(0, 2))) \
        is None
    with pytest.raises(TypeError):
        store.put_tensor_with_parallelism("par/bad", w, [ParallelAxis(0, 2)])
    with pytest.raises(TypeError):
        TensorParallelism(["x"])
    with pytest.raises(ValueError):
        store.get_tensor_with_parallelism("par/w", par, target=7)
