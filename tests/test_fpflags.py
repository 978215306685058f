"""Issue 13 F11: the library's intermediate floating-point flags never reach the caller.

Under ``np.errstate(all="raise")`` every public entry point of the core must give the
same bits as under numpy's defaults: underflow onto bf16/fp16, overflow of an fp16
accumulator and ``inf - inf`` are results, not errors.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpreduce as fr

FORMATS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
MODES = ("nearest_even", "toward_zero", "up", "down", "stochastic")
ALGORITHMS = ("plain", "kahan", "neumaier", "binned", "exact")
AVERAGES = ("none", "after", "premultiply", "predivide")
PLANS = ("sequential", "pairwise", "ring:nccl", "atomic", "rd", "kary:3")
DTYPES = (np.float16, np.float32, np.float64, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn)
# values that underflow, overflow or are exactly at the edges of the formats
EDGES = (0.0, -0.0, 5e-324, 1e-300, 1e-45, 1e-40, 6e-8, 1e-30, 1.0, 448.0, 65504.0, 65520.0, 3.4e38, 1e300, np.inf)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.tobytes() == b.tobytes()


def strict(fn):  # type: ignore[no-untyped-def]
    """``fn()`` with every numpy flag raising and every warning an error."""
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


@st.composite
def arrays(draw):  # type: ignore[no-untyped-def]
    n, m = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    vals = draw(
        st.lists(
            st.one_of(st.sampled_from(EDGES), st.floats(allow_nan=True, allow_infinity=True, width=64)),
            min_size=n * m,
            max_size=n * m,
        )
    )
    signs = draw(st.lists(st.sampled_from((-1.0, 1.0)), min_size=n * m, max_size=n * m))
    dt = draw(st.sampled_from(DTYPES))
    with np.errstate(all="ignore"):
        return (np.array(vals) * np.array(signs)).reshape(n, m).astype(dt)


def test_f11_the_issues_reproducers():
    X = np.array([[1e-30], [1e-30]], np.float32)
    want = fr.reduce(X, "sequential", input="fp16", accumulate="fp32")
    assert same(strict(lambda: fr.reduce(X, "sequential", input="fp16", accumulate="fp32")), want)
    assert want.tolist() == [0.0]  # 1e-30 underflows to +0 in fp16
    es = fr.exact_sum(np.array([1e-300, 1e-300]))
    with np.errstate(under="raise"):
        assert es.round("fp32").item() == 0.0


@settings(max_examples=80, deadline=None)
@given(
    arrays(),
    st.sampled_from(FORMATS),
    st.sampled_from(FORMATS),
    st.sampled_from(MODES),
    st.sampled_from(ALGORITHMS),
    st.sampled_from(AVERAGES),
    st.sampled_from(PLANS),
)
def test_f11_public_api_is_silent_and_unchanged_under_errstate_raise(X, inp, acc, mode, alg, avg, plan):
    def calls():  # type: ignore[no-untyped-def]
        es = fr.exact_sum(X)
        out = [
            fr.round_to(X, inp, mode=mode, rng=1),
            fr.to_bits(fr.round_to(X, inp), inp),
            fr.ulp(X.astype(np.float64), acc),
            es.to_float64(),
            es.round(acc, mode, rng=np.random.default_rng(2)),
            es.error_of(X[0].astype(np.float64)),
            fr.exact_sum_mpmath(X),
        ]
        try:
            out.append(fr.reduce(X, plan, input=inp, accumulate=acc, rounding=mode, seed=3, algorithm=alg, average=avg))
        except fr.InvalidArgument:  # a combination the engine refuses (e.g. binned with a directed mode, or an
            out.append(np.array([]))  # input format that cannot hold the values of X's own: bf16 X, input fp16)
        if X.size <= 12 and mode != "stochastic":
            try:
                out.append(fr.reduce_reference(X, plan, input=inp, accumulate=acc, rounding=mode))
            except fr.InvalidArgument:  # (the same refusals)
                out.append(np.array([]))
        return out

    with np.errstate(all="ignore"):
        want = calls()
    got = strict(calls)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert same(g, w)


def test_f11_the_callers_settings_are_restored():
    with np.errstate(all="raise"):
        fr.round_to(np.array([1e-30]), "fp16")
        with pytest.raises(FloatingPointError):
            _ = np.float64(1e-300) * np.float64(1e-300)
