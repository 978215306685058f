"""The compiled Kahan and Neumaier sums of the engine (core/_compensated.py) against the references.

``reduce(..., algorithm="kahan"/"neumaier")`` with a plan that is the same for every
element runs compiled for nearest-even fp32, fp64, bf16 and tf32 accumulators; it must
give the bits of the numpy path (``jit.disabled()``) and of ``compensated_reference``
(Fractions) on the plan's leaf order, with ties, subnormals, signed zeros, swamping,
and NaN/Inf or sums beyond Veltkamp's range (handed back to the numpy path).
"""

from contextlib import nullcontext

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.core.algorithms import compensated_reference
from fpreduce.core.formats import get_format

needs_jit = pytest.mark.skipif(not jit.enabled(), reason="numba not installed or FPREDUCE_NO_JIT set")


def same(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((np.isnan(a) & np.isnan(b)) | (a.view(np.uint64) == b.view(np.uint64))))


def data(fmt, n, m, seed):
    f = get_format(fmt)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, m)) * np.exp2(rng.integers(-20, 20, (n, m)))
    pick = rng.random((n, m))
    tiny = 2.0 ** (f.emin - f.precision + 1)
    X = np.where(pick < 0.15, rng.integers(-5, 6, (n, m)) * tiny, X)
    X = np.where((pick >= 0.15) & (pick < 0.25), rng.choice([1.0, 2.0**-9, -(2.0**-9), -0.0, 0.0], (n, m)), X)
    X[0, ::3] = 1.0  # a large first term and small ones: swamping, where compensation matters
    return fr.round_to(X, "fp32" if f.precision > 24 else f).astype(np.float32)


@needs_jit
@pytest.mark.parametrize("acc", ["bf16", "tf32", "fp32", "fp64"])
@pytest.mark.parametrize("kind", ["kahan", "neumaier"])
@pytest.mark.parametrize("plan", ["sequential", "reverse", "pairwise"])
def test_compiled_compensated_equals_numpy_and_reference(acc, kind, plan):
    inp = "fp32" if acc in ("fp32", "fp64") else acc
    X = data(inp, 9, 4100 + 7, 1)  # more than one block
    kw = {"input": inp, "accumulate": acc, "algorithm": kind}
    assert fr.explain(X, plan, **kw).route is fr.Route.COMPENSATED
    with fr.trace_routes() as ran:
        got = fr.reduce(X, plan, **kw)
    assert ran == [fr.Route.COMPENSATED]  # the compiled kernel answered every column
    with jit.disabled():
        assert same(got, fr.reduce(X, plan, **kw))
    p = fr.plans.parse(plan, 9)
    cols = np.r_[0:30, 4090:4107]
    want = compensated_reference(X[np.array(p.leaves())][:, cols], acc, kind=kind)
    assert same(got[cols], want)


@needs_jit
@pytest.mark.parametrize("kind", ["kahan", "neumaier"])
def test_specials_and_veltkamp_range_go_to_the_numpy_path(kind):
    X = np.array([[1.0, 3e38, -0.0], [np.inf, 3e38, -0.0], [2.0, -3e38, -0.0]], dtype=np.float32)
    X = fr.round_to(X, "bf16").astype(np.float32)
    kw = {"input": "bf16", "accumulate": "bf16", "algorithm": kind}
    with fr.trace_routes() as ran:
        got = fr.reduce(X, "sequential", **kw)
    assert ran[0] is fr.Route.COMPENSATED
    assert fr.Route.NUMPY_COMPENSATED in ran[1:]  # handed back: the rerun of the blocks, compensated in numpy
    with jit.disabled():
        assert same(got, fr.reduce(X, "sequential", **kw))
    assert same(got, compensated_reference(X, "bf16", kind=kind))


def test_off_without_numba_or_outside_nearest_even():
    """The compiled kernel takes nearest even only, and only with numba: else the blocks, compensated in numpy."""
    X = np.zeros((2, 2), np.float32)
    on = fr.explain(X, "sequential", accumulate="bf16", algorithm="kahan")
    assert on.route is fr.Route.COMPENSATED or not jit.enabled()
    for mode, ctx in (("up", nullcontext), ("nearest_even", jit.disabled)):
        with ctx():
            d = fr.explain(X, "sequential", accumulate="bf16", rounding=mode, algorithm="kahan")
            assert d.route is fr.Route.BLOCKS, str(d)
            assert d.inner is not None
            assert d.inner.route is fr.Route.NUMPY_COMPENSATED, str(d)
            with fr.trace_routes() as ran:
                fr.reduce(X, "sequential", accumulate="bf16", rounding=mode, algorithm="kahan")
            assert fr.Route.COMPENSATED not in ran
            assert fr.Route.NUMPY_COMPENSATED in ran
