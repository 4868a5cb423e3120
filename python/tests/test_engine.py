"""mooncake.engine.TransferEngine beyond the P2P connectors: managed buffers,
raw buffer reads/writes, async submit and status, notifications, HTTP
metadata (the calls of Mooncake's own transfer-engine tests)."""

import json
import socket
import time

import numpy as np
import pytest

from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode

MiB = 1 << 20

TARGET = r"""
from mooncake.engine import TransferEngine
te = TransferEngine()
assert te.initialize(ARGS[0], ARGS[1], "tcp", "") == 0
addr = te.allocate_managed_buffer(int(ARGS[2]))
assert addr != 0
assert te.get_first_buffer_address(te.get_local_segment_name()) == addr
assert te.write_bytes_to_buffer(addr, b"target-data", 11) == 0
print(json.dumps({"session": te.get_local_segment_name(), "addr": addr}), flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "read":
        print(te.read_bytes_from_buffer(addr + int(cmd[1]), int(cmd[2])).hex(), flush=True)
    elif cmd[0] == "notifies":
        import time
        got = []
        end = time.time() + 5
        while not got and time.time() < end:
            got = te.get_notifies()
            time.sleep(0.01)
        print(json.dumps([[n.name, n.msg] for n in got]), flush=True)
    elif cmd[0] == "quit":
        break
assert te.free_managed_buffer(addr, int(ARGS[2])) == 0
"""


def start_target(child, host="127.0.0.1", metadata="P2PHANDSHAKE", size=MiB):
    t = child(TARGET, args=[host, metadata, str(size)])
    return t, json.loads(t.readline())


def read_remote(target, off, n):
    target.send(f"read {off} {n}")
    return bytes.fromhex(target.readline())


def test_managed_buffers_sync_and_async(child):
    target, info = start_target(child)
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    local = te.allocate_managed_buffer(64 * 1024)
    assert local != 0 and local % 8192 == 0
    other = te.allocate_managed_buffer(100)
    assert other not in (0, local)
    big = te.allocate_managed_buffer(300 * MiB)  # above the largest class
    assert big != 0
    assert te.write_bytes_to_buffer(local, b"hello world", 11) == 0
    assert te.read_bytes_from_buffer(local, 5) == b"hello"
    sess = info["session"]
    assert te.transfer_sync_write(sess, local, info["addr"] + 100, 11) == 0
    assert read_remote(target, 100, 11) == b"hello world"
    assert te.transfer_sync_read(sess, local + 1000, info["addr"], 11) == 0
    assert te.read_bytes_from_buffer(local + 1000, 11) == b"target-data"
    assert te.transfer_sync(sess, local, info["addr"] + 200, 5, TransferOpcode.Write) == 0
    assert read_remote(target, 200, 5) == b"hello"
    # async: one write through transfer_submit_write / transfer_check_status
    bid = te.transfer_submit_write(sess, local, info["addr"] + 300, 11)
    assert bid > 0
    deadline = time.time() + 10
    status = 0
    while status == 0 and time.time() < deadline:
        status = te.transfer_check_status(bid)
    assert status == 1
    assert te.transfer_check_status(bid) == -1  # freed after completion
    assert read_remote(target, 300, 11) == b"hello world"
    # async batches + get_batch_transfer_status
    b1 = te.batch_transfer_async_write(sess, [local, local + 6], [info["addr"] + 400,
                                                                  info["addr"] + 500], [5, 5])
    b2 = te.batch_transfer_async_read(sess, [local + 2000], [info["addr"]], [6])
    b3 = te.batch_transfer_async(sess, [local], [info["addr"] + 600], [11], TransferOpcode.Write)
    assert 0 not in (b1, b2, b3)
    assert te.get_batch_transfer_status([b1, b2, b3]) == 0
    assert read_remote(target, 400, 5) == b"hello" and read_remote(target, 500, 5) == b"world"
    assert te.read_bytes_from_buffer(local + 2000, 6) == b"target"
    assert te.get_batch_transfer_status([b1]) == -1  # ids are freed
    # sync batches both ways
    assert te.batch_transfer_sync_write(sess, [local, local + 6], [info["addr"] + 700,
                                                                   info["addr"] + 800],
                                        [5, 5]) == 0
    assert te.batch_transfer_sync_read(sess, [local + 3000], [info["addr"] + 700], [5]) == 0
    assert te.read_bytes_from_buffer(local + 3000, 5) == b"hello"
    assert te.free_managed_buffer(other, 100) == 0
    assert te.free_managed_buffer(big, 300 * MiB) == 0
    assert te.allocate_managed_buffer(100) == other  # reused from its class
    target.send("quit")
    target.finish()
    te.close()


