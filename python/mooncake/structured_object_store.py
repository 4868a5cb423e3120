"""mooncake.structured_object_store: structured objects and DataProto bundles
over a MooncakeDistributedStore, with Mooncake's public names, arguments and
on-store format.

Layers (the same as Mooncake's, so data written by one reads back through
the other):

* **bundle** -- raw metadata bytes plus named buffers. One bundle is the
  keys ``<prefix>/<partition>/<uuid>/meta``, ``.../buffer/<name>`` (each cut
  into ``.../chunk/<i>`` objects when larger than ``chunk_bytes``, default
  64 MiB) and ``.../manifest``, a compact JSON object::

      {"version": 1, "layout": "bundle", "object_id": "<partition>/<uuid>",
       "meta": <payload>, "buffers": {name: <payload>},
       ["buffer_object_ids": [...], "cleanup_keys": [...]]}
      <payload> = {"key": str, "bytes": int, "chunks": [{"key", "bytes"}],
                   ["kind": "tensor", "dtype", "shape", "metadata_bytes"],
                   ["format": "torch_save"]}

* **structured object** -- the meta payload is JSON with ``"layout"`` and
  ``"__mooncake_structured_fields__"``: per member ``{"encoding": "ndarray",
  "dtype": <numpy dtype.str>, "shape": [...]}``, ``{"encoding": "bytes"}`` or
  ``{"encoding": "torch_tensor", "dtype", "shape", "element_size"}``
  (tensors are stored with the store's tensor API, ``put_tensor``, and
  marked ``"kind": "tensor"``).
* **DataProto** -- one structured object per stage (``"layout":
  "dataproto_stage"``); ``batch`` fields are members ``batch.<name>``,
  ``non_tensor_batch`` object arrays are encoded by a codec into payload
  members ``non_tensor_batch.<name>.<payload>``; the lightweight handle
  (``export_dataproto_ref``) is JSON with ``"type": "mooncake_dataproto_ref"``.

Codecs for non_tensor_batch fields that crescent writes and reads:
``ndarray`` (numeric scalars with nulls), ``utf8_ragged``, ``bytes_ragged``,
``json_ragged``, ``msgpack_ragged`` (needs the msgpack package) and
``typed_ragged`` (numeric arrays or lists of any shape per row). Mooncake's
other codecs (``ragged_tensor``, ``ragged_tensor_dict``, ``media_bytes``,
``media_list_ragged``, ``structured_recursive``), nested (jagged) torch
tensors and ``BundleTransferPolicy(copy_mode="zero_copy")`` are refused with
an error that names them, on writing and on reading. crescent moves every
payload with the store's copying put/get calls (no BufferPool staging, no
parallel puts): the layout is the same, the policies' parallelism knobs are
validated and accepted.

Torch tensor members use crescent's tensor object layout
(mooncake.tensor_format); every other member, manifest and handle is
byte-for-byte Mooncake's.
"""

from __future__ import annotations

import copy
import ctypes
import io
import json
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Dict, List, Literal, Mapping, Optional, Protocol, Sequence, Tuple

import numpy as np

try:
    import msgpack as _msgpack
except ImportError:  # pragma: no cover - Debian's python3-msgpack is optional
    _msgpack = None

try:
    import torch as _torch
except Exception:  # noqa: BLE001 - any import failure means "no torch"
    _torch = None

__all__ = [
    "BundleStore", "BundleTransferPolicy", "FieldSchema", "RemoteBundleRef",
    "StructuredObjectPayload", "StructuredObjectResult", "StructuredFieldLocation",
    "MooncakeDataProtoRef", "StructuredMemberSlice", "StructuredObjectReadSpec",
    "MooncakeBundleTransfer", "export_dataproto_ref", "import_dataproto_ref", "export_ref",
    "import_ref", "is_dataproto_ref_handle", "tensor_object_buffer", "raw_destination",
    "DEFAULT_BUNDLE_CHUNK_BYTES", "DATAPROTO_REF_HANDLE_TYPE", "DATAPROTO_REF_HANDLE_VERSION",
    "STRUCTURED_FIELD_SPECS_KEY", "STORAGE_GROUP_ID", "MISSING_OBJECT_ERROR",
]

DEFAULT_BUNDLE_CHUNK_BYTES = 64 * 1024 ** 2
AUTO_PARALLEL_MIN_BYTES = DEFAULT_BUNDLE_CHUNK_BYTES
AUTO_PARALLEL_MIN_CHUNKS = 8
MISSING_OBJECT_ERROR = -704
STRUCTURED_FIELD_SPECS_KEY = "__mooncake_structured_fields__"
DATAPROTO_REF_HANDLE_TYPE = "mooncake_dataproto_ref"
DATAPROTO_REF_HANDLE_VERSION = 1
STORAGE_GROUP_ID = "storage_group_id"

_SUPPORTED_CODECS = ("ndarray", "utf8_ragged", "bytes_ragged", "json_ragged",
                     "msgpack_ragged", "typed_ragged")


class BundleStore(Protocol):
    def put(self, key: str, value: Any, config: Any = None) -> int: ...

    def get(self, key: str) -> bytes: ...

    def remove(self, key: str, force: bool = False) -> int: ...


# --------------------------------------------------------------------------- types


@dataclass(frozen=True)
class BundleTransferPolicy:
    """Transfer knobs: validated and accepted; crescent puts sequentially."""

    max_inflight_put: int = 1
    put_mode: Literal["auto", "batch", "parallel"] = "auto"
    copy_mode: Literal["auto", "zero_copy", "copy"] = "auto"


@dataclass(frozen=True)
class FieldSchema:
    """Schema hint for a DataProto field: ``codec`` (or "auto"), ``nullable``,
    ``metadata["section"]`` pinning it to batch / non_tensor_batch / meta_info
    and ``metadata["dtype"]`` for the ndarray / typed_ragged codecs."""

    codec: str
    nullable: bool = True
    metadata: dict = field(default_factory=dict)


@dataclass
class RemoteBundleRef:
    """A stored bundle: its manifest key and (when known) its manifest."""

    manifest_key: str
    manifest: dict


@dataclass(frozen=True, init=False)
class StructuredObjectPayload:
    """A structured object to store: JSON-able metadata plus named members."""

    metadata: Mapping[str, Any]
    buffers: Mapping[str, Any]

    def __init__(self, metadata: Optional[Mapping[str, Any]] = None,
                 buffers: Optional[Mapping[str, Any]] = None) -> None:
        if buffers is None:
            raise TypeError("StructuredObjectPayload requires buffers")
        object.__setattr__(self, "metadata", {} if metadata is None else metadata)
        object.__setattr__(self, "buffers", buffers)


@dataclass
class StructuredObjectResult:
    metadata: dict
    objects: dict


@dataclass(frozen=True)
class StructuredFieldLocation:
    stage: str
    member: str
    section: Literal["batch", "non_tensor_batch"]


@dataclass
class MooncakeDataProtoRef:
    """Lightweight DataProto handle: stage refs and where each field lives."""

    batch_size: int
    stage_refs: dict
    field_index: dict
    meta_info: dict
    namespace: str = "default"
    partition: str = "default"
    global_indexes: Optional[list] = None
    encoded_non_tensor: dict = field(default_factory=dict)
    _storage_group_id: Optional[str] = field(default=None, repr=False)


@dataclass(frozen=True)
class StructuredMemberSlice:
    axis: int
    start: int
    end: int
    step: int = 1


@dataclass(frozen=True)
class StructuredObjectReadSpec:
    """A lazy read plan: which members, and which rows of them."""

    ref: Any
    member_names: Optional[Tuple[str, ...]] = None
    member_slices: Tuple[Tuple[str, StructuredMemberSlice], ...] = ()

    def select_members(self, names: Optional[Sequence[str]]) -> "StructuredObjectReadSpec":
        return StructuredObjectReadSpec(self.ref, None if names is None else tuple(names),
                                        self.member_slices)

    def slice_member(self, name: str, axis: int, start: int, end: int,
                     step: int = 1) -> "StructuredObjectReadSpec":
        slices = dict(self.member_slices)
        slices[name] = StructuredMemberSlice(axis=axis, start=start, end=end, step=step)
        return StructuredObjectReadSpec(self.ref, self.member_names, tuple(slices.items()))

    def member_slice(self, name: str) -> Optional[StructuredMemberSlice]:
        return dict(self.member_slices).get(name)


@dataclass(frozen=True)
class _TensorObjectBuffer:
    """A serialized tensor object in registered memory (tensor_object_buffer)."""

    ptr: int
    size: int
    owner: Any
    batch_size: Optional[int] = None

    def __len__(self) -> int:
        if self.batch_size is None:
            raise TypeError("tensor object buffer requires batch_size for DataProto use")
        return self.batch_size


@dataclass(frozen=True)
class _RawDestination:
    ptr: int
    size: int
    owner: Any
    pre_registered: bool = False


