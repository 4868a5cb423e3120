"""The batch paths that go to the master once per phase for the whole batch:
multi-buffer gather/scatter (batch_put_from_multi_buffers /
batch_get_into_multi_buffers, the vLLM and SGLang forms) and the copying
batches (put_batch / upsert_batch / get_batch, TransferQueue's forms), with
Mooncake's return conventions, and bad input to the native methods."""

from __future__ import annotations

import numpy as np
import pytest

MiB = 1 << 20


def _pattern(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


@pytest.fixture
def region(store):
    buf = np.zeros(8 * MiB, np.uint8)
    ptr = buf.ctypes.data
    assert store.register_buffer(ptr, buf.nbytes) == 0
    yield buf, ptr
    assert store.unregister_buffer(ptr) == 0


def test_multi_buffers_gather_scatter(store, region):
    buf, base = region
    # Key i gathered from layouts of 1..4 buffers, zero-length parts included.
    layouts = [[32768], [32768, 32768], [1000, 0, 7000], [0, 5, 0, 4096], [], [0, 0]]
    keys = [f"mb/{i}" for i in range(len(layouts))]
    values, ptrs, off = [], [], 0
    for i, sizes in enumerate(layouts):
        v = _pattern(sum(sizes), i)
        values.append(v)
        row, at = [], 0
        for sz in sizes:
            buf[off:off + sz] = v[at:at + sz]
            row.append(base + off)
            off += sz + 64
            at += sz
        ptrs.append(row)
    assert store.batch_put_from_multi_buffers(keys, ptrs, layouts) == [0] * len(keys)

    # Scatter into 1..4 buffers of a different layout; a missing key in the middle,
    # and a destination one byte short for mb/1 (Mooncake: INVALID_PARAMS).
    out_base = 4 * MiB
    gkeys = keys[:3] + ["mb/missing"] + keys[3:]
    gptrs, gsizes, off = [], [], out_base
    buf[out_base:] = 0xA5
    for j, k in enumerate(gkeys):
        total = len(values[keys.index(k)]) if k in keys else 100
        want = total - 1 if k == "mb/1" else total + 3
        n = 1 + j % 4
        sizes = [want // n] * (n - 1) + [want - (want // n) * (n - 1)]
        row = []
        for sz in sizes:
            row.append(base + off)
            off += sz + 64
        gptrs.append(row)
        gsizes.append(sizes)
    res = store.batch_get_into_multi_buffers(gkeys, gptrs, gsizes)
    for j, k in enumerate(gkeys):
        if k == "mb/missing":
            assert res[j] == -704
            continue
        if k == "mb/1":
            assert res[j] == -600
            for p, sz in zip(gptrs[j], gsizes[j]):
                assert (buf[p - base:p - base + sz] == 0xA5).all()
            continue
        v = values[keys.index(k)]
        assert res[j] == len(v)
        got = np.concatenate([buf[p - base:p - base + sz] for p, sz in zip(gptrs[j], gsizes[j])])
        assert (got[:len(v)] == v).all()


def test_multi_buffers_upsert_and_repeat(store, region):
    buf, base = region
    s = store._s
    buf[:4096] = _pattern(4096, 7)
    buf[4096:8192] = _pattern(4096, 8)
    # A key twice in one batch: two puts in order (the second keeps the first).
    assert store.batch_put_from_multi_buffers(
        ["up/a", "up/a"], [[base], [base + 4096]], [[4096], [4096]]) == [0, 0]
    assert store.get("up/a") == buf[:4096].tobytes()
    assert s.batch_upsert_from_multi(["up/a"], [[base + 4096, base]], [[4096, 10]]) == [0]
    assert store.get("up/a") == buf[4096:8192].tobytes() + buf[:10].tobytes()


def test_multi_buffers_bad_input(store, region):
    _, base = region
    s = store._s
    with pytest.raises(ValueError):
        s.batch_put_from_multi(["a", "b"], [[base]], [[1]])
    with pytest.raises(ValueError):
        s.batch_put_from_multi(["a"], [[base, base]], [[1]])
    with pytest.raises(TypeError):
        s.batch_put_from_multi(["a"], [base], [[1]])
    with pytest.raises(TypeError):
        s.batch_put_from_multi(["a"], [[None]], [[1]])
    with pytest.raises((TypeError, ValueError, OverflowError)):
        s.batch_put_from_multi(["a"], [[base]], [[-1]])
    with pytest.raises(ValueError):
        s.batch_get_into_multi(["a"], [[base]], [[1], [2]])
    with pytest.raises(TypeError):
        s.batch_get_into_multi(["a"], [[base]], 5)
    with pytest.raises(TypeError):
        s.batch_upsert_from_multi([1], [[base]], [[1]])
    assert s.batch_put_from_multi([], [], []) == []
    assert s.batch_get_into_multi([], [], []) == []
    # Mooncake's layer: mismatched outer lists are INVALID_PARAMS per key.
    assert store.batch_put_from_multi_buffers(["a", "b"], [[base]], [[1]]) == [-600, -600]
    assert store.batch_get_into_multi_buffers(["a", "b"], [[base]], [[1]]) == [-600, -600]


def test_copying_batches_fallback_miss_empty(store_factory):
    # 1 MiB of staging: the 3 MiB value is put and read one key at a time.
    store = store_factory(lbs=1 * MiB)
    s = store._s
    sizes = [100, 0, 3 * MiB, 700 << 10, 700 << 10, 32768]
    keys = [f"cp/{i}" for i in range(len(sizes))]
    vals = [_pattern(n, 100 + i).tobytes() for i, n in enumerate(sizes)]
    assert store.put_batch(keys, vals) == 0
    assert store.get_batch(keys) == vals
    got = s.batch_get(keys[:2] + ["cp/missing"] + keys[2:])
    assert got[0].tobytes() == vals[0]
    assert not isinstance(got[1], int) and got[1].tobytes() == b""  # empty, not a miss
    assert got[2] == -704
    assert [h.tobytes() for h in got[3:]] == vals[2:]
    # put keeps, upsert replaces.
    assert store.put_batch(keys[:1], [b"other"]) == 0
    assert store.get(keys[0]) == vals[0]
    assert store.upsert_batch(keys[:3], [b"x", vals[2], b""]) == 0
    assert store.get_batch(keys[:3]) == [b"x", vals[2], b""]
