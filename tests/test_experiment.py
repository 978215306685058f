import json
import tomllib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce.core.metrics import ulp_gap
from fpreduce.run import config as cf
from fpreduce.run.policies import plan_for
from fpreduce.run.rundir import load_run
from fpreduce.run.runner import run_experiment
from fpreduce.run.sources import open_source

BASE = """
[experiment]
name = "t"
steps = 4
workers = 6
seed = 1
[source]
kind = "synthetic"
elements = 300
[[arms]]
name = "A"
order = "fixed:sequential"
input = "bf16"
accumulate = "bf16"
[[arms]]
name = "B"
order = "arrival"
input = "bf16"
accumulate = "bf16"
[[arms]]
name = "B32"
order = "arrival"
input = "bf16"
accumulate = "fp32"
"""


def cfg_from(text=BASE, **sets):
    d = tomllib.loads(text)
    for k, v in sets.items():
        table, key = k.split("__")
        d[table][key] = v
    return cf.from_dict(d)


def test_default_config_roundtrips_through_resolved_toml():
    c = cf.default_config()
    assert cf.from_dict(tomllib.loads(cf.to_toml(c))) == c
    assert c.arms[0].order.startswith("fixed:")


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        (BASE.replace("steps = 4", "stesp = 4"), "did you mean 'steps'"),
        (BASE.replace("workers = 6", "workers = 0"), "experiment.workers: must be an integer >= 1, got 0"),
        (BASE.replace('order = "arrival"', 'order = "arival"', 1), "did you mean 'arrival'"),
        (BASE.replace('order = "fixed:sequential"', 'order = "fixed:pairwse"'), "did you mean 'pairwise'"),
        (BASE.replace('accumulate = "fp32"', 'accumulate = "fp23"'), "did you mean 'fp32'"),
        (BASE.replace("steps = 4", "steps = 4.5"), "expected int"),
        (BASE.replace('name = "B32"', 'name = "B"'), "unique"),
        (BASE + "\n[extra]\n", "unknown table"),
    ],
)
def test_bad_configs_name_the_key(text, msg):
    with pytest.raises(fr.InvalidArgument, match=msg):
        cf.from_dict(tomllib.loads(text))


