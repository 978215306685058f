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
from collections.abc import Iterator
from fractions import Fraction

import mpmath
import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce.base import jit
from fpreduce.base.dtypes import as_float_array
from fpreduce.base.errors import InvalidArgument
from fpreduce.base.fpflags import own_flags
from fpreduce.core._exact_limbs import (
    _BLOCK_CELLS,
    _E_OFFSET,
    _NE,
    NAN,
    NINF,
    NOT_NEGZERO,
    PINF,
    _buckets,
    _column_block,
    _LazyValues,
    _Limbs,
    float32_block,
)
from fpreduce.core._exact_proof import _float64_exact_columns, _scan
from fpreduce.core._reference import add_exact, round_float, round_fraction, round_scaled
from fpreduce.core.formats import Format, get_format
from fpreduce.core.rounding import Mode, _round_with_remainder, get_mode, quantum_bits, round_to

__all__ = [
    "ExactSum",
    "add_exact",
    "exact_sum",
    "exact_sum_counting_zeros",
    "exact_sum_fraction",
    "exact_sum_mpmath",
    "exact_sum_scan",
    "round_float",
    "round_fraction",
    "round_scaled",
]  # (add_exact, round_*: the scalar reference of core._reference, public here for tests and slow oracles)

_FP64 = get_format("fp64")


