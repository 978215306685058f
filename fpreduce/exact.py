"""Exact column sums of float arrays, and correctly rounded results from them.

Method: every finite float64 ``x`` is ``m * 2**(E - 53)`` with ``(f, E) = frexp(x)``
and the integer ``m = f * 2**53`` (``|m| < 2**53``; 24 bits suffice for float16 and
float32 inputs). Values that share ``E`` are integer multiples of one unit, so one
``np.bincount`` per chunk of rows, keyed by (column, exponent), adds them exactly:
for float64 inputs ``m`` is split into a signed high part (27 bits) and a low part
(26 bits) so that bincount's float64 sums of at most 2**20 rows stay exact. Chunk
sums are accumulated in int64 buckets over the whole exponent range and finally
combined per column into one Python integer ``V`` (the sum is ``V * 2**s``).
Rounding is then done once, from the exact integer, onto any format.

Special values: a column holding NaN, or both +Inf and -Inf, sums to NaN; a column
holding only one sign of Inf sums to that Inf (``nonfinite`` marks both cases). An
exact zero sum is -0.0 only if every term is -0.0, else +0.0.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce._errors import InvalidArgument
from fpreduce.formats import Format, get_format

__all__ = ["ExactSum", "exact_sum", "exact_sum_fraction", "exact_sum_mpmath"]

_MODES = ("nearest_even", "toward_zero", "up", "down", "stochastic")
_E_OFFSET = 1073  # frexp exponents of finite nonzero float64 lie in [-1073, 1024]
_NE = 1024 + _E_OFFSET + 1
_CHUNK_ROWS = 1 << 16
_BLOCK_CELLS = 1 << 22  # bincount bins / accumulator cells per column block (bounded memory)
_FP64 = get_format("fp64")


def _check_input(X: ArrayLike, axis: int) -> tuple[NDArray[np.floating], tuple[int, ...], int]:
    """Validate, move ``axis`` first, flatten the rest; returns (2-D floats, out shape, bits)."""
    a = np.asarray(X)
    name = a.dtype.name
    if a.dtype.kind != "f" and name != "bfloat16" and not name.startswith("float8"):
        raise InvalidArgument(
            f"exact_sum needs a float array (float16/float32/float64), got dtype {a.dtype}; "
            "convert with .astype(np.float64)"
        )
    if a.dtype.kind == "f" and a.dtype.itemsize > 8:
        raise InvalidArgument(
            f"dtype {a.dtype} is wider than float64 and cannot be summed exactly here; "
            "pass float64 or narrower"
        )
    if a.ndim == 0:
        raise InvalidArgument("exact_sum needs at least a 1-D array; wrap a scalar as [x]")
    if not isinstance(axis, int | np.integer) or not -a.ndim <= axis < a.ndim:
        raise InvalidArgument(
            f"axis {axis!r} is out of range for an array with {a.ndim} dimension(s); "
            f"use an integer in [{-a.ndim}, {a.ndim - 1}]"
        )
    sigbits = 53 if a.dtype.itemsize > 4 else 24
    a = np.moveaxis(a, int(axis), 0)
    out_shape = a.shape[1:]
    if a.dtype not in (np.float16, np.float32, np.float64):
        a = np.asarray(a, dtype=np.float64)  # bfloat16/float8: exact widening
    a2 = a.reshape(a.shape[0], math.prod(out_shape))  # widened to float64 per chunk later
    return a2, out_shape, sigbits


def _round_int(v: int, s: int, f: Format, mode: str, u: float | None = None) -> float:
    """Round ``v * 2**s`` once onto format ``f`` (a nonzero ``v``); returns a Python float."""
    if v == 0:
        return 0.0
    neg = v < 0
    a = -v if neg else v
    p = f.precision
    e = a.bit_length() - 1 + s
    q = max(e, f.emin) - p + 1
    shift = q - s
    if shift <= 0:
        m = a << -shift
    else:
        m = a >> shift
        rem = a & ((1 << shift) - 1)
        if rem:
            if mode == "nearest_even":
                half = 1 << (shift - 1)
                m += rem > half or (rem == half and m & 1 == 1)
            elif mode == "up":
                m += not neg
            elif mode == "down":
                m += neg
            elif mode == "stochastic":
                m += Fraction(u if u is not None else 0.0) < Fraction(rem, 1 << shift)
    qmax = f.emax - p + 1
    mmax = int(Fraction(f.max_finite) / Fraction(2) ** qmax)
    if (m << max(q - qmax, 0)) > (mmax << max(qmax - q, 0)):
        inf = math.inf if f.has_inf else math.nan
        if mode == "nearest_even" or mode == "stochastic":
            r = inf
        elif mode == "toward_zero":
            r = f.max_finite
        elif mode == "up":
            r = f.max_finite if neg else inf
        else:
            r = inf if neg else f.max_finite
    else:
        r = math.ldexp(m, q)
    return -r if neg else r


def _split(x: float) -> tuple[int, int]:
    """A finite float as ``(n, k)`` with ``x == n * 2**k``."""
    n, d = x.as_integer_ratio()
    return n, -(d.bit_length() - 1)


class ExactSum:
    """Exact sums of the columns of an array, with once-rounded views of them.

    Attributes:
        values: per column the exact sum as ``(V, s)``, meaning ``V * 2**s``
            (flattened column order; meaningless where ``nonfinite``).
        hi: float64, the exact sum rounded to nearest-even (±inf beyond range, NaN/Inf
            for non-finite columns).
        lo: float64, ``exact - hi`` rounded to nearest-even (0.0 where ``hi`` is not
            finite).
        nonfinite: bool mask, True where the sum is NaN or ±Inf because of the inputs.
        special: float64, the NaN/±Inf sum where ``nonfinite``, else 0.0.
        negzero: bool mask, True where every term is -0.0 (the sum is -0.0).
        shape: shape of the result arrays.
    """

    def __init__(self, values: list[tuple[int, int]], special: NDArray[np.float64],
                 nonfinite: NDArray[np.bool_], negzero: NDArray[np.bool_],
                 shape: tuple[int, ...]) -> None:
        self.values = values
        self.special = special
        self.nonfinite = nonfinite.reshape(shape)
        self.negzero = negzero
        self.shape = shape
        hi = np.empty(len(values))
        lo = np.zeros(len(values))
        for j, (v, s) in enumerate(values):
            if nonfinite.flat[j]:
                hi[j] = special[j]
                continue
            h = _round_int(v, s, _FP64, "nearest_even")
            if v == 0 and negzero[j]:
                h = -0.0
            hi[j] = h
            if math.isfinite(h):
                n, k = _split(h)
                t = min(s, k)
                lo[j] = _round_int((v << (s - t)) - (n << (k - t)), t, _FP64, "nearest_even")
        self.hi = hi.reshape(shape)
        self.lo = lo.reshape(shape)

    def to_float64(self) -> NDArray[np.float64]:
        """The sums correctly rounded (nearest-even, once) to float64."""
        return self.hi.copy()

    def fraction(self, index: int = 0) -> Fraction:
        """The exact sum of flattened column ``index`` as a Fraction (finite columns)."""
        v, s = self.values[index]
        return Fraction(v) * Fraction(2) ** s

    def round(self, fmt: str | Format, mode: str = "nearest_even",
              rng: np.random.Generator | None = None) -> NDArray[np.floating]:
        """The sums rounded once, from the exact values, onto ``fmt``.

        Args:
            fmt: format name or Format (fp64, fp32, tf32, bf16, fp16, fp8_e4m3, fp8_e5m2).
            mode: ``nearest_even``, ``toward_zero``, ``up``, ``down`` or ``stochastic``.
            rng: generator for ``stochastic`` mode (required there).

        Returns:
            float32 array (float64 for fp64) of the rounded sums.

        Raises:
            InvalidArgument: unknown mode, or stochastic mode without ``rng``.
        """
        f = get_format(fmt)
        if mode not in _MODES:
            raise InvalidArgument(f"unknown rounding mode {mode!r}; use one of {', '.join(_MODES)}")
        if mode == "stochastic" and rng is None:
            raise InvalidArgument("stochastic rounding needs rng=np.random.default_rng(seed)")
        out = np.empty(len(self.values))
        us = rng.random(len(self.values)) if rng is not None else None
        for j, (v, s) in enumerate(self.values):
            if self.nonfinite.flat[j]:
                sp = self.special[j]
                out[j] = sp if (f.has_inf or np.isnan(sp)) else np.nan
            elif v == 0:
                out[j] = -0.0 if self.negzero[j] else 0.0
            else:
                out[j] = _round_int(v, s, f, mode, None if us is None else float(us[j]))
        return out.astype(f.value_dtype).reshape(self.shape)

    def error_of(self, y: ArrayLike) -> NDArray[np.float64]:
        """``y - exact``, rounded once (nearest-even) to float64, per column.

        NaN/Inf in ``y`` or a non-finite sum give the float64 result of ``y - sum``.
        """
        yy = np.broadcast_to(np.asarray(y, dtype=np.float64), self.shape).reshape(-1)
        out = np.empty(len(self.values))
        for j, (v, s) in enumerate(self.values):
            yj = float(yy[j])
            if self.nonfinite.flat[j] or not math.isfinite(yj):
                with np.errstate(invalid="ignore"):
                    out[j] = np.float64(yj) - (self.special[j] if self.nonfinite.flat[j] else 0.0)
                continue
            n, k = _split(yj)
            t = min(s, k)
            d = (n << (k - t)) - (v << (s - t))
            out[j] = _round_int(d, t, _FP64, "nearest_even") if d else 0.0
        return out.reshape(self.shape)


def _column_block(a: NDArray[np.floating], sigbits: int) -> list[tuple[int, int]]:
    """Exact sums ``(V, s)`` of the columns of a finite 2-D float64 block."""
    n, c = a.shape
    split = sigbits == 53
    acc_hi = np.zeros((c, _NE), dtype=np.int64)
    acc_lo = np.zeros((c, _NE), dtype=np.int64) if split else acc_hi
    rows = max(1, min(_CHUNK_ROWS, _BLOCK_CELLS // max(c, 1)))
    cols = np.arange(c, dtype=np.int64)
    for r0 in range(0, n, rows):
        x = np.asarray(a[r0:r0 + rows], dtype=np.float64)
        fr, ex = np.frexp(x)
        nz = fr != 0
        if not nz.any():
            continue
        ex = ex.astype(np.int64)
        e0 = int(ex[nz].min())
        e1 = int(ex[nz].max())
        ne = e1 - e0 + 1
        key = (cols * ne + np.where(nz, ex - e0, 0)).ravel()
        m = np.ldexp(fr, sigbits).astype(np.int64).ravel()  # exact integer significands
        parts = ((acc_hi, m >> 26), (acc_lo, m & ((1 << 26) - 1))) if split else ((acc_hi, m),)
        for acc, w in parts:
            b = np.bincount(key, weights=w.astype(np.float64), minlength=c * ne)
            acc[:, e0 + _E_OFFSET:e1 + _E_OFFSET + 1] += b.reshape(c, ne).astype(np.int64)
    s = -_E_OFFSET - sigbits
    res = []
    for j in range(c):
        h = acc_hi[j]
        idx = np.flatnonzero(h | acc_lo[j]) if split else np.flatnonzero(h)
        if split:
            lo = acc_lo[j]
            v = sum(((int(h[k]) << 26) + int(lo[k])) << int(k) for k in idx)
        else:
            v = sum(int(h[k]) << int(k) for k in idx)
        res.append((int(v), s))
    return res


def exact_sum(X: ArrayLike, axis: int = 0) -> ExactSum:
    """Exact sums of a float array along ``axis`` (columns for ``axis=0``).

    Args:
        X: float16/float32/float64 array (bfloat16/float8 ml_dtypes also accepted).
        axis: the axis summed over.

    Returns:
        ExactSum holding the exact sums; ``.to_float64()`` and ``.round(fmt, mode)``
        give them rounded once.

    Raises:
        InvalidArgument: non-float dtype, 0-d input or bad axis.

    >>> exact_sum(np.array([1e308, 1e308, -1e308])).to_float64().item()
    1e+308
    """
    a, out_shape, sigbits = _check_input(X, axis)
    n, c = a.shape
    nan = np.zeros(c, dtype=bool)
    pinf = np.zeros(c, dtype=bool)
    ninf = np.zeros(c, dtype=bool)
    negzero = np.full(c, n > 0)
    values: list[tuple[int, int]] = []
    block = max(1, _BLOCK_CELLS // (2 * _NE))
    for c0 in range(0, c, block):
        sl = slice(c0, c0 + block)
        x = a[:, sl]
        fin = np.isfinite(x)
        if not fin.all():
            nan[sl] = np.isnan(x).any(axis=0)
            pinf[sl] = (x == np.inf).any(axis=0)
            ninf[sl] = (x == -np.inf).any(axis=0)
            x = np.where(fin, x, 0.0)
        negzero[sl] &= ((x == 0) & np.signbit(x)).all(axis=0) if n else False
        values.extend(_column_block(x, sigbits))
    nan |= pinf & ninf
    nonfinite = nan | pinf | ninf
    special = np.where(nan, np.nan, np.where(pinf, np.inf, np.where(ninf, -np.inf, 0.0)))
    return ExactSum(values, special, nonfinite, negzero, out_shape)


def exact_sum_fraction(column: ArrayLike) -> Fraction:
    """Slow reference: the exact sum of the finite values of a 1-D column as a Fraction."""
    return sum((Fraction(float(x)) for x in np.asarray(column, dtype=np.float64).ravel()),
               Fraction(0))


def exact_sum_mpmath(X: ArrayLike, axis: int = 0) -> NDArray[np.float64]:
    """Reference sums with mpmath at a precision large enough to be exact.

    A local ``mpmath.MPContext`` is used (the global precision is untouched) with
    ``emax - emin + 53 + log2(n) + 16`` bits; the exact result is then rounded once to
    float64 (nearest-even). Special values follow ``exact_sum``.
    """
    a, out_shape, _ = _check_input(X, axis)
    n, c = a.shape
    out = np.empty(c)
    for j in range(c):
        col = a[:, j]
        if np.isnan(col).any() or (np.isposinf(col).any() and np.isneginf(col).any()):
            out[j] = np.nan
            continue
        if np.isinf(col).any():
            out[j] = col[np.isinf(col)][0]
            continue
        nzc = col[col != 0]
        if nzc.size == 0:
            out[j] = -0.0 if n and np.signbit(col).all() else 0.0
            continue
        _, e = np.frexp(nzc)
        ctx = mpmath.MPContext()
        ctx.prec = int(e.max()) - int(e.min()) + 53 + int(n).bit_length() + 16
        acc = ctx.mpf(0)
        for x in nzc:
            acc = acc + ctx.mpf(float(x))
        sign, man, ex, _bc = acc._mpf_
        v = (-int(man) if sign else int(man))
        out[j] = _round_int(v, int(ex), _FP64, "nearest_even") if v else 0.0
    return out.reshape(out_shape)
