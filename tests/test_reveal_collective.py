"""Reveal a collective: every plan family of the project, run by fr.reduce as a black box of (N, E)
arrays, is revealed as its own per-element trees (up to commutativity) in at most 2N calls at
E >= N^2, and verified bit for bit; the others get a verdict with evidence."""

import math

import numpy as np
import pytest

import fpreduce as fr
from fpreduce.analysis import reveal_collective as rc
from fpreduce.plans import Plan, SegmentedPlan, Split, fold, random_tree
from fpreduce.plans.ompi import default_plan


def clades(tree):
    """The leaf set of every inner node: equal for two trees exactly when they are equal up to commutativity."""
    out = set()

    def combine(a, b):
        out.add(a | b)
        return a | b

    fold(tree, lambda i: frozenset([i]), combine)
    return out


def per_element(plan, E):
    """Each element's tree under ``plan`` (the chunk it falls in) as its clades, independently of the reveal's code."""
    if isinstance(plan, Plan):
        return [clades(plan.root)] * E
    sizes = plan.split.sizes(E, len(plan.trees))
    return [c for t, s in zip(plan.trees, sizes, strict=True) if s for c in [clades(t.root)] * s]


def box(plan, fmt="fp32"):
    def fn(X):
        return fr.reduce(X, plan, input=fmt, accumulate=fmt)

    return fn


def check_revealed(plan, n, E, fmt="fp32", verify=600, seed=0):
    found = rc.collective_revelation(box(plan, fmt), n, E, format=fmt, verify=verify, seed=seed)
    assert found.verdict == "tree", found.evidence
    assert found.differing == 0
    assert found.checked >= verify
    want = per_element(plan, E)
    for r in found.runs:
        seen = clades(r.plan.root)
        assert all(seen == want[e] for e in range(r.start, r.stop)), r
    assert per_element(found.plan, E) == want
    X = np.asarray(fr.round_to(np.random.default_rng(seed).standard_normal((n, E)) * 8.0 ** np.arange(n)[:, None], fmt))
    a = fr.reduce(X, found.plan, input=fmt, accumulate=fmt)
    b = fr.reduce(X, plan, input=fmt, accumulate=fmt)
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
    return found


FAMILIES = [
    ("ring:nccl", 5),
    ("ring:mpich", 6),
    ("ring:ompi", 7),
    ("ring:gloo", 4),
    ("ring:gloo", 13),
    ("rd", 6),
    ("rabenseifner", 12),
    ("linear", 5),
    ("tree:nccl:2", 8),
    ("tree:nccl:1", 9),
    ("hier:3", 12),
    ("ring:ompi", 64),
]


@pytest.mark.parametrize(("text", "n"), FAMILIES, ids=[f"{t}-N{n}" for t, n in FAMILIES])
def test_every_collective_family_is_revealed_in_at_most_2n_calls(text, n):
    plan = fr.plans.parse(text, n)
    found = check_revealed(plan, n, n * n, seed=n)
    assert found.calls <= 2 * n
    assert text in found.families
    want = per_element(plan, n * n)
    for t in found.families:  # every family named is the same per-element trees
        other = default_plan(n, n * n, 4)[2] if t == "ompi:default" else fr.plans.parse(t, n)  # sized by the message
        assert per_element(other, n * n) == want, t


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_trees_per_chunk_are_revealed_and_cut_where_they_change(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 12))
    k = int(rng.integers(2, n + 1))
    split = Split(["even", "ceil"][seed % 2])
    trees = tuple(random_tree(n, rng) for _ in range(k))
    plan = SegmentedPlan("random", n, trees, split)
    found = check_revealed(plan, n, n * n + 3, seed=seed)
    assert found.calls <= 2 * n + 2
    assert isinstance(found.plan, SegmentedPlan)
    one = random_tree(n, rng)  # one tree everywhere: a Plan, not segments
    assert isinstance(check_revealed(one, n, 2 * n, seed=seed).plan, Plan)


