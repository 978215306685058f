"""Run a plan over a (workers, elements) array, bit-exactly, vectorized over elements.

Every partial sum is rounded to the accumulator format once, from the exact sum of
its two operands, as IEEE 754 addition does on hardware:

* round to nearest even: the float64 sum of two values of a format with p <= 24 is
  rounded to float64 first; since 53 >= 2p + 2, this double rounding is innocuous
  (Figueroa 1995), so ``round_to(a + b)`` equals rounding the exact sum once.
* directed and stochastic modes: the exact remainder ``err`` of the float64 sum is
  recovered with TwoSum (Knuth); when the float64 sum lies on the target grid the
  sign of ``err`` decides the direction (no grid point of a format with p <= 52 lies
  strictly between the float64 sum and the exact sum).

Signed zeros follow IEEE 754 6.3: an exact zero sum of opposite-signed operands is
+0 except in mode ``down`` (-0); -0 + -0 = -0. NaN and Inf propagate as in IEEE.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce._errors import InvalidArgument
from fpreduce._reference import round_fraction
from fpreduce.formats import Format, get_format
from fpreduce.plans import Plan, SegmentedPlan, fold, parse
from fpreduce.rounding import Mode, _nearest_from_float32, get_mode, round_to

__all__ = ["add_rounded", "reduce", "reduce_reference"]


def add_rounded(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    f: Format,
    mode: Mode,
    rng: np.random.Generator | None = None,
) -> NDArray[np.float64]:
    """IEEE addition of two arrays of ``f`` values, correctly rounded in ``mode``."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = a + b
        if mode is Mode.NEAREST_EVEN:
            out = s if f.precision == 53 else round_to(s, f).astype(np.float64)
        else:
            bb = s - a
            err = (a - (s - bb)) + (b - bb)
            err = np.where(np.isfinite(s), err, 0.0)
            out = _round_with_remainder(s, err, f, mode, rng)
        zero = (s == 0) & (a == b * -1)
        if np.any(zero):
            both_neg = np.signbit(a) & np.signbit(b)
            both_pos_zero = (a == 0) & (b == 0) & ~np.signbit(a) & ~np.signbit(b)
            neg = both_neg | ((mode is Mode.DOWN) & ~both_pos_zero)
            out = np.where(zero, np.where(neg, -0.0, 0.0), out)
    return out


def _add_nearest32(a: NDArray[np.float32], b: NDArray[np.float32], f: Format) -> NDArray[np.float32]:
    """Round-to-nearest addition for accumulators of at most 24 bits, in float32.

    The float32 sum double-rounds innocuously for p <= 11 (24 >= 2p + 2) and is
    exact IEEE for fp32; float32's IEEE addition also gives the right signed zeros.
    fp16 sums of values <= 65504 cannot overflow float32, and a bf16/tf32 sum that
    overflows float32 overflows the narrow format too.
    """
    s = a + b  # the caller holds np.errstate(over="ignore", invalid="ignore")
    if f.precision == 24:
        return s
    if f.name == "fp16":
        return s.astype(np.float16).astype(np.float32)  # IEEE convert, from float32
    if f.emin == -126:
        return _nearest_from_float32(s, f)
    return round_to(s, f)  # type: ignore[return-value]


