"""The wheel's pure-Python modules (issue 17, item 6), against a real
crescent-master, a second client process and the REST service process:

* mooncake.structured_object_store: DataProto put / append (same stage and a
  new stage) / get with field, row (slice, index list) and meta_info
  selection, destinations and data_cls; a flat dict; a single object; the
  JSON handle read back in another process; every non-tensor codec crescent
  has; cleanup leaves no key behind; the on-store format (manifest, meta,
  chunk keys) is Mooncake's, and a bundle laid out by hand the way
  Mooncake's writer lays it out reads back; unsupported codecs and values
  are refused by name;
* mooncake.dataproto_catalog: tags, fragments, resolve groups, refcounted
  removal, errors;
* mooncake.mooncake_store_service via mc_store_rest_server: the REST routes,
  their status codes, 501 for the segment-management routes;
* the console commands transfer_engine_topology_dump and the module names
  Mooncake's entry points use.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
import uuid

import numpy as np
import pytest

from conftest import child_env, torch_or_none
from mooncake import cli
from mooncake.dataproto_catalog import DataProtoCatalog
from mooncake.structured_object_store import (BundleTransferPolicy, FieldSchema,
                                              MooncakeBundleTransfer, MooncakeDataProtoRef,
                                              StructuredMemberSlice, StructuredObjectPayload,
                                              export_dataproto_ref, import_dataproto_ref,
                                              is_dataproto_ref_handle, raw_destination)
from test_cli import command

torch = torch_or_none()
MiB = 1 << 20


def objects(arr):
    out = np.empty(len(arr), dtype=object)
    out[:] = list(arr)
    return out


def sample():
    return {
        "batch": {"input_ids": np.arange(40, dtype=np.int64).reshape(4, 10),
                  "mask": np.array([[1, 0], [1, 1], [0, 0], [1, 1]], dtype=np.bool_)},
        "non_tensor_batch": {
            "text": objects(["a", "bb", None, "ddd"]),
            "score": objects([1.5, None, 2.0, 3.0]),
            "tokens": objects([np.arange(3), np.arange(0), np.arange(5), np.arange(1)]),
            "info": objects([{"x": 1}, [1, 2], None, "s"]),
            "blob": objects([b"\x00\x01", b"", None, b"zz"]),
        },
        "meta_info": {"step": 3, "tag": "rollout"},
    }


def test_dataproto_round_trip(store, child, master):
    t = MooncakeBundleTransfer(store, key_prefix="rl")
    ref = t.put_dataproto(sample(), namespace="rollout", partition="step-1", stage="rollout")
    assert isinstance(ref, MooncakeDataProtoRef) and ref.batch_size == 4
    with pytest.raises(ValueError, match="already exist"):
        t.append_dataproto_fields(ref, {"batch": {"input_ids": np.zeros((4, 1))}}, stage="x")
    ref = t.append_dataproto_fields(ref, {"batch": {"old_log_probs": np.ones((4, 2),
                                                                           np.float32)}},
                                    stage="rollout")  # merged into the stage object
    ref = t.append_dataproto_fields(ref, {"batch": {"adv": np.arange(4.0)},
                                          "meta_info": {"epoch": 1}}, stage="advantage")
    got = t.get_dataproto(ref, fields=["input_ids", "text", "old_log_probs", "tokens",
                                       "info", "score", "blob", "adv", "mask"],
                          meta_info_keys=["step", "epoch"])
    s = sample()
    assert (got["batch"]["input_ids"] == s["batch"]["input_ids"]).all()
    assert got["batch"]["mask"].dtype == np.bool_ and (got["batch"]["mask"] ==
                                                       s["batch"]["mask"]).all()
    assert got["non_tensor_batch"]["text"].tolist() == ["a", "bb", None, "ddd"]
    assert got["non_tensor_batch"]["score"].tolist() == [1.5, None, 2.0, 3.0]
    assert [x.tolist() for x in got["non_tensor_batch"]["tokens"]] == [[0, 1, 2], [], [0, 1, 2,
                                                                                        3, 4],
                                                                      [0]]
    assert got["non_tensor_batch"]["info"].tolist() == [{"x": 1}, [1, 2], None, "s"]
    assert got["non_tensor_batch"]["blob"].tolist() == [b"\x00\x01", b"", None, b"zz"]
    assert got["meta_info"] == {"step": 3, "epoch": 1}
    assert (got["batch"]["adv"] == np.arange(4.0)).all()
    assert (got["batch"]["old_log_probs"] == 1).all()
    view = t.dataproto_manifest_view(ref)
    codecs = {n: f["spec"]["codec"] for n, f in view["non_tensor_fields"].items()}
    assert codecs == {"text": "utf8_ragged", "score": "ndarray", "tokens": "typed_ragged",
                      "info": "json_ragged", "blob": "bytes_ragged"}
    assert set(view["stages"]) == {"rollout", "advantage"}

    sub = t.get_dataproto(ref, batch_fields=["input_ids"], non_tensor_fields=["text"],
                          rows=slice(1, 4, 2))
    assert sub["batch"]["input_ids"][:, 0].tolist() == [10, 30]
    assert sub["non_tensor_batch"]["text"].tolist() == ["bb", "ddd"]
    picked = t.get_dataproto(ref, batch_fields=["input_ids"], non_tensor_fields=["tokens"],
                             rows=[3, -4])
    assert picked["batch"]["input_ids"][:, 0].tolist() == [30, 0]
    assert [x.tolist() for x in picked["non_tensor_batch"]["tokens"]] == [[0], [0, 1, 2]]
    sliced = t.get_dataproto(ref, batch_fields=["input_ids"],
                             rows=StructuredMemberSlice(axis=0, start=2, end=4))
    assert sliced["batch"]["input_ids"].shape == (2, 10)
    dst = np.empty((4, 10), np.int64)
    r = t.get_dataproto(ref, batch_fields=["input_ids"], destinations={"input_ids": dst})
    assert r["batch"]["input_ids"] is dst and dst[3, 9] == 39
    raw = bytearray(80)
    addr = np.frombuffer(raw, dtype=np.uint8).ctypes.data
    r = t.get_dataproto(ref, batch_fields=["input_ids"], rows=slice(0, 1),
                        destinations={"input_ids": raw_destination(addr, len(raw), raw)})
    assert np.frombuffer(bytes(raw), dtype=np.int64).tolist() == list(range(10))

    class DataProto:
        def __init__(self, batch, non_tensor_batch, meta_info):
            self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, \
                meta_info
    dp = t.get_dataproto(ref, batch_fields=["adv"], data_cls=DataProto)
    assert isinstance(dp, DataProto) and list(dp.batch) == ["adv"]

    # The handle is JSON: another process reads the same data through it.
    handle = export_dataproto_ref(ref)
    assert is_dataproto_ref_handle(handle) and handle["version"] == 1
    c = child("""
        from mooncake.store import MooncakeDistributedStore
        from mooncake.structured_object_store import MooncakeBundleTransfer
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", MASTER) == 0
        t = MooncakeBundleTransfer(s, key_prefix="rl")
        got = t.get_dataproto(json.loads(ARGS[0]), fields=["input_ids", "text", "tokens"])
        print(json.dumps([got["batch"]["input_ids"].tolist(),
                          got["non_tensor_batch"]["text"].tolist(),
                          [x.tolist() for x in got["non_tensor_batch"]["tokens"]]]))
        s.close()
    """, master, [json.dumps(handle)])
    ids, text, tokens = json.loads(c.readline())
    assert ids == s["batch"]["input_ids"].tolist() and text == ["a", "bb", None, "ddd"]
    assert tokens == [[0, 1, 2], [], [0, 1, 2, 3, 4], [0]]
    c.finish()

    ref2 = import_dataproto_ref(json.loads(json.dumps(handle)))
    assert ref2.field_index == ref.field_index
    t.cleanup_dataproto(handle)
    assert store.remove_by_regex("^rl/") == 0  # nothing was left behind


def test_flat_dict_objects_and_tensors(store):
    t = MooncakeBundleTransfer(store, key_prefix="fd")
    ref = t.put({"ids": np.arange(6).reshape(3, 2), "names": ["x", "y", "z"], "lr": 0.1},
                type="dict")
    d = t.get(ref, type="dict")
    assert d["names"] == ["x", "y", "z"] and d["lr"] == 0.1 and d["ids"].shape == (3, 2)
    schemas = {"lr_list": FieldSchema("auto", metadata={"section": "meta_info"})}
    ref = t.put({"ids": np.arange(3), "lr_list": [1, 2, 3]}, type="dict",
                field_schemas=schemas)
    assert t.get(ref, type="dict")["lr_list"] == [1, 2, 3]
    obj = t.put_object(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert (t.get_object(obj) == np.arange(12, dtype=np.float32).reshape(3, 4)).all()
    bundle = t.put_object({"a": b"xyz", "b": np.array([1, 2], np.int16)})
    got = t.get_object(bundle)
    assert got["a"] == b"xyz" and got["b"].tolist() == [1, 2]
    if torch is not None:
        tr = t.put_dataproto({"batch": {"h": torch.arange(8, dtype=torch.float32).reshape(4, 2)}})
        h = t.get_dataproto(tr, rows=slice(1, 3))["batch"]["h"]
        assert h.tolist() == [[2.0, 3.0], [4.0, 5.0]]
        t.cleanup_dataproto(tr)
    t.remove_bundle(obj)
    t.remove_bundle(bundle)


def test_on_store_format_is_mooncakes(store):
    t = MooncakeBundleTransfer(store, key_prefix="fmt", default_chunk_bytes=64)
    ids = np.arange(20, dtype=np.int64).reshape(2, 10)
    ref = t.put_structured_object(StructuredObjectPayload(metadata={"note": "n"},
                                                          buffers={"ids": ids, "raw": b"abc"}),
                                  partition="p1")
    manifest = json.loads(store.get(ref.manifest_key))
    oid = manifest["object_id"]
    assert ref.manifest_key == f"fmt/{oid}/manifest" and oid.startswith("p1/")
    assert manifest["version"] == 1 and manifest["layout"] == "bundle"
    spec = manifest["buffers"]["ids"]
    assert spec["key"] == f"fmt/{oid}/buffer/ids" and spec["bytes"] == 160
    assert [c["key"] for c in spec["chunks"]] == [f"fmt/{oid}/buffer/ids/chunk/{i}"
                                                  for i in range(3)]
    assert [c["bytes"] for c in spec["chunks"]] == [64, 64, 32]
    assert manifest["buffers"]["raw"]["chunks"] == [{"key": f"fmt/{oid}/buffer/raw",
                                                     "bytes": 3}]
    meta_chunks = manifest["meta"]["chunks"]
    assert len(meta_chunks) > 1 and meta_chunks[0]["key"] == f"fmt/{oid}/meta/chunk/0"
    meta = json.loads(b"".join(store.get(c["key"]) for c in meta_chunks))
    assert meta == {"note": "n", "layout": "structured", "__mooncake_structured_fields__": {
        "ids": {"encoding": "ndarray", "dtype": "<i8", "shape": [2, 10]},
        "raw": {"encoding": "bytes"}}}
    assert store.get(f"fmt/{oid}/buffer/ids/chunk/2") == ids.tobytes()[128:]
    t.remove_bundle(ref)


def _put_json(store, key, value):
    assert store.put(key, json.dumps(value, separators=(",", ":")).encode()) == 0


def test_reads_a_bundle_laid_out_as_mooncake_writes_it(store):
    """A DataProto stage and handle written the way Mooncake's writer lays them
    out (by hand here): crescent reads the fields back."""
    oid = f"default/{uuid.uuid4().hex}"
    base = f"mc/{oid}"
    ids = np.arange(6, dtype="<i4").reshape(3, 2)
    text = [b"hi", b"", b"there"]
    offsets = np.array([0, 2, 2, 7], dtype=np.int64)
    nulls = np.array([False, True, False])
    members = {"batch.ids": ids, "non_tensor_batch.t.data": b"".join(text),
               "non_tensor_batch.t.offsets": offsets, "non_tensor_batch.t.nulls": nulls}
    specs, buffers = {}, {}
    for name, value in members.items():
        key = f"{base}/buffer/{name}"
        data = value if isinstance(value, bytes) else value.tobytes()
        assert store.put(key, data) == 0
        buffers[name] = {"key": key, "bytes": len(data), "chunks": [{"key": key,
                                                                     "bytes": len(data)}]}
        specs[name] = {"encoding": "bytes"} if isinstance(value, bytes) else \
            {"encoding": "ndarray", "dtype": value.dtype.str, "shape": list(value.shape)}
    meta = {"layout": "dataproto_stage", "dataproto": {"version": 1, "namespace": "default",
                                                       "partition": "default", "stage": "s",
                                                       "batch_size": 3},
            "__mooncake_structured_fields__": specs}
    meta_blob = json.dumps(meta, separators=(",", ":")).encode()
    assert store.put(f"{base}/meta", meta_blob) == 0
    _put_json(store, f"{base}/manifest", {
        "version": 1, "layout": "bundle", "object_id": oid,
        "meta": {"key": f"{base}/meta", "bytes": len(meta_blob),
                 "chunks": [{"key": f"{base}/meta", "bytes": len(meta_blob)}]},
        "buffers": buffers})
    handle = {"type": "mooncake_dataproto_ref", "version": 1, "kind": "bundle_stages",
              "batch_size": 3, "namespace": "default", "partition": "default",
              "global_indexes": None,
              "stage_refs": {"s": {"manifest_key": f"{base}/manifest"}},
              "field_index": {"ids": {"stage": "s", "member": "batch.ids", "section": "batch"},
                              "t": {"stage": "s", "member": "non_tensor_batch.t",
                                    "section": "non_tensor_batch"}},
              "meta_info": {"k": "v"},
              "encoded_non_tensor": {"t": {"codec": "utf8_ragged", "rows": 3, "metadata": {
                  "schema_source": "inferred_from_runtime_values"}, "payload_members": {
                  "data": "non_tensor_batch.t.data", "offsets": "non_tensor_batch.t.offsets",
                  "nulls": "non_tensor_batch.t.nulls"}}},
              "storage_group_id": "structured-abc"}
    t = MooncakeBundleTransfer(store, key_prefix="mc")
    got = t.get_dataproto(handle)
    assert got["batch"]["ids"].tolist() == ids.tolist()
    assert got["non_tensor_batch"]["t"].tolist() == ["hi", None, "there"]
    assert got["meta_info"] == {"k": "v"}
    handle["encoded_non_tensor"]["t"]["codec"] = "media_list_ragged"
    with pytest.raises(ValueError, match="media_list_ragged"):
        t.get_dataproto(handle, fields=["t"])
    t.cleanup_dataproto(handle)
    assert store.is_exist(f"{base}/manifest") == 0


def test_refusals(store):
    t = MooncakeBundleTransfer(store, key_prefix="bad")

    class Opaque:
        pass
    with pytest.raises(ValueError, match="unsupported structured non-tensor field"):
        t.put_dataproto({"non_tensor_batch": {"o": objects([Opaque(), Opaque()])}})
    with pytest.raises(ValueError, match="zero_copy"):
        t.put_object({"a": np.arange(3)}, policy=BundleTransferPolicy(copy_mode="zero_copy"))
    with pytest.raises(ValueError, match="ragged_tensor"):
        t.put_dataproto({"non_tensor_batch": {"r": objects([[1.0], [2.0]])}},
                        field_schemas={"r": FieldSchema("ragged_tensor")})
    with pytest.raises(ValueError, match="put_mode"):
        t.put_object({"a": b"x"}, policy=BundleTransferPolicy(put_mode="fast"))
    with pytest.raises(ValueError, match="inconsistent batch sizes"):
        t.put_dataproto({"batch": {"a": np.zeros(2), "b": np.zeros(3)}})
    with pytest.raises(ValueError, match="invalid bundle partition"):
        t.put_object({"a": b"x"}, partition="a/b")
    with pytest.raises(ValueError, match="key_prefix"):
        MooncakeBundleTransfer(store, key_prefix="//")
    assert store.remove_by_regex("^bad/") == 0  # failed writes cleaned up after themselves


def test_dataproto_catalog(store):
    t = MooncakeBundleTransfer(store, key_prefix="cat")
    f1 = export_dataproto_ref(t.put_dataproto({"batch": {"a": np.arange(2)}}, stage="s1"))
    f2 = export_dataproto_ref(t.put_dataproto({"batch": {"b": np.arange(2)}}, stage="s2"))
    cat = DataProtoCatalog()
    out = cat.update("p", ["k1", "k2"], tags=[{"n": 1}, {"n": 2}], handle=f1)
    assert out == {"keys": ["k1", "k2"], "tags": [{"n": 1}, {"n": 2}], "fields": ["a"]}
    cat.update("p", ["k2", "k1"], handle=f2)
    cat.update("p", ["k1"], tags=[{"m": 0}])
    r = cat.resolve("p", ["k1", "k2"])
    assert r["fields"] == ["a", "b"] and r["tags"] == [{"n": 1, "m": 0}, {"n": 2}]
    k1 = f1["stage_refs"]["s1"]["manifest_key"]
    k2 = f2["stage_refs"]["s2"]["manifest_key"]
    groups = {tuple(g["fields"]): g["locations"] for g in r["field_groups"]}
    assert groups == {("a",): [(k1, 0), (k1, 1)], ("b",): [(k2, 1), (k2, 0)]}
    assert set(r["handles"]) == {k1, k2}
    assert cat.list() == {"p": {"k1": {"n": 1, "m": 0}, "k2": {"n": 2}}}
    with pytest.raises(ValueError, match="not found"):
        cat.resolve("p", ["k3"])
    with pytest.raises(ValueError, match="not ready"):
        cat.update("p", ["k3"], tags=[{}])
        cat.resolve("p", ["k3"], fields=["a"])
    with pytest.raises(ValueError, match="does not match"):
        cat.update("p", ["only-one"], handle=f1)
    with pytest.raises(ValueError, match="unique"):
        cat.update("p", ["k1", "k1"], tags=[{}, {}])
    cat.remove("p", ["k1", "k2", "k3"])
    assert cat.list() == {} and cat._fragments == {} and cat._fragment_refcounts == {}
    t.cleanup_dataproto(f1)
    t.cleanup_dataproto(f2)


def _http(method, url, body=None):
    req = urllib.request.Request(url, method=method, data=None if body is None else
                                 json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_rest_service(master, tmp_path):
    cfg = tmp_path / "mooncake.json"
    cfg.write_text(json.dumps({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                               "master_server_address": master, "protocol": "tcp",
                               "global_segment_size": "32mb", "local_buffer_size": "4mb"}))
    proc = subprocess.Popen(command("mc_store_rest_server") + [
        "--config", str(cfg), "--port", "0", "--host", "127.0.0.1",
        "-Dglobal_segment_size=16mb", "--max-wait-time", "10"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=child_env())
    try:
        line = proc.stdout.readline()
        assert "listening on 127.0.0.1:" in line, line
        base = "http://" + line.split("listening on ")[1].split()[0]
        assert _http("PUT", base + "/api/put", {"key": "rest/a", "value": "hello"}) == \
            (200, b'{"status": "success"}')
        assert _http("GET", base + "/api/get/rest/a")[1] == b"hello" or \
            _http("GET", base + "/api/get/rest%2Fa")[1] == b"hello"
        assert _http("PUT", base + "/api/put", {"key": "plain", "value": ""})[0] == 200
        assert _http("GET", base + "/api/get/plain") == (200, b"")
        assert _http("GET", base + "/api/get/missing")[0] == 404
        assert json.loads(_http("GET", base + "/api/exist/plain")[1]) == {"exists": True}
        assert json.loads(_http("GET", base + "/api/exist/missing")[1]) == {"exists": False}
        assert _http("PUT", base + "/api/put", {"key": "x"})[0] == 400
        status, body = _http("POST", base + "/api/mount", {"path": "/dev/shm/x", "size": 1})
        assert status == 501 and b"cannot mount" in body
        assert _http("POST", base + "/api/reconfigure", {"mode": "decode"})[0] == 501
        assert _http("DELETE", base + "/api/remove/plain")[0] in (200, 500)  # may be leased
        status, body = _http("DELETE", base + "/api/remove_all")
        assert status == 200 and b"success removed" in body
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_console_commands(tmp_path):
    out = subprocess.run(command("transfer_engine_topology_dump"), capture_output=True,
                         text=True, timeout=60, env=child_env())
    assert out.returncode == 0 and out.stdout.strip() == "Local topology [te/discover]: {}"
    topo = tmp_path / "topo.json"
    topo.write_text('{"cpu:0": [["mlx5_0"], []]}')
    out = subprocess.run(command("transfer_engine_topology_dump") + [
        "--custom-topo-json", str(topo)], capture_output=True, text=True, timeout=60,
        env=child_env())
    assert out.returncode == 0 and '"cpu:0": [["mlx5_0"], []]' in out.stdout
    out = subprocess.run(command("transfer_engine_topology_dump") + ["--backend", "tent"],
                         capture_output=True, text=True, timeout=60, env=child_env())
    assert out.returncode == 2 and "TENT" in out.stderr
    from mooncake import cli_bench, http_metadata_server, te_bench
    assert cli.main is cli.master and cli_bench.main is te_bench.main
    assert http_metadata_server.main is cli.metadata_server
