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

Overflow (IEEE 754 7.4, :func:`overflow_value`, the one definition): in nearest mode
a value whose rounding (with unbounded exponent) exceeds ``max_finite`` becomes ±Inf
(fp8_e4m3: NaN, OCP non-saturating); ``toward_zero`` gives ±max_finite; ``up`` gives
+Inf for positive and -max_finite for negative overflow, ``down`` the mirror image
(fp8_e4m3: NaN in place of Inf).

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

from fpreduce.base import jit
from fpreduce.base.dtypes import as_float_array
from fpreduce.base.errors import InvalidArgument, unknown_name
from fpreduce.base.fpflags import own_flags
from fpreduce.base.threads import check as check_threads
from fpreduce.base.threads import resolve, split
from fpreduce.base.threads import run as threads_run
from fpreduce.core.formats import Format, get_format

__all__ = ["MODES", "Mode", "get_mode", "overflow_value", "quantum_bits", "round_to"]


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


def overflow_value(f: Format, mode: Mode, negative: ArrayLike) -> NDArray[np.float64]:
    """What a finite value too large for ``f`` becomes in ``mode``: the IEEE 754 7.4 rule, once.

    A value overflows when its rounding with an unbounded exponent exceeds
    ``f.max_finite``. ``nearest_even`` and ``stochastic`` give ±Inf; ``toward_zero``
    gives ±max_finite; ``up`` gives +Inf for a positive and -max_finite for a negative
    overflow, ``down`` the mirror image. A format without Inf (fp8_e4m3, OCP
    non-saturating) gives NaN in place of ±Inf, with the overflow's sign bit.

    Args:
        f: the target format.
        mode: the rounding mode.
        negative: whether each overflowing value is negative (a bool or a bool array).

    Returns:
        float64 (0-d for a scalar ``negative``), one value per overflow.

    >>> float(overflow_value(get_format("fp16"), Mode.UP, True))
    -65504.0
    """
    big = np.inf if f.has_inf else np.nan
    if mode is Mode.NEAREST_EVEN or mode is Mode.STOCHASTIC:
        mag: float | NDArray[np.float64] = big
    elif mode is Mode.TOWARD_ZERO:
        mag = f.max_finite
    elif mode is Mode.UP:
        mag = np.where(negative, f.max_finite, big)
    else:
        mag = np.where(negative, big, f.max_finite)
    return np.copysign(mag, np.where(negative, -1.0, 1.0))


def quantum_bits(a: NDArray[np.float64], f: Format) -> NDArray[np.uint64]:
    """Float64 bit patterns of the quantum 2**k (the ulp in ``f``) of each |a|.

    k = max(e, emin) - p + 1 with e the float64 exponent (float64 subnormals fall
    far below every emin), computed on the exponent field alone: three uint64 ops
    (fp64 itself, whose smallest quanta are subnormal: ``np.spacing``).
    """
    if f.emin - f.precision + 1 < -1022:  # fp64: quanta below 2**-1022 are subnormal
        # the float64 ulp of |a| (2**-1074 below 2**-1021; 2**971 on the top binade, whose last
        # value's np.spacing would overflow to inf)
        return np.spacing(np.minimum(np.abs(a), 2.0**1023)).view(np.uint64)
    field = a.view(np.uint64) & np.uint64(0x7FF0000000000000)
    np.maximum(field, np.uint64((f.emin + 1023) << 52), out=field)
    field -= np.uint64((f.precision - 1) << 52)
    return field


