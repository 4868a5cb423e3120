"""ReplicateConfig and SoftPinAction: how a put places its replicas.

The field names, defaults and type checks follow Mooncake's
``mooncake.store.ReplicateConfig`` so one class serves both the native
``crescent`` API and the ``mooncake`` drop-in. The extension reads the
fields by name at every put, so any object with these attributes works.
"""

from __future__ import annotations

import enum
from typing import Iterable, List, Optional

__all__ = ["ReplicateConfig", "SoftPinAction"]

_DATA_TYPE_MAX = 9  # ObjectDataType: UNKNOWN (0) .. GENERAL (9)


class SoftPinAction(enum.IntEnum):
    """What a put does to an object's soft pin (Mooncake's SoftPinAction)."""

    PRESERVE = 0  #: keep the existing soft-pin deadline
    ENABLE = 1  #: soft-pin for soft_pin_ttl_ms (or the master's default)
    DISABLE = 2  #: clear the soft pin


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"ReplicateConfig.{name} must be bool, not {type(value).__name__}")
    return value


_U64_LIMIT = 1 << 64


def _check_u64(name: str, value: object) -> int:
    """An unsigned 64-bit field, as Mooncake's bindings (pybind11 size_t /
    uint64_t) take it: anything but an int in [0, 2**64) is a TypeError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"ReplicateConfig.{name} must be an int, not {type(value).__name__}")
    if not 0 <= value < _U64_LIMIT:
        raise TypeError(f"ReplicateConfig.{name} must be in [0, 2**64), not {value}")
    return int(value)


def _check_str_list(name: str, value: object) -> List[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"ReplicateConfig.{name} must be a list of str")
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"ReplicateConfig.{name} items must be str, not {type(item).__name__}")
    return items


class ReplicateConfig:
    """Replica placement of a put.

    Attributes (Mooncake's names and defaults):
      replica_num: int = 1 -- memory replicas, each on a distinct segment
        (best effort).
      with_hard_pin: bool = False -- never evicted.
      soft_pin_action: SoftPinAction = PRESERVE.
      soft_pin_ttl_ms: int | None = None -- only with ENABLE (a put with a
        ttl and another action fails with INVALID_PARAMS, -600).
      preferred_segment: str = "" -- deprecated single preferred segment;
        wins over preferred_segments when non-empty.
      preferred_segments: list[str] = [] -- segment names (a store's
        get_hostname()) tried first.
      prefer_alloc_in_same_node: bool = False -- place the single replica in
        this client's segment.
      group_ids: list[str] | None = None -- per-key object groups (one entry
        per key of a batch; "" = ungrouped). The mooncake package places the
        members of a group on one segment (see mooncake.store).
      nof_replica_num: int = 0, dfs_replica_num: int = 0 -- replicas on
        NVMe-oF SSDs / a DFS; crescent has neither tier, so a put asking for
        them is refused with NOT_SUPPORTED (-1012).
      preferred_nof_segments: list[str] = [] -- NoF placement preference;
        only meaningful with nof_replica_num.

    Integer fields take ints in [0, 2**64) only; anything else (negative,
    too large, not an int) raises TypeError, as Mooncake's bindings do.
    """

    __slots__ = ("_replica_num", "_nof_replica_num", "_dfs_replica_num", "_with_hard_pin",
                 "_soft_pin_action", "_soft_pin_ttl_ms", "_preferred_segment",
                 "_preferred_segments", "_preferred_nof_segments",
                 "_prefer_alloc_in_same_node", "_group_ids", "_data_type")

    def __init__(self) -> None:
        self._replica_num = 1
        self._nof_replica_num = 0
        self._dfs_replica_num = 0
        self._preferred_nof_segments: List[str] = []
        self._with_hard_pin = False
        self._soft_pin_action = SoftPinAction.PRESERVE
        self._soft_pin_ttl_ms: Optional[int] = None
        self._preferred_segment = ""
        self._preferred_segments: List[str] = []
        self._prefer_alloc_in_same_node = False
        self._group_ids: Optional[List[str]] = None
        self._data_type = 0

    # -- replica count and pins ------------------------------------------------
    @property
    def replica_num(self) -> int:
        return self._replica_num

    @replica_num.setter
    def replica_num(self, value: int) -> None:
        self._replica_num = _check_u64("replica_num", value)

    @property
    def nof_replica_num(self) -> int:
        return self._nof_replica_num

    @nof_replica_num.setter
    def nof_replica_num(self, value: int) -> None:
        self._nof_replica_num = _check_u64("nof_replica_num", value)

    @property
    def dfs_replica_num(self) -> int:
        return self._dfs_replica_num

    @dfs_replica_num.setter
    def dfs_replica_num(self, value: int) -> None:
        self._dfs_replica_num = _check_u64("dfs_replica_num", value)

    @property
    def with_hard_pin(self) -> bool:
        return self._with_hard_pin

    @with_hard_pin.setter
    def with_hard_pin(self, value: bool) -> None:
        self._with_hard_pin = _check_bool("with_hard_pin", value)

    @property
    def soft_pin_action(self) -> SoftPinAction:
        return self._soft_pin_action

    @soft_pin_action.setter
    def soft_pin_action(self, value: SoftPinAction) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("ReplicateConfig.soft_pin_action must be a SoftPinAction, "
                            f"not {type(value).__name__}")
        self._soft_pin_action = SoftPinAction(value)

    @property
    def soft_pin_ttl_ms(self) -> Optional[int]:
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, value: Optional[int]) -> None:
        self._soft_pin_ttl_ms = None if value is None else _check_u64("soft_pin_ttl_ms", value)

    @property
    def with_soft_pin(self) -> bool:
        """Legacy boolean view of soft_pin_action (True means ENABLE)."""
        return self._soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, value: bool) -> None:
        _check_bool("with_soft_pin", value)
        self._soft_pin_action = SoftPinAction.ENABLE if value else SoftPinAction.PRESERVE

    # -- placement ----------------------------------------------------------------
    @property
    def preferred_segment(self) -> str:
        return self._preferred_segment

    @preferred_segment.setter
    def preferred_segment(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError("ReplicateConfig.preferred_segment must be str, "
                            f"not {type(value).__name__}")
        self._preferred_segment = value

    @property
    def preferred_segments(self) -> List[str]:
        return self._preferred_segments

    @preferred_segments.setter
    def preferred_segments(self, value: List[str]) -> None:
        self._preferred_segments = _check_str_list("preferred_segments", value)

    @property
    def preferred_nof_segments(self) -> List[str]:
        return self._preferred_nof_segments

    @preferred_nof_segments.setter
    def preferred_nof_segments(self, value: List[str]) -> None:
        self._preferred_nof_segments = _check_str_list("preferred_nof_segments", value)

    @property
    def prefer_alloc_in_same_node(self) -> bool:
        return self._prefer_alloc_in_same_node

    @prefer_alloc_in_same_node.setter
    def prefer_alloc_in_same_node(self, value: bool) -> None:
        self._prefer_alloc_in_same_node = _check_bool("prefer_alloc_in_same_node", value)

    @property
    def group_ids(self) -> Optional[List[str]]:
        return self._group_ids

    @group_ids.setter
    def group_ids(self, value: Optional[List[str]]) -> None:
        self._group_ids = None if value is None else _check_str_list("group_ids", value)

    @property
    def data_type(self) -> int:
        """Object data-type tag (Mooncake's ObjectDataType); informational only."""
        return self._data_type

    @data_type.setter
    def data_type(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("ReplicateConfig.data_type must be an ObjectDataType, "
                            f"not {type(value).__name__}")
        if not 0 <= value <= _DATA_TYPE_MAX:
            raise TypeError(f"ReplicateConfig.data_type {value} is not an ObjectDataType "
                            f"(0..{_DATA_TYPE_MAX})")
        self._data_type = int(value)

    # -- helpers --------------------------------------------------------------------
    def unsupported(self) -> Optional[str]:
        """Why a put with this config asks for a tier crescent lacks (refused
        with NOT_SUPPORTED, -1012), or None."""
        if self._nof_replica_num:
            return (f"nof_replica_num={self._nof_replica_num}: crescent has no NVMe-oF SSD "
                    "tier (memory replicas only)")
        if self._dfs_replica_num:
            return (f"dfs_replica_num={self._dfs_replica_num}: crescent has no DFS tier "
                    "(memory replicas only)")
        return None

    def validate(self, n_keys: Optional[int] = None) -> Optional[str]:
        """Return why this config would be refused with INVALID_PARAMS, or None."""
        if (self._soft_pin_ttl_ms is not None
                and self._soft_pin_action != SoftPinAction.ENABLE):
            return "soft_pin_ttl_ms is only valid with SoftPinAction.ENABLE"
        if self._prefer_alloc_in_same_node and self._replica_num != 1:
            return "prefer_alloc_in_same_node needs replica_num == 1"
        if n_keys is not None and self._group_ids is not None and len(self._group_ids) != n_keys:
            return f"group_ids has {len(self._group_ids)} entries for {n_keys} keys"
        return None

    def __repr__(self) -> str:
        return self.__str__()

    def __str__(self) -> str:
        # Mooncake's operator<< layout (bools as 0/1, as a C++ stream prints them).
        ttl = "default" if self._soft_pin_ttl_ms is None else str(self._soft_pin_ttl_ms)
        text = ("ReplicateConfig: { replica_num: %d, nof_replica_num: %d, dfs_replica_num: %d, "
                "soft_pin_action: %s, soft_pin_ttl_ms: %s, with_hard_pin: %d, "
                "preferred_segments: [%s]"
                % (self._replica_num, self._nof_replica_num, self._dfs_replica_num,
                   self._soft_pin_action.name, ttl, int(self._with_hard_pin),
                   ", ".join(self._preferred_segments)))
        if self._preferred_segment:
            text += ", preferred_segment (deprecated): " + self._preferred_segment
        text += ", preferred_nof_segments: [%s], prefer_alloc_in_same_node: %d, data_type: %d" % (
            ", ".join(self._preferred_nof_segments), int(self._prefer_alloc_in_same_node),
            self._data_type)
        if self._group_ids is not None:
            text += ", group_ids: [%s]" % ", ".join(self._group_ids)
        return text + " }"

    def copy(self) -> "ReplicateConfig":
        """A field-by-field copy."""
        c = ReplicateConfig()
        for slot in self.__slots__:
            v = getattr(self, slot)
            object.__setattr__(c, slot, list(v) if isinstance(v, list) else v)
        return c

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReplicateConfig):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]
