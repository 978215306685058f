import ml_dtypes
import numpy as np
import pytest

import fpreduce as fr
from fpreduce import InvalidArgument
from fpreduce.core.formats import FORMATS, format_name, get_format

SMALL = {
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_from_bits_matches_ml_dtypes_exhaustively(name):
    f = fr.get_format(name)
    bits = np.arange(2**f.bits, dtype=np.uint64)
    ours = fr.from_bits(bits, name).astype(np.float64)
    with np.errstate(invalid="ignore"):
        ref = bits.astype(f.uint_dtype).view(SMALL[name]).astype(np.float64)
    assert np.array_equal(np.isnan(ours), np.isnan(ref))
    ok = ~np.isnan(ref)
    assert np.array_equal(ours[ok].view(np.uint64), ref[ok].view(np.uint64))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_bits_round_trip_exhaustively(name):
    f = fr.get_format(name)
    bits = np.arange(2**f.bits, dtype=np.uint64).astype(f.uint_dtype)
    vals = fr.from_bits(bits, name)
    back = fr.to_bits(vals, name)
    ok = ~np.isnan(vals)
    assert np.array_equal(back[ok], bits[ok])
    # NaNs map to the canonical NaN, which decodes to NaN
    assert np.all(np.isnan(fr.from_bits(back[~ok], name)))


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_ulp_is_gap_to_next_exhaustively(name):
    f = fr.get_format(name)
    bits = np.arange(2 ** (f.bits - 1) - 1, dtype=np.uint64)  # positive, below the last
    v = fr.from_bits(bits, name).astype(np.float64)
    nxt = fr.from_bits(bits + 1, name).astype(np.float64)
    ok = np.isfinite(v) & np.isfinite(nxt)
    assert np.array_equal(fr.ulp(v[ok], name), nxt[ok] - v[ok])


@pytest.mark.parametrize(
    ("name", "maxv", "sub"),
    [
        ("fp32", float(np.finfo(np.float32).max), 2.0**-149),
        ("fp16", 65504.0, 2.0**-24),
        ("bf16", float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), 2.0**-133),
        ("tf32", (2 - 2**-10) * 2.0**127, 2.0**-136),
        ("fp8_e4m3", 448.0, 2.0**-9),
        ("fp8_e5m2", 57344.0, 2.0**-16),
        ("fp64", float(np.finfo(np.float64).max), 2.0**-1074),
    ],
)
def test_table_limits(name, maxv, sub):
    f = fr.get_format(name)
    assert f.max_finite == maxv
    assert f.smallest_subnormal == sub
    assert f.unit_roundoff == 2.0**-f.precision


def test_fp32_and_fp64_bits_match_numpy():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(1000).astype(np.float32) * np.float32(1e-30)
    assert np.array_equal(fr.to_bits(x, "fp32"), x.view(np.uint32))
    y = rng.standard_normal(1000) * 1e300
    assert np.array_equal(fr.to_bits(y, "fp64"), y.view(np.uint64))
    assert np.array_equal(fr.from_bits(x.view(np.uint32), "fp32").view(np.uint32), x.view(np.uint32))


def test_tf32_stored_in_32_bits_low_bits_zero():
    assert int(fr.to_bits(1.0, "tf32")) == 0x3F800000
    assert int(fr.to_bits(1 + 2**-10, "tf32")) == 0x3F802000


def test_signed_zero_bits():
    assert int(fr.to_bits(-0.0, "bf16")) == 0x8000
    assert np.signbit(fr.from_bits(0x8000, "fp16"))


def test_unknown_format_hint():
    with pytest.raises(fr.InvalidArgument, match="did you mean 'bf16'"):
        fr.get_format("bf61")


def test_to_bits_refuses_unrepresentable():
    with pytest.raises(fr.InvalidArgument, match="round_to"):
        fr.to_bits(1 + 2**-20, "bf16")
    with pytest.raises(fr.InvalidArgument, match="float array"):
        fr.to_bits(np.arange(3), "bf16")


def test_one_float_dtype_guard_for_every_entry_point():
    from fpreduce.base.dtypes import as_float_array, is_float_dtype
    from fpreduce.core.algorithms import compensated

    for dt in (np.float16, np.float32, np.float64, *SMALL.values()):
        assert is_float_dtype(np.dtype(dt))
    for dt in (np.int32, np.uint8, np.bool_, np.complex64, object):
        assert not is_float_dtype(np.dtype(dt))
    with pytest.raises(fr.InvalidArgument, match="got int64"):
        as_float_array(np.arange(3), "need floats, got {dtype}")
    ints = np.ones((3, 2), dtype=np.int64)
    for call in (
        lambda: fr.reduce(ints, "sequential"),
        lambda: fr.exact_sum(ints),
        lambda: fr.round_to(ints, "bf16"),
        lambda: fr.to_bits(ints, "bf16"),
        lambda: compensated(ints, "bf16"),
    ):
        with pytest.raises(fr.InvalidArgument, match="float array"):
            call()


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ("bfloat16", "bf16"),
        ("BF16", "bf16"),
        ("float16", "fp16"),
        ("half", "fp16"),
        ("float32", "fp32"),
        ("double", "fp64"),
        ("float8_e4m3fn", "fp8_e4m3"),
        ("float8_e5m2", "fp8_e5m2"),
        (np.float16, "fp16"),
        (np.dtype("float32"), "fp32"),
        (np.float64, "fp64"),
        ("torch.bfloat16", "bf16"),
        ("np.float16", "fp16"),
        ("numpy.float32", "fp32"),
        ("ml_dtypes.float8_e4m3fn", "fp8_e4m3"),
        (" Torch.Half ", "fp16"),
        (ml_dtypes.bfloat16, "bf16"),
        (np.dtype(ml_dtypes.float8_e5m2), "fp8_e5m2"),
    ],
    ids=lambda v: str(v),
)
def test_format_names_as_people_write_them(given: object, name: str) -> None:
    assert format_name(given) == name
    assert get_format(given) is FORMATS[name]


