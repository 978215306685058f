"""Slow, obvious references over exact rationals (used by reduce_reference and tests)."""

from __future__ import annotations

import math
from fractions import Fraction

from fpreduce.core.formats import Format


def round_fraction(v: Fraction, f: Format, mode: str) -> float:
    """Round an exact rational onto f in mode (not stochastic), IEEE 754 rules."""
    if v == 0:
        return 0.0
    sign = -1 if v < 0 else 1
    a = abs(v)
    e = math.floor(math.log2(a.numerator) - math.log2(a.denominator))
    # fix e so that 2**e <= a < 2**(e+1)
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    k = max(e, f.emin) - f.precision + 1
    q = Fraction(2) ** k
    s = a / q
    lo = math.floor(s)
    rem = s - lo
    if mode == "nearest_even":
        n = lo + (1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and lo % 2 == 1) else 0)
    elif mode == "toward_zero":
        n = lo
    elif (mode == "up" and sign > 0) or (mode == "down" and sign < 0):
        n = lo + (1 if rem else 0)
    else:
        n = lo
    r = n * q
    if r > Fraction(f.max_finite):
        inf = math.inf if f.has_inf else math.nan
        away = {
            "nearest_even": inf,
            "toward_zero": f.max_finite,
            "up": inf if sign > 0 else f.max_finite,
            "down": f.max_finite if sign > 0 else inf,
        }[mode]
        return sign * away
    return math.copysign(float(r), sign)
