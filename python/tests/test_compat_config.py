"""Mooncake's configuration surface (issue 17, items 2, 4 and 5), against a
real crescent-master:

* ReplicateConfig: integer fields refuse out-of-range values with TypeError
  (Mooncake's bindings), the NoF/DFS fields exist and a put asking for those
  tiers is refused with -1012; group_ids place the members of a group on one
  segment (three clients, three segments, several batches), a wrong length
  is -600; __str__ in Mooncake's layout;
* ReplicaDescriptor.get_memory_descriptor() / get_disk_descriptor() and the
  descriptor types;
* MooncakeConfig: fields, environment variables, __post_init__ validation,
  from_file without overrides; setup() refuses values asking for SSD
  offload or the client HTTP server (-1012) and accepts defaults (and tenants);
* mooncake.BufferPool and lease.ptr / lease.size / lease.buffer properties.
"""

from __future__ import annotations

import json
import logging

import pytest

import mooncake
from mooncake import buffer_pool
from mooncake.mooncake_config import MooncakeConfig
from mooncake.store import (DiskDescriptor, MemoryDescriptor, MooncakeDistributedStore,
                            ReplicaDescriptor, ReplicateConfig)

MiB = 1 << 20


def test_replicate_config_integers_raise_type_error():
    rc = ReplicateConfig()
    assert (rc.nof_replica_num, rc.dfs_replica_num, rc.preferred_nof_segments) == (0, 0, [])
    for field in ("replica_num", "nof_replica_num", "dfs_replica_num", "soft_pin_ttl_ms"):
        for bad in (-1, 2 ** 64, 2 ** 70, "1", 1.0, True, None if field != "soft_pin_ttl_ms"
                    else "x"):
            with pytest.raises(TypeError):
                setattr(rc, field, bad)
        setattr(rc, field, 2 ** 64 - 1)  # the largest value fits
        assert getattr(rc, field) == 2 ** 64 - 1
    for bad in (-1, 10, "KVCACHE"):
        with pytest.raises(TypeError):
            rc.data_type = bad
    with pytest.raises(TypeError):
        rc.preferred_nof_segments = "seg"
    rc = ReplicateConfig()
    rc.replica_num = 2
    rc.preferred_segments = ["a:1", "b:2"]
    rc.group_ids = ["g1", ""]
    text = str(rc)
    assert text.startswith("ReplicateConfig: { replica_num: 2, nof_replica_num: 0, "
                           "dfs_replica_num: 0, soft_pin_action: PRESERVE, "
                           "soft_pin_ttl_ms: default, with_hard_pin: 0, "
                           "preferred_segments: [a:1, b:2]")
    assert text.endswith("group_ids: [g1, ] }")


def test_tiers_crescent_lacks_are_refused(store):
    for field in ("nof_replica_num", "dfs_replica_num"):
        rc = ReplicateConfig()
        setattr(rc, field, 1)
        assert store.put("tier/k", b"v", rc) == -1012
        assert store.batch_put_from(["tier/a", "tier/b"], [0, 0], [1, 1], rc) == [-1012, -1012]
        assert store.put_batch(["tier/c"], [b"v"], rc) == -1012
    assert store.is_exist("tier/k") == 0


def test_group_ids_place_a_group_on_one_segment(store_factory):
    stores = [store_factory() for _ in range(3)]
    names = {s.get_hostname() for s in stores}
    assert len(names) == 3
    w = stores[0]
    groups = ["grp-a", "grp-b", "grp-c", "grp-d"]
    keys, gids = [], []
    for g in groups:
        for i in range(4):
            keys.append(f"gr/{g}/{i}")
            gids.append(g)
    rc = ReplicateConfig()
    rc.group_ids = gids[:8]
    assert w.put_batch(keys[:8], [b"v%d" % i for i in range(8)], rc) == 0
    rc.group_ids = gids[8:] + [""]  # a later batch of the same groups, plus one ungrouped key
    values = [b"w%d" % i for i in range(9)]
    assert w.put_batch(keys[8:] + ["gr/ungrouped"], values, rc) == 0
    one = ReplicateConfig()
    one.group_ids = ["grp-a"]
    assert w.put("gr/grp-a/single", b"s", one) == 0
    keys.append("gr/grp-a/single")
    gids.append("grp-a")
    desc = w.batch_get_replica_desc(keys)
    where = {}
    for k, g in zip(keys, gids):
        (rep,) = desc[k]
        where.setdefault(g, set()).add(rep.segment_name)
    assert all(len(segs) == 1 for segs in where.values()), where
    assert all(next(iter(segs)) in names for segs in where.values())
    rc = ReplicateConfig()
    rc.group_ids = ["only-one"]
    assert w.put_batch(["gr/x", "gr/y"], [b"1", b"2"], rc) == -600


