"""The integer-bit rounding of the compiled folds (core/_kernels_round.py) against the exact references.

One addition of two values of a format, rounded in every mode: the plain-Python
functions against ``_reference.add_exact`` (Fractions) on ties, subnormals, a binade's
first value with a remainder below it, overflow by mode, signed zeros, NaN and Inf;
stochastic rounding against the documented law computed with Fractions; the numba
row loops against the plain-Python functions, bit for bit.
"""

import math
from fractions import Fraction

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.core import _kernels_round as kr
from fpreduce.core.exact import add_exact
from fpreduce.core.formats import get_format
from fpreduce.core.grid import MODE_CODES, grid_of

PY = kr.plain()  # the plain-Python functions, whatever compiled state the module is in
FORMATS = ["bf16", "fp16", "tf32", "fp32", "fp8_e4m3", "fp8_e5m2"]
MODES = ["nearest_even", "toward_zero", "up", "down"]
CODE_MODES = {code: mode for mode, code in MODE_CODES.items()}


def bits(v):
    return np.float64(v).view(np.uint64)


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or bits(a) == bits(b)


def pairs(fmt, count=300, seed=0):
    """Pairs of values of ``fmt`` (float64): wide exponents, subnormals, ties, powers of two, extremes, specials."""
    f = get_format(fmt)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(count) * np.exp2(rng.integers(-40, 40, count))
    tiny = 2.0 ** (f.emin - f.precision + 1)
    pick = rng.random(count)
    x = np.where(pick < 0.2, rng.integers(-9, 10, count) * tiny, x)
    edge = [1.0, -1.0, 2.0**-f.precision, 3 * 2.0**-f.precision, -0.0, 0.0, f.max_finite, -f.max_finite, 2.0**f.emin]
    x = np.where((pick >= 0.2) & (pick < 0.35), rng.choice(edge, count), x)
    x = fr.round_to(x, f).astype(np.float64)
    near = -x[count // 2 :] * rng.choice([1, 0.5, 2, 2.0**-30])
    y = fr.round_to(np.concatenate([np.roll(x, 7)[: count // 2], near]), f)
    xs = [float(v) for v in x] + [1.0, 2.0**f.emin, 1.0, math.nan, math.inf, -math.inf, math.inf, -0.0]
    tiny = 2.0 ** (f.emin - f.precision + 1)
    ys = [float(v) for v in y] + [-(2.0**-30), -tiny, 2.0**-40, 1.0, 1.0, -1.0, -math.inf, -0.0]
    return list(zip(xs, ys, strict=True))


def params(fmt):
    f = get_format(fmt)
    return 53 - f.precision, f.emin + 1023, f.max_finite, (math.inf if f.has_inf else math.nan), f.has_inf


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", range(4))
def test_add_round_is_the_exact_sum_rounded_once(fmt, mode):
    f = get_format(fmt)
    sh, eminb, maxf, big, has_inf = params(fmt)
    for x, y in pairs(fmt, seed=mode):
        with np.errstate(invalid="ignore"):
            got = PY["add_round"](x, y, sh, eminb, maxf, big, has_inf, mode, 0.0)
        assert same(got, add_exact(x, y, f, MODES[mode])), (fmt, MODES[mode], x, y, got)


@pytest.mark.parametrize("mode", [1, 2, 3])
def test_add_fp64_directed_and_overflow(mode):
    f = get_format("fp64")
    rng = np.random.default_rng(mode)
    x = rng.standard_normal(400) * np.exp2(rng.integers(-1074, 1000, 400))
    y = np.concatenate([rng.standard_normal(200) * np.exp2(rng.integers(-60, 60, 200)) * x[:200], -x[200:]])
    extra = [(f.max_finite, f.max_finite), (-f.max_finite, -f.max_finite), (1.0, 2.0**-80), (1.0, -(2.0**-80))]
    extra += [(-1.0, 2.0**-80), (2.0**-1074, -0.0), (-0.0, -0.0), (math.inf, 1.0), (math.inf, -math.inf)]
    for a, b in list(zip(x.tolist(), y.tolist(), strict=True)) + extra:
        with np.errstate(invalid="ignore", over="ignore"):
            got = PY["add_fp64"](a, b, f.max_finite, mode, 0.0)
        assert same(got, add_exact(a, b, f, MODES[mode])), (MODES[mode], a, b, got)


def sr_law(x, y, f, u):
    """The documented law with Fractions: up (signed) iff u < RN64(exact - lo) / gap, lo/hi the directed roundings."""
    lo, hi = add_exact(x, y, f, "down"), add_exact(x, y, f, "up")
    if lo == hi:
        return lo
    exact = Fraction(x) + Fraction(y)
    frac = Fraction(float(exact - Fraction(lo))) / (Fraction(hi) - Fraction(lo))
    return hi if Fraction(u) < frac else lo


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp8_e5m2", "fp32"])
def test_stochastic_rounding_follows_the_law(fmt):
    f = get_format(fmt)
    sh, eminb, maxf, big, has_inf = params(fmt)
    rng = np.random.default_rng(1)
    for x, y in pairs(fmt, 200, seed=5)[:200]:
        s = x + y
        if not math.isfinite(s) or s == 0 or abs(s) > maxf / 2:
            continue
        u = float(rng.random())
        got = PY["add_round"](x, y, sh, eminb, maxf, big, has_inf, 4, u)
        assert same(got, sr_law(x, y, f, u)), (fmt, x, y, u, got)


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "tf32", "fp8_e4m3", "fp8_e5m2"])
def test_float32_rounding_equals_the_float64_one(fmt):
    """add_round32 (float32 sum and remainder, int bits of float32) gives add_round's bits in every mode,
    stochastic included (same u), and the exact rounding: float32 subnormals, float32 overflow near bf16's top."""
    f = get_format(fmt)
    sh, eminb, maxf, big, has_inf = params(fmt)
    ps = pairs(fmt, 300, seed=11)
    if f.emin == -126:
        q = 2.0 ** (f.emin - f.precision + 1)
        ps += [(maxf, maxf), (-maxf, -maxf), (maxf, -maxf / 2), (2.0**-126, -q), (2.0**-125, -q), (2.0**-126, q)]
    rng = np.random.default_rng(2)
    for mode in range(5):
        for x, y in ps:
            u = float(rng.random())
            with np.errstate(invalid="ignore", over="ignore"):
                got = PY["add_round32"](np.float32(x), np.float32(y), sh - 29, eminb - 896, maxf, big, has_inf, mode, u)
                want = PY["add_round"](x, y, sh, eminb, maxf, big, has_inf, mode, u)
            assert same(float(got), want), (fmt, mode, x, y, got, want)
            if mode < 4:
                assert same(want, add_exact(x, y, f, MODES[mode])), (fmt, mode, x, y)


needs_jit = pytest.mark.skipif(not jit.enabled(), reason="numba not installed or FPREDUCE_NO_JIT set")


def fp64_sr_law(x, y, u):
    """fp64's law: the float64 sum, stepped toward its remainder iff u < |remainder| / the gap (Fractions)."""
    s = x + y
    err = Fraction(x) + Fraction(y) - Fraction(s)
    if err == 0:
        return s
    other = float(np.nextafter(s, math.inf if err > 0 else -math.inf))
    return other if Fraction(u) < abs(err) / abs(Fraction(other) - Fraction(s)) else s


@needs_jit
@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp8_e4m3", "fp64"])
def test_compiled_rows_equal_the_references(fmt):
    """The numba row loops (vectorized, one per mode) give the references' bits, stochastic draws included."""
    from fpreduce.core import _tall

    _tall._kernels()  # compiles this module's functions too
    with np.errstate(over="ignore"):  # uint64 products wrap
        assert kr.uniform(kr.element_seed(np.uint64(5), 3), 2) == PY["uniform"](PY["element_seed"](np.uint64(5), 3), 2)
    f = get_format(fmt)
    ps = pairs("fp32" if fmt == "fp64" else fmt, 200, seed=3)
    dt = np.float64 if fmt == "fp64" else np.float32
    A = np.array([[x for x, _ in ps]], dtype=dt)
    B = np.array([[y for _, y in ps]], dtype=dt)
    key = np.uint64(99)
    z = np.array([kr.element_seed(key, e) for e in range(A.shape[1])], dtype=np.uint64)
    for mode in range(5) if fmt != "fp64" else range(1, 5):
        grid = grid_of(f, CODE_MODES[mode])
        D = np.empty_like(A)
        with np.errstate(invalid="ignore", over="ignore"):
            kr.rows_any(D[0], A[0], B[0], grid, z, 7)  # by dtype, as the kernels call it: rows_wide for fp64
        for j in range(A.shape[1]):
            x, y = float(A[0, j]), float(B[0, j])
            if mode < 4:
                want = add_exact(x, y, f, MODES[mode])
            elif not (math.isfinite(x + y) and x + y != 0 and abs(x + y) <= f.max_finite / 2):
                continue
            else:
                u = float(kr.uniform(z[j], 7))
                want = fp64_sr_law(x, y, u) if fmt == "fp64" else sr_law(x, y, f, u)
            assert same(float(D[0, j]), want), (fmt, mode, x, y, D[0, j], want)
            if mode < 4:  # the scalar left fold of the two rows: one addition, the same rounding
                with np.errstate(invalid="ignore", over="ignore"):
                    left = kr.left_any(np.vstack([A, B]), np.zeros(0, dtype=np.int64), j, grid, z[j])
                assert same(float(left), want), (fmt, mode, x, y, left, want)
