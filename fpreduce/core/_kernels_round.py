"""One IEEE addition rounded in any mode by integer bit operations: the compiled folds' rounding.

:func:`add_round` adds two values of a format of p <= 52 bits (fp8 .. fp32, every
accumulator but fp64) and rounds the exact sum once, in any mode, from the float64
sum ``s`` and its exact remainder ``err`` (TwoSum). The rounding works on the bits of
``s``: with ``E`` its biased exponent, the format's quantum at ``s`` is ``2**k``,
``k = max(E - 1023, emin) - p + 1``, so the low ``d = k - (E - 1075)`` bits of the
53-bit significand ``m`` are the discarded ones (``d >= 53``: all of them). When
``s`` lies on the format's grid and ``err`` is nonzero, ``s`` is first moved one
float64 ulp toward the exact sum (``m`` +- 1 on the magnitude: no grid point lies
between, as the grid is at least two float64 ulps apart), so the discarded bits are
nonzero exactly when the exact sum is inexact: directed modes need only them and the
sign, nearest even the usual half-and-even test (the float64 sum double-rounds
innocuously for p <= 25), and stochastic rounding the documented law of
:mod:`fpreduce.core._tall` (round up, signed, iff ``u < ((s - lo) + err) / 2**k``,
``lo`` the exact sum rounded down, ``s`` the unmoved float64 sum). The result is
``q * 2**k`` with ``q`` the kept significand, +1 when rounded away from zero: exact
in float64. Overflow follows :func:`fpreduce.core.rounding.overflow_value`, signed
zeros IEEE 754 6.3, NaN propagates, Inf stays (NaN for a format without Inf).

:func:`add_round32` does the same in float32 for formats of p <= 11 bits and emin >=
-126 (bf16, tf32, fp16, fp8): the float32 sum and its float32 TwoSum remainder (exact
but for a float32 overflow, which then rounds by mode), float32's bits (twice the lanes
of float64 when vectorized), the same bits as :func:`add_round`. Both round by the one
:func:`round_bits`, written once for a binary word and typed by the sum's
(:func:`word`: fraction bits, bias, masks), so the two words cannot drift apart: the
subnormal-edge defect of session 9 had to be fixed in each of two copies.

:func:`add_fp64` is the fp64 accumulator's directed and stochastic addition: the
float64 sum, stepped one ulp (bit pattern +- 1) toward the remainder when the mode
says so. No branch in either but for the special values, so numba vectorizes a row
of them. ``u`` comes from :func:`uniform`, the counter-based generator (splitmix64 of
key, element, addition); :func:`element_seed` is its first half, the same for every
addition of an element, computed once per element by the folds.

:func:`fma` (``a * b + c`` rounded once: ``llvm.fma`` compiled, exact rationals in plain
Python) serves the chains' Veltkamp split (:mod:`fpreduce.core._chain`) and the quotients' remainders.

:func:`scale_value` is the averages' scaling by the worker count (``premultiply``,
``predivide``, ``after``, ``ddp``: :func:`fpreduce.core.arith._scale`'s law, bit for bit)
for the formats of p <= 24 bits, rounded by the same :func:`round_bits`;
:func:`scale_kernel` compiles its row loop per divide or multiply and mode.

The functions run as plain Python (the bit casts through ``struct``; :func:`plain` gives
them even after compiling: tests check them against the exact rounder one value at a
time) and are made numba functions by :func:`compile_all`, with LLVM bit casts, when
the folds compile.
"""

from __future__ import annotations

import math
import struct
import types
from fractions import Fraction
from typing import Any

import numpy as np

from fpreduce.base import counter, jit

_ABS = 0x7FFFFFFFFFFFFFFF
_FRAC = (1 << 52) - 1


def f32_bits(x):  # type: ignore[no-untyped-def]
    """The bit pattern of a float32 as an int64 (sign extended from int32)."""
    return struct.unpack("<i", struct.pack("<f", x))[0]


def bits_f32(b):  # type: ignore[no-untyped-def]
    """The float32 of an int32 bit pattern (given as an integer), as a float32."""
    return np.float32(struct.unpack("<f", struct.pack("<i", b))[0])


