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
import random
import socket
import threading
from collections import deque
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


def env_int(name: str, default: int, minimum: Optional[int] = None) -> int:
    """An integer environment variable; a malformed or too small value warns and
    gives the default (Mooncake's Environ::GetInt falls back the same way)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        v = int(text)
    except ValueError:
        log.warning("%s=%r is not an integer; using %d", name, text, default)
        return default
    if minimum is not None and v < minimum:
        log.warning("%s=%d is below %d; using %d", name, v, minimum, default)
        return default
    return v


_warned: set = set()
_warned_lock = threading.Lock()


def warn_once(key: str, fmt: str, *args: object) -> None:
    """Log a warning the first time `key` is seen in this process."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(fmt, *args)


# Environment variables of Mooncake deployments that mean nothing to crescent
# as they are: each is named once in a warning saying what crescent does
# instead (never silently ignored). Checked at TransferEngine.initialize and
# MooncakeDistributedStore.setup.
_ENV_NOTES = {
    "MC_TCP_BIND_ADDRESS": "crescent's engine binds and advertises the host of local_hostname; "
                           "put the address there (local_hostname='{value}')",
    "MC_HANDSHAKE_PORT": "crescent's engine has no separate handshake port: peers handshake on "
                         "its one RPC port (the port of get_rpc_port() / the segment name)",
    "MC_MMAP_ARENA_POOL_SIZE": "crescent has no mmap arena: segments and local buffers are memfd "
                               "mappings reserved with MAP_NORESERVE and committed page by page "
                               "when first written",
    "MC_STORE_MEMCPY": "crescent chooses the copy path from the protocol: 'rdma' (crescent's "
                       "'auto') copies within the process with memcpy and between processes "
                       "of one host through shared memory; 'tcp' uses sockets only",
}
_HUGEPAGE_SIZES = {"2MB", "2M", "2MIB", "1GB", "1G", "1GIB"}


def check_env(component: str) -> None:
    """Warn once about each Mooncake variable of this environment crescent does
    not act on (see _ENV_NOTES and the rules below)."""
    for name, note in _ENV_NOTES.items():
        value = os.environ.get(name)
        if value is not None and value.strip():
            warn_once("env:" + name, "%s: %s=%r is not used by crescent: %s", component, name,
                      value, note.format(value=value))
    if env_flag("MC_USE_IPV6"):
        warn_once("env:MC_USE_IPV6", "%s: MC_USE_IPV6 is not used by crescent: the address "
                  "family follows local_hostname (give an IPv6 address such as [::1] or a name "
                  "that resolves to one)", component)
    hp = os.environ.get("MC_STORE_USE_HUGEPAGE", "").strip()
    if hp and hp.lower() not in ("0", "false", "no", "off"):
        warn_once("env:MC_STORE_USE_HUGEPAGE", "%s: MC_STORE_USE_HUGEPAGE=%r is not used by "
                  "crescent: it allocates no HugeTLB pages; segments are memfd-backed, 2 MiB "
                  "aligned and use transparent huge pages where the kernel enables them",
                  component, hp)
    size = os.environ.get("MC_STORE_HUGEPAGE_SIZE", "").strip()
    if size:
        extra = "" if size.upper() in _HUGEPAGE_SIZES else " (and is not 2MB or 1GB)"
        warn_once("env:MC_STORE_HUGEPAGE_SIZE", "%s: MC_STORE_HUGEPAGE_SIZE=%r is not used by "
                  "crescent%s: no HugeTLB pages are allocated", component, size, extra)
    interval = os.environ.get("MC_STORE_CLIENT_METRIC_INTERVAL", "").strip()
    metric = os.environ.get("MC_STORE_CLIENT_METRIC", "").strip()
    if component == "store" and (interval not in ("", "0") or
                                 metric.lower() in ("1", "true", "yes", "on")):
        warn_once("env:MC_STORE_CLIENT_METRIC", "store: MC_STORE_CLIENT_METRIC=%r / "
                  "MC_STORE_CLIENT_METRIC_INTERVAL=%r: crescent's store client keeps no metrics "
                  "of its own; the master's /metrics has per-operation counters and MC_TE_METRIC "
                  "reports the client's transfer throughput", metric, interval)


