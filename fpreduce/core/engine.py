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
from typing import TYPE_CHECKING, Union

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.core._fastpath import _fast_block, _fused_atomic, _gather_orders, _program
from fpreduce.core._reference import round_fraction
from fpreduce.core.formats import Format, get_format
from fpreduce.core.rounding import (
    Mode,
    _nearest32_inplace,
    _nearest_from_float32,
    _round_with_remainder,
    get_mode,
    round_to,
)
from fpreduce.plans import Plan, SegmentedPlan, Tree, fold, parse, sequential

__all__ = ["add_rounded", "reduce", "reduce_reference"]

if TYPE_CHECKING:
    from fpreduce.plans import PerElementPlan


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
            over = np.isinf(s) & np.isfinite(a) & np.isfinite(b)  # fp64 overflow: IEEE 7.4 per mode
            if np.any(over):
                pos = s > 0
                to_inf = {Mode.TOWARD_ZERO: np.zeros_like(pos), Mode.UP: pos, Mode.DOWN: ~pos}.get(
                    mode, np.ones_like(pos)
                )
                out = np.where(over & ~to_inf, np.copysign(f.max_finite, s), out)
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


_BLOCK = 1 << 15  # elements per block: a few rows of this stay in L2 while they are summed
_ALGORITHMS = ("plain", "kahan", "neumaier", "binned", "exact")
_AVERAGES = ("none", "after", "premultiply", "predivide")

AnyPlan = Union[Plan, SegmentedPlan, "PerElementPlan"]


def _check_dtype(A: np.ndarray) -> None:
    if A.dtype.kind != "f" and A.dtype.name != "bfloat16" and not A.dtype.name.startswith("float8"):
        raise InvalidArgument(f"X must be a float array of shape (workers, elements), got {A.dtype}")


def _prepare(X: ArrayLike, plan: AnyPlan | str, seed: int | None = None):  # type: ignore[no-untyped-def]
    A = np.asarray(X)
    _check_dtype(A)
    if A.ndim == 1:
        A = A[:, None]
    if A.ndim != 2:
        raise InvalidArgument(f"X must have shape (workers, elements), got shape {A.shape}")
    p = parse(plan, A.shape[0], seed=seed or 0) if isinstance(plan, str) else plan
    if p.n != A.shape[0]:
        raise InvalidArgument(f"plan has {p.n} workers but X has {A.shape[0]} rows")
    return A, p


def _shape_of(p: Plan) -> tuple[bytes, Tree, np.ndarray]:
    """(key, shape over slots 0..n-1 in leaf order, slot -> worker).

    A full binary tree is determined by its leaf depths in left-to-right order, so
    the depths serve as a hashable key (hashing deep nested tuples would recurse).
    """
    leaves = np.array(p.leaves(), dtype=np.intp)
    slot = np.empty_like(leaves)
    slot[leaves] = np.arange(leaves.size)
    shape = fold(p.root, lambda i: int(slot[i]), lambda a, b: (a, b))
    return p.depths()[leaves].tobytes(), shape, leaves


def _is_left_deep(shape: Tree) -> bool:
    node = shape
    while not isinstance(node, int):
        if not isinstance(node[1], int):
            return False
        node = node[0]
    return True


