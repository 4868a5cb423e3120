"""Console commands mooncake_master / mooncake_http_metadata_server: Mooncake's
command lines start crescent's servers, so scripts that spawn them work."""

import os
import subprocess
import sys

import pytest

from conftest import Server, child_env
from mooncake import cli
from mooncake.engine import TransferEngine
from mooncake.store import MooncakeDistributedStore

MiB = 1 << 20


def command(name):
    """The build tree's generated script if CTest told us where, else the entry point."""
    bin_dir = os.environ.get("CRESCENT_PY_BIN")
    if bin_dir and os.path.exists(os.path.join(bin_dir, name)):
        return [os.path.join(bin_dir, name)]
    if name == "transfer_engine_bench":
        return [sys.executable, "-c",
                "import sys; from mooncake.te_bench import main; sys.exit(main())"]
    func = {"mooncake_master": "master", "mooncake_http_metadata_server": "metadata_server"}[name]
    return [sys.executable, "-c",
            f"import sys; from mooncake.cli import {func}; sys.exit({func}())"]


def test_translate_master_args(tmp_path):
    flagfile = tmp_path / "master.flags"
    flagfile.write_text("# comment\n--eviction_ratio=0.1\n\n--client_ttl=20\n")
    out = cli.translate_master_args([
        "--rpc_port=0", "--metrics_port", "0", "-rpc_address=127.0.0.1", "--v=1",
        "--logtostderr", "--log_dir", "/tmp", "--max_retry_attempts=5",
        "--pending_task_timeout_sec", "30", f"--flagfile={flagfile}", "--enable_ha=false"])
    assert out == ["--rpc_port=0", "--metrics_port", "0", "-rpc_address=127.0.0.1",
                   "--eviction_ratio=0.1", "--client_ttl=20", "--enable_ha=false"]


def test_mooncake_master_command(tmp_path):
    flagfile = tmp_path / "master.flags"
    flagfile.write_text("--eviction_high_watermark_ratio=0.95\n")
    srv = Server(command("mooncake_master") + [
        "--rpc_port=0", "--metrics_port", "0", "-rpc_address=127.0.0.1",
        "--metrics_host=127.0.0.1", "--v=1", "--logtostderr", "--max_retry_attempts=5",
        "--enable_metric_reporting=false", f"--flagfile={flagfile}"],
        r"listening on (\S+)", env=child_env())
    try:
        # The process is called mooncake_master (ps, pgrep -f), as Mooncake's is.
        with open(f"/proc/{srv.proc.pid}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[0] == b"mooncake_master"
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 4 * MiB, "tcp", "",
                       srv.match.group(1)) == 0
        assert s.put("cli/a", b"x") == 0 and s.get("cli/a") == b"x"
        s.close()
    finally:
        assert srv.stop() == 0


def test_mooncake_master_refuses_unsupported_flags():
    p = subprocess.run(command("mooncake_master") + ["--rpc_port=0", "--enable_ha=true"],
                       env=child_env(), capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert "enable_ha" in p.stderr


def test_mooncake_master_version():
    p = subprocess.run(command("mooncake_master") + ["--version"], env=child_env(),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "crescent" in (p.stdout + p.stderr)
    assert "mooncake_master" in p.stdout


def test_http_metadata_server_command(child):
    srv = Server(command("mooncake_http_metadata_server") + ["--host", "127.0.0.1", "--port",
                                                             "0"],
                 r"listening on (\S+)", env=child_env())
    url = "http://%s/metadata" % srv.match.group(1)
    try:
        a, b = TransferEngine(), TransferEngine()
        assert a.initialize("127.0.0.1:%d" % _free(), url, "tcp", "") == 0
        assert b.initialize("127.0.0.1:%d" % _free(), url, "tcp", "") == 0
        src = a.allocate_managed_buffer(4096)
        dst = b.allocate_managed_buffer(4096)
        assert a.write_bytes_to_buffer(src, b"metadata!", 9) == 0
        assert a.transfer_sync_write(b.get_local_segment_name(), src, dst, 9) == 0
        assert b.read_bytes_from_buffer(dst, 9) == b"metadata!"
        a.close()
        b.close()
    finally:
        assert srv.stop() == 0


def test_http_metadata_server_bad_args():
    p = subprocess.run(command("mooncake_http_metadata_server") + ["--port", "x"],
                       env=child_env(), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2


def _free():
    from mooncake._util import free_port

    return free_port("127.0.0.1")


def test_find_binary_env(monkeypatch, tmp_path):
    fake = tmp_path / "crescent-master"
    fake.write_text("#!/bin/sh\necho fake\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CRESCENT_MASTER_BIN", str(fake))
    assert cli.find_binary(cli.MASTER) == str(fake)
    monkeypatch.delenv("CRESCENT_MASTER_BIN")
    monkeypatch.setenv("CRESCENT_BIN_DIR", str(tmp_path))
    assert cli.find_binary(cli.MASTER) == str(fake)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))


def test_transfer_engine_bench_command():
    """Mooncake's target/initiator benchmark pair, with gflags-style flags."""
    target = subprocess.Popen(
        command("transfer_engine_bench") + ["--mode=target", "--buffer_size=16777216",
                                            "--protocol=tcp", "--device_name=mlx5_0"],
        stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        line = target.stdout.readline()
        assert "target ready: segment " in line, line
        segment = line.split("segment ")[1].split()[0]
        for op in ("read", "write"):
            out = subprocess.run(
                command("transfer_engine_bench") + [
                    "--mode=initiator", f"--segment_id={segment}", f"--operation={op}",
                    "--duration", "0.3", "--threads=2", "--batch_size=8", "--block_size=65536",
                    "--buffer_size=16777216"],
                capture_output=True, text=True, timeout=60, env=child_env())
            assert out.returncode == 0, out.stderr
            assert "Test completed" in out.stdout and "GB/s" in out.stdout
        # A missing segment id and an unknown flag are refused (exit 2).
        bad = subprocess.run(command("transfer_engine_bench") + ["--mode=initiator"],
                             capture_output=True, text=True, timeout=60, env=child_env())
        assert bad.returncode == 2
        bad = subprocess.run(command("transfer_engine_bench") + ["--no_such_flag=1"],
                             capture_output=True, text=True, timeout=60, env=child_env())
        assert bad.returncode == 2
    finally:
        target.terminate()
        assert target.wait(timeout=30) == 0
