"""Directed and stochastic additions on float32 bits (core/_narrow.py) and the wide left fold.

One addition of :func:`add_narrow` (plain Python) against the float64 rounder of
``_kernels_round`` (itself checked against the exact rounder), value by value, for
every narrow format and mode; the compiled fold of wide rows against the numpy paths
and the exact rational reference, special values and overflow included (the kernel
hands those to the exact scalar path); stochastic folds across the kernel's blocks
of columns and in pieces.
"""

import numpy as np
import pytest
from test_tall import data, same

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.core import _narrow, routes
from fpreduce.core.formats import get_format

NARROW = ["fp32", "bf16", "tf32", "fp16", "fp8_e5m2", "fp8_e4m3"]
DIRECTED = ["toward_zero", "up", "down"]
needs_jit = pytest.mark.skipif(not jit.enabled(), reason="numba not installed or FPREDUCE_NO_JIT set")


def values(fmt, k, seed):
    """k values of fmt: random binades, subnormals, zeros of both signs, the largest finite, ties."""
    f = get_format(fmt)
    rng = np.random.default_rng(seed)
    tiny = 2.0 ** (f.emin - f.precision + 1)
    pool = [0.0, -0.0, tiny, -tiny, 3 * tiny, f.max_finite, -f.max_finite, 1.0, -1.0, 2.0**-f.precision]
    x = rng.standard_normal(k) * np.exp2(rng.integers(f.emin - 4, 8, k))
    x = np.where(rng.random(k) < 0.3, rng.choice(pool, k), x)
    return fr.round_to(x, f).astype(np.float64)


@pytest.mark.parametrize("fmt", NARROW)
def test_one_addition_equals_the_exact_rounding(fmt):
    """One addition on every route (the float32-bit wide rows among them), every directed mode and stochastic
    rounding, against the Fraction references: add_exact, and the stochastic law with its splitmix64 uniform."""
    from test_kernels_round import by_every_route
    from test_tall import splitmix_uniform, sr_add

    from fpreduce.core.exact import add_exact

    f = get_format(fmt)
    ps = list(zip(values(fmt, 400, 1).tolist(), values(fmt, 400, 2).tolist(), strict=True))
    X = np.array(ps, dtype=np.float32).T
    for mode in (*DIRECTED, "stochastic"):
        got, seen = by_every_route(X, fmt, mode, seed=3)
        if jit.enabled():
            assert fr.Route.WIDE_LEFT in seen or fr.Route.ROW_BLOCKS in seen, seen
        key = int(np.random.default_rng(3).integers(0, 2**63))
        for e, ((x, y), g) in enumerate(zip(ps, got, strict=True)):
            sr = mode == "stochastic"
            want = sr_add(x, y, fmt, splitmix_uniform(key, e, 0)) if sr else add_exact(x, y, f, mode)
            assert same(np.float64(g), want), (fmt, mode, x, y)