def tensor_object_buffer(ptr: int, size: int, owner: Any = None,
                         batch_size: Optional[int] = None) -> _TensorObjectBuffer:
    """A tensor member given as a serialized tensor object at ptr (size bytes)."""
    return _TensorObjectBuffer(int(ptr), int(size), owner, batch_size)


def raw_destination(ptr: int, size: int, owner: Any = None, *,
                    pre_registered: bool = False) -> _RawDestination:
    """Caller memory (e.g. a BufferPool lease) to materialize a member into."""
    return _RawDestination(int(ptr), int(size), owner, pre_registered)


# --------------------------------------------------------------------------- handles


def is_dataproto_ref_handle(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == DATAPROTO_REF_HANDLE_TYPE


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    raise TypeError(
        f"DataProto ref handles support only JSON-safe values, got {type(value).__name__}")


def export_dataproto_ref(ref: MooncakeDataProtoRef) -> Dict[str, Any]:
    """A JSON-safe handle for ref (manifest keys, not manifests)."""
    if not isinstance(ref, MooncakeDataProtoRef):
        raise TypeError(f"expected MooncakeDataProtoRef, got {type(ref).__name__}")
    handle = {
        "type": DATAPROTO_REF_HANDLE_TYPE, "version": DATAPROTO_REF_HANDLE_VERSION,
        "kind": "bundle_stages", "batch_size": int(ref.batch_size),
        "namespace": ref.namespace, "partition": ref.partition,
        "global_indexes": _json_safe(ref.global_indexes),
        "stage_refs": {s: {"manifest_key": r.manifest_key} for s, r in ref.stage_refs.items()},
        "field_index": {n: {"stage": loc.stage, "member": loc.member, "section": loc.section}
                        for n, loc in ref.field_index.items()},
        "meta_info": _json_safe(ref.meta_info),
        "encoded_non_tensor": _json_safe(ref.encoded_non_tensor),
    }
    if ref._storage_group_id is not None:
        handle[STORAGE_GROUP_ID] = ref._storage_group_id
    json.dumps(handle, ensure_ascii=False)
    return handle


def _mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"DataProto ref handle {name} must be a mapping")
    return value


def _nonempty(*values: Any) -> bool:
    return all(isinstance(v, str) and v for v in values)


def import_dataproto_ref(handle: Mapping[str, Any]) -> MooncakeDataProtoRef:
    """The ref a handle describes (manifests are read lazily)."""
    if not is_dataproto_ref_handle(handle):
        raise ValueError("not a Mooncake DataProto ref handle")
    version = int(handle.get("version", -1))
    if version not in (DATAPROTO_REF_HANDLE_VERSION, 2):
        raise ValueError(f"unsupported DataProto ref handle version: {handle.get('version')!r}")
    if handle.get("kind") != "bundle_stages":
        raise ValueError(f"unsupported DataProto ref handle kind: {handle.get('kind')!r}")
    stage_refs = {}
    for stage, sref in _mapping(handle.get("stage_refs"), "stage_refs").items():
        key = _mapping(sref, f"stage_refs[{stage!r}]").get("manifest_key")
        if not _nonempty(stage, key):
            raise ValueError("DataProto ref handle stage refs must contain non-empty string "
                             "names and manifest_key values")
        stage_refs[stage] = RemoteBundleRef(manifest_key=key, manifest={})
    field_index = {}
    for name, raw in _mapping(handle.get("field_index"), "field_index").items():
        loc = _mapping(raw, f"field_index[{name!r}]")
        section = loc.get("section")
        if section not in ("batch", "non_tensor_batch"):
            raise ValueError(f"invalid DataProto field section: {section!r}")
        if not _nonempty(name, loc.get("stage"), loc.get("member")):
            raise ValueError("DataProto ref handle field locations must be non-empty strings")
        if loc["stage"] not in stage_refs:
            raise ValueError(f"DataProto ref handle field {name!r} references unknown stage "
                             f"{loc['stage']!r}")
        field_index[name] = StructuredFieldLocation(loc["stage"], loc["member"], section)
    group = handle.get(STORAGE_GROUP_ID)
    if (version == 2 and group is None) or (group is not None and not _nonempty(group)):
        raise ValueError("DataProto ref handle has invalid storage_group_id")
    indexes = handle.get("global_indexes")
    if indexes is not None:
        if not isinstance(indexes, list) or any(
                isinstance(i, bool) or not isinstance(i, int) for i in indexes):
            raise ValueError("DataProto ref handle global_indexes must be a list of integers "
                             "or null")
        indexes = list(indexes)
    return MooncakeDataProtoRef(
        batch_size=int(handle["batch_size"]), stage_refs=stage_refs, field_index=field_index,
        meta_info=dict(_mapping(handle.get("meta_info", {}), "meta_info")),
        namespace=str(handle.get("namespace", "default")),
        partition=str(handle.get("partition", "default")), global_indexes=indexes,
        encoded_non_tensor=dict(_mapping(handle.get("encoded_non_tensor", {}),
                                         "encoded_non_tensor")),
        _storage_group_id=group)


export_ref = export_dataproto_ref
import_ref = import_dataproto_ref


def _resolve_ref(ref: Any) -> MooncakeDataProtoRef:
    if isinstance(ref, MooncakeDataProtoRef):
        return ref
    if is_dataproto_ref_handle(ref):
        return import_dataproto_ref(ref)
    raise TypeError(f"expected MooncakeDataProtoRef or DataProto handle, got {type(ref).__name__}")


# --------------------------------------------------------------------------- helpers


def _segment(value: Any, name: str) -> None:
    if not isinstance(value, str) or not value or "/" in value or \
            any(ord(c) < 32 for c in value):
        raise ValueError(f"invalid bundle {name}: {value!r}")


def _bytes_view(value: Any, name: str) -> memoryview:
    try:
        view = memoryview(value)
    except TypeError as e:
        raise TypeError(f"{name} must be bytes-like, got {type(value).__name__}") from e
    if not view.contiguous:
        view = memoryview(bytes(view))
    return view.cast("B")


def _json_bytes(value: Mapping[str, Any], label: str) -> bytes:
    try:
        return json.dumps(value, separators=(",", ":")).encode("utf-8")
    except TypeError as e:
        raise TypeError(f"{label} must be JSON-serializable") from e


def _json_dict(payload: bytes, label: str) -> Dict[str, Any]:
    value = json.loads(bytes(payload).decode("utf-8"))
    if not isinstance(value, dict):
        raise ValueError(f"{label} must decode to a dict")
    return value


def _check_status(status: Any, operation: str, key: str) -> None:
    if status not in (None, 0):
        raise RuntimeError(f"{operation} failed for {key}: {status}")


def _copy_config(config: Any) -> Any:
    copier = getattr(config, "copy", None)
    if callable(copier):
        return copier()
    return copy.copy(config)


def _config_for_keys(config: Any, count: int) -> Any:
    """A write config whose group_ids (one logical group) cover `count` keys."""
    if config is None:
        return None
    gids = getattr(config, "group_ids", None)
    if gids is None:
        return config
    gids = [gids] if isinstance(gids, str) else list(gids)
    c = _copy_config(config)
    if not gids:
        c.group_ids = None
        return c
    if len(gids) != 1:
        raise ValueError("structured object store config.group_ids must contain exactly one "
                         "logical group id; it is expanded across internal Mooncake keys")
    c.group_ids = [gids[0]] * count
    return c


def _config_with_group(config: Any, group_id: str) -> Any:
    current = getattr(_config_for_keys(config, 1), "group_ids", None) if config else None
    if current and current[0] and current[0] != group_id:
        raise ValueError("config.group_ids conflicts with the DataProto storage group")
    if config is None:
        try:
            from mooncake.store import ReplicateConfig
            c = ReplicateConfig()
        except ImportError:  # pragma: no cover
            c = SimpleNamespace()
    else:
        c = _copy_config(config)
    c.group_ids = [group_id]
    return c


def _normalized_slice(s: StructuredMemberSlice, total: int) -> Tuple[int, int, int]:
    if s.step <= 0:
        raise ValueError("structured ndarray slicing step must be positive")
    return slice(s.start, s.end, s.step).indices(total)


# --------------------------------------------------------------------------- bundles


