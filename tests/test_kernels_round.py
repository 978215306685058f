"""One rounded addition, every route, every mode, against the exact references.

Two rows of values of a format (ties, subnormals, a binade's first value with a
remainder below it, overflow by mode, signed zeros, NaN and Inf), reduced by every
route one addition can take (wide rows folded in place, the row kernel, a chain or a
register per column, the numpy blocks): each column is one IEEE addition and must be
``add_exact`` (Fractions) of its two values; stochastic rounding follows the
documented law computed with Fractions, with the uniform of an independent pure-Python
splitmix64 (``test_tall.splitmix_uniform``: key, element, addition 0).
"""

import math
from contextlib import nullcontext
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from test_tall import splitmix_uniform

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.core import _kernels_round as kr
from fpreduce.core import routes
from fpreduce.core.exact import add_exact
from fpreduce.core.formats import NATIVE_DTYPES, get_format

FORMATS = ["bf16", "fp16", "tf32", "fp32", "fp8_e4m3", "fp8_e5m2"]
MODES = ["nearest_even", "toward_zero", "up", "down"]


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
    xs, ys = (fr.round_to(np.array(v), f).tolist() for v in (xs, ys))  # 2**-30, 2**-40: values of f, or rounded
    out = list(zip(xs, ys, strict=True))
    if f.emin == -126:  # float32's own subnormals and overflow, where the float32 kernels work on its bits
        m, q = f.max_finite, tiny
        out += [(m, m), (-m, -m), (m, -m / 2), (2.0**-126, -q), (2.0**-125, -q), (2.0**-126, q)]
    return out


def two_rows(ps, dtype=np.float32):
    return np.array([[x for x, _ in ps], [y for _, y in ps]], dtype=dtype)


def by_every_route(X, fmt, mode, seed=None):
    """(result, routes run) of X (2 rows) summed into ``fmt`` by each route one addition can take: the whole
    row left to right and pairwise (wide rows, the row kernel), a few columns at a time (a chain or a register
    per column), compiled and numpy. Every result is checked equal to the first."""
    inp = "fp32" if fmt == "fp64" and X.dtype == np.float32 else fmt
    kw = {"input": inp, "accumulate": fmt, "rounding": mode, "seed": seed}
    m, first, seen = X.shape[1], None, set()
    for ctx in (nullcontext, jit.disabled):
        for plan, step in (("sequential", m), ("pairwise", m), ("sequential", routes.NARROW)):
            with ctx(), fr.trace_routes() as ran, np.errstate(all="ignore"):
                d = fr.explain(X[:, :step], plan, **kw)
                got = np.concatenate(
                    [fr.reduce(X[:, a : a + step], plan, offset=a, total=m, **kw) for a in range(0, m, step)]
                )
            assert ran[0] is d.route, (plan, step, str(d), ran)
            seen.update(ran)
            if first is None:
                first = got
            assert np.array_equal(np.isnan(got), np.isnan(first)), (ctx, plan, step)
            nan = np.isnan(got)
            assert np.array_equal(
                got[~nan].astype(np.float64).view(np.uint64), first[~nan].astype(np.float64).view(np.uint64)
            ), (ctx, plan, step)
    return first, seen


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", range(4))
def test_add_round_is_the_exact_sum_rounded_once(fmt, mode):
    f = get_format(fmt)
    ps = pairs(fmt, seed=mode)
    got, seen = by_every_route(two_rows(ps), fmt, MODES[mode])
    for (x, y), g in zip(ps, got, strict=True):
        assert same(float(g), add_exact(x, y, f, MODES[mode])), (fmt, MODES[mode], x, y, g)
    if jit.enabled():
        assert seen & {fr.Route.WIDE_LEFT, fr.Route.ROW_BLOCKS}, seen
        assert seen & {fr.Route.CHAIN, fr.Route.COLUMNS}, seen


@pytest.mark.parametrize("mode", [1, 2, 3])
def test_add_fp64_directed_and_overflow(mode):
    f = get_format("fp64")
    rng = np.random.default_rng(mode)
    x = rng.standard_normal(400) * np.exp2(rng.integers(-1074, 1000, 400))
    y = np.concatenate([rng.standard_normal(200) * np.exp2(rng.integers(-60, 60, 200)) * x[:200], -x[200:]])
    extra = [(f.max_finite, f.max_finite), (-f.max_finite, -f.max_finite), (1.0, 2.0**-80), (1.0, -(2.0**-80))]
    extra += [(-1.0, 2.0**-80), (2.0**-1074, -0.0), (-0.0, -0.0), (math.inf, 1.0), (math.inf, -math.inf)]
    ps = list(zip(x.tolist(), y.tolist(), strict=True)) + extra
    got, _ = by_every_route(two_rows(ps, np.float64), "fp64", MODES[mode])
    for (a, b), g in zip(ps, got, strict=True):
        assert same(float(g), add_exact(a, b, f, MODES[mode])), (MODES[mode], a, b, g)


