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

from fpreduce.base.errors import InvalidArgument
from fpreduce.base.jit import jit

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
                (nodes[j + 1], nodes[j]) if kept_by_lower else (nodes[j], nodes[j + 1]) for j in range(0, len(nodes), 2)
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


_M64 = (1 << 64) - 1
_GOLD = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_REDRAW = 0xD1B54A32D192ED03  # separates an element's redraw stream from its main one
_U64 = np.uint64
_DRAW_BITS = 32  # bits per draw; tests narrow these two (n <= 2^bits) to force the rejection path
_GROUP_BITS = 20  # Fisher-Yates steps share a draw while the product of their ranges is <= 2^this
USE_JIT = True  # tests set False to force the numpy orders (the kernel is also checked against them)


def _order_dtype(n: int) -> np.dtype:
    """The smallest unsigned integer type that holds 0..n-1 (uint8, uint16, uint32 or uint64)."""
    size = 1 << max(0, ((n - 1).bit_length() - 1) // 8).bit_length()  # bytes: 1, 2, 4 or 8
    return np.dtype(f"u{size}")


def _mix_int(z: int) -> int:
    """The splitmix64 finalizer on a Python int (mod 2^64)."""
    z &= _M64
    z = ((z ^ (z >> 30)) * _MIX1) & _M64
    z = ((z ^ (z >> 27)) * _MIX2) & _M64
    return z ^ (z >> 31)


def atomic_key(seed: int) -> int:
    """The 64-bit key of the atomic plan's orders for ``seed`` (any integer >= 0, 64 bits at a time)."""
    s, k = int(seed), 0
    while True:
        k = _mix_int((k ^ (s & _M64)) + _GOLD)
        s >>= 64
        if not s:
            return k


def _mix(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer on a uint64 array (wraps mod 2^64)."""
    z = (z ^ (z >> _U64(30))) * _U64(_MIX1)
    z = (z ^ (z >> _U64(27))) * _U64(_MIX2)
    return z ^ (z >> _U64(31))


def _check_bits(n: int, bits: int) -> None:
    if not (1 <= bits <= 32 and n <= 1 << bits):
        raise InvalidArgument(f"need 1 <= bits <= 32 and n <= 2^bits, got bits={bits} for {n} workers")


def draw_groups(n: int, bits: int = 32, group_bits: int = 20) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
    """The Fisher-Yates steps that share a draw, and each group's rejection threshold.

    Steps k = 0..n-2 (range s = n - k) are grouped greedily from k = 0: a group
    takes the next step while the product P of its ranges stays <= 2^min(group_bits,
    bits) (a group has at least one step). Returns (starts, thresholds): group g is
    steps ``starts[g]..starts[g+1]-1`` and rejects when the remainder of its draw is
    below ``(2^bits - P) % P`` (below 2^-12 of the draws for the defaults).
    """
    _check_bits(n, bits)
    limit = 1 << min(group_bits, bits)
    starts, thr = [0], []
    k = 0
    while k < n - 1:
        P = n - k
        k += 1
        while k < n - 1 and P * (n - k) <= limit:
            P *= n - k
            k += 1
        starts.append(k)
        thr.append(((1 << bits) - P) % P)
    if n <= 1:
        starts = [0]
    return np.array(starts, dtype=np.int64), np.array(thr, dtype=np.uint64)


def orders_numpy(
    key: int, lo: int, hi: int, init: np.ndarray, bits: int = 32, group_bits: int = 20
) -> NDArray[np.unsignedinteger]:
    """The orders of elements lo..hi-1 (see :class:`PerElementPlan`), vectorized over elements in numpy.

    ``init`` (n,) is the array shuffled (``arange(n)``, or a relabelling), of the
    orders' dtype. Row j of the result (hi-lo, n) is element lo + j's order.
    """
    n = init.size
    starts, thrs = draw_groups(n, bits, group_bits)
    out = np.empty((hi - lo, n), dtype=init.dtype)
    sh, ub = _U64(32 - bits), _U64(bits)
    low = _U64((1 << bits) - 1)
    m32 = _U64(0xFFFFFFFF)
    chunk = min(1 << 13, max(1 << 10, (1 << 21) // max(1, n)))  # elements at a time: (n, chunk) slots near cache
    for c0 in range(lo, hi, chunk):
        c1 = min(hi, c0 + chunk)
        w = c1 - c0
        e = np.arange(c0 + 1, c1 + 1, dtype=np.uint64)
        h = _mix(e * _U64(_GOLD) + _U64(key))  # element e's 64-bit seed: splitmix64 of its counter
        redraws = np.zeros(w, dtype=np.uint64)
        idx = np.empty((max(n - 1, 1), w), dtype=np.intp)
        z = h
        mbuf = np.empty(w, dtype=np.uint64)
        for g in range(thrs.size):
            k0, k1 = int(starts[g]), int(starts[g + 1])
            if g % 2 == 0:  # one 64-bit word: the low half is group g's draw, the high half group g + 1's
                z = _mix(h + _U64(((g // 2 + 1) * _GOLD) & _M64))
            rest = (z & m32) if g % 2 == 0 else (z >> _U64(32))
            if bits < 32:
                rest >>= sh
            for k in range(k0, k1):  # batched Lemire, in place
                np.multiply(rest, _U64(n - k), out=mbuf)
                np.right_shift(mbuf, ub, out=idx[k], casting="unsafe")
                np.bitwise_and(mbuf, low, out=rest)
            bad = np.flatnonzero(rest < thrs[g])
            while bad.size:  # rejected: redraw the group from the element's own redraw stream
                redraws[bad] += _U64(1)
                x = (_mix((h[bad] ^ _U64(_REDRAW)) + redraws[bad] * _U64(_GOLD)) & m32) >> sh
                r = np.empty((k1 - k0, bad.size), dtype=np.intp)
                for k in range(k0, k1):
                    m = x * _U64(n - k)
                    r[k - k0] = m >> ub
                    x = m & low
                ok = x >= thrs[g]
                idx[k0:k1, bad[ok]] = r[:, ok]
                bad = bad[~ok]
        P = np.repeat(init[:, None], w, axis=1)  # (n, w): slot-major
        flat_P = P.reshape(-1)
        cols = np.arange(w, dtype=np.intp)
        if n > 1:  # flat indices of slot k + idx[k] of every element, all steps at once
            idx += np.arange(n - 1)[:, None]
            idx *= w
            idx += cols
        for k in range(n - 1):  # forward Fisher-Yates: swap slots k and k + idx[k]
            flat = idx[k]
            v = flat_P[flat]
            flat_P[flat] = P[k]
            P[k] = v
        out[c0 - lo : c1 - lo] = P.T
    return out


def _atomic_kernel(
    A,
    Au,
    col0,
    key,
    e0,
    count,
    bits,
    gstart,
    gthr,
    init,
    orders,
    out,
    sigma,
    velt,
    check,
    fold,
    h,
    hi32,
    rest,
    redraws,
    idx,
    perm,
    acc,
):  # type: ignore[no-untyped-def]
    """numba: the orders of elements e0..e0+count-1 (as :func:`orders_numpy`) and, with ``fold``, their folds.

    Without ``fold``, writes the orders into ``orders`` (count, n) and returns 0. With
    ``fold``, element e0 + j is the left fold of ``A[order[k], col0 + j]`` (k = 0..n-1)
    in float32, each sum rounded by Veltkamp's splitting (``c = t * sigma; t = c - (c -
    t)``) when ``velt``, written to ``out[j]``; returns 1 (leaving ``out`` partly
    written) when some input has a bit of ``check`` set or some result is NaN, else 0.
    Works in blocks of ``acc.size`` elements (``kernel_width(n)``; the other trailing
    arguments are scratch of that width): the draws of all steps (vectorized over the
    elements), the forward Fisher-Yates swaps into a slot-major (n, width) block (the
    next block of A prefetched meanwhile), the input check, then the fold slot by slot
    over the elements (independent: no latency chain; AVX-512 gathers, which the
    ``noalias`` compilation of :func:`_jit_noalias` allows).
    """
    n = init.shape[0]
    m32 = np.uint64(0xFFFFFFFF)
    gold = np.uint64(0x9E3779B97F4A7C15)
    mix1 = np.uint64(0xBF58476D1CE4E5B9)
    mix2 = np.uint64(0x94D049BB133111EB)
    redraw_key = np.uint64(0xD1B54A32D192ED03)
    s30, s27, s31 = np.uint64(30), np.uint64(27), np.uint64(31)
    ub = np.uint64(bits)
    sh = np.uint64(32 - bits)
    low = (np.uint64(1) << ub) - np.uint64(1)
    ng = gstart.shape[0] - 1
    blk = acc.shape[0]
    orb = np.uint32(0)
    for b0 in range(0, count, blk):
        w = min(blk, count - b0)
        c0 = col0 + b0
        for j in range(w):
            z = np.uint64(e0 + b0 + j + 1) * gold + key
            z = (z ^ (z >> s30)) * mix1
            z = (z ^ (z >> s27)) * mix2
            h[j] = z ^ (z >> s31)
            redraws[j] = 0
        for g in range(ng):
            k0, k1 = gstart[g], gstart[g + 1]
            thr = gthr[g]
            if g % 2 == 0:  # one 64-bit word: the low half is group g's draw, the high half group g + 1's
                c = np.uint64(g // 2 + 1) * gold
                for j in range(w):
                    z = h[j] + c
                    z = (z ^ (z >> s30)) * mix1
                    z = (z ^ (z >> s27)) * mix2
                    z = z ^ (z >> s31)
                    hi32[j] = z >> np.uint64(32)
                    rest[j] = (z & m32) >> sh
            else:
                for j in range(w):
                    rest[j] = hi32[j] >> sh
            for k in range(k0, k1):  # batched Lemire: each step takes the high part of rest * s
                s = np.uint64(n - k)
                ik = idx[k]
                for j in range(w):
                    m = rest[j] * s
                    ik[j] = m >> ub
                    rest[j] = m & low
            bad = 0
            for j in range(w):
                bad += rest[j] < thr
            if bad:  # rare (below 2^-12 per group): redraw the group from each element's own stream
                for j in range(w):
                    if rest[j] >= thr:
                        continue
                    while True:
                        redraws[j] += np.uint64(1)
                        z = (h[j] ^ redraw_key) + redraws[j] * gold
                        z = (z ^ (z >> s30)) * mix1
                        z = (z ^ (z >> s27)) * mix2
                        z = z ^ (z >> s31)
                        x = (z & m32) >> sh
                        for k in range(k0, k1):
                            m = x * np.uint64(n - k)
                            idx[k, j] = m >> ub
                            x = m & low
                        if x >= thr:
                            break
        for k in range(n):
            v0 = init[k]
            for j in range(w):
                perm[k, j] = v0
        nxt = c0 + w  # the next block of A is prefetched, a line at a time, while the swaps run
        wn = min(blk, col0 + count - nxt) if fold else 0
        for k in range(n - 1):  # forward Fisher-Yates: slot k is final after step k
            pk, ik = perm[k], idx[k]
            for j in range(w):
                i = k + ik[j]
                v = perm[i, j]
                perm[i, j] = pk[j]
                pk[j] = v
            for q in range(0, wn, 16):
                _prefetch(Au, k, nxt + q)
        for q in range(0, wn, 16):
            _prefetch(Au, n - 1, nxt + q)
        if fold:  # the input check (the block is in cache: prefetched during the previous block's swaps)
            for k in range(n):
                rb = Au[k]
                for j in range(w):
                    orb |= rb[c0 + j]
            if orb & check:
                return 1
        if not fold:
            for j in range(w):
                for k in range(n):
                    orders[b0 + j, k] = perm[k, j]
            continue
        p0 = perm[0]
        for j in range(w):
            acc[j] = A[p0[j], c0 + j]
        if velt:  # slot by slot; the elements are independent (no latency chain; gathers)
            for k in range(1, n):
                pk = perm[k]
                for j in range(w):
                    x = acc[j] + A[pk[j], c0 + j]
                    y = x * sigma
                    acc[j] = y - (y - x)
        else:
            for k in range(1, n):
                pk = perm[k]
                for j in range(w):
                    acc[j] += A[pk[j], c0 + j]
        nan = False
        for j in range(w):
            x = acc[j]
            nan |= x != x
            out[b0 + j] = x
        if nan:
            return 1
    if fold:
        orders[0, 0] = orb & np.uint32(1)  # keeps the pass over A when nothing is checked (``orders``: scratch)
    return 0


def _prefetch(a: np.ndarray, i: int, j: int) -> None:
    """Prefetch ``a[i, j]``'s cache line: a no-op in Python, ``llvm.prefetch`` once numba compiles the kernel."""


