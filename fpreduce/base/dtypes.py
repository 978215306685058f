"""The one float-dtype guard: which numpy dtypes fpreduce accepts as floating-point values.

numpy's float16, float32, float64 (and longdouble, whose callers reject or narrow it
themselves) and ml_dtypes' bfloat16 and float8 types hold floating-point values; every
other dtype (integers, bools, objects, complex) is refused at the public boundary.

>>> import numpy as np
>>> is_float_dtype(np.dtype(np.float32)), is_float_dtype(np.dtype(np.int64))
(True, False)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from fpreduce.base.errors import InvalidArgument

__all__ = ["as_float_array", "is_float_dtype"]


def is_float_dtype(dtype: np.dtype) -> bool:
    """Whether ``dtype`` holds floating-point values: numpy float kinds, ml_dtypes bfloat16 and float8."""
    return dtype.kind == "f" or dtype.name == "bfloat16" or dtype.name.startswith("float8")


def as_float_array(x: ArrayLike, message: str) -> np.ndarray:
    """``np.asarray(x)``, or InvalidArgument(``message`` with ``{dtype}`` filled in) if it is not float.

    >>> as_float_array([1, 2], "need floats, got {dtype}")
    Traceback (most recent call last):
    ...
    fpreduce.base.errors.InvalidArgument: need floats, got int64
    """
    if isinstance(x, np.ma.MaskedArray) and np.ma.is_masked(x):
        raise InvalidArgument(message.format(dtype="a masked array (its mask is not honoured: pass x.filled(v))"))
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:  # a ragged list, an object numpy cannot make an array of
        raise InvalidArgument(message.format(dtype=f"no array ({e})")) from None
    if not is_float_dtype(a.dtype):
        raise InvalidArgument(message.format(dtype=a.dtype))
    return a
