"""The plans of the collective algorithms, associating the sum as their sources do.

Each plan constructor (``rd``, ``linear``, ``ring``, ``rabenseifner``,
``nccl_tree``, ``hier``) checks its arguments and wraps the trees of one library's
algorithm, built by the tree builders below them (nested-tuple trees, see
:data:`~fpreduce.plans.trees.Tree`; the builders do not validate their arguments).
What each source does, file by file, is written down in ``docs/collectives.md``.
IEEE addition is commutative, so only the grouping changes bits; the operand
order inside a pair is still kept as the source writes it (``a (op) b``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.plans._checks import check_n, check_param
from fpreduce.plans.segmented import SegmentedPlan, Split
from fpreduce.plans.trees import Plan, Tree, left_fold, right_fold, sequential

__all__ = ["hier", "linear", "nccl_tree", "rabenseifner", "rd", "ring"]


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
    check_n(n)
    return Plan("rd", n, recursive_doubling_tree(n))


def linear(n: int) -> Plan:
    """Open MPI basic_linear reduce (``ompi_coll_base_reduce_intra_basic_linear``).

    The root starts from rank n-1's buffer and, for i = n-2 down to 0, computes
    ``x[i] (op) acc``: the tree ``(0+(1+(...+(n-2+n-1))))``, the association of
    :func:`reverse` with the source's operand order. Also the reduction in Open
    MPI's ``allreduce_intra_basic_linear`` (reduce to 0, then broadcast).

    >>> linear(3).draw()
    '(0+(1+2))'
    """
    check_n(n)
    return Plan("linear", n, right_fold(list(range(n))))


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
    check_n(n)
    check_param(f"ring:{convention}", "item_bytes", item_bytes, 1)
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
    gloo = Plan("sequential", n, right_fold(list(range(n))[::-1])) if convention == "gloo" else None
    shape = gloo or sequential(n)
    return SegmentedPlan(f"ring:{convention}", n, (), split, shape, orders)


def rabenseifner(n: int) -> SegmentedPlan:
    """Rabenseifner allreduce: recursive-halving reduce-scatter, then allgather.

    Open MPI ``ompi_coll_base_allreduce_intra_redscat_allgather``: p =
    2^floor(log2 n) blocks cut by recursive halving; pre-step pairs (2i, 2i+1)
    for i < n - p, then distance 1, 2, 4, ...: every block has the grouping of
    :func:`rd`; the operand order (``received (op) local``) differs per block
    (``grouping``: one tree for the whole vector, except in stochastic rounding).
    """
    check_n(n)
    trees = tuple(Plan("rabenseifner", n, t) for t in rabenseifner_trees(n))
    return SegmentedPlan("rabenseifner", n, trees, Split("halving"), grouping=rd(n))


def _nodes(n: int, gpus_per_node: int, what: str) -> int:
    check_n(n)
    check_param(what, "gpus_per_node", gpus_per_node, 1)
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
    trees = tuple(Plan("tree:nccl", n, double_tree(nnodes, gpus_per_node, w)) for w in (0, 1))
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
    trees = tuple(Plan("hier", n, hierarchical_tree(nnodes, g, s)) for s in shards)
    return SegmentedPlan(f"hier:{g}", n, trees, Split("horovod"))


# -- tree builders: nested-tuple trees, arguments not checked ----------------------------------------------------


def pow2_floor(n: int) -> int:
    """The largest power of two <= n (n >= 1)."""
    return 1 << (n.bit_length() - 1)


def butterfly(groups: Sequence[Tree]) -> Tree:
    """Combine a power-of-two list of subtrees level by level, lowest bit first.

    At level k, the groups whose (virtual) ranks differ only in bit k are added,
    the lower rank's partial sum on the left: the recursive-doubling exchange.
    """
    nodes = list(groups)
    while len(nodes) > 1:
        nodes = [(nodes[j], nodes[j + 1]) for j in range(0, len(nodes), 2)]
    return nodes[0]


def recursive_doubling_tree(n: int) -> Tree:
    """Open MPI ``allreduce_intra_recursivedoubling`` / MPICH recursive doubling.

    With p = 2^floor(log2 n) and r = n - p, ranks 2i and 2i+1 (i < r) are first
    folded into new rank i as ``x[2i] + x[2i+1]``; rank j >= 2r becomes j - r.
    The p new ranks then exchange at distances 1, 2, 4, ... and add, lower rank
    first. The r even ranks only receive the final result: all ranks hold the
    same bits.
    """
    p = pow2_floor(n)
    r = n - p
    groups: list[Tree] = [(2 * i, 2 * i + 1) if i < r else i + r for i in range(p)]
    return butterfly(groups)


def rabenseifner_trees(n: int) -> list[Tree]:
    """Open MPI ``allreduce_intra_redscat_allgather``: one tree per block.

    The p = 2^floor(log2 n) blocks are listed by position in the buffer (the
    split is recursive halving, left half ``w // 2``). Pre-step for r = n - p:
    ranks 2i (left half) and 2i+1 (right half) each reduce a half of their pair,
    ``received (op) local``. Block b ends on virtual rank v = bit-reverse(b); at
    step k (distance 2^k) the half that stays with the lower virtual rank adds
    ``higher + lower``, the other half ``lower + higher``. The grouping is the
    same as recursive doubling for every block; only operand order differs.
    """
    p = pow2_floor(n)
    r = n - p
    steps = p.bit_length() - 1
    trees: list[Tree] = []
    for b in range(p):
        left_first_half = steps == 0 or not (b >> (steps - 1)) & 1
        nodes: list[Tree] = []
        for v in range(p):
            if v < r:
                nodes.append((2 * v + 1, 2 * v) if left_first_half else (2 * v, 2 * v + 1))
            else:
                nodes.append(v + r)
        for k in range(steps):
            kept_by_lower = not (b >> (steps - 1 - k)) & 1
            nodes = [
                (nodes[j + 1], nodes[j]) if kept_by_lower else (nodes[j], nodes[j + 1]) for j in range(0, len(nodes), 2)
            ]
        trees.append(nodes[0])
    return trees


def _btree(nranks: int, rank: int) -> tuple[int, int, int]:
    """NCCL ``ncclGetBtree``: (up, down0, down1) of ``rank``, -1 for none."""
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, -1, (bit >> 1) if nranks > 1 else -1
    up = (rank ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank ^ bit
    low = bit >> 1
    d0 = rank - low if low else -1
    d1 = -1
    while low:
        if rank + low < nranks:
            d1 = rank + low
            break
        low >>= 1
    return up, d0, d1


def dtree_children(nnodes: int, which: int) -> list[tuple[int, int]]:
    """Children (down0, down1) of every node in NCCL's double binary tree ``which``.

    Tree 0 is ``ncclGetBtree``; tree 1 (``ncclGetDtree``) mirrors it (node x plays
    nnodes-1-x) for an even node count and shifts it by one for an odd count.
    """
    out = []
    for x in range(nnodes):
        if which == 0:
            _, d0, d1 = _btree(nnodes, x)
        elif nnodes % 2 == 1:
            _, a, b = _btree(nnodes, (x - 1) % nnodes)
            d0, d1 = ((a + 1) % nnodes if a >= 0 else -1), ((b + 1) % nnodes if b >= 0 else -1)
        else:
            _, a, b = _btree(nnodes, nnodes - 1 - x)
            d0, d1 = (nnodes - 1 - a if a >= 0 else -1), (nnodes - 1 - b if b >= 0 else -1)
        out.append((d0, d1))
    return out


def double_tree(nnodes: int, g: int, which: int) -> Tree:
    """One NCCL tree over ``nnodes * g`` ranks (node j = ranks j*g .. j*g+g-1).

    Within a node the ranks form a chain (local 0 is the head, local i's parent
    is local i-1; ``connect.cc`` ``ncclTopoPreset``). Across nodes the heads are
    linked by tree ``which`` of the double binary tree, with the balanced-tree
    pattern (``connectTrees``): child node down1 hangs off local rank 0, down0
    off local rank 1 (both off local 0 when g == 1). Each rank adds, in its
    ``down[]`` order, ``((own + chain child) + remote child)``.
    """
    kids = dtree_children(nnodes, which)
    down: list[list[int]] = [[] for _ in range(nnodes * g)]
    for x in range(nnodes):
        for i in range(g - 1):
            down[x * g + i].append(x * g + i + 1)
        d0, d1 = kids[x]
        at0, at1 = (x * g, x * g) if g == 1 else (x * g + 1, x * g)
        if d0 >= 0:
            down[at0].append(d0 * g)
        if d1 >= 0:
            down[at1].append(d1 * g)
    has_parent = {c for cs in down for c in cs}
    root = next(x * g for x in range(nnodes) if x * g not in has_parent)
    # post-order without recursion: a chain can be as long as g
    order: list[int] = []
    stack = [root]
    while stack:
        r = stack.pop()
        order.append(r)
        stack.extend(down[r])
    sub: dict[int, Tree] = {}
    for r in reversed(order):
        t: Tree = r
        for c in down[r]:
            t = (t, sub.pop(c))
        sub[r] = t
    return sub[root]


def hierarchical_tree(nnodes: int, g: int, shard: int) -> Tree:
    """Shard ``shard`` of a hierarchical allreduce (Horovod's NCCL+MPI scheme).

    Within each node a ring reduce-scatter over the g local ranks: shard s is
    accumulated from local rank s+1 around to s (NCCL ring convention); across
    nodes the node sums of that shard are combined by recursive doubling.
    """
    nodes = [left_fold([x * g + (shard + 1 + k) % g for k in range(g)]) for x in range(nnodes)]
    p = pow2_floor(nnodes)
    r = nnodes - p
    groups: list[Tree] = [(nodes[2 * i], nodes[2 * i + 1]) if i < r else nodes[i + r] for i in range(p)]
    return butterfly(groups)
