"""Mooncake's session / range API (issue 17, item 1): batch_get_session_start /
_end, batch_put_session_start / _end / _revoke, batch_get_into_multi_buffer_ranges
and batch_put_from_multi_buffer_ranges, with Mooncake's names, arguments and
return conventions, against a real crescent-master (read lease 1 s) and, for
the reads, a second client process.

* the layer-wise example of Mooncake's documentation, writer here, reader in
  a child process: every byte of every layer round-trips; objects are
  invisible until batch_put_session_end;
* return conventions: [] / -1 before setup, -600 for mismatched lists, a key
  without a session, a range past the object's end, a second start of a key,
  -705 for a start on an existing key, 0 for a revoke, the seal after end;
* the read lease is held while the session is used (reads over three lease
  lengths succeed, a plain remove meanwhile is -706) and an idle session
  expires (-707);
* ReplicateConfig on put sessions: group_ids of the wrong length -600,
  dfs replicas -1012, reliable NoF -600, flexible NoF pair accepted.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from conftest import Server, _binary
from mooncake import cli
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

MiB = 1 << 20
PAGE = 1024
LAYERS = 4
LEASE_S = 1.0

SESSION_METHODS = ("batch_get_session_start", "batch_get_into_multi_buffer_ranges",
                   "batch_get_session_end", "batch_put_session_start",
                   "batch_put_from_multi_buffer_ranges", "batch_put_session_end",
                   "batch_put_session_revoke")


@pytest.fixture(scope="module")
def lease_master():
    srv = Server([_binary(cli.MASTER), "--rpc_port=0", "--metrics_port=0",
                  "--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1",
                  "--enable_metric_reporting=false", "--default_kv_lease_ttl=1s"],
                 r"listening on (\S+) \(metrics (\S+)\)")
    yield srv.match.group(1)
    assert srv.stop() == 0


@pytest.fixture
def stores(lease_master):
    made = []

    def make():
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MiB, 4 * MiB, "tcp", "",
                       lease_master) == 0
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def registered(store, arrays):
    for a in arrays:
        assert store.register_buffer(a.ctypes.data, a.nbytes) == 0
    return arrays


READER = r"""
import numpy as np
from mooncake.store import MooncakeDistributedStore
PAGE, LAYERS = 1024, 4
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", MASTER) == 0
keys = ARGS
dst = [np.zeros(PAGE, dtype=np.uint8) for _ in range(LAYERS)]
for d in dst:
    assert s.register_buffer(d.ctypes.data, d.nbytes) == 0
print(json.dumps(s.batch_get_session_start(keys)), flush=True)
out = {k: [] for k in keys}
for layer in range(LAYERS):
    rcs = s.batch_get_into_multi_buffer_ranges(
        keys[:1], [[dst[layer].ctypes.data]], [[PAGE]], [[layer * PAGE]])
    out[keys[0]].append((rcs[0], dst[layer].tolist()))
print(json.dumps(out), flush=True)
print(s.batch_get_session_end(keys), flush=True)
print(json.dumps(s.batch_get_into_multi_buffer_ranges(keys[:1], [[dst[0].ctypes.data]],
                                                      [[PAGE]], [[0]])), flush=True)
