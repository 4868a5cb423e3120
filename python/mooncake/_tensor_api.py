"""The tensor methods of ``MooncakeDistributedStore`` (a mixin; see store.py).

Each tensor is one store object in the layout of ``mooncake.tensor_format``
(header, then the raw bytes). Conventions, following Mooncake's bindings:

* writes return ``int`` (0 or a negative ErrorCode), batch writes one int per
  key; reads return a ``torch.Tensor`` or ``None`` (on a miss or any error,
  logged), batch reads one of those per key;
* tensors must live in CPU memory: a tensor on another device raises
  ``TypeError`` (crescent has no GPU path); a non-contiguous tensor is made
  contiguous first (one copy); a dtype outside the format raises ``TypeError``;
  a non-tensor raises ``TypeError``;
* a put copies the tensor's bytes once, straight from its memory into the
  store's staging buffer (``put_parts`` of the header and the tensor, no
  intermediate ``bytes``); a get returns a tensor viewing the fetched object
  (no second copy); ``get_tensor_into`` returns a tensor viewing the caller's
  buffer;
* tensor parallelism: ``*_with_tp`` cut the tensor with ``torch.chunk(tp_size,
  split_dim)`` and write **every** shard, shard ``r`` under
  ``key + "_tp_" + str(r)`` (the writer holds the whole tensor; ``tp_rank`` is
  only range-checked); the reads fetch shard ``tp_rank``. ``tp_size == 1``
  means the plain key. A split that cannot give ``tp_size`` shards, or
  ``tp_rank`` / ``split_dim`` out of range, is ``-600``.
* multi-axis parallelism: ``*_with_parallelism`` take a ``TensorParallelism``
  (up to 4 ``ParallelAxis(dim, size, rank)`` on distinct dimensions). The
  writer cuts the whole tensor along each axis in turn (``torch.chunk``) and
  stores every shard under ``key + "_tp_" + "_".join(ranks)`` (for one axis
  the same key as ``*_with_tp``); a read with ``ReadTarget.LOCAL`` returns the
  shard at the axes' ranks, with ``ReadTarget.GLOBAL`` it fetches every shard
  and reassembles the whole tensor. These classes are crescent's (Mooncake's
  have the same names; their exact fields are not part of the API contract
  crescent follows).
"""

from __future__ import annotations

import logging
import operator
from typing import Any, List, Optional, Tuple

from . import tensor_format as tf

log = logging.getLogger("mooncake")

_INTERNAL_ERROR = -1
_INVALID_PARAMS = -600
_OBJECT_NOT_FOUND = -704
_FILE_NOT_FOUND = -1100
_FILE_READ_FAIL = -1102
_FILE_WRITE_FAIL = -1103


def tp_key(key: str, rank: int) -> str:
    """Key of shard ``rank`` of a tensor-parallel tensor (Mooncake's naming)."""
    return f"{key}_tp_{rank}"


def _int(v: Any, what: str) -> int:
    if v is None or isinstance(v, bool):
        raise TypeError(f"{what} must be an int, not {type(v).__name__}")
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(v).__name__}") from None


class _TP:
    """Checked (tp_rank, tp_size, split_dim)."""

    def __init__(self, tp_rank: Any, tp_size: Any, split_dim: Any) -> None:
        self.rank = _int(tp_rank, "tp_rank")
        self.size = _int(tp_size, "tp_size")
        self.dim = _int(split_dim, "split_dim")

    def error(self) -> Optional[str]:
        if self.size < 1:
            return f"tp_size {self.size} is below 1"
        if not 0 <= self.rank < self.size:
            return f"tp_rank {self.rank} is outside [0, {self.size})"
        return None

    def shards(self, t: Any) -> List[Tuple[Any, bytes]]:
        """[(shard tensor, header)] for every rank; ValueError if it cannot be split."""
        nd = t.dim()
        if not -nd <= self.dim < nd:
            raise ValueError(f"split_dim {self.dim} is out of range for a {nd}-d tensor")
        dim = self.dim % nd
        parts = t.chunk(self.size, dim)
        if len(parts) != self.size:
            raise ValueError(f"dimension {dim} of size {t.shape[dim]} cannot be cut in "
                             f"{self.size} shards")
        out = []
        for r, p in enumerate(parts):
            p = p.contiguous()
            out.append((p, tf.tensor_header(p, tuple(t.shape),
                                            (tf.Axis(dim, r, self.size),))))
        return out