class _Bundles:
    """The bundle layer: chunked payloads, manifests, removal."""

    def __init__(self, store: Any, prefix: str, chunk_bytes: int) -> None:
        self.store = store
        self.prefix = prefix
        self.chunk_bytes = chunk_bytes

    # -- writes
    def put_payload(self, key: str, view: memoryview, chunk_bytes: int,
                    config: Any) -> Tuple[Dict[str, Any], List[str]]:
        if len(view) == 0:
            return {"key": key, "bytes": 0, "chunks": []}, []
        parts = [view[i:i + chunk_bytes] for i in range(0, len(view), chunk_bytes)]
        keys = [key] if len(parts) == 1 else [f"{key}/chunk/{i}" for i in range(len(parts))]
        written: List[str] = []
        try:
            for k, part in zip(keys, parts):
                _check_status(self.store.put(k, part, config=_config_for_keys(config, 1))
                              if config is not None else self.store.put(k, part), "put", k)
                written.append(k)
        except Exception:
            _cleanup(self.store, written, strict=False)
            raise
        return ({"key": key, "bytes": len(view),
                 "chunks": [{"key": k, "bytes": len(p)} for k, p in zip(keys, parts)]}, keys)

    def put_tensor(self, key: str, tensor: Any, config: Any) -> Tuple[Dict[str, Any], List[str]]:
        put_tensor = getattr(self.store, "put_tensor", None)
        if callable(put_tensor):
            from mooncake import tensor_format
            t = tensor.detach().cpu().contiguous()
            meta = tensor_format.serialized_size(t) - t.numel() * t.element_size()
            rc = put_tensor(key, t) if config is None else \
                self.store.pub_tensor(key, t, config=_config_for_keys(config, 1))
            _check_status(rc, "put_tensor", key)
            total = meta + t.numel() * t.element_size()
            return ({"key": key, "kind": "tensor", "bytes": total, "dtype": str(t.dtype),
                     "shape": list(t.shape), "chunks": [{"key": key, "bytes": total}],
                     "metadata_bytes": meta}, [key])
        buf = io.BytesIO()  # a plain store: torch.save bytes, as Mooncake's fallback
        _torch.save(tensor, buf)
        spec, keys = self.put_payload(key, memoryview(buf.getvalue()), self.chunk_bytes, config)
        spec["format"] = "torch_save"
        return spec, keys

    def put_manifest(self, manifest: Dict[str, Any], config: Any) -> RemoteBundleRef:
        key = f"{self.prefix}/{manifest['object_id']}/manifest"
        blob = _json_bytes(manifest, "bundle manifest")
        _check_status(self.store.put(key, blob, config=_config_for_keys(config, 1))
                      if config is not None else self.store.put(key, blob), "put", key)
        return RemoteBundleRef(manifest_key=key, manifest=manifest)

    # -- reads
    def read_chunk(self, chunk: Mapping[str, Any]) -> bytes:
        want = int(chunk["bytes"])
        data = self.store.get(chunk["key"])
        if len(data) != want:
            raise KeyError(f"Mooncake object {chunk['key']!r} is missing or has {len(data)} "
                           f"bytes instead of {want}")
        return data

    def read_payload(self, spec: Mapping[str, Any]) -> bytes:
        if int(spec["bytes"]) == 0:
            return b""
        return b"".join(self.read_chunk(c) for c in spec["chunks"])

    def read_range(self, spec: Mapping[str, Any], offset: int, length: int) -> bytes:
        out, at = [], 0
        for chunk in spec["chunks"]:
            n = int(chunk["bytes"])
            lo, hi = max(offset, at), min(offset + length, at + n)
            if lo < hi:
                out.append(self.read_chunk(chunk)[lo - at:hi - at])
            at += n
        data = b"".join(out)
        if len(data) != length:
            raise ValueError(f"range {offset}+{length} is outside the {spec['bytes']}-byte "
                             "payload")
        return data

    def manifest(self, ref: Any) -> Dict[str, Any]:
        if isinstance(ref, RemoteBundleRef):
            m = ref.manifest or _json_dict(self.store.get(ref.manifest_key), "bundle manifest")
        else:
            m = ref.get("manifest")
            if m is None:
                key = ref.get("manifest_key")
                if not isinstance(key, str):
                    raise ValueError("bundle ref must include manifest_key")
                m = _json_dict(self.store.get(key), "bundle manifest")
        self.validate(m)
        return m

    def manifest_key(self, ref: Any, m: Mapping[str, Any]) -> str:
        expected = f"{self.prefix}/{m['object_id']}/manifest"
        key = ref.manifest_key if isinstance(ref, RemoteBundleRef) else ref.get("manifest_key")
        if key is not None and key != expected:
            raise ValueError("bundle manifest_key does not match manifest object_id")
        return expected

    def validate(self, m: Mapping[str, Any]) -> None:
        if not isinstance(m, Mapping) or m.get("version") != 1 or m.get("layout") != "bundle":
            raise ValueError("invalid bundle manifest")
        oid = m.get("object_id")
        if not isinstance(oid, str):
            raise ValueError("bundle manifest object_id must be a string")
        oids = m.get("buffer_object_ids", [oid])
        if not isinstance(oids, list) or not all(isinstance(o, str) for o in oids):
            raise ValueError("bundle manifest buffer_object_ids must be a list of strings")
        bases = [f"{self.prefix}/{o}" for o in oids]
        self._validate_payload(m.get("meta"), [f"{self.prefix}/{oid}"])
        cleanup = m.get("cleanup_keys", [])
        if not isinstance(cleanup, list) or not all(
                isinstance(k, str) and any(k == f"{b}/manifest" or k.startswith(b + "/")
                                           for b in bases) for k in cleanup):
            raise ValueError("bundle manifest cleanup_keys are outside the bundle namespace")
        buffers = m.get("buffers")
        if not isinstance(buffers, dict):
            raise ValueError("bundle manifest buffers must be a dict")
        for name, spec in buffers.items():
            _segment(name, "buffer name")
            self._validate_payload(spec, bases)

    @staticmethod
    def _validate_payload(spec: Any, bases: Sequence[str]) -> None:
        if not isinstance(spec, dict):
            raise ValueError("bundle payload spec must be a dict")
        key = spec.get("key")
        if not isinstance(key, str) or not any(key.startswith(b + "/") for b in bases):
            raise ValueError("bundle payload key is outside the bundle namespace")
        total = int(spec.get("bytes", -1))
        chunks = spec.get("chunks")
        if total < 0 or not isinstance(chunks, list) or (total and not chunks):
            raise ValueError("bundle payload chunks are invalid")
        seen, acc = set(), 0
        for c in chunks:
            if not isinstance(c, dict) or not isinstance(c.get("key"), str) or \
                    not (c["key"] == key or c["key"].startswith(key + "/")) or \
                    c["key"] in seen or int(c.get("bytes", -1)) < 0:
                raise ValueError("bundle chunk is invalid or outside the payload namespace")
            seen.add(c["key"])
            acc += int(c["bytes"])
        if acc != total:
            raise ValueError(f"bundle payload chunks total {acc} bytes, expected {total}")

    def payload_keys(self, m: Mapping[str, Any]) -> List[str]:
        return [c["key"] for spec in [m["meta"], *m["buffers"].values()] for c in spec["chunks"]]

    def remove(self, ref: Any) -> None:
        m = self.manifest(ref)
        keys = self.payload_keys(m) + list(m.get("cleanup_keys", []))
        keys.append(self.manifest_key(ref, m))
        _cleanup(self.store, keys, strict=True)


def _cleanup(store: Any, keys: Sequence[str], strict: bool) -> None:
    pending = list(dict.fromkeys(keys))
    batch_remove = getattr(store, "batch_remove", None)
    if callable(batch_remove) and pending:
        try:
            results = batch_remove(pending, True)
            pending = [k for k, r in zip(pending, results) if r not in (None, 0,
                                                                        MISSING_OBJECT_ERROR)]
        except Exception:
            if strict:
                raise
    errors = []
    for k in pending:
        try:
            rc = store.remove(k, True)
        except Exception:
            if strict:
                raise
            continue
        if rc not in (None, 0, MISSING_OBJECT_ERROR):
            errors.append((k, rc))
    if errors and strict:
        raise RuntimeError(f"failed to remove {len(errors)} Mooncake keys: {errors[:3]}")


# --------------------------------------------------------------------------- members


def _encode_member(value: Any) -> Tuple[Dict[str, Any], Any]:
    """(field spec, value to store) of one structured member."""
    if isinstance(value, _TensorObjectBuffer):
        return {"encoding": "torch_tensor"}, value
    if _torch is not None and isinstance(value, _torch.Tensor):
        if value.is_nested:
            raise ValueError("nested (jagged) torch tensor members are not supported by "
                             "crescent's structured object store")
        return {"encoding": "torch_tensor", "dtype": str(value.dtype),
                "shape": list(value.shape), "element_size": int(value.element_size())}, value
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError("object ndarrays are stored through the DataProto codecs "
                            "(non_tensor_batch), not as structured members")
        a = np.ascontiguousarray(value)
        return ({"encoding": "ndarray", "dtype": a.dtype.str, "shape": list(a.shape)},
                a.view(np.uint8).reshape(-1))
    return {"encoding": "bytes"}, value


