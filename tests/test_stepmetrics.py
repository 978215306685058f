"""The runner's per-step metrics: the compiled kernels give the numpy path's values bit for bit."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpreduce.base import jit
from fpreduce.core.formats import get_format
from fpreduce.core.rounding import round_to
from fpreduce.run import stepmetrics as sm
from fpreduce.run._summary import wider as _wider

FORMATS = ["fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"]
SPECIALS = np.array(
    [
        np.nan,
        -np.nan,
        np.inf,
        -np.inf,
        0.0,
        -0.0,
        5e-324,
        -5e-324,
        3 * 5e-324,
        2.0**-1022,
        2.0**-1000,
        -(2.0**-980),
        2.0**-149,
        2.0**-133,
        2.0**-126,
        2.0**-24,
        2.0**-16,
        2.0**-9,
        1.0,
        -1.0,
        448.0,
        57344.0,
        65504.0,
        3.4e38,
        -3.4e38,
        1e300,
        np.finfo(np.float64).max,
    ]
)

needs_kernels = pytest.mark.skipif(not jit.enabled(), reason="numba not installed: only the numpy path exists")
numpy_path = jit.disabled


def _values(rng: np.random.Generator, n: int, fmt: str, p_special: float) -> np.ndarray:
    """float64 values over many binades (the whole float64 range, or around the format's), some special."""
    f = get_format(fmt)
    wide = rng.random(n) < 0.3
    e = np.where(wide, rng.integers(-1080, 1024, n), rng.integers(f.emin - f.precision - 3, f.emax + 2, n))
    with np.errstate(over="ignore"):
        x = rng.standard_normal(n) * np.ldexp(1.0, e)
    special = rng.random(n) < p_special
    x[special] = rng.choice(SPECIALS, int(special.sum()))
    return x


def _data(seed: int, n: int, out: str, ref: str, p_special: float) -> dict[str, np.ndarray]:
    """Exact values hi + lo, their rounding cr to ``out``, results y in ``out`` near them (or not), and
    reference results in ``ref`` (often equal to y)."""
    rng = np.random.default_rng(seed)
    hi = _values(rng, n, out, p_special)
    with np.errstate(over="ignore", invalid="ignore"):
        lo = np.where(rng.random(n) < 0.8, hi * 2.0**-60 * rng.uniform(-1, 1, n), 0.0)
        lo[np.abs(lo) < 5e-324 * 2**52] = 0.0  # keep lo a (rough) low part: |lo| below ulp(hi) / 2
        near = round_to(hi * (1 + rng.standard_normal(n) * 2.0 ** rng.integers(-60, 0, n)), out)
        cr = round_to(hi, out)  # the low part is far below every format's half ulp here
    pick = rng.integers(0, 4, n)
    y = np.where(pick == 0, cr, np.where(pick == 1, near, round_to(_values(rng, n, out, p_special), out)))
    y = np.where(pick == 3, -cr, y).astype(cr.dtype)
    alt = round_to(np.where(rng.random(n) < 0.5, y.astype(np.float64), _values(rng, n, ref, p_special)), ref)
    yref = np.where(rng.random(n) < 0.5, round_to(y.astype(np.float64), ref), alt)
    # sum |x|: at least |s| (often far more: cancellation), sometimes 0, inf or NaN
    with np.errstate(over="ignore", invalid="ignore"):
        absum = np.abs(hi) * rng.choice(
            [1.0, 1.0, 3.0, 1e6, 0.0, np.inf, np.nan], n, p=[0.3, 0.2, 0.2, 0.2, 0.05, 0.03, 0.02]
        )
    return {
        "hi": hi,
        "lo": lo,
        "cr": cr,
        "y": y,
        "yref": yref.astype(get_format(ref).value_dtype),
        "absum": absum,
    }


def _chunks(n: int, cuts: list[int]) -> list[slice]:
    edges = sorted({0, n, *(c % (n + 1) for c in cuts)})
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _run(d: dict[str, np.ndarray], out: str, ref: str, chunks: list[slice]) -> tuple[sm.ErrorStats, sm.CompareStats]:
    err, cmp = sm.ErrorStats(), sm.CompareStats()
    fo, fc = get_format(out), get_format(_wider(out, ref))
    for s in chunks:
        err.add(d["y"][s], d["hi"][s], d["lo"][s], d["cr"][s], fo, d["absum"][s])
        cmp.add(d["y"][s], d["yref"][s], fc)
    return err, cmp


def _state(err: sm.ErrorStats, cmp: sm.CompareStats) -> list[object]:
    """Every accumulated value and row entry (floats by their bits, -0.0 != 0.0, but NaN == NaN: the sign of a
    NaN from BLAS ``dot`` over NaNs of both signs varies from call to call, even on the numpy path alone)."""

    def bits(v: float) -> object:
        return "nan" if math.isnan(v) else np.float64(v).view(np.uint64).item()

    rels = np.concatenate(err.rels) if err.rels else np.empty(0, np.float32)
    vals = [
        err.total,
        err.nonfinite,
        err.correct,
        err.rel_sum,
        err.rel_max,
        err.ulp_max,
        err.bwd_max,
        err.sq_err,
        err.sq_exact,
        err.finite,
        cmp.total,
        cmp.differ,
        cmp.d_sum,
        cmp.d_max,
        cmp.sq_diff,
        cmp.sq_ref,
        *err.row().values(),
        *cmp.row().values(),
    ]
    return [bits(float(v)) if isinstance(v, float | np.floating) else v for v in vals] + [
        rels.view(np.uint32).tobytes(),
        cmp.hist.tolist(),
    ]


@needs_kernels
@settings(max_examples=settings.default.max_examples * 10 // 3, deadline=None)  # ci: 200, dev: 66
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 4000),
    st.sampled_from(FORMATS),
    st.sampled_from(FORMATS),
    st.sampled_from([0.0, 0.02, 0.3]),
    st.lists(st.integers(0, 4000), max_size=4),
)
def test_kernels_equal_numpy_path(seed: int, n: int, out: str, ref: str, p_special: float, cuts: list[int]) -> None:
    d = _data(seed, n, out, ref, p_special)
    chunks = _chunks(n, cuts)
    fast = _state(*_run(d, out, ref, chunks))
    with numpy_path():
        slow = _state(*_run(d, out, ref, chunks))
    assert fast == slow