@own_flags
def round_to(
    x: ArrayLike,
    fmt: str | Format,
    mode: str | Mode = "nearest_even",
    rng: np.random.Generator | int | None = None,
    *,
    threads: int | None = 1,
) -> NDArray[np.floating]:
    """Round values onto ``fmt`` once, correctly, in ``mode``.

    Args:
        x: float values (any float dtype; widened exactly to float64).
        fmt: format name or Format.
        mode: rounding mode name.
        rng: numpy Generator or seed, required for ``stochastic``.
        threads: the threads of the compiled pass of float32 to bf16 or tf32 to nearest (None: every core, one
            per million elements at most); the same bits for any number.

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
    a0 = as_float_array(x, "round_to expects a float array, got dtype {dtype}; convert with .astype(np.float64)")
    if m is Mode.STOCHASTIC:
        if rng is None:
            raise InvalidArgument("stochastic rounding needs rng= (a numpy Generator or a seed)")
        rng = np.random.default_rng(rng)
    if a0.ndim == 0:  # a scalar gives a 0-d array (np.ascontiguousarray below would add a dimension)
        return round_to(a0.reshape(1), f, m, rng, threads=threads).reshape(())
    if f.precision == 53:
        return np.array(a0, dtype=np.float64)
    if a0.dtype == np.float32 and f.precision >= 24:
        return a0.astype(f.value_dtype)  # float32 values are fp32 (and fp64) values
    if m is Mode.NEAREST_EVEN and a0.dtype == np.float64 and f.name == "fp32":
        with np.errstate(over="ignore"):  # IEEE conversion rounds once, overflow to ±Inf (tested vs Fraction)
            return a0.astype(np.float32)
    if m is Mode.NEAREST_EVEN and a0.dtype == np.float32:
        if f.emin == -126:
            return _nearest_from_float32(np.ascontiguousarray(a0), f, check_threads(threads))
        if f.name == "fp16":  # IEEE conversion from float32 rounds once (tested vs Fraction)
            with np.errstate(over="ignore"):
                return a0.astype(np.float16).astype(np.float32)
    a = np.ascontiguousarray(a0, dtype=np.float64)
    res = np.empty(a.shape, dtype=f.value_dtype)
    flat, rflat = a.reshape(-1), res.reshape(-1)
    size = min(flat.size, _CHUNK)  # cache-sized chunks with reused scratch: no fresh pages per pass
    qb = np.empty(size, dtype=np.uint64)
    sb = np.empty(size, dtype=np.uint64)
    u = np.empty(size) if m is Mode.STOCHASTIC else None
    for lo in range(0, flat.size, _CHUNK):
        hi = min(flat.size, lo + _CHUNK)
        w = hi - lo
        rflat[lo:hi] = _round_chunk(flat[lo:hi], f, m, rng, qb[:w], sb[:w], None if u is None else u[:w])
    return res


_CHUNK = 1 << 15


def _round_chunk(a, f: Format, m: Mode, rng, qb, sb, u):  # type: ignore[no-untyped-def]
    """``round_to`` of a float64 chunk, with scratch arrays ``qb``, ``sb`` (and ``u``) of its size."""
    np.bitwise_and(a.view(np.uint64), np.uint64(0x7FF0000000000000), out=qb)  # see quantum_bits
    np.maximum(qb, np.uint64((f.emin + 1023) << 52), out=qb)
    small = int(np.max(qb)) < (f.emax + 1023) << 52  # every |a| < 2**emax: no overflow, no NaN or Inf
    qb -= np.uint64((f.precision - 1) << 52)  # 2**k and 2**-k (|k| < 1023 for every format but fp64)
    q = qb.view(np.float64)
    np.subtract(np.uint64(2046 << 52), qb, out=sb)
    s = sb.view(np.float64)  # 2**-k
    with np.errstate(invalid="ignore", over="ignore"):
        np.multiply(a, s, out=s)  # exact: a power of two, and s has at most 53 bits
        if m is not Mode.STOCHASTIC:
            ufunc = {Mode.NEAREST_EVEN: np.rint, Mode.TOWARD_ZERO: np.trunc, Mode.UP: np.ceil, Mode.DOWN: np.floor}[m]
            r = ufunc(s, out=s)  # in place
        else:
            assert isinstance(rng, np.random.Generator)
            lo = np.floor(s)
            frac = s - lo  # exact
            rng.random(out=u)  # the same stream as one rng.random(size=x.shape)
            r = np.copysign(lo + (u < frac), s)  # -0.0 for negatives rounding to zero
        out = np.multiply(r, q, out=r)  # rint/trunc/ceil/floor keep the sign of zero
        if small:  # |out| <= 2**emax <= max_finite (the usual case)
            return out
        big = np.abs(out, out=q) > f.max_finite
        if np.any(big):
            over = big & np.isfinite(a)
            out = np.where(over, overflow_value(f, m, a < 0), out)
        if not f.has_inf:
            out = np.where(np.isinf(a), np.nan, out)
    return out


def round_in_place(x: NDArray[np.floating], f: Format, mode: Mode, threads: int | None = 1) -> bool:
    """Round the float32 array ``x`` onto ``f`` to nearest even in place, when ``f`` has fp32's exponent range
    (bf16, tf32) and the compiled pass runs; False (``x`` untouched) otherwise: the caller rounds into a new array
    (:func:`round_to`). For an array the caller owns: a fresh 4 MB result per reduction faulted its pages in on
    every call (2**20 sums at 2 threads: 5-6 ms of a 6 ms reduction, the threads' page faults contending)."""
    if (
        mode is not Mode.NEAREST_EVEN
        or f.emin != -126
        or f.precision >= 24
        or x.dtype != np.float32
        or not x.flags.c_contiguous
        or not x.flags.writeable
        or not _compiled32(x.size)
    ):
        return False
    _nearest_from_float32(x, f, threads, out=x)
    return True


def _nearest_from_float32(
    x: NDArray[np.float32], f: Format, threads: int | None = 1, out: NDArray[np.float32] | None = None
) -> NDArray[np.float32]:
    """Round-to-nearest-even of float32 onto a format with fp32's exponent range.

    The integer trick of ``_nearest32_inplace``, from ``x`` straight into a new
    array, in cache-sized blocks. NaNs are kept as a quiet NaN. With numba, an array of
    4096 elements or more is rounded by ``_nearest32_bits`` in one compiled pass (the same
    bits; 64 x 2**16 float32 to bf16 took 11 ms in numpy's passes, the runner's input
    rounding), split over ``threads`` (:func:`fpreduce.base.threads.resolve`).
    """
    src = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(src.shape, dtype=np.float32) if out is None else out  # (``out`` may be ``x``: elementwise)
    xb, ob = src.reshape(-1).view(np.uint32), out.reshape(-1).view(np.uint32)
    if _compiled32(xb.size):
        kernel, d32 = _NEAREST32, np.uint32(24 - f.precision)
        assert kernel is not None  # (_compiled32)
        spans = split(xb.size, resolve(threads, xb.size), align=1024)
        threads_run(kernel, [(xb[a:b], ob[a:b], d32) for a, b in spans])
        return out
    block = 1 << 15
    tmp = np.empty(min(xb.size, block), dtype=np.uint32)
    drop = 24 - f.precision
    for lo in range(0, xb.size, block):
        bits = xb[lo : lo + block]
        t = tmp[: bits.size]
        np.right_shift(bits, np.uint32(drop), out=t)
        t &= np.uint32(1)
        t += np.uint32((1 << (drop - 1)) - 1)
        t += bits
        np.bitwise_and(t, np.uint32((0xFFFFFFFF >> drop) << drop), out=ob[lo : lo + block])
        blk = src.reshape(-1)[lo : lo + block]
        if np.isnan(np.max(blk)):
            nan = np.isnan(blk)
            out.reshape(-1)[lo : lo + block][nan] = np.float32(np.nan)
    return out


def _nearest32_bits(xb, ob, drop):  # type: ignore[no-untyped-def]
    """``_nearest_from_float32`` compiled, one pass: ob[i] <- the pattern ``xb[i]`` rounded to nearest even at bit
    ``drop`` (the same integer steps), a NaN the quiet NaN 0x7FC00000 (numpy's ``np.float32(np.nan)``)."""
    one = np.uint32(1)
    half = (one << (drop - one)) - one
    keep = ~((one << drop) - one)
    for i in range(xb.size):
        b = xb[i]
        r = (b + ((b >> drop) & one) + half) & keep
        ob[i] = np.uint32(0x7FC00000) if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000) else r


