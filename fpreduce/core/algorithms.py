"""Summation algorithms beyond the plain rounded fold: compensated, binned, exact.

* ``compensated``: Kahan and Neumaier sums, every operation done in the accumulator
  format and rounding mode, bit for bit what a kernel holding ``s`` and ``c`` in that
  format computes (``compensated_reference`` is the slow Fraction twin).
* ``binned``: a reproducible sum in the spirit of Demmel-Nguyen / ReproBLAS: the same
  bits for every order of the rows by construction, cheaper than the exact oracle.
* ``exact``: the exact sum rounded once (the oracle), order independent.

All take ``Y``/``X`` of shape (workers, elements) (a 1-D array is one element) and
return shape (elements,), float32 (float64 for fp64).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce.base.dtypes import is_float_dtype
from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.core import _binned
from fpreduce.core._reference import add_exact
from fpreduce.core.arith import add_rounded
from fpreduce.core.exact import exact_sum
from fpreduce.core.formats import Format, get_format
from fpreduce.core.rounding import Mode, _nearest32_inplace, get_mode, round_to

__all__ = ["BINNED_MAX_ROWS", "binned", "compensated", "compensated_reference", "exact"]

Kind = Literal["kahan", "neumaier"]
_KINDS: tuple[Kind, ...] = get_args(Kind)
_BLOCK = 1 << 13  # elements per block: the working set of a block stays in cache
BINNED_MAX_ROWS = 1 << 26  # n * 2**26 <= 2**52: every bin sum is exact in float64 (_binned.W = 26)


def _as_2d(X: ArrayLike, who: str) -> NDArray[np.floating]:
    A = np.asarray(X)
    if not is_float_dtype(A.dtype):
        raise InvalidArgument(f"{who}: X must be a float array of shape (workers, elements), got {A.dtype}")
    if A.ndim == 1:
        A = A[:, None]
    if A.ndim != 2 or A.shape[0] == 0:
        raise InvalidArgument(f"{who}: X must have shape (workers >= 1, elements), got {A.shape}")
    return A


def _kind(kind: str) -> Kind:
    if kind not in _KINDS:
        raise unknown_name("compensated kind", kind, _KINDS)
    return kind  # type: ignore[return-value]


def _generator(
    m: Mode, rng: np.random.Generator | int | None, *, allowed: bool, message: str
) -> np.random.Generator | None:
    """The Generator of stochastic mode (InvalidArgument(``message``) without ``rng`` or where not
    ``allowed``); None in the other modes."""
    if m is not Mode.STOCHASTIC:
        return None
    if rng is None or not allowed:
        raise InvalidArgument(message)
    return np.random.default_rng(rng)


Op = Callable[[NDArray[np.floating], NDArray[np.floating]], NDArray[np.floating]]


def _adder(f: Format, m: Mode, rng: np.random.Generator | None) -> tuple[Op, Op, type]:
    """IEEE addition and subtraction in ``f``/``m``, and the dtype operands travel in.

    Nearest-even with p <= 11: the float32 result rounded to ``f`` is correctly rounded
    (24 >= 2p + 2, innocuous double rounding); fp32: float32 itself (IEEE ``a - b`` is
    ``a + (-b)``, signed zeros included). Otherwise ``arith.add_rounded`` in float64
    (TwoSum remainder for the directed modes).
    """
    if m is Mode.NEAREST_EVEN and f.precision == 24:
        return np.add, np.subtract, np.float32
    if m is Mode.NEAREST_EVEN and f.precision <= 11 and f.emin == -126:  # bf16, tf32
        return ((lambda a, b: _rne32(np.add(a, b), f)), (lambda a, b: _rne32(np.subtract(a, b), f)), np.float32)
    if m is Mode.NEAREST_EVEN and f.precision <= 11:
        return (
            (lambda a, b: round_to(a + b, f)),
            (lambda a, b: round_to(a - b, f)),  # type: ignore[return-value]
            np.float32,
        )

    def add(a: NDArray[np.floating], b: NDArray[np.floating]) -> NDArray[np.floating]:
        return add_rounded(a, b, f, m, rng)  # type: ignore[arg-type]

    return add, (lambda a, b: add(a, -b)), np.float64


def _rne32(x: NDArray[np.float32], f: Format) -> NDArray[np.float32]:
    """Round float32 ``x`` in place to nearest-even onto ``f`` (fp32's exponent range)."""
    _nearest32_inplace(x, f, np.empty(x.size, dtype=np.uint32))
    return x


def compensated(
    Y: ArrayLike,
    fmt: str | Format,
    mode: str | Mode = "nearest_even",
    *,
    kind: str = "kahan",
    rng: np.random.Generator | int | None = None,
) -> NDArray[np.floating]:
    """Kahan or Neumaier compensated sum of the rows of ``Y``, in ``fmt`` arithmetic.

    The rows are summed in order (row 0 first) by the kernel, where every ``+``/``-``
    is one IEEE operation in ``fmt`` rounded in ``mode`` (``a - b`` is ``a + (-b)``):

    * kahan: ``s = Y[0]; c = 0``; per row ``y = x - c; t = s + y; c = (t - s) - y;
      s = t``; returns ``s``.
    * neumaier: ``s = Y[0]; c = 0``; per row ``t = s + x``; ``c += (s - t) + x`` if
      ``|s| >= |x|`` else ``c += (x - t) + s``; ``s = t``; returns ``s + c``.

    Guarantees (nearest, no overflow/underflow): Kahan's error is at most
    ``(2u + O(n u^2)) * sum|x|`` (Goldberg, Thm 8), independent of n to first order,
    versus ``(n - 1) u sum|x|`` for the plain fold; Neumaier also survives a running
    sum that is smaller than the next term (``[1, 2**100, 1, -2**100]`` gives 2, Kahan
    0). But Neumaier's ``c`` is a plain running sum in ``fmt``, so it swamps too: in
    bf16, ``1 + 1000 * 2**-9`` gives 2.953125 (exact) with Kahan, 1.5 with Neumaier
    and 1.0 with the plain fold. The result still depends on the order.

    Cost: 4 (Kahan) or 5 (Neumaier) rounded operations per row and element, i.e.
    about 4-5x ``engine.reduce`` sequential in the same format; vectorized over
    elements in cache-sized blocks, a Python loop over the rows.

    Special values, as the kernel computes them: NaN propagates; an Inf term makes
    ``c = Inf - Inf = NaN``, so a column holding ±Inf (or overflowing) gives NaN
    unless the Inf comes in the last row (Kahan, which returns ``s``); Neumaier's
    final ``s + c`` gives NaN then. Signed zeros follow IEEE 754 6.3 at every
    operation (an exact zero is +0, -0 in mode ``down``), so Neumaier turns a sum of
    -0.0 into +0.0 (``-0 + +0``) except in mode ``down``. Subnormals are kept.

    Args:
        Y: shape (workers, elements) (or (workers,)), rows representable in ``fmt``.
        fmt: the accumulator format (``s`` and ``c``).
        mode: rounding of every operation (``stochastic`` needs ``rng``).
        kind: ``"kahan"`` or ``"neumaier"``.
        rng: Generator or seed for stochastic rounding.

    Returns:
        shape (elements,), float32 (float64 for fp64).

    Raises:
        InvalidArgument: bad kind, shape, dtype, a value not representable in ``fmt``,
            or stochastic without ``rng``.

    >>> y = np.array([1.0] + [2.0**-9] * 4)
    >>> float(compensated(y, "bf16", kind="kahan")[0])  # the plain bf16 fold gives 1.0
    1.0078125
    """
    f, m, k = get_format(fmt), get_mode(mode), _kind(kind)
    A = _as_2d(Y, "compensated")
    gen = _generator(m, rng, allowed=True, message="stochastic rounding needs rng= (a numpy Generator or a seed)")
    add, sub, dt = _adder(f, m, gen)
    cols = A.shape[1]
    out = np.empty(cols, dtype=f.value_dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        for c0 in range(0, cols, _BLOCK):
            out[c0 : c0 + _BLOCK] = _compensated_block(A, c0, k, add, sub, dt, f)
    return out


def _compensated_block(
    A: NDArray[np.floating], c0: int, k: Kind, add: Op, sub: Op, dt: type, f: Format
) -> NDArray[np.floating]:
    """``compensated`` of the block of columns starting at ``c0`` (the caller holds np.errstate)."""
    s = _row(A, 0, c0, dt, f)
    c = np.zeros_like(s)
    for i in range(1, A.shape[0]):
        x = _row(A, i, c0, dt, f)
        if k == "kahan":
            y = sub(x, c)
            t = add(s, y)
            c = sub(sub(t, s), y)
        else:
            t = add(s, x)
            keep = np.abs(s) >= np.abs(x)
            big, small = np.where(keep, s, x), np.where(keep, x, s)
            c = add(c, add(sub(big, t), small))
        s = t
    if k == "neumaier":
        s = add(s, c)
    return s


def _row(A: NDArray[np.floating], i: int, c0: int, dt: type, f: Format) -> NDArray[np.floating]:
    """Row ``i`` of block ``c0`` in dtype ``dt``, checked representable in ``f``."""
    raw = A[i, c0 : c0 + _BLOCK]
    x: NDArray[np.floating] = np.array(raw, dtype=dt)
    low = np.uint32((1 << (24 - f.precision)) - 1) if f.emin == -126 else None  # bf16/tf32/fp32
    if low is not None and dt is np.float32 and raw.dtype == np.float32 and not (x.view(np.uint32) & low).any():
        return x
    narrowed = raw.dtype.itemsize > x.dtype.itemsize and not np.array_equal(x, raw, equal_nan=True)
    if narrowed or not np.array_equal(round_to(x, f), x, equal_nan=True):
        raise InvalidArgument(
            f"row {i} of Y holds values not representable in {f.name}; round them with round_to first"
        )
    return x


def compensated_reference(
    Y: ArrayLike, fmt: str | Format, mode: str | Mode = "nearest_even", *, kind: str = "kahan"
) -> NDArray[np.floating]:
    """Slow twin of ``compensated``: a Python loop per element over ``Fraction``.

    Every operation is :func:`fpreduce.core._reference.add_exact`: the exact rational
    result rounded once; exact zeros get their IEEE sign (+0, or -0 in mode ``down``;
    ``-0 + -0 = -0``); ``x - y`` is ``x + (-y)``. For tests; no stochastic.
    """
    f, m, k = get_format(fmt), get_mode(mode), _kind(kind)
    if m is Mode.STOCHASTIC:
        raise InvalidArgument("compensated_reference has no stochastic mode")
    A = _as_2d(Y, "compensated_reference").astype(np.float64)
    out = np.empty(A.shape[1])

    def add(a: float, b: float) -> float:
        return add_exact(a, b, f, m.value)

    for j in range(A.shape[1]):
        col = [float(v) for v in A[:, j]]
        s, c = col[0], 0.0
        for x in col[1:]:
            if k == "kahan":
                y = add(x, -c)
                t = add(s, y)
                c = add(add(t, -s), -y)
            else:
                t = add(s, x)
                big, small = (s, x) if abs(s) >= abs(x) else (x, s)
                c = add(c, add(add(big, -t), small))
            s = t
        out[j] = add(s, c) if k == "neumaier" else s
    return out.astype(f.value_dtype)


def binned(
    X: ArrayLike,
    fmt: str | Format,
    mode: str | Mode = "nearest_even",
    *,
    rng: np.random.Generator | int | None = None,
) -> NDArray[np.floating]:
    """Reproducible binned sum: the same bits for every order of the rows, by construction.

    Per column, ``E`` is the exponent with ``max|x| < 2**E`` (order independent).
    Each value is split exactly, in float64, into ``K = 3`` parts on fixed grids
    ``2**(E - 26k - 26)`` (``q = (r + M) - M`` with ``M = 1.5 * 2**(t + 52)``, then
    ``r -= q``); what is left below ``2**(E - 78)`` is dropped. Part k of every row is
    an integer multiple of its grid below 2**26, so the n parts of a bin add up exactly
    in float64 for ``n <= BINNED_MAX_ROWS = 2**26`` (in any order: no rounding ever
    happens). The three bin sums are then carried into a non-overlapping float64
    pair ``(h, e)`` with ``h + e = B`` exactly (B the sum of the kept parts) and B is
    rounded once onto ``fmt`` in ``mode`` (through round-to-odd at 53 bits, which is
    exact for every p <= 52; fp64 uses the sign of ``e``).

    Guarantees, with S the exact sum and u = 2**-p of ``fmt``:

    * order independence: every permutation of the rows gives identical bits;
    * ``|B - S| <= n * 2**-78 * max|x|`` (each value loses < 2**(E - 79));
    * ``y`` is B correctly rounded: ``|y - B| <= ulp(B) / 2`` in nearest, ``< ulp(B)``
      in the directed modes; so ``|y - S| <= 2u|S| + (1 + 2u) n 2**-78 max|x|``
      (plus a subnormal quantum), about one ulp for any gradient;
    * B == S, hence ``y == exact(X, fmt, mode)`` bit for bit, when every value is a
      multiple of 2**(E - 78): for inputs with <= 24-bit significands (fp32 and
      narrower) that holds whenever ``min nonzero |x| >= 2**-54 max|x|``.

    Inputs: any float dtype. float64 inputs are accepted (same bound; they lose their
    bits below the window sooner) if ``max|x| < 2**960``, else InvalidArgument (use
    ``exact``). Cost, with numba (``core._binned``): one compiled pass over blocks
    of 2048 columns, reading X in its own dtype (no float64 copy): the max |x| of each
    column, then per value its part on bin 0's grid and a rest (4 float64 operations,
    2 more in a block with a value off the finest grid), the rests of 4 rows
    added exactly and split over bins 1 and 2 (2 per 4 rows); memory O(elements).
    Measured (2 shared cores, AVX-512, ratios taken in one process): 64 x 2**20 bf16
    values in ``engine.reduce``, ~2.6-3.5x the sequential bf16 fold (was 16-18x with
    numpy), ~5x numpy's in-place float32 row adds, the same on data spanning 2**+-43;
    10**5 x 16: ~0.3x the fold (was ~130x); 10**4 x 1000: ~3.2x (was ~45x; the fold
    takes 0.25 ns per value there, and binned reads each block twice from memory:
    too tall for the cache). Without numba: 10 float64 numpy operations per input,
    streamed row by row over blocks of 8192 elements (a Python loop over rows and
    blocks). The state (the 3 bin sums per element) is mergeable, so rows may also
    arrive in pieces. The cost is flat in the data's exponent range, unlike the exact
    oracle's (~7x the fold on N(0,1) data, ~90x on data spanning 2**+-43).

    Special values: a column with NaN, or +Inf and -Inf, gives NaN; one sign of Inf
    gives that Inf (NaN for fp8_e4m3); a zero result is -0.0 only if every term is
    -0.0, in every mode (as ``exact``). Overflow of the rounded result follows the
    mode (``round_to``). Stochastic mode (needs ``rng``; not for fp64) rounds B up
    with probability exact to about 2**(p - 52).

    Args:
        X: shape (workers, elements) (or (workers,)).
        fmt: result format.
        mode: rounding of the single final rounding.
        rng: Generator or seed for stochastic mode.

    Returns:
        shape (elements,), float32 (float64 for fp64).

    Raises:
        InvalidArgument: bad shape or dtype, more than 2**26 rows, |x| >= 2**960,
            stochastic without ``rng`` or with fp64.

    >>> x = np.array([[2.0**-24], [1.0], [-1.0], [2.0**-24]], dtype=np.float32)
    >>> float(binned(x, "fp32")[0]) == float(binned(x[::-1], "fp32")[0]) == 2.0**-23
    True
    """
    A, f, m, gen = _binned_args(X, fmt, mode, rng)
    return _binned.binned_sum(A, f, m, gen)


def _binned_args(
    X: ArrayLike, fmt: str | Format, mode: str | Mode, rng: np.random.Generator | int | None
) -> tuple[NDArray[np.floating], Format, Mode, np.random.Generator | None]:
    """``binned``'s arguments checked: X as 2-D, the format, the mode and the Generator (stochastic only)."""
    f, m = get_format(fmt), get_mode(mode)
    A = _as_2d(X, "binned")
    n = A.shape[0]
    if n > BINNED_MAX_ROWS:
        raise InvalidArgument(
            f"binned sums at most 2**26 = {BINNED_MAX_ROWS} rows exactly per bin, got {n}; split the rows or use exact"
        )
    msg = "binned: stochastic rounding needs rng= and a format narrower than fp64"
    return A, f, m, _generator(m, rng, allowed=f.precision < 53, message=msg)


def exact(
    X: ArrayLike,
    fmt: str | Format,
    mode: str | Mode = "nearest_even",
    rng: np.random.Generator | int | None = None,
) -> NDArray[np.floating]:
    """The exact column sums rounded once onto ``fmt``: ``exact_sum(X).round(fmt, mode)``.

    Correctly rounded (the exact sum, one rounding in ``mode``) and therefore order
    independent: every permutation of the rows gives the same bits. Cost: the exact
    oracle (integer buckets per exponent, ~10-30x a float32 add per input) plus a
    Python-level rounding per column; use ``binned`` when that matters.

    Special values: NaN, or +Inf with -Inf, in a column gives NaN; one sign of Inf
    gives it (NaN for fp8_e4m3); an exact zero is -0.0 only if every term is -0.0, in
    every mode. Overflow follows the mode; subnormal results are kept.

    Args:
        X: shape (workers, elements) (or (workers,)).
        fmt: result format.
        mode: rounding mode (``stochastic`` needs ``rng``, a Generator or seed).
        rng: Generator or seed for stochastic mode.

    Returns:
        shape (elements,), float32 (float64 for fp64).

    >>> float(exact(np.array([1.0, 2.0**-9, 2.0**-9, 2.0**-9]), "bf16")[0])
    1.0078125
    """
    A = _as_2d(X, "exact")
    m = get_mode(mode)
    gen = np.random.default_rng(rng) if (m is Mode.STOCHASTIC and rng is not None) else None
    return exact_sum(A, axis=0).round(fmt, m.value, gen)
