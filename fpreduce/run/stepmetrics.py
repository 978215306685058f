"""Per-step metrics of one arm, accumulated over the element chunks of a step.

The runner works through a long gradient in chunks of elements (bounded memory);
each chunk's results feed :class:`ErrorStats` (against the exact sum) and
:class:`CompareStats` (against the reference arm), whose ``row()`` gives the
step's values for ``metrics.csv``. Sums are float64, added chunk after chunk in a
fixed order (the chunk width depends only on the worker count), so a run's metrics
are reproducible bit for bit.

With numba installed (:mod:`fpreduce.base.jit`), ``ErrorStats.add``, ``CompareStats.add``
and the median of ``ErrorStats.row`` run compiled kernels; the numpy code is the fallback
(``with fpreduce.base.jit.disabled():``, or ``FPREDUCE_NO_JIT=1``) and gives the same values
bit for bit: the kernels compute the per-element values with the same IEEE operations (the
ulp quanta by :func:`quantum_bits`'s integer arithmetic) into arrays that numpy then sums,
with the same calls on arrays of the same length (pairwise ``sum``, ``einsum`` sums of
squares), and the maxima, which do not depend on the order, in the pass itself. A kernel's pass
is branch-free over every element, so it vectorizes; only a chunk with elements left out (a NaN
result, a zero exact value, equal bits) then moves the kept ones to the front. On 2**16 bf16
results (one core, AVX-512), ``ErrorStats.add`` takes 0.24-0.26 ms (0.49 with a scalar loop that
kept elements as it went, before the maxima moved into the pass) and ``CompareStats.add`` 0.31 ms
(0.44).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.jit import enabled as kernels_enabled
from fpreduce.base.jit import jit, jitable
from fpreduce.core.formats import Format
from fpreduce.core.rounding import quantum_bits
from fpreduce.run._median import median32

#: ulp-distance histogram bin edges (a bin holds distances in [edge_i, edge_i+1))
ULP_EDGES = [0, 1, 2, 3, 5, 9, 17, 33, 65, 129, 257, 513, 1025, 4097, 65537, 1 << 20]


_SMALL = ULP_EDGES.index(4097)  # distances below this edge are counted one by one


def _sumsq(x: NDArray[np.float64]) -> float:
    """Sum of squares by numpy's own loop (``einsum``), not BLAS: BLAS ``dot`` goes multi-threaded on long
    vectors, which on a busy machine cost 7 ms per 65,536 elements instead of 0.03 ms. The same call on the
    same array gives the same bits, so the kernel and numpy paths still agree."""
    return float(np.einsum("i,i->", x, x))


def _max(a: float, b: float) -> float:
    """max that propagates NaN (as ``np.max`` over the whole step would, whatever the chunking)."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def ulp_histogram(d: NDArray[np.float64]) -> NDArray[np.int64]:
    """Counts per bin: bin i holds the distances with ULP_EDGES[i] <= ceil(d) < ULP_EDGES[i + 1] (last bin open)."""
    c = np.ceil(d)
    hist = np.zeros(len(ULP_EDGES), dtype=np.int64)
    if not c.size:
        return hist
    small = c < ULP_EDGES[_SMALL]
    if small.all():
        cs = c.astype(np.intp)
    else:
        cs = c[small].astype(np.intp)
        hist += np.bincount(np.searchsorted(ULP_EDGES, c[~small], side="right") - 1, minlength=len(ULP_EDGES))
    counts = np.bincount(cs, minlength=ULP_EDGES[_SMALL])
    hist[:_SMALL] += np.add.reduceat(counts, ULP_EDGES[:_SMALL])
    return hist


_FIELD = np.uint64(0x7FF0000000000000)
_SHIFT = np.uint64(52)
_BIG = float(np.finfo(np.float64).max)  # abs(x) <= _BIG: x is finite
_SIGN_OFF = np.uint64(0x7FFFFFFFFFFFFFFF)
_EDGES = np.array(ULP_EDGES[1:], dtype=np.float64) - 1.0  # ceil(d) >= ULP_EDGES[j + 1] exactly when d > _EDGES[j]
_BLOCK = 2048  # distances counted per block (16 KB: in L1 for the fifteen counting passes)


