"""The engine's arithmetic: IEEE addition in an accumulator format, loading inputs, scaling.

Every sum is rounded to the accumulator format once, from the exact sum of its two
operands, as IEEE 754 addition does on hardware:

* round to nearest even: the float64 sum of two values of a format with p <= 24 is
  rounded to float64 first; since 53 >= 2p + 2, this double rounding is innocuous
  (Figueroa 1995), so ``round_to(a + b)`` equals rounding the exact sum once.
* directed and stochastic modes: the exact remainder ``err`` of the float64 sum is
  recovered with TwoSum (Knuth); when the float64 sum lies on the target grid the
  sign of ``err`` decides the direction (no grid point of a format with p <= 52 lies
  strictly between the float64 sum and the exact sum).

Signed zeros follow IEEE 754 6.3: an exact zero sum of opposite-signed operands is
+0 except in mode ``down`` (-0); -0 + -0 = -0. NaN and Inf propagate as in IEEE;
a float64 overflow follows :func:`~fpreduce.core.rounding.overflow_value`.

* :func:`add_rounded`: two arrays of a format's values added, correctly rounded in any mode.
* ``_Arith``: addition in one accumulator format and mode, on float32 when it can
  (nearest even, p <= 24) and on float64 otherwise, with the per-reduction buffers.
* ``_Loader``: blocks of X made representable in the input format, then in the
  accumulator's (and premultiplied, predivided or scaled as DDP does when averaging).
* ``_scale``: one IEEE multiply or divide, correctly rounded (averaging); fp64 by ``_scale64``, scaled
  by 2**±600 first so that no remainder underflows or overflows. With numba, the formats of p <= 24 bits
  take the compiled :func:`fpreduce.core._kernels_round.scale_kernel` (the one bit rounder, ``round_bits``):
  the same bits. 64 x 2**18 bf16 words summed in bf16, one thread, premultiplied: 11-12 -> 3.2 ns per
  addition to nearest, 164-198 -> 5.0 stochastically (counter-based draws); divided after: 2.9 -> 0.93.

Used by :mod:`fpreduce.core.engine`, its fast path and :mod:`fpreduce.core.algorithms`;
imports neither, so the three share it without a circle.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from fpreduce.base import jit
from fpreduce.base import threads as pool
from fpreduce.core import _kernels_round as kr
from fpreduce.core.formats import NATIVE_DTYPES, Format
from fpreduce.core.grid import MODE_CODES
from fpreduce.core.options import Average
from fpreduce.core.rounding import (
    Mode,
    _nearest32_inplace,
    _nearest_from_float32,
    _round_with_remainder,
    overflow_value,
    round_to,
)
from fpreduce.plans import Tree

__all__ = ["add_rounded"]

#: a compiled tree: in-place ops ``(out, a, b)``, the number of buffers, the root operand
Program = tuple[list[tuple[int, int, int]], int, int]


def add_rounded(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    f: Format,
    mode: Mode,
    rng: np.random.Generator | None = None,
) -> NDArray[np.float64]:
    """IEEE addition of two arrays of ``f`` values, correctly rounded in ``mode``."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = a + b
        if mode is Mode.NEAREST_EVEN:
            out = s if f.precision == 53 else round_to(s, f).astype(np.float64)
        else:
            bb = s - a
            err = (a - (s - bb)) + (b - bb)
            err = np.where(np.isfinite(s), err, 0.0)
            out = _round_with_remainder(s, err, f, mode, rng)
            over = np.isinf(s) & np.isfinite(a) & np.isfinite(b)  # float64 overflow: IEEE 7.4 per mode
            if np.any(over):
                out = np.where(over, overflow_value(f, mode, s < 0), out)
        zero = (s == 0) & (a == b * -1)
        if np.any(zero):
            both_neg = np.signbit(a) & np.signbit(b)
            both_pos_zero = (a == 0) & (b == 0) & ~np.signbit(a) & ~np.signbit(b)
            neg = both_neg | ((mode is Mode.DOWN) & ~both_pos_zero)
            out = np.where(zero, np.where(neg, -0.0, 0.0), out)
    return out


