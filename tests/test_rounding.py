from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce.core.exact import round_fraction

NARROW = ["fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"]
DIRECTED = ["nearest_even", "toward_zero", "up", "down"]


def bits64(a):
    return np.asarray(a, dtype=np.float64).view(np.uint64)


def same(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    return bool(np.all(both_nan | (bits64(a) == bits64(b))))


finite64 = st.floats(allow_nan=False, allow_infinity=False, width=64)
scaled = st.builds(lambda m, e: m * 2.0**e, st.floats(-2, 2, allow_nan=False), st.integers(-160, 140))


@pytest.mark.parametrize("mode", DIRECTED)
@pytest.mark.parametrize("name", NARROW)
@given(x=st.one_of(finite64, scaled))
def test_round_to_matches_fraction_reference(name, mode, x):
    f = fr.get_format(name)
    got = fr.round_to(np.array([x]), name, mode)[0]
    want = x if x == 0 else round_fraction(Fraction(x), f, mode)
    assert same(got, want), (x, got, want)


@pytest.mark.parametrize("name", NARROW)
def test_ties_round_to_even(name):
    f = fr.get_format(name)
    one_ulp = 2.0 ** (1 - f.precision)
    grid = np.array([1.0, 1.0 + one_ulp, 2.0 * f.smallest_subnormal, f.smallest_subnormal])
    step = np.array([one_ulp, one_ulp, f.smallest_subnormal, f.smallest_subnormal])
    mids = grid + step / 2
    got = fr.round_to(mids, name).astype(np.float64)
    want = np.array([1.0, 1.0 + 2 * one_ulp, 2.0 * f.smallest_subnormal, 2.0 * f.smallest_subnormal])
    assert same(got, want)


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_idempotent_on_every_representable_value(name):
    v = fr.from_bits(np.arange(2**16, dtype=np.uint64), name)
    for mode in DIRECTED:
        assert same(fr.round_to(v, name, mode), v)
    assert same(fr.round_to(v, name, "stochastic", rng=0), v)


ML = {
    "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
    "fp16": np.float16,
}


@pytest.mark.parametrize("name", sorted(ML))
def test_float32_inputs_match_ml_dtypes_and_numpy(name):
    # from float32 there is no double rounding, so the libraries' casts are correct
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(200_000) * np.exp(rng.uniform(-40, 40, 200_000))).astype(np.float32)
    with np.errstate(over="ignore"):
        ref = x.astype(ML[name]).astype(np.float64)
    assert same(fr.round_to(x, name), ref)


def test_float64_to_fp32_and_fp16_match_numpy():
    rng = np.random.default_rng(4)
    x = rng.standard_normal(200_000) * np.exp(rng.uniform(-110, 110, 200_000))
    with np.errstate(over="ignore"):
        assert same(fr.round_to(x, "fp32"), x.astype(np.float32))
        assert same(fr.round_to(x, "fp16"), x.astype(np.float16))


def test_double_rounding_trap_bf16():
    x = 1 + 2.0**-8 + 2.0**-40
    assert fr.round_to(np.array([x]), "bf16")[0] == 1.0078125
    # the float32 route double-rounds to 1.0, which is what we must NOT do
    assert float(np.float32(x).astype(ml_dtypes.bfloat16)) == 1.0


def test_fp16_overflow_boundary():
    got = fr.round_to(np.array([65519.99, 65520.0, 65536.0, -65520.0]), "fp16")
    assert same(got, [65504.0, np.inf, np.inf, -np.inf])
    assert same(fr.round_to(np.array([1e6, -1e6]), "fp16", "toward_zero"), [65504.0, -65504.0])
    assert same(fr.round_to(np.array([1e6, -1e6]), "fp16", "up"), [np.inf, -65504.0])
    assert same(fr.round_to(np.array([1e6, -1e6]), "fp16", "down"), [65504.0, -np.inf])


def test_fp8_e4m3_saturation_rule():
    got = fr.round_to(np.array([448.0, 464.0, 470.0, np.inf, -1e9]), "fp8_e4m3")
    assert same(got, [448.0, 448.0, np.nan, np.nan, np.nan])


def test_specials_and_signed_zero():
    got = fr.round_to(np.array([np.nan, np.inf, -np.inf, -0.0, -1e-300, 1e-300]), "bf16")
    assert same(got, [np.nan, np.inf, -np.inf, -0.0, -0.0, 0.0])
    assert same(fr.round_to(np.array([1e-300]), "bf16", "up"), [2.0**-133])


def test_stochastic_is_unbiased_and_seeded():
    x = np.full(200_000, 1 + 2.0**-9)  # a quarter of the bf16 ulp above 1
    a = fr.round_to(x, "bf16", "stochastic", rng=7)
    b = fr.round_to(x, "bf16", "stochastic", rng=7)
    assert same(a, b)
    assert set(np.unique(a).tolist()) == {1.0, 1.0078125}
    frac_up = float(np.mean(a == 1.0078125))
    assert abs(frac_up - 0.25) < 0.005  # 5 sigma is ~0.0048


