"""The in-place program of the ``pairwise`` plan, built without its tree: tall pairwise folds.

``fr.reduce(X, "pairwise")`` on 10^5 .. 10^8 rows would spend microseconds per leaf
building :func:`fpreduce.plans.pairwise`'s nested tuples in Python and compiling them
with :func:`fpreduce.core._fastpath._program`. :func:`pairwise_program` gives the same
program (the same ops, buffers and root, in the same post-order: stochastic rounding
numbers additions by it) from ``n`` alone, in one compiled pass with an explicit
stack (numba; plain Python without it). tests/test_pairwise.py checks it against
``_program(pairwise(n).root, n)``.
"""

from __future__ import annotations

import numpy as np

from fpreduce.base import jit

#: the text plan the engine hands over as it is (its tree is never built when compiled)
PAIRWISE = "pairwise"


def _fill(n, ops):  # type: ignore[no-untyped-def]
    """ops[t] <- the t-th op of ``_program(pairwise(n).root, n)``; returns (number of buffers, root)."""
    stack = np.zeros((4, 130), dtype=np.int64)  # per frame: lo, hi, stage, the left half's result
    lo_, hi_, st_, a_ = stack[0], stack[1], stack[2], stack[3]
    free = np.zeros(130, dtype=np.int64)
    nfree, count, t, sp, ret = 0, 0, 0, 1, 0
    lo_[0], hi_[0] = 0, n
    while sp > 0:
        i = sp - 1
        lo, hi = lo_[i], hi_[i]
        if hi - lo == 1:  # a leaf
            ret = lo
            sp -= 1
            continue
        mid = lo + (hi - lo + 1) // 2  # the first half gets the extra leaf, as plans.pairwise
        if st_[i] < 2:  # descend into the left half, then the right one
            if st_[i] == 1:
                a_[i] = ret
            lo_[sp], hi_[sp], st_[sp] = (lo, mid, 0) if st_[i] == 0 else (mid, hi, 0)  # noqa: RUF005
            st_[i] += 1
            sp += 1
            continue
        a, b = a_[i], ret  # combine, reusing buffers as _fastpath._program does
        if a < 0:
            out = a
            if b < 0:
                free[nfree] = b
                nfree += 1
        elif b < 0:
            out = b
        elif nfree > 0:
            nfree -= 1
            out = free[nfree]
        else:
            count += 1
            out = -count
        ops[t, 0], ops[t, 1], ops[t, 2] = out, a, b
        t += 1
        ret = out
        sp -= 1
    return count, ret


_FILL = jit.jit(_fill)


def pairwise_program(n: int) -> tuple[np.ndarray, int, int]:
    """(ops as an (n - 1, 3) int64 array, number of buffers, root operand) of the pairwise tree of ``n`` leaves."""
    ops = np.zeros((max(n - 1, 0), 3), dtype=np.int64)
    fill = _FILL if _FILL is not None and jit.enabled() else _fill
    count, root = fill(n, ops)
    return ops, int(count), int(root)
