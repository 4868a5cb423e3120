"""MooncakeConfig: the JSON configuration file read by Mooncake's clients.

``MooncakeConfig.load_from_env()`` reads the file named by
``MOONCAKE_CONFIG_PATH``; without it, the ``MOONCAKE_*`` environment
variables (``MOONCAKE_MASTER`` required). Keys: local_hostname,
metadata_server, global_segment_size, local_buffer_size (ints or "4GB"
strings), protocol, device_name, master_server_address. ``MOONCAKE_MASTER``,
``MOONCAKE_GLOBAL_SEGMENT_SIZE`` and ``MOONCAKE_LOCAL_BUFFER_SIZE`` override
the file, as in vllm-ascend.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Union

import crescent

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824  # 1 GiB


def _parse_size(value: Union[int, str, None], default: int) -> int:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ValueError(f"invalid size {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"invalid size {value!r}")
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return crescent.parse_size(str(value))
    except crescent.CrescentError as e:
        raise ValueError(f"invalid size {value!r}: {e.detail}") from None


@dataclass
class MooncakeConfig:
    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: str
    master_server_address: str
    extra: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_dict(config: Dict[str, Any]) -> "MooncakeConfig":
        known = {"local_hostname", "metadata_server", "global_segment_size",
                 "local_buffer_size", "protocol", "device_name", "master_server_address"}
        return MooncakeConfig(
            local_hostname=config.get("local_hostname") or "localhost",
            metadata_server=config.get("metadata_server") or "P2PHANDSHAKE",
            global_segment_size=_parse_size(config.get("global_segment_size"),
                                            DEFAULT_GLOBAL_SEGMENT_SIZE),
            local_buffer_size=_parse_size(config.get("local_buffer_size"),
                                          DEFAULT_LOCAL_BUFFER_SIZE),
            protocol=config.get("protocol") or "tcp",
            device_name=config.get("device_name") or "",
            master_server_address=config.get("master_server_address") or "",
            extra={k: v for k, v in config.items() if k not in known},
        )

    @staticmethod
    def from_file(file_path: str) -> "MooncakeConfig":
        with open(file_path, encoding="utf-8") as f:
            config = json.load(f)
        if not isinstance(config, dict):
            raise ValueError(f"{file_path}: expected a JSON object")
        cfg = MooncakeConfig.from_dict(config)
        cfg._apply_env_overrides()
        if not cfg.master_server_address:
            raise ValueError(f"{file_path}: master_server_address is required")
        return cfg

    @staticmethod
    def load_from_env() -> "MooncakeConfig":
        path: Optional[str] = os.getenv("MOONCAKE_CONFIG_PATH")
        if path:
            return MooncakeConfig.from_file(path)
        if not os.getenv("MOONCAKE_MASTER"):
            raise ValueError("The environment variable 'MOONCAKE_CONFIG_PATH' is not set "
                             "(nor MOONCAKE_MASTER).")
        cfg = MooncakeConfig.from_dict({
            "local_hostname": os.getenv("MOONCAKE_LOCAL_HOSTNAME"),
            "metadata_server": os.getenv("MOONCAKE_TE_META_DATA_SERVER"),
            "protocol": os.getenv("MOONCAKE_PROTOCOL"),
            "device_name": os.getenv("MOONCAKE_DEVICE"),
        })
        cfg._apply_env_overrides()
        return cfg

    def _apply_env_overrides(self) -> None:
        if os.getenv("MOONCAKE_MASTER"):
            self.master_server_address = os.environ["MOONCAKE_MASTER"]
        if os.getenv("MOONCAKE_GLOBAL_SEGMENT_SIZE"):
            self.global_segment_size = _parse_size(os.environ["MOONCAKE_GLOBAL_SEGMENT_SIZE"],
                                                   self.global_segment_size)
        if os.getenv("MOONCAKE_LOCAL_BUFFER_SIZE"):
            self.local_buffer_size = _parse_size(os.environ["MOONCAKE_LOCAL_BUFFER_SIZE"],
                                                 self.local_buffer_size)

    def setup_args(self) -> tuple:
        """The 7 positional arguments of MooncakeDistributedStore.setup()."""
        return (self.local_hostname, self.metadata_server, self.global_segment_size,
                self.local_buffer_size, self.protocol, self.device_name,
                self.master_server_address)
