"""Primitives beyond one reduction: every partial sum, wide addends, stochastically rounded inputs, backward error.

* :func:`partial_sums`: all n prefix sums of a sequential fold, per column; row
  ``k - 1`` has the bits of ``reduce(X[:k], "sequential", ...)`` with the same
  options (the law tests/test_primitives.py checks), so one pass shows where a sum
  stagnates. Compiled with numba (:mod:`fpreduce.core._steps`), numpy otherwise.
* ``addends="wide"``: addends kept in the input format even when it is wider than the
  accumulator, each addition rounded once from the exact ``acc + x`` (``float acc;
  acc += x`` with ``x`` of a wider type, on hardware that rounds the mixed addition
  once; C itself computes ``(float)((double)acc + x)``, two roundings, which differ
  from one where the double sum lands on a midpoint of the float grid: ``1.0f +
  (2**-24 + 2**-76)`` is ``1 + 2**-23`` rounded once and ``1.0f`` through double).
* :func:`round_inputs` and ``input_rounding="stochastic"``: inputs rounded
  stochastically to the input format with a counter-based generator (splitmix64 of
  the key, the element and the row), so the bits depend on the seed alone, not on how
  the array is cut into pieces.
* :func:`stagnation`: where a column of partial sums last changed.

The generator is the engine's (:mod:`fpreduce.core._tall`): ``key`` is the first
``integers(0, 2**63)`` draw of ``np.random.default_rng(seed)``; addition ``t`` of a
left fold of element ``e`` draws counter ``t``; an input in row ``i`` draws counter
``2**61 + i`` (the second operand of :mod:`fpreduce.core.products`: ``2**61 + 2**40 + i``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from fpreduce.base import jit
from fpreduce.base import threads as pool
from fpreduce.base.dtypes import as_float_array
from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.base.fpflags import own_flags
from fpreduce.core import _kernels_round as kr
from fpreduce.core._steps import add_any_numpy, fold_rows, round_with_uniforms, uniforms
from fpreduce.core.arith import _Loader
from fpreduce.core.exact import ExactSum
from fpreduce.core.formats import Format, as_native, get_format, input_format
from fpreduce.core.options import Result, get_result
from fpreduce.core.rounding import Mode, get_mode

__all__ = ["INPUT_T", "partial_sums", "round_inputs", "stagnation", "stream_key"]

INPUT_T = 1 << 61  # counter of the input in row i: INPUT_T + i
Addends = Literal["accumulator", "wide"]
_ADDENDS: tuple[Addends, ...] = ("accumulator", "wide")
_ALGORITHMS = ("plain", "kahan", "neumaier", "exact")


def as_rows(X: ArrayLike, who: str) -> np.ndarray:
    """X as a 2-D float array of shape (terms, elements) (a 1-D array is one element)."""
    A = as_float_array(X, who + ": X must be a float array of shape (terms, elements), got {dtype}")
    if A.ndim == 1:
        A = A[:, None]
    if A.ndim != 2 or A.shape[0] == 0:
        raise InvalidArgument(f"{who}: X must have shape (terms >= 1, elements), got shape {A.shape}")
    return A


def stream_key(seed: int | np.random.Generator | None, needed: bool) -> tuple[int, np.random.Generator | None]:
    """(key, generator): the generator of ``seed`` and its first ``integers(0, 2**63)`` draw, as the engine's."""
    if not needed:
        return 0, None
    if seed is None:
        raise InvalidArgument("stochastic rounding needs seed= for reproducibility")
    rng = np.random.default_rng(seed)
    return int(rng.integers(0, 2**63)), rng


