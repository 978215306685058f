"""Vectorized rounding of float64 values onto a format, once, from the exact value.

Modes: ``nearest_even``, ``toward_zero``, ``up``, ``down``, ``stochastic``.

Method: for each value the quantum ``q = 2**(max(e, emin) - p + 1)`` of its binade
(the subnormal quantum below 2**emin) is a power of two, so ``x / q`` is exact in
float64 and rounding to an integer (``rint``/``trunc``/``ceil``/``floor``) rounds ``x``
exactly once. Inputs are float64 (float16/float32 inputs are widened exactly), so
there is no double rounding: float64 -> bf16 never passes through float32.

Special values: NaN stays NaN; ±Inf stays ±Inf for formats with Inf and becomes NaN
for fp8_e4m3 (no Inf encoding); -0.0 stays -0.0, and a negative value that rounds to
zero gives -0.0. Subnormals: gradual underflow, no flush to zero.

Overflow (IEEE 754 7.4): in nearest mode a value whose rounding (with unbounded
exponent) exceeds ``max_finite`` becomes ±Inf (fp8_e4m3: NaN, OCP non-saturating);
``toward_zero`` gives ±max_finite; ``up`` gives +Inf for positive and -max_finite
for negative overflow, ``down`` the mirror image (fp8_e4m3: NaN in place of Inf).

Stochastic rounding rounds up with probability ``frac = (x - lo) / q`` where ``lo``
is ``x`` rounded down; it compares ``frac`` (exact in float64) with a uniform
float64 from ``rng.random()`` (53 random bits), so E[SR(x)] = x up to 2**-53
relative resolution of the probability. A value already representable is returned
unchanged.
"""

from __future__ import annotations

from enum import Enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce._errors import InvalidArgument, unknown_name
from fpreduce.formats import Format, get_format

__all__ = ["MODES", "Mode", "get_mode", "round_to"]


class Mode(Enum):
    """Rounding modes."""

    NEAREST_EVEN = "nearest_even"
    TOWARD_ZERO = "toward_zero"
    UP = "up"
    DOWN = "down"
    STOCHASTIC = "stochastic"


MODES: tuple[str, ...] = tuple(m.value for m in Mode)


def get_mode(mode: str | Mode) -> Mode:
    """Convert a mode name to ``Mode`` (close-match hint on typos)."""
    if isinstance(mode, Mode):
        return mode
    try:
        return Mode(mode)
    except ValueError:
        raise unknown_name("rounding mode", mode, MODES) from None


def _quantum_exponent(a: NDArray[np.float64], f: Format) -> NDArray[np.int64]:
    """Exponent k of the quantum 2**k of |a| in f (via the float64 exponent field)."""
    bits = a.view(np.uint64)
    field = ((bits >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    e = field - 1023  # float64 subnormals give -1023, far below every emin < 0
    return np.maximum(e, f.emin) - (f.precision - 1)


def round_to(
    x: ArrayLike,
    fmt: str | Format,
    mode: str | Mode = "nearest_even",
    rng: np.random.Generator | int | None = None,
) -> NDArray[np.floating]:
    """Round values onto ``fmt`` once, correctly, in ``mode``.

    Args:
        x: float values (any float dtype; widened exactly to float64).
        fmt: format name or Format.
        mode: rounding mode name.
        rng: numpy Generator or seed, required for ``stochastic``.

    Returns:
        float32 array (float64 for fp64) of values representable in ``fmt``.

    Raises:
        InvalidArgument: unknown format/mode, non-float input, stochastic without rng.

    >>> float(round_to(1 + 2**-8 + 2**-40, "bf16"))  # no double rounding via float32
    1.0078125
    >>> float(round_to(65520.0, "fp16"))
    inf
    """
    f = get_format(fmt)
    m = get_mode(mode)
    a0 = np.asarray(x)
    if a0.dtype.kind != "f" and a0.dtype.name != "bfloat16" and not a0.dtype.name.startswith(
        "float8"
    ):
        raise InvalidArgument(
            f"round_to expects a float array, got dtype {a0.dtype}; convert with .astype(np.float64)"
        )
    a = np.ascontiguousarray(a0, dtype=np.float64)
    if m is Mode.STOCHASTIC:
        if rng is None:
            raise InvalidArgument("stochastic rounding needs rng= (a numpy Generator or a seed)")
        rng = np.random.default_rng(rng)
    if f.precision == 53:
        return a.copy()
    k = _quantum_exponent(a, f)
    q = np.ldexp(1.0, k.astype(np.int32))
    with np.errstate(invalid="ignore", over="ignore"):
        s = a / q  # exact: q is a power of two and s has at most 53 bits
        if m is Mode.NEAREST_EVEN:
            r = np.rint(s)
        elif m is Mode.TOWARD_ZERO:
            r = np.trunc(s)
        elif m is Mode.UP:
            r = np.ceil(s)
        elif m is Mode.DOWN:
            r = np.floor(s)
        else:
            assert isinstance(rng, np.random.Generator)
            lo = np.floor(s)
            frac = s - lo  # exact
            u = rng.random(size=s.shape)
            r = lo + (u < frac)
        out = r * q
        out = np.copysign(out, a)  # -0.0 for negatives rounding to zero
        big = np.abs(out) > f.max_finite
        if np.any(big):
            fin_a = np.isfinite(a)
            over = big & fin_a
            pos = a > 0
            inf_val = np.inf if f.has_inf else np.nan
            if m is Mode.NEAREST_EVEN or m is Mode.STOCHASTIC:
                sat = np.full(a.shape, inf_val)
            elif m is Mode.TOWARD_ZERO:
                sat = np.full(a.shape, f.max_finite)
            elif m is Mode.UP:
                sat = np.where(pos, inf_val, f.max_finite)
            else:
                sat = np.where(pos, f.max_finite, inf_val)
            out = np.where(over, np.copysign(sat, a), out)
        if not f.has_inf:
            out = np.where(np.isinf(a), np.nan, out)
    return out.astype(f.value_dtype)
