"""Reduction plans: the tree that associates the N workers' values.

A plan is a binary tree over worker indices, given as nested tuples: a leaf is an
``int`` (a worker), an inner node a pair ``(left, right)`` whose two partial sums
are added (and rounded) once. A sequential fold is the degenerate left-deep tree.
Three kinds: :class:`Plan` (one tree for every element), :class:`SegmentedPlan`
(one tree per chunk of elements, as ring and Rabenseifner do) and
:class:`PerElementPlan` (every element its own random order: GPU atomics).

Text syntax (``parse(text, n)``), one family per item of ``FAMILIES``:

* ``sequential``, ``reverse``, ``pairwise``, ``kary:K`` (K >= 2), ``blocked:B``
  (B >= 1), ``numpy`` (numpy's own ``np.sum`` association);
* ``ring`` (= ``ring:nccl``), ``ring:nccl|mpich|ompi|gloo``; ``rd``
  (recursive doubling), ``rabenseifner``, ``linear`` (Open MPI basic_linear);
* ``tree:nccl:G`` and ``hier:G`` with G GPUs per node (G must divide n);
* ``atomic`` (seeded by ``parse(..., seed=)``);
* an explicit tree such as ``"((0,1),(2,(3,4)))"``.

Where each collective's association comes from (source file and function) is in
``docs/collectives.md``. Plans carry no values, so NaN, Inf, -0.0, overflow and
subnormals are the engine's business; a plan only fixes the association.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Union

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.plans import _collectives as _c
from fpreduce.plans._collectives import PerElementPlan, Split

__all__ = [
    "FAMILIES",
    "PerElementPlan",
    "Plan",
    "SegmentedPlan",
    "Split",
    "Tree",
    "atomic",
    "blocked",
    "fold",
    "hier",
    "kary",
    "linear",
    "nccl_tree",
    "numpy_pairwise",
    "pairwise",
    "parse",
    "rabenseifner",
    "rd",
    "reverse",
    "ring",
    "sequential",
    "tree",
]

Tree = Union[int, tuple["Tree", "Tree"]]

#: Plan family names accepted by :func:`parse` (parameters after ``:``).
FAMILIES = (
    "sequential",
    "reverse",
    "pairwise",
    "kary",
    "blocked",
    "numpy",
    "ring",
    "rd",
    "rabenseifner",
    "linear",
    "tree",
    "hier",
    "atomic",
)


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
                f"plan {self.name!r}: leaves must be each worker 0..{self.n - 1} exactly once, got {leaves}"
            )

    def leaves(self) -> list[int]:
        """Workers in left-to-right leaf order."""
        return _leaves(self.root)

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
        p = _check_perm(perm, self.n)
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
    _check_n(n)
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


def kary(n: int, k: int) -> Plan:
    """k-ary reduction tree: groups of k consecutive partial sums, level by level.

    Level 0 folds workers ``0..k-1``, ``k..2k-1``, ... sequentially, each next
    level the previous level's sums (a lone trailing sum passes up): ceil(log_k n)
    levels. A fan-in-k reduce tree, e.g. a GPU block tree reduction.

    >>> kary(5, 2).draw()
    '(((0+1)+(2+3))+4)'
    """
    _check_n(n)
    _check_param("kary", "k", k, 2)
    nodes: list[Tree] = list(range(n))
    while len(nodes) > 1:
        nodes = [_c.left_fold(nodes[i : i + k]) for i in range(0, len(nodes), k)]
    return Plan(f"kary:{k}", n, nodes[0])


def blocked(n: int, block: int) -> Plan:
    """Sequential within blocks of ``block`` workers, then sequential across blocks.

    How a GPU kernel with a fixed block size sums: each block accumulates its
    rows in order, then the block sums are accumulated in block order.

    >>> blocked(5, 2).draw()
    '(((0+1)+(2+3))+4)'
    """
    _check_n(n)
    _check_param("blocked", "block", block, 1)
    sums = [_c.left_fold(list(range(i, min(i + block, n)))) for i in range(0, n, block)]
    return Plan(f"blocked:{block}", n, _c.left_fold(sums))


def numpy_pairwise(n: int) -> Plan:
    """numpy's pairwise summation: the association of ``np.sum`` of n floats.

    As ``pairwise_sum`` in numpy/_core/src/umath/loops_utils.h.src: n < 8 in
    order; n <= 128: 8 strided accumulators over the multiple-of-8 prefix,
    ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the tail in order; larger n splits
    at n/2 rounded down to a multiple of 8. Bitwise equal to numpy 2.4 ``np.sum``
    of contiguous float32 vectors (tested n = 1..1000 and a few up to 4097), but
    for an all-(-0.0) sum, which numpy returns as +0.0 (its +0 initial value).
    """
    _check_n(n)

    def build(lo: int, m: int) -> Tree:
        if m < 8:
            return _c.left_fold(list(range(lo, lo + m)))
        if m <= 128:
            full = m - m % 8
            r = [_c.left_fold(list(range(lo + j, lo + full, 8))) for j in range(8)]
            res: Tree = (((r[0], r[1]), (r[2], r[3])), ((r[4], r[5]), (r[6], r[7])))
            return _c.left_fold([res, *range(lo + full, lo + m)])
        n2 = m // 2
        n2 -= n2 % 8
        return (build(lo, n2), build(lo + n2, m - n2))

    return Plan("numpy", n, build(0, n))


def rd(n: int) -> Plan:
    """Recursive doubling allreduce (Open MPI, MPICH).

    Open MPI ``ompi_coll_base_allreduce_intra_recursivedoubling`` and MPICH
    ``MPIR_Allreduce_intra_recursive_doubling``. With p = 2^floor(log2 n), ranks
    2i and 2i+1 (i < n - p) first fold as ``x[2i] + x[2i+1]`` (the even rank only
    gets the final result); the p new ranks then exchange at distance 1, 2, 4, ...:
    a balanced tree over them, depth log2 n for a power of two.

    >>> rd(5).draw()
    '(((0+1)+2)+(3+4))'
    """
    _check_n(n)
    return Plan("rd", n, _c.recursive_doubling(n))


def linear(n: int) -> Plan:
    """Open MPI basic_linear reduce (``ompi_coll_base_reduce_intra_basic_linear``).

    The root starts from rank n-1's buffer and, for i = n-2 down to 0, computes
    ``x[i] (op) acc``: the tree ``(0+(1+(...+(n-2+n-1))))``, the association of
    :func:`reverse` with the source's operand order. Also the reduction in Open
    MPI's ``allreduce_intra_basic_linear`` (reduce to 0, then broadcast).

    >>> linear(3).draw()
    '(0+(1+2))'
    """
    _check_n(n)
    return Plan("linear", n, _c.right_fold(list(range(n))))


class _ShapedTrees(Sequence[Plan]):
    """``trees`` of a SegmentedPlan given as one shape and a leaf order per chunk (lazy)."""

    def __init__(self, name: str, shape: Plan, perms: NDArray[np.intp]) -> None:
        self._name, self._shape, self._perms = name, shape, perms

    def __len__(self) -> int:
        return int(self._perms.shape[0])

    def __getitem__(self, c):  # type: ignore[no-untyped-def, override]
        if isinstance(c, slice):
            return [self[i] for i in range(*c.indices(len(self)))]
        t = self._shape.relabel(self._perms[c])
        return Plan(self._name, t.n, t.root)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _ShapedTrees):
            return self._shape == other._shape and np.array_equal(self._perms, other._perms)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._shape, self._perms.tobytes()))


@dataclass(frozen=True)
class SegmentedPlan:
    """Different trees for consecutive element chunks (how ring all-reduce works).

    The m elements are split into ``len(trees)`` chunks as ``split`` says (by
    default as ``np.array_split`` does: the first ``m % k`` chunks get one extra
    element; Open MPI's ring calls them "early" blocks); chunk c is reduced with
    ``trees[c]``. With fewer elements than chunks, the trailing chunks are empty.

    When every chunk has the same tree shape and only the leaf order changes (a
    ring), give ``shape`` (a tree over slots 0..n-1) and ``perms`` (chunk c puts
    worker ``perms[c][k]`` in slot k) instead of ``trees``: ``trees`` is then built
    lazily, and the engine runs all chunks as one vectorized fold.

    Attributes:
        name: the plan's text name.
        n: number of workers.
        trees: one Plan per chunk.
        split: how chunk sizes are derived from the element count.
        shape: the common tree over slots (or None).
        perms: per chunk, slot -> worker (with ``shape``).
    """

    name: str
    n: int
    trees: Sequence[Plan] = ()
    split: Split = field(default_factory=Split)
    shape: Plan | None = None
    perms: Sequence[Sequence[int]] | NDArray[np.intp] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.shape is None:
            return
        P = np.array(self.perms, dtype=np.intp).reshape(len(self.perms), self.n)  # a private copy
        P.flags.writeable = False
        if not np.array_equal(np.sort(P, axis=1), np.broadcast_to(np.arange(self.n), P.shape)):
            raise InvalidArgument(f"plan {self.name!r}: every chunk's order must be a permutation of 0..{self.n - 1}")
        object.__setattr__(self, "trees", _ShapedTrees(self.name, self.shape, P))

    @property
    def chunk_orders(self) -> NDArray[np.intp] | None:
        """(chunks, n) slot -> worker array of a shaped plan, else None."""
        return self.trees._perms if isinstance(self.trees, _ShapedTrees) else None

    def bounds(self, m: int) -> NDArray[np.int64]:
        """Chunk boundaries: chunk c is elements ``bounds[c]:bounds[c+1]``."""
        sizes = np.array(self.split.sizes(int(m), len(self.trees)), dtype=np.int64)
        return np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(sizes)])

    def depths(self) -> NDArray[np.int64]:
        """Worst-case additions on each worker's path over all chunks."""
        P = self.chunk_orders
        if P is None or self.shape is None:
            return np.max([t.depths() for t in self.trees], axis=0)
        out = np.zeros(self.n, dtype=np.int64)
        np.maximum.at(out, P.ravel(), np.tile(self.shape.depths(), P.shape[0]))
        return out

    def relabel(self, perm: Sequence[int] | np.ndarray) -> SegmentedPlan:
        """Every chunk's tree relabelled by ``perm`` (re-ranking the ring)."""
        P = self.chunk_orders
        if P is None or self.shape is None:
            trees = tuple(t.relabel(perm) for t in self.trees)
            return SegmentedPlan(self.name, self.n, trees, self.split)
        p = np.asarray(perm, dtype=np.intp)
        if p.shape != (self.n,) or not np.array_equal(np.sort(p), np.arange(self.n)):
            raise InvalidArgument(f"perm must be a permutation of 0..{self.n - 1}")
        return SegmentedPlan(self.name, self.n, (), self.split, self.shape, p[P])

    def draw(self) -> str:
        """One line per chunk: ``chunk c: tree``."""
        return "\n".join(f"chunk {c}: {t.draw()}" for c, t in enumerate(self.trees))


_RING = ("nccl", "mpich", "ompi", "gloo")


def ring(n: int, convention: str = "nccl", *, item_bytes: int = 4) -> SegmentedPlan:
    """Ring all-reduce: chunk c is a sequential fold around the ring.

    Conventions (fold order of chunk c, ranks mod n; sources in docs/collectives.md):

    * ``nccl``: c+1, c+2, ..., c (NCCL ``runRing``); even split (NCCL's
      per-channel, per-loop chunking is not modelled).
    * ``mpich``: same order (``MPIR_Allreduce_intra_ring``), ceil(m/n) chunks.
    * ``ompi``: c, c+1, ..., c-1 (Open MPI ``allreduce_intra_ring`` and
      ``_ring_segmented``); early/late blocks (Open MPI uses rd when m < n).
    * ``gloo``: c-1, c-2, ..., c (gloo ``allreduce.cc`` ``ring``, used by
      torch.distributed's gloo backend on CPU), written ``local + partial``
      as gloo does; gloo's segment sizing for elements of ``item_bytes`` bytes.
    """
    _check_n(n)
    _check_param(f"ring:{convention}", "item_bytes", item_bytes, 1)
    c, k = np.arange(n)[:, None], np.arange(n)[None, :]
    if convention in ("nccl", "mpich"):
        orders = (c + 1 + k) % n
    elif convention == "ompi":
        orders = (c + k) % n
    elif convention == "gloo":
        orders = (c - 1 - k) % n
    else:
        raise unknown_name("ring convention", convention, _RING)
    split = {"gloo": Split("gloo", item_bytes=item_bytes), "mpich": Split("ceil")}.get(convention, Split())
    # gloo computes ``local (op) received``: right-nested
    gloo = Plan("sequential", n, _c.right_fold(list(range(n))[::-1])) if convention == "gloo" else None
    shape = gloo or sequential(n)
    return SegmentedPlan(f"ring:{convention}", n, (), split, shape, orders)


def rabenseifner(n: int) -> SegmentedPlan:
    """Rabenseifner allreduce: recursive-halving reduce-scatter, then allgather.

    Open MPI ``ompi_coll_base_allreduce_intra_redscat_allgather``: p =
    2^floor(log2 n) blocks cut by recursive halving; pre-step pairs (2i, 2i+1)
    for i < n - p, then distance 1, 2, 4, ...: every block has the grouping of
    :func:`rd`; the operand order (``received (op) local``) differs per block.
    """
    _check_n(n)
    trees = tuple(Plan("rabenseifner", n, t) for t in _c.rabenseifner(n))
    return SegmentedPlan("rabenseifner", n, trees, Split("halving"))


def _nodes(n: int, gpus_per_node: int, what: str) -> int:
    _check_n(n)
    _check_param(what, "gpus_per_node", gpus_per_node, 1)
    if n % gpus_per_node:
        raise InvalidArgument(f"plan {what!r}: gpus_per_node={gpus_per_node} does not divide n={n} workers")
    return n // gpus_per_node


def nccl_tree(n: int, gpus_per_node: int) -> SegmentedPlan:
    """NCCL's tree allreduce: a chain in each node, a double binary tree across nodes.

    Worker j*G + i is GPU i of node j (G = ``gpus_per_node`` must divide n).
    The first half of the elements goes up tree 0 (``ncclGetBtree``, trees.cc),
    the second half up tree 1 (``ncclGetDtree``: mirrored or shifted). Inside a
    node a chain from local rank 0; child nodes attach as in ``connectTrees``
    (balanced pattern). Each rank adds ``((own + down[0]) + down[1]) + ...``.
    """
    nnodes = _nodes(n, gpus_per_node, "tree:nccl")
    trees = tuple(Plan("tree:nccl", n, _c.nccl_tree(nnodes, gpus_per_node, w)) for w in (0, 1))
    return SegmentedPlan(f"tree:nccl:{gpus_per_node}", n, trees)


def hier(n: int, gpus_per_node: int) -> SegmentedPlan:
    """Hierarchical allreduce: intra-node reduce-scatter, inter-node allreduce.

    Horovod's ``NCCLHierarchicalAllreduce``: G equal shards of m // G elements,
    shard s folded in every node around its ring from local rank s+1 to s, then
    across nodes (modelled as recursive doubling); the m % G remaining elements
    (last chunk) are reduced to local rank G-1 the same way. Worker j*G + i is
    GPU i of node j; G must divide n.
    """
    nnodes = _nodes(n, gpus_per_node, "hier")
    g = gpus_per_node
    shards = [*range(g), g - 1]
    trees = tuple(Plan("hier", n, _c.hierarchical(nnodes, g, s)) for s in shards)
    return SegmentedPlan(f"hier:{g}", n, trees, Split("horovod"))


def atomic(n: int, seed: int = 0) -> PerElementPlan:
    """GPU atomics: each element summed in its own uniformly random, seeded order."""
    _check_n(n)
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise InvalidArgument(f"seed must be a non-negative int, got {seed!r}")
    return PerElementPlan("atomic", n, int(seed))


AnyPlan = Union[Plan, SegmentedPlan, PerElementPlan]


def parse(text: str, n: int | None = None, *, seed: int | None = 0) -> AnyPlan:
    """Parse a plan name (needs ``n``) or an explicit tree; see the module docstring.

    Args:
        text: a family from ``FAMILIES`` with its parameters (``kary:4``,
            ``ring:gloo``, ``tree:nccl:8``, ``hier:8``) or a tree ``"((0,1),2)"``.
        n: number of workers (optional for an explicit tree, checked if given).
        seed: the seed of ``atomic``'s orders (None means 0; ignored by the
            other families).

    Raises:
        InvalidArgument: unknown family (with a close-match hint), bad parameter,
            G not dividing n, or a tree whose leaves are not 0..n-1.

    >>> parse("pairwise", 4).draw()
    '((0+1)+(2+3))'
    >>> parse("kary:3", 4).draw()
    '(((0+1)+2)+3)'
    """
    s = text.strip()
    if s.startswith("("):
        p = tree(s)
        if n is not None and p.n != n:
            raise InvalidArgument(f"tree {s!r} has {p.n} leaves but n={n}")
        return p
    family, _, arg = s.partition(":")
    if family not in FAMILIES:
        raise unknown_name("plan", s, FAMILIES)
    if n is None:
        raise InvalidArgument(f"plan {s!r} needs the number of workers n")
    if family in _SIMPLE or family == "atomic":
        if arg:
            raise InvalidArgument(f"plan {family!r} takes no parameter, got {s!r}")
        return atomic(n, seed or 0) if family == "atomic" else _SIMPLE[family](n)
    if family == "ring":
        return ring(n, arg or "nccl")
    if family == "tree":
        kind, _, g = arg.partition(":")
        if kind != "nccl":
            raise unknown_name("tree kind", kind, ("nccl",))
        return nccl_tree(n, _int_param(s, "gpus_per_node", g, "tree:nccl:8"))
    if family == "kary":
        return kary(n, _int_param(s, "k", arg, "kary:4"))
    if family == "blocked":
        return blocked(n, _int_param(s, "block", arg, "blocked:8"))
    return hier(n, _int_param(s, "gpus_per_node", arg, "hier:8"))


_SIMPLE: dict[str, Callable[[int], Plan | SegmentedPlan]] = {
    "sequential": sequential,
    "reverse": reverse,
    "pairwise": pairwise,
    "numpy": numpy_pairwise,
    "rd": rd,
    "rabenseifner": rabenseifner,
    "linear": linear,
}


def _int_param(text: str, what: str, arg: str, example: str) -> int:
    try:
        return int(arg)
    except ValueError:
        raise InvalidArgument(
            f"plan {text!r}: {what} must be an integer, got {arg!r}; write e.g. {example!r}"
        ) from None


def _check_param(family: str, what: str, v: object, least: int) -> None:
    if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < least:
        raise InvalidArgument(f"plan {family!r}: {what} must be an integer >= {least}, got {v!r}")


_check_perm = _c.check_perm


def _check_n(n: int) -> None:
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 1:
        raise InvalidArgument(f"number of workers must be a positive int, got {n!r}")
