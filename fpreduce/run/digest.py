"""A per-step fingerprint of an arm's result bits (metrics.csv's ``digest`` column).

``fpreduce compare RUN1 RUN2`` tells from it whether two runs' results are
bit-identical step by step without storing the results; because it is a sum over
elements keyed by position, a run split over element ranges merges it exactly.
"""

from __future__ import annotations

import numpy as np

from fpreduce.base import counter
from fpreduce.base.jit import enabled as kernels_enabled
from fpreduce.base.jit import jit

_SIGN_OFF = np.uint64(0x7FFFFFFFFFFFFFFF)


#: a digest is a sum modulo 2**52: exact as a float64 in metrics.csv
DIGEST_BITS = 52


def _digest_kernel(bits, offset, nan_bits):  # type: ignore[no-untyped-def]
    """The compiled twin of :func:`digest`'s numpy code (the same uint64 operations, wrapping)."""
    total = np.uint64(0)
    for k in range(bits.size):
        b = bits[k]
        if (b & _SIGN_OFF) > _INF_BITS:  # a NaN: one pattern for all
            b = nan_bits
        total += counter.mix(counter.mix(np.uint64(offset + k)) ^ b)
    return total


_INF_BITS = np.float64(np.inf).view(np.uint64)
_digest_compiled = jit(_digest_kernel, "the runner's digests")


def digest(y: np.ndarray, offset: int = 0) -> int:
    """A fingerprint of a result's values: ``sum_i mix(mix(i) ^ bits64(y_i)) mod 2**52``.

    ``bits64`` is the value's float64 bit pattern (every format's values are exact in
    float64; -0.0 and +0.0 differ, every NaN counts as one); ``mix`` is splitmix64's
    finaliser (:mod:`fpreduce.base.counter`). ``i`` counts from ``offset`` (the position of ``y[0]`` in the whole
    vector), so the digests of consecutive slices add up (mod 2**52) to the whole
    vector's: a run split over element ranges merges exactly. Equal results have equal
    digests; results that differ anywhere collide with chance ~2**-52.
    """
    v = np.ascontiguousarray(y, dtype=np.float64).ravel()
    if _digest_compiled is not None and kernels_enabled():
        total = int(_digest_compiled(v.view(np.uint64), np.uint64(offset), np.float64(np.nan).view(np.uint64)))
    else:
        bits = np.where(np.isnan(v), np.float64(np.nan), v).view(np.uint64)
        idx = np.arange(offset, offset + bits.size, dtype=np.uint64)
        with np.errstate(over="ignore"):
            total = int(np.sum(counter.mix_numpy(counter.mix_numpy(idx) ^ bits), dtype=np.uint64))
    return total & ((1 << DIGEST_BITS) - 1)