def test_a_tree_per_element_is_revealed_element_by_element():
    n, E = 5, 12
    plan = fr.plans.parse("atomic", n, seed=3)
    found = rc.collective_revelation(box(plan), n, E, verify=240)
    assert (found.verdict, found.differing) == ("tree", 0)
    assert len(found.runs) > 3
    X = np.asarray(fr.round_to(np.random.default_rng(0).standard_normal((n, E)) * 2.0 ** np.arange(n)[:, None], "fp32"))
    assert np.array_equal(fr.reduce(X, found.plan), fr.reduce(X, plan))


def test_low_precision_formats():
    for fmt, n in (("bf16", 6), ("fp16", 9)):
        plan = fr.plans.parse("ring:nccl", n)
        found = check_revealed(plan, n, n * n, fmt=fmt, verify=300)
        assert found.format == fmt


def wide_ring(X):
    """ring:nccl's chunks summed in fp64, each result rounded once to fp32: not a tree in fp32."""
    y = fr.reduce(X.astype(np.float64), fr.plans.parse("ring:nccl", X.shape[0]), input="fp64", accumulate="fp64")
    return y.astype(np.float32)


def test_a_wider_accumulator_is_said_and_modelled():
    n, E = 4, 16
    found = rc.collective_revelation(wide_ring, n, E, verify=400)
    assert found.verdict == "wider accumulator"
    assert "cancellation comes back exact" in found.evidence
    assert (found.accumulate, found.differing, found.checked) == ("fp64", 0, 400)
    assert "ring:nccl" in found.families
    strict = rc.collective_revelation(wide_ring, n, E, accumulate="fp32", verify=100)
    assert (strict.verdict, strict.plan) == ("not a binary tree", None)


def test_one_rounding_of_the_exact_sum_is_no_tree():
    def fsum(X):
        return np.array([math.fsum(c) for c in X.T.tolist()], dtype=np.float32)

    found = rc.collective_revelation(fsum, 4, 8, verify=100)
    assert (found.verdict, found.plan) == ("not a binary tree", None)
    assert "cancellation comes back exact" in found.evidence
    assert found.fused  # math.fsum then float32: one rounding of the exact sum (fp64 keeps 4 summands exact)
    assert "one rounding of the exact sum explains it: 0 of 104" in found.evidence


def test_bad_functions_get_one_line():
    with pytest.raises(fr.InvalidArgument, match="vector of 8 elements"):
        rc.collective_revelation(lambda X: X.sum(), 3, 8)
    with pytest.raises(fr.InvalidArgument, match="raised ValueError"):
        rc.collective_revelation(lambda X: int("x"), 3, 8)
    with pytest.raises(fr.InvalidArgument, match="does not sum its rows"):
        rc.collective_revelation(lambda X: X.mean(axis=0), 3, 8)
    with pytest.raises(fr.InvalidArgument, match="ranks must be"):
        rc.collective_revelation(box(fr.plans.parse("rd", 3)), 0, 8)
    rng = np.random.default_rng(0)

    def shuffled(X):  # a new order of the ranks every call
        return fr.reduce(X[rng.permutation(X.shape[0])], "sequential")

    found = rc.collective_revelation(shuffled, 6, 36, verify=200)
    assert found.verdict in ("no fixed tree", "not a binary tree")
    assert found.plan is None
    with pytest.raises(fr.InvalidArgument, match="no fixed tree|not a binary tree"):
        fr.reveal_collective(shuffled, 6, 36, verify=200)