@needs_kernels
@pytest.mark.parametrize("out", FORMATS)
@pytest.mark.parametrize("equal", [0.0, 0.4])
def test_kernels_keep_whole_chunks_whole(monkeypatch: pytest.MonkeyPatch, out: str, equal: float) -> None:
    """Every result and exact value finite and nonzero, and every result differing from the reference (or
    some equal): the kernels' arrays are the numpy path's as they stand, and no element is moved to the
    front, which only a chunk with elements left out needs."""
    f = get_format(out)
    rng = np.random.default_rng(len(out) + int(10 * equal))
    n = 5000
    e = rng.integers(max(f.emin, -1000) + 2, min(f.emax, 1000) - 2, n)  # normal values, results too
    hi = rng.choice([-1.0, 1.0], n) * rng.uniform(1, 2, n) * 2.0**e
    lo = hi * 2.0**-60 * rng.uniform(-1, 1, n)
    cr = round_to(hi, out)
    y = round_to(hi * (1 + rng.uniform(-1, 1, n) * 2.0 ** -rng.integers(2, 12, n)), out)
    y = np.where(rng.random(n) < 0.3, cr, y).astype(cr.dtype)  # some results correctly rounded, most not
    y64 = y.astype(np.float64)
    up = np.nextafter(y64, np.inf) if out == "fp64" else round_to(y64 + np.abs(y64) * 2.0 ** (1 - f.precision), out)
    yref = np.where(rng.random(n) < equal, y, up).astype(y.dtype)
    assert np.isfinite(y).all()
    assert np.isfinite(yref).all()
    d = {"hi": hi, "lo": lo, "cr": cr, "y": y, "yref": yref, "absum": np.abs(hi) * 3}
    moved = []
    for name in ("_error_keep_compiled", "_compare_keep_compiled"):
        keep = getattr(sm, name)
        monkeypatch.setattr(sm, name, lambda *a, name=name, keep=keep: (moved.append(name), keep(*a))[1])
    fast = _state(*_run(d, out, out, [slice(0, n)]))
    assert moved == ([] if equal == 0 else ["_compare_keep_compiled"])
    with numpy_path():
        slow = _state(*_run(d, out, out, [slice(0, n)]))
    assert fast == slow
    assert fast[11] == (n if equal == 0 else int(np.count_nonzero(y != yref)))  # the differing count


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 3000),
    st.sampled_from(FORMATS),
    st.lists(st.integers(0, 3000), min_size=1, max_size=5),
)
def test_chunked_equals_whole(seed: int, n: int, out: str, cuts: list[int]) -> None:
    """Chunking changes only the order of the float64 sums: counts, maxima, median, histogram agree.

    (Not with NaN errors: both paths drop the maxima of a chunk holding one, as ``max(m, nan)`` is m.
    fp64 errors in ulps of |s| = the largest float64 are NaN or 0: ``np.spacing`` of it overflows to inf.)
    """
    d = _data(seed, n, out, out, 0.05)
    d["hi"][np.abs(d["hi"]) == np.finfo(np.float64).max] = 1.0
    for kernels in {jit.enabled(), False}:
        with contextlib.nullcontext() if kernels else jit.disabled():
            whole = _run(d, out, out, [slice(0, n)])
            parts = _run(d, out, out, _chunks(n, cuts))
        for a, b in ((whole[0].row(), parts[0].row()), (whole[1].row(), parts[1].row())):
            for k in a:
                if k in ("err_mean_rel", "ulp_mean", "rel_l2", "err_norm"):
                    assert a[k] == pytest.approx(b[k], rel=1e-12, nan_ok=True), k
                else:
                    assert (a[k] == b[k]) or (math.isnan(a[k]) and math.isnan(b[k])), k
        assert whole[1].hist.tolist() == parts[1].hist.tolist()
        assert (whole[0].total, whole[0].correct, whole[1].differ) == (
            parts[0].total,
            parts[0].correct,
            parts[1].differ,
        )