def sr_law(x, y, f, u):
    """The documented law with Fractions: up (signed) iff u < RN64(exact - lo) / gap, lo/hi the directed roundings."""
    lo, hi = add_exact(x, y, f, "down"), add_exact(x, y, f, "up")
    if lo == hi:
        return lo
    exact = Fraction(x) + Fraction(y)
    frac = Fraction(float(exact - Fraction(lo))) / (Fraction(hi) - Fraction(lo))
    return hi if Fraction(u) < frac else lo


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp8_e5m2", "fp32", "fp64"])
@pytest.mark.parametrize("seed", [1, 2])
def test_stochastic_rounding_follows_the_law(fmt, seed):
    """Each column's one addition rounds up iff its uniform (key, element, addition 0) is below the exact
    fraction: the same bits on every route, compiled and numpy (fp64: its own law, below)."""
    f = get_format(fmt)
    ps = pairs("fp32" if fmt == "fp64" else fmt, 200, seed=5)
    key = int(np.random.default_rng(seed).integers(0, 2**63))
    got, _ = by_every_route(two_rows(ps), fmt, "stochastic", seed=seed)
    checked = 0
    for e, ((x, y), g) in enumerate(zip(ps, got, strict=True)):
        s = x + y
        if not math.isfinite(s) or s == 0 or abs(s) > f.max_finite / 2:
            continue
        u = splitmix_uniform(key, e, 0)
        want = fp64_sr_law(x, y, u) if fmt == "fp64" else sr_law(x, y, f, u)
        assert same(float(g), want), (fmt, x, y, u, g)
        checked += 1
    assert checked > 100  # most pairs have an inexact finite sum


def fp64_sr_law(x, y, u):
    """fp64's law: the float64 sum, stepped toward its remainder iff u < |remainder| / the gap (Fractions)."""
    s = x + y
    err = Fraction(x) + Fraction(y) - Fraction(s)
    if err == 0:
        return s
    other = float(np.nextafter(s, math.inf if err > 0 else -math.inf))
    return other if Fraction(u) < abs(err) / abs(Fraction(other) - Fraction(s)) else s


