"""Reveal: black boxes whose tree is known are revealed as that tree, verified; the others get a verdict."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce.analysis import reveal as rv
from fpreduce.cli import main
from fpreduce.plans import fold


def scalar_fold(plan, fmt):
    """A black box summing along ``plan`` one scalar addition at a time (numpy / ml_dtypes scalars of the
    format: float32 holds every sum of two fp16 or bf16 values to well within double-rounding safety)."""

    def fn(x):
        return fold(plan.root, lambda i: x[i], lambda a, b: a + b)

    return fn


def engine_box(plan, fmt):
    """fr.reduce itself as the black box (one column)."""

    def fn(x):
        return fr.reduce(x[:, None], plan, input=fmt, accumulate=fmt)[0]

    return fn


def same_tree(a, b):
    return rv._key(a) == rv._key(b)


@pytest.mark.parametrize("text", ["sequential", "reverse", "pairwise", "numpy", "kary:3", "blocked:5", "rd"])
@pytest.mark.parametrize("n", [2, 3, 7, 33, 100])
def test_known_plans_are_revealed_exactly(text, n):
    plan = fr.plans.parse(text, n)
    found = rv.revelation(scalar_fold(plan, "fp32"), n, verify=60, seed=n)
    assert found.verdict == "tree"
    assert (found.differing, found.checked) == (0, 60)
    assert same_tree(found.plan, plan)
    families = rv.match_family(found.plan)
    assert text in families or (n < 4 and families)  # (kary:3 at n = 2 is the one tree there, named otherwise)
    assert all(same_tree(fr.plans.parse(f, n), plan) for f in families)


@pytest.mark.parametrize("text", ["sequential", "pairwise", "kary:4"])
def test_basic_method_agrees_and_counts_all_pairs(text):
    n = 13
    plan = fr.plans.parse(text, n)
    found = rv.revelation(scalar_fold(plan, "fp32"), n, method="basic", verify=30)
    assert same_tree(found.plan, plan)
    assert found.calls == 1 + n * (n - 1) // 2


def test_engine_as_black_box_in_bf16_and_fp16():
    for fmt, n in (("bf16", 40), ("fp16", 61)):
        plan = fr.plans.random_tree(n, np.random.default_rng(n))
        found = rv.revelation(engine_box(plan, fmt), n, format=fmt, verify=200)
        assert found.verdict == "tree", found.evidence
        assert same_tree(found.plan, plan)


@settings(max_examples=max(5, settings.default.max_examples // 2))
@given(
    n=st.integers(2, 48),
    seed=st.integers(0, 2**32 - 1),
    fmt=st.sampled_from(["fp32", "bf16", "fp16", "fp64"]),
)
def test_random_trees_are_revealed_up_to_commutativity(n, seed, fmt):
    plan = fr.plans.random_tree(n, np.random.default_rng(seed))
    found = rv.revelation(scalar_fold(plan, fmt), n, format=fmt, verify=40, seed=seed)
    assert found.verdict == "tree"
    assert same_tree(found.plan, plan)
    assert found.calls <= 1 + n * (n - 1) // 2
    X = rv._random_inputs(fr.get_format(fmt), n, 20, np.random.default_rng(seed))
    got = fr.reduce(X.T, found.plan, input=fmt, accumulate=fmt)
    want = fr.reduce(X.T, plan, input=fmt, accumulate=fmt)
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_numpy_sum_is_the_numpy_plan_verified_on_ten_thousand_inputs():
    n = 1000
    found = rv.revelation(np.sum, n)
    assert found.verdict == "tree"
    assert (found.differing, found.checked) == (0, 10_000)
    assert rv.match_family(found.plan) == ["numpy"]
    assert found.calls <= n * np.log2(n)


def wide_sum(x):
    """numpy's pairwise sum in fp64 of fp32 inputs, rounded once to fp32."""
    return np.float32(np.sum(x.astype(np.float64)))


def test_wider_accumulation_is_not_a_binary_tree_in_the_format():
    for method in rv.METHODS:
        found = rv.revelation(wide_sum, 50, accumulate="fp32", method=method)
        assert found.verdict == "not a binary tree"
        assert found.plan is None
        assert "cancellation comes back exact" in found.evidence
    with pytest.raises(rv.NotATree, match="cancellation comes back exact") as e:
        fr.reveal(wide_sum, 20)
    assert e.value.revelation.verdict == "wider accumulator"


