import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fpreduce as fr
from fpreduce.base import jit

ACC = ["fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e5m2", "fp8_e4m3"]
MODES = ["nearest_even", "toward_zero", "up", "down"]


def same(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return bool(np.all((np.isnan(a) & np.isnan(b)) | (a.view(np.uint64) == b.view(np.uint64))))


@st.composite
def problems(draw):
    n = draw(st.integers(1, 7))
    m = draw(st.integers(1, 4))
    mag = st.builds(
        lambda s, e, sign: sign * s * 2.0**e,
        st.floats(1, 2, allow_nan=False),
        st.integers(-30, 30),
        st.sampled_from([1.0, -1.0]),
    )
    vals = st.one_of(mag, st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0**-8, 3.0]))
    X = draw(hnp.arrays(np.float64, (n, m), elements=vals))
    perm = draw(st.permutations(range(n)))
    shape = draw(st.sampled_from(["sequential", "pairwise", "reverse", "random"]))
    if shape == "random":
        nodes = [int(p) for p in perm]
        while len(nodes) > 1:
            i = draw(st.integers(0, len(nodes) - 2))
            nodes[i : i + 2] = [(nodes[i], nodes[i + 1])]
        plan = fr.plans.tree(nodes[0])
    else:
        plan = fr.plans.parse(shape, n).relabel(perm)
    return X, plan


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("acc", ACC)
@given(prob=problems(), inp=st.sampled_from(["fp32", "bf16", "fp16"]))
def test_fast_engine_equals_fraction_reference(acc, mode, prob, inp):
    X, plan = prob
    fast = fr.reduce(X, plan, input=inp, accumulate=acc, rounding=mode)
    ref = fr.reduce_reference(X, plan, input=inp, accumulate=acc, rounding=mode)
    assert same(fast, ref), (X, plan.draw(), fast, ref)


@pytest.mark.parametrize(("name", "dt"), [("fp16", np.float16), ("fp32", np.float32), ("bf16", ml_dtypes.bfloat16)])
def test_sequential_matches_native_arithmetic(name, dt):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((16, 20_000)) * np.exp(rng.uniform(-6, 6, (16, 20_000)))
    Xn = X.astype(dt)
    acc = Xn[0].copy()
    for i in range(1, 16):
        acc = (acc + Xn[i]).astype(dt)
    got = fr.reduce(Xn.astype(np.float32), "sequential", input=name, accumulate=name)
    assert same(got, acc.astype(np.float64))


def test_order_changes_bits_but_fixed_order_reproducible():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((32, 5000)).astype(np.float32)
    a = fr.reduce(X, "sequential", input="bf16", accumulate="bf16")
    b = fr.reduce(X, "sequential", input="bf16", accumulate="bf16")
    assert same(a, b)
    c = fr.reduce(X, fr.plans.sequential(32, rng.permutation(32)), input="bf16", accumulate="bf16")
    assert 0.05 < float(np.mean(a != c)) < 1.0


def test_wide_accumulator_is_order_independent():
    # fp16 inputs into fp64: every partial sum is exact for 8 workers
    rng = np.random.default_rng(8)
    X = rng.standard_normal((8, 3000)).astype(np.float16).astype(np.float32)
    base = fr.reduce(X, "sequential", input="fp16", accumulate="fp64")
    for _ in range(5):
        p = fr.plans.pairwise(8).relabel(rng.permutation(8))
        assert same(fr.reduce(X, p, input="fp16", accumulate="fp64"), base)


def test_directed_rounding_needs_exact_remainder():
    X = np.array([[1 + 2.0**-7], [-(2.0**-30)]])
    got = fr.reduce(X, "sequential", input="fp32", accumulate="bf16", rounding="toward_zero")
    assert got[0] == 1.0


def test_signed_zero_rules():
    X = np.array([[1.0, -0.0, 0.0], [-1.0, -0.0, 0.0]])
    assert same(fr.reduce(X, "sequential"), [0.0, -0.0, 0.0])
    assert same(fr.reduce(X, "sequential", rounding="down"), [-0.0, -0.0, 0.0])


def test_fp16_overflow_and_swamping():
    X = np.full((3, 1), 40000.0)
    assert np.isinf(fr.reduce(X, "sequential", input="fp16", accumulate="fp16")[0])
    assert fr.reduce(X, "sequential", input="fp16", accumulate="fp32")[0] == 120000.0
    ones = np.ones((3000, 1))
    assert fr.reduce(ones, "sequential", input="fp16", accumulate="fp16")[0] == 2048.0
    assert fr.reduce(ones, "sequential", input="bf16", accumulate="bf16")[0] == 256.0


