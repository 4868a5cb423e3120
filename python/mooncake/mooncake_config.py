"""MooncakeConfig: the JSON configuration Mooncake's clients read, with Mooncake's
fields, defaults, parsing and validation.

Fields (in order, as the dataclass takes them positionally): local_hostname,
metadata_server, global_segment_size, local_buffer_size, protocol,
device_name, master_server_address, then enable_ssd_offload=False,
ssd_offload_path="", tenant_id="default", enable_client_http_server=False,
client_http_port=9300.

Validation (``__post_init__``, whatever constructed the object): protocol
must be a non-empty str and is lower-cased; a protocol outside Mooncake's
list only warns; negative sizes and empty local_hostname / metadata_server /
master_server_address raise ValueError.

``MooncakeConfig.from_file(path)`` reads a JSON object: local_hostname,
metadata_server and master_server_address must be present (ValueError
"Missing required config field: ..."); sizes are ints or strings like
"4gb" / "1.5 GB" / "512mb" (binary units), booleans may be strings such as
"true" / "off"; the file is used as it is, no environment variable
overrides it (as in Mooncake). ``MooncakeConfig.load_from_env()`` reads the
file named by MOONCAKE_CONFIG_PATH, or else builds the config from
MOONCAKE_MASTER (required), MOONCAKE_LOCAL_HOSTNAME ("localhost"),
MOONCAKE_TE_META_DATA_SERVER ("P2PHANDSHAKE"), MOONCAKE_GLOBAL_SEGMENT_SIZE,
MOONCAKE_LOCAL_BUFFER_SIZE, MOONCAKE_PROTOCOL ("tcp"), MOONCAKE_DEVICE,
MOONCAKE_OFFLOAD_ENABLED, MOONCAKE_OFFLOAD_FILE_STORAGE_PATH,
MOONCAKE_TENANT_ID, MOONCAKE_ENABLE_CLIENT_HTTP_SERVER and
MOONCAKE_CLIENT_HTTP_PORT.

enable_ssd_offload / ssd_offload_path open the client's SSD tier
(docs/disk-tier.md); crescent has no client HTTP server yet: the fields are
accepted here, and MooncakeDistributedStore.setup() refuses values that ask
for it (NOT_SUPPORTED, with the reason logged). ``setup_args()`` and
``setup_kwargs()`` (crescent additions) give setup()'s arguments.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

__all__ = ["MooncakeConfig", "DEFAULT_GLOBAL_SEGMENT_SIZE", "DEFAULT_LOCAL_BUFFER_SIZE"]

logger = logging.getLogger(__name__)

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824  # 1 GiB

# Longest suffixes first, so "mb" is not read as "b".
_UNITS = (("kb", 1 << 10), ("mb", 1 << 20), ("gb", 1 << 30), ("tb", 1 << 40),
          ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("t", 1 << 40), ("b", 1))

# Mooncake's transports and store modes: a hint for the warning, not a gate.
_KNOWN_PROTOCOLS = frozenset({
    "tcp", "rdma", "efa", "nvmeof", "nvlink", "musa", "nvlink_intra", "hip", "barex", "cxl",
    "ascend", "ub", "ubshmem", "maca", "sunrise_link", "rpc_only"})

_REQUIRED = ("local_hostname", "metadata_server", "master_server_address")

_TRUE = ("true", "1", "yes", "on", "enable")
_FALSE = ("false", "0", "no", "off", "disable")


def _parse_segment_size(value: Any) -> int:
    """An int, or a number with an optional binary unit ("4gb", "1.5 GB", "512")."""
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if not text:
            raise ValueError("Invalid segment size: empty string")
        for suffix, scale in _UNITS:
            if text.endswith(suffix):
                number = text[:-len(suffix)].strip()
                if not number:
                    raise ValueError(f"Invalid segment size: missing number before '{suffix}'")
                return int(float(number) * scale)
        return int(float(text))
    return int(value)


def _parse_bool(value: Any) -> bool:
    """A real bool, a number, or one of the usual words; anything else is an error."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if value is None:
        return False
    text = str(value).strip().lower()
    if not text or text in _FALSE:
        return False
    if text in _TRUE:
        return True
    raise ValueError(f"Invalid boolean value: {value!r}")