def _check_input(X: ArrayLike, axis: int) -> tuple[NDArray[np.floating], tuple[int, ...], int]:
    """Validate, move ``axis`` first, flatten the rest; returns (2-D floats, out shape, bits)."""
    a = as_float_array(
        X,
        "exact_sum needs a float array (float16/32/64, bfloat16, float8, a torch tensor of one), got dtype {dtype}; "
        "convert with .astype(np.float64)",
    )
    if a.dtype.kind == "f" and a.dtype.itemsize > 8:
        raise InvalidArgument(
            f"dtype {a.dtype} is wider than float64 and cannot be summed exactly here; pass float64 or narrower"
        )
    if a.ndim == 0:
        raise InvalidArgument("exact_sum needs at least a 1-D array; wrap a scalar as [x]")
    if not isinstance(axis, int | np.integer) or not -a.ndim <= axis < a.ndim:
        raise InvalidArgument(
            f"axis {axis!r} is out of range for an array with {a.ndim} dimension(s); "
            f"use an integer in [{-a.ndim}, {a.ndim - 1}]"
        )
    a = np.moveaxis(a, int(axis), 0)
    out_shape = a.shape[1:]
    if a.dtype not in (np.float16, np.float32, np.float64):
        # bfloat16/float8 (ml_dtypes): widened exactly to float32, which holds all their values
        # (subnormals and the e8m0 scales included). Not to float64: the exactness proof reads
        # the significand field of the array it is given, so ``sigbits`` must be that dtype's.
        a = np.asarray(a, dtype=np.float32)
    sigbits = 53 if a.dtype == np.float64 else 24  # 24 bits hold float16's and float32's significands
    a2 = a.reshape(a.shape[0], math.prod(out_shape))  # widened to float64 per chunk later
    return a2, out_shape, sigbits


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

    def __init__(
        self,
        values: list[tuple[int, int]] | _LazyValues | _MixedValues,
        special: NDArray[np.float64],
        nonfinite: NDArray[np.bool_],
        negzero: NDArray[np.bool_],
        shape: tuple[int, ...],
        hi: NDArray[np.float64] | None = None,
        lo: NDArray[np.float64] | None = None,
    ) -> None:
        self.values = values
        self.special = special
        self.nonfinite = nonfinite.reshape(shape)
        self.negzero = negzero
        self.shape = shape
        if hi is not None and lo is not None:
            self.hi = hi.reshape(shape)
            self.lo = lo.reshape(shape)
            return
        hi = np.empty(len(values))
        lo = np.zeros(len(values))
        for j, (v, s) in enumerate(values):
            if nonfinite.flat[j]:
                hi[j] = special[j]
                continue
            h = round_scaled(v, s, _FP64, "nearest_even")
            if v == 0 and negzero[j]:
                h = -0.0
            hi[j] = h
            if math.isfinite(h):
                n, k = _split(h)
                t = min(s, k)
                lo[j] = round_scaled((v << (s - t)) - (n << (k - t)), t, _FP64, "nearest_even")
        self.hi = hi.reshape(shape)
        self.lo = lo.reshape(shape)

    def to_float64(self) -> NDArray[np.float64]:
        """The sums correctly rounded (nearest-even, once) to float64."""
        return self.hi.copy()

    def fraction(self, index: int = 0) -> Fraction:
        """The exact sum of flattened column ``index`` as a Fraction (finite columns)."""
        v, s = self.values[index]
        return Fraction(v) * Fraction(2) ** s

    @own_flags
    def round(
        self, fmt: str | Format, mode: str = "nearest_even", rng: np.random.Generator | None = None
    ) -> NDArray[np.floating]:
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
        m = get_mode(mode)
        if m is Mode.STOCHASTIC and rng is None:
            raise InvalidArgument("stochastic rounding needs rng=np.random.default_rng(seed)")
        hi = self.hi.reshape(-1)
        lo = self.lo.reshape(-1)
        with np.errstate(invalid="ignore", over="ignore"):
            if m is Mode.NEAREST_EVEN:
                out = np.asarray(round_to(hi, f), dtype=f.value_dtype)
                inexact = np.flatnonzero(lo)  # where lo == 0, hi IS the exact sum
                if f.precision < 53 and inexact.size:
                    # hi = RN64(exact) rounds like the exact sum unless hi sits on a midpoint of
                    # f's grid (midpoints are float64 numbers): then lo's sign decides
                    h = hi[inexact]
                    a = np.abs(h)
                    dz = round_to(a, f, Mode.TOWARD_ZERO).astype(np.float64)
                    q = quantum_bits(dz, f).view(np.float64)
                    mid = np.isfinite(a) & ((a - dz) * 2 == q)
                    if mid.any():
                        up = round_to(h[mid], f, Mode.UP)
                        down = round_to(h[mid], f, Mode.DOWN)
                        out[inexact[mid]] = np.where(lo[inexact[mid]] > 0, up, down)
            else:
                out = np.asarray(_round_with_remainder(hi, lo, f, m, rng), dtype=f.value_dtype)
            nf = self.nonfinite.reshape(-1)
            for j in np.flatnonzero(~np.isfinite(hi) & ~nf):  # exact sum beyond float64's range
                v, s = self.values[int(j)]
                u = None if rng is None else float(rng.random())
                out[j] = round_scaled(v, s, f, m.value, u)
            if nf.any():
                sp = self.special[nf]
                out[nf] = np.where(np.isnan(sp) | f.has_inf, sp, np.nan)
        return out.reshape(self.shape)

    @own_flags
    def error_of(self, y: ArrayLike) -> NDArray[np.float64]:
        """``y - exact``, rounded once (nearest-even) to float64, per column.

        NaN/Inf in ``y`` or a non-finite sum give the float64 result of ``y - sum``.
        """
        yy = np.broadcast_to(np.asarray(y, dtype=np.float64), self.shape).reshape(-1)
        hi, lo = self.hi.reshape(-1), self.lo.reshape(-1)
        nf = self.nonfinite.reshape(-1)
        # where lo == 0 and hi is finite the exact sum IS hi (the remainder is a multiple of
        # 2**-1074, so it would not round to 0): one float64 subtraction rounds once
        easy = (lo == 0) & np.isfinite(hi) & ~nf
        with np.errstate(invalid="ignore", over="ignore"):
            out = np.where(easy, yy - hi, 0.0)
        for j in np.flatnonzero(~easy):
            v, s = self.values[int(j)]
            yj = float(yy[j])
            if self.nonfinite.flat[j] or not math.isfinite(yj):
                with np.errstate(invalid="ignore"):
                    out[j] = np.float64(yj) - (self.special[j] if self.nonfinite.flat[j] else 0.0)
                continue
            n, k = _split(yj)
            t = min(s, k)
            d = (n << (k - t)) - (v << (s - t))
            out[j] = round_scaled(d, t, _FP64, "nearest_even") if d else 0.0
        return out.reshape(self.shape)


@own_flags
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
    if a.dtype == np.float32 and a.shape[0] >= _TALL and _buckets is not None and jit.enabled():
        return _exact_general(a, out_shape, sigbits)  # one compiled pass answers every column: no scan first
    return _scanned(a, out_shape, sigbits)[0]


#: Columns of at least this many float32 terms go straight to the buckets in :func:`exact_sum` (a column's limbs
#: cost ~1-2 us to finish, ~1 ns a term over a short column; the float64 scan that may spare them costs ~1 ns a
#: term and, on normal data, spares nothing in a long column): measured on 10^6 x 1, 1.8 ns a term against 3.3
#: with the scan first; on 8 x 2^18, 2.0 ns with the scan first (every column proved exact in float64), 175 without.
_TALL = 1 << 14


