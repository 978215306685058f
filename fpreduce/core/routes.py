"""The route table: which kernel sums a reduction, decided in one place, and why.

A reduction's route follows from facts known before any addition: the algorithm, the
plan's kind (one tree for every element, segments, per-element orders), the formats
and rounding mode, X's shape and dtype, and whether the compiled kernels are on.
:func:`decide` turns those facts (a :class:`Case`) into a :class:`Decision`: the
:class:`Route` taken, the reasons in words, and what runs if the data refuse it. The
engine (:mod:`fpreduce.core.engine`) executes the decision; it does not decide again.

Two refusals depend on the data and are part of a route, not a fall-through: an input
that is not a value of its input format (the kernels check as they read, and the route
runs again on the rounded inputs), and a sum beyond a fast kernel's range, Inf or NaN
(the block is folded again by the route's ``rerun``, the exact rounder: same bits).

:func:`trace` records the routes the engine actually runs (tests check them against
:func:`decide`); :func:`fpreduce.core.engine.explain` is the public view (``fr.explain``,
``fpreduce sum --explain``).

>>> import numpy as np, fpreduce as fr
>>> fr.explain(np.ones((16, 4096), np.float32), "sequential", input="bf16", accumulate="bf16").route.value
'wide_left'
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from fpreduce.base import jit
from fpreduce.base.threads import resolve as resolve_threads
from fpreduce.core import _hwround as hw
from fpreduce.core import _narrow, _rotated
from fpreduce.core._fastpath import fold_order
from fpreduce.core.formats import NATIVE_DTYPES, Format
from fpreduce.core.grid import KIND_WORDS, Grid, Kind, kind_of
from fpreduce.core.rounding import Mode
from fpreduce.plans import PerElementPlan, Plan, SegmentedPlan, Tree

__all__ = ["Case", "Decision", "Route", "Segments", "decide", "left_segments", "render", "trace"]

WIDTH = 2048  # columns at least for the row-block kernel's blocks and for "wide" rows
NARROW = 8  # up to this many columns, a left fold keeps each column's sum in a register
CHAIN = 16  # and up to this many, sequential and directed pairwise folds run in core._chain (not fp64's directed)
MAX_OPS = 1 << 26  # a tree of more leaves than this is not compiled into a program (memory)
ROT = 2048  # columns at least for a ring's segments to fold row by row, and for a chunk's own compiled fold
VELTKAMP_P = (8, 11)  # accumulators of these precisions round by Veltkamp splitting in float32


class Route(enum.Enum):
    """A kernel family of the engine; ``.kernel`` names its owner, ``.what`` says what it does."""

    EXACT = "exact"
    BINNED_COMPILED = "binned_compiled"
    BINNED = "binned"
    SINGLE = "single"
    FP64_ROWS = "fp64_rows"
    WIDE_LEFT = "wide_left"
    ROW_BLOCKS = "row_blocks"
    CHAIN = "chain"
    CHAIN_PAIRWISE = "chain_pairwise"
    COLUMNS = "columns"
    SR_NUMPY = "sr_numpy"
    RING_ROWS = "ring_rows"
    SEGMENT_FOLDS = "segment_folds"
    CHUNK_TREES = "chunk_trees"
    COMPENSATED = "compensated"
    BLOCKS = "blocks"
    FUSED_ATOMIC = "fused_atomic"
    NUMPY_FAST = "numpy_fast"
    NUMPY_FOLD = "numpy_fold"
    NUMPY_COMPENSATED = "numpy_compensated"

    @property
    def kernel(self) -> str:
        return _INFO[self][0]

    @property
    def what(self) -> str:
        return _INFO[self][1]

    @property
    def compiled(self) -> bool:
        return _INFO[self][2]


_INFO: dict[Route, tuple[str, str, bool]] = {
    Route.EXACT: ("core.algorithms.exact", "the exact sum of the inputs, rounded once", False),
    Route.BINNED_COMPILED: ("core._binned.binned_checked", "binned sum, one compiled pass over float32 X", True),
    Route.BINNED: ("core.algorithms.binned", "binned sum of the loaded inputs (numpy)", False),
    Route.SINGLE: ("core._tall.fold_plan", "one worker: its input, loaded", False),
    Route.FP64_ROWS: ("core._rows64.fold_fp64", "float32 rows added into float64 sums as read", True),
    Route.WIDE_LEFT: ("core._narrow.fold_left", "left fold of wide rows (float32, or their own words), in place", True),
    Route.ROW_BLOCKS: ("core._tall._fold_kernel", "the tree's program over blocks of columns", True),
    Route.CHAIN: ("core._chain.left_kernel", "left folds of a few columns, the checks off the chain", True),
    Route.CHAIN_PAIRWISE: ("core._chain.pairwise_kernel", "pairwise folds of a few columns by blocks of leaves", True),
    Route.COLUMNS: ("core._tall._left_columns", "a few columns, each sum in a register", True),
    Route.SR_NUMPY: ("core._sr_numpy._fold_numpy_sr", "stochastic fold in numpy (the compiled law)", False),
    Route.RING_ROWS: ("core._rotated.fold_rot", "a ring's rotated chunks, row by row, each row read once", True),
    Route.SEGMENT_FOLDS: ("core._narrow._segs_kernel", "each segment folded left straight from X's rows", True),
    Route.CHUNK_TREES: ("core._segments.fold_chunks", "each wide chunk by its own tree's route", False),
    Route.COMPENSATED: ("core._compensated", "compiled Kahan/Neumaier along the leaf order", True),
    Route.BLOCKS: ("core.engine._fold_blocks", "blocks of columns of one tree shape, each by its route", False),
    Route.FUSED_ATOMIC: ("plans.per_element.fused_fold", "per-element orders drawn and folded in one pass", True),
    Route.NUMPY_FAST: ("core._fastpath._fast_block", "in-place numpy adds (+ Veltkamp), inputs checked", False),
    Route.NUMPY_FOLD: ("core.engine._fold_leaves", "numpy fold, every addition rounded by core.arith", False),
    Route.NUMPY_COMPENSATED: ("core.algorithms.compensated", "compensated sum in numpy", False),
}


@dataclass(frozen=True)
class Case:
    """The facts a route depends on. ``plan`` None is ``sequential``, ``"pairwise"`` the pairwise tree (neither
    built); ``fits``: the input format's values are the accumulator's; ``premul``: inputs scaled on load."""

    algorithm: str
    plan: Plan | SegmentedPlan | PerElementPlan | str | None
    n: int
    m: int
    fin: Format
    fa: Format
    mode: Mode
    dtype: np.dtype
    contiguous: bool = True
    premul: bool = False
    compiled: bool = field(default_factory=jit.enabled)
    offset: int = 0
    total: int | None = None
    threads: int | None = None  # asked for (None: every core, :func:`fpreduce.base.threads.resolve`)

    @classmethod
    def of(  # type: ignore[no-untyped-def]
        cls, algorithm: str, plan, A: np.ndarray, load, offset: int = 0, total: int | None = None, threads=None
    ) -> Case:
        """The facts of ``A`` (n, m) loaded by ``load`` (the engine's loader: its ``fin``, ``fa``, ``mode``,
        ``premul``)."""
        n, m = A.shape
        premul = load.premul is not None
        return cls(algorithm, plan, n, m, load.fin, load.fa, load.mode, A.dtype, A.flags.c_contiguous, premul,
                   jit.enabled(), offset, total, threads)  # fmt: skip

    @property
    def words(self) -> bool:
        """Whether X's rows are the 2- or 1-byte words of the input format (its own dtype: bf16, fp16, fp8) that the
        left folds read as they are, no float32 copy made (:data:`fpreduce.core._narrow.WORDS`)."""
        fin = self.fin
        own = fin.name in _narrow.WORDS and self.dtype.name == NATIVE_DTYPES[fin.name]
        return own and self.fits and not self.premul and self.contiguous and self.compiled

    @property
    def fits(self) -> bool:
        fin, fa = self.fin, self.fa
        return fin.precision <= fa.precision and fin.emin >= fa.emin and fin.emax <= fa.emax


@dataclass(frozen=True, eq=False)
class Decision:
    """A route and its reasons; ``kind``: the rounding of the compiled folds (module :mod:`._tall`);
    ``rerun``: the route a block takes when the data refuse this one; ``inner``: per block or chunk."""

    route: Route
    why: tuple[str, ...]
    kind: Kind | None = None
    rerun: Route | None = None
    inner: Decision | None = None
    order: np.ndarray | None = None  # a left fold's row order (size 0: rows in order); None: a program
    threads: int = 1  # the threads that split the columns (the same bits for any number)
    words: bool = False  # X's rows read as the input format's 2- or 1-byte words (:attr:`Case.words`)
    blocks: int = 0  # columns per block when every input is scaled (``fpreduce.core.engine._in_blocks``); 0: at once

    def __str__(self) -> str:
        return render(self.to_dict())

    def to_dict(self) -> dict[str, object]:
        """The decision as plain JSON values (``fpreduce sum --explain --json``)."""
        r = self.route
        doc: dict[str, object] = {"route": r.value, "kernel": r.kernel, "what": r.what, "compiled": r.compiled}
        if r.compiled:
            doc["compiled_now"] = jit.enabled()
        if self.kind is not None:
            doc["kind"] = int(self.kind)
            doc["kind_name"] = Kind(self.kind).name.lower()
            doc["adds"] = KIND_WORDS[Kind(self.kind)]
        doc["threads"] = self.threads
        doc["words"] = self.words
        if self.blocks:
            doc["blocks"] = self.blocks
        doc["why"] = list(self.why)
        doc["rerun"] = None if self.rerun is None else self.rerun.value
        doc["each"] = None if self.inner is None else self.inner.to_dict()
        return doc


def render(doc: dict[str, object], indent: str = "") -> str:
    """The text of a decision's :meth:`Decision.to_dict` (``fr.explain`` printed, ``fpreduce sum --explain``)."""
    lines = [f"route:   {doc['route']}  ({doc['kernel']}: {doc['what']})"]
    if doc["compiled"]:
        on = "in use" if doc.get("compiled_now") else "off: FPREDUCE_NO_JIT, jit.disabled() or no numba"
        lines.append(f"runs as: compiled (numba), {on}")
    else:
        lines.append("runs as: numpy")
    if "kind" in doc:
        lines.append(f"adds:    kind {doc['kind']} ({doc['kind_name']}), {doc['adds']}")
    if doc.get("threads", 1) != 1 or doc.get("words"):
        read = "X's rows read as the format's own words, no float32 copy" if doc.get("words") else "float32 rows"
        lines.append(f"threads: {doc['threads']} (columns split: the same bits for any number); {read}")
    if doc.get("blocks"):
        lines.append(
            f"blocks:  {doc['blocks']} columns at a time (inputs widened, scaled and folded in cache), spread over"
            " the threads"
        )
    lines += [f"why:     {w}" for w in doc["why"]]  # type: ignore[attr-defined]
    if doc["rerun"] is not None:
        lines.append(f"rerun:   {doc['rerun']}, for a block whose sums leave the kernel's range (overflow, Inf, NaN)")
    if doc["each"] is not None:
        lines.append("each:")
        lines.append(render(doc["each"], "  "))  # type: ignore[arg-type]
    return "\n".join(indent + line for line in "\n".join(lines).splitlines())