@dataclass
class MooncakeConfig:
    """Configuration of a Mooncake (crescent) store client; see the module docstring."""

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: Optional[str]
    master_server_address: str
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    tenant_id: str = "default"
    enable_client_http_server: bool = False
    client_http_port: int = 9300

    def __post_init__(self) -> None:
        if not isinstance(self.protocol, str) or not self.protocol.strip():
            raise ValueError(f"Invalid protocol: {self.protocol!r}. Protocol must be a "
                             "non-empty string, e.g. 'tcp' or 'rdma'.")
        self.protocol = self.protocol.strip().lower()
        if self.protocol not in _KNOWN_PROTOCOLS:
            logger.warning("Unrecognised protocol %r; passing it through unchanged. Known "
                           "protocols are: %s.", self.protocol, ", ".join(sorted(_KNOWN_PROTOCOLS)))
        for name in ("global_segment_size", "local_buffer_size"):
            if getattr(self, name) < 0:
                raise ValueError(f"Invalid {name}: {getattr(self, name)}. Size must be "
                                 "non-negative.")
        for name in _REQUIRED:
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"Config field {name!r} must be a non-empty string, "
                                 f"got {value!r}.")

    @staticmethod
    def from_file(file_path: str) -> "MooncakeConfig":
        """Load the config from a JSON file (no environment overrides)."""
        with open(file_path) as f:
            config = json.load(f)
        for name in _REQUIRED:
            if name not in config:
                raise ValueError(f"Missing required config field: {name}")
        path, tenant = config.get("ssd_offload_path"), config.get("tenant_id")
        return MooncakeConfig(
            local_hostname=config.get("local_hostname"),
            metadata_server=config.get("metadata_server"),
            global_segment_size=_parse_segment_size(
                config.get("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(
                config.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=config.get("protocol", "tcp"),
            device_name=config.get("device_name", ""),
            master_server_address=config.get("master_server_address"),
            enable_ssd_offload=_parse_bool(config.get("enable_ssd_offload", False)),
            ssd_offload_path=str(path) if path is not None else "",
            tenant_id=str(tenant) if tenant is not None else "default",
            enable_client_http_server=_parse_bool(config.get("enable_client_http_server", False)),
            client_http_port=int(config.get("client_http_port", 9300)),
        )

    @staticmethod
    def load_from_env() -> "MooncakeConfig":
        """The file named by MOONCAKE_CONFIG_PATH, else the MOONCAKE_* variables."""
        path = os.getenv("MOONCAKE_CONFIG_PATH")
        if path is not None:
            return MooncakeConfig.from_file(path)
        if not os.getenv("MOONCAKE_MASTER"):
            raise ValueError("Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor "
                             "'MOONCAKE_MASTER' is set.")
        env = os.getenv
        return MooncakeConfig(
            local_hostname=env("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata_server=env("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size=_parse_segment_size(
                env("MOONCAKE_GLOBAL_SEGMENT_SIZE", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(
                env("MOONCAKE_LOCAL_BUFFER_SIZE", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=env("MOONCAKE_PROTOCOL", "tcp"),
            device_name=env("MOONCAKE_DEVICE", ""),
            master_server_address=env("MOONCAKE_MASTER"),
            enable_ssd_offload=_parse_bool(env("MOONCAKE_OFFLOAD_ENABLED", "false")),
            ssd_offload_path=env("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=env("MOONCAKE_TENANT_ID", "default"),
            enable_client_http_server=_parse_bool(
                env("MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "false")),
            client_http_port=int(env("MOONCAKE_CLIENT_HTTP_PORT", 9300)),
        )

    # --- crescent additions --------------------------------------------------------
    def setup_args(self) -> Tuple[Any, ...]:
        """The 7 positional arguments of MooncakeDistributedStore.setup()."""
        return (self.local_hostname, self.metadata_server, self.global_segment_size,
                self.local_buffer_size, self.protocol, self.device_name or "",
                self.master_server_address)

    def setup_kwargs(self) -> Dict[str, Any]:
        """setup()'s keyword arguments for the optional features."""
        return {"enable_ssd_offload": self.enable_ssd_offload,
                "ssd_offload_path": self.ssd_offload_path, "tenant_id": self.tenant_id,
                "enable_client_http_server": self.enable_client_http_server,
                "client_http_port": self.client_http_port}
