"""Reduction plans: the tree that associates the N workers' values.

A plan is a binary tree over worker indices, given as nested tuples: a leaf is an
``int`` (a worker), an inner node a pair ``(left, right)`` whose two partial sums
are added (and rounded) once. A sequential fold is the degenerate left-deep tree.

Text syntax (``parse``): ``sequential``, ``reverse``, ``pairwise``,
``ring:nccl|ompi|gloo`` or an explicit tree such as ``"((0,1),(2,(3,4)))"``.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np

from fpreduce._errors import InvalidArgument, unknown_name

__all__ = [
    "Plan",
    "SegmentedPlan",
    "Tree",
    "fold",
    "pairwise",
    "parse",
    "reverse",
    "ring",
    "sequential",
    "tree",
]

Tree = Union[int, tuple["Tree", "Tree"]]


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
                f"plan {self.name!r}: leaves must be each worker 0..{self.n - 1} exactly once, "
                f"got {leaves}"
            )

    def leaves(self) -> list[int]:
        """Workers in left-to-right leaf order."""
        return _leaves(self.root)

    def depths(self) -> np.ndarray:
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
        p = [int(v) for v in perm]
        if sorted(p) != list(range(self.n)):
            raise InvalidArgument(f"perm must be a permutation of 0..{self.n - 1}")

        root = fold(self.root, lambda i: p[i], lambda a, b: (a, b))
        return Plan(self.name, self.n, root)

    def draw(self) -> str:
        """The tree as text, e.g. ``((0+1)+(2+3))``."""

        return str(fold(self.root, str, lambda a, b: f"({a}+{b})"))


def sequential(n: int, order: Sequence[int] | np.ndarray | None = None) -> Plan:
    """Left fold ``((x_o0 + x_o1) + x_o2) + ...`` in ``order`` (default 0..n-1).

    Used by a parameter server or an arrival-order reduce; Open MPI's basic_linear
    reduce folds ranks N-1 down to 0 (``reverse``).
    """
    _check_n(n)
    o = list(range(n)) if order is None else [int(v) for v in order]
    t: Tree = o[0]
    for i in o[1:]:
        t = (t, i)
    return Plan("sequential", n, t)


def reverse(n: int) -> Plan:
    """Left fold from worker n-1 down to 0."""
    p = sequential(n, list(range(n - 1, -1, -1)))
    return Plan("reverse", n, p.root)


def pairwise(n: int) -> Plan:
    """Balanced binary tree over 0..n-1 (the first half gets the extra leaf).

    This is the shape of recursive doubling for a power-of-two n and of numpy's
    pairwise summation at the top level.
    """
    _check_n(n)

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


@dataclass(frozen=True)
class SegmentedPlan:
    """Different trees for consecutive element chunks (how ring all-reduce works).

    The m elements are split into ``len(trees)`` chunks as ``np.array_split`` does
    (the first ``m % k`` chunks get one extra element; Open MPI's ring calls them
    "early" blocks); chunk c is reduced with ``trees[c]``. With fewer elements than
    chunks, the trailing chunks are empty.

    Attributes:
        name: the plan's text name.
        n: number of workers.
        trees: one Plan per chunk.
    """

    name: str
    n: int
    trees: tuple[Plan, ...]

    def bounds(self, m: int) -> np.ndarray:
        """Chunk boundaries: chunk c is elements ``bounds[c]:bounds[c+1]``."""
        k = len(self.trees)
        sizes = np.full(k, m // k, dtype=np.int64)
        sizes[: m % k] += 1
        return np.concatenate([[0], np.cumsum(sizes)])

    def depths(self) -> np.ndarray:
        """Worst-case additions on each worker's path over all chunks."""
        return np.max([t.depths() for t in self.trees], axis=0)

    def relabel(self, perm: Sequence[int] | np.ndarray) -> SegmentedPlan:
        """Every chunk's tree relabelled by ``perm`` (re-ranking the ring)."""
        return SegmentedPlan(self.name, self.n, tuple(t.relabel(perm) for t in self.trees))

    def draw(self) -> str:
        """One line per chunk: ``chunk c: tree``."""
        return "\n".join(f"chunk {c}: {t.draw()}" for c, t in enumerate(self.trees))


_RING = ("nccl", "ompi", "gloo")


def ring(n: int, convention: str = "nccl") -> SegmentedPlan:
    """Ring all-reduce: chunk c is a sequential fold around the ring.

    Conventions (the fold order of chunk c, ranks mod n), as described for these
    libraries; modelled from their documented algorithms, not yet verified
    against the libraries here:

    * ``nccl``: starts at rank c+1 and ends at c (NCCL ring, MPICH ring).
    * ``ompi``: starts at rank c, ascending (Open MPI ring).
    * ``gloo``: starts at rank c-1, descending (gloo ring, torch.distributed on CPU).
    """
    _check_n(n)
    if convention == "nccl":
        orders = [[(c + 1 + k) % n for k in range(n)] for c in range(n)]
    elif convention == "ompi":
        orders = [[(c + k) % n for k in range(n)] for c in range(n)]
    elif convention == "gloo":
        orders = [[(c - 1 - k) % n for k in range(n)] for c in range(n)]
    else:
        raise unknown_name("ring convention", convention, _RING)
    return SegmentedPlan(f"ring:{convention}", n, tuple(sequential(n, o) for o in orders))


_FAMILIES = ("sequential", "reverse", "pairwise", "ring", "ring:nccl", "ring:ompi", "ring:gloo")


def parse(text: str, n: int | None = None) -> Plan | SegmentedPlan:
    """Parse a plan name (needs ``n``) or an explicit tree.

    >>> parse("pairwise", 4).draw()
    '((0+1)+(2+3))'
    """
    s = text.strip()
    if s.startswith("("):
        p = tree(s)
        if n is not None and p.n != n:
            raise InvalidArgument(f"tree {s!r} has {p.n} leaves but n={n}")
        return p
    if n is None:
        raise InvalidArgument(f"plan {s!r} needs the number of workers n")
    if s == "sequential":
        return sequential(n)
    if s == "reverse":
        return reverse(n)
    if s == "pairwise":
        return pairwise(n)
    if s == "ring" or s.startswith("ring:"):
        return ring(n, s.partition(":")[2] or "nccl")
    raise unknown_name("plan", s, _FAMILIES)


def _check_n(n: int) -> None:
    if not isinstance(n, int | np.integer) or n < 1:
        raise InvalidArgument(f"number of workers must be a positive int, got {n!r}")