def decide(c: Case) -> Decision:
    """The route of a reduction (see the module)."""
    if c.algorithm == "exact":
        return Decision(Route.EXACT, ("algorithm exact: order free",))
    if c.algorithm == "binned":
        return _binned(c)
    p = c.plan
    one = p.grouping if isinstance(p, SegmentedPlan) and p.grouping is not None and c.mode is not Mode.STOCHASTIC else p
    if c.algorithm == "plain" and not isinstance(one, SegmentedPlan | PerElementPlan):
        d = tree_route(c, one.root if isinstance(one, Plan) else one, c.n, c.m)
        if d is not None:
            if one is not p:
                d = replace(d, why=("Rabenseifner's chunks share one tree: folded whole", *d.why))
            return d
    if c.algorithm == "plain" and isinstance(p, SegmentedPlan):
        d = _segmented(c, p)
        if d is not None:
            return d
    fa = c.fa
    veltkamp = fa.precision in (24, 53) or (fa.precision in VELTKAMP_P and fa.emin == -126)
    nearest = c.mode is Mode.NEAREST_EVEN and c.n >= 2
    if c.algorithm in ("kahan", "neumaier") and isinstance(p, Plan) and c.compiled and veltkamp and nearest:
        why = (f"{c.algorithm} along one leaf order, nearest even, {fa.name} accumulator",)
        return Decision(Route.COMPENSATED, why, rerun=Route.BLOCKS)  # (compensated in numpy there)
    return _blocks(c)


