"""The compiled binned sum (fpreduce/core/_binned.py) against its numpy path, bit for bit.

``algorithms.binned`` computes the exact bin sums in one numba pass when it can and
with numpy otherwise (``jit.disabled()``); both must give the same bits for every
format, mode, input dtype, shape and special value. The properties of the binned sum
itself (order independence, the bound, equality with ``exact``) are in
tests/test_algorithms.py and run on whichever path is enabled; here they are also
checked on the compiled path explicitly.
"""

from contextlib import nullcontext

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.core import _binned
from fpreduce.core.algorithms import binned, exact
from fpreduce.core.rounding import Mode
from tests.test_algorithms import MODES, columns, same

needs_jit = pytest.mark.skipif(not jit.enabled(), reason="numba not installed or FPREDUCE_NO_JIT set")
FORMATS = ["fp64", "fp32", "bf16", "fp16", "fp8_e5m2", "fp8_e4m3"]


def numpy_binned(X, fmt, mode="nearest_even", **kw):
    with jit.disabled():
        return binned(X, fmt, mode, **kw)


def spread(rng, shape, span, dtype):
    """Normal values times 2**U(-span, span), with every kind of special sprinkled in."""
    X = (rng.standard_normal(shape) * 2.0 ** rng.uniform(-span, span, shape)).astype(dtype)
    n, m = shape
    tiny = np.finfo(dtype).smallest_subnormal
    X[rng.integers(0, n, m // 7), rng.integers(0, m, m // 7)] = 0.0
    X[rng.integers(0, n, m // 11), rng.integers(0, m, m // 11)] = -0.0
    X[rng.integers(0, n, m // 13), rng.integers(0, m, m // 13)] = tiny * rng.integers(-5, 5, m // 13)
    X[:, 3] = -0.0  # every term -0.0
    X[:, 4] = [-0.0, 0.0] * (n // 2) + [-0.0] * (n % 2)  # mixed zeros: +0.0
    X[:, 5] = tiny  # subnormals only
    X[0, 6], X[0, 7], X[-1, 7], X[0, 8], X[-1, 8] = np.nan, np.inf, -np.inf, -np.inf, -np.inf
    X[:, 9] = np.float32(2.0**-20) if dtype == np.float32 else 2.0**-1000
    X[0, 9] = 1.0  # the smallest values sit at the window's edge
    return X


@needs_jit
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("span", [0, 8, 40, 120], ids=lambda s: f"2**+-{s}")
@pytest.mark.parametrize("n", [1, 3, 4, 9, 64])
def test_compiled_equals_numpy_on_spreads_and_specials(n, span, dtype):
    rng = np.random.default_rng(n * 1000 + span)
    m = (1 << 13) + 2 * 2048 + 37  # several compiled blocks and numpy blocks (2**13 columns), a short last one
    X = spread(rng, (n, m), span, dtype)
    assert _binned.sums_compiled(X, fr.get_format("bf16"), Mode.NEAREST_EVEN) is not None  # compiled
    for fmt in FORMATS:
        for mode in MODES:
            assert same(binned(X, fmt, mode), numpy_binned(X, fmt, mode)), (fmt, mode)
    for fmt in ("bf16", "fp16", "fp32"):  # the shared final rounding draws the same numbers
        assert same(binned(X, fmt, "stochastic", rng=7), numpy_binned(X, fmt, "stochastic", rng=7))


@needs_jit
@pytest.mark.parametrize("fmt", ["fp64", "bf16"])
def test_compiled_equals_numpy_when_some_blocks_need_the_grid(fmt):
    # block 0: all values on the grid of bin 2 (the short path); block 1: one value below it
    rng = np.random.default_rng(5)
    X = rng.standard_normal((10, 5 * 2048)).astype(np.float32)
    X[4, 2048 + 17] = np.float32(2.0**-70)  # below 2**(E - 55): its ulp is under the window's grid
    X[7, 2 * 2048 + 1] = np.float32(-(2.0**-100))
    X[:, [3 * 2048, 4 * 2048]] = 0.0
    X[0, [3 * 2048, 4 * 2048]] = 1.0  # E = 1: the grid of bin 2 is 2**-77
    X[1, 3 * 2048] = (1 + 2.0**-23) * 2.0**-54  # ulp 2**-77: on the grid, the block takes the short path
    X[1, 4 * 2048] = (1 + 2.0**-23) * 2.0**-55  # ulp 2**-78: a tie on the grid, kept as 2**-55 (even)
    X[2, 4 * 2048] = -(2.0**-55)  # so B = 1 exactly (S = 1 + 2**-78)
    for mode in MODES:
        assert same(binned(X, fmt, mode), numpy_binned(X, fmt, mode))
    y = binned(X[:, [3 * 2048, 4 * 2048]], "fp64", "up")
    assert y.tolist() == [1 + 2.0**-52, 1.0]


@needs_jit
def test_compiled_reads_any_layout():
    rng = np.random.default_rng(2)
    X = spread(rng, (300, 64), 30, np.float32)
    for view in (X[::2, ::3], X[:, 1:], X.T.copy().T):  # strided, offset (numba layout A), Fortran order (F)
        assert same(binned(view, "bf16"), numpy_binned(view, "bf16"))
    half = spread(rng, (30, 64), 4, np.float16)  # another dtype: the numpy path
    assert _binned.sums_compiled(half, fr.get_format("fp32"), Mode.NEAREST_EVEN) is None
    assert same(binned(half, "fp32"), numpy_binned(half, "fp32"))


@needs_jit
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["fp64", "fp32", "bf16", "fp16"])
@settings(max_examples=max(5, settings.default.max_examples // 2))
@given(data=st.data())
def test_compiled_equals_numpy_on_drawn_columns(fmt, mode, data):
    src = fr.get_format(data.draw(st.sampled_from(["fp32", "bf16", "fp64"])))
    X = data.draw(columns(src, max_n=12))
    if np.abs(X).max() >= 2.0**960:
        with pytest.raises(fr.InvalidArgument, match="2\\*\\*960"):
            binned(X, fmt, mode)
        return
    assert same(binned(X, fmt, mode), numpy_binned(X, fmt, mode))
    with np.errstate(over="ignore"):
        X32 = X.astype(np.float32)  # float32 input: the kernel reads float32 (overflow to Inf included)
    assert same(binned(X32, fmt, mode), numpy_binned(X32, fmt, mode))


@needs_jit
@pytest.mark.parametrize("n", [5, 64, 131])
def test_compiled_permutations_give_identical_bits(n):
    rng = np.random.default_rng(n)
    X = spread(rng, (n, 5000), 25, np.float32)
    y = binned(X, "bf16")
    y64 = binned(X.astype(np.float64), "fp64", "up")
    for _ in range(4):
        p = rng.permutation(n)
        assert same(y, binned(X[p], "bf16"))
        assert same(y64, binned(X[p].astype(np.float64), "fp64", "up"))


@needs_jit
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["fp64", "fp32", "bf16", "fp16", "fp8_e5m2"])
def test_compiled_equals_exact_when_the_window_covers_the_data(fmt, mode):
    # fp32 values within 2**-54 of each column's max: B == S, so binned is exact's rounding
    rng = np.random.default_rng(11)
    mant = rng.integers(1, 2**24, (37, 3000)) * rng.choice([-1, 1], (37, 3000))
    X = mant * 2.0 ** rng.integers(-40, 6, (37, 3000))
    X[:, ::5] = X[:, ::5] * 2.0 ** rng.integers(-20, 0, (37, 1))  # larger spread in some columns
    X[:, 7] = -0.0
    assert same(binned(X, fmt, mode), exact(X, fmt, mode))
    assert same(binned(X.astype(np.float32), fmt, mode), exact(X, fmt, mode))


@needs_jit
def test_compiled_limits_and_messages():
    X = np.ones((5, 3000))
    X[2, 2500] = 2.0**961
    with pytest.raises(fr.InvalidArgument, match="2\\*\\*960"):
        binned(X, "fp64")
    X[2, 2500], X[3, 2500] = np.inf, 2.0**960  # beside an Inf: still too big
    with pytest.raises(fr.InvalidArgument, match="2\\*\\*960"):
        binned(X, "fp64")
    X[3, 2500] = 2.0**959
    assert same(binned(X, "fp64"), numpy_binned(X, "fp64"))
    assert binned(X, "fp64")[2500] == np.inf


@pytest.mark.parametrize("where", [None, (0, 0), (3, 69_999)], ids=["on-grid", "first", "last"])
@pytest.mark.parametrize("fin", ["bf16", "tf32"])
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_engine_binned_checks_the_input_format_while_it_reads(fin, where, compiled):
    # float32 X given as bf16/tf32 input: the compiled pass checks the low bits as it reads X;
    # one value off the format's grid (first or last block) sends X through the loader (rounded)
    rng = np.random.default_rng(4)
    X = fr.round_to(rng.standard_normal((4, 70_000)).astype(np.float32), fin)
    if where is not None:
        X[where] = np.float32(1 + 2.0**-20)
    with jit.disabled() if not compiled else nullcontext():
        y = fr.reduce(X, "sequential", input=fin, accumulate="fp32", algorithm="binned")
        avg = fr.reduce(X, "sequential", input=fin, accumulate="bf16", algorithm="binned", average="premultiply")
    assert same(y, numpy_binned(fr.round_to(X, fin), "fp32"))  # fp32 shows the 2**-20 a skipped check keeps
    assert same(avg, numpy_binned(fr.round_to(fr.round_to(X, fin) * 0.25, fin), "bf16"))


def test_reduce_binned_stochastic_takes_the_seed():
    """fr.reduce(..., algorithm="binned", rounding="stochastic", seed=s): seeded, order independent (it raised
    'needs rng=' though a seed was given)."""
    X = np.random.default_rng(0).standard_normal((9, 300)).astype(np.float32)
    kw = {"accumulate": "bf16", "algorithm": "binned", "rounding": "stochastic"}
    once = fr.reduce(X, "sequential", seed=1, **kw)
    assert same(once, fr.reduce(X[::-1], "sequential", seed=1, **kw))
    assert not same(once, fr.reduce(X, "sequential", seed=2, **kw))
