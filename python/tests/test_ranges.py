"""get_into_ranges (buffer-major ranged gather), replica descriptors with
segment names, batch_replica_clear in both modes (whole objects, and one
segment's replicas, including one replica of a two-replica object), and
get_offload_rpc_read_count. Replica locations and clearing go through the
master's client protocol (QUERY_KEY, BATCH_REPLICA_CLEAR)."""

import time

import numpy as np
import pytest

from conftest import THIN

from mooncake.store import ReplicaStatus, ReplicateConfig

MiB = 1 << 20
LEASE_S = 0.4  # a little over the conftest master's 200 ms lease


def value(i, n):
    return bytes((i * 7 + j) % 251 for j in range(n))


def test_get_into_ranges_gathers_fragments(store):
    vals = {f"r/{i}": value(i, 1000 + 100 * i) for i in range(3)}
    for k, v in vals.items():
        assert store.put(k, v) == 0
    a = np.zeros(8192, np.uint8)
    b = np.zeros(4096, np.uint8)
    assert store.register_buffer(a.ctypes.data, a.nbytes) == 0
    assert store.register_buffer(b.ctypes.data, b.nbytes) == 0
    res = store.get_into_ranges(
        [a.ctypes.data, b.ctypes.data],
        [["r/0", "r/1", "r/missing"], ["r/2", "r/0"]],
        [[[0, 100, 300], [1000, 2000], [5000]], [[0], [10, 20]]],
        [[[0, 500, 990], [0, 1050], [0]], [[1199], [1, 2]]],
        [[[50, 100, 10], [1100, 50], [8]], [[1], [3, 0]]])
    assert res == [[[50, 100, 10], [1100, 50], [-704]], [[1], [3, 0]]]
    v0, v1, v2 = vals["r/0"], vals["r/1"], vals["r/2"]
    assert a[0:50].tobytes() == v0[0:50]
    assert a[100:200].tobytes() == v0[500:600]
    assert a[300:310].tobytes() == v0[990:1000]
    assert a[1000:2000].tobytes() == v1[0:1000]
    assert a[2000:2050].tobytes() == v1[1050:1100]  # later fragments win overlaps
    assert a[5000:5008].tobytes() == bytes(8)  # the missing key wrote nothing
    assert b[0:1].tobytes() == v2[1199:1200]
    assert b[10:13].tobytes() == v0[1:4]
    # A buffer inside a registered region, and tuples instead of lists.
    res = store.get_into_ranges((a.ctypes.data + 6000,), (("r/1",),), (((0,),),), (((0,),),),
                                (((16,),),))
    assert res == [[[16]]] and a[6000:6016].tobytes() == v1[:16]
    assert store.get_into_ranges([], [], [], [], []) == []
    assert store.unregister_buffer(a.ctypes.data) == 0
    assert store.unregister_buffer(b.ctypes.data) == 0


