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


class SoftPinAction(enum.IntEnum):
    """What a put does to an object's soft pin (Mooncake's SoftPinAction)."""

    PRESERVE = 0  #: keep the existing soft-pin deadline
    ENABLE = 1  #: soft-pin for soft_pin_ttl_ms (or the master's default)
    DISABLE = 2  #: clear the soft pin


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"ReplicateConfig.{name} must be bool, not {type(value).__name__}")
    return value


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
      group_ids: list[str] | None = None -- per-key routing groups; accepted
        and length-checked, placement ignores them.
    """

    __slots__ = ("_replica_num", "_with_hard_pin", "_soft_pin_action", "_soft_pin_ttl_ms",
                 "_preferred_segment", "_preferred_segments", "_prefer_alloc_in_same_node",
                 "_group_ids", "_data_type")

    def __init__(self) -> None:
        self._replica_num = 1
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
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"ReplicateConfig.replica_num must be int, not {type(value).__name__}")
        if value < 0:
            raise ValueError("ReplicateConfig.replica_num must not be negative")
        self._replica_num = value

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
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError("ReplicateConfig.soft_pin_ttl_ms must be int or None, "
                                f"not {type(value).__name__}")
            if value < 0:
                raise ValueError("ReplicateConfig.soft_pin_ttl_ms must not be negative")
        self._soft_pin_ttl_ms = value

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
            raise TypeError("ReplicateConfig.data_type must be int")
        self._data_type = int(value)

    # -- helpers --------------------------------------------------------------------
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
        return ("ReplicateConfig: { replica_num: %d, with_hard_pin: %s, soft_pin_action: %s, "
                "soft_pin_ttl_ms: %s, preferred_segment: %r, preferred_segments: %r, "
                "prefer_alloc_in_same_node: %s, group_ids: %r }"
                % (self._replica_num, self._with_hard_pin, self._soft_pin_action.name,
                   self._soft_pin_ttl_ms, self._preferred_segment, self._preferred_segments,
                   self._prefer_alloc_in_same_node, self._group_ids))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReplicateConfig):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]
