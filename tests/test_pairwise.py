"""The pairwise plan's program built from n alone (core/_pairwise.py), and the text plan's tall folds.

The program equals the tree's op for op (compiled and in numpy: stochastic draws number the additions),
and ``reduce(X, "pairwise")`` (no tree built) gives the bits of the plan
object, of the numpy paths and of ``reduce_reference``, stochastic rounding included.
"""

from contextlib import nullcontext

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.plans import pairwise


def same(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((np.isnan(a) & np.isnan(b)) | (a.view(np.uint64) == b.view(np.uint64))))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 100, 1000, 1025])
def test_program_equals_the_trees(n):
    """``reduce(X, "pairwise")`` builds its program from n alone; the plan object ``pairwise(n)`` from its tree.
    Op for op the same: stochastic rounding numbers the additions in program order and draws by that number, so
    any other program (another tree, or the same additions in another order) gives other bits. Checked compiled
    (the row kernel) and in numpy (its stochastic fold), and in nearest even against the Fraction reference."""
    m = 20  # more columns than the chains take: the row kernel runs the program
    rng = np.random.default_rng(n)
    X = fr.round_to(rng.standard_normal((n, m)) * np.exp2(rng.integers(-12, 12, (n, m))), "bf16").astype(np.float32)
    kw = {"input": "bf16", "accumulate": "bf16", "rounding": "stochastic", "seed": 9}
    for ctx in (nullcontext, jit.disabled):
        with ctx():
            by_n = fr.reduce(X, "pairwise", **kw)
            assert same(by_n, fr.reduce(X, pairwise(n), **kw)), ctx
            if n > 3:  # (pairwise(3) is ((0, 1), 2): the left fold)
                assert fr.explain(X, "pairwise", **kw).route in (fr.Route.ROW_BLOCKS, fr.Route.SR_NUMPY)
                assert not same(by_n, fr.reduce(X, "sequential", **kw))  # the data tell trees apart
    got = fr.reduce(X, "pairwise", input="bf16", accumulate="bf16")
    if n <= 100:
        assert same(got, fr.reduce_reference(X, pairwise(n), input="bf16", accumulate="bf16"))


@pytest.mark.parametrize("acc", ["bf16", "fp32", "fp16", "fp64"])
@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "up", "stochastic"])
@pytest.mark.parametrize("m", [1, 3, 40])
def test_text_pairwise_equals_the_plan_object(acc, mode, m):
    n = 37
    rng = np.random.default_rng(m)
    X = fr.round_to(rng.standard_normal((n, m)) * np.exp2(rng.integers(-30, 30, (n, m))), "bf16").astype(np.float32)
    kw = {"input": "bf16", "accumulate": acc, "rounding": mode, "seed": 4}
    got = fr.reduce(X, "pairwise", **kw)
    assert same(got, fr.reduce(X, pairwise(n), **kw))
    with jit.disabled():
        assert same(got, fr.reduce(X, "pairwise", **kw))
    if mode != "stochastic":
        assert same(got, fr.reduce_reference(X, "pairwise", **{k: v for k, v in kw.items() if k != "seed"}))