class _Arith:
    """Addition in one accumulator format and mode, on float32 (p <= 24, nearest) or float64."""

    def __init__(self, fa: Format, mode: Mode, rng: np.random.Generator | None) -> None:
        self.fa, self.mode, self.rng = fa, mode, rng
        self.fast = mode is Mode.NEAREST_EVEN and fa.precision <= 24
        self.dtype = np.dtype(np.float32 if self.fast else np.float64)
        self._programs: dict[int, tuple[Tree | None, tuple[list[tuple[int, int, int]], int, int]]] = {}
        self._scratch: list[np.ndarray] = []
        self._gather: np.ndarray | None = None

    def scratch(self, count: int, width: int) -> list[np.ndarray]:
        """``count`` float32 work arrays of ``width``, allocated once per reduction (no fresh pages per block)."""
        have = self._scratch
        if len(have) < count or (have and have[0].size < width):
            size = max(width, have[0].size if have else 0)
            have[:] = [np.empty(size, dtype=np.float32) for _ in range(max(count, len(have)))]
        return [a[:width] for a in have[:count]]

    def gather_buffer(self, n: int, width: int, dtype: np.dtype) -> np.ndarray:
        """An (n, width) array for gathered inputs, reused from block to block (no fresh pages)."""
        buf = self._gather
        if buf is None or buf.dtype != dtype or buf.shape[0] != n or buf.shape[1] < width:
            buf = self._gather = np.empty((n, width), dtype=dtype)
        return buf[:, :width]

    def program(self, shape: Tree | None, n: int) -> tuple[list[tuple[int, int, int]], int, int]:
        """``_program(shape, n)``, compiled once per shape object during one reduction."""
        hit = self._programs.get(id(shape))
        if hit is None or hit[0] is not shape:
            hit = (shape, _program(shape, n))
            self._programs[id(shape)] = hit
        return hit[1]

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self.fast:
            return _add_nearest32(a, b, self.fa)
        return add_rounded(a, b, self.fa, self.mode, self.rng)

    def add_into(self, acc: np.ndarray, b: np.ndarray, scratch: np.ndarray) -> None:
        """acc <- acc + b rounded, in place (scratch: a uint32/float16 buffer like acc)."""
        fa = self.fa
        if not self.fast:
            acc[...] = add_rounded(acc, b, fa, self.mode, self.rng)
            return
        np.add(acc, b, out=acc)
        if fa.precision == 24:
            return
        if fa.emin == -126:
            _nearest32_inplace(acc, fa, scratch)
        else:
            _nearest_small_inplace(acc, fa, scratch)


def _nearest_small_inplace(acc: NDArray[np.float32], f: Format, tmp: NDArray[np.uint32]) -> None:
    """Round float32 to nearest even onto a format of p <= 11 bits (fp16, fp8), in place.

    Magic-number rounding: with the quantum q of each value's binade in ``f`` (the
    subnormal quantum below 2**emin), M = 1.5 * 2**23 * q has ulp q in float32, so the
    float32 operations (x + M) - M round x to the q grid once, ties to even, exactly.
    A zero result gets x's sign bit back. Blocks holding a value of 2**emax or more
    (possible overflow), Inf or NaN go through ``round_to``. The caller's float32 sum
    double-rounds innocuously (24 >= 2p + 2).
    """
    bits = acc.view(np.uint32)
    t = tmp[: acc.size].reshape(acc.shape)
    np.bitwise_and(bits, np.uint32(0x7F800000), out=t)  # 2**e (0 for float32 subnormals)
    M = t.view(np.float32)
    if float(np.max(M)) >= 2.0**f.emax:  # possible overflow, Inf or NaN: the general path
        acc[...] = round_to(acc, f)
        return
    np.maximum(M, np.float32(2.0**f.emin), out=M)
    M *= np.float32(1.5 * 2.0 ** (23 - f.precision + 1))
    sign = bits & np.uint32(0x80000000)
    acc += M
    acc -= M
    bits |= sign  # only changes a zero result: (-tiny + M) - M is +0


class _Loader:
    """Makes blocks of X representable in the input format, then in the accumulator's."""

    def __init__(self, A: np.ndarray, fin: Format, fa: Format, mode: Mode, rng, dtype: np.dtype) -> None:  # type: ignore[no-untyped-def]
        self.A, self.fin, self.fa, self.mode, self.rng, self.dtype = A, fin, fa, mode, rng, dtype
        self.fits = fin.precision <= fa.precision and fin.emin >= fa.emin and fin.emax <= fa.emax
        self.native = A.dtype == np.float32 and fin.precision >= 24  # float32 values are fp32 values
        self.premul: tuple[str, float] | None = None

    def _representable(self, a: np.ndarray) -> bool:
        """Cheap exact test that float32 ``a`` already holds values of a bf16/tf32 input format."""
        if a.dtype != np.float32 or self.fin.emin != -126:
            return False
        t = np.bitwise_and(a.view(np.uint32), np.uint32((1 << (24 - self.fin.precision)) - 1))
        return not t.any()

    def __call__(self, a: np.ndarray) -> np.ndarray:
        """A new array (or a read-only view) of ``a``'s values in the accumulator domain."""
        if not self.native and not self._representable(a):
            if a.dtype != np.float32 and a.dtype != np.float64:
                a = a.astype(np.float32)  # float16 / bfloat16 / fp8 widen exactly
            if a.dtype == np.float32 and self.fin.precision <= 11 and self.fin.emin != -126:  # fp16, fp8
                a = a.copy()
                _nearest_small_inplace(a, self.fin, np.empty(a.size, dtype=np.uint32))
            else:
                a = round_to(a, self.fin)
            nan = np.isnan(a)
            if nan.any():
                a[nan] = np.nan  # canonical quiet NaN (see _nearest32_inplace)
        if self.premul is not None:
            a = _scale(a, self.premul, self.fin, self.mode, self.rng)
        if not self.fits:
            a = round_to(a, self.fa, self.mode, self.rng)
        return a if a.dtype == self.dtype else a.astype(self.dtype)