def test_format_names_of_ml_dtypes_and_torch_dtypes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert [format_name(t) for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)] == [
        "bf16",
        "fp8_e4m3",
        "fp8_e5m2",
    ]
    torch = pytest.importorskip("torch")
    assert [format_name(t) for t in (torch.bfloat16, torch.float16, torch.float32, torch.float64)] == [
        "bf16",
        "fp16",
        "fp32",
        "fp64",
    ]


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_spelling_of_a_format_is_accepted(name: str) -> None:
    """What ``fpreduce list formats`` shows (spellings), in any case, and numpy.X for np.X."""
    from fpreduce.core.formats import spellings

    for s in spellings(name):
        for t in {s, s.upper(), s.replace("np.", "numpy.") if s.startswith("np.") else s}:
            assert format_name(t) == name, t


def test_every_torch_floating_dtype_of_a_format_is_named_and_the_others_refused() -> None:
    torch = pytest.importorskip("torch")
    from fpreduce.core.formats import LIBRARY_DTYPES

    for d, name in LIBRARY_DTYPES["torch"].items():
        assert format_name(getattr(torch, d)) == name
    dtypes = {d: getattr(torch, d) for d in dir(torch) if isinstance(getattr(torch, d), torch.dtype)}
    for d in (d for d, t in dtypes.items() if t.is_floating_point):
        if d not in LIBRARY_DTYPES["torch"]:  # float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu, ...: other formats
            with pytest.raises(InvalidArgument, match="not one of fpreduce's formats"):
                format_name(getattr(torch, d))


@pytest.mark.parametrize(
    "given",
    ["ml_dtypes.float8_e4m3", "torch.float8_e4m3fnuz", "np.float128", np.longdouble, ml_dtypes.float8_e4m3fnuz],
    ids=str,
)
def test_other_library_formats_are_refused_not_taken_for_a_neighbour(given: object) -> None:
    with pytest.raises(InvalidArgument, match="not one of fpreduce's formats"):
        format_name(given)
    if hasattr(ml_dtypes, "float8_e4m3"):  # IEEE-like e4m3 with Inf (max 240): not the OCP fn format
        with pytest.raises(InvalidArgument, match="dtype float8_e4m3 is not one of fpreduce's formats"):
            format_name(ml_dtypes.float8_e4m3)


def test_unknown_format_names() -> None:
    with pytest.raises(InvalidArgument, match=r"unknown format 'bfloat61'; did you mean 'bf16'\?"):
        get_format("bfloat61")
    with pytest.raises(InvalidArgument, match="floating-point format, got dtype int32"):
        get_format(np.int32)
    with pytest.raises(InvalidArgument, match="unknown format"):
        get_format(None)


@pytest.mark.parametrize("name", list(FORMATS))
def test_as_native_holds_the_same_bits_as_ml_dtypes_lays_them_out(name):
    """A result handed back in its own dtype: same values, and the dtype's own bits are ours."""
    from fpreduce.core.formats import NATIVE_DTYPES, as_native, to_bits

    f = get_format(name)
    rng = np.random.default_rng(1)
    big = min(f.max_finite, 1e30)
    x = np.concatenate([rng.normal(size=200) * 10.0 ** rng.integers(-8, 8, 200), [0.0, -0.0, big, -big]])
    if f.precision < 53:
        x = np.concatenate([x, [f.smallest_subnormal, -3 * f.smallest_subnormal]])
    y = fr.round_to(np.clip(x, -big, big), name)
    z = as_native(y, name)
    assert z.dtype.name == NATIVE_DTYPES[name]
    np.testing.assert_array_equal(z.astype(np.float64), np.asarray(y, dtype=np.float64))
    assert np.array_equal(np.signbit(z.astype(np.float64)), np.signbit(np.asarray(y, dtype=np.float64)))
    if name != "tf32":  # tf32 has no storage type of its own
        raw = z.view(np.dtype(f"uint{z.dtype.itemsize * 8}"))
        np.testing.assert_array_equal(raw, to_bits(y, name))


def test_as_native_refuses_to_round():
    from fpreduce.core.formats import as_native

    with pytest.raises(InvalidArgument, match="bf16"):
        as_native(np.array([1.0 + 2.0**-10]), "bfloat16")
