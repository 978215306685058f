"""Trees and the plans that use one tree for every element, with the simple builders.

A tree is a binary tree over worker indices, given as nested tuples (:data:`Tree`):
a leaf is an ``int`` (a worker), an inner node a pair ``(left, right)`` whose two
partial sums are added (and rounded) once. A sequential fold is the degenerate
left-deep tree. :class:`Plan` is a named tree over ``n`` workers, the same for
every element; the builders here (``sequential``, ``reverse``, ``pairwise``,
``tree``, ``kary``, ``blocked``, ``numpy_pairwise``) make one. Trees are walked
without recursion: they can be 10^4 deep.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Union

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.plans._checks import check_n, check_param, check_perm

__all__ = [
    "RANDOM_TREE",
    "Plan",
    "Tree",
    "blocked",
    "fold",
    "kary",
    "left_fold",
    "numpy_pairwise",
    "pairwise",
    "random_tree",
    "reverse",
    "right_fold",
    "sequential",
    "tree",
    "tree_from_gaps",
]

#: A binary tree over worker indices: a worker (``int``) or a pair of subtrees.
Tree = Union[int, tuple["Tree", "Tree"]]

#: The name of a random tree (shape and leaf order drawn: :func:`random_tree`), as an order policy and family.
RANDOM_TREE = "random_tree"


def _leaves(t: Tree) -> list[int]:
    out: list[int] = []
    stack = [t]
    while stack:
        node = stack.pop()
        if isinstance(node, int):
            out.append(node)
        else:
            stack.append(node[1])
            stack.append(node[0])
    return out


def fold(t: Tree, leaf, combine):  # type: ignore[no-untyped-def]
    """Evaluate a tree bottom-up without recursion (trees can be 10^4 deep).

    ``leaf(i)`` maps a worker to a value, ``combine(a, b)`` two values to one.
    """
    stack: list[tuple[Tree, bool]] = [(t, False)]
    vals: list[object] = []
    while stack:
        node, expanded = stack.pop()
        if isinstance(node, int):
            vals.append(leaf(node))
        elif expanded:
            b = vals.pop()
            a = vals.pop()
            vals.append(combine(a, b))
        else:
            stack.append((node, True))
            stack.append((node[1], False))
            stack.append((node[0], False))
    return vals[0]


def left_fold(items: Sequence[Tree]) -> Tree:
    """``((items[0] + items[1]) + items[2]) + ...``."""
    t = items[0]
    for x in items[1:]:
        t = (t, x)
    return t


def right_fold(items: Sequence[Tree]) -> Tree:
    """``items[0] + (items[1] + (... + (items[-2] + items[-1])))``: from the end."""
    t = items[-1]
    for x in items[-2::-1]:
        t = (x, t)
    return t


@dataclass(frozen=True)
class Plan:
    """A named binary tree over ``n`` workers, the same for every element.

    Attributes:
        name: how the plan was built (``sequential``, ``pairwise``, ``tree``).
        n: number of workers (leaves); every worker appears exactly once.
        root: the tree.
    """

    name: str
    n: int
    root: Tree

    def __post_init__(self) -> None:
        leaves = _leaves(self.root)
        if sorted(leaves) != list(range(self.n)):
            raise InvalidArgument(
                f"plan {self.name!r}: leaves must be each worker 0..{self.n - 1} exactly once, got {leaves}"
            )

    def leaves(self) -> list[int]:
        """Workers in left-to-right leaf order."""
        return _leaves(self.root)

    @cached_property
    def slot_shape(self) -> tuple[bytes, Tree, NDArray[np.intp]]:
        """(key, the shape over slots 0..n-1 in leaf order, slot -> worker): computed once per plan.

        A full binary tree is determined by its leaf depths in left-to-right order, so
        the depths serve as a hashable key (hashing deep nested tuples would recurse).
        The engine groups a segmented plan's chunks by it, on every call: cached (three
        walks of the tree in Python, about 10 ms at 1024 leaves).
        """
        leaves = np.array(self.leaves(), dtype=np.intp)
        slot = np.empty_like(leaves)
        slot[leaves] = np.arange(leaves.size)
        shape = fold(self.root, lambda i: int(slot[i]), lambda a, b: (a, b))
        return self.depths()[leaves].tobytes(), shape, leaves

    def depths(self) -> NDArray[np.int64]:
        """Number of additions on each worker's path to the root (d_i), indexed by worker."""
        out = np.zeros(self.n, dtype=np.int64)
        stack: list[tuple[Tree, int]] = [(self.root, 0)]
        while stack:
            t, d = stack.pop()
            if isinstance(t, int):
                out[t] = d
            else:
                stack.append((t[0], d + 1))
                stack.append((t[1], d + 1))
        return out

    def relabel(self, perm: Sequence[int] | np.ndarray) -> Plan:
        """The same shape with worker ``i`` replaced by ``perm[i]`` (re-ranking)."""
        p = check_perm(perm, self.n)
        root = fold(self.root, lambda i: p[i], lambda a, b: (a, b))
        return Plan(self.name, self.n, root)

    def draw(self) -> str:
        """The tree as text, e.g. ``((0+1)+(2+3))``."""

        return str(fold(self.root, str, lambda a, b: f"({a}+{b})"))