def reduce(
    X: ArrayLike,
    plan: AnyPlan | str,
    *,
    input: str | Format = "fp32",
    accumulate: str | Format = "fp32",
    rounding: str | Mode = "nearest_even",
    seed: int | np.random.Generator | None = None,
    algorithm: str = "plain",
    output: str | Format | None = None,
    average: str = "none",
    offset: int = 0,
    total: int | None = None,
) -> NDArray[np.floating]:
    """Sum the rows of ``X`` along ``plan``, rounding every partial sum.

    Args:
        X: shape (workers, elements) (or (workers,)); values are first rounded to
            ``input`` (nearest even) explicitly. NaN and ±Inf propagate as in IEEE.
        plan: a plan or its text (``"pairwise"``, ``"ring:nccl"``, ``"((0,1),2)"``).
        input: input format; accumulate: accumulator format (every partial sum is
            rounded to it, as in MPI, gloo and NCCL ring/tree, whose every hop rounds).
        rounding: rounding mode of every operation.
        seed: seed or Generator for stochastic rounding (and for ``atomic`` given as text).
        algorithm: ``plain`` (the plan's tree), ``kahan`` / ``neumaier`` (compensated,
            in the accumulator format, along the plan's leaf order), ``binned``
            (reproducible: order independent), ``exact`` (exact sum rounded once).
        output: round the final sum once to this format (default: ``accumulate``):
            ``accumulate="fp32", output="bf16"`` is "accumulate wide, round once"
            (NCCL NVLS / symmetric kernels for bf16).
        average: ``none``; ``after`` (sum, then divide by N in the accumulator format,
            then round once to ``output``);
            ``premultiply`` (every input times 1/N, both rounded to ``input`` first:
            NCCL's ncclAvg); ``predivide`` (every input divided by N in ``input``:
            PyTorch DDP's default gradient averaging).
        offset, total: ``X`` holds columns ``offset .. offset + X.shape[1] - 1`` of a
            vector of ``total`` elements (default: all of it). Plans whose trees vary
            over the elements (ring chunks, atomics) are laid out over ``total``, so
            reducing a long vector piece by piece gives the same bits as reducing it
            whole (stochastic rounding draws from ``seed`` per call).

    Returns:
        shape (elements,), float32 (float64 for an fp64 result).

    >>> import numpy as np
    >>> x = np.array([[1.0], [2.0**-8], [2.0**-8]])
    >>> float(reduce(x, "sequential", input="fp32", accumulate="bf16")[0])
    1.0
    >>> float(reduce(x, "((1,2),0)", accumulate="bf16")[0])
    1.0078125
    >>> float(reduce(x, "sequential", accumulate="fp32", output="bf16")[0])
    1.0078125
    """
    m = get_mode(rounding)
    if m is Mode.STOCHASTIC and seed is None:
        raise InvalidArgument("stochastic rounding needs seed= for reproducibility")
    plan_seed = seed if isinstance(seed, int | np.integer) else None
    A, p = _prepare(X, plan, None if plan_seed is None else int(plan_seed))
    fin, fa = get_format(input), get_format(accumulate)
    fo = fa if output is None else get_format(output)
    if algorithm not in _ALGORITHMS:
        raise unknown_name("algorithm", algorithm, _ALGORITHMS)
    if average not in _AVERAGES:
        raise unknown_name("average", average, _AVERAGES)
    rng = np.random.default_rng(seed) if m is Mode.STOCHASTIC else None
    n, nel = A.shape
    total = nel if total is None else int(total)
    if not (isinstance(offset, int | np.integer) and 0 <= offset <= total - nel):
        raise InvalidArgument(
            f"need 0 <= offset and offset + elements <= total, got offset={offset}, elements={nel}, total={total}"
        )
    ar = _Arith(fa, m, rng)
    load = _Loader(A, fin, fa, m, rng, ar.dtype)
    if average in ("premultiply", "predivide"):
        load.premul = (average, float(n))
    if algorithm in ("binned", "exact"):
        load.fits = True  # the exact sum of the input values, rounded once
        load.dtype = np.dtype(np.float64) if fin.precision == 53 else np.dtype(np.float32)
        out = _order_free(load(A), fa, m, rng, algorithm)
    else:
        out = np.empty(nel, dtype=ar.dtype)
        for lo, hi, cols, shape, rows in _pieces(p, nel, int(offset), total):
            dest = out[lo:hi] if cols is None else None
            blk = _evaluate(shape, rows, A, load, ar, algorithm, lo, hi, cols, dest)
            if blk is dest:
                pass  # computed in place
            elif cols is None:
                out[lo:hi] = blk
            else:
                out[cols] = blk
    res = np.asarray(out, dtype=fa.value_dtype)
    if average == "after":  # one IEEE division in the accumulator format
        res = _scale(res, ("after", float(n)), fa, m, rng)
    if fo is not fa:
        res = round_to(res, fo, m, rng)
    return np.asarray(res, dtype=fo.value_dtype)