def test_get_into_ranges_errors(store):
    assert store.put("e/1", value(1, 500)) == 0
    a = np.zeros(1024, np.uint8)
    ptr = a.ctypes.data
    assert store.register_buffer(ptr, a.nbytes) == 0
    # Shape mismatches: negative entries, nothing copied.
    assert store.get_into_ranges([ptr], [["e/1"]], [[[0, 10]]], [[[0]]], [[[5]]]) == \
        [[[-600, -600]]]
    assert store.get_into_ranges([ptr, ptr], [["e/1"]], [[[0]]], [[[0]]], [[[5]]]) == \
        [[[-600]]]
    assert store.get_into_ranges([ptr], [["e/1", "e/1"]], [[[0], [0]]], [[[0]]], [[[5]]]) == \
        [[[-600], [-600]]]
    assert store.get_into_ranges([ptr], [["e/1"]], [[[0]]], [[[0]]], [[]]) == [[[-600]]]
    assert store.get_into_ranges([ptr], [["e/1"]], [[[0]]], [[[0]]], [[5]]) == [[[-600]]]
    assert not a.any()
    # Destination overflow against the registered region (1024 bytes), source past
    # the end of the object, negative numbers; valid neighbours still succeed.
    res = store.get_into_ranges([ptr], [["e/1"]], [[[1000, 1020, 0, 0, 0]]],
                                [[[0, 0, 490, -1, 0]]], [[[24, 8, 20, 4, -3]]])
    assert res == [[[24, -600, -600, -600, -600]]]
    assert a[1000:1024].tobytes() == value(1, 500)[:24]
    # Offset relative to a pointer inside the region counts from that pointer.
    assert store.get_into_ranges([ptr + 1000], [["e/1"]], [[[0]]], [[[0]]], [[[25]]]) == \
        [[[-600]]]
    # Unregistered destination: refused.
    c = np.zeros(64, np.uint8)
    assert store.get_into_ranges([c.ctypes.data], [["e/1"]], [[[0]]], [[[0]]], [[[8]]]) == \
        [[[-600]]]
    assert not c.any()
    # Wrong types raise.
    with pytest.raises(TypeError):
        store.get_into_ranges([None], [["e/1"]], [[[0]]], [[[0]]], [[[8]]])
    with pytest.raises(TypeError):
        store.get_into_ranges([ptr], [[1]], [[[0]]], [[[0]]], [[[8]]])
    with pytest.raises(TypeError):
        store.get_into_ranges([ptr], [["e/1"]], [[["0"]]], [[[0]]], [[[8]]])
    with pytest.raises(TypeError):
        store.get_into_ranges([ptr], "e/1", [[[0]]], [[[0]]], [[[8]]])
    with pytest.raises(ValueError):
        store.get_into_ranges([-5], [["e/1"]], [[[0]]], [[[0]]], [[[8]]])
    assert store.unregister_buffer(ptr) == 0


def two_ready(store_factory):
    """Two stores; store_factory returns each once its segment takes allocations."""
    return store_factory(), store_factory()


@pytest.mark.skipif(THIN, reason="two segments: thin clients of one daemon share its segment")
def test_replica_desc_has_segment_names(store_factory):
    a, b = two_ready(store_factory)
    rc = ReplicateConfig()
    rc.preferred_segment = b.get_hostname()
    assert a.put("d/b", b"x" * 100, rc) == 0
    rc2 = ReplicateConfig()
    rc2.replica_num = 2
    assert a.put("d/both", b"y" * 100, rc2) == 0
    desc = a.batch_get_replica_desc(["d/b", "d/both", "d/none", "d/b"])
    assert set(desc) == {"d/b", "d/both", "d/none"}
    assert [d.segment_name for d in desc["d/b"]] == [b.get_hostname()]
    assert sorted(d.segment_name for d in desc["d/both"]) == \
        sorted([a.get_hostname(), b.get_hostname()])
    assert desc["d/none"] == []
    assert all(d.is_memory_replica() and d.status == ReplicaStatus.COMPLETE
               for d in desc["d/both"])
    assert [d.segment_name for d in a.get_replica_desc("d/b")] == [b.get_hostname()]
    assert a.get_replica_desc("d/none") == []
    # Asking grants no lease: the object can be cleared at once.
    assert a.batch_replica_clear(["d/b"]) == ["d/b"]
    with pytest.raises(TypeError):
        a.batch_get_replica_desc([1])
    with pytest.raises(TypeError):
        a.batch_get_replica_desc("d/b")


@pytest.mark.skipif(THIN, reason="two segments: thin clients of one daemon share its segment")
def test_native_get_replicas(store_factory):
    a, b = two_ready(store_factory)
    two = ReplicateConfig()
    two.replica_num = 2
    assert a.put("g/two", b"z" * 300, two) == 0
    reps = a._s.get_replicas("g/two")
    assert sorted(r[0] for r in reps) == sorted([a.get_hostname(), b.get_hostname()])
    assert all(size == 300 and done is True and addr > 0 for _, addr, size, done in reps)
    import crescent
    with pytest.raises(crescent.NotFoundError):
        a._s.get_replicas("g/missing")
    # The native clear reports a status per key.
    assert a._s.batch_replica_clear(["g/two", "g/missing"], "no-such-segment:1") == [-710, -704]
    assert a._s.batch_replica_clear(["g/two", ""]) == [0, -400]


