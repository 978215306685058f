"""Directed and stochastic additions of narrow formats on float32's bits, and the wide left fold.

A format of p <= 24 bits with emin >= -126 (fp32, bf16, tf32, fp16, fp8) is, scaled by
``2**(-126 - emin)``, exactly the float32 values whose bit patterns have their low
``d = 24 - p`` bits zero: the format's subnormal quantum ``2**(emin - p + 1)`` lands on
``2**(d - 149)``, float32's subnormals carry on its grid, and every binade above keeps
``p`` bits (bf16 and tf32 need no scaling: they have float32's exponent range). The
grid's neighbours of a float32 value are then its pattern with the low ``d`` bits
cleared, and that pattern plus or minus ``2**d``, across binades and into the
subnormals alike. :func:`add_narrow` rounds the exact sum ``s + err`` of two such
values (``s`` the float32 sum, ``err`` its TwoSum remainder, exact, also among
subnormals) by those neighbours with 32-bit integer operations, so a row of them
vectorizes in float32 lanes (16 per AVX-512 register):

* ``lo``, the sum rounded toward zero, is ``s``'s pattern less one when ``err``
  points toward zero (the float32 value just inside ``s``), its low ``d`` bits cleared;
  ``hi = lo + 2**d`` (patterns count values: the sign stays, the step crosses binades).
* toward_zero gives ``lo``, up and down give ``hi`` when the sum is inexact and the
  direction is away from zero, stochastic rounding ``hi`` by the law of
  :mod:`fpreduce.core._tall` (the same float64 fraction ``((s - sl) + err) * 2**-k``, so
  the same bits as the float64 kernels of :mod:`fpreduce.core._kernels_round`); an
  exact zero sum is -0 in mode down unless both operands are +0 (IEEE 754 6.3), the
  native float32 zero otherwise.
* a float32 sum within one step of the largest finite value, or above it (the result
  may overflow), or Inf or NaN (an operand Inf or NaN, a float32 overflow of bf16 or
  tf32 operands) is not handled here: :func:`add_narrow` returns ``|s|``'s pattern,
  the fold keeps its maximum, and :func:`fold_left` says when the caller must fold
  again by the exact scalar path (``_tall``'s kind 3, the format's overflow rules).
  No select per addition for these rare cases: the sum's 16 lanes stay busy with the
  rounding.

:func:`left_rows` is the left fold of wide rows in place in the output, for the
nearest-even kinds 0, 1 and 2 of ``_tall`` and this module's kind 5, with the input
check of ``_tall`` (an OR of the rows' bits) done as each row is read. It goes by
blocks of 2**16 columns (their partial sums in L2) and adds four rows at a time
in one pass over a block (:func:`_row_kind`): each column's additions in order, the
partial sum in register between them, four rows streaming side by side. One core reads
memory faster from four streams than from one: on 64 x 2**20 bf16 words (Emerald Rapids),
a flat pass over all the words takes 0.86-1.08x ``torch.sum(T, 0)``, the fold a row at a
time 1.37x, four at a time in blocks 0.6x (numba loops alone). Stochastic folds go by
blocks of 2**14 columns (the element seeds of a block computed once), a row at a time.
Rows of bf16, fp16 and fp8 arrays are read as their 2- or 1-byte words (:data:`WORDS`;
:func:`widen` gives each word's float32 value exactly, in register): half the bytes of a
float32 copy, and no copy made. :func:`fold_left` splits
the columns over threads (:mod:`fpreduce.base.threads`): a column's fold is its own, and a
stochastic draw is keyed by element and addition, so any split gives the same bits.

With the processor's rounding mode set (:mod:`fpreduce.core._hwround`, ``grid.hw``), the
directed modes take :func:`add_hw` instead: the float32 sum is already rounded in the mode,
and one rounding of its pattern in the same direction gives the format's (modes 5..13 of
the row loops, :func:`row_mode`). Measured on 64 x 2^20 bf16 words, one core: nearest even
0.46x the in-place numpy adds of the float32 copy (0.88x torch's own sum of the bf16
tensor), toward_zero, up and down 0.9-1.0x nearest even. Stochastic rows round a sum whose
float32 value is exact on its pattern alone (:func:`sr_exact`, 32-bit lanes, no float64:
the usual case for bf16, fp16 and fp8 inputs) and the rest by :func:`add_narrow`: on
Emerald Rapids, 512-bit vectors, 0.79 ns per addition against 1.4 ns by
:func:`add_narrow` alone, of which the generator's two 64-bit products per draw are
about 0.3 ns. :func:`grid_flags` is the input check of any such format (fp16, fp8) in
one compiled pass.

The bit casts are LLVM bitcasts once :func:`compile_all` ran (plain Python before, struct
casts; :func:`plain_add` gives the plain :func:`add_narrow` at any time, for tests).
"""

from __future__ import annotations

import functools
import struct
import types
from typing import Any, NamedTuple

import numpy as np

from fpreduce.base import counter, jit
from fpreduce.base.threads import run as threads_run
from fpreduce.base.threads import split
from fpreduce.core import _hwround as hw
from fpreduce.core import _kernels_round as kr
from fpreduce.core.grid import Grid, Kind

_SIGN = 0x80000000
_ABS32 = 0x7FFFFFFF
_QNAN = 0x7FC00000
_INF = 0x7F800000
_BLOCK = 1 << 14  # columns per block of a stochastic fold: the block's element seeds stay in L1/L2
_COLS = 1 << 16  # columns per block of the other folds (their float32 partial sums: 256 KB, in L2)
_STRETCH = 512  # columns per stretch of a stochastic row (:func:`_row_sr`; a multiple of 8)


# ``_tall._load``'s ``low`` for fp16 inputs checked here: the bits of :func:`fp16_flags`, and the sign bit, which
# no mask of raw low bits has (tf32's is 0x1FFF too), so the fold knows which check to run
FP16_CHECK = 0x80001FFF


def grid_flags(v, scale, L, maxf):  # type: ignore[no-untyped-def]
    """Nonzero (within ``L | 1``) unless the float32 ``v`` is a finite value of the format scaled by ``scale``
    (module docstring: ``v * scale`` exact, its low bits ``L`` zero, ``|v| <= maxf``). Two products: the input
    check of fp8's wide rows and of the loops that scale fp16 inputs (:func:`fp16_scaled_flags`); on the format's
    subnormals, which scale to float32 subnormals, each product costs a microcode assist (:func:`grid_bits` and
    :func:`fp16_flags` have none)."""
    w = v * scale
    off = (w * (np.float32(1.0) / scale) != v) | (abs(v) > maxf)  # inexact (or NaN), or beyond the format
    return (f2u(w) & L) | (np.uint32(1) if off else np.uint32(0))


def grid_bits(v, scale, L, maxf):  # type: ignore[no-untyped-def]
    """:func:`grid_flags` on the bits alone (1 or 0; the same zeros: every float32 pattern checked for fp16 and both
    fp8 formats): the low ``log2(L + 1)`` bits of v's significand must be zero, and as many more as ``v * scale``
    would fall below float32's least normal exponent (the bits the scaling shifts out). No float arithmetic, so no
    microcode assist on the format's subnormals: the one-pass input check (``_tall._all_in``) of 2^22 fp16 values
    of about 1e-6 takes 0.45 ns per element, 10.5 by :func:`grid_flags`. On other values it takes about twice
    :func:`grid_flags`'s 0.25 ns (in the fold loops, 20-40% slower on 64 x 2^16 normal fp16 data), so the fold
    loops and the wide rows' check use :func:`fp16_flags` (fp16) and :func:`grid_flags` (fp8, scaled loops)."""
    es = np.int32(f2u(scale) >> np.uint32(23)) - np.int32(127)  # log2(scale) (loop invariants: hoisted)
    nl = np.int32(f2u(np.float32(L + np.uint32(1))) >> np.uint32(23)) - np.int32(127)  # log2(L + 1)
    b = f2u(v) & np.uint32(_ABS32)
    e = np.int32(b >> np.uint32(23))
    sig = (b & np.uint32(0x7FFFFF)) | (np.uint32(0x800000) if e > 0 else np.uint32(0))
    z = min(nl + max(np.int32(0), np.int32(1) - (e + es)), np.int32(31))  # the low bits that must be zero
    low = sig & ((np.uint32(1) << np.uint32(z)) - np.uint32(1))
    return np.uint32(1) if (low != 0) | (b > f2u(maxf)) else np.uint32(0)  # (NaN and Inf: beyond maxf's bits)


