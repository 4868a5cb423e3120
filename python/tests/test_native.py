"""The native `crescent` package: Engine and Store over the C API."""

import threading
import time

import numpy as np
import pytest

import crescent
from crescent import CrescentError, NotFoundError

MiB = 1 << 20


# --- module level -------------------------------------------------------------------


def test_status_table_and_helpers():
    assert crescent.OBJECT_NOT_FOUND == -704
    assert crescent.NO_AVAILABLE_HANDLE == -200
    assert crescent.STATUS_CODES["INVALID_PARAMS"] == -600
    assert crescent.status_name(-704) == "OBJECT_NOT_FOUND"
    assert crescent.status_name(12345) == "UNKNOWN"
    assert crescent.strerror(-704)
    assert crescent.parse_size("16MB") == 16 * MiB
    assert crescent.parse_size("4 GiB") == 4 << 30
    assert crescent.parse_size(123) == 123
    with pytest.raises(CrescentError) as ei:
        crescent.parse_size("50%")
    assert ei.value.code == -600 and ei.value.name == "INVALID_PARAMS"
    assert issubclass(NotFoundError, CrescentError) and issubclass(NotFoundError, KeyError)
    assert issubclass(CrescentError, RuntimeError)


def test_shared_memory_roundtrip():
    with crescent.SharedMemory(1 * MiB) as shm:
        assert shm.address % (2 * MiB) == 0
        crescent.write_memory(shm.address, b"abc", 3)
        assert crescent.read_memory(shm.address, 3) == b"abc"
    assert shm.address == 0
    with pytest.raises(ValueError):
        crescent.write_memory(0, b"x", 1)


# --- engine ---------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["tcp", "auto"])
def test_engine_transfers_between_two_engines(protocol):
    with crescent.Engine(protocol=protocol) as a, crescent.Engine(protocol=protocol) as b:
        assert a.rpc_port > 0 and a.segment_name.endswith(":%d" % a.rpc_port)
        src = np.arange(1 << 16, dtype=np.uint8)
        dst = np.zeros(1 << 16, dtype=np.uint8)
        with a.registered(src), b.registered(dst) as dst_addr:
            assert a.registration_count() == 1
            seg = a.open_segment(b.segment_name)
            assert seg == a.open_segment(b.segment_name)
            a.transfer_sync(crescent.OP_WRITE, src.ctypes.data, seg, dst_addr, 4096)
            assert (dst[:4096] == src[:4096]).all()
            # Batch: two writes, then a read back into another part of src.
            a.transfer_sync_batch(crescent.OP_WRITE, b.segment_name,
                                  [src.ctypes.data + 4096, src.ctypes.data + 8192],
                                  [dst_addr + 4096, dst_addr + 8192], [4096, 4096])
            assert (dst[:12288] == src[:12288]).all()
            batch = a.batch_create(2)
            a.batch_submit(batch, [(crescent.OP_READ, src.ctypes.data + 32768, seg, dst_addr,
                                    100), (crescent.OP_WRITE, src, seg, dst_addr + 20000, 10)])
            a.batch_wait(batch)
            st = a.batch_task_status(batch, 0)
            assert st[0] == crescent._crescent.TASK_COMPLETED and st[2] == 100
            a.batch_free(batch)
            assert (src[32768:32868] == src[:100]).all()
            assert a.stats()["tasks_completed"] >= 4
        assert a.registration_count() == 0


def test_engine_errors_carry_codes():
    with crescent.Engine(protocol="tcp") as e:
        buf = bytearray(4096)
        with pytest.raises(CrescentError) as ei:
            e.unregister(12345)
        assert ei.value.code == crescent.ERR_ADDRESS_NOT_REGISTERED
        assert ei.value.name == "ERR_ADDRESS_NOT_REGISTERED"
        e.register(buf)
        with pytest.raises(CrescentError) as ei:
            e.register(buf)
        assert ei.value.code == crescent.ERR_ADDRESS_OVERLAPPED
        # An unregistered local address is refused before anything moves.
        other = np.zeros(64, dtype=np.uint8)
        with pytest.raises(CrescentError):
            e.transfer_sync(crescent.OP_WRITE, other.ctypes.data, e.segment_name,
                            e.register(np.zeros(8, np.uint8)), 8)
        with pytest.raises(CrescentError):
            e.probe("127.0.0.1:1", timeout_ms=300)
        e.probe(e.segment_name)
    with pytest.raises(CrescentError) as ei:
        crescent.Engine(protocol="rdmaa")
    assert ei.value.code == crescent.ERR_INVALID_CONFIG
    assert "rdmaa" in str(ei.value)
    with pytest.raises(CrescentError):
        e.rpc_port  # closed
    assert e.closed


