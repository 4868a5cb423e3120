"""Fixtures for the Python conformance suite: real crescent-master and
crescent-metadata-server processes on free ports, store/engine helpers and a
helper that runs a second client process.

Binaries are found through CRESCENT_MASTER_BIN / CRESCENT_METADATA_SERVER_BIN
/ CRESCENT_CLIENT_BIN (set by CTest), else mooncake.cli.find_binary
(CRESCENT_BIN_DIR, the build tree next to the package, PATH). A missing
binary fails the suite: it is not a reason to skip.

With CRESCENT_PY_THIN=1 (CTest's python_thin_tests) the ``store`` and
``store_factory`` fixtures make thin clients instead: setup_dummy() against a
crescent-client daemon this module starts on the module's master, so the
conformance tests that use them run through the daemon.
"""

from __future__ import annotations

import os
import time
import re
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Dict, Iterator, List, Optional

import pytest

from mooncake import cli

MiB = 1 << 20


def _binary(name: str) -> str:
    path = cli.find_binary(name)
    if path is None:
        pytest.fail(f"{name} not found (set CRESCENT_BIN_DIR or {cli._ENV[name]})")
    return path


class Server:
    """A server process started for a test module; stop() checks a clean exit."""

    def __init__(self, argv: List[str], pattern: str, env: Optional[Dict[str, str]] = None):
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.stderr_lines: List[str] = []
        line = ""
        timer = threading.Timer(20.0, self.proc.kill)
        timer.start()
        try:
            line = self.proc.stdout.readline()
        finally:
            timer.cancel()
        m = re.search(pattern, line)
        if m is None:
            self.proc.kill()
            err = self.proc.stderr.read()
            raise RuntimeError(f"{argv[0]} did not start: stdout={line!r} stderr={err!r}")
        self.match = m
        # Drain stderr so the server never blocks on a full pipe.
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()

    def _read_stderr(self) -> None:
        for ln in self.proc.stderr:
            self.stderr_lines.append(ln)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9


def _show_log_if_failed(request, srv: Server, failed_before: int, what: str) -> None:
    """A test of the module failed: show the server's log (a failing call's
    text names what the client saw; the server's says why), past capturing."""
    if request.session.testsfailed == failed_before:
        return
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        sys.stderr.write("\n--- %s log (%s; a test of this module failed) ---\n%s--- end ---\n"
                         % (what, request.module.__name__, "".join(srv.stderr_lines[-200:])))


@pytest.fixture(scope="module")
def master(request) -> Iterator[str]:
    """Address "127.0.0.1:PORT" of a crescent-master owned by this test module."""
    srv = Server([_binary(cli.MASTER), "--rpc_port=0", "--metrics_port=0",
                  "--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1",
                  "--enable_metric_reporting=false", "--default_kv_lease_ttl=200ms"],
                 r"listening on (\S+) \(metrics (\S+)\)")
    failed_before = request.session.testsfailed
    yield srv.match.group(1)
    rc = srv.stop()
    _show_log_if_failed(request, srv, failed_before, "crescent-master")
    assert rc == 0, "crescent-master exited with %s: %s" % (rc, "".join(srv.stderr_lines))


@pytest.fixture(scope="module")
def metadata_url() -> Iterator[str]:
    """URL "http://127.0.0.1:PORT/metadata" of a crescent-metadata-server."""
    srv = Server([_binary(cli.METADATA_SERVER), "--host", "127.0.0.1", "--port", "0"],
                 r"listening on (\S+)")
    yield "http://%s/metadata" % srv.match.group(1)
    assert srv.stop() == 0


THIN = os.environ.get("CRESCENT_PY_THIN", "") not in ("", "0")
_daemons = 0


def start_daemon(master_addr: str, *extra: str) -> Server:
    """A crescent-client for master_addr on a socket of its own; match groups:
    1 the socket, 2 the segment name."""
    global _daemons
    _daemons += 1
    sock = "@crescent-pytest-%d-%d" % (os.getpid(), _daemons)
    return Server([_binary(cli.CLIENT), "--master_server_address=" + master_addr,
                   "--metadata_server=P2PHANDSHAKE", "--host=127.0.0.1", "--socket=" + sock,
                   "--global_segment_size=512MB", "--threads=2", "--protocol=auto"] +
                  list(extra),
                  r"serving (\S+) segment (\S+)")


@pytest.fixture(scope="module")
def daemon(master) -> Iterator[str]:
    """Socket name of a crescent-client serving this module's master."""
    srv = start_daemon(master)
    yield srv.match.group(1)
    rc = srv.stop()
    assert rc == 0, "crescent-client exited with %s: %s" % (rc, "".join(srv.stderr_lines))


@pytest.fixture
def store_factory(request, master):
    """make(**overrides) -> a set-up MooncakeDistributedStore, closed after the test
    (a thin client of the module's daemon when CRESCENT_PY_THIN is set)."""
    from mooncake.store import MooncakeDistributedStore

    made = []
    sock = request.getfixturevalue("daemon") if THIN else None

    def make(protocol: str = "tcp", gss: int = 64 * MiB, lbs: int = 16 * MiB,
             metadata: str = "P2PHANDSHAKE", host: str = "127.0.0.1"):
        s = MooncakeDistributedStore()
        if sock is not None:
            rc = s.setup_dummy(128 * MiB, max(lbs, 4 * MiB), sock)
        else:
            rc = s.setup(host, metadata, gss, lbs, protocol, "", master)
        assert rc == 0, f"setup returned {rc}"
        made.append(s)
        # A segment whose name and memory an earlier client of this module had
        # is fenced (no allocations) while that client's reads may still run:
        # tests start once it takes allocations (health_check() 0).
        deadline = time.monotonic() + 20
        while s.health_check() != 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert s.health_check() == 0, "the new store's segment stayed fenced or unreachable"
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture
def store(store_factory):
    return store_factory()


def child_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    if extra:
        env.update(extra)
    return env


class Child:
    """A second client process running `code` (with MASTER and ARGS globals).

    The child talks line by line: it prints results, the test writes
    commands to its stdin.
    """

    def __init__(self, code: str, master_addr: str = "", args: Optional[List[str]] = None,
                 env: Optional[Dict[str, str]] = None):
        prelude = "import sys, json\nMASTER = %r\nARGS = %r\n" % (master_addr, args or [])
        self.proc = subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=child_env(env))

    def readline(self, timeout: float = 60.0) -> str:
        timer = threading.Timer(timeout, self.proc.kill)
        timer.start()
        try:
            line = self.proc.stdout.readline()
        finally:
            timer.cancel()
        if not line:
            err = self.proc.stderr.read()
            raise RuntimeError(f"child exited (rc={self.proc.poll()}): {err}")
        return line.strip()

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 60.0) -> str:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise RuntimeError(f"child timed out: {err}")
        assert self.proc.returncode == 0, f"child failed ({self.proc.returncode}): {err}"
        return out


@pytest.fixture
def child():
    made = []

    def make(*a, **kw) -> Child:
        c = Child(*a, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait()


def torch_or_none():
    try:
        import torch  # noqa: F401

        return torch
    except Exception:  # noqa: BLE001 - any import failure means "no torch"
        return None