def _grid(fmt: Format) -> tuple[np.uint64, np.uint64, np.uint64]:
    """The arguments of :func:`_quantum` for ``fmt``: its least exponent field, its precision's shift, and
    all ones for fp64 (whose quanta are float64's own spacing), else 0."""
    wide = fmt.emin - fmt.precision + 1 < -1022
    return np.uint64((fmt.emin + 1023) << 52), np.uint64((fmt.precision - 1) << 52), np.uint64(2**64 - 1 if wide else 0)


_E53 = np.uint64(53 << 52)
_E52 = np.uint64(52 << 52)


@jitable
def _quantum(ab, emin_field, pshift, wide):  # type: ignore[no-untyped-def]
    """The float64 :func:`quantum_bits` of a value whose ``|bits|`` are ``ab`` (any NaN or Inf gives
    a finite quantum, so its distance is NaN or Inf), without a branch, so that the loops vectorize: the
    exponent field E raised to the format's least one, less the precision; for fp64 (``wide`` all ones)
    ``np.spacing`` of ``min(|a|, 2**1023)``: ``(E - 52) << 52`` from E = 53 up, below it the subnormal
    ``1 << (E - 1)`` (1 for E = 0), which is the smaller of the two there."""
    field = ab & _FIELD
    normal = np.uint64(max(field, emin_field) - pshift)
    e = np.int64(field >> _SHIFT)
    spacing = min(np.uint64(max(field, _E53) - _E52), np.uint64(1) << np.uint64(min(max(e - 1, 0), 63)))
    return np.uint64((spacing & wide) | (normal & ~wide)).view(np.float64)


def _error_pass(y, hi, lo, cr, absum, emin_field, pshift, wide, err, rel, top):  # type: ignore[no-untyped-def]
    """One vectorized pass of :meth:`ErrorStats.add` over every element, as if each had a finite result,
    a finite exact value and a nonzero one: ``err`` and ``rel`` in full (the numpy path's operations, element
    by element); into ``top`` (uint64) the bits of the largest ulp, backward and relative errors of the
    elements the numpy path keeps (a NaN's if one is NaN, as ``np.max``; +0.0's if none), whose arrays only
    their maxima need, so they are not written. Returns (results equal to ``cr``, nonfinite results, finite
    pairs, finite pairs with a nonzero exact value): when the last two are the length, the arrays are the
    numpy path's; else :func:`_error_keep` keeps those elements."""
    same = 0
    nonfinite = 0
    pairs = 0
    nonzero = 0
    u_top = b_top = r_top = np.uint64(0)  # the maxima's bits: the errors are +0.0 or more, or NaN (either sign)
    for i in range(y.size):
        yv = np.float64(y[i])
        cv = np.float64(cr[i])
        h = np.float64(hi[i])
        same += (yv == cv) | ((yv != yv) & (cv != cv))
        fin = abs(yv) <= _BIG
        pair = fin & (abs(h) <= _BIG)
        nz = pair & (h != 0)
        nonfinite += not fin
        pairs += pair
        nonzero += nz
        e = abs((yv - h) - lo[i])
        q = _quantum(max(h.view(np.uint64) & _SIGN_OFF, yv.view(np.uint64) & _SIGN_OFF), emin_field, pshift, wide)
        a = absum[i]
        u = e / q  # numpy's division by the same power of two
        b = e / a if a != 0 else (0.0 if e == 0 else np.inf)
        r = e / abs(h)
        err[i] = e
        rel[i] = r
        # a float's maximum by its bits' (integer maxima vectorize; a float one would not, for NaN's sake): for
        # +0.0 and up the bits order as the values, every NaN's bits lie above +Inf's, and the bits of the
        # largest are those of a NaN (np.max's answer) when there is one
        keep, keep_nz = np.uint64(0) - np.uint64(pair), np.uint64(0) - np.uint64(nz)  # all ones, or 0
        u_top = max(u_top, np.float64(u).view(np.uint64) & keep)
        b_top = max(b_top, np.float64(b).view(np.uint64) & keep)
        r_top = max(r_top, np.float64(r).view(np.uint64) & keep_nz)
    top[0], top[1], top[2] = u_top, b_top, r_top
    return same, nonfinite, pairs, nonzero