def _sr_inputs(
    A: np.ndarray,
    f: Format,
    key: int,
    offset: int,
    base: int = INPUT_T,
    dtype: DTypeLike = np.float64,
    threads: int | None = None,
) -> np.ndarray:
    """The counter-based stochastic rounding of ``A`` (float32 or float64 values) onto ``f``: row i draws
    ``base + i``; returned as ``dtype`` (float64, or float32 for a format whose values are float32's).

    Compiled (the core's bit rounder, ``_kernels_round.scale_kernel`` with no scaling: ``round_bits``' law,
    up iff ``u < (x - lo) / quantum``; columns split over ``threads``: None, every core), else numpy's
    :func:`round_with_uniforms` over the uniforms of every element: the same bits. 64 x 2**18 fp32
    reduced into bf16 stochastically with ``threads=1``: 61 -> 7.8-8.2 ns per addition (bf16 inputs 2.5).
    """
    n, d = A.shape
    A = np.ascontiguousarray(A, dtype=A.dtype if A.dtype in (np.float32, np.float64) else np.float64)
    if jit.enabled() and f.precision < 53 and A.size:
        out: np.ndarray = np.empty(A.shape, dtype=dtype)
        spans = pool.split(d, pool.resolve(threads, n * d))
        args = [(A, out, 1.0, kr.format_consts(f), np.uint64(key), offset, base, a, b) for a, b in spans]
        pool.run(kr.scale_kernel(3, 4), args)
        return out
    e = np.arange(offset, offset + d, dtype=np.uint64)[None, :]
    t = (np.uint64(base) + np.arange(n, dtype=np.uint64))[:, None]
    return round_with_uniforms(A.astype(np.float64), f, uniforms(key, e, t)).astype(dtype, copy=False)


@own_flags
def round_inputs(X: ArrayLike, fmt: str | Format, seed: int | np.random.Generator, *, offset: int = 0) -> NDArray:
    """Round ``X`` (terms, elements) stochastically onto ``fmt``, counter-based.

    Row i of column j (element ``offset + j``) rounds up with probability ``frac`` (its
    distance to the value below over the quantum) iff its uniform, drawn from
    splitmix64 of (key, element, ``2**61 + i``), is below ``frac``. The bits depend on
    the seed only: rounding ``X[:, a:b]`` with ``offset=a`` gives those columns of the
    whole, and ``X[:k]`` the first k rows. Overflow gives ±Inf; NaN, ±Inf and the sign
    of zero are kept. Returns float32 (float64 for fp64).

    >>> import numpy as np
    >>> x = np.full((1000, 1), 1 + 2.0**-10)
    >>> abs(float(np.mean(round_inputs(x, "bf16", 1) > 1)) - 1 / 8) < 0.05  # 2**-10 is 1/8 of a bf16 step
    True
    """
    f = get_format(fmt)
    A = as_rows(X, "round_inputs")
    key, _ = stream_key(seed, True)
    return _sr_inputs(A, f, key, int(offset), dtype=f.value_dtype).reshape(np.shape(X))


def _check(algorithm: str, addends: str) -> tuple[str, Addends]:
    if algorithm not in _ALGORITHMS:
        raise unknown_name("algorithm", algorithm, _ALGORITHMS)
    if addends not in _ADDENDS:
        raise unknown_name("addends", addends, _ADDENDS)
    if addends == "wide" and algorithm != "plain":
        raise InvalidArgument(f"addends='wide' needs algorithm='plain', got {algorithm!r}")
    return algorithm, addends  # type: ignore[return-value]