def test_bad_input():
    with pytest.raises(fr.InvalidArgument, match="did you mean 'nearest_even'"):
        fr.round_to(np.ones(2), "bf16", "nearest_evn")
    with pytest.raises(fr.InvalidArgument, match="float array"):
        fr.round_to(np.arange(2), "bf16")
    with pytest.raises(fr.InvalidArgument, match="rng"):
        fr.round_to(np.ones(2), "bf16", "stochastic")


@pytest.mark.parametrize("name", NARROW)
@given(x=st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_float32_fast_paths_match_fraction_reference(name, x):
    # float32 inputs take the integer (bf16/tf32) and numpy-cast (fp16) paths
    f = fr.get_format(name)
    got = fr.round_to(np.array([x], dtype=np.float32), name)[0]
    want = x if x == 0 else round_fraction(Fraction(x), f, "nearest_even")
    assert same(got, want), (x, got, want)


def test_scalars_give_zero_dimensional_results():
    out = fr.round_to(1 + 2.0**-8 + 2.0**-40, "bf16")
    assert out.shape == ()
    assert float(out) == 1.0078125
    assert fr.round_to(np.float32(3.0), "fp16", "up").shape == ()


@pytest.mark.parametrize("mode", DIRECTED + ["stochastic"])
@pytest.mark.parametrize("name", NARROW + ["fp64"])
def test_overflow_rule_is_one_function(name, mode):
    # round_to (vector), the scalar rounder (exact integers) and the Fraction reference
    # give what overflow_value says, for positive and negative overflow
    from fpreduce.core.exact import round_scaled
    from fpreduce.core.rounding import Mode, overflow_value

    f = fr.get_format(name)
    m = Mode(mode)
    for neg in (False, True):
        want = overflow_value(f, m, neg)
        v = -(2 ** (f.emax + 1)) if neg else 2 ** (f.emax + 1)  # beyond max_finite in every mode
        assert np.signbit(want) == neg  # the sign is kept, NaN included
        if f.emax < 1023:  # every float64 is an fp64 value: round_to cannot overflow there
            got = fr.round_to(np.array([float(v)]), f, mode, rng=0)
            assert bits64(got.astype(np.float64)) == bits64(want), (neg, got, want)
        assert bits64(round_scaled(v, 0, f, mode, 0.5)) == bits64(want)
        if m is not Mode.STOCHASTIC:
            assert bits64(round_fraction(Fraction(v), f, mode)) == bits64(want)
    both = overflow_value(f, m, np.array([False, True]))
    assert same(both, [overflow_value(f, m, False), overflow_value(f, m, True)])


@given(
    st.builds(Fraction, st.integers(-(2**80), 2**80), st.integers(1, 2**40)),
    st.sampled_from(NARROW + ["fp64"]),
    st.sampled_from(DIRECTED),
)
def test_round_fraction_of_any_rational_is_the_nearest_grid_point(v, name, mode):
    # the Fraction front end of the scalar rounder, against the definition: the grid
    # neighbours of v in f (exhaustive search over the binade's multiples of the quantum)
    f = fr.get_format(name)
    got = round_fraction(v, f, mode)
    if v == 0:
        assert got == 0.0
        return
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    e = e if a >= Fraction(2) ** e else e - 1
    q = Fraction(2) ** (max(e, f.emin) - f.precision + 1)
    lo = (a // q) * q
    hi = lo if lo == a else lo + q
    if mode == "nearest_even":
        pick = lo if (a - lo < hi - a or (a - lo == hi - a and (lo / q) % 2 == 0)) else hi
    elif mode == "toward_zero" or (mode == "up" and v < 0) or (mode == "down" and v > 0):
        pick = lo
    else:
        pick = hi
    if pick > Fraction(f.max_finite):
        from fpreduce.core.rounding import overflow_value

        want = float(overflow_value(f, fr.Mode(mode), v < 0))
        assert same(got, want)
    else:
        assert got == (float(pick) if v > 0 else -float(pick))


def test_compiled_float32_to_bf16_and_tf32_is_numpys_rounding_bit_for_bit():
    """float32 -> bf16, tf32 to nearest even, compiled in one pass for 4096 elements and more: the same bits as
    numpy's passes on random patterns (every exponent, NaNs of both signs and payloads, Inf, ties, the top)."""
    from fpreduce.base import jit

    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2**32, 1 << 14, dtype=np.uint64).astype(np.uint32)
    bits[:8] = [0x7F800000, 0xFF800000, 0x7FC00001, 0xFFFFFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F808000, 0x3F818000]
    x = bits.view(np.float32).reshape(128, 128)
    for fmt in ("bf16", "tf32"):
        got = fr.round_to(x, fmt)
        with jit.disabled():
            want = fr.round_to(x, fmt)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), fmt
        for t in (2, 3):  # split over threads (odd spans too): the same bits
            cut = fr.round_to(x[:, :127], fmt, threads=t)
            assert np.array_equal(cut.view(np.uint32), want[:, :127].view(np.uint32)), (fmt, t)
    assert fr.round_to(x, "bf16").reshape(-1)[6] == np.float32(1.0)  # a tie to even
    with pytest.raises(fr.InvalidArgument, match="threads"):
        fr.round_to(x, "bf16", threads=0)
