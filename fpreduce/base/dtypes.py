"""The one float-dtype guard: which arrays fpreduce accepts as floating-point values.

numpy's float16, float32, float64 (and longdouble, whose callers reject or narrow it
themselves), ml_dtypes' bfloat16 and float8 types and torch tensors of a floating dtype
hold floating-point values; every other dtype (integers, bools, objects, complex) is
refused at the public boundary.

Torch tensors are recognised by their type's module, never by importing torch (so
``import fpreduce`` never loads it): a tensor's values come out as a numpy array in their
own width (ml_dtypes' bfloat16 and float8 when ml_dtypes is installed, else float32, which
holds every value of those formats exactly).

>>> import numpy as np
>>> is_float_dtype(np.dtype(np.float32)), is_float_dtype(np.dtype(np.int64))
(True, False)
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fpreduce.base.errors import InvalidArgument

__all__ = ["as_float_array", "dtype_name", "is_float_dtype", "is_tensor", "tensor_values"]

#: torch's floating dtypes whose values numpy holds as they are (the others are viewed or widened)
_TORCH_NUMPY = ("float16", "float32", "float64")
#: torch's 2- and 1-byte floating dtypes that ml_dtypes lays out bit for bit, with the integer view of their bits
_TORCH_BITS = {"bfloat16": "int16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}


def is_float_dtype(dtype: np.dtype) -> bool:
    """Whether ``dtype`` holds floating-point values: numpy float kinds, ml_dtypes bfloat16 and float8."""
    return dtype.kind == "f" or dtype.name == "bfloat16" or dtype.name.startswith("float8")


def is_tensor(x: object) -> bool:
    """Whether ``x`` is a torch tensor (``torch.Tensor`` or a subclass such as ``nn.Parameter``), without
    importing torch: its type comes from a ``torch`` module and has a ``dtype`` and ``detach``."""
    t = type(x)
    return t.__module__.split(".")[0] == "torch" and hasattr(t, "detach") and hasattr(x, "dtype")


def dtype_name(x: object) -> str | None:
    """The dtype of an array or tensor as its library writes it: ``float32`` (numpy's names, ml_dtypes'
    ``bfloat16``), ``torch.bfloat16``; None for objects without a dtype (lists, Python floats)."""
    if is_tensor(x):
        return str(x.dtype)  # type: ignore[attr-defined]
    dt = getattr(x, "dtype", None)
    return dt.name if isinstance(dt, np.dtype) else None


def tensor_values(t: Any, message: str) -> np.ndarray:
    """The values of torch tensor ``t`` as a numpy array on the CPU (detached, never a rounding).

    float16/32/64 as numpy's; bfloat16 and float8_e4m3fn/e5m2 as ml_dtypes arrays of the same bits (a
    view of the tensor's memory on the CPU), or widened exactly to float32 without ml_dtypes.

    Raises:
        InvalidArgument: ``message`` (``{dtype}`` filled in) for a tensor of any other dtype.
    """
    name = str(t.dtype).removeprefix("torch.")
    c = t.detach()
    c = c.cpu() if c.device.type != "cpu" else c
    if name in _TORCH_NUMPY:
        return np.asarray(c.resolve_conj().resolve_neg().numpy())
    if name not in _TORCH_BITS:
        if t.is_floating_point():  # floats, but none of fpreduce's formats (float8_e4m3fnuz, float8_e8m0fnu, ...)
            theirs = ", ".join(f"torch.{n}" for n in (*_TORCH_NUMPY, *_TORCH_BITS))
            raise InvalidArgument(
                f"torch.{name} tensors hold floats of no fpreduce format (tensors of {theirs} do); "
                "convert with .float() (exact for every narrower float)"
            )
        raise InvalidArgument(message.format(dtype=f"torch.{name} (a tensor)"))
    try:
        import ml_dtypes
    except ImportError:
        return np.asarray(c.float().numpy())
    torch = sys.modules[type(t).__module__.split(".")[0]]
    bits = c.view(getattr(torch, _TORCH_BITS[name])).numpy()
    return bits.view(np.dtype(getattr(ml_dtypes, name)))


def as_float_array(x: ArrayLike, message: str) -> np.ndarray:
    """``np.asarray(x)`` (a torch tensor's values: :func:`tensor_values`), or InvalidArgument(``message`` with
    ``{dtype}`` filled in) if it is not float.

    >>> as_float_array([1, 2], "need floats, got {dtype}")
    Traceback (most recent call last):
    ...
    fpreduce.base.errors.InvalidArgument: need floats, got int64
    """
    if is_tensor(x):
        return tensor_values(x, message)
    if isinstance(x, np.ma.MaskedArray) and np.ma.is_masked(x):
        raise InvalidArgument(message.format(dtype="a masked array (its mask is not honoured: pass x.filled(v))"))
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:  # a ragged list, an object numpy cannot make an array of
        raise InvalidArgument(message.format(dtype=f"no array ({e})")) from None
    if not is_float_dtype(a.dtype):
        raise InvalidArgument(message.format(dtype=a.dtype))
    return a
