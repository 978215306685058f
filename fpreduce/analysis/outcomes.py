"""How many different answers can one sum give: results of one set of values over many orders.

``order_outcomes(x, family, samples=...)`` sums the same N values ``samples`` times,
each time in a randomly drawn order (and, for ``random_tree``, a random tree shape),
bit-exactly through :func:`fpreduce.reduce`, and summarizes the results against the
exact sum: the distinct results and how often each occurs, their errors in ulps of
the accumulator format, and a histogram of how many representable steps each result
lies from the correctly rounded sum.

Vectorization: re-ranking a plan (``plan.relabel(perm)``) applied to the values is
the original plan applied to the permuted values ``x[perm]``, so the samples become
the columns of an (N, samples) matrix whose column ``s`` is ``x[perm_s]``, reduced by
one call of the fixed-shape plan. ``random_tree`` draws each tree by merging
adjacent nodes of a permuted leaf list in a random order; it runs as N-1 steps,
each one rounded addition vectorized over all samples (a few more gathers per
step than a fixed-shape plan).

``x`` is treated as a one-element gradient (element 0 of the buffer), so a
segmented plan (``ring:*``, ``rabenseifner``, ``tree:nccl:G``) contributes the tree
of its first segment and ``atomic`` the order of element 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce.base.dtypes import as_float_array
from fpreduce.base.errors import InvalidArgument
from fpreduce.base.texttable import table
from fpreduce.core.engine import reduce
from fpreduce.core.exact import ExactSum, exact_sum
from fpreduce.core.formats import Format, get_format, input_format, to_bits, ulp
from fpreduce.core.metrics import ulp_steps
from fpreduce.core.rounding import Mode, get_mode, round_to
from fpreduce.plans import RANDOM_TREE, Plan, parse, sequential, tree_from_gaps

__all__ = ["RANDOM_TREE", "OrderOutcomes", "order_outcomes", "tree_from_gaps"]

_BLOCK_CELLS = 1 << 22  # (workers x samples) cells reduced per call: bounded memory


@dataclass(frozen=True, eq=False)
class OrderOutcomes:
    """Results of one sum under ``samples`` random orders, and their errors.

    Attributes:
        family: the plan family (``sequential``, a plan text, or ``random_tree``).
        n: number of values (workers).
        input, accumulate, rounding: the formats and mode of every sum.
        algorithm: the engine's algorithm (``plain``, ``kahan``, ...).
        output: the result format: ``accumulate`` unless rounded once to another.
        seed: the seed the orders were drawn from.
        x: the values as summed: rounded to ``input`` (float32; float64 for fp64).
        exact: the exact sum of ``x`` (order independent).
        values: (samples,) result of each sample, in ``output`` (float32;
            float64 for fp64).
        perms: (samples, n) the permutation of sample ``s``: it summed ``x[perms[s]]``
            with the family's plan (see :meth:`plan`).
        gaps: (samples, n - 1) the order in which ``random_tree`` sample ``s`` closed
            the gaps between the leaves ``x[perms[s]]`` (see :func:`tree_from_gaps`),
            else None.
        distinct: the distinct results by bit pattern (-0.0 and +0.0 are distinct,
            NaNs are one), sorted by value (-0.0 before +0.0, NaN last).
        counts: how many samples gave each distinct result.
        errors_ulps: signed error ``(v - exact) / ulp(max(|exact|, |v|))`` of each
            distinct result in ulps of ``output`` (:func:`fpreduce.core.metrics.ulp_error`
            with a sign; float64; NaN where ``v`` or the sum is not finite, ±inf for an
            overflowed result).
        steps: signed number of representable ``output`` values between each
            distinct result and the exact sum rounded to nearest-even (0: correctly
            rounded; ``ulp_steps`` with a sign); 0 where not finite.
    """

    family: str
    n: int
    input: str
    accumulate: str
    rounding: str
    algorithm: str
    output: str
    seed: int
    x: NDArray[np.floating]
    exact: ExactSum
    values: NDArray[np.floating]
    perms: NDArray[np.integer]
    gaps: NDArray[np.integer] | None
    distinct: NDArray[np.floating]
    counts: NDArray[np.int64]
    errors_ulps: NDArray[np.float64]
    steps: NDArray[np.int64]

    @property
    def samples(self) -> int:
        """Number of sampled orders."""
        return int(self.values.shape[0])

    @property
    def exact_value(self) -> float:
        """The exact sum rounded once (nearest-even) to float64."""
        return float(self.exact.to_float64()[0])

    @property
    def correctly_rounded(self) -> float:
        """The exact sum rounded once (nearest-even) to ``output``."""
        return float(self.exact.round(self.output)[0])

    @property
    def min_error_ulps(self) -> float:
        """The most negative signed error in ulps over the finite distinct results (NaN if none)."""
        e = self.errors_ulps[np.isfinite(self.errors_ulps)]
        return float(e.min()) if e.size else math.nan

    @property
    def max_error_ulps(self) -> float:
        """The largest signed error in ulps over the finite distinct results (NaN if none)."""
        e = self.errors_ulps[np.isfinite(self.errors_ulps)]
        return float(e.max()) if e.size else math.nan

    def histogram(self) -> dict[int, int]:
        """Samples per signed step count from the correctly rounded sum (finite results only)."""
        out: dict[int, int] = {}
        fin = np.isfinite(self.distinct.astype(np.float64))
        for k, c in zip(self.steps[fin].tolist(), self.counts[fin].tolist(), strict=True):
            out[k] = out.get(k, 0) + c
        return dict(sorted(out.items()))

    def plan(self, s: int) -> Any:
        """The plan that sample ``s`` ran on ``x``: ``values[s]`` is ``fr.reduce(x[:, None],
        plan, ...)`` with this object's formats, rounding, algorithm and output."""
        if self.gaps is not None:
            return tree_from_gaps(self.perms[s], self.gaps[s])
        base = sequential(self.n) if self.family == "sequential" else parse(self.family, self.n)
        return base.relabel(self.perms[s])

    def summary(self, *, max_rows: int = 20) -> str:
        """A text table: the exact sum, then each distinct result with its count and error.

        At most ``max_rows`` results are listed (the most frequent, in value order).
        Floats are shown with ``float.hex`` beside the decimal value.
        """
        ex = self.exact_value
        lines = [
            f"order outcomes: family={self.family} n={self.n} samples={self.samples} seed={self.seed}",
            f"formats: {self.input} -> {self.accumulate} -> {self.output} ({self.rounding}, {self.algorithm})",
            f"exact sum:          {ex:.9g} ({float.hex(ex)})"
            + ("" if self.exact.lo.flat[0] == 0 else " rounded to float64"),
            f"correctly rounded:  {self.correctly_rounded:.9g} ({float.hex(self.correctly_rounded)})",
            f"distinct results:   {len(self.distinct)}",
            f"error (ulps of {self.output}): min {self.min_error_ulps:+.4g} max {self.max_error_ulps:+.4g}",
            "",
        ]
        idx = np.arange(len(self.distinct))
        if len(idx) > max_rows:
            idx = np.sort(np.argsort(-self.counts, kind="stable")[:max_rows])
        body = [
            [f"{v:.9g}", float.hex(v), int(self.counts[i]), f"{self.counts[i] / self.samples:.2%}"]
            + [f"{self.errors_ulps[i]:+.4g}", f"{int(self.steps[i]):+d}"]
            for i, v in ((i, float(self.distinct[i])) for i in idx)
        ]
        lines.append(table(["result", "hex", "count", "share", "err ulps", "steps"], body, align="rrrrrr"))
        if len(idx) < len(self.distinct):
            lines.append(f"({len(self.distinct) - len(idx)} less frequent results not shown)")
        return "\n".join(lines)


