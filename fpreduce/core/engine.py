"""Run a plan over a (workers, elements) array, bit-exactly, vectorized over elements.

Every partial sum is rounded to the accumulator format once, from the exact sum of
its two operands, as IEEE 754 addition does on hardware (:mod:`fpreduce.core.arith`
says how, in each mode). Signed zeros follow IEEE 754 6.3: an exact zero sum of
opposite-signed operands is +0 except in mode ``down`` (-0); -0 + -0 = -0. NaN and
Inf propagate as in IEEE.

The scheduler cuts the elements into blocks (``_Block``) of one tree shape: a view of
X with one leaf order, segments gathered side by side, or a per-element plan's
columns; ``_evaluate`` folds each on the fast path (:mod:`fpreduce.core._fastpath`)
when it can, else on the general one. ``reduce_reference`` is the slow Fraction twin.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce.base import jit
from fpreduce.base.dtypes import as_float_array, is_tensor
from fpreduce.base.errors import InvalidArgument
from fpreduce.base.fpflags import own_flags
from fpreduce.base.threads import check as check_threads
from fpreduce.base.threads import resolve as resolve_threads
from fpreduce.base.threads import run as run_threads
from fpreduce.core import _binned, _srload, algorithms
from fpreduce.core._compensated import compensated_plan
from fpreduce.core._fastpath import _fast_block, _fused_atomic, _gather_orders
from fpreduce.core._pairwise import PAIRWISE
from fpreduce.core._reference import add_exact, round_float, round_fraction
from fpreduce.core._segments import fold_chunks, fold_segments, is_left_deep
from fpreduce.core._sr_numpy import _fold_numpy_sr
from fpreduce.core._tall import fold_plan
from fpreduce.core.arith import _Arith, _Loader, _scale
from fpreduce.core.formats import Format, as_native, get_format, input_format
from fpreduce.core.options import Algorithm, Average, Result, get_algorithm, get_average, get_result
from fpreduce.core.rounding import Mode, get_mode, round_in_place, round_to
from fpreduce.core.routes import Case, Decision, decide, left_segments, note
from fpreduce.core.routes import Route as R
from fpreduce.plans import (
    AnyPlan,
    PerElementPlan,
    Plan,
    SegmentedPlan,
    Tree,
    by_message,
    fold,
    pairwise,
    parse,
    sequential,
)

__all__ = ["explain", "reduce", "reduce_reference"]

_BLOCK = 1 << 15  # elements per block: a few rows of this stay in L2 while they are summed
_TREELESS = ("plain", "binned", "exact")  # algorithms that need no tree for the texts sequential and pairwise


@functools.lru_cache(maxsize=16)
def _parsed(text: str, n: int, seed: int, elements: int | None = None, item_bytes: int | None = None) -> AnyPlan:
    """:func:`fpreduce.plans.parse`, once per (text, n, seed): plans are immutable, and building one of
    1024 workers' trees (rabenseifner, ring) costs seconds of Python that every call repeated."""
    return parse(text, n, seed=seed, elements=elements, item_bytes=item_bytes)


