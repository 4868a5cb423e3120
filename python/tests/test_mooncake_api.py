"""mooncake.store surface: names, signatures, ReplicateConfig and return conventions
(api-contract.md §0, §3 and mooncake-store.md §1)."""

import inspect
import json

import numpy as np
import pytest

import mooncake
from mooncake.mooncake_config import MooncakeConfig
from mooncake.store import (BufferHandle, MooncakeDistributedStore, ReplicateConfig,
                            SoftPinAction)

MiB = 1 << 20

STORE_METHODS = [
    "setup", "setup_dummy", "close", "health_check", "get_hostname", "put", "put_parts",
    "put_batch", "put_from", "put_from_with_metadata", "batch_put_from",
    "batch_put_from_multi_buffers", "upsert", "upsert_from", "upsert_parts", "upsert_batch",
    "batch_upsert_from", "get", "get_batch", "get_buffer", "batch_get_buffer", "get_into",
    "batch_get_into", "batch_get_into_multi_buffers", "is_exist", "batch_is_exist", "get_size",
    "remove", "remove_by_regex", "remove_all", "batch_remove", "register_buffer",
    "unregister_buffer", "batch_get_replica_desc",
]


def test_module_layout():
    import mooncake.engine as eng
    import mooncake.store as st

    for name in STORE_METHODS:
        assert callable(getattr(MooncakeDistributedStore, name)), name
    assert {"MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction",
            "BufferHandle", "MooncakeHostMemAllocator"} <= set(dir(st))
    assert {"TransferEngine", "TransferOpcode", "TransferNotify"} <= set(dir(eng))
    assert eng.TransferOpcode.Read == 0 and eng.TransferOpcode.Write == 1
    assert eng.Read == 0 and eng.Write == 1
    assert mooncake.__version__


def test_signatures_match_mooncake():
    sig = inspect.signature(MooncakeDistributedStore.setup)
    assert list(sig.parameters)[1:] == [
        "local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
        "protocol", "rdma_devices", "master_server_addr", "engine", "enable_ssd_offload",
        "ssd_offload_path", "tenant_id", "enable_client_http_server", "client_http_port"]
    assert "enable_ssd_offload" in MooncakeDistributedStore.setup.__doc__
    params = lambda f: list(inspect.signature(f).parameters)[1:]  # noqa: E731
    S = MooncakeDistributedStore
    assert params(S.put) == ["key", "value", "config"]
    assert params(S.put_from) == ["key", "buffer_ptr", "size", "config"]
    assert params(S.batch_put_from) == ["keys", "buffer_ptrs", "sizes", "config"]
    assert params(S.batch_upsert_from) == ["keys", "buffer_ptrs", "sizes", "config"]
    assert params(S.batch_get_into) == ["keys", "buffer_ptrs", "sizes"]
    assert params(S.batch_put_from_multi_buffers) == ["keys", "all_buffer_ptrs", "all_sizes",
                                                      "config"]
    assert params(S.batch_get_into_multi_buffers) == ["keys", "all_buffer_ptrs", "all_sizes",
                                                      "prefer_alloc_in_same_node"]
    assert params(S.put_parts) == ["key", "parts", "config"]
    assert params(S.remove) == ["key", "force"]
    assert params(S.remove_all) == ["force"]
    assert params(S.batch_remove) == ["keys", "force"]
    assert params(S.remove_by_regex) == ["regex_pattern", "force"]
    assert params(S.register_buffer) == ["buffer_ptr", "size"]


def test_setup_type_errors_without_a_master():
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError) as ei:
        s.setup("h", "P2PHANDSHAKE", 1, 2, "tcp", "", "m:1", None, not_a_kwarg=1)
    assert "not_a_kwarg" in str(ei.value)
    with pytest.raises(TypeError):
        s.setup("h", "P2PHANDSHAKE", 1, 2, "tcp", "")  # 6 positional: master missing
    with pytest.raises(TypeError):
        s.setup(1, "P2PHANDSHAKE", MiB, MiB, "tcp", "", "127.0.0.1:1")
    # Calls before setup: error codes, b"", None -- never exceptions.
    assert s.put("k", b"v") < 0
    assert s.get("k") == b""
    assert s.get_buffer("k") is None
    assert s.batch_get_buffer(["k"]) == [None]
    assert s.is_exist("k") < 0
    assert s.health_check() == 1
    assert s.get_hostname() == ""
    assert s.close() == 0


