"""Partial sums, wide addends, stochastically rounded inputs and the exact backward error (core/primitives.py).

The laws: row k - 1 of ``partial_sums`` is ``reduce`` of the first k rows, bit for
bit, in every format, mode (stochastic included) and algorithm; the compiled kernel
and its numpy twin agree; every addition is the exact sum rounded once (Fraction);
wide addends are rounded once per addition (Fraction); counter-based input rounding
does not depend on how the array is cut.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce.base import counter, jit
from fpreduce.base.errors import InvalidArgument
from fpreduce.core.exact import add_exact, round_float
from fpreduce.core.formats import get_format
from fpreduce.core.primitives import INPUT_T
from fpreduce.strategies import arrays, shapes

PAIRS = [("fp32", "fp32"), ("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "bf16"), ("fp16", "fp32"), ("fp32", "fp64")]
PAIRS += [("fp8_e4m3", "fp8_e4m3"), ("fp8_e5m2", "fp16"), ("tf32", "tf32")]
MODES = ["nearest_even", "toward_zero", "up", "down"]


def same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((np.isnan(a) & np.isnan(b)) | (a.view(np.uint64) == b.view(np.uint64))))


@st.composite
def problems(draw, specials=True):
    fin, fa = draw(st.sampled_from(PAIRS))
    X = draw(
        arrays(fin, shapes(workers=st.integers(1, 12), elements=(1, 4)), allow_nan=specials, allow_infinity=specials)
    )
    return fin, fa, X


@given(problems(), st.sampled_from([*MODES, "stochastic"]), st.sampled_from(["plain", "kahan", "neumaier", "exact"]))
def test_every_partial_sum_is_the_reduction_of_its_prefix(prob, mode, algorithm):
    fin, fa, X = prob
    if mode == "stochastic" and algorithm != "plain":
        return  # reduce's compensated and exact sums draw from a stream (not counter-based): no prefix law
    kw = dict(input=fin, accumulate=fa, rounding=mode, seed=7, algorithm=algorithm)
    P = fr.partial_sums(X, **kw)
    assert P.shape == X.shape
    assert P.dtype == get_format(fa).value_dtype
    for k in range(1, X.shape[0] + 1):
        assert same(P[k - 1], fr.reduce(X[:k], "sequential", **kw)), k
    with jit.disabled():
        assert same(fr.partial_sums(X, **kw), P)


@given(problems(), st.sampled_from(MODES))
def test_partial_sums_round_every_exact_sum_once(prob, mode):
    fin, fa, X = prob
    f = get_format(fa)
    P = fr.partial_sums(X, input=fin, accumulate=fa, rounding=mode)
    for j in range(X.shape[1]):
        s = round_float(float(X[0, j]), f, mode)
        assert same(P[0, j], s)
        for k in range(1, X.shape[0]):
            s = add_exact(s, round_float(float(X[k, j]), f, mode), f, mode)
            assert same(P[k, j], s), (k, j)


def test_harmonic_series_stagnates_in_fp16_and_exact_prefixes_do_not():
    terms = 1.0 / np.arange(1, 1025)
    h = fr.partial_sums(terms, input="fp16", accumulate="fp16")[:, 0]
    assert h[510] < h[511] == h[-1] == 7.0859375  # term 512 is the last that counts, 513 the first lost
    ex = fr.partial_sums(terms, input="fp16", accumulate="fp16", algorithm="exact")[:, 0]
    assert ex[-1] > 7.5
    assert np.all(np.diff(ex) >= 0)


@st.composite
def wide_problems(draw):
    fin, fa = draw(
        st.sampled_from([("fp64", "fp32"), ("fp64", "bf16"), ("fp32", "bf16"), ("fp32", "fp16"), ("fp64", "fp16")])
    )
    X = draw(arrays(fin, shapes(workers=st.integers(1, 10), elements=(1, 3)), allow_nan=True, allow_infinity=True))
    return fin, fa, X


@given(wide_problems(), st.sampled_from(MODES))
def test_wide_addends_are_rounded_once_per_addition(prob, mode):
    fin, fa, X = prob
    f = get_format(fa)
    P = fr.partial_sums(X, input=fin, accumulate=fa, rounding=mode, addends="wide")
    with jit.disabled():
        assert same(fr.partial_sums(X, input=fin, accumulate=fa, rounding=mode, addends="wide"), P)
    for j in range(X.shape[1]):
        s = round_float(float(X[0, j]), f, mode)
        for k in range(1, X.shape[0]):
            s = add_exact(s, float(X[k, j]), f, mode)  # the exact acc + x, one rounding
            assert same(P[k, j], s), (k, j)


def test_wide_addends_see_what_double_rounding_loses():
    x = np.array([1.0, 2.0**-8 + 2.0**-40])  # just above a bf16 tie: once rounded, up
    assert float(fr.partial_sums(x, input="fp64", accumulate="bf16", addends="wide")[-1, 0]) == 1.0078125
    assert float(fr.partial_sums(x, input="fp64", accumulate="bf16")[-1, 0]) == 1.0  # x rounded to bf16 first
    big = np.array([3.0e38, 1.0e300])  # float64 holds 1e300; the sum overflows fp32 by mode
    assert np.isinf(fr.partial_sums(big, input="fp64", addends="wide")[-1, 0])
    tz = fr.partial_sums(big, input="fp64", addends="wide", rounding="toward_zero")[-1, 0]
    assert float(tz) == get_format("fp32").max_finite
    z = fr.partial_sums(np.array([-0.0, -0.0, 0.0]), input="fp64", accumulate="bf16", addends="wide")[:, 0]
    assert list(np.signbit(z)) == [True, True, False]


def test_stochastic_prefix_sums_are_the_engines_draws_and_need_a_seed():
    X = np.random.default_rng(3).uniform(0, 1, (300, 3)).astype(np.float32)
    P = fr.partial_sums(X, accumulate="bf16", rounding="stochastic", seed=11, offset=5)
    assert same(P[-1], fr.reduce(X, "sequential", accumulate="bf16", rounding="stochastic", seed=11, offset=5, total=8))
    with jit.disabled():
        assert same(fr.partial_sums(X, accumulate="bf16", rounding="stochastic", seed=11, offset=5), P)
    with pytest.raises(InvalidArgument, match="seed"):
        fr.partial_sums(X, rounding="stochastic")
    with pytest.raises(InvalidArgument, match="algorithm"):
        fr.partial_sums(X, algorithm="kahn")
    with pytest.raises(InvalidArgument, match="wide"):
        fr.partial_sums(X, algorithm="kahan", addends="wide")


def test_the_numpy_generator_is_the_kernels():
    """The draws of (key, element, counter): base.counter's numpy twin, its scalar form (the kernels' own, inlined
    when compiled) and an independent pure-Python splitmix64 give the same uniforms."""
    from test_tall import splitmix_uniform

    e, t = np.array([0, 3, 2**40], dtype=np.uint64), np.array([[0], [5], [2**61 + 4]], dtype=np.uint64)
    u = counter.uniform_numpy(counter.draw_numpy(np.uint64(12345), e[None, :]), t)
    for i in range(3):
        for j in range(3):
            with np.errstate(over="ignore"):  # uint64 products wrap
                assert u[i, j] == counter.uniform(counter.draw(np.uint64(12345), e[j]), t[i, 0])
            assert u[i, j] == splitmix_uniform(12345, int(e[j]), int(t[i, 0]))


@given(st.sampled_from(["bf16", "fp16", "fp8_e5m2", "fp32"]), st.integers(0, 2**32))
def test_stochastic_inputs_are_a_neighbour_and_do_not_depend_on_the_cut(fmt, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((6, 9)) * np.exp2(rng.integers(-20, 20, (6, 9)))
    X[0, :3] = [0.0, -0.0, np.nan]
    R = fr.round_inputs(X, fmt, seed)
    lo, hi = fr.round_to(X, fmt, "down"), fr.round_to(X, fmt, "up")
    assert np.all((lo == R) | (hi == R) | np.isnan(X))
    assert list(np.signbit(R[0, :2])) == [False, True]
    assert same(
        np.concatenate([fr.round_inputs(X[:, :4], fmt, seed), fr.round_inputs(X[:, 4:], fmt, seed, offset=4)], 1), R
    )
    assert same(fr.round_inputs(X[:2], fmt, seed), R[:2])


@pytest.mark.parametrize("fmt", ["bf16", "tf32", "fp16", "fp8_e4m3", "fp8_e5m2", "fp32"])
def test_stochastic_inputs_follow_the_law_on_edges_compiled_numpy_and_threads(fmt, monkeypatch):
    """Every rounding of an input goes to the neighbour above exactly when its uniform (an independent splitmix64)
    is below the exact fraction (Fractions), on each format's edges: zeros of both signs, the least subnormal and
    below it, the least normal, the top and beyond it (overflow: Inf, NaN without Inf), Inf, NaN, float64
    subnormals and huge values, float32 and float64 data; the compiled pass (1 and 3 threads) and numpy agree."""
    from test_tall import splitmix_uniform

    f = get_format(fmt)
    q0, top = 2.0 ** (f.emin - f.precision + 1), f.max_finite
    ulp_top = 2.0 ** (f.emax - f.precision + 1)
    edges = [0.0, -0.0, q0, -q0, q0 / 4, q0 * 0.75, -q0 * 1.5, 2.0**f.emin, 2.0**f.emin - q0 / 3, 1.0, -1.0 - q0]
    edges += [top, -top, top + ulp_top / 4, -(top + ulp_top * 0.75), 2 * top, 5e-324, -1e300, np.inf, -np.inf, np.nan]
    rng = np.random.default_rng(3)
    x = np.array(edges + list(rng.standard_normal(40) * np.exp2(rng.integers(f.emin - 12, f.emax + 2, 40))))
    X = np.tile(x, (5, 1)) * np.array([[1.0], [-1.0], [1.0], [3.0], [0.5]])  # five rows: five counters each
    seed = 11
    key = int(np.random.default_rng(seed).integers(0, 2**63))
    big = math.inf if f.has_inf else math.nan
    got = fr.round_inputs(X, fmt, seed)
    for i in range(X.shape[0]):
        for j in range(X.shape[1]):
            v = float(X[i, j])
            if math.isnan(v) or math.isinf(v):
                want = v if (math.isnan(v) or f.has_inf) else math.nan
            else:
                e = math.frexp(v)[1] - 1 if v else f.emin
                q = Fraction(2) ** (max(e, f.emin) - f.precision + 1)
                lo = math.floor(Fraction(v) / q) * q
                r = lo + q if Fraction(splitmix_uniform(key, j, INPUT_T + i)) < (Fraction(v) - lo) / q else lo
                want = math.copysign(big, v) if abs(r) > Fraction(top) else math.copysign(float(r), v)
            assert same(np.float64(got[i, j]), np.float64(want)), (fmt, i, j, v, got[i, j], want)
    with jit.disabled():
        assert same(fr.round_inputs(X, fmt, seed), got)
    monkeypatch.setenv("FPREDUCE_THREADS", "3")
    assert same(fr.round_inputs(X, fmt, seed), got)
    F = X[:, np.isfinite(x) & (abs(x) < 3e38)].astype(np.float32)  # float32 data: read as they are, no float64 copy
    assert same(fr.round_inputs(F, fmt, seed), fr.round_inputs(F.astype(np.float64), fmt, seed))


def test_stochastic_inputs_are_unbiased_and_overflow_to_inf():
    x = np.full((20000, 1), 1 + 2.0**-10)
    r = fr.round_inputs(x, "bf16", 5)
    assert abs(np.mean(r > 1) - 0.125) < 0.01
    assert np.isinf(fr.round_inputs(np.array([1e6, -1e6]), "fp16", 1)).all()
    assert np.isnan(fr.round_inputs(np.array([1e6]), "fp8_e4m3", 1)).all()


def test_stochastic_inputs_feed_the_sums():
    X = np.random.default_rng(1).uniform(0, 1, (64, 2))
    P = fr.partial_sums(X, input="bf16", accumulate="fp32", input_rounding="stochastic", seed=4)
    assert same(P, fr.partial_sums(fr.round_inputs(X, "bf16", 4), input="bf16", accumulate="fp32"))


def backward_reference(y, col):
    s = sum((Fraction(float(v)) for v in col), Fraction(0))
    den = sum((abs(Fraction(float(v))) for v in col), Fraction(0))
    return float(abs(Fraction(float(y)) - s) / den) if den else (0.0 if y == s else np.inf)


@given(arrays("fp32", shapes(workers=st.integers(1, 10), elements=(1, 3))))
def test_backward_error_is_exact(X):
    y = fr.reduce(X, "sequential", accumulate="bf16")
    b = fr.backward_error(y, X)
    for j in range(X.shape[1]):
        if np.isfinite(y[j]):
            assert b[j] == backward_reference(y[j], X[:, j])
    assert fr.backward_error(np.float32(0.0), np.zeros(3))[0] == 0.0
    assert np.isinf(fr.backward_error(np.float32(1.0), np.zeros(3))[0])


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "tf32", "fp32", "fp8_e4m3"])
def test_overflow_inf_and_nan_follow_the_engine(fmt):
    f = get_format(fmt)
    big = f.max_finite
    X = np.array([[big, 1.0, -big, np.nan], [big, np.inf, big, 1.0], [-big, -np.inf, 2.0, 1.0], [1.0, 1.0, -0.0, 1.0]])
    X = fr.round_to(X, fmt)
    for mode in MODES:
        P = fr.partial_sums(X, input=fmt, accumulate=fmt, rounding=mode)
        for k in range(1, 5):
            assert same(P[k - 1], fr.reduce(X[:k], "sequential", input=fmt, accumulate=fmt, rounding=mode)), (mode, k)


def test_backward_error_sits_under_the_bound_while_it_is_informative():
    X = np.random.default_rng(9).uniform(0, 1, (2000, 4)).astype(np.float32)
    for fmt, n in [("bf16", 64), ("fp16", 2000)]:
        b = fr.backward_error(fr.reduce(X[:n], "sequential", input=fmt, accumulate=fmt), fr.round_to(X[:n], fmt))
        bound = fr.backward_bounds(n - 1, fmt)["deterministic"]
        assert bound is not None
        assert np.all(b <= bound)
    assert fr.backward_bounds(300, "bf16")["deterministic"] is None  # 300 u >= 1: says nothing


def test_wide_rounds_once_where_c_rounds_twice():
    x = np.array([1.0, 2.0**-24 + 2.0**-76])
    once = fr.partial_sums(x, input="fp64", accumulate="fp32", addends="wide")[-1, 0]
    assert float(once) == 1 + 2.0**-23
    assert float(np.float32(np.float64(np.float32(1.0)) + x[1])) == 1.0  # C: the double sum, then to float


def test_partial_sums_are_the_hardware_types_running_sums():
    """Independent implementations: numpy's float32 cumsum, numpy float16 and ml_dtypes bfloat16 additions."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.random.default_rng(12).standard_normal(3000) * np.exp2(np.random.default_rng(13).integers(-12, 12, 3000))
    f32 = x.astype(np.float32)
    assert same(fr.partial_sums(f32)[:, 0], np.cumsum(f32, dtype=np.float32))
    for dt, fmt in ((np.float16, "fp16"), (ml_dtypes.bfloat16, "bf16")):
        xs = x.astype(dt)
        acc, run = xs[0], [xs[0]]
        for v in xs[1:]:
            acc = dt(acc + v)  # the type's own addition (float32 inside, rounded once: innocuous)
            run.append(acc)
        want = np.array(run, dtype=dt).astype(np.float64)
        assert same(fr.partial_sums(xs, input=fmt, accumulate=fmt)[:, 0], want)