def _add_nearest32(a: NDArray[np.float32], b: NDArray[np.float32], f: Format) -> NDArray[np.float32]:
    """Round-to-nearest addition for accumulators of at most 24 bits, in float32.

    The float32 sum double-rounds innocuously for p <= 11 (24 >= 2p + 2) and is
    exact IEEE for fp32; float32's IEEE addition also gives the right signed zeros.
    fp16 sums of values <= 65504 cannot overflow float32, and a bf16/tf32 sum that
    overflows float32 overflows the narrow format too.
    """
    s = a + b  # the caller holds np.errstate(over="ignore", invalid="ignore")
    if f.precision == 24:
        return s
    if f.name == "fp16":
        return s.astype(np.float16).astype(np.float32)  # IEEE convert, from float32
    if f.emin == -126:
        return _nearest_from_float32(s, f)
    return round_to(s, f)  # type: ignore[return-value]


class _Arith:
    """Addition in one accumulator format and mode, on float32 (p <= 24, nearest) or float64."""

    def __init__(self, fa: Format, mode: Mode, rng: np.random.Generator | None, threads: int | None = None) -> None:
        self.fa, self.mode, self.rng = fa, mode, rng
        self.fast = mode is Mode.NEAREST_EVEN and fa.precision <= 24
        self.dtype = np.dtype(np.float32 if self.fast else np.float64)
        self.programs: dict[int, tuple[Tree | None, Program]] = {}  # the fast path's, per shape object
        self._scratch: list[np.ndarray] = []
        self._gather: np.ndarray | None = None
        self._key: np.uint64 | None = None
        self.elements: np.ndarray | None = None  # the current block's element indices (stochastic folds)
        self.threads = threads  # the threads the compiled folds may split columns over (None: every core)

    def sr_key(self) -> np.uint64:
        """The counter-based generator's key: the first ``integers(0, 2**63)`` draw of ``rng``, drawn once."""
        if self._key is None:
            assert self.rng is not None
            self._key = np.uint64(int(self.rng.integers(0, 2**63)))
        return self._key

    def scratch(self, count: int, width: int) -> list[np.ndarray]:
        """``count`` float32 work arrays of ``width``, allocated once per reduction (no fresh pages per block)."""
        have = self._scratch
        if len(have) < count or (have and have[0].size < width):
            size = max(width, have[0].size if have else 0)
            have[:] = [np.empty(size, dtype=np.float32) for _ in range(max(count, len(have)))]
        return [a[:width] for a in have[:count]]

    def gather_buffer(self, n: int, width: int, dtype: np.dtype) -> np.ndarray:
        """An (n, width) array for gathered inputs, reused from block to block (no fresh pages)."""
        buf = self._gather
        if buf is None or buf.dtype != dtype or buf.shape[0] != n or buf.shape[1] < width:
            buf = self._gather = np.empty((n, width), dtype=dtype)
        return buf[:, :width]

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a + b rounded, a new array."""
        if self.fast:
            return _add_nearest32(a, b, self.fa)
        return add_rounded(a, b, self.fa, self.mode, self.rng)

    def add_into(self, acc: np.ndarray, b: np.ndarray, scratch: np.ndarray) -> None:
        """acc <- acc + b rounded, in place (scratch: a uint32/float16 buffer like acc)."""
        fa = self.fa
        if not self.fast:
            acc[...] = add_rounded(acc, b, fa, self.mode, self.rng)
            return
        np.add(acc, b, out=acc)
        if fa.precision == 24:
            return
        if fa.emin == -126:
            _nearest32_inplace(acc, fa, scratch)
        else:
            _nearest_small_inplace(acc, fa, scratch)


def _nearest_small_inplace(acc: NDArray[np.float32], f: Format, tmp: NDArray[np.uint32]) -> None:
    """Round float32 to nearest even onto a format of p <= 11 bits (fp16, fp8), in place.

    Magic-number rounding: with the quantum q of each value's binade in ``f`` (the
    subnormal quantum below 2**emin), M = 1.5 * 2**23 * q has ulp q in float32, so the
    float32 operations (x + M) - M round x to the q grid once, ties to even, exactly.
    A zero result gets x's sign bit back. Blocks holding a value of 2**emax or more
    (possible overflow), Inf or NaN go through ``round_to``. The caller's float32 sum
    double-rounds innocuously (24 >= 2p + 2).
    """
    bits = acc.view(np.uint32)
    t = tmp[: acc.size].reshape(acc.shape)
    np.bitwise_and(bits, np.uint32(0x7F800000), out=t)  # 2**e (0 for float32 subnormals)
    M = t.view(np.float32)
    if float(np.max(M)) >= 2.0**f.emax:  # possible overflow, Inf or NaN: the general path
        acc[...] = round_to(acc, f)
        return
    np.maximum(M, np.float32(2.0**f.emin), out=M)
    M *= np.float32(1.5 * 2.0 ** (23 - f.precision + 1))
    sign = bits & np.uint32(0x80000000)
    acc += M
    acc -= M
    bits |= sign  # only changes a zero result: (-tiny + M) - M is +0


class _Loader:
    """Makes blocks of X representable in the input format, then in the accumulator's."""

    def __init__(self, A: np.ndarray, fin: Format, fa: Format, mode: Mode, rng, dtype: np.dtype) -> None:  # type: ignore[no-untyped-def]
        self.A, self.fin, self.fa, self.mode, self.rng, self.dtype = A, fin, fa, mode, rng, dtype
        self.fits = fin.precision <= fa.precision and fin.emin >= fa.emin and fin.emax <= fa.emax
        self.native = A.dtype == np.float32 and fin.precision >= 24  # float32 values are fp32 values
        self.premul: tuple[Average, float] | None = None  # (premultiply, predivide or ddp, N)
        self.threads: int | None = None  # the reduction's, for the compiled scaling (None: every core)

    def _representable(self, a: np.ndarray) -> bool:
        """Cheap exact test that float32 ``a`` already holds values of a bf16/tf32 input format.

        The bits of a contiguous ``a`` are OR-ed in chunks of 2**16 (a whole X at once, as
        binned and exact load it, would need a uint32 copy of it): no low bit may be set.
        """
        if a.dtype != np.float32 or self.fin.emin != -126:
            return False
        low = np.uint32((1 << (24 - self.fin.precision)) - 1)
        if not a.flags.c_contiguous:
            return not np.bitwise_and(a.view(np.uint32), low).any()
        bits = a.view(np.uint32).reshape(-1)
        return not any(np.bitwise_or.reduce(bits[s : s + (1 << 16)]) & low for s in range(0, bits.size, 1 << 16))

    def __call__(self, a: np.ndarray) -> np.ndarray:
        """A new array (or a read-only view) of ``a``'s values in the accumulator domain."""
        if self.premul is not None:
            scaled = _scale_words(a, self.premul, self.fin, self.mode, self.rng, self.threads)
            if scaled is not None:
                return self._accumulated(scaled)
        if not self.native and not self._representable(a):
            own = a.dtype.itemsize < 4 and a.dtype.name == NATIVE_DTYPES.get(self.fin.name)  # the format's words
            if a.dtype.name == "bfloat16":  # bf16 words are float32's top halves: a shift (0.26 ms per 2**20
                a = np.left_shift(a.view(np.uint16), 16, dtype=np.uint32).view(np.float32)  # against ml_dtypes' 0.33)
            elif a.dtype != np.float32 and a.dtype != np.float64:
                a = a.astype(np.float32)  # float16 / fp8 widen exactly
            if own:
                pass  # its values already: no rounding (NaNs made canonical below, as the rounding makes them)
            elif a.dtype == np.float32 and self.fin.precision <= 11 and self.fin.emin != -126:  # fp16, fp8
                a = a.copy()
                _nearest_small_inplace(a, self.fin, np.empty(a.size, dtype=np.uint32))
            else:
                a = round_to(a, self.fin)
            nan = np.isnan(a)
            if nan.any():
                a[nan] = np.nan  # canonical quiet NaN (see _nearest32_inplace)
        if self.premul is not None:
            a = _scale(a, self.premul, self.fin, self.mode, self.rng, self.threads)
        return self._accumulated(a)

    def _accumulated(self, a: np.ndarray) -> np.ndarray:
        """``a`` (values of the input format) in the accumulator's format and the engine's dtype."""
        if not self.fits:
            a = round_to(a, self.fa, self.mode, self.rng)
        return a if a.dtype == self.dtype else a.astype(self.dtype)


