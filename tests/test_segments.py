"""Segmented plans compiled (core/_segments.py and the engine's gathered blocks) against numpy and the reference.

Rings (left folds per chunk, and gloo's right-deep ones), recursive halving (balanced
trees per chunk), per-chunk trees of mixed shapes and atomics: the compiled paths give
the bits of the numpy paths and of the exact rational reference, special values
included, and stochastic rounding gives the same bits whole or in pieces.
"""

import numpy as np
import pytest
from test_tall import data, same, sr_tree

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.plans import Plan, SegmentedPlan

needs_jit = pytest.mark.skipif(not jit.enabled(), reason="numba not installed or FPREDUCE_NO_JIT set")
PLANS = ["ring:nccl", "ring:gloo", "rabenseifner", "tree:nccl:2", "atomic", "mixed"]
MODES = [("bf16", "nearest_even"), ("fp32", "nearest_even"), ("bf16", "toward_zero"), ("fp16", "up")]
MODES += [("tf32", "down"), ("fp64", "up"), ("fp8_e5m2", "toward_zero"), ("fp16", "nearest_even")]


def plan_of(name, n):
    if name != "mixed":
        return fr.plans.parse(name, n, seed=1)
    rng = np.random.default_rng(2)
    trees = [fr.plans.sequential(n, rng.permutation(n)), fr.plans.random_tree(n, rng), fr.plans.pairwise(n)]
    right = Plan("right", n, fr.plans.parse("((0,(1,(2,(3,(4,5))))))", n).root) if n == 6 else None
    return SegmentedPlan("mixed", n, tuple(t for t in (*trees, right) if t is not None))


def test_fold_order_of_left_and_right_deep_trees():
    """The row order the route table folds a tree in (a right-deep tree: its reversed leaves), None for others."""

    def order(t):
        n = 1 + max(int(v) for v in str(t).replace("(", " ").replace(")", " ").replace(",", " ").split())
        return fr.explain(np.zeros((n, 3), np.float32), fr.plans.tree(t)).order

    assert order((((1, 2), 3), 0)).tolist() == [1, 2, 3, 0]
    assert order((0, (1, (2, 3)))).tolist() == [3, 2, 1, 0]  # a + (b + (c + d)): d, c, b, a
    assert order(((3, 2), (1, 0))) is None
    assert fr.explain(np.zeros((1, 3), np.float32), fr.plans.tree(0)).route is fr.Route.SINGLE


@needs_jit
@pytest.mark.parametrize("name", PLANS)
@pytest.mark.parametrize(("acc", "mode"), MODES)
def test_segmented_plans_compiled_equal_numpy_and_reference(name, acc, mode):
    n, m = 6, 120
    X = data("bf16", n, m, 11, specials=True)
    p = plan_of(name, n)
    kw = {"input": "bf16", "accumulate": acc, "rounding": mode}
    got = fr.reduce(X, p, **kw)
    with jit.disabled():
        assert same(got, fr.reduce(X, p, **kw))
    assert same(got, fr.reduce_reference(X, p, **kw))


@needs_jit
@pytest.mark.parametrize("name", ["ring:nccl", "ring:gloo", "rabenseifner", "mixed"])
def test_segment_results_equal_the_reference_column_by_column(name):
    """Each chunk's own tree, element by element, against the exact rational reference of that tree."""
    n, m = 6, 90
    X = data("bf16", n, m, 12, specials=False)
    p = plan_of(name, n)
    for acc, mode in (("bf16", "toward_zero"), ("fp16", "nearest_even"), ("bf16", "up")):
        kw = {"input": "bf16", "accumulate": acc, "rounding": mode}
        got = fr.reduce(X, p, **kw)
        b = p.bounds(m)
        for c, tree in enumerate(p.trees):
            lo, hi = int(b[c]), int(b[c + 1])
            if hi > lo:
                assert same(got[lo:hi], fr.reduce_reference(X[:, lo:hi], tree, **kw)), (name, c, acc, mode)


@needs_jit
@pytest.mark.parametrize("name", PLANS)
def test_segmented_stochastic_whole_pieces_and_numpy(name):
    n, m = 6, 3000
    X = data("bf16", n, m, 13, specials=False)
    p = plan_of(name, n)
    for acc in ("bf16", "fp16"):
        kw = {"input": "bf16" if acc == "bf16" else "fp16", "accumulate": acc, "rounding": "stochastic"}
        Xi = X if acc == "bf16" else data("fp16", n, m, 13, specials=False)
        whole = fr.reduce(Xi, p, seed=9, **kw)
        with jit.disabled():
            assert same(whole, fr.reduce(Xi, p, seed=9, **kw))
        parts = [fr.reduce(Xi[:, a:b], p, seed=9, offset=a, total=m, **kw) for a, b in ((0, 1234), (1234, m))]
        assert same(whole, np.concatenate(parts))


@needs_jit
def test_ring_inputs_not_in_the_input_format_are_rounded_first():
    X = np.random.default_rng(3).standard_normal((5, 400)).astype(np.float32)  # fp32 data, said to be bf16
    p = fr.plans.parse("ring:nccl", 5)
    for acc in ("fp32", "bf16"):
        kw = {"input": "bf16", "accumulate": acc}
        got = fr.reduce(X, p, **kw)
        with jit.disabled():
            assert same(got, fr.reduce(X, p, **kw))
        assert same(got, fr.reduce(fr.round_to(X, "bf16").astype(np.float32), p, **kw))


