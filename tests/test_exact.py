"""Tests for fpreduce.core.exact: exact sums and once-rounded results."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpreduce.base.errors import InvalidArgument
from fpreduce.core.exact import exact_sum, exact_sum_fraction, exact_sum_mpmath, round_fraction
from fpreduce.core.formats import get_format

SETTINGS = settings(max_examples=settings.default.max_examples * 10 // 3, deadline=None)  # ci: 200, dev: 66
MODES = ("nearest_even", "toward_zero", "up", "down")


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float64)).view(np.uint64)


def frac_to_float(x: Fraction) -> float:
    """Correctly rounded (Python's int division rounds once); ±inf beyond range."""
    try:
        return float(x)
    except OverflowError:
        return float("inf") if x > 0 else float("-inf")


def ref_round(x: Fraction, fmt: str, mode: str) -> float:
    """Slow Fraction reference: round x once onto fmt (unbounded exponent, then overflow)."""
    f = get_format(fmt)
    if x == 0:
        return 0.0
    neg = x < 0
    a = -x
    if not neg:
        a = x
    e = 0
    while a >= Fraction(2) ** (e + 1):
        e += 1
    while a < Fraction(2) ** e:
        e -= 1
    q = Fraction(2) ** (max(e, f.emin) - f.precision + 1)
    t = a / q
    lo = t.numerator // t.denominator
    r = t - lo
    if r == 0:
        m = lo
    elif mode == "nearest_even":
        m = lo + (r > Fraction(1, 2) or (r == Fraction(1, 2) and lo % 2 == 1))
    elif mode == "toward_zero":
        m = lo
    elif mode == "up":
        m = lo + (not neg)
    else:
        m = lo + neg
    val = m * q
    if val > Fraction(f.max_finite):
        inf = float("inf") if f.has_inf else float("nan")
        away = {"nearest_even": True, "toward_zero": False, "up": not neg, "down": neg}[mode]
        res = inf if away else f.max_finite
    else:
        res = float(val)
    return -res if neg else res


# adversarial float64 columns: mixed magnitudes, cancellation, subnormals, ties
def _adv_values():
    mags = st.integers(-1074, 1023)
    sig = st.integers(1, 2**53 - 1)
    return st.one_of(
        st.floats(allow_nan=False, allow_infinity=False, width=64),
        st.builds(
            lambda m, e, s: float(s * m * Fraction(2) ** e) if e >= -1074 + 0 else 0.0,
            st.integers(1, 2**20),
            st.integers(-1074, 900),
            st.sampled_from([-1, 1]),
        ),
        st.builds(lambda m, e: float(Fraction(m, 2**52) * Fraction(2) ** e), sig, mags.filter(lambda e: e <= 970)),
        st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 1.0, -1.0, 2.0**-53, 1e308, -1e308]),
    )


@st.composite
def adversarial_columns(draw):
    base = draw(st.lists(_adv_values(), min_size=1, max_size=30))
    if draw(st.booleans()):  # heavy cancellation: append the negations of some terms
        base += [-v for v in draw(st.lists(st.sampled_from(base), max_size=30))]
    if draw(st.booleans()):  # a tie of the final rounding: 1 + 2**-53 style
        k = draw(st.integers(-1000, 900))
        base += [2.0**k, 2.0 ** (k - 53)]
    return np.array(base, dtype=np.float64)


@st.composite
def float32_columns(draw):
    vals = draw(
        st.lists(
            st.one_of(
                st.builds(
                    lambda s, m, e: s * m * 2.0**e,
                    st.sampled_from([-1.0, 1.0]),
                    st.integers(1, 2**24 - 1),
                    st.integers(-149, 104),
                ),
                st.floats(width=32, allow_nan=False, allow_infinity=False),
            ),
            min_size=1,
            max_size=40,
        )
    )
    a = np.array(vals, dtype=np.float64)
    a = a[np.abs(a) <= float(np.finfo(np.float32).max)]
    if a.size == 0:
        a = np.array([1.0])
    return a.astype(np.float32)


