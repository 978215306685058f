"""One IEEE addition of any two float64 values rounded once to a format, and the left folds built on it.

The engine adds two values of the accumulator format; the primitives
(:mod:`fpreduce.core.primitives`, :mod:`fpreduce.core.products`) also add a value
of a wider format (``float acc += x`` with a wider ``x``, rounded once) and exact
products (FMA). :func:`_add_any` is that addition: the exact sum ``a + x`` of two
float64 values, rounded once in any mode. The float64 sum ``s`` and its exact
remainder ``err`` (TwoSum) determine it, rounded by the engine's
:func:`fpreduce.core._kernels_round.round_bits`; to nearest, only a float64 sum
that is exactly a midpoint of the target grid needs ``err`` (no midpoint lies
strictly between the exact sum and its nearest float64), and is stepped one float64
ulp toward it first. A float64 overflow of finite operands overflows every format
below fp64 (IEEE 754 7.4 by mode). Values of two formats of at most 24 bits need
none of this (the engine's rules), and then the bits are the engine's, stochastic
draws included (the counter-based generator of :mod:`fpreduce.core._tall`: addition
``t`` of element ``e``).

:func:`fold_rows` is the left fold of the rows of a float64 array, every partial sum
kept or only the last, compiled with numba when :mod:`fpreduce.base.jit` allows and in
numpy otherwise (:func:`_fold_rows_numpy`, same bits; tests/test_primitives.py checks).
The first row enters as it is rounded to the format (its own rounding, counter
``FIRST_T``), so a row already in the format is unchanged. Addends already in the
format, to nearest (``narrow``), take the engine's kinds of addition (a float32 add,
Veltkamp splitting: see :mod:`fpreduce.core._tall`), the same bits faster. :func:`_tree_kernel` runs
the in-place program of any tree (:mod:`fpreduce.core.products`' rules; its numpy twin
is there).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fpreduce.base import counter, jit
from fpreduce.core import _kernels_round as kr
from fpreduce.core import _tall
from fpreduce.core._sr_numpy import _add_sr_numpy
from fpreduce.core.arith import add_rounded
from fpreduce.core.formats import Format
from fpreduce.core.grid import Kind, kind_of
from fpreduce.core.rounding import Mode, quantum_bits, round_to

FIRST_T = 1 << 62  # the counter of the first row's rounding (additions use t = 0, 1, ...)


def _overflow(neg, mode, maxf, has_inf):  # type: ignore[no-untyped-def]
    """What a finite sum beyond float64's range becomes (IEEE 754 7.4, as ``overflow_value``)."""
    big = math.inf if has_inf else math.nan
    if mode == 0 or mode == 4:
        mag = big
    elif mode == 1:
        mag = maxf
    elif mode == 2:
        mag = maxf if neg else big
    else:
        mag = big if neg else maxf
    return -mag if neg else mag


def _uniform(key, e, t):  # type: ignore[no-untyped-def]
    """The engine's draw for addition ``t`` of element ``e`` (:mod:`fpreduce.core._kernels_round`)."""
    return uniform(element_seed(key, e), t)


def _below_tiny(s, err, tiny, mode, u):  # type: ignore[no-untyped-def]
    """The exact sum ``s + err``, 0 < |s| < ``tiny`` (the smallest subnormal), rounded: by ``round_bits``' rules.

    Nearest: ``tiny`` above half of it (half: even, 0); stochastic: toward +Inf iff
    ``u < ((s - floor) + err) / tiny`` (``floor`` the exact sum rounded down), as ``round_bits``.
    """
    neg = s < 0
    mag, rem = (-s, -err) if neg else (s, err)
    if mode == 0:
        away = mag > 0.5 * tiny or (mag == 0.5 * tiny and rem > 0.0)
    elif mode == 4:
        away = (u < ((s + tiny) + err) / tiny) != neg if neg else u < (s + err) / tiny
    else:
        away = (mode == 2 and not neg) or (mode == 3 and neg)
    r = tiny if away else 0.0
    return -r if neg else r


def _add_any(a, x, grid, u):  # type: ignore[no-untyped-def]
    """``a + x`` (any float64 values) rounded once to the format and mode of ``grid`` (see the module)."""
    p, emin, maxf, mode, has_inf = grid.p, grid.emin, grid.maxf, grid.mode, grid.has_inf
    if p == 53:
        if mode == 0:
            return a + x
        return add_fp64(a, x, maxf, mode, u)
    s = a + x
    if s != s:
        return s
    if math.isinf(s):
        if math.isinf(a) or math.isinf(x):
            return s if has_inf else math.nan
        return _overflow(s < 0, mode, maxf, has_inf)
    if s == 0.0:  # exact (a float64 sum that rounds to zero is exact): IEEE 754 6.3's sign
        return signed_zero(a, x, mode)
    bb = s - a
    err = (a - (s - bb)) + (x - bb)
    if mode == 0 and err != 0.0:
        h = math.ldexp(s, p - max(math.frexp(s)[1] - 1, emin))  # s over half its quantum: exact
        if h == math.floor(h) and math.floor(h * 0.5) * 2.0 != h:  # a midpoint: the remainder decides
            s = np.nextafter(s, math.inf if err > 0 else -math.inf)
    tiny = math.ldexp(1.0, emin - p + 1)  # the smallest subnormal
    if abs(s) < tiny:  # wide addends only (round_bits reads at most 52 discarded bits): 0 or +-tiny
        return _below_tiny(s, err, tiny, mode, u)
    return round_bits(s, err, 53 - p, emin + 1023, maxf, math.inf if has_inf else math.nan, mode, u)