s.close()
"""


def test_methods_exist_with_upstream_signatures():
    # SGLang's MooncakeTreeConnector refuses to start without these.
    for name in SESSION_METHODS:
        assert callable(getattr(MooncakeDistributedStore, name, None)), name
    s = MooncakeDistributedStore()  # not set up: Mooncake's "client not initialized" values
    assert s.batch_get_session_start(["k"]) == []
    assert s.batch_get_into_multi_buffer_ranges(["k"], [[1]], [[1]], [[0]]) == []
    assert s.batch_get_session_end(["k"]) == -1
    assert s.batch_put_session_start(["k"], [1]) == []
    assert s.batch_put_from_multi_buffer_ranges(["k"], [[1]], [[1]], [[0]]) == []
    assert s.batch_put_session_end(["k"]) == []
    assert s.batch_put_session_revoke(["k"]) == []


def test_layerwise_example_across_processes(stores, lease_master, child):
    w = stores()
    keys = ["layer/block0", "layer/block1"]
    src = registered(w, [np.full(PAGE, 10 + i, dtype=np.uint8) for i in range(LAYERS)])
    assert w.batch_put_session_start(keys, [PAGE * LAYERS] * 2) == [0, 0]
    for layer in range(LAYERS):
        rcs = w.batch_put_from_multi_buffer_ranges(keys, [[src[layer].ctypes.data]] * 2,
                                                   [[PAGE]] * 2, [[layer * PAGE]] * 2)
        assert rcs == [PAGE, PAGE]
        assert w.is_exist(keys[0]) == 0  # invisible until the end
    assert w.batch_put_session_end(keys) == [0, 0]
    assert w.is_exist(keys[0]) == 1 and w.get_size(keys[1]) == PAGE * LAYERS

    c = child(READER, lease_master, keys)
    import json
    assert json.loads(c.readline()) == [0, 0]
    got = json.loads(c.readline())[keys[0]]
    for layer, (rc, data) in enumerate(got):
        assert rc == PAGE and data == [10 + layer] * PAGE
    assert c.readline() == "0"
    assert json.loads(c.readline()) == [-600]  # session ended
    c.finish()
    whole = w.get(keys[1])
    assert whole == b"".join(bytes([10 + i]) * PAGE for i in range(LAYERS))


def test_return_conventions(stores):
    w, r = stores(), stores()
    src = registered(w, [np.arange(4 * PAGE, dtype=np.uint8)])[0]
    dst = registered(r, [np.zeros(4 * PAGE, dtype=np.uint8)])[0]
    p, q = src.ctypes.data, dst.ctypes.data
    assert w.batch_put_session_start([], []) == []
    assert w.batch_put_session_start(["rc/a", "rc/b"], [4 * PAGE]) == [-600, -600]
    assert w.batch_put_session_start(["rc/a", "rc/a", "rc/b"], [4 * PAGE] * 3) == [0, -600, 0]
    assert w.batch_put_session_start(["rc/a"], [4 * PAGE]) == [-600]  # already open
    # outer lists of the wrong length: every key -600; inner mismatch: that key only
    assert w.batch_put_from_multi_buffer_ranges(["rc/a", "rc/b"], [[p]], [[PAGE]] * 2,
                                                [[0]] * 2) == [-600, -600]
    assert w.batch_put_from_multi_buffer_ranges(["rc/a", "rc/b"], [[p, p], [p]],
                                                [[PAGE], [PAGE]], [[0], [0]]) == [-600, PAGE]
    # past the end, no session, zero fragments
    assert w.batch_put_from_multi_buffer_ranges(["rc/a", "rc/none", "rc/b"],
                                                [[p], [p], []], [[PAGE + 1], [1], []],
                                                [[3 * PAGE], [0], []]) == [-600, -600, 0]
    rcs = w.batch_put_from_multi_buffer_ranges(["rc/a"], [[p, p + PAGE]], [[PAGE, 3 * PAGE]],
                                               [[0, PAGE]])
    assert rcs == [4 * PAGE]
    assert w.batch_put_session_end(["rc/a", "rc/none"]) == [0, -600]
    # sealed: no more ranged writes, no second end
    assert w.batch_put_from_multi_buffer_ranges(["rc/a"], [[p]], [[1]], [[0]]) == [-600]
    assert w.batch_put_session_end(["rc/a"]) == [-600]
    assert w.batch_put_session_start(["rc/a"], [4 * PAGE]) == [-705]  # exists complete
    # revoke: the object never appears; revoking again has no session
    assert w.batch_put_session_revoke(["rc/b"]) == [0]
    assert w.batch_put_session_revoke(["rc/b"]) == [-600]
    assert r.get("rc/b") == b""
    # reads: misses, ranges past the end, offsets within the object
    assert r.batch_get_session_start(["rc/a", "rc/missing"]) == [0, -704]
    assert r.batch_get_into_multi_buffer_ranges(["rc/a", "rc/missing"], [[q], [q]],
                                                [[4 * PAGE + 1], [1]], [[0], [0]]) == [-600, -600]
    assert r.batch_get_into_multi_buffer_ranges(["rc/a"], [[q, q + 100]], [[100, 7]],
                                                [[4 * PAGE - 100, 5]]) == [107]
    assert dst[:100].tolist() == src[4 * PAGE - 100:].tolist()
    assert dst[100:107].tolist() == src[5:12].tolist()
    with pytest.raises(TypeError):
        r.batch_get_into_multi_buffer_ranges(["rc/a"], [[q]], [[-1]], [[0]])
    with pytest.raises(TypeError):
        r.batch_get_session_start([1])
    assert r.batch_get_session_end(["rc/a", "rc/never"]) == 0


def test_lease_held_while_used_and_expires_when_idle(stores):
    w, r = stores(), stores()
    value = bytes(range(256)) * 16
    assert w.put("lease/k", value) == 0
    dst = registered(r, [np.zeros(len(value), dtype=np.uint8)])[0]
    assert r.batch_get_session_start(["lease/k"]) == [0]
    deadline = time.monotonic() + 3 * LEASE_S
    n = 0
    while time.monotonic() < deadline:
        off = (n * 64) % len(value)
        assert r.batch_get_into_multi_buffer_ranges(["lease/k"], [[dst.ctypes.data]], [[64]],
                                                    [[off]]) == [64]
        assert bytes(dst[:64]) == value[off:off + 64]
        if n == 5:
            assert w.remove("lease/k") == -706  # the session's lease holds
        n += 1
        time.sleep(0.1)
    assert n >= 10
    time.sleep(LEASE_S + 0.5)  # idle: the lease runs out
    assert r.batch_get_into_multi_buffer_ranges(["lease/k"], [[dst.ctypes.data]], [[64]],
                                                [[0]]) == [-707]
    assert r.batch_get_into_multi_buffer_ranges(["lease/k"], [[dst.ctypes.data]], [[64]],
                                                [[0]]) == [-600]  # the session is gone
    assert w.remove("lease/k") == 0


def test_put_session_config(stores):
    w = stores()
    cfg = ReplicateConfig()
    cfg.group_ids = ["g"]
    assert w.batch_put_session_start(["cfg/a", "cfg/b"], [PAGE, PAGE], cfg) == [-600, -600]
    cfg = ReplicateConfig()
    cfg.dfs_replica_num = 1
    assert w.batch_put_session_start(["cfg/a"], [PAGE], cfg) == [-1012]
    cfg = ReplicateConfig()
    cfg.replica_num, cfg.nof_replica_num = 2, 1
    assert w.batch_put_session_start(["cfg/a"], [PAGE], cfg) == [-600]
    cfg = ReplicateConfig()
    cfg.nof_replica_num = 1  # Mooncake's flexible pair: finished as the memory replica
    cfg.group_ids = ["grp"]
    assert w.batch_put_session_start(["cfg/a"], [PAGE], config=cfg) == [0]
    src = registered(w, [np.full(PAGE, 7, dtype=np.uint8)])[0]
    assert w.batch_put_from_multi_buffer_ranges(["cfg/a"], [[src.ctypes.data]], [[PAGE]],
                                                [[0]]) == [PAGE]
    assert w.batch_put_session_end(["cfg/a"]) == [0]
    assert w.get("cfg/a") == b"\x07" * PAGE
