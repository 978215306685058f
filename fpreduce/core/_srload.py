"""Stochastic rounding outside the additions, counter-based: inputs, averaging, output.

The additions of a stochastic fold draw ``u`` from splitmix64 of (key, element,
addition) (:mod:`fpreduce.core._tall`). The other roundings of a reduction draw from
the same generator with their own counters, so that the whole result depends on the
seed alone, not on how the engine cuts the rows and columns, which path it takes
(compiled or numpy) or how a vector is split into pieces (``offset``):

* the conversion of worker i's input to the accumulator format (an input wider than
  the accumulator): counter ``INPUT_T + i``, as :func:`fpreduce.round_inputs` (so
  reducing fp32 data into bf16 gives the bits of reducing ``round_inputs(X, "bf16")``);
* the premultiplication or predivision of worker i's input by the worker count:
  ``SCALE_T + i``;
* the division of the sum (``average="after"``): ``AFTER_T``; the rounding of the
  result to the output format: ``OUTPUT_T``.

Each draws 53 bits per rounding and rounds up iff ``u < frac`` (``frac`` the exact
distance to the value below over the quantum), as the additions do.
"""

from __future__ import annotations

import numpy as np

from fpreduce.core._steps import uniforms
from fpreduce.core.arith import _Loader, _scale, _scale_words
from fpreduce.core.formats import Format
from fpreduce.core.primitives import _sr_inputs
from fpreduce.core.rounding import Mode

SCALE_T = (1 << 60) + (1 << 59)  # worker i's premultiply / predivide: SCALE_T + i
AFTER_T = (1 << 61) + (1 << 59)  # the division of the sum by n
OUTPUT_T = (1 << 61) + (1 << 60)  # the result's rounding to the output format


class _Draws:
    """A ``Generator``-like source whose ``random(size=shape)`` gives the counter-based uniforms of a grid.

    Rows ``i`` draw counter ``base + i`` (a 1-D shape: one counter, ``base``), columns
    are elements ``offset + j``.
    """

    def __init__(self, key: int, offset: int, base: int) -> None:
        self.key, self.offset, self.base = key, offset, base

    def random(self, size: tuple[int, ...]) -> np.ndarray:
        shape = tuple(size)
        e = np.arange(self.offset, self.offset + shape[-1], dtype=np.uint64)
        if len(shape) == 1:
            return uniforms(self.key, e, np.array(self.base, dtype=np.uint64))
        t = np.uint64(self.base) + np.arange(shape[0], dtype=np.uint64)
        return uniforms(self.key, e[None, :], t[:, None])


def load(A: np.ndarray, ldr: _Loader, key: int, offset: int, threads: int | None = None) -> np.ndarray:
    """A's rows in the accumulator format: rounded to the input format (nearest even, as the engine's
    loader ``ldr``), scaled by its ``premul`` and converted to its ``fa`` stochastically.

    float32 data, and bf16, fp16 or fp8 arrays, stay float32 on the way (their values are the input
    format's after the rounding to nearest, which float32 holds: no float64 copy), and so do the products
    or quotients of ``premul`` for an input format whose values are float32's; the result is float32
    when ``fa``'s values are float32's (the engine's loader then checks it in one pass, rather than
    rounding a float64 copy again); float64 otherwise. ``threads``: the reduction's (None: every core)."""
    fin = ldr.fin
    wide = A.dtype == np.float64
    draws = _Draws(key, offset, SCALE_T)
    words = None if ldr.premul is None else _scale_words(A, ldr.premul, fin, Mode.STOCHASTIC, draws, threads)
    if words is not None:
        a = words
    else:
        a = np.asarray(_Loader(A, fin, fin, Mode.NEAREST_EVEN, None, np.dtype(np.float64 if wide else np.float32))(A))
        if ldr.premul is not None:
            a = np.asarray(_scale(a, ldr.premul, fin, Mode.STOCHASTIC, draws, threads))
    if ldr.fits:
        return a
    return _sr_inputs(a, ldr.fa, key, offset, dtype=ldr.fa.value_dtype, threads=threads)  # INPUT_T + i: round_inputs


def after(res: np.ndarray, n: float, fa: Format, key: int, offset: int, threads: int | None = None) -> np.ndarray:
    """The sums divided by n, each rounded stochastically to ``fa`` (counter ``AFTER_T``; ``threads``: the
    reduction's)."""
    return _scale(res, ("after", n), fa, Mode.STOCHASTIC, _Draws(key, offset, AFTER_T), threads)


def output(res: np.ndarray, fo: Format, key: int, offset: int, threads: int | None = None) -> np.ndarray:
    """The results rounded stochastically to the output format (counter ``OUTPUT_T``): one row of
    :func:`fpreduce.core.primitives._sr_inputs`, the same law. Compiled, 64 x 2**18 fp32 summed in fp32 with a
    bf16 output: 2.57-2.58 -> 1.66-1.68 ns per addition, the reduction alone 1.45-1.51 (numpy's rounding took
    ~70 ns per result)."""
    r = np.asarray(res)
    return _sr_inputs(r.reshape(1, -1), fo, key, offset, OUTPUT_T, fo.value_dtype, threads).reshape(r.shape)
