"""mooncake.store on crescent: a drop-in for Mooncake's ``mooncake.store``.

``MooncakeDistributedStore`` keeps Mooncake's method names, positional and
keyword argument names, defaults and return conventions (see
docs of Mooncake's ``store_py.cpp``):

* scalar operations return ``int``: 0 (or a size / count) on success, a
  negative Mooncake ErrorCode on failure (crescent's store codes are the same
  numbers: -200 no space, -600 invalid params, -704 not found, -706 leased);
* ``is_exist`` returns 1 / 0 / negative, ``batch_is_exist`` a list of those;
* ``get`` returns ``b""`` on a miss or any error; ``get_buffer`` ``None``;
* batch calls return one int per key; ``batch_get_buffer`` a ``BufferHandle``
  or ``None`` per key; ``put_batch`` a single int;
* a wrong argument *type* raises ``TypeError`` (pybind11 does too), an
  unknown keyword raises ``TypeError`` naming it (SGLang relies on that).

The work is done by ``crescent._crescent.Store`` (C, GIL released). An
``engine=`` passed to ``setup`` (a ``mooncake.engine.TransferEngine`` or a
``crescent.Engine``) is shared: the store registers its memory with that
engine and moves its bytes through it; the engine refuses ``close()`` while
the store uses it. Without one, the store creates its own engine.

Beyond the core calls the class has Mooncake's tensor family (``put_tensor``,
``get_tensor``, ``*_with_tp``, ``*_tensor_into``, ``*_tensor_from``,
safetensors files; see ``mooncake._tensor_api`` and the byte layout in
``mooncake.tensor_format``), ``get_into_ranges`` (ranged gather),
``batch_replica_clear`` and ``get_offload_rpc_read_count``.

Replica locations (``get_replica_desc`` / ``batch_get_replica_desc``) and
``batch_replica_clear`` use the master's client protocol (QUERY_KEY and
BATCH_REPLICA_CLEAR), so they need no other endpoint.
"""

from __future__ import annotations

import ctypes
import logging
import operator
import os
import threading
import time
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import crescent
from crescent import _crescent
from crescent._config import ReplicateConfig, SoftPinAction

from . import _util
from ._tensor_api import ParallelAxis, ReadTarget, TensorMixin, TensorParallelism
from .buffer_pool import BufferPool

__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction", "BufferHandle",
           "MooncakeHostMemAllocator", "ReplicaDescriptor", "ReplicaStatus", "ReplicaType",
           "ObjectDataType", "ParallelAxis", "TensorParallelism", "ReadTarget",
           "MemoryDescriptor", "DiskDescriptor", "Descriptor", "BufferPool"]

log = logging.getLogger("mooncake")
_util.apply_log_env()

BufferHandle = _crescent.BufferHandle
CrescentError = _crescent.CrescentError

# Mooncake ErrorCode values used here.
_INTERNAL_ERROR = -1
_BUFFER_OVERFLOW = -10
_INVALID_PARAMS = -600
_OBJECT_NOT_FOUND = -704
_NOT_SUPPORTED = -1012
_SEGMENT_EXISTS = -102
_INVALID_REPLICA = -702
_ERR_BIND = -3023
_SETUP_RETRIES = 20  # default of MC_STORE_CLIENT_SETUP_RETRIES
_U64 = 1 << 64

_KIB = 1024
_TIB = 1024 ** 4
_STAGING_MIN = 4096  # crescent's smallest local buffer


class ReplicaStatus:
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class ReplicaType:
    MEMORY = 0
    DISK = 1
    LOCAL_DISK = 2
    NOF_SSD = 3
    ALL = 4
    DFS = 100


class ObjectDataType:
    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class Descriptor:
    """A buffer a memory replica occupies (Mooncake's AllocatedBuffer::Descriptor):
    size, buffer_address (in the segment's owner's address space) and
    transport_endpoint (the segment name peers open)."""

    def __init__(self) -> None:
        self.size = 0
        self.buffer_address = 0
        self.transport_endpoint = ""

    def __repr__(self) -> str:
        return (f"<Descriptor size={self.size} buffer_address={self.buffer_address} "
                f"transport_endpoint={self.transport_endpoint}>")


class MemoryDescriptor:
    """The descriptor of a memory replica: buffer_descriptor (a Descriptor)."""

    def __init__(self, buffer_descriptor: Optional[Descriptor] = None) -> None:
        self.buffer_descriptor = buffer_descriptor if buffer_descriptor is not None \
            else Descriptor()


class DiskDescriptor:
    """The descriptor of a disk replica (file_path, object_size). crescent has
    no disk tier yet, so no replica carries one."""

    def __init__(self) -> None:
        self.file_path = ""
        self.object_size = 0


class ReplicaDescriptor:
    """Where one replica lives. crescent keeps every replica in memory.

    Mooncake's methods: is_memory_replica() / is_disk_replica() /
    is_local_disk_replica(), get_memory_descriptor() (a MemoryDescriptor
    whose buffer_descriptor has size, buffer_address and transport_endpoint)
    and get_disk_descriptor(), which raises RuntimeError("Expected
    DiskDescriptor") for a memory replica as Mooncake's does. crescent
    extras: segment_name, replica_type.
    """

    def __init__(self, segment_name: str = "", status: int = ReplicaStatus.COMPLETE,
                 address: int = 0, size: int = 0) -> None:
        self.segment_name = segment_name
        self.status = status
        self.replica_type = ReplicaType.MEMORY
        d = Descriptor()
        d.size, d.buffer_address, d.transport_endpoint = size, address, segment_name
        self._memory = MemoryDescriptor(d)

    def is_memory_replica(self) -> bool:
        return True

    def is_disk_replica(self) -> bool:
        return False

    def is_local_disk_replica(self) -> bool:
        return False

    def get_memory_descriptor(self) -> MemoryDescriptor:
        return self._memory

    def get_disk_descriptor(self) -> DiskDescriptor:
        raise RuntimeError("Expected DiskDescriptor")

    def __repr__(self) -> str:
        return f"ReplicaDescriptor(memory, segment={self.segment_name!r}, status={self.status})"


class MooncakeHostMemAllocator:
    """Host memory for standalone mode: shareable memory from crescent."""

    def alloc(self, size: int) -> int:
        try:
            return crescent.alloc_shared(size)
        except CrescentError:
            return 0

    def free(self, ptr: int) -> int:
        try:
            crescent.free_shared(ptr)
            return 0
        except CrescentError as e:
            return e.code


def _addr(x: Any, what: str = "buffer_ptr") -> int:
    """An address argument: int (or __index__) or an object with data_ptr()."""
    if x is None or isinstance(x, bool):
        raise TypeError(f"{what} must be an int address, not {type(x).__name__}")
    if isinstance(x, int):
        v = x
    elif hasattr(x, "data_ptr"):
        v = int(x.data_ptr())
    else:
        try:
            v = operator.index(x)
        except TypeError:
            raise TypeError(f"{what} must be an int address, not {type(x).__name__}") from None
    if v < 0:
        raise ValueError(f"{what} must not be negative")
    return v


