"""mooncake.tensor_format: how the tensor APIs lay a tensor out in one store object.

The ``*_tensor*`` methods of ``MooncakeDistributedStore`` store a tensor as a
header followed by the tensor's raw bytes, following the shape of Mooncake's
serialized-tensor format (magic, version, dtype enum). crescent fixes the
concrete byte layout below; every integer is **little-endian** (the format is
only written and read on little-endian hosts).

Fixed header, 32 bytes::

    offset size  field        meaning
    0      4     magic        u32 0x4d4f4f4e
    4      2     version      u16 1
    6      2     header_size  u16 32 (size of this fixed part)
    8      2     dtype        u16 element type, see DTYPES
    10     2     ndim         u16 number of dimensions, 0..8
    12     2     layout_kind  u16 0 = a whole tensor, 1 = one shard of a split tensor
    14     2     flags        u16 0 (reserved)
    16     8     data_offset  u64 offset of the first data byte in the object (multiple of 64)
    24     8     data_bytes   u64 number of data bytes (numel * element size)

Layout, right after the fixed header::

    shape         ndim x i64   shape of the stored tensor
    (layout_kind 1 only)
    global_shape  ndim x i64   shape of the tensor the shard was cut from
    n_axes        u32          number of split axes, 1..4
    reserved      u32          0
    axes          n_axes x {dim i32, rank u32, size u32, reserved u32}

then zero bytes up to ``data_offset`` and the elements in C (row-major)
order. The dtype enum (Mooncake's numbering)::

    FLOAT32=0 FLOAT64=1 INT8=2 UINT8=3 INT16=4 UINT16=5 INT32=6 UINT32=7
    INT64=8 UINT64=9 BOOL=10 FLOAT16=11 BFLOAT16=12 FLOAT8_E4M3=13 FLOAT8_E5M2=14

A dtype the local torch lacks (old releases have no uint16/32/64 or float8)
cannot be put, and an object holding one reads back as ``None``.

This module also reads and writes safetensors files (8-byte little-endian
header length, a JSON header, the data) without the ``safetensors`` package.

torch is imported lazily: the package works without it; only these functions
and the tensor methods need it.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

__all__ = ["MAGIC", "VERSION", "HEADER_SIZE", "DATA_ALIGN", "MAX_DIMS", "MAX_AXES", "DTYPES",
           "LAYOUT_WHOLE", "LAYOUT_SHARD", "TensorHeader", "Axis", "encode_header",
           "decode_header", "serialize_tensor", "serialized_size", "deserialize_tensor",
           "tensor_from_memory", "save_safetensors", "load_safetensors",
           "read_safetensors_header", "FormatError"]

MAGIC = 0x4D4F4F4E
VERSION = 1
HEADER_SIZE = 32
DATA_ALIGN = 64
MAX_DIMS = 8
MAX_AXES = 4
LAYOUT_WHOLE = 0
LAYOUT_SHARD = 1

_FIXED = struct.Struct("<IHHHHHHQQ")
assert _FIXED.size == HEADER_SIZE
_AXIS = struct.Struct("<iIII")

# code, torch attribute name, safetensors dtype string, element size
DTYPES: Tuple[Tuple[int, str, str, int], ...] = (
    (0, "float32", "F32", 4),
    (1, "float64", "F64", 8),
    (2, "int8", "I8", 1),
    (3, "uint8", "U8", 1),
    (4, "int16", "I16", 2),
    (5, "uint16", "U16", 2),
    (6, "int32", "I32", 4),
    (7, "uint32", "U32", 4),
    (8, "int64", "I64", 8),
    (9, "uint64", "U64", 8),
    (10, "bool", "BOOL", 1),
    (11, "float16", "F16", 2),
    (12, "bfloat16", "BF16", 2),
    (13, "float8_e4m3fn", "F8_E4M3", 1),
    (14, "float8_e5m2", "F8_E5M2", 1),
)
_BY_CODE = {d[0]: d for d in DTYPES}
_BY_ST = {d[2]: d for d in DTYPES}


class FormatError(ValueError):
    """A serialized tensor or safetensors file is malformed."""


class Axis(NamedTuple):
    """One split axis of a shard: dimension ``dim`` cut in ``size`` parts, part ``rank``."""

    dim: int
    rank: int
    size: int


class TensorHeader(NamedTuple):
    dtype: int
    shape: Tuple[int, ...]
    layout_kind: int
    flags: int
    data_offset: int
    data_bytes: int
    global_shape: Tuple[int, ...]
    axes: Tuple[Axis, ...]


def _torch():
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means "no torch"
        raise ImportError("the tensor APIs need torch (not importable: %s)" % e) from None
    return torch


def torch_dtype(code: int) -> Any:
    """The torch dtype of a format code, or None if unknown here."""
    d = _BY_CODE.get(code)
    if d is None:
        return None
    return getattr(_torch(), d[1], None)


def dtype_code(dtype: Any) -> int:
    """The format code of a torch dtype; TypeError for one the format lacks."""
    torch = _torch()
    for code, name, _, _ in DTYPES:
        if getattr(torch, name, None) == dtype:
            return code
    raise TypeError(f"tensor dtype {dtype} is not supported by the tensor format")


def _element_size(code: int) -> int:
    return _BY_CODE[code][3]


def _align(n: int, a: int = DATA_ALIGN) -> int:
    return (n + a - 1) // a * a


def encode_header(dtype: int, shape: Sequence[int], data_bytes: int,
                  global_shape: Optional[Sequence[int]] = None,
                  axes: Sequence[Axis] = ()) -> bytes:
    """Header + layout + padding (everything before the data)."""
    if sys.byteorder != "little":  # pragma: no cover - no big-endian hosts here
        raise RuntimeError("the tensor format is little-endian only")
    ndim = len(shape)
    if ndim > MAX_DIMS:
        raise ValueError(f"tensors of more than {MAX_DIMS} dimensions are not supported")
    if dtype not in _BY_CODE:
        raise ValueError(f"unknown dtype code {dtype}")
    layout = b"".join(struct.pack("<q", int(d)) for d in shape)
    kind = LAYOUT_WHOLE
    if axes:
        if global_shape is None or len(global_shape) != ndim:
            raise ValueError("a shard needs a global shape of the same rank")
        if len(axes) > MAX_AXES:
            raise ValueError(f"at most {MAX_AXES} split axes")
        kind = LAYOUT_SHARD
        layout += b"".join(struct.pack("<q", int(d)) for d in global_shape)
        layout += struct.pack("<II", len(axes), 0)
        layout += b"".join(_AXIS.pack(a.dim, a.rank, a.size, 0) for a in axes)
    data_offset = _align(HEADER_SIZE + len(layout))
    fixed = _FIXED.pack(MAGIC, VERSION, HEADER_SIZE, dtype, ndim, kind, 0, data_offset,
                        data_bytes)
    out = fixed + layout
    return out + bytes(data_offset - len(out))


def decode_header(buf: Any, total: Optional[int] = None) -> TensorHeader:
    """Parse and check the header at the start of a bytes-like object.

    ``total`` is the size of the whole object (default ``len(buf)``); the data
    must fit in it. Raises FormatError.
    """
    mv = memoryview(buf).cast("B")
    if total is None:
        total = mv.nbytes
    if mv.nbytes < HEADER_SIZE:
        raise FormatError("object too small for a tensor header")
    magic, version, hsize, dtype, ndim, kind, flags, data_offset, data_bytes = \
        _FIXED.unpack_from(mv, 0)
    if magic != MAGIC:
        raise FormatError("not a serialized tensor (bad magic 0x%08x)" % magic)
    if version != VERSION:
        raise FormatError(f"unsupported tensor format version {version}")
    if hsize < HEADER_SIZE or ndim > MAX_DIMS or dtype not in _BY_CODE or \
            kind not in (LAYOUT_WHOLE, LAYOUT_SHARD):
        raise FormatError("malformed tensor header")
    pos = hsize

    def take(fmt_: str) -> Tuple[int, ...]:
        nonlocal pos
        n = struct.calcsize(fmt_)
        if pos + n > min(mv.nbytes, data_offset):
            raise FormatError("tensor layout runs past the header")
        vals = struct.unpack_from(fmt_, mv, pos)
        pos += n
        return vals

    shape = take("<%dq" % ndim)
    global_shape: Tuple[int, ...] = ()
    axes: Tuple[Axis, ...] = ()
    if kind == LAYOUT_SHARD:
        global_shape = take("<%dq" % ndim)
        n_axes, _ = take("<II")
        if not 1 <= n_axes <= MAX_AXES:
            raise FormatError("malformed shard layout")
        axes = tuple(Axis(*take("<iIII")[:3]) for _ in range(n_axes))
    if any(d < 0 for d in shape) or any(d < 0 for d in global_shape):
        raise FormatError("negative dimension in tensor header")
    numel = 1
    for d in shape:
        numel *= d
    if data_bytes != numel * _element_size(dtype):
        raise FormatError("data size does not match shape and dtype")
    if data_offset < pos or data_offset + data_bytes > total:
        raise FormatError("tensor data runs past the object")
    return TensorHeader(dtype, tuple(shape), kind, flags, data_offset, data_bytes,
                        tuple(global_shape), axes)


def _check_tensor(t: Any) -> Any:
    """A contiguous CPU strided tensor (copied if it was not contiguous)."""
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, not {type(t).__name__}")
    if t.device.type == "cuda":
        t = t.detach().to("cpu")  # as Mooncake: CUDA tensors are accepted (copied to host)
    elif t.device.type != "cpu":
        raise TypeError(f"tensor is on device '{t.device}': crescent's tensor APIs take CPU "
                        "and CUDA tensors only")
    if t.layout != torch.strided:
        raise TypeError(f"tensor layout {t.layout} is not supported (dense tensors only)")
    if t.dim() > MAX_DIMS:
        raise ValueError(f"tensors of more than {MAX_DIMS} dimensions are not supported")
    dtype_code(t.dtype)
    if not t.is_contiguous():
        t = t.contiguous()
    return t


def tensor_header(t: Any, global_shape: Optional[Sequence[int]] = None,
                  axes: Sequence[Axis] = ()) -> bytes:
    """Header bytes for a (checked, contiguous) tensor."""
    return encode_header(dtype_code(t.dtype), tuple(t.shape), t.numel() * t.element_size(),
                         global_shape, axes)


def serialized_size(t: Any) -> int:
    """Bytes ``serialize_tensor(t)`` produces."""
    t = _check_tensor(t)
    return len(tensor_header(t)) + t.numel() * t.element_size()


def _raw(t: Any) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy."""
    n = t.numel() * t.element_size()
    if n == 0:
        return memoryview(b"")
    return memoryview((ctypes.c_ubyte * n).from_address(t.data_ptr())).cast("B")


