"""A ring's segments folded row by row: every segment's order is a rotation of one order.

A ring all-reduce's reduce-scatter adds chunk ``s`` over the workers in the ring's
order, starting at a worker of its own: the row order of segment ``s`` is ``B[o_s],
B[o_s + 1], ..., B[o_s - 1]`` (indices mod N) for one order ``B`` (NCCL's ring:
``B = 0..N-1``, ``o_s = s + 1``; gloo's: ``B = N-1..0``). Folding each segment on its
own (``_narrow._segs_kernel``) reads X column block by column block, every row of a block
at a stride of a whole row: at N = 1024 workers and 64 columns per segment, 256 bytes
per 256 KB, and 6-7x the in-place numpy row adds.

The kernels of :func:`_rot_kernel` read X row after row instead, in two passes over ``B``. At position
``q`` of the first pass, row ``B[q]`` starts the segments whose rotation begins there
(``q == o_s``) and is added to those that began before (``q > o_s``): the first part of
every segment's order, ``B[o_s:]``, in order. The second pass adds row ``B[q]`` to the
segments whose rotation wraps past it (``q < o_s``): the rest, ``B[:o_s]``, in order.
Every segment's additions are thus its own left fold, in its own order, the same
additions as ``_segs_kernel``'s (the same bits); only the order in which different
segments' additions are made changes, and those are independent. Adjacent segments
with the same action at a row are one contiguous run (a ring's offsets rise with the
columns: each row of a pass is two or three runs), each run one call of
``_narrow._row_of``, the loop of the wide left fold (compiled per kind and mode).

Nearest even and the directed modes only: stochastic rounding numbers each addition
within its segment's fold (``t``), which differs between the segments of a run.
:func:`rotations` says whether a set of orders is such a ring, and gives ``B`` and the
offsets.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpreduce.base import jit
from fpreduce.base.threads import run as threads_run
from fpreduce.core import _hwround as hw
from fpreduce.core import _narrow
from fpreduce.core.grid import Grid

_COMPILED: list[Any] = []


def rotations(perms: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(B, offsets) with ``perms[s] == B[(offsets[s] + arange(N)) % N]`` for every segment s, or None."""
    B = perms[0]
    n = B.size
    pos = np.full(n, -1, dtype=np.int64)
    pos[B] = np.arange(n)
    if n < 2 or pos.min() < 0:
        return None  # (not a permutation of 0..N-1)
    succ = np.empty(n, dtype=np.int64)
    succ[B] = np.roll(B, -1)  # the worker after each one in B, cyclically
    if perms.shape[1] != n or not np.array_equal(succ[perms[:, :-1]], perms[:, 1:]):
        return None  # (a rotation of B: every worker followed by its successor in B)
    return B, pos[perms[:, 0]]


def _action(p, q, o):  # type: ignore[no-untyped-def]
    """Segment of offset ``o`` at position ``q`` of pass ``p``: 0 nothing, 1 start with the row, 2 add it."""
    if p == 0:
        return 0 if q < o else (1 if q == o else 2)
    return 2 if q < o else 0


def fold_rot(
    X: np.ndarray,
    rot: tuple[np.ndarray, np.ndarray],
    cols: tuple[np.ndarray, np.ndarray],
    kind: int,
    grid: Grid,
    low: int,
    threads: int = 1,
) -> tuple[np.ndarray | None, bool]:
    """``_narrow.fold_left`` of segments ``cols`` whose orders are the rotations ``rot`` (:func:`rotations`) of
    one order, by :func:`_rot_kernel`: the same (out, done), the same bits, on ``threads`` threads (each its span
    of the columns). Not for stochastic rounding."""
    compile_all()
    lns = _narrow.row_params(kind, grid, low)
    out = np.empty(X.shape[1], dtype=np.float32)
    fold = _rot_kernel(int(kind), _narrow.row_mode(kind, grid, lns))
    Xb = X if X.dtype.itemsize <= 2 else X.view(np.uint32)
    B, offs = rot
    parts = [(X, Xb, B, offs[s], lo, hi, out, grid, lns) for s, lo, hi in _narrow.pieces(*cols, threads)]
    with np.errstate(over="ignore", invalid="ignore"):
        got = threads_run(fold, parts)
    return _narrow.outcome(X, out, got, kind, lns, low)


_ROT: dict[tuple[int, int], Any] = {}


def _rot_kernel(kind: int, mode: int) -> Any:
    """The ring's left folds row by row compiled for one kind and row mode (``_narrow.row_mode``; closure
    constants, as ``_narrow``'s left folds, and the loop the kernel's own body, as theirs):
    ``kernel(X, Xb, B, offs, los, his, out, grid, lanes)`` sets out <- every segment ``[los[s], his[s])`` of X's
    columns folded left in the rows ``B`` rotated by ``offs[s]``, row by row (module docstring); (the OR of the
    inputs' check, max |s|) as ``_narrow._segs_kernel``'s. Not for stochastic rounding."""
    if (kind, mode) not in _ROT:

        def left_rot(X, Xb, B, offs, los, his, out, grid, lanes):  # type: ignore[no-untyped-def]
            n = B.size
            hwm = hw.code(kind, grid)
            sc, c16 = _narrow.row_input(kind, lanes)  # (as left_rows)
            z = np.zeros(0, dtype=np.uint64)
            seen = np.uint32(0)
            big = np.uint32(0)
            hw.begin(hwm)
            for p in range(2):
                for q in range(n):
                    r = B[q]
                    s = 0
                    while s < los.size:
                        act = _action(p, q, offs[s])
                        e = s + 1
                        while e < los.size and his[e - 1] == los[e] and _action(p, q, offs[e]) == act:
                            e += 1
                        lo, hi = los[s], his[e - 1]
                        x, xb, o = X[r][lo:hi], Xb[r][lo:hi], out[lo:hi]
                        if act == 1:
                            seen = _narrow.join(seen, _narrow.first_row(o, x, xb, sc, c16), xb)
                        elif act == 2:
                            bits, mag = _narrow._row_of(o, (x,), (xb,), kind, grid, lanes, mode, z, 0)
                            seen, big = _narrow.join(seen, bits, xb), max(big, mag)
                        s = e
            hw.end(hwm)
            seen = _narrow.mark_sums(seen, out[los[0] : his[-1]], Xb[0][los[0] : his[-1]])
            _narrow.scale_back(out[los[0] : his[-1]], sc, lanes.scale)  # (this call's columns: a thread's own)
            return seen, big

        _ROT[kind, mode] = jit.kernel(left_rot, f"rings row by row ({_narrow.describe(kind, mode)})", 2.0)
    return _ROT[kind, mode]


@jit.serialized
def compile_all() -> None:
    """Make this module's helper a numba function (inlined in the kernels of :func:`_rot_kernel`), once."""
    if _COMPILED:
        return
    _narrow.compile_all()
    g = globals()
    jit.compile_names(g, ("_action",), "rings row by row")
    _COMPILED.append(g["_action"])
