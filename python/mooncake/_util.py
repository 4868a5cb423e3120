"""Helpers shared by mooncake.store and mooncake.engine (not public API).

* ``Registrations`` -- Mooncake lets callers register the same or overlapping
  memory several times (TransferQueue's worker threads register merged
  regions that may be adjacent, identical or overlapping); crescent's engine
  refuses overlapping ranges. This table keeps what callers registered
  ("logical" ranges) apart from what is registered with crescent
  ("physical" ranges, disjoint, reference-counted): a range inside an
  existing physical range only takes a reference; the uncovered gaps of a
  partially overlapping range are registered as new physical ranges. A
  physical range is unregistered when its last reference goes.
* Translation of Mooncake's protocol / metadata-server strings and
  environment variables into crescent's configuration.
"""

from __future__ import annotations

import bisect
import logging
import os
import socket
import threading
from typing import Callable, Dict, List, Optional, Tuple

log = logging.getLogger("mooncake")

# --- environment -----------------------------------------------------------------

_GLOG_TO_CRESCENT = {"TRACE": "debug", "DEBUG": "debug", "INFO": "info", "WARNING": "warn",
                     "WARN": "warn", "ERROR": "error", "FATAL": "error"}


def apply_log_env() -> None:
    """Map MC_LOG_LEVEL (glog names) onto CRESCENT_LOG unless that is set."""
    level = os.environ.get("MC_LOG_LEVEL", "").strip().upper()
    if level and "CRESCENT_LOG" not in os.environ and level in _GLOG_TO_CRESCENT:
        os.environ["CRESCENT_LOG"] = _GLOG_TO_CRESCENT[level]


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def transfer_timeout_ms() -> int:
    """MC_TRANSFER_TIMEOUT (seconds, at least 5; default 30) in milliseconds."""
    text = os.environ.get("MC_TRANSFER_TIMEOUT", "").strip()
    try:
        seconds = int(text) if text else 30
    except ValueError:
        log.warning("MC_TRANSFER_TIMEOUT=%r is not an integer; using 30 s", text)
        seconds = 30
    return max(seconds, 5) * 1000


# --- hosts ------------------------------------------------------------------------


def has_port(host: str) -> bool:
    """Does "host:port" / "[v6]:port" carry a port?"""
    if host.startswith("["):
        return "]:" in host
    return host.count(":") == 1


def free_port(host: str) -> int:
    """A port the kernel considers free on `host` (0 if none could be probed)."""
    addr = host.strip("[]")
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((addr, 0))
            except OSError:
                s.bind(("", 0))
            return s.getsockname()[1]
    except OSError:
        return 0


# --- protocol / metadata -----------------------------------------------------------

# Transports crescent has no equivalent for; asking for them is an error.
_UNSUPPORTED_PROTOCOLS = {"efa", "cxi", "cxl", "ascend", "hccs", "nvlink", "nvlink_intra",
                          "hip", "musa", "xgmi", "barex", "ubshmem", "nvmeof", "mnnvl"}


def engine_protocol(protocol: Optional[str]) -> Tuple[Optional[str], str]:
    """Map a Mooncake protocol onto crescent's: (protocol or None, why-not).

    "tcp" stays tcp (sockets only, also between processes of one host), as
    does anything when MC_FORCE_TCP is set. "rdma" (and "" / "auto") become
    crescent's "auto": the fastest path crescent has for each pair of buffers
    (memcpy, shared memory or process_vm_* on one host, tcp between hosts);
    crescent has no RDMA transport. "shm" is crescent's same-host-only mode.
    Hardware-specific transports are refused.
    """
    p = (protocol or "").strip().lower()
    if env_flag("MC_FORCE_TCP"):
        return "tcp", ""
    if p == "tcp":
        return "tcp", ""
    if p in ("", "auto", "rdma"):
        return "auto", ""
    if p == "shm":
        return "shm", ""
    if p in _UNSUPPORTED_PROTOCOLS:
        return None, f"protocol '{protocol}' is not available in crescent (use tcp or rdma)"
    return None, f"unknown protocol '{protocol}'"


def metadata_server(value: Optional[str]) -> Tuple[Optional[str], str]:
    """Map a Mooncake metadata-server string onto crescent's: (value or None, why-not).

    "P2PHANDSHAKE" and http(s):// URLs are supported. "" uses MC_METADATA_SERVER
    (default P2PHANDSHAKE). etcd://, redis:// and bare "host:port" (etcd in
    Mooncake) are not: crescent has only P2P handshakes and HTTP metadata.
    """
    v = (value or "").strip()
    if not v:
        v = os.environ.get("MC_METADATA_SERVER", "").strip() or "P2PHANDSHAKE"
    if v.upper() == "P2PHANDSHAKE":
        return "P2PHANDSHAKE", ""
    if v.startswith("http://") or v.startswith("https://"):
        return v, ""
    if v.startswith("etcd://") or v.startswith("redis://"):
        return None, f"metadata server '{v}': crescent supports P2PHANDSHAKE and http:// only"
    return None, (f"metadata server '{v}' would be etcd in Mooncake; crescent supports "
                  "P2PHANDSHAKE and http://host:port/metadata only")


