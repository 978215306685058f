"""The tall, narrow folds of core/_chain.py (one column or a few) against the references.

Left chains rounded from the exact float64 sum's bits and pairwise folds by blocks of
contiguous leaves give, through ``reduce``, the bits of the exact rational
``reduce_reference`` (every format, every deterministic mode, odd n, blocks of both
sizes, subnormals, ties, exponent gaps that make the float64 sum inexact, overflow,
signed zeros, NaN and Inf) and of the numpy stochastic fold along the plan's tree.
"""

import numpy as np
import pytest
from test_tall import ACCS, MODES, data, same

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.core import _chain
from fpreduce.core.formats import get_format
from fpreduce.plans import pairwise

needs_jit = pytest.mark.skipif(not jit.enabled(), reason="numba not installed or FPREDUCE_NO_JIT set")


def _inp(acc):
    return "fp32" if acc == "fp64" else acc


@needs_jit
@pytest.mark.parametrize("acc", ACCS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("plan", ["sequential", "pairwise"])
@pytest.mark.parametrize("m", [1, 3, 8, 13])
def test_narrow_folds_equal_the_fraction_reference(acc, mode, plan, m):
    n = {1: 131, 3: 67, 8: 33, 13: 21}[m]  # odd: blocks of two sizes (131 = 4 blocks of 32 or 33 leaves)
    for seed in (0, 1):
        X = data(_inp(acc), n, m, seed + 10 * m, specials=seed == 1)
        kw = {"input": _inp(acc), "accumulate": acc, "rounding": mode}
        got = fr.reduce(X, plan, **kw)
        assert same(got, fr.reduce_reference(X, plan, **kw)), (seed, got, fr.reduce_reference(X, plan, **kw))


@needs_jit
@pytest.mark.parametrize("acc", ["bf16", "fp16", "fp8_e4m3", "fp32"])
@pytest.mark.parametrize("mode", MODES)
def test_long_chains_cross_signs_binades_and_inexact_sums(acc, mode):
    """Zero-mean data (the running sum changes sign), wide exponents (inexact float64 sums), shuffled rows."""
    f = get_format(acc)
    rng = np.random.default_rng(7)
    n = 700
    X = rng.standard_normal((n, 9)) * np.exp2(rng.integers(-40, 8, (n, 9)))  # 9: a row at a time
    X = fr.round_to(np.clip(X, -f.max_finite / 64, f.max_finite / 64), acc).astype(np.float32)
    kw = {"input": acc, "accumulate": acc, "rounding": mode}
    for plan in ("sequential", "pairwise", fr.plans.sequential(n, rng.permutation(n))):
        got = fr.reduce(X, plan, **kw)
        assert same(got, fr.reduce_reference(X, plan, **kw))
        assert same(got[:1], fr.reduce(X[:, :1], plan, **kw))  # one column alone: the register chain
        assert same(got[:2], fr.reduce(X[:, :2], plan, **kw))  # two: interleaved scalar chains


@needs_jit
@pytest.mark.parametrize("acc", ACCS)
@pytest.mark.parametrize("m", [1, 3, 12])
def test_stochastic_narrow_folds_equal_the_numpy_fold(acc, m):
    n = 301
    X = data(_inp(acc), n, m, 5, specials=False)
    kw = {"input": _inp(acc), "accumulate": acc, "rounding": "stochastic", "seed": 11}
    for text, plan in (("sequential", fr.plans.sequential(n)), ("pairwise", pairwise(n))):
        got = fr.reduce(X, text, **kw)
        with jit.disabled():
            want = fr.reduce(X, plan, **kw)
        assert same(got, want)


@needs_jit
def test_stochastic_chain_with_specials_and_overflow():
    X = data("bf16", 257, 2, 9, specials=True)
    kw = {"input": "bf16", "accumulate": "bf16", "rounding": "stochastic", "seed": 2}
    for text, plan in (("sequential", fr.plans.sequential(257)), ("pairwise", pairwise(257))):
        got = fr.reduce(X, text, **kw)
        with jit.disabled():
            assert same(got, fr.reduce(X, plan, **kw))


@pytest.mark.parametrize("n", [1, 2, 3, 31, 32, 63, 64, 65, 100, 131, 1000, 4097, 12345])
def test_pairwise_blocks_are_the_trees_nodes(n):
    """The boundaries are the nodes of ``pairwise(n)`` at one depth, their programs the subtrees' ops
    (numbered in post-order, run level by level)."""
    bounds, progs = _chain.pairwise_blocks(n)
    nodes = [(0, n)]
    while len(nodes) < bounds.size - 1:
        nodes = [h for lo, hi in nodes for h in ((lo, lo + (hi - lo + 1) // 2), (lo + (hi - lo + 1) // 2, hi))]
    assert [lo for lo, _ in nodes] + [n] == bounds.tolist()
    sizes = np.diff(bounds)
    c = progs.shape[1] - 1
    assert set(sizes.tolist()) <= {c, c + 1}
    assert n < 64 or sizes.min() >= 32
    for q in range(2):
        k = c + q
        want: list[tuple[int, int]] = []

        def post(t, k=k, want=want):
            if isinstance(t, int):
                return t
            a, b = post(t[0]), post(t[1])
            want.append((a, b))
            return k + len(want) - 1

        post(pairwise(k).root)
        ops = progs[q, : k - 1].tolist()
        assert sorted(ops, key=lambda o: o[2]) == [[a, b, t] for t, (a, b) in enumerate(want)]
        ready = set(range(k))  # run in this order, every op finds its operands computed
        for a, b, t in ops:
            assert {a, b} <= ready
            ready.add(k + t)