def test_replicate_config_fields_and_checks():
    rc = ReplicateConfig()
    assert rc.replica_num == 1 and rc.with_hard_pin is False
    assert rc.soft_pin_action == SoftPinAction.PRESERVE and rc.soft_pin_ttl_ms is None
    assert rc.preferred_segment == "" and rc.preferred_segments == []
    assert rc.prefer_alloc_in_same_node is False and rc.group_ids is None
    assert [SoftPinAction.PRESERVE, SoftPinAction.ENABLE, SoftPinAction.DISABLE] == [0, 1, 2]
    rc.replica_num = 2
    rc.with_hard_pin = True
    rc.soft_pin_action = SoftPinAction.ENABLE
    rc.soft_pin_ttl_ms = 5000
    rc.preferred_segments = ["a:1", "b:2"]
    rc.group_ids = ["g1"]
    assert "replica_num: 2" in str(rc)
    rc.soft_pin_ttl_ms = None
    for field, bad in [("replica_num", "2"), ("replica_num", 1.5), ("with_hard_pin", 1),
                       ("soft_pin_ttl_ms", "10"), ("soft_pin_ttl_ms", 1.0),
                       ("soft_pin_ttl_ms", True), ("soft_pin_action", "ENABLE"),
                       ("preferred_segment", 3), ("preferred_segments", "a:1"),
                       ("group_ids", [1, 2]), ("prefer_alloc_in_same_node", None)]:
        with pytest.raises(TypeError):
            setattr(rc, field, bad)
    with pytest.raises(TypeError):  # out of range is a TypeError, as in Mooncake's bindings
        rc.soft_pin_ttl_ms = -1
    with pytest.raises(AttributeError):
        rc.no_such_field = 1


def test_return_conventions(store):
    s = store
    assert s.put("rc/a", b"value-a") == 0
    assert s.put("rc/a", b"other") == 0  # existing key: success, value unchanged
    assert s.get("rc/a") == b"value-a"
    assert s.upsert("rc/a", b"value-b") == 0
    assert s.get("rc/a") == b"value-b"
    assert s.get("rc/missing") == b""
    assert s.get_buffer("rc/missing") is None
    assert s.is_exist("rc/a") == 1 and s.is_exist("rc/missing") == 0
    assert s.batch_is_exist(["rc/a", "rc/missing"]) == [1, 0]
    assert s.get_size("rc/a") == 7 and s.get_size("rc/missing") == -704
    bufs = s.batch_get_buffer(["rc/a", "rc/missing"])
    assert isinstance(bufs[0], BufferHandle) and bufs[1] is None
    assert bufs[0].size() == 7 and bytes(memoryview(bufs[0])) == b"value-b"
    assert s.put_batch(["rc/b", "rc/c"], [b"b", bytearray(b"c")]) == 0
    assert s.get_batch(["rc/b", "rc/missing", "rc/c"]) == [b"b", b"", b"c"]
    assert s.get_batch([]) == [b""]  # Mooncake's quirk
    assert s.upsert_batch(["rc/b"], [b"bb"]) == 0 and s.get("rc/b") == b"bb"
    assert s.batch_remove(["rc/b", "rc/missing"], force=True) == [0, -704]
    assert s.remove("rc/missing") == -704
    assert s.remove("rc/c", force=True) == 0
    assert s.remove_by_regex("^rc/", force=True) == 1
    assert s.remove_all(force=True) >= 0
    assert s.health_check() == 0
    host = s.get_hostname()
    assert host.startswith("127.0.0.1:")


def test_config_rules(store):
    s = store
    rc = ReplicateConfig()
    rc.soft_pin_ttl_ms = 1000  # ttl without ENABLE
    assert s.put("cfg/a", b"x", rc) == -600
    rc.soft_pin_action = SoftPinAction.ENABLE
    assert s.put("cfg/a", b"x", rc) == 0
    rc = ReplicateConfig()
    rc.prefer_alloc_in_same_node = True
    assert s.put("cfg/b", b"x", config=rc) == -600  # rejected by plain put
    assert s.put_batch(["cfg/b"], [b"x"], rc) == -600
    region = np.zeros(4096, np.uint8)
    ptr = region.ctypes.data
    assert s.register_buffer(ptr, region.nbytes) == 0
    assert s.put_from("cfg/c", ptr, 16, rc) == 0  # allowed on the zero-copy path
    rc.replica_num = 2
    assert s.put_from("cfg/d", ptr, 16, rc) == -600  # needs replica_num == 1
    rc = ReplicateConfig()
    rc.group_ids = ["g1"]
    assert s.batch_put_from(["cfg/e", "cfg/f"], [ptr, ptr], [1, 1], rc) == [-600, -600]
    rc.group_ids = ["g1", "g2"]
    assert s.batch_put_from(["cfg/e", "cfg/f"], [ptr, ptr], [1, 1], rc) == [0, 0]
    rc = ReplicateConfig()
    rc.preferred_segment = s.get_hostname()
    rc.replica_num = 1
    assert s.put_from("cfg/g", ptr, 8, rc) == 0
    with pytest.raises(TypeError):
        s.put("cfg/h", b"x", {"replica_num": 1})
    assert s.get_into("cfg/g", ptr + 100, 4) == -600  # destination too small
    assert s.get_into("cfg/g", ptr + 100, 8) == 8
    assert s.unregister_buffer(ptr) == 0
    assert s.remove_all(force=True) >= 5


