"""The engine's fast paths (float32 inputs already in their format) against the references.

``reduce`` on float32 inputs takes the fast block path (in-place fold, Veltkamp
rounding, checks gathered on the way); on float64 inputs the same values take the
general path. Both must agree bit for bit with each other and with the exact
rational ``reduce_reference``, also on data built to hit every fallback: ties,
subnormals, overflow, -0.0, NaN, Inf and inputs that need rounding.
"""

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.core import _fastpath
from fpreduce.core.formats import get_format

BLOCK = 1 << 15  # the engine's blocks of elements (core.engine), crossed below: the sizes of the data, no import
CHUNK = 1 << 15  # round_to's chunks (core.rounding), likewise

PLANS = [
    "sequential",
    "pairwise",
    "ring:nccl",
    "ring:gloo",
    "rabenseifner",
    "atomic",
    "linear",
    "rd",
    "kary:3",
    "((0,3),((2,1),(5,4)))",
]


def same(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return bool(np.all((np.isnan(a) & np.isnan(b)) | (a.view(np.uint64) == b.view(np.uint64))))


def adversarial(fmt, n, m, seed):
    """float32 values of ``fmt`` with ties, subnormals, huge values, signed zeros, NaN and Inf."""
    f = get_format(fmt)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, m)) * np.exp2(rng.integers(-8, 8, (n, m)))
    tiny = 2.0 ** (f.emin - f.precision + 1)
    X[:, 0::7] = rng.integers(-9, 10, (n, len(range(0, m, 7)))) * tiny  # subnormals, exact sums
    X[:, 1::7] = rng.choice(
        [1.0, 2.0**-f.precision, -(2.0**-f.precision), 3 * 2.0**-f.precision, -0.0, 0.0], (n, len(range(1, m, 7)))
    )  # ties and signed zeros
    X[:, 2::11] = rng.choice([1, -1], (n, len(range(2, m, 11)))) * f.max_finite * rng.choice([0.25, 0.5, 1.0])
    X[:, 3::13] = -0.0
    return fr.round_to(X, f).astype(np.float32)


def with_specials(X, rng):
    X = X.copy()
    m = X.shape[1]
    for v in (np.nan, np.inf, -np.inf):
        X[rng.integers(0, X.shape[0]), rng.integers(0, m)] = v
    return X


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize(
    ("inp", "acc"),
    [
        ("bf16", "bf16"),
        ("bf16", "fp32"),
        ("bf16", "tf32"),
        ("fp32", "fp32"),
        ("fp16", "fp16"),
        ("fp16", "fp32"),
        ("fp16", "tf32"),
        ("fp8_e5m2", "fp16"),
        ("fp8_e4m3", "fp32"),
        ("fp8_e4m3", "fp16"),
        ("fp8_e5m2", "tf32"),
    ],
)
@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
def test_fast_path_equals_fraction_reference(plan, inp, acc, special):
    rng = np.random.default_rng(1)
    X = adversarial(inp, 6, 97, seed=2)
    if special:
        X = with_specials(X, rng)
    fast = fr.reduce(X, plan, input=inp, accumulate=acc)
    general = fr.reduce(X.astype(np.float64), plan, input=inp, accumulate=acc)
    ref = fr.reduce_reference(X, plan, input=inp, accumulate=acc)
    assert same(fast, ref), plan
    assert same(general, ref), plan


@pytest.mark.parametrize("plan", ["sequential", "pairwise", "ring:nccl", "atomic"])
@pytest.mark.parametrize(("inp", "acc"), [("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp16"), ("fp32", "fp32")])
def test_fast_path_equals_general_path_over_many_blocks(plan, inp, acc):
    rng = np.random.default_rng(3)
    m = 2 * BLOCK + 101
    X = adversarial(inp, 9, m, seed=4)
    Y = X.copy()
    Y[:, : BLOCK // 2] *= np.float32(2.0**-13)  # a block of tiny sums (subnormal range)
    Z = with_specials(X, rng)  # fallback in some blocks only
    for A in (X, Y, Z):
        fast = fr.reduce(A, plan, input=inp, accumulate=acc)
        general = fr.reduce(A.astype(np.float64), plan, input=inp, accumulate=acc)
        assert same(fast, general)


@pytest.mark.parametrize("acc", ["fp16", "bf16"])
def test_overflow_and_unrounded_inputs_take_the_general_path(acc):
    f = get_format(acc)
    big = np.float32(f.max_finite)
    X = np.array([[big, big, -big, 1.0], [big, -big, big, 2.0**-30], [-big, big, big, 3.0]], dtype=np.float32)
    X = np.repeat(X, 5, axis=1)
    X[0, -1] = 1 + 2.0**-20  # not a value of the input format: rounded on input
    X[1, -2] = 2.0**-26  # below fp16's subnormals: rounded to zero (with sign) on input
    X[2, -3] = -(2.0**-27)
    for plan in ["sequential", "pairwise", "ring:nccl"]:
        ref = fr.reduce_reference(X, plan, input=acc, accumulate=acc)
        assert same(fr.reduce(X, plan, input=acc, accumulate=acc), ref)


@pytest.mark.parametrize("p", [8, 11])
def test_veltkamp_rounds_to_nearest_even(p):
    # exhaustive over 2**32 float32 patterns offline; here every exponent with random and tie mantissas
    rng = np.random.default_rng(p)
    mant = np.concatenate(
        [
            rng.integers(0, 1 << 23, 4000),
            (np.arange(4000) << (24 - p)) | (1 << (23 - p)),
            (np.arange(4000) << (24 - p)) | ((1 << (23 - p)) - 1),
        ]
    ) & ((1 << 23) - 1)
    expo = np.arange(1, 255)[:, None]
    bits = ((expo << 23) | mant[None, :]).astype(np.uint32).ravel()
    bits = np.concatenate([bits, bits | np.uint32(0x80000000)])
    x = bits.view(np.float32)
    sigma = np.float32(2.0 ** (24 - p) + 1)
    with np.errstate(over="ignore", invalid="ignore"):
        c = x * sigma
        got = c - (c - x)
    with np.errstate(over="ignore"):
        want = np.asarray(fr.round_to(x, "bf16" if p == 8 else "tf32"), dtype=np.float32)  # nearest even
    ok = np.isfinite(got)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))
    assert np.isnan(got[~ok]).all()
    assert ok[np.abs(x) < 2.0 ** (128 - (24 - p)) * 0.999].all()
    # values of p bits (subnormals included) are left alone
    sub = (np.arange(1 << 16, dtype=np.uint32) << np.uint32(24 - p)) & np.uint32(0x007FFFFF)
    xs = sub.view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        cs = xs * sigma
        assert np.array_equal((cs - (cs - xs)).view(np.uint32), sub)


