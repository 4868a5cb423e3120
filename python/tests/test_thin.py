"""The mooncake package's thin ("dummy") client: setup_dummy against a
standalone store client started with the ``mooncake_client`` command and
Mooncake's flags, as vLLM's standalone-store mode, SGLang's standalone
storage and TransferQueue's bootstrap run it.

Real processes throughout: the module's crescent-master, mooncake_client
(crescent-client) daemons, and, for the multi-client test, eight Python
processes with a thin client each. The conformance tests that apply to thin
clients run again through a daemon in CTest's python_thin_tests
(CRESCENT_PY_THIN=1, see conftest.py).
"""

from __future__ import annotations

import ctypes
import os
import random
import subprocess
import sys
import time

import numpy as np
import pytest

import crescent
from conftest import MiB, Server, child_env

from mooncake import cli
from mooncake.store import MooncakeDistributedStore, MooncakeHostMemAllocator

DAEMON_UNREACHABLE = -3060
DAEMON_LOST = -3061
TENANT_MISMATCH = -3062


def client_command():
    bin_dir = os.environ.get("CRESCENT_PY_BIN")
    if bin_dir and os.path.exists(os.path.join(bin_dir, "mooncake_client")):
        return [os.path.join(bin_dir, "mooncake_client")]
    return [sys.executable, "-c",
            "import sys; from mooncake.cli import client; sys.exit(client())"]


class Daemon:
    """mooncake_client on a port of its own (the port names its socket)."""

    def __init__(self, master: str, port: int = 0, *extra: str):
        last = None
        for _ in range(20):
            self.port = port or random.randint(20000, 60000)
            try:
                self.srv = Server(client_command() + [
                    "--host=127.0.0.1", "--port=%d" % self.port,
                    "--master_server_address=" + master, "--metadata_server=P2PHANDSHAKE",
                    "--global_segment_size=512 MB", "--local_buffer_size=0", "--threads=2",
                    "--protocol=tcp"] + list(extra),
                    r"serving (\S+) segment (\S+)", env=child_env())
                self.segment = self.srv.match.group(2)
                self.address = "127.0.0.1:%d" % self.port
                return
            except RuntimeError as e:  # that port's socket is taken: another one
                last = e
                if port:
                    break
        raise RuntimeError(f"mooncake_client did not start: {last}")

    def stop(self) -> int:
        return self.srv.stop()

    def kill(self) -> None:
        self.srv.proc.kill()
        self.srv.proc.wait()


@pytest.fixture
def daemon_factory(master):
    made = []

    def make(*extra: str, port: int = 0) -> Daemon:
        d = Daemon(master, port, *extra)
        made.append(d)
        return d

    yield make
    for d in made:
        if d.srv.proc.poll() is None:
            assert d.stop() == 0, "".join(d.srv.stderr_lines)


def dummy(addr: str, pool: int = 64 * MiB, lbs: int = 16 * MiB) -> MooncakeDistributedStore:
    s = MooncakeDistributedStore()
    assert s.setup_dummy(pool, lbs, addr) == 0
    return s


def test_setup_dummy_round_trip(daemon_factory):
    d = daemon_factory()
    s = dummy(d.address)
    try:
        assert s.get_hostname() == d.segment  # the daemon's segment holds the replicas
        assert s.health_check() == 0
        assert s.put("t/a", b"hello" * 1000) == 0
        assert s.get("t/a") == b"hello" * 1000
        assert s.is_exist("t/a") == 1 and s.get_size("t/a") == 5000
        h = s.get_buffer("t/a")
        assert h is not None and bytes(memoryview(h)) == b"hello" * 1000
        # alloc_from_mem_pool: pool memory, zero-copy both ways
        p = s.alloc_from_mem_pool(2 * MiB)
        assert p != 0
        ctypes.memmove(p, bytes(range(256)) * 4096, MiB)
        assert s.put_from("t/pool", p, MiB) == 0
        assert s.get_into("t/pool", p + MiB, MiB) == MiB
        assert ctypes.string_at(p + MiB, MiB) == bytes(range(256)) * 4096
        st = s._s.thin_stats()
        assert st["zero_copy_bytes"] >= 2 * MiB and st["slow_path_bytes"] == 0
        # same uid: the put and the get above went straight to the daemon's segment
        assert st["direct_put_keys"] >= 1 and st["direct_get_keys"] >= 1
        # batch forms
        keys = [f"t/b{i}" for i in range(20)]
        vals = [os.urandom(1000 + i * 997) for i in range(20)]
        assert s.put_batch(keys, vals) == 0
        assert s.get_batch(keys) == vals
        assert s.batch_is_exist(keys + ["t/none"]) == [1] * 20 + [0]
        time.sleep(0.4)  # the conftest master's read lease is 200 ms
        assert s.remove("t/b0") == 0 and s.is_exist("t/b0") == 0
        assert s.get("t/none") == b""
    finally:
        assert s.close() == 0


