"""The pairwise plan's program built from n alone (core/_pairwise.py), and the text plan's tall folds.

The program equals ``_program(pairwise(n).root, n)`` op for op (compiled and plain
Python), and ``reduce(X, "pairwise")`` (no tree built) gives the bits of the plan
object, of the numpy paths and of ``reduce_reference``, stochastic rounding included.
"""

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.core import _pairwise
from fpreduce.core._fastpath import _program
from fpreduce.plans import pairwise


def same(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((np.isnan(a) & np.isnan(b)) | (a.view(np.uint64) == b.view(np.uint64))))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 100, 1000, 1025])
def test_program_equals_the_trees(n):
    prog, nbuf, root = _program(pairwise(n).root, n)
    want = np.array(prog, dtype=np.int64).reshape(-1, 3)
    got = _pairwise.pairwise_program(n)
    assert np.array_equal(got[0], want)
    assert got[1:] == (nbuf, root)
    with jit.disabled():  # the plain-Python twin
        got = _pairwise.pairwise_program(n)
    assert np.array_equal(got[0], want)
    assert got[1:] == (nbuf, root)


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