def test_program_reuses_buffers():
    """Kept on the private program builder on purpose (issue 24): how many partial rows a tree keeps alive is
    memory, not bits, so no public route shows it (the bits of every tree's program: test_tall, test_routes)."""
    ops, nbuf, root = _fastpath._program(fr.plans.sequential(64).root, 64)
    assert (nbuf, len(ops), root) == (1, 63, -1)
    shape = fr.plans.pairwise(64).root
    ops, nbuf, root = _fastpath._program(shape, 64)
    assert len(ops) == 63
    assert nbuf <= 7
    vals = np.arange(64, dtype=np.float64) ** 2
    bufs = [0.0] * nbuf
    for out, a, b in ops:
        bufs[-1 - out] = (vals[a] if a >= 0 else bufs[-1 - a]) + (vals[b] if b >= 0 else bufs[-1 - b])
    assert bufs[-1 - root] == vals.sum()


@pytest.mark.parametrize("inp", ["bf16", "tf32"])
def test_huge_float32_inputs_rounded_to_a_wide_input_format(inp):
    # regression: float32 inputs >= 2**112 that need rounding to bf16/tf32 once gave NaN
    X = np.array([[2.0**113 * (1 + 2.0**-20), -(2.0**126) * (1 + 2.0**-21)], [1.0, 2.0]], dtype=np.float32)
    for acc in ["fp32", inp]:
        ref = fr.reduce_reference(X, "sequential", input=inp, accumulate=acc)
        assert same(fr.reduce(X, "sequential", input=inp, accumulate=acc), ref)
        assert np.isfinite(ref).all()


def _round_ref(v, f, mode):
    """Scalar reference: Fraction rounding, with the documented NaN/Inf/zero/overflow rules."""
    from fpreduce.core.exact import round_float

    return round_float(float(v), f, mode)


@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "up", "down"])
@pytest.mark.parametrize("fmt", ["fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2"])
def test_chunked_round_to_equals_fraction_reference(fmt, mode):
    # round_to works in cache-sized chunks; special values in some chunks only
    f = get_format(fmt)
    rng = np.random.default_rng(8)
    m = 2 * CHUNK + 5
    x = rng.standard_normal(m) * np.exp2(rng.integers(-30, 20, m))
    x[:50] = rng.standard_normal(50) * f.max_finite  # overflow in the first chunk only
    x[50:60] = [np.nan, np.inf, -np.inf, -0.0, 0.0, f.max_finite, -f.max_finite, 2.0**f.emin, 2.0**-200, -(2.0**-200)]
    x[CHUNK + 7] = 1 + 2.0**-8 + 2.0**-40  # no double rounding through float32
    with np.errstate(over="ignore"):
        for arr in (x, x.astype(np.float32)):
            got = fr.round_to(arr, fmt, mode)
            idx = np.r_[0:70, CHUNK - 3 : CHUNK + 10, m - 40 : m, 100:m:997]
            want = np.array([_round_ref(float(arr[i]), f, mode) for i in idx])
            assert same(got[idx], want), (fmt, mode, arr.dtype)


def test_chunked_stochastic_rounding_keeps_the_random_stream():
    x = np.random.default_rng(9).standard_normal(2 * CHUNK + 11)
    whole = fr.round_to(x, "bf16", "stochastic", rng=np.random.default_rng(3))
    g = np.random.default_rng(3)
    parts = [fr.round_to(x[:1000], "bf16", "stochastic", rng=g), fr.round_to(x[1000:], "bf16", "stochastic", rng=g)]
    assert same(whole, np.concatenate(parts))
    u = np.random.default_rng(3).random(x.size)  # documented: up with probability frac, from rng.random()
    q = np.exp2(np.floor(np.log2(np.abs(x))) - 7)
    lo = np.floor(x / q) * q
    assert same(whole, np.where(u < (x - lo) / q, lo + q, lo).astype(np.float32))