def exact_sum_counting_zeros(X: ArrayLike, axis: int = 0) -> tuple[ExactSum, int | None]:
    """:func:`exact_sum` and, when the compiled scan ran, the number of zero terms (+0.0 and -0.0).

    The count comes free with the compiled column scan (numba installed and
    :func:`fpreduce.base.jit.enabled`); on the numpy path it is None (count them
    yourself if you need them).
    """
    ex, zeros, _ = exact_sum_scan(X, axis)
    return ex, zeros


@own_flags
def exact_sum_scan(X: ArrayLike, axis: int = 0) -> tuple[ExactSum, int | None, NDArray[np.float64] | None]:
    """:func:`exact_sum_counting_zeros`, and the float64 sum of ``|x|`` in row order along ``axis``
    (the backward error's scale; numpy's ``np.abs(X).sum(axis, dtype=np.float64)`` gives the same
    bits for two or more columns, and sums a single column pairwise) from the same compiled pass;
    None for both on the numpy path."""
    return _scanned(*_check_input(X, axis))


def _scanned(
    a: NDArray[np.floating], out_shape: tuple[int, ...], sigbits: int
) -> tuple[ExactSum, int | None, NDArray[np.float64] | None]:
    """:func:`exact_sum_scan` of an input :func:`_check_input` made (2-D, the summed axis first)."""
    n, c = a.shape
    zeros = absum = None
    if n and c:
        scan = _scan(a) if jit.enabled() else None
        if scan is not None:
            zeros, absum = scan[4], scan[5].reshape(out_shape)
        ok = _float64_exact_columns(a, sigbits) if scan is None else scan[6]
        if ok.any():
            return _with_fast_columns(a, ok, out_shape, sigbits, None if scan is None else scan[3]), zeros, absum
    return _exact_general(a, out_shape, sigbits), zeros, absum


def _with_fast_columns(
    a: NDArray[np.floating],
    ok: NDArray[np.bool_],
    out_shape: tuple[int, ...],
    sigbits: int,
    acc: NDArray[np.float64] | None = None,
) -> ExactSum:
    """The exact sum from the float64 row-order sums ``acc`` (computed here if None; else the caller's, which
    becomes ``hi``) of the columns ``ok`` proved exact, and the general path's for the others."""
    c = a.shape[1]
    fast = None if ok.all() else np.flatnonzero(ok)  # (None, the usual case: every column proved)
    with np.errstate(invalid="ignore", over="ignore"):
        if acc is None:
            acc = a[0].astype(np.float64)  # row by row: the fastest float64 column sum in numpy
            for row in a[1:]:
                acc += row
        s = acc if fast is None else acc[fast]  # exact where proved: hi, and lo = 0 (any order gives the same bits)
    lo = np.zeros(c)
    special = np.zeros(c)
    nonfinite = np.zeros(c, dtype=bool)
    negzero = np.zeros(c, dtype=bool)
    zero = np.flatnonzero(s == 0)
    if zero.size:  # the sum is -0.0 only if every term is -0.0
        cols = zero if fast is None else fast[zero]
        z = a[:, cols]
        nz = np.all((z == 0) & np.signbit(z), axis=0)
        negzero[cols] = nz
        s[zero] = np.where(nz, -0.0, 0.0)
    if fast is None:
        hi = s
    else:
        hi = np.empty(c)
        hi[fast] = s
    slow = np.flatnonzero(~ok)
    rest: ExactSum | None = None
    if slow.size:
        rest = _exact_general(a[:, slow], (slow.size,), sigbits)
        hi[slow], lo[slow] = rest.hi, rest.lo
        special[slow], nonfinite[slow], negzero[slow] = rest.special, rest.nonfinite, rest.negzero
    values = _MixedValues(hi, slow, rest)
    return ExactSum(values, special, nonfinite, negzero, out_shape, hi, lo)


class _MixedValues:
    """``(V, s)`` per column: from the exact float64 sum, or from the general path."""

    def __init__(self, hi: NDArray[np.float64], slow: NDArray[np.intp], rest: ExactSum | None) -> None:
        self._hi = hi
        self._pos = {int(j): i for i, j in enumerate(slow)}
        self._rest = rest

    def __len__(self) -> int:
        return len(self._hi)

    def __getitem__(self, j: int) -> tuple[int, int]:
        if j < 0:
            j += len(self._hi)
        i = self._pos.get(j)
        if i is not None:
            assert self._rest is not None
            return self._rest.values[i]  # type: ignore[no-any-return]
        return _split(float(self._hi[j])) if self._hi[j] != 0 else (0, 0)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return (self[j] for j in range(len(self._hi)))

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if hasattr(other, "__iter__") else NotImplemented