def test_engine_notifications():
    with crescent.Engine() as a, crescent.Engine() as b:
        a.notify(b.segment_name, b"hello")
        a.notify(b.segment_name, "world")
        deadline = time.time() + 5
        got = []
        while len(got) < 2 and time.time() < deadline:
            got += b.take_notifications()
            time.sleep(0.01)
        assert [m for _, m in got] == [b"hello", b"world"]
        assert got[0][0] == a.segment_name


def test_engine_close_waits_for_calls_in_flight():
    a = crescent.Engine(protocol="tcp")
    b = crescent.Engine(protocol="tcp")
    src = np.ones(8 * MiB, dtype=np.uint8)
    dst = np.zeros(8 * MiB, dtype=np.uint8)
    a.register(src)
    dst_addr = b.register(dst)
    errors = []

    def worker():
        for _ in range(20):
            try:
                a.transfer_sync(crescent.OP_WRITE, src.ctypes.data, b.segment_name, dst_addr,
                                src.nbytes)
            except CrescentError as e:
                errors.append(e.code)
                return

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    a.close()  # must not crash the threads still inside transfer_sync
    for t in threads:
        t.join()
    b.close()
    assert all(c < 0 for c in errors)


# --- store ----------------------------------------------------------------------------


@pytest.fixture
def nstore(master):
    with crescent.Store(master_address=master, global_segment_size="64MB",
                        local_buffer_size=16 * MiB, protocol="tcp") as s:
        yield s


def test_store_copying_api(nstore):
    s = nstore
    s.put("n/a", b"hello")
    assert s.get("n/a") == b"hello"
    assert "n/a" in s and s.exists("n/a") and s.get_size("n/a") == 5
    s.put("n/a", b"other")  # existing key kept (Mooncake semantics)
    assert s.get("n/a") == b"hello"
    s.upsert("n/a", b"replaced!")
    assert s.get("n/a") == b"replaced!"
    s.put("n/empty", b"")
    assert s.get("n/empty") == b""
    with pytest.raises(NotFoundError) as ei:
        s.get("n/missing")
    assert ei.value.code == -704
    with pytest.raises(KeyError):
        s.get_size("n/missing")
    s.put_parts("n/parts", b"ab", bytearray(b"cd"), memoryview(b"ef"), np.array([1, 2], np.uint8))
    assert s.get("n/parts") == b"abcdef\x01\x02"
    s.upsert_parts("n/parts", b"x", b"y")
    assert s.get("n/parts") == b"xy"
    h = s.get_buffer("n/parts")
    assert h.size() == 2 and len(h) == 2 and bytes(memoryview(h)) == b"xy" and h.ptr() != 0
    assert s.batch_put(["n/b1", "n/b2"], [b"1", b"22"]) == [0, 0]
    assert s.batch_upsert(["n/b1"], [b"111"]) == [0]
    got = s.batch_get(["n/b1", "n/b2", "n/none"])
    assert bytes(got[0]) == b"111" and bytes(got[1]) == b"22" and got[2] == -704
    assert s.batch_exists(["n/b1", "n/none"]) == [1, 0]
    assert s.remove_by_regex("^n/b", force=True) == 2
    s.remove("n/a", force=True)
    assert not s.exists("n/a")
    assert s.remove_all(force=True) >= 1
    s.health()
    assert s.hostname.startswith("127.0.0.1:")


