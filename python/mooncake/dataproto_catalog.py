"""mooncake.dataproto_catalog: logical rows and fields mapped to DataProto refs.

``DataProtoCatalog`` keeps metadata only (Mooncake's class of the same name):
partitions of logical keys, a tag dict per key, and for each of a key's
fields the (fragment id, row) it lives at, where a fragment is one
single-stage DataProto handle (mooncake.structured_object_store) whose
manifest key is its id. Data movement and object lifetime stay with
MooncakeBundleTransfer and the store. Fragments are reference-counted by
the (key, field) locations that use them and dropped with the last one.

Calls on one catalog must be serialised by its owner (it takes no lock),
as Mooncake's.

* ``update(partition, keys, *, tags=None, handle=None)`` merges per-key tags
  and/or publishes every field of a single-stage handle whose batch size is
  len(keys) (row i = keys[i]); returns {"keys", "tags", "fields"}.
* ``resolve(partition, keys, fields=None)`` -> {"keys", "tags", "fields",
  "field_groups": [{"fields", "locations": [(fragment, row)...]}],
  "handles": {fragment: handle}}; unknown keys, or fields a key lacks, raise
  ValueError.
* ``list(partition=None)`` -> {partition: {key: tag}}.
* ``remove(partition, keys)`` drops keys (metadata only).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["DataProtoCatalog"]


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def _names(values: Any, label: str) -> Tuple[str, ...]:
    if isinstance(values, str):
        raise ValueError(f"{label} must be a sequence of non-empty strings")
    out = tuple(values)
    if not out or any(not isinstance(v, str) or not v for v in out):
        raise ValueError(f"{label} must be non-empty strings")
    if len(out) != len(set(out)):
        raise ValueError(f"{label} must be unique")
    return out


def _tags(tags: Optional[Sequence[Mapping[str, Any]]], count: int) -> Optional[List[dict]]:
    if tags is None:
        return None
    if len(tags) != count:
        raise ValueError("tags must have the same length as keys")
    if any(not isinstance(t, Mapping) for t in tags):
        raise TypeError("tags must be mappings")
    return [copy.deepcopy(dict(t)) for t in tags]


def _fragment(handle: Mapping[str, Any], rows: int) -> Tuple[str, dict, Tuple[str, ...]]:
    """(fragment id, normalised handle, field names) of a single-stage handle."""
    from mooncake.structured_object_store import export_dataproto_ref, import_dataproto_ref

    ref = import_dataproto_ref(handle)
    if ref.batch_size != rows:
        raise ValueError(f"DataProto batch size {ref.batch_size!r} does not match {rows} "
                         "logical keys")
    if len(ref.stage_refs) != 1:
        raise ValueError("catalog fragments must contain exactly one DataProto stage")
    fragment_id = _text(next(iter(ref.stage_refs.values())).manifest_key, "manifest_key")
    fields = _names(ref.field_index, "field names")
    if not fields:
        raise ValueError("DataProto catalog fragments cannot be empty")
    return fragment_id, export_dataproto_ref(ref), fields


class DataProtoCatalog:
    """Map logical rows and fields to immutable DataProto refs (see the module docstring)."""

    def __init__(self) -> None:
        self._partitions: Dict[str, Dict[str, Dict[str, Any]]] = {}
        self._fragments: Dict[str, Dict[str, Any]] = {}
        self._fragment_refcounts: Dict[str, int] = {}

    def update(self, partition: str, keys: Sequence[str], *,
               tags: Optional[Sequence[Mapping[str, Any]]] = None,
               handle: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        partition = _text(partition, "partition")
        keys = _names(keys, "keys")
        new_tags = _tags(tags, len(keys))
        fragment = _fragment(handle, len(keys)) if handle is not None else None
        if new_tags is None and fragment is None:
            raise ValueError("catalog update requires tags or a DataProto handle")
        if fragment is not None:
            fid, stored, _fields = fragment
            known = self._fragments.get(fid)
            if known is not None and known != stored:
                raise ValueError(f"DataProto fragment id collision: {fid!r}")
        current = self._partitions.get(partition, {})
        merged, reply_tags = {}, []
        for row, key in enumerate(keys):
            tag = copy.deepcopy(current.get(key, {"tag": {}})["tag"])
            if new_tags is not None:
                tag.update(new_tags[row])
            merged[key] = tag
            reply_tags.append(copy.deepcopy(tag))
        entries = self._partitions.setdefault(partition, {})
        if fragment is not None:
            self._fragments.setdefault(fid, stored)
            self._fragment_refcounts.setdefault(fid, 0)
        for row, key in enumerate(keys):
            entry = entries.setdefault(key, {"tag": {}, "fields": {}})
            entry["tag"] = merged[key]
            if fragment is None:
                continue
            for name in fragment[2]:
                location = (fid, row)
                old = entry["fields"].get(name)
                if old == location:
                    continue
                if old is not None and old[0] == fid:  # same fragment, another row
                    entry["fields"][name] = location
                    continue
                if old is not None:
                    self._unref(old[0])
                entry["fields"][name] = location
                self._fragment_refcounts[fid] += 1
        return {"keys": list(keys), "tags": reply_tags, "fields": self._field_union(entries,
                                                                                     keys)}

    def resolve(self, partition: str, keys: Sequence[str],
                fields: Optional[Sequence[str]] = None) -> Dict[str, Any]:
        partition = _text(partition, "partition")
        keys = _names(keys, "keys")
        entries = self._partitions.get(partition, {})
        missing = [k for k in keys if k not in entries]
        if missing:
            raise ValueError(f"keys were not found in partition {partition!r}: {missing}")
        selected = list(_names(fields, "field names")) if fields is not None \
            else self._field_union(entries, keys)
        if not selected:
            raise ValueError("requested keys do not contain any fields")
        for key in keys:
            lacking = [f for f in selected if f not in entries[key]["fields"]]
            if lacking:
                raise ValueError(f"fields are not ready for key {key!r}: {lacking}")
        groups: Dict[tuple, List[str]] = {}
        used = set()
        for name in selected:
            locations = tuple(entries[k]["fields"][name] for k in keys)
            groups.setdefault(locations, []).append(name)
            used.update(loc[0] for loc in locations)
        return {"keys": list(keys),
                "tags": [copy.deepcopy(entries[k]["tag"]) for k in keys],
                "fields": selected,
                "field_groups": [{"fields": names, "locations": list(locations)}
                                 for locations, names in groups.items()],
                "handles": {fid: copy.deepcopy(self._fragments[fid]) for fid in used}}

    def list(self, partition: Optional[str] = None) -> Dict[str, Dict[str, Any]]:
        if partition is not None:
            partition = _text(partition, "partition")
            chosen = [partition] if partition in self._partitions else []
        else:
            chosen = list(self._partitions)
        return {p: {k: copy.deepcopy(e["tag"]) for k, e in self._partitions[p].items()}
                for p in chosen}

    def remove(self, partition: str, keys: Sequence[str]) -> None:
        partition = _text(partition, "partition")
        keys = _names(keys, "keys")
        entries = self._partitions.get(partition)
        if entries is None:
            return
        for key in keys:
            entry = entries.pop(key, None)
            if entry is None:
                continue
            for fid, _row in entry["fields"].values():
                self._unref(fid)
        if not entries:
            del self._partitions[partition]

    @staticmethod
    def _field_union(entries: Mapping[str, Mapping[str, Any]], keys: Sequence[str]) -> List[str]:
        return list(dict.fromkeys(f for k in keys for f in entries[k]["fields"]))

    def _unref(self, fid: str) -> None:
        left = self._fragment_refcounts[fid] - 1
        if left:
            self._fragment_refcounts[fid] = left
            return
        del self._fragment_refcounts[fid]
        del self._fragments[fid]