def test_replica_descriptors(store):
    value = b"descriptor" * 100
    assert store.put("desc/k", value) == 0
    (rep,) = store.batch_get_replica_desc(["desc/k"])["desc/k"]
    assert isinstance(rep, ReplicaDescriptor)
    assert rep.is_memory_replica() and not rep.is_disk_replica()
    assert not rep.is_local_disk_replica()
    mem = rep.get_memory_descriptor()
    assert isinstance(mem, MemoryDescriptor)
    bd = mem.buffer_descriptor
    assert bd.size == len(value) and bd.buffer_address != 0
    assert bd.transport_endpoint == store.get_hostname()
    assert "Descriptor size=" in repr(bd)
    with pytest.raises(RuntimeError, match="Expected DiskDescriptor"):
        rep.get_disk_descriptor()
    d = DiskDescriptor()
    assert (d.file_path, d.object_size) == ("", 0)


def _write(tmp_path, data):
    p = tmp_path / "mc.json"
    p.write_text(json.dumps(data))
    return str(p)


BASE = {"local_hostname": "node1", "metadata_server": "P2PHANDSHAKE",
        "master_server_address": "m:50051"}


def test_mooncake_config_file_and_validation(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MOONCAKE_MASTER", "env-master:1")
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "1gb")
    cfg = MooncakeConfig.from_file(_write(tmp_path, dict(BASE, protocol="RDMA",
                                                         global_segment_size="1.5 GB",
                                                         local_buffer_size="512mb",
                                                         enable_ssd_offload="on",
                                                         ssd_offload_path="/nvme",
                                                         enable_client_http_server="false",
                                                         client_http_port="9400")))
    assert cfg.protocol == "rdma"
    assert cfg.master_server_address == "m:50051"  # no environment override, as Mooncake
    assert cfg.global_segment_size == int(1.5 * (1 << 30))
    assert cfg.local_buffer_size == 512 * MiB
    assert cfg.enable_ssd_offload is True and cfg.ssd_offload_path == "/nvme"
    assert cfg.tenant_id == "default" and cfg.enable_client_http_server is False
    assert cfg.client_http_port == 9400
    cfg = MooncakeConfig.from_file(_write(tmp_path, BASE))
    assert (cfg.global_segment_size, cfg.local_buffer_size) == (3355443200, 1073741824)
    assert (cfg.protocol, cfg.device_name) == ("tcp", "")
    for missing in BASE:
        with pytest.raises(ValueError, match=f"Missing required config field: {missing}"):
            MooncakeConfig.from_file(_write(tmp_path, {k: v for k, v in BASE.items()
                                                       if k != missing}))
    for bad in ({"local_hostname": ""}, {"protocol": ""}, {"global_segment_size": -1},
                {"enable_ssd_offload": "maybe"}, {"global_segment_size": "gb"}):
        with pytest.raises(ValueError):
            MooncakeConfig.from_file(_write(tmp_path, dict(BASE, **bad)))
    with caplog.at_level(logging.WARNING):
        assert MooncakeConfig("h", "P2PHANDSHAKE", 1, 1, " TCP ", "", "m:1").protocol == "tcp"
        MooncakeConfig("h", "P2PHANDSHAKE", 1, 1, "Warp", "", "m:1")
    assert "Unrecognised protocol 'warp'" in caplog.text
    with pytest.raises(ValueError):
        MooncakeConfig("h", "P2PHANDSHAKE", 1, 1, None, "", "m:1")
    with pytest.raises(ValueError):
        MooncakeConfig("h", "P2PHANDSHAKE", 1, 1, "tcp", "", "  ")