def fma_triples(count=3000, seed=5):
    """(a, b, c) with wide exponents, products that cancel c (to zero, to a few bits), ties, signed zeros,
    overflow and specials: float64."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(count) * np.exp2(rng.integers(-530, 500, count))
    b = rng.standard_normal(count) * np.exp2(rng.integers(-530, 500, count))
    c = rng.standard_normal(count) * np.exp2(rng.integers(-1074, 1000, count))
    k = count // 3
    c[:k] = -(a[:k] * b[:k]) * rng.choice([1.0, 1.0 + 2.0**-52, 1.0 - 2.0**-53, 0.5], k)  # cancellation
    a[k : 2 * k] = rng.integers(1, 1 << 26, k) * 2.0**-26 + 1.0  # short significands: ties of the product
    b[k : 2 * k] = rng.integers(1, 1 << 27, k) * 2.0**-27 + 1.0
    c[k : 2 * k] = rng.choice([0.0, 2.0**-53, -(2.0**-53), 2.0**-100], k)
    special = [(0.0, -1.0, 0.0), (-0.0, 1.0, -0.0), (0.0, 1.0, -0.0), (1.0, -1.0, 1.0), (2.0**600, 2.0**600, 1.0)]
    special += [(-(2.0**600), 2.0**600, 1.0), (math.inf, 0.0, 1.0), (math.inf, 1.0, -math.inf), (math.nan, 1.0, 1.0)]
    special += [(2.0**-600, 2.0**-600, 0.0), (-(2.0**-600), 2.0**-500, -0.0), (3.0, 2.0**-1074, 2.0**-1074)]
    return list(zip(a.tolist(), b.tolist(), c.tolist(), strict=True)) + special


def test_fma_rounds_the_exact_value_once():
    """``fma``: plain (Fractions) equals the exact value rounded, laws checked by numpy; compiled equals plain."""
    fma = kr.plain()["fma"]
    ts = fma_triples()
    got = np.array([fma(*t) for t in ts])
    for (a, b, c), g in zip(ts, got, strict=True):
        if not all(map(math.isfinite, (a, b, c, g))):
            assert same(g, a * b + c), (a, b, c, g)  # special values, overflow: IEEE's
            continue
        exact = Fraction(a) * Fraction(b) + Fraction(c)
        lo, hi = Fraction(np.nextafter(g, -math.inf)), Fraction(np.nextafter(g, math.inf))
        assert (lo + Fraction(g)) / 2 <= exact <= (hi + Fraction(g)) / 2, (a, b, c, g)  # nearest
        if exact == (lo + Fraction(g)) / 2 or exact == (hi + Fraction(g)) / 2:  # a tie: the even one
            assert bits(g) % 2 == 0, (a, b, c, g)
        if exact == 0:
            assert same(g, a * b + c), (a, b, c, g)  # IEEE's signed zero
    A, B, C = (np.array(v) for v in zip(*ts, strict=True))
    pa, pb = A[:-12], B[:-12]
    prod, err = pa * pb, np.array([fma(x, y, -(x * y)) for x, y in zip(pa, pb, strict=True)])
    ok = np.isfinite(prod) & (np.abs(prod) > 2.0**-900)  # Dekker: a * b == prod + err exactly (no underflow)
    assert all(
        Fraction(x) * Fraction(y) == Fraction(p) + Fraction(e)
        for x, y, p, e in zip(pa[ok], pb[ok], prod[ok], err[ok], strict=True)
    )
    if jit.enabled():
        kr.compile_all()
        from numba import njit

        @njit
        def each(A, B, C, out):
            for i in range(A.size):
                out[i] = kr.fma(A[i], B[i], C[i])

        out = np.empty(A.size)
        each(A, B, C, out)
        assert np.array_equal(np.isnan(out), np.isnan(got))
        assert np.array_equal(out[~np.isnan(out)].view(np.uint64), got[~np.isnan(got)].view(np.uint64))


def _scale_edges(f):
    """Values of ``f`` where a product or quotient by the worker count lands on the format's edges: its least
    subnormal and a few (their quotients fall below it, or on half of it), the least normal, the top, signed
    zeros, Inf and NaN of both signs, and spread normal values."""
    rng = np.random.default_rng(5)
    smin = 2.0 ** (f.emin - f.precision + 1)
    edge = [0.0, -0.0, smin, -smin, 2 * smin, 3 * smin, -5 * smin, 7 * smin, 2.0**f.emin, -(2.0**f.emin)]
    edge += [float(f.max_finite), -float(f.max_finite), np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.5]
    spread = rng.standard_normal(200) * np.exp2(rng.integers(f.emin - f.precision, f.emax, 200))
    with np.errstate(over="ignore"):
        return fr.round_to(np.concatenate([edge, spread]), f)


@pytest.mark.parametrize("fmt", ["bf16", "tf32", "fp16", "fp8_e4m3", "fp8_e5m2", "fp32"])
def test_compiled_scaling_is_numpys_and_the_fraction_reference(fmt):
    """The compiled scaling by the worker count (``_kernels_round.scale_kernel``: premultiply, predivide, after, ddp)
    gives numpy's ``_scale`` bits in every mode (stochastic: counter-based draws) on the format's edges, on float32
    and float64 values, on 1 and 3 threads; to nearest and directed, the exact product or quotient (ddp: torch's
    float32 product) rounded once by the Fraction reference."""
    if not jit.enabled():
        pytest.skip("numba not installed: only the numpy path exists")
    from fpreduce.core import arith
    from fpreduce.core._reference import round_fraction
    from fpreduce.core._srload import _Draws
    from fpreduce.core.rounding import Mode

    f = get_format(fmt)
    x = _scale_edges(f)
    X = np.stack([x, x[::-1]]).astype(np.float32)
    for kind in ("premultiply", "predivide", "after", "ddp"):
        for n in (3, 64) if fmt != "bf16" else (1, 3, 7, 64):
            for mode in Mode:
                draws = _Draws(99, 5, 1 << 60) if mode is Mode.STOCHASTIC else None
                A = X.astype(np.float64) if (fmt == "bf16" and mode in (Mode.UP, Mode.STOCHASTIC)) else X
                got = arith._scale(A, (kind, float(n)), f, mode, draws, 1)
                with jit.disabled():
                    want = arith._scale(A, (kind, float(n)), f, mode, draws)
                assert got.dtype == want.dtype
                w = np.uint64 if got.dtype == np.float64 else np.uint32
                assert np.array_equal(got.view(w), want.view(w)), (kind, n, mode, A[got.view(w) != want.view(w)])
                if mode is Mode.STOCHASTIC:
                    continue
                for v, y in zip(A[0].astype(np.float64), got[0].astype(np.float64), strict=True):
                    if not math.isfinite(v):
                        continue
                    if kind == "ddp":
                        p = float(np.float32(Fraction(v) * Fraction(float(np.float32(1.0 / n)))))
                        ref = round_fraction(Fraction(p), f, "nearest_even") if math.isfinite(p) else p
                    elif kind == "premultiply":
                        d = float(fr.round_to(np.array([1.0 / n]), f)[0])
                        ref = round_fraction(Fraction(v) * Fraction(d), f, mode.value)
                    else:
                        ref = round_fraction(Fraction(v) / n, f, mode.value)
                    assert y == ref, (kind, n, mode, v, y, ref)
                    assert y == 0 or math.copysign(1, y) == math.copysign(1, v)
    wide = np.tile(X, (1, 40))  # 9,120 columns: three threads split them
    for mode in (Mode.DOWN, Mode.STOCHASTIC):
        draws = _Draws(7, 11, 1 << 60) if mode is Mode.STOCHASTIC else None
        one, three = (arith._scale(wide, ("predivide", 7.0), f, mode, draws, t) for t in (1, 3))
        assert np.array_equal(one.view(np.uint32), three.view(np.uint32))


_WORD_TYPES = {"bf16": np.uint16, "fp16": np.uint16, "fp8_e4m3": np.uint8, "fp8_e5m2": np.uint8}


@pytest.mark.parametrize("fmt", sorted(_WORD_TYPES))
def test_the_nearest_scaling_of_every_finite_value_is_numpys(fmt):
    """To nearest, the compiled scaling rounds a row without NaN, Inf or overflow from each value's bits alone
    (``_kernels_round.nearest_value``): every finite value of the format, premultiplied, ddp-scaled and predivided
    (``scale_value``'s loop) by worker counts whose products and quotients cross the subnormal range and land on
    ties, gives numpy's ``_scale`` bits, signed zeros included."""
    if not jit.enabled():
        pytest.skip("numba not installed: only the numpy path exists")
    from fpreduce.core import arith
    from fpreduce.core.rounding import Mode

    f = get_format(fmt)
    words = np.arange(2 ** (8 * np.dtype(_WORD_TYPES[fmt]).itemsize), dtype=_WORD_TYPES[fmt])
    x = words.view(getattr(ml_dtypes, NATIVE_DTYPES[fmt], None) or np.dtype(NATIVE_DTYPES[fmt])).astype(np.float32)
    x = x[np.isfinite(x)]
    X = np.stack([x, -x[::-1]])  # no NaN, Inf or overflow in a row: the bits' path answers for every value
    for kind in ("premultiply", "ddp", "predivide"):
        for n in (1, 3, 7, 64, 100, 1000):
            got = arith._scale(X, (kind, float(n)), f, Mode.NEAREST_EVEN, None, 1)
            with jit.disabled():
                want = arith._scale(X, (kind, float(n)), f, Mode.NEAREST_EVEN, None)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (kind, n)


def test_bf16_words_scale_as_their_float32_copy_does():
    """The compiled scaling reads bf16 words as they are (``as_value``): every bf16 pattern, NaNs of every payload
    and sign, Inf and zeros included, scaled in every mode (stochastic: counter-based draws) by worker counts,
    gives the bits of its float32 copy with the quiet NaN for every NaN (the engine's loader's copy)."""
    if not jit.enabled():
        pytest.skip("numba not installed: only the numpy path exists")
    from fpreduce.core import arith
    from fpreduce.core._srload import _Draws
    from fpreduce.core.rounding import Mode

    f = get_format("bf16")
    words = np.arange(1 << 16, dtype=np.uint16).reshape(2, -1).view(ml_dtypes.bfloat16)
    copy = words.astype(np.float32)
    copy[np.isnan(copy)] = np.nan
    assert np.isnan(copy).sum() == 2 * 127  # every NaN payload (7 fraction bits) of both signs
    for kind in ("premultiply", "ddp", "predivide"):
        for n in (3, 64, 1000):
            for mode in Mode:
                draws = _Draws(5, 7, 1 << 61) if mode is Mode.STOCHASTIC else None
                got = arith._scale(words, (kind, float(n)), f, mode, draws, 1)
                want = arith._scale(copy, (kind, float(n)), f, mode, draws, 1)
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (kind, n, mode)
