"""Ports and environment variables of Mooncake deployments (issue 17, items 3
and 7), against a real crescent-master and metadata server:

* get_hostname() without a port in local_hostname reports "host:port" with
  the port in 12300..14300 (P2PHANDSHAKE and http metadata), or in the range
  of MC_STORE_CLIENT_MIN_PORT / MC_STORE_CLIENT_MAX_PORT; an invalid range
  falls back to the default with a warning; MC_STORE_CLIENT_SETUP_RETRIES
  bounds the attempts when the range is taken; a store set up again in the
  same process gets a port other than its last ones (the master fences a
  segment mounted over a just-unmounted name and memory, so a put right
  after such a setup would fail);
* a TransferEngine's RPC port is in 15000..17000 or MC_MIN_RPC_PORT /
  MC_MAX_RPC_PORT, and peers reach it there;
* MC_TE_METRIC / MC_TE_METRIC_INTERVAL_SECONDS report throughput;
* every other variable of the list (MC_TCP_BIND_ADDRESS, MC_USE_IPV6,
  MC_HANDSHAKE_PORT, MC_STORE_USE_HUGEPAGE, MC_STORE_HUGEPAGE_SIZE,
  MC_MMAP_ARENA_POOL_SIZE, MC_STORE_MEMCPY, MC_STORE_CLIENT_METRIC*) is
  named in one warning, once per process.
"""

from __future__ import annotations

import logging
import socket
import time

import pytest

import crescent
from mooncake import _util
from mooncake.engine import TransferEngine
from mooncake.store import MooncakeDistributedStore

MiB = 1 << 20


def port_of(name: str) -> int:
    return int(name.rsplit(":", 1)[1])


def setup_store(master, metadata="P2PHANDSHAKE", host="127.0.0.1"):
    s = MooncakeDistributedStore()
    rc = s.setup(host, metadata, 4 * MiB, MiB, "tcp", "", master)
    return s, rc


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for k in ("MC_STORE_CLIENT_MIN_PORT", "MC_STORE_CLIENT_MAX_PORT", "MC_MIN_RPC_PORT",
              "MC_MAX_RPC_PORT", "MC_STORE_CLIENT_SETUP_RETRIES", "MC_TE_METRIC"):
        monkeypatch.delenv(k, raising=False)
    _util._warned.clear()


def test_store_port_range(master, metadata_url, monkeypatch, caplog):
    for meta in ("P2PHANDSHAKE", metadata_url):
        s, rc = setup_store(master, meta)
        assert rc == 0
        name = s.get_hostname()
        assert name.startswith("127.0.0.1:") and 12300 <= port_of(name) <= 14300
        s2, rc = setup_store(master, meta)
        assert rc == 0 and s2.get_hostname() != name
        assert s2.put("ports/k", b"v", None) == 0 and s.get("ports/k") == b"v"
        assert s2.remove("ports/k", force=True) == 0
        s2.close()
        s.close()
    monkeypatch.setenv("MC_STORE_CLIENT_MIN_PORT", "13100")
    monkeypatch.setenv("MC_STORE_CLIENT_MAX_PORT", "13140")
    s, rc = setup_store(master)
    assert rc == 0 and 13100 <= port_of(s.get_hostname()) <= 13140
    s.close()
    monkeypatch.setenv("MC_STORE_CLIENT_MIN_PORT", "40000")  # inside the ephemeral range
    with caplog.at_level(logging.WARNING):
        s, rc = setup_store(master)
    assert rc == 0 and 12300 <= port_of(s.get_hostname()) <= 14300
    assert "invalid port range [40000, 13140]" in caplog.text
    s.close()
    s, rc = setup_store(master, host="127.0.0.1:0")  # a port given: used as given
    assert rc == 0 and not 12300 <= port_of(s.get_hostname()) <= 14300
    s.close()


def test_setup_retries_bounded(master, monkeypatch, caplog):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    if not _util._valid_port(port):
        # The kernel picked an ephemeral port: find a free one in the allowed range.
        # pick_port probes with SO_REUSEADDR (a port in TIME_WAIT passes), so bind
        # the same way, and pick again if another process took it in between.
        busy.close()
        for _ in range(20):
            busy = socket.socket()
            busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            port = _util.pick_port("127.0.0.1", 13500, 13900)
            try:
                busy.bind(("127.0.0.1", port))
                break
            except OSError:
                busy.close()
        busy.listen()
    try:
        monkeypatch.setenv("MC_STORE_CLIENT_MIN_PORT", str(port))
        monkeypatch.setenv("MC_STORE_CLIENT_MAX_PORT", str(port))
        monkeypatch.setenv("MC_STORE_CLIENT_SETUP_RETRIES", "3")
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING):
            s, rc = setup_store(master)
        assert rc < 0
        assert time.monotonic() - t0 < 10
        assert "after 3 attempts" in caplog.text
    finally:
        busy.close()


