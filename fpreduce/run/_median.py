"""The median of a step's relative errors: ``np.median`` of float32 values, by a compiled radix select.

:func:`median32` gives exactly ``np.median``'s value (the tests check it); with numba
(:mod:`fpreduce.base.jit`) it selects the two middle values in two counting passes
instead of sorting. Used by :class:`fpreduce.run.stepmetrics.ErrorStats`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.jit import enabled as kernels_enabled
from fpreduce.base.jit import jit

__all__ = ["median32"]


def _select_kernel(u, k1, k2):  # type: ignore[no-untyped-def]
    """The ``k1``-th and ``k2``-th smallest (k1 <= k2, from 0) of float32 bits ``u`` of values >= +0.0
    (their bits are ordered as the values): radix select on the top, then the low 16 bits.
    Returns (ok, bits1, bits2); ok False (and nothing selected) when a NaN or a sign bit shows."""
    top = np.zeros(65536, dtype=np.int64)
    for i in range(u.size):
        v = u[i]
        if v > np.uint32(0x7F800000):
            return False, np.uint32(0), np.uint32(0)
        top[v >> np.uint32(16)] += 1
    t1 = -1
    t2 = -1
    r1 = 0
    r2 = 0
    c = 0
    for j in range(65536):
        if t1 < 0 and c + top[j] > k1:
            t1 = j
            r1 = k1 - c
        if c + top[j] > k2:
            t2 = j
            r2 = k2 - c
            break
        c += top[j]
    low1 = np.zeros(65536, dtype=np.int64)
    low2 = np.zeros(65536, dtype=np.int64)
    for i in range(u.size):
        v = u[i]
        t = np.int64(v >> np.uint32(16))
        if t == t1:
            low1[v & np.uint32(0xFFFF)] += 1
        elif t == t2:
            low2[v & np.uint32(0xFFFF)] += 1
    if t2 == t1:
        low2 = low1
    s1 = 0
    s2 = 0
    c = 0
    for j in range(65536):
        c += low1[j]
        if c > r1:
            s1 = j
            break
    c = 0
    for j in range(65536):
        c += low2[j]
        if c > r2:
            s2 = j
            break
    return True, np.uint32((t1 << 16) | s1), np.uint32((t2 << 16) | s2)


_select_compiled = jit(_select_kernel, "the runner's medians")


def median32(rels: list[NDArray[np.float32]]) -> float:
    """``np.median`` of the concatenated float32 arrays (NaN if any is NaN): the same value, faster."""
    r = np.concatenate(rels)
    if kernels_enabled() and _select_compiled is not None and r.size:
        n = r.size
        ok, b1, b2 = _select_compiled(r.view(np.uint32), (n - 1) // 2, n // 2)
        if ok:
            mid = np.array([b1, b2], dtype=np.uint32).view(np.float32)
            # np.median: the mean (float32) of the two middle values, or the middle value itself
            return float(np.mean(mid if n % 2 == 0 else mid[:1]))
    return float(np.median(r))
