"""The proof that a column's float64 sum is exact, and the compiled scan that feeds it.

Used by :func:`fpreduce.core.exact.exact_sum`: columns whose float64 sum is proved exact (in
any order) skip the bucketed general path. With numba installed, one compiled pass
(:func:`_scan`) gathers the statistics the proof needs and the sum itself, and proves each block of
columns while its statistics are in L1 (:func:`_proved`); numpy needs four passes for the statistics,
more for the proof and one for the sum. On 64 x 2**16 bf16 values in float32 (the runner's chunk, two
threads), ``exact_sum_scan`` took 1.90 ms with the proof and the exact columns' assembly in numpy after
the scan, 1.17 ms with the proof in the scan (the scan alone 1.0-1.16 ms either way).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from fpreduce.base import threads
from fpreduce.base.jit import jit, jitable


def _scan_kernel(u, x, c0, c1, sign_off, one, top, low, orb, s, ab, grid, ok):  # type: ignore[no-untyped-def]
    """One pass over columns ``c0..c1-1`` of (n, c) bits ``u`` / values ``x``: per column max |bits|, min
    nonzero |bits| - 1 (wrapping: all-ones for an all-zero column), OR of |bits|, the float64 sum and the
    float64 sum of |x| in row order, and whether that sum is proved exact (``ok``: :func:`_proved` with the
    dtype's ``grid``, the block's statistics still in L1); returns the number of zero terms.

    Columns go in blocks of ``_SCAN_BLOCK`` (their five running values stay in L1; rows are
    sliced and indexed from 0, so the loops vectorize), four rows per pass (:func:`_scan_rows`: on 64 x 2**16
    bf16 values in float32, the whole exact sum 3.0 -> 2.3 ms). ``one`` has the bits' unsigned type:
    ``v - 1`` with a Python int would be float64 in numba.
    """
    n, c = u.shape
    zeros = 0
    if c < 16:  # tall: a column at a time, no row slices (one per element would cost more than its work)
        for j in range(c0, c1):
            v = u[0, j] & sign_off
            tp, lw, ob, ss, aa = v, v - one, v, np.float64(x[0, j]), abs(np.float64(x[0, j]))
            zeros += v == 0
            for i in range(1, n):
                v = u[i, j] & sign_off
                tp, lw, ob = max(tp, v), min(lw, v - one), ob | v
                ss += x[i, j]
                aa += abs(np.float64(x[i, j]))
                zeros += v == 0
            top[j], low[j], orb[j], s[j], ab[j] = tp, lw, ob, ss, aa
            ok[j] = _proved(tp, lw, ob, one, grid)
        return zeros
    for lo in range(c0, c1, _SCAN_BLOCK):
        hi = min(lo + _SCAN_BLOCK, c1)
        tp, lw, ob, ss, aa = top[lo:hi], low[lo:hi], orb[lo:hi], s[lo:hi], ab[lo:hi]
        ur, xr = u[0, lo:hi], x[0, lo:hi]
        for j in range(hi - lo):
            v = ur[j] & sign_off
            tp[j] = v
            lw[j] = v - one
            ob[j] = v
            ss[j] = xr[j]
            aa[j] = abs(np.float64(xr[j]))
            zeros += v == 0
        g = 1
        while g + 4 <= n:  # four rows per pass: the running values loaded and stored once per four rows
            us = (u[g, lo:hi], u[g + 1, lo:hi], u[g + 2, lo:hi], u[g + 3, lo:hi])
            xs = (x[g, lo:hi], x[g + 1, lo:hi], x[g + 2, lo:hi], x[g + 3, lo:hi])
            zeros += _scan_rows(us, xs, sign_off, one, tp, lw, ob, ss, aa)
            g += 4
        for i in range(g, n):
            zeros += _scan_rows((u[i, lo:hi],), (x[i, lo:hi],), sign_off, one, tp, lw, ob, ss, aa)
        for j in range(hi - lo):
            ok[lo + j] = _proved(tp[j], lw[j], ob[j], one, grid)
    return zeros


@jitable
def _proved(tp, lw, ob, one, grid):  # type: ignore[no-untyped-def]
    """:func:`_float64_exact_columns`'s proof for one column from the scan's statistics (max |bits| ``tp``, min
    nonzero |bits| - 1 ``lw``, OR of |bits| ``ob``); ``grid`` = (exponent shift, bias, significand field, its
    hidden bit, Inf's bits, significand bits + ceil(log2 n), ceil(log2 n)). The trailing zeros common to the
    significands are taken off the bits needed for every column (numpy only where the bound fails without them:
    the same answer, since they are never negative); ``2**k``'s float64 exponent field counts them exactly."""
    shift, bias, field, hidden, inf_bits, extra, log_n = grid
    e_max = np.int64(max(tp >> shift, one)) - bias
    e_min = np.int64(max((lw + one) >> shift, one)) - bias  # (lw + one wraps to 0 only for an all-zero column)
    sig = (ob & field) | hidden
    tz = np.int64(np.float64(sig & (~sig + one)).view(np.uint64) >> np.uint64(52)) - 1023
    need = e_max - e_min + extra - tz
    return (tp < inf_bits) & (e_max + log_n <= 1024) & ((tp == 0) | (need <= 53))


@jitable
def _scan_rows(us, xs, sign_off, one, tp, lw, ob, ss, aa):  # type: ignore[no-untyped-def]
    """The rows of the tuples ``us`` / ``xs`` (bits, values) added in turn to a block's running values: each
    column's in row order (the same bits as a row at a time); returns their zero terms."""
    zeros = 0
    for j in range(tp.size):
        t, w, o, sj, aj = tp[j], lw[j], ob[j], ss[j], aa[j]
        for q in range(len(us)):
            v = us[q][j] & sign_off
            xv = xs[q][j]
            t, w, o = max(t, v), min(w, v - one), o | v
            sj += xv
            aj += abs(np.float64(xv))
            zeros += v == 0
        tp[j], lw[j], ob[j], ss[j], aa[j] = t, w, o, sj, aj
    return zeros


_SCAN_BLOCK = 1024


_scan_compiled = jit(_scan_kernel, "the exact sums' column scan")


def _scan(
    a: NDArray[np.floating],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, NDArray[np.float64], int, NDArray[np.float64], NDArray[np.bool_]] | None:
    """(max |bits|, min nonzero |bits| (0: all zero), OR of |bits|, float64 row-order sum) per column,
    the number of zero terms, the float64 row-order sum of |x| per column, and the columns whose float64 sum is
    proved exact (:func:`_float64_exact_columns`'s answer, sigbits the dtype's). Spans of columns go to
    :mod:`fpreduce.base.threads` (every core, one per million terms at most): a column's values are its
    own, so the bits are the same for any number of threads."""
    if _scan_compiled is None or a.dtype not in (np.float32, np.float64):
        return None
    a = np.ascontiguousarray(a)
    ut = np.uint64 if a.dtype == np.float64 else np.uint32
    c = a.shape[1]
    top, low, orb = (np.empty(c, dtype=ut) for _ in range(3))
    s, ab = np.empty(c, dtype=np.float64), np.empty(c, dtype=np.float64)
    n = a.shape[0]
    spans = threads.split(c, threads.resolve(None, n * c) if c >= 16 else 1, align=_SCAN_BLOCK)
    wide = ut is np.uint64
    sign_off = ut(0x7FFFFFFFFFFFFFFF if wide else 0x7FFFFFFF)
    shift, bias, sigbits = (52, 1022, 53) if wide else (23, 126, 24)
    log_n = math.ceil(math.log2(n)) if n > 1 else 0
    inf_bits = ut(0x7FF << 52 if wide else 0xFF << 23)
    grid = (
        ut(shift),
        np.int64(bias),
        ut((1 << shift) - 1),
        ut(1 << shift),
        inf_bits,
        np.int64(sigbits + log_n),
        np.int64(log_n),
    )
    ok = np.empty(c, dtype=np.bool_)
    args = [(a.view(ut), a, c0, c1, sign_off, ut(1), top, low, orb, s, ab, grid, ok) for c0, c1 in spans]
    zeros = sum(threads.run(_scan_compiled, args))
    np.add(low, ut(1), out=low)  # min nonzero |bits|, 0 for an all-zero column
    return top, low, orb, s, int(zeros), ab, ok


def _float64_exact_columns(a: NDArray[np.floating], sigbits: int) -> NDArray[np.bool_]:
    """Columns whose float64 sum is exact in any order (a proof, per column).

    Every nonzero ``x = f * 2**e`` (frexp) of ``sigbits`` significand bits is a multiple
    of ``2**(e_min - sigbits)``, and every partial sum is such a multiple below
    ``n * 2**e_max``: with ``e_max + ceil(log2 n) - e_min + sigbits <= 53`` every
    partial sum, in any order, is a float64, so float64 addition never rounds. Trailing
    zero bits common to a column's significands lower ``sigbits`` (the values lie on a
    coarser grid), and ``e_max + ceil(log2 n) <= 1024`` rules out overflow. Columns
    with NaN/Inf are left to the general path. The numpy path's proof, in four passes; the compiled
    :func:`_scan` gives the same answer from its one pass (:func:`_proved`).
    """
    n = a.shape[0]
    log_n = math.ceil(math.log2(n)) if n > 1 else 0
    if a.dtype in (np.float32, np.float64):
        # on the bit patterns: |x| is bits & ~sign; (|x| - 1) wraps zeros to the top, so a
        # min over it finds the smallest nonzero |x|; exponents are the top bits
        wide = a.dtype == np.float64
        ut, shift, bias = (np.uint64, 52, 1022) if wide else (np.uint32, 23, 126)
        ab = np.bitwise_and(a.view(ut), ut(0x7FFFFFFFFFFFFFFF if wide else 0x7FFFFFFF))
        top = np.max(ab, axis=0)
        ab -= ut(1)
        low = np.min(ab, axis=0) + ut(1)  # 0 for an all-zero column
        inf_bits = ut(0x7FF0000000000000 if wide else 0x7F800000)
        fin = top < inf_bits
        e_max = np.maximum(top >> ut(shift), ut(1)).astype(np.int64) - bias
        e_min = np.maximum(low >> ut(shift), ut(1)).astype(np.int64) - bias
        need = e_max - e_min + sigbits + log_n
        redo = np.flatnonzero(fin & (need > 53) & (top != 0))
        if redo.size:
            # trailing zero bits shared by all significands of a column (bf16 data in float32
            # has >= 16) narrow its grid: every value is a multiple of 2**(e_min - sigbits + tz)
            ors = np.bitwise_or.reduce(a[:, redo].view(ut), axis=0)
            sig = ors & ut((1 << shift) - 1) | ut(1 << shift)
            need[redo] -= np.frexp((sig & (~sig + ut(1))).astype(np.float64))[1].astype(np.int64) - 1
        fin &= e_max + log_n <= 1024  # and no partial sum can overflow
        return fin & ((need <= 53) | (top == 0))
    with np.errstate(invalid="ignore"):
        ax = np.abs(a)
        mx = np.max(ax, axis=0)
        mn = np.min(ax, axis=0, where=ax != 0, initial=np.inf)
    fin = np.isfinite(mx)
    e_hi = np.frexp(np.where(fin, mx, 1.0))[1]
    e_lo = np.frexp(np.where(np.isfinite(mn), mn, 1.0))[1]
    need = e_hi.astype(np.int64) - e_lo + sigbits + log_n
    return fin & ((need <= 53) | ~np.isfinite(mn))
