"""Tall, narrow folds (one column, or a few): short dependent chains, for the engine's compiled fold.

A left fold of one column is a chain: each addition waits for the one before, so its
speed is the latency of one rounded addition, not its throughput. The folds of :func:`left_kernel`
keep on that chain only what depends on the running sum, for every format of at most
52 bits (bf16, tf32, fp16, fp8, fp32) in every mode:

* the sum ``v = s + x`` of two values of such a format, in float64, is almost always
  exact (unless their exponents are more than about ``53 - p`` apart). Then rounding it
  once to the format is integer work on its bits: with ``d = 53 - p`` discarded bits
  (the format's normal range: ``2**emin <= |v| <= max_finite``), toward zero keeps
  ``b & ~low``, up and down add ``low`` first on their side of zero, nearest even adds
  half a step less one plus the last kept bit, and stochastic rounding steps away from
  zero iff the 53 random bits ``U`` (or ``2**53 - 1 - U`` below zero) are below the
  discarded bits shifted to 53: exactly the law of :mod:`fpreduce.core._tall`
  (``u < ((s - lo) + err) / (hi - lo)`` with ``err = 0``, a fraction of 2**d).
  One column to nearest even (kinds 1 and 2: bf16, tf32, fp16, fp8) rounds the exact sum
  by Veltkamp's split instead (:func:`step`'s mode 5), its product ``v * (2**d + 1)`` one
  FMA from ``s``: three flops on the chain, where the bits' way moves the sum to the
  integer unit and back (one fp16 column: 5.8 -> 3.6 ns per addition). It is the same
  rounding, ties to even included (tests/test_chain.py, against the Fraction reference).
* whether ``v`` is exact (``v - s == x`` and ``v - x == s``), in range and of the sign of
  ``s`` is a branch the processor predicts; it leaves the chain. Anything else (an
  inexact sum, a zero, a subnormal, overflow, NaN, Inf) takes
  :func:`fpreduce.core._kernels_round.add_round`, the exact rounder: the same bits; but
  one column to nearest even (mode 5) takes a sum below 2**emin, a zero or a subnormal of
  the format, as it is (:func:`step`).
* the stochastic draw ``U`` depends only on the element seed and the addition index,
  so it is computed beside the chain.

Several columns (float32 inputs, every kind but fp64's 4): 2..7 columns run their
chains interleaved row by row (:func:`step`; nearest even kinds 0..2 by :func:`near`,
which vectorizes across the row), 8 and more a row at a time by the branch-free
:func:`fast` (a vector of columns), a row where some column is off the fast path
redone by :func:`step` for those columns. In a directed mode with the processor's
rounding (:mod:`fpreduce.core._hwround`), one or several columns of a format of p <= 24
bits and emin >= -126 run :func:`_hw_columns` instead: float32 additions in the mode,
each rounded once on its bits (``_narrow.add_hw``, overflow included), whatever the
data; :func:`pairwise_columns` does the same for bf16 and tf32 (:func:`hwadd`).
(:func:`step`'s fast path needs an exact float64 sum: a directed chain grows until its
addends are below its float64 ulp, and then took the exact rounder on about half its
additions, mispredicted: 10 ns per addition on one bf16 column in mode up, against
3.8-4.4 ns now.) The fp64 accumulator's chains stay in ``_tall._left_columns``.

:func:`pairwise_columns` folds each column along :func:`fpreduce.plans.pairwise`'s tree
without building it or its program of n ops: the tree's nodes at depth ``D`` are
contiguous blocks of ``c`` or ``c + 1`` leaves (``c = n // 2**D``, 32 <= c < 64 for
large n; the boundaries come from the same split rule, level by level, in numpy), each
block is folded by the small program of its size (every op writes its own slot and
the ops run level by level, so independent additions overlap; kinds 3 and 4 in float64,
a block's stochastic draws first, in a loop that vectorizes), and the blocks are merged as the perfect binary tree of
depth ``D`` above them, in post-order (after block i, ``ctz(i + 1)`` merges). Additions
are numbered in the tree's post-order, as stochastic rounding draws them. Every addition
is rounded as :func:`fpreduce.core._tall._add1` (``kind`` 0..4), kinds 3 (p <= 52) by the
exact-sum path above.

The kernel cache is keyed by a digest of the kernels' sources
(:func:`fpreduce.base.jit.source_digest`): an edit of ``_kernels_round.py``, whose functions are
inlined here, starts a new cache. The rounding functions are passed to the loops as arguments (LLVM
inlines them; numba's own inlining of 9..15 specialized loops compiled 2..4 times
slower). Compiled only: without numba the engine's numpy paths run (the same bits;
tests/test_chain.py compares the kernels with ``reduce_reference`` and the numpy
stochastic fold). Cold compile: the left folds a kernel per kind and mode (:func:`left_kernel`; a first bf16
column rounded up took 7.3 s of CPU with the helpers, 17.6 s when one kernel held every kind and mode), ~10 s
for :func:`pairwise_columns` (float32), ~6 s more for its float64 variant (fp64).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from fpreduce.base import counter, jit
from fpreduce.core import _hwround as hw
from fpreduce.core import _kernels_round as kr
from fpreduce.core import _narrow

_ABS = 0x7FFFFFFFFFFFFFFF
_U53 = (1 << 53) - 1
_BLOCK = 32  # leaves per block of the pairwise fold at least (and fewer than twice as many)


def consts(grid):  # type: ignore[no-untyped-def]
    """(d, low, 2**emin's bits, max_finite's bits, add_round's sh, eminb, maxf, big, has_inf, and split) of
    ``grid``: ``split = 2**d + 1`` when Veltkamp's split rounds the format's sums to nearest even (mode 5), else 0."""
    p = grid.p
    d = 53 - p
    has_inf = grid.has_inf
    big = np.inf if has_inf else np.nan
    tinyb = kr.f64_bits(np.float64(grid.tiny))
    maxb = kr.f64_bits(np.float64(grid.maxf))
    split = 2.0**d + 1.0  # Veltkamp's constant for mode 5: x * split exact for p <= 26 (x * 2**d, x apart)
    if p > 26 or not np.float64(grid.maxf) * split < np.inf:
        split = 0.0
    return (d, (1 << d) - 1, tinyb, maxb, 53 - p, grid.emin + 1023, grid.maxf, big, has_inf, split)


def draw(z1, t):  # type: ignore[no-untyped-def]
    """The 53 random bits of addition ``t`` of the element of seed ``z1`` (``counter.uniform`` times 2**53)."""
    return np.int64(counter.draw(z1, t) >> np.uint64(11))


def slow(s, x, mode, c, U):  # type: ignore[no-untyped-def]
    """``s + x`` rounded by the exact rounder ``kr.add_round`` (compiled once, called off the fast path)."""
    if s - s != 0.0 and x - x == 0.0:  # Inf or NaN plus a finite value (an overflowed chain): itself
        return s
    d, low, tinyb, maxb, sh, eminb, maxf, big, has_inf, split = c
    return kr.add_round(s, x, sh, eminb, maxf, big, has_inf, mode % 5, np.float64(U) * 2.0**-53)


def step(s, x, mode, c, U, chain=True):  # type: ignore[no-untyped-def]
    """``s + x`` (float64 values of a format of p <= 52 bits) rounded once in ``mode`` (U: its 53 random bits).

    Every mode adds ``A`` to the bits of the exact sum and clears the ``d`` low ones
    (a carry is the step away from zero); mode 5 (nearest even, as 0; p <= 26) rounds the
    exact sum ``v`` by Veltkamp's split instead, ``t - (t - v)`` with ``t = v * split``
    computed as ``fma(s, split, x * split)`` (``x * split`` is exact for p <= 26 and leaves the
    chain, so the chain is three flops; the bits' way moves the sum to the integer unit and
    back). On a ``chain``, ``A`` comes from the sign of
    ``s`` (the previous sum, known early) and a sum of another sign takes :func:`slow`;
    else from the sum's sign. :func:`slow` also takes inexact sums (``v - s != x`` or
    ``v - x != s``: by Fast2Sum's lemma one of them is exact, so an inexact sum fails
    one), zeros, subnormals, overflow, NaN and Inf; but in mode 5 a sum below 2**emin is
    the answer itself: ``s`` and ``x`` are values of the format (the engine loads inputs into
    it), multiples of its least subnormal 2**q, and so is their exact sum, which float64 holds
    (p <= 26) and which below 2**emin is a subnormal or zero of the format; a zero sum's
    sign is float64's to nearest, the format's. (Before, the exact rounder at every step: 10^5
    fp16 values of about 1e-7, every partial sum subnormal, took 14 ns per addition, now 3.9.)
    """
    d, low, tinyb, maxb = c[0], c[1], c[2], c[3]
    v = s + x
    b = kr.f64_bits(v)
    bs = kr.f64_bits(s) if chain else b
    neg = bs >> 63  # -1 below zero, else 0
    if mode == 2:
        A = low & ~neg
    elif mode == 3:
        A = low & neg
    elif mode == 4:
        A = low - ((U ^ (neg & _U53)) >> (53 - d))  # carries iff the discarded bits exceed U's top d
    else:
        A = (low >> 1) + ((b >> d) & 1) if mode == 0 else 0
    mag = b & _ABS
    ok = (v - s == x) & (v - x == s) & (np.uint64(mag - tinyb) <= np.uint64(maxb - tinyb))
    if chain and 2 <= mode <= 4:
        ok &= (b ^ bs) >= 0
    if ok and mode == 5:
        t = kr.fma(s, c[9], x * c[9])  # v * split, rounded once: v is s + x exactly here
        return t - (t - v)
    if ok:  # one predicted branch: off the chain
        return kr.bits_f64((b + A) & ~low)
    if mode == 5 and mag < tinyb:  # (exact: a multiple of 2**q below 2**emin <= 2**(q + 52))
        return v  # below 2**emin: a multiple of the least subnormal, so a value of the format (zeros: RN's sign)
    return slow(s, x, mode, c, U)


def _left_m(X, perm, j, mode, c, z1):  # type: ignore[no-untyped-def]
    ident = perm.size == 0  # rows in order
    s = np.float64(X[0 if ident else perm[0], j])
    for k in range(1, X.shape[0]):
        U = draw(z1, k - 1) if mode == 4 else np.int64(0)
        s = step(s, np.float64(X[k if ident else perm[k], j]), mode, c, U)
    return s


def _many_m(X, perm, out, add, kind, mode, grid, c, Z, S):  # type: ignore[no-untyped-def]
    """Every column's chain at once, interleaved (row by row: independent additions overlap)."""
    ident = perm.size == 0
    for g in range(X.shape[1]):
        S[g] = X[0 if ident else perm[0], g]
    for k in range(1, X.shape[0]):
        row = k if ident else perm[k]
        for g in range(X.shape[1]):
            U = draw(Z[g], k - 1) if mode == 4 else np.int64(0)
            S[g] = add(S[g], X[row, g], kind, mode, grid, c, U)
    for g in range(X.shape[1]):
        out[g] = S[g]