def _error_keep(y, hi, err, rel, his):  # type: ignore[no-untyped-def]
    """Move the finite pairs' ``err`` (and exact values, into ``his``) to the front, in order, and those
    pairs' with a nonzero exact value ``rel``; returns their two counts. Every element is written to the
    next free place and kept by advancing past it: no branch to mispredict."""
    kf = 0
    k = 0
    for i in range(y.size):
        h = np.float64(hi[i])
        pair = (abs(np.float64(y[i])) <= _BIG) & (abs(h) <= _BIG)
        err[kf] = err[i]
        his[kf] = h
        rel[k] = rel[i]
        kf += pair
        k += pair & (h != 0)
    return kf, k


def _compare_pass(a, b, emin_field, pshift, wide, big, delta, d):  # type: ignore[no-untyped-def]
    """One vectorized pass of :meth:`CompareStats.add`: every element's ``a - b`` into ``delta`` and, for
    those whose bits differ (NaN against NaN does not), its distance into ``d`` (NaN or Inf on one side:
    ``big``), -1 for the others; returns how many differ (all: the arrays are the numpy path's; else
    :func:`_compare_keep` keeps those)."""
    k = 0
    for i in range(a.size):
        x = np.float64(a[i])
        z = np.float64(b[i])
        bx = x.view(np.uint64)
        bz = z.view(np.uint64)
        differ = (bx != bz) & ~((x != x) & (z != z))
        dl = x - z
        v = abs(dl) / _quantum(max(bx & _SIGN_OFF, bz & _SIGN_OFF), emin_field, pshift, wide)
        v = v if v <= _BIG else (0.0 if dl == 0 else big)
        delta[i] = dl
        d[i] = v if differ else -1.0
        k += differ
    return k


def _compare_keep(delta, d):  # type: ignore[no-untyped-def]
    """Move the differing elements' ``delta`` and ``d`` (those with ``d >= 0``) to the front, in order; returns
    their count (branch-free, as :func:`_error_keep`)."""
    k = 0
    for i in range(d.size):
        v = d[i]
        delta[k] = delta[i]
        d[k] = v
        k += v >= 0
    return k


def _count_bins(d, edges, top, ge):  # type: ignore[no-untyped-def]
    """``ge[j] +=`` how many distances exceed ``edges[j]``, i.e. have ``ceil(d) >= ULP_EDGES[j + 1]``: a pass
    per edge over L1-sized blocks, compares and adds that vectorize (a histogram's increments would wait
    on each other), for the edges below the largest distance ``top`` only (none exceeds the others)."""
    m = 0
    while m < edges.size and edges[m] < top:
        m += 1
    for lo in range(0, d.size, _BLOCK):
        blk = d[lo : min(lo + _BLOCK, d.size)]
        for j in range(m):
            t = edges[j]
            c = 0
            for i in range(blk.size):
                c += blk[i] > t
            ge[j] += c


_error_pass_compiled = jit(_error_pass, "the runner's metrics", error_model="numpy")  # IEEE x / 0: no check
_error_keep_compiled = jit(_error_keep, "the runner's metrics")
_compare_pass_compiled = jit(_compare_pass, "the runner's metrics", error_model="numpy")
_compare_keep_compiled = jit(_compare_keep, "the runner's metrics")
_count_compiled = jit(_count_bins, "the runner's metrics")
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _histogram(d: NDArray[np.float64], top: float) -> NDArray[np.int64]:
    """:func:`ulp_histogram` of the distances ``d``, whose largest is ``top`` (compiled: from the counts
    above each edge)."""
    ge = np.zeros(len(_EDGES), dtype=np.int64)
    assert _count_compiled is not None
    _count_compiled(d, _EDGES, top, ge)
    hist = np.empty(len(ULP_EDGES), dtype=np.int64)
    hist[0] = d.size - ge[0]
    hist[1:-1] = ge[:-1] - ge[1:]
    hist[-1] = ge[-1]
    return hist


