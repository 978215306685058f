"""fp64 accumulation of float32 rows: the left fold of wide rows in place, each value added as it is read.

float32 values are exact in float64, so there is no float64 copy of X: every row is
converted in the loop that adds it (nearest even: one native add per value, as numpy's
in-place add; directed modes: the native add in the processor's mode,
:mod:`fpreduce.core._hwround`, or ``_kernels_round.add_fp64``'s TwoSum and one-ulp step;
stochastic: ``add_fp64`` with the engine's counter-based draws). The inputs' format is
checked in the same loops (the OR of their bits, or :func:`fpreduce.core._narrow.fp16_flags`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpreduce.base import jit
from fpreduce.core import _hwround as hw
from fpreduce.core import _kernels_round as kr
from fpreduce.core import _narrow
from fpreduce.core.grid import Grid

_COMPILED: list[Any] = []


def _rows64(o, x, xb, fp16, mode, maxf, z, t):  # type: ignore[no-untyped-def]
    """o <- o + x (float64 accumulator, float32 row) in ``mode`` (a constant per loop); the OR of the row's check."""
    bits = np.uint32(0)
    for j in range(o.size):
        v = np.float64(x[j])
        if mode == 0:
            o[j] = o[j] + v
        else:
            o[j] = kr.add_fp64(o[j], v, maxf, mode, kr.uniform(z[j], t) if mode == 4 else 0.0)
        bits |= _narrow.fp16_flags(x[j]) if fp16 else xb[j]
    return bits


def left_rows64(X, Xb, perm, out, fp16, mode, maxf, key, e0, hwm):  # type: ignore[no-untyped-def]
    """out (float64) <- the left fold of X's float32 rows in the order ``perm``, row by row in place.

    fp64 accumulation of float32 values (exact in float64), in ``mode`` (directed and
    stochastic: :func:`fpreduce.core._kernels_round.add_fp64`): no float64 copy of X.
    ``hwm`` 1..3 (with ``mode`` 0): native additions in the hardware's directed mode
    (:mod:`._hwround`). Returns the OR of the rows' bits (``fp16``: of
    :func:`fp16_flags`, an exactness check whatever the mode), the input check.
    """
    hw.begin(hwm)
    n, m = X.shape
    z = np.zeros(m if mode == 4 else 0, dtype=np.uint64)
    for j in range(z.size):
        z[j] = kr.element_seed(key, e0 + j)
    seen = np.uint32(0)
    x, xb = X[perm[0]], Xb[perm[0]]
    for j in range(m):
        out[j] = np.float64(x[j])
        seen |= _narrow.fp16_flags(x[j]) if fp16 else xb[j]
    for k in range(1, n):
        x, xb = X[perm[k]], Xb[perm[k]]
        if mode == 0:
            seen |= _rows64(out, x, xb, fp16, 0, maxf, z, k - 1)
        elif mode == 1:
            seen |= _rows64(out, x, xb, fp16, 1, maxf, z, k - 1)
        elif mode == 2:
            seen |= _rows64(out, x, xb, fp16, 2, maxf, z, k - 1)
        elif mode == 3:
            seen |= _rows64(out, x, xb, fp16, 3, maxf, z, k - 1)
        else:
            seen |= _rows64(out, x, xb, fp16, 4, maxf, z, k - 1)
    hw.end(hwm)
    return seen


def fold_fp64(A: np.ndarray, perm: np.ndarray, load: Any, ar: Any, grid: Grid, e0: int) -> np.ndarray | None:
    """The fp64 left fold of A's float32 rows in the order ``perm`` by :func:`left_rows64`, or None.

    None unless A is float32, C-contiguous, of an input format of <= 24 bits that needs no
    conversion (``load``, the engine's loader), or when an input is not in its format
    (the caller then loads, rounding them, and folds). ``grid`` as ``_tall``'s; element
    ``e0 + j`` draws the stochastic roundings of column j (``ar``'s key).
    """
    fin = load.fin
    if not (load.fits and load.premul is None and fin.precision <= 24 and A.dtype == np.float32):
        return None
    fp16 = fin.precision == 11 and fin.emin == -14
    low = 0 if fin.precision >= 24 else _narrow.FP16_CHECK if fp16 else (1 << (24 - fin.precision)) - 1
    if not A.flags.c_contiguous or A.shape[0] < 2 or (not fp16 and fin.emin != -126 and low):
        return None  # fp8 inputs: the loader checks them
    key = ar.sr_key() if grid.mode == 4 else np.uint64(0)
    out = np.empty(A.shape[1], dtype=np.float64)
    compile_all()
    hwm = hw.code(0, grid)
    mode = 0 if hwm else grid.mode
    seen = globals()["left_rows64"](A, A.view(np.uint32), perm, out, fp16, mode, grid.maxf, key, e0, hwm)
    return None if seen & low else out


@jit.serialized
def compile_all() -> None:
    """Make this module's loops numba functions (compiled on first call, cached on disk), once."""
    if _COMPILED:
        return
    _narrow.compile_all()
    g = globals()
    jit.compile_names(g, ("_rows64", "left_rows64"), "fp64 sums of float32 rows", calls=("_rows64", "left_rows64"))
    _COMPILED.append(g["left_rows64"])