def _hw_m(X, perm, out, mode, L, sc, S, top, over):  # type: ignore[no-untyped-def]
    """Every column's chain at once by :func:`fpreduce.core._narrow.add_hw` (mode 1..3, the hardware's
    mode set by the caller) on the format scaled by ``sc`` (float32 values), overflow by ``top``, ``over``.

    One column's chain runs unclamped while its sums stay at or below ``top`` (the check a
    predicted branch beside the chain, not a select on it), then clamped from the first sum
    beyond; once the sum is Inf or NaN, only the non-finite inputs that follow can change it.
    One fp16 column in mode up, 10^5 normal values: 6.3 -> 3.0-4.0 ns per addition."""
    ident = perm.size == 0
    clamp = top != np.uint32(0x7F7FFFFF) & ~L  # a scaled format's own top (bf16, tf32: float32's)
    inv = np.float32(1.0) / sc
    if X.shape[1] == 1:  # one chain: its sum in a register (no store and reload per addition)
        v = np.float32(X[0 if ident else perm[0], 0]) * sc
        k = 1
        while k < X.shape[0]:  # unclamped while the sums stay below the top: the check a predicted branch
            r = _narrow.add_hw(v, np.float32(X[k if ident else perm[k], 0]) * sc, mode, L, top, over, False)
            if _narrow.f2u(r) & np.uint32(_narrow._ABS32) > top:
                break
            v = r
            k += 1
        for q in range(k, X.shape[0]):  # from the first sum beyond the top (an overflow, Inf, NaN): clamped
            x = np.float32(X[q if ident else perm[q], 0]) * sc
            if v - v != np.float32(0.0) and x - x == np.float32(0.0):
                continue  # Inf or NaN plus a finite value: itself, bit for bit (an overflowed chain skims the rest)
            v = _narrow.add_hw(v, x, mode, L, top, over, clamp)
        out[0] = v * inv
        return
    for g in range(X.shape[1]):
        S[g] = np.float32(X[0 if ident else perm[0], g]) * sc
    for k in range(1, X.shape[0]):
        row = k if ident else perm[k]
        for g in range(X.shape[1]):
            S[g] = _narrow.add_hw(S[g], np.float32(X[row, g]) * sc, mode, L, top, over, clamp)
    for g in range(X.shape[1]):
        out[g] = S[g] * inv


