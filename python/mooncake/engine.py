"""mooncake.engine on crescent: a drop-in for Mooncake's ``mooncake.engine``.

``TransferEngine`` keeps the Mooncake method names, argument order and
return conventions: ints everywhere (0 ok, negative error; transfers return
-1 on failure as Mooncake's do), batch ids as positive ints with 0 as the
failure sentinel, ``read_bytes_from_buffer`` returns ``bytes``. The work is
done by ``crescent._crescent.Engine`` (C, GIL released).

Differences, all on top of crescent's public C API:

* protocol: "tcp" means sockets only; "rdma" (and "") mean crescent's
  fastest path for each buffer pair (shared memory / process_vm_* on one
  host, UCX with an RDMA device, tcp otherwise); "ucx" (crescent's name,
  not Mooncake's) is the UCX transport as UCX_TLS configures it;
  MC_FORCE_TCP=1 forces tcp; hardware-specific transports (efa, ascend,
  nvlink, ...) fail initialize with -1.
* metadata: "P2PHANDSHAKE", http:// URLs, etcd://h:p[,h:p], bare h:p
  (etcd, as in Mooncake) and redis://h:p; descriptors in etcd and redis live
  under a lease/TTL the engine keeps alive.
* registering the same or overlapping memory twice is allowed (as in
  Mooncake), see mooncake._util.Registrations.
* managed buffers come from crescent's shareable memory (same-host peers copy
  from it directly); write_bytes_to_buffer / read_bytes_from_buffer only
  accept ranges inside memory registered with this engine (anything else is
  -1 / ValueError instead of a crash).
* get_first_buffer_address answers for this engine's own segment only (the
  C API does not expose a peer's buffer list); it returns 0 for others.
* notifications carry Mooncake's (name, msg) pair between two crescent
  engines; from other senders name is the sender's segment.
"""

from __future__ import annotations

import enum
import json
import logging
import threading
from typing import Any, Dict, List, Optional

from crescent import _crescent

from . import _util

__all__ = ["TransferEngine", "TransferOpcode", "TransferNotify", "Read", "Write",
           "SUPPORT_CUDA", "SUPPORT_EFA", "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_MUSA",
           "SUPPORT_INTRA_NVLINK"]

log = logging.getLogger("mooncake")
_util.apply_log_env()

CrescentError = _crescent.CrescentError

SUPPORT_CUDA = False
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_MUSA = False
SUPPORT_INTRA_NVLINK = False


class TransferOpcode(enum.IntEnum):
    """Transfer direction; the binding's names are Read / Write."""

    Read = 0
    Write = 1
    READ = 0  # alias (Mooncake's docs spell it this way)
    WRITE = 1  # alias


Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """A notification: ``name`` and ``msg`` strings."""

    __slots__ = ("name", "msg")

    def __init__(self, name: str = "", msg: str = "") -> None:
        self.name = name
        self.msg = msg

    def __repr__(self) -> str:
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TransferNotify):
            return NotImplemented
        return (self.name, self.msg) == (other.name, other.msg)

    __hash__ = None  # type: ignore[assignment]


_NOTIFY_MAGIC = b"\x00MCNOTIFY\x00"

_KIB = 1024
_MIN_CLASS = 8 * _KIB  # smallest managed-buffer class
_MAX_CLASS = 256 * 1024 * _KIB  # largest class; bigger requests get their own memory
_CHUNK = 2 * 1024 * 1024 * _KIB  # a miss at the top class maps this much (not committed)


