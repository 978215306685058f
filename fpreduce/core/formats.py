"""The table of binary floating-point formats, ulp, and bit views.

Formats are data: one frozen dataclass, one row per format. Adding a format is
adding a row.

NaN, Inf, -0.0: ``to_bits`` maps -0.0 to the pattern with only the sign bit set,
±Inf to the all-ones exponent with a zero fraction (formats with Inf), and any NaN
to the format's canonical quiet NaN (fp8_e4m3: S.1111.111). ``from_bits`` decodes
every pattern, NaN patterns to ``nan``.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fpreduce.base.dtypes import dtype_name, is_float_dtype, is_tensor
from fpreduce.base.errors import InvalidArgument, unknown_name

__all__ = [
    "ALIASES",
    "FORMATS",
    "NATIVE_DTYPES",
    "Format",
    "LIBRARY_DTYPES",
    "as_native",
    "format_name",
    "input_format",
    "spellings",
    "from_bits",
    "get_format",
    "holds",
    "to_bits",
    "ulp",
]

Overflow = Literal["inf", "nan"]


@dataclass(frozen=True)
class Format:
    """A binary floating-point format.

    Attributes:
        name: canonical name (``fp32``, ``bf16``, ...).
        bits: storage width of ``to_bits`` patterns (tf32 is stored in 32 bits
            with the low 13 fraction bits zero, as NVIDIA hardware holds it).
        precision: significand bits including the implicit bit (p).
        exponent_bits: width of the exponent field.
        emin: exponent of the smallest normal number, 2**emin.
        emax: exponent of the largest binade.
        has_inf: whether the format encodes ±Inf.
        overflow: what a rounded overflow becomes in nearest mode: ``inf``
            (IEEE) or ``nan`` (fp8_e4m3, OCP "fn" non-saturating).
        max_finite: the largest finite value.
    """

    name: str
    bits: int
    precision: int
    exponent_bits: int
    emin: int
    emax: int
    has_inf: bool
    overflow: Overflow
    max_finite: float

    @property
    def fraction_bits(self) -> int:
        """Stored fraction bits (precision - 1)."""
        return self.precision - 1

    @property
    def smallest_normal(self) -> float:
        """2**emin."""
        return float(2.0**self.emin)

    @property
    def smallest_subnormal(self) -> float:
        """2**(emin - p + 1)."""
        return float(2.0 ** (self.emin - self.precision + 1))

    @property
    def unit_roundoff(self) -> float:
        """u = 2**-p, the relative error bound of round-to-nearest."""
        return float(2.0 ** (-self.precision))

    @property
    def bias(self) -> int:
        """Exponent bias: stored exponent = e + bias."""
        return 1 - self.emin

    @property
    def storage_bits(self) -> int:
        """Bits actually carrying information (19 for tf32)."""
        return 1 + self.exponent_bits + self.fraction_bits

    @property
    def uint_dtype(self) -> np.dtype[np.unsignedinteger]:
        """The unsigned integer dtype of ``to_bits`` patterns."""
        return np.dtype(f"uint{self.bits}")  # type: ignore[return-value]

    @property
    def value_dtype(self) -> np.dtype[np.floating]:
        """float32 for every format but fp64 (all hold exactly in float32)."""
        return np.dtype(np.float64 if self.precision > 24 else np.float32)


def _row(
    name: str, bits: int, p: int, ebits: int, *, inf: bool = True, emax: int | None = None, max_frac_ulps: int = 0
) -> Format:
    bias = 2 ** (ebits - 1) - 1
    emin = 1 - bias
    if emax is None:
        emax = bias
    # max finite: (2 - 2**(1-p)) * 2**emax, less max_frac_ulps ulps (e4m3fn: NaN at 1.111)
    max_finite = float((2**p - 1 - max_frac_ulps) * 2.0 ** (emax - p + 1))
    return Format(name, bits, p, ebits, emin, emax, inf, "inf" if inf else "nan", max_finite)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        _row("fp64", 64, 53, 11),
        _row("fp32", 32, 24, 8),
        _row("tf32", 32, 11, 8),
        _row("bf16", 16, 8, 8),
        _row("fp16", 16, 11, 5),
        # OCP FP8 E4M3 ("fn"): no inf, the all-ones exponent is a normal binade,
        # S.1111.111 is NaN, so max = 1.110b * 2**8 = 448.
        _row("fp8_e4m3", 8, 4, 4, inf=False, emax=8, max_frac_ulps=1),
        _row("fp8_e5m2", 8, 3, 5),
    )
}


#: other spellings of the format names: numpy's, ml_dtypes', torch's and the common words
ALIASES: dict[str, str] = {
    "float64": "fp64",
    "double": "fp64",
    "f8": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "single": "fp32",
    "f4": "fp32",
    "tensorfloat32": "tf32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "f2": "fp16",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e4m3": "fp8_e4m3",
    "e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
    "e5m2": "fp8_e5m2",
}

#: the dtypes of the formats in each library, by the names the library gives them (``np.`` spells ``numpy.``)
LIBRARY_DTYPES: dict[str, dict[str, str]] = {
    "numpy": {
        "float64": "fp64",
        "double": "fp64",
        "float32": "fp32",
        "single": "fp32",
        "float16": "fp16",
        "half": "fp16",
    },
    "ml_dtypes": {"bfloat16": "bf16", "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"},
    "torch": {
        "float64": "fp64",
        "double": "fp64",
        "float32": "fp32",
        "float": "fp32",
        "float16": "fp16",
        "half": "fp16",
        "bfloat16": "bf16",
        "float8_e4m3fn": "fp8_e4m3",
        "float8_e5m2": "fp8_e5m2",
    },
}
_LIBRARIES = {"np": "numpy", "numpy": "numpy", "ml_dtypes": "ml_dtypes", "torch": "torch"}


def spellings(name: str) -> list[str]:
    """Every way :func:`format_name` accepts of writing format ``name``, but case and the ``numpy.`` twin of
    ``np.``: the name, its aliases and its library dtypes (``torch.bfloat16``).

    >>> spellings("bf16")
    ['bf16', 'bfloat16', 'ml_dtypes.bfloat16', 'torch.bfloat16']
    """
    lib = [f"{'np' if k == 'numpy' else k}.{d}" for k, ds in LIBRARY_DTYPES.items() for d, n in ds.items() if n == name]
    return [name, *(a for a, n in ALIASES.items() if n == name), *lib]


@functools.lru_cache(maxsize=64)
def _dtype_format(dt: np.dtype) -> str:
    """The format of a numpy (or ml_dtypes) dtype, by the table: ml_dtypes' other float8 types (``float8_e4m3``:
    IEEE-like, with Inf; the ``fnuz`` ones) are other formats and are refused, never taken for a neighbour.
    Cached by dtype: numpy's ``dtype.name`` alone costs microseconds, and every ``reduce`` asks."""
    if dt.kind in "iub":
        raise InvalidArgument(f"expected a floating-point format, got dtype {dt.name}")
    known = {**LIBRARY_DTYPES["numpy"], **LIBRARY_DTYPES["ml_dtypes"]}
    if dt.name in known:
        return known[dt.name]
    theirs = ", ".join(dict.fromkeys(NATIVE_DTYPES.values()))
    raise InvalidArgument(f"dtype {dt.name} is not one of fpreduce's formats (their dtypes: {theirs})")