def _hw_columns(X, perm, out, grid):  # type: ignore[no-untyped-def]
    """Several columns of a format of p <= 24 bits, emin >= -126 in a directed mode, the hardware's
    mode set (``_narrow``'s kind 5, ``grid.hw``): every sum answered, overflow included."""
    mode = hw.code(5, grid)
    sc = np.float32(2.0 ** (-126 - grid.emin))  # the format on float32's grid (_narrow's scaling)
    L = np.uint32((1 << (24 - grid.p)) - 1)
    top, over = _narrow.hw_top(grid, sc)
    S = np.empty(X.shape[1], dtype=np.float32)
    hw.begin(mode)  # only additions and exact scalings until end
    if mode == 1:
        _hw_m(X, perm, out, 1, L, sc, S, top, over)
    elif mode == 2:
        _hw_m(X, perm, out, 2, L, sc, S, top, over)
    else:
        _hw_m(X, perm, out, 3, L, sc, S, top, over)
    hw.end(mode)


def fast(s, x, mode, c, U):  # type: ignore[no-untyped-def]
    """(the bits of :func:`step`'s fast result, whether it holds): branch free, so a row of them vectorizes."""
    d, low, tinyb, maxb = c[0], c[1], c[2], c[3]
    v = s + x
    b = kr.f64_bits(v)
    neg = b >> 63
    if mode == 2:
        A = low & ~neg
    elif mode == 3:
        A = low & neg
    elif mode == 4:
        A = low - ((U ^ (neg & _U53)) >> (53 - d))
    else:
        A = (low >> 1) + ((b >> d) & 1) if mode == 0 else 0
    ok = (v - s == x) & (v - x == s) & (np.uint64((b & _ABS) - tinyb) <= np.uint64(maxb - tinyb))
    stays = (s - s != 0.0) & (x - x == 0.0)  # Inf or NaN plus a finite value: itself
    return (s if stays else kr.bits_f64((b + A) & ~low)), ok | stays


