import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce import strategies as fst
from fpreduce.analysis.outcomes import order_outcomes, tree_from_gaps
from fpreduce.core.metrics import apriori_bound, ulp_error

FAMILIES = [
    "sequential",
    "reverse",
    "pairwise",
    "ring:nccl",
    "ring:gloo",
    "random_tree",
    "rd",
    "rabenseifner",
    "kary:3",
    "atomic",
]


def bits(a):
    a = np.asarray(a, dtype=np.float64)
    return np.where(np.isnan(a), np.uint64(0x7FF8 << 48), a.view(np.uint64))


def per_sample(out, s):
    """Sample ``s`` recomputed on its own: fr.reduce of x along the sample's plan."""
    return fr.reduce(
        out.x[:, None],
        out.plan(s),
        input=out.input,
        accumulate=out.accumulate,
        rounding=out.rounding,
        algorithm=out.algorithm,
        output=out.output,
    )[0]


@pytest.mark.parametrize("family", [*FAMILIES, "hier:2", "tree:nccl:2", "ring:mpich", "blocked:3"])
@pytest.mark.parametrize(
    ("inp", "acc", "mode"),
    [
        ("bf16", "bf16", "nearest_even"),
        ("fp32", "fp16", "toward_zero"),
        ("fp16", "fp32", "up"),
        ("fp32", "fp64", "down"),
    ],
)
def test_vectorized_equals_per_sample_loop(family, inp, acc, mode):
    rng = np.random.default_rng(11)
    x = rng.standard_normal(8) * np.exp(rng.uniform(-5, 5, 8))
    out = order_outcomes(x, family, samples=40, input=inp, accumulate=acc, rounding=mode, seed=3)
    loop = np.array([per_sample(out, s) for s in range(out.samples)])
    assert (bits(loop) == bits(out.values)).all()


@pytest.mark.parametrize("family", ["sequential", "pairwise", "ring:nccl", "random_tree", "atomic"])
def test_algorithm_and_output_pass_through(family):
    x = np.random.default_rng(12).standard_normal(16) * 100
    for algorithm, output in [("kahan", None), ("neumaier", None), ("plain", "bf16")]:
        out = order_outcomes(
            x, family, samples=20, input="bf16", accumulate="fp16", algorithm=algorithm, output=output, seed=4
        )
        assert out.output == (output or "fp16")
        loop = np.array([per_sample(out, s) for s in range(out.samples)])
        assert (bits(loop) == bits(out.values)).all()
    # an order-independent algorithm: one outcome, the correctly rounded sum
    for algorithm in ("exact", "binned"):
        out = order_outcomes(x, family, samples=50, input="bf16", accumulate="bf16", algorithm=algorithm)
        assert len(out.distinct) == 1
        if algorithm == "exact":
            assert out.histogram() == {0: 50}
    plain = order_outcomes(x, family, samples=50, input="bf16", accumulate="bf16")
    assert len(plain.distinct) > 1  # while plain sums of the same data are order sensitive


def test_relabel_direction_sequential_sums_x_in_perm_order():
    # independent of Plan.relabel: sample s is the left fold of x[perms[s]]
    x = fr.round_to(np.random.default_rng(1).standard_normal(8), "bf16").astype(np.float64)
    out = order_outcomes(x, samples=30, input="bf16", accumulate="bf16", seed=1)
    for s in range(out.samples):
        first, *rest = out.perms[s]
        acc = x[first]
        for w in rest:  # bf16 + bf16 is exact in float64: round once
            acc = float(fr.round_to(np.array([acc + x[w]]), "bf16")[0])
        assert acc == out.values[s]
    assert len(set(out.values.tolist())) > 1