def _size(x: Any, what: str = "size") -> int:
    if x is None or isinstance(x, bool):
        raise TypeError(f"{what} must be an int, not {type(x).__name__}")
    try:
        v = operator.index(x)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(x).__name__}") from None
    if v < 0:
        raise ValueError(f"{what} must not be negative")
    return v


def _byte_size(value: Any, what: str) -> int:
    """Sizes as Mooncake's setup accepts them: int, or "4GB"-style strings."""
    if isinstance(value, bool) or value is None:
        raise TypeError(f"{what} must be an int or a size string")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what} must not be negative")
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == "infinite":
            return 2 ** 64 - 1
        return crescent.parse_size(text)
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    raise TypeError(f"{what} must be an int or a size string, not {type(value).__name__}")


def _check_config(config: Any) -> None:
    if config is not None and not isinstance(config, ReplicateConfig):
        raise TypeError("config must be a ReplicateConfig, not " + type(config).__name__)


def _config_error(config: Optional[ReplicateConfig], n_keys: Optional[int] = None,
                  plain_put: bool = False) -> Optional[Tuple[int, str]]:
    """(code, why) when a put with this config is refused, else None."""
    if config is None:
        return None
    unsupported = getattr(config, "unsupported", None)
    why = unsupported() if unsupported is not None else None
    if why:
        return _NOT_SUPPORTED, why
    if plain_put and config.prefer_alloc_in_same_node:
        return _INVALID_PARAMS, "prefer_alloc_in_same_node is not accepted by put/put_batch"
    why = config.validate(n_keys)
    return (_INVALID_PARAMS, why) if why else None


def _u64(v: Any, what: str) -> int:
    """An address / size / offset argument of the session API: an int in
    [0, 2**64) (or an object with data_ptr()); TypeError otherwise, as
    pybind11's conversion to uintptr_t / size_t raises."""
    if isinstance(v, bool) or v is None:
        raise TypeError(f"{what} must be an int, not {type(v).__name__}")
    if not isinstance(v, int):
        if hasattr(v, "data_ptr"):
            v = int(v.data_ptr())
        else:
            try:
                v = operator.index(v)
            except TypeError:
                raise TypeError(f"{what} must be an int, not {type(v).__name__}") from None
    if not 0 <= v < _U64:
        raise TypeError(f"{what} must be in [0, 2**64), not {v}")
    return v


def _str_keys(keys: Any) -> List[str]:
    if isinstance(keys, (str, bytes)):
        raise TypeError("keys must be a list of str")
    out = list(keys)
    for k in out:
        if not isinstance(k, str):
            raise TypeError(f"keys must be str, not {type(k).__name__}")
    return out


class _GroupPlacement:
    """Mooncake's ReplicateConfig.group_ids, as crescent honours them: the
    members of one object group are placed on one segment.

    A group's segment is chosen by a stable hash of its id over the sorted
    names of the segments mounted at the master (cr_store_list_segments,
    cached for a second), so every client, and every later put, sends the
    members of a group to the same segment while the set of segments stays
    the same. It goes first in the put's preferred segments (the caller's
    own preferences follow); placement stays best effort (a full segment
    sends the member elsewhere). prefer_alloc_in_same_node wins over groups.
    An empty group id is "ungrouped". crescent's master has no group-wide
    lease refresh or eviction (Mooncake's lifecycle hints); groups change
    placement only.
    """

    _TTL = 1.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: List[str] = []
        self._at = 0.0

    def _segments(self, native: Any) -> List[str]:
        with self._lock:
            if time.monotonic() - self._at < self._TTL:
                return self._names
        try:
            names = sorted(native.list_segments())
        except CrescentError as e:
            log.warning("group placement: cannot list segments: %s", e)
            names = []
        with self._lock:
            self._names, self._at = names, time.monotonic()
        return names

    def split(self, native: Any, config: Optional[ReplicateConfig],
              n: int) -> List[Tuple[List[int], Optional[ReplicateConfig]]]:
        """Key positions per sub-batch and the config each goes with."""
        gids = getattr(config, "group_ids", None) if config is not None else None
        if not gids or n == 0 or config.prefer_alloc_in_same_node or \
                not any(g for g in gids[:n]):
            return [(list(range(n)), config)]
        names = self._segments(native)
        if not names:
            return [(list(range(n)), config)]
        buckets: Dict[Optional[str], List[int]] = {}
        for i in range(n):
            g = gids[i]
            target = names[zlib.crc32(g.encode()) % len(names)] if g else None
            buckets.setdefault(target, []).append(i)
        out: List[Tuple[List[int], Optional[ReplicateConfig]]] = []
        for target, idx in buckets.items():
            if target is None:
                out.append((idx, config))
                continue
            c = config.copy()
            prefs = [target] + ([config.preferred_segment] if config.preferred_segment
                                else list(config.preferred_segments))
            c.preferred_segment = ""
            c.preferred_segments = list(dict.fromkeys(p for p in prefs if p))
            c.group_ids = None
            out.append((idx, c))
        return out


def _read_code(v: int) -> int:
    """Mooncake reports a too-small destination as INVALID_PARAMS."""
    return _INVALID_PARAMS if v == _BUFFER_OVERFLOW else v


class _Required:
    def __repr__(self) -> str:
        return "<required>"


_REQUIRED: Any = _Required()

_SETUP_DICT_DEFAULTS = {
    "global_segment_size": 16 * 1024 * 1024,
    "local_buffer_size": 16 * 1024 * 1024,
    "protocol": "tcp",
    "rdma_devices": "",
    "master_server_addr": "127.0.0.1:50051",
    "enable_ssd_offload": False,
    "ssd_offload_path": "",
    "tenant_id": "default",
    "enable_client_http_server": False,
    "client_http_port": 9300,
}


def _missing_feature(enable_ssd_offload: Any, tenant_id: Any, enable_client_http_server: Any,
                     client_http_port: Any) -> Optional[str]:
    """Why setup() options ask for a feature crescent does not have yet, or None.
    The options themselves are accepted; only values that ask for the feature
    are refused (NOT_SUPPORTED), never silently ignored."""
    if tenant_id is not None and not isinstance(tenant_id, str):
        return f"tenant_id={tenant_id!r} is not a string"
    if enable_client_http_server:
        return (f"enable_client_http_server=True (client_http_port={client_http_port}): crescent "
                "has no client HTTP server yet; use the master's /metrics and /health")
    if isinstance(client_http_port, bool) or not isinstance(client_http_port, int) or \
            not 0 <= client_http_port <= 65535:
        return f"client_http_port={client_http_port!r} is not a port number"
    return None