def sequential(n: int, order: Sequence[int] | np.ndarray | None = None) -> Plan:
    """Left fold ``((x_o0 + x_o1) + x_o2) + ...`` in ``order`` (default 0..n-1).

    Used by a parameter server or an arrival-order reduce (and, with the default
    order, by a single accumulator summing workers in rank order).
    """
    check_n(n)
    o = list(range(n)) if order is None else [int(v) for v in order]
    t: Tree = o[0]
    for i in o[1:]:
        t = (t, i)
    return Plan("sequential", n, t)


def reverse(n: int) -> Plan:
    """Left fold from worker n-1 down to 0.

    The association of Open MPI's basic_linear reduce (see :func:`linear`, which
    also keeps that source's operand order).
    """
    p = sequential(n, list(range(n - 1, -1, -1)))
    return Plan("reverse", n, p.root)


def pairwise(n: int) -> Plan:
    """Balanced binary tree over 0..n-1 (the first half gets the extra leaf).

    For a power-of-two n this is the grouping of recursive doubling (:func:`rd`);
    numpy's own pairwise summation is :func:`numpy_pairwise`.
    """
    check_n(n)

    def build(lo: int, hi: int) -> Tree:
        if hi - lo == 1:
            return lo
        mid = lo + (hi - lo + 1) // 2
        return (build(lo, mid), build(mid, hi))

    return Plan("pairwise", n, build(0, n))


def tree(spec: str | Tree) -> Plan:
    """A plan from text ``"((0,1),(2,3))"`` or nested tuples."""
    if isinstance(spec, str):
        try:
            obj = ast.literal_eval(spec)
        except (ValueError, SyntaxError):
            raise InvalidArgument(f"cannot parse tree {spec!r}; write e.g. '((0,1),(2,3))'") from None
    else:
        obj = spec

    def check(t: object) -> Tree:
        if isinstance(t, int) and not isinstance(t, bool):
            return t
        if isinstance(t, tuple) and len(t) == 2:
            return (check(t[0]), check(t[1]))
        raise InvalidArgument(f"tree nodes must be ints or pairs, got {t!r}")

    root = check(obj)
    return Plan("tree", len(_leaves(root)), root)


def kary(n: int, k: int) -> Plan:
    """k-ary reduction tree: groups of k consecutive partial sums, level by level.

    Level 0 folds workers ``0..k-1``, ``k..2k-1``, ... sequentially, each next
    level the previous level's sums (a lone trailing sum passes up): ceil(log_k n)
    levels. A fan-in-k reduce tree, e.g. a GPU block tree reduction.

    >>> kary(5, 2).draw()
    '(((0+1)+(2+3))+4)'
    """
    check_n(n)
    check_param("kary", "k", k, 2)
    nodes: list[Tree] = list(range(n))
    while len(nodes) > 1:
        nodes = [left_fold(nodes[i : i + k]) for i in range(0, len(nodes), k)]
    return Plan(f"kary:{k}", n, nodes[0])


def blocked(n: int, block: int) -> Plan:
    """Sequential within blocks of ``block`` workers, then sequential across blocks.

    How a GPU kernel with a fixed block size sums: each block accumulates its
    rows in order, then the block sums are accumulated in block order.

    >>> blocked(5, 2).draw()
    '(((0+1)+(2+3))+4)'
    """
    check_n(n)
    check_param("blocked", "block", block, 1)
    sums = [left_fold(list(range(i, min(i + block, n)))) for i in range(0, n, block)]
    return Plan(f"blocked:{block}", n, left_fold(sums))