def test_tree_from_gaps_reaches_every_shape():
    # the 4! gap orders over n = 5 leaves give all Catalan(4) = 14 shapes
    shapes = {tree_from_gaps(range(5), g).draw() for g in itertools.permutations(range(4))}
    assert len(shapes) == 14
    assert tree_from_gaps([3, 1, 0, 2], [0, 1, 2]).draw() == "(((3+1)+0)+2)"
    assert tree_from_gaps([3, 1, 0, 2], [2, 1, 0]).draw() == "(3+(1+(0+2)))"
    assert tree_from_gaps([3, 1, 0, 2], [0, 2, 1]).draw() == "((3+1)+(0+2))"
    with pytest.raises(fr.InvalidArgument, match="permutation"):
        tree_from_gaps([0, 1, 2], [1, 1])


def test_random_tree_draws_several_shapes_and_orders():
    out = order_outcomes(np.arange(6.0), "random_tree", samples=100, seed=2)
    depths = {tuple(out.plan(s).depths()[out.perms[s]]) for s in range(out.samples)}
    assert len(depths) > 5
    assert len({tuple(p) for p in out.perms}) > 90


@settings(max_examples=30)
@given(x=fst.arrays("fp16", st.tuples(st.integers(1, 40), st.just(1))), family=st.sampled_from(FAMILIES))
def test_fp64_accumulator_of_fp16_inputs_has_one_outcome(x, family):
    out = order_outcomes(x[:, 0], family, samples=50, input="fp16", accumulate="fp64")
    finite = np.isfinite(out.exact_value)
    assert len(out.distinct) == 1
    if finite:  # fp16 values span 40 bits: every partial sum is exact in fp64
        assert out.errors_ulps.tolist() == [0.0]
        assert out.histogram() == {0: 50}


@settings(max_examples=30)
@given(e=st.integers(-5, 5), k=st.integers(2, 12), family=st.sampled_from(["sequential", "random_tree"]))
def test_fp16_accumulator_adversarial_has_several_outcomes(e, k, family):
    # one big value and k addends of half its ulp: each alone ties to even and vanishes,
    # two of them first add up to a full ulp
    x = np.array([2.0**e] + [2.0 ** (e - 11)] * k)
    out = order_outcomes(x, family, samples=300, input="fp16", accumulate="fp16", seed=e + 7)
    assert np.any(out.distinct != 0)  # some orders lose bits: a nonzero result for a zero sum
    assert out.counts.sum() == 300


PAIRS = [
    ("fp16", "fp16"),
    ("bf16", "bf16"),
    ("fp16", "fp32"),
    ("bf16", "fp32"),
    ("fp32", "fp32"),
    ("fp8_e5m2", "fp8_e5m2"),
]


@settings(max_examples=25)
@given(data=st.data(), pair=st.sampled_from(PAIRS), family=st.sampled_from(FAMILIES))
def test_every_outcome_within_apriori_bound(data, pair, family):
    inp, acc = pair
    n = data.draw(fst.worker_counts(1, 12))
    cap = fr.get_format(acc).max_finite / (4 * n)  # no partial sum can overflow
    X = data.draw(fst.arrays(inp, (n, 1), max_magnitude=cap))
    out = order_outcomes(X[:, 0], family, samples=30, input=inp, accumulate=acc, seed=5)
    exact = out.exact.fraction(0)
    for s in range(out.samples):
        bound = apriori_bound(out.x[:, None], out.plan(s), acc)[0]
        err = abs(Fraction(float(out.values[s])) - exact)
        assert err <= Fraction(bound) * (1 + Fraction(1, 2**40)), (s, out.plan(s).draw())


def test_reproducible_for_a_fixed_seed():
    x = np.random.default_rng(4).standard_normal(20)
    for family in FAMILIES:
        a = order_outcomes(x, family, samples=200, accumulate="bf16", seed=9)
        b = order_outcomes(x, family, samples=200, accumulate="bf16", seed=9)
        c = order_outcomes(x, family, samples=200, accumulate="bf16", seed=10)
        assert (bits(a.values) == bits(b.values)).all()
        assert (a.perms == b.perms).all()
        assert not (a.perms == c.perms).all()
    s1 = order_outcomes(x, samples=100, accumulate="bf16", rounding="stochastic", seed=1)
    s2 = order_outcomes(x, samples=100, accumulate="bf16", rounding="stochastic", seed=1)
    assert (bits(s1.values) == bits(s2.values)).all()


