"""Dot products, matrix-vector products (core/products.py) and FABsum (core/fabsum.py) against Fraction references."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce.base import jit
from fpreduce.base.errors import InvalidArgument
from fpreduce.core import products
from fpreduce.core.algorithms import compensated_reference
from fpreduce.core.exact import add_exact, round_fraction
from fpreduce.core.fabsum import block_sums, fabsum_bound
from fpreduce.core.formats import get_format
from fpreduce.core.primitives import stream_key
from fpreduce.core.rounding import get_mode
from fpreduce.plans import fold
from fpreduce.strategies import arrays, shapes

MODES = ["nearest_even", "toward_zero", "up", "down"]
PAIRS = [("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"), ("bf16", "fp32"), ("fp16", "bf16"), ("fp8_e4m3", "fp16")]


def same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((np.isnan(a) & np.isnan(b)) | (a.view(np.uint64) == b.view(np.uint64))))


def rnd(v: Fraction, f, mode, neg_zero=False) -> float:
    if v == 0:
        return -0.0 if neg_zero else 0.0
    return round_fraction(v, f, mode)


def fused_reference(a, b, tree, f, mode, prod=None):
    """The module's rules, by hand: exact products; a node of two leaves rounds its left one first."""
    P = [Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a, b, strict=True)]
    if prod is not None:
        P = [Fraction(rnd(p, get_format(prod), mode)) for p in P]

    def combine(x, y):
        u = (
            Fraction(rnd(P[x[1]], f, mode))
            if x[0] == "leaf" and y[0] == "leaf"
            else (P[x[1]] if x[0] == "leaf" else x[1])
        )
        v = P[y[1]] if y[0] == "leaf" else y[1]
        return ("sum", Fraction(rnd(u + v, f, mode, mode == "down")))

    res = fold(tree, lambda i: ("leaf", i), combine)
    return rnd(P[res[1]], f, mode) if res[0] == "leaf" else float(res[1])


@st.composite
def dot_problems(draw):
    fin, fa = draw(st.sampled_from(PAIRS))
    n = draw(st.integers(1, 9))
    lim = get_format(fin).max_finite ** 0.5 / 4  # products and sums stay finite
    A = draw(arrays(fin, (n, 2), max_magnitude=lim))
    B = draw(arrays(fin, (n, 2), max_magnitude=lim))
    plan = draw(st.sampled_from(["sequential", "pairwise", "random", "reversed"]))
    return fin, fa, A, B, plan


def plan_of(kind, n):
    if kind == "random":
        return fr.plans.random_tree(n, np.random.default_rng(n))
    if kind == "reversed":
        return fr.plans.sequential(n, np.arange(n)[::-1])
    return fr.plans.parse(kind, n)


@given(dot_problems(), st.sampled_from(MODES), st.sampled_from(["fused", "fp32", "bf16"]))
def test_dot_is_the_fraction_reference_on_every_tree(prob, mode, products):
    fin, fa, A, B, kind = prob
    p = plan_of(kind, A.shape[0])
    got = fr.dot(A, B, p, input=fin, accumulate=fa, rounding=mode, products=products)
    f = get_format(fa)
    for j in range(A.shape[1]):
        ref = fused_reference(A[:, j], B[:, j], p.root, f, mode, None if products == "fused" else products)
        assert float(got[j]) == ref or (np.isnan(got[j]) and np.isnan(ref)), (j, got[j], ref)  # values; zeros' signs:
        # the additions are add_any's, whose signed zeros test_primitives checks against add_exact


@given(dot_problems(), st.sampled_from(MODES))
def test_products_that_fit_the_accumulator_are_a_reduction_of_the_rounded_products(prob, mode):
    fin, _, A, B, kind = prob
    p = plan_of(kind, A.shape[0])
    P = fr.round_to(A.astype(np.float64) * B.astype(np.float64), "bf16", mode)
    got = fr.dot(A, B, p, input=fin, accumulate="fp32", rounding=mode, products="bf16")
    assert same(got, fr.reduce(P, p, input="bf16", accumulate="fp32", rounding=mode))


def test_a_left_fold_is_the_fma_chain_and_its_tree_path_agrees():
    rng = np.random.default_rng(4)
    A, B = rng.standard_normal((40, 3)), rng.standard_normal((40, 3))
    for mode in [*MODES, "stochastic"]:
        kw = dict(input="bf16", accumulate="bf16", rounding=mode, seed=3)
        seq = fr.dot(A, B, **kw)
        assert same(fr.dot(A, B, fr.plans.sequential(40, np.arange(40)), **kw), seq)  # the same left fold as a Plan
        L = fr.round_to(A, "bf16").astype(float) * fr.round_to(B, "bf16").astype(float)
        key = stream_key(3, True)[0] if mode == "stochastic" else 0
        tree = products._fold_tree(fr.plans.sequential(40).root, L, get_format("bf16"), get_mode(mode), key, 0)
        assert same(tree.astype(np.float32), seq)  # the tree program's rules give the FMA chain
        with jit.disabled():
            assert same(fr.dot(A, B, **kw), seq)
    a, b = fr.round_to(A[:, 0], "bf16").astype(float), fr.round_to(B[:, 0], "bf16").astype(float)
    f = get_format("bf16")
    s = rnd(Fraction(a[0]) * Fraction(b[0]), f, "nearest_even")
    for x, y in zip(a[1:], b[1:], strict=True):
        s = rnd(Fraction(s) + Fraction(x) * Fraction(y), f, "nearest_even")
    assert float(fr.dot(a, b, input="bf16", accumulate="bf16")) == s


