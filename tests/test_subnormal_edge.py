"""Sums at the smallest subnormal with a remainder far below float64's ulp (issue 24).

An accumulator at ±smin (the format's smallest subnormal) plus an addend of the other
sign below 2**-53 of it has a float64 sum of exactly ±smin and a nonzero remainder:
the exact sum lies strictly between 0 and ±smin. Wide addends (``partial_sums(...,
addends="wide")``) and fused products (``dot``) reach it; their compiled kernels gave
±smin/4 (a value of no format) in the modes rounding it toward zero, and stochastic
rounding gave it a quarter of the time; to nearest, the tie 1.5 smin went to smin (odd)
instead of 2 smin. Both came from ``_kernels_round.round_bits`` reading ``s``'s bits
with all 52 fraction bits discarded (``smin <= |s| < 2 smin``). Here every format and
mode is checked, compiled against numpy (``jit.disabled()``) and, but for stochastic
rounding, against the Fraction reference, with every result a value of its format
(``to_bits`` round trip); the stochastic law by its frequencies and, on the plain
rounders, draw by draw.
"""

import math
from fractions import Fraction

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.core.exact import add_exact, round_float, round_fraction
from fpreduce.core.formats import get_format

FORMATS = ["fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp64"]
MODES = ["nearest_even", "toward_zero", "up", "down"]
SMALL = [1, 2, 30, 52, 53, 54, 60, 100, 800]  # addends of 2**-k smin


def smin(fmt):
    f = get_format(fmt)
    return 2.0 ** (f.emin - f.precision + 1)


def edge_pairs(fmt):
    """(acc, addend) pairs in units of smin: the issue's cases, same-sign ones, ties, signed zeros (an acc of 1.5
    smin is first rounded on its own: a tie)."""
    t = smin(fmt)
    out = []
    for s in (1.0, -1.0):
        for k in SMALL:
            out += [(s, -s * 2.0**-k), (s, s * 2.0**-k), (0.0 * s, s * 2.0**-k), (2 * s, -s * (1 + 2.0**-k))]
        out += [(s, -s * 0.5), (s, -s * (0.5 - 2.0**-60)), (s, -s * (0.5 + 2.0**-60)), (0.0 * s, s * 0.5)]
        out += [(0.0 * s, s * (0.5 + 2.0**-60)), (0.0 * s, s * (0.5 - 2.0**-60)), (3 * s, -s * 2.0**-60)]
        out += [(2 * s, -s * 2.0**-60), (2 * s, s * 2.0**-60), (1.5 * s, s * 2.0**-60), (1.5 * s, 0.0)]
        out += [(s, s * (0.5 + 2.0**-60)), (s, s * (0.5 - 2.0**-60))]
        out += [(s, -s), (0.0 * s, 0.0 * s), (0.0 * s, -0.0 * s), (s, -s * 0.25), (s, s * 0.5)]
    return [(a * t, x * t) for a, x in out if x * t != 0 or x == 0]


def same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((np.isnan(a) & np.isnan(b)) | (a.view(np.uint64) == b.view(np.uint64))))


def representable(r, fmt):
    r = np.asarray(r)
    return same(fr.from_bits(fr.to_bits(r, fmt), fmt), r)


def fold_reference(col, fmt, mode):
    """The left fold of ``col`` (the first value rounded on its own), each exact sum rounded once."""
    f = get_format(fmt)
    acc = round_float(float(col[0]), f, mode)
    out = [acc]
    for v in col[1:]:
        acc = add_exact(acc, float(v), f, mode)
        out.append(acc)
    return out


def neighbours(v, fmt):
    """The magnitudes of the values of the format on either side of the exact ``v``."""
    f = get_format(fmt)
    return {abs(round_fraction(v, f, "down")), abs(round_fraction(v, f, "up"))}


def wide_rows(fmt):
    """Rows (acc, addend, +-0.75 smin): the third row shows an fp32 intermediate its float32 result hides."""
    P = edge_pairs(fmt)
    a = np.array([p[0] for p in P] * 2)
    x = np.array([p[1] for p in P] * 2)
    z = np.repeat([0.75, -0.75], len(P)) * smin(fmt)
    return np.stack([a, x, z])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", [*MODES, "stochastic"])
def test_wide_addends_at_the_smallest_subnormal(fmt, mode):
    X = wide_rows(fmt)
    kw = dict(input="fp64", accumulate=fmt, rounding=mode, addends="wide", seed=5)
    got = fr.partial_sums(X, **kw)
    with jit.disabled():
        assert same(fr.partial_sums(X, **kw), got)
    assert representable(got, fmt)
    for j in range(X.shape[1]):
        if mode == "stochastic":
            exact = Fraction(float(got[0, j])) + Fraction(float(X[1, j]))
            assert abs(float(got[1, j])) in neighbours(exact, fmt), (j, X[:2, j], got[1, j])
        else:
            assert same(got[:, j], fold_reference(X[:, j], fmt, mode)), (j, X[:, j], got[:, j])