def f64_bits(x):  # type: ignore[no-untyped-def]
    """The bit pattern of a float64 as an int64 (plain Python: struct; compiled: an LLVM bitcast)."""
    return struct.unpack("<q", struct.pack("<d", x))[0]


def bits_f64(b):  # type: ignore[no-untyped-def]
    """The float64 of an int64 bit pattern."""
    return struct.unpack("<d", struct.pack("<q", b))[0]


def fma(a, b, c):  # type: ignore[no-untyped-def]
    """``a * b + c`` rounded once to nearest even (plain Python: exact rationals; compiled: ``llvm.fma``)."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c  # Inf and NaN as IEEE's: the product's own special value is already exact
    r = Fraction(a) * Fraction(b) + Fraction(c)
    if r == 0:
        return a * b + c  # an exact zero: either a * b and c are zeros (IEEE's sign of their sum) or a * b == -c, +0
    try:
        return float(r)  # correctly rounded, ties to even
    except OverflowError:
        return math.inf if r > 0 else -math.inf


# the generator (fpreduce.base.counter: plain Python, and inlined where a kernel calls it)
element_seed = counter.draw  # splitmix64(key + (e + 1) G): the first half of element ``e``'s draws
uniform = counter.uniform  # the uniform of addition ``t`` of the element of seed ``z1``: 53 bits over 2**53


def word(s):  # type: ignore[no-untyped-def]
    """The constants of the binary word ``s`` is (float32 or float64): (fraction bits, exponent bias, the
    magnitude mask, Inf's pattern, the fraction mask, the value just above the largest finite, 2**(bias + 1);
    float64's is beyond float64: Inf, never reached by a format of p <= 52). Compiled: chosen by ``s``'s type."""
    if isinstance(s, np.float32):
        return _WORD32
    return _WORD64


def as_value(x):  # type: ignore[no-untyped-def]
    """An input of the scaling as a float64: a float32 or float64 as it is, a bf16 word (uint16) widened, its
    NaN the quiet NaN (as the engine's loader makes a float32 copy's NaNs). Compiled: chosen by ``x``'s type."""
    if isinstance(x, np.uint16):
        v = float((np.uint32(x) << np.uint32(16)).view(np.float32))
        return np.nan if v != v else v
    return np.float64(x)


_WORD32 = (23, 127, 0x7FFFFFFF, 0x7F800000, 0x7FFFFF, 2.0**128)
_WORD64 = (52, 1023, _ABS, 0x7FF0000000000000, _FRAC, np.inf)


def word_bits(s):  # type: ignore[no-untyped-def]
    """The bit pattern of ``s`` (float32 or float64) as an int64 (float32's sign extended)."""
    return f32_bits(s) if isinstance(s, np.float32) else f64_bits(s)


def bits_word(b, s):  # type: ignore[no-untyped-def]
    """The value of bit pattern ``b`` in ``s``'s word, as a float64 (exact)."""
    return np.float64(bits_f32(b)) if isinstance(s, np.float32) else bits_f64(b)


def round_bits(s, err, sh, eminb, maxf, big, mode, u):  # type: ignore[no-untyped-def]
    """``s + err`` (s finite, nonzero: a float32 or float64 sum, err its exact remainder) rounded to the format.

    One rounder for both words, typed by ``s`` (:func:`word`: float32's bits give twice the
    lanes of float64 when vectorized, for p <= 23 and emin >= -126). ``sh`` = (the word's
    precision) - p, ``eminb`` = emin + the word's bias; ``maxf``, ``big`` (Inf, or NaN
    without Inf): the overflow values; ``mode`` 0..4 (:data:`fpreduce.core.grid.MODE_CODES`);
    ``u`` the stochastic draw. The neighbours ``lo <= |exact| <= hi`` on the grid come from
    the bits of ``s`` alone (when ``s`` is on the grid and the remainder points to zero,
    ``lo`` is the grid point below ``s``: half a quantum below at a normal binade's
    start), and ``err`` only picks among them, so the remainder's latency overlaps the bit
    work. Branch free (``&``, ``|``, selects), so a loop of it vectorizes. The word's own
    subnormals have the bit weight of its first binade (``E`` at least 1). The values of a
    format are multiples of its smallest subnormal ``smin``, so a nonzero ``s`` keeps at
    most all the fraction's bits discarded; all of them (``smin <= |s| < 2 smin``: a wide
    addend or a fused product, see :mod:`fpreduce.core._steps`) keeps one bit, the
    implicit one: the kept significand is odd, and the grid point below ``s = smin`` is 0
    (bit arithmetic would give ``smin / 4``). The stochastic fraction is computed in
    float64, ``((s - lo) + err)`` exact then one rounding, times ``2**-k``: the same float64
    value from either word.
    """
    frac, bias, absm, infb, fracm, above = word(s)
    b = word_bits(s)
    neg = b < 0
    mag = b & absm
    E = max(mag >> frac, 1)
    below = max(eminb - E, 0)
    d = min(sh + below, frac)  # the discarded bits
    low = mag & ((1 << d) - 1)
    trunc = mag - low
    step = 1 << d
    nz = err != 0
    inward = (low == 0) & nz & ((err > 0) == neg)  # on the grid, the exact sum just below |s|
    first = (mag & fracm) == 0  # a binade's first value: one bit below it is worth half a bit here
    half_step = first & (eminb < E)  # and the grid below is finer (normal), or the same (subnormal)
    top = d == frac  # smin <= |s| < 2 smin: the kept significand is s's implicit bit (1)
    lo = (mag - (step << 1 if (first & (eminb >= E) & (E >= 2)) else step)) if inward else trunc
    lo = 0 if (inward & top) else lo  # s = smin, the exact sum below it: 0 lies below
    hi = mag if inward else trunc + step
    inexact = (low != 0) | nz
    k = E - (bias + frac) + d - (1 if (inward & half_step) else 0)  # the quantum 2**k between lo and hi
    if mode == 0:  # the word's sum double-rounds innocuously (p <= 25 in float64, p <= 11 in float32)
        lo, hi = trunc, trunc + step
        away = (low > (step >> 1)) | ((low == (step >> 1)) & (((trunc & step) != 0) | top))
    elif mode == 4:
        hv = bits_word(hi, s) if hi < infb else above  # above the top: 2**(bias + 1), not Inf
        sl = -hv if neg else bits_word(lo, s)  # the exact sum rounded down (signed)
        fr = ((np.float64(s) - sl) + np.float64(err)) * bits_f64((1023 - k) << 52)  # frac of the gap: no division
        away = inexact & ((u < fr) != neg)
    else:
        away = inexact & (((mode == 2) & (not neg)) | ((mode == 3) & neg))
    r = bits_word(hi if away else lo, s)
    outward = (mode == 0) | (mode == 4) | ((mode == 2) & (not neg)) | ((mode == 3) & neg)
    r = (big if outward else maxf) if r > maxf else r
    return -r if neg else r


def add_round32(x, y, sh, eminb, maxf, big, has_inf, mode, u):  # type: ignore[no-untyped-def]
    """:func:`add_round` of two float32 values of a format of p <= 23 bits (``sh``, ``eminb``: float32's)."""
    s = x + y
    bb = s - x
    err = (x - (s - bb)) + (y - bb)
    r = round_bits(s, err, sh, eminb, maxf, big, mode, u)
    r = signed_zero(np.float64(x), np.float64(y), mode) if s == 0 else r
    fin = (x - x == 0) & (y - y == 0)
    outward = (mode == 0) | (mode == 4) | ((mode == 2) & (s > 0)) | ((mode == 3) & (s < 0))
    over = np.float64(-1.0 if s < 0 else 1.0) * (big if outward else maxf)  # a float32 overflow of finite operands
    special = (s if (has_inf | (s != s)) else np.nan) if not fin else over
    return np.float64(special) if s - s != 0 else r


def signed_zero(x, y, mode):  # type: ignore[no-untyped-def]
    """The exact zero sum of x and y: -0 when both are negative (or either in mode down), else +0."""
    bx, by = f64_bits(x), f64_bits(y)
    return -0.0 if (((bx & by) < 0) | ((mode == 3) & ((bx | by) < 0))) else 0.0


def add_round(x, y, sh, eminb, maxf, big, has_inf, mode, u):  # type: ignore[no-untyped-def]
    """x + y (float64 values of the format) rounded to it in ``mode``: IEEE signed zeros, NaN and Inf."""
    s = x + y
    bb = s - x
    err = (x - (s - bb)) + (y - bb)
    r = round_bits(s, err, sh, eminb, maxf, big, mode, u)
    r = signed_zero(x, y, mode) if s == 0.0 else r
    # NaN or Inf (a float64 sum of values of p <= 52 bits cannot overflow): Inf stays, or NaN without Inf
    return (s if (has_inf | (s != s)) else np.nan) if s - s != 0.0 else r


def add_fp64(x, y, maxf, mode, u):  # type: ignore[no-untyped-def]
    """fp64 addition in a directed or stochastic mode: the float64 sum, stepped one ulp toward its remainder.

    Stochastic: toward the remainder with probability |err| / (the gap to that neighbour), if ``u`` is below.
    A float64 overflow of finite operands follows IEEE 754 7.4 per mode. Branch free as ``round_bits``.
    """
    s = x + y
    bb = s - x
    err = (x - (s - bb)) + (y - bb)
    b = f64_bits(s)
    neg = b < 0
    outward = (err > 0.0) != neg  # the remainder points away from zero
    other = bits_f64(b + 1 if outward else b - 1)  # the neighbour on the remainder's side
    nz = err != 0.0
    # |err| over the gap to that neighbour (a power of two, Inf beyond the top): one IEEE division, as the numpy
    # twin's (a reciprocal from the exponent bits was wrong for a subnormal gap, sums below 2**-1020)
    step_sr = nz & (u < abs(err) / abs(other - s))
    step = step_sr if mode == 4 else (err > 0.0 if mode == 2 else (err < 0.0 if mode == 3 else nz & (not outward)))
    r = other if step else s
    r = signed_zero(x, y, mode) if s == 0.0 else r
    toward = (mode == 1) | ((mode == 2) & neg) | ((mode == 3) & (not neg))
    over = (x - x == 0.0) & (y - y == 0.0) & toward  # finite operands, rounded toward zero: max_finite
    return ((-maxf if neg else maxf) if over else s) if s - s != 0.0 else r


def add_any(x, y, how, c, mode, u):  # type: ignore[no-untyped-def]
    """One addition by ``how`` (:func:`_consts`): 0 :func:`add_round32`, 1 :func:`add_round`, 2 :func:`add_fp64`."""
    sh, eminb, maxf, big, has_inf = c
    if how == 2:
        return add_fp64(np.float64(x), np.float64(y), maxf, mode, u)
    if how == 1:
        return add_round(np.float64(x), np.float64(y), sh, eminb, maxf, big, has_inf, mode, u)
    return add_round32(np.float32(x), np.float32(y), sh - 29, eminb - 896, maxf, big, has_inf, mode, u)


def _consts(grid):  # type: ignore[no-untyped-def]
    """(how, (53 - p, emin + 1023, max_finite, the overflow value, has Inf), mode) of a :class:`Grid`.

    ``how``: 2 for fp64; 0 (float32 words) for the formats of p <= 11 bits and emin >= -126
    (bf16, tf32, fp16, fp8: a float32 sum's double rounding to nearest is innocuous, 24 >= 2p + 2,
    and their range is float32's); 1 (float64 words) for the others (fp32: 53 >= 2p + 2).
    """
    has_inf = grid.has_inf
    c = (53 - grid.p, grid.emin + 1023, grid.maxf, np.inf if has_inf else np.nan, has_inf)
    return (2 if grid.p == 53 else 0 if grid.p <= 11 and grid.emin >= -126 else 1), c, grid.mode


def _rows_m(D, A, B, how, c, mode, z, t):  # type: ignore[no-untyped-def]
    for j in range(D.size):
        u = uniform(z[j], t) if mode == 4 else 0.0
        D[j] = add_any(A[j], B[j], how, c, mode, u)


def rows_round(D, A, B, grid, z, t):  # type: ignore[no-untyped-def]
    """D[j] <- A[j] + B[j] (rows) by :func:`add_any`; ``grid`` as ``_tall._kind``'s.

    Stochastic: addition ``t``, element seeds ``z[j]``. Two loops, the mode a variable in both:
    one in float32 words (the formats of p <= 11 bits and emin >= -126), one for fp32 and fp64.
    The rows of bf16 and tf32, and of fp16 and fp8 inputs checked as read, go to ``_narrow``;
    those that come here (fp32 inputs into fp16 or fp8 in a directed mode, NaN reruns) ran
    as fast with one loop per mode constant (64 x 2**16 fp32 into fp16 up, pairwise:
    6.1-6.3 ns per addition before, 6.1-6.8 after), whose compilation cost ~19 s of CPU more
    on the row-block fold's first use.
    """
    how, c, mode = _consts(grid)
    if how > 0:  # fp32, fp64
        _rows_m(D, A, B, how, c, mode, z, t)
    else:
        _rows_m(D, A, B, 0, c, mode, z, t)


def _left_m(X, perm, j, how, c, mode, z1):  # type: ignore[no-untyped-def]
    ident = perm.size == 0  # rows in order
    s = np.float64(X[0 if ident else perm[0], j])
    for k in range(1, X.shape[0]):
        u = uniform(z1, k - 1) if mode == 4 else 0.0
        s = np.float64(add_any(s, X[k if ident else perm[k], j], how, c, mode, u))
    return s


def left_round(X, perm, j, grid, z1):  # type: ignore[no-untyped-def]
    """The left fold of column j of X, rows in the order ``perm`` (empty: in order), element seed ``z1``.

    In float64 words (:func:`add_round`: a shorter chain than float32's, whose lanes a single column does
    not use), the mode a variable. The route table sends the left folds of a few columns of the formats of
    p <= 23 bits to :mod:`._chain`; only fp32's and fp64's come here (``_tall``'s ``COLUMNS``), so one loop
    is compiled, not one per mode (~25 s of CPU on a first use, for loops no route ran).
    """
    how, c, mode = _consts(grid)
    return _left_m(X, perm, j, max(how, 1), c, mode, z1)


def rows_wide(D, A, B, grid, z, t):  # type: ignore[no-untyped-def]
    """:func:`rows_round` for the fp64 accumulator alone (float64 rows)."""
    how, c, mode = _consts(grid)
    _rows_m(D, A, B, 2, c, mode, z, t)


def left_wide(X, perm, j, grid, z1):  # type: ignore[no-untyped-def]
    """:func:`left_round` for the fp64 accumulator alone (float64 rows)."""
    how, c, mode = _consts(grid)
    return _left_m(X, perm, j, 2, c, mode, z1)


def scale_value(x, how, d, c, mode, u):  # type: ignore[no-untyped-def]
    """One value ``x`` of a format of p <= 24 bits (``c``: :func:`_consts`' constants of float64 words) scaled as
    :func:`fpreduce.core.arith._scale` does, bit for bit: ``how`` 0 ``x / d``, 1 ``x * d``, rounded once in ``mode``
    (``u``: the stochastic draw) by :func:`round_bits` from the float64 result ``s`` and its exact remainder (the
    product has none; the quotient's is ``x - s d``, exact by ``fma``, over ``d``: numpy's TwoProduct gives the
    same value); 2 torch's ``x * d`` (``d`` float32's 1/n, the product exact) rounded to float32, then to
    nearest even; 3 ``x`` itself (any float64: rounding alone, the stochastic conversion of inputs and outputs
    of ``fpreduce.core.primitives._sr_inputs``). Zeros keep their sign, NaN stays, Inf stays (NaN for a format
    without Inf). A result below the format's least subnormal ``smin`` (a product, quotient or float64 value may
    be one; a sum of the format's values never is, which :func:`round_bits` assumes) rounds to 0 or ``smin`` by
    the same laws: nearest even (``smin / 2`` to 0), the directed modes, and the stochastic fraction
    ``((s - lo) + err) / smin``."""
    sh, eminb, maxf, big, has_inf = c
    if how == 3:
        s = x
        err = 0.0
    elif how == 2:
        s = np.float64(np.float32(x * d))
        err = 0.0
    elif how == 1:
        s = x * d  # exact: two values of <= 24 bits (numpy's TwoProduct error is 0)
        err = 0.0
    else:
        s = x / d
        err = fma(-s, d, x) / d
    fin = s - s == 0.0
    err = err if (fin & (err - err == 0.0)) else 0.0
    m = 0 if how == 2 else mode
    smin = bits_f64((eminb + sh - 52) << 52)  # the format's least subnormal, 2**(emin - p + 1)
    inv = bits_f64((2046 - (eminb + sh - 52)) << 52)  # 1 / smin: dividing by it is multiplying by this, exactly
    r = round_bits(s, err, sh, eminb, maxf, big, m, u) if (fin & (abs(s) >= smin)) else s
    # below smin (round_bits wants |s| >= smin, as every nonzero sum of the format's values is): 0 or smin, signed
    neg = s < 0.0
    fr = ((s + (smin if neg else 0.0)) + err) * inv  # the stochastic law's fraction above the value below
    away = (abs(s) > 0.5 * smin) if m == 0 else ((u < fr) != neg) if m == 4 else (m == 2) != neg if m > 1 else False
    r = math.copysign(smin if away else 0.0, s) if ((s != 0.0) & (abs(s) < smin)) else r
    # torch's float32 NaN rounded to bf16 or tf32 (float32's range) is the quiet NaN 0x7FC00000, as round_to's
    canonical = (how == 2) & (eminb == 897) & (sh > 29)
    return r if fin else (np.nan if (((s != s) & canonical) | ((s == s) & (not has_inf))) else s)


def nearest_value(s, sh, eminb, maxf):  # type: ignore[no-untyped-def]
    """``s`` (float64) rounded to nearest even onto a format of p <= 24 bits (``sh`` = 53 - p, ``eminb`` =
    emin + 1023: :func:`format_consts`) from its bits alone, and whether that is :func:`scale_value`'s answer:
    ``(value, ok)``, not ok for NaN, Inf and a result above ``maxf`` (the overflow rules stay
    :func:`scale_value`'s). From 2**emin up the bits of ``|s|`` are rounded at bit ``sh`` (a carry moves into
    the exponent: the next binade); below, ``|s| / smin`` (exact: a power of two) is rounded to an integer by
    adding and taking off 2**52. The sign is ``s``'s: zeros keep theirs, a tiny value rounds to a signed zero."""
    a = abs(s)
    b = f64_bits(a)
    r = bits_f64((b + ((1 << (sh - 1)) - 1) + ((b >> sh) & 1)) & ~((1 << sh) - 1))
    low = eminb + sh - 52  # smin's exponent field
    q = (a * bits_f64((2046 - low) << 52) + 4503599627370496.0) - 4503599627370496.0
    r = q * bits_f64(low << 52) if a < bits_f64(eminb << 52) else r
    return math.copysign(r, s), (s - s == 0.0) & (r <= maxf)


_SCALE: dict[tuple[int, int], Any] = {}
_HOW = ("predivide or after", "premultiply", "ddp", "rounding alone")
_MODE_NAMES = ("nearest even", "toward zero", "up", "down", "stochastic")


def format_consts(f: Any) -> tuple[int, int, float, float, bool]:
    """:func:`_consts`' constants (float64 words) of a :class:`~fpreduce.core.formats.Format` of p <= 52 bits."""
    return 53 - f.precision, f.emin + 1023, float(f.max_finite), np.inf if f.has_inf else np.nan, bool(f.has_inf)


def scale_kernel(how: int, mode: int) -> Any:
    """The scaling loop compiled for one ``how`` (0 divide, 1 multiply, 2 torch's float32 multiply, 3 none) and
    ``mode``: ``kernel(A, out, d, c, key, offset, base, c0, c1)`` sets out[i, j] <- :func:`scale_value` of A[i, j]
    (float32 values, or bf16 words: :func:`as_value`; columns ``c0 <= j < c1``, element ``offset + j``; stochastic:
    row i draws counter ``base + i`` of the element's stream, as ``fpreduce.core._srload``'s draws).

    ``how`` and ``mode`` are closure constants: the loop has no branch left and vectorizes (on 64 x 2**18 bf16
    values, one thread: one loop with both as variables ran 11-14 ns per value, scalar and branching). A first use
    compiles its own, 1.4-2 s of CPU. The loop is the kernel's own body, not a function inlined into it: numba
    copies an inlined function's whole tree of inlined callees (:func:`scale_value`'s) block by block: without
    that copy, compiling the 13 scaling loops takes 38% fewer Python calls (102.7M -> 63.2M).

    To nearest, a product (premultiply, ddp) or a value rounded alone is rounded from its bits
    (:func:`nearest_value`), and a row falls back to :func:`scale_value`'s loop only when it holds a NaN, an Inf
    or an overflow: on 64 x 8192 bf16 values, one thread, 0.54 -> 0.30 ms.
    """
    if (how, mode) not in _SCALE:
        compile_all()

        def scale_rows(A, out, d, c, key, offset, base, c0, c1):  # type: ignore[no-untyped-def]
            z = np.zeros(c1 - c0, dtype=np.uint64)
            if mode == 4:
                for j in range(c1 - c0):
                    z[j] = element_seed(key, np.uint64(offset + c0 + j))
            for i in range(A.shape[0]):
                row, res = A[i, c0:c1], out[i, c0:c1]
                if mode == 0 and how != 0:  # a product (exact) or a value to nearest: its bits alone, and for a row
                    missed = 0  # with a NaN, an Inf or an overflow, scale_value's loop below
                    for j in range(row.size):
                        x = as_value(row[j])
                        s = x * d if how == 1 else np.float64(np.float32(x * d)) if how == 2 else x
                        r, ok = nearest_value(s, c[0], c[1], c[2])
                        res[j] = r
                        missed += not ok
                    if missed == 0:
                        continue
                t = np.uint64(base + i)
                for j in range(row.size):
                    u = uniform(z[j], t) if mode == 4 else 0.0
                    res[j] = scale_value(as_value(row[j]), how, d, c, mode, u)

        what = f"scaling by the worker count ({_HOW[how]}, {_MODE_NAMES[0 if how == 2 else mode]})"
        _SCALE[how, mode] = jit.kernel(scale_rows, what, 2.0)
    return _SCALE[how, mode]


def rows_any(D, A, B, grid, z, t):  # type: ignore[no-untyped-def]
    """:func:`rows_round` for float32 rows, :func:`rows_wide` for float64 ones: chosen by the compiler from
    the dtype (:func:`compile_all`), so a kernel compiles the loops of its own dtype only."""
    (rows_wide if D.dtype == np.float64 else rows_round)(D, A, B, grid, z, t)


def left_any(X, perm, j, grid, z1):  # type: ignore[no-untyped-def]
    """:func:`left_round` or :func:`left_wide` by X's dtype, as :func:`rows_any`."""
    return (left_wide if X.dtype == np.float64 else left_round)(X, perm, j, grid, z1)


_WORDS = ("word", "word_bits", "bits_word", "as_value")  # typed by their argument when compiled (overloads)
_NAMES = (
    "round_bits",
    "add_round32",
    "signed_zero",
    "add_round",
    "add_fp64",
    "add_any",
    "_consts",
    "_rows_m",
    "rows_round",
    "_left_m",
    "left_round",
    "rows_wide",
    "left_wide",
    "scale_value",
    "nearest_value",
)


_PLAIN = {name: globals()[name] for name in (*_NAMES, *_WORDS, "f64_bits", "bits_f64", "f32_bits", "bits_f32", "fma")}


def plain() -> dict[str, Any]:
    """This module's functions as plain Python (struct bit casts), whether or not :func:`compile_all` ran (tests)."""
    ns = dict(globals())
    for name, fn in _PLAIN.items():
        ns[name] = types.FunctionType(fn.__code__, ns, name)
    ns["element_seed"], ns["uniform"] = counter.draw, counter.uniform  # (plain Python already)
    return ns


def cast(src: Any, dst: Any, llvm: Any) -> Any:
    """A numba intrinsic reinterpreting a value of numba type ``src`` as ``dst`` (LLVM type ``llvm``): a bitcast."""
    from numba.extending import intrinsic

    def typer(typingctx, x):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.bitcast(args[0], llvm)

        return dst(src), codegen

    return intrinsic(typer)


def _fma(intrinsic: Any, types: Any, ir: Any) -> Any:
    """:func:`fma` as a numba intrinsic: ``llvm.fma.f64``, one fused instruction where the processor has FMA."""
    d = ir.DoubleType()

    def typer(typingctx, a, b, c):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.call(builder.module.declare_intrinsic("llvm.fma", [d], ir.FunctionType(d, [d, d, d])), args)

        return types.float64(types.float64, types.float64, types.float64), codegen

    return intrinsic(typer)


@jit.serialized
def compile_all() -> None:
    """Make this module's functions numba functions (the bit casts LLVM bitcasts), once."""
    g = globals()
    if not isinstance(g["add_round"], type(compile_all)):
        return
    jit.numba()
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic, overload

    def cast32(src, dst, to_int):  # type: ignore[no-untyped-def]
        def typer(typingctx, x):  # type: ignore[no-untyped-def]
            def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
                if to_int:  # float32 -> int32 bits -> int64 (sign extended)
                    return builder.sext(builder.bitcast(args[0], ir.IntType(32)), ir.IntType(64))
                return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())

            return dst(src), codegen

        return intrinsic(typer)

    def rows_by_dtype(D, A, B, grid, z, t):  # type: ignore[no-untyped-def]
        fn = g["rows_wide"] if D.dtype == types.float64 else g["rows_round"]
        return lambda D, A, B, grid, z, t: fn(D, A, B, grid, z, t)

    def left_by_dtype(X, perm, j, grid, z1):  # type: ignore[no-untyped-def]
        fn = g["left_wide"] if X.dtype == types.float64 else g["left_round"]
        return lambda X, perm, j, grid, z1: fn(X, perm, j, grid, z1)

    g["fma"] = _fma(intrinsic, types, ir)
    g["f64_bits"] = cast(types.float64, types.int64, ir.IntType(64))
    g["bits_f64"] = cast(types.int64, types.float64, ir.DoubleType())
    g["f32_bits"] = cast32(types.float32, types.int64, True)
    g["bits_f32"] = cast32(types.int64, types.float32, False)

    def word_of(s):  # type: ignore[no-untyped-def]
        w = _WORD32 if s == types.float32 else _WORD64
        return lambda s: w

    def word_bits_of(s):  # type: ignore[no-untyped-def]
        fn = g["f32_bits"] if s == types.float32 else g["f64_bits"]
        return lambda s: fn(s)

    def bits_word_of(b, s):  # type: ignore[no-untyped-def]
        if s == types.float32:
            fn = g["bits_f32"]
            return lambda b, s: np.float64(fn(b))
        fn = g["bits_f64"]
        return lambda b, s: fn(b)

    def as_value_of(x):  # type: ignore[no-untyped-def]
        if x != types.uint16:
            return lambda x: np.float64(x)
        widen = g["bits_f32"]

        def bf16_value(x):  # type: ignore[no-untyped-def]
            w = np.int64(x)
            nan = np.int64((w & 0x7FFF) > 0x7F80)  # a NaN word: its bits the quiet NaN's, by masks (a select here
            return np.float64(widen(((w << 16) & (nan - 1)) | (0x7FC00000 & -nan)))  # failed numba's IR check)

        return bf16_value

    overload(word, inline="always")(word_of)  # the rounder's word, by the sum's type: one source, two words
    overload(as_value, inline="always")(as_value_of)
    overload(word_bits, inline="always")(word_bits_of)
    overload(bits_word, inline="always")(bits_word_of)
    overload(rows_any)(rows_by_dtype)  # the compiler picks by dtype: each kernel compiles its own loops only
    overload(left_any)(left_by_dtype)
    # the loops are calls, the scalar functions inlined: a loop inlined was copied with all three adders' trees
    # (``how`` is pruned only after), 3-4.5 s of CPU per copy; as calls, compiled once per signature
    entries = [n for n in _NAMES if n.startswith(("rows", "left", "_rows", "_left"))]
    jit.compile_names(g, _NAMES, "the bit rounder's row loops", calls=entries)
    g["element_seed"] = jit.kernel(counter.draw, inline="always")  # (numba functions, as the rest of the module)
    g["uniform"] = jit.kernel(counter.uniform, inline="always")