def test_store_zero_copy_api(nstore):
    s = nstore
    region = np.zeros(1 * MiB, dtype=np.uint8)
    with s.registered(region) as base:
        region[:3] = [7, 8, 9]
        s.put_from("z/a", base, 3)
        s.put_from_multi("z/m", [base, base + 1000], [3, 2])
        assert s.batch_put_from(["z/b", "z/c"], [base + 1, base + 2], [2, 1]) == [0, 0]
        assert s.batch_upsert_from(["z/b"], [base], [3]) == [0]
        assert s.batch_put_from_multi(["z/d"], [[base, base + 1]], [[1, 1]]) == [0]
        out = base + 4096
        assert s.get_into("z/a", out, 100) == 3
        assert list(region[4096:4099]) == [7, 8, 9]
        with pytest.raises(CrescentError) as ei:
            s.get_into("z/a", out, 2)
        assert ei.value.code == crescent.BUFFER_OVERFLOW
        assert s.batch_get_into(["z/b", "z/c", "z/none"], [out, out + 10, out + 20],
                                [10, 10, 10]) == [3, 1, -704]
        assert s.get_into_multi("z/m", [out, out + 100], [4, 4]) == 5
        assert s.batch_get_into_multi(["z/d"], [[out + 200]], [[8]]) == [2]
        assert s.batch_remove(["z/a", "z/none"], force=True) == [0, -704]


def test_store_error_detail_names_the_status_once(master):
    # A put that cannot be placed: the detail is built from the master's reply
    # wrapped by the client; the status name must lead it once (issue 11).
    with crescent.Store(master_address=master, global_segment_size=0,
                        local_buffer_size=16 * MiB, protocol="tcp") as s:
        with pytest.raises(CrescentError) as ei:
            s.put("err/too-big", bytes(96 * MiB))  # no segment of the suite is that large
        e = ei.value
        assert e.detail.startswith(e.name + ": "), e.detail
        assert e.detail.count(e.name + ":") == 1, e.detail
        assert str(e).count(e.name + ":") == 1, str(e)


def test_store_threads_and_close(master):
    s = crescent.Store(master_address=master, global_segment_size=64 * MiB, protocol="tcp")
    stop = threading.Event()
    codes = []

    def worker(i):
        k = 0
        while not stop.is_set():
            try:
                s.upsert(f"t/{i}/{k % 8}", bytes(1024))
                s.exists(f"t/{i}/{k % 8}")
            except CrescentError as e:
                codes.append(e.code)
                return
            k += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    s.close()
    stop.set()
    for t in threads:
        t.join()
    assert s.closed
    assert all(c == crescent.UNAVAILABLE_IN_CURRENT_STATUS for c in codes)
    with pytest.raises(CrescentError):
        s.get("t/0/0")
    s.close()  # idempotent


def test_store_setup_errors(master):
    with pytest.raises(CrescentError) as ei:
        crescent.Store(master_address="127.0.0.1:1", rpc_timeout_ms=500)
    assert ei.value.code in (crescent.RPC_FAIL, crescent.RPC_TIMEOUT)
    with pytest.raises(CrescentError) as ei:
        crescent.Store(master_address=master, local_buffer_size="50%")
    assert ei.value.code == crescent.INVALID_PARAMS
    with pytest.raises(TypeError):
        crescent.Store(master_address=master, bogus=1)


# --- the GIL is released while C blocks --------------------------------------------------


def _count_while(fn):
    """Run fn in a thread; count main-thread loop iterations until it returns."""
    t = threading.Thread(target=fn)
    count = 0
    t.start()
    start = time.monotonic()
    while t.is_alive():
        count += 1
    t.join()
    return count, time.monotonic() - start


def test_blocking_calls_release_the_gil():
    import socket

    silent = socket.socket()  # accepts connections (backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = silent.getsockname()[1]
    try:
        with crescent.Engine() as e:
            def probe():
                with pytest.raises(CrescentError):
                    e.probe("127.0.0.1:%d" % port, timeout_ms=600)

            count, elapsed = _count_while(probe)
            assert elapsed >= 0.3
            assert count > 10000, count  # the main thread kept running

        def setup():
            with pytest.raises(CrescentError):
                crescent.Store(master_address="127.0.0.1:%d" % port, rpc_timeout_ms=600)

        count, elapsed = _count_while(setup)
        assert elapsed >= 0.3 and count > 10000, count
    finally:
        silent.close()
