import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce.core import metrics as m
from fpreduce.core.formats import from_bits, get_format, to_bits
from fpreduce.core.rounding import round_to

BF16 = get_format("bf16")
_ALL = from_bits(np.arange(65536, dtype=np.uint64), "bf16").astype(np.float64)
_SORTED = np.unique(_ALL[~np.isnan(_ALL)])  # ±0 collapse into one value
_FINITE_OR_INF = _ALL[~np.isnan(_ALL)]

values = st.sampled_from(list(_FINITE_OR_INF))


def _brute(a: float, b: float) -> int:
    return abs(int(np.searchsorted(_SORTED, a)) - int(np.searchsorted(_SORTED, b)))


@given(values, values)
def test_ulp_steps_matches_brute_force(a, b):
    d = int(m.ulp_steps(a, b, "bf16"))
    assert d == _brute(a, b)
    assert d == int(m.ulp_steps(b, a, "bf16"))
    zero_pair = a == 0 and b == 0
    assert (d == 0) == (bool(m.bits_equal(a, b, "bf16")) or zero_pair)


def test_ulp_steps_vectorized_and_signed_zero():
    rng = np.random.default_rng(0)
    a = rng.choice(_FINITE_OR_INF, 2000)
    b = rng.choice(_FINITE_OR_INF, 2000)
    idx = np.abs(np.searchsorted(_SORTED, a) - np.searchsorted(_SORTED, b))
    np.testing.assert_array_equal(m.ulp_steps(a, b, "bf16"), idx)
    assert int(m.ulp_steps(0.0, -0.0, "bf16")) == 0
    assert not bool(m.bits_equal(0.0, -0.0, "bf16"))
    tiny = BF16.smallest_subnormal
    assert int(m.ulp_steps(tiny, -tiny, "bf16")) == 2
    assert int(m.ulp_steps(np.nan, np.nan, "bf16")) == 0
    assert int(m.ulp_steps(np.nan, 1.0, "bf16")) == -1


def test_ulp_steps_tf32_counts_steps():
    one = 1.0
    nxt = 1.0 + 2.0**-10
    assert int(m.ulp_steps(one, nxt, "tf32")) == 1


def test_ulp_gap_is_the_runners_distance_not_the_step_count():
    # bf16 1.0 and 1 - 2**-8 are neighbours across a binade boundary: one step, half an ulp of 1.0
    assert float(m.ulp_gap(1.0, 1 - 2.0**-8, "bf16")) == 0.5
    assert int(m.ulp_steps(1.0, 1 - 2.0**-8, "bf16")) == 1
    assert float(m.ulp_gap(1.0078125, 1.0, "bf16")) == 1.0  # within a binade: the step count
    tiny = BF16.smallest_subnormal
    a = [0.0, 0.0, tiny, np.nan, np.nan, np.inf, np.inf, -np.inf, 3.0, 2.0**127]
    b = [-0.0, 2.0, -tiny, np.nan, 1.0, np.inf, -np.inf, 1.0, 3.0, -(2.0**127)]
    want = [0.0, 2.0 / 2.0**-6, 2.0, 0.0, np.inf, 0.0, np.inf, np.inf, 0.0, 2.0**128 / 2.0**120]
    np.testing.assert_array_equal(m.ulp_gap(a, b, "bf16"), want)
    assert m.ulp_gap(np.ones((2, 3)), 1.0, "bf16").shape == (2, 3)
    assert float(m.ulp_gap(1e308, -1e308, "fp64")) == np.inf  # the difference overflows float64


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp32", "fp64"])
def test_ulp_gap_agrees_with_the_metrics_csv_row(fmt):
    from fpreduce.run.stepmetrics import ULP_EDGES, CompareStats

    rng = np.random.default_rng(5)
    raw = rng.standard_normal(3000) * np.exp2(rng.integers(-20, 20, 3000))
    y = fr.round_to(raw, fmt)
    yref = fr.round_to(raw * (1 + rng.standard_normal(3000) * 2.0**-7), fmt)
    yref[::5] = y[::5]
    y[:6] = [1.0, 0.0, np.nan, np.nan, np.inf, -0.0]
    yref[:6] = [1 - 2.0**-8 if fmt == "bf16" else 1.0, -0.0, np.nan, 2.0, 1.0, 0.0]
    stats = CompareStats()
    stats.add(y, yref, get_format(fmt))
    row = stats.row()
    gap = m.ulp_gap(y, yref, fmt)
    capped = np.where(np.isinf(gap), float(ULP_EDGES[-1]), gap)  # metrics.csv's largest distance
    assert row["ulp_max"] == capped.max()
    assert row["ulp_mean"] == pytest.approx(capped.mean(), rel=1e-12)


finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@given(st.lists(st.lists(finite, min_size=3, max_size=3), min_size=1, max_size=12))
def test_correctly_rounded_and_rel_error(rows):
    X = np.array(rows)
    ex = fr.exact_sum(X)
    r = ex.round("bf16")
    assert m.correctly_rounded(r, ex, "bf16").all()
    rel = m.rel_error(r, ex)
    normal = np.abs(ex.to_float64()) >= BF16.smallest_normal
    assert (rel[normal] <= BF16.unit_roundoff).all()  # u bounds rel error in the normal range only
    assert (m.abs_error(r, ex)[~normal] <= BF16.smallest_subnormal / 2).all()
    assert (m.ulp_error(r, ex, "bf16") <= 0.5).all()
    cb = m.correct_bits(r, ex)
    assert ((cb >= 0) & (cb <= 53)).all()
    assert (m.condition_number(X, ex) >= 1).all()


@given(
    st.integers(1, 24),
    st.integers(0, 2**32 - 1),
    st.sampled_from(["sequential", "pairwise", "random"]),
    st.floats(-6, 6),
)
def test_apriori_bound_holds(n, seed, kind, scale):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 8)) * 10.0**scale
    X[:, 0] = np.abs(X[:, 0])
    if kind == "sequential":
        plan = fr.plans.sequential(n, rng.permutation(n))
    elif kind == "pairwise":
        plan = fr.plans.pairwise(n)
    else:
        plan = fr.plans.pairwise(n).relabel(rng.permutation(n))
    Xi = round_to(X, "bf16").astype(np.float64)
    y = fr.reduce(X, plan, input="bf16", accumulate="bf16")
    ex = fr.exact_sum(Xi)
    err = m.abs_error(y, ex)
    bound = m.apriori_bound(Xi, plan, "bf16")
    assert (err <= bound * (1 + 1e-12)).all()
    pb, fail = m.probabilistic_bound(Xi, "bf16", lam=3.0)
    assert pb.shape == bound.shape
    assert 0.0 <= fail <= 1.0


def test_zero_sums_and_condition_number():
    X = np.array([[1.0, 0.0, -0.0], [-1.0, 0.0, -0.0]])
    ex = fr.exact_sum(X)
    np.testing.assert_array_equal(m.condition_number(X, ex), [np.inf, 1.0, 1.0])
    np.testing.assert_array_equal(m.rel_error([0.0, 1.0, -0.0], ex), [0.0, np.inf, 0.0])
    np.testing.assert_array_equal(m.correct_bits([0.0, 1.0, -0.0], ex), [53.0, 0.0, 53.0])
    np.testing.assert_array_equal(m.correctly_rounded([0.0, 0.0, 0.0], ex, "bf16"), [True, True, False])


def test_divergence():
    y = np.array([1.0, -2.0, 0.0, 3.5])
    d = m.divergence(y, y, "bf16")
    assert d == {"frac_differ": 0.0, "max_steps": 0.0, "mean_steps": 0.0, "hamming": 0.0, "rel_l2": 0.0}
    z = np.zeros(3)
    assert m.divergence(z, z, "bf16")["rel_l2"] == 0.0
    y2 = y.copy()
    y2[0] = 1.0078125
    d = m.divergence(y2, y, "bf16")
    assert d["frac_differ"] == 0.25
    assert d["max_steps"] == 1.0
    assert d["hamming"] == 0.25
    assert d["rel_l2"] > 0


def test_gamma_and_errors():
    u = 2.0**-8
    assert float(m.gamma(0, u)) == 0.0
    assert float(m.gamma(1, u)) == pytest.approx(u)
    with pytest.raises(fr.InvalidArgument):
        m.apriori_bound(np.ones((3, 2)), fr.plans.pairwise(4), "bf16")
    with pytest.raises(fr.InvalidArgument):
        m.probabilistic_bound(np.ones(3), "bf16", lam=0.0)
    b = to_bits(np.array([1.0]), "bf16")
    assert b.dtype == BF16.uint_dtype