def _rows_m(X, perm, out, mode, grid, c, Z, S, OK):  # type: ignore[no-untyped-def]
    """Every column's chain at once, a row at a time by :func:`fast` (vectorized across the columns);
    a row where some column's sum is not fast takes :func:`step` for those columns."""
    ident = perm.size == 0
    for g in range(X.shape[1]):
        S[g] = X[0 if ident else perm[0], g]
    for k in range(1, X.shape[0]):
        row = k if ident else perm[k]
        bad = False
        for g in range(X.shape[1]):
            s = S[g]
            U = draw(Z[g], k - 1) if mode == 4 else np.int64(0)
            r, ok = fast(s, np.float64(X[row, g]), mode, c, U)
            S[g] = r if ok else s
            OK[g] = ok
            bad |= not ok
        if bad:
            for g in range(X.shape[1]):
                if not OK[g]:
                    U = draw(Z[g], k - 1) if mode == 4 else np.int64(0)
                    S[g] = exact(S[g], np.float64(X[row, g]), 3, mode, grid, c, U)  # a call: compiled once
    for g in range(X.shape[1]):
        out[g] = S[g]


def left_kernel(kind: int, mode: int) -> Any:
    """The left folds of a few columns compiled for one ``kind`` and ``mode`` (kind 3's rounding mode; 0 for the
    others): ``kernel(X, perm, out, grid, key, e0)`` sets out[j] <- the left fold of column j of X (rows in the
    order ``perm``, empty: in order).

    One column (kinds 1..3: bf16, tf32, fp16 and fp8 nearest even, by :func:`step`'s mode 5,
    and every format of p <= 52 bits in any mode): its chain in a register, rounded by
    :func:`step`; in a directed mode with the processor's rounding, :func:`_hw_columns`. More
    columns (every kind but 4): the columns' chains interleaved, kinds 0..2 by :func:`near`,
    kind 3 by :func:`step` (2..7 columns) or a row at a time by :func:`fast` (8 and more: a
    vector). ``key``, ``e0``: the stochastic generator's key and the element of column 0.

    ``kind`` and ``mode`` are closure constants, by which numba prunes every other kind's and mode's loops before
    typing: a first use compiles its own (one kernel for all of them took 17.6 s of CPU for one bf16 column
    rounded up, on a cold cache), as ``_narrow._segs_kernel`` does for wide rows.
    """
    _setup()  # (the helpers: numba functions before a kernel compiles)
    if (kind, mode) not in _LEFT:

        def left_columns(X, perm, out, grid, key, e0):  # type: ignore[no-untyped-def]
            c = consts(grid)
            hwm = hw.code(kind, grid)
            narrow = kind == 3 and grid.p <= 24 and grid.emin >= -126
            if narrow and hw.code(5, grid) != 0:
                _hw_columns(X, perm, out, grid)
                return
            hw.begin(hwm)  # kind 0 in a directed mode: the native additions in the hardware's mode
            if X.shape[1] > 1:
                Z = np.empty(X.shape[1], dtype=np.uint64)
                for j in range(X.shape[1]):
                    Z[j] = kr.element_seed(key, e0 + j)
                S = np.empty(X.shape[1], dtype=X.dtype)  # kinds 0..2 add in X's dtype
                S64 = np.empty(X.shape[1], dtype=np.float64)
                OK = np.empty(X.shape[1], dtype=np.bool_)
                if kind < 3:  # (kind and mode are constants: each call below is one inlined loop)
                    _many_m(X, perm, out, near, kind, 0, grid, c, Z, S)
                elif X.shape[1] >= 8:  # a vector of columns (fewer: the scalar chains, their checks predicted)
                    _rows_m(X, perm, out, mode, grid, c, Z, S64, OK)
                else:
                    _many_m(X, perm, out, chained, 3, mode, grid, c, Z, S64)
                hw.end(hwm)
                return
            z1 = kr.element_seed(key, e0)
            if mode == 0 and c[9] != 0.0:
                out[0] = _left_m(X, perm, 0, 5, c, z1)
            else:
                out[0] = _left_m(X, perm, 0, mode, c, z1)
            hw.end(hwm)

        _LEFT[kind, mode] = jit.kernel(left_columns, f"column chains (kind {kind}, mode {mode})", 2.0)
    return _LEFT[kind, mode]