def _binned(c: Case) -> Decision:
    fin = c.fin
    if (
        c.compiled
        and c.dtype == np.float32
        and not c.premul
        and fin.emin == -126
        and fin.precision < 24
        and c.mode is not Mode.STOCHASTIC
    ):
        why = (f"{fin.name} inputs in float32: read as they are, checked in the same pass",)
        return Decision(Route.BINNED_COMPILED, why, rerun=Route.BINNED)
    return Decision(Route.BINNED, ("binned: the inputs loaded, then summed (numpy or the compiled scan)",))


def tree_route(c: Case, root: Tree | str | None, n: int, m: int) -> Decision | None:
    """The compiled (or stochastic numpy) fold of one tree over n rows and m columns, or None: the engine's
    blocks (no numba, a tree too large to compile, or rows where numpy's fold is as fast)."""
    stochastic = c.mode is Mode.STOCHASTIC
    if not c.compiled and not stochastic:
        return None
    kind, grid = kind_of(c.fa, c.mode)
    fa, p = c.fa, c.fa.precision
    pairwise = isinstance(root, str)
    order = np.zeros(0, dtype=np.int64) if root is None else None if isinstance(root, str) else fold_order(root)
    chain = order is not None or (pairwise and kind == Kind.BITS)
    left = m <= NARROW or (m <= CHAIN and kind != Kind.STEP64 and chain)
    shape = "a left-deep tree" if order is not None else "a tree"
    shape = "sequential" if root is None else "pairwise" if pairwise else shape
    why = [f"plain sum, one tree for every element ({shape}), {n} x {m}", f"{fa.name} accumulator, {c.mode.value}"]
    if order is None and n > MAX_OPS and not (pairwise and left):
        return None
    rest = _fold_route(c, root, n, m, kind, grid, order, left, why)
    if (
        m > WIDTH
        and kind in (Kind.NATIVE, Kind.STEP64)
        and p > 24
        and order is not None
        and c.compiled
        and _rows64_ok(c, n)
    ):
        why = [*why, f"{c.fin.name} float32 rows into fp64 sums"]  # rerun: the rest, when an input needs rounding
        rerun = Route.BLOCKS if rest is None else rest.route
        return Decision(Route.FP64_ROWS, tuple(why), kind, rerun, rest, order)
    return rest


