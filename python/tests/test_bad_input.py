"""Bad input never crashes: wrong types, negative sizes, None where a pointer
is expected, unknown keywords and unregistered memory give a Python exception
or the documented error code."""

import numpy as np
import pytest

import crescent
from mooncake.engine import TransferEngine
from mooncake.store import ReplicateConfig

MiB = 1 << 20


def test_store_argument_types(store):
    s = store
    buf = np.zeros(4096, np.uint8)
    ptr = buf.ctypes.data
    assert s.register_buffer(ptr, buf.nbytes) == 0
    type_errors = [
        lambda: s.put(123, b"v"),
        lambda: s.put("k", "a str is not a buffer"),
        lambda: s.put("k", None),
        lambda: s.put("k", 12),
        lambda: s.put("k", b"v", config="rc"),
        lambda: s.put("k", b"v", cfg=ReplicateConfig()),
        lambda: s.put_from("k", None, 10),
        lambda: s.put_from("k", "0x1000", 10),
        lambda: s.put_from("k", 1.5, 10),
        lambda: s.put_from("k", ptr, None),
        lambda: s.put_from("k", ptr, 10, ReplicateConfig(), "extra"),
        lambda: s.get_into("k", None, 10),
        lambda: s.batch_put_from(["k"], [None], [1]),
        lambda: s.batch_put_from(["k"], [ptr], ["1"]),
        lambda: s.batch_get_into(["k"], [None], [1]),
        lambda: s.batch_get_into("k", [ptr], [1]),
        lambda: s.batch_is_exist("not-a-list"),
        lambda: s.batch_is_exist([1, 2]),
        lambda: s.batch_remove(None),
        lambda: s.get(None),
        lambda: s.register_buffer(None, 10),
        lambda: s.unregister_buffer(None),
        lambda: s.put_parts("k", b"a", "b"),
        lambda: s.put_parts("k", b"a", bogus=1),
        lambda: s.remove("k", forced=True),
        lambda: s.batch_get_into_multi_buffers(["k"], [[None]], [[1]]),
    ]
    for i, call in enumerate(type_errors):
        with pytest.raises(TypeError):
            call()
            pytest.fail(f"case {i} did not raise")
    value_errors = [
        lambda: s.put_from("k", ptr, -1),
        lambda: s.put_from("k", -5, 10),
        lambda: s.get_into("k", ptr, -1),
        lambda: s.batch_put_from(["k"], [ptr], [-1]),
        lambda: s.batch_get_into(["k"], [ptr], [-1]),
        lambda: s.register_buffer(ptr, -1),
        lambda: s.put("bad\0key", b"v"),
    ]
    for i, call in enumerate(value_errors):
        with pytest.raises(ValueError):
            call()
            pytest.fail(f"case {i} did not raise")
    # Documented codes rather than exceptions:
    assert s.batch_put_from(["a", "b"], [ptr], [1, 1]) == [-600, -600]  # length mismatch
    assert s.batch_get_into(["a"], [ptr, ptr], [1]) == [-600]
    assert s.register_buffer(0, 10) == -600
    assert s.put("", b"v") == -400  # INVALID_KEY
    assert s.put("k" * 5000, b"v") == -400
    assert s.unregister_buffer(ptr + 8) < 0  # not a registration start
    assert s.unregister_buffer(ptr) == 0


def test_store_unregistered_memory(store):
    s = store
    unreg = np.arange(8192, dtype=np.uint8)
    p = unreg.ctypes.data
    assert s.put_from("u/a", p, 4096) < 0
    assert s.batch_put_from(["u/b", "u/c"], [p, p + 4096], [4096, 4096]) != [0, 0]
    assert s.put("u/d", b"x" * 4096) == 0
    assert s.get_into("u/d", p, 4096) < 0
    assert s.batch_get_into(["u/d"], [p], [4096]) == [s.batch_get_into(["u/d"], [p], [4096])[0]]
    assert s.batch_get_into(["u/d"], [p], [4096])[0] < 0
    assert (unreg == np.arange(8192, dtype=np.uint8)).all()  # nothing was written
    assert s.put_from("u/e", 1 << 47, 1 << 30) < 0  # wild pointer: refused, not touched
    assert s.get_into("u/d", 1 << 47, 4096) < 0