_LEFT: dict[tuple[int, int], Any] = {}


def chained(x, y, kind, mode, grid, c, U):  # type: ignore[no-untyped-def]
    """:func:`step` on a chain (x the running sum), as :func:`near`'s signature."""
    return step(np.float64(x), np.float64(y), mode, c, U, True)


def near(x, y, kind, mode, grid, c, U):  # type: ignore[no-untyped-def]
    """One nearest-even addition of kind 0..2 (``_tall._add1``'s: x, y in X's dtype; kind 2: fp16, fp8)."""
    if kind == 0:
        return x + y
    r = x + y  # float32
    cc = r * np.float32(grid.sigma)
    v = cc - (cc - r)  # (kind 2 below 2**emin: r, a multiple of the quantum under 2**(p-1) of them, has < p bits)
    if kind == 2 and not abs(v) <= np.float32(grid.maxf):
        v = r if r != r else np.float32(-c[7] if r < 0 else c[7])  # ±Inf, ±NaN (fp8_e4m3): consts' big
    return v


def hwadd(x, y, kind, mode, grid, c, U):  # type: ignore[no-untyped-def]
    """One addition of bf16 or tf32 (float32 values) in ``mode`` 1..3, the hardware's mode set (``_narrow.add_hw``)."""
    L = np.uint32((1 << (24 - grid.p)) - 1)
    return _narrow.add_hw(np.float32(x), np.float32(y), mode, L, L, L, False)