def format_name(fmt: object) -> str:
    """The canonical name (a key of :data:`FORMATS`) of a format given as people write it.

    Accepts the names (``bf16``), their aliases (``bfloat16``, ``float16``, ``half``,
    ``float8_e4m3fn``, ...; any case), the library dtypes written out (``np.float16``,
    ``numpy.float32``, ``ml_dtypes.float8_e4m3fn``, ``torch.bfloat16``: :func:`spellings`), a
    :class:`Format`, and dtype objects: numpy's (``np.float16``, ``np.dtype("float32")``),
    ml_dtypes' (``ml_dtypes.bfloat16``) and torch's (``torch.bfloat16``), without importing
    either library.

    >>> format_name("bfloat16"), format_name(np.float16), format_name("FP32"), format_name("torch.bfloat16")
    ('bf16', 'fp16', 'fp32', 'bf16')

    Raises:
        InvalidArgument: unknown name or dtype, with a close-match hint.
    """
    if isinstance(fmt, Format):
        return fmt.name
    if fmt is None:  # np.dtype(None) would say float64
        raise InvalidArgument(f"unknown format None (choices: {', '.join(FORMATS)})")
    text = fmt if isinstance(fmt, str) else None
    if text is None:
        if type(fmt).__module__.split(".")[0] == "torch":  # torch.bfloat16 prints as "torch.bfloat16"
            text = str(fmt)
        else:
            try:
                dt = np.dtype(fmt)  # type: ignore[call-overload]
            except TypeError:
                text = str(fmt)
            else:
                return _dtype_format(dt)
    key = text.strip().lower()
    if key in FORMATS:
        return key
    if key in ALIASES:
        return ALIASES[key]
    lib, _, dtype = key.rpartition(".")
    if lib in _LIBRARIES:
        known = LIBRARY_DTYPES[_LIBRARIES[lib]]
        if dtype in known:
            return known[dtype]
        raise InvalidArgument(  # no close-match hint: torch.float8_e4m3fnuz is not torch.float8_e4m3fn's format
            f"unknown format {text!r}: not one of fpreduce's formats "
            f"(its {_LIBRARIES[lib]} dtypes: {', '.join(f'{lib}.{d}' for d in known)})"
        )
    words = [*FORMATS, *ALIASES, *(s for n in FORMATS for s in spellings(n))]
    close = difflib.get_close_matches(key, words, n=1)
    hint = {key: format_name(close[0])} if close else None
    raise unknown_name("format", text, FORMATS, aliases=hint)