def test_a_wider_accumulator_is_revealed_and_verified():
    found = rv.revelation(wide_sum, 50, verify=2000)
    assert found.verdict == "wider accumulator"
    assert (found.format, found.accumulate, found.checked, found.differing) == ("fp32", "fp64", 2000, 0)
    assert rv.match_family(found.plan) == ["numpy"]
    assert same_tree(fr.reveal(wide_sum, 50, accumulate="fp64", verify=100), fr.plans.numpy_pairwise(50))
    fp16 = rv.revelation(np.sum, 300, format="fp16", verify=2000)  # numpy sums float16 in float32
    assert (fp16.verdict, fp16.accumulate, fp16.differing) == ("wider accumulator", "fp32", 0)
    assert rv.match_family(fp16.plan) == ["numpy"]


def test_one_rounding_of_the_exact_sum_is_no_tree():
    found = rv.revelation(lambda x: np.float32(math.fsum(x.tolist())), 30, verify=500)
    assert found.verdict == "not a binary tree"
    assert "exact in fp64 too" in found.evidence
    # modelled as a fused addition of all 30 terms, checked against fr.reduce(..., algorithm="exact"): math.fsum
    # rounds to fp64 first, so a double rounding could flip a last bit; none of these inputs does
    assert found.fused
    assert "one rounding of the exact sum explains it: 0 of 500" in found.evidence


def test_a_fused_node_inside_a_tree_is_no_plan():
    def fused_pairs(x):  # ((x0 + x1 + x2) rounded once) + the rest, left to right in fp32
        s = np.float32(math.fsum(x[:3].tolist()))
        for v in x[3:]:
            s = np.float32(s + v)
        return s

    for method in rv.METHODS:
        found = rv.revelation(fused_pairs, 8, verify=200, method=method, seed=2)
        assert (found.verdict, found.plan, found.fused) == ("not a binary tree", None, False)
        assert "a fused 3-term addition" in found.evidence, (method, found.evidence)


def test_a_fused_three_term_node_is_named():
    # L of the tree ((0, 1, 2), 3): a node adding three terms at once
    L = rv._sizes_of(((0, 1, 2), 3), 4)
    assert L[0, 1] == L[1, 2] == 3
    assert L[0, 3] == 4
    root = rv._join_by_size(L)
    assert "more than two terms" in rv._multiway(root)


def test_probe_scale_absorbs_in_the_format_only():
    for fmt in ("fp32", "fp16", "bf16", "fp64", "fp8_e4m3"):
        f = fr.get_format(fmt)
        for n in (3, min(17, 2**f.precision), min(2**f.precision, 2048)):
            u, M = rv.probe_scale(f, n)
            assert f.max_finite >= M
            assert u >= 2.0**f.emin
            for s in (M, -M):
                assert fr.round_to(np.array([s + (n - 2) * u]), f)[0] == s
            if f.precision < 53:
                assert M + (n - 2) * u != M or n == 2  # in fp64 the units stay


def test_bad_functions_and_arguments_are_one_line():
    with pytest.raises(fr.InvalidArgument, match="one scalar"):
        fr.reveal(lambda x: x, 8)
    with pytest.raises(fr.InvalidArgument, match="raised ZeroDivisionError"):
        fr.reveal(lambda x: 1 / 0, 8)
    with pytest.raises(fr.InvalidArgument, match="does not sum"):
        fr.reveal(np.mean, 8)
    with pytest.raises(fr.InvalidArgument, match="n must be 1..256"):
        fr.reveal(np.sum, 300, format="bf16")
    with pytest.raises(fr.InvalidArgument, match="reveal method"):
        fr.reveal(np.sum, 8, method="fastest")
    rng = np.random.default_rng(0)

    def shuffled(x):  # a different order every call
        return np.sum(x[rng.permutation(x.size)])

    found = rv.revelation(shuffled, 64, verify=200)
    assert found.verdict in ("no fixed tree", "not a binary tree")
    assert found.plan is None