def _exact_float32(a: NDArray[np.float32], out_shape: tuple[int, ...], sigbits: int) -> ExactSum:
    """:func:`_exact_general` of float32 columns by the compiled buckets, a block of columns per pass (their
    NaN, Inf and all -0 from the same pass: :func:`fpreduce.core._exact_limbs.float32_block`)."""
    n, c = a.shape
    parts = [(c0, float32_block(a[:, c0 : c0 + _F32_COLS])) for c0 in range(0, c, _F32_COLS)]
    flags = np.concatenate([p[1][4] for p in parts])
    blocks = [(c0, p[0]) for c0, p in parts]
    hi, lo, fbk = (np.concatenate([p[1][k] for p in parts]) for k in (1, 2, 3))
    nan, pinf, ninf = ((flags & f) != 0 for f in (NAN, PINF, NINF))
    return _assemble(blocks, hi, lo, fbk, nan, pinf, ninf, (flags & NOT_NEGZERO) == 0, out_shape, sigbits)


_F32_COLS = 1024  # columns per pass of the compiled buckets (their 2 MB of int64 buckets)


def _exact_general(a: NDArray[np.floating], out_shape: tuple[int, ...], sigbits: int) -> ExactSum:
    n, c = a.shape
    if a.dtype == np.float32 and n and c and _buckets is not None and jit.enabled():
        return _exact_float32(a, out_shape, sigbits)  # type: ignore[arg-type]
    nan = np.zeros(c, dtype=bool)
    pinf = np.zeros(c, dtype=bool)
    ninf = np.zeros(c, dtype=bool)
    negzero = np.full(c, n > 0)
    blocks: list[tuple[int, _Limbs]] = []
    his: list[NDArray[np.float64]] = []
    los: list[NDArray[np.float64]] = []
    fbs: list[NDArray[np.bool_]] = []
    span = _NE
    if n and c:
        with np.errstate(invalid="ignore"):
            ax = np.abs(a)
            fin = np.isfinite(ax)
            mx = float(np.max(ax, where=fin, initial=0))
            mn = float(np.min(ax, where=fin & (ax != 0), initial=np.inf))
        if 0 < mn <= mx:
            span = math.frexp(mx)[1] - math.frexp(mn)[1] + 1
    block = max(1, _BLOCK_CELLS // (2 * (span + 200)))  # bounded accumulator memory
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
        lb, hb, lo_, fb = _column_block(x, sigbits)
        blocks.append((c0, lb))
        his.append(hb)
        los.append(lo_)
        fbs.append(fb)
    hi = np.concatenate(his) if his else np.empty(0)
    lo = np.concatenate(los) if los else np.empty(0)
    fbk = np.concatenate(fbs) if fbs else np.zeros(0, dtype=bool)
    return _assemble(blocks, hi, lo, fbk, nan, pinf, ninf, negzero, out_shape, sigbits)


def _assemble(  # type: ignore[no-untyped-def]
    blocks: list[tuple[int, _Limbs]], hi, lo, fbk, nan, pinf, ninf, negzero, out_shape: tuple[int, ...], sigbits: int
) -> ExactSum:
    """The :class:`ExactSum` of the general path's limb blocks, their float64 ``hi``/``lo``, the columns whose
    ``hi``/``lo`` need the exact integers (``fbk``), and each column's NaN, +Inf, -Inf and all -0."""
    nan = nan | (pinf & ninf)
    nonfinite = nan | pinf | ninf
    special = np.where(nan, np.nan, np.where(pinf, np.inf, np.where(ninf, -np.inf, 0.0)))
    values = _LazyValues(blocks, len(hi), -_E_OFFSET - sigbits)
    for j in np.flatnonzero(fbk & ~nonfinite):
        v, s = values[int(j)]
        h = round_scaled(v, s, _FP64, "nearest_even")
        hi[j] = h
        lo[j] = 0.0
        if math.isfinite(h):
            nn, k = _split(h)
            t = min(s, k)
            lo[j] = round_scaled((v << (s - t)) - (nn << (k - t)), t, _FP64, "nearest_even")
    hi = np.where((hi == 0) & negzero, -0.0, hi)
    hi = np.where(nonfinite, special, hi)
    lo = np.where(nonfinite, 0.0, lo)
    return ExactSum(values, special, nonfinite, negzero, out_shape, hi, lo)


def exact_sum_fraction(column: ArrayLike) -> Fraction:
    """Slow reference: the exact sum of the finite values of a 1-D column as a Fraction."""
    return sum((Fraction(float(x)) for x in np.asarray(column, dtype=np.float64).ravel()), Fraction(0))


@own_flags
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
        v = -int(man) if sign else int(man)
        out[j] = round_scaled(v, int(ex), _FP64, "nearest_even") if v else 0.0
    return out.reshape(out_shape)
