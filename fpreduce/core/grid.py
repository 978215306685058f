"""A format and a rounding mode as the compiled kernels read them: formats as data.

:class:`Grid` is one record of every number a kernel needs to round a sum to an
accumulator format in a mode: the precision ``p`` (with the implicit bit), the
smallest normal exponent ``emin``, the largest finite value ``maxf``, the mode (0
nearest even, 1 toward zero, 2 up, 3 down, 4 stochastic), whether the format has
Inf (fp8_e4m3 overflows to NaN), Veltkamp's splitter ``sigma = 2**(24 - p) + 1``,
the smallest normal ``tiny = 2**emin``, and whether the processor's rounding mode
runs the directed modes (:mod:`fpreduce.core._hwround`). numba passes it as a typed
record: the kernels read ``grid.p``, never a position in an array, and one compiled
kernel serves every format (the record's values are run-time data; a kernel that
wants one loop per mode compiles it per mode, by its own choice).

:class:`Kind` names the ways the kernels round an addition to that grid; which one a
format and mode take is :func:`kind_of`'s decision, made here once (the route table,
:mod:`fpreduce.core.routes`, reads it; ``fr.explain`` prints it). Each kind gives the
same bits as the exact rounder (:func:`fpreduce.core.rounding.round_to` of the exact
sum); tests/test_routes.py checks every route, format and mode on edge data.
"""

from __future__ import annotations

import enum
import functools
from typing import NamedTuple

from fpreduce.core import _hwround as hw
from fpreduce.core.formats import Format
from fpreduce.core.rounding import Mode

__all__ = ["MODE_CODES", "Grid", "Kind", "kind_of"]

MODE_CODES = {Mode.NEAREST_EVEN: 0, Mode.TOWARD_ZERO: 1, Mode.UP: 2, Mode.DOWN: 3, Mode.STOCHASTIC: 4}


class Kind(enum.IntEnum):
    """How the compiled folds round one addition (the kernels compare their ``kind`` with these)."""

    NATIVE = 0  # fp32, fp64 to nearest (or in the processor's directed mode): the native addition
    SPLIT = 1  # bf16, tf32 to nearest: the float32 sum rounded by Veltkamp's split (NaN beyond its range)
    SPLIT_SUB = 2  # fp16, fp8 to nearest: Veltkamp above 2**emin, the exact float32 sum below, overflow
    BITS = 3  # any format of p <= 52 in any mode: TwoSum and one rounding on the sum's bits
    STEP64 = 4  # fp64 in a directed or stochastic mode: TwoSum and one ulp step toward the remainder
    LANES = 5  # p <= 24, emin >= -126, directed or stochastic: float32 bit patterns in 32-bit lanes


KIND_WORDS = {
    Kind.NATIVE: "the native float32/float64 addition (directed modes: the processor's rounding mode set)",
    Kind.SPLIT: "the float32 sum rounded to nearest even by Veltkamp's split",
    Kind.SPLIT_SUB: "the float32 sum rounded by Veltkamp's split; exact below 2**emin; overflow by the format",
    Kind.BITS: "TwoSum, then one rounding on the float64 sum's bits (any mode)",
    Kind.STEP64: "TwoSum, then a one-ulp step of the float64 sum by the mode",
    Kind.LANES: "float32 sums rounded on their bit patterns in 32-bit lanes (directed and stochastic modes)",
}


class Grid(NamedTuple):
    """An accumulator format and mode as numbers (see the module); build it with :func:`kind_of`."""

    p: int  # precision, the implicit bit included
    emin: int  # the smallest normal exponent
    maxf: float  # the largest finite value
    mode: int  # 0 nearest even, 1 toward zero, 2 up, 3 down, 4 stochastic
    has_inf: bool  # overflow reaches Inf (else NaN: fp8_e4m3)
    sigma: float  # Veltkamp's splitter 2**(24 - p) + 1 for p < 24, else 1
    tiny: float  # the smallest normal value 2**emin
    hw: bool  # a directed mode that the processor's rounding mode runs (core._hwround)


def grid_of(fa: Format, mode: Mode) -> Grid:
    """The :class:`Grid` of an accumulator format and mode."""
    p = fa.precision
    directed = mode in (Mode.TOWARD_ZERO, Mode.UP, Mode.DOWN) and hw.available()
    sigma = 2.0 ** (24 - p) + 1 if p < 24 else 1.0
    return Grid(p, fa.emin, float(fa.max_finite), MODE_CODES[mode], bool(fa.has_inf), sigma, 2.0**fa.emin, directed)


def kind_of(fa: Format, mode: Mode) -> tuple[Kind, Grid]:
    """The compiled folds' rounding :class:`Kind` and :class:`Grid` for an accumulator format and mode."""
    return _kind_of(fa, mode, hw.available())  # (cached: the route table and the folds ask on every call)


@functools.lru_cache(maxsize=256)
def _kind_of(fa: Format, mode: Mode, directed_in_hardware: bool) -> tuple[Kind, Grid]:
    grid = grid_of(fa, mode)
    p = fa.precision
    if grid.hw and hw.native(fa):
        return Kind.NATIVE, grid  # fp32, fp64 in a directed mode: the native additions, the hardware's mode set
    if mode is Mode.NEAREST_EVEN:
        if p == 24 or p == 53:
            return Kind.NATIVE, grid
        if p in (8, 11) and fa.emin == -126:
            return Kind.SPLIT, grid
        if p <= 11 and fa.emin > -126 and fa.max_finite < 2.0**100:  # (Veltkamp's product stays finite)
            return Kind.SPLIT_SUB, grid  # fp16, fp8: float32 normals; below 2**emin sums are exact
    return (Kind.STEP64 if p == 53 else Kind.BITS), grid
