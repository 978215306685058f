from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fpreduce as fr
from fpreduce.core.algorithms import BINNED_MAX_ROWS, binned, compensated, compensated_reference, exact
from fpreduce.core.exact import round_fraction

FORMATS = ["fp64", "fp32", "bf16", "fp16", "fp8_e5m2"]
MODES = ["nearest_even", "toward_zero", "up", "down"]
KINDS = ["kahan", "neumaier"]


def same(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return bool(np.all((np.isnan(a) & np.isnan(b)) | (a.view(np.uint64) == b.view(np.uint64))))


def values(f, *, near_one=True):
    """Representable values of f: generic, near 1 (ties, swamping), extremes, zeros."""
    p = f.precision

    def build(mant, e, sign):
        v = sign * mant * 2.0**e
        return sign * f.max_finite if abs(v) > f.max_finite else float(fr.round_to([v], f)[0])

    full = st.builds(
        build, st.integers(1, 2**p - 1), st.integers(f.emin - p + 1, f.emax - p + 1), st.sampled_from([1.0, -1.0])
    )
    near = st.builds(
        build, st.integers(2 ** (p - 1), 2**p - 1), st.integers(-2 * p - 3, 2 - p), st.sampled_from([1.0, -1.0])
    )
    specials = st.sampled_from(
        [
            0.0,
            -0.0,
            1.0,
            -1.0,
            2.0**-p,
            3 * 2.0**-p,
            1 + 2.0 ** (1 - p),
            f.smallest_subnormal,
            -f.smallest_subnormal,
            f.smallest_normal,
            f.max_finite,
            -f.max_finite,
            f.max_finite / 2,
        ]
    )
    return st.one_of(full, near, specials) if near_one else st.one_of(full, specials)


@st.composite
def columns(draw, f, max_n=8, max_m=4):
    """(n, m) arrays whose columns mix a small pool, its negations (cancellation) and fresh values."""
    n = draw(st.integers(1, max_n))
    m = draw(st.integers(1, max_m))
    pool = draw(st.lists(values(f), min_size=1, max_size=4))
    elems = st.one_of(st.sampled_from(pool + [-v for v in pool]), values(f))
    return draw(hnp.arrays(np.float64, (n, m), elements=elems))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", [*FORMATS, "tf32"])
@settings(max_examples=max(5, settings.default.max_examples // 3))  # 70 cases: 1050 Fraction folds in CI
@given(data=st.data())
def test_compensated_fast_equals_fraction_reference(fmt, mode, kind, data):
    f = fr.get_format(fmt)
    Y = data.draw(columns(f))
    fast = compensated(Y, f, mode, kind=kind)
    ref = compensated_reference(Y, f, mode, kind=kind)
    assert fast.dtype == f.value_dtype
    assert same(fast, ref), (Y, fast, ref)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fmt", ["fp32", "bf16", "fp16"])
def test_compensated_fast_equals_reference_across_blocks_and_specials(fmt, kind):
    rng = np.random.default_rng(3)
    Y = fr.round_to(rng.standard_normal((5, 20_000)) * 2.0 ** rng.integers(-12, 12, (5, 20_000)), fmt)
    Y[2, :4] = [np.nan, np.inf, -0.0, np.inf]
    Y[3, 3] = -np.inf
    Y[:, 4] = -0.0
    fast = compensated(Y, fmt, kind=kind)
    cols = np.r_[0:6, 16_380:16_390, 19_990:20_000]
    ref = compensated_reference(Y[:, cols], fmt, kind=kind)
    assert same(fast[cols], ref)
    assert np.isnan(fast[1])  # Inf then a later row: c = Inf - Inf = NaN, as a kernel does


def test_kahan_beats_plain_bf16_on_swamping():
    y = np.array([1.0] + [2.0**-9] * 1000)[:, None]
    ex = 1 + 1000 * 2.0**-9  # 2.953125, representable in bf16
    plain = fr.reduce(y, "sequential", input="bf16", accumulate="bf16")
    assert plain[0] == 1.0  # every 2**-9 is a quarter ulp of the running sum: swamped
    kahan = compensated(y, "bf16", kind="kahan")
    assert abs(kahan[0] - ex) <= 2 * 2.0**-6  # within two bf16 ulps of the exact sum
    assert abs(kahan[0] - ex) * 50 < abs(plain[0] - ex)
    # Neumaier's c is itself a plain bf16 running sum: it swamps at 0.5 (2**-9 = half an ulp)
    neumaier = compensated(y, "bf16", kind="neumaier")
    assert neumaier[0] == 1.5


def test_neumaier_survives_large_cancelling_term_kahan_does_not():
    y = np.array([1.0, 2.0**100, 1.0, -(2.0**100)])
    assert compensated(y, "fp64", kind="neumaier")[0] == 2.0
    assert compensated(y, "fp64", kind="kahan")[0] == 0.0


@pytest.mark.parametrize("fmt", ["fp64", "fp32", "bf16"])
@given(data=st.data())
def test_kahan_error_within_first_order_bound(fmt, data):
    f = fr.get_format(fmt)
    n = data.draw(st.integers(1, 40))
    Y = data.draw(
        hnp.arrays(
            np.float64,
            (n, 3),
            elements=st.builds(
                lambda m, e, s: s * m * 2.0**e,
                st.integers(1, 2**f.precision - 1),
                st.integers(-f.precision - 20, 20 - f.precision),
                st.sampled_from([1.0, -1.0]),
            ),
        )
    )
    y = compensated(Y, f, kind="kahan").astype(np.float64)
    u = f.unit_roundoff
    for j in range(Y.shape[1]):
        S = sum(Fraction(v) for v in Y[:, j])
        bound = (2 * u + 4 * n * u * u) * sum(abs(Fraction(v)) for v in Y[:, j])
        assert abs(Fraction(y[j]) - S) <= bound


def test_compensated_rejects_bad_input():
    with pytest.raises(fr.InvalidArgument, match="not representable in bf16"):
        compensated(np.array([1.0, 1 + 2.0**-10]), "bf16")
    with pytest.raises(fr.InvalidArgument, match="not representable in bf16"):
        compensated(np.array([1.0, 1 + 2.0**-40]), "bf16")  # not even float32
    with pytest.raises(fr.InvalidArgument, match="kind"):
        compensated(np.ones(3), "fp32", kind="kahn")
    with pytest.raises(fr.InvalidArgument, match="rng"):
        compensated(np.ones(3), "bf16", "stochastic")
    with pytest.raises(fr.InvalidArgument, match="workers"):
        compensated(np.ones((0, 3)), "fp32")


def test_compensated_stochastic_is_seeded():
    rng = np.random.default_rng(0)
    Y = fr.round_to(rng.standard_normal((16, 1000)), "bf16")
    a = compensated(Y, "bf16", "stochastic", kind="kahan", rng=7)
    assert same(a, compensated(Y, "bf16", "stochastic", kind="kahan", rng=7))
    assert not same(a, compensated(Y, "bf16", "stochastic", kind="kahan", rng=8))


def _ulp(v, f):
    return float(fr.ulp(v, f))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["fp64", "fp32", "bf16", "fp16"])
@settings(max_examples=max(5, settings.default.max_examples // 2))  # 20 cases: 440 examples in CI
@given(data=st.data())
def test_binned_is_order_independent_and_within_bound(fmt, mode, data):
    src = fr.get_format(data.draw(st.sampled_from(["fp32", "bf16", "fp64"])))
    X = data.draw(columns(src, max_n=12))
    assume(np.abs(X).max() < 2.0**960)  # binned's documented float64 limit
    perm = data.draw(st.permutations(range(X.shape[0])))
    f = fr.get_format(fmt)
    y = binned(X, f, mode)
    assert same(y, binned(X[list(perm)], f, mode))
    ex = fr.exact_sum(X)
    n = X.shape[0]
    for j in range(X.shape[1]):
        col = X[:, j]
        S = ex.fraction(j)
        if abs(S) >= f.max_finite:
            continue  # overflow: ±Inf or max_finite by mode, checked in test_binned_specials
        tail = n * Fraction(2) ** -78 * Fraction(float(np.abs(col).max()))
        u = Fraction(f.unit_roundoff)
        bound = 2 * u * abs(S) + (1 + 2 * u) * tail + Fraction(f.smallest_subnormal)
        assert abs(Fraction(float(y[j])) - S) <= bound


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["fp64", "fp32", "bf16", "fp16", "fp8_e5m2"])
@settings(max_examples=max(5, settings.default.max_examples // 2))  # 20 cases: 440 examples in CI
@given(data=st.data())
def test_binned_equals_exact_when_the_window_covers_the_data(fmt, mode, data):
    # fp32 values within 2**-54 of the column max: every bit lies in the 78-bit window
    src = fr.get_format("fp32")
    n = data.draw(st.integers(1, 12))
    X = data.draw(
        hnp.arrays(
            np.float64,
            (n, 3),
            elements=st.one_of(
                st.sampled_from([0.0, -0.0]),
                st.builds(
                    lambda m, e, s: s * m * 2.0**e,
                    st.integers(1, 2**src.precision - 1),
                    st.integers(-40, 6),
                    st.sampled_from([1.0, -1.0]),
                ),
            ),
        )
    )
    assert same(binned(X, fmt, mode), exact(X, fmt, mode))


@pytest.mark.parametrize(
    ("col", "mode", "want"),
    [
        ([1.0, 2.0**-60], "up", 1 + 2.0**-23),  # float64 sum is 1.0: rounding it up would give 1.0
        ([1.0, -(2.0**-60)], "down", 1 - 2.0**-24),
        ([1.0, 2.0**-24, 2.0**-60], "nearest_even", 1 + 2.0**-23),  # a float64 tie, not a real one
        ([1.0, 2.0**-24, -(2.0**-60)], "nearest_even", 1.0),
        ([-1.0, -(2.0**-60)], "toward_zero", -1.0),
    ],
)
def test_binned_rounds_once_from_the_exact_kept_sum(col, mode, want):
    X = np.array(col, dtype=np.float32)[:, None]
    assert binned(X, "fp32", mode)[0] == want
    assert exact(X, "fp32", mode)[0] == want


def test_binned_drops_only_below_the_window():
    X = np.array([[1.0], [2.0**-100], [-1.0]])
    y = binned(X, "fp64")
    assert y[0] == 0.0  # 2**-100 lies below 2**-78 * max|x|: dropped, within the bound
    assert exact(X, "fp64")[0] == 2.0**-100


def test_binned_permutations_of_many_rows_give_identical_bits():
    rng = np.random.default_rng(1)
    X = (rng.standard_normal((64, 4000)) * np.exp(rng.uniform(-20, 20, (64, 4000)))).astype(np.float32)
    y = binned(X, "bf16")
    for _ in range(5):
        assert same(y, binned(X[rng.permutation(64)], "bf16"))
    ex = exact(X, "bf16")
    assert np.mean(same_each(y, ex)) > 0.999  # the window covers almost every column


def same_each(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return (np.isnan(a) & np.isnan(b)) | (a.view(np.uint64) == b.view(np.uint64))


@pytest.mark.parametrize("fmt", ["fp32", "bf16", "fp8_e4m3"])
def test_binned_specials_follow_ieee(fmt):
    inf, nan = np.inf, np.nan
    X = np.array(
        [
            [1.0, inf, inf, nan, -0.0, 1.0, 3.0e38],
            [2.0, -inf, 1.0, 1.0, -0.0, -1.0, 3.0e38],
            [3.0, 1.0, inf, 2.0, -0.0, 0.0, 0.0],
        ]
    )
    y = binned(X, fmt).astype(np.float64)
    has_inf = fr.get_format(fmt).has_inf
    assert np.isnan(y[[1, 3]]).all()
    assert (y[2] == inf) if has_inf else np.isnan(y[2])
    assert np.signbit(y[4:6]).tolist() == [True, False]
    assert (y[4:6] == 0).all()
    assert same(y, exact(X, fmt))
    assert same(binned(X, fmt, "toward_zero"), exact(X, fmt, "toward_zero"))  # overflow: max


def test_binned_limits_are_enforced():
    big = np.broadcast_to(np.float32(1.0), (BINNED_MAX_ROWS + 1, 2))  # no memory used
    with pytest.raises(fr.InvalidArgument, match="at most 2\\*\\*26"):
        binned(big, "fp32")
    with pytest.raises(fr.InvalidArgument, match="2\\*\\*960"):
        binned(np.array([2.0**1000, 1.0]), "fp64")
    with pytest.raises(fr.InvalidArgument, match="stochastic"):
        binned(np.ones(3), "fp64", "stochastic", rng=1)
    with pytest.raises(fr.InvalidArgument, match="float array"):
        binned(np.ones(3, dtype=np.int64), "fp32")


def test_binned_stochastic_is_seeded_and_brackets_the_exact_sum():
    X = np.array([[1.0] * 200, [2.0**-10] * 200])
    a = binned(X, "bf16", "stochastic", rng=5)
    assert same(a, binned(X[::-1], "bf16", "stochastic", rng=5))
    assert set(a.tolist()) == {1.0, 1.0 + 2.0**-7}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["fp64", "fp32", "bf16", "fp16", "fp8_e5m2"])
@settings(max_examples=max(5, settings.default.max_examples // 3))  # 25 cases: 375 Fraction sums in CI
@given(data=st.data())
def test_exact_is_the_fraction_sum_rounded_once(fmt, mode, data):
    f = fr.get_format(fmt)
    X = data.draw(columns(fr.get_format("fp32")))
    y = exact(X, f, mode)
    for j in range(X.shape[1]):
        S = sum((Fraction(float(v)) for v in X[:, j]), Fraction(0))
        want = round_fraction(S, f, mode) if S else (-0.0 if np.all(np.signbit(X[:, j])) else 0.0)
        assert same(y[j], want)
    perm = data.draw(st.permutations(range(X.shape[0])))
    assert same(y, exact(X[list(perm)], f, mode))