@needs_kernels
@settings(max_examples=settings.default.max_examples * 10 // 3, deadline=None)  # ci: 200, dev: 66
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 5000),
    st.sampled_from([0.0, 0.001, 0.5]),
    st.booleans(),
    st.integers(1, 4),
)
def test_median_equals_numpy(seed: int, n: int, p_zero: float, nan: bool, parts: int) -> None:
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):  # 0, subnormals, inf
        r = np.abs(rng.standard_normal(n) * 2.0 ** rng.integers(-150, 128, n)).astype(np.float32)
    r[rng.random(n) < p_zero] = 0.0
    if rng.random() < 0.3:
        r = r[rng.integers(0, min(n, 4), n)]  # many duplicates
    if nan:
        r[rng.integers(0, n)] = np.nan
    rels = np.array_split(r, parts)
    want = float(np.median(r))
    got = sm.median32(rels)
    assert np.float64(got).view(np.uint64) == np.float64(want).view(np.uint64) or (math.isnan(got) and math.isnan(want))


def _both(fn):  # type: ignore[no-untyped-def]
    """fn() on the kernel path (if any) and the numpy path: both results."""
    out = [fn()] if jit.enabled() else []
    with numpy_path():
        out.append(fn())
    return out


def test_error_stats_by_hand() -> None:
    u = 2.0**-23  # ulp(1) in fp32
    y = np.array([1.0, 1 + u, np.nan, np.inf, 0.0, 3.0], dtype=np.float32)
    hi = np.array([1.0, 1.0, 1.0, 1.0, 0.0, 2.0 + 2 * u])
    lo = np.array([0.0, 0.0, 0.0, 0.0, 0.0, -(2.0**-60)])
    cr = np.array([1.0, 1.0, 1.0, 1.0, 0.0, 2.0 + 2 * u], dtype=np.float32)

    def run() -> tuple[dict[str, float], float]:
        e = sm.ErrorStats()
        e.add(y, hi, lo, cr, get_format("fp32"))
        return e.row(), e.rel_sum

    err6 = 1 - 2 * u + 2.0**-60  # |3 - (2 + 2u) + 2**-60|, exact in float64
    for row, rel_sum in _both(run):
        assert row["nonfinite"] == 2
        assert row["frac_correct"] == 2 / 6  # 1.0 and 0.0 (the zero exact value counts here, not below)
        assert row["err_max_rel"] == (1 - 2 * u + 2.0**-60) / (2 + 2 * u)
        assert row["err_max_ulp"] == err6 / (2 * u)  # ulp(2 + 2u) in fp32 is 2u
        assert rel_sum == 0 + u + err6 / (2 + 2 * u)
        assert row["err_median_rel"] == u  # the middle of [0, u, 0.49999...]
        assert row["err_mean_rel"] == rel_sum / 3