@own_flags
def partial_sums(
    X: ArrayLike,
    *,
    input: str | Format | None = None,
    accumulate: str | Format = "fp32",
    rounding: str | Mode = "nearest_even",
    seed: int | np.random.Generator | None = None,
    algorithm: str = "plain",
    addends: str = "accumulator",
    input_rounding: str | Mode = "nearest_even",
    offset: int = 0,
    order: ArrayLike | None = None,
    result: Result | str = "float",
) -> NDArray[np.floating]:
    """Every partial sum of the sequential fold of the rows of ``X``: shape (terms, elements).

    Row ``k - 1`` of the result is ``reduce(X[:k], "sequential", input=..., accumulate=...,
    rounding=..., seed=..., algorithm=...)`` bit for bit (stochastic rounding included:
    the fold's draws are counter-based, so a prefix draws what the whole draws).

    Args:
        X: shape (terms, elements) (or (terms,)).
        input, accumulate, rounding, seed, algorithm, result: as :func:`fpreduce.reduce`
            (``input`` defaults to X's own format; algorithm ``plain``, ``kahan``, ``neumaier`` (deterministic modes) or
            ``exact``: every prefix's exact sum rounded once).
        addends: ``accumulator`` (inputs converted to the accumulator format first, as
            ``reduce`` does) or ``wide`` (kept in the input format, each addition
            rounded once from the exact sum, as a mixed-precision adder does; C's
            ``float acc += double x`` rounds twice, see the module; the first term is
            rounded to the accumulator on its own).
        input_rounding: ``nearest_even``, or ``stochastic``: the inputs are rounded to
            ``input`` stochastically by :func:`round_inputs`' generator (needs ``seed``).
        offset: X's column j is element ``offset + j`` of the stochastic generators.
        order: the fold's leaf order (row ``order[k]`` is the k-th term; default 0..n-1):
            the last row is then ``reduce(X, plans.sequential(n, order), ...)``.

    Returns:
        float32 (float64 for an fp64 accumulator), shape (terms, elements); ``result="native"``:
        the accumulator's own dtype (a torch tensor for a torch X).

    >>> import numpy as np
    >>> h = partial_sums(1.0 / np.arange(1, 601), input="fp16", accumulate="fp16")[:, 0]
    >>> float(h[512]), float(h[-1])  # the fp16 harmonic series stops growing after 513 terms
    (7.0859375, 7.0859375)
    """
    fa, m, native = get_format(accumulate), get_mode(rounding), get_result(result) == "native"
    alg, kind = _check(algorithm, addends)
    sr_in = get_mode(input_rounding)
    if sr_in not in (Mode.NEAREST_EVEN, Mode.STOCHASTIC):
        raise InvalidArgument(f"input_rounding must be nearest_even or stochastic, got {sr_in.value!r}")
    A = as_rows(X, "partial_sums")
    fin = input_format(X, A, input)
    P = _prefixes(A, fin, fa, m, alg, kind, sr_in, seed, int(offset), order)
    return as_native(P, fa, X) if native else P  # type: ignore[no-any-return]


def _prefixes(
    A: np.ndarray,
    fin: Format,
    fa: Format,
    m: Mode,
    alg: str,
    kind: Addends,
    sr_in: Mode,
    seed: int | np.random.Generator | None,
    offset: int,
    order: ArrayLike | None,
) -> NDArray[np.floating]:
    """:func:`partial_sums` of the checked options."""
    key, rng = stream_key(seed, m is Mode.STOCHASTIC or sr_in is Mode.STOCHASTIC)
    if sr_in is Mode.STOCHASTIC:
        A = _sr_inputs(A, fin, key, int(offset))
    if alg == "exact":
        Xin = np.asarray(_Loader(A, fin, fin, Mode.NEAREST_EVEN, None, np.dtype(np.float64))(A))
        return _exact_prefixes(Xin[_permutation(order, A.shape[0])], fa, m).astype(fa.value_dtype)
    narrow = alg == "plain" and kind == "accumulator" and fa.precision <= 24  # addends are float32 values
    load = _Loader(A, fin, fa, m, rng, np.dtype(np.float32 if narrow else np.float64))
    if kind == "wide":
        load.fits = True  # addends stay in the input format
    Xl = load(A)[_permutation(order, A.shape[0])]
    if alg == "plain":
        sk = key if m is Mode.STOCHASTIC else 0
        return fold_rows(Xl, fa, m, sk, int(offset), narrow=kind == "accumulator", dtype=fa.value_dtype)
    if m is Mode.STOCHASTIC:
        raise InvalidArgument(f"partial_sums has no stochastic mode for algorithm {alg!r}")
    return _compensated_prefixes(np.asarray(Xl, dtype=np.float64), fa, m, alg).astype(fa.value_dtype)