def test_mooncake_config_environment(monkeypatch, tmp_path):
    for k in ("MOONCAKE_CONFIG_PATH", "MOONCAKE_MASTER"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ValueError, match="MOONCAKE_CONFIG_PATH"):
        MooncakeConfig.load_from_env()
    env = {"MOONCAKE_MASTER": "m:2", "MOONCAKE_LOCAL_HOSTNAME": "n2",
           "MOONCAKE_PROTOCOL": "TCP", "MOONCAKE_GLOBAL_SEGMENT_SIZE": "2gb",
           "MOONCAKE_LOCAL_BUFFER_SIZE": "64mb", "MOONCAKE_OFFLOAD_ENABLED": "yes",
           "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": "/ssd", "MOONCAKE_TENANT_ID": "t1",
           "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER": "1", "MOONCAKE_CLIENT_HTTP_PORT": "9555"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cfg = MooncakeConfig.load_from_env()
    assert (cfg.master_server_address, cfg.local_hostname, cfg.protocol) == ("m:2", "n2", "tcp")
    assert (cfg.global_segment_size, cfg.local_buffer_size) == (2 << 30, 64 * MiB)
    assert cfg.metadata_server == "P2PHANDSHAKE"
    assert (cfg.enable_ssd_offload, cfg.ssd_offload_path, cfg.tenant_id) == (True, "/ssd", "t1")
    assert (cfg.enable_client_http_server, cfg.client_http_port) == (True, 9555)
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", _write(tmp_path, BASE))
    assert MooncakeConfig.load_from_env().master_server_address == "m:50051"


def test_setup_refuses_missing_features(master, caplog, tmp_path):
    s = MooncakeDistributedStore()
    args = ("127.0.0.1", "P2PHANDSHAKE", 4 * MiB, MiB, "tcp", "", master)
    with caplog.at_level(logging.ERROR):
        assert s.setup(*args, enable_client_http_server=True, client_http_port=9300) == -1012
        assert s.setup(*args, client_http_port=-5) == -1012
    assert "client HTTP server" in caplog.text
    # The SSD tier opens (a master without --enable_offload just never uses it).
    ssd = tmp_path / "ssd"
    assert s.setup(*args, enable_ssd_offload=True, ssd_offload_path=str(ssd)) == 0
    assert s.get_offload_rpc_read_count() == 0
    s.close()
    assert any(p.name.startswith("crf") for p in ssd.iterdir())
    assert s.setup(*args, tenant_id="tenant-a") == 0  # tenants are namespaces at the master
    s.close()
    assert s.setup(*args, enable_ssd_offload=False, ssd_offload_path="", tenant_id="default",
                   enable_client_http_server=False, client_http_port=9300) == 0
    s.close()
    cfg = MooncakeConfig("127.0.0.1", "P2PHANDSHAKE", 4 * MiB, MiB, "tcp", "", master)
    s = MooncakeDistributedStore()
    assert s.setup(*cfg.setup_args(), **cfg.setup_kwargs()) == 0
    s.close()


def test_buffer_pool_alias_and_lease_properties(store):
    assert mooncake.BufferPool is buffer_pool.BufferPool
    assert mooncake.RegisteredBufferPool is buffer_pool.BufferPool
    from mooncake.store import BufferPool
    assert BufferPool is mooncake.BufferPool
    with mooncake.BufferPool(store, capacity=64 * 1024, max_regions=0) as pool:
        lease = pool.acquire(1000)
        assert isinstance(lease.ptr, int) and lease.ptr == pool.base
        assert lease.size == 1000
        lease.buffer[:5] = b"hello"
        assert store.put_from("bp/prop", lease.ptr, 5) == 0
        assert store.get("bp/prop") == b"hello"
        with pytest.raises(TimeoutError):
            pool.acquire(64 * 1024, block=False)  # the region is taken by the first lease
        lease.release()
        with pool.acquire(64 * 1024, block=False) as whole:
            assert whole.size == 64 * 1024
