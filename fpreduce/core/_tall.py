"""The engine's compiled fold: one plan for every element, any shape, every format, nearest and directed modes.

:func:`fold_plan` folds every column of the loaded inputs along one tree (a plan that
is the same for every element) in one numba pass, rows outer and columns inner,
so that shapes of many rows and few columns (10^5 x 1, 10^4 x 1000) cost a few
nanoseconds per addition instead of one numpy call per row. A left-deep tree
(``sequential`` and any leaf order of it) is a running sum per column; any other
tree runs the in-place program of :func:`fpreduce.core._fastpath._program` on
``log2(n)``-ish reused rows. Columns go in blocks of ``_WIDTH`` to ``_WIDE`` columns
(``_BUDGET`` elements in all the live rows, so they stay in L2). bf16 and tf32 inputs
of the row-block kernel are checked as each row is read (an OR of its bits), not in a
pass of their own; a block that fails is folded again from the loaded inputs.

Each addition is rounded once to the accumulator format, as IEEE 754 does (the
same rules as :mod:`fpreduce.core.arith`), by the kind :func:`fpreduce.core.grid.kind_of` picks
and from the numbers of its :class:`fpreduce.core.grid.Grid` (the kernels compare kinds as ints: numba
prunes the other kinds' loops by their literal values):

* ``kind 0``, ``Kind.NATIVE`` (fp32 or fp64 accumulator, nearest even): the native float32/float64 add.
* ``kind 1``, ``Kind.SPLIT`` (bf16, tf32: fp32's exponent range, nearest even): the float32 sum (an
  innocuous double rounding, 24 >= 2p + 2) rounded by Veltkamp splitting
  ``c = s * (2**(24-p) + 1); s <- c - (c - s)`` (exact nearest even for normal and
  subnormal float32, see ``_fastpath._VELTKAMP_P``). Sums beyond its range (about
  2**112) and Inf become NaN, so a block whose result holds a NaN is recomputed with
  ``kind 3``: same bits.
* ``kind 2``, ``Kind.SPLIT_SUB`` (fp16, fp8, nearest even): the float32 sum; below 2**emin it is exact (a
  multiple of the subnormal quantum), above it Veltkamp on p bits; beyond the largest
  finite value it overflows to ±Inf (±NaN for fp8_e4m3; NaN stays NaN).
* ``kind 3``, ``Kind.BITS`` (other formats of p <= 52 bits in nearest even; every format in directed and
  stochastic modes): the float64 sum and its exact remainder (TwoSum), rounded on the
  sum's bits by :func:`fpreduce.core._kernels_round.add_round` (branch free: a row of
  it vectorizes; one loop per mode), in float32 for formats of p <= 23 bits
  (``add_round32``: the same bits).
* ``kind 4``, ``Kind.STEP64`` (fp64, directed and stochastic modes): TwoSum and a one-ulp step of the
  bit pattern in the mode's direction (:func:`fpreduce.core._kernels_round.add_fp64`).
* fp32 and fp64 in directed modes: ``kind 0``, native additions with the processor's
  rounding mode set by the kernel (:mod:`fpreduce.core._hwround`), and kind 5 below
  likewise (``grid.hw``); without it, kinds 3 and 4 (the same bits).
* ``kind 5``, ``Kind.LANES`` (fp32, bf16, tf32 in directed and stochastic modes, rows of a tree; and every
  format of p <= 24 bits in a left fold of wide rows): the same bits on float32 bit
  patterns in 32-bit lanes (:mod:`fpreduce.core._narrow`); a sum near the top, Inf or
  NaN is folded again with ``kind 3``. Left folds of wide rows in kinds 0, 1, 2 and 5
  run row by row in place (:func:`fpreduce.core._narrow.left_rows`).

Every addition of the row-block kernel writes a row other than its operands' (a spare
row, renamed), so that numba vectorizes it. (numba checks a cached kernel against its
own file only; the cache directory is keyed by a digest of the kernels' sources,
:func:`fpreduce.base.jit.source_digest`, so an edit of the inlined ``_kernels_round.py``
starts a new cache rather than loading a stale inlined copy.)

A few columns (up to ``routes.NARROW``, or ``routes.CHAIN`` for the sequential plan and directed or
stochastic pairwise, fp64's directed modes excepted) go to :mod:`fpreduce.core._chain`: left
folds of kinds 2 and 3 (rounded from the exact float64 sum's bits, the checks off the
dependent chain), of kinds 0 and 1 on several columns (the columns' chains
interleaved), and ``pairwise`` (blocks of contiguous leaves, no program of n ops); one
column of kind 0 or 1, fp64 (kind 4) and other trees stay in ``_left_columns``.

Stochastic rounding (mode 4, kinds 3 and 4) uses a counter-based generator, so its
bits depend on the seed alone, not on the shape, the chunking (``offset``), numba or
threads: addition ``t`` (the t-th addition of the tree in evaluation order; the
addition of leaf k of a left fold is t = k - 1) of element ``e`` (its index in the
whole vector) draws ``u = (splitmix64(splitmix64(key + (e+1) G) + (t+1) G) >> 11) / 2**53``
(``G = 0x9E3779B97F4A7C15``, ``key`` the first ``integers(0, 2**63)`` draw of
``np.random.default_rng(seed)``) and rounds the exact sum up to its upper neighbour
iff ``u < ((s - lo) + err) / (hi - lo)``: 53 random bits decide each rounding, and an
exactly representable fraction (any sum of two values of a format of <= 24 bits) is
the exact probability (fp64: the float64 sum steps toward its remainder iff
``u < |err| / gap``). Overflow follows ``overflow_value`` (±Inf). Without numba,
:func:`_fold_numpy_sr` gives the same bits; the engine's general path uses it for
plans whose tree varies over the elements (ring, atomic, ...), so they follow the same
law. Nearest-even folds of rows wider than
``_WIDTH`` into fp64 and fp16 are left to the engine's numpy fold, as fast there.

Signed zeros follow IEEE 754 6.3 (an exact zero sum of opposite-signed operands is
+0, except -0 in mode ``down``; -0 + -0 = -0), NaN propagates, Inf follows the
format (NaN for fp8_e4m3), overflow follows
:func:`fpreduce.core.rounding.overflow_value`. Without numba (or with
``FPREDUCE_NO_JIT=1``) :func:`fold_plan` returns None and the engine's numpy paths
run: tests/test_tall.py checks both against ``reduce_reference`` bit for bit.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from fpreduce.base import jit
from fpreduce.base.threads import run as threads_run
from fpreduce.base.threads import split
from fpreduce.core import _chain, _narrow, _rows64, routes
from fpreduce.core import _hwround as hw
from fpreduce.core import _kernels_round as kr
from fpreduce.core._fastpath import _program
from fpreduce.core._pairwise import pairwise_program
from fpreduce.core._sr_numpy import _fold_numpy_sr
from fpreduce.core.arith import _Arith, _Loader
from fpreduce.core.grid import Kind, kind_of
from fpreduce.core.rounding import Mode
from fpreduce.core.routes import Route as R
from fpreduce.plans import Tree, pairwise

_WIDTH = routes.WIDTH  # columns per block at least
_WIDE = 1 << 18  # and at most (long runs of each row of X keep the prefetcher streaming)
_BUDGET = 1 << 19  # elements in the live rows of a block, all together (2 MB of float32: L2)
_NO_BITS = np.zeros((0, 0), dtype=np.uint32)


def _veltkamp(s, sigma):  # type: ignore[no-untyped-def]
    c = s * sigma
    return c - (c - s)


def _add_rows(D, A, B, kind, grid, z, t, sa, sb):  # type: ignore[no-untyped-def]
    """D[j] <- A[j] + B[j] rounded, j < D.size (rows; ``kind`` and ``grid``: see the module; kind 5: A[j] * sa
    + B[j] * sb, a row of X read scaled onto the format's scaled grid, exactly)."""
    w = D.size
    if kind == 0:
        for j in range(w):
            D[j] = A[j] + B[j]
    elif kind == 1:
        sigma = np.float32(grid.sigma)
        for j in range(w):
            s = np.float32(A[j]) + np.float32(B[j])
            c = s * sigma
            D[j] = c - (c - s)
    elif kind == 2:
        sigma = np.float32(grid.sigma)
        tiny = np.float32(grid.tiny)
        maxf = np.float32(grid.maxf)
        big = np.float32(np.inf) if grid.has_inf else np.float32(np.nan)  # overflow: ±Inf, or ±NaN (fp8_e4m3)
        for j in range(w):
            s = np.float32(A[j]) + np.float32(B[j])
            c = s * sigma
            r = c - (c - s)
            if abs(s) < tiny:
                r = s
            if not abs(r) <= maxf:
                r = s if s != s else (-big if s < 0 else big)
            D[j] = r
    elif kind == 5:  # bf16, tf32 in directed and stochastic modes: float32 bits
        _narrow.rows5(D, A, B, grid, z, t, sa, sb)
    else:
        kr.rows_any(D, A, B, grid, z, t)


def _add1(s, x, kind, grid, z1, t):  # type: ignore[no-untyped-def]
    """One addition ``s + x`` rounded (a scalar ``_add_rows``)."""
    if kind == 0:
        return s + x
    if kind == 1:
        t = np.float32(s) + np.float32(x)
        c = t * np.float32(grid.sigma)
        return c - (c - t)
    if kind == 2:
        t = np.float32(s) + np.float32(x)
        c = t * np.float32(grid.sigma)
        r = c - (c - t)
        if abs(t) < np.float32(grid.tiny):
            r = t
        if not abs(r) <= np.float32(grid.maxf):
            big = np.float32(np.inf) if grid.has_inf else np.float32(np.nan)
            r = t if t != t else (-big if t < 0 else big)
        return r
    v = kr.uniform(z1, t) if grid.mode == 4 else 0.0
    if kind == 3:
        big = np.inf if grid.has_inf else np.nan
        sh, eminb = 53 - grid.p, grid.emin + 1023
        return kr.add_round(np.float64(s), np.float64(x), sh, eminb, grid.maxf, big, grid.has_inf, grid.mode, v)
    return kr.add_fp64(np.float64(s), np.float64(x), grid.maxf, grid.mode, v)


def _left_k0(X, perm, j):  # type: ignore[no-untyped-def]
    ident = perm.size == 0  # rows in order
    s = X[0 if ident else perm[0], j]
    for k in range(1, X.shape[0]):
        s = s + X[k if ident else perm[k], j]
    return s


def _left_k1(X, perm, j, sigma):  # type: ignore[no-untyped-def]
    ident = perm.size == 0
    s = X[0 if ident else perm[0], j]
    for k in range(1, X.shape[0]):
        t = s + X[k if ident else perm[k], j]
        c = t * sigma
        s = c - (c - t)
    return s


def _left_any(X, perm, j, kind, grid, z1):  # type: ignore[no-untyped-def]
    ident = perm.size == 0
    s = np.float64(X[0 if ident else perm[0], j])
    for k in range(1, X.shape[0]):
        s = np.float64(_add1(s, X[k if ident else perm[k], j], kind, grid, z1, k - 1))
    return s


def _any_bits(bits, mask):  # type: ignore[no-untyped-def]
    """Whether some ``bits[i] & mask`` is nonzero (one pass, no temporary)."""
    acc = np.uint32(0)
    for i in range(bits.size):
        acc |= bits[i]
    return (acc & mask) != 0


def _all_in(x, scale, L, maxf, how):  # type: ignore[no-untyped-def]
    """Whether every float32 ``x[i]`` is a finite value of a format of emin > -126 (fp16, fp8; NaN and Inf
    fail: the loader handles them): one branch-free pass of a check of :mod:`fpreduce.core._narrow`, the same
    answer by each: ``how`` 1 :func:`grid_bits` (a steady ~0.45 ns per element), 2 :func:`fp16_flags` (fp16's,
    on float32 normals), 0 :func:`grid_flags` (~0.25 ns per element, but a microcode assist, ~10 ns, on each of
    the format's subnormals)."""
    bad = np.uint32(0)
    if how == 1:
        for i in range(x.size):
            bad |= _narrow.grid_bits(x[i], scale, L, maxf)
    elif how == 2:
        for i in range(x.size):
            bad |= _narrow.fp16_flags(x[i])
    else:
        for i in range(x.size):
            bad |= _narrow.grid_flags(x[i], scale, L, maxf)
    return bad == 0


def _left_columns(X, perm, ops, root, out, kind, grid, key, e0):  # type: ignore[no-untyped-def]
    """out[j] <- the left fold of column j of X in the order ``perm`` (empty: rows in order), a register each;
    with ``ops``, the program's fold of column j on scalar registers (one scalar addition per op)."""
    regs = np.zeros(max(-ops[:, 0].min(), 1) if ops.shape[0] > 0 else 1, dtype=X.dtype)  # the format's values
    sigma = np.float32(grid.sigma)  # kind 1 (bf16, tf32): X is float32
    hwm = hw.code(kind, grid)
    hw.begin(hwm)  # kind 0 in a directed mode: the native additions in the hardware's mode
    for j in range(X.shape[1]):
        if ops.shape[0] > 0:
            z1 = kr.element_seed(key, e0 + j)
            for t in range(ops.shape[0]):
                o, a, b = ops[t, 0], ops[t, 1], ops[t, 2]
                x = X[a, j] if a >= 0 else regs[-1 - a]  # in X's dtype: kind 0 adds in float32 for fp32
                y = X[b, j] if b >= 0 else regs[-1 - b]
                if kind == 0:
                    regs[-1 - o] = x + y
                elif kind == 1:
                    regs[-1 - o] = _veltkamp(x + y, sigma)
                else:
                    regs[-1 - o] = _add1(x, y, kind, grid, z1, t)
            out[j] = regs[-1 - root]
        elif kind == 0:
            out[j] = _left_k0(X, perm, j)
        elif kind == 1:
            out[j] = _left_k1(X, perm, j, np.float32(grid.sigma))
        elif kind == 2:
            out[j] = _left_any(X, perm, j, kind, grid, 0)
        else:
            out[j] = kr.left_any(X, perm, j, grid, kr.element_seed(key, e0 + j))
    hw.end(hwm)


def _fold_kernel(X, perm, ops, root, out, bufs, kind, grid, key, e0, Xb, xs, c0, c1):  # type: ignore[no-untyped-def]
    """out[j] <- the fold of column j of X along ``ops`` (or a left fold in ``perm`` when ops is empty), for the
    columns ``c0 <= j < c1`` (a thread's: each thread its own ``bufs``).

    Kind 5 reads X's values times ``xs`` (fp16, fp8: the scaled format; 1 otherwise).

    Every addition writes a row other than its operands' (the spare row of ``bufs``, then
    renamed through ``phys``), so the compiler vectorizes it without an overlap check failing.
    Returns the OR of the bit patterns ``Xb`` (X viewed as uint32, or empty: 0) of the
    rows read, gathered while each row is in cache (the caller's input check).
    """
    seen = np.uint32(0)
    n, m = X.shape[0], c1
    W = bufs.shape[1]
    one = np.float32(1.0)
    spare = bufs.shape[0] - 1
    phys = np.arange(bufs.shape[0])  # buffer i lives in row phys[i]; row phys[spare] is free
    hwm = hw.code(kind, grid)
    hw.begin(hwm)  # kinds 0 and 5 in a directed mode: the hardware rounds the additions
    z = np.zeros(W if grid.mode == 4 else 0, dtype=np.uint64)  # the block's element seeds (stochastic)
    for lo in range(c0, m, W):
        w = min(W, m - lo)
        for j in range(min(z.size, w)):
            z[j] = kr.element_seed(key, e0 + lo + j)
        if ops.shape[0] == 0:  # left fold: the running sum alternates between two rows
            r0 = perm[0]
            for j in range(w):
                bufs[0, j] = X[r0, lo + j] * xs
            for k in range(n):
                if k > 0:
                    row = X[perm[k], lo : lo + w]
                    _add_rows(bufs[k % 2, :w], bufs[1 - k % 2, :w], row, kind, grid, z, k - 1, one, xs)
                if Xb.shape[0] > 0:
                    seen |= _or_row(Xb[perm[k], lo : lo + w])
            res = (n - 1) % 2
        else:
            for t in range(ops.shape[0]):
                o, a, b = ops[t, 0], ops[t, 1], ops[t, 2]
                d = phys[spare]
                A = X[perm[a], lo : lo + w] if a >= 0 else bufs[phys[-1 - a], :w]  # a row of X, or a partial sum
                B = X[perm[b], lo : lo + w] if b >= 0 else bufs[phys[-1 - b], :w]
                _add_rows(bufs[d, :w], A, B, kind, grid, z, t, xs if a >= 0 else one, xs if b >= 0 else one)
                phys[spare], phys[-1 - o] = phys[-1 - o], d
            res = phys[-1 - root]
            for k in range(n if Xb.shape[0] > 0 else 0):
                seen |= _or_row(Xb[k, lo : lo + w])
        for j in range(w):
            out[lo + j] = bufs[res, j]
    hw.end(hwm)
    return seen


def _or_row(bits):  # type: ignore[no-untyped-def]
    acc = np.uint32(0)
    for i in range(bits.size):
        acc |= bits[i]
    return acc


_HELPERS = (
    "_veltkamp",
    "_add_rows",
    "_add1",
    "_left_k0",
    "_left_k1",
    "_left_any",
    "_or_row",
)
_COMPILED = tuple(jit.jit(f) for f in (_fold_kernel, _left_columns, _any_bits, _all_in))


def _kernels() -> tuple[Callable[..., Any], ...]:
    """The compiled (fold by row blocks, fold by column, any low bit, all fp16), helpers compiled first."""
    _compile_helpers()
    return tuple(k for k in _COMPILED if k is not None)


@jit.serialized
def _compile_helpers() -> None:
    """Make the kernel's helpers numba functions (numba resolves the kernel's globals when it compiles it)."""
    g = globals()
    if not isinstance(g["_add_rows"], type(_compile_helpers)):
        return
    kr.compile_all()
    _narrow.compile_all()
    # numba inlines the hot left folds (one call site each); more would slow compiling
    jit.compile_names(g, _HELPERS, "the compiled fold", calls=set(_HELPERS) - {"_left_k0", "_left_k1", "_veltkamp"})


def decision(root: Tree | str | None, A: np.ndarray, load: _Loader, ar: _Arith) -> routes.Decision | None:
    """The route of the fold of ``A``'s rows along ``root`` (:func:`fpreduce.core.routes.tree_route`), or None."""
    case = routes.Case.of("plain", None, A, load, threads=ar.threads)
    return routes.tree_route(case, root, A.shape[0], A.shape[1])


def fold_plan(
    root: Tree | str | None,
    A: np.ndarray,
    load: _Loader,
    ar: _Arith,
    offset: int = 0,
    dec: routes.Decision | None = None,
) -> np.ndarray | None:
    """Every column of ``A`` folded along the tree ``root`` over its rows by the route ``dec``, or None.

    ``root`` None is ``sequential``, ``PAIRWISE`` the tree of ``plans.pairwise``
    (neither is built as a tree when the kernel runs). ``dec``: the decision of
    :func:`decision` (computed here when not given); None when it is None (no numba in
    a deterministic mode, a tree too large to compile, rows where numpy is as fast),
    or when the route refuses the data and its rerun is the engine's blocks.

    Column j is element ``offset + j`` (stochastic rounding draws by element, so a
    vector reduced piece by piece gives the bits of the whole). Stochastic rounding
    always runs here (compiled, or :func:`_fold_numpy_sr`: same bits). Inputs are
    loaded once (input format, then accumulator format, as the engine's ``_Loader``),
    kept in float32 when the accumulator's values fit in it.
    """
    dec = decision(root, A, load, ar) if dec is None else dec
    if dec is None:
        return None
    routes.note(dec.route)
    kind, grid = kind_of(ar.fa, ar.mode)
    n, fa = A.shape[0], ar.fa
    key = ar.sr_key() if ar.mode is Mode.STOCHASTIC else np.uint64(0)  # the first draw of the seed's generator
    if dec.route is R.FP64_ROWS:
        assert dec.order is not None
        res = _rows64.fold_fp64(A, dec.order if dec.order.size else np.arange(n), load, ar, grid, offset)
        if res is not None:
            return res  # fp64 on wide float32 rows: each added as read, no float64 copy
        return fold_plan(root, A, load, ar, offset, dec.inner) if dec.inner is not None else None
    if dec.route is R.SR_NUMPY:
        tree = pairwise(n).root if isinstance(root, str) else root  # the numpy stochastic fold takes the tree
        return _fold_numpy_sr(tree, dec.order, _load(A, load, ar)[0], fa, key, offset)
    if dec.route is R.SINGLE:
        return np.array(_load(A, load, ar)[0][0], dtype=np.float32 if fa.precision <= 24 else np.float64)
    left = dec.route in (R.CHAIN, R.CHAIN_PAIRWISE, R.COLUMNS)
    if dec.order is not None:
        perm, ops, base = dec.order, np.zeros((0, 3), dtype=np.int64), 0
    elif dec.route is R.CHAIN_PAIRWISE:  # few columns: _chain folds blocks of leaves (base -1)
        perm, ops, base = np.zeros(0, dtype=np.int64), np.zeros((0, 3), dtype=np.int64), -1
    elif isinstance(root, str):
        ops, _, base = pairwise_program(n)  # leaves are rows, the tree never built
        perm = np.arange(n, dtype=np.int64)
    else:
        assert root is not None
        prog, _, top = _program(root, n)  # leaves are rows
        perm, ops, base = np.arange(n, dtype=np.int64), np.array(prog, dtype=np.int64), top
    hws = kind == Kind.BITS and fa.precision <= 24 and fa.emin > -126 and hw.code(5, grid) != 0  # add_hw's scaled rows
    wide = dec.route is R.WIDE_LEFT and (kind == Kind.SPLIT_SUB or hws)  # _narrow's fold checks fp16 inputs as read
    X, low = _load(A, load, ar, lazy=not left and n > 1, lazy16=wide, words=dec.words)
    args = (perm, ops.reshape(-1, 3), base, grid, key, offset)
    out = _run(X, args, kind, dec, low)
    if out is None:  # some input needs rounding to the input format: load it, and fold again
        out = _run(_load(A, load, ar)[0], args, kind, dec, 0)
    return out


def _run(X: np.ndarray, args: tuple[Any, ...], kind: Kind, dec: routes.Decision, low: int) -> np.ndarray | None:
    """The compiled fold of X by the route ``dec`` (None if an input has one of the bits ``low`` set: not in
    the input format). ``kind``: the accumulator's rounding kind; ``dec.kind`` the route's own."""
    perm, ops, base, grid, key, offset = args
    m = X.shape[1]
    out = np.empty(m, dtype=X.dtype)  # X's dtype: one compiled kernel per dtype
    sc = xs = one = np.float32(1.0)
    left = dec.route in (R.CHAIN, R.CHAIN_PAIRWISE, R.COLUMNS)
    if not left:  # the row blocks' buffers (the left folds keep their sums in registers)
        nbuf = max(int(-ops[:, 0].min(initial=0)), 1) + 1  # and a spare row
        width = max(_WIDTH, min(_WIDE, _BUDGET // nbuf))  # long runs of each row (prefetch), the live rows in L2
        spans = split(m, dec.threads) if m > 0 else [(0, 0)]  # a thread's columns each, and its own buffers
        bufs = [np.empty((nbuf, min(width, max(b - a, 1))), dtype=X.dtype) for a, b in spans]
    if dec.route is R.WIDE_LEFT:
        assert dec.kind is not None
        got, done = _narrow.fold_left(X, perm, dec.kind, grid, key, offset, low, threads=dec.threads)
        if got is None or done or X.dtype.itemsize <= 2:
            return got if done else None  # a sum beyond the kernel's range: the exact scalar path, below (X's
            # words loaded into float32 first: the caller's rerun)
        routes.note(R.ROW_BLOCKS)
        kind, low = Kind.BITS, 0
    elif dec.kind == Kind.LANES and _narrow.rows_kind(grid):
        kind = Kind.LANES  # the rows of _narrow (bf16, tf32; directed and stochastic), NaN where it does not answer
    elif dec.kind == Kind.LANES and low == 0 and (sp := _narrow.scaled(grid)) is not None:
        sc = xs = np.float32(sp[0])  # fp16, fp8: the scaled format's rows, inputs scaled as read
        grid, kind = sp[1], Kind.LANES
    Xb = X.view(np.uint32) if low else _NO_BITS
    with np.errstate(over="ignore", invalid="ignore"):
        for k in (
            kind,
            Kind.BITS,
        ):  # SPLIT or LANES then, if a NaN came out, the exact scalar path (Inf/NaN, beyond range)
            if left:
                _fold_left(X, perm, ops, base, out, int(k), grid, key, offset, dec.route)
            else:
                X, xs = (X * xs, one) if k == Kind.BITS and xs != one else (X, xs)  # (the scalar path: X as it is)
                parts = zip(bufs, spans, strict=True)
                calls = [(X, perm, ops, base, out, b, int(k), grid, key, offset, Xb, xs, *c) for b, c in parts]
                seen = functools.reduce(operator.or_, threads_run(_kernels()[0], calls))
                if seen & low:
                    return None
                Xb = _NO_BITS
            if (
                k not in (Kind.SPLIT, Kind.LANES) or hw.code(int(k), grid) != 0 or not np.isnan(out.max(initial=0.0))
            ):  # (add_hw: every sum)
                break
            routes.note(dec.rerun or R.ROW_BLOCKS)
    return np.multiply(out, one / sc) if sc != one else out  # the scaled result scaled back, exactly


def _fold_left(X, perm, ops, base, out, kind, grid, key, offset, route):  # type: ignore[no-untyped-def]
    """A few columns by the kernel of ``route`` (the route table's choice, :func:`fpreduce.core.routes.tree_route`):
    ``CHAIN_PAIRWISE`` and ``CHAIN`` (float32 rows, a left fold) by :mod:`._chain`, ``COLUMNS`` (one fp32
    column, float64 rows, other trees) by :func:`_left_columns`."""
    if route is R.CHAIN_PAIRWISE:
        bounds, progs = _chain.pairwise_blocks(X.shape[0])
        _chain.pairwise_kernel()(X, out, kind, grid, key, offset, bounds, progs)
    elif route is R.CHAIN:
        assert X.dtype == np.float32  # (narrow accumulators load float32)
        assert ops.shape[0] == 0  # (a left fold: the rows in ``perm``)
        _chain.left_kernel(kind, int(grid.mode) if kind == 3 else 0)(X, perm, out, grid, key, offset)
    else:
        _kernels()[1](X, perm, ops, base, out, kind, grid, key, offset)


def _load(
    A: np.ndarray, load: _Loader, ar: _Arith, lazy: bool = False, lazy16: bool = False, words: bool = False
) -> tuple[np.ndarray, int]:
    """X in the accumulator's domain (float32 when its values fit: every format but fp64), and bits to check.

    With ``words`` (the route's: :attr:`fpreduce.core.routes.Case.words`), X's bf16 or fp16
    rows as they are, viewed as the integer words the left folds read (:data:`._narrow.WORDS`).

    float32 inputs that fit the accumulator are checked in one compiled pass (bf16,
    tf32: no low bit set; fp16, fp8: finite values of the format) and used as
    they are; anything else goes through the engine's ``_Loader``. With ``lazy``, bf16
    and tf32 inputs are not checked here but returned with the low bits that must be
    zero (the row-block kernel ORs the rows as it reads them: no extra pass); with
    ``lazy16``, fp16 inputs likewise, for :mod:`fpreduce.core._narrow`'s fp16 fold
    (``low`` = its ``FP16_CHECK``).
    """
    fin, fa = load.fin, ar.fa
    if words:
        return A.view(_narrow.WORDS[fin.name][0]), 0
    narrow = fa.precision <= 24  # accumulator values are float32 values
    compiled = jit.enabled() and _COMPILED[2] is not None
    if compiled and A.dtype == np.float32 and narrow and load.fits and load.premul is None and A.flags.c_contiguous:
        if fin.precision >= 24:
            return A, 0
        low = np.uint32((1 << (24 - fin.precision)) - 1)
        if fin.emin == -126 and lazy:
            return A, int(low)
        if fin.emin == -126 and not _kernels()[2](A.reshape(-1).view(np.uint32), low):
            return A, 0
        if fin.name == "fp16" and lazy16:
            return A, _narrow.FP16_CHECK
        if fin.emin > -126 and fin.max_finite <= np.finfo(np.float32).max:  # fp16, fp8: one compiled pass
            ln = _narrow.lanes(fin.precision, fin.emin, fin.max_finite)
            # a few columns or one row (not ``lazy``): a chain of ~4 ns per addition, to which the bits' check adds
            # nothing visible, while an assist per subnormal input tripled it; wide rows: a fold of ~0.4 ns per
            # addition, fp16's own check (no assists), fp8's grid_flags
            how = 1 if not lazy else 2 if fin.name == "fp16" else 0
            if _kernels()[3](A.reshape(-1), np.float32(ln.scale), ln.L, np.float32(fin.max_finite), how):
                return A, 0
    ldr = _Loader(A, fin, fa, ar.mode, ar.rng, np.dtype(np.float32 if narrow else np.float64))
    ldr.premul = load.premul
    return np.ascontiguousarray(ldr(A)), 0
