"""Optional compiled kernels: numba when installed (the ``fast`` extra), else None.

A few hot loops (the exact oracle's column scan, the runner's per-element metrics)
need one pass over the data where numpy needs several. They are written for numba
and used only when it is installed; every caller keeps its numpy path, and the
tests check that both give the same bits. ``FPREDUCE_NO_JIT=1`` forces the numpy
paths. numba is imported, and a kernel compiled (or loaded from numba's on-disk
cache: about 0.4 s once per process), on a kernel's first call, so importing
fpreduce stays fast.

>>> jit(lambda x: x) is None or callable(jit(lambda x: x))
True
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

__all__ = ["AVAILABLE", "jit"]

AVAILABLE = not os.environ.get("FPREDUCE_NO_JIT") and importlib.util.find_spec("numba") is not None


def jit(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """``fn`` compiled by numba on its first call (nopython, no GIL, cached on disk), or None without numba."""
    if not AVAILABLE:
        return None
    compiled: list[Callable[..., Any]] = []

    def call(*args: Any) -> Any:
        if not compiled:
            import numba

            compiled.append(numba.njit(cache=True, nogil=True)(fn))
        return compiled[0](*args)

    call.__name__ = call.__qualname__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call