def test_malformed_toml_is_a_clear_error(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[experiment\nsteps=")
    with pytest.raises(fr.InvalidArgument, match="malformed TOML"):
        cf.load_config(p)


def test_order_policies():
    c = cfg_from()
    a, b = c.arms[0], c.arms[1]
    assert plan_for(c, a, 0).draw() == plan_for(c, a, 3).draw()
    orders = {tuple(plan_for(c, b, s).leaves()) for s in range(20)}
    assert len(orders) > 10  # arrival order changes from step to step
    assert plan_for(c, b, 5).leaves() == plan_for(c, c.arms[2], 5).leaves()  # same policy, same orders
    assert plan_for(c, b, 5, salt=1).leaves() != plan_for(c, b, 5).leaves()
    shuffle = cf.ArmSpec(name="S", order="shuffle:ring:nccl")
    p = plan_for(c, shuffle, 2)
    assert isinstance(p, fr.plans.SegmentedPlan)
    t = plan_for(c, cf.ArmSpec(name="T", order="random_tree"), 2)
    assert sorted(t.leaves()) == list(range(6))


def test_ab_run_measures_what_it_should(tmp_path):
    res = run_experiment(cfg_from(), tmp_path / "r")
    s = res.summary
    assert s["complete"]
    assert s["steps_done"] == 4
    arms = {a["name"]: a for a in s["arms"]}
    assert arms["A"]["reproducible"] is True
    assert arms["B"]["reproducible"] is False
    assert arms["B"]["first_divergence_step"] == 0
    assert arms["A"]["first_divergence_step"] is None
    m = res.metrics
    assert np.all(m["A"]["diff_frac"] == 0)
    assert np.all(m["B"]["diff_frac"] > 0.05)
    # the fp32 accumulator is far more accurate than bf16, by at least 4x on average
    assert np.mean(m["B32"]["err_mean_rel"]) * 4 < np.mean(m["B"]["err_mean_rel"])
    # histogram counts every element of every step once
    assert sum(arms["B"]["ulp_hist"]["counts"]) == 4 * 300
    # errors recomputed independently for one step
    X = open_source(cfg_from().source, workers=6, seed=1).gradients(2)
    Xin = fr.round_to(X, "bf16")
    y = fr.reduce(Xin, "sequential", input="bf16", accumulate="bf16")
    exact = fr.exact_sum(Xin)
    cr = exact.round("bf16")
    assert m["A"]["frac_correct"][2] == pytest.approx(np.mean(y == cr))


def test_same_config_same_bits(tmp_path):
    a = run_experiment(cfg_from(), tmp_path / "a")
    b = run_experiment(cfg_from(), tmp_path / "b")
    assert (a.dir / "metrics.csv").read_bytes() == (b.dir / "metrics.csv").read_bytes()
    assert (a.dir / "config.toml").read_bytes() == (b.dir / "config.toml").read_bytes()


def test_the_arms_metrics_on_one_thread_or_many_are_the_same_bits(tmp_path, monkeypatch):
    """The runner measures the arms on the thread pool when it may use more than one core: each arm's
    statistics are its own, so metrics.csv does not depend on the threads."""
    rows = {}
    for t in ("1", "3"):
        monkeypatch.setenv("FPREDUCE_THREADS", t)
        rows[t] = (run_experiment(cfg_from(), tmp_path / t).dir / "metrics.csv").read_bytes()
    assert rows["1"] == rows["3"]
    assert rows["1"].count(b"\n") == 1 + 4 * 3  # a header and 4 steps x 3 arms


def test_interrupted_run_is_readable_and_resumes_to_the_same_bits(tmp_path):
    full = run_experiment(cfg_from(), tmp_path / "full")

    def stop(done, total, eta):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg_from(), tmp_path / "part", progress=stop)
    part = load_run(tmp_path / "part")
    assert part.summary["complete"] is False
    assert part.summary["steps_done"] == 2
    with pytest.raises(fr.InvalidArgument, match="--resume"):
        run_experiment(cfg_from(), tmp_path / "part")
    done = run_experiment(cfg_from(), tmp_path / "part", resume=True)
    assert done.summary["complete"]
    assert (done.dir / "metrics.csv").read_bytes() == (full.dir / "metrics.csv").read_bytes()
    fa = {a["name"]: a for a in full.summary["arms"]}
    for a in done.summary["arms"]:
        assert a["ulp_hist"] == fa[a["name"]]["ulp_hist"]


def test_training_run_tracks_parameter_divergence(tmp_path):
    model = 'kind = "model"\nhidden = 16\ninputs = 8\noutputs = 4'
    text = BASE.replace('kind = "synthetic"\nelements = 300', model)
    res = run_experiment(cfg_from(text, experiment__steps=6), tmp_path / "m")
    m = res.metrics
    assert np.all(np.isfinite(m["A"]["loss"]))
    assert np.all(m["A"]["param_dist"] == 0)
    b = res.arm("B")
    assert b["first_param_divergence_step"] is not None
    assert m["B"]["param_diff_frac"][-1] > 0
    assert m["B"]["param_dist"][-1] > 0
    # resume of a training run restores the replicas' parameters exactly
    full = (res.dir / "metrics.csv").read_bytes()

    def stop(done, total, eta):
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg_from(text, experiment__steps=6), tmp_path / "m2", progress=stop)
    run_experiment(cfg_from(text, experiment__steps=6), tmp_path / "m2", resume=True)
    assert (tmp_path / "m2" / "metrics.csv").read_bytes() == full


def test_file_source_and_nan_recorded(tmp_path):
    rng = np.random.default_rng(0)
    g = rng.standard_normal((3, 6, 50)).astype(np.float32)
    g[1, 2, 7] = np.nan
    np.save(tmp_path / "g.npy", g)
    text = BASE.replace('kind = "synthetic"\nelements = 300', f'kind = "file"\npath = "{tmp_path / "g.npy"}"')
    res = run_experiment(cfg_from(text, experiment__steps=3), tmp_path / "f")
    assert res.metrics["A"]["nonfinite"].tolist() == [0, 1, 0]
    with pytest.raises(fr.InvalidArgument, match="3 steps"):
        run_experiment(cfg_from(text, experiment__steps=5), tmp_path / "f5")