def _step(a, x, kind, grid, key, t, e):  # type: ignore[no-untyped-def]
    """One addition: the engine's kinds (``_tall``) for addends of the format to nearest, else ``_add_any``.

    Kind 0: the native float32 (fp32) or float64 (fp64) add. Kinds 1 (bf16, tf32) and 2
    (fp16, fp8): the float32 sum rounded by Veltkamp splitting with ``grid.sigma``; kind 2 keeps
    the sum below 2**emin (``grid.tiny``: exact there) and overflows beyond its largest
    value (±Inf, ±NaN without Inf); bf16's NaN from an Inf operand or a sum beyond
    Veltkamp's range takes the exact path.
    """
    if kind == 0:
        if grid.p == 24:
            return np.float64(np.float32(a) + np.float32(x))
        return a + x
    if kind == 1 or kind == 2:
        s32 = np.float32(a) + np.float32(x)
        c = s32 * np.float32(grid.sigma)
        r = np.float64(c - (c - s32))
        if kind == 2:
            if abs(s32) < grid.tiny:
                r = np.float64(s32)
            if not abs(r) <= grid.maxf:
                r = np.float64(s32) if s32 != s32 else math.copysign(math.inf if grid.has_inf else math.nan, s32)
            return r
        if r == r or a != a or x != x:
            return r
    u = _uniform(key, e, t) if grid.mode == 4 else 0.0
    return _add_any(a, x, grid, u)


def _fold_kernel(X, first, out, keep, kind, grid, key, e0):  # type: ignore[no-untyped-def]
    """The left fold of the rows of X (float32 or float64): out[k] (keep) or out[0] (not) <- partial sum k."""
    n, d = X.shape
    acc = np.empty(d)
    for j in range(d):
        x = first[j]
        u = _uniform(key, e0 + j, FIRST_T) if grid.mode == 4 else 0.0
        acc[j] = _add_any(x, math.copysign(0.0, x), grid, u)
        out[0, j] = acc[j]
    for k in range(1, n):
        for j in range(d):
            acc[j] = _step(acc[j], X[k, j], kind, grid, key, k - 1, e0 + j)
        if keep:
            for j in range(d):
                out[k, j] = acc[j]
    if not keep:
        for j in range(d):
            out[0, j] = acc[j]


def _tree_kernel(L, ops, root, out, bufs, grid, key, e0):  # type: ignore[no-untyped-def]
    """out[j] <- the tree program ``ops`` over the leaves ``L[:, j]`` (products.py's rules: a node of two
    leaves rounds its left leaf alone first, counter ``FIRST_T + leaf``), column by column."""
    for j in range(L.shape[1]):
        e = e0 + j
        for t in range(ops.shape[0]):
            o, a, b = ops[t, 0], ops[t, 1], ops[t, 2]
            if a >= 0 and b >= 0:
                x = L[a, j]
                u = _uniform(key, e, FIRST_T + a) if grid.mode == 4 else 0.0
                x = _add_any(x, math.copysign(0.0, x), grid, u)
            else:
                x = L[a, j] if a >= 0 else bufs[-1 - a]
            y = L[b, j] if b >= 0 else bufs[-1 - b]
            u = _uniform(key, e, t) if grid.mode == 4 else 0.0
            bufs[-1 - o] = _add_any(x, y, grid, u)
        out[j] = bufs[-1 - root]


# the engine's rounding and generator (plain Python until the kernels compile, then numba functions)
round_bits: Any = kr.round_bits
add_fp64: Any = kr.add_fp64
signed_zero: Any = kr.signed_zero
uniform: Any = kr.uniform
element_seed: Any = kr.element_seed
_COMPILED: list[Callable[..., Any]] = []


@jit.serialized
def _kernel() -> Callable[..., Any] | None:
    """The compiled fold (its helpers compiled first, once), or None when the compiled kernels are off."""
    if not (jit.AVAILABLE and jit.enabled()):
        return None
    if not _COMPILED:
        _tall._compile_helpers()  # the engine's rounding and generator, as numba functions
        g = globals()
        for name in ("round_bits", "add_fp64", "signed_zero", "uniform", "element_seed"):
            g[name] = getattr(kr, name)
        helpers = ("_overflow", "_uniform", "_below_tiny", "_add_any", "_step")
        jit.compile_names(g, helpers, "partial sums and products", calls=set(helpers) - {"_step"})
        _COMPILED.append(jit.kernel(_fold_kernel, "partial sums and products"))
        _COMPILED.append(jit.kernel(_tree_kernel, "partial sums and products"))
    return _COMPILED[0]