def unordered(tree):
    """A tree with each addition's operands sorted: equal for two trees that differ only by commutation."""
    if isinstance(tree, int):
        return tree
    a, b = unordered(tree[0]), unordered(tree[1])
    return (a, b) if repr(a) <= repr(b) else (b, a)


@pytest.mark.parametrize("n", [*range(1, 20), 31, 32, 33, 48, 64])
def test_rabenseifner_chunks_are_its_grouping_but_for_operand_order(n):
    """The law behind ``grouping``: every chunk's tree is recursive doubling's, each addition's operands
    perhaps swapped (so nearest even and directed modes may fold every chunk with one tree)."""
    p = fr.plans.parse("rabenseifner", n)
    want = unordered(p.grouping.root)
    assert want == unordered(fr.plans.parse("rd", n).root)
    assert all(unordered(t.root) == want for t in p.trees)
    perm = np.random.default_rng(n).permutation(n)
    q = p.relabel(perm)
    assert all(unordered(t.root) == unordered(q.grouping.root) for t in q.trees)
    assert unordered(q.grouping.root) == unordered(fr.plans.parse("rd", n).relabel(perm).root)


@needs_jit
@pytest.mark.parametrize(
    ("acc", "mode"), [("bf16", "nearest_even"), ("fp16", "up"), ("fp32", "down"), ("bf16", "toward_zero")]
)
def test_rabenseifner_folds_one_tree_and_gives_each_chunks_bits(acc, mode):
    n, m = 12, 3000
    X = data("bf16", n, m, 14, specials=True)
    p = fr.plans.parse("rabenseifner", n).relabel(np.random.default_rng(4).permutation(n))
    kw = {"input": "bf16", "accumulate": acc, "rounding": mode}
    d = fr.explain(X, p, **kw)
    assert d.why[0].startswith("Rabenseifner's chunks share one tree"), str(d)
    with fr.trace_routes() as ran:
        got = fr.reduce(X, p, **kw)
    assert ran[0] is d.route  # the whole vector by one tree: a route of one tree, no segments
    assert not {fr.Route.SEGMENT_FOLDS, fr.Route.CHUNK_TREES, fr.Route.BLOCKS} & set(ran), ran
    with jit.disabled():
        assert same(got, fr.reduce(X, p, **kw))  # chunk by chunk, each its own tree
    b = p.bounds(m)
    for c in (0, 3, len(p.trees) - 1):
        lo, hi = int(b[c]), int(b[c + 1])
        assert same(got[lo:hi], fr.reduce_reference(X[:, lo:hi], p.trees[c], **kw))
    sr = {"rounding": "stochastic", "seed": 1, "input": "bf16", "accumulate": acc}
    d = fr.explain(X, p, **sr)
    assert not any("share one tree" in w for w in d.why), str(d)
    got = fr.reduce(X, p, **sr)  # draws follow each chunk's tree (its additions numbered in its own post-order)
    key = int(np.random.default_rng(1).integers(0, 2**63))
    for c in (0, len(p.trees) - 1):
        j = int(b[c])
        assert same(got[j], sr_tree(p.trees[c].root, X[:, j], acc, key, j)), (c, j)


@needs_jit
@pytest.mark.parametrize("name", ["tree:nccl:2", "hier:2", "mixed"])
@pytest.mark.parametrize(
    ("acc", "mode"), [("bf16", "nearest_even"), ("fp16", "up"), ("fp32", "toward_zero"), ("bf16", "stochastic")]
)
def test_wide_chunks_fold_by_their_own_compiled_tree(name, acc, mode):
    """Chunks of 2048 columns or more: each by the compiled fold of its tree (core._segments.fold_chunks)."""
    n = 6
    p = plan_of(name, n)
    m = 6300 if name == "hier:2" else 2100 * len(p.trees) + 3  # (chunks of unequal widths; hier's: 2 x 3150 and 0)
    X = data("bf16", n, m, 15, specials=mode != "stochastic")
    kw = {"input": "bf16", "accumulate": acc, "rounding": mode, "seed": 4}
    assert fr.explain(X, p, **kw).route is fr.Route.CHUNK_TREES
    with fr.trace_routes() as ran:
        got = fr.reduce(X, p, **kw)
    assert ran[0] is fr.Route.CHUNK_TREES
    assert fr.Route.BLOCKS not in ran, ran  # every chunk by its compiled tree (a refusal: the engine's blocks)
    assert all(r.compiled for r in ran[1:]), ran
    with jit.disabled():
        assert same(got, fr.reduce(X, p, **kw))
    parts = [fr.reduce(X[:, a:b], p, offset=a, total=m, **kw) for a, b in ((0, 2500), (2500, m))]
    assert same(got, np.concatenate(parts))  # pieces: chunks cut, then narrower than 2048, by the general path
    if mode != "stochastic":
        b = p.bounds(m)
        for c in range(len(p.trees)):
            lo, hi = int(b[c]), int(b[c + 1])
            if hi > lo:
                cols = np.r_[lo : lo + 20, hi - 20 : hi]
                ref = fr.reduce_reference(X[:, cols], p.trees[c], input="bf16", accumulate=acc, rounding=mode)
                assert same(got[cols], ref), (c, lo, hi)
