"""Trees of the collective algorithms, as their sources associate the sum.

Private helpers of :mod:`fpreduce.plans` (which re-exports ``Split`` and
``PerElementPlan``): the tree builders return nested-tuple trees (see
``plans.Tree``) and do not validate their arguments (plans.py does).
What each source does, file by file, is written down in ``docs/collectives.md``.
IEEE addition is commutative, so only the grouping changes bits; the operand
order inside a pair is still kept as the source writes it (``a (op) b``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Union

import numpy as np
from numpy.typing import NDArray

from fpreduce._errors import InvalidArgument

Tree = Union[int, tuple["Tree", "Tree"]]


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


def recursive_doubling(n: int) -> Tree:
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


def rabenseifner(n: int) -> list[Tree]:
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
                (nodes[j + 1], nodes[j]) if kept_by_lower else (nodes[j], nodes[j + 1])
                for j in range(0, len(nodes), 2)
            ]
        trees.append(nodes[0])
    return trees


def halving_sizes(m: int, blocks: int) -> list[int]:
    """Block sizes of recursive vector halving (left half ``w // 2``), by position."""
    sizes = [m]
    while len(sizes) < blocks:
        sizes = [s for w in sizes for s in (w // 2, w - w // 2)]
    return sizes


def gloo_chunk(m: int, n: int, item_bytes: int, max_segment_bytes: int) -> int:
    """Elements per rank chunk in gloo's ring allreduce (``gloo/allreduce.cc`` ``ring``).

    numSegments = roundUp(max(ceil(bytes / maxSegmentBytes), 2n), n); a segment is
    ceil(m / numSegments) elements and a chunk numSegments / n segments, so the
    last chunks may be short or empty.
    """
    seg_max = item_bytes * max(1, max_segment_bytes // item_bytes)
    total = m * item_bytes
    num = max(-(-total // seg_max), 2 * n)
    num = -(-num // n) * n
    seg = -(-m // num)
    return seg * (num // n)


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


def nccl_tree(nnodes: int, g: int, which: int) -> Tree:
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


def hierarchical(nnodes: int, g: int, shard: int) -> Tree:
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


@dataclass(frozen=True)
class Split:
    """How a SegmentedPlan cuts m elements into its chunks.

    Attributes:
        kind: ``even``: ``np.array_split`` sizes (the first ``m % k`` chunks one
            larger: Open MPI's "early" and "late" blocks); ``halving``: recursive
            vector halving, left half ``w // 2`` (Rabenseifner); ``gloo``: gloo's
            ring, chunks of ``numSegments / k`` segments of ``ceil(m /
            numSegments)`` elements, trailing chunks short or empty; ``horovod``:
            k-1 equal shards of ``m // (k-1)`` elements and the remainder last;
            ``ceil``: chunks of ``ceil(m / k)`` elements, the last short or empty
            (MPICH's ring).
        item_bytes: element size in bytes (``gloo`` only; 4 for float32, 2 for
            fp16/bf16 tensors).
        max_segment_bytes: gloo's ``maxSegmentSize`` (default 1 MiB).
    """

    kind: Literal["even", "halving", "gloo", "horovod", "ceil"] = "even"
    item_bytes: int = 4
    max_segment_bytes: int = 1 << 20

    def sizes(self, m: int, k: int) -> list[int]:
        """Chunk sizes for m elements and k chunks (they sum to m)."""
        if self.kind == "halving":
            return halving_sizes(m, k)
        if self.kind == "gloo":
            chunk = gloo_chunk(m, k, self.item_bytes, self.max_segment_bytes)
            return [max(0, min(chunk, m - c * chunk)) for c in range(k)]
        if self.kind == "ceil":
            chunk = -(-m // k)
            return [max(0, min(chunk, m - c * chunk)) for c in range(k)]
        if self.kind == "horovod":
            per = m // (k - 1)
            return [per] * (k - 1) + [m - per * (k - 1)]
        return [m // k + (1 if c < m % k else 0) for c in range(k)]


def _order_dtype(n: int) -> np.dtype:
    """The smallest unsigned integer type that holds 0..n-1 (uint8, uint16, uint32 or uint64)."""
    size = 1 << max(0, ((n - 1).bit_length() - 1) // 8).bit_length()  # bytes: 1, 2, 4 or 8
    return np.dtype(f"u{size}")


def block_rows(n: int) -> int:
    """Elements per block of :func:`block_orders`: 2^16 // n rounded down to a power of two, within 64..2^15.

    About 2^16 keys (256 KiB of 32-bit keys: the block's work stays in L2), and a
    power of two that divides the engine's blocks of 2^15 elements, so none of
    those needs two blocks of orders.
    """
    return min(1 << 15, 1 << max(6, ((1 << 16) // n).bit_length() - 1))


def key_layout(n: int) -> tuple[int, int, int, int]:
    """(w, g, t, b) of the sort keys for n workers: ``g`` elements' keys share a sorted row.

    A w-bit key is ``tag << (w - t) | random << b | worker``: b = ceil(log2 n)
    (at least 1) index bits, t = ceil(log2 g) tag bits naming the element within
    the row (g = max(1, 64 // n) elements share a sorted row of about 64 keys),
    and w - t - b random bits. w = 32 when an element's chance of a tie, below
    n(n-1)/2 / 2^(w-t-b), is at most 1/8 (up to 1024 workers), else 64.
    """
    b = max(1, (n - 1).bit_length())
    g = max(1, 64 // n)
    t = (g - 1).bit_length()
    w = 32 if 32 - t - b - 3 >= 0 and n * (n - 1) // 2 <= 1 << (32 - t - b - 3) else 64
    return w, g, t, b


def block_orders(seed: int, block: int, n: int, random_bits: int | None = None) -> NDArray[np.unsignedinteger]:
    """Block ``block`` of the atomic plan's orders: shape (rows, n), ``rows = block_rows(n)``.

    Row r is the order of element ``block * rows + r`` (entry k = the worker
    added k-th), a permutation of 0..n-1 in the smallest unsigned type that
    holds n - 1 (uint8 up to 256 workers). With ``gen =
    np.random.default_rng([seed, block])`` and (w, g, t, b) = :func:`key_layout`
    ``(n)``: words of ``gen.bit_generator.random_raw``, viewed as w-bit integers
    (native byte order: low half first on x86 and ARM), are the keys of
    ``ceil(rows / g)`` sorted rows of ``g * n`` keys; key j of a row gets tag
    ``j // n`` and worker index ``j % n`` in place of its top t and low b bits
    (see :func:`key_layout`), and sorting the row sorts each of its g elements'
    n keys by their random bits (element j // n of the row: block element
    ``g * row + j // n``; the last row's surplus elements are dropped). An
    element whose random parts tie (two adjacent after sorting) draws its n keys
    again the same way, from ``gen`` (all such elements at once, in element
    order, round after round until none ties). An order is kept only when its n
    iid random parts are distinct, and then every ranking is equally likely, so
    each order is exactly uniform over the n! permutations (idealising the
    generator as iid bits), independent across elements, and a function of
    (seed, element index) only. ``random_bits`` narrows the random part (tests:
    forces ties).
    """
    keys, low = _block_keys(seed, block, n, random_bits)
    out = keys.astype(_order_dtype(n))
    np.bitwise_and(out, out.dtype.type(low), out=out)
    return out


def _block_keys(seed: int, block: int, n: int, random_bits: int | None = None) -> tuple[np.ndarray, int]:
    """The sorted keys behind :func:`block_orders` (rows, n) and the worker index mask ``2^b - 1``."""
    rows = block_rows(n)
    w, g, t, b = key_layout(n)
    r = w - t - b if random_bits is None else random_bits
    if not 0 < r <= w - t - b:
        raise InvalidArgument(f"need 0 < random_bits <= {w - t - b} for {n} workers")
    gen = np.random.default_rng([seed, block])
    kt = np.uint32 if w == 32 else np.uint64
    low = kt((1 << b) - 1)
    rand = kt(((1 << r) - 1) << b)
    j = np.arange(g * n)
    label = (j % n if t == 0 else (j // n) << (w - t) | j % n).astype(kt)  # each key's tag and worker index

    def draw(count: int) -> np.ndarray:
        """Sorted keys of ``count`` elements, shape (count, n)."""
        size = -(-count // g) * g * n
        k = gen.bit_generator.random_raw(-(-size * w // 64)).view(kt)[:size].reshape(-1, g * n)
        np.bitwise_and(k, rand, out=k)
        np.bitwise_or(k, label, out=k)
        k.sort(axis=1)
        return k.reshape(-1, n)[:count]

    def tied(k: np.ndarray) -> NDArray[np.intp]:
        """Rows of k (sorted) where two random parts tie: adjacent keys that differ only in the low b bits."""
        d = k.reshape(-1)
        diff = np.bitwise_xor(d[1:], d[:-1])
        if n < 2 or diff.min() > low:  # the common case; diff also spans row ends
            return np.empty(0, dtype=np.intp)
        close = np.zeros((k.shape[0], n), dtype=bool)
        np.less_equal(diff, low, out=close.reshape(-1)[:-1])
        close[:, -1] = False  # pairs across rows
        return np.flatnonzero(close.any(axis=1))

    keys = draw(rows)
    redo = tied(keys)
    while redo.size:
        again = draw(redo.size)
        bad = np.zeros(redo.size, dtype=bool)
        bad[tied(again)] = True
        keys[redo[~bad]] = again[~bad]
        redo = redo[bad]
    return keys, int(low)


@dataclass(frozen=True)
class PerElementPlan:
    """Every element a sequential left fold in its own uniformly random order.

    GPU ``atomicAdd`` into one accumulator per element: the N contributions land
    in whatever order the hardware serialises them. Element e's order is row
    ``e % block_rows(n)`` of :func:`block_orders` ``(seed, e // block_rows(n), n)``
    (then relabelled by ``perm``): exactly uniform over the n! orders, independent
    across elements, and a function of (seed, e) only, never of how the elements
    are chunked.

    Attributes:
        name: ``atomic``.
        n: number of workers.
        seed: the seed of the orders.
        perm: a worker relabelling applied to every order (worker w becomes
            ``perm[w]``), or None.
    """

    name: str
    n: int
    seed: int
    perm: tuple[int, ...] | None = None

    def orders(self, lo: int, hi: int) -> NDArray[np.unsignedinteger]:
        """Worker orders of elements lo..hi-1: shape (hi-lo, n), row = first to last.

        Row j is element lo + j's order (rows of :func:`block_orders`, relabelled
        by ``perm``), C-contiguous, of the smallest unsigned type that holds n - 1
        (uint8 up to 256 workers).
        """
        if not 0 <= lo <= hi:
            raise InvalidArgument(f"need 0 <= lo <= hi, got lo={lo}, hi={hi}")
        rows = block_rows(self.n)
        out = np.empty((hi - lo, self.n), dtype=_order_dtype(self.n))
        low = 0
        for b in range(lo // rows, -(-hi // rows)):
            s, e = max(lo, b * rows), min(hi, (b + 1) * rows)
            keys, low = _block_keys(self.seed, b, self.n)
            np.copyto(out[s - lo : e - lo], keys[s - b * rows : e - b * rows], casting="unsafe")  # keeps low bits
        np.bitwise_and(out, out.dtype.type(low), out=out)  # as block_orders, without a copy
        if self.perm is not None:
            out = np.asarray(self.perm, dtype=out.dtype)[out]
        return out

    def depths(self) -> NDArray[np.int64]:
        """Worst case: any worker can come first, n-1 additions from the root."""
        return np.full(self.n, self.n - 1, dtype=np.int64)

    def relabel(self, perm: Sequence[int] | np.ndarray) -> PerElementPlan:
        """Worker w becomes ``perm[w]`` in every order (composes with earlier relabels)."""
        p = check_perm(perm, self.n)
        new = p if self.perm is None else tuple(p[w] for w in self.perm)
        return PerElementPlan(self.name, self.n, self.seed, new)

    def draw(self) -> str:
        """A one-line description (the orders are per element)."""
        tail = "" if self.perm is None else f", relabelled {list(self.perm)}"
        return f"atomic: each element a sequential fold in its own random order (seed={self.seed}{tail})"


def check_perm(perm: Sequence[int] | np.ndarray, n: int) -> tuple[int, ...]:
    """``perm`` as a tuple, after checking it is a permutation of 0..n-1."""
    p = tuple(int(v) for v in perm)
    if sorted(p) != list(range(n)):
        raise InvalidArgument(f"perm must be a permutation of 0..{n - 1}")
    return p