def exact(x, y, kind, mode, grid, c, U):  # type: ignore[no-untyped-def]
    """One addition of kind 3 (:func:`step`) or 4 (fp64: ``kr.add_fp64``); ``U`` its 53 random bits."""
    if kind == 3:
        return step(np.float64(x), np.float64(y), mode, c, U, False)
    return kr.add_fp64(np.float64(x), np.float64(y), grid.maxf, mode, np.float64(U) * 2.0**-53)


def _pairwise_m(X, j, bounds, progs, add, kind, mode, grid, c, z1, W, stack, D):  # type: ignore[no-untyped-def]
    """The pairwise fold of column j (see the module): blocks ``bounds``, their programs ``progs`` by size.

    A block's ops run level by level (independent additions side by side), each into its
    own slot and numbered by its place in the tree's post-order (``progs[.., q, 2]``); the
    stochastic draws of a block are computed first, in a loop of their own (``D``).
    """
    t, sp = 0, 0
    c0 = progs.shape[1] - 1  # progs[q] is the program of size c0 + q (q = 0, 1)
    for i in range(bounds.size - 1):
        lo, hi = bounds[i], bounds[i + 1]
        n = hi - lo
        for k in range(n):
            W[k] = X[lo + k, j]
        if mode == 4:
            for q in range(n - 1):
                D[q] = draw(z1, t + q)
        P = progs[n - c0]
        for e in range(n - 1):
            q = P[e, 2]
            W[n + q] = add(W[P[e, 0]], W[P[e, 1]], kind, mode, grid, c, D[q])
        t += n - 1
        v = W[2 * n - 2]
        r = i + 1
        while r % 2 == 0:  # the merges whose right subtree ends with block i
            sp -= 1
            v = add(stack[sp], v, kind, mode, grid, c, draw(z1, t) if mode == 4 else np.int64(0))
            t += 1
            r //= 2
        stack[sp] = v
        sp += 1
    return stack[0]


def pairwise_columns(X, out, kind, grid, key, e0, bounds, progs):  # type: ignore[no-untyped-def]
    """out[j] <- the pairwise fold of column j of X (kind, grid: ``_tall._kind``'s), one loop per mode."""
    c = consts(grid)
    mode = grid.mode
    W = np.empty(2 * progs.shape[1] + 2, dtype=X.dtype)  # nearest even kinds 0..2 add in X's dtype
    stack = np.empty(64, dtype=X.dtype)
    W64 = np.empty(W.size, dtype=np.float64)  # kinds 3 and 4 in float64 (no conversion per addition)
    stack64 = np.empty(64, dtype=np.float64)
    D = np.zeros(progs.shape[1], dtype=np.int64)  # a block's stochastic draws
    hwm = hw.code(kind, grid)
    if kind == 3 and grid.p <= 24 and grid.emin == -126:  # (X is float32: the accumulator's values fit)
        hwm = hw.code(5, grid)  # bf16, tf32 in a directed mode: float32 additions in the hardware's mode
    hw.begin(hwm)
    for j in range(X.shape[1]):
        z1 = kr.element_seed(key, e0 + j)
        if kind == 3 and hwm == 1:
            out[j] = _pairwise_m(X, j, bounds, progs, hwadd, 5, 1, grid, c, z1, W, stack, D)
        elif kind == 3 and hwm == 2:
            out[j] = _pairwise_m(X, j, bounds, progs, hwadd, 5, 2, grid, c, z1, W, stack, D)
        elif kind == 3 and hwm == 3:
            out[j] = _pairwise_m(X, j, bounds, progs, hwadd, 5, 3, grid, c, z1, W, stack, D)
        elif kind == 0:
            out[j] = _pairwise_m(X, j, bounds, progs, near, 0, 0, grid, c, z1, W, stack, D)
        elif kind == 1:
            out[j] = _pairwise_m(X, j, bounds, progs, near, 1, 0, grid, c, z1, W, stack, D)
        elif kind == 2:
            out[j] = _pairwise_m(X, j, bounds, progs, near, 2, 0, grid, c, z1, W, stack, D)
        elif kind == 4:  # fp64: the mode left a variable (less to compile)
            out[j] = _pairwise_m(X, j, bounds, progs, exact, 4, mode, grid, c, z1, W64, stack64, D)
        elif mode == 0:
            out[j] = _pairwise_m(X, j, bounds, progs, exact, 3, 0, grid, c, z1, W64, stack64, D)
        elif mode == 1:
            out[j] = _pairwise_m(X, j, bounds, progs, exact, 3, 1, grid, c, z1, W64, stack64, D)
        elif mode == 2:
            out[j] = _pairwise_m(X, j, bounds, progs, exact, 3, 2, grid, c, z1, W64, stack64, D)
        elif mode == 3:
            out[j] = _pairwise_m(X, j, bounds, progs, exact, 3, 3, grid, c, z1, W64, stack64, D)
        else:
            out[j] = _pairwise_m(X, j, bounds, progs, exact, 3, 4, grid, c, z1, W64, stack64, D)
    hw.end(hwm)