def test_store_after_close(store_factory):
    s = store_factory()
    assert s.close() == 0
    assert s.put("k", b"v") < 0 and s.get("k") == b""
    assert s.batch_get_into(["k"], [1], [1]) == [-1]
    assert s.batch_is_exist(["k", "l"]) == [-1, -1]
    assert s.is_exist("k") < 0 and s.remove_all() < 0
    assert s.register_buffer(1, 1) < 0
    assert s.health_check() == 1


def test_engine_bad_input():
    te = TransferEngine()
    with pytest.raises(TypeError):
        te.initialize(None, "P2PHANDSHAKE", "tcp", "")
    with pytest.raises(TypeError):
        te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "", "extra", "args")
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    buf = np.zeros(MiB, np.uint8)
    with pytest.raises(TypeError):
        te.register_memory(None, 10)
    with pytest.raises(ValueError):
        te.register_memory(buf.ctypes.data, -1)
    assert te.register_memory(0, 10) == -1
    with pytest.raises(TypeError):
        te.transfer_sync_write(None, buf.ctypes.data, 0, 1)
    with pytest.raises(TypeError):
        te.transfer_sync_write("127.0.0.1:1", None, 0, 1)
    with pytest.raises(ValueError):
        te.transfer_sync_write("127.0.0.1:1", buf.ctypes.data, 0, -1)
    with pytest.raises(ValueError):
        te.transfer_sync("x", 1, 1, 1, 7)  # not a TransferOpcode
    me = te.get_local_segment_name()
    # Unregistered local memory, unknown peers, ranges outside the peer's memory: -1.
    assert te.transfer_sync_write(me, buf.ctypes.data, buf.ctypes.data, 16) == -1
    assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0
    assert te.transfer_sync_write("127.0.0.1:1", buf.ctypes.data, 0, 16) == -1
    assert te.transfer_sync_write(me, buf.ctypes.data, 1 << 47, 16) == -1
    assert te.transfer_sync_write(me, buf.ctypes.data, buf.ctypes.data + MiB - 8, 16) == -1
    assert te.transfer_sync_write(me, buf.ctypes.data, buf.ctypes.data + 4096, 16) == 0
    assert te.batch_transfer_sync_write(me, [buf.ctypes.data], [], [1]) == -1
    assert te.batch_transfer_async_write(me, [buf.ctypes.data], [1 << 47], [8]) == 0
    assert te.transfer_check_status(987654) == -1
    assert te.get_batch_transfer_status([987654]) == -1
    assert te.write_bytes_to_buffer(1 << 47, b"x", 1) == -1
    assert te.write_bytes_to_buffer(buf.ctypes.data, b"xy", 5) == -1  # longer than data
    with pytest.raises(ValueError):
        te.read_bytes_from_buffer(1 << 47, 1)
    with pytest.raises(TypeError):
        te.write_bytes_to_buffer(buf.ctypes.data, None, 1)
    assert te.unregister_memory(buf.ctypes.data) == 0
    te.close()


def test_native_bad_input(master):
    with pytest.raises(ValueError):
        crescent.Engine(rpc_port=-1)
    with pytest.raises(OverflowError):
        crescent.Engine(rpc_port=70000)
    with pytest.raises(TypeError):
        crescent.Engine(protocol=5)
    with crescent.Engine() as e:
        with pytest.raises(ValueError):
            e.register(bytearray(10), 100)  # longer than the buffer
        with pytest.raises(TypeError):
            e.register(1234)  # int address without a length
        with pytest.raises(TypeError):
            e.batch_submit(e.batch_create(1), [(1, 2)])
        with pytest.raises(ValueError):
            e.transfer_sync(3, 1, e.segment_name, 1, 1)
        with pytest.raises(TypeError):
            e.transfer_sync_batch(1, e.segment_name, [1], 5, [1])
        with pytest.raises(crescent.CrescentError):
            e.batch_wait(12345, 10)
    with crescent.Store(master_address=master, protocol="tcp") as s:
        with pytest.raises(ValueError):
            s.batch_put(["a", "b"], [b"1"])
        with pytest.raises(TypeError):
            s.put("k", b"v", config=[1])
        with pytest.raises(TypeError):
            s.register_buffer(5)  # int without a size
        assert s.batch_get_into([], [], []) == []
        assert s.batch_exists([]) == []