def fp16_flags(v):  # type: ignore[no-untyped-def]
    """:func:`grid_flags` of fp16 on float32 normals only (1 or 0; the same zeros on every float32 pattern): nonzero
    unless ``v`` is a finite fp16 value. From 2**-14 up its low 13 bits must be zero; below, ``|v| * 2**24`` must be
    an integer (fp16's subnormals are the multiples of 2**-24), which adding and subtracting 1.5 * 2**23 keeps.
    ``grid_flags``' products by 2**-112 made fp16's subnormals float32 subnormals, a microcode assist each: the
    fold loops that check fp16 rows as read took 11 ns per element on values of about 1e-6 (0.36 now), 0.29 on
    others (0.35 now), in a bare loop of one addition and the check per element."""
    b = f2u(v) & np.uint32(_ABS32)
    t = u2f(b) * np.float32(2.0**24)  # |v| in units of fp16's least subnormal
    m = np.float32(1.5 * 2.0**23)
    bad = ((b & np.uint32(0x1FFF)) != 0) if b >= np.uint32(0x38800000) else ((t + m) - m != t)  # 2**-14's bits
    return np.uint32(1) if bad | (b > np.uint32(0x477FE000)) else np.uint32(0)  # beyond 65504 (Inf, NaN)


def fp16_scaled_flags(v):  # type: ignore[no-untyped-def]
    """:func:`grid_flags` of fp16 (scaled by ``2**-112``, 13 low bits), by its two products: the check of the loops
    that scale each fp16 input onto float32's grid anyway (:func:`_row_hw_scaled`), where an fp16 subnormal costs
    an assist whatever the check, and two products cost less than :func:`fp16_flags` on other values (12-18% of
    the loop on 64 x 2^16 normal data, toward_zero and up)."""
    return grid_flags(v, np.float32(2.0**-112), np.uint32(0x1FFF), np.float32(65504.0))


def f2u(x):  # type: ignore[no-untyped-def]
    """The bit pattern of a float32 as a uint32."""
    return np.uint32(struct.unpack("<I", struct.pack("<f", x))[0])


def f2i(x):  # type: ignore[no-untyped-def]
    """The bit pattern of a float32 as an int32."""
    return np.int32(struct.unpack("<i", struct.pack("<f", x))[0])


def u2f(b):  # type: ignore[no-untyped-def]
    """The float32 of a uint32 bit pattern."""
    return np.float32(struct.unpack("<f", struct.pack("<I", int(b) & 0xFFFFFFFF))[0])


#: 2- and 1-byte formats whose rows the left folds read as their words (never widened to a float32 copy): the
#: integer view each travels as (its type picks the widening: :func:`widen`), and the magnitude word from which on
#: a word is Inf or NaN (the fold then refuses the rows: the caller loads them, NaNs made canonical, and folds again;
#: bf16's are found in the sums, :func:`mark`)
WORDS: dict[str, tuple[np.dtype[Any], int]] = {
    "bf16": (np.dtype(np.uint16), 0x7F80),
    "fp16": (np.dtype(np.int16), 0x7C00),
    "fp8_e5m2": (np.dtype(np.uint8), 0x7C),
    "fp8_e4m3": (np.dtype(np.int8), 0x7F),  # (float8_e4m3fn: no Inf, NaN the one magnitude 0x7F)
}
_WORD_TOPS = {dt: top for dt, top in WORDS.values()}


def widen(x):  # type: ignore[no-untyped-def]
    """A row element's value as a float32, exactly: ``x`` itself (float32), or a bf16 (uint16), fp16 (int16),
    fp8_e5m2 (uint8) or fp8_e4m3 (int8) word; compiled, the one chosen by ``x``'s type (an identity for float32:
    the float32 loops are unchanged).

    fp16: the word's magnitude moved into float32's fields (exponent field e, fraction f) is
    ``2**(e - 127) * 1.f`` (or ``f * 2**-136`` for e = 0), times ``2**112`` exactly the fp16 value
    ``2**(e - 15) * 1.f`` (``f * 2**-24``), subnormals included; fp8_e5m2 is the high byte of an fp16 word, and
    fp8_e4m3 the same move with bias 7 (3 fraction bits, times ``2**120``). Inf and NaN words are refused by
    :func:`mark`.
    """
    if isinstance(x, np.uint16):
        return bf16_value(x)
    if isinstance(x, np.int16):
        return fp16_value(x)
    if isinstance(x, np.uint8):
        return e5m2_value(x)
    if isinstance(x, np.int8):
        return e4m3_value(x)
    return x


def bf16_value(w):  # type: ignore[no-untyped-def]
    """The float32 value of a bf16 word (its high 16 bits)."""
    return u2f(np.uint32(w) << np.uint32(16))


def fp16_value(w):  # type: ignore[no-untyped-def]
    """The float32 value of a finite fp16 word (:func:`widen`; an Inf or NaN word's is never used: the rows'
    check finds it). The magnitude's bits move into float32's fields, rebiased; a subnormal's are read as the
    normal number 2**-14 + m 2**-24, less 2**-14 (exact), never as a float32 subnormal scaled up: the processor
    takes a slow assist for a subnormal operand, and rows of fp16 words near fp16's least normal summed to
    nearest ran ~8x slower (64 x 2**18 words of magnitude ~1e-5, one thread: 6.2 ns per addition). The two
    are picked by a mask (a conditional expression here left numba an IR variable out of scope: a warning)."""
    h = np.uint32(np.uint16(w))
    o = (h & np.uint32(0x7FFF)) << np.uint32(13)
    sub = f2u(u2f(o + np.uint32(113 << 23)) - np.float32(2.0**-14))
    m = np.uint32(0) - np.uint32((h & np.uint32(0x7C00)) == np.uint32(0))  # all ones for a subnormal word
    return u2f((sub & m) | ((o + np.uint32(112 << 23)) & ~m) | ((h & np.uint32(0x8000)) << np.uint32(16)))


def e5m2_value(w):  # type: ignore[no-untyped-def]
    """The float32 value of an fp8_e5m2 word: the high byte of an fp16 word (:func:`widen`)."""
    return fp16_value(np.int16(np.uint16(w) << np.uint16(8)))


def e4m3_value(w):  # type: ignore[no-untyped-def]
    """The float32 value of a finite fp8_e4m3 word (:func:`widen`), as :func:`fp16_value`: a subnormal's is
    2**-6 + m 2**-9, less 2**-6."""
    h = np.uint32(np.uint8(w))
    o = (h & np.uint32(0x7F)) << np.uint32(20)
    sub = f2u(u2f(o + np.uint32(121 << 23)) - np.float32(2.0**-6))
    m = np.uint32(0) - np.uint32((h & np.uint32(0x78)) == np.uint32(0))  # all ones for a subnormal word
    return u2f((sub & m) | ((o + np.uint32(120 << 23)) & ~m) | ((h & np.uint32(0x80)) << np.uint32(24)))


