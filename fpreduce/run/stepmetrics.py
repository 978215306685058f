"""Per-step metrics of one arm, accumulated over the element chunks of a step.

The runner works through a long gradient in chunks of elements (bounded memory);
each chunk's results feed :class:`ErrorStats` (against the exact sum) and
:class:`CompareStats` (against the reference arm), whose ``row()`` gives the
step's values for ``metrics.csv``. Sums are float64, added chunk after chunk in a
fixed order (the chunk width depends only on the worker count), so a run's metrics
are reproducible bit for bit.

With numba installed (:mod:`fpreduce.base.jit`), ``ErrorStats.add``, ``CompareStats.add``
and the median of ``ErrorStats.row`` run one-pass compiled kernels; the numpy code is
the fallback (``with fpreduce.base.jit.disabled():``, or ``FPREDUCE_NO_JIT=1``) and gives the same
values bit for bit: the kernels compute the per-element values with the same IEEE
operations (the ulp quanta from per-exponent tables built by the numpy functions)
and write the qualifying elements' values into arrays that numpy then sums, with
the same calls on arrays of the same length (pairwise ``sum``, ``einsum`` sums of squares).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.jit import enabled as kernels_enabled
from fpreduce.base.jit import jit
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


def _inverse_quantum(a: NDArray[np.float64], fmt: Format) -> NDArray[np.float64]:
    """1 / ulp(|a|) in ``fmt``: a power of two, exactly (from the exponent field; fp64: by division)."""
    q = quantum_bits(a, fmt)
    if fmt.emin - fmt.precision + 1 < -1022:
        with np.errstate(over="ignore"):
            return 1.0 / q.view(np.float64)  # inf for quanta below 2**-1023, i.e. |a| below 2**-971
    return (np.uint64(0x7FE0000000000000) - q).view(np.float64)


@functools.cache
def _tables(fmt: Format) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """ulp(|a|) and 1 / ulp(|a|) in ``fmt`` by the numpy functions, per float64 exponent field of |a|.

    Both depend on the float64 exponent field E alone (fp64: ``np.spacing`` is constant on a
    binade and 2**-1074 on the subnormals and zero), except ``np.spacing`` of the largest
    float64, inf (it overflows): entries 0..2047 hold E's values, entry 2048 the largest's.
    """
    rep = np.append((np.arange(2048, dtype=np.uint64) << np.uint64(52)).view(np.float64), np.finfo(np.float64).max)
    with np.errstate(invalid="ignore", over="ignore"):
        q = quantum_bits(rep, fmt).view(np.float64)
        inv = _inverse_quantum(rep, fmt)
    return np.ascontiguousarray(q), np.ascontiguousarray(inv)


def _bins() -> NDArray[np.int64]:
    """The histogram bin of each ceil(distance) below ULP_EDGES[_SMALL] (as :func:`ulp_histogram`)."""
    return (np.searchsorted(ULP_EDGES, np.arange(ULP_EDGES[_SMALL]), side="right") - 1).astype(np.int64)


_BINS = _bins()
_SHIFT = np.uint64(52)
_BIG = float(np.finfo(np.float64).max)  # abs(x) <= _BIG: x is finite
_BIG_BITS = np.float64(_BIG).view(np.uint64)
_SIGN_OFF = np.uint64(0x7FFFFFFFFFFFFFFF)


def _error_kernel(y, hi, lo, cr, absum, qtab, invtab, rel64, rel32, errs, his):  # type: ignore[no-untyped-def]
    """One pass of :meth:`ErrorStats.add`. Elements with a finite result and a finite exact value
    write their error into ``errs`` and exact value into ``his`` (in order); those whose exact value
    is also nonzero write their relative error into ``rel64``/``rel32``. Returns (count of those
    relative errors, count of finite pairs, nonfinite results, results equal to ``cr``, max rel,
    max ulps, max backward error, whether a rel / ulp / backward error is NaN): with a NaN the
    numpy path's chunk maximum is NaN, and the step's maximum becomes NaN; so does the caller.
    ``err * 2**-k`` is ``err / 2**k`` exactly (one rounding of the same value) where 2**-k is a float64.
    """
    k = 0
    kf = 0
    nonfinite = 0
    same = 0
    rel_max = -np.inf
    ulp_max = -np.inf
    bwd_max = -np.inf
    rel_nan = False
    ulp_nan = False
    bwd_nan = False
    for i in range(y.size):
        yv = np.float64(y[i])
        cv = np.float64(cr[i])
        same += (yv == cv) | ((yv != yv) & (cv != cv))
        h = np.float64(hi[i])
        if abs(yv) <= _BIG and abs(h) <= _BIG:  # finite result, finite exact value
            err = abs((yv - h) - lo[i])
            ab = max(h.view(np.uint64) & _SIGN_OFF, yv.view(np.uint64) & _SIGN_OFF)  # max(|s|, |y|)
            e = 2048 if ab == _BIG_BITS else np.int64(ab >> _SHIFT)  # the _tables index
            iq = invtab[e]
            u = err * iq if iq != np.inf else err / qtab[e]  # fp64 quanta below 2**-1023: 1 / q overflows
            a = absum[i]
            b = err / a if a != 0 else (0.0 if err == 0 else np.inf)
            errs[kf] = err
            his[kf] = h
            kf += 1
            ulp_max = max(u, ulp_max)
            bwd_max = max(b, bwd_max)
            ulp_nan |= u != u
            bwd_nan |= b != b
            if h != 0:
                r = err / abs(h)
                rel64[k] = r
                rel32[k] = np.float32(r)
                k += 1
                rel_max = max(r, rel_max)
                rel_nan |= r != r
        elif not abs(yv) <= _BIG:
            nonfinite += 1
    return k, kf, nonfinite, same, rel_max, ulp_max, bwd_max, rel_nan, ulp_nan, bwd_nan


def _compare_kernel(a, b, qtab, invtab, bins, big, delta, d, hist):  # type: ignore[no-untyped-def]
    """One pass of :meth:`CompareStats.add`: the differing elements' ``a - b`` and distances into
    ``delta``/``d`` (in order), their bins added to ``hist``; returns (their count, max distance)."""
    k = 0
    d_max = 0.0
    small = bins.size
    for i in range(a.size):
        x = np.float64(a[i])
        z = np.float64(b[i])
        bx = x.view(np.uint64)
        bz = z.view(np.uint64)
        if bx == bz or (x != x and z != z):
            continue
        dl = x - z
        ab = max(bx & _SIGN_OFF, bz & _SIGN_OFF)  # max(|x|, |z|) (NaN: any, v is NaN)
        e = 2048 if ab == _BIG_BITS else np.int64(ab >> _SHIFT)
        iq = invtab[e]
        v = abs(dl) * iq if iq != np.inf else abs(dl) / qtab[e]  # |a - b| / ulp in fmt (fp64 tiny: divide)
        if not v <= _BIG:  # NaN or Inf on one side
            v = 0.0 if dl == 0 else big
        delta[k] = dl
        d[k] = v
        k += 1
        d_max = max(d_max, v)
        c = np.ceil(v)
        if c < small:
            hist[bins[np.int64(c)]] += 1
        elif c < 65537.0:
            hist[13] += 1
        elif c < big:
            hist[14] += 1
        else:
            hist[15] += 1
    return k, d_max


_error_compiled = jit(_error_kernel, "the runner's metrics")
_compare_compiled = jit(_compare_kernel, "the runner's metrics")
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


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
        self._scratch = np.empty((3, 0), dtype=np.float64)  # the kernel's arrays, reused chunk after chunk

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
            and _error_compiled is not None
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
        self._fold(rel, err, h, ulps, bwd)

    def _fold(
        self,
        rel: NDArray[np.float64],
        err: NDArray[np.float64],
        h: NDArray[np.float64],
        ulps: NDArray[np.float64] | float,
        bwd: NDArray[np.float64] | float,
    ) -> None:
        """Add one chunk's per-element values (numpy path: arrays; kernel path: the maxima) to the step."""
        with np.errstate(over="ignore", invalid="ignore"):  # errors near 1e308 (|s| tiny, y not): inf sums
            if rel.size:
                self.rel_sum += float(rel.sum())
                self.rels.append(rel.astype(np.float32))
                self.rel_max = _max(self.rel_max, float(rel.max()))
            if err.size:
                self.finite += err.size
                self.sq_err += _sumsq(err)
                self.sq_exact += _sumsq(h)
                self.ulp_max = _max(self.ulp_max, float(np.max(ulps)))
                self.bwd_max = _max(self.bwd_max, float(np.max(bwd)))

    def _add_compiled(
        self,
        y: np.ndarray,
        hi: NDArray[np.float64],
        lo: NDArray[np.float64],
        cr: np.ndarray,
        absum: NDArray[np.float64],
        fmt: Format,
    ) -> None:
        """:meth:`add` by the kernel; the sums by numpy over the same arrays as the numpy path's."""
        assert _error_compiled is not None
        n = y.size
        if self._scratch.shape[1] < n:
            self._scratch = np.empty((3, n), dtype=np.float64)
        rel, errs, his = self._scratch  # reused: a fresh array's first touch costs as much as the kernel
        rel32 = np.empty(n, dtype=np.float32)
        k, kf, nonfinite, same, rel_max, ulp_max, bwd_max, rel_nan, ulp_nan, bwd_nan = _error_compiled(
            np.ascontiguousarray(y),
            np.ascontiguousarray(hi),
            np.ascontiguousarray(lo),
            np.ascontiguousarray(cr),
            np.ascontiguousarray(absum),
            *_tables(fmt),
            rel,
            rel32,
            errs,
            his,
        )
        self.total += n
        self.nonfinite += nonfinite
        self.correct += same
        r = rel[:k]
        self._fold(
            np.empty(0),
            errs[:kf],
            his[:kf],
            math.nan if ulp_nan else ulp_max,
            math.nan if bwd_nan else bwd_max,
        )
        if k:
            with np.errstate(over="ignore"):
                self.rel_sum += float(r.sum())
            self.rel_max = _max(self.rel_max, math.nan if rel_nan else rel_max)
            self.rels.append(rel32 if k == n else rel32[:k].copy())

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
            and _compare_compiled is not None
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
        """:meth:`add` by the kernel; the sums by numpy over the same arrays as the numpy path's."""
        assert _compare_compiled is not None
        n = y.size
        if self._scratch.shape[1] < n:
            self._scratch = np.empty((2, n), dtype=np.float64)
        delta, d = self._scratch
        b = np.ascontiguousarray(yref)
        k, d_max = _compare_compiled(
            np.ascontiguousarray(y), b, *_tables(fmt), _BINS, float(ULP_EDGES[-1]), delta, d, self.hist
        )
        self.total += n
        self.differ += k
        self.hist[0] += n - k
        with np.errstate(invalid="ignore", over="ignore"):
            if k:
                self.d_sum += float(d[:k].sum())
                self.d_max = max(self.d_max, d_max)
                self.sq_diff += _sumsq(delta[:k])
            b = b.astype(np.float64, copy=False)
            self.sq_ref += _sumsq(b)

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