class _ManagedBuffers:
    """Mooncake's managed-buffer allocator: power-of-two classes 8 KiB..256 MiB.

    Chunks come from crescent's shareable memory (memfd, pages committed on
    first touch) and are registered with the engine. Freed buffers go back
    to their class list; memory is released when the engine is closed.
    """

    def __init__(self, register, unregister) -> None:
        self._register = register
        self._unregister = unregister
        self._lock = threading.Lock()
        self._free: Dict[int, List[int]] = {}
        self._chunks: List[int] = []
        self._large: Dict[int, int] = {}

    @staticmethod
    def _class(length: int) -> int:
        size = _MIN_CLASS
        while size < length:
            size <<= 1
        return size

    def _take(self, cls: int) -> int:
        lst = self._free.setdefault(cls, [])
        if lst:
            return lst.pop()
        if cls >= _MAX_CLASS:
            base = _crescent.alloc_shared(_CHUNK)
            if self._register(base, _CHUNK) != 0:
                _crescent.free_shared(base)
                return 0
            self._chunks.append(base)
            lst.extend(base + i * _MAX_CLASS for i in range(_CHUNK // _MAX_CLASS - 1, 0, -1))
            return base
        parent = self._take(cls * 2)
        if parent:
            lst.append(parent + cls)
        return parent

    def allocate(self, length: int) -> int:
        if length <= 0:
            return 0
        with self._lock:
            try:
                if length > _MAX_CLASS:
                    base = _crescent.alloc_shared(length)
                    if self._register(base, length) != 0:
                        _crescent.free_shared(base)
                        return 0
                    self._large[base] = length
                    return base
                return self._take(self._class(length))
            except CrescentError as e:
                log.error("allocate_managed_buffer(%d): %s", length, e)
                return 0

    def free(self, addr: int, length: int) -> int:
        with self._lock:
            if addr in self._large:
                del self._large[addr]
                self._unregister(addr)
                try:
                    _crescent.free_shared(addr)
                except CrescentError as e:
                    return e.code
                return 0
            if length <= 0 or length > _MAX_CLASS:
                return -1
            self._free.setdefault(self._class(length), []).append(addr)
            return 0

    def release_all(self) -> None:
        """Free every chunk (the engine has already been closed)."""
        with self._lock:
            for base in self._chunks + list(self._large):
                try:
                    _crescent.free_shared(base)
                except CrescentError:
                    pass
            self._chunks.clear()
            self._large.clear()
            self._free.clear()


def _addr(x: Any, what: str) -> int:
    if x is None or isinstance(x, bool):
        raise TypeError(f"{what} must be an int address, not {type(x).__name__}")
    if hasattr(x, "data_ptr") and not isinstance(x, int):
        x = x.data_ptr()
    try:
        v = x.__index__()
    except AttributeError:
        raise TypeError(f"{what} must be an int address, not {type(x).__name__}") from None
    if v < 0:
        raise ValueError(f"{what} must not be negative")
    return v


def _len(x: Any, what: str) -> int:
    if x is None or isinstance(x, bool):
        raise TypeError(f"{what} must be an int, not {type(x).__name__}")
    try:
        v = x.__index__()
    except AttributeError:
        raise TypeError(f"{what} must be an int, not {type(x).__name__}") from None
    if v < 0:
        raise ValueError(f"{what} must not be negative")
    return v


class TransferEngine:
    """Mooncake's TransferEngine on crescent: one-sided READ/WRITE to peers.

    ``initialize(local_hostname, metadata_server, protocol, device_name)``
    first; peers are addressed by their session name ("host:rpc_port" in
    P2PHANDSHAKE mode, i.e. ``f"{ip}:{te.get_rpc_port()}"``).
    """

    def __init__(self) -> None:
        self._e: Optional[_crescent.Engine] = None
        self._lock = threading.Lock()
        self._handles: Dict[str, int] = {}
        self._regs: Optional[_util.Registrations] = None
        self._managed: Optional[_ManagedBuffers] = None
        self._batches: Dict[int, int] = {}  # async batch id -> number of tasks
        self._protocol = ""
        self._metrics: Optional[_util.MetricReporter] = None

    # ------------------------------------------------------------------ lifecycle
    def initialize(self, local_hostname: str, metadata_server: str, protocol: str,
                   device_name: str) -> int:
        """Start the engine. 0 or -1 (see the module docstring for protocols)."""
        return self._initialize(local_hostname, metadata_server, protocol, device_name)

    def initialize_ext(self, local_hostname: str, metadata_server: str, protocol: str,
                       device_name: str, metadata_type: str = "") -> int:
        """initialize() with an explicit metadata type ("p2p", "http", ...)."""
        meta = metadata_server
        if metadata_type and metadata_type.lower() in ("http", "https") and "://" not in meta:
            meta = f"{metadata_type.lower()}://{meta}"
        return self._initialize(local_hostname, meta, protocol, device_name)

    def _initialize(self, local_hostname: Any, metadata_server: Any, protocol: Any,
                    device_name: Any) -> int:
        for name, v in (("local_hostname", local_hostname), ("metadata_server", metadata_server),
                        ("protocol", protocol)):
            if not isinstance(v, str):
                raise TypeError(f"initialize(): {name} must be str, not {type(v).__name__}")
        if device_name is not None and not isinstance(device_name, str):
            raise TypeError("initialize(): device_name must be str")
        proto, why = _util.engine_protocol(protocol)
        if proto is None:
            log.error("TransferEngine.initialize: %s", why)
            return -1
        meta, why = _util.metadata_server(metadata_server)
        if meta is None:
            log.error("TransferEngine.initialize: %s", why)
            return -1
        host = local_hostname.strip() or "127.0.0.1"
        parts = host.split(":")
        if len(parts) >= 3 and not host.startswith("["):  # Ascend "ip:port:npu_N"
            host = ":".join(parts[:2])
        if meta == "P2PHANDSHAKE" and ":" in host and not host.startswith("[") and \
                not _util.env_flag("MC_LEGACY_RPC_PORT_BINDING"):
            host = host.rsplit(":", 1)[0]  # Mooncake picks the RPC port itself in P2P mode
        _util.check_env("TransferEngine")
        # Without a port, the RPC port comes from Mooncake's range
        # (MC_MIN_RPC_PORT..MC_MAX_RPC_PORT, 15000..17000), retried if another
        # process takes it between the probe and the bind.
        pick = not _util.has_port(host)
        lo, hi = _util.rpc_port_range() if pick else (0, 0)
        with self._lock:
            if self._e is not None:
                log.error("TransferEngine.initialize: already initialized")
                return -1
            e = None
            for attempt in range(20 if pick else 1):
                port = _util.pick_port(host, lo, hi) if pick else 0
                if pick and port == 0:
                    log.error("TransferEngine.initialize: no free RPC port in [%d, %d] "
                              "(MC_MIN_RPC_PORT / MC_MAX_RPC_PORT)", lo, hi)
                    return -1
                try:
                    e = _crescent.Engine(host, meta, proto, rpc_port=port,
                                         request_timeout_ms=_util.transfer_timeout_ms())
                    break
                except CrescentError as err:
                    if pick and err.code == -3023 and attempt + 1 < 20:  # ERR_BIND: port taken
                        continue
                    log.error("TransferEngine.initialize failed: %s", err)
                    return -1
            self._e = e
            if _util.MetricReporter.wanted():
                self._metrics = _util.MetricReporter(e.segment_name, e.stats)
            self._protocol = proto
            regs = _util.Registrations(self._phys_register, self._phys_unregister)
            self._regs = regs
            self._managed = _ManagedBuffers(regs.register, regs.unregister)
        return 0

    def _phys_register(self, addr: int, size: int, location: str = "*") -> int:
        e = self._e
        if e is None:
            return -1
        try:
            e.register(addr, size, location, True)
            return 0
        except CrescentError as err:
            log.error("register_memory(0x%x, %d): %s", addr, size, err)
            return err.code

    def _phys_unregister(self, addr: int) -> int:
        e = self._e
        if e is None:
            return -1
        try:
            e.unregister(addr)
            return 0
        except CrescentError as err:
            return err.code

    def close(self) -> None:
        """Stop the engine (crescent extension; Mooncake frees it on GC)."""
        with self._lock:
            e, self._e = self._e, None
            managed, self._managed = self._managed, None
            metrics, self._metrics = self._metrics, None
            self._regs = None
            self._handles.clear()
            self._batches.clear()
        if metrics is not None:
            metrics.stop()
        if e is not None:
            e.close()
        if managed is not None:
            managed.release_all()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def get_rpc_port(self) -> int:
        """The RPC (handshake) port; the session name is "host:port"."""
        e = self._e
        return e.rpc_port if e is not None else -1

    def get_local_segment_name(self) -> str:
        e = self._e
        return e.segment_name if e is not None else ""

    def get_engine(self) -> "TransferEngine":
        """An opaque handle accepted by MooncakeDistributedStore.setup(engine=...)."""
        return self

    def get_engine_ptr(self) -> int:
        return id(self)

    def get_local_topology(self, device_name: Optional[str] = None) -> str:
        """crescent has no NIC topology: an empty JSON matrix."""
        return json.dumps({})

    def warmup_efa_segment(self, segment_name: str) -> int:
        return 0

    # ------------------------------------------------------------------ registration
    def register_memory(self, buffer_addr: int, capacity: int, location: str = "*") -> int:
        """Register [buffer_addr, +capacity) for transfers; 0 or negative.

        location ("cpu:0", "*", ...) is accepted; crescent detects host memory
        itself (this build has no GPU memory support).
        """
        addr = _addr(buffer_addr, "buffer_addr")
        n = _len(capacity, "capacity")
        if not isinstance(location, str):
            raise TypeError("location must be str")
        regs = self._regs
        if regs is None:
            return -1
        if addr == 0 or n == 0:
            return -1
        return regs.register(addr, n)

    def unregister_memory(self, buffer_addr: int) -> int:
        addr = _addr(buffer_addr, "buffer_addr")
        regs = self._regs
        if regs is None:
            return -1
        return regs.unregister(addr)

    def batch_register_memory(self, buffer_addresses: List[int], capacities: List[int],
                              location: str = "*") -> int:
        """Register several ranges; 0, or the first error (earlier ones are undone)."""
        addrs = [_addr(a, "buffer_addresses[i]") for a in buffer_addresses]
        caps = [_len(c, "capacities[i]") for c in capacities]
        if len(addrs) != len(caps):
            return -1
        done = []
        for a, c in zip(addrs, caps):
            rc = self.register_memory(a, c, location)
            if rc != 0:
                for d in done:
                    self.unregister_memory(d)
                return rc
            done.append(a)
        return 0

    def batch_unregister_memory(self, buffer_addresses: List[int]) -> int:
        rc = 0
        for a in buffer_addresses:
            r = self.unregister_memory(a)
            rc = rc or r
        return rc

    # ------------------------------------------------------------------ managed buffers
    def allocate_managed_buffer(self, length: int) -> int:
        """A registered buffer of at least `length` bytes, or 0."""
        n = _len(length, "length")
        m = self._managed
        return m.allocate(n) if m is not None else 0

    def free_managed_buffer(self, buffer_addr: int, length: int) -> int:
        m = self._managed
        if m is None:
            return -1
        return m.free(_addr(buffer_addr, "buffer_addr"), _len(length, "length"))

    def _inside(self, addr: int, length: int) -> bool:
        regs = self._regs
        return regs is not None and regs.contains(addr, length)

    def write_bytes_to_buffer(self, dest_address: int, src_ptr: bytes, length: int) -> int:
        """Copy `length` bytes of `src_ptr` (bytes-like) to registered memory."""
        addr = _addr(dest_address, "dest_address")
        n = _len(length, "length")
        if n == 0:
            return 0
        if not self._inside(addr, n):
            log.error("write_bytes_to_buffer: [0x%x, +%d) is not registered memory", addr, n)
            return -1
        try:
            _crescent.write_memory(addr, src_ptr, n)
        except ValueError as err:
            log.error("write_bytes_to_buffer: %s", err)
            return -1
        return 0

    def read_bytes_from_buffer(self, source_address: int, length: int) -> bytes:
        """A bytes copy of registered memory (ValueError for other memory)."""
        addr = _addr(source_address, "source_address")
        n = _len(length, "length")
        if n == 0:
            return b""
        if not self._inside(addr, n):
            raise ValueError(f"[0x{addr:x}, +{n}) is not memory registered with this engine")
        return _crescent.read_memory(addr, n)

    def get_first_buffer_address(self, segment_name: str) -> int:
        """Address of the first (lowest) buffer of a segment, or 0 if it has none."""
        e = self._e
        if e is None:
            return 0
        if segment_name == e.segment_name:
            regs = self._regs
            return regs.first() if regs is not None else 0
        try:
            bufs = e.segment_buffers(self._segment(segment_name))
        except CrescentError:
            return 0
        return bufs[0][0] if bufs else 0

    # ------------------------------------------------------------------ transfers
    def _segment(self, target: str) -> int:
        if not isinstance(target, str):
            raise TypeError(f"target_hostname must be str, not {type(target).__name__}")
        h = self._handles.get(target)
        if h is not None:
            return h
        e = self._e
        if e is None:
            raise CrescentError("engine is not initialized")
        h = e.open_segment(target)
        self._handles[target] = h
        return h

    def send_probe(self, peer: str) -> int:
        """0 if the peer's engine answers, else negative."""
        if not isinstance(peer, str):
            raise TypeError("peer must be str")
        e = self._e
        if e is None:
            return -1
        try:
            e.probe(peer)
            return 0
        except CrescentError as err:
            return err.code

    def _notify(self, handle: int, notify: Optional[TransferNotify]) -> int:
        if notify is None:
            return 0
        e = self._e
        if e is None:
            return -1
        payload = (_NOTIFY_MAGIC + str(notify.name).encode() + b"\x00" +
                   str(notify.msg).encode())
        try:
            e.notify(handle, payload)
            return 0
        except CrescentError as err:
            log.error("notify: %s", err)
            return -1

    def transfer_sync(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                      length: int, opcode: TransferOpcode,
                      notify: Optional[TransferNotify] = None, transport_hint: str = "") -> int:
        """One blocking transfer; 0 or -1."""
        op = int(TransferOpcode(opcode))
        local = _addr(buffer, "buffer")
        remote = _addr(peer_buffer_address, "peer_buffer_address")
        n = _len(length, "length")
        e = self._e
        if e is None:
            return -1
        try:
            h = self._segment(target_hostname)
            e.transfer_sync(op, local, h, remote, n)
        except CrescentError as err:
            log.debug("transfer to %s failed: %s", target_hostname, err)
            return -1
        return self._notify(h, notify)

    def transfer_sync_write(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                            length: int, transport_hint: str = "") -> int:
        return self.transfer_sync(target_hostname, buffer, peer_buffer_address, length,
                                  TransferOpcode.Write)

    def transfer_sync_read(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                           length: int, transport_hint: str = "") -> int:
        return self.transfer_sync(target_hostname, buffer, peer_buffer_address, length,
                                  TransferOpcode.Read)

    def batch_transfer_sync(self, target_hostname: str, buffers: List[int],
                            peer_buffer_addresses: List[int], lengths: List[int],
                            opcode: TransferOpcode, notify: Optional[TransferNotify] = None,
                            transport_hint: str = "") -> int:
        """Blocking batch to one peer; 0 if every transfer completed, else -1."""
        op = int(TransferOpcode(opcode))
        locals_ = [_addr(b, "buffers[i]") for b in buffers]
        remotes = [_addr(p, "peer_buffer_addresses[i]") for p in peer_buffer_addresses]
        lens = [_len(n, "lengths[i]") for n in lengths]
        if not len(locals_) == len(remotes) == len(lens):
            return -1
        e = self._e
        if e is None:
            return -1
        try:
            h = self._segment(target_hostname)
            e.transfer_sync_batch(op, h, locals_, remotes, lens)
        except CrescentError as err:
            log.debug("batch transfer to %s failed: %s", target_hostname, err)
            return -1
        return self._notify(h, notify)

    def batch_transfer_sync_write(self, target_hostname: str, buffers: List[int],
                                  peer_buffer_addresses: List[int], lengths: List[int],
                                  transport_hint: str = "") -> int:
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths,
                                        TransferOpcode.Write)

    def batch_transfer_sync_read(self, target_hostname: str, buffers: List[int],
                                 peer_buffer_addresses: List[int], lengths: List[int],
                                 transport_hint: str = "") -> int:
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths,
                                        TransferOpcode.Read)

    # ------------------------------------------------------------------ async
    def batch_transfer_async(self, target_hostname: str, buffers: List[int],
                             peer_buffer_addresses: List[int], lengths: List[int],
                             opcode: TransferOpcode, transport_hint: str = "") -> int:
        """Start a batch; returns its id (> 0) or 0 on failure."""
        op = int(TransferOpcode(opcode))
        locals_ = [_addr(b, "buffers[i]") for b in buffers]
        remotes = [_addr(p, "peer_buffer_addresses[i]") for p in peer_buffer_addresses]
        lens = [_len(n, "lengths[i]") for n in lengths]
        n = len(locals_)
        if n == 0 or not n == len(remotes) == len(lens):
            return 0
        e = self._e
        if e is None:
            return 0
        batch = 0
        try:
            h = self._segment(target_hostname)
            batch = e.batch_create(n)
            e.batch_submit(batch, [(op, locals_[i], h, remotes[i], lens[i]) for i in range(n)])
        except CrescentError as err:
            log.debug("async transfer to %s failed: %s", target_hostname, err)
            if batch:
                try:
                    e.batch_free(batch)
                except CrescentError:
                    pass
            return 0
        with self._lock:
            self._batches[batch] = n
        return batch

    def batch_transfer_async_write(self, target_hostname: str, buffers: List[int],
                                   peer_buffer_addresses: List[int], lengths: List[int],
                                   transport_hint: str = "") -> int:
        return self.batch_transfer_async(target_hostname, buffers, peer_buffer_addresses,
                                         lengths, TransferOpcode.Write)

    def batch_transfer_async_read(self, target_hostname: str, buffers: List[int],
                                  peer_buffer_addresses: List[int], lengths: List[int],
                                  transport_hint: str = "") -> int:
        return self.batch_transfer_async(target_hostname, buffers, peer_buffer_addresses,
                                         lengths, TransferOpcode.Read)

    def transfer_submit_write(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                              length: int, transport_hint: str = "") -> int:
        """Start one WRITE; returns a batch id for transfer_check_status, or 0."""
        return self.batch_transfer_async(target_hostname, [buffer], [peer_buffer_address],
                                         [length], TransferOpcode.Write)

    def _take_batch(self, batch_id: int) -> Optional[int]:
        with self._lock:
            return self._batches.pop(batch_id, None)

    def _free_batch(self, batch_id: int) -> None:
        e = self._e
        if e is not None:
            try:
                e.batch_free(batch_id)
            except CrescentError:
                pass

    def transfer_check_status(self, batch_id: int) -> int:
        """1 done (batch freed), 0 running, -1 failed (freed), -2 timed out (freed)."""
        bid = _len(batch_id, "batch_id")
        with self._lock:
            n = self._batches.get(bid)
        e = self._e
        if n is None or e is None:
            return -1
        result = 1
        try:
            for i in range(n):
                state, _err, _done = e.batch_task_status(bid, i)
                if state == _crescent.TASK_TIMEOUT:
                    result = -2
                    break
                if state in (_crescent.TASK_FAILED, _crescent.TASK_CANCELED,
                             _crescent.TASK_INVALID):
                    result = -1
                    break
                if state != _crescent.TASK_COMPLETED:
                    result = 0
        except CrescentError:
            result = -1
        if result != 0 and self._take_batch(bid) is not None:
            self._free_batch(bid)
        return result

    def get_batch_transfer_status(self, batch_ids: List[int]) -> int:
        """Wait for every batch; 0 if all completed, else -1. The ids are freed."""
        rc = 0
        e = self._e
        for b in batch_ids:
            bid = _len(b, "batch_ids[i]")
            if self._take_batch(bid) is None or e is None:
                rc = -1
                continue
            try:
                e.batch_wait(bid, -1)
            except CrescentError:
                rc = -1
            self._free_batch(bid)
        return rc

    # ------------------------------------------------------------------ notifications
    def get_notifies(self) -> List[TransferNotify]:
        """Drain received notifications."""
        e = self._e
        if e is None:
            return []
        try:
            got = e.take_notifications()
        except CrescentError:
            return []
        out = []
        for sender, payload in got:
            if payload.startswith(_NOTIFY_MAGIC):
                name, _, msg = payload[len(_NOTIFY_MAGIC):].partition(b"\x00")
                out.append(TransferNotify(name.decode(errors="replace"),
                                          msg.decode(errors="replace")))
            else:
                out.append(TransferNotify(sender, payload.decode(errors="replace")))
        return out

    # ------------------------------------------------------------------ GPU-only paths
    def _no_cuda(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("CUDA stream transfers are not available in crescent")

    transfer_write_on_cuda = _no_cuda
    transfer_read_on_cuda = _no_cuda
    batch_transfer_write_on_cuda = _no_cuda
    batch_transfer_read_on_cuda = _no_cuda

    def __repr__(self) -> str:
        e = self._e
        return f"<TransferEngine {e.segment_name if e else '(not initialized)'}>"