class MooncakeDistributedStore(TensorMixin):
    """Client of the distributed KV store (crescent-master), Mooncake's API.

    Create it, call :meth:`setup`, then put/get. One object may be used by
    many threads; every blocking call releases the GIL.
    """

    def __init__(self) -> None:
        self._s: Optional[_crescent.Store] = None
        self._regs: Optional[_util.Registrations] = None
        self._lock = threading.Lock()
        self._engine: Any = None
        self._groups = _GroupPlacement()
        self._metrics: Optional[_util.MetricReporter] = None

    # ------------------------------------------------------------------ lifecycle
    def setup(self, local_hostname: Any = _REQUIRED, metadata_server: Any = _REQUIRED,
              global_segment_size: Any = _REQUIRED, local_buffer_size: Any = _REQUIRED,
              protocol: Any = _REQUIRED, rdma_devices: Any = _REQUIRED,
              master_server_addr: Any = _REQUIRED, engine: Any = None,
              enable_ssd_offload: bool = False, ssd_offload_path: str = "",
              tenant_id: str = "default", enable_client_http_server: bool = False,
              client_http_port: int = 9300) -> int:
        """setup(local_hostname, metadata_server, global_segment_size, local_buffer_size,
        protocol, rdma_devices, master_server_addr, engine=None, enable_ssd_offload=False,
        ssd_offload_path="", tenant_id="default", enable_client_http_server=False,
        client_http_port=9300) -> int

        Also ``setup(config: dict)`` with the same keys (sizes may be strings
        like "4GB"; local_hostname and metadata_server required).

        Connects to the master at master_server_addr ("host:port"), contributes
        global_segment_size bytes and keeps local_buffer_size bytes for
        staging. Returns 0 or a negative ErrorCode. protocol "tcp" uses sockets
        only; "rdma" uses crescent's fastest available path (shared memory on
        one host, tcp between hosts). engine (a TransferEngine) is shared.
        A local_hostname without a port gets one from 12300..14300
        (MC_STORE_CLIENT_MIN_PORT / MC_STORE_CLIENT_MAX_PORT), as Mooncake's.
        tenant_id puts this client's keys in the tenant's namespace at the
        master (remove_by_regex / remove_all reach only them; "default" is
        the namespace of clients without one). enable_ssd_offload=True gives
        this client's segment a disk tier in ssd_offload_path (or
        MOONCAKE_OFFLOAD_FILE_STORAGE_PATH): evicted values move there and come
        back on a hit (the master needs --enable_offload). enable_client_http_server and client_http_port are
        accepted; enable_client_http_server=True asks for what crescent does
        not have yet and returns -1012 with the reason logged.
        """
        positional = (local_hostname, metadata_server, global_segment_size, local_buffer_size,
                      protocol, rdma_devices, master_server_addr)
        if isinstance(local_hostname, dict) and all(a is _REQUIRED for a in positional[1:]):
            return self._setup_dict(local_hostname)
        names = ("local_hostname", "metadata_server", "global_segment_size",
                 "local_buffer_size", "protocol", "rdma_devices", "master_server_addr")
        missing = [n for n, a in zip(names, positional) if a is _REQUIRED]
        if missing:
            raise TypeError("setup() missing required argument(s): " + ", ".join(missing))
        for name, value in (("local_hostname", local_hostname),
                            ("metadata_server", metadata_server), ("protocol", protocol),
                            ("rdma_devices", rdma_devices),
                            ("master_server_addr", master_server_addr)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"setup(): {name} must be str, not {type(value).__name__}")
        return self._setup(local_hostname, metadata_server, global_segment_size,
                           local_buffer_size, protocol, rdma_devices, master_server_addr,
                           engine, enable_ssd_offload, ssd_offload_path, tenant_id,
                           enable_client_http_server, client_http_port)

    def _setup_dict(self, cfg: Dict[str, Any]) -> int:
        for key in ("local_hostname", "metadata_server"):
            if key not in cfg:
                log.error("setup(config): missing required key '%s'", key)
                return _INVALID_PARAMS
        merged = dict(_SETUP_DICT_DEFAULTS)
        merged.update(cfg)
        try:
            gss = _byte_size(str(merged["global_segment_size"]), "global_segment_size")
            lbs = _byte_size(str(merged["local_buffer_size"]), "local_buffer_size")
        except (CrescentError, TypeError, ValueError) as e:
            log.error("setup(config): %s", e)
            return _INVALID_PARAMS
        flag = lambda v: str(v).strip().lower() in ("1", "true", "yes", "on")  # noqa: E731
        return self._setup(str(merged["local_hostname"]), str(merged["metadata_server"]), gss,
                           lbs, str(merged["protocol"]), str(merged["rdma_devices"]),
                           str(merged["master_server_addr"]), merged.get("engine"),
                           flag(merged["enable_ssd_offload"]), str(merged["ssd_offload_path"]),
                           str(merged["tenant_id"]), flag(merged["enable_client_http_server"]),
                           merged["client_http_port"])

    def _setup(self, local_hostname, metadata_server, global_segment_size, local_buffer_size,
               protocol, rdma_devices, master_server_addr, engine, enable_ssd_offload,
               ssd_offload_path, tenant_id, enable_client_http_server,
               client_http_port) -> int:
        try:
            gss = _byte_size(global_segment_size, "global_segment_size")
            lbs = _byte_size(local_buffer_size, "local_buffer_size")
        except CrescentError as e:  # an unparsable size string
            log.error("setup: %s", e)
            return _INVALID_PARAMS
        if gss != 0 and gss < _KIB:
            log.error("setup: global_segment_size %d is below 1 KiB", gss)
            return _INVALID_PARAMS
        if lbs != 0 and not _KIB <= lbs <= _TIB:
            log.error("setup: local_buffer_size %d is outside [1 KiB, 1 TiB]", lbs)
            return _INVALID_PARAMS
        if lbs:
            lbs = max(lbs, _STAGING_MIN)
        why = _missing_feature(enable_ssd_offload, tenant_id, enable_client_http_server,
                               client_http_port)
        if why:
            log.error("setup: %s", why)
            return _NOT_SUPPORTED
        _util.check_env("store")
        proto, why = _util.engine_protocol(protocol)
        if proto is None:
            log.error("setup: %s", why)
            return _INVALID_PARAMS
        meta, why = _util.metadata_server(metadata_server)
        if meta is None:
            log.error("setup: %s", why)
            return _INVALID_PARAMS
        master = (master_server_addr or "").strip() or \
            os.environ.get("MOONCAKE_MASTER", "").strip() or "127.0.0.1:50051"
        if "://" in master and not master.startswith("etcd://"):
            log.error("setup: master '%s': give host:port, or etcd://h:p[,h:p] for an HA "
                      "master (its leader is found through etcd)", master)
            return _INVALID_PARAMS
        host = (local_hostname or "").strip() or "127.0.0.1"
        # A host without a port gets one from Mooncake's client port range
        # (MC_STORE_CLIENT_MIN_PORT..MC_STORE_CLIENT_MAX_PORT, 12300..14300), so
        # get_hostname() is "host:port" in it and firewalls open to that range
        # work; a port taken meanwhile is retried MC_STORE_CLIENT_SETUP_RETRIES
        # times. A shared engine keeps its own name.
        pick_port = not _util.has_port(host)
        native_engine = None
        if engine is not None:
            native_engine = getattr(engine, "_e", engine)
            if not isinstance(native_engine, _crescent.Engine):
                log.error("setup: engine must be an initialized TransferEngine, not %s",
                          type(engine).__name__)
                return _INVALID_PARAMS
            pick_port = False
        retries = _util.env_int("MC_STORE_CLIENT_SETUP_RETRIES", _SETUP_RETRIES, minimum=1) \
            if pick_port else 1
        lo, hi = _util.store_port_range() if pick_port else (0, 0)
        with self._lock:
            if self._s is not None:
                log.error("setup: this store is already set up; close() it first")
                return _INVALID_PARAMS
            s = None
            for attempt in range(retries):
                name = host
                if pick_port:
                    port = _util.pick_port(host, lo, hi)
                    if port == 0:
                        log.warning("setup: no free port in [%d, %d], retry %d/%d", lo, hi,
                                    attempt + 1, retries)
                        time.sleep(0.1)
                        continue
                    name = f"{host}:{port}"
                try:
                    s = _crescent.Store(name, meta, gss, lbs, proto, rdma_devices or "", master,
                                        transfer_timeout_ms=_util.transfer_timeout_ms(),
                                        engine=native_engine,
                                        tenant_id=tenant_id or None,
                                        enable_ssd_offload=bool(enable_ssd_offload),
                                        ssd_offload_path=ssd_offload_path or None)
                    break
                except CrescentError as e:
                    if pick_port and e.code in (_ERR_BIND, _SEGMENT_EXISTS) and \
                            attempt + 1 < retries:
                        log.warning("setup: port of %s taken, retry %d/%d", name, attempt + 1,
                                    retries)
                        continue
                    log.error("setup failed: %s", e)
                    return e.code
            if s is None:
                log.error("setup: no usable port in [%d, %d] after %d attempts", lo, hi,
                          retries)
                return _INTERNAL_ERROR
            self._s = s
            self._engine = engine
            self._regs = _util.Registrations(self._phys_register, self._phys_unregister)
            if engine is None and _util.MetricReporter.wanted():
                self._metrics = _util.MetricReporter(s.hostname, s.engine_stats)
        return 0

    def _phys_register(self, addr: int, size: int) -> int:
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            s.register_buffer(addr, size)
            return 0
        except CrescentError as e:
            return e.code

    def _phys_unregister(self, addr: int) -> int:
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            s.unregister_buffer(addr)
            return 0
        except CrescentError as e:
            return e.code

    def setup_dummy(self, mem_pool_size: int, local_buffer_size: int,
                    server_address: str) -> int:
        """setup_dummy(mem_pool_size, local_buffer_size, server_address) -> int

        Become a thin ("dummy") client of the standalone store client
        (crescent-client / mooncake_client) on this host at server_address
        ("host:port", the daemon's --port; also "@name" or a socket path).
        The daemon owns the segment, the engine and the master connection
        and runs every call; this process shares with it a pool of
        mem_pool_size bytes (alloc_from_mem_pool; zero-copy for put_from /
        get_into, and the staging of copying puts) and a local buffer of
        local_buffer_size bytes (where copying gets' values arrive). Memory
        registered with register_buffer that is shared memory
        (MooncakeHostMemAllocator, crescent.alloc_shared) is mapped by the
        daemon too: zero-copy; other memory is copied through the pool.
        The tenant is MOONCAKE_TENANT_ID if set (it must be the daemon's),
        the shared secret CRESCENT_CLIENT_SECRET. Returns 0 or a negative
        ErrorCode (-3060: no daemon listens there)."""
        try:
            pool = _byte_size(mem_pool_size, "mem_pool_size")
            lbs = _byte_size(local_buffer_size, "local_buffer_size")
        except (CrescentError, TypeError, ValueError) as e:
            log.error("setup_dummy: %s", e)
            return _INVALID_PARAMS
        if not isinstance(server_address, str) or not server_address.strip():
            log.error("setup_dummy: server_address must be \"host:port\", not %r",
                      server_address)
            return _INVALID_PARAMS
        tenant = os.environ.get("MOONCAKE_TENANT_ID", "").strip() or None
        with self._lock:
            if self._s is not None:
                log.error("setup_dummy: this store is already set up; close() it first")
                return _INVALID_PARAMS
            try:
                s = _crescent.Store(thin=server_address.strip(), mem_pool_size=pool or None,
                                    local_buffer_size=lbs or None, tenant_id=tenant)
            except CrescentError as e:
                log.error("setup_dummy failed: %s", e)
                return e.code
            self._s = s
            self._engine = None
            self._regs = _util.Registrations(self._phys_register, self._phys_unregister)
        return 0

    def init_all(self, protocol: str, device_name: str,
                 mount_segment_size: int = 16 * 1024 * 1024) -> int:
        """Legacy entry point (etcd at 127.0.0.1:2379 in Mooncake): not supported, -1."""
        log.error("init_all: not supported by crescent; use setup()")
        return -1

    def close(self) -> int:
        """Unmount this client's segment and disconnect. Idempotent; returns 0.
        Put sessions still open are revoked."""
        with self._lock:
            s, self._s = self._s, None
            regs, self._regs = self._regs, None
            metrics, self._metrics = self._metrics, None
        if metrics is not None:
            metrics.stop()
        if s is not None:
            s.close()
        if regs is not None:
            regs.clear()
        return 0

    def health_check(self) -> int:
        """0 healthy, 1 not set up or closed, 2 master unreachable."""
        s = self._s
        if s is None:
            return 1
        try:
            s.health()
            return 0
        except CrescentError:
            return 1 if s.closed else 2

    def get_hostname(self) -> str:
        """This client's segment name "host:port" (use it in preferred_segment)."""
        s = self._s
        if s is None:
            return ""
        try:
            return s.hostname
        except CrescentError:
            return ""

    # ------------------------------------------------------------------ writes
    def _refused(self, fn_name: str, config: Any, n_keys: Optional[int] = None,
                 plain: bool = False) -> Optional[int]:
        """The code a put with this config is refused with (logged), or None."""
        bad = _config_error(config, n_keys, plain_put=plain)
        if bad is None:
            return None
        log.error("%s: %s", fn_name, bad[1])
        return bad[0]

    def _one_key_config(self, s: Any, config: Any) -> Any:
        """The config for a single-key put: group placement of group_ids[0]."""
        if config is None or not getattr(config, "group_ids", None):
            return config
        return self._groups.split(s, config, 1)[0][1]

    def _put_like(self, fn_name: str, key: Any, value: Any, config: Any, plain: bool) -> int:
        _check_config(config)
        code = self._refused(fn_name, config, 1 if config is not None and
                             config.group_ids is not None else None, plain)
        if code is not None:
            return code
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            getattr(s, fn_name)(key, value, self._one_key_config(s, config))
            return 0
        except CrescentError as e:
            return e.code

    def put(self, key: str, value: Any, config: Optional[ReplicateConfig] = None) -> int:
        """Copy a bytes-like value into the store. An existing key is kept (returns 0)."""
        return self._put_like("put", key, value, config, True)

    def upsert(self, key: str, value: Any, config: Optional[ReplicateConfig] = None) -> int:
        """Insert or replace a value."""
        return self._put_like("upsert", key, value, config, False)

    def put_from(self, key: str, buffer_ptr: int, size: int,
                 config: Optional[ReplicateConfig] = None) -> int:
        """Zero-copy put from registered memory."""
        return self._from_like("put_from", key, buffer_ptr, size, config)

    def upsert_from(self, key: str, buffer_ptr: int, size: int,
                    config: Optional[ReplicateConfig] = None) -> int:
        return self._from_like("upsert_from", key, buffer_ptr, size, config)

    def _from_like(self, fn_name: str, key: Any, buffer_ptr: Any, size: Any,
                   config: Any) -> int:
        _check_config(config)
        ptr = _addr(buffer_ptr)
        n = _size(size)
        code = self._refused(fn_name, config, 1 if config is not None and
                             config.group_ids is not None else None)
        if code is not None:
            return code
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            getattr(s, fn_name)(key, ptr, n, self._one_key_config(s, config))
            return 0
        except CrescentError as e:
            return e.code

    def put_from_with_metadata(self, key: str, buffer_ptr: int, metadata_buffer_ptr: int,
                               size: int, metadata_size: int,
                               config: Optional[ReplicateConfig] = None) -> int:
        """Store metadata followed by data as one object (both registered)."""
        _check_config(config)
        ptrs = [_addr(metadata_buffer_ptr, "metadata_buffer_ptr"), _addr(buffer_ptr)]
        sizes = [_size(metadata_size, "metadata_size"), _size(size)]
        code = self._refused("put_from_with_metadata", config)
        if code is not None:
            return code
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            s.put_from_multi(key, ptrs, sizes, self._one_key_config(s, config))
            return 0
        except CrescentError as e:
            return e.code

    def put_parts(self, key: str, *parts: Any, config: Optional[ReplicateConfig] = None) -> int:
        """One object gathered from several bytes-like parts."""
        return self._parts("put_parts", key, parts, config)

    def upsert_parts(self, key: str, *parts: Any,
                     config: Optional[ReplicateConfig] = None) -> int:
        return self._parts("upsert_parts", key, parts, config)

    def _parts(self, fn_name: str, key: Any, parts: Sequence[Any], config: Any) -> int:
        _check_config(config)
        code = self._refused(fn_name, config)
        if code is not None:
            return code
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            getattr(s, fn_name)(key, *parts, config=self._one_key_config(s, config))
            return 0
        except CrescentError as e:
            return e.code

    def put_batch(self, keys: List[str], values: List[Any],
                  config: Optional[ReplicateConfig] = None) -> int:
        """Copying puts; returns 0 or the first per-key error."""
        return self._batch_values("batch_put", keys, values, config, True)

    def upsert_batch(self, keys: List[str], values: List[Any],
                     config: Optional[ReplicateConfig] = None) -> int:
        return self._batch_values("batch_upsert", keys, values, config, False)

    def _grouped(self, s: Any, fn: Any, config: Any, n: int, args: Sequence[Sequence[Any]]
                 ) -> List[int]:
        """fn(*args, config) per group sub-batch (one call without groups);
        the per-key results in key order. args are per-key lists."""
        plan = self._groups.split(s, config, n)
        if len(plan) == 1:
            return list(fn(*args, plan[0][1]))
        out = [_INTERNAL_ERROR] * n
        for idx, cfg in plan:
            sub = [[a[i] for i in idx] for a in args]
            for i, r in zip(idx, fn(*sub, cfg)):
                out[i] = r
        return out

    def _batch_values(self, fn_name: str, keys: Any, values: Any, config: Any,
                      plain: bool) -> int:
        _check_config(config)
        if len(keys) != len(values):
            return _INVALID_PARAMS
        code = self._refused(fn_name, config, len(keys), plain)
        if code is not None:
            return code
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            results = self._grouped(s, getattr(s, fn_name), config, len(keys),
                                    (list(keys), list(values)))
        except CrescentError as e:
            return e.code
        for r in results:
            if r < 0:
                return r
        return 0

    def _batch_from(self, fn_name: str, keys: Any, ptrs: Any, sizes: Any,
                    config: Any) -> List[int]:
        _check_config(config)
        n = len(keys)
        if len(ptrs) != n or len(sizes) != n:
            return [_INVALID_PARAMS] * n
        code = self._refused(fn_name, config, n)
        if code is not None:
            return [code] * n
        s = self._s
        if s is None:
            return [_INTERNAL_ERROR] * n
        try:
            return self._grouped(s, getattr(s, fn_name), config, n,
                                 (list(keys), list(ptrs), list(sizes)))
        except CrescentError as e:
            return [e.code] * n

    def batch_put_from(self, keys: List[str], buffer_ptrs: List[int], sizes: List[int],
                       config: Optional[ReplicateConfig] = None) -> List[int]:
        """Zero-copy puts from registered memory; 0 or negative per key."""
        return self._batch_from("batch_put_from", keys, buffer_ptrs, sizes, config)

    def batch_upsert_from(self, keys: List[str], buffer_ptrs: List[int], sizes: List[int],
                          config: Optional[ReplicateConfig] = None) -> List[int]:
        """Zero-copy inserts-or-replaces; 0 or negative per key."""
        return self._batch_from("batch_upsert_from", keys, buffer_ptrs, sizes, config)

    def batch_put_from_multi_buffers(self, keys: List[str], all_buffer_ptrs: List[List[int]],
                                     all_sizes: List[List[int]],
                                     config: Optional[ReplicateConfig] = None) -> List[int]:
        """Each key's object gathered from several registered buffers."""
        return self._batch_from("batch_put_from_multi", keys, all_buffer_ptrs, all_sizes,
                                config)

    # ------------------------------------------------------------------ sessions
    # Mooncake's layer-wise ranged API: a session per key opened with one
    # master call, then ranged transfers without master round trips (see
    # cr_store_sessions in crescent/store.h). Return conventions are
    # Mooncake's: [] (or -1 for batch_get_session_end) when the store is not
    # set up, one int per key otherwise, -600 for lists of different lengths.

    def _fragment_lists(self, name: str, keys: Any, all_ptrs: Any, all_sizes: Any,
                        all_offsets: Any) -> Tuple[List[str], List[int], List[Any]]:
        """Keys, per-key results pre-filled with -600 for bad shapes, and the
        (ptrs, sizes, offsets) of the well-formed keys."""
        keys = _str_keys(keys)
        n = len(keys)
        res = [_INVALID_PARAMS] * n
        lists = (list(all_ptrs), list(all_sizes), list(all_offsets))
        ok: List[Any] = []
        if any(len(x) != n for x in lists):
            log.error("%s: %d keys but %d/%d/%d buffer/size/offset lists", name, n,
                      *(len(x) for x in lists))
            return keys, res, ok
        for i in range(n):
            p, z, o = (list(x[i]) for x in lists)
            if not len(p) == len(z) == len(o):
                log.error("%s '%s': %d buffers, %d sizes, %d offsets", name, keys[i], len(p),
                          len(z), len(o))
                continue
            ok.append((i, [_u64(v, "buffer pointer") for v in p], [_u64(v, "size") for v in z],
                       [_u64(v, "offset") for v in o]))
        return keys, res, ok

    def _ranges(self, native_fn: str, name: str, keys: Any, all_ptrs: Any, all_sizes: Any,
                all_offsets: Any) -> List[int]:
        s = self._s
        if s is None:
            log.error("%s: the store is not set up", name)
            return []
        keys, res, ok = self._fragment_lists(name, keys, all_ptrs, all_sizes, all_offsets)
        if not ok:
            return res
        sub = [keys[i] for i, _, _, _ in ok]
        try:
            got = getattr(s, native_fn)(sub, [p for _, p, _, _ in ok], [z for _, _, z, _ in ok],
                                        [o for _, _, _, o in ok])
        except CrescentError as e:
            got = [e.code] * len(sub)
        for (i, _, _, _), r in zip(ok, got):
            res[i] = r
        return res

    def batch_get_session_start(self, keys: List[str]) -> List[int]:
        """Open a get session per key: one master query for all of them, and a
        read lease held while the session is used. 0 or a negative code per
        key (-704 missing)."""
        s = self._s
        if s is None:
            log.error("batch_get_session_start: the store is not set up")
            return []
        keys = _str_keys(keys)
        if not keys:
            return []
        try:
            return s.get_session_start(keys)
        except CrescentError as e:
            return [e.code] * len(keys)

    def batch_get_into_multi_buffer_ranges(self, keys: List[str],
                                           all_buffer_ptrs: List[List[int]],
                                           all_sizes: List[List[int]],
                                           all_src_offsets: List[List[int]]) -> List[int]:
        """Ranged get through open get sessions, no master call: for key i,
        all_sizes[i][k] bytes at object offset all_src_offsets[i][k] into the
        registered buffer all_buffer_ptrs[i][k]. Bytes read per key, or
        negative: -600 without a session or for a range past the object's
        end, -707 once the session's lease ran out."""
        return self._ranges("batch_get_ranges", "batch_get_into_multi_buffer_ranges", keys,
                            all_buffer_ptrs, all_sizes, all_src_offsets)

    def batch_get_session_end(self, keys: List[str]) -> int:
        """Drop the get sessions of keys; 0 (-1 when the store is not set up)."""
        s = self._s
        if s is None:
            log.error("batch_get_session_end: the store is not set up")
            return -1
        try:
            s.get_session_end(_str_keys(keys))
            return 0
        except CrescentError as e:
            return e.code

    def batch_put_session_start(self, keys: List[str], sizes: List[int],
                                config: Optional[ReplicateConfig] = None) -> List[int]:
        """Reserve objects of the given sizes and open a put session per key;
        nothing is readable until batch_put_session_end. 0 or a negative code
        per key (-600 for a key with an open session, -705 for an existing
        key). config applies here only; its group_ids need one entry per key.
        Put sessions write memory replicas only: nof_replica_num is refused
        (-600) except Mooncake's flexible pair replica_num=1 /
        nof_replica_num=1, which Mooncake finishes as a memory replica alone,
        as crescent does; dfs_replica_num is refused with -1012."""
        s = self._s
        if s is None:
            log.error("batch_put_session_start: the store is not set up")
            return []
        keys = _str_keys(keys)
        n = len(keys)
        sizes = list(sizes)
        if len(sizes) != n:
            log.error("batch_put_session_start: %d keys, %d sizes", n, len(sizes))
            return [_INVALID_PARAMS] * n
        sizes = [_u64(z, "size") for z in sizes]
        _check_config(config)
        if config is not None and (config.nof_replica_num or config.dfs_replica_num):
            if config.dfs_replica_num:
                log.error("batch_put_session_start: dfs_replica_num=%d: crescent has no DFS "
                          "tier", config.dfs_replica_num)
                return [_NOT_SUPPORTED] * n
            if not (config.replica_num == 1 and config.nof_replica_num == 1):
                log.error("batch_put_session_start rejects reliable NoF configs: the session "
                          "path never writes NoF (nof_replica_num=%d, replica_num=%d)",
                          config.nof_replica_num, config.replica_num)
                return [_INVALID_PARAMS] * n
            _util.warn_once("session:nof", "batch_put_session_start: replica_num=1 with "
                            "nof_replica_num=1 is finished as one memory replica (crescent has "
                            "no NoF tier; Mooncake revokes the NoF part at session end too)")
            config = config.copy()
            config.nof_replica_num = 0
            config.preferred_nof_segments = []
        code = self._refused("batch_put_session_start", config, n)
        if code is not None:
            return [code] * n
        if n == 0:
            return []
        try:
            return self._grouped(s, s.put_session_start, config, n, (keys, sizes))
        except CrescentError as e:
            return [e.code] * n

    def batch_put_from_multi_buffer_ranges(self, keys: List[str],
                                           all_buffer_ptrs: List[List[int]],
                                           all_sizes: List[List[int]],
                                           all_dst_offsets: List[List[int]]) -> List[int]:
        """Ranged put through open put sessions, no master call: for key i,
        all_sizes[i][k] bytes of the registered buffer all_buffer_ptrs[i][k]
        go to object offset all_dst_offsets[i][k] of every replica. Bytes
        written per key (counted once), or negative: -600 without an open
        session (or after end/revoke sealed it) or for a range past the end."""
        return self._ranges("batch_put_ranges", "batch_put_from_multi_buffer_ranges", keys,
                            all_buffer_ptrs, all_sizes, all_dst_offsets)

    def batch_put_session_end(self, keys: List[str]) -> List[int]:
        """Seal the put sessions, wait for their ranged writes and make the
        objects readable. 0 or a negative code per key (-600 without a
        session; a master failure keeps the session for a retry or revoke)."""
        return self._finish("put_session_end", "batch_put_session_end", keys)

    def batch_put_session_revoke(self, keys: List[str]) -> List[int]:
        """Seal the put sessions, wait for their ranged writes and release the
        reserved space. 0 or a negative code per key."""
        return self._finish("put_session_revoke", "batch_put_session_revoke", keys)

    def _finish(self, native_fn: str, name: str, keys: Any) -> List[int]:
        s = self._s
        if s is None:
            log.error("%s: the store is not set up", name)
            return []
        keys = _str_keys(keys)
        if not keys:
            return []
        try:
            return getattr(s, native_fn)(keys)
        except CrescentError as e:
            return [e.code] * len(keys)

    # ------------------------------------------------------------------ reads
    def get(self, key: str) -> bytes:
        """The value, or b"" on a miss or any error."""
        s = self._s
        if s is None:
            return b""
        try:
            return s.get(key)
        except CrescentError:
            return b""

    def get_batch(self, keys: List[str]) -> List[bytes]:
        """Values, b"" for each failed key (and [b""] for an empty key list, as Mooncake)."""
        s = self._s
        if s is None or len(keys) == 0:
            return [b""]
        try:
            got = s.batch_get(keys)
        except CrescentError:
            return [b""] * len(keys)
        return [b"" if isinstance(h, int) else h.tobytes() for h in got]

    def get_buffer(self, key: str) -> Optional[BufferHandle]:
        """A BufferHandle over the value, or None."""
        s = self._s
        if s is None:
            return None
        try:
            return s.get_buffer(key)
        except CrescentError:
            return None

    def batch_get_buffer(self, keys: List[str]) -> List[Optional[BufferHandle]]:
        """A BufferHandle or None per key."""
        s = self._s
        if s is None:
            return [None] * len(keys)
        try:
            got = s.batch_get(keys)
        except CrescentError:
            return [None] * len(keys)
        return [None if isinstance(h, int) else h for h in got]

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Read into registered memory; bytes read or negative (-600 if too small)."""
        ptr = _addr(buffer_ptr)
        n = _size(size)
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            return s.get_into(key, ptr, n)
        except CrescentError as e:
            return _read_code(e.code)

    def batch_get_into(self, keys: List[str], buffer_ptrs: List[int],
                       sizes: List[int]) -> List[int]:
        """Bytes read (> 0) or negative per key."""
        n = len(keys)
        if len(buffer_ptrs) != n or len(sizes) != n:
            return [_INVALID_PARAMS] * n
        s = self._s
        if s is None:
            return [_INTERNAL_ERROR] * n
        try:
            res = s.batch_get_into(keys, buffer_ptrs, sizes)
        except CrescentError as e:
            return [e.code] * n
        if _BUFFER_OVERFLOW in res:
            res = [_read_code(r) for r in res]
        return res

    def batch_get_into_multi_buffers(self, keys: List[str], all_buffer_ptrs: List[List[int]],
                                     all_sizes: List[List[int]],
                                     prefer_alloc_in_same_node: bool = False) -> List[int]:
        """Scatter each key's object over several registered buffers."""
        n = len(keys)
        if len(all_buffer_ptrs) != n or len(all_sizes) != n:
            return [_INVALID_PARAMS] * n
        s = self._s
        if s is None:
            return [_INTERNAL_ERROR] * n
        try:
            res = s.batch_get_into_multi(keys, all_buffer_ptrs, all_sizes)
        except CrescentError as e:
            return [e.code] * n
        return [_read_code(r) for r in res]

    # ------------------------------------------------------------------ existence, removal
    def is_exist(self, key: str) -> int:
        """1 exists, 0 missing, negative on error."""
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            return 1 if s.exists(key) else 0
        except CrescentError as e:
            return e.code

    def batch_is_exist(self, keys: List[str]) -> List[int]:
        s = self._s
        if s is None:
            return [_INTERNAL_ERROR] * len(keys)
        try:
            return s.batch_exists(keys)
        except CrescentError as e:
            return [e.code] * len(keys)

    def get_size(self, key: str) -> int:
        """Value size or negative (-704 missing)."""
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            return s.get_size(key)
        except CrescentError as e:
            return e.code

    def remove(self, key: str, force: bool = False) -> int:
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            s.remove(key, force)
            return 0
        except CrescentError as e:
            return e.code

    def remove_by_regex(self, regex_pattern: str, force: bool = False) -> int:
        """Remove keys matching the pattern; returns the count or negative."""
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            return s.remove_by_regex(regex_pattern, force)
        except CrescentError as e:
            return e.code

    def remove_all(self, force: bool = False) -> int:
        """Remove every object; returns the count or negative."""
        s = self._s
        if s is None:
            return _INTERNAL_ERROR
        try:
            return s.remove_all(force)
        except CrescentError as e:
            return e.code

    def batch_remove(self, keys: List[str], force: bool = False) -> List[int]:
        """0 or negative per key (-704 for a missing key)."""
        s = self._s
        if s is None:
            return [_INTERNAL_ERROR] * len(keys)
        try:
            return s.batch_remove(keys, force)
        except CrescentError as e:
            return [e.code] * len(keys)

    def batch_get_replica_desc(self, keys: List[str]) -> Dict[str, List[ReplicaDescriptor]]:
        """Replica descriptors per key (crescent replicas are all in memory).

        One descriptor per replica the master knows, with its ``segment_name``
        and status COMPLETE (PROCESSING while the object's first put is in
        flight); ``[]`` for a missing key. Grants no read lease.
        """
        if isinstance(keys, (str, bytes)):
            raise TypeError("keys must be a list of str")
        keys = list(keys)
        for k in keys:
            if not isinstance(k, str):
                raise TypeError(f"keys must be str, not {type(k).__name__}")
        s = self._s
        if s is None:
            return {}
        out: Dict[str, List[ReplicaDescriptor]] = {}
        for k in keys:
            if k in out:
                continue
            try:
                reps = s.get_replicas(k)
            except CrescentError as e:
                if e.code != _OBJECT_NOT_FOUND:
                    log.warning("batch_get_replica_desc %r: %s", k, e)
                reps = []
            out[k] = [ReplicaDescriptor(seg, ReplicaStatus.COMPLETE if done
                                        else ReplicaStatus.PROCESSING, addr, size)
                      for seg, addr, size, done in reps]
        return out

    def batch_replica_clear(self, keys: List[str], segment_name: str = "") -> List[str]:
        """Clear replicas; returns the keys actually cleared (Mooncake's List[str]).

        segment_name "": each key is removed (every replica). With a segment
        name: each key's replica on that segment is dropped; a key with
        replicas elsewhere stays readable from them, one left without
        replicas is removed. Keys that are leased (being read), being
        written, missing, or have no replica on that segment are skipped and
        not reported.
        """
        if not isinstance(segment_name, str):
            raise TypeError(f"segment_name must be str, not {type(segment_name).__name__}")
        if isinstance(keys, (str, bytes)):
            raise TypeError("keys must be a list of str")
        keys = list(dict.fromkeys(keys))
        for k in keys:
            if not isinstance(k, str):
                raise TypeError(f"keys must be str, not {type(k).__name__}")
        s = self._s
        if s is None or not keys:
            return []
        try:
            res = s.batch_replica_clear(keys, segment_name)
        except CrescentError as e:
            log.error("batch_replica_clear: %s", e)
            return []
        failed = {r for r in res if r not in (0, _OBJECT_NOT_FOUND)}
        if failed:
            log.debug("batch_replica_clear: skipped keys with %s", sorted(failed))
        return [k for k, r in zip(keys, res) if r == 0]

    def get_offload_rpc_read_count(self) -> int:
        """Gets of this client that were served from a holder's SSD tier (staged reads)."""
        s = self._s
        if s is None:
            return 0
        try:
            return int(s.offload_stats()["rpc_reads"])
        except CrescentError:
            return 0

    # ------------------------------------------------------------------ ranged reads
    def get_into_ranges(self, buffer_ptrs: List[int], all_keys: List[List[str]],
                        all_dst_offsets: List[List[List[int]]],
                        all_src_offsets: List[List[List[int]]],
                        all_sizes: List[List[List[int]]]) -> List[List[List[int]]]:
        """Gather byte ranges of objects into registered buffers (buffer-major).

        For buffer i, key j, fragment k: copy ``all_sizes[i][j][k]`` bytes
        from offset ``all_src_offsets[i][j][k]`` of object ``all_keys[i][j]``
        to ``buffer_ptrs[i] + all_dst_offsets[i][j][k]``. Returns the same
        nesting as ``all_keys`` with one entry per fragment: bytes copied, or
        a negative code: -600 (INVALID_PARAMS) for lists whose shapes do not
        match, a negative offset or size, a range past the end of the object,
        a destination buffer that is not registered with this store, or a
        destination range past the end of its registered region; -704 for a
        missing key; other store errors as returned.

        crescent has no ranged read: each distinct key is fetched once in
        full, then its fragments are copied. Wrong types raise TypeError.
        """
        INV = _INVALID_PARAMS
        if isinstance(all_keys, (str, bytes)):
            raise TypeError("all_keys must be a list of lists of str")
        all_keys = [list(ks) for ks in all_keys]
        ptrs = [_addr(p, "buffer_ptrs item") for p in buffer_ptrs]

        def level(seq: Any, i: int) -> Optional[List[Any]]:
            try:
                v = seq[i]
            except (IndexError, TypeError, KeyError):
                return None
            return list(v) if isinstance(v, (list, tuple)) else None

        def nonneg(v: Any, what: str) -> int:
            if v is None or isinstance(v, bool):
                raise TypeError(f"{what} must be an int, not {type(v).__name__}")
            try:
                return operator.index(v)
            except TypeError:
                raise TypeError(f"{what} must be an int, not {type(v).__name__}") from None

        out: List[List[List[int]]] = []
        plan: List[Tuple[int, int, int, str, int, int, int]] = []  # i, j, k, key, dst, src, n
        outer_ok = len(ptrs) == len(all_keys) and len(all_dst_offsets) == len(all_keys) and \
            len(all_src_offsets) == len(all_keys) and len(all_sizes) == len(all_keys)
        regs = self._regs
        for i, ks in enumerate(all_keys):
            for k in ks:
                if not isinstance(k, str):
                    raise TypeError(f"keys must be str, not {type(k).__name__}")
            dsts, srcs, sizes = (level(all_dst_offsets, i), level(all_src_offsets, i),
                                 level(all_sizes, i))
            row: List[List[int]] = []
            row_ok = outer_ok and dsts is not None and srcs is not None and sizes is not None \
                and len(dsts) == len(ks) == len(srcs) == len(sizes)
            end = 0
            if row_ok and regs is not None:
                end = regs.span_end(ptrs[i])
                if end == 0:
                    log.error("get_into_ranges: buffer %#x is not registered", ptrs[i])
            for j, key in enumerate(ks):
                d, s_, z = (level(dsts, j) if dsts else None, level(srcs, j) if srcs else None,
                            level(sizes, j) if sizes else None)
                m = max(len(x) for x in (d or [], s_ or [], z or []))
                if m == 0 and (d is None or s_ is None or z is None):
                    m = 1  # not even a fragment list: one negative entry
                if not row_ok or d is None or s_ is None or z is None or \
                        not len(d) == len(s_) == len(z):
                    row.append([INV] * m)
                    continue
                frag: List[int] = []
                for k in range(m):
                    dv = nonneg(d[k], "dst offset")
                    sv = nonneg(s_[k], "src offset")
                    zv = nonneg(z[k], "size")
                    if dv < 0 or sv < 0 or zv < 0 or end == 0 or ptrs[i] + dv + zv > end:
                        frag.append(INV)
                    else:
                        frag.append(0)
                        plan.append((i, j, k, key, ptrs[i] + dv, sv, zv))
                row.append(frag)
            out.append(row)
        if not plan:
            return out
        s = self._s
        uniq = list(dict.fromkeys(p[3] for p in plan))
        got: Dict[str, Any] = {}
        if s is None:
            got = {k: _INTERNAL_ERROR for k in uniq}
        else:
            try:
                got = dict(zip(uniq, s.batch_get(uniq)))
            except CrescentError as e:
                got = {k: e.code for k in uniq}
        for i, j, k, key, dst, src, n in plan:
            h = got[key]
            if isinstance(h, int):
                out[i][j][k] = _read_code(h)
            elif src + n > h.size():
                out[i][j][k] = INV
            else:
                if n:
                    ctypes.memmove(dst, h.ptr() + src, n)
                out[i][j][k] = n
        return out

    def get_replica_desc(self, key: str) -> List[ReplicaDescriptor]:
        return self.batch_get_replica_desc([key]).get(key, [])

    # ------------------------------------------------------------------ memory
    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        """Register host memory for the zero-copy calls; 0 or negative.

        Registering the same or an overlapping range again is allowed (as in
        Mooncake); each registration needs its own unregister_buffer.
        """
        ptr = _addr(buffer_ptr)
        n = _size(size)
        regs = self._regs
        if regs is None:
            return _INTERNAL_ERROR
        if ptr == 0 or n == 0:
            return _INVALID_PARAMS
        return regs.register(ptr, n)

    def unregister_buffer(self, buffer_ptr: int) -> int:
        ptr = _addr(buffer_ptr)
        regs = self._regs
        if regs is None:
            return _INTERNAL_ERROR
        return regs.unregister(ptr)

    def alloc_from_mem_pool(self, size: int) -> int:
        """Thin mode (setup_dummy): size bytes of the pool shared with the
        daemon, already usable for zero-copy calls; the address, 0 on failure
        (Mooncake's failure value). Embedded mode has no pool: 0."""
        s = self._s
        if s is None or not s.is_thin:
            return 0
        try:
            return s.pool_alloc(_size(size))
        except CrescentError as e:
            log.error("alloc_from_mem_pool(%s): %s", size, e)
            return 0

    def __repr__(self) -> str:
        return f"<MooncakeDistributedStore {self.get_hostname() or '(not set up)'}>"