class MetricReporter:
    """MC_TE_METRIC: log the transfer throughput of an engine every
    MC_TE_METRIC_INTERVAL_SECONDS (default 5), as Mooncake's engine does.

    `stats` returns a dict of monotonic counters (Engine.stats()). A daemon
    thread; stop() ends it (and is idempotent)."""

    _BYTES = ("bytes_local", "bytes_shm", "bytes_cma", "bytes_tcp")

    def __init__(self, name: str, stats: Callable[[], Dict[str, int]]) -> None:
        self._name = name
        self._stats = stats
        self._stop = threading.Event()
        self.interval = env_int("MC_TE_METRIC_INTERVAL_SECONDS", 5, minimum=1)
        self._thread = threading.Thread(target=self._run, name="mooncake-te-metric",
                                        daemon=True)
        self._thread.start()

    @staticmethod
    def wanted() -> bool:
        return env_flag("MC_TE_METRIC")

    def _snapshot(self) -> Tuple[int, int, int]:
        st = self._stats()
        return (sum(int(st.get(k, 0)) for k in self._BYTES), int(st.get("tasks_completed", 0)),
                int(st.get("tasks_failed", 0)))

    def _run(self) -> None:
        try:
            prev = self._snapshot()
        except Exception:  # noqa: BLE001 - engine closed before the first tick
            return
        while not self._stop.wait(self.interval):
            try:
                cur = self._snapshot()
            except Exception:  # noqa: BLE001 - engine closed: stop reporting
                return
            moved, done, failed = (c - p for c, p in zip(cur, prev))
            prev = cur
            log.info("[Metrics] Transfer Engine %s: throughput %.2f MB/s, %d tasks completed, "
                     "%d failed in the last %d s", self._name, moved / self.interval / 2**20,
                     done, failed, self.interval)

    def stop(self) -> None:
        self._stop.set()


# --- hosts ------------------------------------------------------------------------

# Ports crescent may pick without being told one: Mooncake's ranges.
STORE_PORT_RANGE = (12300, 14300)  # MC_STORE_CLIENT_MIN_PORT / MC_STORE_CLIENT_MAX_PORT
RPC_PORT_RANGE = (15000, 17000)  # MC_MIN_RPC_PORT / MC_MAX_RPC_PORT


def _valid_port(p: int) -> bool:
    return 1024 <= p <= 65535 and not 32768 <= p <= 60999


def port_range(min_names: Tuple[str, ...], max_names: Tuple[str, ...],
               default: Tuple[int, int]) -> Tuple[int, int]:
    """The port range from the first set variable of each list (else the
    default), validated as Mooncake validates it: both ends in 1024..65535
    outside the kernel's ephemeral range 32768..60999 and min <= max, else
    a warning and the default."""
    def first(names: Tuple[str, ...], dflt: int) -> int:
        for n in names:
            text = os.environ.get(n, "").strip()
            if text:
                try:
                    return int(text)
                except ValueError:
                    return -1
        return dflt

    lo, hi = first(min_names, default[0]), first(max_names, default[1])
    if not (_valid_port(lo) and _valid_port(hi) and lo <= hi):
        warn_once("ports:" + min_names[0], "invalid port range [%d, %d] from %s/%s; using "
                  "[%d, %d]", lo, hi, min_names[0], max_names[0], default[0], default[1])
        return default
    return lo, hi


def store_port_range() -> Tuple[int, int]:
    return port_range(("MC_STORE_CLIENT_MIN_PORT",), ("MC_STORE_CLIENT_MAX_PORT",),
                      STORE_PORT_RANGE)


