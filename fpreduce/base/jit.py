"""Optional compiled kernels: numba when installed (the ``fast`` extra), else None.

A few hot loops (the exact oracle's column scan, the runner's per-element metrics)
need one pass over the data where numpy needs several. They are written for numba
and used only when it is installed; every caller keeps its numpy path, and the
tests check that both give the same bits. ``FPREDUCE_NO_JIT=1`` forces the numpy
paths. This module is the one switch: every caller asks :func:`enabled` at call time,
and tests force the numpy paths with ``with disabled(): ...``. numba is imported, and
a kernel compiled (or loaded from numba's on-disk cache: about 0.4 s once per
process), on a kernel's first call, so importing fpreduce stays fast.

>>> jit(lambda x: x) is None or callable(jit(lambda x: x))
True
"""

from __future__ import annotations

import importlib.util
import os
import platform
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["AVAILABLE", "disabled", "enabled", "jit", "numba"]

AVAILABLE = not os.environ.get("FPREDUCE_NO_JIT") and importlib.util.find_spec("numba") is not None
_enabled = AVAILABLE


def enabled() -> bool:
    """Whether the compiled kernels are used now: numba installed, no ``FPREDUCE_NO_JIT``, not :func:`disabled`."""
    return _enabled


@contextmanager
def disabled() -> Iterator[None]:
    """Force every numpy path inside the block (tests compare them with the kernels); not thread safe.

    >>> with disabled():
    ...     enabled()
    False
    """
    global _enabled
    saved, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = saved


def numba() -> Any:
    """The numba module, imported with fpreduce's one code-generation setting (every kernel compiles through it).

    On x86-64, LLVM's ``x86-cmov-converter`` is turned off: it rewrites a conditional
    move on a loop's critical path into a branch, which the rounding kernels' sign
    tests (a sum's sign decides the direction of a directed rounding) then mispredict
    on half of the additions. Measured on the pairwise fold of 10^5 x 16 bf16 in mode
    ``up``: 10.6 ns per addition with the pass, against ``down`` at 4.5 ns, whose
    kernel kept its conditional move. The setting is LLVM's (process-wide: it changes
    how later code is compiled, never what it computes); an LLVM without the option
    ignores it.
    """
    import numba as nb

    if not _TUNED:
        if platform.machine().lower() in ("x86_64", "amd64"):
            import llvmlite.binding as llb

            llb.set_option("fpreduce", "-x86-cmov-converter=false")
        _TUNED.append(True)
    return nb


_TUNED: list[bool] = []


def jit(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """``fn`` compiled by numba on its first call (nopython, no GIL, cached on disk), or None without numba."""
    if not AVAILABLE:
        return None
    compiled: list[Callable[..., Any]] = []

    def call(*args: Any) -> Any:
        if not compiled:
            compiled.append(numba().njit(cache=True, nogil=True)(fn))
        return compiled[0](*args)

    call.__name__ = call.__qualname__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call
