"""_tensors.py — numpy arrays and CPU torch tensors as weft.h's
wf_tensor_t, without copies.

An input that is C-contiguous, little-endian and of a weft dtype is passed
by its buffer's address: libweft sends that memory as a ZeroMQ frame
without copying, and the caller's object is kept alive (by the Job or for
the synchronous call) until libweft no longer reads it. Anything else
(non-contiguous, big-endian) is copied once into a contiguous array first;
an output must already be contiguous and writable (it is written in place).

dtypes: numpy float32 / float16 and torch float32 / float16 / bfloat16
map to f32 / f16 / bf16. numpy has no bfloat16: wrap a uint16 array that
holds bf16 bits as `weft.Tensor(array, "bf16")` (an ml_dtypes bfloat16
array is also taken as it is). torch is never imported here: a torch
tensor is recognised through the torch module its caller already loaded.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib

DTYPE_CODES = {"f32": _lib.WF_DTYPE_F32, "f16": _lib.WF_DTYPE_F16, "bf16": _lib.WF_DTYPE_BF16}
DTYPE_NAMES = {v: k for k, v in DTYPE_CODES.items()}
_NP = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}
_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2}


class Tensor:
    """A buffer with its weft dtype named explicitly.

    Use it for bf16 held in a numpy uint16 array (numpy has no bfloat16):
    ``weft.Tensor(bits, "bf16")``; also for f16 bits in uint16. `data` is
    a numpy array or a CPU torch tensor whose element size matches
    `dtype`. Outputs computed for a Tensor input come back as the same
    kind of array with the same element type (uint16 bits for bf16).
    """

    __slots__ = ("data", "dtype")

    def __init__(self, data: Any, dtype: str) -> None:
        if dtype not in DTYPE_CODES:
            raise ValueError(f"weft.Tensor: dtype {dtype!r} is not one of f32, f16, bf16")
        size = _itemsize(data)
        if size != _ITEMSIZE[dtype]:
            raise ValueError(f"weft.Tensor: {dtype} needs {_ITEMSIZE[dtype]}-byte elements, "
                             f"the array has {size}-byte ones")
        self.data = data
        self.dtype = dtype

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(int(d) for d in self.data.shape)

    def __repr__(self) -> str:
        return f"weft.Tensor({type(self.data).__name__} {self.shape}, {self.dtype!r})"


ArrayLike = Union[np.ndarray, Tensor, Any]  # Any: a torch.Tensor (not imported here)


def _torch() -> Any:
    return sys.modules.get("torch")


def is_torch(x: Any) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def _itemsize(x: Any) -> int:
    if isinstance(x, np.ndarray):
        return int(x.itemsize)
    if is_torch(x):
        return int(x.element_size())
    raise TypeError(f"expected a numpy array or a torch tensor, got {type(x).__name__}")


def _torch_dtype_name(x: Any) -> Optional[str]:
    t = _torch()
    return {t.float32: "f32", t.float16: "f16", t.bfloat16: "bf16"}.get(x.dtype)


def _np_dtype_name(a: np.ndarray) -> Optional[str]:
    if a.dtype.name == "bfloat16":   # ml_dtypes
        return "bf16"
    return _NP.get(a.dtype.newbyteorder("="))


class Desc:
    """One tensor argument ready for libweft: the struct, and the object
    whose buffer it points at (kept alive by whoever holds the Desc)."""

    __slots__ = ("struct", "holder", "dtype", "shape")

    def __init__(self, struct: _lib.wf_tensor_t, holder: Any, dtype: str,
                 shape: Tuple[int, ...]) -> None:
        self.struct = struct
        self.holder = holder
        self.dtype = dtype
        self.shape = shape

    def ptr(self) -> "ctypes._Pointer[_lib.wf_tensor_t]":
        return ctypes.pointer(self.struct)


def _struct(addr: int, dtype: str, shape: Sequence[int], what: str) -> _lib.wf_tensor_t:
    if not 1 <= len(shape) <= _lib.WF_MAX_RANK:
        raise ValueError(f"{what}: rank {len(shape)}, weft takes 1..{_lib.WF_MAX_RANK}")
    return _lib.wf_tensor_t(addr, DTYPE_CODES[dtype], len(shape),
                            (ctypes.c_int64 * _lib.WF_MAX_RANK)(*shape))


def _unwrap(x: Any, what: str) -> Tuple[Any, Optional[str]]:
    """(the array or tensor, the dtype named by a Tensor wrapper or None)."""
    if isinstance(x, Tensor):
        return x.data, x.dtype
    if isinstance(x, np.ndarray) or is_torch(x):
        return x, None
    raise TypeError(f"{what}: expected a numpy array, a CPU torch tensor or a weft.Tensor, "
                    f"got {type(x).__name__}")


def as_input(x: ArrayLike, what: str) -> Desc:
    """An input tensor: zero-copy when x is contiguous, else one copy."""
    data, named = _unwrap(x, what)
    if isinstance(data, np.ndarray):
        dtype = named or _np_dtype_name(data)
        if dtype is None:
            raise TypeError(f"{what}: numpy dtype {data.dtype} is not a weft dtype (float32, "
                            "float16; bf16 bits in uint16 as weft.Tensor(a, 'bf16'))")
        if data.dtype.byteorder == ">":
            data = data.astype(data.dtype.newbyteorder("<"))
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        addr = data.__array_interface__["data"][0]
        shape = data.shape
    else:
        if data.device.type != "cpu":
            raise ValueError(f"{what}: a {data.device.type} tensor; weft sends host memory: "
                             "pass a CPU tensor (tensor.cpu())")
        dtype = named or _torch_dtype_name(data)
        if dtype is None:
            raise TypeError(f"{what}: torch dtype {data.dtype} is not a weft dtype (float32, "
                            "float16, bfloat16)")
        if data.requires_grad:
            data = data.detach()
        if not data.is_contiguous():
            data = data.contiguous()
        addr = data.data_ptr()
        shape = tuple(data.shape)
    if any(d <= 0 for d in shape) or len(shape) == 0:
        raise ValueError(f"{what}: shape {shape}: weft needs rank 1..8 and every dim > 0")
    return Desc(_struct(addr, dtype, shape, what), data, dtype, shape)


def as_output(x: ArrayLike, what: str) -> Desc:
    """An output tensor, written in place: it must be contiguous and writable."""
    data, named = _unwrap(x, what)
    if isinstance(data, np.ndarray):
        dtype = named or _np_dtype_name(data)
        if dtype is None:
            raise TypeError(f"{what}: numpy dtype {data.dtype} is not a weft dtype")
        if not data.flags.c_contiguous or not data.flags.writeable or data.dtype.byteorder == ">":
            raise ValueError(f"{what}: an output must be a C-contiguous, writable, "
                             "native-order array")
        addr = data.__array_interface__["data"][0]
    else:
        if data.device.type != "cpu":
            raise ValueError(f"{what}: outputs must be CPU tensors")
        dtype = named or _torch_dtype_name(data)
        if dtype is None:
            raise TypeError(f"{what}: torch dtype {data.dtype} is not a weft dtype")
        if not data.is_contiguous():
            raise ValueError(f"{what}: an output must be a contiguous tensor")
        addr = data.data_ptr()
    shape = tuple(int(d) for d in data.shape)
    if len(shape) == 0 or any(d <= 0 for d in shape):
        raise ValueError(f"{what}: shape {shape}: every dim must be > 0")
    return Desc(_struct(addr, dtype, shape, what), data, dtype, shape)


def new_like(ref: ArrayLike, shape: Sequence[int], dtype: str) -> Any:
    """A new output of `shape` and weft `dtype`, of the kind of `ref`:
    torch in, torch out (bf16 as torch.bfloat16); numpy in, numpy out
    (bf16 as weft.Tensor of uint16 bits, or as ml_dtypes' bfloat16 when
    ref was one)."""
    data, named = _unwrap(ref, "ref")
    shape = tuple(int(d) for d in shape)
    if is_torch(data):
        t = _torch()
        return t.empty(shape, dtype={"f32": t.float32, "f16": t.float16,
                                     "bf16": t.bfloat16}[dtype])
    if dtype == "f32":
        return np.empty(shape, np.float32)
    if dtype == "f16":
        return np.empty(shape, np.float16)
    if data.dtype.name == "bfloat16":
        return np.empty(shape, data.dtype)
    return Tensor(np.empty(shape, np.uint16), "bf16")


def unwrap(x: Any) -> Any:
    """The array inside a weft.Tensor, or x."""
    return x.data if isinstance(x, Tensor) else x


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 values held as uint16 bits, widened exactly to float32."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (to nearest, ties to even) as uint16
    bits; NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)
