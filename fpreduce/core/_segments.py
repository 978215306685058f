"""Segmented plans whose segments are left folds (ring all-reduce), compiled: each segment in place.

A ring's reduce-scatter adds the chunks of the workers in a rotated order: every
segment of the vector is a left fold, its leaf order its own. The engine's general
path gathers the segments' columns, each in its leaf order, into a buffer and folds
that; here every segment is folded straight from X's rows by
:func:`fpreduce.core._narrow.left_rows` (the rows of segment ``[lo, hi)`` are
``X[r][lo:hi]``, contiguous), no gather, no copy, for the accumulators and modes that
kernel folds. Anything else (a tree that is not left-deep, a sum beyond the kernel's
range, no numba) returns None: the engine's path runs, with the same bits.
"""

from __future__ import annotations

import numpy as np

from fpreduce.base import jit
from fpreduce.core import _narrow, _tall
from fpreduce.core.arith import _Arith, _Loader
from fpreduce.core.rounding import Mode
from fpreduce.plans import SegmentedPlan, Tree


def is_left_deep(shape: Tree) -> bool:
    """Whether the tree is a left fold: ``((a, b), c), ...``."""
    node = shape
    while not isinstance(node, int):
        if not isinstance(node[1], int):
            return False
        node = node[0]
    return True


def _fold_order(root: Tree) -> np.ndarray | None:
    """The leaves in the order a left fold adds them, for a left-deep tree or a right-deep one, else None.

    A right-deep tree ``a + (b + (c + d))`` is the left fold of ``d, c, b, a`` with each
    addition's operands swapped: IEEE addition is commutative, in every rounding mode
    (stochastic rounding too: it rounds the exact sum), so the bits are the same.
    Walks the spine only: O(depth) for a tree that is neither.
    """
    for side in (0, 1):
        spine: list[int] = []
        node = root
        while not isinstance(node, int):
            leaf = node[1 - side]
            if not isinstance(leaf, int):
                break
            spine.append(leaf)
            node = node[side]
        if isinstance(node, int):
            spine.append(node)
            return np.array(spine[::-1], dtype=np.int64)
    return None


def left_segments(p: SegmentedPlan, nel: int, offset: int, total: int) -> list[tuple[int, int, np.ndarray]] | None:
    """The nonempty segments of X's columns as ``(lo, hi, worker order)`` if every one is a fold, else None."""
    b = np.clip(p.bounds(total) - offset, 0, nel)
    P = p.chunk_orders
    if P is not None and p.shape is not None:
        order = _fold_order(p.shape.root)  # the shape's slots in fold order
        if order is None:
            return None
        orders = P[:, order]  # chunk c puts worker P[c, slot] in slot
    else:
        folds = []
        for t in p.trees:
            order = _fold_order(t.root)
            if order is None:
                return None
            folds.append(order)
        orders = np.array(folds)
    return [(int(b[c]), int(b[c + 1]), orders[c]) for c in range(len(orders)) if b[c + 1] > b[c]]


def fold_segments(
    segments: list[tuple[int, int, np.ndarray]], A: np.ndarray, load: _Loader, ar: _Arith, offset: int
) -> np.ndarray | None:
    """Every segment ``(lo, hi, order)`` of A's columns folded left in its row ``order``, or None.

    The segments cover columns ``0 .. A.shape[1] - 1``; column j is element ``offset + j``.
    """
    kp = _tall._kind(ar)
    if not jit.enabled() or kp is None or A.shape[0] < 2:
        return None
    kind, prm = kp
    wk = _narrow.wide_kind(kind, prm)
    if wk < 0 or ar.fa.precision > 24:
        return None
    key = ar.sr_key() if ar.mode is Mode.STOCHASTIC else np.uint64(0)
    X, low = _tall._load(A, load, ar, lazy=True, lazy16=wk == 2)
    if X.dtype != np.float32:
        return None
    los = np.array([lo for lo, _, _ in segments], dtype=np.int64)
    his = np.array([hi for _, hi, _ in segments], dtype=np.int64)
    perms = np.array([order for _, _, order in segments], dtype=np.int64)
    got, done = _narrow.fold_left(X, perms, wk, prm, key, offset, low, (los, his))
    if got is None:  # an input not in the input format: load (round) them all, and fold again
        X = _tall._load(A, load, ar)[0]
        got, done = _narrow.fold_left(X, perms, wk, prm, key, offset, 0, (los, his))
    return got if done else None