def _rows64_ok(c: Case, n: int) -> bool:
    fin = c.fin
    if not (c.fits and not c.premul and fin.precision <= 24 and c.dtype == np.float32):
        return False
    fp16 = fin.precision == 11 and fin.emin == -14
    return c.contiguous and n >= 2 and (fp16 or fin.emin == -126 or fin.precision >= 24)


def _fold_route(  # type: ignore[no-untyped-def]
    c: Case, root, n: int, m: int, kind: Kind, grid: Grid, order, left: bool, why: list[str]
) -> Decision | None:
    """:func:`tree_route` but for the fp64 rows: the kernel by the columns, the tree and the kind."""
    p, pairwise = c.fa.precision, isinstance(root, str)
    if m > WIDTH and (
        (kind == Kind.SPLIT_SUB and p == 11 and order is None) or (kind == Kind.NATIVE and p > 24 and grid.mode == 0)
    ):
        return None  # fp64 nearest even, fp16 in a tree, on wide rows: the engine's numpy fold is as fast
    if c.mode is Mode.STOCHASTIC and not c.compiled:
        why = [*why, "stochastic rounding without numba: the same law in numpy"]
        return Decision(Route.SR_NUMPY, tuple(why), order=order)
    if n == 1:
        return Decision(Route.SINGLE, (*why, "one worker"))
    if left:
        if pairwise:
            return Decision(Route.CHAIN_PAIRWISE, (*why, f"{m} <= {CHAIN} columns"), kind)
        narrow = p <= 24
        if order is not None and narrow and (kind != Kind.NATIVE or m > 1):  # (one fp32 column: its own chain)
            why = [*why, f"{m} <= {CHAIN} columns: a chain per column"]
            if m == 1 and kind in (Kind.SPLIT, Kind.SPLIT_SUB):
                why.append(
                    "one column: the exact float64 sum rounded by Veltkamp's split, its product by one FMA, "
                    "beside the chain; a sum below 2**emin (a zero or subnormal) as it is; an inexact sum or "
                    "overflow by the exact rounder"
                )
            return Decision(Route.CHAIN, tuple(why), kind, order=order)
        return Decision(Route.COLUMNS, (*why, f"{m} <= {CHAIN} columns: a register per column"), kind, order=order)
    narrow = p <= 24
    if order is not None:
        wk = _narrow.wide_kind(kind, grid) if narrow else None
        order = np.arange(n, dtype=np.int64) if order.size == 0 else order
        if wk is not None:
            why = [*why, f"{m} > {CHAIN} columns, a left fold: rows added in place"]
            rerun = Route.ROW_BLOCKS if _may_refuse(wk, grid) else None
            t, w = _spread(c, n, m)
            return Decision(Route.WIDE_LEFT, tuple(why), wk, rerun, order=order, threads=t, words=w)
    k = kind
    if kind == Kind.BITS and narrow and (_narrow.rows_kind(grid) or _narrow.scaled(grid) is not None):
        k = Kind.LANES
    rerun = Route.ROW_BLOCKS if _may_refuse(k, grid) else None
    why = [*why, f"{m} > {CHAIN} columns: rows folded by blocks of columns"]
    return Decision(Route.ROW_BLOCKS, tuple(why), k, rerun, order=order, threads=_spread(c, n, m)[0])