def test_refuses_foreign_directory(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "precious.txt").write_text("keep")
    with pytest.raises(fr.InvalidArgument, match="not a fpreduce run directory"):
        run_experiment(cfg_from(), tmp_path / "x")
    assert (tmp_path / "x" / "precious.txt").read_text() == "keep"


def test_summary_is_json_with_versions(tmp_path):
    res = run_experiment(cfg_from(), tmp_path / "r")
    s = json.loads((res.dir / "summary.json").read_text())
    assert s["versions"]["fpreduce"] == fr.__version__
    assert s["reference"] == "A"


CHUNKED = """
[experiment]
name = "chunked"
steps = 2
workers = 128
seed = 4
[source]
kind = "synthetic"
elements = 70001
[[arms]]
name = "A"
order = "fixed:ring:nccl"
[[arms]]
name = "B"
order = "atomic"
[[arms]]
name = "B-mean"
order = "shuffle:ring:gloo"
accumulate = "fp32"
output = "bf16"
average = "after"
"""


def test_runner_chunks_give_the_bits_of_whole_vector_reductions(tmp_path):
    from fpreduce.run.runner import chunk_width

    cfg = cf.from_dict(tomllib.loads(CHUNKED))
    assert chunk_width(128) < 70001 // 2  # three chunks, the last one short
    got = {}
    res = run_experiment(cfg, tmp_path / "r", on_step=lambda step, arm, y: got.__setitem__((step, arm.name), y))
    src = open_source(cfg.source, workers=128, seed=4)
    m = res.metrics
    for step in range(2):
        Xin = fr.round_to(src.gradients(step), "bf16")
        ex = fr.exact_sum(Xin)
        ys = {}
        for arm in cfg.arms:
            y = fr.reduce(
                Xin,
                plan_for(cfg, arm, step),
                input="bf16",
                accumulate=arm.accumulate,
                output=arm.output or None,
                average=arm.average,
            )
            assert np.array_equal(got[(step, arm.name)].view(np.uint32), y.view(np.uint32))
            ys[arm.name] = y
        # the streamed metrics equal the same metrics computed on the whole vectors
        s, y = ex.hi, ys["A"].astype(np.float64)
        rel = np.abs((y - s) - ex.lo) / np.abs(s)
        assert m["A"]["err_max_rel"][step] == rel.max()
        assert m["A"]["err_mean_rel"][step] == pytest.approx(rel.mean(), rel=1e-12)
        assert m["A"]["err_median_rel"][step] == pytest.approx(np.median(rel), rel=1e-6)
        assert m["A"]["frac_correct"][step] == np.mean(ys["A"] == ex.round("bf16"))
        assert m["A"]["err_norm"][step] == pytest.approx(np.linalg.norm((y - s) - ex.lo) / np.linalg.norm(s), rel=1e-12)
        assert m["A"]["err_backward"][step] == pytest.approx(
            np.max(np.abs((y - s) - ex.lo) / np.abs(Xin.astype(np.float64)).sum(axis=0)), rel=1e-12
        )
        assert m["B"]["diff_frac"][step] == np.mean(ys["B"].view(np.uint32) != ys["A"].view(np.uint32))
        assert 0.1 < m["B"]["diff_frac"][step] < 1
        # another launch of the same job: the re-seeded order policy, over the whole vector
        y2 = fr.reduce(Xin, plan_for(cfg, cfg.arms[1], step, salt=1), input="bf16", accumulate="bf16")
        assert m["B"]["rerun_diff_frac"][step] == np.mean(y2.view(np.uint32) != ys["B"].view(np.uint32))
        assert m["B"]["rerun_ulp_max"][step] == np.max(ulp_gap(y2, ys["B"], "bf16"))
        assert m["A"]["rerun_diff_frac"][step] == m["A"]["rerun_ulp_max"][step] == 0
    arms = {a["name"]: a for a in res.summary["arms"]}
    assert arms["A"]["reproducible"] is True
    assert arms["B"]["reproducible"] is False
    assert sum(arms["B"]["ulp_hist"]["counts"]) == 2 * 70001