def _pieces(p: AnyPlan, nel: int, offset: int = 0, total: int | None = None):  # type: ignore[no-untyped-def]
    """Yield (lo, hi, cols, shape, rows) blocks of work on columns 0..nel-1 of X.

    X's column j is element ``offset + j`` of a vector of ``total`` elements.

    ``rows`` is ``("view", perm)`` (leaf k is X[perm[k], lo:hi]) for a plan that is
    the same for every element, or ``("gather", Y)`` with Y (n, width) already in
    slot order: segments that share a tree shape are gathered side by side so one
    fold serves them all (ring all-reduce has one shape and n leaf orders), and a
    per-element plan yields ``("atomic", (plan, offset))``: ``_evaluate`` folds it in one
    numba pass when it can (``_fused_atomic``), else gathers every element's own order.
    """
    if isinstance(p, Plan):
        key, shape, perm = _shape_of(p)
        for lo in range(0, nel, _BLOCK):
            yield lo, min(nel, lo + _BLOCK), None, shape, ("view", perm)
        return
    if isinstance(p, SegmentedPlan):
        b = np.clip(p.bounds(nel if total is None else total) - offset, 0, nel)
        groups: dict[bytes, tuple[Tree, list[tuple[int, int, np.ndarray]]]] = {}
        P = p.chunk_orders
        if P is not None and p.shape is not None:  # one shape, a leaf order per chunk: one group
            key, shape, slots = _shape_of(p.shape)
            Pc = P[:, slots]  # chunk c: k-th leaf (left to right) is worker Pc[c, k]
            groups[key] = (shape, [(int(b[c]), int(b[c + 1]), Pc[c]) for c in range(len(P)) if b[c + 1] > b[c]])
        for c, t in enumerate(p.trees if P is None else ()):
            if b[c + 1] > b[c]:
                key, shape, perm = _shape_of(t)
                groups.setdefault(key, (shape, []))[1].append((int(b[c]), int(b[c + 1]), perm))
        for shape, segs in groups.values():
            batch: list[tuple[int, int, np.ndarray]] = []
            width = 0
            for lo, hi, perm in segs:
                if hi - lo >= _BLOCK // 4:  # wide enough alone: a view of X, no gather
                    for s in range(lo, hi, _BLOCK):
                        yield _gathered([(s, min(hi, s + _BLOCK), perm)], min(hi, s + _BLOCK) - s, shape)
                    continue
                while lo < hi:
                    take = min(hi - lo, _BLOCK - width)
                    batch.append((lo, lo + take, perm))
                    width += take
                    lo += take
                    if width == _BLOCK:
                        yield _gathered(batch, width, shape)
                        batch, width = [], 0
            if batch:
                yield _gathered(batch, width, shape)
        return
    for lo in range(0, nel, _BLOCK):  # a per-element plan (atomics)
        hi = min(nel, lo + _BLOCK)
        yield lo, hi, None, None, ("atomic", (p, offset))  # orders drawn in _evaluate, or fused there


