"""Compiled Kahan and Neumaier sums for the engine: one leaf order for every element, nearest even.

:func:`compensated_plan` is the engine's ``algorithm="kahan"`` / ``"neumaier"`` for a
plan that is the same for every element, in one numba pass over blocks of columns,
with the operations of :func:`fpreduce.core.algorithms.compensated` (the rows in the
plan's leaf order; every ``+``/``-`` one IEEE operation in the accumulator format,
``a - b`` as ``a + (-b)``):

* kahan: ``y = x - c; t = s + y; c = (t - s) - y; s = t``, returns ``s``;
* neumaier: ``t = s + x; c += (s - t) + x`` if ``|s| >= |x|`` else ``(x - t) + s``,
  ``s = t``, returns ``s + c``.

Each operation rounds as the compiled fold's nearest-even kinds do: the float32 sum
rounded by Veltkamp splitting (bf16, tf32: ``c = t * (2**(24-p) + 1); t <- c - (c - t)``,
an innocuous double rounding; the IEEE signed zeros of the float32 sum kept), and the
native add for fp32 (``sigma = 1``: the same loop) and fp64. Sums beyond Veltkamp's
range, NaN and Inf give NaN: the call then returns None and the engine's numpy path
recomputes it (same bits), as it does for every other format and mode, and without
numba. tests/test_compensated.py checks it against ``compensated_reference``.
"""

from __future__ import annotations

import numpy as np

from fpreduce.base import jit
from fpreduce.core.arith import _Arith, _Loader
from fpreduce.core.rounding import Mode

_WIDTH = 4096  # columns per block: s, c and a row of X stay in L1


def _v(a, b, sigma):  # type: ignore[no-untyped-def]
    """a + b rounded to nearest even on the format's bits (Veltkamp; sigma = 1: the native add)."""
    s = a + b
    c = s * sigma
    return c - (c - s)


def _compensated_kernel(X, perm, out, S, C, sigma, neumaier):  # type: ignore[no-untyped-def]
    """out[j] <- the Kahan (or Neumaier) sum of column j of X, rows in the order ``perm``."""
    n, m = X.shape
    W = S.size
    for lo in range(0, m, W):
        w = min(W, m - lo)
        s, c = S[:w], C[:w]
        x0 = X[perm[0], lo : lo + w]
        for j in range(w):
            s[j] = x0[j]
            c[j] = 0.0
        for k in range(1, n):
            x = X[perm[k], lo : lo + w]
            if neumaier:
                for j in range(w):
                    t = _v(s[j], x[j], sigma)
                    big, small = (s[j], x[j]) if abs(s[j]) >= abs(x[j]) else (x[j], s[j])
                    c[j] = _v(c[j], _v(_v(big, -t, sigma), small, sigma), sigma)
                    s[j] = t
            else:
                for j in range(w):
                    y = _v(x[j], -c[j], sigma)
                    t = _v(s[j], y, sigma)
                    c[j] = _v(_v(t, -s[j], sigma), -y, sigma)
                    s[j] = t
        for j in range(w):
            out[lo + j] = _v(s[j], c[j], sigma) if neumaier else s[j]


_KERNEL = jit.jit(_compensated_kernel, "compensated sums")


def _compile_helpers() -> None:
    g = globals()
    if isinstance(g["_v"], type(_compile_helpers)):
        g["_v"] = jit.kernel(g["_v"], inline="always")


def compensated_plan(perm: np.ndarray, A: np.ndarray, load: _Loader, ar: _Arith, kind: str) -> np.ndarray | None:
    """The Kahan or Neumaier sum of every column of ``A``, rows in the order ``perm``, or None.

    None (the engine's numpy path runs, same bits) without numba, for a mode other than
    nearest even, an accumulator other than fp32, fp64, bf16 and tf32, or when a NaN
    comes out (NaN/Inf inputs, or sums beyond Veltkamp's range).
    """
    from fpreduce.core._tall import _load

    fa = ar.fa
    if _KERNEL is None or not jit.enabled() or ar.mode is not Mode.NEAREST_EVEN or A.shape[0] < 2:
        return None
    p = fa.precision
    if not (p in (24, 53) or (p in (8, 11) and fa.emin == -126)):
        return None
    X = _load(A, load, ar)[0]
    dt = X.dtype.type
    sigma = dt(2.0 ** (24 - p) + 1 if p < 24 else 1.0)
    out = np.empty(X.shape[1], dtype=X.dtype)
    width = min(_WIDTH, X.shape[1])
    _compile_helpers()
    with np.errstate(over="ignore", invalid="ignore"):
        _KERNEL(
            X,
            np.ascontiguousarray(perm, dtype=np.int64),
            out,
            np.empty(width, dt),
            np.empty(width, dt),
            sigma,
            kind == "neumaier",
        )
    if np.isnan(out.max(initial=0.0)):
        return None
    return out
