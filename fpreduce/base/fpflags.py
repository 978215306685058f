"""The library's own floating-point flags stay its own.

fpreduce computes IEEE results on purpose: rounding onto bf16 underflows, an fp16
accumulator overflows to Inf, ``inf - inf`` is NaN, and every such value is part of
the answer (reported, never hidden). numpy raises those conditions as flags, and a
caller's ``np.errstate(all="raise")`` (or ``"warn"``) would turn the library's
intermediate steps into a ``FloatingPointError`` or a warning. Every public entry
point of the core therefore runs under :func:`own_flags`: the caller's settings apply
to the caller's code again as soon as the call returns.

>>> import numpy as np
>>> @own_flags
... def tiny() -> float:
...     return float(np.float64(1e-300) * np.float64(1e-300))
>>> with np.errstate(all="raise"):
...     tiny()
0.0
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import numpy as np

__all__ = ["own_flags"]

P = ParamSpec("P")
R = TypeVar("R")


def own_flags(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run with numpy's floating-point error handling set to ignore (the caller's is restored after)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return wrapper