def test_cli_reveals_open_mpi_forced_ring(capsys):
    """mpirun -np 5 with the ring forced, through `fpreduce reveal mpi:ring --json` (one launch; a real gloo
    all-reduce is revealed by notebooks/07_reveal.ipynb, which tests/test_notebooks.py executes and checks)."""
    import json

    from _backends import require

    from fpreduce.cli import main

    require("mpi")
    assert main(["reveal", "mpi:ring", "--np", "5", "--n", "25", "--verify", "100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["verdict"], doc["plan"], doc["differing"], doc["checked"]) == ("tree", "ring:ompi", 0, 100)
    assert doc["calls"] <= 10
    assert [(r["start"], r["stop"]) for r in doc["runs"]] == [(0, 5), (5, 10), (10, 15), (15, 20), (20, 25)]
    assert main(["reveal", "mpi:nosuch", "--np", "5"]) == 2
    assert capsys.readouterr().err.startswith("fpreduce: error: unknown mpi algorithm")


def test_reveal_report_pdf(tmp_path, capsys):
    from fpreduce.cli import main
    from fpreduce.report.reveal import region_row, regions_note, summary_row, write_reveal_report
    from fpreduce.run.rundir import is_report

    ring = fr.plans.parse("ring:ompi", 4)
    coll = rc.collective_revelation(box(ring), 4, 16, verify=64)
    one = fr.revelation(np.sum, 40, verify=30)  # (over 32 leaves: its tree as a figure too)
    assert summary_row("ring", coll) == [
        "ring",
        "4 x 16",
        coll.calls,
        summary_row("ring", coll)[3],
        64,
        0,
        "tree",
        "ring:ompi",
    ]
    assert summary_row("numpy.sum", one)[1:3] == ["40", one.calls]
    regions = fr.analysis.reveal.hazard_map(np.sum, range(1, 12), verify=5)
    assert [region_row(r)[-2:] for r in regions] == [[10_000, 0]]  # 11 x 5, then 9945 at n = 1 and 11
    assert "1 region(s) then had their first and last values' trees run on 9945 more" in regions_note(regions, "n")
    assert "Differing in all: 0." in regions_note(regions, "n")
    out = write_reveal_report(tmp_path / "r.pdf", [("ring", coll), ("numpy.sum", one)], sweeps=[("numpy.sum", regions)])
    assert is_report(out)
    assert main(["reveal", "numpy.sum", "--n", "9", "--verify", "20", "--report", str(tmp_path / "no" / "r.pdf")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_collective_hazard_map_finds_a_fallback_by_message_size():
    """Open MPI's forced ring falls back to recursive doubling below N elements: a box with that rule."""

    def ompi_ring(X):
        n, m = X.shape
        return fr.reduce(X, fr.plans.parse("rd" if m < n else "ring:ompi", n))

    regions = rc.hazard_map(ompi_ring, 4, range(1, 11), verify=40, region_verify=200)
    assert [(r.first, r.last, r.verdict, r.family) for r in regions] == [
        (1, 3, "tree", "rd"),
        (4, 10, "tree", "ring:ompi"),
    ]
    # whole calls: 40 + 2 x 20 + 3 x 14 elements, then 39 calls of 1 and 13 of 3; 4..10 pass 200 alone
    assert [(r.checked, r.differing, r.extra) for r in regions] == [(200, 0, 78), (289, 0, 0)]
    assert sum(r.sizes for r in regions) == 10
    with pytest.raises(fr.InvalidArgument, match="ascending"):
        rc.hazard_map(ompi_ring, 4, [5, 2])


def test_ranks_map_names_the_algorithm_open_mpi_picks_at_each_world_size():
    """ompi:default (Open MPI 4.1's fixed rules) at 1024 fp32 elements: the hazard map over N names the algorithm
    of each region (the ring to 3 ranks, recursive doubling from 4: what `reveal mpi --sweep ranks=2:6` found on
    the real library here), never ompi:default, which explains every N and would hide the switch."""
    from contextlib import nullcontext

    opened = []

    def open_at(n):
        opened.append(n)
        return nullcontext(lambda X: fr.reduce(X, "ompi:default"))

    regions = rc.ranks_map(open_at, range(2, 7), 1024, verify=1024)
    assert [(r.first, r.last, r.verdict, r.family) for r in regions] == [
        (2, 3, "tree", "ring:ompi"),
        (4, 6, "tree", "rd"),
    ]
    # every N on 10^4 elements (10 calls of 1024) while its group is open: no group opened twice
    assert [(r.checked, r.differing, r.extra) for r in regions] == [(20480, 0, 0), (30720, 0, 0)]
    assert opened == [2, 3, 4, 5, 6]
    with pytest.raises(fr.InvalidArgument, match="ascending"):
        rc.ranks_map(open_at, [4, 2], 16)


def test_cli_sweeps_over_ranks_one_group_each(monkeypatch, capsys):
    """`reveal gloo --sweep ranks=...`: a live group per N (here a stand-in running gloo's plan, nothing launched)."""
    import json

    from fpreduce.backends import live
    from fpreduce.cli import main

    opened = []

    class Group:
        def __init__(self, backend, ranks, *, algorithm=None, dtype="fp32"):
            opened.append((backend, ranks, algorithm, dtype))
            self.plan = fr.plans.ring(ranks, "gloo", item_bytes=2 if dtype in ("fp16", "bf16") else 4)

        def __enter__(self):
            return lambda X: fr.reduce(X, self.plan, input=opened[-1][3], accumulate=opened[-1][3])

        def __exit__(self, *exc):
            return None

    monkeypatch.setattr(live, "LiveAllReduce", Group)
    argv = ["reveal", "gloo", "--sweep", "ranks=2:4", "--n", "64", "--format", "bf16", "--verify", "64", "--json"]
    argv += ["--region-verify", "128"]
    assert main([*argv, "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert opened == [("gloo", 2, None, "bf16"), ("gloo", 3, None, "bf16"), ("gloo", 4, None, "bf16")]
    assert (doc["sizes"], doc["at"], doc["region_verify"]) == ("ranks", 64, 128)
    assert [(r["first"], r["last"], r["family"]) for r in doc["regions"]] == [(2, 4, "ring:gloo")]  # (cut alike)
    assert [(r["checked"], r["differing"], r["extra"]) for r in doc["regions"]] == [(384, 0, 0)]  # 128 at each N


def test_a_gloo_ring_of_two_byte_elements_is_reused_by_its_expression():
    """No plan text carries gloo's element size: the CLI prints the fr.plans call that builds that ring."""
    from fpreduce.cli._reveal import _reuse

    E = 1_048_853  # gloo's segments: at least 2N, at most 1 MiB each: 4 of fp16 (2.1 MB), 6 of fp32 (4.2 MB)
    assert list(fr.plans.ring(2, "gloo", item_bytes=2).split.sizes(E, 2)) == [524_428, 524_425]
    assert list(fr.plans.ring(2, "gloo").split.sizes(E, 2)) == [524_427, 524_426]
    two = fr.plans.ring(4, "gloo", item_bytes=2)
    assert rc.families([rc.Run(0, 64, fr.plans.parse("sequential", 4))], 4, 64, "fp16").count("ring:gloo") == 0
    found = rc.families([rc.Run(s, s + 16, t) for s, t in zip(range(0, 64, 16), two.trees, strict=True)], 4, 64, "fp16")
    assert "ring:gloo" in found  # at 64 elements both cut alike: the plan text
    name, expr = _reuse(("ring:gloo (item_bytes=2)",), 4)
    assert name == "ring:gloo (item_bytes=2)"
    plan = eval(expr, {"fr": fr})  # noqa: S307 - the CLI's own output
    assert list(plan.split.sizes(E, 4)) == list(two.split.sizes(E, 4))
    assert list(plan.split.sizes(2 * E, 4)) != list(fr.plans.ring(4, "gloo").split.sizes(2 * E, 4))
    assert _reuse(("ring:mpich", "ring:gloo (item_bytes=2)"), 3) == ("ring:mpich", "'ring:mpich'")


def test_a_large_revealed_tree_is_a_figure(capsys):
    """Above 32 leaves the CLI prints the depth range, not the tree, and --report draws each leaf's depth
    (test_reveal_report_pdf writes one)."""
    from fpreduce.cli import main
    from fpreduce.report.reveal import tree_figure

    assert main(["reveal", "numpy.sum", "--n", "40", "--verify", "30"]) == 0
    out = capsys.readouterr().out
    d = fr.plans.parse("numpy", 40).depths()  # numpy's eight accumulators of five, then their tree
    assert f"tree: 40 leaves, {d.min()}..{d.max()} additions on a leaf's path (its figure: --report FILE.pdf)" in out
    fig = tree_figure("left fold", fr.revelation(lambda x: np.cumsum(x)[-1], 40, verify=30))
    (line,) = fig.axes[0].lines
    assert line.get_ydata().tolist() == [39, *range(39, 0, -1)]  # leaves 0 and 1 at the bottom, 39 at the top