def _gathered(batch, width: int, shape: Tree):  # type: ignore[no-untyped-def]
    cols = np.concatenate([np.arange(lo, hi) for lo, hi, _ in batch])
    lo0, hi0 = batch[0][0], batch[-1][1]
    contiguous = hi0 - lo0 == width and bool(np.all(np.diff(cols) == 1))
    return lo0, lo0 + width, (None if contiguous else cols), shape, ("segments", batch)


def _evaluate(shape, rows, A, load: _Loader, ar: _Arith, algorithm: str, lo: int, hi: int, cols, dest=None):  # type: ignore[no-untyped-def]
    kind, what = rows
    n = A.shape[0]
    width = hi - lo
    Y = None
    if kind == "atomic":
        p, offset = what
        if algorithm == "plain":
            res = _fused_atomic(p, A, lo, hi, offset, load, ar, dest)
            if res is not None:
                return res
        kind, what = "orders", p.orders(offset + lo, offset + hi)
    if kind == "orders":
        Y = _gather_orders(A, what, lo, hi, ar.gather_buffer(n, width, A.dtype))
        shape = None  # a left fold in each element's own order
    elif kind == "segments":
        if len(what) == 1:  # one segment: a view with its leaf order, no gather
            kind, what = "view", what[0][2]
        else:
            Y = ar.gather_buffer(n, width, A.dtype)
            a = 0
            ramp2 = np.concatenate([np.arange(n), np.arange(n)])
            for s_lo, s_hi, perm in what:
                b = a + s_hi - s_lo
                r = int(perm[0])
                if r and np.array_equal(perm, ramp2[r : r + n]):
                    Y[: n - r, a:b] = A[r:, s_lo:s_hi]  # a rotation (ring): two slice copies
                    Y[n - r :, a:b] = A[:r, s_lo:s_hi]
                else:
                    Y[:, a:b] = A[perm, s_lo:s_hi]
                a = b
    if algorithm == "plain":
        B, order = (A[:, lo:hi], what) if Y is None else (Y, None)
        res = _fast_block(shape, B, order, load, ar, dest)
        if res is not None:
            return res
    if Y is None:
        perm = what

        def leaf(k: int) -> np.ndarray:
            return load(A[perm[k], lo:hi])
    else:
        Yc = load(Y)

        def leaf(k: int) -> np.ndarray:
            return Yc[k]

    if algorithm in ("kahan", "neumaier"):
        from fpreduce.core.algorithms import compensated

        Z = np.stack([np.asarray(leaf(k), dtype=ar.dtype) for k in range(n)])
        return compensated(Z, ar.fa, ar.mode, kind=algorithm, rng=ar.rng)
    if shape is None or _is_left_deep(shape):
        acc = np.array(leaf(0), dtype=ar.dtype)  # a copy
        scratch = np.empty(width, dtype=np.uint32)
        with np.errstate(over="ignore", invalid="ignore"):
            for k in range(1, n):
                ar.add_into(acc, leaf(k), scratch)
        return acc
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(fold(shape, leaf, ar.add), dtype=ar.dtype)


