"""Directed modes rounded by the processor (core/_hwround.py): the same bits as the software rounding.

The compiled folds of fp32 and fp64 in toward_zero, up and down are native additions
with the thread's rounding mode set, and those of narrower formats the float32 addition
in the mode and one rounding of its pattern. Each is checked, with the hardware on and
off, against the numpy paths and the exact rational reference, on every shape the
kernels route differently (one column, interleaved columns, wide rows, trees of rows,
the scaled rows of fp16 and fp8), special values and overflow included; and the
thread's mode is nearest even again after every call.
"""

from contextlib import nullcontext

import numpy as np
import pytest
from test_tall import data, same

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.core import _hwround as hw
from fpreduce.core.formats import get_format

DIRECTED = ["toward_zero", "up", "down"]
needs_jit = pytest.mark.skipif(not jit.enabled(), reason="numba not installed or FPREDUCE_NO_JIT set")


@needs_jit
def test_the_probe_passes_and_the_switch_turns_it_off():
    """On x86-64 and AArch64 LLVM lowers llvm.set.rounding: the probe's IEEE bits hold; disabled() turns it off."""
    assert hw.available()
    with hw.disabled():
        assert not hw.available()
    assert hw.available()


@needs_jit
@pytest.mark.parametrize("mode", DIRECTED)
def test_nearest_even_is_back_after_every_fold(mode):
    """After a fold in a directed mode the thread rounds to nearest: numpy's 1 + 2**-60 is 1, -1 - 2**-60 is -1."""
    X = np.random.default_rng(0).standard_normal((6, 5000)).astype(np.float32)
    for plan, m in (("sequential", 5000), ("pairwise", 5000), ("sequential", 1), ("sequential", 12)):
        for acc in ("fp32", "fp64", "bf16", "fp16"):
            fr.reduce(fr.round_to(X[:, :m], acc if acc != "fp64" else "fp32"), plan, accumulate=acc, rounding=mode)
            one, tiny = np.array([1.0, -1.0]), np.array([2.0**-60, -(2.0**-60)])
            assert np.array_equal(one + tiny, one), (plan, m, acc)
            assert np.float32(1.0) + np.float32(2.0**-30) == np.float32(1.0)


@needs_jit
@pytest.mark.parametrize("acc", ["fp32", "fp64", "bf16", "tf32", "fp16", "fp8_e5m2", "fp8_e4m3"])
@pytest.mark.parametrize("mode", DIRECTED)
@pytest.mark.parametrize(("hardware", "specials"), [(True, False), (True, True), (False, False)])
def test_every_route_equals_numpy_and_the_reference(acc, mode, hardware, specials):
    """One column, 5 and 12 interleaved columns, 2100 columns (rows), as left folds and trees: the same bits.

    Without specials (no NaN, Inf, or sum near the top) the hardware's routes answer every
    column; with them a fold is handed to the software path, which must agree too."""
    inp = "fp32" if get_format(acc).precision > 24 else acc
    ctx = nullcontext if hardware else hw.disabled
    tree = fr.plans.random_tree(7, np.random.default_rng(5))
    for m in (1, 5, 12, 2100):
        X = data(inp, 7, m, m, specials)
        if not specials:  # no sum near the top either: the hardware's routes answer every column
            top = np.abs(X) > get_format(inp).max_finite / 64
            X[top] /= np.float32(2.0**12)  # exact: large values stay normal
        for plan in ("sequential", "pairwise", tree, fr.plans.sequential(7, [3, 1, 0, 6, 2, 5, 4])):
            kw = {"input": inp, "accumulate": acc, "rounding": mode}
            with ctx():
                got = fr.reduce(X, plan, **kw)
            with jit.disabled():
                assert same(got, fr.reduce(X, plan, **kw)), (m, plan)
            cols = np.r_[0 : min(m, 12), max(m - 12, 12) : m]
            assert same(got[cols], fr.reduce_reference(X[:, cols], plan, **kw)), (m, plan)


@needs_jit
@pytest.mark.parametrize("acc", ["fp32", "bf16", "fp16", "fp8_e4m3"])
@pytest.mark.parametrize("m", [1, 12, 3000])
def test_overflow_and_signed_zeros_by_mode(acc, m):
    """Sums beyond the top round by mode (max finite or Inf, NaN without Inf); x + (-x) is -0 only in down."""
    f = get_format(acc)
    top = np.full((4, m), f.max_finite / 2, dtype=np.float32)
    top[:, ::2] *= -1  # half the columns overflow below zero
    zeros = np.zeros((4, m), dtype=np.float32)
    zeros[1] = 1.0
    zeros[3] = -1.0  # 0 + 1 + 0 - 1: an exact zero sum of opposite signs
    for X in (top, zeros):
        for mode in DIRECTED:
            kw = {"input": acc, "accumulate": acc, "rounding": mode}
            got = fr.reduce(X, "sequential", **kw)
            with hw.disabled():
                assert same(got, fr.reduce(X, "sequential", **kw))
            assert same(got[:4], fr.reduce_reference(X[:, :4], "sequential", **kw))
    signs = np.signbit(fr.reduce(zeros, "sequential", input=acc, accumulate=acc, rounding="down"))
    assert signs.all()  # the reference agrees above; this says which way it went


@needs_jit
@pytest.mark.parametrize("fmt", ["fp64", "fp32", "bf16"])
@pytest.mark.parametrize("mode", DIRECTED)
def test_software_directed_additions_are_exact_with_the_hardware_off(fmt, mode):
    """With the processor's rounding off, every route's one addition (the software rounders: fp64's, float32's
    bits, the float64 rounder) is the exact sum rounded once (test_kernels_round's pairs, overflow included)."""
    from test_kernels_round import by_every_route, pairs, two_rows

    from fpreduce.core.exact import add_exact

    f = get_format(fmt)
    ps = pairs("fp32" if fmt == "fp64" else fmt, 300, seed=4)
    with hw.disabled():
        got, _ = by_every_route(two_rows(ps), fmt, mode)
    for (x, y), g in zip(ps, got, strict=True):
        assert same(float(g), add_exact(x, y, f, mode)), (fmt, mode, x, y, g)
