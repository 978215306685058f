"""Rings folded row by row (core/_rotated.py): the same bits as segment by segment, numpy and the reference.

A ring's chunks are left folds whose worker orders are rotations of one order. The
row-by-row kernel makes each chunk's additions in that chunk's order (two passes over
the ring's order), so every chunk must give the bits of its own fold: checked against
the segment-by-segment kernel, the numpy path and, chunk by chunk, the exact rational
reference, across formats, modes, special values, uneven chunks and many workers.
"""

import numpy as np
import pytest
from test_tall import data, same

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.core import routes

needs_jit = pytest.mark.skipif(not jit.enabled(), reason="numba not installed or FPREDUCE_NO_JIT set")
CASES = [
    ("bf16", "bf16", "nearest_even"),
    ("bf16", "fp32", "nearest_even"),
    ("fp16", "fp16", "nearest_even"),
    ("fp32", "fp32", "up"),
    ("bf16", "bf16", "toward_zero"),
    ("fp16", "fp16", "up"),
    ("tf32", "fp8_e4m3", "down"),
    ("fp16", "fp8_e5m2", "nearest_even"),
]


def orders(name, n, relabel=None):
    p = fr.plans.parse(name, n)
    if relabel is not None:
        p = p.relabel(relabel)
    return p, routes.left_segments(p, 4096, 0, 4096).perms


def chunks(perms):
    """A plan whose chunk c folds left in the order ``perms[c]``."""
    perms = np.asarray(perms)
    n = perms.shape[1]
    return fr.plans.SegmentedPlan("chunks", n, shape=fr.plans.sequential(n), perms=perms)


def rotations(p, n):
    """(B, offs): chunk c's order is B rotated by offs[c], as the route table finds them (None: it takes the
    chunks segment by segment); checked against the route ``fr.explain`` decides."""
    rot = routes.left_segments(p, routes.ROT, 0, routes.ROT).rot
    d = fr.explain(np.zeros((n, routes.ROT), np.float32), p, input="bf16", accumulate="bf16")
    assert d.route is (fr.Route.SEGMENT_FOLDS if rot is None else fr.Route.RING_ROWS), str(d)
    return rot


@pytest.mark.parametrize("name", ["ring:nccl", "ring:gloo", "ring"])
def test_rings_are_rotations_of_one_order(name):
    n = 9
    p, perms = orders(name, n)
    B, offs = rotations(p, n)
    for s in range(perms.shape[0]):
        assert perms[s].tolist() == [int(B[(offs[s] + k) % n]) for k in range(n)]
    relabel = np.random.default_rng(1).permutation(n)
    q, _ = orders(name, n, relabel)
    assert rotations(q, n) is not None  # a ring over other workers is still a ring


def test_other_orders_are_not_rotations():
    _, perms = orders("ring:nccl", 6)
    swapped = perms.copy()
    swapped[2, [1, 3]] = swapped[2, [3, 1]]  # one chunk's order is no longer a rotation
    assert rotations(chunks(swapped), 6) is None
    rng = np.random.default_rng(2)
    assert rotations(chunks([rng.permutation(6) for _ in range(6)]), 6) is None
    with pytest.raises(fr.InvalidArgument, match="permutation"):  # not permutations: refused by the plan
        chunks([[0, 1, 1], [1, 1, 0]])
    assert rotations(chunks([[0, 1, 2], [0, 1, 2]]), 3)[1].tolist() == [0, 0]  # repeated offsets are fine


def segment_by_segment(X, p, kw):
    """The same reduction in pieces narrower than the row-by-row route's threshold (``offset``/``total``: the
    same elements, so the same chunks): each piece folds segment by segment."""
    m, step = X.shape[1], routes.ROT // 2
    with fr.trace_routes() as ran:
        out = np.concatenate([fr.reduce(X[:, a : a + step], p, offset=a, total=m, **kw) for a in range(0, m, step)])
    assert fr.Route.SEGMENT_FOLDS in ran, ran
    assert fr.Route.RING_ROWS not in ran, ran
    return out


@needs_jit
@pytest.mark.parametrize(("inp", "acc", "mode"), CASES)
@pytest.mark.parametrize(("name", "n", "m"), [("ring:nccl", 6, 2053), ("ring:gloo", 7, 2300), ("ring:nccl", 64, 2100)])
def test_row_by_row_equals_segment_by_segment_numpy_and_reference(inp, acc, mode, name, n, m):
    X = data(inp, n, m, n + m, specials=True)
    p = fr.plans.parse(name, n)
    kw = {"input": inp, "accumulate": acc, "rounding": mode}
    with fr.trace_routes() as ran:
        got = fr.reduce(X, p, **kw)
    assert ran[0] is fr.Route.RING_ROWS  # the row-by-row kernel ran
    assert same(got, segment_by_segment(X, p, kw))
    with jit.disabled():
        assert same(got, fr.reduce(X, p, **kw))
    b = p.bounds(m)
    for c in (0, n // 2, n - 1):  # whole chunks against the exact reference of their own tree
        lo, hi = int(b[c]), int(b[c + 1])
        assert same(got[lo:hi], fr.reduce_reference(X[:, lo:hi], p.trees[c], **kw)), (c, lo, hi)


@needs_jit
def test_ring_inputs_not_in_the_input_format_are_rounded_first():
    X = np.random.default_rng(3).standard_normal((5, 2500)).astype(np.float32)  # fp32 data, said to be fp16
    p = fr.plans.parse("ring:gloo", 5)
    for acc, mode in (("fp32", "nearest_even"), ("fp16", "up"), ("bf16", "toward_zero")):
        kw = {"input": "fp16", "accumulate": acc, "rounding": mode}
        got = fr.reduce(X, p, **kw)
        with jit.disabled():
            assert same(got, fr.reduce(X, p, **kw))
        assert same(got, fr.reduce(fr.round_to(X, "fp16").astype(np.float32), p, **kw))


def test_segments_are_found_once_per_plan_and_columns():
    p = fr.plans.parse("ring:nccl", 8)
    a = routes.left_segments(p, 3000, 0, 3000)
    assert routes.left_segments(p, 3000, 0, 3000) is a
    assert routes.left_segments(p, 1000, 2000, 3000) is not a  # a piece of the vector: its own segments
    q = p.relabel(np.arange(8)[::-1])
    assert not np.array_equal(routes.left_segments(q, 3000, 0, 3000).perms, a.perms)
    assert a.rot is not None
    assert routes.left_segments(p, 100, 0, 100).rot is None  # narrow: segment by segment