def _permutation(order: ArrayLike | None, n: int) -> np.ndarray:
    """``order`` checked to be a permutation of 0..n-1 (default: the identity)."""
    if order is None:
        return np.arange(n)
    o = np.asarray(order)
    if o.shape != (n,) or o.dtype.kind not in "iu" or not np.array_equal(np.sort(o), np.arange(n)):
        raise InvalidArgument(f"order must be a permutation of 0..{n - 1}, got {o!r}")
    return o


def stagnation(P: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.floating]]:
    """Where each column of partial sums ``P`` (terms, elements) last changed, and its final value.

    Returns ``(n_last, value)``: the sum of the first ``n_last`` terms is the final sum
    and no later term changed it (``n_last + 1`` is the first term lost; ``n_last = n``
    when the last term still counted). Used on :func:`partial_sums` to see where a
    sum stagnates.

    >>> import numpy as np
    >>> stagnation(np.array([[1.0], [1.5], [2.0], [2.0], [2.0]]))
    (array([3]), array([2.]))
    """
    A = as_rows(P, "stagnation")
    moved = np.diff(A, axis=0) != 0
    moved &= ~(np.isnan(A[1:]) & np.isnan(A[:-1]))
    n = A.shape[0]
    last = np.where(moved.any(axis=0), n - np.argmax(moved[::-1], axis=0), 1)
    return last.astype(np.int64), A[-1].copy()


def _compensated_prefixes(X: np.ndarray, f: Format, m: Mode, kind: str) -> np.ndarray:
    """Every prefix of ``algorithms.compensated``'s Kahan or Neumaier sum (the same operations, in order)."""
    e = np.zeros(X.shape[1], dtype=np.uint64)

    def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return add_any_numpy(a, b, f, m, np.uint64(0), 0, e)

    out = np.empty_like(X)
    s, c = X[0].copy(), np.zeros(X.shape[1])
    out[0] = add(s, c) if kind == "neumaier" else s
    for k in range(1, X.shape[0]):
        x = X[k]
        if kind == "kahan":
            y = add(x, -c)
            t = add(s, y)
            c = add(add(t, -s), -y)
        else:
            t = add(s, x)
            keep = np.abs(s) >= np.abs(x)
            big, small = np.where(keep, s, x), np.where(keep, x, s)
            c = add(c, add(add(big, -t), small))
        s = t
        out[k] = add(s, c) if kind == "neumaier" else s
    return out


def _exact_prefixes(X: np.ndarray, f: Format, m: Mode) -> np.ndarray:
    """Every prefix's exact sum rounded once onto ``f`` (the oracle's rounding: ``ExactSum.round``)."""
    if m is Mode.STOCHASTIC:
        raise InvalidArgument("partial_sums has no stochastic mode for algorithm 'exact'")
    n, d = X.shape
    finite = np.isfinite(X)
    special = np.cumsum(np.where(finite, 0.0, X), axis=0)  # inf + -inf is NaN, as the oracle says
    negzero = np.logical_and.accumulate((X == 0) & np.signbit(X), axis=0)
    values: list[tuple[int, int]] = [(0, 0)] * (n * d)
    for j in range(d):
        acc = 0
        for k in range(n):
            x = float(X[k, j])
            if finite[k, j] and x != 0:
                num, den = x.as_integer_ratio()
                acc += num << (1074 - den.bit_length() + 1)
            values[k * d + j] = (acc, -1074)
    ex = ExactSum(values, special.reshape(-1), ~np.isfinite(special).reshape(-1), negzero.reshape(-1), (n, d))
    return np.asarray(ex.round(f, m.value), dtype=np.float64)