def test_notifications(child):
    target, info = start_target(child)
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    buf = te.allocate_managed_buffer(4096)
    assert te.transfer_sync(info["session"], buf, info["addr"], 16, TransferOpcode.Write,
                            TransferNotify("req-1", "layer 3 done")) == 0
    target.send("notifies")
    assert json.loads(target.readline()) == [["req-1", "layer 3 done"]]
    assert te.batch_transfer_sync(info["session"], [buf], [info["addr"]], [8],
                                  TransferOpcode.Write, TransferNotify("req-2", "")) == 0
    target.send("notifies")
    assert json.loads(target.readline()) == [["req-2", ""]]
    assert te.get_notifies() == []
    target.send("quit")
    target.finish()
    te.close()


def test_http_metadata(child, metadata_url):
    from mooncake._util import free_port

    name = "127.0.0.1:%d" % free_port("127.0.0.1")  # with a metadata server the name is given
    target, info = start_target(child, name, metadata_url)
    assert info["session"] == name
    te = TransferEngine()
    assert te.initialize("127.0.0.1", metadata_url, "tcp", "") == 0
    buf = te.allocate_managed_buffer(4096)
    assert te.write_bytes_to_buffer(buf, b"via-http", 8) == 0
    assert te.transfer_sync_write(info["session"], buf, info["addr"], 8) == 0
    assert read_remote(target, 0, 8) == b"via-http"
    assert te.get_first_buffer_address(info["session"]) == info["addr"]  # the peer's buffer
    target.send("quit")
    target.finish()
    te.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_configurations():
    te = TransferEngine()
    assert te.get_rpc_port() == -1
    assert te.transfer_sync_write("127.0.0.1:1", 1, 1, 1) == -1
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "efa", "") == -1
    assert te.initialize("127.0.0.1", "zk://127.0.0.1:2181", "tcp", "") == -1  # unknown scheme
    port = _closed_port()  # etcd and redis forms are accepted; nothing answers there
    assert te.initialize("127.0.0.1", f"etcd://127.0.0.1:{port}", "tcp", "") == -1
    assert te.initialize("127.0.0.1", f"127.0.0.1:{port}", "tcp", "") == -1
    assert te.initialize("127.0.0.1", f"redis://127.0.0.1:{port}", "tcp", "") == -1
    assert te.initialize("127.0.0.1", "127.0.0.1:not-a-port", "tcp", "") == -1
    assert te.initialize("127.0.0.1:12345:npu_0", "P2PHANDSHAKE", "tcp", "") == 0
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == -1  # twice
    with pytest.raises(RuntimeError):
        te.transfer_write_on_cuda("x", 1, 1, 1)
    te.close()


def test_registration_semantics():
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    a = np.zeros(MiB, np.uint8)
    base = a.ctypes.data
    assert te.register_memory(base, MiB) == 0
    assert te.register_memory(base, MiB) == 0  # duplicate: fine, as in Mooncake
    assert te.register_memory(base + 4096, 4096) == 0  # inside
    assert te.register_memory(base + MiB // 2, MiB) == 0  # overlaps past the end
    assert te.batch_register_memory([base], [MiB, 2]) == -1  # mismatched lists
    assert te.unregister_memory(base + 4096) == 0
    assert te.unregister_memory(base) == 0
    assert te.unregister_memory(base) == 0
    assert te.unregister_memory(base + MiB // 2) == 0
    assert te.unregister_memory(base) < 0  # nothing left
    assert te._e.registration_count() == 0
    te.close()


def test_ucx_protocol_moves_bytes_through_ucx(monkeypatch):
    """protocol="ucx" (crescent's name) is honoured: with UCX restricted to
    its tcp transport the bytes are counted by the ucx transport, not tcp."""
    monkeypatch.setenv("UCX_TLS", "tcp")
    a, b = TransferEngine(), TransferEngine()
    if a.initialize("127.0.0.1", "P2PHANDSHAKE", "ucx", "") != 0:
        pytest.skip("this build has no ucx transport")
    assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "ucx", "") == 0
    src, dst = a.allocate_managed_buffer(MiB), b.allocate_managed_buffer(MiB)
    data = np.random.default_rng(7).integers(0, 256, 64 * 1024, dtype=np.uint8).tobytes()
    assert a.write_bytes_to_buffer(src, data, len(data)) == 0
    assert b.transfer_sync_read(a.get_local_segment_name(), dst, src, len(data)) == 0
    assert b.read_bytes_from_buffer(dst, len(data)) == data
    st = b._e.stats()
    assert st["ucx_bytes"] >= len(data) and st["bytes_tcp"] == 0, st
    a.close()
    b.close()