# --- registrations ---------------------------------------------------------------


class Registrations:
    """Reference-counted registrations tolerating duplicates and overlaps.

    ``do_register(addr, size) -> int`` and ``do_unregister(addr) -> int``
    perform the physical calls and return 0 or a negative code. All methods
    are serialised by one lock (registrations are rare and quick).
    """

    def __init__(self, do_register: Callable[[int, int], int],
                 do_unregister: Callable[[int], int]) -> None:
        self._reg = do_register
        self._unreg = do_unregister
        self._lock = threading.Lock()
        self._starts: List[int] = []  # sorted starts of physical ranges
        self._phys: Dict[int, List[int]] = {}  # start -> [end, refcount]
        self._logical: Dict[int, List[List[int]]] = {}  # start -> stack of piece-start lists
        self._order: List[int] = []  # physical starts in registration order

    def _overlapping(self, start: int, end: int) -> List[int]:
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0:
            i = 0
        out = []
        while i < len(self._starts) and self._starts[i] < end:
            s = self._starts[i]
            if self._phys[s][0] > start:
                out.append(s)
            i += 1
        return out

    def _add_phys(self, start: int, end: int) -> int:
        rc = self._reg(start, end - start)
        if rc == 0:
            bisect.insort(self._starts, start)
            self._phys[start] = [end, 1]
            self._order.append(start)
        return rc

    def register(self, addr: int, size: int) -> int:
        if size <= 0 or addr <= 0:
            return -600
        end = addr + size
        with self._lock:
            over = self._overlapping(addr, end)
            pieces: List[int] = []
            # Covered by one existing range: just take a reference.
            if len(over) == 1 and over[0] <= addr and self._phys[over[0]][0] >= end:
                self._phys[over[0]][1] += 1
                pieces.append(over[0])
            else:
                # Register the gaps between existing ranges, reference the rest.
                cursor = addr
                new: List[int] = []
                for s in over:
                    e = self._phys[s][0]
                    if s > cursor:
                        rc = self._add_phys(cursor, s)
                        if rc != 0:
                            self._rollback(new, pieces)
                            return rc
                        new.append(cursor)
                    self._phys[s][1] += 1
                    pieces.append(s)
                    cursor = max(cursor, e)
                if cursor < end:
                    rc = self._add_phys(cursor, end)
                    if rc != 0:
                        self._rollback(new, pieces)
                        return rc
                    new.append(cursor)
                pieces.extend(new)
            self._logical.setdefault(addr, []).append(pieces)
            return 0

    def _rollback(self, new: List[int], referenced: List[int]) -> None:
        for s in referenced:
            self._phys[s][1] -= 1
        for s in new:
            self._drop(s)

    def _drop(self, start: int) -> int:
        rc = self._unreg(start)
        del self._phys[start]
        self._starts.remove(start)
        self._order.remove(start)
        return rc

    def unregister(self, addr: int) -> int:
        with self._lock:
            stack = self._logical.get(addr)
            if not stack:
                return -3003  # ERR_ADDRESS_NOT_REGISTERED
            pieces = stack.pop()
            if not stack:
                del self._logical[addr]
            rc = 0
            for s in pieces:
                ent = self._phys.get(s)
                if ent is None:
                    continue
                ent[1] -= 1
                if ent[1] == 0:
                    r = self._drop(s)
                    rc = rc or r
            return rc

    def contains(self, addr: int, size: int) -> bool:
        """Is [addr, addr+size) inside one physical registration?"""
        with self._lock:
            i = bisect.bisect_right(self._starts, addr) - 1
            if i < 0:
                return False
            s = self._starts[i]
            return addr >= s and addr + size <= self._phys[s][0]

    def span_end(self, addr: int) -> int:
        """End of the registered memory that contains addr, following adjacent
        physical pieces (an overlapping registration is split into such
        pieces); 0 when addr is not registered."""
        with self._lock:
            i = bisect.bisect_right(self._starts, addr) - 1
            if i < 0:
                return 0
            s = self._starts[i]
            end = self._phys[s][0]
            if addr >= end:
                return 0
            while i + 1 < len(self._starts) and self._starts[i + 1] == end:
                i += 1
                end = self._phys[self._starts[i]][0]
            return end

    def clear(self) -> None:
        with self._lock:
            self._starts.clear()
            self._phys.clear()
            self._logical.clear()
            self._order.clear()

    def first(self) -> int:
        """Start of the oldest physical registration still present, or 0."""
        with self._lock:
            return self._order[0] if self._order else 0