def test_setup_again_gets_another_name(master, monkeypatch):
    # An 8-port range outside the default one (no other test picks from it):
    # without keeping off the last picks, one of these setups gets its
    # predecessor's name back about one time in eight, its segment lands on
    # the same memory, and the put right after it finds the segment fenced
    # (the predecessor's read was leased until just now). With them kept off,
    # eight setups get eight names.
    lo = 14400
    monkeypatch.setenv("MC_STORE_CLIENT_MIN_PORT", str(lo))
    monkeypatch.setenv("MC_STORE_CLIENT_MAX_PORT", str(lo + 7))
    names = []
    for i in range(8):
        s, rc = setup_store(master)
        assert rc == 0
        names.append(s.get_hostname())
        assert lo <= port_of(names[-1]) <= lo + 7
        rc = s.put("again/%d" % i, b"v%d" % i)
        assert rc == 0, crescent.last_error_message()
        assert s.get("again/%d" % i) == b"v%d" % i
        s.close()
    assert len(set(names)) == 8, names


def test_master_local_socket_variable(master, monkeypatch, caplog):
    # A client on the master's host moves to the master's unix socket unless
    # CRESCENT_MASTER_LOCAL_SOCKET=0 keeps it on TCP (docs/WIRE.md "Local
    # socket"; tests/master: which connection each one uses). Both serve the
    # drop-in alike; a value other than 0 or 1 fails setup with
    # INVALID_PARAMS naming the variable instead of being ignored.
    for value in ("1", "0"):
        monkeypatch.setenv("CRESCENT_MASTER_LOCAL_SOCKET", value)
        s, rc = setup_store(master)
        assert rc == 0, crescent.last_error_message()
        assert s.put("local/" + value, b"via " + value.encode()) == 0
        assert s.get("local/" + value) == b"via " + value.encode()
        s.close()
    monkeypatch.setenv("CRESCENT_MASTER_LOCAL_SOCKET", "maybe")
    with caplog.at_level(logging.ERROR, logger="mooncake"):
        s, rc = setup_store(master)
    assert rc == -600
    assert "CRESCENT_MASTER_LOCAL_SOCKET='maybe'" in caplog.text


def test_engine_rpc_port_range(monkeypatch):
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert 15000 <= te.get_rpc_port() <= 17000
    monkeypatch.setenv("MC_MIN_RPC_PORT", "16100")
    monkeypatch.setenv("MC_MAX_RPC_PORT", "16120")
    te2 = TransferEngine()
    assert te2.initialize("127.0.0.1:1234", "P2PHANDSHAKE", "tcp", "") == 0  # P2P ignores it
    assert 16100 <= te2.get_rpc_port() <= 16120
    buf = te2.allocate_managed_buffer(4096)
    src = te.allocate_managed_buffer(4096)
    te.write_bytes_to_buffer(src, b"range" * 10, 50)
    assert te.transfer_sync_write(f"127.0.0.1:{te2.get_rpc_port()}", src, buf, 50) == 0
    assert te2.read_bytes_from_buffer(buf, 50) == b"range" * 10
    te.close()
    te2.close()


def test_te_metric_reports(monkeypatch, caplog):
    monkeypatch.setenv("MC_TE_METRIC", "1")
    monkeypatch.setenv("MC_TE_METRIC_INTERVAL_SECONDS", "1")
    a, b = TransferEngine(), TransferEngine()
    with caplog.at_level(logging.INFO, logger="mooncake"):
        assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        src, dst = a.allocate_managed_buffer(1 << 20), b.allocate_managed_buffer(1 << 20)
        peer = f"127.0.0.1:{b.get_rpc_port()}"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "[Metrics]" not in caplog.text:
            assert a.transfer_sync_write(peer, src, dst, 1 << 20) == 0
            time.sleep(0.1)
    a.close()
    b.close()
    assert "[Metrics] Transfer Engine 127.0.0.1:" in caplog.text
    assert "MB/s" in caplog.text


NAMED = {"MC_TCP_BIND_ADDRESS": "10.0.0.5", "MC_USE_IPV6": "1", "MC_HANDSHAKE_PORT": "12001",
         "MC_STORE_USE_HUGEPAGE": "1", "MC_STORE_HUGEPAGE_SIZE": "2MB",
         "MC_MMAP_ARENA_POOL_SIZE": "8gb", "MC_STORE_MEMCPY": "1",
         "MC_STORE_CLIENT_METRIC": "1", "MC_STORE_CLIENT_METRIC_INTERVAL": "5"}


def test_unused_variables_named_once(master, monkeypatch, caplog):
    for k, v in NAMED.items():
        monkeypatch.setenv(k, v)
    with caplog.at_level(logging.WARNING, logger="mooncake"):
        s, rc = setup_store(master)
        assert rc == 0
        s.close()
        s, rc = setup_store(master)  # a second client: no second warning
        assert rc == 0
        s.close()
    for name in NAMED:
        hits = [r for r in caplog.records if name in r.getMessage()]
        assert len(hits) == 1, (name, [r.getMessage() for r in hits])