@pytest.mark.parametrize("fmt", ["bf16", "tf32", "fp32"])
def test_float32_fast_path_equals_bit_pattern_path(fmt):
    rng = np.random.default_rng(3)
    raw = rng.standard_normal(4000) * np.exp2(rng.integers(-140, 120, 4000))
    raw[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 2.0**-149, -(2.0**-149), 3.0e38]
    a = fr.round_to(raw, fmt)
    b = fr.round_to(raw * (1 + rng.standard_normal(4000) * 2.0**-6), fmt)
    b[::7] = a[::7]
    b[1] = 0.0  # -0 vs +0
    fast_eq = m.bits_equal(a, b, fmt)  # float32 inputs: fast path
    slow_eq = m.bits_equal(a.astype(np.float64), b.astype(np.float64), fmt)
    assert np.array_equal(fast_eq, slow_eq)
    fast_d = m.ulp_steps(a, b, fmt)
    slow_d = m.ulp_steps(a.astype(np.float64), b.astype(np.float64), fmt)
    assert np.array_equal(fast_d, slow_d)
    assert fast_eq.any()
    assert not fast_eq.all()


# --- ulp_error: defined for every element ---------------------------------------------------------


def _ulp_at(a: np.ndarray, fmt: str) -> np.ndarray:
    """The quantum of |a|'s binade in fmt, from first principles (Fraction-free: exponents by frexp)."""
    f = get_format(fmt)
    _, e = np.frexp(np.abs(a))
    e = np.where(a == 0, f.emin, np.maximum(e.astype(np.int64) - 1, f.emin))
    return np.ldexp(1.0, (e - f.precision + 1).astype(np.int32))


@pytest.mark.parametrize("s", [0.0, -0.0, 2.0**-140, 1.0, -3.0, 2.0**100, 1e-30])
def test_ulp_error_every_bf16_value_against_one_exact_sum(s: float) -> None:
    """All 65,536 bf16 results against an exact sum: |y - s| / ulp(max(|s|, |y|)), by first principles;
    never above 2**(p + 1) for a finite result (the nb05 bug: s = 0 gave 2.4e38)."""
    ex = fr.exact_sum(np.full((1, _ALL.size), s))
    got = m.ulp_error(_ALL, ex, "bf16")
    fin = np.isfinite(_ALL)
    want = np.abs(_ALL[fin] - s) / _ulp_at(np.maximum(np.abs(_ALL[fin]), abs(s)), "bf16")
    assert np.array_equal(got[fin], want)
    assert got[fin].max() < 2.0 ** (BF16.precision + 1)
    assert np.isnan(got[np.isnan(_ALL)]).all()
    assert (got[np.isinf(_ALL)] == np.inf).all()
    if s == 0:
        assert (got[_ALL == 0] == 0).all()  # 0 against 0, either sign
        assert got[fin].max() < 2.0**BF16.precision  # |y| / ulp(y) < 2**p


def test_ulp_error_special_values() -> None:
    X = np.array([[np.inf, np.inf, np.nan, 1.0, 0.0, -0.0], [1.0, -np.inf, 0.0, -1.0, 0.0, -0.0]])
    ex = fr.exact_sum(X)
    got = m.ulp_error(np.array([np.inf, np.nan, 1.0, np.inf, -0.0, 0.0]), ex, "fp32")
    assert got[0] == 0  # the same infinity
    assert np.isnan(got[1])
    assert np.isnan(got[2])
    assert got[3] == np.inf  # an infinite result for a finite sum
    assert got[4] == got[5] == 0


@given(st.lists(st.lists(finite, min_size=4, max_size=4), min_size=2, max_size=40), st.sampled_from(["bf16", "fp16"]))
def test_ulp_error_of_any_sum_order_is_bounded(rows, fmt):
    """Whatever the order and however the sum cancels: at most 2**(p + 1) ulps, 0.5 when correctly rounded."""
    X = round_to(np.array(rows), fmt).astype(np.float64)
    ex = fr.exact_sum(X)
    for plan in ("sequential", "pairwise"):
        y = fr.reduce(X, plan, input=fmt, accumulate=fmt)
        e = m.ulp_error(y, ex, fmt)
        ok = np.isfinite(y)
        assert (e[ok] < 2.0 ** (get_format(fmt).precision + 1)).all()
    assert (m.ulp_error(ex.round(fmt), ex, fmt)[np.isfinite(ex.round(fmt))] <= 0.5).all()