def serialize_tensor(t: Any) -> bytes:
    """The whole object (header + data) for a tensor, as bytes."""
    t = _check_tensor(t)
    return tensor_header(t) + bytes(_raw(t))


def _from_buffer(obj: Any, h: TensorHeader) -> Any:
    torch = _torch()
    dt = torch_dtype(h.dtype)
    if dt is None:
        raise TypeError(f"this torch has no dtype for format code {h.dtype} "
                        f"({_BY_CODE[h.dtype][1]})")
    if h.data_bytes == 0:
        return torch.empty(h.shape, dtype=dt)
    t = torch.frombuffer(obj, dtype=dt, count=h.data_bytes // _element_size(h.dtype),
                         offset=h.data_offset)
    return t.reshape(h.shape)


def deserialize_tensor(buf: Any) -> Any:
    """The tensor in a serialized object (a view of ``buf`` when it is writable)."""
    h = decode_header(buf)
    return _from_buffer(buf, h)


def tensor_from_memory(ptr: int, size: int) -> Any:
    """A tensor viewing a serialized object at raw address ``ptr`` (``size`` bytes)."""
    if size < HEADER_SIZE:
        raise FormatError("object too small for a tensor header")
    head = ctypes.string_at(ptr, min(size, 1024))
    h = decode_header(head, size)
    if h.data_bytes == 0:
        return _from_buffer(b"", h)
    arr = (ctypes.c_ubyte * h.data_bytes).from_address(ptr + h.data_offset)
    return _from_buffer(arr, h._replace(data_offset=0))


