import csv

import pytest

import fpreduce as fr
from fpreduce.cli import main
from fpreduce.report import plots
from fpreduce.run.rundir import SWEEP_COLUMNS
from fpreduce.run.sweep import load_sweep_config, run_sweep

SWEEP = """
[experiment]
name = "sw"
steps = 2
seed = 3
[source]
kind = "synthetic"
elements = 256
[sweep]
workers = [2, 4, 8]
plans = ["sequential", "ring:nccl"]
formats = ["bf16:bf16", "bf16:fp32"]
"""


def test_sweep_grid_and_table(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP)
    base, points = load_sweep_config(cfg)
    assert len(points) == 3 * 2 * 2
    assert {p.experiment.workers for p in points} == {2, 4, 8}
    table = run_sweep(cfg, tmp_path / "out", jobs=1)
    rows = list(csv.DictReader(table.read_text().splitlines()))
    assert tuple(rows[0]) == SWEEP_COLUMNS
    assert len(rows) == 2 * len(points)
    b = {(int(r["workers"]), r["plan"], r["accumulate"]): r for r in rows if r["arm"] == "B"}
    # re-ranking changes bits in bf16 for N >= 4, and a sequential fold of 2 workers is one addition
    assert float(b[(8, "sequential", "bf16")]["mean_diff_frac"]) > 0.05
    assert float(b[(2, "sequential", "bf16")]["mean_diff_frac"]) == 0.0
    # an fp32 accumulator is more accurate than a bf16 one at every N
    for n in (4, 8):
        assert float(b[(n, "ring:nccl", "fp32")]["mean_err_rel"]) < float(b[(n, "ring:nccl", "bf16")]["mean_err_rel"])


def test_sweep_cli_writes_figures_and_report(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP.replace("[2, 4, 8]", "[2, 4]"))
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "report.pdf").read_bytes().startswith(b"%PDF")
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        (SWEEP.replace("[sweep]", "[swep]"), r"needs a \[sweep\] table"),
        (SWEEP.replace("workers = [2, 4, 8]", "workrs = [2]"), "did you mean 'workers'"),
        (SWEEP.replace('"bf16:fp32"', '"bf16"'), "input:accumulate"),
        (SWEEP.replace("[2, 4, 8]", "[0, 2]"), r"sweep.workers\[0\]: must be an integer >= 1, got 0"),
        (SWEEP.replace("[2, 4, 8]", "[true, 2]"), r"sweep.workers\[0\]: expected integer, got True"),
        (SWEEP.replace("[2, 4, 8]", "[2.5]"), r"s.toml: sweep.workers\[0\]: expected integer, got 2.5"),
        (SWEEP + 'dists = ["normal", "lognormall"]\n', "did you mean 'lognormal'"),
        (SWEEP + "dists = []\n", "sweep.dists: empty"),
        (
            SWEEP.replace('kind = "synthetic"\nelements = 256', 'kind = "model"') + 'dists = ["normal"]\n',
            "synthetic source",
        ),
    ],
)
def test_bad_sweeps(tmp_path, text, msg):
    cfg = tmp_path / "s.toml"
    cfg.write_text(text)
    with pytest.raises(fr.InvalidArgument, match=msg):
        load_sweep_config(cfg)


def test_sweep_over_data_distributions(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(
        SWEEP.replace("[2, 4, 8]", "[4, 8]").replace('plans = ["sequential", "ring:nccl"]', 'plans = ["sequential"]')
        + 'dists = ["normal", "lognormal"]\n'
    )
    _, points = load_sweep_config(cfg)
    assert sorted({p.source.dist for p in points}) == ["lognormal", "normal"]
    assert len({p.experiment.name for p in points}) == len(points) == 2 * 2 * 2
    table = run_sweep(cfg, tmp_path / "out", jobs=1)
    rows = list(csv.DictReader(table.read_text().splitlines()))
    err = {(r["dist"], int(r["workers"]), r["accumulate"]): float(r["mean_err_rel"]) for r in rows if r["arm"] == "A"}
    assert {k[0] for k in err} == {"normal", "lognormal"}
    # the data changes the error: swamping by heavy-tailed magnitudes vs a normal sum
    assert err[("lognormal", 8, "bf16")] != err[("normal", 8, "bf16")]
    assert plots.plot_sweep(tmp_path / "out", formats=("png",))


def test_sweep_set_overrides_keys_like_run_set(tmp_path, capsys):
    """`sweep --set` takes run's keys (experiment.steps, source.elements) and the grid's (sweep.workers)."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP)
    base, points = load_sweep_config(cfg, ["experiment.steps=1", "source.elements=64", "sweep.workers=[2]"])
    assert {(p.experiment.steps, p.source.elements, p.experiment.workers) for p in points} == {(1, 64, 2)}
    assert len(points) == 4
    with pytest.raises(fr.InvalidArgument, match="did you mean 'steps'"):
        load_sweep_config(cfg, ["experiment.stesp=1"])
    with pytest.raises(fr.InvalidArgument, match="a sweep's arms are its grid's A and B"):
        load_sweep_config(cfg, ["arms.B.accumulate=fp32"])
    argv = ["sweep", str(cfg), "--out", str(tmp_path / "o"), "--no-report", "-q"]
    assert (
        main(
            [*argv, "--set", "sweep.workers=[2]", "--set", "sweep.plans=['sequential']", "--set", "experiment.steps=1"]
        )
        == 0
    )
    rows = list(csv.DictReader((tmp_path / "o" / "sweep.csv").read_text().splitlines()))
    assert {(r["workers"], r["plan"]) for r in rows} == {("2", "sequential")}
    assert main([*argv, "--force", "--set", "sweep.workers=2x"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("fpreduce: error: --set sweep.workers")