def test_step_metrics_against_whole_array_definitions():
    from fpreduce.core.formats import get_format
    from fpreduce.run.stepmetrics import ULP_EDGES, CompareStats, ErrorStats

    rng = np.random.default_rng(5)
    f = get_format("bf16")
    y = fr.round_to(rng.standard_normal(1000) * 2.0 ** rng.integers(-20, 20, 1000), "bf16")
    ref = y.copy()
    ref[::3] = fr.round_to(y[::3] * (1 + 2.0**-6), "bf16")  # a few ulps away
    ref[1], y[1] = 0.0, -0.0  # signed zeros: bits differ, distance 0
    y[2], ref[4], y[5], ref[5] = np.nan, np.inf, np.nan, np.nan  # NaN/Inf on one side: largest distance
    c1, c2 = CompareStats(), CompareStats()
    c1.add(y[:400], ref[:400], f)
    c1.add(y[400:], ref[400:], f)
    c2.add(y, ref, f)
    assert c1.row() == pytest.approx(c2.row(), nan_ok=True)
    assert np.array_equal(c1.hist, c2.hist)
    a, b = y.astype(np.float64), ref.astype(np.float64)
    differ = (a.view(np.uint64) != b.view(np.uint64)) & ~(np.isnan(a) & np.isnan(b))
    assert c2.row()["diff_frac"] == differ.mean()
    with np.errstate(invalid="ignore"):
        big = np.maximum(np.abs(a), np.abs(b))
        q = 2.0 ** (np.floor(np.log2(np.where(big > 0, big, 1.0))) - 7)
        d = np.where(differ, np.abs(a - b) / q, 0.0)
    d[np.isnan(d) | np.isinf(d)] = ULP_EDGES[-1]
    d[1] = 0.0
    assert c2.row()["ulp_max"] == d.max() == ULP_EDGES[-1]
    assert c2.row()["ulp_mean"] == pytest.approx(d.mean())
    assert np.array_equal(
        c2.hist, np.bincount(np.searchsorted(ULP_EDGES, np.ceil(d), side="right") - 1, minlength=len(ULP_EDGES))
    )
    assert c2.hist[0] == 1000 - differ.sum() + 1  # the equal ones and the signed zeros
    e = ErrorStats()
    hi = ref.astype(np.float64)
    e.add(y, hi, np.zeros_like(hi), ref, f)
    r = e.row()
    assert r["nonfinite"] == 2
    assert r["frac_correct"] == np.mean((y == ref) | (np.isnan(y) & np.isnan(ref)))
    ok = np.isfinite(a) & np.isfinite(b) & (b != 0)
    assert r["err_max_rel"] == np.max(np.abs(a[ok] - b[ok]) / np.abs(b[ok]))


@given(
    st.lists(
        st.one_of(
            st.floats(0, 5000), st.floats(0, 2.0**22), st.sampled_from([0.0, 1.0, 4096.0, 4097.0, 65537.0, 2.0**20])
        ),
        max_size=200,
    )
)
def test_ulp_histogram_bins_every_distance_once(ds):
    from fpreduce.run.stepmetrics import ULP_EDGES, ulp_histogram

    d = np.array(ds, dtype=np.float64)
    want = np.bincount(np.searchsorted(ULP_EDGES, np.ceil(d), side="right") - 1, minlength=len(ULP_EDGES))
    assert np.array_equal(ulp_histogram(d), want)


# --- compare_to: like with like -------------------------------------------------------------------

TWINS = (
    BASE
    + """[[arms]]
name = "A32"
order = "fixed:pairwise"
input = "bf16"
accumulate = "fp32"
[[arms]]
name = "T"
order = "fixed:pairwise"
input = "bf16"
accumulate = "bf16"
[[arms]]
name = "F"
order = "arrival"
input = "fp32"
accumulate = "fp32"
"""
)