def rpc_port_range() -> Tuple[int, int]:
    return port_range(("MC_MIN_RPC_PORT", "MC_MIN_PRC_PORT"),
                      ("MC_MAX_RPC_PORT", "MC_MAX_PRC_PORT"), RPC_PORT_RANGE)


# Ports this process picked lately. A store set up again in the same process
# would otherwise now and then (1 in ~2000) get its previous segment's name
# back over the same memory, and the master fences such a segment while reads
# of the previous one may still run (its puts fail with NO_AVAILABLE_HANDLE
# for up to a lease). The range's last picks are avoided: up to 64, and all
# but one of a smaller range (whose ports then go round, least recent first).
_recent_ports: "deque[int]" = deque(maxlen=64)
_recent_lock = threading.Lock()


def pick_port(host: str, lo: int, hi: int, attempts: int = 500) -> int:
    """A random port in [lo, hi] that can be bound on `host` right now (as
    Mooncake's port binders choose), not one of this process's last picks in
    the range (up to 64, all but one of a smaller range) while the first half
    of the tries lasts; 0 if `attempts` tries found none. The probe socket is
    closed again, so the caller must retry if someone else takes the port
    before it binds."""
    addr = host.strip("[]")
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    rng = random.SystemRandom()
    with _recent_lock:
        lately = [p for p in _recent_ports if lo <= p <= hi]
    keep_off = min(64, hi - lo)
    recent = set(lately[-keep_off:]) if keep_off > 0 else set()
    for attempt in range(attempts):
        port = rng.randint(lo, hi)
        if port in recent and attempt < attempts // 2:
            continue
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((addr, port))
                except socket.gaierror:
                    s.bind(("", port))
            with _recent_lock:
                _recent_ports.append(port)
            return port
        except OSError:
            continue
    return 0



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
    (memcpy, shared memory or process_vm_* on one host, UCX where it reports
    an RDMA-capable device, tcp otherwise). "shm" is crescent's same-host-only
    mode. "ucx" is crescent's UCX transport (not a Mooncake name): UCX's own
    transports as UCX_TLS selects them; a build without UCX refuses it at
    initialize. Other hardware-specific transports are refused.
    """
    p = (protocol or "").strip().lower()
    if env_flag("MC_FORCE_TCP"):
        return "tcp", ""
    if p == "tcp":
        return "tcp", ""
    if p in ("", "auto", "rdma"):
        return "auto", ""
    if p in ("shm", "ucx"):
        return p, ""
    if p in _UNSUPPORTED_PROTOCOLS:
        return None, f"protocol '{protocol}' is not available in crescent (use tcp or rdma)"
    return None, f"unknown protocol '{protocol}'"


_METADATA_SCHEMES = ("http://", "https://", "etcd://", "redis://")


def metadata_server(value: Optional[str]) -> Tuple[Optional[str], str]:
    """Map a Mooncake metadata-server string onto crescent's: (value or None, why-not).

    "" uses MC_METADATA_SERVER (default P2PHANDSHAKE). "P2PHANDSHAKE" (any
    case), http(s)://, etcd://h:p[,h:p...], redis://h:p and a bare
    "h:p[,h:p...]" (etcd, Mooncake's default scheme) go to the C library,
    which checks the form and connects (initialize then fails with -1 and a
    logged reason when the server cannot be reached). Another scheme is
    refused here, naming the supported ones.
    """
    v = (value or "").strip()
    if not v:
        v = os.environ.get("MC_METADATA_SERVER", "").strip() or "P2PHANDSHAKE"
    if v.upper() == "P2PHANDSHAKE":
        return "P2PHANDSHAKE", ""
    if v.startswith(_METADATA_SCHEMES) or "://" not in v:
        return v, ""
    return None, (f"metadata server '{v}': unknown scheme; crescent supports P2PHANDSHAKE, "
                  "http://, etcd://h:p[,h:p], h:p (etcd) and redis://h:p")


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
