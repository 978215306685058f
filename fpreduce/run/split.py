"""A run split by element ranges: each rank's share of a step, and rank 0's exact merge of the shares.

A step's elements are cut into chunks (:func:`fpreduce.run.runner.chunk_width`
elements, a function of the worker count only); a split run gives each rank a
contiguous range of whole chunks (:func:`span`), so every rank reduces and measures
exactly the chunks a single process would, with the same seeds. Every statistic of a
step then merges exactly (:func:`merge`), and the rows equal the single process's bit
for bit:

* counts and histograms add (integers); maxima take the maximum (NaN propagates);
* float64 sums (``sum |y - s|^2``, ``sum rel``, ...) are added by the single process
  chunk after chunk, starting from 0.0; a rank hands over each of its chunks' own sums
  (:class:`Share` ``sums``), and rank 0 adds them in chunk order: the same additions in
  the same order;
* the median of the relative errors (float32, ``np.median``'s value) is selected
  exactly from merged counts of their bit patterns (non-negative float32 values order
  like their bits): the counts of the top 16 bits of every rank (:class:`Share` ``top``)
  locate the bucket of the two middle values (:func:`median_buckets`), then the counts
  of the low 16 bits inside those buckets (:func:`low_counts`) give their exact bits
  (:func:`medians`). Two rounds of 65,536 counts per arm and step, whatever the elements.

Used by :mod:`fpreduce.backends.distributed` (the MPI driver); everything here is plain
numpy, so the merge is tested without MPI too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from fpreduce.core.formats import get_format
from fpreduce.core.rounding import round_to
from fpreduce.run.config import Config
from fpreduce.run.digest import DIGEST_BITS, digest
from fpreduce.run.policies import plan_for
from fpreduce.run.runner import _Arm, _compute_step, _init_arms, _record, _reduce, _Step, chunk_width
from fpreduce.run.sources import Source
from fpreduce.run.stepmetrics import ULP_EDGES, CompareStats, ErrorStats

__all__ = [
    "Merged",
    "Share",
    "compute_share",
    "join_parts",
    "low_counts",
    "median_buckets",
    "medians",
    "merge",
    "rank_arms",
    "record",
    "reduce_part",
    "span",
    "train_step",
]

_ERR_SUMS = ("rel_sum", "sq_err", "sq_exact")
_CMP_SUMS = ("d_sum", "sq_diff", "sq_ref")
_ERR_COUNTS = ("total", "nonfinite", "correct", "finite")
_CMP_COUNTS = ("total", "differ")
_ERR_MAX = ("rel_max", "ulp_max", "bwd_max")
_BUCKETS = 1 << 16
_NAN32 = np.uint32(0x7F800000)  # bits above: NaN (or a sign bit, which a relative error never has)


def span(cfg: Config, source: Source, rank: int, size: int) -> tuple[int, int]:
    """Elements lo..hi-1 of rank ``rank`` of ``size``: a contiguous range of whole chunks (maybe empty);
    of a model's gradient (one chunk, reduced only: :func:`reduce_part`), an even share of the elements."""
    m = source.elements
    if source.kind == "model":
        return m * rank // size, m * (rank + 1) // size
    width = chunk_width(cfg.experiment.workers)
    chunks = -(-m // width)
    c0, c1 = chunks * rank // size, chunks * (rank + 1) // size
    return min(m, c0 * width), min(m, c1 * width)


def rank_arms(cfg: Config, source: Source) -> list[_Arm]:
    """The arms of a rank that computes shares only (rank 0's are the runner's)."""
    return _init_arms(cfg, source, {}, source.kind == "model")


@dataclass
class Share:
    """One rank's share of one step (what it sends to rank 0), per arm ``i`` in config order.

    Attributes:
        sums: (chunks, arms, 9) float64: per chunk, the float sums of that chunk alone:
            the error's (``rel_sum, sq_err, sq_exact``), the comparison's and the re-run's
            (``d_sum, sq_diff, sq_ref``).
        counts: (arms, 11) int64: the error's total, nonfinite, correct, finite and
            relative-error count; the comparison's and the re-run's total and differ; underflow;
            the digest of the rank's results (``run.digest``: digests of ranges add up, mod 2**52).
        maxima: (arms, 5) float64: rel_max, ulp_max, bwd_max, the comparison's and the re-run's d_max.
        hists: (arms, 2, len(ULP_EDGES)) int64: the comparison's and the re-run's ulp histograms.
        top: (arms, 65536) int64: counts of the relative errors' float32 bits >> 16.
        nan: (arms,) bool: a relative error is NaN (the median is NaN).
    """

    sums: NDArray[np.float64]
    counts: NDArray[np.int64]
    maxima: NDArray[np.float64]
    hists: NDArray[np.int64]
    top: NDArray[np.int64]
    nan: NDArray[np.bool_]


def _take_sums(st: _Step, into: list[NDArray[np.float64]]) -> None:
    """After a chunk: append its float sums (as the chunk alone gives them) and zero them for the next chunk."""
    row = np.empty((len(st.err), 9))
    for i in range(len(st.err)):
        for j, (obj, names) in enumerate(((st.err[i], _ERR_SUMS), (st.cmp[i], _CMP_SUMS), (st.rerun[i], _CMP_SUMS))):
            for k, f in enumerate(names):
                row[i, 3 * j + k] = getattr(obj, f)
                setattr(obj, f, 0.0)
    into.append(row)


def _bits(st: _Step, i: int) -> NDArray[np.uint32]:
    """Arm ``i``'s relative errors of the step as float32 bit patterns."""
    rels = st.err[i].rels
    return np.concatenate(rels).view(np.uint32) if rels else np.empty(0, dtype=np.uint32)


def compute_share(
    cfg: Config, source: Source, arms: list[_Arm], step: int, times: dict[str, float], lo: int, hi: int
) -> tuple[_Step, Share]:
    """This rank's share of ``step``: elements lo..hi-1 (:func:`span`) reduced and measured by every arm."""
    chunks: list[NDArray[np.float64]] = []
    st = _compute_step(cfg, source, arms, step, times, (lo, hi), lambda s: _take_sums(s, chunks))
    n = len(arms)
    counts = np.zeros((n, 11), dtype=np.int64)
    maxima = np.empty((n, 5))
    hists = np.zeros((n, 2, len(ULP_EDGES)), dtype=np.int64)
    top = np.zeros((n, _BUCKETS), dtype=np.int64)
    nan = np.zeros(n, dtype=bool)
    for i in range(n):
        err, cmp, rerun = st.err[i], st.cmp[i], st.rerun[i]
        counts[i, :5] = [*(getattr(err, f) for f in _ERR_COUNTS), err.rel_count()]
        counts[i, 5:] = [cmp.total, cmp.differ, rerun.total, rerun.differ, st.underflow[i], digest(st.ys[i], lo)]
        maxima[i] = [*(getattr(err, f) for f in _ERR_MAX), cmp.d_max, rerun.d_max]
        hists[i] = cmp.hist, rerun.hist
        u = _bits(st, i)
        nan[i] = bool(np.any(u > _NAN32))
        if u.size and not nan[i]:
            top[i] = np.bincount(u >> np.uint32(16), minlength=_BUCKETS)
    sums = np.stack(chunks) if chunks else np.empty((0, n, 9))
    return st, Share(sums, counts, maxima, hists, top, nan)


def _total(arrays: list[NDArray[np.int64]]) -> NDArray[np.int64]:
    """The element-wise sum of equally shaped integer arrays (exact; in place, no stacked copy)."""
    out = np.array(arrays[0], dtype=np.int64)
    for a in arrays[1:]:
        out += a
    return out


def median_buckets(shares: list[Share]) -> NDArray[np.int64]:
    """(arms, 4): per arm the top-16-bit buckets of the two middle relative errors and their ranks
    inside them (t1, r1, t2, r2); -1 where the median needs no selection (no value, or a NaN)."""
    top = _total([s.top for s in shares])
    nan = np.logical_or.reduce([s.nan for s in shares])
    out = np.full((len(nan), 4), -1, dtype=np.int64)
    for i, counts in enumerate(np.atleast_2d(top)):
        n = int(counts.sum())
        if nan[i] or n == 0:
            continue
        cum = np.cumsum(counts)
        for j, k in enumerate(((n - 1) // 2, n // 2)):
            t = int(np.searchsorted(cum, k, side="right"))  # the first bucket holding more than k values
            out[i, 2 * j : 2 * j + 2] = t, k - (int(cum[t - 1]) if t else 0)
    return out


def low_counts(st: _Step, buckets: NDArray[np.int64]) -> NDArray[np.int64]:
    """(arms, 2, 65536): counts of the low 16 bits of this rank's relative errors in buckets t1 and t2."""
    out = np.zeros((len(st.err), 2, _BUCKETS), dtype=np.int64)
    for i, (t1, _, t2, _) in enumerate(buckets):
        if t1 < 0:
            continue
        u = _bits(st, i)
        hi = u >> np.uint32(16)
        for j, t in enumerate((t1, t2)):
            out[i, j] = np.bincount(u[hi == t] & np.uint32(0xFFFF), minlength=_BUCKETS)
    return out


def medians(shares: list[Share], buckets: NDArray[np.int64], lows: list[NDArray[np.int64]]) -> list[float]:
    """Every arm's median relative error from the merged counts: ``np.median``'s value (NaN as it gives)."""
    low = _total(lows)
    nan = np.logical_or.reduce([s.nan for s in shares])
    n = _total([s.counts[:, 4] for s in shares])
    out = []
    for i, (t1, r1, t2, r2) in enumerate(buckets):
        if t1 < 0:
            out.append(float("nan") if nan[i] or not n[i] else 0.0)
            continue
        s1 = int(np.searchsorted(np.cumsum(low[i, 0]), int(r1), side="right"))
        s2 = int(np.searchsorted(np.cumsum(low[i, 1]), int(r2), side="right"))
        mid = np.array([(t1 << 16) | s1, (t2 << 16) | s2], dtype=np.uint32).view(np.float32)
        out.append(float(np.mean(mid if n[i] % 2 == 0 else mid[:1])))  # as np.median (and median32)
    return out


class _MergedError(ErrorStats):
    """An arm's ErrorStats of a whole step, merged from the ranks' shares (the median selected, not the values)."""

    def __init__(self, count: int, median: float) -> None:
        super().__init__()
        self._count, self._median = count, median

    def rel_count(self) -> int:
        return self._count

    def median(self) -> float:
        return self._median


def _nanmax(a: float, b: float) -> float:
    """max propagating NaN (as the runner's chunk after chunk)."""
    return float("nan") if a != a or b != b else max(a, b)


class Merged(NamedTuple):
    """Every arm's stats of one whole step, merged."""

    err: list[ErrorStats]
    cmp: list[CompareStats]
    rerun: list[CompareStats]
    underflow: list[int]
    digests: list[int]


def _in_order(shares: list[Share], n: int) -> NDArray[np.float64]:
    """(arms, 9): every float sum of the step, the chunks' sums added one after the other from 0.0, in chunk
    order: the single process's additions (``np.add.accumulate`` is a sequential scan, not a pairwise sum)."""
    col = np.concatenate([np.zeros((1, n, 9)), *(s.sums for s in shares)])
    with np.errstate(over="ignore", invalid="ignore"):
        return np.add.accumulate(col, axis=0)[-1]


def merge(cfg: Config, shares: list[Share], meds: list[float]) -> Merged:
    """Every arm's (error, comparison, re-run) stats and underflow count of the step, from the ranks' shares
    (in rank order: their chunks in element order)."""
    n = len(cfg.arms)
    tot = _total([s.counts for s in shares])
    err: list[ErrorStats] = [_MergedError(int(tot[i, 4]), meds[i]) for i in range(n)]
    cmp, rerun = [CompareStats() for _ in range(n)], [CompareStats() for _ in range(n)]
    for i in range(n):
        for f, v in zip(_ERR_COUNTS, tot[i, :4], strict=True):
            setattr(err[i], f, int(v))
        cmp[i].total, cmp[i].differ = int(tot[i, 5]), int(tot[i, 6])
        rerun[i].total, rerun[i].differ = int(tot[i, 7]), int(tot[i, 8])
        for s in shares:
            for k, f in enumerate(_ERR_MAX):
                setattr(err[i], f, _nanmax(getattr(err[i], f), float(s.maxima[i, k])))
            cmp[i].d_max = max(cmp[i].d_max, float(s.maxima[i, 3]))
            rerun[i].d_max = max(rerun[i].d_max, float(s.maxima[i, 4]))
            cmp[i].hist += s.hists[i, 0]
            rerun[i].hist += s.hists[i, 1]
    sums = _in_order(shares, n)
    for i in range(n):
        for j, (obj, names) in enumerate(((err[i], _ERR_SUMS), (cmp[i], _CMP_SUMS), (rerun[i], _CMP_SUMS))):
            for k, f in enumerate(names):
                setattr(obj, f, float(sums[i, 3 * j + k]))
    mask = (1 << DIGEST_BITS) - 1
    return Merged(err, cmp, rerun, [int(tot[i, 9]) for i in range(n)], [int(tot[i, 10]) & mask for i in range(n)])


def record(
    cfg: Config,
    source: Source,
    arms: list[_Arm],
    step: int,
    merged: Merged,
    rows: list[dict[str, Any]],
) -> None:
    """Append the step's rows (rank 0), from the stats :func:`merge` gave, as the runner would."""
    err, cmp, rerun, underflow, digests = merged
    names = [a.spec.name for a in arms]
    partner = [names.index(a.spec.compare_to or a.spec.name) for a in arms]
    st = _Step(step, [], [], partner, [], err, cmp, rerun, underflow, digests=digests)
    _record(cfg, source, arms, st, rows, None)


def reduce_part(
    cfg: Config, source: Source, arms: list[_Arm], step: int, times: dict[str, float], lo: int, hi: int
) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Training (a model's gradient, one chunk): every arm's result and re-run result on elements lo..hi-1,
    from the gradient of its own parameters (computed whole, on every rank); None for an arm with stochastic
    rounding (its random stream runs over the whole chunk: rank 0 reduces it whole)."""
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for a in arms:
        spec = a.spec
        if spec.rounding == "stochastic":
            out.append(None)
            continue
        if hi == lo:  # more ranks than elements
            y = np.empty(0, dtype=get_format(spec.out_format).value_dtype)
            out.append((y, y))
            continue
        t0 = time.perf_counter()
        X = source.gradients(step, a.params)
        t1 = time.perf_counter()
        Xr = round_to(X[:, lo:hi], spec.input)
        y = _reduce(Xr, plan_for(cfg, spec, step), spec, None, lo, source.elements)
        y2 = (
            y
            if spec.policy.kind == "fixed"
            else _reduce(Xr, plan_for(cfg, spec, step, salt=1), spec, None, lo, source.elements)
        )
        times["source"] += t1 - t0
        times["engine"] += time.perf_counter() - t1
        out.append((y, y2))
    return out


def join_parts(parts: list[list[tuple[np.ndarray, np.ndarray] | None]]) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Every arm's (result, re-run result) over all elements, from the ranks' parts in rank order (a fixed
    order's re-run is its result itself, as the runner has it)."""
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for i, first in enumerate(parts[0]):
        if first is None:
            out.append(None)
            continue
        y = np.concatenate([p[i][0] for p in parts])  # type: ignore[index]
        same = all(p[i][1] is p[i][0] for p in parts)  # type: ignore[index]
        out.append((y, y if same else np.concatenate([p[i][1] for p in parts])))  # type: ignore[index]
    return out


def train_step(
    cfg: Config,
    source: Source,
    arms: list[_Arm],
    step: int,
    rows: list[dict[str, Any]],
    times: dict[str, float],
    given: list[tuple[np.ndarray, np.ndarray] | None],
) -> None:
    """Rank 0's training step: the runner's, with the results ``given`` (:func:`join_parts`) instead of reducing."""
    _record(cfg, source, arms, _compute_step(cfg, source, arms, step, times, given=given), rows, None)
