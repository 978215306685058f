"""The compiled fold of one plan over every column (core/_tall.py) against the references.

For every accumulator format, every deterministic rounding mode, left-deep and other
trees, and shapes from one column to more than a block of columns, ``reduce`` with the
compiled kernel, ``reduce`` on the numpy paths (``jit.disabled()``) and the exact
rational ``reduce_reference`` agree bit for bit, also on subnormals, ties, overflow,
signed zeros, NaN and Inf.
"""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.core import routes
from fpreduce.core.exact import add_exact
from fpreduce.core.formats import get_format

ACCS = ["fp32", "bf16", "fp16", "tf32", "fp64", "fp8_e4m3", "fp8_e5m2"]
MODES = ["nearest_even", "toward_zero", "up", "down"]

needs_jit = pytest.mark.skipif(not jit.enabled(), reason="numba not installed or FPREDUCE_NO_JIT set")


def same(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((np.isnan(a) & np.isnan(b)) | (a.view(np.uint64) == b.view(np.uint64))))


def data(fmt, n, m, seed, specials):
    """float32 values of ``fmt``: wide exponents, subnormals, ties, signed zeros, near-overflow, NaN/Inf."""
    f = get_format(fmt)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, m)) * np.exp2(rng.integers(-30, 30, (n, m)))
    tiny = 2.0 ** (f.emin - f.precision + 1)
    pick = rng.random((n, m))
    X = np.where(pick < 0.15, rng.integers(-9, 10, (n, m)) * tiny, X)  # subnormals
    ties = rng.choice([1.0, 2.0**-f.precision, -(2.0**-f.precision), 3 * 2.0**-f.precision, -0.0, 0.0], (n, m))
    X = np.where((pick >= 0.15) & (pick < 0.35), ties, X)
    big = rng.choice([1, -1], (n, m)) * f.max_finite * rng.choice([0.25, 0.5, 1.0], (n, m))
    X = np.where((pick >= 0.35) & (pick < 0.42), big, X)
    X = np.where((pick >= 0.42) & (pick < 0.47), -0.0, X)
    if specials:
        for v in (np.nan, np.inf, -np.inf):
            X[rng.integers(0, n), rng.integers(0, m)] = v
    return fr.round_to(X, "fp32" if f.precision > 24 else f).astype(np.float32)


def plan_of(kind, n, seed):
    if kind == "random":
        return fr.plans.random_tree(n, np.random.default_rng(seed))
    if kind == "shuffled":
        return fr.plans.sequential(n, np.random.default_rng(seed).permutation(n))
    return kind