@pytest.mark.parametrize(
    ("fmt", "hi", "y", "ulps"),
    [
        ("fp64", 3 * 2.0**-1074, 5 * 2.0**-1074, 2.0),  # fp64: subnormal quanta, 2**-1074
        ("fp64", 2.0**-1000, 2.0**-1000 + 2.0**-1051, 2.0),
        ("bf16", 2.0**-130, 0.0, 8.0),  # below bf16's emin: quantum 2**(-126 - 7)
        ("fp8_e4m3", 448.0, 416.0, 1.0),  # ulp 32 at the top binade
        ("fp16", 2.0**-20, 2.0**-24, 15.0),  # fp16 subnormals: quantum 2**-24
    ],
)
def test_error_ulps_by_hand(fmt: str, hi: float, y: float, ulps: float) -> None:
    f = get_format(fmt)

    def run() -> float:
        e = sm.ErrorStats()
        e.add(np.array([y], dtype=f.value_dtype), np.array([hi]), np.zeros(1), round_to(np.array([hi]), f), f)
        return e.ulp_max

    assert _both(run) == [ulps] * len(_both(run))


def test_compare_stats_by_hand() -> None:
    u = 2.0**-23
    y = np.array([1.0, 1 + u, -0.0, np.nan, np.inf, 3.0, -np.nan], dtype=np.float32)
    yref = np.array([1.0, 1.0, 0.0, np.nan, 1.0, 2.0, 1.0], dtype=np.float32)

    def run() -> tuple[list[int], dict[str, float], float, float]:
        c = sm.CompareStats()
        c.add(y, yref, get_format("fp32"))
        return c.hist.tolist(), c.row(), c.d_sum, c.sq_diff

    big = float(sm.ULP_EDGES[-1])
    for hist, row, d_sum, sq_diff in _both(run):
        want = [0] * len(sm.ULP_EDGES)
        want[0] = 3  # 1.0 = 1.0, NaN = NaN, -0.0 vs +0.0: different bits, distance 0
        want[1] = 1  # one ulp
        want[-1] = 3  # Inf vs 1, NaN vs 1 (the largest), and 3 vs 2: 2**22 ulps of 2**-22
        assert hist == want
        assert row["diff_frac"] == 5 / 7
        assert row["ulp_max"] == 2.0**22
        assert d_sum == 1 + 0 + big + 2.0**22 + big
        assert row["ulp_mean"] == d_sum / 7
        assert math.isnan(sq_diff)  # NaN - 1.0
        assert math.isnan(row["rel_l2"])


def test_compare_histogram_bins() -> None:
    """Distances of 1, 2, ..., across every bin edge: the kernel's bins are ulp_histogram's."""
    f = get_format("fp32")
    k = np.array([0, 1, 2, 3, 4, 5, 8, 9, 16, 17, 1024, 1025, 4096, 4097, 65536, 65537, 2**20 - 1, 2**20, 2**22])
    y = (2.0**23 + k).astype(np.float32)  # ulp 1 on [2**23, 2**24)
    ref = np.full(k.size, 2.0**23, dtype=np.float32)

    def run() -> list[int]:
        c = sm.CompareStats()
        c.add(y, ref, f)
        return c.hist.tolist()

    want = sm.ulp_histogram(k.astype(np.float64)).tolist()
    assert _both(run) == [want] * len(_both(run))


def test_empty_chunks() -> None:
    f = get_format("fp32")
    e32 = np.empty(0, dtype=np.float32)
    e64 = np.empty(0)

    def run() -> list[object]:
        e, c = sm.ErrorStats(), sm.CompareStats()
        e.add(e32, e64, e64, e32, f)
        c.add(e32, e32, f)
        return [repr(e.row()), repr(c.row()), c.hist.tolist()]

    results = _both(run)
    assert all(r == results[0] for r in results)


