"""transfer_engine_bench with the rest of Mooncake's flags (issue 17, item 8):
a real target process and initiator processes.

* --report_unit in Mooncake's decimal and binary units and --report_precision
  shape the throughput line; an unknown unit warns and reports GB/s;
* gflags spellings: -flag=value, bare --init_mem, --noinit_mem, --flagfile;
* --use_vram=false, --gpu_id, --backend=classic, --auto_discovery=false,
  --nic_priority_matrix= are accepted; --use_vram / --use_vram=true,
  --backend=tent, --auto_discovery=true and a NIC priority matrix are each
  refused by name with exit 2 before any engine starts.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import child_env
from test_cli import command

BENCH = command("transfer_engine_bench")


def run(args, timeout=60):
    return subprocess.run(BENCH + args, capture_output=True, text=True, timeout=timeout,
                          env=child_env())


@pytest.fixture(scope="module")
def target():
    proc = subprocess.Popen(BENCH + ["--mode=target", "--buffer_size=8388608", "--protocol=tcp",
                                     "--use_vram=false", "--gpu_id=0", "--noinit_mem"],
                            stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        line = proc.stdout.readline()
        assert "target ready: segment " in line, line
        yield line.split("segment ")[1].split()[0]
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def initiator(segment, *extra):
    return run(["--mode=initiator", f"--segment_id={segment}", "--duration=0.2", "--threads=1",
                "--batch_size=4", "--block_size=4096", "--buffer_size=8388608",
                *extra])


@pytest.mark.parametrize("unit,precision", [("GiB", 4), ("MB", 0), ("Kb", 3), ("KiB", 1)])
def test_report_unit_and_precision(target, unit, precision):
    out = initiator(target, f"--report_unit={unit}", f"--report_precision={precision}",
                    "--backend=classic", "-init_mem=true", "--auto_discovery=false",
                    "--nic_priority_matrix=")
    assert out.returncode == 0, out.stderr
    m = re.search(r"throughput (\S+) (\S+)/s", out.stdout)
    assert m, out.stdout
    assert m.group(2) == unit
    number = m.group(1)
    assert (len(number.split(".")[1]) if "." in number else 0) == precision


def test_unknown_unit_warns_and_uses_gb(target, tmp_path):
    flags = tmp_path / "bench.flags"
    flags.write_text("# Mooncake flag file\n--report_unit=TB\n--init_mem\n")
    out = initiator(target, f"--flagfile={flags}")
    assert out.returncode == 0, out.stderr
    assert "report_unit=TB" in out.stderr and re.search(r"throughput \S+ GB/s", out.stdout)


@pytest.mark.parametrize("flag,named", [
    ("--use_vram", "--use_vram=true"), ("--use_vram=true", "--use_vram=true"),
    ("--backend=tent", "--backend=tent"), ("--auto_discovery", "--auto_discovery=true"),
    ("--nic_priority_matrix=/etc/nics.json", "--nic_priority_matrix"),
    ("--report_precision=-1", "--report_precision"), ("--use_vram=maybe", "use_vram")])
def test_refused_flags_named(flag, named):
    out = run(["--mode=target", flag])
    assert out.returncode == 2
    assert named in out.stderr
    assert "target ready" not in out.stdout
