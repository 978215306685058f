"""The processor's own directed rounding for the compiled folds: IEEE 754's modes in hardware.

IEEE 754 gives every binary format four rounding-direction attributes, and x86-64's
SSE/AVX units (MXCSR) and AArch64 (FPCR) implement all of them for float32 and
float64 additions, vectorized, at the speed of nearest even. A fold of fp32 or fp64
values in ``toward_zero``, ``up`` or ``down`` is then the native fold with the
thread's rounding mode set: the bits of IEEE 754, exactly (signed zeros, subnormals
and overflow included: ``x + (-x)`` is -0 in mode down, an overflow rounds to the
largest finite value or Inf by the mode, as :func:`fpreduce.core.rounding.overflow_value`).

A narrower format of p <= 24 bits and emin >= -126 is a subset of float32's grid (after
scaling: :mod:`fpreduce.core._narrow`), and directed roundings compose on nested grids:
rounding the float32 sum of two of its values up, then up again to the format, is
rounding the exact sum up (``RU_fmt(RU_32(x)) = RU_fmt(x)``, likewise down and toward
zero). So a directed addition of bf16, tf32, fp16 or fp8 values is the native float32
addition in the mode and one rounding of its bit pattern (:func:`fpreduce.core._narrow.add_hw`).

:func:`begin` sets the mode at a kernel's start and :func:`end` restores round to nearest
before it returns (LLVM's ``llvm.set.rounding``; numba then caches the kernel as any other:
no function pointer). Between them a kernel runs only additions whose operands it loads
from memory (they cannot move across the calls) and exact operations (scalings by powers
of two), so nothing else is rounded in the mode. :func:`available` compiles a probe on
first use and checks every mode's bits for float32 and float64 (ties, signed zero,
overflow); without it, or with ``FPREDUCE_NO_HWROUND=1``, the folds round in software
(TwoSum and the bit patterns): the same bits, which the tests compare.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from fpreduce.base import jit
from fpreduce.core.formats import Format

_LLVM = (1, 0, 2, 3)  # _tall's modes 0..3 (nearest, toward_zero, up, down) as llvm.set.rounding's codes
_STATE: list[bool] = []


def begin(mode):  # type: ignore[no-untyped-def]
    """Set the thread's rounding to ``mode`` (_tall's 1..3; 0: nothing). Compiled only (a no-op in Python)."""
    return None


def end(mode):  # type: ignore[no-untyped-def]
    """Restore round to nearest after :func:`begin` (``mode`` 0: nothing)."""
    return None


def code(kind, grid):  # type: ignore[no-untyped-def]
    """The mode a kernel of ``kind`` sets (:class:`fpreduce.core.grid.Kind` NATIVE or LANES with ``grid.hw``: the
    grid's directed mode), else 0."""
    mode = grid.mode
    use = (kind == 0 or kind == 5) and grid.hw and mode >= 1 and mode <= 3
    return mode if use else 0


def native(fa: Format) -> bool:
    """Whether ``fa`` is IEEE 754 binary32 or binary64: its additions are the processor's."""
    for dt, p in ((np.float32, 24), (np.float64, 53)):
        fi = np.finfo(dt)
        if (fa.precision, fa.emin, fa.max_finite, fa.has_inf) == (p, int(fi.minexp), float(fi.max), True):
            return True
    return False


@jit.serialized
def compile_all() -> None:
    """Make :func:`begin`, :func:`end` and :func:`code` numba functions (the mode set by LLVM's intrinsic), once."""
    g = globals()
    if not isinstance(g["begin"], type(compile_all)):
        return
    jit.numba()
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def set_rounding(typingctx, m):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(32)]), "llvm.set.rounding"
            )
            builder.call(fn, [builder.trunc(args[0], ir.IntType(32))])
            return context.get_dummy_value()

        return types.void(m), codegen

    llvm = np.array(_LLVM, dtype=np.int64)

    def begin(mode):  # type: ignore[no-untyped-def]
        if mode != 0:
            set_rounding(llvm[mode])

    def end(mode):  # type: ignore[no-untyped-def]
        if mode != 0:
            set_rounding(np.int64(1))

    g["code"] = jit.kernel(g["code"], inline="always")
    g["begin"], g["end"] = jit.kernel(begin, inline="always"), jit.kernel(end, inline="always")
    g["_probe_add"] = jit.kernel(g["_probe_add"], "the processor's rounding modes (a probe)")


def _probe_add(x, y, mode):  # type: ignore[no-untyped-def]
    """x + y elementwise in ``mode`` (:func:`begin`, :func:`end`): the probe's kernel."""
    out = np.empty_like(x)
    begin(mode)
    for i in range(x.size):
        out[i] = x[i] + y[i]
    end(mode)
    return out


def _probe() -> bool:
    """Whether the compiled :func:`begin` rounds float32 and float64 additions in every mode as IEEE 754 says."""
    compile_all()
    add = globals()["_probe_add"]
    tiny64 = 2.0**-60
    ok = True
    for dt, tiny in ((np.float32, np.float32(2.0**-30)), (np.float64, tiny64)):
        big = np.finfo(dt).max
        x = np.array([1.0, -1.0, 1.0, 1.0, big, -big], dtype=dt)
        y = np.array([tiny, -tiny, -1.0, 1.0, big, -big], dtype=dt)
        one_up, one_dn = np.nextafter(dt(1.0), dt(2.0)), np.nextafter(dt(-1.0), dt(-2.0))
        inf = dt(np.inf)
        want = {
            0: [1.0, -1.0, 0.0, 2.0, inf, -inf],
            1: [1.0, -1.0, 0.0, 2.0, big, -big],
            2: [one_up, -1.0, 0.0, 2.0, inf, -big],
            3: [1.0, one_dn, -0.0, 2.0, big, -inf],
        }
        for mode, w in want.items():
            got = add(x, y, mode)
            ok &= bool(np.array_equal(got.view(f"u{dt().itemsize}"), np.array(w, dtype=dt).view(f"u{dt().itemsize}")))
    ok &= bool(np.float64(1.0) + np.float64(tiny64) == 1.0)  # nearest even is back
    return ok


def available() -> bool:
    """Whether the folds may round directed modes in hardware: numba, no ``FPREDUCE_NO_HWROUND``, the probe passed."""
    if not _STATE:
        from fpreduce.base import jit

        use = jit.AVAILABLE and not os.environ.get("FPREDUCE_NO_HWROUND")
        try:
            _STATE.append(use and _probe())
        except Exception:  # noqa: BLE001 - an LLVM without the intrinsic's lowering: round in software
            _STATE.append(False)
    return _STATE[0] and _enabled[0]


_enabled = [True]


@contextmanager
def disabled() -> Iterator[None]:
    """Round directed modes in software inside the block (tests compare both ways); not thread safe."""
    saved, _enabled[0] = _enabled[0], False
    try:
        yield
    finally:
        _enabled[0] = saved