def test_fp64_distances_at_both_ends_of_the_range() -> None:
    # one fp64 ulp apart: far below 2**-971 (where 1 / ulp overflows) and on the top binade
    # (where np.spacing of the largest float64 overflows)
    f = get_format("fp64")
    tiny = 2.0**-1000
    top = float(np.finfo(np.float64).max)
    y = np.array([tiny + 2.0**-1052, np.nextafter(top, 0.0), 5e-324, -0.0])
    ref = np.array([tiny, top, 0.0, 0.0])

    def run() -> tuple[float, ...]:
        c = sm.CompareStats()
        c.add(y, ref, f)
        return c.d_max, c.d_sum, int(c.hist[0]), int(c.hist[1])

    for got in _both(run):
        assert got == (1.0, 3.0, 1, 3)  # three 1-ulp differences, -0.0 vs +0.0 at distance 0


def test_a_nan_error_makes_the_maximum_nan_whatever_the_chunking() -> None:
    assert math.isnan(sm._max(1.0, math.nan))
    assert math.isnan(sm._max(math.nan, 2.0))
    assert sm._max(-math.inf, 3.0) == 3.0


def test_maxima_take_only_the_kept_elements_and_a_nan_among_them() -> None:
    """The kernel takes the maxima in its pass (by the errors' bits): a NaN backward error (a sum |x| that is
    NaN) makes err_backward NaN, while the errors of a result that is left out (NaN) and the infinite
    relative error of a zero exact value count in no maximum."""
    y = np.array([1.0, 2.0, np.nan, 8.0, 2.0**100], dtype=np.float32)
    hi = np.array([1.0, 1.0, 1.0, 0.0, -(2.0**100)])
    lo = np.zeros(5)
    cr = y.copy()
    fp32 = get_format("fp32")

    def run(absum: np.ndarray) -> tuple[object, ...]:
        e = sm.ErrorStats()
        e.add(y, hi, lo, cr, fp32, absum)
        r = e.row()
        return tuple("nan" if math.isnan(v) else v for v in (r["err_backward"], r["err_max_rel"], r["err_max_ulp"]))

    rel_max = 2.0  # |2**100 - -2**100| / 2**100; the zero exact value's error 8 has no relative error
    ulp_max = 2.0**101 / 2.0**77  # ulp(2**100) in fp32 is 2**77
    for got in _both(lambda: run(np.array([1.0, 2.0, 1.0, 16.0, np.inf]))):
        assert got == (0.5, rel_max, ulp_max)  # 1/2 and 8/16; 2**101 / inf is 0
    for got in _both(lambda: run(np.array([1.0, 2.0, 1.0, 16.0, np.nan]))):
        assert got == ("nan", rel_max, ulp_max)