class _Structured:
    """Structured objects over bundles."""

    def __init__(self, bundles: _Bundles) -> None:
        self.b = bundles

    def put(self, payload: StructuredObjectPayload, partition: str, chunk_bytes: int,
            policy: BundleTransferPolicy, config: Any) -> RemoteBundleRef:
        _segment(partition, "partition")
        metadata = payload.metadata
        if not isinstance(metadata, Mapping):
            raise TypeError("structured metadata must be a mapping")
        metadata = dict(metadata)
        if STRUCTURED_FIELD_SPECS_KEY in metadata:
            raise ValueError(f"structured metadata key {STRUCTURED_FIELD_SPECS_KEY!r} is "
                             "reserved")
        if not isinstance(metadata.setdefault("layout", "structured"), str):
            raise ValueError("structured metadata layout must be a string")
        specs, members = {}, {}
        for name, value in payload.buffers.items():
            _segment(name, "buffer name")
            specs[name], members[name] = _encode_member(value)
        if specs:
            metadata[STRUCTURED_FIELD_SPECS_KEY] = specs
        object_id = f"{partition}/{uuid.uuid4().hex}"
        base = f"{self.b.prefix}/{object_id}"
        written: List[str] = []
        try:
            meta_spec, keys = self.b.put_payload(f"{base}/meta",
                                                 memoryview(_json_bytes(metadata,
                                                                        "structured metadata")),
                                                 chunk_bytes, config)
            written += keys
            buffers = {}
            for name, value in members.items():
                key = f"{base}/buffer/{name}"
                if isinstance(value, _TensorObjectBuffer):
                    # One object holding the serialized tensor, as Mooncake's
                    # tensor-object buffers are stored.
                    data = ctypes.string_at(value.ptr, value.size)
                    from mooncake import tensor_format
                    tensor_format.decode_header(data, len(data))  # must be a tensor object
                    spec, keys = self.b.put_payload(key, memoryview(data), max(len(data), 1),
                                                    config)
                elif policy.copy_mode == "zero_copy" and not (
                        _torch is not None and isinstance(value, _torch.Tensor)):
                    raise ValueError(f"member {name}: copy_mode='zero_copy' takes "
                                     "tensor_object_buffer members only; crescent copies "
                                     "ndarray and bytes members (use 'auto' or 'copy')")
                elif _torch is not None and isinstance(value, _torch.Tensor):
                    if policy.copy_mode == "zero_copy":
                        raise ValueError("zero-copy structured tensor fields require a "
                                         "tensor_object_buffer")
                    spec, keys = self.b.put_tensor(key, value, config)
                else:
                    spec, keys = self.b.put_payload(key, _bytes_view(value, name), chunk_bytes,
                                                    config)
                buffers[name] = spec
                written += keys
            manifest = {"version": 1, "layout": "bundle", "object_id": object_id,
                        "meta": meta_spec, "buffers": buffers}
            ref = self.b.put_manifest(manifest, config)
        except Exception:
            _cleanup(self.b.store, written, strict=False)
            raise
        return ref

    def metadata(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        return _json_dict(self.b.read_payload(m["meta"]), "structured metadata")

    def materialize(self, spec: StructuredObjectReadSpec,
                    destinations: Optional[Mapping[str, Any]]) -> StructuredObjectResult:
        if spec.member_names is not None and not spec.member_names:
            raise ValueError("structured read spec selected no members")
        m = self.b.manifest(spec.ref)
        metadata = self.metadata(m)
        buffers = m["buffers"]
        names = list(buffers) if spec.member_names is None else list(spec.member_names)
        missing = [n for n in names if n not in buffers]
        if missing:
            raise KeyError(f"unknown bundle buffers: {missing}")
        specs = metadata.get(STRUCTURED_FIELD_SPECS_KEY, {})
        if not isinstance(specs, dict):
            raise ValueError("structured field specs must be a dict")
        slices = dict(spec.member_slices)
        dest = destinations or {}
        objects = {n: self.member(n, buffers[n], specs.get(n, {"encoding": "bytes"}),
                                  slices.get(n), dest.get(n)) for n in names}
        return StructuredObjectResult(metadata=dict(metadata), objects=objects)

    def member(self, name: str, payload: Mapping[str, Any], fspec: Mapping[str, Any],
               sl: Optional[StructuredMemberSlice], destination: Any) -> Any:
        enc = fspec.get("encoding", "bytes")
        if enc == "bytes":
            if sl is not None:
                raise ValueError(f"structured bytes member {name} does not support slicing")
            if destination is not None:
                raise ValueError(f"structured bytes member {name} does not support "
                                 "materialize_into")
            return self.b.read_payload(payload)
        if enc == "ndarray":
            return self._ndarray(name, payload, fspec, sl, destination)
        if enc == "torch_tensor":
            return self._tensor(name, payload, fspec, sl, destination)
        raise ValueError(f"unsupported structured field encoding: {enc}")

    def _ndarray(self, name: str, payload: Mapping[str, Any], fspec: Mapping[str, Any],
                 sl: Optional[StructuredMemberSlice], destination: Any) -> np.ndarray:
        dtype, shape = fspec.get("dtype"), fspec.get("shape")
        if not isinstance(dtype, str) or not isinstance(shape, list):
            raise ValueError(f"structured ndarray field {name} is missing dtype or shape")
        dt, shape = np.dtype(dtype), tuple(int(d) for d in shape)
        if sl is None:
            out_shape, offset, step, cover = shape, 0, 1, None
            length = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        else:
            if sl.axis != 0:
                raise ValueError("structured ndarray slicing currently supports axis=0 only")
            if not shape:
                raise ValueError("structured ndarray slicing requires at least one dimension")
            start, end, step = _normalized_slice(sl, shape[0])
            row = dt.itemsize * int(np.prod(shape[1:], dtype=np.int64))
            count = 0 if start >= end else 1 + (end - 1 - start) // step
            cover = 0 if count == 0 else (count - 1) * step + 1
            out_shape, offset, length = (count, *shape[1:]), start * row, cover * row
        target = _ndarray_destination(name, destination, dt, out_shape)
        if length == 0:
            return target
        data = self.b.read_range(payload, offset, length)
        if step == 1:
            target.view(np.uint8).reshape(-1)[:] = np.frombuffer(data, dtype=np.uint8)
        else:
            full = np.frombuffer(data, dtype=dt).reshape((cover, *shape[1:]))
            target[...] = full[::step]
        return target

    def _tensor(self, name: str, payload: Mapping[str, Any], fspec: Mapping[str, Any],
                sl: Optional[StructuredMemberSlice], destination: Any) -> Any:
        if fspec.get("nested"):
            raise ValueError(f"structured nested tensor member {name} is not supported by "
                             "crescent")
        if payload.get("format") == "torch_save":
            if _torch is None:
                raise RuntimeError("torch is needed to read a torch_save tensor member")
            value = _torch.load(io.BytesIO(self.b.read_payload(payload)), weights_only=True)
        elif destination is not None:
            if not isinstance(destination, (_TensorObjectBuffer, _RawDestination)):
                raise ValueError(f"structured tensor member {name} only supports "
                                 "tensor_object_buffer or raw_destination destinations")
            if sl is not None:
                raise ValueError(f"structured tensor member {name}: crescent reads a sliced "
                                 "tensor member without a destination")
            data = self.b.read_payload(payload)
            if destination.size < len(data):
                raise ValueError(f"tensor destination has {destination.size} bytes, expected "
                                 f"at least {len(data)}")
            ctypes.memmove(destination.ptr, data, len(data))
            return destination
        else:
            from mooncake import tensor_format
            value = tensor_format.deserialize_tensor(bytearray(self.b.read_payload(payload)))
        if sl is None:
            return value
        if sl.axis != 0:
            raise ValueError("structured tensor slicing currently supports axis=0 only")
        start, end, step = _normalized_slice(sl, len(value))
        return value[start:end:step]


def _ndarray_destination(name: str, destination: Any, dtype: np.dtype,
                         shape: Tuple[int, ...]) -> np.ndarray:
    if destination is None:
        return np.empty(shape, dtype=dtype)
    if isinstance(destination, _RawDestination):
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if destination.size < nbytes:
            raise ValueError(f"raw destination has {destination.size} bytes, expected at "
                             f"least {nbytes}")
        return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(destination.ptr)) \
            .view(dtype).reshape(shape)
    if not isinstance(destination, np.ndarray):
        raise TypeError(f"structured ndarray field {name} destination must be a numpy.ndarray "
                        "or raw_destination")
    if destination.dtype != dtype or tuple(destination.shape) != tuple(shape):
        raise ValueError(f"structured ndarray field {name} destination mismatch: expected "
                         f"{dtype.str} {tuple(shape)}, got {destination.dtype.str} "
                         f"{tuple(destination.shape)}")
    if not destination.flags["C_CONTIGUOUS"] or not destination.flags["WRITEABLE"]:
        raise ValueError(f"structured ndarray field {name} destination must be C-contiguous "
                         "and writeable")
    return destination


# --------------------------------------------------------------------------- codecs


def _is_bytes_like(v: Any) -> bool:
    return isinstance(v, (bytes, bytearray, memoryview))


def _numeric_scalar(v: Any) -> bool:
    return isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating))


def _numeric_sequence(v: Any) -> bool:
    if isinstance(v, np.ndarray):
        return v.dtype.kind in "biuf"
    if isinstance(v, (list, tuple)):
        try:
            a = np.asarray(v)
        except (ValueError, TypeError):
            return False
        return a.dtype.kind in "biuf"
    return False