def tree_kernel() -> Callable[..., Any] | None:
    """The compiled tree program (see :func:`_tree_kernel`), or None when the compiled kernels are off."""
    return _COMPILED[1] if _kernel() is not None else None


def add_any_numpy(
    a: np.ndarray, x: np.ndarray, f: Format, mode: Mode, key: np.uint64, t: int, e: np.ndarray
) -> np.ndarray:
    """:func:`_add_any` over arrays (float64), in numpy: the same bits (``e``: the elements, uint64)."""
    if mode is Mode.STOCHASTIC:
        return _add_sr_numpy(a, x, f, key, t, e)
    with np.errstate(over="ignore", invalid="ignore"):
        out = add_rounded(a, x, f, mode)
        if mode is not Mode.NEAREST_EVEN or f.precision == 53:
            return out
        s = a + x
        bb = s - a
        err = np.where(np.isfinite(s), (a - (s - bb)) + (x - bb), 0.0)
        if not err.any():
            return out
        half = quantum_bits(np.where(np.isfinite(s), s, 1.0), f).view(np.float64) / 2
        h = s / half  # exact: a power of two
        mid = (err != 0) & (h == np.floor(h)) & (np.fmod(h, 2.0) != 0)
        if mid.any():
            nudged = np.nextafter(s[mid], np.where(err[mid] > 0, np.inf, -np.inf))
            out[mid] = round_to(nudged, f)
    return out


def _fold_rows_numpy(X: np.ndarray, first: np.ndarray, out: np.ndarray, f: Format, mode: Mode, key, e0: int):  # type: ignore[no-untyped-def]
    """:func:`_fold_kernel` in numpy, row by row (vectorized over the columns)."""
    n, d = X.shape
    keep = out.shape[0] == n and n > 1
    e = np.arange(e0, e0 + d, dtype=np.uint64)
    acc = add_any_numpy(first, np.copysign(0.0, first), f, mode, key, FIRST_T, e)
    out[0] = acc
    for k in range(1, n):
        acc = add_any_numpy(acc, X[k].astype(np.float64), f, mode, key, k - 1, e)
        if keep:
            out[k] = acc
    out[-1] = acc


def fold_rows(
    X: np.ndarray,
    f: Format,
    mode: Mode,
    key: int = 0,
    offset: int = 0,
    *,
    keep: bool = True,
    first: np.ndarray | None = None,
    narrow: bool = False,
    dtype: np.dtype | type = np.float64,
) -> np.ndarray:
    """The left fold of the rows of ``X`` in ``f`` and ``mode``: every partial sum (n, d) or the last (1, d).

    ``X`` holds float32 or float64 values (any: wider than ``f`` is rounded once per
    addition; ``narrow``: every row after the first holds values of ``f``, and the
    engine's faster additions to nearest apply); ``first`` replaces row 0 (default
    ``X[0]``); column j is element ``offset + j`` of the stochastic generator seeded by
    ``key``. Returns ``dtype`` (float64, or float32 when it holds ``f``'s values).
    """
    X = np.ascontiguousarray(X, dtype=X.dtype if X.dtype in (np.float32, np.float64) else np.float64)
    n, d = X.shape
    first = np.ascontiguousarray(X[0] if first is None else first, dtype=np.float64)
    k = np.uint64(key)
    out: np.ndarray = np.empty((n if keep else 1, d), dtype=dtype)
    kern = _kernel()
    if kern is None:
        with np.errstate(over="ignore", invalid="ignore"):
            _fold_rows_numpy(X, first, out, f, mode, k, offset)
        return out
    with np.errstate(over="ignore", invalid="ignore"):
        kind, grid = kind_of(f, mode)
        if not (narrow and mode is Mode.NEAREST_EVEN):
            kind = Kind.BITS  # kind 3 and up: _add_any
        kern(X, first, out, keep, int(kind), grid, k, int(offset))
    return out


def uniforms(key: int, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The kernel's uniform of counter ``t`` of element ``e`` (uint64 arrays that broadcast), in numpy."""
    return counter.uniform_numpy(counter.draw_numpy(np.uint64(key), e), t)


def round_with_uniforms(x: np.ndarray, f: Format, u: np.ndarray) -> np.ndarray:
    """Float64 ``x`` stochastically rounded onto ``f`` with the given uniforms: up iff ``u < frac``.

    The rule of ``round_to(..., "stochastic")`` (``frac`` = the distance to the value below
    over the quantum, exact), with the draws supplied: overflow gives ±Inf (NaN for a
    format without Inf), NaN stays, ±Inf stays (NaN without Inf), signs of zero are kept.
    """
    x = np.asarray(x, dtype=np.float64)
    if f.precision == 53:
        return x.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        fin = np.isfinite(x)
        q = quantum_bits(np.where(fin, x, 1.0), f).view(np.float64)
        y = x / q  # exact
        lo = np.floor(y)
        r = np.copysign((lo + (u < (y - lo))) * q, x)
        big = np.inf if f.has_inf else np.nan
        r = np.where(np.abs(r) > f.max_finite, np.copysign(big, x), r)
        return np.where(fin, r, np.where(np.isnan(x) | f.has_inf, x, np.nan))