def test_sglang_standalone_pattern(daemon_factory):
    """SGLang's MooncakeStore with standalone storage: setup_dummy,
    MooncakeHostMemAllocator for the host KV pool, register_buffer,
    batch_put_from / batch_get_into on it, batch_is_exist, remove_all."""
    d = daemon_factory()
    s = dummy(d.address)
    try:
        assert s.put("warmup", bytes(4096)) == 0
        assert s.is_exist("warmup") == 1 and s.get("warmup") == bytes(4096)
        alloc = MooncakeHostMemAllocator()
        pool = alloc.alloc(8 * MiB)
        assert pool != 0
        assert s.register_buffer(pool, 8 * MiB) == 0
        page = 64 * 1024
        keys = [f"sg/{i}" for i in range(32)]
        for i in range(32):
            ctypes.memset(pool + i * page, i + 1, page)
        assert s.batch_put_from(keys, [pool + i * page for i in range(32)], [page] * 32) == \
            [0] * 32
        out = pool + 4 * MiB
        assert s.batch_get_into(keys, [out + i * page for i in range(32)], [page] * 32) == \
            [page] * 32
        for i in range(32):
            assert ctypes.string_at(out + i * page, page) == bytes([i + 1]) * page
        st = s._s.thin_stats()
        assert st["shared_regions"] == 1  # the daemon maps the allocator's memory too
        assert st["slow_path_bytes"] == 0
        assert s.batch_is_exist(keys) == [1] * 32
        time.sleep(0.4)  # the conftest master's lease is 200 ms
        assert s.remove_all() >= 33
        assert s.unregister_buffer(pool) == 0
        assert alloc.free(pool) == 0
    finally:
        s.close()


