"""The binned sum's halves: the exact bin sums (numpy, or one compiled pass) and the final rounding.

:func:`binned_sum` is :func:`fpreduce.core.algorithms.binned` after its checks. The
result depends on B alone, B the exact sum of the kept parts ``RNE(x, 2**(E - 78))``
of the values (the three successive extractions keep exactly that: each grid is an
even multiple of the next, so a tie goes the same way), through ``hi = fl(B)`` and
``e = B - hi``; any exact way of adding the kept parts gives the same bits.

* ``sums_numpy`` (the reference, and the path without numba): a Python loop over the
  rows of a block of ``BLOCK`` columns, ten float64 numpy operations per row (the K = 3
  extractions into 3 bins), then the carry and TwoSum; ``odd`` rounds ``(hi, e)`` to
  odd at 53 bits (fp64: in the mode); ``finish`` signs zeros, puts specials and rounds
  once onto the format.
* ``sums_compiled``: one numba pass over blocks of ``_WIDTH`` columns, reading X in its
  own dtype (float32 or float64: no float64 copy). Per block: max and smallest nonzero
  |x| of each column (4 rows at a time, NaN skipped); the constants from E's bits; per
  value the part on bin 0's grid ``q0`` and the rest ``r = x - q0`` (|r| <= 2**(E - 27)),
  rounded to the grid 2**(E - 78) unless every value of the block is on it already
  (min nonzero |x| >= 2**(E - 79 + p): p-bit inputs); the rests of 4 rows add up exactly
  (|sum| <= 2**53 grid units) and that sum is split on bin 1's grid into bins 1 and 2;
  then the same carry and TwoSum, round to odd in place, specials found from a NaN
  ``hi`` (a NaN or Inf went through), -0.0 written where every term is -0.0.

tests/test_binned.py compares the two paths bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from fpreduce.base import jit
from fpreduce.base.errors import InvalidArgument
from fpreduce.core.formats import Format
from fpreduce.core.rounding import Mode, round_to

BLOCK = 1 << 13  # columns per block of the numpy path (and of the final rounding in stochastic mode)
W = 26  # bits per bin: two bin sums (2 x 26 bits) fit one float64 significand
K = 3  # bins: the window holds 78 bits below 2**E, E the exponent of max|x|
MAX_ABS = 2.0**960  # keeps the extraction constants 1.5 * 2**(t + 52) finite
TOO_BIG = "binned: |x| >= 2**960 (float64 inputs only); use exact for such sums"
_EMIN = -1074 + K * W  # E is at least this: the finest grid is 2**-1074, the constants normal
_SPECIAL = np.array([0.0, np.nan, np.inf, -np.inf])  # by special code: none, NaN, +Inf, -Inf
_WIDTH = 2048  # columns per block of the compiled pass: 64 float32 rows of it stay in L2 for the second pass

Sums = tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int8], NDArray[np.bool_] | None]


def _grid(x: NDArray[np.float64], M: NDArray[np.float64]) -> NDArray[np.float64]:
    """``x`` rounded (nearest even) to multiples of 2**t, exactly, for M = 1.5 * 2**(t+52).

    Valid for |x| <= 2**(t + 51): ``x + M`` stays in M's binade, whose ulp is 2**t.
    """
    return (x + M) - M


def sums_numpy(xb: NDArray[np.floating]) -> Sums:
    """``(hi, e, special, negzero)`` of the columns of block ``xb``, in numpy.

    ``hi + e`` is B (the sum of the kept parts) exactly, ``hi = fl(B)``; ``special``
    is 0, or 1 (NaN), 2 (+Inf), 3 (-Inf) for a column with NaN or Inf (its ``hi`` is
    meaningless); ``negzero`` (None when no ``hi`` is zero) says every term is -0.0.
    Raises InvalidArgument when a finite |x| >= 2**960.
    """
    special = np.zeros(xb.shape[1], dtype=np.int8)
    if not np.isfinite(xb).all():
        nan = np.isnan(xb).any(axis=0) | ((xb == np.inf).any(axis=0) & (xb == -np.inf).any(axis=0))
        inf = np.isinf(xb).any(axis=0)
        special = np.where(nan, 1, np.where(inf, np.where((xb == np.inf).any(axis=0), 2, 3), 0)).astype(np.int8)
        xb = np.where(np.isfinite(xb), xb, 0.0)
    mx = np.maximum(xb.max(axis=0), -xb.min(axis=0)).astype(np.float64)
    if np.any(mx >= MAX_ABS):
        raise InvalidArgument(TOO_BIG)
    E = np.maximum(np.frexp(mx)[1], _EMIN)
    Ms = [np.ldexp(1.5, E - W * (k + 1) + 52) for k in range(K)]
    S = [np.zeros(mx.shape) for _ in range(K)]
    t, q, r = np.empty(mx.shape), np.empty(mx.shape), np.empty(mx.shape)
    for x in xb:  # one row at a time: the five buffers stay in cache
        np.subtract(np.add(x, Ms[0], out=t), Ms[0], out=q)  # q = x on the grid of bin 0
        S[0] += q  # exact: integers below 2**26 on the grid, n <= 2**26
        np.subtract(x, q, out=r)  # exact: |x - q| <= half the grid, a multiple of ulp(x)
        for k in range(1, K):
            np.subtract(np.add(r, Ms[k], out=t), Ms[k], out=q)
            S[k] += q
            if k < K - 1:
                r -= q
    # carry the bins into non-overlapping form: |S[k]| <= 2**(grid of k-1) / 2
    for k in range(K - 1, 0, -1):
        h = _grid(S[k], Ms[k - 1])
        S[k] = S[k] - h
        S[k - 1] = S[k - 1] + h
    low = S[1] if K == 2 else S[1] + S[2]  # exact: 2 * 26 + 1 bits over the grid of bin 2
    hi = S[0] + low
    bb = hi - S[0]
    e = (S[0] - (hi - bb)) + (low - bb)  # TwoSum: hi + e == B exactly
    negzero = ((xb == 0) & np.signbit(xb)).all(axis=0) if (hi == 0).any() else None
    return hi, e, special, negzero


def odd(hi: NDArray[np.float64], e: NDArray[np.float64], f: Format, m: Mode) -> NDArray[np.float64]:
    """B = ``hi + e`` rounded to odd at 53 bits (exact for one more rounding onto p <= 51); fp64: in ``m``.

    ``y == 0`` exactly where ``hi == 0`` (B = 0).
    """
    if f.precision == 53:
        if m is Mode.UP:
            return np.where(e > 0, np.nextafter(hi, np.inf), hi)
        if m is Mode.DOWN:
            return np.where(e < 0, np.nextafter(hi, -np.inf), hi)
        if m is Mode.TOWARD_ZERO:
            return np.where((e != 0) & (np.signbit(e) != np.signbit(hi)), np.nextafter(hi, 0.0), hi)
        return hi
    inexact = e != 0
    bits = hi.view(np.uint64) - (inexact & (np.signbit(e) != np.signbit(hi))).astype(np.uint64)
    return (bits | inexact.astype(np.uint64)).view(np.float64)


def finish(
    y: NDArray[np.float64],
    special: NDArray[np.int8],
    negzero: NDArray[np.bool_] | None,
    f: Format,
    m: Mode,
    gen: np.random.Generator | None,
) -> NDArray[np.floating]:
    """``odd(hi, e)`` rounded once onto ``f`` in ``m``; zeros get their sign, specials their value."""
    if negzero is not None:  # -0.0 only if every term is -0.0
        zero = y == 0
        if zero.any():
            y = np.where(zero, np.where(negzero, -0.0, 0.0), y)
    if special.any():
        y = np.where(special != 0, _SPECIAL[special], y)  # round_to maps Inf to NaN for fp8_e4m3
    return round_to(y, f, m, gen)


def binned_sum(A: NDArray[np.floating], f: Format, m: Mode, gen: np.random.Generator | None) -> NDArray[np.floating]:
    """The binned sum of every column of ``A`` rounded onto ``f``: compiled when it can, else numpy.

    The numpy path works by blocks of BLOCK columns; stochastic rounding draws by such
    blocks on both paths (the same numbers), the other modes round the compiled sums at once.
    """
    cols = A.shape[1]
    whole = sums_compiled(A, f, m)
    if whole is not None and gen is None:
        return finish(*whole, None, f, m, gen).astype(f.value_dtype, copy=False)
    out = np.empty(cols, dtype=f.value_dtype)
    for c0 in range(0, cols, BLOCK):
        cut = slice(c0, c0 + BLOCK)
        if whole is None:
            hi, e, special, negzero = sums_numpy(A[:, cut])
            y = odd(hi, e, f, m)
        else:
            y, special, negzero = whole[0][cut], whole[1][cut], None
        out[cut] = finish(y, special, negzero, f, m, gen)
    return out


def binned_checked(A: NDArray[np.floating], f: Format, m: Mode, low: int) -> NDArray[np.floating] | None:
    """``binned_sum`` (not stochastic) of float32 ``A`` if the compiled pass runs and finds no value with
    one of the ``low`` bits set, else None: the engine's check that ``A`` holds bf16 or tf32 values, made
    while the pass reads ``A`` (no pass of its own)."""
    whole = sums_compiled(A, f, m, low)
    return None if whole is None else finish(*whole, None, f, m, None).astype(f.value_dtype, copy=False)


def _split(x, M0, M2, fine):  # type: ignore[no-untyped-def]
    """(part of bin 0, the rest on the grid of bin 2) of float64 ``x``; ``fine``: x is on that grid already."""
    q0 = (x + M0) - M0
    r = x - q0  # exact, |r| <= 2**(E - 27)
    return q0, (r if fine else (r + M2) - M2)


def _special_column(X, j):  # type: ignore[no-untyped-def]
    """(special code, max of the finite |x|) of column j of X, which holds NaN or Inf."""
    nan, pinf, ninf, mx = False, False, False, 0.0
    for i in range(X.shape[0]):
        v = float(X[i, j])
        if v != v:
            nan = True
        elif v == math.inf:
            pinf = True
        elif v == -math.inf:
            ninf = True
        elif abs(v) > mx:
            mx = abs(v)
    code = 1 if nan or (pinf and ninf) else 2 if pinf else 3 if ninf else 0
    return code, mx


def _block_range(X, c0, c, hi, lo):  # type: ignore[no-untyped-def]
    """hi[j] <- max |x| of column c0 + j, lo[j] <- its smallest nonzero |x| (Inf: none); NaNs are skipped."""
    n = X.shape[0]
    for j in range(c):
        hi[j] = 0.0
        lo[j] = math.inf
    inf = lo[0]  # in X's dtype: float32 lanes stay float32
    i = 0
    while i < n:  # four rows at a time (the last group repeats row n - 1)
        ra, rb = X[i, c0 : c0 + c], X[min(i + 1, n - 1), c0 : c0 + c]
        rc, rd = X[min(i + 2, n - 1), c0 : c0 + c], X[min(i + 3, n - 1), c0 : c0 + c]
        for j in range(c):
            a, b, d, g = abs(ra[j]), abs(rb[j]), abs(rc[j]), abs(rd[j])
            u = max(max(a, b), max(d, g))
            hi[j] = u if u > hi[j] else hi[j]
            a, b = (a if a != 0 else inf), (b if b != 0 else inf)  # zeros are on every grid
            d, g = (d if d != 0 else inf), (g if g != 0 else inf)
            u = min(min(a, b), min(d, g))
            lo[j] = u if u < lo[j] else lo[j]
        i += 4


def _block_grids(X, c0, c, hi, lo, p, W, M, S, special):  # type: ignore[no-untyped-def]
    """Columns c0..: Inf marked, S zeroed, M[k] = 1.5 * 2**(E - 26 (k + 1) + 52) built from E's bits;
    returns (a finite |x| >= 2**960, every value of the block on the grid of bin 2, 2**(E - 78))."""
    fine = True
    for j in range(c):
        special[c0 + j] = 0
        if hi[j] == math.inf:  # the max of its finite values instead (rare)
            code, top = _special_column(X, c0 + j)
            special[c0 + j], hi[j], fine = code, top, False
    Wb, Mb = W.view(np.int64), M.view(np.int64)
    for j in range(c):
        W[0, j] = hi[j]
        W[1, j] = lo[j]
    big, ok = 0, 0
    for j in range(c):
        big += W[0, j] >= 2.0**960
        E = max((Wb[0, j] >> 52) - 1022, -996)  # frexp's exponent (0 for 0: -996, the same sums), _EMIN
        ok += (Wb[1, j] >> 52) - 1023 >= E - 79 + p  # min nonzero |x| >= 2**(E - 79 + p): ulp(x) >= 2**(E - 78)
        for k in range(3):
            Mb[k, j] = ((E + 1049 - 26 * k) << 52) | (1 << 51)
            S[k, j] = 0.0
    return big > 0, fine and ok == c


def _block_bins(X, c0, c, M, S, fine):  # type: ignore[no-untyped-def]
    """Add every row of columns c0.. to the bins S: part 0 to S[0], the rest carried over S[1] and S[2].

    Four rows at a time: their rests (|r| <= 2**(E - 27), on the grid 2**(E - 78))
    add up exactly (|t| <= 2**53 grid units), then t is split on the grid of bin 1.
    """
    n = X.shape[0]
    M0, M1, M2 = M[0, :c], M[1, :c], M[2, :c]
    S0, S1, S2 = S[0, :c], S[1, :c], S[2, :c]
    i = 0
    while i + 4 <= n:
        xa, xb = X[i, c0 : c0 + c], X[i + 1, c0 : c0 + c]
        xc, xd = X[i + 2, c0 : c0 + c], X[i + 3, c0 : c0 + c]
        for j in range(c):
            a0, a1 = _split(float(xa[j]), M0[j], M2[j], fine)
            b0, b1 = _split(float(xb[j]), M0[j], M2[j], fine)
            d0, d1 = _split(float(xc[j]), M0[j], M2[j], fine)
            e0, e1 = _split(float(xd[j]), M0[j], M2[j], fine)
            S0[j] += (a0 + b0) + (d0 + e0)
            t = (a1 + b1) + (d1 + e1)
            h = (t + M1[j]) - M1[j]
            S1[j] += h
            S2[j] += t - h
        i += 4
    while i < n:
        xa = X[i, c0 : c0 + c]
        for j in range(c):
            a0, t = _split(float(xa[j]), M0[j], M2[j], fine)
            h = (t + M1[j]) - M1[j]
            S0[j] += a0
            S1[j] += h
            S2[j] += t - h
        i += 1


def _block_carry(X, c0, c, M, S, hi, bits, e, odd, special, negzero):  # type: ignore[no-untyped-def]
    """hi + e = B per column (carry, then TwoSum, as ``sums_numpy``), hi rounded to odd if ``odd`` (``bits``:
    its int64 view); a NaN hi (a NaN or Inf went through the bins) gets its special code; a zero hi is -0.0
    if every term is -0.0 (``negzero``: scratch)."""
    bad = 0
    for j in range(c):
        s0, s1, s2 = S[0, j], S[1, j], S[2, j]
        h = (s2 + M[1, j]) - M[1, j]
        s2 = s2 - h
        s1 = s1 + h
        h = (s1 + M[0, j]) - M[0, j]
        s1 = s1 - h
        s0 = s0 + h
        low = s1 + s2
        t = s0 + low
        bb = t - s0
        hi[c0 + j] = t
        e[c0 + j] = (s0 - (t - bb)) + (low - bb)
        bad += t != t
    if bad:
        for j in range(c):
            if hi[c0 + j] != hi[c0 + j]:
                special[c0 + j] = _special_column(X, c0 + j)[0]
                hi[c0 + j], e[c0 + j] = 0.0, 0.0
    zeros = 0
    for j in range(c):
        t, r = hi[c0 + j], e[c0 + j]
        inexact = np.int64(odd and r != 0)  # round to odd at 53 bits, as ``odd``
        bits[c0 + j] = (bits[c0 + j] - (inexact & np.int64((r < 0) != (t < 0)))) | inexact
        negzero[j] = t == 0.0
        zeros += t == 0.0
    if zeros:  # -0.0 only if every term is -0.0
        for i in range(X.shape[0]):
            row = X[i, c0 : c0 + c]
            for j in range(c):
                v = row[j]
                negzero[j] = negzero[j] and v == 0 and math.copysign(1.0, v) < 0
        for j in range(c):
            if negzero[j]:
                hi[c0 + j] = -0.0


def _block_low(Xb, c0, c, low):  # type: ignore[no-untyped-def]
    """Whether a value of columns c0.. has one of the ``low`` bits set (``Xb``: X's bits)."""
    acc = Xb[0, c0] & 0
    for i in range(Xb.shape[0]):
        row = Xb[i, c0 : c0 + c]
        for j in range(c):
            acc |= row[j]
    return (acc & low) != 0


def _binned_kernel(X, Xb, low_bits, p, hi, bits, e, odd, special, width):  # type: ignore[no-untyped-def]
    """Fill hi (to odd if ``odd``), e, special for every column of X; 1, or 0 (stop) at a finite |x| >= 2**960,
    -1 (stop) at a value with one of the ``low_bits`` set (``Xb``: X's bits; 0: no check)."""
    m = X.shape[1]
    top, low = np.empty(width, X.dtype), np.empty(width, X.dtype)
    M = np.empty((3, width))
    S = np.empty((3, width))
    W = np.empty((2, width))
    negzero = np.empty(width, np.bool_)
    for c0 in range(0, m, width):
        c = min(width, m - c0)
        _block_range(X, c0, c, top, low)
        if low_bits and _block_low(Xb, c0, c, low_bits):
            return -1
        big, fine = _block_grids(X, c0, c, top, low, p, W, M, S, special)
        if big:
            return 0
        if fine:
            _block_bins(X, c0, c, M, S, True)
        else:
            _block_bins(X, c0, c, M, S, False)
        _block_carry(X, c0, c, M, S, hi, bits, e, odd, special, negzero)
    return 1


_KERNEL = jit.jit(_binned_kernel, "binned sums", 6.0)
_HELPERS = ("_split", "_special_column", "_block_range", "_block_low", "_block_grids", "_block_bins", "_block_carry")


@jit.serialized
def _compile_helpers() -> None:
    """Make the kernel's helpers numba functions (numba resolves the kernel's globals when it compiles it)."""
    g = globals()
    if not isinstance(g["_split"], type(_compile_helpers)):
        return
    jit.compile_names(g, _HELPERS, "binned sums", calls=set(_HELPERS) - {"_split"})


def sums_compiled(
    A: NDArray[np.floating], f: Format, m: Mode, low: int = 0
) -> tuple[NDArray[np.float64], NDArray[np.int8]] | None:
    """``y, special`` of every column of ``A`` in one compiled pass, or None (no numba, disabled, a dtype
    other than float32 and float64, or a value of float32 ``A`` with one of the ``low`` bits set): ``y`` is
    ``odd(hi, e, f, m)`` of ``sums_numpy``, its zeros signed already (-0.0 where every term is -0.0).

    Raises InvalidArgument when a finite |x| >= 2**960, as ``sums_numpy``.
    """
    if _KERNEL is None or not jit.enabled() or A.dtype not in (np.float32, np.float64):
        return None
    A = np.ascontiguousarray(A)  # a transposed or strided array copied once: the kernel compiles for 'C' rows only
    cols = A.shape[1]
    hi, e, special = np.empty(cols), np.empty(cols), np.empty(cols, dtype=np.int8)
    _compile_helpers()
    p, wide = (24 if A.dtype == np.float32 else 53), f.precision == 53
    dt = np.uint32 if p == 24 else np.uint64
    status = _KERNEL(A, A.view(dt), dt(low), p, hi, hi.view(np.int64), e, not wide, special, min(_WIDTH, max(cols, 1)))
    if status == 0:
        raise InvalidArgument(TOO_BIG)
    return None if status < 0 else ((odd(hi, e, f, m) if wide else hi), special)