def test_stochastic_is_seeded():
    rng = np.random.default_rng(9)
    X = rng.standard_normal((16, 1000)).astype(np.float32)
    a = fr.reduce(X, "pairwise", accumulate="bf16", rounding="stochastic", seed=3)
    b = fr.reduce(X, "pairwise", accumulate="bf16", rounding="stochastic", seed=3)
    assert same(a, b)
    with pytest.raises(fr.InvalidArgument, match="seed"):
        fr.reduce(X, "pairwise", accumulate="bf16", rounding="stochastic")


def test_bad_plans():
    with pytest.raises(fr.InvalidArgument, match="exactly once"):
        fr.plans.tree("((0,1),(1,2))")
    with pytest.raises(fr.InvalidArgument, match="did you mean 'pairwise'"):
        fr.plans.parse("pairwse", 4)
    with pytest.raises(fr.InvalidArgument, match="rows"):
        fr.reduce(np.ones((3, 2)), fr.plans.pairwise(4))


def test_plan_depths_and_draw():
    p = fr.plans.parse("((0,1),(2,(3,4)))")
    assert p.depths().tolist() == [2, 2, 2, 3, 3]
    assert fr.plans.sequential(4).draw() == "(((0+1)+2)+3)"
    assert fr.plans.pairwise(4).relabel([3, 2, 1, 0]).draw() == "((3+2)+(1+0))"


@pytest.mark.parametrize("conv", ["nccl", "ompi", "gloo"])
@pytest.mark.parametrize("m", [1, 3, 5, 17])
def test_ring_equals_reference_and_per_chunk_folds(conv, m):
    n = 5
    rng = np.random.default_rng(m)
    X = (rng.standard_normal((n, m)) * np.exp(rng.uniform(-8, 8, (n, m)))).astype(np.float32)
    plan = fr.plans.parse(f"ring:{conv}", n)
    for mode in MODES:
        fast = fr.reduce(X, plan, input="bf16", accumulate="bf16", rounding=mode)
        ref = fr.reduce_reference(X, plan, input="bf16", accumulate="bf16", rounding=mode)
        assert same(fast, ref)
    # independent: chunk c is a sequential fold in the convention's order
    start = {
        "nccl": lambda c: [(c + 1 + k) % n for k in range(n)],
        "ompi": lambda c: [(c + k) % n for k in range(n)],
        "gloo": lambda c: [(c - 1 - k) % n for k in range(n)],
    }[conv]
    got = fr.reduce(X, plan, input="bf16", accumulate="bf16")
    b = plan.bounds(m)  # gloo sizes its chunks its own way; the others split like array_split
    for c in range(n):
        idx = np.arange(b[c], b[c + 1])
        if idx.size:
            want = fr.reduce(X[:, idx], fr.plans.sequential(n, start(c)), input="bf16", accumulate="bf16")
            assert same(got[idx], want)