def split(v):
    """v as the exact product of two fp32 values, or None."""
    if v == 0:
        return v, 1.0
    m, e = math.frexp(v)
    h = e // 2
    a, b = math.ldexp(m, h), math.ldexp(1.0, e - h)
    ok = all(float(fr.round_to(np.array([w]), "fp32")[0]) == w for w in (a, b))
    return (a, b) if ok else None


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "fp64"])
@pytest.mark.parametrize("mode", [*MODES, "stochastic"])
def test_fused_products_at_the_smallest_subnormal(fmt, mode):
    """Left folds (``acc = fma(a_i, b_i, acc)``) and a tree of two leaves then one (the compiled tree kernel)."""
    X = wide_rows(fmt)
    keep = [j for j in range(X.shape[1]) if all(split(float(v)) is not None for v in X[:, j])]
    X = X[:, keep]
    A = np.array([[split(float(v))[0] for v in row] for row in X])
    B = np.array([[split(float(v))[1] for v in row] for row in X])
    assert np.array_equal(A * B, X)
    assert X.shape[1] > 50
    for plan, rows in (("sequential", [0, 1, 2]), ("((1,0),2)", [1, 0, 2])):
        kw = dict(input="fp32", accumulate=fmt, rounding=mode, seed=9)
        got = fr.dot(A[rows], B[rows], plan, **kw)
        with jit.disabled():
            assert same(fr.dot(A[rows], B[rows], plan, **kw), got), plan
        assert representable(got, fmt)
        if mode != "stochastic":
            want = [fold_reference(X[:, j], fmt, mode)[-1] for j in range(X.shape[1])]
            assert same(got, want), plan


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "fp64"])
def test_stochastic_rounding_at_the_smallest_subnormal_follows_the_law(fmt):
    """smin - 2**-60 smin rounds to smin but with probability ~2**-60 (never in 4096 draws); smin - smin/4
    rounds to smin with probability 3/4; -smin + smin/4 to -smin with 3/4; both by the wide fold and the FMA."""
    t, n = smin(fmt), 4096
    for x, p_away in ((-(2.0**-60) * t, 1.0), (-0.25 * t, 0.75)):
        for s in (1.0, -1.0):
            X = np.array([[s * t] * n, [s * x] * n])
            got = fr.partial_sums(X, input="fp64", accumulate=fmt, rounding="stochastic", addends="wide", seed=11)[1]
            (a0, b0), (a1, b1) = split(s * t), split(s * x)  # products of fp32 values
            A, B = np.array([[a0] * n, [a1] * n]), np.array([[b0] * n, [b1] * n])
            fused = fr.dot(A, B, input="fp32", accumulate=fmt, rounding="stochastic", seed=11)
            for r in (got, fused):
                assert representable(r, fmt)
                r = np.asarray(r, dtype=np.float64)
                assert set(np.abs(r).tolist()) <= {0.0, t}
                assert np.all(np.signbit(r) == (s < 0))
                freq = np.mean(np.abs(r) == t)
                assert (freq == 1.0) if p_away == 1.0 else abs(freq - p_away) < 0.05, (fmt, s, x, freq)


def sr_law(x, y, f, u):
    """The documented law with Fractions: up (signed) iff u < RN64(exact - lo) / gap, lo/hi the directed roundings."""
    lo, hi = add_exact(x, y, f, "down"), add_exact(x, y, f, "up")
    exact = Fraction(x) + Fraction(y)
    frac = Fraction(float(exact - Fraction(lo))) / (Fraction(hi) - Fraction(lo))
    return hi if Fraction(u) < frac else lo


@pytest.mark.parametrize("fmt", ["fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"])
def test_the_bit_rounders_at_the_smallest_subnormal(fmt):
    """One wide addition at s = ±smin with a remainder either way and at the tie ±1.5 smin, element by element:
    the exact rounding in every directed mode, and in stochastic rounding the documented law draw by draw (each
    element's uniform of addition 0 from the independent splitmix64), compiled and numpy."""
    from test_tall import splitmix_uniform

    f, t, k = get_format(fmt), smin(fmt), 64
    ps = [(s * t, s * r * t) for s in (1.0, -1.0) for r in (-(2.0**-30), -(2.0**-60), 2.0**-30, 2.0**-60, 0.5)]
    key = int(np.random.default_rng(7).integers(0, 2**63))
    for mode in range(5):
        for x, y in ps:
            X = np.array([[x] * k, [y] * k])
            kw = dict(input="fp64", accumulate=fmt, rounding=[*MODES, "stochastic"][mode], addends="wide", seed=7)
            got = fr.partial_sums(X, **kw)[1]
            with jit.disabled():
                assert same(fr.partial_sums(X, **kw)[1], got), (fmt, mode, x, y)
            assert representable(got, fmt)
            for e in range(k if mode == 4 else 1):
                u = splitmix_uniform(key, e, 0)
                want = add_exact(x, y, f, MODES[mode]) if mode < 4 else sr_law(x, y, f, u)
                assert same(got[e], want), (fmt, mode, x, y, u, got[e], want)