def order_outcomes(
    x: ArrayLike,
    family: str = "sequential",
    *,
    samples: int = 1000,
    input: str | Format | None = None,
    accumulate: str | Format = "fp32",
    rounding: str | Mode = "nearest_even",
    seed: int = 0,
    algorithm: str = "plain",
    output: str | Format | None = None,
) -> OrderOutcomes:
    """The distribution of the sum of ``x`` over ``samples`` random orders.

    Args:
        x: shape (N,), the N workers' values of one element; rounded to ``input``
            (nearest-even) first, as :func:`fpreduce.reduce` does.
        family: ``sequential`` (a left fold in a random order), any plan text of
            :func:`fpreduce.plans.parse` (``pairwise``, ``ring:nccl``, ...; that
            plan re-ranked by random permutations) or ``random_tree`` (random shape
            and leaf order: adjacent nodes merged in a random order, see
            :func:`tree_from_gaps`).
        samples: number of orders drawn (>= 1).
        input, accumulate, rounding: as for :func:`fpreduce.reduce` (``input`` defaults to
            x's own format).
        seed: seeds the orders (and stochastic rounding); same seed, same outcomes.
        algorithm, output: as for :func:`fpreduce.reduce` (``random_tree`` with
            either set makes one ``reduce`` call per sample: Python-bound, slow).

    Returns:
        OrderOutcomes. NaN in ``x`` gives NaN results, ±Inf propagates as in IEEE;
        overflow in the accumulator gives ±Inf (NaN for fp8_e4m3); subnormals are
        kept (no flush to zero). Errors are in ulps at the larger of |exact| and
        |result|, so a zero exact sum gives finite errors (at most 2**p ulps);
        -0.0 and +0.0 results count as distinct.

    Raises:
        InvalidArgument: ``x`` not 1-D, ``samples < 1``, unknown family or format.

    >>> import numpy as np
    >>> out = order_outcomes(np.array([1.0, 2.0**-8, 2.0**-8]), samples=200,
    ...                      input="fp32", accumulate="bf16")
    >>> [float(v) for v in out.distinct], int(out.counts.sum())
    ([1.0, 1.0078125], 200)
    """
    a = as_float_array(x, "x must be a float array, got {dtype}")
    if a.ndim != 1 or a.shape[0] < 1:
        raise InvalidArgument(f"x must have shape (N,) with N >= 1, got shape {a.shape}")
    if not isinstance(samples, int | np.integer) or samples < 1:
        raise InvalidArgument(f"samples must be a positive int, got {samples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise InvalidArgument(f"seed must be an integer >= 0, got {seed!r}")
    fin, fa, m = input_format(x, a, input, "x"), get_format(accumulate), get_mode(rounding)
    xi = np.asarray(round_to(a.astype(np.float64), fin))
    n, samples = int(a.shape[0]), int(samples)
    rng = np.random.default_rng(int(seed))
    perms = rng.permuted(np.tile(np.arange(n, dtype=np.min_scalar_type(max(n - 1, 1))), (samples, 1)), axis=1)
    srng = np.random.default_rng(rng.integers(2**63)) if m is Mode.STOCHASTIC else None
    fo = fa if output is None else get_format(output)
    kw: dict[str, Any] = {"input": fin, "accumulate": fa, "rounding": m, "seed": srng, "algorithm": algorithm}
    if output is not None:
        kw["output"] = fo
    gaps = None
    if family == RANDOM_TREE:
        gaps = rng.permuted(np.tile(np.arange(n - 1, dtype=perms.dtype), (samples, 1)), axis=1)
        if algorithm == "plain" and output is None:
            values = _gap_reduce(xi, perms, gaps, fin, fa, m, srng)
        else:
            values = np.concatenate(
                [reduce(xi[:, None], tree_from_gaps(p, g), **kw) for p, g in zip(perms, gaps, strict=True)]
            )
    else:
        values = _fixed_reduce(xi, perms, family, kw)
    out = _summarize(family, fin, fo, m, int(seed), xi, values, perms, gaps)
    return replace(out, accumulate=fa.name, algorithm=algorithm)


def _first_tree(plan: Any) -> Plan | None:
    """The tree element 0 gets (None for an unknown kind of plan)."""
    if isinstance(plan, Plan):
        return plan
    orders = getattr(plan, "orders", None)
    if callable(orders):  # per-element orders (atomic): element 0's sequential fold
        return sequential(plan.n, orders(0, 1)[0])
    trees = getattr(plan, "trees", None)
    if trees and isinstance(trees[0], Plan) and hasattr(plan, "bounds"):
        b = plan.bounds(1)
        return trees[int(np.searchsorted(b, 0, side="right")) - 1]  # type: ignore[no-any-return]
    return None


def _fixed_reduce(
    xi: NDArray[np.floating], perms: NDArray[np.integer], family: str, kw: dict[str, Any]
) -> NDArray[np.floating]:
    n, samples = perms.shape[1], perms.shape[0]
    try:
        plan = sequential(n) if family == "sequential" else parse(family, n)
    except InvalidArgument as e:
        raise InvalidArgument(f"{e}; or {RANDOM_TREE!r}") from None
    base = _first_tree(plan)
    if base is None:  # a plan kind without one tree per element: one reduce per sample
        return np.concatenate([reduce(xi[:, None], plan.relabel(p), **kw) for p in perms])
    block = max(1, _BLOCK_CELLS // n)
    parts = []
    for lo in range(0, samples, block):
        M = xi[perms[lo : lo + block].T]  # column s is x[perm_s]: base.relabel(perm_s) on x
        parts.append(reduce(M, base, **kw))
    return np.concatenate(parts)


def _gap_reduce(
    xi: NDArray[np.floating],
    perms: NDArray[np.integer],
    gaps: NDArray[np.integer],
    fin: Format,
    fa: Format,
    m: Mode,
    srng: np.random.Generator | None,
) -> NDArray[np.floating]:
    """All random trees at once: n - 1 steps, each one rounded addition over the samples.

    As in :func:`tree_from_gaps`, a segment's partial sum sits at its left end and
    only the segment ends know where the segment ends, so a step costs O(samples).
    """
    n, samples = perms.shape[1], perms.shape[0]
    fits = fin.precision <= fa.precision and fin.emin >= fa.emin and fin.emax <= fa.emax
    leaves = xi if fits else np.asarray(round_to(xi, fa, m, srng))  # as fr.reduce does
    kw: dict[str, Any] = {"input": fa, "accumulate": fa, "rounding": m, "seed": srng}
    block = max(1, _BLOCK_CELLS // n)
    parts = []
    for lo in range(0, samples, block):
        P = perms[lo : lo + block]
        V = leaves[P].astype(fa.value_dtype).ravel()  # sample-major: node j of sample s at s*n + j
        base = np.arange(P.shape[0], dtype=np.intp) * n
        # segment ends as positions within the sample: small ints, a sample per cache line
        left = np.tile(np.arange(n, dtype=np.min_scalar_type(n - 1)), P.shape[0])
        right = left.copy()
        for k in range(n - 1):
            g = base + gaps[lo : lo + block, k]  # flat index of the node left of the gap
            la, rb = left[g], right[g + 1]
            a = base + la
            V[a] = reduce(np.stack([V[a], V[g + 1]]), "sequential", **kw)
            right[a] = rb
            left[base + rb] = la
        V = V.reshape(P.shape[0], n).T
        parts.append(V[0])
    return np.concatenate(parts).astype(fa.value_dtype)


def _summarize(
    family: str,
    fin: Format,
    fa: Format,
    m: Mode,
    seed: int,
    xi: NDArray[np.floating],
    values: NDArray[np.floating],
    perms: NDArray[np.integer],
    gaps: NDArray[np.integer] | None,
) -> OrderOutcomes:
    """Distinct results and errors; ``fa`` is the result format (accumulate or output)."""
    ex = exact_sum(xi[:, None])
    bits = to_bits(values, fa)
    ub, first, counts = np.unique(bits, return_index=True, return_counts=True)
    d = values[first].astype(np.float64)
    order = np.lexsort((~np.signbit(d), np.nan_to_num(d, nan=np.inf), np.isnan(d)))
    distinct, counts = values[first][order], counts[order].astype(np.int64)
    dv = distinct.astype(np.float64)
    errs = np.full(dv.shape, math.nan)
    steps = np.zeros(dv.shape, dtype=np.int64)
    if not ex.nonfinite[0]:
        exf, s0 = ex.fraction(0), abs(float(ex.to_float64()[0]))
        for j, v in enumerate(dv.tolist()):
            if math.isfinite(v):  # in ulps at max(|s|, |v|), as core.metrics.ulp_error (finite near a zero sum)
                errs[j] = float(Fraction(v) - exf) / float(ulp(np.array([max(s0, abs(v))]), fa)[0])
            elif not math.isnan(v):
                errs[j] = v
        rn = ex.round(fa)
        fin_ = np.isfinite(dv)
        dist = ulp_steps(dv[fin_], np.broadcast_to(rn, dv[fin_].shape), fa)
        steps[fin_] = np.where(dv[fin_] < float(rn[0]), -dist, dist)
    return OrderOutcomes(
        family,
        int(perms.shape[1]),
        fin.name,
        fa.name,
        m.value,
        "plain",
        fa.name,
        seed,
        xi,
        ex,
        values,
        perms,
        gaps,
        distinct,
        counts,
        errs,
        steps,
    )