def get_format(fmt: object) -> Format:
    """Look up a format by name, alias or dtype (see :func:`format_name`).

    >>> get_format("bf16").precision
    8
    >>> get_format("bfloat16") is get_format("bf16")
    True

    Raises:
        InvalidArgument: unknown name, with a close-match hint.
    """
    if isinstance(fmt, Format):
        return fmt
    return FORMATS[format_name(fmt)]


def _as_float64(x: ArrayLike) -> NDArray[np.float64]:
    a = np.asarray(x)
    if not is_float_dtype(a.dtype):
        if a.dtype.kind in "iu" or a.dtype == bool:
            raise InvalidArgument(f"expected a float array, got dtype {a.dtype}; convert with .astype(np.float64)")
        raise InvalidArgument(f"expected a float array, got dtype {a.dtype}")
    return np.asarray(a, dtype=np.float64)


def ulp(x: ArrayLike, fmt: str | Format) -> NDArray[np.float64]:
    """The unit in the last place of ``x`` in ``fmt``: 2**(max(e, emin) - p + 1).

    ``e`` is the exponent of |x| (``floor(log2|x|)``); for 0 and subnormals the ulp is
    the smallest subnormal. ±Inf and NaN give NaN. Values need not be representable.

    >>> float(ulp(1.0, "bf16"))
    0.0078125
    """
    f = get_format(fmt)
    a = _as_float64(x)
    _, e = np.frexp(np.abs(a))
    e = np.where(a == 0, f.emin, np.maximum(e.astype(np.int64) - 1, f.emin))
    out = np.ldexp(1.0, (e - f.precision + 1).astype(np.int32))
    return np.where(np.isfinite(a), out, np.nan)


