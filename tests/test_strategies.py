import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce import strategies as fst

FORMATS = list(fr.FORMATS)


def bits64(a):
    """float64 bit patterns, every NaN mapped to one pattern."""
    a = np.asarray(a, dtype=np.float64)
    return np.where(np.isnan(a), np.uint64(0x7FF8 << 48), a.view(np.uint64))


def representable(v, fmt):
    """True if ``v`` is exactly a value of ``fmt`` (bitwise, so -0.0 counts), or NaN."""
    a = np.array([v], dtype=np.float64)
    if np.isnan(a[0]):
        return True
    return bool(bits64(fr.round_to(a, fmt))[0] == bits64(a)[0])


@pytest.mark.parametrize("fmt", FORMATS)
@given(data=st.data())
def test_every_value_is_representable(fmt, data):
    v = data.draw(fst.values(fmt, allow_nan=True, allow_infinity=True))
    assert representable(v, fmt), (v, fmt)
    if np.isinf(v):
        assert fr.get_format(fmt).has_inf


@pytest.mark.parametrize("fmt", FORMATS)
@given(data=st.data())
def test_value_options_are_respected(fmt, data):
    f = fr.get_format(fmt)
    cap = data.draw(st.sampled_from([0.0, 2.0**-140, 1.0, 3.5, 1000.0, 1e30]))
    sub = data.draw(st.booleans())
    v = data.draw(fst.values(fmt, max_magnitude=cap, allow_subnormal=sub))
    assert np.isfinite(v)
    assert abs(v) <= cap
    assert sub or v == 0 or abs(v) >= f.smallest_normal
    assert representable(v, fmt)


def test_import_error_names_the_extra():
    code = "import sys; sys.modules['hypothesis'] = None; import fpreduce.strategies"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode != 0
    assert "ImportError" in r.stderr
    assert "pip install 'fpreduce[test]'" in r.stderr


def collect(strategy, classify, n=400):
    """Counts of ``classify(value)`` labels over ``n`` derandomized draws."""
    seen: Counter[str] = Counter()

    @settings(max_examples=n, derandomize=True, database=None)
    @given(strategy)
    def run(v):
        seen.update(classify(v))

    run()
    return seen


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp32", "fp8_e4m3", "fp64"])
def test_weighting_reaches_the_edge_cases(fmt):
    f = fr.get_format(fmt)

    def classify(v):
        a = abs(v)
        labels = {
            "zero-": v == 0 and np.signbit(v),
            "subnormal": 0 < a < f.smallest_normal,
            "max": a == f.max_finite,
            "min_sub": a == f.smallest_subnormal,
            "min_normal": a == f.smallest_normal,
            "pow2": a > 0 and np.frexp(a)[0] == 0.5,
            "half_ulp_of_1": a == 2.0**-f.precision,
            "odd": a > 0 and not float(a).is_integer() and np.frexp(a)[0] * 2.0**f.precision % 2 == 1,
        }
        return [k for k, hit in labels.items() if hit]

    seen = collect(fst.values(fmt), classify)
    # uniform bit patterns would give (bf16) subnormals 0.4%, -0.0 / max / min 0.0015% each
    assert seen["subnormal"] >= 20
    for label in ("zero-", "max", "min_sub", "min_normal"):
        assert seen[label] >= 3, (label, seen)
    assert seen["pow2"] >= 80
    assert seen["half_ulp_of_1"] >= 1
    assert seen["odd"] >= 20  # odd significands: the values that make ties


@pytest.mark.parametrize("fmt", FORMATS)
@given(data=st.data())
def test_arrays_shape_dtype_and_representable(fmt, data):
    shape = data.draw(fst.shapes())
    X = data.draw(fst.arrays(fmt, shape))
    assert X.shape == shape
    assert X.dtype == (np.float64 if fmt == "fp64" else np.float32)
    r = fr.round_to(X.astype(np.float64), fmt)
    assert (bits64(r) == bits64(X)).all()


def test_arrays_build_cancellation_and_swamping_columns():
    f = fr.get_format("bf16")

    def classify(X):
        out = []
        for col in X.T.astype(np.float64):
            nz = col[col != 0]
            if nz.size >= 2 and np.isin(-nz, nz).sum() >= 2:
                out.append("cancel")
            a = np.sort(np.abs(col))
            if a[-1] > 0 and a[-2] > 0 and a[-1] / a[-2] >= 2.0 ** (f.precision - 1):
                out.append("swamp")  # every other addend is at most ~half an ulp of the big one
        return out

    seen = collect(fst.arrays("bf16", (6, 4)), classify, n=200)
    assert seen["cancel"] >= 40
    assert seen["swamp"] >= 40


def test_swamping_columns_make_orders_differ():
    def differs(X):
        a = fr.reduce(X, "sequential", input="bf16", accumulate="bf16")
        b = fr.reduce(X, "reverse", input="bf16", accumulate="bf16")
        return not (bits64(a) == bits64(b)).all()

    X = find(
        fst.arrays("bf16", (4, 1), max_magnitude=100.0),
        differs,
        settings=settings(max_examples=300, database=None, phases=[Phase.generate], derandomize=True),
    )
    assert differs(X)