def test_matvec_is_a_dot_per_row_and_checks_shapes():
    rng = np.random.default_rng(5)
    M, x = rng.standard_normal((4, 30)), rng.standard_normal(30)
    y = fr.matvec(M, x, "pairwise", input="fp16", accumulate="fp16")
    for r in range(4):
        assert same(y[r], fr.dot(M[r], x, "pairwise", input="fp16", accumulate="fp16"))
    ys = fr.matvec(M, x, input="bf16", accumulate="bf16", input_rounding="stochastic", seed=2)
    assert same(
        ys[1:], fr.matvec(M[1:], x, input="bf16", accumulate="bf16", input_rounding="stochastic", seed=2, offset=1)
    )
    with pytest.raises(InvalidArgument, match="shape"):
        fr.matvec(M, x[:5])
    with pytest.raises(InvalidArgument, match="26 bits"):
        fr.dot(x, x, input="fp64", accumulate="fp64")
    assert same(fr.dot(x, x, input="fp64", accumulate="fp64", products="fp64"), np.float64(np.cumsum(x * x)[-1]))


def fabsum_reference(col, b, f, mode, kind):
    """Plain folds of the blocks by hand (one add_exact each), then compensated_reference across them."""
    sums = []
    for i in range(0, len(col), b):
        s = col[i]
        for x in col[i + 1 : i + b]:
            s = add_exact(s, x, f, mode)
        sums.append(s)
    return float(compensated_reference(np.array(sums), f, mode, kind=kind)[0])


@given(
    st.sampled_from(["bf16", "fp16", "fp32"]),
    st.sampled_from(MODES),
    st.sampled_from(["kahan", "neumaier"]),
    st.integers(1, 30),
    st.integers(1, 9),
    st.data(),
)
def test_fabsum_is_the_hand_written_blocked_sum(fmt, mode, kind, n, b, data):
    X = data.draw(arrays(fmt, shapes(workers=st.just(n), elements=(1, 3)), max_magnitude=1e3))
    f = get_format(fmt)
    got = fr.fabsum(X, b, input=fmt, accumulate=fmt, rounding=mode, across=kind)
    for j in range(X.shape[1]):
        ref = fabsum_reference([float(v) for v in X[:, j]], b, f, mode, kind)
        assert same(got[j], ref), (j, got[j], ref)
    assert block_sums(X, b, input=fmt, accumulate=fmt).shape == (-(-n // b), X.shape[1])


def test_fabsum_error_does_not_grow_with_n_and_its_bound_says_so():
    rng = np.random.default_rng(6)
    errs = {}
    for n in (1024, 16384):
        X = rng.uniform(0, 1, n)
        s = float(fr.exact_sum(fr.round_to(X[:, None], "fp16"), axis=0).to_float64()[0])
        errs[n] = abs(float(fr.fabsum(X, 32, input="fp16", accumulate="fp16")[0]) - s) / s
        rec = abs(float(fr.reduce(X, "sequential", input="fp16", accumulate="fp16")[0]) - s) / s
        assert errs[n] < rec
    b = fabsum_bound(16384, 32, "fp16")
    assert b["recursive"] is None
    assert b["fabsum"] == pytest.approx(33 * 2.0**-11)
    assert errs[16384] < b["fabsum"]
    with pytest.raises(InvalidArgument, match="block"):
        fr.fabsum(np.ones(3), 0)


@pytest.mark.parametrize("mode", [*MODES, "stochastic"])
def test_the_compiled_tree_is_the_numpy_tree(mode):
    rng = np.random.default_rng(8)
    A, B = rng.standard_normal((37, 5)), rng.standard_normal((37, 5)) * np.exp2(rng.integers(-20, 20, (37, 5)))
    for p in (
        fr.plans.random_tree(37, rng),
        fr.plans.parse("pairwise", 37),
        fr.plans.parse("ring", 37).trees[1],
        fr.plans.parse("kary:4", 37),
    ):
        for prod in ("fused", "fp32"):
            kw = dict(input="bf16", accumulate="bf16", rounding=mode, seed=6, products=prod, offset=3)
            got = fr.dot(A, B, p, **kw)
            with jit.disabled():
                assert same(fr.dot(A, B, p, **kw), got)


@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "up", "down", "stochastic"])
def test_fused_products_below_the_smallest_subnormal(mode):
    """A product below the accumulator's smallest subnormal rounds to 0 or to it (the compiled kernel
    reads the sum's bits, which hold at most 52 discarded bits: this range has its own branch)."""
    from fpreduce.base.jit import disabled

    tiny = 2.0**-133  # bf16's smallest subnormal
    c = np.array([0.25, 0.5, 0.75, -0.25, -0.5, -0.75, 2.0**-30, -(2.0**-30)])
    a = np.zeros((2, c.size), dtype=np.float32)
    b = np.zeros((2, c.size), dtype=np.float32)
    a[1], b[1] = np.float32(tiny), c.astype(np.float32)  # row 0: +0 terms, row 1: the tiny product
    got = fr.dot(a, b, input="fp32", accumulate="bf16", rounding=mode, seed=3)
    with disabled():
        assert np.array_equal(fr.dot(a, b, input="fp32", accumulate="bf16", rounding=mode, seed=3), got)
    assert set(np.abs(got.astype(np.float64))) <= {0.0, tiny}
    assert np.array_equal(np.signbit(got), c < 0)  # the sign is kept, also when rounded to zero
    if mode == "nearest_even":
        assert np.abs(got).tolist() == [0.0, 0.0, tiny, 0.0, 0.0, tiny, 0.0, 0.0]  # half ties to even: 0
    if mode in ("up", "down"):
        away = (c > 0) if mode == "up" else (c < 0)
        assert np.array_equal(np.abs(got) == np.float32(tiny), away)