def to_bits(x: ArrayLike, fmt: str | Format) -> NDArray[np.unsignedinteger]:
    """Bit patterns of values representable in ``fmt``.

    Values must already be representable (use ``round_to`` first); a value that is
    not raises InvalidArgument rather than being rounded silently.

    >>> hex(int(to_bits(1.0, "bf16")))
    '0x3f80'
    """
    f = get_format(fmt)
    a = _as_float64(x)
    a = np.atleast_1d(a) if a.ndim == 0 else a
    nan = np.isnan(a)
    inf = np.isinf(a)
    fin = ~(nan | inf)
    absa = np.where(fin, np.abs(a), 0.0)
    if np.any(absa > f.max_finite) or (np.any(inf) and not f.has_inf):
        raise InvalidArgument(f"value out of range for {f.name}; round with round_to first")
    sign = np.signbit(a).astype(np.uint64)
    if f.name == "fp64":
        bits = np.ascontiguousarray(a).view(np.uint64).copy()
        out = bits
    else:
        m, e = np.frexp(absa)  # absa = m * 2**e, m in [0.5, 1)
        e = e.astype(np.int64) - 1
        normal = (e >= f.emin) & (absa > 0)
        biased = np.where(normal, e + f.bias, 0)
        scale_e = np.where(normal, e, f.emin) - f.fraction_bits
        sig = np.ldexp(absa, (-scale_e).astype(np.int32))  # integer significand
        if np.any(sig != np.floor(sig)):
            raise InvalidArgument(f"value not representable in {f.name}; round with round_to first")
        frac = sig.astype(np.uint64) & np.uint64((1 << f.fraction_bits) - 1)
        body = (biased.astype(np.uint64) << np.uint64(f.fraction_bits)) | frac
        out = (sign << np.uint64(f.storage_bits - 1)) | body
        emask = np.uint64(((1 << f.exponent_bits) - 1) << f.fraction_bits)
        if f.has_inf:
            out = np.where(inf, (sign << np.uint64(f.storage_bits - 1)) | emask, out)
            qnan = emask | np.uint64(1 << (f.fraction_bits - 1))
        else:
            qnan = emask | np.uint64((1 << f.fraction_bits) - 1)
        out = np.where(nan, qnan, out)
        out = out << np.uint64(f.bits - f.storage_bits)
    res = out.astype(f.uint_dtype)
    return res.reshape(np.shape(x)) if np.ndim(x) == 0 else res


def from_bits(bits: ArrayLike, fmt: str | Format) -> NDArray[np.floating]:
    """Values of bit patterns, as float32 (float64 for fp64).

    >>> float(from_bits(0x3F80, "bf16"))
    1.0
    """
    f = get_format(fmt)
    b = np.asarray(bits)
    if b.dtype.kind not in "iu":
        raise InvalidArgument(f"bit patterns must be integers, got dtype {b.dtype}")
    b = b.astype(np.uint64)
    if np.any(b >> np.uint64(f.bits) if f.bits < 64 else False):
        raise InvalidArgument(f"bit pattern wider than {f.bits} bits for {f.name}")
    if f.name == "fp64":
        return np.ascontiguousarray(b).view(np.float64).copy()
    b = b >> np.uint64(f.bits - f.storage_bits)
    sign = (b >> np.uint64(f.storage_bits - 1)) & np.uint64(1)
    expf = ((b >> np.uint64(f.fraction_bits)) & np.uint64((1 << f.exponent_bits) - 1)).astype(np.int64)
    frac = (b & np.uint64((1 << f.fraction_bits) - 1)).astype(np.float64)
    emax_field = (1 << f.exponent_bits) - 1
    normal = expf > 0
    sig = np.where(normal, frac + 2.0**f.fraction_bits, frac)
    e = np.where(normal, expf - f.bias, f.emin) - f.fraction_bits
    val = np.ldexp(sig, e.astype(np.int32))
    if f.has_inf:
        special = expf == emax_field
        val = np.where(special, np.where(frac == 0, np.inf, np.nan), val)
    else:
        val = np.where((expf == emax_field) & (frac == (1 << f.fraction_bits) - 1), np.nan, val)
    val = np.where(sign == 1, -val, val)
    return val.astype(f.value_dtype)


#: the dtype holding each format natively: numpy's own, else ml_dtypes' (tf32 has none: float32)
NATIVE_DTYPES = {
    "fp64": "float64",
    "fp32": "float32",
    "tf32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
}