# --------------------------------------------------------------------------- safetensors
def read_safetensors_header(path: str) -> Tuple[Dict[str, Any], int]:
    """(the parsed JSON header, offset of the data section) of a safetensors file."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise FormatError(f"{path}: too short for a safetensors file")
        (n,) = struct.unpack("<Q", head)
        size = os.fstat(f.fileno()).st_size
        if n > 100 * 1024 * 1024 or 8 + n > size:
            raise FormatError(f"{path}: bad safetensors header length {n}")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"{path}: safetensors header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise FormatError(f"{path}: safetensors header is not an object")
    return header, 8 + n


def save_safetensors(path: str, tensors: Dict[str, Any],
                     metadata: Optional[Dict[str, str]] = None) -> None:
    """Write tensors (name -> CPU tensor) to a safetensors file (atomically)."""
    checked = {}
    for name in sorted(tensors):
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"bad tensor name {name!r}")
        checked[name] = _check_tensor(tensors[name])
    header: Dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    off = 0
    for name, t in checked.items():
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _BY_CODE[dtype_code(t.dtype)][2], "shape": list(t.shape),
                        "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            for t in checked.values():
                f.write(_raw(t))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load_safetensors(path: str) -> Dict[str, Any]:
    """Read every tensor of a safetensors file (name -> CPU tensor, own memory)."""
    torch = _torch()
    header, start = read_safetensors_header(path)
    with open(path, "rb") as f:
        f.seek(start)
        data = bytearray(f.read())
    out: Dict[str, Any] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            d = _BY_ST[info["dtype"]]
            shape = [int(x) for x in info["shape"]]
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(f"{path}: bad entry for tensor {name!r}: {e}") from None
        dt = getattr(torch, d[1], None)
        if dt is None:
            raise TypeError(f"{path}: this torch has no dtype {d[1]} (tensor {name!r})")
        numel = 1
        for x in shape:
            if x < 0:
                raise FormatError(f"{path}: negative dimension in {name!r}")
            numel *= x
        if not 0 <= begin <= end <= len(data) or end - begin != numel * d[3]:
            raise FormatError(f"{path}: data offsets of {name!r} do not match its shape")
        if numel == 0:
            out[name] = torch.empty(shape, dtype=dt)
        else:
            out[name] = torch.frombuffer(data, dtype=dt, count=numel,
                                         offset=begin).reshape(shape).clone()
    return out