def mark(seen, b):  # type: ignore[no-untyped-def]
    """A row's input check, element ``b`` added to ``seen``: the OR of float32 patterns (uint32: ``_tall``'s check
    of the input format's low bits), or the largest magnitude of fp16 and fp8 words (:data:`WORDS`: Inf or NaN).

    bf16 words are not marked: a bf16 word widens to float32's own Inf or NaN (its high half), and no sum leaves
    Inf or NaN, so the folds look at the sums instead (:func:`mark_sums`), once per column, not once per word (on
    64 rows of 2**20 words, the mark cost 25-40% of the fold). An fp16 or fp8 word widens by moving its fields: an
    Inf or NaN word would be a finite float32, so it is marked. Checks are joined by :func:`join`."""
    if isinstance(b, np.uint32):
        return seen | b
    if isinstance(b, np.uint16):
        return seen
    if isinstance(b, np.uint8 | np.int8):
        return max(seen, np.uint32(np.uint8(b)) & np.uint32(0x7F))
    return max(seen, np.uint32(np.uint16(b)) & np.uint32(0x7FFF))


def check16(seen, x, b):  # type: ignore[no-untyped-def]
    """:func:`mark`, but a float32 ``x`` checked as an fp16 value (:func:`fp16_flags`); words are fp16 values."""
    if isinstance(x, np.float32):
        return seen | fp16_flags(x)
    return mark(seen, b)


def check16_scaled(seen, x, b):  # type: ignore[no-untyped-def]
    """:func:`check16` by :func:`fp16_scaled_flags` (the loops that scale their inputs)."""
    if isinstance(x, np.float32):
        return seen | fp16_scaled_flags(x)
    return mark(seen, b)


def join(seen, bits, w):  # type: ignore[no-untyped-def]
    """Two input checks of rows like ``w`` (a row of ``Xb``) joined: the OR of float32 patterns (uint32), the larger
    of words' magnitudes (:func:`mark`: an OR of two magnitudes may reach Inf's word where neither does)."""
    return seen | bits if w.dtype == np.uint32 else max(seen, bits)


def mark_sums(seen, o, w):  # type: ignore[no-untyped-def]
    """bf16 words (``w`` a uint16 row): ``seen`` joined with the largest magnitude among the sums ``o`` as a bf16
    word's (the high half of its pattern: Inf or NaN from 0x7F80 on, as :func:`mark` says of inputs); ``seen`` for
    other rows. A bf16 word widens to float32's own Inf or NaN, and no sum leaves them: the sums say it, once per
    column (a block's, in L1) rather than once per word."""
    if w.dtype != np.uint16:
        return seen
    top = np.uint32(0)
    for j in range(o.size):
        top = max(top, f2u(o[j]) & np.uint32(_ABS32))
    return max(seen, top >> np.uint32(16))


class Lanes(NamedTuple):
    """A format of p <= 24 bits and emin >= -126 scaled onto float32's grid (the module docstring): the numbers
    its 32-bit lanes read. Build it with :func:`lanes`."""

    scale: float  # 2**(-126 - emin): the format's values times it are float32 values, its subnormals float32's
    L: np.uint32  # 2**d - 1: the discarded low bits (d = 24 - p)
    step: np.uint32  # 2**d: one quantum in bit patterns
    d: int
    limit: np.uint32  # the scaled largest finite value's pattern minus ``step``: a larger sum may overflow
    fp16_check: bool  # the rows' inputs are fp16 values checked as read (:func:`fp16_flags`), not by raw bits


@functools.lru_cache(maxsize=64)
def lanes(p: int, emin: int, max_finite: float, fp16_check: bool = False) -> Lanes:
    """The :class:`Lanes` of a format of p <= 24 bits and emin >= -126 (cached: asked on every call of the folds).

    A float32 sum of a magnitude above ``limit`` may round beyond the largest finite value (or is Inf or NaN).
    """
    d = 24 - p
    scale = 2.0 ** (-126 - emin)
    top = int(np.float32(max_finite * scale).view(np.uint32))
    return Lanes(scale, np.uint32((1 << d) - 1), np.uint32(1 << d), d, np.uint32(top - (1 << d)), bool(fp16_check))


NO_LANES = Lanes(1.0, np.uint32(0), np.uint32(0), 0, np.uint32(0), False)  # the kinds that do not scale


def add_narrow(a, b, mode, L, step, d, u):  # type: ignore[no-untyped-def]
    """``a + b`` (float32 values of the scaled format) rounded in ``mode`` 1..4; (float32, |s|'s pattern).

    The caller checks the second value: above ``max pattern - step`` (a sum that may
    round beyond the largest finite value, or a non-finite float32 sum) the result is
    not this function's to give (the module docstring).
    """
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    sb = f2u(s)
    nz = err != np.float32(0.0)
    neg = f2i(s) < 0
    inward = nz & ((f2i(s) ^ f2i(err)) < 0)  # the exact sum lies between s and zero
    lo = (sb - (np.uint32(1) if inward else np.uint32(0))) & ~L  # rounded toward zero, signed: s - 0 ulp cleared
    if mode == 1:
        r = lo
    else:
        inexact = ((sb & L) != np.uint32(0)) | nz
        if mode == 4:  # u < ((s - sl) + err) / gap, the gap 2**k between the neighbours a power of two:
            mlo = lo & np.uint32(_ABS32)  # u * gap exact, so the same comparison as the law's u < frac * 2**-k
            lov, hiv = u2f(mlo), u2f(mlo + step)
            sl = -hiv if neg else lov  # the exact sum rounded down (signed)
            frac = np.float64(s - sl) + np.float64(err)
            away = inexact & ((u * np.float64(hiv - lov) < frac) != neg)
        else:
            away = inexact & (neg if mode == 3 else not neg)
        r = lo + step if away else lo
        if mode == 3:  # an exact zero sum: -0 unless both operands are +0
            r = ((f2u(a) | f2u(b)) & np.uint32(_SIGN)) if (sb << np.uint32(1)) == np.uint32(0) else r
    return u2f(r), sb & np.uint32(_ABS32)


def sr_exact(a, b, s, L, dsh, limit, top):  # type: ignore[no-untyped-def]
    """(``a + b`` rounded stochastically, True) when their float32 sum ``s`` is exact and at most ``limit``, else
    (anything, False): :func:`add_narrow`'s mode 4, bit for bit, with no float64 (16 lanes per AVX-512 register).

    ``top`` is the high 32 bits of the addition's draw, whose top 53 bits are the law's
    ``u`` times 2**53. An exact sum's discarded part ``(s - sl) / gap`` is the low ``d``
    bits of its pattern over 2**d, so the law ``u < (s - sl) / gap`` is ``U < low bits``
    for ``U`` the top ``d`` bits of ``u`` (``top >> 1 >> dsh``, ``dsh = 31 - d``: no
    shift by 32 when d = 0); below zero the fraction counts from the neighbour toward
    zero, and ``U ^ L`` (the top ``d`` bits of ``2**53 - 1 - u * 2**53``) takes its place. The
    step away from zero is then the carry of ``pattern + L - U`` out of the low bits
    (patterns count values across binades). An exact zero sum is float32's +0, as
    :func:`add_narrow` gives; an inexact sum, one beyond ``limit`` (it may round past
    the top), Inf and NaN are the caller's, by :func:`add_narrow`.
    """
    sb = f2u(s)
    neg = np.uint32(f2i(s) >> np.int32(31))  # all ones below zero
    U = (top >> np.uint32(1)) >> dsh
    r = (sb + (L - (U ^ (neg & L)))) & ~L
    good = (s - a == b) & (s - b == a) & ((sb & np.uint32(_ABS32)) <= limit)
    return u2f(r), good