#: every input dtype the oracle accepts: numpy's and ml_dtypes' (bfloat16 and every float8)
DTYPES = {
    "float16": np.dtype(np.float16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    **{
        n: np.dtype(getattr(ml_dtypes, n))
        for n in (
            "bfloat16",
            "float8_e4m3fn",
            "float8_e5m2",
            "float8_e4m3fnuz",
            "float8_e5m2fnuz",
            "float8_e4m3b11fnuz",
            "float8_e4m3",
            "float8_e3m4",
            "float8_e8m0fnu",
        )
        if hasattr(ml_dtypes, n)
    },
}


@st.composite
def narrow_columns(draw, dt: np.dtype) -> np.ndarray:
    """A column of ``dt`` values (any finite code point, powers of two, ties, cancellation)."""
    info = ml_dtypes.finfo(dt)
    p = int(info.nmant) + 1
    ubits = np.dtype(f"u{dt.itemsize}")
    codes = st.integers(0, 2 ** (8 * dt.itemsize) - 1).map(lambda c: float(np.array(c, ubits).view(dt)))
    pow2 = st.integers(int(info.minexp) - int(info.nmant), int(info.maxexp) - 1).map(lambda k: 2.0**k)
    vals = draw(st.lists(st.one_of(codes, pow2, pow2.map(lambda v: -v)), min_size=1, max_size=24))
    if draw(st.booleans()):  # a tie of the final rounding onto the dtype's own grid: 2**k + 2**(k - p)
        k = draw(st.integers(int(info.minexp), int(info.maxexp) - 1))
        vals += [2.0**k, 2.0 ** (k - p)]
    if draw(st.booleans()):  # a big term, a small one far below it, the big one cancelled: 2**a + m*2**b - 2**a
        a, b = draw(
            st.lists(st.integers(int(info.minexp) - int(info.nmant), int(info.maxexp) - 1), min_size=2, max_size=2)
        )
        vals += [2.0**a, draw(st.integers(1, 2**p - 1)) * 2.0 ** (b - p + 1), -(2.0**a)]
    if draw(st.booleans()):  # heavy cancellation
        vals += [-v for v in draw(st.lists(st.sampled_from(vals), max_size=24))]
    with np.errstate(all="ignore"):
        a = np.array(vals, dtype=np.float64).astype(dt)
        keep = np.isfinite(a.astype(np.float64)) & (a.astype(np.float64) == np.array(vals))
    a = a[keep]
    return a if a.size else np.array([info.tiny], dtype=dt)


def typed_columns() -> st.SearchStrategy[np.ndarray]:
    """A column of one of :data:`DTYPES` (the dtype is a dimension hypothesis explores and shrinks)."""

    def of(name: str) -> st.SearchStrategy[np.ndarray]:
        if name == "float64":
            return adversarial_columns()
        if name == "float32":
            return float32_columns()
        return narrow_columns(DTYPES[name])

    return st.sampled_from(sorted(DTYPES)).flatmap(of)


def fraction_sum(col: np.ndarray) -> Fraction:
    """The exact sum, term by term in Fractions (each value widened exactly through float64)."""
    return sum((Fraction(float(v)) for v in col.astype(np.float64)), Fraction(0))


@SETTINGS
@given(typed_columns())
def test_every_dtype_matches_fraction_and_mpmath(col):
    X = np.stack([col, col[::-1]], axis=1)
    es = exact_sum(X)
    want = fraction_sum(col)
    assert es.fraction(0) == es.fraction(1) == want
    got = es.to_float64()
    assert got.dtype == np.float64
    if want != 0:
        assert bits(got).tolist() == [bits(np.float64(frac_to_float(want)))[()]] * 2
    else:
        assert np.all(got == 0)
    assert np.array_equal(bits(got), bits(exact_sum_mpmath(X)))
    if np.isfinite(got[0]):
        assert float(es.lo[0]) == frac_to_float(want - Fraction(float(got[0])))


@SETTINGS
@given(float32_columns())
def test_float32_mixed_magnitudes(col):
    got = exact_sum(col.reshape(-1, 1)).to_float64()
    want = frac_to_float(exact_sum_fraction(col))
    if want != 0:
        assert bits(got)[0] == bits(np.float64(want))
    assert bits(got)[0] == bits(exact_sum_mpmath(col.reshape(-1, 1)))[0]


@SETTINGS
@given(typed_columns(), st.randoms(use_true_random=False))
def test_order_invariance(col, rnd):
    perm = list(range(col.size))
    rnd.shuffle(perm)
    a = exact_sum(col).to_float64()
    b = exact_sum(col[perm]).to_float64()
    assert bits(a) == bits(b)


@SETTINGS
@given(
    typed_columns(),
    st.sampled_from(["bf16", "fp16", "fp32", "tf32", "fp8_e4m3", "fp8_e5m2", "fp64"]),
    st.sampled_from(MODES),
)
def test_round_matches_fraction_reference(col, fmt, mode):
    es = exact_sum(col)
    got = float(es.round(fmt, mode))
    want = ref_round(fraction_sum(col), fmt, mode)
    if np.isnan(want):
        assert np.isnan(got)
    else:
        assert got == want
        if want != 0:
            assert np.signbit(got) == np.signbit(want)


@SETTINGS
@given(typed_columns(), st.floats(allow_nan=False, allow_infinity=False))
def test_error_of(col, y):
    es = exact_sum(col)
    got = float(es.error_of(y))
    exact = fraction_sum(col)
    assert got == frac_to_float(Fraction(y) - exact)
    hi = float(es.to_float64())
    if np.isfinite(hi):
        want = frac_to_float(Fraction(hi) - exact)
        assert float(es.error_of(hi)) == want
        assert float(es.lo) == -want


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_f1_cancellation_and_sticky_bits_in_every_dtype(name):
    """Issue 13 F1: bfloat16 widened to float64 kept float32's significand width, and the
    exactness proof subtracted float64's trailing zeros: 2**60 + 1 - 2**60 gave 0."""
    dt = DTYPES[name]
    info = np.finfo(dt) if dt.kind == "f" else ml_dtypes.finfo(dt)
    big = 2.0 ** min(60, int(info.maxexp) - 1)
    tiny = 2.0 ** max(-60, int(info.minexp) - int(info.nmant))
    if name != "float8_e8m0fnu":  # e8m0 has no negative values
        assert exact_sum(np.array([big, 1.0, -big], dtype=dt)).to_float64().item() == 1.0
    es = exact_sum(np.array([1.0, tiny], dtype=dt))
    exact = 1 + Fraction(tiny)
    for fmt in ("bf16", "fp16", "fp32", "tf32", "fp8_e4m3", "fp8_e5m2", "fp64"):
        for mode in MODES:
            assert es.round(fmt, mode).item() == ref_round(exact, fmt, mode), (fmt, mode)
    assert es.error_of(1.0).item() == -tiny


def test_f1_the_issues_bfloat16_reproducer():
    bf16 = ml_dtypes.bfloat16
    assert exact_sum(np.array([2.0**60, 1.0, -(2.0**60)], dtype=bf16)).to_float64().item() == 1.0
    es = exact_sum(np.array([1.0, 2.0**-60], dtype=bf16))
    assert es.round("bf16", "up").item() == 1.0078125
    assert es.error_of(1.0).item() == -(2.0**-60)


def test_hi_lo_represent_exact():
    X = np.array([[1.0, 3.0], [2.0**-60, -(2.0**-70)], [2.0**-200, 1e-300]])
    es = exact_sum(X)
    for j in range(2):
        exact = exact_sum_fraction(X[:, j])
        assert float(es.hi[j]) == float(exact)
        assert float(es.lo[j]) == float(exact - Fraction(float(es.hi[j])))
        assert es.fraction(j) == exact


def test_regression_intermediate_overflow():
    X = np.array([1e308, 1e308, -1e308])
    assert exact_sum(X).to_float64().item() == 1e308
    assert exact_sum_mpmath(X).item() == 1e308
    assert exact_sum(np.array([1e308, 1e308])).to_float64().item() == np.inf
    rz = exact_sum(np.array([-1e308, -1e308])).round("fp64", "toward_zero").item()
    assert rz == -1.7976931348623157e308


def test_signed_zeros():
    X = np.array([[-0.0, -0.0, 0.0, 1.0], [-0.0, 0.0, -0.0, -1.0]])
    got = exact_sum(X).to_float64()
    assert list(np.signbit(got)) == [True, False, False, False]
    assert list(np.signbit(exact_sum_mpmath(X))) == [True, False, False, False]
    r = exact_sum(X).round("bf16", "down")
    assert list(np.signbit(r)) == [True, False, False, False]
    # negative value that underflows to zero keeps its sign
    assert np.signbit(exact_sum(np.array([-(2.0**-140)])).round("bf16", "toward_zero"))


def test_inf_nan_columns():
    inf, nan = np.inf, np.nan
    X = np.array([[inf, -inf, nan, 1.0, inf], [1.0, -inf, 1.0, 2.0, -inf], [2.0, 3.0, 1.0, 3.0, 0]])
    es = exact_sum(X)
    got = es.to_float64()
    assert got[0] == inf
    assert got[1] == -inf
    assert np.isnan(got[2])
    assert got[3] == 6.0
    assert np.isnan(got[4])
    assert list(es.nonfinite) == [True, True, True, False, True]
    ref = exact_sum_mpmath(X)
    assert np.array_equal(ref, got, equal_nan=True)
    assert np.isnan(es.round("fp8_e4m3")[0])
    assert es.round("bf16")[1] == -inf


def test_overflow_modes():
    es = exact_sum(np.array([[1e6, -1e6], [1e6, -1e6]]))
    assert list(es.round("fp16")) == [np.inf, -np.inf]
    assert list(es.round("fp16", "toward_zero")) == [65504.0, -65504.0]
    assert list(es.round("fp16", "up")) == [np.inf, -65504.0]
    assert list(es.round("fp16", "down")) == [65504.0, -np.inf]
    assert np.isnan(es.round("fp8_e4m3")).all()
    e8 = exact_sum(np.array([464.0, 465.0]).reshape(1, 2))
    assert e8.round("fp8_e4m3")[0] == 448.0
    assert np.isnan(e8.round("fp8_e4m3")[1])
    assert es.round("fp64").dtype == np.float64
    assert es.round("tf32").dtype == np.float32


def test_large_n():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((100_000, 8)) * 2.0 ** rng.integers(-60, 60, (100_000, 8))
    X = X.astype(np.float32)
    es = exact_sum(X)
    want = np.array([frac_to_float(exact_sum_fraction(X[:, j])) for j in range(2)])
    assert np.array_equal(bits(es.to_float64()[:2]), bits(want))
    Y = rng.standard_normal((100_000, 3)) * 1e200
    Y[0] = 1e308
    Y[1] = -1e308
    assert np.array_equal(bits(exact_sum(Y).to_float64()), bits(exact_sum_mpmath(Y)))


def test_axis_and_shapes():
    X = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    assert np.array_equal(exact_sum(X, axis=1).to_float64(), X.sum(axis=1))
    assert np.array_equal(exact_sum(X, axis=-1).to_float64(), X.sum(axis=-1))
    assert exact_sum(np.zeros((0, 3))).to_float64().tolist() == [0.0, 0.0, 0.0]
    assert exact_sum(np.array([1.0, 2.0], dtype=np.float16)).to_float64().item() == 3.0


@pytest.mark.parametrize(
    ("arg", "axis", "match"),
    [
        (np.arange(3), 0, "float array"),
        (np.float64(1.0), 0, "1-D"),
        (np.ones((2, 2)), 2, "axis"),
    ],
)
def test_invalid_arguments(arg, axis, match):
    with pytest.raises(InvalidArgument, match=match):
        exact_sum(arg, axis=axis)


def test_invalid_mode():
    es = exact_sum(np.ones(3))
    with pytest.raises(InvalidArgument, match="rounding mode"):
        es.round("bf16", "nearest")
    with pytest.raises(InvalidArgument, match="rng"):
        es.round("bf16", "stochastic")
    r = es.round("bf16", "stochastic", rng=np.random.default_rng(0))
    assert r.item() == 3.0


def test_ties_and_sticky_bits():
    X = np.array([[1.0, 1.0, 1.0 + 2.0**-7], [2.0**-8, 2.0**-8, 2.0**-8], [0.0, 2.0**-300, 0.0]])
    es = exact_sum(X)
    assert es.round("bf16").tolist() == [1.0, 1.0 + 2.0**-7, 1.0 + 2.0**-6]
    assert es.round("bf16", "toward_zero").tolist() == [1.0, 1.0, 1.0 + 2.0**-7]
    assert es.to_float64().tolist() == [1.0 + 2.0**-8, 1.0 + 2.0**-8, 1.0 + 2.0**-7 + 2.0**-8]
    assert es.lo.tolist() == [0.0, 2.0**-300, 0.0]
    # float64 tie: 1 + 2**-53 rounds to 1, plus a tiny term it rounds up
    Y = np.array([[1.0, 1.0], [2.0**-53, 2.0**-53], [0.0, 5e-324]])
    assert exact_sum(Y).to_float64().tolist() == [1.0, 1.0 + 2.0**-52]


@SETTINGS
@given(
    st.lists(st.tuples(st.integers(-40, 40), st.integers(0, 30)), min_size=1, max_size=12),
    st.integers(1, 9),
    st.randoms(use_true_random=False),
)
def test_float64_fast_path_and_general_path_mix_exactly(cols, n, rnd):
    # columns of float32 values with a chosen exponent spread: narrow ones take the proven-exact
    # float64 path, wide ones the general path; every column must equal the Fraction sum
    X = np.empty((n, len(cols)), dtype=np.float32)
    for j, (e0, spread) in enumerate(cols):
        for i in range(n):
            X[i, j] = np.float32(rnd.choice([-1, 1]) * (1 + rnd.random()) * 2.0 ** (e0 + rnd.randint(0, spread)))
    got = exact_sum(X)
    y = X.sum(axis=0, dtype=np.float32)  # some inexact result to measure
    err = got.error_of(y)
    for j in range(len(cols)):
        want = exact_sum_fraction(X[:, j])
        assert got.fraction(j) == want
        assert got.to_float64()[j] == frac_to_float(want)
        assert err[j] == frac_to_float(Fraction(float(y[j])) - want)
    assert np.array_equal(
        got.round("bf16"), np.array([fr_round(exact_sum_fraction(X[:, j])) for j in range(len(cols))], dtype=np.float32)
    )


def fr_round(v):
    return round_fraction(v, get_format("bf16"), "nearest_even") if v != 0 else 0.0


def test_fast_path_refuses_columns_float64_would_round():
    X = np.array([[2.0**30, 2.0**30], [2.0**-20, 1.0], [-(2.0**30), -(2.0**30)]], dtype=np.float32)
    got = exact_sum(X)
    assert got.to_float64().tolist() == [2.0**-20, 1.0]
    Y = np.array([[2.0**53], [1.0], [1.0]])  # float64: naive left-to-right gives 2^53
    assert exact_sum(Y).fraction(0) == 2**53 + 2


def test_float64_proof_uses_the_columns_coarser_grid_and_rules_out_overflow():
    from fpreduce.core.exact import _float64_exact_columns

    # bf16 values (8 significant bits) spread over 40 binades: the float32 bound (24 bits)
    # cannot prove the float64 sum exact, the shared trailing zeros can
    col = np.array([1.5 * 2.0**20, -1.25 * 2.0**-20, 1.75 * 2.0**-19, 1.0], dtype=np.float32)
    X = np.stack([col, col * np.float32(3)], axis=1)  # 3 * 1.75 = 5.25: still <= 8 bits
    ok = _float64_exact_columns(X, 24)
    assert ok.all()
    es = exact_sum(X)
    for j in range(2):
        assert es.fraction(j) == sum(Fraction(float(v)) for v in X[:, j])
        assert es.lo[j] == 0
    wide = np.array([[1.0], [1.0 + 2.0**-23], [2.0**-40]], dtype=np.float32)  # 24 bits over 41 binades
    assert not _float64_exact_columns(wide, 24).any()
    assert exact_sum(wide).fraction(0) == sum(Fraction(float(v)) for v in wide[:, 0])
    big = np.array([[1e308], [1e308]])  # a coarse grid but the sum overflows float64
    assert not _float64_exact_columns(big, 53).any()
    assert exact_sum(big).fraction(0) == 2 * Fraction(1e308)


@SETTINGS
@given(
    st.lists(
        st.one_of(adversarial_columns(), float32_columns().map(lambda a: a.astype(np.float64))), min_size=1, max_size=6
    ),
    st.booleans(),
    st.sampled_from([np.float64, np.float32]),
)
def test_compiled_column_scan_equals_numpy_path(cols, nonfinite, dtype):
    import fpreduce.core.exact as E
    from fpreduce.base import jit

    if not jit.enabled():
        pytest.skip("numba not installed: only the numpy path exists")
    rows = max(len(c) for c in cols)
    with np.errstate(over="ignore"):
        X = np.zeros((rows, len(cols)), dtype=dtype)
        for j, c in enumerate(cols):
            X[: len(c), j] = c
    if nonfinite:
        X[0, 0] = np.nan
        X[-1, -1] = -np.inf
    fast, zeros, absum = E.exact_sum_scan(X)
    assert zeros == np.count_nonzero(X == 0)  # the scan counts the zero terms (+0.0 and -0.0)
    with np.errstate(over="ignore", invalid="ignore"):  # and sums |x| in row order
        want = np.zeros(X.shape[1])
        for row in np.abs(X).astype(np.float64):
            want += row  # (numpy's own sum over axis 0 of ONE column is pairwise: other bits)
    assert np.array_equal(absum.view(np.uint64), want.view(np.uint64)) or np.array_equal(absum, want, equal_nan=True)
    with jit.disabled():
        slow = E.exact_sum(X)
    for name in ("hi", "lo", "special"):
        a, b = getattr(fast, name), getattr(slow, name)
        assert np.array_equal(a.view(np.uint64), b.view(np.uint64)) or np.array_equal(a, b, equal_nan=True), name
    assert np.array_equal(fast.nonfinite, slow.nonfinite)
    assert np.array_equal(fast.negzero, slow.negzero)
    for j in range(len(cols)):
        if not fast.nonfinite[j]:
            assert fast.fraction(j) == slow.fraction(j) == sum(Fraction(float(v)) for v in X[:, j])
    from fpreduce.core._exact_proof import _float64_exact_columns, _scan

    assert np.array_equal(_scan(X)[6], _float64_exact_columns(X, 53 if dtype == np.float64 else 24))


def _proof_edges(dtype):
    """Columns on each side of the float64 proof's bounds (three rows: ceil(log2 n) = 2): ``a`` has 21
    significant bits, so ``[a, a * 2**-k]`` needs k + 21 + 2 bits, 53 for k = 30 and 54 for k = 31; partial sums
    reaching 2**1024 or not; all zero, -0.0, one subnormal, Inf, NaN."""
    a = 1.0 + 2.0**-20
    tiny = float(np.finfo(dtype).smallest_subnormal)
    cols = [
        [a, a * 2.0**-30],  # on the bound: proved
        [a, a * 2.0**-31],  # one past it: not
        [-a, a * 2.0**-30, a],
        [1.0 + 2.0 ** (1 - np.finfo(dtype).nmant - 1), 2.0**-40],  # every significand bit used: not
        [1.5, 2.0**-40, -(2.0**-41)],  # few significant bits: proved (shared trailing zeros)
        [2.0**1021, 2.0**1021],  # (fp64) e_max + 2 = 1024: proved; the next binade may overflow: not
        [2.0**1022, 2.0**1022],
        [float(np.finfo(dtype).max), -float(np.finfo(dtype).max)],
        [0.0, -0.0],
        [-0.0, -0.0],
        [tiny, 0.0],
        [tiny, 1.0],
        [tiny, 2.0**-100],
        [np.inf, 1.0],
        [np.nan, 1.0],
        [-np.inf, np.inf],
        [a, 2.0**-30],  # on the bound, its least magnitude a power of two (the binade's first value): proved
    ]
    rows = max(len(c) for c in cols)
    X = np.zeros((rows, len(cols)), dtype=dtype)
    with np.errstate(over="ignore"):
        for j, c in enumerate(cols):
            X[: len(c), j] = c
    return X


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 16, 1100])  # a column at a time; one block; two blocks
def test_the_scans_proof_is_numpys_at_its_bounds(dtype, width):
    """The compiled scan proves a column's float64 sum exact exactly where numpy's four-pass proof does, at the
    bounds of both (and, where both prove it, the sum is the Fraction sum)."""
    from fpreduce.base import jit

    if not jit.enabled():
        pytest.skip("numba not installed: only the numpy path exists")
    import fpreduce.core.exact as E
    from fpreduce.core._exact_proof import _float64_exact_columns, _scan

    base = _proof_edges(dtype)
    X = np.ascontiguousarray(np.tile(base, (1, -(-width // base.shape[1])))[:, : max(width, base.shape[1])])
    want = _float64_exact_columns(X, 53 if dtype == np.float64 else 24)
    got = _scan(X)[6]
    assert np.array_equal(got, want)
    assert want[[0, 2, 4, 16]].all()
    assert not want[[1, 3]].any()
    assert dtype == np.float32 or (want[5] and not want[6])
    ex = E.exact_sum(X)
    for j in np.flatnonzero(want):
        assert ex.lo[j] == 0
        assert Fraction(float(ex.hi[j])) == sum(Fraction(float(v)) for v in X[:, j])


@pytest.mark.parametrize("shape", [(64, 3000), (3, 1025), (1000, 7), (1, 2049)])
def test_the_scans_abs_sum_is_numpys_across_column_blocks(shape):
    """exact_sum_scan's sum of |x| (the runner's backward-error scale) is the row-order float64 sum, which is
    numpy's ``sum(axis=0, dtype=float64)`` bit for bit for two or more columns (one column numpy sums pairwise)."""
    import fpreduce.core.exact as E
    from fpreduce.base import jit

    if not jit.enabled():
        pytest.skip("numba not installed: only the numpy path exists")
    from fpreduce.core._exact_proof import _scan

    rng = np.random.default_rng(shape[0])
    X = (rng.standard_normal(shape) * np.exp2(rng.integers(-60, 60, shape))).astype(np.float32)
    X[rng.random(shape) < 0.1] = 0.0  # zero terms, counted
    X[:, :3] = 0.0  # (all-zero columns: their least nonzero magnitude is 0)
    ex, zeros, absum = E.exact_sum_scan(X)
    assert zeros == np.count_nonzero(X == 0)
    want = np.abs(X).sum(axis=0, dtype=np.float64)
    assert np.array_equal(absum.view(np.uint64), want.view(np.uint64))
    assert np.array_equal(ex.to_float64(), E.exact_sum(X.astype(np.float64)).to_float64())
    mag = X.view(np.uint32) & np.uint32(0x7FFFFFFF)  # the proof's statistics, per column, as numpy finds them
    top, low, orb = _scan(X)[:3]
    assert np.array_equal(top, mag.max(axis=0))
    assert np.array_equal(low, np.where(mag.max(axis=0) == 0, 0, np.where(mag == 0, 2**32 - 1, mag).min(axis=0)))
    assert np.array_equal(orb, np.bitwise_or.reduce(mag, axis=0))
    with jit.disabled():
        assert E.exact_sum_scan(X)[2] is None


def test_the_scan_gives_the_same_bits_on_any_number_of_threads(monkeypatch):
    """exact_sum_scan splits its columns over threads (one per million terms): for 1, 2 and 3 threads and an odd
    width (spans of whole 1024-column blocks, then a short one), the sums, zero count, sum of |x| and the
    proof's statistics are the same bits, and numpy's."""
    import fpreduce.core.exact as E
    from fpreduce.base import jit

    if not jit.enabled():
        pytest.skip("numba not installed: only the numpy path exists")
    from fpreduce.core._exact_proof import _scan

    rng = np.random.default_rng(7)
    shape = (48, 3 * 2**15 + 37)  # 4.7 million terms: three threads when asked
    X = (rng.standard_normal(shape) * np.exp2(rng.integers(-60, 60, shape))).astype(np.float32)
    X[rng.random(shape) < 0.1] = 0.0
    X[:, 5] = np.nan  # (a column the general path sums)
    got = []
    for t in ("1", "2", "3"):
        monkeypatch.setenv("FPREDUCE_THREADS", t)
        ex, zeros, absum = E.exact_sum_scan(X)
        scan = _scan(X)
        got.append(
            (ex.hi.tobytes(), ex.lo.tobytes(), zeros, absum.tobytes(), *(scan[i].tobytes() for i in (0, 1, 2, 6)))
        )
    assert got[0] == got[1] == got[2]
    mag = X.view(np.uint32) & np.uint32(0x7FFFFFFF)
    assert got[0][2] == np.count_nonzero(X == 0)
    assert got[0][3] == np.abs(X).sum(axis=0, dtype=np.float64).tobytes()
    assert got[0][4] == mag.max(axis=0).tobytes()
    with jit.disabled():
        slow = E.exact_sum(X)
    assert got[0][0] == slow.hi.tobytes()
    assert got[0][1] == slow.lo.tobytes()
