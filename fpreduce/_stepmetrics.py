"""Per-step metrics of one arm, accumulated over the element chunks of a step.

The runner works through a long gradient in chunks of elements (bounded memory);
each chunk's results feed :class:`ErrorStats` (against the exact sum) and
:class:`CompareStats` (against the reference arm), whose ``row()`` gives the
step's values for ``metrics.csv``. Sums are float64, added chunk after chunk in a
fixed order (the chunk width depends only on the worker count), so a run's metrics
are reproducible bit for bit.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from fpreduce.formats import Format
from fpreduce.rounding import _quantum_bits

#: ulp-distance histogram bin edges (a bin holds distances in [edge_i, edge_i+1))
ULP_EDGES = [0, 1, 2, 3, 5, 9, 17, 33, 65, 129, 257, 513, 1025, 4097, 65537, 1 << 20]


_SMALL = ULP_EDGES.index(4097)  # distances below this edge are counted one by one


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
    q = _quantum_bits(a, fmt)
    if fmt.emin - fmt.precision + 1 < -1022:
        with np.errstate(over="ignore"):
            return 1.0 / q.view(np.float64)  # inf below 2**-1023: only for distances between subnormals
    return (np.uint64(0x7FE0000000000000) - q).view(np.float64)


class ErrorStats:
    """Error of an arm's results against the exact sums (or exact means) of their inputs.

    Per element with a finite result and a finite nonzero exact value ``s = hi + lo``:
    relative error ``|y - s| / |s|`` and error in ulps of ``|s|`` in the output format;
    ``frac_correct`` is the fraction of all elements equal to ``s`` correctly rounded.
    The median is taken over the relative errors rounded to float32 (kept for the
    whole step: 4 bytes per element); maximum and mean are exact float64 statistics.
    """

    def __init__(self) -> None:
        self.total = 0
        self.nonfinite = 0
        self.correct = 0
        self.rel_sum = 0.0
        self.rel_max = -np.inf
        self.ulp_max = -np.inf
        self.rels: list[NDArray[np.float32]] = []  # for the median: float32 halves the memory

    def add(self, y: np.ndarray, hi: NDArray[np.float64], lo: NDArray[np.float64], cr: np.ndarray,
            fmt: Format) -> None:
        """One chunk: results ``y``, exact values ``hi + lo``, ``cr`` = exact rounded once to ``fmt``."""
        y64 = y.astype(np.float64)
        fin = np.isfinite(y64)
        ok = fin & np.isfinite(hi) & (hi != 0)
        every = bool(ok.all())
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            h, yy, lw = (hi, y64, lo) if every else (hi[ok], y64[ok], lo[ok])
            err = yy - h
            err -= lw
            np.abs(err, out=err)
            ah = np.abs(h)
            rel = err / ah
            ulps = err / _quantum_bits(ah, fmt).view(np.float64)
        c = cr.astype(np.float64)
        same = int(np.count_nonzero(y64 == c))
        if not every:
            same += int(np.count_nonzero(np.isnan(y64) & np.isnan(c)))
        self.total += y.size
        self.nonfinite += y.size - int(np.count_nonzero(fin))
        self.correct += same
        if rel.size:
            self.rel_sum += float(rel.sum())
            self.rel_max = max(self.rel_max, float(rel.max()))
            self.ulp_max = max(self.ulp_max, float(ulps.max()))
            self.rels.append(rel.astype(np.float32))

    def row(self) -> dict[str, float]:
        """The step's error columns of metrics.csv (NaN where no element qualifies)."""
        k = sum(r.size for r in self.rels)
        nan = float("nan")
        return {
            "nonfinite": self.nonfinite,
            "err_max_rel": self.rel_max if k else nan,
            "err_mean_rel": self.rel_sum / k if k else nan,
            "err_median_rel": float(np.median(np.concatenate(self.rels))) if k else nan,
            "err_max_ulp": self.ulp_max if k else nan,
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

    def add(self, y: np.ndarray, yref: np.ndarray, fmt: Format) -> None:
        """One chunk of results and the reference arm's results for the same elements."""
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
                d *= _inverse_quantum(big, fmt)
                total = float(d.sum())
                if not np.isfinite(total):  # NaN or Inf on one side: the largest distance
                    bad = np.flatnonzero(~np.isfinite(d))
                    d[bad] = np.where(delta[bad] == 0, 0.0, float(ULP_EDGES[-1]))  # fp64 +-0: 0 * inf
                    total = float(d.sum())
                self.d_sum += total
                self.d_max = max(self.d_max, float(d.max()))
                self.hist += ulp_histogram(d)
                self.sq_diff += float(np.dot(delta, delta))
            self.sq_ref += float(np.dot(b, b))

    def row(self) -> dict[str, float]:
        """The step's comparison columns of metrics.csv."""
        with np.errstate(invalid="ignore"):
            rel_l2 = float(np.sqrt(self.sq_diff) / np.sqrt(self.sq_ref)) if self.sq_ref > 0 else float("nan")
        return {"diff_frac": self.differ / self.total if self.total else float("nan"),
                "ulp_max": self.d_max, "ulp_mean": self.d_sum / self.total if self.total else float("nan"),
                "rel_l2": rel_l2}