def _choose_codec(values: List[Any]) -> str:
    present = [v for v in values if v is not None]
    if all(_numeric_scalar(v) for v in present):
        return "ndarray"
    if all(isinstance(v, str) for v in present):
        return "utf8_ragged"
    if all(_is_bytes_like(v) for v in present):
        return "bytes_ragged"
    if all(_numeric_sequence(v) for v in present):
        return "typed_ragged"
    try:
        json.dumps(present, ensure_ascii=False, allow_nan=False)
        return "json_ragged"
    except (TypeError, ValueError):
        pass
    if _msgpack is not None:
        try:
            for v in present:
                _msgpack.packb(v, use_bin_type=True, strict_types=True)
            return "msgpack_ragged"
        except (TypeError, ValueError, OverflowError):
            pass
    raise ValueError("unsupported structured non-tensor field: its values are neither numbers, "
                     "strings, bytes, numeric arrays, JSON nor msgpack values (crescent's "
                     f"codecs: {', '.join(_SUPPORTED_CODECS)})")


def _ragged_bytes(parts: List[Optional[bytes]]) -> Dict[str, Any]:
    offsets = [0]
    for p in parts:
        offsets.append(offsets[-1] + (0 if p is None else len(p)))
    return {"data": b"".join(p for p in parts if p),
            "offsets": np.asarray(offsets, dtype=np.int64),
            "nulls": np.asarray([p is None for p in parts], dtype=np.bool_)}


