"""The SSD tier through the mooncake drop-in: setup(enable_ssd_offload=True,
ssd_offload_path=...) on a holder, a master with --enable_offload
--offload_on_evict, more values than the holder's segment holds: every value
reads back from another client (the evicted ones from the holder's disk), and
get_offload_rpc_read_count counts the gets that were served from disk."""

import os

import pytest

from conftest import Server, _binary
from mooncake import cli
from mooncake.store import MooncakeDistributedStore

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def offload_master():
    srv = Server([_binary(cli.MASTER), "--rpc_port=0", "--metrics_port=0",
                  "--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1",
                  "--enable_metric_reporting=false", "--enable_offload=true",
                  "--offload_on_evict=true"],
                 r"listening on (\S+) \(metrics (\S+)\)")
    yield srv.match.group(1)
    assert srv.stop() == 0


def value(i: int) -> bytes:
    return (b"%08d" % i) * (MiB // 8)


def put_retry(s: MooncakeDistributedStore, key: str, v: bytes) -> int:
    import time
    for _ in range(3000):  # the segment waits for offloads to land
        rc = s.put(key, v)
        if rc != -200:
            return rc
        time.sleep(0.005)
    return rc


def test_values_come_back_from_disk(offload_master, tmp_path):
    holder = MooncakeDistributedStore()
    assert holder.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "",
                        offload_master, enable_ssd_offload=True,
                        ssd_offload_path=str(tmp_path / "ssd")) == 0
    reader = MooncakeDistributedStore()
    assert reader.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "",
                        offload_master) == 0
    n = 48
    for i in range(n):
        assert put_retry(reader, "ssd/%d" % i, value(i)) == 0
    for i in range(n):
        assert reader.get("ssd/%d" % i) == value(i), i
    served = reader.get_offload_rpc_read_count()
    assert served >= n // 2
    assert holder.get_offload_rpc_read_count() == 0
    assert reader.remove("ssd/0") == 0
    assert reader.get("ssd/0") == b""
    reader.close()
    holder.close()
    assert any(p.name.endswith(".bkt") for p in (tmp_path / "ssd").iterdir())