def _directed(s: NDArray[np.float64], err: NDArray[np.float64], f: Format, mode: Mode):
    if f.precision == 53:
        if mode is Mode.UP:
            return np.where(err > 0, np.nextafter(s, np.inf), s)
        if mode is Mode.DOWN:
            return np.where(err < 0, np.nextafter(s, -np.inf), s)
        toward = (err != 0) & (np.signbit(err) != np.signbit(s))
        return np.where(toward, np.nextafter(s, 0.0), s)
    on_grid = round_to(s, f, Mode.TOWARD_ZERO).astype(np.float64) == s
    nudge = on_grid & (err != 0)
    t = np.where(nudge, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return round_to(t, f, mode).astype(np.float64)


def _round_with_remainder(s, err, f: Format, mode: Mode, rng):
    if mode is not Mode.STOCHASTIC:
        return _directed(s, err, f, mode)
    lo = _directed(s, err, f, Mode.DOWN)
    hi = _directed(s, err, f, Mode.UP)
    gap = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        p = ((s - lo) + err) / gap
    u = rng.random(size=s.shape)
    return np.where((gap > 0) & np.isfinite(gap) & (u < p), hi, np.where(gap > 0, lo, s))


def _prepare(X: ArrayLike, plan: Plan | SegmentedPlan | str, input: str | Format):
    A = np.asarray(X)
    if A.dtype.kind != "f" and A.dtype.name != "bfloat16" and not A.dtype.name.startswith("float8"):
        raise InvalidArgument(f"X must be a float array of shape (workers, elements), got {A.dtype}")
    if A.ndim == 1:
        A = A[:, None]
    if A.ndim != 2:
        raise InvalidArgument(f"X must have shape (workers, elements), got shape {A.shape}")
    p = parse(plan, A.shape[0]) if isinstance(plan, str) else plan
    if p.n != A.shape[0]:
        raise InvalidArgument(f"plan has {p.n} workers but X has {A.shape[0]} rows")
    fin = get_format(input)
    if A.dtype == np.float32 and fin.precision >= 24:
        return A, p  # float32 values are fp32/fp64 values: no copy (read only below)
    Xi = round_to(A, fin)  # explicit: inputs made representable (float32 unless fp64)
    return Xi, p


def reduce(
    X: ArrayLike,
    plan: Plan | SegmentedPlan | str,
    *,
    input: str | Format = "fp32",
    accumulate: str | Format = "fp32",
    rounding: str | Mode = "nearest_even",
    seed: int | np.random.Generator | None = None,
) -> NDArray[np.floating]:
    """Sum the rows of ``X`` along ``plan``, rounding every partial sum.

    Args:
        X: shape (workers, elements) (or (workers,)); values are first rounded to
            ``input`` (nearest even) explicitly.
        plan: a Plan or its text (``"pairwise"``, ``"((0,1),2)"``).
        input: input format; accumulate: accumulator (and result) format.
        rounding: rounding mode of every addition.
        seed: seed or Generator for stochastic rounding.

    Returns:
        shape (elements,), float32 (float64 for an fp64 accumulator).

    >>> import numpy as np
    >>> x = np.array([[1.0], [2.0**-8], [2.0**-8]])
    >>> float(reduce(x, "sequential", input="fp32", accumulate="bf16")[0])
    1.0
    >>> float(reduce(x, "((1,2),0)", accumulate="bf16")[0])
    1.0078125
    """
    Xi, p = _prepare(X, plan, input)
    fa = get_format(accumulate)
    m = get_mode(rounding)
    rng = np.random.default_rng(seed) if m is Mode.STOCHASTIC else None
    if m is Mode.STOCHASTIC and seed is None:
        raise InvalidArgument("stochastic rounding needs seed= for reproducibility")
    fin = get_format(input)
    fits = fin.precision <= fa.precision and fin.emin >= fa.emin and fin.emax <= fa.emax
    Xa = Xi if fits else round_to(Xi, fa, m, rng)  # inputs wider than the accumulator
    if isinstance(p, SegmentedPlan):
        b = p.bounds(Xa.shape[1])
        out = np.empty(Xa.shape[1], dtype=fa.value_dtype)
        for c, t in enumerate(p.trees):  # one loop step per chunk, vectorized within
            if b[c + 1] > b[c]:
                out[b[c] : b[c + 1]] = _reduce_tree(Xa[:, b[c] : b[c + 1]], t, fa, m, rng)
        return out
    return _reduce_tree(Xa, p, fa, m, rng)


def _reduce_tree(Xa, p: Plan, fa: Format, m: Mode, rng) -> NDArray[np.floating]:  # type: ignore[no-untyped-def]
    if m is Mode.NEAREST_EVEN and fa.precision <= 24:
        with np.errstate(over="ignore", invalid="ignore"):
            out = fold(p.root, lambda i: Xa[i], lambda a, b: _add_nearest32(a, b, fa))
        return np.array(out, dtype=np.float32)  # a copy: a single leaf is a view of X
    Xa = Xa.astype(np.float64)
    out = fold(p.root, lambda i: Xa[i], lambda a, b: add_rounded(a, b, fa, m, rng))
    return np.asarray(out).astype(fa.value_dtype)


def _round_input(v: float, f: Format, m: Mode) -> float:
    if v == 0 or np.isnan(v):
        return v
    if np.isinf(v):
        return v if f.has_inf else float("nan")
    return round_fraction(Fraction(v), f, m.value)


def reduce_reference(
    X: ArrayLike,
    plan: Plan | SegmentedPlan | str,
    *,
    input: str | Format = "fp32",
    accumulate: str | Format = "fp32",
    rounding: str | Mode = "nearest_even",
) -> NDArray[np.floating]:
    """The slow, obvious reference: exact rationals, one rounding per addition.

    A Python loop per element; for tests. Stochastic rounding is not supported here.
    """
    Xi, p = _prepare(X, plan, input)
    fa = get_format(accumulate)
    m = get_mode(rounding)
    if m is Mode.STOCHASTIC:
        raise InvalidArgument("reduce_reference has no stochastic mode")
    out = np.empty(Xi.shape[1], dtype=np.float64)
    if isinstance(p, SegmentedPlan):
        b = p.bounds(Xi.shape[1])
        tree_of = [p.trees[int(np.searchsorted(b, j, side="right")) - 1] for j in range(Xi.shape[1])]
    else:
        tree_of = [p] * Xi.shape[1]
    for j in range(Xi.shape[1]):
        col = [_round_input(float(v), fa, m) for v in Xi[:, j]]

        def add(a: float, b: float) -> float:
            if np.isinf(a) or np.isinf(b) or np.isnan(a) or np.isnan(b):
                return a + b
            exact = Fraction(a) + Fraction(b)
            if exact == 0:
                neg = (np.signbit(a) and np.signbit(b)) or (
                    m is Mode.DOWN and not (a == 0 and b == 0 and not np.signbit(a) and not np.signbit(b))
                )
                return -0.0 if neg else 0.0
            return round_fraction(exact, fa, m.value)

        out[j] = fold(tree_of[j].root, col.__getitem__, add)
    return out.astype(fa.value_dtype)