def test_batch_replica_clear_all_segments(store):
    keys = [f"c/{i}" for i in range(4)]
    for k in keys:
        assert store.put(k, b"v" * 64) == 0
    handle = store.get_buffer("c/1")  # a read lease on c/1
    assert handle is not None
    cleared = store.batch_replica_clear(keys + ["c/missing", "c/0"])
    assert cleared == ["c/0", "c/2", "c/3"]
    assert store.batch_is_exist(keys) == [0, 1, 0, 0]
    time.sleep(LEASE_S)
    assert store.batch_replica_clear(["c/1"], "") == ["c/1"]
    assert store.is_exist("c/1") == 0
    assert store.batch_replica_clear([]) == []


@pytest.mark.skipif(THIN, reason="two segments: thin clients of one daemon share its segment")
def test_batch_replica_clear_by_segment(store_factory):
    a, b = two_ready(store_factory)
    on_b, on_a = ReplicateConfig(), ReplicateConfig()
    on_b.preferred_segment = b.get_hostname()
    on_a.preferred_segment = a.get_hostname()
    two = ReplicateConfig()
    two.replica_num = 2
    assert a.put("s/b1", b"1" * 64, on_b) == 0
    assert a.put("s/b2", b"2" * 64, on_b) == 0
    assert a.put("s/a1", b"3" * 64, on_a) == 0
    assert a.put("s/ab", b"4" * 64, two) == 0
    keys = ["s/b1", "s/b2", "s/a1", "s/ab", "s/missing"]
    # b's replicas go: s/b1 and s/b2 entirely, s/ab keeps its replica on a.
    assert a.batch_replica_clear(keys, b.get_hostname()) == ["s/b1", "s/b2", "s/ab"]
    assert a.batch_is_exist(keys) == [0, 0, 1, 1, 0]
    assert [d.segment_name for d in a.get_replica_desc("s/ab")] == [a.get_hostname()]
    assert b.get("s/ab") == b"4" * 64  # still readable, from a's segment
    assert a.batch_replica_clear(keys, "no-such-segment:1") == []
    # Nothing of these lives on b any more.
    assert a.batch_replica_clear(keys, b.get_hostname()) == []
    time.sleep(LEASE_S)  # the read above leased s/ab
    # s/ab's last replica: the object goes too.
    assert a.batch_replica_clear(keys, a.get_hostname()) == ["s/a1", "s/ab"]
    assert a.batch_is_exist(["s/a1", "s/ab"]) == [0, 0]
    assert a.get_replica_desc("s/ab") == []
    # Leased keys are not cleared.
    assert a.put("s/b3", b"5" * 64, on_b) == 0
    assert a.get("s/b3") == b"5" * 64
    assert a.batch_replica_clear(["s/b3"], b.get_hostname()) == []
    time.sleep(LEASE_S)
    assert a.batch_replica_clear(["s/b3"], b.get_hostname()) == ["s/b3"]
    with pytest.raises(TypeError):
        a.batch_replica_clear(["s/ab"], None)
    with pytest.raises(TypeError):
        a.batch_replica_clear([1])
    with pytest.raises(TypeError):
        a.batch_replica_clear("s/ab")


def test_replica_clear_after_close(store_factory):
    s = store_factory()
    assert s.put("z/1", b"v") == 0
    s.close()
    assert s.batch_replica_clear(["z/1"]) == []
    assert s.batch_get_replica_desc(["z/1"]) == {}


def test_offload_rpc_read_count(store):
    assert store.get_offload_rpc_read_count() == 0
