"""Stochastic folds in numpy: the twin of :mod:`fpreduce.core._tall`'s compiled stochastic rounding, same bits.

Used when numba is off (``FPREDUCE_NO_JIT=1``, :func:`fpreduce.base.jit.disabled`):
the generator (splitmix64 of key, element, addition; see ``_tall``) and the rounding
rule are computed row by row, vectorized over the columns. tests/test_tall.py checks
that both give the same bits.
"""

from __future__ import annotations

import numpy as np

from fpreduce.base import counter
from fpreduce.core._fastpath import _program
from fpreduce.core.formats import Format
from fpreduce.plans import Tree


def _uniform_numpy(key: np.uint64, e: np.ndarray, t: int) -> np.ndarray:
    """The uniform of addition ``t`` of elements ``e`` (uint64) under ``key``, in numpy (``fpreduce.base.counter``)."""
    return counter.uniform_numpy(counter.draw_numpy(key, e), t)


def _add_sr_numpy(x: np.ndarray, y: np.ndarray, fa: Format, key: np.uint64, t: int, e: np.ndarray) -> np.ndarray:
    """x + y stochastically rounded to ``fa``: the numpy twin of ``_round_scalar`` / ``_add_fp64`` in mode 4."""
    s = x + y
    bb = s - x
    err = (x - (s - bb)) + (y - bb)
    u = _uniform_numpy(key, e, t)
    fin = np.isfinite(s)
    err = np.where(fin, err, 0.0)
    up = np.where(err > 0, np.inf, -np.inf)
    if fa.precision == 53:
        other = np.nextafter(s, up)
        res = np.where((err != 0) & (u < np.abs(err) / np.abs(other - s)), other, s)
    else:
        p, emin = fa.precision, fa.emin
        sf = np.where(fin, s, 1.0)
        q0 = np.ldexp(1.0, np.maximum(np.frexp(sf)[1] - 1, emin) - p + 1)
        on = np.floor(sf / q0) * q0 == sf
        tt = np.where(on & (err != 0), np.nextafter(sf, up), sf)
        k = np.maximum(np.frexp(tt)[1] - 1, emin) - p + 1
        yy = np.ldexp(tt, -k)
        r = np.floor(yy)
        lo = np.ldexp(r, k)
        frac = ((sf - lo) + err) / np.ldexp(1.0, k)
        r = r + (((r != yy) | (err != 0)) & (u < frac))
        res = np.copysign(np.ldexp(r, k), sf)
        big = np.inf if fa.has_inf else np.nan
        res = np.where(np.abs(res) > fa.max_finite, np.copysign(big, sf), res)
        res = np.where(fin, res, s if fa.has_inf else np.where(np.isnan(s), s, np.nan))
    both_neg = np.signbit(x) & np.signbit(y)
    return np.where(s == 0, np.where(both_neg, -0.0, 0.0), res)


def _fold_numpy_sr(
    root: Tree | None, order: np.ndarray | None, X: np.ndarray, fa: Format, key: np.uint64, offset: int | np.ndarray
) -> np.ndarray:
    """The stochastic fold of the kernel, row by row in numpy (no numba): the same generator, the same bits.

    Column j is element ``offset + j``, or ``offset[j]`` for an array of element indices
    (the engine's gathered segments and per-element orders).
    """
    n, m = X.shape
    e = np.arange(offset, offset + m, dtype=np.uint64) if isinstance(offset, int) else offset.astype(np.uint64)
    X64 = X.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if order is not None:
            rows = np.arange(n) if order.size == 0 else order
            acc = X64[rows[0]].copy()
            for k in range(1, n):
                acc = _add_sr_numpy(acc, X64[rows[k]], fa, key, k - 1, e)
            return acc
        assert root is not None
        prog, nbuf, top = _program(root, n)
        bufs: list[np.ndarray] = [X64[0]] * max(nbuf, 1)
        for t, (o, a, b) in enumerate(prog):
            bufs[-1 - o] = _add_sr_numpy(
                X64[a] if a >= 0 else bufs[-1 - a], X64[b] if b >= 0 else bufs[-1 - b], fa, key, t, e
            )
        return bufs[-1 - top]