def test_normwise_and_backward_errors_by_hand() -> None:
    """err_norm = ||y - s|| / ||s||, err_backward = max |y - s| / sum|x|; a zero exact sum counts in both."""
    y = np.array([1.0, 3.0, 2.0**-8, 0.0, np.inf], dtype=np.float32)
    hi = np.array([1.0, 4.0, 0.0, 0.0, 1.0])
    lo = np.zeros(5)
    cr = np.array([1.0, 4.0, 0.0, 0.0, 1.0], dtype=np.float32)
    absum = np.array([1.0, 8.0, 2.0, 0.0, 1.0])

    def run() -> dict[str, float]:
        e = sm.ErrorStats()
        e.add(y, hi, lo, cr, get_format("bf16"), absum)
        return e.row()

    for row in _both(run):
        assert row["err_norm"] == math.sqrt(1 + 2.0**-16) / math.sqrt(17)  # errors 0, 1, 2**-8, 0
        assert row["err_backward"] == 1 / 8  # 1/8 > 2**-8 / 2; 0 / 0 counts as 0
        assert row["err_max_ulp"] == 2.0**-8 / 2.0**-15  # 2**-8 against 0: ulp of 2**-8 in bf16
        assert row["err_max_rel"] == 0.25  # the zero sums have no relative error
        assert row["nonfinite"] == 1


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp32"])
def test_error_ulps_are_metrics_ulp_error(fmt: str) -> None:
    """The step's err_max_ulp is the largest metrics.ulp_error of the step, zero and cancelling sums included."""
    import fpreduce as fr
    from fpreduce.core.metrics import ulp_error

    rng = np.random.default_rng(3)
    X = round_to(rng.standard_normal((16, 4000)) * 2.0 ** rng.integers(-10, 10, (16, 1)), fmt).astype(np.float64)
    X[:, :50] = np.vstack([X[:8, :50], -X[:8, :50]])  # exact sums 0
    ex = fr.exact_sum(X)
    y = fr.reduce(X, "sequential", input=fmt, accumulate=fmt)
    hi, lo = np.asarray(ex.hi, dtype=np.float64), np.asarray(ex.lo, dtype=np.float64)

    def run() -> float:
        e = sm.ErrorStats()
        e.add(y, hi, lo, ex.round(fmt), get_format(fmt), np.abs(X).sum(axis=0))
        return e.row()["err_max_ulp"]

    want = float(np.max(ulp_error(y, ex, fmt)))
    assert 0 < want < 2.0 ** (get_format(fmt).precision + 1)
    assert _both(run) == [want] * len(_both(run))


def test_runner_errors_equal_the_metrics_functions() -> None:
    """err_norm, err_backward of a step are core.metrics.norm_error / backward_error of the whole vector."""
    import fpreduce as fr
    from fpreduce.core.metrics import backward_error, norm_error

    rng = np.random.default_rng(5)
    X = round_to(rng.standard_normal((12, 3000)), "bf16").astype(np.float64)
    ex = fr.exact_sum(X)
    y = fr.reduce(X, "sequential", input="bf16", accumulate="bf16")
    hi, lo = np.asarray(ex.hi, dtype=np.float64), np.asarray(ex.lo, dtype=np.float64)
    for row in _both(lambda: _one_row(y, hi, lo, ex.round("bf16"), np.abs(X).sum(axis=0))):
        assert row["err_norm"] == pytest.approx(norm_error(y, ex), rel=1e-12)
        assert row["err_backward"] == backward_error(y, ex, X)


def _one_row(y, hi, lo, cr, absum):  # type: ignore[no-untyped-def]
    e = sm.ErrorStats()
    for s in (slice(0, 1000), slice(1000, 3000)):
        e.add(y[s], hi[s], lo[s], cr[s], get_format("bf16"), absum[s])
    return e.row()


# ----------------------------------------------------------------------------- digest


@given(
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1, max_size=60),
    st.integers(0, 60),
    st.integers(0, 2**40),
)
def test_digest_of_slices_adds_up_to_the_whole(values, cut, offset):
    """The law a run split over element ranges relies on: digests merge exactly, compiled or not."""
    from fpreduce.base.jit import disabled
    from fpreduce.run.digest import DIGEST_BITS, digest

    y = np.array(values, dtype=np.float32)
    cut = min(cut, y.size)
    whole = digest(y, offset)
    assert whole == (digest(y[:cut], offset) + digest(y[cut:], offset + cut)) % 2**DIGEST_BITS
    with disabled():
        assert digest(y, offset) == whole


def test_digest_tells_apart_what_bits_tell_apart():
    from fpreduce.run.digest import digest

    y = np.array([1.0, -0.0, 3.5, np.inf], dtype=np.float32)
    base = digest(y)
    assert digest(y.copy()) == base
    assert digest(y.astype(np.float64)) == base  # the values, not the container
    for i, v in [(1, 0.0), (0, np.nextafter(np.float32(1), np.float32(2))), (3, -np.inf)]:
        z = y.copy()
        z[i] = v
        assert digest(z) != base, (i, v)
    assert digest(y[::-1]) != base  # the position counts: a permutation is another result
    nan1 = np.array([np.nan], dtype=np.float64)
    nan2 = np.array([0x7FF8000000000001], dtype=np.uint64).view(np.float64)
    assert digest(nan1) == digest(nan2) == digest(-nan1)  # every NaN alike