def test_ring_chunks_differ_from_sequential_and_relabel():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((8, 4000)).astype(np.float32)
    ring = fr.plans.ring(8, "nccl")
    a = fr.reduce(X, ring, input="bf16", accumulate="bf16")
    b = fr.reduce(X, "sequential", input="bf16", accumulate="bf16")
    assert not same(a, b)
    perm = rng.permutation(8)
    r2 = ring.relabel(perm)
    assert same(
        fr.reduce(X[perm], ring, input="bf16", accumulate="bf16"), fr.reduce(X, r2, input="bf16", accumulate="bf16")
    )
    with pytest.raises(fr.InvalidArgument, match="did you mean 'gloo'"):
        fr.plans.parse("ring:glo", 4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("average", ["none", "after", "premultiply", "predivide", "ddp"])
@given(
    prob=problems(),
    pair=st.sampled_from(
        [("fp32", "bf16"), ("fp32", "fp16"), ("fp64", "fp32"), ("bf16", "bf16"), ("fp16", "fp8_e4m3")]
    ),
)
def test_output_and_averaging_equal_fraction_reference(mode, average, prob, pair):
    X, plan = prob
    acc, out = pair
    kw = dict(input="fp16" if acc == "fp16" else "bf16", accumulate=acc, output=out, rounding=mode, average=average)
    fast = fr.reduce(X, plan, **kw)
    ref = fr.reduce_reference(X, plan, **kw)
    assert same(fast, ref), (X, plan.draw(), fast, ref)


def test_accumulate_wide_round_once_beats_narrow_accumulator():
    # 1 + 256 * 2^-9 : a bf16 accumulator swamps every addend; fp32 then one rounding does not
    X = np.concatenate([[[1.0]], np.full((256, 1), 2.0**-9)])
    narrow = fr.reduce(X, "sequential", input="bf16", accumulate="bf16")
    wide = fr.reduce(X, "sequential", input="bf16", accumulate="fp32", output="bf16")
    assert narrow[0] == 1.0
    assert wide[0] == 1.5


def test_wide_output_rounding_is_round_to_of_the_sums():
    """Sums of 8192 columns rounded once to bf16 or tf32 (the reduction's own array, rounded in place, on one and
    two threads) are ``round_to`` of the fp32 sums, a tie, NaN and an overflow to Inf among them; the inputs stay
    as they were, a single row's too (its sum is the row itself)."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((5, 8192)).astype(np.float32)
    X[:, :3] = 0.0
    X[:2, 0] = [1.0, 2.0**-8]  # 1 + 2**-8: a bf16 tie, to even (1.0)
    X[3, 1], X[0, 2] = np.nan, 3.4e38  # (3.4e38 is beyond bf16's largest finite and its half step: Inf)
    before = X.copy()
    for t in (1, 2):
        for rows in (X, X[:1]):
            acc = fr.reduce(rows, "sequential", accumulate="fp32", threads=t)
            for fmt in ("bf16", "tf32"):
                got = fr.reduce(rows, "sequential", accumulate="fp32", output=fmt, threads=t)
                assert np.array_equal(got.view(np.uint32), fr.round_to(acc, fmt).view(np.uint32)), (t, fmt)
    assert np.array_equal(X.view(np.uint32), before.view(np.uint32))
    got = fr.reduce(X, "sequential", accumulate="fp32", output="bf16")
    assert got[0] == 1.0
    assert np.isnan(got[1])
    assert got[2] == np.inf


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16", "fp64"])
def test_ddp_scaling_is_torchs_float32_multiply(fmt):
    """average="ddp" scales each input as ``grad * (1. / N)`` does in torch: the factor rounded to float32
    (float64 for fp64), the product in float32 (numpy's float32 multiply: one IEEE rounding), then rounded to
    the input format. Checked column by column with one nonzero row, so the sum adds nothing (but turns a
    -0.0 into +0.0: values are compared, not bits)."""
    rng = np.random.default_rng(7)
    for n in (3, 5, 6, 7, 12):
        x = fr.round_to(rng.standard_normal(3000) * 2.0 ** rng.integers(-20, 20, 3000), fmt).astype(np.float64)
        X = np.zeros((n, x.size))
        X[1] = x
        got = fr.reduce(X, "sequential", input=fmt, accumulate=fmt, average="ddp")
        if fmt == "fp64":
            want = x * (1.0 / n)
        else:
            want = fr.round_to((x.astype(np.float32) * np.float32(1.0 / n)).astype(np.float64), fmt)
        assert np.array_equal(got.astype(np.float64), np.asarray(want, dtype=np.float64), equal_nan=True), (fmt, n)
        if fmt == "fp32":  # ddp is NCCL-style premultiply for fp32, and not predivide
            assert same(got, fr.reduce(X, "sequential", input=fmt, accumulate=fmt, average="premultiply"))
            pre = fr.reduce(X, "sequential", input=fmt, accumulate=fmt, average="predivide")
            assert (n & (n - 1) == 0) or not same(got, pre)


def test_premultiply_differs_from_sum_then_divide():
    # NCCL's Avg rounds x/N per input; sum-then-divide rounds once at the end
    rng = np.random.default_rng(4)
    X = rng.standard_normal((3, 4000)).astype(np.float32)
    pre = fr.reduce(X, "sequential", input="bf16", accumulate="bf16", average="premultiply")
    after = fr.reduce(X, "sequential", input="bf16", accumulate="bf16", average="after")
    assert 0.01 < float(np.mean(pre != after)) < 0.9
    # with N a power of two both are exact scalings of the same sum
    X4 = X[:2]
    assert same(
        fr.reduce(X4, "sequential", input="bf16", accumulate="fp32", average="premultiply"),
        fr.reduce(X4, "sequential", input="bf16", accumulate="fp32", average="after"),
    )


def test_blocking_does_not_change_bits():
    # sizes around the engine's internal block of 2^14 elements, ring segments straddling blocks
    rng = np.random.default_rng(11)
    m = (1 << 14) * 2 + 37
    X = rng.standard_normal((6, m)).astype(np.float32)
    for plan in ["sequential", "pairwise", "ring:nccl"]:
        whole = fr.reduce(X, plan, input="bf16", accumulate="bf16")
        p = fr.plans.parse(plan, 6)
        if isinstance(p, fr.plans.SegmentedPlan):
            b = p.bounds(m)
            for c in range(6):
                part = fr.reduce(X[:, b[c] : b[c + 1]], p.trees[c], input="bf16", accumulate="bf16")
                assert same(whole[b[c] : b[c + 1]], part)
        else:
            cut = 5000
            assert same(whole[:cut], fr.reduce(X[:, :cut], p, input="bf16", accumulate="bf16"))
            assert same(whole[cut:], fr.reduce(X[:, cut:], p, input="bf16", accumulate="bf16"))


@pytest.mark.parametrize(
    "plan", ["sequential", "ring:nccl", "ring:gloo", "ring:ompi", "rabenseifner", "tree:nccl:4", "hier:4", "atomic"]
)
@given(cuts=st.lists(st.integers(1, 20010), min_size=1, max_size=4, unique=True))
def test_reducing_piece_by_piece_equals_reducing_whole(plan, cuts):
    # the runner reduces long vectors in element chunks (offset, total): same bits as whole
    m = 20011
    X = np.random.default_rng(13).standard_normal((12, m)).astype(np.float32)
    whole = fr.reduce(X, plan, input="bf16", accumulate="bf16", seed=3)
    edges = [0, *sorted(cuts), m]
    parts = [
        fr.reduce(X[:, a:b], plan, input="bf16", accumulate="bf16", seed=3, offset=a, total=m)
        for a, b in zip(edges, edges[1:], strict=False)
    ]
    assert same(np.concatenate(parts), whole)


def test_offset_outside_the_vector_is_refused():
    X = np.ones((3, 4), dtype=np.float32)
    with pytest.raises(fr.InvalidArgument, match="offset"):
        fr.reduce(X, "ring:nccl", offset=2, total=5)


@pytest.mark.parametrize("acc", ["bf16", "fp16", "fp32"])
def test_atomic_plan_equals_per_element_sequential_folds(acc):
    rng = np.random.default_rng(12)
    X = (rng.standard_normal((7, 300)) * np.exp(rng.uniform(-5, 5, (7, 300)))).astype(np.float32)
    plan = fr.plans.atomic(7, seed=5)
    got = fr.reduce(X, plan, input="bf16", accumulate=acc)
    orders = plan.orders(0, 300)
    for j in range(0, 300, 17):
        want = fr.reduce(X[:, j : j + 1], fr.plans.sequential(7, orders[j]), input="bf16", accumulate=acc)
        assert same(got[j : j + 1], want)
    ref = fr.reduce_reference(X[:, :40], plan, input="bf16", accumulate=acc)
    assert same(got[:40], ref)
    assert same(fr.reduce(X, "atomic", input="bf16", accumulate=acc, seed=5), got)
    assert not same(fr.reduce(X, "atomic", input="bf16", accumulate=acc, seed=6), got) or acc == "fp32"


@pytest.mark.parametrize(
    "name",
    [
        "kary:3",
        "blocked:3",
        "rd",
        "rabenseifner",
        "linear",
        "tree:nccl:2",
        "hier:2",
        "ring:gloo",
        "ring:mpich",
        "numpy",
    ],
)
@given(X=hnp.arrays(np.float64, (6, 9), elements=st.floats(-1e4, 1e4, width=32)))
def test_collective_plans_fast_equals_reference(name, X):
    plan = fr.plans.parse(name, 6)
    for mode in ["nearest_even", "toward_zero"]:
        fast = fr.reduce(X, plan, input="bf16", accumulate="bf16", rounding=mode)
        ref = fr.reduce_reference(X, plan, input="bf16", accumulate="bf16", rounding=mode)
        assert same(fast, ref)


@pytest.mark.parametrize(
    ("mode", "want"),
    [
        ("nearest_even", np.inf),
        ("toward_zero", 1.7976931348623157e308),
        ("up", np.inf),
        ("down", 1.7976931348623157e308),
    ],
)
def test_fp64_overflow_follows_the_rounding_mode(mode, want):
    X = np.array([[1.7976931348623157e308, -1.7976931348623157e308], [2.0**971, -(2.0**971)]])
    got = fr.reduce(X, "sequential", input="fp64", accumulate="fp64", rounding=mode)
    assert got[0] == want
    assert got[1] == -{"up": 1.7976931348623157e308, "down": np.inf}.get(mode, want)
    assert same(got, fr.reduce_reference(X, "sequential", input="fp64", accumulate="fp64", rounding=mode))


@pytest.mark.parametrize("algorithm", ["binned", "exact"])
def test_order_free_algorithms_are_order_independent_through_reduce(algorithm):
    rng = np.random.default_rng(13)
    X = (rng.standard_normal((9, 500)) * np.exp(rng.uniform(-10, 10, (9, 500)))).astype(np.float32)
    base = fr.reduce(X, "sequential", input="bf16", accumulate="bf16", algorithm=algorithm)
    for plan in ["pairwise", "ring:nccl", "atomic", "rd"]:
        assert same(fr.reduce(X[rng.permutation(9)], plan, input="bf16", accumulate="bf16", algorithm=algorithm), base)
    assert same(base, fr.exact_sum(fr.round_to(X, "bf16")).round("bf16")) or algorithm == "binned"


def test_compensated_through_reduce_uses_the_plan_leaf_order():
    from fpreduce.core.algorithms import compensated
    from fpreduce.core.formats import get_format
    from fpreduce.core.rounding import Mode

    rng = np.random.default_rng(14)
    X = fr.round_to(rng.standard_normal((8, 300)).astype(np.float32), "bf16")
    order = rng.permutation(8)
    got = fr.reduce(X, fr.plans.sequential(8, order), input="bf16", accumulate="bf16", algorithm="kahan")
    want = compensated(X[order], get_format("bf16"), Mode.NEAREST_EVEN, kind="kahan")
    assert same(got, want)


@pytest.mark.parametrize("acc", ["fp32", "tf32", "bf16", "fp16", "fp8_e5m2"])
@given(prob=problems())
def test_every_result_within_the_plans_a_priori_bound(acc, prob):
    from fpreduce.core.metrics import apriori_bound

    X, plan = prob
    terms = fr.round_to(fr.round_to(X, "fp32"), acc)  # the terms as the accumulator sees them
    y = fr.reduce(X, plan, input="fp32", accumulate=acc)
    if not np.all(np.isfinite(y)):
        return  # overflow: the bound assumes none
    err = np.abs(fr.exact_sum(terms).error_of(y))
    assert np.all(err <= apriori_bound(terms, plan, acc) * (1 + 1e-9)), (X, plan.draw(), y)


def test_algorithm_and_average_are_parsed_once_with_a_hint():
    from fpreduce.core.options import ALGORITHMS, AVERAGES, get_algorithm, get_average

    assert ALGORITHMS == ("plain", "kahan", "neumaier", "binned", "exact")
    assert AVERAGES == ("none", "after", "premultiply", "predivide", "ddp")
    assert [get_algorithm(a) for a in ALGORITHMS] == list(ALGORITHMS)
    assert [get_average(a) for a in AVERAGES] == list(AVERAGES)
    X = np.ones((3, 2), dtype=np.float32)
    with pytest.raises(fr.InvalidArgument, match="did you mean 'neumaier'"):
        fr.reduce(X, "sequential", algorithm="neumayer")
    with pytest.raises(fr.InvalidArgument, match="did you mean 'predivide'"):
        fr.reduce(X, "sequential", average="pre-divide")
    with pytest.raises(fr.InvalidArgument, match="did you mean 'after'"):
        fr.reduce_reference(X, "sequential", average="afterwards")


def _subnormal_edge(fmt, n, rng):
    """Columns of ``n`` rows at ``fmt``'s subnormal edge: k smin, 2**emin +- a few smin, their negatives, +-0;
    first each value alone in row 0 (its scaling seen bare, the other rows +0), with values near max_finite
    (fp64's remainder of x / N took a NaN there: Veltkamp's split overflows above 2**996), then random mixes
    of the small ones."""
    f = fr.get_format(fmt)
    t, tiny = 2.0 ** (f.emin - f.precision + 1), 2.0**f.emin
    pos = [k * t for k in range(1, 10)] + [tiny + j * t for j in range(-3, 4)] + [3 * tiny + t, 2.0 * tiny]
    vals = np.array(pos + [-v for v in pos] + [0.0, -0.0])
    big = f.max_finite * np.array([1.0, -1.0, 0.75, 2.0**-30, -(2.0**-27)])
    bare = np.zeros((n, vals.size + big.size))
    bare[0] = np.concatenate([vals, big])
    return np.concatenate([bare, rng.choice(vals, (n, 60))], axis=1)


@pytest.mark.parametrize("fmt", ["fp64", "fp32", "bf16", "fp16"])
@pytest.mark.parametrize("average", ["after", "premultiply", "predivide", "ddp"])
def test_averages_round_once_at_the_subnormal_edge(fmt, average):
    """x / N and x * round(1/N) rounded once in every mode where the quotient is subnormal or below the
    smallest subnormal (fp64 has no wider type: its remainder used to underflow, giving the nearest result in
    the directed modes), signed zeros and values near overflow included: compiled == numpy == the Fraction
    reference. Stochastic: between the all-down and the all-up results (every step is monotone); compiled ==
    numpy on the columns of one nonzero value, whose sums are exact (compiled fp64 stochastic addition
    misjudges a remainder against a subnormal gap: a separate defect of _kernels_round.add_fp64)."""
    rng = np.random.default_rng(24)
    for n in (2, 3, 5, 7):
        X = _subnormal_edge(fmt, n, rng)
        for plan in ("sequential", "pairwise"):
            kw = dict(input=fmt, accumulate=fmt, average=average)
            for mode in MODES:
                got = fr.reduce(X, plan, rounding=mode, **kw)
                with jit.disabled():
                    assert same(got, fr.reduce(X, plan, rounding=mode, **kw)), (n, plan, mode)
                ref = fr.reduce_reference(X, plan, rounding=mode, **kw)
                assert same(got, ref), (n, plan, mode, X[:, ~same_each(got, ref)], got, ref)
            with jit.disabled():
                got = fr.reduce(X, plan, rounding="stochastic", seed=5, **kw)
            lo, hi = (fr.reduce_reference(X, plan, rounding=m, **kw).astype(np.float64) for m in ("down", "up"))
            assert np.all((lo <= got) & (got <= hi)), (n, plan)
            bare = X[:, : X.shape[1] - 60]
            compiled = fr.reduce(bare, plan, rounding="stochastic", seed=5, **kw)
            with jit.disabled():
                assert same(compiled, fr.reduce(bare, plan, rounding="stochastic", seed=5, **kw)), (n, plan)


def same_each(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (np.isnan(a) & np.isnan(b)) | (a.view(np.uint64) == b.view(np.uint64))


@pytest.mark.parametrize("average", ["after", "premultiply", "predivide"])
@pytest.mark.parametrize("n", [3, 7])
def test_stochastic_average_of_fp64_subnormals_follows_the_law(average, n):
    """k 2**-1074 (row 0; the other rows 0: the sum is exact) scaled by 1/n goes up to the next multiple of
    2**-1074 exactly when its uniform (counter AFTER_T for the sum, SCALE_T for row 0's input) is below the
    exact fraction; the fraction used to be lost with the underflowing remainder (the nearest result)."""
    from fractions import Fraction

    from test_srload import AFTER_T, SCALE_T
    from test_tall import splitmix_uniform

    t, seed, ks = 2.0**-1074, 11, np.arange(-40, 41)
    X = np.zeros((n, ks.size))
    X[0] = ks * t
    key = int(np.random.default_rng(seed).integers(0, 2**63))
    c = Fraction(1, n) if average != "premultiply" else Fraction(1.0 / n)
    counter = AFTER_T if average == "after" else SCALE_T
    want = []
    for e, k in enumerate(ks):
        q = int(k) * c
        lo = q.numerator // q.denominator
        up = Fraction(splitmix_uniform(key, e, counter)) < q - lo
        y = np.copysign((lo + up) * t, float(k))  # a zero keeps k's sign (-0 for -1 < q < 0) ...
        want.append(y if average == "after" else y + 0.0)  # ... but for a scaled input: -0 + (+0) is +0
    got = fr.reduce(X, "sequential", input="fp64", accumulate="fp64", rounding="stochastic", seed=seed, average=average)
    assert same(got, want), (ks[~same_each(got, want)], got[~same_each(got, want)] / t)


@pytest.mark.parametrize(
    ("X", "kw", "names"),
    [
        ([[1.0, 2.0], [3.0]], {}, "X"),  # ragged
        (np.ma.masked_array(np.ones((2, 2)), [[1, 0], [0, 0]]), {}, "X"),  # a mask is refused, never ignored
        (np.ones((4, 3)), {"rounding": "stochastic", "seed": -1}, "seed"),
        (np.ones((4, 3)), {"rounding": "stochastic", "seed": 1.5}, "seed"),
        (np.ones((4, 3)), {"seed": True}, "seed"),
        (np.ones((4, 3)), {"plan": 5}, "plan"),
        (np.ones((4, 3)), {"plan": None}, "plan"),
    ],
    ids=["ragged", "masked", "seed-negative", "seed-float", "seed-bool", "plan-int", "plan-none"],
)
def test_bad_arguments_are_invalid_argument_naming_the_argument(X, kw, names):
    """Issue 26: never a ValueError, TypeError or AttributeError from numpy or a missing attribute."""
    kw = {"plan": "sequential", **kw}
    with pytest.raises(fr.InvalidArgument, match=names):
        fr.reduce(X, kw.pop("plan"), **kw)


# Issue 27: formats travel with arrays (numpy, ml_dtypes, torch); result="native".
OWN = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "bf16": ml_dtypes.bfloat16}
OWN |= {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}


def _values(fmt, shape=(6, 7), seed=27):
    """Values of ``fmt`` (float32, float64 for fp64), small enough for every format."""
    x = np.random.default_rng(seed).standard_normal(shape) * 4
    return fr.round_to(x, fmt)


@pytest.mark.parametrize("fmt", list(OWN))
def test_input_defaults_to_the_arrays_own_format(fmt):
    X = _values(fmt).astype(OWN[fmt])
    for acc in (fmt, "fp32"):
        got = fr.reduce(X, "pairwise", accumulate=acc)
        assert same(got, fr.reduce(X.astype(np.float64), "pairwise", input=fmt, accumulate=acc))
        native = fr.reduce(X, "pairwise", accumulate=acc, result="native")
        assert native.dtype == np.dtype(OWN[acc])
        assert same(native.astype(np.float64), got)
    assert fr.reduce(X, "pairwise", accumulate=fmt).dtype == fr.get_format(fmt).value_dtype  # default: as before


def test_float64_arrays_are_fp64_inputs_and_python_floats_too():
    X = np.array([[1.0 + 2.0**-40], [1.0]])
    assert fr.reduce(X, "sequential", accumulate="fp64")[0] == 2 + 2.0**-40  # not rounded to fp32 first
    assert fr.reduce(X.tolist(), "sequential", accumulate="fp64")[0] == 2 + 2.0**-40
    assert fr.reduce(X, "sequential", input="fp32", accumulate="fp64")[0] == 2.0
    assert fr.reduce_reference(X, "sequential", accumulate="fp64")[0] == 2 + 2.0**-40


@pytest.mark.parametrize(
    ("dtype", "given", "ok"),
    [
        (ml_dtypes.bfloat16, "fp32", True),  # holds every bf16 value: nothing changes
        (ml_dtypes.bfloat16, "tf32", True),
        (ml_dtypes.float8_e4m3fn, "fp16", True),
        (np.float32, "bf16", True),  # a wide dtype carries narrower values: rounded, as documented
        (np.float64, "fp8_e5m2", True),
        (ml_dtypes.bfloat16, "fp16", False),  # a silent cast of bf16 values: refused
        (np.float16, "bf16", False),
        (np.float16, "fp8_e4m3", False),
        (ml_dtypes.float8_e5m2, "fp8_e4m3", False),
    ],
)
def test_explicit_input_wins_unless_it_would_cast_a_narrow_dtype(dtype, given, ok):
    X = np.ones((3, 2), dtype)
    if ok:
        assert fr.reduce(X, "sequential", input=given).tolist() == [3.0, 3.0]
        assert fr.explain(X, "sequential", input=given) is not None
    else:
        for f in (fr.reduce, fr.explain, fr.partial_sums):
            with pytest.raises(fr.InvalidArgument, match=f"input='{given}' cannot hold every value of X"):
                f(X, "sequential", input=given) if f is not fr.partial_sums else f(X, input=given)


def test_torch_tensors_of_every_floating_dtype_go_in_and_come_out():
    torch = pytest.importorskip("torch")
    for fmt in OWN:
        v = _values(fmt)
        T = torch.from_numpy(np.ascontiguousarray(v)).to(getattr(torch, fr.core.formats.NATIVE_DTYPES[fmt]))
        want = fr.reduce(v, "ring", input=fmt, accumulate=fmt)
        assert same(fr.reduce(T, "ring", accumulate=fmt), want)
        out = fr.reduce(T, "ring", accumulate=fmt, result="native")
        assert isinstance(out, torch.Tensor)
        assert out.dtype == T.dtype
        assert same(out.double().numpy(), want)
    B = torch.from_numpy(_values("bf16")).to(torch.bfloat16).requires_grad_()
    acc = B[0]
    for i in range(1, B.shape[0]):
        acc = acc + B[i]  # torch's own bf16 additions, one rounding each
    assert torch.equal(fr.reduce(B, "sequential", accumulate="bf16", result="native"), acc.detach())
    assert fr.reduce(B.T.T, "sequential", accumulate="tf32", result="native").dtype == torch.float32
    with pytest.raises(fr.InvalidArgument, match="X must be a float array"):
        fr.reduce(torch.ones(3, 2, dtype=torch.int32), "sequential")
    with pytest.raises(fr.InvalidArgument, match=r"torch.float8_e4m3fnuz tensors hold floats of no fpreduce format"):
        fr.reduce(torch.ones(3, 2).to(torch.float8_e4m3fnuz), "sequential")  # floats: not "must be a float array"
    with pytest.raises(fr.InvalidArgument, match="input='bf16' cannot hold every value of X's own format fp16"):
        fr.reduce(torch.ones(3, 2, dtype=torch.float16), "sequential", input="bf16")


def test_the_other_entry_points_take_the_arrays_format():
    torch = pytest.importorskip("torch")
    v = _values("bf16", (40, 3))
    T = torch.from_numpy(v).to(torch.bfloat16)
    P = fr.partial_sums(T, accumulate="bf16", result="native")
    assert P.dtype == torch.bfloat16
    assert same(P.double().numpy(), fr.partial_sums(v, input="bf16", accumulate="bf16"))
    assert same(fr.exact_sum(T).to_float64(), fr.exact_sum(v).to_float64())
    d = fr.dot(T[:, 0], T[:, 1], accumulate="bf16", result="native")
    assert d.dtype == torch.bfloat16
    assert d.shape == ()
    assert same(d.double().numpy(), fr.dot(v[:, 0], v[:, 1], input="bf16", accumulate="bf16"))
    assert fr.dot(v[:, 0].astype(ml_dtypes.bfloat16), v[:, 1]) == fr.dot(v[:, 0], v[:, 1])  # bf16 and fp32: fp32
    m = fr.matvec(T.T, T[:, 0], accumulate="bf16", result="native")
    assert m.dtype == torch.bfloat16
    assert m.shape == (3,)
    f = fr.fabsum(T, 8, accumulate="bf16", result="native")
    assert same(f.double().numpy(), fr.fabsum(v, 8, input="bf16", accumulate="bf16"))
    with pytest.raises(fr.InvalidArgument, match="fp64 inputs .input defaults to the arrays' own format"):
        fr.dot(np.ones(3), np.ones(3))


def test_import_fpreduce_never_imports_torch():
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, ml_dtypes, fpreduce as fr; "
        "fr.reduce(np.ones((2, 2), ml_dtypes.bfloat16), 'sequential', result='native'); fr.format_name('torch.half'); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**__import__("os").environ, "FPREDUCE_QUIET": "1"})


def test_scaled_averages_in_column_blocks_give_the_bits_of_one_pass(monkeypatch):
    """A wide reduction whose every input is scaled (premultiply, predivide, ddp) runs in column blocks on
    threads (``engine._in_blocks``, a wrapper of ``reduce``): the bits of one pass over every column, for bf16
    words and float32 rows, plans whose trees vary over the elements (ring chunks, atomics), stochastic and
    directed rounding, NaN, Inf, huge and tiny values, and a piece of a longer vector (offset, total)."""
    from fpreduce.core import engine

    rng = np.random.default_rng(11)
    X = rng.standard_normal((6, 3001)).astype(np.float32)
    X[2, 10:20], X[4, 30:35], X[:, 40:60], X[:, 60:80] = np.nan, -np.inf, X[:, 40:60] * 1e38, X[:, 60:80] * 1e-40
    cases = [
        (plan, avg, acc, rnd)
        for plan in ("sequential", "ring:nccl", "atomic")
        for avg in ("premultiply", "predivide", "ddp")
        for acc, rnd in (("bf16", "nearest_even"), ("fp32", "up"), ("bf16", "stochastic"))
    ]
    for A, inp in ((X.astype(ml_dtypes.bfloat16), None), (X, "bf16")):
        for plan, avg, acc, rnd in cases:
            kw = dict(input=inp, accumulate=acc, rounding=rnd, average=avg, seed=3, offset=500, total=5000)
            monkeypatch.setattr(engine, "_BLOCK_VALUES", 1 << 30)
            assert not engine._scaled_in_blocks(A, kw)
            whole = fr.reduce(A, plan, **kw)
            monkeypatch.setattr(engine, "_BLOCK_VALUES", 6 * 128)  # blocks of 128 columns: 24 of them
            assert engine._scaled_in_blocks(A, kw)
            for threads in (1, 3):
                got = fr.reduce(A, plan, threads=threads, **kw)
                assert np.array_equal(got.view(np.uint32), whole.view(np.uint32)), (plan, avg, acc, rnd, threads)
    assert not engine._scaled_in_blocks(X, dict(average="premultiply", seed=np.random.default_rng(1)))
    assert not engine._scaled_in_blocks(X, dict(average="premultiply", algorithm="kahan"))
    assert not engine._scaled_in_blocks(X, dict(average="none"))


def test_a_tensor_of_scaled_inputs_runs_in_blocks_and_a_native_result_stays_a_tensor(monkeypatch):
    """A torch tensor's columns go through the same blocks (its values a view of its words), with the bits of
    one pass; asked for a native result it is not blocked, and the result is a tensor as always."""
    torch = pytest.importorskip("torch")
    from fpreduce.core import engine

    X = np.random.default_rng(2).standard_normal((5, 700)).astype(np.float32)
    T = torch.from_numpy(X).to(torch.bfloat16)
    kw = dict(accumulate="bf16", average="premultiply")
    monkeypatch.setattr(engine, "_BLOCK_VALUES", 1 << 30)
    whole = fr.reduce(T, "ring:nccl", **kw)
    monkeypatch.setattr(engine, "_BLOCK_VALUES", 5 * 64)  # blocks of 64 columns
    calls = []
    monkeypatch.setattr(engine, "_span", lambda *a, f=engine._span: (calls.append(a), f(*a))[1])
    got = fr.reduce(T, "ring:nccl", **kw)
    assert np.array_equal(got.view(np.uint32), whole.view(np.uint32))
    assert len(calls) > 700 // 64  # the wrapper's and every block's own
    native = fr.reduce(T, "ring:nccl", result="native", **kw)
    assert isinstance(native, torch.Tensor)
    assert np.array_equal(native.float().numpy(), whole)