def test_cli_reveal(capsys):
    assert main(["reveal", "numpy.sum", "--n", "20", "--verify", "500"]) == 0
    out = capsys.readouterr().out
    assert "family: numpy" in out
    assert "0 of 500" in out
    assert "plan: numpy" in out
    assert main(["reveal", "math:fsum", "--n", "10", "--verify", "100"]) == 1
    assert "cancellation comes back exact" in capsys.readouterr().out
    assert main(["reveal", "numpy.nosuch", "--n", "10"]) == 2
    assert capsys.readouterr().err.startswith("fpreduce: error: unknown reveal target")
    assert main(["reveal", "numpy.sum", "--n", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fpreduce: error: n must be")
    assert err.count("\n") == 1


def test_a_left_fold_of_1024_takes_at_most_n_log2_n_calls():
    n = 1024
    found = rv.revelation(lambda x: np.cumsum(x)[-1], n, verify=200)  # numpy's cumsum: one running sum
    assert rv.match_family(found.plan)[0] == "sequential"
    assert found.calls <= n * np.log2(n) / 3  # 2n to 3n by the pivots drawn


def test_numpy_sum_is_the_numpy_plan_at_every_n_to_130():
    """n < 8 in order, 8..128 eight strided accumulators, above 128 halves: each regime and its edges."""
    for n in range(1, 131):
        found = rv.revelation(np.sum, n, verify=24, seed=n)
        assert found.verdict == "tree"
        assert "numpy" in rv.match_family(found.plan) or n == 1


def test_hazard_map_groups_the_sizes_one_explanation_covers(capsys):
    def switch(x):  # a left fold up to 16 values, numpy's tree beyond
        return np.cumsum(x)[-1] if x.size <= 16 else np.sum(x)

    regions = rv.hazard_map(switch, range(2, 41), verify=20, region_verify=400)
    assert [(r.first, r.last, r.family) for r in regions] == [(2, 16, "sequential"), (17, 40, "numpy")]
    assert sum(r.sizes for r in regions) == 39
    # 15 x 20 inputs, then 50 more at n = 2 and 50 at n = 16; 24 x 20 reach 400 alone
    assert [(r.checked, r.differing, r.extra) for r in regions] == [(400, 0, 100), (480, 0, 0)]
    with pytest.raises(fr.InvalidArgument, match="ascending"):
        rv.hazard_map(np.sum, [5, 3])
    assert main(["reveal", "numpy.sum", "--sweep", "1:40:3", "--verify", "20"]) == 0
    out = capsys.readouterr().out
    (row,) = [line.split() for line in out.splitlines() if line.startswith("1..40")]
    assert row == ["1..40", "tree", "fp32", "numpy", "10000", "0"]  # 14 x 20, then 9720 at n = 1 and 40
    assert (
        "20 at each value of n, then 1 region(s) on 9720 more at their first and last n; the 1 region(s) with a "
        "tree: 10000 each (target 10000); 0 differing in any bit" in out
    )
    assert main(["reveal", "numpy.sum", "--sweep", "9:3"]) == 2
    assert "FIRST:LAST" in capsys.readouterr().err


def test_each_region_is_verified_on_many_inputs_where_the_data_decide():
    """Issue 28: a hazard map checks each value on a few inputs, then each region's trees at its first and last
    values until the region has region_verify in all: a box whose tree the data decide, on about 1% of random
    inputs and never on a probe, passes the few and fails the many ('no fixed tree', with its counts)."""
    from collections import Counter

    sizes: Counter[int] = Counter()

    def rare(x):  # a left fold, reversed when |x[0]| lies in [1.9, 2) (probes hold units and +-M only)
        sizes[x.size] += 1
        return np.cumsum(x[::-1] if 1.9 <= abs(float(x[0])) < 2 else x)[-1]

    (few,) = rv.hazard_map(rare, range(8, 11), verify=2, region_verify=0)
    assert (few.verdict, few.family, few.checked, few.differing, few.extra) == ("tree", "sequential", 6, 0, 0)
    before = sizes.copy()
    (many,) = rv.hazard_map(rare, range(8, 11), verify=2, region_verify=1000)
    assert (many.verdict, many.family, many.checked, many.extra) == ("no fixed tree", "sequential", 1000, 994)
    assert 0 < many.differing < 100
    assert set(sizes - before - before) == {8, 10}  # the extra inputs went to the first and last n only
    left = rv.knob_map(lambda v: lambda x: np.cumsum(x)[-1], [1, 2], 8, verify=3, region_verify=40)
    assert [(r.verdict, r.checked, r.differing, r.extra) for r in left] == [("tree", 40, 0, 34)]


def test_matmul_targets_reduce_over_k():
    """(torch on one thread: a 5 x 24 matmul on its default threads waited ~30 ms a call for them on a loaded
    machine; the threads are `--sweep threads=`'s business, test_cli_sweeps_over_threads_and_batch)"""
    from fpreduce.cli._reveal import target

    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name in ("numpy.matmul", "torch.matmul"):
            for batch in (1, 5):
                found = rv.revelation(target(name, batch), 24, verify=100)
                assert found.verdict == "tree", (name, batch, found.evidence)
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(fr.InvalidArgument, match="--batch"):
        target("numpy.matmul", 0)


def test_cli_reveal_json(capsys):
    import json

    assert main(["reveal", "numpy.sum", "--n", "12", "--verify", "50", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["verdict"], doc["plan"], doc["checked"], doc["differing"]) == ("tree", "numpy", 50, 0)
    assert fr.plans.parse(doc["plan"], 12).n == 12
    assert main(["reveal", "math:fsum", "--n", "12", "--verify", "50", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["plan"] is None


def test_knob_map_splits_where_the_tree_changes_at_one_n():
    """A knob (threads, batch rows) that changes the tree at one n: values with the same tree share a region,
    named by its family or, when none names it, 'tree k' by the tree itself (never merged by a blank name)."""
    n = 12
    trees = {seed: fr.plans.random_tree(n, np.random.default_rng(seed)) for seed in (5, 6)}
    assert not rv.match_family(trees[5])
    assert not rv.match_family(trees[6])
    assert not same_tree(trees[5], trees[6])

    def fn_at(v):
        if v >= 8:
            return lambda x: np.cumsum(x)[-1]
        return scalar_fold(trees[5 if v <= 2 else 6], "fp32")

    found = rv.knob_map(fn_at, [1, 2, 4, 8, 16], n, verify=12, region_verify=50)
    assert [(r.first, r.last, r.family, r.sizes, r.checked, r.extra) for r in found] == [
        (1, 2, "tree 1", 2, 50, 26),
        (4, 4, "tree 2", 1, 50, 38),  # one value: all its extra inputs
        (8, 16, "sequential", 2, 50, 26),
    ]
    with pytest.raises(fr.InvalidArgument, match="ascending"):
        rv.knob_map(fn_at, [2, 1], n)


def test_cli_sweeps_over_threads_and_batch(capsys):
    import json

    few = ["--verify", "12", "--region-verify", "100", "-q"]  # (each region: 2 x 12, then 38 at each end)
    assert main(["reveal", "torch.sum", "--n", "24", "--sweep", "threads=1,2", *few, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["sizes"], doc["at"], [r["sizes"] for r in doc["regions"]]) == ("threads", 24, [2])  # one grain
    assert (doc["region_verify"], [(r["checked"], r["extra"]) for r in doc["regions"]]) == (100, [(100, 76)])
    assert main(["reveal", "numpy.matmul", "--n", "16", "--sweep", "batch=1:2", *few]) == 0
    out = capsys.readouterr().out
    assert "batch = 1:2 at 16 summands" in out
    assert main(["reveal", "numpy.sum", "--n", "100", "--sweep", "stride=1,3", *few, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # numpy sums a strided vector along the same tree
    assert [(r["first"], r["last"], r["family"]) for r in doc["regions"]] == [(1, 3, "numpy")]
    for argv, error in (
        (["numpy.sum", "--n", "8", "--sweep", "threads=1,2"], "numpy.sum has no thread knob"),
        (["torch.sum", "--sweep", "threads=1,2"], "it takes --n N"),
        (["torch.sum", "--n", "8", "--sweep", "batch=1,2"], "is for numpy.matmul and torch.matmul"),
        (["numpy.matmul", "--n", "8", "--sweep", "stride=1,2"], "takes a matrix row"),
        (["torch.sum", "--n", "8", "--sweep", "thread=1,2"], "did you mean 'threads'"),
        (["torch.sum", "--n", "8", "--sweep", "threads=4,2"], "ascending numbers"),
        (["numpy.sum", "--sweep", "ranks=2:4"], "unknown --sweep axis of numpy.sum"),
        (["gloo", "--np", "3", "--sweep", "ranks=2:4"], "leave out --np"),
        (["mpi", "--sweep", "ranks=1:4"], "in 2..64"),
        (["gloo", "--sweep", "1:4"], "takes --np K"),
        (["numpy.sum", "--n", "8", "--region-verify", "50"], "--region-verify is a number >= 0 of inputs for --sweep"),
        (["numpy.sum", "--sweep", "1:4", "--region-verify", "-1"], "got -1"),
        (["numpy.sum", "--n", "8", "--seed", "-1"], "seed must be an integer >= 0"),
    ):
        assert main(["reveal", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("fpreduce: error: "), (argv, err)
        assert error in err, (argv, err)
        assert err.count("\n") == 1