def test_plain_memory_is_the_slow_path(daemon_factory, monkeypatch):
    d = daemon_factory()
    # Puts through the daemon: a direct put (the default) copies plain memory
    # straight into the daemon's segment, with no slow path to count.
    monkeypatch.setenv("CRESCENT_THIN_DIRECT_PUT", "0")
    s = dummy(d.address)
    try:
        a = np.arange(MiB // 8, dtype=np.int64)
        b = np.zeros_like(a)
        for arr in (a, b):
            assert s.register_buffer(arr.ctypes.data, arr.nbytes) == 0
        assert s.put_from("np/a", a.ctypes.data, a.nbytes) == 0
        assert s.get_into("np/a", b.ctypes.data, b.nbytes) == a.nbytes
        assert (a == b).all()
        st = s._s.thin_stats()
        assert st["slow_path_regions"] == 2
        # The put is copied through the pool; the get reads the daemon's segment
        # straight into b (direct reads: one copy, no pool hop).
        assert st["slow_path_calls"] == 1 and st["slow_path_bytes"] == a.nbytes
    finally:
        s.close()


MULTI_CHILD = r'''
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
rc = s.setup_dummy(3200 << 20, 512 << 20, ARGS[0])
print("setup", rc, flush=True)
me, n = int(ARGS[1]), int(ARGS[2])
for i in range(50):
    assert s.put(f"m/{me}/{i}", bytes([me]) * (1000 + 4096 * i)) == 0
print("put", flush=True)
sys.stdin.readline()   # everyone has put
bad = 0
for other in range(n):
    for i in range(0, 50, 7):
        v = s.get(f"m/{other}/{i}")
        bad += v != bytes([other]) * (1000 + 4096 * i)
print("got", bad, flush=True)
sys.stdin.readline()
print("close", s.close(), flush=True)
'''


def test_eight_dummy_clients(daemon_factory, child):
    """TP=8: eight thin clients of one daemon, at once, each reading the others'."""
    d = daemon_factory()
    n = 8
    kids = [child(MULTI_CHILD, args=[d.address, str(i), str(n)]) for i in range(n)]
    for k in kids:
        assert k.readline() == "setup 0"
    for k in kids:
        assert k.readline(timeout=120) == "put"
    for k in kids:
        k.send("go")
    for k in kids:
        assert k.readline(timeout=120) == "got 0"
    for k in kids:
        k.send("go")
    for k in kids:
        assert k.readline() == "close 0"
        k.finish()


def test_daemon_lost_and_back(daemon_factory):
    d = daemon_factory()
    s = dummy(d.address)
    try:
        assert s.put("r/1", b"x" * 100) == 0
        port = d.port
        d.kill()
        t0 = time.monotonic()
        rc = s.put("r/2", b"y" * 100)
        assert rc in (DAEMON_LOST, DAEMON_UNREACHABLE)
        assert s.health_check() == 2
        assert s.put("r/3", b"z" * 100) == DAEMON_UNREACHABLE
        assert time.monotonic() - t0 < 3.0
        daemon_factory(port=port)  # the same port, hence the same socket
        for _ in range(50):
            if s.put("r/4", b"w" * 100) == 0:
                break
            time.sleep(0.05)
        assert s.get("r/4") == b"w" * 100
        assert s.health_check() == 0
        assert s._s.thin_stats()["reconnects"] == 1
    finally:
        s.close()


def test_tenant_must_match(daemon_factory, monkeypatch):
    d = daemon_factory()
    monkeypatch.setenv("MOONCAKE_TENANT_ID", "someone-else")
    s = MooncakeDistributedStore()
    assert s.setup_dummy(64 * MiB, 16 * MiB, d.address) == TENANT_MISMATCH
    monkeypatch.setenv("MOONCAKE_TENANT_ID", "default")
    assert s.setup_dummy(64 * MiB, 16 * MiB, d.address) == 0
    s.close()


def test_no_daemon_and_bad_arguments():
    s = MooncakeDistributedStore()
    assert s.setup_dummy(64 * MiB, 16 * MiB, "127.0.0.1:1") == DAEMON_UNREACHABLE
    assert s.setup_dummy(64 * MiB, 16 * MiB, "not an address") < 0
    assert s.setup_dummy("lots", 16 * MiB, "127.0.0.1:50052") == -600
    assert s.alloc_from_mem_pool(4096) == 0  # not set up


def test_mooncake_client_flags():
    """mooncake_client refuses what it cannot honour with exit 2 and a message."""
    for bad in (["--no_such_flag=1"], ["--protocol=nvlink"], ["--global_segment_size=lots"]):
        r = subprocess.run(client_command() + bad, capture_output=True, text=True,
                           env=child_env(), timeout=60)
        assert r.returncode == 2, (bad, r.stderr)
        assert r.stderr.strip(), bad
    r = subprocess.run(client_command() + ["--help"], capture_output=True, text=True,
                       env=child_env(), timeout=60)
    assert r.returncode == 0 and "--master_server_address" in r.stdout
    assert cli.find_binary(cli.CLIENT) is not None


def test_tenants_are_namespaces(master, daemon_factory):
    """setup(tenant_id=...) and a daemon's --tenant_id: the same key is one
    object per tenant; remove_all reaches only the caller's tenant."""
    args = ("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 4 * MiB, "tcp", "", master)
    t1, t2, dflt = (MooncakeDistributedStore() for _ in range(3))
    assert t1.setup(*args, tenant_id="t1") == 0
    assert t2.setup(*args, tenant_id="t2") == 0
    assert dflt.setup(*args) == 0
    d = daemon_factory("--tenant_id=t1")
    thin = dummy(d.address)
    try:
        assert t1.put("same", b"one") == 0
        assert t2.put("same", b"two") == 0
        rc = dflt.put("same", b"zero")
        assert rc == 0, crescent.last_error_message()
        assert thin.get("same") == b"one"  # the daemon's tenant is t1
        assert t2.get("same") == b"two" and dflt.get("same") == b"zero"
        time.sleep(0.4)
        assert t2.remove_all() == 1
        assert t1.get("same") == b"one" and dflt.get("same") == b"zero"
        assert t2.is_exist("same") == 0
    finally:
        for s in (thin, t1, t2, dflt):
            s.close()