def _two_product(a: NDArray[np.float64], b: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """p + e == a * b exactly (Dekker/Veltkamp; no FMA in numpy)."""
    p = a * b
    split = 134217729.0  # 2**27 + 1
    ca = split * a
    ahi = ca - (ca - a)
    alo = a - ahi
    cb = split * b
    bhi = cb - (cb - b)
    blo = b - bhi
    e = ((ahi * bhi - p) + ahi * blo + alo * bhi) + alo * blo
    return p, e


def _scale(a: np.ndarray, how: tuple[str, float], f: Format, mode: Mode, rng) -> np.ndarray:  # type: ignore[no-untyped-def]
    """One IEEE multiply by round(1/n) (``premultiply``) or divide by n, correctly rounded to f."""
    kind, n = how
    x = np.asarray(a, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if kind == "premultiply":
            c = float(np.ravel(round_to(np.array([1.0 / n]), f))[0])
            s, err = _two_product(x, c)
        else:
            s = x / n
            ph, pl = _two_product(s, n)
            err = ((x - ph) - pl) / n
        err = np.where(np.isfinite(s) & np.isfinite(err), err, 0.0)
        if mode is Mode.NEAREST_EVEN:
            out = s if f.precision == 53 else round_to(s, f)
        else:
            out = _round_with_remainder(s, err, f, mode, rng)
    return np.asarray(out, dtype=f.value_dtype if a.dtype != np.float64 else np.float64)


def _order_free(Xin: np.ndarray, fa: Format, mode: Mode, rng, algorithm: str) -> np.ndarray:  # type: ignore[no-untyped-def]
    from fpreduce.core import algorithms

    if algorithm == "exact":
        return algorithms.exact(Xin, fa, mode, rng)
    return algorithms.binned(Xin, fa, mode)


def _round_input(v: float, f: Format, m: Mode) -> float:
    if v == 0 or np.isnan(v):
        return v
    if np.isinf(v):
        return v if f.has_inf else float("nan")
    return round_fraction(Fraction(v), f, m.value)


def reduce_reference(
    X: ArrayLike,
    plan: AnyPlan | str,
    *,
    input: str | Format = "fp32",
    accumulate: str | Format = "fp32",
    rounding: str | Mode = "nearest_even",
    output: str | Format | None = None,
    average: str = "none",
) -> NDArray[np.floating]:
    """The slow, obvious reference of ``reduce`` (plain algorithm): exact rationals,
    one rounding per operation, a Python loop per element; for tests.

    Stochastic rounding is not supported here.
    """
    A, p = _prepare(X, plan)
    fin, fa = get_format(input), get_format(accumulate)
    fo = fa if output is None else get_format(output)
    m = get_mode(rounding)
    if m is Mode.STOCHASTIC:
        raise InvalidArgument("reduce_reference has no stochastic mode")
    Xi = round_to(A.astype(np.float64) if A.dtype.itemsize < 4 else A, fin)
    n, nel = Xi.shape
    out = np.empty(nel, dtype=np.float64)
    if isinstance(p, SegmentedPlan):
        b = p.bounds(nel)
        tree_of = [p.trees[int(np.searchsorted(b, j, side="right")) - 1].root for j in range(nel)]
    elif isinstance(p, Plan):
        tree_of = [p.root] * nel
    else:
        tree_of = [sequential(n, o).root for o in p.orders(0, nel)]

    def op(v: Fraction, f: Format) -> float:
        return round_fraction(v, f, m.value) if v != 0 else 0.0

    for j in range(nel):
        col = [float(v) for v in Xi[:, j]]
        if average == "premultiply":
            c = Fraction(round_fraction(Fraction(1, n), fin, "nearest_even"))
            col = [v if not np.isfinite(v) else np.copysign(op(Fraction(v) * c, fin), v) for v in col]
        elif average == "predivide":
            col = [v if not np.isfinite(v) else np.copysign(op(Fraction(v) / n, fin), v) for v in col]
        col = [_round_input(v, fa, m) for v in col]

        def add(a: float, b: float) -> float:
            if np.isinf(a) or np.isinf(b) or np.isnan(a) or np.isnan(b):
                return float(a) + float(b)  # Python floats: inf - inf is nan, no warning
            exact = Fraction(a) + Fraction(b)
            if exact == 0:
                neg = (np.signbit(a) and np.signbit(b)) or (
                    m is Mode.DOWN and not (a == 0 and b == 0 and not np.signbit(a) and not np.signbit(b))
                )
                return -0.0 if neg else 0.0
            return round_fraction(exact, fa, m.value)

        y = fold(tree_of[j], col.__getitem__, add)
        if average == "after" and np.isfinite(y):
            y = np.copysign(op(Fraction(y) / n, fa), y)
        if fo is not fa:
            y = _round_input(y, fo, m)
        out[j] = y
    return out.astype(fo.value_dtype)