def numpy_pairwise(n: int) -> Plan:
    """numpy's pairwise summation: the association of ``np.sum`` of n floats.

    As ``pairwise_sum`` in numpy/_core/src/umath/loops_utils.h.src: n < 8 in
    order; n <= 128: 8 strided accumulators over the multiple-of-8 prefix,
    ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the tail in order; larger n splits
    at n/2 rounded down to a multiple of 8. Bitwise equal to numpy 2.4 ``np.sum``
    of contiguous float32 vectors (tested n = 1..1000 and a few up to 4097), but
    for an all-(-0.0) sum, which numpy returns as +0.0 (its +0 initial value).
    """
    check_n(n)

    def build(lo: int, m: int) -> Tree:
        if m < 8:
            return left_fold(list(range(lo, lo + m)))
        if m <= 128:
            full = m - m % 8
            r = [left_fold(list(range(lo + j, lo + full, 8))) for j in range(8)]
            res: Tree = (((r[0], r[1]), (r[2], r[3])), ((r[4], r[5]), (r[6], r[7])))
            return left_fold([res, *range(lo + full, lo + m)])
        n2 = m // 2
        n2 -= n2 % 8
        return (build(lo, n2), build(lo + n2, m - n2))

    return Plan("numpy", n, build(0, n))


def tree_from_gaps(order: Sequence[int] | NDArray[np.integer], gaps: Sequence[int] | NDArray[np.integer]) -> Plan:
    """The tree built by closing the gaps between adjacent leaves in the order ``gaps``.

    The leaves ``order[0], ..., order[n-1]`` stand in a row with a gap ``g`` between
    positions ``g`` and ``g + 1``. Step ``k`` closes gap ``gaps[k]``: the two nodes
    on either side of it become one node, their pair. Every binary tree over the
    row arises this way; with ``gaps`` a uniformly random permutation, each step
    merges a uniformly random adjacent pair of the remaining nodes.

    Args:
        order: a permutation of ``0..n-1``.
        gaps: a permutation of ``0..n-2``.

    Returns:
        The Plan (name ``tree``).

    >>> tree_from_gaps([2, 0, 1], [1, 0]).draw()
    '(2+(0+1))'
    """
    return tree(_gap_root(order, gaps))


def random_tree(n: int, rng: np.random.Generator) -> Plan:
    """A random tree: leaves ``rng.permutation(n)``, then a random adjacent pair merged at each step.

    Step k = 0..n-2 merges the nodes i and i + 1 of the n - k nodes left, with
    ``i = rng.integers(0, n - k - 1)`` drawn one step at a time: the tree of
    :func:`tree_from_gaps` whose k-th gap is the i-th gap still open, so both draw
    the same distribution (they consume ``rng`` differently: :func:`tree_from_gaps`
    takes its gaps as a drawn permutation, vectorized over samples).

    Returns:
        The Plan (name :data:`RANDOM_TREE`); the same ``rng`` state gives the same tree.

    >>> random_tree(4, np.random.default_rng(0)).n
    4
    """
    check_n(n)
    order = rng.permutation(n)
    open_gaps = list(range(n - 1))
    gaps = [open_gaps.pop(int(rng.integers(0, len(open_gaps)))) for _ in range(n - 1)]
    return Plan(RANDOM_TREE, n, _gap_root(order, gaps))


def _gap_root(order: Sequence[int] | NDArray[np.integer], gaps: Sequence[int] | NDArray[np.integer]) -> Tree:
    """The root of :func:`tree_from_gaps` (gaps checked; order checked by the Plan)."""
    nodes: list[Tree] = [int(v) for v in order]
    g = [int(v) for v in gaps]
    if sorted(g) != list(range(len(nodes) - 1)):
        raise InvalidArgument(f"gaps must be a permutation of 0..{len(nodes) - 2}, got {g}")
    left, right = list(range(len(nodes))), list(range(len(nodes)))  # segment ends, at the ends
    for k in g:
        lo, hi = left[k], right[k + 1]
        nodes[lo] = (nodes[lo], nodes[k + 1])  # a segment's node is kept at its left end
        right[lo], left[hi] = hi, lo
    return nodes[0]