def hw_top(grid, scale):  # type: ignore[no-untyped-def]
    """(the scaled largest finite value's pattern, the overflow pattern: Inf, or NaN without Inf) for :func:`add_hw`."""
    return f2u(np.float32(grid.maxf) * np.float32(scale)), np.uint32(_INF if grid.has_inf else _QNAN)


def add_hw(a, b, mode, L, top, big, clamp):  # type: ignore[no-untyped-def]
    """``a + b`` in ``mode`` 1..3 under the hardware's same mode (:mod:`._hwround`), every case answered.

    The float32 sum is already rounded in the mode; rounding its pattern to the format's
    grid in the same direction (toward zero: clear the low ``d`` bits; away from zero:
    add ``L`` first) gives the exact sum's rounding with an unbounded exponent (directed
    roundings compose on nested grids; the scaled formats' sums never overflow float32).
    With ``clamp`` (a scaled format: fp16, fp8), beyond the largest finite value ``top`` a
    finite result overflows by IEEE 754 7.4 (``overflow_value``): to ``big`` (Inf, or NaN)
    when the mode rounds away from zero, to the largest finite value otherwise. Without
    (bf16, tf32: float32's exponent range, float32's top on their grid) float32's own
    overflow is the format's: ``RU`` beyond the top reaches Inf, ``RZ`` stops at the top
    (5 fewer vector operations: on wide rows, 1.0x nearest even instead of 2x). Signed
    zeros, Inf and NaN are the hardware's (a NaN keeps its quiet bit, above the low bits).
    """
    s = a + b
    sb = f2u(s)
    away = (f2i(s) < 0) if mode == 3 else (f2i(s) >= 0) if mode == 2 else False
    r = (sb + (L if away else np.uint32(0))) & ~L
    if not clamp:
        return u2f(r)
    mag = r & np.uint32(_ABS32)
    over = (mag > top) & (mag < np.uint32(_INF))
    return u2f(((r & np.uint32(_SIGN)) | (big if away else top)) if over else r)


def _row_soft(o, xs, xbs, scale, mode, L, step, d):  # type: ignore[no-untyped-def]
    """Mode 1..3 (:func:`row_mode`): o[j] <- o[j] + x[j] * scale for each row x of ``xs`` in turn by
    :func:`add_narrow`; (the OR of the rows' bits, max |s|)."""
    seen = np.uint32(0)
    big = np.uint32(0)
    for j in range(o.size):
        a = o[j]
        for q in range(len(xs)):
            a, mag = add_narrow(a, widen(xs[q][j]) * scale, mode, L, step, d, 0.0)
            seen = mark(seen, xbs[q][j])
            big = max(big, mag)
        o[j] = a
    return seen, big


def _row_hw(o, xs, xbs, hm, L):  # type: ignore[no-untyped-def]
    """Modes 5..7 (bf16, tf32: float32's range): :func:`add_hw` in the hardware's mode ``hm``, every sum answered
    (no max); the OR of the rows' bits."""
    seen = np.uint32(0)
    for j in range(o.size):
        a = o[j]
        for q in range(len(xs)):
            a = add_hw(a, widen(xs[q][j]), hm, L, L, L, False)
            seen = mark(seen, xbs[q][j])
        o[j] = a
    return seen, np.uint32(0)


def _row_hw_scaled(o, xs, xbs, scale, hm, L, grid, c16):  # type: ignore[no-untyped-def]
    """Modes 8..13: :func:`_row_hw` for a scaled format (clamped at its top); with ``c16`` (modes 11..13, a
    constant where compiled: the other check folds away) fp16 inputs checked as read (the OR of
    :func:`fp16_scaled_flags`)."""
    top, over = hw_top(grid, scale)
    seen = np.uint32(0)
    for j in range(o.size):
        a = o[j]
        for q in range(len(xs)):
            x = xs[q][j]
            a = add_hw(a, widen(x) * scale, hm, L, top, over, True)
            seen = check16_scaled(seen, x, xbs[q][j]) if c16 else mark(seen, xbs[q][j])
        o[j] = a
    return seen, np.uint32(0)


def _row_sr_each(o, xs, xbs, scale, L, step, d, limit, z, t):  # type: ignore[no-untyped-def]
    """Mode 4: :func:`_row_sr` of each row of ``xs`` in turn, row ``xs[q]`` addition ``t + q``."""
    seen = np.uint32(0)
    big = np.uint32(0)
    for q in range(len(xs)):
        bits, mag = _row_sr(o, xs[q], xbs[q], scale, L, step, d, limit, z, t + q)
        seen, big = join(seen, bits, xbs[q]), max(big, mag)
    return seen, big


def _sr_lanes(o, x, xb, scale, L, dsh, limit, z, t, ok):  # type: ignore[no-untyped-def]
    """o[j] <- o[j] + x[j] * scale rounded stochastically (addition ``t``, seeds ``z``) where :func:`sr_exact`
    answers, ``ok[j]`` whether it did: (how many it did not, the OR of x's check). Branch free: it vectorizes."""
    miss = 0
    seen = np.uint32(0)
    for j in range(o.size):
        a = o[j]
        b = widen(x[j]) * scale
        r, good = sr_exact(a, b, a + b, L, dsh, limit, np.uint32(counter.draw(z[j], t) >> np.uint64(32)))
        o[j] = r if good else a
        ok[j] = np.uint8(good)
        miss += 0 if good else 1
        seen = mark(seen, xb[j])
    return miss, seen