@given(problems(specials=False), st.sampled_from([*MODES, "stochastic"]), st.integers(0, 2**32))
def test_a_leaf_order_folds_the_rows_in_that_order(prob, mode, seed):
    fin, fa, X = prob
    order = np.random.default_rng(seed).permutation(X.shape[0])
    kw = dict(input=fin, accumulate=fa, rounding=mode, seed=seed)
    P = fr.partial_sums(X, order=order, **kw)
    assert same(P[-1], fr.reduce(X, fr.plans.sequential(X.shape[0], order), **kw))
    if mode != "stochastic":
        assert same(P, fr.partial_sums(X[order], **kw))
    with pytest.raises(InvalidArgument, match="permutation"):
        fr.partial_sums(X, order=np.zeros(X.shape[0] + 1, dtype=int))


def test_stagnation_finds_the_last_change():
    P = np.array([[1.0, 1.0, np.nan], [2.0, 1.0, np.nan], [2.0, 1.0, np.nan], [3.0, 1.0, np.nan]])
    n_last, value = fr.stagnation(P)
    assert n_last.tolist() == [4, 1, 1]
    assert same(value, P[-1])
    h = fr.partial_sums(1.0 / np.arange(1, 200), input="bf16", accumulate="bf16")
    assert fr.stagnation(h)[0].tolist() == [64]