def _encode_values(codec: str, values: List[Any], dtype: Any = None
                   ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(payload members, metadata) of one non_tensor_batch field."""
    if codec == "ndarray":
        present = [v for v in values if v is not None]
        dt = np.dtype(dtype) if dtype is not None else \
            (np.asarray(present).dtype if present else np.dtype(np.float64))
        fill = False if dt == np.bool_ else 0
        data = np.asarray([fill if v is None else v for v in values], dtype=dt)
        return ({"data": data, "nulls": np.asarray([v is None for v in values], dtype=np.bool_)},
                {"dtype": str(data.dtype), "shape": list(data.shape)})
    if codec == "utf8_ragged":
        return _ragged_bytes([None if v is None else v.encode("utf-8") for v in values]), {}
    if codec == "bytes_ragged":
        return _ragged_bytes([None if v is None else bytes(v) for v in values]), {}
    if codec == "json_ragged":
        return _ragged_bytes([None if v is None else json.dumps(
            v, ensure_ascii=False, separators=(",", ":")).encode("utf-8") for v in values]), {}
    if codec == "msgpack_ragged":
        if _msgpack is None:
            raise ValueError("the msgpack_ragged codec needs the msgpack package")
        return _ragged_bytes([None if v is None else _msgpack.packb(
            v, use_bin_type=True, strict_types=True) for v in values]), {}
    if codec == "typed_ragged":
        arrays = [None if v is None else np.asarray(v) for v in values]
        present = [a for a in arrays if a is not None]
        dt = np.dtype(dtype) if dtype is not None else \
            (np.result_type(*present) if present else np.dtype("int64"))
        if dt.hasobject:
            raise ValueError("typed_ragged codec requires non-object dtype")
        arrays = [np.asarray([], dtype=dt) if a is None else np.ascontiguousarray(a, dtype=dt)
                  for a in arrays]
        max_ndim = max((a.ndim for a in arrays), default=0)
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        shapes = np.zeros((len(arrays), max(max_ndim, 1)), dtype=np.int64)
        ndims = np.zeros(len(arrays), dtype=np.int16)
        for i, a in enumerate(arrays):
            offsets[i + 1] = offsets[i] + a.size
            ndims[i] = a.ndim
            shapes[i, :a.ndim] = a.shape
        data = np.concatenate([a.reshape(-1) for a in arrays]) if arrays else \
            np.empty(0, dtype=dt)
        is_nd = [v is not None and isinstance(v, np.ndarray) for v in values]
        fmt = "ndarray" if all(v is None or n for v, n in zip(values, is_nd)) else \
            ("mixed" if any(is_nd) else "list")
        return ({"data": data.astype(dt, copy=False), "offsets": offsets, "shapes": shapes,
                 "ndims": ndims, "nulls": np.asarray([v is None for v in values],
                                                     dtype=np.bool_)},
                {"dtype": str(dt), "max_ndim": int(max_ndim), "shape_policy": "ragged",
                 "row_format": fmt, "ndarray_rows": is_nd if fmt == "mixed" else None})
    raise ValueError(f"unsupported structured non-tensor codec: {codec} (crescent's codecs: "
                     f"{', '.join(_SUPPORTED_CODECS)})")


def _as_bytes(data: Any) -> memoryview:
    if isinstance(data, np.ndarray):
        return memoryview(np.ascontiguousarray(data).view(np.uint8).reshape(-1))
    return memoryview(data).cast("B")


def _decode_values(codec: str, payload: Mapping[str, Any], rows: int,
                   metadata: Optional[Mapping[str, Any]]) -> List[Any]:
    metadata = metadata or {}
    if codec == "ndarray":
        data, nulls = payload["data"], payload["nulls"]
        if not bool(np.asarray(nulls).any()):
            return data.tolist()
        out = data.astype(object)
        out[np.asarray(nulls, dtype=bool)] = None
        return out.tolist()
    if codec in ("utf8_ragged", "bytes_ragged", "json_ragged", "msgpack_ragged"):
        data, offsets, nulls = _as_bytes(payload["data"]), payload["offsets"], payload["nulls"]
        raw = [None if bool(nulls[r]) else bytes(data[int(offsets[r]):int(offsets[r + 1])])
               for r in range(rows)]
        if codec == "utf8_ragged":
            return [None if v is None else v.decode("utf-8") for v in raw]
        if codec == "json_ragged":
            return [None if v is None else json.loads(v) for v in raw]
        if codec == "msgpack_ragged":
            if _msgpack is None:
                raise ValueError("the msgpack_ragged codec needs the msgpack package")
            return [None if v is None else _msgpack.unpackb(v, raw=False) for v in raw]
        return raw
    if codec == "typed_ragged":
        dt = np.dtype(metadata.get("dtype", "int64"))
        raw = payload["data"]
        data = raw.view(dt) if isinstance(raw, np.ndarray) and raw.dtype != dt else \
            (raw if isinstance(raw, np.ndarray) else np.frombuffer(bytes(raw), dtype=dt))
        offsets, shapes, ndims, nulls = (payload["offsets"], payload["shapes"],
                                         payload["ndims"], payload["nulls"])
        fmt = metadata.get("row_format")
        nd_rows = metadata.get("ndarray_rows") or []
        out: List[Any] = []
        for r in range(rows):
            if bool(nulls[r]):
                out.append(None)
                continue
            nd = int(ndims[r])
            a = data[int(offsets[r]):int(offsets[r + 1])].reshape(
                tuple(int(v) for v in shapes[r, :nd].tolist()))
            out.append(a if fmt == "ndarray" or (fmt == "mixed" and bool(nd_rows[r]))
                       else a.tolist())
        return out
    raise ValueError(f"structured non-tensor codec {codec!r} is not supported by crescent's "
                     f"reader (supported: {', '.join(_SUPPORTED_CODECS)})")


def _object_array(values: List[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


# --------------------------------------------------------------------------- DataProto


def _to_dict(value: Any) -> Dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    items = getattr(value, "items", None)
    if callable(items):
        return dict(items())
    raise TypeError(f"expected mapping-like value, got {type(value).__name__}")


def _split_dataproto(data: Any) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    if isinstance(data, Mapping):
        keys = {"batch", "non_tensor_batch", "meta_info"}
        if data and set(data) <= keys and all(
                v is None or isinstance(v, Mapping) or callable(getattr(v, "items", None))
                for v in data.values()):
            return (_to_dict(data.get("batch")), _to_dict(data.get("non_tensor_batch")),
                    _to_dict(data.get("meta_info")))
        return dict(data), {}, {}
    return (_to_dict(getattr(data, "batch", None)),
            _to_dict(getattr(data, "non_tensor_batch", None)),
            _to_dict(getattr(data, "meta_info", None)))


def _is_dense(value: Any) -> bool:
    if _torch is not None and isinstance(value, _torch.Tensor):
        return value.ndim > 0
    return isinstance(value, np.ndarray) and value.dtype != object and value.ndim > 0


def _seq(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _schema_section(name: str, schema: FieldSchema) -> Optional[str]:
    section = schema.metadata.get("section")
    if section is not None and section not in ("batch", "non_tensor_batch", "meta_info"):
        raise ValueError(f"FieldSchema for {name!r} metadata['section'] must be one of "
                         "['batch', 'meta_info', 'non_tensor_batch']")
    return section


def _flat_dict_to_envelope(data: Mapping[str, Any],
                           schemas: Optional[Mapping[str, FieldSchema]]) -> Dict[str, Any]:
    """Mooncake's rules: dense arrays of the batch length are batch fields,
    other sequences of that length non_tensor fields, the rest meta_info;
    FieldSchema metadata["section"] overrides."""
    if not isinstance(data, Mapping):
        raise TypeError("flat dict payload must be a mapping")
    schemas = schemas or {}
    pinned = {len(data[n]) for n, s in schemas.items()
              if n in data and _schema_section(n, s) in ("batch", "non_tensor_batch")}
    if len(pinned) > 1:
        raise ValueError(f"flat dict fields have inconsistent batch sizes: {sorted(pinned)}")
    rows = pinned.pop() if pinned else 0
    if rows == 0:
        meta_pinned = {n for n, s in schemas.items() if n in data and
                       _schema_section(n, s) == "meta_info"}
        dense = {len(v) for k, v in data.items() if k not in meta_pinned and _is_dense(v)}
        if len(dense) > 1:
            raise ValueError(f"flat dict dense fields have ambiguous batch sizes: "
                             f"{sorted(dense)}")
        if dense:
            rows = dense.pop()
        else:
            sizes = {len(v) for k, v in data.items() if k not in meta_pinned and
                     ((isinstance(v, np.ndarray) and v.ndim > 0) or _seq(v))}
            if len(sizes) > 1:
                raise ValueError(f"flat dict fields have ambiguous batch sizes: {sorted(sizes)};"
                                 " pass FieldSchema metadata['section'] for list-valued "
                                 "metadata fields")
            rows = sizes.pop() if sizes else 0
    batch, non_tensor, meta = {}, {}, {}
    for k, v in data.items():
        s = schemas.get(k)
        section = None if s is None else _schema_section(k, s)
        if section is None:
            if rows and _is_dense(v) and len(v) == rows:
                section = "batch"
            elif not pinned and rows and (_seq(v) or isinstance(v, np.ndarray)) and \
                    len(v) == rows:
                section = "non_tensor_batch"
            else:
                section = "meta_info"
        if section == "batch":
            batch[k] = v
        elif section == "non_tensor_batch":
            non_tensor[k] = v if isinstance(v, np.ndarray) else _object_array(list(v))
        else:
            meta[k] = v
    return {"batch": batch, "non_tensor_batch": non_tensor, "meta_info": meta}


def _envelope_to_flat_dict(data: Mapping[str, Any]) -> Dict[str, Any]:
    meta, batch, nt = (_to_dict(data.get("meta_info")), _to_dict(data.get("batch")),
                       _to_dict(data.get("non_tensor_batch")))
    overlap = (set(meta) & set(batch)) | (set(meta) & set(nt)) | (set(batch) & set(nt))
    if overlap:
        raise ValueError(f"Duplicate keys found across DataProto sections: {sorted(overlap)}")
    out = dict(meta)
    out.update(batch)
    for k, v in nt.items():
        out[k] = v.tolist() if isinstance(v, np.ndarray) and v.dtype == object else v
    return out


def _build_result(batch: Dict[str, Any], nt: Dict[str, Any], meta: Dict[str, Any],
                  data_cls: Any) -> Any:
    payload = {"batch": batch, "non_tensor_batch": nt, "meta_info": meta}
    if data_cls is None or data_cls is dict:
        return payload
    from_dict = getattr(data_cls, "from_dict", None)
    try:
        if callable(from_dict):
            return from_dict(batch, nt, meta_info=meta)
        return data_cls(batch=batch, non_tensor_batch=nt, meta_info=meta)
    except TypeError as e:
        raise TypeError(f"{getattr(data_cls, '__name__', data_cls)!r} cannot be constructed "
                        "from batch, non_tensor_batch, and meta_info") from e


class MooncakeBundleTransfer:
    """Structured objects and DataProto bundles over a store (Mooncake's API).

    MooncakeBundleTransfer(store, key_prefix="bundle",
                           default_chunk_bytes=DEFAULT_BUNDLE_CHUNK_BYTES, buffer_pool=None)

    ``store`` is a MooncakeDistributedStore (anything with put/get/remove,
    batch_remove and, for tensors, put_tensor/get_tensor). ``buffer_pool``
    is accepted; crescent does not stage through it.
    """

    def __init__(self, store: Any, key_prefix: str = "bundle",
                 default_chunk_bytes: int = DEFAULT_BUNDLE_CHUNK_BYTES,
                 buffer_pool: Any = None) -> None:
        prefix = key_prefix.strip("/")
        if not prefix or any(ord(c) < 32 for c in prefix):
            raise ValueError("key_prefix must be a non-empty key prefix")
        self.store = store
        self.key_prefix = prefix
        self.default_chunk_bytes = self._chunk(default_chunk_bytes)
        self.buffer_pool = buffer_pool
        self._bundle_store = _Bundles(store, prefix, self.default_chunk_bytes)
        self._structured = _Structured(self._bundle_store)

    @staticmethod
    def _chunk(n: Optional[int]) -> int:
        if n is None:
            return DEFAULT_BUNDLE_CHUNK_BYTES
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ValueError("chunk_bytes must be positive")
        return n

    @staticmethod
    def _policy(policy: Optional[BundleTransferPolicy],
                max_inflight_put: Optional[int] = None) -> BundleTransferPolicy:
        p = policy or BundleTransferPolicy()
        if max_inflight_put is not None:
            p = BundleTransferPolicy(max_inflight_put, p.put_mode, p.copy_mode)
        if p.max_inflight_put < 1:
            raise ValueError("max_inflight_put must be positive")
        if p.put_mode not in ("auto", "batch", "parallel"):
            raise ValueError(f"unsupported put_mode: {p.put_mode}")
        if p.copy_mode not in ("auto", "zero_copy", "copy"):
            raise ValueError(f"unsupported copy_mode: {p.copy_mode}")
        return p

    # ---------------------------------------------------------------- bundles
    def put_bundle(self, meta: Any, buffers: Mapping[str, Any], partition: str = "default",
                   chunk_bytes: Optional[int] = None,
                   policy: Optional[BundleTransferPolicy] = None,
                   max_inflight_put: Optional[int] = None, config: Any = None) -> RemoteBundleRef:
        """Raw metadata bytes plus named bytes-like buffers as a bundle."""
        _segment(partition, "partition")
        self._policy(policy, max_inflight_put)
        cb = self._chunk(chunk_bytes if chunk_bytes is not None else self.default_chunk_bytes)
        object_id = f"{partition}/{uuid.uuid4().hex}"
        base = f"{self.key_prefix}/{object_id}"
        written: List[str] = []
        try:
            meta_spec, keys = self._bundle_store.put_payload(f"{base}/meta",
                                                             _bytes_view(meta, "meta"), cb,
                                                             config)
            written += keys
            specs = {}
            for name, value in buffers.items():
                _segment(name, "buffer name")
                specs[name], keys = self._bundle_store.put_payload(
                    f"{base}/buffer/{name}", _bytes_view(value, name), cb, config)
                written += keys
            return self._bundle_store.put_manifest(
                {"version": 1, "layout": "bundle", "object_id": object_id, "meta": meta_spec,
                 "buffers": specs}, config)
        except Exception:
            _cleanup(self.store, written, strict=False)
            raise

    def remove_bundle(self, ref: Any) -> None:
        """Remove every Mooncake object of a bundle."""
        self._bundle_store.remove(ref)

    # ---------------------------------------------------------------- structured objects
    def put_structured_object(self, payload: StructuredObjectPayload,
                              partition: str = "default", chunk_bytes: Optional[int] = None,
                              policy: Optional[BundleTransferPolicy] = None,
                              max_inflight_put: Optional[int] = None,
                              config: Any = None) -> RemoteBundleRef:
        """Store JSON-able metadata plus named members (ndarrays, tensors, bytes)."""
        p = self._policy(policy, max_inflight_put)
        cb = self._chunk(chunk_bytes if chunk_bytes is not None else self.default_chunk_bytes)
        return self._structured.put(payload, partition, cb, p, config)

    def put_object(self, obj: Any, partition: str = "default", chunk_bytes: Optional[int] = None,
                   policy: Optional[BundleTransferPolicy] = None,
                   max_inflight_put: Optional[int] = None, config: Any = None) -> RemoteBundleRef:
        """A mapping of members, or a single tensor / array / bytes value."""
        if isinstance(obj, Mapping):
            payload = StructuredObjectPayload(metadata={}, buffers=obj)
        else:
            payload = StructuredObjectPayload(metadata={"__mooncake_wrapped_object__": True},
                                              buffers={"value": obj})
        return self.put_structured_object(payload, partition, chunk_bytes, policy,
                                          max_inflight_put, config)

    def get_object(self, ref: Any) -> Any:
        result = self.materialize(self.read_spec(ref))
        if result.metadata.get("__mooncake_wrapped_object__"):
            return result.objects["value"]
        return result.objects

    def read_spec(self, ref: Any) -> StructuredObjectReadSpec:
        return StructuredObjectReadSpec(ref=ref)

    def materialize(self, spec: StructuredObjectReadSpec) -> StructuredObjectResult:
        return self._structured.materialize(spec, None)

    def materialize_into(self, spec: StructuredObjectReadSpec,
                         destinations: Optional[Mapping[str, Any]]) -> StructuredObjectResult:
        return self._structured.materialize(spec, destinations)

    @staticmethod
    def release_result(result: Any) -> None:
        """Release pool-backed buffers of a result: crescent's results own their
        memory (nothing is pool-backed), so there is nothing to release."""
        return None

    # ---------------------------------------------------------------- DataProto
    def put(self, data: Any, *, type: str = "dataproto", namespace: str = "default",
            partition: str = "default", stage: str = "default",
            chunk_bytes: Optional[int] = None, policy: Optional[BundleTransferPolicy] = None,
            config: Any = None,
            field_schemas: Optional[Mapping[str, FieldSchema]] = None) -> MooncakeDataProtoRef:
        """Store a DataProto-like object (type="dataproto") or a flat dict (type="dict")."""
        if type == "dataproto":
            stage_data = data
        elif type == "dict":
            stage_data = _flat_dict_to_envelope(data, field_schemas)
        else:
            raise ValueError(f"unsupported Mooncake payload type: {type!r}")
        return self._put_stage(None, stage_data, namespace, partition, stage, chunk_bytes,
                               policy, False, field_schemas, config)

    def put_dataproto(self, data: Any, *, namespace: str = "default",
                      partition: str = "default", stage: str = "default",
                      chunk_bytes: Optional[int] = None,
                      policy: Optional[BundleTransferPolicy] = None,
                      field_schemas: Optional[Mapping[str, FieldSchema]] = None,
                      config: Any = None) -> MooncakeDataProtoRef:
        return self.put(data, type="dataproto", namespace=namespace, partition=partition,
                        stage=stage, chunk_bytes=chunk_bytes, policy=policy, config=config,
                        field_schemas=field_schemas)

    def append_dataproto_fields(self, ref: Any, data: Any, *, stage: str,
                                overwrite: bool = False, chunk_bytes: Optional[int] = None,
                                policy: Optional[BundleTransferPolicy] = None,
                                field_schemas: Optional[Mapping[str, FieldSchema]] = None,
                                config: Any = None) -> MooncakeDataProtoRef:
        """Add fields (a new stage object, or merged into an existing stage)."""
        ref = _resolve_ref(ref)
        return self._put_stage(ref, data, ref.namespace, ref.partition, stage, chunk_bytes,
                               policy, overwrite, field_schemas, config)

    def get(self, ref: Any, *, type: str = "dataproto", fields: Optional[Sequence[str]] = None,
            batch_fields: Optional[Sequence[str]] = None,
            non_tensor_fields: Optional[Sequence[str]] = None,
            meta_info_keys: Optional[Sequence[str]] = None, data_cls: Any = None,
            destinations: Optional[Mapping[str, Any]] = None, rows: Any = None) -> Any:
        if type not in ("dataproto", "dict"):
            raise ValueError(f"unsupported Mooncake payload type: {type!r}")
        result = self._get(ref, fields, batch_fields, non_tensor_fields, meta_info_keys,
                           dict if type == "dict" else data_cls, destinations, rows,
                           type == "dict")
        return _envelope_to_flat_dict(result) if type == "dict" else result

    def get_dataproto(self, ref: Any, *, fields: Optional[Sequence[str]] = None,
                      batch_fields: Optional[Sequence[str]] = None,
                      non_tensor_fields: Optional[Sequence[str]] = None,
                      meta_info_keys: Optional[Sequence[str]] = None, data_cls: Any = None,
                      destinations: Optional[Mapping[str, Any]] = None,
                      rows: Any = None) -> Any:
        return self._get(ref, fields, batch_fields, non_tensor_fields, meta_info_keys,
                         data_cls, destinations, rows, False)

    def cleanup_dataproto(self, ref: Any) -> None:
        """Remove every stage object of a DataProto ref or handle."""
        ref = _resolve_ref(ref)
        seen = set()
        for sref in ref.stage_refs.values():
            if sref.manifest_key not in seen:
                seen.add(sref.manifest_key)
                self.remove_bundle(sref)

    def dataproto_manifest_view(self, ref: Any) -> Dict[str, Any]:
        """Field view derived from the stage manifests."""
        ref = _resolve_ref(ref)
        metas = {s: self._structured.metadata(self._bundle_store.manifest(r))
                 for s, r in ref.stage_refs.items()}
        fields = {}
        for name, loc in ref.field_index.items():
            specs = metas[loc.stage].get(STRUCTURED_FIELD_SPECS_KEY, {})
            spec = dict(specs.get(loc.member, {"encoding": "bytes"}))
            enc = ref.encoded_non_tensor.get(name)
            if enc is not None:
                spec = {"encoding": "structured_non_tensor", "codec": enc["codec"],
                        "metadata": enc.get("metadata"),
                        "payload_members": dict(enc["payload_members"]),
                        "payload_specs": {p: dict(specs.get(m, {"encoding": "bytes"}))
                                          for p, m in enc["payload_members"].items()}}
            fields[name] = {"section": loc.section, "stage": loc.stage, "member": loc.member,
                            "spec": spec}
        return {"namespace": ref.namespace, "partition": ref.partition,
                "batch_size": ref.batch_size,
                "batch_fields": {n: i for n, i in fields.items() if i["section"] == "batch"},
                "non_tensor_fields": {n: i for n, i in fields.items()
                                      if i["section"] == "non_tensor_batch"},
                "meta_info_keys": list(ref.meta_info),
                "stages": {s: {"manifest_key": r.manifest_key,
                               "dataproto": metas[s].get("dataproto", {})}
                           for s, r in ref.stage_refs.items()}}

    # -- internals
    @staticmethod
    def _new_group_id(config: Any) -> Optional[str]:
        gids = getattr(config, "group_ids", None)
        if gids is None:
            return f"structured-{uuid.uuid4().hex}"
        if isinstance(gids, str):
            gid = gids
        else:
            gids = list(gids)
            if len(gids) > 1:
                raise ValueError("structured object store config.group_ids must contain "
                                 "exactly one logical group id; it is expanded across "
                                 "internal Mooncake keys")
            gid = gids[0] if gids else None
        if gid is None:
            return f"structured-{uuid.uuid4().hex}"
        if not isinstance(gid, str):
            raise ValueError("structured object store config.group_ids must contain strings")
        return gid or None

    def _put_stage(self, ref: Optional[MooncakeDataProtoRef], data: Any, namespace: str,
                   partition: str, stage: str, chunk_bytes: Optional[int],
                   policy: Optional[BundleTransferPolicy], overwrite: bool,
                   schemas: Optional[Mapping[str, FieldSchema]],
                   config: Any) -> MooncakeDataProtoRef:
        batch, non_tensor, meta_info = _split_dataproto(data)
        sizes = {len(v) for section in (batch, non_tensor) for v in section.values()}
        if len(sizes) > 1:
            raise ValueError(f"DataProto fields have inconsistent batch sizes: {sorted(sizes)}")
        batch_size = sizes.pop() if sizes else 0
        if ref is not None and batch_size and batch_size != ref.batch_size:
            raise ValueError(f"DataProto append batch size {batch_size} does not match ref batch "
                             f"size {ref.batch_size}")
        both = sorted(set(batch) & set(non_tensor))
        if both:
            raise ValueError(f"DataProto batch and non_tensor_batch fields overlap: {both}")
        buffers: Dict[str, Any] = {}
        updates: Dict[str, StructuredFieldLocation] = {}
        encoded: Dict[str, Any] = {}
        for name, value in batch.items():
            buffers[f"batch.{name}"] = value
            updates[name] = StructuredFieldLocation(stage, f"batch.{name}", "batch")
        for name, value in non_tensor.items():
            schema = (schemas or {}).get(name)
            member = f"non_tensor_batch.{name}"
            if isinstance(value, np.ndarray) and value.dtype == object or \
                    (schema is not None and schema.codec != "auto"):
                values = list(value)
                if schema is not None and not schema.nullable and any(v is None for v in values):
                    raise ValueError(f"FieldSchema for 'non_tensor_batch.{name}' is not "
                                     "nullable")
                codec = schema.codec if schema is not None and schema.codec != "auto" else \
                    _choose_codec(values)
                try:
                    payload, metadata = _encode_values(
                        codec, values, None if schema is None else schema.metadata.get("dtype"))
                except (TypeError, ValueError) as e:
                    raise type(e)(f"failed to encode non_tensor_batch field {name!r} with codec "
                                  f"{codec!r}: {e}") from e
                members = {}
                for pname, pvalue in payload.items():
                    buffers[f"{member}.{pname}"] = pvalue
                    members[pname] = f"{member}.{pname}"
                metadata.update({"schema_source": "field_schema" if schema is not None
                                 else "inferred_from_runtime_values"})
                encoded[name] = {"codec": codec, "rows": len(values), "metadata": metadata,
                                 "payload_members": members}
            else:
                buffers[member] = value
            updates[name] = StructuredFieldLocation(stage, member, "non_tensor_batch")
        if ref is not None and not overwrite:
            dup = sorted(set(ref.field_index) & set(updates))
            if dup:
                raise ValueError(f"DataProto fields already exist: {dup}")
        if ref is not None and overwrite:
            dangling = sorted(n for n, loc in ref.field_index.items()
                              if loc.stage == stage and n not in updates)
            if dangling:
                raise ValueError(f"DataProto overwrite for stage {stage!r} must include existing "
                                 f"fields: {dangling}")
        group = ref._storage_group_id if ref is not None else self._new_group_id(config)
        if not buffers:
            base = ref or MooncakeDataProtoRef(batch_size, {}, {}, {}, namespace, partition,
                                               _storage_group_id=group)
            merged = dict(base.meta_info)
            merged.update(meta_info)
            return MooncakeDataProtoRef(base.batch_size, dict(base.stage_refs),
                                        dict(base.field_index), merged, base.namespace,
                                        base.partition, base.global_indexes,
                                        dict(base.encoded_non_tensor), group)
        effective = config if group is None else _config_with_group(config, group)
        payload = StructuredObjectPayload(
            metadata={"layout": "dataproto_stage",
                      "dataproto": {"version": 1, "namespace": namespace,
                                    "partition": partition, "stage": stage,
                                    "batch_size": batch_size if ref is None else ref.batch_size}},
            buffers=buffers)
        existing = ref.stage_refs.get(stage) if ref is not None else None
        if existing is not None and not overwrite:
            stage_ref = self._merge_stage(existing, payload, partition, chunk_bytes, policy,
                                          effective)
        else:
            stage_ref = self.put_structured_object(payload, partition, chunk_bytes, policy,
                                                   config=effective)
            if existing is not None and existing.manifest_key != stage_ref.manifest_key:
                self.remove_bundle(existing)
        if ref is None:
            return MooncakeDataProtoRef(batch_size, {stage: stage_ref}, dict(updates),
                                        dict(meta_info), namespace, partition, None,
                                        dict(encoded), group)
        stage_refs = dict(ref.stage_refs)
        stage_refs[stage] = stage_ref
        index = dict(ref.field_index)
        index.update(updates)
        merged_meta = dict(ref.meta_info)
        merged_meta.update(meta_info)
        enc = {n: e for n, e in ref.encoded_non_tensor.items() if n not in updates}
        enc.update(encoded)
        return MooncakeDataProtoRef(ref.batch_size, stage_refs, index, merged_meta,
                                    ref.namespace, ref.partition, ref.global_indexes, enc, group)

    def _merge_stage(self, old_ref: RemoteBundleRef, payload: StructuredObjectPayload,
                     partition: str, chunk_bytes: Optional[int],
                     policy: Optional[BundleTransferPolicy], config: Any) -> RemoteBundleRef:
        """Append members to a stage: a new object, then one manifest naming both."""
        bs = self._bundle_store
        new_ref = self.put_structured_object(payload, partition, chunk_bytes, policy,
                                             config=config)
        try:
            old_m, new_m = bs.manifest(old_ref), bs.manifest(new_ref)
            old_meta, new_meta = self._structured.metadata(old_m), \
                self._structured.metadata(new_m)
            if old_meta.get("dataproto") != new_meta.get("dataproto"):
                raise ValueError("DataProto stage metadata mismatch during manifest merge")
            specs = dict(old_meta.get(STRUCTURED_FIELD_SPECS_KEY, {}))
            new_specs = new_meta.get(STRUCTURED_FIELD_SPECS_KEY, {})
            clash = sorted(set(specs) & set(new_specs)) or \
                sorted(set(old_m["buffers"]) & set(new_m["buffers"]))
            if clash:
                raise ValueError(f"structured members already exist: {clash}")
            specs.update(new_specs)
            merged_meta = dict(old_meta)
            merged_meta[STRUCTURED_FIELD_SPECS_KEY] = specs
            buffers = dict(old_m["buffers"])
            buffers.update(new_m["buffers"])
            cleanup = list(dict.fromkeys([
                *old_m.get("cleanup_keys", []), bs.manifest_key(old_ref, old_m),
                *[c["key"] for c in old_m["meta"]["chunks"]], bs.manifest_key(new_ref, new_m),
                *[c["key"] for c in new_m["meta"]["chunks"]]]))
            object_id = f"{partition}/{uuid.uuid4().hex}"
            meta_spec, _keys = bs.put_payload(
                f"{self.key_prefix}/{object_id}/meta",
                memoryview(_json_bytes(merged_meta, "structured metadata")),
                self._chunk(chunk_bytes if chunk_bytes is not None
                            else self.default_chunk_bytes), config)
            oids = {object_id, old_m["object_id"], new_m["object_id"],
                    *old_m.get("buffer_object_ids", [])}
            manifest = {"version": 1, "layout": "bundle", "object_id": object_id,
                        "meta": meta_spec, "buffers": buffers,
                        "buffer_object_ids": sorted(oids), "cleanup_keys": cleanup}
            bs.validate(manifest)
            merged = bs.put_manifest(manifest, config)
        except Exception:
            self.remove_bundle(new_ref)
            raise
        _cleanup(self.store, [bs.manifest_key(new_ref, new_m),
                              *[c["key"] for c in new_m["meta"]["chunks"]]], strict=False)
        # the new object's manifest and meta are gone now: keep them out of cleanup_keys
        return merged

    def _get(self, ref: Any, fields: Optional[Sequence[str]], batch_fields: Any,
             non_tensor_fields: Any, meta_info_keys: Any, data_cls: Any,
             destinations: Optional[Mapping[str, Any]], rows: Any, flat: bool) -> Any:
        ref = _resolve_ref(ref)
        if fields is not None and (batch_fields is not None or non_tensor_fields is not None):
            raise ValueError("fields cannot be combined with batch_fields or non_tensor_fields")
        if fields is not None:
            names = list(fields)
        elif batch_fields is None and non_tensor_fields is None:
            names = list(ref.field_index)
        else:
            names = [*(batch_fields or []), *(non_tensor_fields or [])]
        missing = [n for n in names if n not in ref.field_index]
        if missing:
            raise KeyError(f"unknown DataProto fields: {missing}")
        index_rows: Optional[List[int]] = None
        row_slice: Optional[StructuredMemberSlice] = None
        if rows is not None:
            if isinstance(rows, StructuredMemberSlice):
                if rows.axis != 0:
                    raise ValueError("DataProto row slicing currently supports axis=0 only")
                _normalized_slice(rows, ref.batch_size)
                row_slice = rows
            elif isinstance(rows, slice):
                start, end, step = rows.indices(ref.batch_size)
                if step <= 0:
                    raise ValueError("DataProto row slicing step must be positive")
                row_slice = StructuredMemberSlice(0, start, end, step)
            elif _seq(rows) or isinstance(rows, np.ndarray):
                index_rows = []
                for i in rows:
                    if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
                        raise TypeError("DataProto row indices must be integers")
                    j = int(i) + (ref.batch_size if int(i) < 0 else 0)
                    if not 0 <= j < ref.batch_size:
                        raise IndexError(f"DataProto row index {i} out of range for "
                                         f"{ref.batch_size} rows")
                    index_rows.append(j)
            else:
                raise TypeError("DataProto rows must be a slice, StructuredMemberSlice, or row "
                                "index sequence")
        dest = destinations or {}
        batch: Dict[str, Any] = {}
        nt: Dict[str, Any] = {}
        for name in names:
            loc = ref.field_index[name]
            sref = ref.stage_refs[loc.stage]
            enc = ref.encoded_non_tensor.get(name) if loc.section == "non_tensor_batch" else None
            if enc is not None:
                members = list(enc["payload_members"].values())
                got = self.materialize(self.read_spec(sref).select_members(members)).objects
                payload = {p: got[m] for p, m in enc["payload_members"].items()}
                values = _decode_values(enc["codec"], payload, int(enc.get("rows",
                                                                           ref.batch_size)),
                                        enc.get("metadata"))
                if row_slice is not None:
                    s, e, st = _normalized_slice(row_slice, len(values))
                    values = values[s:e:st]
                elif index_rows is not None:
                    values = [values[i] for i in index_rows]
                nt[name] = values if flat else _object_array(values)
                continue
            spec = self.read_spec(sref).select_members([loc.member])
            if row_slice is not None:
                spec = spec.slice_member(loc.member, 0, row_slice.start, row_slice.end,
                                         row_slice.step)
            d = dest.get(name) if index_rows is None else None
            value = self.materialize_into(spec, {loc.member: d} if d is not None else None) \
                .objects[loc.member]
            if index_rows is not None:
                value = value[list(index_rows)] if isinstance(value, np.ndarray) or (
                    _torch is not None and isinstance(value, _torch.Tensor)) else \
                    [value[i] for i in index_rows]
                target = dest.get(name)
                if isinstance(target, np.ndarray):
                    target[...] = value
                    value = target
            (batch if loc.section == "batch" else nt)[name] = value
        meta = dict(ref.meta_info) if meta_info_keys is None else \
            {k: ref.meta_info[k] for k in meta_info_keys if k in ref.meta_info}
        return _build_result(batch, nt, meta, data_cls)