@given(st.integers(1, 100).flatmap(lambda hi: st.tuples(st.just(hi), fst.worker_counts(1, hi))))
def test_worker_counts_in_range(pair):
    hi, n = pair
    assert 1 <= n <= hi


def test_worker_counts_favour_powers_of_two():
    seen = collect(
        fst.worker_counts(1, 1000),
        lambda n: ["pow2"] if n & (n - 1) == 0 else ["near"] if (n + 1) & n == 0 or (n - 1) & (n - 2) == 0 else [],
        n=200,
    )
    assert seen["pow2"] >= 25
    assert seen["near"] >= 25
    with pytest.raises(fr.InvalidArgument):
        fst.worker_counts(5, 2)


@given(st.integers(1, 30).flatmap(fst.permutations))
def test_permutations_are_permutations(p):
    assert sorted(p.tolist()) == list(range(len(p)))


@given(data=st.data(), n=fst.worker_counts(1, 20))
def test_plans_are_valid_for_n(data, n):
    plan = data.draw(fst.plans(n))
    assert plan.n == n
    if hasattr(plan, "orders"):  # per-element orders
        orders = plan.orders(0, 3)
        assert (np.sort(orders, axis=1) == np.arange(n)).all()
    else:
        for t in getattr(plan, "trees", (plan,)):
            assert sorted(t.leaves()) == list(range(n))
    X = np.arange(1.0, n + 1.0)[:, None] * np.ones((1, 3))
    assert (fr.reduce(X, plan, accumulate="fp64") == n * (n + 1) / 2).all()


def test_plans_cover_families_and_random_shapes():
    n = 6
    draws = collect(fst.plans(n), lambda p: [p.name, p.draw().replace("\n", "|")], n=200)
    names = {k.partition(":")[0] for k in draws if not k.startswith(("(", "chunk", "atomic:"))}
    assert {"sequential", "pairwise", "tree", "kary", "blocked", "hier", "atomic", "rd"} <= names
    assert any(x.startswith("ring") for x in names)
    shapes = collect(fst.plans(n, ["random_tree"]), lambda p: [str(sorted(p.depths().tolist()))], n=200)
    assert len(shapes) >= 5  # several depth profiles: the tree shapes really vary
    with pytest.raises(fr.InvalidArgument, match="did you mean 'pairwise'"):
        fst.plans(4, ["pairwse"])


@given(
    fst.problems(
        workers=fst.worker_counts(1, 9),
        elements=(1, 3),
        inputs=fst.formats(exclude=["fp64"]),
        accumulators=fst.formats(exclude=["fp64"]),
    )
)
def test_problems_fast_engine_equals_reference(prob):
    X, plan, inp, acc = prob
    assert X.shape[0] == plan.n
    fast = fr.reduce(X, plan, input=inp, accumulate=acc)
    ref = fr.reduce_reference(X, plan, input=inp, accumulate=acc)
    assert (bits64(fast) == bits64(ref)).all()


@given(fst.problems(allow_overflow=False, families=["sequential", "random_tree"]))
def test_problems_without_overflow_stay_finite(prob):
    y = fr.reduce(prob.X, prob.plan, input=prob.input, accumulate=prob.accumulate)
    assert np.isfinite(y).all()


def test_formats_exclude():
    seen = collect(fst.formats(exclude=["fp64", "tf32"]), lambda s: [s], n=100)
    assert set(seen) == set(FORMATS) - {"fp64", "tf32"}
    with pytest.raises(fr.InvalidArgument, match="did you mean"):
        fst.formats(exclude=["bf61"])


# README example: test your own reduction code against the bit-exact emulation.
def my_sum(X):
    """The code under test: a row-by-row float32 accumulation (as a parameter server does)."""
    acc = X[0].copy()
    for row in X[1:]:
        acc = acc + row
    return acc


@given(fst.arrays("fp32", fst.shapes(), max_magnitude=2.0**100))
def test_readme_my_sum_is_a_sequential_fold(X):
    assert (bits64(my_sum(X)) == bits64(fr.reduce(X, "sequential"))).all()


def test_readme_numpy_sum_is_not_a_sequential_fold():
    # np.sum along a contiguous axis adds with 8 interleaved accumulators from n = 8 on
    # (and starts from +0.0, so an all -0.0 column sums to +0.0): the strategies find
    # it (shrunk, typically to 1.0 and seven addends of half its ulp: ties to even)
    def differs(X):
        return not (bits64(np.sum(X, axis=0)) == bits64(fr.reduce(X, "sequential"))).all()

    X = find(
        fst.arrays("fp32", fst.shapes(elements=(1, 1)), max_magnitude=2.0**100),
        differs,
        settings=settings(max_examples=300, database=None, derandomize=True, phases=[Phase.generate]),
    )
    assert differs(X)
    assert X.shape[0] >= 8 or (X == 0).all()