def test_setup_from_dict_and_config_file(master, tmp_path, monkeypatch):
    s = MooncakeDistributedStore()
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                    "global_segment_size": "32MB", "local_buffer_size": "8 mb",
                    "protocol": "tcp", "master_server_addr": master}) == 0
    assert s.put("dict/a", b"1") == 0 and s.get("dict/a") == b"1"
    assert s.close() == 0 and s.close() == 0
    s2 = MooncakeDistributedStore()
    assert s2.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                     "global_segment_size": "50%", "master_server_addr": master}) == -600
    assert s2.setup({"metadata_server": "P2PHANDSHAKE"}) == -600
    cfg_file = tmp_path / "mooncake.json"
    cfg_file.write_text(json.dumps({
        "local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": "32MB", "local_buffer_size": 8 * MiB, "protocol": "tcp",
        "device_name": "", "master_server_address": master}))
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(cfg_file))
    monkeypatch.setenv("MOONCAKE_MASTER", "unused:1")  # the file wins, as in Mooncake
    cfg = MooncakeConfig.load_from_env()
    assert cfg.master_server_address == master and cfg.global_segment_size == 32 * MiB
    s3 = MooncakeDistributedStore()
    assert s3.setup(*cfg.setup_args()) == 0
    assert s3.get("dict/a") == b""  # s's segment went away with close()
    s3.close()


def test_setup_refusals(master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "zk://127.0.0.1:2181", MiB, MiB, "tcp", "", master) == -600
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", MiB, MiB, "efa", "", master) == -600
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 512, MiB, "tcp", "", master) == -600
    # SSD offload without ssd_offload_path or MOONCAKE_OFFLOAD_FILE_STORAGE_PATH
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", MiB, MiB, "tcp", "", master,
                   enable_ssd_offload=True) == -600
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", MiB, MiB, "tcp", "", "127.0.0.1:1") < 0
    assert s.health_check() == 1
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", MiB, MiB, "tcp", "", master) == 0
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", MiB, MiB, "tcp", "", master) == -600  # twice
    s.close()


def test_http_metadata_server(master, metadata_url):
    a = MooncakeDistributedStore()
    b = MooncakeDistributedStore()
    assert a.setup("127.0.0.1", metadata_url, 32 * MiB, 8 * MiB, "tcp", "", master) == 0
    assert b.setup("127.0.0.1", metadata_url, 32 * MiB, 8 * MiB, "tcp", "", master) == 0
    rc = ReplicateConfig()
    rc.preferred_segment = a.get_hostname()
    payload = bytes(range(256)) * 1000
    assert b.put("http/a", payload, rc) == 0
    assert a.get("http/a") == payload and b.get("http/a") == payload
    a.close()
    b.close()


def test_setup_all_keywords_vllm_ascend_style(master):
    """vllm-ascend calls setup with keywords only, engine=te.get_engine()."""
    from mooncake.engine import TransferEngine

    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    s = MooncakeDistributedStore()
    assert s.setup(local_hostname="127.0.0.1", metadata_server="P2PHANDSHAKE",
                   global_segment_size=32 * MiB, local_buffer_size=8 * MiB, protocol="tcp",
                   rdma_devices="", master_server_addr=master, engine=te.get_engine(),
                   enable_ssd_offload=False, ssd_offload_path="") == 0
    assert s.put("kw/a", b"1") == 0 and s.get("kw/a") == b"1"
    s.close()
    assert MooncakeDistributedStore().setup(
        local_hostname="127.0.0.1", metadata_server="P2PHANDSHAKE",
        global_segment_size=32 * MiB, local_buffer_size=8 * MiB, protocol="ascend",
        rdma_devices="", master_server_addr=master) == -600
    te.close()