@needs_jit
@pytest.mark.parametrize("fmt", NARROW)
def test_stochastic_rows_round_exact_sums_on_their_patterns(fmt):
    """Wide stochastic rows round a sum whose float32 value is exact on its pattern (``_narrow.sr_exact``), in
    stretches of 512 columns, and leave the others to ``add_narrow``: a few (Inf, NaN: none here, the fold would
    be redone; subnormal and zero sums are exact), most (a stretch of inexact sums; the row's rest then goes to
    add_narrow alone) and a short last stretch. No sum nears the top, so the fold stands (no exact rerun): each
    addition is the Fraction law's, and the numpy twin's."""
    from test_tall import splitmix_uniform, sr_add

    f = get_format(fmt)
    k = _narrow._STRETCH

    def below_top(v):  # (no sum may round past the top: the fold would be redone by the exact path)
        return fr.round_to(np.where(abs(v) > f.max_finite / 8, v / 16, v), f).astype(np.float64)

    x = below_top(values(fmt, 4 * k + 37, 7))
    rng = np.random.default_rng(8)
    near = below_top(x * rng.uniform(-2.0, 2.0, x.size))  # sums of about 2p bits: exact in float32
    near[: k // 8] = -x[: k // 8]  # exact zeros
    far = below_top(values(fmt, x.size, 9))  # other binades: inexact sums (for a stretch)
    key = int(np.random.default_rng(3).integers(0, 2**63))
    kw = {"input": fmt, "accumulate": fmt, "rounding": "stochastic", "seed": 3}
    for y in (np.concatenate([near[:k], far[k : 2 * k], near[2 * k :]]), near):  # (near: every stretch, the short
        X = np.array([x, y], dtype=np.float32)  # last one too, by sr_exact)
        with fr.trace_routes() as ran:
            got = fr.reduce(X, "sequential", **kw)
        assert ran == [fr.Route.WIDE_LEFT], ran
        with jit.disabled():
            assert same(got, fr.reduce(X, "sequential", **kw))
        for e in [*range(0, x.size - 37, 5), *range(x.size - 37, x.size)]:  # (the Fraction law is slow)
            want = sr_add(float(X[0, e]), float(X[1, e]), fmt, splitmix_uniform(key, e, 0))
            assert same(np.float64(got[e]), want), (fmt, e, X[0, e], X[1, e])


@needs_jit
@pytest.mark.parametrize("acc", NARROW)
@pytest.mark.parametrize("mode", DIRECTED)
@pytest.mark.parametrize("specials", [False, True])
def test_wide_left_fold_equals_numpy_and_reference(acc, mode, specials):
    """More columns than the register path: the row kernel of _narrow, against numpy and the Fraction reference."""
    inp = acc if get_format(acc).precision < 11 else "bf16"
    X = data(inp, 7, 300, 5, specials)
    for plan in ("sequential", fr.plans.sequential(7, [3, 1, 0, 6, 2, 5, 4])):
        kw = {"input": inp, "accumulate": acc, "rounding": mode}
        got = fr.reduce(X, plan, **kw)
        with jit.disabled():
            assert same(got, fr.reduce(X, plan, **kw))
        cols = np.r_[0:30, 270:300]
        assert same(got[cols], fr.reduce_reference(X[:, cols], plan, **kw))


@needs_jit
@pytest.mark.parametrize("acc", ["fp32", "bf16", "fp16", "fp8_e4m3"])
@pytest.mark.parametrize("mode", ["nearest_even", *DIRECTED])
def test_folds_by_column_blocks_and_row_groups(acc, mode):
    """Wide folds (stochastic ones apart) add four rows at a time in one pass over a block of 2**16 columns: for
    every count of rows (groups of four, the rows after them, none) and across block edges (two whole blocks and a
    short one) the bits are numpy's twin's and, on columns at the edges, the Fraction reference's; the rows stored
    as their own words (ml_dtypes) give the same bits."""
    import ml_dtypes

    f = get_format(acc)
    inp = acc if f.precision < 11 else "bf16"
    fi = get_format(inp)
    b = 1 << 16
    m = 2 * b + 37
    cols = np.r_[0:16, b - 8 : b + 8, 2 * b - 8 : m]
    kw = {"input": inp, "accumulate": acc, "rounding": mode}
    for n in (2, 4, 5, 9):
        x = np.stack([values(inp, m, 20 + r) for r in range(n)])
        lim = min(fi.max_finite / 64, 2.0**100)  # no sum nears the top, nor Veltkamp's range (bf16): no exact rerun
        X = fr.round_to(np.where(abs(x) > lim, x * (lim / fi.max_finite), x), fi).astype(np.float32)
        with fr.trace_routes() as ran:
            got = fr.reduce(X, "sequential", **kw)
        assert ran == [fr.Route.WIDE_LEFT], (n, ran)
        with jit.disabled():
            assert same(got, fr.reduce(X, "sequential", **kw)), n
        assert same(got[cols], fr.reduce_reference(X[:, cols], "sequential", **kw)), n
        words = X.astype({"bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp16": np.float16}[inp])
        assert same(fr.reduce(words, "sequential", accumulate=acc, rounding=mode), got), n


@needs_jit
@pytest.mark.parametrize("mode", DIRECTED)
def test_fp16_rows_are_checked_as_read(mode, monkeypatch):
    """float32 rows declared fp16 and folded into fp16 in a directed mode are checked as fp16 values as they are
    read: fp16 values, negatives among them, are folded once; a value that is not one (more bits, beyond the top,
    below the least subnormal) makes the caller round the rows to fp16 and fold again (the reference's bits)."""
    calls = []
    fold = _narrow.fold_left

    def spy(X, *args, **kw):
        calls.append(X.dtype)
        return fold(X, *args, **kw)

    monkeypatch.setattr(_narrow, "fold_left", spy)
    X = fr.round_to(np.random.default_rng(4).standard_normal((9, 3000)), "fp16").astype(np.float32)
    kw = {"input": "fp16", "accumulate": "fp16", "rounding": mode}
    got = fr.reduce(X, "sequential", **kw)
    assert len(calls) == 1
    assert same(got[:40], fr.reduce_reference(X[:, :40], "sequential", **kw))
    X[3, 100], X[5, 2000], X[7, 2999] = 1 + 2.0**-12, 1e6, 2.0**-26
    calls.clear()
    got = fr.reduce(X, "sequential", **kw)
    assert len(calls) == 2
    assert same(got, fr.reduce(fr.round_to(X, "fp16").astype(np.float32), "sequential", **kw))


@needs_jit
@pytest.mark.parametrize("acc", ["fp32", "bf16", "fp16", "tf32"])
def test_overflow_and_the_top_binade(acc):
    """Sums near and beyond the largest finite value (handed to the exact path): Inf, max finite, by mode."""
    f = get_format(acc)
    top = f.max_finite
    X = np.array([[top, top, -top, top, 1.0] * 60, [top, -(2.0 ** (f.emax - f.precision)), top, 2.0, 1.0] * 60])
    X = fr.round_to(X, acc).astype(np.float32)
    for mode in DIRECTED + ["nearest_even"]:
        kw = {"input": acc, "accumulate": acc, "rounding": mode}
        got = fr.reduce(X, "sequential", **kw)
        assert same(got[:5], fr.reduce_reference(X[:, :5], "sequential", **kw))
    up = fr.reduce(X, "sequential", input=acc, accumulate=acc, rounding="up")
    zero = fr.reduce(X, "sequential", input=acc, accumulate=acc, rounding="toward_zero")
    assert up[0] == np.inf
    assert zero[0] == top


@needs_jit
@pytest.mark.parametrize("acc", ["bf16", "fp16", "fp8_e4m3"])
def test_stochastic_across_blocks_and_pieces(acc):
    """The stochastic kernel goes by blocks of columns: same bits as numpy's twin and as pieces of the vector."""
    m = (1 << 14) + 77  # the stochastic kernel's blocks of 2**14 columns, and a short one
    X = data(acc, 3, m, 6, specials=False)
    kw = {"input": acc, "accumulate": acc, "rounding": "stochastic"}
    whole = fr.reduce(X, "sequential", seed=4, **kw)
    with jit.disabled():
        assert same(whole, fr.reduce(X, "sequential", seed=4, **kw))
    cut = (1 << 14) - 5
    parts = [fr.reduce(X[:, a:b], "sequential", seed=4, offset=a, total=m, **kw) for a, b in ((0, cut), (cut, m))]
    assert same(whole, np.concatenate(parts))


@needs_jit
def test_down_gives_minus_zero_for_an_exact_zero_sum():
    """IEEE 754 6.3: x + (-x) is -0 in mode down, +0 otherwise; +0 + +0 is +0 in every mode."""
    X = np.array([[1.5] * 20 + [0.0] * 20, [-1.5] * 20 + [0.0] * 20], dtype=np.float32)
    down = fr.reduce(X, "sequential", input="bf16", accumulate="bf16", rounding="down")
    zero = fr.reduce(X, "sequential", input="bf16", accumulate="bf16", rounding="toward_zero")
    assert np.all(np.signbit(down[:20]))
    assert not np.any(np.signbit(down[20:]))
    assert not np.any(np.signbit(zero))


@needs_jit
def test_fp16_inputs_are_checked_as_the_rows_are_read():
    """float32 data that is not fp16 (too many bits, below the subnormal quantum, beyond 65504) is rounded first.

    Alone in its column, an unrounded value below 2**-14 would pass through the fold
    unchanged: the result would not be an fp16 value.
    """
    odd = [2.0**-24 + 2.0**-40, 3 * 2.0**-26, -(2.0**-25), 1 + 2.0**-12, 65536.0, 70000.0]
    for k, v in enumerate(odd):
        X = np.zeros((5, 40), dtype=np.float32)
        X[2, 7 + k] = v
        kw = {"input": "fp16", "accumulate": "fp16"}
        got = fr.reduce(X, "sequential", **kw)
        assert same(got, fr.reduce_reference(X, "sequential", **kw)), v
        with jit.disabled():
            assert same(got, fr.reduce(X, "sequential", **kw)), v
        assert got[7 + k] == fr.round_to(np.array([v]), "fp16")[0], v  # (-0 here: the fold gives +0)


@needs_jit
@pytest.mark.parametrize("acc", ["fp32", "bf16", "tf32"])
@pytest.mark.parametrize("mode", [*DIRECTED, "stochastic"])
def test_tree_rows_equal_numpy_and_reference(acc, mode):
    """Trees over wide rows (pairwise, a random tree, 10^3 x 40 through the row blocks): _narrow's rows."""
    for n, m, plan in ((9, 300, "pairwise"), (9, 300, "random"), (1000, 40, "pairwise")):
        X = data("bf16", n, m, 7, specials=m == 300)
        p = fr.plans.random_tree(n, np.random.default_rng(1)) if plan == "random" else plan
        kw = {"input": "bf16", "accumulate": acc, "rounding": mode}
        got = fr.reduce(X, p, seed=3, **kw)
        with jit.disabled():
            assert same(got, fr.reduce(X, p, seed=3, **kw))
        if mode != "stochastic":
            assert same(got[:12], fr.reduce_reference(X[:, :12], p, **kw))


@needs_jit
@pytest.mark.parametrize("inp", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("mode", ["nearest_even", *DIRECTED, "stochastic"])
def test_fp64_accumulator_adds_float32_rows_as_read(inp, mode):
    """fp64 folds of wide float32 rows (no float64 copy): numpy, the reference, pieces; unrounded inputs loaded."""

    m = routes.WIDTH + 50
    X = data(inp, 5, m, 21, specials=True)
    kw = {"input": inp, "accumulate": "fp64", "rounding": mode}
    got = fr.reduce(X, "sequential", seed=2, **kw)
    with jit.disabled():
        assert same(got, fr.reduce(X, "sequential", seed=2, **kw))
    parts = [fr.reduce(X[:, a:b], "sequential", seed=2, offset=a, total=m, **kw) for a, b in ((0, 2049), (2049, m))]
    assert same(got, np.concatenate(parts))
    if mode != "stochastic":
        assert same(got[:40], fr.reduce_reference(X[:, :40], "sequential", **kw))
    if inp != "fp32":  # float32 values off the input format's grid are rounded to it first
        Y = X + np.float32(2.0**-20)
        got_y = fr.reduce(Y, "sequential", seed=2, **kw)
        with jit.disabled():
            assert same(got_y, fr.reduce(Y, "sequential", seed=2, **kw))
        assert same(got_y, fr.reduce(fr.round_to(Y, inp), "sequential", seed=2, **kw))


@needs_jit
@pytest.mark.parametrize("fmt", ["fp16", "fp8_e4m3", "fp8_e5m2"])
def test_grid_flags_accept_exactly_the_formats_finite_values(fmt):
    """grid_flags and grid_bits (the loader's compiled input checks: by products, on the bits alone), and fp16's
    fp16_flags and fp16_scaled_flags (the fold loops'), are 0 iff v is finite and round_to(v, fmt) == v: random
    patterns, the format's values, their neighbours, its subnormals and the halves between them, Inf, NaN, beyond
    its range and below its least subnormal.

    Kept on the private kernel on purpose (issue 24): a check that refuses a value of the format only costs a
    rerun, the same bits, so no public route shows that half of the law (the other half, that no non-value is
    taken as is, shows in the bits: test_wide_rows_check_their_inputs_as_they_are_read in test_tall)."""
    f = get_format(fmt)
    _narrow.compile_all()
    scale, L, _, _, _, _ = _narrow.lanes(f.precision, f.emin, f.max_finite)
    q = 2.0 ** (f.emin - f.precision + 1)  # the least subnormal
    rng = np.random.default_rng(7)
    pats = (rng.integers(0, 2**32, 3000, dtype=np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        near = np.nextafter(values(fmt, 1000, 8).astype(np.float32), np.float32(np.inf))
        inf = np.array([np.nan, np.inf, -np.inf, 2 * f.max_finite, -4 * f.max_finite, 2.0**-149], dtype=np.float32)
        subs = q * np.concatenate([np.arange(-64, 65), np.arange(-64, 64) + 0.5, [2.0**f.precision + 1, 0.25]])
        v = np.concatenate([pats, values(fmt, 3000, 9).astype(np.float32), near, inf, subs.astype(np.float32)])
        ok = np.isfinite(v) & (fr.round_to(v.astype(np.float64), fmt) == v)
    for flags in (_narrow.grid_flags, _narrow.grid_bits):
        got = np.array([flags(x, np.float32(scale), L, np.float32(f.max_finite)) == 0 for x in v])
        assert np.array_equal(got, ok), flags
    if fmt == "fp16":  # the fold loops' fp16 checks: without products (fp16_flags), and by grid_flags' products
        for flags in (_narrow.fp16_flags, _narrow.fp16_scaled_flags):
            assert np.array_equal(np.array([flags(x) == 0 for x in v]), ok), flags
    assert 2000 < ok.sum() < v.size - 2000  # both answers occur


def test_every_finite_word_widens_to_its_value():
    """The compiled widening of bf16, fp16, fp8_e4m3 and fp8_e5m2 words (the word folds' reads) gives every finite
    word's float32 value bit for bit (ml_dtypes' and numpy's conversions), subnormals and signed zeros included."""
    if not jit.enabled():
        pytest.skip("numba not installed: the words are widened by numpy")
    import ml_dtypes

    _narrow.compile_all()
    cases = (
        (_narrow.bf16_value, np.uint16, np.uint16, ml_dtypes.bfloat16),
        (_narrow.fp16_value, np.int16, np.uint16, np.float16),
        (_narrow.e4m3_value, np.int8, np.uint8, ml_dtypes.float8_e4m3fn),
        (_narrow.e5m2_value, np.uint8, np.uint8, ml_dtypes.float8_e5m2),
    )
    for fn, word, bits, dt in cases:
        w = np.arange(2 ** (8 * np.dtype(bits).itemsize), dtype=np.uint32).astype(bits)
        want = w.view(dt).astype(np.float32)
        got = np.empty(w.size, dtype=np.float32)
        _widen_all(fn)(w.view(word), got)  # (in a kernel: fp16's may be the processor's conversion, an intrinsic)
        fin = np.isfinite(want)
        assert np.array_equal(got[fin].view(np.uint32), want[fin].view(np.uint32)), dt


def _widen_all(fn):
    """A kernel writing ``fn`` of every word of ``w`` into ``out``."""
    from numba import njit

    @njit
    def run(w, out):
        for i in range(w.size):
            out[i] = fn(w[i])

    return run
