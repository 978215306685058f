"""Segmented plans whose segments are left folds (ring all-reduce), compiled: each segment in place.

A ring's reduce-scatter adds the chunks of the workers in a rotated order: every
segment of the vector is a left fold, its leaf order its own. The engine's general
path gathers the segments' columns, each in its leaf order, into a buffer and folds
that; here every segment is folded straight from X's rows by
:func:`fpreduce.core._narrow.left_rows` (the rows of segment ``[lo, hi)`` are
``X[r][lo:hi]``, contiguous), no gather, no copy, for the accumulators and modes that
kernel folds; with ``routes.ROT`` columns or more, and outside stochastic rounding, a ring's
segments (rotations of one order) fold row by row instead (:mod:`fpreduce.core._rotated`).
Segments are found once per plan object and column span (:func:`left_segments`).
:func:`fold_chunks` takes plans whose chunks are other trees (NCCL's double binary tree,
Horovod's hierarchy): each chunk of ``routes.ROT`` columns or more by ``_tall.fold_plan`` with
its own tree. Anything else (narrower chunks, a sum beyond the kernel's range, no numba)
returns None: the engine's path runs, with the same bits.
"""

from __future__ import annotations

import numpy as np

from fpreduce.core import _narrow, _rotated, _tall, routes
from fpreduce.core.arith import _Arith, _Loader
from fpreduce.core.grid import grid_of
from fpreduce.core.rounding import Mode
from fpreduce.core.routes import Segments
from fpreduce.plans import SegmentedPlan, Tree


def is_left_deep(shape: Tree) -> bool:
    """Whether the tree is a left fold: ``((a, b), c), ...``."""
    node = shape
    while not isinstance(node, int):
        if not isinstance(node[1], int):
            return False
        node = node[0]
    return True


def fold_segments(
    segments: Segments, A: np.ndarray, load: _Loader, ar: _Arith, offset: int, dec: routes.Decision
) -> np.ndarray | None:
    """Every segment of A's columns folded left in its row order by the route ``dec`` (``RING_ROWS``: row by
    row; ``SEGMENT_FOLDS``: segment by segment), or None when a sum leaves the kernel's range (the engine's
    blocks then run, same bits).

    The segments cover columns ``0 .. A.shape[1] - 1``; column j is element ``offset + j``.
    """
    wk = dec.kind
    assert wk is not None
    grid = grid_of(ar.fa, ar.mode)
    key = ar.sr_key() if ar.mode is Mode.STOCHASTIC else np.uint64(0)
    X, low = _tall._load(A, load, ar, lazy=True, lazy16=wk == 2, words=dec.words)
    los, his, perms, rot = segments
    for k in range(2):
        if dec.route is routes.Route.RING_ROWS:  # a ring: row by row, each row read once
            assert rot is not None
            got, done = _rotated.fold_rot(X, rot, (los, his), wk, grid, low, dec.threads)
        else:
            got, done = _narrow.fold_left(X, perms, wk, grid, key, offset, low, (los, his), dec.threads)
        if got is not None or k == 1:
            break
        X, low = _tall._load(A, load, ar)[0], 0  # an input not in the input format: load (round) them all, refold
    return got if done else None


def fold_chunks(
    p: SegmentedPlan, A: np.ndarray, load: _Loader, ar: _Arith, offset: int, total: int
) -> np.ndarray | None:
    """Each chunk (of ``routes.ROT`` columns or more: the route ``CHUNK_TREES``) folded by the compiled fold of its own
    tree (NCCL's double binary trees, Horovod's hierarchy: a few wide chunks), on a contiguous copy of its
    columns; None when a chunk's route refuses its data (the engine's blocks then run).

    The chunk of columns ``[lo, hi)`` is elements ``offset + lo ..``: the stochastic draws are the engine's.
    """
    b = np.clip(p.bounds(total) - offset, 0, A.shape[1])
    width = np.diff(b)
    out = np.empty(A.shape[1], dtype=ar.dtype)
    flat = np.empty(A.shape[0] * int(width.max()), dtype=A.dtype)  # every chunk copied here: one set of pages
    for c in np.flatnonzero(width):
        lo, hi = int(b[c]), int(b[c + 1])
        chunk = flat[: A.shape[0] * (hi - lo)].reshape(A.shape[0], hi - lo)
        np.copyto(chunk, A[:, lo:hi])
        res = _tall.fold_plan(p.trees[int(c)].root, chunk, load, ar, offset + lo)
        if res is None:
            return None
        out[lo:hi] = res
    return out
