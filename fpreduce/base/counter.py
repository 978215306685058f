"""The one counter-based generator: splitmix64's finalizer and its streams, in Python, numpy and compiled forms.

splitmix64 (Steele, Lea & Flood 2014) keeps a 64-bit state, adds the odd constant
``GOLD`` (2**64 over the golden ratio) per output and returns :func:`mix` of the new
state: output ``t`` (0, 1, ...) of the stream whose state starts at ``z`` is
``mix(z + (t + 1) * GOLD)`` (:func:`draw`), all modulo 2**64. Counting instead of
stepping makes every draw addressable: fpreduce's random choices are draws of streams
keyed by (seed, element, addition), so they never depend on how elements are chunked
or in what order they are computed.

* the stream of element ``e`` under ``key`` starts at ``draw(key, e)`` (the stochastic
  roundings' element seeds, the atomic orders' per-element seeds);
* a uniform in [0, 1) is the top 53 bits of a draw over 2**53 (:func:`uniform`);
* :func:`mix` alone keys a value by its position (run digests).

Three forms, the same bits: :func:`mix_int` on Python integers (the reference);
:func:`mix`, :func:`draw` and :func:`uniform` on numpy uint64 scalars, which numba
compiles inline inside kernels (:func:`fpreduce.base.jit.jitable`); :func:`mix_numpy`,
:func:`draw_numpy` and :func:`uniform_numpy` vectorized over uint64 arrays.

>>> hex(mix_int(GOLD))  # splitmix64 seeded with 0: its first output
'0xe220a8397b1dcdaf'
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce.base import jit

__all__ = ["GOLD", "draw", "draw_numpy", "mix", "mix_int", "mix_numpy", "uniform", "uniform_numpy"]

GOLD = 0x9E3779B97F4A7C15  # the state's increment: odd, 2**64 / golden ratio
MIX1 = 0xBF58476D1CE4E5B9  # the finalizer's multipliers
MIX2 = 0x94D049BB133111EB
_M64 = (1 << 64) - 1
_G, _M1, _M2 = np.uint64(GOLD), np.uint64(MIX1), np.uint64(MIX2)  # (constants in the compiled forms)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_ONE = np.uint64(1)


def mix_int(z: int) -> int:
    """splitmix64's finalizer on a Python integer (taken modulo 2**64): a bijection of 64-bit words."""
    z &= _M64
    z = ((z ^ (z >> 30)) * MIX1) & _M64
    z = ((z ^ (z >> 27)) * MIX2) & _M64
    return z ^ (z >> 31)


@jit.jitable
def mix(z):  # type: ignore[no-untyped-def]
    """splitmix64's finalizer on a uint64 (products wrap modulo 2**64); compiled inline in kernels."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@jit.jitable
def draw(z, t):  # type: ignore[no-untyped-def]
    """Output ``t`` (0, 1, ...) of the splitmix64 stream whose state starts at ``z``: ``mix(z + (t + 1) GOLD)``."""
    return mix(np.uint64(z) + (np.uint64(t) + _ONE) * _G)


@jit.jitable
def uniform(z, t):  # type: ignore[no-untyped-def]
    """The uniform of draw ``t`` of stream ``z``: its top 53 bits over 2**53, a float64 in [0, 1)."""
    return np.float64(draw(z, t) >> _S11) * 2.0**-53


def mix_numpy(z: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """:func:`mix` over a uint64 array (elementwise, wrapping)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> _S30)) * _M1
        z = (z ^ (z >> _S27)) * _M2
        return z ^ (z >> _S31)


def draw_numpy(z: ArrayLike, t: ArrayLike) -> NDArray[np.uint64]:
    """:func:`draw` over uint64 arrays (or integers) ``z`` and ``t`` that broadcast."""
    zz, tt = np.asarray(z, dtype=np.uint64), np.asarray(t, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return mix_numpy(zz + (tt + _ONE) * _G)


def uniform_numpy(z: ArrayLike, t: ArrayLike) -> NDArray[np.float64]:
    """:func:`uniform` over uint64 arrays (or integers) ``z`` and ``t`` that broadcast."""
    return (draw_numpy(z, t) >> _S11).astype(np.float64) * 2.0**-53
