"""Error metrics, result-to-result divergence and rounding-error bounds.

Metrics against an :class:`~fpreduce.core.exact.ExactSum` measure how far a computed sum
is from the exact one; divergence metrics compare two computed results bit by bit;
bounds give a-priori (worst case) and probabilistic (Higham & Mary 2019) limits on
the error of a reduction.

All functions are vectorized over columns (the reduction is along axis 0).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.base.fpflags import own_flags
from fpreduce.core.exact import ExactSum, exact_sum
from fpreduce.core.formats import Format, get_format, to_bits
from fpreduce.core.primitives import as_rows
from fpreduce.core.rounding import quantum_bits
from fpreduce.plans import PerElementPlan, Plan, SegmentedPlan

__all__ = [
    "abs_error",
    "apriori_bound",
    "backward_bounds",
    "backward_error",
    "backward_errors",
    "bits_equal",
    "condition_number",
    "correct_bits",
    "correctly_rounded",
    "divergence",
    "gamma",
    "norm_error",
    "probabilistic_bound",
    "rel_error",
    "ulp_error",
    "ulp_gap",
    "ulp_steps",
]

_MAX_BITS = 53.0


def abs_error(y: ArrayLike, ex: ExactSum) -> NDArray[np.float64]:
    """Absolute error ``|y - s|`` of ``y`` against the exact sums ``s``, rounded once.

    Args:
        y: computed sums, one per column of ``ex``.
        ex: the exact sums.

    Returns:
        float64 array of ``|y - s|`` rounded once (nearest-even) to float64. A
        NaN/Inf ``y`` or a non-finite exact sum gives the float64 ``|y - sum|``
        (NaN for Inf - Inf or any NaN). ``-0.0`` and ``+0.0`` are the same value
        here: the error of either against a zero sum is 0.
    """
    return np.abs(ex.error_of(y))


def rel_error(y: ArrayLike, ex: ExactSum) -> NDArray[np.float64]:
    """Relative error ``|y - s| / |s|``.

    Where the exact sum ``s`` is zero (either sign) the result is 0 if ``y`` is zero
    (either sign) and ``inf`` otherwise. NaN in ``y`` or a NaN sum gives NaN; an
    infinite sum gives NaN (Inf/Inf) or 0 (finite/Inf) per float64 rules.
    ``|s|`` is the exact sum rounded once to float64 (never 0 unless ``s`` is 0).
    """
    err = abs_error(y, ex)
    s = np.abs(ex.to_float64())
    yy = np.broadcast_to(np.asarray(y, dtype=np.float64), s.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = err / s
    zero = s == 0
    return np.where(zero & (yy == 0), 0.0, np.where(zero & ~np.isnan(yy), np.inf, rel))


def ulp_error(y: ArrayLike, ex: ExactSum, fmt: str | Format) -> NDArray[np.float64]:
    """Error ``|y - s|`` in ulps of ``fmt`` at ``max(|s|, |y|)``, defined for every element.

    The ulp is the quantum of the binade of the larger magnitude in ``fmt`` (the
    subnormal quantum below ``2**emin``): a power of two, so the division is exact and
    ``|y - s|`` is the exact error rounded once to float64. Measuring at the larger of
    the two keeps the value meaningful where the exact sum cancels to (near) zero: a
    finite ``y`` against a finite ``s`` is never more than ``2**(p + 1)`` ulps away
    (``|y - s| <= 2 max(|s|, |y|) < 2 * 2**p * ulp``), while a correctly rounded ``y``
    stays within 0.5 ulp. ``s`` is the exact sum rounded once to float64 where a
    magnitude is needed (its binade differs from the exact one only within 2**-53 of a
    power of two).

    Special values: 0 where ``y`` and ``s`` are both zero (either sign); NaN where
    ``y`` or ``s`` is NaN; where ``y`` or ``s`` is infinite, 0 if both are the same
    infinity and ``inf`` otherwise.

    >>> import numpy as np
    >>> from fpreduce.core.exact import exact_sum
    >>> float(ulp_error(np.array([2.0**-8]), exact_sum(np.array([[1.0], [-1.0]])), "bf16")[0])
    128.0
    """
    f = get_format(fmt)
    s = np.asarray(ex.to_float64(), dtype=np.float64)
    yy = np.broadcast_to(np.asarray(y, dtype=np.float64), s.shape)
    err = abs_error(y, ex)
    with np.errstate(invalid="ignore", over="ignore"):
        big = np.maximum(np.abs(s), np.abs(yy))
        q = quantum_bits(np.where(np.isfinite(big), big, 0.0), f).view(np.float64)
        out = err / q
    fin = np.isfinite(s) & np.isfinite(yy)
    nan = np.isnan(s) | np.isnan(yy)
    return np.where(fin, out, np.where(nan, np.nan, np.where(s == yy, 0.0, np.inf)))


def norm_error(y: ArrayLike, ex: ExactSum) -> float:
    """Normwise relative error ``||y - s||_2 / ||s||_2`` over the elements where ``y`` and ``s`` are finite.

    The errors are exact differences rounded once to float64; the norms are float64.
    0 when every such ``y`` equals its ``s``; ``inf`` when ``s`` is zero there but ``y``
    is not; NaN when no element has a finite ``y`` and ``s``. The headline error of
    a run (metrics.csv's ``err_norm``, which the runner accumulates chunk by chunk).

    >>> import numpy as np
    >>> from fpreduce.core.exact import exact_sum
    >>> norm_error(np.array([3.0, 4.5]), exact_sum(np.array([[3.0, 4.0], [0.0, 0.0]])))  # 0.5 / 5
    0.1
    """
    s = np.asarray(ex.to_float64(), dtype=np.float64).ravel()
    yy = np.broadcast_to(np.asarray(y, dtype=np.float64), ex.to_float64().shape).ravel()
    ok = np.isfinite(s) & np.isfinite(yy)
    if not ok.any():
        return float("nan")
    e = np.abs(np.asarray(ex.error_of(y), dtype=np.float64)).ravel()[ok]
    num, den = float(np.sqrt(np.sum(e * e))), float(np.sqrt(np.sum(s[ok] * s[ok])))
    return (0.0 if num == 0 else float("inf")) if den == 0 else num / den


def backward_error(y: ArrayLike, ex: ExactSum, X: ArrayLike) -> float:
    """Backward error ``max_j |y_j - s_j| / sum_i |x_ij|`` over the elements where ``y`` and ``s`` are finite.

    ``X`` holds the terms (as the reduction saw them), reduced along axis 0. A column of
    zeros counts 0 when its ``y`` is 0 and ``inf`` otherwise; NaN when no element
    qualifies. Compare it with :func:`backward_bounds` (metrics.csv's ``err_backward``).

    >>> import numpy as np
    >>> from fpreduce.core.exact import exact_sum
    >>> X = np.array([[1.0, 3.0], [-1.0, 1.0]])
    >>> backward_error(np.array([0.5, 4.0]), exact_sum(X), X)
    0.25
    """
    s = np.asarray(ex.to_float64(), dtype=np.float64).ravel()
    yy = np.broadcast_to(np.asarray(y, dtype=np.float64), ex.to_float64().shape).ravel()
    ok = np.isfinite(s) & np.isfinite(yy)
    if not ok.any():
        return float("nan")
    a = np.abs(np.asarray(X, dtype=np.float64)).sum(axis=0).ravel()[ok]
    e = np.abs(np.asarray(ex.error_of(y), dtype=np.float64)).ravel()[ok]
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(a != 0, e / a, np.where(e == 0, 0.0, np.inf))
    return float(b.max())


def correct_bits(y: ArrayLike, ex: ExactSum) -> NDArray[np.float64]:
    """Number of correct significant bits, ``-log2(rel_error)`` clipped to [0, 53].

    An exact result (relative error 0, including a zero ``y`` for a zero sum) gives
    53; relative error ``inf`` (non-zero ``y`` for a zero sum) or ``>= 1`` gives 0;
    NaN stays NaN.
    """
    rel = rel_error(y, ex)
    with np.errstate(divide="ignore"):
        bits = -np.log2(rel)
    return np.clip(bits, 0.0, _MAX_BITS)


def condition_number(X: ArrayLike, ex: ExactSum) -> NDArray[np.float64]:
    """Condition number of summation, ``sum|x| / |sum x|``, per column (axis 0).

    Both sums are exact, rounded once to float64, so the result is ``>= 1``.
    ``inf`` where the sum is zero and ``sum|x| > 0``; 1 where both are zero (all
    terms ±0). NaN/Inf inputs give NaN (Inf/Inf) per float64 rules.

    Args:
        X: the terms, reduced along axis 0 (as given to ``exact_sum``).
        ex: ``exact_sum(X)``.
    """
    a = exact_sum(np.abs(np.asarray(X, dtype=np.float64)), axis=0).to_float64().reshape(ex.shape)
    s = np.abs(ex.to_float64())
    with np.errstate(divide="ignore", invalid="ignore"):
        k = a / s
    return np.where((s == 0) & (a == 0), 1.0, np.where((s == 0) & (a > 0), np.inf, k))


def correctly_rounded(y: ArrayLike, ex: ExactSum, fmt: str | Format) -> NDArray[np.bool_]:
    """True where ``y`` has exactly the bits of the exact sum rounded (nearest-even) to ``fmt``.

    Bitwise: a ``+0.0`` result for a ``-0.0`` sum (all terms -0.0) is False; NaN
    matches NaN (both map to the canonical NaN pattern). ``y`` must be representable.
    """
    return bits_equal(y, ex.round(fmt), fmt)


def bits_equal(y1: ArrayLike, y2: ArrayLike, fmt: str | Format) -> NDArray[np.bool_]:
    """Elementwise bit-pattern equality of two results in ``fmt`` (via ``to_bits``).

    ``-0.0 != +0.0``; every NaN maps to the canonical NaN pattern, so NaN == NaN.
    """
    f = get_format(fmt)
    fast = _float32_keys(y1, y2, f)
    if fast is not None:
        (b1, _), (b2, _) = fast
        n1, n2 = np.isnan(np.asarray(y1)), np.isnan(np.asarray(y2))
        return np.asarray(((b1 == b2) & ~n1 & ~n2) | (n1 & n2))
    return np.asarray(to_bits(y1, fmt) == to_bits(y2, fmt))


def _float32_keys(y1: ArrayLike, y2: ArrayLike, f: Format):  # type: ignore[no-untyped-def]
    """Fast path for float32 arrays in fp32/tf32/bf16: (bits, ordered key) of each, or None.

    Those formats' values are the float32 values whose low 24 - p bits are zero, in
    the same order, so keys divide exactly by 2**(24 - p). Falls back (None) on other
    formats, dtypes, or values not representable in ``f`` (``to_bits`` then says so).
    """
    a, b = np.asarray(y1), np.asarray(y2)
    if a.dtype != np.float32 or b.dtype != np.float32 or f.emin != -126 or f.precision > 24:
        return None
    drop = 24 - f.precision
    out = []
    for v in (a, b):
        bits = v.view(np.uint32)
        if drop and np.any(bits & np.uint32((1 << drop) - 1) & ~np.isnan(v)):
            return None
        mag = (bits & np.uint32(0x7FFFFFFF)).astype(np.int64) >> drop
        out.append((bits, np.where(bits >> np.uint32(31) != 0, -mag, mag)))
    return out


def _ordered_keys(y: ArrayLike, f: Format) -> NDArray[np.int64]:
    b = to_bits(y, f).astype(np.uint64) >> np.uint64(f.bits - f.storage_bits)
    sign = np.uint64(1) << np.uint64(f.storage_bits - 1)
    mag = (b & ~sign).astype(np.int64)
    return np.where((b & sign) != 0, -mag, mag)


def ulp_steps(y1: ArrayLike, y2: ArrayLike, fmt: str | Format) -> NDArray[np.int64]:
    """Number of representable steps between ``y1`` and ``y2`` in ``fmt`` (int64).

    Uses ordered integer keys: ``key = -(bits & ~sign)`` for negative patterns and
    ``bits`` for positive ones, so the count is exact across zero. ``+0.0`` and
    ``-0.0`` share key 0 and are at distance 0 (they are the same value), although
    ``bits_equal`` tells them apart. ±Inf is one step beyond ±max_finite. Where
    either value is NaN the distance is 0 if both are NaN and -1 otherwise.

    A count, not a size: across a binade boundary it differs from :func:`ulp_gap`
    (bf16 1.0 and 1 - 2**-8 are 1 step apart and 0.5 ulp apart).
    """
    f = get_format(fmt)
    fast = _float32_keys(y1, y2, f)
    a = np.asarray(y1, dtype=np.float64)
    b = np.asarray(y2, dtype=np.float64)
    d = np.abs(fast[0][1] - fast[1][1]) if fast is not None else np.abs(_ordered_keys(a, f) - _ordered_keys(b, f))
    na, nb = np.isnan(a), np.isnan(b)
    return np.where(na & nb, 0, np.where(na | nb, -1, d)).astype(np.int64)


def ulp_gap(y1: ArrayLike, y2: ArrayLike, fmt: str | Format) -> NDArray[np.float64]:
    """``|y1 - y2| / ulp(max(|y1|, |y2|))`` in ``fmt``, elementwise: the runner's ulp distance.

    This is the distance behind metrics.csv's ``ulp_max`` and ``ulp_mean`` (an arm
    against its reference arm). The ulp is the quantum of the larger magnitude's
    binade in ``fmt`` (the subnormal quantum below 2**emin), a power of two, so the
    division is exact. Within one binade it is the number of steps between the two
    values (:func:`ulp_steps`); across a binade boundary or zero it is a size, not a
    count: bf16 1.0 and 1 - 2**-8 are 0.5 ulp apart (1 step), and +x and -x are
    2|x| / ulp(x) apart (not the number of values between them).

    Special values: +0.0 and -0.0 are 0 apart (the same value), a zero and ``x`` are
    ``|x| / ulp(x)`` apart; two NaNs, or two equal infinities, are 0 apart; a NaN on
    one side only, an infinity against anything else, or a difference beyond
    float64's range gives ``inf`` (metrics.csv writes these as its largest distance,
    ``ULP_EDGES[-1]`` = 2**20).

    Args:
        y1, y2: values of ``fmt`` (any float dtype; broadcast together).
        fmt: the format whose ulp measures the gap.

    Returns:
        float64 array of the broadcast shape.

    >>> float(ulp_gap(1.0, 1 - 2.0**-8, "bf16")), int(ulp_steps(1.0, 1 - 2.0**-8, "bf16"))
    (0.5, 1)
    """
    f = get_format(fmt)
    a, b = np.broadcast_arrays(np.asarray(y1, dtype=np.float64), np.asarray(y2, dtype=np.float64))
    shape = a.shape
    a, b = a.reshape(-1), b.reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        big = np.maximum(np.abs(a), np.abs(b))
        d = np.abs(a - b) / quantum_bits(big, f).view(np.float64)  # a power of two: exact
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    return np.where(same, 0.0, np.where(np.isfinite(d), d, np.inf)).reshape(shape)


def divergence(y1: ArrayLike, y2: ArrayLike, fmt: str | Format) -> dict[str, float]:
    """Summary of how two results of the same shape in ``fmt`` differ.

    Returns:
        dict with ``frac_differ`` (fraction of elements whose bits differ; ±0 and
        NaN follow ``bits_equal``), ``max_steps`` and ``mean_steps`` (of
        ``ulp_steps`` over elements where neither is NaN unless both are; 0 if
        there are none), ``hamming`` (mean popcount of the XOR of bit patterns)
        and ``rel_l2`` (``||y1 - y2|| / ||y2||`` in float64; 0 if both are zero,
        ``inf`` if only ``y2`` is; NaN/Inf inputs propagate). All zeros for
        identical inputs.
    """
    f = get_format(fmt)
    a = np.asarray(y1, dtype=np.float64)
    b = np.asarray(y2, dtype=np.float64)
    if a.shape != b.shape:
        raise InvalidArgument(f"shapes differ: {a.shape} vs {b.shape}")
    if a.size == 0:
        return {"frac_differ": 0.0, "max_steps": 0.0, "mean_steps": 0.0, "hamming": 0.0, "rel_l2": 0.0}
    eq = bits_equal(a, b, f)
    d = ulp_steps(a, b, f)
    valid = d[d >= 0]
    x = (to_bits(a, f) ^ to_bits(b, f)).astype(np.uint64)
    with np.errstate(invalid="ignore", over="ignore"):
        num = float(np.linalg.norm((a - b).ravel()))
        den = float(np.linalg.norm(b.ravel()))
    rel = (0.0 if num == 0 else np.inf) if den == 0 else num / den
    return {
        "frac_differ": float(np.mean(~eq)),
        "max_steps": float(valid.max()) if valid.size else 0.0,
        "mean_steps": float(valid.mean()) if valid.size else 0.0,
        "hamming": float(np.mean(np.bitwise_count(x))),
        "rel_l2": rel,
    }


def gamma(k: ArrayLike, u: float) -> NDArray[np.float64]:
    """``(1 + u)**k - 1`` computed accurately as ``expm1(k * log1p(u))``.

    This is the exact growth of ``k`` relative errors of at most ``u`` (not the
    usual upper bound ``k u / (1 - k u)``); it is finite for every ``k``.
    """
    return np.expm1(np.asarray(k, dtype=np.float64) * np.log1p(u))


def _abs_terms(X: ArrayLike, n: int) -> NDArray[np.float64]:
    a = np.abs(np.asarray(X, dtype=np.float64))
    if a.ndim == 0 or a.shape[0] != n:
        raise InvalidArgument(f"X must have {n} rows (one per worker), got shape {a.shape}")
    return a


def apriori_bound(X: ArrayLike, plan: Plan | SegmentedPlan | PerElementPlan, fmt: str | Format) -> NDArray[np.float64]:
    """Worst-case error bound of summing ``X`` along ``plan`` in ``fmt``, per column.

    ``sum_i ((1 + u)**d_i - 1) |x_i|`` with ``u = fmt.unit_roundoff`` and ``d_i =
    plan.depths()[i]`` the additions on leaf ``i``'s path. Holds for round-to-nearest
    without overflow (underflow is harmless: additions of subnormals are exact).
    ``X`` should be the terms as the reduction sees them (already rounded to the
    input format). Evaluated in float64 (relative error ~ n * 2**-53). NaN/Inf terms
    give a NaN/Inf bound; ±0 terms contribute 0.

    Raises:
        InvalidArgument: ``X.shape[0] != plan.n``.
    """
    f = get_format(fmt)
    a = _abs_terms(X, plan.n)
    g = gamma(plan.depths(), f.unit_roundoff)
    g = g.reshape((-1,) + (1,) * (a.ndim - 1))
    with np.errstate(invalid="ignore"):
        return np.sum(g * a, axis=0)


def probabilistic_bound(
    X: ArrayLike, fmt: str | Format, lam: float = 5.0, n: int | None = None
) -> tuple[NDArray[np.float64], float]:
    """Higham & Mary (2019) probabilistic bound for recursive summation, per column.

    With ``k = n - 1`` additions and ``u = fmt.unit_roundoff`` (Higham & Mary, "A
    new approach to probabilistic rounding error analysis", SISC 2019, Thms 3.1 and
    4.2, rounding errors modelled as independent mean-zero random variables)::

        |error| <= gamma_tilde_k(lam) * sum|x|,
        gamma_tilde_k(lam) = exp(lam * sqrt(k) * u + k * u**2 / (1 - u)) - 1,

    failing with probability at most ``min(1, k * 2 * exp(-lam**2 * (1 - u)**2 / 2))``
    (the union bound of the paper's Theorem 4.2, ``1 - Q(lam, k)``).

    Args:
        X: terms, reduced along axis 0.
        fmt: accumulation format.
        lam: the confidence parameter lambda > 0.
        n: number of terms; defaults to ``X.shape[0]``.

    Returns:
        ``(bound, failure_probability)``; bound is float64 per column (NaN/Inf
        terms propagate; ±0 terms contribute 0).

    Raises:
        InvalidArgument: ``lam <= 0`` or ``n < 1``.
    """
    f = get_format(fmt)
    a = np.abs(np.asarray(X, dtype=np.float64))
    if a.ndim == 0:
        a = a.reshape(1)
    nn = a.shape[0] if n is None else int(n)
    if not lam > 0:
        raise InvalidArgument(f"lam must be > 0, got {lam}")
    if nn < 1:
        raise InvalidArgument(f"n must be >= 1, got {nn}")
    u = f.unit_roundoff
    k = nn - 1
    gt = float(np.expm1(lam * np.sqrt(k) * u + k * u * u / (1 - u)))
    fail = min(1.0, 2.0 * k * float(np.exp(-(lam**2) * (1 - u) ** 2 / 2)))
    with np.errstate(invalid="ignore"):
        return gt * np.sum(a, axis=0), fail


def backward_bounds(depth: int, fmt: str | Format, *, lam: float = 5.0) -> dict[str, float | None]:
    """Bounds on the backward error ``max_j |y_j - s_j| / sum_i |x_ij|`` of a plain sum to nearest.

    With ``d`` the largest number of additions on a leaf's path (``n - 1`` for a chain,
    ``ceil(log2 n)`` for a balanced tree) and ``u`` the unit roundoff of ``fmt``:

    * ``deterministic``: Higham's ``gamma_d = d u / (1 - d u)`` (Accuracy and Stability,
      Lemma 3.1), a worst case that always holds; None where ``d u >= 1`` (the bound
      says nothing: "not informative").
    * ``probabilistic``: ``lam * sqrt(d) * u`` to first order (Higham & Mary 2019,
      Theorem 4.2; exactly ``exp(lam sqrt(d) u + d u^2 / (1 - u)) - 1``), which holds
      with probability at least ``probability`` = ``1 - 2 d exp(-lam^2 (1 - u)^2 / 2)``
      when the rounding errors are independent and mean zero; None where that
      probability is not positive or the bound is not below 1.

    ``d = 0`` (one term) gives 0 for both (nothing is rounded).

    >>> b = backward_bounds(15, "bf16")
    >>> round(b["deterministic"], 4), round(b["probabilistic"], 4), round(b["probability"], 5)
    (0.0622, 0.0788, 0.99988)
    >>> backward_bounds(10**5, "fp16")["deterministic"] is None
    True
    """
    if depth < 0:
        raise InvalidArgument(f"depth must be >= 0, got {depth}")
    if not lam > 0:
        raise InvalidArgument(f"lam must be > 0, got {lam}")
    u = get_format(fmt).unit_roundoff
    if depth == 0:
        return {"depth": 0, "u": u, "deterministic": 0.0, "probabilistic": 0.0, "probability": 1.0, "lam": lam}
    du = depth * u
    det = du / (1 - du) if du < 1 else None
    prob = 1.0 - 2.0 * depth * float(np.exp(-(lam**2) * (1 - u) ** 2 / 2))
    pb = float(np.expm1(lam * np.sqrt(depth) * u + depth * u * u / (1 - u)))
    ok = prob > 0 and pb < 1
    return {
        "depth": depth,
        "u": u,
        "deterministic": det,
        "probabilistic": pb if ok else None,
        "probability": prob if ok else None,
        "lam": lam,
    }


@own_flags
def backward_errors(s_hat: ArrayLike, X: ArrayLike) -> NDArray[np.float64]:
    """The backward error ``|s_hat - s| / sum_i |x_i|`` of each column's computed sum, exactly
    (``fr.backward_error``; :func:`backward_error` is their maximum in float64, as metrics.csv's).

    ``s`` is the exact sum of the column of ``X`` (terms, elements), and both the
    error and ``sum |x_i|`` are exact rationals; their ratio is rounded once to
    float64. It is the smallest relative perturbation of the terms of which
    ``s_hat`` is the exact sum; compare it with
    :func:`backward_bounds` (``fr.backward_bounds(depth, fmt)``,
    depth ``n - 1`` for a left fold of n terms, ``max(plan.depths())`` for a tree; a
    bound that is not informative, ``d u >= 1``, is None). A column of zeros gives 0
    if ``s_hat`` is 0, else ``inf``; NaN where ``s_hat`` or the sum is not finite.

    >>> import numpy as np
    >>> float(backward_errors(np.float32(4.0), np.array([1.0, 2.0, 0.5]))[0])
    0.14285714285714285
    """
    A = as_rows(X, "backward_error")
    d = A.shape[1]
    y = np.broadcast_to(np.asarray(s_hat, dtype=np.float64).reshape(-1), (d,))
    ex, absx = exact_sum(A), exact_sum(np.abs(A))
    s64 = ex.to_float64().reshape(-1)
    out = np.empty(d)
    for j in range(d):
        if not (np.isfinite(y[j]) and np.isfinite(s64[j])):
            out[j] = np.nan
            continue
        err, den = abs(Fraction(float(y[j])) - ex.fraction(j)), absx.fraction(j)
        out[j] = float(err / den) if den else (0.0 if err == 0 else np.inf)
    return out