def _sr_rest(o, x, scale, L, step, d, z, t, ok, miss):  # type: ignore[no-untyped-def]
    """The sums :func:`_sr_lanes` left (``ok[j]`` 0) by :func:`add_narrow`: max |s|'s pattern of those.

    A few are found by scanning ``ok`` eight at a time; many (inexact sums everywhere: float32
    inputs) take every lane's :func:`add_narrow`, kept where ``ok`` is 0 (a vector loop)."""
    big = np.uint32(0)
    if 8 * miss > o.size:
        for j in range(o.size):
            v, mag = add_narrow(o[j], widen(x[j]) * scale, 4, L, step, d, kr.uniform(z[j], t))
            keep = ok[j] != 0
            o[j] = o[j] if keep else v
            big = max(big, np.uint32(0) if keep else mag)
        return big
    words = ok.view(np.uint64)
    for w in range((o.size + 7) // 8):  # (a short stretch: the rest of ``ok`` is an earlier stretch's)
        if words[w] != np.uint64(0x0101010101010101):
            for j in range(8 * w, min(8 * w + 8, o.size)):
                if ok[j] == 0:
                    v, mag = add_narrow(o[j], widen(x[j]) * scale, 4, L, step, d, kr.uniform(z[j], t))
                    o[j] = v
                    big = max(big, mag)
    return big


def _row_sr(o, x, xb, scale, L, step, d, limit, z, t):  # type: ignore[no-untyped-def]
    """Mode 4 (:func:`_row_sr_each`): the row in stretches of :data:`_STRETCH` columns (the last one shorter), each by
    :func:`_sr_lanes` and the sums it leaves by :func:`_sr_rest`; after a stretch of mostly inexact sums (float32
    inputs), the rest of the row by :func:`add_narrow` alone. (The OR of x's check, max |s|'s pattern of the sums
    add_narrow gave.)"""
    seen = np.uint32(0)
    big = np.uint32(0)
    dsh = np.uint32(31 - d)
    ok = np.ones(_STRETCH, dtype=np.uint8)
    n = o.size
    lo = 0
    while lo < n:
        hi = min(lo + _STRETCH, n)
        miss, bits = _sr_lanes(o[lo:hi], x[lo:hi], xb[lo:hi], scale, L, dsh, limit, z[lo:hi], t, ok)
        seen |= bits
        if miss:
            big = max(big, _sr_rest(o[lo:hi], x[lo:hi], scale, L, step, d, z[lo:hi], t, ok, miss))
        many = 4 * miss > hi - lo
        lo = hi
        if many:
            break
    o, x, xb, z = o[lo:], x[lo:], xb[lo:], z[lo:]  # the rest of a row of inexact sums
    for j in range(o.size):
        v, mag = add_narrow(o[j], widen(x[j]) * scale, 4, L, step, d, kr.uniform(z[j], t))
        o[j] = v
        seen = mark(seen, xb[j])
        big = max(big, mag)
    return seen, big


def _row_kind(o, xs, xbs, kind, grid, lanes, mode, z, t):  # type: ignore[no-untyped-def]
    """o <- o + x for each row x of the tuple ``xs`` in turn, the left fold by kind (``_tall``'s 0, 1, 2; 5:
    :func:`add_narrow` in ``mode``); ``xbs`` the rows' bits.

    Rows are slices indexed from 0 (numba then proves the indices nonnegative: no
    wraparound select, the loop vectorizes). A tuple of rows is added in one pass over
    the columns, each column's additions in the tuple's order (the same bits as a row
    at a time), the partial sums in register: the rows stream side by side (on 64 x
    2**20 bf16 words, four rows at a time read 1.6x faster than one, one core). Returns
    (the OR of the rows' bits, max |s|'s pattern: kind 5). Kernels call :func:`_row_of`,
    which compiles the one loop of their constant kind and mode; this is its plain form,
    and its fallback for a kind or mode known only at run time (every kind's loop, the
    mode a variable).
    """
    if kind == 0:
        return _row_fp32(o, xs, xbs)
    if kind == 1:
        return _row_near(o, xs, xbs, grid)
    if kind == 2:
        return _row_fp16(o, xs, xbs, grid)
    return _row_k5(o, xs, xbs, grid, lanes, mode, z, t)


def _row_of(o, xs, xbs, kind, grid, lanes, mode, z, t):  # type: ignore[no-untyped-def]
    """:func:`_row_kind`; compiled (:func:`compile_all`), a constant ``kind`` and ``mode`` pick their one loop
    when the caller is typed, so a kernel compiles that loop alone (numba inlines a callee's every branch before it
    prunes them: every kind's and mode's loop inlined is ~90 s of compilation)."""
    return _row_kind(o, xs, xbs, kind, grid, lanes, mode, z, t)


def _row_fp32(o, xs, xbs):  # type: ignore[no-untyped-def]
    """Kind 0: o <- o + x for each row x of ``xs`` in turn, in float32 (or the hardware's mode: :mod:`._hwround`)."""
    seen = np.uint32(0)
    for j in range(o.size):
        a = o[j]
        for q in range(len(xs)):
            a = a + widen(xs[q][j])
            seen = mark(seen, xbs[q][j])
        o[j] = a
    return seen, np.uint32(0)


def _row_near(o, xs, xbs, grid):  # type: ignore[no-untyped-def]
    """Kind 1: o <- o + x for each row x of ``xs`` in turn, rounded to nearest even on the format's grid by
    Veltkamp's split (``grid.sigma``: sigma)."""
    seen = np.uint32(0)
    sigma = np.float32(grid.sigma)
    for j in range(o.size):
        a = o[j]
        for q in range(len(xs)):
            s = a + widen(xs[q][j])
            c = s * sigma
            a = c - (c - s)
            seen = mark(seen, xbs[q][j])
        o[j] = a
    return seen, np.uint32(0)


def _row_fp16(o, xs, xbs, grid):  # type: ignore[no-untyped-def]
    """Kind 2: :func:`_row_near` for fp16 and fp8 (their subnormals and overflow); inputs checked by
    :func:`fp16_flags` as read."""
    seen = np.uint32(0)
    sigma, tiny, maxf = np.float32(grid.sigma), np.float32(grid.tiny), np.float32(grid.maxf)
    ovf = np.float32(np.inf) if grid.has_inf else np.float32(np.nan)  # overflow: ±Inf, or ±NaN (fp8_e4m3)
    for j in range(o.size):
        a = o[j]
        for q in range(len(xs)):
            x = xs[q][j]
            s = a + widen(x)
            c = s * sigma
            v = c - (c - s)
            v = s if abs(s) < tiny else v
            a = v if abs(v) <= maxf else (s if s != s else (-ovf if s < 0 else ovf))
            seen = check16(seen, x, xbs[q][j])  # fp16 inputs are checked as read
        o[j] = a
    return seen, np.uint32(0)


def _row_k5(o, xs, xbs, grid, lanes, mode, z, t):  # type: ignore[no-untyped-def]
    """Kind 5 in the row loops' ``mode`` (:func:`row_mode`) with the :class:`Lanes` unpacked: the loop of the
    mode's own function (each a loop of its own: :func:`_pick_row` compiles one of them)."""
    sc, L = np.float32(lanes.scale), lanes.L
    if mode > 7:
        return _row_hw_scaled(o, xs, xbs, sc, (mode - 5) % 3 + 1, L, grid, mode > 10)
    if mode > 4:
        return _row_hw(o, xs, xbs, mode - 4, L)
    if mode == 4:
        return _row_sr_each(o, xs, xbs, sc, L, lanes.step, np.int64(lanes.d), lanes.limit, z, t)
    return _row_soft(o, xs, xbs, sc, mode, L, lanes.step, np.int64(lanes.d))


def left_rows(X, Xb, perm, out, kind, mode, grid, lanes, key, e0, c0):  # type: ignore[no-untyped-def]
    """out <- the left fold of X's columns ``c0 .. c0 + out.size - 1`` in the row order ``perm``.

    Float32 rows, in place in ``out`` (see the module); column ``c0 + j`` is element ``e0 + j``.

    ``Xb`` is X viewed as uint32: returns the OR of the bits of every row read
    (``_tall``'s input check, gathered as the rows are added; kind 2, fp16: the OR of
    :func:`fp16_flags`). Kind 5 works on the scaled format (inputs times ``scale``, the
    result divided back, exactly) in the row loops' ``mode`` (:func:`row_mode`).
    Stochastic folds go by blocks of ``_BLOCK`` columns (the block's element seeds,
    element ``e0 + j``, computed once), a row at a time; the others by blocks of
    ``_COLS`` columns, four rows at a time (:func:`_row_kind`). A block of 2**16 columns
    (partial sums in L2, each row read in runs of 128 KB of bf16 words) ran 64 x 2**20 bf16
    faster than one of 2**13 (partial sums in L1, runs of 16 KB): on one thread, bf16 -> fp32
    0.52-0.59 -> 0.47-0.52 and bf16 -> bf16 0.57-0.66 -> 0.47-0.56 times the in-place float32
    adds, float32 rows into bf16 1.02-1.09 -> 0.85-0.90; 2**17 ran as 2**16.
    """
    n, m = X.shape[0], out.size
    sc, c16 = row_input(kind, lanes)
    big = np.uint32(0)
    seen = np.uint32(0)
    width = _BLOCK if kind == 5 and mode == 4 else _COLS
    z = np.zeros(width if kind == 5 and mode == 4 else 0, dtype=np.uint64)
    for lo in range(0, m, width):
        hi = min(lo + width, m)
        a, b = c0 + lo, c0 + hi  # rows are sliced X[r][a:b] (contiguous: the loops vectorize), never X[:, a:b]
        o = out[lo:hi]
        w = Xb[perm[0]][a:b]
        seen = join(seen, first_row(o, X[perm[0]][a:b], w, sc, c16), w)
        g = 1  # the rows of perm[1:] added in groups of four, then one at a time
        if kind == 5 and mode == 4:  # (constants in a kernel of :func:`_segs_kernel`: one branch is compiled)
            for j in range(hi - lo):
                z[j] = kr.element_seed(key, e0 + lo + j)
        else:
            while g + 4 <= n:
                r0, r1, r2, r3 = perm[g], perm[g + 1], perm[g + 2], perm[g + 3]
                xs = (X[r0][a:b], X[r1][a:b], X[r2][a:b], X[r3][a:b])
                xbs = (Xb[r0][a:b], Xb[r1][a:b], Xb[r2][a:b], Xb[r3][a:b])
                bits, mag = _row_of(o, xs, xbs, kind, grid, lanes, mode, z, g - 1)
                seen, big = join(seen, bits, w), max(big, mag)
                g += 4
        for k in range(g, n):
            r = perm[k]
            bits, mag = _row_of(o, (X[r][a:b],), (Xb[r][a:b],), kind, grid, lanes, mode, z[: hi - lo], k - 1)
            seen, big = join(seen, bits, w), max(big, mag)
        seen = mark_sums(seen, o, w)
    scale_back(out, sc, lanes.scale)
    return seen, big


def row_mode(kind: int, grid: Grid, lanes: Lanes = NO_LANES) -> int:
    """The row loops' mode (plain Python: it picks a kernel, whose loops it names): 0 for the kinds whose rows have
    no mode; kind 5's ``grid.mode`` 1..4 by :func:`add_narrow`, or under the hardware's mode (:func:`add_hw`, the
    directed mode 1..3 plus) 4 for bf16 and tf32, 7 for a scaled format (fp16, fp8: clamped at its top), 10 for one
    whose fp16 inputs are checked as read (``lanes.fp16_check``)."""
    code = getattr(hw.code, "py_func", hw.code)  # (the plain function, compiled or not)
    if kind != Kind.LANES:
        return 0
    if code(int(kind), grid) == 0:
        return grid.mode
    return grid.mode + (4 if grid.emin <= -126 else 10 if lanes.fp16_check else 7)


def row_input(kind, lanes):  # type: ignore[no-untyped-def]
    """(the inputs' scale, float32; whether the inputs are checked by :func:`fp16_flags` rather than their raw bits)."""
    return np.float32(lanes.scale if kind == 5 else 1.0), kind == 2 or lanes.fp16_check


def first_row(o, x, xb, sc, c16):  # type: ignore[no-untyped-def]
    """o <- x * sc, a left fold's first row; the OR of its inputs' check (:func:`row_input`'s ``c16``)."""
    seen = np.uint32(0)
    for j in range(o.size):
        o[j] = widen(x[j]) * sc
        seen = check16(seen, x[j], xb[j]) if c16 else mark(seen, xb[j])
    return seen


def scale_back(o, sc, scale):  # type: ignore[no-untyped-def]
    """o <- o / ``scale`` (exactly: a power of two) when the fold ran on the scaled format (``sc`` != 1)."""
    if sc != np.float32(1.0):
        inv = np.float32(1.0 / scale)
        for j in range(o.size):
            o[j] = o[j] * inv


def _rows5_m(D, A, B, mode, L, step, d, limit, z, t, grid, sa, sb):  # type: ignore[no-untyped-def]
    top, over = hw_top(grid, 1.0)
    clamp = top != np.uint32(0x7F7FFFFF) & ~L  # a scaled format's own top (bf16, tf32: float32's)
    for j in range(D.size):
        if mode > 4:  # every sum answered
            D[j] = add_hw(A[j] * sa, B[j] * sb, mode - 4, L, top, over, clamp)
        else:
            v, mag = add_narrow(A[j] * sa, B[j] * sb, mode, L, step, d, kr.uniform(z[j], t) if mode == 4 else 0.0)
            D[j] = v if mag <= limit else np.float32(np.nan)


def rows5(D, A, B, grid, z, t, sa, sb):  # type: ignore[no-untyped-def]
    """D[j] <- A[j] * sa + B[j] * sb by :func:`add_narrow` (``grid`` as ``_tall``'s: fp32, bf16, tf32, or the scaled
    fp16 and fp8 of :func:`scaled`, whose X rows are read times their scale: ``sa``, ``sb`` exact powers of two).

    A sum the kernel does not answer (module docstring) gives NaN, which reaches the
    fold's result: ``_tall`` folds again by the exact scalar path. One loop per mode.
    Stochastic: addition ``t``, element seeds ``z[j]``. With the hardware's mode set by the
    caller (``grid.hw``, :mod:`._hwround`): :func:`add_hw`.
    """
    d = 24 - grid.p
    step = np.uint32(1) << np.uint32(d)
    L = step - np.uint32(1)
    mode = grid.mode + (4 if hw.code(5, grid) != 0 else 0)
    limit = f2u(np.float32(grid.maxf)) - step
    if mode == 5:
        _rows5_m(D, A, B, 5, L, step, d, limit, z, t, grid, sa, sb)
    elif mode == 6:
        _rows5_m(D, A, B, 6, L, step, d, limit, z, t, grid, sa, sb)
    elif mode == 7:
        _rows5_m(D, A, B, 7, L, step, d, limit, z, t, grid, sa, sb)
    elif mode == 1:
        _rows5_m(D, A, B, 1, L, step, d, limit, z, t, grid, sa, sb)
    elif mode == 2:
        _rows5_m(D, A, B, 2, L, step, d, limit, z, t, grid, sa, sb)
    elif mode == 3:
        _rows5_m(D, A, B, 3, L, step, d, limit, z, t, grid, sa, sb)
    else:
        _rows5_m(D, A, B, 4, L, step, d, limit, z, t, grid, sa, sb)


def rows_kind(grid: Grid) -> bool:
    """Whether :func:`rows5` folds rows of this format and mode (``_tall``'s kind 3 parameters)."""
    return grid.p <= 24 and grid.emin == -126 and grid.mode > 0


def scaled(grid: Grid) -> tuple[float, Grid] | None:
    """(scale, the parameters of the format scaled onto float32's grid) for a format of p <= 24 bits and
    -126 < emin (fp16, fp8) in a directed or stochastic mode, else None.

    The scaled format (the same p, emin -126, max_finite times the scale) rounds as the
    format does, scaled: its values, neighbours, overflow and stochastic fractions are the
    format's times ``2**(-126 - emin)`` (module docstring), so :func:`rows5` folds it.
    """
    p, emin = grid.p, grid.emin
    if p > 24 or emin <= -126 or grid.mode == 0:
        return None
    scale = 2.0 ** (-126 - emin)
    out = grid._replace(emin=-126, maxf=grid.maxf * scale, tiny=2.0**-126)
    return scale, out


_KINDS = {0: "fp32", 1: "bf16/tf32 to nearest", 2: "fp16/fp8 to nearest", 5: "narrow formats"}
_MODES = ("", "toward zero", "up", "down", "stochastic") + tuple(
    f"{m} (hardware{w})" for w in ("", ", clamped", ", clamped, fp16 inputs") for m in ("toward zero", "up", "down")
)
_SEGS: dict[tuple[int, int], Any] = {}


def _segs_kernel(kind: int, mode: int) -> Any:
    """The left folds of wide rows compiled for one ``kind`` and row ``mode``: ``kernel(X, Xb, perms, segs, los,
    his, out, grid, lanes, key, e0)`` runs :func:`left_rows` on each piece ``i``, columns ``los[i] .. his[i] - 1``
    in the row order ``perms[segs[i]]`` (a segment, or the part of one a thread folds), and returns (the OR of the
    rows' check, max |s|'s pattern).

    ``kind`` and ``mode`` are closure constants, by which numba prunes every other kind's and mode's loops before
    typing: a first use compiles its own loops, ~2 s, not all ~90 s. The loop over the pieces is the kernel's own
    body, not a function inlined into it: numba copies an inlined function with its whole tree of inlined callees
    block by block, each block with every variable of the function (a cost that grows as the square of its size).
    """
    if (kind, mode) not in _SEGS:

        def left_segs(X, Xb, perms, segs, los, his, out, grid, lanes, key, e0):  # type: ignore[no-untyped-def]
            seen = np.uint32(0)
            big = np.uint32(0)
            hwm = hw.code(kind, grid)
            hw.begin(hwm)  # kinds 0 and 5 in a directed mode: the hardware rounds (the additions, exact scalings)
            for i in range(los.size):
                a, b = los[i], his[i]
                bits, mag = left_rows(X, Xb, perms[segs[i]], out[a:b], kind, mode, grid, lanes, key, e0 + a, a)
                seen, big = join(seen, bits, Xb[0]), max(big, mag)
            hw.end(hwm)
            return seen, big

        _SEGS[kind, mode] = jit.kernel(left_segs, f"left folds of wide rows ({describe(kind, mode)})", 2.0)
    return _SEGS[kind, mode]


def describe(kind: int, mode: int) -> str:
    """A kind and row mode in words (the first-compile notice)."""
    return _KINDS[kind] + (f", {_MODES[mode]}" if mode else "")


_NAMES = (
    *("bf16_value", "fp16_value", "e5m2_value", "e4m3_value"),
    *(
        "fp16_flags",
        "fp16_scaled_flags",
        "grid_flags",
        "grid_bits",
        "add_narrow",
        "sr_exact",
        "hw_top",
        "add_hw",
        "_row_kind",
        "left_rows",
    ),
    *("_sr_lanes", "_sr_rest", "_row_sr"),
    *("_row_fp32", "_row_near", "_row_fp16", "_row_k5"),
    *("_row_soft", "_row_hw", "_row_hw_scaled", "_row_sr_each"),
    *("row_input", "first_row", "scale_back"),
    *("_rows5_m", "rows5"),
)
_COMPILED: list[Any] = []
_PLAIN = {name: globals()[name] for name in ("add_narrow", "f2u", "f2i", "u2f")}


def plain_add() -> Any:
    """:func:`add_narrow` as plain Python (struct casts, the plain ``_kernels_round``), compiled or not (tests)."""
    ns = dict(globals())
    ns["kr"] = types.SimpleNamespace(**kr.plain())
    for name, fn in _PLAIN.items():
        ns[name] = types.FunctionType(fn.__code__, ns, name)
    return ns["add_narrow"]


@jit.serialized
def compile_all() -> None:
    """Make this module's functions numba functions (compiled on first call), the bit casts LLVM bitcasts; once."""
    if _COMPILED:
        return
    jit.numba()
    from llvmlite import ir
    from numba import types as nt
    from numba.extending import overload

    kr.compile_all()
    hw.compile_all()
    cast = kr.cast
    g = globals()
    g["f2u"] = cast(nt.float32, nt.uint32, ir.IntType(32))
    g["f2i"] = cast(nt.float32, nt.int32, ir.IntType(32))
    g["u2f"] = cast(nt.uint32, nt.float32, ir.FloatType())
    if _hardware_half():
        g["fp16_value"] = _half_to_float(nt, ir)
    # _row_sr is a call of its own: it takes no constant its loops need, and inlined, numba copied its tree of
    # stretches and fallbacks into every stochastic kernel (a third of their compilation)
    jit.compile_names(g, _NAMES, "rows of narrow formats", calls=("rows5", "_row_sr"))  # (the folds: _segs_kernel)
    overload(_row_of, prefer_literal=True)(_pick_row)
    _words_typed(g, overload, nt)
    _COMPILED.append(g["left_rows"])


def _hardware_half() -> bool:
    """Whether the processor converts fp16 to float32 itself (x86's F16C; every aarch64): elsewhere LLVM would
    call a runtime function numba does not link, and :func:`fp16_value`'s integer steps stay."""
    import platform

    from llvmlite import binding

    return platform.machine().lower() in ("aarch64", "arm64") or bool(binding.get_host_cpu_features().get("f16c"))


def _half_to_float(nt: Any, ir: Any) -> Any:
    """:func:`fp16_value` as the processor's conversion (an LLVM ``fpext`` of the word as ``half``: x86's
    ``vcvtph2ps``, exact, subnormals included). 64 x 2**18 fp16 words into fp16 to nearest, one thread: 0.67
    ns per addition, 0.64 near fp16's least normal; the integer steps ran 0.87-0.88, and the magic multiply
    before them 0.80 on normal words and 6.2 near the least normal (its float32 subnormal operands took the
    processor's assists)."""
    from numba.extending import intrinsic

    def typer(typingctx, w):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

        return nt.float32(w), codegen

    return intrinsic(typer)


def _words_typed(g: dict[str, Any], overload: Any, nt: Any) -> None:
    """:func:`widen`, :func:`mark`, :func:`check16`, :func:`join` and :func:`mark_sums` compiled by their
    arguments' types (inlined: a float32 row's loop is the one it was before words existed)."""
    bf16, fp16, e5m2, e4m3 = g["bf16_value"], g["fp16_value"], g["e5m2_value"], g["e4m3_value"]
    flags, scaled_flags = g["fp16_flags"], g["fp16_scaled_flags"]

    def widen_of(x):  # type: ignore[no-untyped-def]
        if x == nt.uint16:
            return lambda x: bf16(x)
        if x == nt.int16:
            return lambda x: fp16(x)
        if x == nt.uint8:
            return lambda x: e5m2(x)
        if x == nt.int8:
            return lambda x: e4m3(x)
        return lambda x: x

    def mark_of(seen, b):  # type: ignore[no-untyped-def]
        if b == nt.uint32:
            return lambda seen, b: seen | b
        if b == nt.uint16:
            return lambda seen, b: seen
        if b in (nt.uint8, nt.int8):
            return lambda seen, b: max(seen, np.uint32(np.uint8(b)) & np.uint32(0x7F))
        return lambda seen, b: max(seen, np.uint32(np.uint16(b)) & np.uint32(0x7FFF))

    def check16_of(seen, x, b):  # type: ignore[no-untyped-def]
        if x == nt.float32:
            return lambda seen, x, b: seen | flags(x)
        return lambda seen, x, b: mark(seen, b)

    def check16_scaled_of(seen, x, b):  # type: ignore[no-untyped-def]
        if x == nt.float32:
            return lambda seen, x, b: seen | scaled_flags(x)
        return lambda seen, x, b: mark(seen, b)

    def join_of(seen, bits, w):  # type: ignore[no-untyped-def]
        if w.dtype == nt.uint32:
            return lambda seen, bits, w: seen | bits
        return lambda seen, bits, w: max(seen, bits)

    def mark_sums_of(seen, o, w):  # type: ignore[no-untyped-def]
        if w.dtype != nt.uint16:
            return lambda seen, o, w: seen
        f2u = g["f2u"]

        def top_word(seen, o, w):  # type: ignore[no-untyped-def]
            top = np.uint32(0)
            for j in range(o.size):
                top = max(top, f2u(o[j]) & np.uint32(_ABS32))
            return max(seen, top >> np.uint32(16))

        return top_word

    overload(widen, inline="always")(widen_of)
    overload(mark, inline="always")(mark_of)
    overload(check16, inline="always")(check16_of)
    overload(check16_scaled, inline="always")(check16_scaled_of)
    overload(join, inline="always")(join_of)
    overload(mark_sums, inline="always")(mark_sums_of)


def _pick_row(o, xs, xbs, kind, grid, lanes, mode, z, t):  # type: ignore[no-untyped-def]
    """:func:`_row_of`'s implementation for numba's argument types: the one loop of a literal kind (and mode),
    else :func:`_row_kind`'s every loop."""
    g = globals()
    k, m = getattr(kind, "literal_value", None), getattr(mode, "literal_value", None)
    if k in (0, 1, 2):
        row = g[("_row_fp32", "_row_near", "_row_fp16")[k]]
        if k == 0:
            return lambda o, xs, xbs, kind, grid, lanes, mode, z, t: row(o, xs, xbs)
        return lambda o, xs, xbs, kind, grid, lanes, mode, z, t: row(o, xs, xbs, grid)
    if k == 5 and m is not None and m > 4:  # (under the hardware's mode: every sum answered)
        h, c16 = (m - 5) % 3 + 1, m > 10
        if m < 8:
            hw_row = g["_row_hw"]
            return lambda o, xs, xbs, kind, grid, lanes, mode, z, t: hw_row(o, xs, xbs, h, lanes.L)
        scaled_row = g["_row_hw_scaled"]
        return lambda o, xs, xbs, kind, grid, lanes, mode, z, t: scaled_row(
            o, xs, xbs, np.float32(lanes.scale), h, lanes.L, grid, c16
        )
    if k == 5 and m == 4:
        sr = g["_row_sr_each"]
        return lambda o, xs, xbs, kind, grid, lanes, mode, z, t: sr(
            o, xs, xbs, np.float32(lanes.scale), lanes.L, lanes.step, np.int64(lanes.d), lanes.limit, z, t
        )
    if k == 5 and m is not None:
        soft = g["_row_soft"]
        return lambda o, xs, xbs, kind, grid, lanes, mode, z, t: soft(
            o, xs, xbs, np.float32(lanes.scale), m, lanes.L, lanes.step, np.int64(lanes.d)
        )
    rows = g["_row_kind"]
    return lambda o, xs, xbs, kind, grid, lanes, mode, z, t: rows(o, xs, xbs, kind, grid, lanes, mode, z, t)


def wide_kind(kind: Kind, grid: Grid) -> Kind | None:
    """The kind :func:`left_rows` folds for the accumulator's kind and grid (float32 rows), or None.

    NATIVE (fp32 only: float32 rows), SPLIT and SPLIT_SUB as they are; BITS in a directed or
    stochastic mode for a format of p <= 24 bits and emin >= -126 (fp32: d = 0, the float32 grid): LANES.
    """
    if kind in (Kind.SPLIT, Kind.SPLIT_SUB) or (kind == Kind.NATIVE and grid.p == 24):
        return kind
    if kind == Kind.BITS and grid.p <= 24 and grid.emin >= -126 and grid.mode > 0:
        return Kind.LANES
    return None


def fold_left(
    X: np.ndarray,
    perms: np.ndarray,
    kind: int,
    grid: Grid,
    key: np.uint64,
    e0: int,
    low: int,
    cols: tuple[np.ndarray, np.ndarray] | None = None,
    threads: int = 1,
) -> tuple[np.ndarray | None, bool]:
    """The left fold of X's rows by :func:`left_rows`, in compiled calls on ``threads`` threads: (out, done).

    X holds float32 values, or the 2- or 1-byte words of bf16, fp16 or fp8 values (:data:`WORDS`:
    read as they are, never widened to a copy). ``perms`` the row order (1-D), or one per
    segment (2-D) with ``cols`` = (first columns, ends) of the segments, which cover X's
    columns (column j is element ``e0 + j``); each thread folds its own span of them (the
    same bits for any number). ``out`` None: an input has one of the bits ``low`` set
    (not in the input format), or a word is Inf or NaN. ``done`` False: a sum reached the
    format's top, or Inf or NaN (kind 5), or Veltkamp's range (kind 1): the caller folds
    again by the exact scalar path.
    """
    compile_all()
    lns = row_params(kind, grid, low)
    m = X.shape[1]
    los, his = (np.zeros(1, dtype=np.int64), np.full(1, m, dtype=np.int64)) if cols is None else cols
    perms = np.asarray(perms, dtype=np.int64).reshape(los.size, -1)
    out = np.empty(m, dtype=np.float32)
    fold = _segs_kernel(int(kind), row_mode(kind, grid, lns))
    Xb = X if X.dtype.itemsize <= 2 else X.view(np.uint32)
    parts = [(X, Xb, perms, *piece, out, grid, lns, key, e0) for piece in pieces(los, his, threads)]
    with np.errstate(over="ignore", invalid="ignore"):
        got = threads_run(fold, parts)
    return outcome(X, out, got, kind, lns, low)


def outcome(
    X: np.ndarray, out: np.ndarray, got: list[tuple[int, int]], kind: int, lns: Lanes, low: int
) -> tuple[np.ndarray | None, bool]:
    """(out, done) of a left fold of X's rows from its threads' (input check, max |s|): :func:`fold_left`'s."""
    w = X[:0] if X.dtype.itemsize <= 2 else X[:0].view(np.uint32)
    seen, big = functools.reduce(lambda a, b: (join(a[0], b[0], w), max(a[1], b[1])), got)
    if X.dtype.itemsize <= 2:
        if seen >= _WORD_TOPS[X.dtype]:  # (bf16: a sum, :func:`mark_sums`)
            return None, True  # an Inf or NaN input: the caller loads the rows (NaNs canonical) and folds again
        low = 0
    return answer(out, seen, big, kind, lns, low)


def pieces(los: np.ndarray, his: np.ndarray, threads: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The segments ``[los[s], his[s])`` cut into ``threads`` spans of columns: per thread (segs, los, his) of its
    pieces (:func:`_segs_kernel`), each piece a part of one segment."""
    if threads <= 1:
        return [(np.arange(los.size, dtype=np.int64), los, his)]
    spans = split(int(his.max(initial=0)), threads)
    out = []
    for a, b in spans:
        s = np.flatnonzero((los < b) & (his > a))
        out.append((s.astype(np.int64), np.maximum(los[s], a), np.minimum(his[s], b)))
    return out


def row_params(kind: int, grid: Grid, low: int) -> Lanes:
    """The row loops' :class:`Lanes` for ``kind`` (LANES: :func:`lanes`; fp16 inputs checked as read when
    ``low`` says so, ``_tall``'s lazy16), else :data:`NO_LANES`."""
    if kind == Kind.LANES:
        return lanes(grid.p, grid.emin, float(grid.maxf), low == FP16_CHECK)
    return NO_LANES


def answer(out: np.ndarray, seen: int, big: int, kind: int, lns: Lanes, low: int) -> tuple[np.ndarray | None, bool]:
    """:func:`fold_left`'s (out, done) from a row fold's check ``seen`` and largest pattern ``big``."""
    if seen & low:
        return None, True
    if kind == Kind.LANES:
        return out, bool(big <= lns.limit)  # (add_hw answers every sum: its rows leave big at 0)
    return out, kind != Kind.SPLIT or not np.isnan(out.max(initial=0.0))