def _spread(c: Case, n: int, m: int) -> tuple[int, bool]:
    """How a left fold of rows runs: its threads (by the work, :func:`fpreduce.base.threads.resolve`) and whether
    it reads X's 2- or 1-byte words (:attr:`Case.words`)."""
    return resolve_threads(c.threads, n * m), c.words


def _may_refuse(kind: Kind, grid: Grid) -> bool:
    """Whether a fast kernel of this kind can refuse a sum (beyond Veltkamp's range, near the top, Inf or NaN)
    and leave it to a rerun: kinds 1 and 5, but for kind 5 under the processor's rounding mode (``add_hw``
    answers every sum). Kinds 0 and 2 answer every sum (IEEE's own overflow, the format's clamp)."""
    return kind == Kind.SPLIT or (kind == Kind.LANES and hw.code(5, grid) == 0)


def _segmented(c: Case, p: SegmentedPlan) -> Decision | None:
    total = c.m if c.total is None else c.total
    segs = left_segments(p, c.m, c.offset, total)
    kind, grid = kind_of(c.fa, c.mode)
    if segs is not None:
        wk = _narrow.wide_kind(kind, grid)
        if not c.compiled or c.n < 2 or wk is None or c.fa.precision > 24:
            return None
        why: tuple[str, ...] = ("segments that are left folds (a ring's reduce-scatter), each folded from X's rows",)
        t, w = _spread(c, c.n, c.m)
        rerun = Route.BLOCKS if _may_refuse(wk, grid) else None
        if segs.rot is not None and c.mode is not Mode.STOCHASTIC:
            why = (*why, f"{c.m} >= {ROT} columns, rotations of one order: row by row")
            return Decision(Route.RING_ROWS, why, wk, rerun, threads=t, words=w)
        return Decision(Route.SEGMENT_FOLDS, why, wk, rerun, threads=t, words=w)
    b = np.clip(p.bounds(total) - c.offset, 0, c.m)
    width = np.diff(b)
    if p.chunk_orders is not None or not c.compiled or width[width > 0].min(initial=ROT) < ROT:
        return None
    inner = []
    for i in np.flatnonzero(width):
        d = tree_route(c, p.trees[int(i)].root, c.n, int(width[i]))
        if d is None:
            return None
        inner.append(d)
    why = (f"{len(inner)} chunks of {ROT} columns or more, each its own tree",)
    return Decision(Route.CHUNK_TREES, why, inner=inner[0] if inner else None)