def _numba_prefetch():  # type: ignore[no-untyped-def]
    """The numba intrinsic behind :func:`_prefetch` (read, high locality, data cache)."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def prefetch(typingctx, arr, i, j):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            aryty = signature.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = cgutils.get_item_pointer2(
                context,
                builder,
                ary.data,
                cgutils.unpack_tuple(builder, ary.shape),
                cgutils.unpack_tuple(builder, ary.strides),
                aryty.layout,
                [args[1], args[2]],
                wraparound=False,
                boundscheck=False,
            )
            i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0"
            )
            builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
            return context.get_dummy_value()

        return types.void(arr, i, j), codegen

    return prefetch


def _jit_noalias(fn):  # type: ignore[no-untyped-def]
    """:func:`fpreduce.base.jit.jit`, compiled with LLVM ``noalias`` on the array arguments, or None without numba.

    The caller passes distinct buffers (read-only ones may share memory): this is
    what lets LLVM vectorize the fold's loads from A (AVX-512 gathers) next to
    the stores into the accumulators.
    """
    if jit(fn) is None:  # no numba, or FPREDUCE_NO_JIT
        return None
    compiled = []

    def call(*args):  # type: ignore[no-untyped-def]
        if not compiled:
            import numba

            global _prefetch
            _prefetch = _numba_prefetch()  # the kernel's global, resolved when numba compiles it
            from numba.core.compiler import CompilerBase, DefaultPassBuilder

            class NoAlias(CompilerBase):
                def define_pipelines(self):  # type: ignore[no-untyped-def]
                    self.state.flags.noalias = True
                    return [DefaultPassBuilder.define_nopython_pipeline(self.state)]

            compiled.append(numba.njit(cache=True, nogil=True, pipeline_class=NoAlias)(fn))
        return compiled[0](*args)

    call.__name__ = call.__qualname__ = fn.__name__
    return call


def atomic_kernel(A, Au, col0, key, e0, count, bits, init, orders, out, sigma, velt, check, fold):  # type: ignore[no-untyped-def]
    """Run :func:`_atomic_kernel` (numba must be available) with fresh scratch buffers; its return value."""
    n = init.shape[0]
    blk = kernel_width(n)
    gstart, gthr = draw_groups(n, bits, _GROUP_BITS)
    return _atomic_jit(
        A,
        Au,
        col0,
        np.uint64(key),
        e0,
        count,
        bits,
        gstart,
        gthr,
        init,
        orders,
        out,
        sigma,
        velt,
        np.uint32(check),
        fold,
        np.empty(blk, np.uint64),
        np.empty(blk, np.uint64),
        np.empty(blk, np.uint64),
        np.zeros(blk, np.uint64),
        np.empty((max(n - 1, 1), blk), init.dtype),
        np.empty((n, blk), init.dtype),
        np.empty(blk, np.float32),
    )


_atomic_jit = _jit_noalias(_atomic_kernel)


def kernel_width(n: int) -> int:
    """Elements per block of the numba kernel: about 2^14 slots (n x width: in L1), 64 to 4096 elements."""
    return min(1 << 12, max(64, (1 << 14) // max(1, n)))


@dataclass(frozen=True)
class PerElementPlan:
    """Every element a sequential left fold in its own uniformly random order.

    GPU ``atomicAdd`` into one accumulator per element: the N contributions land
    in whatever order the hardware serialises them. Element e's order is a
    forward Fisher-Yates shuffle of ``0..n-1`` (then relabelled by ``perm``):
    step k = 0..n-2 swaps slot k with slot k + r_k, r_k uniform on 0..n-k-1.
    With ``key = atomic_key(seed)``, ``h = mix(key + (e + 1) * G)`` (``mix`` the
    splitmix64 finalizer, G its odd constant, all mod 2^64); the steps are cut
    into groups (:func:`draw_groups`: consecutive steps while the product P of
    their ranges is <= 2^20), and group g draws the low (g even) or high (g odd)
    32 bits x of word ``mix(h + (g // 2 + 1) * G)``. Batched Lemire: r = x, and
    for each step of the group m = r * s, r_k = m >> 32, r = m mod 2^32; the
    group is kept unless the final r < (2^32 - P) mod P (r_k's are then the
    mixed-radix digits of Lemire's exact draw on 0..P-1, so independent and
    exactly uniform), else it is drawn again from the low 32 bits of
    ``mix((h ^ R) + c * G)``, c = 1, 2, ... counting the element's redraws (R a
    fixed constant), below 2^-12 of the groups. Every order is then exactly
    uniform over the n! permutations (idealising ``mix`` as random bits),
    independent across elements, and a function of (seed, e) only, never of how
    the elements are chunked. :func:`orders_numpy` computes it in numpy,
    :func:`_atomic_kernel` in numba (same bits; tests compare them).

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

    def shuffled(self) -> NDArray[np.unsignedinteger]:
        """The array every element shuffles: ``arange(n)``, or ``perm``, in the orders' dtype."""
        dt = _order_dtype(self.n)
        return np.arange(self.n, dtype=dt) if self.perm is None else np.asarray(self.perm, dtype=dt)

    def orders(self, lo: int, hi: int) -> NDArray[np.unsignedinteger]:
        """Worker orders of elements lo..hi-1: shape (hi-lo, n), row = first to last.

        Row j is element lo + j's order (see the class), relabelled by ``perm``,
        C-contiguous, of the smallest unsigned type that holds n - 1 (uint8 up to
        256 workers, uint16 up to 65536). Computed by the numba kernel when numba
        is installed (``USE_JIT``), else in numpy: the same bits.
        """
        if not 0 <= lo <= hi:
            raise InvalidArgument(f"need 0 <= lo <= hi, got lo={lo}, hi={hi}")
        init = self.shuffled()
        key, bits = atomic_key(self.seed), _DRAW_BITS
        if not (USE_JIT and _atomic_jit is not None) or hi == lo:
            return orders_numpy(key, lo, hi, init, bits, _GROUP_BITS)
        out = np.empty((hi - lo, self.n), dtype=init.dtype)
        dummy = np.zeros((1, 1), dtype=np.float32)
        atomic_kernel(
            dummy,
            dummy.view(np.uint32),
            0,
            key,
            lo,
            hi - lo,
            bits,
            init,
            out,
            np.zeros(1, np.float32),
            np.float32(1),
            False,
            0,
            False,
        )
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