def as_native(values: ArrayLike, fmt: object, like: object = None) -> Any:
    """Values of ``fmt`` (as ``reduce`` returns them, float32 or float64) in the format's own dtype.

    numpy's float16/32/64, ml_dtypes' bfloat16 and float8 types (``pip install
    ml_dtypes``), float32 for tf32 (no native type); a torch tensor of the format's dtype
    (float32 for tf32) on ``like``'s device when ``like`` is a torch tensor. The values must
    already be representable: the cast is exact and checked, never a second rounding.

    Raises:
        InvalidArgument: a value not representable in ``fmt``, or ml_dtypes missing.
    """
    f = get_format(fmt)
    a = _as_float64(values)
    to_bits(a, f)  # refuses a value fmt cannot hold (the cast below would round it)
    if is_tensor(like):
        return _as_tensor(a, f, like)
    name = NATIVE_DTYPES[f.name]
    if name in ("float64", "float32", "float16"):
        dtype: Any = np.dtype(name)
    else:
        try:
            import ml_dtypes
        except ImportError:
            raise InvalidArgument(f"{f.name} arrays need ml_dtypes: pip install ml_dtypes") from None
        dtype = np.dtype(getattr(ml_dtypes, name))
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(dtype)


def _as_tensor(a: NDArray[np.float64], f: Format, like: Any) -> Any:
    """Representable values ``a`` of ``f`` as a torch tensor of ``f``'s dtype on ``like``'s device (exact casts:
    float64 -> float32 -> the format's dtype, both exact for its values)."""
    import sys

    torch = sys.modules[type(like).__module__.split(".")[0]]
    wide = np.array(a, dtype=np.float64 if f.precision > 24 else np.float32)  # a writable copy (0-d stays 0-d)
    t = torch.from_numpy(wide).to(getattr(torch, NATIVE_DTYPES[f.name]))
    return t if like.device.type == "cpu" else t.to(like.device)


def holds(wide: Format, narrow: Format) -> bool:
    """Whether every value of ``narrow`` is a value of ``wide`` (subnormals, Inf and NaN included)."""
    return wide.precision >= narrow.precision and wide.emin <= narrow.emin and wide.emax >= narrow.emax


def input_format(X: object, A: np.ndarray, input: object | None, who: str = "X") -> Format:
    """The input format of a reduction of ``X`` (``A``: its values as a numpy array): ``input``, else X's own.

    X's own format is its dtype's (numpy float16/32/64, ml_dtypes bfloat16 and float8, torch's
    dtypes; a list of Python floats is float64: fp64). An explicit ``input`` rounds X's values to
    it (nearest even), as documented, when X is float32 or float64: the wide dtypes that hold values
    of any narrower format. X of a narrow dtype (float16, bfloat16, float8) states its format: an
    ``input`` that cannot hold every value of it (``input="fp16"`` for a bfloat16 array,
    ``input="bf16"`` for a float16 one, ``input="fp8_e4m3"`` for either) is refused rather than
    cast; an ``input`` that holds them all (``fp32`` for bfloat16) changes no value and is taken.

    Raises:
        InvalidArgument: naming ``input`` and X's dtype.
    """
    try:
        own = get_format(dtype_name(X) if is_tensor(X) else A.dtype)
    except InvalidArgument as e:  # ml_dtypes' other types (float8_e4m3, ...), longdouble: no format of ours
        if input is None:
            raise InvalidArgument(f"{who}: {e}; pass input= (its values are rounded to that format)") from None
        return get_format(input)
    if input is None:
        return own
    fin = get_format(input)
    if own.precision >= 24 or holds(fin, own):
        return fin
    wider = ", ".join(n for n, g in FORMATS.items() if holds(g, own) and n != own.name)
    kind = "tensor" if is_tensor(X) else "array"
    raise InvalidArgument(
        f"input={fin.name!r} cannot hold every value of {who}'s own format {own.name} (a {dtype_name(X)} {kind}): "
        f"pass input={own.name!r} or one that holds it ({wider}), "
        f"or round {who} first (fr.round_to({who}, {fin.name!r}) gives float32 values of {fin.name})"
    )