class ErrorStats:
    """Error of an arm's results against the exact sums (or exact means) of their inputs.

    Per element with a finite result ``y`` and a finite exact value ``s = hi + lo``: the
    error ``|y - s|`` (exact, rounded once to float64), in ulps of the output format at
    ``max(|s|, |y|)`` (:func:`fpreduce.core.metrics.ulp_error`: 0 when both are zero, at
    most ``2**(p + 1)``), and relative to ``sum_i |x_i|`` (the backward error; 0/0 is 0, a
    nonzero error over 0 is inf); where also ``s != 0``, the relative error
    ``|y - s| / |s|``. Per step: the normwise error ``||y - s||_2 / ||s||_2`` over those
    elements, the largest backward error and ulp error, the max, mean and median
    relative error, and ``frac_correct``, the fraction of all elements equal to ``s``
    correctly rounded. The median is taken over the relative errors rounded to float32
    (kept for the whole step: 4 bytes per element); the other statistics are float64.
    Results that are NaN or Inf are counted (``nonfinite``) and left out.
    """

    def __init__(self) -> None:
        self.total = 0
        self.nonfinite = 0
        self.correct = 0
        self.rel_sum = 0.0
        self.rel_max = -np.inf
        self.ulp_max = -np.inf
        self.bwd_max = -np.inf
        self.sq_err = 0.0
        self.sq_exact = 0.0
        self.finite = 0
        self.rels: list[NDArray[np.float32]] = []  # for the median: float32 halves the memory
        self._scratch = np.empty((3, 0), dtype=np.float64)  # the kernels' arrays, reused chunk after chunk

    def add(
        self,
        y: np.ndarray,
        hi: NDArray[np.float64],
        lo: NDArray[np.float64],
        cr: np.ndarray,
        fmt: Format,
        absum: NDArray[np.float64] | None = None,
    ) -> None:
        """One chunk: results ``y``, exact values ``hi + lo``, ``cr`` = exact rounded once to ``fmt``,
        ``absum`` = ``sum_i |x_i|`` per element (float64; None: no backward error, NaN)."""
        a = np.full(y.shape, np.nan) if absum is None else np.asarray(absum, dtype=np.float64)
        if (
            kernels_enabled()
            and _error_pass_compiled is not None
            and y.dtype in _FLOATS
            and cr.dtype in _FLOATS
            and hi.dtype == np.float64
            and lo.dtype == np.float64
            and y.ndim == 1
            and y.shape == hi.shape == lo.shape == cr.shape == a.shape
        ):
            self._add_compiled(y, hi, lo, cr, a, fmt)
            return
        y64 = y.astype(np.float64)
        fin = np.isfinite(y64)
        ok = fin & np.isfinite(hi)
        every = bool(ok.all())
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            h, yy, lw, aa = (hi, y64, lo, a) if every else (hi[ok], y64[ok], lo[ok], a[ok])
            err = yy - h
            err -= lw
            np.abs(err, out=err)
            ah = np.abs(h)
            ulps = err / quantum_bits(np.maximum(ah, np.abs(yy)), fmt).view(np.float64)
            bwd = np.where(aa != 0, err / aa, np.where(err == 0, 0.0, np.inf))
            nz = ah != 0
            rel = err[nz] / ah[nz]
        c = cr.astype(np.float64)
        same = int(np.count_nonzero(y64 == c))
        if not every:
            same += int(np.count_nonzero(np.isnan(y64) & np.isnan(c)))
        self.total += y.size
        self.nonfinite += y.size - int(np.count_nonzero(fin))
        self.correct += same
        self._fold(rel, err, h, (ulps, bwd, rel))

    def _fold(
        self,
        rel: NDArray[np.float64],
        err: NDArray[np.float64],
        h: NDArray[np.float64],
        tops: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]] | NDArray[np.float64],
    ) -> None:
        """Add one chunk's per-element values to the step; ``tops``: the numpy path's (ulps, bwd, rel) arrays,
        or the kernel path's maxima of them (:func:`_error_pass`'s ``top``)."""
        with np.errstate(over="ignore", invalid="ignore"):  # errors near 1e308 (|s| tiny, y not): inf sums
            if rel.size:
                self.rel_sum += float(rel.sum())
                self.rels.append(rel.astype(np.float32))
                self.rel_max = _max(self.rel_max, float(np.max(tops[2])))
            if err.size:
                self.finite += err.size
                self.sq_err += _sumsq(err)
                self.sq_exact += _sumsq(h)
                self.ulp_max = _max(self.ulp_max, float(np.max(tops[0])))
                self.bwd_max = _max(self.bwd_max, float(np.max(tops[1])))

    def _add_compiled(
        self,
        y: np.ndarray,
        hi: NDArray[np.float64],
        lo: NDArray[np.float64],
        cr: np.ndarray,
        absum: NDArray[np.float64],
        fmt: Format,
    ) -> None:
        """:meth:`add` by the kernels, then :meth:`_fold` over the arrays the numpy path builds (the same values
        in the same order: kept whole when every element qualifies, else moved to the front) and the maxima
        of those it only takes the maximum of (the ulp and backward errors are not written out: on 2**16 bf16
        results, one core, the kernel's pass took 0.152 ms writing them and 0.114 ms without, and the whole
        ``add`` 0.29-0.32 ms against 0.24-0.26 ms)."""
        assert _error_pass_compiled is not None
        assert _error_keep_compiled is not None
        n = y.size
        if self._scratch.shape[1] < n:
            self._scratch = np.empty((3, n), dtype=np.float64)
        err, rel, his = (r[:n] for r in self._scratch)  # reused: a fresh array's first touch is costly
        top = np.empty(3, dtype=np.uint64)
        y, hi = np.ascontiguousarray(y), np.ascontiguousarray(hi)
        same, nonfinite, pairs, nonzero = _error_pass_compiled(
            y, hi, np.ascontiguousarray(lo), np.ascontiguousarray(cr), np.ascontiguousarray(absum), *_grid(fmt),
            err, rel, top,
        )  # fmt: skip
        self.total += n
        self.nonfinite += nonfinite
        self.correct += same
        h = hi
        if pairs < n or nonzero < n:
            kf, k = _error_keep_compiled(y, hi, err, rel, his)
            err, rel, h = err[:kf], rel[:k], his[:kf]
        self._fold(rel, err, h, top.view(np.float64))

    def rel_count(self) -> int:
        """How many relative errors the step has (elements with a finite result and a nonzero exact value)."""
        return sum(r.size for r in self.rels)

    def median(self) -> float:
        """The median of the step's relative errors (rounded to float32): ``np.median``'s value."""
        return median32(self.rels)

    def row(self) -> dict[str, float]:
        """The step's error columns of metrics.csv (NaN where no element qualifies)."""
        k = self.rel_count()
        nan = float("nan")
        f = self.finite
        with np.errstate(invalid="ignore", divide="ignore"):
            norm = math.sqrt(self.sq_err) / math.sqrt(self.sq_exact) if self.sq_exact > 0 else nan
        if f and self.sq_exact == 0:
            norm = 0.0 if self.sq_err == 0 else math.inf
        return {
            "nonfinite": self.nonfinite,
            "err_norm": norm if f else nan,
            "err_backward": self.bwd_max if f else nan,
            "err_max_rel": self.rel_max if k else nan,
            "err_mean_rel": self.rel_sum / k if k else nan,
            "err_median_rel": self.median() if k else nan,
            "err_max_ulp": self.ulp_max if f else nan,
            "frac_correct": self.correct / self.total if self.total else nan,
        }