def test_distinct_counts_errors_and_steps_agree():
    x = np.random.default_rng(6).standard_normal(32) * 10
    out = order_outcomes(x, "random_tree", samples=500, input="bf16", accumulate="bf16")
    assert out.counts.sum() == 500
    assert (np.diff(out.distinct) > 0).all()
    for v, c in zip(out.distinct, out.counts, strict=True):
        assert (bits(out.values) == bits(v)).sum() == c
    # unsigned errors agree with metrics.ulp_error; the sign is that of v - exact
    col = np.repeat(out.x[:, None], len(out.distinct), axis=1)
    mag = ulp_error(out.distinct, fr.exact_sum(col), "bf16")
    np.testing.assert_allclose(np.abs(out.errors_ulps), mag, rtol=1e-12)
    assert (np.sign(out.errors_ulps) == np.sign(out.distinct - out.exact_value)).all()
    rn = out.correctly_rounded
    assert ((out.steps == 0) == (out.distinct == rn)).all()
    assert (np.sign(out.steps) == np.sign(out.distinct - rn)).all()
    assert out.min_error_ulps == out.errors_ulps.min()
    assert sum(out.histogram().values()) == 500


def test_signed_zeros_and_nan():
    out = order_outcomes(np.array([-0.0, -0.0, -0.0]), samples=10)
    assert out.distinct.tolist() == [0.0]
    assert np.signbit(out.distinct[0])
    out = order_outcomes(np.array([1.0, np.nan, 2.0]), samples=10)
    assert len(out.distinct) == 1
    assert np.isnan(out.distinct[0])
    assert np.isnan(out.min_error_ulps)
    assert out.histogram() == {}
    out = order_outcomes(np.array([60000.0, 60000.0, -60000.0]), samples=60, input="fp16", accumulate="fp16")
    assert np.isinf(out.distinct).any()
    assert 60000.0 in out.distinct.tolist()


def test_summary_table():
    x = np.random.default_rng(8).standard_normal(64)
    out = order_outcomes(x, samples=2000, input="bf16", accumulate="bf16")
    text = out.summary(max_rows=3)
    assert float.hex(out.exact_value) in text
    assert "rounded to float64" not in text  # bf16 sums of 64 values are float64 values
    x2 = np.array([1.0, 2.0**-60, 2.0**-120])
    assert "rounded to float64" in order_outcomes(x2, samples=3, input="fp64", accumulate="fp64").summary()
    assert "family=sequential n=64 samples=2000 seed=0" in text
    assert f"({len(out.distinct) - 3} less frequent results not shown)" in text
    top = int(out.counts.max())
    assert any(f" {top} " in line for line in text.splitlines())


def test_bad_arguments():
    with pytest.raises(fr.InvalidArgument, match="shape"):
        order_outcomes(np.ones((3, 2)))
    with pytest.raises(fr.InvalidArgument, match="samples"):
        order_outcomes(np.ones(3), samples=0)
    with pytest.raises(fr.InvalidArgument, match="did you mean 'pairwise'.*random_tree"):
        order_outcomes(np.ones(3), "pairwse")


def test_errors_stay_finite_when_the_exact_sum_is_zero():
    """The nb05 bug in outcomes: errors were measured against the smallest subnormal when the sum cancels."""
    x = np.array([1.0, 2.0**-9, -1.0, 2.0**-12, -(2.0**-9), -(2.0**-12)])  # exact sum 0, orders that lose bits
    out = order_outcomes(x, samples=300, input="bf16", accumulate="bf16", seed=3)
    assert out.exact_value == 0
    assert np.any(out.distinct != 0)  # some orders lose bits: a nonzero result for a zero sum
    assert np.all(np.abs(out.errors_ulps) < 2.0**8)  # |v| / ulp(v) < 2**p for bf16
    mag = ulp_error(out.distinct, fr.exact_sum(np.repeat(out.x[:, None], len(out.distinct), axis=1)), "bf16")
    np.testing.assert_array_equal(np.abs(out.errors_ulps), mag)