@functools.lru_cache(maxsize=64)
def _block_program(n: int) -> tuple[tuple[int, int, int], ...]:
    """The ops of ``pairwise(n)`` level by level: (slot a, slot b, q), q the op's place in the tree's post-order.

    Slots: leaves 0..n-1, op q writes slot n + q. Ops of one height run together (their
    operands are ready), in post-order within a height.
    """
    ops: list[tuple[int, int, int, int]] = []  # (height, a, b, q)

    def build(lo: int, hi: int) -> tuple[int, int]:
        if hi - lo == 1:
            return lo, 0
        mid = lo + (hi - lo + 1) // 2
        a, ha = build(lo, mid)
        b, hb = build(mid, hi)
        h = max(ha, hb) + 1
        ops.append((h, a, b, len(ops)))
        return n + len(ops) - 1, h

    build(0, n)
    return tuple((a, b, q) for _, a, b, q in sorted(ops))


def pairwise_blocks(n: int, block: int = _BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """(the boundaries of the nodes at the depth where they hold ``block`` .. 2 block - 1 leaves, their programs).

    The boundaries split ``[0, n)`` as :func:`fpreduce.plans.pairwise` does (the first
    half gets the extra leaf), level by level; the programs (shape (2, c + 1, 3), padded)
    are those of sizes ``c`` and ``c + 1``, ``c = n // 2**D`` (:func:`_block_program`). A tree of one leaf has
    one block of one leaf (its program empty: the result is slot ``2 * 1 - 2 = 0``).
    """
    depth = max(0, (n // block).bit_length() - 1)
    b = np.array([0, n], dtype=np.int64)
    for _ in range(depth):
        nb = np.empty(2 * b.size - 1, dtype=np.int64)
        nb[0::2] = b
        nb[1::2] = b[:-1] + (np.diff(b) + 1) // 2
        b = nb
    c = n >> depth
    progs = np.zeros((2, c + 1, 3), dtype=np.int64)
    for q in range(2):
        ops = _block_program(c + q)
        if ops:
            progs[q, : len(ops)] = ops
    return b, progs


_ENTRIES = ("pairwise_columns",)
_HELPERS = (
    "consts",
    "draw",
    "slow",
    "step",
    "fast",
    "_left_m",
    "_many_m",
    "_rows_m",
    "_hw_m",
    "_hw_columns",
    "near",
    "chained",
    "exact",
    "hwadd",
    "_pairwise_m",
)


@jit.serialized
def _setup() -> None:
    """Make the helpers of :func:`left_kernel` and :func:`pairwise_columns` numba functions, once (the caller
    checked that numba is enabled)."""
    g = globals()
    if isinstance(g["step"], type(_setup)):
        kr.compile_all()
        _narrow.compile_all()  # (and _hwround's)
        once = (*_ENTRIES, "slow", "near", "chained", "exact", "hwadd")  # the exact rounder compiled once, not inlined
        jit.compile_names(g, (*_HELPERS, *_ENTRIES), "column chains", calls=once)


def pairwise_kernel() -> Callable[..., Any]:
    """:func:`pairwise_columns` compiled by numba (the caller checked that it is enabled)."""
    _setup()
    return globals()["pairwise_columns"]  # type: ignore[no-any-return]