_NEAREST32 = jit.jit(_nearest32_bits, "rounding float32 to bf16/tf32")
_COMPILED_FROM = 1 << 12  # elements: fewer take numpy's passes (no first compile for a small array)


def _compiled32(size: int) -> bool:
    """Whether ``size`` elements are rounded to bf16/tf32 by the compiled pass (``_nearest32_bits``)."""
    return jit.enabled() and _NEAREST32 is not None and size >= _COMPILED_FROM


def _nearest32_inplace(acc: NDArray[np.float32], f: Format, tmp: NDArray[np.uint32]) -> None:
    """Round float32 to nearest even onto bf16/tf32 in place.

    NaNs stay NaN: the engine only sees the quiet NaN of inputs (canonicalized on
    loading) and of inf - inf, whose payload keeps the rounding from carrying.
    """
    drop = 24 - f.precision
    bits = acc.view(np.uint32)
    t = tmp[: acc.size].reshape(acc.shape)
    np.right_shift(bits, np.uint32(drop), out=t)
    t &= np.uint32(1)
    t += np.uint32((1 << (drop - 1)) - 1)
    t += bits
    np.bitwise_and(t, np.uint32((0xFFFFFFFF >> drop) << drop), out=bits)


def _directed(s: NDArray[np.float64], err: NDArray[np.float64], f: Format, mode: Mode):  # type: ignore[no-untyped-def]
    """Round ``s + err`` (err: the exact remainder, or one of its sign) in a directed mode."""
    if f.precision == 53:
        if mode is Mode.UP:
            return np.where(err > 0, np.nextafter(s, np.inf), s)
        if mode is Mode.DOWN:
            return np.where(err < 0, np.nextafter(s, -np.inf), s)
        toward = (err != 0) & (np.signbit(err) != np.signbit(s))
        return np.where(toward, np.nextafter(s, 0.0), s)
    on_grid = round_to(s, f, Mode.TOWARD_ZERO).astype(np.float64) == s
    nudge = on_grid & (err != 0)
    t = np.where(nudge, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return round_to(t, f, mode).astype(np.float64)


def _round_with_remainder(s, err, f: Format, mode: Mode, rng):  # type: ignore[no-untyped-def]
    """Round the exact value ``s + err`` (s a float64, err its remainder) in a directed or stochastic mode."""
    if mode is not Mode.STOCHASTIC:
        return _directed(s, err, f, mode)
    lo = _directed(s, err, f, Mode.DOWN)
    hi = _directed(s, err, f, Mode.UP)
    gap = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        p = ((s - lo) + err) / gap
    u = rng.random(size=s.shape)
    return np.where((gap > 0) & np.isfinite(gap) & (u < p), hi, np.where(gap > 0, lo, s))