class ParallelAxis:
    """One split axis: tensor dimension ``dim`` cut in ``size`` shards; ``rank``
    selects this process's shard."""

    __slots__ = ("dim", "size", "rank")

    def __init__(self, dim: int = 0, size: int = 1, rank: int = 0) -> None:
        self.dim = _int(dim, "ParallelAxis.dim")
        self.size = _int(size, "ParallelAxis.size")
        self.rank = _int(rank, "ParallelAxis.rank")

    def __repr__(self) -> str:
        return f"ParallelAxis(dim={self.dim}, size={self.size}, rank={self.rank})"


class TensorParallelism:
    """The split axes of a tensor (1 to 4 ParallelAxis on distinct dimensions)."""

    def __init__(self, axes: Any = ()) -> None:
        if isinstance(axes, ParallelAxis):
            axes = [axes]
        self.axes: List[ParallelAxis] = list(axes)
        for a in self.axes:
            if not isinstance(a, ParallelAxis):
                raise TypeError(f"axes must be ParallelAxis, not {type(a).__name__}")

    def __repr__(self) -> str:
        return f"TensorParallelism({self.axes!r})"


class ReadTarget:
    LOCAL = 0  #: the shard at the axes' ranks
    GLOBAL = 1  #: every shard, reassembled into the whole tensor


def _par_check(par: Any, ndim: Optional[int]) -> Optional[str]:
    if not isinstance(par, TensorParallelism):
        raise TypeError(f"parallelism must be a TensorParallelism, not {type(par).__name__}")
    if not 1 <= len(par.axes) <= tf.MAX_AXES:
        return f"1 to {tf.MAX_AXES} axes are needed, not {len(par.axes)}"
    dims = []
    for a in par.axes:
        if a.size < 1 or not 0 <= a.rank < a.size:
            return f"{a} has a bad size or rank"
        if ndim is not None:
            if not -ndim <= a.dim < ndim:
                return f"{a} is out of range for a {ndim}-d tensor"
            dims.append(a.dim % ndim)
    if len(set(dims)) != len(dims):
        return "two axes split the same dimension"
    return None


def _par_key(key: str, ranks: Tuple[int, ...]) -> str:
    return key + "_tp_" + "_".join(str(r) for r in ranks)


def _all_ranks(par: "TensorParallelism") -> List[Tuple[int, ...]]:
    out: List[Tuple[int, ...]] = [()]
    for a in par.axes:
        out = [p + (r,) for p in out for r in range(a.size)]
    return out