def _two_product(a: NDArray[np.float64], b: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """p + e == a * b exactly (Dekker/Veltkamp; no FMA in numpy)."""
    p = a * b
    split = 134217729.0  # 2**27 + 1
    ca = split * a
    ahi = ca - (ca - a)
    alo = a - ahi
    cb = split * b
    bhi = cb - (cb - b)
    blo = b - bhi
    e = ((ahi * bhi - p) + ahi * blo + alo * bhi) + alo * blo
    return p, e


def _scale(
    a: np.ndarray, how: tuple[Average, float], f: Format, mode: Mode, rng, threads: int | None = None
) -> np.ndarray:  # type: ignore[no-untyped-def]
    """One IEEE multiply by round(1/n) (``premultiply``) or divide by n (``predivide``, ``after``), correctly
    rounded to f; ``ddp``: torch's ``grad * (1. / n)``, in float32 (float64 for fp64), to nearest even, then to f.

    To nearest even the float64 product or quotient is IEEE's (fp64) or double-rounds innocuously (p <= 24,
    53 >= 2p + 2). In the other modes a narrow f takes the float64 result and its remainder (the exact
    TwoProduct error, or the exact division remainder over n): f's values (>= 2**-149) keep the remainder far
    above float64's underflow. fp64 has no wider type: :func:`_scale64`. ``rng``: a Generator (its stream, in
    numpy), or counter-based draws (``fpreduce.core._srload``: compiled where numba is, :func:`_scale_compiled`,
    over ``threads``).
    """
    kind, n = how
    out = _scale_compiled(a, how, f, mode, rng, threads)
    if out is not None:
        return out
    x = np.asarray(a, dtype=np.float64)
    if kind == "ddp":
        wide = f.precision == 53
        with np.errstate(invalid="ignore", over="ignore"):
            c = 1.0 / n if wide else float(np.float32(1.0 / n))
            p = x * c  # exact in float64 for f up to fp32 (24 + 24 significant bits), one rounding for fp64
            out = p if wide else round_to(round_to(p, "fp32"), f)
        return np.asarray(out, dtype=f.value_dtype if a.dtype != np.float64 else np.float64)
    mul = kind == "premultiply"
    d = float(np.ravel(round_to(np.array([1.0 / n]), f))[0]) if mul else float(n)
    with np.errstate(invalid="ignore", over="ignore"):
        if mode is Mode.NEAREST_EVEN:
            s = x * d if mul else x / d
            out = s if f.precision == 53 else round_to(s, f)
        elif f.precision == 53:
            out = _scale64(x, d, mul, mode, rng)
        else:
            s, err = _product_or_quotient(x, d, mul)
            err = np.where(np.isfinite(s) & np.isfinite(err), err, 0.0)
            out = _round_with_remainder(s, err, f, mode, rng)
    return np.asarray(out, dtype=f.value_dtype if a.dtype != np.float64 else np.float64)


def _scale_words(
    a: np.ndarray, how: tuple[Average, float], f: Format, mode: Mode, rng, threads: int | None
) -> np.ndarray | None:  # type: ignore[no-untyped-def]
    """:func:`_scale_compiled` of bf16 words of a bf16 input, read as they are (no float32 copy and NaN pass
    first: their NaNs the quiet NaN, as that copy's); None for other inputs, or without the compiled kernels
    (the caller then copies and scales as before)."""
    if a.dtype.name != "bfloat16" or f.name != "bf16":
        return None
    return _scale_compiled(a, how, f, mode, rng, threads)


def _scale_compiled(
    a: np.ndarray, how: tuple[Average, float], f: Format, mode: Mode, rng, threads: int | None
) -> np.ndarray | None:  # type: ignore[no-untyped-def]
    """:func:`_scale` by :func:`fpreduce.core._kernels_round.scale_kernel` (columns split over ``threads``: None,
    every core) for a format of p <= 24 bits and float32 or float64 values of one or two dimensions (read as
    float32, which holds f's values) or bf16 words (widened as read, a NaN the quiet NaN), to nearest, directed,
    or stochastic with counter-based draws (not a Generator's stream); None for the others. Reading the words
    rather than a float32 copy made premultiply on 64 x 2**20 bf16 words (the engine's column blocks, one
    thread) 110-114 -> 89 ms."""
    kind, n = how
    if not (
        jit.enabled()
        and f.precision <= 24
        and (a.dtype in (np.float32, np.float64) or a.dtype.name == "bfloat16")
        and a.ndim in (1, 2)
        and a.size
        and (mode is not Mode.STOCHASTIC or not isinstance(rng, np.random.Generator))
    ):
        return None
    if kind == "ddp":
        d = float(np.float32(1.0 / n))
    else:
        d = float(np.ravel(round_to(np.array([1.0 / n]), f))[0]) if kind == "premultiply" else float(n)
    if a.dtype.name == "bfloat16":  # its words, widened as read (a NaN the quiet NaN, as __call__'s copy makes it)
        A = np.ascontiguousarray(a).view(np.uint16)
    else:
        A = np.ascontiguousarray(a, dtype=np.float32)  # values of f: float32 holds them
    A = A.reshape(1, -1) if a.ndim == 1 else A
    out = np.empty(A.shape, dtype=np.float32)
    key, offset, base = (rng.key, rng.offset, rng.base) if mode is Mode.STOCHASTIC else (0, 0, 0)
    code = 2 if kind == "ddp" else 1 if kind == "premultiply" else 0
    spans = pool.split(A.shape[1], pool.resolve(threads, A.size))
    fn = kr.scale_kernel(code, 0 if code == 2 else MODE_CODES[mode])  # (torch's: to nearest, whatever the mode)
    c = kr.format_consts(f)
    pool.run(fn, [(A, out, d, c, np.uint64(key), offset, base, lo, hi) for lo, hi in spans])
    return out.reshape(a.shape).astype(np.float64 if a.dtype == np.float64 else f.value_dtype, copy=False)


def _product_or_quotient(
    x: NDArray[np.float64], d: float, mul: bool
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``s`` = RN(x * d) or RN(x / d) and ``err``: the exact product error, or the exact remainder x - s*d
    (representable for a correctly rounded quotient, Sterbenz for ``x - ph``) divided by d, rounded. Exact
    while nothing over- or underflows (see :func:`_scale64`)."""
    if mul:
        return _two_product(x, d)
    s = x / d
    ph, pl = _two_product(s, d)
    return s, ((x - ph) - pl) / d


_UP, _DOWN = 2.0**600, 2.0**-600  # the scalings of _scale64
_QUANTUM = 2.0**-474  # fp64's subnormal quantum 2**-1074, scaled by 2**600


def _scale64(x: NDArray[np.float64], d: float, mul: bool, mode: Mode, rng) -> NDArray[np.float64]:  # type: ignore[no-untyped-def]
    """x * d or x / d (d = round(1/n) or n, n the worker count) rounded once to fp64 in a directed or stochastic
    mode, subnormal quotients included; float64 has no wider type, and no FMA in numpy.

    Computing the remainder in place fails at both ends: below 2**-1022 the remainder underflows (to 0: the
    nearest result is taken for the directed one) and the quotient's 53 bits are more than the subnormal grid
    holds; above 2**996 Veltkamp's split ``(2**27 + 1) * s`` overflows (the remainder is NaN, taken as 0). So
    each x is first scaled by 2**k, exactly (a power of two, a normal result): k = 600 for |x| < 2**-600,
    k = -600 for |x| >= 2**600, else 0, so that 2**-474 <= |x 2**k| < 2**600 (for N < 2**64, far beyond any
    worker count):

    1. s = RN(x' op d) and its remainder are exact: Dekker's TwoProduct needs no overflow in the split
       (|s|, d < 2**996) and no underflow in its partial products (the exponents of s and d add up to far
       more than -970); the remainder x' - s*d of a correctly rounded quotient is representable, and
       ``x' - ph`` is exact by Sterbenz. The remainder over d (rounded) keeps its sign, nonzero or zero.
    2. The exact scaled value v lies between s and its float64 neighbour on the remainder's side: ``lo``
       and ``hi`` are v rounded down and up to 53 bits (equal to s when v = s).
    3. For k = 600 the grid is not the 53-bit one but fp64's scaled: G = the 53-bit floats that are
       multiples of Q = 2**-474 (2**-1074 scaled). G lies inside the 53-bit floats, so rounding down to G
       is rounding down to 53 bits, then to G: floor(lo / Q) * Q (division by a power of two, exact; the
       integer is below 2**52 where it matters, and above 2**-422 every 53-bit float is a multiple of Q
       already); likewise up with ceil. floor/ceil keep the sign of a zero: -tiny rounds up to -0.
    4. The mode picks ``lo`` or ``hi`` (toward zero by x's sign; stochastic: ``hi`` iff u < ((s - lo) +
       err) / (hi - lo), as :func:`~fpreduce.core.rounding._round_with_remainder`, one uniform per element),
       and 2**-k scales the pick back: a float64 value (|x op d| <= |x| <= max_finite: no overflow, and a
       multiple of 2**-1074 below 2**-1022), so the multiply is exact.

    ±0 gives ±0 (the remainder is 0, lo = hi = s), ±Inf stays (remainder NaN, taken as 0) and NaN stays.
    """
    assert 2.0**-64 < d < 2.0**64, d  # d = N or round(1/N): N < 2**64
    ax = np.abs(x)
    small = ax < _DOWN
    k = np.where(small, _UP, np.where(ax >= _UP, _DOWN, 1.0))
    s, err = _product_or_quotient(x * k, d, mul)
    err = np.where(np.isfinite(err), err, 0.0)
    lo = np.where(err < 0, np.nextafter(s, -np.inf), s)
    hi = np.where(err > 0, np.nextafter(s, np.inf), s)
    if np.any(small):
        lo = np.where(small, np.floor(lo / _QUANTUM) * _QUANTUM, lo)
        hi = np.where(small, np.ceil(hi / _QUANTUM) * _QUANTUM, hi)
    if mode is Mode.UP:
        out = hi
    elif mode is Mode.DOWN:
        out = lo
    elif mode is Mode.TOWARD_ZERO:
        out = np.where(x < 0, hi, lo)
    else:
        gap = hi - lo
        with np.errstate(invalid="ignore", divide="ignore"):
            p = ((s - lo) + err) / gap
        u = rng.random(size=s.shape)
        out = np.where((gap > 0) & np.isfinite(gap) & (u < p), hi, np.where(gap > 0, lo, s))
    return out * (1.0 / k)
