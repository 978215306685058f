"""Scalar IEEE 754 arithmetic over exact integers and rationals: one rounding, one addition.

:func:`round_scaled` is the one scalar rounder: ``v * 2**s`` (exact integers) rounded
once onto a format, bit by bit on the integer. The exact oracle rounds its sums with
it, and the slow references (``reduce_reference``, ``compensated_reference``, the tests'
oracles for ``round_to``) reach it through :func:`round_fraction` (any rational),
:func:`round_float` (a float with its special values) and :func:`add_exact` (one IEEE
addition). Overflow follows :func:`fpreduce.core.rounding.overflow_value`.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from fpreduce.core.formats import Format
from fpreduce.core.rounding import Mode, overflow_value


def round_scaled(v: int, s: int, f: Format, mode: str, u: float | None = None) -> float:
    """Round ``v * 2**s`` once onto ``f`` in ``mode``; returns a Python float.

    Args:
        v: the integer significand (any sign; 0 gives +0.0).
        s: the power of two it is scaled by.
        f: the target format (subnormals kept: the quantum never falls below f's).
        mode: a rounding mode name; ``stochastic`` rounds up when ``u`` (a uniform
            float in [0, 1), compared exactly) is below the remainder's fraction.
        u: the uniform draw for ``stochastic``.

    Overflow (the rounding with unbounded exponent beyond ``max_finite``) gives
    :func:`~fpreduce.core.rounding.overflow_value`.

    >>> from fpreduce.core.formats import get_format
    >>> round_scaled(257, -8, get_format("bf16"), "nearest_even")  # 1 + 2**-8: a tie, to even
    1.0
    """
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
        return float(overflow_value(f, Mode(mode), neg))
    r = math.ldexp(m, q)
    return -r if neg else r


def round_fraction(v: Fraction, f: Format, mode: str) -> float:
    """Round an exact rational onto ``f`` in ``mode`` (not stochastic), IEEE 754 rules.

    A dyadic ``v`` goes to :func:`round_scaled` as it is. Otherwise ``v`` lies strictly
    between two multiples of 2**t, with t at least three bits below ``v``'s quantum in
    ``f``; the midpoint of those two has the same rounding in every mode (no value of
    ``f`` and no midpoint of two lies strictly between them) and is rounded instead.
    Zero gives +0.0 (callers give zeros their sign).

    >>> from fpreduce.core.formats import get_format
    >>> round_fraction(Fraction(1, 3), get_format("bf16"), "up")
    0.333984375
    """
    num, den = v.numerator, v.denominator
    if den & (den - 1) == 0:
        return round_scaled(num, 1 - den.bit_length(), f, mode)
    a = -num if num < 0 else num
    e = a.bit_length() - den.bit_length()  # 2**(e - 1) < a / den < 2**(e + 1)
    if (a << max(-e, 0)) < (den << max(e, 0)):
        e -= 1  # now 2**e <= a / den < 2**(e + 1)
    t = e - f.precision - 2  # the quantum is at least 2**(e - p + 1) = 2**(t + 3)
    whole = (a << -t) // den if t < 0 else a // (den << t)  # inexact: den is not a power of two
    mid = 2 * whole + 1
    return round_scaled(-mid if num < 0 else mid, t - 1, f, mode)


def round_float(v: float, f: Format, mode: str) -> float:
    """One float rounded onto ``f``: NaN and ±0.0 unchanged, ±Inf kept (NaN for a format without Inf)."""
    if v == 0 or np.isnan(v):
        return v
    if np.isinf(v):
        return v if f.has_inf else float("nan")
    return round_fraction(Fraction(v), f, mode)


def add_exact(a: float, b: float, f: Format, mode: str) -> float:
    """One IEEE addition ``a + b`` of values of ``f``: the exact sum rounded once in ``mode``.

    NaN and Inf follow the float64 result (``inf - inf`` is NaN; an Inf sum is NaN
    for a format without Inf). An exact zero is -0.0 if both operands are negative
    (``-0 + -0``) and, in mode ``down``, unless both are +0.0; else +0.0 (IEEE 754 6.3).
    """
    if not (math.isfinite(a) and math.isfinite(b)):
        r = float(a) + float(b)  # Python floats: inf - inf is nan, no warning
        return r if (f.has_inf or not math.isinf(r)) else math.nan
    exact = Fraction(a) + Fraction(b)
    if exact == 0:
        both_neg = bool(np.signbit(a) and np.signbit(b))
        both_pos_zero = a == 0 and b == 0 and not np.signbit(a) and not np.signbit(b)
        return -0.0 if both_neg or (mode == "down" and not both_pos_zero) else 0.0
    return round_fraction(exact, f, mode)