class TensorMixin:
    """Tensor APIs on top of put_parts / get_buffer / get_into / put_from."""

    # Provided by MooncakeDistributedStore.
    _s: Any
    _regs: Any

    # ------------------------------------------------------------------ writes
    def _put_one(self, mode: str, key: Any, tensor: Any, config: Any) -> int:
        t = tf._check_tensor(tensor)
        fn = self.upsert_parts if mode == "upsert" else self.put_parts  # type: ignore[attr-defined]
        return fn(key, tf.tensor_header(t), t, config=config)

    def _put_many(self, mode: str, keys: Any, tensors: Any, config: Any) -> List[int]:
        keys, tensors = list(keys), list(tensors)
        if len(keys) != len(tensors):
            log.error("batch tensor put: %d keys but %d tensors", len(keys), len(tensors))
            return [_INVALID_PARAMS] * len(keys)
        checked = [tf._check_tensor(t) for t in tensors]  # all type errors before any write
        return [self._put_one(mode, k, t, config) for k, t in zip(keys, checked)]

    def put_tensor(self, key: str, tensor: Any) -> int:
        """Store a CPU tensor under key (an existing key is kept, returns 0, like put)."""
        return self._put_one("put", key, tensor, None)

    def upsert_tensor(self, key: str, tensor: Any) -> int:
        """Insert or replace a tensor."""
        return self._put_one("upsert", key, tensor, None)

    def pub_tensor(self, key: str, tensor: Any, config: Any = None) -> int:
        """put_tensor with a ReplicateConfig (replicas, pins, preferred segments)."""
        return self._put_one("put", key, tensor, config)

    def batch_put_tensor(self, keys: List[str], tensors: List[Any]) -> List[int]:
        """put_tensor per key; 0 or negative per key (-600 for each if lengths differ)."""
        return self._put_many("put", keys, tensors, None)

    def batch_upsert_tensor(self, keys: List[str], tensors: List[Any]) -> List[int]:
        return self._put_many("upsert", keys, tensors, None)

    def batch_pub_tensor(self, keys: List[str], tensors: List[Any],
                         config: Any = None) -> List[int]:
        return self._put_many("put", keys, tensors, config)

    # ------------------------------------------------------------------ tensor parallel writes
    def _put_tp(self, mode: str, key: Any, tensor: Any, tp: _TP, config: Any) -> int:
        why = tp.error()
        if why:
            log.error("tensor put with tp: %s", why)
            return _INVALID_PARAMS
        if tp.size <= 1:
            return self._put_one(mode, key, tensor, config)
        t = tf._check_tensor(tensor)
        if not isinstance(key, str):
            raise TypeError(f"key must be str, not {type(key).__name__}")
        try:
            shards = tp.shards(t)
        except ValueError as e:
            log.error("tensor put with tp: %s", e)
            return _INVALID_PARAMS
        fn = self.upsert_parts if mode == "upsert" else self.put_parts  # type: ignore[attr-defined]
        rc = 0
        for r, (p, header) in enumerate(shards):
            res = fn(tp_key(key, r), header, p, config=config)
            if res < 0 and rc == 0:
                rc = res
        return rc

    def _put_tp_many(self, mode: str, keys: Any, tensors: Any, tp: _TP,
                     config: Any) -> List[int]:
        keys, tensors = list(keys), list(tensors)
        if len(keys) != len(tensors):
            return [_INVALID_PARAMS] * len(keys)
        for t in tensors:
            tf._check_tensor(t)
        return [self._put_tp(mode, k, t, tp, config) for k, t in zip(keys, tensors)]

    def put_tensor_with_tp(self, key: str, tensor: Any, tp_rank: int = 0, tp_size: int = 1,
                           split_dim: int = 0) -> int:
        """Cut tensor in tp_size shards along split_dim; store shard r at key_tp_r."""
        return self._put_tp("put", key, tensor, _TP(tp_rank, tp_size, split_dim), None)

    def upsert_tensor_with_tp(self, key: str, tensor: Any, tp_rank: int = 0,
                              tp_size: int = 1, split_dim: int = 0) -> int:
        return self._put_tp("upsert", key, tensor, _TP(tp_rank, tp_size, split_dim), None)

    def pub_tensor_with_tp(self, key: str, tensor: Any, config: Any = None, tp_rank: int = 0,
                           tp_size: int = 1, split_dim: int = 0) -> int:
        return self._put_tp("put", key, tensor, _TP(tp_rank, tp_size, split_dim), config)

    def batch_put_tensor_with_tp(self, base_keys: List[str], tensors: List[Any],
                                 tp_rank: int = 0, tp_size: int = 1,
                                 split_dim: int = 0) -> List[int]:
        return self._put_tp_many("put", base_keys, tensors, _TP(tp_rank, tp_size, split_dim),
                                 None)

    def batch_upsert_tensor_with_tp(self, base_keys: List[str], tensors: List[Any],
                                    tp_rank: int = 0, tp_size: int = 1,
                                    split_dim: int = 0) -> List[int]:
        return self._put_tp_many("upsert", base_keys, tensors,
                                 _TP(tp_rank, tp_size, split_dim), None)

    def batch_pub_tensor_with_tp(self, base_keys: List[str], tensors: List[Any],
                                 config: Any = None, tp_rank: int = 0, tp_size: int = 1,
                                 split_dim: int = 0) -> List[int]:
        return self._put_tp_many("put", base_keys, tensors, _TP(tp_rank, tp_size, split_dim),
                                 config)

    # ------------------------------------------------------------------ multi-axis parallelism
    def _put_par(self, mode: str, key: Any, tensor: Any, par: Any, config: Any) -> int:
        t = tf._check_tensor(tensor)
        if not isinstance(key, str):
            raise TypeError(f"key must be str, not {type(key).__name__}")
        why = _par_check(par, t.dim())
        if why:
            log.error("tensor put with parallelism: %s", why)
            return _INVALID_PARAMS
        nd = t.dim()
        dims = [a.dim % nd for a in par.axes]
        shards = {(): t}
        for a, dim in zip(par.axes, dims):
            nxt = {}
            for ranks, p in shards.items():
                parts = p.chunk(a.size, dim)
                if len(parts) != a.size:
                    log.error("tensor put with parallelism: dimension %d cannot be cut in %d "
                              "shards", dim, a.size)
                    return _INVALID_PARAMS
                for r, q in enumerate(parts):
                    nxt[ranks + (r,)] = q
            shards = nxt
        fn = self.upsert_parts if mode == "upsert" else self.put_parts  # type: ignore[attr-defined]
        rc = 0
        for ranks, p in shards.items():
            p = p.contiguous()
            axes = tuple(tf.Axis(d, r, a.size) for d, r, a in zip(dims, ranks, par.axes))
            res = fn(_par_key(key, ranks), tf.tensor_header(p, tuple(t.shape), axes), p,
                     config=config)
            if res < 0 and rc == 0:
                rc = res
        return rc

    def put_tensor_with_parallelism(self, key: str, tensor: Any, parallelism: Any,
                                    config: Any = None) -> int:
        """Cut tensor along every axis of parallelism; store all shards."""
        return self._put_par("put", key, tensor, parallelism, config)

    def upsert_tensor_with_parallelism(self, key: str, tensor: Any, parallelism: Any,
                                       config: Any = None) -> int:
        return self._put_par("upsert", key, tensor, parallelism, config)

    def batch_put_tensor_with_parallelism(self, keys: List[str], tensors: List[Any],
                                          parallelism: Any, config: Any = None) -> List[int]:
        keys, tensors = list(keys), list(tensors)
        if len(keys) != len(tensors):
            return [_INVALID_PARAMS] * len(keys)
        for t in tensors:
            tf._check_tensor(t)
        return [self._put_par("put", k, t, parallelism, config) for k, t in zip(keys, tensors)]

    def get_tensor_with_parallelism(self, key: str, parallelism: Any,
                                    target: int = ReadTarget.LOCAL) -> Any:
        """LOCAL: this rank's shard; GLOBAL: the reassembled tensor; None on failure."""
        return self.batch_get_tensor_with_parallelism([key], parallelism, target)[0]

    def batch_get_tensor_with_parallelism(self, keys: List[str], parallelism: Any,
                                          target: int = ReadTarget.LOCAL) -> List[Any]:
        torch = tf._torch()
        keys = list(keys)
        for k in keys:
            if not isinstance(k, str):
                raise TypeError(f"keys must be str, not {type(k).__name__}")
        if target not in (ReadTarget.LOCAL, ReadTarget.GLOBAL):
            raise ValueError(f"target must be ReadTarget.LOCAL or GLOBAL, not {target!r}")
        why = _par_check(parallelism, None)
        if why:
            log.error("get tensor with parallelism: %s", why)
            return [None] * len(keys)
        axes = parallelism.axes
        mine = tuple(a.rank for a in axes)
        wanted = [mine] if target == ReadTarget.LOCAL else _all_ranks(parallelism)
        names = [_par_key(k, r) for k in keys for r in wanted]
        handles = self.batch_get_buffer(names)  # type: ignore[attr-defined]
        out: List[Any] = []
        per = len(wanted)
        for i, k in enumerate(keys):
            got = {}
            for r, name, h in zip(wanted, names[i * per:(i + 1) * per],
                                  handles[i * per:(i + 1) * per]):
                t = self._decode(name, h)
                hdr = tf.decode_header(h) if t is not None else None
                if hdr is None or [(a.rank, a.size) for a in hdr.axes] != \
                        [(x, a.size) for x, a in zip(r, axes)]:
                    if t is not None:
                        log.error("get tensor '%s': shard does not match %r", name, parallelism)
                    got = None
                    break
                got[r] = (t, hdr)
            if got is None:
                out.append(None)
            elif target == ReadTarget.LOCAL:
                out.append(got[mine][0])
            else:
                dims = [a.dim for a in next(iter(got.values()))[1].axes]

                def build(prefix: Tuple[int, ...]) -> Any:
                    j = len(prefix)
                    if j == len(axes):
                        return got[prefix][0]
                    return torch.cat([build(prefix + (r,)) for r in range(axes[j].size)],
                                     dims[j])

                out.append(build(()))
        return out

    # ------------------------------------------------------------------ zero-copy writes
    def _check_serialized(self, fn: str, ptr: int, size: int) -> Optional[int]:
        """-600 if registered memory at ptr does not hold a serialized tensor."""
        regs = self._regs
        if regs is None or not regs.contains(ptr, size):
            return None  # not readable safely here; the store checks the registration
        try:
            tf.tensor_from_memory(ptr, size)
        except (tf.FormatError, TypeError) as e:
            log.error("%s: %s", fn, e)
            return _INVALID_PARAMS
        return None

    def put_tensor_from(self, key: str, buffer_ptr: int, size: int, config: Any = None) -> int:
        """Zero-copy put of an already serialized tensor (mooncake.tensor_format) that
        sits in registered memory."""
        from .store import _addr, _size
        ptr, n = _addr(buffer_ptr), _size(size)
        bad = self._check_serialized("put_tensor_from", ptr, n)
        if bad is not None:
            return bad
        return self.put_from(key, ptr, n, config)  # type: ignore[attr-defined]

    def upsert_tensor_from(self, key: str, buffer_ptr: int, size: int,
                           config: Any = None) -> int:
        from .store import _addr, _size
        ptr, n = _addr(buffer_ptr), _size(size)
        bad = self._check_serialized("upsert_tensor_from", ptr, n)
        if bad is not None:
            return bad
        return self.upsert_from(key, ptr, n, config)  # type: ignore[attr-defined]

    def _batch_tensor_from(self, fn: str, keys: Any, ptrs: Any, sizes: Any,
                           config: Any) -> List[int]:
        from .store import _addr, _size
        keys, ptrs, sizes = list(keys), list(ptrs), list(sizes)
        n = len(keys)
        if len(ptrs) != n or len(sizes) != n:
            return [_INVALID_PARAMS] * n
        ptrs = [_addr(p) for p in ptrs]
        sizes = [_size(s) for s in sizes]
        bad = [self._check_serialized(fn, p, s) for p, s in zip(ptrs, sizes)]
        todo = [i for i in range(n) if bad[i] is None]
        out: List[int] = [b if b is not None else 0 for b in bad]
        if todo:
            res = getattr(self, fn)([keys[i] for i in todo], [ptrs[i] for i in todo],
                                    [sizes[i] for i in todo], config)
            for i, r in zip(todo, res):
                out[i] = r
        return out

    def batch_put_tensor_from(self, keys: List[str], buffer_ptrs: List[int], sizes: List[int],
                              config: Any = None) -> List[int]:
        return self._batch_tensor_from("batch_put_from", keys, buffer_ptrs, sizes, config)

    def batch_upsert_tensor_from(self, keys: List[str], buffer_ptrs: List[int],
                                 sizes: List[int], config: Any = None) -> List[int]:
        return self._batch_tensor_from("batch_upsert_from", keys, buffer_ptrs, sizes, config)

    # ------------------------------------------------------------------ reads
    @staticmethod
    def _decode(key: Any, handle: Any, tp: Optional[_TP] = None) -> Any:
        if handle is None:
            return None
        try:
            h = tf.decode_header(handle)
            if tp is not None and tp.size > 1 and h.layout_kind == tf.LAYOUT_SHARD:
                a = h.axes[0]
                if (a.rank, a.size) != (tp.rank, tp.size) or \
                        a.dim != tp.dim % max(1, len(h.global_shape)):
                    raise tf.FormatError(f"shard is {a}, not rank {tp.rank} of {tp.size} "
                                         f"along {tp.dim}")
            return tf._from_buffer(handle, h)
        except (tf.FormatError, TypeError) as e:
            log.error("get tensor '%s': %s", key, e)
            return None

    def get_tensor(self, key: str) -> Any:
        """The tensor stored under key, or None (miss, not a tensor, any error)."""
        tf._torch()
        return self._decode(key, self.get_buffer(key))  # type: ignore[attr-defined]

    def batch_get_tensor(self, keys: List[str]) -> List[Any]:
        tf._torch()
        keys = list(keys)
        handles = self.batch_get_buffer(keys)  # type: ignore[attr-defined]
        return [self._decode(k, h) for k, h in zip(keys, handles)]

    def get_tensor_with_tp(self, key: str, tp_rank: int = 0, tp_size: int = 1,
                           split_dim: int = 0) -> Any:
        """Shard tp_rank of a tensor written by put_tensor_with_tp, or None."""
        return self.batch_get_tensor_with_tp([key], tp_rank, tp_size, split_dim)[0]

    def batch_get_tensor_with_tp(self, base_keys: List[str], tp_rank: int = 0,
                                 tp_size: int = 1, split_dim: int = 0) -> List[Any]:
        tf._torch()
        tp = _TP(tp_rank, tp_size, split_dim)
        base_keys = list(base_keys)
        why = tp.error()
        if why:
            log.error("get tensor with tp: %s", why)
            return [None] * len(base_keys)
        keys = [tp_key(k, tp.rank) if tp.size > 1 else k for k in base_keys]
        handles = self.batch_get_buffer(keys)  # type: ignore[attr-defined]
        return [self._decode(k, h, tp) for k, h in zip(keys, handles)]

    def _into(self, key: Any, n: int, ptr: int) -> Any:
        if n < 0:
            return None
        try:
            return tf.tensor_from_memory(ptr, n)
        except (tf.FormatError, TypeError) as e:
            log.error("get tensor into '%s': %s", key, e)
            return None

    def get_tensor_into(self, key: str, buffer_ptr: int, size: int) -> Any:
        """Read the object into registered memory; a tensor viewing that memory (its data
        part), or None. The caller keeps the buffer alive while the tensor is used."""
        from .store import _addr
        tf._torch()
        ptr = _addr(buffer_ptr)
        return self._into(key, self.get_into(key, ptr, size), ptr)  # type: ignore[attr-defined]

    def batch_get_tensor_into(self, keys: List[str], buffer_ptrs: List[int],
                              sizes: List[int]) -> List[Any]:
        from .store import _addr
        tf._torch()
        keys, buffer_ptrs = list(keys), list(buffer_ptrs)
        res = self.batch_get_into(keys, buffer_ptrs, sizes)  # type: ignore[attr-defined]
        if len(buffer_ptrs) != len(keys):
            return [None] * len(keys)
        return [self._into(k, n, _addr(p)) for k, n, p in zip(keys, res, buffer_ptrs)]

    def get_tensor_with_tp_into(self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0,
                                tp_size: int = 1, split_dim: int = 0) -> Any:
        return self.batch_get_tensor_with_tp_into([key], [buffer_ptr], [size], tp_rank,
                                                  tp_size, split_dim)[0]

    def batch_get_tensor_with_tp_into(self, base_keys: List[str], buffer_ptrs: List[int],
                                      sizes: List[int], tp_rank: int = 0, tp_size: int = 1,
                                      split_dim: int = 0) -> List[Any]:
        tp = _TP(tp_rank, tp_size, split_dim)
        base_keys = list(base_keys)
        why = tp.error()
        if why:
            log.error("get tensor with tp into: %s", why)
            return [None] * len(base_keys)
        keys = [tp_key(k, tp.rank) if tp.size > 1 else k for k in base_keys]
        return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)

    def get_tensor_into_cuda(self, key: str, tensor: Any) -> int:
        """Read the stored tensor ``key`` into the pre-allocated, contiguous CUDA
        tensor ``tensor`` (same dtype and number of bytes); its data bytes, or a
        negative code (-600 INVALID_PARAMS, -704 missing key)."""
        return self.batch_get_tensor_into_cuda([key], [tensor])[0]

    def batch_get_tensor_into_cuda(self, keys: List[str], tensors_list: List[Any]) -> List[int]:
        """get_tensor_into_cuda for each (key, tensor); one result per key."""
        torch = tf._torch()
        keys, tensors = list(keys), list(tensors_list)
        invalid = -600
        if len(keys) != len(tensors):
            log.error("batch_get_tensor_into_cuda: %d keys but %d tensors", len(keys),
                      len(tensors))
            return [invalid] * len(keys)
        out: List[int] = []
        for k, t in zip(keys, tensors):
            if not isinstance(t, torch.Tensor) or t.device.type != "cuda" or \
                    not t.is_contiguous():
                log.error("batch_get_tensor_into_cuda: destination for '%s' is not a "
                          "contiguous CUDA tensor", k)
                out.append(invalid)
                continue
            src = self.get_tensor(k)
            if src is None:
                out.append(-704 if self.is_exist(k) != 1 else invalid)  # type: ignore[attr-defined]
                continue
            nbytes = src.numel() * src.element_size()
            if src.dtype != t.dtype or nbytes != t.numel() * t.element_size():
                log.error("batch_get_tensor_into_cuda: '%s' holds %s of %d bytes, the "
                          "destination is %s of %d", k, src.dtype, nbytes, t.dtype,
                          t.numel() * t.element_size())
                out.append(invalid)
                continue
            if nbytes:
                t.view(-1).copy_(src.reshape(-1))
            out.append(nbytes)
        return out

    # ------------------------------------------------------------------ safetensors
    def save_tensor_to_safetensor(self, key: str, file_path: str) -> int:
        """Write the tensor stored under key to a safetensors file (one tensor named key).

        0, -704 when key is missing or holds no tensor, -1103 when the file
        cannot be written.
        """
        if not isinstance(file_path, (str, bytes)) and not hasattr(file_path, "__fspath__"):
            raise TypeError(f"file_path must be a path, not {type(file_path).__name__}")
        t = self.get_tensor(key)
        if t is None:
            return _OBJECT_NOT_FOUND
        try:
            tf.save_safetensors(file_path, {key: t}, {"format": "pt", "mooncake_key": key})
        except OSError as e:
            log.error("save_tensor_to_safetensor: %s", e)
            return _FILE_WRITE_FAIL
        return 0

    def load_tensor_from_safetensor(self, key: str, file_path: str, config: Any = None) -> int:
        """Store (upsert) a tensor of a safetensors file under key.

        The file's tensor named key is used, else its only tensor. 0, -1100
        missing file, -1102 unreadable or malformed file, -704 when the file
        has several tensors and none is named key, or the store's error.
        """
        if not isinstance(key, str):
            raise TypeError(f"key must be str, not {type(key).__name__}")
        if not isinstance(file_path, (str, bytes)) and not hasattr(file_path, "__fspath__"):
            raise TypeError(f"file_path must be a path, not {type(file_path).__name__}")
        try:
            tensors = tf.load_safetensors(file_path)
        except FileNotFoundError:
            return _FILE_NOT_FOUND
        except (OSError, tf.FormatError, TypeError) as e:
            log.error("load_tensor_from_safetensor: %s", e)
            return _FILE_READ_FAIL
        if key in tensors:
            t = tensors[key]
        elif len(tensors) == 1:
            t = next(iter(tensors.values()))
        else:
            log.error("load_tensor_from_safetensor: %s has %d tensors, none named '%s'",
                      file_path, len(tensors), key)
            return _OBJECT_NOT_FOUND
        return self._put_one("upsert", key, t, config)