def test_compare_to_defaults_to_the_fixed_order_twin():
    c = cfg_from(TWINS)
    got = {a.name: a.compare_to for a in c.arms}
    # B32 has a fixed twin only further down (A32); T is fixed with A's arithmetic: A is its twin;
    # F has no fixed twin: the first arm
    assert got == {"A": "A", "B": "A", "B32": "A32", "A32": "A32", "T": "A", "F": "A"}
    assert cf.from_dict(tomllib.loads(cf.to_toml(c))) == c  # written out, parsed back the same
    assert 'compare_to = "A32"' in cf.to_toml(c)
    explicit = cfg_from(TWINS.replace('name = "F"\n', 'name = "F"\ncompare_to = "B32"\n'))
    assert explicit.arms[-1].compare_to == "B32"


def test_compare_to_an_unknown_arm_is_a_clear_error():
    with pytest.raises(fr.InvalidArgument, match=r"arms.B.compare_to arm 'AA'; did you mean 'A'"):
        cfg_from(BASE.replace('name = "B"\n', 'name = "B"\ncompare_to = "AA"\n'))


def test_divergence_is_measured_against_compare_to(tmp_path):
    cfg = cfg_from(TWINS, experiment__steps=2)
    got = {}
    res = run_experiment(cfg, tmp_path / "r", on_step=lambda step, arm, y: got.__setitem__((step, arm.name), y))
    arms = {a["name"]: a for a in res.summary["arms"]}
    assert {k: (a["compare_to"], a["compared_in"]) for k, a in arms.items()} == {
        "A": ("A", "bf16"),
        "B": ("A", "bf16"),
        "B32": ("A32", "fp32"),
        "A32": ("A32", "fp32"),
        "T": ("A", "bf16"),
        "F": ("A", "fp32"),  # fp32 against bf16: measured in the wider format
    }
    m = res.metrics
    for step in range(2):
        y, twin = got[(step, "B32")], got[(step, "A32")]
        assert m["B32"]["diff_frac"][step] == np.mean(y.view(np.uint32) != twin.view(np.uint32))
        assert m["B32"]["ulp_max"][step] == np.max(ulp_gap(y, twin, "fp32"))
        assert m["T"]["diff_frac"][step] == np.mean(
            got[(step, "T")].view(np.uint32) != got[(step, "A")].view(np.uint32)
        )
        assert m["F"]["ulp_max"][step] == np.max(ulp_gap(got[(step, "F")], got[(step, "A")], "fp32"))
    assert np.all(m["A32"]["diff_frac"] == 0)  # its own twin


def test_rerun_columns_and_reproducible_survive_resume(tmp_path):
    """rerun_* is 0 for fixed orders by construction, > 0 for a changing order; `reproducible` derives from
    it over all steps, so an interrupted run resumed (and a complete run resumed) keeps it."""
    cfg = cfg_from(TWINS)
    full = run_experiment(cfg, tmp_path / "full")
    m = full.metrics
    for name in ("A", "A32", "T"):
        assert cfg.arms[[a.name for a in cfg.arms].index(name)].policy.kind == "fixed"
        assert np.all(m[name]["rerun_diff_frac"] == 0)
        assert np.all(m[name]["rerun_ulp_max"] == 0)
    assert np.all(m["B"]["rerun_diff_frac"] > 0.05)
    assert np.all(m["B"]["rerun_ulp_max"] >= 1)
    want = {a["name"]: a["reproducible"] for a in full.summary["arms"]}
    assert want == {"A": True, "B": False, "B32": True, "A32": True, "T": True, "F": False}

    def stop(done, total, eta):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path / "part", progress=stop)
    assert {a["name"]: a["reproducible"] for a in load_run(tmp_path / "part").summary["arms"]} == want
    for _ in range(2):  # resume the interrupted run, then resume the complete run
        res = run_experiment(cfg, tmp_path / "part", resume=True)
        assert {a["name"]: a["reproducible"] for a in res.summary["arms"]} == want
        assert (res.dir / "metrics.csv").read_bytes() == (full.dir / "metrics.csv").read_bytes()


def test_a_fixed_order_is_the_same_plan_when_re_seeded():
    """Why the re-run of a fixed-order arm is not computed: its policy ignores the seed."""
    cfg = cfg_from(TWINS)
    for arm in cfg.arms:
        if arm.policy.kind == "fixed":
            for step in range(3):
                assert plan_for(cfg, arm, step, salt=1) == plan_for(cfg, arm, step)