@needs_jit
@given(
    n=st.integers(1, 24),
    m=st.sampled_from([1, 3, 9, 40]),
    acc=st.sampled_from(ACCS),
    mode=st.sampled_from(MODES),
    plan=st.sampled_from(["sequential", "pairwise", "reverse", "shuffled", "random"]),
    inp=st.sampled_from(["fp32", "bf16", "fp16", "input=acc"]),
    specials=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_compiled_fold_equals_numpy_and_fraction_reference(n, m, acc, mode, plan, inp, specials, seed):
    inp = acc if inp == "input=acc" else inp
    if get_format(inp).precision > 24:
        inp = "fp32"  # float32 data: fp64 inputs are the fp32 values
    X = data(inp, n, m, seed, specials)
    p = plan_of(plan, n, seed)
    kw = {"input": inp, "accumulate": acc, "rounding": mode}
    got = fr.reduce(X, p, **kw)
    with jit.disabled():
        numpy_path = fr.reduce(X, p, **kw)
    assert same(got, numpy_path)
    assert same(got, fr.reduce_reference(X, p, **kw))


@needs_jit
@pytest.mark.parametrize("acc", ACCS)
@pytest.mark.parametrize("mode", MODES)
def test_block_kernel_many_columns(acc, mode):
    """More columns than the register path takes: the row-block kernel, as many as a block holds and more."""
    n, m = 5, routes.WIDTH + 37
    X = data("bf16", n, m, 3, True)
    for plan in ("sequential", "pairwise", "((0,(1,2)),(3,4))"):
        kw = {"input": "bf16", "accumulate": acc, "rounding": mode}
        d = fr.explain(X, plan, **kw)
        with fr.trace_routes() as ran:
            got = fr.reduce(X, plan, **kw)
        assert ran[0] is d.route, (plan, str(d), ran)
        with jit.disabled():
            assert same(got, fr.reduce(X, plan, **kw))
        cols = np.r_[0:40, m - 40 : m]  # the reference is slow: both ends of the row
        assert same(got[cols], fr.reduce_reference(X[:, cols], plan, **kw))


def right_pairs(n):
    """((0,1),((2,3),(...,(n-2,n-1)))): a tree whose program keeps n/2 partial rows alive at once."""
    t = (n - 2, n - 1)
    for i in range(n - 4, -1, -2):
        t = ((i, i + 1), t)
    return fr.plans.tree(t)


@needs_jit
@pytest.mark.parametrize(("acc", "mode"), [("bf16", "nearest_even"), ("fp16", "up"), ("fp32", "down")])
def test_row_blocks_of_a_deep_program_cross_their_boundary(acc, mode):
    """514 leaves in pairs down a right spine: 257 live rows, so a block of the row kernel holds its least
    (routes.WIDTH columns); WIDTH + 37 columns span two blocks, and the columns on both sides of the cut
    give the bits of the numpy twin and of the Fraction reference."""
    n, m = 514, routes.WIDTH + 37
    p = right_pairs(n)
    X = data("bf16", n, m, 4, True)
    kw = {"input": "bf16", "accumulate": acc, "rounding": mode}
    assert fr.explain(X, p, **kw).route is fr.Route.ROW_BLOCKS
    got = fr.reduce(X, p, **kw)
    with jit.disabled():
        assert same(got, fr.reduce(X, p, **kw))
    cols = np.r_[0:3, routes.WIDTH - 3 : routes.WIDTH + 3, m - 3 : m]
    assert same(got[cols], fr.reduce_reference(X[:, cols], p, **kw))


@needs_jit
@pytest.mark.parametrize("acc", ["bf16", "tf32"])
def test_veltkamp_range_falls_back_to_exact_path(acc):
    """Sums near fp32's top make Veltkamp splitting give NaN; the kernel reruns exactly (Inf, not NaN)."""
    X = np.array([[3e38, 1.0], [3e38, 2.0], [-3e38, 3.0]], dtype=np.float32)
    X = fr.round_to(X, acc).astype(np.float32)
    got = fr.reduce(X, "sequential", input=acc, accumulate=acc)
    assert np.isinf(got[0])  # (3e38 + 3e38) overflows, Inf - 3e38 = Inf
    assert got[0] > 0
    assert same(got, fr.reduce_reference(X, "sequential", input=acc, accumulate=acc))


@needs_jit
def test_inputs_that_need_rounding_are_loaded():
    """fp32 data given as bf16/fp16 input is rounded first (the compiled input check must fail it)."""
    X = np.random.default_rng(5).standard_normal((50, 3)).astype(np.float32)
    for inp in ("bf16", "fp16", "tf32"):
        got = fr.reduce(X, "sequential", input=inp, accumulate="fp32")
        assert same(got, fr.reduce_reference(X, "sequential", input=inp, accumulate="fp32"))
        assert not same(got, fr.reduce(X, "sequential", input="fp32", accumulate="fp32"))


@needs_jit
@pytest.mark.parametrize("plan", ["sequential", "pairwise"])
@pytest.mark.parametrize(
    ("inp", "acc", "mode"),
    [
        ("bf16", "bf16", "nearest_even"),
        ("fp16", "fp16", "nearest_even"),
        ("fp16", "fp16", "up"),  # add_hw's scaled rows check fp16 inputs as read (FP16_CHECK)
        ("fp16", "fp8_e5m2", "toward_zero"),
        ("tf32", "fp16", "down"),  # tf32's mask of raw low bits is fp16_flags' 13 bits: not the fp16 check
        ("tf32", "bf16", "up"),
    ],
)
def test_wide_rows_check_their_inputs_as_they_are_read(plan, inp, acc, mode):
    """Inputs of a wide fold are checked while folding: a value not in the input format makes it load and refold."""
    X = fr.round_to(np.random.default_rng(6).standard_normal((6, 3 * routes.WIDTH)), inp).astype(np.float32)
    kw = {"input": inp, "accumulate": acc, "rounding": mode}
    ok = fr.reduce(X, plan, **kw)
    with jit.disabled():
        assert same(ok, fr.reduce(X, plan, **kw))
    for bad in (1 + 2.0**-12, 2.0**-26, 1e6):  # low bits set; below fp16's quantum (its bits look fine); beyond it
        r = fr.round_to(np.float32(bad), inp)
        if r == bad:
            continue  # a value of the input format (2**-26 is a tf32 value)
        Y = X.copy()
        Y[:, -3] = 0.0
        Y[4, -3], Y[5, -3] = bad, -r  # loaded, bad is r: the column sums to an exact zero (Inf - Inf: NaN)
        got = fr.reduce(Y, plan, **kw)
        zero = -0.0 if mode == "down" else 0.0  # IEEE 754 6.3: r + (-r) is +0, but -0 rounding down
        if np.isinf(r) or same(fr.round_to(r, acc), r):  # (else loading r into the accumulator rounds it)
            assert same(got[-3], np.nan if np.isinf(r) else zero)
        assert same(got[-20:], fr.reduce_reference(Y[:, -20:], plan, **kw))
        with jit.disabled():
            assert same(got, fr.reduce(Y, plan, **kw))


@needs_jit
def test_sequential_text_builds_no_tree_and_agrees_with_the_plan_object():
    X = fr.round_to(np.random.default_rng(2).random((3000, 2)), "bf16").astype(np.float32)
    by_text = fr.reduce(X, "sequential", input="bf16", accumulate="bf16")
    by_plan = fr.reduce(X, fr.plans.sequential(3000), input="bf16", accumulate="bf16")
    assert same(by_text, by_plan)
    assert same(by_text, fr.reduce_reference(X, "sequential", input="bf16", accumulate="bf16"))
    # swamping: 3000 terms of [0, 1) stagnate in bf16 far below their exact sum
    assert by_text[0] < 0.5 * float(np.sum(X[:, 0], dtype=np.float64))


def test_kernel_is_off_without_numba_in_deterministic_modes():
    X = np.zeros((2, 2), np.float32)
    with jit.disabled():
        for mode in ("nearest_even", "up"):
            d = fr.explain(X, "sequential", rounding=mode)
            assert d.route is fr.Route.BLOCKS, str(d)
            assert d.inner is not None
            assert not d.inner.route.compiled, str(d)
        with fr.trace_routes() as seen:
            fr.reduce(X, "sequential", rounding="up")
        assert not any(r.compiled for r in seen), seen
        d = fr.explain(X, "sequential", accumulate="bf16", rounding="stochastic", seed=1)
        assert d.route is fr.Route.SR_NUMPY  # stochastic rounding always folds by its counter-based law


def test_left_folds_are_decided_with_their_row_order():
    """A left-deep tree folds its leaves in its spine's order (a right-deep one in the reversed order: addition
    commutes); any other tree runs as a program (no order)."""
    X = np.zeros((4, 2), np.float32)
    assert fr.explain(X[:3], fr.plans.tree(((2, 0), 1))).order.tolist() == [2, 0, 1]
    assert fr.explain(X[:3], fr.plans.tree((0, (1, 2)))).order.tolist() == [2, 1, 0]
    assert fr.explain(X, fr.plans.tree(((0, 1), (2, 3)))).order is None
    assert fr.explain(X[:1], fr.plans.tree(0)).route is fr.Route.SINGLE


@needs_jit
def test_right_deep_trees_fold_as_the_left_fold_of_their_reversed_order():
    """``x0 + (x1 + (... + x8))`` (the linear plan) is the left fold of x8, ..., x0 with each addition's operands
    swapped: the same bits in every mode (addition is commutative; stochastic draws number the additions in
    the tree's post-order, which is the reversed fold's order)."""
    n, m = 9, 3000
    p = fr.plans.parse("linear", n)
    assert fr.explain(np.zeros((n, m), np.float32), p).order.tolist() == list(range(n))[::-1]
    X = data("bf16", n, m, 21, specials=True)
    cols = np.r_[0:30, m - 30 : m]
    for acc, mode in (("bf16", "nearest_even"), ("fp16", "up"), ("fp32", "down"), ("bf16", "toward_zero")):
        kw = {"input": "bf16", "accumulate": acc, "rounding": mode}
        got = fr.reduce(X, p, **kw)
        with jit.disabled():
            assert same(got, fr.reduce(X, p, **kw))
        assert same(got[cols], fr.reduce_reference(X[:, cols], p, **kw))
    X = data("bf16", n, m, 22, specials=False)
    got = fr.reduce(X, p, input="bf16", accumulate="bf16", rounding="stochastic", seed=3)
    key = int(np.random.default_rng(3).integers(0, 2**63))
    for j in (0, 1, 2, m - 1):  # the tree's own post-order draws
        assert same(got[j], sr_tree(p.root, X[:, j], "bf16", key, j)), j


# --- stochastic rounding: a counter-based generator (splitmix64 of seed, element, addition) ---

M64 = (1 << 64) - 1


def splitmix_uniform(key, e, t):
    """An independent (pure Python integers) implementation of the documented generator."""

    def mix(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    g = 0x9E3779B97F4A7C15
    z = mix((key + (e + 1) * g) & M64)
    z = mix((z + (t + 1) * g) & M64)
    return (z >> 11) / 2.0**53


def sr_add(x, y, fmt, u):
    """x + y stochastically rounded, the documented law in Fractions: the upper neighbour iff u < the float64
    distance of the exact sum from the lower one over their gap; past the top the neighbour is where the values
    would continue (the overflow threshold), taken as the overflow (±Inf, NaN in a format without Inf)."""
    f = get_format(fmt)
    if f.precision == 53:  # fp64's law: the float64 sum (Inf when it overflows), stepped toward its remainder
        s = x + y  # iff u < |remainder| / the gap (the same probabilities as below, another use of u)
        if not np.isfinite(s):
            return s
        err = Fraction(x) + Fraction(y) - Fraction(s)
        with np.errstate(over="ignore"):
            other = float(np.nextafter(s, np.inf if err > 0 else -np.inf))
        if err == 0 or not np.isfinite(other):  # (past the top: the gap is infinite, never taken)
            return s
        return other if Fraction(u) < abs(err) / abs(Fraction(other) - Fraction(s)) else s
    lo, hi = add_exact(x, y, f, "down"), add_exact(x, y, f, "up")
    if not (np.isfinite(x) and np.isfinite(y)) or lo == hi:  # Inf or NaN; an exact sum (x - x: +0 but in down)
        return add_exact(x, y, f, "nearest_even")
    # finite addends: a non-finite neighbour is the overflow (Inf, or NaN in a format without Inf)
    top = Fraction(f.max_finite) + Fraction(2) ** (f.emax - f.precision + 1)
    a = Fraction(lo) if np.isfinite(lo) else -top
    b = Fraction(hi) if np.isfinite(hi) else top
    frac = Fraction(float(Fraction(x) + Fraction(y) - a)) / (b - a)
    return hi if Fraction(u) < frac else lo


def sr_tree(root, col, fmt, key, e):
    """Element e's stochastic fold along ``root`` (leaves index ``col``): addition t (the tree's post-order,
    from 0) draws splitmix_uniform(key, e, t); an independent scalar reference of the compiled and numpy folds."""
    t = [0]

    def fold(node):
        if isinstance(node, int | np.integer):
            return float(col[int(node)])
        a, b = fold(node[0]), fold(node[1])
        u = splitmix_uniform(key, e, t[0])
        t[0] += 1
        return sr_add(a, b, fmt, u)

    return fold(root)


@pytest.mark.parametrize("seed", [0, 12345])
def test_stochastic_rounding_law_exact_on_bf16(seed):
    """1 + d * 2**-10 in bf16 (p = 8) lies between 1 and 1 + 2**-7: it rounds up iff u < d / 8, u from the generator."""
    m = 512
    d = np.arange(m) % 8  # the exact fraction d / 8 of the gap: 0 (exact) .. 7/8
    X = np.stack([np.ones(m), d * 2.0**-10]).astype(np.float32)
    got = fr.reduce(X, "sequential", input="fp32", accumulate="bf16", rounding="stochastic", seed=seed)
    key = int(np.random.default_rng(seed).integers(0, 2**63))
    u = np.array([splitmix_uniform(key, e, 0) for e in range(m)])
    expect = np.where(u < d / 8, 1 + 2.0**-7, 1.0)
    assert np.array_equal(got, expect.astype(np.float32))
    # P(up) = #{u < d/8} / 2**53 = d/8 exactly: the observed rate is within 5 sigma of it
    for k in range(1, 8):
        rate = np.mean(got[d == k] > 1)
        assert abs(rate - k / 8) <= 5 * np.sqrt(k / 8 * (1 - k / 8) / np.sum(d == k))


@pytest.mark.parametrize("acc", ["bf16", "fp16", "fp32", "fp64", "fp8_e5m2"])
@pytest.mark.parametrize("plan", ["sequential", "pairwise", "((0,(1,2)),((3,4),5))"])
def test_stochastic_same_bits_compiled_numpy_pieces_and_reruns(acc, plan):
    """Same seed: same bits with or without numba, whole or in pieces (offset), rerun; another seed differs."""
    inp = {"fp64": "fp32", "fp32": "fp32", "fp16": "fp16", "bf16": "bf16", "fp8_e5m2": "fp8_e5m2"}[acc]
    X = data(inp, 6, 30, 4, specials=False)
    kw = {"input": inp, "accumulate": acc, "rounding": "stochastic"}
    whole = fr.reduce(X, plan, seed=11, **kw)
    assert same(whole, fr.reduce(X, plan, seed=11, **kw))
    with jit.disabled():
        assert same(whole, fr.reduce(X, plan, seed=11, **kw))
    parts = [fr.reduce(X[:, a:b], plan, seed=11, offset=a, total=30, **kw) for a, b in ((0, 7), (7, 30))]
    assert same(whole, np.concatenate(parts))
    assert not same(whole, fr.reduce(X, plan, seed=12, **kw))


def test_stochastic_result_lies_between_the_directed_ones():
    X = data("bf16", 20, 300, 9, specials=False)
    kw = {"input": "bf16", "accumulate": "bf16"}
    X2 = X[:2]
    one = fr.reduce(X2, "sequential", rounding="stochastic", seed=3, **kw)  # one addition: down <= SR <= up
    assert np.all(fr.reduce(X2, "sequential", rounding="down", **kw) <= one)
    assert np.all(one <= fr.reduce(X2, "sequential", rounding="up", **kw))


def test_stochastic_without_numba_installed(monkeypatch):
    """As with FPREDUCE_NO_JIT=1 (no compiled function at all): the numpy twin, same bits."""
    X = data("bf16", 7, 12, 5, specials=False)
    kw = {"input": "bf16", "accumulate": "bf16", "rounding": "stochastic", "seed": 2}
    want = fr.reduce(X, "sequential", **kw)
    monkeypatch.setattr(jit, "_enabled", False)  # what jit.enabled() says when numba is not installed
    with fr.trace_routes() as ran:
        assert same(fr.reduce(X, "sequential", **kw), want)
        assert same(fr.reduce(X, "pairwise", **kw), fr.reduce(X, fr.plans.pairwise(7), **kw))
    assert set(ran) == {fr.Route.SR_NUMPY}, ran


@pytest.mark.parametrize("plan", ["ring:nccl", "atomic", "rabenseifner"])
def test_stochastic_segmented_and_atomic_plans_draw_by_element(plan):
    """Plans whose tree varies over the elements use the same counter-based generator:
    element e's result is its own tree folded with the draws of (key, e, addition), so a
    vector reduced in pieces gives the bits of the whole, with or without numba."""
    n, m = 4, 300
    X = data("bf16", n, m, 8, specials=False)
    p = fr.plans.parse(plan, n, seed=3)
    kw = {"input": "bf16", "accumulate": "bf16", "rounding": "stochastic"}
    whole = fr.reduce(X, p, seed=5, **kw)
    parts = [fr.reduce(X[:, a:b], p, seed=5, offset=a, total=m, **kw) for a, b in ((0, 13), (13, 200), (200, m))]
    assert same(whole, np.concatenate(parts))
    with jit.disabled():
        assert same(whole, fr.reduce(X, p, seed=5, **kw))
    key = int(np.random.default_rng(5).integers(0, 2**63))
    trees = [fr.plans.sequential(n, o).root for o in p.orders(0, m)] if plan == "atomic" else None
    if trees is None:
        bounds = p.bounds(m)
        trees = [p.trees[int(np.searchsorted(bounds, j, side="right")) - 1].root for j in range(m)]
    for j in (0, 1, 77, 150, m - 1):
        assert same(whole[j], sr_tree(trees[j], X[:, j], "bf16", key, j)), j