def _blocks(c: Case) -> Decision:
    """The engine's blocks: what each block runs first (its own route), the general fold when refused."""
    p, fa, fin = c.plan, c.fa, c.fin
    why: tuple[str, ...] = ("blocks of columns of one tree shape",)
    fast_in = not c.premul and c.fits and c.dtype == np.float32 and c.n >= 2
    fast = c.mode is Mode.NEAREST_EVEN and fa.precision <= 24
    if c.algorithm in ("kahan", "neumaier"):
        inner = Decision(Route.NUMPY_COMPENSATED, (f"{c.algorithm}: compensated in numpy",))
        return Decision(Route.BLOCKS, why, inner=inner)
    if isinstance(p, PerElementPlan):
        veltkamp = fa.precision == 24 or (fa.precision in VELTKAMP_P and fa.emin == -126)
        gathered = tree_route(replace(c, plan=None), None, c.n, min(c.m, 1 << 15))
        if c.compiled and fast and fast_in and veltkamp and (fin.precision >= 24 or fin.emin == -126):
            rerun = Route.NUMPY_FOLD if gathered is None else gathered.route  # (the gathered orders, below)
            inner = Decision(Route.FUSED_ATOMIC, ("every element its own order",), rerun=rerun)
            return Decision(Route.BLOCKS, why, inner=inner)
        if gathered is not None:
            return Decision(Route.BLOCKS, (*why, "each element's order gathered, then folded left"), inner=gathered)
    elif isinstance(p, SegmentedPlan) and c.compiled:
        return Decision(Route.BLOCKS, (*why, "segments gathered side by side, then one tree's route"))
    if c.mode is Mode.STOCHASTIC:
        inner = Decision(Route.SR_NUMPY, ("stochastic rounding by element and addition",))
        return Decision(Route.BLOCKS, why, inner=inner)
    if fast and fast_in and (fa.precision == 24 or fa.precision in VELTKAMP_P):
        inner = Decision(Route.NUMPY_FAST, ("nearest even into a float32-held accumulator",), rerun=Route.NUMPY_FOLD)
        return Decision(Route.BLOCKS, why, inner=inner)
    return Decision(Route.BLOCKS, why, inner=Decision(Route.NUMPY_FOLD, ("every addition rounded by core.arith",)))


class Segments(NamedTuple):
    """The nonempty segments of X's columns: ``[los[s], his[s])`` folded left in the row order ``perms[s]``; ``rot``:
    :func:`fpreduce.core._rotated.rotations` of the orders (a ring), or None."""

    los: np.ndarray
    his: np.ndarray
    perms: np.ndarray
    rot: tuple[np.ndarray, np.ndarray] | None


_SEEN: dict[tuple[int, int, int, int], tuple[SegmentedPlan, Segments | None]] = {}


def left_segments(p: SegmentedPlan, nel: int, offset: int, total: int) -> Segments | None:
    """The nonempty segments of X's columns if every one is a fold, else None; once per plan object and columns
    (plans are immutable: a runner folds every step's chunks with the same plan)."""
    key = (id(p), nel, offset, total)
    hit = _SEEN.get(key)
    if hit is not None and hit[0] is p:
        return hit[1]
    segs = _left_segments(p, nel, offset, total)
    if len(_SEEN) >= 16:
        _SEEN.clear()
    _SEEN[key] = (p, segs)
    return segs


def _left_segments(p: SegmentedPlan, nel: int, offset: int, total: int) -> Segments | None:
    b = np.clip(p.bounds(total) - offset, 0, nel)
    P = p.chunk_orders
    if P is not None and p.shape is not None:
        order = fold_order(p.shape.root)  # the shape's slots in fold order
        if order is None:
            return None
        orders = P[:, order]  # chunk c puts worker P[c, slot] in slot
    else:
        folds = []
        for t in p.trees:
            order = fold_order(t.root)
            if order is None:
                return None
            folds.append(order)
        orders = np.array(folds)
    keep = np.flatnonzero(b[1 : len(orders) + 1] > b[: len(orders)])
    perms = np.ascontiguousarray(orders[keep], dtype=np.int64)
    rot = _rotated.rotations(perms) if nel >= ROT and perms.size else None
    return Segments(b[keep].astype(np.int64), b[keep + 1].astype(np.int64), perms, rot)


_TRACE: list[list[Route]] = []


def note(route: Route) -> None:
    """Record that the engine ran ``route`` (only inside :func:`trace`)."""
    if _TRACE:
        _TRACE[-1].append(route)


@contextmanager
def trace() -> Iterator[list[Route]]:
    """The routes run inside the block, in order (reruns included).

    >>> import numpy as np, fpreduce as fr
    >>> with trace() as seen:
    ...     _ = fr.reduce(np.ones((4, 3), np.float32), "sequential", algorithm="exact")
    >>> seen
    [<Route.EXACT: 'exact'>]
    """
    seen: list[Route] = []
    _TRACE.append(seen)
    try:
        yield seen
    finally:
        _TRACE.pop()