class CompareStats:
    """Bits and ulp distance of an arm's results against the reference arm's.

    The distance is ``|y - y_ref| / ulp(max(|y|, |y_ref|))`` in ``fmt`` (the wider of
    the two arms' output formats): the step count between two values of one binade,
    and a fair size for differences across binades or zero (the ordered-bit count
    between +tiny and -tiny would be the number of floats between them). NaN or Inf
    on one side only counts as the largest distance. Both results hold values of
    ``fmt``, so their bits agree in ``fmt`` exactly when their float64 bits agree
    (-0.0 differs from +0.0; every NaN equals every NaN).
    """

    def __init__(self) -> None:
        self.total = 0
        self.differ = 0
        self.d_sum = 0.0
        self.d_max = 0.0
        self.sq_diff = 0.0
        self.sq_ref = 0.0
        self.hist = np.zeros(len(ULP_EDGES), dtype=np.int64)
        self._scratch = np.empty((2, 0), dtype=np.float64)  # the kernel's deltas and distances, reused

    def add(self, y: np.ndarray, yref: np.ndarray, fmt: Format) -> None:
        """One chunk of results and the reference arm's results for the same elements."""
        if y is yref:  # the reference arm against itself: every element agrees
            self.total += y.size
            self.hist[0] += y.size
            b = y.astype(np.float64, copy=False)
            with np.errstate(invalid="ignore", over="ignore"):
                self.sq_ref += _sumsq(b)
            return
        if (
            kernels_enabled()
            and _compare_pass_compiled is not None
            and y.dtype in _FLOATS
            and yref.dtype in _FLOATS
            and y.ndim == 1
            and y.shape == yref.shape
        ):
            self._add_compiled(y, yref, fmt)
            return
        a, b = y.astype(np.float64), yref.astype(np.float64)
        diff = np.flatnonzero(a.view(np.uint64) != b.view(np.uint64))
        if diff.size:
            da, db = a[diff], b[diff]
            both_nan = np.isnan(da) & np.isnan(db)
            if both_nan.any():  # NaN payloads do not count
                keep = ~both_nan
                diff, da, db = diff[keep], da[keep], db[keep]
        self.total += a.size
        self.differ += diff.size
        self.hist[0] += a.size - diff.size
        with np.errstate(invalid="ignore", over="ignore"):
            if diff.size:
                delta = da - db
                big = np.maximum(np.abs(da), np.abs(db))  # +0.0 vs -0.0: delta 0, distance 0
                d = np.abs(delta)
                d /= quantum_bits(big, fmt).view(np.float64)  # a power of two: exact, never overflows
                total = float(d.sum())
                if not np.isfinite(total):  # NaN or Inf on one side: the largest distance
                    bad = np.flatnonzero(~np.isfinite(d))
                    d[bad] = np.where(delta[bad] == 0, 0.0, float(ULP_EDGES[-1]))
                    total = float(d.sum())
                self.d_sum += total
                self.d_max = max(self.d_max, float(d.max()))
                self.hist += ulp_histogram(d)
                self.sq_diff += _sumsq(delta)
            self.sq_ref += _sumsq(b)

    def _add_compiled(self, y: np.ndarray, yref: np.ndarray, fmt: Format) -> None:
        """:meth:`add` by the kernels; the sums by numpy over the same arrays as the numpy path's."""
        assert _compare_pass_compiled is not None
        assert _compare_keep_compiled is not None
        n = y.size
        if self._scratch.shape[1] < n:
            self._scratch = np.empty((2, n), dtype=np.float64)
        delta, d = (r[:n] for r in self._scratch)
        a, b = np.ascontiguousarray(y), np.ascontiguousarray(yref)
        k = _compare_pass_compiled(a, b, *_grid(fmt), float(ULP_EDGES[-1]), delta, d)
        if k < n:
            _compare_keep_compiled(delta, d)
            delta, d = delta[:k], d[:k]
        self.total += n
        self.differ += k
        self.hist[0] += n - k
        with np.errstate(invalid="ignore", over="ignore"):
            if k:
                top = float(d.max())
                self.d_sum += float(d.sum())
                self.d_max = max(self.d_max, top)
                self.hist += _histogram(d, top)
                self.sq_diff += _sumsq(delta)
            self.sq_ref += _sumsq(b.astype(np.float64, copy=False))

    def row(self) -> dict[str, float]:
        """The step's comparison columns of metrics.csv."""
        with np.errstate(invalid="ignore"):
            rel_l2 = float(np.sqrt(self.sq_diff) / np.sqrt(self.sq_ref)) if self.sq_ref > 0 else float("nan")
        return {
            "diff_frac": self.differ / self.total if self.total else float("nan"),
            "ulp_max": self.d_max,
            "ulp_mean": self.d_sum / self.total if self.total else float("nan"),
            "rel_l2": rel_l2,
        }