def _message(plan: str, X: ArrayLike, A: np.ndarray, input: object, total: object) -> tuple[int, ...]:
    """The message a plan chosen by it (``ompi:default``: :func:`fpreduce.plans.by_message`) is parsed for:
    ``total`` elements (default X's columns) of the input format's bytes (X's dtype unless ``input``)."""
    if not by_message(plan):
        return ()
    return (A.shape[1] if total is None else int(total), input_format(X, A, input).bits // 8)  # type: ignore[call-overload]


_NOT_FLOAT = "X must be a float array of shape (workers, elements), got {dtype}"


def _prepare(
    X: ArrayLike,
    plan: AnyPlan | str,
    seed: object = None,
    *,
    lazy: bool = False,
    input: object = None,
    total: object = None,
) -> tuple[np.ndarray, AnyPlan | str | None]:
    """X as a 2-D float array (a torch tensor's values: :func:`fpreduce.base.dtypes.tensor_values`) and the
    plan, drawn from ``seed`` when it is an integer; with ``lazy``, the text ``sequential`` gives None and
    ``pairwise`` ``PAIRWISE`` (their trees are built only when needed: the compiled fold takes neither);
    ``input`` and ``total`` size the message of a plan chosen by it (``ompi:default``)."""
    A = as_float_array(X, _NOT_FLOAT)
    if A.ndim == 1:
        A = A[:, None]
    if A.ndim != 2:
        raise InvalidArgument(f"X must have shape (workers, elements), got shape {A.shape}")
    if lazy and isinstance(plan, str) and plan.strip() in ("sequential", PAIRWISE) and A.shape[0] >= 1:
        return A, None if plan.strip() == "sequential" else PAIRWISE  # the compiled fold needs no tree of n leaves
    p = (
        _parsed(
            plan.strip(),
            A.shape[0],
            int(seed) if isinstance(seed, int | np.integer) else 0,
            *_message(plan, X, A, input, total),
        )
        if isinstance(plan, str)
        else plan
    )
    if p.n != A.shape[0]:
        raise InvalidArgument(f"plan has {p.n} workers but X has {A.shape[0]} rows")
    return A, p


def _span(offset: int, nel: int, total: int | None) -> int:
    """``total`` (default ``nel``), checked: X's columns are elements offset .. offset + nel - 1 of it."""
    total = nel if total is None else int(total)
    if not (isinstance(offset, int | np.integer) and 0 <= offset <= total - nel):
        raise InvalidArgument(
            f"need 0 <= offset and offset + elements <= total, got offset={offset}, elements={nel}, total={total}"
        )
    return total


_BLOCK_VALUES = 1 << 19  # values per column block of a reduction whose every input is scaled (2 MiB of float32: L2)


def _scaled_in_blocks(X: ArrayLike, options: dict[str, Any]) -> bool:
    """Whether :func:`reduce` runs in column blocks (:func:`_in_blocks`): a plain reduction of a wide numpy array
    whose every input is scaled (``premultiply``, ``predivide``, ``ddp``), with a seed that is not a Generator
    (whose stream would move from block to block) and a float result."""
    return (
        isinstance(X, np.ndarray)
        and X.ndim == 2
        and X.shape[0] > 0
        and X.shape[1] >= 2 * _block_width(X.shape[0])
        and get_algorithm(options.get("algorithm", "plain")) == "plain"
        and get_average(options.get("average", "none")) in ("premultiply", "predivide", "ddp")
        and get_result(options.get("result", "float")) == "float"
        and not isinstance(options.get("seed"), np.random.Generator)
    )


def _block_width(n: int) -> int:
    """The columns of a block of :func:`_in_blocks` for ``n`` rows: about :data:`_BLOCK_VALUES` values."""
    return max(_BLOCK_VALUES // n, 64) // 64 * 64


def _blocks_of(X: ArrayLike, options: dict[str, Any]) -> tuple[np.ndarray, int, int, int, int] | None:
    """How ``reduce(X, plan, **options)`` runs in column blocks: (X as an array, the block width, offset, total,
    the threads the blocks spread over), ``offset``, ``total`` and ``threads`` taken out of ``options``; None
    when it runs at once (:func:`_scaled_in_blocks`). One answer for :func:`_in_blocks` and :func:`explain`."""
    A = as_float_array(X, _NOT_FLOAT) if is_tensor(X) else X  # (a tensor's values: a view of its words)
    if not _scaled_in_blocks(A, options):
        return None
    assert isinstance(A, np.ndarray)
    n, nel = A.shape
    threads, offset = check_threads(options.pop("threads", None)), options.pop("offset", 0)
    total = _span(offset, nel, options.pop("total", None))
    return A, _block_width(n), offset, total, resolve_threads(threads, n * nel)


def _in_blocks(fn: Callable[..., NDArray[np.floating]]) -> Callable[..., NDArray[np.floating]]:
    """:func:`reduce` (``fn``) of ``X``'s columns in blocks of about :data:`_BLOCK_VALUES` values when
    :func:`_scaled_in_blocks` says so: each block reduced whole (its inputs widened, scaled and folded while
    they are in cache), the blocks spread over ``threads``: the same bits as at once, since a vector reduced
    piece by piece (``offset``, ``total``) gives the bits of the whole.

    At once, the scaling made three passes over a whole float32 copy of X (widened, NaN checked, scaled), each
    into a new array as large. On 64 x 2**20 bf16 words to bf16: premultiply and ddp 182-190 ms at once on one
    or two threads (7-8x the 63 in-place float32 adds), 109-110 ms in blocks on one thread and 69-72 ms on two;
    predivide 183-194 ms, then 146 and 89 (with the words scaled as read, ``arith._scale_compiled``: premultiply
    89 and 61-63 ms, predivide 126 and 70). Blocks of 2**19 values (2 MiB of float32, this machine's L2) ran
    faster than of 2**18 (per-call costs) and 2**20 or 2**21."""

    @functools.wraps(fn)
    def in_blocks(X: ArrayLike, plan: AnyPlan | str, **options: Any) -> NDArray[np.floating]:
        blocked = _blocks_of(X, options)
        if blocked is None:
            return fn(X, plan, **options)
        X, w, offset, total, parts = blocked
        nel = X.shape[1]
        spans = [(lo, min(lo + w, nel)) for lo in range(0, nel, w)]
        first = reduce(X[:, :w], plan, offset=offset, total=total, threads=1, **options)  # (a bad argument: here)
        out = np.empty(nel, dtype=first.dtype)
        out[:w] = first

        def work(k: int) -> None:
            for lo, hi in spans[1 + k :: parts]:
                out[lo:hi] = reduce(X[:, lo:hi], plan, offset=offset + lo, total=total, threads=1, **options)

        run_threads(work, [(k,) for k in range(min(parts, len(spans) - 1))])
        return out

    return in_blocks


@own_flags
@_in_blocks
def reduce(
    X: ArrayLike,
    plan: AnyPlan | str,
    *,
    input: str | Format | None = None,
    accumulate: str | Format = "fp32",
    rounding: str | Mode = "nearest_even",
    seed: int | np.random.Generator | None = None,
    algorithm: Algorithm | str = "plain",
    output: str | Format | None = None,
    average: Average | str = "none",
    offset: int = 0,
    total: int | None = None,
    result: Result | str = "float",
    threads: int | None = None,
) -> NDArray[np.floating]:
    """Sum the rows of ``X`` along ``plan``, rounding every partial sum.

    Args:
        X: shape (workers, elements) (or (workers,)); values are first rounded to
            ``input`` (nearest even) explicitly. NaN and ±Inf propagate as in IEEE.
        plan: a plan or its text (``"pairwise"``, ``"ring:nccl"``, ``"((0,1),2)"``); ``"ompi:default"``: Open MPI
            4.1's own choice for X's rows and ``total`` elements of the input format (:mod:`fpreduce.plans.ompi`).
        input: input format (default: X's own, its numpy, ml_dtypes or torch dtype's; one that would cast
            X's narrow dtype is refused: :func:`~fpreduce.core.formats.input_format`); accumulate: accumulator
            format (every partial sum is rounded to it, as in MPI, gloo and NCCL ring/tree, whose every hop rounds).
        rounding: rounding mode of every operation.
        seed: seed or Generator for stochastic rounding (and for ``atomic`` given as text).
        algorithm: ``plain`` (the plan's tree), ``kahan`` / ``neumaier`` (compensated,
            in the accumulator format, along the plan's leaf order), ``binned``
            (reproducible: order independent), ``exact`` (exact sum rounded once).
        output: round the final sum once to this format (default: ``accumulate``):
            ``accumulate="fp32", output="bf16"``: "accumulate wide, round once" (NCCL NVLS, symmetric kernels).
        average: ``none``; ``after`` (sum, then divide by N in the accumulator format, then round once to ``output``);
            ``premultiply`` (every input times 1/N, both rounded to ``input`` first: NCCL's ncclAvg); ``predivide``
            (every input divided by N in ``input``, one rounding); ``ddp`` (PyTorch DistributedDataParallel's default,
            no comm hook: its reducer copies each gradient into the bucket as ``grad * (1. / N)``, the factor rounded
            to float32 and the product computed in float32 (torch's "opmath" for fp16, bf16 and fp32; float64 for
            fp64) then rounded to the gradient's format, i.e. ``input``; always to nearest even, whatever ``rounding``
            says for the sum). For fp32 inputs ``ddp`` is ``premultiply``; it differs from ``predivide`` whenever N is
            not a power of two.
        offset, total: ``X`` holds columns ``offset .. offset + X.shape[1] - 1`` of a
            vector of ``total`` elements (default: all of it). Plans whose trees vary
            over the elements (ring chunks, atomics) are laid out over ``total``, so
            reducing a long vector piece by piece gives the same bits as reducing it
            whole. Stochastic rounding with ``algorithm="plain"`` draws every rounding
            (the additions, inputs rounded into a narrower accumulator, ``average``
            and ``output``) by element from one key, the first draw of ``seed``'s
            Generator (:mod:`fpreduce.core._srload`): the same bits in pieces; the
            other algorithms draw from ``seed``'s Generator per call.

        threads: the compiled row folds' threads (None: every core, ``$FPREDUCE_THREADS``): same bits for any.

    Returns:
        shape (elements,), float32 (float64 for an fp64 result); ``result="native"``: the result format's own
        dtype (:func:`fpreduce.as_native`: ml_dtypes' for bf16 and fp8; a torch tensor when X is one).

    >>> import numpy as np
    >>> x = np.array([[1.0], [2.0**-8], [2.0**-8]])
    >>> float(reduce(x, "sequential", input="fp32", accumulate="bf16")[0])
    1.0
    >>> float(reduce(x, "((1,2),0)", accumulate="bf16")[0])
    1.0078125
    >>> float(reduce(x, "sequential", accumulate="fp32", output="bf16")[0])
    1.0078125
    """
    m, threads = _check_args(plan, seed, rounding), check_threads(threads)
    A, p = _prepare(X, plan, seed, lazy=get_algorithm(algorithm) in _TREELESS, input=input, total=total)
    fin, fa = input_format(X, A, input), get_format(accumulate)
    fo = fa if output is None else get_format(output)
    alg, avg, res = get_algorithm(algorithm), get_average(average), get_result(result)
    rng = np.random.default_rng(seed) if m is Mode.STOCHASTIC else None
    n, nel = A.shape
    total = _span(offset, nel, total)
    ar = _Arith(fa, m, rng, threads)
    load = _Loader(A, fin, fa, m, rng, ar.dtype)
    if avg == "premultiply" or avg == "predivide" or avg == "ddp":
        load.premul, load.threads = (avg, float(n)), threads
    counter = m is Mode.STOCHASTIC and alg == "plain"  # every rounding draws by element (module _srload)
    if counter and (not load.fits or load.premul is not None):
        A = _srload.load(A, load, int(ar.sr_key()), int(offset), threads)  # values of fa now
        load = _Loader(A, fa, fa, m, rng, ar.dtype)
    dec = decide(Case.of(alg, p, A, load, int(offset), total, threads))
    if alg == "binned" or alg == "exact":
        out = _order_free(A, load, fa, m, rng, dec)
    else:
        out = _fold_blocks(p, A, load, ar, alg, int(offset), total, dec)
    own = isinstance(out, np.ndarray) and out.flags.owndata and not np.may_share_memory(out, A)  # (a fresh array)
    y = _finish(np.asarray(out, dtype=fa.value_dtype), avg == "after", n, fo, ar, counter, int(offset), own)
    return as_native(y, fo, X) if res == "native" else y  # type: ignore[no-any-return]


def _check_args(plan: object, seed: object, rounding: str | Mode) -> Mode:
    """``reduce``'s plan and seed checked (an ``InvalidArgument`` naming the argument); the rounding mode."""
    if not isinstance(plan, str | Plan | SegmentedPlan | PerElementPlan):
        raise InvalidArgument(f"plan must be a plan (fpreduce.plans) or its text, e.g. 'ring:8', got {plan!r}")
    if not (seed is None or isinstance(seed, np.random.Generator)) and (
        isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0
    ):
        raise InvalidArgument(f"seed must be None, an integer >= 0 or a numpy Generator, got {seed!r}")
    m = get_mode(rounding)
    if m is Mode.STOCHASTIC and seed is None:
        raise InvalidArgument("stochastic rounding needs seed= for reproducibility")
    return m


def explain(X: ArrayLike, plan: AnyPlan | str, **options: object) -> Decision:
    """The route ``reduce(X, plan, **options)`` takes (:mod:`fpreduce.core.routes`), with its reasons; nothing is
    summed. ``print()`` it, or ``.to_dict()`` for JSON (``fpreduce sum --explain``).

    >>> import numpy as np
    >>> print(explain(np.ones((64, 1 << 12), np.float32), "ring", input="bf16", accumulate="bf16").route.value)
    ring_rows
    """
    blocked = _blocks_of(X, options)
    if blocked is None:
        return decide(case_of(X, plan, **options))  # type: ignore[arg-type]
    A, w, offset, total, parts = blocked  # every block's route: its columns', on one thread
    dec = decide(case_of(A[:, :w], plan, offset=offset, total=total, threads=1, **options))  # type: ignore[arg-type]
    return replace(dec, blocks=w, threads=parts)


def case_of(
    X: ArrayLike,
    plan: AnyPlan | str,
    *,
    input: str | Format | None = None,
    accumulate: str | Format = "fp32",
    rounding: str | Mode = "nearest_even",
    seed: int | np.random.Generator | None = None,
    algorithm: Algorithm | str = "plain",
    output: str | Format | None = None,
    average: Average | str = "none",
    offset: int = 0,
    total: int | None = None,
    result: Result | str = "float",
    threads: int | None = None,
) -> Case:
    """The route table's facts for ``reduce(X, plan, ...)`` with the same arguments, without summing."""
    m, alg, avg, _ = get_mode(rounding), get_algorithm(algorithm), get_average(average), get_result(result)
    A, p = _prepare(X, plan, seed, lazy=alg in _TREELESS, input=input, total=total)
    fin, fa = input_format(X, A, input), get_format(accumulate)
    if output is not None:
        get_format(output)
    total = _span(offset, A.shape[1], total)
    premul = avg in ("premultiply", "predivide", "ddp")
    n, cols = A.shape
    case = Case(alg, p, n, cols, fin, fa, m, A.dtype, A.flags.c_contiguous, premul, jit.enabled(), int(offset),
                total, check_threads(threads))  # fmt: skip
    if m is Mode.STOCHASTIC and alg == "plain" and (not case.fits or premul):  # loaded by element first: fa's values
        case = replace(case, fin=fa, dtype=np.dtype(np.float64), contiguous=True, premul=False)
    return case


def _finish(
    res: np.ndarray, after: bool, n: int, fo: Format, ar: _Arith, counter: bool, offset: int, own: bool = False
) -> np.ndarray:
    """The sums divided by n (``after``: one IEEE division in the accumulator format), then in the output format.

    ``counter``: stochastic roundings drawn by element (:mod:`fpreduce.core._srload`); ``own``: ``res`` is the
    reduction's own fresh array (rounded in place where it can be: :func:`fpreduce.core.rounding.round_in_place`).
    """
    fa, m, rng = ar.fa, ar.mode, ar.rng
    if after:
        res = (
            _srload.after(res, float(n), fa, int(ar.sr_key()), offset, ar.threads)
            if counter
            else _scale(res, ("after", float(n)), fa, m, rng, ar.threads)
        )
    if fo is not fa and counter:
        res = _srload.output(res, fo, int(ar.sr_key()), offset, ar.threads)
    elif fo is not fa and not (own and not after and round_in_place(res, fo, m, ar.threads)):
        res = round_to(res, fo, m, rng, threads=ar.threads)
    return np.asarray(res, dtype=fo.value_dtype)


@dataclass(frozen=True, eq=False)
class _View:
    """Leaf k of the block is ``X[perm[k], lo:hi]``: a plan that is the same for every element."""

    perm: np.ndarray


@dataclass(frozen=True, eq=False)
class _Segments:
    """Segments ``(lo, hi, perm)`` of one tree shape, gathered side by side (one fold serves them all)."""

    batch: tuple[tuple[int, int, np.ndarray], ...]


@dataclass(frozen=True, eq=False)
class _Atomic:
    """A per-element plan: element ``offset + j`` sums in its own order (fused, or drawn in ``_evaluate``)."""

    plan: PerElementPlan
    offset: int


@dataclass(frozen=True, eq=False)
class _Orders:
    """Every element's own leaf order, ``orders[j]`` for column ``lo + j``: a left fold each."""

    orders: np.ndarray


@dataclass(frozen=True, eq=False)
class _Block:
    """Columns ``lo .. hi - 1`` of the result (X's columns ``cols`` when not contiguous), one shape."""

    lo: int
    hi: int
    cols: np.ndarray | None
    shape: Tree | None
    rows: _View | _Segments | _Atomic


def _fold_blocks(
    p: AnyPlan | str | None,
    A: np.ndarray,
    load: _Loader,
    ar: _Arith,
    algorithm: Algorithm,
    offset: int,
    total: int,
    dec: Decision,
) -> np.ndarray:
    """The plain or compensated reduction of every column of ``A`` by the route ``dec`` (its rerun: the blocks)."""
    nel, r = A.shape[1], dec.route
    res = None
    if r is R.COMPENSATED:
        note(r)
        assert isinstance(p, Plan)
        res = compensated_plan(np.array(p.leaves(), dtype=np.int64), A, load, ar, algorithm)
    elif r is R.RING_ROWS or r is R.SEGMENT_FOLDS:
        note(r)
        assert isinstance(p, SegmentedPlan)
        segs = left_segments(p, nel, offset, total)
        assert segs is not None
        res = fold_segments(segs, A, load, ar, offset, dec)
    elif r is R.CHUNK_TREES:
        note(r)
        assert isinstance(p, SegmentedPlan)
        res = fold_chunks(p, A, load, ar, offset, total)
    elif r is not R.BLOCKS:  # one tree for every element (Rabenseifner's chunks too): compiled
        one = p.grouping if isinstance(p, SegmentedPlan) else p
        assert not isinstance(one, SegmentedPlan | PerElementPlan)
        res = fold_plan(one.root if isinstance(one, Plan) else one, A, load, ar, offset, dec)
    if res is not None:
        return res
    note(R.BLOCKS)
    if p is None or isinstance(p, str):
        p = sequential(A.shape[0]) if p is None else pairwise(A.shape[0])
    if ar.mode is Mode.STOCHASTIC:
        ar.sr_key()  # drawn first, as the compiled fold does
    out = np.empty(nel, dtype=ar.dtype)
    for blk in _pieces(p, nel, offset, total):
        dest = out[blk.lo : blk.hi] if blk.cols is None else None
        if ar.mode is Mode.STOCHASTIC:  # the counter-based generator draws by element (any chunking)
            ar.elements = offset + (np.arange(blk.lo, blk.hi) if blk.cols is None else blk.cols)
        res = _evaluate(blk, A, load, ar, algorithm, dest)
        if res is dest:
            pass  # computed in place
        elif blk.cols is None:
            out[blk.lo : blk.hi] = res
        else:
            out[blk.cols] = res
    return out


def _pieces(p: AnyPlan, nel: int, offset: int = 0, total: int | None = None) -> Iterator[_Block]:
    """Yield the blocks of work on columns 0..nel-1 of X.

    X's column j is element ``offset + j`` of a vector of ``total`` elements.

    A plan that is the same for every element gives ``_View`` blocks; segments that
    share a tree shape are gathered side by side (``_Segments``) so one fold serves
    them all (ring all-reduce has one shape and n leaf orders); a per-element plan
    gives ``_Atomic`` blocks: ``_evaluate`` folds them in one numba pass when it can
    (``_fused_atomic``), else gathers every element's own order.
    """
    if isinstance(p, Plan):
        key, shape, perm = p.slot_shape
        for lo in range(0, nel, _BLOCK):
            yield _Block(lo, min(nel, lo + _BLOCK), None, shape, _View(perm))
        return
    if isinstance(p, SegmentedPlan):
        yield from _segment_blocks(p, nel, offset, total)
        return
    for lo in range(0, nel, _BLOCK):  # a per-element plan (atomics)
        yield _Block(lo, min(nel, lo + _BLOCK), None, None, _Atomic(p, offset))


def _segment_blocks(p: SegmentedPlan, nel: int, offset: int, total: int | None) -> Iterator[_Block]:
    """The blocks of a segmented plan: its segments grouped by tree shape, batched up to ``_BLOCK`` wide."""
    b = np.clip(p.bounds(nel if total is None else total) - offset, 0, nel)
    groups: dict[bytes, tuple[Tree, list[tuple[int, int, np.ndarray]]]] = {}
    P = p.chunk_orders
    if P is not None and p.shape is not None:  # one shape, a leaf order per chunk: one group
        key, shape, slots = p.shape.slot_shape
        Pc = P[:, slots]  # chunk c: k-th leaf (left to right) is worker Pc[c, k]
        groups[key] = (shape, [(int(b[c]), int(b[c + 1]), Pc[c]) for c in range(len(P)) if b[c + 1] > b[c]])
    for c, t in enumerate(p.trees if P is None else ()):
        if b[c + 1] > b[c]:
            key, shape, perm = t.slot_shape
            groups.setdefault(key, (shape, []))[1].append((int(b[c]), int(b[c + 1]), perm))
    for shape, segs in groups.values():
        batch: list[tuple[int, int, np.ndarray]] = []
        width = 0
        for lo, hi, perm in segs:
            if hi - lo >= _BLOCK // 4:  # wide enough alone: a view of X, no gather
                for s in range(lo, hi, _BLOCK):
                    yield _gathered([(s, min(hi, s + _BLOCK), perm)], min(hi, s + _BLOCK) - s, shape)
                continue
            while lo < hi:
                take = min(hi - lo, _BLOCK - width)
                batch.append((lo, lo + take, perm))
                width += take
                lo += take
                if width == _BLOCK:
                    yield _gathered(batch, width, shape)
                    batch, width = [], 0
        if batch:
            yield _gathered(batch, width, shape)


def _gathered(batch: list[tuple[int, int, np.ndarray]], width: int, shape: Tree) -> _Block:
    cols = np.concatenate([np.arange(lo, hi) for lo, hi, _ in batch])
    lo0, hi0 = batch[0][0], batch[-1][1]
    contiguous = hi0 - lo0 == width and bool(np.all(np.diff(cols) == 1))
    return _Block(lo0, lo0 + width, None if contiguous else cols, shape, _Segments(tuple(batch)))


def _gather_segments(A: np.ndarray, batch: tuple[tuple[int, int, np.ndarray], ...], Y: np.ndarray) -> np.ndarray:
    """Y[:, a:b] <- the segments' columns of X, each in its leaf order, side by side."""
    n = A.shape[0]
    a = 0
    ramp2 = np.concatenate([np.arange(n), np.arange(n)])
    for s_lo, s_hi, perm in batch:
        b = a + s_hi - s_lo
        r = int(perm[0])
        if r and np.array_equal(perm, ramp2[r : r + n]):
            Y[: n - r, a:b] = A[r:, s_lo:s_hi]  # a rotation (ring): two slice copies
            Y[n - r :, a:b] = A[:r, s_lo:s_hi]
        else:
            Y[:, a:b] = A[perm, s_lo:s_hi]
        a = b
    return Y


def _evaluate(
    blk: _Block, A: np.ndarray, load: _Loader, ar: _Arith, algorithm: Algorithm, dest: np.ndarray | None = None
) -> np.ndarray:
    """One block's sums: on the fast path when it applies, else leaf by leaf (``dest``: the output slice)."""
    lo, hi, shape = blk.lo, blk.hi, blk.shape
    n, width = A.shape[0], hi - lo
    rows: _View | _Segments | _Atomic | _Orders = blk.rows
    if isinstance(rows, _Atomic):
        if algorithm == "plain":
            res = _fused_atomic(rows.plan, A, lo, hi, rows.offset, load, ar, dest)
            if res is not None:
                note(R.FUSED_ATOMIC)
                return res
        rows = _Orders(rows.plan.orders(rows.offset + lo, rows.offset + hi))
    if isinstance(rows, _Segments) and len(rows.batch) == 1 and not jit.enabled():
        rows = _View(rows.batch[0][2])  # one segment, numpy: a view with its leaf order (compiled: gathered)
    Y = None
    if isinstance(rows, _Orders):
        Y = _gather_orders(A, rows.orders, lo, hi, ar.gather_buffer(n, width, A.dtype))
        shape = None  # a left fold in each element's own order
    elif isinstance(rows, _Segments):
        Y = _gather_segments(A, rows.batch, ar.gather_buffer(n, width, A.dtype))
    perm = rows.perm if isinstance(rows, _View) else None
    if algorithm == "plain" and Y is not None and (ar.mode is not Mode.STOCHASTIC or blk.cols is None):
        e0 = int(ar.elements[0]) if ar.elements is not None else 0  # stochastic: contiguous elements
        res = fold_plan(shape, Y, load, ar, e0)  # the gathered leaves, compiled (None: no numba)
        if res is not None:
            return res
    if algorithm == "plain":
        res = _fast_block(shape, A[:, lo:hi] if Y is None else Y, perm, load, ar, dest)
        if res is not None:
            note(R.NUMPY_FAST)
            return res
    if Y is None:
        assert perm is not None

        def leaf(k: int) -> np.ndarray:
            return load(A[perm[k], lo:hi])
    else:
        Yc = load(Y)

        def leaf(k: int) -> np.ndarray:
            return Yc[k]

    return _fold_leaves(shape, leaf, n, width, ar, algorithm)


def _fold_leaves(
    shape: Tree | None, leaf: Callable[[int], np.ndarray], n: int, width: int, ar: _Arith, algorithm: Algorithm
) -> np.ndarray:
    """The general path: leaves ``leaf(0 .. n-1)`` summed along ``shape`` (None: a left fold), or compensated.

    Stochastic rounding (plain) draws from the counter-based generator of the compiled
    fold (:func:`fpreduce.core._sr_numpy._fold_numpy_sr`: by element and addition).
    """
    if algorithm == "plain" and ar.mode is Mode.STOCHASTIC and ar.elements is not None:
        note(R.SR_NUMPY)
        Y = np.stack([np.asarray(leaf(k), dtype=np.float64) for k in range(n)])
        order = np.zeros(0, dtype=np.int64) if shape is None else None
        return _fold_numpy_sr(shape, order, Y, ar.fa, ar.sr_key(), ar.elements)
    if algorithm == "kahan" or algorithm == "neumaier":
        note(R.NUMPY_COMPENSATED)
        Z = np.stack([np.asarray(leaf(k), dtype=ar.dtype) for k in range(n)])
        return algorithms.compensated(Z, ar.fa, ar.mode, kind=algorithm, rng=ar.rng)
    note(R.NUMPY_FOLD)
    if shape is None or is_left_deep(shape):
        acc = np.array(leaf(0), dtype=ar.dtype)  # a copy
        scratch = np.empty(width, dtype=np.uint32)
        with np.errstate(over="ignore", invalid="ignore"):
            for k in range(1, n):
                ar.add_into(acc, leaf(k), scratch)
        return acc
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(fold(shape, leaf, ar.add), dtype=ar.dtype)


def _order_free(
    A: np.ndarray, load: _Loader, fa: Format, mode: Mode, rng: np.random.Generator | None, dec: Decision
) -> np.ndarray:
    """``exact`` or ``binned`` of the loaded input by the route ``dec``. ``BINNED_COMPILED``: float32 bf16/tf32
    inputs go to binned's compiled pass as they are, which checks that they hold such values while it reads
    them (else: loaded, and the numpy ``BINNED``)."""
    load.fits = True  # the exact sum of the input values, rounded once
    load.dtype = np.dtype(np.float64) if load.fin.precision == 53 else np.dtype(np.float32)
    note(dec.route)
    if dec.route is R.EXACT:
        return algorithms.exact(load(A), fa, mode, rng)
    if dec.route is R.BINNED_COMPILED:
        B, f, m, _ = algorithms._binned_args(A, fa, mode, None)  # raises as binned would
        out = _binned.binned_checked(B, f, m, (1 << (24 - load.fin.precision)) - 1)
        if out is not None:
            return out
        note(R.BINNED)
    return algorithms.binned(load(A), fa, mode, rng=rng)  # stochastic: the seed's generator (once, at the end)


@own_flags
def reduce_reference(
    X: ArrayLike,
    plan: AnyPlan | str,
    *,
    input: str | Format | None = None,
    accumulate: str | Format = "fp32",
    rounding: str | Mode = "nearest_even",
    output: str | Format | None = None,
    average: str = "none",
) -> NDArray[np.floating]:
    """The slow, obvious reference of ``reduce`` (plain algorithm): exact rationals,
    one rounding per operation, a Python loop per element; for tests.

    Every addition is :func:`fpreduce.core._reference.add_exact`. Stochastic rounding
    is not supported here.
    """
    A, p = _prepare(X, plan, input=input)
    assert p is not None
    assert not isinstance(p, str)
    avg = get_average(average)
    fin, fa = input_format(X, A, input), get_format(accumulate)
    fo = fa if output is None else get_format(output)
    m = get_mode(rounding)
    if m is Mode.STOCHASTIC:
        raise InvalidArgument("reduce_reference has no stochastic mode")
    Xi = round_to(A.astype(np.float64) if A.dtype.itemsize < 4 else A, fin)
    n, nel = Xi.shape
    out = np.empty(nel, dtype=np.float64)
    if isinstance(p, SegmentedPlan):
        b = p.bounds(nel)
        tree_of = [p.trees[int(np.searchsorted(b, j, side="right")) - 1].root for j in range(nel)]
    elif isinstance(p, Plan):
        tree_of = [p.root] * nel
    else:
        tree_of = [sequential(n, o).root for o in p.orders(0, nel)]

    def op(v: Fraction, f: Format) -> float:
        return round_fraction(v, f, m.value) if v != 0 else 0.0

    def add(a: float, b: float) -> float:
        return add_exact(a, b, fa, m.value)

    for j in range(nel):
        col = [float(v) for v in Xi[:, j]]
        if avg == "premultiply":
            c = Fraction(round_fraction(Fraction(1, n), fin, "nearest_even"))
            col = [v if not np.isfinite(v) else np.copysign(op(Fraction(v) * c, fin), v) for v in col]
        elif avg == "predivide":
            col = [v if not np.isfinite(v) else np.copysign(op(Fraction(v) / n, fin), v) for v in col]
        elif avg == "ddp":  # float32(1/N), the product rounded to float32 (float64 for fp64), then to the input
            fop = get_format("fp64" if fin.precision == 53 else "fp32")
            c = Fraction(round_fraction(Fraction(1, n), fop, "nearest_even"))
            col = [
                v
                if not np.isfinite(v)
                else np.copysign(
                    round_float(round_fraction(Fraction(v) * c, fop, "nearest_even"), fin, "nearest_even"), v
                )
                if v != 0
                else v
                for v in col
            ]
        col = [round_float(v, fa, m.value) for v in col]
        y = fold(tree_of[j], col.__getitem__, add)
        if avg == "after" and np.isfinite(y):
            y = np.copysign(op(Fraction(y) / n, fa), y)
        if fo is not fa:
            y = round_float(y, fo, m.value)
        out[j] = y
    return out.astype(fo.value_dtype)
