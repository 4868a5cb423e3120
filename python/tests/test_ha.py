"""The HA master from Python (docs/ha.md): MooncakeDistributedStore.setup() given
master_server_addr="etcd://h:p" follows the leader of two crescent-master
--enable_ha processes; after a kill -9 of the leader every object reads back
and puts work. Skips without Debian's etcd-server (/usr/bin/etcd)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

from conftest import MiB, Server, _binary
from mooncake import cli
from mooncake.store import MooncakeDistributedStore

ETCD = "/usr/bin/etcd"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def etcd():
    if not os.access(ETCD, os.X_OK):
        pytest.skip("etcd-server is not installed")
    # on tmpfs where there is one: etcd's fsyncs must not stall its leases
    data = tempfile.mkdtemp(prefix="crescent-etcd-",
                            dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    client, peer = _free_port(), _free_port()
    proc = subprocess.Popen([ETCD, "--data-dir", data, "--name", "pytest",
                             "--listen-client-urls", f"http://127.0.0.1:{client}",
                             "--advertise-client-urls", f"http://127.0.0.1:{client}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-cluster", f"pytest=http://127.0.0.1:{peer}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 15
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{client}/health", timeout=1).read()
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        yield f"127.0.0.1:{client}"
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)


def _role(metrics: str) -> str:
    try:
        return urllib.request.urlopen(f"http://{metrics}/role", timeout=2).read().decode().strip()
    except OSError:
        return "down"


def test_store_follows_the_leader(etcd):
    masters = [Server([_binary(cli.MASTER), "--rpc_port=0", "--metrics_port=0",
                       "--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1",
                       "--enable_metric_reporting=false", "--enable_ha", f"--etcd_endpoints={etcd}", "--ha_lease_ttl_sec=2"],
                      # (the default read lease, 10 s: a get whose call spans the
                      # failover measures its lease from its first send)
                      r"listening on (\S+) \(metrics (\S+)\)") for _ in range(2)]
    try:
        deadline = time.time() + 10
        while sorted(_role(m.match.group(2)) for m in masters) != ["leader", "standby"]:
            assert time.time() < deadline, "no leader and standby"
            time.sleep(0.05)
        # the standby must be in sync before writes count on it
        leader = next(m for m in masters if _role(m.match.group(2)) == "leader")
        while True:
            body = urllib.request.urlopen(f"http://{leader.match.group(2)}/metrics").read()
            if b"master_ha_in_sync_standbys 1" in body:
                break
            assert time.time() < deadline, "standby never in sync"
            time.sleep(0.05)
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MiB, 16 * MiB, "tcp", "",
                       f"etcd://{etcd}") == 0
        values = {f"ha/{i}": os.urandom(4096 + i) for i in range(16)}
        for k, v in values.items():
            assert s.put(k, v) == 0
        leader.proc.send_signal(signal.SIGKILL)
        leader.proc.wait()
        for k, v in values.items():
            assert s.get(k) == v, "".join(l for m in masters for l in m.stderr_lines)
        assert s.put("ha/after", b"x" * 1000) == 0
        assert s.get("ha/after") == b"x" * 1000
        s.close()
    finally:
        for m in masters:
            if m.proc.poll() is None:
                assert m.stop() == 0


# --- engine descriptors in etcd and redis (Mooncake's metadata_server forms) ---------

ENGINE_TARGET = r"""
from mooncake.engine import TransferEngine
te = TransferEngine()
assert te.initialize(ARGS[0], ARGS[1], "tcp", "") == 0
addr = te.allocate_managed_buffer(1 << 20)
msg = b"descriptor-via-" + ARGS[2].encode()
assert te.write_bytes_to_buffer(addr, msg, len(msg)) == 0
print(json.dumps({"session": te.get_local_segment_name(), "addr": addr}), flush=True)
sys.stdin.readline()
te.close()
"""


def _etcd_keys(endpoint: str, prefix: str) -> list:
    """Keys under prefix, through etcd's v3 JSON gateway."""
    import base64
    import json
    enc = lambda b: base64.b64encode(b).decode()  # noqa: E731
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({"key": enc(prefix.encode()), "range_end": enc(end.encode()),
                       "keys_only": True}).encode()
    reply = json.loads(urllib.request.urlopen(f"http://{endpoint}/v3/kv/range", body,
                                              timeout=5).read())
    return [base64.b64decode(kv["key"]).decode() for kv in reply.get("kvs", [])]


def _read_from_target(child, meta: str, tag: str) -> tuple:
    """A target engine on `meta` publishes its buffer; this process reads it by
    session name alone (the descriptor comes from the metadata server)."""
    import json
    from mooncake.engine import TransferEngine
    # with a metadata server the segment name is local_hostname, so each
    # engine names its own port (as Mooncake users do)
    target = child(ENGINE_TARGET, args=[f"127.0.0.1:{_free_port()}", meta, tag])
    info = json.loads(target.readline())
    te = TransferEngine()
    assert te.initialize(f"127.0.0.1:{_free_port()}", meta, "tcp", "") == 0
    buf = te.allocate_managed_buffer(4096)
    want = ("descriptor-via-" + tag).encode()
    assert te.transfer_sync_read(info["session"], buf, info["addr"], len(want)) == 0
    assert te.read_bytes_from_buffer(buf, len(want)) == want
    te.close()
    return target, info["session"]


@pytest.mark.parametrize("form", ["etcd://{}", "{}"])
def test_engine_metadata_in_etcd(etcd, child, form):
    target, session = _read_from_target(child, form.format(etcd), "etcd")
    keys = _etcd_keys(etcd, "mooncake/")
    assert any(session in k for k in keys), keys
    target.send("quit")
    assert target.proc.wait(timeout=30) == 0
    # a closed engine removes its descriptor
    deadline = time.time() + 10
    while any(session in k for k in _etcd_keys(etcd, "mooncake/")):
        assert time.time() < deadline, "descriptor left in etcd after close"
        time.sleep(0.1)


REDIS = "/usr/bin/redis-server"


def test_engine_metadata_in_redis(child):
    if not os.access(REDIS, os.X_OK):
        pytest.skip("redis-server is not installed")
    data = tempfile.mkdtemp(prefix="crescent-redis-")
    port = _free_port()
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            assert time.time() < deadline, "redis-server did not start"
            time.sleep(0.1)
        target, session = _read_from_target(child, f"redis://127.0.0.1:{port}", "redis")
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"KEYS *\r\n")
            time.sleep(0.2)
            listing = c.recv(65536).decode(errors="replace")
        assert session in listing, listing
        target.send("quit")
        assert target.proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)
